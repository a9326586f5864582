//! Virtual or wall time as integer nanoseconds.
//!
//! The engine never reads a clock: every call takes `now: Instant` from its driver (the
//! live loop's wall clock, or the simulator's virtual clock). `Instant` is nanoseconds since
//! an arbitrary epoch chosen by the driver; `Duration` is a span in nanoseconds. Both are
//! plain `u64`s so that arithmetic on the hot path is a single integer operation.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time: nanoseconds since the driver's epoch.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

/// A span of time in nanoseconds.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);
    pub const MAX: Instant = Instant(u64::MAX);
    #[inline]
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero when `earlier` is later than `self`.
    #[inline]
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// `self - d`, or zero.
    #[inline]
    pub fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.0))
    }
    /// The next deadline of a periodic timer whose deadline was `self` and that ran at
    /// `now` (not before `self`): one `period` after this deadline, or one after `now` if
    /// the run came a whole period or more late (missed ticks are not made up).
    #[inline]
    pub fn next_tick(self, period: Duration, now: Instant) -> Instant {
        let next = self + period;
        if next > now {
            next
        } else {
            now + period
        }
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);
    #[inline]
    pub const fn from_nanos(ns: u64) -> Self {
        Duration(ns)
    }
    #[inline]
    pub const fn from_micros(us: u64) -> Self {
        Duration(us * 1_000)
    }
    #[inline]
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
    #[inline]
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * 1_000_000_000)
    }
    #[inline]
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}
impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        self.0 = self.0.saturating_add(d.0);
    }
}
impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: a later `rhs` yields zero rather than wrapping.
    #[inline]
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}
impl Add for Duration {
    type Output = Duration;
    #[inline]
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.0 as f64 / 1e9)
    }
}
impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1_000_000_000 {
            write!(f, "{:.3}s", ns as f64 / 1e9)
        } else if ns >= 1_000_000 {
            write!(f, "{:.3}ms", ns as f64 / 1e6)
        } else if ns >= 1_000 {
            write!(f, "{:.3}us", ns as f64 / 1e3)
        } else {
            write!(f, "{ns}ns")
        }
    }
}
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn arithmetic_saturates() {
        let a = Instant(5);
        let b = Instant(9);
        assert_eq!(b - a, Duration(4));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(Instant::MAX + Duration(1), Instant::MAX);
        assert_eq!(Duration::from_millis(5).as_nanos(), 5_000_000);
        assert_eq!(b.saturating_sub(Duration(4)), a);
        assert_eq!(a.saturating_sub(Duration(9)), Instant::ZERO);
    }

    /// A 10-unit timer due at 10: run on time, next at 20; run at 19, still 20; run at
    /// 20 or later (a whole period late), a period after the run.
    #[test]
    fn next_tick_keeps_the_phase_unless_a_period_late() {
        let p = Duration(10);
        assert_eq!(Instant(10).next_tick(p, Instant(10)), Instant(20));
        assert_eq!(Instant(10).next_tick(p, Instant(19)), Instant(20));
        assert_eq!(Instant(10).next_tick(p, Instant(20)), Instant(30));
        assert_eq!(Instant(10).next_tick(p, Instant(55)), Instant(65));
    }
}
