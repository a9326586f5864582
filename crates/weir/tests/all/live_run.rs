//! `weir run` and `weir stats` as processes, in network namespaces (root; skips otherwise).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_io::ethtool::{get_offloads, set_offloads, Offloads};
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

use crate::common::{wait_for, weir, KillOnDrop, ROOT, WEIR};

#[test]
fn run_refuses_bad_setups_clearly() {
    let _group = crate::common::group(module_path!());
    let (code, _, err) = weir(&[
        "run",
        "--policy",
        "examples/voip-ftp.toml",
        "--lan",
        "nosuch0",
        "--wan",
        "nosuch1",
    ]);
    assert_eq!(code, 1, "{err}");
    if skip_unless_root("run_refuses_bad_setups_clearly") {
        assert!(err.contains("not privileged enough to bridge"), "{err}");
        return;
    }
    assert!(err.contains("interface 'nosuch0' does not exist"), "{err}");
    let (code, _, err) = weir(&[
        "run",
        "--policy",
        "examples/voip-ftp.toml",
        "--lan",
        "lo",
        "--wan",
        "lo",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--lan and --wan are both 'lo'"), "{err}");
    let (code, _, err) = weir(&[
        "run",
        "--policy",
        "/nonexistent.toml",
        "--lan",
        "lo",
        "--wan",
        "x",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read policy"), "{err}");
}

fn offloads_in(ns: &weir_lab::topo::Netns, ifname: &str) -> Offloads {
    let i = ifname.to_string();
    ns.run(move || get_offloads(&i)).unwrap()
}

/// A full life cycle: start, forward, report statistics, capture, stop on SIGTERM with the
/// offloads it changed restored and the socket removed.
#[test]
fn run_forwards_reports_captures_and_stops_cleanly() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("run_forwards_reports_captures_and_stops_cleanly") {
        return;
    }
    let t = BridgeTopo::new("cli").unwrap();
    let dir = std::env::temp_dir().join(format!("weir-live-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("w.sock");
    let pcap = dir.join("cap.pcap");
    // a DUT interface that is down is refused
    t.dut
        .ip(&["link", "add", "dn0", "type", "veth", "peer", "name", "dn1"])
        .unwrap();
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            t.dut.name(),
            WEIR,
            "run",
            "--policy",
            "examples/voip-ftp.toml",
            "--lan",
            "dn0",
            "--wan",
            "wan0",
        ])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interface 'dn0' is down"), "{err}");

    // turn GRO on so that restoring it is observable
    let lan = t.dut_lan.clone();
    t.dut
        .run(move || {
            set_offloads(
                &lan,
                &Offloads {
                    gro: Some(true),
                    ..Default::default()
                },
            )
        })
        .unwrap();
    let before = offloads_in(&t.dut, &t.dut_lan);
    assert_eq!(before.gro, Some(true));

    let guard = KillOnDrop(Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                t.dut.name(),
                WEIR,
                "run",
                "--policy",
                "examples/voip-ftp.toml",
            ])
            .args(["--lan", &t.dut_lan, "--wan", &t.dut_wan])
            .arg("--stats-socket")
            .arg(&sock)
            .arg("--pcap")
            .arg(&pcap)
            .current_dir(ROOT)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    wait_for(
        &sock,
        Duration::from_secs(5),
        "weir run did not open its stats socket",
    );
    // receive merging off; segmentation offloads left as they were (a super-packet weir
    // sends whole is cut after it)
    let during = offloads_in(&t.dut, &t.dut_lan);
    assert_eq!(
        (during.gro, during.lro),
        (Some(false), before.lro.and(Some(false))),
        "{during}"
    );
    assert_eq!(
        (during.gso, during.tso),
        (before.gso, before.tso),
        "{during}"
    );

    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 3, Duration::from_secs(1)).unwrap();
    assert!(rtts.iter().all(|r| r.is_some()), "{rtts:?}");
    std::thread::sleep(Duration::from_millis(400)); // a stats publication

    let (code, json, err) = weir(&["stats", "--socket", sock.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["lan"], t.dut_lan.as_str());
    let classes = v["outbound"]["pipeline"]["classes"]
        .as_array()
        .expect("outbound is shaped");
    let names: Vec<&str> = classes.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["link", "voip", "ftp"]);
    assert!(
        v["outbound"]["lane"]["tx"]["packets"].as_u64().unwrap() >= 4,
        "{json}"
    );
    assert!(v["inbound"]["pipeline"].is_null());
    let (code, table, _) = weir(&["stats", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        table.contains("voip") && table.contains("(default)"),
        "{table}"
    );

    // SIGTERM: clean exit with a report
    let out = guard.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("outbound: rx") && stdout.contains("inbound: rx"),
        "{stdout}"
    );
    assert_eq!(offloads_in(&t.dut, &t.dut_lan), before, "offloads restored");
    assert!(!sock.exists(), "socket removed");

    // the capture: ns-resolution pcap with what left in both directions
    let cap = std::fs::read(&pcap).unwrap();
    assert_eq!(&cap[..4], &0xa1b23c4du32.to_le_bytes());
    let mut n = 0;
    let mut at = 24;
    while at + 16 <= cap.len() {
        let incl = u32::from_le_bytes(cap[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
        n += 1;
    }
    assert_eq!(at, cap.len());
    assert!(n >= 8, "{n} records: ARP and 3 pings each way");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn emu_refuses_bad_options_clearly() {
    let _group = crate::common::group(module_path!());
    let base = ["emu", "--lan", "a0", "--wan", "a1"];
    for (extra, want) in [
        (&["--loss", "often"][..], "--loss: loss 'often': expected"),
        (&["--delay", "5 parsecs"][..], "--delay:"),
        (&["--rate", "4bit"][..], "rate must be at least 8 bit/s"),
        (
            &["--jitter", "1ms", "--distribution", "gauss"][..],
            "--distribution:",
        ),
        (
            &["--duplicate", "150%"][..],
            "--duplicate: '150%' is outside",
        ),
        (&["--direction", "up"][..], "--direction: 'up'"),
        (
            &["--framing", "pppoe-ptm adsl"][..],
            "--framing: unknown framing keyword 'adsl'; expected one of: raw,",
        ),
        (
            &["--overhead", "-40"][..],
            "--overhead: overhead -40 counts a 34-byte frame",
        ),
        (
            &["--mpu", "5000"][..],
            "--mpu: mpu 5000 is above 4096 bytes",
        ),
        (
            &["--netem", "delay 10ms ecn"][..],
            "--netem: netem: at 'ecn' (word 3): ecn requested without loss model",
        ),
        (
            &["--netem", "delay 10ms 1ms distribution /nonexistent/x.dist"][..],
            "--netem: netem: at '/nonexistent/x.dist' (word 5): no distribution table",
        ),
        (
            &["--netem", "delay 10ms 1ms distribution {bad}"][..],
            "bad.dist:3: 'x12' is not an integer",
        ),
        // mm-link's options
        (
            &["--up-rate", "1Mbit", "--direction", "both"][..],
            "--direction both: the per-direction options",
        ),
        (
            &["--up-rate", "1Mbit", "--uplink-queue", "codel"][..],
            "--uplink-queue: a codel queue needs target=MS and interval=MS (as mm-link)",
        ),
        (
            &["--up-rate", "1Mbit", "--uplink-queue", "pie"][..],
            "--uplink-queue: 'pie': weir has no PIE",
        ),
        (
            &["--down-rate", "1Mbit", "--downlink-queue", "droptail"][..],
            "--downlink-queue: a droptail queue needs a limit",
        ),
        (
            &["--rate", "1Mbit", "--once"][..],
            "--once plays a delivery trace once",
        ),
        (
            &["--up", "/nonexistent/up.trace"][..],
            "--up: cannot read /nonexistent/up.trace",
        ),
        (
            &["--up", "{bad}"][..],
            "bad.dist: line 2: '1 2 3' is not a millisecond timestamp",
        ),
        (
            &["--up-rate", "1Mbit", "--aqm", "codel"][..],
            "--aqm: a managed queue takes one --rate",
        ),
        (
            &["--outage", "10s"][..],
            "--outage: '10s': expected START-END",
        ),
        (
            &["--delay-schedule", "5s=10ms"][..],
            "delay schedule: must start at 0s",
        ),
        (
            &["--delay-trace", "/nonexistent/rtt.txt"][..],
            "--delay-trace: cannot read /nonexistent/rtt.txt",
        ),
        (
            &["--loss-trace", "{bad}"][..],
            "bad.dist: line 2: field 2 (LOSS): ",
        ),
    ] {
        let bad = std::env::temp_dir().join(format!("weir-netem-{}-bad.dist", std::process::id()));
        std::fs::write(&bad, "# a table\n1 2 3\n4 x12 5\n").unwrap();
        let bad = bad.display().to_string();
        let extra: Vec<String> = extra.iter().map(|e| e.replace("{bad}", &bad)).collect();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let extra = &extra[..];
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (code, _, err) = weir(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `weir emu` as a process: one-way delay on the outbound direction shows in the ping RTT,
/// periodic loss loses exactly every Nth echo request, and the stats socket reports the
/// emulated link.
#[test]
fn emu_delays_and_loses_as_asked() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("emu_delays_and_loses_as_asked") {
        return;
    }
    let t = BridgeTopo::new("emu").unwrap();
    let dir = std::env::temp_dir().join(format!("weir-live-emu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("e.sock");
    let start = |extra: &[&str]| {
        let g = KillOnDrop(Some(
            Command::new("ip")
                .args(["netns", "exec", t.dut.name(), WEIR])
                .arg(if extra.first() == Some(&"--policy") {
                    "run"
                } else {
                    "emu"
                })
                .args(["--lan", &t.dut_lan, "--wan", &t.dut_wan])
                .arg("--stats-socket")
                .arg(&sock)
                .args(extra)
                .current_dir(ROOT)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        ));
        wait_for(&sock, Duration::from_secs(5), "weir emu did not start");
        g
    };
    let stop = |g: KillOnDrop| {
        let out = g.terminate();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while sock.exists() {
            assert!(Instant::now() < deadline, "socket not removed");
            std::thread::sleep(Duration::from_millis(20));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // no emulation: the baseline RTT through the bridge
    let g = start(&[]);
    let base = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 5, Duration::from_secs(1)).unwrap();
    stop(g);
    let base_min = base
        .iter()
        .flatten()
        .min()
        .copied()
        .expect("baseline replies");

    let g = start(&["--delay", "30ms"]);
    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 5, Duration::from_secs(1)).unwrap();
    std::thread::sleep(Duration::from_millis(400)); // a stats publication
    let (code, json, err) = weir(&["stats", "--socket", sock.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    stop(g);
    // Every echo is delayed at least 30 ms; the median is within 2 ms of it. One late echo
    // (a descheduled thread on a 2-core host with steal) is tolerated up to 10 ms.
    let mut sorted: Vec<Duration> = rtts
        .iter()
        .map(|r| r.expect("every echo answered"))
        .collect();
    sorted.sort();
    for &r in &sorted {
        assert!(
            r >= Duration::from_millis(30) && r < Duration::from_millis(40),
            "rtt {r:?} (baseline {base_min:?}, all {sorted:?})"
        );
    }
    let median = sorted[sorted.len() / 2];
    assert!(
        median < Duration::from_millis(30) + base_min * 4 + Duration::from_millis(2),
        "median rtt {median:?} (baseline {base_min:?}, all {sorted:?})"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let emu = &v["outbound"]["pipeline"]["emulators"][0];
    assert_eq!(emu["config"], "delay 30ms", "{json}");
    assert!(
        emu["queue"]["dequeued"]["packets"].as_u64().unwrap() >= 5,
        "{json}"
    );
    assert!(
        v["inbound"]["pipeline"].is_null(),
        "inbound untouched: {json}"
    );

    // a policy's per-rule profile: every 3rd ICMP packet lost (other traffic, such as
    // ARP, untouched): of 9 echo requests, the 3rd, 6th and 9th
    let policy = dir.join("lossy.toml");
    std::fs::write(
        &policy,
        "[link]\nrate = \"1Gbit\"\ndirection = \"none\"\ndefault = \"all\"\n\
         [[class]]\nname = \"all\"\nrate = \"1Gbit\"\n\
         [[emulate]]\nname = \"lossy\"\nloss = \"every 3\"\n\
         [[rule]]\nproto = \"icmp\"\nemulate = \"lossy\"\n",
    )
    .unwrap();
    let g = start(&["--policy", policy.to_str().unwrap()]);
    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 9, Duration::from_millis(300)).unwrap();
    let out = stop(g);
    let lost: Vec<usize> = (0..9).filter(|&i| rtts[i].is_none()).collect();
    assert_eq!(lost, [2, 5, 8], "{rtts:?}\n{out}");
}
