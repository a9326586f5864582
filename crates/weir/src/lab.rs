//! `weir lab`: the namespace testbed. Each subcommand runs one of the papers' methods and
//! writes a self-describing result (JSON) plus tables, SVG plots and an HTML report;
//! `weir lab report` re-makes the outputs from a result file without re-running.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_lab::fidelity::{self, FidelityConfig, FidelityResult};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(clap::Subcommand)]
enum LabCmd {
    /// Seed 002's link-shaping fidelity tests: CBR flows of 64/800/1518-byte frames at
    /// 8k-200k packets/s through veth, weir (0 ms, 125 ms, 125 ms + 155 Mbit/s) and the
    /// kernel's TBF/HTB; inter-frame gap and delay percentiles, loss.
    Fidelity(FidelityArgs),
    /// Re-make the tables, plots and HTML report of a result file.
    Report(ReportArgs),
}

#[derive(clap::Args)]
struct FidelityArgs {
    /// A CI-sized run: 64- and 1518-byte frames at 8k and 80k packets/s, one 0.4 s repeat.
    #[arg(long)]
    quick: bool,
    /// Directory for result.json, tables.txt, SVG plots and report.html.
    #[arg(long, default_value = "weir-lab-fidelity")]
    out: PathBuf,
    /// Frame sizes in bytes, FCS included (comma-separated).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<u32>>,
    /// Packet rates, packets/s (comma-separated).
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<u32>>,
    /// Repeats of every cell.
    #[arg(long)]
    repeats: Option<u32>,
    /// Sending time per cell (e.g. 1s, 400ms).
    #[arg(long, value_parser = crate::sim::dur)]
    cell_time: Option<weir_core::Duration>,
    /// Paths to run (comma-separated): veth, weir-0ms, weir-125ms, weir-125ms-155M,
    /// weir-155M, tbf-155M, htb-155M. Default: all.
    #[arg(long, value_delimiter = ',')]
    paths: Option<Vec<String>>,
    /// Let weir's bridge sleep between packets instead of busy-polling.
    #[arg(long)]
    no_busy_poll: bool,
    /// Seed of weir's random number generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
}

#[derive(clap::Args)]
struct ReportArgs {
    /// A result.json written by a `weir lab` command.
    result: PathBuf,
    /// Directory for the re-made outputs (default: the result's directory).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.cmd {
        LabCmd::Fidelity(f) => run_fidelity(f),
        LabCmd::Report(r) => report(r),
    }
}

fn run_fidelity(a: FidelityArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = if a.quick {
        FidelityConfig::quick()
    } else {
        FidelityConfig::paper()
    };
    if let Some(s) = a.sizes {
        cfg.sizes = s;
    }
    if let Some(r) = a.rates {
        cfg.rates = r;
    }
    if let Some(n) = a.repeats {
        cfg.repeats = n;
    }
    if let Some(t) = a.cell_time {
        cfg.cell_ms = (t.as_nanos() / 1_000_000).max(1);
    }
    if let Some(names) = a.paths {
        let all = fidelity::standard_paths();
        let mut chosen = Vec::new();
        for n in &names {
            match all.iter().find(|p| &p.name == n) {
                Some(p) => chosen.push(p.clone()),
                None => anyhow::bail!(
                    "--paths: unknown path '{n}'; expected some of {}",
                    all.iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        cfg.paths = chosen;
    }
    cfg.busy_poll = !a.no_busy_poll;
    cfg.seed = a.seed;
    cfg.validate()?;
    weir_lab::netns::require_root()?;
    let cells = cfg.paths.len() * cfg.sizes.len() * cfg.rates.len() * cfg.repeats as usize;
    eprintln!(
        "weir lab fidelity: {} paths x {} sizes x {} rates x {} repeats = {cells} cells of {} ms; outputs in {}",
        cfg.paths.len(),
        cfg.sizes.len(),
        cfg.rates.len(),
        cfg.repeats,
        cfg.cell_ms,
        a.out.display()
    );
    let r = fidelity::run(&cfg, |line| eprintln!("{line}"))?;
    finish(&r, &a.out, a.strict)
}

fn finish(r: &FidelityResult, out: &std::path::Path, strict: bool) -> anyhow::Result<ExitCode> {
    print!("{}", fidelity::tables(r));
    println!();
    print!("{}", fidelity::checks_text(r));
    let files = fidelity::write_outputs(r, out)?;
    eprintln!(
        "weir lab: wrote {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if strict && r.checks.iter().any(|c| !c.passed) {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

fn report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.result)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a JSON result: {e}", a.result.display()))?;
    let out = a.out.clone().unwrap_or_else(|| {
        a.result
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|| PathBuf::from("."))
    });
    match v.get("kind").and_then(|k| k.as_str()) {
        Some("fidelity") => {
            let mut r: FidelityResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            r.checks = fidelity::check(&r);
            finish(&r, &out, false)
        }
        Some(k) => anyhow::bail!("{}: unknown result kind '{k}'", a.result.display()),
        None => anyhow::bail!(
            "{}: no \"kind\" field: not a weir lab result",
            a.result.display()
        ),
    }
}
