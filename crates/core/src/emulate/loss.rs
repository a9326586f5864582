//! Packet-loss models for the link emulator, plus frame corruption.
//!
//! A [`LossModel`] is plain configuration; a [`Loss`] is one stream's state machine for it
//! (each emulated link or profile owns one, so the loss pattern of one session does not
//! depend on another's traffic). `Loss::lose` is called once per arriving packet and says
//! whether the emulated link loses it.
//!
//! * `None`: nothing is lost; no RNG draw.
//! * `Bernoulli { p }`: each packet is lost independently with probability `p` (netem
//!   `loss random p`). One draw per packet (none when `p == 0`).
//! * `Periodic { every: n }`: the `n`-th, `2n`-th, `3n`-th … packet of the stream is lost,
//!   counting from the first packet the model sees; deterministic, no RNG draw. This is
//!   the wan-emu's "periodic loss rate" of seed 000 (Table 5: a 1 % periodic loss is
//!   `every = 100`; see [`LossModel::periodic`]). `n = 1` loses everything.
//! * `GilbertElliott { p, r, k, h }`: the two-state Markov model of Gilbert (1960) and
//!   Elliott (1963), with the parameter names of Hasslinger & Hohlfeld ("The Gilbert-Elliott
//!   Model for Packet Loss in Real Time Services on the Internet", MMB 2008) and netem's
//!   `loss gemodel p r 1-h 1-k`:
//!   - `p`: probability of moving from the good state G to the bad state B (per packet),
//!   - `r`: probability of moving from B back to G,
//!   - `k`: probability that a packet is *delivered* in G (usually 1),
//!   - `h`: probability that a packet is *delivered* in B (usually 0).
//!
//!   Per packet: the packet is lost with probability `1 − k` in G or `1 − h` in B (the
//!   current state), then the state moves. The chain starts in G. Stationary probability
//!   of B: `π_B = p/(p+r)`; loss rate `(r(1−k) + p(1−h))/(p+r)`, i.e. `p/(p+r)` for `k = 1,
//!   h = 0` (the "simple Gilbert" model, [`LossModel::gilbert`]). The number of packets in
//!   a visit to B is geometric with mean `1/r`, so for `k = 1, h = 0` the mean loss-burst
//!   length is `1/r` and the mean gap (visit to G) is `1/p`. Up to two draws per packet
//!   (one for the loss unless the probability is 0 or 1, one for the transition).
//!
//! * `FourState { p13, p31, p32, p23, p14 }`: the 4-state Markov model of Salsano,
//!   Ludovici, Ordine ("Definition of a general and intuitive loss model for packet
//!   networks and its implementation in the Netem module in the Linux kernel", 2010), netem's
//!   `loss state p13 p31 p32 p23 p14`, run exactly as Linux `sch_netem.c` `loss_4state`
//!   runs it. States: 1 = packet received in a gap period, 2 = received within a burst,
//!   3 = lost within a burst, 4 = an isolated loss within a gap. A packet is lost exactly
//!   when the chain *enters* state 3 or 4; `pij` is P(i → j) and the rest of each row
//!   stays (P(1→1) = 1 − p13 − p14, P(2→2) = 1 − p23, P(3→3) = 1 − p31 − p32, P(4→1) = 1).
//!   One draw per packet, compared with the cumulative row as netem does. The chain starts
//!   in state 1. Stationary distribution ([`LossModel::four_state_stationary`], balance
//!   equations): `π ∝ (1, p13·p32/(p31·p23), p13/p31, p14)` for states 1..4, so the loss
//!   rate is `π3 + π4 = (p13·p23 + p14·p31·p23) / (p31·p23 + p13·p23 + p13·p32 +
//!   p14·p31·p23)` (the paper's eq. for `P_loss`). A run of losses is either one isolated
//!   loss (state 4, followed by state 1) or a stay in state 3, geometric with mean
//!   `1/(p31 + p32)`; the mean loss-burst length is `(π3 + π4)/(π3·(p31 + p32) + π4)`
//!   ([`LossModel::mean_burst`]; [`mean_burst_of`] measures it on a realised pattern).
//!   With `p13` alone (iproute2's defaults `p31 = 1 − p13`, `p32 = 0`, `p23 = 1`, `p14 =
//!   0`) each packet is lost independently with probability `p13` (Bernoulli). Each row
//!   must sum to at most 1 (`p13 + p14`, `p31 + p32`).
//!
//! Correlated random loss (netem's `loss random P C`) is the simple Gilbert model
//! [`LossModel::correlated`] (see [`super::corr`]): loss rate exactly `P`, lag-1
//! autocorrelation of the loss indicators exactly `C`.
//!
//! All probabilities are in [0, 1]; [`LossModel::validate`] rejects NaN, infinities,
//! negatives and values above 1, and `every = 0`. On unvalidated input `lose` still does
//! not panic (`Rng::chance` treats NaN as 0 and clamps the rest; `every = 0` loses nothing).
//!
//! [`corrupt`] flips one uniformly chosen bit of a frame's stored bytes (netem `corrupt`:
//! any bit of the frame, headers included, so checksums of every layer see it). A pool
//! without frame storage (`slot_size == 0`, the simulator) has nothing to flip; the call
//! then reports `false` and the caller only counts the event.

use super::{check_prob, EmuError};
use crate::pool::{PktId, Pool};
use crate::rng::Rng;

/// A loss model (configuration only; see the module comment).
#[derive(Copy, Clone, Debug, PartialEq, Default)]
pub enum LossModel {
    #[default]
    None,
    /// Independent loss with probability `p`.
    Bernoulli { p: f64 },
    /// Lose every `every`-th packet.
    Periodic { every: u64 },
    /// Gilbert–Elliott: `p` = P(G→B), `r` = P(B→G), `k` = P(deliver | G), `h` = P(deliver | B).
    GilbertElliott { p: f64, r: f64, k: f64, h: f64 },
    /// netem's 4-state model (`loss state`): transition probabilities between states 1..4.
    FourState {
        p13: f64,
        p31: f64,
        p32: f64,
        p23: f64,
        p14: f64,
    },
}

impl LossModel {
    /// The simple Gilbert model: Gilbert–Elliott with `k = 1` (no loss in G) and `h = 0`
    /// (every packet lost in B). Mean burst `1/r`, loss rate `p/(p+r)`.
    pub fn gilbert(p: f64, r: f64) -> Self {
        LossModel::GilbertElliott {
            p,
            r,
            k: 1.0,
            h: 0.0,
        }
    }

    /// Random loss of probability `p` whose loss indicators have lag-1 autocorrelation
    /// `rho` (netem's `loss random P C`, see [`super::corr`]): Bernoulli when `rho` is 0,
    /// otherwise the simple Gilbert model with `P(G→B) = p(1 − rho)`, `P(B→G) = (1 − p)(1 −
    /// rho)` (stationary loss `p`, mean burst `1/((1 − p)(1 − rho))`).
    pub fn correlated(p: f64, rho: f64) -> Self {
        if rho == 0.0 {
            LossModel::Bernoulli { p }
        } else {
            LossModel::gilbert(p * (1.0 - rho), (1.0 - p) * (1.0 - rho))
        }
    }

    /// netem's `loss state p13 [p31 [p32 [p23 [p14]]]]` with iproute2's defaults for the
    /// ones not given: `p31 = 1 − p13`, `p32 = 0`, `p23 = 1`, `p14 = 0`.
    pub fn four_state(p13: f64, rest: &[f64]) -> Self {
        let get = |i: usize, d: f64| rest.get(i).copied().unwrap_or(d);
        LossModel::FourState {
            p13,
            p31: get(0, 1.0 - p13),
            p32: get(1, 0.0),
            p23: get(2, 1.0),
            p14: get(3, 0.0),
        }
    }

    /// The 4-state model's stationary probabilities of states 1..4 (see the module
    /// comment), also when a state is never left or never reached; `None` for the
    /// other models.
    pub fn four_state_stationary(&self) -> Option<[f64; 4]> {
        let LossModel::FourState {
            p13,
            p31,
            p32,
            p23,
            p14,
        } = *self
        else {
            return None;
        };
        // Relative to π1 = 1: π3 = p13/p31, π2 = π3·p32/p23, π4 = p14.
        if p13 > 0.0 && p31 == 0.0 {
            // the chain ends in {2, 3}: π2 ∝ p32, π3 ∝ p23 (stuck in 3 if both are 0)
            return Some(if p23 + p32 == 0.0 {
                [0.0, 0.0, 1.0, 0.0]
            } else {
                [0.0, p32 / (p23 + p32), p23 / (p23 + p32), 0.0]
            });
        }
        let a3 = if p13 == 0.0 { 0.0 } else { p13 / p31 };
        if a3 > 0.0 && p32 > 0.0 && p23 == 0.0 {
            return Some([0.0, 1.0, 0.0, 0.0]); // absorbed in 2
        }
        let a2 = if a3 == 0.0 || p32 == 0.0 {
            0.0
        } else {
            a3 * p32 / p23
        };
        let sum = 1.0 + a2 + a3 + p14;
        Some([1.0 / sum, a2 / sum, a3 / sum, p14 / sum])
    }

    /// The mean number of consecutive losses: `1/r` for the simple Gilbert model (`k = 1,
    /// h = 0`), `(π3 + π4)/(π3·(p31 + p32) + π4)` for the 4-state model, 1 for Bernoulli
    /// and periodic (every ≥ 2) loss; `None` when there are no bursts (no loss, or loss
    /// that never ends).
    pub fn mean_burst(&self) -> Option<f64> {
        match *self {
            LossModel::None => None,
            LossModel::Bernoulli { p } => (p > 0.0 && p < 1.0).then(|| 1.0 / (1.0 - p)),
            LossModel::Periodic { every } => (every >= 2).then_some(1.0),
            LossModel::GilbertElliott { r, k, h, .. } if k == 1.0 && h == 0.0 => {
                (r > 0.0).then(|| 1.0 / r)
            }
            LossModel::GilbertElliott { .. } => None,
            LossModel::FourState { p31, p32, .. } => {
                let [_, _, s3, s4] = self.four_state_stationary()?;
                let starts = s3 * (p31 + p32) + s4;
                (s3 + s4 > 0.0 && starts > 0.0).then(|| (s3 + s4) / starts)
            }
        }
    }

    /// A periodic loss of `rate` (e.g. 0.01 → every 100th packet): `every = round(1/rate)`.
    /// `None` when `rate` is not in (0, 1].
    pub fn periodic(rate: f64) -> Option<Self> {
        if !(rate > 0.0 && rate <= 1.0) {
            return None;
        }
        let every = (1.0 / rate).round();
        (every >= 1.0 && every < u64::MAX as f64).then_some(LossModel::Periodic {
            every: every as u64,
        })
    }

    /// Check the parameters (probabilities in [0, 1], `every >= 1`).
    pub fn validate(&self) -> Result<(), EmuError> {
        match *self {
            LossModel::None => Ok(()),
            LossModel::Bernoulli { p } => check_prob("loss probability", p),
            LossModel::Periodic { every } => {
                if every == 0 {
                    Err(EmuError::PeriodicZero)
                } else {
                    Ok(())
                }
            }
            LossModel::GilbertElliott { p, r, k, h } => {
                check_prob("gilbert-elliott p (good to bad)", p)?;
                check_prob("gilbert-elliott r (bad to good)", r)?;
                check_prob("gilbert-elliott k (delivery in good)", k)?;
                check_prob("gilbert-elliott h (delivery in bad)", h)
            }
            LossModel::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                check_prob("4-state p13", p13)?;
                check_prob("4-state p31", p31)?;
                check_prob("4-state p32", p32)?;
                check_prob("4-state p23", p23)?;
                check_prob("4-state p14", p14)?;
                check_prob("4-state p13 + p14 (leaving state 1)", p13 + p14)?;
                check_prob("4-state p31 + p32 (leaving state 3)", p31 + p32)
            }
        }
    }

    /// The long-run fraction of packets lost.
    pub fn expected_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli { p } => p,
            LossModel::Periodic { every } => {
                if every == 0 {
                    0.0
                } else {
                    1.0 / every as f64
                }
            }
            LossModel::GilbertElliott { p, r, k, h } => {
                if p + r == 0.0 {
                    1.0 - k // never leaves G
                } else {
                    (r * (1.0 - k) + p * (1.0 - h)) / (p + r)
                }
            }
            LossModel::FourState { .. } => self
                .four_state_stationary()
                .map_or(0.0, |[_, _, s3, s4]| s3 + s4),
        }
    }

    /// Gilbert–Elliott: stationary probability of the bad state, `p/(p+r)` (0 if the chain
    /// never leaves G). `None` for the other models.
    pub fn stationary_bad(&self) -> Option<f64> {
        match *self {
            LossModel::GilbertElliott { p, r, .. } => {
                Some(if p + r == 0.0 { 0.0 } else { p / (p + r) })
            }
            _ => None,
        }
    }

    /// Gilbert–Elliott: mean number of packets per visit to the bad state, `1/r` (the mean
    /// loss-burst length when `k = 1, h = 0`). `None` for the other models or `r = 0`.
    pub fn mean_bad_run(&self) -> Option<f64> {
        match *self {
            LossModel::GilbertElliott { r, .. } if r > 0.0 => Some(1.0 / r),
            _ => None,
        }
    }
}

/// One stream's loss state machine.
#[derive(Clone, Debug, Default)]
pub struct Loss {
    model: LossModel,
    /// Periodic: packets seen since the last loss.
    count: u64,
    /// Gilbert–Elliott: in the bad state.
    bad: bool,
    /// 4-state: the state, 1..=4.
    state: u8,
}

impl Loss {
    pub fn new(model: LossModel) -> Self {
        Loss {
            model,
            count: 0,
            bad: false,
            state: 1,
        }
    }

    pub fn model(&self) -> LossModel {
        self.model
    }

    /// Replace the model. The state (periodic counter, Gilbert–Elliott state) is kept when
    /// the kind of model is unchanged, so a run-time parameter change does not restart
    /// the pattern; it is reset otherwise.
    pub fn set_model(&mut self, model: LossModel) {
        if core::mem::discriminant(&model) != core::mem::discriminant(&self.model) {
            self.reset();
        }
        self.model = model;
    }

    /// Back to the initial state (counter 0, good state).
    pub fn reset(&mut self) {
        self.count = 0;
        self.bad = false;
        self.state = 1;
    }

    /// 4-state: the state (1..=4; 1 for the other models).
    pub fn state(&self) -> u8 {
        self.state
    }

    /// Gilbert–Elliott: whether the chain is in the bad state.
    pub fn is_bad(&self) -> bool {
        self.bad
    }

    /// Whether the next packet is lost; advances the state.
    #[inline]
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli { p } => p > 0.0 && rng.chance(p),
            LossModel::Periodic { every } => {
                if every == 0 {
                    return false;
                }
                self.count += 1;
                if self.count >= every {
                    self.count = 0;
                    true
                } else {
                    false
                }
            }
            LossModel::GilbertElliott { p, r, k, h } => {
                let (deliver, leave) = if self.bad { (h, r) } else { (k, p) };
                let lost = draw(rng, 1.0 - deliver);
                if draw(rng, leave) {
                    self.bad = !self.bad;
                }
                lost
            }
            LossModel::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                // sch_netem.c loss_4state: one draw against the cumulative row
                let u = rng.next_f64();
                let (next, lost) = match self.state {
                    1 if u < p14 => (4, true),
                    1 if u < p13 + p14 => (3, true),
                    1 => (1, false),
                    2 if u < p23 => (3, true),
                    2 => (2, false),
                    3 if u < p32 => (2, false),
                    3 if u < p31 + p32 => (1, false),
                    3 => (3, true),
                    _ => (1, false),
                };
                self.state = next;
                lost
            }
        }
    }
}

/// The realised mean loss-burst length of a loss pattern (`true` = lost, in sending
/// order): the packets lost over the runs of consecutive losses — what
/// [`LossModel::mean_burst`] is the expectation of. `None` when nothing was lost.
pub fn mean_burst_of(lost: &[bool]) -> Option<f64> {
    let n = lost.iter().filter(|&&x| x).count();
    // a run starts at a loss that follows a delivery or opens the pattern
    let runs = lost
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x && (i == 0 || !lost[i - 1]))
        .count();
    (runs > 0).then(|| n as f64 / runs as f64)
}

/// `true` with probability `p`, without a draw when `p` is 0 or 1 (or NaN: false).
#[inline]
fn draw(rng: &mut Rng, p: f64) -> bool {
    if p >= 1.0 {
        true
    } else if p > 0.0 {
        rng.chance(p)
    } else {
        false
    }
}

/// Flip one uniformly chosen bit of `id`'s stored frame bytes. Returns `false` (nothing
/// changed) when the slot holds no bytes (`slot_size == 0` or a zero-length frame).
#[inline]
pub fn corrupt(pool: &mut Pool, id: PktId, rng: &mut Rng) -> bool {
    let data = pool.data_mut(id);
    if data.is_empty() {
        return false;
    }
    let bit = rng.below(data.len() as u64 * 8);
    data[(bit / 8) as usize] ^= 1u8 << (bit % 8);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Realised loss pattern of `n` packets.
    fn run(model: LossModel, n: usize, seed: u64) -> Vec<bool> {
        let mut rng = Rng::new(seed);
        let mut l = Loss::new(model);
        (0..n).map(|_| l.lose(&mut rng)).collect()
    }

    /// By hand: `LL.L..LLL` loses 6 packets in 3 runs (2.0); one run at the end counts.
    #[test]
    fn mean_burst_of_a_pattern_by_hand() {
        let p = |s: &str| s.chars().map(|c| c == 'L').collect::<Vec<bool>>();
        assert_eq!(mean_burst_of(&p("LL.L..LLL")), Some(2.0));
        assert_eq!(mean_burst_of(&p(".L..L")), Some(1.0));
        assert_eq!(mean_burst_of(&p("LLL")), Some(3.0));
        assert_eq!(mean_burst_of(&p("....")), None);
        assert_eq!(mean_burst_of(&[]), None);
    }

    #[test]
    fn bernoulli_inside_95_percent_binomial_interval() {
        for (p, seed) in [(0.01, 1u64), (0.005, 2), (0.08, 3), (0.5, 4)] {
            let n = 200_000;
            let lost = run(LossModel::Bernoulli { p }, n, seed)
                .iter()
                .filter(|&&x| x)
                .count() as f64;
            let mean = n as f64 * p;
            let half = 1.96 * (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (lost - mean).abs() <= half,
                "p={p}: {lost} outside {mean}±{half}"
            );
        }
        assert!(!run(LossModel::Bernoulli { p: 0.0 }, 1000, 1).contains(&true));
        assert!(run(LossModel::Bernoulli { p: 1.0 }, 1000, 1)
            .iter()
            .all(|&x| x));
    }

    #[test]
    fn periodic_is_exact() {
        let model = LossModel::periodic(0.01).unwrap();
        assert_eq!(model, LossModel::Periodic { every: 100 });
        let v = run(model, 100_000, 9);
        let idx: Vec<usize> = (0..v.len()).filter(|&i| v[i]).collect();
        assert_eq!(idx.len(), 1000);
        assert!(idx.iter().enumerate().all(|(j, &i)| i == 100 * j + 99));
        assert_eq!(
            LossModel::periodic(0.08),
            Some(LossModel::Periodic { every: 13 })
        );
        assert_eq!(LossModel::periodic(0.0), None);
        assert_eq!(LossModel::periodic(f64::NAN), None);
        assert!(run(LossModel::Periodic { every: 1 }, 10, 0)
            .iter()
            .all(|&x| x));
        assert!(!run(LossModel::Periodic { every: 0 }, 10, 0).contains(&true));
    }

    #[test]
    fn gilbert_burst_length_and_stationary_loss() {
        for (p, r, seed) in [(0.01, 0.25, 5u64), (0.002, 0.5, 6), (0.05, 0.1, 7)] {
            let model = LossModel::gilbert(p, r);
            let n = 1_000_000;
            let v = run(model, n, seed);
            let mean_burst = mean_burst_of(&v).unwrap();
            let want = model.mean_bad_run().unwrap();
            assert!(
                (mean_burst / want - 1.0).abs() < 0.05,
                "p={p} r={r}: mean burst {mean_burst} vs {want}"
            );
            let loss = v.iter().filter(|&&x| x).count() as f64 / n as f64;
            let want = model.expected_loss();
            assert!((want - p / (p + r)).abs() < 1e-15);
            assert!(
                (loss / want - 1.0).abs() < 0.05,
                "p={p} r={r}: loss {loss} vs {want}"
            );
        }
    }

    #[test]
    fn gilbert_elliott_general_loss_rate() {
        // Lossy good state and leaky bad state.
        let model = LossModel::GilbertElliott {
            p: 0.02,
            r: 0.2,
            k: 0.99,
            h: 0.3,
        };
        let n = 1_000_000;
        let loss = run(model, n, 8).iter().filter(|&&x| x).count() as f64 / n as f64;
        let want = model.expected_loss();
        assert!((want - (0.2 * 0.01 + 0.02 * 0.7) / 0.22).abs() < 1e-12);
        assert!((loss / want - 1.0).abs() < 0.05, "{loss} vs {want}");
        assert!((model.stationary_bad().unwrap() - 0.02 / 0.22).abs() < 1e-12);
    }

    /// Hand-computed: p13 = 5 %, p31 = 40 %, p32 = 10 %, p23 = 20 %, p14 = 1 %.
    /// Weights (×p31·p23 = 0.08): π1 ∝ 0.08, π3 ∝ p13·p23 = 0.01, π2 ∝ p13·p32 = 0.005,
    /// π4 ∝ p14·p31·p23 = 0.0008; sum 0.0958. Loss = 0.0108/0.0958 = 11.2735 %;
    /// mean burst = 0.0108 / (0.01·0.5 + 0.0008) / 0.0958 × 0.0958 = 0.0108/0.0058 = 1.8621.
    #[test]
    fn four_state_loss_rate_and_burst_length_against_closed_form() {
        let m = LossModel::FourState {
            p13: 0.05,
            p31: 0.4,
            p32: 0.1,
            p23: 0.2,
            p14: 0.01,
        };
        m.validate().unwrap();
        let want_loss = 0.0108 / 0.0958;
        let want_burst = 0.0108 / 0.0058;
        assert!((m.expected_loss() - want_loss).abs() < 1e-12);
        assert!((m.mean_burst().unwrap() - want_burst).abs() < 1e-12);
        let pi = m.four_state_stationary().unwrap();
        assert!((pi.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let n = 2_000_000;
        let v = run(m, n, 12);
        let loss = v.iter().filter(|&&x| x).count() as f64 / n as f64;
        assert!((loss / want_loss - 1.0).abs() < 0.05, "loss {loss}");
        let mean = mean_burst_of(&v).unwrap();
        assert!((mean / want_burst - 1.0).abs() < 0.05, "burst {mean}");
        // p13 alone: Bernoulli
        let bern = LossModel::four_state(0.1, &[]);
        assert!((bern.expected_loss() - 0.1).abs() < 1e-12);
        assert!((bern.mean_burst().unwrap() - 1.0 / 0.9).abs() < 1e-12);
        // degenerate chains
        let stuck = LossModel::four_state(0.1, &[0.0, 0.0, 0.0]);
        assert_eq!(stuck.expected_loss(), 1.0);
        assert_eq!(stuck.mean_burst(), None);
        let to2 = LossModel::four_state(0.1, &[0.0, 0.3, 0.6]);
        assert!((to2.expected_loss() - 0.6 / 0.9).abs() < 1e-12);
        assert_eq!(LossModel::four_state(0.0, &[]).expected_loss(), 0.0);
        let absorbed2 = LossModel::four_state(0.1, &[0.2, 0.3, 0.0]);
        assert_eq!(absorbed2.expected_loss(), 0.0);
        // rows summing above 1 are refused
        let e = LossModel::four_state(0.6, &[0.4, 0.1, 0.2, 0.5])
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("p13 + p14"), "{e}");
    }

    #[test]
    fn correlated_random_loss_keeps_the_rate() {
        let m = LossModel::correlated(0.1, 0.5);
        assert!((m.expected_loss() - 0.1).abs() < 1e-12);
        assert!((m.mean_burst().unwrap() - 1.0 / 0.45).abs() < 1e-12);
        assert_eq!(
            LossModel::correlated(0.1, 0.0),
            LossModel::Bernoulli { p: 0.1 }
        );
    }

    #[test]
    fn set_model_keeps_state_of_same_kind() {
        let mut rng = Rng::new(1);
        let mut l = Loss::new(LossModel::Periodic { every: 10 });
        for _ in 0..7 {
            assert!(!l.lose(&mut rng));
        }
        l.set_model(LossModel::Periodic { every: 9 });
        assert!(!l.lose(&mut rng)); // 8th
        assert!(l.lose(&mut rng)); // 9th
        l.set_model(LossModel::gilbert(1.0, 0.0));
        assert!(!l.is_bad());
        assert!(!l.lose(&mut rng), "first packet is in the good state");
        assert!(l.is_bad());
        assert!(l.lose(&mut rng));
        l.reset();
        assert!(!l.is_bad());
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(LossModel::Bernoulli { p: -0.1 }.validate().is_err());
        assert!(LossModel::Bernoulli { p: 1.1 }.validate().is_err());
        assert!(LossModel::Bernoulli { p: f64::NAN }.validate().is_err());
        assert!(LossModel::Bernoulli { p: f64::INFINITY }
            .validate()
            .is_err());
        assert_eq!(
            LossModel::Periodic { every: 0 }.validate(),
            Err(EmuError::PeriodicZero)
        );
        let e = LossModel::GilbertElliott {
            p: 0.1,
            r: 2.0,
            k: 1.0,
            h: 0.0,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("bad to good"), "{e}");
        assert!(LossModel::gilbert(0.0, 0.0).validate().is_ok());
        assert_eq!(LossModel::gilbert(0.0, 0.0).expected_loss(), 0.0);
        // Unvalidated garbage does not panic.
        let mut rng = Rng::new(1);
        let mut l = Loss::new(LossModel::GilbertElliott {
            p: f64::NAN,
            r: -3.0,
            k: f64::INFINITY,
            h: 7.0,
        });
        for _ in 0..100 {
            let _ = l.lose(&mut rng);
        }
    }

    #[test]
    fn corrupt_flips_exactly_one_bit() {
        let mut pool = Pool::new(2, 64);
        let mut rng = Rng::new(11);
        let id = pool.alloc().unwrap();
        pool.meta_mut(id).len = 60;
        for _ in 0..100 {
            let before = pool.data(id).to_vec();
            assert!(corrupt(&mut pool, id, &mut rng));
            let diff: u32 = before
                .iter()
                .zip(pool.data(id))
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(diff, 1);
        }
        // Nothing stored: nothing to flip.
        let mut sim = Pool::new(1, 0);
        let id = sim.alloc().unwrap();
        sim.meta_mut(id).len = 1500;
        assert!(!corrupt(&mut sim, id, &mut rng));
    }
}
