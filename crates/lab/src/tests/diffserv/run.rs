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

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_core::policy::Policy;
use weir_io::clock::realtime_ns;

use super::policy::{router_policy, Position};
use super::{
    fit, Device, DiffservConfig, DiffservResult, Probes, ReceiverClock, Scenario, Transport,
    BACKGROUND_FRAME, BACKGROUND_PORT, CALIBRATION_PORT, MEASURE_PORT, TCP_RECORD,
};
use crate::agents::cbr::{CbrSender, CbrSenderOpts, CbrSinkOpts, Pacing};
use crate::agents::{Discard, StampedSenderOpts};
use crate::dut::{bridge_config, BridgeThread, DutSetup, DutSpec, RunningDut};
use crate::remote::{Agent, Host, RemoteBed, Topology};
use crate::report;
use crate::stats::dist::DistUs;
use crate::stats::skew::{OneWay, Record};
use crate::topo::{require_root, ChainTopo, DutPlace};
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

/// The hosts `a`, `b`, `c0`… a topology file gives the chain: A sends the measured
/// stream to B, `cI` floods router I's outgoing link.
pub const HOSTS: [&str; 2 + super::ROUTERS] = ["a", "b", "c0", "c1", "c2"];

/// What the chain is made of, owned for the lab.
enum Owned {
    Namespaces(ChainTopo),
    Remote(Box<RemoteBed>),
}

/// The lab's view of its chain.
struct Chain<'a> {
    a: Host<'a>,
    b: Host<'a>,
    background: Vec<Host<'a>>,
    routers: Vec<DutPlace<'a>>,
    /// B's clock: simulated in namespaces, its own on real hosts.
    clock: ReceiverClock,
}

impl Owned {
    fn new(c: &DiffservConfig) -> Result<Owned> {
        Ok(match &c.topology {
            None => Owned::Namespaces(super::topology()?),
            Some(t) => Owned::Remote(Box::new(RemoteBed::connect(t)?)),
        })
    }

    fn chain(&self, injected: ReceiverClock) -> Result<Chain<'_>> {
        Ok(match self {
            Owned::Namespaces(t) => Chain {
                a: Host::Local(&t.a),
                b: Host::Local(&t.b),
                background: t.background.iter().map(Host::Local).collect(),
                routers: (0..t.routers.len()).map(|i| t.router_place(i)).collect(),
                clock: injected,
            },
            Owned::Remote(r) => Chain {
                a: r.host(HOSTS[0])?,
                b: r.host(HOSTS[1])?,
                background: HOSTS[2..]
                    .iter()
                    .map(|h| r.host(h))
                    .collect::<Result<_>>()?,
                routers: (0..super::ROUTERS)
                    .map(|i| {
                        r.router_place(i).ok_or_else(|| {
                            Error::Invalid(format!("the topology has no router {i}"))
                        })
                    })
                    .collect::<Result<_>>()?,
                clock: ReceiverClock::TRUE,
            },
        })
    }

    /// On real hosts: each host's test interface gets the chain's address (A 10.78.0.1,
    /// B .2, `cI` .(10 + I), /24; removed when its session ends).
    fn address(&self, t: Option<&Topology>) -> Result<()> {
        let (Owned::Remote(r), Some(t)) = (self, t) else {
            return Ok(());
        };
        for (i, name) in HOSTS.iter().enumerate() {
            let addr = match i {
                0 => ChainTopo::A_ADDR,
                1 => ChainTopo::B_ADDR,
                k => ChainTopo::background_addr(k - 2),
            };
            let Host::Remote(h) = r.host(name)? else {
                unreachable!("a remote bed's hosts are remote")
            };
            crate::tests::testbed::addr_add(h, &t.hosts[*name].interface, format!("{addr}/24"))?;
        }
        Ok(())
    }

    /// On real hosts: B's clock ahead of A's as the SSH exchange found it (a clock
    /// without drift) and the bound of that offset, ns; `None` in namespaces.
    fn reference(&self) -> Option<(ReceiverClock, f64)> {
        let Owned::Remote(r) = self else {
            return None;
        };
        let (a, b) = (r.clock(HOSTS[0])?, r.clock(HOSTS[1])?);
        Some((
            ReceiverClock {
                offset_ns: ((b.offset_ms - a.offset_ms) * 1e6) as i64,
                drift_ppm: 0.0,
                t0_ns: 0,
            },
            (a.uncertainty_ms + b.uncertainty_ms) * 1e6,
        ))
    }

    /// A real host whose agent ended, as the error that says why.
    fn dead_host(&self) -> Option<Error> {
        match self {
            Owned::Namespaces(_) => None,
            Owned::Remote(r) => r.dead_host(),
        }
    }

    fn host_info(&self) -> Vec<crate::remote::HostInfo> {
        match self {
            Owned::Namespaces(_) => Vec::new(),
            Owned::Remote(r) => r.info().to_vec(),
        }
    }
}

impl Chain<'_> {
    /// Every router a plain kernel bridge (the calibration's path), or none.
    fn kernel_bridges(&self, on: bool) -> Result<()> {
        for p in &self.routers {
            if on {
                p.with_kernel_bridge()?;
            } else {
                p.without_kernel_bridge()?;
            }
        }
        Ok(())
    }
}

/// Runs the lab: the calibration, then every device's scenarios.
pub fn run(c: &DiffservConfig, progress: &mut dyn FnMut(&str)) -> Result<DiffservResult> {
    c.validate()?;
    require_root()?;
    let owned = Owned::new(c)?;
    owned.address(c.topology.as_ref())?;
    let injected = ReceiverClock {
        offset_ns: c.offset_ns,
        drift_ppm: c.drift_ppm,
        t0_ns: realtime_ns() as i64,
    };
    let chain = owned.chain(injected)?;
    let b_echo = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), CALIBRATION_PORT);
    let half = Duration::from_secs_f64(c.calibration_s / 2.0);
    let calibrate = |when: &str, progress: &mut dyn FnMut(&str)| -> Result<Probes> {
        progress(&format!(
            "calibration {when} the runs: {:.0} s of echo probes without load",
            half.as_secs_f64()
        ));
        // plain kernel bridges: the quietest, most symmetric path there is
        chain.kernel_bridges(true)?;
        let p = (|| {
            let responder = chain.b.echo_responder(b_echo, chain.clock)?;
            let p = chain
                .a
                .echo_prober(b_echo, half, c.calibration_rate)
                .and_then(|p| p.join());
            // stopped whatever the prober did (a remote agent lives until stopped)
            responder.stop()?;
            let p = p?;
            match p.error {
                Some(e) => Err(Error::Invalid(format!("calibration: {e}"))),
                None => Ok(p),
            }
        })();
        chain.kernel_bridges(false)?;
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
            let r = run_one(&chain, c, d, &s, &texts);
            if let Some(e) = owned.dead_host() {
                return Err(e);
            }
            runs.push(r?);
            if d == Device::Weir {
                policies.insert(s.name(), texts);
            }
        }
    }
    let after = calibrate("after", progress)?;
    // judged against the clock injected into B, or on real hosts the SSH exchange's offset
    let (truth, bound) = match owned.reference() {
        Some((clock, bound)) => (clock, Some(bound)),
        None => (chain.clock, None),
    };
    let mut res = DiffservResult {
        kind: "diffserv".into(),
        meta: report::meta(),
        config: c.clone(),
        calibration: fit(&[before, after], truth, bound),
        runs,
        policies,
        checks: Vec::new(),
        hosts: owned.host_info(),
    };
    drop(chain);
    drop(owned);
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

/// The routers of one run: weir's bridges, or the kernel's bridges with the policies'
/// HTB trees (`kernel:htb`, removed when stopped or dropped).
enum Routers<'a> {
    Weir(Vec<BridgeThread>),
    Kernel(Vec<RunningDut<'a>>),
}

impl<'a> Routers<'a> {
    /// Starts `d` on every router with `texts`, the routers' policies (ingress first).
    fn start(chain: &Chain<'a>, d: Device, s: &Scenario, texts: &[String]) -> Result<Routers<'a>> {
        let parse = |i: usize, t: &str| {
            Policy::parse(&format!("{}-r{i}.toml", s.name()), t)
                .map_err(|e| Error::Invalid(format!("router {i} policy: {e}")))
        };
        match d {
            Device::Weir => {
                let cpu = (num_cpus() > 1).then_some(1);
                let mut threads = Vec::new();
                for (i, (place, t)) in chain.routers.iter().zip(texts).enumerate() {
                    let p = parse(i, t)?;
                    let mut cfg = bridge_config(&p, place.lan, place.wan)
                        .map_err(|e| Error::Invalid(format!("router {i}: {e}")))?;
                    cfg.busy_poll = false;
                    cfg.stats_socket = None;
                    let b = BridgeThread::start(place.ns, cfg, cpu, ROUTER_START).map_err(|e| {
                        Error::Invalid(format!(
                            "router {i} ({} {} -> {}): {e}",
                            place.ns.name(),
                            place.lan,
                            place.wan
                        ))
                    })?;
                    threads.push(b);
                }
                Ok(Routers::Weir(threads))
            }
            Device::KernelHtb => {
                // on an error the routers started so far are dropped: removed again
                let mut routers = Vec::new();
                for (i, (&place, t)) in chain.routers.iter().zip(texts).enumerate() {
                    let setup = DutSetup {
                        place,
                        policy: &parse(i, t)?,
                        sessions: &[],
                        busy_poll: false,
                    };
                    routers.push(
                        crate::dut::start(&DutSpec::KernelHtb, &setup)
                            .map_err(|e| Error::Invalid(format!("router {i}: {e}")))?,
                    );
                }
                Ok(Routers::Kernel(routers))
            }
        }
    }

    /// Stops the routers: their reports.
    fn stop(self) -> (Vec<Value>, Vec<String>) {
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
            Routers::Kernel(routers) => routers
                .into_iter()
                .map(|r| {
                    let report = r.stop();
                    errors.extend(report.errors);
                    report.counters
                })
                .collect(),
        };
        (reports, errors)
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The background: B's discard port and one flood per background host.
struct Background<'a> {
    discard: Agent<'a, Discard>,
    senders: Vec<Agent<'a, CbrSender>>,
}

impl<'a> Background<'a> {
    fn start(chain: &Chain<'a>, bps: u64, duration: Duration) -> Result<Background<'a>> {
        let dst = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), BACKGROUND_PORT);
        // bound but never read: the kernel drops what overflows its buffer, cheaply
        let mut bg = Background {
            discard: chain.b.discard(dst)?,
            senders: Vec::new(),
        };
        let pps = bps as f64 / (8.0 * BACKGROUND_FRAME as f64);
        for h in &chain.background {
            let mut o = CbrSenderOpts::new(dst, pps, BACKGROUND_FRAME);
            o.flow = BG_FLOW;
            o.duration = Some(duration);
            o.pacing = Pacing::Sleep;
            o.max_batch = 32;
            match h.cbr_sender(o) {
                Ok(s) => bg.senders.push(s),
                Err(e) => {
                    // what started stops (a remote agent lives until stopped)
                    bg.stop();
                    return Err(e);
                }
            }
        }
        Ok(bg)
    }

    /// Each host's packets per second (0 for one whose report was lost); B's port closed
    /// (a remote agent lives until stopped).
    fn stop(self) -> Vec<f64> {
        let pps = self
            .senders
            .into_iter()
            .map(|s| s.stop().map_or(0.0, |r| r.achieved_pps))
            .collect();
        let _ = self.discard.stop();
        pps
    }
}

fn run_one(
    chain: &Chain<'_>,
    c: &DiffservConfig,
    d: Device,
    s: &Scenario,
    texts: &[String],
) -> Result<RunResult> {
    let routers = Routers::start(chain, d, s, texts)?;
    let dur = Duration::from_secs_f64(c.duration_s);
    let warm = Duration::from_secs_f64(c.warmup_s);
    let bg = if s.background && c.background_bps > 0 {
        match Background::start(chain, c.background_bps, warm + dur + DRAIN) {
            Ok(b) => Some(b),
            Err(e) => {
                routers.stop();
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
        Transport::Udp { payload } => measure_udp(chain, s, payload, dur, tos),
        Transport::Tcp => measure_tcp(chain, c, s, dur, tos),
    };
    let background_pps = bg.map(Background::stop).unwrap_or_default();
    let (reports, mut errors) = routers.stop();
    let (sent, recs, retransmits, errs) = measured?;
    errors.extend(errs);
    let records = recs
        .into_iter()
        .map(|r| Record {
            rx_ns: chain.clock.read(r.rx_ns),
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
    chain: &Chain<'_>,
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
    let sink = chain.b.cbr_sink(so)?;
    let mut o = CbrSenderOpts::new(dst, pps, payload + 42);
    o.flow = FLOW;
    o.duration = Some(dur);
    o.cpu = cpu;
    o.tos = tos;
    let sender = match chain.a.cbr_sender(o) {
        Ok(x) => x,
        Err(e) => {
            let _ = sink.stop();
            return Err(e);
        }
    };
    let rep = sender.join()?;
    let recs = sink.finish(rep.attempted, DRAIN)?;
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
    chain: &Chain<'_>,
    c: &DiffservConfig,
    s: &Scenario,
    dur: Duration,
    tos: Option<u8>,
) -> Result<Measured> {
    let bind = SocketAddr::new(IpAddr::V4(ChainTopo::B_ADDR), MEASURE_PORT);
    let sink = chain.b.stamped_sink(bind, TCP_RECORD)?;
    let mut o = StampedSenderOpts::new(bind, s.rate_bps, dur, &c.cc);
    o.record_len = TCP_RECORD;
    o.tos = tos;
    let sender = match chain.a.stamped_sender(o) {
        Ok(x) => x,
        Err(e) => {
            let _ = sink.stop();
            return Err(e);
        }
    };
    let rep = sender.join()?;
    let got = sink.stop()?;
    let mut errors: Vec<String> = rep.errors.iter().map(|e| format!("sender: {e}")).collect();
    errors.extend(got.errors.iter().map(|e| format!("sink: {e}")));
    let retrans = rep.tcp_info.as_ref().map(|i| u64::from(i.total_retrans));
    Ok((rep.records_sent, got.records, retrans, errors))
}
