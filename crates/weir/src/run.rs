//! `weir run`: shape real traffic as a transparent bridge between two interfaces.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::device::Device;
use weir_core::units::parse_size;
use weir_core::{Direction, Instant};
use weir_io::bridge::{Bridge, BridgeConfig, PcapSpec};
use weir_io::log;
use weir_io::pcap::PcapWriter;

/// Options every bridging command shares (`weir run`, `weir emu`).
#[derive(clap::Args)]
pub struct BridgeArgs {
    /// The LAN-side interface (outbound traffic enters here).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub lan: String,
    /// The WAN-side interface (outbound traffic leaves here).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub wan: String,
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
    /// Leave GRO/GSO/TSO/LRO as they are (weir turns them off and restores them on exit).
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
    let device = p
        .build_device(Instant::ZERO)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))?;
    let seed = a.seed.unwrap_or(p.seed);
    let mut what = format!(
        "{} ({} shaped, technique {}; seed {seed})",
        a.policy.display(),
        p.shapes.name(),
        p.technique.name()
    );
    what += &describe_emulation(&device);
    bridge(&a.bridge, device, seed, &what, Some(a.policy.clone()), true)
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

/// Bridge `b.lan` and `b.wan` through `device` until stopped, then print the report.
/// `what` describes the configuration for the start-up line.
/// `reload_file`: the policy file SIGHUP re-reads (`weir run`). `fail_open`: the
/// command's default (`--fail-open` / `--fail-closed` override it).
pub fn bridge(
    b: &BridgeArgs,
    device: Device,
    seed: u64,
    what: &str,
    reload_file: Option<PathBuf>,
    fail_open: bool,
) -> anyhow::Result<ExitCode> {
    let limit = parse_size(&b.pcap_limit).map_err(|e| anyhow::anyhow!("--pcap-limit: {e}"))?;
    // refuse before creating (and truncating) any capture file
    crate::web::check(&b.web)?;
    let fail_open = (fail_open || b.fail_open) && !b.fail_closed;
    weir_io::bridge::preflight(&b.lan, &b.wan, fail_open)?;
    let writer = |opt: &str, path: &PathBuf| {
        PcapWriter::create(path, b.snaplen, Some(limit))
            .map_err(|e| anyhow::anyhow!("{opt} {}: {e}", path.display()))
    };
    let mut cfg = BridgeConfig::new(&b.lan, &b.wan);
    cfg.device = device;
    let cfg_reload = reload_file.is_some();
    cfg.reload_file = reload_file;
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
    let mut bridge = Bridge::open(cfg)?;
    // after the bridge: its statistics socket, which the web server reads, exists
    let web = crate::web::WebServer::start(&b.web, b.stats_socket.clone())?;
    let stop = weir_io::signals::install();
    if let Some(d) = b.duration {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_nanos(d.as_nanos()));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    log::info(&format!("bridging {} <-> {} with {what}", b.lan, b.wan));
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
            b.lan,
            b.wan
        ));
    } else {
        log::info("fail-closed: while weir is not forwarding, nothing passes");
    }
    if cfg_reload {
        log::info(&format!(
            "new policy: weir reload --socket {} FILE, or SIGHUP to re-read the file",
            b.stats_socket.display()
        ));
    }
    // under systemd (Type=notify): ready once the rings are open and the loop starts;
    // the loop pings the watchdog (weir_io::notify)
    weir_io::notify::notify(&format!(
        "READY=1\nSTATUS=bridging {} <-> {} with {}",
        b.lan,
        b.wan,
        what.lines().next().unwrap_or_default()
    ));
    let report = bridge.run(stop);
    weir_io::notify::notify(&match &report {
        Ok(_) => "STOPPING=1".to_string(),
        Err(e) => format!("STOPPING=1\nSTATUS=stopped: {e}"),
    });
    let report = report?;
    drop(web);
    if b.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (name, l) in [("outbound", &report.outbound), ("inbound", &report.inbound)] {
            let errors = l.offload_errors.total();
            println!(
                "{name}: rx {} frames / {} bytes, tx {} frames / {} bytes, dropped {} (policy) + {} (truncated) + {} (over MTU) + {} (pool) + {} (offload errors) + {} (reload) + {} (at shutdown), duplicated {}; super-packets {} cut into {} segments; checksums filled {}, VLAN tags restored {}; kernel rx-ring drops {}, tx ring full {} times, tx rejected {}",
                l.rx.packets, l.rx.bytes, l.tx.packets, l.tx.bytes, l.dropped.packets, l.truncated.packets,
                l.oversize.packets, l.pool_exhausted.packets, errors.packets, l.reload_drops.packets,
                l.shutdown_drops.packets, l.duplicated.packets, l.gso.super_packets, l.gso.segments,
                l.csum_filled, l.vlan_restored, l.kernel_rx_drops, l.tx_ring_full, l.tx_rejected
            );
        }
        for (name, l) in [("outbound", &report.outbound), ("inbound", &report.inbound)] {
            if let Some(line) = serde_json::to_value(l)
                .ok()
                .and_then(|v| crate::stats::pmtu_line(&v))
            {
                println!("{name}: {line}");
            }
        }
        println!(
            "policy generation {} ({} reloads refused, {} refused for the rate)",
            report.policy_generation, report.reloads_refused, report.reloads_throttled
        );
        for a in &report.admission {
            println!("{a}");
        }
        if let Some(a) = &report.adapt {
            println!("{a}");
        }
        println!("{}", report.wake);
        if let Ok(v) = serde_json::to_value(&report) {
            println!("{}", crate::stats::failopen_line(&v));
            for l in crate::stats::capture_lines(&v) {
                println!("{l}");
            }
        }
    }
    for (l, from) in [(&report.outbound, &b.lan), (&report.inbound, &b.wan)] {
        if l.truncated.packets > 0 {
            log::warning(&format!(
                "{} frames arriving on {from} could not be read whole and were dropped: \
                 frames longer than weir's 2 KB packet slots (jumbo frames), or super-packets that \
                 found the socket's copy queue full (see docs/live.md)",
                l.truncated.packets
            ));
        }
        if l.oversize.packets > 0 {
            log::warning(&format!(
                "{} frames arriving on {from} were longer than the other interface's MTU \
                 and were dropped (senders told with ICMP where due; see docs/live.md, \"Frames over the MTU\")",
                l.oversize.packets
            ));
        }
        let e = l.offload_errors.total();
        if e.packets > 0 {
            log::warning(&format!(
                "{} frames arriving on {from} carried a virtio header weir could not honour \
                 (dropped; causes in --json: offload_errors)",
                e.packets
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
