use super::*;
use core::net::{Ipv4Addr, Ipv6Addr};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
fn net(s: &str) -> IpNet {
    IpNet::parse(s).unwrap()
}
fn tcp4(src: &str, sport: u16, dst: &str, dport: u16) -> Fields {
    Fields::ip(ip(src), ip(dst), Proto::TCP, Some(sport), Some(dport))
}

#[test]
fn prefixes_parse_and_contain() {
    let n = net("10.0.0.0/8");
    assert!(n.contains(ip("10.0.0.0")));
    assert!(n.contains(ip("10.255.255.255")));
    assert!(!n.contains(ip("11.0.0.0")));
    assert!(!n.contains(ip("9.255.255.255")));
    assert_eq!(n.to_string(), "10.0.0.0/8");
    assert_eq!(n.prefix_len(), 8);
    assert_eq!(n.addr(), ip("10.0.0.0"));

    let h = net("192.168.1.7");
    assert_eq!(h.prefix_len(), 32);
    assert!(h.contains(ip("192.168.1.7")));
    assert!(!h.contains(ip("192.168.1.6")));
    assert_eq!(net("192.168.1.7/32"), h);
    assert_eq!(IpNet::host(ip("192.168.1.7")), h);

    let all4 = net("0.0.0.0/0");
    assert!(all4.contains(ip("255.255.255.255")));
    assert!(all4.contains(ip("0.0.0.0")));
    assert!(!all4.contains(ip("::")), "v4 prefix never matches v6");
    assert!(!all4.contains(ip("::ffff:10.0.0.1")), "v4-mapped is v6");

    let d = net("2001:db8::/32");
    assert!(d.is_ipv6());
    assert!(d.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
    assert!(!d.contains(ip("2001:db9::")));
    assert!(!d.contains(ip("32.1.13.184")));
    let lo = net("::1");
    assert_eq!(lo.prefix_len(), 128);
    assert!(lo.contains(ip("::1")) && !lo.contains(ip("::2")));
    assert_eq!(net("::1/128"), lo);
    let all6 = net("::/0");
    assert!(all6.contains(ip("ffff::1")) && !all6.contains(ip("1.2.3.4")));
    assert!(net("::ffff:0:0/96").contains(ip("::ffff:10.0.0.1")));
    assert!(!net("::ffff:0:0/96").contains(ip("10.0.0.1")));
    assert!(net("10.1.2.128/25").contains(ip("10.1.2.255")));
    assert!(!net("10.1.2.128/25").contains(ip("10.1.2.127")));
    assert_eq!(" 10.0.0.0/8 ".parse::<IpNet>(), Ok(n));
}

#[test]
fn prefix_errors() {
    let e = |s: &str| IpNet::parse(s).unwrap_err().to_string();
    assert_eq!(
        e("10.0.0.1/8"),
        "invalid IP prefix '10.0.0.1/8': host bits are set after the /8 prefix; did you \
         mean 10.0.0.0/8?"
    );
    assert!(e("2001:db8::1/32").contains("did you mean 2001:db8::/32?"));
    assert!(e("10.0.0.0/33").contains("longer than 32 bits"));
    assert!(e("::/129").contains("longer than 128 bits"));
    assert!(e("10.0.0.0/99999").contains("not a number from 0 to 32"));
    assert!(e("10.0.0.0/").contains("not a number"));
    assert!(e("10.0.0.0/-1").contains("not a number"));
    assert!(e("10.0.0/8").contains("not an IPv4 or IPv6 address"));
    assert!(e("fe80::1%eth0").contains("not an IPv4 or IPv6 address"));
    assert!(e("").contains("not an IPv4 or IPv6 address"));
    assert!(IpNet::new(ip("10.0.0.0"), 33).is_err());
    assert!(IpNet::new(ip("10.0.0.0"), 0).is_err());
    assert!(IpNet::new(ip("0.0.0.0"), 0).is_ok());
}

#[test]
fn port_sets() {
    let s = PortSet::parse("6000-6100").unwrap();
    assert!(!s.contains(5999));
    assert!(s.contains(6000));
    assert!(s.contains(6100));
    assert!(!s.contains(6101));
    let l = PortSet::parse("22, 80,443 6000-6100,81").unwrap();
    assert_eq!(l.ranges(), &[(22, 22), (80, 81), (443, 443), (6000, 6100)]);
    assert_eq!(l.to_string(), "22,80-81,443,6000-6100");
    for p in [22, 80, 81, 443, 6000, 6050, 6100] {
        assert!(l.contains(p), "{p}");
    }
    for p in [0, 21, 23, 79, 82, 442, 444, 5999, 6101, 65535] {
        assert!(!l.contains(p), "{p}");
    }
    let full = PortSet::parse("0-65535").unwrap();
    assert!(full.contains(0) && full.contains(65535));
    assert_eq!(PortSet::single(80), PortSet::parse("80").unwrap());
    let e = |s: &str| PortSet::parse(s).unwrap_err().to_string();
    assert!(e("100-80").contains("did you mean 80-100?"));
    assert!(e("65536").contains("out of range"));
    assert!(e("http").contains("not a port number"));
    assert!(e("").contains("empty"));
    assert!(e("1-2-3").contains("not a port number"));
    assert!(PortSet::from_ranges([(5, 1)]).is_err());
    assert_eq!(
        PortSet::from_ranges([(10, 20), (15, 30), (31, 31), (40, 50)])
            .unwrap()
            .ranges(),
        &[(10, 31), (40, 50)]
    );
}

#[test]
fn protocols_dscp_vlan() {
    assert_eq!(Proto::parse("tcp"), Ok(6));
    assert_eq!(Proto::parse("UDP"), Ok(17));
    assert_eq!(Proto::parse("icmp"), Ok(1));
    assert_eq!(Proto::parse("icmpv6"), Ok(58));
    assert_eq!(Proto::parse("ipv6-icmp"), Ok(58));
    assert_eq!(Proto::parse("gre"), Ok(47));
    assert_eq!(Proto::parse("esp"), Ok(50));
    assert_eq!(Proto::parse("sctp"), Ok(132));
    assert_eq!(Proto::parse("89"), Ok(89));
    assert!(Proto::parse("256")
        .unwrap_err()
        .to_string()
        .contains("0-255"));
    assert!(Proto::parse("quic")
        .unwrap_err()
        .to_string()
        .contains("unknown protocol"));
    assert_eq!(Proto::name(6), Some("tcp"));
    assert_eq!(Proto::name(89), None);

    for (s, v) in [
        ("be", 0),
        ("DF", 0),
        ("cs0", 0),
        ("cs1", 8),
        ("cs2", 16),
        ("cs3", 24),
        ("cs4", 32),
        ("cs5", 40),
        ("cs6", 48),
        ("CS7", 56),
        ("EF", 46),
        ("af11", 10),
        ("af12", 12),
        ("af13", 14),
        ("af21", 18),
        ("af22", 20),
        ("af23", 22),
        ("af31", 26),
        ("af32", 28),
        ("af33", 30),
        ("af41", 34),
        ("AF42", 36),
        ("af43", 38),
        ("va", 44),
        ("le", 1),
        ("0", 0),
        ("63", 63),
    ] {
        assert_eq!(parse_dscp(s), Ok(v), "{s}");
    }
    assert!(parse_dscp("64").unwrap_err().to_string().contains("0-63"));
    assert!(parse_dscp("af44")
        .unwrap_err()
        .to_string()
        .contains("unknown DSCP"));
    assert!(parse_dscp("").is_err());
    assert_eq!(dscp_name(46), Some("ef"));
    assert_eq!(dscp_name(0), Some("be"));
    assert_eq!(dscp_name(3), None);

    assert_eq!(parse_vlan("100"), Ok(100));
    assert_eq!(parse_vlan("4095"), Ok(4095));
    assert!(parse_vlan("4096").is_err());
    assert!(parse_vlan("+5").is_err());
}

/// The seed-000 style policy: VoIP (UDP from one host) and FTP (a subnet) classes.
fn policy() -> Classifier {
    let rules = vec![
        Rule {
            m: Match {
                src: vec![net("10.1.0.5")],
                proto: Some(Proto::UDP),
                ..Match::default()
            },
            class: 1,
            name: "voip".into(),
        },
        Rule {
            m: Match {
                src: vec![net("10.1.0.0/16"), net("2001:db8:1::/48")],
                proto: Some(Proto::TCP),
                port: Some(PortSet::parse("20-21").unwrap()),
                ..Match::default()
            },
            class: 2,
            name: "ftp".into(),
        },
        Rule {
            m: Match {
                src: vec![net("10.1.0.0/16")],
                ..Match::default()
            },
            class: 3,
            name: "subnet".into(),
        },
    ];
    Classifier::new(rules, 9).unwrap()
}

/// What a hot reload moves a queued packet by: a rule its headers match, not the default,
/// and nothing from the first rule that names an application on (its answer needs the
/// connection's application, which a queued packet's headers do not carry).
#[test]
fn lookup_by_headers_stops_at_the_default_and_at_an_application_rule() {
    let c = policy();
    let ftp = tcp4("10.1.0.5", 40000, "10.2.0.1", 21);
    assert_eq!(c.lookup_by_headers(&ftp), Some((2, 1)));
    assert_eq!(c.lookup_by_headers(&ftp.reversed()), None, "the default");
    let mut rules = vec![Rule {
        m: Match {
            app: Some(vec![1]),
            ..Match::default()
        },
        class: 4,
        name: "app".into(),
    }];
    rules.extend(policy().rules);
    let c = Classifier::new(rules, 9).unwrap();
    assert_eq!(c.lookup(&ftp), (2, 2), "the application unknown: rule 2");
    assert_eq!(
        c.lookup_by_headers(&ftp),
        None,
        "the app rule might have taken it"
    );
}

#[test]
fn first_match_wins_and_counts() {
    let mut c = policy();
    let voip = Fields::ip(
        ip("10.1.0.5"),
        ip("10.2.0.1"),
        Proto::UDP,
        Some(5004),
        Some(5004),
    );
    assert_eq!(c.classify(&voip, 74), (1, 0));
    // TCP from the VoIP host on the FTP port: rule 0 needs UDP, so rule 1.
    let ftp = tcp4("10.1.0.5", 40000, "10.2.0.1", 21);
    assert_eq!(c.classify(&ftp, 1500), (2, 1));
    // Reply direction matches through `port` (sport 20) — but src is the far side, so
    // it is not in 10.1/16: default.
    assert_eq!(c.classify(&ftp.reversed(), 40), (9, DEFAULT_RULE));
    // Other TCP from the subnet: rule 2.
    assert_eq!(
        c.classify(&tcp4("10.1.3.4", 1, "10.2.0.1", 80), 1000),
        (3, 2)
    );
    // IPv6 FTP.
    let v6 = Fields::ip(
        ip("2001:db8:1::9"),
        ip("2001:db8:2::1"),
        Proto::TCP,
        Some(20),
        Some(50000),
    );
    assert_eq!(c.classify(&v6, 1400), (2, 1));
    // IPv6 outside: default.
    let v6o = Fields::ip(
        ip("2001:db8:3::9"),
        ip("2001:db8:2::1"),
        Proto::TCP,
        Some(20),
        Some(50000),
    );
    assert_eq!(c.classify(&v6o, 100), (9, DEFAULT_RULE));
    // ARP: no addresses, default.
    let arp = Fields {
        ethertype: ETHERTYPE_ARP,
        ..Fields::default()
    };
    assert_eq!(c.classify(&arp, 60), (9, DEFAULT_RULE));

    assert_eq!(
        c.hits[0],
        Count {
            packets: 1,
            bytes: 74
        }
    );
    assert_eq!(
        c.hits[1],
        Count {
            packets: 2,
            bytes: 2900
        }
    );
    assert_eq!(
        c.hits[2],
        Count {
            packets: 1,
            bytes: 1000
        }
    );
    assert_eq!(
        c.default_hits,
        Count {
            packets: 3,
            bytes: 200
        }
    );
    assert_eq!(c.lookup(&voip), (1, 0));
    assert_eq!(c.hits[0].packets, 1, "lookup does not count");
    c.reset_hits();
    assert_eq!(c.default_hits, Count::default());
    assert!(c.hits.iter().all(|h| *h == Count::default()));
}

#[test]
fn empty_classifier_and_match_any() {
    let mut c = Classifier::new(vec![], 4).unwrap();
    assert_eq!(c.classify(&Fields::default(), 1), (4, u16::MAX));
    assert_eq!(c.default_hits.packets, 1);
    assert!(Match::any().matches(&Fields::default()));
    assert!(Match::any().is_any());
    let r = Rule {
        m: Match::any(),
        class: 7,
        name: "all".into(),
    };
    let mut c = Classifier::new(vec![r.clone(), r], 4).unwrap();
    assert_eq!(c.classify(&tcp4("1.2.3.4", 1, "5.6.7.8", 2), 1), (7, 0));
}

#[test]
fn port_conditions_need_ports() {
    let icmp = Fields::ip(ip("10.0.0.1"), ip("10.0.0.2"), Proto::ICMP, None, None);
    for m in [
        Match {
            port: Some(PortSet::parse("0-65535").unwrap()),
            ..Match::default()
        },
        Match {
            sport: Some(PortSet::parse("0-65535").unwrap()),
            ..Match::default()
        },
        Match {
            dport: Some(PortSet::parse("0-65535").unwrap()),
            ..Match::default()
        },
    ] {
        assert!(!m.matches(&icmp), "{m:?}");
        assert!(m.matches(&tcp4("10.0.0.1", 0, "10.0.0.2", 65535)));
    }
}

#[test]
fn port_boundaries_and_directions() {
    let m = Match {
        dport: Some(PortSet::parse("6000-6100").unwrap()),
        ..Match::default()
    };
    assert!(!m.matches(&tcp4("1.1.1.1", 6000, "2.2.2.2", 5999)));
    assert!(m.matches(&tcp4("1.1.1.1", 1, "2.2.2.2", 6000)));
    assert!(m.matches(&tcp4("1.1.1.1", 1, "2.2.2.2", 6100)));
    assert!(!m.matches(&tcp4("1.1.1.1", 6050, "2.2.2.2", 6101)));
    let s = Match {
        sport: Some(PortSet::single(80)),
        dport: Some(PortSet::single(1000)),
        ..Match::default()
    };
    assert!(s.matches(&tcp4("1.1.1.1", 80, "2.2.2.2", 1000)));
    assert!(!s.matches(&tcp4("1.1.1.1", 1000, "2.2.2.2", 80)));
    let either = Match {
        port: Some(PortSet::single(80)),
        ..Match::default()
    };
    let f = tcp4("1.1.1.1", 40000, "2.2.2.2", 80);
    assert!(either.matches(&f) && either.matches(&f.reversed()));
    assert!(!either.matches(&tcp4("1.1.1.1", 81, "2.2.2.2", 79)));
}

#[test]
fn vlan_dscp_ethertype() {
    let m = Match {
        vlan: Some(vec![10, 20]),
        dscp: Some(vec![parse_dscp("ef").unwrap(), parse_dscp("af41").unwrap()]),
        ethertype: Some(ETHERTYPE_IPV4),
        ..Match::default()
    };
    let mut f = Fields::ip(ip("10.0.0.1"), ip("10.0.0.2"), Proto::UDP, Some(1), Some(2));
    f.vlan = Some(20);
    f.dscp = Some(46);
    assert!(m.matches(&f));
    f.dscp = Some(34);
    assert!(m.matches(&f));
    f.dscp = Some(0);
    assert!(!m.matches(&f));
    f.dscp = None;
    assert!(!m.matches(&f));
    f.dscp = Some(46);
    f.vlan = Some(30);
    assert!(!m.matches(&f));
    f.vlan = None;
    assert!(!m.matches(&f), "untagged never matches a VLAN condition");
    f.vlan = Some(10);
    assert!(m.matches(&f));
    f.ethertype = ETHERTYPE_IPV6;
    assert!(!m.matches(&f));
    let arp = Match {
        ethertype: Some(ETHERTYPE_ARP),
        ..Match::default()
    };
    assert!(arp.matches(&Fields {
        ethertype: ETHERTYPE_ARP,
        ..Fields::default()
    }));
}

#[test]
fn validation() {
    let bad = |m: Match| {
        Classifier::new(
            vec![Rule {
                m,
                class: 1,
                name: "r".into(),
            }],
            0,
        )
        .unwrap_err()
        .to_string()
    };
    assert!(bad(Match {
        dscp: Some(vec![64]),
        ..Match::default()
    })
    .contains("0-63 (in rule 'r')"));
    assert!(bad(Match {
        vlan: Some(vec![4096]),
        ..Match::default()
    })
    .contains("0-4095"));
    assert!(bad(Match {
        vlan: Some(vec![]),
        ..Match::default()
    })
    .contains("empty"));
    assert!(bad(Match {
        port: Some(PortSet::default()),
        ..Match::default()
    })
    .contains("empty"));
    let many: Vec<Rule> = (0..=Classifier::MAX_RULES)
        .map(|i| Rule {
            m: Match::any(),
            class: i as u32,
            name: String::new(),
        })
        .collect();
    assert!(Classifier::new(many, 0).is_err());
}

#[test]
fn flow_hash_is_symmetric_and_discriminating() {
    let f = tcp4("10.0.0.1", 40000, "192.168.1.2", 80);
    assert_eq!(f.flow_hash(1), f.reversed().flow_hash(1));
    assert_ne!(f.flow_hash(1), f.flow_hash(2), "seeded");
    assert_ne!(
        f.flow_hash_directional(1),
        f.reversed().flow_hash_directional(1)
    );
    let v6 = Fields::ip(
        ip("2001:db8::1"),
        ip("2001:db8::2"),
        Proto::UDP,
        Some(5),
        Some(6),
    );
    assert_eq!(v6.flow_hash(7), v6.reversed().flow_hash(7));
    // Same addresses, swapped ports only: a different flow.
    let g = tcp4("10.0.0.1", 80, "192.168.1.2", 40000);
    assert_ne!(f.flow_hash(1), g.flow_hash(1));
    // Protocol matters.
    let mut u = f;
    u.proto = Some(Proto::UDP);
    assert_ne!(f.flow_hash(1), u.flow_hash(1));
    // VLAN and DSCP do not.
    let mut d = f;
    d.dscp = Some(46);
    d.vlan = Some(3);
    assert_eq!(f.flow_hash(1), d.flow_hash(1));
    // v4 vs v4-mapped v6 differ.
    let m = Fields::ip(
        ip("::ffff:10.0.0.1"),
        ip("::ffff:192.168.1.2"),
        Proto::TCP,
        Some(40000),
        Some(80),
    );
    assert_ne!(f.flow_hash(1), m.flow_hash(1));
    // Many distinct 5-tuples: no collisions in 64 bits.
    let mut seen = std::collections::HashSet::new();
    for a in 0..50u32 {
        for p in 0..200u16 {
            let f = Fields::ip(
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + a)),
                ip("192.168.1.2"),
                Proto::TCP,
                Some(1024 + p),
                Some(80),
            );
            assert!(seen.insert(f.flow_hash(0)));
            assert_eq!(f.flow_hash(0), f.reversed().flow_hash(0));
        }
    }
}

/// Chi-square of `hashes` over 1024 buckets taken from the given bit offset.
fn chi2(hashes: &[u64], shift: u32) -> f64 {
    let mut b = [0u32; 1024];
    for h in hashes {
        b[((h >> shift) & 1023) as usize] += 1;
    }
    let e = hashes.len() as f64 / 1024.0;
    b.iter().map(|&o| (o as f64 - e).powi(2) / e).sum()
}

#[test]
fn flow_hash_spreads_sequential_ports() {
    // 10,000 flows differing only in the source port: chi-square over 1024 buckets has
    // 1023 degrees of freedom, mean 1023, sd ~45; 1250 is about 5 sd.
    for seed in [0u64, 1, 0xdead_beef] {
        for (v6, directional) in [(false, false), (true, false), (false, true)] {
            let (s, d) = if v6 {
                (ip("2001:db8::1"), ip("2001:db8::2"))
            } else {
                (ip("10.0.0.1"), ip("10.0.0.2"))
            };
            let hs: Vec<u64> = (0..10_000u16)
                .map(|p| {
                    let f = Fields::ip(s, d, Proto::TCP, Some(1024 + p), Some(80));
                    if directional {
                        f.flow_hash_directional(seed)
                    } else {
                        f.flow_hash(seed)
                    }
                })
                .collect();
            for shift in [0, 27, 54] {
                let x = chi2(&hs, shift);
                assert!(x < 1250.0, "seed {seed} v6 {v6} shift {shift}: chi2 {x}");
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn parsers_never_panic(s in "\\PC{0,40}") {
        let _ = IpNet::parse(&s);
        let _ = PortSet::parse(&s);
        let _ = Proto::parse(&s);
        let _ = parse_dscp(&s);
        let _ = parse_vlan(&s);
    }

    #[test]
    fn prefix_contains_agrees_with_bit_compare(a: u32, b: u32, len in 0u8..=32) {
        let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let n = IpNet::new(IpAddr::V4(Ipv4Addr::from(a & m)), len).unwrap();
        proptest::prop_assert_eq!(n.contains(IpAddr::V4(Ipv4Addr::from(b))), (a ^ b) & m == 0);
        proptest::prop_assert_eq!(IpNet::parse(&n.to_string()), Ok(n));
        proptest::prop_assert_eq!(IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), len).is_ok(), a & !m == 0);
    }

    #[test]
    fn prefix6_contains_agrees_with_bit_compare(a: u128, b: u128, len in 0u8..=128) {
        let m = if len == 0 { 0 } else { u128::MAX << (128 - len as u32) };
        let n = IpNet::new(IpAddr::V6(Ipv6Addr::from(a & m)), len).unwrap();
        proptest::prop_assert_eq!(n.contains(IpAddr::V6(Ipv6Addr::from(b))), (a ^ b) & m == 0);
        proptest::prop_assert_eq!(IpNet::parse(&n.to_string()), Ok(n));
    }

    #[test]
    fn port_set_agrees_with_naive(rs in proptest::collection::vec((0u16.., 0u16..200), 1..6), p: u16) {
        let rs: Vec<(u16, u16)> = rs.into_iter().map(|(lo, w)| (lo, lo.saturating_add(w))).collect();
        let s = PortSet::from_ranges(rs.iter().copied()).unwrap();
        let naive = rs.iter().any(|&(lo, hi)| lo <= p && p <= hi);
        proptest::prop_assert_eq!(s.contains(p), naive);
        proptest::prop_assert_eq!(PortSet::parse(&s.to_string()), Ok(s));
    }

    #[test]
    fn flow_hash_always_symmetric(a: u128, b: u128, v6: bool, proto: Option<u8>,
                                  sp: Option<u16>, dp: Option<u16>, seed: u64) {
        let mk = |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
        let f = Fields { src: Some(mk(a)), dst: Some(mk(b)), proto, sport: sp, dport: dp, ..Fields::default() };
        proptest::prop_assert_eq!(f.flow_hash(seed), f.reversed().flow_hash(seed));
    }
}

#[test]
fn flow_hash_avalanche() {
    // Flipping one input bit flips about half the output bits.
    let base = tcp4("10.0.0.1", 40000, "192.168.1.2", 80);
    let mut total = 0u32;
    let mut n = 0u32;
    for bit in 0..16 {
        let mut f = base;
        f.sport = Some(40000 ^ (1 << bit));
        total += (f.flow_hash(3) ^ base.flow_hash(3)).count_ones();
        let mut g = base;
        g.src = Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0001u32 ^ (1 << bit))));
        total += (g.flow_hash(3) ^ base.flow_hash(3)).count_ones();
        n += 2;
    }
    let avg = total as f64 / n as f64;
    assert!((26.0..38.0).contains(&avg), "avg flipped bits {avg}");
}
