//! Tests of RED: the worked examples of p_b and p_a, the gentle band, byte mode, the EWMA
//! and idle ageing, the long-run drop rate, the queue's limits and counters; ECN marking
//! (and the frames and random traffic the ECN tests of three-colour RED and per-flow RED
//! share).

use super::*;
use crate::pool::{Color, Pool};
use crate::qdisc::Counted;
use crate::rng::mix64;
use crate::time::Duration;
use weir_wire::build::{self, EthSpec, Ipv4Spec, Ipv6Spec};
use weir_wire::checksum::checksum;
use weir_wire::ip::ecn::{CE, ECT0, ECT1, NOT_ECT};

fn params(min_th: f64, max_th: f64, max_p: f64, wq: f64) -> RedParams {
    RedParams {
        min_th,
        max_th,
        max_p,
        wq,
        gentle: false,
        mode: RedMode::Packets,
        idle_pkt_ns: 1_000_000,
        ecn: false,
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn pkt(pool: &mut Pool, len: u32) -> PktId {
    let id = pool.alloc().expect("pool");
    pool.meta_mut(id).len = len;
    id
}

#[test]
fn state_is_small() {
    assert!(core::mem::size_of::<RedState>() <= 32);
    let s = RedState::new();
    assert_eq!((s.avg, s.count, s.idle_since), (0.0, -1, None));
}

#[test]
fn p_b_and_p_a_worked_example() {
    let p = params(5.0, 15.0, 0.02, 0.002);
    // avg = 10: p_b = 0.02 * (10 - 5) / (15 - 5) = 0.01.
    assert!(close(p.p_b(10.0, 1500), 0.01, 1e-15));
    // count = 50: p_a = 0.01 / (1 - 50 * 0.01) = 0.02.
    assert!(close(RedParams::p_a(0.01, 50), 0.02, 1e-15));
    // count = 0: p_a = p_b; count = 98: 0.01 / 0.02 = 0.5; count >= 99: 1.
    assert!(close(RedParams::p_a(0.01, 0), 0.01, 1e-15));
    assert!(close(RedParams::p_a(0.01, 98), 0.5, 1e-12));
    assert_eq!(RedParams::p_a(0.01, 99), 1.0);
    assert_eq!(RedParams::p_a(0.01, 100), 1.0);
    assert_eq!(RedParams::p_a(0.01, 1_000_000), 1.0);
    assert_eq!(RedParams::p_a(0.0, 5), 0.0);
    assert_eq!(RedParams::p_a(0.01, -1), 0.01);
    // Below min_th: 0; at min_th: 0; just below max_th: ~max_p; at max_th: forced (1).
    assert_eq!(p.p_b(4.99, 100), 0.0);
    assert_eq!(p.p_b(5.0, 100), 0.0);
    assert!(close(p.p_b(14.999, 100), 0.02, 1e-5));
    assert_eq!(p.p_b(15.0, 100), 1.0);
    assert_eq!(p.forced_threshold(), 15.0);
}

#[test]
fn gentle_band() {
    let p = RedParams {
        gentle: true,
        ..params(5.0, 15.0, 0.02, 0.002)
    };
    // avg = 20, max_th = 15: p_b = 0.02 + 0.98 * 5 / 15 = 0.346666...
    assert!(close(p.p_b(20.0, 1), 0.02 + 0.98 * 5.0 / 15.0, 1e-15));
    assert!(close(p.p_b(20.0, 1), 0.346_666_666_666_666_7, 1e-12));
    assert!(close(p.p_b(15.0, 1), 0.02, 1e-15));
    assert!(close(p.p_b(29.999, 1), 1.0, 1e-4));
    assert_eq!(p.p_b(30.0, 1), 1.0);
    assert_eq!(p.forced_threshold(), 30.0);
    // Decisions: in the gentle band drops are early, at 2 max_th forced.
    let mut rng = Rng::new(3);
    let mut st = RedState {
        avg: 30.0,
        ..RedState::new()
    };
    assert_eq!(
        p.on_arrival(&mut st, 30, 0, 1, Instant::ZERO, &mut rng),
        Some(DropCause::RedForced)
    );
    let mut early = 0;
    for _ in 0..1000 {
        st.avg = 20.0;
        match p.on_arrival(&mut st, 20, 0, 1, Instant::ZERO, &mut rng) {
            Some(DropCause::RedEarly) => early += 1,
            None => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(early > 300, "{early}");
}

#[test]
fn byte_mode_scales_by_packet_size() {
    let p = RedParams {
        mode: RedMode::Bytes { mean_pkt: 1500 },
        ..params(7_500.0, 22_500.0, 0.02, 0.002)
    };
    p.validate().unwrap();
    // avg = 15000 bytes: base p_b = 0.02 * 7500 / 15000 = 0.01, times len / 1500.
    assert!(close(p.p_b(15_000.0, 1500), 0.01, 1e-15));
    assert!(close(p.p_b(15_000.0, 750), 0.005, 1e-15));
    assert!(close(p.p_b(15_000.0, 64), 0.01 * 64.0 / 1500.0, 1e-15));
    // Larger than the mean: more likely, clamped to 1.
    assert!(close(p.p_b(15_000.0, 3000), 0.02, 1e-15));
    assert_eq!(p.p_b(22_499.0, 1_000_000), 1.0);
    // The queue is measured in bytes: 10 packets of 1500 bytes held (15000 bytes).
    let mut st = RedState {
        avg: 15_000.0,
        ..RedState::new()
    };
    let mut rng = Rng::new(1);
    let _ = p.on_arrival(&mut st, 10, 15_000, 1500, Instant::ZERO, &mut rng);
    assert!(close(st.avg, 15_000.0, 1e-9));
    // floyd_bytes: thresholds in bytes.
    let fb = RedParams::floyd_bytes(Rate::from_bps(10_000_000), 1000);
    fb.validate().unwrap();
    assert_eq!((fb.min_th, fb.max_th), (5_000.0, 15_000.0));
    assert_eq!(fb.idle_pkt_ns, 800_000);
}

#[test]
fn ewma_converges_as_closed_form() {
    // Exact: wq = 1/2, q = 8 from avg = 0: 4, 6, 7 = 8 (1 - 2^-n).
    let p = params(100.0, 200.0, 0.1, 0.5);
    let mut st = RedState::new();
    let mut rng = Rng::new(1);
    for want in [4.0, 6.0, 7.0] {
        assert_eq!(
            p.on_arrival(&mut st, 8, 0, 100, Instant::ZERO, &mut rng),
            None
        );
        assert_eq!(st.avg, want);
    }
    // wq = 0.002, q = 10, n = 500: avg = 10 (1 - 0.998^500) = 6.3248874514...
    // (ln 0.998 = -0.00200200267; x 500 = -1.00100134; e^that = 0.36751125).
    let p = params(5.0, 15.0, 0.02, 0.002);
    let mut st = RedState::new();
    for n in 1..=500 {
        // The decision (including drops) does not affect avg; q is held at 10.
        let _ = p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng);
        let closed = 10.0 * (1.0 - 0.998f64.powi(n));
        assert!(close(st.avg, closed, 1e-9), "n={n}");
    }
    assert!(close(st.avg, 6.324_887_451, 1e-8), "{}", st.avg);
}

#[test]
fn idle_decay() {
    // wq = 1/2, s = 1 ms: after 3 ms idle, avg = 8 * (1/2)^3 = 1; after 2.5 ms,
    // 8 * 2^-2.5 = sqrt(2).
    let p = params(5.0, 15.0, 0.02, 0.5);
    let mut rng = Rng::new(1);
    let t0 = Instant(10_000_000);
    let mut st = RedState {
        avg: 8.0,
        ..RedState::new()
    };
    p.on_queue_empty(&mut st, t0);
    p.on_queue_empty(&mut st, t0 + Duration::from_millis(1)); // keeps the first start
    assert_eq!(st.idle_since, Some(t0));
    let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_millis(3), &mut rng);
    assert!(close(st.avg, 1.0, 1e-12), "{}", st.avg);
    assert_eq!(st.idle_since, None);
    let mut st = RedState {
        avg: 8.0,
        ..RedState::new()
    };
    p.on_queue_empty(&mut st, t0);
    let _ = p.on_arrival(
        &mut st,
        0,
        0,
        100,
        t0 + Duration::from_micros(2500),
        &mut rng,
    );
    assert!(
        close(st.avg, core::f64::consts::SQRT_2, 1e-12),
        "{}",
        st.avg
    );
    // Realistic: wq = 0.002, s = 1 ms, idle 1 s: avg = 10 * 0.998^1000 = 1.35064522...
    let p = params(5.0, 15.0, 0.02, 0.002);
    let mut st = RedState {
        avg: 10.0,
        ..RedState::new()
    };
    p.on_queue_empty(&mut st, t0);
    let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_secs(1), &mut rng);
    assert!(close(st.avg, 1.350_645_224_5, 1e-9), "{}", st.avg);
    // Not idle (no on_queue_empty): an arrival to an empty queue is one EWMA sample.
    let mut st = RedState {
        avg: 10.0,
        ..RedState::new()
    };
    let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_secs(1), &mut rng);
    assert!(close(st.avg, 9.98, 1e-12));
}

#[test]
fn red_queue_starts_idle_period_when_drained() {
    let p = params(5.0, 15.0, 0.02, 0.5);
    let mut q = RedQueue::new(p, 100, u64::MAX).unwrap();
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for _ in 0..2 {
        let id = pkt(cx.pool, 100);
        q.enqueue(id, &mut cx).unwrap();
    }
    q.state_mut().avg = 8.0;
    cx.now = Instant(10_000_000);
    let a = q.dequeue(&mut cx).unwrap();
    assert!(!q.state().is_idle(), "one packet still queued");
    let b = q.dequeue(&mut cx).unwrap();
    assert_eq!(q.state().idle_since, Some(Instant(10_000_000)));
    cx.pool.free(a);
    cx.pool.free(b);
    // Arrival 3 ms (3 s) later: avg = 8 / 8 = 1.
    cx.now = Instant(13_000_000);
    let id = pkt(cx.pool, 100);
    q.enqueue(id, &mut cx).unwrap();
    assert!(close(q.state().avg, 1.0, 1e-12), "{}", q.state().avg);
    assert!(!q.state().is_idle());
}

#[test]
fn count_resets_and_forced_drops() {
    let p = params(5.0, 15.0, 0.02, 0.002);
    let mut rng = Rng::new(5);
    let mut st = RedState {
        avg: 20.0,
        count: 17,
        idle_since: None,
    };
    assert_eq!(
        p.on_arrival(&mut st, 20, 0, 100, Instant::ZERO, &mut rng),
        Some(DropCause::RedForced)
    );
    assert_eq!(st.count, 0);
    st.avg = 1.0;
    assert_eq!(
        p.on_arrival(&mut st, 1, 0, 100, Instant::ZERO, &mut rng),
        None
    );
    assert_eq!(st.count, -1);
    // Entering the band: count becomes the number of unmarked arrivals.
    st.avg = 10.0;
    let mut undropped = 0;
    for _ in 0..10 {
        match p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng) {
            None => undropped += 1,
            Some(c) => {
                assert_eq!(c, DropCause::RedEarly);
                undropped = 0;
            }
        }
        assert_eq!(st.count, undropped);
    }
}

/// Statistical check of the count-based dropping at a constant average.
///
/// With `avg` held at 10 and min_th/max_th/max_p = 5/15/0.1, p_b = 0.1 * 5/10 = 0.05.
/// The n-th arrival after a drop is dropped with p_a(n-1) = p_b / (1 - (n-1) p_b), so
/// P(gap = n) = p_a(n-1) * prod_{i=0}^{n-2} (1 - p_a(i)). Since
/// 1 - p_a(i) = (1 - (i+1) p_b) / (1 - i p_b), the product telescopes to 1 - (n-1) p_b
/// and P(gap = n) = p_b for n = 1..N, N = 1/p_b = 20: the gap is uniform on {1..20},
/// E[gap] = (N+1)/2 = 10.5, and by renewal-reward the long-run drop fraction is
/// 1/E[gap] = 2 p_b / (1 + p_b) = 0.1/1.05 = 0.0952381 (not p_b, and not the 2 p_b
/// that Figure 2's increment-first pseudo-code would give).
/// Tolerance: 4 binomial standard deviations, 4 sqrt(r(1-r)/n) = 0.0026 for n = 200,000
/// (the renewal process has a smaller variance than binomial, so this is conservative).
fn expected_drop_fraction() -> (f64, f64, usize) {
    let pb = 0.05;
    let r = 2.0 * pb / (1.0 + pb);
    let n = 200_000usize;
    let tol = 4.0 * (r * (1.0 - r) / n as f64).sqrt();
    (r, tol, n)
}

#[test]
fn long_run_drop_rate_matches_formula() {
    let p = params(5.0, 15.0, 0.1, 0.002);
    assert!(close(p.p_b(10.0, 1), 0.05, 1e-15));
    let (r, tol, n) = expected_drop_fraction();
    let mut rng = Rng::new(0x5eed);
    let mut st = RedState {
        avg: 10.0,
        ..RedState::new()
    };
    let mut drops = 0usize;
    let mut max_gap = 0;
    let mut gap = 0;
    for _ in 0..n {
        gap += 1;
        match p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng) {
            Some(DropCause::RedEarly) => {
                drops += 1;
                max_gap = max_gap.max(gap);
                gap = 0;
            }
            None => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(close(st.avg, 10.0, 1e-9));
    let frac = drops as f64 / n as f64;
    assert!(
        close(frac, r, tol),
        "drop fraction {frac}, expected {r} +- {tol}"
    );
    assert_eq!(max_gap, 20, "gaps are bounded by 1/p_b");
}

#[test]
fn red_queue_statistics_and_identities() {
    // Queue held at 10 packets on every arrival: an accepted arrival is followed by one
    // departure. avg starts at 10, so it stays there (see expected_drop_fraction).
    let p = params(5.0, 15.0, 0.1, 0.002);
    let (r, tol, n) = expected_drop_fraction();
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(42);
    let mut dropped = Vec::new();
    let mut q = Counted::new(Box::new(RedQueue::new(p, 1000, u64::MAX).unwrap()));
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        // Pre-fill (avg stays far below min_th, so RED accepts), then pin avg at 10.
        for _ in 0..10 {
            let id = pkt(cx.pool, 1000);
            q.enqueue(id, &mut cx).unwrap();
        }
        q.inner.state_mut().avg = 10.0;
        for i in 0..n {
            cx.now = Instant(i as u64 * 1000);
            let id = pkt(cx.pool, 1000);
            match q.enqueue(id, &mut cx) {
                Ok(()) => {
                    let out = q.dequeue(&mut cx).unwrap();
                    cx.pool.free(out);
                }
                Err(_) => cx.pool.free(id),
            }
            assert_eq!(Qdisc::len(&q), 10);
        }
    }
    q.check().unwrap();
    let s = &q.stats;
    assert_eq!(s.received.packets, n as u64 + 10);
    let early = s.drops_by(DropCause::RedEarly).packets as f64 / n as f64;
    assert!(close(early, r, tol), "{early} vs {r} +- {tol}");
    assert_eq!(s.drops_by(DropCause::RedForced).packets, 0);
    assert_eq!(s.drops_by(DropCause::QueueFull).packets, 0);
    assert_eq!(s.dropped_later.packets, 0);
    assert!(dropped.is_empty());
}

#[test]
fn counter_identities_with_all_causes() {
    let p = RedParams {
        gentle: true,
        ..params(4.0, 8.0, 0.1, 0.05)
    };
    let mut pool = Pool::new(128, 0);
    let mut rng = Rng::new(9);
    let mut dropped = Vec::new();
    let mut drive = Rng::new(10);
    let mut q = Counted::new(Box::new(RedQueue::new(p, 20, 12_000).unwrap()));
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for i in 0..50_000u64 {
            cx.now = Instant(i * 10_000);
            // Phases of overload and drain.
            let p_arrive = if (i / 2_000) % 2 == 0 { 0.8 } else { 0.3 };
            if drive.chance(p_arrive) {
                let id = pkt(cx.pool, 64 + drive.below(1437) as u32);
                if q.enqueue(id, &mut cx).is_err() {
                    cx.pool.free(id);
                }
            } else if let Some(id) = q.dequeue(&mut cx) {
                cx.pool.free(id);
            }
            q.check().unwrap();
        }
        for c in [
            DropCause::RedEarly,
            DropCause::RedForced,
            DropCause::QueueFull,
            DropCause::ByteLimit,
        ] {
            assert!(q.stats.drops_by(c).packets > 0, "{c:?} never happened");
        }
        q.purge(&mut cx, DropCause::Shutdown);
        assert!(q.inner.state().is_idle());
    }
    q.check().unwrap();
    for (id, _) in dropped.drain(..) {
        pool.free(id);
    }
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn hard_limits() {
    // Thresholds far above the limit: only the hard limits drop.
    let p = params(1_000.0, 2_000.0, 0.1, 0.002);
    let mut q = RedQueue::new(p, 3, 2_500).unwrap();
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for _ in 0..2 {
        let id = pkt(cx.pool, 1000);
        q.enqueue(id, &mut cx).unwrap();
    }
    let id = pkt(cx.pool, 1000);
    assert_eq!(q.enqueue(id, &mut cx), Err(DropCause::ByteLimit));
    cx.pool.free(id);
    let id = pkt(cx.pool, 500);
    q.enqueue(id, &mut cx).unwrap();
    let id = pkt(cx.pool, 1);
    assert_eq!(q.enqueue(id, &mut cx), Err(DropCause::QueueFull));
}

#[test]
fn validation_messages() {
    let ok = RedParams::floyd_defaults(Rate::from_bps(10_000_000));
    ok.validate().unwrap();
    assert_eq!(ok.idle_pkt_ns, 800_000, "1000 bytes at 10 Mbit/s");
    assert_eq!(
        (ok.min_th, ok.max_th, ok.max_p, ok.wq),
        (5.0, 15.0, 0.02, 0.002)
    );
    let bad = |f: &dyn Fn(&mut RedParams), needle: &str| {
        let mut p = ok;
        f(&mut p);
        let e = p.validate().unwrap_err();
        assert!(e.contains(needle), "{e}");
        assert!(RedQueue::new(p, 10, 10).is_err());
    };
    bad(&|p| p.min_th = 0.0, "min_th");
    bad(&|p| p.min_th = f64::NAN, "min_th");
    bad(&|p| p.max_th = 5.0, "max_th");
    bad(&|p| p.max_th = f64::INFINITY, "max_th");
    bad(&|p| p.max_p = 0.0, "max_p");
    bad(&|p| p.max_p = 1.5, "max_p");
    bad(&|p| p.wq = 0.0, "wq");
    bad(&|p| p.wq = f64::NAN, "wq");
    bad(&|p| p.idle_pkt_ns = 0, "idle_pkt_ns");
    bad(&|p| p.mode = RedMode::Bytes { mean_pkt: 0 }, "mean_pkt");
    let mut q = RedQueue::new(ok, 10, 10).unwrap();
    assert!(q.set_params(RedParams { wq: 2.0, ..ok }).is_err());
    assert_eq!(q.params(), &ok);
}

// ---- ECN ----

/// The frames of the ECN tests (UDP, 100 bytes of payload).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// IPv4, DSCP AF11, this ECN field.
    V4(u8),
    /// IPv6, DSCP EF, flow label 0x12345, this ECN field.
    V6(u8),
    /// IPv4 ECT(0) whose header checksum is wrong.
    BadChecksum,
    /// IPv4 ECT(0) cut 10 bytes into its IP header.
    Truncated,
}

/// The slot size of the ECN tests' pools.
pub(crate) const SLOT: usize = 256;

/// The bytes of frame `f` (as [`Pool::data`] shows them).
pub(crate) fn frame_bytes(f: Frame) -> Vec<u8> {
    let mut b = vec![0u8; SLOT];
    let eth = EthSpec::default();
    let v4 = |ecn| Ipv4Spec {
        dscp: 10,
        ecn,
        ..Ipv4Spec::default()
    };
    let n = match f {
        Frame::V4(ecn) => build::udp_v4_frame(&mut b, &eth, &v4(ecn), 1, 2, &[7; 100]),
        Frame::V6(ecn) => {
            let ip = Ipv6Spec {
                dscp: 46,
                ecn,
                flow_label: 0x12345,
                ..Ipv6Spec::default()
            };
            build::udp_v6_frame(&mut b, &eth, &ip, 1, 2, &[7; 100])
        }
        Frame::BadChecksum | Frame::Truncated => {
            build::udp_v4_frame(&mut b, &eth, &v4(ECT0), 1, 2, &[7; 100])
        }
    }
    .unwrap();
    b.truncate(n);
    match f {
        Frame::BadChecksum => b[14 + 11] ^= 0x10,
        Frame::Truncated => b.truncate(14 + 10),
        _ => {}
    }
    b
}

/// A fresh packet holding frame `f`.
pub(crate) fn ecn_pkt(pool: &mut Pool, f: Frame) -> PktId {
    let id = pool.alloc().expect("pool");
    let b = frame_bytes(f);
    pool.slot_mut(id)[..b.len()].copy_from_slice(&b);
    pool.meta_mut(id).len = b.len() as u32;
    id
}

/// The IPv4 header checksum of `frame` is the one a full recomputation gives.
pub(crate) fn v4_checksum_recomputed(frame: &[u8]) -> bool {
    let mut h = frame[14..34].to_vec();
    let stored = [h[10], h[11]];
    h[10..12].fill(0);
    checksum(&h).to_be_bytes() == stored
}

/// Random traffic through `q` (wrapped in [`Counted`]): on `load` of `steps` steps 10 µs
/// apart an arrival of a random frame kind (not ECT, ECT(0), ECT(1), already CE, IPv6
/// ECT(0) and not ECT, a wrong IPv4 checksum, truncated), colour and one of 8 flows; a
/// departure on the others; a purge at the end. Checks after every step the [`Counted`]
/// identities, and on every packet that leaves the queue (sent, pushed out or purged):
/// an ECN-capable frame is as it arrived or exactly the frame built with CE (so an IPv4
/// checksum as a full recomputation gives), every other frame is byte for byte as it
/// arrived. At the end: `ecn_marked` is the number of packets that left with the CE they
/// were given plus the already-CE arrivals signalled (at most those enqueued),
/// `aqm_dropped` and `overlimit_dropped` are [`Counted`]'s RED and limit drops,
/// `unmarkable` at most the unreadable frames enqueued, and no packet is left in the pool.
/// Returns the wrapped queue.
pub(crate) fn drive_ecn<Q: Qdisc>(q: Q, load: f64, steps: u64, seed: u64) -> Counted<Q> {
    let kinds = [
        Frame::V4(NOT_ECT),
        Frame::V4(ECT0),
        Frame::V4(ECT1),
        Frame::V4(CE),
        Frame::V6(ECT0),
        Frame::V6(NOT_ECT),
        Frame::BadChecksum,
        Frame::Truncated,
    ];
    let bytes: Vec<Vec<u8>> = kinds.iter().map(|&k| frame_bytes(k)).collect();
    let ce = [frame_bytes(Frame::V4(CE)), frame_bytes(Frame::V6(CE))];
    let mut q = Counted::new(Box::new(q));
    let mut pool = Pool::new(512, SLOT);
    let mut rng = Rng::new(seed);
    let mut drive = Rng::new(seed ^ 0x5eed);
    let mut dropped = Vec::new();
    let (mut marked, mut enqueued) = (0u64, [0u64; 8]);
    // a packet out of the queue: 1 if it left with a CE it was given
    let leave = |pool: &mut Pool, id: PktId| -> u64 {
        let k = pool.meta(id).conn as usize;
        let (got, orig) = (pool.data(id), &bytes[k]);
        let given = match kinds[k] {
            Frame::V4(ECT0 | ECT1) if got == ce[0] => v4_checksum_recomputed(got),
            Frame::V6(ECT0) => got == ce[1],
            _ => false,
        };
        assert!(given || got == &orig[..], "{:?} left altered", kinds[k]);
        pool.free(id);
        given as u64
    };
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for i in 0..=steps {
            cx.now = Instant(i * 10_000);
            if i == steps {
                q.purge(&mut cx, DropCause::Shutdown);
            } else if drive.chance(load) {
                let k = drive.below(kinds.len() as u64) as usize;
                let id = ecn_pkt(cx.pool, kinds[k]);
                let m = cx.pool.meta_mut(id);
                m.conn = k as u32;
                m.color = [Color::Green, Color::Yellow, Color::Red][drive.below(3) as usize];
                m.flow = mix64(drive.below(8));
                match q.enqueue(id, &mut cx) {
                    Ok(()) => enqueued[k] += 1,
                    Err(_) => cx.pool.free(id),
                }
            } else if let Some(id) = q.dequeue(&mut cx) {
                marked += leave(cx.pool, id);
            }
            let out: Vec<_> = cx.dropped.drain(..).collect();
            for (id, _) in out {
                marked += leave(cx.pool, id);
            }
            q.check().unwrap();
        }
    }
    assert_eq!(pool.in_use(), 0);
    let a = q.aqm_stats().expect("RED reports its counters");
    let s = &q.stats;
    let by = |causes: &[DropCause]| causes.iter().map(|&c| s.drops_by(c).packets).sum::<u64>();
    assert!(marked <= a.ecn_marked && a.ecn_marked <= marked + enqueued[3]);
    assert_eq!(
        a.aqm_dropped,
        by(&[DropCause::RedEarly, DropCause::RedForced])
    );
    let limits = [
        DropCause::QueueFull,
        DropCause::ByteLimit,
        DropCause::FlowLimit,
    ];
    assert_eq!(a.overlimit_dropped, by(&limits));
    assert!(a.unmarkable <= enqueued[6] + enqueued[7]);
    q
}

/// RED 5/15 packets, `max_p` 0.1, `wq` 1 (the average is the packets held, exactly),
/// `ecn`, `gentle`, over a FIFO of `limit` packets, holding `held` not-ECT packets (put in
/// while the thresholds were out of reach).
fn ecn_queue(cx: &mut Ctx<'_>, ecn: bool, gentle: bool, held: usize, limit: u32) -> RedQueue {
    let mut q = RedQueue::new(params(1e6, 2e6, 0.1, 1.0), limit, u64::MAX).unwrap();
    for _ in 0..held {
        let id = ecn_pkt(cx.pool, Frame::V4(NOT_ECT));
        q.enqueue(id, cx).unwrap();
    }
    let p = RedParams {
        ecn,
        gentle,
        ..params(5.0, 15.0, 0.1, 1.0)
    };
    q.set_params(p).unwrap();
    q
}

/// Offer frame `f` with RED's count at 19 (at an average of 10 or more p_a = 1, see
/// `ecn_marks_ect_on_an_early_decision`): the result, the packet (freed if refused) and
/// its bytes now.
fn offer_counted_19(
    q: &mut RedQueue,
    cx: &mut Ctx<'_>,
    f: Frame,
) -> (Result<(), DropCause>, Vec<u8>) {
    q.state_mut().count = 19;
    let id = ecn_pkt(cx.pool, f);
    let r = q.enqueue(id, cx);
    let now = cx.pool.data(id).to_vec();
    if r.is_err() {
        cx.pool.free(id);
    }
    (r, now)
}

/// The hand-computed early decision: 10 packets held with `wq` = 1 make avg = 10, so
/// p_b = 0.1 (10 - 5) / (15 - 5) = 0.05, and with count = 19, (count + 1) p_b = 1: p_a = 1.
/// With `ecn` an ECT(0)/ECT(1) packet is marked CE and enqueued, an already-CE one enqueued
/// as it is (both marks), a not-ECT one dropped, an unreadable one enqueued unchanged
/// (`unmarkable`); without `ecn`, or in a pool without frame bytes, the ECT one is dropped.
#[test]
fn ecn_marks_ect_on_an_early_decision() {
    let mut pool = Pool::new(64, SLOT);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let mut q = ecn_queue(&mut cx, true, false, 10, 100);
    let len = frame_bytes(Frame::V4(ECT0)).len() as u32;
    assert_eq!(q.params().p_b(10.0, len), 0.05);
    assert_eq!(RedParams::p_a(0.05, 19), 1.0);
    let marks = [
        (Frame::V4(ECT0), Frame::V4(CE)),
        (Frame::V4(ECT1), Frame::V4(CE)),
        (Frame::V4(CE), Frame::V4(CE)),
        (Frame::V6(ECT0), Frame::V6(CE)),
        (Frame::V6(ECT1), Frame::V6(CE)),
    ];
    for (f, want) in marks {
        let (r, now) = offer_counted_19(&mut q, &mut cx, f);
        assert_eq!(r, Ok(()), "{f:?}");
        assert_eq!(now, frame_bytes(want), "{f:?}");
        assert_eq!(q.state().count, 0, "a mark resets the count as a drop does");
        // the head (a pre-filled packet) leaves: 10 held again
        let head = q.dequeue(&mut cx).unwrap();
        assert_eq!(cx.pool.data(head), frame_bytes(Frame::V4(NOT_ECT)));
        cx.pool.free(head);
    }
    let marked = frame_bytes(Frame::V4(CE));
    assert!(v4_checksum_recomputed(&marked));
    assert_ne!(marked[24..26], frame_bytes(Frame::V4(ECT0))[24..26]);
    // IPv6: version 6, traffic class EF (46 << 2) with CE, the flow label kept
    let v6 = frame_bytes(Frame::V6(CE));
    assert_eq!(&v6[14..17], &[0x6b, 0xb1, 0x23]);
    assert_eq!(v6[17], 0x45);
    for f in [Frame::V4(NOT_ECT), Frame::V6(NOT_ECT)] {
        let (r, now) = offer_counted_19(&mut q, &mut cx, f);
        assert_eq!(r, Err(DropCause::RedEarly), "{f:?}");
        assert_eq!(now, frame_bytes(f));
        assert_eq!(q.state().count, 0);
    }
    for f in [Frame::BadChecksum, Frame::Truncated] {
        let (r, now) = offer_counted_19(&mut q, &mut cx, f);
        assert_eq!(r, Ok(()), "{f:?}");
        assert_eq!(now, frame_bytes(f), "{f:?} forwarded unchanged");
        let head = q.dequeue(&mut cx).unwrap();
        cx.pool.free(head);
    }
    let want = AqmStats {
        ecn_marked: 5,
        unmarkable: 2,
        aqm_dropped: 2,
        ..AqmStats::default()
    };
    assert_eq!(q.aqm_stats(), Some(want));
    assert_eq!(Qdisc::len(&q), 10);

    // ECN off: the ECT packet is dropped as the seed papers' RED drops it
    let mut off = ecn_queue(&mut cx, false, false, 10, 100);
    let (r, now) = offer_counted_19(&mut off, &mut cx, Frame::V4(ECT0));
    assert_eq!(r, Err(DropCause::RedEarly));
    assert_eq!(now, frame_bytes(Frame::V4(ECT0)));
    assert_eq!(off.aqm_stats().unwrap().ecn_marked, 0);
    assert_eq!(off.aqm_stats().unwrap().aqm_dropped, 1);

    // no frame bytes (the simulator's pool): no ECN field, the signal is a drop
    let mut sim = Pool::new(64, 0);
    let mut cx = Ctx::new(Instant::ZERO, &mut sim, &mut rng, &mut dropped);
    let mut q = RedQueue::new(params(1e6, 2e6, 0.1, 1.0), 100, u64::MAX).unwrap();
    for _ in 0..10 {
        let id = pkt(cx.pool, 1000);
        q.enqueue(id, &mut cx).unwrap();
    }
    q.set_params(RedParams {
        ecn: true,
        ..params(5.0, 15.0, 0.1, 1.0)
    })
    .unwrap();
    q.state_mut().count = 19;
    let id = pkt(cx.pool, 1000);
    assert_eq!(q.enqueue(id, &mut cx), Err(DropCause::RedEarly));
}

/// Forced decisions drop ECN-capable packets too (`harddrop`): at avg = max_th = 15, and
/// in gentle mode at 2 max_th = 30, while gentle's band (avg = 20: p_b = 0.1 + 0.9 · 5/15
/// = 0.4, count 19: p_a = 1) is early and marks. The hard limit drops a packet RED
/// marked (not counted as a mark).
#[test]
fn ecn_forced_decisions_and_the_hard_limit_drop() {
    let mut pool = Pool::new(128, SLOT);
    let mut rng = Rng::new(2);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let ect = frame_bytes(Frame::V4(ECT0));
    let mut q = ecn_queue(&mut cx, true, false, 15, 100);
    for f in [Frame::V4(ECT0), Frame::V4(CE), Frame::V4(NOT_ECT)] {
        let (r, now) = offer_counted_19(&mut q, &mut cx, f);
        assert_eq!(r, Err(DropCause::RedForced), "{f:?}");
        assert_eq!(now, frame_bytes(f));
    }
    let s = q.aqm_stats().unwrap();
    assert_eq!((s.ecn_marked, s.aqm_dropped), (0, 3));

    let mut gentle = ecn_queue(&mut cx, true, true, 20, 100);
    assert!(close(gentle.params().p_b(20.0, 1), 0.4, 1e-15));
    assert_eq!(RedParams::p_a(gentle.params().p_b(20.0, 1), 19), 1.0);
    let (r, now) = offer_counted_19(&mut gentle, &mut cx, Frame::V4(ECT0));
    assert_eq!((r, now), (Ok(()), frame_bytes(Frame::V4(CE))));
    let (r, _) = offer_counted_19(&mut gentle, &mut cx, Frame::V4(NOT_ECT));
    assert_eq!(r, Err(DropCause::RedEarly));
    let mut gentle = ecn_queue(&mut cx, true, true, 30, 100);
    let (r, now) = offer_counted_19(&mut gentle, &mut cx, Frame::V4(ECT0));
    assert_eq!((r, now), (Err(DropCause::RedForced), ect.clone()));

    // 10 held of at most 10: RED's early decision marks, then the FIFO refuses
    let mut full = ecn_queue(&mut cx, true, false, 10, 10);
    let (r, _) = offer_counted_19(&mut full, &mut cx, Frame::V4(ECT0));
    assert_eq!(r, Err(DropCause::QueueFull));
    let (r, _) = offer_counted_19(&mut full, &mut cx, Frame::V4(NOT_ECT));
    assert_eq!(r, Err(DropCause::RedEarly), "RED decides before the limit");
    let want = AqmStats {
        aqm_dropped: 1,
        overlimit_dropped: 1,
        ..AqmStats::default()
    };
    assert_eq!(full.aqm_stats(), Some(want));
}

/// With `ecn`, RED's decisions are the same process as without: at a constant average of
/// 10 (5/15/0.1, p_b = 0.05) signals come at the long-run rate 2 p_b / (1 + p_b) (see
/// `expected_drop_fraction`), whether they are marks or drops. Arrivals alternate ECT(0)
/// and not-ECT: the signals fall on either with even odds (the gap between signals is
/// uniform on 1..20, ten odd and ten even lengths), so the marks and the early drops are
/// each about half; marks are not drops in [`Counted`].
#[test]
fn ecn_signals_keep_red_rate_and_counters_add_up() {
    let p = RedParams {
        ecn: true,
        ..params(5.0, 15.0, 0.1, 0.002)
    };
    let (r, tol, n) = expected_drop_fraction();
    let mut pool = Pool::new(64, SLOT);
    let mut rng = Rng::new(42);
    let mut dropped = Vec::new();
    let mut q = Counted::new(Box::new(RedQueue::new(p, 1000, u64::MAX).unwrap()));
    let mut sent_ce = 0u64;
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for _ in 0..10 {
            let id = ecn_pkt(cx.pool, Frame::V4(NOT_ECT));
            q.enqueue(id, &mut cx).unwrap();
        }
        q.inner.state_mut().avg = 10.0;
        for i in 0..n {
            cx.now = Instant(i as u64 * 1000);
            let f = [Frame::V4(ECT0), Frame::V4(NOT_ECT)][i % 2];
            let id = ecn_pkt(cx.pool, f);
            match q.enqueue(id, &mut cx) {
                Ok(()) => {
                    let out = q.dequeue(&mut cx).unwrap();
                    sent_ce += (cx.pool.data(out) == frame_bytes(Frame::V4(CE))) as u64;
                    cx.pool.free(out);
                }
                Err(_) => cx.pool.free(id),
            }
            assert_eq!(Qdisc::len(&q), 10);
        }
    }
    q.check().unwrap();
    let a = q.aqm_stats().unwrap();
    let s = &q.stats;
    let early = s.drops_by(DropCause::RedEarly).packets;
    let signals = (a.ecn_marked + early) as f64 / n as f64;
    assert!(close(signals, r, tol), "{signals} vs {r} +- {tol}");
    let half = a.ecn_marked as f64 / (a.ecn_marked + early) as f64;
    assert!(close(half, 0.5, 0.05), "{half}");
    assert_eq!(a.ecn_marked, sent_ce, "every mark left with its CE");
    assert_eq!(a.aqm_dropped, early);
    assert_eq!(s.dropped().packets, early, "marks are not drops");
    assert_eq!(s.received.packets, n as u64 + 10);
    assert_eq!(s.enqueued.packets, n as u64 + 10 - early);
    assert_eq!(s.dequeued.packets, n as u64 - early);
}

/// Random traffic of every frame kind through RED with ECN, gentle, over tight limits.
#[test]
fn ecn_random_traffic_identities() {
    let p = RedParams {
        ecn: true,
        gentle: true,
        ..params(4.0, 8.0, 0.1, 0.05)
    };
    let q = RedQueue::new(p, 20, 12_000).unwrap();
    let q = drive_ecn(q, 0.6, 50_000, 11);
    let a = q.aqm_stats().unwrap();
    assert!(a.ecn_marked > 100 && a.unmarkable > 10, "{a:?}");
    for c in [
        DropCause::RedEarly,
        DropCause::RedForced,
        DropCause::QueueFull,
    ] {
        assert!(q.stats.drops_by(c).packets > 0, "{c:?} never happened");
    }
}
