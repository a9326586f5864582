use super::*;
use crate::classify::{Fields, Proto};
use core::net::Ipv4Addr;
use proptest::prelude::*;
use std::collections::HashMap;
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::tcp::{Packet, TcpFlags};

fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}

fn secs(n: u64) -> Instant {
    Instant(n * 1_000_000_000)
}

fn table(capacity: u32) -> ConnTable {
    ConnTable::new(ConnConfig {
        capacity,
        ..ConnConfig::default()
    })
    .unwrap()
}

fn udp(a: u32, sport: u16, b: u32, dport: u16) -> FlowKey {
    FlowKey::v4(
        Ipv4Addr::from(a),
        sport,
        Ipv4Addr::from(b),
        dport,
        Proto::UDP,
    )
}

fn tcp_key(a: u32, sport: u16, b: u32, dport: u16) -> FlowKey {
    FlowKey::v4(
        Ipv4Addr::from(a),
        sport,
        Ipv4Addr::from(b),
        dport,
        Proto::TCP,
    )
}

fn seg(flags: TcpFlags, seq: u32, ack: u32, len: u32) -> Segment {
    Segment {
        flags,
        seq,
        ack,
        window: 100,
        payload_len: len,
        ..Segment::default()
    }
}

const SYNACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);

#[test]
fn memory_per_connection() {
    let conn = core::mem::size_of::<Conn>();
    let t = table(131_072);
    let per_slot = t.memory_bytes() as f64 / t.capacity() as f64;
    eprintln!(
        "size_of: Conn {conn} B (FlowKey {} B + counters/times 40 B + TcpConn {} B); \
         table {} B for {} slots = {per_slot:.1} B/slot (index {} B/slot)",
        core::mem::size_of::<FlowKey>(),
        core::mem::size_of::<TcpConn>(),
        t.memory_bytes(),
        t.capacity(),
        (per_slot - conn as f64),
    );
    assert_eq!(conn, 160);
    assert_eq!(per_slot, 176.0);
}

/// Frames of one connection built on the wire, in both directions, through the table.
#[test]
fn reply_packets_find_the_same_entry() {
    let mut t = table(1024);
    let client = Ipv4Spec::default();
    let server = Ipv4Spec {
        src: client.dst,
        dst: client.src,
        ..client
    };
    let syn = TcpSpec {
        src_port: 40000,
        dst_port: 443,
        seq: 100,
        flags: TcpFlags::SYN,
        window: 64240,
        mss: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamps: Some((1, 0)),
        ..TcpSpec::default()
    };
    let synack = TcpSpec {
        src_port: 443,
        dst_port: 40000,
        seq: 700,
        ack: 101,
        flags: SYNACK,
        window: 65160,
        mss: Some(1380),
        window_scale: Some(10),
        sack_permitted: true,
        timestamps: Some((50, 1)),
        ..TcpSpec::default()
    };
    let ack = TcpSpec {
        src_port: 40000,
        dst_port: 443,
        seq: 101,
        ack: 701,
        flags: TcpFlags::ACK,
        window: 1000,
        timestamps: Some((31, 50)),
        ..TcpSpec::default()
    };
    let mut ids = Vec::new();
    for (spec, ip, at) in [(syn, client, 0), (synack, server, 10), (ack, client, 30)] {
        let mut buf = [0u8; 128];
        let n = build::tcp_v4_frame(&mut buf, &EthSpec::default(), &ip, &spec, &[]).unwrap();
        let p = weir_wire::parse_frame(&buf[..n]).unwrap();
        let key = FlowKey::from_parsed(&p).unwrap();
        let (id, side) = t.lookup_or_insert(&key, ms(at)).unwrap();
        assert_eq!(t.lookup(&key), Some((id, side)));
        t.observe(id, side, n as u32, ms(at));
        let s = Packet::new_checked(&buf[p.l4_offset.unwrap()..p.l3_end]).unwrap();
        t.observe_tcp(id, side, &s, p.payload_len(), ms(at));
        ids.push((id, side, n as u64));
    }
    let id = ids[0].0;
    assert!(ids.iter().all(|x| x.0 == id));
    assert_eq!(
        ids.iter().map(|x| x.1).collect::<Vec<_>>(),
        [Side::Orig, Side::Reply, Side::Orig]
    );
    let c = t.get(id);
    assert_eq!(c.orig(), (client.src.into(), 40000));
    assert_eq!(c.reply(), (server.src.into(), 443));
    assert_eq!((c.packets(Side::Orig), c.packets(Side::Reply)), (2, 1));
    assert_eq!(c.bytes(Side::Orig), ids[0].2 + ids[2].2);
    assert_eq!((c.first_seen(), c.last_seen()), (ms(0), ms(30)));
    let tc = c.tcp().unwrap();
    assert_eq!(tc.phase(), TcpPhase::Established);
    assert_eq!(
        (tc.mss(Side::Orig), tc.mss(Side::Reply)),
        (Some(1460), Some(1380))
    );
    assert_eq!(tc.window_scale(Side::Reply), Some(10));
    assert_eq!(tc.scaled_window(Side::Orig), Some(1000 << 7));
    assert_eq!(
        tc.handshake_rtt(Side::Reply),
        Some(Duration::from_millis(10))
    );
    assert_eq!(
        tc.handshake_rtt(Side::Orig),
        Some(Duration::from_millis(20))
    );
    assert_eq!(tc.handshake_rtt_total(), Some(Duration::from_millis(30)));
    let s = t.stats();
    assert_eq!((s.live, s.inserted, s.hits, s.misses), (1, 1, 2, 1));
    assert_eq!(s.rtt_samples, 2);
    t.check().unwrap();
}

#[test]
fn non_tcp_entries_have_no_tcp_state() {
    let mut t = table(8);
    let k = udp(1, 2, 3, 4);
    let (id, side) = t.lookup_or_insert(&k, ms(0)).unwrap();
    assert!(t.get(id).tcp().is_none());
    let r = t.observe_segment(id, side, &seg(TcpFlags::SYN, 1, 0, 0), ms(1));
    assert_eq!(r, Observed::default());
    assert_eq!(t.get(id).last_seen(), ms(0));
}

#[test]
fn hashed_variants_take_the_classifier_hash() {
    let mut t = ConnTable::new(ConnConfig {
        capacity: 16,
        seed: 0x5eed,
        ..ConnConfig::default()
    })
    .unwrap();
    let f = Fields::ip(
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
        Proto::TCP,
        Some(1),
        Some(2),
    );
    let k = FlowKey::from_fields(&f).unwrap();
    let h = f.flow_hash(0x5eed);
    assert_eq!(t.hash(&k), h);
    let (id, _) = t.lookup_or_insert_hashed(&k, h, ms(0)).unwrap();
    let r = FlowKey::from_fields(&f.reversed()).unwrap();
    assert_eq!(
        t.lookup_hashed(&r, f.reversed().flow_hash(0x5eed)),
        Some((id, Side::Reply))
    );
}

#[test]
fn eviction_when_full_prefers_unanswered_then_oldest() {
    let mut t = ConnTable::new(ConnConfig {
        capacity: 4,
        evict_candidates: 4,
        ..ConnConfig::default()
    })
    .unwrap();
    // Four UDP flows; all but flow 2 get a reply. Flow 0 is the oldest.
    let keys: Vec<FlowKey> = (0..4).map(|i| udp(10, 1000 + i, 20, 53)).collect();
    for (i, k) in keys.iter().enumerate() {
        let (id, side) = t.lookup_or_insert(k, ms(i as u64)).unwrap();
        t.observe(id, side, 100, ms(i as u64));
        if i != 2 {
            let (rid, rside) = t.lookup_or_insert(&k.reversed(), ms(i as u64)).unwrap();
            assert_eq!((rid, rside), (id, Side::Reply));
            t.observe(rid, rside, 100, ms(i as u64));
        }
    }
    assert_eq!(t.len(), 4);
    // A fifth flow evicts the unanswered one (2), although 0 is older.
    let k5 = udp(10, 2000, 20, 53);
    let (id5, side5) = t.lookup_or_insert(&k5, ms(10)).unwrap();
    assert_eq!(side5, Side::Orig);
    assert_eq!(t.lookup(&keys[2]), None, "the evicted entry is gone");
    for i in [0, 1, 3] {
        assert!(t.lookup(&keys[i]).is_some());
    }
    assert_eq!(t.get(id5).key(), &k5);
    let s = t.stats();
    assert_eq!((s.live, s.evicted, s.expired, s.inserted), (4, 1, 0, 5));
    t.check().unwrap();
    // The new flow 5 is unanswered now: the next insert evicts it, not an answered one.
    let k6 = udp(10, 3000, 20, 53);
    t.lookup_or_insert(&k6, ms(11)).unwrap();
    assert_eq!(t.lookup(&k5), None);
    // Answer flow 6; now all are answered and the oldest (flow 0) goes.
    let (id6, _) = t.lookup(&k6).unwrap();
    t.observe(id6, Side::Reply, 100, ms(12));
    let k7 = udp(10, 4000, 20, 53);
    t.lookup_or_insert(&k7, ms(13)).unwrap();
    assert_eq!(t.lookup(&keys[0]), None);
    assert!(t.lookup(&keys[1]).is_some());
    assert_eq!(t.stats().evicted, 3);
    // An entry idle past its timeout is taken first and counted as expired.
    let (id1, _) = t.lookup(&keys[1]).unwrap();
    t.get_mut(id1).observe(Side::Orig, 1, secs(100));
    for k in [&keys[3], &k6, &k7] {
        let (id, _) = t.lookup(k).unwrap();
        t.observe(id, Side::Orig, 1, secs(100));
    }
    let (id3, _) = t.lookup(&keys[3]).unwrap();
    // Make keys[3] old: re-create it at time 0 by removing and inserting.
    t.remove(id3);
    t.lookup_or_insert(&keys[3], secs(0)).unwrap();
    t.lookup_or_insert(&udp(10, 5000, 20, 53), secs(100))
        .unwrap();
    assert_eq!(t.lookup(&keys[3]), None);
    let s = t.stats();
    assert_eq!((s.evicted, s.expired, s.removed), (3, 1, 1));
    t.check().unwrap();
}

#[test]
fn eviction_prefers_closed_and_opening_tcp() {
    let mut t = ConnTable::new(ConnConfig {
        capacity: 3,
        evict_candidates: 3,
        ..ConnConfig::default()
    })
    .unwrap();
    let est = tcp_key(1, 1, 2, 80);
    let opening = tcp_key(1, 2, 2, 80);
    let closed = tcp_key(1, 3, 2, 80);
    for (i, k) in [est, opening, closed].iter().enumerate() {
        let (id, _) = t.lookup_or_insert(k, ms(10 - i as u64)).unwrap();
        t.observe_segment(id, Side::Orig, &seg(TcpFlags::SYN, 1, 0, 0), ms(10));
        if *k != opening {
            t.observe_segment(id, Side::Reply, &seg(SYNACK, 1, 2, 0), ms(10));
            t.observe_segment(id, Side::Orig, &seg(TcpFlags::ACK, 2, 2, 0), ms(10));
        }
        if *k == closed {
            t.observe_segment(id, Side::Reply, &seg(TcpFlags::RST, 2, 0, 0), ms(10));
        }
    }
    let phase = |t: &ConnTable, k: &FlowKey| t.get(t.lookup(k).unwrap().0).tcp().unwrap().phase();
    assert_eq!(phase(&t, &est), TcpPhase::Established);
    assert_eq!(phase(&t, &opening), TcpPhase::Opening);
    assert_eq!(phase(&t, &closed), TcpPhase::Closed);
    t.lookup_or_insert(&tcp_key(1, 4, 2, 80), ms(20)).unwrap();
    assert_eq!(t.lookup(&closed), None);
    t.lookup_or_insert(&tcp_key(1, 5, 2, 80), ms(20)).unwrap();
    // Both opening now: the older one goes.
    assert!(t.lookup(&opening).is_none());
    assert!(t.lookup(&tcp_key(1, 4, 2, 80)).is_some());
    assert!(t.lookup(&est).is_some(), "established connections go last");
    t.check().unwrap();
}

#[test]
fn idle_expiry_by_state_and_budget() {
    let mut t = table(64);
    // UDP, TCP opening, TCP established, TCP closed; all last seen at t = 0.
    let u = udp(1, 1, 2, 2);
    let (uid, _) = t.lookup_or_insert(&u, secs(0)).unwrap();
    let o = tcp_key(1, 1, 2, 2);
    let (oid, _) = t.lookup_or_insert(&o, secs(0)).unwrap();
    t.observe_segment(oid, Side::Orig, &seg(TcpFlags::SYN, 1, 0, 0), secs(0));
    let e = tcp_key(1, 2, 2, 2);
    let (eid, _) = t.lookup_or_insert(&e, secs(0)).unwrap();
    t.observe_segment(eid, Side::Orig, &seg(TcpFlags::ACK, 1, 1, 0), secs(0));
    t.observe_segment(eid, Side::Reply, &seg(TcpFlags::ACK, 1, 1, 0), secs(0));
    let c = tcp_key(1, 3, 2, 2);
    let (cid, _) = t.lookup_or_insert(&c, secs(0)).unwrap();
    t.observe_segment(cid, Side::Orig, &seg(TcpFlags::RST, 1, 0, 0), secs(0));
    let cfg = t.config().clone();
    assert_eq!(t.get(uid).timeout(&cfg), Duration::from_secs(30));
    assert_eq!(t.get(oid).timeout(&cfg), Duration::from_secs(30));
    assert_eq!(t.get(eid).timeout(&cfg), Duration::from_secs(300));
    assert_eq!(t.get(cid).timeout(&cfg), Duration::from_secs(10));

    assert_eq!(t.expire(secs(9), 64), 0);
    assert_eq!(t.expire(secs(10), 64), 1);
    assert!(t.lookup(&c).is_none());
    assert_eq!(t.expire(Instant(secs(30).0 - 1), 64), 0);
    // Traffic keeps an entry alive.
    t.lookup_or_insert(&u, secs(20)).unwrap();
    assert_eq!(t.expire(secs(30), 64), 1);
    assert!(t.lookup(&o).is_none() && t.lookup(&u).is_some());
    assert_eq!(t.expire(secs(50), 64), 1);
    assert_eq!(t.expire(secs(299), 64), 0);
    assert_eq!(t.expire(secs(300), 64), 1);
    assert!(t.is_empty());
    assert_eq!(t.stats().expired, 4);
    t.check().unwrap();

    // Bounded work: 40 idle UDP entries in slots 0..40, 16 slots examined per call.
    for i in 0..40 {
        t.lookup_or_insert(&udp(5, i, 6, 7), secs(1000)).unwrap();
    }
    let mut calls = Vec::new();
    for _ in 0..4 {
        calls.push(t.expire(secs(2000), 16));
    }
    assert_eq!(calls.iter().sum::<u32>(), 40);
    assert!(calls.iter().all(|&n| n <= 16));
    assert!(t.is_empty());
    assert_eq!(t.stats().expired, 44);
    t.check().unwrap();
}

#[test]
fn remove_and_slot_reuse() {
    let mut t = table(8);
    let a = udp(1, 1, 2, 2);
    let b = udp(1, 2, 2, 2);
    let (ia, _) = t.lookup_or_insert(&a, ms(0)).unwrap();
    let (ib, _) = t.lookup_or_insert(&b, ms(0)).unwrap();
    assert_ne!(ia, ib);
    assert!(t.remove(ia));
    assert!(!t.remove(ia));
    assert!(!t.is_live(ia) && t.is_live(ib));
    assert!(!t.is_live(ConnId(100)) && !t.is_live(ConnId::NONE));
    assert_eq!(t.lookup(&a), None);
    // The freed slot is reused first; the new entry is oriented by its first packet.
    let (ic, side) = t.lookup_or_insert(&a.reversed(), ms(5)).unwrap();
    assert_eq!((ic, side), (ia, Side::Orig));
    assert_eq!(t.get(ic).first_seen(), ms(5));
    assert_eq!(t.get(ic).packets(Side::Orig), 0);
    assert_eq!(t.lookup(&a), Some((ia, Side::Reply)));
    assert_eq!(t.iter().count(), 2);
    let s = t.stats();
    assert_eq!((s.live, s.inserted, s.removed), (2, 3, 1));
    t.check().unwrap();
}

#[test]
fn capacity_zero_and_bad_configs() {
    let mut t = table(0);
    assert_eq!(t.lookup_or_insert(&udp(1, 1, 2, 2), ms(0)), None);
    assert_eq!(t.expire(ms(0), 10), 0);
    assert!(t.check().is_ok());
    assert!(ConnTable::new(ConnConfig {
        capacity: MAX_CAPACITY + 1,
        ..ConnConfig::default()
    })
    .is_err());
    assert!(ConnTable::new(ConnConfig {
        evict_candidates: 0,
        ..ConnConfig::default()
    })
    .is_err());
    // One slot: every new flow evicts the previous one.
    let mut t = table(1);
    for i in 0..5 {
        t.lookup_or_insert(&udp(1, i, 2, 2), ms(i as u64)).unwrap();
    }
    assert_eq!(t.stats().evicted, 4);
    t.check().unwrap();
}

#[test]
fn a_long_silence_cancels_rtt_timings() {
    let mut t = table(4);
    let k = tcp_key(1, 1, 2, 2);
    let (id, _) = t.lookup_or_insert(&k, secs(0)).unwrap();
    t.observe_segment(id, Side::Orig, &seg(TcpFlags::ACK, 1, 1, 100), secs(0));
    assert!(t.get(id).tcp().unwrap().timing_pending(Side::Orig));
    // 2^32 µs later the wrapping timing clock reads the same: without the guard this
    // would be a 1 ms sample.
    let later = Instant((1u64 << 32) * 1000 + 1_000_000);
    let (id, side) = t.lookup_or_insert(&k.reversed(), later).unwrap();
    let r = t.observe_segment(id, side, &seg(TcpFlags::ACK, 1, 101, 0), later);
    assert_eq!(r.rtt_sample, None);
    assert_eq!(t.stats().rtt_samples, 0);
}

fn _stats_are_serializable() {
    fn ser<T: serde::Serialize>() {}
    ser::<ConnStats>();
}

#[derive(Clone, Debug)]
enum Op {
    /// lookup_or_insert of key `k` in orientation `rev`.
    Insert(u8, bool),
    Lookup(u8, bool),
    Remove(u8),
    Expire(u8),
}

fn ops(universe: u8) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..universe, any::<bool>()).prop_map(|(k, r)| Op::Insert(k, r)),
        3 => (0..universe, any::<bool>()).prop_map(|(k, r)| Op::Lookup(k, r)),
        2 => (0..universe).prop_map(Op::Remove),
        1 => (0u8..8).prop_map(Op::Expire),
    ];
    proptest::collection::vec(op, 1..300)
}

/// Key `k` of a small universe: v4 and v6, TCP and UDP, so keys collide in parts.
fn key(k: u8, rev: bool) -> FlowKey {
    let port = 1000 + (k % 7) as u16;
    let proto = [Proto::UDP, Proto::TCP, Proto::TCP][(k % 3) as usize];
    let a = (k / 7) as u128;
    let f = if k & 1 == 0 {
        FlowKey::new(
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + a as u32)),
            port,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99)),
            80,
            proto,
        )
    } else {
        FlowKey::new(
            IpAddr::V6((0x2001_0db8u128 << 96 | a).into()),
            port,
            IpAddr::V6((0x2001_0db8u128 << 96 | 99).into()),
            80,
            proto,
        )
    }
    .unwrap();
    if rev {
        f.reversed()
    } else {
        f
    }
}

/// Runs `ops` against a table of `capacity` and a HashMap model; with a small capacity
/// the model learns which key an eviction took by asking the table.
fn run_model(ops: Vec<Op>, capacity: u32, seed: u64) -> Result<(), TestCaseError> {
    let mut t = ConnTable::new(ConnConfig {
        capacity,
        seed,
        // Nothing expires unless an Expire op jumps past the timeouts.
        ..ConnConfig::default()
    })
    .unwrap();
    // key → (id, orientation of its first packet)
    let mut model: HashMap<FlowKey, (ConnId, FlowKey)> = HashMap::new();
    let mut now = Instant(0);
    let mut evictions = 0u64;
    let mut swept = 0u64;
    for op in ops {
        now += Duration::from_millis(1);
        match op {
            Op::Insert(k, rev) => {
                let key = key(k, rev);
                let got = t.lookup_or_insert(&key, now).unwrap();
                match model.get(&key) {
                    Some(&(id, first)) => {
                        let side = if first.same_orientation(&key) {
                            Side::Orig
                        } else {
                            Side::Reply
                        };
                        prop_assert_eq!(got, (id, side));
                    }
                    None => {
                        prop_assert_eq!(got.1, Side::Orig);
                        if model.len() == capacity as usize {
                            // Full: exactly one entry was evicted.
                            let gone: Vec<FlowKey> = model
                                .keys()
                                .filter(|k| t.lookup(k).is_none())
                                .copied()
                                .collect();
                            prop_assert_eq!(gone.len(), 1);
                            model.remove(&gone[0]);
                            evictions += 1;
                        }
                        prop_assert!(model.values().all(|v| v.0 != got.0), "id reused while live");
                        model.insert(key, (got.0, key));
                    }
                }
            }
            Op::Lookup(k, rev) => {
                let key = key(k, rev);
                let want = model.get(&key).map(|&(id, first)| {
                    (
                        id,
                        if first.same_orientation(&key) {
                            Side::Orig
                        } else {
                            Side::Reply
                        },
                    )
                });
                prop_assert_eq!(t.lookup(&key), want);
            }
            Op::Remove(k) => {
                let key = key(k, false);
                match model.remove(&key) {
                    Some((id, _)) => prop_assert!(t.remove(id)),
                    None => prop_assert_eq!(t.lookup(&key), None),
                }
            }
            Op::Expire(n) => {
                // Jump past every timeout now and then, then sweep a few slots.
                if n == 0 {
                    now += Duration::from_secs(400);
                }
                swept += t.expire(now, n as u32 * 4) as u64;
                model.retain(|k, _| t.lookup(k).is_some());
            }
        }
        prop_assert_eq!(t.len(), model.len());
    }
    t.check().map_err(TestCaseError::fail)?;
    // An eviction that takes an entry already idle past its timeout counts as expired.
    let s = t.stats();
    prop_assert_eq!(s.evicted + (s.expired - swept), evictions);
    for (k, &(id, first)) in &model {
        prop_assert_eq!(t.get(id).key(), k);
        prop_assert!(t.get(id).key().same_orientation(&first));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Large enough never to evict: the table behaves as a map.
    #[test]
    fn agrees_with_a_hashmap(ops in ops(60), seed: u64) {
        run_model(ops, 64, seed)?;
    }

    /// Small: clusters in the index, evictions, slot reuse.
    #[test]
    fn agrees_with_a_hashmap_under_eviction(ops in ops(40), seed: u64, cap in 1u32..12) {
        run_model(ops, cap, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The batch calls give exactly what one call per key gives, evictions included.
    #[test]
    fn batches_equal_single_calls(
        batches in proptest::collection::vec(
            proptest::collection::vec((0u8..50, any::<bool>()), 1..40), 1..20),
        cap in prop_oneof![1u32..12, Just(64u32)],
        seed: u64,
    ) {
        let cfg = ConnConfig { capacity: cap, seed, ..ConnConfig::default() };
        let mut one = ConnTable::new(cfg.clone()).unwrap();
        let mut many = ConnTable::new(cfg).unwrap();
        for (n, b) in batches.iter().enumerate() {
            let now = ms(n as u64);
            let keys: Vec<FlowKey> = b.iter().map(|&(k, r)| key(k, r)).collect();
            let want: Vec<_> = keys.iter().map(|k| one.lookup_or_insert(k, now)).collect();
            let mut got = vec![None; keys.len()];
            many.lookup_or_insert_batch(&keys, now, &mut got);
            prop_assert_eq!(&got, &want);
            // Read-only batch lookups of a shifted set of keys.
            let probe: Vec<FlowKey> = b.iter().map(|&(k, r)| key((k + 7) % 50, !r)).collect();
            let want: Vec<_> = probe.iter().map(|k| many.lookup(k)).collect();
            let mut got = vec![None; probe.len()];
            many.lookup_batch(&probe, &mut got);
            prop_assert_eq!(got, want);
        }
        prop_assert_eq!(one.stats(), many.stats());
        many.check().map_err(TestCaseError::fail)?;
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn batch_lengths_must_match() {
    let mut t = table(4);
    t.lookup_or_insert_batch(&[udp(1, 1, 2, 2)], ms(0), &mut []);
}
