//! `weir lab diffserv` end to end (root): seed 004's DiffServ router chain, a quick run —
//! the clock calibration with an injected skew, every weir scenario (no DiffServ with and
//! without background, EF and AF for UDP and TCP) and the kernel HTB peer on the loaded
//! baseline and EF over UDP — meets its checks (skew estimated, background at rate, the full-FIFO delay
//! arithmetic, EF lossless below its reservation and held to it above, EF/AF delay far
//! below best effort's), writes every output, and `weir lab report` re-makes the same text
//! from the JSON alone. Hosts keep their default offloads and sysctls; TCP is cubic, set
//! per socket. The lab removes its namespaces itself, also on failure; the output
//! directory is removed by a guard.

use crate::common::{weir, TempDir};
use weir_lab::topo::skip_unless_root;

#[test]
fn diffserv_refuses_bad_input_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "diffserv", "--groups", "ef"][..],
            "--groups: invalid argument: group 'ef'",
        ),
        (
            &["lab", "diffserv", "--device", "tc"][..],
            "device 'tc': expected weir",
        ),
        (
            &["lab", "diffserv", "--duration", "0s"][..],
            "--duration (s) 0",
        ),
        (
            &["lab", "diffserv", "--background", "lots"][..],
            "--background lots",
        ),
        (
            &["lab", "diffserv", "--drift-ppm", "5000"][..],
            "--drift 5000 ppm",
        ),
        (&["lab", "diffserv", "--cc", "vegas"][..], "--cc vegas"),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quick_diffserv_meets_its_checks() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("quick_diffserv_meets_its_checks") {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("weir-ds-{}", std::process::id())));
    let out = dir.0.to_str().unwrap();
    let (code, stdout, err) = weir(&["lab", "diffserv", "--quick", "--strict", "--out", out]);
    eprintln!("{stdout}\n{err}");
    assert_eq!(code, 0, "the run broke or a check failed:\n{stdout}\n{err}");
    for f in [
        "result.json",
        "table.txt",
        "report.html",
        "fig12-loaded-delay-weir.svg",
        "fig14-ef-udp-bandwidth-weir.svg",
        "fig25-af-tcp-jitter-weir.svg",
        "fig15-ef-udp-delay-kernel_htb.svg",
    ] {
        assert!(dir.0.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("result.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], "diffserv");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 18 + 5);
    for r in runs {
        assert!(r["bins"].as_array().unwrap().len() >= 15, "{}", r["name"]);
    }
    // the seed's TCP tool: records arrive in order, none lost
    let tcp = runs.iter().find(|r| r["name"] == "ef-tcp-4M").unwrap();
    assert_eq!(tcp["received"], tcp["sent"], "{tcp}");
    // re-made from the JSON alone: the same table
    let table = std::fs::read_to_string(dir.0.join("table.txt")).unwrap();
    let again = TempDir(dir.0.join("again"));
    let (code, stdout2, err2) = weir(&[
        "lab",
        "report",
        dir.0.join("result.json").to_str().unwrap(),
        "--out",
        again.0.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err2}");
    assert_eq!(stdout2.trim_end(), table.trim_end());
}
