//! ITU-T Y.1564 service activation test against any DUT: is every service of a policy
//! delivered as its bandwidth profile and its service acceptance criteria (SAC) say?
//!
//! # What a service is here
//!
//! A *service* is a leaf class of the policy the DUT enforces (default: the embedded
//! `examples/y1564-services.toml`, three services on a 100 Mbit/s link). Its bandwidth
//! profile follows from the class: the **CIR** (committed information rate) is the class's
//! `rate`, the **EIR** (excess information rate) is its `ceil` (bounded by its ancestors')
//! minus the rate — what a shaper lets it borrow. The test traffic of a service is a
//! constant-rate UDP stream ([`crate::agents::cbr`]) of fixed-size frames from a source
//! address the policy classifies into the class (the testbed's [`addresses_for_class`]),
//! checked with the policy's own classifier. The DUT is colour-blind (it marks nothing), so
//! every test is Y.1564's *non-colour-aware* form.
//!
//! The **SAC** of a service are an upper bound on the mean frame transfer delay (FTD), on
//! the frame delay variation (FDV), on the frame loss ratio (FLR), and a lower bound on the
//! availability (AVAIL) of the service performance test. `--sac FTD/FDV/FLR[/AVAIL]` sets
//! them for every service, `--sac CLASS:FTD/FDV/FLR[/AVAIL]` for one.
//!
//! # The tests (Y.1564 clause 8)
//!
//! **Service configuration test** (8.1), one service at a time, each stream `step_s`
//! seconds:
//! - *CIR step test*: the stream at 25, 50, 75 and 100 % of the CIR (`steps`). Each step
//!   passes when FLR, mean FTD and FDV meet the SAC and the information rate received is the
//!   rate offered (within `ir_tolerance`).
//! - *EIR test* (services with an EIR): the stream at CIR + EIR. Passes when the information
//!   rate received is at least CIR × (1 − FLR SAC) and at most CIR + EIR (within
//!   `ir_tolerance`); delay and loss are not judged, as frames beyond the CIR carry no
//!   commitment.
//! - *Traffic policing test*: the stream above the profile, at CIR + `overshoot` × EIR
//!   (`overshoot` × CIR for a service without an EIR; default 1.25, the 25 % overshoot
//!   Y.1564's test sets use). Passes with the EIR test's rate bounds: the DUT keeps the
//!   service within its profile and still gives it its CIR.
//!
//! **Service performance test** (8.2): every service at its CIR at once for `perf_s`
//! seconds (Y.1564's durations are 15 min, 2 h or 24 h; quick runs are seconds). Each service
//! passes when its FLR, mean FTD, FDV and availability meet its SAC and its information rate
//! is its CIR (within `ir_tolerance`).
//!
//! # Measures
//!
//! IR, FTD (min, mean, max), FDV (p99.9 − min), FLR (lost / sent, the sending host's own
//! failures excluded) and availability (Y.1563's severely errored seconds), as
//! [`crate::tests::streams`] defines them for every conformance lab.
//!
//! A stream whose sender could not keep the asked rate (achieved < 99 %, a loaded
//! machine) is marked `generator-limited`: its figures are what was measured, and the
//! checks leave it out.
//!
//! # Checks (weir DUTs; every DUT gets the verdicts in its tables)
//!
//! For each weir DUT: every service passes the service configuration test; every service
//! passes the service performance test; and the measured rates are the profile's — the IR
//! of the 100 % CIR step within 1 % of the CIR, and the IR of the policing test within 1 %
//! of CIR + EIR (what a shaper must let through and no more).
//!
//! # Timing on a 2-core machine
//!
//! Senders and sinks run pinned to CPU 0 (a sink reads every 20 ms; the timestamps are the
//! kernel's); weir's bridge thread is left to the scheduler, which runs it on the other
//! core. `mod.rs` holds the configuration, the services and the verdicts; `run.rs` builds
//! the testbed and sends the streams; `report.rs` prints the tables and writes the
//! outputs.
//!
//! [`addresses_for_class`]: crate::tests::testbed::addresses_for_class

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use weir_core::policy::Policy;

use crate::lab::{Lab, Outline};
use crate::report::Check;
pub use crate::tests::streams::{Figures, Ftd};
use crate::{Error, Result};

mod report;
mod run;

pub use report::{text, write_outputs};
pub use run::run;

/// The embedded default policy: three services on 100 Mbit/s.
pub const DEFAULT_POLICY: (&str, &str) = (
    "examples/y1564-services.toml",
    include_str!("../../../../../examples/y1564-services.toml"),
);

/// The first UDP port of the receiver; service `i` uses `PORT + i`.
pub const PORT: u16 = 9100;

/// A sender that achieved less than this share of its asked rate was generator-limited.
pub const GENERATOR_MIN: f64 = 0.99;

/// Service acceptance criteria: bounds on what one service may suffer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sac {
    /// Largest mean frame transfer delay, ms.
    pub ftd_ms: f64,
    /// Largest frame delay variation (p99.9 − min of FTD), ms.
    pub fdv_ms: f64,
    /// Largest frame loss ratio (0.001 = 0.1 %).
    pub flr: f64,
    /// Smallest availability in the service performance test (0.999 = 99.9 %).
    pub avail: f64,
}

impl Sac {
    /// `FTD/FDV/FLR[/AVAIL]`, e.g. `10ms/5ms/0.1%` or `10/5/0.1%/99.9%` (bare numbers:
    /// ms for delays, % for ratios); AVAIL defaults to 99.9 %.
    pub fn parse(s: &str) -> Result<Sac> {
        let bad = |why: String| {
            Error::Invalid(format!(
                "SAC {s:?}: {why}; expected FTD/FDV/FLR[/AVAIL], e.g. 10ms/5ms/0.1% or 10ms/5ms/0.1%/99.9%"
            ))
        };
        let parts: Vec<&str> = s.split('/').map(str::trim).collect();
        if !(3..=4).contains(&parts.len()) {
            return Err(bad(format!("{} fields", parts.len())));
        }
        let ms = |name: &str, t: &str| -> Result<f64> {
            let v = t.strip_suffix("ms").unwrap_or(t).trim();
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
                _ => Err(bad(format!("{name} '{t}' is not a delay > 0 in ms"))),
            }
        };
        let pct = |name: &str, t: &str, lo: f64| -> Result<f64> {
            let v = t.strip_suffix('%').unwrap_or(t).trim();
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && (lo..=100.0).contains(&x) => Ok(x / 100.0),
                _ => Err(bad(format!(
                    "{name} '{t}' is not a percentage in {lo}..=100"
                ))),
            }
        };
        Ok(Sac {
            ftd_ms: ms("FTD", parts[0])?,
            fdv_ms: ms("FDV", parts[1])?,
            flr: pct("FLR", parts[2], 0.0)?,
            avail: match parts.get(3) {
                Some(a) => pct("AVAIL", a, 0.0)?,
                None => 0.999,
            },
        })
    }
}

impl fmt::Display for Sac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FTD <= {} ms, FDV <= {} ms, FLR <= {}%, AVAIL >= {}%",
            self.ftd_ms,
            self.fdv_ms,
            self.flr * 100.0,
            self.avail * 100.0
        )
    }
}

/// The lab's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Y1564Config {
    /// DUTs: `weir` (the policy as written), `weir:TECHNIQUE`, `kernel:htb`, `cmd:SCRIPT`.
    pub duts: Vec<String>,
    /// The classes to test as services; empty: every leaf class of the policy.
    pub services: Vec<String>,
    /// SAC of every service without its own.
    pub sac: Sac,
    /// SAC by class name.
    pub sac_by_class: BTreeMap<String, Sac>,
    /// Ethernet frame size of the test streams, bytes without FCS (64..=1514).
    pub frame: usize,
    /// CIR step test: fractions of the CIR.
    pub steps: Vec<f64>,
    /// Sending time of each configuration-test stream, s.
    pub step_s: f64,
    /// Sending time of the service performance test, s.
    pub perf_s: f64,
    /// The policing test's overshoot: CIR + overshoot × EIR (overshoot × CIR without EIR).
    pub overshoot: f64,
    /// How far a measured information rate may be from what it should be (0.01 = 1 %).
    pub ir_tolerance: f64,
    /// weir DUTs busy-poll.
    pub busy_poll: bool,
    /// Real hosts `sender` and `receiver` instead of namespaces (`--topology FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl Y1564Config {
    fn base(step_s: f64, perf_s: f64) -> Y1564Config {
        Y1564Config {
            duts: vec!["weir".into(), "kernel:htb".into()],
            services: Vec::new(),
            sac: Sac {
                ftd_ms: 10.0,
                fdv_ms: 5.0,
                flr: 0.001,
                avail: 0.999,
            },
            sac_by_class: BTreeMap::new(),
            frame: 1514,
            steps: vec![0.25, 0.5, 0.75, 1.0],
            step_s,
            perf_s,
            overshoot: 1.25,
            ir_tolerance: 0.01,
            busy_poll: false,
            topology: None,
        }
    }

    /// Y.1564's customary lengths: 60 s per configuration step, 15 min of service
    /// performance test (its shortest duration).
    pub fn paper() -> Y1564Config {
        Self::base(60.0, 900.0)
    }

    /// CI-sized: 1.5 s per step, 4 s of performance test.
    pub fn quick() -> Y1564Config {
        Self::base(1.5, 4.0)
    }

    /// Streams per DUT: configuration streams per service, plus the performance test.
    fn streams(&self, services: &[Service]) -> usize {
        services.iter().map(|s| plan_config(s, self).len()).sum()
    }
}

/// One service as tested: a class of the policy and its profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Service {
    /// The class's name.
    pub name: String,
    /// Committed information rate, bit/s (the class's `rate`).
    pub cir_bps: u64,
    /// Excess information rate, bit/s (its `ceil`, bounded by its ancestors', minus `rate`).
    pub eir_bps: u64,
    /// Frame size, bytes without FCS.
    pub frame: usize,
    pub sac: Sac,
    /// The sender's source address (classified into the class).
    pub src: Ipv4Addr,
    /// The receiver's UDP port.
    pub port: u16,
}

/// Which Y.1564 test a stream belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum Phase {
    /// CIR step test at this fraction of the CIR.
    CirStep { fraction: f64 },
    /// EIR test: CIR + EIR.
    Eir,
    /// Traffic policing test: above the profile.
    Policing,
    /// Service performance test: every service at its CIR at once.
    Performance,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::CirStep { fraction } => write!(f, "CIR {:.0} %", fraction * 100.0),
            Phase::Eir => f.write_str("EIR"),
            Phase::Policing => f.write_str("policing"),
            Phase::Performance => f.write_str("performance"),
        }
    }
}

/// The configuration test's streams of one service, in order: (test, rate offered bit/s).
pub fn plan_config(s: &Service, c: &Y1564Config) -> Vec<(Phase, f64)> {
    let cir = s.cir_bps as f64;
    let eir = s.eir_bps as f64;
    let mut v: Vec<(Phase, f64)> = c
        .steps
        .iter()
        .map(|&f| (Phase::CirStep { fraction: f }, f * cir))
        .collect();
    if s.eir_bps > 0 {
        v.push((Phase::Eir, cir + eir));
        v.push((Phase::Policing, cir + c.overshoot * eir));
    } else {
        v.push((Phase::Policing, c.overshoot * cir));
    }
    v
}

/// The services to test: the configured classes (or every leaf), their profiles from the
/// policy, a source address each that the policy classifies into the class, a port each.
pub fn services(p: &Policy, c: &Y1564Config) -> Result<Vec<Service>> {
    let names: Vec<String> = if c.services.is_empty() {
        p.leaves().map(|i| p.classes[i].name.clone()).collect()
    } else {
        c.services.clone()
    };
    if names.is_empty() {
        return Err(Error::Invalid(
            "the policy has no leaf class to test".into(),
        ));
    }
    for k in c.sac_by_class.keys() {
        if !names.contains(k) {
            return Err(Error::Invalid(format!(
                "--sac {k}:…: '{k}' is not one of the services tested ({})",
                names.join(", ")
            )));
        }
    }
    let mut used = Vec::new();
    let mut out = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let (i, src) = crate::tests::streams::stream_class(
            p,
            name,
            &format!("service '{name}'"),
            "a service is a leaf class",
            &used,
        )?;
        let class = &p.classes[i];
        used.push(src);
        out.push(Service {
            name: name.clone(),
            cir_bps: class.rate,
            eir_bps: crate::tests::streams::class_ceil(p, i).saturating_sub(class.rate),
            frame: c.frame,
            sac: c.sac_by_class.get(name).copied().unwrap_or(c.sac),
            src,
            port: PORT + n as u16,
        });
    }
    Ok(out)
}

/// Refuse settings that cannot run.
pub fn validate(c: &Y1564Config) -> Result<()> {
    let bad = |m: String| Err(Error::Invalid(m));
    if c.duts.is_empty() {
        return bad("no DUT to test".into());
    }
    for d in &c.duts {
        crate::tests::streams::DutChoice::parse(d)?;
    }
    crate::tests::rfc2544::check_external(c.topology.as_ref(), &c.duts)?;
    if c.steps.is_empty()
        || c.steps
            .iter()
            .any(|f| !(f.is_finite() && *f > 0.0 && *f <= 1.0))
    {
        return bad(format!(
            "CIR steps {:?}: want fractions of the CIR in (0, 1], e.g. 0.25,0.5,0.75,1",
            c.steps
        ));
    }
    for (what, s) in [("step time", c.step_s), ("performance test time", c.perf_s)] {
        if !(s.is_finite() && (0.5..=86_400.0).contains(&s)) {
            return bad(format!("{what} {s} s: want 0.5 s to 24 h"));
        }
    }
    if !(c.overshoot.is_finite() && c.overshoot > 1.0 && c.overshoot <= 4.0) {
        return bad(format!(
            "overshoot {}: want more than 1 and at most 4",
            c.overshoot
        ));
    }
    if !(c.ir_tolerance.is_finite() && (0.0..0.5).contains(&c.ir_tolerance)) {
        return bad(format!("IR tolerance {}: want 0 to 0.5", c.ir_tolerance));
    }
    if !(64..=1514).contains(&c.frame) {
        return bad(format!(
            "frame size {} bytes: want 64..=1514 (an Ethernet frame without FCS)",
            c.frame
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Figures

/// What one stream sent and received, measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    pub service: String,
    pub phase: Phase,
    /// Rate asked of the sender, bit/s of frames.
    pub offered_bps: f64,
    /// Rate the sender achieved (its packet rate × frame bits).
    pub achieved_bps: f64,
    /// Packets the sender attempted, and those its host failed to send.
    pub attempted: u64,
    pub send_errors: u64,
    /// The sender's largest lateness against its schedule, ms ([`crate::tests::streams::Sent`]).
    #[serde(default)]
    pub late_max_ms: f64,
    /// What arrived.
    #[serde(flatten)]
    pub figures: Figures,
    /// The FTD counts: false on real hosts whose clock offsets are not known to within
    /// [`crate::remote::ONE_WAY_BOUND_MS`] together (FDV, a difference of delays,
    /// still does).
    #[serde(default = "crate::tests::streams::measured")]
    pub one_way: bool,
    /// What went wrong in the agents, if anything.
    pub error: Option<String>,
    /// The verdict ([`judge`], recomputed by `finish`).
    #[serde(default)]
    pub verdict: Verdict,
}

/// A stream's verdict and, when it failed, what failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub passed: bool,
    /// The sender could not keep the asked rate: not judged by the checks.
    pub generator_limited: bool,
    /// What failed (`FLR 0.52 % > 0.1 %`, …).
    pub failures: Vec<String>,
}

impl Stream {
    /// FLR: lost / sent.
    pub fn flr(&self) -> f64 {
        let sent = self.attempted.saturating_sub(self.send_errors);
        if sent == 0 {
            0.0
        } else {
            self.figures.lost as f64 / sent as f64
        }
    }

    /// FDV, ms.
    pub fn fdv_ms(&self) -> Option<f64> {
        self.figures.ftd.map(|f| f.fdv())
    }

    /// Availability: 1 − unavailable / judged seconds.
    pub fn availability(&self) -> f64 {
        if self.figures.seconds == 0 {
            1.0
        } else {
            1.0 - self.figures.unavailable_s as f64 / self.figures.seconds as f64
        }
    }
}

// ---------------------------------------------------------------------------------------
// Verdicts and checks

/// Judge one stream of `service` against its test's criteria (module documentation).
pub fn judge(st: &Stream, s: &Service, tol: f64) -> Verdict {
    let mut f = Vec::new();
    let generator_limited =
        st.offered_bps > 0.0 && st.achieved_bps < GENERATOR_MIN * st.offered_bps;
    let cir = s.cir_bps as f64;
    let top = (s.cir_bps + s.eir_bps) as f64;
    let ir = st.figures.ir_bps.unwrap_or(0.0);
    let mbit = |x: f64| format!("{:.3} Mbit/s", x / 1e6);
    if let Some(e) = &st.error {
        f.push(format!("error: {e}"));
    }
    let sla = |f: &mut Vec<String>| {
        let flr = st.flr();
        if flr > s.sac.flr {
            f.push(format!(
                "FLR {:.3} % > {:.3} %",
                flr * 100.0,
                s.sac.flr * 100.0
            ));
        }
        match st.figures.ftd {
            None => f.push("no frame arrived".into()),
            Some(d) => {
                if st.one_way && d.mean > s.sac.ftd_ms {
                    f.push(format!("FTD {:.3} ms > {} ms", d.mean, s.sac.ftd_ms));
                }
                if d.fdv() > s.sac.fdv_ms {
                    f.push(format!("FDV {:.3} ms > {} ms", d.fdv(), s.sac.fdv_ms));
                }
            }
        }
    };
    match st.phase {
        Phase::CirStep { .. } | Phase::Performance => {
            sla(&mut f);
            if ir < st.offered_bps * (1.0 - tol) {
                f.push(format!(
                    "IR {} < offered {} - {:.0} %",
                    mbit(ir),
                    mbit(st.offered_bps),
                    tol * 100.0
                ));
            }
            if st.phase == Phase::Performance && st.availability() < s.sac.avail {
                f.push(format!(
                    "AVAIL {:.3} % < {:.3} %",
                    st.availability() * 100.0,
                    s.sac.avail * 100.0
                ));
            }
        }
        Phase::Eir | Phase::Policing => {
            if ir < cir * (1.0 - s.sac.flr) * (1.0 - tol) {
                f.push(format!("IR {} < CIR {}", mbit(ir), mbit(cir)));
            }
            if ir > top * (1.0 + tol) {
                f.push(format!("IR {} > CIR+EIR {}", mbit(ir), mbit(top)));
            }
        }
    }
    Verdict {
        passed: f.is_empty(),
        generator_limited,
        failures: f,
    }
}

/// What one DUT did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DutRun {
    pub dut: String,
    /// Exactly what ran (the DUT report's description).
    pub description: String,
    pub streams: Vec<Stream>,
    /// The DUT's counters at the end (weir's report, `tc -s`).
    pub counters: serde_json::Value,
    /// Problems while running or stopping the DUT.
    pub errors: Vec<String>,
    /// Real hosts (`--topology`): names, versions, clock offsets (empty in namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<crate::remote::HostInfo>,
}

impl DutRun {
    fn is_weir(&self) -> bool {
        crate::tests::streams::DutChoice::is_weir(&self.dut)
    }

    /// The configuration test's streams (`config`) or the performance test's.
    pub fn part(&self, config: bool) -> impl Iterator<Item = &Stream> {
        self.streams
            .iter()
            .filter(move |s| (s.phase != Phase::Performance) == config)
    }
}

/// The lab's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Y1564Result {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: Y1564Config,
    pub policy_file: String,
    pub policy_text: String,
    pub services: Vec<Service>,
    pub duts: Vec<DutRun>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Recompute every verdict and the checks.
pub fn finish(r: &mut Y1564Result) -> Result<()> {
    let tol = r.config.ir_tolerance;
    for d in r.duts.iter_mut() {
        for st in d.streams.iter_mut() {
            let s = r
                .services
                .iter()
                .find(|s| s.name == st.service)
                .ok_or_else(|| {
                    Error::Invalid(format!("stream of unknown service '{}'", st.service))
                })?;
            st.verdict = judge(st, s, tol);
        }
    }
    r.checks = checks(r);
    Ok(())
}

/// The acceptance checks (module documentation).
pub fn checks(r: &Y1564Result) -> Vec<Check> {
    let mut out = Vec::new();
    for d in r.duts.iter().filter(|d| d.is_weir()) {
        for (config, what) in [
            (true, "service configuration test"),
            (false, "service performance test"),
        ] {
            let name = format!("{}: every service passes the {what}", d.dut);
            let judged: Vec<&Stream> = d
                .part(config)
                .filter(|s| !s.verdict.generator_limited)
                .collect();
            let limited = d.part(config).count() - judged.len();
            if judged.is_empty() {
                out.push(Check::skip(name, "every stream was generator-limited"));
                continue;
            }
            let failed: Vec<String> = judged
                .iter()
                .filter(|s| !s.verdict.passed)
                .map(|s| {
                    format!(
                        "{} {}: {}",
                        s.service,
                        s.phase,
                        s.verdict.failures.join(", ")
                    )
                })
                .collect();
            let mut detail = if failed.is_empty() {
                "all passed".to_string()
            } else {
                failed.join("; ")
            };
            if limited > 0 {
                detail += &format!(" ({limited} generator-limited stream(s) not judged)");
            }
            out.push(Check::new(
                name,
                failed.is_empty(),
                judged.len(),
                "streams",
                detail,
            ));
        }
        out.push(rate_check(r, d));
    }
    out
}

/// The IR of the 100 % CIR step within 1 % of the CIR, and of the policing test within
/// 1 % of CIR + EIR.
fn rate_check(r: &Y1564Result, d: &DutRun) -> Check {
    let name = format!(
        "{}: measured CIR and CIR+EIR within {:.0} % of the profile",
        d.dut,
        r.config.ir_tolerance * 100.0
    );
    let mut parts = Vec::new();
    let mut ok = true;
    let mut n = 0;
    for s in &r.services {
        let find = |p: &dyn Fn(&Phase) -> bool| {
            d.streams
                .iter()
                .find(|st| st.service == s.name && p(&st.phase) && !st.verdict.generator_limited)
        };
        let full = find(&|p| matches!(p, Phase::CirStep { fraction } if *fraction >= 1.0));
        let pol = find(&|p| *p == Phase::Policing);
        for (label, st, want) in [
            ("CIR", full, s.cir_bps as f64),
            ("CIR+EIR", pol, (s.cir_bps + s.eir_bps) as f64),
        ] {
            let Some(ir) = st.and_then(|st| st.figures.ir_bps) else {
                continue;
            };
            n += 1;
            let err = ir / want - 1.0;
            ok &= err.abs() <= r.config.ir_tolerance;
            parts.push(format!("{} {label} {:+.2} %", s.name, err * 100.0));
        }
    }
    if n == 0 {
        return Check::skip(name, "no 100 % CIR step or policing test was judged");
    }
    Check::new(name, ok, n, "rates", parts.join(", "))
}

/// The headline figures for `weir lab report`'s comparison: per service and DUT, the
/// service performance test's IR, mean FTD, FDV and FLR.
pub fn measures(r: &Y1564Result) -> Vec<crate::report::Measure> {
    use crate::report::compare::push_value;
    let mut out = Vec::new();
    for d in &r.duts {
        for st in d.streams.iter().filter(|s| s.phase == Phase::Performance) {
            let scope = format!("service {} (performance test)", st.service);
            let nan = f64::NAN;
            for (figure, v) in [
                ("IR, Mbit/s", st.figures.ir_bps.map_or(nan, |b| b / 1e6)),
                ("FTD mean, ms", st.figures.ftd.map_or(nan, |f| f.mean)),
                ("FDV, ms", st.fdv_ms().unwrap_or(nan)),
                ("FLR, %", st.flr() * 100.0),
            ] {
                push_value(&mut out, &scope, figure, &d.dut, v);
            }
        }
    }
    out
}

/// `weir lab y1564`: the policy the DUTs enforce.
pub struct Y1564 {
    pub policy_file: String,
    pub policy_text: String,
}

impl Y1564 {
    fn policy(&self) -> Result<Policy> {
        Policy::parse(&self.policy_file, &self.policy_text)
            .map_err(|e| Error::Invalid(format!("policy: {e}")))
    }
}

impl Lab for Y1564 {
    const NAME: &'static str = "y1564";
    type Config = Y1564Config;
    type Result = Y1564Result;

    fn paper() -> Y1564Config {
        Y1564Config::paper()
    }

    fn quick() -> Y1564Config {
        Y1564Config::quick()
    }

    fn plan(&self, c: &Y1564Config) -> Result<Outline> {
        validate(c)?;
        let svc = services(&self.policy()?, c)?;
        let streams = c.streams(&svc);
        let per_dut = streams as f64 * (c.step_s + 0.4) + c.perf_s + 0.4 + 2.0;
        Ok(Outline {
            what: format!(
                "{} service(s) ({}), {} configuration stream(s) of {} s and a {} s performance test on {} DUT(s)",
                svc.len(),
                svc.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
                streams,
                c.step_s,
                c.perf_s,
                c.duts.len()
            ),
            estimate_s: Some(per_dut * c.duts.len() as f64),
        })
    }

    fn run(
        self,
        c: &Y1564Config,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Y1564Result> {
        let policy = self.policy()?;
        run(&policy, self.policy_text, c, progress)
    }

    fn finish(r: &mut Y1564Result) -> Result<()> {
        finish(r)
    }

    fn text(r: &Y1564Result) -> String {
        text(r)
    }

    fn checks(r: &Y1564Result) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &Y1564Result, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }

    fn measures(r: &Y1564Result) -> Vec<crate::report::Measure> {
        measures(r)
    }
}

#[cfg(test)]
mod tests;
