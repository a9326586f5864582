//! The link-shaping fidelity lab of seed 002 (Chertov & Almeroth, "High-Fidelity Link
//! Shaping"): how faithfully does an emulator deliver the rate and delay it was asked for?
//!
//! # Method (the seed's, in namespaces)
//!
//! A constant-rate UDP flow ([`crate::agents::cbr`]) of fixed-size frames crosses one *path* from a
//! sender namespace to a receiver namespace. The receiver takes kernel timestamps and, per
//! cell (frame size × packet rate × repeat), reports the 10th/50th/90th percentiles of the
//! **inter-frame gap** (time between consecutive arrivals) and of the one-way **delay**, the
//! mean gap, and the **loss ratio**. Frame sizes are the seed's 64, 800 and 1518 bytes
//! *including* the 4-byte FCS (what the seed's NICs put on the wire); weir and the kernel see
//! frames without FCS (60, 796, 1514 bytes), so every rate limiter here counts 4 bytes of
//! overhead per frame (weir's `overhead = 4`, the kernel's `stab overhead 4`), and a
//! 1518-byte frame takes 1518 × 8 / 155 Mbit/s = 78.35 µs, the seed's theoretical gap.
//!
//! Paths ([`PathKind`]), as in the seed's tables:
//!
//! | name | what | seed |
//! |---|---|---|
//! | `veth` | sender and receiver joined by one veth pair (calibration) | Tables I–II |
//! | `weir-0ms` | weir bridge, emulator with no impairment | IX–X |
//! | `weir-125ms` | weir, 125 ms delay, queue = BDP (no rate: unlimited) | XI–XII |
//! | `weir-125ms-155M` | weir, 125 ms and 155 Mbit/s, queue = BDP | XIII–XIV |
//! | `weir-155M` | weir, 155 Mbit/s, no delay (like for like with the kernel rows) | — |
//! | `tbf-155M` | kernel bridge with `tbf rate 155mbit` on the egress port | XVII–XVIII (the router) |
//! | `htb-155M` | kernel bridge with one `htb` class at 155mbit | XVII–XVIII |
//!
//! Cells whose offered bit rate exceeds the *line* (1 Gbit/s, the seed's NICs) are not run
//! and are marked `over line rate`, as the seed leaves them blank. Cells above a path's
//! emulated rate are run — that is where the shaper's inter-frame gaps show — and their loss
//! is expected (queue overflow), not an artefact. A cell whose sender could not keep the
//! asked rate (achieved < 98 %) is marked `generator-limited`: its figures are what was
//! measured, at the rate achieved.
//!
//! # Timing on a 2-core machine
//!
//! The sender paces by spinning (pinned to CPU 0); weir's bridge runs pinned to CPU 1, by
//! default in busy-poll mode (a sleeping bridge wakes a few µs late, which widens the gap
//! spread); veth delivers into the receiver inside the transmitting thread, and the sink only
//! collects kernel timestamps, so its own scheduling does not affect the figures.
//!
//! # Checks ([`check`])
//!
//! The acceptance criteria of the emulator issue, evaluated on the cells that ran:
//! delay p90 − p10 ≤ 100 µs on `weir-125ms` at rates the generator sustained; on the
//! 155 Mbit/s weir paths, in cells above the link rate, the mean gap within ±1 % of the
//! serialisation time and p10 and p90 within ±10 µs of it; zero loss (beyond the sender's own
//! send errors) on every weir path in cells below its rate; and weir's gap spread
//! (p90 − p10) no wider than the kernel's in the same cells.
//!
//! `mod.rs` holds the paths, the cells and the checks; `run.rs` builds the paths and
//! measures the cells; `output.rs` prints the tables and draws the gap plots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lab::{Lab, Outline};
use crate::report::Check;
use crate::stats::dist::Pcts;
use crate::{Error, Result};

mod output;
mod run;

pub use output::{gap_plots, html, plot_cell, tables, write_outputs};
pub use run::{kernel_commands, run, weir_policy};

/// Bytes of FCS the seed's frame sizes include and weir's do not.
pub const FCS: u32 = 4;

/// One path a CBR flow crosses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PathKind {
    /// A veth pair, nothing between (calibration).
    Veth,
    /// The weir bridge with one emulated link.
    Weir {
        delay_ns: u64,
        rate_bps: Option<u64>,
        /// Correlated jitter on the delay (the frames may reorder).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jitter: Option<JitterSpec>,
    },
    /// The kernel bridge with a TBF on the egress port.
    KernelTbf { rate_bps: u64 },
    /// The kernel bridge with one HTB class on the egress port.
    KernelHtb { rate_bps: u64 },
}

/// Jitter with netem's correlation, as weir defines it: normally distributed offsets of
/// standard deviation `sigma_ns` whose lag-1 autocorrelation is `correlation` (in [0, 1];
/// `weir_core::emulate::corr`), frames free to reorder (`delay 125ms 5ms 50% distribution
/// normal` in netem's words).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct JitterSpec {
    pub sigma_ns: u64,
    pub correlation: f64,
}

/// A named path and the seed tables it reproduces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Path {
    pub name: String,
    pub kind: PathKind,
    pub tables: String,
}

impl Path {
    /// The emulated rate, if the path limits it.
    pub fn rate_bps(&self) -> Option<u64> {
        match self.kind {
            PathKind::Veth => None,
            PathKind::Weir { rate_bps, .. } => rate_bps,
            PathKind::KernelTbf { rate_bps } | PathKind::KernelHtb { rate_bps } => Some(rate_bps),
        }
    }

    pub fn is_weir(&self) -> bool {
        matches!(self.kind, PathKind::Weir { .. })
    }

    pub fn is_kernel(&self) -> bool {
        matches!(
            self.kind,
            PathKind::KernelTbf { .. } | PathKind::KernelHtb { .. }
        )
    }
}

const R155: u64 = 155_000_000;
const D125: u64 = 125_000_000;
/// The jitter row's setting: σ 5 ms, lag-1 autocorrelation 0.5.
const JITTER: JitterSpec = JitterSpec {
    sigma_ns: 5_000_000,
    correlation: 0.5,
};
/// How far the measured lag-1 autocorrelation of the delays may be from the setting.
pub const CORRELATION_TOLERANCE: f64 = 0.05;

/// The paths of the seed's tables plus the like-for-like weir row (see the module comment).
pub fn standard_paths() -> Vec<Path> {
    let p = |name: &str, kind, tables: &str| Path {
        name: name.into(),
        kind,
        tables: tables.into(),
    };
    vec![
        p("veth", PathKind::Veth, "I-II"),
        p(
            "weir-0ms",
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: None,
                jitter: None,
            },
            "IX-X",
        ),
        p(
            "weir-125ms",
            PathKind::Weir {
                delay_ns: D125,
                rate_bps: None,
                jitter: None,
            },
            "XI-XII",
        ),
        p(
            "weir-125ms-jitter",
            PathKind::Weir {
                delay_ns: D125,
                rate_bps: None,
                jitter: Some(JITTER),
            },
            "-",
        ),
        p(
            "weir-125ms-155M",
            PathKind::Weir {
                delay_ns: D125,
                rate_bps: Some(R155),
                jitter: None,
            },
            "XIII-XIV",
        ),
        p(
            "weir-155M",
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: Some(R155),
                jitter: None,
            },
            "-",
        ),
        p(
            "tbf-155M",
            PathKind::KernelTbf { rate_bps: R155 },
            "XVII-XVIII",
        ),
        p(
            "htb-155M",
            PathKind::KernelHtb { rate_bps: R155 },
            "XVII-XVIII",
        ),
    ]
}

/// The [`standard_paths`] named in `names`, in that order; the message of a refusal names
/// the unknown path and the known ones.
pub fn paths_named(names: &[String]) -> std::result::Result<Vec<Path>, String> {
    let all = standard_paths();
    names
        .iter()
        .map(|n| {
            all.iter().find(|p| &p.name == n).cloned().ok_or_else(|| {
                format!(
                    "unknown path '{n}'; expected some of {}",
                    all.iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FidelityConfig {
    /// Frame sizes in bytes, FCS included (the seed's 64, 800, 1518).
    pub sizes: Vec<u32>,
    /// Packet rates, packets/s.
    pub rates: Vec<u32>,
    pub repeats: u32,
    /// Sending time per cell.
    pub cell_ms: u64,
    /// Cells above this bit rate (frame bytes incl. FCS × 8 × pps) are not run.
    pub line_rate_bps: u64,
    pub paths: Vec<Path>,
    /// weir's bridge spins instead of sleeping between packets.
    pub busy_poll: bool,
    /// Seed of weir's random number generator.
    pub seed: u64,
    /// Number of inter-frame gaps kept per cell for the gap-per-packet plots.
    pub keep_gaps: usize,
    /// Real hosts instead of namespaces (`--topology FILE`): the CBR's sender and sink run
    /// on its hosts `sender` and `receiver`, every path but `veth` at its `[dut]`.
    #[serde(default)]
    pub topology: Option<crate::remote::Topology>,
}

impl FidelityConfig {
    /// The seed's grid: 3 sizes × 5 rates, 3 repeats of 1 s per cell, every path.
    pub fn paper() -> Self {
        FidelityConfig {
            sizes: vec![64, 800, 1518],
            rates: vec![8_000, 40_000, 80_000, 120_000, 200_000],
            repeats: 3,
            cell_ms: 1000,
            line_rate_bps: 1_000_000_000,
            paths: standard_paths(),
            busy_poll: true,
            seed: 1,
            keep_gaps: 400,
            topology: None,
        }
    }

    /// A CI-sized run: 64- and 1518-byte frames at 8k and 80k packets/s, one repeat of
    /// 0.4 s, every path.
    pub fn quick() -> Self {
        FidelityConfig {
            sizes: vec![64, 1518],
            rates: vec![8_000, 80_000],
            repeats: 1,
            cell_ms: 400,
            ..Self::paper()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(m));
        if self.sizes.is_empty() || self.rates.is_empty() || self.paths.is_empty() {
            return bad("fidelity: sizes, rates and paths must not be empty".into());
        }
        for &s in &self.sizes {
            if !(64..=1518).contains(&s) {
                return bad(format!(
                    "fidelity: frame size {s} is outside 64..=1518 bytes (FCS included)"
                ));
            }
        }
        if self.rates.contains(&0) {
            return bad("fidelity: a packet rate of 0".into());
        }
        if self.repeats == 0 || self.cell_ms == 0 {
            return bad("fidelity: repeats and cell time must be > 0".into());
        }
        if let Some(t) = &self.topology {
            if self.paths.iter().any(|p| p.kind == PathKind::Veth) {
                return bad(format!(
                    "fidelity: the veth path (calibration: two namespaces of this machine \
                     joined by a veth pair) does not run on the hosts of {}; leave it out of \
                     --paths",
                    t.file
                ));
            }
            if matches!(t.dut, crate::remote::TopoDut::External) {
                return bad(format!(
                    "fidelity: every path is a device the lab configures (weir's emulator, \
                     the kernel's TBF or HTB), and the DUT of {} is external: name its \
                     interfaces on this machine (`[dut] lan`, `wan`)",
                    t.file
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    Ok,
    /// Not run: above the line rate.
    OverLineRate,
    /// Ran, but the sender achieved less than 98 % of the asked rate.
    GeneratorLimited,
    /// Could not be measured.
    Failed(String),
}

/// One cell: a path, frame size and packet rate, one repeat.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    pub path: String,
    /// Frame size, FCS included.
    pub size: u32,
    pub pps: u32,
    pub repeat: u32,
    pub status: CellStatus,
    /// Offered load, bit/s (frame incl. FCS).
    pub offered_bps: u64,
    /// Whether the offered load is above the path's emulated rate.
    pub over_path_rate: bool,
    pub sent: u64,
    pub send_errors: u64,
    pub achieved_pps: f64,
    pub late: u64,
    pub received: u64,
    pub lost: u64,
    /// Lost beyond the sender's own send errors, over packets sent.
    pub loss_ratio: f64,
    pub reordered: u64,
    pub duplicates: u64,
    pub socket_drops: u64,
    pub ifg_us: Pcts,
    pub delay_us: Pcts,
    /// The lag-1 autocorrelation of the one-way delays in sending order (consecutive
    /// sequence numbers), the statistic netem's jitter correlation names.
    #[serde(default)]
    pub delay_lag1: Option<f64>,
    /// A window of consecutive inter-frame gaps (µs) from the middle of the run.
    pub gaps_window_us: Vec<f32>,
    /// weir's bridge counters for this cell's path (JSON), when weir ran it.
    #[serde(default)]
    pub weir: Option<serde_json::Value>,
    /// Frames the kernel dropped during this cell because weir's receive ring was full:
    /// weir did not keep up with the offered packet rate (weir paths only).
    #[serde(default)]
    pub dut_rx_drops: Option<u64>,
}

impl Cell {
    /// Whether the device kept up: no receive-ring overflow (always true for non-weir paths).
    pub fn sustained(&self) -> bool {
        self.dut_rx_drops.unwrap_or(0) == 0
    }
}

/// A whole run: configuration, environment, cells, checks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FidelityResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: FidelityConfig,
    pub cells: Vec<Cell>,
    pub checks: Vec<Check>,
    /// The real hosts' names, versions and clock offsets (empty in namespaces).
    #[serde(default)]
    pub hosts: Vec<crate::remote::HostInfo>,
}

/// The lab (`weir lab fidelity`).
pub struct Fidelity;

impl Lab for Fidelity {
    const NAME: &'static str = "fidelity";
    // one line per cell
    const EVERY_PROGRESS_LINE: bool = true;
    type Config = FidelityConfig;
    type Result = FidelityResult;

    fn paper() -> FidelityConfig {
        FidelityConfig::paper()
    }

    fn quick() -> FidelityConfig {
        FidelityConfig::quick()
    }

    fn plan(&self, c: &FidelityConfig) -> Result<Outline> {
        c.validate()?;
        let cells = c.paths.len() * c.sizes.len() * c.rates.len() * c.repeats as usize;
        Ok(Outline {
            what: format!(
                "{} paths x {} sizes x {} rates x {} repeats = {cells} cells of {} ms",
                c.paths.len(),
                c.sizes.len(),
                c.rates.len(),
                c.repeats,
                c.cell_ms
            ),
            estimate_s: None,
        })
    }

    fn run(
        self,
        c: &FidelityConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<FidelityResult> {
        run(c, progress)
    }

    fn finish(r: &mut FidelityResult) -> Result<()> {
        r.checks = check(r);
        Ok(())
    }

    /// The tables, a blank line, the checks.
    fn text(r: &FidelityResult) -> String {
        format!("{}\n{}", tables(r), crate::report::checks_text(&r.checks))
    }

    fn checks(r: &FidelityResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &FidelityResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Serialisation time in µs of a frame of `size` bytes (FCS included) at `bps`.
pub fn serialisation_us(size: u32, bps: u64) -> f64 {
    size as f64 * 8.0 / bps as f64 * 1e6
}

pub(super) fn ran(c: &Cell) -> bool {
    matches!(c.status, CellStatus::Ok | CellStatus::GeneratorLimited)
}

/// Evaluate the acceptance criteria (see the module comment) on `r`'s cells.
pub fn check(r: &FidelityResult) -> Vec<Check> {
    let mut out = Vec::new();
    let path = |name: &str| r.config.paths.iter().find(|p| p.name == name);
    // 1. delay spread at 125 ms
    for p in
        r.config.paths.iter().filter(
            |p| matches!(p.kind, PathKind::Weir { delay_ns, rate_bps: None, jitter: None } if delay_ns > 0),
        )
    {
        let all: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| c.path == p.name && c.status == CellStatus::Ok)
            .collect();
        let cells: Vec<&Cell> = all.iter().copied().filter(|c| c.sustained()).collect();
        let excluded = unsustained_note(&all);
        let worst = cells
            .iter()
            .filter_map(|c| c.delay_us.spread().map(|s| (s, c)))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        out.push(Check::new(
            format!("{}: delay p90 - p10 <= 100 us at sustained rates", p.name),
            !cells.is_empty() && worst.is_some_and(|(s, _)| s <= 100.0),
            cells.len(),
            "cells",
            worst.map_or("no cells".into(), |(s, c)| {
                format!("widest {s:.1} us ({} B at {} pps){excluded}", c.size, c.pps)
            }),
        ));
    }
    // 2. gaps at the emulated rate
    for p in r
        .config
        .paths
        .iter()
        .filter(|p| p.is_weir() && p.rate_bps().is_some())
    {
        let rate = p.rate_bps().unwrap();
        let cells: Vec<&Cell> = r
            .cells
            .iter()
            .filter(|c| c.path == p.name && ran(c) && c.over_path_rate && c.size >= 800)
            .collect();
        let mut worst_mean: f64 = 0.0;
        let mut worst_tail: f64 = 0.0;
        let mut ok = !cells.is_empty();
        for c in &cells {
            let t = serialisation_us(c.size, rate);
            let (Some(mean), Some(p10), Some(p90)) = (c.ifg_us.mean, c.ifg_us.p10, c.ifg_us.p90)
            else {
                ok = false;
                continue;
            };
            let m = (mean - t).abs() / t;
            let tail = (p10 - t).abs().max((p90 - t).abs());
            worst_mean = worst_mean.max(m);
            worst_tail = worst_tail.max(tail);
            ok &= m <= 0.01 && tail <= 10.0;
        }
        out.push(Check::new(
            format!(
                "{}: mean gap within 1 % of the serialisation time, p10/p90 within 10 us (800/1518 B above the rate)",
                p.name
            ),
            ok,
            cells.len(),
            "cells",
            format!(
                "worst mean error {:.3} %, worst p10/p90 distance {worst_tail:.1} us",
                worst_mean * 100.0
            ),
        ));
    }
    // 3. no artefact loss below the rate
    for p in r.config.paths.iter().filter(|p| p.is_weir()) {
        let (cells, excluded) = sustained_below_rate(r, &p.name);
        let lossy: Vec<&&Cell> = cells.iter().filter(|c| c.loss_ratio > 0.0).collect();
        out.push(Check::new(
            format!("{}: zero loss below the link rate", p.name),
            !cells.is_empty() && lossy.is_empty(),
            cells.len(),
            "cells",
            if lossy.is_empty() {
                format!("no loss{excluded}")
            } else {
                lossy
                    .iter()
                    .map(|c| {
                        format!(
                            "{} B at {} pps: {:.4} %",
                            c.size,
                            c.pps,
                            c.loss_ratio * 100.0
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        ));
    }
    // 4. weir's gap spread vs the kernel's, same rate, same cells (no delay on either)
    let weir_like = r.config.paths.iter().find(|p| {
        matches!(
            p.kind,
            PathKind::Weir {
                delay_ns: 0,
                rate_bps: Some(_),
                jitter: None,
            }
        )
    });
    for k in r.config.paths.iter().filter(|p| p.is_kernel()) {
        let Some(w) = weir_like.filter(|w| w.rate_bps() == k.rate_bps()) else {
            continue;
        };
        let mut n = 0;
        let mut ok = true;
        let mut worst = String::new();
        let mut worst_d = f64::MIN;
        for kc in r
            .cells
            .iter()
            .filter(|c| c.path == k.name && ran(c) && c.over_path_rate)
        {
            let Some(wc) = r.cells.iter().find(|c| {
                c.path == w.name
                    && c.size == kc.size
                    && c.pps == kc.pps
                    && c.repeat == kc.repeat
                    && ran(c)
            }) else {
                continue;
            };
            let (Some(ws), Some(ks)) = (wc.ifg_us.spread(), kc.ifg_us.spread()) else {
                continue;
            };
            n += 1;
            // no wider, allowing 1 µs of measurement noise
            ok &= ws <= ks + 1.0;
            if ws - ks > worst_d {
                worst_d = ws - ks;
                worst = format!(
                    "{} B at {} pps: weir {ws:.1} us vs {} {ks:.1} us",
                    kc.size, kc.pps, k.name
                );
            }
        }
        let _ = path;
        out.push(Check::new(
            format!(
                "{}: gap spread (p90 - p10) no wider than {}'s above the rate",
                w.name, k.name
            ),
            n > 0 && ok,
            n,
            "cells",
            if n == 0 {
                "no comparable cells".into()
            } else {
                format!("closest to failing: {worst}")
            },
        ));
    }
    // 5. correlated jitter: the delays' lag-1 autocorrelation (in sending order) is the
    //    setting
    for p in &r.config.paths {
        let PathKind::Weir {
            jitter: Some(j), ..
        } = p.kind
        else {
            continue;
        };
        let (cells, excluded) = sustained_below_rate(r, &p.name);
        let worst = cells
            .iter()
            .map(|c| (c.delay_lag1.map(|m| (m - j.correlation).abs()), c))
            .max_by(|a, b| {
                a.0.unwrap_or(f64::INFINITY)
                    .total_cmp(&b.0.unwrap_or(f64::INFINITY))
            });
        out.push(Check::new(
            format!(
                "{}: delays' lag-1 autocorrelation within {CORRELATION_TOLERANCE} of the setting {}",
                p.name, j.correlation
            ),
            !cells.is_empty()
                && worst.is_some_and(|(d, _)| d.is_some_and(|d| d <= CORRELATION_TOLERANCE)),
            cells.len(),
            "cells",
            worst.map_or("no cells".into(), |(_, c)| {
                let m = c.delay_lag1.map_or("-".into(), |m| format!("{m:.3}"));
                format!("farthest {m} ({} B at {} pps){excluded}", c.size, c.pps)
            }),
        ));
    }
    out
}

/// The cells of `path` that ran below its rate and that weir sustained, and the note
/// naming those it did not ([`unsustained_note`]).
fn sustained_below_rate<'a>(r: &'a FidelityResult, path: &str) -> (Vec<&'a Cell>, String) {
    let all: Vec<&Cell> = r
        .cells
        .iter()
        .filter(|c| c.path == path && ran(c) && !c.over_path_rate)
        .collect();
    let note = unsustained_note(&all);
    (all.into_iter().filter(|c| c.sustained()).collect(), note)
}

/// "; excluded: ..." naming the cells where weir's receive ring overflowed, or "".
fn unsustained_note(cells: &[&Cell]) -> String {
    let out: Vec<String> = cells
        .iter()
        .filter(|c| !c.sustained())
        .map(|c| {
            format!(
                "{} B at {} pps ({} frames dropped at weir's receive ring)",
                c.size,
                c.pps,
                c.dut_rx_drops.unwrap_or(0)
            )
        })
        .collect();
    if out.is_empty() {
        String::new()
    } else {
        format!(
            "; not sustained by weir on this machine, excluded: {}",
            out.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::run::measure_skeleton;
    use super::*;

    #[test]
    fn paths_are_chosen_by_name() {
        let p = paths_named(&["weir-155M".into(), "veth".into()]).unwrap();
        assert_eq!(
            p.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["weir-155M", "veth"]
        );
        let e = paths_named(&["veth".into(), "nowhere".into()]).unwrap_err();
        assert!(
            e.starts_with("unknown path 'nowhere'; expected some of veth, weir-0ms,"),
            "{e}"
        );
    }

    #[test]
    fn serialisation_times_of_the_seed() {
        // seed 002, section V: 3.30, 41.28 and 78.34 us at 155 Mbit/s
        assert!((serialisation_us(64, R155) - 3.303).abs() < 0.001);
        assert!((serialisation_us(800, R155) - 41.290).abs() < 0.001);
        assert!((serialisation_us(1518, R155) - 78.348).abs() < 0.001);
    }

    fn cell(
        path: &str,
        size: u32,
        pps: u32,
        over: bool,
        ifg: (f64, f64, f64),
        dspread: f64,
    ) -> Cell {
        let mut c = measure_skeleton(
            &Path {
                name: path.into(),
                kind: PathKind::Veth,
                tables: String::new(),
            },
            size,
            pps,
            0,
        );
        c.over_path_rate = over;
        c.ifg_us = Pcts {
            count: 100,
            mean: Some(ifg.1),
            p10: Some(ifg.0),
            p50: Some(ifg.1),
            p90: Some(ifg.2),
            ..Default::default()
        };
        c.delay_us = Pcts {
            count: 100,
            p10: Some(125_000.0),
            p50: Some(125_010.0),
            p90: Some(125_000.0 + dspread),
            ..Default::default()
        };
        c
    }

    #[test]
    fn checks_pass_and_fail_on_hand_made_cells() {
        let mut cfg = FidelityConfig::quick();
        cfg.paths
            .retain(|p| ["weir-125ms", "weir-155M", "tbf-155M"].contains(&p.name.as_str()));
        let t = serialisation_us(1518, R155);
        let mut r = FidelityResult {
            kind: "fidelity".into(),
            meta: BTreeMap::new(),
            config: cfg,
            cells: vec![
                cell("weir-125ms", 1518, 8000, false, (124.0, 125.0, 126.0), 40.0),
                cell("weir-155M", 1518, 80000, true, (t - 2.0, t, t + 2.0), 0.0),
                cell("weir-155M", 64, 8000, false, (124.0, 125.0, 126.0), 0.0),
                cell("tbf-155M", 1518, 80000, true, (t - 30.0, t, t + 30.0), 0.0),
            ],
            checks: vec![],
            hosts: Vec::new(),
        };
        let c = check(&r);
        assert!(c.iter().all(|c| c.passed), "{c:#?}");
        assert_eq!(c.len(), 5, "{c:#?}");
        // widen weir's delay spread and gap tails, add loss below the rate
        r.cells[0].delay_us.p90 = Some(125_150.0);
        r.cells[1].ifg_us.p90 = Some(t + 12.0);
        r.cells[2].loss_ratio = 0.001;
        let c = check(&r);
        let failed: Vec<&str> = c
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(failed.len(), 3, "{c:#?}");
        assert!(failed[0].contains("delay p90 - p10"));
        assert!(failed[1].contains("mean gap within 1 %"));
        assert!(failed[2].contains("zero loss"));
        let t = tables(&r);
        assert!(t.contains("== weir-155M"), "{t}");
        assert!(t.contains("78.35"), "{t}");
    }

    /// The jitter row's check: the delays' lag-1 autocorrelation within 0.05 of 0.5 in
    /// every sustained cell below the rate; the delay-spread check leaves the row alone.
    #[test]
    fn the_jitter_row_checks_the_correlation() {
        let mut cfg = FidelityConfig::quick();
        cfg.paths.retain(|p| p.name == "weir-125ms-jitter");
        let mut r = FidelityResult {
            kind: "fidelity".into(),
            meta: BTreeMap::new(),
            config: cfg,
            cells: vec![
                cell(
                    "weir-125ms-jitter",
                    1518,
                    8000,
                    false,
                    (124.0, 125.0, 126.0),
                    12_000.0,
                ),
                cell(
                    "weir-125ms-jitter",
                    64,
                    80000,
                    false,
                    (10.0, 12.5, 15.0),
                    12_000.0,
                ),
            ],
            checks: vec![],
            hosts: Vec::new(),
        };
        r.cells[0].delay_lag1 = Some(0.47);
        r.cells[1].delay_lag1 = Some(0.53);
        let c = check(&r);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert!(
            !names.iter().any(|n| n.contains("delay p90 - p10")),
            "{names:?}"
        );
        let corr = c
            .iter()
            .find(|c| c.name.contains("lag-1 autocorrelation"))
            .expect("a correlation check");
        assert!(corr.passed, "{corr:?}");
        r.cells[1].delay_lag1 = Some(0.56);
        let corr = check(&r)
            .into_iter()
            .find(|c| c.name.contains("lag-1 autocorrelation"))
            .unwrap();
        assert!(!corr.passed && corr.detail.contains("0.560"), "{corr:?}");
        // a cell without the statistic fails the check
        r.cells[1].delay_lag1 = None;
        assert!(!check(&r)
            .iter()
            .any(|c| c.name.contains("lag-1") && c.passed));
    }
}
