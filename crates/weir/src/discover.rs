//! `weir discover`: what crosses a running weir (or a capture), by application and
//! server, and a starting policy from it.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::discover::{suggest, Report};
use weir_core::units::parse_rate;
use weir_core::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The running weir's statistics socket.
    #[arg(long, default_value = "/run/weir/weir.sock")]
    socket: PathBuf,
    /// Read a capture instead (classic pcap, as `tcpdump -w` or `weir run --pcap` write
    /// it); rates are then averages over the capture.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Print the tree as JSON.
    #[arg(long, conflicts_with = "suggest_policy")]
    json: bool,
    /// Print a starting policy (TOML) instead of the tree: one class per application
    /// with at least --min-share of the bytes, rates in proportion to its bytes.
    #[arg(long)]
    suggest_policy: bool,
    /// The link rate of the suggested policy.
    #[arg(long, default_value = "100Mbit", requires = "suggest_policy")]
    rate: String,
    /// The share of all bytes (percent) an application needs for a class of its own.
    #[arg(long, default_value_t = 1.0, requires = "suggest_policy")]
    min_share: f64,
    /// Applications listed (the rest summed in one line).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Servers listed per application (the rest summed in one line).
    #[arg(long, default_value_t = 5)]
    servers: usize,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if !(0.0..=100.0).contains(&a.min_share) {
        anyhow::bail!(
            "--min-share {}: expected a percentage, 0 to 100",
            a.min_share
        );
    }
    let link = if a.suggest_policy {
        let r = parse_rate(&a.rate).map_err(|e| anyhow::anyhow!("--rate: {e}"))?;
        if r < 8_000 {
            anyhow::bail!("--rate {}: a link needs at least 8kbit", a.rate);
        }
        r
    } else {
        0
    };
    let mut report = match &a.pcap {
        Some(f) => from_pcap(f, a.top, a.servers)?,
        None => {
            let doc = weir_io::stats::query(&a.socket)?;
            let v: serde_json::Value = serde_json::from_str(&doc)?;
            if v["discovery"].is_null() {
                anyhow::bail!(
                    "the running weir keeps no connection table (its policy shapes nothing): nothing discovered"
                );
            }
            serde_json::from_value::<Report>(v["discovery"].clone())?
        }
    };
    report.truncate(a.top, a.servers);
    if a.suggest_policy {
        print!("{}", suggest::suggest(&report, link, a.min_share / 100.0));
    } else if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The tree of a capture: every frame through an observing device at its capture time.
fn from_pcap(path: &std::path::Path, top: usize, servers: usize) -> anyhow::Result<Report> {
    let mut r = weir_io::pcap_read::PcapReader::open(path)?;
    let mut d = weir_core::device::Device::observer().map_err(anyhow::Error::msg)?;
    let mut frame = Vec::new();
    let mut first = None;
    let mut last = Instant::ZERO;
    while let Some(rec) = r.next_frame(&mut frame)? {
        let t0 = match first {
            Some(t) => t,
            None => {
                first = Some(rec.ts_ns);
                d.discovery_tick(Instant::ZERO);
                rec.ts_ns
            }
        };
        // a capture's clock may step back (merged files): time never goes backwards here
        let now = Instant::ZERO + Duration::from_nanos(rec.ts_ns.saturating_sub(t0));
        last = last.max(now);
        d.observe(&frame, last);
    }
    if r.truncated() > 0 {
        eprintln!(
            "weir: {}: {} frames were cut by the capture's snaplen; bytes are counted as captured",
            path.display(),
            r.truncated()
        );
    }
    // the rates: averages over the capture
    d.discovery_tick(last);
    d.discovery(top, servers)
        .ok_or_else(|| anyhow::anyhow!("no connection table"))
}
