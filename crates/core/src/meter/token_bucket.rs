//! The token bucket, in integer units of transmission time or of bits: every rate limit in
//! the engine counts with it (the link-sharing scheduler's rate and ceil buckets, per-flow
//! queuing's session caps, the [`Tbf`](crate::queue::tbf::Tbf) shaper, the DiffServ
//! meters).
//!
//! Tokens are *time*, like Linux `sch_tbf`/`sch_htb`: a token is one unit (a nanosecond,
//! [`Ns`], or a picosecond, [`Ps`]) of transmission at the bucket's [`Rate`], so sending a
//! `len`-byte frame costs `rate.tx_ns(len)` or `rate.tx_ps(len)` units (one multiply and
//! one shift, per-frame overhead included by the `Rate`), and refilling adds the elapsed
//! time. There is no floating point and no division per packet. Picoseconds are for
//! high rates, where a nanosecond is a large fraction of a small frame's transmission time
//! (at 100 Gbit/s a 64-byte frame takes 6.7 ns).
//!
//! ```text
//! refill(elapsed): tokens = min(depth, tokens + elapsed)
//! conforms(len):   tokens >= min(cost(len), depth)
//! consume(len):    tokens = max(tokens - cost(len), floor)
//! ```
//!
//! A third unit, [`Exact`], counts tokens in *bits* rather than time, scaled by 10^9 so
//! that both sides are integers: a `len`-byte frame costs `len * 8 * 10^9` units and
//! `elapsed` nanoseconds at `bps` bit/s earn `elapsed * bps` units. Nothing is rounded, so
//! a bucket's decisions are those of the fluid (real-valued) token count at any rate;
//! refilling is one multiply instead of an add. The DiffServ meters ([`crate::meter`])
//! count with it. Earning goes through [`TokenUnit::earned`] (time units earn the elapsed
//! time itself): [`Bucket::refill_ns`] takes nanoseconds, and [`Bucket::refill_spill`]
//! hands back what overflows the depth (for a second bucket to take).
//!
//! Two forms of one bucket:
//! * [`Bucket<U>`]: rate, depth and token level; the *checkpoint* (the instant of the last
//!   refill) is the owner's, who passes the time elapsed since it. Several buckets refilled
//!   together share one checkpoint (a link-sharing class's rate and ceil buckets), and many
//!   token levels may share one rate and depth (per-flow session caps keep only a level and
//!   a checkpoint per flow, see [`Bucket::with_tokens`]). The caller also gives the debt
//!   floor to [`Bucket::consume`]. Depth from a burst in bytes: [`Bucket::new`] takes the
//!   cost of a `burst`-byte frame (HTB's `buffer`, the multiply-and-shift conversion).
//! * [`TokenBucket`]: a [`Bucket<Ns>`] with its own checkpoint and debt floor, for a shaper
//!   that owns its clock state (the `Tbf`). Its depth is converted exactly once in the
//!   constructor: `burst_ns` = the bytes a `burst`-byte frame counts (the rate's framing)
//!   × 8e9 / bps, rounded down.
//!
//! A frame whose cost exceeds the whole bucket conforms when the bucket is full, and the
//! debt it leaves is repaid before the next frame conforms; this keeps an oversized frame
//! from blocking a queue forever while the long-run rate stays exact. `consume` without a
//! prior `conforms` (a link-sharing scheduler borrowing beyond its rate, as HTB does) may
//! drive the tokens negative down to the floor (`TokenBucket`: `-max_debt`, default 60 s,
//! HTB's `mbuffer`).
//!
//! Parameters of [`TokenBucket`]: `rate` ([`Rate`], bit/s plus per-frame overhead bytes),
//! `burst` (bytes, bucket depth). The bucket starts full; so does a [`Bucket`].
//!
//! Invariants: `floor <= tokens <= depth` and `depth >= 0`; a [`TokenBucket`]'s `t_c` never
//! moves backwards (a `now` earlier than `t_c` refills nothing). `TokenBucket` clamps frame
//! lengths to [`MAX_FRAME`] for costing and overheads to +-[`MAX_FRAME`] so that no input
//! can overflow the fixed-point arithmetic; a `Bucket` costs the length it is given, as its
//! owner's `Rate` does.
//!
//! Bounds of [`Exact`]: costs and earnings saturate at `i64::MAX` (a frame of more than
//! ~1.15 GB, or ~92 ms at 100 Gbit/s, which exceeds any bucket allowed below, so the
//! saturation never changes a decision), and depths built from a burst of at most
//! [`MAX_EXACT_BURST`] bytes (512 MiB, < 2^62 units) leave room for two full buckets in
//! one `i64` (the srTCM's overflow from one bucket into the other, see
//! [`Bucket::refill_spill`]). Elapsed time is unbounded: any gap simply fills the bucket.

use crate::rate::Rate;
use crate::time::{Duration, Instant};
use core::marker::PhantomData;

/// Largest frame length (bytes) costed exactly; longer lengths cost as this many.
pub const MAX_FRAME: u32 = 1 << 20;

/// Default most-negative token level (HTB's `mbuffer`): 60 s.
pub const DEFAULT_MAX_DEBT: Duration = Duration::from_secs(60);

/// Upper bound on any bucket depth, ~36 years: keeps every sum below `i64::MAX`.
const MAX_BURST_NS: i64 = 1 << 60;

/// Largest burst (bytes) from which an [`Exact`] bucket's depth is built: 2^29 (512 MiB),
/// i.e. a depth below 2^62 units, so that two full buckets still sum within `i64`.
pub const MAX_EXACT_BURST: u32 = 1 << 29;

/// The unit a bucket counts tokens in: transmission time in nanoseconds or picoseconds,
/// or [`Exact`] nano-bits.
pub trait TokenUnit: Copy {
    /// Units to transmit a `len`-byte frame at `rate` (overhead included).
    fn cost(rate: &Rate, len: u32) -> u64;

    /// Units a bucket at `rate` earns in `elapsed_ns` nanoseconds, saturating at
    /// `i64::MAX`. For the time units this is the elapsed time itself, the amount their
    /// owners pass to [`Bucket::refill`] directly.
    fn earned(rate: &Rate, elapsed_ns: u64) -> i64;
}

/// Tokens in nanoseconds of transmission time ([`Rate::tx_ns`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ns;

/// Tokens in picoseconds of transmission time ([`Rate::tx_ps`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ps;

/// Tokens in nano-bits (10^-9 bit): exact for every rate (see the module).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Exact;

/// [`Exact`] units in one byte: 8 bits of 10^9 units each.
pub const EXACT_PER_BYTE: u64 = 8_000_000_000;

/// `a * b`, saturating at `i64::MAX`.
#[inline]
fn mul_sat_i64(a: u64, b: u64) -> i64 {
    a.saturating_mul(b).min(i64::MAX as u64) as i64
}

impl TokenUnit for Ns {
    #[inline]
    fn cost(rate: &Rate, len: u32) -> u64 {
        rate.tx_ns(len)
    }
    #[inline]
    fn earned(_: &Rate, elapsed_ns: u64) -> i64 {
        elapsed_ns.min(i64::MAX as u64) as i64
    }
}

impl TokenUnit for Ps {
    #[inline]
    fn cost(rate: &Rate, len: u32) -> u64 {
        rate.tx_ps(len)
    }
    #[inline]
    fn earned(_: &Rate, elapsed_ns: u64) -> i64 {
        mul_sat_i64(elapsed_ns, 1000)
    }
}

impl TokenUnit for Exact {
    /// `wire_len(len) * 8e9`, saturating at `i64::MAX`.
    #[inline]
    fn cost(rate: &Rate, len: u32) -> u64 {
        mul_sat_i64(rate.wire_len(len), EXACT_PER_BYTE) as u64
    }
    /// `elapsed_ns * bps`, saturating at `i64::MAX`.
    #[inline]
    fn earned(rate: &Rate, elapsed_ns: u64) -> i64 {
        mul_sat_i64(elapsed_ns, rate.bps())
    }
}

/// One token bucket — rate, depth and token level in units `U` — whose checkpoint its owner
/// keeps (see the module).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Bucket<U: TokenUnit> {
    rate: Rate,
    depth: i64,
    tokens: i64,
    unit: PhantomData<U>,
}

impl<U: TokenUnit> Bucket<U> {
    /// A full bucket at `rate`, as deep as a `burst`-byte frame costs.
    pub fn new(rate: Rate, burst: u32) -> Self {
        Self::with_depth(rate, U::cost(&rate, burst) as i64)
    }

    /// A full bucket at `rate`, `depth` units deep (`>= 0`).
    pub fn with_depth(rate: Rate, depth: i64) -> Self {
        Bucket {
            rate,
            depth,
            tokens: depth,
            unit: PhantomData,
        }
    }

    /// The same rate and depth holding `tokens` (not clamped): one of many levels that
    /// share a rate and depth.
    #[inline]
    pub fn with_tokens(&self, tokens: i64) -> Self {
        Bucket { tokens, ..*self }
    }

    #[inline]
    pub fn rate(&self) -> Rate {
        self.rate
    }
    /// Bucket depth, in units.
    #[inline]
    pub fn depth(&self) -> i64 {
        self.depth
    }
    /// Tokens, in units; may be negative.
    #[inline]
    pub fn tokens(&self) -> i64 {
        self.tokens
    }

    /// Cost of a `len`-byte frame, in units (overhead included).
    #[inline]
    pub fn cost(&self, len: u32) -> i64 {
        U::cost(&self.rate, len) as i64
    }

    /// Tokens the bucket would hold `elapsed` units after its checkpoint (no state change).
    #[inline]
    pub fn level_after(&self, elapsed: i64) -> i64 {
        self.tokens.saturating_add(elapsed).min(self.depth)
    }

    /// Add `elapsed` units (the time since the owner's checkpoint), up to the depth.
    #[inline]
    pub fn refill(&mut self, elapsed: i64) {
        self.tokens = self.level_after(elapsed);
    }

    /// Units this bucket earns in `elapsed_ns` nanoseconds ([`TokenUnit::earned`]).
    #[inline]
    pub fn earned(&self, elapsed_ns: u64) -> i64 {
        U::earned(&self.rate, elapsed_ns)
    }

    /// Add what `elapsed_ns` nanoseconds earn at the bucket's rate, up to the depth.
    #[inline]
    pub fn refill_ns(&mut self, elapsed_ns: u64) {
        self.refill(self.earned(elapsed_ns));
    }

    /// Add `earned` units (`>= 0`) up to the depth and return the units that did not fit
    /// (zero if all did): what overflows this bucket, for a second bucket to take (RFC
    /// 2697's C bucket spilling into E). Exact while `tokens + earned` fits in an `i64`;
    /// beyond that the spill saturates at `i64::MAX - depth`, which is still more than
    /// any second bucket no deeper than `i64::MAX - depth` can take.
    #[inline]
    pub fn refill_spill(&mut self, earned: i64) -> i64 {
        let sum = self.tokens.saturating_add(earned);
        self.tokens = sum.min(self.depth);
        sum - self.tokens
    }

    /// Whether the tokens cover a `len`-byte frame's whole cost: `tokens >= cost(len)`,
    /// with no exemption for a frame larger than the bucket (unlike
    /// [`conforms`](Self::conforms)): the test `T - B >= 0` of RFC 2697/2698/4115.
    #[inline]
    pub fn covers(&self, len: u32) -> bool {
        self.tokens >= self.cost(len)
    }

    /// Whether a `len`-byte frame conforms: `tokens >= cost(len)`, or the bucket is full
    /// for a frame larger than the bucket.
    #[inline]
    pub fn conforms(&self, len: u32) -> bool {
        self.tokens >= self.need(len)
    }

    /// Tokens needed before a `len`-byte frame conforms: its cost, or a full bucket.
    #[inline]
    fn need(&self, len: u32) -> i64 {
        self.cost(len).min(self.depth)
    }

    /// Units until a `len`-byte frame conforms (`<= 0` if it does).
    #[inline]
    pub fn deficit(&self, len: u32) -> i64 {
        self.need(len) - self.tokens
    }

    /// Charge a `len`-byte frame. Tokens may go negative, down to `floor` (`<= 0`).
    #[inline]
    pub fn consume(&mut self, len: u32, floor: i64) {
        self.tokens = self.tokens.saturating_sub(self.cost(len)).max(floor);
    }

    /// Set the token level, clamped to the depth (a level carried over from another bucket).
    #[inline]
    pub fn set_tokens(&mut self, tokens: i64) {
        self.tokens = tokens.min(self.depth);
    }

    /// Change rate and depth at run time; the tokens are kept, clamped to the new depth.
    pub fn set_rate(&mut self, rate: Rate, depth: i64) {
        self.rate = rate;
        self.depth = depth;
        self.tokens = self.tokens.min(depth);
    }

    /// Change rate and depth at run time, the depth as a `burst`-byte frame costs at `rate`
    /// (as [`Bucket::new`]); the tokens are kept, clamped to the new depth.
    pub fn set_rate_burst(&mut self, rate: Rate, burst: u32) {
        self.set_rate(rate, U::cost(&rate, burst) as i64);
    }
}

/// Nanoseconds to send `bytes` (as one frame, the rate's framing applied) at `rate`, rounded
/// down, computed exactly (constructor use only: it divides).
fn bytes_to_ns(rate: Rate, bytes: u64) -> i64 {
    let wire = rate.framing().wire_bytes(bytes) as u128;
    let ns = wire * 8_000_000_000u128 / rate.bps() as u128;
    ns.min(MAX_BURST_NS as u128) as i64
}

/// A token bucket in nanoseconds with its own checkpoint and debt floor (see the module).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    bucket: Bucket<Ns>,
    t_c: Instant,
    floor_ns: i64,
}

impl TokenBucket {
    /// A full bucket of `burst_bytes` at `rate`, checkpointed at `now`.
    pub fn new(rate: Rate, burst_bytes: u32, now: Instant) -> Self {
        let rate = Self::sane(rate);
        TokenBucket {
            bucket: Bucket::with_depth(rate, bytes_to_ns(rate, burst_bytes as u64)),
            t_c: now,
            floor_ns: -(DEFAULT_MAX_DEBT.0 as i64),
        }
    }

    /// Clamp the overhead so `tx_ns` cannot overflow for any clamped length.
    fn sane(rate: Rate) -> Rate {
        let lim = MAX_FRAME as i32;
        if rate.overhead().abs() > lim {
            let framing = rate.framing();
            Rate::with_framing(
                rate.bps(),
                framing.with_overhead(rate.overhead().clamp(-lim, lim)),
            )
        } else {
            rate
        }
    }

    #[inline]
    pub fn rate(&self) -> Rate {
        self.bucket.rate()
    }
    /// Bucket depth in ns.
    #[inline]
    pub fn burst_ns(&self) -> i64 {
        self.bucket.depth()
    }
    /// Tokens (ns) as of the last checkpoint; may be negative.
    #[inline]
    pub fn tokens(&self) -> i64 {
        self.bucket.tokens()
    }
    /// The last checkpoint `t_c`.
    #[inline]
    pub fn checkpoint(&self) -> Instant {
        self.t_c
    }
    /// Tokens (ns) the bucket would hold at `now` (no state change).
    #[inline]
    pub fn tokens_at(&self, now: Instant) -> i64 {
        self.bucket.level_after(self.elapsed(now))
    }

    /// Nanoseconds from the checkpoint to `now` (zero if `now` is earlier), capped so that
    /// no sum overflows.
    #[inline]
    fn elapsed(&self, now: Instant) -> i64 {
        now.saturating_since(self.t_c).0.min(MAX_BURST_NS as u64) as i64
    }

    /// Most negative token level, as a duration (default [`DEFAULT_MAX_DEBT`]).
    pub fn max_debt(&self) -> Duration {
        Duration(self.floor_ns.unsigned_abs())
    }
    pub fn set_max_debt(&mut self, d: Duration) {
        self.floor_ns = -(d.0.min(MAX_BURST_NS as u64) as i64);
        let tokens = self.bucket.tokens().max(self.floor_ns);
        self.bucket = self.bucket.with_tokens(tokens);
    }

    /// Change rate and depth at run time. Tokens earned up to `now` at the old rate are
    /// kept as time (ns of transmission), clamped to the new depth.
    pub fn set_rate(&mut self, rate: Rate, burst_bytes: u32, now: Instant) {
        self.refill(now);
        let rate = Self::sane(rate);
        self.bucket
            .set_rate(rate, bytes_to_ns(rate, burst_bytes as u64));
    }

    /// Cost of a `len`-byte frame in ns (`rate.tx_ns`, overhead included).
    #[inline]
    pub fn cost_ns(&self, len: u32) -> i64 {
        self.bucket.cost(len.min(MAX_FRAME))
    }

    /// Add the time elapsed since the checkpoint, up to the depth, and move the checkpoint
    /// to `now` (never backwards).
    #[inline]
    pub fn refill(&mut self, now: Instant) {
        if now > self.t_c {
            self.bucket.refill(self.elapsed(now));
            self.t_c = now;
        }
    }

    /// Whether a `len`-byte frame conforms now (call [`refill`](Self::refill) first):
    /// `tokens >= tx_ns(len)`, or the bucket is full for a frame larger than the bucket.
    #[inline]
    pub fn conforms(&self, len: u32) -> bool {
        self.bucket.conforms(len.min(MAX_FRAME))
    }

    /// Charge a `len`-byte frame. Tokens may go negative, down to `-max_debt`.
    #[inline]
    pub fn consume(&mut self, len: u32) {
        self.bucket.consume(len.min(MAX_FRAME), self.floor_ns);
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
        let deficit = self.bucket.deficit(len.min(MAX_FRAME));
        if deficit <= 0 {
            self.t_c
        } else {
            self.t_c + Duration(deficit as u64)
        }
    }

    /// How long from `now` until a `len`-byte frame conforms (zero if it does).
    #[inline]
    pub fn time_until_conform(&self, len: u32, now: Instant) -> Duration {
        let len = len.min(MAX_FRAME);
        if self.bucket.with_tokens(self.tokens_at(now)).conforms(len) {
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
    fn earned_per_unit() {
        let r = Rate::from_bps(1_544_000);
        // Time units earn the elapsed time, in their unit; refill_ns is refill of that.
        assert_eq!(Ns::earned(&r, 7), 7);
        assert_eq!(Ps::earned(&r, 7), 7_000);
        assert_eq!(Ns::earned(&r, u64::MAX), i64::MAX);
        assert_eq!(Ps::earned(&r, u64::MAX / 10), i64::MAX);
        let mut a = Bucket::<Ps>::new(r, 1500);
        let mut b = a;
        a.consume(1000, 0);
        b.consume(1000, 0);
        a.refill_ns(123);
        b.refill(123_000);
        assert_eq!(a, b);
        // Exact: 1 ns at 1.544 Mbit/s earns 1,544,000 nano-bits; a byte costs 8e9.
        assert_eq!(Exact::earned(&r, 1), 1_544_000);
        assert_eq!(Exact::earned(&r, 5_182), 8_001_008_000);
        assert_eq!(Exact::cost(&r, 1), 8_000_000_000);
        assert_eq!(Exact::cost(&r, 1500), 12_000_000_000_000);
        assert_eq!(
            Exact::cost(&Rate::with_overhead(r.bps(), 24), 1500),
            1524 * EXACT_PER_BYTE
        );
        // Saturation, never overflow: 10^6 s at 100 Gbit/s, a 4 GB frame.
        let fast = Rate::from_bps(100_000_000_000);
        assert_eq!(Exact::earned(&fast, 1_000_000_000_000_000), i64::MAX);
        assert_eq!(Exact::cost(&fast, u32::MAX), i64::MAX as u64);
        assert!(
            (MAX_EXACT_BURST as u64 * EXACT_PER_BYTE) < (1 << 62),
            "two full buckets fit in an i64"
        );
    }

    #[test]
    fn exact_bucket_decides_on_the_fluid_count() {
        // 1.544 Mbit/s: a byte takes 8e9 / 1.544e6 = 5181.35 ns. An emptied 1-byte bucket
        // covers a byte again after ceil(5181.35) = 5182 ns, not one ns earlier.
        let mut b = Bucket::<Exact>::new(Rate::from_bps(1_544_000), 1);
        assert_eq!(b.depth(), 8_000_000_000);
        assert!(b.covers(1) && !b.covers(2));
        assert!(
            b.conforms(2),
            "conforms lets an oversized frame through a full bucket"
        );
        b.consume(1, 0);
        assert_eq!(b.tokens(), 0);
        b.refill_ns(5_181);
        assert_eq!(b.tokens(), 7_999_464_000);
        assert!(!b.covers(1));
        b.refill_ns(1);
        assert!(b.covers(1));
        assert_eq!(b.tokens(), 8_000_000_000, "capped at the depth");
    }

    #[test]
    fn refill_spill_returns_the_overflow() {
        // 8 Mbit/s (a byte per us), 3000-byte bucket holding 1000 bytes.
        let mut b = Bucket::<Exact>::new(Rate::from_bps(8_000_000), 3000);
        b.consume(2000, 0);
        assert_eq!(b.refill_spill(1500 * EXACT_PER_BYTE as i64), 0);
        assert_eq!(b.tokens(), 2500 * EXACT_PER_BYTE as i64);
        let e = b.earned(1_000_000); // 1 ms = 1000 bytes; 500 fit
        assert_eq!(b.refill_spill(e), 500 * EXACT_PER_BYTE as i64);
        assert_eq!(b.tokens(), b.depth());
        // Saturated earnings spill i64::MAX - depth.
        assert_eq!(b.refill_spill(i64::MAX), i64::MAX - b.depth());
        assert_eq!(b.tokens(), b.depth());
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
