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
//! would read ([`inject`]). B stamps calibration echoes and every measured packet with
//! it, and the lab compares the estimate with what it injected.
//!
//! Probes are one UDP datagram in flight at a time (ping-pong, at most `rate` per
//! second), 64 bytes: magic, sequence, `t0` (A's clock), `T0` (B's, filled in by B). A
//! probe not back within [`PROBE_TIMEOUT`] is lost and skipped.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_io::clock::realtime_ns;

use crate::stats::skew::{echo_sample, fit_skew, inject, Skew, SkewFit};
use crate::topo::Netns;
use crate::{Error, Result};

/// Longest wait for a probe's echo.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
const MAGIC: &[u8; 4] = b"WCAL";
const PROBE_LEN: usize = 64;

/// Host B's simulated clock: true time plus `offset_ns` at `t0_ns`, drifting by
/// `drift_ppm`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiverClock {
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Where the drift is counted from (true time, ns since the epoch).
    pub t0_ns: i64,
}

impl ReceiverClock {
    /// B's reading at true time `t_ns`.
    pub fn read(&self, t_ns: i64) -> i64 {
        inject(t_ns, self.offset_ns, self.drift_ppm, self.t0_ns)
    }

    /// B's clock minus A's at A's time `t_ns`: what a perfect estimate gives.
    pub fn skew_at(&self, t_ns: i64) -> f64 {
        self.offset_ns as f64 + self.drift_ppm * 1e-6 * (t_ns - self.t0_ns) as f64
    }
}

/// What the calibration measured and estimated.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibration {
    pub injected: ReceiverClock,
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

/// The echo probes of one calibration period: `(t, T)` pairs (see [`echo_sample`]), the
/// round-trip times (ns) and the probes sent.
#[derive(Clone, Debug, Default)]
pub struct Probes {
    pub samples: Vec<(i64, i64)>,
    pub rtts: Vec<i64>,
    pub sent: u64,
}

/// One calibration period: an echo responder in B (`b`, port `b_addr`) and a prober in A
/// (`a`) sending to it at up to `rate` probes per second for `duration`.
pub fn echo_probes(
    a: &Netns,
    b: &Netns,
    b_addr: SocketAddr,
    clock: ReceiverClock,
    duration: Duration,
    rate: f64,
) -> Result<Probes> {
    let responder = b
        .try_run(|| UdpSocket::bind(b_addr))?
        .map_err(|e| Error::io(format!("calibration: binding {b_addr} in host B"), e))?;
    responder
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| Error::io("calibration: echo socket", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let echo = std::thread::spawn(move || echo_loop(&responder, &clock, &s));
    let prober = a
        .try_run(|| UdpSocket::bind("0.0.0.0:0"))?
        .map_err(|e| Error::io("calibration: probe socket in host A", e))?;
    let result = probe(&prober, b_addr, duration, rate);
    stop.store(true, Ordering::SeqCst);
    let echoed = echo
        .join()
        .map_err(|_| Error::Invalid("calibration echo thread panicked".into()))?;
    let (samples, rtts, sent) = result?;
    echoed?;
    Ok(Probes {
        samples,
        rtts,
        sent,
    })
}

/// Fits the skew through the probes of every period (both methods) and compares with
/// the injected `clock`.
pub fn fit(periods: &[Probes], clock: ReceiverClock) -> Calibration {
    let samples: Vec<(i64, i64)> = periods.iter().flat_map(|p| p.samples.clone()).collect();
    let mut rtts: Vec<i64> = periods.iter().flat_map(|p| p.rtts.clone()).collect();
    rtts.sort_unstable();
    let est = |m| fit_skew(&samples, m).map(|s| estimate(s, &clock));
    Calibration {
        injected: clock,
        probes: periods.iter().map(|p| p.sent).sum(),
        answered: samples.len() as u64,
        rtt_median_ns: rtts.get(rtts.len() / 2).copied().unwrap_or(0),
        least_squares: est(SkewFit::LeastSquares),
        least_absolute: est(SkewFit::LeastAbsolute),
    }
}

/// A receive that ended at its socket's read timeout (`EAGAIN` or `ETIMEDOUT`).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn echo_loop(sock: &UdpSocket, clock: &ReceiverClock, stop: &AtomicBool) -> Result<()> {
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::SeqCst) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(v) => v,
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err(Error::io("calibration: echo receive", e)),
        };
        let t = clock.read(realtime_ns() as i64);
        if n != PROBE_LEN || &buf[..4] != MAGIC {
            continue;
        }
        buf[20..28].copy_from_slice(&t.to_be_bytes());
        // a failed echo is a lost probe to the prober
        let _ = sock.send_to(&buf[..n], from);
    }
    Ok(())
}

type Probed = (Vec<(i64, i64)>, Vec<i64>, u64);

fn probe(sock: &UdpSocket, to: SocketAddr, duration: Duration, rate: f64) -> Result<Probed> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(Error::Invalid(format!("calibration rate {rate}/s")));
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let (mut samples, mut rtts, mut seq) = (Vec::new(), Vec::new(), 0u64);
    let mut buf = [0u8; PROBE_LEN];
    let mut rx = [0u8; 512];
    while start.elapsed() < duration {
        crate::check_interrupted()?;
        let next = start + period.mul_f64((seq + 1) as f64);
        buf.fill(0);
        buf[..4].copy_from_slice(MAGIC);
        buf[4..12].copy_from_slice(&seq.to_be_bytes());
        let t0 = realtime_ns() as i64;
        buf[12..20].copy_from_slice(&t0.to_be_bytes());
        sock.send_to(&buf, to)
            .map_err(|e| Error::io(format!("calibration: probe to {to}"), e))?;
        let deadline = Instant::now() + PROBE_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            sock.set_read_timeout(Some(left))
                .map_err(|e| Error::io("calibration: probe socket", e))?;
            let n = match sock.recv(&mut rx) {
                Ok(n) => n,
                Err(e) if timed_out(&e) => break,
                Err(e) => return Err(Error::io("calibration: probe receive", e)),
            };
            let t1 = realtime_ns() as i64;
            let field =
                |r: std::ops::Range<usize>| i64::from_be_bytes(rx[r].try_into().unwrap_or([0; 8]));
            if n == PROBE_LEN && &rx[..4] == MAGIC && field(4..12) as u64 == seq {
                samples.push(echo_sample(t0, field(20..28), t1));
                rtts.push(t1 - t0);
                break;
            }
        }
        seq += 1;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok((samples, rtts, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_clock_runs_ahead_and_drifts() {
        let c = ReceiverClock {
            offset_ns: 1_000_000,
            drift_ppm: 40.0,
            t0_ns: 1_000_000_000,
        };
        // 10 s after t0 at 40 ppm: 400 µs more
        assert_eq!(c.read(11_000_000_000), 11_000_000_000 + 1_000_000 + 400_000);
        assert_eq!(c.skew_at(11_000_000_000), 1_400_000.0);
        assert_eq!(c.read(1_000_000_000), 1_001_000_000);
    }
}
