//! `weir run`: shape real traffic as a transparent bridge between two interfaces.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::policy::Shapes;
use weir_core::units::parse_size;
use weir_core::Instant;
use weir_io::bridge::{Bridge, BridgeConfig, PcapSpec};
use weir_io::pcap::PcapWriter;

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML); its `[link] direction` says which way(s) it shapes.
    #[arg(long)]
    policy: PathBuf,
    /// The LAN-side interface (outbound traffic enters here).
    #[arg(long)]
    lan: String,
    /// The WAN-side interface (outbound traffic leaves here).
    #[arg(long)]
    wan: String,
    /// Spin instead of sleeping between packets: more precise timing, one busy core.
    #[arg(long)]
    busy_poll: bool,
    /// Write what leaves weir in both directions to this pcap file (ns timestamps).
    #[arg(long, conflicts_with_all = ["pcap_out", "pcap_in"])]
    pcap: Option<PathBuf>,
    /// Write what leaves towards the WAN to this pcap file.
    #[arg(long)]
    pcap_out: Option<PathBuf>,
    /// Write what leaves towards the LAN to this pcap file.
    #[arg(long)]
    pcap_in: Option<PathBuf>,
    /// Stop writing a capture file at this size (e.g. 100MB).
    #[arg(long, default_value = "1GB")]
    pcap_limit: String,
    /// Bytes of each frame to capture.
    #[arg(long, default_value_t = 65535)]
    snaplen: u32,
    /// Unix socket where `weir stats` reads counters (root-only).
    #[arg(long, default_value = "/run/weir/weir.sock")]
    stats_socket: PathBuf,
    /// Leave GRO/GSO/TSO/LRO as they are (weir turns them off and restores them on exit).
    #[arg(long)]
    keep_offloads: bool,
    /// Stop after this long (e.g. 30s); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = crate::sim::dur)]
    duration: Option<weir_core::Duration>,
    /// Print the final report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let p = match crate::load_policy(Some(&a.policy), None) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let limit = parse_size(&a.pcap_limit).map_err(|e| anyhow::anyhow!("--pcap-limit: {e}"))?;
    // refuse before creating (and truncating) any capture file
    weir_io::bridge::preflight(&a.lan, &a.wan)?;
    let writer = |opt: &str, path: &PathBuf| {
        PcapWriter::create(path, a.snaplen, Some(limit))
            .map_err(|e| anyhow::anyhow!("{opt} {}: {e}", path.display()))
    };
    let mut cfg = BridgeConfig::new(&a.lan, &a.wan);
    let build = || {
        p.build(Instant::ZERO)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))
    };
    if matches!(p.shapes, Shapes::Outbound | Shapes::Both) {
        cfg.outbound = Some(build()?);
    }
    if matches!(p.shapes, Shapes::Inbound | Shapes::Both) {
        cfg.inbound = Some(build()?);
    }
    cfg.pcap = match (&a.pcap, &a.pcap_out, &a.pcap_in) {
        (Some(f), _, _) => PcapSpec::Both(writer("--pcap", f)?),
        (None, None, None) => PcapSpec::None,
        (None, o, i) => PcapSpec::PerDirection {
            outbound: o.as_ref().map(|f| writer("--pcap-out", f)).transpose()?,
            inbound: i.as_ref().map(|f| writer("--pcap-in", f)).transpose()?,
        },
    };
    cfg.busy_poll = a.busy_poll;
    cfg.keep_offloads = a.keep_offloads;
    cfg.stats_socket = Some(a.stats_socket.clone());
    let mut bridge = Bridge::open(cfg)?;
    let stop = weir_io::signals::install();
    if let Some(d) = a.duration {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_nanos(d.as_nanos()));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    }
    eprintln!(
        "weir: bridging {} <-> {} with {} ({} shaped, technique {}); Ctrl-C to stop; stats: weir stats --socket {}",
        a.lan,
        a.wan,
        a.policy.display(),
        p.shapes.name(),
        p.technique.name(),
        a.stats_socket.display()
    );
    let report = bridge.run(stop)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (name, l) in [("outbound", &report.outbound), ("inbound", &report.inbound)] {
            println!(
                "{name}: rx {} frames / {} bytes, tx {} frames / {} bytes, dropped {} (policy) + {} (truncated) + {} (over MTU) + {} (pool) + {} (at shutdown); checksums filled {}, VLAN tags restored {}; kernel rx-ring drops {}, tx ring full {} times, tx rejected {}",
                l.rx.packets, l.rx.bytes, l.tx.packets, l.tx.bytes, l.dropped.packets, l.truncated.packets,
                l.oversize.packets, l.pool_exhausted.packets, l.shutdown_drops.packets, l.csum_filled, l.vlan_restored,
                l.kernel_rx_drops, l.tx_ring_full, l.tx_rejected
            );
        }
    }
    for (l, from) in [(&report.outbound, &a.lan), (&report.inbound, &a.wan)] {
        if l.truncated.packets > 0 {
            eprintln!(
                "weir: warning: {} frames arriving on {from} were larger than a ring slot and were dropped: \
                 the host sending them uses segmentation offload (GSO/TSO super-packets; a veth peer's \
                 offloads are beyond weir's reach). Turn it off on that host: ethtool -K IFACE tso off gso off",
                l.truncated.packets
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
