//! Connection health per class: a histogram of TCP round-trip times and a count of
//! retransmitted segments, kept by each direction's pipeline for each of its classes
//! (`weir stats`, `/metrics`, the live page).
//!
//! # What a sample is
//! The connection table times TCP segments in both directions ([`super::tcp`]): each
//! sample is one *half* of the path, middle box → an endpoint → middle box. A sample
//! here is the **end-to-end RTT** at that moment: the half just measured plus the other
//! half's smoothed RTT (`srtt`, RFC 6298 §2) — what the endpoints' own TCP would see,
//! weir's own queueing included (a segment is timed when weir receives it, before its
//! queues). A half sample whose other half has no estimate yet (the first sample of a
//! connection: SYN → SYN-ACK) gives no end-to-end value and is not recorded
//! ([`super::ConnStats::rtt_samples`] counts every half,
//! [`super::ConnStats::rtt_end_to_end`] the recorded ones).
//!
//! The sample belongs to the class of the packet that completed it, in the direction
//! it travels (ACKs of an upload complete the WAN half; with timestamps, the uploader's
//! data completes the LAN half): a direction that classifies records it under that class,
//! one that does not (or a class number beyond its classes) under `unclassified`. So
//! `rtt_end_to_end` = Σ over both directions (Σ classes' counts + unclassified count),
//! until a policy reload starts a direction's counters afresh.
//!
//! # Retransmissions
//! A TCP segment that carries sequence space its sender had already sent (its sequence
//! number below the highest sent plus one, with data, SYN or FIN: [`super::Observed::
//! retransmission`]) is counted for the class of that segment. Reordering upstream of
//! weir looks the same and is counted too.
//!
//! # Buckets
//! [`BOUNDS_US`]: 53 upper bounds, log-spaced at four per octave from 0.5 ms to
//! 4.096 s (`500 µs × 2^(k/4)`, k = 0..=52, rounded to the µs), then +Inf; a sample goes
//! in the first bucket whose bound is ≥ it (Prometheus's `le`). Four per octave keep a
//! quantile interpolated within a bucket within ±9.5 % of the bucket's lower bound at
//! worst (the bucket's half-width); ~20 buckets over the same range would be ±26 %.
//! Counts are per bucket (not cumulative); `sum_us` is the sum of the samples in µs.
//!
//! # Quantiles
//! [`RttHistogram::quantile_us`] as Prometheus's `histogram_quantile`: the rank `q ×
//! count`, the first bucket whose cumulative count reaches it, linear interpolation
//! between that bucket's lower bound (the previous bound, 0 for the first) and its upper
//! bound; a rank in the +Inf bucket gives the highest finite bound.
//!
//! # Cost
//! Per sample a binary search over 53 bounds (6 compares) and three adds; samples come
//! at most once per round trip per connection and direction. Memory: 54 × 8 bytes per
//! class, allocated when the pipeline is built. No allocation per packet.

use super::Observed;
use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// Upper bounds of the finite buckets, µs: `round(500 × 2^(k/4))`, k = 0..=52.
pub const BOUNDS_US: [u32; 53] = [
    500, 595, 707, 841, 1000, 1189, 1414, 1682, 2000, 2378, 2828, 3364, 4000, 4757, 5657, 6727,
    8000, 9514, 11314, 13454, 16000, 19027, 22627, 26909, 32000, 38055, 45255, 53817, 64000, 76109,
    90510, 107635, 128000, 152219, 181019, 215269, 256000, 304437, 362039, 430539, 512000, 608874,
    724077, 861078, 1024000, 1217748, 1448155, 1722156, 2048000, 2435496, 2896309, 3444312,
    4096000,
];

/// Buckets, the +Inf one included.
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

/// A histogram of RTT samples; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RttHistogram {
    /// Samples per bucket (not cumulative), [`BUCKETS`] of them, the last +Inf.
    pub counts: Vec<u64>,
    /// Samples in all.
    pub count: u64,
    /// Their sum, µs.
    pub sum_us: u64,
}

impl Default for RttHistogram {
    fn default() -> Self {
        RttHistogram {
            counts: vec![0; BUCKETS],
            count: 0,
            sum_us: 0,
        }
    }
}

impl RttHistogram {
    /// The bucket of a sample of `us` microseconds.
    #[inline]
    pub fn bucket_of(us: u64) -> usize {
        BOUNDS_US.partition_point(|&b| (b as u64) < us)
    }

    /// Count one sample.
    #[inline]
    pub fn record(&mut self, rtt: Duration) {
        let us = rtt.0 / 1000;
        if let Some(c) = self.counts.get_mut(Self::bucket_of(us)) {
            *c += 1;
            self.count += 1;
            self.sum_us += us;
        }
    }

    /// The `q` quantile (0..=1) in µs, interpolated within its bucket (see the module
    /// documentation); `None` without samples.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count as f64;
        let mut below = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let Some(&hi) = BOUNDS_US.get(i) else {
                    return Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64);
                };
                let lo = if i == 0 { 0.0 } else { BOUNDS_US[i - 1] as f64 };
                let frac = ((rank - below as f64) / n as f64).max(0.0);
                return Some(lo + (hi as f64 - lo) * frac);
            }
            below += n;
        }
        Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64)
    }

    /// The mean sample in µs; `None` without samples.
    pub fn mean_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_us as f64 / self.count as f64)
    }
}

/// One class's TCP health: RTT samples and retransmitted segments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClassTcp {
    /// End-to-end RTT samples completed by this class's packets.
    pub rtt: RttHistogram,
    /// This class's segments that carried sequence space already sent.
    pub retransmits: u64,
}

impl ClassTcp {
    /// Whether anything was counted.
    pub fn is_empty(&self) -> bool {
        self.rtt.count == 0 && self.retransmits == 0
    }

    /// One line for `weir stats`: `rtt p50 41.7 ms, p95 51.7 ms, mean 42.0 ms (10
    /// samples); 3 retransmits` (`rtt -` without samples).
    pub fn summary(&self) -> String {
        let ms = |us: Option<f64>| us.map_or("-".into(), |u| format!("{:.1} ms", u / 1e3));
        let h = &self.rtt;
        let rtt = if h.count == 0 {
            "rtt -".to_string()
        } else {
            format!(
                "rtt p50 {}, p95 {}, mean {} ({} samples)",
                ms(h.quantile_us(0.5)),
                ms(h.quantile_us(0.95)),
                ms(h.mean_us()),
                h.count
            )
        };
        format!("{rtt}; {} retransmits", self.retransmits)
    }

    /// Count what one segment did.
    #[inline]
    pub fn record(&mut self, o: &Observed) {
        if let Some(rtt) = o.rtt_total {
            self.rtt.record(rtt);
        }
        self.retransmits += o.retransmission as u64;
    }
}

/// A direction's [`ClassTcp`] per class, and those of packets it does not classify.
#[derive(Clone, Debug, Default)]
pub struct TcpHealth {
    classes: Vec<ClassTcp>,
    unclassified: ClassTcp,
}

impl TcpHealth {
    /// For `classes` classes (numbered from 0).
    pub fn new(classes: usize) -> TcpHealth {
        TcpHealth {
            classes: vec![ClassTcp::default(); classes],
            unclassified: ClassTcp::default(),
        }
    }

    /// Count segment `o` for class `class` (`None`: not classified).
    #[inline]
    pub fn record(&mut self, class: Option<u32>, o: &Observed) {
        if o.rtt_total.is_none() && !o.retransmission {
            return;
        }
        let c = class
            .and_then(|c| self.classes.get_mut(c as usize))
            .unwrap_or(&mut self.unclassified);
        c.record(o);
    }

    /// Class `class`'s counters (`None` beyond the classes).
    pub fn class(&self, class: u32) -> Option<&ClassTcp> {
        self.classes.get(class as usize)
    }

    /// The counters of packets not classified (or of an unknown class).
    pub fn unclassified(&self) -> &ClassTcp {
        &self.unclassified
    }

    /// Recorded samples, all classes and the unclassified.
    pub fn samples(&self) -> u64 {
        self.classes.iter().map(|c| c.rtt.count).sum::<u64>() + self.unclassified.rtt.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_four_per_octave_from_half_a_millisecond() {
        for (k, &b) in BOUNDS_US.iter().enumerate() {
            let want = (500.0 * 2f64.powf(k as f64 / 4.0)).round() as u32;
            assert_eq!(b, want, "bound {k}");
        }
        assert_eq!(BOUNDS_US[52], 4_096_000);
        assert_eq!(BUCKETS, 54);
    }

    #[test]
    fn samples_go_to_the_first_bound_at_or_above() {
        assert_eq!(RttHistogram::bucket_of(0), 0);
        assert_eq!(RttHistogram::bucket_of(500), 0, "le is inclusive");
        assert_eq!(RttHistogram::bucket_of(501), 1);
        assert_eq!(RttHistogram::bucket_of(38_055), 25);
        assert_eq!(RttHistogram::bucket_of(40_000), 26, "(38055, 45255]");
        assert_eq!(RttHistogram::bucket_of(4_096_000), 52);
        assert_eq!(RttHistogram::bucket_of(4_096_001), 53, "+Inf");
        let mut h = RttHistogram::default();
        h.record(Duration::from_micros(40_123));
        h.record(Duration::from_secs(61));
        assert_eq!((h.count, h.sum_us), (2, 40_123 + 61_000_000));
        assert_eq!((h.counts[26], h.counts[53]), (1, 1));
        assert_eq!(h.mean_us(), Some((40_123.0 + 61e6) / 2.0));
    }

    /// 10 samples: 2 in (26909, 32000], 6 in (38055, 45255], 2 in (45255, 53817].
    /// p50: rank 5, 2 below the middle bucket → 38055 + 7200 × 3/6 = 41655 µs.
    /// p95: rank 9.5, 8 below the last → 45255 + 8562 × 1.5/2 = 51676.5 µs.
    /// p10: rank 1 in the first → 26909 + 5091 × 1/2 = 29454.5 µs.
    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let mut h = RttHistogram::default();
        for us in [
            30_000, 31_000, 39_000, 40_000, 41_000, 42_000, 43_000, 44_000, 50_000, 53_000,
        ] {
            h.record(Duration::from_micros(us));
        }
        assert_eq!((h.counts[24], h.counts[26], h.counts[27]), (2, 6, 2));
        assert_eq!(h.quantile_us(0.5), Some(41_655.0));
        assert_eq!(h.quantile_us(0.95), Some(51_676.5));
        assert_eq!(h.quantile_us(0.1), Some(29_454.5));
        assert_eq!(h.quantile_us(1.0), Some(53_817.0));
        // the first bucket starts at 0; the +Inf bucket gives the highest finite bound
        let mut h = RttHistogram::default();
        h.record(Duration::from_micros(100));
        h.record(Duration::from_micros(300));
        assert_eq!(h.quantile_us(0.5), Some(250.0));
        h.record(Duration::from_secs(10));
        assert_eq!(h.quantile_us(0.99), Some(4_096_000.0));
        assert_eq!(RttHistogram::default().quantile_us(0.5), None);
    }

    #[test]
    fn summary_line() {
        let mut c = ClassTcp::default();
        assert_eq!(c.summary(), "rtt -; 0 retransmits");
        for us in [
            30_000, 31_000, 39_000, 40_000, 41_000, 42_000, 43_000, 44_000, 50_000, 53_000,
        ] {
            c.rtt.record(Duration::from_micros(us));
        }
        c.retransmits = 3;
        assert_eq!(
            c.summary(),
            "rtt p50 41.7 ms, p95 51.7 ms, mean 41.3 ms (10 samples); 3 retransmits"
        );
    }

    #[test]
    fn a_direction_counts_per_class_and_the_rest() {
        let mut t = TcpHealth::new(2);
        let sample = Observed {
            rtt_total: Some(Duration::from_millis(40)),
            ..Observed::default()
        };
        let rx = Observed {
            retransmission: true,
            ..Observed::default()
        };
        t.record(Some(1), &sample);
        t.record(Some(1), &rx);
        t.record(Some(7), &sample);
        t.record(None, &sample);
        t.record(Some(0), &Observed::default());
        assert_eq!(t.class(0), Some(&ClassTcp::default()));
        let c1 = t.class(1).unwrap();
        assert_eq!(
            (c1.rtt.count, c1.rtt.sum_us, c1.retransmits),
            (1, 40_000, 1)
        );
        assert_eq!(t.unclassified().rtt.count, 2);
        assert_eq!(t.samples(), 3);
        assert!(t.class(2).is_none());
    }
}
