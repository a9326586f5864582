//! Seed 000's "Basic test statistics" (Table 4): accuracy, fairness and their stability,
//! Jain's index, and the retransmission ratio of one traffic class over several runs.
//!
//! # Input
//!
//! For one class, one [`RunMeasure`] per run: the class rate configured on the DUT for that
//! run (bit/s; the paper's "given class goodput") and, per session of the class, the goodput
//! measured over the analysis window (bit/s; seed 000 analyses 30–230 s of each 250 s run)
//! and optionally the data segments the sender sent (retransmissions included) and
//! retransmitted. Goodput is "the effective throughput (bytes/time) excluding the bandwidth
//! consumed by retransmission" (Table 4, footnote 1): count each payload byte once.
//!
//! # Definitions (per class; runs r = 1..R, sessions s = 1..S)
//!
//! * normalised goodput of run r: `a_r = Σ_s goodput_{r,s} / rate_r` (dimensionless).
//! * **accuracy** = `mean_r a_r` — "the closer to 1, the better".
//! * **stability of accuracy** = `CoV_r(a_r)` = std_pop / mean over runs — closer to 0 is
//!   better. The paper's worked example ("flow aggregates (14, 7, 30, 5, and 39)" kbit/s in
//!   a 20 kbit/s class) is the CoV of these run aggregates.
//! * fairness of run r: `f_r = CoV_s(goodput_{r,s})` among the sessions of the run.
//! * **fairness** = `mean_r f_r`; **stability of fairness** = `std_pop_r(f_r)` (the paper:
//!   "the average of the CoVs (0.32)", "the standard deviation of the CoVs (0.063)").
//! * Jain's index of run r: `(Σ_s x)² / (S · Σ_s x²)`, and its mean over runs. Not in
//!   seed 000, but seed 001 uses it and it is bounded (1/S … 1), which CoV is not.
//! * **retransmission ratio** = `Σ_{r,s} retransmitted / Σ_{r,s} sent`. Table 4 prints
//!   `Σ_i (retransmitted_i / sent_i)` without a division by 5, which cannot be meant
//!   literally (it could exceed 1); we pool the counts, which weights every segment equally.
//!   Per-run ratios are kept in [`RunStats`] for anyone who prefers the mean of ratios.
//!
//! # Conventions
//!
//! * Standard deviations are **population** ones (divide by n): the runs of a test and the
//!   sessions of a class are the whole set described, not a sample. With the paper's example
//!   this gives CoV 0.70 (sample convention: 0.78); the printed "2.4" follows from neither
//!   and is taken to be a misprint. See [`weir_core::stats`].
//! * A run whose sessions all got zero goodput has no defined CoV (mean 0) and no Jain's
//!   index: it is left out of the fairness and Jain means and counted in
//!   [`ClassStats::fairness_undefined_runs`]. Its normalised goodput (0) still counts for
//!   accuracy. If no run has a defined value, the statistic is `None` (JSON `null`).
//! * A single session has fairness CoV 0 and Jain 1.
//! * The retransmission ratio is reported only when every session of every run carries
//!   both counts (partial counts would bias it silently), and the total sent is > 0.
//! * Malformed input (no runs, a run without sessions, a non-positive or non-finite rate,
//!   a negative or non-finite goodput, retransmitted > sent) is an error, never a panic or
//!   a NaN.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use weir_core::stats::{cov, jain, mean, std_pop};

use crate::report::{fmt_opt, text_table};

/// One session's measurement in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeasure {
    /// Goodput over the analysis window, bit/s.
    pub goodput_bps: f64,
    /// Data segments sent, retransmissions included.
    #[serde(default)]
    pub segments_sent: Option<u64>,
    /// Data segments retransmitted.
    #[serde(default)]
    pub segments_retransmitted: Option<u64>,
}

impl SessionMeasure {
    pub fn goodput(goodput_bps: f64) -> Self {
        Self {
            goodput_bps,
            segments_sent: None,
            segments_retransmitted: None,
        }
    }

    pub fn with_segments(goodput_bps: f64, sent: u64, retransmitted: u64) -> Self {
        Self {
            goodput_bps,
            segments_sent: Some(sent),
            segments_retransmitted: Some(retransmitted),
        }
    }
}

/// One class in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeasure {
    /// The class rate set on the DUT, bit/s.
    pub class_rate_bps: f64,
    pub sessions: Vec<SessionMeasure>,
}

impl RunMeasure {
    /// A run with goodputs only (no segment counts).
    pub fn from_goodputs(class_rate_bps: f64, goodputs_bps: &[f64]) -> Self {
        Self {
            class_rate_bps,
            sessions: goodputs_bps
                .iter()
                .map(|&g| SessionMeasure::goodput(g))
                .collect(),
        }
    }
}

/// Statistics of one class in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    pub class_rate_bps: f64,
    /// Σ session goodputs, bit/s.
    pub aggregate_goodput_bps: f64,
    /// aggregate / class rate.
    pub normalized_goodput: f64,
    /// CoV (population) of the session goodputs; `None` if they are all zero.
    pub fairness_cov: Option<f64>,
    /// Jain's index of the session goodputs; `None` if they are all zero.
    pub jain: Option<f64>,
    pub segments_sent: Option<u64>,
    pub segments_retransmitted: Option<u64>,
    /// retransmitted / sent for this run; `None` without counts or with sent = 0.
    pub retransmission_ratio: Option<f64>,
}

/// Table 4 statistics of one class over all its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassStats {
    pub runs: usize,
    /// Mean over runs of the normalised goodput (ideal 1).
    pub accuracy: f64,
    /// CoV over runs of the normalised goodput (ideal 0); `None` if accuracy is 0.
    pub accuracy_cov: Option<f64>,
    /// Mean over runs of the per-run fairness CoV (ideal 0).
    pub fairness_cov_mean: Option<f64>,
    /// Population std dev over runs of the per-run fairness CoV (ideal 0).
    pub fairness_cov_std: Option<f64>,
    /// Runs left out of the fairness and Jain statistics (all sessions at zero goodput).
    pub fairness_undefined_runs: usize,
    /// Mean over runs of Jain's index (ideal 1).
    pub jain_mean: Option<f64>,
    /// Σ retransmitted / Σ sent over all runs and sessions (ideal 0).
    pub retransmission_ratio: Option<f64>,
    pub per_run: Vec<RunStats>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Table4Error {
    #[error("no runs to analyse")]
    NoRuns,
    #[error("run {run} has no sessions")]
    NoSessions { run: usize },
    #[error("run {run}: class rate {rate} bit/s is not a positive finite number")]
    BadRate { run: usize, rate: f64 },
    #[error("run {run} session {session}: goodput {goodput} bit/s is not a finite number ≥ 0")]
    BadGoodput {
        run: usize,
        session: usize,
        goodput: f64,
    },
    #[error("run {run} session {session}: {retransmitted} segments retransmitted > {sent} sent")]
    BadSegments {
        run: usize,
        session: usize,
        sent: u64,
        retransmitted: u64,
    },
}

/// Statistics of one run (see the module comment). Errors on malformed input.
pub fn run_stats(run_index: usize, run: &RunMeasure) -> Result<RunStats, Table4Error> {
    let rate = run.class_rate_bps;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(Table4Error::BadRate {
            run: run_index,
            rate,
        });
    }
    if run.sessions.is_empty() {
        return Err(Table4Error::NoSessions { run: run_index });
    }
    let mut goodputs = Vec::with_capacity(run.sessions.len());
    let (mut sent, mut retx, mut counted) = (0u64, 0u64, true);
    for (i, s) in run.sessions.iter().enumerate() {
        if !(s.goodput_bps.is_finite() && s.goodput_bps >= 0.0) {
            return Err(Table4Error::BadGoodput {
                run: run_index,
                session: i,
                goodput: s.goodput_bps,
            });
        }
        goodputs.push(s.goodput_bps);
        match (s.segments_sent, s.segments_retransmitted) {
            (Some(n), Some(r)) => {
                if r > n {
                    return Err(Table4Error::BadSegments {
                        run: run_index,
                        session: i,
                        sent: n,
                        retransmitted: r,
                    });
                }
                sent = sent.saturating_add(n);
                retx = retx.saturating_add(r);
            }
            _ => counted = false,
        }
    }
    let aggregate: f64 = goodputs.iter().sum();
    let (segments_sent, segments_retransmitted) = if counted {
        (Some(sent), Some(retx))
    } else {
        (None, None)
    };
    Ok(RunStats {
        class_rate_bps: rate,
        aggregate_goodput_bps: aggregate,
        normalized_goodput: aggregate / rate,
        fairness_cov: cov(&goodputs),
        jain: jain(&goodputs),
        segments_sent,
        segments_retransmitted,
        retransmission_ratio: ratio(segments_sent, segments_retransmitted),
    })
}

fn ratio(sent: Option<u64>, retx: Option<u64>) -> Option<f64> {
    match (sent, retx) {
        (Some(n), Some(r)) if n > 0 => Some(r as f64 / n as f64),
        _ => None,
    }
}

/// Table 4 statistics of one class over its runs.
pub fn class_stats(runs: &[RunMeasure]) -> Result<ClassStats, Table4Error> {
    if runs.is_empty() {
        return Err(Table4Error::NoRuns);
    }
    let per_run = runs
        .iter()
        .enumerate()
        .map(|(i, r)| run_stats(i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let acc: Vec<f64> = per_run.iter().map(|r| r.normalized_goodput).collect();
    let fair: Vec<f64> = per_run.iter().filter_map(|r| r.fairness_cov).collect();
    let jains: Vec<f64> = per_run.iter().filter_map(|r| r.jain).collect();
    let all_counted = per_run.iter().all(|r| r.segments_sent.is_some());
    let (sent, retx) = if all_counted {
        let sent = per_run
            .iter()
            .map(|r| r.segments_sent.unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        let retx = per_run
            .iter()
            .map(|r| r.segments_retransmitted.unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        (Some(sent), Some(retx))
    } else {
        (None, None)
    };
    Ok(ClassStats {
        runs: runs.len(),
        // `acc` is non-empty here, so the mean exists.
        accuracy: mean(&acc).unwrap_or(0.0),
        accuracy_cov: cov(&acc),
        fairness_cov_mean: mean(&fair),
        fairness_cov_std: std_pop(&fair),
        fairness_undefined_runs: per_run.len() - fair.len(),
        jain_mean: mean(&jains),
        retransmission_ratio: ratio(sent, retx),
        per_run,
    })
}

/// Column headings of [`format_table`] and [`format_csv`], after "class" and "DUT".
pub const COLUMNS: [&str; 6] = [
    "accuracy",
    "accuracy CoV",
    "fairness CoV",
    "fairness CoV sd",
    "Jain",
    "retx ratio",
];

fn values(s: &ClassStats) -> [String; 6] {
    [
        fmt_opt(Some(s.accuracy), 3),
        fmt_opt(s.accuracy_cov, 3),
        fmt_opt(s.fairness_cov_mean, 3),
        fmt_opt(s.fairness_cov_std, 3),
        fmt_opt(s.jain_mean, 3),
        fmt_opt(s.retransmission_ratio, 4),
    ]
}

/// Rows in table order: classes in order of first appearance, and within a class the DUTs
/// in order of first appearance, so that every DUT's figures for a class sit together.
fn ordered(rows: &[(String, String, ClassStats)]) -> Vec<&(String, String, ClassStats)> {
    let mut classes: Vec<&str> = Vec::new();
    for (_, class, _) in rows {
        if !classes.contains(&class.as_str()) {
            classes.push(class);
        }
    }
    classes
        .iter()
        .flat_map(|c| rows.iter().filter(move |r| r.1 == *c))
        .collect()
}

/// A Table-4-style plain-text table comparing DUTs: one block of rows per class (in order
/// of first appearance), one row per DUT within it, columns [`COLUMNS`]. `rows` holds
/// `(dut, class, stats)`. Missing values print as `n/a`. Accuracy and fairness figures
/// have three decimals, the retransmission ratio four.
///
/// ```text
/// class     DUT   accuracy  accuracy CoV  fairness CoV  fairness CoV sd   Jain  retx ratio
/// 20kbit/s  weir     0.950         0.701         0.320            0.063  0.912      0.0210
///           tc       0.990         0.020         0.050            0.010  0.998      0.0010
/// ```
pub fn format_table(rows: &[(String, String, ClassStats)]) -> String {
    let mut table: Vec<Vec<String>> = vec![["class", "DUT"]
        .into_iter()
        .chain(COLUMNS)
        .map(String::from)
        .collect()];
    let mut last_class: Option<&str> = None;
    for (dut, class, stats) in ordered(rows) {
        let class_cell = if last_class == Some(class.as_str()) {
            String::new()
        } else {
            class.clone()
        };
        last_class = Some(class);
        let mut line = vec![class_cell, dut.clone()];
        line.extend(values(stats));
        table.push(line);
    }
    // text columns (class, DUT) left-aligned, figures right-aligned
    text_table(&table, 2)
}

/// The same table as CSV (`class,dut,accuracy,…`), full precision, empty fields for
/// missing values, fields quoted when they contain a comma, quote or newline.
pub fn format_csv(rows: &[(String, String, ClassStats)]) -> String {
    use crate::report::csv_field as field;
    fn num(v: Option<f64>) -> String {
        v.filter(|x| x.is_finite())
            .map(|x| x.to_string())
            .unwrap_or_default()
    }
    let mut out = String::from(
        "class,dut,accuracy,accuracy_cov,fairness_cov_mean,fairness_cov_std,jain_mean,retransmission_ratio\n",
    );
    for (dut, class, s) in ordered(rows) {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{}",
            field(class),
            field(dut),
            num(Some(s.accuracy)),
            num(s.accuracy_cov),
            num(s.fairness_cov_mean),
            num(s.fairness_cov_std),
            num(s.jain_mean),
            num(s.retransmission_ratio),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Seed 000's worked example: a 20 kbit/s class, five runs whose aggregates are 14, 7,
    /// 30, 5 and 39 kbit/s (here split over four sessions each, unevenly).
    /// Normalised goodputs 0.70, 0.35, 1.50, 0.25, 1.95: mean 0.95 (= 19/20).
    /// Deviations of the aggregates from 19: -5, -12, 11, -14, 20; squares sum to 886;
    /// population std dev √(886/5) = 13.3117, CoV 13.3117 / 19 = 0.70062 (sample: 0.7833).
    #[test]
    fn paper_worked_example() {
        let aggregates_kbps = [14.0, 7.0, 30.0, 5.0, 39.0];
        let runs: Vec<RunMeasure> = aggregates_kbps
            .iter()
            .map(|a| {
                let g = a * 1000.0;
                RunMeasure::from_goodputs(20_000.0, &[0.4 * g, 0.3 * g, 0.2 * g, 0.1 * g])
            })
            .collect();
        let s = class_stats(&runs).unwrap();
        assert_eq!(s.runs, 5);
        assert!(close(s.accuracy, 0.95, 1e-12));
        let exact = (886.0f64 / 5.0).sqrt() / 19.0;
        assert!(close(s.accuracy_cov.unwrap(), exact, 1e-12));
        assert!(close(s.accuracy_cov.unwrap(), 0.70, 1e-3));
        // Every run splits 40/30/20/10 %: shares mean 0.25, deviations ±0.15, ±0.05,
        // variance (2·0.0225 + 2·0.0025)/4 = 0.0125, CoV √0.0125 / 0.25 = 0.44721; the
        // same in every run, so its std dev over runs is 0.
        let f = 0.0125f64.sqrt() / 0.25;
        assert!(close(s.fairness_cov_mean.unwrap(), f, 1e-12));
        assert!(close(s.fairness_cov_std.unwrap(), 0.0, 1e-12));
        // Jain = 1² / (4 · (0.16 + 0.09 + 0.04 + 0.01)) = 1 / 1.2
        assert!(close(s.jain_mean.unwrap(), 1.0 / 1.2, 1e-12));
        assert_eq!(s.retransmission_ratio, None);
        assert_eq!(s.fairness_undefined_runs, 0);
    }

    /// Two runs, two sessions, class rate 20 kbit/s.
    ///
    /// Run 1: goodputs 6000, 4000 bit/s; sent 100, 80; retransmitted 5, 3.
    ///   aggregate 10000, normalised 0.5; mean 5000, std_pop 1000, CoV 0.2;
    ///   Jain 10000² / (2 · (6000² + 4000²)) = 1e8 / 1.04e8 = 0.961538; retx 8/180.
    /// Run 2: goodputs 9000, 9000; sent 150, 150; retransmitted 0, 2.
    ///   aggregate 18000, normalised 0.9; CoV 0; Jain 1; retx 2/300.
    /// Class: accuracy (0.5 + 0.9)/2 = 0.7; std_pop of (0.5, 0.9) = 0.2, CoV 0.2/0.7 =
    ///   0.285714; fairness mean (0.2 + 0)/2 = 0.1, std_pop 0.1; Jain mean 0.980769;
    ///   retransmission ratio (8 + 2)/(180 + 300) = 10/480 = 0.0208333.
    #[test]
    fn two_runs_two_sessions_by_hand() {
        let runs = vec![
            RunMeasure {
                class_rate_bps: 20_000.0,
                sessions: vec![
                    SessionMeasure::with_segments(6000.0, 100, 5),
                    SessionMeasure::with_segments(4000.0, 80, 3),
                ],
            },
            RunMeasure {
                class_rate_bps: 20_000.0,
                sessions: vec![
                    SessionMeasure::with_segments(9000.0, 150, 0),
                    SessionMeasure::with_segments(9000.0, 150, 2),
                ],
            },
        ];
        let s = class_stats(&runs).unwrap();
        let r1 = &s.per_run[0];
        assert_eq!(r1.aggregate_goodput_bps, 10_000.0);
        assert!(close(r1.normalized_goodput, 0.5, 1e-12));
        assert!(close(r1.fairness_cov.unwrap(), 0.2, 1e-12));
        assert!(close(r1.jain.unwrap(), 1e8 / 1.04e8, 1e-12));
        assert_eq!(
            (r1.segments_sent, r1.segments_retransmitted),
            (Some(180), Some(8))
        );
        assert!(close(r1.retransmission_ratio.unwrap(), 8.0 / 180.0, 1e-12));
        let r2 = &s.per_run[1];
        assert!(close(r2.normalized_goodput, 0.9, 1e-12));
        assert_eq!(r2.fairness_cov, Some(0.0));
        assert_eq!(r2.jain, Some(1.0));

        assert!(close(s.accuracy, 0.7, 1e-12));
        assert!(close(s.accuracy_cov.unwrap(), 0.2 / 0.7, 1e-12));
        assert!(close(s.fairness_cov_mean.unwrap(), 0.1, 1e-12));
        assert!(close(s.fairness_cov_std.unwrap(), 0.1, 1e-12));
        assert!(close(
            s.jain_mean.unwrap(),
            (1e8 / 1.04e8 + 1.0) / 2.0,
            1e-12
        ));
        assert!(close(s.retransmission_ratio.unwrap(), 10.0 / 480.0, 1e-12));
    }

    #[test]
    fn class_rate_may_change_between_runs() {
        // 10 kbit/s of 20, then 10 of 10: normalised 0.5 and 1.0, accuracy 0.75
        let runs = vec![
            RunMeasure::from_goodputs(20_000.0, &[5000.0, 5000.0]),
            RunMeasure::from_goodputs(10_000.0, &[5000.0, 5000.0]),
        ];
        let s = class_stats(&runs).unwrap();
        assert!(close(s.accuracy, 0.75, 1e-12));
        // std_pop(0.5, 1.0) = 0.25 → CoV 1/3
        assert!(close(s.accuracy_cov.unwrap(), 0.25 / 0.75, 1e-12));
    }

    #[test]
    fn zero_goodput_runs() {
        // run 1 all zero: fairness undefined, accuracy 0; run 2: one session starved.
        let runs = vec![
            RunMeasure::from_goodputs(20_000.0, &[0.0, 0.0]),
            RunMeasure::from_goodputs(20_000.0, &[10_000.0, 0.0]),
        ];
        let s = class_stats(&runs).unwrap();
        assert_eq!(s.per_run[0].fairness_cov, None);
        assert_eq!(s.per_run[0].jain, None);
        assert_eq!(s.per_run[0].normalized_goodput, 0.0);
        assert_eq!(s.fairness_undefined_runs, 1);
        // run 2: mean 5000, std_pop 5000 → CoV 1; Jain 1/2
        assert!(close(s.fairness_cov_mean.unwrap(), 1.0, 1e-12));
        assert_eq!(s.fairness_cov_std, Some(0.0));
        assert!(close(s.jain_mean.unwrap(), 0.5, 1e-12));
        // accuracy (0 + 0.5)/2 = 0.25; std_pop 0.25 → CoV 1
        assert!(close(s.accuracy, 0.25, 1e-12));
        assert!(close(s.accuracy_cov.unwrap(), 1.0, 1e-12));

        // Every run at zero: everything but accuracy is undefined, nothing panics or NaNs.
        let dead = vec![RunMeasure::from_goodputs(20_000.0, &[0.0; 4]); 3];
        let s = class_stats(&dead).unwrap();
        assert_eq!(s.accuracy, 0.0);
        assert_eq!(s.accuracy_cov, None);
        assert_eq!(s.fairness_cov_mean, None);
        assert_eq!(s.fairness_cov_std, None);
        assert_eq!(s.jain_mean, None);
        assert_eq!(s.fairness_undefined_runs, 3);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"fairness_cov_mean\":null"), "{json}");
    }

    #[test]
    fn single_session_is_perfectly_fair() {
        let runs = vec![
            RunMeasure::from_goodputs(5000.0, &[4000.0]),
            RunMeasure::from_goodputs(5000.0, &[6000.0]),
        ];
        let s = class_stats(&runs).unwrap();
        assert_eq!(s.fairness_cov_mean, Some(0.0));
        assert_eq!(s.fairness_cov_std, Some(0.0));
        assert_eq!(s.jain_mean, Some(1.0));
        assert!(close(s.accuracy, 1.0, 1e-12));
        assert!(close(s.accuracy_cov.unwrap(), 0.2, 1e-12));
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert_eq!(class_stats(&[]), Err(Table4Error::NoRuns));
        let ok = RunMeasure::from_goodputs(1000.0, &[1.0]);
        let empty = RunMeasure::from_goodputs(1000.0, &[]);
        assert_eq!(
            class_stats(&[ok.clone(), empty]),
            Err(Table4Error::NoSessions { run: 1 })
        );
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                class_stats(&[RunMeasure::from_goodputs(rate, &[1.0])]),
                Err(Table4Error::BadRate { run: 0, .. })
            ));
        }
        for g in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                class_stats(&[ok.clone(), RunMeasure::from_goodputs(1000.0, &[1.0, g])]),
                Err(Table4Error::BadGoodput {
                    run: 1,
                    session: 1,
                    ..
                })
            ));
        }
        let bad = RunMeasure {
            class_rate_bps: 1000.0,
            sessions: vec![SessionMeasure::with_segments(1.0, 3, 4)],
        };
        assert!(matches!(
            class_stats(&[bad]),
            Err(Table4Error::BadSegments { .. })
        ));
        // error messages are readable
        assert_eq!(
            Table4Error::NoSessions { run: 2 }.to_string(),
            "run 2 has no sessions"
        );
    }

    #[test]
    fn retransmission_ratio_needs_all_counts() {
        let runs = vec![
            RunMeasure {
                class_rate_bps: 1000.0,
                sessions: vec![
                    SessionMeasure::with_segments(500.0, 10, 1),
                    SessionMeasure::goodput(500.0),
                ],
            },
            RunMeasure {
                class_rate_bps: 1000.0,
                sessions: vec![SessionMeasure::with_segments(500.0, 10, 1)],
            },
        ];
        let s = class_stats(&runs).unwrap();
        assert_eq!(s.retransmission_ratio, None);
        assert_eq!(s.per_run[0].retransmission_ratio, None);
        assert!(close(
            s.per_run[1].retransmission_ratio.unwrap(),
            0.1,
            1e-12
        ));
        // sent = 0 everywhere: undefined, not NaN
        let idle = vec![RunMeasure {
            class_rate_bps: 1000.0,
            sessions: vec![SessionMeasure::with_segments(0.0, 0, 0)],
        }];
        assert_eq!(class_stats(&idle).unwrap().retransmission_ratio, None);
    }

    #[test]
    fn serde_round_trip() {
        let runs = vec![RunMeasure {
            class_rate_bps: 20_000.0,
            sessions: vec![
                SessionMeasure::with_segments(6000.0, 100, 5),
                SessionMeasure::goodput(4000.0),
            ],
        }];
        let json = serde_json::to_string(&runs).unwrap();
        let back: Vec<RunMeasure> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, runs);
        // segment counts may be omitted in hand-written input
        let r: RunMeasure =
            serde_json::from_str(r#"{"class_rate_bps":1000,"sessions":[{"goodput_bps":5}]}"#)
                .unwrap();
        assert_eq!(r.sessions[0].segments_sent, None);
        let s = class_stats(&runs).unwrap();
        let back: ClassStats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn table_groups_duts_under_each_class() {
        let mk = |g: &[f64], sent: u64, retx: u64| {
            class_stats(&[RunMeasure {
                class_rate_bps: 20_000.0,
                sessions: g
                    .iter()
                    .map(|&x| SessionMeasure::with_segments(x, sent, retx))
                    .collect(),
            }])
            .unwrap()
        };
        let a = mk(&[6000.0, 4000.0], 100, 5); // accuracy 0.5, CoV 0, fairness 0.2
        let b = mk(&[10_000.0, 10_000.0], 100, 0);
        let c = class_stats(&[RunMeasure::from_goodputs(40_000.0, &[0.0, 0.0])]).unwrap();
        let rows = vec![
            ("weir".to_string(), "20kbit/s".to_string(), a),
            ("weir".to_string(), "40kbit/s".to_string(), c),
            ("tc".to_string(), "20kbit/s".to_string(), b),
        ];
        let t = format_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("class") && lines[0].contains("retx ratio"));
        // class then its DUTs, class name not repeated
        assert!(lines[1].starts_with("20kbit/s") && lines[1].contains("weir"));
        assert!(lines[2].trim_start().starts_with("tc"), "{t}");
        assert!(lines[3].starts_with("40kbit/s") && lines[3].contains("n/a"));
        assert!(lines[1].contains("0.500") && lines[1].contains("0.200"));
        assert!(lines[1].contains("0.0500"));
        // numeric columns right-aligned: every data line has the same length as the header
        // up to the last column (all lines end in a right-aligned number or n/a)
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");

        let csv = format_csv(&rows);
        let clines: Vec<&str> = csv.lines().collect();
        assert_eq!(clines.len(), 4);
        assert!(clines[1].starts_with("20kbit/s,weir,0.5,0,0.2,0,"));
        assert!(clines[2].starts_with("20kbit/s,tc,1,"));
        assert_eq!(clines[3], "40kbit/s,weir,0,,,,,");

        assert_eq!(format_table(&[]).lines().count(), 1);
    }

    #[test]
    fn csv_quotes_fields() {
        let s = class_stats(&[RunMeasure::from_goodputs(1.0, &[1.0])]).unwrap();
        let csv = format_csv(&[("a,b".into(), "say \"hi\"".into(), s)]);
        assert!(csv
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("\"say \"\"hi\"\"\",\"a,b\","));
    }
}
