//! The black-box testbed of seed 000 (Fig. 6) in namespaces, and the runner every test
//! (`weir lab basic|robustness|advanced`) is built on.
//!
//! ```text
//!   snd ──── lan0 [DUT] wan0 ──── lan0 [WAN stage] wan0 ──── rcv
//!   aliases: one source address per session      per-session delay/loss (a weir emulator)
//! ```
//!
//! A [`Plan`] says which policy the DUT enforces, which TCP sessions run (source address,
//! congestion control, MSS, receive buffer, start and stop times, WAN delay and loss on the
//! way to the receiver) and the TCP settings of the hosts (SACK, timestamps, window scaling,
//! minimum RTO — all explicit, never the machine's defaults). [`run_plan`] builds a fresh
//! topology for one run of one DUT ([`crate::dut`]), runs the sessions with the project's
//! own agents ([`crate::agents`]), and returns per session the bytes received per interval
//! (the sink's series, from which goodput over the analysis window follows) and the
//! sender's segment and retransmission counts (`TCP_INFO`), with the DUT's and the WAN
//! stage's own reports. Everything it made is removed when the run ends, also on error.
//!
//! The WAN stage exists only when a session has an impairment; it is weir with one
//! `[[emulate]]` profile per impaired session, selected by the session's source address,
//! applied to the data direction only (seed 000's wan-emu sits at the sink-side last hop and
//! delays the data; the ACKs return unimpaired), so a session's RTT is its WAN delay plus
//! the queueing in the DUT.
//!
//! A plan may also carry voice calls ([`VoicePlan`]: a G.729 RTP stream, [`crate::agents::voip`])
//! from their own source addresses to a UDP port of the receiver; each run then returns
//! every received voice packet with its send and kernel receive times ([`VoiceOutcome`]).
//!
//! Sessions get their source addresses from the policy ([`addresses_for_class`]): hosts
//! of the IPv4 source prefix of a rule that sends to the class, checked with the policy's
//! own classifier so that a test never silently measures the wrong class.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_core::classify::Fields;
use weir_core::policy::Policy;

use crate::agents::cbr::{CbrRecords, CbrSenderOpts, CbrSenderReport, CbrSink};
use crate::agents::voip::{voice_packets, voice_sender, voice_sink};
use crate::agents::{SenderOpts, SenderReport, SinkOpts};
use crate::dut::{self, BridgeThread, DutSetup, DutSpec};
use crate::remote::{Agent, Host};
use crate::stats::series::{goodput_bps, sum_series};
use crate::stats::table4::{self, ClassStats, RunMeasure, SessionMeasure};
use crate::stats::voice::VoicePacket;
use crate::topo::{require_root, BridgeTopo, WanPlace};
use crate::{Error, Result};

/// The receiver's port for every session.
pub const SINK_PORT: u16 = 5001;

/// A WAN impairment on a session's data path.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Wan {
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// Loss in the policy language's grammar (`"periodic 1%"`, `"1%"`, ...).
    pub loss: Option<String>,
}

/// One TCP session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionPlan {
    pub name: String,
    /// The class the policy should put it in (checked).
    pub class: String,
    pub src: Ipv4Addr,
    /// Congestion control (`reno`, `cubic`, `bbr`).
    pub cc: String,
    /// `TCP_MAXSEG`.
    pub mss: Option<u32>,
    /// Receiver's `SO_RCVBUF` is per sink; the sender's, per session.
    pub rcvbuf: Option<usize>,
    /// Start, seconds after the receiver starts.
    pub start_s: f64,
    /// Stop writing, seconds after the receiver starts.
    pub stop_s: f64,
    pub wan: Option<Wan>,
}

/// One voice call: a G.729 RTP stream from `src` to the receiver's UDP `port`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoicePlan {
    pub name: String,
    /// The class the policy should put it in (checked, as UDP to `port`).
    pub class: String,
    pub src: Ipv4Addr,
    pub port: u16,
    /// Start and stop, seconds after the receiver starts.
    pub start_s: f64,
    pub stop_s: f64,
}

/// Host TCP settings (per namespace, so common to every session of a run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostTcp {
    pub sack: bool,
    pub timestamps: bool,
    pub window_scaling: bool,
    /// `rto_min` on the sender's route to the receiver; `None`: the kernel's (200 ms).
    pub min_rto_ms: Option<u64>,
    /// The receiver's `SO_RCVBUF` (bytes; the kernel doubles it); `None`: autotuning.
    #[serde(default)]
    pub rcvbuf: Option<usize>,
}

impl HostTcp {
    /// Seed 000 Table 3: SACK, timestamps and window scaling off.
    pub fn seed000() -> Self {
        HostTcp {
            sack: false,
            timestamps: false,
            window_scaling: false,
            min_rto_ms: None,
            // explicit, not the machine's autotuning; with window scaling off the
            // advertised window is at most 64 KB anyway
            rcvbuf: Some(65_536),
        }
    }
}

/// A test run's plan: policy, sessions, timing.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    /// The policy's text (what the DUT enforces), and the file it came from.
    pub policy_text: String,
    pub policy_file: String,
    pub sessions: Vec<SessionPlan>,
    pub tcp: HostTcp,
    /// Length of a run, s.
    pub duration_s: f64,
    /// Analysis window, s since the receiver started.
    pub window_s: (f64, f64),
    /// Bin of the per-session series, ms.
    pub interval_ms: u64,
    /// weir DUTs busy-poll.
    pub busy_poll: bool,
    /// Voice calls beside the sessions.
    #[serde(default)]
    pub voice: Vec<VoicePlan>,
    /// A serial line of this rate (bit/s) after the DUT: the WAN stage serialises every
    /// data-direction frame at it ([`line_policy`]), as a real narrow WAN link does — a small
    /// packet waits behind a large one already on the wire. Not with per-session WAN
    /// impairments.
    #[serde(default)]
    pub line_bps: Option<u64>,
    /// Constant-rate UDP flows beside the sessions (background load).
    #[serde(default)]
    pub udp: Vec<UdpPlan>,
    /// A second router in the WAN stage's place: weir enforcing this policy between the
    /// DUT and the receiver (seed 001's core router behind the edge DUT). Not with
    /// `line_bps` or per-session WAN impairments.
    #[serde(default)]
    pub stage_policy: Option<String>,
    /// Count every flow's bytes per DSCP at the receiver's interface
    /// ([`SessionOutcome::dscp`], [`UdpOutcome::dscp`]).
    #[serde(default)]
    pub count_dscp: bool,
    /// Real hosts instead of namespaces ([`hosts`]: `sender` and `receiver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl Plan {
    pub fn policy(&self) -> Result<Policy> {
        Policy::parse(&self.policy_file, &self.policy_text)
            .map_err(|e| Error::Invalid(format!("policy: {e}")))
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(format!("plan '{}': {m}", self.name)));
        if self.sessions.is_empty() {
            return bad("no sessions".into());
        }
        if self.duration_s.is_nan() || self.duration_s <= 0.0 || self.interval_ms == 0 {
            return bad("duration and interval must be > 0".into());
        }
        let (a, b) = self.window_s;
        if !(0.0 <= a && a < b && b <= self.duration_s) {
            return bad(format!(
                "analysis window {a}-{b} s must lie within the {} s run",
                self.duration_s
            ));
        }
        let within = |what: &str, start_s: f64, stop_s: f64| {
            if 0.0 <= start_s && start_s < stop_s && stop_s <= self.duration_s {
                Ok(())
            } else {
                bad(format!(
                    "{what}: start {start_s} s / stop {stop_s} s outside the run"
                ))
            }
        };
        let mut seen = std::collections::HashSet::new();
        for s in &self.sessions {
            if !seen.insert(s.src) {
                return bad(format!("two sessions from {}", s.src));
            }
            within(&format!("session {}", s.name), s.start_s, s.stop_s)?;
        }
        let impaired = self.sessions.iter().any(|s| s.wan.is_some());
        if self.line_bps.is_some() && impaired {
            return bad("a serial line and per-session WAN impairments together".into());
        }
        if let Some(t) = &self.stage_policy {
            if self.line_bps.is_some() || impaired {
                return bad("a second router and a serial line or WAN impairments together".into());
            }
            Policy::parse("<stage>", t)
                .map_err(|e| Error::Invalid(format!("plan '{}': stage policy: {e}", self.name)))?;
        }
        for u in &self.udp {
            if !seen.insert(u.src) {
                return bad(format!("two flows from {}", u.src));
            }
            within(&format!("UDP flow {}", u.name), u.start_s, u.stop_s)?;
            if u.rate_bps == 0 || !(60..=1514).contains(&u.frame) {
                return bad(format!(
                    "UDP flow {}: rate {} bit/s, frame {} B (want a rate > 0, frames of 60..=1514 B)",
                    u.name, u.rate_bps, u.frame
                ));
            }
        }
        for v in &self.voice {
            if !seen.insert(v.src) {
                return bad(format!("two sessions or calls from {}", v.src));
            }
            within(&format!("call {}", v.name), v.start_s, v.stop_s)?;
        }
        if let Some(t) = &self.topology {
            hosts::check_remote(self, t)?;
        }
        let p = self.policy()?;
        check_classes(&p, &self.sessions)?;
        check_addressed(
            &p,
            self.voice
                .iter()
                .map(|v| (v.name.as_str(), v.src, 17, v.port, v.class.as_str()))
                .chain(
                    self.udp
                        .iter()
                        .map(|u| (u.name.as_str(), u.src, 17, u.port, u.class.as_str())),
                ),
        )
    }
}

/// Sessions' source addresses must land in their classes under the policy's classifier.
pub fn check_classes(p: &Policy, sessions: &[SessionPlan]) -> Result<()> {
    check_addressed(
        p,
        sessions
            .iter()
            .map(|s| (s.name.as_str(), s.src, 6, SINK_PORT, s.class.as_str())),
    )
}

/// Each (name, source, protocol, destination port, class) must be classified into its
/// class by the policy's classifier.
fn check_addressed<'a>(
    p: &Policy,
    flows: impl IntoIterator<Item = (&'a str, Ipv4Addr, u8, u16, &'a str)>,
) -> Result<()> {
    let cls = p
        .classifier()
        .map_err(|e| Error::Invalid(format!("policy: {e}")))?;
    for (name, src, proto, port, class) in flows {
        let f = Fields::ip(
            IpAddr::V4(src),
            IpAddr::V4(BridgeTopo::RCV_ADDR),
            proto,
            Some(40000),
            Some(port),
        );
        let (ci, _) = cls.lookup(&f);
        let got = &p.classes[ci as usize].name;
        if got != class {
            return Err(Error::Invalid(format!(
                "session {name} from {src} is classified into '{got}', not '{class}': the policy's rules do not match the test's addressing"
            )));
        }
    }
    Ok(())
}

/// `n` source addresses that the policy classifies into `class`: hosts 1..=n of the first
/// IPv4 source prefix of a rule sending to it (skipping `used`); for the default class with
/// no such rule, hosts of 10.77.200.0/24 that no rule matches.
pub fn addresses_for_class(
    p: &Policy,
    class: &str,
    n: usize,
    used: &[Ipv4Addr],
) -> Result<Vec<Ipv4Addr>> {
    let ci = p
        .class_index(class)
        .ok_or_else(|| Error::Invalid(format!("no class '{class}' in the policy")))?;
    let mut candidates: Vec<Ipv4Addr> = Vec::new();
    for r in p.rules.iter().filter(|r| r.class == ci) {
        for net in r.m.src.iter().filter(|n| n.is_ipv4()) {
            let IpAddr::V4(base) = net.addr() else {
                continue;
            };
            let size = 1u64 << (32 - net.prefix_len() as u32);
            let base = u32::from(base) as u64;
            let hosts = if size <= 2 { 0..size } else { 1..size - 1 };
            candidates.extend(hosts.take(n * 4).map(|h| Ipv4Addr::from((base + h) as u32)));
        }
    }
    if ci == p.default_class {
        candidates.extend((1..=250).map(|h| Ipv4Addr::new(10, 77, 200, h)));
    }
    let mut out = Vec::new();
    for a in candidates {
        if out.len() == n {
            break;
        }
        if used.contains(&a) || out.contains(&a) || a == BridgeTopo::RCV_ADDR {
            continue;
        }
        let probe = SessionPlan {
            name: "probe".into(),
            class: class.into(),
            src: a,
            cc: String::new(),
            mss: None,
            rcvbuf: None,
            start_s: 0.0,
            stop_s: 1.0,
            wan: None,
        };
        if check_classes(p, &[probe]).is_ok() {
            out.push(a);
        }
    }
    if out.len() < n {
        return Err(Error::Invalid(format!(
            "class '{class}': found only {} of {n} source addresses the policy classifies into it; give it a rule with an IPv4 `src` prefix",
            out.len()
        )));
    }
    Ok(out)
}

/// What one session did in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionOutcome {
    pub name: String,
    pub class: String,
    pub src: Ipv4Addr,
    pub cc: String,
    /// Bytes received.
    pub bytes: u64,
    /// Goodput over the analysis window, bit/s.
    pub goodput_bps: f64,
    /// Bytes received per interval since the receiver started.
    pub series: Vec<u64>,
    /// Segments sent (`tcpi_segs_out`) and data segments (`tcpi_data_segs_out`).
    pub segs_out: u64,
    pub data_segs_out: u64,
    /// Segments retransmitted (`tcpi_total_retrans`).
    pub retrans: u64,
    pub min_rtt_ms: f64,
    /// Bytes per DSCP at the receiver's interface (the plan's `count_dscp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<DscpBytes>,
    pub error: Option<String>,
}

/// What one voice call did in one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VoiceOutcome {
    pub name: String,
    pub class: String,
    pub src: Ipv4Addr,
    /// Packets sent (sequence numbers 0..sent).
    pub sent: u64,
    /// Send time of packet 0, ns since the Unix epoch.
    pub first_send_ns: Option<u64>,
    /// Sends the local kernel refused, and sends later than one period (sender problems,
    /// expected 0).
    pub send_errors: u64,
    pub late_sends: u64,
    /// Datagrams the receiver's socket dropped (expected 0).
    pub socket_drops: u64,
    /// Every packet received, in arrival order.
    pub packets: Vec<VoicePacket>,
    pub error: Option<String>,
}

impl VoiceOutcome {
    /// A call's outcome from its sender's report and its sink (here or on a real host),
    /// which is given 1.5 s for what is still in the DUT's queues; receive times are put
    /// on the sender's clock by taking out `rcv_ahead_ns` (how far the receiving host's
    /// clock is ahead; 0 in namespaces).
    pub(crate) fn collect(
        name: &str,
        class: &str,
        src: Ipv4Addr,
        sink: Agent<'_, CbrSink>,
        rep: std::result::Result<CbrSenderReport, String>,
        rcv_ahead_ns: i64,
    ) -> VoiceOutcome {
        let sent = rep.as_ref().map_or(0, |r| r.attempted);
        let mut rec = finish_records(sink, sent);
        rec.rx_on_sender_clock(rcv_ahead_ns);
        VoiceOutcome {
            name: name.into(),
            class: class.into(),
            src,
            sent,
            first_send_ns: rep.as_ref().ok().and_then(|r| r.first_send_ns),
            send_errors: rep.as_ref().map_or(0, |r| r.send_errors.total),
            late_sends: rep.as_ref().map_or(0, |r| r.late),
            socket_drops: rec.socket_drops,
            packets: voice_packets(&rec),
            error: rep.err().or(rec.error),
        }
    }
}

/// A sink's records once the `sent` packets arrived or none came for 1.5 s (what is still
/// in the DUT's queues); a real host's failure to answer becomes the records' error.
fn finish_records(sink: Agent<'_, CbrSink>, sent: u64) -> CbrRecords {
    sink.finish(sent, Duration::from_millis(1500))
        .unwrap_or_else(|e| CbrRecords {
            error: Some(e.to_string()),
            ..CbrRecords::new("0.0.0.0:0".parse().expect("an address"), None, Vec::new())
        })
}

/// One run of one DUT.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunOutcome {
    pub dut: String,
    pub run: u32,
    pub sessions: Vec<SessionOutcome>,
    /// The DUT's report (what ran, its counters, problems).
    pub dut_report: serde_json::Value,
    /// The WAN stage's weir report, when there was one.
    pub wan_report: Option<serde_json::Value>,
    pub seconds: f64,
    /// The plan's voice calls.
    #[serde(default)]
    pub voice: Vec<VoiceOutcome>,
    /// The plan's UDP flows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub udp: Vec<UdpOutcome>,
    /// The real hosts of a topology file: names, versions, clock offsets (empty in
    /// namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<crate::remote::HostInfo>,
}

/// The WAN stage's policy: one profile per impaired session, by source address.
pub fn wan_policy(sessions: &[SessionPlan], seed: u64) -> Option<String> {
    let impaired: Vec<&SessionPlan> = sessions.iter().filter(|s| s.wan.is_some()).collect();
    if impaired.is_empty() {
        return None;
    }
    let mut t = format!("[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nseed = {seed}\n");
    for (i, s) in impaired.iter().enumerate() {
        let w = s.wan.as_ref().unwrap();
        t += &format!(
            "\n[[emulate]]\nname = \"s{i}\"\ndelay = \"{}us\"\n",
            (w.delay_ms * 1000.0).round() as u64
        );
        if let Some(l) = &w.loss {
            t += &format!("loss = \"{l}\"\n");
        }
        t += &format!(
            "[[rule]]\nname = \"{}\"\nsrc = \"{}/32\"\nemulate = \"s{i}\"\n",
            s.name, s.src
        );
    }
    Some(t)
}

/// The WAN stage's policy for a serial line of `bps` after the DUT: one emulation profile
/// with that rate (frames serialised back to back, 1000-packet queue) for all traffic.
pub fn line_policy(bps: u64, seed: u64) -> String {
    format!(
        "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nseed = {seed}\n\n\
         [[emulate]]\nname = \"line\"\nrate = \"{bps}bit\"\n\n\
         [[rule]]\nname = \"all\"\nemulate = \"line\"\n"
    )
}

/// weir as the WAN stage, on a thread at `place` (spinning with `busy_poll`); `None`: the
/// testbed has none (a namespace testbed built without one).
pub(crate) fn start_wan_stage(
    place: Option<WanPlace<'_>>,
    policy_text: &str,
    busy_poll: bool,
) -> Result<BridgeThread> {
    let at = place.ok_or_else(|| Error::Invalid("no WAN stage in the topology".into()))?;
    let p = Policy::parse("<wan stage>", policy_text)
        .map_err(|e| Error::Invalid(format!("WAN stage policy: {e}")))?;
    let mut cfg = crate::dut::bridge_config(&p, at.lan, at.wan).map_err(Error::Invalid)?;
    cfg.busy_poll = busy_poll;
    BridgeThread::start(at.ns, cfg, None, Duration::from_secs(10))
        .map_err(|e| Error::Invalid(format!("WAN stage: {e}")))
}

/// Run `plan` once against `dut`. `progress` is called about once a second.
pub fn run_plan(
    plan: &Plan,
    spec: &DutSpec,
    run: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<RunOutcome> {
    plan.validate()?;
    let policy = plan.policy()?;
    let wan = match (&plan.stage_policy, plan.line_bps) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(bps)) => Some(line_policy(bps, 1 + run as u64)),
        (None, None) => wan_policy(&plan.sessions, 1 + run as u64),
    };
    let owned = hosts::Owned::new(plan.topology.as_ref(), HOSTS, "tb", wan.is_some())?;
    let bed = owned.bed()?;
    // a call's figures are one-way delays: on real hosts, their clocks must allow them
    let rcv_ahead = owned.calls_clock(!plan.voice.is_empty(), &format!("plan '{}'", plan.name))?;
    let srcs: Vec<Ipv4Addr> = plan
        .sessions
        .iter()
        .map(|s| s.src)
        .chain(plan.voice.iter().map(|v| v.src))
        .chain(plan.udp.iter().map(|u| u.src))
        .collect();
    bed.prepare(plan, &srcs)?;
    let mut wan_stage = match &wan {
        Some(text) => Some(start_wan_stage(bed.wan, text, false)?),
        None => None,
    };
    let sink_addr = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), SINK_PORT);
    let dut_sessions: Vec<dut::Session> = plan
        .sessions
        .iter()
        .map(|s| dut::Session::tcp(SocketAddr::new(IpAddr::V4(s.src), 0), sink_addr))
        .chain(plan.voice.iter().map(|v| dut::Session {
            src: SocketAddr::new(IpAddr::V4(v.src), 0),
            dst: SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), v.port),
            proto: 17,
        }))
        .chain(plan.udp.iter().map(|u| dut::Session {
            src: SocketAddr::new(IpAddr::V4(u.src), 0),
            dst: u.dst(),
            proto: 17,
        }))
        .collect();
    let running = match (bed.place, spec) {
        (Some(place), _) => Some(dut::start(
            spec,
            &DutSetup {
                place,
                policy: &policy,
                sessions: &dut_sessions,
                busy_poll: plan.busy_poll,
            },
        )?),
        (None, DutSpec::External) => None,
        (None, _) => {
            return Err(Error::Invalid(format!(
                "{spec}: the topology's DUT is external (`[dut] external = true`): run with \
                 --dut external, or name the DUT's interfaces on this machine (`[dut] lan, wan`)"
            )))
        }
    };
    let interval = Duration::from_millis(plan.interval_ms);
    let mut sink_opts = SinkOpts::new(sink_addr, interval);
    sink_opts.rcvbuf = plan.tcp.rcvbuf;
    let sink = bed.rcv.tcp_sink(sink_opts)?;
    let voice_sinks = plan
        .voice
        .iter()
        .map(|v| bed.rcv.cbr_sink(voice_sink(voice_addr(v))))
        .collect::<Result<Vec<_>>>()?;
    let udp_sinks = plan
        .udp
        .iter()
        .enumerate()
        .map(|(i, u)| bed.rcv.cbr_sink(u.sink_opts(i)))
        .collect::<Result<Vec<_>>>()?;
    let dscp = if plan.count_dscp {
        Some(bed.rcv.dscp_counter(bed.rcv_if)?)
    } else {
        None
    };
    let t0 = Instant::now();
    // one thread per session: wait for its start, send, report
    let total = Duration::from_secs_f64(plan.duration_s);
    let (sink_report, reports, voice_reports, udp_sent, dead) = std::thread::scope(|sc| {
        let udp_handles: Vec<_> = plan
            .udp
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let snd = bed.snd;
                sc.spawn(move || send_cbr(snd, u.start_s, u.sender(i), t0))
            })
            .collect();
        let voice_handles: Vec<_> = plan
            .voice
            .iter()
            .map(|v| {
                let snd = bed.snd;
                sc.spawn(move || {
                    let o = voice_sender(
                        SocketAddr::new(IpAddr::V4(v.src), 0),
                        voice_addr(v),
                        Duration::from_secs_f64(v.stop_s - v.start_s),
                    );
                    send_cbr(snd, v.start_s, o, t0)
                })
            })
            .collect();
        let mut handles = Vec::new();
        for s in &plan.sessions {
            let mut o = SenderOpts::new(
                sink_addr,
                Duration::from_secs_f64(s.stop_s - s.start_s),
                &s.cc,
            );
            o.src = Some(IpAddr::V4(s.src));
            o.mss = s.mss;
            o.rcvbuf = s.rcvbuf;
            // keep little unsent data in the kernel: a slow class stops soon after its stop
            o.notsent_lowat = Some(16_384);
            o.connect_timeout = Duration::from_secs(30);
            o.drain_timeout = Duration::from_secs(2);
            // the plan's stop time, also for a session whose SYN was lost (it connected
            // late: writing for the whole duration from then ran runs seconds long)
            o.until = Some(t0 + Duration::from_secs_f64(s.stop_s));
            let start = Duration::from_secs_f64(s.start_s);
            let snd = bed.snd;
            handles.push(
                sc.spawn(move || -> std::result::Result<SenderReport, String> {
                    std::thread::sleep(start.saturating_sub(t0.elapsed()));
                    let sender = snd.tcp_sender(o).map_err(|e| e.to_string())?;
                    sender.join().map_err(|e| e.to_string())
                }),
            );
        }
        let mut cut_short = false;
        let mut dead = None;
        while t0.elapsed() < total {
            std::thread::sleep(Duration::from_millis(1000).min(total.saturating_sub(t0.elapsed())));
            progress(&format!(
                "{} run {} {}: {:.0}/{:.0} s",
                plan.name,
                run + 1,
                spec.name(),
                t0.elapsed().as_secs_f64().min(plan.duration_s),
                plan.duration_s
            ));
            if !running.as_ref().is_none_or(|r| r.is_running()) || crate::interrupted() {
                cut_short = true;
                break;
            }
            dead = owned.dead_host();
            if dead.is_some() {
                cut_short = true;
                break;
            }
        }
        let join = |handles| join_each::<SenderReport>(handles, "sender");
        // A sender writes until its stop time (`until`; at most its duration from the
        // moment it connected), then drains (at most 2 s): the sink keeps
        // reading until every sender is done. Closing it first reset the connections
        // mid-write (every session ended with "send: Broken pipe"). A run cut short
        // stops the sink first, so the senders fail at once.
        let (sink_report, reports) = if cut_short {
            let s = sink.stop();
            (s, join(handles))
        } else {
            let r = join(handles);
            (sink.stop(), r)
        };
        let voice_reports = join_each::<CbrSenderReport>(voice_handles, "voice");
        let udp_sent = join_each::<CbrSenderReport>(udp_handles, "UDP");
        (sink_report, reports, voice_reports, udp_sent, dead)
    });
    if let Some(e) = dead {
        return Err(Error::Invalid(format!(
            "a host died mid-run: {}",
            e.message()
        )));
    }
    let voice = plan
        .voice
        .iter()
        .zip(voice_sinks)
        .zip(voice_reports)
        .map(|((v, sink), rep)| {
            VoiceOutcome::collect(&v.name, &v.class, v.src, sink, rep, rcv_ahead)
        })
        .collect();
    // the UDP sinks first (they wait for stragglers), then the counter that saw them
    let udp_recs: Vec<_> = udp_sinks
        .into_iter()
        .zip(&udp_sent)
        .map(|(sink, rep)| {
            let sent = rep.as_ref().map_or(0, |r| r.attempted);
            finish_records(sink, sent)
        })
        .collect();
    let dscp = dscp.map(Agent::stop).transpose()?;
    if let Some(e) = dscp.as_ref().and_then(|d| d.error.clone()) {
        return Err(Error::Invalid(format!("DSCP counter: {e}")));
    }
    let dscp_of = |src: Ipv4Addr| {
        dscp.as_ref().map_or_else(Vec::new, |d| {
            DscpBytes::of(&d.sum_where(|f| f.src.ip() == IpAddr::V4(src)))
        })
    };
    let udp = plan
        .udp
        .iter()
        .zip(udp_recs)
        .zip(udp_sent)
        .map(|((u, rec), rep)| UdpOutcome {
            name: u.name.clone(),
            class: u.class.clone(),
            src: u.src,
            sent: rep.as_ref().map_or(0, |r| r.attempted),
            received: rec.distinct(),
            frame_bytes: rec.distinct() * u.frame as u64,
            dscp: dscp_of(u.src),
            error: rep.err().or(rec.error),
        })
        .collect();
    let sink_report = sink_report?;
    let dut_report = dut::DutReport::of(running, plan.topology.as_ref());
    let wan_report = wan_stage
        .as_mut()
        .and_then(|w| w.stop())
        .and_then(|r| match r {
            Ok(rep) => serde_json::to_value(rep).ok(),
            Err(e) => Some(serde_json::json!({ "error": e })),
        });
    crate::check_interrupted()?;
    let seconds = t0.elapsed().as_secs_f64();
    let (from, to) = (
        Duration::from_secs_f64(plan.window_s.0),
        Duration::from_secs_f64(plan.window_s.1),
    );
    let mut sessions = Vec::new();
    for (s, rep) in plan.sessions.iter().zip(reports) {
        let conns: Vec<_> = sink_report.conns_from(IpAddr::V4(s.src)).collect();
        let bytes = conns.iter().map(|c| c.bytes).sum();
        let series = sum_series(conns.iter().map(|c| c.series.as_slice()));
        let goodput_bps = goodput_bps(&series, interval, from, to);
        let (segs_out, data_segs_out, retrans, min_rtt_ms, error) = match &rep {
            Ok(r) => (
                r.segs_out as u64,
                r.data_segs_out as u64,
                r.retrans as u64,
                r.min_rtt.as_secs_f64() * 1e3,
                r.error.clone(),
            ),
            Err(e) => (0, 0, 0, 0.0, Some(e.clone())),
        };
        sessions.push(SessionOutcome {
            name: s.name.clone(),
            class: s.class.clone(),
            src: s.src,
            cc: s.cc.clone(),
            bytes,
            goodput_bps,
            series,
            segs_out,
            data_segs_out,
            retrans,
            min_rtt_ms,
            dscp: dscp_of(s.src),
            error,
        });
    }
    Ok(RunOutcome {
        dut: spec.name(),
        run,
        sessions,
        dut_report: serde_json::to_value(&dut_report).unwrap_or_default(),
        wan_report,
        seconds,
        voice,
        udp,
        hosts: owned.host_info(),
    })
}

/// Each agent thread's result, a panic as an error ("`what` thread panicked").
pub(crate) fn join_each<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, std::result::Result<T, String>>>,
    what: &str,
) -> Vec<std::result::Result<T, String>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(format!("{what} thread panicked")))
        })
        .collect()
}

/// The receiver's address of a voice call.
fn voice_addr(v: &VoicePlan) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), v.port)
}

/// Wait until `start_s` after `t0`, then send `o` until it ends (or a stop signal);
/// report. Voice calls and UDP flows both go through here.
pub(crate) fn send_cbr(
    host: Host<'_>,
    start_s: f64,
    o: CbrSenderOpts,
    t0: Instant,
) -> std::result::Result<CbrSenderReport, String> {
    let start = Duration::from_secs_f64(start_s);
    while t0.elapsed() < start {
        if crate::interrupted() {
            return Err("interrupted".into());
        }
        std::thread::sleep(Duration::from_millis(20).min(start.saturating_sub(t0.elapsed())));
    }
    let s = match host.cbr_sender(o).map_err(|e| e.to_string())? {
        Agent::Local(s) => s,
        // on a real host: until it is done (a lab interrupted ends the session, and it)
        remote => return remote.join().map_err(|e| e.to_string()),
    };
    while !s.is_finished() {
        if crate::interrupted() {
            return Ok(s.stop());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(s.join())
}

/// Per class, the sessions' goodputs and segment counts of one run, for Table 4.
pub fn class_measures(policy: &Policy, run: &RunOutcome) -> BTreeMap<String, RunMeasure> {
    let mut m: BTreeMap<String, RunMeasure> = BTreeMap::new();
    for s in &run.sessions {
        let rate = policy
            .class_index(&s.class)
            .map_or(0, |i| policy.classes[i].rate) as f64;
        m.entry(s.class.clone())
            .or_insert_with(|| RunMeasure {
                class_rate_bps: rate,
                sessions: Vec::new(),
            })
            .sessions
            // all segments sent (SYNs included): a SYN retransmitted into a full queue
            // counts as a retransmission, so it must count as sent too
            .push(SessionMeasure::with_segments(
                s.goodput_bps,
                s.segs_out,
                s.retrans,
            ));
    }
    m
}

/// Table 4 per DUT and class (classes in policy order) from the runs of `plan`. A class
/// whose statistics cannot be computed is reported on standard error and left out; the
/// rest of the result is kept.
pub fn table4_stats(
    plan: &Plan,
    runs: &[RunOutcome],
    duts: &[String],
) -> Result<Vec<(String, String, ClassStats)>> {
    let policy = plan.policy()?;
    let mut out = Vec::new();
    for dut in duts {
        let mut per_class: BTreeMap<String, Vec<RunMeasure>> = BTreeMap::new();
        for r in runs.iter().filter(|r| &r.dut == dut) {
            for (class, m) in class_measures(&policy, r) {
                per_class.entry(class).or_default().push(m);
            }
        }
        for ci in policy.leaves() {
            let name = &policy.classes[ci].name;
            if let Some(runs) = per_class.get(name) {
                match table4::class_stats(runs) {
                    Ok(s) => out.push((dut.clone(), name.clone(), s)),
                    Err(e) => eprintln!("weir lab: {dut} {name}: statistics not computable: {e}"),
                }
            }
        }
    }
    Ok(out)
}

/// The DUTs of a test, parsed (a bad spec is refused before anything runs), then root
/// required.
pub fn dut_specs(duts: &[String]) -> Result<Vec<DutSpec>> {
    let specs = duts
        .iter()
        .map(|d| DutSpec::parse(d))
        .collect::<Result<_>>()?;
    require_root()?;
    Ok(specs)
}

/// The DUTs `--compare` puts side by side in the seed 000 labs.
pub const COMPARE: [&str; 8] = [
    "weir:cbq",
    "weir:cbq+pfq",
    "weir:cbq+pfq+red",
    "weir:tcr",
    "weir:cbq+tcr",
    "weir:cbq+pfq+tcr",
    "kernel:htb",
    "kernel:htb-perflow",
];

/// The DUT list of `--compare` ([`COMPARE`], when `compare`) and `--dut` (each parsed;
/// one named twice runs once), or `None` for the lab's default.
pub fn dut_list(compare: bool, dut: Vec<String>) -> Result<Option<Vec<String>>> {
    let mut duts: Vec<String> = Vec::new();
    if compare {
        duts.extend(COMPARE.iter().map(|d| d.to_string()));
    }
    for d in dut {
        DutSpec::parse(&d)?;
        if !duts.contains(&d) {
            duts.push(d);
        }
    }
    Ok((!duts.is_empty()).then_some(duts))
}

/// Run `plan` `runs` times against each DUT in turn (all runs of the first DUT, then the
/// next), stopping at a stop signal between runs.
pub fn run_each(
    plan: &Plan,
    specs: &[DutSpec],
    runs: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<RunOutcome>> {
    let mut out = Vec::new();
    for spec in specs {
        for r in 0..runs {
            crate::check_interrupted()?;
            out.push(run_plan(plan, spec, r, progress)?);
        }
    }
    Ok(out)
}

mod hosts;
pub(crate) use hosts::{addr_add, Bed, Owned};
pub use hosts::{check_duts, HOSTS};
mod output;
pub use output::{recordings, voice_delay_series, Outputs};
mod udp;
pub use udp::{DscpBytes, UdpOutcome, UdpPlan};

#[cfg(test)]
mod tests;
