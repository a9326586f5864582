//! The queue-discipline contract every queue, AQM, shaper and scheduler implements, and a
//! counting wrapper that keeps per-qdisc statistics with typed drop causes.
//!
//! Modelled on Linux `Qdisc_ops` and ns-3 `QueueDisc`:
//!
//! * `enqueue(pkt)` takes ownership of `pkt`. `Ok(())` means the packet is now held by the
//!   qdisc. `Err(cause)` means the qdisc refused *this* packet; ownership stays with the
//!   caller, who counts and frees it. Other packets the qdisc discards while doing so (a
//!   head drop, a longest-flow drop) are pushed to `cx.dropped` with their cause and owned
//!   by the caller from then on.
//! * `dequeue()` returns the next packet to send at `cx.now`, or `None`. It may also push
//!   packets it discards (e.g. an AQM dropping at the head) into `cx.dropped`.
//! * `next_wakeup()`: a work-conserving qdisc returns `None`. A non-work-conserving one
//!   (a shaper, a delay line) that returned `None` from `dequeue` while holding packets
//!   returns the earliest instant at which `dequeue` may succeed. The driver sleeps until
//!   the minimum over its qdiscs.
//! * `purge(cause)` moves every held packet into `cx.dropped` (shutdown, reconfiguration).
//!
//! Counter identities, checked by [`QStats::check`] and asserted by tests:
//! `received = enqueued + dropped_on_enqueue` and
//! `enqueued = dequeued + dropped_later + queued`, in packets and in bytes.

use crate::aqm::AqmStats;
use crate::pool::{PktId, Pool};
use crate::rng::Rng;
use crate::time::Instant;
use serde::Serialize;

/// Why a packet was dropped. Every drop inside weir has one of these.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropCause {
    /// A queue's packet limit was reached (for per-flow queuing: the class-wide limit,
    /// the packet dropped being the head of the longest flow or the arriving one).
    QueueFull,
    /// A queue's byte limit was reached.
    ByteLimit,
    /// A per-flow queue's limit was reached.
    FlowLimit,
    /// RED dropped early with probability p_a (avg between min_th and max_th).
    RedEarly,
    /// RED dropped because avg exceeded max_th (or 2·max_th in gentle mode).
    RedForced,
    /// The packet pool had no free slot.
    PoolExhausted,
    /// A classifier rule's action is `drop`.
    Policy,
    /// An emulated link lost the packet on purpose.
    Emulated,
    /// The packet was held when weir shut down.
    Shutdown,
    /// The packet was held when the policy was replaced, and the new policy's limits had
    /// no room for it.
    Reload,
    /// Admission control held back or refused the packet's session (`max_sessions`).
    Admission,
    /// A DiffServ policer dropped the packet: its meter's action for its colour is `drop`.
    Policed,
    /// An AQM (CoDel, COBALT) dropped the packet at the head of its queue: a congestion
    /// signal that could not be an ECN mark (or BLUE's random drop).
    Aqm,
    /// A flow queue's packet or byte limit was reached: the head of the fattest flow was
    /// dropped to make room (or the arriving packet, when it was that head).
    Overlimit,
    /// The ACK filter dropped a queued pure ACK made redundant by a newer one of the same
    /// flow.
    AckFilter,
}

impl DropCause {
    pub const ALL: [DropCause; 15] = [
        DropCause::QueueFull,
        DropCause::ByteLimit,
        DropCause::FlowLimit,
        DropCause::RedEarly,
        DropCause::RedForced,
        DropCause::PoolExhausted,
        DropCause::Policy,
        DropCause::Emulated,
        DropCause::Shutdown,
        DropCause::Reload,
        DropCause::Admission,
        DropCause::Policed,
        DropCause::Aqm,
        DropCause::Overlimit,
        DropCause::AckFilter,
    ];
    pub const COUNT: usize = Self::ALL.len();

    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn as_str(self) -> &'static str {
        match self {
            DropCause::QueueFull => "queue_full",
            DropCause::ByteLimit => "byte_limit",
            DropCause::FlowLimit => "flow_limit",
            DropCause::RedEarly => "red_early",
            DropCause::RedForced => "red_forced",
            DropCause::PoolExhausted => "pool_exhausted",
            DropCause::Policy => "policy",
            DropCause::Emulated => "emulated",
            DropCause::Shutdown => "shutdown",
            DropCause::Reload => "reload_limit",
            DropCause::Admission => "admission",
            DropCause::Policed => "policed",
            DropCause::Aqm => "aqm",
            DropCause::Overlimit => "overlimit",
            DropCause::AckFilter => "ack_filter",
        }
    }
}

/// What every qdisc call gets from its driver: the time, the packet pool, the seeded RNG
/// and the list where discarded packets are handed back.
pub struct Ctx<'a> {
    pub now: Instant,
    pub pool: &'a mut Pool,
    pub rng: &'a mut Rng,
    pub dropped: &'a mut Vec<(PktId, DropCause)>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        now: Instant,
        pool: &'a mut Pool,
        rng: &'a mut Rng,
        dropped: &'a mut Vec<(PktId, DropCause)>,
    ) -> Self {
        Ctx {
            now,
            pool,
            rng,
            dropped,
        }
    }
    /// Hand a packet the qdisc already held back to the driver as dropped.
    #[inline]
    pub fn drop_later(&mut self, id: PktId, cause: DropCause) {
        self.dropped.push((id, cause));
    }
}

/// The queue-discipline contract (see the module comment).
pub trait Qdisc: Send {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause>;
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId>;
    /// Earliest instant a non-work-conserving qdisc can release a held packet, if it is
    /// holding packets it cannot release now. `None` for work-conserving qdiscs.
    fn next_wakeup(&self) -> Option<Instant> {
        None
    }
    /// Packets held.
    fn len(&self) -> usize;
    /// Bytes held.
    fn bytes(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Discard everything held into `cx.dropped` with `cause`.
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause);
    /// The AQM and flow counters of a queue managed by CoDel, COBALT or RED (ECN marks,
    /// AQM drops, flows); `None` for the others.
    fn aqm_stats(&self) -> Option<AqmStats> {
        None
    }
    /// Free what an empty queue can rebuild (a [`crate::queue::lazy::Lazy`] queue's
    /// inner queue); true if something was freed. A queue holding packets keeps all.
    fn release(&mut self) -> bool {
        false
    }
    /// For a queue built on first use ([`crate::queue::lazy::Lazy`]): whether it is built
    /// now; `None` for the others (an owner tracks idleness only where it is `Some`).
    fn lazy_built(&self) -> Option<bool> {
        None
    }
}

/// A packet and byte count.
#[derive(Copy, Clone, Default, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Count {
    pub packets: u64,
    pub bytes: u64,
}

impl Count {
    #[inline]
    pub fn add(&mut self, bytes: u32) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

impl core::ops::Add for Count {
    type Output = Count;
    fn add(self, o: Count) -> Count {
        Count {
            packets: self.packets + o.packets,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// Statistics of one qdisc.
#[derive(Clone, Default, Debug, Serialize)]
pub struct QStats {
    pub received: Count,
    pub enqueued: Count,
    pub dequeued: Count,
    pub dropped_on_enqueue: Count,
    pub dropped_later: Count,
    /// Drops by cause (both kinds), indexed by [`DropCause::index`].
    pub drops: [Count; DropCause::COUNT],
}

impl QStats {
    pub fn drops_by(&self, cause: DropCause) -> Count {
        self.drops[cause.index()]
    }
    pub fn dropped(&self) -> Count {
        self.dropped_on_enqueue + self.dropped_later
    }
    /// Verify the counter identities against the qdisc's current backlog.
    pub fn check(&self, queued_packets: usize, queued_bytes: u64) -> Result<(), String> {
        let lhs = self.received;
        let rhs = self.enqueued + self.dropped_on_enqueue;
        if lhs != rhs {
            return Err(format!(
                "received {lhs:?} != enqueued {:?} + dropped_on_enqueue {:?}",
                self.enqueued, self.dropped_on_enqueue
            ));
        }
        let q = Count {
            packets: queued_packets as u64,
            bytes: queued_bytes,
        };
        if self.enqueued != self.dequeued + self.dropped_later + q {
            return Err(format!(
                "enqueued {:?} != dequeued {:?} + dropped_later {:?} + queued {q:?}",
                self.enqueued, self.dequeued, self.dropped_later
            ));
        }
        let by_cause = self.drops.iter().fold(Count::default(), |a, &b| a + b);
        if by_cause != self.dropped() {
            return Err(format!(
                "drops by cause {by_cause:?} != dropped {:?}",
                self.dropped()
            ));
        }
        Ok(())
    }
}

/// Wraps a qdisc and counts what passes through it, with drops by cause. Drops the inner
/// qdisc reports through `cx.dropped` during a call are attributed to it as later drops.
pub struct Counted<Q: ?Sized> {
    pub stats: QStats,
    pub inner: Box<Q>,
}

impl<Q: Qdisc + ?Sized> Counted<Q> {
    pub fn new(inner: Box<Q>) -> Self {
        Counted {
            stats: QStats::default(),
            inner,
        }
    }

    #[inline]
    fn count_later(&mut self, cx: &Ctx<'_>, from: usize) {
        for &(id, cause) in &cx.dropped[from..] {
            let len = cx.pool.len(id);
            self.stats.dropped_later.add(len);
            self.stats.drops[cause.index()].add(len);
        }
    }

    pub fn check(&self) -> Result<(), String> {
        self.stats.check(self.inner.len(), self.inner.bytes())
    }
}

impl<Q: Qdisc + ?Sized> Qdisc for Counted<Q> {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let len = cx.pool.len(pkt);
        let mark = cx.dropped.len();
        self.stats.received.add(len);
        let r = self.inner.enqueue(pkt, cx);
        match r {
            Ok(()) => self.stats.enqueued.add(len),
            Err(cause) => {
                self.stats.dropped_on_enqueue.add(len);
                self.stats.drops[cause.index()].add(len);
            }
        }
        self.count_later(cx, mark);
        r
    }
    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        let mark = cx.dropped.len();
        let r = self.inner.dequeue(cx);
        if let Some(id) = r {
            self.stats.dequeued.add(cx.pool.len(id));
        }
        self.count_later(cx, mark);
        r
    }
    fn next_wakeup(&self) -> Option<Instant> {
        self.inner.next_wakeup()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        let mark = cx.dropped.len();
        self.inner.purge(cx, cause);
        self.count_later(cx, mark);
    }
    fn aqm_stats(&self) -> Option<AqmStats> {
        self.inner.aqm_stats()
    }
    fn release(&mut self) -> bool {
        self.inner.release()
    }
    fn lazy_built(&self) -> Option<bool> {
        self.inner.lazy_built()
    }
}
