//! Labs on SSH-reached hosts (`--topology`), with Debian's sshd as the remote hosts: two
//! namespaces, each running its own `sshd` on a management veth to this namespace, and a
//! test veth to this namespace, where the DUT (weir's bridge) forwards between them.
//!
//! ```text
//!   [sender ns] eth1 ── lan  [this namespace: the lab, weir's DUT]  wan ── eth1 [receiver ns]
//!        sshd on mgmt0 ─────────────── ssh ───────────── sshd on mgmt0
//! ```
//!
//! The test's sshd and ssh use a throwaway host key and client key in a temporary
//! directory (`ssh -F none -i KEY -o UserKnownHostsFile=TEMP`); a user's labs go through
//! their own ssh configuration and `known_hosts`. Checks: the Basic Test, `rrul`,
//! `rfc6349` and `rfc2544` run there (the Basic Test's fastest classes at their rate and
//! fair; rrul's goodput and the latency weir's default queue adds; RFC 6349's path MTU,
//! bottleneck bandwidth and a whole transfer; RFC 2544's throughput at the class's rate
//! with figures computed on the receiving host), every host reports its clock offset, and the hosts
//! are left as they were (addresses, link state, sysctls, offloads); a topology file with a mistake, a host that
//! refuses SSH or has no weir, and a host whose agent dies mid-run each stop the lab with
//! a message naming the host and leave every host clean.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{have, lab_result, weir, KillOnDrop, TempDir};
use weir_lab::topo::{add_addr, link_veth, set_up, skip_unless_root, unique_veth_names, Netns};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// One remote host: a namespace with sshd on its management address.
struct SshNs {
    ns: Netns,
    addr: String,
    _sshd: KillOnDrop,
}

/// SSH-reached hosts (two unless the test asks for more) and their test interfaces here:
/// the DUT's two (`lan` towards host 0, `wan` towards host 1), then one per further host.
struct Hosts {
    // dropped in this order: the hosts (sshd killed, namespaces and their veths removed),
    // then /run/sshd if the tests made it and this was the last of them, then the keys
    hosts: Vec<SshNs>,
    lan: String,
    wan: String,
    /// Host 2's, 3's… test interfaces here.
    more: Vec<String>,
    /// One end of each veth pair the test made here (a WAN stage's, a chain's links).
    pairs: Vec<String>,
    dir: TempDir,
    /// Held until the hosts are gone.
    _turn: Turn,
}

/// sshd's privilege separation directory (made by Debian's service, which CI does not
/// run): the live `Hosts`, and whether the tests made it.
static RUN_SSHD: std::sync::Mutex<(usize, bool)> = std::sync::Mutex::new((0, false));

/// The file's tests may run side by side, sharing the machine, but one that judges rates
/// or delays takes it alone: two labs at once on two cores put each other's senders, weir
/// and agents behind one another (CI of 675fddd: RFC 2544's zero-loss rate, rrul's
/// goodput share and voip's delays failed there side by side).
static TURN: std::sync::RwLock<()> = std::sync::RwLock::new(());

enum Turn {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
}

impl Turn {
    fn take(alone: bool) -> Turn {
        if alone {
            Turn::Alone(TURN.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Turn::Shared(TURN.read().unwrap_or_else(|e| e.into_inner()))
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for p in &self.pairs {
            let _ = Command::new("ip").args(["link", "del", p]).output();
        }
        self.hosts.clear();
        let mut run = RUN_SSHD.lock().unwrap_or_else(|e| e.into_inner());
        run.0 -= 1;
        if run.0 == 0 && run.1 {
            run.1 = false;
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    /// Two hosts; `None` (and a visible reason) unless root with sshd, ssh and ssh-keygen.
    fn new(test: &str) -> Option<Hosts> {
        Self::with_turn(test, 2, false)
    }

    /// `n` hosts (at least two), and no other test of this file beside this one while
    /// they live.
    fn alone(test: &str, n: usize) -> Option<Hosts> {
        Self::with_turn(test, n, true)
    }

    fn with_turn(test: &str, n: usize, alone: bool) -> Option<Hosts> {
        if skip_unless_root(test)
            || !have(test, "/usr/sbin/sshd")
            || !have(test, "ssh")
            || !have(test, "ssh-keygen")
        {
            return None;
        }
        // first: what follows looks at the machine (/run/sshd) as the other tests leave it
        let turn = Turn::take(alone);
        let dir =
            TempDir(std::env::temp_dir().join(format!("weir-ssh-{}-{test}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        for key in ["host_key", "client_key"] {
            sh(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.0.join(key)));
        }
        std::fs::copy(dir.0.join("client_key.pub"), dir.0.join("authorized_keys")).unwrap();
        // sshd's privilege separation directory (made by Debian's service, which CI does not run)
        {
            // made by the first test that needs it, removed by the last (tests overlap)
            let mut run = RUN_SSHD.lock().unwrap_or_else(|e| e.into_inner());
            if run.0 == 0 && !Path::new("/run/sshd").exists() {
                std::fs::create_dir_all("/run/sshd").unwrap();
                run.1 = true;
            }
            run.0 += 1;
        }
        let here = Netns::host().unwrap();
        let (lan, wan) = unique_veth_names();
        let more: Vec<String> = (2..n).map(|_| unique_veth_names().0).collect();
        let mut hosts = Hosts {
            hosts: Vec::new(),
            lan: lan.clone(),
            wan: wan.clone(),
            more: more.clone(),
            pairs: Vec::new(),
            dir,
            _turn: turn,
        };
        for (i, test_if) in [lan, wan].into_iter().chain(more).enumerate() {
            let ns = Netns::new(&format!("ssh{i}")).unwrap();
            let (mgmt_here, _) = unique_veth_names();
            // a /30 per host, per fixture and per process
            static FIXTURES: std::sync::atomic::AtomicUsize =
                std::sync::atomic::AtomicUsize::new(0);
            let k = FIXTURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let net = 100 + (k + 8 * (std::process::id() as usize % 16)) % 150;
            let (here_addr, addr) = (format!("10.99.{net}.1"), format!("10.99.{net}.2"));
            link_veth(&here, &mgmt_here, &ns, "mgmt0").unwrap();
            add_addr(&here, &mgmt_here, &format!("{here_addr}/30")).unwrap();
            add_addr(&ns, "mgmt0", &format!("{addr}/30")).unwrap();
            set_up(&here, &mgmt_here).unwrap();
            set_up(&ns, "mgmt0").unwrap();
            link_veth(&here, &test_if, &ns, "eth1").unwrap();
            set_up(&here, &test_if).unwrap();
            let d = hosts.dir.0.display();
            let config = hosts.dir.0.join(format!("sshd_config{i}"));
            std::fs::write(
                &config,
                format!(
                    "ListenAddress {addr}\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                     PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {d}/sshd{i}.pid\n"
                ),
            )
            .unwrap();
            let sshd = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns.name(),
                    "/usr/sbin/sshd",
                    "-D",
                    "-e",
                    "-f",
                ])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            hosts.hosts.push(SshNs {
                ns,
                addr,
                _sshd: KillOnDrop(Some(sshd)),
            });
        }
        // sshd is listening once a connection is refused no more
        for h in &hosts.hosts {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect_timeout(
                &format!("{}:22", h.addr).parse().unwrap(),
                Duration::from_millis(200),
            )
            .is_err()
            {
                assert!(
                    Instant::now() < deadline,
                    "sshd on {} did not start",
                    h.addr
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(hosts)
    }

    /// `[hosts.NAME]` for host `i`.
    fn host(&self, name: &str, i: usize) -> String {
        let d = self.dir.0.display();
        format!(
            "[hosts.{name}]\nssh = \"root@{}\"\ninterface = \"eth1\"\nweir = \"{WEIR}\"\n\
             ssh_options = [\"-F\", \"none\", \"-i\", \"{d}/client_key\", \"-o\", \"IdentitiesOnly=yes\", \
             \"-o\", \"UserKnownHostsFile={d}/known_hosts\", \"-o\", \"StrictHostKeyChecking=accept-new\"]\n\n",
            self.hosts[i].addr
        )
    }

    /// A topology: both hosts, named as seed 000's testbed names them, and the DUT
    /// between the two test veths here.
    fn topology(&self) -> String {
        self.topology_of(["sender", "receiver"])
    }

    /// A topology with the hosts named `names` (sending side first).
    fn topology_of(&self, names: [&str; 2]) -> String {
        format!(
            "{}{}[dut]\nlan = \"{}\"\nwan = \"{}\"\n",
            self.host(names[0], 0),
            self.host(names[1], 1),
            self.lan,
            self.wan
        )
    }

    /// A seed 000 topology with the lab's WAN stage here: a new veth pair joins the DUT's
    /// wan side to the stage's lan side, the stage's wan side is the receiver's veth.
    fn topology_with_wan(&mut self) -> String {
        self.topology_with_wan_of(["sender", "receiver"])
    }

    /// [`Hosts::topology_with_wan`] with the hosts named `names` (sending side first).
    fn topology_with_wan_of(&mut self, names: [&str; 2]) -> String {
        let (dut_wan, stage_lan) = self.veth_pair();
        format!(
            "{}{}[dut]\nlan = \"{}\"\nwan = \"{dut_wan}\"\n\n[wan]\nlan = \"{stage_lan}\"\n\
             wan = \"{}\"\n",
            self.host(names[0], 0),
            self.host(names[1], 1),
            self.lan,
            self.wan
        )
    }

    /// A new veth pair here, both ends up (removed when the hosts are dropped).
    fn veth_pair(&mut self) -> (String, String) {
        let (a, b) = unique_veth_names();
        sh(Command::new("ip").args(["link", "add", &a, "type", "veth", "peer", "name", &b]));
        self.pairs.push(a.clone());
        for i in [&a, &b] {
            sh(Command::new("ip").args(["link", "set", i, "up"]));
        }
        (a, b)
    }

    /// `text` written to `TAG.toml` in the test's directory; its path.
    fn write(&self, tag: &str, text: &str) -> String {
        let path = self.dir.0.join(format!("{tag}.toml"));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// What a run may leave behind on host `i`: its test interface's addresses, its TCP
    /// sysctls, its offloads.
    fn state(&self, i: usize) -> String {
        let ns = &self.hosts[i].ns;
        let addrs = ns.ip(&["-br", "addr", "show", "dev", "eth1"]).unwrap();
        let sysctls: Vec<String> = [
            "net.ipv4.tcp_sack",
            "net.ipv4.tcp_timestamps",
            "net.ipv4.tcp_window_scaling",
        ]
        .iter()
        .map(|k| ns.get_sysctl(k).unwrap())
        .collect();
        let offloads = ns
            .try_run(|| weir_io::ethtool::get_offloads("eth1").unwrap())
            .unwrap();
        format!(
            "{} sysctls {sysctls:?} offloads {offloads}",
            String::from_utf8_lossy(&addrs.stdout).trim()
        )
    }
}

/// `weir lab basic`'s arguments for one 20 s run of weir:cbq+pfq on `topo`, into `out`.
fn basic_args<'a>(topo: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec![
        "lab",
        "basic",
        "--quick",
        "--runs",
        "1",
        "--duration",
        "20s",
        "--dut",
        "weir:cbq+pfq",
        "--topology",
        topo,
        "--out",
        out.to_str().unwrap(),
    ]
}

#[test]
fn basic_test_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::alone("basic_test_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let topo = h.write("lab", &h.topology());
    let out = h.dir.0.join("out");
    let (code, stdout, err) = weir(&basic_args(&topo, &out));
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    let v = lab_result(&out, "basic", &["result.json"]);
    let run = &v["runs"][0];
    let hosts = run["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{run}");
    for host in hosts {
        // one machine's clock: the offset is the exchange's own error, below its bound
        let (off, unc) = (
            host["clock"]["offset_ms"].as_f64().unwrap(),
            host["clock"]["uncertainty_ms"].as_f64().unwrap(),
        );
        assert!(off.abs() <= unc + 0.5 && unc < 50.0, "{host}");
    }
    assert_eq!(
        v["config"]["topology"]["hosts"]["sender"]["interface"],
        "eth1"
    );
    let sessions = run["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 20);
    assert!(
        sessions
            .iter()
            .all(|s| s["goodput_bps"].as_f64().unwrap() > 0.0 && s["error"].is_null()),
        "{run}"
    );
    // a 20 s run is short for the low classes' slow start (in namespaces too: c128 read
    // 0.941 in namespaces and 0.947 here when this was written): judge the two fastest
    // classes' accuracy, and fairness as the lab does
    for (dut, class, st) in v["stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (&c[0], &c[1], &c[2]))
    {
        let acc = st["accuracy"].as_f64().unwrap();
        if class == "c256" || class == "c1100" {
            assert!(
                (0.95..=1.05).contains(&acc),
                "{dut} {class}: accuracy {acc}"
            );
        }
    }
    let fairness = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().unwrap().contains("fairness"))
        .unwrap();
    assert_eq!(fairness["passed"], true, "{fairness}");
    assert_eq!(
        [h.state(0), h.state(1)],
        before,
        "a host was not left as it was"
    );
}

#[test]
fn ssh_host_failures_name_the_host_and_leave_hosts_clean() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::new("ssh_host_failures") else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let out = h.dir.0.join("out");
    let lab = |topo: &str| weir(&basic_args(topo, &out));
    // each (tag, the topology changed, what the error says)
    let good = h.topology();
    let lan_wan = format!("lan = \"{}\"\nwan = \"{}\"", h.lan, h.wan);
    let cases = [
        // a mistake in the file, at its line, before anything connects
        (
            "bad",
            good.replacen("interface = \"eth1\"", "interface = \"eth1/x\"", 1),
            vec!["bad.toml:3:13", "interface"],
        ),
        // an interface the host does not have, named with the file's line
        (
            "noif",
            good.replacen("interface = \"eth1\"", "interface = \"eth9\"", 1),
            vec!["noif.toml:3:13", "eth9"],
        ),
        // a host that refuses SSH (nothing listens on port 2): ssh's exit status and message
        (
            "refused",
            good.replacen("\"-F\", \"none\",", "\"-F\", \"none\", \"-p\", \"2\",", 1),
            vec!["sender: ssh root@", "255", "refused"],
        ),
        // a host without weir
        (
            "noweir",
            good.replacen(
                &format!("weir = \"{WEIR}\""),
                "weir = \"/nonexistent/weir\"",
                1,
            ),
            vec!["sender: `/nonexistent/weir` was not found"],
        ),
        // an external DUT refuses weir's DUT specs
        (
            "ext",
            good.replace(&lan_wan, "external = true"),
            vec!["--dut external"],
        ),
    ];
    for (tag, text, want) in cases {
        let (code, _, err) = lab(&h.write(tag, &text));
        assert_eq!(code, 1, "{tag}: {err}");
        for w in want {
            assert!(err.contains(w), "{tag}: want {w:?} in: {err}");
        }
    }
    assert_eq!(
        [h.state(0), h.state(1)],
        before,
        "a failed start left a host changed"
    );

    // the receiver's agent dies mid-run (SIGTERM: it undoes its own changes first)
    let topo = h.write("die", &good);
    let child = Command::new(WEIR)
        .args(basic_args(&topo, &out))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lab_run = KillOnDrop(Some(child));
    let receiver = h.hosts[1].ns.name().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let agent_pid = loop {
        // the agent runs once the receiver's test address is there
        let pids = Command::new("ip")
            .args(["netns", "pids", &receiver])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&pids.stdout)
            .split_whitespace()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("agent") && c.starts_with(WEIR))
            })
            .map(str::to_string);
        if let (Some(p), true) = (&pid, h.state(1).contains("10.77.0.2")) {
            break p.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the receiver's agent never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(3));
    sh(Command::new("kill").args(["-TERM", &agent_pid]));
    let t0 = Instant::now();
    let done = lab_run.wait_output(Duration::from_secs(40));
    let err = String::from_utf8_lossy(&done.stderr);
    eprintln!("{err}");
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(
        err.contains("died mid-run: receiver: the agent on root@")
            && err.contains("stopped by a signal"),
        "{err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(25),
        "the lab took {:?} to stop",
        t0.elapsed()
    );
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// `weir lab rrul --quick --case rrul_be --rtt 0 --dut DUT [EXTRA…] --topology TOPO --out OUT`.
fn rrul_args<'a>(dut: &'a str, topo: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "lab", "rrul", "--quick", "--case", "rrul_be", "--rtt", "0", "--dut", dut,
    ];
    a.extend_from_slice(extra);
    a.extend_from_slice(&["--topology", topo, "--out", out.to_str().unwrap()]);
    a
}

/// `weir lab rrul` on SSH-reached hosts: the network's own path (here veths), weir's
/// default queue at 10 Mbit/s; one-way delays on the lab's clock.
#[test]
fn rrul_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::alone("rrul_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let topo = h.write("rrul", &h.topology_of(["client", "server"]));
    let out = h.dir.0.join("out");
    let (code, stdout, err) = weir(&rrul_args("weir:fq_cobalt", &topo, &out, &[]));
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("real hosts"), "{stdout}");
    let v = lab_result(&out, "rrul", &["result.json"]);
    let part = &v["parts"][0];
    assert_eq!(part["runs"][0]["hosts"].as_array().unwrap().len(), 2);
    // the clocks were close enough for one-way figures
    assert!(!part["runs"][0]["probes"][0]["up_us"]
        .as_array()
        .unwrap()
        .is_empty());
    let row = &part["rows"][0];
    for dir in ["up", "down"] {
        let share = row[dir]["share"].as_f64().unwrap();
        assert!(share > 0.9, "{dir}: {share}");
    }
    // one 1514-byte frame takes 1.2 ms at 10 Mbit/s: the probes wait about half of one
    // each way (1.2-1.3 ms measured here and in namespaces without the emulated line)
    let rtt = &row["latency"][0];
    assert_eq!(rtt["measure"], "udp rtt");
    let added = rtt["added_p50_ms"].as_f64().unwrap();
    assert!(added < 3.0, "added p50 {added} ms");
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// rrul's `voice` case on SSH-reached hosts through the lab's line at the topology's
/// `[wan]` (50 ms base RTT): both calls run by the hosts' agents, every packet's record
/// read back; each call's one-way delay is the line's 25 ms plus little (weir's default
/// queue in front), none lost, and the line's report is in the result.
#[test]
fn rrul_voice_through_a_wan_line_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(mut h) = Hosts::alone("rrul_voice_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let text = h.topology_with_wan_of(["client", "server"]);
    let topo = h.write("rrul-wan", &text);
    let out = h.dir.0.join("out-rrul-voice");
    let (code, stdout, err) = weir(&[
        "lab",
        "rrul",
        "--quick",
        "--case",
        "voice",
        "--rtt",
        "50",
        "--idle",
        "1s",
        "--length",
        "5s",
        "--dut",
        "weir:fq_cobalt",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("the line at [wan]"), "{stdout}");
    let v = lab_result(&out, "rrul", &["result.json"]);
    let run = &v["parts"][0]["runs"][0];
    assert!(
        run["line_report"]["policy"].is_string(),
        "{}",
        run["line_report"]
    );
    let calls = v["parts"][0]["rows"][0]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "up and down");
    for c in calls {
        let st = &c["stats"];
        assert!(st["sent"].as_u64().unwrap() > 100, "{c}");
        assert_eq!(st["lost"], 0, "{c}");
        let p50 = st["delay_p50_ms"].as_f64().unwrap();
        assert!((25.0..35.0).contains(&p50), "{}: p50 {p50} ms", c["name"]);
    }
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// `weir lab voip` on SSH-reached hosts: the G.729 call (a CBR sender on the sender, its
/// sink on the receiver, every packet's record read back over the channel) beside the 20
/// FTP sessions through weir's cbq+pfq at the T1's rate, and the T1 itself emulated by
/// the lab's WAN stage on this machine (the topology's `[wan]`): the call's one-way delay
/// is the line's serialisation behind FTP frames, 4.3 ms p50 measured here as in
/// namespaces (without the line, 0.04 ms).
#[test]
fn voip_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(mut h) = Hosts::alone("voip_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let text = h.topology_with_wan();
    let topo = h.write("lab", &text);
    let out = h.dir.0.join("out");
    let (code, stdout, err) = weir(&[
        "lab",
        "voip",
        "--quick",
        "--link",
        "t1",
        "--dut",
        "weir:cbq+pfq",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    let v = lab_result(&out, "voip", &["result.json"]);
    let part = &v["parts"][0];
    assert_eq!(part["plan"]["line_bps"], 1_544_000, "the line at [wan]");
    let run = &part["runs"][0];
    assert_eq!(run["hosts"].as_array().unwrap().len(), 2, "{run}");
    let call = &run["voice"][0];
    assert_eq!(
        call["packets"].as_array().unwrap().len(),
        500,
        "every record came back"
    );
    let voice = &part["rows"][0]["voice"];
    assert_eq!(
        (&voice["sent"], &voice["lost"]),
        (&500.into(), &0.into()),
        "{voice}"
    );
    // one-way, the receiver's stamps put on the sender's clock: at least the voice
    // frame's own time on the T1 (74 B: 0.38 ms), at most a 1514-byte frame's ahead of
    // it (7.8 ms) and its own at the median
    let (lo, p50) = (
        voice["delay_min_ms"].as_f64().unwrap(),
        voice["delay_p50_ms"].as_f64().unwrap(),
    );
    assert!(lo >= 0.3 && (1.0..8.5).contains(&p50), "{voice}");
    assert!(voice["rating"]["mos"].as_f64().unwrap() > 4.0, "{voice}");
    assert!(
        stdout.contains("PASS t1 weir:cbq+pfq: the call loses <= 1 %"),
        "{stdout}"
    );
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// `weir lab rfc6349` on SSH-reached hosts: the path MTU search, the baseline probes, the
/// bottleneck stream (a CBR sender and sink run by the hosts' agents) and a transfer, all
/// through weir's default queue at 10 Mbit/s on this machine.
#[test]
fn rfc6349_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::alone("rfc6349_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let topo = h.write("rfc6349", &h.topology_of(["client", "server"]));
    let out = h.dir.0.join("out");
    let (code, stdout, err) = weir(&[
        "lab",
        "rfc6349",
        "--quick",
        "--rtt",
        "0",
        "--transfer",
        "4s",
        "--dut",
        "weir:fq_cobalt",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("real hosts"), "{stdout}");
    let v = lab_result(&out, "rfc6349", &["result.json"]);
    let p = &v["paths"][0];
    assert_eq!(p["hosts"].as_array().unwrap().len(), 2, "{p}");
    assert_eq!(p["mtu"]["mtu"], 1500, "{p}");
    // the bottleneck stream, offered at 125 % of the rate, comes out at the rate
    let bb = p["bb"]["bb_bps"].as_f64().unwrap();
    assert!((bb / 10e6 - 1.0).abs() < 0.03, "BB {bb}");
    assert!(p["baseline"]["min_ms"].as_f64().unwrap() < 5.0, "{p}");
    for c in p["tests"][0]["conns"].as_array().unwrap() {
        assert_eq!(c["bytes_received"], c["bytes_asked"], "{c}");
    }
    assert!(p["rmem_max"].as_u64().unwrap() > 0, "{p}");
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// RFC 2544 on the SSH-reached hosts: the CBR streams run there, the receiving host
/// computes each stream's figures (the `drain` request); one frame size, a short search.
/// weir holds the class's 100 Mbit/s, the frame delays count (one clock here), the
/// lab's checks pass and the hosts are left as they were.
#[test]
fn rfc2544_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::alone("rfc2544_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let topo = h.write("rfc2544", &h.topology());
    let out = h.dir.0.join("out-rfc2544");
    let (code, stdout, err) = weir(&[
        "lab",
        "rfc2544",
        "--quick",
        "--dut",
        "weir",
        "--sizes",
        "1518",
        "--line-rate",
        "200Mbit",
        "--resolution",
        "5",
        "--loss-step",
        "50",
        "--b2b-time",
        "0s",
        "--trial-time",
        "500ms",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("real hosts"), "{stdout}");
    let v = lab_result(&out, "rfc2544", &["result.json"]);
    let d = &v["duts"][0];
    assert_eq!(d["hosts"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(d["one_way"], true, "{d}");
    let size = &d["sizes"][0];
    let tput = size["throughput_bps"].as_f64().unwrap();
    assert!((0.9e8..1.01e8).contains(&tput), "throughput {tput}");
    assert!(size["latency"]["ftd"]["mean"].as_f64().is_some(), "{size}");
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["passed"], true, "{c}");
    }
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// The fidelity lab on SSH-reached hosts: the CBR's sender and sink run there (every
/// record read back), weir's emulator at 125 ms and 155 Mbit/s here between them. Below
/// the rate the delay is the emulated one to within 0.2 ms (one clock: the offsets are
/// the exchange's own error) and nothing is lost; above it the gaps are the link's
/// serialisation time; every check passes and the hosts are left as they were.
#[test]
fn fidelity_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    // alone: its delays lean on the clock estimate, which a loaded machine blurs
    let Some(h) = Hosts::alone("fidelity_on_ssh_hosts", 2) else {
        return;
    };
    let before = [h.state(0), h.state(1)];
    let topo = h.write("fidelity", &h.topology());
    let out = h.dir.0.join("out-fidelity");
    let (code, stdout, err) = weir(&[
        "lab",
        "fidelity",
        "--quick",
        "--paths",
        "weir-125ms-155M",
        "--sizes",
        "1518",
        "--cell-time",
        "300ms",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("Real hosts"), "{stdout}");
    let v = lab_result(&out, "fidelity", &["result.json"]);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2, "{}", v["hosts"]);
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "8,000 and 80,000 packets/s");
    let below = &cells[0];
    assert_eq!((&below["pps"], &below["lost"]), (&8000.into(), &0.into()));
    let d = below["delay_us"]["p50"].as_f64().unwrap();
    assert!((125_000.0..125_300.0).contains(&d), "delay p50 {d} us");
    let above = &cells[1];
    let gap = above["ifg_us"]["p50"].as_f64().unwrap();
    assert!((gap - 78.35).abs() < 1.0, "gap p50 {gap} us");
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["passed"], true, "{c}");
    }
    assert_eq!([h.state(0), h.state(1)], before, "a host was left changed");
}

/// Seed 004's chain on SSH-reached hosts: A, B and three background hosts over SSH, the
/// three routers here between their interfaces (each router's input bridged with its
/// background host's by the lab). The calibration's echo probes and every stream run on
/// the hosts; B's clock is its own, and the echo estimate agrees with the SSH exchange's.
/// EF below the reservation loses nothing and 10 Mbit/s of EF is held to it, every check
/// passes, the hosts are left as they were and the lab's bridges are gone.
#[test]
fn diffserv_on_ssh_hosts() {
    let _group = crate::common::group(module_path!());
    // alone: its background hosts must each sustain 100 Mbit/s (a check of the lab's)
    let Some(mut h) = Hosts::alone("diffserv_on_ssh_hosts", 5) else {
        return;
    };
    let before: Vec<String> = (0..5).map(|i| h.state(i)).collect();
    let (r0_wan, r1_lan) = h.veth_pair();
    let (r1_wan, r2_lan) = h.veth_pair();
    let mut text: String = ["a", "b", "c0", "c1", "c2"]
        .iter()
        .enumerate()
        .map(|(i, n)| h.host(n, i))
        .collect();
    for (lan, bg, wan) in [
        (&h.lan, &h.more[0], &r0_wan),
        (&r1_lan, &h.more[1], &r1_wan),
        (&r2_lan, &h.more[2], &h.wan),
    ] {
        text += &format!("[[router]]\nlan = \"{lan}\"\nbackground = \"{bg}\"\nwan = \"{wan}\"\n\n");
    }
    let topo = h.write("diffserv", &text);
    let out = h.dir.0.join("out-diffserv");
    let (code, stdout, err) = weir(&[
        "lab",
        "diffserv",
        "--quick",
        "--groups",
        "ef-udp",
        "--device",
        "weir",
        "--duration",
        "1s",
        "--calibration",
        "2s",
        "--topology",
        &topo,
        "--out",
        out.to_str().unwrap(),
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("real clocks"), "{stdout}");
    let v = lab_result(&out, "diffserv", &["result.json"]);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 5, "{}", v["hosts"]);
    assert!(v["calibration"]["reference_bound_ns"].as_f64().is_some());
    assert_eq!(
        v["runs"].as_array().unwrap().len(),
        4,
        "ef-udp's four rates"
    );
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["passed"], true, "{c}");
    }
    assert!(
        stdout.contains("PASS weir: EF loses nothing below the reservation"),
        "{stdout}"
    );
    for made in ["weirmrg0", "weirin2", "weirrtr1"] {
        let o = Command::new("ip")
            .args(["link", "show", made])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{made} was left behind");
    }
    let after: Vec<String> = (0..5).map(|i| h.state(i)).collect();
    assert_eq!(after, before, "a host was left changed");
}

/// What runs only in namespaces is refused with `--topology` before anything connects
/// (no root or sshd needed).
#[test]
fn topology_refusals_before_anything_connects() {
    let _group = crate::common::group(module_path!());
    let dir = TempDir(std::env::temp_dir().join(format!("weir-ssh-refuse-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let write = |name: &str, roles: [&str; 2]| {
        let p = dir.0.join(name);
        std::fs::write(
            &p,
            format!(
                "[hosts.{}]\nssh = \"h1\"\ninterface = \"eth1\"\n[hosts.{}]\nssh = \"h2\"\n\
                 interface = \"eth1\"\n[dut]\nlan = \"l0\"\nwan = \"w0\"\n",
                roles[0], roles[1]
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let seed000 = write("seed000.toml", ["sender", "receiver"]);
    let rrul = write("rrul.toml", ["client", "server"]);
    let chain = dir.0.join("chain.toml");
    std::fs::write(
        &chain,
        "[hosts.sender]\nssh = \"h1\"\ninterface = \"eth1\"\n[hosts.receiver]\nssh = \"h2\"\n\
         interface = \"eth1\"\n[[router]]\nlan = \"l0\"\nwan = \"w0\"\n",
    )
    .unwrap();
    let chain = chain.display().to_string();
    for (args, want) in [
        (
            vec!["lab", "robustness", "--topology", &seed000],
            "needs a WAN stage, and the topology",
        ),
        (
            vec!["lab", "aggregates", "--quick", "--topology", &seed000],
            "needs a second router, and the topology",
        ),
        (
            vec!["lab", "rrul", "--topology", &rrul, "--rtt", "50"],
            "--rtt 0",
        ),
        (
            vec!["lab", "rfc6349", "--topology", &rrul, "--rtt", "50"],
            "--rtt 0",
        ),
        (
            vec!["lab", "rfc6349", "--dut", "external"],
            "only on real hosts",
        ),
        // each lab's own host names
        (
            vec!["lab", "rrul", "--topology", &seed000, "--rtt", "0"],
            "unknown host `receiver`",
        ),
        (
            vec!["lab", "basic", "--topology", &rrul],
            "unknown host `client`",
        ),
        (
            vec!["lab", "basic", "--topology", "/nonexistent.toml"],
            "/nonexistent.toml",
        ),
        // an external DUT needs real hosts
        (
            vec!["lab", "basic", "--dut", "external"],
            "only on real hosts",
        ),
        (
            vec!["lab", "robustness", "--dut", "external"],
            "only on real hosts",
        ),
        (
            vec!["lab", "rrul", "--dut", "external"],
            "only on real hosts",
        ),
        (
            vec!["lab", "rfc2544", "--dut", "external"],
            "only on real hosts",
        ),
        (
            vec!["lab", "y1564", "--dut", "external"],
            "only on real hosts",
        ),
        (
            vec!["lab", "y1564", "--topology", &rrul],
            "unknown host `client`",
        ),
        // diffserv's chain: its own host names and [[router]] tables, no injected skew
        (
            vec!["lab", "diffserv", "--topology", &seed000],
            "unknown host `receiver`",
        ),
        (
            vec![
                "lab",
                "diffserv",
                "--topology",
                &seed000,
                "--drift-ppm",
                "3",
            ],
            "the hosts' clocks are their own",
        ),
        (
            vec!["lab", "basic", "--topology", &chain],
            "a chain of routers is for weir lab diffserv",
        ),
        // postgate's ATU-C is a WAN stage; fidelity's veth path is two namespaces here
        (
            vec!["lab", "postgate", "--quick", "--topology", &rrul],
            "emulates the ATU-C (the ADSL line) in a WAN stage, and the topology has no [wan]",
        ),
        (
            vec!["lab", "postgate", "--topology", &seed000],
            "unknown host `receiver`",
        ),
        (
            vec!["lab", "fidelity", "--topology", &seed000, "--paths", "veth"],
            "the veth path",
        ),
        (
            vec!["lab", "fidelity", "--topology", &rrul],
            "unknown host `client`",
        ),
    ] {
        let (code, _, err) = weir(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    }
}

/// rrul against an external DUT: the lab configures nothing between the hosts (here the
/// test itself bridges the two veths, as a box of its own would forward).
#[test]
fn rrul_against_an_external_dut() {
    let _group = crate::common::group(module_path!());
    let Some(h) = Hosts::new("rrul_external") else {
        return;
    };
    let here = Netns::host().unwrap();
    let (br, _) = unique_veth_names();
    here.ip(&["link", "add", &br, "type", "bridge"]).unwrap();
    struct DelBridge(String);
    impl Drop for DelBridge {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
    let _bridge = DelBridge(br.clone());
    for port in [&h.lan, &h.wan] {
        here.ip(&["link", "set", port, "master", &br]).unwrap();
    }
    set_up(&here, &br).unwrap();
    let lan_wan = format!("lan = \"{}\"\nwan = \"{}\"", h.lan, h.wan);
    let topo = h.write(
        "external",
        &h.topology_of(["client", "server"])
            .replace(&lan_wan, "external = true"),
    );
    let out = h.dir.0.join("out");
    let (code, stdout, err) = weir(&rrul_args(
        "external",
        &topo,
        &out,
        &["--idle", "1s", "--length", "4s"],
    ));
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "{err}");
    let v = lab_result(&out, "rrul", &["result.json"]);
    let run = &v["parts"][0]["runs"][0];
    assert_eq!(run["dut_report"]["spec"], "external");
    // nothing shapes: the flows run at the veths' speed, far above the 10 Mbit/s named
    let row = &v["parts"][0]["rows"][0];
    assert!(row["down"]["share"].as_f64().unwrap() > 2.0, "{row}");
}
