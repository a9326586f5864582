//! COBALT, "CoDel + BLUE Alternate" (Linux `net/sched/sch_cake.c`: `cobalt_should_drop`,
//! `cobalt_queue_full`, `cobalt_queue_empty`, `cobalt_invsqrt`): CoDel's sojourn-time
//! control law for flows that answer congestion signals, run beside BLUE (Feng et al.,
//! "BLUE: A New Class of Active Queue Management Algorithms", 1999), a drop probability
//! that rises while the queue overflows and falls while it runs empty, for flows that do
//! not.
//!
//! # Per packet ([`Aqm::judge`], `cobalt_should_drop`)
//! * **Over target**: `sojourn > target` and `sojourn > 4 × mtu_time` (at a low rate one
//!   MTU takes long: the target must not be below a few serialisation times). CAKE's
//!   third term, `sojourn > 2 × mtu_time × bulk_flows`, is non-zero only in its `ingress`
//!   mode; weir's queues are egress queues, so it is left out.
//! * Over target and not yet dropping: enter the dropping state with the first signal
//!   due one interval later (`drop_next = now + interval / sqrt(count)`, count ≥ 1). One
//!   field, `drop_next`, is both the delay before the first signal and the signalling
//!   schedule — COBALT's simplification of CoDel's `first_above_time`.
//! * Not over target: the dropping state ends.
//! * Dropping and `now >= drop_next` (with `count > 0`): signal — mark when ECN is on and
//!   the packet ECN-capable, drop otherwise — then `count += 1` and `drop_next +=
//!   interval / sqrt(count)`.
//! * Otherwise, while a signal was due (`count > 0`, `now >= drop_next`): `count -= 1`
//!   and `drop_next += interval / sqrt(count)` (the count decays by one per schedule step
//!   that passed without a signal).
//! * **BLUE**: with probability `p_drop` the packet is dropped as well (never marked:
//!   "lack of ECN is deliberate", it is aimed at flows that ignore marks).
//! * `drop_next` doubles as an activity timeout: with `count == 0` it is set to
//!   `now + interval`; when overdue and the packet is sent, to `now`.
//! * The last packet of a queue (`flow_backlog == 0`) is never dropped (`cake_dequeue`:
//!   "Last packet in queue may be marked, shouldn't be dropped"): a drop verdict on it
//!   becomes `Pass` (or `Mark` if marked).
//!
//! A packet BLUE drops anyway is not offered to the `mark` closure (CAKE marks it and
//! drops it; the outcome on the wire is the same and marks count only sent packets).
//!
//! # Hooks
//! * [`Aqm::on_overflow`] (`cobalt_queue_full`): if more than `target` passed since BLUE
//!   last moved, `p_drop += p_inc` (saturating at 1); enter the dropping state with a
//!   signal due now (`count ≥ 1`).
//! * [`Aqm::on_empty`] (`cobalt_queue_empty`): if `p_drop > 0` and more than `target`
//!   passed since BLUE last moved, `p_drop -= p_dec` (not below 0); leave the dropping
//!   state; if a signal was due, `count -= 1` and the schedule moves one step.
//! * [`Aqm::at_rest`]: `p_drop == 0`, `count == 0` and `now >= drop_next`; until then a
//!   flow queue keeps an emptied flow in its decaying list (CAKE's `decaying_flows`).
//!
//! # Parameters
//! `target`, `interval`, `mtu_time`, `ecn`, `p_inc` (default 2⁻⁸), `p_dec` (default
//! 2⁻¹²) from [`AqmParams`] (CAKE's `cake_set_rate` values, [`AqmParams::for_rate`]).
//!
//! # State and invariants
//! 32 bytes: `count`, `rec_inv_sqrt` (Q0.32, 1/sqrt(count)), `drop_next`, `blue_timer`
//! (ns), `p_drop` (Q0.32), `dropping`. `rec_inv_sqrt` is 1.0 at count 0 and 1 (CAKE's
//! table; CAKE's zero-initialised state has 0 there until the first update, so a fresh
//! flow's very first dropping state would signal at once — weir starts from 1.0). Times
//! are compared as signed differences, as `ktime_sub`.

use super::{control_law, inv_sqrt, Aqm, AqmParams, Head, Verdict};
use crate::rng::Rng;
use crate::time::Instant;

/// COBALT state of one queue (see the module comment).
#[derive(Clone, Debug)]
pub struct Cobalt {
    count: u32,
    rec_inv_sqrt: u32,
    drop_next: u64,
    blue_timer: u64,
    p_drop: u32,
    dropping: bool,
}

impl Default for Cobalt {
    fn default() -> Self {
        Cobalt {
            count: 0,
            rec_inv_sqrt: u32::MAX,
            drop_next: 0,
            blue_timer: 0,
            p_drop: 0,
            dropping: false,
        }
    }
}

/// `a - b` as a signed number of nanoseconds (`ktime_sub`).
#[inline]
fn since(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

impl Cobalt {
    /// CoDel's count.
    pub fn count(&self) -> u32 {
        self.count
    }
    /// BLUE's drop probability, Q0.32.
    pub fn p_drop(&self) -> u32 {
        self.p_drop
    }
    /// Whether the dropping state is on.
    pub fn dropping(&self) -> bool {
        self.dropping
    }
    /// When the next signal is due (ns).
    pub fn drop_next(&self) -> Instant {
        Instant(self.drop_next)
    }

    #[inline]
    fn step(&mut self, p: &AqmParams, count: u32) {
        self.count = count;
        self.rec_inv_sqrt = inv_sqrt(count, self.rec_inv_sqrt);
        self.drop_next = control_law(self.drop_next, p.interval, self.rec_inv_sqrt);
    }
}

impl Aqm for Cobalt {
    fn judge(
        &mut self,
        p: &AqmParams,
        head: Head,
        now: Instant,
        rng: &mut Rng,
        mark: impl FnOnce() -> bool,
    ) -> Verdict {
        let now = now.0;
        let sojourn = head.sojourn.0;
        let mut schedule = since(now, self.drop_next);
        let over_target = sojourn > p.target.0 && sojourn > p.mtu_time.0.saturating_mul(4);
        let next_due = self.count > 0 && schedule >= 0;
        if over_target {
            if !self.dropping {
                self.dropping = true;
                self.drop_next = control_law(now, p.interval, self.rec_inv_sqrt);
            }
            if self.count == 0 {
                self.count = 1;
            }
        } else {
            self.dropping = false;
        }
        // BLUE first, so that a packet it drops is not marked for nothing
        let blue = self.p_drop != 0 && ((rng.next_u64() >> 32) as u32) < self.p_drop;
        let last = head.flow_backlog == 0;
        let mut marked = false;
        let mut drop = blue;
        if next_due && self.dropping {
            if !blue || last {
                marked = p.ecn && mark();
            }
            drop |= !marked;
            self.step(p, self.count.saturating_add(1));
            schedule = since(now, self.drop_next);
        } else {
            let mut due = next_due;
            while due {
                self.step(p, self.count - 1);
                schedule = since(now, self.drop_next);
                due = self.count > 0 && schedule >= 0;
            }
        }
        if self.count == 0 {
            self.drop_next = now + p.interval.0;
        } else if schedule > 0 && !drop {
            self.drop_next = now;
        }
        match (drop && !last, marked) {
            (true, _) => Verdict::Drop,
            (false, true) => Verdict::Mark,
            (false, false) => Verdict::Pass,
        }
    }

    fn on_overflow(&mut self, p: &AqmParams, now: Instant) {
        let now = now.0;
        if since(now, self.blue_timer) > p.target.0 as i64 {
            self.p_drop = self.p_drop.saturating_add(p.p_inc);
            self.blue_timer = now;
        }
        self.dropping = true;
        self.drop_next = now;
        if self.count == 0 {
            self.count = 1;
        }
    }

    fn on_empty(&mut self, p: &AqmParams, now: Instant) {
        let now = now.0;
        if self.p_drop != 0 && since(now, self.blue_timer) > p.target.0 as i64 {
            self.p_drop = self.p_drop.saturating_sub(p.p_dec);
            self.blue_timer = now;
        }
        self.dropping = false;
        if self.count != 0 && since(now, self.drop_next) >= 0 {
            self.step(p, self.count - 1);
        }
    }

    #[inline]
    fn at_rest(&self, now: Instant) -> bool {
        self.p_drop == 0 && self.count == 0 && since(now.0, self.drop_next) >= 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::Rate;
    use crate::time::Duration;

    const MS: u64 = 1_000_000;

    fn head(sojourn_ms: u64) -> Head {
        Head {
            sojourn: Duration(sojourn_ms * MS),
            flow_backlog: 3_000,
            total_backlog: 3_000,
        }
    }

    fn judge(c: &mut Cobalt, p: &AqmParams, t: u64, sojourn_ms: u64, ect: bool) -> Verdict {
        c.judge(p, head(sojourn_ms), Instant(t), &mut Rng::new(9), || ect)
    }

    /// The CoDel half against `cobalt_should_drop`'s arithmetic: the first signal one
    /// interval after the sojourn went over target, then `interval / sqrt(count)` apart
    /// (70.71, 57.74, 50 ms) with the count raised after each signal; marks for ECT
    /// packets, drops for the others.
    #[test]
    fn control_law_schedule() {
        let p = AqmParams::default();
        let mut c = Cobalt::default();
        // 4 ms: not over target; count 0: drop_next is the activity timeout now + 100 ms
        assert_eq!(judge(&mut c, &p, 0, 4, true), Verdict::Pass);
        assert_eq!(c.drop_next().0, 100 * MS);
        // over target at 10 ms: dropping, count 1, first signal 100 ms later
        assert_eq!(judge(&mut c, &p, 10 * MS, 6, true), Verdict::Pass);
        assert!(c.dropping());
        assert_eq!(c.count(), 1);
        let t1 = 10 * MS + 99_999_999;
        assert_eq!(c.drop_next().0, t1);
        assert_eq!(judge(&mut c, &p, t1 - 1, 6, true), Verdict::Pass);
        // due: an ECT packet is marked, count 2, the next signal 70.71 ms later
        assert_eq!(judge(&mut c, &p, t1, 6, true), Verdict::Mark);
        assert_eq!(c.count(), 2);
        let t2 = c.drop_next().0;
        assert!((t2 - t1).abs_diff(70_710_678) <= 2, "{}", t2 - t1);
        // a not-ECT packet is dropped
        assert_eq!(judge(&mut c, &p, t2, 6, false), Verdict::Drop);
        let t3 = c.drop_next().0;
        assert!((t3 - t2).abs_diff(57_735_027) <= 2, "{}", t3 - t2);
        assert_eq!(judge(&mut c, &p, t3, 6, false), Verdict::Drop);
        let t4 = c.drop_next().0;
        assert!((t4 - t3).abs_diff(50_000_000) <= 2, "{}", t4 - t3);
        assert_eq!(c.count(), 4);
        // ECN off: the ECT packet is dropped too
        let off = AqmParams { ecn: false, ..p };
        assert_eq!(judge(&mut c, &off, t4, 6, true), Verdict::Drop);
        // a mark long after it was due: the schedule restarts from now (the activity
        // timeout's "overdue and sent")
        let late = c.drop_next().0 + 300 * MS;
        assert_eq!(judge(&mut c, &p, late, 6, true), Verdict::Mark);
        assert_eq!(c.drop_next().0, late);
    }

    /// Below target the dropping state ends and the count decays one step per control-law
    /// interval that passes (the `while next_due` loop), down to 0.
    #[test]
    fn count_decays_below_target() {
        let p = AqmParams::default();
        let mut c = Cobalt::default();
        judge(&mut c, &p, 0, 6, false);
        for _ in 0..3 {
            let due = c.drop_next().0;
            assert_eq!(judge(&mut c, &p, due, 6, false), Verdict::Drop);
        }
        assert_eq!(c.count(), 4);
        let d = c.drop_next().0; // due with count 4
                                 // below target before it is due: nothing decays, the state just stops dropping
        assert_eq!(judge(&mut c, &p, d - 1, 1, false), Verdict::Pass);
        assert!(!c.dropping());
        assert_eq!(c.count(), 4);
        // at d: one step: count 3, drop_next = d + 100/sqrt(3) = d + 57.7 ms (> now)
        assert_eq!(judge(&mut c, &p, d, 1, false), Verdict::Pass);
        assert_eq!(c.count(), 3);
        // 200 ms later: steps at d + 57.7 (count 2) and + 70.7 (count 1); the next, at
        // + 100 = d + 228.4 ms, is still ahead
        let later = d + 200 * MS;
        assert_eq!(judge(&mut c, &p, later, 1, false), Verdict::Pass);
        assert_eq!(c.count(), 1);
        let want = d + 57_735_027 + 70_710_678 + 100_000_000;
        assert!(c.drop_next().0.abs_diff(want) <= 4, "{:?}", c.drop_next());
        let later = later + 100 * MS;
        judge(&mut c, &p, later, 1, false);
        assert_eq!(c.count(), 0);
        assert_eq!(c.drop_next().0, later + 100 * MS);
        assert!(!c.at_rest(Instant(later)));
        assert!(c.at_rest(Instant(later + 100 * MS)));
    }

    /// At a low rate the target rises with the MTU time and the sojourn must exceed four
    /// MTU times.
    #[test]
    fn slow_links_need_four_mtu_times() {
        // 2 Mbit/s: 1514 B = 6.056 ms; target max(9.084, 5) ms; 4 x = 24.224 ms
        let p = AqmParams::cake(Some(Rate::from_bps(2_000_000)));
        assert_eq!(p.mtu_time.0, 6_056_000);
        assert_eq!(p.target.0, 9_084_000);
        let mut c = Cobalt::default();
        assert_eq!(judge(&mut c, &p, 0, 20, false), Verdict::Pass);
        assert!(!c.dropping(), "20 ms < 4 MTU times");
        judge(&mut c, &p, MS, 25, false);
        assert!(c.dropping());
    }

    /// BLUE against `cobalt_queue_full` / `cobalt_queue_empty`: +1/256 per overflow at
    /// most once per target, saturating at 1; -1/4096 per empty queue at most once per
    /// target, not below 0.
    #[test]
    fn blue_increments_on_overflow_and_decrements_on_empty() {
        let p = AqmParams::default();
        let mut c = Cobalt::default();
        // the timer starts at 0: not more than 5 ms since then
        c.on_overflow(&p, Instant(5 * MS));
        assert_eq!(c.p_drop(), 0);
        assert!(c.dropping());
        assert_eq!((c.count(), c.drop_next().0), (1, 5 * MS));
        c.on_overflow(&p, Instant(5 * MS + 1));
        assert_eq!(c.p_drop(), 1 << 24);
        // again within target: no change
        c.on_overflow(&p, Instant(10 * MS + 1));
        assert_eq!(c.p_drop(), 1 << 24);
        c.on_overflow(&p, Instant(10 * MS + 2));
        assert_eq!(c.p_drop(), 2 << 24);
        // 254 more: 256/256 wraps in 32 bits and saturates at 1.0
        let mut t = 10 * MS + 2;
        for k in 3..=256u64 {
            t += 6 * MS;
            c.on_overflow(&p, Instant(t));
            let want = if k < 256 { (k << 24) as u32 } else { u32::MAX };
            assert_eq!(c.p_drop(), want, "k {k}");
        }
        // empty: -1/4096 per target
        let mut c = Cobalt {
            p_drop: 3 << 20,
            ..Cobalt::default()
        };
        c.on_empty(&p, Instant(6 * MS));
        assert_eq!(c.p_drop(), 2 << 20);
        c.on_empty(&p, Instant(10 * MS));
        assert_eq!(c.p_drop(), 2 << 20, "within target");
        c.on_empty(&p, Instant(12 * MS));
        assert_eq!(c.p_drop(), 1 << 20);
        c.p_drop = 5;
        c.on_empty(&p, Instant(20 * MS));
        assert_eq!(c.p_drop(), 0);
        assert!(!c.dropping());
    }

    /// `cobalt_queue_empty` also steps the count down when a signal was due.
    #[test]
    fn empty_queue_steps_the_count_down() {
        let p = AqmParams::default();
        let mut c = Cobalt::default();
        c.on_overflow(&p, Instant(6 * MS)); // count 1, due now
        c.on_empty(&p, Instant(6 * MS));
        assert_eq!(c.count(), 0);
        assert!(!c.dropping());
        // count 0: the next step uses 1/sqrt(0) = 1.0
        assert_eq!(c.drop_next().0, 6 * MS + 99_999_999);
    }

    /// BLUE drops with probability p_drop whatever the sojourn, never marks, and spares
    /// the last packet of the queue.
    #[test]
    fn blue_drops_with_its_probability() {
        let p = AqmParams::default();
        let mut c = Cobalt {
            p_drop: 1 << 31,
            ..Cobalt::default()
        };
        let mut rng = Rng::new(5);
        let mut drops = 0;
        for i in 0..20_000u64 {
            let v = c.judge(&p, head(1), Instant(i * MS), &mut rng, || {
                panic!("BLUE never marks")
            });
            drops += (v == Verdict::Drop) as u32;
        }
        assert!((9_700..10_300).contains(&drops), "{drops}");
        let last = Head {
            flow_backlog: 0,
            ..head(1)
        };
        for i in 0..100 {
            let v = c.judge(&p, last, Instant(i), &mut rng, || true);
            assert_eq!(v, Verdict::Pass);
        }
    }

    /// A due signal on the last packet of the queue: marked if it can be, never dropped.
    #[test]
    fn last_packet_is_not_dropped() {
        let p = AqmParams::default();
        let mut c = Cobalt::default();
        judge(&mut c, &p, 0, 6, false);
        let due = c.drop_next().0;
        let last = Head {
            flow_backlog: 0,
            ..head(6)
        };
        let v = c.judge(&p, last, Instant(due), &mut Rng::new(1), || false);
        assert_eq!(v, Verdict::Pass);
        assert_eq!(c.count(), 2, "the signal still counts");
        let due = c.drop_next().0;
        let v = c.judge(&p, last, Instant(due), &mut Rng::new(1), || true);
        assert_eq!(v, Verdict::Mark);
    }
}
