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
    /// Seed 000's Basic Test: 4 TCP sessions per class of the policy (default: the T1
    /// split into 20/40/128/256/1100 kbit/s classes); accuracy, fairness, Jain's index and
    /// retransmissions (Table 4) for one or more DUTs side by side.
    Basic(BasicArgs),
    /// Re-make the tables, plots and HTML report of a result file.
    Report(ReportArgs),
}

#[derive(clap::Args)]
struct BasicArgs {
    /// The policy every DUT enforces (default: the embedded examples/basic-test.toml).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// A device under test: weir:cbq, weir:cbq+red, weir:cbq+pfq, weir:cbq+pfq+red,
    /// kernel:htb, kernel:htb-perflow, cmd:SCRIPT. Repeat or comma-separate for several.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// Compare weir:cbq, weir:cbq+pfq, weir:cbq+pfq+red, kernel:htb and kernel:htb-perflow
    /// (plus any --dut) side by side.
    #[arg(long)]
    compare: bool,
    /// CI-sized: 2 runs of 45 s, analysis window 10-40 s.
    #[arg(long)]
    quick: bool,
    /// Runs per DUT (paper: 5).
    #[arg(long)]
    runs: Option<u32>,
    /// Length of a run (paper: 250s).
    #[arg(long, value_parser = crate::sim::dur)]
    duration: Option<weir_core::Duration>,
    /// Analysis window FROM-TO in seconds (paper: 30-230).
    #[arg(long)]
    window: Option<String>,
    /// Congestion control of every sender: reno (the paper's), cubic, bbr.
    #[arg(long, default_value = "reno")]
    cc: String,
    /// weir DUTs busy-poll (more precise timing, one busy core).
    #[arg(long)]
    busy_poll: bool,
    /// Directory for result.json, table.txt/csv, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-basic")]
    out: PathBuf,
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
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
    // the agents write to sockets whose peer may be gone: an error, not a signal
    // SAFETY: changing a signal disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Ctrl-C / SIGTERM: the run stops at its next step and removes what it made
    weir_io::signals::install();
    match a.cmd {
        LabCmd::Fidelity(f) => run_fidelity(f),
        LabCmd::Basic(b) => run_basic(b),
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
        Some("basic") => {
            let mut r: weir_lab::basic::BasicResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            weir_lab::basic::finish(&mut r)?;
            finish_basic(&r, &out, false)
        }
        Some(k) => anyhow::bail!("{}: unknown result kind '{k}'", a.result.display()),
        None => anyhow::bail!(
            "{}: no \"kind\" field: not a weir lab result",
            a.result.display()
        ),
    }
}

fn run_basic(a: BasicArgs) -> anyhow::Result<ExitCode> {
    use weir_lab::basic::{self, BasicConfig};
    let mut c = if a.quick {
        BasicConfig::quick()
    } else {
        BasicConfig::paper()
    };
    let mut duts: Vec<String> = Vec::new();
    if a.compare {
        for d in [
            "weir:cbq",
            "weir:cbq+pfq",
            "weir:cbq+pfq+red",
            "kernel:htb",
            "kernel:htb-perflow",
        ] {
            duts.push(d.into());
        }
    }
    for d in a.dut {
        weir_lab::dut::DutSpec::parse(&d)?;
        if !duts.contains(&d) {
            duts.push(d);
        }
    }
    if !duts.is_empty() {
        c.duts = duts;
    }
    if let Some(r) = a.runs {
        anyhow::ensure!(r > 0, "--runs: must be at least 1");
        c.runs = r;
    }
    if let Some(d) = a.duration {
        c.duration_s = d.as_secs_f64();
        if a.window.is_none() {
            // keep the paper's proportions: skip the first 12 %, stop 8 % before the end
            c.window_s = (c.duration_s * 0.12, c.duration_s * 0.92);
        }
    }
    if let Some(w) = &a.window {
        let (x, y) = w
            .split_once('-')
            .ok_or_else(|| anyhow::anyhow!("--window: expected FROM-TO in seconds, e.g. 30-230"))?;
        let p = |t: &str| {
            t.trim()
                .trim_end_matches('s')
                .parse::<f64>()
                .map_err(|_| anyhow::anyhow!("--window: '{t}' is not a number of seconds"))
        };
        c.window_s = (p(x)?, p(y)?);
    }
    c.cc = a.cc;
    c.busy_poll = a.busy_poll;
    let (file, text) = match &a.policy {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => (
            crate::DEFAULT_POLICY.0.to_string(),
            crate::DEFAULT_POLICY.1.to_string(),
        ),
    };
    // refuse a bad plan (policy, addressing, window) before asking for root
    let plan = basic::plan(&file, &text, &c)?;
    weir_lab::netns::require_root()?;
    let total = c.duts.len() as f64 * c.runs as f64 * (c.duration_s + 3.0);
    eprintln!(
        "weir lab basic: {} sessions, {} DUT(s) x {} run(s) of {} s (about {:.0} min); outputs in {}",
        plan.sessions.len(),
        c.duts.len(),
        c.runs,
        c.duration_s,
        total / 60.0,
        a.out.display()
    );
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |line: &str| {
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if line.ends_with(" s")
            && (line.contains(": 0/") || line.contains(&format!("{:.0}/", c.duration_s)))
        {
            eprintln!("{line}");
        }
    };
    let r = basic::run(&file, &text, &c, &mut progress)?;
    if tty {
        eprintln!();
    }
    finish_basic(&r, &a.out, a.strict)
}

fn finish_basic(
    r: &weir_lab::basic::BasicResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", weir_lab::basic::text(r));
    let files = weir_lab::basic::write_outputs(r, out)?;
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
