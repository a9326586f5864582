//! What the labs print and write: acceptance checks and their one PASS/FAIL form, plain-text
//! tables, SVG charts (line, scatter, grouped bars, box plots), a self-contained HTML report, the run's
//! metadata, the output files, and the time series as Flent data and CSV.
//!
//! # Why hand-written SVG
//!
//! The charts needed are four simple kinds, and SVG is text: writing it directly costs a
//! few hundred lines, adds no dependency, needs no font library (text is left to the
//! viewer's `sans-serif`), is deterministic byte for byte (reports diff cleanly), and lets
//! us control decimation and file size. `plotters` would bring a larger API and its own
//! layout rules for the same output.
//!
//! | file | what |
//! |---|---|
//! | `check.rs` | [`Check`], its `Display` (`PASS name [N unit] detail`), [`checks_text`] |
//! | `table.rs` | [`text_table`], [`fmt_opt`] |
//! | `svg.rs` | palette, escaping, nice ticks, frame, legend, reference lines, clip path |
//! | `line.rs` | [`line_chart`] (lines and scatter, with decimation) |
//! | `bar.rs` | [`bar_chart`] (grouped bars with error bars) |
//! | `boxplot.rs` | [`box_chart`] (a box over runs per entry, [`BoxStats`]) |
//! | `compare.rs` | [`compare`]: several result files in one comparison by their [`Measure`]s |
//! | `html.rs` | [`html_report`] of [`Section`]s |
//! | `meta.rs` | [`meta`]: weir's version, kernel, machine, time, command line; [`cpu_steal`] |
//! | `files.rs` | [`write_files`], [`write_with_series`], [`to_json`], [`file_safe`] |
//! | `flent.rs` | time series as Flent's `.flent.gz` ([`Recording`], [`series_files`]) and `series.csv` |

mod bar;
mod boxplot;
mod check;
pub mod compare;
mod files;
pub mod flent;
mod html;
mod line;
mod meta;
mod svg;
mod table;

pub use bar::{bar_chart, BarOpts};
pub use boxplot::{box_chart, BoxStats};
pub use check::{all_passed, checks_text, Check};
pub use compare::Measure;
pub use files::{file_safe, to_json, write_files, write_with_series};
pub use flent::{series_files, Recording, TimeSeries};
pub use html::{html_report, Block, Section};
pub use line::{decimate_minmax, line_chart, ChartOpts, Mark, Series};
pub use meta::{cpu_steal, meta, meta_text, Steal, StealMeter};
#[cfg(test)]
pub(crate) use svg::check_xml;
pub use svg::{escape, nice_ticks};
pub use table::{csv_field, fmt_opt, text_table};
