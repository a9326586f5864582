//! The drop-head queue (`mm-link --…-queue=drophead`): a full queue admits the arrival and
//! drops the packet that waited longest.
//!
//! The link computes each frame's serialisation when it arrives (see the parent module),
//! so dropping a waiting frame is a rewrite of the schedule behind it: the frames after it
//! start earlier by its transmission time (with a varying capacity, serialised again from
//! the cursor it started at), and their release times move with them, each keeping its
//! delay and jitter offset (`release − end`, which includes any wait behind an earlier
//! release in the FIFO delay line). Cost: one pass over the waiting frames per drop;
//! needs the FIFO delay line (`reorder = false`, checked by `EmuConfig::validate`).
//!
//! Invariants: after a drop, every waiting frame starts when the one before it ends (they
//! were back to back and still are), no frame's start moves later, release times stay
//! non-decreasing, and the counters' identities hold (the dropped frame counts as
//! enqueued and `dropped_later`, cause the limit it broke, and as a queue drop).

use super::{charged, EmuLink, LinkEvent};
use crate::qdisc::{Ctx, DropCause};

impl EmuLink {
    /// Drop the oldest waiting frame at `now` (after `retire(now)`) for `cause`; false when
    /// no frame waits (the arrival is then refused).
    pub(super) fn evict_head(&mut self, now: u64, cause: DropCause, cx: &mut Ctx<'_>) -> bool {
        // the frame in transmission (if any) is the backlog's front; the waiting ones follow
        let h = match self.backlog.front() {
            Some(tx) if tx.start <= now => 1,
            Some(_) => 0,
            None => return false,
        };
        self.evict(h, now, cause, cx)
    }

    /// Drop backlog frame `h` (not yet in transmission) at `now` for `cause`, the frames
    /// behind it serialised again from its start; false when there is no such frame.
    pub(super) fn evict(&mut self, h: usize, now: u64, cause: DropCause, cx: &mut Ctx<'_>) -> bool {
        let Some(rate) = self.rate else {
            return false;
        };
        if self.cfg.reorder || h >= self.backlog.len() || self.backlog.len() > self.line.len() {
            return false;
        }
        // the backlog's frames are the delay line's last ones, in the same order (checked:
        // a reload that turned reordering off may have sorted the line otherwise)
        let base = self.line.len() - self.backlog.len();
        if self.line[base + h].1 != self.backlog[h].id {
            return false;
        }
        let Some(gone) = self.backlog.remove(h) else {
            return false;
        };
        if h < self.judged {
            self.judged -= 1;
        }
        let Some((_, id)) = self.line.remove(base + h) else {
            return false;
        };
        self.backlog_bytes -= gone.len as u64;
        self.held_bytes = self.held_bytes.saturating_sub(gone.len as u64);
        let q = &mut self.counters.queue_delay;
        q.frames = q.frames.saturating_sub(1);
        q.sum_ns = q
            .sum_ns
            .saturating_sub(gone.start.saturating_sub(gone.arrival));
        // serialise the frames behind it again, from where it started
        self.busy_ns = gone.start;
        self.busy_ps = gone.start_ps;
        if let Some((_, cursor, _)) = &mut self.varying {
            *cursor = gone.cursor.clone();
        }
        let mut prev = if base + h > 0 {
            self.line[base + h - 1].0
        } else {
            0
        };
        for j in h..self.backlog.len() {
            let (old_start, old_end, len, arrival) = {
                let tx = &self.backlog[j];
                (tx.start, tx.end, tx.len, tx.arrival)
            };
            let offset = self.line[base + j].0.saturating_sub(old_end);
            // never before the frame came (arrival times may run a little backwards)
            let (b_ns, b_ps) = if (arrival, 0) > (self.busy_ns, self.busy_ps) {
                (arrival, 0)
            } else {
                (self.busy_ns, self.busy_ps)
            };
            let (s_ns, s_ps, cursor) = self.place(rate, b_ns, b_ps, len);
            let end = self.busy_ns.saturating_add((self.busy_ps > 0) as u64);
            let tx = &mut self.backlog[j];
            tx.start = s_ns;
            tx.start_ps = s_ps;
            tx.end = end;
            tx.cursor = cursor;
            let q = &mut self.counters.queue_delay;
            q.sum_ns = q.sum_ns.saturating_sub(old_start.saturating_sub(s_ns));
            let release = end.saturating_add(offset).max(prev);
            self.line[base + j].0 = release;
            prev = release;
        }
        self.last_release = self.line.back().map_or(0, |e| e.0);
        let len = gone.len;
        self.stats.dropped_later.add(len);
        self.stats.drops[cause.index()].add(len);
        if cause == DropCause::Aqm {
            self.counters.aqm_drops.add(len);
        } else {
            self.counters.queue_drops.add(len);
        }
        self.log_event(|cfg| LinkEvent::Drop {
            ns: now,
            bytes: charged(cfg, len),
        });
        cx.drop_later(id, cause);
        true
    }
}
