//! Time series in Flent's data format (`.flent.gz`) and as CSV, so that other tools read a
//! lab's measurements: `flent --input FILE -p PLOT -o out.png` plots them, `-f csv`,
//! `-f stats` and `-f summary` tabulate them, and any CSV reader takes `series.csv`.
//! Sans-IO: documents and bytes in, bytes out; the labs write the files.
//!
//! # Flent's format (read in tohojo/flent, version 2.3.0)
//!
//! * `doc/data-format.rst`: a gzipped JSON object with `x_values` (the time of each data
//!   point, s), `results` (per series name, one value or `null` per x value) and `metadata`
//!   (NAME = the test's name, TITLE, HOSTS, LOCAL_HOST, LENGTH, TOTAL_LENGTH, STEP_SIZE,
//!   TIME, NOTE, FLENT_VERSION, IP_VERSION).
//! * `flent/resultset.py`: `ResultSet.serialise` writes `metadata`, `version`
//!   (`FILEFORMAT_VERSION = 4`), `x_values`, `results` and `raw_values` (per series, the
//!   samples as they came: objects `{"t": Unix time, s, "val": value}`), with
//!   `json.dumps(…, sort_keys=True)` into a gzip file named `*.flent.gz`. `unserialise`
//!   refuses a version above 4, needs `NAME`, parses `TIME` and `T0` as
//!   `%Y-%m-%dT%H:%M:%S.%fZ` (UTC), and computes `TOTAL_LENGTH` from the x values when
//!   absent. `raw_series` gives a sample's x as `t - T0`. `SERIES_META` holds per-series
//!   metadata; `UNITS` is what the summary output prints.
//! * `flent/batch.py` `load_input` and `flent/settings.py` `load_test`: loading a file
//!   runs the test configuration `tests/NAME.conf` (informational: no host look-ups), so
//!   NAME must be one of Flent's tests; its `DATA_SETS` say each series' units and which
//!   series are computed (sums, averages) if absent, and its `PLOTS` name the series each
//!   plot draws. Series a test does not know still load (`-f csv`, `-f summary`), but
//!   plots only draw the test's own names. Hence a [`Recording`] picks a Flent test and
//!   names the series like it (`rrul`: `TCP upload BE`, `Ping (ms) ICMP`; `tcp_nup`:
//!   `TCP upload::1`…`TCP upload::N` with the test parameter `upload_streams` = N).
//! * `flent/aggregators.py` `TimeseriesAggregator.aggregate`: the common grid. For step
//!   `k` (x = k·STEP_SIZE, k < ⌈(t_max − t_0)/STEP_SIZE⌉) and each series, take the first
//!   sample later than x and the one before it; if the later one is within 5 steps of x
//!   (half a step when there is no sample before x), interpolate linearly between the two;
//!   with no sample before x use the later sample's value; with no sample later than x,
//!   repeat the last sample once (not if the previous grid value is already it) and then
//!   give `null`; a gap (`null`) at either end of the interval gives `null`. [`grid`]
//!   does exactly this, with one difference: the grid starts at the run's start (t_0 = 0,
//!   T0 = the start), not at the first sample, so that Flent's time axis is the lab's own
//!   (the SVG charts', `series.csv`'s).
//!
//! # What weir writes
//!
//! Per recording (one run of one DUT in one part of a lab) a file `<part>-<dut>-run<N>.flent.gz`
//! ([`Recording::file_name`]) with the metadata
//! above plus `T0`, `DATA_FILENAME`, `TEST_PARAMETERS`, `SERIES_META` (`UNITS`, and
//! `WEIR_LABEL`: weir's own name for the series) and `WEIR` (the lab, part, DUT, run and
//! the run's [`super::meta`]). `FLENT_VERSION` says weir wrote it (`weir 0.1.0`), not which
//! Flent. Non-finite samples are gaps: left out of `raw_values`, `null` anchors in the grid.
//!
//! `series.csv`: one row per sample of every recording, `part,dut,run,series,label,units,
//! t_s,value` (t_s from the run's start, full precision), the same samples as the raw values.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::{json, Map, Value};

use super::table::csv_field;
use crate::{Error, Result};

/// The file format version written (Flent's `FILEFORMAT_VERSION` since Flent 1.3).
pub const FILE_FORMAT_VERSION: u32 = 4;
/// Flent interpolates onto the grid across at most this many steps.
const MAX_STEPS_APART: f64 = 5.0;

/// One series of samples: `(x, value)` with x in seconds from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSeries {
    /// The name in the Flent file (the Flent test's own where it has one).
    pub name: String,
    /// weir's name for it (the SVG legend's), e.g. `s1 (gold) goodput`.
    pub label: String,
    /// Flent's unit names: `Mbits/s`, `ms`.
    pub units: String,
    pub points: Vec<(f64, f64)>,
}

impl TimeSeries {
    pub fn new(
        name: impl Into<String>,
        label: impl Into<String>,
        units: impl Into<String>,
        points: Vec<(f64, f64)>,
    ) -> Self {
        Self {
            name: name.into(),
            label: label.into(),
            units: units.into(),
            points,
        }
    }

    /// A per-interval byte series (bin `i` covers `[i·iv, (i+1)·iv)`) as goodput in Mbit/s,
    /// each bin at its end, as a netperf demo line reports the interval just past.
    pub fn goodput_mbps(
        name: impl Into<String>,
        label: impl Into<String>,
        bytes: &[u64],
        interval_ms: u64,
    ) -> Self {
        let iv = interval_ms as f64 / 1000.0;
        // the end in whole ms, then s: 0.3, not 3 × 0.1 = 0.30000000000000004
        let points = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let end_ms = (i as u64 + 1).saturating_mul(interval_ms);
                (end_ms as f64 / 1000.0, b as f64 * 8.0 / iv / 1e6)
            })
            .collect();
        Self::new(name, label, "Mbits/s", points)
    }
}

/// One run's series, as one Flent result set.
#[derive(Debug, Clone, PartialEq)]
pub struct Recording {
    /// The lab's part (plan) and the DUT and run (0-based) it measured.
    pub part: String,
    pub dut: String,
    pub run: u32,
    /// Flent's test NAME (`rrul`, `tcp_nup`): must be one of Flent's tests.
    pub test: String,
    /// Flent's `TEST_PARAMETERS` (e.g. `upload_streams`).
    pub test_parameters: BTreeMap<String, String>,
    /// Flent's `HOSTS`: the host the traffic went to (the receiver; Flent's test
    /// configurations name some series after it, e.g. `10.77.0.2 UDP BE`).
    pub hosts: Vec<String>,
    /// The run's start, s since the Unix epoch (TIME and T0).
    pub start_unix_s: f64,
    /// The run's planned length, s (LENGTH).
    pub length_s: f64,
    /// The grid's step, s (STEP_SIZE), > 0.
    pub step_s: f64,
    pub series: Vec<TimeSeries>,
}

impl Recording {
    /// Whether any series has a finite sample (an empty recording writes no file).
    pub fn has_data(&self) -> bool {
        self.series
            .iter()
            .any(|s| s.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()))
    }

    /// `<part>-<dut>-run<N>.flent.gz` (N from 1), file-safe.
    pub fn file_name(&self) -> String {
        super::file_safe(&format!(
            "{}-{}-run{}.flent.gz",
            self.part,
            self.dut,
            self.run + 1
        ))
    }
}

/// The lab's start from its run metadata ([`super::meta`]'s `unix_time`, s), for labs whose
/// runs do not record their own start; 0 without it.
pub fn unix_time(meta: &BTreeMap<String, String>) -> f64 {
    meta.get("unix_time")
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// A Unix time as Flent's UTC timestamp, `%Y-%m-%dT%H:%M:%S.%fZ` (microseconds).
pub fn iso_utc(unix_s: f64) -> String {
    let us = (unix_s * 1e6).round().max(0.0) as u64;
    let (secs, micros) = (us / 1_000_000, us % 1_000_000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // civil_from_days, H. Hinnant, "chrono-Compatible Low-Level Date Algorithms"
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The grid's length for samples ending at `t_max` s: ⌈t_max / step⌉ points (Flent's
/// `steps`), at least 1.
pub fn grid_len(t_max: f64, step: f64) -> usize {
    if step.is_nan() || step <= 0.0 || !t_max.is_finite() || t_max <= 0.0 {
        return 1;
    }
    ((t_max / step).ceil() as usize).max(1)
}

/// One series on Flent's grid x = k·`step`, k < `len` (see the module comment): samples
/// sorted by time, non-finite values as gaps.
pub fn grid(points: &[(f64, f64)], step: f64, len: usize) -> Vec<Option<f64>> {
    let mut r: Vec<(f64, Option<f64>)> = points
        .iter()
        .filter(|p| p.0.is_finite())
        .map(|&(t, v)| (t, v.is_finite().then_some(v)))
        .collect();
    r.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Option<f64>> = Vec::with_capacity(len);
    if r.is_empty() {
        out.resize(len, None);
        return out;
    }
    let mut i = 0; // the first sample later than t
    for k in 0..len {
        let t = step * k as f64;
        while i < r.len() && r[i].0 <= t {
            i += 1;
        }
        let mut max_dist = step * MAX_STEPS_APART;
        let (prev, (t_next, v_next), last) = if i < r.len() {
            if i == 0 {
                max_dist = step * 0.5;
            }
            (i.checked_sub(1).map(|j| r[j]), r[i], false)
        } else {
            (None, r[r.len() - 1], true)
        };
        let v = if (t - t_next).abs() > max_dist {
            None
        } else {
            match prev {
                None => {
                    let previous = out.last().copied().flatten();
                    if last && (previous.is_none() || previous == v_next) {
                        None
                    } else {
                        v_next
                    }
                }
                Some((_, None)) => None,
                Some((t_prev, Some(v_prev))) => {
                    v_next.map(|vn| v_prev + (vn - v_prev) / (t_next - t_prev) * (t - t_prev))
                }
            }
        };
        out.push(v);
    }
    out
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// The Flent document of `rec`: `lab` is the lab's title (`weir lab basic`), `meta` the
/// lab's run metadata ([`super::meta`]), `data_filename` the file's own name.
pub fn document(
    rec: &Recording,
    lab: &str,
    meta: &BTreeMap<String, String>,
    data_filename: &str,
) -> Value {
    let step = if rec.step_s > 0.0 { rec.step_s } else { 1.0 };
    let t_max = rec
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|t| t.is_finite())
        .fold(0.0f64, f64::max);
    let len = grid_len(t_max, step);
    let x_values: Vec<Value> = (0..len).map(|k| num(step * k as f64)).collect();
    let mut results = Map::new();
    let mut raw_values = Map::new();
    let mut series_meta = Map::new();
    for s in &rec.series {
        let g = grid(&s.points, step, len);
        results.insert(
            s.name.clone(),
            Value::Array(g.into_iter().map(|v| v.map_or(Value::Null, num)).collect()),
        );
        let raw: Vec<Value> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(t, v)| json!({"t": num(rec.start_unix_s + t), "val": num(v)}))
            .collect();
        raw_values.insert(s.name.clone(), Value::Array(raw));
        series_meta.insert(
            s.name.clone(),
            json!({"UNITS": s.units, "WEIR_LABEL": s.label}),
        );
    }
    let time = iso_utc(rec.start_unix_s);
    let title = format!("{lab} {} {} run {}", rec.part, rec.dut, rec.run + 1);
    let metadata = json!({
        "NAME": rec.test,
        "TITLE": title,
        "NOTE": null,
        "TIME": time,
        "T0": time,
        "LENGTH": rec.length_s.max(0.0).ceil() as u64,
        "TOTAL_LENGTH": num(step * (len - 1) as f64),
        "STEP_SIZE": num(step),
        "HOST": rec.hosts.first(),
        "HOSTS": rec.hosts,
        "LOCAL_HOST": meta.get("host").cloned().unwrap_or_default(),
        "IP_VERSION": 4,
        "FLENT_VERSION": format!("weir {}", env!("CARGO_PKG_VERSION")),
        "DATA_FILENAME": data_filename,
        "TEST_PARAMETERS": rec.test_parameters,
        "SERIES_META": series_meta,
        "BATCH_NAME": null,
        "BATCH_TIME": null,
        "BATCH_TITLE": null,
        "BATCH_UUID": null,
        "WEIR": {"lab": lab, "part": rec.part, "dut": rec.dut, "run": rec.run + 1, "meta": meta},
    });
    json!({
        "metadata": metadata,
        "version": FILE_FORMAT_VERSION,
        "x_values": x_values,
        "results": results,
        "raw_values": raw_values,
    })
}

/// `bytes` gzipped (flate2, default level).
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes)
        .and_then(|()| enc.finish())
        .map_err(|e| Error::io("gzip", e))
}

/// `series.csv` of every recording (see the module comment).
pub fn series_csv<'a>(recs: impl IntoIterator<Item = &'a Recording>) -> String {
    let mut out = String::from("part,dut,run,series,label,units,t_s,value\n");
    for r in recs {
        for s in &r.series {
            let head = format!(
                "{},{},{},{},{},{}",
                csv_field(&r.part),
                csv_field(&r.dut),
                r.run + 1,
                csv_field(&s.name),
                csv_field(&s.label),
                csv_field(&s.units)
            );
            for &(t, v) in s.points.iter().filter(|p| p.0.is_finite()) {
                let v = if v.is_finite() {
                    v.to_string()
                } else {
                    String::new()
                };
                let _ = writeln!(out, "{head},{t},{v}");
            }
        }
    }
    out
}

/// The files of a lab's recordings (`lab`: its title, `weir lab basic`): one `.flent.gz`
/// per recording with data
/// ([`Recording::file_name`]) and `series.csv`; nothing when no recording has data.
pub fn series_files(
    lab: &str,
    meta: &BTreeMap<String, String>,
    recs: &[Recording],
) -> Result<Vec<(String, Vec<u8>)>> {
    let recs: Vec<&Recording> = recs.iter().filter(|r| r.has_data()).collect();
    if recs.is_empty() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for r in &recs {
        let name = r.file_name();
        let doc = document(r, lab, meta, &name);
        let text = serde_json::to_vec(&doc).map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
        files.push((name, gzip(&text)?));
    }
    files.push(("series.csv".to_string(), series_csv(recs).into_bytes()));
    Ok(files)
}

#[cfg(test)]
mod tests;
