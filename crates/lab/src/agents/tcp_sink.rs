//! The bulk TCP receiver: [`TcpSink`] accepts any number of connections on one address and,
//! per connection, counts the bytes read in consecutive intervals of a fixed length. All
//! series of one sink share one origin — the moment the sink started — so sessions that
//! start at different times line up bin by bin. It reads everything as fast as it comes,
//! so the sender's rate is what the path allows.

use std::io::{self, Read as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use crate::stats::series::{goodput_bps, sum_series};
use crate::sys::{poll, pollfd, Waker, Worker};
use crate::topo::Netns;
use crate::{Error, Result};

/// Options of a [`TcpSink`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
    /// The origin of the series (bin 0 starts here); `None`: when the sink starts. Give
    /// several sinks one origin to line their series up; it must not be later than the
    /// sink's start. Not sent to a remote host (its sink starts its own series).
    #[serde(skip)]
    pub epoch: Option<Instant>,
}

impl SinkOpts {
    /// Options with defaults: kernel receive buffer, 256 KiB reads.
    pub fn new(bind: SocketAddr, interval: Duration) -> SinkOpts {
        SinkOpts {
            bind,
            interval,
            rcvbuf: None,
            read_size: 256 * 1024,
            epoch: None,
        }
    }
}

/// What a sink saw on one connection. Times are since the sink started.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
        sum_series(self.conns.iter().map(|c| c.series.as_slice()))
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
    shared: Arc<SinkShared>,
    worker: Worker<SinkReport>,
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
        let shared = Arc::new(SinkShared::default());
        let now = Instant::now();
        let epoch = opts.epoch.filter(|e| *e <= now).unwrap_or(now);
        let worker = {
            let shared = Arc::clone(&shared);
            Worker::spawn(format!("tcp-sink:{local}"), "sink", move |waker| {
                sink_loop(listener, local, opts, epoch, waker, &shared)
            })?
        };
        Ok(TcpSink {
            local,
            shared,
            worker,
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
    pub fn stop(self) -> SinkReport {
        self.worker.stop()
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
