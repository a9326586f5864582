//! Statistical and fidelity tests of the WAN link emulator (`weir_core::emulate`), driven on
//! a virtual clock with seeded RNGs. Seeds 000 (wan-emu: per-session delay, jitter,
//! random/periodic loss) and 002 (high-fidelity link shaping: exact inter-frame gaps, no
//! artifact loss with a bandwidth-delay-product queue).

use weir_core::emulate::{
    EmuConfig, EmuLink, Emulator, Jitter, LossModel, OVERHEAD_ETHERNET, OVERHEAD_FCS,
};
use weir_core::framing::Framing;
use weir_core::{Count, Counted, Ctx, DropCause, Duration, Instant, PktId, Pool, Qdisc, Rng};

/// What happened to one offered packet.
#[derive(Clone, Debug, Default)]
struct Outcome {
    refused: Option<DropCause>,
    /// Departure times of this packet (a duplicate departs twice).
    departs: Vec<u64>,
}

struct Run {
    out: Vec<Outcome>,
    /// Sequence numbers in departure order.
    order: Vec<u64>,
    /// Departure instants in departure order.
    times: Vec<u64>,
}

struct Driver<'a> {
    pool: &'a mut Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    now: u64,
    run: Run,
}

impl Driver<'_> {
    /// Dequeue everything due up to `until`, at each wakeup.
    fn drain<Q: Qdisc>(&mut self, q: &mut Q, until: u64, check: &mut impl FnMut(&Q)) {
        while let Some(w) = q.next_wakeup() {
            if w.0 > until {
                break;
            }
            self.now = self.now.max(w.0);
            let mut cx = Ctx::new(
                Instant(self.now),
                self.pool,
                &mut self.rng,
                &mut self.dropped,
            );
            let mut any = false;
            while let Some(id) = q.dequeue(&mut cx) {
                any = true;
                let seq = cx.pool.meta(id).flow;
                self.run.out[seq as usize].departs.push(self.now);
                self.run.order.push(seq);
                self.run.times.push(self.now);
                cx.pool.free(id);
            }
            check(q);
            assert!(any, "wakeup {w:?} released nothing");
        }
    }
}

/// Offer `arrivals` (time ns, length) to `q`; dequeue every packet at its wakeup; free
/// departed packets. Packets carry their sequence number in `Meta::flow`. `check` runs
/// after every call.
fn drive<Q: Qdisc>(
    q: &mut Q,
    pool: &mut Pool,
    seed: u64,
    arrivals: impl IntoIterator<Item = (u64, u32)>,
    mut check: impl FnMut(&Q),
) -> Run {
    let mut d = Driver {
        pool,
        rng: Rng::new(seed),
        dropped: Vec::new(),
        now: 0,
        run: Run {
            out: Vec::new(),
            order: Vec::new(),
            times: Vec::new(),
        },
    };
    for (seq, (t, len)) in arrivals.into_iter().enumerate() {
        d.drain(q, t, &mut check);
        d.now = d.now.max(t);
        let mut cx = Ctx::new(Instant(d.now), d.pool, &mut d.rng, &mut d.dropped);
        let id = cx.pool.alloc().expect("pool large enough");
        let m = cx.pool.meta_mut(id);
        m.len = len;
        m.flow = seq as u64;
        m.arrival = Instant(d.now);
        m.rule = u16::MAX;
        let r = q.enqueue(id, &mut cx);
        d.run.out.push(Outcome {
            refused: r.err(),
            departs: Vec::new(),
        });
        if r.is_err() {
            cx.pool.free(id);
        }
        check(q);
    }
    d.drain(q, u64::MAX, &mut check);
    assert!(d.dropped.is_empty());
    assert_eq!(d.pool.in_use(), 0, "every packet freed");
    d.run
}

fn every(gap_ns: u64, n: usize, len: u32) -> impl Iterator<Item = (u64, u32)> {
    (0..n as u64).map(move |i| (i * gap_ns, len))
}

fn counted(cfg: EmuConfig) -> Counted<EmuLink> {
    Counted::new(Box::new(EmuLink::new(cfg).unwrap()))
}

fn delays(run: &Run, arrivals_gap: u64) -> Vec<f64> {
    run.out
        .iter()
        .enumerate()
        .filter(|(_, o)| o.refused.is_none())
        .map(|(i, o)| (o.departs[0] - i as u64 * arrivals_gap) as f64)
        .collect()
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, var.sqrt())
}

fn inversions(order: &[u64]) -> usize {
    order.windows(2).filter(|w| w[1] < w[0]).count()
}

#[test]
fn bernoulli_loss_inside_binomial_interval() {
    let n = 200_000;
    for (p, seed) in [(0.005, 11u64), (0.01, 12), (0.04, 13)] {
        let mut q = counted(EmuConfig {
            loss: LossModel::Bernoulli { p },
            delay: Duration::from_millis(20),
            ..EmuConfig::default()
        });
        let mut pool = Pool::new(64, 0);
        let run = drive(&mut q, &mut pool, seed, every(1_000_000, n, 200), |_| {});
        let lost = run
            .out
            .iter()
            .filter(|o| o.refused == Some(DropCause::Emulated))
            .count() as f64;
        let half = 1.96 * (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (lost - n as f64 * p).abs() <= half,
            "p={p}: lost {lost}, want {}±{half}",
            n as f64 * p
        );
        q.check().unwrap();
        assert_eq!(q.stats.drops_by(DropCause::Emulated).packets, lost as u64);
        assert_eq!(q.inner.counters().lost.packets, lost as u64);
        assert_eq!(q.stats.dequeued.packets, n as u64 - lost as u64);
    }
}

#[test]
fn periodic_loss_is_exact() {
    // Seed 000 Table 5: 0.5 %, 1 %, 2 %, 4 %, 8 % periodic loss.
    for rate in [0.005, 0.01, 0.02, 0.04, 0.08] {
        let model = LossModel::periodic(rate).unwrap();
        let LossModel::Periodic { every: k } = model else {
            unreachable!()
        };
        let mut q = counted(EmuConfig {
            loss: model,
            delay: Duration::from_millis(50),
            ..EmuConfig::default()
        });
        let mut pool = Pool::new(256, 0);
        let n = 100_000;
        let run = drive(&mut q, &mut pool, 1, every(1_000_000, n, 1500), |_| {});
        for (i, o) in run.out.iter().enumerate() {
            let want = i as u64 % k == k - 1;
            assert_eq!(o.refused == Some(DropCause::Emulated), want, "packet {i}");
        }
        q.check().unwrap();
    }
}

#[test]
fn gilbert_elliott_bursts_and_stationary_loss() {
    let (p, r) = (0.01, 0.25); // mean burst 4, loss 1/26
    let model = LossModel::gilbert(p, r);
    let mut q = counted(EmuConfig {
        loss: model,
        ..EmuConfig::default()
    });
    let mut pool = Pool::new(16, 0);
    let n = 400_000;
    let run = drive(&mut q, &mut pool, 21, every(100_000, n, 100), |_| {});
    let lost: Vec<bool> = run.out.iter().map(|o| o.refused.is_some()).collect();
    let mut bursts = Vec::new();
    let mut cur = 0usize;
    for &x in lost.iter().chain([false].iter()) {
        if x {
            cur += 1;
        } else if cur > 0 {
            bursts.push(cur);
            cur = 0;
        }
    }
    let mean_burst = bursts.iter().sum::<usize>() as f64 / bursts.len() as f64;
    assert!(
        (mean_burst * r - 1.0).abs() < 0.05,
        "mean burst {mean_burst}, want {}",
        1.0 / r
    );
    let loss = lost.iter().filter(|&&x| x).count() as f64 / n as f64;
    let want = p / (p + r);
    assert!((loss / want - 1.0).abs() < 0.05, "loss {loss}, want {want}");
    q.check().unwrap();
}

#[test]
fn uniform_delay_mean_and_bounds() {
    let d = 50_000_000;
    let w = 10_000_000;
    let mut q = counted(EmuConfig {
        delay: Duration(d),
        jitter: Jitter::Uniform { half_width: w },
        reorder: true,
        ..EmuConfig::default()
    });
    let mut pool = Pool::new(1024, 0);
    let n = 100_000;
    let run = drive(&mut q, &mut pool, 31, every(500_000, n, 100), |_| {});
    let v = delays(&run, 500_000);
    let (m, sd) = mean_sd(&v);
    assert!(v
        .iter()
        .all(|&x| x >= (d - w) as f64 && x <= (d + w) as f64));
    assert!(v.iter().any(|&x| x < (d - w + w / 100) as f64));
    assert!(v.iter().any(|&x| x > (d + w - w / 100) as f64));
    let se = w as f64 / 3f64.sqrt() / (n as f64).sqrt();
    assert!((m - d as f64).abs() < 4.0 * se, "mean {m}");
    assert!(
        (sd / (w as f64 / 3f64.sqrt()) - 1.0).abs() < 0.02,
        "sd {sd}"
    );
}

#[test]
fn normal_delay_mean_and_sigma() {
    let d = 100_000_000;
    let s = 5_000_000;
    let mut q = counted(EmuConfig {
        delay: Duration(d),
        jitter: Jitter::Normal { sigma: s },
        reorder: true,
        ..EmuConfig::default()
    });
    let mut pool = Pool::new(1024, 0);
    let n = 100_000;
    let run = drive(&mut q, &mut pool, 32, every(1_000_000, n, 100), |_| {});
    let (m, sd) = mean_sd(&delays(&run, 1_000_000));
    assert!(
        (m - d as f64).abs() < 4.0 * s as f64 / (n as f64).sqrt(),
        "mean {m}"
    );
    assert!((sd / s as f64 - 1.0).abs() < 0.02, "sd {sd}");
}

#[test]
fn pareto_delay_mean_and_median() {
    let d = 100_000_000;
    let j = Jitter::netem_pareto(5_000_000); // scale 6.67 ms, shape 3
    let mut q = counted(EmuConfig {
        delay: Duration(d),
        jitter: j.clone(),
        reorder: true,
        ..EmuConfig::default()
    });
    let mut pool = Pool::new(1024, 0);
    let n = 200_000;
    let run = drive(&mut q, &mut pool, 33, every(1_000_000, n, 100), |_| {});
    let mut v = delays(&run, 1_000_000);
    let (m, _) = mean_sd(&v);
    let se = j.std_dev().unwrap() / (n as f64).sqrt();
    assert!((m - d as f64 - j.mean()).abs() < 5.0 * se, "mean {m}");
    v.sort_by(f64::total_cmp);
    let med = v[v.len() / 2];
    assert!(
        (med - (d as f64 + j.median())).abs() < 0.01 * 5_000_000.0,
        "median {med} vs {}",
        d as f64 + j.median()
    );
    // Heavy right tail, bounded left tail.
    assert!(v[0] >= d as f64 + j.min_offset() as f64);
    assert!(v[v.len() - 1] > d as f64 + 10.0 * 5_000_000.0);
}

#[test]
fn fifo_order_unless_reordering_is_allowed() {
    // 1 packet/ms, delay 50 ms, jitter sigma 20 ms: jitter far above the spacing.
    let cfg = EmuConfig {
        delay: Duration::from_millis(50),
        jitter: Jitter::Normal { sigma: 20_000_000 },
        ..EmuConfig::default()
    };
    let n = 20_000;
    let mut pool = Pool::new(4096, 0);
    let mut q = counted(cfg.clone());
    let run = drive(&mut q, &mut pool, 41, every(1_000_000, n, 500), |_| {});
    assert_eq!(run.order.len(), n);
    assert_eq!(inversions(&run.order), 0, "reorder = false never reorders");
    assert!(run.times.windows(2).all(|w| w[0] <= w[1]));
    q.check().unwrap();

    let mut q = counted(EmuConfig {
        reorder: true,
        ..cfg
    });
    let run = drive(&mut q, &mut pool, 41, every(1_000_000, n, 500), |_| {});
    let inv = inversions(&run.order);
    assert!(inv > n / 10, "reorder = true reorders ({inv} inversions)");
    assert!(
        run.times.windows(2).all(|w| w[0] <= w[1]),
        "released in time order"
    );
    q.check().unwrap();
}

#[test]
fn serialiser_gaps_are_exact_without_drift() {
    // Seed 002: 1518-byte frames (1514 + FCS) at 155 Mbit/s with 125 ms of delay leave
    // 78.348 387 µs apart. Arrivals every 78 µs keep the link busy (the queue grows by
    // ~0.45 % of a frame per arrival, ~450 frames at the end, below the BDP of 1595 frames).
    let rate = 155_000_000u64;
    let mut q = counted(EmuConfig {
        rate_bps: Some(rate),
        framing: Framing::plain(OVERHEAD_FCS),
        delay: Duration::from_millis(125),
        ..EmuConfig::default()
    });
    let n = 100_000;
    let mut pool = Pool::new(4096, 0);
    let run = drive(&mut q, &mut pool, 51, every(78_000, n, 1514), |_| {});
    assert!(
        run.out.iter().all(|o| o.refused.is_none()),
        "no artifact loss"
    );
    assert_eq!(run.times.len(), n);
    let exact_ps = 1518.0 * 8.0 * 1e12 / rate as f64; // 78 348 387.1 ps
    for w in run.times.windows(2) {
        let gap = w[1] - w[0];
        assert!(gap == 78_348 || gap == 78_349, "gap {gap}");
    }
    // First frame: 78.348 µs of serialisation + 125 ms.
    assert_eq!(run.times[0], 125_000_000 + 78_349);
    // No drift: each frame is short of the exact rational by tx_ps's floor (< 1 ps;
    // 0.097 ps here), so the last departure is within 1 ns + (n - 1) ps of exact.
    let span = (run.times[n - 1] - run.times[0]) as f64;
    let want = (n - 1) as f64 * exact_ps / 1000.0;
    assert!(
        (span - want).abs() <= 1.0 + (n - 1) as f64 * 1e-3,
        "span {span} vs {want}"
    );
    let mean_gap = span / (n - 1) as f64;
    assert!((mean_gap - 78_348.387).abs() < 0.001, "mean gap {mean_gap}");
    let max_q = q.inner.counters().max_queue_packets;
    assert!((400..1595).contains(&max_q), "max queue {max_q}");
    q.check().unwrap();
}

#[test]
fn small_frames_at_100_gbit_are_exact_in_picoseconds() {
    // 64 bytes + 24 bytes of Ethernet overhead at 100 Gbit/s = 7.04 ns per frame: a
    // nanosecond serialiser would drift by 0.6 %.
    let mut q = EmuLink::new(EmuConfig {
        rate_bps: Some(100_000_000_000),
        framing: Framing::plain(OVERHEAD_ETHERNET),
        limit_packets: Some(1 << 20),
        ..EmuConfig::default()
    })
    .unwrap();
    let n = 1_000_000u64;
    let mut pool = Pool::new(n as u32 + 1, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for _ in 0..n {
        let id = cx.pool.alloc().unwrap();
        cx.pool.meta_mut(id).len = 64;
        q.enqueue(id, &mut cx).unwrap();
    }
    assert_eq!(q.busy_until(), Some(Instant(7_040_000)));
    let mut last = Instant::ZERO;
    let mut k = 0;
    while let Some(t) = q.next_wakeup() {
        cx.now = t;
        while let Some(id) = q.dequeue(&mut cx) {
            cx.pool.free(id);
            k += 1;
        }
        last = t;
    }
    assert_eq!(k, n);
    assert_eq!(last, Instant(7_040_000));
    q.check().unwrap();
}

/// On/off source: bursts of `burst` frames of `len` bytes at 1 Gbit/s, the period chosen
/// so the mean load is `load` × `rate`.
fn bursts(rate: u64, load: f64, burst: usize, len: u32, n_bursts: usize) -> Vec<(u64, u32)> {
    let burst_bits = (burst as u64 * len as u64 * 8) as f64;
    let period = (burst_bits / (rate as f64 * load) * 1e9) as u64;
    let gap = len as u64 * 8; // 1 Gbit/s: 8 ns per byte
    (0..n_bursts as u64)
        .flat_map(|b| (0..burst as u64).map(move |i| (b * period + i * gap, len)))
        .collect()
}

#[test]
fn bdp_queue_gives_zero_loss_below_the_rate() {
    // 10 Mbit/s, 50 ms: BDP 62 500 bytes. Bursts of 40 × 1500 = 60 000 bytes arrive at
    // 1 Gbit/s; mean load 90 % of the rate.
    let cfg = EmuConfig {
        rate_bps: Some(10_000_000),
        delay: Duration::from_millis(50),
        ..EmuConfig::default()
    };
    assert_eq!(cfg.limits().bytes, 62_500);
    let arrivals = bursts(10_000_000, 0.9, 40, 1500, 300);
    let mut pool = Pool::new(512, 0);
    let mut q = counted(cfg.clone());
    let run = drive(&mut q, &mut pool, 61, arrivals.clone(), |q| {
        q.check().unwrap()
    });
    assert!(
        run.out.iter().all(|o| o.refused.is_none()),
        "no artifact loss"
    );
    assert_eq!(run.order.len(), arrivals.len());
    assert!(q.inner.counters().max_queue_bytes <= 62_500);
    assert_eq!(q.inner.counters().queue_drops, Count::default());

    // The same load into a 20-packet queue overflows.
    let mut q = counted(EmuConfig {
        limit_packets: Some(20),
        ..cfg
    });
    let run = drive(&mut q, &mut pool, 61, arrivals, |q| q.check().unwrap());
    let full = run
        .out
        .iter()
        .filter(|o| o.refused == Some(DropCause::QueueFull))
        .count();
    assert!(full > 0);
    assert_eq!(q.stats.drops_by(DropCause::QueueFull).packets, full as u64);
}

#[test]
fn counter_identities_with_every_impairment() {
    let cfg = EmuConfig {
        rate_bps: Some(2_000_000),
        framing: Framing::plain(OVERHEAD_ETHERNET),
        delay: Duration::from_millis(30),
        jitter: Jitter::ParetoNormal { sigma: 5_000_000 },
        reorder: true,
        loss: LossModel::GilbertElliott {
            p: 0.02,
            r: 0.3,
            k: 0.995,
            h: 0.2,
        },
        corrupt: 0.05,
        limit_packets: Some(30),
        ..EmuConfig::default()
    };
    let arrivals: Vec<(u64, u32)> = {
        let mut r = Rng::new(7);
        let mut t = 0;
        (0..50_000)
            .map(|_| {
                t += r.below(4_000_000);
                (t, 64 + r.below(1437) as u32)
            })
            .collect()
    };
    // Without duplication a Counted wrapper's identities hold exactly.
    let mut pool = Pool::new(2048, 0);
    let mut q = counted(cfg.clone());
    drive(&mut q, &mut pool, 71, arrivals.clone(), |q| {
        q.check().unwrap();
        q.inner.check().unwrap();
    });
    let c = q.inner.counters();
    assert!(c.lost.packets > 0 && c.queue_drops.packets > 0 && c.corrupted.packets > 0);
    assert_eq!(
        c.corrupted_no_data, c.corrupted.packets,
        "no frame bytes in this pool"
    );
    assert_eq!(q.stats.received, q.inner.stats().received);

    // With duplication the link's own statistics count each copy as an arrival; the
    // wrapper's view is off by exactly the admitted copies.
    let mut q = counted(EmuConfig {
        duplicate: 0.1,
        ..cfg
    });
    let run = drive(&mut q, &mut pool, 72, arrivals.clone(), |q| {
        q.inner.check().unwrap()
    });
    let c = q.inner.counters().clone();
    assert!(c.duplicated.packets > 3_000 && c.dup_admitted.packets > 0);
    let s = &q.stats;
    assert_eq!(
        s.enqueued + c.dup_admitted,
        s.dequeued
            + s.dropped_later
            + Count {
                packets: q.len() as u64,
                bytes: q.bytes()
            }
    );
    let twice = run.out.iter().filter(|o| o.departs.len() == 2).count() as u64;
    assert_eq!(twice, c.dup_admitted.packets);
    assert_eq!(
        q.inner.stats().received.packets,
        arrivals.len() as u64 + c.duplicated.packets
    );
}

#[test]
fn corruption_flips_bits_in_stored_frames() {
    let mut q = EmuLink::new(EmuConfig {
        corrupt: 0.5,
        duplicate: 0.5,
        ..EmuConfig::default()
    })
    .unwrap();
    let mut pool = Pool::new(64, 256);
    let mut rng = Rng::new(81);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let frame: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    let mut flipped = 0;
    for _ in 0..2_000 {
        let id = cx.pool.alloc().unwrap();
        cx.pool.slot_mut(id)[..200].copy_from_slice(&frame);
        cx.pool.meta_mut(id).len = 200;
        q.enqueue(id, &mut cx).unwrap();
        while let Some(out) = q.dequeue(&mut cx) {
            let bits: u32 = frame
                .iter()
                .zip(cx.pool.data(out))
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert!(bits <= 1);
            flipped += bits as u64;
            cx.pool.free(out);
        }
    }
    let c = q.counters();
    assert_eq!(c.corrupted_no_data, 0);
    assert_eq!(flipped, c.corrupted.packets);
    let offered = 2_000 + c.duplicated.packets;
    let p = c.corrupted.packets as f64 / offered as f64;
    assert!((p - 0.5).abs() < 0.03, "{p}");
    q.check().unwrap();
}

#[test]
fn emulator_per_session_profiles() {
    // Seed 000 Table 5: four sessions with WAN delays 10, 50, 100, 150 ms, each with a
    // 1 % periodic loss; everything else (no rule) passes untouched.
    let mut e = Emulator::new(EmuConfig::default()).unwrap();
    let delays = [10u64, 50, 100, 150];
    for (rule, d) in delays.iter().enumerate() {
        let p = e
            .add_profile(EmuConfig {
                delay: Duration::from_millis(*d),
                loss: LossModel::periodic(0.01).unwrap(),
                rate_bps: Some(1_544_000),
                ..EmuConfig::default()
            })
            .unwrap();
        e.route(rule as u32, p).unwrap();
    }
    let mut pool = Pool::new(4096, 0);
    let mut rng = Rng::new(91);
    let mut dropped = Vec::new();
    let n = 40_000u64;
    let mut sent = [0u64; 5];
    let mut got = [0u64; 5];
    let mut last = 0u64;
    let mut now = 0u64;
    for i in 0..n {
        let t = i * 200_000; // 5000 pps, 1000 per session
        while let Some(w) = e.next_wakeup() {
            if w.0 > t {
                break;
            }
            now = now.max(w.0);
            let mut cx = Ctx::new(Instant(now), &mut pool, &mut rng, &mut dropped);
            while let Some(id) = e.dequeue(&mut cx) {
                let m = cx.pool.meta(id);
                let s = if m.rule == u16::MAX {
                    4
                } else {
                    m.rule as usize
                };
                let delay = now - m.arrival.0;
                if s < 4 {
                    // 100-byte frames at T1: 518 ns of serialisation, rounded up.
                    assert!(delay >= delays[s] * 1_000_000 + 518_134, "{s}: {delay}");
                    assert!(delay <= delays[s] * 1_000_000 + 518_135, "{s}: {delay}");
                } else {
                    assert_eq!(delay, 0);
                }
                assert!(now >= last);
                last = now;
                got[s] += 1;
                cx.pool.free(id);
            }
        }
        now = now.max(t);
        let mut cx = Ctx::new(Instant(now), &mut pool, &mut rng, &mut dropped);
        let id = cx.pool.alloc().unwrap();
        let m = cx.pool.meta_mut(id);
        m.len = 100;
        m.arrival = Instant(now);
        let s = (i % 5) as usize;
        m.rule = if s == 4 { u16::MAX } else { s as u16 };
        sent[s] += 1;
        if e.enqueue(id, &mut cx).is_err() {
            cx.pool.free(id);
        }
        e.check().unwrap();
    }
    while let Some(w) = e.next_wakeup() {
        let mut cx = Ctx::new(w, &mut pool, &mut rng, &mut dropped);
        while let Some(id) = e.dequeue(&mut cx) {
            let m = cx.pool.meta(id);
            got[if m.rule == u16::MAX {
                4
            } else {
                m.rule as usize
            }] += 1;
            cx.pool.free(id);
        }
    }
    for s in 0..4 {
        assert_eq!(got[s], sent[s] - sent[s] / 100, "session {s}");
        assert_eq!(
            e.profile(s + 1).unwrap().counters().lost.packets,
            sent[s] / 100
        );
    }
    assert_eq!(got[4], sent[4]);
    e.check().unwrap();
    assert_eq!(e.total().dequeued.packets, got.iter().sum::<u64>());
    assert_eq!(pool.in_use(), 0);
}
