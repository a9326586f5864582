//! Tests of the shared AQM arithmetic: the inverse square root, the control law, the
//! parameters derived from a rate.

use super::*;

const Q32: f64 = 4_294_967_296.0;

fn exact(count: u32) -> f64 {
    Q32 / (count as f64).sqrt()
}

/// The table: 1/sqrt(count) to within 2 units of 2⁻³² (entries 0 and 1 are 1.0 - 2⁻³²).
#[test]
fn inv_sqrt_table_is_exact_to_two_ulps() {
    assert_eq!(INV_SQRT_CACHE[0], u32::MAX);
    assert_eq!(INV_SQRT_CACHE[1], u32::MAX);
    for c in 2..INV_SQRT_CACHE.len() as u32 {
        let got = INV_SQRT_CACHE[c as usize] as f64;
        assert!(
            (got - exact(c)).abs() <= 2.0,
            "count {c}: {got} vs {}",
            exact(c)
        );
        assert_eq!(inv_sqrt(c, 0), INV_SQRT_CACHE[c as usize]);
    }
}

/// Counts stepped up one at a time from the table (as signals raise them), and down one
/// at a time (as COBALT's decay lowers them): within 10⁻⁵ of the exact value. A
/// single Newton step from count 1 to 2 would give 1/sqrt(4), and one from 15 to 16 is
/// 0.16 % off (the error of a step is about 3/(8 count²)): the reason for the table.
#[test]
fn newton_steps_track_the_count() {
    assert_eq!(
        newton_step(2, u32::MAX),
        (1 << 31) + 1,
        "1/sqrt(4), not 1/sqrt(2)"
    );
    let one_step = newton_step(16, INV_SQRT_CACHE[15]) as f64;
    assert!((one_step / exact(16) - 1.0).abs() > 1e-3);
    let n = INV_SQRT_CACHE.len() as u32;
    let mut y = INV_SQRT_CACHE[n as usize - 1];
    let mut worst = 0f64;
    for c in n..200_000u32 {
        y = inv_sqrt(c, y);
        worst = worst.max((y as f64 / exact(c) - 1.0).abs());
    }
    for c in (1..200_000u32).rev() {
        y = inv_sqrt(c, y);
        worst = worst.max((y as f64 / exact(c) - 1.0).abs());
    }
    assert!(worst < 1e-5, "worst relative error {worst}");
}

/// A jump in the count (re-entry with `delta`, overflow bumps) that one step cannot
/// follow restarts from a power of two below the root: still within 10⁻⁵.
#[test]
fn jumps_restart_below_the_root() {
    for (count, prev) in [
        (16, u32::MAX),
        (1000, u32::MAX),
        (70_000, INV_SQRT_CACHE[2]),
        (u32::MAX, u32::MAX),
        (17, 0),
        (4096, 1),
    ] {
        let y = inv_sqrt(count, prev) as f64;
        // (at count 2^32 - 1 one unit of 2^-32 is 1.5e-5 of the root: 2 units allowed)
        let err = (y - exact(count)).abs();
        assert!(
            err <= 2.0 || err / exact(count) < 1e-5,
            "{count} from {prev}: {y}"
        );
    }
}

/// The control law `interval / sqrt(count)` for counts 1..4 at 100 ms: 100, 70.71,
/// 57.74, 50 ms, each within 2 ns (integer arithmetic, Q0.32 reciprocal).
#[test]
fn control_law_hand_computed() {
    let iv = Duration::from_millis(100);
    let want = [100_000_000u64, 70_710_678, 57_735_027, 50_000_000];
    for (c, w) in (1..=4u32).zip(want) {
        let got = control_law(1_000, iv, inv_sqrt(c, 0)) - 1_000;
        assert!(got.abs_diff(w) <= 2, "count {c}: {got} ns, want {w}");
    }
    // long intervals do not overflow
    let hour = Duration::from_secs(3600);
    assert_eq!(control_law(0, hour, 1 << 31), 1_800_000_000_000);
}

/// `cake_set_rate` at a few rates (1514-byte MTU, 5 ms / 100 ms asked).
#[test]
fn parameters_from_the_rate_as_cake() {
    // unlimited: as asked
    let p = AqmParams::cake(None);
    assert_eq!(
        (p.target.0, p.interval.0, p.mtu_time.0),
        (5_000_000, 100_000_000, 0)
    );
    assert!(p.ecn);
    assert_eq!((p.p_inc, p.p_dec), (1 << 24, 1 << 20));
    assert_eq!(p, AqmParams::default());
    // 10 Mbit/s: 1514 B = 1.2112 ms; 1.5 x = 1.8168 ms < 5 ms
    let p = AqmParams::cake(Some(Rate::from_bps(10_000_000)));
    assert_eq!(
        (p.target.0, p.interval.0, p.mtu_time.0),
        (5_000_000, 100_000_000, 1_211_200)
    );
    // 1 Mbit/s: 12.112 ms; target 18.168 ms; interval 100 + 18.168 - 5 = 113.168 ms
    let p = AqmParams::cake(Some(Rate::from_bps(1_000_000)));
    assert_eq!((p.target.0, p.interval.0), (18_168_000, 113_168_000));
    // 100 kbit/s: 121.12 ms; target 181.68 ms; interval max(276.68, 363.36) = 363.36 ms
    let p = AqmParams::cake(Some(Rate::from_bps(100_000)));
    assert_eq!((p.target.0, p.interval.0), (181_680_000, 363_360_000));
    // the threshold: 1.5 MTU times = 5 ms at 3.6336 Mbit/s
    let p = AqmParams::cake(Some(Rate::from_bps(3_633_600)));
    assert_eq!(p.target.0, 5_000_000);
    // asked values are raised the same way
    let p = AqmParams::for_rate(
        Some(Rate::from_bps(1_000_000)),
        Duration::from_millis(2),
        Duration::from_millis(50),
        1514,
    );
    assert_eq!((p.target.0, p.interval.0), (18_168_000, 66_168_000));
    for p in [
        AqmParams::cake(None),
        AqmParams::cake(Some(Rate::from_bps(1_000))),
    ] {
        p.validate().unwrap();
    }
}

#[test]
fn validation_messages() {
    let ok = AqmParams::default();
    let cases = [
        (
            AqmParams {
                target: Duration::ZERO,
                ..ok
            },
            "aqm: target must be > 0",
        ),
        (
            AqmParams {
                interval: Duration::ZERO,
                ..ok
            },
            "aqm: interval must be > 0",
        ),
        (
            AqmParams {
                target: Duration::from_millis(100),
                ..ok
            },
            "aqm: target (100.000ms) must be shorter than interval (100.000ms)",
        ),
        (
            AqmParams {
                target: Duration::from_secs(1),
                interval: Duration::from_secs(7200),
                ..ok
            },
            "aqm: interval (7200.000s) must be at most 1 hour",
        ),
        (AqmParams { mtu: 0, ..ok }, "aqm: mtu must be > 0 bytes"),
    ];
    for (p, msg) in cases {
        assert_eq!(p.validate().unwrap_err(), msg);
    }
    assert_eq!(AqmKind::parse("codel"), Ok(AqmKind::Codel));
    assert_eq!(AqmKind::parse("cobalt").unwrap().name(), "cobalt");
    assert_eq!(AqmKind::parse("none"), Ok(AqmKind::None));
    assert!(AqmKind::parse("pie").unwrap_err().contains("\"pie\""));
}
