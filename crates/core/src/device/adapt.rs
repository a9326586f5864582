//! The device's adaptive controller (`[adapt]`, seed 003's Postgate): the probes it
//! emits, the replies and ARP it consumes, the samples it takes of the classes, and the
//! rates and weights it sets.
//!
//! * **Probes.** Every `interval` an ICMP echo request leaves in the direction opposite
//!   to the shaped one (towards the line), from `source` (an address no host uses) to
//!   `target`, identifier 0x7765 ("we"), the sequence number counting up, 56 bytes of
//!   payload (as `ping`), from the MAC address 02:77 followed by `source`'s four octets
//!   (locally administered). Until `target`'s MAC address is known (from its ARP reply)
//!   the probe is an ARP request for it instead.
//! * **Consumed** (never forwarded, counted as `consumed`): in the shaped direction, echo
//!   replies to `source` with the identifier, ARP requests for `source` (answered in the
//!   other direction: "source is at 02:77:…") and ARP replies to `source`.
//! * **RTT** = the reply's arrival (the kernel's receive timestamp) − when the probe was
//!   handed out by `poll_transmit`; replies to one of the last 256 probes count, others
//!   are `stray`.
//! * **Samples.** Every `sample` period (10 ms) each controlled leaf's backlog, dropped
//!   bytes and whether it received anything ([`ClassSample`]).
//! * **Applied**, after every reply: the shaped link (the root class) gets rate = ceil =
//!   `B × line`; each controlled leaf gets an assured rate of `φ/Σφ_0 × line` and a ceil
//!   of `min(its own ceil, B × line)`; bursts stay as the policy wrote them.
//! * **Fallback.** No reply for `timeout` (an unreachable target, replies that stop, ICMP
//!   rate limiting): `B` = the floor, applied, `fallback` set in the stats, counted; the
//!   next reply resumes the controller from the floor.
//!
//! Limits: IPv4 only; probes are untagged (no VLAN).

use std::net::IpAddr;

use super::{dir_index, Lane};
use crate::adapt::postgate::{ClassSample, Postgate};
use crate::policy::{AdaptDef, Policy};
use crate::pool::{Direction, PktId};
use crate::qdisc::Ctx;
use crate::rate::Rate;
use crate::sched::linkshare::ClassId;
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
}

/// One controlled class in [`AdaptSnapshot`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptClass {
    pub name: String,
    /// φ_0.
    pub initial_weight: f64,
    /// φ.
    pub weight: f64,
    /// Eq. 5, MTU packets.
    pub burst_index: f64,
    /// The assured rate applied, bit/s.
    pub rate_bps: u64,
}

/// The controller's state for `weir stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaptSnapshot {
    pub mode: String,
    pub target: String,
    /// Learnt from its ARP reply; `None` while unknown.
    pub target_mac: Option<String>,
    /// `B`, the shaped link's rate as a fraction of the line.
    pub rate_fraction: f64,
    pub rate_bps: u64,
    pub line_bps: u64,
    /// The newest queueing delay δ (ms).
    pub delay_ms: Option<f64>,
    pub min_rtt_ms: Option<f64>,
    /// Replies stopped: the link is at the floor rate.
    pub fallback: bool,
    pub classes: Vec<AdaptClass>,
    pub counters: AdaptCounters,
}

impl fmt::Display for AdaptSnapshot {
    /// `weir stats`: the link's rate, the delay, the probes, then a line per class.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = crate::units::fmt_rate;
        let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
        write!(
            f,
            "adapt {}: link {} = {:.3} of the line {}, delay {} (least RTT {}); target {} ({}): {} probes, {} replies, {} stray, {} fallbacks",
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
        if self.fallback {
            write!(
                f,
                "\n  FALLBACK: no reply within the timeout, the link is at its floor"
            )?;
        }
        for c in &self.classes {
            write!(
                f,
                "\n  class {}: weight {:.4} of {:.4}, burst index {:.1}, assured {}",
                c.name,
                c.weight,
                c.initial_weight,
                c.burst_index,
                rate(c.rate_bps)
            )?;
        }
        Ok(())
    }
}

/// A leaf class the controller sets.
struct Leaf {
    name: String,
    id: ClassId,
    /// The policy's ceil, bit/s, and (burst, cburst), bytes.
    ceil: u64,
    bursts: (u32, u32),
    /// Bytes the class had received at the last sample (activity).
    received: u64,
    /// The assured rate set last, bit/s.
    applied: u64,
}

/// See the module comment.
pub(super) struct Adapt {
    def: AdaptDef,
    pg: Postgate,
    /// The root class (the shaped link): its id and (burst, cburst).
    root: (ClassId, (u32, u32)),
    leaves: Vec<Leaf>,
    overhead: i32,
    mac: MacAddr,
    target_mac: Option<MacAddr>,
    seq: u16,
    sent: Vec<Option<(u16, Instant)>>,
    next_probe: Instant,
    last_reply: Instant,
    /// The first `poll` has set the clocks: the device may be built on another time base
    /// than the driver's (`weir run` builds it at `Instant::ZERO`).
    started: bool,
    fallback: bool,
    counters: AdaptCounters,
}

impl Adapt {
    /// The controller of `def` (from `policy`) over the shaper of `lanes`' shaped
    /// direction.
    pub(super) fn new(
        def: &AdaptDef,
        policy: &Policy,
        lanes: &[Lane; 2],
        now: Instant,
    ) -> Result<Adapt, String> {
        let pg = Postgate::new(def.postgate.clone(), now)?;
        let sched = lanes[dir_index(def.shaped)]
            .pipe
            .as_ref()
            .and_then(|p| p.shaper())
            .ok_or("[adapt]: the shaped direction has no shaper")?;
        let id = |name: &str| {
            sched
                .class_id(name)
                .ok_or_else(|| format!("[adapt]: the shaper has no class '{name}'"))
        };
        let root = &policy.classes[0];
        let leaves = def
            .classes
            .iter()
            .map(|&i| {
                let c = &policy.classes[i];
                Ok(Leaf {
                    name: c.name.clone(),
                    id: id(&c.name)?,
                    ceil: c.ceil,
                    bursts: (c.burst, c.cburst),
                    received: 0,
                    applied: 0,
                })
            })
            .collect::<Result<_, String>>()?;
        let s = def.source.octets();
        Ok(Adapt {
            root: (id(&root.name)?, (root.burst, root.cburst)),
            leaves,
            overhead: policy.overhead,
            mac: MacAddr([0x02, 0x77, s[0], s[1], s[2], s[3]]),
            target_mac: None,
            seq: 0,
            sent: vec![None; SENT],
            next_probe: now,
            last_reply: now,
            started: false,
            fallback: false,
            counters: AdaptCounters::default(),
            def: def.clone(),
            pg,
        })
    }

    /// The same controller under a new policy: the target's MAC address is kept if the
    /// target is the same; the rest starts afresh.
    pub(super) fn reconfigured(
        &self,
        def: &AdaptDef,
        policy: &Policy,
        lanes: &[Lane; 2],
        now: Instant,
    ) -> Result<Adapt, String> {
        let mut a = Adapt::new(def, policy, lanes, now)?;
        if def.target == self.def.target {
            a.target_mac = self.target_mac;
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
        let stale = self.last_reply + self.def.timeout;
        let mut t = self.next_probe.min(self.pg.next_sample());
        if !self.fallback {
            t = t.min(stale);
        }
        t
    }

    /// Time-driven work at `cx.now`: a probe into the other lane's originate queue, a
    /// sample of the shaped lane's classes, the fallback.
    pub(super) fn poll(&mut self, lanes: &mut [Lane; 2], cx: &mut Ctx<'_>) {
        let now = cx.now;
        let shaped = dir_index(self.def.shaped);
        if !self.started {
            self.started = true;
            self.next_probe = now;
            self.last_reply = now;
            self.pg.start(now);
        }
        if now >= self.next_probe {
            self.next_probe = self.next_probe.next_tick(self.def.interval, now);
            self.probe(&mut lanes[1 - shaped], cx);
        }
        if now >= self.pg.next_sample() {
            let samples = self.samples(&lanes[shaped]);
            self.pg.on_sample(now, &samples);
        }
        if !self.fallback && now >= self.last_reply + self.def.timeout {
            self.fallback = true;
            self.counters.fallbacks += 1;
            self.pg.fall_back();
            self.apply(&mut lanes[shaped], now);
        }
    }

    fn probe(&mut self, lane: &mut Lane, cx: &mut Ctx<'_>) {
        let Some(pkt) = cx.pool.alloc() else {
            self.counters.pool_exhausted += 1;
            return;
        };
        let me = (self.mac, self.def.source);
        let buf = cx.pool.slot_mut(pkt);
        let n = match self.target_mac {
            None => {
                self.counters.arp_requests_sent += 1;
                arp::frame(buf, &ArpSpec::request(me, self.def.target))
            }
            Some(dst) => {
                self.seq = self.seq.wrapping_add(1);
                self.sent[self.seq as usize % SENT] = Some((self.seq, cx.now));
                self.counters.probes_sent += 1;
                let eth = EthSpec {
                    src: self.mac,
                    dst,
                    vlan: None,
                    pcp: 0,
                };
                let ip = Ipv4Spec {
                    src: self.def.source,
                    dst: self.def.target,
                    ..Default::default()
                };
                build::icmp_echo_v4(buf, &eth, &ip, true, IDENT, self.seq, &PAYLOAD)
            }
        };
        if !lane.originate_written(pkt, n, self.def.shaped.reverse(), cx) {
            self.counters.pool_exhausted += 1;
        }
    }

    fn samples(&mut self, lane: &Lane) -> Vec<ClassSample> {
        let Some(sched) = lane.pipe.as_ref().and_then(|p| p.shaper()) else {
            return Vec::new();
        };
        self.leaves
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

    /// A frame received in the shaped direction: `true` if it was the controller's (an
    /// echo reply, an ARP request or reply for `source`) and has been consumed — the
    /// caller frees it. An ARP request is answered through `other`'s originate queue.
    pub(super) fn intercept(
        &mut self,
        pkt: PktId,
        p: &weir_wire::Parsed,
        arrival: Instant,
        lanes: &mut [Lane; 2],
        cx: &mut Ctx<'_>,
    ) -> bool {
        let arrival = arrival.min(cx.now);
        if p.ethertype == ethertype::ARP && p.vlan.is_none() {
            return self.arp(pkt, lanes, cx);
        }
        if p.icmp_type != Some(icmp::ECHO_REPLY)
            || p.dst_ip != Some(IpAddr::V4(self.def.source))
            || p.src_ip != Some(IpAddr::V4(self.def.target))
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
        match self.sent[seq as usize % SENT].take() {
            Some((s, at)) if s == seq && arrival >= at => {
                self.counters.replies += 1;
                self.last_reply = arrival.max(self.last_reply);
                self.fallback = false;
                self.pg.on_rtt(Duration(arrival.as_nanos() - at.as_nanos()));
                let shaped = dir_index(self.def.shaped);
                self.apply(&mut lanes[shaped], cx.now);
            }
            _ => self.counters.stray_replies += 1,
        }
        true
    }

    fn arp(&mut self, pkt: PktId, lanes: &mut [Lane; 2], cx: &mut Ctx<'_>) -> bool {
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
        if a.sender_ip() == self.def.target {
            self.target_mac = Some(a.sender_mac());
        }
        if op == arp::REQUEST {
            let reply = ArpSpec::reply_to((self.mac, self.def.source), &a);
            if let Some(r) = cx.pool.alloc() {
                let n = arp::frame(cx.pool.slot_mut(r), &reply);
                let other = self.def.shaped.reverse();
                if lanes[dir_index(other)].originate_written(r, n, other, cx) {
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

    /// Set the shaped link's and the controlled leaves' rates from `B` and the weights.
    fn apply(&mut self, lane: &mut Lane, now: Instant) {
        let Some(sched) = lane.pipe.as_mut().and_then(|p| p.shaper_mut()) else {
            return;
        };
        let line = self.def.postgate.line_bps;
        let link = self.link_bps().max(8);
        let overhead = self.overhead;
        let rate = |bps: u64| Rate::with_overhead(bps, overhead);
        let (root, (b, cb)) = self.root;
        sched.set_rates(root, rate(link), rate(link), b, cb, now);
        let sum0: f64 = self.def.postgate.weights.iter().sum();
        for (l, w) in self.leaves.iter_mut().zip(self.pg.weights()) {
            let ceil = l.ceil.min(link).max(8);
            let assured = ((w / sum0 * line as f64).round() as u64).clamp(8, ceil);
            let (b, cb) = l.bursts;
            sched.set_rates(l.id, rate(assured), rate(ceil), b, cb, now);
            l.applied = assured;
        }
    }

    /// `B × line`, bit/s.
    fn link_bps(&self) -> u64 {
        (self.pg.rate() * self.def.postgate.line_bps as f64).round() as u64
    }

    pub(super) fn snapshot(&self) -> AdaptSnapshot {
        let line = self.def.postgate.line_bps;
        let ms = |s: f64| s * 1e3;
        AdaptSnapshot {
            mode: "postgate".into(),
            target: self.def.target.to_string(),
            target_mac: self.target_mac.map(|m| m.to_string()),
            rate_fraction: self.pg.rate(),
            rate_bps: self.link_bps(),
            line_bps: line,
            delay_ms: self.pg.delay().map(ms),
            min_rtt_ms: self.pg.min_rtt().map(|d| ms(d.as_secs_f64())),
            fallback: self.fallback,
            classes: self
                .leaves
                .iter()
                .zip(self.pg.weights().zip(self.pg.burst_indices()))
                .zip(&self.def.postgate.weights)
                .map(|((l, (w, b)), &w0)| AdaptClass {
                    name: l.name.clone(),
                    initial_weight: w0,
                    weight: w,
                    burst_index: b,
                    rate_bps: l.applied,
                })
                .collect(),
            counters: self.counters,
        }
    }
}

/// Counted frames the controller consumed.
pub(super) fn consume(lane: &mut Lane, pkt: PktId, cx: &mut Ctx<'_>) {
    lane.consumed.add(cx.pool.len(pkt));
    cx.pool.free(pkt);
}
