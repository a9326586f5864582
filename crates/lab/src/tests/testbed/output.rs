//! The outputs every testbed test writes.

use std::collections::BTreeMap;

use super::{Plan, RunOutcome};
use crate::report::{html_report, meta_text, write_files, Section};
use crate::Result;

/// The outputs every testbed test writes: `result.json` (the result, serialised),
/// `table.txt` (`text`), any `extra` text files, the SVG `charts`, and `report.html` with
/// the run's metadata, the text, the charts, the policies and what ran on each DUT.
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
        write_files(dir, &files)
    }
}
