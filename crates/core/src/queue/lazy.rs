//! A queue that exists only while it is used: [`Lazy`] builds its inner queue on the
//! first packet and frees it when its owner says the queue has been idle long enough
//! ([`Qdisc::release`]).
//!
//! Why: a subscriber table makes a leaf class for every circuit in each direction —
//! 20,000 leaves for 10,000 circuits — and the modern leaf (flow queuing with COBALT,
//! [`crate::queue::fq`]) keeps ~150 bytes for each of its 1,024 flow buckets: 155 KB a
//! leaf, 3 GB for the table if every queue were built. At any moment only the circuits
//! with traffic need one, so an idle circuit costs this wrapper (a few dozen bytes) and
//! its scheduler class. LibreQoS pays the full price (a CAKE instance per circuit and
//! direction, always allocated).
//!
//! * The owner decides when: the link-sharing scheduler calls `release` on a leaf that has
//!   been empty for [`RELEASE_AFTER`] (see `sched::linkshare`'s idle list); `release` on
//!   a queue holding packets does nothing.
//! * What is lost with the queue: per-flow state of an empty queue — COBALT's drop
//!   state, which it decays on an empty queue anyway, and the flows' deficits. Counters
//!   are kept: the inner queue's [`AqmStats`] counters are added into `past` before it is
//!   freed, so [`Qdisc::aqm_stats`] never goes backwards (gauges read 0 while released;
//!   `max_flows_seen` is the maximum over the queue's lives).
//! * Cost: one branch per call while the queue exists; building it costs one allocation
//!   on the first packet after a release (at most one per leaf per `RELEASE_AFTER`).
//!
//! Invariant: `inner` is `None` only while no packet is held.

use crate::aqm::AqmStats;
use crate::pool::PktId;
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::time::{Duration, Instant};

/// How long a leaf must stay empty before its queue is freed: long enough that a
/// connection pausing between bursts (a web page's objects, a video's segments every
/// 2-10 s) does not rebuild its queue for every burst, short enough that memory follows
/// the circuits in use.
pub const RELEASE_AFTER: Duration = Duration::from_secs(5);

/// Builds the inner queue (always succeeds: the caller validated its configuration).
pub type MakeQueue = Box<dyn Fn() -> Box<dyn Qdisc> + Send>;

/// A queue built on first use and freed on [`Qdisc::release`]; see the module comment.
pub struct Lazy {
    make: MakeQueue,
    inner: Option<Box<dyn Qdisc>>,
    /// Counters of the queues freed so far.
    past: Option<AqmStats>,
    /// Times the inner queue was built.
    builds: u64,
}

impl Lazy {
    pub fn new(make: MakeQueue) -> Self {
        Lazy {
            make,
            inner: None,
            past: None,
            builds: 0,
        }
    }

    /// Whether the inner queue exists now.
    pub fn is_built(&self) -> bool {
        self.inner.is_some()
    }

    /// Times the inner queue was built (first packets after a release).
    pub fn builds(&self) -> u64 {
        self.builds
    }
}

/// `a` with the counters of `b` added (gauges from `a`, the larger `max_flows_seen`).
fn add_counters(a: AqmStats, b: &AqmStats) -> AqmStats {
    AqmStats {
        ecn_marked: a.ecn_marked + b.ecn_marked,
        aqm_dropped: a.aqm_dropped + b.aqm_dropped,
        unmarkable: a.unmarkable + b.unmarkable,
        overlimit_dropped: a.overlimit_dropped + b.overlimit_dropped,
        ack_drops: a.ack_drops + b.ack_drops,
        new_flows: a.new_flows + b.new_flows,
        collisions: a.collisions + b.collisions,
        max_flows_seen: a.max_flows_seen.max(b.max_flows_seen),
        ..a
    }
}

impl Qdisc for Lazy {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let q = match &mut self.inner {
            Some(q) => q,
            None => {
                self.builds += 1;
                self.inner.insert((self.make)())
            }
        };
        q.enqueue(pkt, cx)
    }
    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.inner.as_mut()?.dequeue(cx)
    }
    fn next_wakeup(&self) -> Option<Instant> {
        self.inner.as_ref()?.next_wakeup()
    }
    fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |q| q.len())
    }
    fn bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, |q| q.bytes())
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        if let Some(q) = &mut self.inner {
            q.purge(cx, cause);
        }
    }
    fn aqm_stats(&self) -> Option<AqmStats> {
        match (self.inner.as_ref().and_then(|q| q.aqm_stats()), &self.past) {
            (Some(now), Some(past)) => Some(add_counters(now, past)),
            (Some(now), None) => Some(now),
            (None, Some(past)) => Some(AqmStats {
                sparse_flows: 0,
                bulk_flows: 0,
                decaying_flows: 0,
                active_flows: 0,
                src_hosts: 0,
                dst_hosts: 0,
                ..*past
            }),
            (None, None) => None,
        }
    }
    fn release(&mut self) -> bool {
        match &self.inner {
            Some(q) if q.is_empty() => {
                if let Some(s) = q.aqm_stats() {
                    self.past = Some(match &self.past {
                        Some(p) => add_counters(s, p),
                        None => s,
                    });
                }
                self.inner = None;
                true
            }
            _ => false,
        }
    }
    fn lazy_built(&self) -> Option<bool> {
        Some(self.inner.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::fq::FqConfig;
    use crate::Pool;

    fn packet(cx: &mut Ctx<'_>) -> PktId {
        let p = cx.pool.alloc().expect("slot");
        cx.pool.meta_mut(p).len = 100;
        p
    }

    fn lazy_fq() -> Lazy {
        let cfg = FqConfig::default();
        Lazy::new(Box::new(move || cfg.build(7).expect("valid")))
    }

    #[test]
    fn builds_on_first_packet_and_frees_only_when_empty() {
        let mut pool = Pool::new(16, 0);
        let mut rng = crate::Rng::new(1);
        let mut dropped = Vec::new();
        let mut q = lazy_fq();
        assert!(!q.is_built() && q.is_empty() && q.aqm_stats().is_none());
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let p = packet(&mut cx);
        q.enqueue(p, &mut cx).expect("room");
        assert!(q.is_built() && q.len() == 1 && q.builds() == 1);
        assert!(!q.release(), "a queue holding a packet is kept");
        assert_eq!(q.dequeue(&mut cx), Some(p));
        cx.pool.free(p);
        let before = q.aqm_stats().expect("fq counts").new_flows;
        assert_eq!(before, 1);
        assert!(q.release());
        assert!(!q.is_built() && q.len() == 0 && q.dequeue(&mut cx).is_none());
        // the counters survive the release, the gauges read 0
        let s = q.aqm_stats().expect("kept");
        assert_eq!((s.new_flows, s.active_flows), (1, 0));
        // and add up across lives
        let p = packet(&mut cx);
        q.enqueue(p, &mut cx).expect("room");
        assert_eq!(q.builds(), 2);
        assert_eq!(q.aqm_stats().expect("fq").new_flows, 2);
        q.purge(&mut cx, DropCause::Reload);
        assert!(q.is_empty() && q.release());
    }
}
