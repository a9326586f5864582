//! Summary statistics used by the papers' tables.
//!
//! * `mean`, population standard deviation `std_pop` (divide by n) and sample standard
//!   deviation `std_sample` (divide by n − 1).
//! * `cov` — coefficient of variation, "standard deviation over mean" (seed 000 Table 4,
//!   footnote 2), with the **population** standard deviation: the sessions of a class or
//!   the runs of a test are the whole set being described, not a sample of a larger one.
//!   Seed 000's worked example (aggregates 14, 7, 30, 5, 39 kbit/s) gives 0.70 this way
//!   (0.78 with the sample convention); the paper's printed 2.4 follows from neither.
//! * `jain` — Jain's fairness index (Jain, Chiu & Hawe 1984; seed 001):
//!   (Σx)² / (n · Σx²), 1 for perfect equality, 1/n when one gets everything.
//!
//! All return `None` on empty input (and `cov` on a zero mean) rather than NaN.

pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

pub fn std_pop(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    Some((xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt())
}

pub fn std_sample(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    Some((xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt())
}

/// Coefficient of variation with the population standard deviation.
pub fn cov(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    if m == 0.0 {
        return None;
    }
    Some(std_pop(xs)? / m)
}

/// Jain's fairness index.
pub fn jain(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if s2 == 0.0 {
        return None;
    }
    Some(s * s / (xs.len() as f64 * s2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Seed 000, Basic Test example: five runs' aggregates 14, 7, 30, 5, 39 kbit/s.
    #[test]
    fn seed000_worked_example() {
        let xs = [14.0, 7.0, 30.0, 5.0, 39.0];
        assert_eq!(mean(&xs), Some(19.0));
        // deviations -5,-12,11,-14,20 -> squares 25,144,121,196,400 = 886
        // population: sqrt(886/5) = 13.3116..; /19 = 0.7006
        assert!(close(std_pop(&xs).unwrap(), (886.0f64 / 5.0).sqrt(), 1e-12));
        assert!(close(cov(&xs).unwrap(), 0.7006, 1e-4));
        // sample: sqrt(886/4) = 14.8829..; /19 = 0.7833
        assert!(close(std_sample(&xs).unwrap() / 19.0, 0.7833, 1e-4));
    }

    #[test]
    fn jain_extremes_and_hand_case() {
        assert_eq!(jain(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert!(close(jain(&[1.0, 0.0, 0.0, 0.0]).unwrap(), 0.25, 1e-12));
        // (1+2+3+4)^2 / (4 * 30) = 100/120
        assert!(close(
            jain(&[1.0, 2.0, 3.0, 4.0]).unwrap(),
            100.0 / 120.0,
            1e-12
        ));
        assert_eq!(jain(&[]), None);
        assert_eq!(cov(&[0.0, 0.0]), None);
    }
}

/// Percentile of already **sorted** (ascending) data, `p` in percent (0 ≤ p ≤ 100), by
/// linear interpolation between closest ranks — numpy's default (`method="linear"`,
/// Hyndman & Fan type 7): rank `h = p/100 · (n − 1)` (0-based), result
/// `x[⌊h⌋] + (h − ⌊h⌋) · (x[⌈h⌉] − x[⌊h⌋])`. So p0 is the minimum, p100 the maximum, and
/// p50 of an even-length set is the mean of the two middle values. Seed 002's tables
/// report the 10th, 50th and 90th percentiles of inter-frame gaps and delays this way.
///
/// Returns `None` on empty input or `p` outside [0, 100] (or NaN). The input is not
/// checked for order; sort it first (`sort_by(f64::total_cmp)`).
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let h = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (h.ceil() as usize).min(sorted.len() - 1);
    let (a, b) = (sorted[lo], sorted[hi]);
    if lo == hi {
        return Some(a);
    }
    Some(a + (h - lo as f64) * (b - a))
}

/// 95 % Wilson score interval for a binomial proportion: `k` successes in `n` trials
/// (Wilson 1927). With p̂ = k/n and z = 1.959964 (two-sided 95 %):
/// centre `(p̂ + z²/2n) / (1 + z²/n)`, half-width
/// `z · √(p̂(1 − p̂)/n + z²/4n²) / (1 + z²/n)`. Unlike the normal ("Wald") interval it stays
/// inside [0, 1] and is not degenerate at k = 0 or k = n, which matters for loss ratios
/// measured as 0 of N packets.
///
/// Conventions: `n = 0` gives the uninformative (0, 1); `k > n` is clamped to `n`.
pub fn binomial_ci95(n: u64, k: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    const Z: f64 = 1.959_963_984_540_054;
    let nf = n as f64;
    let p = k.min(n) as f64 / nf;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = Z * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    // The bounds are exactly 0 at k = 0 and exactly 1 at k = n; say so rather than
    // leave rounding residue of ~1e-18.
    let lo = if k == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let hi = if k >= n {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (lo, hi)
}

#[cfg(test)]
mod percentile_tests {
    use super::*;

    #[test]
    fn percentile_linear_interpolation() {
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        // rank = p/100 * 9: p10 -> 0.9 -> 1 + 0.9 = 1.9; p50 -> 4.5 -> 5.5; p90 -> 8.1 -> 9.1
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(near(percentile(&xs, 10.0), 1.9));
        assert!(near(percentile(&xs, 50.0), 5.5));
        assert!(near(percentile(&xs, 90.0), 9.1));
        assert_eq!(percentile(&xs, 0.0), Some(1.0));
        assert_eq!(percentile(&xs, 100.0), Some(10.0));
        // odd length: p50 is the middle element; p25 of [0,10,20] -> rank 0.5 -> 5
        assert_eq!(percentile(&[0.0, 10.0, 20.0], 50.0), Some(10.0));
        assert_eq!(percentile(&[0.0, 10.0, 20.0], 25.0), Some(5.0));
    }

    #[test]
    fn percentile_edges() {
        assert_eq!(percentile(&[7.5], 0.0), Some(7.5));
        assert_eq!(percentile(&[7.5], 37.0), Some(7.5));
        assert_eq!(percentile(&[7.5], 100.0), Some(7.5));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1.0, 2.0], -0.1), None);
        assert_eq!(percentile(&[1.0, 2.0], 100.1), None);
        assert_eq!(percentile(&[1.0, 2.0], f64::NAN), None);
    }

    #[test]
    fn wilson_interval_hand_values() {
        // k = 5, n = 10: p = 0.5, z² = 3.841459, denom = 1.3841459, centre = 0.5,
        // half = 1.959964 · √(0.025 + 0.0096036) / 1.3841459 = 0.263406
        let (lo, hi) = binomial_ci95(10, 5);
        assert!((lo - 0.236594).abs() < 1e-5, "{lo}");
        assert!((hi - 0.763406).abs() < 1e-5, "{hi}");
        // k = 0, n = 100: lower 0, upper = (z²/n)/(1 + z²/n) = 0.0384146/1.0384146 = 0.036993
        let (lo, hi) = binomial_ci95(100, 0);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.036993).abs() < 1e-5, "{hi}");
        // symmetric: k = n mirrors k = 0
        let (lo2, hi2) = binomial_ci95(100, 100);
        assert!((lo2 - (1.0 - hi)).abs() < 1e-12 && hi2 == 1.0);
        assert_eq!(binomial_ci95(0, 0), (0.0, 1.0));
        assert_eq!(binomial_ci95(10, 12), binomial_ci95(10, 10));
        // contains the point estimate
        let (lo, hi) = binomial_ci95(200_000, 2_000);
        assert!(lo < 0.01 && 0.01 < hi && hi - lo < 0.001);
    }
}
