//! Drop-tail FIFO (Linux `pfifo`/`bfifo` in one, ns-3 `FifoQueueDisc`).
//!
//! Packets leave in arrival order. An arriving packet is refused (tail drop) when taking it
//! would exceed either limit; packets already held are never dropped by the FIFO itself.
//! Work-conserving: `dequeue` returns the head whenever the queue is non-empty, and
//! `next_wakeup` is always `None`.
//!
//! Parameters ([`Limits`]):
//! * `packets` (packets, default unlimited = [`Limits::UNLIMITED_PACKETS`]): a packet is
//!   admitted only if fewer than `packets` are held, else refused with
//!   [`DropCause::QueueFull`] (as `pfifo`: `qlen < limit`).
//! * `bytes` (bytes, default unlimited = [`Limits::UNLIMITED_BYTES`]): a packet of `len`
//!   bytes is admitted only if `held_bytes + len <= bytes`, else refused with
//!   [`DropCause::ByteLimit`] (as `bfifo`). A packet longer than `bytes` is never admitted.
//!
//! The packet limit is checked first. A limit of 0 refuses everything (a black hole).
//!
//! Statistics: none of its own; wrap in [`crate::Counted`] for received / enqueued /
//! dequeued / dropped counts by cause.
//!
//! Invariants: `len()`/`bytes()` equal the sum over held packets; after every call
//! `len() <= packets` and `bytes() <= bytes` (limits lowered at run time with
//! [`Fifo::set_limits`] are enforced on the next arrival, held packets are kept). No
//! allocation: the queue is an intrusive [`PktQueue`] threaded through the pool.
//!
//! [`Limits`] and the inherent `try_push`/`pop` are reused by the RED queue
//! ([`crate::queue::red::RedQueue`]) and the token-bucket shaper ([`crate::queue::tbf::Tbf`]).

use crate::pool::{PktId, PktQueue, Pool};
use crate::qdisc::{Ctx, DropCause, Qdisc};

/// Hard packet and byte limits of a drop-tail queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Maximum packets held (`u32::MAX` = unlimited).
    pub packets: u32,
    /// Maximum bytes held (`u64::MAX` = unlimited).
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::UNLIMITED
    }
}

impl Limits {
    pub const UNLIMITED_PACKETS: u32 = u32::MAX;
    pub const UNLIMITED_BYTES: u64 = u64::MAX;
    pub const UNLIMITED: Limits = Limits {
        packets: Self::UNLIMITED_PACKETS,
        bytes: Self::UNLIMITED_BYTES,
    };

    pub const fn new(packets: u32, bytes: u64) -> Self {
        Limits { packets, bytes }
    }

    /// Whether a queue holding `held_pkts` packets and `held_bytes` bytes may take one more
    /// packet of `len` bytes; the refusal cause otherwise.
    #[inline]
    pub fn admit(&self, held_pkts: usize, held_bytes: u64, len: u32) -> Result<(), DropCause> {
        if held_pkts >= self.packets as usize {
            return Err(DropCause::QueueFull);
        }
        if held_bytes.saturating_add(len as u64) > self.bytes {
            return Err(DropCause::ByteLimit);
        }
        Ok(())
    }
}

/// Drop-tail FIFO qdisc with packet and byte limits (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct Fifo {
    q: PktQueue,
    limits: Limits,
}

impl Fifo {
    /// A FIFO holding at most `limit_packets` packets and `limit_bytes` bytes. Use
    /// [`Limits::UNLIMITED_PACKETS`] / [`Limits::UNLIMITED_BYTES`] for no limit.
    pub fn new(limit_packets: u32, limit_bytes: u64) -> Self {
        Self::with_limits(Limits::new(limit_packets, limit_bytes))
    }

    pub fn with_limits(limits: Limits) -> Self {
        Fifo {
            q: PktQueue::new(),
            limits,
        }
    }

    /// A FIFO limited in packets only (Linux `pfifo limit N`).
    pub fn packets(limit: u32) -> Self {
        Self::new(limit, Limits::UNLIMITED_BYTES)
    }

    /// A FIFO limited in bytes only (Linux `bfifo limit N`).
    pub fn bytes_limited(limit: u64) -> Self {
        Self::new(Limits::UNLIMITED_PACKETS, limit)
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Change the limits at run time. Packets already held are kept even if they now
    /// exceed the limits; arrivals are refused until the queue is below them again.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The packet that `pop` would return.
    #[inline]
    pub fn head(&self) -> Option<PktId> {
        self.q.head()
    }

    /// Append `id` if the limits allow; otherwise leave it with the caller and return why.
    #[inline]
    pub fn try_push(&mut self, pool: &mut Pool, id: PktId) -> Result<(), DropCause> {
        self.limits
            .admit(self.q.len(), self.q.bytes(), pool.len(id))?;
        self.q.push_back(pool, id);
        Ok(())
    }

    /// Remove and return the head packet.
    #[inline]
    pub fn pop(&mut self, pool: &mut Pool) -> Option<PktId> {
        self.q.pop_front(pool)
    }

    /// Packets held.
    #[inline]
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Bytes held.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.q.bytes()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Move every held packet to `cx.dropped` with `cause`, in queue order.
    pub fn drain_to(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        while let Some(id) = self.q.pop_front(cx.pool) {
            cx.drop_later(id, cause);
        }
    }
}

impl Qdisc for Fifo {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        self.try_push(cx.pool, pkt)
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.q.pop_front(cx.pool)
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn bytes(&self) -> u64 {
        self.q.bytes()
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.drain_to(cx, cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Counted;
    use crate::rng::Rng;
    use crate::time::Instant;

    fn pkt(pool: &mut Pool, len: u32) -> PktId {
        let id = pool.alloc().expect("pool");
        pool.meta_mut(id).len = len;
        id
    }

    #[test]
    fn packet_limit_refuses_with_queue_full() {
        let mut pool = Pool::new(16, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut f = Fifo::packets(3);
        for _ in 0..3 {
            let p = pkt(cx.pool, 100);
            assert_eq!(f.enqueue(p, &mut cx), Ok(()));
        }
        let p = pkt(cx.pool, 100);
        assert_eq!(f.enqueue(p, &mut cx), Err(DropCause::QueueFull));
        cx.pool.free(p);
        assert_eq!(Qdisc::len(&f), 3);
        assert_eq!(Qdisc::bytes(&f), 300);
        // Room again after one leaves.
        let out = f.dequeue(&mut cx).unwrap();
        cx.pool.free(out);
        let p = pkt(cx.pool, 100);
        assert_eq!(f.enqueue(p, &mut cx), Ok(()));
    }

    #[test]
    fn byte_limit_refuses_with_byte_limit() {
        let mut pool = Pool::new(16, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut f = Fifo::bytes_limited(1000);
        let a = pkt(cx.pool, 600);
        assert_eq!(f.enqueue(a, &mut cx), Ok(()));
        // 600 + 401 > 1000
        let b = pkt(cx.pool, 401);
        assert_eq!(f.enqueue(b, &mut cx), Err(DropCause::ByteLimit));
        cx.pool.free(b);
        // 600 + 400 == 1000 fits exactly.
        let c = pkt(cx.pool, 400);
        assert_eq!(f.enqueue(c, &mut cx), Ok(()));
        assert_eq!(Qdisc::bytes(&f), 1000);
        // Packet limit is checked first when both would refuse.
        let mut g = Fifo::new(1, 100);
        let d = pkt(cx.pool, 50);
        assert_eq!(g.enqueue(d, &mut cx), Ok(()));
        let e = pkt(cx.pool, 500);
        assert_eq!(g.enqueue(e, &mut cx), Err(DropCause::QueueFull));
        cx.pool.free(e);
        // A packet longer than the byte limit never fits, even in an empty queue.
        let mut h = Fifo::bytes_limited(100);
        let big = pkt(cx.pool, 101);
        assert_eq!(h.enqueue(big, &mut cx), Err(DropCause::ByteLimit));
        cx.pool.free(big);
        // Zero limits refuse everything; unlimited refuses nothing.
        let mut z = Fifo::new(0, Limits::UNLIMITED_BYTES);
        let p = pkt(cx.pool, 1);
        assert_eq!(z.enqueue(p, &mut cx), Err(DropCause::QueueFull));
        let mut u = Fifo::default();
        assert_eq!(u.limits(), Limits::UNLIMITED);
        assert_eq!(u.enqueue(p, &mut cx), Ok(()));
    }

    #[test]
    fn fifo_order_and_work_conserving() {
        let mut pool = Pool::new(64, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut f = Fifo::new(100, 1_000_000);
        let ids: Vec<_> = (0..50).map(|i| pkt(cx.pool, 40 + i)).collect();
        for &id in &ids {
            f.enqueue(id, &mut cx).unwrap();
        }
        assert_eq!(f.head(), Some(ids[0]));
        for &id in &ids {
            assert_eq!(f.next_wakeup(), None);
            assert_eq!(f.dequeue(&mut cx), Some(id));
        }
        assert_eq!(f.dequeue(&mut cx), None);
        assert!(Qdisc::is_empty(&f));
        assert_eq!(Qdisc::bytes(&f), 0);
    }

    #[test]
    fn purge_moves_everything_to_dropped() {
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut f = Fifo::packets(8);
        let ids: Vec<_> = (0..5).map(|_| pkt(cx.pool, 10)).collect();
        for &id in &ids {
            f.enqueue(id, &mut cx).unwrap();
        }
        f.purge(&mut cx, DropCause::Shutdown);
        assert!(Qdisc::is_empty(&f));
        let want: Vec<_> = ids.iter().map(|&i| (i, DropCause::Shutdown)).collect();
        assert_eq!(dropped, want);
    }

    #[test]
    fn lowering_limits_keeps_held_packets() {
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut f = Fifo::packets(8);
        for _ in 0..4 {
            let p = pkt(cx.pool, 10);
            f.enqueue(p, &mut cx).unwrap();
        }
        f.set_limits(Limits::new(2, Limits::UNLIMITED_BYTES));
        assert_eq!(Qdisc::len(&f), 4);
        let p = pkt(cx.pool, 10);
        assert_eq!(f.enqueue(p, &mut cx), Err(DropCause::QueueFull));
        assert!(cx.dropped.is_empty());
    }

    #[test]
    fn counter_identities_hold() {
        let mut pool = Pool::new(256, 0);
        let mut rng = Rng::new(7);
        let mut dropped = Vec::new();
        let mut drive_rng = Rng::new(99);
        let mut c = Counted::new(Box::new(Fifo::new(20, 15_000)));
        {
            let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
            for _ in 0..5_000 {
                if drive_rng.chance(0.6) {
                    let len = 64 + drive_rng.below(1437) as u32;
                    let p = pkt(cx.pool, len);
                    if c.enqueue(p, &mut cx).is_err() {
                        cx.pool.free(p);
                    }
                } else if let Some(p) = c.dequeue(&mut cx) {
                    cx.pool.free(p);
                }
                c.check().unwrap();
            }
            assert!(c.stats.drops_by(DropCause::QueueFull).packets > 0);
            assert!(c.stats.drops_by(DropCause::ByteLimit).packets > 0);
            c.purge(&mut cx, DropCause::Shutdown);
        }
        c.check().unwrap();
        assert_eq!(Qdisc::len(&c), 0);
        for (id, _) in dropped.drain(..) {
            pool.free(id);
        }
        assert_eq!(pool.in_use(), 0);
    }
}
