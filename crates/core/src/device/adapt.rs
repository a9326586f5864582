//! The device's adaptive controller (`[adapt]`): seed 003's Postgate ([`Postgate`]) or
//! the delay-based autorate ([`Autorate`]); the probes it emits, the replies and ARP it
//! consumes, the samples it takes of the classes, and the rates and weights it sets.
//!
//! * **Probes.** An ICMP echo request leaves in the direction opposite to the shaped one
//!   (towards the line), from `source` (an address no host uses) to a target,
//!   identifier 0x7765 ("we"), the sequence number counting up, 56 bytes of payload (as
//!   `ping`), from the MAC address 02:77 followed by `source`'s four octets (locally
//!   administered), to the MAC address of the target's next hop (`gateway` if set, else
//!   the target itself). Each probed target gets one every `interval`: Postgate probes its
//!   one target; the autorate its active reflectors round robin, one probe every
//!   `interval / pingers`. Until the next hop's MAC address is known (from its ARP reply)
//!   the probe is an ARP request for it instead.
//! * **Consumed** (never forwarded, counted as `consumed`): in the shaped direction, echo
//!   replies from a target to `source` with the identifier, ARP requests for `source`
//!   (answered in the other direction: "source is at 02:77:…") and ARP replies to
//!   `source`.
//! * **RTT** = the reply's arrival (the kernel's receive timestamp) − when the probe was
//!   handed out by `poll_transmit`; replies to one of the last 256 probes count, others
//!   are `stray`.
//! * **Postgate's samples.** Every `sample` period (10 ms) each controlled leaf's
//!   backlog, dropped bytes and whether it received anything ([`ClassSample`]).
//! * **The autorate's samples.** Every `load_interval` (200 ms) the bytes the shaped link
//!   (the root class) has sent; every `health_interval` (1 s) the reflectors' health.
//! * **Applied**, after every reply: the shaped link (the root class) gets rate = ceil =
//!   the controller's rate (Postgate: `B × line`). Postgate: each controlled leaf gets an
//!   assured rate of `φ/Σφ_0 × line`, all scaled down together when their sum exceeds
//!   `B × line` (eq. 3: a leaf's assured rate is not bounded by its parent's, so the
//!   link's rate alone would not hold them); autorate: each leaf its policy rate scaled by
//!   `rate / line`. Each leaf's ceil is `min(its own ceil, the link's rate)`; bursts stay
//!   as the policy wrote them. TCP rate control (`tcr` classes) sizes its windows and
//!   paces its ACKs by the leaves' assured rates made work-conserving: the busy leaves
//!   (received in the last second, or backlogged) share the whole link in proportion to
//!   their assured rates, each at most its ceil ([`work_conserving`]).
//! * **Fallback.** No reply for `timeout` (unreachable targets, replies that stop, ICMP
//!   rate limiting): the floor rate, applied, `fallback` set in the stats, counted; the
//!   next reply resumes the controller from the floor.
//!
//! Limits: IPv4 only; probes are untagged (no VLAN).

use std::net::IpAddr;

use crate::adapt::autorate::Autorate;
use crate::adapt::postgate::{ClassSample, Postgate};
use crate::adapt::{AdaptConfig, AdaptDef, AdaptMode};
use crate::pipeline::Pipeline;
use crate::pool::{Direction, PktId};
use crate::qdisc::Ctx;
use crate::rate::Rate;
use crate::sched::linkshare::ClassId;
use crate::stage::Shared;
use crate::tcp::tcr::Tcr;
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};
use std::fmt;
use weir_wire::arp::{self, ArpSpec};
use weir_wire::build::{self, EthSpec, Ipv4Spec};
use weir_wire::ethernet::{ethertype, MacAddr};
use weir_wire::icmp;

/// The probes' ICMP identifier ("we").
pub const IDENT: u16 = 0x7765;
const PAYLOAD: [u8; 56] = [0x77; 56];
const SENT: usize = 256;
/// A leaf that received nothing for this long leaves its share to the others (TCP rate
/// control's view of the leaves' rates).
const BUSY: Duration = Duration::from_secs(1);

/// What the controller did, for `weir stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptCounters {
    pub probes_sent: u64,
    pub arp_requests_sent: u64,
    pub arp_replies_sent: u64,
    pub replies: u64,
    /// Echo replies with the identifier but an unknown or too old sequence number.
    pub stray_replies: u64,
    /// Times the replies stopped for `timeout` and the rate fell to the floor.
    pub fallbacks: u64,
    /// Frames not sent because the packet pool had no slot (or none large enough).
    pub pool_exhausted: u64,
    /// Autorate: reflectors replaced (silent, or far from the others).
    #[serde(default)]
    pub reflector_swaps: u64,
}

/// One controlled class in [`AdaptSnapshot`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptClass {
    pub name: String,
    /// φ_0 (autorate: the class's rate as a fraction of the line).
    pub initial_weight: f64,
    /// φ (autorate: as φ_0).
    pub weight: f64,
    /// Eq. 5, MTU packets (Postgate only).
    pub burst_index: Option<f64>,
    /// The assured rate applied, bit/s.
    pub rate_bps: u64,
}

/// One reflector of the autorate in [`AdaptSnapshot`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReflectorSnapshot {
    pub address: String,
    /// Probed now (else a spare).
    pub active: bool,
    pub replies: u64,
    /// Baseline delay, newest delta and the delta's EWMA (ms); `None` before a reply.
    pub baseline_ms: Option<f64>,
    pub delta_ms: Option<f64>,
    pub delta_ewma_ms: f64,
    /// Offences in the health window, and times it was replaced.
    pub offences: usize,
    pub replaced: u64,
}

/// The controller's state for `weir stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptSnapshot {
    pub mode: String,
    /// The probed targets, comma-separated.
    pub target: String,
    /// The next hop's MAC address, learnt from its ARP reply (several: comma-separated);
    /// `None` while none is known.
    pub target_mac: Option<String>,
    /// The shaped link's rate as a fraction of the line (Postgate's `B`).
    pub rate_fraction: f64,
    pub rate_bps: u64,
    pub line_bps: u64,
    /// The newest queueing delay (ms): Postgate's δ; the autorate's newest delta.
    pub delay_ms: Option<f64>,
    /// Postgate: the least RTT; the autorate: the least baseline (a one-way delay, ms).
    pub min_rtt_ms: Option<f64>,
    /// Replies stopped: the link is at the floor rate.
    pub fallback: bool,
    /// Autorate: achieved / set rate at the last load sample, and the last rate change.
    #[serde(default)]
    pub load: Option<f64>,
    #[serde(default)]
    pub action: Option<String>,
    pub classes: Vec<AdaptClass>,
    #[serde(default)]
    pub reflectors: Vec<ReflectorSnapshot>,
    pub counters: AdaptCounters,
}

impl fmt::Display for AdaptSnapshot {
    /// `weir stats`: the link's rate, the delay, the probes, then a line per class and per
    /// reflector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = crate::units::fmt_rate;
        let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
        let (delay, least) = if self.mode == "postgate" {
            ("delay", "least RTT")
        } else {
            ("delta", "least baseline")
        };
        write!(
            f,
            "adapt {}: link {} = {:.3} of the line {}, {delay} {} ({least} {}); target {} ({}): {} probes, {} replies, {} stray, {} fallbacks",
            self.mode,
            rate(self.rate_bps),
            self.rate_fraction,
            rate(self.line_bps),
            ms(self.delay_ms),
            ms(self.min_rtt_ms),
            self.target,
            self.target_mac.as_deref().unwrap_or("MAC not known yet"),
            self.counters.probes_sent,
            self.counters.replies,
            self.counters.stray_replies,
            self.counters.fallbacks,
        )?;
        if let (Some(l), Some(a)) = (self.load, &self.action) {
            write!(
                f,
                "\n  load {l:.2} of the set rate, last change: {a}; {} reflector swaps",
                self.counters.reflector_swaps
            )?;
        }
        if self.fallback {
            write!(
                f,
                "\n  FALLBACK: no reply within the timeout, the link is at its floor"
            )?;
        }
        for c in &self.classes {
            write!(
                f,
                "\n  class {}: weight {:.4} of {:.4}, ",
                c.name, c.weight, c.initial_weight
            )?;
            if let Some(b) = c.burst_index {
                write!(f, "burst index {b:.1}, ")?;
            }
            write!(f, "assured {}", rate(c.rate_bps))?;
        }
        for r in &self.reflectors {
            write!(
                f,
                "\n  reflector {} {}: {} replies, baseline {}, delta {}, delta EWMA {:.1} ms, {} offences, replaced {}x",
                r.address,
                if r.active { "active" } else { "spare" },
                r.replies,
                ms(r.baseline_ms),
                ms(r.delta_ms),
                r.delta_ewma_ms,
                r.offences,
                r.replaced
            )?;
        }
        Ok(())
    }
}

/// A leaf class the controller sets.
struct Leaf {
    name: String,
    id: ClassId,
    /// Its index in the policy's classes (TCP rate control's class numbers).
    index: usize,
    /// The policy's rate and ceil, bit/s, and (burst, cburst), bytes.
    rate: u64,
    ceil: u64,
    bursts: (u32, u32),
    /// Bytes the class had received at the last sample (activity).
    received: u64,
    /// Bytes it had received at the last `apply`, and until when it counts as busy
    /// (work-conserving TCP rate control).
    heard: u64,
    busy_until: Instant,
    /// The assured rate set last, bit/s.
    applied: u64,
}

/// The controller proper.
enum Ctl {
    Postgate(Postgate),
    Autorate(Box<Autorate>),
}

/// A next hop: its address and, once its ARP reply came, its MAC address.
struct Hop {
    ip: std::net::Ipv4Addr,
    mac: Option<MacAddr>,
}

/// See the module comment.
pub(super) struct Adapt {
    def: AdaptDef,
    ctl: Ctl,
    /// The root class (the shaped link): its id and (burst, cburst).
    root: (ClassId, (u32, u32)),
    leaves: Vec<Leaf>,
    framing: crate::framing::Framing,
    mac: MacAddr,
    /// Distinct next hops, and each target's index among them.
    hops: Vec<Hop>,
    hop_of: Vec<usize>,
    /// Time between two probes (to any target).
    probe_every: Duration,
    seq: u16,
    /// (sequence number, sent at, target) of the last `SENT` probes.
    sent: Vec<Option<(u16, Instant, usize)>>,
    next_probe: Instant,
    /// The autorate's load and health clocks.
    next_load: Instant,
    next_health: Instant,
    last_reply: Instant,
    /// The first `poll` has set the clocks: the device may be built on another time base
    /// than the driver's (`weir run` builds it at `Instant::ZERO`).
    started: bool,
    fallback: bool,
    counters: AdaptCounters,
}

impl Adapt {
    /// The controller of `cfg` over the shaper of `lanes`' shaped direction.
    pub(super) fn new(
        cfg: &AdaptConfig,
        lanes: &[Pipeline; 2],
        now: Instant,
    ) -> Result<Adapt, String> {
        let def = &cfg.def;
        let (ctl, probed) = match &def.mode {
            AdaptMode::Postgate(c) => (Ctl::Postgate(Postgate::new(c.clone(), now)?), 1),
            AdaptMode::Autorate(c) => (
                Ctl::Autorate(Box::new(Autorate::new(c.clone(), now)?)),
                c.pingers,
            ),
        };
        let sched = lanes[def.shaped.index()]
            .shaper()
            .ok_or("[adapt]: the shaped direction has no shaper")?;
        let id = |name: &str| {
            sched
                .class_id(name)
                .ok_or_else(|| format!("[adapt]: the shaper has no class '{name}'"))
        };
        let root = &cfg.root;
        let leaves = cfg
            .leaves
            .iter()
            .map(|c| {
                Ok(Leaf {
                    name: c.name.clone(),
                    id: id(&c.name)?,
                    index: c.index,
                    rate: c.rate,
                    ceil: c.ceil,
                    bursts: (c.burst, c.cburst),
                    received: 0,
                    heard: 0,
                    busy_until: Instant::ZERO,
                    applied: 0,
                })
            })
            .collect::<Result<_, String>>()?;
        let mut hops: Vec<Hop> = Vec::new();
        let hop_of = def
            .targets
            .iter()
            .map(|&t| {
                let ip = def.gateway.unwrap_or(t);
                hops.iter().position(|h| h.ip == ip).unwrap_or_else(|| {
                    hops.push(Hop { ip, mac: None });
                    hops.len() - 1
                })
            })
            .collect();
        let s = def.source.octets();
        Ok(Adapt {
            root: (id(&root.name)?, (root.burst, root.cburst)),
            leaves,
            framing: cfg.framing,
            mac: MacAddr([0x02, 0x77, s[0], s[1], s[2], s[3]]),
            hops,
            hop_of,
            probe_every: Duration((def.interval.as_nanos() / probed as u64).max(1)),
            seq: 0,
            sent: vec![None; SENT],
            next_probe: now,
            next_load: now,
            next_health: now,
            last_reply: now,
            started: false,
            fallback: false,
            counters: AdaptCounters::default(),
            def: def.clone(),
            ctl,
        })
    }

    /// The same controller under a new policy: the next hops' MAC addresses are kept;
    /// the rest starts afresh.
    pub(super) fn reconfigured(
        &self,
        cfg: &AdaptConfig,
        lanes: &[Pipeline; 2],
        now: Instant,
    ) -> Result<Adapt, String> {
        let mut a = Adapt::new(cfg, lanes, now)?;
        for h in &mut a.hops {
            h.mac = self.hops.iter().find(|o| o.ip == h.ip).and_then(|o| o.mac);
        }
        a.counters = self.counters;
        Ok(a)
    }

    pub(super) fn shaped(&self) -> Direction {
        self.def.shaped
    }

    pub(super) fn next_wakeup(&self) -> Instant {
        if !self.started {
            return Instant::ZERO;
        }
        let mut t = self.next_probe;
        match &self.ctl {
            Ctl::Postgate(pg) => t = t.min(pg.next_sample()),
            Ctl::Autorate(_) => t = t.min(self.next_load).min(self.next_health),
        }
        if !self.fallback {
            t = t.min(self.last_reply + self.def.timeout);
        }
        t
    }

    /// Time-driven work at `cx.now`: a probe into the other lane's originate queue, the
    /// controller's samples of the shaped lane, the fallback.
    pub(super) fn poll(&mut self, lanes: &mut [Pipeline; 2], sh: &mut Shared, cx: &mut Ctx<'_>) {
        let now = cx.now;
        let shaped = self.def.shaped.index();
        if !self.started {
            self.started = true;
            (self.next_probe, self.last_reply) = (now, now);
            match &mut self.ctl {
                Ctl::Postgate(pg) => pg.start(now),
                Ctl::Autorate(ar) => {
                    ar.start(now);
                    self.next_load = now;
                    self.next_health = now + ar.config().health_interval;
                }
            }
        }
        if now >= self.next_probe {
            self.next_probe = self.next_probe.next_tick(self.probe_every, now);
            self.probe(sh, cx);
        }
        match &mut self.ctl {
            Ctl::Postgate(pg) => {
                if now >= pg.next_sample() {
                    let samples = samples(&mut self.leaves, &lanes[shaped]);
                    pg.on_sample(now, &samples);
                }
            }
            Ctl::Autorate(ar) => {
                let c = ar.config();
                let (load_every, health_every) = (c.load_interval, c.health_interval);
                if now >= self.next_load {
                    self.next_load = self.next_load.next_tick(load_every, now);
                    let sent = lanes[shaped]
                        .shaper()
                        .map_or(0, |s| s.class_stats(self.root.0).sent.bytes);
                    ar.on_load(sent, load_every);
                }
                if now >= self.next_health {
                    self.next_health = self.next_health.next_tick(health_every, now);
                    self.counters.reflector_swaps += ar.on_health(now).len() as u64;
                }
            }
        }
        if !self.fallback && now >= self.last_reply + self.def.timeout {
            self.fallback = true;
            self.counters.fallbacks += 1;
            match &mut self.ctl {
                Ctl::Postgate(pg) => pg.fall_back(),
                Ctl::Autorate(ar) => ar.fall_back(),
            }
            self.apply(&mut lanes[shaped], sh.tcr.as_mut(), now);
        }
    }

    fn probe(&mut self, sh: &mut Shared, cx: &mut Ctx<'_>) {
        let Some(pkt) = cx.pool.alloc() else {
            self.counters.pool_exhausted += 1;
            return;
        };
        let target = match &mut self.ctl {
            Ctl::Postgate(_) => 0,
            Ctl::Autorate(ar) => ar.next_reflector(),
        };
        let hop = &self.hops[self.hop_of[target]];
        let me = (self.mac, self.def.source);
        let buf = cx.pool.slot_mut(pkt);
        let n = match hop.mac {
            None => {
                self.counters.arp_requests_sent += 1;
                arp::frame(buf, &ArpSpec::request(me, hop.ip))
            }
            Some(dst) => {
                self.seq = self.seq.wrapping_add(1);
                self.sent[self.seq as usize % SENT] = Some((self.seq, cx.now, target));
                self.counters.probes_sent += 1;
                let eth = EthSpec {
                    src: self.mac,
                    dst,
                    vlan: None,
                    pcp: 0,
                };
                let ip = Ipv4Spec {
                    src: self.def.source,
                    dst: self.def.targets[target],
                    ..Default::default()
                };
                build::icmp_echo_v4(buf, &eth, &ip, true, IDENT, self.seq, &PAYLOAD)
            }
        };
        let out = self.def.shaped.reverse();
        if !sh.origin[out.index()].push_written(pkt, n, out, cx) {
            self.counters.pool_exhausted += 1;
        }
    }

    /// A frame received in the shaped direction: `true` if it was the controller's (an
    /// echo reply, an ARP request or reply for `source`) and has been consumed — the
    /// caller frees it. An ARP request is answered through `other`'s originate queue.
    pub(super) fn intercept(
        &mut self,
        pkt: PktId,
        p: &weir_wire::Parsed,
        arrival: Instant,
        lanes: &mut [Pipeline; 2],
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> bool {
        let arrival = arrival.min(cx.now);
        if p.ethertype == ethertype::ARP && p.vlan.is_none() {
            return self.arp(pkt, sh, cx);
        }
        let from_target = match p.src_ip {
            Some(IpAddr::V4(a)) => self.def.targets.contains(&a),
            _ => false,
        };
        if p.icmp_type != Some(icmp::ECHO_REPLY)
            || p.dst_ip != Some(IpAddr::V4(self.def.source))
            || !from_target
        {
            return false;
        }
        let Some(l4) = p.l4_offset else { return false };
        let data = cx.pool.data(pkt);
        let Ok(m) = icmp::Packet::new_checked(&data[l4..p.l3_end.max(l4)]) else {
            return false;
        };
        if m.echo_ident() != IDENT {
            return false;
        }
        let seq = m.echo_seq_no();
        match self.sent[seq as usize % SENT] {
            Some((s, at, t))
                if s == seq
                    && arrival >= at
                    && p.src_ip == Some(IpAddr::V4(self.def.targets[t])) =>
            {
                self.sent[seq as usize % SENT] = None;
                self.counters.replies += 1;
                self.last_reply = arrival.max(self.last_reply);
                self.fallback = false;
                let rtt = Duration(arrival.as_nanos() - at.as_nanos());
                match &mut self.ctl {
                    Ctl::Postgate(pg) => pg.on_rtt(rtt),
                    Ctl::Autorate(ar) => ar.on_rtt(t, rtt, arrival),
                }
                let shaped = self.def.shaped.index();
                self.apply(&mut lanes[shaped], sh.tcr.as_mut(), cx.now);
            }
            _ => self.counters.stray_replies += 1,
        }
        true
    }

    fn arp(&mut self, pkt: PktId, sh: &mut Shared, cx: &mut Ctx<'_>) -> bool {
        let data = cx.pool.data(pkt);
        let Some(body) = data.get(weir_wire::ethernet::HEADER_LEN..) else {
            return false;
        };
        let Ok(a) = arp::Packet::new_checked(body) else {
            return false;
        };
        if a.target_ip() != self.def.source {
            return false;
        }
        let op = a.operation();
        if op != arp::REQUEST && op != arp::REPLY {
            return false;
        }
        for h in self.hops.iter_mut().filter(|h| h.ip == a.sender_ip()) {
            h.mac = Some(a.sender_mac());
        }
        if op == arp::REQUEST {
            let reply = ArpSpec::reply_to((self.mac, self.def.source), &a);
            if let Some(r) = cx.pool.alloc() {
                let n = arp::frame(cx.pool.slot_mut(r), &reply);
                let other = self.def.shaped.reverse();
                if sh.origin[other.index()].push_written(r, n, other, cx) {
                    self.counters.arp_replies_sent += 1;
                } else {
                    self.counters.pool_exhausted += 1;
                }
            } else {
                self.counters.pool_exhausted += 1;
            }
        }
        true
    }

    /// Set the shaped link's and the controlled leaves' rates from the controller, and
    /// TCP rate control's view of the leaves' rates (`tcr` classes).
    fn apply(&mut self, lane: &mut Pipeline, tcr: Option<&mut Tcr>, now: Instant) {
        let Some(sched) = lane.shaper_mut() else {
            return;
        };
        let line = self.line_bps();
        let link = self.link_bps().max(8);
        let framing = self.framing;
        let rate = |bps: u64| Rate::with_framing(bps, framing);
        let (root, (b, cb)) = self.root;
        sched.set_rates(root, rate(link), rate(link), b, cb, now);
        let assured: Vec<f64> = match &self.ctl {
            Ctl::Postgate(pg) => {
                // eq. 3: the weights' sum, as a fraction of Σφ_0, must not exceed B;
                // when it does (no class proposed a change, so eqs. 8-10 left them),
                // the assured rates are scaled down together onto B
                let sum0: f64 = pg.config().weights.iter().sum();
                let sum: f64 = pg.weights().sum();
                let scale = (pg.rate() * sum0 / sum).min(1.0);
                pg.weights()
                    .map(|w| w / sum0 * line as f64 * scale)
                    .collect()
            }
            Ctl::Autorate(_) => {
                let scale = link as f64 / line as f64;
                self.leaves.iter().map(|l| l.rate as f64 * scale).collect()
            }
        };
        let mut set = Vec::with_capacity(self.leaves.len());
        for (l, a) in self.leaves.iter_mut().zip(assured) {
            let ceil = l.ceil.min(link).max(8);
            let assured = (a.round() as u64).clamp(8, ceil);
            let (b, cb) = l.bursts;
            sched.set_rates(l.id, rate(assured), rate(ceil), b, cb, now);
            l.applied = assured;
            let heard = sched.queue_stats(l.id).map_or(0, |s| s.received.bytes);
            if heard != l.heard || sched.backlog(l.id).1 > 0 {
                (l.heard, l.busy_until) = (heard, now + BUSY);
            }
            set.push((assured, ceil, now < l.busy_until));
        }
        if let Some(t) = tcr {
            for (l, r) in self.leaves.iter().zip(work_conserving(&set, link)) {
                t.set_class_rate(l.index as u32, r);
            }
        }
    }

    /// The line: Postgate's `B = 1`, the autorate's greatest rate; bit/s.
    fn line_bps(&self) -> u64 {
        match &self.ctl {
            Ctl::Postgate(pg) => pg.config().line_bps,
            Ctl::Autorate(ar) => ar.config().max_bps,
        }
    }

    /// The shaped link's rate, bit/s.
    fn link_bps(&self) -> u64 {
        match &self.ctl {
            Ctl::Postgate(pg) => (pg.rate() * pg.config().line_bps as f64).round() as u64,
            Ctl::Autorate(ar) => ar.rate_bps(),
        }
    }

    pub(super) fn snapshot(&self) -> AdaptSnapshot {
        let line = self.line_bps();
        let ms = |s: f64| s * 1e3;
        let targets: Vec<String> = self.def.targets.iter().map(|t| t.to_string()).collect();
        let macs: Vec<String> = self
            .hops
            .iter()
            .filter_map(|h| h.mac.map(|m| m.to_string()))
            .collect();
        let link = self.link_bps();
        let mut s = AdaptSnapshot {
            mode: self.def.mode.name().into(),
            target: targets.join(", "),
            target_mac: (!macs.is_empty()).then(|| macs.join(", ")),
            rate_fraction: link as f64 / line as f64,
            rate_bps: link,
            line_bps: line,
            delay_ms: None,
            min_rtt_ms: None,
            fallback: self.fallback,
            load: None,
            action: None,
            classes: Vec::new(),
            reflectors: Vec::new(),
            counters: self.counters,
        };
        match &self.ctl {
            Ctl::Postgate(pg) => {
                s.delay_ms = pg.delay().map(ms);
                s.min_rtt_ms = pg.min_rtt().map(|d| ms(d.as_secs_f64()));
                s.classes = self
                    .leaves
                    .iter()
                    .zip(pg.weights().zip(pg.burst_indices()))
                    .zip(&pg.config().weights)
                    .map(|((l, (w, b)), &w0)| AdaptClass {
                        name: l.name.clone(),
                        initial_weight: w0,
                        weight: w,
                        burst_index: Some(b),
                        rate_bps: l.applied,
                    })
                    .collect();
            }
            Ctl::Autorate(ar) => {
                let r = ar.reflectors();
                // the largest newest delta among the probed reflectors
                s.delay_ms = (0..r.len())
                    .filter(|&i| ar.is_active(i))
                    .filter_map(|i| r[i].delta)
                    .reduce(f64::max)
                    .map(ms);
                s.min_rtt_ms = r.iter().filter_map(|x| x.baseline).reduce(f64::min).map(ms);
                s.load = Some(ar.load());
                s.action = Some(ar.last_action().name().into());
                s.classes = self
                    .leaves
                    .iter()
                    .map(|l| AdaptClass {
                        name: l.name.clone(),
                        initial_weight: l.rate as f64 / line as f64,
                        weight: l.rate as f64 / line as f64,
                        burst_index: None,
                        rate_bps: l.applied,
                    })
                    .collect();
                s.reflectors = r
                    .iter()
                    .zip(&self.def.targets)
                    .enumerate()
                    .map(|(i, (x, addr))| ReflectorSnapshot {
                        address: addr.to_string(),
                        active: ar.is_active(i),
                        replies: x.replies,
                        baseline_ms: x.baseline.map(ms),
                        delta_ms: x.delta.map(ms),
                        delta_ewma_ms: ms(x.delta_ewma),
                        offences: x.offence_count,
                        replaced: x.replaced,
                    })
                    .collect();
            }
        }
        s
    }
}

/// TCP rate control's rate for each leaf of `set` — (assured rate, ceil, busy) —
/// under a link of `link` bit/s: the busy leaves' assured rates scaled up together onto
/// the link, each at most its ceil; an idle leaf keeps its assured rate (bit/s).
///
/// The shaper lends what idle leaves leave to the busy ones (their ceils reach the
/// link); TCP rate control must lend it too, or it holds each busy class's senders to
/// its assured rate and the link idles (seed 003's classes start 30 s apart).
pub(super) fn work_conserving(set: &[(u64, u64, bool)], link: u64) -> Vec<u64> {
    let busy: u64 = set.iter().filter(|s| s.2).map(|s| s.0).sum();
    let scale = if busy == 0 {
        1.0
    } else {
        (link as f64 / busy as f64).max(1.0)
    };
    set.iter()
        .map(|&(assured, ceil, is_busy)| {
            if is_busy {
                ((assured as f64 * scale).round() as u64).clamp(assured, ceil.max(assured))
            } else {
                assured
            }
        })
        .collect()
}

/// Postgate's sample of `leaves` in `lane`'s shaper.
fn samples(leaves: &mut [Leaf], lane: &Pipeline) -> Vec<ClassSample> {
    let Some(sched) = lane.shaper() else {
        return Vec::new();
    };
    leaves
        .iter_mut()
        .map(|l| {
            let (stats, backlog) = (sched.queue_stats(l.id), sched.backlog(l.id).1);
            let got = stats.map_or(0, |s| s.received.bytes);
            let active = got != l.received || backlog > 0;
            l.received = got;
            ClassSample {
                backlog,
                dropped_total: stats.map_or(0, |s| s.dropped().bytes),
                active,
            }
        })
        .collect()
}
