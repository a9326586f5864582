//! The CBR receiver: [`CbrSink`] receives datagrams with kernel receive timestamps
//! (`SO_TIMESTAMPNS`, taken when the packet enters the receiving stack) and records, per
//! packet, the sequence number, send time, receive time, size and TOS / traffic class
//! byte (`IP_RECVTOS`, `IPV6_RECVTCLASS`: ECN marks), in arrival order. It reads
//! only the header (`recvmmsg` with `MSG_TRUNC`), in batches, and counts the datagrams its
//! socket dropped (`SO_RXQ_OVFL`).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};
use weir_io::clock::realtime_ns;

use super::records::{CbrRecord, CbrRecords};
use super::CbrHeader;
use crate::sys::{pin_to_cpu, poll, pollfd, rx_meta, setsockopt_int, Waker, Worker};
use crate::topo::Netns;
use crate::{Error, Result};

/// Settings of a [`CbrSink`]. Build with [`CbrSinkOpts::new`], then set fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Where the CBR header starts in each payload (12 after an RTP header: a voice stream
    /// from a sender with `rtp` set). Default 0.
    pub header_offset: usize,
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
            header_offset: 0,
        }
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
    shared: Arc<SinkShared>,
    worker: Worker<CbrRecords>,
}

impl CbrSink {
    /// Starts a sink in `ns` on `bind`, recording flow `flow` (`None`: any). It is receiving
    /// when this returns.
    pub fn start(ns: &Netns, bind: SocketAddr, flow: Option<u32>) -> Result<CbrSink> {
        Self::start_with(ns, CbrSinkOpts::new(bind, flow))
    }

    /// [`CbrSink::start`] with all options.
    pub fn start_with(ns: &Netns, opts: CbrSinkOpts) -> Result<CbrSink> {
        if opts.header_offset + super::HEADER_LEN > RX_PREFIX {
            return Err(Error::Invalid(format!(
                "CBR sink header offset {} (at most {})",
                opts.header_offset,
                RX_PREFIX - super::HEADER_LEN
            )));
        }
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
        let shared = Arc::new(SinkShared::default());
        let (tx, rx) = mpsc::channel::<Result<()>>();
        let worker = {
            let shared = Arc::clone(&shared);
            Worker::spawn(format!("cbr-sink:{local}"), "CBR sink", move |waker| {
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
                        let _ = tx.send(Err(Error::io(format!("pin CBR sink to CPU {cpu}"), e)));
                        return out;
                    }
                }
                let _ = tx.send(Ok(()));
                sink_loop(&sock, &opts, waker, &shared, &mut out);
                out
            })?
        };
        // on an error, dropping the worker joins its thread
        rx.recv()
            .unwrap_or_else(|_| Err(Error::Invalid("CBR sink thread died".into())))?;
        Ok(CbrSink {
            local,
            shared,
            worker,
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
    pub fn stop(self) -> CbrRecords {
        self.worker.stop()
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
    let (level, name, what) = if bind.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_RECVTOS, "IP_RECVTOS")
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, "IPV6_RECVTCLASS")
    };
    setsockopt_int(fd, level, name, 1).map_err(|e| ctx(what, e))?;
    s.bind(&bind.into()).map_err(|e| ctx("bind", e))?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok((s, rcvbuf))
}

/// Bytes of each datagram copied out: the header is all the sink reads (`MSG_TRUNC` makes
/// the kernel report the full length).
const RX_PREFIX: usize = 64;
/// Control buffer per datagram, in u64 words (alignment for `cmsghdr`): room for a timespec,
/// the drop counter and the TOS byte (32 + 24 + 24 bytes).
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
                take_datagram(m, buf, o.flow, o.header_offset, out);
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
    offset: usize,
    out: &mut CbrRecords,
) {
    let len = m.msg_len as usize;
    let meta = rx_meta(&m.msg_hdr);
    if let Some(d) = meta.drops {
        out.socket_drops = out.socket_drops.max(u64::from(d));
    }
    let rx_ns = meta.rx_ns;
    let Some(h) = buf
        .get(offset..len.min(RX_PREFIX))
        .and_then(CbrHeader::decode)
    else {
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
        tos: meta.tos.unwrap_or(0),
    });
}
