//! `weir lab report A.json B.json …`: several result files in one comparison (issue 29's
//! "`weir lab report` combines several result files").
//!
//! Every lab can name its headline figures ([`Measure`]: a figure, where it was taken, the
//! DUT, one value per run, and a distribution such as every probe's round trip); a
//! comparison lines up the measures of every file that share a scope and a figure, each
//! DUT labelled with its file's label (`A: weir:fq_cobalt`). Results of different labs may
//! be mixed; a figure only one file has is shown alone.
//!
//! Outputs ([`write_comparison`]): `compare.txt` (the files, their checks, then a table per
//! figure: runs, median, min, max per DUT), `compare.csv` (one row per value),
//! `box-N.svg` (a box plot per figure over runs, [`box_chart`]), `cdf-N.svg` (the CDF of
//! each distribution), `compare.html`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::boxplot::{box_chart, BoxStats};
use super::check::{all_passed, Check};
use super::line::{line_chart, ChartOpts, Series};
use super::{csv_field, escape, html_report, text_table, write_files, Section};
use crate::stats::dist::ecdf;
use crate::Result;

/// One headline figure of a result, for one DUT in one scope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// Where it was taken: a case, link or frame size (`rrul_be 10Mbit 50ms`).
    pub scope: String,
    /// The figure with its unit (`added UDP RTT p50, ms`).
    pub figure: String,
    /// The DUT.
    pub subject: String,
    /// One value per run (non-finite: not measured in that run).
    pub values: Vec<f64>,
    /// A distribution to draw as a CDF under [`Measure::samples_figure`], may be empty.
    #[serde(default)]
    pub samples: Vec<f64>,
    #[serde(default)]
    pub samples_figure: String,
}

impl Measure {
    /// A figure without a distribution.
    pub fn new(scope: &str, figure: &str, subject: &str, values: Vec<f64>) -> Measure {
        Measure {
            scope: scope.into(),
            figure: figure.into(),
            subject: subject.into(),
            values,
            samples: Vec::new(),
            samples_figure: String::new(),
        }
    }

    /// The same with a distribution `samples` of `figure`.
    pub fn with_samples(self, figure: &str, samples: Vec<f64>) -> Measure {
        Measure {
            samples,
            samples_figure: figure.into(),
            ..self
        }
    }
}

/// Add `value` (one run's) to the measure of `scope`, `figure` and `subject` in `out`,
/// making it if it is new.
pub fn push_value(out: &mut Vec<Measure>, scope: &str, figure: &str, subject: &str, value: f64) {
    match out
        .iter_mut()
        .find(|m| m.scope == scope && m.figure == figure && m.subject == subject)
    {
        Some(m) => m.values.push(value),
        None => out.push(Measure::new(scope, figure, subject, vec![value])),
    }
}

/// Add `samples` to the distribution `figure` of `scope` and `subject` in `out` (a measure
/// without values of its own).
pub fn push_samples(
    out: &mut Vec<Measure>,
    scope: &str,
    figure: &str,
    subject: &str,
    samples: impl IntoIterator<Item = f64>,
) {
    let i = match out.iter().position(|m| {
        m.scope == scope
            && m.samples_figure == figure
            && m.subject == subject
            && m.values.is_empty()
    }) {
        Some(i) => i,
        None => {
            out.push(Measure::new(scope, "", subject, Vec::new()).with_samples(figure, Vec::new()));
            out.len() - 1
        }
    };
    out[i].samples.extend(samples);
}

/// One result file in a comparison.
#[derive(Clone, Debug)]
pub struct Compared {
    /// Its label (`A`, or what `--label` said).
    pub label: String,
    pub file: PathBuf,
    /// The lab (the result's `kind`) and when it ran (its meta's `date`, if any).
    pub kind: String,
    pub date: String,
    pub checks: Vec<Check>,
    pub measures: Vec<Measure>,
}

/// The figures shared across files, in first-seen order: (scope, figure) with every file's
/// DUTs as `(label: subject, values)`.
pub type Table = ((String, String), Vec<(String, Vec<f64>)>);

/// Line up the measures of `files` by scope and figure.
pub fn tables(files: &[Compared]) -> Vec<Table> {
    group(files, |m| {
        (!m.values.is_empty()).then_some((&m.figure, &m.values))
    })
}

/// The distributions across files by scope and figure: `(label: subject, samples)`.
fn distributions(files: &[Compared]) -> Vec<Table> {
    group(files, |m| {
        (!m.samples.is_empty()).then_some((&m.samples_figure, &m.samples))
    })
}

/// What `pick` takes of each measure (a figure's name and numbers), grouped by scope and
/// that name in first-seen order, each row labelled `label: subject`.
fn group(
    files: &[Compared],
    pick: impl Fn(&Measure) -> Option<(&String, &Vec<f64>)>,
) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    for f in files {
        for m in &f.measures {
            let Some((figure, numbers)) = pick(m) else {
                continue;
            };
            let key = (m.scope.clone(), figure.clone());
            let row = (format!("{}: {}", f.label, m.subject), numbers.clone());
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, rows)) => rows.push(row),
                None => out.push((key, vec![row])),
            }
        }
    }
    out
}

fn num(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// The comparison as text.
pub fn comparison_text(files: &[Compared]) -> String {
    let mut s = format!("Comparison of {} result files\n", files.len());
    for f in files {
        let failed = f.checks.iter().filter(|c| !c.passed).count();
        s += &format!(
            "  {} = {} ({}{}; {} of {} checks passed{})\n",
            f.label,
            f.file.display(),
            f.kind,
            if f.date.is_empty() {
                String::new()
            } else {
                format!(", {}", f.date)
            },
            f.checks.len() - failed,
            f.checks.len(),
            if all_passed(&f.checks) {
                ""
            } else {
                ": FAILED"
            }
        );
    }
    s += "\n";
    for ((scope, figure), rows) in tables(files) {
        s += &format!("{scope}: {figure}\n");
        let mut t = vec![vec![
            "DUT".to_string(),
            "runs".into(),
            "median".into(),
            "min".into(),
            "max".into(),
        ]];
        for (who, values) in &rows {
            let b = BoxStats::of(values);
            t.push(vec![
                who.clone(),
                values.iter().filter(|v| v.is_finite()).count().to_string(),
                num(b.map_or(f64::NAN, |b| b.median)),
                num(b.map_or(f64::NAN, |b| b.min)),
                num(b.map_or(f64::NAN, |b| b.max)),
            ]);
        }
        s += &text_table(&t, 1);
        s += "\n";
    }
    if files.iter().all(|f| f.measures.is_empty()) {
        s += "(none of these labs names headline figures yet: only their checks compare)\n";
    }
    s
}

/// One row per value: file, label, kind, scope, figure, DUT, run, value.
fn comparison_csv(files: &[Compared]) -> String {
    let mut s = String::from("label,file,kind,scope,figure,dut,run,value\n");
    for f in files {
        for m in &f.measures {
            for (i, v) in m.values.iter().enumerate() {
                s += &format!(
                    "{},{},{},{},{},{},{},{}\n",
                    csv_field(&f.label),
                    csv_field(&f.file.display().to_string()),
                    csv_field(&f.kind),
                    csv_field(&m.scope),
                    csv_field(&m.figure),
                    csv_field(&m.subject),
                    i + 1,
                    if v.is_finite() {
                        v.to_string()
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    s
}

/// Write the comparison into `dir` (see the module documentation); the files written.
pub fn write_comparison(files: &[Compared], dir: &Path) -> Result<Vec<PathBuf>> {
    let text = comparison_text(files);
    let mut out = vec![
        ("compare.txt".to_string(), text.clone()),
        ("compare.csv".to_string(), comparison_csv(files)),
    ];
    let mut figs = Section::new("Box plots over runs");
    for (i, ((scope, figure), rows)) in tables(files).into_iter().enumerate() {
        let svg = box_chart(&format!("{scope}: {figure}"), figure.as_str(), &rows, &[]);
        figs = figs.svg(svg.clone());
        out.push((format!("box-{}.svg", i + 1), svg));
    }
    let mut cdfs = Section::new("Distributions");
    for (i, ((scope, figure), rows)) in distributions(files).into_iter().enumerate() {
        let series: Vec<Series> = rows
            .iter()
            .map(|(who, v)| Series::new(who.clone(), ecdf(v)))
            .collect();
        let svg = line_chart(
            &format!("{scope}: {figure} (CDF)"),
            &figure,
            "fraction",
            &series,
            &ChartOpts {
                y_range: Some((0.0, 1.0)),
                ..Default::default()
            },
        );
        cdfs = cdfs.svg(svg.clone());
        out.push((format!("cdf-{}.svg", i + 1), svg));
    }
    let mut sections = vec![Section::new("Files and figures").pre(text)];
    sections.push(figs);
    sections.push(cdfs);
    let mut checks = Section::new("Checks");
    for f in files {
        let lines: Vec<String> = f.checks.iter().map(|c| c.to_string()).collect();
        checks = checks.pre(format!(
            "{} ({}):\n{}",
            f.label,
            escape(&f.kind),
            lines.join("\n")
        ));
    }
    sections.push(checks);
    out.push((
        "compare.html".to_string(),
        html_report("weir lab report: comparison", &sections),
    ));
    write_files(dir, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(label: &str, kind: &str, measures: Vec<Measure>, passed: bool) -> Compared {
        Compared {
            label: label.into(),
            file: PathBuf::from(format!("/r/{label}/result.json")),
            kind: kind.into(),
            date: "2026-11-27".into(),
            checks: vec![Check::new("c", passed, 1, "", "")],
            measures,
        }
    }

    #[test]
    fn measures_line_up_by_scope_and_figure_across_files() {
        let a = file(
            "A",
            "rrul",
            vec![
                Measure::new("10Mbit", "added RTT p50, ms", "weir", vec![2.0, 2.2, 2.1])
                    .with_samples("UDP RTT, ms", vec![50.0, 52.0]),
                Measure::new("10Mbit", "goodput, Mbit/s", "weir", vec![9.0]),
            ],
            true,
        );
        let b = file(
            "B",
            "rrul",
            vec![
                Measure::new("10Mbit", "added RTT p50, ms", "weir", vec![5.0]),
                Measure::new("100Mbit", "added RTT p50, ms", "htb", vec![f64::NAN]),
            ],
            false,
        );
        let files = [a, b];
        let t = tables(&files);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t[0].0,
            ("10Mbit".to_string(), "added RTT p50, ms".to_string())
        );
        assert_eq!(t[0].1.len(), 2);
        assert_eq!(t[0].1[1].0, "B: weir");
        let text = comparison_text(&files);
        assert!(text.contains("A = /r/A/result.json (rrul, 2026-11-27; 1 of 1 checks passed)"));
        assert!(text.contains("0 of 1 checks passed: FAILED"), "{text}");
        // A's median of 2.0, 2.2, 2.1 is 2.1; B's NaN run is not counted
        let line = text.lines().find(|l| l.starts_with("A: weir")).unwrap();
        assert!(
            line.contains("2.100") && line.contains("2.000") && line.contains("2.200"),
            "{line}"
        );
        let nan = text.lines().find(|l| l.starts_with("B: htb")).unwrap();
        assert!(nan.contains("n/a"), "{nan}");
        let csv = comparison_csv(&files);
        assert_eq!(csv.lines().count(), 1 + 3 + 1 + 1 + 1);
        assert!(csv.contains("A,/r/A/result.json,rrul,10Mbit,\"added RTT p50, ms\",weir,2,2.2"));

        let dir = std::env::temp_dir().join(format!("weir-compare-{}", std::process::id()));
        let written = write_comparison(&files, &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "compare.txt",
                "compare.csv",
                "box-1.svg",
                "box-2.svg",
                "box-3.svg",
                "cdf-1.svg",
                "compare.html"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn values_and_samples_accumulate_per_scope_figure_and_subject() {
        let mut m = Vec::new();
        push_value(&mut m, "s", "f", "weir", 1.0);
        push_value(&mut m, "s", "f", "weir", 2.0);
        push_value(&mut m, "s", "f", "htb", 3.0);
        push_samples(&mut m, "s", "RTT, ms", "weir", [5.0, 6.0]);
        push_samples(&mut m, "s", "RTT, ms", "weir", [7.0]);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].values, [1.0, 2.0]);
        assert_eq!(m[2].samples, [5.0, 6.0, 7.0]);
        assert!(m[2].values.is_empty());
        let files = [file("A", "x", m, true)];
        assert_eq!(
            tables(&files).len(),
            1,
            "a distribution alone makes no table"
        );
        assert_eq!(distributions(&files).len(), 1);
    }

    #[test]
    fn labs_without_measures_compare_by_checks() {
        let files = [
            file("A", "voip", vec![], true),
            file("B", "voip", vec![], true),
        ];
        let text = comparison_text(&files);
        assert!(text.contains("only their checks compare"), "{text}");
    }
}
