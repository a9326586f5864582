//! Distribution summaries of per-packet measurements (delays, inter-frame gaps): the
//! percentile definition every lab uses, [`DistUs`] (count, mean, population std, min,
//! p10/p50/p90/p99, max, in µs) and [`Pcts`], its form in result files with `None` where a
//! value is undefined.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Percentile `p` (0..=100) of `sorted` (ascending) by linear interpolation between the
/// closest ranks — numpy's default (`method="linear"`), Hyndman & Fan type 7: with `n`
/// values, rank `h = p/100 · (n − 1)` (0-based), result
/// `sorted[⌊h⌋] + (h − ⌊h⌋) · (sorted[⌊h⌋+1] − sorted[⌊h⌋])`. Example: the 10th percentile
/// of 1..=10 is 1.9. `p` is clamped to 0..=100; NaN for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
    let lo = h.floor() as usize;
    if lo + 1 >= n {
        return sorted[n - 1];
    }
    let frac = h - lo as f64;
    sorted[lo] + frac * (sorted[lo + 1] - sorted[lo])
}

/// The empirical CDF of `values` as points (x, fraction of values ≤ x): the finite values
/// ascending, the k-th (from 1) of n at k / n. Empty for no finite value. Example: 3, 1, 2
/// gives (1, 1/3), (2, 2/3), (3, 1).
pub fn ecdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(k, &x)| (x, (k + 1) as f64 / n))
        .collect()
}

/// A distribution summary, in µs. Empty input: `count` 0 and every value NaN (JSON `null`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct DistUs {
    /// Number of values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Smallest.
    pub min: f64,
    /// 10th percentile ([`percentile`]).
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl DistUs {
    /// Summarises values given in ns.
    pub fn from_ns(ns: &[i64]) -> DistUs {
        let mut v: Vec<f64> = ns.iter().map(|&x| x as f64 / 1e3).collect();
        v.sort_unstable_by(f64::total_cmp);
        DistUs::from_sorted(&v)
    }

    /// Summarises ascending values (already in µs).
    pub fn from_sorted(v: &[f64]) -> DistUs {
        let n = v.len();
        if n == 0 {
            return DistUs {
                count: 0,
                mean: f64::NAN,
                std: f64::NAN,
                min: f64::NAN,
                p10: f64::NAN,
                p50: f64::NAN,
                p90: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        DistUs {
            count: n,
            mean,
            std: var.sqrt(),
            min: v[0],
            p10: percentile(v, 10.0),
            p50: percentile(v, 50.0),
            p90: percentile(v, 90.0),
            p99: percentile(v, 99.0),
            max: v[n - 1],
        }
    }
}

impl fmt::Display for DistUs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p10 {:.2} p50 {:.2} p90 {:.2} p99 {:.2} (mean {:.2} std {:.2} min {:.2} max {:.2}) µs",
            self.p10, self.p50, self.p90, self.p99, self.mean, self.std, self.min, self.max
        )
    }
}

/// Percentiles in µs (`None` where undefined, e.g. no packets).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pcts {
    pub count: usize,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<f64>,
    pub p10: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub max: Option<f64>,
}

impl From<&DistUs> for Pcts {
    fn from(d: &DistUs) -> Pcts {
        let f = |x: f64| x.is_finite().then_some(x);
        Pcts {
            count: d.count,
            mean: f(d.mean),
            std: f(d.std),
            min: f(d.min),
            p10: f(d.p10),
            p50: f(d.p50),
            p90: f(d.p90),
            max: f(d.max),
        }
    }
}

impl Pcts {
    /// p90 − p10.
    pub fn spread(&self) -> Option<f64> {
        Some(self.p90? - self.p10?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecdf_by_hand() {
        let third = 1.0 / 3.0;
        assert_eq!(
            ecdf(&[3.0, f64::NAN, 1.0, 2.0]),
            [(1.0, third), (2.0, 2.0 * third), (3.0, 1.0)]
        );
        assert!(ecdf(&[f64::NAN]).is_empty());
    }

    #[test]
    fn percentile_numpy_linear() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // numpy.percentile(range(1, 11), [0, 10, 25, 50, 90, 100]) = 1, 1.9, 3.25, 5.5, 9.1, 10
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(percentile(&v, 0.0), 1.0));
        assert!(close(percentile(&v, 10.0), 1.9));
        assert!(close(percentile(&v, 25.0), 3.25));
        assert!(close(percentile(&v, 50.0), 5.5));
        assert!(close(percentile(&v, 90.0), 9.1));
        assert!(close(percentile(&v, 100.0), 10.0));
        // Out-of-range p is clamped.
        assert!(close(percentile(&v, 150.0), 10.0));
        // [15, 20, 35, 40, 50]: p40 → h = 1.6 → 20 + 0.6·15 = 29.
        assert!(close(
            percentile(&[15.0, 20.0, 35.0, 40.0, 50.0], 40.0),
            29.0
        ));
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn dist_from_ns() {
        // 1..=10 µs given in ns, unsorted.
        let ns: Vec<i64> = [5, 1, 9, 3, 7, 2, 10, 4, 8, 6]
            .iter()
            .map(|x| x * 1000)
            .collect();
        let d = DistUs::from_ns(&ns);
        assert_eq!(d.count, 10);
        assert!((d.mean - 5.5).abs() < 1e-12);
        assert!((d.p10 - 1.9).abs() < 1e-12);
        assert!((d.p50 - 5.5).abs() < 1e-12);
        assert!((d.p90 - 9.1).abs() < 1e-12);
        assert_eq!((d.min, d.max), (1.0, 10.0));
        // Population std of 1..=10: sqrt(8.25).
        assert!((d.std - 8.25f64.sqrt()).abs() < 1e-12);
        let e = DistUs::from_ns(&[]);
        assert_eq!(e.count, 0);
        assert!(e.p50.is_nan());
        // NaN serialises as null.
        let j = serde_json::to_value(e).unwrap();
        assert!(j["p50"].is_null());
    }
}
