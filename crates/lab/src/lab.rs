//! One shape for every lab: the [`Lab`] trait.
//!
//! A lab is one test of the papers (`basic`, `voip`, `rrul`, …, [`crate::tests`]). Every
//! one has the same life, and `weir lab NAME` drives each the same way (the generic
//! driver `run_lab` in `crates/weir/src/lab.rs`):
//!
//! 1. a preset configuration: paper length ([`Lab::paper`]) or CI-sized (`--quick`,
//!    [`Lab::quick`]), which the subcommand's own flags then change;
//! 2. [`Lab::plan`]: refuse settings that cannot run and say what will run, before
//!    anything needs root (exit status 1 on a refusal);
//! 3. root is required; one line on stderr,
//!    `weir lab NAME: <Outline::what> (about N min); outputs in DIR`;
//! 4. [`Lab::run`], with a progress printer (rewritten in place on a terminal; on a pipe
//!    the first and last line of each run, or every line when
//!    [`Lab::EVERY_PROGRESS_LINE`]);
//! 5. [`Lab::text`] on stdout, [`Lab::write_outputs`] into the output directory (always
//!    `result.json` with the result's `kind` = [`Lab::NAME`], then tables, SVG charts,
//!    `report.html`), `weir lab: wrote ...` on stderr;
//! 6. exit status 0, or 3 under `--strict` when one of [`Lab::checks`] failed.
//!
//! `weir lab report RESULT.json` reads a result back, [`Lab::finish`] recomputes its
//! statistics and checks from the raw runs, and steps 5-6 follow (never status 3). With
//! several result files it compares them instead, by each lab's [`Lab::measures`]
//! ([`crate::report::compare`]).
//!
//! # Adding a lab
//!
//! 1. A module in `tests/` (a file, or a folder past ~1,000 lines) opening with its
//!    design comment: the method, the seed it follows, its parameters with units and the
//!    paper and quick values, its measures and checks. It holds the configuration
//!    (`Serialize + Deserialize`, with `paper()` and `quick()`; presets such as DUT lists
//!    belong here too, not in the command line), the result (`kind`, `meta`, `config`,
//!    the raw runs, `checks`), `run`, `finish`, `text` and `write_outputs`.
//! 2. `impl Lab for` a type of that module: a unit struct, or one holding what a run
//!    needs beside its configuration and is not saved in it (`basic`'s policy,
//!    `robustness`'s baseline). The impl only forwards to the module's functions.
//! 3. In `crates/weir/src/lab/args.rs`: a `LabCmd` variant (the subcommand's help and
//!    example) holding `WithCommon<YourArgs>` (`--quick`, `--out`, `--strict`, then the
//!    lab's own flags), and `impl LabArgs for YourArgs` (the help of the common options,
//!    `--out`'s default; the flags put into the configuration); in `crates/weir/src/lab.rs`
//!    a line in `run`'s dispatch and one in `weir lab report`'s list (`REMAKE`).
//! 4. A section in `docs/lab.md` and an end-to-end test `crates/weir/tests/lab_NAME.rs`
//!    (bad input refused before anything runs; as root, a `--quick --strict` run).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::report::{Check, Measure};
use crate::Result;

/// What a lab will run, said before it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Outline {
    /// The runs, e.g. `20 sessions, 1 DUT(s) x 2 run(s) of 45 s`.
    pub what: String,
    /// Roughly how long the whole lab takes, s; `None` when the lab does not say.
    pub estimate_s: Option<f64>,
}

impl std::fmt::Display for Outline {
    /// `what`, then ` (about N min)` when there is an estimate.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)?;
        if let Some(s) = self.estimate_s {
            write!(f, " (about {:.0} min)", s / 60.0)?;
        }
        Ok(())
    }
}

/// A lab: see the module comment for the life every lab shares and how to add one.
pub trait Lab: Sized {
    /// The subcommand (`weir lab NAME`) and the result's `kind`.
    const NAME: &'static str;
    /// Print every progress line on a pipe, not only the first and last of each run (for
    /// labs whose lines are already one per step, like `fidelity`'s one per cell).
    const EVERY_PROGRESS_LINE: bool = false;
    /// The settings, saved in the result as `config`.
    type Config;
    /// The result, saved as `result.json` and read back by `weir lab report`.
    type Result: Serialize + DeserializeOwned;

    /// The paper's settings (as far as this machine affords them).
    fn paper() -> Self::Config;
    /// CI-sized settings.
    fn quick() -> Self::Config;
    /// Refuse settings that cannot run and say what will run; needs no root, starts
    /// nothing.
    fn plan(&self, c: &Self::Config) -> Result<Outline>;
    /// Run the lab. `out` is the output directory, for a lab that makes an input file
    /// there (`postgate`'s trace); `progress` gets a line per step.
    fn run(
        self,
        c: &Self::Config,
        out: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Self::Result>;
    /// Recompute statistics and checks from the raw runs (a result read back).
    fn finish(r: &mut Self::Result) -> Result<()>;
    /// The text printed after a run: tables and one line per check.
    fn text(r: &Self::Result) -> String;
    /// The acceptance checks.
    fn checks(r: &Self::Result) -> &[Check];
    /// Write `result.json`, tables, charts and the report into `dir`; the files written.
    fn write_outputs(r: &Self::Result, dir: &Path) -> Result<Vec<PathBuf>>;
    /// The result's headline figures, for `weir lab report`'s comparison of several result
    /// files ([`Measure`]); none by default (the comparison then shows the checks only).
    fn measures(_r: &Self::Result) -> Vec<Measure> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::advanced::Advanced;
    use crate::tests::aggregates::Aggregates;
    use crate::tests::basic::{Basic, BasicConfig};
    use crate::tests::diffserv::Diffserv;
    use crate::tests::fidelity::Fidelity;
    use crate::tests::postgate::Postgate;
    use crate::tests::rfc2544::{self, Rfc2544};
    use crate::tests::rfc6349::Rfc6349;
    use crate::tests::robustness::Robustness;
    use crate::tests::rrul::Rrul;
    use crate::tests::voip::Voip;
    use crate::tests::y1564::{self, Y1564};

    const POLICY: &str = include_str!("../../../examples/basic-test.toml");

    /// What the lab's quick run says it will run.
    fn quick_outline<L: Lab>(lab: &L) -> String {
        lab.plan(&L::quick()).unwrap().to_string()
    }

    #[test]
    fn the_outline_ends_with_the_estimate_in_whole_minutes() {
        let o = |s| Outline {
            what: "2 runs".into(),
            estimate_s: s,
        };
        assert_eq!(o(Some(96.0)).to_string(), "2 runs (about 2 min)");
        assert_eq!(o(Some(20.0)).to_string(), "2 runs (about 0 min)");
        assert_eq!(o(None).to_string(), "2 runs");
    }

    #[test]
    fn every_lab_says_what_its_quick_run_runs() {
        // each by hand from the lab's quick preset; estimates as the labs count them
        // 8 paths x 2 sizes x 2 rates x 1 repeat
        assert_eq!(
            quick_outline(&Fidelity),
            "8 paths x 2 sizes x 2 rates x 1 repeats = 32 cells of 400 ms"
        );
        // 5 classes x 4 sessions; 1 x 2 x (45 + 3) s = 96 s
        let basic = Basic {
            policy_file: "basic-test.toml".into(),
            policy_text: POLICY.into(),
        };
        assert_eq!(
            quick_outline(&basic),
            "20 sessions, 1 DUT(s) x 2 run(s) of 45 s (about 2 min)"
        );
        // runs: 1 delays + 5 loss rates + 8 sender variants = 14; traffic 1 x 40 +
        // 5 x 30 + 8 x 30 = 430 s, + 3 s a run = 472 s
        let robustness = Robustness {
            policy_file: "basic-test.toml".into(),
            policy_text: POLICY.into(),
            baseline: None,
        };
        assert_eq!(
            quick_outline(&robustness),
            "delays, loss, senders on 1 DUT(s), 14 run(s) per DUT (about 8 min)"
        );
        // 2 subtests x 1 DUT x 1 run x (15 + 3) s = 36 s
        assert_eq!(
            quick_outline(&Advanced),
            "inter, intra on 1 DUT(s) x 1 run(s) of 15 s (about 1 min)"
        );
        // 2 links x 6 DUTs x 1 run x (16 + 4) s = 240 s
        assert_eq!(
            quick_outline(&Voip),
            "links 125k, t1 on 6 DUT(s) x 1 run(s) of 16 s (about 4 min)"
        );
        // 1 run x 2 markers x (35 + 6) s = 82 s
        assert_eq!(
            quick_outline(&Aggregates),
            "1 run(s) of 35 s for each of 2 marker(s) (about 1 min)"
        );
        // weir: idle 1 + loaded 1 + 4 x 4 EF/AF UDP/TCP = 18; the kernel's HTB: loaded 1 +
        // EF UDP 4 = 5; 10 s + 23 x (2 + 0.5 + 1.5) s = 102 s
        assert_eq!(
            quick_outline(&Diffserv),
            "23 run(s) of 2 s and a 10 s calibration (about 2 min)"
        );
        // 8 flows in 2 batches: the last stops at 18 + 6 s, + 6 s = 30 s; 2 x (30 + 8) +
        // 2 x (20 + 8) = 132 s
        assert_eq!(
            quick_outline(&Postgate),
            "2 device(s) for 30 s, 2 on the varying line for 20 s (about 2 min)"
        );
        // 8 cases on one line, ecn and ackfilter in two variants: 10 parts; 5 DUTs in 9,
        // the ACK filter's on only weir:fq_cobalt: 46 runs x (2 + 10 + 6) s = 828 s
        assert_eq!(
            quick_outline(&Rrul),
            "10 part(s), 46 run(s) in all of 2 s idle + 10 s load (about 14 min)"
        );
        // voice: 4 steps + policing; video, data: 4 steps + EIR + policing: 17 streams;
        // 2 DUTs x (17 x (1.5 + 0.4) + 4 + 0.4 + 2) s = 77 s
        let y = Y1564 {
            policy_file: y1564::DEFAULT_POLICY.0.into(),
            policy_text: y1564::DEFAULT_POLICY.1.into(),
        };
        assert_eq!(
            quick_outline(&y),
            "3 service(s) (voice, video, data), 17 configuration stream(s) of 1.5 s and a 4 s \
             performance test on 2 DUT(s) (about 1 min)"
        );
        // per frame size: throughput log2(1 / 1 %) + 4 = 11 trials, latency 1, loss steps
        // 9 + 2 = 11: 23 x (1 + 0.7) s; 8 bursts x (0.25 + 0.7) s; 2 sizes x 2 DUTs: 187 s
        let r = Rfc2544 {
            policy_file: rfc2544::DEFAULT_POLICY.0.into(),
            policy_text: rfc2544::DEFAULT_POLICY.1.into(),
        };
        assert_eq!(
            quick_outline(&r),
            "class 'all' (100.000 Mbit/s) on a 1000 Mbit/s line: 2 frame size(s) x 2 DUT(s), \
             trials of 1 s (about 3 min)"
        );
        // 1 path x (4 + 1 + 1 + 2 + 1 + (10 x 1.2 + 2)) s = 23 s
        assert_eq!(
            quick_outline(&Rfc6349),
            "1 path(s) (1 DUT(s) x 1 rate(s) x 1 RTT(s) x 1 run(s)), 1 throughput test(s) of \
             10 s each (about 0 min)"
        );
    }

    #[test]
    fn a_plan_refuses_before_anything_runs() {
        let mut c = Fidelity::quick();
        c.sizes.clear();
        assert!(Fidelity.plan(&c).is_err());
        let basic = Basic {
            policy_file: "p.toml".into(),
            policy_text: "not a policy".into(),
        };
        let e = basic.plan(&Basic::quick()).unwrap_err().to_string();
        assert!(e.contains("policy"), "{e}");
        let mut c = Voip::quick();
        c.links = vec!["56k".into()];
        assert!(Voip.plan(&c).is_err());
    }

    #[test]
    fn a_basic_run_of_another_length_keeps_the_papers_window() {
        let mut c = BasicConfig::paper();
        c.set_duration(100.0);
        assert_eq!((c.duration_s, c.window_s), (100.0, (12.0, 92.0)));
        // the paper's own: 30-230 of 250 s
        c.set_duration(250.0);
        assert_eq!(c.window_s, (30.0, 230.0));
    }
}
