//! Workers, live (issue 27): `weir run --workers 2` with a 200-circuit subscriber table
//! (LibreQoS `ShapedDevices.csv`) between two namespaces. The circuits are 200 source
//! addresses of the sender (aliases); their rates (1 to 3 Mbit/s, min = max) add up to
//! the link's 400 Mbit/s exactly, so each circuit gets its rate only if the
//! coordinator gives each worker's copy of the link at least the sum of its own
//! circuits' rates, and the link is full only if the copies' parts add up to it.
//! One TCP connection per circuit (cubic, default host settings, weir's own sender and
//! sink), uploading and then downloading: each circuit's goodput within ± 3 % of its
//! rate's payload share (1448 of each 1514-byte frame), the link's within 1 %, measured
//! by the receiving sink from the 4th second to half a second before the end (at 0.5
//! Mbit/s a circuit delivers ~40 segments a second, in bursts after each recovered loss,
//! and spreads ± 3.4 % with one worker or two: hence rates of 1 Mbit/s and more). Both
//! workers must have carried circuits, and the merged statistics list them all. Last, the
//! WAN interface is deleted under the workers: weir stops them all and exits with an
//! error that names the worker and the cause.
//!
//! Root needed; without it the test prints `SKIP: …` and passes, except under CI.

use crate::common::{start_weir, stats, weir};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use weir_lab::agents::{SenderOpts, TcpSender, TcpSink};
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const CIRCUITS: usize = 200;
const LINK_MBIT: f64 = 400.0;
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;
const SECONDS: u64 = 12;
/// Goodput is measured from here (slow start and the coordinator's first periods left out).
const FROM: Duration = Duration::from_secs(4);

/// Circuit k's rate, Mbit/s: 1, 2 or 3 (mean 2: 200 make 400).
fn rate(k: usize) -> f64 {
    (1 + k % 3) as f64
}

fn rates() -> Vec<f64> {
    // 1/2/3 in turn averages 2 over every three; the last fills up to the link
    let mut r: Vec<f64> = (0..CIRCUITS).map(rate).collect();
    let sum: f64 = r.iter().sum();
    r[CIRCUITS - 1] += LINK_MBIT - sum;
    r
}

fn table(aliases: &[IpAddr], rates: &[f64]) -> String {
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    for (i, (a, r)) in aliases.iter().zip(rates).enumerate() {
        csv += &format!("c{i},Subscriber {i},d{i},cpe,,,{a},,{r},{r},{r},{r},\n");
    }
    csv
}

const POLICY: &str = "[link]\nrate = \"400Mbit\"\ndirection = \"both\"\ndefault = \"other\"\n\
    [[class]]\nname = \"other\"\nrate = \"1Mbit\"\n\
    [subscribers]\nshaped_devices = \"ShapedDevices.csv\"\n";

/// Each circuit's goodput (Mbit/s) against its rate, and the sum against the link.
fn check(what: &str, got: &[f64], rates: &[f64]) {
    let mut worst = (0.0f64, 0);
    for (i, (&g, &r)) in got.iter().zip(rates).enumerate() {
        let err = (g - r * PAYLOAD_SHARE) / (r * PAYLOAD_SHARE);
        if err.abs() > worst.0.abs() {
            worst = (err, i);
        }
    }
    for class in [1.0, 2.0, 3.0] {
        let e: Vec<f64> = got
            .iter()
            .zip(rates)
            .filter(|&(_, &r)| r == class)
            .map(|(g, r)| (g / (r * PAYLOAD_SHARE) - 1.0) * 100.0)
            .collect();
        let (lo, hi) = e
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        eprintln!(
            "{what}: the {} circuits of {class} Mbit/s: mean {:+.2} %, from {lo:+.2} % to {hi:+.2} %",
            e.len(),
            e.iter().sum::<f64>() / e.len() as f64
        );
    }
    let total: f64 = got.iter().sum();
    let link_err = (total - LINK_MBIT * PAYLOAD_SHARE) / (LINK_MBIT * PAYLOAD_SHARE);
    eprintln!(
        "{what}: {} circuits, {total:.2} Mbit/s of goodput in all ({:+.2} % of the link's payload share); worst circuit c{} {:+.2} % ({:.3} Mbit/s for a rate of {})",
        got.len(),
        link_err * 100.0,
        worst.1,
        worst.0 * 100.0,
        got[worst.1],
        rates[worst.1]
    );
    assert!(
        link_err.abs() <= 0.01,
        "{what}: the link carried {total:.2} Mbit/s of goodput"
    );
    for (i, (&g, &r)) in got.iter().zip(rates).enumerate() {
        let want = r * PAYLOAD_SHARE;
        assert!(
            ((g - want) / want).abs() <= 0.03,
            "{what}: circuit c{i} got {g:.3} Mbit/s, want {want:.3} ± 3 % (rate {r} Mbit/s)"
        );
    }
}

/// One TCP connection per circuit for [`SECONDS`]: uploads from each alias to one sink
/// in the receiver's namespace, or downloads from the receiver to one sink in the
/// sender's (reached at each alias). Each circuit's goodput, Mbit/s, from [`FROM`] on.
fn transfer(t: &BridgeTopo, aliases: &[IpAddr], download: bool) -> Vec<f64> {
    let interval = Duration::from_millis(100);
    let (sink_ns, sender_ns) = if download {
        (&t.snd, &t.rcv)
    } else {
        (&t.rcv, &t.snd)
    };
    let port = if download { 6001 } else { 6000 };
    let bind = SocketAddr::new("0.0.0.0".parse().unwrap(), port);
    let sink = TcpSink::start(sink_ns, bind, interval).unwrap();
    let senders: Vec<TcpSender> = aliases
        .iter()
        .map(|&a| {
            let dst = match download {
                true => SocketAddr::new(a, port),
                false => SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), port),
            };
            let mut o = SenderOpts::new(dst, Duration::from_secs(SECONDS), "cubic");
            if !download {
                o.src = Some(a);
            }
            o.connect_timeout = Duration::from_secs(10);
            TcpSender::start(sender_ns, o).unwrap()
        })
        .collect();
    for s in senders {
        s.join();
    }
    let report = sink.stop();
    let to = Duration::from_secs(SECONDS) - Duration::from_millis(500);
    aliases
        .iter()
        .map(|&a| {
            report
                .conns
                .iter()
                .filter(|c| {
                    if download {
                        c.local.ip() == a
                    } else {
                        c.peer.ip() == a
                    }
                })
                .map(|c| c.goodput_bps(interval, FROM, to))
                .sum::<f64>()
                / 1e6
        })
        .collect()
}

/// A `/proc/.../stat` file's command name and user and system CPU time, in clock ticks
/// (1/100 s): the 12th and 13th fields after the name's closing parenthesis.
fn cpu_ticks(stat: &std::path::Path) -> (String, u64, u64) {
    let stat = std::fs::read_to_string(stat).unwrap_or_default();
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return ("?".into(), 0, 0);
    };
    let f: Vec<&str> = stat[close + 2..].split(' ').collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse().ok()).unwrap_or(0);
    (stat[open + 1..close].to_string(), ticks(11), ticks(12))
}

#[test]
fn two_workers_give_200_circuits_their_rates_both_ways() {
    let _group = crate::common::group(module_path!());
    let test = "two_workers_give_200_circuits_their_rates_both_ways";
    if skip_unless_root(test) {
        return;
    }
    let t = BridgeTopo::new("wrk").unwrap();
    let aliases = t.add_sender_aliases(CIRCUITS).unwrap();
    let dir = crate::common::TempDir(
        std::env::temp_dir().join(format!("weir-live-workers-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let policy = dir.0.join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let rates = rates();
    std::fs::write(dir.0.join("ShapedDevices.csv"), table(&aliases, &rates)).unwrap();
    let sock = dir.0.join("weir.sock");
    // WEIR_TEST_WORKERS=1 runs the same test with one worker, to compare
    let workers = std::env::var("WEIR_TEST_WORKERS").unwrap_or_else(|_| "2".into());
    let running = start_weir(
        &t,
        &[
            "run",
            "--policy",
            policy.to_str().unwrap(),
            "--workers",
            &workers,
        ],
        &sock,
    );

    let pid = running.0.as_ref().unwrap().id();
    let process = std::path::PathBuf::from(format!("/proc/{pid}/stat"));
    let total = |(_, user, system): (String, u64, u64)| user + system;
    let cpu0 = total(cpu_ticks(&process));
    let up = transfer(&t, &aliases, false);
    eprintln!("upload: {}", crate::common::fail_open_note(&stats(&sock)));
    check("upload", &up, &rates);
    let down = transfer(&t, &aliases, true);
    let v = stats(&sock);
    eprintln!("download: {}", crate::common::fail_open_note(&v));
    check("download", &down, &rates);

    let cpu = (total(cpu_ticks(&process)) - cpu0) as f64 / 100.0;
    let frames: u64 = ["outbound", "inbound"]
        .iter()
        .map(|d| v[d]["lane"]["tx"]["packets"].as_u64().unwrap_or(0))
        .sum();
    eprintln!(
        "weir with {workers} workers: {cpu:.2} s of CPU for {frames} frames forwarded: {:.2} µs a frame",
        cpu * 1e6 / frames as f64
    );
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|task| {
            let (name, user, system) = cpu_ticks(&task.path().join("stat"));
            format!(
                "{name} {:.2} s user + {:.2} s system",
                user as f64 / 100.0,
                system as f64 / 100.0
            )
        })
        .collect();
    eprintln!("  threads: {}", threads.join("; "));
    if workers != "2" {
        return;
    }
    let workers = v["workers"].as_array().expect("a workers list");
    assert_eq!(workers.len(), 2, "{}", v["workers"]);
    for w in workers {
        let rx = w["outbound_rx"]["packets"].as_u64().unwrap_or(0);
        assert!(
            rx > 10_000,
            "every worker carried circuits: {}",
            v["workers"]
        );
    }
    let classes = v["outbound"]["pipeline"]["classes"].as_array().unwrap();
    // the link, 'other' and every circuit, once
    assert_eq!(classes.len(), CIRCUITS + 2, "{}", classes.len());
    assert_eq!(v["shared_classes"], serde_json::json!(["link"]));
    assert_eq!(
        v["outbound"]["pipeline"]["classes"][0]["rate_bps"],
        400_000_000
    );
    // the merged document reads as one weir's: `weir stats` shows it as a table
    let (code, out, err) = weir(&["stats", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("c199") && out.contains("link"), "{out}");

    // a worker that dies stops them all, and weir says which and why: the WAN interface
    // goes away under them
    t.dut.ip(&["link", "del", &t.dut_wan]).unwrap();
    let out = running.wait_output(Duration::from_secs(10));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "weir exited 0 with a dead worker: {log}"
    );
    assert!(
        log.contains("failed: interface") && log.contains("every worker was stopped"),
        "{log}"
    );
}
