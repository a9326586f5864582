//! `weir lab fidelity --quick` end to end (root; skips otherwise): every path runs, the
//! acceptance checks of the emulator issue pass, the outputs are written, and `weir lab
//! report` re-makes them from the JSON alone.

use std::process::Command;
use weir_lab::report::StealMeter;
use weir_lab::topo::skip_unless_root;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(WEIR).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn quick_fidelity_lab_meets_its_checks_and_reports() {
    let (code, _, err) = run(&["lab", "fidelity", "--paths", "veth,nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown path 'nowhere'"), "{err}");
    if skip_unless_root("quick_fidelity_lab_meets_its_checks_and_reports") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weir-fid-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    // timing checks on a shared 2-core VM: every attempt is printed with the CPU time the
    // hypervisor took during it; a failure on a quiet machine (steal ≤ StealMeter::QUIET)
    // is a failure, one on a machine losing more is retried (up to four attempts; CI saw
    // spreads of 24-75 us with heavy steal where the quiet figure is ~3 us), and if every
    // attempt lost more the timing checks are reported inconclusive
    let mut last = String::new();
    let mut passed = false;
    for attempt in 1..=4 {
        let meter = StealMeter::start();
        let (code, stdout, err) = run(&["lab", "fidelity", "--quick", "--strict", "--out", out]);
        let steal = meter.finish();
        let steal_text = steal.map_or("steal unknown".into(), |s| s.to_string());
        eprintln!("attempt {attempt}: exit {code}; {steal_text}\n{stdout}\n{err}");
        assert!(code == 0 || code == 3, "lab failed to run: {err}");
        last = stdout;
        if code == 0 {
            passed = true;
            break;
        }
        assert!(
            !steal.is_some_and(|s| s.quiet()),
            "acceptance checks failed on a quiet machine ({steal_text}):\n{last}"
        );
    }
    if !passed {
        eprintln!(
            "INCONCLUSIVE: the hypervisor took more than {:.0} % of the CPU time in every attempt",
            StealMeter::QUIET * 100.0
        );
    }
    assert!(last.contains("== weir-125ms-155M"), "{last}");
    assert!(!passed || !last.contains("FAIL"), "{last}");
    let json = std::fs::read_to_string(dir.join("result.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["kind"], "fidelity");
    assert_eq!(v["cells"].as_array().unwrap().len(), 7 * 4);
    assert!(v["meta"]["kernel"].is_string());
    for f in [
        "tables.txt",
        "report.html",
        "gaps-weir-155M-1518B-80000pps.svg",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    // re-make from the JSON into another directory
    let again = dir.join("again");
    let (code, stdout, err) = run(&[
        "lab",
        "report",
        dir.join("result.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout, last, "the report re-made from JSON is the same");
    assert!(again.join("report.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
