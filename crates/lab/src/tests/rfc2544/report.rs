//! The RFC 2544 lab's report: per DUT the four tests' tables with the RFC's report fields
//! (throughput in frames/s and bit/s per frame size, latency at the throughput rate, frame
//! loss rate per offered rate, back-to-back frames), the checks; the outputs
//! (`result.json`, `tables.txt`, `trials.csv`, a throughput chart and a frame-loss chart,
//! `report.html`).

use std::path::{Path, PathBuf};

use super::{DutRun, Rfc2544Result};
use crate::remote::ONE_WAY_BOUND_MS;
use crate::report::{
    self, bar_chart, checks_text, csv_field, fmt_opt, html_report, line_chart, meta_text,
    text_table, BarOpts, ChartOpts, Section, Series,
};
use crate::Result;

fn mbit(x: f64) -> String {
    format!("{:.3}", x / 1e6)
}

/// 26.1: throughput per frame size.
fn throughput_table(r: &Rfc2544Result, d: &DutRun) -> String {
    let mut rows = vec![vec![
        "frame B".to_string(),
        "throughput Mbit/s".into(),
        "frames/s".into(),
        "% of class rate".into(),
        "% of line".into(),
        "trials".into(),
    ]];
    for s in &d.sizes {
        let at_least = if s.throughput_limited { ">= " } else { "" };
        rows.push(vec![
            s.size.to_string(),
            format!("{at_least}{}", mbit(s.throughput_bps)),
            format!("{:.0}", s.fps(s.throughput_bps)),
            format!("{:.2}", s.throughput_bps / r.class_bps as f64 * 100.0),
            format!("{:.2}", s.throughput_bps / r.config.line_bps as f64 * 100.0),
            s.throughput_trials.len().to_string(),
        ]);
    }
    text_table(&rows, 0)
}

/// 26.2: the latency trial at the throughput rate.
fn latency_table(d: &DutRun) -> String {
    let mut rows = vec![vec![
        "frame B".to_string(),
        "rate Mbit/s".into(),
        "FTD min/mean/max ms".into(),
        "FDV ms".into(),
        "lost".into(),
    ]];
    for s in &d.sizes {
        let Some(t) = &s.latency else { continue };
        rows.push(vec![
            s.size.to_string(),
            mbit(t.rate_bps()),
            t.ftd.map_or("n/a".into(), |f| {
                format!("{:.3} / {:.3} / {:.3}", f.min, f.mean, f.max)
            }),
            fmt_opt(t.ftd.map(|f| f.fdv()), 3),
            format!("{} of {}", t.lost, t.sent),
        ]);
    }
    text_table(&rows, 0)
}

/// 26.3: frame loss rate per step.
fn loss_table(r: &Rfc2544Result, d: &DutRun) -> String {
    let mut rows = vec![vec![
        "frame B".to_string(),
        "offered % of line".into(),
        "sent at Mbit/s".into(),
        "frame loss %".into(),
        "1 - R/r %".into(),
    ]];
    let rate = r.class_bps as f64;
    for s in &d.sizes {
        for t in &s.loss {
            rows.push(vec![
                s.size.to_string(),
                format!("{:.0}", t.asked_bps / r.config.line_bps as f64 * 100.0),
                mbit(t.rate_bps()),
                format!("{:.2}", t.loss_ratio() * 100.0),
                format!("{:.2}", (1.0 - rate / t.rate_bps()).max(0.0) * 100.0),
            ]);
        }
    }
    text_table(&rows, 0)
}

/// 26.4: back-to-back frames.
fn b2b_table(r: &Rfc2544Result, d: &DutRun) -> String {
    let mut rows = vec![vec![
        "frame B".to_string(),
        "longest burst (mean)".into(),
        "per search".into(),
        "burst sent at Mbit/s".into(),
        "ms at line rate".into(),
    ]];
    for s in &d.sizes {
        let Some(mean) = s.b2b_mean() else { continue };
        let rate = s
            .b2b_bursts
            .iter()
            .map(|b| b.achieved_bps)
            .fold(f64::NAN, f64::max);
        rows.push(vec![
            s.size.to_string(),
            format!("{mean:.0}"),
            s.b2b
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            fmt_opt(Some(rate / 1e6), 1),
            format!("{:.2}", mean / s.fps(r.config.line_bps as f64) * 1e3),
        ]);
    }
    text_table(&rows, 0)
}

/// The report as text.
pub fn text(r: &Rfc2544Result) -> String {
    let mut s = format!(
        "RFC 2544 benchmarks, policy {}: class '{}' at {} Mbit/s, source {}; maximum rate {} Mbit/s, {} s trials\n\
         (frame sizes include the 4-byte FCS; rates count frames without it, as the DUTs do)\n\n",
        r.policy_file,
        r.class,
        mbit(r.class_bps as f64),
        r.src,
        mbit(r.config.line_bps as f64),
        r.config.trial_s
    );
    if let Some(t) = &r.config.topology {
        s += &format!(
            "real hosts ({}: sender, receiver over SSH); frame delays on the receiver's clock \
             less its offset from the sender's, reported when the two offsets' bounds sum to \
             at most {ONE_WAY_BOUND_MS} ms\n\n",
            t.file
        );
    }
    for d in &r.duts {
        for h in &d.hosts {
            s += &format!("{}: {}\n", d.dut, h.line());
        }
        s += &format!("{}: throughput (26.1)\n{}\n", d.dut, throughput_table(r, d));
        s += &format!(
            "{}: latency at the throughput rate (26.2)\n{}\n",
            d.dut,
            latency_table(d)
        );
        if !d.one_way {
            s += &format!(
                "{}: frame delays not reported: the hosts' clock offsets are not known to \
                 within {ONE_WAY_BOUND_MS} ms together\n\n",
                d.dut
            );
        }
        s += &format!("{}: frame loss rate (26.3)\n{}\n", d.dut, loss_table(r, d));
        if d.sizes.iter().any(|x| !x.b2b.is_empty()) {
            s += &format!(
                "{}: back-to-back frames (26.4)\n{}\n",
                d.dut,
                b2b_table(r, d)
            );
        }
        for e in &d.errors {
            s += &format!("{}: DUT error: {e}\n", d.dut);
        }
    }
    s += &checks_text(&r.checks);
    s
}

/// Every trial and burst as a CSV row.
fn csv(r: &Rfc2544Result) -> String {
    let mut s = String::from("dut,frame,test,asked_bps,achieved_bps,sent,lost,loss_ratio\n");
    for d in &r.duts {
        for z in &d.sizes {
            let tests = [
                ("throughput", &z.throughput_trials[..]),
                ("latency", z.latency.as_slice()),
                ("frame_loss", &z.loss[..]),
            ];
            for (test, trials) in tests {
                for t in trials {
                    s += &format!(
                        "{},{},{test},{},{},{},{},{}\n",
                        csv_field(&d.dut),
                        z.size,
                        t.asked_bps,
                        t.achieved_bps,
                        t.sent,
                        t.lost,
                        t.loss_ratio()
                    );
                }
            }
            for b in &z.b2b_bursts {
                s += &format!(
                    "{},{},back_to_back,{},{},{},{},{}\n",
                    csv_field(&d.dut),
                    z.size,
                    r.config.line_bps,
                    b.achieved_bps,
                    b.frames,
                    b.lost,
                    if b.frames > 0 {
                        b.lost as f64 / b.frames as f64
                    } else {
                        0.0
                    }
                );
            }
        }
    }
    s
}

/// Throughput per frame size (groups) and DUT (bars), the class's rate as a reference.
fn throughput_chart(r: &Rfc2544Result) -> String {
    let groups: Vec<String> = r.config.sizes.iter().map(|s| format!("{s} B")).collect();
    let names: Vec<String> = r.duts.iter().map(|d| d.dut.clone()).collect();
    let values: Vec<Vec<Option<(f64, f64)>>> = r
        .config
        .sizes
        .iter()
        .map(|&size| {
            r.duts
                .iter()
                .map(|d| {
                    d.sizes
                        .iter()
                        .find(|s| s.size == size)
                        .map(|s| (s.throughput_bps / 1e6, 0.0))
                })
                .collect()
        })
        .collect();
    bar_chart(
        "Throughput (RFC 2544 26.1)",
        "Mbit/s",
        &groups,
        &names,
        &values,
        &BarOpts {
            hlines: vec![(r.class_bps as f64 / 1e6, format!("class '{}'", r.class))],
            ..BarOpts::default()
        },
    )
}

/// Frame loss rate against the rate sent, per DUT and frame size, with a shaper's 1 − R/r.
fn loss_chart(r: &Rfc2544Result) -> String {
    let mut series: Vec<Series> = Vec::new();
    for d in &r.duts {
        for s in &d.sizes {
            let pts: Vec<(f64, f64)> = s
                .loss
                .iter()
                .map(|t| (t.rate_bps() / 1e6, t.loss_ratio() * 100.0))
                .collect();
            series.push(Series::new(format!("{} {} B", d.dut, s.size), pts));
        }
    }
    let rate = r.class_bps as f64;
    let ideal: Vec<(f64, f64)> = (1..=100)
        .map(|k| r.config.line_bps as f64 * k as f64 / 100.0)
        .map(|x| (x / 1e6, (1.0 - rate / x).max(0.0) * 100.0))
        .collect();
    series.push(Series::new("1 - R/r", ideal));
    line_chart(
        "Frame loss rate (RFC 2544 26.3)",
        "rate sent, Mbit/s",
        "frames lost, %",
        &series,
        &ChartOpts {
            y_include_zero: true,
            ..ChartOpts::default()
        },
    )
}

/// `result.json`, `tables.txt`, `trials.csv`, `throughput.svg`, `frame-loss.svg`,
/// `report.html`.
pub fn write_outputs(r: &Rfc2544Result, dir: &Path) -> Result<Vec<PathBuf>> {
    let t = text(r);
    let tput = throughput_chart(r);
    let loss = loss_chart(r);
    let mut sections = vec![
        Section::new("Run").pre(meta_text(&r.meta)),
        Section::new("Results").pre(t.clone()),
        Section::new("Throughput").svg(tput.clone()),
        Section::new("Frame loss rate").svg(loss.clone()),
    ];
    for d in &r.duts {
        sections.push(Section::new(format!("{}: what ran", d.dut)).pre(d.description.clone()));
    }
    report::write_files(
        dir,
        &[
            ("result.json".to_string(), report::to_json(r)?),
            ("tables.txt".to_string(), t),
            ("trials.csv".to_string(), csv(r)),
            ("throughput.svg".to_string(), tput),
            ("frame-loss.svg".to_string(), loss),
            (
                "report.html".to_string(),
                html_report("weir lab rfc2544", &sections),
            ),
        ],
    )
}
