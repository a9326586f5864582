//! Hot policy reload under load, in network namespaces (root; skips otherwise): one TCP
//! flow (cubic, the hosts' default offloads) through `weir run`, 30 reloads with `weir
//! reload`, one every 1.5 s — the link alternating 10 ↔ 5 Mbit/s, one reload removing the
//! flow's class and the next adding it back — then a broken policy by `weir reload` and
//! by SIGHUP. Checks: no packet lost to a reload, the flow's rate follows each policy
//! within half a second (every phase's last second within 15 % of the new rate, the mean
//! over the phases within a few percent), the broken policies leave weir running with
//! the old one, `weir stats` shows the generation and the reload counts. weir sleeps
//! between packets (no `--busy-poll`), as a user's would: its late wake-ups are made up
//! by catch-up (without it, CI measured phases 30–84 % short on a busy host).

use crate::common::{stats, wait_for, weir, KillOnDrop, WEIR};
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_lab::agents::{SenderOpts, TcpSender, TcpSink};
use weir_lab::topo::{skip_unless_root, BridgeTopo};
/// Seconds between reloads; the rate is checked over the last `PHASE - SETTLE` of each.
const PHASE: f64 = 1.5;
const SETTLE: f64 = 0.5;
const RELOADS: usize = 30;
/// The reload that removes the flow's class (the next one adds it back).
const REMOVE_AT: usize = 15;
/// Seconds before the first reload: slow start's overshoot and its recovery are over.
const WARMUP: f64 = 3.0;

/// The link at `mbit`; the flow (TCP to port 5001) in class `bulk` unless `bulk` is false,
/// else in the default class `rest`. Either class may borrow the whole link. RED queues
/// (`cbq+red`): with drop-tail a single cubic flow now and then loses a burst and stalls
/// for most of a second, which says nothing about reloading.
fn policy(mbit: u32, bulk: bool) -> String {
    let mut s = format!(
        "[link]\nrate = \"{mbit}Mbit\"\ndefault = \"rest\"\ntechnique = \"cbq+red\"\n\
         [[class]]\nname = \"rest\"\nrate = \"{}kbit\"\nceil = \"{mbit}Mbit\"\n",
        mbit * 100
    );
    if bulk {
        s += &format!(
            "[[class]]\nname = \"bulk\"\nrate = \"{}kbit\"\nceil = \"{mbit}Mbit\"\n\
             [[rule]]\nclass = \"bulk\"\nproto = \"tcp\"\nport = 5001\n",
            mbit * 900
        );
    }
    s
}

#[test]
fn reloads_under_load_lose_nothing_and_the_rate_follows() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("reloads_under_load_lose_nothing_and_the_rate_follows") {
        return;
    }
    let t = BridgeTopo::new("reload").unwrap();
    let dir = std::env::temp_dir().join(format!("weir-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("w.sock");
    let start_file = dir.join("running.toml");
    std::fs::write(&start_file, policy(10, true)).unwrap();
    let files: Vec<_> = [(10, true), (5, true), (5, false)]
        .iter()
        .map(|&(m, b)| {
            let f = dir.join(format!("p-{m}-{b}.toml"));
            std::fs::write(&f, policy(m, b)).unwrap();
            f
        })
        .collect();
    let w = KillOnDrop(Some(
        Command::new("ip")
            .args(["netns", "exec", t.dut.name(), WEIR, "run", "--json"])
            .arg("--policy")
            .arg(&start_file)
            .args(["--lan", &t.dut_lan, "--wan", &t.dut_wan])
            .arg("--stats-socket")
            .arg(&sock)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    wait_for(&sock, Duration::from_secs(5), "weir run did not start");

    let sink_addr = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001);
    // 10 ms bins: a phase's one-second window is 100 of them
    let sink = TcpSink::start(&t.rcv, sink_addr, Duration::from_millis(10)).unwrap();
    let t0 = Instant::now();
    let total = Duration::from_secs_f64(WARMUP + PHASE * RELOADS as f64 + 1.5);
    let snd = TcpSender::start(&t.snd, SenderOpts::new(sink_addr, total, "cubic")).unwrap();

    // (reload time since the sink started, expected link rate in Mbit/s)
    let mut phases = vec![(WARMUP - PHASE, 10u32)];
    let (mut kept, mut reclassified) = (0u64, 0u64);
    std::thread::sleep(Duration::from_secs_f64(WARMUP));
    for k in 1..=RELOADS {
        let (mbit, file) = match k {
            REMOVE_AT => (5, &files[2]), // the flow's class removed
            _ if k % 2 == 1 => (5, &files[1]),
            _ => (10, &files[0]),
        };
        let at = t0.elapsed().as_secs_f64();
        let (code, out, err) = weir(&[
            "reload",
            "--json",
            "--socket",
            sock.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "reload {k}: {out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let r = &v["report"]["outbound"];
        assert_eq!(v["report"]["generation"], k as u64 + 1, "{v}");
        assert_eq!(r["dropped"], 0, "reload {k} dropped packets: {v}");
        kept += r["kept"].as_u64().unwrap();
        reclassified += r["reclassified"].as_u64().unwrap();
        match k {
            REMOVE_AT => assert_eq!(r["classes_removed"], serde_json::json!(["bulk"]), "{v}"),
            k if k == REMOVE_AT + 1 => {
                assert_eq!(r["classes_added"], serde_json::json!(["bulk"]), "{v}")
            }
            _ => {}
        }
        phases.push((at, mbit));
        let next = t0 + Duration::from_secs_f64(WARMUP + PHASE * k as f64);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }

    // a broken policy: refused by `weir reload` itself, nothing sent
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "[link]\nrate = \"10Mbit\"\nburst = 7\n").unwrap();
    let (code, _, err) = weir(&[
        "reload",
        "--socket",
        sock.to_str().unwrap(),
        broken.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("broken.toml:3:1") && err.contains("nothing was sent"),
        "{err}"
    );
    // … and by the running weir, through SIGHUP on the file it was started with
    std::fs::write(&start_file, "[link]\nrate = \"ten\"\n").unwrap();
    let pid = w.0.as_ref().unwrap().id() as i32;
    // SAFETY: signalling our own child (ip netns exec runs weir in place).
    unsafe { libc::kill(pid, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(600));
    let v = stats(&sock);
    assert_eq!(
        v["policy"]["generation"],
        RELOADS as u64 + 1,
        "{}",
        v["policy"]
    );
    assert_eq!(v["policy"]["reloads"], RELOADS as u64);
    assert_eq!(v["policy"]["reloads_refused"], 1);
    let (code, table, _) = weir(&["stats", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        table.contains(&format!("generation {}", RELOADS + 1)),
        "{table}"
    );
    assert!(v["outbound"]["lane"]["tx"]["packets"].as_u64().unwrap() > 1000);

    let sr = snd.join();
    let rep = sink.stop();
    let out = w.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("SIGHUP: the new policy was refused"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["policy_generation"], RELOADS as u64 + 1);
    let o = &report["outbound"];
    assert_eq!(o["reload_drops"]["packets"], 0, "{o}");
    let n = |v: &serde_json::Value| v["packets"].as_u64().unwrap();
    let errors: u64 = o["offload_errors"]
        .as_object()
        .unwrap()
        .values()
        .map(n)
        .sum();
    assert_eq!(
        n(&o["rx"]) + n(&o["duplicated"]),
        n(&o["tx"])
            + n(&o["truncated"])
            + n(&o["oversize"])
            + n(&o["pool_exhausted"])
            + n(&o["dropped"])
            + errors
            + n(&o["reload_drops"])
            + n(&o["shutdown_drops"]),
        "{o}"
    );
    assert!(
        kept > 0,
        "no reload found packets queued: the test did not test carrying"
    );
    eprintln!(
        "{RELOADS} reloads: {kept} packets kept in their class, {reclassified} reclassified, 0 dropped; sender retransmissions {}",
        sr.retrans
    );
    let wake = &report["wake"];
    eprintln!("weir's {wake}");
    // a stall long enough for the kernel to take the link over would say nothing about
    // reloading (and its frames bypass the shaper)
    assert_eq!(
        report["fail_open"]["handovers"], 0,
        "{}",
        report["fail_open"]
    );
    assert!(wake["timer_wakeups"].as_u64().unwrap() > 1000, "{wake}");

    // the rate follows: over the last second of each phase, the goodput the link carries
    let conn = rep.conns.first().expect("a connection");
    let mut worst: f64 = 0.0;
    let mut bad = Vec::new();
    let mut sums = [(0.0, 0.0); 2];
    for (i, &(at, mbit)) in phases.iter().enumerate() {
        let from = at + SETTLE;
        let to = phases.get(i + 1).map_or(at + PHASE, |p| p.0);
        let got = conn.goodput_bps(
            rep.interval,
            Duration::from_secs_f64(from),
            Duration::from_secs_f64(to),
        );
        let want = mbit as f64 * 1e6 * 1448.0 / 1514.0;
        let err = got / want - 1.0;
        worst = worst.max(err.abs());
        let line = format!(
            "phase {i} ({mbit} Mbit/s from {at:.2} s): goodput {got:.0} vs {want:.0} ({:+.1} %)",
            err * 100.0
        );
        eprintln!("{line}");
        // the flow is at the new policy's rate, not the old one's (5 and 10 Mbit/s are
        // -50 % / +100 % apart); a one-second window of one TCP flow also moves with its
        // own loss recovery (the receiver releases buffered data when a hole fills):
        // measured within 2.5 % on this host, hence a 15 % band. Half-second windows (1 s
        // phases) were too short: one loss recovery took a 10 Mbit/s phase to -41 % in CI
        if !(-0.15..=0.15).contains(&err) {
            bad.push(line);
        }
        sums[(mbit == 10) as usize].0 += got;
        sums[(mbit == 10) as usize].1 += want;
    }
    assert!(
        bad.is_empty(),
        "the rate did not follow the policy:\n{}",
        bad.join("\n")
    );
    for (got, want) in sums {
        let err = got / want - 1.0;
        assert!(
            (-0.05..=0.02).contains(&err),
            "mean over the phases of one rate: {:+.1} %",
            err * 100.0
        );
    }
    eprintln!(
        "goodput within {:.1} % of each phase's rate (from {SETTLE} s after the reload)",
        worst * 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flood of reload requests (40 at once through the socket): each is answered — at
/// most 10 a second applied, the rest refused unread with a reason — and counted, one log
/// line says so, and weir keeps forwarding (pings through it during the flood).
#[test]
fn a_flood_of_reloads_is_refused_not_a_stall() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("a_flood_of_reloads_is_refused_not_a_stall") {
        return;
    }
    let t = BridgeTopo::new("rfl").unwrap();
    let dir = crate::common::TempDir(
        std::env::temp_dir().join(format!("weir-live-reload-flood-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("p.toml");
    std::fs::write(&file, policy(10, true)).unwrap();
    let sock = dir.0.join("w.sock");
    let w = crate::common::start_weir(&t, &["run", "--policy", file.to_str().unwrap()], &sock);
    let (s, f) = (sock.to_str().unwrap(), file.to_str().unwrap());
    let (pings, answers) = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            weir_lab::agents::icmp_ping_with(
                &t.snd,
                BridgeTopo::RCV_ADDR,
                &weir_lab::agents::PingOpts {
                    interval: Duration::from_millis(20),
                    ..weir_lab::agents::PingOpts::new(100, Duration::from_millis(500))
                },
            )
            .unwrap()
        });
        let clients: Vec<_> = (0..40)
            .map(|_| {
                sc.spawn(|| {
                    Command::new(WEIR)
                        .args(["reload", "--json", "--socket", s, f])
                        .output()
                        .unwrap()
                })
            })
            .collect();
        let answers: Vec<String> = clients
            .into_iter()
            .map(|c| String::from_utf8_lossy(&c.join().unwrap().stdout).into_owned())
            .collect();
        (h.join().unwrap(), answers)
    });
    let ok = answers
        .iter()
        .filter(|a| a.contains("\"ok\":true") || a.contains("\"ok\": true"))
        .count();
    let throttled = answers
        .iter()
        .filter(|a| a.contains("too many reload requests"))
        .count();
    assert_eq!(ok + throttled, 40, "every request answered: {answers:?}");
    assert!((10..=20).contains(&ok), "{ok} applied: {answers:?}");
    // the document published after the last reload (one every 250 ms at most; a second
    // after the flood, none has come: the publisher stalled)
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let v = loop {
        let v = stats(&sock);
        if v["policy"]["generation"] == ok as u64 + 1 || std::time::Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(v["policy"]["reloads_throttled"], throttled as u64, "{v}");
    assert_eq!(v["policy"]["generation"], ok as u64 + 1, "{v}");
    let answered = pings.iter().filter(|p| p.is_some()).count();
    assert!(
        answered >= 95,
        "forwarding stalled: {answered}/100 pings answered"
    );
    let out = w.terminate();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("weir reload: more than 10 requests a second; refused"),
        "{log}"
    );
}
