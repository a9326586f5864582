//! RFC 2544 ("Benchmarking Methodology for Network Interconnect Devices") against any DUT:
//! throughput, latency, frame loss rate and back-to-back frames (its section 26.1-26.4) at
//! the standard's Ethernet frame sizes, weir beside the kernel's HTB or a script.
//!
//! # Method
//!
//! One constant-rate UDP stream ([`crate::tests::streams`]) of `size`-byte frames crosses
//! the DUT from the sender to the receiver, from a source address the policy classifies
//! into the class under test (`class`, default the policy's default class; default policy
//! [`DEFAULT_POLICY`]: one class on a 100 Mbit/s link). Frame sizes are RFC 2544's
//! (section 9.1: 64, 128, 256, 512, 1024, 1280, 1518 bytes) *including* the 4-byte FCS; the
//! frames on the veth wire are 4 bytes shorter, and every rate here counts them as the
//! DUTs' rates do, without FCS. The *maximum rate* of the medium is `line_bps` (default
//! 1 Gbit/s, a gigabit port). A *trial* sends for `trial_s` seconds (section 24: at least
//! 60 s; quick runs 1 s) and counts as loss every frame not received within 500 ms of the
//! last one sent (section 23 waits 2 s; a shaper's queue drains at its rate while the
//! sink waits for arrivals to stop).
//!
//! - **Throughput** (26.1): the highest rate at which no frame is lost, by binary search
//!   ([`throughput`]): a trial at the maximum rate, then halving the interval between the
//!   highest rate without loss and the lowest with loss until it is narrower than
//!   `resolution` of the latter.
//! - **Latency** (26.2): a trial at the throughput rate; the delay of every frame received
//!   (the RFC reads one tagged frame per trial and averages 20 trials; every frame of one
//!   trial is the stronger form): min, mean, max, FDV (p99.9 − min).
//! - **Frame loss rate** (26.3): trials from the maximum rate down in steps of `loss_step`
//!   of it until two successive trials lose nothing ([`loss_steps`]); per step
//!   (sent − received) / sent.
//! - **Back-to-back** (26.4): bursts at the maximum rate (the sender spinning, handing the
//!   kernel up to 32 due frames per `sendmmsg`); the longest burst, at most `b2b_s`
//!   seconds of the maximum rate (the RFC: at least 2 s), with no loss, by binary search
//!   ([`back_to_back`]) to within 1 % or one frame; `b2b_trials` times (RFC: 50), averaged.
//!
//! A trial whose sender achieved less than 99 % of the asked rate (64-byte frames at a
//! gigabit are beyond this machine's sender) is marked generator-limited; the search uses
//! the rate it achieved, so a result may read "at least" that.
//!
//! # What a shaper should show, and the checks (weir DUTs)
//!
//! A shaper's throughput is the rate R of the class the stream falls in (its `ceil`,
//! bounded by its ancestors'); above it, it forwards R and queues or drops the rest, so the
//! frame loss rate at an offered rate r tends to 1 − R / r, less what its queue held at the
//! end of the trial; back-to-back it takes as many frames as its bucket, its queue and (for
//! weir) its receive ring hold. For each weir DUT: throughput within `resolution` + 1 % of
//! R at every frame size; in every frame loss step above R, the rate received (the IR of
//! [`crate::tests::streams`], the middle 80 % of the trial) within 2 % of R. The latency trial
//! repeats the throughput rate and reports its loss without judging it: a throughput found
//! a little above R (within the resolution, hidden by the queue in one trial) may lose a
//! frame the next time.
//!
//! A short trial hides an excess rate in a deep queue: a FIFO of Q bytes lets a trial of
//! T s at R + Q / T pass without loss, which is why the RFC asks for 60 s trials; the
//! quick form's 1 s trials overstate the throughput of a DUT with a deep FIFO (the
//! kernel's HTB with its 100-frame pfifo) and not of one with an AQM (weir's COBALT keeps
//! the queue near 5 ms).
//!
//! `mod.rs` holds the configuration, the searches (sans-IO: a trial is a closure) and the
//! checks; `run.rs` runs the trials on the testbed; `report.rs` prints and writes.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use weir_core::policy::Policy;

use crate::lab::{Lab, Outline};
use crate::report::Check;
use crate::tests::streams::{DutChoice, Ftd};
use crate::{Error, Result};

mod report;
mod run;

pub use report::{text, write_outputs};
pub use run::run;

/// The embedded default policy: one class on a 100 Mbit/s link.
pub const DEFAULT_POLICY: (&str, &str) = (
    "examples/rfc2544-link.toml",
    include_str!("../../../../../examples/rfc2544-link.toml"),
);

/// RFC 2544 section 9.1's Ethernet frame sizes, FCS included.
pub const SIZES: [u32; 7] = [64, 128, 256, 512, 1024, 1280, 1518];
/// Bytes of FCS in those sizes that the veth wire does not carry.
pub const FCS: u32 = 4;
/// The receiver's UDP port.
pub const PORT: u16 = 9200;
/// Frames per `sendmmsg` in a back-to-back burst.
pub const BURST_BATCH: usize = 32;
/// A trial whose sender achieved less than this share of the asked rate was
/// generator-limited.
pub const GENERATOR_MIN: f64 = 0.99;
/// How far the rate received above the class's rate may be from it (0.02 = 2 %).
pub const OVERLOAD_TOLERANCE: f64 = 0.02;

/// The lab's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rfc2544Config {
    /// DUTs: `weir` (the policy as written), `weir:TECHNIQUE`, `kernel:htb`,
    /// `kernel:bridge`, `cmd:SCRIPT`.
    pub duts: Vec<String>,
    /// The class the test stream is classified into; `None`: the policy's default class.
    pub class: Option<String>,
    /// Frame sizes, bytes with FCS.
    pub sizes: Vec<u32>,
    /// The medium's maximum rate, bit/s of frames without FCS.
    pub line_bps: u64,
    /// Length of a throughput, latency or frame-loss trial, s.
    pub trial_s: f64,
    /// The throughput search stops when its interval is narrower than this share of its
    /// upper end.
    pub resolution: f64,
    /// Frame loss rate steps, a share of the maximum rate.
    pub loss_step: f64,
    /// Longest back-to-back burst tried, s at the maximum rate; 0: no back-to-back test.
    pub b2b_s: f64,
    /// Back-to-back searches per frame size, averaged.
    pub b2b_trials: u32,
    /// weir DUTs busy-poll.
    pub busy_poll: bool,
    /// Real hosts `sender` and `receiver` instead of namespaces (`--topology FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl Rfc2544Config {
    /// The RFC's: every frame size, 60 s trials, 0.1 % resolution, 10 % loss steps, bursts
    /// of up to 2 s, 50 back-to-back trials.
    pub fn paper() -> Rfc2544Config {
        Rfc2544Config {
            duts: vec!["weir".into(), "kernel:htb".into()],
            class: None,
            sizes: SIZES.to_vec(),
            line_bps: 1_000_000_000,
            trial_s: 60.0,
            resolution: 0.001,
            loss_step: 0.1,
            b2b_s: 2.0,
            b2b_trials: 50,
            busy_poll: false,
            topology: None,
        }
    }

    /// CI-sized: 512- and 1518-byte frames, 1 s trials, 1 % resolution, bursts of up to
    /// 0.5 s, one back-to-back search.
    pub fn quick() -> Rfc2544Config {
        Rfc2544Config {
            sizes: vec![512, 1518],
            trial_s: 1.0,
            resolution: 0.01,
            b2b_s: 0.5,
            b2b_trials: 1,
            ..Self::paper()
        }
    }
}

/// Refuse settings that cannot run.
pub fn validate(c: &Rfc2544Config) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if c.duts.is_empty() {
        return bad("no DUT to test".into());
    }
    for d in &c.duts {
        DutChoice::parse(d)?;
    }
    check_external(c.topology.as_ref(), &c.duts)?;
    if c.sizes.is_empty() || c.sizes.iter().any(|s| !(64..=1518).contains(s)) {
        return bad(format!(
            "frame sizes {:?}: want sizes of 64..=1518 bytes with FCS (RFC 2544: {})",
            c.sizes,
            SIZES.map(|s| s.to_string()).join(", ")
        ));
    }
    if !(1_000_000..=100_000_000_000).contains(&c.line_bps) {
        return bad(format!(
            "maximum rate {} bit/s: want 1 Mbit/s to 100 Gbit/s",
            c.line_bps
        ));
    }
    if !(c.trial_s.is_finite() && (0.2..=3600.0).contains(&c.trial_s)) {
        return bad(format!("trial time {} s: want 0.2 s to 1 h", c.trial_s));
    }
    if !(c.resolution.is_finite() && c.resolution >= 0.0001 && c.resolution <= 0.2) {
        return bad(format!("resolution {}: want 0.0001 to 0.2", c.resolution));
    }
    if !(c.loss_step.is_finite() && c.loss_step >= 0.01 && c.loss_step <= 0.5) {
        return bad(format!("loss step {}: want 0.01 to 0.5", c.loss_step));
    }
    if !(c.b2b_s.is_finite() && (0.0..=10.0).contains(&c.b2b_s)) {
        return bad(format!("longest burst {} s: want 0 to 10 s", c.b2b_s));
    }
    if c.b2b_s > 0.0 && c.b2b_trials == 0 {
        return bad("back-to-back trials: want at least 1".into());
    }
    Ok(())
}

/// `external` exactly when the topology's DUT is external; never in namespaces (the
/// conformance labs' DUT lists, whose `weir` is no [`crate::dut::DutSpec`]).
pub fn check_external(t: Option<&crate::remote::Topology>, duts: &[String]) -> Result<()> {
    match t {
        Some(_) => crate::tests::testbed::check_duts(t, duts),
        None if duts.iter().any(|d| d == "external") => {
            Err(Error::Invalid(crate::dut::EXTERNAL_NEEDS_HOSTS.into()))
        }
        None => Ok(()),
    }
}

/// The class under test and its rate: the tightest `ceil` on its way to the root.
pub fn class_under_test(p: &Policy, c: &Rfc2544Config) -> Result<(String, u64, Ipv4Addr)> {
    let name = c
        .class
        .clone()
        .unwrap_or_else(|| p.classes[p.default_class].name.clone());
    let (i, src) = crate::tests::streams::stream_class(
        p,
        &name,
        &format!("--class {name}"),
        "the stream goes to a leaf",
        &[],
    )?;
    let ceil = crate::tests::streams::class_ceil(p, i);
    Ok((name, ceil, src))
}

/// One trial: what was asked and what happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Rate asked, bit/s of frames without FCS.
    pub asked_bps: f64,
    /// Rate the sender achieved.
    pub achieved_bps: f64,
    /// Frames the sender handed to its host, and frames lost.
    pub sent: u64,
    pub lost: u64,
    /// The rate received in the middle 80 % of the trial (the streams' IR), bit/s.
    #[serde(default)]
    pub ir_bps: Option<f64>,
    /// Delays of the frames received (the latency trial reports them).
    pub ftd: Option<Ftd>,
    /// The receiver's errors, if any.
    pub error: Option<String>,
}

impl Trial {
    pub fn limited(&self) -> bool {
        self.achieved_bps < GENERATOR_MIN * self.asked_bps
    }

    /// (sent − received) / sent.
    pub fn loss_ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 / self.sent as f64
        }
    }

    /// The rate the trial ran at: what the sender achieved.
    pub fn rate_bps(&self) -> f64 {
        self.achieved_bps
    }
}

/// RFC 2544 26.1 by binary search, a trial being `trial(rate)`: the highest rate without
/// loss (0 when even the lowest tried lost frames) and every trial in order.
pub fn throughput(
    line_bps: f64,
    resolution: f64,
    trial: &mut dyn FnMut(f64) -> Result<Trial>,
) -> Result<(f64, Vec<Trial>)> {
    let mut trials = Vec::new();
    let first = trial(line_bps)?;
    let ok = first.lost == 0;
    let top = first.rate_bps().min(line_bps);
    trials.push(first);
    if ok {
        return Ok((top, trials));
    }
    // lo: highest rate without loss so far; hi: lowest with loss
    let (mut lo, mut hi) = (0.0, line_bps);
    // 64 halvings reach any resolution; a guard against a trial that never converges
    for _ in 0..64 {
        if hi - lo <= resolution * hi {
            break;
        }
        let mid = (lo + hi) / 2.0;
        let t = trial(mid)?;
        let (lost, limited, achieved) = (t.lost, t.limited(), t.rate_bps());
        trials.push(t);
        if lost > 0 {
            hi = mid;
        } else if limited {
            // the sender cannot go faster: at least what it achieved
            lo = achieved.min(mid);
            break;
        } else {
            lo = mid;
        }
    }
    Ok((lo, trials))
}

/// RFC 2544 26.3: trials from the maximum rate down in steps of `step` of it until two
/// successive ones lose nothing (or the rate would reach 0).
pub fn loss_steps(
    line_bps: f64,
    step: f64,
    trial: &mut dyn FnMut(f64) -> Result<Trial>,
) -> Result<Vec<Trial>> {
    let mut out: Vec<Trial> = Vec::new();
    let steps = (1.0 / step).round() as u32;
    for k in 0..steps {
        let rate = line_bps * (1.0 - k as f64 * step);
        if rate <= 0.0 {
            break;
        }
        out.push(trial(rate)?);
        let n = out.len();
        if n >= 2 && out[n - 1].lost == 0 && out[n - 2].lost == 0 {
            break;
        }
    }
    Ok(out)
}

/// One back-to-back burst: frames sent and lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub frames: u64,
    pub lost: u64,
    /// Rate the sender achieved during the burst, bit/s.
    pub achieved_bps: f64,
}

/// RFC 2544 26.4, one search: the longest burst of at most `max` frames without loss (0:
/// even one frame was lost), by binary search to within 1 % or one frame; `burst(n)` sends
/// `n` back to back.
pub fn back_to_back(
    max: u64,
    burst: &mut dyn FnMut(u64) -> Result<Burst>,
) -> Result<(u64, Vec<Burst>)> {
    let mut tried = Vec::new();
    let b = burst(max)?;
    let ok = b.lost == 0;
    tried.push(b);
    if ok {
        return Ok((max, tried));
    }
    let (mut lo, mut hi) = (0u64, max);
    while hi - lo > 1 && (hi - lo) as f64 > 0.01 * hi as f64 {
        let mid = lo + (hi - lo) / 2;
        let b = burst(mid)?;
        if b.lost == 0 {
            lo = mid;
        } else {
            hi = mid;
        }
        tried.push(b);
    }
    Ok((lo, tried))
}

/// One frame size's results on one DUT.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SizeRun {
    /// Frame size with FCS.
    pub size: u32,
    /// Throughput, bit/s of frames without FCS (0: none found).
    pub throughput_bps: f64,
    /// Whether a trial at the throughput rate, or the first at the maximum rate, was
    /// generator-limited: the throughput is then at least this.
    pub throughput_limited: bool,
    pub throughput_trials: Vec<Trial>,
    /// The trial at the throughput rate.
    pub latency: Option<Trial>,
    pub loss: Vec<Trial>,
    /// Longest burst without loss per back-to-back search.
    pub b2b: Vec<u64>,
    pub b2b_bursts: Vec<Burst>,
}

impl SizeRun {
    /// Frames per second at `bps`.
    pub fn fps(&self, bps: f64) -> f64 {
        bps / ((self.size - FCS) as f64 * 8.0)
    }

    /// Mean longest burst.
    pub fn b2b_mean(&self) -> Option<f64> {
        (!self.b2b.is_empty()).then(|| self.b2b.iter().sum::<u64>() as f64 / self.b2b.len() as f64)
    }
}

/// What one DUT did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DutRun {
    pub dut: String,
    pub description: String,
    pub sizes: Vec<SizeRun>,
    pub counters: serde_json::Value,
    pub errors: Vec<String>,
    /// Real hosts (`--topology`): names, versions, clock offsets (empty in namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<crate::remote::HostInfo>,
    /// Frame delays were measured: false on real hosts whose clock offsets are not known
    /// to within [`crate::remote::ONE_WAY_BOUND_MS`] together.
    #[serde(default = "crate::tests::streams::measured")]
    pub one_way: bool,
}

/// The lab's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rfc2544Result {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: Rfc2544Config,
    pub policy_file: String,
    pub policy_text: String,
    /// The class under test, its rate (tightest ceil) and the stream's source.
    pub class: String,
    pub class_bps: u64,
    pub src: Ipv4Addr,
    pub duts: Vec<DutRun>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Recompute the checks.
pub fn finish(r: &mut Rfc2544Result) -> Result<()> {
    r.checks = checks(r);
    Ok(())
}

/// The checks (module documentation).
pub fn checks(r: &Rfc2544Result) -> Vec<Check> {
    let mut out = Vec::new();
    let rate = r.class_bps as f64;
    let tol = r.config.resolution + 0.01;
    for d in r.duts.iter().filter(|d| DutChoice::is_weir(&d.dut)) {
        // throughput
        let name = format!(
            "{}: throughput within {:.1} % of the class's rate at every frame size",
            d.dut,
            tol * 100.0
        );
        let judged: Vec<&SizeRun> = d.sizes.iter().filter(|s| !s.throughput_limited).collect();
        if judged.is_empty() {
            out.push(Check::skip(name, "every frame size was generator-limited"));
        } else {
            let parts: Vec<String> = judged
                .iter()
                .map(|s| {
                    format!(
                        "{} B {:+.2} %",
                        s.size,
                        (s.throughput_bps / rate - 1.0) * 100.0
                    )
                })
                .collect();
            let ok = judged
                .iter()
                .all(|s| (s.throughput_bps / rate - 1.0).abs() <= tol);
            out.push(Check::new(
                name,
                ok,
                judged.len(),
                "sizes",
                parts.join(", "),
            ));
        }
        // above the rate, the DUT forwards the rate
        let name = format!(
            "{}: above the class's rate, the rate received is the class's within {:.0} %",
            d.dut,
            OVERLOAD_TOLERANCE * 100.0
        );
        let mut worst: Option<(f64, String)> = None;
        let mut n = 0;
        for s in &d.sizes {
            for t in s.loss.iter().filter(|t| t.rate_bps() > rate * (1.0 + tol)) {
                n += 1;
                let got = t.ir_bps.unwrap_or(0.0);
                let err = got / rate - 1.0;
                if worst.as_ref().is_none_or(|(w, _)| err.abs() > w.abs()) {
                    worst = Some((
                        err,
                        format!(
                            "{} B sent at {:.1} Mbit/s: received {:.3} Mbit/s ({:+.2} %)",
                            s.size,
                            t.rate_bps() / 1e6,
                            got / 1e6,
                            err * 100.0
                        ),
                    ));
                }
            }
        }
        match worst {
            None => out.push(Check::skip(
                name,
                "no frame loss step above the class's rate",
            )),
            Some((err, what)) => out.push(Check::new(
                name,
                err.abs() <= OVERLOAD_TOLERANCE,
                n,
                "steps",
                format!("worst: {what}"),
            )),
        }
    }
    out
}

/// The headline figures for `weir lab report`'s comparison: per frame size and DUT, the
/// throughput and the latency trial's mean FTD and FDV.
pub fn measures(r: &Rfc2544Result) -> Vec<crate::report::Measure> {
    use crate::report::compare::push_value;
    let mut out = Vec::new();
    for d in &r.duts {
        for s in &d.sizes {
            let scope = format!("{} B frames", s.size);
            let ftd = s.latency.as_ref().and_then(|t| t.ftd);
            for (figure, v) in [
                ("throughput, Mbit/s", s.throughput_bps / 1e6),
                ("latency FTD mean, ms", ftd.map_or(f64::NAN, |f| f.mean)),
                ("latency FDV, ms", ftd.map_or(f64::NAN, |f| f.fdv())),
            ] {
                push_value(&mut out, &scope, figure, &d.dut, v);
            }
        }
    }
    out
}

/// `weir lab rfc2544`: the policy the DUTs enforce.
pub struct Rfc2544 {
    pub policy_file: String,
    pub policy_text: String,
}

impl Rfc2544 {
    fn policy(&self) -> Result<Policy> {
        Policy::parse(&self.policy_file, &self.policy_text)
            .map_err(|e| Error::Invalid(format!("policy: {e}")))
    }
}

impl Lab for Rfc2544 {
    const NAME: &'static str = "rfc2544";
    type Config = Rfc2544Config;
    type Result = Rfc2544Result;

    fn paper() -> Rfc2544Config {
        Rfc2544Config::paper()
    }

    fn quick() -> Rfc2544Config {
        Rfc2544Config::quick()
    }

    fn plan(&self, c: &Rfc2544Config) -> Result<Outline> {
        validate(c)?;
        let p = self.policy()?;
        let (class, bps, _) = class_under_test(&p, c)?;
        // throughput: about log2(1 / resolution) + 4 trials; latency 1; loss: down to
        // the rate, + 2; back-to-back: about log2(100) + 1 bursts per search
        let search = (1.0 / c.resolution).log2().ceil() + 4.0;
        let loss = ((1.0 - bps as f64 / c.line_bps as f64) / c.loss_step)
            .ceil()
            .max(0.0)
            + 2.0;
        let trials = search + 1.0 + loss;
        let bursts = if c.b2b_s > 0.0 {
            8.0 * c.b2b_trials as f64
        } else {
            0.0
        };
        let per_size = trials * (c.trial_s + 0.7) + bursts * (c.b2b_s / 2.0 + 0.7);
        Ok(Outline {
            what: format!(
                "class '{class}' ({:.3} Mbit/s) on a {:.0} Mbit/s line: {} frame size(s) x {} DUT(s), trials of {} s",
                bps as f64 / 1e6,
                c.line_bps as f64 / 1e6,
                c.sizes.len(),
                c.duts.len(),
                c.trial_s
            ),
            estimate_s: Some(per_size * (c.sizes.len() * c.duts.len()) as f64),
        })
    }

    fn run(
        self,
        c: &Rfc2544Config,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Rfc2544Result> {
        let p = self.policy()?;
        run(&p, self.policy_text, c, progress)
    }

    fn finish(r: &mut Rfc2544Result) -> Result<()> {
        finish(r)
    }

    fn text(r: &Rfc2544Result) -> String {
        text(r)
    }

    fn checks(r: &Rfc2544Result) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &Rfc2544Result, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }

    fn measures(r: &Rfc2544Result) -> Vec<crate::report::Measure> {
        measures(r)
    }
}

#[cfg(test)]
mod tests;
