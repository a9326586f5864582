//! `weir reload`: replace the policy of a running `weir run` without losing a packet.
//!
//! The file is validated here first (its `file:line:col` errors printed, nothing sent);
//! then its text goes to the running weir through its statistics socket, which validates
//! it again, applies it (`Device::replace_policy`) and answers with what moved. `weir run`
//! also re-reads the file it was started with on SIGHUP.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  sudo weir reload --socket /run/weir/weir.sock examples/basic-test.toml"
)]
pub struct Args {
    /// The new policy (TOML).
    policy: PathBuf,
    /// The running weir's statistics socket.
    #[arg(long, default_value = weir_io::stats::DEFAULT_PATH)]
    socket: PathBuf,
    /// Print the running weir's answer as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let name = a.policy.display().to_string();
    let text = std::fs::read_to_string(&a.policy)
        .map_err(|e| anyhow::anyhow!("cannot read policy {name}: {e}"))?;
    // the running weir reads the files the policy names (a subscriber table) beside it:
    // it is sent by its full path
    let full = std::fs::canonicalize(&a.policy).map_or(name.clone(), |p| p.display().to_string());
    if let Err(errors) = weir_core::policy::Policy::load(&a.policy) {
        eprintln!("{errors}");
        eprintln!("weir reload: {name} is not a valid policy; nothing was sent");
        return Ok(ExitCode::from(1));
    }
    let answer = weir_io::stats::request_reload(&a.socket, &full, &text)?;
    print_answer(
        &answer,
        a.json,
        "weir reload: refused; the running policy stays",
        |v| {
            format!(
                "reloaded {name}: policy generation {}\n{}",
                v["report"]["generation"],
                v["summary"].as_str().unwrap_or("")
            )
        },
    )
}

/// Print a running weir's answer to a control request (`weir reload`, `weir emu set`):
/// as JSON with `json`, else `ok`'s text, or `refused` and the errors (exit 1).
pub fn print_answer(
    answer: &str,
    json: bool,
    refused: &str,
    ok: impl Fn(&serde_json::Value) -> String,
) -> anyhow::Result<ExitCode> {
    let v: serde_json::Value = serde_json::from_str(answer)
        .map_err(|e| anyhow::anyhow!("weir answered something unexpected ({e}): {answer}"))?;
    if json {
        println!("{answer}");
    }
    if v["ok"].as_bool() != Some(true) {
        eprintln!("{refused}:\n{}", v["errors"].as_str().unwrap_or(answer));
        return Ok(ExitCode::from(1));
    }
    if !json {
        println!("{}", ok(&v));
    }
    Ok(ExitCode::SUCCESS)
}
