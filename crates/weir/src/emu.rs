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

#[derive(clap::Args, Clone)]
pub struct Args {
    #[command(subcommand)]
    cmd: Option<EmuCmd>,
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
        "limit", "delay_schedule", "loss_schedule", "outage", "delay_trace", "loss_trace"])]
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
    /// A delay that changes over time: TIME=DELAY points from the link's first frame,
    /// e.g. "0s=20ms,30s=80ms" (a handover; with --reorder the frames after a step down
    /// overtake those in flight). Instead of --delay.
    #[arg(long, conflicts_with = "delay")]
    delay_schedule: Option<String>,
    /// A delay trace file: one "TIME DELAY" line per step from the link's first frame,
    /// bare numbers in ms (a ping log's two columns: "0 20.5"); instead of --delay.
    /// SIGHUP reads it again.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["delay", "delay_schedule"])]
    delay_trace: Option<std::path::PathBuf>,
    /// A loss trace file: one "TIME LOSS" line per step ("10s random 5%"); instead of
    /// --loss. SIGHUP reads it again.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["loss", "loss_schedule"])]
    loss_trace: Option<std::path::PathBuf>,
    /// Loss that changes over time: TIME=LOSS points, e.g. "0s=0%,10s=random 5%".
    /// Instead of --loss.
    #[arg(long, conflicts_with = "loss")]
    loss_schedule: Option<String>,
    /// Times the link is down, from its first frame: "10s-12s,30s-30.5s". Nothing is
    /// sent then; frames wait in the queue (its limit drops the rest).
    #[arg(long)]
    outage: Option<String>,
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
    /// Which traffic to impair: outbound (LAN → WAN; the default), inbound, or both (each
    /// its own link). Not with the per-direction options below (they emulate both).
    #[arg(long)]
    direction: Option<String>,
    /// Mahimahi (`mm-link UP DOWN`): the uplink's delivery trace — outbound, LAN → WAN —
    /// instead of --rate/--trace for that direction. Any of the --up*, --down*,
    /// --uplink-*, --downlink-* options makes two links, one each way, from the other
    /// options plus their own.
    #[arg(long, value_name = "TRACE", conflicts_with = "up_rate")]
    up: Option<std::path::PathBuf>,
    /// The downlink's delivery trace (inbound, WAN → LAN).
    #[arg(long, value_name = "TRACE", conflicts_with = "down_rate")]
    down: Option<std::path::PathBuf>,
    /// The uplink's fixed rate (outbound), e.g. 2Mbit.
    #[arg(long, value_name = "RATE")]
    up_rate: Option<String>,
    /// The downlink's fixed rate (inbound), e.g. 20Mbit.
    #[arg(long, value_name = "RATE")]
    down_rate: Option<String>,
    /// Play the traces once (`mm-link --once`): weir stops when a trace ends.
    #[arg(long)]
    once: bool,
    /// `mm-link`'s uplink queue: infinite, droptail or drophead (with
    /// --uplink-queue-args "packets=N" and/or "bytes=N").
    #[arg(long, value_name = "TYPE")]
    uplink_queue: Option<String>,
    /// Arguments of --uplink-queue: "packets=N, bytes=N".
    #[arg(
        long,
        value_name = "ARGS",
        default_value = "",
        requires = "uplink_queue"
    )]
    uplink_queue_args: String,
    /// `mm-link`'s downlink queue (as --uplink-queue).
    #[arg(long, value_name = "TYPE")]
    downlink_queue: Option<String>,
    /// Arguments of --downlink-queue.
    #[arg(
        long,
        value_name = "ARGS",
        default_value = "",
        requires = "downlink_queue"
    )]
    downlink_queue_args: String,
    /// Write the uplink's per-packet log in `mm-link`'s format (`weir mm-graph`,
    /// `mm-throughput-graph` and `mm-delay-graph` read it).
    #[arg(long, value_name = "FILE")]
    uplink_log: Option<std::path::PathBuf>,
    /// Write the downlink's per-packet log in `mm-link`'s format.
    #[arg(long, value_name = "FILE")]
    downlink_log: Option<std::path::PathBuf>,
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

#[derive(clap::Subcommand, Clone)]
enum EmuCmd {
    /// Change a running weir emu's links in place (their packets kept): the options
    /// given, in the links of --direction (default: all).
    Set(crate::emu_set::SetArgs),
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
        c.capacity = Some(read_trace("--trace", f)?);
    }
    // --once is about traces (a direction with a rate plays nothing): checked in `run`
    c.once = a.once && matches!(c.capacity, Some(weir_core::emulate::Capacity::Trace(_)));
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
    use std::sync::Arc;
    if let Some(s) = &a.delay_schedule {
        c.path.delay = Some(Arc::new(opt(
            "delay-schedule",
            spec::parse_delay_schedule(s),
        )?));
    }
    if let Some(s) = &a.loss_schedule {
        c.path.loss = Some(Arc::new(opt(
            "loss-schedule",
            spec::parse_loss_schedule(s),
        )?));
    }
    if let Some(f) = &a.delay_trace {
        let p = read_file("--delay-trace", f, spec::parse_delay_trace)?;
        c.path.delay = Some(Arc::new(p));
    }
    if let Some(f) = &a.loss_trace {
        let p = read_file("--loss-trace", f, spec::parse_loss_trace)?;
        c.path.loss = Some(Arc::new(p));
    }
    if let Some(s) = &a.outage {
        c.path.outages = Arc::new(opt("outage", spec::parse_outages(s))?);
    }
    c.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(c)
}

/// A file an option names, read and parsed (errors name the option, the file and line).
fn read_file<T>(
    option: &str,
    f: &std::path::Path,
    parse: impl Fn(&str) -> Result<T, String>,
) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(f)
        .map_err(|e| anyhow::anyhow!("{option}: cannot read {}: {e}", f.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("{option} {}: {e}", f.display()))
}

/// A Mahimahi trace file, read and checked.
fn read_trace(option: &str, f: &std::path::Path) -> anyhow::Result<weir_core::emulate::Capacity> {
    read_file(option, f, weir_core::emulate::Capacity::parse_trace)
}

/// Whether any per-direction option is given (two links, one each way).
fn per_direction(a: &Args) -> bool {
    a.up.is_some()
        || a.down.is_some()
        || a.up_rate.is_some()
        || a.down_rate.is_some()
        || a.uplink_queue.is_some()
        || a.downlink_queue.is_some()
        || a.uplink_log.is_some()
        || a.downlink_log.is_some()
}

/// One direction's link: the common link `c` with that direction's capacity and queue.
fn direction_config(
    c: &EmuConfig,
    (up, once): (bool, bool),
    (trace, rate): (&Option<std::path::PathBuf>, &Option<String>),
    (queue, args): (&Option<String>, &str),
) -> anyhow::Result<EmuConfig> {
    let (name, qname) = if up {
        ("up", "uplink-queue")
    } else {
        ("down", "downlink-queue")
    };
    let mut d = c.clone();
    if let Some(f) = trace {
        d.rate_bps = None;
        d.capacity = Some(read_trace(&format!("--{name}"), f)?);
    }
    if let Some(r) = rate {
        d.capacity = None;
        d.rate_bps = Some(opt(
            &format!("{name}-rate"),
            parse_rate(r).map_err(|e| e.to_string()),
        )?);
    }
    if let Some(q) = queue {
        opt(qname, spec::apply_mm_queue(&mut d, q, args))?;
        if d.sizing_bps().is_none() {
            anyhow::bail!("--{qname}: the {name}link has no rate, so nothing waits in a queue: give --{name}, --{name}-rate, --rate or --trace");
        }
    }
    d.once = once && matches!(d.capacity, Some(weir_core::emulate::Capacity::Trace(_)));
    d.validate()
        .map_err(|e| anyhow::anyhow!("the {name}link: {e}"))?;
    Ok(d)
}

/// What a link's log header names as its source: its trace file, its rate schedule or
/// its rate.
fn log_source(trace: Option<&std::path::PathBuf>, c: &EmuConfig) -> String {
    use weir_core::emulate::Capacity;
    match (&c.capacity, c.rate_bps) {
        (Some(Capacity::Trace(_)), _) => trace.map_or("trace".into(), |t| t.display().to_string()),
        (Some(Capacity::Schedule(_)), _) => "rate schedule".into(),
        (None, Some(r)) => format!("rate {}", weir_core::units::fmt_rate(r)),
        (None, None) => "no rate".into(),
    }
}

/// What the options make: the policy, the configuration of each link, and the start-up
/// line describing it.
struct Built {
    policy: Policy,
    /// The one link's configuration (without the per-direction options).
    c: EmuConfig,
    /// The uplink's and the downlink's (with them).
    pair_cfgs: Option<(EmuConfig, EmuConfig)>,
    seed: u64,
    what: String,
}

/// The policy the options describe, every file they name read (again, on SIGHUP).
fn build(a: &Args) -> anyhow::Result<Built> {
    let c = config(a)?;
    // `seed N` inside --netem wins over --seed
    let seed = match &a.netem {
        Some(n) => netem_config(n, a.mtu)?.1.unwrap_or(a.seed),
        None => a.seed,
    };
    let pair = per_direction(a);
    if pair {
        if let Some(d) = &a.direction {
            anyhow::bail!("--direction {d}: the per-direction options (--up, --down, --up-rate, --down-rate, --uplink-*, --downlink-*) emulate both directions, each its own link");
        }
        if a.aqm != "none" {
            anyhow::bail!("--aqm: a managed queue takes one --rate for the link; with --up/--down use --uplink-queue/--downlink-queue (droptail, drophead)");
        }
        if a.netem.is_some() {
            anyhow::bail!("--netem: one netem link; not with the per-direction options");
        }
    } else if a.once && !matches!(c.capacity, Some(weir_core::emulate::Capacity::Trace(_))) {
        anyhow::bail!("--once plays a delivery trace once: give --trace, --up or --down");
    }
    let direction = match a.direction.as_deref().unwrap_or("outbound") {
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
    if managed.is_some() && !c.path.outages.is_empty() {
        anyhow::bail!("--outage with --aqm: the rate is the managed queue's, so the emulator would hold an outage's frames without a limit; use --aqm none");
    }
    let pair_cfgs = if pair {
        let up = direction_config(
            &c,
            (true, a.once),
            (&a.up, &a.up_rate),
            (&a.uplink_queue, &a.uplink_queue_args),
        )?;
        let down = direction_config(
            &c,
            (false, a.once),
            (&a.down, &a.down_rate),
            (&a.downlink_queue, &a.downlink_queue_args),
        )?;
        if a.once && !up.once && !down.once {
            anyhow::bail!("--once plays a delivery trace once: give --trace, --up or --down");
        }
        Some((up, down))
    } else {
        None
    };
    let policy = match (&pair_cfgs, managed) {
        (Some((up, down)), _) => Policy::emulation_pair(up.clone(), down.clone(), seed),
        (None, None) => Policy::emulation(c.clone(), direction, seed),
        (None, Some(q)) => Policy::emulation_managed(c.clone(), direction, seed, q),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let queue = match managed {
        None => String::new(),
        Some(_) => format!(", bottleneck queue {}", a.aqm),
    };
    let what = match &pair_cfgs {
        Some((up, down)) => format!(
            "two emulated links (uplink {}; downlink {}; seed {seed})",
            spec::describe(up),
            spec::describe(down),
        ),
        None => format!(
            "an emulated link ({} {}{queue}; seed {})",
            a.direction.as_deref().unwrap_or("outbound"),
            spec::describe(&c),
            seed
        ),
    };
    Ok(Built {
        policy,
        c,
        pair_cfgs,
        seed,
        what,
    })
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if let Some(EmuCmd::Set(s)) = a.cmd {
        return crate::emu_set::run(s);
    }
    let Built {
        policy,
        c,
        pair_cfgs,
        seed,
        what,
    } = build(&a)?;
    // mm-link's logs: a log of a direction weir does not emulate is refused by the bridge
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let mut link_logs = Vec::new();
    for (path, dir, trace, cfg) in [
        (
            &a.uplink_log,
            weir_core::Direction::Outbound,
            a.up.as_ref().or(a.trace.as_ref()),
            pair_cfgs.as_ref().map(|p| &p.0),
        ),
        (
            &a.downlink_log,
            weir_core::Direction::Inbound,
            a.down.as_ref().or(a.trace.as_ref()),
            pair_cfgs.as_ref().map(|p| &p.1),
        ),
    ] {
        if let Some(path) = path {
            link_logs.push(weir_io::bridge::LinkLogSpec {
                dir,
                path: path.clone(),
                source: log_source(trace, cfg.unwrap_or(&c)),
                command_line: command_line.clone(),
            });
        }
    }
    let device = policy
        .build_device(weir_core::Instant::ZERO)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // SIGHUP: the options again, with the files they name read again (an edited trace)
    let again = a.clone();
    let reload =
        weir_io::control::ReloadSource::new("weir emu's options and files", move |shards| {
            let b = build(&again).map_err(|e| e.to_string())?;
            let now = weir_core::Instant(weir_io::clock::monotonic_ns());
            weir_io::control::ready(&b.policy, shards, now)
        });
    crate::run::bridge(
        &a.bridge,
        crate::run::Engine::One(Box::new(device)),
        seed,
        &what,
        Some(reload),
        false,
        crate::run::EmuExtras {
            link_logs,
            stop_when_played: a.once,
            set: true,
        },
    )
}
