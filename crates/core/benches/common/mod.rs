//! What the benchmarks share: criterion's settings and the self-timed fixed loop.
#![allow(dead_code)] // each benchmark uses what it needs
#![allow(clippy::disallowed_methods)] // the benchmarks read the wall clock on purpose

use criterion::Criterion;
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
