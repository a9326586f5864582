//! A user script as the device under test (`cmd:PATH`).
//!
//! Started as `ip netns exec <dut-ns> PATH lan0 wan0` (a relative PATH is made absolute),
//! with the environment `WEIR_LAN`, `WEIR_WAN`, `WEIR_NETNS` (the namespace's name; empty on
//! a testbed of real hosts, where the script runs in this machine's own namespace),
//! `WEIR_LINK_RATE` (bit/s), `WEIR_ACTION=start` and `WEIR_POLICY` (the policy file, when the
//! policy was loaded from a file that exists). The script must make the DUT forward between
//! the two interfaces (a bridge, a daemon it starts in the background, `tc` on its own…) and
//! exit 0 within [`SCRIPT_TIMEOUT`]; a non-zero exit is an error that carries its standard
//! error. At stop it is run again as `PATH lan0 wan0 stop` (`WEIR_ACTION=stop`) to undo
//! what it did; a failure there is recorded in the report, not fatal. Its output goes to
//! files, not pipes, so a background process it leaves behind cannot block the testbed.

use std::fs::File;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::tc::{clean_qdiscs, tc_counters};
use super::{refuse_if_bridged, DutSetup, DutSpec, RunningDut, State};
use crate::topo::DutPlace;
use crate::{Error, Result};

/// Longest time a `cmd:` script may take to set up or tear down.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// One run of a `cmd:` script.
#[derive(Clone, Debug, Serialize)]
struct ScriptRun {
    argv: Vec<String>,
    /// Exited with status 0.
    ok: bool,
    status: String,
    stdout: String,
    stderr: String,
    seconds: f64,
}

fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "weir-dut-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Runs `script lan wan [action]` in the DUT's namespace with `env`, output to files, killed
/// after [`SCRIPT_TIMEOUT`].
fn run_script(
    place: DutPlace<'_>,
    script: &Path,
    env: &[(String, String)],
    action: &str,
) -> Result<ScriptRun> {
    let out_path = temp_path("stdout");
    let err_path = temp_path("stderr");
    let open =
        |p: &Path| File::create(p).map_err(|e| Error::io(format!("create {}", p.display()), e));
    let (out_f, err_f) = (open(&out_path)?, open(&err_path)?);
    let mut argv = vec![
        script.display().to_string(),
        place.lan.to_string(),
        place.wan.to_string(),
    ];
    if action != "start" {
        argv.push(action.to_string());
    }
    // a testbed namespace by its name; this machine's own namespace (a testbed of real
    // hosts) directly
    let mut cmd = if place.ns.is_host() {
        Command::new(&argv[0])
    } else {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", place.ns.name()]).arg(&argv[0]);
        c
    };
    cmd.args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(out_f)
        .stderr(err_f);
    let t0 = std::time::Instant::now();
    let result = (|| {
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("run {}", script.display()), e))?;
        let (ok, status) = loop {
            match child.try_wait() {
                Ok(Some(s)) => break (s.success(), s.to_string()),
                Ok(None) if t0.elapsed() > SCRIPT_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break (false, format!("killed after {SCRIPT_TIMEOUT:?}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(Error::io(format!("wait for {}", script.display()), e)),
            }
        };
        Ok(ScriptRun {
            argv: argv.clone(),
            ok,
            status,
            stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
            seconds: t0.elapsed().as_secs_f64(),
        })
    })();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    result
}

/// A script that ran its `start`: what `stop` needs.
pub(super) struct Started {
    script: PathBuf,
    env: Vec<(String, String)>,
    setup: ScriptRun,
}

pub(super) fn start<'a>(path: &Path, setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
    let place = setup.place;
    let script = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("current directory", e))?
            .join(path)
    };
    let spec = DutSpec::Cmd(path.to_path_buf()).name();
    let meta = std::fs::metadata(&script)
        .map_err(|e| Error::io(format!("{spec}: {}", script.display()), e))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::Invalid(format!(
            "{spec}: {} is not an executable file (chmod +x it, with a #! line)",
            script.display()
        )));
    }
    refuse_if_bridged(setup, &spec)?;
    let mut env = vec![
        ("WEIR_LAN".to_string(), place.lan.to_string()),
        ("WEIR_WAN".to_string(), place.wan.to_string()),
        (
            "WEIR_NETNS".to_string(),
            // empty when the DUT is this machine's own namespace
            if place.ns.is_host() {
                String::new()
            } else {
                place.ns.name().to_string()
            },
        ),
        (
            "WEIR_LINK_RATE".to_string(),
            setup.policy.link_rate.to_string(),
        ),
        ("WEIR_ACTION".to_string(), "start".to_string()),
    ];
    if Path::new(&setup.policy.file).is_file() {
        env.push(("WEIR_POLICY".to_string(), setup.policy.file.clone()));
    }
    let run = run_script(place, &script, &env, "start")?;
    let env_text: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let description = format!(
        "{spec}: ip netns exec {ns} {argv} (env {env}); {status}\n--- stdout\n{out}--- stderr\n{err}",
        ns = place.ns.name(),
        argv = run.argv.join(" "),
        env = env_text.join(" "),
        status = run.status,
        out = run.stdout,
        err = run.stderr,
    );
    let ok = run.ok;
    let stderr = run.stderr.trim().to_string();
    let status = run.status.clone();
    // the guard: a failed setup is undone with the script's `stop` too
    let dut = RunningDut {
        place,
        spec: spec.clone(),
        description,
        state: State::Cmd(Started {
            script,
            env,
            setup: run,
        }),
    };
    if !ok {
        return Err(Error::Command {
            cmd: format!(
                "[netns {}] {spec} {} {}",
                place.ns.name(),
                place.lan,
                place.wan
            ),
            status,
            stderr,
        });
    }
    Ok(dut)
}

/// Runs the script's `stop` (a failure is recorded in `errors`, not fatal), deletes the root
/// qdiscs and takes `lan0` and `wan0` out of any bridge; the script runs and, with
/// `collect`, the devices' qdiscs as JSON.
pub(super) fn stop(
    place: DutPlace<'_>,
    s: Started,
    collect: bool,
    errors: &mut Vec<String>,
) -> Value {
    let Started { script, env, setup } = s;
    let devs = [place.lan.to_string(), place.wan.to_string()];
    let qdiscs = if collect {
        tc_counters(place.ns, &devs, errors)
    } else {
        Value::Null
    };
    let mut env = env;
    for (k, v) in env.iter_mut() {
        if k == "WEIR_ACTION" {
            *v = "stop".into();
        }
    }
    let stop_run = run_script(place, &script, &env, "stop");
    match &stop_run {
        Ok(r) if !r.ok => errors.push(format!(
            "`{} {} {} stop` failed ({}): {}",
            script.display(),
            place.lan,
            place.wan,
            r.status,
            r.stderr.trim()
        )),
        Ok(_) => {}
        Err(e) => errors.push(format!("stop script: {e}")),
    }
    clean_qdiscs(place, errors);
    for dev in [place.lan, place.wan] {
        if let Err(e) = place.ns.ip(&["link", "set", "dev", dev, "nomaster"]) {
            errors.push(e.to_string());
        }
    }
    json!({
        "setup": setup,
        "stop": stop_run.map(|r| json!(r)).unwrap_or(Value::Null),
        "devices": qdiscs,
    })
}
