//! A delay-based autorate for links whose capacity changes (LTE, Starlink, Wi-Fi, a
//! retraining DSL line): Postgate's descendants, written after cake-autorate (v3, its
//! `defaults.sh` and main loop) as a sans-IO controller.
//!
//! The owner (the [`crate::Device`]) probes the reflectors this controller names
//! ([`Autorate::next_reflector`]) round robin, hands it each reply's delay
//! ([`Autorate::on_delay`]), the bytes the shaped link has sent every `load_interval`
//! ([`Autorate::on_load`]), a health check every `health_interval`
//! ([`Autorate::on_health`]), and applies [`Autorate::rate_bps`] to the shaped link.
//!
//! # The algorithm (times in seconds inside, rates in bit/s)
//! * **Delay.** A round-trip probe gives `d = rtt / 2` (cake-autorate's fping mode: half
//!   the RTT stands for the one-way delay, and the thresholds apply to it).
//! * **Baseline** per reflector, an EWMA that rises slowly and falls fast:
//!   `base ← α·d + (1 − α)·base` with `α = alpha_up` (0.001) if `d ≥ base`, else
//!   `alpha_down` (0.9); the first reply sets it. A jump of more than 50 min is a clock
//!   wrap: the baseline restarts at `d`. The delay's **delta** is `δ = d − base`.
//! * **Delta EWMA** per reflector, `e ← 0.095·δ + 0.905·e`, updated only while the load is
//!   low (it measures a reflector's own noise, for the comparison below).
//! * **Detection.** The last `window` (6) deltas from any reflector; a delta above the
//!   *compensated* threshold `thr = delay_thr + frame` (30 ms plus one maximum frame's
//!   time at the current rate, `max_frame_bits / rate`) is *delayed*. Bufferbloat: at
//!   least `detect` (3) of the window delayed. `avg` = the window's mean delta.
//! * **Rate, after every reply:**
//!   - bufferbloat, and `bufferbloat_refractory` (300 ms) since the last cut: `rate ×=
//!     down_min − f·(down_min − down_max)`, `f = clamp((avg − thr)/(down_thr − thr), 0,
//!     1)` (0.99 at the threshold, 0.75 at `down_thr` = 60 ms + frame);
//!   - else high load (the achieved rate above `high_load` (0.75) of `rate` at the last
//!     load sample, and a load sample since the last increase), and the bufferbloat
//!     refractory period over: `rate ×= up_min + f·(up_max − up_min)`, `f = clamp((thr −
//!     avg)/(thr − up_thr), 0, 1)` (×1.04 at or below `up_thr` = 10 ms + frame, ×1.0 at
//!     the threshold);
//!   - else (low load), `decay_refractory` (1 s) since the last change: `rate` decays
//!     towards `base` by ×0.99 from above or ×1.01 from below, never past it;
//!   - then `rate` is held within `[min, max]`.
//! * **Reflector health**, every `health_interval` (1 s): an active reflector with no
//!   reply for `deadline` (1 s) commits an offence; `misbehave` (3) offences within the
//!   last `health_window` (60) checks, or (every `compare_interval`, 60 s) a baseline
//!   more than 20 ms or a delta EWMA more than 10 ms above the least among the active
//!   reflectors, and it is replaced by the first spare one (it goes to the back of the
//!   spares). A reflector's baseline and EWMA are kept while it is spare.
//! * **Stall.** No reply from any reflector for `timeout` (the owner's): the rate falls
//!   to `min` (cake-autorate's `min_shaper_rates_enforcement`), and the next reply
//!   resumes from there.
//!
//! # Invariants
//! `min ≤ rate ≤ max`; the active set has `min(pingers, reflectors)` distinct members and
//! never changes size; the detection window holds at most `window` entries.

use std::collections::VecDeque;

use crate::time::{Duration, Instant};

/// The autorate's parameters (cake-autorate's defaults by [`AutorateConfig::new`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AutorateConfig {
    /// Least, steady-state and greatest rate, bit/s.
    pub min_bps: u64,
    pub base_bps: u64,
    pub max_bps: u64,
    /// Reflectors configured, and how many are probed at once.
    pub reflectors: usize,
    pub pingers: usize,
    /// Delta above which a sample is delayed (30 ms).
    pub delay_thr: Duration,
    /// Mean delta at or below which an increase is the largest (10 ms).
    pub up_thr: Duration,
    /// Mean delta at or above which a cut is the largest (60 ms).
    pub down_thr: Duration,
    /// Detection window (6 samples) and how many delayed samples are bufferbloat (3).
    pub window: usize,
    pub detect: usize,
    /// Baseline EWMA weights when the delay is above it (0.001) and below it (0.9).
    pub alpha_up: f64,
    pub alpha_down: f64,
    /// Weight of the delta EWMA (0.095).
    pub alpha_delta: f64,
    /// Factors: cut on bufferbloat 0.99 .. 0.75; increase on high load 1.0 .. 1.04;
    /// decay towards the base rate 0.99 from above, 1.01 from below.
    pub down_min: f64,
    pub down_max: f64,
    pub up_min: f64,
    pub up_max: f64,
    pub decay_down: f64,
    pub decay_up: f64,
    /// Achieved / set rate above which the load is high (0.75).
    pub high_load: f64,
    pub bufferbloat_refractory: Duration,
    pub decay_refractory: Duration,
    /// Period of the achieved-rate samples (200 ms).
    pub load_interval: Duration,
    /// The largest frame on the wire, bits (MTU plus per-frame overhead).
    pub max_frame_bits: u64,
    /// Reflector health: check period (1 s), reply deadline (1 s), window (60 checks),
    /// offences that replace a reflector (3); comparison period (60 s) and how far above
    /// the least a baseline (20 ms) or delta EWMA (10 ms) may be.
    pub health_interval: Duration,
    pub deadline: Duration,
    pub health_window: usize,
    pub misbehave: usize,
    pub compare_interval: Duration,
    pub baseline_spread: Duration,
    pub ewma_spread: Duration,
}

impl AutorateConfig {
    /// cake-autorate's defaults over `min ≤ base ≤ max` (bit/s) and `reflectors`, six
    /// probed at once.
    pub fn new(min_bps: u64, base_bps: u64, max_bps: u64, reflectors: usize) -> Self {
        AutorateConfig {
            min_bps,
            base_bps,
            max_bps,
            reflectors,
            pingers: reflectors.min(6),
            delay_thr: Duration::from_millis(30),
            up_thr: Duration::from_millis(10),
            down_thr: Duration::from_millis(60),
            window: 6,
            detect: 3,
            alpha_up: 0.001,
            alpha_down: 0.9,
            alpha_delta: 0.095,
            down_min: 0.99,
            down_max: 0.75,
            up_min: 1.0,
            up_max: 1.04,
            decay_down: 0.99,
            decay_up: 1.01,
            high_load: 0.75,
            bufferbloat_refractory: Duration::from_millis(300),
            decay_refractory: Duration::from_secs(1),
            load_interval: Duration::from_millis(200),
            max_frame_bits: 1514 * 8,
            health_interval: Duration::from_secs(1),
            deadline: Duration::from_secs(1),
            health_window: 60,
            misbehave: 3,
            compare_interval: Duration::from_secs(60),
            baseline_spread: Duration::from_millis(20),
            ewma_spread: Duration::from_millis(10),
        }
    }

    /// Check the configuration; the message names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_bps > 0 && self.min_bps <= self.base_bps && self.base_bps <= self.max_bps) {
            return Err(format!(
                "autorate: the rates must satisfy 0 < floor <= base <= line (got {}, {}, {} bit/s)",
                self.min_bps, self.base_bps, self.max_bps
            ));
        }
        if self.reflectors == 0 || self.pingers == 0 || self.pingers > self.reflectors {
            return Err(format!(
                "autorate: needs 1 <= pingers <= reflectors (got {} of {})",
                self.pingers, self.reflectors
            ));
        }
        if self.window == 0 || self.detect == 0 || self.detect > self.window {
            return Err(format!(
                "autorate: needs 1 <= detect <= window (got {} of {})",
                self.detect, self.window
            ));
        }
        if self.delay_thr <= self.up_thr || self.down_thr <= self.delay_thr {
            return Err(format!(
                "autorate: the thresholds must rise: up {} < delay {} < down {}",
                self.up_thr, self.delay_thr, self.down_thr
            ));
        }
        if !(self.high_load > 0.0 && self.high_load < 1.0) {
            return Err(format!(
                "autorate: high_load must be in (0, 1) (got {})",
                self.high_load
            ));
        }
        if self.health_window == 0 || self.misbehave == 0 || self.misbehave > self.health_window {
            return Err("autorate: needs 1 <= misbehave <= health_window".into());
        }
        Ok(())
    }
}

/// One reflector's state.
#[derive(Clone, Debug, Default)]
pub struct Reflector {
    /// Baseline delay (s) and delta EWMA (s); `None` before the first reply.
    pub baseline: Option<f64>,
    pub delta_ewma: f64,
    /// The newest delta (s).
    pub delta: Option<f64>,
    pub replies: u64,
    /// Offences in the health window (newest at the back) and their number.
    offences: VecDeque<bool>,
    pub offence_count: usize,
    /// Times it was replaced.
    pub replaced: u64,
    last_reply: Option<Instant>,
}

/// Why the rate changed last (for the stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Action {
    #[default]
    None,
    Cut,
    Raise,
    Decay,
    Floor,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Cut => "cut on bufferbloat",
            Action::Raise => "raise on load",
            Action::Decay => "decay to base",
            Action::Floor => "floor (stall)",
        }
    }
}

/// The controller; see the module comment.
#[derive(Clone, Debug)]
pub struct Autorate {
    cfg: AutorateConfig,
    rate: f64,
    reflectors: Vec<Reflector>,
    /// Indices of the probed reflectors, and the spares in order of use.
    active: Vec<usize>,
    spare: VecDeque<usize>,
    cursor: usize,
    /// (delayed, delta s) of the newest replies.
    window: VecDeque<(bool, f64)>,
    load: f64,
    load_fresh: bool,
    last_bytes: Option<u64>,
    last_cut: Option<Instant>,
    last_change: Option<Instant>,
    next_compare: Instant,
    last_action: Action,
}

impl Autorate {
    pub fn new(cfg: AutorateConfig, now: Instant) -> Result<Autorate, String> {
        cfg.validate()?;
        Ok(Autorate {
            rate: cfg.base_bps as f64,
            reflectors: vec![Reflector::default(); cfg.reflectors],
            active: (0..cfg.pingers).collect(),
            spare: (cfg.pingers..cfg.reflectors).collect(),
            cursor: 0,
            window: VecDeque::with_capacity(cfg.window),
            load: 0.0,
            load_fresh: false,
            last_bytes: None,
            last_cut: None,
            last_change: None,
            next_compare: now + cfg.compare_interval,
            last_action: Action::None,
            cfg,
        })
    }

    pub fn config(&self) -> &AutorateConfig {
        &self.cfg
    }

    /// The shaped link's rate, bit/s.
    pub fn rate_bps(&self) -> u64 {
        self.rate.round() as u64
    }

    /// Achieved / set rate at the last load sample.
    pub fn load(&self) -> f64 {
        self.load
    }

    pub fn last_action(&self) -> Action {
        self.last_action
    }

    /// Whether the detection window shows bufferbloat now, and its mean delta (s).
    pub fn bufferbloat(&self) -> (bool, f64) {
        let delayed = self.window.iter().filter(|w| w.0).count();
        let avg = self.window.iter().map(|w| w.1).sum::<f64>() / self.cfg.window as f64;
        (delayed >= self.cfg.detect, avg)
    }

    pub fn reflectors(&self) -> &[Reflector] {
        &self.reflectors
    }

    pub fn is_active(&self, r: usize) -> bool {
        self.active.contains(&r)
    }

    /// Start the clocks at `now` (the owner's first poll).
    pub fn start(&mut self, now: Instant) {
        self.next_compare = now + self.cfg.compare_interval;
        for &r in &self.active {
            self.reflectors[r].last_reply = Some(now);
        }
    }

    /// The reflector to probe next (round robin over the active ones).
    pub fn next_reflector(&mut self) -> usize {
        self.cursor = (self.cursor + 1) % self.active.len();
        self.active[self.cursor]
    }

    /// The compensated thresholds (s): one maximum frame's time at the current rate added
    /// to each of (up, delay, down).
    pub fn thresholds(&self) -> (f64, f64, f64) {
        let frame = self.cfg.max_frame_bits as f64 / self.rate.max(1.0);
        let c = &self.cfg;
        (
            c.up_thr.as_secs_f64() + frame,
            c.delay_thr.as_secs_f64() + frame,
            c.down_thr.as_secs_f64() + frame,
        )
    }

    /// The shaped link had sent `bytes` in all at `now`, one `load_interval` after the
    /// last call: the achieved rate and the load.
    pub fn on_load(&mut self, bytes: u64, period: Duration) {
        if let Some(last) = self.last_bytes {
            let bps = bytes.saturating_sub(last) as f64 * 8.0 / period.as_secs_f64().max(1e-9);
            self.load = bps / self.rate.max(1.0);
            self.load_fresh = true;
        }
        self.last_bytes = Some(bytes);
    }

    /// A reply from reflector `r` at `now` with round-trip time `rtt`: the delay's
    /// baseline and delta, the detection window, the rate.
    pub fn on_rtt(&mut self, r: usize, rtt: Duration, now: Instant) {
        self.on_delay(r, rtt.as_secs_f64() / 2.0, now)
    }

    /// As [`Autorate::on_rtt`] with a one-way delay `d` (s; any constant offset).
    pub fn on_delay(&mut self, r: usize, d: f64, now: Instant) {
        let Some(refl) = self.reflectors.get_mut(r) else {
            return;
        };
        let c = &self.cfg;
        refl.replies += 1;
        refl.last_reply = Some(now);
        let base = match refl.baseline {
            Some(b) if (d - b).abs() <= 3000.0 => {
                let a = if d >= b { c.alpha_up } else { c.alpha_down };
                a * d + (1.0 - a) * b
            }
            _ => d,
        };
        refl.baseline = Some(base);
        let delta = d - base;
        refl.delta = Some(delta);
        if self.load < c.high_load {
            refl.delta_ewma = c.alpha_delta * delta + (1.0 - c.alpha_delta) * refl.delta_ewma;
        }
        if !self.active.contains(&r) {
            return; // a late reply from a reflector just replaced: its state only
        }
        let (up_thr, thr, down_thr) = self.thresholds();
        if self.window.len() == c.window {
            self.window.pop_front();
        }
        self.window.push_back((delta > thr, delta));
        self.adjust(now, (up_thr, thr, down_thr));
    }

    fn adjust(&mut self, now: Instant, (up_thr, thr, down_thr): (f64, f64, f64)) {
        let c = &self.cfg;
        let (bloat, avg) = self.bufferbloat();
        let since = |t: Option<Instant>, d: Duration| t.is_none_or(|t| now > t + d);
        let refractory_over = since(self.last_cut, c.bufferbloat_refractory);
        if bloat {
            if refractory_over {
                let f = ((avg - thr) / (down_thr - thr)).clamp(0.0, 1.0);
                self.rate *= c.down_min - f * (c.down_min - c.down_max);
                self.last_cut = Some(now);
                self.last_change = Some(now);
                self.last_action = Action::Cut;
            }
        } else if self.load > c.high_load {
            if self.load_fresh && refractory_over {
                let f = ((thr - avg) / (thr - up_thr)).clamp(0.0, 1.0);
                self.rate *= c.up_min + f * (c.up_max - c.up_min);
                self.load_fresh = false;
                self.last_change = Some(now);
                self.last_action = Action::Raise;
            }
        } else if since(self.last_change, c.decay_refractory) {
            let base = c.base_bps as f64;
            if self.rate > base {
                self.rate = (self.rate * c.decay_down).max(base);
            } else if self.rate < base {
                self.rate = (self.rate * c.decay_up).min(base);
            }
            self.last_change = Some(now);
            self.last_action = Action::Decay;
        }
        self.rate = self.rate.clamp(c.min_bps as f64, c.max_bps as f64);
    }

    /// No reply from any reflector for the owner's timeout: the rate falls to `min`.
    pub fn fall_back(&mut self) {
        self.rate = self.cfg.min_bps as f64;
        self.window.clear();
        self.last_action = Action::Floor;
    }

    /// The health check at `now` (every `health_interval`): offences, and every
    /// `compare_interval` the comparison. Returns the replacements made as (out, in).
    pub fn on_health(&mut self, now: Instant) -> Vec<(usize, usize)> {
        let c = &self.cfg;
        let mut bad = Vec::new();
        for &r in &self.active {
            let refl = &mut self.reflectors[r];
            let late = refl.last_reply.is_none_or(|t| now > t + c.deadline);
            if refl.offences.len() == c.health_window && refl.offences.pop_front() == Some(true) {
                refl.offence_count -= 1;
            }
            refl.offences.push_back(late);
            refl.offence_count += late as usize;
            if refl.offence_count >= c.misbehave {
                bad.push(r);
            }
        }
        if now >= self.next_compare {
            self.next_compare = self.next_compare.next_tick(c.compare_interval, now);
            let known: Vec<(usize, f64, f64)> = self
                .active
                .iter()
                .filter_map(|&r| {
                    let x = &self.reflectors[r];
                    x.baseline.map(|b| (r, b, x.delta_ewma))
                })
                .collect();
            let least_b = known.iter().map(|k| k.1).fold(f64::INFINITY, f64::min);
            let least_e = known.iter().map(|k| k.2).fold(f64::INFINITY, f64::min);
            for (r, b, e) in known {
                let far = b - least_b > c.baseline_spread.as_secs_f64()
                    || e - least_e > c.ewma_spread.as_secs_f64();
                if far && !bad.contains(&r) {
                    bad.push(r);
                }
            }
        }
        let mut swaps = Vec::new();
        for r in bad {
            let Some(new) = self.spare.pop_front() else {
                break; // nothing to replace it with: keep it
            };
            let slot = self.active.iter().position(|&a| a == r).expect("active");
            self.active[slot] = new;
            self.spare.push_back(r);
            let out = &mut self.reflectors[r];
            out.offences.clear();
            out.offence_count = 0;
            out.replaced += 1;
            self.reflectors[new].last_reply = Some(now);
            swaps.push((r, new));
        }
        swaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn at(x: u64) -> Instant {
        Instant::ZERO + ms(x)
    }

    /// 20 Mbit/s base within 5..80, one reflector; frames of 12 000 bits take 0.6 ms at
    /// 20 Mbit/s, so the thresholds are 10.6 / 30.6 / 60.6 ms.
    fn ar() -> Autorate {
        let mut c = AutorateConfig::new(5_000_000, 20_000_000, 80_000_000, 1);
        c.max_frame_bits = 12_000;
        Autorate::new(c, Instant::ZERO).unwrap()
    }

    #[test]
    fn thresholds_add_one_frame_at_the_current_rate() {
        let (u, d, x) = ar().thresholds();
        close(u, 0.0106);
        close(d, 0.0306);
        close(x, 0.0606);
    }

    /// Baseline by hand: first reply 20 ms sets it; then 30 ms (above): 0.001·30 +
    /// 0.999·20 = 20.01 ms, delta 9.99 ms; then 10 ms (below): 0.9·10 + 0.1·20.01 =
    /// 11.001 ms, delta −1.001 ms. The delta EWMA (load low): 0.095·9.99 = 0.94905, then
    /// 0.095·(−1.001) + 0.905·0.94905 = 0.763795... ms.
    #[test]
    fn baseline_rises_slowly_and_falls_fast() {
        let mut a = ar();
        a.on_delay(0, 0.020, at(0));
        close(a.reflectors()[0].baseline.unwrap(), 0.020);
        a.on_delay(0, 0.030, at(50));
        close(a.reflectors()[0].baseline.unwrap(), 0.02001);
        close(a.reflectors()[0].delta.unwrap(), 0.00999);
        close(a.reflectors()[0].delta_ewma, 0.095 * 0.00999);
        a.on_delay(0, 0.010, at(100));
        close(a.reflectors()[0].baseline.unwrap(), 0.011001);
        close(
            a.reflectors()[0].delta_ewma,
            0.095 * -0.001001 + 0.905 * 0.095 * 0.00999,
        );
        // an RTT counts half
        a.on_rtt(0, ms(22), at(150));
        assert!(a.reflectors()[0].delta.unwrap() < 0.0);
    }

    /// Detection by hand: deltas 0, 0, 0 (baseline 0), then 60 ms replies whose baseline
    /// creeps up by 0.001 of each (b1 = 0.06 µs·1000 = 60 µs, b2 = 0.06·0.001 + 0.999·b1,
    /// …): the third delayed one (3 of 6) is bufferbloat; the window's mean (≈ 29.97 ms) is
    /// below the 30.6 ms threshold, f = 0, the cut is ×0.99. Within 300 ms no second cut;
    /// after it, two 70 ms replies lift the mean above the threshold: f = (mean − thr) /
    /// 30 ms, with thr = 30 ms + 12 000 bits at the cut rate.
    #[test]
    fn a_cut_follows_three_delayed_of_six() {
        let mut a = ar();
        for t in 0..3 {
            a.on_delay(0, 0.0, at(t * 50));
        }
        assert_eq!(a.rate_bps(), 20_000_000);
        let (mut base, mut deltas) = (0.0, vec![]);
        let mut reply = |a: &mut Autorate, d: f64, t: u64| {
            base = 0.001 * d + 0.999 * base;
            deltas.push(d - base);
            a.on_delay(0, d, at(t));
            deltas.clone()
        };
        reply(&mut a, 0.060, 200);
        reply(&mut a, 0.060, 250);
        assert!(!a.bufferbloat().0);
        close(a.rate, 20e6);
        let deltas = reply(&mut a, 0.060, 400);
        let (bloat, avg) = a.bufferbloat();
        assert!(bloat);
        close(avg, (deltas[0] + deltas[1] + deltas[2]) / 6.0);
        close(a.rate, 20e6 * 0.99);
        assert_eq!(a.last_action(), Action::Cut);
        reply(&mut a, 0.07, 600);
        close(a.rate, 20e6 * 0.99);
        let deltas = reply(&mut a, 0.07, 701);
        let mean = deltas.iter().sum::<f64>() / 6.0;
        let thr = 0.030 + 12_000.0 / (20e6 * 0.99);
        let f = (mean - thr) / 0.030;
        assert!(f > 0.0 && f < 1.0, "{f}");
        close(a.rate, 20e6 * 0.99 * (0.99 - f * 0.24));
    }

    /// The cut's factor by hand at 20 Mbit/s: a window of six 45.6 ms deltas (mean 45.6
    /// ms) gives f = (45.6 − 30.6)/(60.6 − 30.6) = 0.5, ×(0.99 − 0.5·0.24) = ×0.87.
    #[test]
    fn cut_factor_by_hand() {
        let mut a = ar();
        a.window = std::iter::repeat_n((true, 0.0456), 6).collect();
        a.adjust(at(1000), a.thresholds());
        close(a.rate, 20e6 * 0.87);
        // beyond 60.6 ms: ×0.75
        let mut a = ar();
        a.window = std::iter::repeat_n((true, 0.5), 6).collect();
        a.adjust(at(1000), a.thresholds());
        close(a.rate, 20e6 * 0.75);
    }

    /// Raise by hand: load 0.9 (18 Mbit/s achieved of 20), mean delta 20.6 ms: f = (30.6
    /// − 20.6)/(30.6 − 10.6) = 0.5, ×1.02; once per load sample; mean ≤ 10.6 ms: ×1.04.
    #[test]
    fn raise_needs_high_load_and_a_fresh_sample() {
        let mut a = ar();
        a.on_load(0, ms(200));
        a.on_load(450_000, ms(200)); // 18 Mbit/s
        close(a.load(), 0.9);
        a.window = std::iter::repeat_n((false, 0.0206), 6).collect();
        a.adjust(at(1000), a.thresholds());
        close(a.rate, 20e6 * 1.02);
        a.adjust(at(1050), a.thresholds());
        close(a.rate, 20e6 * 1.02); // no new load sample: no second raise
        a.on_load(450_000 + 500_000, ms(200)); // 20 Mbit/s of 20.4
        a.window = std::iter::repeat_n((false, 0.0), 6).collect();
        a.adjust(at(1250), a.thresholds());
        close(a.rate, 20e6 * 1.02 * 1.04);
    }

    /// Low load: decay towards base once per second, never past it; clamps to min/max.
    #[test]
    fn low_load_decays_to_base() {
        let mut a = ar();
        a.rate = 30e6;
        a.adjust(at(0), a.thresholds());
        close(a.rate, 30e6 * 0.99);
        a.adjust(at(500), a.thresholds());
        close(a.rate, 30e6 * 0.99); // refractory
        a.adjust(at(1001), a.thresholds());
        close(a.rate, 30e6 * 0.99 * 0.99);
        a.rate = 20.1e6;
        a.adjust(at(2002), a.thresholds());
        close(a.rate, 20e6);
        a.rate = 19e6;
        a.adjust(at(3003), a.thresholds());
        close(a.rate, 19e6 * 1.01);
        // bounds
        a.rate = 5.01e6;
        a.window = std::iter::repeat_n((true, 1.0), 6).collect();
        a.adjust(at(5000), a.thresholds());
        close(a.rate, 5e6);
        a.fall_back();
        close(a.rate, 5e6);
        assert_eq!(a.last_action(), Action::Floor);
    }

    /// Round robin over the active set; three offences in the window replace a silent
    /// reflector by the first spare, which goes back of the queue.
    #[test]
    fn a_silent_reflector_is_replaced() {
        let mut c = AutorateConfig::new(1_000_000, 10_000_000, 10_000_000, 3);
        c.pingers = 2;
        let mut a = Autorate::new(c, Instant::ZERO).unwrap();
        a.start(Instant::ZERO);
        let order: Vec<usize> = (0..4).map(|_| a.next_reflector()).collect();
        assert_eq!(order, vec![1, 0, 1, 0]);
        // reflector 0 answers, 1 is silent
        for s in 1..=3 {
            a.on_delay(0, 0.01, at(s * 1000 - 10));
            let swaps = a.on_health(at(s * 1000 + 1));
            if s < 3 {
                // late only from 1 s + 1 ms: the 1st check is an offence, 2nd, 3rd...
                assert!(swaps.is_empty(), "check {s}: {swaps:?}");
            } else {
                assert_eq!(swaps, vec![(1, 2)]);
            }
        }
        assert!(a.is_active(2) && !a.is_active(1));
        assert_eq!(a.reflectors()[1].replaced, 1);
        // replies from the replaced reflector update only its own state
        let rate = a.rate;
        a.on_delay(1, 5.0, at(3100));
        close(a.rate, rate);
    }

    /// Every compare interval, a reflector whose baseline is more than 20 ms above the
    /// least is rotated out.
    #[test]
    fn a_far_reflector_is_rotated_out() {
        let c = AutorateConfig::new(1_000_000, 10_000_000, 10_000_000, 3);
        let mut c = c;
        c.pingers = 2;
        let mut a = Autorate::new(c, Instant::ZERO).unwrap();
        a.start(Instant::ZERO);
        a.on_delay(0, 0.010, at(100));
        a.on_delay(1, 0.040, at(100));
        for s in 1..60 {
            a.on_delay(0, 0.010, at(s * 1000 - 5));
            a.on_delay(1, 0.040, at(s * 1000 - 5));
            assert!(a.on_health(at(s * 1000)).is_empty());
        }
        a.on_delay(0, 0.010, at(59_995));
        a.on_delay(1, 0.040, at(59_995));
        assert_eq!(a.on_health(at(60_000)), vec![(1, 2)]);
    }

    #[test]
    fn validation_names_the_problem() {
        let bad = AutorateConfig::new(10, 5, 20, 1);
        assert!(bad
            .validate()
            .unwrap_err()
            .contains("floor <= base <= line"));
        let mut bad = AutorateConfig::new(1, 5, 20, 2);
        bad.pingers = 3;
        assert!(bad.validate().unwrap_err().contains("pingers"));
    }
}
