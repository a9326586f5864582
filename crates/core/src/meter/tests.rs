//! Tests of the meters' common front: validation, display, time (long idle periods, time
//! going backwards, sub-byte exactness), and property tests of every algorithm against a
//! transcription of the RFCs and against their rate envelopes. The hand-computed colour
//! sequences of each algorithm are beside it (`srtcm.rs`, `trtcm.rs`).

use super::token_bucket::{EXACT_PER_BYTE, MAX_EXACT_BURST};
use super::{ColorMode, Meter, MeterSpec};
use crate::pool::Color::{self, Green as G, Red as R, Yellow as Y};
use crate::time::Instant;
use proptest::prelude::*;

/// Nanoseconds in a microsecond: the hand-computed sequences give times in µs.
pub(super) const US: u64 = 1_000;

/// Run a hand-computed script against `m`. Whitespace-separated steps: `@T` moves the
/// clock to T µs; `LEN:C` marks a LEN-byte packet arriving green and expects colour C
/// (`G`, `Y` or `R`); `yLEN:C` and `rLEN:C` arrive yellow and red; `=A/B` expects
/// [`Meter::levels`] to be (A, B) bytes.
pub(super) fn run(m: &mut Meter, script: &str) {
    let mut t = 0u64;
    for (i, step) in script.split_whitespace().enumerate() {
        let ctx = format!("step {i} `{step}` at {t} us");
        let num = |s: &str| {
            s.parse::<u64>()
                .unwrap_or_else(|_| panic!("{ctx}: number?"))
        };
        if let Some(us) = step.strip_prefix('@') {
            t = num(us);
        } else if let Some((a, b)) = step.strip_prefix('=').and_then(|l| l.split_once('/')) {
            assert_eq!(m.levels(Instant(t * US)), (num(a), num(b)), "{ctx}");
        } else {
            let (incoming, rest) = match step.strip_prefix('y') {
                Some(rest) => (Y, rest),
                None => step.strip_prefix('r').map_or((G, step), |rest| (R, rest)),
            };
            let (len, want) = rest.split_once(':').expect("LEN:COLOUR");
            let want = match want {
                "G" => G,
                "Y" => Y,
                "R" => R,
                _ => panic!("{ctx}: colour?"),
            };
            let got = m.mark(num(len) as u32, incoming, Instant(t * US));
            assert_eq!(got, want, "{ctx}, arrived {incoming:?}");
        }
    }
}

/// A meter of `spec` in `mode`, checkpointed at 0.
pub(super) fn meter(spec: MeterSpec, mode: ColorMode) -> Meter {
    Meter::new(spec, mode, Instant::ZERO).unwrap()
}

/// An srTCM spec.
pub(super) fn srtcm(cir: u64, cbs: u32, ebs: u32) -> MeterSpec {
    MeterSpec::Srtcm { cir, cbs, ebs }
}

const SRTCM: MeterSpec = MeterSpec::Srtcm {
    cir: 800_000,
    cbs: 15_000,
    ebs: 3_000,
};
const TRTCM: MeterSpec = MeterSpec::Trtcm {
    cir: 800_000,
    cbs: 22_500,
    pir: 1_400_000,
    pbs: 27_000,
};
const RFC4115: MeterSpec = MeterSpec::Rfc4115 {
    cir: 1_544_000,
    cbs: 1_500,
    eir: 2_000_000,
    ebs: 64 * 1024,
};

#[test]
fn validation_errors_name_the_parameter() {
    let err = |s: MeterSpec| s.validate().unwrap_err();
    let trtcm = |cir, cbs, pir, pbs| MeterSpec::Trtcm { cir, cbs, pir, pbs };
    assert_eq!(
        err(trtcm(2_000_000, 1500, 1_000_000, 1500)),
        "pir (1000000 bit/s) is below cir (2000000 bit/s)"
    );
    assert_eq!(err(trtcm(0, 1500, 0, 1500)), "cir must be at least 1 bit/s");
    assert_eq!(err(trtcm(1, 1500, 0, 1500)), "pir must be at least 1 bit/s");
    assert_eq!(err(trtcm(1, 0, 1, 1500)), "cbs must be at least 1 byte");
    assert_eq!(err(trtcm(1, 1, 1, 0)), "pbs must be at least 1 byte");
    assert_eq!(
        err(trtcm(1, 1, 1, MAX_EXACT_BURST + 1)),
        "pbs (536870913 bytes) is above the largest meter burst (536870912 bytes)"
    );
    assert!(trtcm(1, 1, 1, MAX_EXACT_BURST).validate().is_ok());
    assert!(trtcm(5, 1, 5, 1).validate().is_ok(), "pir = cir is allowed");

    assert_eq!(
        err(srtcm(1_000_000, 0, 0)),
        "cbs and ebs are both 0 bytes: at least one must be at least 1 byte (RFC 2697)"
    );
    assert_eq!(err(srtcm(0, 1500, 1500)), "cir must be at least 1 bit/s");
    assert_eq!(
        err(srtcm(1, u32::MAX, 0)),
        "cbs (4294967295 bytes) is above the largest meter burst (536870912 bytes)"
    );
    assert!(srtcm(1, 0, 1).validate().is_ok() && srtcm(1, 1, 0).validate().is_ok());

    let rfc4115 = |cir, cbs, eir, ebs| MeterSpec::Rfc4115 { cir, cbs, eir, ebs };
    assert_eq!(err(rfc4115(1, 1, 0, 1)), "eir must be at least 1 bit/s");
    assert_eq!(err(rfc4115(1, 1, 1, 0)), "ebs must be at least 1 byte");
    assert!(
        rfc4115(2, 1, 1, 1).validate().is_ok(),
        "eir below cir is allowed"
    );

    // Meter::new refuses what validate refuses, with the same message.
    let e = Meter::new(srtcm(1, 0, 0), ColorMode::Blind, Instant::ZERO).unwrap_err();
    assert_eq!(e, err(srtcm(1, 0, 0)));
}

#[test]
fn display_in_policy_terms() {
    assert_eq!(SRTCM.to_string(), "srtcm cir 800kbit cbs 15kB ebs 3kB");
    assert_eq!(
        TRTCM.to_string(),
        "trtcm cir 800kbit cbs 22500B pir 1.4Mbit pbs 27kB"
    );
    assert_eq!(
        RFC4115.to_string(),
        "rfc4115 cir 1.544Mbit cbs 1500B eir 2Mbit ebs 64KiB"
    );
    let zero = srtcm(1, 0, 1);
    assert_eq!(zero.to_string(), "srtcm cir 1bit cbs 0B ebs 1B");
}

#[test]
fn accessors_and_size() {
    let m = Meter::new(TRTCM, ColorMode::Aware, Instant(7)).unwrap();
    assert_eq!(m.spec(), &TRTCM);
    assert_eq!(m.mode(), ColorMode::Aware);
    assert_eq!(m.levels(Instant(7)), (22_500, 27_000), "starts full");
    assert!(
        std::mem::size_of::<Meter>() <= 160,
        "{}",
        std::mem::size_of::<Meter>()
    );
}

#[test]
fn exact_below_a_byte_and_over_a_second() {
    // 1.544 Mbit/s: a byte takes 8e9 / 1.544e6 = 5181.35 ns. With CBS 1 (EBS 0), 1-byte
    // packets: t = 0 green (Tc 0); t = 5181 ns: Tc = 5181 * 1544000 = 7,999,464,000 < 8e9:
    // red; t = 5182: 8,001,008,000, capped at the 8e9 depth: green, Tc 0; so again red at
    // 10,363 and green at 10,364 ns. (A bucket counting in whole ns of transmission time
    // would charge tx_ns(1) = 5181 ns and let the byte through at 5181.)
    let mut m = meter(srtcm(1_544_000, 1, 0), ColorMode::Blind);
    for (t, want) in [(0, G), (5_181, R), (5_182, G), (10_363, R), (10_364, G)] {
        assert_eq!(m.mark(1, G, Instant(t)), want, "t = {t} ns");
    }
    // Over one second of 1500-byte packets every microsecond with CBS 1500: green bytes
    // may not exceed 1500 + 1,544,000 / 8 = 194,500, i.e. 129 packets; the 129th needs
    // 128 * 1500 = 192,000 B earned, at 192,000 * 8 / 1.544e6 = 0.99482 s < 1 s.
    let mut m = meter(srtcm(1_544_000, 1500, 0), ColorMode::Blind);
    let greens = (0..=1_000_000u64)
        .filter(|&us| m.mark(1500, G, Instant(us * US)) == G)
        .count();
    assert_eq!(greens, 129);
}

#[test]
fn long_idle_periods_do_not_overflow() {
    // 100 Gbit/s and the deepest buckets: after 10^6 s (10^15 ns x 10^11 bit/s = 10^26
    // nano-bits, far beyond i64) every bucket is exactly full, and so at Instant::MAX.
    let (rate, b) = (100_000_000_000, MAX_EXACT_BURST);
    for spec in [
        srtcm(rate, b, b),
        MeterSpec::Trtcm {
            cir: rate,
            cbs: b,
            pir: u64::MAX,
            pbs: b,
        },
        MeterSpec::Rfc4115 {
            cir: rate,
            cbs: b,
            eir: rate,
            ebs: b,
        },
    ] {
        let mut m = Meter::new(spec, ColorMode::Aware, Instant::ZERO).unwrap();
        let full = (b as u64, b as u64);
        // Green takes C (and a trTCM's P), yellow then takes E (a trTCM's P is empty).
        let yellow = match spec {
            MeterSpec::Trtcm { .. } => R,
            _ => Y,
        };
        assert_eq!(m.mark(b, G, Instant::ZERO), G, "{spec}");
        assert_eq!(m.mark(b, Y, Instant::ZERO), yellow, "{spec}");
        assert_eq!(m.levels(Instant::ZERO), (0, 0), "{spec}");
        assert_eq!(m.mark(u32::MAX, G, Instant::ZERO), R, "{spec}");
        let later = Instant(1_000_000 * 1_000_000_000);
        assert_eq!(m.levels(later), full, "{spec}");
        assert_eq!(m.mark(b, G, later), G, "{spec}");
        assert_eq!(m.mark(u32::MAX, G, Instant::MAX), R, "{spec}");
        assert_eq!(m.levels(Instant::MAX), full, "{spec}");
    }
    // The slowest rate over the same 10^6 s: 1 bit/s earns 125,000 B.
    let mut m = meter(srtcm(1, 100_000, 100_000), ColorMode::Blind);
    assert_eq!(m.mark(100_000, G, Instant::ZERO), G);
    assert_eq!(m.mark(100_000, G, Instant::ZERO), Y);
    assert_eq!(m.levels(Instant(1_000_000_000_000_000)), (100_000, 25_000));
}

#[test]
fn time_going_backwards_earns_nothing() {
    // srTCM at 1 B/us, CBS 1000, EBS 1000.
    // @1000: both buckets were full, nothing earned. 1000 -> green, Tc 0; checkpoint 1000.
    // @500 (earlier): nothing earned, the checkpoint stays at 1000: 1 -> yellow, Te 999.
    // @0: levels earlier than the checkpoint are the current ones: (0, 999).
    // @1500: 500 us since the checkpoint (not 1000 since the late packet): Tc 500.
    //     500 -> green; 1 -> yellow, Te 998.
    let spec = srtcm(8_000_000, 1000, 1000);
    let mut m = meter(spec, ColorMode::Blind);
    run(
        &mut m,
        "@1000 1000:G  @500 1:Y  @0 =0/999  @1500 500:G 1:Y =0/998",
    );
    // A meter created later than its first packet does not panic either.
    let mut m = Meter::new(spec, ColorMode::Aware, Instant(5 * US)).unwrap();
    assert_eq!(m.mark(1000, G, Instant::ZERO), G);
}

/// The RFCs' algorithms transcribed as they read, in `i128` nano-bits, for the properties
/// below to compare the meters against.
struct Model {
    spec: MeterSpec,
    aware: bool,
    /// Tc; Te or Tp.
    tc: i128,
    tx: i128,
    t: u64,
}

const B: i128 = EXACT_PER_BYTE as i128;

impl Model {
    fn new(spec: MeterSpec, aware: bool, t: u64) -> Self {
        let ((_, cbs), (_, b2)) = spec.buckets();
        Model {
            spec,
            aware,
            tc: cbs as i128 * B,
            tx: b2 as i128 * B,
            t,
        }
    }

    fn mark(&mut self, len: u32, incoming: Color, now: u64) -> Color {
        let dt = now.saturating_sub(self.t) as i128;
        self.t = self.t.max(now);
        let ((cir, cbs), (rate2, b2)) = self.spec.buckets();
        let (cmax, xmax) = (cbs as i128 * B, b2 as i128 * B);
        if let MeterSpec::Srtcm { .. } = self.spec {
            // RFC 2697: tokens go into C while it has room, then into E.
            let add = dt * cir as i128;
            let into_c = add.min(cmax - self.tc);
            self.tc += into_c;
            self.tx = (self.tx + add - into_c).min(xmax);
        } else {
            self.tc = (self.tc + dt * cir as i128).min(cmax);
            self.tx = (self.tx + dt * rate2 as i128).min(xmax);
        }
        let b = len as i128 * B;
        let col = if self.aware { incoming } else { G };
        if let MeterSpec::Trtcm { .. } = self.spec {
            // RFC 2698 section 3, with tx = Tp.
            if col == R || self.tx - b < 0 {
                R
            } else if col == Y || self.tc - b < 0 {
                self.tx -= b;
                Y
            } else {
                self.tx -= b;
                self.tc -= b;
                G
            }
        } else if col == G && self.tc - b >= 0 {
            self.tc -= b;
            G
        } else if col != R && self.tx - b >= 0 {
            self.tx -= b;
            Y
        } else {
            R
        }
    }
}

fn rank(c: Color) -> u8 {
    match c {
        G => 0,
        Y => 1,
        R => 2,
    }
}

/// A rate from 10 kbit/s to 900 Mbit/s, log-uniform: from 1 to 100,000 bytes a millisecond
/// (the mean gap between packets), so that every colour is common.
fn any_rate() -> impl Strategy<Value = u64> {
    (1..10u64, 4..9u32).prop_map(|(m, e)| m * 10u64.pow(e))
}

/// A valid spec of any kind, with bursts up to 20 kB.
fn any_spec() -> impl Strategy<Value = MeterSpec> {
    (0..3u8, any_rate(), any_rate(), 0..20_000u32, 0..20_000u32).prop_map(
        |(kind, cir, extra, cbs, b2)| match kind {
            0 => MeterSpec::Srtcm {
                cir,
                cbs,
                ebs: if cbs == 0 { b2.max(1) } else { b2 },
            },
            1 => MeterSpec::Trtcm {
                cir,
                cbs: cbs.max(1),
                // pir = cir in one case in five
                pir: if extra < 100_000 { cir } else { cir + extra },
                pbs: b2.max(1),
            },
            _ => MeterSpec::Rfc4115 {
                cir,
                cbs: cbs.max(1),
                eir: extra,
                ebs: b2.max(1),
            },
        },
    )
}

/// Packets: (gap in ns, one in 16 of them backwards in time; length; incoming colour).
fn any_packets() -> impl Strategy<Value = Vec<(u64, bool, u32, u8)>> {
    prop::collection::vec(
        (0..2_000_000u64, 0..16u8, 1..3_000u32, 0..3u8)
            .prop_map(|(gap, back, len, col)| (gap, back == 0, len, col)),
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every colour and level is the RFC transcription's; colour-aware never promotes; and
    /// over [t0, t] green bytes <= CBS + CIR·(t − t0)/8, green + yellow <= PBS + PIR·(t −
    /// t0)/8 for the trTCM (CBS + EBS + CIR·(t − t0)/8 for the srTCM), yellow <= EBS +
    /// EIR·(t − t0)/8 for RFC 4115, all in exact nano-bits.
    #[test]
    fn meters_follow_the_rfcs(spec in any_spec(), aware in any::<bool>(), pkts in any_packets()) {
        let t0 = 1_000_000_000u64;
        let mode = if aware { ColorMode::Aware } else { ColorMode::Blind };
        let mut m = Meter::new(spec, mode, Instant(t0)).unwrap();
        let mut model = Model::new(spec, aware, t0);
        let ((cir, cbs), (rate2, b2)) = spec.buckets();
        let (mut t, mut latest) = (t0, t0);
        let (mut green, mut yellow) = (0i128, 0i128);
        for (gap, back, len, col) in pkts {
            t = if back { t.saturating_sub(gap) } else { t + gap };
            latest = latest.max(t);
            let incoming = [G, Y, R][col as usize];
            let got = m.mark(len, incoming, Instant(t));
            prop_assert_eq!(got, model.mark(len, incoming, t));
            if aware {
                prop_assert!(rank(got) >= rank(incoming));
            }
            match got {
                G => green += len as i128 * B,
                Y => yellow += len as i128 * B,
                R => {}
            }
            let span = (latest - t0) as i128;
            prop_assert!(green <= cbs as i128 * B + cir as i128 * span);
            let (bound, marked) = match spec {
                MeterSpec::Srtcm { .. } => ((cbs + b2) as i128 * B + cir as i128 * span, green + yellow),
                MeterSpec::Trtcm { .. } => (b2 as i128 * B + rate2 as i128 * span, green + yellow),
                MeterSpec::Rfc4115 { .. } => (b2 as i128 * B + rate2 as i128 * span, yellow),
            };
            prop_assert!(marked <= bound);
            let levels = ((model.tc / B) as u64, (model.tx / B) as u64);
            prop_assert_eq!(m.levels(Instant(t)), levels);
        }
    }
}
