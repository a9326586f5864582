//! `weir run --http`: the live page, `/api/snapshot` and `/metrics` with real traffic and
//! real clients — iperf3 through weir between two namespaces, curl for the metrics,
//! headless Chromium for the page (a screenshot goes to
//! `target/tmp/live-web/live-view.png`).
//!
//! Root, iperf3, curl and Chromium needed (`scripts/test` installs them as root); without
//! them the tests print `SKIP: …` and pass, except under CI (`CI` set), where a missing
//! program is a failure.

use crate::common::{have, in_ns, iperf3_server, start_weir, stats, KillOnDrop};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const PORT: &str = "9000";

/// A fresh topology labelled `label` with `weir run` of the Basic Test policy between its
/// hosts, `web` options added: (topology, statistics socket, weir).
fn web_weir(label: &str, web: &[&str]) -> (BridgeTopo, std::path::PathBuf, KillOnDrop) {
    let t = BridgeTopo::new(label).unwrap();
    let sock = std::env::temp_dir().join(format!("weir-{label}-{}.sock", std::process::id()));
    let mut args = vec!["run", "--policy", "examples/basic-test.toml"];
    args.extend_from_slice(web);
    let w = start_weir(&t, &args, &sock);
    (t, sock, w)
}

/// iperf3 (cubic) from snd to rcv for `secs`, in the background.
fn traffic(t: &BridgeTopo, secs: u32) -> (KillOnDrop, KillOnDrop) {
    let server = iperf3_server(t);
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let secs = secs.to_string();
    let client = KillOnDrop(Some(
        in_ns(
            &t.snd,
            &[
                "iperf3", "-c", &rcv, "-p", "5201", "-C", "cubic", "-t", &secs,
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    ));
    (server, client)
}

/// `curl` in the DUT's namespace: (HTTP status, body).
fn curl(t: &BridgeTopo, url: &str, headers: &[&str]) -> (u16, String) {
    let mut argv = vec!["curl", "-s", "-m", "5", "-w", "\n%{http_code}"];
    for h in headers {
        argv.extend_from_slice(&["-H", h]);
    }
    argv.push(url);
    let out = in_ns(&t.dut, &argv).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// `weir_class_sent_bytes_total` per (direction, class) in a metrics text.
fn sent_bytes(metrics: &str) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("weir_class_sent_bytes_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap()
        };
        m.insert(
            (label("direction"), label("class")),
            value.trim().parse().unwrap(),
        );
    }
    m
}

/// The same counters from `weir stats --json`.
fn stats_sent_bytes(sock: &Path) -> BTreeMap<(String, String), u64> {
    let v = stats(sock);
    let mut m = BTreeMap::new();
    for dir in ["outbound", "inbound"] {
        for c in v[dir]["pipeline"]["classes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            m.insert(
                (dir.to_string(), c["name"].as_str().unwrap().to_string()),
                c["sent"]["bytes"].as_u64().unwrap(),
            );
        }
    }
    m
}

/// The page in headless Chromium after its script has polled a few times: (the DOM,
/// what Chromium logged). A screenshot goes to `shot`.
fn chromium_page(
    t: &BridgeTopo,
    browser: &str,
    url: &str,
    shot: &std::path::Path,
) -> (String, String) {
    let shot_arg = format!("--screenshot={}", shot.display());
    let (dom, log) = crate::common::chromium_run(&t.dut, browser, &["--dump-dom", url]);
    let (_, s) = crate::common::chromium_run(&t.dut, browser, &[&shot_arg, url]);
    assert!(shot.exists(), "no screenshot: {s}");
    (dom, log)
}

/// `/metrics` carries the per-class byte counters `weir stats --json` shows (read
/// between two `weir stats` calls: not below the first, not above the second), the page
/// renders every class row with its rate, and Chromium logs no console error.
#[test]
fn the_live_view_and_metrics_match_weir_stats() {
    let _group = crate::common::group(module_path!());
    let test = "the_live_view_and_metrics_match_weir_stats";
    if skip_unless_root(test) || !have(test, "iperf3") || !have(test, "curl") {
        return;
    }
    let browser = crate::common::chromium(test, " (the page part)");
    let http = format!("127.0.0.1:{PORT}");
    let (t, sock, w) = web_weir("web", &["--http", &http]);
    let _load = traffic(&t, 25);
    std::thread::sleep(Duration::from_secs(3));

    let before = stats_sent_bytes(&sock);
    let (code, metrics) = curl(&t, &format!("http://{http}/metrics"), &[]);
    let after = stats_sent_bytes(&sock);
    assert_eq!(code, 200, "{metrics}");
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let m = sent_bytes(&metrics);
    assert_eq!(
        m.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "classes in /metrics and weir stats"
    );
    for (k, v) in &m {
        assert!(
            before[k] <= *v && *v <= after[k],
            "{k:?}: /metrics {v}, weir stats {} then {}",
            before[k],
            after[k]
        );
    }
    let busy = ("outbound".to_string(), "c1100".to_string());
    assert!(m[&busy] > 100_000, "the iperf3 class sent {}", m[&busy]);
    for name in [
        "weir_class_rate_bits_per_second",
        "weir_class_queue_packets",
        "weir_rule_hits_packets_total",
        "weir_rx_bytes_total",
        "weir_policy_generation",
    ] {
        assert!(metrics.contains(name), "{name} missing: {metrics}");
    }
    let (code, snap) = curl(&t, &format!("http://{http}/api/snapshot"), &[]);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&snap).unwrap();
    assert!(v["outbound"]["pipeline"]["classes"].is_array(), "{v}");

    // top talkers: after one sweep of the connection table (8 publishes at the default
    // 65,536 slots) that saw iperf3's connections, its data connection leads. A sweep
    // that ended before they began lists only what came earlier (CI once saw a lone
    // ICMPv6 neighbour solicitation from duplicate address detection): wait for TCP.
    let deadline = std::time::Instant::now() + Duration::from_secs(12);
    let talkers = loop {
        let (_, snap) = curl(&t, &format!("http://{http}/api/snapshot"), &[]);
        let v: serde_json::Value = serde_json::from_str(&snap).unwrap();
        let tt = v["top_talkers"].as_array().cloned().unwrap_or_default();
        if tt.iter().any(|c| c["proto"] == 6) || std::time::Instant::now() > deadline {
            break tt;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        talkers.iter().any(|c| c["proto"] == 6),
        "no TCP connection among the top talkers after 12 s: {talkers:?}"
    );
    let first = &talkers[0];
    assert_eq!(
        first["reply"],
        format!("{}:5201", BridgeTopo::RCV_ADDR),
        "{talkers:?}"
    );
    assert!(first["bytes_orig"].as_u64().unwrap() > 100_000, "{first}");

    if let Some(browser) = browser {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-web");
        std::fs::create_dir_all(&dir).unwrap();
        let shot = dir.join("live-view.png");
        let _ = std::fs::remove_file(&shot);
        let (dom, log) = chromium_page(&t, browser, &format!("http://{http}/"), &shot);
        for class in ["link", "c20", "c40", "c128", "c256", "c1100"] {
            assert!(
                dom.contains(&format!("data-class=\"{class}\"")),
                "no row for {class}: {dom}"
            );
        }
        // the busy class's row shows a rate
        let row = dom
            .split("data-class=\"c1100\"")
            .nth(1)
            .and_then(|r| r.split("data-rate=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .and_then(|r| r.parse::<u64>().ok());
        assert!(
            row.is_some_and(|r| r > 100_000),
            "c1100's rate {row:?}: {dom}"
        );
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("ERROR")))
            .collect();
        assert!(errors.is_empty(), "console errors: {errors:?}");
        eprintln!("{test}: screenshot {}", shot.display());
    }
    drop(w);
}

/// A token on a non-loopback address: a request without it gets 401, with it 200, and
/// the page's own address passes it on (`?token=`).
#[test]
fn a_token_guards_a_non_loopback_address() {
    let _group = crate::common::group(module_path!());
    let test = "a_token_guards_a_non_loopback_address";
    if skip_unless_root(test) || !have(test, "curl") {
        return;
    }
    let http = format!("0.0.0.0:{PORT}");
    let token = "not-a-secret-1234";
    let (t, _sock, w) = web_weir("webtok", &["--http", &http, "--http-token", token]);
    std::thread::sleep(Duration::from_millis(1200));
    let base = format!("http://127.0.0.1:{PORT}");
    for path in ["/", "/metrics", "/api/snapshot"] {
        let (code, body) = curl(&t, &format!("{base}{path}"), &[]);
        assert_eq!(code, 401, "{path}: {body}");
        let (code, _) = curl(
            &t,
            &format!("{base}{path}"),
            &["Authorization: Bearer wrong-token"],
        );
        assert_eq!(code, 401, "{path} with a wrong token");
        let bearer = format!("Authorization: Bearer {token}");
        let (code, body) = curl(&t, &format!("{base}{path}"), &[&bearer]);
        assert_eq!(code, 200, "{path}: {body}");
        let (code, _) = curl(&t, &format!("{base}{path}?token={token}"), &[]);
        assert_eq!(code, 200, "{path}?token=");
    }
    drop(w);
}

/// `weir demo`: namespaces, weir, TCP and UDP through it, the table every second, the
/// summary, the page on a port of its own; afterwards no namespace of it is left.
#[test]
fn weir_demo_shows_the_classes_and_cleans_up() {
    let _group = crate::common::group(module_path!());
    let test = "weir_demo_shows_the_classes_and_cleans_up";
    if skip_unless_root(test) {
        return;
    }
    let out = Command::new(crate::common::WEIR)
        .args(["demo", "--duration", "6s", "--http", "127.0.0.1:0"])
        .current_dir(crate::common::ROOT)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("live view http://127.0.0.1:"), "{stderr}");
    for class in ["c20", "c40", "c128", "c256", "c1100"] {
        assert!(stdout.contains(class), "{class} missing: {stdout}");
    }
    // the summary: every class sent, none far above its rate
    let summary = stdout
        .split("what each class sent")
        .nth(1)
        .unwrap_or_else(|| panic!("{stdout}"));
    let mut rows = 0;
    for line in summary.lines().filter(|l| l.contains("kbit/s of")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (sent, rate): (f64, f64) = (f[1].parse().unwrap(), f[4].parse().unwrap());
        assert!(sent > 0.3 * rate && sent < 1.3 * rate, "{line}");
        rows += 1;
    }
    assert_eq!(rows, 5, "{summary}");
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(!ns.contains("demo"), "namespaces left behind: {ns}");
}
