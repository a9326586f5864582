//! Correlated random processes for the link emulator: netem's `CORRELATION` arguments
//! (`delay D J C`, `duplicate P C`, `corrupt P C`, `reorder P C`, `loss random P C`) with a
//! definition that holds.
//!
//! netem draws every correlated decision from `get_crandom` (Linux `sch_netem.c`):
//! `u = ((2³² − ρ')·v + ρ'·last) >> 32` with `v` a fresh 32-bit uniform and `ρ' = ρ·2³²`.
//! That mixes uniforms, so the marginal is no longer uniform: an event of probability `p`
//! happens with another probability (`P(u < p)` falls for `p < ½` as the mix narrows), and
//! tc-netem(8) deprecates correlated random loss for that "bad behaviour". weir defines the
//! setting `ρ` (in [0, 1]) as the **lag-1 autocorrelation** of the sequence, with the
//! marginal kept exactly:
//!
//! * [`Chance`]: a correlated Bernoulli event sequence (duplicate, corrupt, reorder; and
//!   random loss through [`super::LossModel::correlated`]) is the two-state Markov chain with
//!   `P(event | event before) = p + ρ(1 − p)` and `P(event | none before) = p(1 − ρ)`. Its
//!   stationary event probability is exactly `p`, the lag-1 autocorrelation of the 0/1
//!   indicators is exactly `ρ` (the chain's second eigenvalue, `1 − p(1−ρ) − (1−p)(1−ρ)`),
//!   and events come in runs of mean length `1 / ((1 − p)(1 − ρ))`. It is the simple
//!   Gilbert model with `P(G→B) = p(1 − ρ)`, `P(B→G) = (1 − p)(1 − ρ)`, and is run by the
//!   one Gilbert–Elliott implementation ([`super::Loss`]): one draw per event. `ρ = 0` is
//!   the plain independent draw (one draw, the sequence of an uncorrelated link unchanged).
//! * [`Ar1`]: correlated jitter. A standard normal AR(1) process
//!   `z₀ = ε₀`, `zₙ = r·zₙ₋₁ + √(1 − r²)·εₙ` (`ε` standard normal by Box–Muller, two draws),
//!   stationary from the first sample, lag-1 correlation `r`; [`super::Jitter::sample_normal`]
//!   maps `z` to an offset through the distribution's quantile function (a Gaussian copula:
//!   the marginal is the distribution's, exactly), with `r` from
//!   [`super::Jitter::copula_rho`] so the offsets' lag-1 autocorrelation is `ρ`.
//!
//! * [`lag1_autocorrelation`] (Pearson) and [`lag1_rank_autocorrelation`] (Spearman): the
//!   statistic the setting names, measured on a sequence (the unit tests here and the live
//!   measurement through `weir emu` use them).
//!
//! Invariants: no allocation, no panic; a correlation outside [0, 1] is refused by the
//! configuration ([`super::EmuConfig::validate`]) and clamped here.

use super::dist::std_normal;
use super::loss::{Loss, LossModel};
use crate::rng::Rng;

/// A Bernoulli event of probability `p` with lag-1 autocorrelation `rho` (see the module).
#[derive(Clone, Debug)]
pub struct Chance {
    p: f64,
    /// `None` when uncorrelated: an independent draw each time.
    chain: Option<Loss>,
}

impl Chance {
    pub fn new(p: f64, rho: f64) -> Self {
        Chance {
            p,
            chain: (rho > 0.0 && p > 0.0 && p < 1.0)
                .then(|| Loss::new(LossModel::correlated(p, rho))),
        }
    }

    /// Change the parameters, keeping the chain's state when it stays correlated.
    pub fn set(&mut self, p: f64, rho: f64) {
        let next = Chance::new(p, rho);
        match (&mut self.chain, next.chain) {
            (Some(old), Some(new)) => old.set_model(new.model()),
            (slot, new) => *slot = new,
        }
        self.p = p;
    }

    /// Whether the event happens this time; advances the chain.
    #[inline]
    pub fn fire(&mut self, rng: &mut Rng) -> bool {
        match &mut self.chain {
            None => self.p > 0.0 && rng.chance(self.p),
            Some(chain) => chain.lose(rng),
        }
    }
}

/// A stationary standard normal AR(1) process (see the module).
#[derive(Clone, Debug)]
pub struct Ar1 {
    r: f64,
    /// `√(1 − r²)`.
    s: f64,
    z: Option<f64>,
}

impl Ar1 {
    /// Lag-1 correlation `r` (clamped to [0, 1]).
    pub fn new(r: f64) -> Self {
        let r = if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) };
        Ar1 {
            r,
            s: (1.0 - r * r).sqrt(),
            z: None,
        }
    }

    /// Change the correlation, keeping the current value.
    pub fn set(&mut self, r: f64) {
        let z = self.z;
        *self = Ar1::new(r);
        self.z = z;
    }

    pub fn correlation(&self) -> f64 {
        self.r
    }

    /// The next value.
    #[inline]
    pub fn next(&mut self, rng: &mut Rng) -> f64 {
        let e = std_normal(rng);
        let z = match self.z {
            None => e,
            Some(prev) => self.r * prev + self.s * e,
        };
        self.z = Some(z);
        z
    }
}

/// The lag-1 (Pearson) autocorrelation of a sequence, the statistic a correlation
/// setting names: `Σᵢ (vᵢ − m)(vᵢ₊₁ − m) / Σᵢ (vᵢ − m)²`, `m` the mean of all of `v` (the
/// standard estimator, Box & Jenkins, "Time Series Analysis", §2.1.5). For an AR(1)
/// process of correlation ρ its standard error is about `√((1 − ρ²)/n)`. NaN for fewer
/// than two values or a constant sequence (no variance).
pub fn lag1_autocorrelation(v: &[f64]) -> f64 {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    let cov = v.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>();
    cov / var
}

/// The lag-1 rank (Spearman) autocorrelation: [`lag1_autocorrelation`] of the values'
/// ranks (0 for the smallest, ties in sequence order) — the setting's statistic for the
/// skewed distributions, and for any of them robust to a few outliers.
pub fn lag1_rank_autocorrelation(v: &[f64]) -> f64 {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    for (k, &i) in idx.iter().enumerate() {
        r[i] = k as f64;
    }
    lag1_autocorrelation(&r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulate::loss::mean_burst_of;

    fn lag1(v: &[f64]) -> f64 {
        lag1_autocorrelation(v)
    }

    /// By hand: `1 2 3 4` has mean 2.5, deviations ∓1.5, ∓0.5, squares summing to 5,
    /// neighbour products 0.75 − 0.25 + 0.75 = 1.25: 0.25. `1 −1 1 −1`: −3/4.
    #[test]
    fn lag1_autocorrelation_by_hand() {
        assert!((lag1(&[1.0, 2.0, 3.0, 4.0]) - 0.25).abs() < 1e-15);
        assert!((lag1(&[1.0, -1.0, 1.0, -1.0]) + 0.75).abs() < 1e-15);
        assert!(lag1(&[3.0, 3.0, 3.0]).is_nan());
        assert!(lag1(&[1.0]).is_nan());
        assert!(lag1(&[]).is_nan());
    }

    /// By hand: `10 30 20 40` has ranks `0 2 1 3`, mean 1.5, squares summing to 5,
    /// neighbour products −0.75 − 0.25 − 0.75: −0.35; unchanged by a monotone map.
    #[test]
    fn lag1_rank_autocorrelation_by_hand() {
        let v = [10.0, 30.0, 20.0, 40.0];
        assert!((lag1_rank_autocorrelation(&v) + 0.35).abs() < 1e-15);
        let exp: Vec<f64> = v.iter().map(|x: &f64| (x / 10.0).exp()).collect();
        assert_eq!(
            lag1_rank_autocorrelation(&exp),
            lag1_rank_autocorrelation(&v)
        );
        assert!(lag1_rank_autocorrelation(&[1.0]).is_nan());
    }

    #[test]
    fn chance_keeps_p_and_has_lag1_rho() {
        for (p, rho, seed) in [(0.1, 0.25, 1u64), (0.3, 0.5, 2), (0.02, 0.8, 3)] {
            let mut c = Chance::new(p, rho);
            let mut rng = Rng::new(seed);
            let v: Vec<f64> = (0..1_000_000)
                .map(|_| f64::from(u8::from(c.fire(&mut rng))))
                .collect();
            let rate = v.iter().sum::<f64>() / v.len() as f64;
            assert!(
                (rate / p - 1.0).abs() < 0.05,
                "p={p} rho={rho}: rate {rate}"
            );
            let r = lag1(&v);
            assert!((r - rho).abs() < 0.02, "p={p} rho={rho}: lag-1 {r}");
            // mean run of events 1/((1-p)(1-rho))
            let events: Vec<bool> = v.iter().map(|&x| x > 0.0).collect();
            let mean = mean_burst_of(&events).unwrap();
            let want = 1.0 / ((1.0 - p) * (1.0 - rho));
            assert!((mean / want - 1.0).abs() < 0.05, "run {mean} vs {want}");
        }
    }

    #[test]
    fn uncorrelated_chance_is_one_plain_draw() {
        let mut c = Chance::new(0.25, 0.0);
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        for _ in 0..1000 {
            assert_eq!(c.fire(&mut a), b.chance(0.25));
        }
        assert!(!Chance::new(0.0, 0.5).fire(&mut a));
        assert!(Chance::new(1.0, 0.5).fire(&mut a));
    }

    #[test]
    fn ar1_is_stationary_standard_normal_with_lag1_r() {
        for (r, seed) in [(0.0, 4u64), (0.25, 5), (0.9, 6)] {
            let mut a = Ar1::new(r);
            let mut rng = Rng::new(seed);
            let v: Vec<f64> = (0..400_000).map(|_| a.next(&mut rng)).collect();
            let n = v.len() as f64;
            let m = v.iter().sum::<f64>() / n;
            let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt();
            // the mean of an AR(1) has variance (1+r)/(1-r)/n
            let se = ((1.0 + r) / (1.0 - r) / n).sqrt();
            assert!(m.abs() < 5.0 * se, "r={r}: mean {m}");
            assert!((sd - 1.0).abs() < 0.02, "r={r}: sd {sd}");
            assert!((lag1(&v) - r).abs() < 0.01, "r={r}: lag-1 {}", lag1(&v));
        }
        let mut a = Ar1::new(f64::NAN);
        assert_eq!(a.correlation(), 0.0);
        a.set(7.0);
        assert_eq!(a.correlation(), 1.0);
    }
}
