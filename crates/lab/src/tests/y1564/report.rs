//! The Y.1564 lab's report: the services and their profiles, per DUT the service
//! configuration test's and the service performance test's tables with the standard's
//! fields (IR, FTD, FDV, FLR, availability, pass/fail), a summary of the verdicts per
//! service and DUT, and the checks; the outputs (`result.json`, `tables.txt`,
//! `streams.csv`, an IR chart per DUT, `report.html`).

use std::path::{Path, PathBuf};

use super::{DutRun, Phase, Stream, Y1564Result};
use crate::report::{
    self, bar_chart, checks_text, csv_field, fmt_opt, html_report, meta_text, text_table, BarOpts,
    Section,
};
use crate::Result;

fn mbit(x: f64) -> String {
    format!("{:.3}", x / 1e6)
}

/// PASS, FAIL, or `limited` for a generator-limited stream.
fn verdict(st: &Stream) -> String {
    match (st.verdict.generator_limited, st.verdict.passed) {
        (true, _) => "limited".into(),
        (false, true) => "PASS".into(),
        (false, false) => "FAIL".into(),
    }
}

fn ftd_cell(st: &Stream) -> String {
    match st.figures.ftd {
        None => "n/a".into(),
        Some(_) if !st.one_way => "n/a (clocks)".into(),
        Some(d) => format!("{:.3} / {:.3} / {:.3}", d.min, d.mean, d.max),
    }
}

/// The services and their profiles.
fn services_table(r: &Y1564Result) -> String {
    let mut rows = vec![vec![
        "service".to_string(),
        "CIR Mbit/s".into(),
        "EIR Mbit/s".into(),
        "frame B".into(),
        "source".into(),
        "SAC".into(),
    ]];
    for s in &r.services {
        rows.push(vec![
            s.name.clone(),
            mbit(s.cir_bps as f64),
            mbit(s.eir_bps as f64),
            s.frame.to_string(),
            s.src.to_string(),
            s.sac.to_string(),
        ]);
    }
    text_table(&rows, 1)
}

/// One DUT's service configuration test (every stream but the performance test's).
fn config_table(d: &DutRun) -> String {
    let mut rows = vec![vec![
        "service".to_string(),
        "test".into(),
        "offered Mbit/s".into(),
        "IR Mbit/s".into(),
        "FTD min/mean/max ms".into(),
        "FDV ms".into(),
        "FLR %".into(),
        "result".into(),
    ]];
    for st in d.part(true) {
        rows.push(vec![
            st.service.clone(),
            st.phase.to_string(),
            mbit(st.offered_bps),
            fmt_opt(st.figures.ir_bps.map(|x| x / 1e6), 3),
            ftd_cell(st),
            fmt_opt(st.fdv_ms(), 3),
            format!("{:.3}", st.flr() * 100.0),
            verdict(st),
        ]);
    }
    text_table(&rows, 2)
}

/// One DUT's service performance test.
fn perf_table(d: &DutRun) -> String {
    let mut rows = vec![vec![
        "service".to_string(),
        "CIR Mbit/s".into(),
        "IR Mbit/s".into(),
        "FTD min/mean/max ms".into(),
        "FDV ms".into(),
        "FLR %".into(),
        "SES".into(),
        "AVAIL %".into(),
        "sender late max ms".into(),
        "result".into(),
    ]];
    for st in d.part(false) {
        rows.push(vec![
            st.service.clone(),
            mbit(st.offered_bps),
            fmt_opt(st.figures.ir_bps.map(|x| x / 1e6), 3),
            ftd_cell(st),
            fmt_opt(st.fdv_ms(), 3),
            format!("{:.3}", st.flr() * 100.0),
            st.figures.ses.to_string(),
            format!("{:.3}", st.availability() * 100.0),
            format!("{:.3}", st.late_max_ms),
            verdict(st),
        ]);
    }
    text_table(&rows, 1)
}

/// Per service and DUT: the configuration test's and the performance test's verdicts.
fn summary_table(r: &Y1564Result) -> String {
    let mut head = vec!["service".to_string()];
    for d in &r.duts {
        head.push(format!("{} config", d.dut));
        head.push(format!("{} perf", d.dut));
    }
    let mut rows = vec![head];
    for s in &r.services {
        let mut row = vec![s.name.clone()];
        for d in &r.duts {
            for config in [true, false] {
                let mut streams = d.part(config).filter(|st| st.service == s.name).peekable();
                row.push(if streams.peek().is_none() {
                    "n/a".into()
                } else if streams.all(|st| st.verdict.passed) {
                    "PASS".into()
                } else {
                    "FAIL".into()
                });
            }
        }
        rows.push(row);
    }
    text_table(&rows, 1)
}

/// Failures of a DUT's streams, one line each.
fn failures(d: &DutRun) -> String {
    d.streams
        .iter()
        .filter(|st| !st.verdict.failures.is_empty())
        .map(|st| {
            format!(
                "  {} {}: {}\n",
                st.service,
                st.phase,
                st.verdict.failures.join(", ")
            )
        })
        .collect()
}

/// The report as text: services, each DUT's tables, the summary, the checks.
pub fn text(r: &Y1564Result) -> String {
    let mut s = format!(
        "ITU-T Y.1564 service activation test, policy {}\n\nServices (CIR = class rate, EIR = ceil - rate):\n{}\n",
        r.policy_file,
        services_table(r)
    );
    if let Some(t) = &r.config.topology {
        s += &format!(
            "real hosts ({}: sender, receiver over SSH); frame delays on the receiver's clock \
             less its offset from the sender's, judged when the two offsets' bounds sum to at \
             most {} ms (FDV always)\n\n",
            t.file,
            crate::remote::ONE_WAY_BOUND_MS
        );
    }
    for d in &r.duts {
        for h in &d.hosts {
            s += &format!("{}: {}\n", d.dut, h.line());
        }
        s += &format!(
            "{}: service configuration test ({} s per stream)\n{}\n",
            d.dut,
            r.config.step_s,
            config_table(d)
        );
        s += &format!(
            "{}: service performance test (every service at its CIR for {} s)\n{}\n",
            d.dut,
            r.config.perf_s,
            perf_table(d)
        );
        let f = failures(d);
        if !f.is_empty() {
            s += &format!("{}: what failed\n{f}\n", d.dut);
        }
        for e in &d.errors {
            s += &format!("{}: DUT error: {e}\n", d.dut);
        }
    }
    s += &format!("Summary\n{}\n", summary_table(r));
    s += &checks_text(&r.checks);
    s
}

/// Every stream as a CSV row.
fn csv(r: &Y1564Result) -> String {
    let mut s = String::from(
        "dut,service,test,offered_bps,achieved_bps,ir_bps,ftd_min_ms,ftd_mean_ms,ftd_max_ms,fdv_ms,flr,attempted,send_errors,received,lost,ses,availability,result\n",
    );
    let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x}"));
    for d in &r.duts {
        for st in &d.streams {
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                csv_field(&d.dut),
                csv_field(&st.service),
                csv_field(&st.phase.to_string()),
                st.offered_bps,
                st.achieved_bps,
                o(st.figures.ir_bps),
                o(st.figures.ftd.map(|f| f.min)),
                o(st.figures.ftd.map(|f| f.mean)),
                o(st.figures.ftd.map(|f| f.max)),
                o(st.fdv_ms()),
                st.flr(),
                st.attempted,
                st.send_errors,
                st.figures.received,
                st.figures.lost,
                st.figures.ses,
                st.availability(),
                verdict(st)
            );
        }
    }
    s
}

/// Per DUT: IR received per test (groups) and service (bars), with the CIR and CIR+EIR of
/// the services as reference lines.
fn ir_chart(r: &Y1564Result, d: &DutRun) -> String {
    let mut tests: Vec<Phase> = Vec::new();
    for st in &d.streams {
        if !tests.contains(&st.phase) {
            tests.push(st.phase);
        }
    }
    let groups: Vec<String> = tests.iter().map(|t| t.to_string()).collect();
    let names: Vec<String> = r.services.iter().map(|s| s.name.clone()).collect();
    let values: Vec<Vec<Option<(f64, f64)>>> = tests
        .iter()
        .map(|t| {
            r.services
                .iter()
                .map(|s| {
                    d.streams
                        .iter()
                        .find(|st| st.phase == *t && st.service == s.name)
                        .and_then(|st| st.figures.ir_bps)
                        .map(|ir| (ir / 1e6, 0.0))
                })
                .collect()
        })
        .collect();
    let hlines = r
        .services
        .iter()
        .flat_map(|s| {
            let mut v = vec![(s.cir_bps as f64 / 1e6, format!("{} CIR", s.name))];
            if s.eir_bps > 0 {
                v.push((
                    (s.cir_bps + s.eir_bps) as f64 / 1e6,
                    format!("{} CIR+EIR", s.name),
                ));
            }
            v
        })
        .collect();
    bar_chart(
        &format!("{}: information rate received per test", d.dut),
        "IR, Mbit/s",
        &groups,
        &names,
        &values,
        &BarOpts {
            hlines,
            ..BarOpts::default()
        },
    )
}

/// `result.json`, `tables.txt`, `streams.csv`, `ir-DUT.svg` per DUT and `report.html`.
pub fn write_outputs(r: &Y1564Result, dir: &Path) -> Result<Vec<PathBuf>> {
    let t = text(r);
    let mut files = vec![
        ("result.json".to_string(), report::to_json(r)?),
        ("tables.txt".to_string(), t.clone()),
        ("streams.csv".to_string(), csv(r)),
    ];
    let mut sections = vec![Section::new("Run").pre(meta_text(&r.meta))];
    sections.push(Section::new("Results").pre(t));
    for d in &r.duts {
        let svg = ir_chart(r, d);
        files.push((format!("ir-{}.svg", report::file_safe(&d.dut)), svg.clone()));
        sections.push(
            Section::new(format!("{}: information rate", d.dut))
                .svg(svg)
                .pre(d.description.clone()),
        );
    }
    files.push((
        "report.html".to_string(),
        html_report("weir lab y1564", &sections),
    ));
    report::write_files(dir, &files)
}
