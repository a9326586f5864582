//! The lab without a network: synthetic runs through the measures, the checks (the
//! modern DUT's included), the text and a JSON round trip.

use serde_json::{json, Value};

use super::*;
use crate::agents::InfoSample;

const BASE_MS: f64 = 50.0;

fn cfg() -> RrulConfig {
    RrulConfig {
        cases: vec![Case::RrulBe, Case::Hosts, Case::Ecn, Case::AckFilter],
        duts: vec!["weir:cbq+pfq".into(), DEFAULT_MODERN.into()],
        ..RrulConfig::quick()
    }
}

fn link(case: Case) -> Link {
    let (down_bps, up_bps) = case.fixed_line().unwrap_or((10_000_000, 10_000_000));
    Link {
        down_bps,
        up_bps,
        rtt_ms: 50,
        line_pct: policy::LINE_PCT,
    }
}

/// How a synthetic run behaves.
struct Fake {
    /// Round trip the load adds, ms (every probe; half each way).
    added_ms: f64,
    /// Goodput of a flow, bit/s.
    bps: fn(&FlowPlan) -> f64,
    ecn: bool,
    retrans: u64,
    counters: Value,
    ack_bytes: Option<u64>,
}

/// Probes every 10 ms over 12 s: 50 ms idle, 50 + added under load (from 2 s).
fn probes(c: &RrulConfig, added_ms: f64) -> Vec<ProbeSeries> {
    let n = ((c.idle_s + c.load_s) * 100.0) as u64;
    let sent_us: Vec<u64> = (0..n).map(|i| i * 10_000).collect();
    let rtt = |t: u64| {
        let ms = if (t as f64) < c.idle_s * 1e6 {
            BASE_MS
        } else {
            BASE_MS + added_ms
        };
        (ms * 1000.0) as i64
    };
    let rtt_us: Vec<Option<i64>> = sent_us.iter().map(|&t| Some(rtt(t))).collect();
    let half: Vec<Option<i64>> = rtt_us.iter().map(|d| d.map(|x| x / 2)).collect();
    vec![
        ProbeSeries {
            kind: Some(crate::agents::ProbeKind::Udp),
            sent_us: sent_us.clone(),
            rtt_us: rtt_us.clone(),
            up_us: half.clone(),
            down_us: half,
            ..Default::default()
        },
        ProbeSeries {
            kind: Some(crate::agents::ProbeKind::Icmp),
            sent_us,
            rtt_us,
            ..Default::default()
        },
    ]
}

fn run(c: &RrulConfig, dut: &str, flows: &[FlowPlan], f: &Fake) -> RrulRun {
    let bins = ((c.idle_s + c.load_s) * 1000.0 / BIN_MS as f64) as usize;
    let idle_bins = (c.idle_s * 1000.0 / BIN_MS as f64) as usize;
    RrulRun {
        dut: dut.into(),
        run: 0,
        t0_ns: 1_000_000_000_000,
        probes: probes(c, f.added_ms),
        flows: flows
            .iter()
            .map(|p| {
                let per_bin = ((f.bps)(p) / 8.0 * BIN_MS as f64 / 1000.0) as u64;
                FlowOutcome {
                    name: p.name.clone(),
                    dir: p.dir,
                    host: p.host,
                    dscp: p.dscp,
                    cc: "cubic".into(),
                    local: None,
                    bytes: per_bin * (bins - idle_bins) as u64,
                    series: (0..bins)
                        .map(|i| if i < idle_bins { 0 } else { per_bin })
                        .collect(),
                    segs_out: 10_000,
                    data_segs_out: 10_000,
                    retrans: f.retrans,
                    ecn: f.ecn,
                    delivered_ce: 0,
                    samples: InfoSeries::of(
                        &(20..120)
                            .map(|i| InfoSample {
                                t_us: i * 100_000,
                                srtt_us: ((BASE_MS + f.added_ms) * 1000.0) as u32,
                                cwnd: 10,
                                retrans: 0,
                                delivered_ce: 0,
                            })
                            .collect::<Vec<_>>(),
                    ),
                    error: None,
                }
            })
            .collect(),
        calls: Vec::new(),
        ack_frames: f.ack_bytes.map(|b| b / 66),
        ack_bytes: f.ack_bytes,
        dut_report: json!({ "spec": dut, "description": "synthetic", "counters": f.counters, "errors": [] }),
        line_report: Value::Null,
        seconds: 12.0,
        hosts: Vec::new(),
    }
}

/// What a perfect shaper gives each flow: its direction's carried rate shared equally.
fn fair(p: &FlowPlan) -> f64 {
    let n = match p.host {
        Host::Client => 4.0,
        _ => 17.0,
    };
    measure::carried_bps(10_000_000) / n
}

fn part(c: &RrulConfig, case: Case, variant: Variant, runs: Vec<(&str, Fake)>) -> RrulPart {
    let spec = PartSpec {
        case,
        variant,
        link: link(case),
        probe_ms: 10.0,
    };
    let flows = case.flows(c.streams);
    RrulPart {
        spec,
        policies: runs
            .iter()
            .map(|(d, _)| DutPolicy {
                dut: d.to_string(),
                policy: "# synthetic".into(),
            })
            .collect(),
        runs: runs.iter().map(|(d, f)| run(c, d, &flows, f)).collect(),
        flows,
        rows: Vec::new(),
    }
}

fn good(added_ms: f64) -> Fake {
    Fake {
        added_ms,
        bps: fair,
        ecn: false,
        retrans: 10,
        counters: json!({}),
        ack_bytes: None,
    }
}

fn result() -> RrulResult {
    let c = cfg();
    let host_share: fn(&FlowPlan) -> f64 = |p| match p.host {
        Host::A => 4_000_000.0,
        _ => 5_000_000.0 / 16.0,
    };
    let ackf = |ack: u64, up_bps: f64| Fake {
        added_ms: 30.0,
        bps: if up_bps > 100_000.0 {
            |p| {
                if p.dir == Dir::Up {
                    200_000.0
                } else {
                    4_500_000.0
                }
            }
        } else {
            |p| {
                if p.dir == Dir::Up {
                    90_000.0
                } else {
                    4_400_000.0
                }
            }
        },
        ecn: false,
        retrans: 5,
        counters: json!({}),
        ack_bytes: Some(ack),
    };
    let parts = vec![
        // the modern DUT meets the acceptance; PFQ adds 9 ms (not judged)
        part(
            &c,
            Case::RrulBe,
            Variant::Plain,
            vec![("weir:cbq+pfq", good(9.0)), (DEFAULT_MODERN, good(1.0))],
        ),
        part(
            &c,
            Case::Hosts,
            Variant::Plain,
            vec![(
                DEFAULT_MODERN,
                Fake {
                    bps: host_share,
                    ..good(1.0)
                },
            )],
        ),
        part(
            &c,
            Case::Ecn,
            Variant::Ecn(true),
            vec![(
                DEFAULT_MODERN,
                Fake {
                    ecn: true,
                    retrans: 1,
                    counters: json!({ "outbound": { "ecn_marks": 990 }, "inbound": { "ecn_marks": 10, "aqm_drops": 20 } }),
                    ..good(1.0)
                },
            )],
        ),
        part(
            &c,
            Case::Ecn,
            Variant::Ecn(false),
            vec![(
                DEFAULT_MODERN,
                Fake {
                    retrans: 100,
                    ..good(1.0)
                },
            )],
        ),
        part(
            &c,
            Case::AckFilter,
            Variant::AckFilter(true),
            vec![(DEFAULT_MODERN, ackf(100_000, 200_000.0))],
        ),
        part(
            &c,
            Case::AckFilter,
            Variant::AckFilter(false),
            vec![(DEFAULT_MODERN, ackf(400_000, 90_000.0))],
        ),
    ];
    let mut r = RrulResult {
        kind: "rrul".into(),
        meta: Default::default(),
        config: c,
        parts,
        checks: Vec::new(),
    };
    finish(&mut r);
    r
}

fn check<'a>(r: &'a RrulResult, needle: &str) -> &'a Check {
    r.checks
        .iter()
        .find(|c| c.name.contains(needle))
        .unwrap_or_else(|| panic!("no check with {needle:?}: {:#?}", r.checks))
}

#[test]
fn rows_from_synthetic_runs() {
    let r = result();
    let pfq = &r.parts[0].rows[0];
    let udp = pfq.latency("udp rtt").unwrap();
    assert_eq!(udp.idle.p50_ms, Some(50.0));
    assert_eq!(udp.loaded.p50_ms, Some(59.0));
    assert!((udp.added_p50_ms.unwrap() - 9.0).abs() < 1e-9);
    assert_eq!(pfq.latency("udp up").unwrap().loaded.p50_ms, Some(29.5));
    assert_eq!(pfq.grade.as_deref(), Some("A"));
    // every flow at its fair share: 100 % each way, Jain 1
    assert!((pfq.up.share.unwrap() - 1.0).abs() < 1e-3, "{:?}", pfq.up);
    assert!((pfq.jain.unwrap() - 1.0).abs() < 1e-12);
    assert_eq!(pfq.flows[0].srtt_mean_ms, Some(59.0));
    assert_eq!(pfq.flows[0].stall_s, None);
    let hosts = &r.parts[1].rows[0];
    assert_eq!(hosts.hosts.len(), 2);
    assert!(
        (hosts.hosts[0].1 - 4.0 / 9.0).abs() < 1e-3,
        "{:?}",
        hosts.hosts
    );
    let ecn = &r.parts[2].rows[0];
    assert_eq!(ecn.counters.ecn_marks, Some(1000));
    assert_eq!(ecn.counters.aqm_drops, Some(20));
    assert_eq!(ecn.counters.ack_filter_drops, None);
    // 400 kB of ACKs over a 10 s load: 320 kbit/s
    let off = &r.parts[5].rows[0];
    assert!((off.ack_up_bps.unwrap() - 320_000.0).abs() < 1e-6);
}

#[test]
fn checks_judge_the_modern_dut_only() {
    let r = result();
    // the acceptance: only the modern DUT, all pass at 1 ms added
    assert!(r
        .checks
        .iter()
        .all(|c| !c.name.contains("weir:cbq+pfq:") || c.name.contains("testbed")));
    let p50 = check(&r, "weir:fq_cobalt: added udp rtt p50 <= 2 ms");
    assert!(p50.passed && p50.cells == 1, "{p50}");
    assert!(check(&r, "weir:fq_cobalt: bufferbloat grade A+").passed);
    assert!(check(&r, "Jain's index among the flows >= 0.98").passed);
    assert!(check(&r, "goodput each way >= 95 %").passed);
    assert!(check(&r, "mean smoothed RTT <= base + 15 ms").passed);
    // hosts 44/56: outside 50 % ± 5 %
    assert!(!check(&r, "each host gets 50 %").passed);
    // ECN: 1000 marks of 1020 signals (98 %), retransmissions 8 vs 800
    assert!(check(&r, "are marks").passed, "{}", check(&r, "are marks"));
    assert!(check(&r, "retransmissions with ECN").passed);
    // ACK filter: 100 kB vs 400 kB, upload up, downloads 9.0 vs 8.8 Mbit/s
    assert!(check(&r, "ACK bytes on the uplink").passed);
    assert!(check(&r, "upload goodput higher").passed);
    assert!(check(&r, "download goodput not lower").passed);
    assert!(check(&r, "no stalled flow").passed);
    let drops = check(&r, "the filter's drops are counted");
    assert!(
        drops.skipped && drops.to_string().starts_with("SKIP"),
        "{drops}"
    );
    // the testbed's own checks run for every DUT
    assert!(check(&r, "weir:cbq+pfq: idle UDP round trip p50").passed);
    assert!(
        check(
            &r,
            "ecn=1 10Mbit 50ms weir:fq_cobalt: every flow negotiated ECN"
        )
        .passed
    );
}

#[test]
fn a_bloated_modern_dut_fails_its_acceptance() {
    let mut r = result();
    // 3 ms added at 10 Mbit/s: the p50 check fails, the grade (A+ below 5 ms) still passes
    let c = r.config.clone();
    r.parts[0] = part(
        &c,
        Case::RrulBe,
        Variant::Plain,
        vec![(DEFAULT_MODERN, good(3.0))],
    );
    finish(&mut r);
    let p50 = check(&r, "added udp rtt p50 <= 2 ms");
    assert!(!p50.passed && p50.to_string().starts_with("FAIL"), "{p50}");
    assert!(check(&r, "bufferbloat grade A+").passed);
    // a flow that stops for a second is a stall
    let mut f = r.parts[0].runs[0].flows[0].clone();
    for b in &mut f.series[60..75] {
        *b = 0;
    }
    r.parts[0].runs[0].flows[0] = f;
    finish(&mut r);
    assert_eq!(r.parts[0].rows[0].flows[0].stall_s, Some(6.0));
}

#[test]
fn text_and_json_round_trip() {
    let r = result();
    let t = text(&r);
    for needle in [
        "== rrul_be 10Mbit 50ms",
        "weir:fq_cobalt #1  udp rtt",
        "host A %",
        "DUT ecn_marks",
        "ACKs up kbit/s",
        "SKIP ackfilter 20Mbit/500kbit 50ms weir:fq_cobalt: the filter's drops are counted",
    ] {
        assert!(t.contains(needle), "{needle} missing:\n{t}");
    }
    let back: RrulResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    let mut again = back.clone();
    finish(&mut again);
    assert_eq!(text(&again), t, "re-made from the JSON alone");
    assert_eq!(report::flows_csv(&again), report::flows_csv(&r));
    let charts = report::charts(&r);
    assert_eq!(charts.len(), 3 * r.parts.len());
    assert!(charts[0].0 == "cdf-rrul_be_10Mbit_50ms.svg" && charts[0].1.contains("<svg"));
}

#[test]
fn plans_refuse_a_preset_the_compiler_does_not_know() {
    // on a weir without the modern queue its DUT is refused, by name, before anything runs
    let c = RrulConfig {
        cases: vec![Case::RrulBe],
        duts: vec!["weir:cbq+pfq".into(), "weir:nonesuch".into()],
        ..RrulConfig::quick()
    };
    let e = c.plans().unwrap_err().to_string();
    assert!(
        e.contains("DUT weir:nonesuch") && e.contains("technique"),
        "{e}"
    );
    // the existing DUTs plan; filter=on is left out without a DUT that has a filter
    let ok = RrulConfig {
        cases: vec![Case::RrulBe, Case::AckFilter],
        duts: ["kernel:bridge", ROUTER, "kernel:htb", "weir:cbq+pfq"]
            .map(String::from)
            .to_vec(),
        ..RrulConfig::quick()
    };
    let plans = ok.plans().unwrap();
    assert_eq!(plans.len(), 2, "rrul_be and ackfilter filter=off");
    assert!(plans
        .iter()
        .all(|(p, d)| p.variant != Variant::AckFilter(true) && d.len() == 4));
    assert!(RrulConfig {
        line_pct: 100,
        ..ok.clone()
    }
    .validate()
    .is_err());
    assert!(RrulConfig {
        duts: vec!["weir:cbq".into(), "weir:cbq".into()],
        ..ok
    }
    .validate()
    .is_err());
}

#[test]
fn series_take_flents_names() {
    let names = |test: &str, case: Case| {
        series::flow_names(test, case.flows(3).iter().map(|f| (f.dir, f.dscp)))
    };
    assert_eq!(
        names("rrul", Case::Rrul),
        [
            "TCP upload BE",
            "TCP upload BK",
            "TCP upload CS5",
            "TCP upload EF",
            "TCP download BE",
            "TCP download BK",
            "TCP download CS5",
            "TCP download EF"
        ]
    );
    assert_eq!(
        names("rrul_be", Case::RrulBe)[..5],
        [
            "TCP upload BE",
            "TCP upload BE2",
            "TCP upload BE3",
            "TCP upload BE4",
            "TCP download BE"
        ]
    );
    assert_eq!(
        names("tcp_ndown", Case::TcpNdown),
        ["TCP download::1", "TCP download::2", "TCP download::3"]
    );
    assert_eq!(
        series::flow_names("rrul", [(Dir::Up, 24), (Dir::Up, 10)]),
        ["TCP upload CS3", "TCP upload DSCP10"]
    );
    for (case, test) in [
        (Case::Rrul, "rrul"),
        (Case::RrulBe, "rrul_be"),
        (Case::Voice, "rrul_be"),
        (Case::TcpNup, "tcp_nup"),
        (Case::Hosts, "tcp_nup"),
        (Case::TcpNdown, "tcp_ndown"),
    ] {
        assert_eq!(series::flent_test(case), test);
    }
}

/// The in-memory result's runs written as Flent files: names, grid, values.
#[test]
fn runs_become_flent_files() {
    use std::io::Read as _;
    let r = result();
    let recs = series::recordings(&r);
    assert_eq!(
        recs.len(),
        r.parts.iter().map(|p| p.runs.len()).sum::<usize>()
    );
    let be = &recs[0];
    assert_eq!(
        (be.test.as_str(), be.dut.as_str()),
        ("rrul_be", "weir:cbq+pfq")
    );
    let names: Vec<&str> = be.series.iter().map(|s| s.name.as_str()).collect();
    for n in [
        "TCP upload BE4",
        "TCP download BE",
        "Ping (ms) UDP BE1",
        "One-way delay (ms) UDP up",
        "One-way delay (ms) UDP down",
        "Ping (ms) ICMP",
    ] {
        assert!(names.contains(&n), "{n} missing: {names:?}");
    }
    let hosts = &recs[2];
    assert_eq!(hosts.test, "tcp_nup");
    assert_eq!(hosts.test_parameters["upload_streams"], "17");

    let dir = std::env::temp_dir().join(format!("weir-rrul-flent-{}", std::process::id()));
    let written = report::write_outputs(&r, &dir).unwrap();
    let file = dir.join("rrul_be_10Mbit_50ms-weir_cbq_pfq-run1.flent.gz");
    assert!(written.contains(&file), "{written:?}");
    assert!(written.contains(&dir.join("series.csv")));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let csv = std::fs::read_to_string(dir.join("series.csv")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["metadata"]["NAME"], "rrul_be");
    assert_eq!(doc["metadata"]["STEP_SIZE"], json!(0.1));
    // 12 s of 100 ms bins: 120 grid points, the last bin ending at 12 s
    let x = doc["x_values"].as_array().unwrap();
    assert_eq!(x.len(), 120);
    // a flow's fair share: carried rate / 4, from 2 s (the idle phase sends nothing)
    let up = doc["results"]["TCP upload BE"].as_array().unwrap();
    let per_bin = (fair(&Case::RrulBe.flows(1)[0]) / 8.0 * 0.1) as u64;
    let want = per_bin as f64 * 8.0 / 0.1 / 1e6;
    assert_eq!(up.len(), 120);
    assert!((up[60].as_f64().unwrap() - want).abs() < 1e-9, "{}", up[60]);
    assert_eq!(up[10].as_f64(), Some(0.0));
    // probes every 10 ms: the loaded round trip 50 + 9 ms on the 100 ms grid
    let ping = doc["results"]["Ping (ms) ICMP"].as_array().unwrap();
    assert_eq!(ping[60].as_f64(), Some(59.0));
    assert_eq!(
        doc["raw_values"]["Ping (ms) ICMP"]
            .as_array()
            .unwrap()
            .len(),
        1200
    );
    assert!(csv.starts_with("part,dut,run,series,label,units,t_s,value\n"));
    assert!(
        csv.contains("\nrrul_be 10Mbit 50ms,weir:cbq+pfq,1,TCP upload BE,up 1 goodput,Mbits/s,")
    );
}
