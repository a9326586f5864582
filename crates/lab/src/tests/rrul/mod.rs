//! `weir lab rrul`: Flent's Realtime Response Under Load (Dave Täht's RRUL specification;
//! Flent's `rrul`, `rrul_be`, `tcp_nup`, `tcp_ndown` tests) against any DUT, with the
//! issue's cases for a modern queue (host isolation, a voice call, ECN, an ACK filter).
//!
//! ```text
//!   client ──── lan0 [DUT] wan0 ──── lan0 [line: weir emulator] wan0 ──── server
//!   10.77.0.1    shapes to --rate,        150 % of the rate, a 250 ms        10.77.0.2
//!   (+ .1.1, .1.2  both directions        FIFO and half the base RTT,        sinks, senders,
//!    for `hosts`)                         each way                           reflector
//! ```
//!
//! * **The bottleneck** is the DUT's shaper: every shaping DUT shapes to `--rate`, and the
//!   line behind it runs faster ([`policy::LINE_PCT`], 150 %) with a modem's large FIFO
//!   ([`policy::LINE_BUFFER_MS`]) and the base RTT (`--rtt`, half each way). A DUT that
//!   does not shape (`kernel:bridge`) leaves the queue to the line, and shows the line's
//!   bufferbloat (at the line's rate). Why not SQM's "line at the rate, shaper at 95 %":
//!   downloads cross the line *before* the DUT, and the senders' bursts (unpaced cubic on
//!   veth, their ACKs batched by the DUT's own round robin on the way up) then queue in a
//!   line only 5 % faster than the DUT — measured with `weir:cbq+pfq` at 10 Mbit/s, 50 ms:
//!   the one-way delay down rose 78 ms at 105 %, 5 ms (as up) at 150 %, 200 % and 400 %.
//!   The queue under test would not be the DUT's.
//! * **Timeline** of a run: an idle phase (`idle_s`: probes only), then the load for
//!   `load_s` (every flow starts together, Flent's `DELAY` then `LENGTH`); the loaded
//!   figures are taken over `[idle + warmup, idle + load]`, the idle ones over
//!   `[0.5 s, idle]`. Paper: 5 s idle, 60 s of load (Flent's defaults), 5 s warm-up; quick:
//!   2 + 10 s, 2 s warm-up.
//! * **Probes** from the client's main address to the server, every 10 ms (50 ms on the
//!   `ackfilter` case's 0.5 Mbit/s uplink, where 10 ms would take a fifth of it): UDP
//!   ([`crate::agents::Prober`] and [`crate::agents::UdpReflector`]: one-way delay each
//!   way and the round trip) and ICMP echo; each TCP flow's own smoothed RTT is sampled
//!   from `TCP_INFO` every 100 ms.
//! * **Flows** ([`case`]): the project's bulk TCP agents with explicit settings: congestion
//!   control `--cc` (cubic), MSS 1460, SACK, timestamps and window scaling on, the receive
//!   buffer autotuned, `TCP_NOTSENT_LOWAT` 64 KiB, DSCP per flow (`rrul`), `tcp_ecn` per
//!   host namespace (0, or 1 in `ecn=1`); both hosts keep their default offloads, so a DUT
//!   receives TSO/GSO super-packets as it would from real hosts. The sinks count bytes per 100 ms per flow, all series from
//!   one origin (the run's start).
//!   `ackfilter`'s line is asymmetric (20 Mbit/s down, 0.5 up) and a weir policy has one
//!   rate for both directions: there the DUT shapes the uplink only (where an ACK filter
//!   acts) and the downlink's queue is the line's.
//! * **Measures** ([`measure`]) and **checks** ([`checks`]); tables, CSV and plots
//!   ([`report`]); the time series in Flent's names, for `.flent.gz` files
//!   ([`series`]); running ([`run`]).
//!
//! Every run builds a fresh topology and removes it afterwards, also on error.

pub mod case;
pub mod checks;
pub mod measure;
pub mod policy;
pub mod report;
mod run;
pub mod series;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use weir_core::policy::Policy;

pub use case::{Case, Dir, FlowPlan, Host, Variant};
pub use measure::RrulRow;
pub use policy::{DutKind, Link, DEFAULT_DUTS, DEFAULT_MODERN, MODERN, ROUTER};
pub use report::{text, write_outputs};
pub(crate) use run::dut_policy_file;
pub use run::{HOSTS, ONE_WAY_BOUND_MS};

use crate::agents::{InfoSample, ProbeKind};
use crate::lab::{Lab, Outline};
use crate::report::Check;
use crate::tests::testbed::VoiceOutcome;
use crate::{Error, Result};

/// Bins of the sinks' byte series, ms.
pub const BIN_MS: u64 = 100;
/// `TCP_INFO` sampling period of every flow, ms.
pub const INFO_MS: u64 = 100;
/// The idle figures skip the run's first half second (ARP, the first packets).
pub const IDLE_SKIP_S: f64 = 0.5;
/// Probe period on the `ackfilter` case's line, ms.
pub const ACKFILTER_PROBE_MS: f64 = 50.0;

/// The lab's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RrulConfig {
    pub cases: Vec<Case>,
    pub duts: Vec<String>,
    /// Line rates of the symmetric cases, bit/s (`ackfilter` has its own line).
    pub rates_bps: Vec<u64>,
    /// Base round-trip times, ms.
    pub rtts_ms: Vec<u64>,
    /// Congestion control of every flow.
    pub cc: String,
    pub runs: u32,
    pub idle_s: f64,
    pub load_s: f64,
    /// Skipped at the start of the load before the loaded figures.
    pub warmup_s: f64,
    /// Probe period, ms.
    pub probe_ms: f64,
    /// Flows of `tcp_nup` and `tcp_ndown`.
    pub streams: usize,
    /// The line's rate, percent of the rate the DUT shapes to ([`Link::line_bps`]).
    pub line_pct: u64,
    /// weir DUTs (and the line) busy-poll.
    pub busy_poll: bool,
    pub quick: bool,
    /// Real hosts `client` and `server` instead of namespaces (`--topology FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl RrulConfig {
    /// Flent's lengths (5 s idle, 60 s load), every case, 10 and 100 Mbit/s, 0 and 50 ms.
    pub fn paper() -> RrulConfig {
        RrulConfig {
            cases: Case::ALL.to_vec(),
            duts: DEFAULT_DUTS.iter().map(|d| d.to_string()).collect(),
            rates_bps: vec![10_000_000, 100_000_000],
            rtts_ms: vec![0, 50],
            cc: "cubic".into(),
            runs: 1,
            idle_s: 5.0,
            load_s: 60.0,
            warmup_s: 5.0,
            probe_ms: 10.0,
            streams: 4,
            line_pct: policy::LINE_PCT,
            busy_poll: false,
            quick: false,
            topology: None,
        }
    }

    /// CI-sized: 2 s idle, 10 s of load, 2 s warm-up; 10 Mbit/s, 50 ms.
    pub fn quick() -> RrulConfig {
        RrulConfig {
            rates_bps: vec![10_000_000],
            rtts_ms: vec![50],
            idle_s: 2.0,
            load_s: 10.0,
            warmup_s: 2.0,
            quick: true,
            ..Self::paper()
        }
    }

    /// The loaded figures' window, s since the run's start.
    pub fn load_window(&self) -> (f64, f64) {
        (self.idle_s + self.warmup_s, self.idle_s + self.load_s)
    }

    /// The idle figures' window.
    pub fn idle_window(&self) -> (f64, f64) {
        (IDLE_SKIP_S.min(self.idle_s / 2.0), self.idle_s)
    }

    /// Refuses settings that cannot run (no root needed).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(format!("rrul: {m}")));
        if self.cases.is_empty() || self.duts.is_empty() || self.runs == 0 {
            return bad("no case, DUT or run".into());
        }
        let symmetric = self.cases.iter().any(|c| c.fixed_line().is_none());
        let rates = symmetric.then_some(&self.rates_bps[..]);
        let external = policy::external_dut(self.topology.as_ref());
        if let Some(m) =
            policy::matrix_error(&self.duts, rates, &self.rtts_ms, self.line_pct, external)?
        {
            return bad(m);
        }
        if !(self.idle_s >= 1.0 && self.load_s >= 2.0 && self.warmup_s >= 0.0)
            || self.warmup_s + 1.0 > self.load_s
        {
            return bad(format!(
                "an idle phase of at least 1 s and a load of at least 2 s with 1 s after the \
                 {} s warm-up are needed (idle {} s, load {} s)",
                self.warmup_s, self.idle_s, self.load_s
            ));
        }
        if !(1.0..=1000.0).contains(&self.probe_ms) {
            return bad(format!("probe period {} ms (1 to 1000)", self.probe_ms));
        }
        if !(1..=64).contains(&self.streams) {
            return bad(format!("{} streams (1 to 64)", self.streams));
        }
        crate::agents::check_cc(&self.cc)?;
        if let Some(t) = &self.topology {
            policy::check_real_hosts("rrul", t, &self.rtts_ms, &self.duts)?;
        }
        Ok(())
    }

    /// Every part of the matrix, in the order it runs: per case, per line, per variant.
    pub fn parts(&self) -> Vec<PartSpec> {
        let mut out = Vec::new();
        for &case in &self.cases {
            let links: Vec<Link> = match case.fixed_line() {
                Some((down, up)) => self
                    .rtts_ms
                    .iter()
                    .map(|&rtt_ms| Link {
                        down_bps: down,
                        up_bps: up,
                        rtt_ms,
                        line_pct: self.line_pct,
                    })
                    .collect(),
                None => self
                    .rates_bps
                    .iter()
                    .flat_map(|&r| {
                        self.rtts_ms.iter().map(move |&rtt_ms| Link {
                            down_bps: r,
                            up_bps: r,
                            rtt_ms,
                            line_pct: self.line_pct,
                        })
                    })
                    .collect(),
            };
            for link in links {
                for variant in case.variants() {
                    out.push(PartSpec {
                        case,
                        variant,
                        link,
                        probe_ms: if case == Case::AckFilter {
                            ACKFILTER_PROBE_MS.max(self.probe_ms)
                        } else {
                            self.probe_ms
                        },
                    });
                }
            }
        }
        out
    }

    /// Each part's DUTs' policies, generated and compiled: a DUT whose policy weir's
    /// compiler refuses (a technique it does not know) is an error naming it. A part no
    /// listed DUT runs is left out. No root needed.
    pub fn plans(&self) -> Result<Vec<(PartSpec, Vec<DutPolicy>)>> {
        self.validate()?;
        let kinds: Vec<(String, DutKind)> = self
            .duts
            .iter()
            .map(|d| Ok((d.clone(), DutKind::parse(d)?)))
            .collect::<Result<_>>()?;
        let mut out = Vec::new();
        for p in self.parts() {
            let mut pols = Vec::new();
            for (name, kind) in &kinds {
                if !p.variant.applies(kind.has_ack_filter()) {
                    continue;
                }
                let text = policy::dut_policy(kind, p.case, p.variant, &p.link);
                Policy::parse(&format!("<rrul {name}>"), &text).map_err(|e| {
                    let hint = match kind {
                        DutKind::Weir { aqm: Some(_), .. } => format!(
                            " ({name} is weir's modern queue: techniques {} with the class keys \
                             queue, aqm, ecn, isolate, ack_filter)",
                            MODERN.map(|m| m.0).join(", ")
                        ),
                        _ => String::new(),
                    };
                    Error::Invalid(format!(
                        "DUT {name}: weir's policy compiler refuses the policy this lab generates \
                         for it{hint}:\n{e}\n--- the policy ---\n{text}"
                    ))
                })?;
                pols.push(DutPolicy {
                    dut: name.clone(),
                    policy: text,
                });
            }
            // `filter=on` with no DUT that has an ACK filter: nothing to run
            if !pols.is_empty() {
                out.push((p, pols));
            }
        }
        Ok(out)
    }

    /// Roughly how long the whole matrix takes, s.
    pub fn estimate_s(&self) -> f64 {
        let per = self.idle_s + self.load_s + 6.0;
        self.plans()
            .map(|p| p.iter().map(|(_, d)| d.len()).sum::<usize>())
            .unwrap_or(0) as f64
            * self.runs as f64
            * per
    }
}

/// One part of the matrix: a case's variant on one line.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartSpec {
    pub case: Case,
    pub variant: Variant,
    pub link: Link,
    /// Probe period here, ms.
    pub probe_ms: f64,
}

impl PartSpec {
    /// `rrul_be 10Mbit 50ms`, `ecn ecn=1 10Mbit 50ms`.
    pub fn name(&self) -> String {
        match self.variant {
            Variant::Plain => format!("{} {}", self.case.name(), self.link.name()),
            v => format!("{} {} {}", self.case.name(), v.name(), self.link.name()),
        }
    }
}

/// A DUT and the policy it gets in a part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DutPolicy {
    pub dut: String,
    pub policy: String,
}

/// The probes of one kind in one run: per probe, its send time (µs since the run's
/// start) and, if a reply came, its delays (µs); UDP probes also each way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeSeries {
    pub kind: Option<ProbeKind>,
    pub sent_us: Vec<u64>,
    pub rtt_us: Vec<Option<i64>>,
    /// UDP only (empty for ICMP).
    #[serde(default)]
    pub up_us: Vec<Option<i64>>,
    #[serde(default)]
    pub down_us: Vec<Option<i64>>,
    /// Slots not sent (prober late), sends refused, duplicate replies.
    pub skipped: u64,
    pub send_errors: u64,
    pub duplicates: u64,
    pub error: Option<String>,
}

/// One TCP flow of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowOutcome {
    pub name: String,
    pub dir: Dir,
    pub host: Host,
    pub dscp: u8,
    pub cc: String,
    /// The sender's end of the connection.
    pub local: Option<SocketAddr>,
    /// Bytes the sink read, and per [`BIN_MS`] since the run's start.
    pub bytes: u64,
    pub series: Vec<u64>,
    /// The sender's final `TCP_INFO`: segments sent, data segments sent, retransmitted.
    pub segs_out: u64,
    pub data_segs_out: u64,
    pub retrans: u64,
    /// ECN was negotiated; segments delivered with CE marks.
    pub ecn: bool,
    pub delivered_ce: u64,
    /// `TCP_INFO` every [`INFO_MS`] while writing.
    pub samples: InfoSeries,
    pub error: Option<String>,
}

/// A flow's `TCP_INFO` samples as columns (the result file stays small): per sample the
/// time since the run's start (ms), the smoothed RTT (µs), the congestion window
/// (segments), retransmissions and CE-marked deliveries so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InfoSeries {
    pub t_ms: Vec<u32>,
    pub srtt_us: Vec<u32>,
    pub cwnd: Vec<u32>,
    pub retrans: Vec<u32>,
    pub delivered_ce: Vec<u32>,
}

impl InfoSeries {
    pub fn of(samples: &[InfoSample]) -> InfoSeries {
        let col = |f: fn(&InfoSample) -> u32| samples.iter().map(f).collect();
        InfoSeries {
            t_ms: col(|s| (s.t_us / 1000).min(u64::from(u32::MAX)) as u32),
            srtt_us: col(|s| s.srtt_us),
            cwnd: col(|s| s.cwnd),
            retrans: col(|s| s.retrans),
            delivered_ce: col(|s| s.delivered_ce),
        }
    }
}

/// One run of one DUT in one part.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RrulRun {
    pub dut: String,
    pub run: u32,
    /// The run's start, ns of `CLOCK_REALTIME` (the calls' packets carry that clock).
    pub t0_ns: u64,
    pub probes: Vec<ProbeSeries>,
    pub flows: Vec<FlowOutcome>,
    /// The `voice` case's calls (up, down).
    #[serde(default)]
    pub calls: Vec<VoiceOutcome>,
    /// `ackfilter`: the frames and bytes of the downloads' ACKs that reached the server
    /// (counted on its interface, the whole run).
    #[serde(default)]
    pub ack_frames: Option<u64>,
    #[serde(default)]
    pub ack_bytes: Option<u64>,
    /// The DUT's report (what ran, its counters, problems) and the line's.
    pub dut_report: serde_json::Value,
    pub line_report: serde_json::Value,
    pub seconds: f64,
    /// Real hosts (`--topology`): names, versions, clock offsets (empty in namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<crate::remote::HostInfo>,
}

/// One part: its spec, the DUTs' policies, the runs and (computed) their measures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RrulPart {
    pub spec: PartSpec,
    pub flows: Vec<FlowPlan>,
    pub policies: Vec<DutPolicy>,
    pub runs: Vec<RrulRun>,
    #[serde(default)]
    pub rows: Vec<RrulRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RrulResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: RrulConfig,
    pub parts: Vec<RrulPart>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Runs the whole matrix: every part, every DUT that applies, `runs` runs each.
pub fn run(c: &RrulConfig, progress: &mut dyn FnMut(&str)) -> Result<RrulResult> {
    let plans = c.plans()?;
    crate::topo::require_root()?;
    let mut parts = Vec::new();
    for (spec, pols) in plans {
        let flows = spec.case.flows(c.streams);
        let mut runs = Vec::new();
        for pol in &pols {
            for r in 0..c.runs {
                crate::check_interrupted()?;
                runs.push(run::run_one(c, &spec, &flows, pol, r, progress)?);
            }
        }
        parts.push(RrulPart {
            spec,
            flows,
            policies: pols,
            runs,
            rows: Vec::new(),
        });
    }
    let mut res = RrulResult {
        kind: "rrul".into(),
        meta: crate::report::meta(),
        config: c.clone(),
        parts,
        checks: Vec::new(),
    };
    finish(&mut res);
    Ok(res)
}

/// The lab (`weir lab rrul`).
pub struct Rrul;

impl Lab for Rrul {
    const NAME: &'static str = "rrul";
    type Config = RrulConfig;
    type Result = RrulResult;

    fn paper() -> RrulConfig {
        RrulConfig::paper()
    }

    fn quick() -> RrulConfig {
        RrulConfig::quick()
    }

    /// Also refuses a DUT whose policy weir's compiler refuses.
    fn plan(&self, c: &RrulConfig) -> Result<Outline> {
        let plans = c.plans()?;
        Ok(Outline {
            what: format!(
                "{} part(s), {} run(s) in all of {} s idle + {} s load",
                plans.len(),
                plans.iter().map(|(_, d)| d.len()).sum::<usize>() * c.runs as usize,
                c.idle_s,
                c.load_s
            ),
            estimate_s: Some(c.estimate_s()),
        })
    }

    fn run(
        self,
        c: &RrulConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<RrulResult> {
        run(c, progress)
    }

    fn finish(r: &mut RrulResult) -> Result<()> {
        finish(r);
        Ok(())
    }

    fn text(r: &RrulResult) -> String {
        text(r)
    }

    fn checks(r: &RrulResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &RrulResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }

    fn measures(r: &RrulResult) -> Vec<crate::report::Measure> {
        report::measures(r)
    }
}

/// Recomputes every measure and check from the raw runs (also for `weir lab report`).
pub fn finish(res: &mut RrulResult) {
    let c = res.config.clone();
    for p in &mut res.parts {
        p.rows = p
            .runs
            .iter()
            .map(|r| measure::row(&c, &p.spec, r))
            .collect();
    }
    res.checks = checks::checks(res);
}

#[cfg(test)]
mod tests;
