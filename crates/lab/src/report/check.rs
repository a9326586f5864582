//! Acceptance checks: one criterion of a lab, whether the run met it, on how many cells
//! (classes, runs, loss rates, …) it was judged, and the figures behind the verdict.
//! Every lab prints its checks the same way ([`Check`]'s `Display`, [`checks_text`]):
//!
//! ```text
//! PASS weir:cbq+pfq: accuracy in [0.95, 1.05] in classes >= 128 kbit/s [3 classes] c128 0.962, …
//! ```
//!
//! A check that could not be judged (the DUT did not report the counter it reads, say) is
//! *skipped* ([`Check::skip`]): it prints as `SKIP name [0] reason` and does not fail a run.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One acceptance criterion and whether the run met it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// What it was evaluated on: this many `unit`s.
    pub cells: usize,
    /// What `cells` counts ("cells", "classes", "runs", …); empty: a bare number.
    #[serde(default)]
    pub unit: String,
    pub detail: String,
    /// Not judged (the detail says why); counts as passed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

impl Check {
    /// A check judged on `cells` `unit`s.
    pub fn new(
        name: impl Into<String>,
        passed: bool,
        cells: usize,
        unit: &str,
        detail: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            passed,
            cells,
            unit: unit.into(),
            detail: detail.into(),
            skipped: false,
        }
    }

    /// A check that could not be judged, and why: `SKIP name [0] why`.
    pub fn skip(name: impl Into<String>, why: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            passed: true,
            cells: 0,
            unit: String::new(),
            detail: why.into(),
            skipped: true,
        }
    }
}

/// `PASS name [N unit] detail` (or `FAIL …`), one line without the newline.
impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match (self.skipped, self.passed) {
            (true, _) => "SKIP",
            (false, true) => "PASS",
            (false, false) => "FAIL",
        };
        write!(f, "{verdict} {} [{}", self.name, self.cells)?;
        if !self.unit.is_empty() {
            write!(f, " {}", self.unit)?;
        }
        write!(f, "] {}", self.detail)
    }
}

/// The checks as printed: one line each.
pub fn checks_text(checks: &[Check]) -> String {
    checks.iter().map(|c| format!("{c}\n")).collect()
}

/// Whether every check passed (true for none).
pub fn all_passed(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_as_pass_or_fail_with_its_unit() {
        let ok = Check::new("a: x <= 1", true, 3, "classes", "c1 0.5, c2 0.7, c3 1.0");
        assert_eq!(
            ok.to_string(),
            "PASS a: x <= 1 [3 classes] c1 0.5, c2 0.7, c3 1.0"
        );
        let bad = Check::new("b", false, 0, "", "no cells");
        assert_eq!(bad.to_string(), "FAIL b [0] no cells");
        assert_eq!(
            checks_text(&[ok.clone(), bad.clone()]),
            format!("{ok}\n{bad}\n")
        );
        assert!(!all_passed(&[ok.clone(), bad]) && all_passed(&[ok]) && all_passed(&[]));
    }

    #[test]
    fn skipped_checks_print_their_reason_and_do_not_fail() {
        let s = Check::skip("c: marks", "the DUT reports no ecn_marks");
        assert_eq!(
            s.to_string(),
            "SKIP c: marks [0] the DUT reports no ecn_marks"
        );
        assert!(all_passed(std::slice::from_ref(&s)));
        let back: Check = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert!(back.skipped && back.to_string() == s.to_string());
        // a judged check does not write the field
        let j = serde_json::to_string(&Check::new("n", true, 1, "", "d")).unwrap();
        assert!(!j.contains("skipped"), "{j}");
    }

    #[test]
    fn results_without_a_unit_still_load() {
        let c: Check =
            serde_json::from_str(r#"{"name":"n","passed":true,"cells":2,"detail":"d"}"#).unwrap();
        assert_eq!(c.to_string(), "PASS n [2] d");
    }
}
