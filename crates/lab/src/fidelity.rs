//! The link-shaping fidelity lab of seed 002 (Chertov & Almeroth, "High-Fidelity Link
//! Shaping"): how faithfully does an emulator deliver the rate and delay it was asked for?
//!
//! # Method (the seed's, in namespaces)
//!
//! A constant-rate UDP flow ([`crate::cbr`]) of fixed-size frames crosses one *path* from a
//! sender namespace to a receiver namespace. The receiver takes kernel timestamps and, per
//! cell (frame size × packet rate × repeat), reports the 10th/50th/90th percentiles of the
//! **inter-frame gap** (time between consecutive arrivals) and of the one-way **delay**, the
//! mean gap, and the **loss ratio**. Frame sizes are the seed's 64, 800 and 1518 bytes
//! *including* the 4-byte FCS (what the seed's NICs put on the wire); weir and the kernel see
//! frames without FCS (60, 796, 1514 bytes), so every rate limiter here counts 4 bytes of
//! overhead per frame (weir's `overhead = 4`, the kernel's `stab overhead 4`), and a
//! 1518-byte frame takes 1518 × 8 / 155 Mbit/s = 78.35 µs, the seed's theoretical gap.
//!
//! Paths ([`PathKind`]), as in the seed's tables:
//!
//! | name | what | seed |
//! |---|---|---|
//! | `veth` | sender and receiver joined by one veth pair (calibration) | Tables I–II |
//! | `weir-0ms` | weir bridge, emulator with no impairment | IX–X |
//! | `weir-125ms` | weir, 125 ms delay, queue = BDP (no rate: unlimited) | XI–XII |
//! | `weir-125ms-155M` | weir, 125 ms and 155 Mbit/s, queue = BDP | XIII–XIV |
//! | `weir-155M` | weir, 155 Mbit/s, no delay (like for like with the kernel rows) | — |
//! | `tbf-155M` | kernel bridge with `tbf rate 155mbit` on the egress port | XVII–XVIII (the router) |
//! | `htb-155M` | kernel bridge with one `htb` class at 155mbit | XVII–XVIII |
//!
//! Cells whose offered bit rate exceeds the *line* (1 Gbit/s, the seed's NICs) are not run
//! and are marked `over line rate`, as the seed leaves them blank. Cells above a path's
//! emulated rate are run — that is where the shaper's inter-frame gaps show — and their loss
//! is expected (queue overflow), not an artefact. A cell whose sender could not keep the
//! asked rate (achieved < 98 %) is marked `generator-limited`: its figures are what was
//! measured, at the rate achieved.
//!
//! # Timing on a 2-core machine
//!
//! The sender paces by spinning (pinned to CPU 0); weir's bridge runs pinned to CPU 1, by
//! default in busy-poll mode (a sleeping bridge wakes a few µs late, which widens the gap
//! spread); veth delivers into the receiver inside the transmitting thread, and the sink only
//! collects kernel timestamps, so its own scheduling does not affect the figures.
//!
//! # Checks ([`check`])
//!
//! The acceptance criteria of the emulator issue, evaluated on the cells that ran:
//! delay p90 − p10 ≤ 100 µs on `weir-125ms` at rates the generator sustained; on the
//! 155 Mbit/s weir paths, in cells above the link rate, the mean gap within ±1 % of the
//! serialisation time and p10 and p90 within ±10 µs of it; zero loss (beyond the sender's own
//! send errors) on every weir path in cells below its rate; and weir's gap spread
//! (p90 − p10) no wider than the kernel's in the same cells.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cbr::{CbrSender, CbrSenderOpts, CbrSink, CbrSinkOpts, DistUs};
use crate::netns::{add_addr, link_veth, set_up, wait_link_up, BridgeTopo, Error, Netns, Result};
use crate::plot;

/// Bytes of FCS the seed's frame sizes include and weir's do not.
pub const FCS: u32 = 4;

/// One path a CBR flow crosses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PathKind {
    /// A veth pair, nothing between (calibration).
    Veth,
    /// The weir bridge with one emulated link.
    Weir {
        delay_ns: u64,
        rate_bps: Option<u64>,
    },
    /// The kernel bridge with a TBF on the egress port.
    KernelTbf { rate_bps: u64 },
    /// The kernel bridge with one HTB class on the egress port.
    KernelHtb { rate_bps: u64 },
}

/// A named path and the seed tables it reproduces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub name: String,
    pub kind: PathKind,
    pub tables: String,
}

impl Path {
    /// The emulated rate, if the path limits it.
    pub fn rate_bps(&self) -> Option<u64> {
        match self.kind {
            PathKind::Veth => None,
            PathKind::Weir { rate_bps, .. } => rate_bps,
            PathKind::KernelTbf { rate_bps } | PathKind::KernelHtb { rate_bps } => Some(rate_bps),
        }
    }

    pub fn is_weir(&self) -> bool {
        matches!(self.kind, PathKind::Weir { .. })
    }

    pub fn is_kernel(&self) -> bool {
        matches!(
            self.kind,
            PathKind::KernelTbf { .. } | PathKind::KernelHtb { .. }
        )
    }
}

const R155: u64 = 155_000_000;
const D125: u64 = 125_000_000;

/// The paths of the seed's tables plus the like-for-like weir row (see the module comment).
pub fn standard_paths() -> Vec<Path> {
    let p = |name: &str, kind, tables: &str| Path {
        name: name.into(),
        kind,
        tables: tables.into(),
    };
    vec![
        p("veth", PathKind::Veth, "I-II"),
        p(
            "weir-0ms",
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: None,
            },
            "IX-X",
        ),
        p(
            "weir-125ms",
            PathKind::Weir {
                delay_ns: D125,
                rate_bps: None,
            },
            "XI-XII",
        ),
        p(
            "weir-125ms-155M",
            PathKind::Weir {
                delay_ns: D125,
                rate_bps: Some(R155),
            },
            "XIII-XIV",
        ),
        p(
            "weir-155M",
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: Some(R155),
            },
            "-",
        ),
        p(
            "tbf-155M",
            PathKind::KernelTbf { rate_bps: R155 },
            "XVII-XVIII",
        ),
        p(
            "htb-155M",
            PathKind::KernelHtb { rate_bps: R155 },
            "XVII-XVIII",
        ),
    ]
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FidelityConfig {
    /// Frame sizes in bytes, FCS included (the seed's 64, 800, 1518).
    pub sizes: Vec<u32>,
    /// Packet rates, packets/s.
    pub rates: Vec<u32>,
    pub repeats: u32,
    /// Sending time per cell.
    pub cell_ms: u64,
    /// Cells above this bit rate (frame bytes incl. FCS × 8 × pps) are not run.
    pub line_rate_bps: u64,
    pub paths: Vec<Path>,
    /// weir's bridge spins instead of sleeping between packets.
    pub busy_poll: bool,
    /// Seed of weir's random number generator.
    pub seed: u64,
    /// Number of inter-frame gaps kept per cell for the gap-per-packet plots.
    pub keep_gaps: usize,
}

impl FidelityConfig {
    /// The seed's grid: 3 sizes × 5 rates, 3 repeats of 1 s per cell, every path.
    pub fn paper() -> Self {
        FidelityConfig {
            sizes: vec![64, 800, 1518],
            rates: vec![8_000, 40_000, 80_000, 120_000, 200_000],
            repeats: 3,
            cell_ms: 1000,
            line_rate_bps: 1_000_000_000,
            paths: standard_paths(),
            busy_poll: true,
            seed: 1,
            keep_gaps: 400,
        }
    }

    /// A CI-sized run: 64- and 1518-byte frames at 8k and 80k packets/s, one repeat of
    /// 0.4 s, every path.
    pub fn quick() -> Self {
        FidelityConfig {
            sizes: vec![64, 1518],
            rates: vec![8_000, 80_000],
            repeats: 1,
            cell_ms: 400,
            ..Self::paper()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if self.sizes.is_empty() || self.rates.is_empty() || self.paths.is_empty() {
            return bad("fidelity: sizes, rates and paths must not be empty".into());
        }
        for &s in &self.sizes {
            if !(64..=1518).contains(&s) {
                return bad(format!(
                    "fidelity: frame size {s} is outside 64..=1518 bytes (FCS included)"
                ));
            }
        }
        if self.rates.contains(&0) {
            return bad("fidelity: a packet rate of 0".into());
        }
        if self.repeats == 0 || self.cell_ms == 0 {
            return bad("fidelity: repeats and cell time must be > 0".into());
        }
        Ok(())
    }
}

/// Percentiles in µs (`None` where undefined, e.g. no packets).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pcts {
    pub count: usize,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<f64>,
    pub p10: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub max: Option<f64>,
}

impl From<&DistUs> for Pcts {
    fn from(d: &DistUs) -> Pcts {
        let f = |x: f64| x.is_finite().then_some(x);
        Pcts {
            count: d.count,
            mean: f(d.mean),
            std: f(d.std),
            min: f(d.min),
            p10: f(d.p10),
            p50: f(d.p50),
            p90: f(d.p90),
            max: f(d.max),
        }
    }
}

impl Pcts {
    /// p90 − p10.
    pub fn spread(&self) -> Option<f64> {
        Some(self.p90? - self.p10?)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    Ok,
    /// Not run: above the line rate.
    OverLineRate,
    /// Ran, but the sender achieved less than 98 % of the asked rate.
    GeneratorLimited,
    /// Could not be measured.
    Failed(String),
}

/// One cell: a path, frame size and packet rate, one repeat.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    pub path: String,
    /// Frame size, FCS included.
    pub size: u32,
    pub pps: u32,
    pub repeat: u32,
    pub status: CellStatus,
    /// Offered load, bit/s (frame incl. FCS).
    pub offered_bps: u64,
    /// Whether the offered load is above the path's emulated rate.
    pub over_path_rate: bool,
    pub sent: u64,
    pub send_errors: u64,
    pub achieved_pps: f64,
    pub late: u64,
    pub received: u64,
    pub lost: u64,
    /// Lost beyond the sender's own send errors, over packets sent.
    pub loss_ratio: f64,
    pub reordered: u64,
    pub duplicates: u64,
    pub socket_drops: u64,
    pub ifg_us: Pcts,
    pub delay_us: Pcts,
    /// A window of consecutive inter-frame gaps (µs) from the middle of the run.
    pub gaps_window_us: Vec<f32>,
    /// weir's bridge counters for this cell's path (JSON), when weir ran it.
    #[serde(default)]
    pub weir: Option<serde_json::Value>,
    /// Frames the kernel dropped during this cell because weir's receive ring was full:
    /// weir did not keep up with the offered packet rate (weir paths only).
    #[serde(default)]
    pub dut_rx_drops: Option<u64>,
}

impl Cell {
    /// Whether the device kept up: no receive-ring overflow (always true for non-weir paths).
    pub fn sustained(&self) -> bool {
        self.dut_rx_drops.unwrap_or(0) == 0
    }
}

/// A whole run: configuration, environment, cells, checks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FidelityResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: FidelityConfig,
    pub cells: Vec<Cell>,
    pub checks: Vec<Check>,
}

/// One acceptance criterion and whether the run met it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// Cells it was evaluated on.
    pub cells: usize,
    pub detail: String,
}

/// Serialisation time in µs of a frame of `size` bytes (FCS included) at `bps`.
pub fn serialisation_us(size: u32, bps: u64) -> f64 {
    size as f64 * 8.0 / bps as f64 * 1e6
}

// ---- running -------------------------------------------------------------------------

/// The sender/receiver pair of the calibration path (addresses as in [`BridgeTopo`]).
struct VethPair {
    snd: Netns,
    rcv: Netns,
}

impl VethPair {
    fn new(label: &str) -> Result<VethPair> {
        let snd = Netns::new(&format!("{label}-snd"))?;
        let rcv = Netns::new(&format!("{label}-rcv"))?;
        link_veth(&snd, "eth0", &rcv, "eth0")?;
        add_addr(&snd, "eth0", &format!("{}/24", BridgeTopo::SND_ADDR))?;
        add_addr(&rcv, "eth0", &format!("{}/24", BridgeTopo::RCV_ADDR))?;
        set_up(&snd, "eth0")?;
        set_up(&rcv, "eth0")?;
        wait_link_up(&snd, "eth0", BridgeTopo::LINK_UP_TIMEOUT)?;
        wait_link_up(&rcv, "eth0", BridgeTopo::LINK_UP_TIMEOUT)?;
        Ok(VethPair { snd, rcv })
    }
}

/// A running DUT on a [`BridgeTopo`]: weir in a thread, or kernel qdiscs.
enum Dut<'a> {
    Weir {
        bridge: crate::dut::BridgeThread,
        /// The bridge's statistics socket (per-cell receive-ring drops).
        sock: std::path::PathBuf,
    },
    Kernel {
        topo: &'a BridgeTopo,
    },
}

/// The policy that makes weir one emulated link (no shaping, every packet to the link
/// profile).
pub fn weir_policy(delay_ns: u64, rate_bps: Option<u64>, seed: u64) -> String {
    let mut s = format!(
        "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nemulate = \"wan\"\nseed = {seed}\n\n\
         [[emulate]]\nname = \"wan\"\ndelay = \"{}us\"\noverhead = {FCS}\n",
        delay_ns / 1000
    );
    if let Some(r) = rate_bps {
        s += &format!("rate = \"{r}bit\"\n");
    }
    s
}

/// The kernel commands (run in the DUT namespace, after the kernel bridge exists) that put
/// the rate limiter on the egress port.
pub fn kernel_commands(kind: &PathKind, dev: &str) -> Vec<Vec<String>> {
    let v = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    // queue limit: 1000 frames of 1518 bytes, like weir's default with a rate and no delay
    match kind {
        PathKind::KernelTbf { rate_bps } => vec![v(&format!(
            "tc qdisc replace dev {dev} root stab overhead {FCS} tbf rate {rate_bps}bit burst 1600b limit 1518000b"
        ))],
        PathKind::KernelHtb { rate_bps } => vec![
            v(&format!(
                "tc qdisc replace dev {dev} root handle 1: stab overhead {FCS} htb default 10"
            )),
            v(&format!(
                "tc class add dev {dev} parent 1: classid 1:10 htb rate {rate_bps}bit ceil {rate_bps}bit burst 1600b cburst 1600b"
            )),
            v(&format!("tc qdisc add dev {dev} parent 1:10 pfifo limit 1000")),
        ],
        _ => vec![],
    }
}

impl<'a> Dut<'a> {
    fn start(path: &Path, topo: &'a BridgeTopo, cfg: &FidelityConfig) -> Result<Dut<'a>> {
        match &path.kind {
            PathKind::Veth => Err(Error::Invalid("veth path has no DUT".into())),
            PathKind::Weir { delay_ns, rate_bps } => {
                let text = weir_policy(*delay_ns, *rate_bps, cfg.seed);
                let policy = weir_core::policy::Policy::parse(&path.name, &text)
                    .map_err(|e| Error::Invalid(e.to_string()))?;
                let mut bc = weir_io::bridge::BridgeConfig::new(&topo.dut_lan, &topo.dut_wan);
                bc.device = policy
                    .build_device(weir_core::Instant::ZERO)
                    .map_err(Error::Invalid)?;
                bc.seed = policy.seed;
                bc.busy_poll = cfg.busy_poll;
                let sock = std::env::temp_dir().join(format!(
                    "weir-fidelity-{}-{}.sock",
                    std::process::id(),
                    path.name
                ));
                bc.stats_socket = Some(sock.clone());
                let bridge =
                    crate::dut::BridgeThread::start(&topo.dut, bc, Some(1), Duration::from_secs(5))
                        .map_err(|e| Error::Invalid(format!("weir bridge: {e}")))?;
                Ok(Dut::Weir { bridge, sock })
            }
            kind => {
                topo.with_kernel_bridge()?;
                let dut = Dut::Kernel { topo };
                for argv in kernel_commands(kind, &topo.dut_wan) {
                    topo.dut.exec_checked(&argv)?;
                }
                Ok(dut)
            }
        }
    }

    /// Frames the kernel dropped because weir's receive ring was full, so far (weir only;
    /// from the statistics it publishes every 250 ms).
    fn rx_drops(&self) -> Option<u64> {
        let Dut::Weir { sock, .. } = self else {
            return None;
        };
        let doc: serde_json::Value =
            serde_json::from_str(&weir_io::stats::query(sock).ok()?).ok()?;
        Some(
            ["outbound", "inbound"]
                .iter()
                .filter_map(|d| doc[d]["lane"]["kernel_rx_drops"].as_u64())
                .sum(),
        )
    }

    /// Stop; weir's report as JSON.
    fn stop(mut self) -> Option<serde_json::Value> {
        self.halt()
    }

    fn halt(&mut self) -> Option<serde_json::Value> {
        match self {
            Dut::Weir { bridge, .. } => bridge
                .stop()?
                .ok()
                .and_then(|r| serde_json::to_value(r).ok()),
            Dut::Kernel { topo } => {
                let _ = topo
                    .dut
                    .exec(&["tc", "qdisc", "del", "dev", &topo.dut_wan, "root"]);
                let _ = topo.without_kernel_bridge();
                None
            }
        }
    }
}

impl Drop for Dut<'_> {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Send one cell's flow from `snd` to `rcv` and measure it.
#[allow(clippy::too_many_arguments)]
fn measure(
    snd: &Netns,
    rcv: &Netns,
    path: &Path,
    size: u32,
    pps: u32,
    repeat: u32,
    flow: u32,
    cfg: &FidelityConfig,
) -> Result<Cell> {
    let mut cell = measure_skeleton(path, size, pps, repeat);
    let offered_bps = cell.offered_bps;
    cell.over_path_rate = path.rate_bps().is_some_and(|r| offered_bps > r);
    if offered_bps > cfg.line_rate_bps {
        cell.status = CellStatus::OverLineRate;
        return Ok(cell);
    }
    let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 9000);
    let count = (pps as u64 * cfg.cell_ms / 1000).max(10);
    let mut sink_opts = CbrSinkOpts::new(dst, Some(flow));
    sink_opts.expected = count as usize;
    // read every 20 ms rather than per packet: the sink leaves the CPU to the device
    sink_opts.wake_every = Some(Duration::from_millis(20));
    sink_opts.cpu = Some(0);
    let sink = CbrSink::start_with(rcv, sink_opts)?;
    let mut o = CbrSenderOpts::new(dst, pps as f64, (size - FCS) as usize);
    o.src = Some(SocketAddr::new(IpAddr::V4(BridgeTopo::SND_ADDR), 0));
    o.flow = flow;
    o.count = Some(count);
    o.cpu = Some(0);
    o.start_delay = Duration::from_millis(20);
    let sender = CbrSender::start(snd, o)?;
    let rep = sender.join();
    // the path may hold up to its delay plus a full queue (1000 frames at the rate)
    let extra = match path.kind {
        PathKind::Weir { delay_ns, .. } => Duration::from_nanos(delay_ns),
        _ => Duration::ZERO,
    };
    let recs = sink.finish(rep.attempted, Duration::from_millis(300) + extra);
    let sum = recs.summary(rep.attempted);
    cell.sent = rep.sent;
    cell.send_errors = rep.send_errors.total;
    cell.achieved_pps = rep.achieved_pps;
    cell.late = rep.late;
    cell.received = sum.received;
    cell.lost = sum.lost;
    cell.loss_ratio = if rep.sent > 0 {
        sum.lost.saturating_sub(rep.send_errors.total) as f64 / rep.sent as f64
    } else {
        0.0
    };
    cell.reordered = sum.reordered;
    cell.duplicates = sum.duplicates;
    cell.socket_drops = sum.socket_drops;
    cell.ifg_us = Pcts::from(&sum.ifg_us);
    cell.delay_us = Pcts::from(&sum.delay_us);
    let gaps = recs.gaps_ns();
    if !gaps.is_empty() {
        let n = cfg.keep_gaps.min(gaps.len());
        let start = (gaps.len() - n) / 2;
        cell.gaps_window_us = gaps[start..start + n]
            .iter()
            .map(|&g| (g as f64 / 1000.0) as f32)
            .collect();
    }
    if rep.achieved_pps < 0.98 * pps as f64 {
        cell.status = CellStatus::GeneratorLimited;
    }
    if sum.received == 0 {
        cell.status = CellStatus::Failed("no packet arrived".into());
    }
    Ok(cell)
}

/// Run every cell of `cfg`; `progress` gets one line per cell.
pub fn run(cfg: &FidelityConfig, mut progress: impl FnMut(&str)) -> Result<FidelityResult> {
    cfg.validate()?;
    crate::netns::require_root()?;
    let total = cfg.paths.len() * cfg.sizes.len() * cfg.rates.len() * cfg.repeats as usize;
    let mut cells = Vec::with_capacity(total);
    let mut flow = 0x4649_0000u32; // "FI" + cell number
    let mut done = 0;
    let mut pair: Option<VethPair> = None;
    let mut topo: Option<BridgeTopo> = None;
    for path in &cfg.paths {
        let (snd, rcv, dut) = match path.kind {
            PathKind::Veth => {
                if pair.is_none() {
                    pair = Some(VethPair::new("fid")?);
                }
                let p = pair.as_ref().unwrap();
                (&p.snd, &p.rcv, None)
            }
            _ => {
                if topo.is_none() {
                    topo = Some(BridgeTopo::new("fid")?);
                }
                let t = topo.as_ref().unwrap();
                (&t.snd, &t.rcv, Some(Dut::start(path, t, cfg)?))
            }
        };
        // the receiving host's stack on the agents' CPU, as on a separate machine: without
        // RPS, veth runs it inside whichever thread transmits to it (weir's, on the DUT's CPU)
        rcv.exec_checked(&[
            "sh",
            "-c",
            "echo 1 > /sys/class/net/eth0/queues/rx-0/rps_cpus",
        ])?;
        // resolve ARP before measuring (the sink ignores other flows)
        warm_up(snd, rcv)?;
        let mut path_cells = Vec::new();
        for repeat in 0..cfg.repeats {
            for &size in &cfg.sizes {
                for &pps in &cfg.rates {
                    crate::check_interrupted()?;
                    flow += 1;
                    done += 1;
                    let before = dut.as_ref().and_then(|d| d.rx_drops());
                    let cell = match measure(snd, rcv, path, size, pps, repeat, flow, cfg) {
                        Ok(mut c) => {
                            if let Some(b) = before {
                                // the bridge publishes every 250 ms
                                std::thread::sleep(Duration::from_millis(300));
                                c.dut_rx_drops = dut
                                    .as_ref()
                                    .and_then(|d| d.rx_drops())
                                    .map(|a| a.saturating_sub(b));
                            }
                            c
                        }
                        Err(e) => {
                            let mut c = measure_skeleton(path, size, pps, repeat);
                            c.status = CellStatus::Failed(e.to_string());
                            c
                        }
                    };
                    progress(&format!(
                        "[{done}/{total}] {:<16} {:>4} B {:>6} pps  {}",
                        path.name,
                        size,
                        pps,
                        cell_line(&cell)
                    ));
                    path_cells.push(cell);
                }
            }
        }
        if let Some(d) = dut {
            let report = d.stop();
            if let Some(r) = report {
                if let Some(c) = path_cells.last_mut() {
                    c.weir = Some(r);
                }
            }
        }
        cells.extend(path_cells);
    }
    drop(topo);
    drop(pair);
    let mut r = FidelityResult {
        kind: "fidelity".into(),
        meta: crate::meta(),
        config: cfg.clone(),
        cells,
        checks: Vec::new(),
    };
    r.checks = check(&r);
    Ok(r)
}

/// A cell of `path` with its offered load and nothing measured yet.
fn measure_skeleton(path: &Path, size: u32, pps: u32, repeat: u32) -> Cell {
    Cell {
        path: path.name.clone(),
        size,
        pps,
        repeat,
        status: CellStatus::Ok,
        offered_bps: size as u64 * 8 * pps as u64,
        over_path_rate: false,
        sent: 0,
        send_errors: 0,
        achieved_pps: 0.0,
        late: 0,
        received: 0,
        lost: 0,
        loss_ratio: 0.0,
        reordered: 0,
        duplicates: 0,
        socket_drops: 0,
        ifg_us: Pcts::default(),
        delay_us: Pcts::default(),
        gaps_window_us: Vec::new(),
        weir: None,
        dut_rx_drops: None,
    }
}

fn warm_up(snd: &Netns, rcv: &Netns) -> Result<()> {
    let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 9000);
    let sink = CbrSink::start(rcv, dst, Some(1))?;
    let mut o = CbrSenderOpts::new(dst, 100.0, 100);
    o.src = Some(SocketAddr::new(IpAddr::V4(BridgeTopo::SND_ADDR), 0));
    o.flow = 1;
    o.count = Some(3);
    let _ = CbrSender::start(snd, o)?.join();
    let _ = sink.finish(3, Duration::from_millis(500));
    Ok(())
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1}"))
}

fn cell_line(c: &Cell) -> String {
    match &c.status {
        CellStatus::OverLineRate => "over line rate (not run)".into(),
        CellStatus::Failed(e) => format!("FAILED: {e}"),
        s => format!(
            "ifg p10/p50/p90 {}/{}/{} µs  delay p50 {} µs  loss {:.4}%{}",
            fmt_opt(c.ifg_us.p10),
            fmt_opt(c.ifg_us.p50),
            fmt_opt(c.ifg_us.p90),
            fmt_opt(c.delay_us.p50),
            c.loss_ratio * 100.0,
            if *s == CellStatus::GeneratorLimited {
                format!("  (generator-limited: {:.0} pps)", c.achieved_pps)
            } else {
                String::new()
            }
        ),
    }
}

// ---- checks --------------------------------------------------------------------------

fn ran(c: &Cell) -> bool {
    matches!(c.status, CellStatus::Ok | CellStatus::GeneratorLimited)
}

/// Evaluate the acceptance criteria (see the module comment) on `r`'s cells.
pub fn check(r: &FidelityResult) -> Vec<Check> {
    let mut out = Vec::new();
    let path = |name: &str| r.config.paths.iter().find(|p| p.name == name);
    // 1. delay spread at 125 ms
    for p in
        r.config.paths.iter().filter(
            |p| matches!(p.kind, PathKind::Weir { delay_ns, rate_bps: None } if delay_ns > 0),
        )
    {
        let all: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| c.path == p.name && c.status == CellStatus::Ok)
            .collect();
        let cells: Vec<&Cell> = all.iter().copied().filter(|c| c.sustained()).collect();
        let excluded = unsustained_note(&all);
        let worst = cells
            .iter()
            .filter_map(|c| c.delay_us.spread().map(|s| (s, c)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        out.push(Check {
            name: format!("{}: delay p90 - p10 <= 100 us at sustained rates", p.name),
            passed: !cells.is_empty() && worst.is_some_and(|(s, _)| s <= 100.0),
            cells: cells.len(),
            detail: worst.map_or("no cells".into(), |(s, c)| {
                format!("widest {s:.1} us ({} B at {} pps){excluded}", c.size, c.pps)
            }),
        });
    }
    // 2. gaps at the emulated rate
    for p in r
        .config
        .paths
        .iter()
        .filter(|p| p.is_weir() && p.rate_bps().is_some())
    {
        let rate = p.rate_bps().unwrap();
        let cells: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| c.path == p.name && ran(c) && c.over_path_rate && c.size >= 800)
            .collect();
        let mut worst_mean: f64 = 0.0;
        let mut worst_tail: f64 = 0.0;
        let mut ok = !cells.is_empty();
        for c in &cells {
            let t = serialisation_us(c.size, rate);
            let (Some(mean), Some(p10), Some(p90)) = (c.ifg_us.mean, c.ifg_us.p10, c.ifg_us.p90)
            else {
                ok = false;
                continue;
            };
            let m = (mean - t).abs() / t;
            let tail = (p10 - t).abs().max((p90 - t).abs());
            worst_mean = worst_mean.max(m);
            worst_tail = worst_tail.max(tail);
            ok &= m <= 0.01 && tail <= 10.0;
        }
        out.push(Check {
            name: format!(
                "{}: mean gap within 1 % of the serialisation time, p10/p90 within 10 us (800/1518 B above the rate)",
                p.name
            ),
            passed: ok,
            cells: cells.len(),
            detail: format!(
                "worst mean error {:.3} %, worst p10/p90 distance {worst_tail:.1} us",
                worst_mean * 100.0
            ),
        });
    }
    // 3. no artefact loss below the rate
    for p in r.config.paths.iter().filter(|p| p.is_weir()) {
        let all: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| c.path == p.name && ran(c) && !c.over_path_rate)
            .collect();
        let cells: Vec<&Cell> = all.iter().copied().filter(|c| c.sustained()).collect();
        let excluded = unsustained_note(&all);
        let lossy: Vec<&&Cell> = cells.iter().filter(|c| c.loss_ratio > 0.0).collect();
        out.push(Check {
            name: format!("{}: zero loss below the link rate", p.name),
            passed: !cells.is_empty() && lossy.is_empty(),
            cells: cells.len(),
            detail: if lossy.is_empty() {
                format!("no loss{excluded}")
            } else {
                lossy
                    .iter()
                    .map(|c| {
                        format!(
                            "{} B at {} pps: {:.4} %",
                            c.size,
                            c.pps,
                            c.loss_ratio * 100.0
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        });
    }
    // 4. weir's gap spread vs the kernel's, same rate, same cells (no delay on either)
    let weir_like = r.config.paths.iter().find(|p| {
        matches!(
            p.kind,
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: Some(_)
            }
        )
    });
    for k in r.config.paths.iter().filter(|p| p.is_kernel()) {
        let Some(w) = weir_like.filter(|w| w.rate_bps() == k.rate_bps()) else {
            continue;
        };
        let mut n = 0;
        let mut ok = true;
        let mut worst = String::new();
        let mut worst_d = f64::MIN;
        for kc in r
            .cells
            .iter()
            .filter(|c| c.path == k.name && ran(c) && c.over_path_rate)
        {
            let Some(wc) = r.cells.iter().find(|c| {
                c.path == w.name
                    && c.size == kc.size
                    && c.pps == kc.pps
                    && c.repeat == kc.repeat
                    && ran(c)
            }) else {
                continue;
            };
            let (Some(ws), Some(ks)) = (wc.ifg_us.spread(), kc.ifg_us.spread()) else {
                continue;
            };
            n += 1;
            // no wider, allowing 1 µs of measurement noise
            ok &= ws <= ks + 1.0;
            if ws - ks > worst_d {
                worst_d = ws - ks;
                worst = format!(
                    "{} B at {} pps: weir {ws:.1} us vs {} {ks:.1} us",
                    kc.size, kc.pps, k.name
                );
            }
        }
        let _ = path;
        out.push(Check {
            name: format!(
                "{}: gap spread (p90 - p10) no wider than {}'s above the rate",
                w.name, k.name
            ),
            passed: n > 0 && ok,
            cells: n,
            detail: if n == 0 {
                "no comparable cells".into()
            } else {
                format!("closest to failing: {worst}")
            },
        });
    }
    out
}

/// "; excluded: ..." naming the cells where weir's receive ring overflowed, or "".
fn unsustained_note(cells: &[&Cell]) -> String {
    let out: Vec<String> = cells
        .iter()
        .filter(|c| !c.sustained())
        .map(|c| {
            format!(
                "{} B at {} pps ({} frames dropped at weir's receive ring)",
                c.size,
                c.pps,
                c.dut_rx_drops.unwrap_or(0)
            )
        })
        .collect();
    if out.is_empty() {
        String::new()
    } else {
        format!(
            "; not sustained by weir on this machine, excluded: {}",
            out.join(", ")
        )
    }
}

// ---- reports -------------------------------------------------------------------------

/// Mean over repeats of one statistic of the cells of (path, size, pps) that ran.
fn avg(cells: &[&Cell], f: impl Fn(&Cell) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = cells.iter().filter_map(|c| f(c)).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The seed-style tables: per path, inter-frame gaps (10th, 50th, mean, 90th percentile),
/// delays (10th, 50th, 90th) and loss ratios, rows = packet rates, column groups = frame
/// sizes; means over repeats. `*` marks generator-limited cells, blank = over line rate.
pub fn tables(r: &FidelityResult) -> String {
    let mut s = String::new();
    for p in &r.config.paths {
        let title = match p.rate_bps() {
            Some(rate) => format!(
                "{} (seed tables {}; link {} Mbit/s: serialisation {} us)",
                p.name,
                p.tables,
                rate / 1_000_000,
                r.config
                    .sizes
                    .iter()
                    .map(|&z| format!("{z} B {:.2}", serialisation_us(z, rate)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("{} (seed tables {})", p.name, p.tables),
        };
        s += &format!("\n== {title}\n");
        type Get = fn(&Cell) -> Option<f64>;
        let tabs: [(&str, &[(&str, Get)]); 3] = [
            (
                "inter-frame gap (us)",
                &[
                    ("p10", |c| c.ifg_us.p10),
                    ("p50", |c| c.ifg_us.p50),
                    ("mean", |c| c.ifg_us.mean),
                    ("p90", |c| c.ifg_us.p90),
                ],
            ),
            (
                "delay (us)",
                &[
                    ("p10", |c| c.delay_us.p10),
                    ("p50", |c| c.delay_us.p50),
                    ("p90", |c| c.delay_us.p90),
                ],
            ),
            ("loss (%)", &[("loss", |c| Some(c.loss_ratio * 100.0))]),
        ];
        for (name, cols) in tabs {
            let w = if name.starts_with("delay") { 9 } else { 7 };
            s += &format!("{name}\n{:>7}", "pps");
            for z in &r.config.sizes {
                let span = cols.len() * (w + 1);
                s += &format!(" |{:^span$}", format!("{z} B"));
            }
            s += &format!("\n{:>7}", "");
            for _ in &r.config.sizes {
                s += " |";
                for (c, _) in cols {
                    s += &format!("{c:>w$} ");
                }
            }
            s += "\n";
            for &pps in &r.config.rates {
                s += &format!("{pps:>7}");
                for &z in &r.config.sizes {
                    s += " |";
                    let cs: Vec<&Cell> = r
                        .cells
                        .iter()
                        .filter(|c| c.path == p.name && c.size == z && c.pps == pps && ran(c))
                        .collect();
                    let limited = cs.iter().any(|c| c.status == CellStatus::GeneratorLimited);
                    let lagged = cs.iter().any(|c| !c.sustained());
                    for (_, f) in cols {
                        let cell = match avg(&cs, f) {
                            None => String::new(),
                            Some(v) if name.starts_with("loss") => format!("{v:.3}"),
                            Some(v) => format!(
                                "{v:.1}{}{}",
                                if limited { "*" } else { "" },
                                if lagged { "!" } else { "" }
                            ),
                        };
                        s += &format!("{cell:>w$} ");
                    }
                }
                s += "\n";
            }
        }
    }
    s += "\n(means over repeats; * generator-limited: the sender did not reach the rate; ! weir's receive ring overflowed: weir did not keep up; blank: over the line rate, not run)\n";
    s
}

/// The checks as text lines.
pub fn checks_text(r: &FidelityResult) -> String {
    r.checks
        .iter()
        .map(|c| {
            format!(
                "{} {} [{} cells] {}\n",
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.cells,
                c.detail
            )
        })
        .collect()
}

/// Gap-per-packet plots (seed 002 Figs. 5 and 8) for the rate-limited paths: one chart per
/// path with a window of consecutive gaps of the given cell, and a reference line at the
/// serialisation time.
pub fn gap_plots(r: &FidelityResult, size: u32, pps: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in r.config.paths.iter().filter(|p| p.rate_bps().is_some()) {
        let Some(c) = r
            .cells
            .iter()
            .find(|c| c.path == p.name && c.size == size && c.pps == pps && ran(c))
        else {
            continue;
        };
        let t = serialisation_us(size, p.rate_bps().unwrap());
        let series = plot::Series {
            label: format!("{} B at {} pps", size, pps),
            points: c
                .gaps_window_us
                .iter()
                .enumerate()
                .map(|(i, &g)| (i as f64, g as f64))
                .collect(),
        };
        let opts = plot::ChartOpts {
            mark: plot::Mark::Scatter,
            hlines: vec![(t, format!("{t:.2} us"))],
            y_include_zero: true,
            ..Default::default()
        };
        let svg = plot::line_chart(
            &format!("{}: inter-frame gaps", p.name),
            "packet",
            "gap (us)",
            &[series],
            &opts,
        );
        out.push((format!("gaps-{}-{size}B-{pps}pps.svg", p.name), svg));
    }
    out
}

/// An HTML report: the tables, checks and gap plots.
pub fn html(r: &FidelityResult, plots: &[(String, String)]) -> String {
    let mut meta = String::new();
    for (k, v) in &r.meta {
        meta += &format!("{k}: {v}\n");
    }
    let mut sections = vec![
        plot::Section::new("Run").pre(meta),
        plot::Section::new("Checks").pre(checks_text(r)),
        plot::Section::new("Tables").pre(tables(r)),
    ];
    let mut figs = plot::Section::new("Inter-frame gaps per packet (seed 002 Figs. 5 and 8)");
    for (_, svg) in plots {
        figs = figs.svg(svg.clone());
    }
    sections.push(figs);
    plot::html_report("weir lab fidelity", &sections)
}

/// Choose the cell for the gap plots: 1518-byte frames at 80 kpps (the seed's Fig. 5) if
/// run, else the largest size at the highest rate above the link rate.
pub fn plot_cell(r: &FidelityResult) -> Option<(u32, u32)> {
    let has = |z: u32, p: u32| {
        r.cells
            .iter()
            .any(|c| c.size == z && c.pps == p && ran(c) && c.over_path_rate)
    };
    if has(1518, 80_000) {
        return Some((1518, 80_000));
    }
    r.cells
        .iter()
        .filter(|c| ran(c) && c.over_path_rate)
        .max_by_key(|c| (c.size, c.pps))
        .map(|c| (c.size, c.pps))
}

/// Write `result.json`, `tables.txt`, the SVG plots and `report.html` into `dir`.
pub fn write_outputs(r: &FidelityResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let mut written = Vec::new();
    let mut put = |name: &str, text: &str| -> Result<()> {
        let f = dir.join(name);
        std::fs::write(&f, text).map_err(|e| Error::io(format!("write {}", f.display()), e))?;
        written.push(f);
        Ok(())
    };
    let json = serde_json::to_string_pretty(r)
        .map_err(|e| Error::Invalid(format!("serialise result: {e}")))?;
    put("result.json", &json)?;
    put("tables.txt", &format!("{}\n{}", tables(r), checks_text(r)))?;
    let plots = plot_cell(r).map_or_else(Vec::new, |(z, p)| gap_plots(r, z, p));
    for (name, svg) in &plots {
        put(name, svg)?;
    }
    put("report.html", &html(r, &plots))?;
    Ok(written)
}

#[allow(dead_code)]
const _ASSERT_V4: Ipv4Addr = BridgeTopo::RCV_ADDR;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialisation_times_of_the_seed() {
        // seed 002, section V: 3.30, 41.28 and 78.34 us at 155 Mbit/s
        assert!((serialisation_us(64, R155) - 3.303).abs() < 0.001);
        assert!((serialisation_us(800, R155) - 41.290).abs() < 0.001);
        assert!((serialisation_us(1518, R155) - 78.348).abs() < 0.001);
    }

    #[test]
    fn weir_policy_is_valid_and_counts_the_fcs() {
        let p = weir_core::policy::Policy::parse("t", &weir_policy(D125, Some(R155), 3)).unwrap();
        assert_eq!(p.seed, 3);
        let e = &p.emulators[0].cfg;
        assert_eq!((e.rate_bps, e.overhead, e.delay.0), (Some(R155), 4, D125));
        let p0 = weir_core::policy::Policy::parse("t", &weir_policy(0, None, 1)).unwrap();
        assert!(p0.emulators[0].cfg.is_transparent());
    }

    #[test]
    fn kernel_commands_use_stab_overhead() {
        let c = kernel_commands(&PathKind::KernelTbf { rate_bps: R155 }, "wan0");
        assert_eq!(
            c[0].join(" "),
            "tc qdisc replace dev wan0 root stab overhead 4 tbf rate 155000000bit burst 1600b limit 1518000b"
        );
        assert_eq!(
            kernel_commands(&PathKind::KernelHtb { rate_bps: R155 }, "x").len(),
            3
        );
    }

    fn cell(
        path: &str,
        size: u32,
        pps: u32,
        over: bool,
        ifg: (f64, f64, f64),
        dspread: f64,
    ) -> Cell {
        let mut c = measure_skeleton(
            &Path {
                name: path.into(),
                kind: PathKind::Veth,
                tables: String::new(),
            },
            size,
            pps,
            0,
        );
        c.over_path_rate = over;
        c.ifg_us = Pcts {
            count: 100,
            mean: Some(ifg.1),
            p10: Some(ifg.0),
            p50: Some(ifg.1),
            p90: Some(ifg.2),
            ..Default::default()
        };
        c.delay_us = Pcts {
            count: 100,
            p10: Some(125_000.0),
            p50: Some(125_010.0),
            p90: Some(125_000.0 + dspread),
            ..Default::default()
        };
        c
    }

    #[test]
    fn checks_pass_and_fail_on_hand_made_cells() {
        let mut cfg = FidelityConfig::quick();
        cfg.paths
            .retain(|p| ["weir-125ms", "weir-155M", "tbf-155M"].contains(&p.name.as_str()));
        let t = serialisation_us(1518, R155);
        let mut r = FidelityResult {
            kind: "fidelity".into(),
            meta: BTreeMap::new(),
            config: cfg,
            cells: vec![
                cell("weir-125ms", 1518, 8000, false, (124.0, 125.0, 126.0), 40.0),
                cell("weir-155M", 1518, 80000, true, (t - 2.0, t, t + 2.0), 0.0),
                cell("weir-155M", 64, 8000, false, (124.0, 125.0, 126.0), 0.0),
                cell("tbf-155M", 1518, 80000, true, (t - 30.0, t, t + 30.0), 0.0),
            ],
            checks: vec![],
        };
        let c = check(&r);
        assert!(c.iter().all(|c| c.passed), "{c:#?}");
        assert_eq!(c.len(), 5, "{c:#?}");
        // widen weir's delay spread and gap tails, add loss below the rate
        r.cells[0].delay_us.p90 = Some(125_150.0);
        r.cells[1].ifg_us.p90 = Some(t + 12.0);
        r.cells[2].loss_ratio = 0.001;
        let c = check(&r);
        let failed: Vec<&str> = c
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(failed.len(), 3, "{c:#?}");
        assert!(failed[0].contains("delay p90 - p10"));
        assert!(failed[1].contains("mean gap within 1 %"));
        assert!(failed[2].contains("zero loss"));
        let t = tables(&r);
        assert!(t.contains("== weir-155M"), "{t}");
        assert!(t.contains("78.35"), "{t}");
    }
}
