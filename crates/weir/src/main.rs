//! `weir`: policy-based bandwidth manager, WAN link emulator and QoS testbed.
//!
//! The binary only parses arguments and prints; the work is done by the libraries.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use weir_core::policy::{Policy, Technique};

mod check;
mod emu;
mod lab;
mod reload;
mod run;
mod sim;
mod stats;

/// The policy `weir sim` runs when none is given (seed 000's Basic Test policy).
pub const DEFAULT_POLICY: (&str, &str) = (
    "<embedded examples/basic-test.toml>",
    include_str!("../../../examples/basic-test.toml"),
);

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Policy-based bandwidth manager, WAN link emulator and QoS testbed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// made once per process: the size of its largest variant (the bridge and emulator
// options) costs nothing
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Validate a policy and print its compiled class tree and rules.
    Check(check::Args),
    /// Run a policy on the virtual clock with synthetic backlogged sessions and report
    /// per-class and per-session delivered rates (a deterministic what-if tool).
    Sim(sim::Args),
    /// Shape real traffic as a transparent bridge between two interfaces.
    Run(run::Args),
    /// Emulate a WAN link between two interfaces (rate, delay, jitter, loss, ...), netem-style.
    Emu(emu::Args),
    /// The namespace testbed: run the papers' tests and report (root).
    Lab(lab::Args),
    /// Print the counters of a running `weir run`.
    Stats(stats::Args),
    /// Replace the policy of a running `weir run` without losing queued packets.
    Reload(reload::Args),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`weir sim | head`) like other command-line tools,
    // instead of panicking inside println!.
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check(a) => check::run(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Emu(a) => emu::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Stats(a) => stats::run(a),
        Cmd::Reload(a) => reload::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Load a policy file, or the embedded default when `path` is `None`, and apply a
/// `--technique` override. Warnings are printed; an invalid policy prints every error and
/// a summary and yields exit code 2.
pub fn load_policy(
    path: Option<&std::path::Path>,
    technique: Option<&str>,
) -> Result<Policy, ExitCode> {
    let name = path.map_or(DEFAULT_POLICY.0.to_string(), |p| p.display().to_string());
    let loaded = match path {
        Some(p) => Policy::load(p),
        None => Policy::parse(DEFAULT_POLICY.0, DEFAULT_POLICY.1),
    };
    let p = match loaded {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            let n = e.0.len();
            eprintln!(
                "{name}: {n} error{} — policy rejected",
                if n == 1 { "" } else { "s" }
            );
            return Err(ExitCode::from(2));
        }
    };
    let p = match technique {
        None => p,
        Some(t) => match Technique::parse(t) {
            Some(t) => p.with_technique(t),
            None => {
                let all = Technique::ALL.map(|t| t.name()).join(", ");
                eprintln!("weir: --technique '{t}': expected one of {all}");
                return Err(ExitCode::from(1));
            }
        },
    };
    for w in &p.warnings {
        eprintln!("{w} (warning)");
    }
    Ok(p)
}
