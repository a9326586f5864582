//! Timer wake-ups of the live loop: how late they come, and making up for the lateness.
//!
//! The engine is a schedule: `next_wakeup` says when its next departure is due, and the
//! bridge sleeps until then. A user-space thread wakes late whenever the kernel runs
//! something else first — on a loaded two-core host by milliseconds. A shaper whose
//! buckets hold only `mtu + rate × 1 ms` (the default `burst`, tc's `rate/HZ + mtu`)
//! cannot earn back more than that, so every longer oversleep is link time lost for good:
//! a backlogged 10 Mbit/s link woken 3 ms late each packet carries well under 10 Mbit/s.
//!
//! **Catch-up.** After a late wake-up the bridge replays the departures it slept
//! through: it polls the engine at each instant the engine had scheduled, in order, until
//! the schedule reaches the present. What was due then leaves now, back to back; the
//! engine's buckets, queues and timers end in the state they would have had on time. That
//! is the packet scheduler's own schedule, not extra credit: a class's `rate`/`ceil` over
//! any interval that ends now are still honoured, only shifted by the lateness (sch_cake
//! does the same by letting `time_next_packet` fall behind the clock while backlogged).
//! The replay reaches back at most `limit` (a stall longer than that — a stopped process,
//! a suspended VM — is not turned into one huge burst), and takes at most
//! [`MAX_STEPS`] steps per wake-up.
//!
//! **Statistics.** [`WakeStats`] counts the timer wake-ups and how late they were
//! (≤ 100 µs, ≤ 1 ms, ≤ 10 ms, more; the maximum and the mean), and the departures
//! replayed: `weir stats` shows whether this host keeps the loop's timing.

use serde::{Deserialize, Serialize};
use weir_core::{Duration, Instant};

/// Catch-up steps (engine polls at past instants) per wake-up at most.
pub const MAX_STEPS: usize = 4096;

/// How late the loop's timer wake-ups were, and what was replayed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WakeStats {
    /// Sleeps that ended at the engine's scheduled wake-up (not at a frame's arrival).
    pub timer_wakeups: u64,
    /// Of those, late by at most 100 µs, at most 1 ms, at most 10 ms, more.
    pub late_le_100us: u64,
    pub late_le_1ms: u64,
    pub late_le_10ms: u64,
    pub late_over_10ms: u64,
    /// The latest wake-up, µs.
    pub late_max_us: u64,
    /// Mean lateness, µs.
    pub late_mean_us: f64,
    /// Engine polls at instants the loop had slept through (see the module comment).
    pub catch_up_steps: u64,
    /// Wake-ups later than the catch-up limit: the time beyond it was not made up.
    pub beyond_limit: u64,
    /// The catch-up limit, µs (0: catch-up off).
    pub catch_up_limit_us: u64,
    #[serde(skip)]
    late_sum_ns: u128,
}

impl WakeStats {
    /// No wake-ups yet; late ones are made up to `limit` back.
    pub fn new(limit: Duration) -> WakeStats {
        WakeStats {
            catch_up_limit_us: limit.as_nanos() / 1000,
            ..WakeStats::default()
        }
    }

    /// A timer wake-up that was asked for `wanted` and came at `now`; later than the
    /// catch-up limit counts as `beyond_limit`.
    pub fn record(&mut self, wanted: Instant, now: Instant) {
        let late = now.saturating_since(wanted).as_nanos();
        self.timer_wakeups += 1;
        if late > self.catch_up_limit_us * 1000 {
            self.beyond_limit += 1;
        }
        match late {
            0..=100_000 => self.late_le_100us += 1,
            100_001..=1_000_000 => self.late_le_1ms += 1,
            1_000_001..=10_000_000 => self.late_le_10ms += 1,
            _ => self.late_over_10ms += 1,
        }
        self.late_max_us = self.late_max_us.max(late / 1000);
        self.late_sum_ns += late as u128;
        self.late_mean_us = self.late_sum_ns as f64 / self.timer_wakeups as f64 / 1e3;
    }
}

impl std::fmt::Display for WakeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timer wake-ups {}: late <=100us {}, <=1ms {}, <=10ms {}, >10ms {}; mean {:.0} us, max {} us; ",
            self.timer_wakeups,
            self.late_le_100us,
            self.late_le_1ms,
            self.late_le_10ms,
            self.late_over_10ms,
            self.late_mean_us,
            self.late_max_us
        )?;
        if self.catch_up_limit_us == 0 {
            write!(f, "catch-up off")
        } else {
            write!(
                f,
                "catch-up {} steps, {} wake-ups beyond its {} ms",
                self.catch_up_steps,
                self.beyond_limit,
                self.catch_up_limit_us as f64 / 1e3
            )
        }
    }
}

/// The instants to replay after waking at `now`: given the engine's next wake-up `due`
/// and the last instant the engine was polled at (`last`), the instant of the next
/// catch-up step, or `None` when the schedule has reached the present. Steps are strictly
/// increasing (an engine that reports the same wake-up again ends the replay) and never
/// earlier than `now - limit`.
pub fn next_step(
    due: Option<Instant>,
    last: Instant,
    now: Instant,
    limit: Duration,
) -> Option<Instant> {
    let due = due?;
    if due >= now {
        return None;
    }
    let floor = now.saturating_sub(limit);
    let at = due.max(floor);
    (at > last).then_some(at)
}

/// Replay the schedule of `engine` after waking at `now`: while [`next_step`] gives an
/// instant, call `poll` at it (the caller polls the engine and transmits what it
/// releases). `due` reads the engine's next wake-up; `last` is the instant the engine was
/// last polled at, and is left at the last step. Returns the number of steps (at most
/// [`MAX_STEPS`]).
pub fn replay<E>(
    engine: &mut E,
    due: impl Fn(&E) -> Option<Instant>,
    mut poll: impl FnMut(&mut E, Instant),
    last: &mut Instant,
    now: Instant,
    limit: Duration,
) -> usize {
    let mut steps = 0;
    while steps < MAX_STEPS {
        let Some(at) = next_step(due(engine), *last, now, limit) else {
            break;
        };
        poll(engine, at);
        *last = at;
        steps += 1;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant(x * 1_000_000)
    }

    #[test]
    fn lateness_lands_in_its_band() {
        let mut s = WakeStats::default();
        s.record(ms(10), Instant(ms(10).0 + 100_000)); // exactly 100 µs
        s.record(ms(10), Instant(ms(10).0 + 100_001));
        s.record(ms(10), ms(11)); // 1 ms
        s.record(ms(10), ms(20)); // 10 ms
        s.record(ms(10), ms(35)); // 25 ms
        s.record(ms(10), ms(9)); // early counts as on time
        assert_eq!(
            (
                s.late_le_100us,
                s.late_le_1ms,
                s.late_le_10ms,
                s.late_over_10ms
            ),
            (2, 2, 1, 1)
        );
        assert_eq!(s.timer_wakeups, 6);
        assert_eq!(s.late_max_us, 25_000);
        // (0.1 + 0.100001 + 1 + 10 + 25 + 0) ms / 6
        assert!(
            (s.late_mean_us - 36_200.001 / 6.0).abs() < 1e-6,
            "{}",
            s.late_mean_us
        );
    }

    #[test]
    fn only_wake_ups_later_than_the_limit_are_beyond_it() {
        let mut s = WakeStats::new(Duration::from_millis(20));
        s.record(ms(10), ms(30)); // exactly 20 ms: made up
        s.record(ms(10), Instant(ms(30).0 + 1));
        assert_eq!(s.beyond_limit, 1);
    }

    #[test]
    fn display_names_every_band_and_the_limit() {
        let mut s = WakeStats::new(Duration::from_millis(20));
        s.record(ms(10), ms(12));
        s.catch_up_steps = 3;
        assert_eq!(
            s.to_string(),
            "timer wake-ups 1: late <=100us 0, <=1ms 0, <=10ms 1, >10ms 0; mean 2000 us, max 2000 us; \
             catch-up 3 steps, 0 wake-ups beyond its 20 ms"
        );
        assert!(WakeStats::new(Duration::ZERO)
            .to_string()
            .ends_with("catch-up off"));
    }

    #[test]
    fn steps_replay_the_schedule_up_to_now() {
        let limit = Duration::from_millis(20);
        // due 3 ms ago, last poll 5 ms ago: step at the due instant
        assert_eq!(next_step(Some(ms(7)), ms(5), ms(10), limit), Some(ms(7)));
        // due now or later: nothing to replay
        assert_eq!(next_step(Some(ms(10)), ms(5), ms(10), limit), None);
        assert_eq!(next_step(None, ms(5), ms(10), limit), None);
        // an engine that reports the instant it was just polled at ends the replay
        assert_eq!(next_step(Some(ms(7)), ms(7), ms(10), limit), None);
        // due 100 ms ago with a 20 ms limit: the replay starts 20 ms back
        assert_eq!(next_step(Some(ms(0)), ms(0), ms(100), limit), Some(ms(80)));
        // … once: the next step must be later than the last
        assert_eq!(next_step(Some(ms(0)), ms(80), ms(100), limit), None);
    }

    /// A backlogged 10 Mbit/s link driven by a loop that wakes 3 ms after each scheduled
    /// departure (the default `burst` holds ~2.2 ms): without catch-up it carries about three
    /// quarters of the rate, with it the rate to within 1 %.
    #[test]
    fn catch_up_keeps_a_late_loop_at_the_link_rate() {
        use weir_core::policy::Policy;
        use weir_core::{Ctx, Direction, Pool, Rng};
        use weir_wire::build::{self, EthSpec, Ipv4Spec};

        let text = "[link]\nrate = \"10Mbit\"\ndefault = \"all\"\n\
                    [[class]]\nname = \"all\"\nrate = \"10Mbit\"\nlimit = \"2000p\"\n";
        let policy = Policy::parse("late.toml", text).unwrap();
        let carried = |limit: Duration| -> u64 {
            let mut dev = policy.build_device(Instant::ZERO).unwrap();
            let mut pool = Pool::new(4096, 2048);
            let mut rng = Rng::new(1);
            let mut dropped = Vec::new();
            // 1.5 s of traffic at 12 Mbit/s offered up front: the link stays backlogged
            for _ in 0..1500 {
                let id = pool.alloc().unwrap();
                let n = build::udp_v4_frame(
                    pool.slot_mut(id),
                    &EthSpec::default(),
                    &Ipv4Spec::default(),
                    4000,
                    5000,
                    &[0u8; 1472],
                )
                .unwrap();
                pool.meta_mut(id).len = n as u32;
                let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
                dev.ingress(Direction::Outbound, id, &mut cx, Instant::ZERO)
                    .unwrap();
            }
            let mut bytes = 0u64;
            let mut send = |dev: &mut weir_core::device::Device, pool: &mut Pool, at: Instant| {
                let mut cx = Ctx::new(at, pool, &mut rng, &mut dropped);
                while let Some(id) = dev.poll_transmit(Direction::Outbound, &mut cx) {
                    bytes += cx.pool.data(id).len() as u64;
                    cx.pool.free(id);
                }
            };
            let (mut now, mut last) = (Instant::ZERO, Instant::ZERO);
            let end = Instant(1_000_000_000);
            while now < end {
                replay(
                    &mut dev,
                    |d| d.next_wakeup(),
                    |d, at| send(d, &mut pool, at),
                    &mut last,
                    now,
                    limit,
                );
                send(&mut dev, &mut pool, now);
                last = now;
                let due = dev.next_wakeup().expect("backlogged");
                now = Instant(due.0 + 3_000_000);
            }
            bytes
        };
        let on_time = 10_000_000 / 8; // bytes in 1 s
        let late = carried(Duration::ZERO);
        let caught_up = carried(Duration::from_millis(20));
        assert!(
            late < on_time * 85 / 100,
            "late loop without catch-up: {late} B"
        );
        let err = caught_up as f64 / on_time as f64 - 1.0;
        assert!(
            err.abs() < 0.01,
            "with catch-up: {caught_up} B ({:+.2} %)",
            err * 100.0
        );
    }
}
