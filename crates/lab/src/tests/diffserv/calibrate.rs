//! Seed 004's clock calibration (§3.2, Fig. 6): before the tests, without load, host A
//! sends probes; host B writes its own clock's reading `T0` into each and sends it back;
//! A notes the return `t1`. With equal delays both ways `c = T0 − t0 − (t1 − t0)/2`
//! ([`echo_sample`]), and a line `c(t) = a·t + b` is fitted through the samples by least
//! squares and by least absolute deviation ([`fit_skew`]).
//!
//! The lab runs two such periods, one before the runs and one after them, and fits one
//! line through both: the drift is then measured over the whole lab instead of being
//! extrapolated from the first period (the seed calibrated once, before its tests, and
//! assumed the trend held: an error of 1 ppm is 60 µs a minute later).
//!
//! Namespaces share one clock, so B's clock is simulated: [`ReceiverClock`] turns the
//! true `CLOCK_REALTIME` into what a clock `offset` ahead and drifting by `drift_ppm`
//! would read. B stamps calibration echoes and every measured packet with it, and the lab
//! compares the estimate with what it injected. On real hosts B's clock is its own: the
//! lab compares the estimate with the offset its SSH clock exchange found (a coarser,
//! independent estimate, good to its bound), and judges the offset only.
//!
//! The probes are the agents [`EchoProber`](crate::agents::EchoProber) and
//! [`EchoResponder`](crate::agents::EchoResponder).

use serde::{Deserialize, Serialize};

pub use crate::agents::Probes;
pub use crate::stats::skew::ReceiverClock;
use crate::stats::skew::{fit_skew, Skew, SkewFit};

/// What the calibration measured and estimated.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibration {
    /// What the estimate is judged against: the clock injected into B (namespaces), or
    /// B's offset from A as the SSH clock exchange found it, without drift (real hosts).
    pub injected: ReceiverClock,
    /// Real hosts: the bound (± ns) of the SSH exchange's offset `injected` holds; `None`
    /// in namespaces, where `injected` is exact.
    #[serde(default)]
    pub reference_bound_ns: Option<f64>,
    pub probes: u64,
    pub answered: u64,
    /// Median round-trip time, ns.
    pub rtt_median_ns: i64,
    pub least_squares: Option<Estimate>,
    pub least_absolute: Option<Estimate>,
}

/// One fitted skew line and its error against the injected clock.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Estimate {
    pub skew: Skew,
    /// Estimated minus injected offset at the first probe, ns.
    pub offset_error_ns: f64,
    /// Estimated minus injected drift, ppm.
    pub drift_error_ppm: f64,
}

impl Calibration {
    /// The skew line to measure with: the seed's choice, least absolute deviation
    /// (least squares if that failed).
    pub fn skew(&self) -> Option<Skew> {
        self.least_absolute
            .as_ref()
            .or(self.least_squares.as_ref())
            .map(|e| e.skew)
    }
}

fn estimate(skew: Skew, clock: &ReceiverClock) -> Estimate {
    Estimate {
        skew,
        offset_error_ns: skew.offset_ns() - clock.skew_at(skew.t0_ns),
        drift_error_ppm: skew.drift_ppm() - clock.drift_ppm,
    }
}

/// Fits the skew through the probes of every period (both methods) and compares with
/// `clock`: the injected one, or on real hosts the SSH exchange's offset, known to
/// ± `reference_bound_ns`.
pub fn fit(
    periods: &[Probes],
    clock: ReceiverClock,
    reference_bound_ns: Option<f64>,
) -> Calibration {
    let samples: Vec<(i64, i64)> = periods.iter().flat_map(|p| p.samples.clone()).collect();
    let mut rtts: Vec<i64> = periods.iter().flat_map(|p| p.rtts.clone()).collect();
    rtts.sort_unstable();
    let est = |m| fit_skew(&samples, m).map(|s| estimate(s, &clock));
    Calibration {
        injected: clock,
        reference_bound_ns,
        probes: periods.iter().map(|p| p.sent).sum(),
        answered: samples.len() as u64,
        rtt_median_ns: rtts.get(rtts.len() / 2).copied().unwrap_or(0),
        least_squares: est(SkewFit::LeastSquares),
        least_absolute: est(SkewFit::LeastAbsolute),
    }
}
