//! systemd's service notification protocol (`sd_notify(3)`), without libsystemd: how
//! `weir run` under a `Type=notify` unit says it is ready, that its forwarding loop is
//! alive, and that it is stopping.
//!
//! The protocol (stable, systemd.io/PORTABILITY_AND_STABILITY; the self-contained
//! implementation in the sd_notify(3) manual is the model): the service manager puts the
//! address of a Unix datagram socket in `$NOTIFY_SOCKET` — a path (`/run/systemd/notify`)
//! or, with a leading `@`, an abstract name — and the service sends it newline-separated
//! `KEY=VALUE` assignments, one datagram each message: `READY=1` (start-up is complete),
//! `WATCHDOG=1` (keep-alive), `STOPPING=1`, `STATUS=free text` (shown by `systemctl
//! status`). No variable: not run by a service manager, every call is a no-op.
//!
//! The watchdog (`sd_watchdog_enabled(3)`): with `WatchdogSec=` set, systemd passes
//! `WATCHDOG_USEC` (the timeout, µs, > 0) and `WATCHDOG_PID`; when the PID is set and is
//! not ours, the watchdog is meant for another process and stays off. The service must
//! send `WATCHDOG=1` more often than the timeout; [`Watchdog`] sends it every half
//! timeout (the manual's advice), from the bridge's forwarding loop itself, so that a
//! loop that hangs stops the pings and systemd kills and restarts weir (fail-open carries
//! the traffic meanwhile, `crate::failopen`). The loop turns at least every 250 ms (its
//! statistics tick; every 12.5 ms when fail-open), so a timeout under 1 s is not served.
//!
//! Invariants: nothing here fails the caller — a socket that cannot be reached is
//! reported once on standard error and the notifications stop; a ping is one `send` on a
//! socket opened once (no allocation, no syscall when not due).

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use weir_core::{Duration, Instant};

/// Where `$NOTIFY_SOCKET` points: a filesystem path or an abstract name (without the `@`).
#[derive(Debug, PartialEq, Eq)]
pub enum NotifyAddr {
    Path(Vec<u8>),
    Abstract(Vec<u8>),
}

/// `sun_path`'s size: a path needs a terminating NUL, an abstract name the leading one.
const SUN_PATH: usize = 108;

/// Parse `$NOTIFY_SOCKET`: `/path` or `@abstract`, 2 to 107 bytes, no NUL. Anything else
/// (empty; relative; systemd ≥ 254's `vsock:` for virtual machines) is refused.
pub fn parse_addr(v: &[u8]) -> Result<NotifyAddr, String> {
    let shown = String::from_utf8_lossy(v);
    if v.len() < 2 || v.len() >= SUN_PATH || v.contains(&0) {
        return Err(format!(
            "NOTIFY_SOCKET={shown}: not a Unix socket address (2 to 107 bytes)"
        ));
    }
    match v[0] {
        b'/' => Ok(NotifyAddr::Path(v.to_vec())),
        b'@' => Ok(NotifyAddr::Abstract(v[1..].to_vec())),
        _ => Err(format!(
            "NOTIFY_SOCKET={shown}: neither a path nor an abstract socket ('@name'); unsupported"
        )),
    }
}

/// The watchdog timeout `WATCHDOG_USEC` asks for, if the watchdog is meant for process
/// `pid`: `usec` a positive integer, `wd_pid` unset or equal to `pid`.
pub fn parse_watchdog(usec: Option<&str>, wd_pid: Option<&str>, pid: u32) -> Option<Duration> {
    let us: u64 = usec?.trim().parse().ok().filter(|&us| us > 0)?;
    if let Some(p) = wd_pid {
        if p.trim().parse::<u32>().ok()? != pid {
            return None;
        }
    }
    Some(Duration::from_micros(us))
}

/// A connection to the service manager's notification socket.
pub struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// The socket `$NOTIFY_SOCKET` names; `None` without the variable, or (said once on
    /// standard error) when it cannot be used.
    pub fn from_env() -> Option<Notifier> {
        static SAID: AtomicBool = AtomicBool::new(false);
        let v = std::env::var_os("NOTIFY_SOCKET")?;
        match Notifier::open(v.as_bytes()) {
            Ok(n) => Some(n),
            Err(e) => {
                if !SAID.swap(true, Ordering::Relaxed) {
                    crate::log::warning(&format!("systemd notifications off: {e}"));
                }
                None
            }
        }
    }

    /// A notifier for the address `v` (as in `$NOTIFY_SOCKET`).
    pub fn open(v: &[u8]) -> Result<Notifier, String> {
        let addr = match parse_addr(v)? {
            NotifyAddr::Path(p) => SocketAddr::from_pathname(OsStr::from_bytes(&p)),
            NotifyAddr::Abstract(n) => SocketAddr::from_abstract_name(n),
        }
        .map_err(|e| format!("NOTIFY_SOCKET={}: {e}", String::from_utf8_lossy(v)))?;
        let sock = UnixDatagram::unbound().map_err(|e| format!("notification socket: {e}"))?;
        // never block the forwarding loop on a busy manager
        sock.set_nonblocking(true)
            .map_err(|e| format!("notification socket: {e}"))?;
        Ok(Notifier { sock, addr })
    }

    /// Send `msg` (newline-separated `KEY=VALUE` assignments) as one datagram.
    pub fn send(&self, msg: &str) -> std::io::Result<()> {
        self.sock
            .send_to_addr(msg.as_bytes(), &self.addr)
            .map(|_| ())
    }
}

/// Send `msg` to the service manager, if there is one (`$NOTIFY_SOCKET`); a failure is
/// said on standard error and otherwise ignored. For the rare messages (`READY=1`,
/// `STOPPING=1`, `STATUS=…`); [`Watchdog`] keeps its socket.
pub fn notify(msg: &str) {
    if let Some(n) = Notifier::from_env() {
        if let Err(e) = n.send(msg) {
            crate::log::warning(&format!("systemd notification failed: {e}"));
        }
    }
}

/// `WATCHDOG=1` every half of `WATCHDOG_USEC`, from whoever calls [`Watchdog::ping`] on
/// every turn of its loop. Off (every call a no-op) without a watchdog for this process.
pub struct Watchdog {
    on: Option<(Notifier, Duration)>,
    next: Instant,
}

impl Watchdog {
    /// The watchdog the environment asks for (`WATCHDOG_USEC`, `WATCHDOG_PID`,
    /// `NOTIFY_SOCKET`), or an idle one.
    pub fn from_env() -> Watchdog {
        let var = |k| std::env::var(k).ok();
        let every = parse_watchdog(
            var("WATCHDOG_USEC").as_deref(),
            var("WATCHDOG_PID").as_deref(),
            std::process::id(),
        )
        .map(|t| Duration::from_nanos(t.as_nanos() / 2));
        Watchdog {
            on: every.and_then(|e| Notifier::from_env().map(|n| (n, e))),
            next: Instant::ZERO,
        }
    }

    /// A watchdog that never pings (a worker's: its supervisor pings).
    pub fn off() -> Watchdog {
        Watchdog {
            on: None,
            next: Instant(u64::MAX),
        }
    }

    /// How often it pings (half the timeout), if on.
    pub fn interval(&self) -> Option<Duration> {
        self.on.as_ref().map(|(_, e)| *e)
    }

    /// Send `WATCHDOG=1` if half the timeout has passed since the last ping (at once the
    /// first time). A ping that cannot be sent is said once and the watchdog goes off:
    /// systemd then restarts weir, which is the right outcome for a manager that stopped
    /// listening.
    #[inline]
    pub fn ping(&mut self, now: Instant) {
        if now < self.next {
            return;
        }
        let Some((n, every)) = &self.on else {
            self.next = Instant(u64::MAX);
            return;
        };
        match n.send("WATCHDOG=1") {
            Ok(()) => self.next = now + *every,
            // the manager's queue is full: try again on the next turn
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                crate::log::warning(&format!(
                    "systemd watchdog: cannot notify: {e}; watchdog pings stop"
                ));
                self.on = None;
                self.next = Instant(u64::MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_paths_or_abstract_names() {
        assert_eq!(
            parse_addr(b"/run/systemd/notify"),
            Ok(NotifyAddr::Path(b"/run/systemd/notify".to_vec()))
        );
        // what systemd passes to a service in a container or a test: `@` + a name
        assert_eq!(
            parse_addr(b"@/org/freedesktop/systemd1/notify/42"),
            Ok(NotifyAddr::Abstract(
                b"/org/freedesktop/systemd1/notify/42".to_vec()
            ))
        );
        for bad in [
            &b""[..],
            b"/",
            b"@",
            b"relative/path",
            b"vsock:2:1234",
            b"/with\0nul",
        ] {
            assert!(parse_addr(bad).is_err(), "{bad:?}");
        }
        // 107 bytes fit (the path's NUL makes 108), 108 do not
        let mut long = vec![b'/'];
        long.resize(107, b'a');
        assert!(parse_addr(&long).is_ok());
        long.push(b'a');
        assert!(parse_addr(&long).unwrap_err().contains("2 to 107 bytes"));
    }

    #[test]
    fn the_watchdog_is_ours_only_with_a_positive_timeout_and_our_pid() {
        let d = |us| Some(Duration::from_micros(us));
        assert_eq!(parse_watchdog(Some("2000000"), None, 7), d(2_000_000));
        assert_eq!(parse_watchdog(Some("2000000"), Some("7"), 7), d(2_000_000));
        // systemd's own rules (sd_watchdog_enabled): another process's, zero, garbage
        assert_eq!(parse_watchdog(Some("2000000"), Some("8"), 7), None);
        assert_eq!(parse_watchdog(Some("2000000"), Some("x"), 7), None);
        assert_eq!(parse_watchdog(Some("0"), None, 7), None);
        assert_eq!(parse_watchdog(Some("-5"), None, 7), None);
        assert_eq!(parse_watchdog(Some("1e6"), None, 7), None);
        assert_eq!(parse_watchdog(None, Some("7"), 7), None);
    }

    fn receiver() -> (UnixDatagram, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "weir-notify-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_nonblocking(true).unwrap();
        (rx, path)
    }

    fn received(rx: &UnixDatagram) -> Vec<String> {
        let mut buf = [0u8; 256];
        let mut out = Vec::new();
        while let Ok(n) = rx.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn messages_arrive_whole_at_a_path_and_an_abstract_socket() {
        let (rx, path) = receiver();
        let n = Notifier::open(path.as_os_str().as_bytes()).unwrap();
        n.send("READY=1\nSTATUS=bridging a <-> b").unwrap();
        assert_eq!(received(&rx), ["READY=1\nSTATUS=bridging a <-> b"]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());

        let name = format!("weir-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        rx.set_nonblocking(true).unwrap();
        let n = Notifier::open(format!("@{name}").as_bytes()).unwrap();
        n.send("STOPPING=1").unwrap();
        assert_eq!(received(&rx), ["STOPPING=1"]);
    }

    /// A watchdog of 2 s that pings the socket at `path` every second.
    fn pinging_every_second(path: &std::path::Path) -> Watchdog {
        Watchdog {
            on: Some((
                Notifier::open(path.as_os_str().as_bytes()).unwrap(),
                Duration::from_secs(1),
            )),
            next: Instant::ZERO,
        }
    }

    /// A 2 s timeout: pings at 0, 1 s, 2 s of the caller's clock, none between.
    #[test]
    fn the_watchdog_pings_every_half_timeout() {
        let (rx, path) = receiver();
        let mut w = pinging_every_second(&path);
        assert_eq!(w.interval(), Some(Duration::from_secs(1)));
        let ms = |m: u64| Instant(5_000_000_000 + m * 1_000_000);
        let mut sent = Vec::new();
        for t in (0..=2_000).step_by(10) {
            w.ping(ms(t));
            if !received(&rx).is_empty() {
                sent.push(t);
            }
        }
        assert_eq!(sent, [0, 1000, 2000]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_watchdog_without_a_manager_does_nothing() {
        let mut w = Watchdog {
            on: None,
            next: Instant::ZERO,
        };
        w.ping(Instant(1));
        assert_eq!(w.interval(), None);
        assert_eq!(w.next, Instant(u64::MAX));
    }

    /// A manager that went away: said once, then the pings stop.
    #[test]
    fn a_vanished_manager_stops_the_pings() {
        let (rx, path) = receiver();
        let mut w = pinging_every_second(&path);
        drop(rx);
        std::fs::remove_file(&path).unwrap();
        w.ping(Instant(1));
        assert_eq!(w.interval(), None);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
