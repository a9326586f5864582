//! The token-bucket-filter shaper [`Tbf`] (Linux `sch_tbf`; the two buckets play the roles
//! of RFC 2698's committed and peak buckets, and a packet is sent only when it conforms to
//! both): a drop-tail FIFO whose head packet is released only when it conforms to the rate
//! bucket (`rate`, `burst`) and, if a peak rate is configured, also to the peak bucket
//! (`peak`, depth `mtu` bytes), which limits the speed at which the burst is sent. Both are
//! [`TokenBucket`]s (tokens in ns of transmission time, see
//! [`crate::meter::token_bucket`]). Non-work-conserving: when `dequeue` returns `None`
//! while packets are held, `next_wakeup()` is the instant the head conforms.
//!
//! Parameters ([`TbfConfig`]): `rate_bps` (bit/s, >= 8), `burst` (bytes, >= `mtu`),
//! `peak_bps` (bit/s, > `rate_bps`, default none), `mtu` (bytes, default 1514 = Ethernet
//! frame without FCS), `overhead` (bytes per frame, default 0, within +-4096),
//! `limit_packets` (default 1000), `limit_bytes` (default unlimited). Arrivals beyond the
//! limits are refused with [`DropCause::QueueFull`] / [`DropCause::ByteLimit`].
//!
//! Over any interval `[t0, t1]` the bytes released (overhead included) are at most
//! `burst + rate (t1 - t0)` and, with a peak bucket, at most `mtu + peak (t1 - t0)`, up to
//! rounding: `tx_ns` rounds each frame's cost down to a whole ns, so the long-run rate may
//! exceed the configured one by less than 1 ns per frame plus `Rate`'s 2^-31 (e.g. 2e-5
//! for 333-byte frames at 123 Mbit/s; zero when the time per byte is a whole number of ns,
//! as at 1 Mbit/s).
//!
//! Statistics: none of its own; wrap in [`crate::Counted`].
//!
//! Invariants: a `Tbf` holding packets always has `next_wakeup() == Some(instant its head
//! conforms)` (an instant at or before the current time means "now") and `None` when
//! empty; its buckets' (see [`TokenBucket`]).

use crate::meter::token_bucket::{TokenBucket, MAX_FRAME};
use crate::pool::PktId;
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::fifo::{Fifo, Limits};
use crate::rate::Rate;
use crate::time::Instant;

/// Configuration of a [`Tbf`] (see the module comment for units and defaults).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TbfConfig {
    /// Sustained rate, bit/s.
    pub rate_bps: u64,
    /// Depth of the rate bucket, bytes.
    pub burst: u32,
    /// Peak rate, bit/s (bucket depth `mtu`), or `None`.
    pub peak_bps: Option<u64>,
    /// Largest frame expected, bytes.
    pub mtu: u32,
    /// Bytes added to every frame for rate accounting.
    pub overhead: i32,
    /// Hard queue limit, packets.
    pub limit_packets: u32,
    /// Hard queue limit, bytes.
    pub limit_bytes: u64,
}

impl TbfConfig {
    pub const DEFAULT_MTU: u32 = 1514;
    pub const DEFAULT_LIMIT_PACKETS: u32 = 1000;
    pub const MAX_OVERHEAD: i32 = 4096;

    /// `rate_bps` with a `burst`-byte bucket and the defaults: no peak rate, MTU 1514,
    /// overhead 0, 1000 packets, unlimited bytes.
    pub fn new(rate_bps: u64, burst: u32) -> Self {
        TbfConfig {
            rate_bps,
            burst,
            peak_bps: None,
            mtu: Self::DEFAULT_MTU,
            overhead: 0,
            limit_packets: Self::DEFAULT_LIMIT_PACKETS,
            limit_bytes: Limits::UNLIMITED_BYTES,
        }
    }

    /// Check the configuration; the message names the offending parameter.
    pub fn validate(&self) -> Result<(), String> {
        if self.rate_bps < 8 {
            return Err(format!(
                "tbf: rate must be at least 8 bit/s (got {} bit/s)",
                self.rate_bps
            ));
        }
        if self.mtu == 0 || self.mtu > MAX_FRAME {
            return Err(format!(
                "tbf: mtu must be in 1..={MAX_FRAME} bytes (got {})",
                self.mtu
            ));
        }
        if self.burst < self.mtu {
            return Err(format!(
                "tbf: burst ({} bytes) must be at least the MTU ({} bytes)",
                self.burst, self.mtu
            ));
        }
        if let Some(peak) = self.peak_bps {
            if peak <= self.rate_bps {
                return Err(format!(
                    "tbf: peak rate ({peak} bit/s) must be greater than rate ({} bit/s)",
                    self.rate_bps
                ));
            }
        }
        if self.overhead.abs() > Self::MAX_OVERHEAD {
            return Err(format!(
                "tbf: overhead must be within +-{} bytes (got {})",
                Self::MAX_OVERHEAD,
                self.overhead
            ));
        }
        if self.limit_packets == 0 {
            return Err("tbf: limit_packets must be > 0".to_string());
        }
        if self.limit_bytes < self.mtu as u64 {
            return Err(format!(
                "tbf: limit_bytes ({}) must be at least the MTU ({} bytes)",
                self.limit_bytes, self.mtu
            ));
        }
        Ok(())
    }
}

/// Token-bucket-filter shaper: a drop-tail FIFO released at a rate with a burst, optionally
/// also at a peak rate (see the module comment).
#[derive(Clone, Debug)]
pub struct Tbf {
    cfg: TbfConfig,
    fifo: Fifo,
    bucket: TokenBucket,
    peak: Option<TokenBucket>,
    /// Length of the head packet (valid while the FIFO is non-empty), so that
    /// `next_wakeup` needs no pool access.
    head_len: u32,
}

impl Tbf {
    /// A shaper with full buckets at `now`, or a message naming the invalid parameter.
    pub fn new(cfg: TbfConfig, now: Instant) -> Result<Self, String> {
        cfg.validate()?;
        let (bucket, peak) = Self::buckets(&cfg, now);
        Ok(Tbf {
            cfg,
            fifo: Fifo::new(cfg.limit_packets, cfg.limit_bytes),
            bucket,
            peak,
            head_len: 0,
        })
    }

    fn buckets(cfg: &TbfConfig, now: Instant) -> (TokenBucket, Option<TokenBucket>) {
        let bucket = TokenBucket::new(
            Rate::with_overhead(cfg.rate_bps, cfg.overhead),
            cfg.burst,
            now,
        );
        let peak = cfg
            .peak_bps
            .map(|p| TokenBucket::new(Rate::with_overhead(p, cfg.overhead), cfg.mtu, now));
        (bucket, peak)
    }

    pub fn config(&self) -> &TbfConfig {
        &self.cfg
    }

    /// Replace the configuration at run time. Held packets are kept (even beyond lowered
    /// limits); token levels carry over, clamped to the new depths.
    pub fn reconfigure(&mut self, cfg: TbfConfig, now: Instant) -> Result<(), String> {
        cfg.validate()?;
        self.bucket.set_rate(
            Rate::with_overhead(cfg.rate_bps, cfg.overhead),
            cfg.burst,
            now,
        );
        self.peak = match (cfg.peak_bps, self.peak.take()) {
            (None, _) => None,
            (Some(p), Some(mut b)) => {
                b.set_rate(Rate::with_overhead(p, cfg.overhead), cfg.mtu, now);
                Some(b)
            }
            (Some(p), None) => Some(TokenBucket::new(
                Rate::with_overhead(p, cfg.overhead),
                cfg.mtu,
                now,
            )),
        };
        self.fifo
            .set_limits(Limits::new(cfg.limit_packets, cfg.limit_bytes));
        self.cfg = cfg;
        Ok(())
    }

    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }

    pub fn peak_bucket(&self) -> Option<&TokenBucket> {
        self.peak.as_ref()
    }

    pub fn head(&self) -> Option<PktId> {
        self.fifo.head()
    }

    /// Instant at which a `len`-byte head conforms to every bucket.
    #[inline]
    fn ready_at(&self, len: u32) -> Instant {
        let t = self.bucket.conform_at(len);
        match &self.peak {
            Some(p) => t.max(p.conform_at(len)),
            None => t,
        }
    }
}

impl Qdisc for Tbf {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let len = cx.pool.len(pkt);
        self.fifo.try_push(cx.pool, pkt)?;
        if self.fifo.len() == 1 {
            self.head_len = len;
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.fifo.head()?;
        let len = self.head_len;
        self.bucket.refill(cx.now);
        let mut ok = self.bucket.conforms(len);
        if let Some(p) = &mut self.peak {
            p.refill(cx.now);
            ok &= p.conforms(len);
        }
        if !ok {
            return None;
        }
        let id = self.fifo.pop(cx.pool)?;
        self.bucket.consume(len);
        if let Some(p) = &mut self.peak {
            p.consume(len);
        }
        if let Some(h) = self.fifo.head() {
            self.head_len = cx.pool.len(h);
        }
        Some(id)
    }

    fn next_wakeup(&self) -> Option<Instant> {
        self.fifo.head().map(|_| self.ready_at(self.head_len))
    }

    fn len(&self) -> usize {
        self.fifo.len()
    }

    fn bytes(&self) -> u64 {
        self.fifo.bytes()
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.fifo.drain_to(cx, cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Counted;
    use crate::rng::Rng;

    const MS: u64 = 1_000_000;

    fn pkt(pool: &mut Pool, len: u32) -> PktId {
        let id = pool.alloc().expect("pool");
        pool.meta_mut(id).len = len;
        id
    }

    /// Release all `lens` (enqueued at t = 0) driving time only by `next_wakeup`; returns
    /// the departure instants in ns.
    fn departures(cfg: TbfConfig, lens: &[u32]) -> Vec<u64> {
        let mut pool = Pool::new(lens.len() as u32, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut tbf = Tbf::new(cfg, Instant::ZERO).unwrap();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for &l in lens {
            let id = pkt(cx.pool, l);
            tbf.enqueue(id, &mut cx).unwrap();
        }
        let mut out = Vec::new();
        loop {
            while let Some(id) = tbf.dequeue(&mut cx) {
                out.push(cx.now.0);
                cx.pool.free(id);
            }
            match tbf.next_wakeup() {
                Some(t) => {
                    assert!(t > cx.now, "wakeup must be in the future after a None");
                    cx.now = t;
                }
                None => break,
            }
        }
        assert!(Qdisc::is_empty(&tbf));
        out
    }

    #[test]
    fn tbf_hand_computed_departures() {
        // 1 Mbit/s, 1500-byte bucket (12 ms), ten 1000-byte packets (8 ms each) at t = 0.
        // t=0: 12 -> 4 ms of tokens. The second needs 8: 4 ms later (t = 4 ms), leaving 0;
        // from then on one per 8 ms: 12, 20, ..., 68 ms.
        let cfg = TbfConfig {
            mtu: 1500,
            ..TbfConfig::new(1_000_000, 1500)
        };
        let got = departures(cfg, &[1000; 10]);
        let want: Vec<u64> = [0, 4, 12, 20, 28, 36, 44, 52, 60, 68]
            .iter()
            .map(|ms| ms * MS)
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn tbf_peak_rate_hand_computed() {
        // rate 1 Mbit/s (8 ms per 1000 B), burst 10000 B (80 ms); peak 2 Mbit/s (4 ms per
        // 1000 B), peak bucket = MTU 1500 B (6 ms).
        // Peak bucket: t=0 (6 -> 2), t=2 (4 -> 0), then every 4 ms: t_k = 4k - 2 ms.
        // Rate bucket before packet k at t_k: 80 + t_k - 8k = 78 - 4k >= 8 while k <= 17.
        // k = 18: peak allows 70 ms, rate has 80 + 70 - 144 = 6 ms, needs 8: t = 72 ms.
        // Then the rate bucket is empty and governs: 80, 88 ms.
        let cfg = TbfConfig {
            peak_bps: Some(2_000_000),
            mtu: 1500,
            ..TbfConfig::new(1_000_000, 10_000)
        };
        let got = departures(cfg, &[1000; 21]);
        let mut want = vec![0u64];
        want.extend((1..=17u64).map(|k| (4 * k - 2) * MS));
        want.extend([72 * MS, 80 * MS, 88 * MS]);
        assert_eq!(got, want);
    }

    /// Keep the shaper backlogged for `secs` of virtual time, advancing time only to
    /// `next_wakeup`; returns (bytes released at instants <= end, packets).
    fn saturate(cfg: TbfConfig, len: u32, secs: u64) -> (u64, u64) {
        let end = Instant(secs * 1_000_000_000);
        let mut pool = Pool::new(64, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut tbf = Counted::new(Box::new(Tbf::new(cfg, Instant::ZERO).unwrap()));
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let (mut bytes, mut pkts) = (0u64, 0u64);
        loop {
            loop {
                while Qdisc::len(&tbf) < 32 {
                    let id = pkt(cx.pool, len);
                    tbf.enqueue(id, &mut cx).unwrap();
                }
                let Some(id) = tbf.dequeue(&mut cx) else {
                    break;
                };
                bytes += cx.pool.len(id) as u64;
                pkts += 1;
                cx.pool.free(id);
            }
            let t = tbf.next_wakeup().expect("backlogged");
            assert!(t > cx.now);
            if t > end {
                break;
            }
            cx.now = t;
        }
        tbf.check().unwrap();
        (bytes, pkts)
    }

    #[test]
    fn tbf_long_run_rate_accuracy() {
        // Rates whose per-byte time is not an integer number of ns, odd packet sizes.
        for (bps, burst, len) in [
            (10_000_000u64, 15_000u32, 1500u32),
            (7_777_777, 5_000, 1234),
            (123_456_789, 64_000, 333),
        ] {
            let cfg = TbfConfig::new(bps, burst);
            let (bytes, pkts) = saturate(cfg, len, 10);
            // Released over [0, 10 s]: burst + rate * 10 s, minus at most one packet.
            let expected = burst as f64 + bps as f64 * 10.0 / 8.0;
            let err = (bytes as f64 - expected).abs() / expected;
            assert!(err < 1e-3, "{bps}: {bytes} vs {expected} ({err})");
            // Costs are whole ns rounded down (`Rate::tx_ns`): at most 1 ns per packet of
            // excess (1.8e-5 of the rate for 333-byte packets at 123 Mbit/s).
            let rounding = pkts as f64 * bps as f64 / 8e9;
            assert!(
                bytes as f64 <= expected + rounding + 1.0,
                "{bps}: {bytes} above burst + rate t = {expected} (+{rounding})"
            );
            assert!(bytes as f64 > expected - len as f64 - 1.0, "{bps}");
        }
    }

    #[test]
    fn overhead_reduces_throughput_by_ratio() {
        // 100-byte frames with 24 bytes of per-frame overhead: payload throughput is
        // 100/124 of the no-overhead throughput.
        let plain = TbfConfig {
            mtu: 1500,
            ..TbfConfig::new(1_000_000, 1500)
        };
        let oh = TbfConfig {
            overhead: 24,
            ..plain
        };
        let (b0, _) = saturate(plain, 100, 10);
        let (b1, _) = saturate(oh, 100, 10);
        let ratio = b1 as f64 / b0 as f64;
        let want = 100.0 / 124.0;
        assert!(
            (ratio - want).abs() / want < 1e-3,
            "{ratio} vs {want} ({b0}, {b1})"
        );
    }

    #[test]
    fn wakeup_contract() {
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let cfg = TbfConfig {
            mtu: 1500,
            ..TbfConfig::new(1_000_000, 1500)
        };
        let mut tbf = Tbf::new(cfg, Instant::ZERO).unwrap();
        let mut cx = Ctx::new(Instant(50 * MS), &mut pool, &mut rng, &mut dropped);
        assert_eq!(tbf.next_wakeup(), None);
        assert_eq!(tbf.dequeue(&mut cx), None);
        let a = pkt(cx.pool, 1500);
        let b = pkt(cx.pool, 500);
        tbf.enqueue(a, &mut cx).unwrap();
        tbf.enqueue(b, &mut cx).unwrap();
        assert!(
            tbf.next_wakeup().unwrap() <= cx.now,
            "head conforms already"
        );
        assert_eq!(tbf.dequeue(&mut cx), Some(a));
        assert_eq!(tbf.dequeue(&mut cx), None);
        // 500 bytes = 4 ms at 1 Mbit/s from an empty bucket.
        assert_eq!(tbf.next_wakeup(), Some(Instant(54 * MS)));
        cx.now = Instant(54 * MS - 1);
        assert_eq!(tbf.dequeue(&mut cx), None);
        assert_eq!(tbf.next_wakeup(), Some(Instant(54 * MS)));
        cx.now = Instant(54 * MS);
        assert_eq!(tbf.dequeue(&mut cx), Some(b));
        assert_eq!(tbf.next_wakeup(), None);
    }

    #[test]
    fn config_validation() {
        let ok = TbfConfig::new(1_000_000, 1514);
        ok.validate().unwrap();
        let bad = |c: TbfConfig, needle: &str| {
            let e = Tbf::new(c, Instant::ZERO).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        bad(TbfConfig { rate_bps: 0, ..ok }, "rate");
        bad(TbfConfig { burst: 1513, ..ok }, "burst");
        bad(TbfConfig { mtu: 0, ..ok }, "mtu");
        bad(
            TbfConfig {
                peak_bps: Some(0),
                ..ok
            },
            "peak",
        );
        bad(
            TbfConfig {
                peak_bps: Some(1_000_000),
                ..ok
            },
            "peak",
        );
        bad(
            TbfConfig {
                overhead: -5000,
                ..ok
            },
            "overhead",
        );
        bad(
            TbfConfig {
                limit_packets: 0,
                ..ok
            },
            "limit_packets",
        );
        bad(
            TbfConfig {
                limit_bytes: 100,
                ..ok
            },
            "limit_bytes",
        );
        let mut t = Tbf::new(ok, Instant::ZERO).unwrap();
        assert!(t
            .reconfigure(TbfConfig { burst: 1, ..ok }, Instant::ZERO)
            .is_err());
        assert_eq!(t.config(), &ok);
    }

    #[test]
    fn reconfigure_keeps_packets() {
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let cfg = TbfConfig {
            mtu: 1000,
            ..TbfConfig::new(1_000_000, 1000)
        };
        let mut tbf = Tbf::new(cfg, Instant::ZERO).unwrap();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for _ in 0..3 {
            let id = pkt(cx.pool, 1000);
            tbf.enqueue(id, &mut cx).unwrap();
        }
        let id = tbf.dequeue(&mut cx).unwrap();
        cx.pool.free(id);
        assert_eq!(tbf.next_wakeup(), Some(Instant(8 * MS)));
        // Double the rate at 2 ms: 2 ms of tokens carried, 4 ms per packet now -> 4 ms.
        let fast = TbfConfig {
            rate_bps: 2_000_000,
            peak_bps: Some(4_000_000),
            ..cfg
        };
        tbf.reconfigure(fast, Instant(2 * MS)).unwrap();
        assert_eq!(Qdisc::len(&tbf), 2);
        // Peak bucket is new and full; rate bucket governs.
        assert_eq!(tbf.next_wakeup(), Some(Instant(4 * MS)));
        assert!(cx.dropped.is_empty());
    }

    #[test]
    fn counter_identities_and_limits() {
        let mut pool = Pool::new(256, 0);
        let mut rng = Rng::new(3);
        let mut dropped = Vec::new();
        let mut drive = Rng::new(4);
        let cfg = TbfConfig {
            limit_packets: 30,
            limit_bytes: 20_000,
            ..TbfConfig::new(2_000_000, 3000)
        };
        let mut tbf = Counted::new(Box::new(Tbf::new(cfg, Instant::ZERO).unwrap()));
        {
            let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
            for i in 0..20_000u64 {
                cx.now = Instant(i * 500_000);
                for _ in 0..drive.below(3) {
                    let id = pkt(cx.pool, 40 + drive.below(1475) as u32);
                    if tbf.enqueue(id, &mut cx).is_err() {
                        cx.pool.free(id);
                    }
                }
                while let Some(id) = tbf.dequeue(&mut cx) {
                    cx.pool.free(id);
                }
                tbf.check().unwrap();
            }
            assert!(tbf.stats.drops_by(DropCause::QueueFull).packets > 0);
            assert!(tbf.stats.drops_by(DropCause::ByteLimit).packets > 0);
            tbf.purge(&mut cx, DropCause::Shutdown);
            assert_eq!(tbf.next_wakeup(), None);
        }
        tbf.check().unwrap();
        for (id, _) in dropped.drain(..) {
            pool.free(id);
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn odd_lengths_never_stall_or_panic() {
        // Zero-length and oversized frames: released (oversized ones when the bucket is
        // full), never stuck.
        let cfg = TbfConfig {
            limit_bytes: u64::MAX,
            ..TbfConfig::new(1_000_000, 1514)
        };
        let got = departures(cfg, &[0, u32::MAX, 9000, 1, 70_000]);
        assert_eq!(got.len(), 5);
        assert!(got.windows(2).all(|w| w[0] <= w[1]));
    }
}
