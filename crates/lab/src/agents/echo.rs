//! Seed 004's clock-calibration probes (§3.2, Fig. 6) as two agents: an
//! [`EchoResponder`] on host B writes its clock's reading `T0` into each probe and sends it
//! back; an [`EchoProber`] on host A sends the probes, one in flight at a time (ping-pong,
//! at most `rate` per second), and notes each return `t1`: the samples
//! ([`echo_sample`](crate::stats::skew::echo_sample)) the skew line is fitted through.
//!
//! A probe is one 64-byte UDP datagram: magic `WCAL`, sequence (8 bytes), `t0` (A's
//! `CLOCK_REALTIME`, ns, 8 bytes), `T0` (B's, filled in by B, 8 bytes), zeros. A probe not
//! back within [`PROBE_TIMEOUT`] is lost and skipped. B's clock is its
//! [`ReceiverClock`]: the true clock on a real host, a simulated one in namespaces.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_io::clock::realtime_ns;

use crate::stats::skew::{echo_sample, ReceiverClock};
use crate::topo::Netns;
use crate::{Error, Result};

/// Longest wait for a probe's echo.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
const MAGIC: &[u8; 4] = b"WCAL";
const PROBE_LEN: usize = 64;

/// The echo probes of one calibration period: `(t, T)` pairs (see
/// [`echo_sample`](crate::stats::skew::echo_sample)), the round-trip times (ns) and the
/// probes sent.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Probes {
    pub samples: Vec<(i64, i64)>,
    pub rtts: Vec<i64>,
    pub sent: u64,
    /// The error that ended the probing early, if any (the probes before it are kept).
    #[serde(default)]
    pub error: Option<String>,
}

/// What an [`EchoResponder`] did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EchoReport {
    /// Probes answered.
    pub echoed: u64,
    /// The error that ended it early, if any.
    pub error: Option<String>,
}

/// Answers calibration probes on a UDP port until stopped.
#[derive(Debug)]
pub struct EchoResponder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<u64>>>,
}

impl EchoResponder {
    /// Listens in `ns` on `bind`, stamping with `clock`; answering when this returns.
    pub fn start(ns: &Netns, bind: SocketAddr, clock: ReceiverClock) -> Result<EchoResponder> {
        let sock = ns
            .try_run(|| UdpSocket::bind(bind))?
            .map_err(|e| Error::io(format!("calibration: binding {bind}"), e))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| Error::io("calibration: echo socket", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("echo:{bind}"))
            .spawn(move || echo_loop(&sock, &clock, &s))
            .map_err(|e| Error::io("spawn the echo responder", e))?;
        Ok(EchoResponder {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops answering; what it did.
    pub fn stop(mut self) -> EchoReport {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Ok(echoed))) => EchoReport {
                echoed,
                error: None,
            },
            Some(Ok(Err(e))) => EchoReport {
                echoed: 0,
                error: Some(e.to_string()),
            },
            _ => EchoReport {
                echoed: 0,
                error: Some("the echo responder panicked".into()),
            },
        }
    }
}

impl Drop for EchoResponder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends calibration probes for a while (see the module comment); ends by itself.
#[derive(Debug)]
pub struct EchoProber {
    thread: JoinHandle<Result<Probes>>,
}

impl EchoProber {
    /// Probes the responder at `to` from `ns` at up to `rate` per second for `duration`.
    pub fn start(ns: &Netns, to: SocketAddr, duration: Duration, rate: f64) -> Result<EchoProber> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(Error::Invalid(format!("calibration rate {rate}/s")));
        }
        let sock = ns
            .try_run(|| UdpSocket::bind("0.0.0.0:0"))?
            .map_err(|e| Error::io("calibration: probe socket", e))?;
        let thread = std::thread::Builder::new()
            .name(format!("probe:{to}"))
            .spawn(move || probe(&sock, to, duration, rate))
            .map_err(|e| Error::io("spawn the echo prober", e))?;
        Ok(EchoProber { thread })
    }

    /// Whether it is done.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until it is done: the probes (an error in their `error`).
    pub fn join(self) -> Probes {
        match self.thread.join() {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => Probes {
                error: Some(e.to_string()),
                ..Probes::default()
            },
            Err(_) => Probes {
                error: Some("the echo prober panicked".into()),
                ..Probes::default()
            },
        }
    }
}

/// A receive that ended at its socket's read timeout (`EAGAIN` or `ETIMEDOUT`).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn echo_loop(sock: &UdpSocket, clock: &ReceiverClock, stop: &AtomicBool) -> Result<u64> {
    let mut buf = [0u8; 512];
    let mut echoed = 0;
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
        if sock.send_to(&buf[..n], from).is_ok() {
            echoed += 1;
        }
    }
    Ok(echoed)
}

fn probe(sock: &UdpSocket, to: SocketAddr, duration: Duration, rate: f64) -> Result<Probes> {
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
    Ok(Probes {
        samples,
        rtts,
        sent: seq,
        error: None,
    })
}
