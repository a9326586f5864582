//! Seed 003's simulation, live: moving the bottleneck of an ADSL downstream off the ISP's
//! ATU-C into the subscriber's device (`weir lab postgate`).
//!
//! ```text
//!   servers (10.77.0.2, reflectors .3 .4)   ATU-C: weir emu               DUT            clients (10.77.0.1)
//!     eth0 ──────────────────────── wan0 [line rate, 256-packet queue] lan0 ── wan0 [device] lan0 ── eth0
//!     48 bulk TCP senders + one CBR          queueing delay read from       none / partition / SFQ /  sinks per class
//!                                            the emulator's own queue       Postgate / autorate / HTB
//! ```
//!
//! * **The line** (the ATU-C, seed 003 Fig. 2): a weir emulator in the WAN stage shaping
//!   the downstream to `line_bps` (8 Mbit/s: an ADSL2 line; the paper does not give its
//!   rate) with a 256-packet drop-tail queue and `line_delay_ms` (5 ms) after it; the
//!   upstream (ACKs, probes) passes unshaped ("other queue lengths are quite large").
//!   Its **queueing delay** is the emulator's own: each frame's wait for the serialiser,
//!   summed and counted by the link ([`weir_core::emulate::QueueDelay`]) and read every
//!   `sample_ms` from its statistics socket; the figure per interval is the mean over
//!   the frames that arrived in it, and the percentiles are over those means weighted by
//!   their frames (the maximum is exact).
//! * **Traffic** (seed 003 section 3): 48 bulk TCP flows (MSS 1460) in 4 classes of 12
//!   with equal guaranteed rates, server to client; `batch` (4) start every `step_s`
//!   (10 s) class by class (class 0 first), and from `stop_at_s` (350 s) four stop every
//!   `step_s` in the same order. One 300 kbit/s CBR of 1000-byte UDP payloads from 0 s:
//!   class 3's real-time flow, in its own leaf with a guaranteed 400 kbit/s ("the
//!   guaranteed rate for CBR traffic is more than 300 kbps"). Congestion control `cc`
//!   (reno: ns-2's FTP) set per socket; host offloads and sysctls as a user has them.
//! * **Devices** ([`Device`]), each a configuration of the DUT:
//!   `none` (the kernel's bridge), `partition` (each class fixed at its share of 90 % of
//!   the line, no borrowing), `sfq` (weighted fair sharing of 90 % with borrowing:
//!   the paper's "SFQ/DiffServ"), `postgate[:δ]` (seed 003, p = 100, δ = 100 ms unless
//!   given, probing the server), `autorate[:threshold]` (weir's delay-based autorate over
//!   three reflectors on the server, cake-autorate's defaults unless the threshold is
//!   given) and `htb` (the kernel's HTB at 90 %, the peer); `+tcr` after `postgate` or
//!   `autorate` also turns on TCP rate control in the bulk classes (window sizing and ACK
//!   pacing at the rates the controller sets: the senders' bursts no longer reach the
//!   ATU-C). Per-flow fair queueing in every weir class (64 packets, 16 per flow).
//! * **Figures**: Fig. 3 (ATU-C queueing delay and the line's throughput over time), Fig.
//!   4 (per-class bandwidth at the clients), Fig. 5 (Postgate's weights), the adaptive
//!   devices' rate; a summary table (delay p50/p95/max, utilisation, CBR loss, delay and
//!   jitter) per device.
//! * **The varying line** ([`LabConfig::varying`]): the ATU-C follows a Mahimahi trace
//!   (written into the output directory) that steps between `varying_rates`; all flows
//!   run throughout; static (`sfq`), Postgate and autorate side by side.
//!
//! The **warm-up** is the first `step_s`: the first batch's slow start into an empty
//! line, before any controller has a reply (no device behind the line can stop it).
//! The checks and the "after warm-up" figures leave it out; the table also gives the p95
//! over the whole run.
//!
//! Paper mode: 470 s per device (all 48 flows from 110 s to 350 s). Quick: 8 flows, steps
//! of 6 s, 30 s, devices `none`, `postgate` and `postgate+tcr`, and a 20 s varying line
//! with `none` and `autorate+tcr`.

mod report;
mod run;

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

pub use report::{recordings, text, write_outputs};
pub use run::run;

use crate::lab::{Lab, Outline};
use crate::report::Check;
use crate::stats::dist::DistUs;
use crate::{Error, Result};

/// The clients' sink port of class `k` is `SINK_PORT + k`; the CBR's is `CBR_PORT`.
pub const SINK_PORT: u16 = 5001;
pub const CBR_PORT: u16 = 6000;
/// The probes' source address (no host has it; weir answers ARP for it).
pub const PROBE_SOURCE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 250);
/// The autorate's reflectors: the server's main address and two more on its interface.
pub const REFLECTORS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(10, 77, 0, 2),
    Ipv4Addr::new(10, 77, 0, 3),
    Ipv4Addr::new(10, 77, 0, 4),
];

/// A configuration of the device between the ATU-C and the clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Device {
    /// The kernel's bridge: nothing managed.
    None,
    /// Each class at a fixed share of `share` of the line.
    Partition,
    /// Weighted fair sharing of `share` of the line, with borrowing.
    Sfq,
    /// Seed 003's Postgate with δ (ms), with TCP rate control in the bulk classes or not.
    Postgate { delta_ms: u64, tcr: bool },
    /// weir's autorate with its delay threshold (ms), with TCP rate control or not.
    Autorate { threshold_ms: u64, tcr: bool },
    /// The kernel's HTB at `share` of the line.
    Htb,
}

impl Device {
    pub const PAPER: [Device; 6] = [
        Device::None,
        Device::Partition,
        Device::Sfq,
        Device::Postgate {
            delta_ms: 100,
            tcr: false,
        },
        Device::Autorate {
            threshold_ms: 30,
            tcr: false,
        },
        Device::Htb,
    ];

    pub fn name(self) -> String {
        match self {
            Device::None => "none".into(),
            Device::Partition => "partition".into(),
            Device::Sfq => "sfq".into(),
            Device::Postgate { delta_ms, tcr } => {
                let arg = if delta_ms == 100 {
                    String::new()
                } else {
                    format!(":{delta_ms}ms")
                };
                format!("postgate{arg}{}", if tcr { "+tcr" } else { "" })
            }
            Device::Autorate { threshold_ms, tcr } => {
                let arg = if threshold_ms == 30 {
                    String::new()
                } else {
                    format!(":{threshold_ms}ms")
                };
                format!("autorate{arg}{}", if tcr { "+tcr" } else { "" })
            }
            Device::Htb => "htb".into(),
        }
    }

    /// Whether weir runs it (with a statistics socket).
    pub fn is_weir(self) -> bool {
        !matches!(self, Device::None | Device::Htb)
    }

    /// One of none, partition, sfq, postgate\[:δ\]\[+tcr\], autorate\[:threshold\]\[+tcr\], htb;
    /// δ and the threshold with a unit (`postgate:40ms+tcr`).
    pub fn parse(s: &str) -> Result<Device> {
        let bad = |why: &str| {
            Error::Invalid(format!(
                "device '{s}': {why}; expected none, partition, sfq, postgate[:DELTA], autorate[:THRESHOLD] or htb"
            ))
        };
        let ms = |arg: &str| -> Result<u64> {
            let ns = weir_core::units::parse_duration(arg).map_err(|e| bad(&e.to_string()))?;
            let ms = ns / 1_000_000;
            if ms == 0 || ms > 10_000 || ns % 1_000_000 != 0 {
                return Err(bad("a whole number of milliseconds in 1..=10000 is needed"));
            }
            Ok(ms)
        };
        let (s2, tcr) = match s.strip_suffix("+tcr") {
            Some(x) => (x, true),
            None => (s, false),
        };
        let (kind, arg) = match s2.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s2, None),
        };
        if tcr && kind != "postgate" && kind != "autorate" {
            return Err(bad("only postgate and autorate take +tcr"));
        }
        Ok(match (kind, arg) {
            ("none", None) => Device::None,
            ("partition", None) => Device::Partition,
            ("sfq", None) => Device::Sfq,
            ("htb", None) => Device::Htb,
            ("postgate", a) => Device::Postgate {
                delta_ms: a.map(ms).transpose()?.unwrap_or(100),
                tcr,
            },
            ("autorate", a) => {
                let t = a.map(ms).transpose()?.unwrap_or(30);
                if t < 2 {
                    return Err(bad("the threshold must be at least 2ms"));
                }
                Device::Autorate {
                    threshold_ms: t,
                    tcr,
                }
            }
            (_, Some(_)) => return Err(bad("only postgate and autorate take an argument")),
            _ => return Err(bad("unknown device")),
        })
    }

    /// A comma-separated list; `paper` for [`Device::PAPER`].
    pub fn parse_list(s: &str) -> Result<Vec<Device>> {
        if s.trim() == "paper" {
            return Ok(Device::PAPER.to_vec());
        }
        let v = s
            .split(',')
            .map(|d| Device::parse(d.trim()))
            .collect::<Result<Vec<_>>>()?;
        if v.is_empty() {
            return Err(Error::Invalid("no device listed".into()));
        }
        Ok(v)
    }
}

/// The lab's settings; see the module comment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabConfig {
    /// The ADSL downstream (the ATU-C's rate), bit/s, its queue (packets) and delay.
    pub line_bps: u64,
    pub atu_queue: u32,
    pub line_delay_ms: u64,
    /// Classes of bulk flows, flows per class, flows started (stopped) together.
    pub classes: usize,
    pub flows_per_class: usize,
    pub batch: usize,
    /// Time between two batches, and when the first batch stops.
    pub step_s: f64,
    pub stop_at_s: f64,
    /// The CBR: rate (bit/s), UDP payload (bytes), its leaf's guaranteed rate (bit/s).
    pub cbr_bps: u64,
    pub cbr_payload: usize,
    pub cbr_class_bps: u64,
    /// Partition, SFQ and HTB shape to this share of the line.
    pub share: f64,
    /// weir's per-flow queues in each bulk class: packets in all, and per flow (the
    /// kernel's SFQ holds 127 in all).
    pub class_limit: u32,
    pub session_limit: u32,
    /// Postgate's p and its probe interval (ms).
    pub p: u32,
    pub probe_ms: u64,
    /// Period of the samples (ATU-C, device, sinks), ms.
    pub sample_ms: u64,
    pub cc: String,
    pub devices: Vec<Device>,
    /// The varying line: its devices (none: no such scenario), length, and the rates the
    /// trace steps through, one per `varying_step_s`.
    pub varying: Vec<Device>,
    pub varying_s: f64,
    pub varying_step_s: f64,
    pub varying_rates: Vec<u64>,
    pub quick: bool,
    /// Real hosts instead of namespaces (`--topology FILE`): the clients are its host
    /// `client`, the servers its host `server`, the device runs at its `[dut]` and the
    /// ATU-C at its `[wan]` (both interfaces of this machine).
    #[serde(default)]
    pub topology: Option<crate::remote::Topology>,
}

impl LabConfig {
    /// Seed 003's scenario: 8 Mbit/s, 48 flows, 470 s, every device; the varying line
    /// for 120 s with none, static (`sfq`), Postgate and autorate.
    pub fn paper() -> LabConfig {
        LabConfig {
            line_bps: 8_000_000,
            atu_queue: 256,
            line_delay_ms: 5,
            classes: 4,
            flows_per_class: 12,
            batch: 4,
            step_s: 10.0,
            stop_at_s: 350.0,
            cbr_bps: 300_000,
            cbr_payload: 1000,
            cbr_class_bps: 400_000,
            share: 0.9,
            class_limit: 64,
            session_limit: 16,
            p: 100,
            probe_ms: 20,
            sample_ms: 250,
            cc: "reno".into(),
            devices: Device::PAPER.to_vec(),
            varying: vec![
                Device::Sfq,
                Device::Postgate {
                    delta_ms: 100,
                    tcr: false,
                },
                Device::Autorate {
                    threshold_ms: 30,
                    tcr: false,
                },
            ],
            varying_s: 120.0,
            varying_step_s: 15.0,
            varying_rates: vec![8_000_000, 4_000_000, 6_000_000, 3_000_000],
            quick: false,
            topology: None,
        }
    }

    /// CI-sized: 8 flows in steps of 6 s (30 s), `none`, `postgate` and `postgate+tcr`;
    /// a 20 s varying line with `none` and `autorate+tcr`.
    pub fn quick() -> LabConfig {
        LabConfig {
            flows_per_class: 2,
            step_s: 6.0,
            stop_at_s: 18.0,
            // plain Postgate is measured at paper length (its p95 is not a quick check)
            devices: vec![
                Device::None,
                Device::Postgate {
                    delta_ms: 100,
                    tcr: true,
                },
            ],
            varying: vec![
                Device::None,
                Device::Autorate {
                    threshold_ms: 30,
                    tcr: true,
                },
            ],
            varying_s: 20.0,
            varying_step_s: 5.0,
            quick: true,
            ..LabConfig::paper()
        }
    }

    pub fn flows(&self) -> usize {
        self.classes * self.flows_per_class
    }

    /// Flow `i`'s class and start and stop times (s) in the seed's scenario.
    pub fn flow_times(&self, i: usize) -> (usize, f64, f64) {
        let b = (i / self.batch) as f64;
        (
            i / self.flows_per_class,
            b * self.step_s,
            self.stop_at_s + b * self.step_s,
        )
    }

    /// Length of the seed's scenario: the last batch's stop plus one step.
    pub fn duration_s(&self) -> f64 {
        self.flow_times(self.flows() - 1).2 + self.step_s
    }

    /// An ADSL line of `bps`; the varying line keeps its shape relative to the line.
    pub fn set_line(&mut self, bps: u64) {
        let old = self.line_bps as f64;
        self.varying_rates = self
            .varying_rates
            .iter()
            .map(|&r| (r as f64 / old * bps as f64).round() as u64)
            .collect();
        self.line_bps = bps;
    }

    /// Seconds the whole lab takes, about.
    pub fn estimate_s(&self) -> f64 {
        let per = 8.0;
        self.devices.len() as f64 * (self.duration_s() + per)
            + self.varying.len() as f64 * (self.varying_s + per)
    }

    /// Refuse settings that cannot run, naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::Invalid(s));
        if !(64_000..=1_000_000_000).contains(&self.line_bps) {
            return bad(format!(
                "line rate {} bit/s: expected 64kbit..1Gbit",
                self.line_bps
            ));
        }
        if self.classes == 0 || self.classes > 16 || self.flows_per_class == 0 {
            return bad("classes 1..=16 with at least one flow each".into());
        }
        if self.flows() > 240 {
            return bad(format!("{} flows: at most 240", self.flows()));
        }
        if self.batch == 0 || self.step_s <= 0.0 {
            return bad("batch and step must be above 0".into());
        }
        let last_start = self.flow_times(self.flows() - 1).1;
        if self.stop_at_s <= last_start {
            return bad(format!(
                "the flows stop from {} s, before the last starts at {last_start} s",
                self.stop_at_s
            ));
        }
        if !(self.share > 0.0 && self.share <= 1.0) {
            return bad(format!("share {}: expected (0, 1]", self.share));
        }
        let classes_bps = self.line_bps as f64 * self.share - self.cbr_class_bps as f64;
        if classes_bps < 8_000.0 * self.classes as f64 || self.cbr_bps > self.cbr_class_bps {
            return bad(format!(
                "the CBR's leaf ({} bit/s, for a {} bit/s CBR) leaves no room for the classes in {:.0} % of the line",
                self.cbr_class_bps,
                self.cbr_bps,
                self.share * 100.0
            ));
        }
        if self.devices.is_empty() && self.varying.is_empty() {
            return bad("no device to run".into());
        }
        if !self.varying.is_empty()
            && (self.varying_rates.is_empty()
                || self.varying_step_s <= 0.0
                || self.varying_s <= 0.0)
        {
            return bad("the varying line needs rates, a step and a length".into());
        }
        if let Some(&r) = self
            .varying_rates
            .iter()
            .find(|&&r| r < 12_000 || r > self.line_bps)
        {
            return bad(format!(
                "varying rate {r} bit/s: each must be within 12kbit..the line's {} bit/s",
                self.line_bps
            ));
        }
        if self.sample_ms < 50 || self.sample_ms > 5_000 {
            return bad(format!(
                "sample period {} ms: expected 50..=5000",
                self.sample_ms
            ));
        }
        if let Some(t) = &self.topology {
            check_topology(t)?;
        }
        Ok(())
    }
}

/// The host names a topology file gives this lab: the clients (the sinks, behind the
/// device) and the servers (the senders and the reflectors, behind the ATU-C).
pub const HOSTS: [&str; 2] = ["client", "server"];

/// What the lab needs of real hosts that the topology must give, refused before anything
/// connects: the ATU-C runs at `[wan]`, the device at `[dut]` (every device is a
/// configuration the lab makes, so not an external one).
fn check_topology(t: &crate::remote::Topology) -> Result<()> {
    if matches!(t.dut, crate::remote::TopoDut::External) {
        return Err(Error::Invalid(format!(
            "{}: the DUT is external (`[dut] external = true`), and every device of the \
             postgate lab is a configuration the lab makes (none, partition, sfq, postgate, \
             autorate, htb): name the DUT's interfaces on this machine (`[dut] lan`, `wan`)",
            t.file
        )));
    }
    if t.wan.is_none() {
        return Err(Error::Invalid(format!(
            "{}: the postgate lab emulates the ATU-C (the ADSL line) in a WAN stage, and the \
             topology has no [wan]: name two interfaces of this machine between the DUT and \
             the server (`[wan] lan = \"…\"`, `wan = \"…\"`)",
            t.file
        )));
    }
    Ok(())
}

/// One sample period of a run (the figures' points).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// End of the period, s since the run's start.
    pub t_s: f64,
    /// Mean queueing delay at the ATU-C of the frames that arrived in the period (ms),
    /// and their number.
    pub atu_delay_ms: Option<f64>,
    pub atu_frames: u64,
    /// What the ATU-C sent onto the line, bit/s.
    pub line_bps: f64,
    /// The line's capacity in the period (the trace's rate on the varying line).
    pub capacity_bps: f64,
    /// Per class, then the CBR: goodput at the clients, bit/s.
    pub class_bps: Vec<f64>,
    /// An adaptive device's link rate (bit/s), its delay estimate (ms) and Postgate's
    /// weights.
    pub rate_bps: Option<f64>,
    pub probe_delay_ms: Option<f64>,
    pub weights: Vec<f64>,
}

/// The CBR's statistics over the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CbrStats {
    pub sent: u64,
    pub received: u64,
    pub loss_pct: f64,
    /// Packets sent after the warm-up that never arrived.
    pub lost_after_warmup: u64,
    /// One-way delay and |consecutive delay difference|, µs.
    pub delay: Option<DistUs>,
    pub jitter: Option<DistUs>,
    /// Goodput over the run, bit/s.
    pub goodput_bps: f64,
}

/// One device on one line (a run).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceRun {
    pub device: Device,
    pub name: String,
    /// "seed" (the 48-flow scenario) or "varying".
    pub scenario: String,
    pub duration_s: f64,
    pub samples: Vec<Sample>,
    /// ATU-C queueing delay after the warm-up to the end of the active period (ms):
    /// frame-weighted percentiles of the period means; the p95 over the whole run; the
    /// largest single wait.
    pub delay_p50_ms: f64,
    pub delay_p95_ms: f64,
    pub delay_p95_all_ms: f64,
    pub delay_max_ms: f64,
    /// The line's use over the active period (sent / capacity), and the least over any
    /// 10 s window of it.
    pub utilisation: f64,
    pub min_utilisation_10s: f64,
    /// Mean goodput per class (then the CBR) while every flow runs, bit/s.
    pub class_mean_bps: Vec<f64>,
    pub cbr: CbrStats,
    /// TCP flows that connected and delivered data, of those started.
    pub flows_ok: usize,
    pub flows: usize,
    /// The device's policy (weir, HTB) and what ran.
    pub policy: Option<String>,
    pub description: String,
    pub dut_report: serde_json::Value,
    pub errors: Vec<String>,
    /// The real hosts' names, versions and clock offsets (empty in namespaces).
    #[serde(default)]
    pub hosts: Vec<crate::remote::HostInfo>,
}

/// The lab's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LabResult {
    pub kind: String,
    pub config: LabConfig,
    pub meta: std::collections::BTreeMap<String, String>,
    pub runs: Vec<DeviceRun>,
    pub checks: Vec<Check>,
}

/// The lab (`weir lab postgate`).
pub struct Postgate;

impl Lab for Postgate {
    const NAME: &'static str = "postgate";
    type Config = LabConfig;
    type Result = LabResult;

    fn paper() -> LabConfig {
        LabConfig::paper()
    }

    fn quick() -> LabConfig {
        LabConfig::quick()
    }

    fn plan(&self, c: &LabConfig) -> Result<Outline> {
        c.validate()?;
        Ok(Outline {
            what: format!(
                "{} device(s) for {:.0} s, {} on the varying line for {:.0} s",
                c.devices.len(),
                c.duration_s(),
                c.varying.len(),
                c.varying_s
            ),
            estimate_s: Some(c.estimate_s()),
        })
    }

    /// The varying line's trace goes into `out`.
    fn run(
        self,
        c: &LabConfig,
        out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<LabResult> {
        run(c, out, progress)
    }

    fn finish(r: &mut LabResult) -> Result<()> {
        r.checks = checks(&r.runs, r.config.quick);
        Ok(())
    }

    fn text(r: &LabResult) -> String {
        text(r)
    }

    fn checks(r: &LabResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &LabResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Frame-weighted percentile `q` (0..1) of `(value, weight)` pairs.
pub fn weighted_percentile(mut v: Vec<(f64, u64)>, q: f64) -> f64 {
    v.retain(|x| x.1 > 0 && x.0.is_finite());
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = v.iter().map(|x| x.1).sum();
    let want = q * total as f64;
    let mut acc = 0u64;
    for (x, w) in &v {
        acc += w;
        if acc as f64 >= want {
            return *x;
        }
    }
    v.last().map_or(0.0, |x| x.0)
}

/// The acceptance checks (after the warm-up): seed 003's claim for every Postgate device
/// (p95 below 50 ms at 60 % or more of the line in every 10 s, the CBR without loss);
/// beyond the paper, with TCP rate control, p95 at most 20 ms at 85 % or more of the line
/// (paper mode only: the quick run's 24 s are too short to average a utilisation on);
/// the unmanaged line's queue as the control (its p95 above 100 ms); and on the varying
/// line, each adaptive device's p95 at most half the unmanaged line's (measured in the
/// same lab).
pub fn checks(runs: &[DeviceRun], quick: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let none_varying = runs
        .iter()
        .find(|r| r.scenario == "varying" && r.device == Device::None)
        .map(|r| r.delay_p95_ms);
    for r in runs {
        if !r.errors.is_empty() {
            out.push(Check::new(
                format!("{} ({}): ran cleanly", r.name, r.scenario),
                false,
                0,
                "",
                r.errors.join("; "),
            ));
        }
        let seed = r.scenario == "seed";
        match r.device {
            Device::Postgate { tcr, .. } if seed => {
                if tcr && !quick {
                    out.push(Check::new(
                        format!(
                            "{}: ATU-C delay p95 <= 20 ms at >= 85 % of the line",
                            r.name
                        ),
                        r.delay_p95_ms <= 20.0 && r.utilisation >= 0.85,
                        1,
                        "ms",
                        format!(
                            "p95 {:.1} ms, utilisation {:.1} %",
                            r.delay_p95_ms,
                            r.utilisation * 100.0
                        ),
                    ));
                }
                out.push(Check::new(
                    format!("{}: ATU-C delay p95 < 50 ms", r.name),
                    r.delay_p95_ms < 50.0,
                    1,
                    "ms",
                    format!("p95 {:.1} ms", r.delay_p95_ms),
                ));
                out.push(Check::new(
                    format!("{}: utilisation >= 60 % in every 10 s", r.name),
                    r.min_utilisation_10s >= 0.6,
                    1,
                    "",
                    format!(
                        "least {:.1} %, mean {:.1} %",
                        r.min_utilisation_10s * 100.0,
                        r.utilisation * 100.0
                    ),
                ));
                out.push(Check::new(
                    format!("{}: the CBR loses nothing", r.name),
                    r.cbr.received > 0 && r.cbr.lost_after_warmup == 0,
                    1,
                    "packets",
                    format!(
                        "{} lost after the warm-up; {} of {} received in all",
                        r.cbr.lost_after_warmup, r.cbr.received, r.cbr.sent
                    ),
                ));
            }
            Device::None if seed => out.push(Check::new(
                "none: the ATU-C's queue is the bottleneck (p95 > 100 ms)",
                r.delay_p95_ms > 100.0,
                1,
                "ms",
                format!("p95 {:.1} ms", r.delay_p95_ms),
            )),
            Device::Postgate { .. } | Device::Autorate { .. } if !seed => {
                if let Some(none) = none_varying {
                    out.push(Check::new(
                        format!(
                            "{} on the varying line: ATU-C delay p95 at most half the unmanaged line's",
                            r.name
                        ),
                        r.delay_p95_ms <= none / 2.0,
                        1,
                        "ms",
                        format!(
                            "p95 {:.1} ms against {none:.1} ms, utilisation {:.1} %",
                            r.delay_p95_ms,
                            r.utilisation * 100.0
                        ),
                    ));
                }
            }
            _ => {}
        }
        out.push(Check::new(
            format!("{} ({}): every flow delivered", r.name, r.scenario),
            r.flows_ok == r.flows,
            1,
            "",
            format!("{} of {}", r.flows_ok, r.flows),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_varying_line_keeps_its_shape_on_another_line() {
        let mut c = LabConfig::paper();
        c.set_line(10_000_000);
        assert_eq!(c.line_bps, 10_000_000);
        // 8, 4, 6, 3 Mbit/s of an 8 Mbit/s line
        assert_eq!(
            c.varying_rates,
            [10_000_000, 5_000_000, 7_500_000, 3_750_000]
        );
        c.set_line(3_000_000);
        assert_eq!(
            c.varying_rates,
            [3_000_000, 1_500_000, 2_250_000, 1_125_000]
        );
    }

    #[test]
    fn devices_parse_and_name_themselves() {
        for d in Device::PAPER {
            assert_eq!(Device::parse(&d.name()).unwrap(), d);
        }
        assert_eq!(
            Device::parse("postgate:40ms+tcr").unwrap(),
            Device::Postgate {
                delta_ms: 40,
                tcr: true
            }
        );
        assert_eq!(
            Device::parse("postgate+tcr").unwrap().name(),
            "postgate+tcr"
        );
        assert_eq!(
            Device::parse("autorate:10ms").unwrap().name(),
            "autorate:10ms"
        );
        for bad in [
            "cake",
            "sfq:3ms",
            "sfq+tcr",
            "postgate:0ms",
            "postgate:1.5ms",
            "autorate:1ms",
        ] {
            assert!(Device::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Device::parse_list("paper").unwrap().len(), 6);
        assert_eq!(Device::parse_list("none, htb").unwrap().len(), 2);
    }

    /// The seed's schedule: 4 flows every 10 s class by class; the first batch stops at
    /// 350 s, the last (flows 44-47, class 3) starts at 110 s and stops at 460 s.
    #[test]
    fn the_schedule_is_the_seeds() {
        let c = LabConfig::paper();
        c.validate().unwrap();
        assert_eq!(c.flows(), 48);
        assert_eq!(c.flow_times(0), (0, 0.0, 350.0));
        assert_eq!(c.flow_times(12), (1, 30.0, 380.0));
        assert_eq!(c.flow_times(47), (3, 110.0, 460.0));
        assert_eq!(c.duration_s(), 470.0);
        let q = LabConfig::quick();
        q.validate().unwrap();
        assert_eq!(q.flows(), 8);
        assert_eq!(q.duration_s(), 30.0);
    }

    #[test]
    fn bad_settings_are_named() {
        let mut c = LabConfig::paper();
        c.stop_at_s = 100.0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("before the last starts"));
        let mut c = LabConfig::paper();
        c.cbr_class_bps = 7_500_000;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("leaves no room"));
        let mut c = LabConfig::paper();
        c.varying_rates = vec![9_000_000];
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("varying rate"));
    }

    /// Weighted percentiles by hand: values 1, 2, 10 with weights 1, 8, 1: p50 = 2, p95 =
    /// 10 (the 9.5th of 10 frames), p5 = 1.
    #[test]
    fn weighted_percentiles_by_hand() {
        let v = vec![(10.0, 1), (1.0, 1), (2.0, 8), (99.0, 0)];
        assert_eq!(weighted_percentile(v.clone(), 0.5), 2.0);
        assert_eq!(weighted_percentile(v.clone(), 0.95), 10.0);
        assert_eq!(weighted_percentile(v, 0.05), 1.0);
        assert_eq!(weighted_percentile(vec![], 0.5), 0.0);
    }

    /// A device run's samples as Flent's tcp_ndown: classes as streams, the rest in
    /// weir's names; series without a value (no adaptive rate) are left out.
    #[test]
    fn samples_become_flent_series() {
        let config = LabConfig {
            classes: 2,
            ..LabConfig::quick()
        };
        let sample = |t_s: f64| Sample {
            t_s,
            atu_delay_ms: Some(12.5),
            atu_frames: 10,
            line_bps: 7_000_000.0,
            capacity_bps: 8_000_000.0,
            class_bps: vec![3_000_000.0, 2_000_000.0, 300_000.0],
            rate_bps: None,
            probe_delay_ms: Some(20.0),
            weights: Vec::new(),
        };
        let run = DeviceRun {
            device: Device::Sfq,
            name: "sfq".into(),
            scenario: "seed".into(),
            duration_s: 0.5,
            samples: vec![sample(0.25), sample(0.5)],
            delay_p50_ms: 0.0,
            delay_p95_ms: 0.0,
            delay_p95_all_ms: 0.0,
            delay_max_ms: 0.0,
            utilisation: 0.0,
            min_utilisation_10s: 0.0,
            class_mean_bps: Vec::new(),
            cbr: CbrStats::default(),
            flows_ok: 0,
            flows: 0,
            policy: None,
            description: String::new(),
            dut_report: serde_json::Value::Null,
            errors: Vec::new(),
            hosts: Vec::new(),
        };
        let r = LabResult {
            kind: "postgate".into(),
            config,
            meta: Default::default(),
            runs: vec![run],
            checks: Vec::new(),
        };
        let recs = report::recordings(&r);
        assert_eq!(recs.len(), 1);
        let rec = &recs[0];
        assert_eq!(
            (rec.test.as_str(), rec.part.as_str(), rec.dut.as_str()),
            ("tcp_ndown", "seed", "sfq")
        );
        assert_eq!(rec.test_parameters["download_streams"], "2");
        assert_eq!(rec.step_s, r.config.sample_ms as f64 / 1000.0);
        let names: Vec<&str> = rec.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "TCP download::1",
                "TCP download::2",
                "CBR goodput",
                "Line throughput",
                "Line capacity",
                "ATU-C queueing delay",
                "Probe delay"
            ]
        );
        assert_eq!(rec.series[0].points, [(0.25, 3.0), (0.5, 3.0)]);
        assert_eq!(rec.series[2].points[0], (0.25, 0.3));
        assert_eq!(
            (rec.series[5].units.as_str(), rec.series[5].points[1]),
            ("ms", (0.5, 12.5))
        );
    }
}
