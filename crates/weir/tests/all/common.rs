//! What the `weir` command's live tests share: running the binary, a child process that
//! is killed if a test ends early, stopping a child with SIGTERM, waiting for a socket, a
//! directory removed at the end, a command in a namespace, weir started between a
//! bridge topology's two hosts; the group a test runs in.

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

pub use weir_lab::testing::group;

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Run `weir ARGS` in the repository's root: (exit code, stdout, stderr).
pub fn weir(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(WEIR)
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory removed when the test ends, passed or failed.
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process that is killed if the test ends early (a failed assertion).
pub struct KillOnDrop(pub Option<Child>);

impl KillOnDrop {
    /// SIGTERM the child and collect what it printed.
    pub fn terminate(mut self) -> Output {
        let child = self.0.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait_with_output().unwrap()
    }

    /// Wait for the child to exit (killed, and the test failed, after `limit`) and
    /// collect what it printed (less than a pipe's buffer, 64 KiB, or it would block).
    #[allow(dead_code)] // not every test binary waits
    pub fn wait_output(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().unwrap();
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "still running after {limit:?}: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait until `path` exists (a started weir's statistics socket), at most `limit`.
pub fn wait_for(path: &Path, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `argv` run in namespace `ns` (`ip netns exec`), from the repository's root.
pub fn in_ns(ns: &weir_lab::topo::Netns, argv: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name()]).args(argv);
    c.current_dir(ROOT);
    c
}

/// Start weir (`args` after the binary) in `t`'s DUT namespace between its two hosts,
/// with `--json` and its statistics socket at `sock`; wait for the socket.
pub fn start_weir(t: &weir_lab::topo::BridgeTopo, args: &[&str], sock: &Path) -> KillOnDrop {
    let g = spawn_weir(t, args, sock, std::process::Stdio::piped());
    wait_for(sock, Duration::from_secs(5), "weir did not start");
    g
}

/// [`start_weir`] without the wait, weir's standard error (its log) going to `stderr`,
/// e.g. a file: a pipe nobody reads would stall a weir that logs for hours.
pub fn spawn_weir(
    t: &weir_lab::topo::BridgeTopo,
    args: &[&str],
    sock: &Path,
    stderr: std::process::Stdio,
) -> KillOnDrop {
    let mut argv = vec![WEIR];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--lan", &t.dut_lan, "--wan", &t.dut_wan, "--json"]);
    argv.extend_from_slice(&["--stats-socket", sock.to_str().unwrap()]);
    let child = in_ns(&t.dut, &argv)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    KillOnDrop(Some(child))
}

/// Whether `program` runs here. Missing: a failure under CI (`CI` set: `scripts/test`
/// installs it), else `SKIP: {test}: …` and `false`.
pub fn have(test: &str, program: &str) -> bool {
    if Command::new(program).arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {program} is missing (scripts/test installs it)"
    );
    eprintln!("SKIP: {test}: {program} not installed (run scripts/test as root)");
    false
}

/// The Chromium binary Debian installs, if any. Missing: a failure under CI (`CI` set:
/// `scripts/test` installs it), else `SKIP{part}: {test}: …` (`part` names what is
/// skipped when the test goes on without it, e.g. " (the page part)") and `None`.
pub fn chromium(test: &str, part: &str) -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: chromium is missing (scripts/test installs it)"
        );
        eprintln!("SKIP{part}: {test}: chromium not installed (run scripts/test as root)");
    }
    found
}

/// Chromium's options for a headless run as root in a namespace (no sandbox, no GPU, no
/// /dev/shm, no first-run pages).
pub const CHROMIUM_HEADLESS: [&str; 5] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
];

/// Headless Chromium (`browser`) in `ns` with a fresh profile, logging to stderr, the
/// page's script given 4 s of virtual time, a 1280×1100 window, and `args` (e.g.
/// `--dump-dom URL`): (its stdout, its stderr).
pub fn chromium_run(ns: &weir_lab::topo::Netns, browser: &str, args: &[&str]) -> (String, String) {
    let profile = std::env::temp_dir().join(format!(
        "weir-chromium-{}-{}",
        std::process::id(),
        ns.name()
    ));
    let _rm = TempDir(profile.clone());
    let user_dir = format!("--user-data-dir={}", profile.display());
    let mut argv = vec![browser];
    argv.extend(CHROMIUM_HEADLESS);
    argv.extend([
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=4000",
        "--window-size=1280,1100",
        &user_dir,
    ]);
    argv.extend_from_slice(args);
    let out = in_ns(ns, &argv).output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An iperf3 server for one test (`-1`) on port 5201 of `t`'s receiver, given 300 ms to
/// listen.
pub fn iperf3_server(t: &weir_lab::topo::BridgeTopo) -> KillOnDrop {
    let server = KillOnDrop(Some(
        in_ns(&t.rcv, &["iperf3", "-s", "-1", "-p", "5201"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(300));
    server
}

/// `weir stats --json` of the weir serving the statistics socket `sock` (a Unix socket:
/// reachable from any network namespace); fails the test if it does not answer. A weir
/// that has just opened its socket publishes its first statistics within a publication
/// period (later on a loaded machine): that answer is retried for up to 5 s.
pub fn stats(sock: &Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, out, err) = weir(&["stats", "--json", "--socket", sock.to_str().unwrap()]);
        if code != 0
            && err.contains("has not published statistics yet")
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert_eq!(code, 0, "{err}");
        return serde_json::from_str(&out).unwrap();
    }
}

/// What weir's fail-open did so far (statistics `v`), for a rate check's message: a loop
/// that stalled past its timeout let the kernel forward meanwhile, unshaped.
pub fn fail_open_note(v: &serde_json::Value) -> String {
    let fwd = |d: &str| {
        v[d]["lane"]["kernel_forwarded"]["packets"]
            .as_u64()
            .unwrap_or(0)
    };
    format!(
        "fail-open: {} hand-overs, the kernel forwarded {} + {} frames",
        v["fail_open"]["handovers"].as_u64().unwrap_or(0),
        fwd("outbound"),
        fwd("inbound")
    )
}

/// Debian's vsftpd on `t`'s receiver, anonymous and read-only, serving `file.bin` (`body`)
/// from `dir/root`; passive ports 50000-50100, active mode from port 20. Given 500 ms to
/// listen.
pub fn vsftpd(t: &weir_lab::topo::BridgeTopo, dir: &Path, body: &[u8]) -> KillOnDrop {
    let root = dir.join("root");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(root.join("file.bin"), body).unwrap();
    let conf = dir.join("vsftpd.conf");
    std::fs::write(
        &conf,
        format!(
            "listen=YES\nlisten_ipv6=NO\nbackground=NO\nanonymous_enable=YES\nlocal_enable=NO\n\
             write_enable=NO\nno_anon_password=YES\nanon_root={}\nsecure_chroot_dir={}\n\
             pasv_enable=YES\npasv_min_port=50000\npasv_max_port=50100\nport_enable=YES\n\
             connect_from_port_20=YES\nseccomp_sandbox=NO\nxferlog_enable=NO\n",
            root.display(),
            empty.display()
        ),
    )
    .unwrap();
    let server = KillOnDrop(Some(
        in_ns(&t.rcv, &["vsftpd", conf.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(500));
    server
}

/// `curl` in `ns` fetches `url` to /dev/null (extra options `opts` before it) and returns
/// the figures its `-w` format `write_out` names (seconds, sizes), as numbers; fails the
/// test if curl fails.
pub fn curl(ns: &weir_lab::topo::Netns, opts: &[&str], write_out: &str, url: &str) -> Vec<f64> {
    let mut argv = vec!["curl", "-s", "-o", "/dev/null", "-m", "60", "-w", write_out];
    argv.extend_from_slice(opts);
    argv.push(url);
    let out = in_ns(ns, &argv).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {opts:?} {url}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// Which byte counter of a class [`class_bytes`] reads.
#[derive(Clone, Copy)]
pub enum Counted {
    /// What the class's queue received (before its drops).
    Received,
    /// What the class sent.
    Sent,
}

/// Bytes of class `name` in the directions `dirs` ("outbound", "inbound") of a `weir
/// stats --json` document, summed; fails the test if the class is missing.
pub fn class_bytes(v: &serde_json::Value, dirs: &[&str], name: &str, what: Counted) -> u64 {
    dirs.iter()
        .map(|d| {
            let c = v[*d]["pipeline"]["classes"]
                .as_array()
                .unwrap_or_else(|| panic!("no {d} pipeline: {v}"))
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("no class {name}"));
            let n = match what {
                Counted::Received => &c["queue"]["received"],
                Counted::Sent => &c["sent"],
            };
            n["bytes"].as_u64().unwrap()
        })
        .sum()
}

/// ms from `at` (CLOCK_REALTIME ns) to the first reply that arrived to a probe sent at or
/// after it: how long forwarding was out after an event (a kill or a stop of weir). The
/// earliest arrival, not the first-sent probe's: a probe weir had read just before a
/// `SIGSTOP` comes back only after `SIGCONT`, while later ones crossed the kernel already.
pub fn outage_ms(p: &weir_lab::agents::ProbeReport, at: u64) -> f64 {
    let first = p
        .records
        .iter()
        .filter(|r| r.tx_ns >= at)
        .filter_map(|r| r.rx_ns)
        .min()
        .expect("no probe came back after the event");
    (first - at) as f64 / 1e6
}

/// A UDP probe every 5 ms from `t`'s sender to a reflector at `to` (on the receiver).
pub fn probe_every_5ms(
    t: &weir_lab::topo::BridgeTopo,
    to: std::net::SocketAddr,
) -> weir_lab::agents::Prober {
    use weir_lab::agents::{ProbeKind, ProbeOpts, Prober};
    Prober::start(
        &t.snd,
        ProbeOpts::new(ProbeKind::Udp, to, Duration::from_millis(5)),
    )
    .unwrap()
}

/// A lab's outputs in `dir`: every one of `files` exists; `result.json` parsed, its `kind`
/// checked.
#[allow(dead_code)]
pub fn lab_result(dir: &Path, kind: &str, files: &[&str]) -> serde_json::Value {
    for f in files {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], kind);
    v
}

/// The names of a lab result's checks, in order.
#[allow(dead_code)]
pub fn check_names(v: &serde_json::Value) -> Vec<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// `weir lab report DIR/result.json` prints what the run wrote into `DIR/text_file`: the
/// result alone re-makes it.
#[allow(dead_code)]
pub fn assert_report_remakes(dir: &Path, text_file: &str) {
    let again = TempDir(dir.with_extension("again"));
    let (code, restdout, err) = weir(&[
        "lab",
        "report",
        dir.join("result.json").to_str().unwrap(),
        "--out",
        again.0.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        restdout,
        std::fs::read_to_string(dir.join(text_file)).unwrap()
    );
}
