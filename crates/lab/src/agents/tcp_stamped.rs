//! Seed 004's TCP measurement tool (§3.2): a rate-limited TCP stream of fixed-size records,
//! each stamped by the sender with its local time `t` and by the receiver with its own `T`,
//! the input of [`crate::stats::skew`] (one-way delay, jitter, bandwidth under clock skew).
//!
//! * [`StampedSender`] paces its writes to `rate_bps` (the seed's senders are "restricted to
//!   a maximum bandwidth of 2, 4, 5 and 10 Mbit/s" by the application, which sleeps between
//!   writes): record `i` is due at `start + i·record_len·8/rate_bps` on the monotonic clock,
//!   an absolute schedule computed in integers, so errors never accumulate. The thread sleeps
//!   in `poll` (ns timeout, 1 ns timer slack) on the stop signals until a record is due. A
//!   record that falls due while the previous one is still being written goes out right
//!   after it: a sender that falls behind catches up, it never skips a sequence number.
//! * Record layout (`record_len` bytes, default 1000, 20..=65536): bytes 0..4 the magic
//!   `b"WTSR"`, 4..12 the sequence number (u64, big-endian, from 0), 12..20 the send time
//!   (i64 ns since the Unix epoch, `CLOCK_REALTIME`, big-endian) read immediately before the
//!   first `send` of that record; the rest zero.
//! * `TCP_NOTSENT_LOWAT` is set to `2·record_len`: the kernel then accepts a write (and
//!   reports the socket writable) only while less than two records wait unsent, so a stamp
//!   is taken close to when TCP can actually send the record instead of seconds before it,
//!   behind a send buffer full of older records. `TCP_NODELAY` is on by default, so that
//!   Nagle's algorithm does not hold a record back for up to a round trip.
//! * [`StampedSink`] accepts one connection, cuts the byte stream into records and stamps
//!   each with `CLOCK_REALTIME` when the `read` that completed it returned: the
//!   *application-level* arrival, which includes TCP's retransmission and head-of-line
//!   blocking delays, as the seed's tool measured. Records completed by one `read` share its
//!   stamp. A record with a wrong magic counts in `bad_records` and is otherwise skipped.
//!
//! Invariants: records are written whole and in sequence; a record cut short by the end of
//! the run or a stop is not counted as sent (its bytes are in `bytes_sent`, and the sink
//! reports them as `trailing_bytes`). Every wait is bounded or interruptible; no panics.

use std::io::{self, Read as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use weir_io::clock::{monotonic_ns, realtime_ns, set_timer_slack_1ns};

use super::tcp_info::{tcp_info, TcpInfo};
use super::tcp_sender::{available_cc, congestion_in_use, drain};
use crate::stats::skew::Record;
use crate::sys::{poll, pollfd, setsockopt_int, SenderThread, Waker, Worker};
use crate::topo::Netns;
use crate::{Error, Result};

const MAGIC: [u8; 4] = *b"WTSR";
/// Bytes of magic, sequence number and send time at the start of every record.
const HEADER_LEN: usize = 20;
const MAX_RECORD_LEN: usize = 65_536;

/// Writes the header of record `seq` sent at `t_ns` into `buf` (at least [`HEADER_LEN`]).
fn encode_header(buf: &mut [u8], seq: u64, t_ns: i64) {
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&t_ns.to_be_bytes());
}

/// `(seq, t_ns)` of a record header; `None` if short or the magic is wrong.
fn decode_header(buf: &[u8]) -> Option<(u64, i64)> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    if h[0..4] != MAGIC {
        return None;
    }
    let seq = u64::from_be_bytes(h[4..12].try_into().ok()?);
    let t = i64::from_be_bytes(h[12..20].try_into().ok()?);
    Some((seq, t))
}

fn check_record_len(len: usize) -> Result<()> {
    if (HEADER_LEN..=MAX_RECORD_LEN).contains(&len) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "stamped TCP record_len {len} bytes (want {HEADER_LEN}..={MAX_RECORD_LEN}: the \
             header is {HEADER_LEN} bytes)"
        )))
    }
}

/// `EAGAIN` or `EINTR`: try again after the next wait.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Settings of a [`StampedSender`]. Build with [`StampedSenderOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StampedSenderOpts {
    /// Source address to bind (an alias); `None`: the kernel chooses.
    pub src: Option<IpAddr>,
    /// Where to connect (the [`StampedSink`]).
    pub dst: SocketAddr,
    /// Application rate, bit/s of records (TCP/IP headers not counted); > 0.
    pub rate_bps: u64,
    /// Bytes per record, 20..=65536 (default 1000).
    pub record_len: usize,
    /// Records due within this time after the start are written.
    pub duration: Duration,
    /// Congestion control, set with `TCP_CONGESTION` ("cubic", "reno", "bbr", …).
    pub cc: String,
    /// IPv4 TOS / IPv6 traffic class byte (DSCP << 2), set before connecting.
    pub tos: Option<u8>,
    /// `TCP_NODELAY` (default on: Nagle would delay a record by up to a round trip).
    pub nodelay: bool,
    /// Longest wait for the connection to be established (default 3 s).
    pub connect_timeout: Duration,
    /// After writing: longest wait for the peer to read everything and close (default 5 s).
    pub drain_timeout: Duration,
}

impl StampedSenderOpts {
    /// `rate_bps` of 1000-byte records to `dst` for `duration` with congestion control `cc`;
    /// no source binding or TOS, `TCP_NODELAY` on, 3 s connect and 5 s drain timeouts.
    pub fn new(dst: SocketAddr, rate_bps: u64, duration: Duration, cc: &str) -> Self {
        StampedSenderOpts {
            src: None,
            dst,
            rate_bps,
            record_len: 1000,
            duration,
            cc: cc.to_string(),
            tos: None,
            nodelay: true,
            connect_timeout: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(5),
        }
    }

    /// Checks the options.
    pub fn validate(&self) -> Result<()> {
        if self.rate_bps == 0 {
            return Err(Error::Invalid(
                "stamped TCP sender rate must be > 0 bit/s".into(),
            ));
        }
        check_record_len(self.record_len)?;
        if self.cc.is_empty() {
            return Err(Error::Invalid(
                "stamped TCP sender needs a congestion control (cc), e.g. \"cubic\"".into(),
            ));
        }
        if let Some(src) = self.src {
            if src.is_ipv4() != self.dst.is_ipv4() {
                return Err(Error::Invalid(format!(
                    "stamped TCP source {src} and destination {} are of different families",
                    self.dst
                )));
            }
        }
        Ok(())
    }

    /// Offset of record `i`'s due time from the start, ns (exact integer schedule).
    fn due_offset_ns(&self, i: u64) -> u128 {
        u128::from(i) * self.record_len as u128 * 8 * 1_000_000_000 / u128::from(self.rate_bps)
    }
}

/// What a [`StampedSender`] did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StampedSenderReport {
    /// Local address of the connection.
    pub local: SocketAddr,
    /// Peer address.
    pub peer: SocketAddr,
    /// Congestion control in use, as read back from the socket.
    pub cc: String,
    /// Whole records written (sequence numbers `0..records_sent`).
    pub records_sent: u64,
    /// Bytes accepted by `send` (a record cut short at the end included).
    pub bytes_sent: u64,
    /// Records whose write began more than one record period after their due time.
    pub late_records: u64,
    /// Largest delay of a write's start behind its due time.
    pub max_late: Duration,
    /// Time spent writing (≈ `duration`, less if stopped or an error ended it).
    pub write_time: Duration,
    /// The peer read everything and closed before the drain timeout.
    pub drained: bool,
    /// `TCP_INFO` at the end (after the drain); `None` if the kernel refused it.
    pub tcp_info: Option<TcpInfo>,
    /// Errors met (an error ends the writing).
    pub errors: Vec<String>,
}

/// A paced TCP sender of stamped records (see the module documentation).
#[derive(Debug)]
pub struct StampedSender {
    local: SocketAddr,
    thread: SenderThread<StampedSenderReport>,
}

impl StampedSender {
    /// Validates `opts`, connects from `ns` (errors in setting up or connecting are returned
    /// here) and starts writing on a background thread.
    pub fn start(ns: &Netns, opts: StampedSenderOpts) -> Result<StampedSender> {
        opts.validate()?;
        let o = opts.clone();
        let sock = ns.try_run(move || connect(&o))??;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Invalid("stamped sender socket has no local address".into()))?;
        let thread = SenderThread::spawn(
            format!("tcp-stamped:{local}"),
            "stamped sender",
            move |stop, abort| sender_loop(&sock, local, &opts, stop, abort),
        )?;
        Ok(StampedSender { local, thread })
    }

    /// The connection's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether the sender is done ([`StampedSender::join`] returns at once).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until the sender is done (duration elapsed and drained) and returns its report.
    pub fn join(self) -> StampedSenderReport {
        self.thread.join()
    }

    /// Stops writing now (a record in progress is cut short), drains as usual, and returns
    /// the report.
    pub fn stop(self) -> StampedSenderReport {
        self.thread.stop()
    }
}

fn connect(o: &StampedSenderOpts) -> Result<Socket> {
    let dst = o.dst;
    let ctx = |what: &str, e| Error::io(format!("stamped sender to {dst}: {what}"), e);
    let s = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| ctx("socket", e))?;
    s.set_tcp_congestion(o.cc.as_bytes()).map_err(|e| {
        ctx(
            &format!("TCP_CONGESTION {:?} (available: {})", o.cc, available_cc()),
            e,
        )
    })?;
    if let Some(t) = o.tos {
        let (level, name) = if dst.is_ipv6() {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        setsockopt_int(s.as_raw_fd(), level, name, libc::c_int::from(t))
            .map_err(|e| ctx("IP_TOS", e))?;
    }
    s.set_tcp_nodelay(o.nodelay)
        .map_err(|e| ctx("TCP_NODELAY", e))?;
    let lowat = (2 * o.record_len).min(u32::MAX as usize) as u32;
    s.set_tcp_notsent_lowat(lowat)
        .map_err(|e| ctx("TCP_NOTSENT_LOWAT", e))?;
    if let Some(src) = o.src {
        s.bind(&SockAddr::from(SocketAddr::new(src, 0)))
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    // socket2: a non-blocking connect, then poll for at most the timeout.
    s.connect_timeout(&dst.into(), o.connect_timeout)
        .map_err(|e| ctx("connect", e))?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok(s)
}

/// Why [`wait_fd`] returned.
enum Woke {
    Ready,
    Deadline,
    Stopped,
}

/// Waits until `fd` has `events` (`fd < 0`: only the time), the monotonic clock reaches
/// `until` (ns), or a stop signal arrives. Looks at the stop signals at least once, so that
/// a sender that is behind schedule (never waiting) still notices a stop.
fn wait_fd(fd: i32, events: libc::c_short, until: u64, stops: [&Waker; 2]) -> io::Result<Woke> {
    loop {
        let left = until.saturating_sub(monotonic_ns());
        let mut fds = [
            pollfd(stops[0].fd(), libc::POLLIN),
            pollfd(stops[1].fd(), libc::POLLIN),
            pollfd(fd, events),
        ];
        poll(&mut fds, Some(Duration::from_nanos(left)))?;
        if fds[0].revents != 0 || fds[1].revents != 0 {
            return Ok(Woke::Stopped);
        }
        if fds[2].revents != 0 {
            return Ok(Woke::Ready);
        }
        if left == 0 {
            return Ok(Woke::Deadline);
        }
    }
}

fn sender_loop(
    sock: &Socket,
    local: SocketAddr,
    o: &StampedSenderOpts,
    stop: &Waker,
    abort: &Waker,
) -> StampedSenderReport {
    let _ = set_timer_slack_1ns();
    let cc = congestion_in_use(sock);
    let fd = sock.as_raw_fd();
    let mut buf = vec![0u8; o.record_len];
    let mut errors = Vec::new();
    let (mut records, mut bytes, mut late, mut max_late) = (0u64, 0u64, 0u64, 0u64);
    let period_bits_ns = o.record_len as u128 * 8 * 1_000_000_000;
    let start = monotonic_ns();
    let duration_ns = o.duration.as_nanos();
    let end = start.saturating_add(duration_ns.min(u128::from(u64::MAX)) as u64);
    'records: loop {
        let off = o.due_offset_ns(records);
        if off >= duration_ns {
            break;
        }
        let due = start.saturating_add(u64::try_from(off).unwrap_or(u64::MAX));
        match wait_fd(-1, 0, due, [stop, abort]) {
            Ok(Woke::Stopped) => break,
            Ok(_) => {}
            Err(e) => {
                errors.push(format!("poll: {e}"));
                break;
            }
        }
        let lateness = monotonic_ns().saturating_sub(due);
        max_late = max_late.max(lateness);
        // Late: more than one record period (record_len·8/rate_bps s) behind.
        if u128::from(lateness) * u128::from(o.rate_bps) > period_bits_ns {
            late += 1;
        }
        encode_header(&mut buf, records, realtime_ns() as i64);
        let mut sent = 0;
        while sent < buf.len() {
            match sock.send_with_flags(&buf[sent..], libc::MSG_NOSIGNAL) {
                Ok(n) => {
                    sent += n;
                    bytes += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match wait_fd(fd, libc::POLLOUT, end, [stop, abort]) {
                        Ok(Woke::Ready) => {}
                        Ok(_) => break 'records,
                        Err(e) => {
                            errors.push(format!("poll for POLLOUT: {e}"));
                            break 'records;
                        }
                    }
                }
                Err(e) => {
                    errors.push(format!("send record {records}: {e}"));
                    break 'records;
                }
            }
        }
        records += 1;
    }
    let write_time = Duration::from_nanos(monotonic_ns().saturating_sub(start));

    let mut drained = false;
    if errors.is_empty() {
        match drain(sock, o.drain_timeout, abort) {
            Ok(d) => drained = d,
            Err(e) => errors.push(e),
        }
    }
    StampedSenderReport {
        local,
        peer: o.dst,
        cc,
        records_sent: records,
        bytes_sent: bytes,
        late_records: late,
        max_late: Duration::from_nanos(max_late),
        write_time,
        drained,
        tcp_info: tcp_info(sock.as_fd()).ok(),
        errors,
    }
}

/// Cuts a byte stream into records of a fixed length, keeping only each record's header.
#[derive(Debug)]
struct Cutter {
    len: usize,
    have: usize,
    header: [u8; HEADER_LEN],
    bad: u64,
}

impl Cutter {
    fn new(len: usize) -> Cutter {
        Cutter {
            len,
            have: 0,
            header: [0; HEADER_LEN],
            bad: 0,
        }
    }

    /// Takes `data`, read at `rx_ns`; appends each record it completes to `out`.
    fn feed(&mut self, mut data: &[u8], rx_ns: i64, out: &mut Vec<Record>) {
        while !data.is_empty() {
            if self.have < HEADER_LEN {
                let k = (HEADER_LEN - self.have).min(data.len());
                self.header[self.have..self.have + k].copy_from_slice(&data[..k]);
                self.have += k;
                data = &data[k..];
            }
            let k = (self.len - self.have).min(data.len());
            self.have += k;
            data = &data[k..];
            if self.have == self.len {
                self.have = 0;
                match decode_header(&self.header) {
                    Some((seq, t_ns)) => out.push(Record {
                        seq,
                        t_ns,
                        rx_ns,
                        bytes: self.len as u32,
                    }),
                    None => self.bad += 1,
                }
            }
        }
    }
}

/// What a [`StampedSink`] received.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StampedSinkReport {
    /// The address the sink listened on.
    pub local: SocketAddr,
    /// The sender's address (`None`: no connection came).
    pub peer: Option<SocketAddr>,
    /// Record length the stream was cut at.
    pub record_len: usize,
    /// Good records in arrival order: sender's `t`, receiver's `T` (`rx_ns`, `CLOCK_REALTIME`),
    /// `bytes` = `record_len`.
    pub records: Vec<Record>,
    /// Bytes read.
    pub bytes: u64,
    /// Whole records with a wrong magic.
    pub bad_records: u64,
    /// Bytes of an incomplete last record (at EOF or stop).
    pub trailing_bytes: usize,
    /// The sender's FIN was read.
    pub eof: bool,
    /// Errors met (accept or read errors end the sink).
    pub errors: Vec<String>,
}

#[derive(Debug, Default)]
struct SinkShared {
    received: AtomicUsize,
    ended: AtomicBool,
}

/// Receives one connection of stamped records (see the module documentation). Stop it with
/// [`StampedSink::stop`] or [`StampedSink::finish`]; dropping it stops it too.
#[derive(Debug)]
pub struct StampedSink {
    local: SocketAddr,
    shared: Arc<SinkShared>,
    worker: Worker<StampedSinkReport>,
}

impl StampedSink {
    /// Listens in `ns` on `bind` (port 0 picks a free port: see [`StampedSink::local_addr`])
    /// for one connection carrying `record_len`-byte records. Listening when this returns.
    pub fn start(ns: &Netns, bind: SocketAddr, record_len: usize) -> Result<StampedSink> {
        check_record_len(record_len)?;
        let listener = ns.try_run(move || -> Result<TcpListener> {
            let ctx = |what: &str, e| Error::io(format!("stamped sink {bind}: {what}"), e);
            let s = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))
                .map_err(|e| ctx("socket", e))?;
            s.set_reuse_address(true)
                .map_err(|e| ctx("SO_REUSEADDR", e))?;
            s.bind(&bind.into()).map_err(|e| ctx("bind", e))?;
            s.listen(8).map_err(|e| ctx("listen", e))?;
            s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
            Ok(s.into())
        })??;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("stamped sink local address", e))?;
        let shared = Arc::new(SinkShared::default());
        let worker = {
            let shared = Arc::clone(&shared);
            Worker::spawn(
                format!("tcp-stamped-sink:{local}"),
                "stamped sink",
                move |w| {
                    let r = sink_loop(&listener, local, record_len, w, &shared);
                    shared.ended.store(true, Ordering::Release);
                    r
                },
            )?
        };
        Ok(StampedSink {
            local,
            shared,
            worker,
        })
    }

    /// The address the sink listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Good records received so far.
    pub fn received(&self) -> usize {
        self.shared.received.load(Ordering::Relaxed)
    }

    /// Stops at once and returns the report.
    pub fn stop(self) -> StampedSinkReport {
        self.worker.stop()
    }

    /// Waits until the connection ended (EOF or an error) or `timeout` passed, then stops.
    pub fn finish(self, timeout: Duration) -> StampedSinkReport {
        let deadline = Instant::now() + timeout;
        while !self.shared.ended.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.stop()
    }
}

/// Waits (interruptibly) for one connection on `listener`; `None`: stopped first.
fn accept_one(
    listener: &TcpListener,
    waker: &Waker,
) -> io::Result<Option<(TcpStream, SocketAddr)>> {
    loop {
        if let Woke::Stopped =
            wait_fd(listener.as_raw_fd(), libc::POLLIN, u64::MAX, [waker, waker])?
        {
            return Ok(None);
        }
        match listener.accept() {
            Ok((s, peer)) => return s.set_nonblocking(true).map(|()| Some((s, peer))),
            // A connection that died in the accept queue is not fatal.
            Err(e) if is_transient(&e) || e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => return Err(e),
        }
    }
}

fn sink_loop(
    listener: &TcpListener,
    local: SocketAddr,
    record_len: usize,
    waker: &Waker,
    shared: &SinkShared,
) -> StampedSinkReport {
    let mut rep = StampedSinkReport {
        local,
        peer: None,
        record_len,
        records: Vec::new(),
        bytes: 0,
        bad_records: 0,
        trailing_bytes: 0,
        eof: false,
        errors: Vec::new(),
    };
    let mut stream = match accept_one(listener, waker) {
        Ok(Some((s, peer))) => {
            rep.peer = Some(peer);
            s
        }
        Ok(None) => return rep,
        Err(e) => {
            rep.errors.push(format!("accept: {e}"));
            return rep;
        }
    };
    let mut cut = Cutter::new(record_len);
    let mut buf = vec![0u8; (16 * record_len).max(64 * 1024)];
    loop {
        match wait_fd(stream.as_raw_fd(), libc::POLLIN, u64::MAX, [waker, waker]) {
            Ok(Woke::Ready) => {}
            Ok(_) => break,
            Err(e) => {
                rep.errors.push(format!("poll: {e}"));
                break;
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                rep.eof = true;
                break;
            }
            Ok(n) => {
                let rx = realtime_ns() as i64;
                rep.bytes += n as u64;
                cut.feed(&buf[..n], rx, &mut rep.records);
                shared.received.store(rep.records.len(), Ordering::Relaxed);
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                rep.errors.push(format!("read: {e}"));
                break;
            }
        }
    }
    // Dropping the stream (on return) closes our side: the sender's drain sees our FIN.
    rep.bad_records = cut.bad;
    rep.trailing_bytes = cut.have;
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::{skip_unless_root, BridgeTopo, VethPair};

    #[test]
    fn record_round_trip_and_cutting() {
        let mut b = vec![0xffu8; 30];
        encode_header(&mut b, 0x0102_0304_0506_0708, -5);
        assert_eq!(&b[..4], b"WTSR");
        assert_eq!(&b[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[12..20], &(-5i64).to_be_bytes());
        assert_eq!(decode_header(&b), Some((0x0102_0304_0506_0708, -5)));
        assert_eq!(decode_header(&b[..19]), None);
        b[0] = b'X';
        assert_eq!(decode_header(&b), None);

        // Three 25-byte records, the middle one with a bad magic, fed in odd chunks.
        let mut stream = [0u8; 75];
        for (i, rec) in stream.chunks_mut(25).enumerate() {
            encode_header(rec, i as u64, 1000 + i as i64);
        }
        stream[25] = 0;
        let mut c = Cutter::new(25);
        let mut out = Vec::new();
        for (k, chunk) in stream[..70].chunks(7).enumerate() {
            c.feed(chunk, k as i64, &mut out);
        }
        assert_eq!(
            out,
            vec![Record {
                seq: 0,
                t_ns: 1000,
                rx_ns: 3,
                bytes: 25
            }]
        );
        assert_eq!((c.bad, c.have), (1, 20));
        c.feed(&stream[70..], 99, &mut out);
        assert_eq!(
            out[1],
            Record {
                seq: 2,
                t_ns: 1002,
                rx_ns: 99,
                bytes: 25
            }
        );
        assert_eq!(c.have, 0);
    }

    #[test]
    fn opts_validation() {
        let dst: SocketAddr = "10.0.0.2:9".parse().unwrap();
        let ok = StampedSenderOpts::new(dst, 4_000_000, Duration::from_secs(1), "cubic");
        ok.validate().unwrap();
        assert_eq!(ok.due_offset_ns(3), 6_000_000);
        let e = |o: StampedSenderOpts| o.validate().unwrap_err().to_string();
        assert!(e(StampedSenderOpts {
            rate_bps: 0,
            ..ok.clone()
        })
        .contains("rate"));
        assert!(e(StampedSenderOpts {
            record_len: 19,
            ..ok.clone()
        })
        .contains("record_len"));
        assert!(e(StampedSenderOpts {
            record_len: 65_537,
            ..ok.clone()
        })
        .contains("record_len"));
        assert!(e(StampedSenderOpts {
            cc: String::new(),
            ..ok.clone()
        })
        .contains("congestion"));
        let src = Some("::1".parse().unwrap());
        assert!(e(StampedSenderOpts { src, ..ok }).contains("families"));
    }

    #[test]
    fn paced_records_arrive_stamped_over_veth() {
        if skip_unless_root("paced_records_arrive_stamped_over_veth") {
            return;
        }
        let pair = VethPair::new("stamped").unwrap();
        let bind = SocketAddr::new(BridgeTopo::RCV_ADDR.into(), 0);
        let sink = StampedSink::start(&pair.rcv, bind, 1000).unwrap();
        let opts = StampedSenderOpts::new(
            sink.local_addr(),
            4_000_000,
            Duration::from_secs(2),
            "cubic",
        );
        let s = StampedSender::start(&pair.snd, opts).unwrap().join();
        let r = sink.finish(Duration::from_secs(1));
        assert!(s.errors.is_empty() && r.errors.is_empty(), "{s:?} {r:?}");
        assert!(s.drained && r.eof && r.bad_records == 0, "{s:?}");
        assert_eq!(s.cc, "cubic");
        assert!(
            s.tcp_info.is_some_and(|i| i.bytes_acked >= s.bytes_sent),
            "{s:?}"
        );
        let n = r.records.len();
        assert!(
            n as u64 + 1 >= s.records_sent && n as u64 <= s.records_sent,
            "{n} {s:?}"
        );
        assert!(s.records_sent >= 999, "{s:?}");
        assert!(r.records.iter().enumerate().all(|(i, x)| x.seq == i as u64));
        let (a, b) = (r.records[0], r.records[n - 1]);
        let bps = (n - 1) as f64 * 8000.0 / ((b.rx_ns - a.rx_ns) as f64 * 1e-9);
        assert!((bps / 4e6 - 1.0).abs() < 0.05, "achieved {bps} bit/s");
        let mut d: Vec<i64> = r.records.iter().map(|x| x.rx_ns - x.t_ns).collect();
        d.sort_unstable();
        let med = d[n / 2];
        assert!(med > 0 && med < 50_000_000, "median one-way delay {med} ns");
        eprintln!(
            "stamped: {n} records, {bps:.0} bit/s, median delay {} µs, late {}, max_late {:?}",
            med / 1000,
            s.late_records,
            s.max_late
        );
    }
}
