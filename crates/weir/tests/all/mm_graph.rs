//! `weir mm-graph` as a user runs it, on a small mm-link log written here.

use crate::common::{weir, TempDir};

/// A directory of the test's own (tests run in parallel), removed at its end.
fn dir(test: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("weir-mm-graph-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// 100 ms (base 1000): an opportunity of 1500 B every ms at 1..=100 (12 Mbit/s); arrivals
/// of 1500 B at 0 and 10, departing at 5 (delay 5) and 30 (delay 20); one packet dropped.
fn small_log() -> String {
    let mut events = vec![
        (0, "1000 + 1500".to_string()),
        (5, "1005 - 1500 5".into()),
        (10, "1010 + 1500".into()),
        (10, "1010 d 1 1500".into()),
        (30, "1030 - 1500 20".into()),
    ];
    for ms in 1..=100 {
        events.push((ms, format!("{} # 1500", 1000 + ms)));
    }
    events.sort_by_key(|e| e.0);
    let mut text = "# mahimahi mm-link (uplink) [12mbps] > up.log\n\
                    # queue: droptail [packets=1]\n\
                    # init timestamp: 990\n\
                    # base timestamp: 1000\n"
        .to_string();
    for (_, l) in events {
        text.push_str(&l);
        text.push('\n');
    }
    text
}

#[test]
fn summary_graphs_and_json() {
    let _group = crate::common::group(module_path!());
    let tmp = dir("summary");
    let d = &tmp.0;
    let log = d.join("up.log");
    std::fs::write(&log, small_log()).unwrap();
    let (t, dl) = (d.join("t.svg"), d.join("d.svg"));
    let (code, out, err) = weir(&[
        "mm-graph",
        log.to_str().unwrap(),
        "--ms-per-bin",
        "10",
        "--svg",
        t.to_str().unwrap(),
        "--delay-svg",
        dl.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // capacity 100 · 12,000 bit / 0.1 s; ingress and throughput 2 · 12,000 bit / 0.1 s;
    // delays 5, 20: rank ⌊0.95 · 2⌋ = 1 → 20; signal delay per ms over 0..=10: 5 and
    // 29, 28, …, 20: rank ⌊0.95 · 11⌋ = 10 → 29
    let want = "Average capacity: 12.00 Mbits/s\n\
                Average ingress: 0.24 Mbits/s\n\
                Average throughput: 0.24 Mbits/s (2.0% utilization)\n\
                95th percentile per-packet queueing delay: 20 ms\n\
                95th percentile signal delay: 29 ms\n\
                Dropped: 1 packets, 1500 bytes (50.0% of arrivals)\n";
    assert!(out.contains(want), "{out}");
    assert!(
        out.contains("up.log: 105 events over 0.100 s; queue droptail [packets=1]"),
        "{out}"
    );
    for f in [&t, &dl] {
        let svg = std::fs::read_to_string(f).unwrap();
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
    }
    assert!(std::fs::read_to_string(&t)
        .unwrap()
        .contains("Capacity (mean 12.00 Mbits/s)"));

    let (code, out, err) = weir(&["mm-graph", log.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["base_timestamp"], 1000);
    assert_eq!(v["init_timestamp"], 990);
    assert_eq!(v["summary"]["signal_delay_p95_ms"], 29);
    assert_eq!(v["summary"]["dropped_packets"], 1);
    assert_eq!(v["ms_per_bin"], 500);
    // one 500 ms bin: 100 opportunities in 0.5 s
    assert_eq!(v["bins"].as_array().unwrap().len(), 1);
    assert_eq!(v["bins"][0]["capacity_mbps"], 2.4);
}

#[test]
fn errors_are_messages_not_panics() {
    let _group = crate::common::group(module_path!());
    let tmp = dir("errors");
    let d = &tmp.0;
    let (code, _, err) = weir(&["mm-graph", "/nonexistent/up.log"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/nonexistent/up.log: cannot read: No such file"),
        "{err}"
    );

    let bad = d.join("bad.log");
    std::fs::write(&bad, "# base timestamp: 5\n6 + 1500\n7 ? 1500\n").unwrap();
    let (code, out, err) = weir(&["mm-graph", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains(&format!("{}:3: unknown event `?`", bad.display())),
        "{err}"
    );
    assert!(out.is_empty() && !err.contains("panicked"), "{out}{err}");

    std::fs::write(&bad, b"\xff\xfe\x00garbage\n").unwrap();
    let (code, _, err) = weir(&["mm-graph", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(":1: `\u{fffd}\u{fffd}\\0garbage`: expected `TIME EVENT BYTES [DELAY]`"),
        "{err}"
    );

    // a graph nobody could draw: too many bins
    std::fs::write(&bad, "# base timestamp: 0\n0 + 1\n9000000 + 1\n").unwrap();
    let svg = d.join("t.svg");
    let (code, _, err) = weir(&[
        "mm-graph",
        bad.to_str().unwrap(),
        "--ms-per-bin",
        "1",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("use bins of at least 9 ms"), "{err}");
    assert!(!svg.exists());

    let (code, _, _) = weir(&["mm-graph", bad.to_str().unwrap(), "--ms-per-bin", "0"]);
    assert_eq!(code, 2, "a usage error");
}
