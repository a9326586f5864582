//! The flow queue's ACK filter: CAKE's `cake_ack_filter` where `cake_enqueue` calls it
//! (Linux `net/sched/sch_cake.c`; Høiland-Jørgensen, Täht, Morton, "Piece of CAKE",
//! IEEE LANMAN 2018, §III-D). The rules (which queued pure ACK a new segment makes
//! redundant) are [`crate::tcp::ack_filter`]'s; this file is the queue's side.
//!
//! **Parameter** `FqConfig::ack_filter` (the policy's `ack_filter`): `off` (default;
//! CAKE's `no-ack-filter`), `on` (`ack-filter`), `aggressive` (`ack-filter-aggressive`).
//!
//! **Where and what.** Right after the arrival joins its flow's queue, before the limits
//! are enforced, when the mode is not `off` and the queue holds another packet besides
//! the arrival (CAKE's `flow->head == flow->tail` test; an arrival alone in its queue has
//! nothing to filter). The arrival is the trigger: the rules read the flow's other
//! packets head to tail and name at most one pure ACK of the trigger's connection that
//! it makes redundant, and [`Fq::unlink_after`] takes that one out of the queue — each
//! queued packet is named by its predecessor, so [`crate::PktQueue::remove_after`]
//! removes it in O(1) — and hands it back as dropped with [`DropCause::AckFilter`].
//! As in CAKE outside its ingress mode: the dropped ACK's bytes leave the flow's backlog
//! and are not charged to its deficit, its AQM is not told (not an overflow), the
//! arrival itself is never dropped, and one arrival drops at most one ACK. The packets
//! of colliding flows (or of one host's flows in a host-keyed mode) share a queue but
//! never filter each other: the rules compare the connection. A frame whose headers do
//! not parse is neither a trigger nor ever dropped (so the simulator's frameless packets
//! are left alone).
//!
//! **Statistics**: `AqmStats::ack_drops` (CAKE's per-tin `ack_drops`); [`crate::Counted`]
//! counts the same packets as later drops under `ack_filter`, so its identities hold.
//!
//! **Cost.** Filter off: one test of the mode per arrival (the filter is out of line).
//! On: the queue length test, then a few loads of the arrival's frame
//! ([`may_trigger_frame`]: TCP, ACK set, SYN clear) before any header is checked; for a
//! trigger, its headers and options once, then each queued packet's headers up to its
//! options until the second eligible ACK (mode `on`) or the tail: in a queue of one
//! connection's pure ACKs, two packets. No allocation.

use super::Fq;
use crate::aqm::Aqm;
use crate::pool::{PktId, Pool};
use crate::qdisc::{Ctx, DropCause};
use crate::tcp::ack_filter::{may_trigger_frame, Trigger};

impl<A: Aqm> Fq<A> {
    /// CAKE's ACK filter on flow `i`, whose queue ends with the arrival `pkt` and holds
    /// at least one packet before it (see the module comment). Out of line: `enqueue`
    /// keeps its size when the filter is off.
    #[inline(never)]
    pub(super) fn ack_filter(&mut self, i: u32, pkt: PktId, cx: &mut Ctx<'_>) {
        /// The name of the head: it has no predecessor.
        const HEAD: usize = usize::MAX;
        let pool: &Pool = cx.pool;
        let frame = pool.data(pkt);
        if !may_trigger_frame(frame) {
            return;
        }
        let Some(trigger) = Trigger::of(frame) else {
            return;
        };
        let q = &self.flows[i as usize].q;
        // the packets before the arrival, each named by its predecessor
        let mut prev = HEAD;
        let queued = q.iter(pool).take(q.len() - 1).map(|p| {
            let named = (prev, pool.data(p));
            prev = p.0 as usize;
            named
        });
        let Some(before) = trigger.find_redundant(self.cfg.ack_filter, queued) else {
            return;
        };
        let before = (before != HEAD).then_some(PktId(before as u32));
        if self
            .unlink_after(i, before, cx, DropCause::AckFilter)
            .is_some()
        {
            self.stats.ack_drops += 1;
        }
    }
}
