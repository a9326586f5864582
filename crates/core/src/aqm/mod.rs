//! Active queue management by sojourn time: CoDel (RFC 8289, [`codel`]) and COBALT
//! (CoDel + BLUE, as Linux `sch_cake.c`'s `cobalt_*` functions, [`cobalt`]), as sans-IO
//! per-queue state that a queue consults for each packet it takes from its head; and
//! [`fifo::AqmFifo`], one FIFO managed by either.
//!
//! # The contract ([`Aqm`])
//! A queue that dequeues a packet computes its sojourn time (`now - Meta::arrival`: the
//! packet entered the queueing stage at `arrival`) and calls [`Aqm::judge`] with it and the
//! backlog behind it ([`Head`]). The verdict is [`Verdict::Pass`] (send it),
//! [`Verdict::Mark`] (send it: the congestion signal went out as an ECN CE mark) or
//! [`Verdict::Drop`] (drop it and judge the next head at the same `now`, or call
//! [`Aqm::on_empty`] if there is none). `judge` takes a `mark` closure that tries the CE
//! mark on the packet and says whether the signal was delivered: CoDel's state machine
//! depends on it (Linux `codel_dequeue`: after a mark the dequeue ends and the next signal
//! is scheduled; after a drop the next packet is judged at once). [`signal_by_mark`] is
//! that closure's body for a packet in the pool: ECN on and the frame ECT(0)/ECT(1) → CE
//! is set ([`weir_wire::ecn::mark_ce`], the IPv4 checksum fixed incrementally) and the
//! packet is sent; already CE → sent as it is; not ECN-capable → dropped; headers the
//! marker cannot read (truncated, garbage, a wrong IPv4 checksum) → **sent unchanged and
//! counted** (`unmarkable`), never edited into a broken packet. A pool without frame bytes
//! (the simulator's, `slot_size == 0`) has no ECN field: a signal is a drop.
//!
//! Besides `judge`, a queue calls [`Aqm::on_empty`] when it finds the queue empty at
//! dequeue, and [`Aqm::on_overflow`] when it drops one of the queue's packets for a limit
//! (COBALT's `cobalt_queue_full`: BLUE's drop probability rises; CoDel: `count += 1`, as
//! `fq_codel_drop` "tells codel to increase its signal strength").
//!
//! # Parameters ([`AqmParams`], one per queue, shared by all its flows)
//! * `target` (ns, default 5 ms): the sojourn time the AQM aims for.
//! * `interval` (ns, default 100 ms): how long the sojourn must stay above `target` before
//!   CoDel signals, and the scale of the signalling schedule `interval / sqrt(count)`.
//! * `mtu` (bytes, default 1514 = Linux `psched_mtu` of an Ethernet device): CoDel stays
//!   quiet while at most one MTU is queued behind the packet (RFC 8289 `maxpacket`).
//! * `mtu_time` (ns): one MTU's serialisation time at the class rate; COBALT treats a
//!   sojourn below `4 × mtu_time` as on target (0 for an unlimited class).
//! * `ecn` (default on): signal ECN-capable packets by marking them instead of dropping.
//! * `p_inc`, `p_dec` (Q0.32 probabilities, 2⁻⁸ and 2⁻¹²): COBALT's BLUE steps.
//!
//! [`AqmParams::for_rate`] derives them from the class rate exactly as `cake_set_rate`
//! does: `mtu_time = tx(mtu)`, `target = max(1.5 × mtu_time, target₀)`,
//! `interval = max(interval₀ + target - target₀, 2 × target)`, with `target₀ = 5 ms` and
//! `interval₀ = 100 ms` (or the values written): at 1 Mbit/s a 1514-byte frame takes
//! 12.112 ms, so the target becomes 18.168 ms and the interval 113.168 ms; from about
//! 3.6 Mbit/s up the defaults stand. [`AqmParams::validate`] refuses impossible values.
//!
//! # The control law
//! Both AQMs keep `rec_inv_sqrt = 1/sqrt(count)` as a Q0.32 fraction so the next signal
//! time `t + interval / sqrt(count)` is one multiply and a shift ([`control_law`]). As in
//! `sch_cake.c`, small counts read a table (a single Newton step from `count - 1` is far
//! off there: from count 1 to 2 it gives 1/sqrt(4), and its error is about
//! 3/(8 count²)): CAKE keeps 16 entries of four steps each, weir 256 entries iterated to
//! convergence. Larger counts take one Newton step `y' = y (3 - count y²) / 2` from the
//! previous value ([`inv_sqrt`], with `y²` to 64 bits); a jump in `count` that one step
//! cannot follow restarts from a power of two below the root. Error: 2 units of 2⁻³²
//! below count 256, within 10⁻⁵ relative beyond (unit-tested).
//!
//! # Statistics
//! [`AqmStats`] (through [`crate::Qdisc::aqm_stats`]): ECN marks, AQM drops, unmarkable
//! signals, limit drops, and the flow and ACK-filter counters of a flow queue. AQM drops
//! are also counted by [`crate::Counted`] under [`crate::DropCause::Aqm`]; marks are not
//! drops. RED's queues ([`crate::queue::red`], [`crate::queue::gred`], per-flow RED in
//! [`crate::queue::pfq`]) report the same counters, marking through [`mark_signal`].

pub mod cobalt;
pub mod codel;
pub mod fifo;

use crate::pool::{PktId, Pool};
use crate::qdisc::Ctx;
use crate::rate::Rate;
use crate::rng::Rng;
use crate::time::{Duration, Instant};
use serde::Serialize;
use weir_wire::ecn::{mark_ce, MarkOutcome};

pub use cobalt::Cobalt;
pub use codel::Codel;

/// What a queue does with the packet it asked about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Pass,
    /// Send it; the congestion signal was delivered by the `mark` closure (a CE mark).
    Mark,
    /// Drop it, then judge the next head (or call [`Aqm::on_empty`]).
    Drop,
}

/// The packet at the head, as the AQM sees it.
#[derive(Copy, Clone, Debug, Default)]
pub struct Head {
    /// `now - arrival`.
    pub sojourn: Duration,
    /// Bytes left in the packet's own queue (its flow) once it is taken out.
    pub flow_backlog: u64,
    /// Bytes left in the whole qdisc once it is taken out (CoDel's `bytes() <= MTU`
    /// test, over the whole qdisc as `fq_codel` does).
    pub total_backlog: u64,
}

/// Per-queue AQM state (one per flow in a flow queue). See the module comment.
pub trait Aqm: Clone + Default + Send + 'static {
    /// Judge the packet at the head; `mark` tries to deliver the signal as a CE mark and
    /// returns whether it did (it is called at most once, and only to signal).
    fn judge(
        &mut self,
        p: &AqmParams,
        head: Head,
        now: Instant,
        rng: &mut Rng,
        mark: impl FnOnce() -> bool,
    ) -> Verdict;
    /// The queue was found empty at dequeue (also right after a [`Verdict::Drop`] that
    /// emptied it).
    fn on_empty(&mut self, p: &AqmParams, now: Instant);
    /// One of the queue's packets was dropped because a limit was reached.
    fn on_overflow(&mut self, p: &AqmParams, now: Instant);
    /// True when the state holds nothing that must decay before the queue may be
    /// forgotten (a flow queue then frees the flow's bucket).
    fn at_rest(&self, now: Instant) -> bool;
}

/// No AQM: every packet passes.
#[derive(Clone, Copy, Default, Debug)]
pub struct NoAqm;

impl Aqm for NoAqm {
    #[inline]
    fn judge(
        &mut self,
        _: &AqmParams,
        _: Head,
        _: Instant,
        _: &mut Rng,
        _: impl FnOnce() -> bool,
    ) -> Verdict {
        Verdict::Pass
    }
    #[inline]
    fn on_empty(&mut self, _: &AqmParams, _: Instant) {}
    #[inline]
    fn on_overflow(&mut self, _: &AqmParams, _: Instant) {}
    #[inline]
    fn at_rest(&self, _: Instant) -> bool {
        true
    }
}

/// Which AQM manages a queue (the policy's `aqm` key).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum AqmKind {
    /// `"none"`: tail drop at the limits only.
    None,
    /// `"codel"`: CoDel (RFC 8289).
    Codel,
    /// `"cobalt"`: CoDel + BLUE (CAKE's COBALT).
    #[default]
    Cobalt,
}

impl AqmKind {
    /// The policy's name for it.
    pub fn name(self) -> &'static str {
        match self {
            AqmKind::None => "none",
            AqmKind::Codel => "codel",
            AqmKind::Cobalt => "cobalt",
        }
    }
    /// Parse a policy value (`"none"`, `"codel"`, `"cobalt"`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(AqmKind::None),
            "codel" => Ok(AqmKind::Codel),
            "cobalt" => Ok(AqmKind::Cobalt),
            _ => Err(format!(
                "aqm: unknown value {s:?} (expected \"codel\", \"cobalt\" or \"none\")"
            )),
        }
    }
}

/// AQM parameters (see the module comment for units and defaults).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AqmParams {
    pub target: Duration,
    pub interval: Duration,
    /// Bytes: CoDel stays quiet while at most this much is queued behind the head.
    pub mtu: u32,
    /// One MTU's serialisation time at the class rate (0: unlimited).
    pub mtu_time: Duration,
    /// Signal ECN-capable packets with CE instead of dropping them.
    pub ecn: bool,
    /// BLUE's increment of its drop probability on overflow (Q0.32).
    pub p_inc: u32,
    /// BLUE's decrement on an empty queue (Q0.32).
    pub p_dec: u32,
}

impl Default for AqmParams {
    /// [`AqmParams::for_rate`] of an unlimited class: 5 ms, 100 ms, 1514 bytes, ECN on.
    fn default() -> Self {
        Self::for_rate(None, Self::TARGET, Self::INTERVAL, Self::MTU)
    }
}

impl AqmParams {
    /// The default target (RFC 8289 §4.4, CAKE): 5 ms.
    pub const TARGET: Duration = Duration::from_millis(5);
    /// The default interval (RFC 8289 §4.3, CAKE's `rtt`): 100 ms.
    pub const INTERVAL: Duration = Duration::from_millis(100);
    /// Linux `psched_mtu` of an Ethernet device: 1500 + 14 header bytes.
    pub const MTU: u32 = 1514;
    /// CAKE's BLUE increment, 1/256 (`1 << 24`).
    pub const P_INC: u32 = 1 << 24;
    /// CAKE's BLUE decrement, 1/4096 (`1 << 20`).
    pub const P_DEC: u32 = 1 << 20;

    /// CAKE's `cake_set_rate`: from the class `rate` (`None`: unlimited), a wanted
    /// `target` and `interval` and the `mtu` in bytes,
    /// `mtu_time = tx(mtu)`, `target' = max(1.5 mtu_time, target)`,
    /// `interval' = max(interval + target' - target, 2 target')`; ECN on; BLUE 1/256 and
    /// 1/4096.
    pub fn for_rate(rate: Option<Rate>, target: Duration, interval: Duration, mtu: u32) -> Self {
        let mtu_time = rate.map_or(0, |r| r.tx_ns(mtu));
        let t = (mtu_time * 3 / 2).max(target.0);
        let i = (interval.0 + t - target.0).max(2 * t);
        AqmParams {
            target: Duration(t),
            interval: Duration(i),
            mtu,
            mtu_time: Duration(mtu_time),
            ecn: true,
            p_inc: Self::P_INC,
            p_dec: Self::P_DEC,
        }
    }

    /// [`AqmParams::for_rate`] with the defaults (5 ms, 100 ms, 1514 bytes).
    pub fn cake(rate: Option<Rate>) -> Self {
        Self::for_rate(rate, Self::TARGET, Self::INTERVAL, Self::MTU)
    }

    /// Check the parameters; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.target.0 == 0 {
            return Err("aqm: target must be > 0".into());
        }
        if self.interval.0 == 0 {
            return Err("aqm: interval must be > 0".into());
        }
        if self.target >= self.interval {
            return Err(format!(
                "aqm: target ({}) must be shorter than interval ({})",
                self.target, self.interval
            ));
        }
        // the control law's arithmetic and `16 * interval` stay far from overflow
        if self.interval > Duration::from_secs(3600) {
            return Err(format!(
                "aqm: interval ({}) must be at most 1 hour",
                self.interval
            ));
        }
        if self.mtu == 0 {
            return Err("aqm: mtu must be > 0 bytes".into());
        }
        Ok(())
    }
}

/// 1/sqrt(count) in Q0.32 for counts below 256 (1 KiB): Newton steps from the previous
/// entry until the value stops changing; entries 0 and 1 are 1.0 (`u32::MAX`). CAKE's
/// `cobalt_cache_init` keeps 16 entries of four steps each (at count 2 that leaves
/// 0.7067, 0.06 % short, and a single step from 15 to 16 is 0.16 % off); 256 entries
/// keep a single step beyond them within 10⁻⁵.
pub const INV_SQRT_CACHE: [u32; 256] = {
    let mut t = [u32::MAX; 256];
    let mut c = 2;
    while c < 256 {
        let mut y = t[c - 1];
        let mut k = 0;
        while k < 32 {
            let next = newton_step(c as u32, y);
            if next == y {
                break;
            }
            y = next;
            k += 1;
        }
        t[c] = y;
        c += 1;
    }
    t
};

/// One Newton step towards 1/sqrt(count) from `y` (Q0.32): `y (3 - count y²) / 2`, as
/// `cobalt_newton_step` but with `y²` kept to 64 bits (CAKE truncates it to 32, which
/// costs precision once `count` passes ~10⁴). The result never exceeds the root.
/// Requires `count · y² < 3` (else the result is 0, which [`inv_sqrt`] never asks for).
#[inline]
pub const fn newton_step(count: u32, y: u32) -> u32 {
    let xy2 = count as u128 * (y as u128 * y as u128); // Q.64
    let val = (3u128 << 64).saturating_sub(xy2);
    ((y as u128 * val) >> 65) as u32
}

/// 1/sqrt(`count`) in Q0.32, given the value `prev` for a nearby count (see the module
/// comment): the table below 256, otherwise one Newton step from `prev` when
/// `count · prev²` is in [1/4, 3) (the neighbour of a count stepped by one), else five
/// from a power of two within a factor 2 below the root (a jump: CoDel's re-entry at
/// `delta`, COBALT's first step).
#[inline]
pub fn inv_sqrt(count: u32, prev: u32) -> u32 {
    if (count as usize) < INV_SQRT_CACHE.len() {
        return INV_SQRT_CACHE[count as usize];
    }
    let xy2 = count as u128 * (prev as u128 * prev as u128); // Q.64
    if (1 << 62..3 << 64).contains(&xy2) {
        return newton_step(count, prev);
    }
    // 2^-ceil(log2(count)/2) is in (1/2, 1] of 1/sqrt(count)
    let bits = 32 - (count - 1).leading_zeros();
    let mut y = u32::MAX >> bits.div_ceil(2);
    for _ in 0..5 {
        y = newton_step(count, y);
    }
    y
}

/// `t + interval · rec_inv_sqrt` (Q0.32): CoDel's `control_law`, `t + interval/sqrt(count)`.
#[inline]
pub fn control_law(t: u64, interval: Duration, rec_inv_sqrt: u32) -> u64 {
    t + ((interval.0 as u128 * rec_inv_sqrt as u128) >> 32) as u64
}

/// Counters of an AQM-managed queue (a flow queue fills the flow fields too).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AqmStats {
    /// Packets sent with CE because the AQM signalled them (already-CE packets included,
    /// as Linux counts `ecn_mark`); for RED, the early decisions marked and enqueued.
    /// Not drops.
    pub ecn_marked: u64,
    /// Packets the AQM dropped (also in [`crate::QStats`]: as `aqm` for CoDel and
    /// COBALT, as `red_early` + `red_forced` for RED).
    pub aqm_dropped: u64,
    /// Signals on packets whose headers the marker could not read: sent unchanged.
    pub unmarkable: u64,
    /// Packets dropped to respect the packet or byte limit (the fattest flow's head in a
    /// flow queue: `overlimit` in [`crate::QStats`]; a FIFO's tail drops are its
    /// `queue_full`/`byte_limit` and counted here too).
    pub overlimit_dropped: u64,
    /// Queued pure ACKs the ACK filter dropped, made redundant by a newer segment of
    /// their connection (CAKE's `ack_drops`; also in [`crate::QStats`] as `ack_filter`).
    pub ack_drops: u64,
    /// Flows that entered the new-flow (sparse) list, since the start.
    pub new_flows: u64,
    /// Flows in the new-flow list now.
    pub sparse_flows: u32,
    /// Flows in the old-flow list with packets (bulk) now.
    pub bulk_flows: u32,
    /// Empty flows whose AQM state is still decaying (COBALT) now.
    pub decaying_flows: u32,
    /// Flows holding packets now.
    pub active_flows: u32,
    /// The most flows that held packets at once.
    pub max_flows_seen: u32,
    /// Source hosts with bulk flows now (`dual-src`, `triple`).
    pub src_hosts: u32,
    /// Destination hosts with bulk flows now (`dual-dst`, `triple`).
    pub dst_hosts: u32,
    /// Arrivals that found every way of their flow's set taken and shared a queue.
    pub collisions: u64,
}

/// How a congestion signal went out without a drop ([`mark_signal`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// The packet carries CE: set now (the IPv4 checksum fixed), or it already did.
    Ce,
    /// Its headers could not be read: it goes on unchanged (counted `unmarkable`).
    Unmarkable,
}

impl AqmStats {
    /// Count a signal delivered without a drop: `ecn_marked` or `unmarkable`.
    #[inline]
    pub fn count_delivered(&mut self, d: Delivered) {
        match d {
            Delivered::Ce => self.ecn_marked += 1,
            Delivered::Unmarkable => self.unmarkable += 1,
        }
    }
}

/// The one rule by which a queue signals congestion on packet `pkt` by marking it: with
/// `ecn` on, try the CE mark ([`mark_ce`]); `Some` when the signal went out without a
/// drop (marked, already CE, or headers unreadable: sent unchanged, never edited into a
/// broken packet), `None` when it is owed as a drop (not ECN-capable, ECN off, or no
/// frame bytes in the pool). The AQMs use it through [`signal_by_mark`]; RED and
/// three-colour RED on their early decisions
/// ([`crate::queue::red::RedParams::mark_or_drop`]).
#[inline]
pub fn mark_signal(ecn: bool, pool: &mut Pool, pkt: PktId) -> Option<Delivered> {
    if !ecn || pool.slot_size() == 0 {
        return None;
    }
    match mark_ce(pool.data_mut(pkt)) {
        MarkOutcome::Marked | MarkOutcome::AlreadyCe => Some(Delivered::Ce),
        MarkOutcome::Malformed => Some(Delivered::Unmarkable),
        MarkOutcome::NotEct => None,
    }
}

/// The body of [`Aqm::judge`]'s `mark` closure for packet `pkt`: [`mark_signal`], the
/// outcome counted in `stats`; true when the signal was delivered rather than owed as a
/// drop.
pub fn signal_by_mark(ecn: bool, pool: &mut Pool, pkt: PktId, stats: &mut AqmStats) -> bool {
    mark_signal(ecn, pool, pkt)
        .map(|d| stats.count_delivered(d))
        .is_some()
}

/// Judge packet `pkt`, just taken from its queue, for a queue with `aqm` state: its
/// sojourn from `Meta::arrival`, the backlogs behind it, the mark closure
/// [`signal_by_mark`]. A `Drop` is counted in `stats.aqm_dropped`; the caller hands the
/// packet to `cx.dropped` with [`crate::DropCause::Aqm`].
#[inline]
pub fn judge_packet<A: Aqm>(
    aqm: &mut A,
    p: &AqmParams,
    pkt: PktId,
    flow_backlog: u64,
    total_backlog: u64,
    cx: &mut Ctx<'_>,
    stats: &mut AqmStats,
) -> Verdict {
    let head = Head {
        sojourn: cx.now - cx.pool.meta(pkt).arrival,
        flow_backlog,
        total_backlog,
    };
    let now = cx.now;
    // the closure needs the pool (to mark) while `judge` needs the rng: split the context
    let Ctx { pool, rng, .. } = cx;
    let v = aqm.judge(p, head, now, rng, || {
        signal_by_mark(p.ecn, pool, pkt, stats)
    });
    if v == Verdict::Drop {
        stats.aqm_dropped += 1;
    }
    v
}

#[cfg(test)]
mod tests;
