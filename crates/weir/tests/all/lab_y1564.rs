//! `weir lab y1564` end to end. Bad input is refused before anything runs, naming what is
//! wrong. As root, a short run of the embedded three-service policy's `voice` (no EIR) and
//! `video` (an EIR) services against weir and the kernel's HTB: every configuration and
//! performance stream of both DUTs, weir passing the checks (every service passes both
//! tests; the IR of the 100 % CIR step and of the policing test within 1 % of CIR and
//! CIR + EIR), a policing test that holds each service to its profile. The FDV criterion is
//! 10 ms here rather than the default 5 ms: a CI machine running other jobs stalls
//! senders for milliseconds (docs/lab.md has the quiet machine's figures). `weir lab
//! report` re-makes the same text from the JSON. The testbed removes its namespaces itself,
//! also on failure; the output directory is removed by a guard.

use crate::common::{assert_report_remakes, check_names, lab_result, weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn y1564_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "y1564", "--services", "gold"][..],
            "service 'gold': no such class",
        ),
        (
            &["lab", "y1564", "--sac", "10ms/5ms"][..],
            "SAC \"10ms/5ms\": 2 fields",
        ),
        (
            &["lab", "y1564", "--sac", "gold:10ms/5ms/1%"][..],
            "'gold' is not one of the services",
        ),
        (
            &["lab", "y1564", "--dut", "weir:nonsense"][..],
            "unknown weir technique",
        ),
        (&["lab", "y1564", "--steps", "50,150"][..], "CIR steps"),
        (&["lab", "y1564", "--frame", "2000"][..], "frame size 2000"),
        (&["lab", "y1564", "--overshoot", "0.5"][..], "overshoot 0.5"),
        (
            &["lab", "y1564", "--policy", "/nonexistent.toml"][..],
            "/nonexistent.toml",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_y1564_weir_beside_htb() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_y1564_weir_beside_htb") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-y1564-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&[
        "lab",
        "y1564",
        "--quick",
        "--strict",
        "--dut",
        "weir,kernel:htb",
        "--services",
        "voice,video",
        "--step-time",
        "1s",
        "--perf-time",
        "2s",
        "--sac",
        "10ms/10ms/0.1%",
        "--out",
        out,
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke or a check failed:\n{stdout}\n{err}");
    let v = lab_result(
        &dir.0,
        "y1564",
        &[
            "result.json",
            "tables.txt",
            "streams.csv",
            "ir-weir.svg",
            "ir-kernel_htb.svg",
            "report.html",
        ],
    );
    let checks = check_names(&v);
    assert_eq!(
        checks,
        [
            "weir: every service passes the service configuration test",
            "weir: every service passes the service performance test",
            "weir: measured CIR and CIR+EIR within 1 % of the profile",
        ]
    );
    let duts = v["duts"].as_array().unwrap();
    assert_eq!(duts.len(), 2);
    for d in duts {
        let streams = d["streams"].as_array().unwrap();
        // voice: 4 steps + policing; video: 4 steps + EIR + policing; 2 performance
        assert_eq!(streams.len(), 5 + 6 + 2, "{}", d["dut"]);
        for s in streams {
            let (svc, test) = (s["service"].as_str().unwrap(), &s["phase"]["test"]);
            let ir = s["ir_bps"].as_f64().unwrap();
            if test == "policing" {
                // the excess is held back (queued, then dropped): voice offered 6.25, video
                // 32.5 Mbit/s, received the profile's CIR + EIR
                let (offered, top) = if svc == "voice" {
                    (6.25e6, 5e6)
                } else {
                    (32.5e6, 30e6)
                };
                assert_eq!(s["offered_bps"].as_f64().unwrap(), offered);
                assert!(ir < top * 1.02, "{} {svc} policing IR {ir}", d["dut"]);
                // weir within 2 % (its check says 1 %); the kernel's HTB loses tokens when
                // its watchdog fires late on a loaded machine (measured 4.5 % short once)
                let low = if d["dut"] == "weir" { 0.98 } else { 0.9 };
                assert!(ir > top * low, "{} {svc} policing IR {ir}", d["dut"]);
            } else {
                assert!(
                    ir > 0.0,
                    "{} {svc} {}: nothing arrived",
                    d["dut"],
                    s["phase"]
                );
            }
        }
    }
    assert!(
        stdout.contains("kernel:htb: service performance test"),
        "{stdout}"
    );
    assert_report_remakes(&dir.0, "tables.txt");
}
