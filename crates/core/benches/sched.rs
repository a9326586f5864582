//! Scheduler benchmark: one enqueue + one dequeue through the link-sharing scheduler per
//! measured element, in steady state.
//!
//! The goal (from the project's issue): enqueue+dequeue through a 3-level tree of 64 leaf
//! classes with 10,000 active flows at ≤ 150 ns/packet (QFQ's published figure is ~110 ns),
//! with memory per flow reported.
//!
//! Set-up (not timed):
//! * `isp10k`: a subscriber table's shape — root → 10 sites → 10 access points each →
//!   100 circuits each = 10,000 leaves, one flow each (the goal: ≤ 150 ns a
//!   packet with 10,000 active leaves in a 3-level tree); leaves FIFOs (the scheduler
//!   alone) or a circuit's own leaf (`lazy_fq_cobalt`: flow queuing with COBALT, 1,024
//!   flows, built on first use).
//! * `tree3`: root (the link, 100 Gbit/s) → 4 → 4 → 4 = 64 leaves. Each class's assured
//!   rate is `share × parent rate / 4` (share = 1: rates sum to the parent's), ceil = the
//!   link, burst = rate × 1 ms + 1514 B, quantum 1514 everywhere.
//!   `flat`: root + 64 leaves with the same leaf rates.
//! * Leaves are per-flow DRR queues (`Pfq`, 1024 buckets each, the crate default = 65,536
//!   buckets; `pfq_256` uses 256 each) or FIFOs. `pfq_borrow` assures the children only
//!   80 % of their parent's rate, so classes at every level run over their rate and borrow
//!   (mode changes and the wait heap on most packets); `pfq_mixed` cycles packet sizes
//!   64..1514. `baseline/pfq_alone` is one `Pfq` with the 10,000 flows and no scheduler;
//!   `baseline/pfq_capped` adds a per-session cap (seed 004's premium shaper: a token
//!   bucket per session) that every session is held to, so most packets park and unpark
//!   their session and the clock jumps to each next conformance instant.
//! * 10,000 flows (hash `mix64(i)`), flow `i` in leaf `i % 64` (156 or 157 flows a leaf).
//!   Arrivals go round-robin over the leaves and, within a leaf, round-robin over its flows,
//!   so arrivals match the (equal) service of the leaves and every flow keeps ~2 packets
//!   queued: 20,000 packets held out of a 65,536-slot pool; nothing is ever dropped.
//!   The load is exactly 100 %, so nothing pulls a leaf's backlog back once the scheduler
//!   serves leaves unevenly: the summary prints the leaves' backlog range (312..313 when
//!   service is even) to show the measured state did not drift.
//! * Measured op: allocate a slot, enqueue the next arrival, dequeue one packet (must be
//!   `Some`), free it (its slot is reused by the next arrival), advance the virtual clock by
//!   the dequeued packet's exact serialisation time at the link rate (80 ps a byte at
//!   100 Gbit/s, kept in picoseconds). Not `Rate::tx_ns`, which rounds 121.12 ns down to
//!   121: that clock runs 0.1 % fast against the class rates, so every class slowly goes
//!   into debt and, after ~9 M packets, the tree switches to borrowing on most packets.
//! * After each measurement: `len()` unchanged, nothing dropped, `check_counters()` clean.
//!
//! Besides criterion's own statistics (elements/s, `Throughput::Elements(1)`), every
//! variant runs one fixed 2,000,000-packet loop timed with `std::time::Instant` and prints
//! its ns/packet (the mean, and the best of its ten slices: the machine's other load moves
//! this memory-bound figure by tens of percent); a summary table is printed at the end.
//! Run with `cargo bench -p weir-core --bench sched`.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::{Criterion, Throughput};
use std::hint::black_box;
use std::time::Instant as WallClock;
use weir_core::queue::fifo::Fifo;
use weir_core::queue::fq::FqConfig;
use weir_core::queue::lazy::Lazy;
use weir_core::queue::pfq::{Pfq, PfqConfig};
use weir_core::rng::mix64;
use weir_core::sched::linkshare::{ClassSpec, LinkShare};
use weir_core::{Ctx, Instant, Meta, PktId, Pool, Qdisc, Rate, Rng};

const LINK_BPS: u64 = 100_000_000_000;
const FLOWS: usize = 10_000;
const LEAVES: usize = 64;
const FANOUT: usize = 4;
const PKTS_PER_FLOW: usize = 2;
const POOL_CAP: u32 = 65_536;
/// Pfq buckets per leaf: the crate default. With 256 (16,384 in all, ~61 % load) about
/// 6 % of the 8-way sets hold more than 8 of the 10,000 flows, and the flows that then
/// share a bucket soak up their leaf's whole backlog (see the `pfq_256` variant).
const BUCKETS_PER_LEAF: u32 = 1024;
const MTU: u32 = 1514;
/// Packet sizes of the mixed variant; 7 is coprime with 156 and 157, so every flow sees
/// every size in turn and the per-flow backlog stays stationary.
const MIXED: [u32; 7] = [64, 1514, 576, 1514, 128, 1514, 1024];
/// Picoseconds per byte at the link rate (exact at 100 Gbit/s).
const PS_PER_BYTE: u64 = 8_000_000_000_000 / LINK_BPS;
/// Packets of the fixed, self-timed loop (under `cargo bench`; a smoke run of 10,000
/// when criterion runs the benchmark as a test, e.g. `cargo test --benches`).
const FIXED_PACKETS: u64 = 2_000_000;

fn fixed_packets() -> u64 {
    common::fixed_count(FIXED_PACKETS)
}

/// Untimed packets between warm-up and the first measurement (token buckets settle).
const SETTLE_PACKETS: u64 = 200_000;

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Tree3,
    Flat,
    /// A subscriber table's tree: 10 sites of 10 access points of 100 circuits (10,000
    /// leaves, one flow each).
    Isp,
}

#[derive(Clone, Copy, PartialEq)]
enum LeafQ {
    Pfq,
    Fifo,
    /// A circuit's leaf: flow queuing with COBALT (1,024 flows, CAKE's triple isolation),
    /// built on its first packet (`queue::lazy`), as `[subscribers]` makes it.
    LazyFq,
}

#[derive(Clone, Copy, PartialEq)]
enum Sizes {
    Mtu,
    Mixed,
}

#[derive(Clone, Copy)]
struct Variant {
    group: &'static str,
    name: &'static str,
    shape: Shape,
    leaf: LeafQ,
    sizes: Sizes,
    /// Pfq buckets per leaf.
    buckets: u32,
    /// Fraction of a parent's rate assured to its children together (1.0 = rates sum to
    /// the parent's; below 1 every class runs over its rate and borrows).
    share: f64,
}

/// The arrival process: group (leaf) `k % groups`, then the next flow of that group.
struct Arrivals {
    leaf_class: Vec<u32>,
    leaf_flows: Vec<Vec<u64>>,
    cursor: Vec<u32>,
    k: u64,
    sizes: Sizes,
}

impl Arrivals {
    /// `leaf_class[g]` is the class of group `g`; flow `i` belongs to group `i % groups`.
    fn new(leaf_class: Vec<u32>, sizes: Sizes) -> Self {
        let groups = leaf_class.len();
        let mut leaf_flows = vec![Vec::new(); groups];
        for i in 0..FLOWS {
            leaf_flows[i % groups].push(mix64(i as u64));
        }
        Arrivals {
            cursor: vec![0; groups],
            leaf_class,
            leaf_flows,
            k: 0,
            sizes,
        }
    }

    /// (class, flow hash, length) of the next arrival.
    #[inline(always)]
    fn next(&mut self) -> (u32, u64, u32) {
        let k = self.k;
        self.k += 1;
        let groups = self.leaf_class.len() as u64;
        let l = (k % groups) as usize;
        let flows = &self.leaf_flows[l];
        let c = &mut self.cursor[l];
        let flow = flows[*c as usize];
        *c += 1;
        if *c as usize == flows.len() {
            *c = 0;
        }
        let len = match self.sizes {
            Sizes::Mtu => MTU,
            Sizes::Mixed => MIXED[((k / groups) % MIXED.len() as u64) as usize],
        };
        (self.leaf_class[l], flow, len)
    }
}

/// Everything one variant runs on.
struct Bench<Q: Qdisc> {
    q: Q,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, weir_core::DropCause)>,
    /// Virtual clock in picoseconds.
    ps: u64,
    arrivals: Arrivals,
    held: usize,
    ops: u64,
}

impl<Q: Qdisc> Bench<Q> {
    fn new(q: Q, arrivals: Arrivals) -> Self {
        let mut b = Bench {
            q,
            pool: Pool::new(POOL_CAP, 0),
            rng: Rng::new(1),
            dropped: Vec::new(),
            ps: 0,
            arrivals,
            held: 0,
            ops: 0,
        };
        // Warm-up: ~2 packets per flow, enqueued in arrival order at time zero.
        for _ in 0..FLOWS * PKTS_PER_FLOW {
            b.enqueue_next();
        }
        b.held = b.q.len();
        assert_eq!(b.held, FLOWS * PKTS_PER_FLOW, "warm-up lost packets");
        b.run(SETTLE_PACKETS);
        b.check();
        b
    }

    #[inline(always)]
    fn now(&self) -> Instant {
        Instant(self.ps / 1000)
    }

    #[inline(always)]
    fn enqueue_next(&mut self) {
        let (class, flow, len) = self.arrivals.next();
        self.enqueue(class, flow, len);
    }

    #[inline(always)]
    fn enqueue(&mut self, class: u32, flow: u64, len: u32) {
        let now = self.now();
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        let p = cx.pool.alloc().expect("pool exhausted");
        let m = cx.pool.meta_mut(p);
        m.class = class;
        m.flow = flow;
        m.len = len;
        // the AQM's sojourn time counts from here
        m.arrival = now;
        if let Err(cause) = self.q.enqueue(p, &mut cx) {
            panic!("enqueue refused: {cause:?}");
        }
    }

    /// One measured element: enqueue one packet, dequeue one, free it, advance the clock.
    #[inline(always)]
    fn step(&mut self) -> u32 {
        self.enqueue_next();
        let now = self.now();
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        let p = match self.q.dequeue(&mut cx) {
            Some(p) => p,
            // a capped (non-work-conserving) queue: jump to the instant it can send
            None => {
                let Some(at) = self.q.next_wakeup() else {
                    panic!("dequeue returned None with {} packets held", self.q.len());
                };
                self.ps = self.ps.max(at.0 * 1000);
                cx.now = Instant(self.ps / 1000);
                let Some(p) = self.q.dequeue(&mut cx) else {
                    panic!("nothing due at the queue's own wakeup {at:?}");
                };
                p
            }
        };
        let len = cx.pool.len(p);
        cx.pool.free(p);
        self.ps += len as u64 * PS_PER_BYTE;
        len
    }

    fn run(&mut self, n: u64) {
        for _ in 0..n {
            black_box(self.step());
        }
        self.ops += n;
    }

    /// Sanity checks between measurements (never timed).
    fn check(&self) {
        assert_eq!(self.q.len(), self.held, "backlog changed");
        assert!(
            self.dropped.is_empty(),
            "packets dropped: {:?}",
            self.dropped
        );
        assert_eq!(self.pool.in_use(), self.held, "pool leak");
    }

    /// The fixed, self-timed loop, run as 10 equal slices: (mean, best slice) ns per
    /// packet. The best slice is the figure least disturbed by other processes (the
    /// benchmark is bound by memory latency, so a busy neighbour on the shared cache
    /// shows up directly).
    fn fixed(&mut self, n: u64) -> (f64, f64) {
        let r = common::timed_slices(n, |k| self.run(k));
        self.check();
        r
    }
}

/// Build the LinkShare of a variant; returns it and its leaf ids in order.
fn build_linkshare(v: &Variant) -> (LinkShare, Vec<u32>) {
    let link = LINK_BPS;
    let spec = |name: String, parent: Option<u32>, rate: u64, leaf: bool| {
        let queue: Option<Box<dyn Qdisc>> = if !leaf {
            None
        } else {
            Some(match v.leaf {
                LeafQ::Pfq => Box::new(
                    Pfq::new(PfqConfig {
                        buckets: v.buckets,
                        quantum: MTU,
                        flow_limit: 4096,
                        limit: POOL_CAP,
                        red: None,
                        session_ceil: None,
                    })
                    .expect("pfq config"),
                ),
                LeafQ::Fifo => Box::new(Fifo::packets(POOL_CAP)),
                LeafQ::LazyFq => {
                    let mut cfg = FqConfig::for_rate(Some(Rate::from_bps(rate)));
                    cfg.limit_packets = POOL_CAP;
                    Box::new(Lazy::new(Box::new(move || cfg.build(1).expect("valid"))))
                }
            })
        };
        ClassSpec {
            name,
            parent,
            rate: Rate::from_bps(rate),
            ceil: Rate::from_bps(link),
            burst: (rate / 8 / 1000) as u32 + MTU,
            cburst: (link / 8 / 1000) as u32 + MTU,
            prio: 0,
            quantum: MTU,
            queue,
        }
    };
    let child_rate = |parent: u64, n: usize| ((parent as f64 * v.share) / n as f64) as u64;
    let mut specs = vec![spec("root".into(), None, link, false)];
    let mut leaves = Vec::with_capacity(LEAVES);
    match v.shape {
        Shape::Flat => {
            let r = child_rate(link, LEAVES);
            for l in 0..LEAVES {
                leaves.push(specs.len() as u32);
                specs.push(spec(format!("leaf{l}"), Some(0), r, true));
            }
        }
        Shape::Tree3 | Shape::Isp => {
            let fanouts = if v.shape == Shape::Tree3 {
                [FANOUT; 3]
            } else {
                [10, 10, 100]
            };
            // breadth first: parents precede children
            let mut level = vec![(0u32, link)];
            for (depth, &n) in (1..=3).zip(&fanouts) {
                let mut next = Vec::new();
                for &(p, prate) in &level {
                    let r = child_rate(prate, n);
                    for i in 0..n {
                        let id = specs.len() as u32;
                        specs.push(spec(format!("c{depth}.{p}.{i}"), Some(p), r, depth == 3));
                        next.push((id, r));
                    }
                }
                level = next;
            }
            leaves.extend(level.iter().map(|&(id, _)| id));
        }
    }
    let want = if v.shape == Shape::Isp { FLOWS } else { LEAVES };
    assert_eq!(leaves.len(), want);
    let ls = LinkShare::new(specs, leaves[0], Instant::ZERO).expect("tree");
    (ls, leaves)
}

struct Row {
    id: String,
    /// (mean, best slice) ns per packet of the fixed loop.
    fixed_ns: Option<(f64, f64)>,
    note: String,
}

fn bench_linkshare(c: &mut Criterion, v: Variant, rows: &mut Vec<Row>) {
    let (ls, leaves) = build_linkshare(&v);
    let mut b = Bench::new(ls, Arrivals::new(leaves.clone(), v.sizes));
    let before = leaf_totals(&b.q, &leaves);
    let mut fixed_ns = None;
    let id = format!("{}/{}", v.group, v.name);
    let mut g = c.benchmark_group(v.group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(v.name, |bch| {
        bch.iter_custom(|iters| {
            if fixed_ns.is_none() {
                // first call (warm-up): also run the fixed, self-timed loop once
                let n = fixed_packets();
                let (mean, best) = b.fixed(n);
                eprintln!(
                    "{id}: {mean:.1} ns/packet over {n} packets (fixed loop; best tenth \
                     {best:.1})"
                );
                fixed_ns = Some((mean, best));
            }
            let t = WallClock::now();
            for _ in 0..iters {
                black_box(b.step());
            }
            let e = t.elapsed();
            b.ops += iters;
            b.check();
            e
        })
    });
    g.finish();
    b.check();
    b.q.check_counters().expect("counters");
    let after = leaf_totals(&b.q, &leaves);
    let sent = after.0 - before.0;
    let borrowed = after.1 - before.1;
    let (lo, hi) = leaves.iter().fold((usize::MAX, 0), |(lo, hi), &l| {
        let n = b.q.backlog(l).0;
        (lo.min(n), hi.max(n))
    });
    let note = if sent > 0 {
        format!(
            "borrowed {:.1}%, overlimits {}, leaf backlog {lo}..{hi}, {} ops",
            100.0 * borrowed as f64 / sent as f64,
            after.2 - before.2,
            b.ops
        )
    } else {
        String::new()
    };
    rows.push(Row { id, fixed_ns, note });
}

/// (packets sent by leaves, of which on borrowed bandwidth, overlimits anywhere)
fn leaf_totals(ls: &LinkShare, leaves: &[u32]) -> (u64, u64, u64) {
    let mut t = (0, 0, 0);
    for &l in leaves {
        let s = ls.class_stats(l);
        t.0 += s.sent.packets;
        t.1 += s.borrows;
    }
    for c in 0..ls.num_classes() as u32 {
        t.2 += ls.class_stats(c).overlimits;
    }
    t
}

/// Baseline: one Pfq with as many buckets as the 64 leaves together (65,536) and the same
/// 10,000 flows, no scheduler. `capped` adds seed 004's premium shaper: every session
/// capped by its own token bucket at 90 % of its equal share of the (virtual) link, depth
/// one MTU, so every session is always at its cap and most packets park and unpark their
/// session (the clock then jumps to the next session's conformance instant).
fn bench_pfq_alone(c: &mut Criterion, rows: &mut Vec<Row>, capped: bool) {
    let cap = capped.then(|| (Rate::from_bps(LINK_BPS / FLOWS as u64 * 9 / 10), MTU));
    let pfq = Pfq::new(PfqConfig {
        buckets: BUCKETS_PER_LEAF * LEAVES as u32,
        quantum: MTU,
        flow_limit: 4096,
        limit: POOL_CAP,
        red: None,
        session_ceil: cap,
    })
    .expect("pfq");
    // one group: plain round robin over the 10,000 flows
    let mut b = Bench::new(pfq, Arrivals::new(vec![0], Sizes::Mtu));
    let mut fixed_ns = None;
    let name = if capped { "pfq_capped" } else { "pfq_alone" };
    let id = format!("baseline/{name}");
    let mut g = c.benchmark_group("baseline");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |bch| {
        bch.iter_custom(|iters| {
            if fixed_ns.is_none() {
                let n = fixed_packets();
                let (mean, best) = b.fixed(n);
                eprintln!(
                    "{id}: {mean:.1} ns/packet over {n} packets (fixed loop; best tenth \
                     {best:.1})"
                );
                fixed_ns = Some((mean, best));
            }
            let t = WallClock::now();
            for _ in 0..iters {
                black_box(b.step());
            }
            let e = t.elapsed();
            b.ops += iters;
            b.check();
            e
        })
    });
    g.finish();
    b.check();
    let note = format!(
        "{} flows active, {} collisions, {} ops",
        b.q.flows_active(),
        b.q.collisions,
        b.ops
    );
    rows.push(Row { id, fixed_ns, note });
}

fn report_memory(per_leaf: u32) {
    let buckets = per_leaf as usize * LEAVES;
    let bpf = Pfq::bytes_per_flow();
    let meta = std::mem::size_of::<Meta>();
    // Without a session cap Pfq allocates no parked heap, RED state or cap tokens: the
    // bucket (tag + flow + back-link) is all the per-flow state.
    let per_flow_buckets = (buckets * bpf) as f64 / FLOWS as f64;
    let per_flow_pkts = (PKTS_PER_FLOW * meta) as f64;
    eprintln!("memory: Pfq::bytes_per_flow() = {bpf} B per bucket; Meta = {meta} B per packet");
    eprintln!(
        "memory per flow ({FLOWS} flows, {buckets} buckets, {PKTS_PER_FLOW} packets queued per flow): \
         buckets {per_flow_buckets:.1} B + packet metadata \
         {per_flow_pkts:.0} B = {:.1} B/flow (pool slots themselves not counted; slot_size 0)",
        per_flow_buckets + per_flow_pkts
    );
    // 8-way set-associative buckets: flows beyond 8 in one set share a queue.
    let nsets = (per_leaf as usize / 8) as u128;
    let mut overfull = 0;
    let mut extra = 0;
    for l in 0..LEAVES {
        let mut count = vec![0usize; nsets as usize];
        for i in (l..FLOWS).step_by(LEAVES) {
            let h = mix64(i as u64);
            count[((h as u128 * nsets) >> 64) as usize] += 1;
        }
        overfull += count.iter().filter(|&&n| n > 8).count();
        extra += count.iter().map(|&n| n.saturating_sub(8)).sum::<usize>();
    }
    eprintln!(
        "  with {per_leaf} buckets a leaf: {overfull} of {} sets hold more than 8 flows \
         ({extra} flows share a bucket with another)",
        nsets as usize * LEAVES
    );
}

fn main() {
    let mut c = common::criterion();
    report_memory(BUCKETS_PER_LEAF);
    report_memory(256);
    let v = |group, name, shape, leaf, sizes, buckets, share| Variant {
        group,
        name,
        shape,
        leaf,
        sizes,
        buckets,
        share,
    };
    let b = BUCKETS_PER_LEAF;
    let variants = [
        v("tree3", "pfq", Shape::Tree3, LeafQ::Pfq, Sizes::Mtu, b, 1.0),
        v(
            "tree3",
            "pfq_mixed",
            Shape::Tree3,
            LeafQ::Pfq,
            Sizes::Mixed,
            b,
            1.0,
        ),
        v(
            "tree3",
            "pfq_borrow",
            Shape::Tree3,
            LeafQ::Pfq,
            Sizes::Mtu,
            b,
            0.8,
        ),
        v(
            "tree3",
            "pfq_256",
            Shape::Tree3,
            LeafQ::Pfq,
            Sizes::Mtu,
            256,
            1.0,
        ),
        v(
            "tree3",
            "fifo",
            Shape::Tree3,
            LeafQ::Fifo,
            Sizes::Mtu,
            b,
            1.0,
        ),
        v("flat", "pfq", Shape::Flat, LeafQ::Pfq, Sizes::Mtu, b, 1.0),
        v(
            "isp10k",
            "fifo",
            Shape::Isp,
            LeafQ::Fifo,
            Sizes::Mtu,
            b,
            1.0,
        ),
        v(
            "isp10k",
            "lazy_fq_cobalt",
            Shape::Isp,
            LeafQ::LazyFq,
            Sizes::Mtu,
            b,
            1.0,
        ),
        v("flat", "fifo", Shape::Flat, LeafQ::Fifo, Sizes::Mtu, b, 1.0),
    ];
    let mut rows = Vec::new();
    for v in variants {
        bench_linkshare(&mut c, v, &mut rows);
    }
    bench_pfq_alone(&mut c, &mut rows, false);
    bench_pfq_alone(&mut c, &mut rows, true);
    c.final_summary();
    eprintln!(
        "\nsummary: ns/packet of the fixed {}-packet loop (mean, best tenth); \
         goal tree3/pfq and isp10k/fifo <= 150",
        fixed_packets()
    );
    for r in &rows {
        match r.fixed_ns {
            Some((mean, best)) => {
                eprintln!("  {:<20} {:>7.1} {:>7.1}   {}", r.id, mean, best, r.note)
            }
            None => eprintln!("  {:<20} {:>7}              (filtered out)", r.id, "-"),
        }
    }
}
