//! `weir mm-graph`: the summary and the graphs of a Mahimahi mm-link log, as Mahimahi's
//! `mm-throughput-graph` and `mm-delay-graph` make them (`weir_lab::mmlog`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use weir_lab::mmlog::{self, MmBin, MmLog, DEFAULT_MS_PER_BIN};

#[derive(clap::Args)]
pub struct Args {
    /// The log: what Mahimahi's mm-link writes with --uplink-log/--downlink-log, or
    /// `weir emu` with the same options.
    log: PathBuf,
    /// Width of the throughput graph's bins, ms (mm-throughput-graph's MS_PER_BIN).
    #[arg(long, default_value_t = DEFAULT_MS_PER_BIN,
          value_parser = clap::value_parser!(u64).range(1..))]
    ms_per_bin: u64,
    /// Write the throughput graph here (SVG): capacity shaded, ingress and egress per bin.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Write the delay graph here (SVG): signal delay shaded, each packet's delay as a dot.
    #[arg(long, value_name = "FILE")]
    delay_svg: Option<PathBuf>,
    /// Print the summary, the header and the bins as JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let name = a.log.display().to_string();
    let bytes = std::fs::read(&a.log).with_context(|| format!("{name}: cannot read"))?;
    let log = mmlog::parse(&name, &String::from_utf8_lossy(&bytes)).map_err(anyhow::Error::msg)?;
    let summary = log.summary();
    let bins = if a.svg.is_some() || a.json {
        log.bins(a.ms_per_bin)
            .map_err(|e| anyhow::anyhow!("{name}: --ms-per-bin: {e}"))?
    } else {
        Vec::new()
    };
    if let Some(f) = &a.svg {
        if bins.len() < 2 {
            weir_io::log::warning(&format!(
                "{name}: the throughput graph has {} bin{}: --ms-per-bin {} is as long as the log",
                bins.len(),
                if bins.len() == 1 { "" } else { "s" },
                a.ms_per_bin
            ));
        }
        write(f, &mmlog::throughput_svg(&log, &summary, &bins))?;
    }
    if let Some(f) = &a.delay_svg {
        write(f, &mmlog::delay_svg(&log, &summary))?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&log, &summary, a.ms_per_bin, &bins))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let span = summary.duration_s.map_or("no events".into(), |d| {
        format!("{} events over {d:.3} s", log.events.len())
    });
    println!(
        "{name}: {span}; queue {}",
        log.queue.as_deref().unwrap_or("not given")
    );
    println!("{summary}");
    for (what, f) in [("throughput graph", &a.svg), ("delay graph", &a.delay_svg)] {
        if let Some(f) = f {
            println!("{what}: {}", f.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("{}: cannot write", path.display()))
}

fn json(log: &MmLog, s: &mmlog::MmSummary, ms_per_bin: u64, bins: &[MmBin]) -> serde_json::Value {
    serde_json::json!({
        "log": log.name,
        "base_timestamp": log.base_timestamp,
        "init_timestamp": log.init_timestamp,
        "queue": log.queue,
        "command_line": log.command_line,
        "events": log.events.len(),
        "summary": s,
        "ms_per_bin": ms_per_bin,
        "bins": bins,
    })
}
