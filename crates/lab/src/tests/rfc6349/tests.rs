//! The RFC 6349 lab's settings, metrics and checks on hand-made figures.

use super::*;
use crate::agents::{MtuProbe, MtuReport};

#[test]
fn presets_are_valid_and_bad_settings_are_refused() {
    Rfc6349Config::paper().validate().unwrap();
    Rfc6349Config::quick().validate().unwrap();
    let bad = |f: &dyn Fn(&mut Rfc6349Config), want: &str| {
        let mut c = Rfc6349Config::quick();
        f(&mut c);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    };
    bad(&|c| c.duts.clear(), "no DUT");
    bad(&|c| c.connections = vec![0], "0 connections");
    bad(&|c| c.rates_bps = vec![50_000], "100 kbit/s to 1 Gbit/s");
    bad(&|c| c.rtts_ms = vec![5000], "0 to 2000 ms");
    bad(&|c| c.transfer_s = 0.5, "a transfer of 0.5 s");
    bad(&|c| c.bb_offered_pct = 100, "above it");
    bad(&|c| c.max_mtu = 40, "largest MTU probed 40");
    bad(&|c| c.line_pct = 100, "must be faster");
    bad(&|c| c.cc = "vegas".into(), "--cc vegas");
    bad(&|c| c.duts = vec!["kernel:cake".into()], "kernel:cake");
    bad(
        &|c| c.duts = vec!["weir:fq_cobalt".into(), "weir:fq_cobalt".into()],
        "listed twice",
    );
}

#[test]
fn paths_run_per_dut_rate_rtt_and_run() {
    let c = Rfc6349Config {
        runs: 2,
        ..Rfc6349Config::paper()
    };
    let p = c.paths();
    // 2 DUTs x 2 rates x 1 RTT x 2 runs
    assert_eq!(p.len(), 8);
    assert_eq!(p[0].0, "weir:fq_cobalt");
    assert_eq!((p[0].1.up_bps, p[0].2), (10_000_000, 0));
    assert_eq!((p[1].1.up_bps, p[1].2), (10_000_000, 1));
    assert_eq!(p[2].1.up_bps, 100_000_000);
    assert_eq!(p[4].0, "kernel:htb");
    assert_eq!(p[0].1.line_bps(true), 15_000_000);
    // the quick run's outline: 4 + 1 + 1 + 2 + 1 + (10 x 1.2 + 2) = 23 s
    assert_eq!(Rfc6349Config::quick().path_estimate_s(), 23.0);
}

fn conn(asked: u64, start: f64, end: f64, sent: u64, retrans: u64, srtt: &[f64]) -> Conn {
    Conn {
        local: None,
        bytes_asked: asked,
        bytes_received: asked,
        start_s: Some(start),
        end_s: Some(end),
        bytes_sent: sent,
        bytes_retrans: retrans,
        mss: 1448,
        srtt_ms: srtt.to_vec(),
        max_cwnd: 40,
        error: None,
    }
}

/// weir's default queue at 10 Mbit/s, 50 ms: MTU 1500, baseline 50 ms, BB `bb`.
fn path(dut: &str, bb: f64, baseline_ms: f64, tests: Vec<TcpTest>) -> PathRun {
    PathRun {
        dut: dut.into(),
        link: Link {
            down_bps: 10_000_000,
            up_bps: 10_000_000,
            rtt_ms: 50,
            line_pct: 150,
        },
        run: 0,
        policy: String::new(),
        mtu: Some(MtuReport {
            mtu: Some(1500),
            probes: vec![MtuProbe {
                size: 1500,
                passed: true,
                attempts: 1,
            }],
        }),
        baseline: Some(Baseline {
            min_ms: baseline_ms,
            p50_ms: baseline_ms + 0.1,
            mean_ms: baseline_ms + 0.1,
            max_ms: baseline_ms + 0.5,
            probes: 100,
            lost: 0,
        }),
        bb: Some(Bottleneck {
            frame: 1514,
            offered_bps: 12.5e6,
            achieved_bps: 12.5e6,
            sent: 2000,
            lost: 400,
            bb_bps: Some(bb),
        }),
        rmem_max: Some(6_291_456),
        tests,
        dut_report: serde_json::Value::Null,
        errors: Vec::new(),
        hosts: Vec::new(),
    }
}

fn two_conns() -> TcpTest {
    TcpTest {
        connections: 2,
        size_bytes: 6_000_000,
        conns: vec![
            conn(3_000_000, 0.1, 5.3, 3_010_000, 10_000, &[55.0, 57.0]),
            conn(3_000_000, 0.12, 5.25, 3_000_000, 0, &[56.0]),
        ],
        metrics: None,
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn the_metrics_of_a_test_by_hand() {
    let p = path("weir:fq_cobalt", 10e6, 50.0, vec![two_conns()]);
    let m = compute(&p, &p.tests[0]).unwrap();
    // 10 Mbit/s x 1448 / 1514 = 9.564069 Mbit/s; 6,000,000 B x 8 / that = 5.018785 s
    assert_eq!(m.payload, 1448);
    assert!(close(m.max_tcp_bps, 9_564_068.69, 0.01));
    assert!(close(m.ideal_s, 5.018785, 1e-6));
    // from the first accept (0.1 s) to the last byte (5.3 s)
    assert!(close(m.actual_s, 5.2, 1e-9));
    assert!(close(m.ttr, 1.036107, 1e-6));
    assert!(close(m.throughput_bps, 48e6 / 5.2, 1e-6));
    // (6,010,000 - 10,000) / 6,010,000
    assert_eq!((m.transmitted, m.retransmitted), (6_010_000, 10_000));
    assert!(close(m.efficiency_pct.unwrap(), 99.833611, 1e-6));
    // samples 55, 57, 56: 56 ms over a 50 ms baseline
    assert!(close(m.avg_rtt_ms.unwrap(), 56.0, 1e-9));
    assert!(close(m.buffer_delay_pct.unwrap(), 12.0, 1e-9));
    // 24e6 / 5.2 and 24e6 / 5.13 bit/s
    assert!(close(m.jain.unwrap(), 0.999954, 1e-6));
    assert_eq!(m.peak_window_bytes, 2 * 40 * 1448);
    // a single connection has no Jain; no BB, no metrics
    let one = TcpTest {
        connections: 1,
        conns: vec![conn(6_000_000, 0.1, 5.3, 6_000_000, 0, &[])],
        ..two_conns()
    };
    let m = compute(&p, &one).unwrap();
    assert_eq!(
        (m.jain, m.avg_rtt_ms, m.buffer_delay_pct),
        (None, None, None)
    );
    let mut none = p.clone();
    none.bb = None;
    assert!(compute(&none, &p.tests[0]).is_none());
}

fn result(paths: Vec<PathRun>) -> Rfc6349Result {
    let mut r = Rfc6349Result {
        kind: "rfc6349".into(),
        meta: Default::default(),
        config: Rfc6349Config::paper(),
        paths,
        checks: Vec::new(),
    };
    finish(&mut r).unwrap();
    r
}

fn verdicts(r: &Rfc6349Result) -> Vec<(String, bool, bool)> {
    r.checks
        .iter()
        .map(|c| (c.name.clone(), c.passed, c.skipped))
        .collect()
}

#[test]
fn checks_judge_weir_and_not_the_kernel() {
    let good = result(vec![
        path("weir:fq_cobalt", 10.01e6, 50.0, vec![two_conns()]),
        path("kernel:htb", 8e6, 50.0, vec![two_conns()]),
    ]);
    let v = verdicts(&good);
    assert_eq!(v.len(), 6, "{v:?}");
    assert!(v
        .iter()
        .all(|(n, ok, skipped)| n.starts_with("weir:fq_cobalt") && *ok && !skipped));
    let text = text(&good);
    assert!(
        text.contains("TCP Transfer Time Ratio = actual / ideal = 5.200 s"),
        "{text}"
    );
    assert!(
        text.contains("(56.000 - 50.000) / 50.000 x 100 = 12.0 %"),
        "{text}"
    );
    assert!(
        text.contains("(6,010,000 - 10,000) / 6,010,000 x 100 = 99.834 %"),
        "{text}"
    );

    // BB 3 % off, a slow transfer, a deep queue, an unfair share
    let mut slow = two_conns();
    slow.conns[0].end_s = Some(12.0);
    slow.conns[0].srtt_ms = vec![80.0];
    slow.conns[1].srtt_ms = vec![80.0];
    let bad = result(vec![path("weir:fq_cobalt", 9.7e6, 50.0, vec![slow])]);
    let failed: Vec<String> = verdicts(&bad)
        .into_iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(n, ..)| n)
        .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
    for want in ["bottleneck", "Transfer Time", "Buffer Delay", "Jain"] {
        assert!(
            failed.iter().any(|n| n.contains(want)),
            "{want}: {failed:?}"
        );
    }

    // an incomplete transfer fails; a 0 ms baseline skips the buffer delay; a FIFO preset
    // is judged on the RFC's metrics but not on the modern queue's
    let mut lost = two_conns();
    lost.conns[1].bytes_received = 1_000;
    let r = result(vec![
        path("weir:fq_cobalt", 10e6, 0.2, vec![lost]),
        path("weir:cbq", 10e6, 50.0, vec![two_conns()]),
    ]);
    let v = verdicts(&r);
    assert!(v
        .iter()
        .any(|(n, ok, _)| n.contains("arrived whole") && !ok));
    assert!(v
        .iter()
        .any(|(n, _, skipped)| n.contains("Buffer Delay") && *skipped));
    assert_eq!(
        v.iter().filter(|(n, ..)| n.starts_with("weir:cbq")).count(),
        4
    );
}

#[test]
fn a_result_survives_json_and_its_report_is_remade() {
    let r = result(vec![path("weir:fq_cobalt", 10e6, 50.0, vec![two_conns()])]);
    let json = serde_json::to_string(&r).unwrap();
    let mut back: Rfc6349Result = serde_json::from_str(&json).unwrap();
    for t in back.paths.iter_mut().flat_map(|p| p.tests.iter_mut()) {
        t.metrics = None;
    }
    finish(&mut back).unwrap();
    assert_eq!(text(&back), text(&r));
    let dir = std::env::temp_dir().join(format!("weir-rfc6349-{}", std::process::id()));
    let files = write_outputs(&r, &dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "result.json",
        "tables.txt",
        "tests.csv",
        "ttr.svg",
        "buffer-delay.svg",
        "report.html",
    ] {
        assert!(names.iter().any(|n| n == want), "{want}: {names:?}");
    }
    let csv = std::fs::read_to_string(dir.join("tests.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2);
    assert!(csv
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("weir:fq_cobalt,10000000,50,1,1500,50,"));
    std::fs::remove_dir_all(&dir).unwrap();
}
