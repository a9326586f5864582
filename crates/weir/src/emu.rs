//! `weir emu`: the netem-style one-liner — one emulated WAN link between two interfaces.
//!
//! The same engine as `weir run` (a device whose pipelines have only the emulation stage;
//! no shaping, no classification rules), from a policy made of the command-line options
//! (`Policy::emulation`) instead of a policy file.
//! Options accept exactly what a policy's `[[emulate]]` table accepts (shared parsers in
//! `weir_core::emulate::spec`).

use std::process::ExitCode;
use weir_core::emulate::{spec, EmuConfig};
use weir_core::framing::{FramingError, FramingSpec};
use weir_core::policy::{Policy, Shapes};
use weir_core::units::{parse_duration, parse_limit, parse_rate, Limit};
use weir_core::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    bridge: crate::run::BridgeArgs,
    /// Link rate (e.g. 155Mbit); default: no rate limit (no serialisation, no queue).
    #[arg(long, conflicts_with_all = ["rate_schedule", "trace"])]
    rate: Option<String>,
    /// A rate that changes over time: TIME=RATE points from the first packet on, e.g.
    /// "0s=8Mbit,30s=2Mbit,60s=8Mbit" (the last rate holds).
    #[arg(long, conflicts_with = "trace")]
    rate_schedule: Option<String>,
    /// A Mahimahi delivery trace: one line per 1500-byte delivery opportunity, the
    /// millisecond it comes at (the trace repeats).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Bytes added to every frame for serialisation: 4 = FCS, 24 = FCS + preamble + IFG
    /// (over what --framing sets).
    #[arg(long, allow_hyphen_values = true)]
    overhead: Option<i32>,
    /// Minimum packet unit: a frame counts at least this many bytes (over --framing).
    #[arg(long)]
    mpu: Option<u32>,
    /// ATM cells: 48 bytes of each 53 carry data, the last cell padded.
    #[arg(long, conflicts_with = "ptm")]
    atm: bool,
    /// PTM (VDSL2) 64b/65b coding: one byte more per 64.
    #[arg(long)]
    ptm: bool,
    /// CAKE's link-layer keywords, e.g. "pppoe-ptm" or "bridged-ptm ether-vlan" (see
    /// docs/policy.md); --overhead, --mpu, --atm, --ptm override what they set.
    #[arg(long)]
    framing: Option<String>,
    /// One-way delay added to every packet (e.g. 125ms, 500us).
    #[arg(long, default_value = "0s")]
    delay: String,
    /// Jitter width: half-width for uniform, sigma for normal/pareto/paretonormal.
    #[arg(long)]
    jitter: Option<String>,
    /// Jitter distribution: uniform, normal, pareto, paretonormal.
    #[arg(long, default_value = "uniform", requires = "jitter")]
    distribution: String,
    /// Let jitter reorder packets (default: keep order).
    #[arg(long)]
    reorder: bool,
    /// Loss: "1%", "random 1%", "periodic 1%", "every 100", "gilbert P R",
    /// "gilbert-elliott P R K H".
    #[arg(long)]
    loss: Option<String>,
    /// Probability of duplicating a packet (e.g. 0.1%).
    #[arg(long)]
    duplicate: Option<String>,
    /// Probability of flipping one bit of a packet (e.g. 0.01%).
    #[arg(long)]
    corrupt: Option<String>,
    /// Queue limit before the serialiser: packets ("1000p") or bytes ("2MB"); default the
    /// bandwidth-delay product (rate and delay given) or 1000 packets (rate only).
    #[arg(long)]
    limit: Option<String>,
    /// Largest frame in bytes (sizes the default queue).
    #[arg(long, default_value_t = EmuConfig::DEFAULT_MTU)]
    mtu: u32,
    /// Which traffic to impair: outbound (LAN → WAN), inbound, or both (each its own link).
    #[arg(long, default_value = "outbound")]
    direction: String,
    /// Manage the bottleneck queue: fq_cobalt (flow queuing with sparse-flow priority,
    /// triple host isolation, COBALT and ECN: weir's default leaf), fq_codel (flow
    /// queuing, CoDel, ECN), cobalt or codel (one FIFO with that AQM and ECN), none (the
    /// emulator's drop-tail queue). Needs --rate; the queue then runs at the rate before
    /// the delay line, and --limit is its limit.
    #[arg(long, default_value = "none")]
    aqm: String,
    /// Seed of the random number generator (loss, jitter, duplication, corruption).
    #[arg(long, default_value_t = weir_core::policy::DEFAULT_SEED)]
    seed: u64,
}

fn opt<T>(name: &str, r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(|e| anyhow::anyhow!("--{name}: {e}"))
}

/// The link the options describe, validated.
pub fn config(a: &Args) -> anyhow::Result<EmuConfig> {
    let framing = FramingSpec {
        keywords: a.framing.as_deref(),
        overhead: a.overhead,
        mpu: a.mpu,
        atm: a.atm.then_some(true),
        ptm: a.ptm.then_some(true),
    };
    let mut c = EmuConfig {
        framing: framing.resolve().map_err(|e| {
            let option = match e {
                FramingError::UnknownKeyword(_) => "framing",
                FramingError::Mpu(_) => "mpu",
                _ => "overhead",
            };
            anyhow::anyhow!("--{option}: {e}")
        })?,
        mtu: a.mtu,
        reorder: a.reorder,
        ..EmuConfig::default()
    };
    if let Some(r) = &a.rate {
        c.rate_bps = Some(opt("rate", parse_rate(r).map_err(|e| e.to_string()))?);
    }
    if let Some(s) = &a.rate_schedule {
        c.capacity = Some(opt("rate-schedule", spec::parse_schedule(s))?);
    }
    if let Some(f) = &a.trace {
        let text = std::fs::read_to_string(f)
            .map_err(|e| anyhow::anyhow!("--trace: cannot read {}: {e}", f.display()))?;
        c.capacity = Some(
            weir_core::emulate::Capacity::parse_trace(&text)
                .map_err(|e| anyhow::anyhow!("--trace {}: {e}", f.display()))?,
        );
    }
    c.delay = Duration(opt(
        "delay",
        parse_duration(&a.delay).map_err(|e| e.to_string()),
    )?);
    if let Some(j) = &a.jitter {
        let ns = opt("jitter", parse_duration(j).map_err(|e| e.to_string()))?;
        c.jitter = opt("distribution", spec::parse_jitter(ns, &a.distribution))?;
    }
    if let Some(l) = &a.loss {
        c.loss = opt("loss", spec::parse_loss(l))?;
    }
    if let Some(d) = &a.duplicate {
        c.duplicate = opt("duplicate", spec::parse_prob(d))?;
    }
    if let Some(d) = &a.corrupt {
        c.corrupt = opt("corrupt", spec::parse_prob(d))?;
    }
    if let Some(l) = &a.limit {
        match opt("limit", parse_limit(l).map_err(|e| e.to_string()))? {
            Limit::Packets(n) => c.limit_packets = Some(n),
            Limit::Bytes(b) => c.limit_bytes = Some(b),
        }
    }
    c.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(c)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let c = config(&a)?;
    let direction = match a.direction.as_str() {
        "outbound" => Shapes::Outbound,
        "inbound" => Shapes::Inbound,
        "both" => Shapes::Both,
        other => anyhow::bail!("--direction: '{other}' is not one of outbound, inbound, both"),
    };
    use weir_core::aqm::AqmKind;
    use weir_core::policy::Technique;
    let managed = match a.aqm.as_str() {
        "none" => None,
        "fq_cobalt" => Some((Technique::FqCobalt, None)),
        "fq_codel" => Some((Technique::FqCodel, None)),
        "cobalt" => Some((Technique::FqCobalt, Some(AqmKind::Cobalt))),
        "codel" => Some((Technique::FqCobalt, Some(AqmKind::Codel))),
        other => {
            anyhow::bail!("--aqm: '{other}' is not one of fq_cobalt, fq_codel, cobalt, codel, none")
        }
    };
    let policy = match managed {
        None => Policy::emulation(c.clone(), direction, a.seed),
        Some(q) => Policy::emulation_managed(c.clone(), direction, a.seed, q),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let device = policy
        .build_device(weir_core::Instant::ZERO)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let queue = match managed {
        None => String::new(),
        Some(_) => format!(", bottleneck queue {}", a.aqm),
    };
    let what = format!(
        "an emulated link ({} {}{queue}; seed {})",
        a.direction,
        spec::describe(&c),
        a.seed
    );
    crate::run::bridge(&a.bridge, device, a.seed, &what, None, false)
}
