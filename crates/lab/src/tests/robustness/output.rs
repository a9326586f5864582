//! The Robustness Test's printed tables (Table 4 of the delays subtest, beside the Basic
//! Test's when given, goodput by WAN delay, the loss and senders rows, the checks) and its
//! charts (seed 000 Figs. 8b-10b, 11 and 12 style).

use super::super::basic::{table4_bar_charts, PAYLOAD_SHARE};
use super::super::testbed::{self, Plan, RunOutcome};
use super::{smooth_violations, DelaysPart, LossRow, RobustnessResult, SMOOTH_TOLERANCE};
use crate::report::{self, checks_text, fmt_opt, text_table};
use crate::stats::series::{byte_time, spread};
use crate::stats::table4::{self, ClassStats};
use crate::Result;

/// Mean goodput (kbit/s over runs) of the sessions with each WAN delay, per DUT and class.
fn delays_by_session(d: &DelaysPart, delays: &[f64], duts: &[String]) -> String {
    let mut rows = vec![{
        let mut h = vec!["class / DUT".to_string()];
        h.extend(delays.iter().map(|ms| format!("{ms} ms")));
        h
    }];
    let Ok(policy) = d.plan.policy() else {
        return String::new();
    };
    for ci in policy.leaves() {
        let class = &policy.classes[ci].name;
        for dut in duts {
            let runs: Vec<&RunOutcome> = d.runs.iter().filter(|r| &r.dut == dut).collect();
            if runs.is_empty() {
                continue;
            }
            let mut row = vec![format!("{class} {dut}")];
            for &ms in delays {
                let g: Vec<f64> = runs
                    .iter()
                    .flat_map(|r| &r.sessions)
                    .filter(|s| {
                        &s.class == class
                            && d.plan.sessions.iter().any(|p| {
                                p.src == s.src && p.wan.as_ref().is_some_and(|w| w.delay_ms == ms)
                            })
                    })
                    .map(|s| s.goodput_bps / 1000.0)
                    .collect();
                row.push(fmt_opt(weir_core::stats::mean(&g), 1));
            }
            rows.push(row);
        }
    }
    text_table(&rows, 1)
}

/// Tables and checks as printed.
pub fn text(res: &RobustnessResult) -> String {
    let c = &res.config;
    let mut s = String::from("Robustness Test (seed 000 Table 5)\n\n");
    if let Some(d) = &res.delays {
        s += &format!(
            "1. Heterogeneous WAN delays: {} run(s) of {} s, window {:.1}-{:.1} s, {} sessions per class with WAN delays {} ms, {}\n\
             Table 4 statistics (accuracy = class goodput / class rate, ideal {PAYLOAD_SHARE:.3}; fairness = CoV of session goodputs)\n\n",
            c.delays.runs,
            c.delays.duration_s,
            c.delays.window_s.0,
            c.delays.window_s.1,
            c.delays.delays_ms.len(),
            c.delays
                .delays_ms
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            c.cc
        );
        s += &table4::format_table(&d.stats);
        if let Some(b) = &d.baseline {
            s += &format!(
                "\nCompared with the Basic Test ({}: {} run(s) of {} s):\n\n",
                b.file, b.config.runs, b.config.duration_s
            );
            let mut rows = Vec::new();
            for (dut, class, st) in &d.stats {
                if let Some((_, _, bs)) =
                    b.stats.iter().find(|(bd, bc, _)| bd == dut && bc == class)
                {
                    rows.push((format!("{dut} basic"), class.clone(), bs.clone()));
                }
                rows.push((format!("{dut} delays"), class.clone(), st.clone()));
            }
            s += &table4::format_table(&rows);
        }
        s += "\nGoodput by WAN delay (kbit/s, mean over runs):\n\n";
        s += &delays_by_session(d, &c.delays.delays_ms, &c.duts);
        s += "\n";
    }
    if let Some(l) = &res.loss {
        s += &format!(
            "2. Periodic loss: one session in a {} kbit/s class, WAN delay {} ms, {} run(s) of {} s per loss rate, window {:.1}-{:.1} s, {}\n\
             goodput = bytes in the window / its length; slope = least-squares slope of the byte-time line over the window;\n\
             normalised = / class rate (ideal {PAYLOAD_SHARE:.3}); smooth: slope-normalised never rises > {SMOOTH_TOLERANCE} as the loss rate grows\n\n",
            c.loss.class_rate_bps / 1000,
            c.loss.delay_ms,
            c.loss.runs,
            c.loss.duration_s,
            c.loss.window_s.0,
            c.loss.window_s.1,
            c.cc
        );
        let mut rows = vec![{
            let mut h = vec!["DUT".to_string()];
            h.extend(c.loss.loss_pct.iter().map(|p| format!("{p}%")));
            h.push("smooth".into());
            h
        }];
        for dut in &c.duts {
            let pts: Vec<&LossRow> = l.rows.iter().filter(|r| &r.dut == dut).collect();
            if pts.is_empty() {
                continue;
            }
            let mut row = vec![format!("{dut} goodput kbit/s")];
            let mut norm = vec![format!("{dut} normalised")];
            let mut slope = vec![format!("{dut} slope kbit/s")];
            let mut snorm = vec![format!("{dut} slope normalised")];
            let mut retx = vec![format!("{dut} retx ratio")];
            for p in &c.loss.loss_pct {
                match pts.iter().find(|r| r.loss_pct == *p) {
                    Some(r) => {
                        row.push(format!("{:.1}", r.goodput_bps / 1000.0));
                        norm.push(format!("{:.3}", r.normalised));
                        slope.push(format!("{:.1}", r.slope_bps / 1000.0));
                        snorm.push(format!("{:.3}", r.slope_normalised));
                        retx.push(if r.data_segs_out > 0 {
                            format!("{:.4}", r.retrans as f64 / r.data_segs_out as f64)
                        } else {
                            "n/a".into()
                        });
                    }
                    None => {
                        for v in [&mut row, &mut norm, &mut slope, &mut snorm, &mut retx] {
                            v.push("n/a".into());
                        }
                    }
                }
            }
            let v = smooth_violations(
                &pts.iter()
                    .map(|r| (r.loss_pct, r.slope_normalised))
                    .collect::<Vec<_>>(),
                SMOOTH_TOLERANCE,
            );
            row.push(String::new());
            norm.push(String::new());
            slope.push(String::new());
            snorm.push(if v.is_empty() { "yes" } else { "no" }.into());
            retx.push(String::new());
            rows.extend([row, norm, slope, snorm, retx]);
        }
        s += &text_table(&rows, 1);
        s += "\n";
    }
    if let Some(sd) = &res.senders {
        s += &format!(
            "3. Heterogeneous senders: one session at a time in a {} kbit/s class, WAN delay {} ms, periodic loss {}%, {} s per variant, window {:.1}-{:.1} s\n\n",
            c.senders.class_rate_bps / 1000,
            c.senders.delay_ms,
            c.senders.loss_pct,
            c.senders.duration_s,
            c.senders.window_s.0,
            c.senders.window_s.1
        );
        let mut rows = vec![[
            "DUT / variant",
            "bytes",
            "goodput kbit/s",
            "normalised",
            "segments",
            "retx",
            "min RTT ms",
            "error",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()];
        for r in &sd.rows {
            rows.push(vec![
                format!("{} {}", r.dut, r.variant),
                r.bytes.to_string(),
                format!("{:.1}", r.goodput_bps / 1000.0),
                format!("{:.3}", r.normalised),
                r.data_segs_out.to_string(),
                r.retrans.to_string(),
                format!("{:.1}", r.min_rtt_ms),
                r.error.clone().unwrap_or_default(),
            ]);
        }
        s += &text_table(&rows, 1);
        for dut in &c.duts {
            let g: Vec<f64> = sd
                .rows
                .iter()
                .filter(|r| &r.dut == dut)
                .map(|r| r.goodput_bps)
                .collect();
            if !g.is_empty() {
                s += &format!(
                    "{dut}: goodput spread over the variants (max/min) {}\n",
                    fmt_opt(spread(&g), 2)
                );
            }
        }
        s += "variants:\n";
        for v in &c.senders.variants {
            s += &format!("  {:<12} {}\n", v.name, v.note);
        }
        s += "\n";
    }
    s += &checks_text(&res.checks);
    s
}

/// The charts: delays (Figs. 8b-10b style bars, with the baseline beside), loss (Fig. 11:
/// normalised goodput against loss rate, one line per DUT), senders (Fig. 12: byte-time
/// lines, one chart per DUT, one line per variant).
pub fn charts(res: &RobustnessResult) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(d) = &res.delays {
        let mut rows: Vec<(String, String, ClassStats)> = Vec::new();
        for (dut, class, st) in &d.stats {
            if let Some(b) = &d.baseline {
                if let Some((_, _, bs)) =
                    b.stats.iter().find(|(bd, bc, _)| bd == dut && bc == class)
                {
                    rows.push((format!("{dut} basic"), class.clone(), bs.clone()));
                }
            }
            rows.push((
                if d.baseline.is_some() {
                    format!("{dut} delays")
                } else {
                    dut.clone()
                },
                class.clone(),
                st.clone(),
            ));
        }
        let mut classes: Vec<String> = Vec::new();
        let mut labels: Vec<String> = Vec::new();
        for (l, c, _) in &rows {
            if !classes.contains(c) {
                classes.push(c.clone());
            }
            if !labels.contains(l) {
                labels.push(l.clone());
            }
        }
        let get = |l: &str, c: &str| {
            rows.iter()
                .find(|(ll, cc, _)| ll == l && cc == c)
                .map(|(_, _, s)| s)
        };
        out.extend(table4_bar_charts(
            &classes,
            &labels,
            get,
            [
                (
                    "delays-accuracy.svg",
                    "Heterogeneous delays: accuracy (bars: std dev over runs)",
                ),
                (
                    "delays-fairness.svg",
                    "Heterogeneous delays: fairness (mean CoV among sessions)",
                ),
                (
                    "delays-retransmissions.svg",
                    "Heterogeneous delays: retransmission ratio",
                ),
            ],
        ));
    }
    if let Some(l) = &res.loss {
        let series: Vec<report::Series> = res
            .config
            .duts
            .iter()
            .flat_map(|dut| {
                let pts = |f: &dyn Fn(&LossRow) -> f64| -> Vec<(f64, f64)> {
                    l.rows
                        .iter()
                        .filter(|r| &r.dut == dut)
                        .map(|r| (r.loss_pct, f(r)))
                        .collect()
                };
                [
                    report::Series::new(format!("{dut} goodput"), pts(&|r| r.normalised)),
                    report::Series::new(format!("{dut} slope"), pts(&|r| r.slope_normalised)),
                ]
            })
            .collect();
        out.push((
            "loss-goodput.svg".to_string(),
            report::line_chart(
                &format!(
                    "Goodput under periodic loss ({} kbit/s class, {} ms WAN delay)",
                    res.config.loss.class_rate_bps / 1000,
                    res.config.loss.delay_ms
                ),
                "periodic loss rate (%)",
                "goodput / class rate",
                &series,
                &report::ChartOpts {
                    y_include_zero: true,
                    hlines: vec![(PAYLOAD_SHARE, "ideal 0.964".into())],
                    ..Default::default()
                },
            ),
        ));
    }
    if let Some(s) = &res.senders {
        for dut in &res.config.duts {
            let series: Vec<report::Series> = s
                .variants
                .iter()
                .filter_map(|v| {
                    let r = v.runs.iter().find(|r| &r.dut == dut)?;
                    let sess = r.sessions.first()?;
                    Some(report::Series::new(
                        v.variant.name.clone(),
                        byte_time(&sess.series, v.plan.interval_ms)
                            .into_iter()
                            .map(|(t, b)| (t, b / 1000.0))
                            .collect(),
                    ))
                })
                .collect();
            if series.is_empty() {
                continue;
            }
            out.push((
                format!("senders-{}.svg", report::file_safe(dut)),
                report::line_chart(
                    &format!(
                        "{dut}: byte-time lines of the sender variants ({} kbit/s class, {} ms, periodic {}% loss)",
                        res.config.senders.class_rate_bps / 1000,
                        res.config.senders.delay_ms,
                        res.config.senders.loss_pct
                    ),
                    "time (s)",
                    "bytes received (kB)",
                    &series,
                    &report::ChartOpts {
                        y_include_zero: true,
                        ..Default::default()
                    },
                ),
            ));
        }
    }
    out
}

/// Write result.json, table.txt, the SVGs and report.html into `dir`.
pub fn write_outputs(
    res: &RobustnessResult,
    dir: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    let mut parts: Vec<(&Plan, &[RunOutcome])> = Vec::new();
    if let Some(d) = &res.delays {
        parts.push((&d.plan, &d.runs));
    }
    if let Some(p) = res.loss.as_ref().and_then(|l| l.points.first()) {
        parts.push((&p.plan, &p.runs));
    }
    if let Some(v) = res.senders.as_ref().and_then(|s| s.variants.first()) {
        parts.push((&v.plan, &v.runs));
    }
    testbed::Outputs {
        title: "weir lab robustness",
        meta: &res.meta,
        json: report::to_json(res)?,
        text_heading: "Tables",
        text: text(res),
        extra: Vec::new(),
        figs_heading: "Figures (seed 000 Figs. 8b-10b, 11, 12 style)",
        charts: charts(res),
        parts,
    }
    .write(dir)
}
