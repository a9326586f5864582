//! The wall clock of the live data path, and precise sleeping.
//!
//! `Clock::now()` reads CLOCK_MONOTONIC as an engine [`Instant`] (ns). Pcap timestamps and
//! reports need wall time: `to_unix_ns` converts using the offset between CLOCK_REALTIME
//! and CLOCK_MONOTONIC taken at start. `set_timer_slack_1ns` makes the kernel wake sleepers
//! on time (the default slack of 50 µs would otherwise be added to every sleep).
//! [`monotonic_ns`], [`realtime_ns`], [`thread_cpu_ns`] and [`sleep_until_monotonic_ns`] are
//! the raw clocks and an absolute sleep, for code that paces on its own (the testbed's traffic agents).

use weir_core::Instant;

/// Nanoseconds of a `timespec` (a clock reading or a kernel timestamp).
#[inline]
pub fn timespec_ns(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    timespec_ns(&ts)
}

/// Now on CLOCK_MONOTONIC, ns (immune to steps of the wall clock).
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Now on CLOCK_REALTIME, ns since the Unix epoch: the clock of kernel receive timestamps
/// (`SO_TIMESTAMPNS`).
#[inline]
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// The calling thread's CPU time, ns (CLOCK_THREAD_CPUTIME_ID): what a piece of work cost
/// the thread, not counting the time it waited for a CPU.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Sleeps until `t` on CLOCK_MONOTONIC (ns) with one absolute `clock_nanosleep`; a signal
/// may end it early (the caller checks the clock). With 1 ns timer slack
/// ([`set_timer_slack_1ns`]) the thread wakes within the timer's latency of `t`.
pub fn sleep_until_monotonic_ns(t: u64) {
    let ts = libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: ts is valid; no remaining-time output with TIMER_ABSTIME. EINTR just returns.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    realtime_offset: i128,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        let mono = monotonic_ns();
        let real = realtime_ns();
        Clock {
            realtime_offset: real as i128 - mono as i128,
        }
    }
    #[inline]
    pub fn now(&self) -> Instant {
        Instant(monotonic_ns())
    }
    /// The monotonic instant of a Unix-epoch timestamp (e.g. a kernel receive timestamp);
    /// 0 for times before the clock's epoch.
    pub fn from_unix_ns(&self, unix_ns: u64) -> Instant {
        Instant((unix_ns as i128 - self.realtime_offset).max(0) as u64)
    }
    /// Nanoseconds since the Unix epoch for a monotonic instant.
    pub fn to_unix_ns(&self, t: Instant) -> u64 {
        (t.0 as i128 + self.realtime_offset).max(0) as u64
    }
}

/// Ask the kernel for 1 ns timer slack on this thread.
pub fn set_timer_slack_1ns() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn monotonic_and_convertible() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        let unix = c.to_unix_ns(a);
        // after 2020-01-01
        assert!(unix > 1_577_836_800_000_000_000);
        set_timer_slack_1ns().unwrap();
    }

    #[test]
    fn realtime_is_epoch_ns() {
        let a = realtime_ns();
        let b = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(a.abs_diff(b) < 1_000_000_000);
    }

    #[test]
    fn absolute_sleep_wakes_after_its_time() {
        let t = monotonic_ns() + 2_000_000;
        sleep_until_monotonic_ns(t);
        assert!(monotonic_ns() >= t);
        // a time in the past returns at once
        sleep_until_monotonic_ns(0);
    }
}
