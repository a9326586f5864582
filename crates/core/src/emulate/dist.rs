//! Delay-jitter distributions for the link emulator, sampled from the caller's seeded
//! [`Rng`].
//!
//! A [`Jitter`] gives a signed offset (integer ns) that [`super::EmuLink`] adds to the
//! link's mean one-way delay, netem-style: `delay = max(0, mean + offset)`. Every variant
//! is parameterised in nanoseconds:
//!
//! | variant | offset | support | mean | median | std dev |
//! |---|---|---|---|---|---|
//! | `None` | 0 | {0} | 0 | 0 | 0 |
//! | `Uniform { half_width: w }` | integer uniform on `[-w, +w]` (netem's `delay D J`) | `[-w, w]` | 0 | 0 | `≈ w/√3` |
//! | `Normal { sigma: s }` | `s · Z`, Z standard normal (Box–Muller) | `|Z| ≤ 8.58` (53-bit uniforms) | 0 | 0 | `s` |
//! | `Pareto { scale: x, alpha: a }` | `x · (min(U^(-1/a), 1000) − a/(a−1))` | `[-x/(a−1), x·(1000 − a/(a−1))]` | `−x·1000^(1−a)/(a−1)` (tail cap) | `x·(2^(1/a) − a/(a−1))` | `x·√(a/((a−1)²(a−2)))` for `a > 2` |
//! | `ParetoNormal { sigma: s }` | NIST Net / netem `paretonormal`: `s · (Φ⁻¹(U)/4 + 3/4 · P(U))` (see below) | `[-1.5 s, 4 s]` | `−s/40.5 ≈ −0.0247 s` | `≈ −0.2401 s` | `≈ 0.835 s` (numerical integration) |
//!
//! * **Uniform** is netem's default (`delay 100ms 10ms` = 100 ms ± 10 ms): every integer
//!   nanosecond in `[-w, w]` is equally likely, so the mean offset is exactly 0.
//! * **Normal** is netem's `distribution normal` with `sigma` = its jitter argument, sampled
//!   exactly by Box–Muller (Box & Muller 1958) from two 53-bit uniforms instead of netem's
//!   4096-entry table.
//! * **Pareto** is the classic heavy-tailed Pareto (type I, scale `x`, shape `a > 1`),
//!   sampled by the inverse CDF `x · U^(-1/a)` with `U` uniform on `(0, 1]`, then shifted by
//!   its mean `x·a/(a−1)` so that the offset has mean 0 and the delay stays centred on the
//!   configured mean. It is right-skewed: most packets arrive a little early (the median
//!   offset is negative, `−0.24 x` for `a = 3`), a few very late. The Pareto factor
//!   `U^(-1/a)` is capped at [`PARETO_MAX_FACTOR`] (1000) so that no sample is unbounded;
//!   the cap shifts the mean by `−x·1000^(1−a)/(a−1)` (`−5·10⁻⁷ x` at `a = 3`, `−10⁻³ x` at
//!   `a = 2`), reported exactly by [`Jitter::mean`]. netem's `distribution pareto` with
//!   jitter `J` is `a = 3, x = 4J/3` (constructor [`Jitter::netem_pareto`]), except that
//!   netem clips its table at `+4J`.
//! * **ParetoNormal** follows NIST Net's table generator (iproute2 `netem/paretonormal.c`):
//!   at each quantile `U` the value is `(n + 3p)/4` with `n = Φ⁻¹(U)` clamped to ±4 and
//!   `p = (4/3)·((1−U)^(−1/3) − 1.5)` capped at 4 (netem's pareto table, shape 3) — a
//!   *quantile mixture* (both parts driven by the same `U`), not a sum of independent
//!   variables. Φ⁻¹ is Acklam's rational approximation (relative error < 1.2·10⁻⁹). The
//!   mean is `−s · 0.75 · (4/3) · 4.5⁻²/2 = −s/40.5` (the cap on the Pareto part); it is not
//!   re-centred so that it matches netem.
//!
//! Clamping: offsets are clamped to ±[`MAX_DELAY_NS`] (1 hour), and [`delay_with`] clamps the
//! resulting delay to `[0, MAX_DELAY_NS]`. When the jitter can exceed the mean delay (e.g.
//! 10 ms ± 20 ms) the clamp at 0 raises the realised mean delay above the configured one;
//! that is the documented netem behaviour, not corrected for.
//!
//! * **Table** is a netem distribution table in iproute2's `.dist` format
//!   ([`super::table`]): an entry `t` drawn uniformly, the offset `sigma · t / 8192`
//!   rounded as netem's `tabledist` rounds it. Mean, median and spread are the table's.
//!
//! **Correlation** (netem's `delay D J C%`): [`Jitter::sample_normal`] maps a standard
//! normal variate `z` through the distribution's quantile function (`Normal`: `sigma·z`;
//! the others at `u = Φ(z)`), and [`super::corr::Ar1`] makes successive `z` a Gaussian
//! AR(1) process — a Gaussian copula, so every variant keeps its marginal distribution
//! exactly and successive offsets are correlated. The correlation of the `z` process is
//! chosen so that the setting `ρ` is the lag-1 autocorrelation of the offsets: exactly
//! `ρ` for `Normal` (Pearson), and `2 sin(πρ/6)` for the others
//! ([`Jitter::copula_rho`]), which makes the lag-1 *rank* (Spearman) correlation exactly
//! `ρ` for every variant and the Pearson correlation exactly `ρ` for `Uniform` (Pearson's
//! `(6/π) asin(r/2)` for uniform margins of a bivariate normal of correlation `r`); for the
//! skewed ones (Pareto, tables) Pearson's is near but not exactly `ρ`. netem instead mixes
//! each new 32-bit uniform with the previous one (`get_crandom`: `u = (1−ρ)·v + ρ·last`),
//! which narrows the distribution (the variance of `u` falls by `(1−ρ)/(1+ρ)`) and, through
//! `rnd % (2σ)` and `rnd % size`, leaves little correlation in the delays; tc-netem(8) calls
//! its correlation deprecated for that reason. weir keeps the distribution and delivers the
//! correlation asked for.
//!
//! Invariants: `sample` never panics for any parameters (a NaN from invalid parameters
//! converts to offset 0), consumes a fixed number of RNG draws per variant (0 for `None`
//! and for a zero width/sigma/scale, 1 for `Uniform`, `Pareto`, `ParetoNormal`, `Table`, 2
//! for `Normal`), and allocates nothing.

use super::table::{self, DistTable};
use super::EmuError;
use crate::rng::Rng;

/// Largest delay, and largest absolute jitter offset, in nanoseconds: one hour.
pub const MAX_DELAY_NS: u64 = 3_600_000_000_000;

/// Cap on the Pareto factor `U^(-1/alpha)` (see the module comment).
pub const PARETO_MAX_FACTOR: f64 = 1000.0;

/// Clamp on each part of the `ParetoNormal` quantile mixture, in units of sigma (netem's
/// tables store values in ±32767/8192 = ±4 sigma).
const PN_CLAMP: f64 = 4.0;

/// A delay-jitter distribution: a signed offset in ns around the mean delay (see the
/// module comment for the exact definitions).
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Jitter {
    /// No jitter: every packet gets exactly the mean delay.
    #[default]
    None,
    /// Uniform on `[-half_width, +half_width]` ns (netem's default).
    Uniform { half_width: u64 },
    /// Normal with mean 0 and standard deviation `sigma` ns.
    Normal { sigma: u64 },
    /// Pareto with scale `scale` ns and shape `alpha` (> 1), shifted to mean 0.
    Pareto { scale: u64, alpha: f64 },
    /// NIST Net / netem `paretonormal` scaled by `sigma` ns.
    ParetoNormal { sigma: u64 },
    /// A netem `.dist` table scaled by `sigma` ns (an entry of 8192 is one `sigma`).
    Table { sigma: u64, table: DistTable },
}

impl Jitter {
    /// netem's `distribution pareto` with jitter `sigma` ns: shape 3, scale `4·sigma/3`.
    pub fn netem_pareto(sigma: u64) -> Self {
        Jitter::Pareto {
            scale: ((sigma as u128 * 4) / 3).min(MAX_DELAY_NS as u128) as u64,
            alpha: 3.0,
        }
    }

    /// Whether every sample is 0.
    pub fn is_none(&self) -> bool {
        match *self {
            Jitter::None => true,
            Jitter::Uniform { half_width } => half_width == 0,
            Jitter::Normal { sigma }
            | Jitter::ParetoNormal { sigma }
            | Jitter::Table { sigma, .. } => sigma == 0,
            Jitter::Pareto { scale, .. } => scale == 0,
        }
    }

    /// Check the parameters: widths at most [`MAX_DELAY_NS`], Pareto shape finite and > 1.
    pub fn validate(&self) -> Result<(), EmuError> {
        let width = match *self {
            Jitter::None => 0,
            Jitter::Uniform { half_width } => half_width,
            Jitter::Normal { sigma }
            | Jitter::ParetoNormal { sigma }
            | Jitter::Table { sigma, .. } => sigma,
            Jitter::Pareto { scale, alpha } => {
                if !(alpha.is_finite() && alpha > 1.0) {
                    return Err(EmuError::ParetoAlpha(alpha));
                }
                scale
            }
        };
        if width > MAX_DELAY_NS {
            return Err(EmuError::TooLong {
                what: "jitter",
                ns: width,
            });
        }
        Ok(())
    }

    /// One offset in ns, clamped to ±[`MAX_DELAY_NS`].
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> i64 {
        let max = MAX_DELAY_NS as i64;
        match *self {
            Jitter::None => 0,
            Jitter::Uniform { half_width } => {
                if half_width == 0 {
                    return 0;
                }
                let w = half_width.min(MAX_DELAY_NS);
                // 2w + 1 <= 2^43: no overflow.
                rng.below(2 * w + 1) as i64 - w as i64
            }
            Jitter::Normal { sigma } => {
                if sigma == 0 {
                    return 0;
                }
                let z = std_normal(rng);
                to_ns(sigma as f64 * z, max)
            }
            Jitter::Pareto { scale, alpha } => {
                if scale == 0 {
                    return 0;
                }
                let u = 1.0 - rng.next_f64(); // (0, 1]
                let x = u.powf(-1.0 / alpha).min(PARETO_MAX_FACTOR);
                to_ns(scale as f64 * (x - alpha / (alpha - 1.0)), max)
            }
            Jitter::ParetoNormal { sigma } => {
                if sigma == 0 {
                    return 0;
                }
                let u = rng.next_f64(); // [0, 1)
                to_ns(sigma as f64 * pareto_normal_quantile(u), max)
            }
            Jitter::Table { sigma, ref table } => {
                if sigma == 0 {
                    return 0;
                }
                let t = table.at(rng.below(table.len() as u64));
                table::scaled(sigma, t).clamp(-max, max)
            }
        }
    }

    /// The correlation of the underlying normal process that gives lag-1 autocorrelation
    /// `rho` (in [0, 1]) of the offsets (see the module comment): `rho` for `Normal`,
    /// `2 sin(πρ/6)` for the others.
    pub fn copula_rho(&self, rho: f64) -> f64 {
        match self {
            Jitter::Normal { .. } => rho,
            _ => 2.0 * (core::f64::consts::PI * rho / 6.0).sin(),
        }
    }

    /// The offset at standard normal variate `z`: the distribution's quantile at `Φ(z)`
    /// (`sigma·z` for `Normal`), clamped to ±[`MAX_DELAY_NS`]. Increasing in `z`. Draws
    /// nothing: correlated jitter feeds it from [`super::corr::Ar1`].
    #[inline]
    pub fn sample_normal(&self, z: f64) -> i64 {
        let max = MAX_DELAY_NS as i64;
        match *self {
            Jitter::None => 0,
            Jitter::Normal { sigma } => to_ns(sigma as f64 * z, max),
            Jitter::Uniform { half_width } => {
                let w = half_width.min(MAX_DELAY_NS);
                let k = (norm_cdf(z) * (2 * w + 1) as f64) as u64;
                k.min(2 * w) as i64 - w as i64
            }
            Jitter::Pareto { scale, alpha } => {
                let tail = (1.0 - norm_cdf(z)).max(f64::MIN_POSITIVE); // (0, 1]
                let x = tail.powf(-1.0 / alpha).min(PARETO_MAX_FACTOR);
                to_ns(scale as f64 * (x - alpha / (alpha - 1.0)), max)
            }
            Jitter::ParetoNormal { sigma } => {
                to_ns(sigma as f64 * pareto_normal_quantile(norm_cdf(z)), max)
            }
            Jitter::Table { sigma, ref table } => {
                table::scaled(sigma, table.at_quantile(norm_cdf(z))).clamp(-max, max)
            }
        }
    }

    /// The exact mean offset in ns (tail caps included, the clamp of the delay at 0 not):
    /// 0 except for `Pareto` (tail cap) and `ParetoNormal` (`−sigma/40.5`).
    pub fn mean(&self) -> f64 {
        match *self {
            Jitter::None | Jitter::Uniform { .. } | Jitter::Normal { .. } => 0.0,
            Jitter::Pareto { scale, alpha } => {
                -(scale as f64) * PARETO_MAX_FACTOR.powf(1.0 - alpha) / (alpha - 1.0)
            }
            Jitter::ParetoNormal { sigma } => {
                // 0.75 · E[min(p, 4)] with p = (4/3)(X − 1.5), X ~ Pareto(1, 3):
                // E[(X − 4.5)+] = 4.5^-2 / 2.
                -(sigma as f64) * 0.75 * (4.0 / 3.0) * (0.5 / (4.5 * 4.5))
            }
            Jitter::Table { sigma, ref table } => sigma as f64 * table.mean_sigmas(),
        }
    }

    /// The median offset in ns.
    pub fn median(&self) -> f64 {
        match *self {
            Jitter::None | Jitter::Uniform { .. } | Jitter::Normal { .. } => 0.0,
            Jitter::Pareto { scale, alpha } => {
                scale as f64
                    * (2f64.powf(1.0 / alpha).min(PARETO_MAX_FACTOR) - alpha / (alpha - 1.0))
            }
            Jitter::ParetoNormal { sigma } => sigma as f64 * pareto_normal_quantile(0.5),
            Jitter::Table { sigma, ref table } => {
                table::scaled(sigma, table.at_quantile(0.5)) as f64
            }
        }
    }

    /// The standard deviation in ns where it is finite and known in closed form (`Pareto`
    /// without the tail cap; `None` for shape ≤ 2 and for `ParetoNormal`).
    pub fn std_dev(&self) -> Option<f64> {
        match *self {
            Jitter::None => Some(0.0),
            Jitter::Uniform { half_width } => {
                // Discrete uniform on 2w+1 points: sqrt(w(w+1)/3).
                let w = half_width as f64;
                Some((w * (w + 1.0) / 3.0).sqrt())
            }
            Jitter::Normal { sigma } => Some(sigma as f64),
            Jitter::Pareto { scale, alpha } if alpha > 2.0 => {
                let a = alpha;
                Some(scale as f64 * (a / ((a - 1.0) * (a - 1.0) * (a - 2.0))).sqrt())
            }
            Jitter::Pareto { .. } | Jitter::ParetoNormal { .. } => None,
            Jitter::Table { sigma, ref table } => Some(sigma as f64 * table.sd_sigmas()),
        }
    }

    /// The smallest possible offset in ns.
    pub fn min_offset(&self) -> i64 {
        match *self {
            Jitter::None => 0,
            Jitter::Uniform { half_width } => -(half_width.min(MAX_DELAY_NS) as i64),
            Jitter::Normal { sigma } => {
                to_ns(-(sigma as f64) * MAX_BOX_MULLER, MAX_DELAY_NS as i64)
            }
            Jitter::Pareto { scale, alpha } => to_ns(
                scale as f64 * (1.0 - alpha / (alpha - 1.0)),
                MAX_DELAY_NS as i64,
            ),
            Jitter::ParetoNormal { sigma } => to_ns(-1.5 * sigma as f64, MAX_DELAY_NS as i64),
            Jitter::Table { sigma, ref table } => table::scaled(sigma, table.values()[0])
                .clamp(-(MAX_DELAY_NS as i64), MAX_DELAY_NS as i64),
        }
    }
}

/// Largest |Z| Box–Muller can return from a 53-bit uniform: sqrt(−2 ln 2^−53).
const MAX_BOX_MULLER: f64 = 8.5717;

/// `mean_ns + offset`, clamped to `[0, MAX_DELAY_NS]`.
#[inline]
pub fn delay_with(mean_ns: u64, offset: i64) -> u64 {
    let d = mean_ns.min(MAX_DELAY_NS) as i64 + offset;
    d.clamp(0, MAX_DELAY_NS as i64) as u64
}

/// Round and clamp to ±max; NaN becomes 0.
#[inline]
fn to_ns(x: f64, max: i64) -> i64 {
    (x.round() as i64).clamp(-max, max)
}

/// A standard normal variate by Box–Muller (the cosine branch; two uniforms).
#[inline]
pub fn std_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.next_f64(); // (0, 1]: ln is finite
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (core::f64::consts::TAU * u2).cos()
}

/// The standard normal CDF `Φ(z) = erfc(−z/√2)/2`, with the complementary error function
/// of Numerical Recipes' `erfcc` (a Chebyshev fit, relative error < 1.2·10⁻⁷ everywhere).
pub fn norm_cdf(z: f64) -> f64 {
    let x = -z / core::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc_abs = t * (-x * x + poly).exp();
    let erfc = if x >= 0.0 { erfc_abs } else { 2.0 - erfc_abs };
    if erfc.is_nan() {
        0.5
    } else {
        0.5 * erfc
    }
}

/// The value of the `paretonormal` distribution (in units of sigma) at quantile `u`.
fn pareto_normal_quantile(u: f64) -> f64 {
    let n = inv_norm_cdf(u).clamp(-PN_CLAMP, PN_CLAMP);
    let tail = (1.0 - u).max(f64::MIN_POSITIVE); // (0, 1]
    let p = ((4.0 / 3.0) * (tail.powf(-1.0 / 3.0) - 1.5)).min(PN_CLAMP);
    (n + 3.0 * p) / 4.0
}

/// Inverse of the standard normal CDF (P. J. Acklam's algorithm, relative error
/// < 1.15·10⁻⁹). `p` outside (0, 1) is clamped to the smallest positive double / its
/// complement, giving about ±37.5.
pub fn inv_norm_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    let p = if p.is_nan() { 0.5 } else { p };
    let p = p.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 200_000;

    fn samples(j: &Jitter, seed: u64) -> Vec<i64> {
        let mut rng = Rng::new(seed);
        (0..N).map(|_| j.sample(&mut rng)).collect()
    }

    fn mean_sd(v: &[i64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / (n - 1.0);
        (m, var.sqrt())
    }

    fn median(v: &[i64]) -> f64 {
        let mut s = v.to_vec();
        s.sort_unstable();
        s[s.len() / 2] as f64
    }

    #[test]
    fn none_and_zero_widths_draw_nothing() {
        let mut a = Rng::new(3);
        let b = Rng::new(3);
        for j in [
            Jitter::None,
            Jitter::Uniform { half_width: 0 },
            Jitter::Normal { sigma: 0 },
            Jitter::Pareto {
                scale: 0,
                alpha: 3.0,
            },
            Jitter::ParetoNormal { sigma: 0 },
        ] {
            assert!(j.is_none());
            assert_eq!(j.sample(&mut a), 0);
        }
        assert_eq!(a.next_u64(), b.clone().next_u64(), "no draws consumed");
    }

    #[test]
    fn uniform_mean_and_bounds() {
        let w = 10_000_000; // ±10 ms
        let j = Jitter::Uniform { half_width: w };
        let v = samples(&j, 1);
        let (m, sd) = mean_sd(&v);
        assert!(v.iter().all(|&x| (-(w as i64)..=w as i64).contains(&x)));
        // Both ends reached within 1 % of the width.
        assert!(*v.iter().min().unwrap() < -(w as i64) * 99 / 100);
        assert!(*v.iter().max().unwrap() > w as i64 * 99 / 100);
        // Standard error of the mean: w/√3/√N ≈ 12.9 µs; allow 4 SE.
        assert!(
            m.abs() < 4.0 * w as f64 / 3f64.sqrt() / (N as f64).sqrt(),
            "{m}"
        );
        let want = j.std_dev().unwrap();
        assert!((sd / want - 1.0).abs() < 0.01, "{sd} vs {want}");
        assert_eq!(j.min_offset(), -(w as i64));
    }

    #[test]
    fn normal_mean_and_sigma() {
        let s = 5_000_000; // 5 ms
        let v = samples(&Jitter::Normal { sigma: s }, 2);
        let (m, sd) = mean_sd(&v);
        assert!(m.abs() < 4.0 * s as f64 / (N as f64).sqrt(), "mean {m}");
        assert!((sd / s as f64 - 1.0).abs() < 0.01, "sd {sd}");
        // 68.27 % within one sigma, 95.45 % within two.
        let within = |k: f64| {
            v.iter()
                .filter(|&&x| (x as f64).abs() <= k * s as f64)
                .count() as f64
                / N as f64
        };
        assert!((within(1.0) - 0.6827).abs() < 0.005);
        assert!((within(2.0) - 0.9545).abs() < 0.003);
    }

    #[test]
    fn pareto_mean_median_and_support() {
        let scale = 1_000_000; // 1 ms, shape 3: std dev 0.866 ms
        let j = Jitter::Pareto { scale, alpha: 3.0 };
        let v = samples(&j, 3);
        let (m, _) = mean_sd(&v);
        // Heavy tail (finite variance at shape 3): allow 5 SE of the mean.
        let se = j.std_dev().unwrap() / (N as f64).sqrt();
        assert!((m - j.mean()).abs() < 5.0 * se, "mean {m} vs {}", j.mean());
        let med = median(&v);
        assert!(
            (med - j.median()).abs() < 0.01 * scale as f64,
            "{med} vs {}",
            j.median()
        );
        assert!((j.median() + 0.2401 * scale as f64).abs() < 100.0);
        let lo = j.min_offset();
        assert_eq!(lo, -500_000);
        assert!(v.iter().all(|&x| x >= lo));
        // Right-skewed: the maximum is far above the mean, the minimum close below.
        assert!(*v.iter().max().unwrap() > 20 * scale as i64);
        // The tail cap moves the mean only slightly at shape 3, a lot at shape 1.5.
        assert!(j.mean().abs() < 1.0);
        let heavy = Jitter::Pareto { scale, alpha: 1.5 };
        assert!((heavy.mean() / scale as f64 + 2.0 * 1000f64.powf(-0.5)).abs() < 1e-12);
    }

    #[test]
    fn netem_pareto_is_shape_three() {
        assert_eq!(
            Jitter::netem_pareto(3_000),
            Jitter::Pareto {
                scale: 4_000,
                alpha: 3.0
            }
        );
    }

    #[test]
    fn pareto_normal_matches_netem_definition() {
        let s = 1_000_000;
        let j = Jitter::ParetoNormal { sigma: s };
        let v = samples(&j, 4);
        let (m, sd) = mean_sd(&v);
        assert!((j.mean() + s as f64 / 40.5).abs() < 1e-6);
        assert!((m - j.mean()).abs() < 5.0 * sd / (N as f64).sqrt(), "{m}");
        assert!((median(&v) - j.median()).abs() < 0.01 * s as f64);
        assert!((j.median() / s as f64 + 0.2401).abs() < 1e-3);
        assert!(v.iter().all(|&x| (-1_500_000..=4_000_000).contains(&x)));
        assert!((sd / s as f64 - 0.835).abs() < 0.01, "sd {sd}");
    }

    #[test]
    fn normal_cdf_known_points() {
        assert!((norm_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((norm_cdf(1.959_963_985) - 0.975).abs() < 1e-7);
        assert!((norm_cdf(-1.0) - 0.158_655_254).abs() < 1e-7);
        for p in [1e-6, 0.001, 0.1, 0.3, 0.5, 0.77, 0.999] {
            assert!((norm_cdf(inv_norm_cdf(p)) / p - 1.0).abs() < 1e-6, "{p}");
        }
        assert_eq!(norm_cdf(f64::NAN), 0.5);
        assert_eq!(norm_cdf(-40.0), 0.0);
        assert_eq!(norm_cdf(40.0), 1.0);
    }

    /// A two-point table {−8192, +8192} at σ = 1 ms: offsets ±1 ms, mean 0, sd 1 ms.
    #[test]
    fn table_samples_sigma_times_entry() {
        let t = DistTable::from_values("two", vec![8192, -8192]).unwrap();
        let j = Jitter::Table {
            sigma: 1_000_000,
            table: t,
        };
        let v = samples(&j, 7);
        assert!(v.iter().all(|&x| x == 1_000_000 || x == -1_000_000));
        let (m, sd) = mean_sd(&v);
        assert!(m.abs() < 4.0 * 1e6 / (N as f64).sqrt(), "{m}");
        assert!((sd / 1e6 - 1.0).abs() < 0.01);
        assert_eq!(j.std_dev(), Some(1e6));
        assert_eq!(j.mean(), 0.0);
        assert_eq!(j.min_offset(), -1_000_000);
        assert_eq!(j.sample_normal(-1.0), -1_000_000);
        assert_eq!(j.sample_normal(1.0), 1_000_000);
    }

    /// Correlated jitter: lag-1 autocorrelation of the offsets within ±0.05 of the
    /// setting (Pearson for uniform and normal, Spearman for all), the marginal kept.
    #[test]
    fn correlated_offsets_have_the_lag1_autocorrelation_asked_for() {
        use crate::emulate::corr::{lag1_autocorrelation as lag1, lag1_rank_autocorrelation, Ar1};
        let table = DistTable::from_values(
            "skewed",
            (0..4096).map(|i| ((i * i) / 600 - 8000) as i16).collect(),
        )
        .unwrap();
        for (j, pearson) in [
            (
                Jitter::Uniform {
                    half_width: 10_000_000,
                },
                true,
            ),
            (Jitter::Normal { sigma: 10_000_000 }, true),
            (Jitter::netem_pareto(10_000_000), false),
            (Jitter::ParetoNormal { sigma: 10_000_000 }, false),
            (
                Jitter::Table {
                    sigma: 10_000_000,
                    table: table.clone(),
                },
                false,
            ),
        ] {
            for rho in [0.25, 0.5, 0.9] {
                let mut ar = Ar1::new(j.copula_rho(rho));
                let mut rng = Rng::new(11);
                let v: Vec<f64> = (0..200_000)
                    .map(|_| j.sample_normal(ar.next(&mut rng)) as f64)
                    .collect();
                let spearman = lag1_rank_autocorrelation(&v);
                assert!(
                    (spearman - rho).abs() < 0.05,
                    "{j:?} {rho}: spearman {spearman}"
                );
                if pearson {
                    let r = lag1(&v);
                    assert!((r - rho).abs() < 0.05, "{j:?} {rho}: pearson {r}");
                    // the marginal is unchanged: the standard deviation of the offsets
                    let (_, sd) = mean_sd(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
                    let want = j.std_dev().unwrap();
                    assert!((sd / want - 1.0).abs() < 0.05, "{j:?} {rho}: sd {sd}");
                }
            }
        }
    }

    #[test]
    fn inverse_normal_cdf_known_points() {
        assert!(inv_norm_cdf(0.5).abs() < 1e-12);
        assert!((inv_norm_cdf(0.975) - 1.959_963_985).abs() < 1e-6);
        assert!((inv_norm_cdf(0.001) + 3.090_232_306).abs() < 1e-6);
        assert!((inv_norm_cdf(0.841_344_746) - 1.0).abs() < 1e-6);
        assert!(inv_norm_cdf(0.0).is_finite() && inv_norm_cdf(1.0).is_finite());
        assert!(inv_norm_cdf(f64::NAN).abs() < 1e-12);
    }

    #[test]
    fn delay_is_clamped_and_bad_parameters_do_not_panic() {
        assert_eq!(delay_with(10, -20), 0);
        assert_eq!(delay_with(10, 5), 15);
        assert_eq!(delay_with(u64::MAX, i64::MAX / 4), MAX_DELAY_NS);
        let mut rng = Rng::new(5);
        for j in [
            Jitter::Pareto {
                scale: u64::MAX,
                alpha: 0.5,
            },
            Jitter::Pareto {
                scale: 7,
                alpha: f64::NAN,
            },
            Jitter::Pareto {
                scale: 7,
                alpha: 1.0,
            },
            Jitter::Normal { sigma: u64::MAX },
            Jitter::Uniform {
                half_width: u64::MAX,
            },
            Jitter::ParetoNormal { sigma: u64::MAX },
        ] {
            for _ in 0..1000 {
                let x = j.sample(&mut rng);
                assert!(x.unsigned_abs() <= MAX_DELAY_NS);
            }
            let _ = (j.mean(), j.median(), j.std_dev(), j.min_offset());
        }
        assert!(Jitter::Pareto {
            scale: 1,
            alpha: 1.0
        }
        .validate()
        .is_err());
        assert!(Jitter::Normal {
            sigma: MAX_DELAY_NS + 1
        }
        .validate()
        .is_err());
        assert!(Jitter::netem_pareto(1_000_000).validate().is_ok());
    }
}
