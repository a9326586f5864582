//! Tests of the flow queue: DRR++ order and fairness, the RFC 8290 rule, host isolation,
//! the limits, the AQMs on flows, counters and invariants under random traffic.

use super::*;
use crate::qdisc::Counted;
use crate::rng::Rng;
use crate::time::Duration;
use core::net::Ipv4Addr;
use proptest::prelude::*;
use weir_wire::build::{self, EthSpec, Ipv4Spec};
use weir_wire::ecn::ecn_field;
use weir_wire::ip::ecn::{CE, ECT0, NOT_ECT};

const MS: u64 = 1_000_000;

/// A flow of the tests: source host, destination host, source port.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct F(u8, u8, u16);

impl F {
    fn hash(self) -> u64 {
        mix64((self.0 as u64) << 32 | (self.1 as u64) << 16 | self.2 as u64)
    }
}

struct Bench {
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    now: Instant,
}

impl Bench {
    fn new() -> Self {
        Self::with_slot(96)
    }

    /// A bench whose pool slots hold `slot` bytes of frame.
    fn with_slot(slot: usize) -> Self {
        Bench {
            pool: Pool::new(20_000, slot),
            rng: Rng::new(3),
            dropped: Vec::new(),
            now: Instant::ZERO,
        }
    }

    /// A UDP frame of flow `f` from 10.0.0.<src> to 10.1.0.<dst>, `len` bytes on the
    /// wire (the slot holds its headers), with `ecn`, arriving now.
    fn pkt(&mut self, f: F, len: u32, ecn: u8) -> PktId {
        let p = self.pool.alloc().expect("pool");
        let ip = Ipv4Spec {
            src: Ipv4Addr::new(10, 0, 0, f.0),
            dst: Ipv4Addr::new(10, 1, 0, f.1),
            ecn,
            ..Ipv4Spec::default()
        };
        build::udp_v4_frame(
            self.pool.slot_mut(p),
            &EthSpec::default(),
            &ip,
            f.2,
            9,
            b"x",
        )
        .unwrap();
        let m = self.pool.meta_mut(p);
        (m.len, m.flow, m.arrival) = (len, f.hash(), self.now);
        p
    }

    fn cx(&mut self) -> Ctx<'_> {
        Ctx::new(self.now, &mut self.pool, &mut self.rng, &mut self.dropped)
    }

    fn push(&mut self, q: &mut dyn Qdisc, f: F, len: u32) -> Result<(), DropCause> {
        self.push_ecn(q, f, len, NOT_ECT)
    }

    fn push_ecn(&mut self, q: &mut dyn Qdisc, f: F, len: u32, ecn: u8) -> Result<(), DropCause> {
        let p = self.pkt(f, len, ecn);
        let r = q.enqueue(p, &mut self.cx());
        if r.is_err() {
            self.pool.free(p);
        }
        r
    }

    /// Dequeue one packet: its flow hash, length and ECN field.
    fn pop(&mut self, q: &mut dyn Qdisc) -> Option<(u64, u32, u8)> {
        let p = q.dequeue(&mut self.cx())?;
        let m = self.pool.meta(p);
        let r = (m.flow, m.len, ecn_field(self.pool.data(p)).unwrap_or(0));
        self.pool.free(p);
        Some(r)
    }

    fn free_dropped(&mut self) -> Vec<DropCause> {
        let v: Vec<_> = self.dropped.drain(..).collect();
        v.iter().for_each(|&(p, _)| self.pool.free(p));
        v.into_iter().map(|(_, c)| c).collect()
    }
}

fn cfg(isolate: Isolation, aqm: AqmKind) -> FqConfig {
    FqConfig {
        isolate,
        aqm,
        ..FqConfig::default()
    }
}

fn fq<A: Aqm>(c: FqConfig) -> Fq<A> {
    Fq::new(c, 0x5eed).unwrap()
}

/// The list a flow's set puts it in.
fn which(set: Set) -> Option<Which> {
    match set {
        Set::Idle => None,
        Set::New => Some(Which::New),
        Set::OldWait | Set::Bulk => Some(Which::Old),
        Set::Decaying => Some(Which::Decaying),
    }
}

/// Every invariant of the module comment.
fn check<A: Aqm>(q: &Fq<A>) {
    let (mut len, mut bytes, mut active, mut bulk) = (0, 0, 0, 0);
    for (i, f) in q.flows.iter().enumerate() {
        len += f.q.len();
        bytes += f.q.bytes();
        active += !f.q.is_empty() as u32;
        bulk += (f.set == Set::Bulk) as u32;
        if !f.q.is_empty() {
            assert!(
                matches!(f.set, Set::New | Set::Bulk),
                "flow {i}: {:?}",
                f.set
            );
            let kept = (q.fat_left > 0).then(|| u64::MAX - f.q.bytes());
            assert_eq!(
                q.fat.key(i as u32),
                kept,
                "flow {i}, heap kept {}",
                q.fat_left
            );
        } else {
            assert_eq!(q.fat.key(i as u32), None);
        }
    }
    assert_eq!(
        (len, bytes, active, bulk),
        (q.len, q.bytes, q.active, q.bulk)
    );
    let mut listed = 0;
    for w in [Which::New, Which::Old, Which::Decaying] {
        if let (Some(r), Which::Old) = (&q.rounds, w) {
            // the calendar holds exactly the old flows, none before the current round
            for (i, f) in q.flows.iter().enumerate() {
                let key = r.heap.key(i as u32);
                assert_eq!(key.is_some(), which(f.set) == Some(w), "flow {i}");
                assert!(key.is_none_or(|k| k >> Rounds::SEQ_BITS >= r.round));
            }
            listed += r.heap.len() as u32;
            continue;
        }
        let l = &q.lists[w as usize];
        let (mut at, mut prev, mut n) = (l.head, NIL, 0);
        while at != NIL {
            let f = &q.flows[at as usize];
            assert_eq!(which(f.set), Some(w), "flow {at} in {w:?}");
            assert_eq!(f.prev, prev);
            (prev, at, n) = (at, f.next, n + 1);
        }
        assert_eq!((n, prev), (l.len, l.tail), "{w:?}");
        listed += n;
    }
    let idle = q.flows.iter().filter(|f| f.set == Set::Idle).count() as u32;
    assert_eq!(listed + idle, q.flows.len() as u32);
    if let Some(h) = &q.hosts {
        for (t, of) in [(&h.src, &h.src_of), (&h.dst, &h.dst_of)] {
            let Some(t) = t else { continue };
            let mut want = vec![0u32; t.load.len()];
            for (i, f) in q.flows.iter().enumerate() {
                if f.loaded {
                    want[of[i] as usize] += 1;
                }
            }
            assert_eq!(t.load, want);
            assert_eq!(t.busy, want.iter().filter(|&&b| b > 0).count() as u32);
        }
    }
}

/// Bytes sent per group over `n` dequeues, the group of a packet by its flow hash.
fn shares(b: &mut Bench, q: &mut dyn Qdisc, n: usize, group: impl Fn(u64) -> usize) -> Vec<u64> {
    let mut out = vec![0u64; 4];
    for _ in 0..n {
        let (h, len, _) = b.pop(q).expect("backlogged");
        out[group(h)] += len as u64;
    }
    out
}

/// DRR shares bytes, not packets: 1500-byte and 300-byte flows, both backlogged, get
/// equal bytes (flow isolation, no AQM).
#[test]
fn drr_shares_bytes_equally() {
    let mut b = Bench::new();
    let mut q = fq::<NoAqm>(cfg(Isolation::Flow, AqmKind::None));
    let (big, small) = (F(1, 1, 1), F(1, 1, 2));
    for _ in 0..400 {
        b.push(&mut q, big, 1500).unwrap();
    }
    for _ in 0..2000 {
        b.push(&mut q, small, 300).unwrap();
    }
    check(&q);
    let s = shares(&mut b, &mut q, 1200, |h| (h == small.hash()) as usize);
    let ratio = s[0] as f64 / s[1] as f64;
    assert!((ratio - 1.0).abs() < 0.01, "{s:?}");
    check(&q);
}

/// A new (sparse) flow's packet goes before the bulk flow's backlog. RFC 8290's rule:
/// the new flow, found empty while an old flow waits, goes to the end of the old list, so
/// a packet it sends before the old list comes round to it waits there (no second
/// new-flow priority); with COBALT it decays instead and its next packet is new again
/// (CAKE). The bulk flow's quantum is large so that it is served, not rotated, when the
/// new flow moves behind it.
#[test]
fn sparse_flows_first_and_the_rfc_rule() {
    for aqm in [AqmKind::Codel, AqmKind::Cobalt] {
        let mut b = Bench::new();
        let c = FqConfig {
            quantum: 65_535,
            ..cfg(Isolation::Flow, aqm)
        };
        let mut q: Box<dyn Qdisc> = c.build(1).unwrap();
        let (bulk, sparse, other) = (F(1, 1, 1), F(2, 1, 1), F(3, 1, 1));
        for _ in 0..100 {
            b.push(&mut *q, bulk, 1500).unwrap();
        }
        // 44 x 1500 > 65,535: the 45th dequeue refills the bulk flow and moves it to the
        // old list
        for _ in 0..45 {
            assert_eq!(b.pop(&mut *q).unwrap().0, bulk.hash());
        }
        assert_eq!(q.aqm_stats().unwrap().bulk_flows, 1);
        b.push(&mut *q, sparse, 100).unwrap();
        assert_eq!(b.pop(&mut *q).unwrap().0, sparse.hash(), "{aqm:?}");
        // the sparse flow is found empty, then the bulk flow is served
        assert_eq!(b.pop(&mut *q).unwrap().0, bulk.hash());
        let s = q.aqm_stats().unwrap();
        assert_eq!(s.new_flows, 2);
        match aqm {
            AqmKind::Codel => assert_eq!((s.sparse_flows, s.decaying_flows), (1, 0)),
            _ => assert_eq!((s.sparse_flows, s.decaying_flows), (0, 1)),
        }
        // the sparse flow's second packet, then a brand-new flow's
        b.push(&mut *q, sparse, 100).unwrap();
        b.push(&mut *q, other, 100).unwrap();
        let first = b.pop(&mut *q).unwrap().0;
        let s = q.aqm_stats().unwrap();
        if aqm == AqmKind::Codel {
            assert_eq!(first, other.hash(), "the old flow waits");
            assert_eq!(s.new_flows, 3);
            assert_eq!(s.bulk_flows, 2, "the sparse flow is bulk now");
        } else {
            assert_eq!(first, sparse.hash(), "a decayed flow is new again");
            assert_eq!(s.new_flows, 4);
        }
    }
}

fn host_shares(isolate: Isolation, flows: &[F], group: impl Fn(F) -> usize) -> Vec<u64> {
    let mut b = Bench::new();
    let mut q = fq::<NoAqm>(FqConfig {
        quantum: 1514,
        ..cfg(isolate, AqmKind::None)
    });
    // enough that no flow runs dry in the 1000 packets measured
    for _ in 0..700 {
        for &f in flows {
            b.push(&mut q, f, 1500).unwrap();
        }
    }
    check(&q);
    let by_hash: Vec<(u64, usize)> = flows.iter().map(|&f| (f.hash(), group(f))).collect();
    // hosts mode: one queue per host, the flows inside it in arrival order
    let s = shares(&mut b, &mut q, 1000, |h| {
        by_hash.iter().find(|&&(x, _)| x == h).unwrap().1
    });
    check(&q);
    s
}

/// Host A has one flow, host B four. `flow` isolation gives B 4/5 of the bytes; the host
/// modes give each host half, whatever its number of flows.
#[test]
fn host_isolation_shares_hosts_first() {
    let near = |s: &[u64], want: f64| {
        let share = s[0] as f64 / (s[0] + s[1]) as f64;
        assert!((share - want).abs() < 0.02, "{s:?}: {share} vs {want}");
    };
    // by source host (same destination)
    let src: Vec<F> = [F(1, 9, 1), F(2, 9, 1), F(2, 9, 2), F(2, 9, 3), F(2, 9, 4)].into();
    let by_src = |f: F| (f.0 == 2) as usize;
    near(&host_shares(Isolation::Flow, &src, by_src), 0.2);
    near(&host_shares(Isolation::DualSrc, &src, by_src), 0.5);
    near(&host_shares(Isolation::SrcHost, &src, by_src), 0.5);
    // triple with one destination: that host has five bulk flows, so every flow's
    // quantum is divided by five and flows share equally (CAKE's max of the two loads)
    near(&host_shares(Isolation::Triple, &src, by_src), 0.2);
    // by destination host (same source)
    let dst: Vec<F> = [F(9, 1, 1), F(9, 2, 1), F(9, 2, 2), F(9, 2, 3), F(9, 2, 4)].into();
    let by_dst = |f: F| (f.1 == 2) as usize;
    near(&host_shares(Isolation::DualDst, &dst, by_dst), 0.5);
    near(&host_shares(Isolation::DstHost, &dst, by_dst), 0.5);
    near(&host_shares(Isolation::DualSrc, &dst, by_dst), 0.2);
    // triple: A talks to C, B to D: each flow's load is its hosts' larger one
    let pairs: Vec<F> = [F(1, 1, 1), F(2, 2, 1), F(2, 2, 2), F(2, 2, 3), F(2, 2, 4)].into();
    let by_pair = |f: F| (f.0 == 2) as usize;
    near(&host_shares(Isolation::Triple, &pairs, by_pair), 0.5);
    near(&host_shares(Isolation::Hosts, &pairs, by_pair), 0.5);
}

/// A host with 300 bulk flows against a host with one (`dual-src`): each of the 300 gets
/// 5 bytes of quantum a round, so a 1500-byte packet takes it 300 rounds. DRR would visit
/// all 301 flows in each of the ~3,000 rounds the 6,000 packets measured take (~900,000
/// visits); the calendar jumps a flow straight to the round it can send in: the hosts
/// still share equally, with about two flow visits a packet (a refill and a send). (The
/// 300 flows turn bulk together and so come due in the same rounds, every ~300: the
/// window spans ten such cycles from the middle of one to the middle of another.)
#[test]
fn divided_quanta_skip_rounds() {
    let mut b = Bench::new();
    let mut q = fq::<NoAqm>(FqConfig {
        quantum: 1514,
        flows: 4096,
        ..cfg(Isolation::DualSrc, AqmKind::None)
    });
    let many: Vec<F> = (0..300).map(|k| F(2, 9, k)).collect();
    for _ in 0..20 {
        for &f in &many {
            b.push(&mut q, f, 1500).unwrap();
        }
    }
    for _ in 0..4000 {
        b.push(&mut q, F(1, 9, 1), 1500).unwrap();
    }
    // settle: every flow turns bulk (300 pops from the new list, then the lone flow's
    // ~300 rounds alone), the 300 come due together (300 pops), and the window starts
    // half way through the lone flow's next ~300 rounds alone
    for _ in 0..1050 {
        b.pop(&mut q).unwrap();
    }
    check(&q);
    let (r0, p0) = (q.rounds.as_ref().unwrap().round, q.picks);
    let lone = F(1, 9, 1).hash();
    let s = shares(&mut b, &mut q, 6000, |h| (h != lone) as usize);
    let share = s[0] as f64 / (s[0] + s[1]) as f64;
    assert!((share - 0.5).abs() < 0.02, "{s:?}");
    let rounds = q.rounds.as_ref().unwrap().round - r0;
    let picks = q.picks - p0;
    assert!((2850..3150).contains(&rounds), "{rounds} rounds");
    assert!(
        picks <= 2 * 6000 + 10,
        "{picks} flow visits for 6000 packets"
    );
    check(&q);
}

/// The host-keyed modes put all of a host's flows in one queue; the dual modes count the
/// hosts with bulk flows.
#[test]
fn host_counts_and_queues() {
    let flows = [F(1, 9, 1), F(2, 9, 1), F(2, 9, 2), F(2, 9, 3)];
    for (iso, active, src_hosts, dst_hosts) in [
        (Isolation::SrcHost, 2, 0, 0),
        (Isolation::DstHost, 1, 0, 0),
        (Isolation::Hosts, 2, 0, 0),
        (Isolation::Flow, 4, 0, 0),
        (Isolation::DualSrc, 4, 2, 0),
        (Isolation::DualDst, 4, 0, 1),
        (Isolation::Triple, 4, 2, 1),
    ] {
        let mut b = Bench::new();
        let mut q = fq::<Cobalt>(cfg(iso, AqmKind::Cobalt));
        for _ in 0..10 {
            for f in flows {
                b.push(&mut q, f, 1000).unwrap();
            }
        }
        // serve a round so that the flows turn bulk (no queue runs dry)
        for _ in 0..8 {
            b.pop(&mut q).unwrap();
        }
        check(&q);
        let s = q.stats();
        assert_eq!(s.active_flows, active, "{iso:?}");
        assert_eq!(
            (s.src_hosts, s.dst_hosts),
            (src_hosts, dst_hosts),
            "{iso:?}"
        );
        assert_eq!(s.max_flows_seen, active);
    }
}

/// Over the byte limit, the fattest flow loses its head; a light flow is untouched; an
/// arrival that would itself be the fattest flow's head is refused.
#[test]
fn memory_limit_drops_from_the_fattest_flow() {
    let mut b = Bench::new();
    let mut q = Counted::new(Box::new(fq::<Cobalt>(FqConfig {
        limit_bytes: 15_000,
        ..cfg(Isolation::Flow, AqmKind::Cobalt)
    })));
    let (hog, light) = (F(1, 1, 1), F(2, 1, 1));
    for _ in 0..10 {
        b.push(&mut q, hog, 1500).unwrap();
    }
    assert!(b.free_dropped().is_empty());
    b.push(&mut q, light, 100).unwrap();
    assert_eq!(b.free_dropped(), vec![DropCause::Overlimit]);
    assert_eq!(q.bytes(), 9 * 1500 + 100);
    // the hog's next packet: its head goes, the arrival stays
    b.push(&mut q, hog, 1500).unwrap();
    assert_eq!(b.free_dropped(), vec![DropCause::Overlimit]);
    // a new flow bigger than the hog's backlog is refused
    let mut q2 = fq::<NoAqm>(FqConfig {
        limit_bytes: 3_000,
        ..cfg(Isolation::Flow, AqmKind::None)
    });
    b.push(&mut q2, hog, 1000).unwrap();
    b.push(&mut q2, hog, 1000).unwrap();
    assert_eq!(b.push(&mut q2, light, 2500), Err(DropCause::Overlimit));
    assert!(b.free_dropped().is_empty());
    assert_eq!(q2.bytes(), 2000);
    check(&q2);
    q.check().unwrap();
    let s = q.aqm_stats().unwrap();
    assert_eq!(s.overlimit_dropped, 2);
    assert_eq!(q.stats.drops_by(DropCause::Overlimit).packets, 2);
}

/// The fattest-flow heap exists only near overflows (CAKE's `overflow_timeout`): none
/// before the first, built from every bucket by it, kept exact for 65,535 dequeues after
/// the last, then dropped — and a later overflow, built afresh, still finds the flow that
/// grew fattest while it was not kept.
#[test]
fn the_fattest_flow_heap_is_kept_only_near_overflows() {
    let mut b = Bench::new();
    let mut q = fq::<NoAqm>(FqConfig {
        limit_packets: 6,
        ..cfg(Isolation::Flow, AqmKind::None)
    });
    let (a, c) = (F(1, 1, 1), F(2, 1, 1));
    for _ in 0..3 {
        b.push(&mut q, a, 100).unwrap();
    }
    assert_eq!((q.fat_left, q.fat.len()), (0, 0), "no overflow yet");
    for _ in 0..4 {
        b.push(&mut q, c, 200).unwrap();
    }
    assert_eq!(b.free_dropped(), vec![DropCause::Overlimit]);
    assert_eq!(q.fat_left, Fq::<NoAqm>::FAT_KEPT);
    assert_eq!(q.fat.len(), 2, "both flows, built from the buckets");
    check(&q);
    // one packet in, one out, until the heap is dropped
    for k in 0..Fq::<NoAqm>::FAT_KEPT {
        b.pop(&mut q).unwrap();
        b.push(&mut q, if k % 2 == 0 { a } else { c }, 100).unwrap();
        assert!(b.free_dropped().is_empty());
        if k % 4096 == 0 {
            check(&q);
        }
    }
    assert_eq!((q.fat_left, q.fat.len()), (0, 0));
    check(&q);
    // flow a grows fattest while no heap is kept; the next overflow takes its head
    while q.len() > 2 {
        b.pop(&mut q).unwrap();
    }
    for _ in 0..4 {
        b.push(&mut q, a, 1000).unwrap();
    }
    let fat = q.bucket(b.pkt(a, 1, 0), &b.pool);
    let bytes = q.flows[fat as usize].q.bytes();
    b.push(&mut q, c, 100).unwrap();
    assert_eq!(b.free_dropped(), vec![DropCause::Overlimit]);
    assert!(
        q.flows[fat as usize].q.bytes() < bytes,
        "the fattest flow lost its head"
    );
    assert_eq!(q.fat_left, Fq::<NoAqm>::FAT_KEPT);
    check(&q);
}

/// The packet limit, and BLUE's probability raised by the overflow.
#[test]
fn packet_limit_and_blue() {
    let mut b = Bench::new();
    let mut q = fq::<Cobalt>(FqConfig {
        limit_packets: 5,
        ..cfg(Isolation::Flow, AqmKind::Cobalt)
    });
    b.now = Instant(10 * MS);
    for _ in 0..5 {
        b.push(&mut q, F(1, 1, 1), 500).unwrap();
    }
    b.push(&mut q, F(2, 1, 1), 500).unwrap();
    assert_eq!(b.free_dropped(), vec![DropCause::Overlimit]);
    assert_eq!(q.len(), 5);
    let i = q.bucket(b.pkt(F(1, 1, 1), 1, 0), &b.pool);
    assert_eq!(q.flows[i as usize].aqm.p_drop(), 1 << 24);
    check(&q);
}

/// FQ-CoDel and FQ-COBALT with a standing queue in one flow (two packets in per one out
/// each ms) and a sparse flow beside it: the fat flow's ECT packets get CE, the sparse
/// flow's never; with not-ECT packets the fat flow loses packets instead.
#[test]
fn aqm_signals_the_fat_flow_only() {
    for aqm in [AqmKind::Codel, AqmKind::Cobalt] {
        for ecn in [ECT0, NOT_ECT] {
            let mut b = Bench::new();
            let mut q = Counted::new(cfg(Isolation::Flow, aqm).build(7).unwrap());
            let (fat, thin) = (F(1, 1, 1), F(2, 1, 1));
            let (mut ce_fat, mut ce_thin, mut sent_thin) = (0, 0, 0);
            for t in 0..600u64 {
                b.now = Instant(t * MS);
                b.push_ecn(&mut q, fat, 1500, ecn).unwrap();
                b.push_ecn(&mut q, fat, 1500, ecn).unwrap();
                if t % 20 == 0 {
                    b.push_ecn(&mut q, thin, 200, ecn).unwrap();
                }
                let (h, _, e) = b.pop(&mut q).unwrap();
                if h == thin.hash() {
                    sent_thin += 1;
                    ce_thin += (e == CE) as u32;
                } else {
                    ce_fat += (e == CE) as u32;
                }
                for c in b.free_dropped() {
                    assert_eq!(c, DropCause::Aqm);
                }
                q.check().unwrap();
            }
            let s = q.aqm_stats().unwrap();
            assert_eq!(sent_thin, 30, "{aqm:?}");
            assert_eq!(ce_thin, 0);
            if ecn == ECT0 {
                assert!(ce_fat >= 5, "{aqm:?}: {ce_fat}");
                assert_eq!((s.ecn_marked, s.aqm_dropped), (ce_fat as u64, 0));
            } else {
                assert!(s.aqm_dropped >= 5, "{aqm:?}: {s:?}");
                assert_eq!(s.aqm_dropped, q.stats.drops_by(DropCause::Aqm).packets);
            }
        }
    }
}

/// The ACK filter's hook: any queued packet of a flow can be taken out (here the middle
/// one of three), with the counters, the heap and the order of the others kept.
#[test]
fn unlink_after_takes_a_packet_from_the_middle() {
    let mut b = Bench::new();
    let mut q = fq::<Cobalt>(cfg(Isolation::Flow, AqmKind::Cobalt));
    let f = F(1, 1, 1);
    let ids: Vec<PktId> = (0..3)
        .map(|k| {
            let p = b.pkt(f, 100 + k, NOT_ECT);
            q.enqueue(p, &mut b.cx()).unwrap();
            p
        })
        .collect();
    let i = q.bucket(ids[0], &b.pool);
    let mut cx = Ctx::new(b.now, &mut b.pool, &mut b.rng, &mut b.dropped);
    assert_eq!(
        q.unlink_after(i, Some(ids[0]), &mut cx, DropCause::AckFilter),
        Some(ids[1])
    );
    assert_eq!(b.dropped, vec![(ids[1], DropCause::AckFilter)]);
    assert_eq!((q.len(), q.bytes()), (2, 100 + 102));
    check(&q);
    assert_eq!(b.pop(&mut q).unwrap().1, 100);
    assert_eq!(b.pop(&mut q).unwrap().1, 102);
    assert!(b.pop(&mut q).is_none());
    check(&q);
}

#[test]
fn purge_empties_everything() {
    let mut b = Bench::new();
    let mut q = Counted::new(cfg(Isolation::Triple, AqmKind::Cobalt).build(1).unwrap());
    for k in 0..60u16 {
        b.push(&mut q, F((k % 5) as u8, (k % 3) as u8, k), 200)
            .unwrap();
    }
    q.purge(&mut b.cx(), DropCause::Shutdown);
    assert_eq!(b.free_dropped().len(), 60);
    assert_eq!((q.len(), q.bytes()), (0, 0));
    q.check().unwrap();
    assert!(b.pop(&mut q).is_none());
    assert_eq!(b.pool.in_use(), 0);
}

/// CAKE's defaults for a rate, and the error strings of impossible values.
#[test]
fn config_defaults_and_validation() {
    let c = FqConfig::default();
    assert_eq!(
        (c.flows, c.quantum, c.limit_packets, c.limit_bytes),
        (1024, 1514, 10_240, 10_240 * 1514)
    );
    assert_eq!((c.isolate, c.aqm), (Isolation::Triple, AqmKind::Cobalt));
    // 1 Mbit/s = 125,000 B/s: quantum max(min(30, 1514), 300) = 300; memory 4 MiB
    let c = FqConfig::for_rate(Some(Rate::from_bps(1_000_000)));
    assert_eq!((c.quantum, c.limit_bytes), (300, 4 << 20));
    assert_eq!(c.params.target.0, 18_168_000);
    // 10 Mbit/s: 1,250,000 >> 12 = 305
    assert_eq!(
        FqConfig::for_rate(Some(Rate::from_bps(10_000_000))).quantum,
        305
    );
    // 100 Mbit/s: 3051 -> 1514; 4 x 12.5 MB/s x 0.1 s = 5 MB
    let c = FqConfig::for_rate(Some(Rate::from_bps(100_000_000)));
    assert_eq!((c.quantum, c.limit_bytes), (1514, 5_000_000));
    // 1 Gbit/s: 50 MB, capped by 10,240 x 1514
    let c = FqConfig::for_rate(Some(Rate::from_bps(1_000_000_000)));
    assert_eq!(c.limit_bytes, 15_503_360);
    let ok = FqConfig::default();
    let bad = |c: FqConfig| c.build(0).err().unwrap();
    assert_eq!(
        bad(FqConfig {
            flows: 0,
            ..ok.clone()
        }),
        "flows: 0 is out of range (1 to 16777216 buckets)"
    );
    assert_eq!(
        bad(FqConfig {
            quantum: 100,
            ..ok.clone()
        }),
        "quantum: 100 bytes is out of range (256 to 65535)"
    );
    assert_eq!(
        bad(FqConfig {
            limit_packets: 0,
            ..ok.clone()
        }),
        "limit: a queue must hold at least one packet"
    );
    assert_eq!(
        bad(FqConfig {
            limit_bytes: 1000,
            ..ok.clone()
        }),
        "limit: 1000 bytes cannot hold one 1514-byte frame"
    );
    let mut c = ok.clone();
    c.params.target = Duration::from_millis(150);
    assert!(bad(c).starts_with("aqm: target (150.000ms) must be shorter"));
    for iso in Isolation::ALL {
        assert_eq!(Isolation::parse(iso.name()), Ok(iso));
    }
    assert!(Isolation::parse("triple-isolate")
        .unwrap_err()
        .contains("\"triple\""));
    // buckets round up to whole sets; memory per bucket
    let q = fq::<Cobalt>(FqConfig {
        flows: 1001,
        isolate: Isolation::Flow,
        ..ok.clone()
    });
    assert_eq!(q.config().flows, 1008);
    assert_eq!(core::mem::size_of::<Flow<Cobalt>>(), 72);
    assert_eq!(q.bytes_per_flow(), 100);
    assert_eq!(fq::<Cobalt>(ok).bytes_per_flow(), 152);
}

/// Random traffic: every AQM and isolation mode keeps the counter identities of
/// `Counted` and every invariant after every operation, and hands back every packet.
fn random_traffic<A: Aqm>(seed: u64, isolate: Isolation, ops: usize) {
    let mut b = Bench::new();
    let mut drive = Rng::new(seed);
    let c = FqConfig {
        flows: 64,
        limit_packets: 150,
        limit_bytes: 60_000,
        quantum: 300,
        isolate,
        ..FqConfig::default()
    };
    let mut q = Counted::new(Box::new(fq::<A>(c)));
    for _ in 0..ops {
        b.now += Duration(drive.below(3 * MS));
        if drive.chance(0.55) {
            let f = F(
                drive.below(6) as u8,
                drive.below(4) as u8,
                drive.below(40) as u16,
            );
            let len = 64 + drive.below(1451) as u32;
            let ecn = drive.below(4) as u8;
            let _ = b.push_ecn(&mut q, f, len, ecn);
        } else {
            b.pop(&mut q);
        }
        b.free_dropped();
        q.check().unwrap();
        check(q.inner.as_ref());
    }
    let s = q.aqm_stats().unwrap();
    // the traffic exercises the AQMs (marks and drops) or, without one, the limits
    let aqm = core::any::type_name::<A>() != core::any::type_name::<NoAqm>();
    assert_eq!(
        aqm,
        s.ecn_marked > 0 && s.aqm_dropped > 0,
        "{isolate:?}: {s:?}"
    );
    assert!(aqm || s.overlimit_dropped > 0, "{isolate:?}: {s:?}");
    assert_eq!(
        s.aqm_dropped,
        q.stats.drops_by(DropCause::Aqm).packets,
        "{isolate:?}"
    );
    assert_eq!(
        s.overlimit_dropped,
        q.stats.drops_by(DropCause::Overlimit).packets
    );
    q.purge(&mut b.cx(), DropCause::Shutdown);
    b.free_dropped();
    q.check().unwrap();
    check(q.inner.as_ref());
    assert_eq!(b.pool.in_use(), 0);
}

#[test]
fn random_traffic_keeps_counters_and_invariants() {
    for (k, iso) in Isolation::ALL.into_iter().enumerate() {
        random_traffic::<NoAqm>(k as u64, iso, 3000);
        random_traffic::<Codel>(k as u64, iso, 3000);
        random_traffic::<Cobalt>(k as u64, iso, 3000);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn random_traffic_any_seed(seed in any::<u64>(), iso in 0usize..7) {
        random_traffic::<Cobalt>(seed, Isolation::ALL[iso], 1500);
        random_traffic::<Codel>(seed, Isolation::ALL[iso], 1500);
    }
}

mod ack;

/// Host B's 16 flows are thin and intermittent (each holds 0-2 packets, refilled at
/// random, as flows at a small window are), host A's one flow is always backlogged: with
/// `triple` (A and B talk to different far hosts) the hosts still share half and half
/// whenever B offers at least its half — B's load changes from packet to packet, and a
/// flow's shares must follow it.
#[test]
fn hosts_share_equally_when_the_many_flows_are_intermittent() {
    for isolate in [Isolation::Triple, Isolation::DualSrc] {
        let mut b = Bench::new();
        let mut q = fq::<NoAqm>(FqConfig {
            quantum: 305,
            ..cfg(isolate, AqmKind::None)
        });
        let a = F(1, 1, 1);
        let bs: Vec<F> = (0..16).map(|k| F(2, 2, k)).collect();
        let mut held = [0u32; 16];
        let mut held_a = 0u32;
        let mut rng = Rng::new(11);
        let (mut got_a, mut got_b) = (0u64, 0u64);
        for step in 0..200_000u32 {
            // A: always 4 packets queued; B's flows: each refilled with probability 1/28
            // a step up to 2 packets (together more than half the departures)
            while held_a < 4 {
                b.push(&mut q, a, 1500).unwrap();
                held_a += 1;
            }
            for (k, &f) in bs.iter().enumerate() {
                if held[k] < 2 && rng.below(28) == 0 {
                    b.push(&mut q, f, 1500).unwrap();
                    held[k] += 1;
                }
            }
            let Some((h, len, _)) = b.pop(&mut q) else {
                continue;
            };
            if h == a.hash() {
                held_a -= 1;
                if step > 20_000 {
                    got_a += len as u64;
                }
            } else {
                let k = bs.iter().position(|f| f.hash() == h).unwrap();
                held[k] -= 1;
                if step > 20_000 {
                    got_b += len as u64;
                }
            }
        }
        let share = got_a as f64 / (got_a + got_b) as f64;
        assert!((share - 0.5).abs() < 0.02, "{isolate:?}: A {share}");
    }
}

/// A host's load counts its flows that hold packets or pay back an overspent quantum, not
/// a sparse flow that sent within its quantum: a latency probe to the destination of a
/// host's one bulk flow does not halve that flow's quantum (`triple`; in `weir lab rrul`'s
/// `hosts` case the probes share the server with host A's upload).
#[test]
fn a_sparse_flow_does_not_count_in_its_hosts_loads() {
    let mut b = Bench::new();
    let mut q = fq::<NoAqm>(FqConfig {
        quantum: 1514,
        ..cfg(Isolation::Triple, AqmKind::None)
    });
    let dst_load = |q: &Fq<NoAqm>| -> u32 {
        let h = q.hosts.as_ref().unwrap();
        h.dst.as_ref().unwrap().load.iter().sum()
    };
    let (a, probe) = (F(1, 9, 1), F(3, 9, 1));
    // the bulk flow: three packets; two go from the new list (3000 bytes on 1514)
    for _ in 0..3 {
        b.push(&mut q, a, 1500).unwrap();
    }
    assert_eq!(dst_load(&q), 1);
    assert_eq!(b.pop(&mut q).unwrap().0, a.hash());
    assert_eq!(b.pop(&mut q).unwrap().0, a.hash());
    // a probe arrives and is sent within its quantum (A moves to the old list to pay
    // back): counted while it holds its packet, not after
    b.push(&mut q, probe, 100).unwrap();
    assert_eq!(dst_load(&q), 2, "held packets count");
    assert_eq!(b.pop(&mut q).unwrap().0, probe.hash(), "sparse first");
    assert_eq!(dst_load(&q), 1, "the probe owes nothing");
    check(&q);
    // A's last packet: A stays counted until it is found empty
    assert_eq!(b.pop(&mut q).unwrap().0, a.hash());
    assert_eq!(dst_load(&q), 1, "A paid back in the old list");
    check(&q);
    assert!(b.pop(&mut q).is_none());
    check(&q);
}
