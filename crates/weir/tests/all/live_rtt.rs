//! RTT and connection health, visible (issue 26): `weir run` between two namespaces with a
//! policy whose `[[emulate]]` profile delays the LAN → WAN direction by 40 ms, and an
//! iperf3 TCP transfer through it. weir's per-class RTT p50 (interpolated in its
//! histogram, as `weir stats` prints it) is within 2 ms of 40 ms + the base RTT (ping
//! through the same weir without the delay, measured first), in each direction; the
//! histograms' counts, in `weir stats --json` and in `/metrics`, add up to the samples
//! the connection table took (`connections.rtt_end_to_end`).
//!
//! The transfer is application-limited (50 Mbit/s of 1448-byte writes through a
//! 1 Gbit/s policy): no queue builds anywhere, so the RTT is the path's, not a queue's.
//!
//! Root and iperf3 (and curl, for `/metrics`) needed; without them the test prints
//! `SKIP: …` and passes, except under CI (`CI` set).

use crate::common::{have, in_ns, iperf3_server, start_weir, stats, KillOnDrop};
use std::process::Stdio;
use std::time::Duration;
use weir_core::conn::health::RttHistogram;
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const DELAY_MS: f64 = 40.0;

/// The policy: one class each way at 1 Gbit/s; with `delay`, everything LAN → WAN is
/// delayed 40 ms.
fn policy(delay: bool) -> String {
    let mut p = String::from(
        "[link]\nrate = \"1Gbit\"\ndirection = \"both\"\ndefault = \"bulk\"\n\
         [[class]]\nname = \"bulk\"\nrate = \"1Gbit\"\n",
    );
    if delay {
        p.push_str(
            "[[emulate]]\nname = \"wan\"\ndelay = \"40ms\"\ndirection = \"outbound\"\n\
             [[rule]]\nproto = \"tcp\"\nemulate = \"wan\"\n\
             [[rule]]\nproto = \"icmp\"\nemulate = \"wan\"\n",
        );
    }
    p
}

/// The median of the echo replies of 10 pings, ms; fails the test if fewer than 8 came.
fn ping_median_ms(t: &BridgeTopo) -> f64 {
    let r = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 10, Duration::from_millis(200)).unwrap();
    let mut ms: Vec<f64> = r.iter().flatten().map(|d| d.as_secs_f64() * 1e3).collect();
    assert!(ms.len() >= 8, "pings answered: {r:?}");
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

/// `weir_class_tcp_rtt_seconds_count` per direction of class `bulk` in a metrics text.
fn metrics_counts(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("weir_class_tcp_rtt_seconds_count{"))
        .map(|rest| {
            let (labels, v) = rest.split_once("} ").unwrap();
            let dir = labels
                .split(',')
                .find_map(|kv| kv.strip_prefix("direction=\""))
                .unwrap()
                .trim_end_matches('"')
                .to_string();
            (dir, v.trim().parse().unwrap())
        })
        .collect()
}

#[test]
fn class_rtt_matches_the_emulated_delay_and_counts_every_sample() {
    let _group = crate::common::group(module_path!());
    let test = "class_rtt_matches_the_emulated_delay_and_counts_every_sample";
    if skip_unless_root(test) || !have(test, "iperf3") || !have(test, "curl") {
        return;
    }
    let t = BridgeTopo::new("rtt").unwrap();
    let dir = crate::common::TempDir(
        std::env::temp_dir().join(format!("weir-live-rtt-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();

    // the base RTT: ping through weir without the delay
    let plain = dir.0.join("plain.toml");
    std::fs::write(&plain, policy(false)).unwrap();
    let sock0 = dir.0.join("plain.sock");
    let w = start_weir(&t, &["run", "--policy", plain.to_str().unwrap()], &sock0);
    let base = ping_median_ms(&t);
    drop(w);

    let delayed = dir.0.join("delayed.toml");
    std::fs::write(&delayed, policy(true)).unwrap();
    let sock = dir.0.join("delayed.sock");
    let http = "127.0.0.1:9100";
    let w = start_weir(
        &t,
        &["run", "--policy", delayed.to_str().unwrap(), "--http", http],
        &sock,
    );
    let delayed_ping = ping_median_ms(&t);
    let _server = iperf3_server(&t);
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let client = KillOnDrop(Some(
        in_ns(
            &t.snd,
            &[
                "iperf3", "-c", &rcv, "-p", "5201", "-C", "cubic", "-t", "6", "-b", "50M", "-l",
                "1448",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    ));
    let out = client.wait_output(Duration::from_secs(30));
    assert!(
        out.status.success(),
        "iperf3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // the last segments seen and a publication made
    std::thread::sleep(Duration::from_millis(1500));

    let v = stats(&sock);
    let metrics = {
        let o = in_ns(
            &t.dut,
            &["curl", "-s", "-m", "5", &format!("http://{http}/metrics")],
        )
        .output()
        .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let (code, table, err) = crate::common::weir(&["stats", "--socket", sock.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // the live page: each class row has its RTT p50 / p95 cell and RTT sparkline
    let page = crate::common::chromium(test, " (the page part)").map(|b| {
        crate::common::chromium_run(&t.dut, b, &["--dump-dom", &format!("http://{http}/")])
    });
    drop(w);

    let taken = v["connections"]["rtt_end_to_end"].as_u64().unwrap();
    let mut recorded = 0;
    let mut report = Vec::new();
    for d in ["outbound", "inbound"] {
        let p = &v[d]["pipeline"];
        let c = p["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "bulk")
            .unwrap_or_else(|| panic!("no class bulk {d}: {v}"));
        let h: RttHistogram = serde_json::from_value(c["tcp"]["rtt"].clone()).unwrap();
        let unclassified = p["tcp_unclassified"]["rtt"]["count"].as_u64().unwrap();
        recorded += h.count + unclassified;
        assert_eq!(h.counts.iter().sum::<u64>(), h.count);
        assert!(h.count >= 50, "{d}: {} samples\n{table}", h.count);
        let p50 = h.quantile_us(0.5).unwrap() / 1e3;
        let p95 = h.quantile_us(0.95).unwrap() / 1e3;
        let retransmits = c["tcp"]["retransmits"].as_u64().unwrap();
        report.push(format!(
            "{d}: {} samples, p50 {p50:.2} ms, p95 {p95:.2} ms, mean {:.2} ms, {retransmits} retransmits",
            h.count,
            h.mean_us().unwrap() / 1e3
        ));
        assert!(
            (p50 - (DELAY_MS + base)).abs() <= 2.0,
            "{d}: p50 {p50:.2} ms, want 40 ms + base {base:.3} ms ± 2 ms\n{}\n{table}",
            report.join("\n")
        );
        // weir stats prints the same p50
        assert!(
            table.contains(&format!("tcp: rtt p50 {p50:.1} ms")),
            "{d}: p50 {p50:.1} not in\n{table}"
        );
    }
    eprintln!("{table}");
    eprintln!(
        "base rtt {base:.3} ms, with the delay {delayed_ping:.3} ms; {}; {taken} end-to-end samples",
        report.join("; ")
    );
    assert_eq!(recorded, taken, "histograms vs samples taken: {v}");

    // /metrics: each direction's _count is the JSON's, and they add up the same way
    let m = metrics_counts(&metrics);
    assert_eq!(m.len(), 2, "{metrics}");
    let from_metrics: u64 = m.iter().map(|(_, n)| n).sum();
    let unclassified: u64 = ["outbound", "inbound"]
        .iter()
        .map(|d| {
            v[d]["pipeline"]["tcp_unclassified"]["rtt"]["count"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(from_metrics + unclassified, taken, "{metrics}");
    assert!(
        metrics.contains("weir_class_tcp_retransmits_total{"),
        "{metrics}"
    );
    if let Some((dom, log)) = page {
        assert!(!log.contains("Uncaught"), "{log}");
        assert!(dom.contains("tcp rtt p50 / p95"), "{dom}");
        let cells: Vec<&str> = dom
            .split(r#"<td class="rtt">"#)
            .skip(1)
            .filter_map(|c| c.split("</td>").next())
            .collect();
        // outbound and inbound rows of bulk in the tcp tables, each "41.7 ms / 44.9 ms (all)"-like
        assert!(
            cells.iter().filter(|c| c.contains(" ms / ")).count() >= 2,
            "{cells:?}\n{dom}"
        );
    }
}
