//! Token bucket in integer nanoseconds (the [`Tbf`](crate::queue::tbf::Tbf) shaper's buckets).
//!
//! [`TokenBucket`] keeps its tokens as *time*, like Linux `sch_tbf`/`sch_htb`: a token is
//! one nanosecond of transmission at the bucket's [`Rate`], so sending a `len`-byte frame
//! costs `rate.tx_ns(len)` ns (one multiply and one shift, per-frame overhead included by
//! the `Rate`), and refilling adds the elapsed time. There is no floating point and no
//! division per packet.
//!
//! ```text
//! refill(now):  tokens = min(burst_ns, tokens + (now - t_c)); t_c = now
//! conforms(len): tokens >= min(tx_ns(len), burst_ns)
//! consume(len):  tokens = max(tokens - tx_ns(len), -max_debt)
//! ```
//!
//! A frame whose cost exceeds the whole bucket conforms when the bucket is full, and the
//! debt it leaves is repaid before the next frame conforms; this keeps an oversized frame
//! from blocking a queue forever while the long-run rate stays exact. `consume` without a
//! prior `conforms` (a link-sharing scheduler borrowing beyond its rate, as HTB does) may
//! drive the tokens negative down to `-max_debt` (default 60 s, HTB's `mbuffer`).
//!
//! Parameters of [`TokenBucket`]: `rate` ([`Rate`], bit/s plus per-frame overhead bytes),
//! `burst` (bytes, bucket depth; converted once to `burst_ns = (burst + overhead) * 8e9 /
//! bps` in the constructor, rounded down). The bucket starts full.
//!
//! Invariants: `-max_debt <= tokens <= burst_ns`; `t_c` never moves backwards (a `now`
//! earlier than `t_c` refills nothing). Frame lengths are clamped to [`MAX_FRAME`] for
//! costing and overheads to +-[`MAX_FRAME`] so that no input can overflow the fixed-point
//! arithmetic.

use crate::rate::Rate;
use crate::time::{Duration, Instant};

/// Largest frame length (bytes) costed exactly; longer lengths cost as this many.
pub const MAX_FRAME: u32 = 1 << 20;

/// Default most-negative token level (HTB's `mbuffer`): 60 s.
pub const DEFAULT_MAX_DEBT: Duration = Duration::from_secs(60);

/// Upper bound on any bucket depth, ~36 years: keeps every sum below `i64::MAX`.
const MAX_BURST_NS: i64 = 1 << 60;

/// Nanoseconds to send `bytes` (plus the rate's per-frame overhead) at `rate`, rounded down,
/// computed exactly (constructor use only: it divides).
fn bytes_to_ns(rate: Rate, bytes: u64) -> i64 {
    let wire = (bytes as i128 + rate.overhead() as i128).max(1) as u128;
    let ns = wire * 8_000_000_000u128 / rate.bps() as u128;
    ns.min(MAX_BURST_NS as u128) as i64
}

/// A token bucket whose tokens are nanoseconds of transmission time (see the module).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    rate: Rate,
    burst_ns: i64,
    tokens: i64,
    t_c: Instant,
    floor_ns: i64,
}

impl TokenBucket {
    /// A full bucket of `burst_bytes` at `rate`, checkpointed at `now`.
    pub fn new(rate: Rate, burst_bytes: u32, now: Instant) -> Self {
        let rate = Self::sane(rate);
        let burst_ns = bytes_to_ns(rate, burst_bytes as u64);
        TokenBucket {
            rate,
            burst_ns,
            tokens: burst_ns,
            t_c: now,
            floor_ns: -(DEFAULT_MAX_DEBT.0 as i64),
        }
    }

    /// Clamp the overhead so `tx_ns` cannot overflow for any clamped length.
    fn sane(rate: Rate) -> Rate {
        let lim = MAX_FRAME as i32;
        if rate.overhead().abs() > lim {
            Rate::with_overhead(rate.bps(), rate.overhead().clamp(-lim, lim))
        } else {
            rate
        }
    }

    #[inline]
    pub fn rate(&self) -> Rate {
        self.rate
    }
    /// Bucket depth in ns.
    #[inline]
    pub fn burst_ns(&self) -> i64 {
        self.burst_ns
    }
    /// Tokens (ns) as of the last checkpoint; may be negative.
    #[inline]
    pub fn tokens(&self) -> i64 {
        self.tokens
    }
    /// The last checkpoint `t_c`.
    #[inline]
    pub fn checkpoint(&self) -> Instant {
        self.t_c
    }
    /// Tokens (ns) the bucket would hold at `now` (no state change).
    #[inline]
    pub fn tokens_at(&self, now: Instant) -> i64 {
        let e = now.saturating_since(self.t_c).0.min(MAX_BURST_NS as u64) as i64;
        self.tokens.saturating_add(e).min(self.burst_ns)
    }

    /// Most negative token level, as a duration (default [`DEFAULT_MAX_DEBT`]).
    pub fn max_debt(&self) -> Duration {
        Duration(self.floor_ns.unsigned_abs())
    }
    pub fn set_max_debt(&mut self, d: Duration) {
        self.floor_ns = -(d.0.min(MAX_BURST_NS as u64) as i64);
        self.tokens = self.tokens.max(self.floor_ns);
    }

    /// Change rate and depth at run time. Tokens earned up to `now` at the old rate are
    /// kept as time (ns of transmission), clamped to the new depth.
    pub fn set_rate(&mut self, rate: Rate, burst_bytes: u32, now: Instant) {
        self.refill(now);
        self.rate = Self::sane(rate);
        self.burst_ns = bytes_to_ns(self.rate, burst_bytes as u64);
        self.tokens = self.tokens.min(self.burst_ns);
    }

    /// Cost of a `len`-byte frame in ns (`rate.tx_ns`, overhead included).
    #[inline]
    pub fn cost_ns(&self, len: u32) -> i64 {
        self.rate.tx_ns(len.min(MAX_FRAME)) as i64
    }

    /// Tokens needed before a `len`-byte frame conforms: its cost, or a full bucket.
    #[inline]
    fn need(&self, len: u32) -> i64 {
        self.cost_ns(len).min(self.burst_ns)
    }

    /// Add the time elapsed since the checkpoint, up to the depth, and move the checkpoint
    /// to `now` (never backwards).
    #[inline]
    pub fn refill(&mut self, now: Instant) {
        if now > self.t_c {
            self.tokens = self.tokens_at(now);
            self.t_c = now;
        }
    }

    /// Whether a `len`-byte frame conforms now (call [`refill`](Self::refill) first):
    /// `tokens >= tx_ns(len)`, or the bucket is full for a frame larger than the bucket.
    #[inline]
    pub fn conforms(&self, len: u32) -> bool {
        self.tokens >= self.need(len)
    }

    /// Charge a `len`-byte frame. Tokens may go negative, down to `-max_debt`.
    #[inline]
    pub fn consume(&mut self, len: u32) {
        self.tokens = self
            .tokens
            .saturating_sub(self.cost_ns(len))
            .max(self.floor_ns);
    }

    /// Refill at `now`, then consume if the frame conforms. Returns whether it did.
    #[inline]
    pub fn try_consume(&mut self, len: u32, now: Instant) -> bool {
        self.refill(now);
        let ok = self.conforms(len);
        if ok {
            self.consume(len);
        }
        ok
    }

    /// The earliest instant at which a `len`-byte frame conforms (no state change). At or
    /// before the checkpoint if it conforms already.
    #[inline]
    pub fn conform_at(&self, len: u32) -> Instant {
        let deficit = self.need(len) - self.tokens;
        if deficit <= 0 {
            self.t_c
        } else {
            self.t_c + Duration(deficit as u64)
        }
    }

    /// How long from `now` until a `len`-byte frame conforms (zero if it does).
    #[inline]
    pub fn time_until_conform(&self, len: u32, now: Instant) -> Duration {
        if self.tokens_at(now) >= self.need(len) {
            Duration::ZERO
        } else {
            self.conform_at(len).saturating_since(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn bucket_basics_hand_computed() {
        // 1 Mbit/s: 8 us per byte. 1500-byte bucket = 12 ms.
        let r = Rate::from_bps(1_000_000);
        let mut b = TokenBucket::new(r, 1500, Instant::ZERO);
        assert_eq!(b.burst_ns(), 12 * MS as i64);
        assert_eq!(b.tokens(), 12 * MS as i64, "starts full");
        assert_eq!(b.cost_ns(1000), 8 * MS as i64);
        assert!(b.conforms(1500));
        b.consume(1000);
        assert_eq!(b.tokens(), 4 * MS as i64);
        assert!(!b.conforms(1000));
        assert_eq!(b.conform_at(1000), Instant(4 * MS));
        assert_eq!(
            b.time_until_conform(1000, Instant(MS)),
            Duration::from_millis(3)
        );
        b.refill(Instant(3 * MS));
        assert_eq!(b.tokens(), 7 * MS as i64);
        assert_eq!(
            b.conform_at(1000),
            Instant(4 * MS),
            "refill keeps conform_at"
        );
        b.refill(Instant(100 * MS));
        assert_eq!(b.tokens(), 12 * MS as i64, "capped at burst");
        // Time going backwards refills nothing and does not move t_c.
        b.refill(Instant(50 * MS));
        assert_eq!(b.checkpoint(), Instant(100 * MS));
        assert_eq!(b.time_until_conform(1000, Instant(50 * MS)), Duration::ZERO);
        // try_consume.
        assert!(b.try_consume(1500, Instant(100 * MS)));
        assert!(!b.try_consume(1, Instant(100 * MS)));
        assert_eq!(b.tokens(), 0);
        assert!(b.try_consume(1, Instant(100 * MS + 8_000)));
    }

    #[test]
    fn debt_floor_and_oversized_frames() {
        let r = Rate::from_bps(8_000_000); // 1 ns per bit, 1 us per byte
        let mut b = TokenBucket::new(r, 2000, Instant::ZERO);
        // Borrowing: consume without conforming goes negative down to the floor.
        b.set_max_debt(Duration::from_micros(5000));
        for _ in 0..10 {
            b.consume(1500);
        }
        assert_eq!(b.tokens(), -5_000_000);
        assert_eq!(b.max_debt(), Duration::from_micros(5000));
        // Repaid at 1 ns per ns: a 1000-byte frame conforms 6 ms later.
        assert_eq!(b.conform_at(1000), Instant(6_000_000));
        // A frame larger than the bucket conforms only when the bucket is full.
        let mut b = TokenBucket::new(r, 2000, Instant::ZERO);
        assert!(b.conforms(9000));
        b.consume(9000);
        assert_eq!(b.tokens(), -7_000_000);
        assert_eq!(b.conform_at(9000), Instant(9_000_000));
        assert_eq!(b.conform_at(500), Instant(7_500_000));
        // Absurd lengths and overheads do not overflow.
        let mut x = TokenBucket::new(Rate::with_overhead(1, i32::MAX), u32::MAX, Instant::ZERO);
        x.consume(u32::MAX);
        x.refill(Instant::MAX);
        let _ = x.time_until_conform(u32::MAX, Instant::ZERO);
        let _ = x.conform_at(u32::MAX);
        assert!(x.tokens() <= x.burst_ns());
    }

    #[test]
    fn set_rate_keeps_tokens_clamped() {
        let mut b = TokenBucket::new(Rate::from_bps(1_000_000), 1500, Instant::ZERO);
        b.consume(1500);
        b.set_rate(Rate::from_bps(2_000_000), 3000, Instant(5 * MS));
        assert_eq!(b.tokens(), 5 * MS as i64, "5 ms earned at the old rate");
        assert_eq!(b.burst_ns(), 12 * MS as i64);
        assert_eq!(b.cost_ns(1000), 4 * MS as i64);
        b.set_rate(Rate::from_bps(2_000_000), 500, Instant(5 * MS));
        assert_eq!(b.tokens(), 2 * MS as i64, "clamped to the new 2 ms depth");
    }
}
