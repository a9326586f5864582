//! `weir run`: shape real traffic as a transparent bridge between two interfaces.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::device::Device;
use weir_core::units::parse_size;
use weir_core::{Direction, Instant};
use weir_io::bridge::{Bridge, BridgeConfig, PcapSpec, Workers, WorkersConfig};
use weir_io::log;
use weir_io::pcap::PcapWriter;

/// Options every bridging command shares (`weir run`, `weir emu`).
#[derive(clap::Args, Clone)]
pub struct BridgeArgs {
    /// The LAN-side interface (outbound traffic enters here).
    /// (Required; an `Option` so that `weir emu set`, which names no interfaces, parses.)
    #[arg(long, required = true, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    lan: Option<String>,
    /// The WAN-side interface (outbound traffic leaves here).
    #[arg(long, required = true, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    wan: Option<String>,
    /// Spin instead of sleeping between packets: more precise timing, one busy core.
    #[arg(long)]
    pub busy_poll: bool,
    /// How far back a late timer wake-up is made up: departures the engine scheduled
    /// while weir overslept leave at once (0s: never; see docs/live.md).
    #[arg(long, value_parser = crate::sim::dur, default_value = "20ms")]
    pub catch_up: weir_core::Duration,
    /// Write what leaves weir in both directions to this pcap file (ns timestamps).
    #[arg(long, conflicts_with_all = ["pcap_out", "pcap_in"])]
    pub pcap: Option<PathBuf>,
    /// Write what leaves towards the WAN to this pcap file.
    #[arg(long)]
    pub pcap_out: Option<PathBuf>,
    /// Write what leaves towards the LAN to this pcap file.
    #[arg(long)]
    pub pcap_in: Option<PathBuf>,
    /// Stop writing a capture file at this size (e.g. 100MB).
    #[arg(long, default_value = "1GB")]
    pub pcap_limit: String,
    /// Bytes of each frame to capture.
    #[arg(long, default_value_t = 65535)]
    pub snaplen: u32,
    /// Unix socket where `weir stats` reads counters (root and weir's own user; see --socket-group).
    #[arg(long, default_value = "/run/weir/weir.sock")]
    pub stats_socket: PathBuf,
    /// A group (name or number) whose members may read the statistics socket and reload
    /// the policy, besides root and the user weir runs as (the socket becomes 0660).
    #[arg(long, value_parser = group_id)]
    pub socket_group: Option<u32>,
    /// Leave GRO and LRO as they are (weir turns them off and restores them on exit).
    #[arg(long)]
    pub keep_offloads: bool,
    /// Stop after this long (e.g. 30s); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = crate::sim::dur)]
    pub duration: Option<weir_core::Duration>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
    /// While weir is not forwarding (stopped, crashed, hung), forward nothing. The
    /// default of `weir run` is fail-open: the kernel forwards, unshaped (docs/operate.md).
    #[arg(long, conflicts_with = "fail_open")]
    pub fail_closed: bool,
    /// While weir is not forwarding, the kernel forwards between the interfaces, unshaped
    /// (the default of `weir run`; `weir emu` is fail-closed unless given this).
    #[arg(long)]
    pub fail_open: bool,
    /// Fail-open: how long weir's loop may go without a heartbeat before the kernel
    /// forwards (20ms to 60s).
    #[arg(long, value_parser = fail_open_after, default_value = "100ms")]
    pub fail_open_after: weir_core::Duration,
    #[command(flatten)]
    pub web: crate::web::HttpArgs,
}

impl BridgeArgs {
    /// The LAN-side interface (clap requires it for every command that bridges).
    pub fn lan(&self) -> &str {
        self.lan.as_deref().unwrap_or_default()
    }

    /// The WAN-side interface.
    pub fn wan(&self) -> &str {
        self.wan.as_deref().unwrap_or_default()
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML); its `[link] direction` says which way(s) it shapes, its
    /// `[[emulate]]` profiles which way(s) it emulates.
    #[arg(long)]
    policy: PathBuf,
    #[command(flatten)]
    bridge: BridgeArgs,
    /// Seed of the random number generator (RED, emulated loss and jitter); default: the
    /// policy's `[link] seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Forwarding loops, each on a core of its own with its share of the subscriber
    /// circuits: a number, or "auto" (one per CPU for a policy with a [subscribers]
    /// table, one otherwise; docs/live.md, "Workers").
    #[arg(long, default_value = "auto", value_parser = worker_count)]
    workers: WorkerCount,
}

/// `--workers`: a number, or `None` for "auto".
#[derive(Clone, Copy, Debug)]
pub struct WorkerCount(Option<usize>);

fn worker_count(s: &str) -> Result<WorkerCount, String> {
    if s == "auto" {
        return Ok(WorkerCount(None));
    }
    match s.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(WorkerCount(Some(n))),
        _ => Err(format!(
            "'{s}': give a number of workers from 1 to 256, or auto"
        )),
    }
}

/// What forwards: one loop with the whole device, or workers with a shard each.
pub enum Engine {
    One(Box<Device>),
    Workers(weir_io::control::Ready),
}

/// A group's number, from its name or number.
fn group_id(s: &str) -> Result<u32, String> {
    if let Ok(n) = s.parse::<u32>() {
        return Ok(n);
    }
    let name = std::ffi::CString::new(s).map_err(|_| format!("'{s}' is not a group name"))?;
    // SAFETY: a valid C string; the returned entry is read at once, before any other
    // getgr* call (weir parses its arguments on one thread).
    let g = unsafe { libc::getgrnam(name.as_ptr()) };
    if g.is_null() {
        return Err(format!(
            "no group named '{s}' (see /etc/group, or give its number)"
        ));
    }
    // SAFETY: non-null entry from getgrnam.
    Ok(unsafe { (*g).gr_gid })
}

fn fail_open_after(s: &str) -> Result<weir_core::Duration, String> {
    let d = crate::sim::dur(s)?;
    let (lo, hi) = (
        weir_io::failopen::MIN_AFTER,
        weir_core::Duration::from_secs(60),
    );
    if d < lo || d > hi {
        return Err(format!(
            "{s} is outside 20ms..60s: shorter, a busy host's scheduling delays would hand the link \
             to the kernel again and again; longer, the link would be down that long"
        ));
    }
    Ok(d)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let p = match crate::load_policy(Some(&a.policy), None) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let table = p.subscribers.is_some();
    let mut n = a
        .workers
        .0
        .unwrap_or_else(|| weir_io::bridge::auto_workers(&p));
    if n > 1 && !table {
        log::warning(&format!(
            "--workers {n}: the policy has no [subscribers] table to divide among workers; one worker runs it"
        ));
        n = 1;
    }
    let b = &a.bridge;
    if n > 1 && (b.pcap.is_some() || b.pcap_out.is_some() || b.pcap_in.is_some()) {
        anyhow::bail!(
            "--pcap* with {n} workers: each worker would write its own capture; add --workers 1 to capture"
        );
    }
    let seed = a.seed.unwrap_or(p.seed);
    let mut what = format!(
        "{} ({} shaped, technique {}; seed {seed})",
        a.policy.display(),
        p.shapes.name(),
        p.technique.name()
    );
    let engine = if n > 1 {
        let now = Instant(weir_io::clock::monotonic_ns());
        let ready = weir_io::control::ready(&p, n, now)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))?;
        what += &format!(
            "; {n} workers, {} shared classes ({})",
            ready.shared.len(),
            ready.shared.join(", ")
        );
        Engine::Workers(ready)
    } else {
        let device = p
            .build_device(Instant::ZERO)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))?;
        what += &describe_emulation(&device);
        Engine::One(Box::new(device))
    };
    bridge(
        &a.bridge,
        engine,
        seed,
        &what,
        Some(weir_io::control::ReloadSource::file(a.policy.clone())),
        true,
        EmuExtras::default(),
    )
}

/// One line per emulation profile of the device, per direction.
pub fn describe_emulation(device: &Device) -> String {
    let mut what = String::new();
    for (name, dir) in [
        ("outbound", Direction::Outbound),
        ("inbound", Direction::Inbound),
    ] {
        if let Some(e) = device.pipeline(dir).and_then(|p| p.emulator()) {
            for (i, l) in e.emu.profiles().iter().enumerate() {
                what += &format!(
                    "\n  emulate {name} '{}': {}",
                    e.names[i],
                    weir_core::emulate::spec::describe(l.config())
                );
            }
        }
    }
    what
}

/// What `weir emu` adds to the bridge: `mm-link` logs of its links and `--once`.
#[derive(Default)]
pub struct EmuExtras {
    pub link_logs: Vec<weir_io::bridge::LinkLogSpec>,
    pub stop_when_played: bool,
    /// Take `weir emu set` requests ([`crate::emu_set`]).
    pub set: bool,
}

/// Bridge `b.lan` and `b.wan` through `device` until stopped, then print the report.
/// `what` describes the configuration for the start-up line.
/// `reload`: what SIGHUP reads again (`weir run`'s policy file, `weir emu`'s files). `fail_open`: the
/// command's default (`--fail-open` / `--fail-closed` override it).
pub fn bridge(
    b: &BridgeArgs,
    engine: Engine,
    seed: u64,
    what: &str,
    reload: Option<weir_io::control::ReloadSource>,
    fail_open: bool,
    emu: EmuExtras,
) -> anyhow::Result<ExitCode> {
    let limit = parse_size(&b.pcap_limit).map_err(|e| anyhow::anyhow!("--pcap-limit: {e}"))?;
    // refuse before creating (and truncating) any capture file
    crate::web::check(&b.web)?;
    let fail_open = (fail_open || b.fail_open) && !b.fail_closed;
    weir_io::bridge::preflight(b.lan(), b.wan(), fail_open)?;
    let writer = |opt: &str, path: &PathBuf| {
        PcapWriter::create(path, b.snaplen, Some(limit))
            .map_err(|e| anyhow::anyhow!("{opt} {}: {e}", path.display()))
    };
    let mut cfg = BridgeConfig::new(b.lan(), b.wan());
    let hup_reads = reload.as_ref().map(|r| r.name.clone());
    cfg.reload = reload;
    cfg.seed = seed;
    cfg.pcap = match (&b.pcap, &b.pcap_out, &b.pcap_in) {
        (Some(f), _, _) => PcapSpec::Both(writer("--pcap", f)?),
        (None, None, None) => PcapSpec::None,
        (None, o, i) => PcapSpec::PerDirection {
            outbound: o.as_ref().map(|f| writer("--pcap-out", f)).transpose()?,
            inbound: i.as_ref().map(|f| writer("--pcap-in", f)).transpose()?,
        },
    };
    cfg.busy_poll = b.busy_poll;
    cfg.catch_up = b.catch_up;
    cfg.keep_offloads = b.keep_offloads;
    cfg.stats_socket = Some(b.stats_socket.clone());
    cfg.socket_group = b.socket_group;
    cfg.fail_open = fail_open.then_some(b.fail_open_after);
    cfg.link_logs = emu.link_logs;
    cfg.stop_when_played = emu.stop_when_played;
    if emu.set {
        cfg.emu_set = Some(Box::new(crate::emu_set::apply));
    }
    let running = match engine {
        Engine::One(device) => {
            cfg.device = *device;
            Running::One(Box::new(Bridge::open(cfg)?))
        }
        Engine::Workers(ready) => Running::Workers(Box::new(Workers::start(WorkersConfig {
            bridge: cfg,
            ready,
        })?)),
    };
    // after the bridge: its statistics socket, which the web server reads, exists
    let web = crate::web::WebServer::start(&b.web, b.stats_socket.clone())?;
    let stop = weir_io::signals::install();
    if let Some(d) = b.duration {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_nanos(d.as_nanos()));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    log::info(&format!("bridging {} <-> {} with {what}", b.lan(), b.wan()));
    log::info(&format!(
        "Ctrl-C to stop; stats: weir stats --socket {}",
        b.stats_socket.display()
    ));
    if let Some(w) = &web {
        log::info(&format!(
            "live view http://{}/ (JSON /api/snapshot, Prometheus /metrics)",
            w.addr()
        ));
    }
    if fail_open {
        log::info(&format!(
            "fail-open: when weir stops forwarding for {} ms the kernel forwards {} <-> {} (unshaped) until weir is back; --fail-closed for none",
            b.fail_open_after.as_secs_f64() * 1e3,
            b.lan(),
            b.wan()
        ));
    } else {
        log::info("fail-closed: while weir is not forwarding, nothing passes");
    }
    if let Some(what) = hup_reads {
        log::info(&format!(
            "new policy: weir reload --socket {} FILE, or SIGHUP to read {what} again",
            b.stats_socket.display()
        ));
    }
    // under systemd (Type=notify): ready once the rings are open and the loop starts;
    // the loop pings the watchdog (weir_io::notify)
    weir_io::notify::notify(&format!(
        "READY=1\nSTATUS=bridging {} <-> {} with {}",
        b.lan(),
        b.wan(),
        what.lines().next().unwrap_or_default()
    ));
    let report = match running {
        Running::One(mut bridge) => bridge
            .run(stop)
            .map(|r| serde_json::to_value(&r).unwrap_or_default()),
        Running::Workers(w) => w.run(stop),
    };
    weir_io::notify::notify(&match &report {
        Ok(_) => "STOPPING=1".to_string(),
        Err(e) => format!("STOPPING=1\nSTATUS=stopped: {e}"),
    });
    let report = report?;
    drop(web);
    if b.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    warn_about(&report, b);
    Ok(ExitCode::SUCCESS)
}

/// A running bridge: one loop, or workers.
enum Running {
    One(Box<Bridge>),
    Workers(Box<Workers>),
}

/// The final report as text (`report`: [`weir_io::bridge::BridgeReport`] as JSON, or the
/// workers' merged one).
fn print_report(report: &serde_json::Value) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    for name in ["outbound", "inbound"] {
        let l = &report[name];
        let p = |k: &str| n(&l[k]["packets"]);
        let errors = offload_errors(l);
        println!(
            "{name}: rx {} frames / {} bytes, tx {} frames / {} bytes, dropped {} (policy) + {} (truncated) + {} (over MTU) + {} (pool) + {errors} (offload errors) + {} (reload) + {} (at shutdown), duplicated {}; super-packets {} kept whole ({} segments), {} cut into {} segments; checksums filled {}, VLAN tags restored {}; kernel rx-ring drops {}, tx ring full {} times, tx rejected {}",
            p("rx"), n(&l["rx"]["bytes"]), p("tx"), n(&l["tx"]["bytes"]), p("dropped"), p("truncated"),
            p("oversize"), p("pool_exhausted"), p("reload_drops"),
            p("shutdown_drops"), p("duplicated"), n(&l["gso"]["kept_whole"]), n(&l["gso"]["whole_segments"]), n(&l["gso"]["super_packets"]), n(&l["gso"]["segments"]),
            n(&l["csum_filled"]), n(&l["vlan_restored"]), n(&l["kernel_rx_drops"]), n(&l["tx_ring_full"]), n(&l["tx_rejected"])
        );
    }
    for name in ["outbound", "inbound"] {
        if let Some(line) = crate::stats::pmtu_line(&report[name]) {
            println!("{name}: {line}");
        }
    }
    println!(
        "policy generation {} ({} reloads refused, {} refused for the rate)",
        n(&report["policy_generation"]),
        n(&report["reloads_refused"]),
        n(&report["reloads_throttled"])
    );
    if let Some(w) = report["workers"].as_u64() {
        println!("{w} workers");
    }
    for a in report["admission"].as_array().into_iter().flatten() {
        if let Ok(a) = serde_json::from_value::<weir_core::admission::ClassAdmission>(a.clone()) {
            println!("{a}");
        }
    }
    if let Ok(a) =
        serde_json::from_value::<weir_core::device::AdaptSnapshot>(report["adapt"].clone())
    {
        println!("{a}");
    }
    if let Ok(w) = serde_json::from_value::<weir_io::wake::WakeStats>(report["wake"].clone()) {
        println!("{w}");
    }
    println!("{}", crate::stats::failopen_line(report));
    for l in crate::stats::capture_lines(report) {
        println!("{l}");
    }
}

/// Frames of a lane (JSON) dropped for their virtio header, all causes.
fn offload_errors(lane: &serde_json::Value) -> u64 {
    lane["offload_errors"].as_object().map_or(0, |o| {
        o.values().map(|c| c["packets"].as_u64().unwrap_or(0)).sum()
    })
}

/// Warnings about what was lost on the way in.
fn warn_about(report: &serde_json::Value, b: &BridgeArgs) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    for (dir, from) in [("outbound", b.lan()), ("inbound", b.wan())] {
        let l = &report[dir];
        let truncated = n(&l["truncated"]["packets"]);
        if truncated > 0 {
            log::warning(&format!(
                "{truncated} frames arriving on {from} could not be read whole and were dropped: \
                 frames longer than weir's 2 KB packet slots (jumbo frames), or super-packets that \
                 found the socket's copy queue full (see docs/live.md)"
            ));
        }
        let oversize = n(&l["oversize"]["packets"]);
        if oversize > 0 {
            log::warning(&format!(
                "{oversize} frames arriving on {from} were longer than the other interface's MTU \
                 and were dropped (senders told with ICMP where due; see docs/live.md, \"Frames over the MTU\")"
            ));
        }
        let refused = n(&l["gso"]["whole_refused"]["packets"]);
        if refused > 0 {
            log::warning(&format!(
                "{refused} super-packets arriving on {from} were refused by the kernel when sent \
                 whole and were dropped (see docs/live.md, \"Super-packets kept whole\")"
            ));
        }
        let errors = offload_errors(l);
        if errors > 0 {
            log::warning(&format!(
                "{errors} frames arriving on {from} carried a virtio header weir could not honour \
                 (dropped; causes in --json: offload_errors)"
            ));
        }
    }
}
