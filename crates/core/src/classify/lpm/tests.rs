use super::*;
use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;

fn net(s: &str) -> IpNet {
    IpNet::parse(s).expect(s)
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect(s)
}

fn table(entries: &[(&str, u32)], nesting: Nesting) -> PrefixTable {
    let e: Vec<(IpNet, u32)> = entries.iter().map(|&(s, v)| (net(s), v)).collect();
    PrefixTable::build(&e, nesting).expect("builds")
}

/// The longest match by a linear scan (the reference).
fn naive(entries: &[(IpNet, u32)], a: IpAddr) -> Option<u32> {
    entries
        .iter()
        .filter(|(n, _)| n.contains(a))
        .max_by_key(|(n, _)| n.prefix_len())
        .map(|&(_, v)| v)
}

const A: u32 = 1;
const B: u32 = 2;
const C: u32 = 3;
const D: u32 = 4;

#[test]
fn nested_v4() {
    let t = table(
        &[("10.0.0.0/8", A), ("10.1.0.0/16", B), ("10.1.2.3/32", C)],
        Nesting::LongestWins,
    );
    assert_eq!(t.lookup(ip("10.1.2.3")), Some(C));
    assert_eq!(t.lookup(ip("10.1.2.4")), Some(B));
    assert_eq!(t.lookup(ip("10.1.2.2")), Some(B));
    assert_eq!(t.lookup(ip("10.2.0.1")), Some(A));
    assert_eq!(t.lookup(ip("11.0.0.1")), None);
    // Boundaries: first and last address of each prefix, and just outside.
    assert_eq!(t.lookup(ip("10.0.0.0")), Some(A));
    assert_eq!(t.lookup(ip("10.255.255.255")), Some(A));
    assert_eq!(t.lookup(ip("9.255.255.255")), None);
    assert_eq!(t.lookup(ip("11.0.0.0")), None);
    assert_eq!(t.lookup(ip("10.1.0.0")), Some(B));
    assert_eq!(t.lookup(ip("10.1.255.255")), Some(B));
    assert_eq!(t.lookup(ip("10.0.255.255")), Some(A));
    assert_eq!(t.lookup(ip("10.2.0.0")), Some(A));
    // Never an IPv6 address (IPv4-mapped included).
    assert_eq!(t.lookup(ip("::ffff:10.1.2.3")), None);
    assert_eq!(t.lookup(ip("::a01:203")), None);
    assert_eq!(t.lookup_v4(u32::from(Ipv4Addr::new(10, 1, 2, 3))), Some(C));
    assert_eq!(t.len(), 3);
}

#[test]
fn nested_v6() {
    let t = table(
        &[
            ("2001:db8::/32", A),
            ("2001:db8:1::/48", B),
            ("2001:db8:1:2::/64", C),
            ("2001:db8:1:2::7/128", D),
        ],
        Nesting::LongestWins,
    );
    assert_eq!(t.lookup(ip("2001:db8:1:2::7")), Some(D));
    assert_eq!(t.lookup(ip("2001:db8:1:2::6")), Some(C));
    assert_eq!(t.lookup(ip("2001:db8:1:2::8")), Some(C));
    assert_eq!(t.lookup(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")), Some(C));
    assert_eq!(t.lookup(ip("2001:db8:1:3::")), Some(B));
    assert_eq!(t.lookup(ip("2001:db8:1:1:ffff:ffff:ffff:ffff")), Some(B));
    assert_eq!(t.lookup(ip("2001:db8:1::")), Some(B));
    assert_eq!(t.lookup(ip("2001:db8:2::1")), Some(A));
    assert_eq!(t.lookup(ip("2001:db8::")), Some(A));
    assert_eq!(
        t.lookup(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")),
        Some(A)
    );
    assert_eq!(t.lookup(ip("2001:db9::")), None);
    assert_eq!(t.lookup(ip("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff")), None);
    assert_eq!(t.lookup(ip("10.0.0.1")), None);
    let a = u128::from("2001:db8:1:2::7".parse::<Ipv6Addr>().expect("v6"));
    assert_eq!(t.lookup_v6(a), Some(D));
}

#[test]
fn default_routes() {
    let t = table(
        &[("0.0.0.0/0", A), ("::/0", B), ("192.168.0.0/16", C)],
        Nesting::LongestWins,
    );
    assert_eq!(t.lookup(ip("0.0.0.0")), Some(A));
    assert_eq!(t.lookup(ip("255.255.255.255")), Some(A));
    assert_eq!(t.lookup(ip("192.168.3.4")), Some(C));
    assert_eq!(t.lookup(ip("192.169.0.0")), Some(A));
    assert_eq!(t.lookup(ip("::")), Some(B));
    assert_eq!(
        t.lookup(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
        Some(B)
    );
    // IPv4-mapped IPv6 is IPv6: the IPv6 default, not the IPv4 /16.
    assert_eq!(t.lookup(ip("::ffff:192.168.3.4")), Some(B));
    // An IPv4-mapped prefix matches only mapped addresses.
    let t = table(&[("::ffff:0:0/96", D)], Nesting::Reject);
    assert_eq!(t.lookup(ip("::ffff:1.2.3.4")), Some(D));
    assert_eq!(t.lookup(ip("1.2.3.4")), None);
}

#[test]
fn empty_table() {
    let t = PrefixTable::default();
    assert!(t.is_empty());
    assert_eq!(t.lookup(ip("1.2.3.4")), None);
    assert_eq!(t.lookup(ip("::1")), None);
    assert_eq!(t.lookup_v4(0), None);
    assert_eq!(t.lookup_v4(u32::MAX), None);
    assert_eq!(t.lookup_v6(u128::MAX), None);
}

#[test]
fn host_routes_at_the_ends_of_the_space() {
    let t = table(
        &[
            ("0.0.0.0/32", A),
            ("255.255.255.255/32", B),
            ("::/128", C),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", D),
        ],
        Nesting::Reject,
    );
    assert_eq!(t.lookup_v4(0), Some(A));
    assert_eq!(t.lookup_v4(1), None);
    assert_eq!(t.lookup_v4(u32::MAX), Some(B));
    assert_eq!(t.lookup_v4(u32::MAX - 1), None);
    assert_eq!(t.lookup_v6(0), Some(C));
    assert_eq!(t.lookup_v6(1), None);
    assert_eq!(t.lookup_v6(u128::MAX), Some(D));
    assert_eq!(t.lookup_v6(u128::MAX - 1), None);
}

/// A lone /128 far below its /32 is one path-compressed node (below the /32's own node,
/// whose check sends addresses outside it to no match), and an address differing in any
/// skipped bit gets the value around it.
#[test]
fn path_compression_checks_skipped_bits() {
    let t = table(
        &[("2001:db8::/32", A), ("2001:db8:0:1234::5678/128", B)],
        Nesting::LongestWins,
    );
    let s = t.stats();
    assert_eq!(s.max_levels, 2, "{s:?}");
    assert_eq!((s.small_nodes, s.full_nodes), (2, 0), "{s:?}");
    let host = u128::from("2001:db8:0:1234::5678".parse::<Ipv6Addr>().expect("v6"));
    assert_eq!(t.lookup_v6(host), Some(B));
    for bit in 0..96 {
        // Every bit inside the /32 (skipped ones and those of the last byte): the /32.
        assert_eq!(t.lookup_v6(host ^ 1 << bit), Some(A), "bit {bit}");
    }
    for bit in 96..128 {
        assert_eq!(t.lookup_v6(host ^ 1 << bit), None, "bit {bit}");
    }
}

/// Merged runs of equal values; a block with more runs than a run node holds is a full
/// node.
#[test]
fn full_and_run_nodes() {
    // 32 /29s with distinct values in 10.0.0.0/24: 32 runs → a full node.
    let e: Vec<(IpNet, u32)> = (0..32)
        .map(|i| (net(&format!("10.0.0.{}/29", i * 8)), i))
        .collect();
    let t = PrefixTable::build(&e, Nesting::Reject).expect("builds");
    let s = t.stats();
    assert_eq!(
        (s.small_nodes, s.wide_nodes, s.full_nodes),
        (0, 0, 1),
        "{s:?}"
    );
    for a in 0..=255u32 {
        assert_eq!(t.lookup_v4(0x0a00_0000 | a), Some(a / 8));
    }
    assert_eq!(t.lookup_v4(0x0a00_0100), None);
    assert_eq!(t.lookup_v4(0x09ff_ffff), None);
    // The same /29s all with one value merge into one interval: one node (a /24 under
    // the 8-bit root) with one run, for its check of bits 8-23.
    let e: Vec<(IpNet, u32)> = e.iter().map(|&(n, _)| (n, 7)).collect();
    let t = PrefixTable::build(&e, Nesting::Reject).expect("builds");
    let s = t.stats();
    assert_eq!(
        (s.small_nodes, s.full_nodes, s.v4_intervals),
        (1, 0, 3),
        "{s:?}"
    );
    assert_eq!(t.lookup(ip("10.0.0.77")), Some(7));
    assert_eq!(t.lookup(ip("10.0.1.0")), None);
    assert_eq!(t.lookup(ip("10.1.0.0")), None);
}

/// The most runs a run node holds: IPv4 9 in one line, 19 in two; IPv6 7 and 17; one
/// more → a full node.
#[test]
fn run_node_capacity() {
    for (v6, n, kinds) in [
        (false, 4, (1, 0, 0)),
        (false, 5, (0, 1, 0)),
        (false, 9, (0, 1, 0)),
        (false, 10, (0, 0, 1)),
        (true, 3, (1, 0, 0)),
        (true, 4, (0, 1, 0)),
        (true, 8, (0, 1, 0)),
        (true, 9, (0, 0, 1)),
    ] {
        // n /29s (or /125s) every 16 addresses from 16 in one /24 (/120): 2n + 1 runs.
        let e: Vec<(IpNet, u32)> = (0..n)
            .map(|i| {
                let s = if v6 {
                    format!("2001:db8::{:x}/125", 16 * i + 16)
                } else {
                    format!("10.0.0.{}/29", 16 * i + 16)
                };
                (net(&s), i)
            })
            .collect();
        let t = PrefixTable::build(&e, Nesting::Reject).expect("builds");
        let s = t.stats();
        assert_eq!(
            (s.small_nodes, s.wide_nodes, s.full_nodes),
            kinds,
            "v6 {v6}, {n} prefixes: {s:?}"
        );
        for k in 0..300u32 {
            let a = if v6 {
                IpAddr::V6(Ipv6Addr::from(0x2001_0db8u128 << 96 | k as u128))
            } else {
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + k))
            };
            assert_eq!(t.lookup(a), naive(&e, a), "{a}");
        }
    }
}

/// 25 runs in a block of 64 addresses: more than a run node holds, so a full node of
/// stride 8 over the enclosing /24 answers for the block (its other entries unused).
#[test]
fn tiny_block_with_many_runs() {
    let mut e: Vec<(IpNet, u32)> = (0..12)
        .map(|i| (net(&format!("10.0.0.{}/32", 2 * i + 1)), i))
        .collect();
    // Far enough away that the parent node (at bit 10, stride 16) has 64-address blocks.
    e.push((net("10.32.0.0/32"), 99));
    let t = PrefixTable::build(&e, Nesting::Reject).expect("builds");
    let s = t.stats();
    assert_eq!(
        (s.small_nodes, s.wide_nodes, s.full_nodes, s.max_levels),
        (2, 0, 1, 2),
        "{s:?}"
    );
    for a in (0x0a00_0000..0x0a00_0120).chain(0x0a1f_fff0..0x0a20_0050) {
        let a = IpAddr::V4(Ipv4Addr::from(a));
        assert_eq!(t.lookup(a), naive(&e, a), "{a}");
    }
    assert_eq!(t.lookup(ip("10.0.0.23")), Some(11));
    assert_eq!(t.lookup(ip("10.0.0.24")), None);
    assert_eq!(t.lookup(ip("10.32.0.0")), Some(99));
}

#[test]
fn conflicts_duplicates_and_overlaps() {
    let e: Vec<(IpNet, u32)> = [
        "10.0.0.0/24",   // 0
        "10.0.0.128/25", // 1: inside 0
        "10.0.1.0/24",   // 2
        "10.0.0.0/24",   // 3: duplicate of 0
        "10.0.0.130/32", // 4: inside 1 (nearest), and 0
        "10.0.0.0/24",   // 5: duplicate of 0
        "::a00:0/120",   // 6: another family: no conflict
        "2001:db8::/56", // 7
        "2001:db8::/64", // 8: inside 7
        "10.0.2.0/24",   // 9
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| (net(s), i as u32))
    .collect();
    let c = PrefixTable::conflicts(&e);
    assert_eq!(
        c,
        vec![
            Conflict::Overlap { outer: 0, inner: 1 },
            Conflict::Duplicate {
                first: 0,
                second: 3
            },
            Conflict::Overlap { outer: 1, inner: 4 },
            Conflict::Duplicate {
                first: 0,
                second: 5
            },
            Conflict::Overlap { outer: 7, inner: 8 },
        ]
    );
    assert_eq!((c[2].at(), c[2].other()), (4, 1));
    assert_eq!(
        PrefixTable::build(&e, Nesting::Reject).err(),
        Some(BuildError::Conflicts(c))
    );
    // Nesting allowed: only the duplicates remain errors.
    assert_eq!(
        PrefixTable::build(&e, Nesting::LongestWins).err(),
        Some(BuildError::Conflicts(vec![
            Conflict::Duplicate {
                first: 0,
                second: 3
            },
            Conflict::Duplicate {
                first: 0,
                second: 5
            },
        ]))
    );
    // Without the duplicates, nesting builds and the longest wins.
    let e: Vec<(IpNet, u32)> = e
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 5)
        .map(|(_, e)| e)
        .collect();
    let t = PrefixTable::build(&e, Nesting::LongestWins).expect("builds");
    assert_eq!(t.lookup(ip("10.0.0.130")), Some(4));
    assert_eq!(t.lookup(ip("10.0.0.129")), Some(1));
    assert_eq!(t.lookup(ip("10.0.0.127")), Some(0));
    assert_eq!(t.lookup(ip("2001:db8::1")), Some(8));
    assert_eq!(t.lookup(ip("2001:db8:0:1::1")), Some(7));
    // Adjacent and disjoint prefixes are no conflict.
    let e = vec![(net("10.0.0.0/25"), 1), (net("10.0.0.128/25"), 2)];
    assert!(PrefixTable::conflicts(&e).is_empty());
}

#[test]
fn value_too_large() {
    let e = vec![
        (net("10.0.0.0/8"), PrefixTable::MAX_VALUE),
        (net("11.0.0.0/8"), PrefixTable::MAX_VALUE + 1),
    ];
    assert_eq!(
        PrefixTable::build(&e, Nesting::Reject).err(),
        Some(BuildError::ValueTooLarge {
            index: 1,
            value: 0x7FFF_FFFF
        })
    );
    let t = PrefixTable::build(&e[..1], Nesting::Reject).expect("builds");
    assert_eq!(t.lookup(ip("10.9.9.9")), Some(PrefixTable::MAX_VALUE));
}

/// The conflicts by brute force over all pairs: duplicates against the first copy;
/// overlaps of each first copy against its nearest (longest, then first) container.
fn naive_conflicts(e: &[(IpNet, u32)]) -> Vec<Conflict> {
    let first = |i: usize| (0..i).find(|&j| e[j].0 == e[i].0);
    let mut out = Vec::new();
    for i in 0..e.len() {
        if let Some(j) = first(i) {
            out.push(Conflict::Duplicate {
                first: j,
                second: i,
            });
            continue;
        }
        let outer = (0..e.len())
            .filter(|&j| {
                e[j].0.prefix_len() < e[i].0.prefix_len()
                    && e[j].0.contains(e[i].0.addr())
                    && first(j).is_none()
            })
            .max_by_key(|&j| (e[j].0.prefix_len(), core::cmp::Reverse(j)));
        if let Some(outer) = outer {
            out.push(Conflict::Overlap { outer, inner: i });
        }
    }
    out.sort_unstable_by_key(|c| (c.at(), c.other()));
    out
}

/// A prefix near one of a few bases (so that prefixes nest, touch and repeat), with a
/// random length; IPv4 or IPv6.
fn arb_net() -> impl Strategy<Value = IpNet> {
    (any::<bool>(), 0usize..4, any::<u128>(), 0u8..=128, 0u8..4).prop_map(
        |(v6, base, noise, len, spread)| {
            // Bases share long prefixes; noise flips some of the low bits.
            let bases4 = [0x0a01_0200u32, 0x0a01_02ff, 0x0a01_8000, 0xc0a8_0000];
            let bases6 = [
                0x2001_0db8_0000_0001_0000_0000_0000_0000u128,
                0x2001_0db8_0000_0001_ffff_0000_0000_00ffu128,
                0x2001_0db8_00ff_0000_0000_0000_0000_0000u128,
                0,
            ];
            let keep = [4u32, 12, 24, 40][spread as usize];
            // Mostly lengths that end inside the noisy low bits; some short ones.
            let len = len as u32;
            if v6 {
                let a = bases6[base] ^ (noise & ((1u128 << keep) - 1));
                let len = if len < 8 {
                    len * 8
                } else {
                    128 - len % (keep + 8)
                };
                mask_new(IpAddr::V6(a.into()), len as u8).expect("valid")
            } else {
                let keep = keep.min(28);
                let a = bases4[base] ^ (noise as u32 & ((1u32 << keep) - 1));
                let len = if len < 8 {
                    len * 4
                } else {
                    32 - len % (keep + 4)
                };
                mask_new(IpAddr::V4(a.into()), len as u8).expect("valid")
            }
        },
    )
}

/// `IpNet::new` after clearing the host bits.
fn mask_new(a: IpAddr, len: u8) -> Result<IpNet, crate::units::UnitError> {
    match a {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpNet::new(IpAddr::V4((u32::from(a) & m).into()), len)
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            IpNet::new(IpAddr::V6((u128::from(a) & m).into()), len)
        }
    }
}

/// Addresses to probe: for each prefix its first and last address, the addresses just
/// outside, and one inside chosen by `noise`; plus the fully random ones.
fn probes(e: &[(IpNet, u32)], noise: &[u128]) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (k, (n, _)) in e.iter().enumerate() {
        let r = noise[k % noise.len()];
        match n.addr() {
            IpAddr::V4(a) => {
                let first = u32::from(a);
                let host = (1u64 << (32 - n.prefix_len())) - 1;
                let last = first | host as u32;
                for x in [
                    first,
                    last,
                    first.wrapping_sub(1),
                    last.wrapping_add(1),
                    first | (r as u32 & host as u32),
                ] {
                    out.push(IpAddr::V4(x.into()));
                }
            }
            IpAddr::V6(a) => {
                let first = u128::from(a);
                let host = u128::MAX.checked_shr(n.prefix_len() as u32).unwrap_or(0);
                let last = first | host;
                for x in [
                    first,
                    last,
                    first.wrapping_sub(1),
                    last.wrapping_add(1),
                    first | (r & host),
                ] {
                    out.push(IpAddr::V6(x.into()));
                }
            }
        }
    }
    for &r in noise {
        out.push(IpAddr::V4((r as u32).into()));
        out.push(IpAddr::V6(r.into()));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The table answers every probe as the linear longest match does, for nested sets
    /// (duplicates dropped); conflicts are exactly the brute-force ones; a build with
    /// `Reject` succeeds exactly when there are none.
    #[test]
    fn lookup_matches_linear_scan(
        nets in prop::collection::vec(arb_net(), 0..60),
        vals in prop::collection::vec(0u32..6, 60),
        noise in prop::collection::vec(any::<u128>(), 1..20),
    ) {
        let all: Vec<(IpNet, u32)> =
            nets.iter().zip(&vals).map(|(&n, &v)| (n, v)).collect();
        let c = PrefixTable::conflicts(&all);
        prop_assert_eq!(&c, &naive_conflicts(&all));
        let strict = PrefixTable::build(&all, Nesting::Reject);
        prop_assert_eq!(strict.is_ok(), c.is_empty());
        let dup: Vec<usize> = c
            .iter()
            .filter_map(|c| match c {
                Conflict::Duplicate { second, .. } => Some(*second),
                _ => None,
            })
            .collect();
        let e: Vec<(IpNet, u32)> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| !dup.contains(i))
            .map(|(_, &e)| e)
            .collect();
        let t = PrefixTable::build(&e, Nesting::LongestWins).expect("no duplicates");
        prop_assert_eq!(t.len(), e.len());
        for a in probes(&e, &noise) {
            prop_assert_eq!(t.lookup(a), naive(&e, a), "{} in {:?}", a, e);
        }
    }

    /// Many prefixes (so the root is 16 bits and nodes are full and small): spot checks
    /// against the linear scan.
    #[test]
    fn many_prefixes_match_linear_scan(
        nets in prop::collection::vec(arb_net(), 300..600),
        noise in prop::collection::vec(any::<u128>(), 1..50),
    ) {
        let mut e: Vec<(IpNet, u32)> = Vec::new();
        for (i, n) in nets.into_iter().enumerate() {
            if !e.iter().any(|(m, _)| *m == n) {
                e.push((n, i as u32 % 97));
            }
        }
        let t = PrefixTable::build(&e, Nesting::LongestWins).expect("no duplicates");
        for a in probes(&e, &noise) {
            prop_assert_eq!(t.lookup(a), naive(&e, a), "{}", a);
        }
    }
}
