//! Longest-prefix-match benchmark: `PrefixTable` lookups with 100,000 subscriber
//! prefixes.
//!
//! The goal (issue 27, "ISP scale: subscriber tables"): classification by longest-prefix
//! match over every circuit's prefixes, ≤ 50 ns per lookup at 100,000 prefixes, with the
//! build time and the memory reported.
//!
//! Set-up (not timed), two tables of 100,000 non-overlapping prefixes (built with
//! `Nesting::Reject`, so the conflict check is part of the build), each prefix its own
//! circuit (value = its index):
//! * 80,000 IPv4: 50 % /32 hosts, 20 % /30, 15 % /29, 15 % /24;
//! * 20,000 IPv6: 45 % /56, 45 % /64, 10 % /128.
//!
//! Placed two ways:
//! * `scattered` — uniformly at random over 1.0.0.0–223.255.255.255 and 2000::/3
//!   (conflicting draws redrawn): almost every prefix alone in its /16, so the table has
//!   the most nodes and every lookup walks cold lines. The worst case for the cache.
//! * `pools` — as an ISP numbers subscribers: per length, 8 pools at random places
//!   (IPv4 anywhere in the unicast space, IPv6 inside one random /32), each filled to
//!   about 60 % with prefixes in random slots (IPv6 /128s: random interface ids in 8
//!   /64s).
//!
//! Measured operations, each over 262,144 precomputed addresses in random order (so
//! consecutive lookups touch unrelated prefixes, never a hot loop on one address), read
//! sequentially from an array:
//! * `lookup_v4_hit` — `lookup_v4(u32)` of an address inside a random IPv4 prefix (random
//!   host bits);
//! * `lookup_v6_hit` — `lookup_v6(u128)`, the same for IPv6;
//! * `lookup_miss` — `lookup(IpAddr)` of an address just outside a random prefix (the
//!   address before its first or after its last, 80 % IPv4), where the walk is as deep
//!   as for a hit;
//! * `lookup_v4_hit_chained`, `lookup_v6_hit_chained` — the hits again, but each
//!   lookup's address index depends on the previous answer (`i + 1 + (answer == u32::MAX)`,
//!   never true), so lookups cannot overlap in the CPU: the latency of one lookup rather
//!   than the throughput of independent ones;
//! * `baseline` — the same loop over the IPv4 hit addresses without the lookup (reading
//!   the array, summing): what every figure includes.
//!
//! Every hit's answer is checked against the prefix it was drawn from, and every miss
//! against `None`, before anything is timed. Besides criterion's statistics every case
//! runs one fixed loop of 10,000,000 lookups timed in ten slices and prints ns/lookup
//! (mean, and the best slice: the figure least disturbed by other processes); a summary
//! is printed at the end, with a linear scan of the same 100,000 prefixes (what the
//! table replaces) for scale. Run with `taskset -c 1 cargo bench -p weir-core --bench
//! lpm`.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::Criterion;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant as WallClock;
use weir_core::classify::lpm::{Nesting, PrefixTable};
use weir_core::classify::IpNet;
use weir_core::Rng;

const V4: usize = 80_000;
const V6: usize = 20_000;
/// IPv4 lengths and their shares (in 1/20).
const V4_MIX: [(u8, usize); 4] = [(32, 10), (30, 4), (29, 3), (24, 3)];
/// IPv6 lengths and their shares (in 1/20).
const V6_MIX: [(u8, usize); 3] = [(56, 9), (64, 9), (128, 2)];
const ADDRS: usize = 1 << 18;
const FIXED: u64 = 10_000_000;

fn fixed_ops() -> u64 {
    common::fixed_count(FIXED)
}

#[derive(Clone, Copy, PartialEq)]
enum Placement {
    Scattered,
    Pools,
}

fn v4net(a: u32, len: u8) -> IpNet {
    let a = if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - len))
    };
    IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), len).expect("masked")
}

fn v6net(a: u128, len: u8) -> IpNet {
    let a = if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - len))
    };
    IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), len).expect("masked")
}

/// A random IPv4 unicast address (1.0.0.0–223.255.255.255).
fn v4_unicast(rng: &mut Rng) -> u32 {
    0x0100_0000 + rng.below(0xe000_0000 - 0x0100_0000) as u32
}

/// A random address in 2000::/3.
fn v6_global(rng: &mut Rng) -> u128 {
    let r = (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
    r >> 3 | 1 << 125
}

/// Drop the later entry of every conflict (and its value slot); `make` refills.
fn without_conflicts(nets: &mut Vec<IpNet>) {
    let e: Vec<(IpNet, u32)> = nets.iter().map(|&n| (n, 0)).collect();
    let mut bad: Vec<usize> = PrefixTable::conflicts(&e).iter().map(|c| c.at()).collect();
    bad.sort_unstable();
    bad.dedup();
    for i in bad.into_iter().rev() {
        nets.swap_remove(i);
    }
}

/// `count` prefixes per length from `draw`, redrawn until none conflicts.
fn fill(nets: &mut Vec<IpNet>, want: &[(u8, usize)], mut draw: impl FnMut(u8) -> IpNet) {
    loop {
        for &(len, count) in want {
            let have = nets.iter().filter(|n| n.prefix_len() == len).count();
            for _ in have..count {
                nets.push(draw(len));
            }
        }
        let before = nets.len();
        without_conflicts(nets);
        if nets.len() == before {
            return;
        }
    }
}

/// `n` random distinct aligned pools of 2^`bits` addresses inside the space of the
/// function `base` draws from.
fn pools(rng: &mut Rng, n: usize, bits: u32, base: &mut dyn FnMut(&mut Rng) -> u128) -> Vec<u128> {
    let mut out: Vec<u128> = Vec::new();
    while out.len() < n {
        let p = base(rng) >> bits << bits;
        if out.iter().all(|&q| q != p) {
            out.push(p);
        }
    }
    out
}

/// The 100,000 prefixes of a placement, in random order.
fn prefixes(placement: Placement, rng: &mut Rng) -> Vec<IpNet> {
    let v4_want: Vec<(u8, usize)> = V4_MIX.iter().map(|&(l, s)| (l, V4 * s / 20)).collect();
    let v6_want: Vec<(u8, usize)> = V6_MIX.iter().map(|&(l, s)| (l, V6 * s / 20)).collect();
    let mut v4 = Vec::with_capacity(V4);
    let mut v6 = Vec::with_capacity(V6);
    match placement {
        Placement::Scattered => {
            fill(&mut v4, &v4_want, |len| v4net(v4_unicast(rng), len));
            fill(&mut v6, &v6_want, |len| v6net(v6_global(rng), len));
        }
        Placement::Pools => {
            // Per length: 8 pools with room for count / 0.6 prefixes, at random.
            let mut r2 = Rng::new(rng.next_u64());
            let mut v4pools = Vec::new();
            for &(len, count) in &v4_want {
                let slots = ((count as f64 / 0.6 / 8.0).ceil() as u64).next_power_of_two();
                let bits = 32 - len as u32 + slots.trailing_zeros();
                let ps = pools(&mut r2, 8, bits, &mut |r| v4_unicast(r) as u128);
                v4pools.push((len, ps, bits));
            }
            let isp = v6_global(rng) >> 96 << 96;
            let mut v6pools = Vec::new();
            for &(len, count) in &v6_want {
                let (ps, bits) = if len == 128 {
                    (pools(&mut r2, 8, 64, &mut |r| isp | v6_global(r) >> 32), 64)
                } else {
                    let slots = ((count as f64 / 0.6 / 8.0).ceil() as u64).next_power_of_two();
                    let bits = 128 - len as u32 + slots.trailing_zeros();
                    (
                        pools(&mut r2, 8, bits, &mut |r| isp | v6_global(r) >> 32),
                        bits,
                    )
                };
                v6pools.push((len, ps, bits));
            }
            fill(&mut v4, &v4_want, |len| {
                let (_, ps, bits) = v4pools.iter().find(|p| p.0 == len).expect("pool");
                let p = ps[rng.below(8) as usize] as u32;
                v4net(
                    p | (rng.next_u64() as u32 & ((1u64 << bits) - 1) as u32),
                    len,
                )
            });
            fill(&mut v6, &v6_want, |len| {
                let (_, ps, bits) = v6pools.iter().find(|p| p.0 == len).expect("pool");
                let p = ps[rng.below(8) as usize];
                v6net(p | (v6_global(rng) & ((1u128 << bits) - 1)), len)
            });
        }
    }
    let mut all: Vec<IpNet> = v4.into_iter().chain(v6).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    all
}

/// An address inside `n` (random host bits) and one just outside it.
fn inside(n: &IpNet, rng: &mut Rng) -> IpAddr {
    let mut host = |bits: u32| -> u128 {
        let r = (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
        r & u128::MAX
            .checked_shr(128 - (bits - n.prefix_len() as u32))
            .unwrap_or(0)
    };
    match n.addr() {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) | host(32) as u32)),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) | host(128))),
    }
}

fn outside(n: &IpNet, before: bool) -> IpAddr {
    let (bits, first) = match n.addr() {
        IpAddr::V4(a) => (32, u32::from(a) as u128),
        IpAddr::V6(a) => (128, u128::from(a)),
    };
    let all = u128::MAX >> (128 - bits);
    let last = first | all.checked_shr(n.prefix_len() as u32).unwrap_or(0);
    let x = if before {
        first.wrapping_sub(1)
    } else {
        last.wrapping_add(1)
    } & all;
    if bits == 32 {
        IpAddr::V4(Ipv4Addr::from(x as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(x))
    }
}

struct Case {
    table: PrefixTable,
    v4_hit: Vec<u32>,
    v6_hit: Vec<u128>,
    miss: Vec<IpAddr>,
    /// Entries, for the linear scan.
    entries: Vec<(IpNet, u32)>,
    build_ms: f64,
    conflicts_ms: f64,
}

fn case(placement: Placement) -> Case {
    let mut rng = Rng::new(0x6c70_6d00 + placement as u64);
    let nets = prefixes(placement, &mut rng);
    let entries: Vec<(IpNet, u32)> = nets
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i as u32))
        .collect();
    let t0 = WallClock::now();
    let c = PrefixTable::conflicts(&entries);
    let conflicts_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert!(c.is_empty());
    let t0 = WallClock::now();
    let table = PrefixTable::build(&entries, Nesting::Reject).expect("no conflicts");
    let build_ms = t0.elapsed().as_secs_f64() * 1e3;
    let (v4i, v6i): (Vec<usize>, Vec<usize>) =
        (0..entries.len()).partition(|&i| entries[i].0.is_ipv4());
    let mut v4_hit = Vec::with_capacity(ADDRS);
    let mut v6_hit = Vec::with_capacity(ADDRS);
    let mut miss = Vec::with_capacity(ADDRS);
    while v4_hit.len() < ADDRS {
        let i = v4i[rng.below(v4i.len() as u64) as usize];
        let a = inside(&entries[i].0, &mut rng);
        assert_eq!(table.lookup(a), Some(i as u32), "{a}");
        let IpAddr::V4(a) = a else { unreachable!() };
        v4_hit.push(u32::from(a));
    }
    while v6_hit.len() < ADDRS {
        let i = v6i[rng.below(v6i.len() as u64) as usize];
        let a = inside(&entries[i].0, &mut rng);
        assert_eq!(table.lookup(a), Some(i as u32), "{a}");
        let IpAddr::V6(a) = a else { unreachable!() };
        v6_hit.push(u128::from(a));
    }
    while miss.len() < ADDRS {
        let i = rng.below(entries.len() as u64) as usize;
        let a = outside(&entries[i].0, rng.chance(0.5));
        if table.lookup(a).is_none() {
            miss.push(a);
        }
    }
    Case {
        table,
        v4_hit,
        v6_hit,
        miss,
        entries,
        build_ms,
        conflicts_ms,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    V4Hit,
    V6Hit,
    V4HitChained,
    V6HitChained,
    Miss,
    Baseline,
}

struct Bench<'a> {
    c: &'a Case,
    op: Op,
    i: usize,
    /// Answers seen (hits, or misses for `Miss`) since the last check, out of `n`.
    good: u64,
    n: u64,
}

impl Bench<'_> {
    #[inline(never)]
    fn run(&mut self, n: u64) {
        let c = self.c;
        let mut good = 0u64;
        let mut i = self.i;
        for _ in 0..n {
            let mut step = 1;
            good += match self.op {
                Op::V4Hit => c.table.lookup_v4(c.v4_hit[i]).is_some() as u64,
                Op::V6Hit => c.table.lookup_v6(c.v6_hit[i]).is_some() as u64,
                Op::V4HitChained | Op::V6HitChained => {
                    let r = if self.op == Op::V4HitChained {
                        c.table.lookup_v4(c.v4_hit[i])
                    } else {
                        c.table.lookup_v6(c.v6_hit[i])
                    };
                    step += (r == Some(u32::MAX)) as usize;
                    r.is_some() as u64
                }
                Op::Miss => c.table.lookup(c.miss[i]).is_none() as u64,
                Op::Baseline => (black_box(c.v4_hit[i]) != 0) as u64,
            };
            i = (i + step) & (ADDRS - 1);
        }
        self.i = i;
        self.good += black_box(good);
        self.n += n;
    }

    /// Every answer was the expected kind (hit or miss).
    fn check(&mut self) {
        assert_eq!(self.good, self.n, "a lookup gave the wrong kind of answer");
        (self.good, self.n) = (0, 0);
    }
}

struct Row {
    id: String,
    fixed_ns: (f64, f64),
}

fn bench(c: &mut Criterion, rows: &mut Vec<Row>, case: &Case, group: &str, name: &str, op: Op) {
    let id = format!("{group}/{name}");
    let only = std::env::var("LPM_FIXED_ONLY").ok();
    if only.as_ref().is_some_and(|o| !id.contains(o.as_str())) {
        return;
    }
    let mut b = Bench {
        c: case,
        op,
        i: 0,
        good: 0,
        n: 0,
    };
    let n = fixed_ops();
    let (mean, best) = common::timed_slices(n, |k| b.run(k));
    b.check();
    eprintln!("{id}: {mean:.1} ns/lookup over {n} lookups (fixed loop; best tenth {best:.1})");
    if only.is_some() {
        return;
    }
    common::per_element(c, group, name, |iters| b.run(iters));
    b.check();
    rows.push(Row {
        id,
        fixed_ns: (mean, best),
    });
}

/// ns per lookup of a linear longest-match scan over the entries (1,000 addresses).
fn linear_scan(case: &Case) -> f64 {
    let t0 = WallClock::now();
    let mut found = 0;
    for &a in case.v4_hit.iter().take(1000) {
        let a = IpAddr::V4(Ipv4Addr::from(a));
        let m = case
            .entries
            .iter()
            .filter(|(n, _)| n.contains(a))
            .max_by_key(|(n, _)| n.prefix_len());
        found += m.is_some() as usize;
    }
    assert_eq!(black_box(found), 1000);
    t0.elapsed().as_secs_f64() * 1e9 / 1000.0
}

fn main() {
    let mut c = common::criterion();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (group, placement) in [
        ("scattered", Placement::Scattered),
        ("pools", Placement::Pools),
    ] {
        let case = case(placement);
        let s = case.table.stats();
        let note = format!(
            "{group}: {} prefixes ({} IPv4, {} IPv6), {} + {} intervals; build {:.1} ms \
             (of which the conflict check {:.1} ms); memory {} B ({:.2} MiB) = {:.1} B per \
             prefix; nodes: {} one-line + {} two-line run nodes, {} full; at most {} \
             levels below the root; linear scan {:.0} ns/lookup",
            case.table.len(),
            s.v4_prefixes,
            s.v6_prefixes,
            s.v4_intervals,
            s.v6_intervals,
            case.build_ms,
            case.conflicts_ms,
            s.bytes,
            s.bytes as f64 / (1 << 20) as f64,
            s.bytes as f64 / case.table.len() as f64,
            s.small_nodes,
            s.wide_nodes,
            s.full_nodes,
            s.max_levels,
            linear_scan(&case),
        );
        eprintln!("{note}");
        notes.push(note);
        for (name, op) in [
            ("lookup_v4_hit", Op::V4Hit),
            ("lookup_v6_hit", Op::V6Hit),
            ("lookup_miss", Op::Miss),
            ("lookup_v4_hit_chained", Op::V4HitChained),
            ("lookup_v6_hit_chained", Op::V6HitChained),
            ("baseline", Op::Baseline),
        ] {
            bench(&mut c, &mut rows, &case, group, name, op);
        }
    }
    c.final_summary();
    eprintln!(
        "\nsummary: ns/lookup of the fixed {}-lookup loop (mean, best tenth); goal <= 50",
        fixed_ops()
    );
    for r in &rows {
        eprintln!("  {:<32} {:>6.1} {:>6.1}", r.id, r.fixed_ns.0, r.fixed_ns.1);
    }
    for n in &notes {
        eprintln!("  {n}");
    }
}
