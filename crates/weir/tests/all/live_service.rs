//! `weir run` as the systemd unit runs it (packaging/weir@.service), in network namespaces
//! (root; skips otherwise): the notification protocol (READY=1 once it forwards,
//! WATCHDOG=1 every half WATCHDOG_USEC from the loop, none while the process is stopped,
//! STOPPING=1 on SIGTERM), under the unit's capability bounding set and no_new_privs.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

use crate::common::{KillOnDrop, TempDir, ROOT, WEIR};

/// The unit's `CapabilityBoundingSet=` as setpriv(1) wants it: `-all,+net_raw,...`.
fn unit_bounding_set() -> String {
    let unit = std::fs::read_to_string(format!("{ROOT}/packaging/weir@.service")).unwrap();
    let caps = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit has a CapabilityBoundingSet=");
    let mut s = "-all".to_string();
    for c in caps.split_whitespace() {
        s += ",+";
        s += &c.trim_start_matches("CAP_").to_lowercase();
    }
    s
}

/// Datagrams that arrive within `limit`, each with when it arrived; stops early once
/// `until` returns true for one.
fn collect(
    rx: &UnixDatagram,
    limit: Duration,
    until: impl Fn(&str) -> bool,
) -> Vec<(Instant, String)> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        rx.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match rx.recv(&mut buf) {
            Ok(n) => {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = until(&m);
                out.push((Instant::now(), m));
                if done {
                    break;
                }
            }
            Err(_) => break, // timed out
        }
    }
    out
}

fn pings(msgs: &[(Instant, String)]) -> Vec<Instant> {
    msgs.iter()
        .filter(|(_, m)| m == "WATCHDOG=1")
        .map(|(t, _)| *t)
        .collect()
}

/// A bridge topology labelled `label` and a directory for `test`, removed at its end;
/// `None` (the test skips) when not root.
fn setup(test: &str, label: &str) -> Option<(BridgeTopo, PathBuf, TempDir)> {
    if skip_unless_root(test) {
        return None;
    }
    let t = BridgeTopo::new(label).unwrap();
    let dir = std::env::temp_dir().join(format!("weir-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Some((t, dir.clone(), TempDir(dir)))
}

#[test]
fn run_notifies_systemd_ready_watchdog_and_stopping() {
    let _group = crate::common::group(module_path!());
    let Some((t, dir, _rm)) = setup("run_notifies_systemd_ready_watchdog_and_stopping", "ntf")
    else {
        return;
    };
    // a path socket: an abstract one would belong to this test's network namespace
    let notify = dir.join("notify");
    let rx = UnixDatagram::bind(&notify).unwrap();
    let sock = dir.join("w.sock");
    let bset = unit_bounding_set();
    assert_eq!(bset, "-all,+net_raw,+net_admin,+bpf");

    let child = Command::new("ip")
        .args(["netns", "exec", t.dut.name()])
        .args(["setpriv", "--no-new-privs", "--bounding-set", &bset])
        .args([WEIR, "run", "--policy", "examples/home-router.toml"])
        .args(["--lan", &t.dut_lan, "--wan", &t.dut_wan, "--json"])
        .arg("--stats-socket")
        .arg(&sock)
        .env("NOTIFY_SOCKET", &notify)
        // 1 s: a ping every 500 ms
        .env("WATCHDOG_USEC", "1000000")
        .current_dir(ROOT)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let weir = KillOnDrop(Some(child));

    // READY=1 (with a status line), and then it forwards
    let start = collect(&rx, Duration::from_secs(10), |m| m.starts_with("READY=1"));
    let ready = start
        .iter()
        .find(|(_, m)| m.starts_with("READY=1"))
        .unwrap_or_else(|| panic!("no READY=1 within 10 s: {start:?}"));
    assert!(
        ready.1.contains("\nSTATUS=bridging ") && ready.1.contains("home-router.toml"),
        "{ready:?}"
    );
    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 3, Duration::from_secs(1)).unwrap();
    assert!(rtts.iter().all(|r| r.is_some()), "{rtts:?}");

    // WATCHDOG=1 every 500 ms: never later than the 1 s timeout, never much earlier
    let seen = std::cell::Cell::new(0);
    let msgs = collect(&rx, Duration::from_secs(5), |m| {
        seen.set(seen.get() + usize::from(m == "WATCHDOG=1"));
        seen.get() == 5
    });
    let wd = pings(&msgs);
    assert_eq!(wd.len(), 5, "pings in 5 s: {msgs:?}");
    let gaps: Vec<Duration> = wd.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("watchdog pings (WATCHDOG_USEC=1000000) apart by {gaps:?}");
    for w in wd.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap > Duration::from_millis(400) && gap < Duration::from_millis(1000),
            "a ping {gap:?} after the previous one"
        );
    }

    // a stopped process stops pinging (what systemd's watchdog acts on); it resumes after
    let pid = weir.0.as_ref().unwrap().id() as i32;
    let weir_pid = {
        // the child is `ip netns exec`: weir is its child
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        kids.split_whitespace()
            .next()
            .map_or(pid, |p| p.parse().unwrap())
    };
    // SAFETY: signalling the weir this test started.
    unsafe { libc::kill(weir_pid, libc::SIGSTOP) };
    let _ = collect(&rx, Duration::from_millis(100), |_| false); // in flight
    let stopped = collect(&rx, Duration::from_millis(1500), |_| false);
    // SAFETY: as above.
    unsafe { libc::kill(weir_pid, libc::SIGCONT) };
    assert!(
        pings(&stopped).is_empty(),
        "pings while stopped: {stopped:?}"
    );
    let resumed = collect(&rx, Duration::from_secs(2), |m| m == "WATCHDOG=1");
    assert_eq!(
        pings(&resumed).len(),
        1,
        "no ping after SIGCONT: {resumed:?}"
    );

    // SIGTERM: STOPPING=1, a clean exit, and weir forwarded the pings itself
    // SAFETY: as above.
    unsafe { libc::kill(weir_pid, libc::SIGTERM) };
    let end = collect(&rx, Duration::from_secs(10), |m| {
        m.starts_with("STOPPING=1")
    });
    assert!(
        end.last().is_some_and(|(_, m)| m == "STOPPING=1"),
        "no STOPPING=1: {end:?}"
    );
    let out = weir.wait_output(Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("notification"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tx = |d: &str| report[d]["tx"]["packets"].as_u64().unwrap();
    assert!(tx("outbound") >= 3 && tx("inbound") >= 3, "{report}");
}

/// Without NOTIFY_SOCKET nothing is sent and nothing is said; with an unusable one, one
/// line says notifications are off and weir runs on.
#[test]
fn run_without_or_with_a_bad_notify_socket_runs_on() {
    let _group = crate::common::group(module_path!());
    let Some((t, dir, _rm)) = setup("run_without_or_with_a_bad_notify_socket_runs_on", "ntfb")
    else {
        return;
    };
    for (notify, said) in [(None, false), (Some("vsock:2:9"), true)] {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", t.dut.name()])
            .args([WEIR, "run", "--policy", "examples/home-router.toml"])
            .args(["--lan", &t.dut_lan, "--wan", &t.dut_wan, "--duration", "1s"])
            .arg("--stats-socket")
            .arg(dir.join("w.sock"))
            .env_remove("NOTIFY_SOCKET")
            .env("WATCHDOG_USEC", "1000000")
            .current_dir(ROOT);
        if let Some(n) = notify {
            c.env("NOTIFY_SOCKET", n);
        }
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        // once, though READY, the watchdog and STOPPING each looked
        assert_eq!(
            stderr
                .matches("weir: warning: systemd notifications off: NOTIFY_SOCKET=vsock:2:9")
                .count(),
            usize::from(said),
            "{stderr}"
        );
    }
}
