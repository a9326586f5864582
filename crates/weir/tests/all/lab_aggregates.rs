//! `weir lab aggregates` end to end (root): seed 001's aggregate-marking test, a quick
//! run of both edge markers (seed 001's trTCM per aggregate and weir's flow-fair one) through
//! two weir routers (edge marker, 10 Mbit/s interior core), meets its checks
//! (every flow measured, no aggregate given more green than its profile, the core's AF
//! ceiling and best effort's share), writes every output, its tables are sane, and
//! `weir lab report` re-makes the same text from the JSON alone. The testbed removes its
//! namespaces itself, also on failure; the output directory is removed by a guard.

use crate::common::{weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn aggregates_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "aggregates", "--runs", "0"][..],
            "--runs: must be at least 1",
        ),
        (
            &["lab", "aggregates", "--start", "200s"][..],
            "must start before the end",
        ),
        (
            &["lab", "aggregates", "--udp-rate", "fast"][..],
            "--udp-rate fast",
        ),
        (
            &["lab", "aggregates", "--background-flows", "300"][..],
            "at most 253",
        ),
        (
            &["lab", "aggregates", "--marker", "flow"][..],
            "--marker flow: invalid argument: marker 'flow': expected aggregate",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_aggregates_meets_its_checks() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_aggregates_meets_its_checks") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-agg-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&["lab", "aggregates", "--quick", "--strict", "--out", out]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke or a check failed:\n{stdout}\n{err}");
    for f in [
        "result.json",
        "table.txt",
        "report.html",
        "fig2-per-flow-throughput-aggregate.svg",
        "fig2-per-flow-throughput-fair.svg",
    ] {
        assert!(dir.0.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], "aggregates");
    let parts = v["parts"].as_array().unwrap();
    let markers: Vec<&str> = parts
        .iter()
        .map(|p| p["marker"].as_str().unwrap())
        .collect();
    assert_eq!(markers, ["aggregate", "fair"]);
    for p in parts {
        assert_eq!(p["flows"].as_array().unwrap().len(), 10);
        let t = &p["tables"];
        for a in t["aggregates"].as_array().unwrap() {
            let u = a["cir_utilisation"]["mean"].as_f64().unwrap();
            assert!((0.3..=1.5).contains(&u), "utilisation of CIR {u}: {a}");
        }
        for k in 0..3 {
            for which in ["jain_flows", "jain_aggregates"] {
                let j = t[which][k]["mean"].as_f64().unwrap();
                assert!((0.1..=1.0).contains(&j), "{which}[{k}] {j}");
            }
        }
    }
    assert_eq!(v["goals"].as_array().unwrap().len(), 2);
    let again = dir.0.join("again");
    let (code, stdout2, err) = weir(&[
        "lab",
        "report",
        dir.0.join("result.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout2, stdout, "re-made from the JSON alone");
    assert_eq!(
        std::fs::read_to_string(again.join("table.txt")).unwrap(),
        std::fs::read_to_string(dir.0.join("table.txt")).unwrap()
    );
}
