//! The rrul lab's time series in Flent's own names, so that `flent --input` draws them
//! with Flent's plots for the same test (`-p all_scaled`, `ping_cdf`, `totals`, `upload`).
//!
//! Which Flent test a part records as (its `tests/*.conf`, read in tohojo/flent 2.3.0):
//!
//! | weir case | Flent test | TCP series | UDP probe |
//! |---|---|---|---|
//! | `rrul` | `rrul` | `TCP upload BE`, `… BK`, `… CS5`, `… EF`; `TCP download …` | `Ping (ms) UDP BE` |
//! | `rrul_be`, `voice`, `ecn`, `ackfilter` | `rrul_be` | `TCP upload BE`, `… BE2` … (the k-th flow of a direction); `TCP download …` | `Ping (ms) UDP BE1` |
//! | `tcp_nup`, `hosts` | `tcp_nup` (`upload_streams` = N) | `TCP upload::1` … `::N` | `Ping (ms) UDP BE` |
//! | `tcp_ndown` | `tcp_ndown` (`download_streams` = N) | `TCP download::1` … | `Ping (ms) UDP BE` |
//!
//! TCP goodput is Mbit/s per 100 ms bin, at each bin's end; the ICMP probe is
//! `Ping (ms) ICMP` everywhere; round trips are ms at each probe's send time. A DSCP
//! outside rrul's four marks is `CSn` (or `DSCPn`). Flent computes the tests' sums and
//! averages (`TCP upload sum`, `Ping (ms) avg`, `TCP totals`) from these on loading.
//! weir's own extra series take names outside Flent's globs (`TCP*`, `Ping (ms)*`), so
//! they do not enter those sums: `One-way delay (ms) UDP up`/`down` (the UDP probe each
//! way) and the voice case's `VoIP delay (ms) NAME`. The grid's step is the bin (0.1 s);
//! TIME and T0 are the run's start.

use std::collections::BTreeMap;

use super::case::RRUL_MARKS;
use super::{Case, Dir, ProbeSeries, RrulResult, RrulRun, BIN_MS};
use crate::agents::ProbeKind;
use crate::report::{Recording, TimeSeries};
use crate::tests::testbed::voice_delay_series;

/// The Flent test a case records as.
pub fn flent_test(case: Case) -> &'static str {
    match case {
        Case::Rrul => "rrul",
        Case::TcpNup | Case::Hosts => "tcp_nup",
        Case::TcpNdown => "tcp_ndown",
        Case::RrulBe | Case::Voice | Case::Ecn | Case::AckFilter => "rrul_be",
    }
}

fn mark(dscp: u8) -> String {
    match RRUL_MARKS.iter().find(|m| m.1 == dscp) {
        Some((m, _)) => m.to_string(),
        None if dscp.is_multiple_of(8) => format!("CS{}", dscp / 8),
        None => format!("DSCP{dscp}"),
    }
}

/// Flent's names of a run's flows, in order: per direction and mark the first flow is
/// `TCP upload BE`, the k-th `TCP upload BEk` (`rrul`, `rrul_be`), or the k-th flow of a
/// direction `TCP upload::k` (`tcp_nup`, `tcp_ndown`).
pub fn flow_names(test: &str, flows: impl IntoIterator<Item = (Dir, u8)>) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    flows
        .into_iter()
        .map(|(dir, dscp)| {
            let dir = match dir {
                Dir::Up => "upload",
                Dir::Down => "download",
            };
            if test.starts_with("tcp_n") {
                let k = seen.entry(dir.to_string()).or_default();
                *k += 1;
                return format!("TCP {dir}::{k}");
            }
            let base = format!("TCP {dir} {}", mark(dscp));
            let k = seen.entry(base.clone()).or_default();
            *k += 1;
            if *k == 1 {
                base
            } else {
                format!("{base}{k}")
            }
        })
        .collect()
}

fn probe_series(test: &str, p: &ProbeSeries) -> Vec<TimeSeries> {
    let at = |vals: &[Option<i64>]| -> Vec<(f64, f64)> {
        p.sent_us
            .iter()
            .zip(vals)
            .filter_map(|(&t, d)| Some((t as f64 / 1e6, (*d)? as f64 / 1000.0)))
            .collect()
    };
    match p.kind {
        Some(ProbeKind::Icmp) => vec![TimeSeries::new(
            "Ping (ms) ICMP",
            "ICMP round trip",
            "ms",
            at(&p.rtt_us),
        )],
        Some(ProbeKind::Udp) => {
            let rtt = if test == "rrul_be" {
                "Ping (ms) UDP BE1"
            } else {
                "Ping (ms) UDP BE"
            };
            vec![
                TimeSeries::new(rtt, "UDP round trip", "ms", at(&p.rtt_us)),
                TimeSeries::new(
                    "One-way delay (ms) UDP up",
                    "UDP one-way delay up",
                    "ms",
                    at(&p.up_us),
                ),
                TimeSeries::new(
                    "One-way delay (ms) UDP down",
                    "UDP one-way delay down",
                    "ms",
                    at(&p.down_us),
                ),
            ]
        }
        None => Vec::new(),
    }
}

/// One run's recording (see the module comment).
pub fn recording(part: &str, case: Case, r: &RrulRun) -> Recording {
    let test = flent_test(case);
    let names = flow_names(test, r.flows.iter().map(|f| (f.dir, f.dscp)));
    let mut series: Vec<TimeSeries> = r
        .flows
        .iter()
        .zip(names)
        .map(|(f, n)| TimeSeries::goodput_mbps(n, format!("{} goodput", f.name), &f.series, BIN_MS))
        .collect();
    for p in &r.probes {
        series.extend(probe_series(test, p));
    }
    for c in &r.calls {
        series.push(voice_delay_series(c, r.t0_ns, 0.0));
    }
    let count = |d: Dir| r.flows.iter().filter(|f| f.dir == d).count().to_string();
    let test_parameters = match test {
        "tcp_nup" => BTreeMap::from([("upload_streams".to_string(), count(Dir::Up))]),
        "tcp_ndown" => BTreeMap::from([("download_streams".to_string(), count(Dir::Down))]),
        _ => BTreeMap::new(),
    };
    Recording {
        part: part.to_string(),
        dut: r.dut.clone(),
        run: r.run,
        test: test.to_string(),
        test_parameters,
        hosts: vec![super::run::SERVER.to_string()],
        start_unix_s: r.t0_ns as f64 / 1e9,
        length_s: r.seconds,
        step_s: BIN_MS as f64 / 1000.0,
        series,
    }
}

/// Every run of every part.
pub fn recordings(res: &RrulResult) -> Vec<Recording> {
    res.parts
        .iter()
        .flat_map(|p| {
            let name = p.spec.name();
            p.runs.iter().map(move |r| recording(&name, p.spec.case, r))
        })
        .collect()
}
