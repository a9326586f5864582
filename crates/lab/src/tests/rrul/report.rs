//! What `weir lab rrul` prints and writes: per part a latency table (each probe measure
//! idle, loaded and added), a throughput table (goodput and its share each way, Jain,
//! smoothed RTT, retransmissions, grade), the case's own table (hosts, calls, ECN, ACK
//! filter), the checks; `flows.csv` and `latency.csv`; per part the loaded round trip's
//! CDF, the round trip over time and the throughput–delay plot; `report.html`.

use std::collections::BTreeSet;

use super::case::Case;
use super::checks::judged;
use super::measure::{rates_text, LatencyRow, RrulRow, CALL_BUFFER_MS};
use super::policy::LINE_BUFFER_MS;
use super::{RrulPart, RrulResult, ONE_WAY_BOUND_MS};
use crate::report::{
    self, checks_text, file_safe, fmt_opt, html_report, meta_text, text_table, ChartOpts, Mark,
    Section, Series,
};
use crate::stats::dist::ecdf;
use crate::Result;

fn ms(x: Option<f64>) -> String {
    fmt_opt(x, 2)
}

fn pct(x: Option<f64>) -> String {
    fmt_opt(x.map(|v| v * 100.0), 1)
}

fn mbit(x: f64) -> String {
    format!("{:.3}", x / 1e6)
}

fn who(r: &RrulRow) -> String {
    format!("{} #{}", r.dut, r.run + 1)
}

fn latency_table(p: &RrulPart) -> String {
    let mut rows = vec![[
        "DUT / run",
        "probe",
        "idle p50",
        "p90",
        "p99",
        "loaded p50",
        "p90",
        "p99",
        "loss %",
        "added p50",
        "added p99",
    ]
    .map(String::from)
    .to_vec()];
    for r in &p.rows {
        for l in &r.latency {
            let LatencyRow {
                measure,
                idle,
                loaded,
                added_p50_ms,
                added_p99_ms,
            } = l;
            let loss = (loaded.sent > 0).then(|| loaded.lost as f64 / loaded.sent as f64);
            rows.push(vec![
                who(r),
                measure.clone(),
                ms(idle.p50_ms),
                ms(idle.p90_ms),
                ms(idle.p99_ms),
                ms(loaded.p50_ms),
                ms(loaded.p90_ms),
                ms(loaded.p99_ms),
                pct(loss),
                ms(*added_p50_ms),
                ms(*added_p99_ms),
            ]);
        }
    }
    text_table(&rows, 2)
}

fn throughput_table(p: &RrulPart) -> String {
    let mut rows = vec![[
        "DUT / run",
        "up Mbit/s",
        "up %",
        "down Mbit/s",
        "down %",
        "Jain",
        "sRTT mean",
        "sRTT max",
        "retx %",
        "added ms",
        "grade",
    ]
    .map(String::from)
    .to_vec()];
    for r in &p.rows {
        let srtt: Vec<f64> = r.flows.iter().filter_map(|f| f.srtt_mean_ms).collect();
        let srtt_mean = (!srtt.is_empty()).then(|| srtt.iter().sum::<f64>() / srtt.len() as f64);
        let srtt_max = r
            .flows
            .iter()
            .filter_map(|f| f.srtt_max_ms)
            .reduce(f64::max);
        let segs = r.up.data_segs + r.down.data_segs;
        let retx = (segs > 0).then(|| (r.up.retrans + r.down.retrans) as f64 / segs as f64);
        let dir = |d: &super::measure::DirRow| {
            if d.flows == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (mbit(d.goodput_bps), pct(d.share))
            }
        };
        let (u, us) = dir(&r.up);
        let (d, ds) = dir(&r.down);
        rows.push(vec![
            who(r),
            u,
            us,
            d,
            ds,
            fmt_opt(r.jain, 3),
            fmt_opt(srtt_mean, 1),
            fmt_opt(srtt_max, 1),
            pct(retx),
            ms(r.added_mean_ms),
            r.grade.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    text_table(&rows, 1)
}

/// The case's own table, if it has one.
fn case_table(p: &RrulPart) -> Option<String> {
    let mut rows: Vec<Vec<String>>;
    match p.spec.case {
        Case::Hosts => {
            rows = vec![
                ["DUT / run", "host A %", "host B %", "A Mbit/s", "B Mbit/s"]
                    .map(String::from)
                    .to_vec(),
            ];
            for r in &p.rows {
                let g = |h: super::Host| -> f64 {
                    r.flows
                        .iter()
                        .filter(|f| f.host == h)
                        .map(|f| f.goodput_bps)
                        .sum()
                };
                let share = |h: &str| r.hosts.iter().find(|(x, _)| x == h).map(|(_, s)| *s);
                rows.push(vec![
                    who(r),
                    pct(share("A")),
                    pct(share("B")),
                    mbit(g(super::Host::A)),
                    mbit(g(super::Host::B)),
                ]);
            }
        }
        Case::Voice => {
            rows = vec![[
                "DUT / run",
                "call",
                "sent",
                "loss %",
                "late %",
                "delay p50",
                "p95",
                "max",
                "jitter",
                "MOS",
            ]
            .map(String::from)
            .to_vec()];
            for r in &p.rows {
                for c in &r.calls {
                    let s = &c.stats;
                    rows.push(vec![
                        who(r),
                        c.name.clone(),
                        s.sent.to_string(),
                        pct(Some(s.net_loss)),
                        pct(Some(s.buffer_loss)),
                        fmt_opt(s.delay_p50_ms, 1),
                        fmt_opt(s.delay_p95_ms, 1),
                        fmt_opt(s.delay_max_ms, 1),
                        fmt_opt(s.jitter_ms, 2),
                        fmt_opt(Some(s.rating.as_ref().map_or(1.0, |x| x.mos)), 2),
                    ]);
                }
            }
        }
        Case::Ecn => {
            rows = vec![[
                "DUT / run",
                "ECN flows",
                "CE delivered",
                "retx",
                "DUT ecn_marks",
                "DUT aqm_drops",
            ]
            .map(String::from)
            .to_vec()];
            for r in &p.rows {
                let opt = |x: Option<u64>| x.map_or_else(|| "-".into(), |v| v.to_string());
                rows.push(vec![
                    who(r),
                    format!(
                        "{}/{}",
                        r.flows.iter().filter(|f| f.ecn).count(),
                        r.flows.len()
                    ),
                    r.flows
                        .iter()
                        .map(|f| f.delivered_ce)
                        .sum::<u64>()
                        .to_string(),
                    (r.up.retrans + r.down.retrans).to_string(),
                    opt(r.counters.ecn_marks),
                    opt(r.counters.aqm_drops),
                ]);
            }
        }
        Case::AckFilter => {
            rows = vec![[
                "DUT / run",
                "ACKs up kbit/s",
                "upload kbit/s",
                "download Mbit/s",
                "stalled flows",
                "DUT ack_filter_drops",
            ]
            .map(String::from)
            .to_vec()];
            for r in &p.rows {
                rows.push(vec![
                    who(r),
                    fmt_opt(r.ack_up_bps.map(|x| x / 1000.0), 1),
                    format!("{:.1}", r.up.goodput_bps / 1000.0),
                    mbit(r.down.goodput_bps),
                    r.flows
                        .iter()
                        .filter(|f| f.stall_s.is_some())
                        .count()
                        .to_string(),
                    r.counters
                        .ack_filter_drops
                        .map_or_else(|| "-".into(), |v| v.to_string()),
                ]);
            }
        }
        _ => return None,
    }
    Some(text_table(&rows, 1))
}

/// The tables of every part and the checks.
pub fn text(res: &RrulResult) -> String {
    let c = &res.config;
    let (la, lb) = c.load_window();
    let (ia, ib) = c.idle_window();
    let mut s = format!(
        "weir lab rrul: Realtime Response Under Load (Flent's rrul, rrul_be, tcp_nup, tcp_ndown; hosts, voice, ecn, ackfilter)\n\
         {idle} s idle (probes only), then {load} s of load; loaded figures over {la}-{lb} s, idle over {ia}-{ib} s; \
         {runs} run(s); congestion control {cc}\n\
         probes from the client every {probe} ms (50 ms on the ackfilter line): UDP (one-way up, down, round trip) and ICMP echo; ms\n\
         {path}\n\
         added = loaded - idle; grade = DSLReports/Waveform of the mean UDP round trip's rise (A+ < 5 ms, A < 30, B < 60, C < 200, D < 400, F)\n\
         % = goodput / (the bottleneck's rate x 1448/1514: the DUT's, the line's for kernel:bridge); Jain over every flow; sRTT = the flows' TCP_INFO smoothed RTT, ms;\n\
         retx % = retransmitted / data segments; checks judge: {judged}\n",
        idle = c.idle_s,
        load = c.load_s,
        runs = c.runs,
        cc = c.cc,
        probe = c.probe_ms,
        judged = judged(),
        path = match &c.topology {
            None => format!(
                "the DUT shapes to the rate; the line behind it runs at {} % of it with a FIFO of \
                 {LINE_BUFFER_MS} ms and half the base RTT each way",
                c.line_pct
            ),
            Some(t) => format!(
                "real hosts ({}: client, server over SSH): the DUT shapes to the rate; {}; \
                 one-way delays on this machine's clock (each host's offset taken out), kept \
                 when the two offsets' bounds sum to at most {ONE_WAY_BOUND_MS} ms",
                t.file,
                if t.wan.is_some() {
                    format!(
                        "the line at [wan] runs at {} % of it with a FIFO of {LINE_BUFFER_MS} ms \
                         and half the base RTT each way",
                        c.line_pct
                    )
                } else {
                    "the path is the network's own, no emulated line".to_string()
                }
            ),
        },
    );
    for p in &res.parts {
        let link = match &c.topology {
            None => rates_text(&p.spec.link),
            Some(t) if t.wan.is_some() => rates_text(&p.spec.link),
            Some(_) => format!(
                "the DUT shapes {} each way, real hosts",
                crate::tests::robustness::rate_text(p.spec.link.up_bps)
            ),
        };
        s += &format!(
            "\n== {}: {}, base RTT {} ms ==\n",
            p.spec.name(),
            link,
            p.spec.link.rtt_ms
        );
        s += "latency, ms\n";
        s += &latency_table(p);
        s += "throughput\n";
        s += &throughput_table(p);
        if let Some(t) = case_table(p) {
            s += &format!(
                "{}\n",
                match p.spec.case {
                    Case::Voice =>
                        format!("calls (G.729A, {CALL_BUFFER_MS} ms jitter buffer, one-way ms)"),
                    k => k.name().to_string(),
                }
            );
            s += &t;
        }
        for r in &p.rows {
            for e in &r.problems {
                s += &format!("problem {}: {e}\n", who(r));
            }
        }
    }
    s += "\n";
    s += &checks_text(&res.checks);
    s
}

/// One row per flow and run.
pub fn flows_csv(res: &RrulResult) -> String {
    let mut s = String::from(
        "part,dut,run,flow,dir,host,dscp,goodput_bps,srtt_mean_ms,srtt_max_ms,retrans,data_segs_out,ecn,delivered_ce,stall_s\n",
    );
    for p in &res.parts {
        for r in &p.rows {
            for f in &r.flows {
                s += &format!(
                    "{},{},{},{},{},{:?},{},{:.0},{},{},{},{},{},{},{}\n",
                    p.spec.name(),
                    r.dut,
                    r.run + 1,
                    f.name,
                    f.dir.name(),
                    f.host,
                    f.dscp,
                    f.goodput_bps,
                    fmt_opt(f.srtt_mean_ms, 2),
                    fmt_opt(f.srtt_max_ms, 2),
                    f.retrans,
                    f.data_segs_out,
                    f.ecn,
                    f.delivered_ce,
                    fmt_opt(f.stall_s, 1),
                );
            }
        }
    }
    s
}

/// One row per probe measure and run.
pub fn latency_csv(res: &RrulResult) -> String {
    let mut s = String::from(
        "part,dut,run,measure,idle_p50,idle_p90,idle_p99,loaded_p50,loaded_p90,loaded_p99,loaded_sent,loaded_lost,added_p50,added_p99\n",
    );
    for p in &res.parts {
        for r in &p.rows {
            for l in &r.latency {
                s += &format!(
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                    p.spec.name(),
                    r.dut,
                    r.run + 1,
                    l.measure,
                    ms(l.idle.p50_ms),
                    ms(l.idle.p90_ms),
                    ms(l.idle.p99_ms),
                    ms(l.loaded.p50_ms),
                    ms(l.loaded.p90_ms),
                    ms(l.loaded.p99_ms),
                    l.loaded.sent,
                    l.loaded.lost,
                    ms(l.added_p50_ms),
                    ms(l.added_p99_ms),
                );
            }
        }
    }
    s
}

/// The loaded UDP round trips of a run (ms, in send order), with their send times (s).
fn loaded_rtts(res: &RrulResult, r: &super::RrulRun) -> Vec<(f64, f64)> {
    let (a, b) = res.config.load_window();
    let Some(p) = r.probes.first() else {
        return Vec::new();
    };
    p.sent_us
        .iter()
        .zip(&p.rtt_us)
        .filter_map(|(&t, d)| {
            let t = t as f64 / 1e6;
            (t >= a && t < b).then_some((t, (*d)? as f64 / 1000.0))
        })
        .collect()
}

/// The headline figures for `weir lab report`'s comparison: per part and DUT, over runs,
/// the latency the load adds to the UDP round trip (median and 99th percentile), the
/// goodput both ways and Jain's index; every loaded UDP round trip as a distribution.
pub fn measures(res: &RrulResult) -> Vec<crate::report::Measure> {
    use crate::report::compare::{push_samples, push_value};
    let mut out = Vec::new();
    for p in &res.parts {
        let scope = p.spec.name();
        for r in &p.rows {
            let udp = r.latency("udp rtt");
            let nan = f64::NAN;
            for (figure, v) in [
                (
                    "added UDP RTT p50, ms",
                    udp.and_then(|l| l.added_p50_ms).unwrap_or(nan),
                ),
                (
                    "added UDP RTT p99, ms",
                    udp.and_then(|l| l.added_p99_ms).unwrap_or(nan),
                ),
                ("goodput both ways, Mbit/s", r.total_bps() / 1e6),
                ("Jain's index", r.jain.unwrap_or(nan)),
            ] {
                push_value(&mut out, &scope, figure, &r.dut, v);
            }
        }
        for run in &p.runs {
            let rtts = loaded_rtts(res, run).into_iter().map(|(_, d)| d);
            push_samples(&mut out, &scope, "UDP RTT under load, ms", &run.dut, rtts);
        }
    }
    out
}

/// Per part: `cdf-PART.svg` (the loaded UDP round trip's CDF per DUT, run 1),
/// `rtt-PART.svg` (the UDP round trip over the whole run per DUT, run 1) and
/// `tput-PART.svg` (total goodput against the mean added round trip, every run).
pub fn charts(res: &RrulResult) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in &res.parts {
        let name = file_safe(&p.spec.name());
        let mut cdf = Vec::new();
        let mut over_time = Vec::new();
        for d in &p.policies {
            let Some(r) = p.runs.iter().find(|r| r.dut == d.dut) else {
                continue;
            };
            let v: Vec<f64> = loaded_rtts(res, r).into_iter().map(|(_, d)| d).collect();
            cdf.push(Series::new(d.dut.clone(), ecdf(&v)));
            let q = r.probes.first();
            over_time.push(Series::new(
                d.dut.clone(),
                q.map(|q| {
                    q.sent_us
                        .iter()
                        .zip(&q.rtt_us)
                        .filter_map(|(&t, d)| Some((t as f64 / 1e6, (*d)? as f64 / 1000.0)))
                        .collect()
                })
                .unwrap_or_default(),
            ));
        }
        out.push((
            format!("cdf-{name}.svg"),
            report::line_chart(
                &format!("{}: UDP round trip under load (CDF, run 1)", p.spec.name()),
                "round trip (ms)",
                "fraction of probes",
                &cdf,
                &ChartOpts {
                    y_range: Some((0.0, 1.0)),
                    ..Default::default()
                },
            ),
        ));
        out.push((
            format!("rtt-{name}.svg"),
            report::line_chart(
                &format!(
                    "{}: UDP round trip over time (run 1; the load from {} s)",
                    p.spec.name(),
                    res.config.idle_s
                ),
                "time (s)",
                "round trip (ms)",
                &over_time,
                &ChartOpts {
                    y_include_zero: true,
                    ..Default::default()
                },
            ),
        ));
        let duts: BTreeSet<&str> = p.rows.iter().map(|r| r.dut.as_str()).collect();
        let tput: Vec<Series> = p
            .policies
            .iter()
            .filter(|d| duts.contains(d.dut.as_str()))
            .map(|d| {
                Series::new(
                    d.dut.clone(),
                    p.rows
                        .iter()
                        .filter(|r| r.dut == d.dut)
                        .filter_map(|r| Some((r.added_mean_ms?, r.total_bps() / 1e6)))
                        .collect(),
                )
            })
            .collect();
        let x_hi = tput
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        out.push((
            format!("tput-{name}.svg"),
            report::line_chart(
                &format!(
                    "{}: goodput against the latency the load adds",
                    p.spec.name()
                ),
                "mean added UDP round trip (ms)",
                "goodput, both ways (Mbit/s)",
                &tput,
                &ChartOpts {
                    mark: Mark::Scatter,
                    x_range: Some((0.0, x_hi * 1.05)),
                    y_include_zero: true,
                    dot: 10.0,
                    ..Default::default()
                },
            ),
        ));
    }
    out
}

/// Writes result.json (compact), table.txt, flows.csv, latency.csv, the SVGs,
/// report.html, and every run's time series as Flent data ([`super::series`]) and
/// series.csv into `dir`.
pub fn write_outputs(res: &RrulResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let json =
        serde_json::to_string(res).map_err(|e| crate::Error::Invalid(format!("serialise: {e}")))?;
    let text = text(res);
    let charts = charts(res);
    let mut html = vec![
        Section::new("Run").pre(meta_text(&res.meta)),
        Section::new("Realtime Response Under Load").pre(text.clone()),
    ];
    let mut figs = Section::new("Figures");
    for (_, svg) in &charts {
        figs = figs.svg(svg.clone());
    }
    html.push(figs);
    let mut pol = Section::new("Policies");
    let mut what = Section::new("What ran");
    for p in &res.parts {
        for d in &p.policies {
            pol = pol.pre(format!("{} / {}:\n{}", p.spec.name(), d.dut, d.policy));
        }
        for r in p.runs.iter().filter(|r| r.run == 0) {
            let desc = r.dut_report["description"].as_str().unwrap_or("");
            what = what.pre(format!("{} / {}:\n{desc}", p.spec.name(), r.dut));
        }
        if let Some(r) = p.runs.first() {
            if let Some(l) = r.line_report["policy"].as_str() {
                what = what.pre(format!("{} / the line:\n{l}", p.spec.name()));
            }
        }
    }
    html.push(pol);
    html.push(what);
    let mut files = vec![
        ("result.json".to_string(), json),
        ("table.txt".to_string(), text),
        ("flows.csv".to_string(), flows_csv(res)),
        ("latency.csv".to_string(), latency_csv(res)),
        (
            "report.html".to_string(),
            html_report("weir lab rrul", &html),
        ),
    ];
    files.extend(charts);
    let recs = super::series::recordings(res);
    report::write_with_series(dir, files, "weir lab rrul", &res.meta, &recs)
}
