//! CoDel, "Controlled Delay" (RFC 8289; Nichols & Jacobson, ACM Queue 2012), as the
//! per-packet state machine of Linux `include/net/codel_impl.h` (`codel_should_drop`,
//! `codel_dequeue`), cut so that a queue calls it once per packet it takes from its head.
//!
//! # The algorithm (RFC 8289 §5)
//! * **Above target.** A packet is *above* when its sojourn time is at least `target` and
//!   more than one MTU stays queued behind it (`total_backlog > mtu`: on a slow link the
//!   last packets must stay to keep it busy). The first above packet starts the clock:
//!   `first_above_time = now + interval`. A packet below target resets it.
//! * **Entering the dropping state.** An above packet at `now > first_above_time` (the
//!   sojourn has been above target for a whole interval; Linux's strict `>`, the RFC writes
//!   `>=`) is signalled (marked or dropped) and CoDel enters the dropping state. Its count
//!   starts at 1, or — if the previous dropping state ended recently, `now - drop_next <
//!   16 × interval`, and signalled more than once since it began, `delta = count -
//!   lastcount > 1` — at `delta` (the drop rate that controlled the queue last time is a
//!   good start). RFC 8289 §5.5 writes exactly this rule and says it is Linux's; weir
//!   follows it. The next signal is due at `drop_next = now + interval / sqrt(count)`.
//! * **In the dropping state.** A packet below target ends it. Otherwise, once `now >=
//!   drop_next`: `count += 1` and the packet is signalled; after a **mark** the next
//!   signal is scheduled `drop_next += interval / sqrt(count)` and the packet is sent;
//!   after a **drop** the next packet is judged at the same `now` — if it is below target
//!   the dropping state ends, otherwise the next signal is scheduled the same way and, if
//!   it is already due (a large backlog), that packet is signalled too (Linux's `while`).
//! * After the entering drop the next packet is sent whatever its sojourn (Linux and the
//!   RFC dequeue it and return it).
//! * **Empty.** A queue found empty ends the dropping state (`codel_dequeue` on an empty
//!   queue); an empty queue after a drop is also "below target" (`first_above_time = 0`).
//!
//! `Aqm::judge` keeps which of the two follow-ups a [`Verdict::Drop`] owes (`after`), so
//! the queue only has to call `judge` on the next head or `on_empty` — the same sequence
//! of decisions as `codel_dequeue`'s loop (unit-tested against hand-computed schedules).
//!
//! # Differences from Linux, on purpose
//! * Times are full `u64` nanoseconds (Linux keeps `u32` units of 1.024 µs).
//! * 1/sqrt(count) comes from COBALT's table and Newton step ([`super::inv_sqrt`], Q0.32)
//!   rather than Linux CoDel's 16-bit single step, so the schedule is `interval /
//!   sqrt(count)` to within 10⁻⁵ from the first count on (Linux's single step from
//!   count 1 gives 1/sqrt(4) at count 2).
//! * `count` saturates instead of wrapping; a limit drop adds 1 to it
//!   ([`Aqm::on_overflow`], `fq_codel_drop`'s `count += i`) for the FIFO as for flows.
//! * No `ce_threshold` marking.
//!
//! # State
//! 32 bytes per queue: `count`, `lastcount`, `rec_inv_sqrt` (Q0.32), `first_above_time`,
//! `drop_next` (ns; `first_above_time == 0` means below target), `dropping`, `after`.
//! Invariants: `dropping` implies `count >= 1`; `after != None` only between a `Drop`
//! verdict and the next `judge`/`on_empty`.

use super::{control_law, inv_sqrt, Aqm, AqmParams, Head, Verdict};
use crate::rng::Rng;
use crate::time::Instant;

/// What a [`Verdict::Drop`] left pending for the next call.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
enum After {
    #[default]
    None,
    /// The drop that entered the dropping state: the next packet is sent.
    EnterDrop,
    /// A drop in the dropping state: the next packet decides whether it goes on.
    LoopDrop,
}

/// CoDel state of one queue (see the module comment).
#[derive(Clone, Debug, Default)]
pub struct Codel {
    count: u32,
    lastcount: u32,
    rec_inv_sqrt: u32,
    first_above_time: u64,
    drop_next: u64,
    dropping: bool,
    after: After,
}

impl Codel {
    /// Signals since the dropping state was entered (plus carried-over ones).
    pub fn count(&self) -> u32 {
        self.count
    }
    /// Whether the dropping state is on.
    pub fn dropping(&self) -> bool {
        self.dropping
    }
    /// When the next signal is due (ns), meaningful while dropping.
    pub fn drop_next(&self) -> Instant {
        Instant(self.drop_next)
    }

    /// `codel_should_drop`: is the packet above target for an interval already?
    #[inline]
    fn above(&mut self, p: &AqmParams, head: &Head, now: u64) -> bool {
        if head.sojourn < p.target || head.total_backlog <= p.mtu as u64 {
            self.first_above_time = 0;
            return false;
        }
        if self.first_above_time == 0 {
            self.first_above_time = now + p.interval.0;
            false
        } else {
            now > self.first_above_time
        }
    }

    /// The dropping state is (re-)entered at `now` (the count rule of the module comment).
    fn enter(&mut self, p: &AqmParams, now: u64) {
        self.dropping = true;
        let delta = self.count.wrapping_sub(self.lastcount);
        let recent = (now as i128 - self.drop_next as i128) < 16 * p.interval.0 as i128;
        if delta > 1 && recent {
            self.count = delta;
            self.rec_inv_sqrt = inv_sqrt(delta, self.rec_inv_sqrt);
        } else {
            self.count = 1;
            self.rec_inv_sqrt = u32::MAX;
        }
        self.lastcount = self.count;
        self.drop_next = control_law(now, p.interval, self.rec_inv_sqrt);
    }

    /// A signal inside the dropping state (one turn of `codel_dequeue`'s `while`).
    fn signal(&mut self, p: &AqmParams, mark: impl FnOnce() -> bool) -> Verdict {
        self.count = self.count.saturating_add(1);
        self.rec_inv_sqrt = inv_sqrt(self.count, self.rec_inv_sqrt);
        if p.ecn && mark() {
            self.drop_next = control_law(self.drop_next, p.interval, self.rec_inv_sqrt);
            Verdict::Mark
        } else {
            self.after = After::LoopDrop;
            Verdict::Drop
        }
    }
}

impl Aqm for Codel {
    fn judge(
        &mut self,
        p: &AqmParams,
        head: Head,
        now: Instant,
        _rng: &mut Rng,
        mark: impl FnOnce() -> bool,
    ) -> Verdict {
        let now = now.0;
        let above = self.above(p, &head, now);
        match core::mem::take(&mut self.after) {
            After::EnterDrop => return Verdict::Pass,
            After::LoopDrop => {
                if !above {
                    self.dropping = false;
                    return Verdict::Pass;
                }
                self.drop_next = control_law(self.drop_next, p.interval, self.rec_inv_sqrt);
                return if now >= self.drop_next {
                    self.signal(p, mark)
                } else {
                    Verdict::Pass
                };
            }
            After::None => {}
        }
        if self.dropping {
            if !above {
                self.dropping = false;
                Verdict::Pass
            } else if now >= self.drop_next {
                self.signal(p, mark)
            } else {
                Verdict::Pass
            }
        } else if above {
            let marked = p.ecn && mark();
            self.enter(p, now);
            if marked {
                Verdict::Mark
            } else {
                self.after = After::EnterDrop;
                Verdict::Drop
            }
        } else {
            Verdict::Pass
        }
    }

    fn on_empty(&mut self, _p: &AqmParams, _now: Instant) {
        match core::mem::take(&mut self.after) {
            // `codel_should_drop(NULL)`: an empty queue is below target
            After::EnterDrop => self.first_above_time = 0,
            After::LoopDrop => {
                self.first_above_time = 0;
                self.dropping = false;
            }
            // `codel_dequeue` on an empty queue
            After::None => self.dropping = false,
        }
    }

    fn on_overflow(&mut self, _p: &AqmParams, _now: Instant) {
        self.count = self.count.saturating_add(1);
    }

    #[inline]
    fn at_rest(&self, _now: Instant) -> bool {
        // fq_codel forgets an empty flow at once; its state waits in the bucket
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    const MS: u64 = 1_000_000;

    fn params() -> AqmParams {
        AqmParams {
            ecn: false,
            ..AqmParams::default()
        }
    }

    /// Judge a packet with `sojourn_ms` and 10 full frames behind it at `t_ms`.
    fn judge(c: &mut Codel, p: &AqmParams, t_ns: u64, sojourn_ms: u64) -> Verdict {
        let head = Head {
            sojourn: Duration(sojourn_ms * MS),
            flow_backlog: 15_140,
            total_backlog: 15_140,
        };
        c.judge(p, head, Instant(t_ns), &mut Rng::new(1), || true)
    }

    /// A CoDel (ECN off) that entered the dropping state at 101 ms (above target since
    /// 0 ms) and sent the packet after the entering drop.
    fn dropping_since_101ms(p: &AqmParams) -> Codel {
        let mut c = Codel::default();
        judge(&mut c, p, 0, 6);
        assert_eq!(judge(&mut c, p, 101 * MS, 6), Verdict::Drop);
        assert_eq!(judge(&mut c, p, 101 * MS, 6), Verdict::Pass);
        assert!(c.dropping());
        c
    }

    /// RFC 8289 §3: the sojourn must stay above target for a whole interval before the
    /// first signal; then signals come `interval / sqrt(count)` apart: 100 ms after the
    /// first one (count 2: 70.71 ms), then 57.74 ms, 50 ms. Drops here (ECN off); each
    /// dropped packet's successor is judged at the same instant and sent (still above,
    /// not yet due).
    #[test]
    fn hand_computed_drop_schedule() {
        let p = params();
        let mut c = Codel::default();
        // t = 0: first packet above target (6 ms): the clock starts, first_above = 100 ms
        assert_eq!(judge(&mut c, &p, 0, 6), Verdict::Pass);
        assert_eq!(c.first_above_time, 100 * MS);
        // still above at 50 ms and at exactly 100 ms (Linux: strictly after)
        assert_eq!(judge(&mut c, &p, 50 * MS, 8), Verdict::Pass);
        assert_eq!(judge(&mut c, &p, 100 * MS, 8), Verdict::Pass);
        // 100 ms + 1 ns: enter the dropping state, count 1, next signal 100 ms later
        let t0 = 100 * MS + 1;
        assert_eq!(judge(&mut c, &p, t0, 8), Verdict::Drop);
        assert!(c.dropping());
        assert_eq!(c.count(), 1);
        // 1 - 2^-32 of 100 ms: 99,999,999.98 ns
        assert_eq!(c.drop_next().0, t0 + 99_999_999);
        // the next head is sent after the entering drop
        assert_eq!(judge(&mut c, &p, t0, 8), Verdict::Pass);
        // not due yet
        assert_eq!(judge(&mut c, &p, t0 + 99 * MS, 8), Verdict::Pass);
        // due: count 2, next one interval/sqrt(2) = 70.710678 ms later
        let t1 = t0 + 99_999_999;
        assert_eq!(judge(&mut c, &p, t1, 8), Verdict::Drop);
        assert_eq!(c.count(), 2);
        // the follow-up: still above, schedule moves on, not due: sent
        assert_eq!(judge(&mut c, &p, t1, 8), Verdict::Pass);
        let t2 = c.drop_next().0;
        assert!((t2 - t1).abs_diff(70_710_678) <= 2, "{}", t2 - t1);
        assert_eq!(judge(&mut c, &p, t2, 8), Verdict::Drop);
        assert_eq!(judge(&mut c, &p, t2, 8), Verdict::Pass);
        let t3 = c.drop_next().0;
        assert!((t3 - t2).abs_diff(57_735_027) <= 2, "{}", t3 - t2);
        assert_eq!(judge(&mut c, &p, t3, 8), Verdict::Drop);
        assert_eq!(judge(&mut c, &p, t3, 8), Verdict::Pass);
        let t4 = c.drop_next().0;
        assert!((t4 - t3).abs_diff(50_000_000) <= 2, "{}", t4 - t3);
        assert_eq!(c.count(), 4);
    }

    /// A packet below target ends the dropping state; so does one with at most one MTU
    /// behind it, and an empty queue.
    #[test]
    fn leaves_dropping_below_target_below_one_mtu_and_when_empty() {
        let p = params();
        let mut c = dropping_since_101ms(&p);
        // 4 ms < target
        assert_eq!(judge(&mut c, &p, 300 * MS, 4), Verdict::Pass);
        assert!(!c.dropping());
        assert_eq!(c.first_above_time, 0);

        let mut c = dropping_since_101ms(&p);
        let head = Head {
            sojourn: Duration(50 * MS),
            flow_backlog: 1514,
            total_backlog: 1514,
        };
        let v = c.judge(&p, head, Instant(300 * MS), &mut Rng::new(1), || true);
        assert_eq!(v, Verdict::Pass);
        assert!(!c.dropping(), "one MTU left: below target");

        let mut c = dropping_since_101ms(&p);
        c.on_empty(&p, Instant(300 * MS));
        assert!(!c.dropping());
    }

    /// A drop whose successor is below target ends the dropping state at once; with an
    /// empty queue behind it too.
    #[test]
    fn the_packet_after_a_drop_decides() {
        let p = params();
        let mut c = dropping_since_101ms(&p);
        let due = c.drop_next().0;
        assert_eq!(judge(&mut c, &p, due, 6), Verdict::Drop);
        assert_eq!(judge(&mut c, &p, due, 1), Verdict::Pass);
        assert!(!c.dropping());
        // the schedule did not move (Linux: only a still-above successor schedules)
        assert_eq!(c.drop_next().0, due);

        let mut c = dropping_since_101ms(&p);
        let due = c.drop_next().0;
        assert_eq!(judge(&mut c, &p, due, 6), Verdict::Drop);
        c.on_empty(&p, Instant(due));
        assert!(!c.dropping());
    }

    /// A backlog so old that the next signal is due at once: Linux's `while` drops
    /// packet after packet at the same instant until the schedule catches up with `now`.
    #[test]
    fn a_late_schedule_drops_in_a_row() {
        let p = params();
        let mut c = dropping_since_101ms(&p);
        // at 351 ms the schedule is far behind: signals were due at 201 ms (count 2),
        // 201 + 70.7 = 271.7 ms (count 3), + 57.7 = 329.5 ms (count 4); the next,
        // + 50 = 379.5 ms, is not
        let now = 351 * MS;
        let mut drops = 0;
        while judge(&mut c, &p, now, 30) == Verdict::Drop {
            drops += 1;
        }
        assert_eq!(drops, 3);
        assert_eq!(c.count(), 4);
        assert!(c.drop_next().0 > now);
    }

    /// ECN: the signal is a mark; the packet is sent and the next signal scheduled at
    /// once (no follow-up judged at the same instant).
    #[test]
    fn marks_instead_of_drops() {
        let p = AqmParams::default();
        assert!(p.ecn);
        let mut c = Codel::default();
        judge(&mut c, &p, 0, 6);
        assert_eq!(judge(&mut c, &p, 101 * MS, 6), Verdict::Mark);
        assert!(c.dropping());
        let due = c.drop_next().0;
        assert_eq!(judge(&mut c, &p, due, 6), Verdict::Mark);
        assert_eq!(c.count(), 2);
        assert!(c.drop_next().0 > due);
        // the mark closure refusing (not ECT) turns the signal into a drop
        let head = Head {
            sojourn: Duration(6 * MS),
            flow_backlog: 15_140,
            total_backlog: 15_140,
        };
        let due = c.drop_next().0;
        let v = c.judge(&p, head, Instant(due), &mut Rng::new(1), || false);
        assert_eq!(v, Verdict::Drop);
    }

    /// Re-entering within 16 intervals of the last schedule starts from the count that
    /// controlled the queue (`delta = count - lastcount` when > 1); later, from 1.
    #[test]
    fn count_carries_over_within_16_intervals() {
        let p = params();
        let mut c = dropping_since_101ms(&p);
        // three more drops: count 4, lastcount 1
        for _ in 0..3 {
            let due = c.drop_next().0;
            assert_eq!(judge(&mut c, &p, due, 6), Verdict::Drop);
            judge(&mut c, &p, due, 6);
        }
        assert_eq!((c.count, c.lastcount), (4, 1));
        let last = c.drop_next().0;
        // below target: out of the dropping state
        judge(&mut c, &p, last, 1);
        assert!(!c.dropping());
        // above again for an interval, re-entering 1 s (< 1.6 s) after drop_next
        let t = last + 900 * MS;
        judge(&mut c, &p, t, 6);
        assert_eq!(judge(&mut c, &p, t + 101 * MS, 6), Verdict::Drop);
        assert_eq!(c.count(), 3, "delta = 4 - 1");
        assert_eq!(c.lastcount, 3);
        // interval / sqrt(3)
        let gap = c.drop_next().0 - (t + 101 * MS);
        assert!(gap.abs_diff(57_735_027) <= 2, "{gap}");

        // the same after more than 16 intervals: count 1
        let mut c2 = c.clone();
        judge(&mut c2, &p, t + 101 * MS, 6);
        for _ in 0..2 {
            let due = c2.drop_next().0;
            judge(&mut c2, &p, due, 6);
            judge(&mut c2, &p, due, 6);
        }
        assert!(c2.count() - c2.lastcount > 1);
        let last2 = c2.drop_next().0;
        judge(&mut c2, &p, last2, 1);
        let t = last2 + 1700 * MS;
        judge(&mut c2, &p, t, 6);
        assert_eq!(judge(&mut c2, &p, t + 101 * MS, 6), Verdict::Drop);
        assert_eq!(c2.count(), 1);
    }

    /// A limit drop strengthens the next dropping state (fq_codel's `count += i`).
    #[test]
    fn overflow_bumps_count() {
        let p = params();
        let mut c = Codel::default();
        c.on_overflow(&p, Instant::ZERO);
        c.on_overflow(&p, Instant::ZERO);
        assert_eq!(c.count(), 2);
        assert!(c.at_rest(Instant::ZERO));
        // entering 1 ms later: delta 2 > 1 and drop_next (0) within 16 intervals
        judge(&mut c, &p, MS, 6);
        assert_eq!(judge(&mut c, &p, 102 * MS, 6), Verdict::Drop);
        assert_eq!(c.count(), 2);
    }
}
