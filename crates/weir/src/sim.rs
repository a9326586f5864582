//! `weir sim [POLICY]`: the policy on the virtual clock with synthetic sessions.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::units::{fmt_rate, parse_duration};
use weir_core::whatif::{self, Idle, WhatIf};
use weir_core::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML); the embedded Basic Test policy when omitted.
    policy: Option<PathBuf>,
    /// Simulated time, e.g. 10s (the warm-up included).
    #[arg(long, default_value = "22s", value_parser = positive_dur)]
    duration: Duration,
    /// Measurement starts after this much simulated time: the token buckets start full,
    /// and the bursts they allow are not the steady state (0s to count them).
    #[arg(long, default_value = "2s", value_parser = dur)]
    warmup: Duration,
    /// Always-backlogged sessions per leaf class.
    #[arg(long, default_value_t = 4)]
    flows: u32,
    /// Frame size in bytes (default: the policy's mtu).
    #[arg(long)]
    size: Option<u32>,
    /// Packets each session keeps queued: one value, or a comma list cycled over the
    /// sessions of a class (unequal windows show what per-flow queuing fixes).
    #[arg(long, default_value = "8", value_delimiter = ',')]
    window: Vec<u32>,
    /// Silence a class or a session for a while: CLASS@FROM-TO or CLASS#K@FROM-TO
    /// (repeatable), e.g. --idle b@5s-10s.
    #[arg(long, value_parser = Idle::parse)]
    idle: Vec<Idle>,
    /// Override the technique preset (cbq, cbq+red, cbq+pfq, cbq+pfq+red, tcr, cbq+tcr, cbq+pfq+tcr).
    #[arg(long)]
    technique: Option<String>,
    /// Print per-interval delivered rates of every class (e.g. 1s).
    #[arg(long, value_parser = positive_dur)]
    series: Option<Duration>,
    /// Seed for flow hashes and RED.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map(Duration).map_err(|e| e.to_string())
}

fn positive_dur(s: &str) -> Result<Duration, String> {
    match dur(s)? {
        Duration(0) => Err("must be longer than 0s".into()),
        d => Ok(d),
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let p = match crate::load_policy(a.policy.as_deref(), a.technique.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let w = WhatIf {
        duration: a.duration,
        warmup: a.warmup,
        flows: a.flows,
        size: a.size.unwrap_or(p.mtu),
        windows: a.window,
        idle: a.idle,
        seed: a.seed,
        interval: a.series.unwrap_or(Duration::ZERO),
    };
    let r = whatif::run(&p, &w).map_err(|e| anyhow::anyhow!(e))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let src = a
        .policy
        .as_ref()
        .map_or(crate::DEFAULT_POLICY.0.to_string(), |p| {
            p.display().to_string()
        });
    let warm = if a.warmup == Duration::ZERO {
        " from 0s (the classes' initial bursts included)".to_string()
    } else {
        format!(
            " after a {:.1}s warm-up (the classes' initial bursts excluded)",
            a.warmup.as_secs_f64()
        )
    };
    println!(
        "{src}: technique {}, link {}, {} session{} per leaf class of {}-byte frames, {:.1}s measured{warm}",
        r.technique,
        fmt_rate(r.link_bps),
        r.flows_per_class,
        if r.flows_per_class == 1 { "" } else { "s" },
        r.frame_bytes,
        r.measured_s
    );
    println!(
        "{:<20} {:>10} {:>10} {:>12} {:>8} {:>7}  sessions (kbit/s)",
        "class", "rate", "ceil", "delivered", "of rate", "jain"
    );
    for c in &r.classes {
        let sessions: Vec<String> = c
            .sessions_bps
            .iter()
            .map(|b| format!("{:.1}", b / 1e3))
            .collect();
        println!(
            "{:<20} {:>10} {:>10} {:>12} {:>7.1}% {:>7}  {}",
            c.name,
            fmt_rate(c.rate_bps),
            fmt_rate(c.ceil_bps),
            format!("{:.1}k", c.delivered_bps / 1e3),
            100.0 * c.delivered_bps / c.rate_bps as f64,
            c.jain.map_or("-".into(), |j| format!("{j:.4}")),
            sessions.join(" ")
        );
    }
    println!("link utilisation {:.2}%", 100.0 * r.utilisation);
    if a.series.is_some() {
        println!("\ndelivered kbit/s per interval:");
        for c in &r.classes {
            let xs: Vec<String> = c
                .series_bps
                .iter()
                .map(|b| format!("{:.0}", b / 1e3))
                .collect();
            println!("{:<20} {}", c.name, xs.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
