//! The conditioner's tests: DSCP colours, header look-up and rewrite, metering with the
//! actions per colour (edge), colour from DSCP (interior), the policy keys and their
//! errors, and a device that marks what it forwards.

use super::*;
use crate::policy::Policy;
use crate::pool::Pool;
use crate::rng::Rng;
use weir_wire::build::{self, EthSpec, Ipv4Spec, Ipv6Spec};

struct Env {
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
}

impl Env {
    fn new() -> Env {
        Env {
            pool: Pool::new(64, 2048),
            rng: Rng::new(1),
            dropped: Vec::new(),
        }
    }
    fn cx(&mut self, now: Instant) -> Ctx<'_> {
        Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped)
    }
    /// A UDP/IPv4 frame whose IP packet is `ip_len` bytes, DSCP `dscp`, optionally tagged.
    fn v4(&mut self, ip_len: usize, dscp: u8, vlan: Option<u16>) -> PktId {
        self.v4_ident(ip_len, dscp, vlan, 0)
    }
    /// [`Env::v4`] with IP identification `ident` (a sequence number for order checks).
    fn v4_ident(&mut self, ip_len: usize, dscp: u8, vlan: Option<u16>, ident: u16) -> PktId {
        let id = self.pool.alloc().unwrap();
        let eth = EthSpec {
            vlan,
            ..EthSpec::default()
        };
        let ip = Ipv4Spec {
            dscp,
            ecn: 1,
            ident,
            ..Ipv4Spec::default()
        };
        let payload = vec![0u8; ip_len - 28];
        let n = build::udp_v4_frame(self.pool.slot_mut(id), &eth, &ip, 1, 2, &payload).unwrap();
        self.pool.meta_mut(id).len = n as u32;
        id
    }
    fn v6(&mut self, ip_len: usize, dscp: u8) -> PktId {
        let id = self.pool.alloc().unwrap();
        let ip = Ipv6Spec {
            dscp,
            ecn: 2,
            ..Ipv6Spec::default()
        };
        let payload = vec![0u8; ip_len - 48];
        let n = build::udp_v6_frame(
            self.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            1,
            2,
            &payload,
        )
        .unwrap();
        self.pool.meta_mut(id).len = n as u32;
        id
    }
    fn parsed(&self, id: PktId) -> weir_wire::Parsed {
        weir_wire::parse_frame(self.pool.data(id)).unwrap()
    }
}

#[test]
fn dscp_colours_are_the_af_drop_precedences() {
    let names = [
        ("af11", Color::Green),
        ("af12", Color::Yellow),
        ("af13", Color::Red),
        ("af21", Color::Green),
        ("af32", Color::Yellow),
        ("af43", Color::Red),
        ("ef", Color::Green),
        ("be", Color::Green),
        ("cs1", Color::Green),
        ("cs6", Color::Green),
        ("va", Color::Green),
    ];
    for (n, c) in names {
        assert_eq!(dscp_color(parse(n)), c, "{n}");
    }
    // x = 5..7 are class selectors and EF-like codepoints, not AF: 44 = 0b101100
    assert_eq!(dscp_color(44), Color::Green);
    // 0b010100 = 20 is AF22 (yellow), 0b010101 = 21 is not AF (odd)
    assert_eq!(dscp_color(20), Color::Yellow);
    assert_eq!(dscp_color(21), Color::Green);
}

fn parse(n: &str) -> u8 {
    crate::classify::parse_dscp(n).unwrap()
}

#[test]
fn the_ip_header_is_found_behind_vlan_tags_and_rewritten_keeping_ecn() {
    let mut e = Env::new();
    let a = e.v4(1000, 0, None);
    let b = e.v4(1000, 46, Some(7));
    let c = e.v6(1000, 10);
    let ha = ip_header(e.pool.data(a)).unwrap();
    let hb = ip_header(e.pool.data(b)).unwrap();
    let hc = ip_header(e.pool.data(c)).unwrap();
    assert_eq!((ha.offset, ha.v6, ha.dscp), (14, false, 0));
    assert_eq!((hb.offset, hb.v6, hb.dscp), (18, false, 46));
    assert_eq!((hc.offset, hc.v6, hc.dscp), (14, true, 10));
    for (id, h) in [(a, ha), (b, hb), (c, hc)] {
        let ecn = e.parsed(id).ecn;
        set_dscp(e.pool.data_mut(id), h, 34);
        // parse_frame checks the IPv4 header checksum: still valid after the rewrite
        let p = e.parsed(id);
        assert_eq!((p.dscp, p.ecn), (Some(34), ecn));
    }
    let l3 = &e.pool.data(a)[14..34];
    assert_eq!(weir_wire::checksum::checksum(l3), 0, "IPv4 header checksum");
    // ARP and runts have no IP header
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(ip_header(&arp), None);
    assert_eq!(ip_header(&[0u8; 10]), None);
    let mut v4_short = vec![0u8; 14];
    v4_short[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    assert_eq!(ip_header(&v4_short), None);
}

/// trTCM CIR 8 kbit/s = 1000 B/s, CBS 1000 B, PIR 16 kbit/s = 2000 B/s, PBS 2000 B;
/// green → AF11, yellow → AF12, red → drop.
fn edge_conditioner(now: Instant) -> Conditioner {
    let def = MeterDef {
        name: "cust".into(),
        spec: MeterSpec::Trtcm {
            cir: 8_000,
            cbs: 1_000,
            pir: 16_000,
            pbs: 2_000,
        },
        mode: ColorMode::Blind,
        share: Share::Aggregate,
        actions: [Action::Mark(10), Action::Mark(12), Action::Drop],
        line: 1,
    };
    // rule 0 has the meter, rule 1 none; class 1 has it, class 0 none
    Conditioner::new(
        Role::Edge,
        vec![def],
        vec![0, NO_METER],
        vec![NO_METER, 0],
        now,
    )
    .unwrap()
}

#[test]
fn an_edge_meter_colours_marks_and_polices_as_computed_by_hand() {
    let mut e = Env::new();
    let t0 = Instant::ZERO;
    let mut c = edge_conditioner(t0);
    // Buckets full at t0: C = 1000 B, P = 2000 B. Three 1000-byte IP packets at t0:
    //   1st: P 2000 ≥ 1000 and C 1000 ≥ 1000 → green (C 0, P 1000) → AF11
    //   2nd: P 1000 ≥ 1000, C 0 < 1000       → yellow (P 0)        → AF12
    //   3rd: P 0 < 1000                       → red                 → dropped
    // At t0 + 0.5 s: C + 500 = 500, P + 1000 = 1000:
    //   4th: P 1000 ≥ 1000, C 500 < 1000      → yellow (P 0)
    // At t0 + 1.5 s: C 500 + 1000 → capped at 1000, P 0 + 2000 = 2000:
    //   5th: green
    let mut got = Vec::new();
    for (t_ms, want) in [
        (0, Ok(Color::Green)),
        (0, Ok(Color::Yellow)),
        (0, Err(DropCause::Policed)),
        (500, Ok(Color::Yellow)),
        (1500, Ok(Color::Green)),
    ] {
        let id = e.v4(1000, 46, None);
        e.pool.meta_mut(id).rule = 0;
        let now = t0 + crate::time::Duration::from_millis(t_ms);
        let r = c.apply(id, &mut e.cx(now));
        let r = r.map(|()| e.pool.meta(id).color);
        assert_eq!(r, want, "packet at {t_ms} ms");
        if r.is_ok() {
            got.push(e.parsed(id).dscp.unwrap());
        }
    }
    assert_eq!(got, [10, 12, 12, 10]);
    let (def, st) = c.meters().next().unwrap();
    assert_eq!(def.name, "cust");
    let k = |n: u64| Count {
        packets: n,
        bytes: 1000 * n,
    };
    assert_eq!(st.green, k(2));
    assert_eq!(st.yellow, k(2));
    assert_eq!(st.red, k(1));
    assert_eq!(st.dropped, k(1));
    assert_eq!(st.remarked, k(4), "all four carried EF before");
    assert_eq!(st.measured(), k(5));
}

#[test]
fn a_rule_meter_wins_and_the_class_meter_catches_the_rest() {
    let mut e = Env::new();
    let mut c = edge_conditioner(Instant::ZERO);
    // rule 1 (no meter), class 0 (no meter): green, untouched
    let a = e.v4(1000, 14, None);
    e.pool.meta_mut(a).rule = 1;
    e.pool.meta_mut(a).class = 0;
    e.pool.meta_mut(a).color = Color::Red;
    assert_eq!(c.apply(a, &mut e.cx(Instant::ZERO)), Ok(()));
    assert_eq!(e.pool.meta(a).color, Color::Green);
    assert_eq!(e.parsed(a).dscp, Some(14));
    // the default rule (u16::MAX) in class 1: the class's meter
    let b = e.v4(1000, 0, None);
    e.pool.meta_mut(b).class = 1;
    assert_eq!(c.apply(b, &mut e.cx(Instant::ZERO)), Ok(()));
    assert_eq!(e.parsed(b).dscp, Some(10));
    assert_eq!(c.meters().next().unwrap().1.measured().packets, 1);
}

#[test]
fn a_colour_aware_meter_never_promotes() {
    let mut e = Env::new();
    let def = MeterDef {
        name: "aware".into(),
        spec: MeterSpec::Srtcm {
            cir: 1_000_000,
            cbs: 100_000,
            ebs: 100_000,
        },
        mode: ColorMode::Aware,
        share: Share::Aggregate,
        actions: [Action::Keep; 3],
        line: 1,
    };
    let mut c = Conditioner::new(Role::Edge, vec![def], vec![], vec![0], Instant::ZERO).unwrap();
    // full buckets: a blind meter would say green to all three
    for (dscp, want) in [(10, Color::Green), (12, Color::Yellow), (14, Color::Red)] {
        let id = e.v4(500, dscp, None);
        c.apply(id, &mut e.cx(Instant::ZERO)).unwrap();
        assert_eq!(e.pool.meta(id).color, want, "dscp {dscp}");
        assert_eq!(e.parsed(id).dscp, Some(dscp), "keep");
    }
}

#[test]
fn an_interior_router_takes_the_colour_from_the_dscp() {
    let mut e = Env::new();
    let mut c = Conditioner::new(Role::Interior, vec![], vec![], vec![], Instant::ZERO).unwrap();
    for (dscp, want) in [
        (10, Color::Green),
        (20, Color::Yellow),
        (38, Color::Red),
        (46, Color::Green),
    ] {
        let id = e.v4(200, dscp, None);
        assert_eq!(c.apply(id, &mut e.cx(Instant::ZERO)), Ok(()));
        assert_eq!(e.pool.meta(id).color, want);
        assert_eq!(e.parsed(id).dscp, Some(dscp));
    }
    let id = e.v6(200, 14);
    c.apply(id, &mut e.cx(Instant::ZERO)).unwrap();
    assert_eq!(e.pool.meta(id).color, Color::Red);
    let def = edge_conditioner(Instant::ZERO).defs[0].clone();
    let err = Conditioner::new(Role::Interior, vec![def], vec![], vec![], Instant::ZERO);
    assert!(err.unwrap_err().contains("interior"));
}

const SEED001_EDGE: &str = r#"
[link]
rate = "10Mbit"
default = "be"
role = "edge"

# seed 001: trTCM CIR 800 kbit/s CBS 15 packets, PIR 1.4 Mbit/s PBS 18 packets
[[meter]]
name = "aggr1"
type = "trtcm"
cir = "800kbit"
cbs = "15p"
pir = "1.4Mbit"
pbs = "18p"
green = "af11"
yellow = "af12"
red = "af13"

[[meter]]
name = "voice"
type = "srtcm"
cir = "1Mbit"
cbs = "3000B"
ebs = 0
color = "aware"
yellow = "drop"
red = "drop"

[[class]]
name = "af"
rate = "3Mbit"
meter = "aggr1"

[[class]]
name = "be"
rate = "7Mbit"

[[rule]]
class = "af"
src = "10.1.0.0/16"

[[rule]]
class = "be"
proto = "udp"
dport = 5060
meter = "voice"
"#;

#[test]
fn the_policy_keys_build_meters_per_rule_and_class() {
    let p = Policy::parse("edge.toml", SEED001_EDGE).unwrap();
    assert_eq!(p.role, Role::Edge);
    assert_eq!(p.meters.len(), 2);
    assert_eq!(
        p.meters[0].spec,
        MeterSpec::Trtcm {
            cir: 800_000,
            cbs: 15 * 1500,
            pir: 1_400_000,
            pbs: 18 * 1500,
        }
    );
    assert_eq!(
        p.meters[0].actions,
        [Action::Mark(10), Action::Mark(12), Action::Mark(14)]
    );
    assert_eq!(p.meters[1].mode, ColorMode::Aware);
    assert_eq!(
        p.meters[1].actions,
        [Action::Keep, Action::Drop, Action::Drop]
    );
    let af = p.class_index("af").unwrap();
    assert_eq!(p.classes[af].meter, Some(0));
    assert_eq!(p.rules[0].meter, None);
    assert_eq!(p.rules[1].meter, Some(1));
    let pipe = p.build(Instant::ZERO).unwrap();
    let c = pipe.conditioner().unwrap();
    assert_eq!(c.by_rule, [NO_METER, 1]);
    assert_eq!(c.by_class[af], 0);
    assert!(p.meters[0]
        .describe()
        .contains("green af11, yellow af12, red af13"));
    // no meters, edge: no conditioner at all
    let plain = Policy::parse("p.toml", "[link]\nrate = \"1Mbit\"\n").unwrap();
    assert!(plain.build(Instant::ZERO).unwrap().conditioner().is_none());
}

/// The first error of `text` as `line:col: message`.
fn first_error(text: &str) -> String {
    let e = Policy::parse("t.toml", text).unwrap_err();
    let e = &e.0[0];
    format!("{}:{}: {}", e.line, e.col, e.msg)
}

#[test]
fn bad_diffserv_keys_are_located_and_explained() {
    let base = "[link]\nrate = \"10Mbit\"\n";
    let meter = |body: &str| format!("{base}[[meter]]\nname = \"m\"\n{body}");
    let cases: Vec<(String, &str)> = vec![
        (
            meter("type = \"trtcm\"\ncir = \"2Mbit\"\ncbs = \"10kB\"\npir = \"1Mbit\"\npbs = \"10kB\"\n"),
            "8:7: meter 'm': pir (1000000 bit/s) is below cir",
        ),
        (
            meter("type = \"srtcm\"\ncir = \"1Mbit\"\ncbs = \"0B\"\nebs = 0\n"),
            "7:7: meter 'm': cbs",
        ),
        (
            meter("type = \"srtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\nebs = 0\ngreen = \"af44\"\n"),
            "9:9: `green`: ",
        ),
        (
            meter("type = \"twotcm\"\n"),
            "5:8: meter 'm': `type` 'twotcm' is not one of",
        ),
        (
            meter("type = \"trtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\npbs = \"2kB\"\n"),
            "5:8: meter 'm': a trtcm meter needs `pir`",
        ),
        (
            meter("type = \"srtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\nebs = 0\npir = \"2Mbit\"\n"),
            "9:7: meter 'm': `pir` is not a srtcm key",
        ),
        (
            meter("type = \"srtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\nebs = 0\ncolor = \"purple\"\n"),
            "9:9: `color`: 'purple' is not one of blind, aware",
        ),
        (
            meter("type = \"srtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\nebs = 0\nshare = \"flow\"\n"),
            "9:9: meter 'm': `share = \"flow\"` needs a trtcm or rfc4115 meter",
        ),
        (
            meter("type = \"trtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\npir = \"2Mbit\"\npbs = \"2kB\"\nshare = \"flows\"\n"),
            "10:9: meter 'm': `share`: 'flows' is not one of aggregate, flow",
        ),
        (
            meter("type = \"trtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\npir = \"2Mbit\"\npbs = \"2kB\"\nshare = \"flow\"\nflows = 1000\n"),
            "11:9: meter 'm': `flows` is 1000: expected a power of two from 1 to 1048576",
        ),
        (
            meter("type = \"trtcm\"\ncir = \"1Mbit\"\ncbs = \"1kB\"\npir = \"2Mbit\"\npbs = \"2kB\"\nflows = 64\n"),
            "10:9: meter 'm': `flows` sizes the flow table of `share = \"flow\"` only",
        ),
        (
            format!("{base}role = \"core\"\n"),
            "3:8: `role`: 'core' is not one of edge, interior",
        ),
        (
            format!("{base}default = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\nmeter = \"nope\"\n"),
            "7:9: `meter`: no [[meter]] named 'nope' (none is defined)",
        ),
        (
            format!("{base}role = \"interior\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n[[rule]]\nclass = \"a\"\nsrc = \"10.0.0.0/8\"\n"),
            "10:7: `src`: an interior router (role = \"interior\") classifies by `dscp` only",
        ),
        (
            format!("{base}role = \"interior\"\n[[meter]]\nname = \"m\"\ntype = \"srtcm\"\n"),
            "4:1: meter 'm': an interior router",
        ),
    ];
    let mut wrong = Vec::new();
    for (text, want) in &cases {
        let got = first_error(text);
        if !got.starts_with(want) {
            wrong.push(format!("want {want:?}\n got {got:?}\nin\n{text}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // the PIR-below-CIR message names both rates
    let e = first_error(&meter(
        "type = \"trtcm\"\ncir = \"2Mbit\"\ncbs = \"10kB\"\npir = \"1Mbit\"\npbs = \"10kB\"\n",
    ));
    assert!(e.contains("pir") && e.contains("cir"), "{e}");
    // an interior router matching on DSCP alone is fine
    let ok = format!(
        "{base}role = \"interior\"\ndefault = \"be\"\n[[class]]\nname = \"af\"\nrate = \"3Mbit\"\n\
         [[class]]\nname = \"be\"\nrate = \"7Mbit\"\n[[rule]]\nclass = \"af\"\ndscp = [\"af11\", \"af12\", \"af13\"]\n"
    );
    let p = Policy::parse("t.toml", &ok).unwrap();
    assert_eq!(p.role, Role::Interior);
    assert!(p.build(Instant::ZERO).unwrap().conditioner().is_some());
}

#[test]
fn a_device_marks_what_it_forwards_and_reports_the_meter() {
    let p = Policy::parse("edge.toml", SEED001_EDGE).unwrap();
    let mut dev = p.build_device(Instant::ZERO).unwrap();
    let mut e = Env::new();
    // 20 packets of 1500 bytes from the AF customer at one instant: CBS = 15 packets green,
    // PBS = 18 packets: 3 more yellow, the last 2 red (all kept, remarked AF13)
    let mut sent = Vec::new();
    for _ in 0..20 {
        let id = e.pool.alloc().unwrap();
        let ip = Ipv4Spec {
            src: "10.1.2.3".parse().unwrap(),
            ..Ipv4Spec::default()
        };
        let n = build::udp_v4_frame(
            e.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            1,
            2,
            &[0u8; 1472],
        )
        .unwrap();
        e.pool.meta_mut(id).len = n as u32;
        let mut cx = e.cx(Instant::ZERO);
        dev.ingress(crate::pool::Direction::Outbound, id, &mut cx, Instant::ZERO)
            .unwrap();
    }
    let mut now = Instant::ZERO;
    while sent.len() < 20 {
        let mut cx = e.cx(now);
        match dev.poll_transmit(crate::pool::Direction::Outbound, &mut cx) {
            Some(id) => {
                sent.push(e.parsed(id).dscp.unwrap());
                e.pool.free(id);
            }
            None => now = dev.next_wakeup().expect("more to send"),
        }
    }
    let mut want = vec![10u8; 15];
    want.extend([12, 12, 12, 14, 14]);
    assert_eq!(sent, want);
    let snap = dev.snapshot(crate::pool::Direction::Outbound, now).unwrap();
    let m = &snap.meters[0];
    assert_eq!(m.name, "aggr1");
    assert_eq!(
        (
            m.stats.green.packets,
            m.stats.yellow.packets,
            m.stats.red.packets
        ),
        (15, 3, 2)
    );
    let table = crate::snapshot::format_table(&snap, "outbound");
    assert!(table.contains("aggr1"), "{table}");
}

/// `share = "flow"` through a device: two flows of one customer offering twice the CIR
/// each, interleaved so that the aggregate meter would give one of them every green
/// packet (see `meter::fair`), get half the green each, and the meter counts 2 flows.
#[test]
fn a_flow_shared_meter_splits_green_between_the_flows() {
    let text = SEED001_EDGE.replace(
        "pbs = \"18p\"\n",
        "pbs = \"18p\"\nshare = \"flow\"\nflows = 64\n",
    );
    let p = Policy::parse("edge.toml", &text).unwrap();
    assert!(p.meters[0].describe().contains("fair per flow (64 slots)"));
    let mut dev = p.build_device(Instant::ZERO).unwrap();
    let mut e = Env::new();
    let out = crate::pool::Direction::Outbound;
    // 1000-byte IP packets, one every 5 ms from each port in turn: 1.6 Mbit/s per flow
    // (the CIR 800 kbit/s earns one packet per 10 ms).
    let mut green = [0u32; 2];
    for k in 0..2000u64 {
        let now = Instant(k * 5_000_000);
        let id = e.pool.alloc().unwrap();
        let ip = Ipv4Spec {
            src: "10.1.2.3".parse().unwrap(),
            ..Ipv4Spec::default()
        };
        let sport = 1 + (k % 2) as u16;
        let n = build::udp_v4_frame(
            e.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            sport,
            2,
            &[0u8; 972],
        )
        .unwrap();
        e.pool.meta_mut(id).len = n as u32;
        let mut cx = e.cx(now);
        dev.ingress(out, id, &mut cx, now).unwrap();
        let mut cx = e.cx(now + crate::time::Duration::from_millis(4));
        let sent: Vec<_> = std::iter::from_fn(|| dev.poll_transmit(out, &mut cx)).collect();
        for id in sent {
            let p = e.parsed(id);
            if p.dscp == Some(10) {
                green[p.src_port.unwrap() as usize - 1] += 1;
            }
            e.pool.free(id);
        }
    }
    // 10 s at 800 kbit/s: 1000 packets of green plus the burst (CBS 15 × 1486 bytes, 22
    // packets of 1000), half each give or take what one share banks (its depth, the CBS).
    let total = green[0] + green[1];
    assert!((995..=1023).contains(&total), "{green:?}");
    assert!(green[0].abs_diff(green[1]) <= 23, "{green:?}");
    let snap = dev.snapshot(out, Instant(10_000_000_000)).unwrap();
    assert_eq!(snap.meters[0].stats.flows, 2);
    assert!(crate::snapshot::format_table(&snap, "outbound").contains("flows"));
}

fn example(name: &str) -> Policy {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    Policy::load(std::path::Path::new(&path)).unwrap()
}

#[test]
fn seed001_table1_is_written_exactly_in_the_core_example() {
    use crate::queue::gred::{GredAveraging, GredParams};
    use crate::rate::Rate;
    let p = example("diffserv-core.toml");
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let af = &p.classes[p.class_index("af").unwrap()];
    let r = af.red.as_ref().unwrap();
    let (g, limit_p, limit_b, warnings) = crate::policy::build::gred_params(af, r, p.mtu).unwrap();
    assert!(warnings.is_empty());
    assert_eq!((limit_p, limit_b), (u32::MAX, 120_000));
    let table1 = GredParams::seed001_table1(
        GredParams::SEED001_QUEUE_BYTES,
        Rate::from_bps(3_000_000),
        1514,
    );
    assert_eq!(
        (
            g.green,
            g.yellow,
            g.red,
            g.wq,
            g.gentle,
            g.mode,
            g.averaging
        ),
        (
            table1.green,
            table1.yellow,
            table1.red,
            table1.wq,
            table1.gentle,
            table1.mode,
            GredAveraging::Coupled
        )
    );
    assert!(p.describe().contains("interior router"));
}

#[test]
fn bad_three_colour_red_tables_are_explained() {
    let class = |red: &str| {
        format!(
            "[link]\nrate = \"10Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n\
             limit = \"100p\"\nred = {red}\n"
        )
    };
    let g = "green = { min = \"20p\", max = \"40p\", max_p = 0.02 }";
    let y = "yellow = { min = \"10p\", max = \"20p\", max_p = 0.05 }";
    let r = "red = { min = \"5p\", max = \"10p\", max_p = 0.1 }";
    let cases = [
        (format!("{{ {g}, {y} }}"), "missing: red"),
        (
            format!("{{ {g}, {y}, {r}, min = \"5p\" }}"),
            "go inside each colour's table",
        ),
        (
            format!("{{ {g}, {y}, {r}, average = \"mean\" }}"),
            "not one of coupled, separate, single",
        ),
        (
            format!("{{ {g}, {y}, red = {{ min = \"5kB\", max = \"10kB\", max_p = 0.1 }} }}"),
            "in packets or all in bytes",
        ),
        (
            format!("{{ green = {{ min = \"20p\", max = \"400p\", max_p = 0.02 }}, {y}, {r} }}"),
            "limit",
        ),
        (
            format!("{{ {g}, yellow = {{ min = \"30p\", max = \"20p\", max_p = 0.05 }}, {r} }}"),
            "need 0 < min < max",
        ),
        (format!("{{ {g}, {y}, {r}, queue = 1 }}"), "unknown field"),
        (
            "{ average = \"coupled\" }".to_string(),
            "add green, yellow and red tables",
        ),
    ];
    for (red, want) in cases {
        let text = class(&red);
        let e = first_error(&text);
        assert!(e.starts_with("8:7: `red"), "{e}\n{text}");
        assert!(e.contains(want), "want {want:?} in {e}\n{text}");
    }
    // out of drop-precedence order: a warning (RFC 2597 asks for it, it is not an error)
    let p = Policy::parse(
        "t.toml",
        &class(
            &format!("{{ {r}, {y}, green = {{ min = \"5p\", max = \"10p\", max_p = 0.1 }} }}")
                .replace("red = { min = \"5p\"", "red = { min = \"20p\"")
                .replace(
                    "max = \"10p\", max_p = 0.1 }, yellow",
                    "max = \"40p\", max_p = 0.02 }, yellow",
                ),
        ),
    );
    let p = p.unwrap();
    assert!(!p.warnings.is_empty(), "expected an order warning");
    // per-flow queuing asked for in the file: an error
    let e = first_error(
        &class(&format!("{{ {g}, {y}, {r} }}\nqueue = \"pfq\"")).replace("limit = \"100p\"\n", ""),
    );
    assert!(e.contains("one FIFO"), "{e}");
    // a per-flow preset gives way to the FIFO three-colour RED needs
    let text = class(&format!("{{ {g}, {y}, {r} }}")).replace(
        "default = \"a\"",
        "default = \"a\"\ntechnique = \"cbq+pfq\"",
    );
    let p = Policy::parse("t.toml", &text).unwrap();
    assert_eq!(p.classes[1].queue, crate::policy::QueueKind::Fifo);
    p.build(Instant::ZERO).unwrap();
}

/// An interior router with seed 001's GRED under a sustained 2x overload of its AF class:
/// red (AF13) packets are dropped far more often than green (AF11) ones, every drop is
/// RED's or the queue's, never a policer's, and the one microflow carrying both colours
/// leaves in the order it came (no reordering within a microflow, RFC 2597 section 2).
#[test]
fn an_interior_gred_class_drops_red_before_green() {
    use crate::pool::Direction;
    let p = example("diffserv-core.toml");
    let mut dev = p.build_device(Instant::ZERO).unwrap();
    let mut e = Env::new();
    e.pool = Pool::new(1024, 2048);
    // 6 Mbit/s of 1500-byte IP packets into the 3 Mbit/s class for 4 s, AF11 and AF13
    // alternating: one every 2 ms
    let (mut sent, mut dropped, mut out) = ([0u32; 2], [0u32; 2], [0u32; 2]);
    let mut last: Option<u16> = None;
    let step = crate::time::Duration::from_micros(2_000);
    let mut now = Instant::ZERO;
    for i in 0..2000u32 {
        let k = (i % 2) as usize;
        let id = e.v4_ident(1500, [10, 14][k], None, i as u16);
        sent[k] += 1;
        if dev
            .ingress(Direction::Outbound, id, &mut e.cx(now), now)
            .is_err()
        {
            dropped[k] += 1;
            e.pool.free(id);
        }
        now += step;
        while let Some(id) = dev.poll_transmit(Direction::Outbound, &mut e.cx(now)) {
            out[(e.parsed(id).dscp == Some(14)) as usize] += 1;
            let d = e.pool.data(id);
            let ident = u16::from_be_bytes([d[18], d[19]]);
            assert!(last.is_none_or(|l| ident > l), "{ident} after {last:?}");
            last = Some(ident);
            e.pool.free(id);
        }
        for (id, cause) in e.dropped.drain(..) {
            assert_ne!(cause, DropCause::Policed);
            let _ = id;
        }
    }
    let frac = |k: usize| dropped[k] as f64 / sent[k] as f64;
    assert!(frac(1) > 0.5, "red dropped {:.3}", frac(1));
    assert!(
        frac(0) < frac(1) / 4.0,
        "green {:.3} red {:.3}",
        frac(0),
        frac(1)
    );
    assert!(
        out[0] > out[1] * 2,
        "delivered green {} red {}",
        out[0],
        out[1]
    );
}

/// A rule's `mark` (seed 004's service handler): the rule's packets get the DSCP before
/// any meter, their colour is the new DSCP's; other rules' packets are untouched.
#[test]
fn a_rule_mark_rewrites_the_dscp_and_colours_by_it() {
    let mut e = Env::new();
    let mut c = Conditioner::new(
        Role::Edge,
        vec![],
        vec![NO_METER, NO_METER],
        vec![NO_METER],
        Instant::ZERO,
    )
    .unwrap()
    .with_marks(vec![Some(parse("af12")), None]);
    let marked = e.v4(500, 0, Some(7));
    e.pool.meta_mut(marked).rule = 0;
    let other = e.v4(500, 0, None);
    e.pool.meta_mut(other).rule = 1;
    let v6 = e.v6(500, 46);
    e.pool.meta_mut(v6).rule = 0;
    for id in [marked, other, v6] {
        c.apply(id, &mut e.cx(Instant::ZERO)).unwrap();
    }
    let p = e.parsed(marked);
    assert_eq!(p.dscp, Some(12));
    assert_eq!(e.pool.meta(marked).color, Color::Yellow);
    // behind the VLAN tag; parse_frame checked the checksum too
    assert_eq!(
        weir_wire::checksum::checksum(&e.pool.data(marked)[18..38]),
        0
    );
    assert_eq!(e.parsed(other).dscp, Some(0));
    assert_eq!(e.pool.meta(other).color, Color::Green);
    assert_eq!(e.parsed(v6).dscp, Some(12));
    assert_eq!(c.marked().packets, 2);
}

/// `mark` through the policy: it compiles to the rule's DSCP, `weir check` lists it, and
/// the device marks what the rule matches.
#[test]
fn a_policy_mark_builds_a_marking_device() {
    let text = "[link]\nrate = \"100Mbit\"\ndefault = \"be\"\n\n\
                [[class]]\nname = \"ef\"\nrate = \"5Mbit\"\nprio = 0\n\n\
                [[class]]\nname = \"be\"\nrate = \"95Mbit\"\n\n\
                [[rule]]\nname = \"host-a\"\nclass = \"ef\"\nsrc = \"10.1.2.3/32\"\nmark = \"ef\"\n";
    let p = Policy::parse("m.toml", text).unwrap();
    assert_eq!(p.rules[0].mark, Some(46));
    let d = p.describe();
    assert!(d.contains("rule host-a      marks ef"), "{d}");
    let mut dev = p.build_device(Instant::ZERO).unwrap();
    let mut e = Env::new();
    for src in ["10.1.2.3", "10.9.9.9"] {
        let id = e.pool.alloc().unwrap();
        let ip = Ipv4Spec {
            src: src.parse().unwrap(),
            ..Ipv4Spec::default()
        };
        let n = build::udp_v4_frame(
            e.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            1,
            2,
            &[0; 100],
        )
        .unwrap();
        e.pool.meta_mut(id).len = n as u32;
        let mut cx = e.cx(Instant::ZERO);
        dev.ingress(crate::pool::Direction::Outbound, id, &mut cx, Instant::ZERO)
            .unwrap();
    }
    let mut got = Vec::new();
    let mut now = Instant::ZERO;
    while got.len() < 2 {
        let mut cx = e.cx(now);
        match dev.poll_transmit(crate::pool::Direction::Outbound, &mut cx) {
            Some(id) => {
                let p = e.parsed(id);
                got.push((p.src_ip.unwrap().to_string(), p.dscp.unwrap()));
                e.pool.free(id);
            }
            None => now = dev.next_wakeup().expect("more to send"),
        }
    }
    got.sort();
    assert_eq!(
        got,
        vec![("10.1.2.3".to_string(), 46), ("10.9.9.9".to_string(), 0)]
    );
}

#[test]
fn bad_marks_are_located_and_explained() {
    let base = "[link]\nrate = \"10Mbit\"\n";
    let e = first_error(&format!(
        "{base}[[rule]]\nsrc = \"10.0.0.0/8\"\nclass = \"link\"\nmark = \"gold\"\n"
    ));
    assert!(e.starts_with("6:8: `mark`: expected a DSCP"), "{e}");
    let e = first_error(&format!(
        "{base}role = \"interior\"\n[[rule]]\ndscp = \"ef\"\nclass = \"link\"\nmark = \"af11\"\n"
    ));
    assert!(e.starts_with("7:8: `mark`: an interior router"), "{e}");
}
