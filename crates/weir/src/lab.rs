//! `weir lab`: the namespace testbed. Each subcommand runs one of the papers' methods and
//! writes a self-describing result (JSON) plus tables, SVG plots and an HTML report;
//! `weir lab report` re-makes the outputs from a result file without re-running.
//!
//! The labs live in `weir-lab`, each implementing `weir_lab::lab::Lab` (its module comment
//! says how to add one). Here a lab is only its arguments (`args.rs`): the options every
//! lab has ([`Common`]) flattened beside its own, and [`LabArgs::apply`] putting them into
//! the lab's preset configuration; [`run_lab`] drives every lab the same way.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use weir_lab::lab::Lab;
use weir_lab::report;
use weir_lab::tests::advanced::Advanced;
use weir_lab::tests::aggregates::Aggregates;
use weir_lab::tests::basic::Basic;
use weir_lab::tests::diffserv::Diffserv;
use weir_lab::tests::fidelity::Fidelity;
use weir_lab::tests::postgate::Postgate;
use weir_lab::tests::rfc2544::Rfc2544;
use weir_lab::tests::rfc6349::Rfc6349;
use weir_lab::tests::robustness::Robustness;
use weir_lab::tests::rrul::Rrul;
use weir_lab::tests::voip::Voip;
use weir_lab::tests::y1564::Y1564;

mod args;
mod sweep;

use args::{LabCmd, ReportArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: LabCmd,
}

/// A lab subcommand's arguments: the help of the options every lab has, and the lab's own
/// flags put into its preset configuration.
trait LabArgs: clap::Args {
    type Lab: Lab;
    /// `--quick`'s help.
    const QUICK: &'static str = "CI-sized runs (see docs/lab.md for each test's quick settings)";
    /// `--out`'s default and help.
    const OUT: &'static str;
    const OUT_HELP: &'static str =
        "Directory for result.json, table.txt, SVG charts, report.html, Flent data (*.flent.gz) and series.csv";
    /// `--strict`'s help.
    const STRICT: &'static str = "Exit with status 3 when an acceptance check fails";

    /// Put the lab's own flags into its preset `c`, refusing a bad one (naming the flag);
    /// the lab to run, with what it needs beside `c` (a policy, a baseline).
    fn apply(self, c: &mut <Self::Lab as Lab>::Config) -> anyhow::Result<Self::Lab>;
}

/// A lab subcommand: the options every lab has, then the lab's own `A`.
#[derive(clap::Args)]
struct WithCommon<A: LabArgs> {
    #[command(flatten)]
    common: Common<A>,
    #[command(flatten)]
    args: A,
}

/// The options every lab has; their help and `--out`'s default come from the lab's
/// arguments `A`.
#[derive(clap::Args)]
struct Common<A: LabArgs> {
    #[arg(long, help = A::QUICK)]
    quick: bool,
    #[arg(long, default_value = A::OUT, help = A::OUT_HELP)]
    out: PathBuf,
    #[arg(long, help = A::STRICT)]
    strict: bool,
    /// Run the lab once per combination of values: FLAG=V1,V2,… names one of the lab's
    /// options (without its dashes), e.g. `--sweep rate=10,100 rtt=0,50ms cc=cubic,bbr`;
    /// each run's outputs go into OUT/FLAG=V,…, and OUT/sweep.txt and sweep.json combine
    /// them.
    #[arg(long, num_args = 1.., value_name = "FLAG=V1,V2")]
    sweep: Vec<String>,
    #[arg(skip)]
    lab: PhantomData<A>,
}

/// One lab subcommand parsed alone (a sweep parses each combination's arguments again).
#[derive(clap::Parser)]
#[command(no_binary_name = true)]
struct Alone<A: LabArgs> {
    #[command(flatten)]
    w: WithCommon<A>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    // the agents write to sockets whose peer may be gone: an error, not a signal
    // SAFETY: changing a signal disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Ctrl-C / SIGTERM: the run stops at its next step and removes what it made
    weir_io::signals::install();
    // namespaces of earlier runs that were killed outright (SIGKILL) and could not clean up
    if let Ok(stale) = weir_lab::topo::remove_stale_namespaces() {
        if !stale.is_empty() {
            eprintln!(
                "weir lab: removed {} namespace(s) left by dead runs: {}",
                stale.len(),
                stale.join(", ")
            );
        }
    }
    match a.cmd {
        LabCmd::Fidelity(a) => run_lab(a),
        LabCmd::Basic(a) => run_lab(a),
        LabCmd::Robustness(a) => run_lab(a),
        LabCmd::Advanced(a) => run_lab(a),
        LabCmd::Voip(a) => run_lab(a),
        LabCmd::Aggregates(a) => run_lab(a),
        LabCmd::Diffserv(a) => run_lab(a),
        LabCmd::Postgate(a) => run_lab(a),
        LabCmd::Rrul(a) => run_lab(a),
        LabCmd::Y1564(a) => run_lab(a),
        LabCmd::Rfc2544(a) => run_lab(a),
        LabCmd::Rfc6349(a) => run_lab(a),
        LabCmd::Report(a) => report(a),
    }
}

/// Every lab the same way (see `weir_lab::lab`): preset, flags, plan (a refusal before
/// root), root, what will run, the run with progress, text, outputs, exit status.
fn run_lab<A: LabArgs>(a: WithCommon<A>) -> anyhow::Result<ExitCode> {
    if !a.common.sweep.is_empty() {
        return sweep::run::<A>(&a.common.sweep, &a.common.out, a.common.strict);
    }
    let Common {
        quick, strict, out, ..
    } = a.common;
    let mut c = if quick {
        A::Lab::quick()
    } else {
        A::Lab::paper()
    };
    let lab = a.args.apply(&mut c)?;
    // refuse a bad plan before asking for root
    let outline = lab.plan(&c)?;
    weir_lab::topo::require_root()?;
    eprintln!(
        "weir lab {}: {outline}; outputs in {}",
        A::Lab::NAME,
        out.display()
    );
    let r = run_showing_progress(lab, &c, &out)?;
    finish::<A::Lab>(&r, &out, strict)
}

/// Run `lab` with `c` into `out`, showing its progress: every line for a lab that asks
/// ([`Lab::EVERY_PROGRESS_LINE`]), else [`with_progress`]'s printer.
fn run_showing_progress<L: Lab>(lab: L, c: &L::Config, out: &Path) -> anyhow::Result<L::Result> {
    if L::EVERY_PROGRESS_LINE {
        Ok(lab.run(c, out, &mut |line| eprintln!("{line}"))?)
    } else {
        with_progress(|progress| lab.run(c, out, progress))
    }
}

/// Print `r`, write its outputs into `out`, say which; status 3 under `strict` when a check
/// failed.
fn finish<L: Lab>(r: &L::Result, out: &Path, strict: bool) -> anyhow::Result<ExitCode> {
    finish_text::<L>(r, out)?;
    if strict && !report::all_passed(L::checks(r)) {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// Print `r`'s text, write its outputs into `out` and say which; the text.
fn finish_text<L: Lab>(r: &L::Result, out: &Path) -> anyhow::Result<String> {
    let text = L::text(r);
    print!("{text}");
    let files = L::write_outputs(r, out)?;
    eprintln!(
        "weir lab: wrote {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(text)
}

/// `weir lab report` for one lab: the result read back from `v` (the JSON of `file`), its
/// statistics and checks recomputed, printed and written into `out`.
fn remake<L: Lab>(v: serde_json::Value, file: &Path, out: &Path) -> anyhow::Result<ExitCode> {
    let mut r: L::Result =
        serde_json::from_value(v).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    L::finish(&mut r)?;
    finish::<L>(&r, out, false)
}

/// [`remake`] for one lab.
type Remake = fn(serde_json::Value, &Path, &Path) -> anyhow::Result<ExitCode>;

/// A result of one lab read back for a comparison: its checks and headline figures,
/// recomputed from the raw runs.
fn compared<L: Lab>(
    v: serde_json::Value,
    file: &Path,
) -> anyhow::Result<(Vec<report::Check>, Vec<report::Measure>)> {
    let mut r: L::Result =
        serde_json::from_value(v).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    L::finish(&mut r)?;
    Ok((L::checks(&r).to_vec(), L::measures(&r)))
}

/// [`compared`] for one lab.
type Compare =
    fn(serde_json::Value, &Path) -> anyhow::Result<(Vec<report::Check>, Vec<report::Measure>)>;

/// The labs `weir lab report` knows, by result kind.
const KINDS: [(&str, Remake, Compare); 12] = [
    (Fidelity::NAME, remake::<Fidelity>, compared::<Fidelity>),
    (Basic::NAME, remake::<Basic>, compared::<Basic>),
    (
        Robustness::NAME,
        remake::<Robustness>,
        compared::<Robustness>,
    ),
    (Advanced::NAME, remake::<Advanced>, compared::<Advanced>),
    (Voip::NAME, remake::<Voip>, compared::<Voip>),
    (
        Aggregates::NAME,
        remake::<Aggregates>,
        compared::<Aggregates>,
    ),
    (Diffserv::NAME, remake::<Diffserv>, compared::<Diffserv>),
    (Postgate::NAME, remake::<Postgate>, compared::<Postgate>),
    (Rrul::NAME, remake::<Rrul>, compared::<Rrul>),
    (Y1564::NAME, remake::<Y1564>, compared::<Y1564>),
    (Rfc2544::NAME, remake::<Rfc2544>, compared::<Rfc2544>),
    (Rfc6349::NAME, remake::<Rfc6349>, compared::<Rfc6349>),
];

/// A result file's JSON and its kind, or why it is not a weir lab result.
fn read_result(file: &Path) -> anyhow::Result<(serde_json::Value, String)> {
    let text =
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a JSON result: {e}", file.display()))?;
    let Some(kind) = v.get("kind").and_then(|k| k.as_str()).map(str::to_string) else {
        anyhow::bail!(
            "{}: no \"kind\" field: not a weir lab result",
            file.display()
        )
    };
    if !KINDS.iter().any(|(k, ..)| *k == kind) {
        anyhow::bail!(
            "{}: unknown result kind '{kind}' (expected one of {})",
            file.display(),
            KINDS.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
        );
    }
    Ok((v, kind))
}

fn report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    if a.result.len() > 1 {
        return compare(a);
    }
    if !a.label.is_empty() {
        anyhow::bail!("--label names the files of a comparison: give two result files or more");
    }
    let file = &a.result[0];
    let (v, kind) = read_result(file)?;
    let out = a.out.clone().unwrap_or_else(|| {
        file.parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|| PathBuf::from("."))
    });
    let remake = KINDS.iter().find(|(k, ..)| *k == kind).expect("checked").1;
    remake(v, file, &out)
}

/// Each file's label: `--label`'s, else its directory's name where those differ, else
/// A, B, C, ….
fn labels(files: &[PathBuf], given: &[String]) -> anyhow::Result<Vec<String>> {
    if !given.is_empty() {
        if given.len() != files.len() {
            anyhow::bail!(
                "--label: {} label(s) for {} result files (one each, in order)",
                given.len(),
                files.len()
            );
        }
        return Ok(given.to_vec());
    }
    let dirs: Vec<Option<String>> = files
        .iter()
        .map(|f| {
            std::path::absolute(f).ok().and_then(|p| {
                p.parent()?
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
        })
        .collect();
    let unique = dirs.iter().all(Option::is_some)
        && dirs.iter().collect::<std::collections::HashSet<_>>().len() == dirs.len();
    Ok(if unique {
        dirs.into_iter().flatten().collect()
    } else {
        (0..files.len())
            .map(|i| {
                let l = (b'A' + (i % 26) as u8) as char;
                if i < 26 {
                    l.to_string()
                } else {
                    format!("{l}{}", i / 26)
                }
            })
            .collect()
    })
}

/// `weir lab report A.json B.json …`: the files compared ([`report::compare`]).
fn compare(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let labels = labels(&a.result, &a.label)?;
    let mut files = Vec::new();
    for (file, label) in a.result.iter().zip(labels) {
        let (v, kind) = read_result(file)?;
        let date = v["meta"]["unix_time"]
            .as_str()
            .and_then(|t| t.parse::<f64>().ok())
            .map(weir_lab::report::flent::iso_utc)
            .unwrap_or_default();
        let compare = KINDS.iter().find(|(k, ..)| *k == kind).expect("checked").2;
        let (checks, measures) = compare(v, file)?;
        files.push(report::compare::Compared {
            label,
            file: file.clone(),
            kind,
            date,
            checks,
            measures,
        });
    }
    let out = a.out.unwrap_or_else(|| PathBuf::from("weir-lab-compare"));
    print!("{}", report::compare::comparison_text(&files));
    let written = report::compare::write_comparison(&files, &out)?;
    eprintln!(
        "weir lab: wrote {}",
        written
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Run `f` with a progress printer (see [`progress_printer`]); ends the progress line.
fn with_progress<T>(
    f: impl FnOnce(&mut dyn FnMut(&str)) -> weir_lab::Result<T>,
) -> anyhow::Result<T> {
    let (tty, mut progress) = progress_printer();
    let r = f(&mut progress);
    if tty {
        eprintln!();
    }
    Ok(r?)
}

/// Progress: rewritten in place on a terminal; otherwise one line as each run starts and
/// ends ("... 1/30 s", "... 30/30 s").
fn progress_printer() -> (bool, impl FnMut(&str)) {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let f = move |line: &str| {
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if let Some(frac) = line.strip_suffix(" s").and_then(|l| l.rsplit(' ').next()) {
            if let Some((a, b)) = frac.split_once('/') {
                if a == "0" || a == "1" || a == b {
                    eprintln!("{line}");
                }
            }
        }
    };
    (tty, f)
}
