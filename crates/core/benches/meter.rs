//! Meter benchmark: the cost of one `Meter::mark` (refill, colour, take tokens) for each
//! three-colour meter, colour-blind and colour-aware, and of `Meter::mark_fair` (flow-fair
//! sharing, `share = "flow"`) for the two-rate meters.
//!
//! The goal (from the project's issue): ≤ 30 ns per packet.
//!
//! Set-up (not timed):
//! * A table of 4,096 packets, cycled: 1500-byte packets (60 %) and 64-byte ones (40 %),
//!   926 bytes on average, in trains of 1 to 128 packets sent back to back 120 ns apart
//!   (about 62 Gbit/s) with an idle gap before each train that brings the mean spacing to
//!   1 µs: 7.4 Gbit/s on average, 93 % of the committed rate. So the committed bucket fills
//!   in the gaps and long trains run through it into the second bucket and beyond, and all
//!   three colours are common (the shares are printed). Arrival colours, used by the
//!   colour-aware meters: 80 % green, 15 % yellow, 5 % red. Each packet belongs to one of
//!   256 flows (random 64-bit hashes), for the fair meters (a 1024-slot table). Seeded,
//!   the same every run.
//! * The meters: `srtcm cir 8Gbit cbs 32KiB ebs 32KiB`, `trtcm cir 8Gbit cbs 32KiB pir
//!   10Gbit pbs 64KiB`, `rfc4115 cir 8Gbit cbs 32KiB eir 2Gbit ebs 32KiB`.
//! * 200,000 untimed packets settle the buckets before anything is measured.
//!
//! Timed, per packet: read the next table entry, advance the virtual clock, `mark`, count
//! the colour. `baseline/loop` is the same loop without the meter (the arrival colour is
//! counted instead): the table walk and counting that every figure includes.
//!
//! Checked after every measurement, so that a no-op path cannot be timed: each colour was
//! given to at least 1 % of the packets.
//!
//! Besides criterion's statistics (per packet, `Throughput::Elements(1)`) each case runs
//! one fixed loop of 10,000,000 packets timed with `std::time::Instant` in ten slices and
//! prints ns/packet (the mean, and the best slice: the figure least disturbed by other
//! processes); a summary table is printed at the end. Run with
//! `cargo bench -p weir-core --bench meter`.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::{Criterion, Throughput};
use std::hint::black_box;
use std::time::Instant as WallClock;
use weir_core::meter::fair::{FlowShare, Share};
use weir_core::meter::{ColorMode, Meter, MeterSpec};
use weir_core::{Color, Instant, Rng};

const TABLE: usize = 4096;
const FIXED_PACKETS: u64 = 10_000_000;
const SETTLE_PACKETS: u64 = 200_000;
const GBIT: u64 = 1_000_000_000;
const KIB32: u32 = 32 * 1024;

/// Packets in the fixed loop: fewer when criterion runs the bench as a test.
fn fixed_packets() -> u64 {
    common::fixed_count(FIXED_PACKETS)
}

#[derive(Clone, Copy)]
struct Pkt {
    len: u32,
    /// Nanoseconds since the previous packet.
    dt: u32,
    incoming: Color,
    flow: u64,
}

/// The packet table (see the module).
fn packets() -> Vec<Pkt> {
    let mut rng = Rng::new(0x006d_6574_6572);
    let mut pkts = Vec::with_capacity(TABLE);
    let flows: Vec<u64> = (0..256).map(|_| rng.next_u64()).collect();
    while pkts.len() < TABLE {
        let train = 1 + rng.below(128) as u32;
        // Mean spacing 1 µs: the train's first packet waits out the gap.
        let gap = train * (1000 - 120);
        for i in 0..train {
            let len = if rng.below(10) < 6 { 1500 } else { 64 };
            let incoming = match rng.below(20) {
                0..=15 => Color::Green,
                16..=18 => Color::Yellow,
                _ => Color::Red,
            };
            let dt = 120 + if i == 0 { gap } else { 0 };
            let flow = flows[rng.below(flows.len() as u64) as usize];
            pkts.push(Pkt {
                len,
                dt,
                incoming,
                flow,
            });
        }
    }
    pkts.truncate(TABLE);
    pkts
}

struct Bench {
    meter: Option<Meter>,
    fair: Option<FlowShare>,
    pkts: Vec<Pkt>,
    i: usize,
    now: Instant,
    /// Packets per colour (green, yellow, red) since the last check.
    counts: [u64; 3],
}

impl Bench {
    fn new(meter: Option<Meter>, fair: Option<FlowShare>) -> Self {
        let mut b = Bench {
            meter,
            fair,
            pkts: packets(),
            i: 0,
            now: Instant::ZERO,
            counts: [0; 3],
        };
        b.run(SETTLE_PACKETS);
        b.counts = [0; 3];
        b
    }

    #[inline]
    fn run(&mut self, n: u64) {
        for _ in 0..n {
            let p = self.pkts[self.i & (TABLE - 1)];
            self.i = self.i.wrapping_add(1);
            self.now = Instant(self.now.0 + p.dt as u64);
            let c = match (&mut self.meter, &mut self.fair) {
                (Some(m), Some(f)) => m.mark_fair(f, p.flow, p.len, p.incoming, self.now),
                (Some(m), None) => m.mark(p.len, p.incoming, self.now),
                (None, _) => black_box(p.incoming),
            };
            self.counts[c as usize] += 1;
        }
    }

    /// Colour shares in percent since the last check, which must each be at least 1 %.
    fn check(&mut self) -> [f64; 3] {
        let total: u64 = self.counts.iter().sum();
        let shares = self.counts.map(|n| 100.0 * n as f64 / total.max(1) as f64);
        assert!(
            shares.iter().all(|&s| s >= 1.0),
            "a colour is rare ({shares:?}): the mix does not exercise every path"
        );
        self.counts = [0; 3];
        shares
    }

    /// The fixed loop: (mean, best tenth) ns/packet.
    fn fixed(&mut self, n: u64) -> (f64, f64) {
        common::timed_slices(n, |k| self.run(k))
    }
}

struct Row {
    id: String,
    fixed_ns: Option<(f64, f64)>,
    shares: [f64; 3],
}

fn bench_case(
    c: &mut Criterion,
    id: &str,
    meter: Option<Meter>,
    fair: Option<FlowShare>,
    rows: &mut Vec<Row>,
) {
    let mut b = Bench::new(meter, fair);
    let mut fixed_ns = None;
    let mut shares = [0.0; 3];
    let mut g = c.benchmark_group("mark");
    g.throughput(Throughput::Elements(1));
    g.bench_function(id, |bch| {
        bch.iter_custom(|iters| {
            if fixed_ns.is_none() {
                let n = fixed_packets();
                let (mean, best) = b.fixed(n);
                shares = b.check();
                eprintln!(
                    "{id}: {mean:.1} ns/packet over {n} packets (fixed loop; best tenth \
                     {best:.1}); green/yellow/red {:.0}/{:.0}/{:.0} %",
                    shares[0], shares[1], shares[2]
                );
                fixed_ns = Some((mean, best));
            }
            let t = WallClock::now();
            b.run(iters);
            let e = t.elapsed();
            if iters >= 10_000 {
                b.check();
            }
            e
        })
    });
    g.finish();
    rows.push(Row {
        id: id.to_string(),
        fixed_ns,
        shares,
    });
}

fn main() {
    let mut c = common::criterion();
    let specs = [
        MeterSpec::Srtcm {
            cir: 8 * GBIT,
            cbs: KIB32,
            ebs: KIB32,
        },
        MeterSpec::Trtcm {
            cir: 8 * GBIT,
            cbs: KIB32,
            pir: 10 * GBIT,
            pbs: 2 * KIB32,
        },
        MeterSpec::Rfc4115 {
            cir: 8 * GBIT,
            cbs: KIB32,
            eir: 2 * GBIT,
            ebs: KIB32,
        },
    ];
    let mut rows = Vec::new();
    for spec in specs {
        let kind = spec.to_string();
        let kind = kind.split(' ').next().unwrap_or("?");
        for (mode, name) in [(ColorMode::Blind, "blind"), (ColorMode::Aware, "aware")] {
            let m = Meter::new(spec, mode, Instant::ZERO).expect("valid spec");
            bench_case(&mut c, &format!("{kind}/{name}"), Some(m), None, &mut rows);
        }
        if Share::supports(&spec) {
            let m = Meter::new(spec, ColorMode::Blind, Instant::ZERO).expect("valid spec");
            let f = FlowShare::new(&m, 1024, Instant::ZERO).expect("two-rate meter");
            bench_case(&mut c, &format!("{kind}/fair"), Some(m), Some(f), &mut rows);
        }
        eprintln!("  ({spec})");
    }
    bench_case(&mut c, "baseline/loop", None, None, &mut rows);
    c.final_summary();
    eprintln!(
        "\nsummary: ns/packet of the fixed {}-packet loop (mean, best tenth), colour shares; \
         goal <= 30",
        fixed_packets()
    );
    for r in &rows {
        let [g, y, red] = r.shares;
        match r.fixed_ns {
            Some((mean, best)) => eprintln!(
                "  {:<16} {mean:>6.1} {best:>6.1}   green {g:>4.1} % yellow {y:>4.1} % red {red:>4.1} %",
                r.id
            ),
            None => eprintln!("  {:<16} {:>6}          (filtered out)", r.id, "-"),
        }
    }
}
