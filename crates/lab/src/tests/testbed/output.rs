//! The outputs every testbed test writes.

use std::collections::BTreeMap;

use super::{Plan, RunOutcome, VoiceOutcome};
use crate::report::{html_report, meta_text, write_with_series, Recording, Section, TimeSeries};
use crate::Result;

/// The outputs every testbed test writes: `result.json` (the result, serialised),
/// `table.txt` (`text`), any `extra` text files, the SVG `charts`, `report.html` with
/// the run's metadata, the text, the charts, the policies and what ran on each DUT, and
/// every run's time series ([`recordings`]) as Flent data and `series.csv`.
pub struct Outputs<'a> {
    pub title: &'a str,
    pub meta: &'a BTreeMap<String, String>,
    pub json: String,
    pub text_heading: &'a str,
    pub text: String,
    pub extra: Vec<(String, String)>,
    pub figs_heading: &'a str,
    pub charts: Vec<(String, String)>,
    /// (plan name, plan, its runs) of every part of the test.
    pub parts: Vec<(&'a Plan, &'a [RunOutcome])>,
}

impl Outputs<'_> {
    /// Write everything into `dir`; returns the paths.
    pub fn write(self, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        let mut html = vec![
            Section::new("Run").pre(meta_text(self.meta)),
            Section::new(self.text_heading).pre(self.text.clone()),
        ];
        let mut figs = Section::new(self.figs_heading);
        for (_, svg) in &self.charts {
            figs = figs.svg(svg.clone());
        }
        html.push(figs);
        let mut pol = Section::new("Policies");
        let mut what = Section::new("What ran");
        for (plan, runs) in &self.parts {
            pol = pol.pre(format!("{}:\n{}", plan.name, plan.policy_text));
            for r in runs.iter().filter(|r| r.run == 0) {
                let d = r.dut_report["description"].as_str().unwrap_or("");
                what = what.pre(format!("{} / {}:\n{d}", plan.name, r.dut));
            }
        }
        html.push(pol);
        html.push(what);
        let mut files = vec![
            ("result.json".to_string(), self.json),
            ("table.txt".to_string(), self.text),
            ("report.html".to_string(), html_report(self.title, &html)),
        ];
        files.extend(self.extra);
        files.extend(self.charts);
        let recs = recordings(self.meta, &self.parts);
        write_with_series(dir, files, self.title, self.meta, &recs)
    }
}

/// A call's one-way delay per packet received, ms, at its send time: s since the run's
/// start = `offset_s` + (send time − `origin_ns`).
pub fn voice_delay_series(call: &VoiceOutcome, origin_ns: u64, offset_s: f64) -> TimeSeries {
    let points = call
        .packets
        .iter()
        .map(|p| {
            let t = offset_s + (p.tx_ns as i128 - origin_ns as i128) as f64 / 1e9;
            (t, p.delay_ns() as f64 / 1e6)
        })
        .collect();
    TimeSeries::new(
        format!("VoIP delay (ms) {}", call.name),
        format!("{} one-way delay", call.name),
        "ms",
        points,
    )
}

/// Every run's time series, one [`Recording`] per part, DUT and run, as Flent's `tcp_nup`
/// test (N TCP upload streams with ping) names them: session k's goodput per interval as
/// `TCP upload::k` (Mbit/s, at each interval's end; `upload_streams` = the sessions), and
/// each voice call's one-way delay per packet as `VoIP delay (ms) NAME` (loaded, not in
/// tcp_nup's plots). The grid's step is the plan's interval; TIME is the lab's start
/// (`meta`'s `unix_time`: the runs do not record their own).
pub fn recordings(
    meta: &BTreeMap<String, String>,
    parts: &[(&Plan, &[RunOutcome])],
) -> Vec<Recording> {
    let start = crate::report::flent::unix_time(meta);
    let mut out = Vec::new();
    for (plan, runs) in parts {
        for r in runs.iter() {
            let mut series: Vec<TimeSeries> = r
                .sessions
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    TimeSeries::goodput_mbps(
                        format!("TCP upload::{}", k + 1),
                        format!("{} ({}) goodput", s.name, s.class),
                        &s.series,
                        plan.interval_ms,
                    )
                })
                .collect();
            for (call, vp) in r.voice.iter().zip(&plan.voice) {
                let origin = call
                    .first_send_ns
                    .or_else(|| call.packets.iter().map(|p| p.tx_ns).min())
                    .unwrap_or(0);
                series.push(voice_delay_series(call, origin, vp.start_s));
            }
            out.push(Recording {
                part: plan.name.clone(),
                dut: r.dut.clone(),
                run: r.run,
                test: "tcp_nup".into(),
                test_parameters: BTreeMap::from([(
                    "upload_streams".to_string(),
                    r.sessions.len().to_string(),
                )]),
                hosts: vec![crate::topo::BridgeTopo::RCV_ADDR.to_string()],
                start_unix_s: start,
                length_s: plan.duration_s,
                step_s: plan.interval_ms as f64 / 1000.0,
                series,
            });
        }
    }
    out
}
