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

/// The timing checks want the machine to themselves: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn quick_fidelity_lab_meets_its_checks_and_reports() {
    let _group = crate::common::group(module_path!());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (code, _, err) = run(&["lab", "fidelity", "--paths", "veth,nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown path 'nowhere'"), "{err}");
    if skip_unless_root("quick_fidelity_lab_meets_its_checks_and_reports") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weir-fid-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    // timing checks on a shared 2-core VM: every attempt is printed with the CPU time the
    // hypervisor took during it. The tail checks sit near what this machine gives even when
    // quiet (weir-125ms's widest delay p90 - p10 at 80 kpps was 56, 80, 105 and 126 us in
    // four runs with under 2 % steal, against a 100 us bound; CI saw 24-75 us gap spreads with heavy steal where
    // the quiet figure is ~3 us), so a failing attempt is repeated, up to four attempts. The
    // test fails when every attempt failed and at least one of them was quiet (steal <=
    // StealMeter::QUIET): a real regression fails every time. If every attempt lost more to
    // the hypervisor, the timing checks are reported inconclusive.
    let mut last = String::new();
    let mut passed = false;
    let mut quiet_failures = Vec::new();
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
        if steal.is_some_and(|s| s.quiet()) {
            let failed: Vec<&str> = last.lines().filter(|l| l.starts_with("FAIL")).collect();
            quiet_failures.push(format!(
                "attempt {attempt} ({steal_text}): {}",
                failed.join("; ")
            ));
        }
    }
    assert!(
        passed || quiet_failures.is_empty(),
        "acceptance checks failed in every attempt, on a quiet machine in:\n{}\n{last}",
        quiet_failures.join("\n")
    );
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
    assert_eq!(v["cells"].as_array().unwrap().len(), 8 * 4);
    assert!(
        last.contains("weir-125ms-jitter: delays' lag-1 autocorrelation within 0.05"),
        "{last}"
    );
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

/// `--sweep` (one mechanism for every lab; fidelity's calibration path keeps it short): one
/// run per value, each in its own directory, and the combined sweep.txt and sweep.json.
#[test]
fn a_sweep_runs_every_combination_into_its_own_directory() {
    let _group = crate::common::group(module_path!());
    if skip_unless_root("a_sweep_runs_every_combination_into_its_own_directory") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("weir-fid-sweep-{}", std::process::id()));
    let (code, stdout, err) = run(&[
        "lab",
        "fidelity",
        "--quick",
        "--paths",
        "veth",
        "--rates",
        "8000",
        "--sweep",
        "sizes=64,1518",
        "repeats=1,2",
        "--out",
        dir.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("a sweep of 4 runs (sizes 64/1518 x repeats 1/2)"),
        "{err}"
    );
    assert!(stdout.contains("== sweep: 4 runs"), "{stdout}");
    let combos = [
        "sizes=64,repeats=1",
        "sizes=64,repeats=2",
        "sizes=1518,repeats=1",
        "sizes=1518,repeats=2",
    ];
    for (i, c) in combos.iter().enumerate() {
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(c).join("result.json")).unwrap(),
        )
        .unwrap();
        let size = if i < 2 { 64 } else { 1518 };
        let repeats = 1 + i as u64 % 2;
        assert_eq!(r["config"]["sizes"][0], size, "{c}");
        assert_eq!(r["cells"].as_array().unwrap().len() as u64, repeats, "{c}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(v["kind"], "sweep");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[3]["params"]["repeats"], "2");
    assert_eq!(runs[3]["dir"], combos[3]);
    let txt = std::fs::read_to_string(dir.join("sweep.txt")).unwrap();
    assert!(
        txt.contains("######## sizes=1518,repeats=2 ########"),
        "{txt}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
