//! `weir lab rfc6349` end to end. Bad input is refused before anything runs, naming what
//! is wrong. As root, the quick run (10 Mbit/s, 50 ms, one connection, a 10 s transfer)
//! against weir's default queue and a script DUT, `examples/dut-tbf.sh` (the kernel's
//! bridge with a TBF each way: the `cmd:` DUT every conformance lab accepts): both show the
//! hosts' 1500-byte path MTU, a 50 ms baseline and a bottleneck bandwidth at the rate; the
//! transfers arrive whole; weir passes its checks (the RFC's metrics within its bounds).
//! `weir lab report` re-makes the same text from the JSON, and compares two result files
//! (here the one file under two labels). The paper-length run (10 and
//! 100 Mbit/s, 1 and 4 connections, 30 s, beside the kernel's HTB) is in docs/lab.md.

use crate::common::{assert_report_remakes, check_names, lab_result, weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn rfc6349_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "rfc6349", "--connections", "0"][..],
            "0 connections",
        ),
        (&["lab", "rfc6349", "--rate", "fast"][..], "--rate fast"),
        (&["lab", "rfc6349", "--rtt", "9s"][..], "0 to 2000 ms"),
        (
            &["lab", "rfc6349", "--dut", "kernel:cake"][..],
            "kernel:cake",
        ),
        (&["lab", "rfc6349", "--bb-offered", "90"][..], "above it"),
        (&["lab", "rfc6349", "--cc", "vegas"][..], "--cc vegas"),
        (&["lab", "rfc6349", "--runs", "0"][..], "--runs"),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_rfc6349_against_weir_and_a_script() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_rfc6349_against_weir_and_a_script") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-rfc6349-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let script = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/dut-tbf.sh"
    ))
    .unwrap();
    let duts = format!("weir:fq_cobalt,cmd:{}", script.display());
    let (code, stdout, err) = weir(&[
        "lab", "rfc6349", "--quick", "--strict", "--dut", &duts, "--out", out,
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke or a check failed:\n{stdout}\n{err}");
    let v = lab_result(
        &dir.0,
        "rfc6349",
        &[
            "result.json",
            "tables.txt",
            "tests.csv",
            "ttr.svg",
            "buffer-delay.svg",
            "report.html",
        ],
    );
    assert_eq!(
        check_names(&v),
        [
            "weir:fq_cobalt: the path MTU is the hosts' 1500 bytes",
            "weir:fq_cobalt: bottleneck bandwidth within 2 % of the rate",
            "weir:fq_cobalt: every transfer arrived whole",
            "weir:fq_cobalt: TCP Transfer Time Ratio at most 1.15",
            "weir:fq_cobalt: Buffer Delay at most 30 % (baselines of 10 ms or more)",
            "weir:fq_cobalt: Jain's index among connections at least 0.95",
        ]
    );
    let paths = v["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2);
    for p in paths {
        let dut = p["dut"].as_str().unwrap();
        assert_eq!(p["mtu"]["mtu"], 1500, "{dut}");
        let base = p["baseline"]["min_ms"].as_f64().unwrap();
        assert!((50.0..=52.0).contains(&base), "{dut}: baseline {base} ms");
        // both count Ethernet frames without FCS: the rate (weir's check: within 2 %; the
        // kernel's TBF loses tokens when it is woken late, so within 5 %)
        let bb = p["bb"]["bb_bps"].as_f64().unwrap();
        assert!((9.5e6..=10.2e6).contains(&bb), "{dut}: BB {bb}");
        let t = &p["tests"][0];
        assert_eq!(t["connections"], 1);
        let c = &t["conns"][0];
        assert_eq!(c["bytes_received"], c["bytes_asked"], "{dut}: {c}");
        let m = &t["metrics"];
        for k in [
            "ttr",
            "throughput_bps",
            "efficiency_pct",
            "buffer_delay_pct",
        ] {
            assert!(m[k].as_f64().is_some(), "{dut}: {k} in {m}");
        }
    }
    assert!(
        stdout.contains("TCP Transfer Time Ratio = actual / ideal"),
        "{stdout}"
    );
    assert_report_remakes(&dir.0, "tables.txt");

    // two result files compared (here the same one twice, under two labels)
    let result = dir.0.join("result.json");
    let cmp = dir.0.join("cmp");
    let (code, text, err) = weir(&[
        "lab",
        "report",
        result.to_str().unwrap(),
        result.to_str().unwrap(),
        "--label",
        "one,two",
        "--out",
        cmp.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("Comparison of 2 result files"), "{text}");
    assert!(
        text.contains("10Mbit 50ms x1: TCP Transfer Time Ratio"),
        "{text}"
    );
    for who in ["one: weir:fq_cobalt", "two: weir:fq_cobalt", "two: cmd:"] {
        assert!(text.lines().any(|l| l.starts_with(who)), "{who}: {text}");
    }
    for f in [
        "compare.txt",
        "compare.csv",
        "box-1.svg",
        "cdf-1.svg",
        "compare.html",
    ] {
        assert!(cmp.join(f).is_file(), "{f}");
    }
}

#[test]
fn report_refuses_what_it_cannot_read_or_label() {
    let _group = crate::common::group(module_path!());
    let (code, _, err) = weir(&["lab", "report", "/nonexistent/result.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/result.json"), "{err}");
    let (code, _, err) = weir(&["lab", "report", "a.json", "b.json", "--label", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("1 label(s) for 2 result files"), "{err}");
    let (code, _, err) = weir(&["lab", "report", "a.json", "--label", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("give two result files or more"), "{err}");
}
