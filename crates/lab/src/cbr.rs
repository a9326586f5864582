//! Constant-bit-rate (CBR) UDP traffic agents with kernel receive timestamps: the measurement
//! method of seed 002 (Chertov & Almeroth, "High-Fidelity Link Shaping", sections III-A and
//! IV): CBR flows of fixed-size frames (64, 800, 1518 bytes at 8k..200k packets/s), measuring
//! per-packet one-way delay, inter-frame gap (IFG) and loss at the receiver.
//!
//! - [`CbrSender`] sends UDP datagrams from a (bound) source to a destination at a constant
//!   rate in packets per second, each datagram padded so that its Ethernet frame has the
//!   requested size, each carrying a flow id, a sequence number and its send time.
//! - [`CbrSink`] receives them with kernel receive timestamps and records, per packet, the
//!   sequence number, send time, receive time and size; [`CbrRecords`] computes delays, gaps,
//!   loss, duplicates, reordering and a [`CbrSummary`] with the seed's percentiles.
//!
//! # Frame size
//!
//! "Frame size" is the Ethernet frame without the 4-byte FCS, as everywhere in weir:
//! frame = 14 (Ethernet) + 20 (IPv4) + 8 (UDP) + payload, so payload = frame − 42 (a 64-byte
//! frame carries 22 bytes); over IPv6, payload = frame − 62. Frames below the Ethernet minimum
//! of 60 bytes, and frames whose payload cannot hold the 18-byte header (below 80 bytes over
//! IPv6), are refused ([`payload_len`]). Frames larger than the path MTU + 14
//! are fragmented by IP and then are not single frames any more: keep `frame ≤ MTU + 14`.
//!
//! # Payload layout
//!
//! All integers big-endian (network order); bytes after the header are zero.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 4 | flow id, also the magic the sink filters on (default [`DEFAULT_FLOW`], "WEIR") |
//! | 4  | 6 | sequence number, 0, 1, 2, … per sender (48 bits) |
//! | 10 | 8 | send time, ns since the Unix epoch (`CLOCK_REALTIME`) |
//! | 18 | … | zero padding up to the frame size |
//!
//! 18 bytes is exactly the UDP payload of a minimum Ethernet frame (60 bytes without FCS,
//! seed 002's "64-byte frame" with it), so every size of the seed can be sent.
//!
//! # Clocks
//!
//! One-way delay = kernel receive time − send time, so both must come from one clock. The
//! receiver uses `SO_TIMESTAMPNS`, whose timestamps are `CLOCK_REALTIME`, taken by the kernel
//! when the packet enters the receiving stack (for veth: when `netif_rx` queues it, with
//! `net.core.netdev_tstamp_prequeue=1`, the default) — not when the agent gets round to
//! reading it, so the sink's scheduling does not disturb delays or gaps. The sender therefore
//! stamps packets with `CLOCK_REALTIME` (`clock_gettime`, read immediately before the send
//! call). Sender and sink run on one machine (namespaces share the clocks), so no
//! synchronisation is needed, just as the seed's Black Box Profiler both sends and receives.
//! A step of the real-time clock during a run (NTP, `date`) would corrupt delays; slewing
//! affects both ends alike. Pacing itself runs on `CLOCK_MONOTONIC`, immune to steps.
//!
//! # Pacing
//!
//! Packet `i` is due at `t0 + round(i · 10⁹ / pps)` ns on the monotonic clock, `t0` being the
//! start time plus the start delay: an absolute schedule, so errors never accumulate. Waiting
//! follows [`Pacing`]: by default the thread sleeps with `clock_nanosleep(TIMER_ABSTIME)` until
//! 100 µs before the due time (timer slack set to 1 ns with `prctl(PR_SET_TIMERSLACK)`) and
//! busy-spins on the clock for the rest, so the send starts within well under a microsecond
//! of its due time (at rates above ~10 kpps this spins a whole core). A packet sent after its
//! due time is "late" by the difference; a sender that falls behind sends at once, one
//! `send` per packet, each with a fresh stamp. Optionally (`max_batch` > 1) the packets
//! already due go out together in one `sendmmsg`; they all carry the stamp taken just before
//! that call, so the k-th packet of a batch shows k × (per-packet kernel cost, ~3 µs for
//! 64-byte frames on veth) of extra delay. On veth this bought no throughput (the receiving
//! stack runs in the sender's softirq and dominates), hence the default of 1. The report
//! counts late packets (later than one period, i.e. the next packet was due too, unless set
//! otherwise), the largest and mean lateness, and the achieved rate.
//!
//! Send errors are counted, not fatal: `ENOBUFS` from a full qdisc (reported because the
//! socket sets `IP_RECVERR`), `EAGAIN` from a full send buffer, `ECONNREFUSED` after an ICMP
//! port unreachable. The packet's sequence number is used up all the same, so the sink sees
//! it as lost, and `lost − send_errors.total` is what the path lost.
//!
//! On veth the whole receiving stack runs in the sending thread's softirq, so the sender's
//! ceiling is about one packet per ~3 µs of kernel work (64-byte frames: ~170k–270k packets/s
//! on a busy 2-core VM; seed 002 goes up to 200k). The `late` count and `achieved_pps` tell
//! when a run asked for more than the sender could do.
//!
//! # Statistics ([`CbrRecords`])
//!
//! Records are kept in arrival order (the socket's queue order).
//! - delay of a packet: `rx_ns − tx_ns` (signed; negative only if the clock stepped);
//! - inter-frame gap: the difference of consecutive kernel receive timestamps in arrival
//!   order — the seed's "time between frames as they enter" (start to start, so a CBR flow's
//!   ideal gap is `10⁶ / pps` µs), one fewer than the packets;
//! - lost: `expected − distinct sequence numbers below expected`, `expected` being the
//!   sender's `attempted` count;
//! - duplicates: records − distinct sequence numbers;
//! - reordered: packets whose sequence number is lower than the largest seen before them
//!   (a late duplicate of an earlier packet counts too);
//! - percentiles: linear interpolation between the closest ranks (numpy's default,
//!   Hyndman & Fan type 7, see [`percentile`]), reported in µs with mean, min and max.
//!
//! Agents create their sockets inside a namespace ([`Netns::try_run`]) and then run on
//! ordinary threads; stop them before dropping the topology (declare them after it).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use crate::agents::{join_thread, poll, pollfd, Waker};
use crate::netns::{Error, Netns, Result};

// ---------------------------------------------------------------------------------------------
// Frames and the payload header.

/// Ethernet + IPv4 + UDP header bytes: frame = payload + 42.
pub const IPV4_UDP_OVERHEAD: usize = 14 + 20 + 8;
/// Ethernet + IPv6 + UDP header bytes: frame = payload + 62.
pub const IPV6_UDP_OVERHEAD: usize = 14 + 40 + 8;
/// Smallest Ethernet frame without FCS.
pub const MIN_FRAME: usize = 60;
/// Bytes of the CBR header at the start of every payload.
pub const HEADER_LEN: usize = 18;
/// Sequence numbers are carried in 48 bits (they wrap after 2.8 × 10¹⁴ packets).
pub const SEQ_MASK: u64 = (1 << 48) - 1;
/// Default flow id: ASCII "WEIR".
pub const DEFAULT_FLOW: u32 = 0x5745_4952;
/// Largest `max_batch` (datagrams per `sendmmsg`).
pub const MAX_BATCH: usize = 1024;

/// The UDP payload length that makes an Ethernet frame of `frame` bytes (without FCS), over
/// IPv4 or IPv6. Errors below the Ethernet minimum, when the payload cannot hold the
/// [`HEADER_LEN`]-byte header, or above the largest UDP datagram.
pub fn payload_len(frame: usize, ipv6: bool) -> Result<usize> {
    let (overhead, max_payload, fam) = if ipv6 {
        (IPV6_UDP_OVERHEAD, 65_535 - 8, "IPv6")
    } else {
        (IPV4_UDP_OVERHEAD, 65_535 - 28, "IPv4")
    };
    if frame < MIN_FRAME {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes is below the Ethernet minimum of {MIN_FRAME} \
             (frame sizes exclude the 4-byte FCS)"
        )));
    }
    let min = overhead + HEADER_LEN;
    if frame < min {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes leaves {} bytes of UDP payload over {fam}; the CBR \
             header needs {HEADER_LEN}, so frames must be at least {min} bytes",
            frame.saturating_sub(overhead)
        )));
    }
    let p = frame - overhead;
    if p > max_payload {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes needs a {p}-byte UDP payload; at most {max_payload} \
             over {fam}"
        )));
    }
    Ok(p)
}

/// The header at the start of every CBR payload (see the module documentation for the byte
/// layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CbrHeader {
    /// Flow id.
    pub flow: u32,
    /// Sequence number (0 for a sender's first packet).
    pub seq: u64,
    /// Send time, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub tx_ns: u64,
}

impl CbrHeader {
    /// The header's [`HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.encode_into(&mut b);
        b
    }

    fn encode_into(&self, b: &mut [u8; HEADER_LEN]) {
        b[0..4].copy_from_slice(&self.flow.to_be_bytes());
        b[4..10].copy_from_slice(&(self.seq & SEQ_MASK).to_be_bytes()[2..]);
        b[10..18].copy_from_slice(&self.tx_ns.to_be_bytes());
    }

    /// Parses the header at the start of `payload`; `None` if it is shorter than
    /// [`HEADER_LEN`].
    pub fn decode(payload: &[u8]) -> Option<CbrHeader> {
        let b: &[u8; HEADER_LEN] = payload.get(..HEADER_LEN)?.try_into().ok()?;
        Some(CbrHeader {
            flow: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            seq: u64::from_be_bytes([0, 0, b[4], b[5], b[6], b[7], b[8], b[9]]),
            tx_ns: u64::from_be_bytes(b[10..18].try_into().ok()?),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Clocks, sleeping, CPU affinity.

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Now on `CLOCK_REALTIME`, ns since the Unix epoch: the clock of the CBR send stamps and of
/// `SO_TIMESTAMPNS`.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Longest single sleep, so that a stop request is noticed within it.
const SLEEP_CHUNK_NS: u64 = 2_000_000;

/// Sleeps until `t` (monotonic ns) in chunks; `false` if `stop` was raised first.
fn sleep_until(t: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = mono_ns();
        if now >= t {
            return true;
        }
        let target = t.min(now + SLEEP_CHUNK_NS);
        let ts = libc::timespec {
            tv_sec: (target / 1_000_000_000) as libc::time_t,
            tv_nsec: (target % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: ts is valid; no remaining-time output with TIMER_ABSTIME. EINTR just loops.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
    }
}

/// Busy-waits until `t` (monotonic ns); `false` if `stop` was raised first.
fn spin_until(t: u64, stop: &AtomicBool) -> bool {
    loop {
        if mono_ns() >= t {
            return true;
        }
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it (checked above); pid 0 is the
    // calling thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the calling thread's timer slack to 1 ns (best effort).
fn set_timer_slack_1ns() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument; no memory is passed.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a valid c_int of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------------------------
// Sender.

/// How a [`CbrSender`] waits for a packet's due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pacing {
    /// Sleep (`clock_nanosleep`, absolute) until `spin` before the due time, then busy-spin:
    /// sub-microsecond precision; spins a whole core once the period is below `spin` plus
    /// the wake-up latency.
    Hybrid {
        /// How long before the due time to stop sleeping.
        spin: Duration,
    },
    /// Sleep only: cheap, but every packet is late by the timer wake-up latency (tens of µs
    /// on a VM), and rates whose period is below that latency fall behind and go out in
    /// bursts.
    Sleep,
    /// Busy-spin only: the most precise; occupies a core for the whole run.
    Spin,
}

impl Default for Pacing {
    /// `Hybrid` with 100 µs of spinning.
    fn default() -> Pacing {
        Pacing::Hybrid {
            spin: Duration::from_micros(100),
        }
    }
}

/// Settings of a [`CbrSender`]. Build with [`CbrSenderOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize)]
pub struct CbrSenderOpts {
    /// Source address to bind (an IP with port 0 lets the kernel pick the port); `None`: the
    /// kernel chooses both.
    pub src: Option<SocketAddr>,
    /// Destination (the sink's address).
    pub dst: SocketAddr,
    /// Flow id written into every packet.
    pub flow: u32,
    /// Rate, packets per second (> 0; fractions allowed).
    pub pps: f64,
    /// Ethernet frame size in bytes, without FCS (see [`payload_len`]).
    pub frame: usize,
    /// Number of packets; `None`: no limit.
    pub count: Option<u64>,
    /// Send only packets due within this time after the start; `None`: no limit. With both
    /// limits, whichever comes first; with neither, the sender runs until stopped.
    pub duration: Option<Duration>,
    /// Time from the sender being ready (see [`CbrSender::start`]) to the first packet.
    pub start_delay: Duration,
    /// How to wait between packets.
    pub pacing: Pacing,
    /// Most packets per `sendmmsg` when the sender is behind (1, the default: never batch;
    /// a batch shares one send stamp, see the module documentation).
    pub max_batch: usize,
    /// A packet sent more than this after its due time counts as late; `None`: one period.
    pub late_after: Option<Duration>,
    /// Pin the sending thread to this CPU.
    pub cpu: Option<usize>,
    /// IPv4 TOS / IPv6 traffic class byte (DSCP << 2 | ECN).
    pub tos: Option<u8>,
    /// `SO_SNDBUF`; `None`: the kernel default.
    pub sndbuf: Option<usize>,
}

impl CbrSenderOpts {
    /// `pps` packets/s of `frame`-byte frames to `dst`, flow [`DEFAULT_FLOW`], no count or
    /// duration limit (set one), no start delay, default [`Pacing`], no `sendmmsg`
    /// batching, no CPU pinning.
    pub fn new(dst: SocketAddr, pps: f64, frame: usize) -> CbrSenderOpts {
        CbrSenderOpts {
            src: None,
            dst,
            flow: DEFAULT_FLOW,
            pps,
            frame,
            count: None,
            duration: None,
            start_delay: Duration::ZERO,
            pacing: Pacing::default(),
            max_batch: 1,
            late_after: None,
            cpu: None,
            tos: None,
            sndbuf: None,
        }
    }

    /// Checks the options; returns the UDP payload length.
    pub fn validate(&self) -> Result<usize> {
        if !(self.pps.is_finite() && self.pps > 0.0 && self.pps <= 1e9) {
            return Err(Error::Invalid(format!(
                "CBR rate {} packets/s (want 0 < pps <= 1e9)",
                self.pps
            )));
        }
        if self.max_batch == 0 || self.max_batch > MAX_BATCH {
            return Err(Error::Invalid(format!(
                "CBR max_batch {} (want 1..={MAX_BATCH})",
                self.max_batch
            )));
        }
        if let Some(src) = self.src {
            if src.is_ipv4() != self.dst.is_ipv4() {
                return Err(Error::Invalid(format!(
                    "CBR source {src} and destination {} are of different families",
                    self.dst
                )));
            }
        }
        payload_len(self.frame, self.dst.is_ipv6())
    }
}

/// Send errors of a [`CbrSender`], by cause.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SendErrors {
    /// All failed sends (each one packet, its sequence number used up).
    pub total: u64,
    /// `ENOBUFS`: a local queue (qdisc, device) was full.
    pub no_buffer: u64,
    /// `EAGAIN`: the socket send buffer was full.
    pub would_block: u64,
    /// `ECONNREFUSED`: an ICMP port unreachable came back (nothing listens at `dst`).
    pub refused: u64,
    /// Anything else.
    pub other: u64,
    /// The first error, as text.
    pub first: Option<String>,
}

impl SendErrors {
    fn count(&mut self, e: &io::Error) {
        self.total += 1;
        match e.raw_os_error() {
            Some(libc::ENOBUFS) => self.no_buffer += 1,
            Some(libc::EAGAIN) => self.would_block += 1,
            Some(libc::ECONNREFUSED) => self.refused += 1,
            _ => self.other += 1,
        }
        if self.first.is_none() {
            self.first = Some(e.to_string());
        }
    }
}

/// What a [`CbrSender`] did.
#[derive(Debug, Clone, Serialize)]
pub struct CbrSenderReport {
    /// The options it ran with.
    pub opts: CbrSenderOpts,
    /// The socket's local address.
    pub local: SocketAddr,
    /// UDP payload bytes per packet.
    pub payload: usize,
    /// Packets attempted: sequence numbers used (0..attempted). The sink's `expected`.
    pub attempted: u64,
    /// Packets the kernel accepted (`attempted − send_errors.total`).
    pub sent: u64,
    /// Failed sends.
    pub send_errors: SendErrors,
    /// Send stamp of packet 0, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub first_send_ns: Option<u64>,
    /// Send stamp of the last packet.
    pub last_send_ns: Option<u64>,
    /// `(attempted − 1) / (last send − first send)`, on the monotonic clock; 0 with fewer
    /// than two packets.
    pub achieved_pps: f64,
    /// Packets sent later than `late_after` (default one period) after their due time.
    pub late: u64,
    /// Largest lateness, ns.
    pub max_lateness_ns: u64,
    /// Mean lateness, ns.
    pub mean_lateness_ns: f64,
    /// `sendmmsg` calls that carried more than one packet.
    pub batches: u64,
    /// Stopped by [`CbrSender::stop`] (or drop) before its count or duration.
    pub stopped: bool,
}

/// A constant-rate UDP sender running on its own thread (see the module documentation).
#[derive(Debug)]
pub struct CbrSender {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<CbrSenderReport>>>,
}

impl CbrSender {
    /// Checks `opts`, creates a connected UDP socket in `ns`, starts the sending thread (pinned
    /// if asked: failing to pin is an error here) and returns. The first packet is due
    /// `opts.start_delay` after the thread is ready (just before this returns): creating the
    /// socket inside the namespace takes milliseconds, which do not count.
    pub fn start(ns: &Netns, opts: CbrSenderOpts) -> Result<CbrSender> {
        let payload = opts.validate()?;
        let o = opts.clone();
        let sock = ns.try_run(move || open_sender(&o))??;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Invalid("CBR sender socket has no local address".into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Result<()>>();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("cbr-sender:{local}"))
                .spawn(move || {
                    set_timer_slack_1ns();
                    if let Some(cpu) = opts.cpu {
                        if let Err(e) = pin_to_cpu(cpu) {
                            let _ =
                                tx.send(Err(Error::io(format!("pin CBR sender to CPU {cpu}"), e)));
                            return None;
                        }
                    }
                    let _ = tx.send(Ok(()));
                    let t0 = mono_ns() + opts.start_delay.as_nanos().min(u64::MAX as u128) as u64;
                    Some(sender_loop(&sock, local, opts, payload, t0, &stop))
                })
                .map_err(|e| Error::io("spawn CBR sender thread", e))?
        };
        let setup = rx
            .recv()
            .unwrap_or_else(|_| Err(Error::Invalid("CBR sender thread died".into())));
        if let Err(e) = setup {
            let _ = thread.join();
            return Err(e);
        }
        Ok(CbrSender {
            local,
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether the sender has finished (count or duration reached).
    pub fn is_finished(&self) -> bool {
        match &self.thread {
            Some(t) => t.is_finished(),
            None => true,
        }
    }

    /// Waits until the count or duration is reached and returns the report. With neither
    /// set, this waits forever: use [`CbrSender::stop`].
    pub fn join(mut self) -> CbrSenderReport {
        let t = self.thread.take().expect("CBR sender thread");
        join_thread(t).expect("CBR sender started")
    }

    /// Stops now (within a couple of milliseconds) and returns the report.
    pub fn stop(self) -> CbrSenderReport {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }
}

impl Drop for CbrSender {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = t.join();
        }
    }
}

fn open_sender(o: &CbrSenderOpts) -> Result<Socket> {
    let dst = o.dst;
    let ctx = |what: &str, e| Error::io(format!("CBR sender to {dst}: {what}"), e);
    let s = Socket::new(Domain::for_address(dst), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| ctx("socket", e))?;
    let fd = s.as_raw_fd();
    // IP_RECVERR: a full qdisc's ENOBUFS reaches send() instead of being swallowed.
    let (level, recverr, tos) = if dst.is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR, libc::IP_TOS)
    };
    setsockopt_int(fd, level, recverr, 1).map_err(|e| ctx("IP_RECVERR", e))?;
    if let Some(t) = o.tos {
        setsockopt_int(fd, level, tos, libc::c_int::from(t)).map_err(|e| ctx("IP_TOS", e))?;
    }
    if let Some(n) = o.sndbuf {
        s.set_send_buffer_size(n).map_err(|e| ctx("SO_SNDBUF", e))?;
    }
    if let Some(src) = o.src {
        s.bind(&src.into())
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    s.connect(&dst.into()).map_err(|e| ctx("connect", e))?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok(s)
}

/// `(due - t0)` of packet `i`, ns.
#[inline]
fn offset_ns(i: u64, period: f64) -> u64 {
    (i as f64 * period).round() as u64
}

fn sender_loop(
    sock: &Socket,
    local: SocketAddr,
    opts: CbrSenderOpts,
    payload: usize,
    t0: u64,
    stop: &AtomicBool,
) -> CbrSenderReport {
    let fd = sock.as_raw_fd();
    let period = 1e9 / opts.pps;
    let late_after = opts.late_after.map_or(period, |d| d.as_nanos() as f64);
    let limit = opts.count.unwrap_or(u64::MAX);
    let dur = opts
        .duration
        .map_or(u64::MAX, |d| d.as_nanos().min(u64::MAX as u128) as u64);
    let batch = opts.max_batch.clamp(1, MAX_BATCH);

    let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; payload]).collect();
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    let iov_ptr = iov.as_mut_ptr();
    let mut msgs: Vec<libc::mmsghdr> = (0..batch)
        .map(|k| {
            // SAFETY: mmsghdr is plain data; all-zero is a valid empty message.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: k < batch = iov.len(); iov is not resized while msgs lives.
            m.msg_hdr.msg_iov = unsafe { iov_ptr.add(k) };
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();

    let mut errors = SendErrors::default();
    let mut i: u64 = 0;
    let mut late = 0u64;
    let mut max_late = 0u64;
    let mut sum_late = 0f64;
    let mut batches = 0u64;
    let mut stopped = false;
    let (mut first_mono, mut last_mono) = (0u64, 0u64);
    let (mut first_rt, mut last_rt) = (None, None);
    let mut hdr = [0u8; HEADER_LEN];

    loop {
        if stop.load(Ordering::Relaxed) {
            stopped = true;
            break;
        }
        if i >= limit {
            break;
        }
        let off = offset_ns(i, period);
        if off >= dur {
            break;
        }
        let due = t0 + off;
        let mut now = mono_ns();
        if now < due {
            let ok = match opts.pacing {
                Pacing::Spin => spin_until(due, stop),
                Pacing::Sleep => sleep_until(due, stop),
                Pacing::Hybrid { spin } => {
                    let spin = spin.as_nanos().min(u64::MAX as u128) as u64;
                    (due - now <= spin || sleep_until(due - spin, stop)) && spin_until(due, stop)
                }
            };
            if !ok {
                stopped = true;
                break;
            }
            now = mono_ns();
        }
        // Every packet already due goes out now, in one sendmmsg.
        let mut n = 1usize;
        while n < batch {
            let j = i + n as u64;
            if j >= limit {
                break;
            }
            let off = offset_ns(j, period);
            if off >= dur || t0 + off > now {
                break;
            }
            n += 1;
        }
        let tx_ns = realtime_ns();
        for (k, buf) in bufs.iter_mut().take(n).enumerate() {
            let seq = i + k as u64;
            CbrHeader {
                flow: opts.flow,
                seq,
                tx_ns,
            }
            .encode_into(&mut hdr);
            buf[..HEADER_LEN].copy_from_slice(&hdr);
            let lateness = now.saturating_sub(t0 + offset_ns(seq, period));
            max_late = max_late.max(lateness);
            sum_late += lateness as f64;
            if lateness as f64 > late_after {
                late += 1;
            }
        }
        if n == 1 {
            loop {
                // SAFETY: bufs[0] holds `payload` initialised bytes.
                let r = unsafe { libc::send(fd, bufs[0].as_ptr().cast(), payload, 0) };
                if r >= 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    errors.count(&e);
                    break;
                }
            }
        } else {
            batches += 1;
            let mut k = 0usize;
            while k < n {
                // SAFETY: msgs[k..n] are valid messages pointing at live iovecs and buffers.
                let r = unsafe {
                    libc::sendmmsg(fd, msgs.as_mut_ptr().add(k), (n - k) as libc::c_uint, 0)
                };
                if r > 0 {
                    k += r as usize;
                } else {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    // The error belongs to msgs[k]: count it and go on with the rest.
                    errors.count(&e);
                    k += 1;
                }
            }
        }
        if i == 0 {
            first_mono = now;
            first_rt = Some(tx_ns);
        }
        last_mono = now;
        last_rt = Some(tx_ns);
        i += n as u64;
    }
    drop(msgs);
    drop(iov);

    let achieved_pps = if i >= 2 && last_mono > first_mono {
        (i - 1) as f64 * 1e9 / (last_mono - first_mono) as f64
    } else {
        0.0
    };
    CbrSenderReport {
        opts,
        local,
        payload,
        attempted: i,
        sent: i - errors.total,
        send_errors: errors,
        first_send_ns: first_rt,
        last_send_ns: last_rt,
        achieved_pps,
        late,
        max_lateness_ns: max_late,
        mean_lateness_ns: if i > 0 { sum_late / i as f64 } else { 0.0 },
        batches,
        stopped,
    }
}

// ---------------------------------------------------------------------------------------------
// Sink.

/// Settings of a [`CbrSink`]. Build with [`CbrSinkOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize)]
pub struct CbrSinkOpts {
    /// Address to bind (port 0 picks a free port: see [`CbrSink::local_addr`]).
    pub bind: SocketAddr,
    /// Record only packets of this flow id; `None`: every packet with a CBR header.
    pub flow: Option<u32>,
    /// Records to preallocate room for (the expected packet count).
    pub expected: usize,
    /// Receive buffer, bytes: set with `SO_RCVBUFFORCE` (root), falling back to `SO_RCVBUF`
    /// (capped by `net.core.rmem_max`).
    pub rcvbuf: usize,
    /// Datagrams per `recvmmsg`.
    pub batch: usize,
    /// Pin the receiving thread to this CPU.
    pub cpu: Option<usize>,
    /// Read the socket only this often instead of waking for every arrival: the
    /// timestamps are the kernel's, so reading late changes nothing measured, and a sink
    /// that wakes a few hundred times a second instead of per packet leaves the CPU to the
    /// device under test. `None` (default): wake on every arrival. Keep `rcvbuf` larger
    /// than a period's worth of packets.
    pub wake_every: Option<Duration>,
}

impl CbrSinkOpts {
    /// Defaults: 32 MiB receive buffer, batches of 64, no preallocation, no pinning.
    pub fn new(bind: SocketAddr, flow: Option<u32>) -> CbrSinkOpts {
        CbrSinkOpts {
            bind,
            flow,
            expected: 0,
            rcvbuf: 32 << 20,
            batch: 64,
            cpu: None,
            wake_every: None,
        }
    }
}

/// One received CBR packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CbrRecord {
    /// Sequence number.
    pub seq: u64,
    /// Send time from the header, ns since the Unix epoch.
    pub tx_ns: u64,
    /// Kernel receive timestamp (`SO_TIMESTAMPNS`), ns since the Unix epoch.
    pub rx_ns: u64,
    /// UDP payload bytes (frame = len + 42 over IPv4).
    pub len: u32,
    /// Flow id.
    pub flow: u32,
}

/// What a [`CbrSink`] received, in arrival order, and the statistics over it (see the module
/// documentation for the definitions).
#[derive(Debug, Clone, Serialize)]
pub struct CbrRecords {
    /// The address the sink was bound to.
    pub local: SocketAddr,
    /// The flow filter.
    pub flow: Option<u32>,
    /// Per packet, in arrival order.
    pub records: Vec<CbrRecord>,
    /// Datagrams ignored: too short for the header, or of another flow.
    pub ignored: u64,
    /// Datagrams without a kernel timestamp (given the time of reading instead; expected 0).
    pub no_timestamp: u64,
    /// Datagrams the socket dropped (full receive buffer; `SO_RXQ_OVFL`'s counter).
    pub socket_drops: u64,
    /// The receive buffer the kernel granted (`SO_RCVBUF` read back), bytes.
    pub rcvbuf: usize,
    /// An error that stopped the sink early, if any.
    pub error: Option<String>,
}

impl CbrRecords {
    /// Empty records (for tests and synthetic data).
    pub fn new(local: SocketAddr, flow: Option<u32>, records: Vec<CbrRecord>) -> CbrRecords {
        CbrRecords {
            local,
            flow,
            records,
            ignored: 0,
            no_timestamp: 0,
            socket_drops: 0,
            rcvbuf: 0,
            error: None,
        }
    }

    /// Number of records (duplicates included).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was received.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records of one flow (for a sink without a filter).
    pub fn of_flow(&self, flow: u32) -> CbrRecords {
        CbrRecords {
            flow: Some(flow),
            records: self
                .records
                .iter()
                .filter(|r| r.flow == flow)
                .copied()
                .collect(),
            ..self.clone_meta()
        }
    }

    fn clone_meta(&self) -> CbrRecords {
        CbrRecords {
            local: self.local,
            flow: self.flow,
            records: Vec::new(),
            ignored: self.ignored,
            no_timestamp: self.no_timestamp,
            socket_drops: self.socket_drops,
            rcvbuf: self.rcvbuf,
            error: self.error.clone(),
        }
    }

    /// One-way delay per packet, `rx_ns − tx_ns`, in arrival order.
    pub fn delays_ns(&self) -> Vec<i64> {
        self.records
            .iter()
            .map(|r| r.rx_ns.wrapping_sub(r.tx_ns) as i64)
            .collect()
    }

    /// Inter-frame gaps: differences of consecutive kernel receive timestamps in arrival
    /// order (one fewer than the records).
    pub fn gaps_ns(&self) -> Vec<i64> {
        self.records
            .windows(2)
            .map(|w| w[1].rx_ns.wrapping_sub(w[0].rx_ns) as i64)
            .collect()
    }

    /// Sorted distinct sequence numbers.
    fn distinct_seqs(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.records.iter().map(|r| r.seq).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Distinct sequence numbers received.
    pub fn distinct(&self) -> u64 {
        self.distinct_seqs().len() as u64
    }

    /// Packets missing: `expected` minus the distinct sequence numbers below `expected`
    /// (pass the sender's `attempted`).
    pub fn lost(&self, expected: u64) -> u64 {
        let s = self.distinct_seqs();
        expected - s.partition_point(|&q| q < expected) as u64
    }

    /// Records beyond the first of each sequence number.
    pub fn duplicates(&self) -> u64 {
        self.records.len() as u64 - self.distinct()
    }

    /// Packets whose sequence number is lower than the largest seen before them.
    pub fn reordered(&self) -> u64 {
        let mut it = self.records.iter();
        let Some(first) = it.next() else { return 0 };
        let mut max = first.seq;
        let mut n = 0;
        for r in it {
            if r.seq < max {
                n += 1;
            } else {
                max = r.seq;
            }
        }
        n
    }

    /// Counts and distributions, given the sender's `attempted` count.
    pub fn summary(&self, expected: u64) -> CbrSummary {
        let s = self.distinct_seqs();
        let distinct = s.len() as u64;
        let lost = expected - s.partition_point(|&q| q < expected) as u64;
        CbrSummary {
            expected,
            received: self.records.len() as u64,
            distinct,
            lost,
            loss_ratio: if expected > 0 {
                lost as f64 / expected as f64
            } else {
                0.0
            },
            duplicates: self.records.len() as u64 - distinct,
            reordered: self.reordered(),
            ignored: self.ignored,
            socket_drops: self.socket_drops,
            delay_us: DistUs::from_ns(&self.delays_ns()),
            ifg_us: DistUs::from_ns(&self.gaps_ns()),
        }
    }
}

/// Percentile `p` (0..=100) of `sorted` (ascending) by linear interpolation between the
/// closest ranks — numpy's default (`method="linear"`), Hyndman & Fan type 7: with `n`
/// values, rank `h = p/100 · (n − 1)` (0-based), result
/// `sorted[⌊h⌋] + (h − ⌊h⌋) · (sorted[⌊h⌋+1] − sorted[⌊h⌋])`. Example: the 10th percentile
/// of 1..=10 is 1.9. `p` is clamped to 0..=100; NaN for an empty slice.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let h = (p.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
    let lo = h.floor() as usize;
    if lo + 1 >= n {
        return sorted[n - 1];
    }
    let frac = h - lo as f64;
    sorted[lo] + frac * (sorted[lo + 1] - sorted[lo])
}

/// A distribution summary, in µs. Empty input: `count` 0 and every value NaN (JSON `null`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DistUs {
    /// Number of values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Smallest.
    pub min: f64,
    /// 10th percentile ([`percentile`]).
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl DistUs {
    /// Summarises values given in ns.
    pub fn from_ns(ns: &[i64]) -> DistUs {
        let mut v: Vec<f64> = ns.iter().map(|&x| x as f64 / 1e3).collect();
        v.sort_unstable_by(f64::total_cmp);
        DistUs::from_sorted(&v)
    }

    /// Summarises ascending values (already in µs).
    pub fn from_sorted(v: &[f64]) -> DistUs {
        let n = v.len();
        if n == 0 {
            return DistUs {
                count: 0,
                mean: f64::NAN,
                std: f64::NAN,
                min: f64::NAN,
                p10: f64::NAN,
                p50: f64::NAN,
                p90: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        DistUs {
            count: n,
            mean,
            std: var.sqrt(),
            min: v[0],
            p10: percentile(v, 10.0),
            p50: percentile(v, 50.0),
            p90: percentile(v, 90.0),
            p99: percentile(v, 99.0),
            max: v[n - 1],
        }
    }
}

impl fmt::Display for DistUs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p10 {:.2} p50 {:.2} p90 {:.2} p99 {:.2} (mean {:.2} std {:.2} min {:.2} max {:.2}) µs",
            self.p10, self.p50, self.p90, self.p99, self.mean, self.std, self.min, self.max
        )
    }
}

/// Loss, ordering and the delay and IFG distributions of one CBR flow.
#[derive(Debug, Clone, Serialize)]
pub struct CbrSummary {
    /// Packets the sender attempted.
    pub expected: u64,
    /// Records (duplicates included).
    pub received: u64,
    /// Distinct sequence numbers.
    pub distinct: u64,
    /// Packets missing.
    pub lost: u64,
    /// `lost / expected` (0 when nothing was expected).
    pub loss_ratio: f64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// Datagrams ignored by the sink (other flows, too short).
    pub ignored: u64,
    /// Datagrams dropped by the sink's socket (receive buffer full).
    pub socket_drops: u64,
    /// One-way delay.
    pub delay_us: DistUs,
    /// Inter-frame gap.
    pub ifg_us: DistUs,
}

impl fmt::Display for CbrSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received {}/{} lost {} ({:.4}%) dup {} reordered {} ignored {} sockdrops {} | \
             delay {} | ifg {}",
            self.distinct,
            self.expected,
            self.lost,
            self.loss_ratio * 100.0,
            self.duplicates,
            self.reordered,
            self.ignored,
            self.socket_drops,
            self.delay_us,
            self.ifg_us
        )
    }
}

#[derive(Debug, Default)]
struct SinkShared {
    received: AtomicU64,
}

/// A UDP receiver that records every CBR packet with its kernel receive timestamp. Stop it
/// with [`CbrSink::stop`] or [`CbrSink::finish`]; dropping it stops it too (discarding the
/// records).
#[derive(Debug)]
pub struct CbrSink {
    local: SocketAddr,
    waker: Arc<Waker>,
    shared: Arc<SinkShared>,
    thread: Option<JoinHandle<CbrRecords>>,
}

impl CbrSink {
    /// Starts a sink in `ns` on `bind`, recording flow `flow` (`None`: any). It is receiving
    /// when this returns.
    pub fn start(ns: &Netns, bind: SocketAddr, flow: Option<u32>) -> Result<CbrSink> {
        Self::start_with(ns, CbrSinkOpts::new(bind, flow))
    }

    /// [`CbrSink::start`] with all options.
    pub fn start_with(ns: &Netns, opts: CbrSinkOpts) -> Result<CbrSink> {
        if opts.batch == 0 || opts.batch > 1024 {
            return Err(Error::Invalid(format!(
                "CBR sink batch {} (want 1..=1024)",
                opts.batch
            )));
        }
        let o = opts.clone();
        let (sock, rcvbuf) = ns.try_run(move || open_sink(&o))??;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Invalid("CBR sink socket has no local address".into()))?;
        let waker = Arc::new(Waker::new()?);
        let shared = Arc::new(SinkShared::default());
        let (tx, rx) = mpsc::channel::<Result<()>>();
        let thread = {
            let waker = Arc::clone(&waker);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("cbr-sink:{local}"))
                .spawn(move || {
                    let mut out = CbrRecords {
                        local,
                        flow: opts.flow,
                        records: Vec::with_capacity(opts.expected),
                        ignored: 0,
                        no_timestamp: 0,
                        socket_drops: 0,
                        rcvbuf,
                        error: None,
                    };
                    if let Some(cpu) = opts.cpu {
                        if let Err(e) = pin_to_cpu(cpu) {
                            let _ =
                                tx.send(Err(Error::io(format!("pin CBR sink to CPU {cpu}"), e)));
                            return out;
                        }
                    }
                    let _ = tx.send(Ok(()));
                    sink_loop(&sock, &opts, &waker, &shared, &mut out);
                    out
                })
                .map_err(|e| Error::io("spawn CBR sink thread", e))?
        };
        let setup = rx
            .recv()
            .unwrap_or_else(|_| Err(Error::Invalid("CBR sink thread died".into())));
        if let Err(e) = setup {
            let _ = thread.join();
            return Err(e);
        }
        Ok(CbrSink {
            local,
            waker,
            shared,
            thread: Some(thread),
        })
    }

    /// The address the sink is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Packets recorded so far (of the filtered flow, duplicates included).
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::Acquire)
    }

    /// Stops (after reading what is already queued on the socket) and returns the records.
    pub fn stop(mut self) -> CbrRecords {
        self.waker.wake();
        join_thread(self.thread.take().expect("CBR sink thread"))
    }

    /// Waits until `expected` packets were recorded or none arrived for `idle` (counted from
    /// this call or the latest arrival), then stops. Make `idle` longer than the path's delay.
    pub fn finish(self, expected: u64, idle: Duration) -> CbrRecords {
        let mut last = self.received();
        let mut since = Instant::now();
        loop {
            let n = self.received();
            if n >= expected {
                break;
            }
            if n != last {
                last = n;
                since = Instant::now();
            } else if since.elapsed() >= idle {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.stop()
    }
}

impl Drop for CbrSink {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.waker.wake();
            let _ = t.join();
        }
    }
}

fn open_sink(o: &CbrSinkOpts) -> Result<(Socket, usize)> {
    let bind = o.bind;
    let ctx = |what: &str, e| Error::io(format!("CBR sink {bind}: {what}"), e);
    let s = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| ctx("socket", e))?;
    let fd = s.as_raw_fd();
    let n = o.rcvbuf.min(i32::MAX as usize) as libc::c_int;
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, n).is_err() {
        s.set_recv_buffer_size(n as usize)
            .map_err(|e| ctx("SO_RCVBUF", e))?;
    }
    let rcvbuf = s.recv_buffer_size().map_err(|e| ctx("SO_RCVBUF", e))?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
        .map_err(|e| ctx("SO_TIMESTAMPNS", e))?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
        .map_err(|e| ctx("SO_RXQ_OVFL", e))?;
    s.bind(&bind.into()).map_err(|e| ctx("bind", e))?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok((s, rcvbuf))
}

/// Bytes of each datagram copied out: the header is all the sink reads (`MSG_TRUNC` makes
/// the kernel report the full length).
const RX_PREFIX: usize = 64;
/// Control buffer per datagram, in u64 words (alignment for `cmsghdr`): room for a timespec
/// and the drop counter.
const CMSG_WORDS: usize = 16;

fn sink_loop(
    sock: &Socket,
    o: &CbrSinkOpts,
    waker: &Waker,
    shared: &SinkShared,
    out: &mut CbrRecords,
) {
    let fd = sock.as_raw_fd();
    let vlen = o.batch;
    let mut bufs = vec![[0u8; RX_PREFIX]; vlen];
    let mut ctrl = vec![[0u64; CMSG_WORDS]; vlen];
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: RX_PREFIX,
        })
        .collect();
    let iov_ptr = iov.as_mut_ptr();
    let ctrl_ptr = ctrl.as_mut_ptr();
    // Datagrams are read back through this pointer only (the kernel writes behind any
    // reference's back).
    let bufs_ptr = bufs.as_mut_ptr();
    let mut msgs: Vec<libc::mmsghdr> = (0..vlen)
        .map(|k| {
            // SAFETY: mmsghdr is plain data; all-zero is a valid empty message.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: k < vlen = iov.len() = ctrl.len(); neither is resized while msgs lives.
            unsafe {
                m.msg_hdr.msg_iov = iov_ptr.add(k);
                m.msg_hdr.msg_control = ctrl_ptr.add(k).cast();
            }
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();

    let mut drain = |out: &mut CbrRecords| -> io::Result<()> {
        loop {
            for m in msgs.iter_mut() {
                m.msg_hdr.msg_controllen = CMSG_WORDS * 8;
                m.msg_hdr.msg_flags = 0;
                m.msg_len = 0;
            }
            // SAFETY: msgs holds vlen valid messages whose buffers live as long as msgs.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    vlen as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    std::ptr::null_mut(),
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            let got = r as usize;
            for (k, m) in msgs.iter().enumerate().take(got) {
                // SAFETY: k < vlen = bufs.len(); recvmmsg has returned, nothing else writes.
                let buf = unsafe { &*bufs_ptr.add(k) };
                take_datagram(m, buf, o.flow, out);
            }
            shared
                .received
                .store(out.records.len() as u64, Ordering::Release);
            if got < vlen {
                return Ok(());
            }
        }
    };

    loop {
        let mut fds = [pollfd(waker.fd(), libc::POLLIN), pollfd(fd, libc::POLLIN)];
        // with `wake_every`, sleep on the stop signal alone and then read what came
        let (watch, timeout) = match o.wake_every {
            Some(t) => (1, Some(t)),
            None => (2, None),
        };
        if let Err(e) = poll(&mut fds[..watch], timeout) {
            out.error = Some(format!("poll: {e}"));
            break;
        }
        let stopping = fds[0].revents != 0;
        // On stop, read once more: what is queued arrived before the stop.
        if fds[1].revents != 0 || stopping || o.wake_every.is_some() {
            if let Err(e) = drain(out) {
                out.error = Some(format!("recvmmsg: {e}"));
                break;
            }
        }
        if stopping {
            break;
        }
    }
}

/// Parses one received datagram into `out`.
fn take_datagram(
    m: &libc::mmsghdr,
    buf: &[u8; RX_PREFIX],
    flow: Option<u32>,
    out: &mut CbrRecords,
) {
    let len = m.msg_len as usize;
    let mut rx_ns = None;
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG_* helpers stay
    // within it, and the data is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                rx_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            } else if level == libc::SOL_SOCKET && ty == libc::SO_RXQ_OVFL {
                let d: u32 = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                out.socket_drops = out.socket_drops.max(u64::from(d));
            }
            c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
        }
    }
    let Some(h) = CbrHeader::decode(&buf[..len.min(RX_PREFIX)]) else {
        out.ignored += 1;
        return;
    };
    if flow.is_some_and(|f| f != h.flow) {
        out.ignored += 1;
        return;
    }
    let rx_ns = rx_ns.unwrap_or_else(|| {
        out.no_timestamp += 1;
        realtime_ns()
    });
    out.records.push(CbrRecord {
        seq: h.seq,
        tx_ns: h.tx_ns,
        rx_ns,
        len: len.min(u32::MAX as usize) as u32,
        flow: h.flow,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, tx: u64, rx: u64) -> CbrRecord {
        CbrRecord {
            seq,
            tx_ns: tx,
            rx_ns: rx,
            len: 22,
            flow: DEFAULT_FLOW,
        }
    }

    fn records(v: Vec<CbrRecord>) -> CbrRecords {
        CbrRecords::new("127.0.0.1:9".parse().unwrap(), Some(DEFAULT_FLOW), v)
    }

    #[test]
    fn header_layout_and_roundtrip() {
        let h = CbrHeader {
            flow: 0x0102_0304,
            seq: 0x1314_1516_1718,
            tx_ns: 0x2122_2324_2526_2728,
        };
        let b = h.encode();
        assert_eq!(
            b,
            [
                0x01, 0x02, 0x03, 0x04, // flow
                0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // seq (48 bits)
                0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, // tx_ns
            ]
        );
        assert_eq!(CbrHeader::decode(&b), Some(h));
        // Padding after the header is ignored; a short payload is refused.
        let mut p = b.to_vec();
        p.extend_from_slice(&[0xff; 2]);
        assert_eq!(CbrHeader::decode(&p), Some(h));
        assert_eq!(CbrHeader::decode(&b[..HEADER_LEN - 1]), None);
        assert_eq!(CbrHeader::decode(&[]), None);
        assert_eq!(&DEFAULT_FLOW.to_be_bytes(), b"WEIR");
    }

    #[test]
    fn frame_to_payload() {
        assert_eq!(payload_len(64, false).unwrap(), 22);
        assert_eq!(payload_len(800, false).unwrap(), 758);
        assert_eq!(payload_len(1518, false).unwrap(), 1476);
        assert_eq!(payload_len(60, false).unwrap(), HEADER_LEN);
        assert_eq!(payload_len(80, true).unwrap(), HEADER_LEN);
        assert_eq!(payload_len(1518, true).unwrap(), 1456);
        let e = payload_len(59, false).unwrap_err().to_string();
        assert!(e.contains("Ethernet minimum"), "{e}");
        let e = payload_len(79, true).unwrap_err().to_string();
        assert!(e.contains("at least 80"), "{e}");
        assert!(payload_len(64, true).is_err());
        assert_eq!(payload_len(65_549, false).unwrap(), 65_507);
        assert!(payload_len(65_550, false).is_err());
    }

    #[test]
    fn opts_validation() {
        let dst: SocketAddr = "10.0.0.2:9".parse().unwrap();
        assert_eq!(CbrSenderOpts::new(dst, 1000.0, 64).validate().unwrap(), 22);
        assert!(CbrSenderOpts::new(dst, 0.0, 64).validate().is_err());
        assert!(CbrSenderOpts::new(dst, f64::NAN, 64).validate().is_err());
        assert!(CbrSenderOpts::new(dst, 1000.0, 40).validate().is_err());
        let mut o = CbrSenderOpts::new(dst, 1000.0, 64);
        o.max_batch = 0;
        assert!(o.validate().is_err());
        let mut o = CbrSenderOpts::new(dst, 1000.0, 64);
        o.src = Some("[fd00::1]:0".parse().unwrap());
        assert!(o.validate().is_err());
    }

    #[test]
    fn schedule_is_absolute() {
        // 3 pps: 333_333_333.33… ns; packet 3 is due at exactly 1 s, no drift.
        let p = 1e9 / 3.0;
        assert_eq!(offset_ns(0, p), 0);
        assert_eq!(offset_ns(1, p), 333_333_333);
        assert_eq!(offset_ns(2, p), 666_666_667);
        assert_eq!(offset_ns(3, p), 1_000_000_000);
        assert_eq!(offset_ns(3_000_000_000, p), 1_000_000_000 * 1_000_000_000);
        let p = 1e9 / 200_000.0;
        assert_eq!(offset_ns(1_000_000, p), 5_000_000_000);
    }

    #[test]
    fn percentile_numpy_linear() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // numpy.percentile(range(1, 11), [0, 10, 25, 50, 90, 100]) = 1, 1.9, 3.25, 5.5, 9.1, 10
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(percentile(&v, 0.0), 1.0));
        assert!(close(percentile(&v, 10.0), 1.9));
        assert!(close(percentile(&v, 25.0), 3.25));
        assert!(close(percentile(&v, 50.0), 5.5));
        assert!(close(percentile(&v, 90.0), 9.1));
        assert!(close(percentile(&v, 100.0), 10.0));
        // Out-of-range p is clamped.
        assert!(close(percentile(&v, 150.0), 10.0));
        // [15, 20, 35, 40, 50]: p40 → h = 1.6 → 20 + 0.6·15 = 29.
        assert!(close(
            percentile(&[15.0, 20.0, 35.0, 40.0, 50.0], 40.0),
            29.0
        ));
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn dist_from_ns() {
        // 1..=10 µs given in ns, unsorted.
        let ns: Vec<i64> = [5, 1, 9, 3, 7, 2, 10, 4, 8, 6]
            .iter()
            .map(|x| x * 1000)
            .collect();
        let d = DistUs::from_ns(&ns);
        assert_eq!(d.count, 10);
        assert!((d.mean - 5.5).abs() < 1e-12);
        assert!((d.p10 - 1.9).abs() < 1e-12);
        assert!((d.p50 - 5.5).abs() < 1e-12);
        assert!((d.p90 - 9.1).abs() < 1e-12);
        assert_eq!((d.min, d.max), (1.0, 10.0));
        // Population std of 1..=10: sqrt(8.25).
        assert!((d.std - 8.25f64.sqrt()).abs() < 1e-12);
        let e = DistUs::from_ns(&[]);
        assert_eq!(e.count, 0);
        assert!(e.p50.is_nan());
        // NaN serialises as null.
        let j = serde_json::to_value(e).unwrap();
        assert!(j["p50"].is_null());
    }

    #[test]
    fn loss_duplicates_reordering() {
        // Sent 0..8. Arrival: 0 1 3 2 2 5 4 7; 6 lost; 2 duplicated; 2 (first) and 4
        // reordered, and the duplicate 2 too (lower than max 3).
        let seqs = [0u64, 1, 3, 2, 2, 5, 4, 7];
        let r = records(
            seqs.iter()
                .enumerate()
                .map(|(i, &s)| rec(s, 1000 * s, 1000 * s + 50 + i as u64))
                .collect(),
        );
        assert_eq!(r.len(), 8);
        assert_eq!(r.distinct(), 7);
        assert_eq!(r.duplicates(), 1);
        assert_eq!(r.lost(8), 1);
        assert_eq!(r.reordered(), 3);
        // A packet beyond `expected` does not reduce the loss count.
        assert_eq!(r.lost(7), 1); // 0..7 expected: 6 missing
        assert_eq!(r.lost(6), 0);
        let s = r.summary(8);
        assert_eq!(
            (
                s.expected,
                s.received,
                s.distinct,
                s.lost,
                s.duplicates,
                s.reordered
            ),
            (8, 8, 7, 1, 1, 3)
        );
        assert!((s.loss_ratio - 0.125).abs() < 1e-12);
        // Empty and in-order cases.
        let e = records(vec![]);
        assert_eq!((e.lost(5), e.duplicates(), e.reordered()), (5, 0, 0));
        assert_eq!(e.summary(0).loss_ratio, 0.0);
        let inorder = records((0..100).map(|s| rec(s, s, s + 1)).collect());
        assert_eq!(
            (inorder.lost(100), inorder.duplicates(), inorder.reordered()),
            (0, 0, 0)
        );
    }

    #[test]
    fn delays_and_gaps() {
        let r = records(vec![
            rec(0, 1_000, 1_010),
            rec(1, 2_000, 2_030),
            rec(2, 3_000, 2_990), // clock went backwards: negative delay
            rec(3, 4_000, 5_000),
        ]);
        assert_eq!(r.delays_ns(), vec![10, 30, -10, 1_000]);
        assert_eq!(r.gaps_ns(), vec![1_020, 960, 2_010]);
        let s = r.summary(4);
        assert_eq!(s.ifg_us.count, 3);
        assert!((s.ifg_us.p50 - 1.02).abs() < 1e-12);
        assert_eq!(s.delay_us.min, -0.01);
        assert!(records(vec![rec(0, 0, 0)]).gaps_ns().is_empty());
    }

    #[test]
    fn flow_split() {
        let mut v = vec![rec(0, 0, 1), rec(1, 0, 2)];
        v.push(CbrRecord {
            flow: 7,
            ..rec(0, 0, 3)
        });
        let r = records(v);
        assert_eq!(r.of_flow(7).len(), 1);
        assert_eq!(r.of_flow(DEFAULT_FLOW).len(), 2);
        assert_eq!(r.of_flow(7).flow, Some(7));
    }

    #[test]
    fn realtime_is_epoch_ns() {
        let a = realtime_ns();
        let b = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(a.abs_diff(b) < 1_000_000_000);
    }
}
