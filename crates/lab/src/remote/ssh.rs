//! The lab's end of the agent protocol: one `ssh` process per remote host, running
//! `weir agent` there, requests written to its standard input, replies read from its
//! standard output by a reader thread and handed to the caller waiting for that `id`.
//!
//! SSH is the system's own client with the user's configuration, keys, agent and
//! `known_hosts`: `ssh -T -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=5
//! -o ServerAliveCountMax=3 [ssh_options…] TARGET -- WEIR agent`. BatchMode makes a host that
//! would ask for a password or an unknown host key fail at once instead of waiting for a
//! terminal. Nothing else authenticates or carries the lab's traffic.
//!
//! **Failures** are named by the host: ssh's exit status 255 (connection, authentication,
//! host key) with ssh's own message; 127 (the remote shell did not find `weir`); the agent
//! dying mid-run (end of its output: every waiting call fails at once with what ssh and
//! the agent printed). **Cleanup**: dropping an [`SshHost`] closes the agent's input, which
//! makes it stop its agents and undo its changes ([`super::serve`]), waits for it (at most
//! [`CLOSE_TIMEOUT`]) and kills ssh if it is still there.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{Hello, Op, Reply, Request, StartAgent, Started, PROTOCOL};
use crate::tests::streams::{FiguresOf, StreamFigures};
use crate::{Error, Result};

/// Longest wait for `hello` (ssh's connect, authentication, and the agent's start).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a reply other than a `join`'s.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the agent to clean up and exit once its input is closed.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);
/// How much of ssh's standard error is kept for messages (the end of it).
const STDERR_KEEP: usize = 4096;
/// How often the lab pings each agent, so that an agent whose lab vanished without closing
/// the channel ends its session ([`super::IDLE_TIMEOUT`]).
pub const PING_EVERY: Duration = Duration::from_secs(5);

/// How to reach a host (a topology file's `[hosts.NAME]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshTarget {
    /// `[user@]host` as `ssh` takes it (a `Host` of `~/.ssh/config` works).
    pub ssh: String,
    /// More `ssh` options, one word each (`["-p", "2222", "-i", "/root/.ssh/lab"]`).
    #[serde(default)]
    pub ssh_options: Vec<String>,
    /// The remote command that runs weir (default `weir`: found on the remote `PATH`).
    #[serde(default = "default_weir")]
    pub weir: String,
}

fn default_weir() -> String {
    "weir".into()
}

/// A host's clock against this machine's (`CLOCK_REALTIME`), from the `clock` exchange with
/// the shortest round trip (NTP's offset estimate).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The host's clock minus this machine's, ms.
    pub offset_ms: f64,
    /// The estimate's bound: half the exchange's round trip, ms (the true offset is
    /// within `offset_ms ± uncertainty_ms`).
    pub uncertainty_ms: f64,
}

/// The widest bound on two hosts' clock offsets (summed) for one-way figures between
/// them, ms.
pub const ONE_WAY_BOUND_MS: f64 = 1.0;

impl ClockOffset {
    /// This host's and `other`'s offsets are known well enough for one-way delays between
    /// them: their bounds sum to at most [`ONE_WAY_BOUND_MS`].
    pub fn one_way_with(&self, other: &ClockOffset) -> bool {
        self.uncertainty_ms + other.uncertainty_ms <= ONE_WAY_BOUND_MS
    }
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, mpsc::Sender<Reply>>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    stderr: Mutex<String>,
    /// The agent's input (`None` once closed).
    stdin: Mutex<Option<ChildStdin>>,
    /// The next request id.
    next: AtomicU64,
    /// Set when the host is being released: the pinger stops.
    closing: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Writes one request line; false when the channel is closed.
    fn send(&self, id: u64, op: Op) -> bool {
        let Ok(mut line) = serde_json::to_string(&Request { id, op }) else {
            return false;
        };
        line.push('\n');
        match lock(&self.stdin).as_mut() {
            Some(w) => w.write_all(line.as_bytes()).and_then(|_| w.flush()).is_ok(),
            None => false,
        }
    }

    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A remote host with `weir agent` running on it over SSH.
pub struct SshHost {
    name: String,
    target: SshTarget,
    child: Mutex<Child>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    hello: Hello,
}

impl std::fmt::Debug for SshHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshHost")
            .field("name", &self.name)
            .field("ssh", &self.target.ssh)
            .finish_non_exhaustive()
    }
}

impl SshHost {
    /// The ssh command line for `target` (without the program name).
    pub fn ssh_args(target: &SshTarget) -> Vec<String> {
        let mut a: Vec<String> = [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(target.ssh_options.iter().cloned());
        a.push(target.ssh.clone());
        a.push("--".into());
        a.push(format!("{} agent", target.weir));
        a
    }

    /// Starts `weir agent` on the host called `name` (the topology's name, used in every
    /// message) and greets it: an error names the host and says why it failed.
    pub fn connect(name: &str, target: &SshTarget) -> Result<SshHost> {
        let mut child = Command::new("ssh")
            .args(Self::ssh_args(target))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(format!("{name}: run ssh"), e))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let shared = Arc::new(Shared {
            stdin: Mutex::new(child.stdin.take()),
            next: AtomicU64::new(1),
            ..Shared::default()
        });
        let mut threads = Vec::new();
        let sh = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name(format!("ssh-out:{name}"))
                .spawn(move || read_replies(stdout, &sh))
                .map_err(|e| Error::io("spawn thread", e))?,
        );
        let sh = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name(format!("ssh-err:{name}"))
                .spawn(move || keep_stderr(stderr, &sh))
                .map_err(|e| Error::io("spawn thread", e))?,
        );
        let mut host = SshHost {
            name: name.to_string(),
            target: target.clone(),
            child: Mutex::new(child),
            shared,
            threads,
            hello: Hello {
                protocol: 0,
                version: String::new(),
                hostname: String::new(),
            },
        };
        let v = host.call_timeout(Op::Hello, Some(HELLO_TIMEOUT))?;
        let hello: Hello =
            serde_json::from_value(v).map_err(|e| Error::Invalid(format!("{name}: hello: {e}")))?;
        if hello.protocol != PROTOCOL {
            return Err(Error::Invalid(format!(
                "{name}: weir {} on {} speaks agent protocol {}, this weir ({}) speaks {PROTOCOL}: \
                 install the same weir on both",
                hello.version,
                target.ssh,
                hello.protocol,
                env!("CARGO_PKG_VERSION")
            )));
        }
        host.hello = hello;
        let sh = Arc::clone(&host.shared);
        host.threads.push(
            std::thread::Builder::new()
                .name(format!("ssh-ping:{name}"))
                .spawn(move || ping(&sh))
                .map_err(|e| Error::io("spawn thread", e))?,
        );
        Ok(host)
    }

    /// The topology's name of the host.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the agent said in `hello`.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Sends `op` and waits for its reply ([`CALL_TIMEOUT`]; a `join` waits as long as it
    /// takes, or until the channel ends).
    pub fn call(&self, op: Op) -> Result<Value> {
        let timeout = match op {
            Op::Join { .. } | Op::Drain { .. } => None,
            _ => Some(CALL_TIMEOUT),
        };
        self.call_timeout(op, timeout)
    }

    fn call_timeout(&self, op: Op, timeout: Option<Duration>) -> Result<Value> {
        let id = self.shared.next_id();
        let what = op_name(&op);
        let (tx, rx) = mpsc::channel();
        {
            let mut p = lock(&self.shared.pending);
            if p.closed {
                return Err(self.gone());
            }
            p.waiting.insert(id, tx);
        }
        if !self.shared.send(id, op) {
            lock(&self.shared.pending).waiting.remove(&id);
            return Err(self.gone());
        }
        let reply = match timeout {
            Some(t) => rx.recv_timeout(t).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => Error::Invalid(format!(
                    "{}: no answer to `{what}` from {} in {t:?}",
                    self.name, self.target.ssh
                )),
                mpsc::RecvTimeoutError::Disconnected => self.gone(),
            }),
            None => rx.recv().map_err(|_| self.gone()),
        };
        lock(&self.shared.pending).waiting.remove(&id);
        reply?.into_result().map_err(|e| {
            Error::Invalid(format!("{} ({}): {what}: {e}", self.name, self.target.ssh))
        })
    }

    /// Whether the channel is still open (the agent has not ended).
    pub fn is_alive(&self) -> bool {
        !lock(&self.shared.pending).closed
    }

    /// Why the channel is gone: ssh's exit status and what it and the agent printed.
    pub fn gone(&self) -> Error {
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match lock(&self.child).try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break None,
            }
        };
        let said = lock(&self.shared.stderr).trim().to_string();
        let said = if said.is_empty() {
            String::new()
        } else {
            format!(": {said}")
        };
        let (name, ssh) = (&self.name, &self.target.ssh);
        Error::Invalid(match status.and_then(|s| s.code()) {
            Some(255) => format!("{name}: ssh {ssh} failed (exit status 255){said}"),
            Some(127) => format!(
                "{name}: `{}` was not found on {ssh} (exit status 127){said}; install weir \
                 there, or give its path as `weir = \"/path/to/weir\"` under [hosts.{name}]",
                self.target.weir
            ),
            Some(c) => format!("{name}: the agent on {ssh} ended with exit status {c}{said}"),
            None => format!("{name}: the SSH session to {ssh} ended{said}"),
        })
    }

    /// Starts an agent; its handle.
    pub fn start(&self, agent: StartAgent) -> Result<u64> {
        let v = self.call(Op::Start {
            agent: Box::new(agent),
        })?;
        let s: Started = serde_json::from_value(v)
            .map_err(|e| Error::Invalid(format!("{}: start: {e}", self.name)))?;
        Ok(s.handle)
    }

    /// Stops (or, with `join`, waits for) agent `handle` and reads its report.
    pub fn finish<R: DeserializeOwned>(&self, handle: u64, join: bool) -> Result<R> {
        let op = if join {
            Op::Join { handle }
        } else {
            Op::Stop { handle }
        };
        let v = self.call(op)?;
        serde_json::from_value(v)
            .map_err(|e| Error::Invalid(format!("{}: agent {handle}'s report: {e}", self.name)))
    }

    /// Waits until CBR sink `handle` has `expected` packets or none came for `idle`, and
    /// reads the figures of what came ([`Op::Drain`]).
    pub fn drain(
        &self,
        handle: u64,
        expected: u64,
        idle: Duration,
        of: FiguresOf,
    ) -> Result<StreamFigures> {
        let v = self.call(Op::Drain {
            handle,
            expected,
            idle_us: idle.as_micros() as u64,
            of,
        })?;
        serde_json::from_value(v)
            .map_err(|e| Error::Invalid(format!("{}: agent {handle}'s figures: {e}", self.name)))
    }

    /// Waits as [`SshHost::drain`] and reads every record of what came ([`Op::Records`]).
    pub fn records(
        &self,
        handle: u64,
        expected: u64,
        idle: Duration,
    ) -> Result<crate::agents::cbr::CbrRecords> {
        let v = self.call(Op::Records {
            handle,
            expected,
            idle_us: idle.as_micros() as u64,
        })?;
        serde_json::from_value(v)
            .map_err(|e| Error::Invalid(format!("{}: agent {handle}'s records: {e}", self.name)))
    }

    /// The host's clock offset from `n` `clock` exchanges (the one with the shortest round
    /// trip counts).
    pub fn clock_offset(&self, n: usize) -> Result<ClockOffset> {
        let mut best: Option<(u64, f64)> = None;
        for _ in 0..n.max(1) {
            let t1 = weir_io::clock::realtime_ns();
            let v = self.call(Op::Clock)?;
            let t3 = weir_io::clock::realtime_ns();
            let t2 = v.as_u64().ok_or_else(|| {
                Error::Invalid(format!("{}: clock: not a number: {v}", self.name))
            })?;
            let rtt = t3.saturating_sub(t1);
            let offset = t2 as f64 - (t1 as f64 + t3 as f64) / 2.0;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        let (rtt, offset) = best.expect("n >= 1");
        Ok(ClockOffset {
            offset_ms: offset / 1e6,
            uncertainty_ms: rtt as f64 / 2e6,
        })
    }
}

impl Drop for SshHost {
    /// Closes the agent's input (it stops its agents and undoes its changes), waits for it,
    /// kills ssh if it is still there.
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Relaxed);
        lock(&self.shared.stdin).take();
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        let mut child = lock(&self.child);
        loop {
            match child.try_wait() {
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                _ => break,
            }
        }
        drop(child);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Hello => "hello",
        Op::Clock => "clock",
        Op::Ping => "ping",
        Op::Sysctl { .. } => "sysctl",
        Op::Offloads { .. } => "offloads",
        Op::LinkUp { .. } => "link_up",
        Op::AddrAdd { .. } => "addr_add",
        Op::RouteAdd { .. } => "route_add",
        Op::Start { .. } => "start",
        Op::Stop { .. } => "stop",
        Op::Join { .. } => "join",
        Op::Drain { .. } => "drain",
        Op::Records { .. } => "records",
        Op::SysctlGet { .. } => "sysctl_get",
    }
}

/// The pinger thread: a `ping` every [`PING_EVERY`] until the host is released or the
/// channel closes (its replies are for nobody and dropped by the reader).
fn ping(shared: &Shared) {
    let step = Duration::from_millis(100);
    let mut since = Duration::ZERO;
    while !shared.closing.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        since += step;
        if since >= PING_EVERY {
            since = Duration::ZERO;
            if !shared.send(shared.next_id(), Op::Ping) {
                return;
            }
        }
    }
}

/// The reader thread: each reply to whoever waits for its id; at the end of the output,
/// every waiting call fails.
fn read_replies(out: impl Read, shared: &Shared) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Reply>(&line) {
            Ok(r) => {
                if let Some(tx) = lock(&shared.pending).waiting.remove(&r.id) {
                    let _ = tx.send(r);
                } else if let Some(e) = r.error {
                    push_stderr(shared, &format!("agent: {e}\n"));
                }
            }
            // a login banner or a remote shell's noise on standard output
            Err(_) => push_stderr(shared, &format!("{line}\n")),
        }
    }
    let mut p = lock(&shared.pending);
    p.closed = true;
    p.waiting.clear();
}

fn keep_stderr(err: impl Read, shared: &Shared) {
    let mut r = BufReader::new(err);
    let mut buf = [0u8; 1024];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        push_stderr(shared, &String::from_utf8_lossy(&buf[..n]));
    }
}

fn push_stderr(shared: &Shared, text: &str) {
    let mut s = lock(&shared.stderr);
    s.push_str(text);
    if s.len() > STDERR_KEEP {
        let mut cut = s.len() - STDERR_KEEP;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds of 0.4 and 0.6 ms sum to the 1 ms limit: one-way figures count; 0.5 and
    /// 0.6 ms do not.
    #[test]
    fn one_way_needs_bounds_summing_to_1_ms() {
        let c = |u| ClockOffset {
            offset_ms: 3.0,
            uncertainty_ms: u,
        };
        assert!(c(0.4).one_way_with(&c(0.6)));
        assert!(!c(0.5).one_way_with(&c(0.6)));
    }

    #[test]
    fn the_command_line_keeps_the_users_ssh_and_runs_the_agent() {
        let t = SshTarget {
            ssh: "root@10.0.0.5".into(),
            ssh_options: vec!["-p".into(), "2222".into()],
            weir: "/opt/weir/bin/weir".into(),
        };
        let a = SshHost::ssh_args(&t);
        assert_eq!(a[0], "-T");
        assert!(a.windows(2).any(|w| w == ["-o", "BatchMode=yes"]));
        let n = a.len();
        assert_eq!(
            &a[n - 5..],
            [
                "-p",
                "2222",
                "root@10.0.0.5",
                "--",
                "/opt/weir/bin/weir agent"
            ]
        );
    }

    #[test]
    fn a_target_reads_with_defaults() {
        let t: SshTarget = serde_json::from_str(r#"{"ssh":"h1"}"#).unwrap();
        assert_eq!(t.weir, "weir");
        assert!(t.ssh_options.is_empty());
    }
}
