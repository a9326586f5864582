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
//! * `ack/*`: the ACK filter on pure-ACK flows: one `Fq` (COBALT, `isolate = "flow"`,
//!   4096 buckets) with 1,000 flows, each one connection's ACKs (66-byte IPv4 frames with
//!   timestamps; each new ACK two segments past the connection's last, its frame copied
//!   from a template and patched: port and ACK number, the checksum left stale as
//!   nothing here reads it) and 2 packets of each held. `ack/off`: the filter off;
//!   `ack/on`: on — each arrival finds one older ACK of its connection queued, reads it
//!   and keeps it (`on` drops only when a second one is queued), so the closed loop stays
//!   put; `ack/on_drop`: on, and an element is one arrival and nothing sent: it finds
//!   two older ACKs of its connection, reads both and drops the older (freed), so every
//!   flow keeps 2 packets. `ack/on − ack/off` is the filter's cost on an arrival that
//!   drops nothing; `ack/on_drop` is the whole cost of an arrival that drops one.
//! * The virtual clock advances by one 1514-byte frame's time per packet at 100 Gbit/s
//!   (`fq`: 121 ns, so the sojourn is ~2.4 ms) or 10 Gbit/s (`fifo`: 1.2 µs, ~1.2 ms):
//!   below the 5 ms target, so the AQMs run their per-packet arithmetic but do not signal
//!   (the measured state stays put: nothing is dropped, checked after each measurement).
//!
//! Besides criterion's statistics, every variant runs one fixed 2,000,000-packet loop
//! timed with `std::time::Instant` and prints its ns/packet (the mean, and the best of its
//! ten slices); a summary with the AQM's cost over the plain queue is printed at the end.
//! Run pinned: `taskset -c 1 cargo bench -p weir-core --bench aqm`. `AQM_BENCH_ONLY` runs
//! only the variants it names, comma-separated: `fq/cobalt,ack/` (a name ending in `/`
//! is a group).
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::Criterion;
use std::hint::black_box;
use std::net::Ipv4Addr;
use weir_core::aqm::fifo::{AqmFifo, AqmFifoConfig};
use weir_core::aqm::{AqmKind, Cobalt, Codel};
use weir_core::queue::fifo::{Fifo, Limits};
use weir_core::queue::fq::{FqConfig, Isolation};
use weir_core::rng::mix64;
use weir_core::tcp::ack_filter::AckFilterMode;
use weir_core::{Ctx, DropCause, Instant, PktId, Pool, Qdisc, Rng};
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::tcp::TcpFlags;

const FLOWS: usize = 10_000;
const BUCKETS: u32 = 65_536;
const MTU: u32 = 1514;
const FIFO_HELD: usize = 1000;
const FIXED_PACKETS: u64 = 2_000_000;
const ACK_FLOWS: usize = 1000;

/// The frames of the `ack/*` variants: flow `i` is connection `(10.0.0.1:i, 10.0.0.2:443)`.
struct Acks {
    /// A pure ACK with timestamps: the source port and ACK number are patched per packet.
    template: Vec<u8>,
    /// Each flow's next ACK number.
    next: Vec<u32>,
    /// Elements are arrivals only (`ack/on_drop`), flows in turn.
    arrivals_only: bool,
    turn: usize,
}

impl Acks {
    const PORT: usize = 14 + 20;
    const ACK: usize = 14 + 20 + 8;

    fn new(flows: usize, arrivals_only: bool) -> Self {
        let mut template = vec![0u8; 128];
        let tcp = TcpSpec {
            dst_port: 443,
            flags: TcpFlags::ACK,
            window: 1000,
            timestamps: Some((1, 1)),
            ..TcpSpec::default()
        };
        let n = build::tcp_v4_frame(
            &mut template,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            &tcp,
            b"",
        )
        .unwrap();
        template.truncate(n);
        Acks {
            template,
            next: vec![1; flows],
            arrivals_only,
            turn: 0,
        }
    }

    /// Write flow `i`'s next ACK into `slot`; its length.
    #[inline(always)]
    fn write(&mut self, i: usize, slot: &mut [u8]) -> u32 {
        let n = self.template.len();
        slot[..n].copy_from_slice(&self.template);
        slot[Self::PORT..Self::PORT + 2].copy_from_slice(&(i as u16 + 1024).to_be_bytes());
        slot[Self::ACK..Self::ACK + 4].copy_from_slice(&self.next[i].to_be_bytes());
        self.next[i] = self.next[i].wrapping_add(2 * 1448);
        n as u32
    }
}

struct Bench {
    q: Box<dyn Qdisc>,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    now: u64,
    /// Virtual time per packet (ns).
    tick: u64,
    held: usize,
    /// The `ack/*` variants' frames (the others: UDP).
    acks: Option<Acks>,
}

impl Bench {
    fn new(q: Box<dyn Qdisc>, flows: usize, held: usize, tick: u64) -> Self {
        Self::with_frames(q, flows, held, tick, None)
    }

    fn with_frames(
        q: Box<dyn Qdisc>,
        flows: usize,
        held: usize,
        tick: u64,
        acks: Option<Acks>,
    ) -> Self {
        let mut b = Bench {
            q,
            pool: Pool::new(held as u32 + 64, if acks.is_some() { 128 } else { 64 }),
            rng: Rng::new(1),
            dropped: Vec::new(),
            now: 0,
            tick,
            held,
            acks,
        };
        // warm-up: real frames (a flow's hosts are read from its first packet)
        for k in 0..held {
            let i = k % flows;
            let p = b.pool.alloc().expect("pool");
            if b.acks.is_none() {
                let ip = Ipv4Spec {
                    src: Ipv4Addr::new(10, 0, 0, (i % 100) as u8),
                    dst: Ipv4Addr::new(10, 1, (i / 100 % 256) as u8, (i / 100 / 256) as u8),
                    ..Ipv4Spec::default()
                };
                let slot = b.pool.slot_mut(p);
                build::udp_v4_frame(slot, &EthSpec::default(), &ip, 1, 2, b"").unwrap();
            }
            b.enqueue(p, i);
        }
        assert_eq!(b.q.len(), held, "warm-up lost packets");
        b.run(200_000);
        b.check();
        b
    }

    /// Enqueue `p` as flow `i`'s packet (its ACK written first in the `ack/*` variants).
    #[inline(always)]
    fn enqueue(&mut self, p: PktId, i: usize) {
        let len = match &mut self.acks {
            Some(a) => a.write(i, self.pool.slot_mut(p)),
            None => MTU,
        };
        let m = self.pool.meta_mut(p);
        (m.flow, m.len, m.arrival, m.conn) = (mix64(i as u64), len, Instant(self.now), i as u32);
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
        let (len, i) = (cx.pool.len(p), cx.pool.meta(p).conn as usize);
        cx.pool.free(p);
        self.now += self.tick;
        let p = self.pool.alloc().expect("pool exhausted");
        self.enqueue(p, i);
        len
    }

    /// One measured element of `ack/on_drop`: the next flow's next ACK arrives, and the
    /// ACK the filter dropped is freed.
    #[inline(always)]
    fn arrival(&mut self) -> u32 {
        let a = self.acks.as_mut().expect("ACK frames");
        let i = a.turn;
        a.turn = (i + 1) % a.next.len();
        self.now += self.tick;
        let p = self.pool.alloc().expect("pool exhausted");
        self.enqueue(p, i);
        let n = self.dropped.len() as u32;
        for (p, _) in self.dropped.drain(..) {
            self.pool.free(p);
        }
        n
    }

    fn run(&mut self, n: u64) {
        if self.acks.as_ref().is_some_and(|a| a.arrivals_only) {
            for _ in 0..n {
                black_box(self.arrival());
            }
            return;
        }
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
            let dropping = self.acks.as_ref().is_some_and(|a| a.arrivals_only);
            assert_eq!(s.ack_drops > 0, dropping, "{s:?}");
        }
    }
}

struct Row {
    id: String,
    mean: f64,
    best: f64,
    note: String,
}

fn bench(
    c: &mut Criterion,
    rows: &mut Vec<Row>,
    group: &str,
    name: &str,
    make: impl FnOnce() -> Bench,
) {
    let id = format!("{group}/{name}");
    let only = std::env::var("AQM_BENCH_ONLY").unwrap_or_default();
    let wanted = |o: &str| id == o || (o.ends_with('/') && id.starts_with(o));
    if !only.is_empty() && !only.split(',').any(wanted) {
        return;
    }
    let mut b = make();
    let (mean, best) = common::timed_slices(FIXED_PACKETS, |n| b.run(n));
    b.check();
    eprintln!(
        "{id}: {mean:.1} ns/packet over {FIXED_PACKETS} packets (fixed loop; best tenth {best:.1})"
    );
    common::per_element(c, group, name, |iters| b.run(iters));
    b.check();
    let note = b.q.aqm_stats().map_or(String::new(), |s| {
        let acks = if s.ack_drops > 0 {
            format!(", {} ACKs filtered", s.ack_drops)
        } else {
            String::new()
        };
        format!(
            "{} flows active, {} bulk, {} collisions, {} src hosts{acks}",
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

/// The `ack/*` variants: see the module comment.
fn acks(mode: AckFilterMode, arrivals_only: bool) -> Bench {
    let cfg = FqConfig {
        flows: 4096,
        quantum: MTU,
        limit_packets: 65_536,
        limit_bytes: u64::MAX,
        isolate: Isolation::Flow,
        aqm: AqmKind::Cobalt,
        ack_filter: mode,
        ..FqConfig::default()
    };
    let q = cfg.build(7).expect("fq");
    let frames = Acks::new(ACK_FLOWS, arrivals_only);
    Bench::with_frames(q, ACK_FLOWS, 2 * ACK_FLOWS, 121, Some(frames))
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
        bench(&mut c, &mut rows, "fq", name, || fq(aqm, iso));
    }
    for (name, mode, arrivals_only) in [
        ("off", AckFilterMode::Off, false),
        ("on", AckFilterMode::On, false),
        ("on_drop", AckFilterMode::On, true),
    ] {
        bench(&mut c, &mut rows, "ack", name, || acks(mode, arrivals_only));
    }
    let limits = Limits::new(4 * FIFO_HELD as u32, u64::MAX);
    let params = AqmFifoConfig::default().params;
    bench(&mut c, &mut rows, "fifo", "plain", || {
        fifo(Box::new(Fifo::with_limits(limits)))
    });
    bench(&mut c, &mut rows, "fifo", "codel", || {
        fifo(Box::new(AqmFifo::<Codel>::new(limits, params).unwrap()))
    });
    bench(&mut c, &mut rows, "fifo", "cobalt", || {
        fifo(Box::new(AqmFifo::<Cobalt>::new(limits, params).unwrap()))
    });
    c.final_summary();

    let base = |g: &str| {
        let name = match g {
            "fq" => "fq/none",
            "ack" => "ack/off",
            _ => "fifo/plain",
        };
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
