//! Running `weir lab diffserv`: one chain for the whole lab; per run the routers get the
//! scenario's policies, the background hosts flood, and host A's stream is measured.
//!
//! Order within a run: routers up → background on (each host `background_bps` of
//! [`BACKGROUND_FRAME`]-byte frames to B's discard port, sleep-paced, batches allowed) →
//! `warmup_s` so every queue is full → B's sink, then A's sender for `duration_s` → the
//! sink drains → background off → routers stopped (their reports kept).
//!
//! CPUs (2 on the reference machine): A's sender and B's sink on CPU 0 (the UDP sender
//! busy-waits the last 100 µs before each packet, as the seed's did), weir's three router
//! threads on CPU 1, the background senders where the scheduler puts them. On a one-CPU
//! machine nothing is pinned.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_core::policy::Policy;
use weir_io::clock::realtime_ns;

use super::policy::{router_policy, Position};
use super::{
    echo_probes, fit, Device, DiffservConfig, DiffservResult, Probes, ReceiverClock, Scenario,
    Transport, BACKGROUND_FRAME, BACKGROUND_PORT, CALIBRATION_PORT, MEASURE_PORT, TCP_RECORD,
};
use crate::agents::cbr::{CbrSender, CbrSenderOpts, CbrSink, CbrSinkOpts, Pacing};
use crate::agents::{StampedSender, StampedSenderOpts, StampedSink};
use crate::dut::{bridge_config, htb_commands, tc_batch, tc_counters, BridgeThread};
use crate::report;
use crate::stats::dist::DistUs;
use crate::stats::skew::{OneWay, Record};
use crate::topo::{require_root, ChainTopo};
use crate::{Error, Result};

/// Flow id of host A's UDP stream.
const FLOW: u32 = 0x5EED_0004;
/// Flow id of the background.
const BG_FLOW: u32 = 0xB6B6_B6B6;
/// Longest wait for a router's bridge to open.
const ROUTER_START: Duration = Duration::from_secs(10);
/// After the sender stops: longest silence before the sink gives up.
const DRAIN: Duration = Duration::from_millis(500);

/// The distribution of `ns` values (the non-finite ones left out), in µs; `None` if
/// there are none.
fn dist_of_ns(v: impl Iterator<Item = f64>) -> Option<DistUs> {
    let mut us: Vec<f64> = v.filter(|x| x.is_finite()).map(|x| x / 1e3).collect();
    us.sort_unstable_by(f64::total_cmp);
    (!us.is_empty()).then(|| DistUs::from_sorted(&us))
}

/// One 100 ms interval of a run (the seed's plots).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinRow {
    pub t_s: f64,
    pub bandwidth_bps: f64,
    pub delay_ms: Option<f64>,
    pub jitter_ms: Option<f64>,
}

/// One run's outcome.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub device: Device,
    pub scenario: Scenario,
    pub name: String,
    /// UDP packets or TCP records host A sent.
    pub sent: u64,
    /// The measured stream's length, s.
    pub duration_s: f64,
    /// The received packets or records, B's (skewed) clock. Not saved: 75 000 per minute.
    #[serde(skip)]
    pub records: Vec<Record>,
    pub received: u64,
    /// Lost packets (UDP: sent − received; TCP: records never delivered), percent.
    pub loss_pct: f64,
    /// Payload (UDP) or application (TCP) bit/s received over the stream's duration.
    pub bandwidth_bps: f64,
    /// One-way delay and jitter of the received packets, µs.
    pub delay: Option<DistUs>,
    pub jitter: Option<DistUs>,
    pub bins: Vec<BinRow>,
    /// TCP: the sender's retransmitted segments.
    pub retransmits: Option<u64>,
    /// Each background host: packets per second achieved.
    pub background_pps: Vec<f64>,
    /// The routers' reports (weir's bridge report; the kernel's qdisc and class counters).
    pub routers: Vec<Value>,
    pub errors: Vec<String>,
}

impl RunResult {
    /// Fills the figures from one-way statistics of the records.
    pub fn measure(&mut self, ow: &OneWay) {
        self.received = ow.loss.received;
        self.loss_pct = if self.sent == 0 {
            0.0
        } else {
            self.sent.saturating_sub(self.received) as f64 * 100.0 / self.sent as f64
        };
        let bytes: u64 = ow.bins.iter().map(|b| b.bytes).sum();
        let dur = self.duration_s.max(1e-9);
        self.bandwidth_bps = bytes as f64 * 8.0 / dur;
        self.delay = dist_of_ns(ow.packets.iter().map(|p| p.delay_ns));
        self.jitter = dist_of_ns(ow.packets.iter().filter_map(|p| p.jitter_ns));
        self.bins = ow
            .bins
            .iter()
            .map(|b| BinRow {
                t_s: b.start_ns as f64 / 1e9,
                bandwidth_bps: b.bandwidth_bps,
                delay_ms: b.mean_delay_ns.map(|d| d / 1e6),
                jitter_ms: b.mean_jitter_ns.map(|j| j / 1e6),
            })
            .collect();
    }
}

/// Runs the lab: the calibration, then every device's scenarios.
pub fn run(c: &DiffservConfig, progress: &mut dyn FnMut(&str)) -> Result<DiffservResult> {
    c.validate()?;
    require_root()?;
    let topo = super::topology()?;
    let clock = ReceiverClock {
        offset_ns: c.offset_ns,
        drift_ppm: c.drift_ppm,
        t0_ns: realtime_ns() as i64,
    };
    let b_echo = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), CALIBRATION_PORT);
    let half = Duration::from_secs_f64(c.calibration_s / 2.0);
    let calibrate = |when: &str, progress: &mut dyn FnMut(&str)| -> Result<Probes> {
        progress(&format!(
            "calibration {when} the runs: {:.0} s of echo probes without load",
            half.as_secs_f64()
        ));
        // plain kernel bridges: the quietest, most symmetric path there is
        topo.with_kernel_routers()?;
        let p = echo_probes(&topo.a, &topo.b, b_echo, clock, half, c.calibration_rate);
        topo.without_kernel_routers()?;
        p
    };
    let before = calibrate("before", progress)?;
    let mut runs = Vec::new();
    let mut policies = std::collections::BTreeMap::new();
    for &d in &c.devices {
        for s in c.scenarios(d) {
            crate::check_interrupted()?;
            progress(&format!("{} {}", d.name(), s.name()));
            let texts = policies_of(&s, d == Device::KernelHtb);
            runs.push(run_one(&topo, c, d, &s, &texts, &clock)?);
            if d == Device::Weir {
                policies.insert(s.name(), texts);
            }
        }
    }
    let after = calibrate("after", progress)?;
    let mut res = DiffservResult {
        kind: "diffserv".into(),
        meta: report::meta(),
        config: c.clone(),
        calibration: fit(&[before, after], clock),
        runs,
        policies,
        checks: Vec::new(),
    };
    super::finish(&mut res);
    Ok(res)
}

/// The routers' policy texts for `s`, ingress first.
fn policies_of(s: &Scenario, host_marks: bool) -> Vec<String> {
    let n = super::ROUTERS;
    (0..n)
        .map(|i| router_policy(s.service, s.transport, Position::of(i, n), host_marks))
        .collect()
}

/// The routers of one run.
enum Routers {
    Weir(Vec<BridgeThread>),
    Kernel,
}

impl Routers {
    /// Starts `d` on every router with `texts`, the routers' policies (ingress first).
    fn start(topo: &ChainTopo, d: Device, s: &Scenario, texts: &[String]) -> Result<Routers> {
        let parse = |i: usize, t: &str| {
            Policy::parse(&format!("{}-r{i}.toml", s.name()), t)
                .map_err(|e| Error::Invalid(format!("router {i} policy: {e}")))
        };
        match d {
            Device::Weir => {
                let cpu = (num_cpus() > 1).then_some(1);
                let mut threads = Vec::new();
                for (i, (ns, t)) in topo.routers.iter().zip(texts).enumerate() {
                    let p = parse(i, t)?;
                    let mut cfg = bridge_config(&p, ChainTopo::LAN, ChainTopo::WAN)
                        .map_err(|e| Error::Invalid(format!("router {i}: {e}")))?;
                    cfg.busy_poll = false;
                    cfg.stats_socket = None;
                    let b = BridgeThread::start(ns, cfg, cpu, ROUTER_START)
                        .map_err(|e| Error::Invalid(format!("router {i} ({}): {e}", ns.name())))?;
                    threads.push(b);
                }
                Ok(Routers::Weir(threads))
            }
            Device::KernelHtb => {
                topo.with_kernel_routers()?;
                let r = (|| {
                    for (i, (ns, t)) in topo.routers.iter().zip(texts).enumerate() {
                        let p = parse(i, t)?;
                        let cmds = htb_commands(&p, ChainTopo::LAN, ChainTopo::WAN, None)
                            .map_err(|e| Error::Invalid(format!("router {i}: {e}")))?;
                        tc_batch(ns, &cmds)?;
                    }
                    Ok(())
                })();
                if let Err(e) = r {
                    let _ = topo.without_kernel_routers();
                    return Err(e);
                }
                Ok(Routers::Kernel)
            }
        }
    }

    /// Stops the routers: their reports.
    fn stop(self, topo: &ChainTopo) -> (Vec<Value>, Vec<String>) {
        let mut errors = Vec::new();
        let reports = match self {
            Routers::Weir(threads) => threads
                .into_iter()
                .enumerate()
                .map(|(i, mut b)| match b.stop() {
                    Some(Ok(r)) => serde_json::to_value(&r).unwrap_or(Value::Null),
                    Some(Err(e)) => {
                        errors.push(format!("router {i}: {e}"));
                        Value::Null
                    }
                    None => Value::Null,
                })
                .collect(),
            Routers::Kernel => {
                let wan = [ChainTopo::WAN.to_string()];
                let reports = topo
                    .routers
                    .iter()
                    .map(|ns| tc_counters(ns, &wan, &mut errors))
                    .collect();
                if let Err(e) = topo.without_kernel_routers() {
                    errors.push(format!("removing the kernel routers: {e}"));
                }
                reports
            }
        };
        (reports, errors)
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The background: B's discard socket and one flood per background host.
struct Background {
    _discard: UdpSocket,
    senders: Vec<CbrSender>,
}

impl Background {
    fn start(topo: &ChainTopo, bps: u64, duration: Duration) -> Result<Background> {
        let dst = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), BACKGROUND_PORT);
        // bound but never read: the kernel drops what overflows its buffer, cheaply
        let discard = topo
            .b
            .try_run(|| UdpSocket::bind(dst))?
            .map_err(|e| Error::io(format!("background: binding {dst} in host B"), e))?;
        let pps = bps as f64 / (8.0 * BACKGROUND_FRAME as f64);
        let mut senders = Vec::new();
        for ns in &topo.background {
            let mut o = CbrSenderOpts::new(dst, pps, BACKGROUND_FRAME);
            o.flow = BG_FLOW;
            o.duration = Some(duration);
            o.pacing = Pacing::Sleep;
            o.max_batch = 32;
            senders.push(CbrSender::start(ns, o)?);
        }
        Ok(Background {
            _discard: discard,
            senders,
        })
    }

    fn stop(self) -> Vec<f64> {
        self.senders
            .into_iter()
            .map(|s| s.stop().achieved_pps)
            .collect()
    }
}

fn run_one(
    topo: &ChainTopo,
    c: &DiffservConfig,
    d: Device,
    s: &Scenario,
    texts: &[String],
    clock: &ReceiverClock,
) -> Result<RunResult> {
    let routers = Routers::start(topo, d, s, texts)?;
    let dur = Duration::from_secs_f64(c.duration_s);
    let warm = Duration::from_secs_f64(c.warmup_s);
    let bg = if s.background && c.background_bps > 0 {
        match Background::start(topo, c.background_bps, warm + dur + DRAIN) {
            Ok(b) => Some(b),
            Err(e) => {
                routers.stop(topo);
                return Err(e);
            }
        }
    } else {
        None
    };
    std::thread::sleep(warm);
    let tos = match d {
        Device::Weir => None,
        Device::KernelHtb => s.service.host_dscp().map(|x| x << 2),
    };
    let measured = match s.transport {
        Transport::Udp { payload } => measure_udp(topo, s, payload, dur, tos),
        Transport::Tcp => measure_tcp(topo, c, s, dur, tos),
    };
    let background_pps = bg.map(Background::stop).unwrap_or_default();
    let (reports, mut errors) = routers.stop(topo);
    let (sent, recs, retransmits, errs) = measured?;
    errors.extend(errs);
    let records = recs
        .into_iter()
        .map(|r| Record {
            rx_ns: clock.read(r.rx_ns),
            ..r
        })
        .collect();
    Ok(RunResult {
        device: d,
        scenario: *s,
        name: s.name(),
        sent,
        duration_s: c.duration_s,
        records,
        received: 0,
        loss_pct: 0.0,
        bandwidth_bps: 0.0,
        delay: None,
        jitter: None,
        bins: Vec::new(),
        retransmits,
        background_pps,
        routers: reports,
        errors,
    })
}

type Measured = (u64, Vec<Record>, Option<u64>, Vec<String>);

fn measure_udp(
    topo: &ChainTopo,
    s: &Scenario,
    payload: usize,
    dur: Duration,
    tos: Option<u8>,
) -> Result<Measured> {
    let dst = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), MEASURE_PORT);
    let cpu = (num_cpus() > 1).then_some(0);
    let pps = s.pps();
    let mut so = CbrSinkOpts::new(dst, Some(FLOW));
    so.expected = (pps * dur.as_secs_f64()) as usize + 16;
    so.wake_every = Some(Duration::from_millis(20));
    let sink = CbrSink::start_with(&topo.b, so)?;
    let mut o = CbrSenderOpts::new(dst, pps, payload + 42);
    o.flow = FLOW;
    o.duration = Some(dur);
    o.cpu = cpu;
    o.tos = tos;
    let sender = match CbrSender::start(&topo.a, o) {
        Ok(x) => x,
        Err(e) => {
            sink.stop();
            return Err(e);
        }
    };
    let rep = sender.join();
    let recs = sink.finish(rep.attempted, DRAIN);
    let mut errors = Vec::new();
    if let Some(e) = &recs.error {
        errors.push(format!("sink: {e}"));
    }
    if recs.socket_drops > 0 {
        errors.push(format!(
            "sink socket dropped {} datagrams",
            recs.socket_drops
        ));
    }
    let records = recs
        .records
        .iter()
        .map(|r| Record {
            seq: r.seq,
            t_ns: r.tx_ns as i64,
            rx_ns: r.rx_ns as i64,
            bytes: r.len,
        })
        .collect();
    Ok((rep.attempted, records, None, errors))
}

fn measure_tcp(
    topo: &ChainTopo,
    c: &DiffservConfig,
    s: &Scenario,
    dur: Duration,
    tos: Option<u8>,
) -> Result<Measured> {
    let bind = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), MEASURE_PORT);
    let sink = StampedSink::start(&topo.b, bind, TCP_RECORD)?;
    let mut o = StampedSenderOpts::new(sink.local_addr(), s.rate_bps, dur, &c.cc);
    o.record_len = TCP_RECORD;
    o.tos = tos;
    let sender = match StampedSender::start(&topo.a, o) {
        Ok(x) => x,
        Err(e) => {
            sink.stop();
            return Err(e);
        }
    };
    let rep = sender.join();
    let got = sink.stop();
    let mut errors: Vec<String> = rep.errors.iter().map(|e| format!("sender: {e}")).collect();
    errors.extend(got.errors.iter().map(|e| format!("sink: {e}")));
    let retrans = rep.tcp_info.as_ref().map(|i| u64::from(i.total_retrans));
    Ok((rep.records_sent, got.records, retrans, errors))
}
