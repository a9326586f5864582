//! The statistics socket: the running bridge publishes a JSON document; `weir stats`
//! connects and reads it.
//!
//! # Protocol
//! A Unix stream socket, by default [`DEFAULT_PATH`]. A client connects, sends one request
//! and closes its writing side; the server answers and closes the connection.
//! - `stats\n` (or nothing at all within [`FIRST_BYTE_TIMEOUT`]): the latest published
//!   document followed by one newline. A server that has not published yet sends only the newline ([`query`]
//!   reports that as [`StatsError::NoData`]).
//! - `reload NAME\n` followed by a policy's text (at most [`MAX_REQUEST`] bytes): the
//!   request goes to the data path ([`StatsServer::take_control`]), which validates and
//!   applies it; its JSON answer (`{"ok": true, "report": …}` or `{"ok": false,
//!   "errors": "…"}`) comes back followed by a newline ([`request_reload`]). Only root,
//!   the user weir runs as, and members of the socket's group may ask (the socket's mode
//!   says who may connect; the peer's credentials are checked as well, [`may_reload`]).
//! - `emu-set\n` followed by `weir emu set`'s options, one per line: the data path changes
//!   the emulated links of a `weir emu` in place (its packets kept) and answers as for a
//!   reload ([`request_emu_set`]); the same peers may ask.
//!
//! # Server
//! [`StatsServer::start`] creates the parent directory with mode 0700 if it is missing,
//! removes a stale socket file (one nobody is listening on), refuses if another process
//! is listening, and creates the socket with mode 0600 (the socket's inode is `fchmod`ed
//! before `bind`, so there is no window in which the file is more open). With a group
//! (`--socket-group`), the socket is 0660 and belongs to that group (a directory weir
//! creates is 0750 and that group's), so its members read statistics and reload without
//! root. A background
//! thread waits in `poll` for clients and for the stop signal. The data path publishes
//! with [`StatsServer::publish`] (or a cloneable [`Publisher`]): that swaps an
//! `Arc<str>` under a mutex the server thread holds only to clone that `Arc`, so the data
//! path never waits for a client. A client that does not read is given up on after
//! [`WRITE_TIMEOUT`]. Dropping the server stops the thread and removes the socket file
//! (if it is still the one it created).
//!
//! # Client
//! [`query`] connects, reads to end of file (at most [`READ_TIMEOUT`]) and returns the
//! document without its newline. Errors say what is wrong: no weir running, a stale
//! socket, permission denied (the socket is root-only).

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where `weir run` listens and `weir stats` connects by default.
pub const DEFAULT_PATH: &str = "/run/weir/weir.sock";
/// How long the server waits for a slow client to take the document.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`query`] waits for the document.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server waits for a client's request, and the data path's answer to a
/// control request.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server waits for the first byte of a request before it takes the client
/// as one that sends nothing and wants the statistics.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_millis(200);
/// Largest request a client may send (a policy's text).
pub const MAX_REQUEST: usize = 1 << 20;

/// A control request from a client (a policy to reload, or `weir emu set`'s options), for
/// the data path.
pub struct ControlRequest {
    /// The policy's file name as the client gave it (for error messages).
    pub name: String,
    /// The policy's text.
    pub text: String,
    /// The policy parsed and its device configuration built, here in the server's thread
    /// and not in the data path's ([`crate::control`]).
    pub prepared: crate::control::Prepared,
    /// `weir emu set`'s options instead of a policy (then `prepared` is an error).
    pub emu_set: Option<Vec<String>>,
    reply: std::sync::mpsc::SyncSender<String>,
}

impl ControlRequest {
    /// A request to hand on (the supervisor of `weir run --workers` asks each worker) and
    /// where its answer arrives.
    pub fn new(
        name: String,
        text: String,
        prepared: crate::control::Prepared,
    ) -> (ControlRequest, std::sync::mpsc::Receiver<String>) {
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        let r = ControlRequest {
            name,
            text,
            prepared,
            emu_set: None,
            reply,
        };
        (r, rx)
    }

    /// Send the answer (a JSON document) to the waiting client.
    pub fn respond(self, json: String) {
        let _ = self.reply.send(json);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("no weir is running (no socket at {})", .path.display())]
    NotRunning { path: PathBuf },
    #[error("no weir is running (stale socket at {})", .path.display())]
    Stale { path: PathBuf },
    #[error("permission denied: the statistics socket {} is open to root, the user weir runs as and its --socket-group only", .path.display())]
    PermissionDenied { path: PathBuf },
    #[error("another weir is already serving statistics on {}", .path.display())]
    AlreadyRunning { path: PathBuf },
    #[error("{} exists and is not a socket; refusing to replace it", .path.display())]
    NotASocket { path: PathBuf },
    #[error("weir is running but has not published statistics yet")]
    NoData,
    #[error("statistics socket {}: {what}: {source}", .path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, StatsError>;

fn io_err(path: &Path, what: &'static str, source: io::Error) -> StatsError {
    StatsError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// The error a client gets when connecting to `path` fails with `e`.
fn connect_error(path: &Path, e: io::Error) -> StatsError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => StatsError::NotRunning { path },
        Some(libc::ECONNREFUSED) => StatsError::Stale { path },
        Some(libc::EACCES) | Some(libc::EPERM) => StatsError::PermissionDenied { path },
        _ => StatsError::Io {
            path,
            what: "cannot connect",
            source: e,
        },
    }
}

/// Writes the JSON document when a client asks for it.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// The published document: its JSON, or what writes it on demand ([`Publisher::publish_lazy`]:
/// the data path hands over its snapshot and a client's thread pays for the JSON, once
/// per publication).
enum DocState {
    Json(Arc<str>),
    Lazy(Render),
}

type Doc = Arc<Mutex<DocState>>;

fn replace(doc: &Doc, new: DocState) {
    let old = {
        let mut g = doc.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *g, new)
    };
    drop(old); // free outside the lock
}

fn store(doc: &Doc, json: String) {
    replace(doc, DocState::Json(Arc::from(json))); // allocated and copied outside the lock
}

/// The document's JSON, written now if it was published lazily (outside the lock: the
/// data path's next publication never waits for it).
fn current(doc: &Doc) -> Arc<str> {
    let render = match &*doc.lock().unwrap_or_else(|p| p.into_inner()) {
        DocState::Json(j) => return j.clone(),
        DocState::Lazy(r) => r.clone(),
    };
    let json: Arc<str> = Arc::from(render());
    let mut g = doc.lock().unwrap_or_else(|p| p.into_inner());
    // keep it for the next client, unless a newer publication came meanwhile
    if matches!(&*g, DocState::Lazy(r) if Arc::ptr_eq(r, &render)) {
        *g = DocState::Json(json.clone());
    }
    json
}

/// A cheap, cloneable handle for publishing from another thread.
#[derive(Clone)]
pub struct Publisher {
    doc: Doc,
}

impl Publisher {
    /// Replace the document clients receive. Never waits for a client.
    pub fn publish(&self, json: String) {
        store(&self.doc, json);
    }
    /// Publish a document written only when a client asks (at most once).
    pub fn publish_lazy(&self, render: Render) {
        replace(&self.doc, DocState::Lazy(render));
    }
    /// Serialize `v` to JSON (one line) and publish it.
    pub fn publish_json<T: serde::Serialize + ?Sized>(&self, v: &T) -> serde_json::Result<()> {
        self.publish(serde_json::to_string(v)?);
        Ok(())
    }
}

/// The statistics socket server (see the module comment).
pub struct StatsServer {
    path: PathBuf,
    doc: Doc,
    /// Control requests, until the data path takes them ([`StatsServer::take_control`]).
    control: Option<std::sync::mpsc::Receiver<ControlRequest>>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
    /// (device, inode) of the socket file we created.
    id: (u64, u64),
    /// Clients given up on: they did not take the document within [`WRITE_TIMEOUT`].
    slow: Arc<std::sync::atomic::AtomicU64>,
    /// The workers a reload is prepared for ([`crate::control::prepare`]).
    shards: Arc<std::sync::atomic::AtomicUsize>,
}

impl StatsServer {
    /// Create the socket at `path` and start serving (see the module comment); `group`:
    /// the group whose members may use it too.
    pub fn start(path: &Path, group: Option<u32>) -> Result<StatsServer> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(if group.is_some() { 0o750 } else { 0o700 })
                    .create(dir)
                    .map_err(|e| io_err(dir, "cannot create the directory", e))?;
                if let Some(g) = group {
                    std::os::unix::fs::chown(dir, None, Some(g))
                        .map_err(|e| io_err(dir, "cannot give the directory to the group", e))?;
                }
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(StatsError::NotASocket {
                    path: path.to_path_buf(),
                })
            }
            Ok(_) => match UnixStream::connect(path) {
                Ok(_) => {
                    return Err(StatsError::AlreadyRunning {
                        path: path.to_path_buf(),
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    std::fs::remove_file(path)
                        .map_err(|e| io_err(path, "cannot remove the stale socket", e))?;
                }
                Err(e) => return Err(io_err(path, "cannot check the existing socket", e)),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path, "cannot inspect", e)),
        }

        let mode = if group.is_some() { 0o660 } else { 0o600 };
        let listener = bind_private(path, mode)?;
        if let Some(g) = group {
            if let Err(e) = std::os::unix::fs::lchown(path, None, Some(g)) {
                let _ = std::fs::remove_file(path);
                return Err(io_err(
                    path,
                    "cannot give the socket to --socket-group (weir must run as root or be a member of it)",
                    e,
                ));
            }
        }
        let meta =
            std::fs::symlink_metadata(path).map_err(|e| io_err(path, "cannot inspect", e))?;
        if meta.permissions().mode() & 0o777 != mode {
            // Not expected (fchmod before bind), but never leave a wider socket behind.
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| io_err(path, "cannot set permissions", e))?;
        }
        let id = (meta.dev(), meta.ino());
        listener
            .set_nonblocking(true)
            .map_err(|e| io_err(path, "cannot configure", e))?;

        let (wake, wake_rx) = UnixStream::pair().map_err(|e| io_err(path, "cannot start", e))?;
        let doc: Doc = Arc::new(Mutex::new(DocState::Json(Arc::from(""))));
        let thread_doc = doc.clone();
        let (control_tx, control) = std::sync::mpsc::channel();
        let slow = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let shards = Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let thread = std::thread::Builder::new()
            .name("weir-stats".into())
            .spawn({
                let (slow, shards) = (slow.clone(), shards.clone());
                move || {
                    let ctx = Serving {
                        doc: thread_doc,
                        control: control_tx,
                        group,
                        slow,
                        shards,
                    };
                    serve(listener, wake_rx, &ctx)
                }
            })
            .map_err(|e| io_err(path, "cannot start the server thread", e));
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        Ok(StatsServer {
            path: path.to_path_buf(),
            doc,
            control: Some(control),
            wake,
            thread: Some(thread),
            id,
            slow,
            shards,
        })
    }

    /// Prepare reloads for `n` workers (one by default).
    pub fn set_shards(&self, n: usize) {
        self.shards
            .store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Replace the document clients receive. Never waits for a client.
    pub fn publish(&self, json: String) {
        store(&self.doc, json);
    }

    /// Publish a document written only when a client asks (at most once per publication):
    /// the caller's thread builds the data, a client's thread writes the JSON.
    pub fn publish_lazy(&self, render: Render) {
        replace(&self.doc, DocState::Lazy(render));
    }

    /// Serialize `v` to JSON (one line) and publish it.
    pub fn publish_json<T: serde::Serialize + ?Sized>(&self, v: &T) -> serde_json::Result<()> {
        self.publish(serde_json::to_string(v)?);
        Ok(())
    }

    /// The control requests clients send (once; `None` after the first call). Requests
    /// nobody takes are answered with an error after [`CONTROL_TIMEOUT`].
    pub fn take_control(&mut self) -> Option<std::sync::mpsc::Receiver<ControlRequest>> {
        self.control.take()
    }

    /// A handle to publish from elsewhere (e.g. the data-path thread).
    pub fn publisher(&self) -> Publisher {
        Publisher {
            doc: self.doc.clone(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Clients given up on because they did not read the document in time.
    pub fn clients_given_up(&self) -> u64 {
        self.slow.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        let _ = self.wake.write_all(b"x");
        let _ = self.wake.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Remove the file only if it is still ours.
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// socket + fchmod `mode` + bind + listen.
fn bind_private(path: &Path, mode: libc::mode_t) -> Result<UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io_err(
            path,
            "invalid socket path",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "longer than {} bytes or contains NUL",
                    addr.sun_path.len() - 1
                ),
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    let last = || io::Error::last_os_error();
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io_err(path, "cannot create a socket", last()));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // On Linux the socket file takes its mode from the socket inode (minus the umask).
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } < 0 {
        return Err(io_err(path, "cannot set permissions", last()));
    }
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r < 0 {
        let e = last();
        return Err(if e.raw_os_error() == Some(libc::EADDRINUSE) {
            StatsError::AlreadyRunning {
                path: path.to_path_buf(),
            }
        } else {
            io_err(path, "cannot bind", e)
        });
    }
    // SAFETY: listen on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } < 0 {
        let e = last();
        let _ = std::fs::remove_file(path);
        return Err(io_err(path, "cannot listen", e));
    }
    Ok(UnixListener::from(fd))
}

/// What the server's thread answers with.
struct Serving {
    doc: Doc,
    control: std::sync::mpsc::Sender<ControlRequest>,
    group: Option<u32>,
    slow: Arc<std::sync::atomic::AtomicU64>,
    shards: Arc<std::sync::atomic::AtomicUsize>,
}

fn serve(listener: UnixListener, wake: UnixStream, ctx: &Serving) {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        fds.iter_mut().for_each(|f| f.revents = 0);
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return; // stop requested (or the server handle is gone)
        }
        if fds[0].revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => answer(stream, ctx),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock, or a transient error: back to poll
            }
        }
    }
}

/// Who may reload: root, the user weir runs as, and members of `group` (primary or
/// supplementary). `peer`: the client's uid, gid and supplementary groups.
pub fn may_reload(peer: (u32, u32, &[u32]), own_uid: u32, group: Option<u32>) -> bool {
    let (uid, gid, groups) = peer;
    uid == 0 || uid == own_uid || group.is_some_and(|g| gid == g || groups.contains(&g))
}

/// The supplementary groups of the process at the other end of `s` (SO_PEERGROUPS).
fn peer_groups(s: &UnixStream) -> Vec<u32> {
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: SO_PEERGROUPS into a gid_t array of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    groups.truncate(if r == 0 { len as usize / 4 } else { 0 });
    groups
}

/// The uid and gid of the process at the other end of `s`.
fn peer_cred(s: &UnixStream) -> Option<(u32, u32)> {
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED into a ucred of the right size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some((cred.uid, cred.gid))
}

fn reply_error(s: &mut UnixStream, msg: &str) {
    let doc = serde_json::json!({ "ok": false, "errors": msg });
    let _ = writeln!(s, "{doc}");
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn answer(mut s: UnixStream, ctx: &Serving) {
    let Serving {
        doc,
        control,
        group,
        slow,
        shards,
    } = ctx;
    let group = *group;
    let _ = s.set_nonblocking(false);
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    // a client that sends nothing (the first protocol, `socat`) is taken as asking for
    // the statistics once FIRST_BYTE_TIMEOUT has passed
    let _ = s.set_read_timeout(Some(FIRST_BYTE_TIMEOUT));
    let mut req = Vec::new();
    let mut first = [0u8; 1];
    let mut n = 0;
    if let Ok(1) = s.read(&mut first) {
        req.push(first[0]);
        let _ = s.set_read_timeout(Some(CONTROL_TIMEOUT));
        n = 1
            + (&mut s)
                .take(MAX_REQUEST as u64)
                .read_to_end(&mut req)
                .unwrap_or(0);
    }
    if n > MAX_REQUEST {
        return reply_error(&mut s, "request too large");
    }
    let text = String::from_utf8_lossy(&req);
    let (head, body) = text.split_once('\n').unwrap_or((&text, ""));
    match head.split_once(' ').map_or((head, ""), |(a, b)| (a, b)) {
        ("" | "stats", _) => {}
        (kind @ ("reload" | "emu-set"), name) => {
            // SAFETY: geteuid has no preconditions.
            let own = unsafe { libc::geteuid() };
            let allowed = peer_cred(&s)
                .is_some_and(|(uid, gid)| may_reload((uid, gid, &peer_groups(&s)), own, group));
            if !allowed {
                return reply_error(
                    &mut s,
                    &format!("weir {} needs root, the user weir runs as, or a member of its --socket-group", if kind == "reload" { "reload" } else { "emu set" }),
                );
            }
            let (r, rx) = if kind == "emu-set" {
                let args = body.lines().map(str::to_string).collect();
                let (mut r, rx) =
                    ControlRequest::new("weir emu set".into(), String::new(), Err(String::new()));
                r.emu_set = Some(args);
                (r, rx)
            } else {
                let name = name.trim().to_string();
                let n = shards.load(std::sync::atomic::Ordering::Relaxed);
                let prepared = crate::control::prepare(&name, body, n);
                ControlRequest::new(name, body.to_string(), prepared)
            };
            if control.send(r).is_err() {
                return reply_error(&mut s, "this weir does not take reloads");
            }
            return match rx.recv_timeout(CONTROL_TIMEOUT) {
                Ok(json) => {
                    let _ = writeln!(s, "{}", json.trim_end());
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                Err(_) => reply_error(&mut s, "weir did not answer the reload request"),
            };
        }
        (other, _) => return reply_error(&mut s, &format!("unknown request '{other}'")),
    }
    let d: Arc<str> = current(doc);
    let mut r = s.write_all(d.as_bytes());
    if r.is_ok() && !d.ends_with('\n') {
        r = s.write_all(b"\n");
    }
    if r.is_err() {
        // a client that never reads: given up on after WRITE_TIMEOUT (the data path never
        // waits for it); counted, and logged at the 1st, 2nd, 4th, 8th, … time
        let n = slow.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            crate::log::warning(&format!(
                "a statistics client did not take the document within {} s and was given up on ({n} so far)",
                WRITE_TIMEOUT.as_secs()
            ));
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Send `request` to the weir serving on `path` and read its whole answer (without the
/// trailing newline), waiting at most `timeout`.
fn ask(path: &Path, request: &[u8], timeout: Duration) -> Result<String> {
    let mut s = UnixStream::connect(path).map_err(|e| connect_error(path, e))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| io_err(path, "cannot configure", e))?;
    s.write_all(request)
        .and_then(|_| s.shutdown(std::net::Shutdown::Write))
        .map_err(|e| io_err(path, "cannot send the request", e))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| {
        let what = match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timed out reading",
            _ => "cannot read",
        };
        io_err(path, what, e)
    })?;
    while out.ends_with('\n') || out.ends_with('\r') {
        out.pop();
    }
    Ok(out)
}

/// Read the latest statistics document from the weir serving on `path`.
pub fn query(path: &Path) -> Result<String> {
    let out = ask(path, b"stats\n", READ_TIMEOUT)?;
    if out.is_empty() {
        return Err(StatsError::NoData);
    }
    Ok(out)
}

/// Ask the weir serving on `path` to replace its policy with `text` (called `name` in
/// error messages). Returns its JSON answer: `{"ok": true, "report": …}` or
/// `{"ok": false, "errors": "…"}`.
pub fn request_reload(path: &Path, name: &str, text: &str) -> Result<String> {
    let mut req = format!("reload {name}\n").into_bytes();
    req.extend_from_slice(text.as_bytes());
    ask(path, &req, CONTROL_TIMEOUT + READ_TIMEOUT)
}

/// Ask the `weir emu` serving `path` to change its links by `weir emu set`'s options
/// (`args`, one option or value each, none with a newline); its JSON answer.
pub fn request_emu_set(path: &Path, args: &[String]) -> Result<String> {
    let mut req = String::from("emu-set\n");
    for a in args {
        req.push_str(a);
        req.push('\n');
    }
    ask(path, req.as_bytes(), CONTROL_TIMEOUT + READ_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Say a test is skipped, on the real stderr (not captured by the test harness).
    fn skip(why: &str) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIP: {why}");
    }
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A temporary directory removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "weir-stats-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn serve_publish_query_refuse_and_clean_up() {
        let t = TempDir::new();
        let dir = t.0.join("run").join("weir");
        let path = dir.join("weir.sock");
        let server = StatsServer::start(&path, None).unwrap();
        assert_eq!(mode(&dir), 0o700, "parent directory created private");
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket());
        assert_eq!(mode(&path), 0o600);

        assert!(matches!(query(&path), Err(StatsError::NoData)));
        server.publish(r#"{"a":1}"#.to_string());
        assert_eq!(query(&path).unwrap(), r#"{"a":1}"#);
        server
            .publish_json(&serde_json::json!({"b": [1, 2]}))
            .unwrap();
        assert_eq!(query(&path).unwrap(), r#"{"b":[1,2]}"#);

        // The raw protocol: the document and one newline, then end of file.
        let mut raw = String::new();
        UnixStream::connect(&path)
            .unwrap()
            .read_to_string(&mut raw)
            .unwrap();
        assert_eq!(raw, "{\"b\":[1,2]}\n");

        // A second server on the same path is refused, and leaves the first intact.
        let e = StatsServer::start(&path, None).err().unwrap();
        assert!(matches!(e, StatsError::AlreadyRunning { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "another weir is already serving statistics on {}",
                path.display()
            )
        );
        assert_eq!(query(&path).unwrap(), r#"{"b":[1,2]}"#);

        drop(server);
        assert!(!path.exists(), "drop removes the socket");
        let e = query(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no weir is running (no socket at {})", path.display())
        );
    }

    #[test]
    fn publisher_from_another_thread_and_many_clients() {
        let t = TempDir::new();
        let path = t.0.join("s.sock");
        let server = StatsServer::start(&path, None).unwrap();
        let p = server.publisher();
        let writer = std::thread::spawn(move || {
            for i in 0..2000 {
                p.publish(format!("{{\"seq\":{i}}}"));
            }
        });
        let mut last = -1i64;
        let mut seen = 0;
        while seen < 50 {
            match query(&path) {
                Ok(doc) => {
                    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
                    let seq = v["seq"].as_i64().unwrap();
                    assert!(seq >= last, "documents never go back in time");
                    last = seq;
                    seen += 1;
                }
                Err(StatsError::NoData) => {}
                Err(e) => panic!("{e}"),
            }
        }
        writer.join().unwrap();
        assert_eq!(query(&path).unwrap(), r#"{"seq":1999}"#);
    }

    #[test]
    fn stale_socket_is_replaced_but_other_files_are_not() {
        let t = TempDir::new();
        let path = t.0.join("stale.sock");
        drop(UnixListener::bind(&path).unwrap()); // leaves the file behind
        assert!(path.exists());
        let e = query(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no weir is running (stale socket at {})", path.display())
        );
        let server = StatsServer::start(&path, None).unwrap();
        server.publish("{}".into());
        assert_eq!(query(&path).unwrap(), "{}");
        drop(server);

        let file = t.0.join("plain");
        std::fs::write(&file, "keep me").unwrap();
        let e = StatsServer::start(&file, None).err().unwrap();
        assert!(matches!(e, StatsError::NotASocket { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    }

    #[test]
    fn drop_leaves_a_replacement_socket_alone() {
        let t = TempDir::new();
        let path = t.0.join("r.sock");
        let server = StatsServer::start(&path, None).unwrap();
        std::fs::remove_file(&path).unwrap();
        let other = UnixListener::bind(&path).unwrap();
        drop(server);
        assert!(path.exists(), "not ours any more: kept");
        drop(other);
    }

    #[test]
    fn snapshot_round_trips_through_the_socket() {
        use weir_core::policy::Policy;
        use weir_core::snapshot::{format_table, snapshot, PipelineSnapshot};
        use weir_core::Instant;
        let policy = Policy::parse(
            "t.toml",
            r#"
            [link]
            rate = "10Mbit"
            default = "other"
            [[class]]
            name = "web"
            rate = "5Mbit"
            [[class]]
            name = "other"
            rate = "5Mbit"
            [[rule]]
            class = "web"
            proto = "tcp"
            port = 80
            "#,
        )
        .unwrap();
        let pipe = policy.build(Instant::ZERO).unwrap();
        let snap = snapshot(&pipe, Instant(42));
        let t = TempDir::new();
        let path = t.0.join("snap.sock");
        let server = StatsServer::start(&path, None).unwrap();
        server.publish_json(&snap).unwrap();
        let doc = query(&path).unwrap();
        let back: PipelineSnapshot = serde_json::from_str(&doc).unwrap();
        assert_eq!(back, snap);
        let table = format_table(&back, "a→b");
        assert!(table.contains("web") && table.contains("other"), "{table}");
    }

    /// A client that connects, asks and never reads a document larger than the socket's
    /// buffers is given up on after WRITE_TIMEOUT and counted; the next client is served.
    #[test]
    fn a_client_that_never_reads_is_given_up_on_and_counted() {
        let t = TempDir::new();
        let path = t.0.join("slow.sock");
        let server = StatsServer::start(&path, None).unwrap();
        server.publish(format!("{{\"pad\":\"{}\"}}", "x".repeat(8 << 20)));
        let mut lazy = UnixStream::connect(&path).unwrap();
        lazy.write_all(b"stats\n").unwrap();
        lazy.shutdown(std::net::Shutdown::Write).unwrap();
        // served after the lazy one: its answer comes once the server gave up on it
        let doc = query(&path).unwrap();
        assert_eq!(doc.len(), 8 * 1024 * 1024 + 10);
        assert_eq!(server.clients_given_up(), 1);
        drop(lazy);
    }

    /// Root, weir's own user (a weir given capabilities, not root) and the group's
    /// members, primary or supplementary; nobody else, and no group means none.
    #[test]
    fn who_may_reload() {
        let own = 1000;
        assert!(may_reload((0, 0, &[]), own, None));
        assert!(may_reload((1000, 1000, &[]), own, None));
        assert!(!may_reload((1001, 1001, &[]), own, None));
        assert!(!may_reload((1001, 1001, &[4242]), own, None));
        assert!(may_reload((1001, 4242, &[]), own, Some(4242)));
        assert!(may_reload((1001, 1001, &[27, 4242]), own, Some(4242)));
        assert!(!may_reload((1001, 1001, &[27]), own, Some(4242)));
    }

    #[test]
    fn connect_errors_are_explained() {
        let p = Path::new("/run/weir/weir.sock");
        let e = |errno| connect_error(p, io::Error::from_raw_os_error(errno)).to_string();
        assert_eq!(
            e(libc::ENOENT),
            "no weir is running (no socket at /run/weir/weir.sock)"
        );
        assert_eq!(
            e(libc::EACCES),
            "permission denied: the statistics socket /run/weir/weir.sock is open to root, the user weir runs as and its --socket-group only"
        );
        assert_eq!(
            e(libc::ECONNREFUSED),
            "no weir is running (stale socket at /run/weir/weir.sock)"
        );
    }

    /// A non-root user cannot connect (the socket is 0600). Runs the check in a forked
    /// child that drops to uid/gid 65534 and uses only raw system calls.
    #[test]
    fn non_root_is_refused() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip("needs root (drops to another user to test the socket mode)");
            return;
        }
        let t = TempDir::new();
        let path = t.0.join("p.sock");
        let server = StatsServer::start(&path, None).unwrap();
        server.publish("{}".into());
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain old data.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: the child performs only async-signal-safe system calls, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(100);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if fd < 0 {
                    libc::_exit(101);
                }
                let r = libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len);
                let errno = *libc::__errno_location();
                libc::_exit(if r == 0 { 0 } else { errno.min(99) });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(
            libc::WEXITSTATUS(status),
            libc::EACCES,
            "uid 65534 must get EACCES connecting to a 0600 root socket"
        );
        // Root still can.
        assert_eq!(query(&path).unwrap(), "{}");
    }

    #[test]
    fn reload_requests_reach_the_data_path_and_its_answer_comes_back() {
        let t = TempDir::new();
        let path = t.0.join("r.sock");
        let mut server = StatsServer::start(&path, None).unwrap();
        server.publish("{\"n\":1}".into());
        let rx = server.take_control().unwrap();
        assert!(server.take_control().is_none(), "taken once");
        let data_path = std::thread::spawn(move || {
            let req = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let echo = format!(
                "{{\"ok\":true,\"name\":\"{}\",\"len\":{}}}",
                req.name,
                req.text.len()
            );
            req.respond(echo);
        });
        let answer = request_reload(&path, "p.toml", "[link]\nrate = \"1Mbit\"\n").unwrap();
        assert_eq!(answer, "{\"ok\":true,\"name\":\"p.toml\",\"len\":22}");
        data_path.join().unwrap();
        // stats still answered as before, and unknown requests get an error
        assert_eq!(query(&path).unwrap(), "{\"n\":1}");
        let bad = ask(&path, b"frobnicate\n", READ_TIMEOUT).unwrap();
        assert!(bad.contains("unknown request 'frobnicate'"), "{bad}");
    }

    #[test]
    fn a_reload_from_another_user_is_refused_even_on_an_open_socket() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip("needs root (drops to another user to test the reload check)");
            return;
        }
        let t = TempDir::new();
        let path = t.0.join("o.sock");
        let mut server = StatsServer::start(&path, None).unwrap();
        let _rx = server.take_control().unwrap();
        // someone opened the socket to everybody: the peer's uid is still checked
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain old data.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        let req = b"reload p.toml\n[link]\nrate = \"1Mbit\"\n";
        let want = b"weir reload needs root, the user weir runs as";
        // SAFETY: the child performs only async-signal-safe system calls, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(100);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if fd < 0 || libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0
                {
                    libc::_exit(101);
                }
                libc::write(fd, req.as_ptr().cast(), req.len());
                libc::shutdown(fd, libc::SHUT_WR);
                let mut buf = [0u8; 512];
                let mut got = 0usize;
                loop {
                    let n = libc::read(fd, buf.as_mut_ptr().add(got).cast(), buf.len() - got);
                    if n <= 0 {
                        break;
                    }
                    got += n as usize;
                }
                let found = buf[..got].windows(want.len()).any(|w| w == want);
                libc::_exit(if found { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0, "the refusal was not received");
    }
}
