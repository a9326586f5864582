//! `weir`: policy-based bandwidth manager, WAN link emulator and QoS testbed.
//!
//! The binary only parses arguments and prints; the work is done by the libraries.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod check;
mod sim;

/// The policy `weir sim` runs when none is given (seed 000's Basic Test policy).
pub const DEFAULT_POLICY: (&str, &str) = (
    "<embedded examples/basic-test.toml>",
    include_str!("../../../examples/basic-test.toml"),
);

#[derive(Parser)]
#[command(name = "weir", version, about = "Policy-based bandwidth manager, WAN link emulator and QoS testbed")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a policy and print its compiled class tree and rules.
    Check(check::Args),
    /// Run a policy on the virtual clock with synthetic backlogged sessions and report
    /// per-class and per-session delivered rates (a deterministic what-if tool).
    Sim(sim::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check(a) => check::run(a),
        Cmd::Sim(a) => sim::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Load a policy file, or the embedded default when `path` is `None`; print warnings.
pub fn load_policy(path: Option<&std::path::Path>) -> Result<weir_core::policy::Policy, weir_core::policy::PolicyErrors> {
    let p = match path {
        Some(p) => weir_core::policy::Policy::load(p)?,
        None => weir_core::policy::Policy::parse(DEFAULT_POLICY.0, DEFAULT_POLICY.1)?,
    };
    for w in &p.warnings {
        eprintln!("{w} (warning)");
    }
    Ok(p)
}
