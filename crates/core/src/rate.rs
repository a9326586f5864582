//! Link and class rates, and the conversion between bytes and transmission time.
//!
//! A `Rate` is in bits per second. Converting a length to nanoseconds on the hot path uses
//! a precomputed multiplier and shift (as Linux `psched_ratecfg_precompute` does), so it is
//! one multiply and one shift: `ns = (bytes * mult) >> shift`, with at least 31 significant
//! bits in `mult` (relative error < 2^-31). A frame's length is first turned into the bytes
//! it occupies on the link by the rate's [`Framing`] ([`crate::framing`]): a per-frame
//! overhead (e.g. 24 for Ethernet preamble + SFD + IFG + FCS, as the policy says: one add),
//! a minimum packet unit, ATM cells or PTM coding (a division by a constant).

use crate::framing::Framing;
use crate::time::Duration;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    bps: u64,
    mult: u64,
    shift: u32,
    /// The same conversion to picoseconds (for token buckets at high rates, where a
    /// nanosecond is a large fraction of a small frame's transmission time).
    mult_ps: u64,
    shift_ps: u32,
    /// How a frame's length becomes bytes on the link: an overhead added to each frame
    /// (may be negative, e.g. to discount an Ethernet header on a link that does not carry
    /// one), a minimum, cells.
    framing: Framing,
}

impl Rate {
    /// A rate of `bps` bits per second. `bps` must be > 0.
    pub fn from_bps(bps: u64) -> Self {
        Self::with_overhead(bps, 0)
    }

    /// A rate whose frames each count `overhead` more bytes (at least one byte).
    pub fn with_overhead(bps: u64, overhead: i32) -> Self {
        Self::with_framing(bps, Framing::plain(overhead))
    }

    /// A rate whose frames count as `framing` says.
    pub fn with_framing(bps: u64, framing: Framing) -> Self {
        assert!(bps > 0, "rate must be positive");
        let (mult, shift) = Self::precompute(8_000_000_000, bps);
        let (mult_ps, shift_ps) = Self::precompute(8_000_000_000_000, bps);
        Rate {
            bps,
            mult,
            shift,
            mult_ps,
            shift_ps,
            framing,
        }
    }

    /// Time per byte = `unit_per_sec * 8 / bps` as `mult / 2^shift`: the largest shift
    /// such that `mult` still fits in 32 bits (so `len (<= 2^20) * mult` cannot overflow
    /// u64); slow rates whose per-byte time already exceeds 32 bits get shift 0.
    fn precompute(bits_unit_per_sec: u128, bps: u64) -> (u64, u32) {
        let mut shift = 0u32;
        let mut mult = bits_unit_per_sec / bps as u128;
        while shift < 63 {
            let m = (bits_unit_per_sec << (shift + 1)) / bps as u128;
            if m >= (1u128 << 32) {
                break;
            }
            shift += 1;
            mult = m;
        }
        (mult as u64, shift)
    }

    #[inline]
    pub fn bps(&self) -> u64 {
        self.bps
    }
    /// The framing's per-frame overhead.
    #[inline]
    pub fn overhead(&self) -> i32 {
        self.framing.overhead()
    }
    #[inline]
    pub fn framing(&self) -> Framing {
        self.framing
    }
    /// Bytes per second (bps / 8, rounded down).
    #[inline]
    pub fn bytes_per_sec(&self) -> u64 {
        self.bps / 8
    }

    /// Length as accounted: the framing's (frame length plus overhead, at least 1, ...).
    #[inline]
    pub fn wire_len(&self, len: u32) -> u64 {
        self.framing.wire_len(len) as u64
    }

    /// Nanoseconds to transmit a `len`-byte frame at this rate (overhead included).
    #[inline]
    pub fn tx_ns(&self, len: u32) -> u64 {
        (self.wire_len(len) * self.mult) >> self.shift
    }

    /// Picoseconds to transmit a `len`-byte frame (overhead included).
    #[inline]
    pub fn tx_ps(&self, len: u32) -> u64 {
        (self.wire_len(len) * self.mult_ps) >> self.shift_ps
    }

    #[inline]
    pub fn tx_time(&self, len: u32) -> Duration {
        Duration(self.tx_ns(len))
    }

    /// Bytes (before overhead) that `d` worth of this rate carries; for bursts and limits.
    pub fn bytes_in(&self, d: Duration) -> u64 {
        ((d.0 as u128 * self.bps as u128) / 8_000_000_000u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_time_hand_computed() {
        // 1500 bytes at 1.544 Mbit/s: 12000 bits / 1.544e6 = 7.772020...ms
        let t1 = Rate::from_bps(1_544_000);
        let ns = t1.tx_ns(1500);
        assert!((ns as i64 - 7_772_020).abs() <= 1, "{ns}");
        // 1518 bytes at 155 Mbit/s = 78.348 us (seed 002's serialisation time)
        let oc3 = Rate::from_bps(155_000_000);
        assert!((oc3.tx_ns(1518) as i64 - 78_348).abs() <= 1);
        // 64 bytes at 100 Gbit/s = 5.12 ns
        let fast = Rate::from_bps(100_000_000_000);
        assert_eq!(fast.tx_ns(64), 5);
        // 20 kbit/s: 1 byte = 400 us exactly
        let slow = Rate::from_bps(20_000);
        assert_eq!(slow.tx_ns(1), 400_000);
        assert_eq!(slow.tx_ns(1500), 600_000_000);
    }

    #[test]
    fn picoseconds_keep_small_frames_exact_at_high_rates() {
        // 64 bytes at 100 Gbit/s = 5.12 ns: the ns conversion says 5, the ps one 5120
        let r = Rate::from_bps(100_000_000_000);
        assert_eq!(r.tx_ps(64), 5_120);
        assert_eq!(r.tx_ps(1514), 121_120);
        // slow rates do not overflow: 1500 bytes at 1 kbit/s = 12 s
        let slow = Rate::from_bps(1_000);
        assert_eq!(slow.tx_ps(1500), 12_000_000_000_000);
        assert_eq!(
            Rate::from_bps(1_544_000).tx_ps(1500) / 1000,
            Rate::from_bps(1_544_000).tx_ns(1500)
        );
    }

    #[test]
    fn overhead_is_added() {
        let r = Rate::with_overhead(8_000_000, 24); // 1 byte per us
        assert_eq!(r.tx_ns(100), 124_000);
        assert_eq!(r.bytes_in(Duration::from_millis(1)), 1000);
        let neg = Rate::with_overhead(8_000_000, -14);
        assert_eq!(neg.tx_ns(10), 1_000, "never below one byte");
    }

    #[test]
    fn framing_is_applied_before_the_conversion() {
        // pppoa-vcmux: a 1514-byte frame (1500-byte IP packet) is 32 ATM cells, 1696 bytes:
        // 1696 us at 1 byte per us
        let f = Framing::cake("pppoa-vcmux").unwrap();
        let r = Rate::with_framing(8_000_000, f);
        assert_eq!(r.wire_len(1514), 1696);
        assert_eq!(r.tx_ns(1514), 1_696_000);
        assert_eq!(r.tx_ps(1514), 1_696_000_000);
        assert_eq!((r.framing(), r.overhead()), (f, -4));
        // the plain case is with_overhead
        assert_eq!(
            Rate::with_overhead(8_000_000, 24),
            Rate::with_framing(8_000_000, Framing::plain(24))
        );
    }

    #[test]
    fn relative_error_is_tiny_across_range() {
        for bps in [
            1_000u64,
            5_000,
            125_000,
            1_544_000,
            10_000_000,
            1_000_000_000,
            400_000_000_000,
        ] {
            let r = Rate::from_bps(bps);
            let exact = 1500.0 * 8e9 / bps as f64;
            let got = r.tx_ns(1500) as f64;
            assert!(
                (got - exact).abs() <= 1.0 + exact * 1e-8,
                "{bps}: {got} vs {exact}"
            );
        }
    }
}
