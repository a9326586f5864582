//! Tests of three-colour RED: the averaging modes, forced, early and tail drops per
//! colour, byte mode, idle ageing per level, seed 001's Table 1, validation, occupancy
//! under random traffic, and ECN marking per colour.

use super::*;
use crate::pool::Pool;
use crate::qdisc::Counted;
use crate::queue::red::tests::{drive_ecn, ecn_pkt, frame_bytes, Frame, SLOT};
use crate::rng::Rng;
use crate::time::Duration;
use std::collections::VecDeque;

const G: Color = Color::Green;
const Y: Color = Color::Yellow;
const R: Color = Color::Red;

fn prof(min_th: f64, max_th: f64, max_p: f64) -> DropProfile {
    DropProfile {
        min_th,
        max_th,
        max_p,
    }
}

/// Packet mode, not gentle, s = 1 ms.
fn params(averaging: GredAveraging, p: [DropProfile; 3], wq: f64) -> GredParams {
    GredParams {
        green: p[0],
        yellow: p[1],
        red: p[2],
        wq,
        gentle: false,
        mode: RedMode::Packets,
        idle_pkt_ns: 1_000_000,
        averaging,
        ecn: false,
    }
}

/// A queue of at most 100 packets, unlimited bytes.
fn queue(averaging: GredAveraging, p: [DropProfile; 3], wq: f64) -> GredQueue {
    GredQueue::new(params(averaging, p, wq), 100, u64::MAX).unwrap()
}

/// Thresholds (packets) far above anything the tests hold: RED never drops.
const HIGH: [DropProfile; 3] = [DropProfile {
    min_th: 50.0,
    max_th: 100.0,
    max_p: 0.1,
}; 3];

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn pkt(pool: &mut Pool, len: u32, color: Color) -> PktId {
    let id = pool.alloc().expect("pool");
    let m = pool.meta_mut(id);
    m.len = len;
    m.color = color;
    id
}

/// Offer a packet; a refused one goes back to the pool.
fn offer(q: &mut impl Qdisc, cx: &mut Ctx<'_>, len: u32, color: Color) -> Result<(), DropCause> {
    let id = pkt(cx.pool, len, color);
    let r = q.enqueue(id, cx);
    if r.is_err() {
        cx.pool.free(id);
    }
    r
}

fn avgs(q: &GredQueue) -> [f64; 3] {
    COLORS.map(|c| q.avg(c))
}

#[test]
fn averages_coupled_separate_single() {
    // wq = 1/2, one-packet arrivals G, Y, R, G, no departures, no drops. Level j's
    // average is updated by the arrivals of the colours it counts, with the size q of
    // those colours held before the arrival: avg = avg / 2 + q / 2.
    // Coupled (green: G; yellow: G+Y; red: all):
    //   G: green, yellow, red see q = 0          -> [0,   0,    0]
    //   Y: yellow q = 1 -> 0.5; red q = 1 -> 0.5 -> [0,   0.5,  0.5]
    //   R: red q = 2 -> 0.25 + 1 = 1.25          -> [0,   0.5,  1.25]
    //   G: green q = 1 -> 0.5; yellow q = 2 -> 0.25 + 1 = 1.25;
    //      red q = 3 -> 0.625 + 1.5 = 2.125      -> [0.5, 1.25, 2.125]
    // Separate (each colour its own): only the last G sees q = 1 of its colour.
    // Single (one average over all, every arrival): q = 0, 1, 2, 3 -> 0, 0.5, 1.25, 2.125.
    let cases = [
        (
            GredAveraging::Coupled,
            [
                [0.0, 0.0, 0.0],
                [0.0, 0.5, 0.5],
                [0.0, 0.5, 1.25],
                [0.5, 1.25, 2.125],
            ],
        ),
        (
            GredAveraging::Separate,
            [[0.0; 3], [0.0; 3], [0.0; 3], [0.5, 0.0, 0.0]],
        ),
        (
            GredAveraging::Single,
            [[0.0; 3], [0.5; 3], [1.25; 3], [2.125; 3]],
        ),
    ];
    for (averaging, want) in cases {
        let mut q = queue(averaging, HIGH, 0.5);
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for (color, want) in [G, Y, R, G].into_iter().zip(want) {
            offer(&mut q, &mut cx, 100, color).unwrap();
            assert_eq!(avgs(&q), want, "{averaging:?} after {color:?}");
        }
    }
}

#[test]
fn forced_drops_per_colour() {
    // wq = 1: every average is the size it counts. Narrow bands so that nothing is
    // probabilistic: at avg = min_th p_b = 0 (accept), at max_th forced.
    // green 8/9, yellow 4/5, red 2/3 packets.
    let prof3 = [
        prof(8.0, 9.0, 0.1),
        prof(4.0, 5.0, 0.1),
        prof(2.0, 3.0, 0.1),
    ];
    let ok = Ok(());
    let forced = Err(DropCause::RedForced);
    // After 8 green packets (green sees 0..7 < 8, accepted):
    // Coupled/Single: red sees 8 >= 3 and yellow 8 >= 5: forced; green sees 8 = min_th:
    // accepted; then 9 = max_th: forced.
    // Separate: red and yellow see none of their colour (0 < min_th): accepted; green as
    // above.
    let cases = [
        (GredAveraging::Coupled, [forced, forced, ok, forced]),
        (GredAveraging::Single, [forced, forced, ok, forced]),
        (GredAveraging::Separate, [ok, ok, ok, forced]),
    ];
    for (averaging, want) in cases {
        let mut q = queue(averaging, prof3, 1.0);
        let mut pool = Pool::new(32, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for _ in 0..8 {
            offer(&mut q, &mut cx, 100, G).unwrap();
        }
        for (color, want) in [R, Y, G, G].into_iter().zip(want) {
            assert_eq!(
                offer(&mut q, &mut cx, 100, color),
                want,
                "{averaging:?} {color:?}"
            );
        }
        let s = q.stats();
        let pk = |c: Count| c.packets;
        assert_eq!(pk(s.green.arrived), 10);
        assert_eq!(pk(s.green.forced), 1);
        assert_eq!(pk(s.green.early) + pk(s.green.tail), 0);
        assert_eq!(q.held(G).packets, 9);
        let coupled = averaging != GredAveraging::Separate;
        for c in [Y, R] {
            let cs = s.color(c);
            assert_eq!(pk(cs.arrived), 1);
            assert_eq!(pk(cs.forced), coupled as u64, "{averaging:?} {c:?}");
            assert_eq!(q.held(c).packets, !coupled as u64);
            assert_eq!(cs.forced.bytes, 100 * coupled as u64);
        }
    }
}

#[test]
fn byte_mode() {
    // Coupled, bytes (mean_pkt 1000), wq = 1/2; red 1000/2000 bytes, others far above.
    //   G 1000 B: all levels see 0                        -> [0, 0, 0]
    //   Y  500 B: yellow and red see 1000 B -> 500        -> [0, 500, 500]
    //   R 1500 B: red sees 1500 -> 250 + 750 = 1000 = min_th: p_b = 0, accepted
    //   R  100 B: red sees 3000 -> 500 + 1500 = 2000 = max_th: forced
    let p = GredParams {
        mode: RedMode::Bytes { mean_pkt: 1000 },
        ..params(
            GredAveraging::Coupled,
            [
                prof(1e6, 2e6, 0.1),
                prof(1e6, 2e6, 0.1),
                prof(1000.0, 2000.0, 0.1),
            ],
            0.5,
        )
    };
    let mut q = GredQueue::new(p, 100, 1_000_000_000).unwrap();
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    offer(&mut q, &mut cx, 1000, G).unwrap();
    offer(&mut q, &mut cx, 500, Y).unwrap();
    assert_eq!(avgs(&q), [0.0, 500.0, 500.0]);
    offer(&mut q, &mut cx, 1500, R).unwrap();
    assert_eq!(avgs(&q), [0.0, 500.0, 1000.0]);
    assert_eq!(offer(&mut q, &mut cx, 100, R), Err(DropCause::RedForced));
    assert_eq!(avgs(&q), [0.0, 500.0, 2000.0]);
    let held = COLORS.map(|c| (q.held(c).packets, q.held(c).bytes));
    assert_eq!(held, [(1, 1000), (1, 500), (1, 1500)]);
    assert_eq!(
        q.stats().red.forced,
        Count {
            packets: 1,
            bytes: 100
        }
    );
    // p_b in the band is RED's byte-mode p_b: at avg 1500, 0.1 * 500 / 1000 = 0.05,
    // times len / mean_pkt = 500 / 1000.
    assert!(close(p.red_params(R).p_b(1500.0, 500), 0.025, 1e-15));
}

#[test]
fn idle_ageing_per_level() {
    // Coupled, wq = 1/2, s = 1 ms. At t = 0: G, G, Y arrive:
    //   G: all see 0 -> [0, 0, 0]; G: all see 1 -> [0.5, 0.5, 0.5];
    //   Y: yellow and red see 2 -> 0.25 + 1 = 1.25     -> [0.5, 1.25, 1.25]
    // Departures: G at 10 ms, G at 10 ms (no green left: green idle from 10 ms),
    // Y at 12 ms (queue empty: yellow and red idle from 12 ms).
    // G at 13 ms ages each level over its own idle time, m = idle / s:
    //   green m = 3: 0.5 / 8 = 0.0625; yellow, red m = 1: 1.25 / 2 = 0.625.
    let mut q = queue(GredAveraging::Coupled, HIGH, 0.5);
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for c in [G, G, Y] {
        offer(&mut q, &mut cx, 100, c).unwrap();
    }
    assert_eq!(avgs(&q), [0.5, 1.25, 1.25]);
    let ms = |n: u64| Instant::ZERO + Duration::from_millis(n);
    let idle = |q: &GredQueue| q.state.map(|s| s.idle_since);
    for (t, want) in [
        (10, [None, None, None]),
        (10, [Some(ms(10)), None, None]),
        (12, [Some(ms(10)), Some(ms(12)), Some(ms(12))]),
    ] {
        cx.now = ms(t);
        let id = q.dequeue(&mut cx).unwrap();
        cx.pool.free(id);
        assert_eq!(idle(&q), want, "t = {t} ms");
    }
    cx.now = ms(13);
    assert_eq!(
        q.dequeue(&mut cx),
        None,
        "finding the queue empty keeps the starts"
    );
    assert_eq!(idle(&q)[0], Some(ms(10)));
    offer(&mut q, &mut cx, 100, G).unwrap();
    assert_eq!(avgs(&q), [0.0625, 0.625, 0.625]);
    assert_eq!(idle(&q), [None; 3]);

    // Separate: a colour's level is idle while it holds nothing, even with the queue
    // busy. R, R, G at 0 (red: 0 then 0.5); both R leave at 1 ms (G stays), so red is
    // idle from 1 ms; R at 5 ms: 0.5 * 2^-4 = 0.03125.
    let mut q = queue(GredAveraging::Separate, HIGH, 0.5);
    cx.now = Instant::ZERO;
    for c in [R, R, G] {
        offer(&mut q, &mut cx, 100, c).unwrap();
    }
    assert_eq!(q.avg(R), 0.5);
    cx.now = ms(1);
    for _ in 0..2 {
        let id = q.dequeue(&mut cx).unwrap();
        cx.pool.free(id);
    }
    assert_eq!(idle(&q), [None, Some(ms(1)), Some(ms(1))]);
    assert_eq!(Qdisc::len(&q), 1);
    cx.now = ms(5);
    offer(&mut q, &mut cx, 100, R).unwrap();
    assert_eq!(q.avg(R), 0.03125);
}

#[test]
fn counts_after_dequeue_and_purge_in_order() {
    let mut q = queue(GredAveraging::Coupled, HIGH, 0.002);
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let ids: Vec<_> = [(100, G), (200, Y), (300, R), (400, G)]
        .into_iter()
        .map(|(len, c)| {
            let id = pkt(cx.pool, len, c);
            q.enqueue(id, &mut cx).unwrap();
            id
        })
        .collect();
    let held = |q: &GredQueue| COLORS.map(|c| (q.held(c).packets, q.held(c).bytes));
    assert_eq!(held(&q), [(2, 500), (1, 200), (1, 300)]);
    assert_eq!((Qdisc::len(&q), Qdisc::bytes(&q)), (4, 1000));
    // The head leaves first whatever its colour.
    assert_eq!(q.dequeue(&mut cx), Some(ids[0]));
    assert_eq!(held(&q), [(1, 400), (1, 200), (1, 300)]);
    q.purge(&mut cx, DropCause::Shutdown);
    assert_eq!(held(&q), [(0, 0); 3]);
    assert_eq!((Qdisc::len(&q), Qdisc::bytes(&q)), (0, 0));
    assert!(q.state.iter().all(|s| s.is_idle()));
    let want: Vec<_> = ids[1..].iter().map(|&i| (i, DropCause::Shutdown)).collect();
    assert_eq!(dropped, want);
}

#[test]
fn tail_drops_per_colour() {
    // Only the hard limits drop: 3 packets / 2500 bytes.
    let high = params(GredAveraging::Coupled, HIGH, 0.002);
    assert!(
        GredQueue::new(high, 3, 2500).is_err(),
        "HIGH is above a 3-packet limit"
    );
    // max_th = the limit is allowed; wq = 1e-9 keeps every average near 0.
    let p = params(GredAveraging::Coupled, [prof(2.0, 3.0, 0.1); 3], 1e-9);
    let mut q = GredQueue::new(p, 3, 2500).unwrap();
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    offer(&mut q, &mut cx, 1000, G).unwrap();
    offer(&mut q, &mut cx, 1000, Y).unwrap();
    assert_eq!(offer(&mut q, &mut cx, 1000, R), Err(DropCause::ByteLimit));
    offer(&mut q, &mut cx, 500, R).unwrap();
    assert_eq!(offer(&mut q, &mut cx, 1, G), Err(DropCause::QueueFull));
    let s = q.stats();
    assert_eq!(
        s.red.tail,
        Count {
            packets: 1,
            bytes: 1000
        }
    );
    assert_eq!(
        s.green.tail,
        Count {
            packets: 1,
            bytes: 1
        }
    );
    assert_eq!(s.yellow.dropped(), Count::default());
    assert!(close(s.red.drop_fraction(), 0.5, 0.0));
    assert_eq!(ColorStats::default().drop_fraction(), 0.0);
}

/// Per-colour long-run drop fraction at constant averages, colours interleaved.
///
/// Coupled, averages pinned (wq = 1e-12: over 600 000 arrivals they move by < 1e-5):
/// green 4 (below its min_th 5: never dropped), yellow 10 with 5/15/0.04
/// (p_b = 0.04 * 5/10 = 0.02), red 10 with 5/15/0.1 (p_b = 0.05). Arrivals cycle
/// G, Y, R. Each colour keeps its own count, so each sees RED's renewal process (see
/// red/mod.rs): the gap between its drops is uniform on {1 .. 1/p_b} and its drop fraction is
/// 2 p_b / (1 + p_b): yellow 0.04/1.02 = 0.0392157, red 0.1/1.05 = 0.0952381. A count
/// shared between colours would break both. Tolerance 4 binomial standard deviations
/// over n = 200 000 arrivals per colour (0.00174 and 0.00262); the seed is fixed.
#[test]
fn long_run_drop_fraction_per_colour() {
    let p = params(
        GredAveraging::Coupled,
        [
            prof(5.0, 15.0, 0.1),
            prof(5.0, 15.0, 0.04),
            prof(5.0, 15.0, 0.1),
        ],
        1e-12,
    );
    let mut q = GredQueue::new(p, 1000, u64::MAX).unwrap();
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(0x5eed);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for c in [G, Y, R, G, Y, R, G, Y, R, G] {
        offer(&mut q, &mut cx, 1000, c).unwrap();
    }
    for (i, avg) in [4.0, 10.0, 10.0].into_iter().enumerate() {
        q.state[i].avg = avg;
    }
    let n = 200_000u64;
    let (mut gap, mut max_gap) = ([0u64; 3], [0u64; 3]);
    for i in 0..n {
        cx.now = Instant(i * 1000);
        for c in [G, Y, R] {
            let k = index(c);
            gap[k] += 1;
            match offer(&mut q, &mut cx, 1000, c) {
                Ok(()) => {
                    let out = q.dequeue(&mut cx).unwrap();
                    cx.pool.free(out);
                }
                Err(cause) => {
                    assert_eq!(cause, DropCause::RedEarly);
                    max_gap[k] = max_gap[k].max(gap[k]);
                    gap[k] = 0;
                }
            }
        }
    }
    assert!(close(q.avg(Y), 10.0, 1e-4) && close(q.avg(R), 10.0, 1e-4));
    assert!(q.avg(G) < 5.0);
    let s = q.stats();
    assert_eq!(s.green.dropped().packets, 0);
    for (c, pb, gap_bound) in [(Y, 0.02, 50), (R, 0.05, 20)] {
        let cs = s.color(c);
        assert_eq!(cs.arrived.packets, n + 3, "3 of each in the pre-fill");
        let r = 2.0 * pb / (1.0 + pb);
        let tol = 4.0 * (r * (1.0 - r) / n as f64).sqrt();
        let frac = cs.early.packets as f64 / n as f64;
        assert!(close(frac, r, tol), "{c:?}: {frac} vs {r} +- {tol}");
        assert_eq!(max_gap[index(c)], gap_bound, "{c:?}: gaps bounded by 1/p_b");
    }
}

/// Seed 001's Table 1 under overload: green is dropped by RED only once its own
/// average reaches its min_th, while red and yellow are dropped first.
///
/// 1500-byte packets, 50% green, 30% yellow, 20% red. Phase 1: arrivals on 55% of
/// steps, departures on the rest, so 18% of arrivals must go: fewer than the red ones.
/// Red's band drops at most 2 max_p / (1 + max_p) = 18% of red, so the total average
/// hovers around red's max_th (22 500 bytes, 15 packets) and red is mostly forced. The
/// green + yellow average (about 80% of it) only touches yellow's min_th (22 500) on
/// the swings of a queue that is near critical load, so yellow loses a few; the green
/// average (about half) stays far below green's min_th (45 000): no green RED drop.
/// Phase 2: 70% arrivals, 57% must go, more than red + yellow: green is dropped too,
/// and only at avg_green >= 45 000 (checked at every green drop). Tail drops of any
/// colour (the byte limit, while the slow average catches up at the phase change) are
/// the FIFO's and not counted here. The seeds are fixed; the margins are wide.
#[test]
fn seed001_table1_green_protected() {
    let link = Rate::from_bps(3_000_000);
    let p = GredParams::seed001_table1(GredParams::SEED001_QUEUE_BYTES, link, 1500);
    let q = GredQueue::new(p, Limits::UNLIMITED_PACKETS, 120_000).unwrap();
    let mut q = Counted::new(Box::new(q));
    let mut pool = Pool::new(256, 0);
    let mut rng = Rng::new(2001);
    let mut drive = Rng::new(7);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let mut red_drops = [0u64; 3];
    let mut phase1 = None;
    for i in 0..200_000u64 {
        cx.now = Instant(i * 1_000_000);
        let arrive = if i < 100_000 { 0.55 } else { 0.7 };
        if drive.chance(arrive) {
            let c = COLORS[[0, 0, 0, 0, 0, 1, 1, 1, 2, 2][drive.below(10) as usize]];
            let r = offer(&mut q, &mut cx, 1500, c);
            if let Err(DropCause::RedEarly | DropCause::RedForced) = r {
                red_drops[index(c)] += 1;
                if c == G {
                    assert!(q.inner.avg(G) >= p.green.min_th, "{}", q.inner.avg(G));
                }
            }
        } else if let Some(id) = q.dequeue(&mut cx) {
            cx.pool.free(id);
        }
        if i == 99_999 {
            phase1 = Some(red_drops);
        }
    }
    q.check().unwrap();
    let phase1 = phase1.unwrap();
    assert_eq!(phase1[0], 0, "green RED drops in phase 1");
    // Yellow arrives 1.5 times as often as red (about 16 500 vs 11 000 in phase 1).
    assert!(phase1[1] * 4 < phase1[2], "{phase1:?}");
    assert!(phase1[2] > 5000, "{phase1:?}");
    assert!(red_drops[0] > 1000, "{red_drops:?}");
    let s = q.inner.stats();
    let f = [s.green, s.yellow, s.red].map(|c| c.drop_fraction());
    assert!(f[0] < f[1] && f[1] < f[2], "{f:?}");
    // Per-colour counters add up to the wrapper's.
    let sum = |g: fn(&ColorStats) -> Count| g(&s.green) + g(&s.yellow) + g(&s.red);
    assert_eq!(sum(|c| c.arrived), q.stats.received);
    assert_eq!(sum(|c| c.early), q.stats.drops_by(DropCause::RedEarly));
    assert_eq!(sum(|c| c.forced), q.stats.drops_by(DropCause::RedForced));
    let tail = q.stats.drops_by(DropCause::QueueFull) + q.stats.drops_by(DropCause::ByteLimit);
    assert_eq!(sum(|c| c.tail), tail);
}

#[test]
fn seed001_table1_values() {
    // Table 1 with L = 120 000 bytes: 0.375 L = 45 000, 0.75 L = 90 000,
    // 0.1875 L = 22 500, 0.0875 L = 10 500; s = 1500 bytes at 3 Mbit/s = 4 ms.
    let link = Rate::from_bps(3_000_000);
    let p = GredParams::seed001_table1(GredParams::SEED001_QUEUE_BYTES, link, 1500);
    let t = |c| {
        let d: &DropProfile = p.profile(c);
        (d.min_th, d.max_th, d.max_p)
    };
    assert_eq!(t(G), (45_000.0, 90_000.0, 0.02));
    assert_eq!(t(Y), (22_500.0, 45_000.0, 0.05));
    assert_eq!(t(R), (10_500.0, 22_500.0, 0.1));
    assert_eq!(
        (p.wq, p.gentle, p.averaging),
        (0.002, false, GredAveraging::Coupled)
    );
    assert_eq!(p.mode, RedMode::Bytes { mean_pkt: 1500 });
    assert_eq!(p.idle_pkt_ns, link.tx_ns(1500));
    assert!(p.idle_pkt_ns.abs_diff(4_000_000) <= 1, "{}", p.idle_pkt_ns);
    assert_eq!(p.validate(Limits::UNLIMITED_PACKETS, 120_000), Ok(vec![]));
    // tc's reading of "120kb" (122 880 bytes): still whole bytes.
    let k = GredParams::seed001_table1(122_880, link, 1514);
    assert_eq!(
        [k.green, k.yellow, k.red].map(|d| (d.min_th, d.max_th)),
        [
            (46_080.0, 92_160.0),
            (23_040.0, 46_080.0),
            (10_752.0, 23_040.0)
        ]
    );
    // The red profile is RED's with the shared fields.
    let r = p.red_params(R);
    assert_eq!(
        (r.min_th, r.max_th, r.max_p, r.wq),
        (10_500.0, 22_500.0, 0.1, 0.002)
    );
    assert_eq!(
        (r.mode, r.idle_pkt_ns, r.gentle),
        (p.mode, p.idle_pkt_ns, false)
    );
}

#[test]
fn validation_messages_and_warnings() {
    let ok = GredParams::seed001_table1(120_000, Rate::from_bps(3_000_000), 1500);
    let bad = |f: &dyn Fn(&mut GredParams), limit_bytes: u64, needle: &str| {
        let mut p = ok;
        f(&mut p);
        let e = p.validate(10, limit_bytes).unwrap_err();
        assert!(e.contains(needle), "{e} lacks {needle}");
        assert!(GredQueue::new(p, 10, limit_bytes).is_err());
    };
    bad(
        &|p| p.green.max_th = p.green.min_th,
        120_000,
        "gred green: max_th",
    );
    bad(
        &|p| p.yellow.min_th = f64::NAN,
        120_000,
        "gred yellow: min_th",
    );
    bad(&|p| p.red.max_p = 0.0, 120_000, "gred red: max_p");
    bad(&|p| p.red.max_p = 1.01, 120_000, "gred red: max_p");
    bad(&|p| p.wq = 0.0, 120_000, "gred: wq");
    bad(&|p| p.idle_pkt_ns = 0, 120_000, "idle_pkt_ns");
    bad(
        &|p| p.mode = RedMode::Bytes { mean_pkt: 0 },
        120_000,
        "mean_pkt",
    );
    // Above the queue limit, in the mode's unit: bytes here.
    bad(
        &|_| {},
        80_000,
        "gred green: max_th (90000) is above the queue limit (80000 bytes)",
    );
    bad(
        &|p| p.green.max_th = 120_001.0,
        120_000,
        "gred green: max_th",
    );
    // Packets: a 10-packet limit against the packet thresholds.
    let pk = params(GredAveraging::Coupled, [prof(5.0, 10.0, 0.1); 3], 0.002);
    assert_eq!(pk.validate(10, 0), Ok(vec![]));
    let e = GredParams {
        red: prof(5.0, 11.0, 0.1),
        ..pk
    }
    .validate(10, u64::MAX);
    assert!(e
        .unwrap_err()
        .contains("gred red: max_th (11) is above the queue limit (10 packets)"));
    // Out of precedence order: legal, with a warning per parameter and pair.
    let swapped = GredParams {
        green: ok.red,
        red: ok.green,
        ..ok
    };
    let w = swapped.validate(10, 120_000).unwrap();
    // one warning per pair of neighbouring colours, at the first average where the
    // curves cross: just below 22 500 bytes green (10 500..22 500, max_p 0.1) is at
    // 0.1 while yellow (22 500..45 000) has not started
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(w[0].starts_with(
        "gred: at an average of 22500 bytes green packets would be dropped with \
         probability 0.100, yellow ones with 0.000"
    ));
    assert!(w[1].contains("yellow packets would be dropped with probability 0.050, red"));
    assert!(w.iter().all(|s| s.contains("RFC 2597")));
    assert!(GredQueue::new(swapped, 10, 120_000).is_ok());
    // seed 004's TRIO: green max_p 1 above yellow's 0.5, but green starts at 160 of
    // 200 packets where yellow is already forced: never dropped more often
    let trio = params(
        GredAveraging::Coupled,
        [
            prof(160.0, 200.0, 1.0),
            prof(40.0, 160.0, 0.5),
            prof(1.0, 40.0, 1.0),
        ],
        0.002,
    );
    assert_eq!(trio.validate(200, u64::MAX), Ok(vec![]));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// Per-colour occupancy equals what the queue holds after every call, packets leave
    /// in arrival order, and the per-colour counters obey
    /// `arrived = accepted + early + forced + tail`.
    #[test]
    fn occupancy_matches_contents(
        averaging in proptest::sample::select(vec![
            GredAveraging::Coupled,
            GredAveraging::Separate,
            GredAveraging::Single,
        ]),
        bytes in proptest::bool::ANY,
        wq in proptest::sample::select(vec![1.0, 0.5, 0.002]),
        seed in 0u64..1000,
        ops in proptest::collection::vec((0u8..20, 0usize..3, 40u32..1600), 1..300),
    ) {
        let scale = if bytes { 1000.0 } else { 1.0 };
        let profs = [(6.0, 12.0, 0.2), (3.0, 6.0, 0.3), (1.0, 3.0, 0.5)]
            .map(|(a, b, p)| prof(a * scale, b * scale, p));
        let p = GredParams {
            mode: if bytes { RedMode::Bytes { mean_pkt: 1000 } } else { RedMode::Packets },
            gentle: seed % 2 == 0,
            ..params(averaging, profs, wq)
        };
        let mut q = Counted::new(Box::new(GredQueue::new(p, 20, 16_000).unwrap()));
        let mut pool = Pool::new(64, 0);
        let mut rng = Rng::new(seed);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mut model: VecDeque<(PktId, usize, u32)> = VecDeque::new();
        let mut accepted = [0u64; 3];
        for (op, c, len) in ops {
            cx.now += Duration::from_micros(len as u64);
            match op {
                0..=10 => {
                    let id = pkt(cx.pool, len, COLORS[c]);
                    match q.enqueue(id, &mut cx) {
                        Ok(()) => {
                            model.push_back((id, c, len));
                            accepted[c] += 1;
                        }
                        Err(_) => cx.pool.free(id),
                    }
                }
                11..=18 => {
                    let got = q.dequeue(&mut cx);
                    proptest::prop_assert_eq!(got, model.pop_front().map(|m| m.0));
                    if let Some(id) = got {
                        cx.pool.free(id);
                    }
                }
                _ => {
                    q.purge(&mut cx, DropCause::Shutdown);
                    let got: Vec<_> = cx.dropped.drain(..).map(|d| d.0).collect();
                    let want: Vec<_> = model.drain(..).map(|m| m.0).collect();
                    proptest::prop_assert_eq!(&got, &want);
                    for id in got {
                        cx.pool.free(id);
                    }
                }
            }
            let g: &GredQueue = &q.inner;
            for (k, &color) in COLORS.iter().enumerate() {
                let mine = model.iter().filter(|m| m.1 == k);
                let want = Count {
                    packets: mine.clone().count() as u64,
                    bytes: mine.map(|m| m.2 as u64).sum(),
                };
                proptest::prop_assert_eq!(g.held(color), want);
                let s = g.stats().color(color);
                proptest::prop_assert_eq!(
                    s.arrived.packets,
                    accepted[k] + s.dropped().packets
                );
                proptest::prop_assert!(g.avg(color).is_finite() && g.avg(color) >= 0.0);
            }
            proptest::prop_assert_eq!(Qdisc::len(g), model.len());
            proptest::prop_assert_eq!(
                Qdisc::bytes(g),
                model.iter().map(|m| m.2 as u64).sum::<u64>()
            );
            proptest::prop_assert!(q.check().is_ok());
        }
        for (id, _, _) in model {
            cx.pool.free(id);
        }
    }
}

/// Per colour, RED's ECN rule (Coupled, 5/15/0.1 for every colour, averages pinned by
/// `wq` = 1e-12): green at avg 4 (below min_th: no signal), yellow at avg 10 (p_b = 0.1 ·
/// 5/10 = 0.05; count 100, so (count + 1) p_b > 1 and p_a = 1: an early decision), red at
/// avg 20 (above max_th: forced). An ECT yellow packet is marked and enqueued, a not-ECT
/// one dropped, an unreadable one enqueued unchanged; an ECT red one is dropped; an ECT
/// green one passes unmarked. Without `ecn` the ECT yellow packet is dropped.
#[test]
fn ecn_per_colour() {
    use weir_wire::ip::ecn::{CE, ECT0, NOT_ECT};
    let p = GredParams {
        ecn: true,
        ..params(GredAveraging::Coupled, [prof(5.0, 15.0, 0.1); 3], 1e-12)
    };
    let mut pool = Pool::new(64, SLOT);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let mut q = GredQueue::new(p, 100, u64::MAX).unwrap();
    assert!(q.red.iter().all(|r| r.ecn), "every colour marks");
    for c in [G, Y, R] {
        let id = ecn_pkt(cx.pool, Frame::V4(NOT_ECT));
        cx.pool.meta_mut(id).color = c;
        q.enqueue(id, &mut cx).unwrap();
    }
    for (level, avg) in [4.0, 10.0, 20.0].into_iter().enumerate() {
        q.state[level].avg = avg;
    }
    let len = frame_bytes(Frame::V4(ECT0)).len() as u32;
    assert!(close(q.red[1].p_b(10.0, len), 0.05, 1e-9));
    let mut offer = |q: &mut GredQueue, f: Frame, c: Color| {
        q.state[1].count = 100;
        let id = ecn_pkt(cx.pool, f);
        cx.pool.meta_mut(id).color = c;
        let r = q.enqueue(id, &mut cx);
        let now = cx.pool.data(id).to_vec();
        if r.is_err() {
            cx.pool.free(id);
        }
        (r, now)
    };
    let cases = [
        (Frame::V4(ECT0), G, Ok(()), Frame::V4(ECT0)),
        (Frame::V4(ECT0), Y, Ok(()), Frame::V4(CE)),
        (Frame::V6(ECT0), Y, Ok(()), Frame::V6(CE)),
        (
            Frame::V4(NOT_ECT),
            Y,
            Err(DropCause::RedEarly),
            Frame::V4(NOT_ECT),
        ),
        (Frame::BadChecksum, Y, Ok(()), Frame::BadChecksum),
        (
            Frame::V4(ECT0),
            R,
            Err(DropCause::RedForced),
            Frame::V4(ECT0),
        ),
    ];
    for (f, c, want, after) in cases {
        let (r, now) = offer(&mut q, f, c);
        assert_eq!(r, want, "{f:?} {c:?}");
        assert_eq!(now, frame_bytes(after), "{f:?} {c:?}");
    }
    let s = *q.stats();
    let v6 = frame_bytes(Frame::V6(ECT0)).len() as u64;
    let one = |bytes: u64| Count { packets: 1, bytes };
    let two = Count {
        packets: 2,
        bytes: len as u64 + v6,
    };
    assert_eq!(s.yellow.marked, two);
    assert_eq!(s.yellow.unmarkable, one(len as u64));
    assert_eq!(s.yellow.early, one(len as u64));
    assert_eq!(s.red.forced, one(len as u64));
    assert_eq!(s.green.marked.packets + s.red.marked.packets, 0);
    // marks are accepted packets, not drops
    assert_eq!(s.yellow.arrived.packets, 1 + 4);
    assert_eq!(s.yellow.dropped().packets, 1);
    assert_eq!(q.held(Y).packets, 1 + 3);
    let want = AqmStats {
        ecn_marked: 2,
        unmarkable: 1,
        aqm_dropped: 2,
        ..AqmStats::default()
    };
    assert_eq!(q.aqm_stats(), Some(want));
    assert_eq!(s.total().arrived.packets, 3 + 6);

    // ECN off: the ECT yellow packet is dropped
    let mut off = GredQueue::new(
        params(GredAveraging::Coupled, [prof(5.0, 15.0, 0.1); 3], 1e-12),
        100,
        u64::MAX,
    )
    .unwrap();
    off.state[1].avg = 10.0;
    let (r, now) = offer(&mut off, Frame::V4(ECT0), Y);
    assert_eq!(
        (r, now),
        (Err(DropCause::RedEarly), frame_bytes(Frame::V4(ECT0)))
    );
    assert_eq!(off.stats().yellow.marked, Count::default());
}

/// Random traffic of every frame kind and colour through three-colour RED with ECN, in
/// each averaging mode: the per-colour counters add up to [`Counted`]'s and to the
/// [`AqmStats`] sums (`arrived = accepted + early + forced + tail`, marks among the
/// accepted), every frame leaves as it came or exactly marked CE.
#[test]
fn ecn_random_traffic_per_colour() {
    for (averaging, seed) in [
        (GredAveraging::Coupled, 1),
        (GredAveraging::Separate, 2),
        (GredAveraging::Single, 3),
    ] {
        let p = GredParams {
            ecn: true,
            gentle: seed % 2 == 0,
            ..params(
                averaging,
                [
                    prof(6.0, 12.0, 0.2),
                    prof(3.0, 6.0, 0.3),
                    prof(1.0, 3.0, 0.5),
                ],
                0.05,
            )
        };
        let q = drive_ecn(GredQueue::new(p, 20, 16_000).unwrap(), 0.6, 30_000, seed);
        let a = q.aqm_stats().unwrap();
        assert!(
            a.ecn_marked > 100 && a.unmarkable > 10,
            "{averaging:?}: {a:?}"
        );
        assert!(a.aqm_dropped > 100, "{averaging:?}: {a:?}");
        let (t, s) = (q.inner.stats().total(), &q.stats);
        assert_eq!(t.arrived, s.received);
        assert_eq!(t.early, s.drops_by(DropCause::RedEarly));
        assert_eq!(t.forced, s.drops_by(DropCause::RedForced));
        let tail = s.drops_by(DropCause::QueueFull) + s.drops_by(DropCause::ByteLimit);
        assert_eq!(t.tail, tail);
        assert_eq!(t.arrived, s.enqueued + t.dropped(), "marks are not drops");
        assert_eq!(t.marked.packets, a.ecn_marked);
        assert_eq!(t.unmarkable.packets, a.unmarkable);
        assert!((t.marked + t.unmarkable).packets <= s.enqueued.packets);
    }
}
