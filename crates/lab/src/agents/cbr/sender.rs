//! The constant-rate UDP sender: [`CbrSender`] sends datagrams from a (bound) source to a
//! destination at a constant rate in packets per second on its own thread, each padded to
//! the requested frame size and carrying a flow id, a sequence number and its send time
//! (`CLOCK_REALTIME`, read just before the send call). Send errors are counted, not fatal.
//! See the [module documentation](super) for pacing, batching and the report.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};
use weir_io::clock::{monotonic_ns, realtime_ns, set_timer_slack_1ns};

use super::pacing::{offset_ns, Pacing};
use super::{payload_len, CbrHeader, DEFAULT_FLOW, HEADER_LEN, MAX_BATCH};
use crate::agents::voip::{Rtp, RTP_HEADER_LEN};
use crate::sys::{join_thread, pin_to_cpu, setsockopt_int};
use crate::topo::Netns;
use crate::{Error, Result};

/// Settings of a [`CbrSender`]. Build with [`CbrSenderOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Start every payload with this RTP header (sequence number and timestamp from the
    /// packet's sequence number) and put the CBR header after it: a voice stream
    /// ([`crate::agents::voip`]). `None`: the CBR header starts the payload.
    pub rtp: Option<Rtp>,
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
            rtp: None,
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
        let p = payload_len(self.frame, self.dst.is_ipv6())?;
        let need = self.header_offset() + HEADER_LEN;
        if p < need {
            return Err(Error::Invalid(format!(
                "CBR frame size {} bytes leaves {p} bytes of UDP payload; the RTP and CBR \
                 headers need {need}",
                self.frame
            )));
        }
        Ok(p)
    }

    /// Where the CBR header starts in the payload: after the RTP header, if any.
    pub fn header_offset(&self) -> usize {
        self.rtp.map_or(0, |_| RTP_HEADER_LEN)
    }
}

/// Send errors of a [`CbrSender`], by cause.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
                    // best effort: without it sleeps end up to 50 µs late
                    let _ = set_timer_slack_1ns();
                    if let Some(cpu) = opts.cpu {
                        if let Err(e) = pin_to_cpu(cpu) {
                            let _ =
                                tx.send(Err(Error::io(format!("pin CBR sender to CPU {cpu}"), e)));
                            return None;
                        }
                    }
                    let _ = tx.send(Ok(()));
                    let t0 =
                        monotonic_ns() + opts.start_delay.as_nanos().min(u64::MAX as u128) as u64;
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
    let hdr_at = opts.header_offset();

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
        let mut now = monotonic_ns();
        if now < due {
            if !opts.pacing.wait_until(due, now, stop) {
                stopped = true;
                break;
            }
            now = monotonic_ns();
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
            if let Some(rtp) = &opts.rtp {
                rtp.encode(seq, &mut buf[..RTP_HEADER_LEN]);
            }
            buf[hdr_at..hdr_at + HEADER_LEN].copy_from_slice(&hdr);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
