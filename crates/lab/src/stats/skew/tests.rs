use super::*;
use weir_core::Rng;

const MS: i64 = 1_000_000;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn line_close(got: Option<(f64, f64)>, want: (f64, f64)) -> bool {
    got.is_some_and(|(s, i)| close(s, want.0, 1e-12) && close(i, want.1, 1e-12))
}

#[test]
fn least_squares_and_lad_by_hand() {
    // (0,0) (1,3) (2,2).
    // OLS: mean x 1, mean y 5/3; Sxx = 1 + 0 + 1 = 2; Sxy = (-1)(-5/3) + 0 + (1)(1/3) = 2:
    // slope 1, intercept 5/3 - 1 = 2/3.
    // LAD: an optimal line passes through two points; through (0,0),(1,3): y = 3x, Σ|r| =
    // |2 - 6| = 4; through (1,3),(2,2): y = 4 - x, Σ|r| = 4; through (0,0),(2,2): y = x,
    // Σ|r| = |3 - 1| = 2, the least (unique: the dual s0 = s2 = -1/2 is inside (-1, 1)).
    let p3 = [(0.0, 0.0), (1.0, 3.0), (2.0, 2.0)];
    assert!(line_close(least_squares(&p3), (1.0, 2.0 / 3.0)));
    assert!(line_close(least_absolute(&p3), (1.0, 0.0)));

    // (0,0) (1,1) (2,8) (3,3): three points on y = x, one 6 above it.
    // OLS: mean x 1.5, mean y 3; Sxx = 2.25 + 0.25 + 0.25 + 2.25 = 5;
    // Sxy = (-1.5)(-3) + (-0.5)(-2) + (0.5)(5) + (1.5)(0) = 8: slope 1.6, intercept
    // 3 - 1.6·1.5 = 0.6 — pulled up by the outlier.
    // LAD: y = x, Σ|r| = 6. The descent starts at the median-x point (2,8): slopes to the
    // others -5 (weight 1), 4 (w 2), 7 (w 1); weighted median 4 → y = 4x, Σ|r| = 12. Pivot
    // (0,0): slopes 1 (w 1), 1 (w 3), 4 (w 2) → median 1 → y = x, Σ|r| = 6. Through the
    // next pivot, (1,1) or (3,3), the best slope is 1 again: no descent, and the other
    // point on the line gives none either — optimal (dual s = (0, -1/2, ·, -1/2), inside).
    let p4 = [(0.0, 0.0), (1.0, 1.0), (2.0, 8.0), (3.0, 3.0)];
    assert!(line_close(least_squares(&p4), (1.6, 0.6)));
    assert!(line_close(least_absolute(&p4), (1.0, 0.0)));

    // Points on one line: both exact.
    let on: Vec<(f64, f64)> = (0..7)
        .map(|i| (f64::from(i), 5.0 - 2.0 * f64::from(i)))
        .collect();
    assert!(line_close(least_squares(&on), (-2.0, 5.0)));
    assert!(line_close(least_absolute(&on), (-2.0, 5.0)));

    // No line: no points, one point, one x.
    for pts in [&[][..], &[(1.0, 2.0)][..], &[(1.0, 2.0), (1.0, 5.0)][..]] {
        assert_eq!(least_squares(pts), None);
        assert_eq!(least_absolute(pts), None);
    }
}

#[test]
fn fit_skew_rebases_epoch_times() {
    // Five samples 1 s apart at an epoch-sized t, receiver 3.7 ms ahead and 40 ppm fast
    // (40 µs per s), the middle one 1 ms late. Re-based: x = 0..4 s, y = T - t - 3.7 ms =
    // 0, 40 000, 1 080 000, 120 000, 160 000 ns.
    // OLS: mean x 2e9, mean y 280 000; Sxx = 10e18; Sxy = 5.6e14 + 2.4e14 + 0 - 1.6e14
    // - 2.4e14 = 4e14: slope 4e-5 (a middle outlier does not tilt it), intercept 280 000 -
    // 80 000 = 200 000: offset 3.9 ms, 1/5 of the outlier too high.
    // LAD: y = 4e-5·x through the other four points, offset 3.7 ms exactly.
    let t0 = 1_700_000_000_000_000_000i64;
    let samples: Vec<(i64, i64)> = (0..5)
        .map(|k| {
            let t = t0 + k * 1_000 * MS;
            let late = if k == 2 { MS } else { 0 };
            (t, t + 3_700_000 + 40_000 * k + late)
        })
        .collect();
    let lad = fit_skew(&samples, SkewFit::LeastAbsolute).unwrap();
    assert_eq!((lad.t0_ns, lad.c0_ns), (t0, 3_700_000));
    assert!(close(lad.drift_ppm(), 40.0, 1e-9));
    assert!(close(lad.offset_ns(), 3_700_000.0, 1e-6));
    let ols = fit_skew(&samples, SkewFit::LeastSquares).unwrap();
    assert!(close(ols.drift_ppm(), 40.0, 1e-9));
    assert!(close(ols.offset_ns(), 3_900_000.0, 1e-6));
    // The late sample's delay under the LAD skew: its 1 ms.
    let (t, rx) = samples[2];
    assert!(close(lad.delay_ns(t, rx), MS as f64, 1e-6));
    assert_eq!(fit_skew(&[], SkewFit::LeastAbsolute), None);
    assert_eq!(fit_skew(&samples[..1], SkewFit::LeastSquares), None);
}

#[test]
fn echo_inject_and_the_seeds_queueing_delay() {
    // Sent at 100, stamped 5100 by the receiver, back at 300: half the round trip is 100,
    // c = 5100 - 100 - 100 = 4900, so the pair is (100, 5000).
    assert_eq!(echo_sample(100, 5100, 300), (100, 5000));
    // An odd round trip halves downward: 3 → 1.
    assert_eq!(echo_sample(0, 1000, 3), (0, 999));
    // 3.7 ms ahead, 40 ppm fast: 1 s after t0 the clock reads 3.7 ms + 40 µs ahead; 1 s
    // before, 3.7 ms - 40 µs.
    let t0 = 1_000_000 * MS;
    assert_eq!(
        inject(t0 + 1_000 * MS, 3_700_000, 40.0, t0),
        t0 + 1_000 * MS + 3_740_000
    );
    assert_eq!(
        inject(t0 - 1_000 * MS, 3_700_000, 40.0, t0),
        t0 - 1_000 * MS + 3_660_000
    );
    // Zero-delay echoes of an injected clock give back the injection.
    let cal: Vec<(i64, i64)> = (0..50)
        .map(|k| {
            let t = t0 + k * 100 * MS;
            echo_sample(t, inject(t, 3_700_000, 40.0, t0), t)
        })
        .collect();
    let s = fit_skew(&cal, SkewFit::LeastAbsolute).unwrap();
    assert!(close(s.offset_ns(), 3_700_000.0, 1.0), "{s:?}");
    assert!(close(s.drift_ppm(), 40.0, 1e-3), "{s:?}");
    // Seed 004 §3.3, no DiffServ: 3 routers × 100 packets × (1024 + 8 + 20 + 122) bytes × 8
    // / 100 Mbit/s = 3 × 9.392 ms = 28.176 ms, "28.2 ms".
    let d = queueing_delay_ns(100, 1024 + 8 + 20 + 122, 100e6, 3);
    assert!(close(d, 28_176_000.0, 1e-6), "{d}");
    assert!(close((d / 1e5).round() / 10.0, 28.2, 1e-12));
}

fn rec(seq: u64, t_ms: f64, delay_ms: f64, bytes: u32) -> Record {
    let t_ns = (t_ms * 1e6) as i64;
    Record {
        seq,
        t_ns,
        rx_ns: t_ns + (delay_ms * 1e6) as i64,
        bytes,
    }
}

#[test]
fn jitter_on_a_known_sequence() {
    // 20 ms apart, delays 10, 12, 11, 11, 15 ms: jitter -, 2, 1, 0, 4 ms.
    let delays = [10.0, 12.0, 11.0, 11.0, 15.0];
    let r: Vec<Record> = (0..5u32)
        .map(|k| {
            rec(
                u64::from(k),
                1000.0 + 20.0 * f64::from(k),
                delays[k as usize],
                100,
            )
        })
        .collect();
    let j = |o: &OneWay| o.packets.iter().map(|p| p.jitter_ns).collect::<Vec<_>>();
    let want = vec![None, Some(2e6), Some(1e6), Some(0.0), Some(4e6)];
    assert_eq!(j(&one_way(&r, &Skew::SHARED_CLOCK, 100 * MS as u64)), want);
    // The same packets seen through a receiver clock 1000 ppm fast from t0 = 1000 ms: rx
    // gains 1e-3·(t - t0), 20 µs per packet. The seed's raw |ΔT - Δt| would read 2.02 ms for
    // the first pair; with a = 1e-3 removed it is 2 ms again, and the delays are exact.
    let skew = Skew {
        t0_ns: 1000 * MS,
        c0_ns: 0,
        a: 1e-3,
        b_ns: 0.0,
    };
    let drifted: Vec<Record> = r
        .iter()
        .map(|x| Record {
            rx_ns: x.rx_ns + (x.t_ns - 1000 * MS) / 1000,
            ..*x
        })
        .collect();
    assert_eq!(drifted[1].rx_ns - drifted[0].rx_ns - 20 * MS, 2_020_000);
    let o = one_way(&drifted, &skew, 100 * MS as u64);
    for (p, d) in o.packets.iter().zip(delays) {
        assert!(close(p.delay_ns, d * 1e6, 1e-6), "{p:?}");
    }
    for (got, want) in j(&o).iter().zip(&want) {
        assert!(
            close(got.unwrap_or(-1.0), want.unwrap_or(-1.0), 1e-6),
            "{got:?}"
        );
    }
}

#[test]
fn losses_duplicates_and_reordering() {
    // Arrival order 3, 0, 6, 1, 3 again (a later copy, 9 ms): sequence order 0 1 3 6, the
    // first copy of 3 kept; missing 2, 4, 5 of 0..=6: 3 lost of 7, 1 duplicate.
    let r = [
        rec(3, 60.0, 5.0, 100),
        rec(0, 0.0, 1.0, 100),
        rec(6, 120.0, 2.0, 100),
        rec(1, 20.0, 4.0, 100),
        rec(3, 60.0, 9.0, 100),
    ];
    let o = one_way(&r, &Skew::SHARED_CLOCK, 100 * MS as u64);
    let seqs: Vec<u64> = o.packets.iter().map(|p| p.seq).collect();
    assert_eq!(seqs, [0, 1, 3, 6]);
    assert_eq!(
        o.loss,
        Loss {
            first_seq: 0,
            last_seq: 6,
            received: 4,
            lost: 3,
            duplicates: 1
        }
    );
    assert!(close(o.loss.ratio().unwrap(), 3.0 / 7.0, 1e-12));
    assert_eq!(o.loss.lost_of(10), 6);
    // Jitter across the gaps: |5 - 4| = 1 ms (1 → 3), |2 - 5| = 3 ms (3 → 6).
    let j: Vec<Option<f64>> = o.packets.iter().map(|p| p.jitter_ns).collect();
    assert_eq!(j, [None, Some(3e6), Some(1e6), Some(3e6)]);
    // Nothing received.
    let e = one_way(&[], &Skew::SHARED_CLOCK, 100 * MS as u64);
    assert!(e.packets.is_empty() && e.bins.is_empty());
    assert_eq!((e.loss, e.loss.ratio()), (Loss::default(), None));
}

#[test]
fn bins_with_an_empty_bin() {
    // 10 ms bins from the first send time 0. Arrivals (t + d): 1 ms and 8 ms (bin 0),
    // 25 ms and 27 ms (bin 2); bin 1 empty.
    // bin 0: 1000 + 500 B in 10 ms = 1.2 Mbit/s; delays 1, 3 → 2 ms; jitter |3 - 1| = 2 ms.
    // bin 2: 1250 + 250 B = 1.2 Mbit/s; delays 15, 6 → 10.5 ms; jitter |15 - 3| = 12 and
    // |6 - 15| = 9 → 10.5 ms.
    let r = [
        rec(0, 0.0, 1.0, 1000),
        rec(1, 5.0, 3.0, 500),
        rec(2, 10.0, 15.0, 1250),
        rec(3, 21.0, 6.0, 250),
    ];
    let o = one_way(&r, &Skew::SHARED_CLOCK, 10 * MS as u64);
    assert_eq!((o.origin_ns, o.bin_ns), (0, 10 * MS as u64));
    let b = &o.bins;
    assert_eq!(b.len(), 3);
    let starts: Vec<i64> = b.iter().map(|x| x.start_ns).collect();
    assert_eq!(starts, [0, 10 * MS, 20 * MS]);
    assert_eq!(
        (b[0].packets, b[0].bytes, b[0].bandwidth_bps),
        (2, 1500, 1.2e6)
    );
    assert_eq!(
        (b[0].mean_delay_ns, b[0].mean_jitter_ns),
        (Some(2e6), Some(2e6))
    );
    assert_eq!((b[1].packets, b[1].bytes, b[1].bandwidth_bps), (0, 0, 0.0));
    assert_eq!((b[1].mean_delay_ns, b[1].mean_jitter_ns), (None, None));
    assert_eq!(
        (b[2].packets, b[2].bytes, b[2].bandwidth_bps),
        (2, 1500, 1.2e6)
    );
    assert_eq!(
        (b[2].mean_delay_ns, b[2].mean_jitter_ns),
        (Some(10.5e6), Some(10.5e6))
    );
    // Bin width 0 counts as 1 ns.
    assert_eq!(one_way(&r, &Skew::SHARED_CLOCK, 0).bin_ns, 1);
}

/// Exponential with mean `m` from the seeded generator.
fn exp(rng: &mut Rng, m: f64) -> f64 {
    -m * (1.0 - rng.next_f64()).ln()
}

#[test]
fn lad_recovers_an_injected_skew_where_least_squares_is_biased() {
    // Seed 004's calibration: 2 minutes of echoed packets, one per 10 ms (12 000), the
    // receiver's clock 3.7 ms ahead and 40 ppm fast. Each way: 1 ms plus an exponential
    // queueing delay of mean 50 µs; the sample's c = T - t - rtt/2 is off by (fwd - back)/2,
    // symmetric about 0. Cross traffic that grows over the period delays 2 % of the packets
    // at the start and 10 % at the end by 5-25 ms on the way out only.
    // Expected OLS bias: mean outlier 15 ms, half of it in c: 7.5 ms × p(t) with p = 2 % +
    // 8 %·t/120 s → +150 µs at t0 and a slope of 0.08 × 7.5 ms / 120 s = +5 ppm.
    // Expected LAD bias: the median of c moves to the 0.5/(1 - p) quantile of a Laplace of
    // scale 25 µs: +0.5 µs at p = 2 %, +2.9 µs at 10 % → about +0.5 µs at t0, +0.02 ppm;
    // its noise (n = 12 000, density 1/50 µs at the median) about 0.5 µs and 0.01 ppm.
    // OLS noise: c's outliers have sd ≈ 1.9 ms, so ± 35 µs at t0 and ± 0.5 ppm.
    // Seed 4 gives: LAD +184 ns, +0.023 ppm; OLS +161.8 µs, +5.04 ppm.
    let mut rng = Rng::new(4);
    let start = 1_700_000_000_000_000_000i64;
    let (offset, ppm) = (3_700_000i64, 40.0);
    let base = 1e6;
    let n = 12_000;
    let cal: Vec<(i64, i64)> = (0..n)
        .map(|k| {
            let t0 = start + k * 10 * MS;
            let p = 0.02 + 0.08 * k as f64 / n as f64;
            let mut fwd = base + exp(&mut rng, 50e3);
            if rng.chance(p) {
                fwd += 5e6 + 20e6 * rng.next_f64();
            }
            let back = base + exp(&mut rng, 50e3);
            let rx = inject(t0 + fwd as i64, offset, ppm, start);
            echo_sample(t0, rx, t0 + (fwd + back) as i64)
        })
        .collect();
    let lad = fit_skew(&cal, SkewFit::LeastAbsolute).unwrap();
    let ols = fit_skew(&cal, SkewFit::LeastSquares).unwrap();
    let err = |s: &Skew| (s.offset_ns() - offset as f64, s.drift_ppm() - ppm);
    let (lad_b, lad_a) = err(&lad);
    let (ols_b, ols_a) = err(&ols);
    eprintln!("LAD {lad_b:.0} ns {lad_a:+.4} ppm; OLS {ols_b:.0} ns {ols_a:+.4} ppm");
    assert!(lad_b.abs() < 2e3 && lad_a.abs() < 0.05, "LAD {lad:?}");
    assert!(ols_b > 50e3 && ols_b < 300e3, "OLS {ols:?}");
    assert!(ols_a > 3.0 && ols_a < 7.0, "OLS {ols:?}");

    // Then 10 s of measured packets 130 s after t0, true one-way delays 1 ms plus
    // queueing (mean 2 ms): the LAD skew gives them back within 20 µs (offset error + 140 s
    // × drift error + 40 ppm of the delay itself; seed 4: 3.4 µs at worst); the OLS skew is
    // off by about 150 µs + 140 s × 5 ppm = 0.85 ms (seed 4: 0.87 ms at worst).
    let (mut truth, mut recs) = (Vec::new(), Vec::new());
    for k in 0..1000i64 {
        let t = start + 130_000 * MS + k * 10 * MS;
        let d = base + exp(&mut rng, 2e6);
        truth.push(d);
        recs.push(Record {
            seq: k as u64,
            t_ns: t,
            rx_ns: inject(t + d as i64, offset, ppm, start),
            bytes: 1174,
        });
    }
    let worst = |s: &Skew| {
        let o = one_way(&recs, s, 100 * MS as u64);
        o.packets
            .iter()
            .zip(&truth)
            .map(|(p, d)| (p.delay_ns - d).abs())
            .fold(0.0, f64::max)
    };
    let (lad_w, ols_w) = (worst(&lad), worst(&ols));
    eprintln!("worst delay error: LAD {lad_w:.0} ns, OLS {ols_w:.0} ns");
    assert!(lad_w < 20e3, "{lad_w}");
    assert!(ols_w > 300e3, "{ols_w}");
    // Every packet lands in a bin, none is lost.
    let o = one_way(&recs, &lad, 100 * MS as u64);
    let total: u64 = o.bins.iter().map(|b| b.packets).sum();
    assert_eq!((total, o.loss.lost), (1000, 0));
}

#[test]
fn the_receiver_clock_runs_ahead_and_drifts() {
    let c = ReceiverClock {
        offset_ns: 1_000_000,
        drift_ppm: 40.0,
        t0_ns: 1_000_000_000,
    };
    // 10 s after t0 at 40 ppm: 400 µs more
    assert_eq!(c.read(11_000_000_000), 11_000_000_000 + 1_000_000 + 400_000);
    assert_eq!(c.skew_at(11_000_000_000), 1_400_000.0);
    assert_eq!(c.read(1_000_000_000), 1_001_000_000);
    assert_eq!(ReceiverClock::TRUE.read(5), 5);
}
