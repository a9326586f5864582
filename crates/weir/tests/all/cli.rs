//! The command line as a user runs it.

use std::process::Command;

fn weir(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run weir");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmp_policy(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_every_example() {
    let _group = crate::common::group(module_path!());
    for f in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples")).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "toml") {
            let (code, out, err) = weir(&["check", f.to_str().unwrap()]);
            assert_eq!(code, 0, "{}: {out}{err}", f.display());
            assert!(out.contains(": ok"), "{out}");
            assert!(out.contains("link"), "{out}");
        }
    }
}

#[test]
fn check_prints_the_tree_with_rates() {
    let _group = crate::common::group(module_path!());
    let (code, out, _) = weir(&["check", "examples/voip-ftp.toml"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("├─ voip") && out.contains("90kbit") && out.contains("└─ ftp"),
        "{out}"
    );
    assert!(out.contains("35kbit") && out.contains("125kbit"), "{out}");
    assert!(out.contains("udp port 16384-32767"), "{out}");
}

#[test]
fn check_rejects_with_position_and_exit_code_2() {
    let _group = crate::common::group(module_path!());
    let p = tmp_policy(
        "bad.toml",
        "[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"2Mbit\"\nceil = \"1kbit\"\n",
    );
    let (code, out, err) = weir(&["check", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    let want = format!(
        "{}:7:8: `ceil` 1kbit is below the class's rate 2Mbit",
        p.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains(&format!("{}:2:8: children of 'link'", p.display())),
        "{err}"
    );
    assert!(err.contains("2 errors"), "{err}");
}

#[test]
fn check_reports_a_missing_file() {
    let _group = crate::common::group(module_path!());
    let (code, _, err) = weir(&["check", "/nonexistent/policy.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/policy.toml") && err.contains("cannot read policy"),
        "{err}"
    );
}

#[test]
fn sim_json_has_the_documented_shape() {
    let _group = crate::common::group(module_path!());
    let (code, out, err) = weir(&[
        "sim",
        "examples/basic-test.toml",
        "--duration",
        "20s",
        "--warmup",
        "2s",
        "--flows",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let classes = v["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 6);
    for c in classes {
        for k in [
            "name",
            "rate_bps",
            "ceil_bps",
            "delivered_bps",
            "sessions_bps",
        ] {
            assert!(c.get(k).is_some(), "missing {k} in {c}");
        }
    }
    let c20 = classes.iter().find(|c| c["name"] == "c20").unwrap();
    assert_eq!(c20["rate_bps"], 20000);
    assert_eq!(c20["sessions_bps"].as_array().unwrap().len(), 4);
    let d = c20["delivered_bps"].as_f64().unwrap();
    assert!((d / 20000.0 - 1.0).abs() < 0.05, "{d}");
}

#[test]
fn sim_default_runs_the_embedded_policy() {
    let _group = crate::common::group(module_path!());
    let (code, out, err) = weir(&["sim", "--duration", "5s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("<embedded examples/basic-test.toml>"), "{out}");
    assert!(out.contains("c1100"), "{out}");
}

#[test]
fn sim_rejects_bad_arguments_clearly() {
    let _group = crate::common::group(module_path!());
    let (code, _, err) = weir(&["sim", "--idle", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("CLASS@FROM-TO"), "{err}");
    let (code, _, err) = weir(&["sim", "--idle", "ghost@1s-2s"]);
    assert_eq!(code, 1);
    assert!(err.contains("no class named 'ghost'"), "{err}");
    let (code, _, err) = weir(&["sim", "--duration", "10"]);
    assert_ne!(code, 0);
    assert!(err.contains("unit"), "{err}");
    let (code, _, err) = weir(&["sim", "--technique", "wfq"]);
    assert_eq!(code, 1);
    assert!(err.contains("expected one of cbq"), "{err}");
}

/// `--http` on a non-loopback address without a token is refused before anything starts
/// (no interface is touched: this runs without root).
#[test]
fn run_refuses_a_public_http_address_without_a_token() {
    let _group = crate::common::group(module_path!());
    let (code, out, err) = weir(&[
        "run",
        "--policy",
        "examples/basic-test.toml",
        "--lan",
        "no-such-if0",
        "--wan",
        "no-such-if1",
        "--http",
        "0.0.0.0:9000",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("--http 0.0.0.0:9000") && err.contains("--http-token"),
        "{err}"
    );
    let (code, _, err) = weir(&[
        "run",
        "--policy",
        "x",
        "--lan",
        "a",
        "--wan",
        "b",
        "--http-token",
        "abcdefgh1",
    ]);
    assert_eq!(code, 2, "--http-token needs --http: {err}");
}

/// `weir --version` names the commit it was built from.
#[test]
fn version_names_the_commit() {
    let _group = crate::common::group(module_path!());
    let (code, out, _) = weir(&["--version"]);
    assert_eq!(code, 0);
    let v = out.trim();
    assert!(
        v.starts_with(&format!("weir {} (", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    assert!(v.ends_with(')') && v.len() > "weir 0.1.0 ()".len(), "{v}");
}

/// `weir lab … --sweep`: every combination is checked before anything runs (no root
/// needed to be refused), each refusal naming the flag or the combination.
#[test]
fn lab_sweeps_refuse_bad_axes_before_running() {
    let _group = crate::common::group(module_path!());
    for (args, want) in [
        (
            &["lab", "rrul", "--quick", "--sweep", "speed=10,100"][..],
            "--sweep speed: weir lab rrul has no --speed option; it can sweep case, dut, rate",
        ),
        (
            &[
                "lab",
                "rrul",
                "--quick",
                "--rate",
                "10",
                "--sweep",
                "rate=10,100",
            ][..],
            "--sweep rate: --rate is given too",
        ),
        (
            &["lab", "rrul", "--quick", "--sweep", "busy-poll=1,2"][..],
            "--busy-poll takes no value",
        ),
        (
            &["lab", "rrul", "--quick", "--sweep", "rate=10,fast"][..],
            "--sweep rate=fast: --rate fast: invalid rate 'fast'",
        ),
        (
            &["lab", "rrul", "--quick", "--sweep", "cc=cubic,vegas"][..],
            "--sweep cc=vegas: invalid argument: --cc vegas: expected one of",
        ),
        (
            &["lab", "fidelity", "--sweep", "out=a,b"][..],
            "--sweep out: not an option to sweep",
        ),
        (
            &["lab", "basic", "--sweep", "runs"][..],
            "--sweep runs: expected FLAG=V1,V2",
        ),
    ] {
        let (code, _, err) = weir(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
