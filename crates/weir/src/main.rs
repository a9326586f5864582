//! `weir`: policy-based bandwidth manager, WAN link emulator and QoS testbed.
//!
//! The binary only parses arguments and prints; the work is done by the libraries.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use weir_core::policy::{Policy, Technique};

mod agent;
mod check;
mod demo;
mod discover;
mod emu;
mod emu_set;
mod generate;
mod lab;
mod mmgraph;
mod reload;
mod run;
mod sim;
mod stats;
mod web;

/// `weir --version`: the crate's version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("WEIR_GIT_COMMIT"),
    ")"
);

/// The policy `weir sim` runs when none is given (seed 000's Basic Test policy).
pub const DEFAULT_POLICY: (&str, &str) = (
    "<embedded examples/basic-test.toml>",
    include_str!("../../../examples/basic-test.toml"),
);

#[derive(Parser)]
#[command(
    name = "weir",
    version = VERSION,
    about = "Policy-based bandwidth manager, WAN link emulator and QoS testbed"
)]
pub struct Cli {
    /// Log only events at this level or above: error, warning, notice, info (default; or
    /// the WEIR_LOG environment variable). Under systemd each line carries its priority.
    #[arg(long, global = true, value_parser = weir_io::log::Level::parse)]
    log_level: Option<weir_io::log::Level>,
    #[command(subcommand)]
    cmd: Cmd,
}

// made once per process: the size of its largest variant (the bridge and emulator
// options) costs nothing
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Validate a policy and print its compiled class tree and rules.
    #[command(after_help = "Example:\n  weir check examples/basic-test.toml")]
    Check(check::Args),
    /// Run a policy on the virtual clock with synthetic backlogged sessions and report
    /// per-class and per-session delivered rates (a deterministic what-if tool).
    #[command(
        after_help = "Example:\n  weir sim                                  # the embedded Basic Test policy\n  weir sim examples/borrowing.toml --idle b@5s-10s --series 1s"
    )]
    Sim(sim::Args),
    /// Shape real traffic as a transparent bridge between two interfaces.
    #[command(
        after_help = "Example:\n  sudo weir run --policy examples/basic-test.toml --lan veth-lan --wan veth-wan --http 127.0.0.1:9000"
    )]
    Run(run::Args),
    /// Emulate a WAN link between two interfaces (rate, delay, jitter, loss, ...), netem-style.
    #[command(
        after_help = "Examples:\n  sudo weir emu --lan veth-lan --wan veth-wan --rate 10Mbit --delay 50ms --jitter 5ms --loss 0.5%\n  sudo weir emu set --delay 80ms          # change a running weir emu",
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true
    )]
    Emu(emu::Args),
    /// The namespace testbed: run the papers' tests and report (root).
    #[command(
        after_help = "Example:\n  sudo weir lab basic --quick --out /tmp/basic\n  sudo weir lab postgate --devices postgate+tcr,htb --varying none"
    )]
    Lab(lab::Args),
    /// Print the counters of a running `weir run`.
    #[command(
        after_help = "Example:\n  sudo weir stats --watch\n  sudo weir stats --json | jq '.outbound.pipeline.classes[].rate_now_bps'"
    )]
    Stats(stats::Args),
    /// Replace the policy of a running `weir run` without losing queued packets.
    Reload(reload::Args),
    /// A one-command live demonstration (root): namespaces, weir between them with the
    /// embedded policy, real TCP and UDP through it, the per-class rates every second;
    /// then everything is removed.
    #[command(
        after_help = "Example:\n  sudo weir demo\n  sudo weir demo --duration 60s --http 127.0.0.1:9000"
    )]
    Demo(demo::Args),
    /// What crosses a running weir, or a capture, by application and server (traffic
    /// discovery); --suggest-policy prints a starting policy from it.
    #[command(
        after_help = "Example:\n  sudo weir discover\n  sudo weir discover --suggest-policy --rate 50Mbit\n  weir discover --pcap trace.pcap --json"
    )]
    Discover(discover::Args),
    /// Summarise and plot a Mahimahi mm-link log (from mm-link or `weir emu
    /// --uplink-log/--downlink-log`) as mm-throughput-graph and mm-delay-graph do.
    #[command(
        after_help = "Example:\n  weir mm-graph down.log\n  weir mm-graph down.log --ms-per-bin 100 --svg down-throughput.svg --delay-svg down-delay.svg\n  weir mm-graph up.log --json | jq .summary.throughput_mbps"
    )]
    MmGraph(mmgraph::Args),
    /// Serve the lab's traffic agents on standard input and output: what `weir lab …
    /// --topology FILE` runs on each remote host over SSH (not run by hand).
    #[command(after_help = "Example (what a lab runs):\n  ssh -T root@192.0.2.10 -- weir agent")]
    Agent(agent::Args),
    /// Write the man pages or shell completions (for packaging; scripts/package).
    #[command(hide = true)]
    Generate(generate::Args),
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`weir sim | head`) like other command-line tools,
    // instead of panicking inside println!.
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let level = match (cli.log_level, std::env::var("WEIR_LOG")) {
        (Some(l), _) => Some(l),
        (None, Ok(v)) => match weir_io::log::Level::parse(&v) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("weir: WEIR_LOG: {e}");
                return ExitCode::from(1);
            }
        },
        (None, Err(_)) => None,
    };
    if let Some(l) = level {
        weir_io::log::set_level(l);
    }
    let r = match cli.cmd {
        Cmd::Check(a) => check::run(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Emu(a) => emu::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Stats(a) => stats::run(a),
        Cmd::Reload(a) => reload::run(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Discover(a) => discover::run(a),
        Cmd::MmGraph(a) => mmgraph::run(a),
        Cmd::Generate(a) => generate::run(a),
        Cmd::Agent(a) => agent::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            weir_io::log::error(&format!("{e:#}"));
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

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// Every "Example:" in a command's `--help` is a command line weir accepts.
    #[test]
    fn every_help_example_parses() {
        fn walk(cmd: &clap::Command, seen: &mut usize) {
            if let Some(help) = cmd.get_after_help() {
                let text = help.to_string();
                for line in text
                    .lines()
                    .skip_while(|l| !l.starts_with("Example"))
                    .skip(1)
                {
                    // the command itself: no sudo, no comment, no pipe
                    let line = line.trim().trim_start_matches("sudo ");
                    let line = line.split(" #").next().unwrap();
                    let line = line.split(" |").next().unwrap().trim();
                    if !line.starts_with("weir ") {
                        continue;
                    }
                    let argv: Vec<&str> = line.split_whitespace().collect();
                    if let Err(e) = Cli::try_parse_from(&argv) {
                        panic!(
                            "the example `{line}` of `{}` does not parse: {e}",
                            cmd.get_name()
                        );
                    }
                    *seen += 1;
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, seen);
            }
        }
        let cli = Cli::command();
        let mut seen = 0;
        walk(&cli, &mut seen);
        // each command and each lab test has one
        let commands = cli.get_subcommands().count() - 1
            + cli
                .find_subcommand("lab")
                .unwrap()
                .get_subcommands()
                .count();
        assert!(seen >= commands, "{seen} examples for {commands} commands");
        for sub in cli.get_subcommands() {
            for s in std::iter::once(sub).chain(sub.get_subcommands()) {
                if s.get_name() != "help" && !s.has_subcommands() {
                    assert!(
                        s.get_after_help().is_some(),
                        "`{}` has no example in its help",
                        s.get_name()
                    );
                }
            }
        }
    }
}
