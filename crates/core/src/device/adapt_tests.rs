//! The adaptive controller inside the device (`[adapt]`): ARP for the probe's source and
//! target, probes and their replies, the rate it applies, the fallback when replies stop.

use super::test_env::Env;
use super::*;
use crate::device::adapt::IDENT;
use crate::time::Duration;
use std::net::{IpAddr, Ipv4Addr};
use weir_wire::arp::{self, ArpSpec};
use weir_wire::build::{self, EthSpec, Ipv4Spec};
use weir_wire::ethernet::MacAddr;

const POLICY: &str = r#"
    [link]
    rate = "10Mbit"
    direction = "inbound"
    default = "c0"
    [[class]]
    name = "c0"
    rate = "5Mbit"
    [[class]]
    name = "c1"
    rate = "5Mbit"
    [adapt]
    mode = "postgate"
    target = "10.0.0.1"
    source = "10.0.0.254"
    interval = "20ms"
    timeout = "200ms"
"#;

const ROUTER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const WEIR: MacAddr = MacAddr([0x02, 0x77, 10, 0, 0, 254]);
const TARGET: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SOURCE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);

fn ms(x: u64) -> Instant {
    Instant(Duration::from_millis(x).as_nanos())
}

fn device() -> Device {
    Policy::parse("adapt.toml", POLICY)
        .unwrap()
        .build_device(Instant::ZERO)
        .unwrap()
}

/// Everything `dir` has due at `now`, parsed, freed.
fn sent(d: &mut Device, e: &mut Env, dir: Direction, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(p) = d.poll_transmit(dir, &mut e.cx(now)) {
        out.push(e.pool.data(p).to_vec());
        e.pool.free(p);
    }
    out
}

/// The router's frame `f` (written by `write`) arrives inbound at `at`.
fn arrive(
    d: &mut Device,
    e: &mut Env,
    at: Instant,
    write: impl FnOnce(&mut [u8]) -> weir_wire::Result<usize>,
) -> Result<(), DropCause> {
    let id = e.pool.alloc().unwrap();
    let n = write(e.pool.slot_mut(id)).unwrap();
    e.pool.meta_mut(id).len = n as u32;
    let r = d.ingress(Direction::Inbound, id, &mut e.cx(at), at);
    if r.is_err() {
        e.pool.free(id);
    }
    r
}

fn echo_reply(seq: u16, ident: u16) -> impl FnOnce(&mut [u8]) -> weir_wire::Result<usize> {
    echo_reply_from(seq, ident, TARGET)
}

/// An echo reply from `from` (through the router) to the probes' source.
fn echo_reply_from(
    seq: u16,
    ident: u16,
    from: Ipv4Addr,
) -> impl FnOnce(&mut [u8]) -> weir_wire::Result<usize> {
    move |buf| {
        let eth = EthSpec {
            src: ROUTER,
            dst: WEIR,
            vlan: None,
            pcp: 0,
        };
        let ip = Ipv4Spec {
            src: from,
            dst: SOURCE,
            ..Default::default()
        };
        build::icmp_echo_v4(buf, &eth, &ip, false, ident, seq, &[0x77; 56])
    }
}

fn router_arp_reply(buf: &mut [u8]) -> weir_wire::Result<usize> {
    let a = ArpSpec {
        operation: arp::REPLY,
        sender: (ROUTER, TARGET),
        target: (WEIR, SOURCE),
    };
    arp::frame(buf, &a)
}

/// Until the router's MAC is known the probe is an ARP request for it; its reply is
/// consumed, and from then on every interval brings an echo request to it, whose
/// replies give δ and `B` (δ = 50 ms: B = 1 − 0.05/2.5 = 0.98, eq. 2).
#[test]
fn probes_after_arp_and_replies_set_the_rate() {
    let mut e = Env::new();
    let mut d = device();
    let out = sent(&mut d, &mut e, Direction::Outbound, Instant::ZERO);
    assert_eq!(out.len(), 1);
    let a = arp::Packet::new_checked(&out[0][14..]).unwrap();
    assert_eq!(&out[0][..6], &[0xff; 6]);
    assert_eq!(a.operation(), arp::REQUEST);
    assert_eq!(
        (a.sender_mac(), a.sender_ip(), a.target_ip()),
        (WEIR, SOURCE, TARGET)
    );

    arrive(&mut d, &mut e, ms(1), router_arp_reply).unwrap();
    assert!(
        sent(&mut d, &mut e, Direction::Inbound, ms(1)).is_empty(),
        "consumed"
    );
    assert_eq!(d.consumed(Direction::Inbound).packets, 1);
    assert_eq!(
        d.adapt().unwrap().target_mac.as_deref(),
        Some("02:00:00:00:00:01")
    );

    assert_eq!(d.next_wakeup(), Some(ms(10))); // the first Δ sample
    assert!(sent(&mut d, &mut e, Direction::Outbound, ms(10)).is_empty());
    let out = sent(&mut d, &mut e, Direction::Outbound, ms(20));
    assert_eq!(out.len(), 1);
    let p = weir_wire::parse_frame(&out[0]).unwrap();
    assert_eq!(&out[0][..6], &ROUTER.0);
    assert_eq!(p.icmp_type, Some(weir_wire::icmp::ECHO_REQUEST));
    assert_eq!(
        (p.src_ip, p.dst_ip),
        (Some(SOURCE.into()), Some(TARGET.into()))
    );
    let m = weir_wire::icmp::Packet::new_checked(&out[0][p.l4_offset.unwrap()..p.l3_end]).unwrap();
    assert_eq!((m.echo_ident(), m.echo_seq_no()), (IDENT, 1));
    assert!(m.verify_checksum());

    arrive(&mut d, &mut e, ms(30), echo_reply(1, IDENT)).unwrap();
    let s = d.adapt().unwrap();
    assert_eq!(
        (s.counters.replies, s.min_rtt_ms, s.delay_ms),
        (1, Some(10.0), Some(0.0))
    );
    assert_eq!(s.rate_bps, 10_000_000);

    assert_eq!(sent(&mut d, &mut e, Direction::Outbound, ms(40)).len(), 1);
    arrive(&mut d, &mut e, ms(100), echo_reply(2, IDENT)).unwrap();
    let s = d.adapt().unwrap();
    assert!((s.rate_fraction - 0.98).abs() < 1e-9, "{}", s.rate_fraction);
    assert_eq!(s.rate_bps, 9_800_000);
    assert_eq!(s.classes.len(), 2);
    // weights unchanged (φ_0 = 0.5 each), so Σφ/Σφ_0 = 1 > B: eq. 3 scales both
    // assured rates onto B × line = 9.8 Mbit/s, 4.9 Mbit/s each
    assert_eq!((s.classes[0].weight, s.classes[1].weight), (0.5, 0.5));
    assert_eq!(
        (s.classes[0].rate_bps, s.classes[1].rate_bps),
        (4_900_000, 4_900_000)
    );
    assert_eq!(d.consumed(Direction::Inbound).packets, 3);
    assert!(!s.fallback);
}

/// Replies that stop: after `timeout` the link falls to the floor (50 % of the line)
/// and the shaper sends at 5 Mbit/s; the next reply resumes the controller.
#[test]
fn the_link_falls_back_to_the_floor_when_replies_stop_and_resumes() {
    let mut e = Env::new();
    let mut d = device();
    arrive(&mut d, &mut e, Instant::ZERO, router_arp_reply).unwrap();
    let mut now = Instant::ZERO;
    while now < ms(199) {
        sent(&mut d, &mut e, Direction::Outbound, now);
        now = d.next_wakeup().unwrap();
    }
    assert!(!d.adapt().unwrap().fallback);
    sent(&mut d, &mut e, Direction::Outbound, ms(200));
    let s = d.adapt().unwrap();
    assert!(s.fallback);
    assert_eq!((s.counters.fallbacks, s.rate_bps), (1, 5_000_000));
    assert!(s.counters.probes_sent >= 9);

    // a backlog of 100 full frames drains at the floor rate (within the buckets' depth
    // and one frame over the 200 ms)
    let start = ms(200);
    for k in 0..100 {
        let id = e.frame(k);
        d.ingress(Direction::Inbound, id, &mut e.cx(start), start)
            .unwrap();
    }
    let mut bytes = 0u64;
    let mut now = start;
    let end = start + Duration::from_millis(200);
    while now < end {
        while let Some(p) = d.poll_transmit(Direction::Inbound, &mut e.cx(now)) {
            bytes += e.pool.len(p) as u64;
            e.pool.free(p);
        }
        sent(&mut d, &mut e, Direction::Outbound, now);
        now = d.next_wakeup().unwrap().max(now + Duration(1));
    }
    let bps = bytes as f64 * 8.0 / 0.2;
    assert!((bps - 5e6).abs() < 0.05 * 5e6, "{bps} bit/s at the floor");

    let seq = d.adapt().unwrap().counters.probes_sent as u16;
    arrive(&mut d, &mut e, now, echo_reply(seq, IDENT)).unwrap();
    let s = d.adapt().unwrap();
    assert!(!s.fallback);
    assert_eq!(s.counters.replies, 1);
}

/// The router asks who has the probes' source: weir answers towards it and learns its
/// MAC; a reply to an unknown sequence number is consumed and counted as stray; an echo
/// reply with another identifier is someone else's and is forwarded.
#[test]
fn arp_for_the_source_is_answered_and_foreign_replies_pass() {
    let mut e = Env::new();
    let mut d = device();
    sent(&mut d, &mut e, Direction::Outbound, Instant::ZERO); // the ARP request
    let ask = ArpSpec::request((ROUTER, TARGET), SOURCE);
    arrive(&mut d, &mut e, ms(1), |b| arp::frame(b, &ask)).unwrap();
    let out = sent(&mut d, &mut e, Direction::Outbound, ms(1));
    assert_eq!(out.len(), 1);
    let a = arp::Packet::new_checked(&out[0][14..]).unwrap();
    assert_eq!(&out[0][..6], &ROUTER.0);
    assert_eq!(a.operation(), arp::REPLY);
    assert_eq!((a.sender_mac(), a.sender_ip()), (WEIR, SOURCE));
    let s = d.adapt().unwrap();
    assert_eq!(s.target_mac.as_deref(), Some("02:00:00:00:00:01"));
    assert_eq!(s.counters.arp_replies_sent, 1);

    arrive(&mut d, &mut e, ms(2), echo_reply(999, IDENT)).unwrap();
    assert_eq!(d.adapt().unwrap().counters.stray_replies, 1);
    assert!(sent(&mut d, &mut e, Direction::Inbound, ms(2)).is_empty());

    arrive(&mut d, &mut e, ms(3), echo_reply(1, 0x1234)).unwrap();
    assert_eq!(
        sent(&mut d, &mut e, Direction::Inbound, ms(3)).len(),
        1,
        "forwarded"
    );
    assert_eq!(d.consumed(Direction::Inbound).packets, 2);
}

/// A reload keeps the controller (and the target's MAC) when the new policy has one,
/// and drops it when it has none.
#[test]
fn reload_keeps_or_removes_the_controller() {
    let mut e = Env::new();
    let mut d = device();
    arrive(&mut d, &mut e, Instant::ZERO, router_arp_reply).unwrap();
    let same = Policy::parse("adapt.toml", POLICY).unwrap();
    d.replace_policy(&same, &mut e.cx(ms(5))).unwrap();
    assert!(d.adapt().unwrap().target_mac.is_some());
    let none = POLICY.split("[adapt]").next().unwrap();
    let none = Policy::parse("plain.toml", none).unwrap();
    d.replace_policy(&none, &mut e.cx(ms(6))).unwrap();
    assert!(d.adapt().is_none());
}

/// The autorate over two reflectors behind one gateway (the router): one ARP request
/// for the gateway, then probes alternate between the reflectors (one every 300 ms / 2)
/// to the router's MAC; each reply halves its RTT into a delay; three of six deltas
/// above 30 ms (+ one frame) cut the rate by at least 1 %; the reflector that stops
/// answering (with no spare) stays, and after `timeout` without any reply the link
/// falls to the floor.
#[test]
fn autorate_probes_reflectors_round_robin_and_cuts_on_delay() {
    const R2: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
    let policy = POLICY.split("[adapt]").next().unwrap().to_string()
        + "[adapt]\nmode = \"autorate\"\nreflectors = [\"10.0.0.1\", \"10.0.1.2\"]\ngateway = \"10.0.0.1\"\nsource = \"10.0.0.254\"\nfloor = \"2Mbit\"\n";
    let mut e = Env::new();
    let mut d = Policy::parse("auto.toml", &policy)
        .unwrap()
        .build_device(Instant::ZERO)
        .unwrap();
    let out = sent(&mut d, &mut e, Direction::Outbound, Instant::ZERO);
    let a = arp::Packet::new_checked(&out[0][14..]).unwrap();
    assert_eq!(a.target_ip(), TARGET, "ARP for the gateway");
    arrive(&mut d, &mut e, ms(1), router_arp_reply).unwrap();
    let mut dst = Vec::new();
    for t in [150, 300, 450, 600] {
        let out = sent(&mut d, &mut e, Direction::Outbound, ms(t));
        assert_eq!(out.len(), 1, "at {t} ms");
        assert_eq!(&out[0][..6], &ROUTER.0);
        dst.push(weir_wire::parse_frame(&out[0]).unwrap().dst_ip.unwrap());
    }
    assert_eq!(dst, [TARGET, R2, TARGET, R2].map(IpAddr::V4));
    let reply = |seq: u16, from: Ipv4Addr| echo_reply_from(seq, IDENT, from);
    // seq 1 (TARGET, sent at 150) and 2 (R2, 300): RTT 20 ms, the baselines
    arrive(&mut d, &mut e, ms(170), reply(1, TARGET)).unwrap();
    arrive(&mut d, &mut e, ms(320), reply(2, R2)).unwrap();
    // a reply from the wrong reflector for seq 3 is stray
    arrive(&mut d, &mut e, ms(460), reply(3, R2)).unwrap();
    let s = d.adapt().unwrap();
    assert_eq!((s.counters.replies, s.counters.stray_replies), (2, 1));
    assert_eq!(s.min_rtt_ms, Some(10.0));
    assert_eq!(s.rate_bps, 10_000_000);
    // three probes answered after 150 ms: RTT/2 = 75 ms, delta ≈ 65 ms > 31.2 ms
    let mut now = ms(600);
    for seq in 5..8 {
        now += Duration::from_millis(150);
        let out = sent(&mut d, &mut e, Direction::Outbound, now);
        assert_eq!(out.len(), 1);
        let from = match weir_wire::parse_frame(&out[0]).unwrap().dst_ip {
            Some(IpAddr::V4(a)) => a,
            other => panic!("{other:?}"),
        };
        arrive(
            &mut d,
            &mut e,
            now + Duration::from_millis(150),
            reply(seq, from),
        )
        .unwrap();
    }
    let s = d.adapt().unwrap();
    assert_eq!(s.mode, "autorate");
    assert!(s.rate_bps <= 9_900_000, "cut: {}", s.rate_bps);
    assert_eq!(s.action.as_deref(), Some("cut on bufferbloat"));
    assert_eq!(s.reflectors.len(), 2);
    assert!(s.reflectors.iter().all(|r| r.active && r.replies >= 2));
    assert!(s.to_string().contains("reflector 10.0.1.2 active"), "{s}");
    // silence: the floor after the 1 s timeout
    let last = now + Duration::from_millis(150);
    while now < last + Duration::from_millis(1100) {
        sent(&mut d, &mut e, Direction::Outbound, now);
        now = d.next_wakeup().unwrap().max(now + Duration(1));
    }
    let s = d.adapt().unwrap();
    assert!(s.fallback);
    assert_eq!(s.rate_bps, 2_000_000);
}

/// TCP rate control's view of the leaves is work-conserving, by hand: a 7.2 Mbit/s link,
/// assured 1.8, 1.8, 1.8 and 0.4 Mbit/s (ceils at the link but the second at 2.5 Mbit/s).
#[test]
fn tcp_rate_control_lends_idle_leaves_shares_to_the_busy() {
    use crate::device::adapt::work_conserving;
    let (a, c) = (1_800_000, 7_200_000);
    // only the first leaf busy: 7.2 / 1.8 = 4, so it gets the whole link
    let set = [
        (a, c, true),
        (a, c, false),
        (a, c, false),
        (400_000, c, false),
    ];
    assert_eq!(work_conserving(&set, c), vec![c, a, a, 400_000]);
    // the first, second and CBR leaf busy: Σ = 4.0 Mbit/s, scale 1.8; the second stops
    // at its ceil of 2.5 Mbit/s (what it does not take is not lent again)
    let set = [
        (a, c, true),
        (a, 2_500_000, true),
        (a, c, false),
        (400_000, c, true),
    ];
    assert_eq!(
        work_conserving(&set, c),
        vec![3_240_000, 2_500_000, a, 720_000]
    );
    // every leaf busy and the assured rates already fill the link: nothing changes
    let set = [
        (a, c, true),
        (a, c, true),
        (a, c, true),
        (1_800_000, c, true),
    ];
    assert_eq!(work_conserving(&set, c), vec![a, a, a, a]);
    // none busy: the assured rates
    let set = [(a, c, false), (a, c, false)];
    assert_eq!(work_conserving(&set, c), vec![a, a]);
}
