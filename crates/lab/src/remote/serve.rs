//! `weir agent`: the far end of the agent protocol ([`super::wire`]), run by the lab on a
//! remote host over SSH (`ssh HOST weir agent`).
//!
//! It reads requests from standard input until end of file, handles each on its own thread
//! (a `join` may wait a whole run), and writes each reply as one line. Agents run in the
//! process's own network namespace.
//!
//! **Cleanup.** The session ends at end of input — the lab closed the channel, or the lab,
//! its machine or the network died (sshd then closes the pipe) — when no request came for
//! [`IDLE_TIMEOUT`] (the lab pings every [`PING_EVERY`](super::ssh::PING_EVERY); a lab
//! machine cut off the network closes nothing, and sshd would wait for TCP to give up), or
//! when `stop` says so (`weir agent` on SIGINT, SIGTERM or SIGHUP). Every agent still running
//! is stopped, and every change the session made is undone in reverse order: sysctls and
//! offloads written back, addresses and routes removed, an interface it brought up set
//! down again. A host is left as the lab found it
//! whatever happened to the lab.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::wire::{Hello, Op, Reply, Request, StartAgent, Started, PROTOCOL};
use crate::agents::cbr::{CbrSender, CbrSink};
use crate::agents::{
    path_mtu, Discard, EchoProber, EchoResponder, MtuReport, Prober, StampedSender, StampedSink,
    TcpSender, TcpSink, UdpReflector,
};
use crate::tests::streams::received_figures;
use crate::topo::{wait_link_up, Netns};
use crate::{Error, Result};

/// How long `link_up` waits for carrier.
const LINK_UP_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a `join` looks whether its agent is done.
const JOIN_POLL: Duration = Duration::from_millis(10);

/// A running agent.
enum Running {
    Sink(TcpSink),
    Sender(TcpSender),
    Prober(Prober),
    Reflector(UdpReflector),
    CbrSender(CbrSender),
    CbrSink(CbrSink),
    Dscp(crate::agents::DscpCounter),
    /// A path MTU search: it ends by itself (its sizes × tries × wait at most).
    PathMtu(JoinHandle<Result<MtuReport>>),
    StampedSink(StampedSink),
    StampedSender(StampedSender),
    Echo(EchoResponder),
    /// Ends by itself after its duration.
    EchoProber(EchoProber),
    Discard(Discard),
}

impl Running {
    fn is_finished(&self) -> bool {
        match self {
            Running::Sink(_)
            | Running::Prober(_)
            | Running::Reflector(_)
            | Running::CbrSink(_)
            | Running::Dscp(_)
            | Running::StampedSink(_)
            | Running::Echo(_)
            | Running::Discard(_) => false,
            Running::Sender(s) => s.is_finished(),
            Running::CbrSender(s) => s.is_finished(),
            Running::PathMtu(t) => t.is_finished(),
            Running::StampedSender(s) => s.is_finished(),
            Running::EchoProber(p) => p.is_finished(),
        }
    }

    fn stop(self) -> Result<Value> {
        Ok(match self {
            Running::Sink(s) => to_value(&s.stop()),
            Running::Sender(s) => to_value(&s.stop()),
            Running::Prober(p) => to_value(&p.finish()),
            Running::Reflector(r) => to_value(&r.stop()),
            Running::CbrSender(s) => to_value(&s.stop()),
            Running::CbrSink(s) => to_value(&s.stop()),
            Running::Dscp(d) => to_value(&d.stop()),
            Running::PathMtu(t) => return path_mtu_report(t),
            Running::StampedSink(s) => to_value(&s.stop()),
            Running::StampedSender(s) => to_value(&s.stop()),
            Running::Echo(e) => to_value(&e.stop()),
            // it ends by itself within its duration
            Running::EchoProber(p) => to_value(&p.join()),
            Running::Discard(d) => {
                // closing the port is all there is to stopping it
                drop(d);
                Value::Null
            }
        })
    }

    /// Waits for an agent that ends by itself; the others run until stopped, so they stop
    /// now.
    fn join(self) -> Result<Value> {
        match self {
            Running::Sender(s) => Ok(to_value(&s.join())),
            Running::CbrSender(s) => Ok(to_value(&s.join())),
            Running::StampedSender(s) => Ok(to_value(&s.join())),
            Running::EchoProber(p) => Ok(to_value(&p.join())),
            other => other.stop(),
        }
    }
}

/// A path MTU search's report, or its error.
fn path_mtu_report(t: JoinHandle<Result<MtuReport>>) -> Result<Value> {
    match t.join() {
        Ok(r) => r.map(|r| to_value(&r)),
        Err(_) => Err(Error::Invalid("path MTU: the search panicked".into())),
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| Value::String(format!("unserialisable: {e}")))
}

/// A change to undo at the end of the session.
#[derive(Debug)]
enum Undo {
    Sysctl {
        key: String,
        old: String,
    },
    Offloads {
        ifname: String,
        old: weir_io::ethtool::Offloads,
    },
    Addr {
        ifname: String,
        cidr: String,
    },
    Route {
        dst: String,
        ifname: String,
    },
    LinkDown {
        ifname: String,
    },
}

/// The session's state, shared by the request threads.
struct Session {
    ns: Netns,
    agents: Mutex<HashMap<u64, Running>>,
    next: AtomicU64,
    undo: Mutex<Vec<Undo>>,
    ending: AtomicBool,
}

/// How often the request loop looks at `stop` while no request comes.
const STOP_POLL: Duration = Duration::from_millis(50);
/// The session ends when no request came for this long (six of the lab's pings).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves requests from `input` until its end, until none came for `idle` or until
/// `stop()` is true, replies to `output`; then stops every agent and undoes every change. Returns the problems met
/// while undoing (also written to standard error). `input` is read on a thread of its own
/// that is left blocked in its read when `stop` ends the session.
pub fn serve(
    input: impl BufRead + Send + 'static,
    output: impl Write + Send,
    stop: &(dyn Fn() -> bool + Sync),
    idle: Duration,
) -> Result<Vec<String>> {
    let session = Session {
        ns: Netns::host()?,
        agents: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        undo: Mutex::new(Vec::new()),
        ending: AtomicBool::new(false),
    };
    let out = Mutex::new(output);
    let write = |reply: Reply| {
        let mut line = serde_json::to_string(&reply).unwrap_or_default();
        line.push('\n');
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        // a closed channel: nobody to tell; the end of input follows
        let _ = o.write_all(line.as_bytes()).and_then(|_| o.flush());
    };
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::Builder::new()
        .name("agent-input".into())
        .spawn(move || {
            for line in input.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Error::io("spawn thread", e))?;
    std::thread::scope(|sc| {
        let mut last = Instant::now();
        loop {
            let line = match rx.recv_timeout(STOP_POLL) {
                Ok(l) => l,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stop() => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if last.elapsed() > idle => {
                    eprintln!(
                        "weir agent: no request from the lab for {idle:?}: ending the session"
                    );
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            last = Instant::now();
            if line.trim().is_empty() {
                continue;
            }
            let req: Request = match serde_json::from_str(&line) {
                Ok(r) => r,
                Err(e) => {
                    write(Reply {
                        id: 0,
                        ok: None,
                        error: Some(format!("bad request {line:?}: {e}")),
                    });
                    continue;
                }
            };
            let (session, write) = (&session, &write);
            sc.spawn(move || {
                let r = handle(session, req.op);
                write(match r {
                    Ok(v) => Reply {
                        id: req.id,
                        ok: Some(v),
                        error: None,
                    },
                    Err(e) => Reply {
                        id: req.id,
                        ok: None,
                        error: Some(e.message()),
                    },
                });
            });
        }
        // end of input: stop what runs; the joins waiting see `ending` and stop theirs
        session.ending.store(true, Ordering::Relaxed);
        let running: Vec<Running> = lock(&session.agents).drain().map(|(_, a)| a).collect();
        for a in running {
            drop(a.stop());
        }
    });
    let problems = undo_all(&session);
    for p in &problems {
        eprintln!("weir agent: {p}");
    }
    Ok(problems)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn handle(s: &Session, op: Op) -> Result<Value> {
    match op {
        Op::Hello => Ok(to_value(&Hello {
            protocol: PROTOCOL,
            version: env!("CARGO_PKG_VERSION").to_string(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
        })),
        Op::Clock => Ok(Value::from(weir_io::clock::realtime_ns())),
        Op::Ping => Ok(Value::Null),
        Op::Sysctl { key, value } => {
            let old = s.ns.get_sysctl(&key)?;
            s.ns.set_sysctl(&key, &value)?;
            lock(&s.undo).push(Undo::Sysctl { key, old });
            Ok(Value::Null)
        }
        Op::Offloads { ifname, want } => {
            let old = weir_io::ethtool::get_offloads(&ifname)
                .map_err(|e| Error::Invalid(format!("offloads of {ifname}: {e}")))?;
            // recorded first: a change that fails half-way is undone too
            lock(&s.undo).push(Undo::Offloads {
                ifname: ifname.clone(),
                old,
            });
            let outcome = weir_io::ethtool::set_offloads(&ifname, &want)
                .map_err(|e| Error::Invalid(format!("offloads of {ifname}: {e}")))?;
            Ok(to_value(&outcome))
        }
        Op::LinkUp { ifname } => {
            let was_up = weir_io::ethtool::is_up(&ifname)
                .map_err(|e| Error::Invalid(format!("interface {ifname}: {e}")))?;
            if !was_up {
                s.ns.ip(&["link", "set", "dev", &ifname, "up"])?;
                lock(&s.undo).push(Undo::LinkDown {
                    ifname: ifname.clone(),
                });
            }
            wait_link_up(&s.ns, &ifname, LINK_UP_TIMEOUT)?;
            Ok(Value::Null)
        }
        Op::AddrAdd { ifname, cidr } => {
            s.ns.ip(&["addr", "add", &cidr, "dev", &ifname])?;
            lock(&s.undo).push(Undo::Addr { ifname, cidr });
            Ok(Value::Null)
        }
        Op::RouteAdd {
            dst,
            ifname,
            rto_min_ms,
        } => {
            match rto_min_ms {
                None => drop(s.ns.ip(&["route", "add", &dst, "dev", &ifname])?),
                Some(ms) => crate::topo::set_rto_min(&s.ns, &dst, &ifname, ms)?,
            };
            lock(&s.undo).push(Undo::Route { dst, ifname });
            Ok(Value::Null)
        }
        Op::Start { agent } => {
            if s.ending.load(Ordering::Relaxed) {
                return Err(Error::Invalid("the session is ending".into()));
            }
            let running = match *agent {
                StartAgent::TcpSink {
                    mut opts,
                    epoch_ago_us,
                } => {
                    opts.epoch = epoch_ago_us.map(ago);
                    Running::Sink(TcpSink::start_with(&s.ns, opts)?)
                }
                StartAgent::TcpSender {
                    mut opts,
                    until_us,
                    origin_ago_us,
                } => {
                    opts.until = until_us.map(|us| Instant::now() + Duration::from_micros(us));
                    opts.info_origin = origin_ago_us.map(ago);
                    Running::Sender(TcpSender::start(&s.ns, opts)?)
                }
                StartAgent::Prober { opts } => Running::Prober(Prober::start(&s.ns, opts)?),
                StartAgent::UdpReflector { bind, tos } => {
                    Running::Reflector(UdpReflector::start(&s.ns, bind, tos)?)
                }
                StartAgent::CbrSender { opts } => {
                    Running::CbrSender(CbrSender::start(&s.ns, opts)?)
                }
                StartAgent::CbrSink { opts } => Running::CbrSink(CbrSink::start_with(&s.ns, opts)?),
                StartAgent::DscpCounter { ifname } => {
                    Running::Dscp(crate::agents::DscpCounter::start(&s.ns, &ifname)?)
                }
                StartAgent::PathMtu {
                    src,
                    to,
                    max,
                    wait_us,
                    tries,
                } => {
                    let ns = Netns::host()?;
                    let wait = Duration::from_micros(wait_us);
                    Running::PathMtu(
                        std::thread::Builder::new()
                            .name("path-mtu".into())
                            .spawn(move || path_mtu(&ns, src, to, max, wait, tries))
                            .map_err(|e| Error::io("spawn the path MTU search", e))?,
                    )
                }
                StartAgent::StampedSink { bind, record_len } => {
                    Running::StampedSink(StampedSink::start(&s.ns, bind, record_len)?)
                }
                StartAgent::StampedSender { opts } => {
                    Running::StampedSender(StampedSender::start(&s.ns, opts)?)
                }
                StartAgent::EchoResponder { bind, clock } => {
                    Running::Echo(EchoResponder::start(&s.ns, bind, clock)?)
                }
                StartAgent::EchoProber {
                    to,
                    duration_us,
                    rate,
                } => Running::EchoProber(EchoProber::start(
                    &s.ns,
                    to,
                    Duration::from_micros(duration_us),
                    rate,
                )?),
                StartAgent::Discard { bind } => Running::Discard(Discard::start(&s.ns, bind)?),
            };
            let handle = s.next.fetch_add(1, Ordering::Relaxed);
            lock(&s.agents).insert(handle, running);
            Ok(to_value(&Started { handle }))
        }
        Op::Stop { handle } => take(s, handle)?.stop(),
        Op::Drain {
            handle,
            expected,
            idle_us,
            of,
        } => {
            let recs = finish_sink(s, handle, expected, idle_us)?;
            Ok(to_value(&received_figures(&recs, &of)))
        }
        Op::Records {
            handle,
            expected,
            idle_us,
        } => Ok(to_value(&finish_sink(s, handle, expected, idle_us)?)),
        Op::SysctlGet { key } => Ok(Value::String(s.ns.get_sysctl(&key)?)),
        Op::Join { handle } => loop {
            {
                let mut agents = lock(&s.agents);
                match agents.get(&handle) {
                    None => return Err(no_agent(handle)),
                    Some(a) if a.is_finished() || s.ending.load(Ordering::Relaxed) => {
                        let a = agents.remove(&handle).expect("present");
                        drop(agents);
                        return if a.is_finished() { a.join() } else { a.stop() };
                    }
                    Some(_) => {}
                }
            }
            std::thread::sleep(JOIN_POLL);
        },
    }
}

/// The instant `us` µs ago (now, on a clock that started less than that ago).
fn ago(us: u64) -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_micros(us)).unwrap_or(now)
}

/// CBR sink `handle`'s records once `expected` packets arrived or none for `idle_us`
/// (`Drain`, `Records`); any other agent is stopped and refused.
fn finish_sink(
    s: &Session,
    handle: u64,
    expected: u64,
    idle_us: u64,
) -> Result<crate::agents::cbr::CbrRecords> {
    match take(s, handle)? {
        Running::CbrSink(k) => Ok(k.finish(expected, Duration::from_micros(idle_us))),
        other => {
            drop(other.stop());
            Err(Error::Invalid(format!(
                "agent {handle} is not a CBR sink: drain is for CBR sinks (it was stopped)"
            )))
        }
    }
}

fn take(s: &Session, handle: u64) -> Result<Running> {
    lock(&s.agents)
        .remove(&handle)
        .ok_or_else(|| no_agent(handle))
}

fn no_agent(handle: u64) -> Error {
    Error::Invalid(format!(
        "no agent {handle} (never started, or already stopped or joined)"
    ))
}

/// Undoes the session's changes, newest first; returns what failed.
fn undo_all(s: &Session) -> Vec<String> {
    let mut problems = Vec::new();
    let undo: Vec<Undo> = std::mem::take(&mut *lock(&s.undo));
    for u in undo.into_iter().rev() {
        let r = match &u {
            Undo::Sysctl { key, old } => s.ns.set_sysctl(key, old),
            Undo::Offloads { ifname, old } => weir_io::ethtool::set_offloads(ifname, old)
                .map(|_| ())
                .map_err(|e| Error::Invalid(e.to_string())),
            Undo::Addr { ifname, cidr } => {
                s.ns.ip(&["addr", "del", cidr, "dev", ifname]).map(|_| ())
            }
            Undo::Route { dst, ifname } => {
                s.ns.ip(&["route", "del", dst, "dev", ifname]).map(|_| ())
            }
            Undo::LinkDown { ifname } => {
                s.ns.ip(&["link", "set", "dev", ifname, "down"]).map(|_| ())
            }
        };
        if let Err(e) = r {
            problems.push(format!("undoing {u:?}: {e}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol without root: hello, the clock, a bad request, an unknown handle; a
    /// sink and a sender on loopback of this process's namespace.
    #[test]
    fn answers_each_request_by_id() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let sink = serde_json::json!({"id":3,"op":"start","agent":{"kind":"tcp_sink","opts":
            {"bind":format!("127.0.0.1:{port}"),"interval":{"secs":0,"nanos":100_000_000},
             "rcvbuf":null,"read_size":65536}}});
        let mut sender = crate::agents::SenderOpts::new(
            format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_millis(300),
            "reno",
        );
        sender.drain_timeout = Duration::from_secs(2);
        let send = serde_json::to_string(&Request {
            id: 4,
            op: Op::Start {
                agent: Box::new(StartAgent::TcpSender {
                    opts: sender,
                    until_us: Some(5_000_000),
                    origin_ago_us: None,
                }),
            },
        })
        .unwrap();
        // the sink's handle is 1, the sender's 2: join the sender, then stop the sink
        let input = format!(
            "{{\"id\":1,\"op\":\"hello\"}}\n{{\"id\":2,\"op\":\"clock\"}}\nnot json\n\
             {{\"id\":9,\"op\":\"stop\",\"handle\":77}}\n{sink}\n"
        );
        // the sink must listen before the sender connects: feed in two steps through a pipe
        let (r, mut w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let server = std::thread::spawn(move || {
            serve(std::io::BufReader::new(r), out_w, &|| false, IDLE_TIMEOUT)
        });
        let mut replies = std::io::BufReader::new(out_r).lines();
        let mut next =
            || -> Reply { serde_json::from_str(&replies.next().unwrap().unwrap()).unwrap() };
        w.write_all(input.as_bytes()).unwrap();
        let mut got: HashMap<u64, Reply> = HashMap::new();
        for _ in 0..5 {
            let r = next();
            got.insert(r.id, r);
        }
        let hello: Hello = serde_json::from_value(got[&1].ok.clone().unwrap()).unwrap();
        assert_eq!(hello.protocol, PROTOCOL);
        assert!(got[&2].ok.as_ref().unwrap().as_u64().unwrap() > 1_600_000_000_000_000_000);
        assert!(got[&0].error.as_ref().unwrap().contains("bad request"));
        assert!(got[&9].error.as_ref().unwrap().contains("no agent 77"));
        assert_eq!(got[&3].ok.as_ref().unwrap()["handle"], 1);
        // requests run concurrently: a join sent before its start was answered may find
        // no agent yet (the lab waits for `start`'s handle)
        w.write_all(format!("{send}\n").as_bytes()).unwrap();
        let started = next();
        assert_eq!(started.id, 4, "{started:?}");
        w.write_all(b"{\"id\":5,\"op\":\"join\",\"handle\":2}\n")
            .unwrap();
        let joined = next();
        assert_eq!(joined.id, 5, "{joined:?}");
        let rep: crate::agents::SenderReport = serde_json::from_value(joined.ok.unwrap()).unwrap();
        assert!(rep.bytes_written > 0, "{rep:?}");
        w.write_all(b"{\"id\":6,\"op\":\"stop\",\"handle\":1}\n")
            .unwrap();
        let stopped = next();
        let sink: crate::agents::SinkReport = serde_json::from_value(stopped.ok.unwrap()).unwrap();
        assert_eq!(sink.total_bytes(), rep.bytes_written);
        drop(w);
        assert!(server.join().unwrap().unwrap().is_empty());
    }
}

#[cfg(test)]
mod stop_tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// `stop` ends a session whose input stays open, and its changes are undone (here none).
    #[test]
    fn stop_ends_the_session_with_the_input_still_open() {
        let (r, mut w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        static STOP: AtomicBool = AtomicBool::new(false);
        let server = std::thread::spawn(move || {
            serve(
                std::io::BufReader::new(r),
                out_w,
                &|| STOP.load(Ordering::Relaxed),
                IDLE_TIMEOUT,
            )
        });
        w.write_all(b"{\"id\":1,\"op\":\"hello\"}\n").unwrap();
        let mut replies = std::io::BufReader::new(out_r).lines();
        let hello: Reply = serde_json::from_str(&replies.next().unwrap().unwrap()).unwrap();
        assert_eq!(hello.id, 1);
        STOP.store(true, Ordering::Relaxed);
        assert!(server.join().unwrap().unwrap().is_empty());
        drop(w);
    }
}

#[cfg(test)]
mod idle_tests {
    use super::*;

    /// A lab that stops talking (its machine cut off) ends the session after `idle`.
    #[test]
    fn silence_ends_the_session() {
        let (r, mut w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let t0 = Instant::now();
        let server = std::thread::spawn(move || {
            serve(
                std::io::BufReader::new(r),
                out_w,
                &|| false,
                Duration::from_millis(300),
            )
        });
        w.write_all(b"{\"id\":1,\"op\":\"ping\"}\n").unwrap();
        let mut replies = std::io::BufReader::new(out_r).lines();
        let ping: Reply = serde_json::from_str(&replies.next().unwrap().unwrap()).unwrap();
        assert_eq!((ping.id, ping.error), (1, None));
        assert!(server.join().unwrap().unwrap().is_empty());
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        drop(w);
    }
}

#[cfg(test)]
mod cbr_tests {
    use super::*;
    use crate::agents::cbr::{CbrSenderOpts, CbrSenderReport, CbrSinkOpts};
    use crate::tests::streams::{FiguresOf, StreamFigures};

    /// A session served on a thread, spoken to through pipes.
    struct Wire {
        w: std::io::PipeWriter,
        replies: std::io::Lines<std::io::BufReader<std::io::PipeReader>>,
        server: std::thread::JoinHandle<Result<Vec<String>>>,
    }

    impl Wire {
        fn new() -> Wire {
            let (r, w) = std::io::pipe().unwrap();
            let (out_r, out_w) = std::io::pipe().unwrap();
            let server = std::thread::spawn(move || {
                serve(std::io::BufReader::new(r), out_w, &|| false, IDLE_TIMEOUT)
            });
            Wire {
                w,
                replies: std::io::BufReader::new(out_r).lines(),
                server,
            }
        }
        /// Sends request `id`; its reply is read with [`Wire::next`].
        fn send(&mut self, id: u64, op: Op) {
            let line = serde_json::to_string(&Request { id, op }).unwrap() + "\n";
            self.w.write_all(line.as_bytes()).unwrap();
        }
        fn next(&mut self) -> Reply {
            serde_json::from_str(&self.replies.next().unwrap().unwrap()).unwrap()
        }
        /// Starts `agent` as request `id`; its handle.
        fn start(&mut self, id: u64, agent: StartAgent) -> u64 {
            self.send(
                id,
                Op::Start {
                    agent: Box::new(agent),
                },
            );
            self.next().ok.unwrap()["handle"].as_u64().unwrap()
        }
        /// Closes the input: the session ends with nothing left to undo.
        fn end(self) {
            drop(self.w);
            assert!(self.server.join().unwrap().unwrap().is_empty());
        }
    }

    /// A CBR sink and sender on loopback through the protocol: the sender's report at
    /// `join`, the figures of the sink's records at `drain`; `drain` on an agent that is not a sink is
    /// refused; a sysctl is read.
    #[test]
    fn cbr_streams_cross_the_protocol() {
        let dst = loopback_port();
        let mut so = CbrSenderOpts::new(dst, 1000.0, 200);
        so.count = Some(50);
        let mut w = Wire::new();
        // the sink first (handle 1), then the sender (handle 2)
        let sink = CbrSinkOpts::new(dst, None);
        assert_eq!(w.start(1, StartAgent::CbrSink { opts: sink }), 1);
        assert_eq!(w.start(2, StartAgent::CbrSender { opts: so }), 2);
        w.send(3, Op::Join { handle: 2 });
        let rep: CbrSenderReport = serde_json::from_value(w.next().into_result().unwrap()).unwrap();
        assert_eq!(rep.attempted, 50);
        let drain = |handle| Op::Drain {
            handle,
            expected: 50,
            idle_us: 500_000,
            of: FiguresOf {
                attempted: rep.attempted,
                send_failed: 0,
                pps: 1000.0,
                duration_s: 0.05,
                header: 42,
                rcv_ahead_ns: 0,
            },
        };
        w.send(4, drain(1));
        let got: StreamFigures = serde_json::from_value(w.next().into_result().unwrap()).unwrap();
        assert_eq!((got.figures.received, got.figures.lost), (50, 0), "{got:?}");
        assert_eq!(got.error, None);
        // every frame 200 bytes: 1000 frames/s of them over the middle 80 %
        let ir = got.figures.ir_bps.unwrap();
        assert!((1.2e6..2.0e6).contains(&ir), "{ir}");
        // a reflector is not a sink: refused, and stopped
        let refl = StartAgent::UdpReflector {
            bind: "127.0.0.1:0".parse().unwrap(),
            tos: None,
        };
        assert_eq!(w.start(5, refl), 3);
        w.send(6, drain(3));
        let e = w.next().into_result().unwrap_err();
        assert!(e.contains("not a CBR sink"), "{e}");
        w.send(
            7,
            Op::SysctlGet {
                key: "net.ipv4.tcp_rmem".into(),
            },
        );
        let v = w.next().into_result().unwrap();
        assert_eq!(v.as_str().unwrap().split_whitespace().count(), 3, "{v}");
        w.end();
    }

    /// A free UDP port on loopback.
    fn loopback_port() -> std::net::SocketAddr {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    }

    /// What the labs on real hosts read back for seed 000's and seed 001's plans: a DSCP
    /// counter on an interface (here `lo`, root only) whose report crosses the protocol,
    /// and a sink's every record (`records`) — a stream marked EF (TOS 0xb8), 30 frames.
    #[test]
    fn a_dscp_counter_and_a_sinks_records_cross_the_protocol() {
        if crate::topo::skip_unless_root("a_dscp_counter_and_a_sinks_records_cross_the_protocol") {
            return;
        }
        let dst = loopback_port();
        let mut so = CbrSenderOpts::new(dst, 1000.0, 200);
        so.count = Some(30);
        so.tos = Some(0xb8);
        let mut w = Wire::new();
        let counter = StartAgent::DscpCounter {
            ifname: "lo".into(),
        };
        assert_eq!(w.start(1, counter), 1);
        let sink = CbrSinkOpts::new(dst, None);
        assert_eq!(w.start(2, StartAgent::CbrSink { opts: sink }), 2);
        assert_eq!(w.start(3, StartAgent::CbrSender { opts: so }), 3);
        w.send(4, Op::Join { handle: 3 });
        let rep: CbrSenderReport = serde_json::from_value(w.next().into_result().unwrap()).unwrap();
        assert_eq!(rep.attempted, 30);
        w.send(
            5,
            Op::Records {
                handle: 2,
                expected: 30,
                idle_us: 500_000,
            },
        );
        let recs: crate::agents::cbr::CbrRecords =
            serde_json::from_value(w.next().into_result().unwrap()).unwrap();
        assert_eq!(recs.distinct(), 30, "{recs:?}");
        assert!(recs
            .records
            .iter()
            .all(|r| r.tos == 0xb8 && r.rx_ns >= r.tx_ns));
        w.send(6, Op::Stop { handle: 1 });
        let counted: crate::agents::DscpReport =
            serde_json::from_value(w.next().into_result().unwrap()).unwrap();
        assert_eq!(counted.error, None);
        // loopback shows each frame once; other traffic on `lo` may be counted beside it
        let ef = counted.sum_where(|f| f.dst == dst);
        assert_eq!(ef.frames[46], 30, "{counted:?}");
        assert_eq!(
            ef.payload_of(&[46]),
            30 * 158,
            "200-byte frames: 158 bytes of UDP payload"
        );
        w.end();
    }
}
