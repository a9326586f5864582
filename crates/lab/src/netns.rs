//! Test topologies: network namespaces joined by veth pairs.
//!
//! A [`Netns`] is a named network namespace (`/run/netns/NAME`, the same place `ip netns`
//! uses) that the testbed created and that is deleted when the value is dropped. Names are
//! unique per process and run: `weir-{pid}-{counter}-{label}`, so parallel runs and parallel
//! tests never collide, and leftovers of a crashed run can be found by prefix
//! ([`remove_stale_namespaces`]).
//!
//! Two ways to do things inside a namespace:
//! - [`Netns::exec`] runs a command with `ip netns exec NAME …` (the command also sees the
//!   namespace's own `/sys/class/net`);
//! - [`Netns::run`] / [`Netns::spawn`] run a Rust closure on a fresh thread that has joined the
//!   namespace with `setns(fd, CLONE_NEWNET)`. Sockets created there belong to the namespace
//!   for their whole life, whatever thread uses them later; `/proc/sys/net/…` opened there is
//!   the namespace's. Two traps: `/proc/net/…` and `/proc/self/net/…` show the namespace of
//!   the process's *main* thread (`/proc/self` is the thread-group leader) — read
//!   `/proc/thread-self/net/…` instead; and `/sys` shows the namespace it was mounted in.
//!
//! Interfaces: veth pairs are created directly inside their target namespaces
//! (`ip link add A netns X type veth peer name B netns Y`), so the same short names (`eth0`,
//! `lan0`) can be used in every namespace. Interface names are at most 15 bytes
//! (`IFNAMSIZ - 1`); [`unique_ifname`] makes short names that are unique on the machine for
//! interfaces that must live in a shared namespace (such as the host's).
//!
//! Cleanup: `Drop` deletes the namespace (`ip netns del`), which also destroys the interfaces
//! inside it — but note that the kernel tears a namespace down asynchronously, and only once
//! nothing references it any more: a socket, a thread that joined it, or an open namespace fd
//! all keep it alive (invisibly, since its name is gone). Agents must therefore be stopped
//! before or together with their topology (declare them after it, so they drop first).
//! [`cleanup_registered`] deletes every namespace this process still owns, for a Ctrl-C
//! handler, since `Drop` does not run when a signal kills the process.
//!
//! [`BridgeTopo`] is the ready-made three-host topology for testing a transparent bridge
//! (the device under test) between a sender and a receiver on one L2 segment.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Errors of the testbed (namespaces and agents).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not running as root.
    #[error("weir lab needs root (CAP_NET_ADMIN) to create network namespaces; run as root")]
    NotRoot,
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An external command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status, as text.
        status: String,
        /// What it printed on standard error (trimmed).
        stderr: String,
    },
    /// A bad argument (interface name too long, malformed address, …).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Result with the testbed's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Directory where `ip netns` keeps named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Prefix of every namespace name the testbed creates.
pub const NETNS_PREFIX: &str = "weir-";

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// `Ok` when running as root; [`Error::NotRoot`] otherwise.
pub fn require_root() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(Error::NotRoot)
    }
}

/// For tests: prints `SKIP: {test}: …` to stderr and returns `true` when the testbed cannot
/// run here (not root, or `ip netns` cannot create a namespace). Probes once per process.
pub fn skip_unless_root(test: &str) -> bool {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        require_root().map_err(|e| e.to_string())?;
        let ns = Netns::new("probe").map_err(|e| format!("`ip netns` does not work here: {e}"))?;
        drop(ns);
        Ok(())
    });
    match probe {
        Ok(()) => false,
        Err(reason) => {
            eprintln!("SKIP: {test}: needs root with working network namespaces ({reason})");
            true
        }
    }
}

fn next_counter() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// Prefix of the namespaces created by this process: `weir-{pid}-`.
pub fn process_prefix() -> String {
    format!("{NETNS_PREFIX}{}-", std::process::id())
}

/// A short interface name, unique on the machine for this process: `w{pid%10000:04}{n}{tag}`
/// (at most 15 bytes while the per-process counter stays below 10^9). Use it for interfaces
/// that live in a shared namespace; inside the testbed's own namespaces plain names do.
pub fn unique_ifname(tag: char) -> String {
    format!(
        "w{:04}{}{}",
        std::process::id() % 10_000,
        next_counter(),
        tag
    )
}

/// A pair of unique interface names for the two ends of one veth: `(…a, …b)`.
pub fn unique_veth_names() -> (String, String) {
    let n = next_counter();
    let p = std::process::id() % 10_000;
    (format!("w{p:04}{n}a"), format!("w{p:04}{n}b"))
}

/// Checks an interface name: 1..=15 bytes, no '/', ':' or whitespace, not "." or "..".
pub fn check_ifname(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > IFNAME_MAX
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if bad {
        Err(Error::Invalid(format!(
            "interface name {name:?} (1..={IFNAME_MAX} bytes, no '/', ':' or spaces)"
        )))
    } else {
        Ok(())
    }
}

/// Names of namespaces this process created and has not deleted yet.
fn registry() -> &'static Mutex<BTreeSet<String>> {
    static REG: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(BTreeSet::new()))
}

fn lock_registry() -> std::sync::MutexGuard<'static, BTreeSet<String>> {
    registry().lock().unwrap_or_else(|e| e.into_inner())
}

/// Deletes every namespace this process created and still owns (for a Ctrl-C handler; the
/// `Netns` values left behind then find their namespace gone and do nothing). Returns the
/// names it deleted.
pub fn cleanup_registered() -> Vec<String> {
    let names: Vec<String> = std::mem::take(&mut *lock_registry()).into_iter().collect();
    for name in &names {
        let _ = delete_netns(name);
    }
    names
}

/// Names of the testbed's namespaces currently present (`weir-*` in `/run/netns`).
pub fn list_testbed_namespaces() -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(NETNS_PREFIX))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Deletes testbed namespaces left behind by processes that no longer exist
/// (`weir-{pid}-…` whose pid is not alive). Returns the names it deleted.
pub fn remove_stale_namespaces() -> Result<Vec<String>> {
    require_root()?;
    let mut removed = Vec::new();
    for name in list_testbed_namespaces() {
        let pid = name[NETNS_PREFIX.len()..]
            .split('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        delete_netns(&name)?;
        removed.push(name);
    }
    Ok(removed)
}

fn delete_netns(name: &str) -> Result<()> {
    let out = run_cmd(Command::new("ip").args(["netns", "del", name]))?;
    check_output(&format!("ip netns del {name}"), &out)
}

fn sanitize_label(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if s.is_empty() {
        "ns".to_string()
    } else {
        s
    }
}

fn cmdline<S: AsRef<OsStr>>(prog: &str, args: &[S]) -> String {
    let mut s = prog.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

fn run_cmd(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null());
    cmd.output().map_err(|e| {
        let prog = cmd.get_program().to_string_lossy().into_owned();
        Error::io(format!("cannot run `{prog}`"), e)
    })
}

fn check_output(cmd: &str, out: &Output) -> Result<()> {
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            cmd: cmd.to_string(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn setns_net(fd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: fd is a valid open namespace file descriptor for the duration of the call.
    let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A network namespace. Either one the testbed created (named, deleted on drop) or the
/// namespace of this process ([`Netns::host`], never deleted).
#[derive(Debug)]
pub struct Netns {
    /// `Some(name)` for an owned named namespace, `None` for the host.
    name: Option<String>,
    /// Path of the namespace file (`/run/netns/NAME` or `/proc/PID/ns/net`).
    path: PathBuf,
    /// An open reference to the namespace, used to join it.
    fd: Option<OwnedFd>,
}

impl Netns {
    /// Creates a namespace `weir-{pid}-{counter}-{label}` with its loopback up.
    pub fn new(label: &str) -> Result<Netns> {
        require_root()?;
        let name = format!(
            "{}{}-{}",
            process_prefix(),
            next_counter(),
            sanitize_label(label)
        );
        let out = run_cmd(Command::new("ip").args(["netns", "add", &name]))?;
        check_output(&format!("ip netns add {name}"), &out)?;
        lock_registry().insert(name.clone());
        let path = Path::new(NETNS_RUN_DIR).join(&name);
        // From here on, Drop deletes the namespace even if the rest fails.
        let mut ns = Netns {
            name: Some(name),
            path,
            fd: None,
        };
        let file = File::open(&ns.path)
            .map_err(|e| Error::io(format!("open {}", ns.path.display()), e))?;
        ns.fd = Some(file.into());
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace this process runs in (its main thread's). Dropping it does nothing.
    pub fn host() -> Result<Netns> {
        let path = PathBuf::from(format!("/proc/{}/ns/net", std::process::id()));
        let file =
            File::open(&path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        Ok(Netns {
            name: None,
            path,
            fd: Some(file.into()),
        })
    }

    /// The namespace name (`weir-…`), or `"host"` for [`Netns::host`].
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("host")
    }

    /// Whether this is the host namespace.
    pub fn is_host(&self) -> bool {
        self.name.is_none()
    }

    /// Path of the namespace file, usable wherever `ip` takes `netns NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fd(&self) -> Result<&OwnedFd> {
        self.fd
            .as_ref()
            .ok_or_else(|| Error::Invalid(format!("namespace {} is closed", self.name())))
    }

    /// Runs `argv` inside the namespace (`ip netns exec NAME argv…`; for the host, directly,
    /// from the process's namespace) and returns its output whatever its exit status.
    pub fn exec<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<Output> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| Error::Invalid("exec: empty argv".into()))?;
        match &self.name {
            Some(name) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", name]).arg(prog).args(args);
                run_cmd(&mut cmd)
            }
            None => {
                let fd = self
                    .fd()?
                    .try_clone()
                    .map_err(|e| Error::io("dup netns fd", e))?;
                let mut cmd = Command::new(prog);
                cmd.args(args);
                // SAFETY: setns is async-signal-safe; fd stays open in the child until exec.
                unsafe {
                    cmd.pre_exec(move || setns_net(&fd));
                }
                run_cmd(&mut cmd)
            }
        }
    }

    /// Like [`Netns::exec`], but a non-zero exit status is an [`Error::Command`].
    pub fn exec_checked<S: AsRef<OsStr>>(&self, argv: &[S]) -> Result<Output> {
        let out = self.exec(argv)?;
        let what = match &self.name {
            Some(name) => format!("[netns {name}] {}", cmdline("", argv).trim_start()),
            None => cmdline("", argv).trim_start().to_string(),
        };
        check_output(&what, &out)?;
        Ok(out)
    }

    /// Runs `ip ARGS…` against this namespace (`ip -n NAME …`) and checks its status.
    pub fn ip<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Output> {
        let mut cmd = Command::new("ip");
        if let Some(name) = &self.name {
            cmd.args(["-n", name]);
        }
        cmd.args(args);
        let out = run_cmd(&mut cmd)?;
        let mut line = String::from("ip");
        if let Some(name) = &self.name {
            line.push_str(" -n ");
            line.push_str(name);
        }
        check_output(&cmdline(&line, args), &out)?;
        Ok(out)
    }

    /// Runs many `ip` commands in one process (`ip -n NAME -batch -`), one per line, e.g.
    /// `"addr add 10.77.1.1/24 dev eth0"`. Much faster than one process per command.
    pub fn ip_batch<S: AsRef<str>>(&self, lines: &[S]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut cmd = Command::new("ip");
        if let Some(name) = &self.name {
            cmd.args(["-n", name]);
        }
        cmd.args(["-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io("cannot run `ip -batch`", e))?;
        let mut text = String::new();
        for l in lines {
            text.push_str(l.as_ref());
            text.push('\n');
        }
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
        let out = child
            .wait_with_output()
            .map_err(|e| Error::io("wait for `ip -batch`", e))?;
        let _ = writer.join();
        check_output(
            &format!("ip -n {} -batch - ({} commands)", self.name(), lines.len()),
            &out,
        )
    }

    /// Runs `f` on a fresh thread that has joined this namespace and returns its result.
    /// A panic in `f` is propagated to the caller. Panics if the namespace cannot be joined
    /// (see [`Netns::try_run`]).
    pub fn run<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        self.try_run(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Netns::run`], but failing to join the namespace is an error rather than a panic.
    /// A panic in `f` is still propagated (resumed) to the caller.
    pub fn try_run<F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let fd = self
            .fd()?
            .try_clone()
            .map_err(|e| Error::io("dup netns fd", e))?;
        let name = self.name().to_string();
        std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name(format!("netns:{name}"))
                .spawn_scoped(s, move || {
                    setns_net(&fd).map_err(|e| {
                        Error::io(format!("setns into network namespace {name}"), e)
                    })?;
                    drop(fd);
                    Ok(f())
                })
                .map_err(|e| Error::io("spawn thread", e))?;
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Runs `f` concurrently on a new thread that has joined this namespace. The thread panics
    /// (the join returns `Err`) if the namespace cannot be joined. The thread keeps the
    /// namespace alive until it ends.
    pub fn spawn<F, R>(&self, f: F) -> Result<JoinHandle<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let fd = self
            .fd()?
            .try_clone()
            .map_err(|e| Error::io("dup netns fd", e))?;
        let name = self.name().to_string();
        std::thread::Builder::new()
            .name(format!("netns:{name}"))
            .spawn(move || {
                if let Err(e) = setns_net(&fd) {
                    panic!("setns into network namespace {name} failed: {e}");
                }
                drop(fd);
                f()
            })
            .map_err(|e| Error::io("spawn thread", e))
    }

    /// Writes `value` to sysctl `key` inside the namespace. `key` is either dotted
    /// (`net.ipv4.tcp_sack`) or a path below `/proc/sys` (`net/ipv4/conf/eth0.100/forwarding`,
    /// needed when a component contains a dot).
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        let path = sysctl_path(key)?;
        let value = value.to_string();
        self.try_run(move || {
            std::fs::write(&path, value.as_bytes())
                .map_err(|e| Error::io(format!("write {value:?} to {}", path.display()), e))
        })?
    }

    /// Reads sysctl `key` inside the namespace (trimmed).
    pub fn get_sysctl(&self, key: &str) -> Result<String> {
        let path = sysctl_path(key)?;
        self.try_run(move || {
            std::fs::read_to_string(&path)
                .map(|s| s.trim().to_string())
                .map_err(|e| Error::io(format!("read {}", path.display()), e))
        })?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.fd = None;
        let Some(name) = self.name.take() else { return };
        let owned = lock_registry().remove(&name);
        if !owned {
            return; // already removed by cleanup_registered
        }
        if let Err(e) = delete_netns(&name) {
            if Path::new(NETNS_RUN_DIR).join(&name).exists() {
                eprintln!("weir lab: failed to delete network namespace {name}: {e}");
            }
        }
    }
}

fn sysctl_path(key: &str) -> Result<PathBuf> {
    if key.is_empty() || key.contains("..") {
        return Err(Error::Invalid(format!("sysctl key {key:?}")));
    }
    let rel = if key.contains('/') {
        key.trim_start_matches('/').to_string()
    } else {
        key.replace('.', "/")
    };
    Ok(Path::new("/proc/sys").join(rel))
}

/// Creates a veth pair with end `a_if` in namespace `a` and end `b_if` in `b` (both down).
pub fn link_veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
    check_ifname(a_if)?;
    check_ifname(b_if)?;
    let a_path = a.path().to_string_lossy().into_owned();
    let b_path = b.path().to_string_lossy().into_owned();
    let args = [
        "link", "add", a_if, "netns", &a_path, "type", "veth", "peer", "name", b_if, "netns",
        &b_path,
    ];
    let out = run_cmd(Command::new("ip").args(args))?;
    check_output(&cmdline("ip", &args), &out)
}

/// Adds an address (`"10.1.1.2/24"`, `"fd00::2/64"`) to an interface. Call it many times for
/// IP aliasing.
pub fn add_addr(ns: &Netns, ifname: &str, cidr: &str) -> Result<()> {
    check_ifname(ifname)?;
    let (addr, _len) = parse_cidr(cidr)?;
    if addr.is_ipv6() {
        // No duplicate address detection: the address is usable at once.
        ns.ip(&["addr", "add", cidr, "dev", ifname, "nodad"])?;
    } else {
        ns.ip(&["addr", "add", cidr, "dev", ifname])?;
    }
    Ok(())
}

/// Brings an interface up.
pub fn set_up(ns: &Netns, ifname: &str) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "up"])?;
    Ok(())
}

/// Whether an interface is administratively and operationally up (flags `UP` and
/// `LOWER_UP`, operstate `UP` or `UNKNOWN`).
pub fn is_link_up(ns: &Netns, ifname: &str) -> Result<bool> {
    check_ifname(ifname)?;
    let out = ns.ip(&["-o", "link", "show", "dev", ifname])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let flags = text
        .split_once('<')
        .and_then(|(_, r)| r.split_once('>'))
        .map(|(f, _)| f);
    let Some(flags) = flags else { return Ok(false) };
    let has = |f: &str| flags.split(',').any(|x| x == f);
    let mut words = text.split_whitespace();
    let state = words
        .by_ref()
        .find(|w| *w == "state")
        .and_then(|_| words.next());
    Ok(has("UP") && has("LOWER_UP") && matches!(state, Some("UP") | Some("UNKNOWN")))
}

/// Waits until [`is_link_up`] holds, polling every 5 ms, for at most `timeout`.
pub fn wait_link_up(ns: &Netns, ifname: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if is_link_up(ns, ifname)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Invalid(format!(
                "{ifname} in {} not operationally up after {timeout:?}",
                ns.name()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Brings an interface down.
pub fn set_down(ns: &Netns, ifname: &str) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "down"])?;
    Ok(())
}

/// Adds a route, written as after `ip route add`: `"10.2.0.0/16 via 10.1.1.1"`,
/// `"default via 10.1.1.1 dev eth0"`.
pub fn add_route(ns: &Netns, route: &str) -> Result<()> {
    let mut args = vec!["route", "add"];
    args.extend(route.split_whitespace());
    if args.len() == 2 {
        return Err(Error::Invalid("empty route".into()));
    }
    ns.ip(&args)?;
    Ok(())
}

/// Sets a sysctl inside the namespace (see [`Netns::set_sysctl`]).
pub fn set_sysctl(ns: &Netns, key: &str, value: &str) -> Result<()> {
    ns.set_sysctl(key, value)
}

/// Sets an interface's MTU.
pub fn set_mtu(ns: &Netns, ifname: &str, mtu: u32) -> Result<()> {
    check_ifname(ifname)?;
    ns.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string()])?;
    Ok(())
}

/// Sets the TCP options a namespace's sockets negotiate: SACK (`net.ipv4.tcp_sack`),
/// timestamps (`net.ipv4.tcp_timestamps`) and window scaling (`net.ipv4.tcp_window_scaling`).
/// These are per-namespace sysctls, not per-socket options: give senders that need different
/// settings different namespaces (the options of a connection are what both ends agree on,
/// so setting them on the sender's side is enough to turn them off).
pub fn set_tcp_options(
    ns: &Netns,
    sack: bool,
    timestamps: bool,
    window_scaling: bool,
) -> Result<()> {
    let b = |v: bool| if v { "1" } else { "0" };
    ns.set_sysctl("net.ipv4.tcp_sack", b(sack))?;
    ns.set_sysctl("net.ipv4.tcp_timestamps", b(timestamps))?;
    ns.set_sysctl("net.ipv4.tcp_window_scaling", b(window_scaling))?;
    Ok(())
}

/// Parses `"10.1.1.2/24"` into the address and prefix length.
pub fn parse_cidr(cidr: &str) -> Result<(IpAddr, u8)> {
    let bad = || Error::Invalid(format!("address {cidr:?} (want ADDR/LEN)"));
    let (a, l) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

/// The testbed for a transparent bridge: three namespaces on one L2 segment.
///
/// ```text
///   snd (10.77.0.1/24)            dut (no addresses)            rcv (10.77.0.2/24)
///     eth0 ──────────────────── lan0        wan0 ──────────────────── eth0
/// ```
///
/// The DUT's interfaces are up, carry no addresses, and the DUT has IPv6 disabled
/// (`net.ipv6.conf.{all,default}.disable_ipv6=1`) so that it sends nothing of its own. Until a
/// DUT forwards between `lan0` and `wan0` (weir, or [`BridgeTopo::with_kernel_bridge`]), the
/// sender and the receiver cannot reach each other.
///
/// Source-address aliases ([`BridgeTopo::add_sender_aliases`]) live in further /24 subnets of
/// 10.77.0.0/16 on the same L2 segment: `10.77.S.H/24` on the sender with S = 1, 2, … and
/// H = 1..=253, and for every such subnet the receiver gets `10.77.S.254/24` — only so that it
/// has an on-link route back to the aliases. Sessions still connect to the receiver's main
/// address [`BridgeTopo::RCV_ADDR`] (10.77.0.2), binding their source to an alias.
#[derive(Debug)]
pub struct BridgeTopo {
    /// The sender host.
    pub snd: Netns,
    /// The device under test.
    pub dut: Netns,
    /// The receiver host.
    pub rcv: Netns,
    /// Sender interface (`eth0`).
    pub snd_if: String,
    /// DUT interface facing the sender (`lan0`).
    pub dut_lan: String,
    /// DUT interface facing the receiver (`wan0`).
    pub dut_wan: String,
    /// Receiver interface (`eth0`).
    pub rcv_if: String,
    /// The WAN-emulator stage between the DUT and the receiver, when made with
    /// [`BridgeTopo::with_wan_stage`]: `dut wan0 ── lan0 emu wan0 ── eth0 rcv`.
    pub emu: Option<Netns>,
    /// How many sender aliases exist so far.
    aliases: Mutex<usize>,
    /// Whether the kernel bridge is in place.
    kernel_bridge: Mutex<bool>,
}

impl BridgeTopo {
    /// The sender's main address.
    pub const SND_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    /// The receiver's main address.
    pub const RCV_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    /// Name of the kernel bridge made by [`BridgeTopo::with_kernel_bridge`].
    pub const KERNEL_BRIDGE: &'static str = "br0";
    /// Most aliases [`BridgeTopo::add_sender_aliases`] can make (253 per /24, subnets 1..=254).
    pub const MAX_ALIASES: usize = 253 * 254;
    /// Longest wait for interfaces to come up.
    pub const LINK_UP_TIMEOUT: Duration = Duration::from_secs(3);

    /// Creates the three namespaces (`{label}-snd`, `{label}-dut`, `{label}-rcv`), the two veth
    /// pairs and the addresses; returns once every interface is operationally up. On error,
    /// whatever was made is removed.
    pub fn new(label: &str) -> Result<BridgeTopo> {
        Self::build(label, false)
    }

    /// Like [`BridgeTopo::new`], with a fourth namespace `{label}-emu` between the DUT and
    /// the receiver (seed 000's wan-emu position: the sink-side last hop). Its interfaces
    /// are `lan0` (towards the DUT) and `wan0` (towards the receiver); until something
    /// forwards there too (a weir emulator, or [`BridgeTopo::with_kernel_bridge_in`]),
    /// nothing passes.
    pub fn with_wan_stage(label: &str) -> Result<BridgeTopo> {
        Self::build(label, true)
    }

    fn build(label: &str, wan_stage: bool) -> Result<BridgeTopo> {
        let snd = Netns::new(&format!("{label}-snd"))?;
        let dut = Netns::new(&format!("{label}-dut"))?;
        let emu = if wan_stage {
            Some(Netns::new(&format!("{label}-emu"))?)
        } else {
            None
        };
        let rcv = Netns::new(&format!("{label}-rcv"))?;
        let topo = BridgeTopo {
            emu,
            snd,
            dut,
            rcv,
            snd_if: "eth0".into(),
            dut_lan: "lan0".into(),
            dut_wan: "wan0".into(),
            rcv_if: "eth0".into(),
            aliases: Mutex::new(0),
            kernel_bridge: Mutex::new(false),
        };
        // Before the veths exist, so they are born without IPv6.
        for ns in std::iter::once(&topo.dut).chain(topo.emu.as_ref()) {
            ns.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
            ns.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        }
        link_veth(&topo.snd, &topo.snd_if, &topo.dut, &topo.dut_lan)?;
        match &topo.emu {
            None => link_veth(&topo.dut, &topo.dut_wan, &topo.rcv, &topo.rcv_if)?,
            Some(emu) => {
                link_veth(&topo.dut, &topo.dut_wan, emu, "lan0")?;
                link_veth(emu, "wan0", &topo.rcv, &topo.rcv_if)?;
                set_up(emu, "lan0")?;
                set_up(emu, "wan0")?;
            }
        }
        add_addr(&topo.snd, &topo.snd_if, &format!("{}/24", Self::SND_ADDR))?;
        add_addr(&topo.rcv, &topo.rcv_if, &format!("{}/24", Self::RCV_ADDR))?;
        set_up(&topo.dut, &topo.dut_lan)?;
        set_up(&topo.dut, &topo.dut_wan)?;
        set_up(&topo.snd, &topo.snd_if)?;
        set_up(&topo.rcv, &topo.rcv_if)?;
        for (ns, ifname) in topo.interfaces() {
            wait_link_up(ns, ifname, Self::LINK_UP_TIMEOUT)?;
        }
        // a veth end has carrier only once its peer is up too: wait after all are up
        if let Some(emu) = &topo.emu {
            wait_link_up(emu, "lan0", Self::LINK_UP_TIMEOUT)?;
            wait_link_up(emu, "wan0", Self::LINK_UP_TIMEOUT)?;
        }
        Ok(topo)
    }

    /// The four veth ends at the hosts and the DUT, with their namespaces: sender, DUT LAN
    /// side, DUT WAN side, receiver (the WAN stage's ends are not included).
    pub fn interfaces(&self) -> [(&Netns, &str); 4] {
        [
            (&self.snd, self.snd_if.as_str()),
            (&self.dut, self.dut_lan.as_str()),
            (&self.dut, self.dut_wan.as_str()),
            (&self.rcv, self.rcv_if.as_str()),
        ]
    }

    /// The three namespaces' names.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut v = vec![self.snd.name().to_string(), self.dut.name().to_string()];
        if let Some(e) = &self.emu {
            v.push(e.name().to_string());
        }
        v.push(self.rcv.name().to_string());
        v
    }

    /// Adds `n` more source addresses to the sender (see the type's documentation for the
    /// plan) and returns them. Addresses are added in one `ip -batch` per namespace.
    pub fn add_sender_aliases(&self, n: usize) -> Result<Vec<IpAddr>> {
        let mut count = self.aliases.lock().unwrap_or_else(|e| e.into_inner());
        if *count + n > Self::MAX_ALIASES {
            return Err(Error::Invalid(format!(
                "{} aliases requested, at most {} possible",
                *count + n,
                Self::MAX_ALIASES
            )));
        }
        let mut addrs = Vec::with_capacity(n);
        let mut snd_cmds = Vec::with_capacity(n);
        let mut rcv_cmds = Vec::new();
        for i in *count..*count + n {
            let subnet = (1 + i / 253) as u8;
            let host = (1 + i % 253) as u8;
            if host == 1 {
                rcv_cmds.push(format!(
                    "addr add 10.77.{subnet}.254/24 dev {}",
                    self.rcv_if
                ));
            }
            snd_cmds.push(format!(
                "addr add 10.77.{subnet}.{host}/24 dev {}",
                self.snd_if
            ));
            addrs.push(IpAddr::V4(Ipv4Addr::new(10, 77, subnet, host)));
        }
        self.snd.ip_batch(&snd_cmds)?;
        self.rcv.ip_batch(&rcv_cmds)?;
        *count += n;
        Ok(addrs)
    }

    /// Makes the DUT a plain Linux bridge (`br0` with `lan0` and `wan0` as ports, STP off,
    /// forward delay 0), the baseline to compare a DUT with. Idempotent.
    pub fn with_kernel_bridge(&self) -> Result<()> {
        let mut on = self.kernel_bridge.lock().unwrap_or_else(|e| e.into_inner());
        if *on {
            return Ok(());
        }
        let br = Self::KERNEL_BRIDGE;
        self.dut.ip_batch(&[
            format!("link add {br} type bridge stp_state 0 forward_delay 0"),
            format!("link set dev {} master {br}", self.dut_lan),
            format!("link set dev {} master {br}", self.dut_wan),
            format!("link set dev {br} up"),
        ])?;
        *on = true;
        wait_link_up(&self.dut, br, Self::LINK_UP_TIMEOUT)?;
        Ok(())
    }

    /// Makes the WAN stage a plain kernel bridge (`br0` over its `lan0` and `wan0`): the
    /// stage forwards without impairment. An error without a WAN stage.
    pub fn with_kernel_bridge_in_wan_stage(&self) -> Result<()> {
        let emu = self
            .emu
            .as_ref()
            .ok_or_else(|| Error::Invalid("this topology has no WAN stage".into()))?;
        let br = Self::KERNEL_BRIDGE;
        emu.ip_batch(&[
            format!("link add {br} type bridge stp_state 0 forward_delay 0"),
            format!("link set dev lan0 master {br}"),
            format!("link set dev wan0 master {br}"),
            format!("link set dev {br} up"),
        ])?;
        wait_link_up(emu, br, Self::LINK_UP_TIMEOUT)
    }

    /// Gives the sender the addresses `addrs` (as /32s on its interface) and the receiver an
    /// on-link route back to each, so that sessions can bind to them whatever subnet a
    /// policy's rules expect (seed 000's IP aliasing). Addresses already present are an
    /// error from `ip`.
    pub fn add_sender_addrs(&self, addrs: &[Ipv4Addr]) -> Result<()> {
        if addrs.is_empty() {
            return Ok(());
        }
        let snd: Vec<String> = addrs
            .iter()
            .map(|a| format!("addr add {a}/32 dev {}", self.snd_if))
            .collect();
        let rcv: Vec<String> = addrs
            .iter()
            .map(|a| format!("route add {a}/32 dev {}", self.rcv_if))
            .collect();
        self.snd.ip_batch(&snd)?;
        self.rcv.ip_batch(&rcv)
    }

    /// Removes the kernel bridge again (the DUT interfaces stay up, unbridged).
    pub fn without_kernel_bridge(&self) -> Result<()> {
        let mut on = self.kernel_bridge.lock().unwrap_or_else(|e| e.into_inner());
        if !*on {
            return Ok(());
        }
        self.dut.ip(&["link", "del", "dev", Self::KERNEL_BRIDGE])?;
        *on = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifnames_are_short_and_unique() {
        let (a, b) = unique_veth_names();
        assert!(a.len() <= IFNAME_MAX && b.len() <= IFNAME_MAX, "{a} {b}");
        assert_ne!(a, b);
        assert_ne!(unique_ifname('x'), unique_ifname('x'));
        check_ifname(&a).unwrap();
        assert!(check_ifname("0123456789abcdef").is_err());
        assert!(check_ifname("a/b").is_err());
        assert!(check_ifname("").is_err());
    }

    #[test]
    fn sysctl_paths() {
        assert_eq!(
            sysctl_path("net.ipv4.tcp_sack").unwrap(),
            Path::new("/proc/sys/net/ipv4/tcp_sack")
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/forwarding").unwrap(),
            Path::new("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        );
        assert!(sysctl_path("net/../../etc").is_err());
    }

    #[test]
    fn cidr_parsing() {
        assert_eq!(
            parse_cidr("10.1.1.2/24").unwrap(),
            ("10.1.1.2".parse().unwrap(), 24)
        );
        assert_eq!(parse_cidr("fd00::1/64").unwrap().1, 64);
        assert!(parse_cidr("10.1.1.2").is_err());
        assert!(parse_cidr("10.1.1.2/33").is_err());
    }

    #[test]
    fn labels_are_sanitized() {
        assert_eq!(sanitize_label("a b/c"), "a_b_c");
        assert_eq!(sanitize_label(""), "ns");
    }
}
