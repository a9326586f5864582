//! `weir emu set`: change a running `weir emu`'s links in place — `weir emu set --delay
//! 80ms` — as `tc qdisc change … netem delay 80ms` does, without losing a packet: the
//! packets already in the link keep their release times; the new values apply to the
//! next ones (the link's `EmuLink::reconfigure`).
//!
//! The options are `weir emu`'s own (same parsers, `weir_core::emulate::spec`) but for a
//! trace (a file: the running weir, root, does not read files for a socket client; restart
//! weir emu with another trace); only the ones given change, in the links of `--direction` (default: every emulated link). They
//! go as text through the statistics socket (the `emu-set` request, the same peers as
//! `weir reload`); the running weir applies them to each link's current configuration
//! with [`apply`] and answers what each link is now.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::emulate::{spec, EmuConfig, Jitter};
use weir_core::units::{parse_duration, parse_limit, parse_rate, Limit};
use weir_core::{Direction, Duration};

/// The options `weir emu set` takes; the same parse in the running weir ([`apply`]).
#[derive(clap::Args, Debug, Default, Clone)]
#[command(
    after_help = "Examples:\n  sudo weir emu set --delay 80ms\n  sudo weir emu set --direction inbound --rate 2Mbit --loss 1%"
)]
pub struct SetArgs {
    /// The running weir emu's statistics socket.
    #[arg(long, default_value = weir_io::stats::DEFAULT_PATH)]
    socket: PathBuf,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    change: Change,
}

/// What changes (sent to the running weir as options).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct Change {
    /// Which links: outbound, inbound, both (default: every emulated link).
    #[arg(long)]
    direction: Option<String>,
    /// New link rate (the rate schedule or trace it had ends).
    #[arg(long, conflicts_with = "rate_schedule")]
    rate: Option<String>,
    /// New rate schedule, "0s=8Mbit,30s=2Mbit" (from the next frame on).
    #[arg(long)]
    rate_schedule: Option<String>,
    /// New one-way delay (ends a delay schedule).
    #[arg(long)]
    delay: Option<String>,
    /// New jitter width ("0s" for none), in the distribution the link has unless
    /// --distribution is given.
    #[arg(long)]
    jitter: Option<String>,
    /// New jitter distribution: uniform, normal, pareto, paretonormal.
    #[arg(long)]
    distribution: Option<String>,
    /// New loss model ("none" for none; ends a loss schedule).
    #[arg(long, conflicts_with = "loss_schedule")]
    loss: Option<String>,
    /// New delay schedule, "0s=20ms,30s=80ms" (from the next frame on).
    #[arg(long, conflicts_with = "delay")]
    delay_schedule: Option<String>,
    /// New loss schedule, "0s=0%,10s=5%" (from the next frame on).
    #[arg(long)]
    loss_schedule: Option<String>,
    /// New outages, "10s-12s" from the next frame on ("none" for none).
    #[arg(long)]
    outage: Option<String>,
    /// New duplication probability.
    #[arg(long)]
    duplicate: Option<String>,
    /// New corruption probability.
    #[arg(long)]
    corrupt: Option<String>,
    /// New queue limit: packets ("1000p") or bytes ("2MB").
    #[arg(long)]
    limit: Option<String>,
}

/// The running weir's parser of the options it is sent.
#[derive(clap::Parser, Debug)]
#[command(name = "weir emu set", no_binary_name = true)]
struct Sent {
    #[command(flatten)]
    change: Change,
}

impl Change {
    /// The options as text, one word each (a trace by its full path: the running weir
    /// reads it from its own working directory).
    fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut put = |name: &str, value: &Option<String>| {
            if let Some(x) = value {
                v.push(format!("--{name}"));
                v.push(x.clone());
            }
        };
        put("direction", &self.direction);
        put("rate", &self.rate);
        put("rate-schedule", &self.rate_schedule);
        put("delay", &self.delay);
        put("jitter", &self.jitter);
        put("distribution", &self.distribution);
        put("loss", &self.loss);
        put("delay-schedule", &self.delay_schedule);
        put("loss-schedule", &self.loss_schedule);
        put("outage", &self.outage);
        put("duplicate", &self.duplicate);
        put("corrupt", &self.corrupt);
        put("limit", &self.limit);
        v
    }

    fn covers(&self, dir: Direction) -> Result<bool, String> {
        Ok(match self.direction.as_deref() {
            None | Some("both") => true,
            Some("outbound") => dir == Direction::Outbound,
            Some("inbound") => dir == Direction::Inbound,
            Some(other) => {
                return Err(format!(
                    "--direction: '{other}' is not one of outbound, inbound, both"
                ))
            }
        })
    }

    /// `cfg` with these changes, validated; `None` when they are not for `dir`.
    fn apply_to(&self, dir: Direction, cfg: &EmuConfig) -> Result<Option<EmuConfig>, String> {
        if !self.covers(dir)? {
            return Ok(None);
        }
        let mut c = cfg.clone();
        if let Some(r) = &self.rate {
            c.rate_bps = Some(parse_rate(r).map_err(|e| format!("--rate: {e}"))?);
            c.capacity = None;
            c.once = false;
        }
        if let Some(s) = &self.rate_schedule {
            c.capacity =
                Some(spec::parse_schedule(s).map_err(|e| format!("--rate-schedule: {e}"))?);
            c.rate_bps = None;
            c.once = false;
        }

        if let Some(d) = &self.delay {
            c.delay = Duration(parse_duration(d).map_err(|e| format!("--delay: {e}"))?);
            c.path.delay = None;
        }
        if let Some(s) = &self.delay_schedule {
            let points =
                spec::parse_delay_schedule(s).map_err(|e| format!("--delay-schedule: {e}"))?;
            c.path.delay = Some(std::sync::Arc::new(points));
        }
        if let Some(s) = &self.loss_schedule {
            let points =
                spec::parse_loss_schedule(s).map_err(|e| format!("--loss-schedule: {e}"))?;
            c.path.loss = Some(std::sync::Arc::new(points));
        }
        if let Some(s) = &self.outage {
            let o = match s.as_str() {
                "none" => Vec::new(),
                s => spec::parse_outages(s).map_err(|e| format!("--outage: {e}"))?,
            };
            c.path.outages = std::sync::Arc::new(o);
        }
        if self.jitter.is_some() || self.distribution.is_some() {
            c.jitter = self.jitter_for(&c.jitter)?;
        }
        if let Some(l) = &self.loss {
            c.loss = spec::parse_loss(l).map_err(|e| format!("--loss: {e}"))?;
            c.path.loss = None;
        }
        if let Some(p) = &self.duplicate {
            c.duplicate = spec::parse_prob(p).map_err(|e| format!("--duplicate: {e}"))?;
        }
        if let Some(p) = &self.corrupt {
            c.corrupt = spec::parse_prob(p).map_err(|e| format!("--corrupt: {e}"))?;
        }
        if let Some(l) = &self.limit {
            let (p, b) = match parse_limit(l).map_err(|e| format!("--limit: {e}"))? {
                Limit::Packets(n) => (Some(n), None),
                Limit::Bytes(b) => (None, Some(b)),
            };
            c.limit_packets = p;
            c.limit_bytes = b;
        }
        c.validate().map_err(|e| e.to_string())?;
        Ok(Some(c))
    }

    /// The jitter the options ask for, from the link's `current` one: a new width keeps
    /// the distribution (a table too) unless one is named; a distribution alone keeps the
    /// width.
    fn jitter_for(&self, current: &Jitter) -> Result<Jitter, String> {
        let width = match &self.jitter {
            Some(j) => parse_duration(j).map_err(|e| format!("--jitter: {e}"))?,
            None => match current {
                Jitter::None => {
                    return Err("--distribution: the link has no jitter: give --jitter".into())
                }
                Jitter::Uniform { half_width } => *half_width,
                Jitter::Normal { sigma }
                | Jitter::ParetoNormal { sigma }
                | Jitter::Table { sigma, .. } => *sigma,
                // netem's pareto: scale 4σ/3
                Jitter::Pareto { scale, .. } => scale * 3 / 4,
            },
        };
        if width == 0 {
            return Ok(Jitter::None);
        }
        let kind = match (&self.distribution, current) {
            (Some(d), _) => d.as_str(),
            (None, Jitter::Table { table, .. }) => {
                return Ok(Jitter::Table {
                    sigma: width,
                    table: table.clone(),
                })
            }
            (None, Jitter::Normal { .. }) => "normal",
            (None, Jitter::Pareto { .. }) => "pareto",
            (None, Jitter::ParetoNormal { .. }) => "paretonormal",
            (None, Jitter::Uniform { .. } | Jitter::None) => "uniform",
        };
        spec::parse_jitter(width, kind).map_err(|e| format!("--distribution: {e}"))
    }
}

/// In the running weir: `dir`'s link configuration `cfg` changed by the options `args`
/// (as [`Change::to_args`] wrote them).
pub fn apply(
    dir: Direction,
    cfg: &EmuConfig,
    args: &[String],
) -> Result<Option<EmuConfig>, String> {
    use clap::Parser;
    let sent = Sent::try_parse_from(args).map_err(|e| e.to_string().trim().to_string())?;
    sent.change.apply_to(dir, cfg)
}

/// `weir emu set`: check the options, send them, print the answer.
pub fn run(a: SetArgs) -> anyhow::Result<ExitCode> {
    let args = a.change.to_args();
    // one option or value a line on the socket
    if let Some(bad) = args.iter().find(|a| a.contains('\n')) {
        anyhow::bail!("weir emu set: a value with a line break: {bad:?}");
    }
    if args.len() <= 2 * usize::from(a.change.direction.is_some()) {
        anyhow::bail!(
            "weir emu set: nothing to change; give --delay, --rate, --loss, … (see --help)"
        );
    }
    // the values are checked against each link by the running weir, which answers
    a.change
        .covers(Direction::Outbound)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let answer = weir_io::stats::request_emu_set(&a.socket, &args)?;
    crate::reload::print_answer(
        &answer,
        a.json,
        "weir emu set: refused; the links stay as they were",
        |v| v["summary"].as_str().unwrap_or("").to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(args: &[&str]) -> Change {
        use clap::Parser;
        Sent::try_parse_from(args).unwrap().change
    }

    /// Only what is given changes; the round trip through text is the identity; a new
    /// jitter width keeps the distribution; the direction filter.
    #[test]
    fn options_change_only_what_they_name() {
        let cfg = EmuConfig {
            rate_bps: Some(10_000_000),
            delay: Duration::from_millis(40),
            jitter: Jitter::Normal { sigma: 2_000_000 },
            ..EmuConfig::default()
        };
        let c = change(&["--delay", "80ms", "--jitter", "5ms"]);
        let args = c.to_args();
        assert_eq!(args, vec!["--delay", "80ms", "--jitter", "5ms"]);
        let new = apply(Direction::Inbound, &cfg, &args).unwrap().unwrap();
        assert_eq!(new.delay, Duration::from_millis(80));
        assert_eq!(new.jitter, Jitter::Normal { sigma: 5_000_000 });
        assert_eq!(new.rate_bps, Some(10_000_000), "the rate stays");
        let only_out = change(&["--direction", "outbound", "--loss", "1%"]).to_args();
        assert!(apply(Direction::Inbound, &cfg, &only_out)
            .unwrap()
            .is_none());
        let out = apply(Direction::Outbound, &cfg, &only_out)
            .unwrap()
            .unwrap();
        assert_ne!(out.loss, cfg.loss);
        let dist = apply(
            Direction::Outbound,
            &cfg,
            &change(&["--distribution", "uniform"]).to_args(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            dist.jitter,
            Jitter::Uniform {
                half_width: 2_000_000
            }
        );
        let none = apply(
            Direction::Outbound,
            &cfg,
            &change(&["--jitter", "0s"]).to_args(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(none.jitter, Jitter::None);
    }

    #[test]
    fn bad_options_say_which() {
        let cfg = EmuConfig::default();
        let e = |a: &[&str]| apply(Direction::Outbound, &cfg, &change(a).to_args()).unwrap_err();
        assert!(e(&["--delay", "soon"]).starts_with("--delay:"));
        assert!(e(&["--loss", "often"]).starts_with("--loss:"));
        assert!(e(&["--direction", "up", "--delay", "1ms"]).contains("'up' is not one of"));
        assert!(e(&["--distribution", "normal"]).contains("no jitter"));
        assert!(apply(Direction::Outbound, &cfg, &["--bogus".into()])
            .unwrap_err()
            .contains("--bogus"));
    }
}
