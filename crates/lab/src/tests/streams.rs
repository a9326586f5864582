//! Constant-rate test streams through a DUT and what the conformance labs measure of them
//! (`y1564`, `rfc2544`): the DUTs those labs name ([`DutChoice`]), sending one or several
//! streams at once between two hosts (namespaces or real hosts) with the CBR agents
//! ([`send_between`]: the sender pinned to CPU 0 and pacing by its absolute schedule, a
//! sink per stream reading kernel timestamps), and the figures of a stream ([`figures`],
//! computed on the host that received it: [`received_figures`]):
//!
//! - **IR**, information rate: the bits of the Ethernet frames received (without FCS, the
//!   bytes the DUTs' rates count) whose kernel receive time lies in the middle 80 % of the
//!   stream's sending time after its first arrival, divided by that window: the steady
//!   state, without a shaper's initial burst or its queue draining after the sender stopped.
//! - **FTD**, frame transfer delay: receive time − send time of the first copy of every frame
//!   (one clock: the hosts are namespaces of one machine): min, mean, max, p99.9; **FDV**,
//!   the 99.9th percentile minus the minimum (the two-point delay variation of ITU-T Y.1563
//!   and Y.1541, the 1 − 10⁻³ quantile).
//! - **loss**: frames the sender handed to its host minus the distinct frames received
//!   (frames the sending host itself failed to send are not the DUT's loss).
//! - **SES** and **availability** (ITU-T Y.1563): a second of sending time whose loss ratio
//!   exceeds 0.5 is a severely errored second; a run of 10 or more consecutive SES is
//!   unavailable time, counted from its first second.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agents::cbr::{payload_len, CbrRecords, CbrSenderOpts, CbrSinkOpts, Pacing};
use crate::dut::{self, DutSetup, DutSpec, RunningDut};
use crate::remote::Host;
use crate::topo::BridgeTopo;
use crate::{Error, Result};

/// Y.1563's severely-errored-second threshold: a second with a loss ratio above it is an SES.
pub const SES_FLR: f64 = 0.5;
/// Consecutive SES that start unavailable time (Y.1563).
pub const SES_RUN: usize = 10;

/// A DUT as the conformance labs name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DutChoice {
    /// `weir`: weir's bridge with the policy exactly as written.
    WeirAsWritten,
    /// `weir:TECHNIQUE`, `kernel:htb`, `kernel:bridge`, `cmd:SCRIPT`, …
    Spec(DutSpec),
}

impl DutChoice {
    /// `weir` or any [`DutSpec`].
    pub fn parse(s: &str) -> Result<DutChoice> {
        if s == "weir" {
            return Ok(DutChoice::WeirAsWritten);
        }
        DutSpec::parse(s)
            .map_err(|e| Error::Invalid(format!("{e}, or weir (the policy as written)")))
            .and_then(dut::in_namespaces)
            .map(DutChoice::Spec)
    }

    /// Whether this is weir (as written or a preset): the DUT the labs' checks judge.
    pub fn is_weir(name: &str) -> bool {
        name == "weir" || name.starts_with("weir:")
    }

    /// Start it at `setup.place`, reported under `name`.
    pub fn start<'a>(&self, name: &str, setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
        match self {
            DutChoice::WeirAsWritten => dut::start_weir_as_written(name, setup),
            DutChoice::Spec(s) => dut::start(s, setup),
        }
    }

    /// Start it at `place` (a testbed's `Bed::place`; `None`: the topology's DUT is
    /// external) with `policy`; `None` for `external`, which nothing here starts.
    pub fn start_at<'a>(
        &self,
        name: &str,
        place: Option<crate::topo::DutPlace<'a>>,
        policy: &'a weir_core::policy::Policy,
        sessions: &'a [dut::Session],
        busy_poll: bool,
    ) -> Result<Option<RunningDut<'a>>> {
        let external = *self == DutChoice::Spec(DutSpec::External);
        let with = (policy, sessions, busy_poll);
        dut::start_at(name, external, place, with, |s| self.start(name, s))
    }
}

/// The delays of one stream, ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ftd {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl Ftd {
    /// FDV: p99.9 − min.
    pub fn fdv(&self) -> f64 {
        self.p999 - self.min
    }
}

/// One received frame, as the figures need it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    pub seq: u64,
    pub tx_ns: u64,
    pub rx_ns: u64,
    /// Ethernet frame bytes (without FCS).
    pub frame: u32,
}

/// The measured figures of a stream whose sender attempted `attempted` packets at `pps`
/// over `duration_s`, `send_failed` of them failing on the host, from what arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Distinct frames received; frames lost on the way (send errors excluded).
    pub received: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Information rate received, bit/s (`None`: nothing arrived).
    pub ir_bps: Option<f64>,
    pub ftd: Option<Ftd>,
    /// Severely errored seconds, and unavailable seconds.
    pub ses: u32,
    pub unavailable_s: u32,
    /// Seconds of sending time judged.
    pub seconds: u32,
}

/// IR, FTD, FLR counts and availability of a stream (see the module documentation).
pub fn figures(
    arrivals: &[Arrival],
    attempted: u64,
    send_failed: u64,
    pps: f64,
    duration_s: f64,
) -> Figures {
    let mut seqs: Vec<u64> = arrivals
        .iter()
        .map(|a| a.seq)
        .filter(|&s| s < attempted)
        .collect();
    let records = seqs.len() as u64;
    let reordered = {
        let mut max = None;
        let mut n = 0;
        for a in arrivals {
            match max {
                Some(m) if a.seq < m => n += 1,
                _ => max = Some(a.seq),
            }
        }
        n
    };
    seqs.sort_unstable();
    seqs.dedup();
    let received = seqs.len() as u64;
    let lost = attempted
        .saturating_sub(received)
        .saturating_sub(send_failed);
    // IR over the middle 80 % of the sending time, from the first arrival
    let ir_bps = arrivals.iter().map(|a| a.rx_ns).min().and_then(|first| {
        let d = duration_s * 1e9;
        let (a, b) = (first + (0.1 * d) as u64, first + (0.9 * d) as u64);
        if b <= a {
            return None;
        }
        let bits: u64 = arrivals
            .iter()
            .filter(|x| x.rx_ns >= a && x.rx_ns < b)
            .map(|x| x.frame as u64 * 8)
            .sum();
        Some(bits as f64 / ((b - a) as f64 / 1e9))
    });
    // FTD over the first copy of every frame
    let mut seen = std::collections::HashSet::new();
    let mut delays: Vec<f64> = arrivals
        .iter()
        .filter(|a| seen.insert(a.seq))
        .map(|a| (a.rx_ns as i64 - a.tx_ns as i64) as f64 / 1e6)
        .collect();
    delays.sort_by(f64::total_cmp);
    let ftd = (!delays.is_empty()).then(|| Ftd {
        min: delays[0],
        mean: delays.iter().sum::<f64>() / delays.len() as f64,
        max: delays[delays.len() - 1],
        p999: crate::stats::dist::percentile(&delays, 99.9),
    });
    let (ses, unavailable_s, seconds) = availability(&seqs, attempted, pps);
    Figures {
        received,
        lost,
        duplicates: records - received,
        reordered,
        ir_bps,
        ftd,
        ses,
        unavailable_s,
        seconds,
    }
}

/// Y.1563 availability over whole seconds of sending time: (SES, unavailable seconds,
/// seconds judged). Packet `k` was due at `k / pps` s; `received` is sorted and distinct.
pub fn availability(received: &[u64], attempted: u64, pps: f64) -> (u32, u32, u32) {
    let per = pps.round().max(1.0) as u64;
    let seconds = (attempted / per) as usize;
    let mut got = vec![0u64; seconds];
    for &s in received {
        if let Some(g) = got.get_mut((s / per) as usize) {
            *g += 1;
        }
    }
    let severe: Vec<bool> = got
        .iter()
        .map(|&g| 1.0 - g as f64 / per as f64 > SES_FLR)
        .collect();
    let ses = severe.iter().filter(|&&s| s).count() as u32;
    let mut unavailable = 0;
    let mut run = 0;
    for &s in severe.iter().chain([false].iter()) {
        if s {
            run += 1;
        } else {
            if run >= SES_RUN {
                unavailable += run;
            }
            run = 0;
        }
    }
    (ses, unavailable as u32, seconds as u32)
}

/// The most class `i` of `p` can get: the tightest `ceil` on its way to the root.
pub fn class_ceil(p: &weir_core::policy::Policy, i: usize) -> u64 {
    let mut ceil = p.classes[i].ceil;
    let mut at = p.classes[i].parent;
    while let Some(j) = at {
        ceil = ceil.min(p.classes[j].ceil);
        at = p.classes[j].parent;
    }
    ceil
}

/// The leaf class `name` of `p` that a test stream goes to, and a source address the
/// policy's own classifier puts in it (none of `used`). Errors begin with `what`
/// (`service 'voice'`, `--class voice`); for a class with children they end with
/// `leaf_why`.
pub fn stream_class(
    p: &weir_core::policy::Policy,
    name: &str,
    what: &str,
    leaf_why: &str,
    used: &[Ipv4Addr],
) -> Result<(usize, Ipv4Addr)> {
    let i = p.class_index(name).ok_or_else(|| {
        Error::Invalid(format!(
            "{what}: no such class in {} (classes: {})",
            p.file,
            p.classes
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    if !p.classes[i].leaf {
        return Err(Error::Invalid(format!(
            "{what}: class '{name}' (line {}) has children; {leaf_why}",
            p.classes[i].line
        )));
    }
    let src = crate::tests::testbed::addresses_for_class(p, name, 1, used)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{what}: no IPv4 source address the policy classifies into it \
                 (give the class a rule with an IPv4 `src` prefix)"
            ))
        })?;
    Ok((i, src))
}

/// From a sender's start to its first frame: the time to start every sender of a set.
const SEND_DELAY: Duration = Duration::from_millis(20);

/// One stream to send: from `src` to the receiver's UDP `port`, `frame`-byte Ethernet
/// frames (without FCS) at `bps` bit/s of frames, `count` of them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Send {
    pub src: Ipv4Addr,
    pub port: u16,
    pub frame: usize,
    pub bps: f64,
    pub count: u64,
    /// Spin instead of sleeping between frames and hand the kernel up to this many due
    /// frames per `sendmmsg`: a burst as fast as the host can send (`None`: paced).
    pub burst_batch: Option<usize>,
}

impl Send {
    /// `bps` for `duration_s` (at least 2 frames).
    pub fn for_duration(src: Ipv4Addr, port: u16, frame: usize, bps: f64, duration_s: f64) -> Send {
        let pps = bps / (frame as f64 * 8.0);
        Send {
            src,
            port,
            frame,
            bps,
            count: ((pps * duration_s).round() as u64).max(2),
            burst_batch: None,
        }
    }

    /// Frames per second.
    pub fn pps(&self) -> f64 {
        self.bps / (self.frame as f64 * 8.0)
    }

    /// Sending time, s.
    pub fn duration_s(&self) -> f64 {
        self.count as f64 / self.pps()
    }

    fn dst(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), self.port)
    }

    /// The flow id the sender writes and the sink filters on: "CS" and the port.
    fn flow(&self) -> u32 {
        u32::from_be_bytes(*b"CS\0\0") | self.port as u32
    }
}

/// What one stream sent and what its figures are.
#[derive(Debug)]
pub struct Sent {
    /// Rate the sender achieved (its packet rate × frame bits), bit/s.
    pub achieved_bps: f64,
    /// Packets attempted, and those the sending host failed to send.
    pub attempted: u64,
    pub send_errors: u64,
    /// The sender's largest lateness against its schedule, ms: frames due while it was
    /// late left in a bunch, which a shaper's bucket may not hold (a delay the DUT adds
    /// to what its host did).
    pub late_max_ms: f64,
    pub figures: Figures,
    /// The receiver's errors (a sink error, frames its socket dropped).
    pub error: Option<String>,
}

/// Send every stream of `set` at once from `snd` to the testbed's receiver address on `rcv`
/// (namespaces or real hosts over SSH) and measure each; waits until nothing arrived for
/// `drain` after the senders finished. `rcv_ahead_ns` is how far the receiver's clock is
/// ahead of the sender's (0 on one machine): the frames' one-way delays are corrected by it.
pub fn send_between(
    snd: Host,
    rcv: Host,
    set: &[Send],
    drain: Duration,
    rcv_ahead_ns: i64,
) -> Result<Vec<Sent>> {
    let mut sinks = Vec::new();
    let mut opts = Vec::new();
    for s in set {
        let mut o = CbrSinkOpts::new(s.dst(), Some(s.flow()));
        o.expected = s.count as usize;
        o.rcvbuf = 16 << 20;
        // read every 20 ms: the timestamps are the kernel's, the CPU stays with the DUT
        o.wake_every = Some(Duration::from_millis(20));
        o.cpu = Some(0);
        sinks.push(rcv.cbr_sink(o)?);
        let mut so = CbrSenderOpts::new(s.dst(), s.pps(), s.frame);
        so.src = Some(SocketAddr::new(IpAddr::V4(s.src), 0));
        so.flow = s.flow();
        so.count = Some(s.count);
        so.cpu = Some(0);
        so.start_delay = SEND_DELAY;
        so.sndbuf = Some(4 << 20);
        if let Some(b) = s.burst_batch {
            so.pacing = Pacing::Spin;
            so.max_batch = b;
        }
        opts.push(so);
    }
    let senders = opts
        .into_iter()
        .map(|o| snd.cbr_sender(o))
        .collect::<Result<Vec<_>>>()?;
    // the longest stream's time, then each sender's report (it is done by then)
    let longest = set.iter().map(Send::duration_s).fold(0.0, f64::max);
    let end = std::time::Instant::now() + SEND_DELAY + Duration::from_secs_f64(longest);
    while std::time::Instant::now() < end {
        if crate::interrupted() {
            for s in senders {
                drop(s.stop());
            }
            return Err(Error::Invalid("interrupted".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reports = senders
        .into_iter()
        .map(|s| s.join())
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for ((s, sink), rep) in set.iter().zip(sinks).zip(reports) {
        let of = FiguresOf {
            attempted: rep.attempted,
            send_failed: rep.send_errors.total,
            pps: rep.opts.pps,
            duration_s: s.duration_s(),
            header: (s.frame - payload_len(s.frame, false)?) as u32,
            rcv_ahead_ns,
        };
        // computed where the frames arrived: a trial of small frames is millions of records
        let got = sink.drain_figures(rep.attempted, drain, of)?;
        out.push(Sent {
            achieved_bps: rep.achieved_pps * s.frame as f64 * 8.0,
            attempted: rep.attempted,
            send_errors: rep.send_errors.total,
            late_max_ms: rep.max_lateness_ns as f64 / 1e6,
            figures: got.figures,
            error: got.error,
        });
    }
    Ok(out)
}

/// What the figures of a received stream need beside its records (sent to the host that
/// received it: [`received_figures`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FiguresOf {
    /// Packets the sender attempted, and those its host failed to send.
    pub attempted: u64,
    pub send_failed: u64,
    /// The sender's packet rate and sending time, s.
    pub pps: f64,
    pub duration_s: f64,
    /// Ethernet, IP and UDP header bytes of a frame (the frame less the UDP payload).
    pub header: u32,
    /// How far the receiver's clock is ahead of the sender's, ns.
    pub rcv_ahead_ns: i64,
}

/// Serde's default for a result's `one_way` (frame delays counted): true in results
/// written before real hosts, whose delays were all on one clock.
pub(crate) fn measured() -> bool {
    true
}

/// A received stream's figures and the receiver's errors (a sink error, frames its
/// socket dropped: errors of the measurement, not the DUT's loss).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamFigures {
    pub figures: Figures,
    pub error: Option<String>,
}

/// The figures of a CBR sink's records.
pub fn received_figures(recs: &CbrRecords, of: &FiguresOf) -> StreamFigures {
    let arrivals: Vec<Arrival> = recs
        .records
        .iter()
        .map(|r| Arrival {
            seq: r.seq,
            tx_ns: r.tx_ns.saturating_add_signed(of.rcv_ahead_ns),
            rx_ns: r.rx_ns,
            frame: r.len + of.header,
        })
        .collect();
    let figures = figures(
        &arrivals,
        of.attempted,
        of.send_failed,
        of.pps,
        of.duration_s,
    );
    let error: Vec<String> = recs
        .error
        .iter()
        .map(|e| format!("sink: {e}"))
        .chain((recs.socket_drops > 0).then(|| {
            format!(
                "the receiving socket dropped {} frame(s)",
                recs.socket_drops
            )
        }))
        .collect();
    StreamFigures {
        figures,
        error: (!error.is_empty()).then(|| error.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 packets/s of 1000-byte frames for 2 s, each arriving 1 ms after it was sent,
    /// minus `lose`.
    fn arrivals(lose: impl Fn(u64) -> bool) -> Vec<Arrival> {
        (0..2000u64)
            .filter(|&k| !lose(k))
            .map(|k| Arrival {
                seq: k,
                tx_ns: 1_000_000_000 + k * 1_000_000,
                rx_ns: 1_000_000_000 + k * 1_000_000 + 1_000_000,
                frame: 1000,
            })
            .collect()
    }

    #[test]
    fn figures_by_hand() {
        // 10 frames lost (seq 100..110) and 3 that the host failed to send (1997..2000)
        let a = arrivals(|k| (100..110).contains(&k) || k >= 1997);
        let f = figures(&a, 2000, 3, 1000.0, 2.0);
        assert_eq!(
            (f.received, f.lost, f.duplicates, f.reordered),
            (1987, 10, 0, 0)
        );
        // window: first arrival + [0.2 s, 1.8 s): seq 200..1800, 1600 frames x 8000 bits / 1.6 s
        assert!((f.ir_bps.unwrap() - 8_000_000.0).abs() < 1e-6);
        let d = f.ftd.unwrap();
        assert!(
            (d.min - 1.0).abs() < 1e-9 && (d.mean - 1.0).abs() < 1e-9 && (d.max - 1.0).abs() < 1e-9
        );
        assert!(d.fdv().abs() < 1e-9);
        // 2 s judged, none severely errored
        assert_eq!((f.ses, f.unavailable_s, f.seconds), (0, 0, 2));
    }

    #[test]
    fn fdv_is_the_999th_percentile_above_the_minimum() {
        // 2000 delays: 1 ms, except 10 of 3 ms; sorted, rank 0.999 x 1999 = 1997.001 lies
        // among the 3 ms ones (ranks 1990..1999), so p99.9 = 3 and FDV = 2 ms
        let mut a = arrivals(|_| false);
        for x in a.iter_mut().skip(500).take(10) {
            x.rx_ns += 2_000_000;
        }
        // in arrival order
        a.sort_by_key(|x| x.rx_ns);
        let f = figures(&a, 2000, 0, 1000.0, 2.0);
        let d = f.ftd.unwrap();
        assert!((d.fdv() - 2.0).abs() < 1e-9, "{d:?}");
        // mean: (1990 x 1 + 10 x 3) / 2000 = 1.01 ms; the delayed ones arrive out of order
        assert!((d.mean - 1.01).abs() < 1e-9);
        assert!(f.reordered > 0);
    }

    #[test]
    fn a_duplicate_counts_once() {
        let mut a = arrivals(|_| false);
        a.push(a[7]);
        let f = figures(&a, 2000, 0, 1000.0, 2.0);
        assert_eq!((f.received, f.duplicates, f.lost), (2000, 1, 0));
    }

    #[test]
    fn availability_by_y1563s_rule() {
        // 10 packets/s for 30 s; seconds 5..=16 lose 6 of 10 (12 SES in a row: unavailable),
        // seconds 20..=24 lose all (5 SES: still available)
        let received: Vec<u64> = (0..300u64)
            .filter(|k| {
                let (sec, i) = (k / 10, k % 10);
                !(((5..=16).contains(&sec) && i < 6) || (20..=24).contains(&sec))
            })
            .collect();
        assert_eq!(availability(&received, 300, 10.0), (17, 12, 30));
        // exactly half lost is not severe (FLR must exceed 0.5)
        let half: Vec<u64> = (0..300u64).filter(|k| k % 2 == 0).collect();
        assert_eq!(availability(&half, 300, 10.0), (0, 0, 30));
        // a run reaching the end counts
        let tail: Vec<u64> = (0..200u64).collect();
        assert_eq!(availability(&tail, 300, 10.0), (10, 10, 30));
    }
}
