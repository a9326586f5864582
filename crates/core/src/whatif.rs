//! What-if analysis of a policy on the virtual clock (`weir sim`).
//!
//! Every leaf class gets `flows` always-backlogged synthetic sessions (closed-loop window
//! sources of `size`-byte frames, see [`crate::sim`]); packets are injected already
//! classified, so the result isolates what the scheduler and queues do with the policy.
//! Classes or single sessions can be silenced for a while (`idle`) to watch borrowing.
//! The report gives, per class (inner classes as the sum of their leaves), the assured
//! rate, ceil, delivered rate and each session's delivered rate, plus Jain's index among
//! a leaf's sessions and the link utilisation.

use crate::policy::Policy;
use crate::rng::mix64;
use crate::sim::{self, SessionSpec, SimConfig, Source};
use crate::stats::jain;
use crate::time::{Duration, Instant};
use serde::Serialize;

/// Silence a class (every session) or one session of it during `[from, to)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Idle {
    pub class: String,
    /// 1-based session number within the class; `None` = all sessions.
    pub session: Option<u32>,
    pub from: Duration,
    pub to: Duration,
}

impl Idle {
    /// Parse `CLASS@FROM-TO` or `CLASS#K@FROM-TO`, times with units ("b@5s-10s").
    pub fn parse(s: &str) -> Result<Idle, String> {
        let (who, span) = s.split_once('@').ok_or_else(|| {
            format!("--idle '{s}': expected CLASS@FROM-TO or CLASS#K@FROM-TO, e.g. ftp@5s-10s")
        })?;
        let (class, session) = match who.split_once('#') {
            None => (who.to_string(), None),
            Some((c, k)) => {
                let k: u32 = k.parse().ok().filter(|&k| k >= 1).ok_or_else(|| {
                    format!("--idle '{s}': session number '{k}' must be 1 or more")
                })?;
                (c.to_string(), Some(k))
            }
        };
        let (a, b) = span
            .split_once('-')
            .ok_or_else(|| format!("--idle '{s}': expected a time range FROM-TO, e.g. 5s-10s"))?;
        let t = |x: &str| {
            crate::units::parse_duration(x.trim()).map_err(|e| format!("--idle '{s}': {e}"))
        };
        let (from, to) = (Duration(t(a)?), Duration(t(b)?));
        if to <= from {
            return Err(format!("--idle '{s}': the range ends before it starts"));
        }
        Ok(Idle {
            class,
            session,
            from,
            to,
        })
    }
}

#[derive(Clone, Debug)]
pub struct WhatIf {
    pub duration: Duration,
    /// Measurement starts after this (default 0).
    pub warmup: Duration,
    pub flows: u32,
    pub size: u32,
    /// Packets each session keeps inside the device; one value for all, or one per
    /// session number (cycled) to give sessions unequal aggressiveness.
    pub windows: Vec<u32>,
    pub idle: Vec<Idle>,
    pub seed: u64,
    /// Width of the time series buckets in the report (0 = no series).
    pub interval: Duration,
}

impl Default for WhatIf {
    fn default() -> Self {
        WhatIf {
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            flows: 1,
            size: 1514,
            windows: vec![8],
            idle: vec![],
            seed: 1,
            interval: Duration::ZERO,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassReport {
    pub name: String,
    pub parent: Option<String>,
    pub leaf: bool,
    pub rate_bps: u64,
    pub ceil_bps: u64,
    pub delivered_bps: f64,
    /// Delivered rate of each session (leaves only).
    pub sessions_bps: Vec<f64>,
    /// Jain's fairness index among the sessions (leaves with ≥ 1 session).
    pub jain: Option<f64>,
    pub dropped_packets: u64,
    /// Longest delay from the end of an `idle` interval of this class (or one of its
    /// sessions) to that session's next delivery, in seconds (leaves with idle periods).
    pub resume_delay_s: Option<f64>,
    /// Delivered bits/s per interval (when requested).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series_bps: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WhatIfReport {
    pub technique: String,
    pub link_bps: u64,
    pub duration_s: f64,
    pub measured_s: f64,
    pub flows_per_class: u32,
    pub frame_bytes: u32,
    pub delivered_bps: f64,
    pub utilisation: f64,
    pub classes: Vec<ClassReport>,
}

pub fn run(policy: &Policy, w: &WhatIf) -> Result<WhatIfReport, String> {
    if w.flows == 0 {
        return Err("--flows must be at least 1".into());
    }
    if w.size < 60 || w.size > policy.mtu.max(60) {
        return Err(format!(
            "--size {} is outside 60..={} bytes (the policy's mtu)",
            w.size, policy.mtu
        ));
    }
    if w.windows.is_empty() || w.windows.contains(&0) {
        return Err("windows must be at least 1 packet".into());
    }
    for i in &w.idle {
        match policy.class_index(&i.class) {
            None => return Err(format!("--idle: no class named '{}'", i.class)),
            Some(c) if !policy.classes[c].leaf => {
                return Err(format!(
                    "--idle: '{}' has children; name a leaf class",
                    i.class
                ))
            }
            _ => {}
        }
        if i.session.is_some_and(|k| k > w.flows) {
            return Err(format!(
                "--idle: class '{}' has only {} sessions",
                i.class, w.flows
            ));
        }
    }
    let mut pipe = policy.build(Instant::ZERO)?;
    let mut sessions = Vec::new();
    let mut owner = Vec::new();
    for leaf in policy.leaves() {
        let name = &policy.classes[leaf].name;
        for k in 1..=w.flows {
            let idle = w
                .idle
                .iter()
                .filter(|i| &i.class == name && i.session.is_none_or(|s| s == k))
                .map(|i| (Instant(i.from.as_nanos()), Instant(i.to.as_nanos())))
                .collect();
            sessions.push(SessionSpec {
                class: leaf as u32,
                flow: mix64((((leaf as u64) << 32) | k as u64) ^ w.seed.rotate_left(17)),
                size: w.size,
                source: Source::Window(w.windows[(k as usize - 1) % w.windows.len()]),
                idle,
            });
            owner.push(leaf);
        }
    }
    let interval = if w.interval.as_nanos() == 0 {
        w.duration
    } else {
        w.interval
    };
    let cfg = SimConfig {
        duration: w.duration,
        warmup: w.warmup,
        interval,
        seed: w.seed,
        ..Default::default()
    };
    let sched = pipe.shaper_mut().ok_or("the policy built no shaper")?;
    let res = sim::run(sched, &sessions, &cfg)?;
    sched.check_counters()?;
    let measured = res.measured.as_secs_f64();
    let nint = res.sessions.first().map_or(0, |s| s.series.len());
    let mut classes: Vec<ClassReport> = policy
        .classes
        .iter()
        .map(|c| ClassReport {
            name: c.name.clone(),
            parent: c.parent.map(|p| policy.classes[p].name.clone()),
            leaf: c.leaf,
            rate_bps: c.rate,
            ceil_bps: c.ceil,
            delivered_bps: 0.0,
            sessions_bps: vec![],
            jain: None,
            dropped_packets: 0,
            resume_delay_s: None,
            series_bps: if w.interval.as_nanos() > 0 {
                vec![0.0; nint]
            } else {
                vec![]
            },
        })
        .collect();
    let ibits = 8.0 / interval.as_secs_f64();
    for (i, s) in res.sessions.iter().enumerate() {
        let bps = res.session_bps(i);
        let leaf = owner[i];
        classes[leaf].sessions_bps.push(bps);
        for d in &s.resume_delay {
            // a session that never delivered again counts as the whole run
            let secs = d.map_or(w.duration.as_secs_f64(), |d| d.as_secs_f64());
            let r = &mut classes[leaf].resume_delay_s;
            *r = Some(r.map_or(secs, |x: f64| x.max(secs)));
        }
        // credit the leaf and every ancestor
        let mut c = Some(leaf);
        while let Some(k) = c {
            classes[k].delivered_bps += bps;
            classes[k].dropped_packets += s.dropped.packets;
            for (j, &b) in s.series.iter().enumerate() {
                if let Some(x) = classes[k].series_bps.get_mut(j) {
                    *x += b as f64 * ibits;
                }
            }
            c = policy.classes[k].parent;
        }
    }
    for c in classes.iter_mut().filter(|c| c.leaf) {
        c.jain = jain(&c.sessions_bps);
    }
    let delivered = classes[0].delivered_bps;
    Ok(WhatIfReport {
        technique: policy.technique.name().into(),
        link_bps: policy.link_rate,
        duration_s: w.duration.as_secs_f64(),
        measured_s: measured,
        flows_per_class: w.flows,
        frame_bytes: w.size,
        delivered_bps: delivered,
        utilisation: delivered / policy.link_rate as f64,
        classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_spec_parses_and_rejects() {
        let i = Idle::parse("ftp@5s-10s").unwrap();
        assert_eq!(i.class, "ftp");
        assert_eq!(i.session, None);
        assert_eq!(i.from, Duration::from_secs(5));
        assert_eq!(i.to, Duration::from_secs(10));
        let j = Idle::parse("voip#2@1.5s-2s").unwrap();
        assert_eq!(j.session, Some(2));
        assert_eq!(j.from, Duration::from_millis(1500));
        for bad in ["ftp", "ftp@5s", "ftp@10s-5s", "ftp#0@1s-2s", "ftp@5-10"] {
            assert!(Idle::parse(bad).is_err(), "{bad}");
        }
    }
}
