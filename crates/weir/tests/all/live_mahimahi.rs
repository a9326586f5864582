//! Mahimahi's `mm-link` through `weir emu`: an uplink and a downlink trace
//! (`--up/--down`), each direction's queue (`--uplink-queue codel`, `--downlink-queue
//! drophead`), `--once` and the per-packet logs (`--uplink-log/--downlink-log`), read back
//! by `weir mm-graph`. Three namespaces `snd ─ [weir emu] ─ rcv`; UDP streams above the
//! traces' peaks in both directions at once, so every opportunity finds a packet.
//!
//! Root needed; without it the test prints `SKIP: …` and passes.

use crate::common::{spawn_weir, weir, TempDir};
use std::net::{Ipv4Addr, UdpSocket};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weir_lab::topo::{skip_unless_root, BridgeTopo, Netns};

/// A cellular-like trace: each rate (Mbit/s) for `step_ms`, `rate / 12` opportunities of
/// 1500 bytes per ms spread evenly (as the postgate lab's line).
fn trace(rates: &[u64], step_ms: u64) -> (String, usize) {
    let mut out = String::new();
    let mut n = 0;
    let mut t0 = 0;
    for &r in rates {
        let mut done = 0;
        for m in 1..=step_ms {
            let due = r * 1_000_000 * m / 12_000_000;
            for _ in done..due {
                out.push_str(&format!("{}\n", t0 + m));
                n += 1;
            }
            done = due;
        }
        t0 += step_ms;
    }
    (out, n)
}

/// UDP datagrams of 1472 bytes (1514-byte frames: one trace opportunity each) from `from`
/// to `to:port` at `bps` for `secs`, sent in bursts every 2 ms, while a socket in `sink`
/// drains them. No control channel: two such streams saturate both directions at once (a
/// tool that sets up over TCP would lose its setup in the other stream's full queue).
fn blast((from, sink): (&Netns, &Netns), to: Ipv4Addr, port: u16, (bps, secs): (u64, u64)) -> u64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let drain = sc.spawn(|| {
            sink.run(|| {
                let s = UdpSocket::bind(("0.0.0.0", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let mut buf = [0u8; 2048];
                let mut got = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if s.recv(&mut buf).is_ok() {
                        got += 1;
                    }
                }
                got
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        from.run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            let payload = [0u8; 1472];
            let per_tick = bps as f64 / 8.0 / 1500.0 * 0.002;
            let start = Instant::now();
            let mut sent = 0f64;
            while start.elapsed() < Duration::from_secs(secs) {
                let due = (start.elapsed().as_secs_f64() / 0.002).floor() * per_tick;
                while sent < due {
                    let _ = s.send_to(&payload, (to, port));
                    sent += 1.0;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        stop.store(true, Ordering::Relaxed);
        drain.join().unwrap()
    })
}

/// Bytes of capacity, bytes departed and packets dropped in an `mm-link` log from its
/// first arrival of 1400 bytes or more to its last line.
fn saturated(log: &str) -> (u64, u64, u64) {
    let mut on = false;
    let (mut cap, mut dep, mut drops) = (0, 0, 0);
    for l in log.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split(' ').collect();
        let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        match f.get(1) {
            Some(&"+") if n(2) >= 1400 => on = true,
            Some(&"#") if on => cap += n(2),
            Some(&"-") if on => dep += n(2),
            Some(&"d") if on => drops += n(2),
            _ => {}
        }
    }
    (cap, dep, drops)
}

#[test]
fn mm_link_traces_queues_once_and_logs_through_weir_emu() {
    let _group = crate::common::group(module_path!());
    const TEST: &str = "mm_link_traces_queues_once_and_logs_through_weir_emu";
    if skip_unless_root(TEST) {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-live-mm-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    // 6 s each: the uplink between 2 and 12 Mbit/s, the downlink between 4 and 24,
    // changing every 250 ms (a cellular link's pace)
    let up_rates = [6, 2, 12, 8, 4, 10, 3, 12, 7, 2, 9, 5];
    let down_rates = [12, 24, 4, 16, 8, 20, 6, 24, 14, 4, 18, 10];
    let (up_text, up_n) = trace(&[&up_rates[..], &up_rates[..]].concat(), 250);
    let (down_text, down_n) = trace(&[&down_rates[..], &down_rates[..]].concat(), 250);
    let up = dir.0.join("up.trace");
    let down = dir.0.join("down.trace");
    std::fs::write(&up, &up_text).unwrap();
    std::fs::write(&down, &down_text).unwrap();
    let (up_log, down_log) = (dir.0.join("up.log"), dir.0.join("down.log"));
    let t = BridgeTopo::new("mm").unwrap();
    let sock = dir.0.join("weir.sock");
    let g = spawn_weir(
        &t,
        &[
            "emu",
            "--up",
            up.to_str().unwrap(),
            "--down",
            down.to_str().unwrap(),
            "--once",
            "--uplink-queue",
            "codel",
            "--uplink-queue-args",
            "target=5, interval=100, packets=200",
            "--downlink-queue",
            "drophead",
            "--downlink-queue-args",
            "packets=100, bytes=150000",
            "--uplink-log",
            up_log.to_str().unwrap(),
            "--downlink-log",
            down_log.to_str().unwrap(),
        ],
        &sock,
        Stdio::piped(),
    );
    crate::common::wait_for(&sock, Duration::from_secs(5), "weir did not start");
    let started = Instant::now();
    // above both traces' peaks, for longer than the traces last: weir stops by itself
    // above both traces' peaks, for longer than the traces last: weir stops by itself
    let (out, ran, up_got, down_got) = std::thread::scope(|sc| {
        let up = sc.spawn(|| {
            blast(
                (&t.snd, &t.rcv),
                BridgeTopo::RCV_ADDR,
                7001,
                (30_000_000, 8),
            )
        });
        let down = sc.spawn(|| {
            blast(
                (&t.rcv, &t.snd),
                BridgeTopo::SND_ADDR,
                7002,
                (40_000_000, 8),
            )
        });
        let out = g.wait_output(Duration::from_secs(12));
        let ran = started.elapsed();
        (out, ran, up.join().unwrap(), down.join().unwrap())
    });
    println!("datagrams received: {up_got} up, {down_got} down");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // the uplink's CoDel acted (under an unresponsive flood it cannot hold the sojourn
    // down: the drop-tail limit keeps the queue full; it drops at its growing rate)
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let codel = &report["pipelines"]["outbound"]["emulators"][0]["counters"];
    println!("uplink CoDel: {} drops", codel["aqm_drops"]["packets"]);
    assert!(
        codel["aqm_drops"]["packets"].as_u64().unwrap_or(0) > 100,
        "{codel}"
    );
    assert!(out.status.success(), "weir emu --once: {stderr}");
    assert!(
        stderr.contains("played once"),
        "weir says why it stopped: {stderr}"
    );
    // the traces last 6 s from their first frames: weir stopped about then
    assert!(
        ran > Duration::from_secs(6) && ran < Duration::from_secs(8),
        "weir emu --once ran {ran:?} for 6 s traces"
    );
    for (log, n, name, queue) in [
        (&up_log, up_n, "Uplink", "codel [packets=200]"),
        (
            &down_log,
            down_n,
            "Downlink",
            "drophead [bytes=150000, packets=100]",
        ),
    ] {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.starts_with(&format!("# mahimahi mm-link ({name}) [")),
            "{text:.300}"
        );
        assert!(text.contains(&format!("# queue: {queue}\n")), "{text:.300}");
        // every opportunity of the trace, once: the whole trace was played
        let opportunities = text.lines().filter(|l| l.contains(" # ")).count();
        assert_eq!(opportunities, n, "{name}: opportunities logged");
        if std::env::var_os("KEEP_MM_LOGS").is_some() {
            std::fs::copy(log, format!("/tmp/{name}.log")).unwrap();
        }
        // saturated from the first full-size arrival on (the trace starts at the link's
        // first frame, which may be a host's IPv6 neighbour discovery before the streams
        // runs): the link delivers the trace's capacity (± 2 %), the excess is dropped
        let (capacity, departed, drops) = saturated(&text);
        assert!(capacity > 0, "{name}: no full-size packet reached the link");
        let share = departed as f64 / capacity as f64;
        println!("{name}: saturated window: {capacity} bytes of capacity, {departed} departed ({:.2} %), {drops} dropped", share * 100.0);
        assert!((share - 1.0).abs() <= 0.02, "{name}: {share}");
        assert!(drops > 100, "{name}: the queue dropped the excess: {drops}");
        {
            // weir's reader of the format: the trace's whole capacity; over the whole log
            // the utilisation is lower where the link idled before the streams started, over the whole log
            let (code, json, err) = weir(&["mm-graph", "--json", log.to_str().unwrap()]);
            assert_eq!(code, 0, "{err}");
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let s = &v["summary"];
            println!("{name}: weir mm-graph: {s}");
            let (_, departed_log, drops_log) = saturated(&text);
            assert!(
                s["throughput_mbps"].as_f64().unwrap() <= s["capacity_mbps"].as_f64().unwrap(),
                "{name}: {s}"
            );
            assert_eq!(
                s["capacity_bytes"].as_u64(),
                Some(n as u64 * 1500),
                "{name}: {s}"
            );
            assert!(
                s["departure_bytes"].as_u64().unwrap() >= departed_log,
                "{name}: {s}"
            );
            assert_eq!(s["opportunities"].as_u64(), Some(n as u64), "{name}: {s}");
            assert!(
                s["dropped_packets"].as_u64().unwrap() >= drops_log,
                "{name}: {s}"
            );
        }
    }
}
