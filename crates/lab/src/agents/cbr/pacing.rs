//! How a [`CbrSender`](super::CbrSender) keeps its schedule: packet `i` is due at
//! `t0 + round(i · 10⁹ / pps)` ns on the monotonic clock (an absolute schedule, so errors
//! never accumulate), and [`Pacing`] says how the sending thread waits for a due time —
//! sleeping with an absolute `clock_nanosleep` (in chunks, so that a stop request is noticed),
//! busy-spinning on the clock, or both. The clocks are `weir_io::clock`'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_io::clock::{monotonic_ns, sleep_until_monotonic_ns};

/// How a [`CbrSender`](super::CbrSender) waits for a packet's due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pacing {
    /// Sleep (`clock_nanosleep`, absolute) until `spin` before the due time, then busy-spin:
    /// sub-microsecond precision; spins a whole core once the period is below `spin` plus
    /// the wake-up latency.
    Hybrid {
        /// How long before the due time to stop sleeping.
        spin: Duration,
    },
    /// Sleep only: cheap, but every packet is late by the timer wake-up latency (tens of µs
    /// on a VM), and rates whose period is below that latency fall behind and go out in
    /// bursts.
    Sleep,
    /// Busy-spin only: the most precise; occupies a core for the whole run.
    Spin,
}

impl Default for Pacing {
    /// `Hybrid` with 100 µs of spinning.
    fn default() -> Pacing {
        Pacing::Hybrid {
            spin: Duration::from_micros(100),
        }
    }
}

impl Pacing {
    /// Waits until `due` (monotonic ns; `now` is the clock read just before) the way this
    /// pacing says; `false` if `stop` was raised first.
    pub(super) fn wait_until(self, due: u64, now: u64, stop: &AtomicBool) -> bool {
        match self {
            Pacing::Spin => spin_until(due, stop),
            Pacing::Sleep => sleep_until(due, stop),
            Pacing::Hybrid { spin } => {
                let spin = spin.as_nanos().min(u64::MAX as u128) as u64;
                (due - now <= spin || sleep_until(due - spin, stop)) && spin_until(due, stop)
            }
        }
    }
}

/// `(due - t0)` of packet `i`, ns.
#[inline]
pub(super) fn offset_ns(i: u64, period: f64) -> u64 {
    (i as f64 * period).round() as u64
}

/// Longest single sleep, so that a stop request is noticed within it.
const SLEEP_CHUNK_NS: u64 = 2_000_000;

/// Sleeps until `t` (monotonic ns) in chunks; `false` if `stop` was raised first.
fn sleep_until(t: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = monotonic_ns();
        if now >= t {
            return true;
        }
        sleep_until_monotonic_ns(t.min(now + SLEEP_CHUNK_NS));
    }
}

/// Busy-waits until `t` (monotonic ns); `false` if `stop` was raised first.
fn spin_until(t: u64, stop: &AtomicBool) -> bool {
    loop {
        if monotonic_ns() >= t {
            return true;
        }
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_absolute() {
        // 3 pps: 333_333_333.33… ns; packet 3 is due at exactly 1 s, no drift.
        let p = 1e9 / 3.0;
        assert_eq!(offset_ns(0, p), 0);
        assert_eq!(offset_ns(1, p), 333_333_333);
        assert_eq!(offset_ns(2, p), 666_666_667);
        assert_eq!(offset_ns(3, p), 1_000_000_000);
        assert_eq!(offset_ns(3_000_000_000, p), 1_000_000_000 * 1_000_000_000);
        let p = 1e9 / 200_000.0;
        assert_eq!(offset_ns(1_000_000, p), 5_000_000_000);
    }

    #[test]
    fn waits_end_at_the_due_time_or_on_stop() {
        let stop = AtomicBool::new(false);
        for p in [Pacing::default(), Pacing::Sleep, Pacing::Spin] {
            let now = monotonic_ns();
            let due = now + 300_000;
            assert!(p.wait_until(due, now, &stop));
            assert!(monotonic_ns() >= due);
        }
        stop.store(true, Ordering::Relaxed);
        let now = monotonic_ns();
        assert!(!Pacing::Sleep.wait_until(now + 1_000_000_000, now, &stop));
    }
}
