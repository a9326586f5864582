//! The checks of `weir lab rrul`, and the DUTs each concerns.
//!
//! | check | DUTs | parts |
//! |---|---|---|
//! | idle UDP round trip p50 within [base, base + 2 ms] (the testbed: the line's delay is right and nothing else waits) | every DUT | every part |
//! | every flow negotiated ECN under `ecn=1`, none under `ecn=0` (the hosts' sysctl took) | every DUT | `ecn` |
//! | **the acceptance**: added p50 ≤ 2 ms (10 Mbit/s) / 1 ms (100 Mbit/s) and added p99 ≤ 10 ms, for the UDP and the ICMP round trip; each flow's mean smoothed RTT ≤ base + 15 ms; goodput each way ≥ 95 % of what the rate carries; Jain ≥ 0.98 among the 8 flows; grade A+ | [`DEFAULT_MODERN`] | `rrul_be` at 10 and 100 Mbit/s, 50 ms |
//! | each host 50 % ± 5 % of the hosts' goodput | [`MODERN`] (their `hosts` policy isolates hosts: `isolate = "triple"`) | `hosts` |
//! | ≥ 95 % of the AQM's signals under `ecn=1` are marks: `ecn_marks / (ecn_marks + aqm_drops)` from the DUT report (skipped when it has no such counters) | [`MODERN`] | `ecn` |
//! | retransmissions under `ecn=1` ≤ 10 % of those under `ecn=0` (all flows, run by run) | [`MODERN`] | `ecn` |
//! | `filter=on` against `filter=off`, run by run: the downloads' ACK bytes on the uplink at most half; upload goodput higher; download goodput not lower by more than 2 %; no stalled flow with the filter on; the filter's drops counted (`ack_filter_drops` in the DUT report; skipped when absent) | [`MODERN`] (they have an ACK filter) | `ackfilter` |
//!
//! A check passes when every run of its DUT meets it; its `[N runs]` says on how many.

use super::measure::RrulRow;
use super::policy::{DutKind, DEFAULT_MODERN, MODERN};
use super::{Case, RrulPart, RrulResult, Variant};
use crate::report::{fmt_opt, Check};

/// The testbed: idle round trip p50 at most this far above the base RTT, ms.
pub const IDLE_SLACK_MS: f64 = 2.0;
/// Acceptance (rrul_be, 50 ms): added p50 at 10 and 100 Mbit/s, added p99, ms.
pub const ADDED_P50_10M_MS: f64 = 2.0;
pub const ADDED_P50_100M_MS: f64 = 1.0;
pub const ADDED_P99_MS: f64 = 10.0;
/// Each flow's smoothed RTT at most base + this, ms.
pub const SRTT_OVER_BASE_MS: f64 = 15.0;
/// Goodput each way at least this share of what the rate carries.
pub const MIN_SHARE: f64 = 0.95;
/// Jain's index among the flows at least this.
pub const MIN_JAIN: f64 = 0.98;
/// hosts: each host's share within 50 % ± this.
pub const HOST_TOLERANCE: f64 = 0.05;
/// ecn: at least this share of the AQM's signals are marks; retransmissions with ECN at
/// most this share of those without.
pub const MIN_MARK_SHARE: f64 = 0.95;
pub const MAX_ECN_RETRANS: f64 = 0.10;
/// ackfilter: ACK bytes with the filter at most this share of those without; downloads at
/// least this share.
pub const MAX_ACK_SHARE: f64 = 0.50;
pub const MIN_DOWNLOAD_KEPT: f64 = 0.98;

fn rows<'a>(p: &'a RrulPart, dut: &str) -> Vec<&'a RrulRow> {
    p.rows.iter().filter(|r| r.dut == dut).collect()
}

fn is_modern(dut: &str) -> bool {
    DutKind::parse(dut).is_ok_and(|k| k.is_modern())
}

/// A check over the rows of one DUT: passes when every row passes `ok`; the detail lists
/// each run's figure.
fn each_run(
    name: String,
    rs: &[&RrulRow],
    ok: impl Fn(&RrulRow) -> bool,
    figure: impl Fn(&RrulRow) -> String,
) -> Check {
    Check::new(
        name,
        !rs.is_empty() && rs.iter().all(|r| ok(r)),
        rs.len(),
        "runs",
        rs.iter()
            .map(|r| format!("run {}: {}", r.run + 1, figure(r)))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Every check of the result.
pub fn checks(res: &RrulResult) -> Vec<Check> {
    let mut out = Vec::new();
    for p in &res.parts {
        testbed(p, &mut out);
        if p.spec.case == Case::RrulBe
            && p.spec.link.rtt_ms == 50
            && p.spec.link.symmetric()
            && [10_000_000, 100_000_000].contains(&p.spec.link.up_bps)
        {
            acceptance(p, &mut out);
        }
        if p.spec.case == Case::Hosts {
            hosts(p, &mut out);
        }
    }
    pairs(res, Case::Ecn, &mut out);
    pairs(res, Case::AckFilter, &mut out);
    out
}

fn testbed(p: &RrulPart, out: &mut Vec<Check>) {
    let base = p.spec.link.rtt_ms as f64;
    for d in &p.policies {
        let rs = rows(p, &d.dut);
        let idle = |r: &RrulRow| r.latency("udp rtt").and_then(|l| l.idle.p50_ms);
        out.push(each_run(
            format!(
                "{} {}: idle UDP round trip p50 within [{base}, {}] ms (testbed)",
                p.spec.name(),
                d.dut,
                base + IDLE_SLACK_MS
            ),
            &rs,
            |r| idle(r).is_some_and(|x| x >= base && x <= base + IDLE_SLACK_MS),
            |r| format!("{} ms", fmt_opt(idle(r), 2)),
        ));
        if let Variant::Ecn(on) = p.spec.variant {
            out.push(each_run(
                format!(
                    "{} {}: {} flow negotiated ECN (testbed)",
                    p.spec.name(),
                    d.dut,
                    if on { "every" } else { "no" }
                ),
                &rs,
                |r| !r.flows.is_empty() && r.flows.iter().all(|f| f.ecn == on),
                |r| {
                    format!(
                        "{} of {}",
                        r.flows.iter().filter(|f| f.ecn).count(),
                        r.flows.len()
                    )
                },
            ));
        }
    }
}

fn acceptance(p: &RrulPart, out: &mut Vec<Check>) {
    let dut = DEFAULT_MODERN;
    if !p.policies.iter().any(|d| d.dut == dut) {
        return;
    }
    let rs = rows(p, dut);
    let name = |what: &str| format!("{} {dut}: {what}", p.spec.name());
    let p50_max = if p.spec.link.up_bps == 10_000_000 {
        ADDED_P50_10M_MS
    } else {
        ADDED_P50_100M_MS
    };
    let base = p.spec.link.rtt_ms as f64;
    for probe in ["udp rtt", "icmp rtt"] {
        let added = |r: &RrulRow, p99: bool| {
            r.latency(probe)
                .and_then(|l| if p99 { l.added_p99_ms } else { l.added_p50_ms })
        };
        out.push(each_run(
            name(&format!("added {probe} p50 <= {p50_max} ms")),
            &rs,
            |r| added(r, false).is_some_and(|x| x <= p50_max),
            |r| format!("{} ms", fmt_opt(added(r, false), 2)),
        ));
        out.push(each_run(
            name(&format!("added {probe} p99 <= {ADDED_P99_MS} ms")),
            &rs,
            |r| added(r, true).is_some_and(|x| x <= ADDED_P99_MS),
            |r| format!("{} ms", fmt_opt(added(r, true), 2)),
        ));
    }
    let worst_srtt = |r: &RrulRow| {
        r.flows
            .iter()
            .map(|f| f.srtt_mean_ms)
            .try_fold(f64::MIN, |m, x| x.map(|x| m.max(x)))
    };
    out.push(each_run(
        name(&format!(
            "every flow's mean smoothed RTT <= base + {SRTT_OVER_BASE_MS} ms"
        )),
        &rs,
        |r| !r.flows.is_empty() && worst_srtt(r).is_some_and(|x| x <= base + SRTT_OVER_BASE_MS),
        |r| format!("largest {} ms", fmt_opt(worst_srtt(r), 1)),
    ));
    out.push(each_run(
        name(&format!(
            "goodput each way >= {:.0} % of what the rate carries",
            MIN_SHARE * 100.0
        )),
        &rs,
        |r| {
            [&r.up, &r.down]
                .iter()
                .all(|d| d.share.is_some_and(|s| s >= MIN_SHARE))
        },
        |r| {
            format!(
                "up {} %, down {} %",
                fmt_opt(r.up.share.map(|s| s * 100.0), 1),
                fmt_opt(r.down.share.map(|s| s * 100.0), 1)
            )
        },
    ));
    out.push(each_run(
        name(&format!("Jain's index among the flows >= {MIN_JAIN}")),
        &rs,
        |r| r.jain.is_some_and(|j| j >= MIN_JAIN),
        |r| fmt_opt(r.jain, 4),
    ));
    out.push(each_run(
        name("bufferbloat grade A+"),
        &rs,
        |r| r.grade.as_deref() == Some("A+"),
        |r| {
            format!(
                "{} ({} ms)",
                r.grade.as_deref().unwrap_or("-"),
                fmt_opt(r.added_mean_ms, 2)
            )
        },
    ));
}

fn hosts(p: &RrulPart, out: &mut Vec<Check>) {
    for d in p.policies.iter().filter(|d| is_modern(&d.dut)) {
        let rs = rows(p, &d.dut);
        out.push(each_run(
            format!(
                "{} {}: each host gets 50 % ± {:.0} % (triple isolation)",
                p.spec.name(),
                d.dut,
                HOST_TOLERANCE * 100.0
            ),
            &rs,
            |r| {
                r.hosts.len() == 2
                    && r.hosts
                        .iter()
                        .all(|(_, s)| (s - 0.5).abs() <= HOST_TOLERANCE)
            },
            |r| {
                r.hosts
                    .iter()
                    .map(|(h, s)| format!("{h} {:.1} %", s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" / ")
            },
        ));
    }
}

/// The checks comparing a case's two variants on each line, run by run.
fn pairs(res: &RrulResult, case: Case, out: &mut Vec<Check>) {
    let (on_v, off_v) = match case {
        Case::Ecn => (Variant::Ecn(true), Variant::Ecn(false)),
        _ => (Variant::AckFilter(true), Variant::AckFilter(false)),
    };
    for on in res
        .parts
        .iter()
        .filter(|p| p.spec.case == case && p.spec.variant == on_v)
    {
        let Some(off) = res.parts.iter().find(|p| {
            p.spec.case == case && p.spec.variant == off_v && p.spec.link == on.spec.link
        }) else {
            continue;
        };
        let label = format!("{} {}", case.name(), on.spec.link.name());
        for d in on.policies.iter().filter(|d| is_modern(&d.dut)) {
            let pairs: Vec<(&RrulRow, &RrulRow)> = rows(on, &d.dut)
                .into_iter()
                .filter_map(|a| {
                    rows(off, &d.dut)
                        .into_iter()
                        .find(|b| b.run == a.run)
                        .map(|b| (a, b))
                })
                .collect();
            let name = |what: &str| format!("{label} {}: {what}", d.dut);
            match case {
                Case::Ecn => ecn(&pairs, &name, out),
                _ => ack_filter(&pairs, &name, out),
            }
        }
    }
}

/// A check over run pairs (with, without).
fn each_pair(
    name: String,
    pairs: &[(&RrulRow, &RrulRow)],
    ok: impl Fn(&RrulRow, &RrulRow) -> bool,
    figure: impl Fn(&RrulRow, &RrulRow) -> String,
) -> Check {
    Check::new(
        name,
        !pairs.is_empty() && pairs.iter().all(|(a, b)| ok(a, b)),
        pairs.len(),
        "runs",
        pairs
            .iter()
            .map(|(a, b)| format!("run {}: {}", a.run + 1, figure(a, b)))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn ecn(pairs: &[(&RrulRow, &RrulRow)], name: &dyn Fn(&str) -> String, out: &mut Vec<Check>) {
    let what = format!(
        ">= {:.0} % of the AQM's signals to ECN senders are marks",
        MIN_MARK_SHARE * 100.0
    );
    let counted = pairs
        .iter()
        .all(|(a, _)| a.counters.ecn_marks.is_some() && a.counters.aqm_drops.is_some());
    if counted {
        let share = |r: &RrulRow| {
            let m = r.counters.ecn_marks.unwrap_or(0) as f64;
            let d = r.counters.aqm_drops.unwrap_or(0) as f64;
            (m + d > 0.0).then(|| m / (m + d))
        };
        out.push(each_pair(
            name(&what),
            pairs,
            |a, _| share(a).is_some_and(|s| s >= MIN_MARK_SHARE),
            |a, _| {
                format!(
                    "{} marks, {} AQM drops ({} %)",
                    a.counters.ecn_marks.unwrap_or(0),
                    a.counters.aqm_drops.unwrap_or(0),
                    fmt_opt(share(a).map(|s| s * 100.0), 1)
                )
            },
        ));
    } else {
        out.push(Check::skip(
            name(&what),
            "the DUT report has no `ecn_marks` and `aqm_drops` counters to judge by",
        ));
    }
    let retx = |r: &RrulRow| r.up.retrans + r.down.retrans;
    out.push(each_pair(
        name(&format!(
            "retransmissions with ECN <= {:.0} % of those without",
            MAX_ECN_RETRANS * 100.0
        )),
        pairs,
        |a, b| retx(a) as f64 <= MAX_ECN_RETRANS * retx(b) as f64,
        |a, b| format!("{} with, {} without", retx(a), retx(b)),
    ));
}

fn ack_filter(pairs: &[(&RrulRow, &RrulRow)], name: &dyn Fn(&str) -> String, out: &mut Vec<Check>) {
    let kbit = |x: Option<f64>| fmt_opt(x.map(|v| v / 1000.0), 1);
    out.push(each_pair(
        name(&format!(
            "the downloads' ACK bytes on the uplink fall to <= {:.0} % with the filter",
            MAX_ACK_SHARE * 100.0
        )),
        pairs,
        |a, b| matches!((a.ack_up_bps, b.ack_up_bps), (Some(x), Some(y)) if y > 0.0 && x <= MAX_ACK_SHARE * y),
        |a, b| format!("{} kbit/s on, {} off", kbit(a.ack_up_bps), kbit(b.ack_up_bps)),
    ));
    out.push(each_pair(
        name("upload goodput higher with the filter"),
        pairs,
        |a, b| a.up.goodput_bps > b.up.goodput_bps,
        |a, b| {
            format!(
                "{} kbit/s on, {} off",
                kbit(Some(a.up.goodput_bps)),
                kbit(Some(b.up.goodput_bps))
            )
        },
    ));
    out.push(each_pair(
        name(&format!(
            "download goodput not lower with the filter (>= {:.0} %)",
            MIN_DOWNLOAD_KEPT * 100.0
        )),
        pairs,
        |a, b| a.down.goodput_bps >= MIN_DOWNLOAD_KEPT * b.down.goodput_bps,
        |a, b| {
            format!(
                "{} kbit/s on, {} off",
                kbit(Some(a.down.goodput_bps)),
                kbit(Some(b.down.goodput_bps))
            )
        },
    ));
    out.push(each_pair(
        name("no stalled flow with the filter (a second without a byte)"),
        pairs,
        |a, _| a.flows.iter().all(|f| f.stall_s.is_none()),
        |a, _| {
            let s: Vec<String> = a
                .flows
                .iter()
                .filter_map(|f| f.stall_s.map(|t| format!("{} at {t:.1} s", f.name)))
                .collect();
            if s.is_empty() {
                "none".into()
            } else {
                s.join("; ")
            }
        },
    ));
    let what = "the filter's drops are counted";
    if pairs
        .iter()
        .all(|(a, _)| a.counters.ack_filter_drops.is_some())
    {
        out.push(each_pair(
            name(what),
            pairs,
            |a, _| a.counters.ack_filter_drops.is_some_and(|n| n > 0),
            |a, _| format!("{} ACKs filtered", a.counters.ack_filter_drops.unwrap_or(0)),
        ));
    } else {
        out.push(Check::skip(
            name(what),
            "the DUT report has no `ack_filter_drops` counter",
        ));
    }
}

/// The modern DUTs the checks judge (for the report's notes).
pub fn judged() -> String {
    format!(
        "acceptance: {DEFAULT_MODERN}; hosts, ecn, ackfilter: {}",
        MODERN.map(|m| format!("weir:{}", m.0)).join(", ")
    )
}
