//! `weir emu`: the netem-style one-liner — one emulated WAN link between two interfaces.
//!
//! The same engine as `weir run` (a device whose pipelines have only the emulation stage;
//! no shaping, no classification rules), from a policy made of the command-line options
//! (`Policy::emulation`) instead of a policy file.
//! Options accept exactly what a policy's `[[emulate]]` table accepts (shared parsers in
//! `weir_core::emulate::spec`); `--netem "…"` takes a tc-netem argument string instead
//! (`weir_core::emulate::netem_args`), reading `distribution` tables other than weir's own
//! from iproute2's `.dist` files.

use std::process::ExitCode;
use weir_core::emulate::table::DistTable;
use weir_core::emulate::{netem_args, spec, EmuConfig};
use weir_core::framing::{FramingError, FramingSpec};
use weir_core::policy::{Policy, Shapes};
use weir_core::units::{parse_duration, parse_limit, parse_rate, Limit};
use weir_core::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    bridge: crate::run::BridgeArgs,
    /// A tc-netem argument string as written for `tc qdisc add dev DEV root netem …`, e.g.
    /// "delay 100ms 10ms 25% distribution normal loss 0.1% 25% rate 10mbit" (a whole `tc
    /// qdisc … netem …` line works too); instead of the emulation options below.
    /// Distribution tables other than uniform, normal, pareto and paretonormal are read
    /// from NAME.dist in $TC_LIB_DIR, /usr/lib/tc, /usr/lib64/tc or
    /// /usr/lib/x86_64-linux-gnu/tc, or from the path given.
    #[arg(long, conflicts_with_all = ["rate", "rate_schedule", "trace", "overhead", "mpu",
        "atm", "ptm", "framing", "delay", "jitter", "reorder", "loss", "duplicate", "corrupt",
        "limit"])]
    netem: Option<String>,
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

/// Where `distribution NAME` finds `NAME.dist` (iproute2's `get_tc_lib`, and the
/// directories distributions install it in).
fn dist_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("TC_LIB_DIR") {
        dirs.push(d.into());
    }
    for d in [
        "/usr/lib/tc",
        "/usr/lib64/tc",
        "/usr/lib/x86_64-linux-gnu/tc",
    ] {
        dirs.push(d.into());
    }
    dirs
}

/// Read and parse the distribution table `name` (a path, or NAME.dist in
/// [`dist_dirs`]).
pub fn read_table(name: &str) -> Result<DistTable, String> {
    let candidates: Vec<std::path::PathBuf> = if name.contains('/') {
        vec![name.into()]
    } else {
        dist_dirs()
            .into_iter()
            .map(|d| d.join(format!("{name}.dist")))
            .collect()
    };
    for path in &candidates {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                return DistTable::parse(&path.display().to_string(), &text)
                    .map_err(|e| e.to_string())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
    Err(format!(
        "no distribution table '{name}': looked for {}",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The link `--netem` describes, with its seed if it gives one.
pub fn netem_config(args: &str, mtu: u32) -> anyhow::Result<(EmuConfig, Option<u64>)> {
    let n =
        netem_args::parse(args, &mut read_table).map_err(|e| anyhow::anyhow!("--netem: {e}"))?;
    let c = EmuConfig { mtu, ..n.cfg };
    c.validate().map_err(|e| anyhow::anyhow!("--netem: {e}"))?;
    Ok((c, n.seed))
}

/// The link the options describe, validated.
pub fn config(a: &Args) -> anyhow::Result<EmuConfig> {
    if let Some(n) = &a.netem {
        return Ok(netem_config(n, a.mtu)?.0);
    }
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
    // `seed N` inside --netem wins over --seed
    let seed = match &a.netem {
        Some(n) => netem_config(n, a.mtu)?.1.unwrap_or(a.seed),
        None => a.seed,
    };
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
        None => Policy::emulation(c.clone(), direction, seed),
        Some(q) => Policy::emulation_managed(c.clone(), direction, seed, q),
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
        seed
    );
    crate::run::bridge(
        &a.bridge,
        crate::run::Engine::One(Box::new(device)),
        seed,
        &what,
        None,
        false,
    )
}
