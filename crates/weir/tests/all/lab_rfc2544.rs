//! `weir lab rfc2544` end to end. Bad input is refused before anything runs, naming what
//! is wrong. As root, a short run against weir with the embedded one-class policy
//! (100 Mbit/s) on a 400 Mbit/s "medium", 1518-byte frames, 0.5 s trials: the throughput
//! search, the latency trial, the frame loss steps and a back-to-back search all ran; weir
//! passes its checks (throughput within 2 % of 100 Mbit/s, and above it the rate received
//! is 100 Mbit/s within 2 %); the frame loss rate at the maximum rate is near 1 − R/r =
//! 75 %. The side-by-side run with the kernel's HTB and every frame size is in
//! docs/lab.md. `weir lab report` re-makes the same text from the JSON. The testbed
//! removes its namespaces itself, also on failure; the output directory is removed by a
//! guard.

use crate::common::{assert_report_remakes, check_names, lab_result, weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn rfc2544_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "rfc2544", "--class", "gold"][..],
            "--class gold: no such class",
        ),
        (
            &["lab", "rfc2544", "--sizes", "32,1518"][..],
            "frame sizes [32, 1518]",
        ),
        (
            &["lab", "rfc2544", "--line-rate", "fast"][..],
            "--line-rate fast",
        ),
        (
            &["lab", "rfc2544", "--dut", "kernel:tbf"][..],
            "unknown kernel DUT",
        ),
        (
            &["lab", "rfc2544", "--resolution", "50"][..],
            "resolution 0.5",
        ),
        (
            &["lab", "rfc2544", "--b2b-trials", "0"][..],
            "back-to-back trials",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_rfc2544_against_weir() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_rfc2544_against_weir") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-rfc2544-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&[
        "lab",
        "rfc2544",
        "--quick",
        "--strict",
        "--dut",
        "weir",
        "--sizes",
        "1518",
        "--line-rate",
        "400Mbit",
        "--trial-time",
        "500ms",
        "--b2b-time",
        "200ms",
        "--out",
        out,
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke or a check failed:\n{stdout}\n{err}");
    let v = lab_result(
        &dir.0,
        "rfc2544",
        &[
            "result.json",
            "tables.txt",
            "trials.csv",
            "throughput.svg",
            "frame-loss.svg",
            "report.html",
        ],
    );
    let checks = check_names(&v);
    assert_eq!(
        checks,
        [
            "weir: throughput within 2.0 % of the class's rate at every frame size",
            "weir: above the class's rate, the rate received is the class's within 2 %",
        ]
    );
    let size = &v["duts"][0]["sizes"][0];
    assert_eq!(size["size"], 1518);
    let tput = size["throughput_bps"].as_f64().unwrap();
    assert!((98e6..=102e6).contains(&tput), "throughput {tput}");
    assert!(size["latency"]["ftd"]["mean"].as_f64().is_some());
    assert!(!size["b2b"].as_array().unwrap().is_empty());
    // the first frame loss step, at 400 Mbit/s: 1 - 100/400 = 75 %, less what the queue
    // held when the trial ended
    let first = &size["loss"][0];
    let ratio = first["lost"].as_f64().unwrap() / first["sent"].as_f64().unwrap();
    assert!((0.5..=0.76).contains(&ratio), "frame loss rate {ratio}");
    assert_report_remakes(&dir.0, "tables.txt");
}
