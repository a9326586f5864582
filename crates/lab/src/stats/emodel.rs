//! The ITU-T G.107 E-model: the transmission rating factor R and the MOS it predicts, for a
//! voice call over a packet network (seed 000's VoIP test, which rated calls with PSQM; the
//! E-model is the standard way to rate a call from network measurements).
//!
//! ```text
//! R = R0 − Is − Id − Ie,eff + A
//! ```
//!
//! | term | meaning | here |
//! |---|---|---|
//! | `R0` | basic signal-to-noise ratio (circuit and room noise) | G.107 §7.2 from the default parameters: 94.77 ([`r0`], [`noise_no`]) |
//! | `Is` | impairments simultaneous with speech (loudness, sidetone, quantisation) | G.107 §7.3, defaults: 1.41 ([`is_factor`]) |
//! | `Id` | impairments delayed after speech: talker echo `Idte`, listener echo `Idle`, absolute delay `Idd` | G.107 §7.4 ([`id_factor`] = [`idte`] + [`idle`] + [`idd`]) |
//! | `Ie,eff` | equipment impairment: the codec (`Ie`) and packet loss | G.107 §7.5 ([`ie_eff`]) |
//! | `A` | advantage factor (expectation; 0 for wired) | 0 |
//!
//! With every G.107 default (`T = Ta = Tr = 0`, no codec, no loss) R = 94.77 − 1.41 − 0.15 =
//! **93.2** (MOS 4.41), the familiar ceiling of a narrowband call.
//!
//! # Delay: the full G.107 `Id`, not the Cole–Rosenbluth line
//!
//! `Id` is computed with G.107's own formulas (§7.4: `Idte` with the default TELR = 65 dB,
//! `Idle` with WEPL = 110 dB, and `Idd` with the default mT = 100 ms, sT = 1), taking
//! `T = Ta =` the one-way mouth-to-ear delay and `Tr = 2·T` (a symmetric path), the usual
//! planning assumptions (G.108). Why not the simpler form of Cole & Rosenbluth ("Voice over
//! IP performance monitoring", ACM CCR 31(2), 2001), `Id = 0.024·d + 0.11·(d − 177.3)·H(d −
//! 177.3)`? It is a two-piece linear fit to exactly these G.107 curves at the default
//! parameters; the standard's formulas cost nothing more here, stay right if a parameter is
//! changed, and the fit is kept ([`id_cole_rosenbluth`]) only to cross-check them: the unit
//! tests require the two to agree within 1.5 R points from 0 to 350 ms; beyond that the
//! fit's straight line overshoots (34.1 against G.107's 31.0 at 400 ms).
//!
//! # Loss
//!
//! `Ie,eff = Ie + (95 − Ie) · Ppl / (Ppl / BurstR + Bpl)` (G.107 §7.5), `Ppl` the packet-loss
//! probability in percent, `BurstR` the burst ratio (1 for random loss, > 1 for bursty loss;
//! [`burst_ratio`] estimates it from a loss pattern with G.107's two-state Markov model) and
//! `Ie`, `Bpl` the codec's values from ITU-T G.113 Appendix I: **G.729A (+ VAD): Ie = 11,
//! Bpl = 19** ([`Codec::G729A`]). A jitter buffer's late packets count as lost (the caller
//! adds them to `Ppl`).
//!
//! # MOS
//!
//! G.107 Annex B: `MOS = 1` for R < 0; `1 + 0.035·R + R·(R − 60)·(100 − R)·7·10⁻⁶` for
//! 0 ≤ R ≤ 100; `4.5` above ([`mos_from_r`]). The same formula is in every public
//! implementation we compared with (e.g. twilio-video.js `preflight/mos.js`, whose
//! `r0 = 94.768` is our [`r0`] at the defaults).

use serde::{Deserialize, Serialize};

/// A codec's E-model parameters (G.113 Appendix I) and its own delay.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Codec {
    pub name: &'static str,
    /// Equipment impairment factor without loss.
    pub ie: f64,
    /// Packet-loss robustness factor.
    pub bpl: f64,
    /// Codec frame, ms.
    pub frame_ms: f64,
    /// Look-ahead, ms.
    pub lookahead_ms: f64,
}

impl Codec {
    /// G.729A with VAD: Ie = 11, Bpl = 19 (G.113 Appendix I, Tables I.1 and I.3); 10 ms
    /// frames with 5 ms look-ahead (G.729).
    pub const G729A: Codec = Codec {
        name: "G.729A",
        ie: 11.0,
        bpl: 19.0,
        frame_ms: 10.0,
        lookahead_ms: 5.0,
    };

    /// The codec's share of the mouth-to-ear delay with `packet_ms` of speech per packet:
    /// the packet is filled (`packet_ms`) and the encoder looks ahead (`lookahead_ms`).
    /// G.729A at 20 ms: 25 ms.
    pub fn delay_ms(&self, packet_ms: f64) -> f64 {
        packet_ms + self.lookahead_ms
    }
}

/// G.107's parameters (Table 1) that the formulas below use, all at their defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct G107 {
    /// Send and receive loudness ratings, dB.
    pub slr: f64,
    pub rlr: f64,
    /// D-values of the telephone, send and receive side.
    pub ds: f64,
    pub dr: f64,
    /// Sidetone masking and listener sidetone ratings, dB.
    pub stmr: f64,
    pub lstr: f64,
    /// Talker echo loudness rating and weighted echo path loss, dB.
    pub telr: f64,
    pub wepl: f64,
    /// Room noise at the send and receive side, dB(A).
    pub ps: f64,
    pub pr: f64,
    /// Circuit noise referred to the 0 dBr point, dBm0p; noise floor at the receive side, dBmp.
    pub nc: f64,
    pub nfor: f64,
    /// Quantising distortion units.
    pub qdu: f64,
    /// Advantage factor.
    pub a: f64,
}

impl Default for G107 {
    /// G.107 Table 1 defaults.
    fn default() -> Self {
        G107 {
            slr: 8.0,
            rlr: 2.0,
            ds: 3.0,
            dr: 3.0,
            stmr: 15.0,
            lstr: 18.0,
            telr: 65.0,
            wepl: 110.0,
            ps: 35.0,
            pr: 35.0,
            nc: -70.0,
            nfor: -64.0,
            qdu: 1.0,
            a: 0.0,
        }
    }
}

/// `10·log10(10^(a/10) + ...)`: power sum of levels in dB.
fn power_sum(levels: &[f64]) -> f64 {
    10.0 * levels
        .iter()
        .map(|l| 10f64.powf(l / 10.0))
        .sum::<f64>()
        .log10()
}

/// G.107 §7.2, eqs. 7-2 to 7-7: the total noise `No` (dBm0p), the power sum of circuit
/// noise `Nc`, room noise at the send side `Nos`, room noise at the receive side `Nor` and
/// the noise floor `Nfo`. Defaults: −61.18.
pub fn noise_no(p: &G107) -> f64 {
    let olr = p.slr + p.rlr;
    let nos = p.ps - p.slr - p.ds - 100.0 + 0.004 * (p.ps - olr - p.ds - 14.0).powi(2);
    let pre = p.pr + 10.0 * (1.0 + 10f64.powf((10.0 - p.lstr) / 10.0)).log10();
    let nor = p.rlr - 121.0 + pre + 0.008 * (pre - 35.0).powi(2);
    let nfo = p.nfor + p.rlr;
    power_sum(&[p.nc, nos, nor, nfo])
}

/// G.107 eq. 7-3: the basic signal-to-noise ratio `R0 = 15 − 1.5·(SLR + No)`. Defaults: 94.77.
pub fn r0(p: &G107) -> f64 {
    15.0 - 1.5 * (p.slr + noise_no(p))
}

/// G.107 §7.3, eqs. 7-8 to 7-17: the simultaneous impairment `Is = Iolr + Ist + Iq` — a too
/// low loudness (`Iolr`), a non-optimum sidetone (`Ist`, from `STMRo`, which depends on the
/// echo delay `t_ms`) and quantising distortion (`Iq`). Defaults: 1.41.
pub fn is_factor(p: &G107, t_ms: f64) -> f64 {
    let no = noise_no(p);
    let olr = p.slr + p.rlr;
    // loudness
    let xolr = olr + 0.2 * (64.0 + no - p.rlr);
    let iolr = 20.0 * ((1.0 + (xolr / 8.0).powi(8)).powf(1.0 / 8.0) - xolr / 8.0);
    // sidetone (with the talker echo folded in, STMRo)
    let stmro = -10.0
        * (10f64.powf(-p.stmr / 10.0) + (-t_ms / 4.0).exp() * 10f64.powf(-p.telr / 10.0)).log10();
    let ist = 12.0 * (1.0 + ((stmro - 13.0) / 6.0).powi(8)).powf(1.0 / 8.0)
        - 28.0 * (1.0 + ((stmro + 1.0) / 19.4).powi(35)).powf(1.0 / 35.0)
        - 13.0 * (1.0 + ((stmro - 3.0) / 33.0).powi(13)).powf(1.0 / 13.0)
        + 29.0;
    // quantising distortion
    let q = 37.0 - 15.0 * p.qdu.log10();
    let g = 1.07 + 0.258 * q + 0.0602 * q * q;
    let y = (r0(p) - 100.0) / 15.0 + 46.0 / 8.4 - g / 9.0;
    let z = 46.0 / 30.0 - g / 40.0;
    let iq = 15.0 * (1.0 + 10f64.powf(y) + 10f64.powf(z)).log10();
    iolr + ist + iq
}

/// G.107 eqs. 7-19 to 7-21: talker echo impairment `Idte` for a mean one-way echo-path
/// delay `t_ms` (T): `[(Roe − Re)/2 + √((Roe − Re)²/4 + 100) − 1]·(1 − e^−T)`, with
/// `Roe = −1.5·(No − RLR)`, `Re = 80 + 2.5·(TERV − 14)` and
/// `TERV = TELR − 40·log10((1 + T/10)/(1 + T/150)) + 6·e^(−0.3·T²)`. 0 at T = 0; about 2 at
/// 100 ms with the default TELR of 65 dB (an echo canceller).
pub fn idte(p: &G107, t_ms: f64) -> f64 {
    let roe = -1.5 * (noise_no(p) - p.rlr);
    let terv = p.telr - 40.0 * ((1.0 + t_ms / 10.0) / (1.0 + t_ms / 150.0)).log10()
        + 6.0 * (-0.3 * t_ms * t_ms).exp();
    let re = 80.0 + 2.5 * (terv - 14.0);
    let d = roe - re;
    (d / 2.0 + (d * d / 4.0 + 100.0).sqrt() - 1.0) * (1.0 - (-t_ms).exp())
}

/// G.107 eqs. 7-25, 7-26: listener echo impairment `Idle` for a round-trip delay `tr_ms`
/// (Tr) in the 4-wire loop: `(R0 − Rle)/2 + √((R0 − Rle)²/4 + 169)` with
/// `Rle = 10.5·(WEPL + 7)·(Tr + 1)^−0.25`. 0.15 at Tr = 0 (the defaults).
pub fn idle(p: &G107, tr_ms: f64) -> f64 {
    let rle = 10.5 * (p.wepl + 7.0) * (tr_ms + 1.0).powf(-0.25);
    let d = r0(p) - rle;
    d / 2.0 + (d * d / 4.0 + 169.0).sqrt()
}

/// G.107 eqs. 7-27, 7-28: the impairment of too long an absolute delay `ta_ms` (Ta), with
/// the default mT = 100 ms and sT = 1: 0 up to 100 ms, else
/// `25·{(1 + X⁶)^(1/6) − 3·(1 + (X/3)⁶)^(1/6) + 2}` with `X = log2(Ta/100)`. 3.04 at 200 ms,
/// 24.1 at 400 ms.
pub fn idd(ta_ms: f64) -> f64 {
    if ta_ms <= 100.0 {
        return 0.0;
    }
    let x = (ta_ms / 100.0).log2();
    25.0 * ((1.0 + x.powi(6)).powf(1.0 / 6.0) - 3.0 * (1.0 + (x / 3.0).powi(6)).powf(1.0 / 6.0)
        + 2.0)
}

/// G.107 eq. 7-18: the delay impairment `Id = Idte + Idle + Idd` for a one-way
/// mouth-to-ear delay `d_ms`, taking T = Ta = d and Tr = 2·d (see the module documentation).
pub fn id_factor(p: &G107, d_ms: f64) -> f64 {
    idte(p, d_ms) + idle(p, 2.0 * d_ms) + idd(d_ms)
}

/// Cole & Rosenbluth's linear fit of `Id` (2001), relative to zero delay:
/// `0.024·d + 0.11·(d − 177.3)·H(d − 177.3)`, d in ms. Kept to cross-check [`id_factor`].
pub fn id_cole_rosenbluth(d_ms: f64) -> f64 {
    0.024 * d_ms
        + if d_ms > 177.3 {
            0.11 * (d_ms - 177.3)
        } else {
            0.0
        }
}

/// G.107 eq. 7-29: the effective equipment impairment
/// `Ie,eff = Ie + (95 − Ie)·Ppl / (Ppl/BurstR + Bpl)`, `ppl_percent` the packet-loss
/// probability in percent (0..=100), `burst_r` ≥ 1 the burst ratio. G.729A, 1 % random
/// loss: 11 + 84 · 1/20 = 15.2. Capped at 95 (everything lost): with BurstR > 1 the
/// formula passes 95 only where Ppl approaches 100 %, outside the range it was fitted on.
pub fn ie_eff(codec: &Codec, ppl_percent: f64, burst_r: f64) -> f64 {
    let ppl = ppl_percent.clamp(0.0, 100.0);
    let br = if burst_r.is_finite() && burst_r >= 1.0 {
        burst_r
    } else {
        1.0
    };
    (codec.ie + (95.0 - codec.ie) * ppl / (ppl / br + codec.bpl)).min(95.0)
}

/// G.107 Annex B, eq. B-4: the estimated mean opinion score (conversational quality) for a
/// rating `r`: 1 below 0, 4.5 above 100, else `1 + 0.035·R + R·(R − 60)·(100 − R)·7·10⁻⁶`.
/// 93.2 gives 4.41.
pub fn mos_from_r(r: f64) -> f64 {
    if r.is_nan() || r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        // clamped: the polynomial dips just below 1 for small R (a known quirk of eq. B-4)
        (1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6).clamp(1.0, 4.5)
    }
}

/// G.107 §7.5 (eqs. 7-30, 7-31): the burst ratio of a loss pattern in send order (`true` =
/// lost), from the two-state Markov model: `BurstR = 1/(p + q)`, p = P(loss | previous
/// received), q = P(received | previous lost) — the observed mean burst length over the
/// one expected for random loss of the same rate. 1 when nothing or everything was lost,
/// or the pattern is too short to say.
pub fn burst_ratio(lost: &[bool]) -> f64 {
    let (mut rr, mut rl, mut lr, mut ll) = (0u64, 0u64, 0u64, 0u64);
    for w in lost.windows(2) {
        match (w[0], w[1]) {
            (false, false) => rr += 1,
            (false, true) => rl += 1,
            (true, false) => lr += 1,
            (true, true) => ll += 1,
        }
    }
    if rr + rl == 0 || lr + ll == 0 {
        return 1.0;
    }
    let p = rl as f64 / (rr + rl) as f64;
    let q = lr as f64 / (lr + ll) as f64;
    if p + q <= 0.0 {
        1.0
    } else {
        (1.0 / (p + q)).max(1.0)
    }
}

/// A call's rating and its parts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rating {
    /// One-way mouth-to-ear delay used for `Id`, ms.
    pub delay_ms: f64,
    /// Packet-loss probability used for `Ie,eff`, percent.
    pub ppl_percent: f64,
    pub burst_r: f64,
    pub r0: f64,
    pub is: f64,
    pub id: f64,
    pub ie_eff: f64,
    pub r: f64,
    pub mos: f64,
}

/// `R = R0 − Is − Id − Ie,eff + A` and its MOS for a call with `codec`, one-way
/// mouth-to-ear delay `delay_ms`, `ppl_percent` of its packets lost (network and late) and
/// burst ratio `burst_r`, all other parameters at G.107's defaults. R is not clamped; MOS is.
pub fn rate_call(codec: &Codec, delay_ms: f64, ppl_percent: f64, burst_r: f64) -> Rating {
    let p = G107::default();
    let r0 = r0(&p);
    let is = is_factor(&p, delay_ms);
    let id = id_factor(&p, delay_ms);
    let ie = ie_eff(codec, ppl_percent, burst_r);
    let r = r0 - is - id - ie + p.a;
    Rating {
        delay_ms,
        ppl_percent,
        burst_r,
        r0,
        is,
        id,
        ie_eff: ie,
        r,
        mos: mos_from_r(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn defaults_give_the_g107_reference_values() {
        // G.107 §7.7: with all defaults R0 = 94.77, Is = 1.41, Id = 0.15, R = 93.2
        let p = G107::default();
        assert!(close(noise_no(&p), -61.18, 0.01), "{}", noise_no(&p));
        assert!(close(r0(&p), 94.77, 0.01), "{}", r0(&p));
        assert!(
            close(is_factor(&p, 0.0), 1.41, 0.01),
            "{}",
            is_factor(&p, 0.0)
        );
        assert!(
            close(id_factor(&p, 0.0), 0.15, 0.01),
            "{}",
            id_factor(&p, 0.0)
        );
        let none = Codec {
            ie: 0.0,
            bpl: 1.0,
            ..Codec::G729A
        };
        let r = rate_call(&none, 0.0, 0.0, 1.0);
        assert!(close(r.r, 93.2, 0.05), "{r:?}");
        // Annex B: 93.2 -> 4.41
        assert!(close(mos_from_r(93.2), 4.41, 0.005), "{}", mos_from_r(93.2));
    }

    #[test]
    fn g729a_without_loss_or_delay() {
        // 93.2 - Ie 11 = 82.2; MOS by hand 1 + 2.877 + 82.2*22.2*17.8*7e-6 = 4.104
        let r = rate_call(&Codec::G729A, 0.0, 0.0, 1.0);
        assert!(close(r.r, 82.2, 0.05), "{r:?}");
        assert!(close(r.mos, 4.104, 0.005), "{r:?}");
    }

    #[test]
    fn mos_annex_b_by_hand_and_clamped() {
        assert_eq!(mos_from_r(-5.0), 1.0);
        assert_eq!(mos_from_r(0.0), 1.0);
        assert_eq!(mos_from_r(100.0), 4.5);
        assert_eq!(mos_from_r(120.0), 4.5);
        assert_eq!(mos_from_r(f64::NAN), 1.0);
        // R = 50: 1 + 1.75 + 50*(-10)*50*7e-6 = 2.575
        assert!(close(mos_from_r(50.0), 2.575, 1e-12));
        // R = 70: 1 + 2.45 + 70*10*30*7e-6 = 3.597
        assert!(close(mos_from_r(70.0), 3.597, 1e-12));
        // the polynomial dips below 1 near R = 5; clamped
        assert!(mos_from_r(3.0) >= 1.0);
        // monotone over 0..100
        let mut last = 0.0;
        for i in 0..=100 {
            let m = mos_from_r(i as f64);
            assert!(m >= last, "{i}");
            last = m;
        }
    }

    #[test]
    fn ie_eff_by_hand() {
        let c = Codec::G729A;
        assert_eq!(ie_eff(&c, 0.0, 1.0), 11.0);
        // 1 % random: 11 + 84 * 1 / (1 + 19) = 15.2
        assert!(close(ie_eff(&c, 1.0, 1.0), 15.2, 1e-12));
        // 5 % random: 11 + 84 * 5 / 24 = 28.5
        assert!(close(ie_eff(&c, 5.0, 1.0), 28.5, 1e-12));
        // 5 % in bursts of twice the random length: 11 + 420 / 21.5
        assert!(close(ie_eff(&c, 5.0, 2.0), 11.0 + 420.0 / 21.5, 1e-12));
        // everything lost: 11 + 84 * 100 / (100 + 19) = 81.59
        assert!(close(ie_eff(&c, 100.0, 1.0), 11.0 + 8400.0 / 119.0, 1e-12));
        // 97.4 % in long bursts: the formula gives 248.9; capped at 95
        assert_eq!(ie_eff(&c, 97.4, 6.33), 95.0);
        // nonsense burst ratios are taken as random loss
        assert_eq!(ie_eff(&c, 1.0, 0.0), ie_eff(&c, 1.0, 1.0));
    }

    #[test]
    fn delay_terms_by_hand() {
        // Idd: 0 to 100 ms; X = 1 at 200 ms: 25 * (2^(1/6) - 3 * (1 + 1/729)^(1/6) + 2)
        assert_eq!(idd(100.0), 0.0);
        let want200 =
            25.0 * (2f64.powf(1.0 / 6.0) - 3.0 * (1.0 + 1.0 / 729.0f64).powf(1.0 / 6.0) + 2.0);
        assert!(close(idd(200.0), want200, 1e-12));
        assert!(close(idd(200.0), 3.04, 0.01));
        assert!(close(idd(400.0), 24.07, 0.01), "{}", idd(400.0));
        let p = G107::default();
        assert_eq!(idte(&p, 0.0), 0.0);
        // TERV(100) = 65 - 40 log10(11 / (1 + 2/3)) = 32.22; Re = 125.5; Roe = 94.77;
        // Idte = -15.38 + sqrt(236.5 + 100) - 1 = 1.96
        assert!(close(idte(&p, 100.0), 1.96, 0.02), "{}", idte(&p, 100.0));
    }

    #[test]
    fn g107_delay_agrees_with_cole_rosenbluth() {
        let p = G107::default();
        let base = id_factor(&p, 0.0);
        for d in [25.0, 50.0, 100.0, 150.0, 177.3, 200.0, 250.0, 300.0, 350.0] {
            let g = id_factor(&p, d) - base;
            let cr = id_cole_rosenbluth(d);
            assert!(
                close(g, cr, 1.5),
                "{d} ms: G.107 {g:.2}, Cole-Rosenbluth {cr:.2}"
            );
        }
        // beyond, the straight line overshoots the curve (31.0 against 34.1 at 400 ms)
        let g400 = id_factor(&p, 400.0) - base;
        assert!(close(g400, 30.96, 0.05) && id_cole_rosenbluth(400.0) > g400 + 2.0);
        // the fit's own numbers
        assert!(close(id_cole_rosenbluth(100.0), 2.4, 1e-12));
        assert!(close(id_cole_rosenbluth(300.0), 7.2 + 0.11 * 122.7, 1e-12));
    }

    #[test]
    fn burst_ratio_of_patterns() {
        assert_eq!(burst_ratio(&[]), 1.0);
        assert_eq!(burst_ratio(&[false; 10]), 1.0);
        assert_eq!(burst_ratio(&[true; 10]), 1.0);
        // r r r L r r r L r r: p = 2/7 (2 losses after 7 received-received/lost pairs),
        // q = 2/2 -> 1/(2/7 + 1) = 0.78, at least 1 (isolated losses are not bursts)
        let iso = [
            false, false, false, true, false, false, false, true, false, false,
        ];
        assert_eq!(burst_ratio(&iso), 1.0);
        // r r L L L L r r r r: transitions rr=1+3, rL=1, LL=3, Lr=1
        // p = 1/5, q = 1/4 -> 1/0.45 = 2.22
        let burst = [
            false, false, true, true, true, true, false, false, false, false,
        ];
        assert!(close(burst_ratio(&burst), 1.0 / 0.45, 1e-12));
    }

    #[test]
    fn codec_delay() {
        assert_eq!(Codec::G729A.delay_ms(20.0), 25.0);
    }
}
