//! `weir lab voip` end to end (root): a quick run on the 125 kbit/s link with the router
//! baseline and weir:cbq writes every output, its numbers are sane, and `weir lab report`
//! re-makes the same text from the JSON alone. The testbed removes its namespaces itself,
//! also on failure; the output directory is removed by a guard.

use crate::common::{weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn voip_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (&["lab", "voip", "--link", "56k"][..], "unknown link '56k'"),
        (
            &["lab", "voip", "--dut", "weir:fast"][..],
            "unknown weir technique",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_voip_on_125k() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_voip_on_125k") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-voip-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&[
        "lab",
        "voip",
        "--quick",
        "--link",
        "125k",
        "--dut",
        "router:fifo,weir:cbq,weir:cbq+pfq+mss256",
        "--out",
        out,
    ]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke:\n{stdout}\n{err}");
    for f in [
        "result.json",
        "table.txt",
        "table.csv",
        "delay-125k.svg",
        "mos-125k.svg",
        "report.html",
    ] {
        assert!(dir.0.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], "voip");
    let rows = v["parts"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        let vs = &r["voice"];
        // 10 s of call at 50 packets/s
        assert!(vs["sent"].as_u64().unwrap() >= 450, "{r}");
        for k in ["net_loss", "buffer_loss"] {
            let x = vs[k].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&x), "{k} {x}");
        }
        if let Some(rating) = vs["rating"].as_object() {
            let mos = rating["mos"].as_f64().unwrap();
            assert!((1.0..=4.5).contains(&mos), "MOS {mos}");
        }
        let d = vs["delay_p50_ms"].as_f64().unwrap();
        assert!(d > 0.0, "delay {d}");
        assert!(r["ftp_goodput_bps"].as_f64().unwrap() > 0.0);
    }
    // the voice class protects the call (weir:cbq's check); with the MSS clamped to 256
    // the call is good (seed 000's finding; measured MOS 4.02, delay p95 26 ms)
    assert!(stdout.contains("PASS 125k weir:cbq:"), "{stdout}");
    assert!(
        stdout.contains("PASS 125k weir:cbq+pfq+mss256: the clamped call's MOS >= 3.9"),
        "{stdout}"
    );
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
        std::fs::read_to_string(again.join("table.csv")).unwrap(),
        std::fs::read_to_string(dir.0.join("table.csv")).unwrap()
    );
}
