//! Running the fidelity lab: building each path (a veth pair, weir's bridge with one emulated
//! link, or the kernel bridge with a TBF or HTB on its egress port) and measuring each cell
//! with the CBR agents — in namespaces of this machine, or with `--topology` on the real
//! hosts `sender` and `receiver` with the paths at the topology's `[dut]` (the agents run
//! there; the receiver's timestamps are put on the sender's clock by their estimated
//! offset).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{
    check, Cell, CellStatus, FidelityConfig, FidelityResult, JitterSpec, Path, PathKind, FCS,
};
use crate::agents::cbr::{CbrRecords, CbrSenderOpts, CbrSinkOpts};
use crate::dut::{bridge_config, BridgeThread};
use crate::remote::Host;
use crate::report;
use crate::stats::dist::Pcts;
use crate::tests::testbed::{Owned, HOSTS};
use crate::topo::{require_root, BridgeTopo, DutPlace, VethPair};
use crate::{Error, Result};

/// A running DUT at a testbed's DUT place: weir in a thread, or kernel qdiscs.
enum Dut<'a> {
    Weir {
        bridge: BridgeThread,
        /// The bridge's statistics socket (per-cell receive-ring drops).
        sock: std::path::PathBuf,
    },
    Kernel {
        place: DutPlace<'a>,
    },
}

/// The policy that makes weir one emulated link (no shaping, every packet to the link
/// profile).
pub fn weir_policy(
    delay_ns: u64,
    rate_bps: Option<u64>,
    jitter: Option<JitterSpec>,
    seed: u64,
) -> String {
    let mut s = format!(
        "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nemulate = \"wan\"\nseed = {seed}\n\n\
         [[emulate]]\nname = \"wan\"\ndelay = \"{}us\"\noverhead = {FCS}\n",
        delay_ns / 1000
    );
    if let Some(r) = rate_bps {
        s += &format!("rate = \"{r}bit\"\n");
    }
    if let Some(j) = jitter {
        s += &format!(
            "jitter = \"{}us\"\ndistribution = \"normal\"\njitter_correlation = \"{}%\"\nreorder = true\n",
            j.sigma_ns / 1000,
            j.correlation * 100.0
        );
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
    fn start(path: &Path, place: DutPlace<'a>, cfg: &FidelityConfig) -> Result<Dut<'a>> {
        match &path.kind {
            PathKind::Veth => Err(Error::Invalid("veth path has no DUT".into())),
            PathKind::Weir {
                delay_ns,
                rate_bps,
                jitter,
            } => {
                let text = weir_policy(*delay_ns, *rate_bps, *jitter, cfg.seed);
                let policy = weir_core::policy::Policy::parse(&path.name, &text)
                    .map_err(|e| Error::Invalid(e.to_string()))?;
                let mut bc =
                    bridge_config(&policy, place.lan, place.wan).map_err(Error::Invalid)?;
                bc.busy_poll = cfg.busy_poll;
                let sock = std::env::temp_dir().join(format!(
                    "weir-fidelity-{}-{}.sock",
                    std::process::id(),
                    path.name
                ));
                bc.stats_socket = Some(sock.clone());
                let bridge = BridgeThread::start(place.ns, bc, Some(1), Duration::from_secs(5))
                    .map_err(|e| Error::Invalid(format!("weir bridge: {e}")))?;
                Ok(Dut::Weir { bridge, sock })
            }
            kind => {
                // the guard first: its Drop undoes whatever was done if a command fails
                let dut = Dut::Kernel { place };
                place.with_kernel_bridge()?;
                for argv in kernel_commands(kind, place.wan) {
                    place.ns.exec_checked(&argv)?;
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
            Dut::Kernel { place } => {
                let _ = place
                    .ns
                    .exec(&["tc", "qdisc", "del", "dev", place.wan, "root"]);
                let _ = place.without_kernel_bridge();
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

/// The hosts a cell's flow crosses between, and how far the receiver's clock is ahead of
/// the sender's (ns; 0 on one machine).
#[derive(Clone, Copy)]
struct Ends<'a> {
    snd: Host<'a>,
    rcv: Host<'a>,
    rcv_ahead_ns: i64,
}

/// Send one cell's flow from `ends.snd` to `ends.rcv` and measure it.
fn measure(
    ends: Ends<'_>,
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
    let sink = ends.rcv.cbr_sink(sink_opts)?;
    let mut o = CbrSenderOpts::new(dst, pps as f64, (size - FCS) as usize);
    o.src = Some(SocketAddr::new(IpAddr::V4(BridgeTopo::SND_ADDR), 0));
    o.flow = flow;
    o.count = Some(count);
    o.cpu = Some(0);
    o.start_delay = Duration::from_millis(20);
    let rep = ends.snd.cbr_sender(o)?.join()?;
    // the path may hold up to its delay plus a full queue (1000 frames at the rate)
    let extra = match path.kind {
        PathKind::Weir { delay_ns, .. } => Duration::from_nanos(delay_ns),
        _ => Duration::ZERO,
    };
    let mut recs = sink.finish(rep.attempted, Duration::from_millis(300) + extra)?;
    recs.rx_on_sender_clock(ends.rcv_ahead_ns);
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
    cell.delay_lag1 = delay_lag1(&recs);
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
    require_root()?;
    let total = cfg.paths.len() * cfg.sizes.len() * cfg.rates.len() * cfg.repeats as usize;
    let mut cells = Vec::with_capacity(total);
    let mut flow = 0x4649_0000u32; // "FI" + cell number
    let mut done = 0;
    let mut pair: Option<VethPair> = None;
    // the testbed of every path but veth: namespaces, or the topology's hosts (connected
    // once, addressed as in namespaces)
    let mut owned: Option<Owned> = None;
    let mut hosts = Vec::new();
    for path in &cfg.paths {
        let (ends, dut) = match path.kind {
            PathKind::Veth => {
                if pair.is_none() {
                    pair = Some(VethPair::new("fid")?);
                }
                let p = pair.as_ref().unwrap();
                let ends = Ends {
                    snd: Host::Local(&p.snd),
                    rcv: Host::Local(&p.rcv),
                    rcv_ahead_ns: 0,
                };
                (ends, None)
            }
            _ => {
                if owned.is_none() {
                    let o = Owned::new(cfg.topology.as_ref(), HOSTS, "fid", false)?;
                    o.bed()?.address(&[])?;
                    hosts = o.host_info();
                    owned = Some(o);
                }
                let o = owned.as_ref().unwrap();
                let bed = o.bed()?;
                let place = bed
                    .place
                    .ok_or_else(|| Error::Invalid("fidelity: the DUT cannot be external".into()))?;
                let ends = Ends {
                    snd: bed.snd,
                    rcv: bed.rcv,
                    rcv_ahead_ns: o.receiver_ahead().0,
                };
                (ends, Some(Dut::start(path, place, cfg)?))
            }
        };
        if let Host::Local(rcv) = ends.rcv {
            // the receiving host's stack on the agents' CPU, as on a separate machine:
            // without RPS, veth runs it inside whichever thread transmits to it (weir's,
            // on the DUT's CPU)
            rcv.exec_checked(&[
                "sh",
                "-c",
                "echo 1 > /sys/class/net/eth0/queues/rx-0/rps_cpus",
            ])?;
        }
        // resolve ARP before measuring (the sink ignores other flows)
        warm_up(ends)?;
        let mut path_cells = Vec::new();
        for repeat in 0..cfg.repeats {
            for &size in &cfg.sizes {
                for &pps in &cfg.rates {
                    crate::check_interrupted()?;
                    flow += 1;
                    done += 1;
                    let before = dut.as_ref().and_then(|d| d.rx_drops());
                    let cell = match measure(ends, path, size, pps, repeat, flow, cfg) {
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
                        // a real host that died ends the lab
                        Err(e) if owned.as_ref().and_then(Owned::dead_host).is_some() => {
                            return Err(e)
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
    drop(owned);
    drop(pair);
    let mut r = FidelityResult {
        kind: "fidelity".into(),
        meta: report::meta(),
        config: cfg.clone(),
        cells,
        checks: Vec::new(),
        hosts,
    };
    r.checks = check(&r);
    Ok(r)
}

/// A cell of `path` with its offered load and nothing measured yet.
/// The lag-1 autocorrelation of the delays in sequence-number order (the sending order:
/// jitter may reorder arrivals). A lost frame makes its neighbours adjacent; the cells the
/// check reads are below the rate, where none is lost.
fn delay_lag1(recs: &CbrRecords) -> Option<f64> {
    let mut by_seq: Vec<(u64, f64)> = recs
        .records
        .iter()
        .map(|r| (r.seq, r.rx_ns as f64 - r.tx_ns as f64))
        .collect();
    by_seq.sort_by_key(|r| r.0);
    by_seq.dedup_by_key(|r| r.0);
    let delays: Vec<f64> = by_seq.into_iter().map(|r| r.1).collect();
    (delays.len() >= 3).then(|| weir_core::emulate::corr::lag1_autocorrelation(&delays))
}

pub(super) fn measure_skeleton(path: &Path, size: u32, pps: u32, repeat: u32) -> Cell {
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
        delay_lag1: None,
        gaps_window_us: Vec::new(),
        weir: None,
        dut_rx_drops: None,
    }
}

fn warm_up(ends: Ends<'_>) -> Result<()> {
    let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 9000);
    let sink = ends.rcv.cbr_sink(CbrSinkOpts::new(dst, Some(1)))?;
    let mut o = CbrSenderOpts::new(dst, 100.0, 100);
    o.src = Some(SocketAddr::new(IpAddr::V4(BridgeTopo::SND_ADDR), 0));
    o.flow = 1;
    o.count = Some(3);
    ends.snd.cbr_sender(o)?.join()?;
    sink.finish(3, Duration::from_millis(500))?;
    Ok(())
}

/// One decimal, or `-` when missing.
fn or_dash(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1}"))
}

fn cell_line(c: &Cell) -> String {
    match &c.status {
        CellStatus::OverLineRate => "over line rate (not run)".into(),
        CellStatus::Failed(e) => format!("FAILED: {e}"),
        s => format!(
            "ifg p10/p50/p90 {}/{}/{} µs  delay p50 {} µs  loss {:.4}%{}",
            or_dash(c.ifg_us.p10),
            or_dash(c.ifg_us.p50),
            or_dash(c.ifg_us.p90),
            or_dash(c.delay_us.p50),
            c.loss_ratio * 100.0,
            if *s == CellStatus::GeneratorLimited {
                format!("  (generator-limited: {:.0} pps)", c.achieved_pps)
            } else {
                String::new()
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{D125, R155};
    use super::*;

    #[test]
    fn weir_policy_is_valid_and_counts_the_fcs() {
        let p =
            weir_core::policy::Policy::parse("t", &weir_policy(D125, Some(R155), None, 3)).unwrap();
        assert_eq!(p.seed, 3);
        let e = &p.emulators[0].cfg;
        assert_eq!(
            (e.rate_bps, e.framing.overhead(), e.delay.0),
            (Some(R155), 4, D125)
        );
        let p0 = weir_core::policy::Policy::parse("t", &weir_policy(0, None, None, 1)).unwrap();
        assert!(p0.emulators[0].cfg.is_transparent());
        // the jitter row: normal, σ 5 ms, correlation 0.5, free to reorder
        let j = super::super::JITTER;
        let pj =
            weir_core::policy::Policy::parse("t", &weir_policy(D125, None, Some(j), 1)).unwrap();
        let e = &pj.emulators[0].cfg;
        assert!(e.reorder);
        assert_eq!(e.jitter_correlation, 0.5);
        assert_eq!(
            weir_core::emulate::spec::describe(e),
            "delay 125ms σ 5ms normal, correlation 50%, may reorder"
        );
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
}
