use super::*;
use crate::emulate::{Jitter, LossModel};
use crate::pool::Pool;
use crate::rng::Rng;
use crate::time::Duration;

fn pkt(pool: &mut Pool, len: u32) -> PktId {
    let id = pool.alloc().expect("pool");
    pool.meta_mut(id).len = len;
    id
}

#[test]
fn transparent_link_passes_immediately() {
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant(1_000), &mut pool, &mut rng, &mut dropped);
    let mut l = EmuLink::new(EmuConfig::default()).unwrap();
    assert_eq!(l.limits(), Limits::UNLIMITED);
    let p = pkt(cx.pool, 100);
    l.enqueue(p, &mut cx).unwrap();
    assert_eq!(l.next_wakeup(), Some(Instant(1_000)));
    assert_eq!(l.dequeue(&mut cx), Some(p));
    assert_eq!(l.next_wakeup(), None);
    l.check().unwrap();
}

/// `n` frames of `len` bytes queued at `t0` on a link of `cfg`, drained at each
/// wake-up: the link and the departure times (ns).
fn departures(cfg: EmuConfig, t0: Instant, n: usize, len: u32) -> (EmuLink, Vec<u64>) {
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(t0, &mut pool, &mut rng, &mut dropped);
    for _ in 0..n {
        let p = pkt(cx.pool, len);
        l.enqueue(p, &mut cx).unwrap();
    }
    let mut out = Vec::new();
    while let Some(at) = l.next_wakeup() {
        cx.now = at;
        let p = l.dequeue(&mut cx).unwrap();
        cx.pool.free(p);
        out.push(at.0);
    }
    (l, out)
}

/// Queueing delay by hand: four 1000-byte frames at once on 8 Mbit/s (1 ms each)
/// wait 0, 1, 2 and 3 ms for the serialiser: 4 frames, 6 ms in all, 3 ms at most.
#[test]
fn queue_delay_counts_each_frames_wait() {
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        ..EmuConfig::default()
    };
    let (l, _) = departures(cfg, Instant(5), 4, 1000);
    let q = l.counters().queue_delay;
    assert_eq!((q.frames, q.sum_ns, q.max_ns), (4, 6_000_000, 3_000_000));
}

/// A rate schedule: 8 Mbit/s (1000 B = 1 ms) from the first frame, 1 Mbit/s (8 ms)
/// from 3 ms on. Five 1000-byte frames queued at 5 ms (the origin) leave at 6, 7, 8
/// ms at the fast rate, then at 8 + 8 = 16 and 24 ms. A reconfiguration to a fixed
/// rate ends the schedule for what comes next.
#[test]
fn a_rate_schedule_changes_the_serialiser_rate() {
    let cap =
        crate::emulate::Capacity::schedule(vec![(0, 8_000_000), (3_000_000, 1_000_000)]).unwrap();
    let cfg = EmuConfig {
        capacity: Some(cap),
        limit_packets: Some(100),
        ..EmuConfig::default()
    };
    let ms = |x: u64| Duration::from_millis(x).as_nanos();
    let (mut l, out) = departures(cfg, Instant(ms(5)), 5, 1000);
    assert_eq!(out, vec![ms(6), ms(7), ms(8), ms(16), ms(24)]);
    l.check().unwrap();
    l.reconfigure(EmuConfig {
        rate_bps: Some(8_000_000),
        ..EmuConfig::default()
    })
    .unwrap();
    let mut pool = Pool::new(4, 0);
    let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
    let mut cx = Ctx::new(Instant(ms(30)), &mut pool, &mut rng, &mut dropped);
    let p = pkt(cx.pool, 1000);
    l.enqueue(p, &mut cx).unwrap();
    assert_eq!(l.next_wakeup(), Some(Instant(ms(31))));
}

/// A Mahimahi trace through the whole link: opportunities at 1, 1, 3 ms (period
/// 3 ms) from the first frame's arrival; four full frames leave at +1, +1, +3, +4 ms,
/// and a 20 ms delay follows each.
#[test]
fn a_trace_paces_the_link_by_its_opportunities() {
    let cap = crate::emulate::Capacity::parse_trace("1\n1\n3\n").unwrap();
    let cfg = EmuConfig {
        capacity: Some(cap),
        delay: Duration::from_millis(20),
        ..EmuConfig::default()
    };
    let t0 = Duration::from_millis(100).as_nanos();
    let (_, out) = departures(cfg, Instant(t0), 4, 1500);
    let ms: Vec<u64> = out.iter().map(|t| (t - t0) / 1_000_000).collect();
    assert_eq!(ms, vec![21, 21, 23, 24]);
}

#[test]
fn serialiser_and_delay_hand_computed() {
    // 8 Mbit/s = 1 byte/us; 1000-byte frames take 1 ms; delay 10 ms.
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        delay: Duration::from_millis(10),
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    // BDP = 10 000 bytes (> 2 MTU).
    assert_eq!(l.limits(), Limits::new(Limits::UNLIMITED_PACKETS, 10_000));
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let ids: Vec<_> = (0..3).map(|_| pkt(cx.pool, 1000)).collect();
    for &id in &ids {
        l.enqueue(id, &mut cx).unwrap();
    }
    // Frame 0 is on the wire, 1 and 2 wait.
    assert_eq!(l.queued_at(Instant::ZERO), (2, 2000));
    assert_eq!(l.counters().max_queue_packets, 2);
    assert_eq!(l.busy_until(), Some(Instant(3_000_000)));
    for (k, &id) in ids.iter().enumerate() {
        let t = Instant((k as u64 + 1) * 1_000_000 + 10_000_000);
        assert_eq!(l.next_wakeup(), Some(t));
        cx.now = Instant(t.0 - 1);
        assert_eq!(l.dequeue(&mut cx), None);
        cx.now = t;
        assert_eq!(l.dequeue(&mut cx), Some(id));
    }
    l.check().unwrap();
    // Idle link: a new frame starts at its arrival.
    cx.now = Instant(50_000_000);
    let p = pkt(cx.pool, 500);
    l.enqueue(p, &mut cx).unwrap();
    assert_eq!(
        l.next_wakeup(),
        Some(Instant(50_000_000 + 500_000 + 10_000_000))
    );
}

#[test]
fn queue_limit_counts_waiting_frames_only() {
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        limit_packets: Some(2),
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    // One on the wire + two waiting; the fourth is refused.
    for _ in 0..3 {
        let p = pkt(cx.pool, 1000);
        l.enqueue(p, &mut cx).unwrap();
    }
    let p = pkt(cx.pool, 1000);
    assert_eq!(l.enqueue(p, &mut cx), Err(DropCause::QueueFull));
    // After the first frame is serialised there is room for one more.
    cx.now = Instant(1_000_000);
    assert_eq!(l.enqueue(p, &mut cx), Ok(()));
    assert_eq!(l.counters().queue_drops.packets, 1);
    l.check().unwrap();
}

#[test]
fn duplicates_and_pool_exhaustion_are_counted() {
    let cfg = EmuConfig {
        duplicate: 1.0,
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(3, 16);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let a = pkt(cx.pool, 10);
    cx.pool.slot_mut(a)[..10].copy_from_slice(b"0123456789");
    cx.pool.meta_mut(a).flow = 77;
    l.enqueue(a, &mut cx).unwrap();
    assert_eq!(Qdisc::len(&l), 2);
    let b = pkt(cx.pool, 10); // the last free slot: no room for its copy
    l.enqueue(b, &mut cx).unwrap();
    assert_eq!(l.counters().dup_pool_empty, 1);
    assert_eq!(l.counters().duplicated.packets, 1);
    assert_eq!(l.dequeue(&mut cx), Some(a));
    let c = l.dequeue(&mut cx).unwrap();
    assert_ne!(c, a);
    assert_eq!(cx.pool.data(c), b"0123456789");
    assert_eq!(cx.pool.meta(c).flow, 77);
    assert_eq!(l.dequeue(&mut cx), Some(b));
    l.check().unwrap();
    assert_eq!(l.stats().received.packets, 3);
    assert_eq!(l.stats().dequeued.packets, 3);
}

#[test]
fn reconfigure_keeps_packets_and_order() {
    let cfg = EmuConfig {
        delay: Duration::from_millis(5),
        jitter: Jitter::Uniform {
            half_width: 4_000_000,
        },
        reorder: true,
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg.clone()).unwrap();
    let mut pool = Pool::new(256, 0);
    let mut rng = Rng::new(3);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for i in 0..100 {
        cx.now = Instant(i * 10_000);
        let p = pkt(cx.pool, 100);
        l.enqueue(p, &mut cx).unwrap();
    }
    l.reconfigure(EmuConfig {
        reorder: false,
        loss: LossModel::Bernoulli { p: 0.5 },
        ..cfg
    })
    .unwrap();
    assert_eq!(Qdisc::len(&l), 100);
    let mut last = 0;
    cx.now = Instant(1_000_000_000);
    while let Some(p) = l.dequeue(&mut cx) {
        cx.pool.free(p);
    }
    for _ in 0..100 {
        let p = pkt(cx.pool, 100);
        if l.enqueue(p, &mut cx).is_err() {
            cx.pool.free(p);
        }
    }
    while let Some(t) = l.next_wakeup() {
        assert!(t.0 >= last);
        last = t.0;
        cx.now = t;
        let p = l.dequeue(&mut cx).unwrap();
        cx.pool.free(p);
    }
    l.check().unwrap();
    assert!(l.counters().lost.packets > 20);
    assert!(l
        .reconfigure(EmuConfig {
            duplicate: 2.0,
            ..EmuConfig::default()
        })
        .is_err());
}

/// netem's `reorder 100% gap 5` with 10 ms delay: packets 5, 10, 15 … (every 5th) leave
/// at their arrival, the others 10 ms later; `reorder 25%` (gap 1) sends 25 % early.
#[test]
fn reorder_gap_sends_every_nth_at_once() {
    let cfg = EmuConfig {
        delay: Duration::from_millis(10),
        reorder_early: crate::emulate::Reorder {
            probability: 1.0,
            correlation: 0.0,
            gap: 5,
        },
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(64, 0);
    let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let mut ids = Vec::new();
    for i in 0..20u64 {
        cx.now = Instant(i * 100_000);
        let p = pkt(cx.pool, 100);
        l.enqueue(p, &mut cx).unwrap();
        ids.push(p);
    }
    let mut out = Vec::new();
    while let Some(t) = l.next_wakeup() {
        cx.now = cx.now.max(t);
        let p = l.dequeue(&mut cx).unwrap();
        let k = ids.iter().position(|&x| x == p).unwrap();
        out.push((k, cx.now.0));
        cx.pool.free(p);
    }
    let early: Vec<usize> = out
        .iter()
        .filter(|o| o.1 < 10_000_000)
        .map(|o| o.0)
        .collect();
    assert_eq!(early, vec![4, 9, 14, 19]);
    assert_eq!(l.counters().reordered.packets, 4);
    l.check().unwrap();
    // gap 1: the fraction sent early is the probability (binomial 95 % interval)
    let r = crate::emulate::Reorder {
        probability: 0.25,
        correlation: 0.0,
        gap: 1,
    };
    let frac = |r: crate::emulate::Reorder| {
        let mut l = EmuLink::new(EmuConfig {
            delay: Duration::from_millis(10),
            reorder_early: r,
            ..EmuConfig::default()
        })
        .unwrap();
        let mut pool = Pool::new(4, 0);
        let (mut rng, mut dropped) = (Rng::new(2), Vec::new());
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let n = 100_000;
        for i in 0..n {
            cx.now = Instant(i * 1_000_000_000);
            let p = pkt(cx.pool, 100);
            l.enqueue(p, &mut cx).unwrap();
            let p = l.dequeue(&mut cx).or_else(|| {
                cx.now = Instant(cx.now.0 + 10_000_000);
                l.dequeue(&mut cx)
            });
            cx.pool.free(p.unwrap());
        }
        l.counters().reordered.packets as f64 / n as f64
    };
    let f = frac(r);
    assert!(
        (f - 0.25).abs() < 1.96 * (0.25f64 * 0.75 / 1e5).sqrt(),
        "{f}"
    );
    // gap 5, 25 %: 1 / (4 + 4) = 12.5 %
    let r5 = crate::emulate::Reorder { gap: 5, ..r };
    assert_eq!(r5.expected_fraction(), 0.125);
    let f = frac(r5);
    assert!((f / 0.125 - 1.0).abs() < 0.03, "{f}");
}

/// netem's `limit` counts the delay line: with 10 ms delay and limit 3, a fourth packet
/// within the delay is refused, though no rate queues anything.
#[test]
fn held_limit_counts_the_delay_line() {
    let cfg = EmuConfig {
        delay: Duration::from_millis(10),
        limit_held: Some(3),
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(8, 0);
    let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for _ in 0..3 {
        let p = pkt(cx.pool, 100);
        l.enqueue(p, &mut cx).unwrap();
    }
    let p = pkt(cx.pool, 100);
    assert_eq!(l.enqueue(p, &mut cx), Err(DropCause::QueueFull));
    cx.now = Instant(10_000_000);
    let q = l.dequeue(&mut cx).unwrap();
    cx.pool.free(q);
    assert_eq!(l.enqueue(p, &mut cx), Ok(()));
    l.check().unwrap();
}

/// netem's `ecn`: every packet the loss model loses is marked CE when it is ECT(0),
/// lost when it is not ECN-capable.
#[test]
fn ecn_marks_instead_of_losing() {
    let cfg = EmuConfig {
        loss: LossModel::Bernoulli { p: 1.0 },
        ecn: true,
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(4, 64);
    let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    // Ethernet + IPv4 header (20 bytes, checksum filled in), TOS = ECT(0) or Not-ECT
    let frame = |tos: u8| {
        let mut f = vec![0u8; 34];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = tos;
        f[16..18].copy_from_slice(&34u16.to_be_bytes()[..]);
        f[16] = 0;
        f[17] = 20;
        f[22] = 64;
        f[23] = 17;
        let mut sum = 0u32;
        for i in (14..34).step_by(2) {
            sum += u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f
    };
    let a = pkt(cx.pool, 34);
    cx.pool.slot_mut(a)[..34].copy_from_slice(&frame(0b10));
    assert_eq!(l.enqueue(a, &mut cx), Ok(()));
    assert_eq!(cx.pool.data(a)[15] & 3, 0b11, "CE");
    let b = pkt(cx.pool, 34);
    cx.pool.slot_mut(b)[..34].copy_from_slice(&frame(0));
    assert_eq!(l.enqueue(b, &mut cx), Err(DropCause::Emulated));
    assert_eq!(l.counters().ecn_marked.packets, 1);
    assert_eq!(l.counters().lost.packets, 1);
    l.check().unwrap();
}

/// `slot 1ms 1ms packets 4` on 10 packets arriving together: the link releases them
/// in groups of 4, 4, 2, one millisecond apart.
#[test]
fn slots_release_in_groups() {
    let cfg = EmuConfig {
        slot: Some(crate::emulate::slot::Slot {
            gap: crate::emulate::slot::SlotGap::Uniform {
                min: 1_000_000,
                max: 1_000_000,
            },
            packets: Some(4),
            bytes: None,
        }),
        ..EmuConfig::default()
    };
    let t0 = Instant(5_000_000);
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(16, 0);
    let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
    let mut cx = Ctx::new(t0, &mut pool, &mut rng, &mut dropped);
    for _ in 0..10 {
        let p = pkt(cx.pool, 100);
        l.enqueue(p, &mut cx).unwrap();
    }
    let mut out = Vec::new();
    let mut deferred = 0;
    while let Some(t) = l.next_wakeup() {
        cx.now = t;
        match l.dequeue(&mut cx) {
            Some(p) => {
                cx.pool.free(p);
                out.push(t.0);
            }
            None => deferred += 1,
        }
    }
    assert_eq!(deferred, 1, "the idle first slot is abandoned once");
    // the first slot (open since 0) idled: a new one 1 ms after the head was ready
    let ms: Vec<u64> = out.iter().map(|t| (t - t0.0) / 1_000_000).collect();
    assert_eq!(ms, vec![1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
    assert_eq!(l.counters().slots, 3);
}

#[test]
fn purge_returns_everything() {
    let cfg = EmuConfig {
        rate_bps: Some(1_000_000),
        delay: Duration::from_millis(100),
        jitter: Jitter::Normal { sigma: 10_000_000 },
        reorder: true,
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut pool = Pool::new(64, 0);
    let mut rng = Rng::new(3);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    let mut n = 0;
    for _ in 0..40 {
        let p = pkt(cx.pool, 1500);
        match l.enqueue(p, &mut cx) {
            Ok(()) => n += 1,
            Err(_) => cx.pool.free(p),
        }
    }
    l.purge(&mut cx, DropCause::Shutdown);
    assert_eq!(dropped.len(), n);
    assert!(l.is_empty());
    assert_eq!(l.next_wakeup(), None);
    l.check().unwrap();
}

/// `mm-link`'s drop-head queue of 2 packets at 8 Mbit/s (1000 bytes = 1 ms): of four
/// 1000-byte frames at 0, the first is sent at once and the second and third wait; the
/// fourth is admitted and the second, the oldest waiting, dropped. The third moves up to
/// the second's place: departures at 1, 2 and 3 ms (frames 1, 3, 4), as if the second
/// had never come. Drop-tail refuses the fourth instead (frames 1, 2, 3 at 1, 2, 3 ms).
#[test]
fn a_drop_head_queue_drops_the_oldest_waiting_frame() {
    let run = |queue_drop| {
        let cfg = EmuConfig {
            rate_bps: Some(8_000_000),
            limit_packets: Some(2),
            delay: Duration::from_millis(10),
            queue_drop,
            ..EmuConfig::default()
        };
        let mut l = EmuLink::new(cfg).unwrap();
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant(0), &mut pool, &mut rng, &mut dropped);
        let ids: Vec<PktId> = (0..4).map(|_| pkt(cx.pool, 1000)).collect();
        let admitted: Vec<bool> = ids.iter().map(|&p| l.enqueue(p, &mut cx).is_ok()).collect();
        let mut out = Vec::new();
        while let Some(at) = l.next_wakeup() {
            cx.now = at;
            let p = l.dequeue(&mut cx).unwrap();
            out.push((ids.iter().position(|&i| i == p).unwrap(), at.0));
        }
        l.check().unwrap();
        let gone: Vec<usize> = cx
            .dropped
            .iter()
            .map(|d| ids.iter().position(|&i| i == d.0).unwrap())
            .collect();
        (admitted, out, gone, l.counters().queue_drops.packets)
    };
    let ms = |n: u64| 10_000_000 + n * 1_000_000;
    let (admitted, out, gone, drops) = run(crate::emulate::QueueDrop::Head);
    assert_eq!(admitted, vec![true; 4]);
    assert_eq!(out, vec![(0, ms(1)), (2, ms(2)), (3, ms(3))]);
    assert_eq!((gone, drops), (vec![1], 1));
    let (admitted, out, gone, drops) = run(crate::emulate::QueueDrop::Tail);
    assert_eq!(admitted, vec![true, true, true, false]);
    assert_eq!(out, vec![(0, ms(1)), (1, ms(2)), (2, ms(3))]);
    assert_eq!((gone, drops), (vec![], 1));
}

/// Drop-head on a trace (opportunities at 1, 1, 3 ms): A is sent in the first, B waits for
/// the second; C arrives to a full queue (1 packet), B is dropped and C takes B's
/// opportunity (the cursor goes back to where B started).
#[test]
fn a_drop_head_queue_on_a_trace_reuses_the_dropped_frames_opportunity() {
    let cfg = EmuConfig {
        capacity: Some(crate::emulate::Capacity::parse_trace("1\n1\n3\n").unwrap()),
        limit_packets: Some(1),
        queue_drop: crate::emulate::QueueDrop::Head,
        ..EmuConfig::default()
    };
    let (l, out) = departures(cfg, Instant(0), 3, 1514);
    assert_eq!(out, vec![1_000_000, 1_000_000]);
    assert_eq!(l.counters().queue_drops.packets, 1);
    l.check().unwrap();
}

/// Frames of `len` bytes offered to `l` at the given ns, the link drained at every wake-up
/// up to `end` ns: (index of the frame, departure ns) in departure order, and the indices
/// refused. (The mm-link log's tests drive a logging link with it too.)
pub(in crate::emulate) fn drive(
    l: &mut EmuLink,
    at: &[u64],
    len: u32,
    end: u64,
) -> (Vec<(usize, u64)>, Vec<usize>) {
    let mut pool = Pool::new(4096, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant(0), &mut pool, &mut rng, &mut dropped);
    let mut ids = Vec::new();
    let mut lost = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let t_in = at.get(next).copied();
        let t_out = l.next_wakeup().map(|t| t.0);
        let t = match (t_in, t_out) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        if t > end {
            break;
        }
        cx.now = Instant(t);
        if t_in == Some(t) {
            let p = pkt(cx.pool, len);
            ids.push(p);
            if l.enqueue(p, &mut cx).is_err() {
                lost.push(next);
                cx.pool.free(p);
            }
            next += 1;
        } else {
            while let Some(p) = l.dequeue(&mut cx) {
                out.push((ids.iter().rposition(|&i| i == p).unwrap(), t));
                cx.pool.free(p);
            }
        }
    }
    (out, lost)
}

/// [`drive`] a new link of `cfg` to the end; its counters checked.
fn path_run(cfg: EmuConfig, at: &[u64], len: u32) -> (Vec<(usize, u64)>, Vec<usize>) {
    let mut l = EmuLink::new(cfg).unwrap();
    let r = drive(&mut l, at, len, u64::MAX);
    l.check().unwrap();
    r
}

const MS_NS: u64 = 1_000_000;

/// A delay step from 20 to 80 ms at 30 ms (from the first frame at 0): frames every 10 ms
/// leave 20 ms after arrival up to the step and 80 ms after from it.
#[test]
fn a_delay_schedule_steps_the_delay() {
    let cfg = EmuConfig {
        path: crate::emulate::path::Path {
            delay: Some(std::sync::Arc::new(vec![
                (0, 20 * MS_NS),
                (30 * MS_NS, 80 * MS_NS),
            ])),
            ..Default::default()
        },
        ..EmuConfig::default()
    };
    let at: Vec<u64> = (0..6).map(|i| i * 10 * MS_NS).collect();
    let (out, lost) = path_run(cfg, &at, 100);
    assert!(lost.is_empty());
    let delays: Vec<u64> = out.iter().map(|&(i, t)| (t - at[i]) / MS_NS).collect();
    assert_eq!(delays, vec![20, 20, 20, 80, 80, 80]);
}

/// A handover to a shorter path (80 → 20 ms at 30 ms): in the FIFO line the frames after
/// the step wait for those ahead (in order); with `reorder` they overtake them — frames 3
/// and 4 (sent at 30 and 40 ms, out at 50 and 60 ms) arrive before frames 1 and 2 (out at
/// 90 and 100 ms): a reordering burst.
#[test]
fn a_handover_with_reorder_makes_a_reordering_burst() {
    let path = crate::emulate::path::Path {
        delay: Some(std::sync::Arc::new(vec![
            (0, 80 * MS_NS),
            (30 * MS_NS, 20 * MS_NS),
        ])),
        ..Default::default()
    };
    let at: Vec<u64> = (0..5).map(|i| i * 10 * MS_NS).collect();
    let fifo = EmuConfig {
        path: path.clone(),
        ..EmuConfig::default()
    };
    let (out, _) = path_run(fifo, &at, 100);
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let reorder = EmuConfig {
        path,
        reorder: true,
        jitter: crate::emulate::Jitter::None,
        ..EmuConfig::default()
    };
    let (out, _) = path_run(reorder, &at, 100);
    let ms: Vec<(usize, u64)> = out.iter().map(|&(i, t)| (i, t / MS_NS)).collect();
    assert_eq!(ms, vec![(3, 50), (4, 60), (0, 80), (1, 90), (2, 100)]);
}

/// An outage from 10 to 30 ms on an 8 Mbit/s link (1000 bytes = 1 ms), queue of 5 packets:
/// frames every 2 ms from 0. Those before the outage leave at once (1 ms); the frame sent
/// at 9.5 ms cannot finish before 10 ms and starts at 30 ms; during the outage the queue
/// fills (it and four more wait) and the rest are dropped; after it the queue drains back
/// to back.
#[test]
fn an_outage_stops_the_serialiser_and_fills_the_queue() {
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        limit_packets: Some(5),
        path: crate::emulate::path::Path {
            outages: std::sync::Arc::new(vec![(10 * MS_NS, 30 * MS_NS)]),
            ..Default::default()
        },
        ..EmuConfig::default()
    };
    let mut at: Vec<u64> = (0..5).map(|i| i * 2 * MS_NS).collect(); // 0..8 ms
    at.push(9 * MS_NS + MS_NS / 2);
    at.extend((0..10).map(|i| 12 * MS_NS + i * 2 * MS_NS)); // 12..30 ms
    let (out, lost) = path_run(cfg, &at, 1000);
    let ms: Vec<(usize, u64)> = out.iter().map(|&(i, t)| (i, t / MS_NS)).collect();
    // 0..=4 at 1, 3, 5, 7, 9 ms; 5 (at 9.5) and the next four wait for 30 ms
    assert_eq!(&ms[..5], &[(0, 1), (1, 3), (2, 5), (3, 7), (4, 9)]);
    assert_eq!(&ms[5..10], &[(5, 31), (6, 32), (7, 33), (8, 34), (9, 35)]);
    // frame 5 waits too (it starts at 30 ms): those at 20..=28 ms find 5 waiting; the one
    // at 30 ms finds 4 (frame 5 has started) and leaves after the others
    assert_eq!(lost, vec![10, 11, 12, 13, 14], "the queue of 5 was full");
    assert_eq!(ms[10], (15, 36));
}

/// Without a rate, a frame that arrives during an outage is held until it ends; a loss
/// schedule of 0 % then 100 % from 20 ms loses every frame from then on.
#[test]
fn outages_hold_and_loss_schedules_switch() {
    let cfg = EmuConfig {
        path: crate::emulate::path::Path {
            outages: std::sync::Arc::new(vec![(5 * MS_NS, 15 * MS_NS)]),
            loss: Some(std::sync::Arc::new(vec![
                (0, LossModel::None),
                (20 * MS_NS, LossModel::Bernoulli { p: 1.0 }),
            ])),
            ..Default::default()
        },
        ..EmuConfig::default()
    };
    let at: Vec<u64> = (0..4).map(|i| i * 7 * MS_NS).collect(); // 0, 7, 14, 21 ms
    let (out, lost) = path_run(cfg, &at, 100);
    let ms: Vec<(usize, u64)> = out.iter().map(|&(i, t)| (i, t / MS_NS)).collect();
    assert_eq!(ms, vec![(0, 0), (1, 15), (2, 15)]);
    assert_eq!(lost, vec![3]);
}

/// `mm-link`'s CoDel queue, by hand (RFC 8289; target 4.5 ms, interval 100 ms): 200 frames
/// of 1500 bytes at once on 12 Mbit/s (1 ms each); frame k starts at k ms (a few ps
/// earlier each: the rate's fixed point), its sojourn k ms. Frame 5 is the first above
/// target (first_above_time ≈ 105 ms); frame 105 is judged just before it, frame 106, at
/// 106 ms > 105 ms, is dropped and CoDel enters its dropping state (next signal due at
/// 206 ms); frame 107 takes its place at 106 ms and is sent; the queue empties at 199 ms,
/// before the next drop is due. One drop; the others leave back to back.
#[test]
fn a_codel_queue_drops_as_rfc_8289_schedules() {
    let cfg = EmuConfig {
        rate_bps: Some(12_000_000),
        limit_packets: Some(1000),
        codel: Some(crate::emulate::QueueCodel {
            target: Duration::from_micros(4500),
            interval: Duration::from_millis(100),
            ecn: false,
        }),
        ..EmuConfig::default()
    };
    let (out, lost) = path_run(cfg, &[0; 200], 1500);
    assert!(lost.is_empty());
    let ids: Vec<usize> = out.iter().map(|o| o.0).collect();
    assert_eq!(ids.len(), 199);
    let missing: Vec<usize> = (0..200).filter(|k| !ids.contains(k)).collect();
    assert_eq!(missing, vec![106], "frame 106 dropped");
    let at = |k: usize| out.iter().find(|o| o.0 == k).unwrap().1 / MS_NS;
    assert_eq!((at(0), at(105), at(107), at(199)), (1, 106, 107, 199));
    // the same on a link without CoDel: nothing dropped, the last at 200 ms
    let plain = EmuConfig {
        rate_bps: Some(12_000_000),
        limit_packets: Some(1000),
        ..EmuConfig::default()
    };
    let (out, _) = path_run(plain, &[0; 200], 1500);
    assert_eq!((out.len(), out.last().unwrap().1 / MS_NS), (200, 200));
}
