//! RFC 6349 ("Framework for TCP Throughput Testing") against any DUT: the path MTU, the
//! baseline RTT and the bottleneck bandwidth, then TCP throughput tests with the RFC's three
//! metrics (TCP Transfer Time Ratio, TCP Efficiency, Buffer Delay Percentage), weir beside
//! the kernel's HTB or a script, at each rate and round-trip time asked.
//!
//! # Method
//!
//! ```text
//!   client ──── lan0 [DUT] wan0 ──── lan0 [line: weir emulator] wan0 ──── server
//!   10.77.0.1    shapes to --rate          line_pct % of the rate, half        10.77.0.2
//!                (one class)               the RTT each way, a deep FIFO       reflector, sink
//! ```
//!
//! The topology and the DUTs are `weir lab rrul`'s ([`crate::tests::rrul::policy`]): the
//! DUT shapes to the rate with one class (`weir:TECHNIQUE` with its preset, `weir:fq_cobalt`
//! weir's default queue; `kernel:htb`; `router:fifo`; `kernel:bridge`; `cmd:SCRIPT`), and a
//! line behind it runs faster with the base RTT, so the bottleneck is the DUT's. Every
//! path (DUT × rate × RTT × run) gets a fresh topology; on it, in the RFC's order
//! (section 3):
//!
//! 1. **Path MTU** (3.1): DF-marked UDP probes bisecting the sizes up to `max_mtu`
//!    ([`crate::agents::path_mtu`], RFC 4821's method).
//! 2. **Baseline RTT** (3.2.1): UDP probes to a reflector every `probe_ms` for
//!    `baseline_s` on the idle path; the minimum is the baseline (the mean and median are
//!    reported too).
//! 3. **Bottleneck bandwidth** (3.2.2, "a layer 2/3 test"): one constant-rate UDP stream of
//!    MTU-sized frames offered at `bb_offered_pct` % of the rate for `bb_s`; BB is the
//!    rate received, counted as the DUTs count it (Ethernet frames without FCS) over the
//!    middle 80 % of the stream ([`crate::tests::streams`]). The BDP and the minimum receive
//!    window (3.3.1) follow from BB and the baseline RTT.
//! 4. **TCP throughput** (3.3), once per entry of `connections`: that many TCP connections
//!    (congestion control `cc`, the hosts' default offloads and buffer autotuning,
//!    `TCP_NOTSENT_LOWAT` 64 KiB) share one transfer of `transfer_s` seconds of the maximum
//!    achievable TCP throughput at the measured BB, each sending its part. The sink
//!    timestamps every connection's first and last byte; `TCP_INFO` gives each sender's
//!    transmitted and retransmitted bytes at the end and its smoothed RTT every 100 ms.
//!
//! # Metrics ([`metrics`])
//!
//! - actual transfer time: from the first connection accepted to the last byte read
//!   (so it includes slow start, which is what the ratio judges);
//! - TCP Transfer Time Ratio = actual / ideal, ideal = the transfer's bytes at the maximum
//!   achievable TCP throughput, BB × MSS / (MTU + 14);
//! - TCP throughput = bytes / actual time; TCP Efficiency from `tcpi_bytes_sent` and
//!   `tcpi_bytes_retrans` summed over the connections;
//! - Buffer Delay Percentage from the mean of every smoothed-RTT sample of the transfer and
//!   the baseline RTT. A full-size segment waits its own serialisation at the bottleneck
//!   (1.2 ms at 10 Mbit/s), which a small probe does not: that much is there even without
//!   a queue. Not judged where the baseline is under [`BD_MIN_BASELINE_MS`] (a percentage
//!   of a sub-millisecond RTT says nothing);
//! - beside the RFC: Jain's fairness index of the connections' throughputs (its section
//!   5.2 asks how a shaper shares among connections) and the largest window the senders
//!   reached against the BDP.
//!
//! # Checks (weir DUTs)
//!
//! - the path MTU is the hosts' ([`HOST_MTU`]); BB within [`BB_TOLERANCE`] of the rate;
//! - every transfer arrived whole;
//! - TCP Transfer Time Ratio at most [`TTR_MAX`];
//! - weir's modern queue (`weir:fq_cobalt`, `weir:fq_codel`): Buffer Delay at most
//!   [`BD_MAX_PCT`] % (baseline ≥ [`BD_MIN_BASELINE_MS`]) and Jain's index at least
//!   [`JAIN_MIN`] with several connections.
//!
//! `metrics.rs` holds the formulas; `run.rs` the testbed; `report.rs` the outputs.

pub mod metrics;
mod report;
mod run;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::agents::MtuReport;
use crate::lab::{Lab, Outline};
use crate::report::compare::{push_samples, push_value};
use crate::report::{Check, Measure};
use crate::tests::rrul::{DutKind, Link};
use crate::{Error, Result};

pub use report::{text, write_outputs};
pub use run::run;

/// The hosts' interface MTU, bytes.
pub const HOST_MTU: u32 = 1500;
/// Bytes a DUT counts per frame beyond the IP packet (the Ethernet header; no FCS).
pub const FRAME_OVERHEAD: u32 = 14;
/// IPv4 and TCP headers with the timestamps option, bytes: a full segment's payload is the
/// MTU less these (1448 of 1500), until a connection reports its MSS.
pub const TCP_HEADERS: u32 = 52;
/// How far BB may be from a weir DUT's rate (0.02 = 2 %).
pub const BB_TOLERANCE: f64 = 0.02;
/// The largest TCP Transfer Time Ratio a weir DUT passes with.
pub const TTR_MAX: f64 = 1.15;
/// The largest Buffer Delay Percentage weir's modern queue passes with.
pub const BD_MAX_PCT: f64 = 30.0;
/// Buffer Delay is judged only on a baseline RTT of at least this, ms.
pub const BD_MIN_BASELINE_MS: f64 = 10.0;
/// The smallest Jain's index among several connections weir's modern queue passes with.
pub const JAIN_MIN: f64 = 0.95;

/// The lab's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rfc6349Config {
    /// DUTs: `weir:TECHNIQUE`, `kernel:htb`, `kernel:htb-perflow`, `router:fifo`,
    /// `kernel:bridge`, `cmd:SCRIPT`.
    pub duts: Vec<String>,
    /// Rates the DUT shapes to, bit/s.
    pub rates_bps: Vec<u64>,
    /// Base round-trip times, ms.
    pub rtts_ms: Vec<u64>,
    /// TCP connections of each throughput test, one test per entry.
    pub connections: Vec<usize>,
    /// Congestion control of every connection.
    pub cc: String,
    /// The transfer's size: this many seconds of the maximum achievable TCP throughput.
    pub transfer_s: f64,
    /// Baseline RTT measurement, s, and its probe period, ms.
    pub baseline_s: f64,
    pub probe_ms: f64,
    /// Bottleneck bandwidth measurement, s, and its offered rate, % of the DUT's rate.
    pub bb_s: f64,
    pub bb_offered_pct: u64,
    /// The largest path MTU probed, bytes.
    pub max_mtu: u32,
    /// The line behind the DUT, % of the DUT's rate.
    pub line_pct: u64,
    pub runs: u32,
    /// weir DUTs and the line busy-poll.
    pub busy_poll: bool,
    pub quick: bool,
    /// Real hosts `client` and `server` instead of namespaces (`--topology FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl Rfc6349Config {
    /// weir's default queue beside the kernel's HTB; 10 and 100 Mbit/s at 50 ms; 1 and 4
    /// connections; 30 s transfers.
    pub fn paper() -> Rfc6349Config {
        Rfc6349Config {
            duts: vec!["weir:fq_cobalt".into(), "kernel:htb".into()],
            rates_bps: vec![10_000_000, 100_000_000],
            rtts_ms: vec![50],
            connections: vec![1, 4],
            cc: "cubic".into(),
            transfer_s: 30.0,
            baseline_s: 5.0,
            probe_ms: 10.0,
            bb_s: 10.0,
            bb_offered_pct: 125,
            max_mtu: 9000,
            line_pct: crate::tests::rrul::policy::LINE_PCT,
            runs: 1,
            busy_poll: false,
            quick: false,
            topology: None,
        }
    }

    /// CI-sized: weir's default queue, 10 Mbit/s at 50 ms, one connection, 10 s transfers
    /// (slow start's overshoot, up to a second of a 100 ms queue when cubic's HyStart does
    /// not end it early, would weigh twice as much in 5 s).
    pub fn quick() -> Rfc6349Config {
        Rfc6349Config {
            duts: vec!["weir:fq_cobalt".into()],
            rates_bps: vec![10_000_000],
            connections: vec![1],
            transfer_s: 10.0,
            baseline_s: 1.0,
            bb_s: 2.0,
            quick: true,
            ..Self::paper()
        }
    }

    /// Refuse settings that cannot run.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(format!("rfc6349: {m}")));
        if self.duts.is_empty() || self.runs == 0 || self.connections.is_empty() {
            return bad("no DUT, run or connection count".into());
        }
        let rates = Some(&self.rates_bps[..]);
        let external = crate::tests::rrul::policy::external_dut(self.topology.as_ref());
        if let Some(m) = crate::tests::rrul::policy::matrix_error(
            &self.duts,
            rates,
            &self.rtts_ms,
            self.line_pct,
            external,
        )? {
            return bad(m);
        }
        if let Some(t) = &self.topology {
            crate::tests::rrul::policy::check_real_hosts("rfc6349", t, &self.rtts_ms, &self.duts)?;
        }
        if let Some(n) = self.connections.iter().find(|&&n| !(1..=64).contains(&n)) {
            return bad(format!("{n} connections (1 to 64)"));
        }
        if !(self.transfer_s >= 1.0 && self.transfer_s <= 3600.0) {
            return bad(format!("a transfer of {} s (1 to 3600)", self.transfer_s));
        }
        if !(self.baseline_s >= 0.5 && self.bb_s >= 1.0) {
            return bad(format!(
                "a baseline of at least 0.5 s and a bottleneck test of at least 1 s (got {} and {})",
                self.baseline_s, self.bb_s
            ));
        }
        if !(1.0..=1000.0).contains(&self.probe_ms) {
            return bad(format!("probe period {} ms (1 to 1000)", self.probe_ms));
        }
        if !(101..=400).contains(&self.bb_offered_pct) {
            return bad(format!(
                "the bottleneck test offered at {} % of the rate (101 to 400: above it, to find it)",
                self.bb_offered_pct
            ));
        }
        if !(crate::agents::MIN_MTU_PROBE..=65_535).contains(&self.max_mtu) {
            return bad(format!(
                "the largest MTU probed {} (at least {})",
                self.max_mtu,
                crate::agents::MIN_MTU_PROBE
            ));
        }
        crate::agents::check_cc(&self.cc)?;
        Ok(())
    }

    /// Every path, in the order they run: per DUT, rate, RTT, run.
    pub fn paths(&self) -> Vec<(String, Link, u32)> {
        let mut out = Vec::new();
        for d in &self.duts {
            for &r in &self.rates_bps {
                for &rtt_ms in &self.rtts_ms {
                    for run in 0..self.runs {
                        let link = Link {
                            down_bps: r,
                            up_bps: r,
                            rtt_ms,
                            line_pct: self.line_pct,
                        };
                        out.push((d.clone(), link, run));
                    }
                }
            }
        }
        out
    }

    /// Roughly how long one path takes, s: setup, the three measurements, each transfer
    /// (its ideal time, about 20 % more, and a pause).
    pub fn path_estimate_s(&self) -> f64 {
        let tests: f64 = self
            .connections
            .iter()
            .map(|_| self.transfer_s * 1.2 + 2.0)
            .sum();
        4.0 + self.baseline_s + 1.0 + self.bb_s + 1.0 + tests
    }
}

/// The baseline RTT's probes, ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub min_ms: f64,
    pub p50_ms: f64,
    pub mean_ms: f64,
    pub max_ms: f64,
    pub probes: u64,
    pub lost: u64,
}

/// The bottleneck bandwidth test.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    /// Ethernet frame bytes (without FCS) of the stream.
    pub frame: u32,
    pub offered_bps: f64,
    /// What the sender achieved.
    pub achieved_bps: f64,
    pub sent: u64,
    pub lost: u64,
    /// The rate received (frames without FCS); `None`: nothing arrived.
    pub bb_bps: Option<f64>,
}

/// One connection of a throughput test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conn {
    pub local: Option<SocketAddr>,
    /// Its part of the transfer, and what the sink read of it.
    pub bytes_asked: u64,
    pub bytes_received: u64,
    /// When the sink accepted it and read its last byte, s since the test's origin.
    pub start_s: Option<f64>,
    pub end_s: Option<f64>,
    /// `tcpi_bytes_sent` (retransmissions included) and `tcpi_bytes_retrans`, final.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// Payload bytes per full segment (`tcpi_snd_mss`).
    pub mss: u32,
    /// Smoothed RTT every 100 ms while sending, ms.
    pub srtt_ms: Vec<f64>,
    /// The largest congestion window seen, segments.
    pub max_cwnd: u32,
    pub error: Option<String>,
}

impl Conn {
    /// Whether its part arrived whole, without error.
    pub fn complete(&self) -> bool {
        self.error.is_none() && self.bytes_received >= self.bytes_asked && self.end_s.is_some()
    }
}

/// The RFC's metrics of one throughput test ([`metrics`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Payload bytes per segment and the maximum achievable TCP throughput, bit/s.
    pub payload: u32,
    pub max_tcp_bps: f64,
    pub ideal_s: f64,
    pub actual_s: f64,
    pub ttr: f64,
    /// Bytes read by the sink over the actual time, bit/s.
    pub throughput_bps: f64,
    pub transmitted: u64,
    pub retransmitted: u64,
    pub efficiency_pct: Option<f64>,
    /// Mean of the smoothed-RTT samples, ms; the Buffer Delay Percentage.
    pub avg_rtt_ms: Option<f64>,
    pub buffer_delay_pct: Option<f64>,
    /// Jain's index of the connections' throughputs (several connections).
    pub jain: Option<f64>,
    /// The largest window in flight of all connections together, bytes (Σ max cwnd × MSS).
    pub peak_window_bytes: u64,
}

/// One throughput test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpTest {
    pub connections: usize,
    /// The whole transfer, bytes.
    pub size_bytes: u64,
    pub conns: Vec<Conn>,
    #[serde(default)]
    pub metrics: Option<Metrics>,
}

impl TcpTest {
    /// Every connection's part arrived whole.
    pub fn complete(&self) -> bool {
        !self.conns.is_empty() && self.conns.iter().all(Conn::complete)
    }
}

/// What one DUT did on one path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PathRun {
    pub dut: String,
    pub link: Link,
    pub run: u32,
    /// The DUT's policy (TOML), as generated.
    pub policy: String,
    pub mtu: Option<MtuReport>,
    pub baseline: Option<Baseline>,
    pub bb: Option<Bottleneck>,
    /// The receiver's `tcp_rmem` maximum, bytes.
    pub rmem_max: Option<u64>,
    pub tests: Vec<TcpTest>,
    pub dut_report: serde_json::Value,
    pub errors: Vec<String>,
    /// Real hosts (`--topology`): names, versions, clock offsets (empty in namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<crate::remote::HostInfo>,
}

impl PathRun {
    /// `weir:fq_cobalt 10Mbit 50ms` (and ` run N` after the first).
    pub fn name(&self) -> String {
        let run = if self.run > 0 {
            format!(" run {}", self.run + 1)
        } else {
            String::new()
        };
        format!("{} {}{run}", self.dut, self.link.name())
    }

    /// The path MTU found, or the hosts' when the probe found none.
    pub fn mtu_or_host(&self) -> u32 {
        self.mtu.as_ref().and_then(|m| m.mtu).unwrap_or(HOST_MTU)
    }

    /// BDP, bits, from BB and the baseline RTT.
    pub fn bdp_bits(&self) -> Option<f64> {
        let bb = self.bb.and_then(|b| b.bb_bps)?;
        Some(metrics::bdp_bits(bb, self.baseline?.min_ms / 1e3))
    }
}

/// The RFC's metrics of `t` on `p` (`None` without a bottleneck bandwidth or any byte).
pub fn compute(p: &PathRun, t: &TcpTest) -> Option<Metrics> {
    let bb = p.bb.and_then(|b| b.bb_bps)?;
    let mtu = p.mtu_or_host();
    let payload = t
        .conns
        .iter()
        .map(|c| c.mss)
        .max()
        .filter(|&m| m > 0)
        .unwrap_or(mtu - TCP_HEADERS);
    let max_tcp_bps = metrics::max_tcp_bps(bb, mtu, payload, FRAME_OVERHEAD);
    let start = t.conns.iter().filter_map(|c| c.start_s).reduce(f64::min)?;
    let end = t.conns.iter().filter_map(|c| c.end_s).reduce(f64::max)?;
    let actual_s = end - start;
    if actual_s <= 0.0 {
        return None;
    }
    let received: u64 = t.conns.iter().map(|c| c.bytes_received).sum();
    let ideal_s = metrics::ideal_transfer_s(t.size_bytes, max_tcp_bps);
    let transmitted: u64 = t.conns.iter().map(|c| c.bytes_sent).sum();
    let retransmitted: u64 = t.conns.iter().map(|c| c.bytes_retrans).sum();
    let samples: Vec<f64> = t
        .conns
        .iter()
        .flat_map(|c| c.srtt_ms.iter().copied())
        .collect();
    let avg_rtt_ms =
        (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64);
    let buffer_delay_pct = match (avg_rtt_ms, p.baseline) {
        (Some(a), Some(b)) if b.min_ms > 0.0 => Some(metrics::buffer_delay_pct(a, b.min_ms)),
        _ => None,
    };
    let jain = if t.conns.len() > 1 {
        let each: Vec<f64> = t
            .conns
            .iter()
            .map(|c| match (c.start_s, c.end_s) {
                (Some(s), Some(e)) if e > s => c.bytes_received as f64 * 8.0 / (e - s),
                _ => 0.0,
            })
            .collect();
        weir_core::stats::jain(&each)
    } else {
        None
    };
    Some(Metrics {
        payload,
        max_tcp_bps,
        ideal_s,
        actual_s,
        ttr: metrics::transfer_time_ratio(actual_s, ideal_s),
        throughput_bps: received as f64 * 8.0 / actual_s,
        transmitted,
        retransmitted,
        efficiency_pct: metrics::tcp_efficiency_pct(transmitted, retransmitted),
        avg_rtt_ms,
        buffer_delay_pct,
        jain,
        peak_window_bytes: t
            .conns
            .iter()
            .map(|c| u64::from(c.max_cwnd) * u64::from(c.mss))
            .sum(),
    })
}

/// The lab's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rfc6349Result {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: Rfc6349Config,
    pub paths: Vec<PathRun>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Recompute every test's metrics and the checks from the raw figures.
pub fn finish(r: &mut Rfc6349Result) -> Result<()> {
    for p in &mut r.paths {
        let m: Vec<Option<Metrics>> = p.tests.iter().map(|t| compute(p, t)).collect();
        for (t, m) in p.tests.iter_mut().zip(m) {
            t.metrics = m;
        }
    }
    r.checks = checks(r);
    Ok(())
}

/// The checks (module documentation), per weir DUT over all its paths.
pub fn checks(r: &Rfc6349Result) -> Vec<Check> {
    let mut out = Vec::new();
    let mut duts: Vec<&str> = Vec::new();
    for p in &r.paths {
        if !duts.contains(&p.dut.as_str()) {
            duts.push(&p.dut);
        }
    }
    for dut in duts {
        let Ok(kind) = DutKind::parse(dut) else {
            continue;
        };
        if !matches!(kind, DutKind::Weir { .. }) {
            continue;
        }
        let paths: Vec<&PathRun> = r.paths.iter().filter(|p| p.dut == dut).collect();
        let tests: Vec<(&PathRun, &TcpTest)> = paths
            .iter()
            .flat_map(|p| p.tests.iter().map(move |t| (*p, t)))
            .collect();
        // path MTU
        let mtus: Vec<String> = paths
            .iter()
            .map(|p| {
                let m = p.mtu.as_ref().and_then(|m| m.mtu);
                format!(
                    "{} {}",
                    p.link.name(),
                    m.map_or("none".into(), |m| format!("{m} B"))
                )
            })
            .collect();
        out.push(Check::new(
            format!("{dut}: the path MTU is the hosts' {HOST_MTU} bytes"),
            paths
                .iter()
                .all(|p| p.mtu.as_ref().and_then(|m| m.mtu) == Some(HOST_MTU)),
            paths.len(),
            "paths",
            mtus.join(", "),
        ));
        // bottleneck bandwidth
        let mut ok = true;
        let parts: Vec<String> = paths
            .iter()
            .map(|p| {
                let rate = p.link.up_bps as f64;
                match p.bb.and_then(|b| b.bb_bps) {
                    Some(bb) => {
                        let err = bb / rate - 1.0;
                        ok &= err.abs() <= BB_TOLERANCE;
                        format!(
                            "{} {:.3} Mbit/s ({:+.2} %)",
                            p.link.name(),
                            bb / 1e6,
                            err * 100.0
                        )
                    }
                    None => {
                        ok = false;
                        format!("{} not measured", p.link.name())
                    }
                }
            })
            .collect();
        out.push(Check::new(
            format!(
                "{dut}: bottleneck bandwidth within {:.0} % of the rate",
                BB_TOLERANCE * 100.0
            ),
            ok,
            paths.len(),
            "paths",
            parts.join(", "),
        ));
        // whole transfers
        let incomplete: Vec<String> = tests
            .iter()
            .filter(|(_, t)| !t.complete())
            .map(|(p, t)| test_name(p, t))
            .collect();
        out.push(Check::new(
            format!("{dut}: every transfer arrived whole"),
            incomplete.is_empty() && !tests.is_empty(),
            tests.len(),
            "tests",
            if incomplete.is_empty() {
                String::new()
            } else {
                format!("incomplete: {}", incomplete.join(", "))
            },
        ));
        // transfer time ratio
        out.push(metric_check(
            format!("{dut}: TCP Transfer Time Ratio at most {TTR_MAX:.2}"),
            &tests,
            |m| Some(m.ttr),
            |x| x <= TTR_MAX,
            3,
            "",
            None,
        ));
        if !kind.is_modern() {
            continue;
        }
        let long_baseline: Vec<(&PathRun, &TcpTest)> = tests
            .iter()
            .copied()
            .filter(|(p, _)| p.baseline.is_some_and(|b| b.min_ms >= BD_MIN_BASELINE_MS))
            .collect();
        out.push(metric_check(
            format!(
                "{dut}: Buffer Delay at most {BD_MAX_PCT:.0} % (baselines of {BD_MIN_BASELINE_MS:.0} ms or more)"
            ),
            &long_baseline,
            |m| m.buffer_delay_pct,
            |x| x <= BD_MAX_PCT,
            1,
            " %",
            Some("no path with such a baseline RTT"),
        ));
        let several: Vec<(&PathRun, &TcpTest)> = tests
            .iter()
            .copied()
            .filter(|(_, t)| t.connections > 1)
            .collect();
        out.push(metric_check(
            format!("{dut}: Jain's index among connections at least {JAIN_MIN}"),
            &several,
            |m| m.jain,
            |x| x >= JAIN_MIN,
            3,
            "",
            Some("no test with several connections"),
        ));
    }
    out
}

/// A test's name in the checks and the comparison: `10Mbit 50ms x4`.
fn test_name(p: &PathRun, t: &TcpTest) -> String {
    format!("{} x{}", p.link.name(), t.connections)
}

/// A check that every test of `judged` has a metric `value` that is `ok`; the detail lists
/// them (`10Mbit 50ms x1 1.050`: `decimals` places, `unit` after the number, `n/a` without
/// a value). With no test judged: skipped for `skip`'s reason, or failed when `skip` is
/// `None`.
fn metric_check(
    name: String,
    judged: &[(&PathRun, &TcpTest)],
    value: impl Fn(&Metrics) -> Option<f64>,
    ok: impl Fn(f64) -> bool,
    decimals: usize,
    unit: &str,
    skip: Option<&str>,
) -> Check {
    if let (true, Some(why)) = (judged.is_empty(), skip) {
        return Check::skip(name, why);
    }
    let values: Vec<(String, Option<f64>)> = judged
        .iter()
        .map(|(p, t)| (test_name(p, t), t.metrics.as_ref().and_then(&value)))
        .collect();
    Check::new(
        name,
        !values.is_empty() && values.iter().all(|(_, x)| x.is_some_and(&ok)),
        values.len(),
        "tests",
        values
            .iter()
            .map(|(n, x)| {
                let v = x.map_or("n/a".into(), |x| format!("{x:.decimals$}{unit}"));
                format!("{n} {v}")
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The headline figures for `weir lab report`'s comparison: per link and connection count
/// and DUT, over runs, the throughput, the three metrics; every RTT sample of the
/// transfers as a distribution.
pub fn measures(r: &Rfc6349Result) -> Vec<Measure> {
    let mut out = Vec::new();
    for p in &r.paths {
        for t in &p.tests {
            let scope = test_name(p, t);
            let Some(m) = t.metrics else { continue };
            let nan = f64::NAN;
            for (figure, v) in [
                ("TCP throughput, Mbit/s", m.throughput_bps / 1e6),
                ("TCP Transfer Time Ratio", m.ttr),
                ("TCP Efficiency, %", m.efficiency_pct.unwrap_or(nan)),
                ("Buffer Delay, %", m.buffer_delay_pct.unwrap_or(nan)),
            ] {
                push_value(&mut out, &scope, figure, &p.dut, v);
            }
            let rtts = t.conns.iter().flat_map(|c| c.srtt_ms.iter().copied());
            push_samples(&mut out, &scope, "TCP smoothed RTT, ms", &p.dut, rtts);
        }
    }
    out
}

/// `weir lab rfc6349`.
pub struct Rfc6349;

impl Lab for Rfc6349 {
    const NAME: &'static str = "rfc6349";
    /// One line per step (baseline, MTU, bottleneck, each transfer's start and end).
    const EVERY_PROGRESS_LINE: bool = true;
    type Config = Rfc6349Config;
    type Result = Rfc6349Result;

    fn paper() -> Rfc6349Config {
        Rfc6349Config::paper()
    }

    fn quick() -> Rfc6349Config {
        Rfc6349Config::quick()
    }

    fn plan(&self, c: &Rfc6349Config) -> Result<Outline> {
        c.validate()?;
        let paths = c.paths().len();
        Ok(Outline {
            what: format!(
                "{paths} path(s) ({} DUT(s) x {} rate(s) x {} RTT(s) x {} run(s)), {} throughput test(s) of {} s each",
                c.duts.len(),
                c.rates_bps.len(),
                c.rtts_ms.len(),
                c.runs,
                c.connections.len(),
                c.transfer_s
            ),
            estimate_s: Some(paths as f64 * c.path_estimate_s()),
        })
    }

    fn run(
        self,
        c: &Rfc6349Config,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Rfc6349Result> {
        run(c, progress)
    }

    fn finish(r: &mut Rfc6349Result) -> Result<()> {
        finish(r)
    }

    fn text(r: &Rfc6349Result) -> String {
        text(r)
    }

    fn checks(r: &Rfc6349Result) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &Rfc6349Result, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }

    fn measures(r: &Rfc6349Result) -> Vec<Measure> {
        measures(r)
    }
}

#[cfg(test)]
mod tests;
