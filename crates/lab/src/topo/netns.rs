//! Network namespaces the testbed creates, and running things inside them.
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
//! Cleanup: `Drop` deletes the namespace (`ip netns del`), which also destroys the interfaces
//! inside it — but note that the kernel tears a namespace down asynchronously, and only once
//! nothing references it any more: a socket, a thread that joined it, or an open namespace fd
//! all keep it alive (invisibly, since its name is gone). Agents must therefore be stopped
//! before or together with their topology (declare them after it, so they drop first).
//! [`cleanup_registered`] deletes every namespace this process still owns, for a Ctrl-C
//! handler, since `Drop` does not run when a signal kills the process.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::sys::{check_output, cmdline, run_cmd, run_with_stdin};
use crate::{Error, Result};

/// Directory where `ip netns` keeps named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Prefix of every namespace name the testbed creates.
pub const NETNS_PREFIX: &str = "weir-";

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

pub(super) fn next_counter() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// Prefix of the namespaces created by this process: `weir-{pid}-`.
pub fn process_prefix() -> String {
    format!("{NETNS_PREFIX}{}-", std::process::id())
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
        cmd.args(["-batch", "-"]);
        let mut text = String::new();
        for l in lines {
            text.push_str(l.as_ref());
            text.push('\n');
        }
        let out = run_with_stdin(&mut cmd, text, "ip -batch")?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn labels_are_sanitized() {
        assert_eq!(sanitize_label("a b/c"), "a_b_c");
        assert_eq!(sanitize_label(""), "ns");
    }
}
