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
