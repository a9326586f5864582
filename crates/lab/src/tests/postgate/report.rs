//! `weir lab postgate`'s outputs: the summary table per scenario, the per-class table,
//! the checks; Figs. 3-5 and the adaptive rates as SVG; result.json and report.html.

use std::path::{Path, PathBuf};

use super::{DeviceRun, LabResult};
use crate::report::{
    self, checks_text, file_safe, html_report, line_chart, meta_text, text_table, ChartOpts,
    Recording, Section, Series, TimeSeries,
};
use crate::Result;

/// The tables and checks as text.
pub fn text(r: &LabResult) -> String {
    let c = &r.config;
    let mut s = format!(
        "ATU-C: {:.1} Mbit/s, {}-packet queue, {} ms; {} bulk TCP flows ({}) in {} classes, a {} kbit/s CBR\n",
        c.line_bps as f64 / 1e6,
        c.atu_queue,
        c.line_delay_ms,
        c.flows(),
        c.cc,
        c.classes,
        c.cbr_bps / 1000
    );
    for scenario in ["seed", "varying"] {
        let runs: Vec<&DeviceRun> = r.runs.iter().filter(|x| x.scenario == scenario).collect();
        if runs.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "\n{}\n",
            if scenario == "seed" {
                "Seed 003's scenario (ATU-C queueing delay and utilisation of the line after the warm-up):"
            } else {
                "The varying line (trace steps through the rates; all flows throughout):"
            }
        ));
        let mut rows = vec![vec![
            "device".to_string(),
            "delay p50 ms".into(),
            "p95 ms".into(),
            "p95 whole run".into(),
            "max ms".into(),
            "utilisation %".into(),
            "least 10 s %".into(),
            "CBR loss %".into(),
            "CBR delay p50/p99 ms".into(),
            "CBR jitter p99 ms".into(),
            "flows".into(),
        ]];
        for x in &runs {
            let ms = |d: &Option<crate::stats::dist::DistUs>,
                      f: fn(&crate::stats::dist::DistUs) -> f64| {
                d.as_ref()
                    .map_or("-".into(), |d| format!("{:.1}", f(d) / 1e3))
            };
            rows.push(vec![
                x.name.clone(),
                format!("{:.1}", x.delay_p50_ms),
                format!("{:.1}", x.delay_p95_ms),
                format!("{:.1}", x.delay_p95_all_ms),
                format!("{:.1}", x.delay_max_ms),
                format!("{:.1}", x.utilisation * 100.0),
                format!("{:.1}", x.min_utilisation_10s * 100.0),
                format!("{:.2}", x.cbr.loss_pct),
                format!(
                    "{}/{}",
                    ms(&x.cbr.delay, |d| d.p50),
                    ms(&x.cbr.delay, |d| d.p99)
                ),
                ms(&x.cbr.jitter, |d| d.p99),
                format!("{}/{}", x.flows_ok, x.flows),
            ]);
        }
        s.push_str(&text_table(&rows, 1));
        s.push_str("\nMean goodput per class while every flow runs, kbit/s (Fig. 4):\n");
        let k = runs.first().map_or(0, |x| x.class_mean_bps.len());
        let mut head = vec!["device".to_string()];
        head.extend((0..k.saturating_sub(1)).map(|i| format!("class {i}")));
        head.push("CBR".into());
        let mut rows = vec![head];
        for x in &runs {
            let mut row = vec![x.name.clone()];
            row.extend(x.class_mean_bps.iter().map(|b| format!("{:.0}", b / 1e3)));
            rows.push(row);
        }
        s.push_str(&text_table(&rows, 1));
    }
    if let Some(x) = r.runs.iter().find(|x| !x.hosts.is_empty()) {
        s.push_str(&format!(
            "\nReal hosts ({}; clocks as estimated for the first run{}):\n",
            r.config.topology.as_ref().map_or("", |t| t.file.as_str()),
            if x.cbr.delay.is_none() {
                "; too uncertain for the CBR's one-way delay, shown as -"
            } else {
                ""
            }
        ));
        for h in &x.hosts {
            s.push_str(&format!("  {}\n", h.line()));
        }
    }
    s.push_str("\nChecks:\n");
    s.push_str(&checks_text(&r.checks));
    s
}

fn opts() -> ChartOpts {
    ChartOpts {
        y_include_zero: true,
        ..ChartOpts::default()
    }
}

/// The charts: (file name, SVG).
fn charts(r: &LabResult) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for scenario in ["seed", "varying"] {
        let runs: Vec<&DeviceRun> = r.runs.iter().filter(|x| x.scenario == scenario).collect();
        if runs.is_empty() {
            continue;
        }
        let series = |f: &dyn Fn(&super::Sample) -> Option<f64>| -> Vec<Series> {
            runs.iter()
                .map(|x| {
                    Series::new(
                        x.name.clone(),
                        x.samples
                            .iter()
                            .map(|s| (s.t_s, f(s).unwrap_or(f64::NAN)))
                            .collect(),
                    )
                })
                .collect()
        };
        out.push((
            format!("fig3-atu-delay-{scenario}.svg"),
            line_chart(
                &format!("Fig. 3: queueing delay at the ATU-C ({scenario})"),
                "time (s)",
                "delay (ms)",
                &series(&|s| s.atu_delay_ms),
                &opts(),
            ),
        ));
        let mut thr = series(&|s| Some(s.line_bps / 1e6));
        if let Some(x) = runs.first() {
            thr.push(Series::new(
                "line capacity",
                x.samples
                    .iter()
                    .map(|s| (s.t_s, s.capacity_bps / 1e6))
                    .collect(),
            ));
        }
        out.push((
            format!("fig3-line-throughput-{scenario}.svg"),
            line_chart(
                &format!("Fig. 3: throughput of the line ({scenario})"),
                "time (s)",
                "Mbit/s",
                &thr,
                &opts(),
            ),
        ));
        let adaptive: Vec<&&DeviceRun> = runs
            .iter()
            .filter(|x| x.samples.iter().any(|s| s.rate_bps.is_some()))
            .collect();
        if !adaptive.is_empty() {
            let mut rate: Vec<Series> = adaptive
                .iter()
                .map(|x| {
                    Series::new(
                        x.name.clone(),
                        x.samples
                            .iter()
                            .map(|s| (s.t_s, s.rate_bps.map_or(f64::NAN, |b| b / 1e6)))
                            .collect(),
                    )
                })
                .collect();
            rate.extend(thr.last().cloned());
            out.push((
                format!("adaptive-rate-{scenario}.svg"),
                line_chart(
                    &format!("The adaptive devices' link rate ({scenario})"),
                    "time (s)",
                    "Mbit/s",
                    &rate,
                    &opts(),
                ),
            ));
        }
        for x in &runs {
            let k = x.samples.first().map_or(0, |s| s.class_bps.len());
            out.push((
                format!("fig4-classes-{scenario}-{}.svg", file_safe(&x.name)),
                line_chart(
                    &format!(
                        "Fig. 4: bandwidth per class at the clients, {} ({scenario})",
                        x.name
                    ),
                    "time (s)",
                    "kbit/s",
                    &per_class(x, k, |s, i| s.class_bps.get(i).map(|b| b / 1e3)),
                    &opts(),
                ),
            ));
            let w = x.samples.iter().map(|s| s.weights.len()).max().unwrap_or(0);
            if w > 0 && matches!(x.device, super::Device::Postgate { .. }) {
                out.push((
                    format!("fig5-weights-{scenario}-{}.svg", file_safe(&x.name)),
                    line_chart(
                        &format!("Fig. 5: Postgate's weights, {} ({scenario})", x.name),
                        "time (s)",
                        "weight (fraction of the line)",
                        &per_class(x, w, |s, i| s.weights.get(i).copied()),
                        &opts(),
                    ),
                ));
            }
        }
    }
    out
}

/// One series per class (`k` of them, the last the CBR's) of `f(sample, class)`.
fn per_class(
    x: &DeviceRun,
    k: usize,
    f: impl Fn(&super::Sample, usize) -> Option<f64>,
) -> Vec<Series> {
    (0..k)
        .map(|i| {
            let label = if i + 1 == k {
                "CBR".to_string()
            } else {
                format!("class {i}")
            };
            let points = x
                .samples
                .iter()
                .map(|s| (s.t_s, f(s, i).unwrap_or(f64::NAN)))
                .collect();
            Series::new(label, points)
        })
        .collect()
}

/// Every device run's samples (at each sample period's end) as Flent's `tcp_ndown` test
/// names N download streams (`download_streams` = the classes): class k's goodput at the
/// clients as `TCP download::k` (Mbit/s; each class is 12 bulk flows in the paper), so
/// Flent's `download` plots draw the classes; beside them, in weir's names (outside
/// tcp_ndown's globs), `CBR goodput`, `Line throughput`, `Line capacity` and an adaptive
/// device's `Device rate` (Mbit/s), and `ATU-C queueing delay` and the device's
/// `Probe delay` (ms). The part is the scenario (`seed`, `varying`), the DUT the device;
/// TIME is the lab's start (`meta`'s `unix_time`).
pub fn recordings(r: &LabResult) -> Vec<Recording> {
    let start = report::flent::unix_time(&r.meta);
    let classes = r.config.classes;
    r.runs
        .iter()
        .map(|x| {
            let col = |f: &dyn Fn(&super::Sample) -> Option<f64>| -> Vec<(f64, f64)> {
                x.samples
                    .iter()
                    .map(|s| (s.t_s, f(s).unwrap_or(f64::NAN)))
                    .collect()
            };
            let mbps = |v: f64| Some(v / 1e6);
            let mut series: Vec<TimeSeries> = (0..classes)
                .map(|k| {
                    TimeSeries::new(
                        format!("TCP download::{}", k + 1),
                        format!("class {k} goodput"),
                        "Mbits/s",
                        col(&|s| s.class_bps.get(k).copied().and_then(mbps)),
                    )
                })
                .collect();
            let weir = |name: &str, units: &str, pts| TimeSeries::new(name, name, units, pts);
            series.extend([
                weir(
                    "CBR goodput",
                    "Mbits/s",
                    col(&|s| s.class_bps.get(classes).copied().and_then(mbps)),
                ),
                weir("Line throughput", "Mbits/s", col(&|s| mbps(s.line_bps))),
                weir("Line capacity", "Mbits/s", col(&|s| mbps(s.capacity_bps))),
                weir(
                    "Device rate",
                    "Mbits/s",
                    col(&|s| s.rate_bps.and_then(mbps)),
                ),
                weir("ATU-C queueing delay", "ms", col(&|s| s.atu_delay_ms)),
                weir("Probe delay", "ms", col(&|s| s.probe_delay_ms)),
            ]);
            series.retain(|s| s.points.iter().any(|p| p.1.is_finite()));
            Recording {
                part: x.scenario.clone(),
                dut: x.name.clone(),
                run: 0,
                test: "tcp_ndown".into(),
                test_parameters: [("download_streams".to_string(), classes.to_string())].into(),
                hosts: Vec::new(),
                start_unix_s: start,
                length_s: x.duration_s,
                step_s: r.config.sample_ms as f64 / 1000.0,
                series,
            }
        })
        .collect()
}

/// Write result.json, table.txt, the SVGs, report.html, and the runs' series as Flent
/// data ([`recordings`]) and series.csv into `dir`.
pub fn write_outputs(r: &LabResult, dir: &Path) -> Result<Vec<PathBuf>> {
    let charts = charts(r);
    let table = text(r);
    let mut html = vec![
        Section::new("Run").pre(meta_text(&r.meta)),
        Section::new("Summary").pre(table.clone()),
    ];
    let mut figs = Section::new("Figures");
    for (_, svg) in &charts {
        figs = figs.svg(svg.clone());
    }
    html.push(figs);
    let mut ran = Section::new("What ran");
    for x in &r.runs {
        ran = ran.pre(format!("{} ({}):\n{}", x.name, x.scenario, x.description));
        if let Some(p) = &x.policy {
            ran = ran.pre(p.clone());
        }
    }
    html.push(ran);
    let mut files = vec![
        ("result.json".to_string(), report::to_json(r)?),
        ("table.txt".to_string(), table),
        (
            "report.html".to_string(),
            html_report("weir lab postgate", &html),
        ),
    ];
    files.extend(charts);
    report::write_with_series(dir, files, "weir lab postgate", &r.meta, &recordings(r))
}
