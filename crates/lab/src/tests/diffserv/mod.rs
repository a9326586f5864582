//! `weir lab diffserv`: seed 004's evaluation of a DiffServ router chain (§3), against
//! weir and the kernel's HTB.
//!
//! **Network** (Fig. 5, [`ChainTopo`]): host A → ingress → interior → egress → host B,
//! each router's outgoing 100 Mbit/s link also fed by a background host sending 100 Mbit/s
//! of UDP to B, so each router holds "a highly congested" queue: it receives up to twice
//! what its link carries. The router links are emulated at 100 Mbit/s by the router
//! itself: each router's policy has `[link] rate = "100Mbit"` (weir's shaper, or the
//! kernel peer's HTB root on `wan0`), so its own queue is the link's; the veth and kernel
//! bridges in front of it never queue.
//!
//! **Scenarios** (§3.3; groups are the paper's figures):
//!
//! | group | figures | runs |
//! |---|---|---|
//! | no DiffServ, no background | 8-10 | 5 Mbit/s UDP, 1024-byte payloads |
//! | no DiffServ, background | 11-13 | the same against 3 × 100 Mbit/s |
//! | EF, UDP | 14-16 | 2/4/5/10 Mbit/s with payloads of 200/400/500/1000 bytes (1250 packets/s each), EF reservation 5 Mbit/s, EF queue 25 ms |
//! | AF, UDP | 17-19 | the same rates in AF1 (TRIO of 200 packets), marked green up to 5 Mbit/s and red beyond |
//! | EF, TCP | 20-22 | TCP limited by the application to 2/4/5/10 Mbit/s, EF queue 100 ms |
//! | AF, TCP | 23-25 | the same in AF1 |
//!
//! **Measurement** (§3.2): the clock calibration (echo probes without load,
//! [`crate::agents::EchoProber`], half before the runs and half after, through plain
//! kernel bridges; in namespaces B's clock runs off A's by an injected offset and drift;
//! [`fit`]); then per run the sender
//! stamps `t`, B stamps `T` with its (skewed) clock, and [`one_way`] gives
//! `d = T − t − c(t)`, `j = |ΔT − Δt|` and bandwidth per 100 ms.
//!
//! The runner is in `run.rs`, the policies in `policy.rs`, tables, figures and checks in
//! `report.rs`.

mod calibrate;
mod policy;
mod report;
mod run;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use calibrate::{fit, Calibration, Estimate, Probes, ReceiverClock};
pub use policy::{router_policy, Position};
pub use report::{charts, checks, recordings, text, write_outputs};
pub use run::{run, RunResult, HOSTS};

use crate::lab::{Lab, Outline};
use crate::report::Check;
use crate::stats::skew::one_way;
use crate::topo::ChainTopo;
use crate::{Error, Result};

/// Every router link, bit/s.
pub const LINK_BPS: u64 = 100_000_000;
/// The EF and AF reservations, bit/s.
pub const RESERVATION_BPS: u64 = 5_000_000;
/// Routers in the chain.
pub const ROUTERS: usize = 3;
/// Frame size of the background traffic: the 1174 bytes of the seed's arithmetic
/// (1024 + 8 + 20 + 122), so that a full 100-packet FIFO holds 9.4 ms at 100 Mbit/s.
pub const BACKGROUND_FRAME: usize = 1174;
/// The no-DiffServ runs' UDP payload (§3.3's arithmetic).
pub const BASELINE_PAYLOAD: usize = 1024;
/// The UDP runs: (rate of payload, bit/s; payload bytes), 1250 packets/s each.
pub const UDP_RUNS: [(u64, usize); 4] = [
    (2_000_000, 200),
    (4_000_000, 400),
    (5_000_000, 500),
    (10_000_000, 1000),
];
/// The TCP runs' application rates, bit/s.
pub const TCP_RATES: [u64; 4] = [2_000_000, 4_000_000, 5_000_000, 10_000_000];
/// Bytes per stamped TCP record.
pub const TCP_RECORD: usize = 1000;
/// The seed's averaging interval.
pub const BIN_MS: u64 = 100;
/// UDP ports: measured stream, background, calibration.
pub const MEASURE_PORT: u16 = 5004;
pub const BACKGROUND_PORT: u16 = 9;
pub const CALIBRATION_PORT: u16 = 5005;

/// The service of host A's traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// No DiffServ: FIFO routers.
    BestEffort,
    /// Expedited forwarding (RFC 3246).
    Ef,
    /// Assured forwarding class 1 (RFC 2597).
    Af,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::BestEffort => "best effort",
            Service::Ef => "EF",
            Service::Af => "AF",
        }
    }

    /// The DSCP host A writes itself for the kernel peer (weir's ingress marks instead).
    pub fn host_dscp(self) -> Option<u8> {
        match self {
            Service::BestEffort => None,
            Service::Ef => Some(46),
            Service::Af => Some(10),
        }
    }
}

/// How host A sends.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Constant-rate UDP, busy-waiting sender, this UDP payload.
    Udp { payload: usize },
    /// TCP paced by the application in records of [`TCP_RECORD`] bytes.
    Tcp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp { .. } => "UDP",
            Transport::Tcp => "TCP",
        }
    }
}

/// A group of runs: one of the seed's sets of figures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Group {
    Idle,
    Loaded,
    EfUdp,
    AfUdp,
    EfTcp,
    AfTcp,
}

impl Group {
    pub const ALL: [Group; 6] = [
        Group::Idle,
        Group::Loaded,
        Group::EfUdp,
        Group::AfUdp,
        Group::EfTcp,
        Group::AfTcp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Group::Idle => "idle",
            Group::Loaded => "loaded",
            Group::EfUdp => "ef-udp",
            Group::AfUdp => "af-udp",
            Group::EfTcp => "ef-tcp",
            Group::AfTcp => "af-tcp",
        }
    }

    /// The seed's first figure of the group (bandwidth; delay and jitter follow).
    pub fn first_figure(self) -> u32 {
        match self {
            Group::Idle => 8,
            Group::Loaded => 11,
            Group::EfUdp => 14,
            Group::AfUdp => 17,
            Group::EfTcp => 20,
            Group::AfTcp => 23,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Group::Idle => "5 Mbit/s UDP without DiffServ and background traffic",
            Group::Loaded => "5 Mbit/s UDP without DiffServ, with background traffic",
            Group::EfUdp => "UDP with a 5 Mbit/s EF reservation",
            Group::AfUdp => "UDP with a 5 Mbit/s AF reservation",
            Group::EfTcp => "TCP with a 5 Mbit/s EF reservation",
            Group::AfTcp => "TCP with a 5 Mbit/s AF reservation",
        }
    }

    /// Parses `all` or a comma-separated list of group names.
    pub fn parse_list(s: &str) -> Result<Vec<Group>> {
        if s.trim() == "all" {
            return Ok(Group::ALL.to_vec());
        }
        s.split(',')
            .map(|w| {
                let w = w.trim();
                Group::ALL
                    .into_iter()
                    .find(|g| g.name() == w)
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                            "group '{w}': expected all or a list of {}",
                            Group::ALL.map(Group::name).join(", ")
                        ))
                    })
            })
            .collect()
    }

    /// The runs of the group.
    pub fn scenarios(self) -> Vec<Scenario> {
        let udp = |service, group| {
            UDP_RUNS
                .iter()
                .map(move |&(rate, payload)| Scenario {
                    group,
                    service,
                    transport: Transport::Udp { payload },
                    rate_bps: rate,
                    background: true,
                })
                .collect::<Vec<_>>()
        };
        let tcp = |service, group| {
            TCP_RATES
                .iter()
                .map(move |&rate| Scenario {
                    group,
                    service,
                    transport: Transport::Tcp,
                    rate_bps: rate,
                    background: true,
                })
                .collect::<Vec<_>>()
        };
        let baseline = |background| {
            vec![Scenario {
                group: self,
                service: Service::BestEffort,
                transport: Transport::Udp {
                    payload: BASELINE_PAYLOAD,
                },
                rate_bps: RESERVATION_BPS,
                background,
            }]
        };
        match self {
            Group::Idle => baseline(false),
            Group::Loaded => baseline(true),
            Group::EfUdp => udp(Service::Ef, self),
            Group::AfUdp => udp(Service::Af, self),
            Group::EfTcp => tcp(Service::Ef, self),
            Group::AfTcp => tcp(Service::Af, self),
        }
    }
}

/// One run: host A's stream through the chain.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    pub group: Group,
    pub service: Service,
    pub transport: Transport,
    /// Host A's rate (UDP payload, or TCP application bytes), bit/s.
    pub rate_bps: u64,
    pub background: bool,
}

impl Scenario {
    /// `ef-udp-5M` etc.
    pub fn name(&self) -> String {
        format!("{}-{}M", self.group.name(), self.rate_bps / 1_000_000)
    }

    /// UDP packets per second (0 for TCP).
    pub fn pps(&self) -> f64 {
        match self.transport {
            Transport::Udp { payload } => self.rate_bps as f64 / (8.0 * payload as f64),
            Transport::Tcp => 0.0,
        }
    }
}

/// The device every router is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Device {
    /// weir's bridge with the scenario's policy.
    Weir,
    /// A kernel bridge with the policy's HTB tree on `wan0` (host A marks).
    KernelHtb,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Weir => "weir",
            Device::KernelHtb => "kernel:htb",
        }
    }

    /// Parses `weir`, `kernel:htb` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Device>> {
        match s.trim() {
            "both" => Ok(vec![Device::Weir, Device::KernelHtb]),
            "weir" => Ok(vec![Device::Weir]),
            "kernel:htb" | "htb" => Ok(vec![Device::KernelHtb]),
            other => Err(Error::Invalid(format!(
                "device '{other}': expected weir, kernel:htb or both"
            ))),
        }
    }
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffservConfig {
    pub quick: bool,
    /// Each run's measured stream, s (the seed: 10 minutes).
    pub duration_s: f64,
    /// Background alone before the stream starts, s.
    pub warmup_s: f64,
    /// Calibration, s (the seed: two minutes; half before the runs, half after), and
    /// probes per second.
    pub calibration_s: f64,
    pub calibration_rate: f64,
    /// Each background host's rate, bit/s of frames.
    pub background_bps: u64,
    /// Congestion control of the TCP runs.
    pub cc: String,
    pub devices: Vec<Device>,
    /// Groups weir runs, and groups the kernel peer runs.
    pub groups: Vec<Group>,
    pub peer_groups: Vec<Group>,
    /// B's clock: injected offset (ns) and drift (ppm) (namespaces only: a real host's
    /// clock is its own).
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Real hosts instead of namespaces (`--topology FILE`): hosts `a`, `b`, `c0`-`c2`
    /// over SSH and the three routers at its `[[router]]` tables on this machine.
    #[serde(default)]
    pub topology: Option<crate::remote::Topology>,
}

impl DiffservConfig {
    /// The seed's runs at a length this machine can afford: 60 s each (the seed: 600 s;
    /// `--duration 600` for that), the seed's two-minute calibration.
    pub fn paper() -> DiffservConfig {
        DiffservConfig {
            quick: false,
            duration_s: 60.0,
            warmup_s: 2.0,
            calibration_s: 120.0,
            calibration_rate: 50.0,
            background_bps: LINK_BPS,
            cc: "cubic".into(),
            devices: vec![Device::Weir, Device::KernelHtb],
            groups: Group::ALL.to_vec(),
            peer_groups: Group::ALL.to_vec(),
            offset_ns: 2_718_281_828,
            drift_ppm: 37.5,
            topology: None,
        }
    }

    /// For CI: every weir run for 2 s, the kernel peer on the loaded baseline and EF over
    /// UDP, a 10 s calibration.
    pub fn quick() -> DiffservConfig {
        DiffservConfig {
            quick: true,
            duration_s: 2.0,
            warmup_s: 0.5,
            calibration_s: 10.0,
            calibration_rate: 100.0,
            peer_groups: vec![Group::Loaded, Group::EfUdp],
            ..DiffservConfig::paper()
        }
    }

    /// Refuses settings that cannot run, with the setting named.
    pub fn validate(&self) -> Result<()> {
        let pos = |v: f64, what: &str, max: f64| {
            if v.is_finite() && v > 0.0 && v <= max {
                Ok(())
            } else {
                Err(Error::Invalid(format!(
                    "{what} {v}: expected > 0 and <= {max}"
                )))
            }
        };
        pos(self.duration_s, "--duration (s)", 3600.0)?;
        pos(self.calibration_s, "--calibration (s)", 3600.0)?;
        pos(self.calibration_rate, "calibration rate (probes/s)", 1000.0)?;
        if !(self.warmup_s.is_finite() && (0.0..=60.0).contains(&self.warmup_s)) {
            return Err(Error::Invalid(format!(
                "warm-up {} s: expected 0 to 60",
                self.warmup_s
            )));
        }
        if self.background_bps > 10 * LINK_BPS {
            return Err(Error::Invalid(format!(
                "--background {} bit/s: at most {} (ten times the link)",
                self.background_bps,
                10 * LINK_BPS
            )));
        }
        if !self.drift_ppm.is_finite() || self.drift_ppm.abs() > 1000.0 {
            return Err(Error::Invalid(format!(
                "--drift {} ppm: expected -1000 to 1000",
                self.drift_ppm
            )));
        }
        if self.devices.is_empty() || self.groups.is_empty() {
            return Err(Error::Invalid(
                "nothing to run: no device or no group".into(),
            ));
        }
        crate::agents::check_cc(&self.cc)?;
        Ok(())
    }

    /// Run `groups`; the kernel peer too, except in a quick run (which keeps its peer's
    /// own short list, filtered by `groups`).
    pub fn set_groups(&mut self, groups: Vec<Group>) {
        if !self.quick {
            self.peer_groups = groups.clone();
        }
        self.groups = groups;
    }

    /// The runs of `device`, in order.
    pub fn scenarios(&self, device: Device) -> Vec<Scenario> {
        let groups = match device {
            Device::Weir => &self.groups,
            Device::KernelHtb => &self.peer_groups,
        };
        groups
            .iter()
            .filter(|g| self.groups.contains(g))
            .flat_map(|g| g.scenarios())
            .collect()
    }

    /// Seconds the whole lab takes, roughly.
    pub fn estimate_s(&self) -> f64 {
        let runs: usize = self.devices.iter().map(|&d| self.scenarios(d).len()).sum();
        self.calibration_s + runs as f64 * (self.duration_s + self.warmup_s + 1.5)
    }
}

/// A whole run of the lab.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffservResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: DiffservConfig,
    pub calibration: Calibration,
    pub runs: Vec<RunResult>,
    /// The routers' policies of each scenario (weir's), by scenario name and position.
    pub policies: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub checks: Vec<Check>,
    /// The real hosts' names, versions and clock offsets (empty in namespaces).
    #[serde(default)]
    pub hosts: Vec<crate::remote::HostInfo>,
}

/// The lab (`weir lab diffserv`).
pub struct Diffserv;

impl Lab for Diffserv {
    const NAME: &'static str = "diffserv";
    type Config = DiffservConfig;
    type Result = DiffservResult;

    fn paper() -> DiffservConfig {
        DiffservConfig::paper()
    }

    fn quick() -> DiffservConfig {
        DiffservConfig::quick()
    }

    fn plan(&self, c: &DiffservConfig) -> Result<Outline> {
        c.validate()?;
        let runs: usize = c.devices.iter().map(|&d| c.scenarios(d).len()).sum();
        Ok(Outline {
            what: format!(
                "{runs} run(s) of {} s and a {} s calibration",
                c.duration_s, c.calibration_s
            ),
            estimate_s: Some(c.estimate_s()),
        })
    }

    fn run(
        self,
        c: &DiffservConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<DiffservResult> {
        run(c, progress)
    }

    fn finish(r: &mut DiffservResult) -> Result<()> {
        finish(r);
        Ok(())
    }

    fn text(r: &DiffservResult) -> String {
        text(r)
    }

    fn checks(r: &DiffservResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &DiffservResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Recompute each run's figures from its records and the calibration, then the checks
/// (also for `weir lab report`).
pub fn finish(res: &mut DiffservResult) {
    // a result read back from JSON has no records (they are not saved): keep its figures
    let skew = res
        .calibration
        .skew()
        .unwrap_or(crate::stats::skew::Skew::SHARED_CLOCK);
    for r in res
        .runs
        .iter_mut()
        .filter(|r| !r.records.is_empty() || r.received == 0)
    {
        r.measure(&one_way(&r.records, &skew, BIN_MS * 1_000_000));
    }
    res.checks = checks(res);
}

/// The chain's label prefix for namespaces.
pub const LABEL: &str = "ds";

/// The chain this lab runs on.
pub fn topology() -> Result<ChainTopo> {
    ChainTopo::new(LABEL, ROUTERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_peer_runs_the_groups_asked_for_except_in_a_quick_run() {
        let mut c = DiffservConfig::paper();
        c.set_groups(vec![Group::EfUdp]);
        assert_eq!(
            (c.groups.clone(), c.peer_groups),
            (vec![Group::EfUdp], vec![Group::EfUdp])
        );
        let mut c = DiffservConfig::quick();
        c.set_groups(vec![Group::EfUdp, Group::AfTcp]);
        assert_eq!(c.groups, [Group::EfUdp, Group::AfTcp]);
        assert_eq!(c.peer_groups, [Group::Loaded, Group::EfUdp]);
        // the peer runs what both lists hold
        let n = |g: Group| g.scenarios().len();
        assert_eq!(c.scenarios(Device::KernelHtb).len(), n(Group::EfUdp));
    }

    #[test]
    fn the_udp_runs_send_1250_packets_a_second() {
        for s in Group::EfUdp.scenarios() {
            assert_eq!(s.pps(), 1250.0, "{}", s.name());
        }
        let b = &Group::Loaded.scenarios()[0];
        assert_eq!(b.name(), "loaded-5M");
        assert!(b.background && b.service == Service::BestEffort);
    }

    #[test]
    fn lists_parse_and_refuse_with_the_choices() {
        assert_eq!(Group::parse_list("all").unwrap().len(), 6);
        assert_eq!(
            Group::parse_list("ef-udp, idle").unwrap(),
            vec![Group::EfUdp, Group::Idle]
        );
        let e = Group::parse_list("ef").unwrap_err().to_string();
        assert!(e.contains("group 'ef'") && e.contains("af-tcp"), "{e}");
        assert_eq!(Device::parse_list("both").unwrap().len(), 2);
        assert!(Device::parse_list("tc").is_err());
    }

    #[test]
    fn quick_runs_every_group_on_weir_and_two_on_the_peer() {
        let q = DiffservConfig::quick();
        q.validate().unwrap();
        assert_eq!(q.scenarios(Device::Weir).len(), 18);
        assert_eq!(q.scenarios(Device::KernelHtb).len(), 5);
        assert!(q.estimate_s() < 120.0, "{}", q.estimate_s());
        let mut bad = DiffservConfig::quick();
        bad.duration_s = 0.0;
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--duration"));
    }

    /// A run's 100 ms bins as Flent's voip test names a one-way stream.
    #[test]
    fn bins_become_flent_voip_series() {
        let bin = |t_s: f64, delay_ms: Option<f64>| run::BinRow {
            t_s,
            bandwidth_bps: 5_000_000.0,
            delay_ms,
            jitter_ms: delay_ms.map(|d| d / 10.0),
        };
        let r = RunResult {
            device: Device::Weir,
            scenario: Scenario {
                group: Group::EfUdp,
                service: Service::Ef,
                transport: Transport::Udp { payload: 1000 },
                rate_bps: 5_000_000,
                background: true,
            },
            name: "ef-udp-5M".into(),
            sent: 0,
            duration_s: 0.2,
            records: Vec::new(),
            received: 0,
            loss_pct: 0.0,
            bandwidth_bps: 0.0,
            delay: None,
            jitter: None,
            bins: vec![bin(0.0, Some(4.0)), bin(0.1, None)],
            retransmits: None,
            background_pps: Vec::new(),
            routers: Vec::new(),
            errors: Vec::new(),
        };
        let meta = BTreeMap::from([("unix_time".to_string(), "100".to_string())]);
        let recs = recordings(&meta, &[r]);
        let rec = &recs[0];
        assert_eq!(
            (rec.test.as_str(), rec.part.as_str(), rec.dut.as_str()),
            ("voip", "ef-udp-5M", "weir")
        );
        assert_eq!((rec.start_unix_s, rec.step_s), (100.0, 0.1));
        let names: Vec<&str> = rec.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["VoIP::bitrate", "VoIP::delay", "VoIP::jitter"]);
        assert_eq!(rec.series[0].units, "Kbits/s");
        assert_eq!(rec.series[0].points, [(0.0, 5000.0), (0.1, 5000.0)]);
        assert_eq!(rec.series[1].label, "EF UDP delay");
        assert_eq!(rec.series[1].points[0], (0.0, 4.0));
        assert!(
            rec.series[1].points[1].1.is_nan(),
            "a bin without packets is a gap"
        );
        assert_eq!(rec.series[2].points[0], (0.0, 0.4));
    }
}
