//! Postgate (seed 003, Hsieh & Wu): move the bottleneck of a last-mile link off the
//! upstream device (the ISP's ATU-C, whose queue the subscriber cannot manage) into weir,
//! by probing the upstream queue's delay and shaping just below the line.
//!
//! Sans-IO: the owner (the [`crate::Device`]) sends the probes this controller asks for,
//! hands it each reply's round-trip time and, every `sample` period, each class's backlog
//! and drops; it applies [`Postgate::rate`] to the shaped link and [`Postgate::weights`]
//! to the classes. Every call takes `now`.
//!
//! # The equations (seed 003 section 2), as implemented
//! Units: delays in seconds, `B` and the weights as fractions (the line = 1).
//! * Probe `i`'s queueing delay `δ_i = rtt_i − min rtt` (the least RTT seen so far).
//! * Eq. 1: `δ̄_i = max δ_j, i−p ≤ j ≤ i` (the last `p + 1` probes).
//! * Eq. 2: `B_i = min(1 − δ̄_i/(25δ), B_{i−1} + B_{i−1}·max(0.5δ − δ̄_i, −0.1)/p)`,
//!   then held within `[floor, 1]` (the paper leaves it unbounded below; a floor keeps a
//!   burst of late replies from closing the link). `B_0 = 1`.
//! * Eq. 4, every `sample` (10 ms): `Δ_i^k = s_i^k + d_i^k − s_{i−1}^k`, class `k`'s
//!   backlog `s` (bytes) now, plus the bytes it dropped since the last sample, less its
//!   backlog then.
//! * Eq. 5: `b_i^k = Σ_{j=1..n} 2^{−j} Σ_{Δ in block j} Δ / (MTU·(1 − 2^{−n}))`, block 1
//!   the newest `m` samples, block 2 the `m` before, … (the paper's inner sum is over
//!   the samples of block `j`; its `Δ_j^k` is read as those samples). With the defaults
//!   (`n` = 5, `m` = 100, 10 ms) it is a weighted mean, in MTU packets, of the extra
//!   packets the class queued per second over the last 5 s. Samples not yet taken
//!   count 0.
//! * Eq. 6: `s̄_i^k = φ_{i−1}^k + min(Nδ − 2b_i^k + 2, 0.5Nδ)/(2Np)·φ_0^k`, `N` = the
//!   line's rate in MTU packets per second; the proposal `φ̄_i^k` is `s̄` held within
//!   `[0, φ_0^k]` (the paper's normalisation, garbled in print, read as a clamp).
//! * Eq. 7: `d^k = φ̄_i^k − φ_{i−1}^k`; `d⁺`, `d⁻` the sums of the positive and negative
//!   ones over the active classes, and `D_i = Σ φ̄_i^k` over the active classes — all three
//!   divided by `Σ φ_0` over every class so that they compare with `B` as eq. 3 does.
//! * Eqs. 8, 9: `γ⁺ = 1 + max(0, B_i − D_i)/d⁺` and `γ⁻ = 1 + max(0, D_i − B_i)/|d⁻|`
//!   (the paper divides by `d⁻`, which is negative and would *shrink* the cut when the
//!   proposal is above `B`: a sign slip; with `|d⁻|` the weights' sum lands on `B`, as
//!   `γ⁺` makes it do when raising). 1 when the sum it divides by is 0.
//! * Eq. 10: `φ_i^k = φ_{i−1}^k + d^k·γ⁺` if `d^k ≥ 0`, else `+ d^k·γ⁻` (the paper prints
//!   the aggregate `d̄_i^±`, which would move every class by the same amount: read as
//!   each class's own `d^k`); then held within `[φ_0^k/100, φ_0^k]` — the paper's
//!   `(0, φ_0^k]`, with a floor so that a class is never shut out.
//!
//! Active classes (`A_i`): those that held packets or received any during the last
//! `sample` period before the probe; the others keep their weights.
//!
//! # Parameters ([`PostgateConfig`])
//! `p` (probes, default 100), `delta` (δ, default 100 ms), `n` (5) and `m` (100) of
//! eq. 5, `sample` (10 ms), `mtu` (bytes), `line_bps` (the line rate `B` and the weights
//! are fractions of), `floor` (least `B`, default 0.5), the initial weights `φ_0`.
//!
//! # Invariants
//! `floor ≤ B ≤ 1`; `φ_0^k/100 ≤ φ^k ≤ φ_0^k`; the delay history holds at most `p + 1`
//! values; each class's sample history at most `n·m`.

use std::collections::VecDeque;

use crate::time::{Duration, Instant};

/// Postgate's parameters; see the module comment.
#[derive(Clone, Debug, PartialEq)]
pub struct PostgateConfig {
    /// Probes referred to (eqs. 1, 2, 6).
    pub p: u32,
    /// δ, the delay the active flows require.
    pub delta: Duration,
    /// Blocks of the burst index (eq. 5).
    pub n: u32,
    /// Samples per block (eq. 5).
    pub m: u32,
    /// Period of the Δ samples (eq. 4).
    pub sample: Duration,
    /// Bytes.
    pub mtu: u32,
    /// The line's rate, bit/s.
    pub line_bps: u64,
    /// The least `B` (fraction of the line).
    pub floor: f64,
    /// φ_0 per class, > 0.
    pub weights: Vec<f64>,
}

impl PostgateConfig {
    /// Seed 003's values: p = 100, δ = 100 ms, n = 5, m = 100, Δ every 10 ms; MTU 1500
    /// bytes, floor 0.5.
    pub fn paper(line_bps: u64, weights: Vec<f64>) -> Self {
        PostgateConfig {
            p: 100,
            delta: Duration::from_millis(100),
            n: 5,
            m: 100,
            sample: Duration::from_millis(10),
            mtu: 1500,
            line_bps,
            floor: 0.5,
            weights,
        }
    }

    /// Check the configuration; the message names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        if self.p == 0 || self.n == 0 || self.m == 0 {
            return Err(format!(
                "postgate: p, n and m must be at least 1 (got {}, {}, {})",
                self.p, self.n, self.m
            ));
        }
        if self.n > 30 {
            return Err(format!("postgate: n must be at most 30 (got {})", self.n));
        }
        if self.delta == Duration::ZERO || self.sample == Duration::ZERO {
            return Err("postgate: delta and the sample period must be above 0".into());
        }
        if self.mtu == 0 || self.line_bps == 0 {
            return Err("postgate: the line rate and the MTU must be above 0".into());
        }
        if !(self.floor > 0.0 && self.floor <= 1.0) {
            return Err(format!(
                "postgate: floor must be in (0, 1] of the line (got {})",
                self.floor
            ));
        }
        if self.weights.is_empty() || self.weights.iter().any(|&w| !(w > 0.0 && w.is_finite())) {
            return Err("postgate: every class needs a weight above 0".into());
        }
        Ok(())
    }
}

/// What a class reports each sample: backlog (bytes), bytes dropped so far (a running
/// total), and whether it held or received anything since the last sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassSample {
    pub backlog: u64,
    pub dropped_total: u64,
    pub active: bool,
}

#[derive(Clone, Debug)]
struct Class {
    phi0: f64,
    phi: f64,
    /// Backlog and running drop total at the last sample.
    last: Option<(u64, u64)>,
    /// The newest `n·m` values of Δ (bytes), newest at the back.
    deltas: VecDeque<i64>,
    active: bool,
    burst: f64,
}

/// The controller; see the module comment.
#[derive(Clone, Debug)]
pub struct Postgate {
    cfg: PostgateConfig,
    min_rtt: Option<Duration>,
    /// The newest `p + 1` values of δ (s), newest at the back.
    delays: VecDeque<f64>,
    b: f64,
    classes: Vec<Class>,
    next_sample: Instant,
    probes: u64,
}

impl Postgate {
    pub fn new(cfg: PostgateConfig, now: Instant) -> Result<Postgate, String> {
        cfg.validate()?;
        let hist = (cfg.n * cfg.m) as usize;
        let classes = cfg
            .weights
            .iter()
            .map(|&w| Class {
                phi0: w,
                phi: w,
                last: None,
                deltas: VecDeque::with_capacity(hist),
                active: false,
                burst: 0.0,
            })
            .collect();
        Ok(Postgate {
            delays: VecDeque::with_capacity(cfg.p as usize + 1),
            next_sample: now + cfg.sample,
            cfg,
            min_rtt: None,
            b: 1.0,
            classes,
            probes: 0,
        })
    }

    pub fn config(&self) -> &PostgateConfig {
        &self.cfg
    }

    /// `B`, the shaped link's rate as a fraction of the line.
    pub fn rate(&self) -> f64 {
        self.b
    }

    /// The classes' weights φ (fractions; φ_0 as configured).
    pub fn weights(&self) -> impl Iterator<Item = f64> + '_ {
        self.classes.iter().map(|c| c.phi)
    }

    /// Each class's burst index at the last probe (eq. 5, MTU packets).
    pub fn burst_indices(&self) -> impl Iterator<Item = f64> + '_ {
        self.classes.iter().map(|c| c.burst)
    }

    /// The newest δ (s), if a reply came.
    pub fn delay(&self) -> Option<f64> {
        self.delays.back().copied()
    }

    /// The least RTT seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Replies used so far.
    pub fn probes(&self) -> u64 {
        self.probes
    }

    /// Sampling starts at `now` (the first sample is due one period later).
    pub fn start(&mut self, now: Instant) {
        self.next_sample = now + self.cfg.sample;
    }

    /// When the next Δ sample is due.
    pub fn next_sample(&self) -> Instant {
        self.next_sample
    }

    /// Eq. 4: take a sample of every class (in the configured order) if one is due at
    /// `now`; samples missed (the driver was late) count as one. Returns whether it took
    /// one.
    pub fn on_sample(&mut self, now: Instant, classes: &[ClassSample]) -> bool {
        if now < self.next_sample {
            return false;
        }
        let hist = (self.cfg.n * self.cfg.m) as usize;
        for (c, s) in self.classes.iter_mut().zip(classes) {
            if let Some((backlog, dropped)) = c.last {
                let d = s.backlog as i64 + s.dropped_total.saturating_sub(dropped) as i64
                    - backlog as i64;
                if c.deltas.len() == hist {
                    c.deltas.pop_front();
                }
                c.deltas.push_back(d);
            }
            c.last = Some((s.backlog, s.dropped_total));
            c.active = s.active || s.backlog > 0;
        }
        self.next_sample = self.next_sample.next_tick(self.cfg.sample, now);
        true
    }

    /// A probe's reply: its round-trip time. Updates δ, `B` (eqs. 1-2) and the weights
    /// (eqs. 5-10).
    pub fn on_rtt(&mut self, rtt: Duration) {
        let min = self.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.min_rtt = Some(min);
        let delay = (rtt.as_nanos() - min.as_nanos()) as f64 * 1e-9;
        if self.delays.len() == self.cfg.p as usize + 1 {
            self.delays.pop_front();
        }
        self.delays.push_back(delay);
        self.probes += 1;
        let max_delay = self.delays.iter().copied().fold(0.0, f64::max);
        self.b = throughput(self.b, max_delay, &self.cfg).clamp(self.cfg.floor, 1.0);
        let (n, m, mtu) = (self.cfg.n, self.cfg.m as usize, self.cfg.mtu);
        for c in &mut self.classes {
            c.burst = burst_index(&c.deltas, n, m, mtu);
        }
        self.adjust_weights();
    }

    /// Fall back to `floor` (replies stopped): `B = floor`, the weights as they are.
    pub fn fall_back(&mut self) {
        self.b = self.cfg.floor;
    }

    /// Eqs. 6-10 over the active classes.
    fn adjust_weights(&mut self) {
        let cfg = &self.cfg;
        // N: the line's rate in MTU packets per second
        let n = cfg.line_bps as f64 / (8.0 * cfg.mtu as f64);
        let (n_delta, two_n_p) = (n * cfg.delta.as_secs_f64(), 2.0 * n * cfg.p as f64);
        let sum0: f64 = self.classes.iter().map(|c| c.phi0).sum();
        let proposed: Vec<Option<f64>> = self
            .classes
            .iter()
            .map(|c| {
                c.active
                    .then(|| proposed_weight(c.phi, c.phi0, c.burst, n_delta, two_n_p))
            })
            .collect();
        let (mut up, mut down, mut total) = (0.0, 0.0, 0.0);
        for (c, p) in self.classes.iter().zip(&proposed) {
            if let Some(p) = p {
                let d = p - c.phi;
                if d >= 0.0 {
                    up += d;
                } else {
                    down += d;
                }
                total += p;
            }
        }
        let (gu, gd) = gammas(self.b, total / sum0, up / sum0, down / sum0);
        for (c, p) in self.classes.iter_mut().zip(proposed) {
            if let Some(p) = p {
                let d = p - c.phi;
                let g = if d >= 0.0 { gu } else { gd };
                c.phi = (c.phi + d * g).clamp(c.phi0 / 100.0, c.phi0);
            }
        }
    }
}

/// Eq. 2 (without the floor): the new `B` from the last one and `δ̄` (s).
pub fn throughput(last: f64, max_delay: f64, cfg: &PostgateConfig) -> f64 {
    let delta = cfg.delta.as_secs_f64();
    let md = 1.0 - max_delay / (25.0 * delta);
    let ai = last + last * (0.5 * delta - max_delay).max(-0.1) / cfg.p as f64;
    md.min(ai)
}

/// Eq. 5: the burst index (MTU packets) of Δ samples `deltas` (bytes, newest last),
/// `n` blocks of `m`.
pub fn burst_index(deltas: &VecDeque<i64>, n: u32, m: usize, mtu: u32) -> f64 {
    let mut sum = 0.0;
    let mut weight = 0.5;
    let mut newest = deltas.iter().rev();
    for _ in 0..n {
        let block: i64 = newest.by_ref().take(m).sum();
        sum += weight * block as f64;
        weight *= 0.5;
    }
    sum / (mtu as f64 * (1.0 - 0.5f64.powi(n as i32)))
}

/// Eq. 6 and its clamp: the proposed weight from the last `phi`, `phi0`, the burst index
/// `b`, `Nδ` and `2Np`.
pub fn proposed_weight(phi: f64, phi0: f64, b: f64, n_delta: f64, two_n_p: f64) -> f64 {
    let s = phi + (n_delta - 2.0 * b + 2.0).min(0.5 * n_delta) / two_n_p * phi0;
    s.clamp(0.0, phi0)
}

/// Eqs. 8-9 (with `|d⁻|`, see the module comment): `(γ⁺, γ⁻)` from `B`, `D` and the
/// positive and negative sums `d⁺ ≥ 0`, `d⁻ ≤ 0` (all fractions of `Σφ_0`).
pub fn gammas(b: f64, d: f64, up: f64, down: f64) -> (f64, f64) {
    let gu = if up > 0.0 {
        1.0 + (b - d).max(0.0) / up
    } else {
        1.0
    };
    let gd = if down < 0.0 {
        1.0 + (d - b).max(0.0) / -down
    } else {
        1.0
    };
    (gu, gd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    fn cfg() -> PostgateConfig {
        PostgateConfig::paper(12_000_000, vec![1.0, 1.0])
    }

    /// Eq. 2 by hand, δ = 0.1 s, p = 100, B_{i−1} = 0.9:
    /// δ̄ = 0.02: min(1 − 0.02/2.5, 0.9 + 0.9·0.03/100) = min(0.992, 0.90027) = 0.90027;
    /// δ̄ = 0.3: min(1 − 0.3/2.5, 0.9 + 0.9·max(−0.25, −0.1)/100) = min(0.88, 0.8991).
    #[test]
    fn eq2_increases_additively_and_cuts_by_the_delay() {
        close(throughput(0.9, 0.02, &cfg()), 0.90027);
        close(throughput(0.9, 0.3, &cfg()), 0.88);
        // δ̄ = 0.06: the additive term falls by 0.9·0.01/100
        close(throughput(0.9, 0.06, &cfg()), 0.9 - 0.00009);
    }

    /// Eq. 5 by hand, n = 2, m = 2, MTU 1500, Δ (oldest first) 3000, 0, 1500, 1500:
    /// block 1 = 3000 × 1/2, block 2 = 3000 × 1/4; 2250 / (1500 × 3/4) = 2.
    #[test]
    fn eq5_weights_newer_blocks_more() {
        let d: VecDeque<i64> = [3000, 0, 1500, 1500].into();
        close(burst_index(&d, 2, 2, 1500), 2.0);
        // fewer samples than n·m: the missing count 0 (block 2 is just the 3000)
        let d: VecDeque<i64> = [3000, 1500, 1500].into();
        close(burst_index(&d, 2, 2, 1500), (1500.0 + 750.0) / 1125.0);
        // a constant Δ of one MTU per sample is m packets per block
        let d: VecDeque<i64> = std::iter::repeat_n(1500, 500).collect();
        close(burst_index(&d, 5, 100, 1500), 100.0);
    }

    /// Eq. 6 by hand: 12 Mbit/s of 1500-byte packets is N = 1000/s, Nδ = 100, 2Np =
    /// 200000; φ_{i−1} = 0.5, φ_0 = 1. b = 2: +min(98, 50)/200000 = 0.50025; b = 80:
    /// +min(−58, 50)/200000 = 0.49971. Out of range: clamped to [0, φ_0].
    #[test]
    fn eq6_proposes_by_the_burst_index() {
        close(proposed_weight(0.5, 1.0, 2.0, 100.0, 200_000.0), 0.50025);
        close(proposed_weight(0.5, 1.0, 80.0, 100.0, 200_000.0), 0.49971);
        close(proposed_weight(0.99999, 1.0, 0.0, 100.0, 200_000.0), 1.0);
        close(proposed_weight(0.0001, 1.0, 1e6, 100.0, 200_000.0), 0.0);
    }

    /// Eqs. 7-10 by hand: φ_0 = (1, 1), φ_{i−1} = (0.5, 0.5), proposals (0.6, 0.3):
    /// d = (0.1, −0.2), over Σφ_0 = 2: d⁺ = 0.05, d⁻ = −0.1, D = 0.45.
    /// B = 0.5: γ⁺ = 1 + 0.05/0.05 = 2, γ⁻ = 1: φ = (0.7, 0.3), sum/2 = 0.5 = B.
    /// B = 0.35: γ⁺ = 1, γ⁻ = 1 + 0.1/0.1 = 2: φ = (0.6, 0.1), sum/2 = 0.35 = B.
    #[test]
    fn eqs7_to_10_land_the_weights_on_b() {
        let (gu, gd) = gammas(0.5, 0.45, 0.05, -0.1);
        close(gu, 2.0);
        close(gd, 1.0);
        close(0.5 + 0.1 * gu, 0.7);
        let (gu, gd) = gammas(0.35, 0.45, 0.05, -0.1);
        close(gu, 1.0);
        close(gd, 2.0);
        close(0.5 - 0.2 * gd, 0.1);
        // nothing to scale: 1
        assert_eq!(gammas(0.9, 0.5, 0.0, 0.0), (1.0, 1.0));
    }

    /// δ = RTT − least RTT; δ̄ is the max over the last p + 1 replies, so one slow reply
    /// holds `B` down for p more probes, after which it rises again.
    #[test]
    fn the_delay_history_is_p_plus_one_replies() {
        let mut c = cfg();
        c.p = 3;
        let mut pg = Postgate::new(c, Instant::ZERO).unwrap();
        let ms = Duration::from_millis;
        pg.on_rtt(ms(10));
        pg.on_rtt(ms(110)); // δ = 0.1 s: 1 − 0.1/2.5 = 0.96
        close(pg.rate(), 0.96);
        close(pg.delay().unwrap(), 0.1);
        for _ in 0..3 {
            pg.on_rtt(ms(10));
            assert!(pg.rate() <= 0.96 + 1e-12);
        }
        // the 0.1 s reply has left the window of 4: B grows by 0.05/3 of itself
        let b = pg.rate();
        pg.on_rtt(ms(10));
        close(pg.rate(), (b + b * 0.05 / 3.0).min(1.0));
        assert_eq!(pg.min_rtt(), Some(ms(10)));
        assert_eq!(pg.probes(), 6);
    }

    /// The floor holds `B` when the delay is huge, and `fall_back` sets it.
    #[test]
    fn b_stays_within_floor_and_one() {
        let mut pg = Postgate::new(cfg(), Instant::ZERO).unwrap();
        pg.on_rtt(Duration::from_millis(5));
        pg.on_rtt(Duration::from_secs(5));
        close(pg.rate(), 0.5);
        let mut pg = Postgate::new(cfg(), Instant::ZERO).unwrap();
        pg.fall_back();
        close(pg.rate(), 0.5);
        for _ in 0..10_000 {
            pg.on_rtt(Duration::from_millis(5));
        }
        close(pg.rate(), 1.0);
    }

    /// Samples: Δ = backlog now + new drops − backlog before; a class that keeps queuing
    /// more than its share gets a high burst index and loses weight to a calm one, whose
    /// weight is never cut; a class that goes quiet keeps its weight.
    #[test]
    fn a_bursty_class_loses_weight_and_a_calm_one_keeps_it() {
        let mut c = cfg();
        c.floor = 0.1;
        let mut pg = Postgate::new(c, Instant::ZERO).unwrap();
        let mut now = Instant::ZERO;
        let (mut backlog, mut dropped) = (0u64, 0u64);
        pg.on_rtt(Duration::from_millis(10));
        for k in 0..500 {
            now += Duration::from_millis(10);
            backlog += 3000; // two MTUs more queued every 10 ms ...
            dropped += 1500; // ... and one dropped
            let calm = ClassSample {
                backlog: 1500,
                dropped_total: 0,
                active: true,
            };
            let bursty = ClassSample {
                backlog,
                dropped_total: dropped,
                active: true,
            };
            assert!(pg.on_sample(now, &[calm, bursty]));
            if k == 0 {
                assert!(pg.classes[1].deltas.is_empty(), "the first sample has no Δ");
            }
            if k % 2 == 1 {
                pg.on_rtt(Duration::from_millis(60)); // δ = 50 ms: B holds
            }
        }
        assert_eq!(pg.classes[1].deltas.back(), Some(&4500));
        // 4500 B = 3 MTU per sample, 300 per block: b = 300 once the history is full
        assert!((pg.burst_indices().nth(1).unwrap() - 300.0).abs() < 1.0);
        let w: Vec<f64> = pg.weights().collect();
        close(w[0], 1.0);
        assert!(w[1] < 0.85 && w[1] >= 0.01, "{w:?}");
        // quiet: inactive classes keep their weight
        let before = w[1];
        for _ in 0..10 {
            now += Duration::from_millis(10);
            let idle = ClassSample {
                backlog: 0,
                dropped_total: dropped,
                active: false,
            };
            pg.on_sample(now, &[idle, idle]);
            pg.on_rtt(Duration::from_millis(60));
        }
        close(pg.weights().nth(1).unwrap(), before);
    }

    #[test]
    fn sampling_follows_its_period() {
        let mut pg = Postgate::new(cfg(), Instant::ZERO).unwrap();
        let s = [ClassSample::default(); 2];
        assert!(!pg.on_sample(Instant(9_999_999), &s));
        assert!(pg.on_sample(Instant(10_000_000), &s));
        assert_eq!(pg.next_sample(), Instant(20_000_000));
        // late by 35 ms: one sample, the next a period after now
        assert!(pg.on_sample(Instant(55_000_000), &s));
        assert_eq!(pg.next_sample(), Instant(65_000_000));
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut c = cfg();
        c.p = 0;
        assert!(c.validate().unwrap_err().contains("p, n and m"));
        let mut c = cfg();
        c.floor = 0.0;
        assert!(c.validate().unwrap_err().contains("floor"));
        let mut c = cfg();
        c.weights = vec![1.0, -1.0];
        assert!(c.validate().unwrap_err().contains("weight"));
    }
}
