//! The fidelity lab's outputs: the seed-style tables (inter-frame gap, delay and loss per
//! path, rows = packet rates, column groups = frame sizes), the gap-per-packet plots (seed 002
//! Figs. 5 and 8), the HTML report and the files.

use super::{ran, serialisation_us, Cell, CellStatus, FidelityResult};
use crate::report::{self, checks_text, meta_text, to_json, write_files, Section};
use crate::Result;

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
    if !r.hosts.is_empty() {
        s += &format!(
            "Real hosts ({}); one-way delays put on the sender's clock by the estimated \
             offset, good to its uncertainty:\n",
            r.config.topology.as_ref().map_or("", |t| t.file.as_str())
        );
        for h in &r.hosts {
            s += &format!("  {}\n", h.line());
        }
    }
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
        let mut tabs: Vec<(&str, &[(&str, Get)])> = vec![
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
        if let super::PathKind::Weir {
            jitter: Some(j), ..
        } = p.kind
        {
            s += &format!(
                "jitter: normal, sigma {} us, lag-1 autocorrelation set to {}\n",
                j.sigma_ns / 1000,
                j.correlation
            );
            tabs.push((
                "delays' lag-1 autocorrelation",
                &[("lag1", |c| c.delay_lag1)],
            ));
        }
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
                            Some(v) if name.starts_with("loss") || name.contains("lag-1") => {
                                format!("{v:.3}")
                            }
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
        let series = report::Series {
            label: format!("{} B at {} pps", size, pps),
            points: c
                .gaps_window_us
                .iter()
                .enumerate()
                .map(|(i, &g)| (i as f64, g as f64))
                .collect(),
            mark: None,
        };
        let opts = report::ChartOpts {
            mark: report::Mark::Scatter,
            hlines: vec![(t, format!("{t:.2} us"))],
            y_include_zero: true,
            ..Default::default()
        };
        let svg = report::line_chart(
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
    let mut sections = vec![
        Section::new("Run").pre(meta_text(&r.meta)),
        Section::new("Checks").pre(checks_text(&r.checks)),
        Section::new("Tables").pre(tables(r)),
    ];
    let mut figs = Section::new("Inter-frame gaps per packet (seed 002 Figs. 5 and 8)");
    for (_, svg) in plots {
        figs = figs.svg(svg.clone());
    }
    sections.push(figs);
    report::html_report("weir lab fidelity", &sections)
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
    let plots = plot_cell(r).map_or_else(Vec::new, |(z, p)| gap_plots(r, z, p));
    let mut files = vec![
        ("result.json".to_string(), to_json(r)?),
        (
            "tables.txt".to_string(),
            format!("{}\n{}", tables(r), checks_text(&r.checks)),
        ),
    ];
    files.extend(plots.iter().cloned());
    files.push(("report.html".to_string(), html(r, &plots)));
    write_files(dir, &files)
}
