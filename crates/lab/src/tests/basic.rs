//! Seed 000's Basic Test: class-based bandwidth limitation and per-session guarantee.
//!
//! A T1 (1.544 Mbit/s) partitioned into five classes of 20, 40, 128, 256 and 1100 kbit/s
//! (the policy: `examples/basic-test.toml` by default, any policy in general), each class
//! matching four TCP sessions from distinct source addresses, each session guaranteed a
//! quarter of its class. All sessions pump bulk TCP for the whole run; the receiver counts
//! bytes per second per session; goodput over the analysis window feeds seed 000's Table 4
//! statistics ([`crate::stats::table4`]): **accuracy** (class goodput / class rate, mean over runs)
//! with its stability (CoV over runs), **fairness** (CoV of the sessions' goodputs, mean over
//! runs) with its stability (std dev over runs), Jain's index, and the **retransmission
//! ratio** (segments retransmitted / segments sent, SYNs included).
//!
//! Paper mode: 5 runs of 250 s, analysis window 30-230 s. Quick mode (`--quick`): 2 runs of
//! 45 s, window 10-40 s. Hosts as in seed 000 Table 3: 1500-byte packets (MSS 1460), SACK,
//! timestamps and window scaling off; congestion control Reno (the paper's senders) unless
//! asked otherwise.
//!
//! Note on accuracy: goodput counts TCP payload, the class rate counts Ethernet frames
//! (weir's and the kernel's rates count frames without FCS), so a perfectly enforced class
//! reads 1460/1514 = 0.964, not 1.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_core::policy::Policy;

use super::testbed::{self, HostTcp, Plan, RunOutcome, SessionPlan};
use crate::lab::{Lab, Outline};
use crate::report::{self, checks_text, fmt_opt, Check};
use crate::stats::table4::{self, ClassStats};
use crate::{Error, Result};

/// Ideal accuracy with 1460-byte payloads in 1514-byte frames.
pub const PAYLOAD_SHARE: f64 = 1460.0 / 1514.0;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BasicConfig {
    pub runs: u32,
    pub duration_s: f64,
    pub window_s: (f64, f64),
    pub sessions_per_class: usize,
    pub cc: String,
    pub duts: Vec<String>,
    pub busy_poll: bool,
    /// Real hosts instead of namespaces (`--topology FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::remote::Topology>,
}

impl BasicConfig {
    pub fn paper() -> Self {
        BasicConfig {
            runs: 5,
            duration_s: 250.0,
            window_s: (30.0, 230.0),
            sessions_per_class: 4,
            cc: "reno".into(),
            duts: vec!["weir:cbq+pfq".into()],
            busy_poll: false,
            topology: None,
        }
    }

    pub fn quick() -> Self {
        BasicConfig {
            runs: 2,
            duration_s: 45.0,
            window_s: (10.0, 40.0),
            ..Self::paper()
        }
    }

    /// Runs of `duration_s` analysed in the paper's proportions ([`WINDOW_SHARE`]).
    pub fn set_duration(&mut self, duration_s: f64) {
        self.duration_s = duration_s;
        self.window_s = (duration_s * WINDOW_SHARE.0, duration_s * WINDOW_SHARE.1);
    }
}

/// The paper's analysis window as shares of the run: 30-230 s of 250 s skips the first
/// 12 % and stops 8 % before the end.
pub const WINDOW_SHARE: (f64, f64) = (0.12, 0.92);

/// The plan: `sessions_per_class` sessions in every leaf class of the policy.
pub fn plan(policy_file: &str, policy_text: &str, c: &BasicConfig) -> Result<Plan> {
    let p = Policy::parse(policy_file, policy_text)
        .map_err(|e| Error::Invalid(format!("policy: {e}")))?;
    let mut sessions = Vec::new();
    let mut used = Vec::new();
    for ci in p.leaves() {
        let class = p.classes[ci].name.clone();
        let addrs = testbed::addresses_for_class(&p, &class, c.sessions_per_class, &used)?;
        for (k, a) in addrs.into_iter().enumerate() {
            used.push(a);
            sessions.push(SessionPlan {
                name: format!("{class}-{}", k + 1),
                class: class.clone(),
                src: a,
                cc: c.cc.clone(),
                mss: Some(1460),
                rcvbuf: None,
                start_s: 0.0,
                stop_s: c.duration_s,
                wan: None,
            });
        }
    }
    let plan = Plan {
        name: "basic".into(),
        policy_text: policy_text.into(),
        policy_file: policy_file.into(),
        sessions,
        tcp: HostTcp::seed000(),
        duration_s: c.duration_s,
        window_s: c.window_s,
        interval_ms: 1000,
        busy_poll: c.busy_poll,
        voice: Vec::new(),
        line_bps: None,
        udp: Vec::new(),
        stage_policy: None,
        count_dscp: false,
        topology: c.topology.clone(),
    };
    plan.validate()?;
    Ok(plan)
}

/// A whole Basic Test: every run of every DUT, and what follows from them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BasicResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: BasicConfig,
    pub plan: Plan,
    pub runs: Vec<RunOutcome>,
    /// (DUT, class, statistics), recomputed from `runs` by [`stats`].
    #[serde(default)]
    pub stats: Vec<(String, String, ClassStats)>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Run the test: for each DUT, `runs` runs.
pub fn run(
    policy_file: &str,
    policy_text: &str,
    c: &BasicConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<BasicResult> {
    let plan = plan(policy_file, policy_text, c)?;
    let specs = testbed::dut_specs(&c.duts)?;
    let runs = testbed::run_each(&plan, &specs, c.runs, progress)?;
    let mut res = BasicResult {
        kind: "basic".into(),
        meta: report::meta(),
        config: c.clone(),
        plan,
        runs,
        stats: Vec::new(),
        checks: Vec::new(),
    };
    finish(&mut res)?;
    Ok(res)
}

/// The lab (`weir lab basic`): the policy every DUT enforces, by file name and text.
pub struct Basic {
    pub policy_file: String,
    pub policy_text: String,
}

impl Lab for Basic {
    const NAME: &'static str = "basic";
    type Config = BasicConfig;
    type Result = BasicResult;

    fn paper() -> BasicConfig {
        BasicConfig::paper()
    }

    fn quick() -> BasicConfig {
        BasicConfig::quick()
    }

    fn plan(&self, c: &BasicConfig) -> Result<Outline> {
        let plan = plan(&self.policy_file, &self.policy_text, c)?;
        testbed::check_duts(c.topology.as_ref(), &c.duts)?;
        Ok(Outline {
            what: format!(
                "{} sessions, {} DUT(s) x {} run(s) of {} s",
                plan.sessions.len(),
                c.duts.len(),
                c.runs,
                c.duration_s
            ),
            estimate_s: Some(c.duts.len() as f64 * c.runs as f64 * (c.duration_s + 3.0)),
        })
    }

    fn run(
        self,
        c: &BasicConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<BasicResult> {
        run(&self.policy_file, &self.policy_text, c, progress)
    }

    fn finish(r: &mut BasicResult) -> Result<()> {
        finish(r)
    }

    fn text(r: &BasicResult) -> String {
        text(r)
    }

    fn checks(r: &BasicResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &BasicResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Recompute the statistics and checks from the runs (also for `weir lab report`).
pub fn finish(res: &mut BasicResult) -> Result<()> {
    res.stats = stats(res)?;
    res.checks = checks(res);
    Ok(())
}

/// Table 4 per DUT and class, classes in policy order.
pub fn stats(res: &BasicResult) -> Result<Vec<(String, String, ClassStats)>> {
    testbed::table4_stats(&res.plan, &res.runs, &res.config.duts)
}

/// The acceptance criteria for `weir:cbq+pfq`: accuracy in [0.95, 1.05] and fairness
/// CoV <= 0.10 in every class of 128 kbit/s and above.
pub fn checks(res: &BasicResult) -> Vec<Check> {
    match res.plan.policy() {
        Ok(policy) => table4_checks(&policy, &res.config.duts, &res.stats, ""),
        Err(_) => Vec::new(),
    }
}

/// One criterion of [`table4_checks`]: its name, the word for a failing value, the
/// statistic, and the test.
type Criterion = (
    &'static str,
    &'static str,
    fn(&ClassStats) -> Option<f64>,
    fn(f64) -> bool,
);

const ACCURACY_95: Criterion = (
    "accuracy in [0.95, 1.05]",
    "outside",
    |s| Some(s.accuracy),
    |v| (0.95..=1.05).contains(&v),
);
const FAIRNESS_10: Criterion = (
    "fairness CoV <= 0.10",
    "above",
    |s| s.fairness_cov_mean,
    |v| v <= 0.10,
);
const ACCURACY_93: Criterion = (
    "accuracy >= 0.93",
    "below",
    |s| Some(s.accuracy),
    |v| v >= 0.93,
);
const FAIRNESS_05: Criterion = (
    "fairness CoV <= 0.05",
    "above",
    |s| s.fairness_cov_mean,
    |v| v <= 0.05,
);
const RETX_1: Criterion = (
    "retransmission ratio <= 1 %",
    "above",
    |s| s.retransmission_ratio,
    |v| v <= 0.01,
);

/// Which DUTs are judged, on classes of at least which rate, by what: `weir:cbq+pfq` in
/// every class of 128 kbit/s and above (the shaper alone cannot serve the narrow classes,
/// seed 000), `weir:cbq+pfq+tcr` in every class (the TCP rate control issue).
const JUDGED: [(&str, u64, &str, &[Criterion]); 2] = [
    (
        "weir:cbq+pfq",
        128_000,
        "in classes >= 128 kbit/s",
        &[ACCURACY_95, FAIRNESS_10],
    ),
    (
        "weir:cbq+pfq+tcr",
        0,
        "in every class",
        &[ACCURACY_93, FAIRNESS_05, RETX_1],
    ),
];

/// The Basic Test's criteria ([`JUDGED`]) on Table 4 rows `stats` (DUT, class,
/// statistics) of `policy`, for the judged DUTs among `duts`. `prefix` starts every
/// check's name.
pub fn table4_checks(
    policy: &Policy,
    duts: &[String],
    stats: &[(String, String, ClassStats)],
    prefix: &str,
) -> Vec<Check> {
    let mut out = Vec::new();
    let fmt = |x: Option<f64>| fmt_opt(x, 3);
    for (dut, min_rate, scope, criteria) in JUDGED {
        if !duts.iter().any(|d| d == dut) {
            continue;
        }
        let rows: Vec<&(String, String, ClassStats)> = stats
            .iter()
            .filter(|(d, c, _)| {
                d == dut
                    && policy
                        .class_index(c)
                        .is_some_and(|i| policy.classes[i].rate >= min_rate)
            })
            .collect();
        for (what, bad_word, get, ok) in criteria {
            let bad: Vec<String> = rows
                .iter()
                .filter(|(_, _, s)| !get(s).is_some_and(ok))
                .map(|(_, c, s)| format!("{c} {}", fmt(get(s))))
                .collect();
            out.push(Check::new(
                format!("{prefix}{dut}: {what} {scope}"),
                !rows.is_empty() && bad.is_empty(),
                rows.len(),
                "classes",
                if bad.is_empty() {
                    rows.iter()
                        .map(|(_, c, s)| format!("{c} {}", fmt(get(s))))
                        .collect::<Vec<_>>()
                        .join(", ")
                } else {
                    format!("{bad_word}: {}", bad.join(", "))
                },
            ));
        }
    }
    out
}

/// The Table 4 text for all DUTs side by side, then the checks.
pub fn text(res: &BasicResult) -> String {
    let mut s = format!(
        "Basic Test (seed 000 Table 4): {} runs of {} s, window {:.1}-{:.1} s, {} sessions per class, {}\n\
         accuracy = class goodput / class rate (ideal {:.3}: payload in frames); fairness = CoV of session goodputs\n\n",
        res.config.runs,
        res.config.duration_s,
        res.config.window_s.0,
        res.config.window_s.1,
        res.config.sessions_per_class,
        res.config.cc,
        PAYLOAD_SHARE
    );
    s += &table4::format_table(&res.stats);
    s += "\n";
    s += &checks_text(&res.checks);
    s
}

/// The three Table 4 bar charts of seed 000 Figs. 8-10 style: accuracy (with its std dev
/// over runs), fairness (mean CoV with its std dev) and retransmission ratio, one group per
/// entry of `classes` and one bar per entry of `labels`; `get(label, class)` finds the
/// statistics. `names` gives per chart its file name and title.
pub(crate) fn table4_bar_charts<'a>(
    classes: &[String],
    labels: &[String],
    get: impl Fn(&str, &str) -> Option<&'a ClassStats>,
    names: [(&str, &str); 3],
) -> Vec<(String, String)> {
    let grid = |f: &dyn Fn(&ClassStats) -> Option<(f64, f64)>| -> Vec<Vec<Option<(f64, f64)>>> {
        classes
            .iter()
            .map(|c| labels.iter().map(|l| get(l, c).and_then(f)).collect())
            .collect()
    };
    let [(acc_file, acc_title), (fair_file, fair_title), (rtx_file, rtx_title)] = names;
    vec![
        (
            acc_file.to_string(),
            report::bar_chart(
                acc_title,
                "class goodput / class rate",
                classes,
                labels,
                &grid(&|s| Some((s.accuracy, s.accuracy * s.accuracy_cov.unwrap_or(0.0)))),
                &report::BarOpts {
                    hlines: vec![(PAYLOAD_SHARE, "ideal 0.964".into())],
                    ..Default::default()
                },
            ),
        ),
        (
            fair_file.to_string(),
            report::bar_chart(
                fair_title,
                "CoV",
                classes,
                labels,
                &grid(&|s| {
                    s.fairness_cov_mean
                        .map(|m| (m, s.fairness_cov_std.unwrap_or(0.0)))
                }),
                &report::BarOpts::default(),
            ),
        ),
        (
            rtx_file.to_string(),
            report::bar_chart(
                rtx_title,
                "retransmitted / sent",
                classes,
                labels,
                &grid(&|s| s.retransmission_ratio.map(|r| (r, 0.0))),
                &report::BarOpts::default(),
            ),
        ),
    ]
}

/// Bar charts in the style of seed 000 Figs. 8-10 (accuracy, fairness, retransmissions per
/// class, one bar per DUT) and, per DUT, the per-second goodput of every session in run 1.
pub fn charts(res: &BasicResult) -> Vec<(String, String)> {
    let classes: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for (_, c, _) in &res.stats {
            if !v.contains(c) {
                v.push(c.clone());
            }
        }
        v
    };
    let duts = &res.config.duts;
    let get = |d: &str, c: &str| {
        res.stats
            .iter()
            .find(|(dd, cc, _)| dd == d && cc == c)
            .map(|(_, _, s)| s)
    };
    let mut out = table4_bar_charts(
        &classes,
        duts,
        get,
        [
            (
                "accuracy.svg",
                "Accuracy (mean normalised goodput; bars: std dev over runs)",
            ),
            (
                "fairness.svg",
                "Fairness (mean CoV among sessions; bars: std dev over runs)",
            ),
            ("retransmissions.svg", "Retransmission ratio"),
        ],
    );
    for d in duts {
        let Some(r) = res.runs.iter().find(|r| &r.dut == d) else {
            continue;
        };
        let series: Vec<report::Series> = r
            .sessions
            .iter()
            .map(|s| {
                report::Series::new(
                    s.name.clone(),
                    s.series
                        .iter()
                        .enumerate()
                        .map(|(i, &b)| (i as f64 + 0.5, b as f64 * 8.0 / 1000.0))
                        .collect(),
                )
            })
            .collect();
        let name = format!("goodput-{}.svg", report::file_safe(d));
        out.push((
            name,
            report::line_chart(
                &format!("{d}: goodput per session, run {}", r.run + 1),
                "time (s)",
                "kbit/s",
                &series,
                &report::ChartOpts {
                    y_include_zero: true,
                    ..Default::default()
                },
            ),
        ));
    }
    out
}

/// Write result.json, table.txt, table.csv, the SVGs and report.html into `dir`.
pub fn write_outputs(res: &BasicResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    testbed::Outputs {
        title: "weir lab basic",
        meta: &res.meta,
        json: report::to_json(res)?,
        text_heading: "Table 4",
        text: text(res),
        extra: vec![("table.csv".to_string(), table4::format_csv(&res.stats))],
        figs_heading: "Figures (seed 000 Figs. 8-10 style)",
        charts: charts(res),
        parts: vec![(&res.plan, res.runs.as_slice())],
    }
    .write(dir)
}
