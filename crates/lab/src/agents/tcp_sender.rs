//! The bulk TCP sender: [`TcpSender`] connects with explicit TCP settings (congestion
//! control set with `TCP_CONGESTION`, MSS with `TCP_MAXSEG`, buffer sizes, `TCP_NODELAY`,
//! `TCP_NOTSENT_LOWAT`, `IP_TOS`), writes as fast as the socket accepts for a fixed duration
//! (or until it has written a fixed number of bytes, a file transfer's size), then shuts its side down and waits (bounded) until the sink has read everything and
//! closed, so that the final `TCP_INFO` accounts for the whole transfer. With `info_every`
//! it also samples `TCP_INFO` while writing (smoothed RTT, congestion window,
//! retransmissions, CE-marked deliveries) at that period, on the writing thread's own wake-ups.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::tcp_info::{tcp_info, TcpInfo};
use crate::sys::{poll, pollfd, SenderThread, Waker};
use crate::topo::Netns;
use crate::{Error, Result};

/// Settings of one [`TcpSender`] session. Build with [`SenderOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SenderOpts {
    /// Source address to bind (an alias); `None`: the kernel chooses.
    pub src: Option<IpAddr>,
    /// Where to connect.
    pub dst: SocketAddr,
    /// How long to write, from the moment the connection is established.
    pub duration: Duration,
    /// Stop writing after this many bytes (a transfer of a fixed size; `duration` is then
    /// its time limit). `None`: write for `duration`.
    pub bytes: Option<u64>,
    /// The latest instant to write until, whenever the connection was established (a
    /// plan's stop time: a session whose SYN was lost still stops on time). `None`: only
    /// `duration` counts.
    #[serde(skip)]
    pub until: Option<Instant>,
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
    /// IPv4 TOS byte (DSCP << 2; the kernel keeps the ECN bits to itself).
    pub tos: Option<u8>,
    /// Sample `TCP_INFO` this often while writing ([`SenderReport::samples`]).
    pub info_every: Option<Duration>,
    /// The origin of the samples' times (default: when writing starts).
    #[serde(skip)]
    pub info_origin: Option<Instant>,
    /// Bytes per `send`.
    pub write_size: usize,
    /// Longest wait for the connection to be established (never past `until`).
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
            bytes: None,
            until: None,
            cc: cc.to_string(),
            mss: None,
            sndbuf: None,
            rcvbuf: None,
            nodelay: false,
            notsent_lowat: None,
            tos: None,
            info_every: None,
            info_origin: None,
            write_size: 128 * 1024,
            connect_timeout: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// What a [`TcpSender`] did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SenderReport {
    /// Local address of the connection.
    pub local: SocketAddr,
    /// Peer address.
    pub peer: SocketAddr,
    /// Congestion control in use, as read back from the socket.
    pub cc: String,
    /// Bytes accepted by `send` during `duration` (at most `bytes`).
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
    /// `TCP_INFO` sampled while writing (with `info_every`).
    pub samples: Vec<InfoSample>,
    /// An error that ended the transfer early, if any.
    pub error: Option<String>,
}

/// One `TCP_INFO` sample taken while writing.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct InfoSample {
    /// Time since the origin (`info_origin`, or the start of writing), µs.
    pub t_us: u64,
    /// Smoothed RTT, µs (`tcpi_rtt`).
    pub srtt_us: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Segments retransmitted so far.
    pub retrans: u32,
    /// Segments delivered with a CE mark so far.
    pub delivered_ce: u32,
}

/// A bulk TCP sender: writes as fast as the socket allows for a fixed duration.
#[derive(Debug)]
pub struct TcpSender {
    local: SocketAddr,
    thread: SenderThread<SenderReport>,
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
        let thread = SenderThread::spawn(
            format!("tcp-sender:{local}"),
            "sender",
            move |stop, abort| sender_loop(sock, local, &opts, stop, abort),
        )?;
        Ok(TcpSender { local, thread })
    }

    /// The connection's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits until the sender is done (duration elapsed and drained) and returns its report.
    pub fn join(self) -> SenderReport {
        self.thread.join()
    }

    /// Whether the sender is done ([`TcpSender::join`] returns at once).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops writing now (then drains as usual) and returns the report.
    pub fn stop(self) -> SenderReport {
        self.thread.stop()
    }
}

/// The congestion control a TCP socket uses, as the kernel reports it ("" if it will not).
pub(super) fn congestion_in_use(sock: &Socket) -> String {
    sock.tcp_congestion()
        .map(|v| {
            String::from_utf8_lossy(&v)
                .trim_end_matches('\0')
                .to_string()
        })
        .unwrap_or_default()
}

/// After writing: shuts the sending side and waits up to `timeout` for the peer's FIN (the
/// peer reads everything first), reading and discarding what it sends. A stop request does
/// not cut this short; only `abort` does. `Ok(true)`: the peer closed in time.
pub(super) fn drain(
    sock: &Socket,
    timeout: Duration,
    abort: &Waker,
) -> std::result::Result<bool, String> {
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + timeout;
    let mut scratch = [MaybeUninit::<u8>::uninit(); 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        let mut fds = [
            pollfd(sock.as_raw_fd(), libc::POLLIN),
            pollfd(abort.fd(), libc::POLLIN),
        ];
        poll(&mut fds, Some(deadline - now)).map_err(|e| format!("drain poll: {e}"))?;
        if fds[1].revents != 0 {
            return Ok(false);
        }
        if fds[0].revents == 0 {
            continue;
        }
        loop {
            match sock.recv(&mut scratch) {
                Ok(0) => return Ok(true),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("drain: {e}")),
            }
        }
    }
}

/// Refuse a congestion control the kernel does not offer (read from
/// `tcp_available_congestion_control`; reno, cubic and bbr where that cannot be read),
/// before a run rather than at its first connection.
pub fn check_cc(cc: &str) -> Result<()> {
    let available = available_cc();
    let known: Vec<&str> = match available.as_str() {
        "?" => vec!["reno", "cubic", "bbr"],
        a => a.split_whitespace().collect(),
    };
    if known.contains(&cc) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "--cc {cc}: expected one of {} (the congestion controls this kernel offers)",
        known.join(", ")
    )))
}

pub(super) fn available_cc() -> String {
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
    if o.bytes == Some(0) {
        return Err(Error::Invalid("sender bytes must be > 0".into()));
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
    if let Some(t) = o.tos {
        s.set_tos_v4(u32::from(t)).map_err(|e| ctx("IP_TOS", e))?;
    }
    if let Some(src) = o.src {
        s.bind(&SockAddr::from(SocketAddr::new(src, 0)))
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    // no later than `until`: a session not connected by its stop time is over
    let timeout = o.until.map_or(o.connect_timeout, |u| {
        o.connect_timeout
            .min(u.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1))
    });
    s.connect_timeout(&dst.into(), timeout)
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
    let cc = congestion_in_use(&sock);
    let buf: Vec<u8> = (0..o.write_size.max(1)).map(|i| (i % 251) as u8).collect();
    let start = Instant::now();
    let deadline = o
        .until
        .map_or(start + o.duration, |u| u.min(start + o.duration));
    let mut written: u64 = 0;
    let mut error = None;
    let fd = sock.as_raw_fd();
    let origin = o.info_origin.unwrap_or(start);
    let mut samples = Vec::new();
    let mut next_sample = o.info_every.map(|_| start);
    'write: loop {
        let mut now = Instant::now();
        if let (Some(at), Some(every)) = (next_sample, o.info_every) {
            if now >= at {
                if let Ok(i) = tcp_info(sock.as_fd()) {
                    samples.push(InfoSample {
                        t_us: now.saturating_duration_since(origin).as_micros() as u64,
                        srtt_us: i.rtt_us,
                        cwnd: i.snd_cwnd,
                        retrans: i.total_retrans,
                        delivered_ce: i.delivered_ce,
                    });
                }
                // the next period after now (a late wake-up skips samples, never bunches them)
                let mut t = at + every;
                while t <= now {
                    t += every;
                }
                next_sample = Some(t);
                now = Instant::now();
            }
        }
        if now >= deadline {
            break;
        }
        let wake = next_sample.map_or(deadline, |t| t.min(deadline));
        let mut fds = [
            pollfd(fd, libc::POLLOUT),
            pollfd(stop.fd(), libc::POLLIN),
            pollfd(abort.fd(), libc::POLLIN),
        ];
        if let Err(e) = poll(&mut fds, Some(wake.saturating_duration_since(now))) {
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
            let chunk = o
                .bytes
                .map_or(buf.len(), |b| (b - written).min(buf.len() as u64) as usize);
            match sock.send_with_flags(&buf[..chunk], libc::MSG_NOSIGNAL) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(format!("send: {e}"));
                    break 'write;
                }
            }
            let now = Instant::now();
            if now >= deadline || o.bytes.is_some_and(|b| written >= b) {
                break 'write;
            }
            if next_sample.is_some_and(|t| now >= t) {
                continue 'write;
            }
        }
    }
    let write_time = start.elapsed();
    let info_at_deadline = tcp_info(sock.as_fd()).unwrap_or_default();

    let drain_start = Instant::now();
    let mut drained = false;
    if error.is_none() {
        match drain(&sock, o.drain_timeout, abort) {
            Ok(d) => drained = d,
            Err(e) => error = Some(e),
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
        samples,
        error,
    }
}
