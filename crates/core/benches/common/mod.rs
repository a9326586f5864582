//! What the benchmarks share: criterion's settings and the self-timed fixed loop.
#![allow(dead_code)] // each benchmark uses what it needs
#![allow(clippy::disallowed_methods)] // the benchmarks read the wall clock on purpose

use criterion::{Criterion, Throughput};
use std::time::{Duration, Instant as WallClock};

/// Criterion as every benchmark here runs it: 20 samples, 1 s warm-up, 3 s measurement,
/// then the command line's own settings.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(1000))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

/// Time `run(n / 10)` ten times: (mean, best slice) ns per element. The best slice is the
/// figure least disturbed by other processes.
pub fn timed_slices(n: u64, mut run: impl FnMut(u64)) -> (f64, f64) {
    let slice = n / 10;
    let mut best = f64::INFINITY;
    let mut total = 0u128;
    for _ in 0..10 {
        let t = WallClock::now();
        run(slice);
        let e = t.elapsed().as_nanos();
        total += e;
        best = best.min(e as f64 / slice as f64);
    }
    (total as f64 / (10 * slice) as f64, best)
}

/// `full` when run as a benchmark (`--bench`), 10,000 when criterion runs it as a test:
/// the length of a fixed loop.
pub fn fixed_count(full: u64) -> u64 {
    if std::env::args().any(|a| a == "--bench") {
        full
    } else {
        10_000
    }
}

/// Criterion's benchmark `group/name` timing `run(iters)`, per element.
pub fn per_element(c: &mut Criterion, group: &str, name: &str, mut run: impl FnMut(u64)) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |bch| {
        bch.iter_custom(|iters| {
            let t = WallClock::now();
            run(iters);
            t.elapsed()
        })
    });
    g.finish();
}
