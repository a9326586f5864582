//! `weir lab diffserv`'s outputs: the table of runs beside the seed's findings, the
//! calibration, Figs. 8-25 as plots per device, and the acceptance checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::run::RunResult;
use super::{
    Device, DiffservResult, Group, Scenario, Transport, BACKGROUND_FRAME, LINK_BPS,
    RESERVATION_BPS, ROUTERS,
};
use crate::report::{
    self, checks_text, fmt_opt, html_report, line_chart, meta_text, text_table, ChartOpts, Check,
    Recording, Section, Series, TimeSeries,
};
use crate::stats::skew::queueing_delay_ns;
use crate::Result;

/// The seed's expected delay through three full FIFOs: 3 × 100 × 1174 B × 8 / 100 Mbit/s.
pub fn full_fifo_delay_ms() -> f64 {
    queueing_delay_ns(
        u64::from(super::policy::FIFO_PACKETS),
        BACKGROUND_FRAME as u64,
        LINK_BPS as f64,
        ROUTERS as u32,
    ) / 1e6
}

/// What seed 004 reports for a run (§3.3), in words.
pub fn paper(s: &Scenario) -> &'static str {
    let m = s.rate_bps / 1_000_000;
    match (s.group, m) {
        (Group::Idle, _) => "1 ms, jitter < 2 us, no loss",
        (Group::Loaded, _) => "~1 Mbit/s (~80 % loss), ~28 ms, jitter >= 2 ms",
        (Group::EfUdp, 2 | 4) => "almost no loss, < 5 ms, jitter ~0.6 ms",
        (Group::EfUdp, 5) => "7.66 % loss, jitter ~0.6 ms",
        (Group::EfUdp, _) => "52.1 % loss, jitter 0.8 ms",
        (Group::AfUdp, 10) => "almost 9 Mbit/s, 3-4 ms, jitter ~0.5 ms",
        (Group::AfUdp, _) => "3-4 ms, jitter ~0.5 ms",
        (Group::EfTcp, 10) => "delay up to 100 ms",
        (Group::EfTcp, _) => "~5 ms, jitter 10 -> 3 ms",
        (Group::AfTcp, 2 | 4) => "6-7 ms",
        (Group::AfTcp, _) => "retransmissions: large delay variation",
    }
}

fn ms(v: Option<f64>) -> String {
    fmt_opt(v, 2)
}

/// The tables of the lab.
pub fn text(res: &DiffservResult) -> String {
    let c = &res.config;
    let mut s = format!(
        "Seed 004, DiffServ router chain: {ROUTERS} routers, {} Mbit/s links, background {} x {} \
         Mbit/s of {BACKGROUND_FRAME}-byte frames; each run {} s after {} s of background; \
         TCP {}\n\n",
        LINK_BPS / 1_000_000,
        ROUTERS,
        c.background_bps as f64 / 1e6,
        c.duration_s,
        c.warmup_s,
        c.cc,
    );
    let cal = &res.calibration;
    let truth = match cal.reference_bound_ns {
        None => format!(
            "injected offset {} ns, drift {} ppm",
            cal.injected.offset_ns, cal.injected.drift_ppm
        ),
        Some(b) => format!(
            "real clocks: the SSH exchange put B {:+.1} us from A, +- {:.1} us",
            cal.injected.offset_ns as f64 / 1e3,
            b / 1e3
        ),
    };
    s += &format!(
        "Clock calibration: {} s, {} probes, {} answered, median RTT {:.1} us; {truth}\n",
        c.calibration_s,
        cal.probes,
        cal.answered,
        cal.rtt_median_ns as f64 / 1e3,
    );
    for (name, e) in [
        ("least squares", &cal.least_squares),
        ("least absolute deviation (used)", &cal.least_absolute),
    ] {
        s += &match (e, cal.reference_bound_ns) {
            (Some(e), None) => format!(
                "  {name:<32} offset {:.0} ns (error {:+.1} us), drift {:.3} ppm (error {:+.3} \
                 ppm)\n",
                e.skew.offset_ns(),
                e.offset_error_ns / 1e3,
                e.skew.drift_ppm(),
                e.drift_error_ppm
            ),
            (Some(e), Some(_)) => format!(
                "  {name:<32} offset {:.0} ns ({:+.1} us from the SSH exchange's), drift {:.3} \
                 ppm\n",
                e.skew.offset_ns(),
                e.offset_error_ns / 1e3,
                e.skew.drift_ppm(),
            ),
            (None, _) => format!("  {name:<32} no fit (fewer than two answered probes)\n"),
        };
    }
    for h in &res.hosts {
        s += &format!("  {}\n", h.line());
    }
    s += &format!(
        "Three full FIFOs of 100 x {BACKGROUND_FRAME}-byte frames at 100 Mbit/s: {:.1} ms (seed \
         004: 28.2 ms)\n\n",
        full_fifo_delay_ms()
    );
    let mut rows = vec![[
        "device",
        "run",
        "offered Mbit/s",
        "got Mbit/s",
        "loss %",
        "delay mean",
        "p50",
        "p90",
        "max ms",
        "jitter mean",
        "p90 ms",
        "retrans",
        "paper",
    ]
    .map(String::from)
    .to_vec()];
    for r in &res.runs {
        rows.push(vec![
            r.device.name().into(),
            r.name.clone(),
            format!("{:.1}", r.scenario.rate_bps as f64 / 1e6),
            format!("{:.2}", r.bandwidth_bps / 1e6),
            match r.scenario.transport {
                Transport::Udp { .. } => format!("{:.2}", r.loss_pct),
                Transport::Tcp => "-".into(),
            },
            ms(r.delay.map(|d| d.mean / 1e3)),
            ms(r.delay.map(|d| d.p50 / 1e3)),
            ms(r.delay.map(|d| d.p90 / 1e3)),
            ms(r.delay.map(|d| d.max / 1e3)),
            fmt_opt(r.jitter.map(|d| d.mean / 1e3), 3),
            fmt_opt(r.jitter.map(|d| d.p90 / 1e3), 3),
            r.retransmits.map_or_else(|| "-".into(), |n| n.to_string()),
            paper(&r.scenario).into(),
        ]);
    }
    s += &text_table(&rows, 2);
    let errs: Vec<String> = res
        .runs
        .iter()
        .flat_map(|r| {
            r.errors
                .iter()
                .map(move |e| format!("{} {}: {e}", r.device.name(), r.name))
        })
        .collect();
    if !errs.is_empty() {
        s += "\nProblems:\n";
        for e in errs {
            s += &format!("  {e}\n");
        }
    }
    s += "\n";
    s += &checks_text(&res.checks);
    s
}

fn runs_of(res: &DiffservResult, d: Device, g: Group) -> Vec<&RunResult> {
    res.runs
        .iter()
        .filter(|r| r.device == d && r.scenario.group == g)
        .collect()
}

/// Figs. 8-25: per device and group, bandwidth, delay and jitter per 100 ms.
pub fn charts(res: &DiffservResult) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for &d in &res.config.devices {
        for g in Group::ALL {
            let runs = runs_of(res, d, g);
            if runs.is_empty() {
                continue;
            }
            type Get = fn(&super::run::BinRow) -> Option<f64>;
            let metrics: [(&str, &str, Get); 3] = [
                ("bandwidth", "Mbit/s", |b| Some(b.bandwidth_bps / 1e6)),
                ("delay", "ms", |b| b.delay_ms),
                ("jitter", "ms", |b| b.jitter_ms),
            ];
            for (k, (what, unit, get)) in metrics.into_iter().enumerate() {
                let series: Vec<Series> = runs
                    .iter()
                    .map(|r| {
                        let pts = r
                            .bins
                            .iter()
                            .map(|b| (b.t_s, get(b).unwrap_or(f64::NAN)))
                            .collect();
                        Series::new(format!("{} Mbit/s", r.scenario.rate_bps / 1_000_000), pts)
                    })
                    .collect();
                let fig = g.first_figure() + k as u32;
                let opts = ChartOpts {
                    y_include_zero: true,
                    ..Default::default()
                };
                out.push((
                    format!(
                        "fig{fig}-{}-{what}-{}.svg",
                        g.name(),
                        report::file_safe(d.name())
                    ),
                    line_chart(
                        &format!(
                            "Fig. {fig}: {what} per 100 ms, {} ({})",
                            g.title(),
                            d.name()
                        ),
                        "time [s]",
                        &format!("{what} [{unit}]"),
                        &series,
                        &opts,
                    ),
                ));
            }
        }
    }
    out
}

/// A run's mean one-way delay, ms.
fn mean_delay_ms(r: &RunResult) -> Option<f64> {
    r.delay.map(|d| d.mean / 1e3)
}

fn find<'a>(res: &'a DiffservResult, d: Device, name: &str) -> Option<&'a RunResult> {
    res.runs.iter().find(|r| r.device == d && r.name == name)
}

/// The acceptance checks.
pub fn checks(res: &DiffservResult) -> Vec<Check> {
    let mut v = Vec::new();
    let cal = &res.calibration;
    let (off_us, drift_ppm) = if res.config.quick {
        (100.0, 2.0)
    } else {
        (50.0, 0.5)
    };
    v.push(match (&cal.least_absolute, cal.reference_bound_ns) {
        // real clocks: only the offset has a reference, good to the exchange's bound
        (Some(e), Some(bound)) => Check::new(
            format!(
                "clock offset (least absolute deviation) within the SSH exchange's bound + \
                 {off_us} us of its estimate"
            ),
            e.offset_error_ns.abs() <= bound + off_us * 1e3,
            1,
            "calibration",
            format!(
                "{:+.1} us from it (bound {:.1} us); drift {:.3} ppm",
                e.offset_error_ns / 1e3,
                bound / 1e3,
                e.skew.drift_ppm()
            ),
        ),
        (Some(e), None) => Check::new(
            format!(
                "clock skew (least absolute deviation) within {off_us} us and {drift_ppm} ppm of \
                 the injected"
            ),
            e.offset_error_ns.abs() <= off_us * 1e3 && e.drift_error_ppm.abs() <= drift_ppm,
            1,
            "calibration",
            format!(
                "offset error {:+.1} us, drift error {:+.3} ppm",
                e.offset_error_ns / 1e3,
                e.drift_error_ppm
            ),
        ),
        (None, _) => Check::new("clock skew estimated", false, 1, "calibration", "no fit"),
    });
    let target = res.config.background_bps as f64 / (8.0 * BACKGROUND_FRAME as f64);
    let short: Vec<String> = res
        .runs
        .iter()
        .filter(|r| r.background_pps.iter().any(|&p| p < 0.95 * target))
        .map(|r| format!("{} {}", r.device.name(), r.name))
        .collect();
    let loaded = res.runs.iter().filter(|r| r.scenario.background).count();
    v.push(Check::new(
        format!("every background host sent >= 95 % of its {target:.0} packets/s"),
        short.is_empty(),
        loaded,
        "runs",
        if short.is_empty() {
            "all".into()
        } else {
            format!("short: {}", short.join(", "))
        },
    ));
    let dead: Vec<String> = res
        .runs
        .iter()
        .filter(|r| r.received == 0 || !r.errors.is_empty())
        .map(|r| format!("{} {}", r.device.name(), r.name))
        .collect();
    v.push(Check::new(
        "every run's stream arrived, without errors",
        dead.is_empty(),
        res.runs.len(),
        "runs",
        if dead.is_empty() {
            "all".into()
        } else {
            dead.join(", ")
        },
    ));
    let expected = full_fifo_delay_ms();
    for &d in &res.config.devices {
        if let Some(r) = find(res, d, "idle-5M") {
            let mean = mean_delay_ms(r).unwrap_or(f64::NAN);
            v.push(Check::new(
                format!(
                    "{}: without background, no loss and mean delay <= 2 ms",
                    d.name()
                ),
                r.loss_pct == 0.0 && mean <= 2.0,
                1,
                "run",
                format!("loss {:.3} %, delay {mean:.3} ms", r.loss_pct),
            ));
        }
        let loaded = find(res, d, "loaded-5M");
        if let Some(r) = loaded {
            let mean = mean_delay_ms(r).unwrap_or(f64::NAN);
            v.push(Check::new(
                format!(
                    "{}: against the background, mean delay within 15 % of three full FIFOs \
                     ({expected:.1} ms)",
                    d.name()
                ),
                (mean / expected - 1.0).abs() <= 0.15,
                1,
                "run",
                format!("{mean:.2} ms ({:.2} x)", mean / expected),
            ));
        }
        if d != Device::Weir {
            // the peer's other figures are for comparison, in the table
            continue;
        }
        let below: Vec<&RunResult> = ["ef-udp-2M", "ef-udp-4M"]
            .iter()
            .filter_map(|n| find(res, d, n))
            .collect();
        if !below.is_empty() {
            v.push(Check::new(
                format!("{}: EF loses nothing below the reservation", d.name()),
                below.iter().all(|r| r.sent > 0 && r.received >= r.sent),
                below.len(),
                "runs",
                below
                    .iter()
                    .map(|r| format!("{} {} of {}", r.name, r.received, r.sent))
                    .collect::<Vec<_>>()
                    .join("; "),
            ));
        }
        if let Some(l) = loaded.and_then(mean_delay_ms) {
            let within: Vec<&RunResult> = ["ef-udp-2M", "ef-udp-4M", "af-udp-2M", "af-udp-4M"]
                .iter()
                .filter_map(|n| find(res, d, n))
                .collect();
            if !within.is_empty() {
                let ok = within
                    .iter()
                    .all(|r| mean_delay_ms(r).is_some_and(|x| x <= l / 3.0));
                v.push(Check::new(
                    format!(
                        "{}: EF and AF within the reservation see at most a third of best \
                         effort's delay ({:.2} ms)",
                        d.name(),
                        l
                    ),
                    ok,
                    within.len(),
                    "runs",
                    within
                        .iter()
                        .map(|r| format!("{} {}", r.name, ms(mean_delay_ms(r))))
                        .collect::<Vec<_>>()
                        .join("; "),
                ));
            }
        }
        if let Some(r) = find(res, d, "ef-udp-10M") {
            // the reservation counts frames: payload 1000 of 1042 bytes
            let cap = RESERVATION_BPS as f64 * 1000.0 / 1042.0;
            v.push(Check::new(
                format!(
                    "{}: 10 Mbit/s of EF is held to the reservation ({:.2} Mbit/s of payload, \
                     +3 %)",
                    d.name(),
                    cap / 1e6
                ),
                r.bandwidth_bps <= cap * 1.03 && r.bandwidth_bps >= cap * 0.85,
                1,
                "run",
                format!("{:.2} Mbit/s", r.bandwidth_bps / 1e6),
            ));
        }
    }
    v
}

/// Every run's measured stream per 100 ms (the figures' points, at each interval's start)
/// as Flent's `voip` test names a one-way stream: `VoIP::bitrate` (kbit/s), `VoIP::delay`
/// and `VoIP::jitter` (ms), so Flent's `voip_delay` plots draw them (also for the TCP
/// scenarios, whose records stand for the packets). One recording per run, the part
/// being the scenario; TIME is the lab's start (`meta`'s `unix_time`).
pub fn recordings(meta: &BTreeMap<String, String>, runs: &[RunResult]) -> Vec<Recording> {
    let start = report::flent::unix_time(meta);
    runs.iter()
        .map(|r| {
            let col = |get: fn(&super::run::BinRow) -> Option<f64>| -> Vec<(f64, f64)> {
                r.bins
                    .iter()
                    .map(|b| (b.t_s, get(b).unwrap_or(f64::NAN)))
                    .collect()
            };
            let what = format!(
                "{} {}",
                r.scenario.service.name(),
                r.scenario.transport.name()
            );
            Recording {
                part: r.name.clone(),
                dut: r.device.name().to_string(),
                run: 0,
                test: "voip".into(),
                test_parameters: Default::default(),
                hosts: Vec::new(),
                start_unix_s: start,
                length_s: r.duration_s,
                step_s: 0.1,
                series: vec![
                    TimeSeries::new(
                        "VoIP::bitrate",
                        format!("{what} bandwidth"),
                        "Kbits/s",
                        col(|b| Some(b.bandwidth_bps / 1e3)),
                    ),
                    TimeSeries::new(
                        "VoIP::delay",
                        format!("{what} delay"),
                        "ms",
                        col(|b| b.delay_ms),
                    ),
                    TimeSeries::new(
                        "VoIP::jitter",
                        format!("{what} jitter"),
                        "ms",
                        col(|b| b.jitter_ms),
                    ),
                ],
            }
        })
        .collect()
}

/// Writes `result.json`, `table.txt`, the figures, `report.html`, and the runs' series as
/// Flent data ([`recordings`]) and `series.csv` into `dir`.
pub fn write_outputs(res: &DiffservResult, dir: &Path) -> Result<Vec<PathBuf>> {
    let text = text(res);
    let charts = charts(res);
    let mut html = vec![
        Section::new("Run").pre(meta_text(&res.meta)),
        Section::new("Runs and checks").pre(text.clone()),
    ];
    let mut figs = Section::new("Figures 8-25");
    for (_, svg) in &charts {
        figs = figs.svg(svg.clone());
    }
    html.push(figs);
    let mut pol = Section::new("weir's router policies");
    for (name, texts) in &res.policies {
        for (i, t) in texts.iter().enumerate() {
            pol = pol.pre(format!("{name}, router {i}:\n{t}"));
        }
    }
    html.push(pol);
    let mut files = vec![
        ("result.json".to_string(), report::to_json(res)?),
        ("table.txt".to_string(), text),
        (
            "report.html".to_string(),
            html_report("weir lab diffserv", &html),
        ),
    ];
    files.extend(charts);
    report::write_with_series(
        dir,
        files,
        "weir lab diffserv",
        &res.meta,
        &recordings(&res.meta, &res.runs),
    )
}
