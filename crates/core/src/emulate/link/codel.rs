//! CoDel on the emulated link's queue (`mm-link --…-queue=codel target=… interval=…`;
//! RFC 8289, weir's [`crate::aqm::Codel`], the same state machine as a class queue's).
//!
//! The link computes each frame's serialisation when it arrives (see the parent module);
//! a frame leaves the queue when its serialisation starts. CoDel judges every frame at
//! that instant — its dequeue — with what the queue holds then: the sojourn is `start −
//! arrival`, the backlog behind it the frames that had arrived by `start`. The link
//! judges lazily but in virtual time: whenever it is called at `now`, every frame that has
//! started by `now` is judged at its own start, in order (so a late wake-up changes
//! nothing), and the next frame's start is a wake-up ([`EmuLink::head_release`]). A
//! dropped frame gives its serialisation time to the frames behind it (they are serialised
//! again from its start, as a drop-head queue does), and the next one is judged at the
//! same instant — the loop of `codel_dequeue`. A marked frame (ECN) is sent with CE.
//!
//! Invariants: frames are judged once each, in start order; a frame leaves the backlog
//! (retires) only once judged; drops are counted in `aqm_drops` and `drops[Aqm]`, marks
//! in `aqm_marks`. Needs a rate and the FIFO delay line (`EmuConfig::validate`).

use super::EmuLink;
use crate::aqm::{mark_signal, Aqm, AqmParams, Codel, Delivered, Head, Verdict};
use crate::emulate::EmuConfig;
use crate::qdisc::{Ctx, DropCause};
use crate::time::{Duration, Instant};

impl EmuLink {
    /// The CoDel state a configuration asks for.
    pub(super) fn codel_for(cfg: &EmuConfig) -> Option<(Codel, AqmParams)> {
        cfg.codel.map(|q| {
            let p = AqmParams {
                target: q.target,
                interval: q.interval,
                mtu: cfg.mtu,
                mtu_time: Duration::ZERO,
                ecn: q.ecn,
                ..AqmParams::default()
            };
            (Codel::default(), p)
        })
    }

    /// When the next frame is due to be judged (its start), if one waits.
    #[inline]
    pub(super) fn judge_due(&self) -> Option<u64> {
        self.codel.as_ref()?;
        self.backlog.get(self.judged).map(|tx| tx.start)
    }

    /// Judge every frame whose serialisation has started by `now`, each at its start.
    pub(super) fn judge_started(&mut self, now: u64, cx: &mut Ctx<'_>) {
        let Some((mut codel, params)) = self.codel.take() else {
            return;
        };
        while let Some(tx) = self.backlog.get(self.judged) {
            if tx.start > now {
                break;
            }
            let (t, arrival) = (tx.start, tx.arrival);
            // the frames behind it that had arrived by its start
            let behind: u64 = self
                .backlog
                .iter()
                .skip(self.judged + 1)
                .filter(|b| b.arrival <= t)
                .map(|b| b.len as u64)
                .sum();
            let head = Head {
                sojourn: Duration(t - arrival),
                flow_backlog: behind,
                total_backlog: behind,
            };
            let base = self.line.len() - self.backlog.len();
            let id = self.line[base + self.judged].1;
            let len = tx.len;
            let mut marked = false;
            let verdict = codel.judge(&params, head, Instant(t), cx.rng, || {
                marked = matches!(mark_signal(params.ecn, cx.pool, id), Some(Delivered::Ce));
                marked
            });
            match verdict {
                Verdict::Pass => self.judged += 1,
                Verdict::Mark => {
                    self.counters.aqm_marks.add(len);
                    self.judged += 1;
                }
                Verdict::Drop => {
                    if !self.evict(self.judged, t, DropCause::Aqm, cx) {
                        // (cannot happen: the frame is in the backlog) judge it passed
                        self.judged += 1;
                    }
                    // the next frame now starts at `t`; none: the queue is empty
                    if self.backlog.get(self.judged).is_none_or(|n| n.start > t) {
                        codel.on_empty(&params, Instant(t));
                    }
                }
            }
        }
        self.codel = Some((codel, params));
    }
}
