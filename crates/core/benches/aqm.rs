//! AQM and flow-queue benchmark: one enqueue + one dequeue per measured element, in
//! steady state.
//!
//! Goals (issue 25): the flow queue with COBALT at 10,000 active flows at ≤ 60 ns per
//! packet; CoDel or COBALT on a FIFO at ≤ 15 ns per packet more than the plain FIFO.
//!
//! Set-up (not timed):
//! * Closed loop: each element dequeues a packet and enqueues a new one of the same flow,
//!   so every flow stays backlogged with the packets it started with (open-loop round
//!   robin arrivals do not keep 10,000 flows active under DRR++: a flow that empties comes
//!   back as a new flow and is served at once, and the backlog gathers in a few).
//! * `fq/*`: one `Fq` with 65,536 buckets (8-way sets: no set holds more than 8 of the
//!   flows, so none shares a queue) and 10,000 flows (hash `mix64(i)`) of 2 packets of
//!   1514 bytes each (20,000 held). `fq/cobalt` and `fq/codel`:
//!   `isolate = "flow"`; `fq/none`: no AQM; `fq/cobalt_triple`: `isolate = "triple"`
//!   with 100 source hosts × 100 destination hosts (flow `i` from host `i % 100` to host
//!   `i / 100`), each host with 100 bulk flows, so every flow's quantum is a hundredth of
//!   1514 bytes. The frames carry real IPv4 headers (the hosts are read when a flow claims
//!   its bucket).
//! * `fifo/*`: one FIFO holding 1,000 packets of 1514 bytes: plain, CoDel, COBALT.
//! * The virtual clock advances by one 1514-byte frame's time per packet at 100 Gbit/s
//!   (`fq`: 121 ns, so the sojourn is ~2.4 ms) or 10 Gbit/s (`fifo`: 1.2 µs, ~1.2 ms):
//!   below the 5 ms target, so the AQMs run their per-packet arithmetic but do not signal
//!   (the measured state stays put: nothing is dropped, checked after each measurement).
//!
//! Besides criterion's statistics, every variant runs one fixed 2,000,000-packet loop
//! timed with `std::time::Instant` and prints its ns/packet (the mean, and the best of its
//! ten slices); a summary with the AQM's cost over the plain queue is printed at the end.
//! Run pinned: `taskset -c 1 cargo bench -p weir-core --bench aqm`.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::{Criterion, Throughput};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant as WallClock;
use weir_core::aqm::fifo::{AqmFifo, AqmFifoConfig};
use weir_core::aqm::{AqmKind, Cobalt, Codel};
use weir_core::queue::fifo::{Fifo, Limits};
use weir_core::queue::fq::{FqConfig, Isolation};
use weir_core::rng::mix64;
use weir_core::{Ctx, DropCause, Instant, PktId, Pool, Qdisc, Rng};
use weir_wire::build::{self, EthSpec, Ipv4Spec};

const FLOWS: usize = 10_000;
const BUCKETS: u32 = 65_536;
const MTU: u32 = 1514;
const FIFO_HELD: usize = 1000;
const FIXED_PACKETS: u64 = 2_000_000;

struct Bench {
    q: Box<dyn Qdisc>,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    now: u64,
    /// Virtual time per packet (ns).
    tick: u64,
    held: usize,
}

impl Bench {
    fn new(q: Box<dyn Qdisc>, flows: usize, held: usize, tick: u64) -> Self {
        let mut b = Bench {
            q,
            pool: Pool::new(held as u32 + 64, 64),
            rng: Rng::new(1),
            dropped: Vec::new(),
            now: 0,
            tick,
            held,
        };
        // warm-up: real frames (a flow's hosts are read from its first packet)
        for k in 0..held {
            let p = b.pool.alloc().expect("pool");
            let i = k % flows;
            let ip = Ipv4Spec {
                src: Ipv4Addr::new(10, 0, 0, (i % 100) as u8),
                dst: Ipv4Addr::new(10, 1, (i / 100 % 256) as u8, (i / 100 / 256) as u8),
                ..Ipv4Spec::default()
            };
            build::udp_v4_frame(b.pool.slot_mut(p), &EthSpec::default(), &ip, 1, 2, b"").unwrap();
            b.enqueue(p, mix64(i as u64));
        }
        assert_eq!(b.q.len(), held, "warm-up lost packets");
        b.run(200_000);
        b.check();
        b
    }

    #[inline(always)]
    fn enqueue(&mut self, p: PktId, flow: u64) {
        let m = self.pool.meta_mut(p);
        (m.flow, m.len, m.arrival) = (flow, MTU, Instant(self.now));
        let mut cx = Ctx::new(
            Instant(self.now),
            &mut self.pool,
            &mut self.rng,
            &mut self.dropped,
        );
        if let Err(c) = self.q.enqueue(p, &mut cx) {
            panic!("enqueue refused: {c:?}");
        }
    }

    /// One measured element: dequeue a packet, free it, advance the clock, and enqueue a
    /// new packet of the same flow (every flow stays backlogged: a closed loop, as long
    /// TCP flows each keeping a standing queue).
    #[inline(always)]
    fn step(&mut self) -> u32 {
        let mut cx = Ctx::new(
            Instant(self.now),
            &mut self.pool,
            &mut self.rng,
            &mut self.dropped,
        );
        let p = self.q.dequeue(&mut cx).expect("backlogged");
        let (len, flow) = (cx.pool.len(p), cx.pool.meta(p).flow);
        cx.pool.free(p);
        self.now += self.tick;
        let p = self.pool.alloc().expect("pool exhausted");
        self.enqueue(p, flow);
        len
    }

    fn run(&mut self, n: u64) {
        for _ in 0..n {
            black_box(self.step());
        }
    }

    fn check(&self) {
        assert_eq!(
            self.q.len(),
            self.held,
            "the backlog drifted: {:?}",
            self.q.aqm_stats()
        );
        assert!(self.dropped.is_empty(), "dropped: {:?}", self.dropped.len());
        if let Some(s) = self.q.aqm_stats() {
            assert_eq!((s.ecn_marked, s.aqm_dropped), (0, 0), "{s:?}");
        }
    }
}

struct Row {
    id: String,
    mean: f64,
    best: f64,
    note: String,
}

fn bench(c: &mut Criterion, rows: &mut Vec<Row>, group: &str, name: &str, mut b: Bench) {
    let id = format!("{group}/{name}");
    let (mean, best) = common::timed_slices(FIXED_PACKETS, |n| b.run(n));
    b.check();
    eprintln!(
        "{id}: {mean:.1} ns/packet over {FIXED_PACKETS} packets (fixed loop; best tenth {best:.1})"
    );
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |bch| {
        bch.iter_custom(|iters| {
            let t = WallClock::now();
            b.run(iters);
            t.elapsed()
        })
    });
    g.finish();
    b.check();
    let note = b.q.aqm_stats().map_or(String::new(), |s| {
        format!(
            "{} flows active, {} bulk, {} collisions, {} src hosts",
            s.active_flows, s.bulk_flows, s.collisions, s.src_hosts
        )
    });
    rows.push(Row {
        id,
        mean,
        best,
        note,
    });
}

fn fq(aqm: AqmKind, isolate: Isolation) -> Bench {
    let cfg = FqConfig {
        flows: BUCKETS,
        quantum: MTU,
        limit_packets: 65_536,
        limit_bytes: u64::MAX,
        isolate,
        aqm,
        ..FqConfig::default()
    };
    Bench::new(cfg.build(7).expect("fq"), FLOWS, 2 * FLOWS, 121)
}

fn fifo(q: Box<dyn Qdisc>) -> Bench {
    Bench::new(q, 1, FIFO_HELD, 1_211)
}

fn main() {
    let mut c = common::criterion();
    let mut rows = Vec::new();
    for (name, aqm, iso) in [
        ("none", AqmKind::None, Isolation::Flow),
        ("codel", AqmKind::Codel, Isolation::Flow),
        ("cobalt", AqmKind::Cobalt, Isolation::Flow),
        ("cobalt_triple", AqmKind::Cobalt, Isolation::Triple),
    ] {
        bench(&mut c, &mut rows, "fq", name, fq(aqm, iso));
    }
    let limits = Limits::new(4 * FIFO_HELD as u32, u64::MAX);
    let params = AqmFifoConfig::default().params;
    bench(
        &mut c,
        &mut rows,
        "fifo",
        "plain",
        fifo(Box::new(Fifo::with_limits(limits))),
    );
    let codel = AqmFifo::<Codel>::new(limits, params).unwrap();
    bench(&mut c, &mut rows, "fifo", "codel", fifo(Box::new(codel)));
    let cobalt = AqmFifo::<Cobalt>::new(limits, params).unwrap();
    bench(&mut c, &mut rows, "fifo", "cobalt", fifo(Box::new(cobalt)));
    c.final_summary();

    let base = |g: &str| {
        let name = if g == "fq" { "fq/none" } else { "fifo/plain" };
        rows.iter()
            .find(|r| r.id == name)
            .map(|r| r.mean)
            .unwrap_or(0.0)
    };
    eprintln!("\nsummary (fixed {FIXED_PACKETS}-packet loops, ns per packet):");
    eprintln!(
        "{:<20} {:>8} {:>8} {:>14}  notes",
        "variant", "mean", "best", "over plain"
    );
    for r in &rows {
        let g = r.id.split('/').next().unwrap();
        eprintln!(
            "{:<20} {:>8.1} {:>8.1} {:>+14.1}  {}",
            r.id,
            r.mean,
            r.best,
            r.mean - base(g),
            r.note
        );
    }
}
