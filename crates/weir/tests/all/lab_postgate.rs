//! `weir lab postgate` end to end (root): seed 003's scenario in quick form — 8 bulk TCP
//! flows and a 300 kbit/s CBR through an 8 Mbit/s ATU-C (a weir emulator with a
//! 256-packet queue) and the device: the unmanaged line's queue fills (the control),
//! Postgate with TCP rate control keeps the ATU-C's queueing delay below the paper's 50 ms
//! at 60 % or more of the line with no CBR loss, and on a line whose rate steps (a trace)
//! the autorate with TCP rate control holds its p95 to half the unmanaged line's or less.
//! Plain Postgate is left to the paper-length run (its p95 is not a claim the quick form
//! can judge: the senders' slow-start bursts, with the offloads a user has, reach the
//! ATU-C before any device behind it can act; docs/lab.md). `weir lab report` re-makes
//! the same text from the JSON alone. The testbed removes its namespaces
//! itself, also on failure; the output directory is removed by a guard.

use crate::common::{assert_report_remakes, weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn postgate_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "postgate", "--devices", "cake"][..],
            "device 'cake'",
        ),
        (
            &["lab", "postgate", "--devices", "sfq+tcr"][..],
            "only postgate and autorate take +tcr",
        ),
        (&["lab", "postgate", "--line", "fast"][..], "--line fast"),
        (
            &["lab", "postgate", "--stop-at", "20s"][..],
            "before the last starts",
        ),
        (
            &["lab", "postgate", "--devices", "postgate:0ms"][..],
            "1..=10000",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_postgate_moves_the_bottleneck() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_postgate_moves_the_bottleneck") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-pg-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&["lab", "postgate", "--quick", "--out", out]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke:\n{stdout}\n{err}");
    for f in [
        "result.json",
        "table.txt",
        "report.html",
        "varying-line.trace",
        "fig3-atu-delay-seed.svg",
        "fig3-line-throughput-seed.svg",
        "fig4-classes-seed-postgate_tcr.svg",
        "fig5-weights-seed-postgate_tcr.svg",
        "fig3-atu-delay-varying.svg",
        "adaptive-rate-varying.svg",
    ] {
        assert!(dir.0.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], "postgate");
    let checks = v["checks"].as_array().unwrap();
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}\n{stdout}");
    for name in [
        "none: the ATU-C's queue is the bottleneck (p95 > 100 ms)",
        "postgate+tcr: ATU-C delay p95 < 50 ms",
        "postgate+tcr: the CBR loses nothing",
        "autorate+tcr on the varying line: ATU-C delay p95 at most half the unmanaged line's",
    ] {
        assert!(
            checks.iter().any(|c| c["name"] == name),
            "check '{name}' missing"
        );
    }
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for r in runs {
        let (name, d95) = (&r["name"], r["delay_p95_ms"].as_f64().unwrap());
        assert!((0.0..=2000.0).contains(&d95), "{name}: p95 {d95}");
        let u = r["utilisation"].as_f64().unwrap();
        assert!((0.3..=1.05).contains(&u), "{name}: utilisation {u}");
        let samples = r["samples"].as_array().unwrap();
        assert!(samples.len() >= 60, "{name}: {} samples", samples.len());
        if r["name"] == "postgate+tcr" {
            let w = samples.last().unwrap()["weights"].as_array().unwrap();
            assert_eq!(w.len(), 5, "four bulk classes and the CBR's");
        }
    }
    // `weir lab report` re-makes the text from the JSON alone
    assert_report_remakes(&dir.0, "table.txt");
}
