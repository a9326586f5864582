//! Small operating-system helpers shared by the agents, the topology and the DUTs: an
//! eventfd stop signal that `poll` can wait on, `poll` itself, joining threads, socket
//! options, CPU pinning, and running external commands (`ip`, `tc`, scripts) with their
//! output checked.

use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Error, Result};

/// A level-triggered stop signal that `poll` can wait on (an eventfd).
#[derive(Debug)]
pub(crate) struct Waker(OwnedFd);

impl Waker {
    pub(crate) fn new() -> Result<Waker> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::io("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(Waker(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `poll` on `fds` for at most `timeout` (`None`: forever), to the nanosecond (`ppoll`:
/// pacing loops wait for sub-millisecond due times). EINTR counts as "nothing ready".
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds points to fds.len() valid pollfd structures; tp is null or points to a
    // valid timespec that outlives the call; no signal mask.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// A sending agent's thread with two signals: `stop` (finish the current step, then wind
/// down as usual, e.g. drain the connection) and `abort` (give up at once). `join` waits for
/// the thread to end on its own; dropping it aborts and waits. The TCP senders run on one.
#[derive(Debug)]
pub(crate) struct SenderThread<T> {
    stop: Arc<Waker>,
    abort: Arc<Waker>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> SenderThread<T> {
    /// Runs `f(stop, abort)` on a new thread called `name`; `what` names it in an error.
    pub(crate) fn spawn(
        name: String,
        what: &str,
        f: impl FnOnce(&Waker, &Waker) -> T + Send + 'static,
    ) -> Result<SenderThread<T>> {
        let stop = Arc::new(Waker::new()?);
        let abort = Arc::new(Waker::new()?);
        let (s, a) = (Arc::clone(&stop), Arc::clone(&abort));
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || f(&s, &a))
            .map_err(|e| Error::io(format!("spawn {what} thread"), e))?;
        Ok(SenderThread {
            stop,
            abort,
            thread: Some(thread),
        })
    }

    /// Waits until the thread ends on its own and returns its result.
    pub(crate) fn join(mut self) -> T {
        join_thread(self.thread.take().expect("sender thread"))
    }

    /// Whether the thread has ended (its result is ready for [`SenderThread::join`]).
    pub(crate) fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Raises `stop`, then waits for the thread's result.
    pub(crate) fn stop(self) -> T {
        self.stop.wake();
        self.join()
    }
}

impl<T> Drop for SenderThread<T> {
    /// Aborts at once and waits for the thread.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.abort.wake();
            let _ = t.join();
        }
    }
}

/// A thread that runs until its [`Waker`] is woken: [`Worker::stop`] wakes it and returns
/// its result; dropping a worker wakes it and waits for it, discarding the result. The
/// agents' receivers are workers.
#[derive(Debug)]
pub(crate) struct Worker<T> {
    waker: Arc<Waker>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Worker<T> {
    /// Runs `f` on a new thread called `name`; `f` gets the waker to `poll` on and should
    /// return soon after it is woken. `what` names the thread in an error.
    pub(crate) fn spawn(
        name: String,
        what: &str,
        f: impl FnOnce(&Waker) -> T + Send + 'static,
    ) -> Result<Worker<T>> {
        let waker = Arc::new(Waker::new()?);
        let w = Arc::clone(&waker);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || f(&w))
            .map_err(|e| Error::io(format!("spawn {what} thread"), e))?;
        Ok(Worker {
            waker,
            thread: Some(thread),
        })
    }

    /// Wakes the thread and returns its result (resuming its panic, if it panicked).
    pub(crate) fn stop(mut self) -> T {
        self.waker.wake();
        join_thread(self.thread.take().expect("worker thread"))
    }
}

impl<T> Drop for Worker<T> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.waker.wake();
            let _ = t.join();
        }
    }
}

/// A `pollfd` for `fd` waiting for `events`.
pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Joins `h`, resuming its panic in the caller.
pub(crate) fn join_thread<T>(h: JoinHandle<T>) -> T {
    match h.join() {
        Ok(t) => t,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// `setsockopt` of one `int` value.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a valid c_int of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it (checked above); pid 0 is the
    // calling thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `prog` and its arguments as one line, for messages.
pub(crate) fn cmdline<S: AsRef<OsStr>>(prog: &str, args: &[S]) -> String {
    let mut s = prog.to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

/// "cannot run `what`", with a hint where iproute2's `ip` or `tc` is missing.
fn cannot_run(cmd: &Command, what: &str) -> String {
    match cmd.get_program().to_str() {
        Some("ip" | "tc") => format!("cannot run `{what}` (is iproute2 installed?)"),
        _ => format!("cannot run `{what}`"),
    }
}

/// Runs `cmd` (standard input closed) and returns its output whatever its exit status.
pub(crate) fn run_cmd(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null());
    cmd.output().map_err(|e| {
        let prog = cmd.get_program().to_string_lossy().into_owned();
        Error::io(cannot_run(cmd, &prog), e)
    })
}

/// `Ok` if the command exited with status 0, else an [`Error::Command`] naming `cmd`.
pub(crate) fn check_output(cmd: &str, out: &Output) -> Result<()> {
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

/// Runs `cmd` with `text` on its standard input (written from a second thread, so that a
/// command that writes a lot before reading everything cannot deadlock) and returns its
/// output whatever its exit status. `what` names the command in a failure to start it.
pub(crate) fn run_with_stdin(cmd: &mut Command, text: String, what: &str) -> Result<Output> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(cannot_run(cmd, what), e))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io(format!("wait for `{what}`"), e))?;
    let _ = writer.join();
    Ok(out)
}

/// What the control messages of one received datagram say: the kernel's receive time
/// (`SO_TIMESTAMPNS`, ns of `CLOCK_REALTIME`), the socket's drop counter (`SO_RXQ_OVFL`)
/// and the IPv4 TOS or IPv6 traffic class byte (`IP_RECVTOS`, `IPV6_RECVTCLASS`), when
/// the socket asked for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxMeta {
    pub(crate) rx_ns: Option<u64>,
    pub(crate) drops: Option<u32>,
    pub(crate) tos: Option<u8>,
}

/// Reads the control messages of `hdr`, as `recvmsg`/`recvmmsg` filled them.
pub(crate) fn rx_meta(hdr: &libc::msghdr) -> RxMeta {
    let mut m = RxMeta::default();
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG_* helpers stay
    // within it, and the data is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                m.rx_ns = Some(weir_io::clock::timespec_ns(&ts));
            } else if level == libc::SOL_SOCKET && ty == libc::SO_RXQ_OVFL {
                m.drops = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()));
            } else if level == libc::IPPROTO_IP && ty == libc::IP_TOS {
                // one byte (ip_cmsg_recv_tos)
                m.tos = Some(*libc::CMSG_DATA(c));
            } else if level == libc::IPPROTO_IPV6 && ty == libc::IPV6_TCLASS {
                // an int (ip6_datagram_recv_specific_ctl)
                let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                m.tos = Some(v as u8);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    m
}

/// One datagram read without blocking from `fd` into `buf` (`recvmsg`): its length
/// (truncated to `buf`), its source address and its kernel receive time (set
/// `SO_TIMESTAMPNS` on the socket; without it `rx_ns` is `None`). `Ok(None)`: nothing queued.
pub(crate) fn recv_stamped(
    fd: RawFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, std::net::SocketAddr, Option<u64>)>> {
    let mut ctrl = [0u64; 16];
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is an empty message.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = ctrl.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&ctrl);
    loop {
        // SAFETY: every pointer in hdr refers to a live local buffer of the size given.
        let n = unsafe { libc::recvmsg(fd, &mut hdr, libc::MSG_DONTWAIT) };
        if n >= 0 {
            let meta = rx_meta(&hdr);
            let src = sockaddr_of(&from);
            return Ok(Some(((n as usize).min(buf.len()), src, meta.rx_ns)));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// The IPv4 or IPv6 address and port in `s` (unspecified for another family).
fn sockaddr_of(s: &libc::sockaddr_storage) -> std::net::SocketAddr {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            SocketAddr::from((
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read((s as *const libc::sockaddr_storage).cast()) };
            SocketAddr::from((
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
            ))
        }
        _ => SocketAddr::from(([0, 0, 0, 0], 0)),
    }
}
