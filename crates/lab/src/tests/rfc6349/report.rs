//! The RFC 6349 lab's report: per path the pre-test measurements (path MTU, baseline RTT,
//! bottleneck bandwidth, BDP and the minimum receive window), the throughput tests' table,
//! and each test's three metrics written out as the RFC's formulas with the measured
//! numbers; the checks. Outputs: `result.json`, `tables.txt`, `tests.csv`, `ttr.svg` and
//! `buffer-delay.svg` (a bar per path and connection count), `report.html`.

use std::path::{Path, PathBuf};

use super::{metrics, PathRun, Rfc6349Result, TcpTest, FRAME_OVERHEAD};
use crate::report::{
    self, bar_chart, checks_text, csv_field, fmt_opt, html_report, meta_text, text_table, BarOpts,
    Section,
};
use crate::Result;

fn mbit(x: f64) -> String {
    format!("{:.3}", x / 1e6)
}

/// Thousands separated by commas: 6,290,000.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The pre-test measurements of a path, one line each.
fn path_text(p: &PathRun) -> String {
    let mut s = String::new();
    let mtu = p.mtu.as_ref().and_then(|m| m.mtu);
    s += &format!(
        "  path MTU (3.1): {} ({} probe size(s))\n",
        mtu.map_or("not found".into(), |m| format!("{m} B")),
        p.mtu.as_ref().map_or(0, |m| m.probes.len())
    );
    match p.baseline {
        Some(b) => {
            s += &format!(
                "  baseline RTT (3.2.1): {:.3} ms (min of {} probes; median {:.3}, mean {:.3}, {} lost)\n",
                b.min_ms, b.probes, b.p50_ms, b.mean_ms, b.lost
            )
        }
        None => s += "  baseline RTT (3.2.1): no probe came back\n",
    }
    if let Some(b) = p.bb {
        s += &format!(
            "  bottleneck bandwidth (3.2.2): {} Mbit/s ({}-byte frames offered at {} Mbit/s, sent {}, lost {})\n",
            b.bb_bps.map_or("n/a".into(), mbit),
            b.frame,
            mbit(b.achieved_bps),
            b.sent,
            b.lost
        );
    }
    if let (Some(bdp), Some(b)) = (p.bdp_bits(), p.baseline) {
        let bb = p.bb.and_then(|x| x.bb_bps).unwrap_or(0.0);
        s += &format!(
            "  BDP = {} Mbit/s x {:.3} ms = {} bits; minimum TCP receive window = BDP / 8 = {} bytes (receiver's tcp_rmem max {})\n",
            mbit(bb),
            b.min_ms,
            grouped(bdp.round() as u64),
            grouped(metrics::min_rwnd_bytes(bb, b.min_ms / 1e3).round() as u64),
            p.rmem_max.map_or("?".into(), grouped)
        );
    }
    s
}

/// The throughput tests of a path as a table.
fn tests_table(p: &PathRun) -> String {
    let mut rows = vec![vec![
        "conns".to_string(),
        "bytes".into(),
        "throughput Mbit/s".into(),
        "max achievable".into(),
        "% of max".into(),
        "TTR".into(),
        "efficiency %".into(),
        "avg RTT ms".into(),
        "buffer delay %".into(),
        "Jain".into(),
        "peak window / BDP".into(),
    ]];
    let bdp_bytes = p.bdp_bits().map(|b| b / 8.0);
    for t in &p.tests {
        let m = t.metrics;
        rows.push(vec![
            t.connections.to_string(),
            grouped(t.size_bytes),
            m.map_or("n/a".into(), |m| mbit(m.throughput_bps)),
            m.map_or("n/a".into(), |m| mbit(m.max_tcp_bps)),
            fmt_opt(m.map(|m| m.throughput_bps / m.max_tcp_bps * 100.0), 1),
            fmt_opt(m.map(|m| m.ttr), 3),
            fmt_opt(m.and_then(|m| m.efficiency_pct), 3),
            fmt_opt(m.and_then(|m| m.avg_rtt_ms), 2),
            fmt_opt(m.and_then(|m| m.buffer_delay_pct), 1),
            fmt_opt(m.and_then(|m| m.jain), 3),
            fmt_opt(
                m.zip(bdp_bytes)
                    .map(|(m, b)| m.peak_window_bytes as f64 / b),
                2,
            ),
        ]);
    }
    text_table(&rows, 0)
}

/// A test's metrics as the RFC's formulas with the numbers.
fn formulas(p: &PathRun, t: &TcpTest) -> String {
    let Some(m) = t.metrics else {
        return format!(
            "  {} connection(s): no metrics (no bottleneck bandwidth or nothing received)\n",
            t.connections
        );
    };
    let bb = p.bb.and_then(|b| b.bb_bps).unwrap_or(0.0);
    let mtu = p.mtu_or_host();
    let mut s = format!(
        "  {} connection(s), {} bytes:\n",
        t.connections,
        grouped(t.size_bytes)
    );
    s += &format!(
        "    Maximum Achievable TCP Throughput = BB x MSS / (MTU + {FRAME_OVERHEAD}) = {} x {} / {} = {} Mbit/s\n",
        mbit(bb),
        m.payload,
        mtu + FRAME_OVERHEAD,
        mbit(m.max_tcp_bps)
    );
    s += &format!(
        "    TCP Transfer Time Ratio = actual / ideal = {:.3} s / ({} bytes x 8 / {} Mbit/s = {:.3} s) = {:.3}\n",
        m.actual_s,
        grouped(t.size_bytes),
        mbit(m.max_tcp_bps),
        m.ideal_s,
        m.ttr
    );
    s += &format!(
        "    TCP Efficiency = (transmitted - retransmitted) / transmitted x 100 = ({} - {}) / {} x 100 = {} %\n",
        grouped(m.transmitted),
        grouped(m.retransmitted),
        grouped(m.transmitted),
        fmt_opt(m.efficiency_pct, 3)
    );
    match (m.avg_rtt_ms, p.baseline, m.buffer_delay_pct) {
        (Some(a), Some(b), Some(bd)) => {
            s += &format!(
                "    Buffer Delay = (average RTT - baseline RTT) / baseline RTT x 100 = ({a:.3} - {:.3}) / {:.3} x 100 = {bd:.1} %\n",
                b.min_ms, b.min_ms
            )
        }
        _ => s += "    Buffer Delay: n/a (no RTT sample or no baseline)\n",
    }
    for (i, c) in t.conns.iter().enumerate() {
        if let Some(e) = &c.error {
            s += &format!("    connection {}: {e}\n", i + 1);
        }
    }
    s
}

/// The report as text.
pub fn text(r: &Rfc6349Result) -> String {
    let c = &r.config;
    let path = match &c.topology {
        None => format!("the line behind the DUT at {} % of its rate", c.line_pct),
        Some(t) if t.wan.is_some() => format!(
            "real hosts ({}: client, server over SSH), the line at [wan] behind the DUT at {} % \
             of its rate",
            t.file, c.line_pct
        ),
        Some(t) => format!(
            "real hosts ({}: client, server over SSH), the network's own path",
            t.file
        ),
    };
    let mut s = format!(
        "RFC 6349 TCP throughput tests: {} congestion control, transfers of {} s at the maximum achievable TCP throughput; {path}\n\
         (rates count Ethernet frames without FCS, as the DUTs do)\n\n",
        c.cc, c.transfer_s
    );
    for p in &r.paths {
        s += &format!("{}\n", p.name());
        for h in &p.hosts {
            s += &format!("  {}\n", h.line());
        }
        s += &path_text(p);
        s += &tests_table(p);
        s += "\n";
        for t in &p.tests {
            s += &formulas(p, t);
        }
        for e in &p.errors {
            s += &format!("  error: {e}\n");
        }
        s += "\n";
    }
    s += &checks_text(&r.checks);
    s
}

/// One row per throughput test.
fn csv(r: &Rfc6349Result) -> String {
    let mut s = String::from(
        "dut,rate_bps,rtt_ms,run,path_mtu,baseline_rtt_ms,bb_bps,connections,bytes,actual_s,ideal_s,ttr,throughput_bps,max_tcp_bps,transmitted,retransmitted,efficiency_pct,avg_rtt_ms,buffer_delay_pct,jain,complete\n",
    );
    let o = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x}"));
    for p in &r.paths {
        for t in &p.tests {
            let m = t.metrics;
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                csv_field(&p.dut),
                p.link.up_bps,
                p.link.rtt_ms,
                p.run + 1,
                p.mtu
                    .as_ref()
                    .and_then(|m| m.mtu)
                    .map_or(String::new(), |m| m.to_string()),
                o(p.baseline.map(|b| b.min_ms)),
                o(p.bb.and_then(|b| b.bb_bps)),
                t.connections,
                t.size_bytes,
                o(m.map(|m| m.actual_s)),
                o(m.map(|m| m.ideal_s)),
                o(m.map(|m| m.ttr)),
                o(m.map(|m| m.throughput_bps)),
                o(m.map(|m| m.max_tcp_bps)),
                m.map_or(String::new(), |m| m.transmitted.to_string()),
                m.map_or(String::new(), |m| m.retransmitted.to_string()),
                o(m.and_then(|m| m.efficiency_pct)),
                o(m.and_then(|m| m.avg_rtt_ms)),
                o(m.and_then(|m| m.buffer_delay_pct)),
                o(m.and_then(|m| m.jain)),
                t.complete()
            );
        }
    }
    s
}

/// A bar chart of one metric: a group per link and connection count, a bar per DUT (the
/// mean over runs, the largest distance from it as the error bar).
fn chart(
    r: &Rfc6349Result,
    title: &str,
    unit: &str,
    value: impl Fn(&TcpTest) -> Option<f64>,
    hline: (f64, String),
) -> String {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for p in &r.paths {
        for t in &p.tests {
            let g = (p.link.name(), t.connections);
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    let names: Vec<String> = r.config.duts.clone();
    let values: Vec<Vec<Option<(f64, f64)>>> = groups
        .iter()
        .map(|(link, n)| {
            names
                .iter()
                .map(|d| {
                    let xs: Vec<f64> = r
                        .paths
                        .iter()
                        .filter(|p| &p.dut == d && &p.link.name() == link)
                        .flat_map(|p| p.tests.iter().filter(|t| t.connections == *n))
                        .filter_map(&value)
                        .collect();
                    (!xs.is_empty()).then(|| {
                        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                        let spread = xs.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max);
                        (mean, spread)
                    })
                })
                .collect()
        })
        .collect();
    let labels: Vec<String> = groups
        .into_iter()
        .map(|(link, n)| format!("{link} x{n}"))
        .collect();
    bar_chart(
        title,
        unit,
        &labels,
        &names,
        &values,
        &BarOpts {
            hlines: vec![hline],
            ..BarOpts::default()
        },
    )
}

/// `result.json`, `tables.txt`, `tests.csv`, `ttr.svg`, `buffer-delay.svg`, `report.html`.
pub fn write_outputs(r: &Rfc6349Result, dir: &Path) -> Result<Vec<PathBuf>> {
    let t = text(r);
    let ttr = chart(
        r,
        "TCP Transfer Time Ratio (RFC 6349 3.3.1)",
        "actual / ideal",
        |t| t.metrics.map(|m| m.ttr),
        (1.0, "ideal".into()),
    );
    let bd = chart(
        r,
        "Buffer Delay Percentage (RFC 6349 3.3.3)",
        "% of the baseline RTT",
        |t| t.metrics.and_then(|m| m.buffer_delay_pct),
        (super::BD_MAX_PCT, "weir's check".into()),
    );
    let mut sections = vec![
        Section::new("Run").pre(meta_text(&r.meta)),
        Section::new("Results").pre(t.clone()),
        Section::new("Transfer Time Ratio").svg(ttr.clone()),
        Section::new("Buffer Delay").svg(bd.clone()),
    ];
    for p in &r.paths {
        sections.push(Section::new(format!("{}: policy", p.name())).pre(p.policy.clone()));
    }
    report::write_files(
        dir,
        &[
            ("result.json".to_string(), report::to_json(r)?),
            ("tables.txt".to_string(), t),
            ("tests.csv".to_string(), csv(r)),
            ("ttr.svg".to_string(), ttr),
            ("buffer-delay.svg".to_string(), bd),
            (
                "report.html".to_string(),
                html_report("weir lab rfc6349", &sections),
            ),
        ],
    )
}
