//! The testbed's own traffic agents: a bulk TCP sender and sink, and an ICMP echo prober.
//!
//! No external tool (iperf, ping) is needed, every byte is accounted, and the agents work at
//! any rate — a 5 kbit/s session included, because nothing in them blocks for longer than
//! the time left: sockets are non-blocking and every wait is a `poll` bounded by the deadline
//! and interruptible by a stop signal (an eventfd).
//!
//! - [`TcpSink`] accepts any number of connections on one address and, per connection,
//!   counts the bytes read in consecutive intervals of a fixed length. All series of one sink
//!   share one origin — the moment the sink started — so sessions that start at different
//!   times line up bin by bin.
//! - [`TcpSender`] connects with explicit TCP settings (congestion control set with
//!   `TCP_CONGESTION`, MSS with `TCP_MAXSEG`, buffer sizes, `TCP_NODELAY`), writes as fast as
//!   the socket accepts for a fixed duration, then shuts its side down and waits (bounded)
//!   until the sink has read everything and closed, so that the final `TCP_INFO` accounts
//!   for the whole transfer.
//! - [`icmp_ping`] sends ICMP echo requests on a raw socket and times the replies.
//!
//! Timestamps come from the monotonic clock (`std::time::Instant`).
//!
//! Agents create their sockets inside a namespace ([`Netns::try_run`]) and then run on
//! ordinary threads: a socket stays in the namespace it was created in. A running agent keeps
//! its namespace alive, so stop agents before dropping the topology (declare them after it).

use std::io::{self, Read as _};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::netns::{Error, Netns, Result};

// ---------------------------------------------------------------------------------------------
// Small helpers: a wake-up eventfd and poll.

/// A level-triggered stop signal that `poll` can wait on (an eventfd).
#[derive(Debug)]
pub(crate) struct Waker(OwnedFd);

impl Waker {
    pub(crate) fn new() -> Result<Waker> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::io("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(Waker(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `poll` on `fds` for at most `timeout` (`None`: forever). EINTR counts as "nothing ready".
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms: libc::c_int = match timeout {
        None => -1,
        // Round up so that a short remaining time does not turn into a busy loop.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: fds points to fds.len() valid pollfd structures.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

pub(crate) fn join_thread<T>(h: JoinHandle<T>) -> T {
    match h.join() {
        Ok(t) => t,
        Err(p) => std::panic::resume_unwind(p),
    }
}

// ---------------------------------------------------------------------------------------------
// Goodput.

/// Goodput in bit/s over the window `[from, to)` of a per-interval byte series whose bin `i`
/// covers `[i*interval, (i+1)*interval)`. Bins that straddle a window edge count in
/// proportion to their overlap (bytes assumed uniform within a bin). The window is clipped to
/// the series' extent; an empty window gives 0.0. Use `from` to skip slow start.
pub fn goodput_bps(series: &[u64], interval: Duration, from: Duration, to: Duration) -> f64 {
    let iv = interval.as_nanos() as f64;
    if iv <= 0.0 || series.is_empty() {
        return 0.0;
    }
    let end = iv * series.len() as f64;
    let from = from.as_nanos() as f64;
    let to = (to.as_nanos() as f64).min(end);
    if to <= from {
        return 0.0;
    }
    let first = (from / iv).floor() as usize;
    let mut bytes = 0.0;
    for (i, &b) in series.iter().enumerate().skip(first) {
        let start = i as f64 * iv;
        if start >= to {
            break;
        }
        let overlap = (start + iv).min(to) - start.max(from);
        if overlap > 0.0 {
            bytes += b as f64 * overlap / iv;
        }
    }
    bytes * 8.0 / ((to - from) / 1e9)
}

// ---------------------------------------------------------------------------------------------
// TCP sink.

/// Options of a [`TcpSink`].
#[derive(Debug, Clone)]
pub struct SinkOpts {
    /// Address to listen on (`0.0.0.0:PORT` takes every address of the namespace).
    pub bind: SocketAddr,
    /// Length of one bin of the per-connection series.
    pub interval: Duration,
    /// `SO_RCVBUF` for the listener (inherited by accepted connections); `None`: the kernel's
    /// autotuning.
    pub rcvbuf: Option<usize>,
    /// Size of one `read`.
    pub read_size: usize,
}

impl SinkOpts {
    /// Options with defaults: kernel receive buffer, 256 KiB reads.
    pub fn new(bind: SocketAddr, interval: Duration) -> SinkOpts {
        SinkOpts {
            bind,
            interval,
            rcvbuf: None,
            read_size: 256 * 1024,
        }
    }
}

/// What a sink saw on one connection. Times are since the sink started.
#[derive(Debug, Clone, Serialize)]
pub struct ConnReport {
    /// The sender's address.
    pub peer: SocketAddr,
    /// The sink's address of this connection.
    pub local: SocketAddr,
    /// When the connection was accepted.
    pub accepted_at: Duration,
    /// When the first byte was read (`None`: no data).
    pub first_byte: Option<Duration>,
    /// When the last byte was read.
    pub last_byte: Option<Duration>,
    /// When the sender's FIN was read (`None`: the connection was still open at stop).
    pub eof_at: Option<Duration>,
    /// Total bytes read.
    pub bytes: u64,
    /// Bytes read per interval; bin `i` covers `[i*interval, (i+1)*interval)` since the sink
    /// started. Every series of a report has the same length (up to the stop time).
    pub series: Vec<u64>,
    /// A read error that ended the connection, if any (e.g. a reset).
    pub error: Option<String>,
}

impl ConnReport {
    /// Goodput of this connection over `[from, to)` since the sink started (see
    /// [`goodput_bps`]).
    pub fn goodput_bps(&self, interval: Duration, from: Duration, to: Duration) -> f64 {
        goodput_bps(&self.series, interval, from, to)
    }
}

/// What a [`TcpSink`] saw, per connection in order of acceptance.
#[derive(Debug, Clone, Serialize)]
pub struct SinkReport {
    /// The address the sink listened on.
    pub local: SocketAddr,
    /// Bin length of the series.
    pub interval: Duration,
    /// Time from start to stop.
    pub duration: Duration,
    /// Per connection.
    pub conns: Vec<ConnReport>,
    /// An error that stopped the sink early, if any.
    pub error: Option<String>,
}

impl SinkReport {
    /// Bytes read over all connections.
    pub fn total_bytes(&self) -> u64 {
        self.conns.iter().map(|c| c.bytes).sum()
    }

    /// The connections from `peer`'s IP address.
    pub fn conns_from(&self, peer: IpAddr) -> impl Iterator<Item = &ConnReport> {
        self.conns.iter().filter(move |c| c.peer.ip() == peer)
    }

    /// The bin-by-bin sum of all connections' series.
    pub fn total_series(&self) -> Vec<u64> {
        let n = self.conns.iter().map(|c| c.series.len()).max().unwrap_or(0);
        let mut total = vec![0u64; n];
        for c in &self.conns {
            for (t, b) in total.iter_mut().zip(&c.series) {
                *t += b;
            }
        }
        total
    }
}

#[derive(Debug, Default)]
struct SinkShared {
    accepted: AtomicUsize,
    finished: AtomicUsize,
}

/// A TCP receiver that reads everything from any number of connections and records bytes per
/// interval per connection. Stop it with [`TcpSink::stop`] or [`TcpSink::finish`]; dropping it
/// stops it too (discarding the report).
#[derive(Debug)]
pub struct TcpSink {
    local: SocketAddr,
    waker: Arc<Waker>,
    shared: Arc<SinkShared>,
    thread: Option<JoinHandle<SinkReport>>,
}

struct SinkConn {
    stream: TcpStream,
    report: ConnReport,
}

impl TcpSink {
    /// Starts a sink in `ns` listening on `bind` (port 0 picks a free port: see
    /// [`TcpSink::local_addr`]). It is listening when this returns.
    pub fn start(ns: &Netns, bind: SocketAddr, interval: Duration) -> Result<TcpSink> {
        Self::start_with(ns, SinkOpts::new(bind, interval))
    }

    /// [`TcpSink::start`] with all options.
    pub fn start_with(ns: &Netns, opts: SinkOpts) -> Result<TcpSink> {
        if opts.interval.is_zero() {
            return Err(Error::Invalid("sink interval must be > 0".into()));
        }
        let bind = opts.bind;
        let rcvbuf = opts.rcvbuf;
        let listener = ns.try_run(move || -> Result<TcpListener> {
            let ctx = |what: &str, e| Error::io(format!("sink {bind}: {what}"), e);
            let s = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))
                .map_err(|e| ctx("socket", e))?;
            s.set_reuse_address(true)
                .map_err(|e| ctx("SO_REUSEADDR", e))?;
            if let Some(n) = rcvbuf {
                s.set_recv_buffer_size(n).map_err(|e| ctx("SO_RCVBUF", e))?;
            }
            s.bind(&bind.into()).map_err(|e| ctx("bind", e))?;
            s.listen(1024).map_err(|e| ctx("listen", e))?;
            s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
            Ok(s.into())
        })??;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("sink local address", e))?;
        let waker = Arc::new(Waker::new()?);
        let shared = Arc::new(SinkShared::default());
        let epoch = Instant::now();
        let thread = {
            let waker = Arc::clone(&waker);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("tcp-sink:{local}"))
                .spawn(move || sink_loop(listener, local, opts, epoch, &waker, &shared))
                .map_err(|e| Error::io("spawn sink thread", e))?
        };
        Ok(TcpSink {
            local,
            waker,
            shared,
            thread: Some(thread),
        })
    }

    /// The address the sink listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Stops at once and returns the report. Data still in flight is not counted.
    pub fn stop(mut self) -> SinkReport {
        self.waker.wake();
        join_thread(self.thread.take().expect("sink thread"))
    }

    /// Waits until at least one connection was accepted and every accepted connection has
    /// ended (the sender's FIN read, or an error), or until `timeout`; then stops.
    pub fn finish(self, timeout: Duration) -> SinkReport {
        let deadline = Instant::now() + timeout;
        loop {
            let a = self.shared.accepted.load(Ordering::Acquire);
            let f = self.shared.finished.load(Ordering::Acquire);
            if (a > 0 && f >= a) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.stop()
    }
}

impl Drop for TcpSink {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.waker.wake();
            let _ = t.join();
        }
    }
}

fn bin_of(t: Duration, interval: Duration) -> usize {
    (t.as_nanos() / interval.as_nanos()) as usize
}

fn sink_loop(
    listener: TcpListener,
    local: SocketAddr,
    opts: SinkOpts,
    epoch: Instant,
    waker: &Waker,
    shared: &SinkShared,
) -> SinkReport {
    let interval = opts.interval;
    let mut buf = vec![0u8; opts.read_size.max(1)];
    let mut active: Vec<SinkConn> = Vec::new();
    let mut done: Vec<ConnReport> = Vec::new();
    let mut error = None;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    'outer: loop {
        fds.clear();
        fds.push(pollfd(waker.fd(), libc::POLLIN));
        fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
        fds.extend(
            active
                .iter()
                .map(|c| pollfd(c.stream.as_raw_fd(), libc::POLLIN)),
        );
        if let Err(e) = poll(&mut fds, None) {
            error = Some(format!("poll: {e}"));
            break;
        }
        if fds[0].revents != 0 {
            break;
        }
        if fds[1].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        let at = epoch.elapsed();
                        if let Err(e) = stream.set_nonblocking(true) {
                            error = Some(format!("O_NONBLOCK on accepted socket: {e}"));
                            break 'outer;
                        }
                        let local = stream.local_addr().unwrap_or(local);
                        active.push(SinkConn {
                            stream,
                            report: ConnReport {
                                peer,
                                local,
                                accepted_at: at,
                                first_byte: None,
                                last_byte: None,
                                eof_at: None,
                                bytes: 0,
                                series: Vec::new(),
                                error: None,
                            },
                        });
                        shared.accepted.fetch_add(1, Ordering::Release);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // A connection that died in the accept queue: not fatal.
                    Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                    Err(e) => {
                        error = Some(format!("accept: {e}"));
                        break 'outer;
                    }
                }
            }
        }
        // Read from the ready connections (the ones polled; new ones wait for the next round).
        let mut i = 0;
        let mut k = 2;
        while i < active.len() && k < fds.len() {
            let ready = fds[k].revents != 0;
            k += 1;
            if !ready {
                i += 1;
                continue;
            }
            let c = &mut active[i];
            let mut ended = false;
            // At most 64 reads per round, so that one fast connection cannot starve others.
            for _ in 0..64 {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        c.report.eof_at = Some(epoch.elapsed());
                        ended = true;
                        break;
                    }
                    Ok(n) => {
                        let t = epoch.elapsed();
                        let r = &mut c.report;
                        r.bytes += n as u64;
                        r.first_byte.get_or_insert(t);
                        r.last_byte = Some(t);
                        let b = bin_of(t, interval);
                        if r.series.len() <= b {
                            r.series.resize(b + 1, 0);
                        }
                        r.series[b] += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        c.report.error = Some(e.to_string());
                        ended = true;
                        break;
                    }
                }
            }
            if ended {
                // Dropping the stream closes our side: the sender sees our FIN.
                let c = active.remove(i);
                done.push(c.report);
                shared.finished.fetch_add(1, Ordering::Release);
            } else {
                i += 1;
            }
        }
    }
    let duration = epoch.elapsed();
    done.extend(active.into_iter().map(|c| c.report));
    done.sort_by_key(|c| c.accepted_at);
    let bins = duration.as_nanos().div_ceil(interval.as_nanos()).max(1) as usize;
    for c in &mut done {
        if c.series.len() < bins {
            c.series.resize(bins, 0);
        }
    }
    SinkReport {
        local,
        interval,
        duration,
        conns: done,
        error,
    }
}

// ---------------------------------------------------------------------------------------------
// TCP_INFO.

/// The kernel's `struct tcp_info` (include/uapi/linux/tcp.h, as of Linux 6.x). Older kernels
/// fill a prefix; the rest stays zero.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8, // snd_wscale:4 (low bits), rcv_wscale:4
    flags: u8,  // delivery_rate_app_limited:1, fastopen_client_fail:2
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    rehash: u32,
    total_rto: u16,
    total_rto_recoveries: u16,
    total_rto_time: u32,
}

/// A snapshot of a socket's `TCP_INFO` (times in microseconds, as the kernel reports them).
/// Fields the running kernel does not provide are zero; `len` says how many bytes it filled.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct TcpInfo {
    /// Bytes of `struct tcp_info` the kernel filled.
    pub len: u32,
    /// TCP state (1 = ESTABLISHED, …).
    pub state: u8,
    /// Congestion-avoidance state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// SACK was negotiated.
    pub sack: bool,
    /// Timestamps were negotiated.
    pub timestamps: bool,
    /// Window scaling was negotiated.
    pub window_scaling: bool,
    /// ECN was negotiated.
    pub ecn: bool,
    /// Send window scale.
    pub snd_wscale: u8,
    /// Receive window scale.
    pub rcv_wscale: u8,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Sender MSS.
    pub snd_mss: u32,
    /// Receiver MSS estimate.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    /// Segments lost (estimate).
    pub lost: u32,
    /// Path MTU.
    pub pmtu: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Minimum RTT seen, µs (`u32::MAX` when unknown).
    pub min_rtt_us: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Reordering metric.
    pub reordering: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Segments sent, including pure ACKs and the SYN (`tcpi_segs_out`).
    pub segs_out: u32,
    /// Segments received (`tcpi_segs_in`).
    pub segs_in: u32,
    /// Segments sent carrying data, retransmissions included (`tcpi_data_segs_out`).
    pub data_segs_out: u32,
    /// Segments received carrying data.
    pub data_segs_in: u32,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Data bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Data bytes retransmitted.
    pub bytes_retrans: u64,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Pacing rate, bytes/s.
    pub pacing_rate: u64,
    /// Latest delivery-rate sample, bytes/s.
    pub delivery_rate: u64,
    /// Segments delivered.
    pub delivered: u32,
    /// Segments delivered with CE marks.
    pub delivered_ce: u32,
    /// Time limited by the receive window, µs.
    pub rwnd_limited_us: u64,
    /// Time limited by the send buffer, µs.
    pub sndbuf_limited_us: u64,
    /// Time busy sending, µs.
    pub busy_time_us: u64,
    /// Duplicate SACKs received.
    pub dsack_dups: u32,
    /// Reordering events seen.
    pub reord_seen: u32,
    /// Peer's advertised window after scaling, bytes.
    pub snd_wnd: u32,
    /// Our advertised window after scaling, bytes.
    pub rcv_wnd: u32,
    /// Retransmission timeouts (`tcpi_total_rto`).
    pub total_rto: u16,
}

/// Reads `TCP_INFO` from a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut raw = MaybeUninit::<RawTcpInfo>::zeroed();
    let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: raw is a writable buffer of `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised, and every bit pattern is a valid RawTcpInfo (plain integers).
    let t = unsafe { raw.assume_init() };
    Ok(TcpInfo {
        len,
        state: t.state,
        ca_state: t.ca_state,
        timestamps: t.options & 1 != 0,
        sack: t.options & 2 != 0,
        window_scaling: t.options & 4 != 0,
        ecn: t.options & 8 != 0,
        snd_wscale: t.wscale & 0x0f,
        rcv_wscale: t.wscale >> 4,
        rto_us: t.rto,
        snd_mss: t.snd_mss,
        rcv_mss: t.rcv_mss,
        unacked: t.unacked,
        lost: t.lost,
        pmtu: t.pmtu,
        rtt_us: t.rtt,
        rttvar_us: t.rttvar,
        min_rtt_us: t.min_rtt,
        snd_ssthresh: t.snd_ssthresh,
        snd_cwnd: t.snd_cwnd,
        reordering: t.reordering,
        total_retrans: t.total_retrans,
        segs_out: t.segs_out,
        segs_in: t.segs_in,
        data_segs_out: t.data_segs_out,
        data_segs_in: t.data_segs_in,
        bytes_acked: t.bytes_acked,
        bytes_received: t.bytes_received,
        bytes_sent: t.bytes_sent,
        bytes_retrans: t.bytes_retrans,
        notsent_bytes: t.notsent_bytes,
        pacing_rate: t.pacing_rate,
        delivery_rate: t.delivery_rate,
        delivered: t.delivered,
        delivered_ce: t.delivered_ce,
        rwnd_limited_us: t.rwnd_limited,
        sndbuf_limited_us: t.sndbuf_limited,
        busy_time_us: t.busy_time,
        dsack_dups: t.dsack_dups,
        reord_seen: t.reord_seen,
        snd_wnd: t.snd_wnd,
        rcv_wnd: t.rcv_wnd,
        total_rto: t.total_rto,
    })
}

// ---------------------------------------------------------------------------------------------
// TCP sender.

/// Settings of one [`TcpSender`] session. Build with [`SenderOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize)]
pub struct SenderOpts {
    /// Source address to bind (an alias); `None`: the kernel chooses.
    pub src: Option<IpAddr>,
    /// Where to connect.
    pub dst: SocketAddr,
    /// How long to write.
    pub duration: Duration,
    /// Congestion control, set with `TCP_CONGESTION` ("cubic", "reno", "bbr", …).
    pub cc: String,
    /// `TCP_MAXSEG` before connecting (clamps the MSS we announce and use).
    pub mss: Option<u32>,
    /// `SO_SNDBUF` (the kernel doubles it; turns send-buffer autotuning off).
    pub sndbuf: Option<usize>,
    /// `SO_RCVBUF`.
    pub rcvbuf: Option<usize>,
    /// `TCP_NODELAY`.
    pub nodelay: bool,
    /// `TCP_NOTSENT_LOWAT`: limits unsent data queued in the kernel (useful at low rates,
    /// where a large send buffer would keep sending long after `duration`).
    pub notsent_lowat: Option<u32>,
    /// Bytes per `send`.
    pub write_size: usize,
    /// Longest wait for the connection to be established.
    pub connect_timeout: Duration,
    /// After `duration`: longest wait for the peer to read everything and close.
    pub drain_timeout: Duration,
}

impl SenderOpts {
    /// Options with defaults: no source binding, kernel MSS and buffers, Nagle on, 128 KiB
    /// writes, 3 s connect timeout, 5 s drain timeout.
    pub fn new(dst: SocketAddr, duration: Duration, cc: &str) -> SenderOpts {
        SenderOpts {
            src: None,
            dst,
            duration,
            cc: cc.to_string(),
            mss: None,
            sndbuf: None,
            rcvbuf: None,
            nodelay: false,
            notsent_lowat: None,
            write_size: 128 * 1024,
            connect_timeout: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// What a [`TcpSender`] did.
#[derive(Debug, Clone, Serialize)]
pub struct SenderReport {
    /// Local address of the connection.
    pub local: SocketAddr,
    /// Peer address.
    pub peer: SocketAddr,
    /// Congestion control in use, as read back from the socket.
    pub cc: String,
    /// Bytes accepted by `send` during `duration`.
    pub bytes_written: u64,
    /// Time spent writing (≈ `duration`, less if an error ended it).
    pub write_time: Duration,
    /// The peer read everything and closed before the drain timeout.
    pub drained: bool,
    /// Time from the end of writing until the peer closed (or the drain timeout).
    pub drain_time: Duration,
    /// Segments sent (`tcpi_segs_out`, final).
    pub segs_out: u32,
    /// Data segments sent (`tcpi_data_segs_out`, final).
    pub data_segs_out: u32,
    /// Segments retransmitted (`tcpi_total_retrans`, final).
    pub retrans: u32,
    /// Smoothed RTT at the end of writing.
    pub rtt: Duration,
    /// Minimum RTT seen.
    pub min_rtt: Duration,
    /// `TCP_INFO` when writing stopped.
    pub info_at_deadline: TcpInfo,
    /// `TCP_INFO` after the drain.
    pub info_final: TcpInfo,
    /// An error that ended the transfer early, if any.
    pub error: Option<String>,
}

/// A bulk TCP sender: writes as fast as the socket allows for a fixed duration.
#[derive(Debug)]
pub struct TcpSender {
    local: SocketAddr,
    stop: Arc<Waker>,
    abort: Arc<Waker>,
    thread: Option<JoinHandle<SenderReport>>,
}

impl TcpSender {
    /// Connects from `ns` with the given settings (errors in setting up or connecting are
    /// returned here) and starts writing on a background thread.
    pub fn start(ns: &Netns, opts: SenderOpts) -> Result<TcpSender> {
        let o = opts.clone();
        let sock = ns.try_run(move || connect_sender(&o))??;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Invalid("sender socket has no local address".into()))?;
        let stop = Arc::new(Waker::new()?);
        let abort = Arc::new(Waker::new()?);
        let thread = {
            let (stop, abort) = (Arc::clone(&stop), Arc::clone(&abort));
            std::thread::Builder::new()
                .name(format!("tcp-sender:{local}"))
                .spawn(move || sender_loop(sock, local, &opts, &stop, &abort))
                .map_err(|e| Error::io("spawn sender thread", e))?
        };
        Ok(TcpSender {
            local,
            stop,
            abort,
            thread: Some(thread),
        })
    }

    /// The connection's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits until the sender is done (duration elapsed and drained) and returns its report.
    pub fn join(mut self) -> SenderReport {
        join_thread(self.thread.take().expect("sender thread"))
    }

    /// Stops writing now (then drains as usual) and returns the report.
    pub fn stop(mut self) -> SenderReport {
        self.stop.wake();
        join_thread(self.thread.take().expect("sender thread"))
    }
}

impl Drop for TcpSender {
    /// Aborts at once (no drain) and waits for the thread.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.abort.wake();
            let _ = t.join();
        }
    }
}

fn available_cc() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn connect_sender(o: &SenderOpts) -> Result<Socket> {
    let dst = o.dst;
    let ctx = |what: &str, e| Error::io(format!("sender to {dst}: {what}"), e);
    if o.write_size == 0 {
        return Err(Error::Invalid("sender write_size must be > 0".into()));
    }
    let s = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| ctx("socket", e))?;
    s.set_tcp_congestion(o.cc.as_bytes()).map_err(|e| {
        ctx(
            &format!("TCP_CONGESTION {:?} (available: {})", o.cc, available_cc()),
            e,
        )
    })?;
    if let Some(mss) = o.mss {
        s.set_tcp_mss(mss)
            .map_err(|e| ctx(&format!("TCP_MAXSEG {mss}"), e))?;
    }
    if let Some(n) = o.sndbuf {
        s.set_send_buffer_size(n).map_err(|e| ctx("SO_SNDBUF", e))?;
    }
    if let Some(n) = o.rcvbuf {
        s.set_recv_buffer_size(n).map_err(|e| ctx("SO_RCVBUF", e))?;
    }
    s.set_tcp_nodelay(o.nodelay)
        .map_err(|e| ctx("TCP_NODELAY", e))?;
    if let Some(n) = o.notsent_lowat {
        s.set_tcp_notsent_lowat(n)
            .map_err(|e| ctx("TCP_NOTSENT_LOWAT", e))?;
    }
    if let Some(src) = o.src {
        s.bind(&SockAddr::from(SocketAddr::new(src, 0)))
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    s.connect_timeout(&dst.into(), o.connect_timeout)
        .map_err(|e| ctx("connect", e))?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok(s)
}

fn sender_loop(
    sock: Socket,
    local: SocketAddr,
    o: &SenderOpts,
    stop: &Waker,
    abort: &Waker,
) -> SenderReport {
    let peer = o.dst;
    let cc = sock
        .tcp_congestion()
        .map(|v| {
            String::from_utf8_lossy(&v)
                .trim_end_matches('\0')
                .to_string()
        })
        .unwrap_or_default();
    let buf: Vec<u8> = (0..o.write_size.max(1)).map(|i| (i % 251) as u8).collect();
    let start = Instant::now();
    let deadline = start + o.duration;
    let mut written: u64 = 0;
    let mut error = None;
    let fd = sock.as_raw_fd();
    'write: loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let mut fds = [
            pollfd(fd, libc::POLLOUT),
            pollfd(stop.fd(), libc::POLLIN),
            pollfd(abort.fd(), libc::POLLIN),
        ];
        if let Err(e) = poll(&mut fds, Some(deadline - now)) {
            error = Some(format!("poll: {e}"));
            break;
        }
        if fds[1].revents != 0 || fds[2].revents != 0 {
            break;
        }
        if fds[0].revents == 0 {
            continue;
        }
        loop {
            match sock.send_with_flags(&buf, libc::MSG_NOSIGNAL) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(format!("send: {e}"));
                    break 'write;
                }
            }
            if Instant::now() >= deadline {
                break 'write;
            }
        }
    }
    let write_time = start.elapsed();
    let info_at_deadline = tcp_info(sock.as_fd()).unwrap_or_default();

    // Drain: shut our side, then wait for the peer's FIN (it reads everything first).
    // A stop request does not cut the drain short; only an abort (drop) does.
    let drain_start = Instant::now();
    let mut drained = false;
    if error.is_none() {
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let drain_deadline = drain_start + o.drain_timeout;
        let mut scratch = [MaybeUninit::<u8>::uninit(); 4096];
        'drain: loop {
            let now = Instant::now();
            if now >= drain_deadline {
                break;
            }
            let mut fds = [pollfd(fd, libc::POLLIN), pollfd(abort.fd(), libc::POLLIN)];
            if poll(&mut fds, Some(drain_deadline - now)).is_err() || fds[1].revents != 0 {
                break;
            }
            if fds[0].revents == 0 {
                continue;
            }
            loop {
                match sock.recv(&mut scratch) {
                    Ok(0) => {
                        drained = true;
                        break 'drain;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        error = Some(format!("drain: {e}"));
                        break 'drain;
                    }
                }
            }
        }
    }
    let drain_time = drain_start.elapsed();
    let info_final = tcp_info(sock.as_fd()).unwrap_or(info_at_deadline);
    drop(sock);
    SenderReport {
        local,
        peer,
        cc,
        bytes_written: written,
        write_time,
        drained,
        drain_time,
        segs_out: info_final.segs_out,
        data_segs_out: info_final.data_segs_out,
        retrans: info_final.total_retrans,
        rtt: Duration::from_micros(u64::from(info_at_deadline.rtt_us)),
        min_rtt: Duration::from_micros(u64::from(
            info_final.min_rtt_us.min(info_at_deadline.min_rtt_us),
        )),
        info_at_deadline,
        info_final,
        error,
    }
}

// ---------------------------------------------------------------------------------------------
// ICMP echo.

/// Options of [`icmp_ping_with`].
#[derive(Debug, Clone)]
pub struct PingOpts {
    /// Number of echo requests.
    pub count: usize,
    /// How long to wait for each reply.
    pub timeout: Duration,
    /// Least time between two requests (a request is never sent before the previous one got
    /// its reply or timed out).
    pub interval: Duration,
    /// Bytes of payload after the 8-byte ICMP header.
    pub payload_len: usize,
    /// Source address to bind; `None`: the kernel chooses.
    pub src: Option<Ipv4Addr>,
}

impl PingOpts {
    /// `count` requests, each waited for up to `timeout`, back to back, 56 bytes of payload.
    pub fn new(count: usize, timeout: Duration) -> PingOpts {
        PingOpts {
            count,
            timeout,
            interval: Duration::ZERO,
            payload_len: 56,
            src: None,
        }
    }
}

/// Sends `count` ICMP echo requests from `ns` to `dst`, one after another, and returns for
/// each the round-trip time, or `None` if no reply came within `timeout`.
pub fn icmp_ping(
    ns: &Netns,
    dst: Ipv4Addr,
    count: usize,
    timeout: Duration,
) -> Result<Vec<Option<Duration>>> {
    icmp_ping_with(ns, dst, &PingOpts::new(count, timeout))
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        sum += u32::from(*b) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo request with the checksum filled in.
pub fn build_echo_request(id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + payload.len());
    p.extend_from_slice(&[8, 0, 0, 0]);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(payload);
    let c = inet_checksum(&p);
    p[2..4].copy_from_slice(&c.to_be_bytes());
    p
}

/// If `pkt` (an IPv4 datagram as a raw socket returns it) is a valid echo reply from `from`,
/// returns its `(id, seq)`.
pub fn parse_echo_reply(pkt: &[u8], from: Ipv4Addr) -> Option<(u16, u16)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if ihl < 20 || pkt.len() < ihl + 8 || pkt[9] != libc::IPPROTO_ICMP as u8 {
        return None;
    }
    if Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]) != from {
        return None;
    }
    let icmp = &pkt[ihl..];
    if icmp[0] != 0 || icmp[1] != 0 || inet_checksum(icmp) != 0 {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

fn ping_id() -> u16 {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) as u32;
    ((std::process::id() ^ n.wrapping_mul(0x9e37)) & 0xffff) as u16
}

/// [`icmp_ping`] with all options.
pub fn icmp_ping_with(ns: &Netns, dst: Ipv4Addr, o: &PingOpts) -> Result<Vec<Option<Duration>>> {
    let o = o.clone();
    ns.try_run(move || ping_inner(dst, &o))?
}

fn ping_inner(dst: Ipv4Addr, o: &PingOpts) -> Result<Vec<Option<Duration>>> {
    let ctx = |what: &str, e| Error::io(format!("ping {dst}: {what}"), e);
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
        .map_err(|e| ctx("raw ICMP socket", e))?;
    // Only echo replies (type 0) reach the socket: ICMP_FILTER's mask drops the types set.
    const SOL_RAW: libc::c_int = 255;
    const ICMP_FILTER: libc::c_int = 1;
    let mask: u32 = !1u32;
    // SAFETY: passes a valid u32 of the given size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            SOL_RAW,
            ICMP_FILTER,
            (&mask as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        );
    }
    if let Some(src) = o.src {
        s.bind(&SockAddr::from(SocketAddr::new(IpAddr::V4(src), 0)))
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    let to = SockAddr::from(SocketAddr::new(IpAddr::V4(dst), 0));
    let id = ping_id();
    let payload: Vec<u8> = (0..o.payload_len).map(|i| (i & 0xff) as u8).collect();
    let mut results = Vec::with_capacity(o.count);
    let mut buf = [MaybeUninit::<u8>::uninit(); 65536];
    let mut next_send = Instant::now();
    for seq in 0..o.count {
        let now = Instant::now();
        if next_send > now {
            std::thread::sleep(next_send - now);
        }
        let seq16 = seq as u16;
        let pkt = build_echo_request(id, seq16, &payload);
        let sent = Instant::now();
        next_send = sent + o.interval;
        s.send_to(&pkt, &to).map_err(|e| ctx("send", e))?;
        let deadline = sent + o.timeout;
        let mut rtt = None;
        'wait: loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut fds = [pollfd(s.as_raw_fd(), libc::POLLIN)];
            poll(&mut fds, Some(deadline - now)).map_err(|e| ctx("poll", e))?;
            loop {
                match s.recv(&mut buf) {
                    Ok(n) => {
                        let at = Instant::now();
                        // SAFETY: recv initialised the first n bytes.
                        let pkt: &[u8] =
                            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), n) };
                        if parse_echo_reply(pkt, dst) == Some((id, seq16)) {
                            rtt = Some(at - sent);
                            break 'wait;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ctx("recv", e)),
                }
            }
        }
        results.push(rtt);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn goodput_whole_bins() {
        // 1 s bins of 125_000 bytes = 1 Mbit/s each.
        let s = [125_000, 125_000, 250_000, 250_000];
        assert_eq!(goodput_bps(&s, S, Duration::ZERO, 4 * S), 1_500_000.0);
        assert_eq!(goodput_bps(&s, S, 2 * S, 4 * S), 2_000_000.0);
        // Window past the end is clipped to the series.
        assert_eq!(goodput_bps(&s, S, 2 * S, 10 * S), 2_000_000.0);
        assert_eq!(goodput_bps(&s, S, 5 * S, 10 * S), 0.0);
        assert_eq!(goodput_bps(&[], S, Duration::ZERO, S), 0.0);
    }

    #[test]
    fn goodput_partial_bins() {
        let s = [100, 200];
        // [0.5, 1.5): half of bin 0 (50 bytes) + half of bin 1 (100 bytes) = 150 B in 1 s.
        let g = goodput_bps(
            &s,
            S,
            Duration::from_millis(500),
            Duration::from_millis(1500),
        );
        assert!((g - 1200.0).abs() < 1e-9, "{g}");
        // 100 ms bins.
        let s = [10u64; 10];
        let g = goodput_bps(&s, Duration::from_millis(100), Duration::ZERO, S);
        assert!((g - 800.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn checksum_and_echo_roundtrip() {
        // RFC 1071 example: 0001 f203 f4f5 f6f7 sums to ddf2, checksum 220d.
        assert_eq!(
            inet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        let req = build_echo_request(0x1234, 7, b"abc");
        assert_eq!(inet_checksum(&req), 0);
        assert_eq!(&req[..2], &[8, 0]);
        // Make it a reply inside an IPv4 header from 10.0.0.2.
        let mut reply = req.clone();
        reply[0] = 0;
        reply[2] = 0;
        reply[3] = 0;
        let c = inet_checksum(&reply);
        reply[2..4].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        ip.extend_from_slice(&reply);
        let from = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(parse_echo_reply(&ip, from), Some((0x1234, 7)));
        assert_eq!(parse_echo_reply(&ip, Ipv4Addr::new(10, 0, 0, 3)), None);
        ip[25] ^= 1; // corrupt the ICMP part
        assert_eq!(parse_echo_reply(&ip, from), None);
        assert_eq!(parse_echo_reply(&ip[..24], from), None);
    }

    #[test]
    fn raw_tcp_info_layout() {
        // Offsets from include/uapi/linux/tcp.h.
        assert_eq!(std::mem::offset_of!(RawTcpInfo, rto), 8);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, total_retrans), 100);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, segs_out), 136);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::size_of::<RawTcpInfo>(), 248);
    }
}
