//! `--sweep FLAG=V1,V2 …`: a lab run once per combination of values of its own options
//! (issue 29's sweeps), e.g. `weir lab rrul --sweep rate=10,100 rtt=0,50ms cc=cubic,bbr`
//! makes 2 × 2 × 2 = 8 runs.
//!
//! One mechanism for every lab: a FLAG is any option of the lab that takes a value (its long
//! name without the dashes). Each combination's arguments are the command line as given,
//! less `--sweep` and `--out`, plus `--FLAG V` for each swept flag, parsed again by the
//! lab's own parser ([`Alone`]) and applied to its preset as a single run's are — so a
//! value is checked exactly as the option checks it. Every combination is planned before
//! anything runs (a bad value is refused before root and before the first run); the runs
//! go one after the other, each into `OUT/FLAG=V,…`. `OUT/sweep.txt` is the one combined
//! report: a table of every combination's checks, then each run's text under its header;
//! `OUT/sweep.json` lists each combination's values, directory and checks. `--strict`:
//! status 3 when any run failed a check.
//!
//! The order of runs is the cartesian product with the last flag varying fastest.

use super::{finish_text, Alone, LabArgs};
use anyhow::{anyhow, bail};
use clap::{CommandFactory, Parser};
use std::path::Path;
use std::process::ExitCode;
use weir_lab::lab::Lab;
use weir_lab::report::{self, Check};

/// One swept option and its values.
type Axis = (String, Vec<String>);
/// One combination: each swept option with its value.
type Combo = Vec<(String, String)>;
/// A finished run: its combination, its text, its checks.
type Done = (Combo, String, Vec<Check>);

/// `["rate=10,100", "cc=cubic,bbr"]` → the axes, refusing an empty or repeated flag or a
/// flag without values.
fn parse_axes(sweep: &[String]) -> anyhow::Result<Vec<Axis>> {
    let mut axes: Vec<Axis> = Vec::new();
    for s in sweep {
        let (flag, values) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--sweep {s}: expected FLAG=V1,V2,… (e.g. rate=10,100)"))?;
        let flag = flag.trim().trim_start_matches("--").to_string();
        let values: Vec<String> = values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if flag.is_empty() || values.is_empty() {
            bail!("--sweep {s}: expected FLAG=V1,V2,… (e.g. rate=10,100)");
        }
        if axes.iter().any(|(f, _)| *f == flag) {
            bail!("--sweep {flag}: swept twice; give all its values in one FLAG=V1,V2,…");
        }
        axes.push((flag, values));
    }
    Ok(axes)
}

/// Every combination of the axes' values (the last axis varying fastest).
fn combinations(axes: &[Axis]) -> Vec<Combo> {
    let mut out: Vec<Combo> = vec![Vec::new()];
    for (flag, values) in axes {
        out = out
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((flag.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// A combination as a directory name and a header: `rate=10,cc=cubic` (a `/` in a value
/// becomes `_`).
fn label(combo: &[(String, String)]) -> String {
    combo
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('/', "_")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The lab's arguments as given (after `weir … lab NAME`), less `--sweep` with its values
/// and `--out` with its value.
fn strip(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--sweep" {
            i += 1;
            while i < args.len() && !args[i].starts_with('-') {
                i += 1;
            }
            continue;
        }
        if a == "--out" {
            i += 2;
            continue;
        }
        if !(a.starts_with("--sweep=") || a.starts_with("--out=")) {
            out.push(a.clone());
        }
        i += 1;
    }
    out
}

/// `std::env::args()` after `lab NAME`.
fn lab_args(name: &str) -> anyhow::Result<Vec<String>> {
    let all: Vec<String> = std::env::args().collect();
    let at = all
        .windows(2)
        .position(|w| w[0] == "lab" && w[1] == name)
        .ok_or_else(|| anyhow!("--sweep: cannot find 'lab {name}' in the command line"))?;
    Ok(all[at + 2..].to_vec())
}

/// Refuse a swept flag the lab does not have, one without a value, `--out`, or one also
/// given outside the sweep.
fn check_flags<A: LabArgs>(axes: &[Axis], base: &[String]) -> anyhow::Result<()> {
    let cmd = Alone::<A>::command();
    let name = A::Lab::NAME;
    for (flag, _) in axes {
        if flag == "out" || flag == "sweep" {
            bail!(
                "--sweep {flag}: not an option to sweep (each run's outputs go into OUT/FLAG=V,…)"
            );
        }
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(flag)) else {
            let known: Vec<&str> = cmd
                .get_arguments()
                .filter(|a| a.get_action().takes_values())
                .filter_map(|a| a.get_long())
                .filter(|l| !matches!(*l, "out" | "sweep"))
                .collect();
            bail!(
                "--sweep {flag}: weir lab {name} has no --{flag} option; it can sweep {}",
                known.join(", ")
            );
        };
        if !arg.get_action().takes_values() {
            bail!("--sweep {flag}: --{flag} takes no value; sweep an option with values");
        }
        let given = format!("--{flag}");
        if base
            .iter()
            .any(|a| *a == given || a.starts_with(&format!("{given}=")))
        {
            bail!("--sweep {flag}: --{flag} is given too; put all its values in the sweep");
        }
    }
    Ok(())
}

/// One planned run of the sweep.
struct Planned<L: Lab> {
    combo: Combo,
    lab: L,
    config: L::Config,
    outline: String,
}

/// Run the sweep `sweep` of lab `A` into `out` (see the module comment).
pub(super) fn run<A: LabArgs>(
    sweep: &[String],
    out: &Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    let axes = parse_axes(sweep)?;
    let base = strip(&lab_args(A::Lab::NAME)?);
    check_flags::<A>(&axes, &base)?;
    let mut plan: Vec<Planned<A::Lab>> = Vec::new();
    for combo in combinations(&axes) {
        let mut argv = base.clone();
        for (k, v) in &combo {
            argv.push(format!("--{k}"));
            argv.push(v.clone());
        }
        let what = label(&combo);
        let alone = Alone::<A>::try_parse_from(&argv).map_err(|e| {
            let msg = e.to_string();
            let first = msg
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            anyhow!("--sweep {what}: {first}")
        })?;
        let mut config = if alone.w.common.quick {
            A::Lab::quick()
        } else {
            A::Lab::paper()
        };
        let lab = alone
            .w
            .args
            .apply(&mut config)
            .map_err(|e| anyhow!("--sweep {what}: {e}"))?;
        let outline = lab
            .plan(&config)
            .map_err(|e| anyhow!("--sweep {what}: {e}"))?
            .to_string();
        plan.push(Planned {
            combo,
            lab,
            config,
            outline,
        });
    }
    weir_lab::topo::require_root()?;
    let n = plan.len();
    eprintln!(
        "weir lab {}: a sweep of {n} runs ({}); outputs in {}",
        A::Lab::NAME,
        axes.iter()
            .map(|(f, v)| format!("{f} {}", v.join("/")))
            .collect::<Vec<_>>()
            .join(" x "),
        out.display()
    );
    let mut done: Vec<Done> = Vec::new();
    for (i, p) in plan.into_iter().enumerate() {
        let what = label(&p.combo);
        let dir = out.join(&what);
        eprintln!(
            "weir lab {} [{}/{n}] {what}: {}",
            A::Lab::NAME,
            i + 1,
            p.outline
        );
        let r = super::run_showing_progress(p.lab, &p.config, &dir)?;
        let text = finish_text::<A::Lab>(&r, &dir)?;
        done.push((p.combo, text, A::Lab::checks(&r).to_vec()));
    }
    let (txt, json) = combined(A::Lab::NAME, &done);
    std::fs::create_dir_all(out).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let files = [("sweep.txt", txt.clone()), ("sweep.json", json)];
    for (f, body) in &files {
        let path = out.join(f);
        std::fs::write(&path, body).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    }
    print!("{}", summary_table(&done));
    eprintln!(
        "weir lab: wrote {} and {}",
        out.join("sweep.txt").display(),
        out.join("sweep.json").display()
    );
    let all_passed = done.iter().all(|(_, _, c)| report::all_passed(c));
    Ok(if strict && !all_passed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// The summary table: one line per combination, its checks passed and the failed ones.
fn summary_table(done: &[Done]) -> String {
    let w = done
        .iter()
        .map(|(c, _, _)| label(c).len())
        .max()
        .unwrap_or(0)
        .max("combination".len());
    let mut s = format!(
        "\n== sweep: {} runs\n{:<w$}  checks\n",
        done.len(),
        "combination"
    );
    for (combo, _, checks) in done {
        let passed = checks.iter().filter(|c| c.passed).count();
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        s += &format!("{:<w$}  {passed}/{} passed", label(combo), checks.len());
        if !failed.is_empty() {
            s += &format!("; FAIL {}", failed.join("; FAIL "));
        }
        s += "\n";
    }
    s
}

/// `sweep.txt` (the summary, then each run's text under its header) and `sweep.json`.
fn combined(lab: &str, done: &[Done]) -> (String, String) {
    let mut txt = format!("weir lab {lab}: sweep\n{}", summary_table(done));
    for (combo, text, _) in done {
        txt += &format!("\n\n######## {} ########\n{text}", label(combo));
    }
    let runs: Vec<serde_json::Value> = done
        .iter()
        .map(|(combo, _, checks)| {
            serde_json::json!({
                "params": combo
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect::<serde_json::Map<_, _>>(),
                "dir": label(combo),
                "passed": report::all_passed(checks),
                "checks": checks,
            })
        })
        .collect();
    let json = serde_json::json!({ "kind": "sweep", "lab": lab, "runs": runs });
    (txt, serde_json::to_string_pretty(&json).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn axes_and_their_combinations() {
        let axes = parse_axes(&s(&["rate=10,100", "--rtt=0, 50ms", "cc=cubic"])).unwrap();
        assert_eq!(axes[1], ("rtt".to_string(), s(&["0", "50ms"])));
        let c = combinations(&axes);
        assert_eq!(c.len(), 4);
        assert_eq!(label(&c[0]), "rate=10,rtt=0,cc=cubic");
        assert_eq!(label(&c[1]), "rate=10,rtt=50ms,cc=cubic");
        assert_eq!(label(&c[3]), "rate=100,rtt=50ms,cc=cubic");
        for bad in ["rate", "rate=", "=1,2"] {
            assert!(parse_axes(&s(&[bad])).is_err(), "{bad}");
        }
        let e = parse_axes(&s(&["cc=reno", "cc=bbr"])).unwrap_err();
        assert!(e.to_string().contains("swept twice"), "{e}");
        assert_eq!(label(&[("cmd".into(), "a/b".into())]), "cmd=a_b");
    }

    #[test]
    fn the_sweep_and_out_leave_the_arguments() {
        let a = s(&[
            "--quick",
            "--sweep",
            "rate=10,100",
            "cc=cubic",
            "--out",
            "/tmp/x",
            "--case",
            "rrul_be",
            "--sweep=rtt=0",
            "--out=/y",
            "--strict",
        ]);
        assert_eq!(strip(&a), s(&["--quick", "--case", "rrul_be", "--strict"]));
    }
}
