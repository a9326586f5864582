//! SVG charts and a small HTML report writer for the testbed's results.
//!
//! Used by `weir lab fidelity` (seed 002 Figs. 5 and 8: inter-frame gap per packet number,
//! up to ~10⁵ points, as a scatter or a line, with the ideal gap as a reference line) and by
//! the seed 000 reports (Figs. 8–11: grouped bars per class, one bar per DUT, with ± std-dev
//! error bars; per-second goodput of each session against time; "byte-time" lines,
//! cumulative bytes against time, for several sessions).
//!
//! # Why hand-written SVG
//!
//! The charts needed are three simple kinds, and SVG is text: writing it directly costs a
//! few hundred lines, adds no dependency, needs no font library (text is left to the
//! viewer's `sans-serif`), is deterministic byte for byte (reports diff cleanly; clip-path
//! ids are a hash of the chart, so several charts can be inlined in one HTML page), and lets
//! us control decimation and file size. `plotters` would bring a larger API and its own
//! layout rules for the same output.
//!
//! # Conventions
//!
//! * Sizes are CSS pixels of the whole SVG (default 800 × 450); coordinates are written with
//!   one decimal.
//! * Non-finite points (NaN, ±∞) are skipped; in a line they break it into separate pieces.
//!   Non-finite bar values show as missing ("n/a").
//! * Axis ticks are "nice" numbers, 1, 2 or 5 × 10ᵏ apart (after Heckbert, "Nice numbers for
//!   graph labels", Graphics Gems, 1990), [`nice_ticks`]. Unless a range is fixed the axes
//!   extend to the enclosing ticks. Tick labels switch to k (≥ 10⁴), M (≥ 10⁶) or G (≥ 10⁹), e.g. for bit/s.
//! * Decimation, so that a 10⁵-point series stays small (well under 1 MB):
//!   - lines keep, per pixel column and contiguous piece, the first, last, lowest and highest
//!     point in their original order (the "M4" rule), which draws exactly the same pixels as
//!     the full line; for x increasing this is at most 4 points per column;
//!   - scatter keeps the first point of each occupied cell of a pixel grid, doubling the
//!     cell size until all series together fit [`ChartOpts::max_points`].
//! * All text is escaped with [`escape`]. SVG given to [`Block::Svg`] is inserted as is and
//!   must come from this module (or be otherwise trusted).

use std::collections::HashSet;
use std::fmt::Write as _;

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points,
        }
    }

    /// y values against their index 0, 1, 2, … (e.g. inter-frame gap per packet number).
    pub fn from_values(label: impl Into<String>, ys: &[f64]) -> Self {
        Self::new(
            label,
            ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
        )
    }
}

/// Running sum of y: per-interval amounts (bytes per second) to a "byte-time" line
/// (cumulative bytes at the end of each interval). Non-finite y values add nothing.
pub fn cumulative(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sum = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            if y.is_finite() {
                sum += y;
            }
            (x, sum)
        })
        .collect()
}

/// How a [`line_chart`] draws its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mark {
    #[default]
    Line,
    /// Dots, no connecting line (seed 002 Fig. 5).
    Scatter,
}

/// Options of [`line_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChartOpts {
    /// Whole SVG, px.
    pub width: u32,
    pub height: u32,
    pub mark: Mark,
    /// Fixed axis ranges; `None` (or an invalid range) chooses from the data.
    pub x_range: Option<(f64, f64)>,
    pub y_range: Option<(f64, f64)>,
    /// With an automatic y range, extend it to include 0.
    pub y_include_zero: bool,
    /// Dashed horizontal reference lines (y, label), e.g. the ideal inter-frame gap.
    pub hlines: Vec<(f64, String)>,
    /// Scatter only: the most dots drawn over all series.
    pub max_points: usize,
}

impl Default for ChartOpts {
    fn default() -> Self {
        Self {
            width: 800,
            height: 450,
            mark: Mark::Line,
            x_range: None,
            y_range: None,
            y_include_zero: false,
            hlines: Vec::new(),
            max_points: 20_000,
        }
    }
}

/// Options of [`bar_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct BarOpts {
    pub width: u32,
    pub height: u32,
    /// Fixed y range; `None` spans 0 and every bar with its error bar.
    pub y_range: Option<(f64, f64)>,
    /// Dashed horizontal reference lines (y, label), e.g. accuracy 1.
    pub hlines: Vec<(f64, String)>,
}

impl Default for BarOpts {
    fn default() -> Self {
        Self {
            width: 800,
            height: 450,
            y_range: None,
            hlines: Vec::new(),
        }
    }
}

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Escape text for XML/HTML content and attribute values: `& < > " '`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // control characters other than tab/newline are not allowed in XML 1.0
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A pixel coordinate, one decimal, clamped so that absurd data cannot produce absurd text.
fn px(v: f64) -> String {
    let v = if v.is_finite() {
        v.clamp(-1e6, 1e6)
    } else {
        0.0
    };
    let s = format!("{v:.1}");
    let s = s.strip_suffix(".0").unwrap_or(&s);
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// The "nice" number (1, 2 or 5 × 10^e) nearest to x, as (mantissa, exponent).
fn nice_num(x: f64) -> (f64, i32) {
    let e = x.log10().floor() as i32;
    let f = x / 10f64.powi(e);
    let m = if f < 1.5 {
        1.0
    } else if f < 3.0 {
        2.0
    } else if f < 7.0 {
        5.0
    } else {
        10.0
    };
    if m == 10.0 {
        (1.0, e + 1)
    } else {
        (m, e)
    }
}

/// k · m · 10^e computed so that decimal steps come out as the nearest double
/// (3 · 2 / 10 is exactly `0.6`, where 3 · 0.2 is not).
fn tick_value(k: f64, m: f64, e: i32) -> f64 {
    if e >= 0 {
        k * m * 10f64.powi(e)
    } else {
        k * m / 10f64.powi(-e)
    }
}

/// Ticks and the decimal exponent of their spacing.
fn ticks_exp(lo: f64, hi: f64, target: usize) -> (Vec<f64>, i32) {
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return (Vec::new(), 0);
    }
    let target = target.max(2);
    let (m, e) = nice_num((hi - lo) / (target - 1) as f64);
    let step = tick_value(1.0, m, e);
    if !(step.is_finite() && step > 0.0) {
        return (Vec::new(), 0);
    }
    let k0 = (lo / step).floor();
    let k1 = (hi / step).ceil();
    let n = ((k1 - k0).max(0.0) as usize).min(1000);
    (
        (0..=n)
            .map(|i| tick_value(k0 + i as f64, m, e))
            .map(|v| if v == 0.0 { 0.0 } else { v })
            .collect(),
        e,
    )
}

/// "Nice" tick values covering [lo, hi] with about `target` ticks: the spacing is the
/// 1, 2 or 5 × 10ᵏ nearest to (hi − lo)/(target − 1); the first tick is the largest
/// multiple of it ≤ lo, the last the smallest ≥ hi. Empty if the range is empty or not
/// finite. For example 0..97 with 6 ticks: 97/5 = 19.4 → 20, ticks 0, 20, …, 100.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    ticks_exp(lo, hi, target).0
}

/// Labels for ticks spaced 10^e apart (times 1, 2 or 5): just enough decimals, and a
/// k suffix when the largest magnitude reaches 10⁴, M at 10⁶, G at 10⁹.
fn tick_labels(ticks: &[f64], e: i32) -> Vec<String> {
    let max = ticks.iter().fold(0.0f64, |a, t| a.max(t.abs()));
    let (div, suffix, shift) = if max >= 1e9 {
        (1e9, "G", 9)
    } else if max >= 1e6 {
        (1e6, "M", 6)
    } else if max >= 1e4 {
        (1e3, "k", 3)
    } else {
        (1.0, "", 0)
    };
    let decimals = (shift - e).max(0) as usize;
    ticks
        .iter()
        .map(|t| {
            let s = format!("{:.*}", decimals, t / div);
            let s = if s.starts_with('-') && s.trim_start_matches(['-', '0', '.']).is_empty() {
                s[1..].to_string()
            } else {
                s
            };
            if *t == 0.0 {
                "0".to_string()
            } else {
                format!("{s}{suffix}")
            }
        })
        .collect()
}

struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    labels: Vec<String>,
}

impl Axis {
    /// From the data extent (or a fixed range, if valid).
    fn new(extent: Option<(f64, f64)>, fixed: Option<(f64, f64)>, target: usize) -> Axis {
        if let Some((lo, hi)) = fixed.filter(|(a, b)| a.is_finite() && b.is_finite() && a < b) {
            let (t, e) = ticks_exp(lo, hi, target);
            let eps = (hi - lo) * 1e-9;
            let ticks: Vec<f64> = t
                .into_iter()
                .filter(|v| *v >= lo - eps && *v <= hi + eps)
                .collect();
            let labels = tick_labels(&ticks, e);
            return Axis {
                lo,
                hi,
                ticks,
                labels,
            };
        }
        let (lo, hi) = match extent {
            Some((lo, hi)) if lo < hi => (lo, hi),
            Some((v, _)) => {
                let pad = if v == 0.0 { 1.0 } else { v.abs() * 0.1 };
                (v - pad, v + pad)
            }
            None => (0.0, 1.0),
        };
        let (ticks, e) = ticks_exp(lo, hi, target);
        if ticks.len() < 2 {
            // range too small or too large for f64 ticks: plain ends
            return Axis {
                lo,
                hi,
                ticks: vec![lo, hi],
                labels: vec![format!("{lo:.3e}"), format!("{hi:.3e}")],
            };
        }
        let labels = tick_labels(&ticks, e);
        Axis {
            lo: ticks[0],
            hi: *ticks.last().unwrap_or(&hi),
            ticks,
            labels,
        }
    }
}

/// Plot-area geometry and the data → pixel maps.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl Frame {
    fn map_x(&self, a: &Axis, x: f64) -> f64 {
        self.left + (x - a.lo) / (a.hi - a.lo) * (self.right - self.left)
    }
    fn map_y(&self, a: &Axis, y: f64) -> f64 {
        self.bottom - (y - a.lo) / (a.hi - a.lo) * (self.bottom - self.top)
    }
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const LEGEND_MAX_CHARS: usize = 32;

fn legend_label(s: &str) -> String {
    if s.chars().count() > LEGEND_MAX_CHARS {
        let t: String = s.chars().take(LEGEND_MAX_CHARS - 1).collect();
        format!("{t}…")
    } else {
        s.to_string()
    }
}

/// Width of the legend column for these labels (0 if there is nothing to show).
fn legend_width(labels: &[&str]) -> f64 {
    if labels.iter().all(|l| l.is_empty()) {
        return 0.0;
    }
    let chars = labels
        .iter()
        .map(|l| legend_label(l).chars().count())
        .max()
        .unwrap_or(0);
    (chars as f64 * 7.0 + 40.0).min(300.0)
}

/// Opening of the SVG, the title, the frame with grid, ticks and axis labels.
fn open_svg(
    out: &mut String,
    f: &Frame,
    title: &str,
    x_label: &str,
    y_label: &str,
    x: Option<&Axis>,
    y: &Axis,
) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
        w = px(f.w),
        h = px(f.h)
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        r#"<rect x="0" y="0" width="{}" height="{}" fill="white"/>"#,
        px(f.w),
        px(f.h)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        px((f.left + f.right) / 2.0),
        escape(title)
    );
    // y grid and ticks
    for (t, l) in y.ticks.iter().zip(&y.labels) {
        let yy = f.map_y(y, *t);
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{yy}" x2="{}" y2="{yy}" stroke="#e0e0e0"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            px(f.left),
            px(f.right),
            px(f.left - 6.0),
            px(yy + 4.0),
            escape(l),
            yy = px(yy)
        );
    }
    if let Some(x) = x {
        for (t, l) in x.ticks.iter().zip(&x.labels) {
            let xx = f.map_x(x, *t);
            let _ = writeln!(
                out,
                r##"<line x1="{xx}" y1="{}" x2="{xx}" y2="{}" stroke="#e0e0e0"/><text x="{xx}" y="{}" text-anchor="middle">{}</text>"##,
                px(f.top),
                px(f.bottom),
                px(f.bottom + 16.0),
                escape(l),
                xx = px(xx)
            );
        }
    }
    let _ = writeln!(
        out,
        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        px(f.left),
        px(f.top),
        px(f.right - f.left),
        px(f.bottom - f.top)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        px((f.left + f.right) / 2.0),
        px(f.bottom + 36.0),
        escape(x_label)
    );
    let cy = (f.top + f.bottom) / 2.0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{cy}" text-anchor="middle" transform="rotate(-90 16 {cy})">{}</text>"#,
        escape(y_label),
        cy = px(cy)
    );
}

fn draw_hlines(out: &mut String, f: &Frame, y: &Axis, hlines: &[(f64, String)]) {
    for (v, label) in hlines {
        if !v.is_finite() || *v < y.lo || *v > y.hi {
            continue;
        }
        let yy = f.map_y(y, *v);
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{yy}" x2="{}" y2="{yy}" stroke="#444" stroke-dasharray="6 4"/>"##,
            px(f.left),
            px(f.right),
            yy = px(yy)
        );
        if label.is_empty() {
            continue;
        }
        // the label on a translucent white box so that dense data does not hide it
        let tw = label.chars().count() as f64 * 6.8 + 6.0;
        let _ = writeln!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="16" fill="white" fill-opacity="0.85"/><text x="{}" y="{}" text-anchor="end" fill="#444">{}</text>"##,
            px(f.right - 4.0 - tw),
            px(yy - 18.0),
            px(tw + 2.0),
            px(f.right - 4.0),
            px(yy - 6.0),
            escape(label)
        );
    }
}

/// Legend entries (label, colour, as_line) in the right-hand column.
fn draw_legend(out: &mut String, f: &Frame, entries: &[(&str, &str, bool)]) {
    if entries.iter().all(|(l, _, _)| l.is_empty()) {
        return;
    }
    let x = f.right + 14.0;
    for (i, (label, c, as_line)) in entries.iter().enumerate() {
        let y = f.top + 8.0 + 18.0 * i as f64;
        if *as_line {
            let _ = write!(
                out,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{c}" stroke-width="2"/>"#,
                px(x),
                px(y),
                px(x + 18.0),
                px(y)
            );
        } else {
            let _ = write!(
                out,
                r#"<rect x="{}" y="{}" width="12" height="12" fill="{c}"/>"#,
                px(x + 3.0),
                px(y - 6.0)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{}</text>"#,
            px(x + 24.0),
            px(y + 4.0),
            escape(&legend_label(label))
        );
    }
}

fn no_data(out: &mut String, f: &Frame) {
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#888">no data</text>"##,
        px((f.left + f.right) / 2.0),
        px((f.top + f.bottom) / 2.0)
    );
}

fn frame(width: u32, height: u32, legend_w: f64, legend_entries: usize) -> Frame {
    let w = f64::from(width.max(200));
    let legend_h = 40.0 + 18.0 * legend_entries as f64 + 60.0;
    let h = f64::from(height.max(150)).max(if legend_w > 0.0 { legend_h } else { 0.0 });
    Frame {
        w,
        h,
        left: 72.0,
        right: w - 16.0 - legend_w,
        top: 36.0,
        bottom: h - 52.0,
    }
}

/// Line decimation, "M4": split `points` into contiguous finite pieces and keep, per
/// pixel column (of `columns` across `x_range`) and piece, the first, last, lowest and
/// highest point in their original order. Drawn as polylines, the result covers the same
/// pixels as the input. For x increasing, each piece has at most 4 points per column.
pub fn decimate_minmax(
    points: &[(f64, f64)],
    x_range: (f64, f64),
    columns: usize,
) -> Vec<Vec<(f64, f64)>> {
    let (lo, hi) = x_range;
    let scale = if hi > lo && columns > 0 {
        columns as f64 / (hi - lo)
    } else {
        0.0
    };
    let column = |x: f64| ((x - lo) * scale).floor().clamp(-1e9, 1e9) as i64;
    let mut pieces = Vec::new();
    let mut piece: Vec<(f64, f64)> = Vec::new();
    // indices (into `points`) of first, last, min, max in the current column
    let mut bucket: Option<(i64, [usize; 4])> = None;
    let flush = |bucket: &mut Option<(i64, [usize; 4])>, piece: &mut Vec<(f64, f64)>| {
        if let Some((_, mut idx)) = bucket.take() {
            idx.sort_unstable();
            let mut last = usize::MAX;
            for i in idx {
                if i != last {
                    piece.push(points[i]);
                    last = i;
                }
            }
        }
    };
    for (i, &(x, y)) in points.iter().enumerate() {
        if !(x.is_finite() && y.is_finite()) {
            flush(&mut bucket, &mut piece);
            if !piece.is_empty() {
                pieces.push(std::mem::take(&mut piece));
            }
            continue;
        }
        let c = column(x);
        match &mut bucket {
            Some((bc, idx)) if *bc == c => {
                idx[1] = i;
                if y < points[idx[2]].1 {
                    idx[2] = i;
                }
                if y > points[idx[3]].1 {
                    idx[3] = i;
                }
            }
            _ => {
                flush(&mut bucket, &mut piece);
                bucket = Some((c, [i; 4]));
            }
        }
    }
    flush(&mut bucket, &mut piece);
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// Scatter decimation: per series, the first point of each occupied `cell`-px square, in
/// pixel coordinates. Points outside the plot area are dropped.
fn scatter_cells(pts: &[(f64, f64)], f: &Frame, cell: f64) -> Vec<(f64, f64)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for &(x, y) in pts {
        if !(x.is_finite() && y.is_finite()) {
            continue;
        }
        let inside =
            x >= f.left - 0.5 && x <= f.right + 0.5 && y >= f.top - 0.5 && y <= f.bottom + 0.5;
        if inside && seen.insert(((x / cell).floor() as i64, (y / cell).floor() as i64)) {
            out.push((x, y));
        }
    }
    out
}

/// An SVG line (or scatter) chart. Series are drawn in order with the palette's colours;
/// a legend lists the labelled ones. Empty input draws empty axes with "no data".
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    opts: &ChartOpts,
) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter().copied());
    let finite = || all().filter(|(x, y)| x.is_finite() && y.is_finite());
    let x_ext = extent(finite().map(|p| p.0));
    let mut y_ext = extent(finite().map(|p| p.1));
    if let Some((lo, hi)) = y_ext {
        let extra = opts.hlines.iter().map(|h| h.0).filter(|v| v.is_finite());
        let (mut lo, mut hi) = extra.fold((lo, hi), |(a, b), v| (a.min(v), b.max(v)));
        if opts.y_include_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        y_ext = Some((lo, hi));
    }
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    let lw = legend_width(&labels);
    let f = frame(opts.width, opts.height, lw, series.len());
    let xa = Axis::new(x_ext, opts.x_range, 8);
    let ya = Axis::new(y_ext, opts.y_range, 6);

    let mut body = String::new();
    open_svg(&mut body, &f, title, x_label, y_label, Some(&xa), &ya);
    let clip_rect = format!(
        r#"<rect x="{}" y="{}" width="{}" height="{}"/>"#,
        px(f.left),
        px(f.top),
        px(f.right - f.left),
        px(f.bottom - f.top)
    );
    let mut plot = String::new();
    let to_px = |(x, y): (f64, f64)| (f.map_x(&xa, x), f.map_y(&ya, y));
    match opts.mark {
        Mark::Line => {
            let columns = (f.right - f.left).ceil().max(1.0) as usize;
            for (i, s) in series.iter().enumerate() {
                let pieces = decimate_minmax(&s.points, (xa.lo, xa.hi), columns);
                if pieces.is_empty() {
                    continue;
                }
                let mut d = String::new();
                for p in &pieces {
                    for (j, &pt) in p.iter().enumerate() {
                        let (x, y) = to_px(pt);
                        let cmd = if j == 0 { 'M' } else { 'L' };
                        let _ = write!(d, "{cmd}{} {}", px(x), px(y));
                    }
                    if p.len() == 1 {
                        d.push_str("h0"); // a lone point: a round dot
                    }
                }
                let _ = writeln!(
                    plot,
                    r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.5" stroke-linejoin="round" stroke-linecap="round"/>"#,
                    color(i)
                );
            }
        }
        Mark::Scatter => {
            let pixel_series: Vec<Vec<(f64, f64)>> = series
                .iter()
                .map(|s| s.points.iter().map(|&p| to_px(p)).collect())
                .collect();
            let budget = opts.max_points.max(1);
            let mut cell = 1.0;
            let kept = loop {
                let kept: Vec<Vec<(f64, f64)>> = pixel_series
                    .iter()
                    .map(|p| scatter_cells(p, &f, cell))
                    .collect();
                let n: usize = kept.iter().map(Vec::len).sum();
                if n <= budget || cell > f.w.max(f.h) {
                    break kept;
                }
                cell *= 2.0;
            };
            for (i, pts) in kept.iter().enumerate() {
                if pts.is_empty() {
                    continue;
                }
                let mut d = String::new();
                for &(x, y) in pts {
                    let _ = write!(d, "M{} {}h0", px(x), px(y));
                }
                let _ = writeln!(
                    plot,
                    r#"<path d="{d}" fill="none" stroke="{}" stroke-width="3" stroke-linecap="round"/>"#,
                    color(i)
                );
            }
        }
    }
    let id = format!("weir-clip-{:016x}", fnv1a(&plot) ^ fnv1a(&body));
    let _ = writeln!(
        body,
        r#"<defs><clipPath id="{id}">{clip_rect}</clipPath></defs>"#
    );
    let _ = writeln!(body, r#"<g clip-path="url(#{id})">"#);
    body.push_str(&plot);
    body.push_str("</g>\n");
    if x_ext.is_none() {
        no_data(&mut body, &f);
    }
    draw_hlines(&mut body, &f, &ya, &opts.hlines);
    let entries: Vec<(&str, &str, bool)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.label.as_str(), color(i), opts.mark == Mark::Line))
        .collect();
    draw_legend(&mut body, &f, &entries);
    body.push_str("</svg>\n");
    body
}

/// An SVG grouped bar chart: along x one group per entry of `groups` (e.g. classes), in
/// each group one bar per entry of `series_labels` (e.g. DUTs). `values[g][s]` is
/// `Some((value, err))` for group g and series s: a bar from 0 to `value` with an error bar
/// of ± `err` (e.g. the std dev over runs; 0 or non-finite draws none); `None`, a missing
/// entry or a non-finite value shows an "n/a" mark instead.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    groups: &[String],
    series_labels: &[String],
    values: &[Vec<Option<(f64, f64)>>],
    opts: &BarOpts,
) -> String {
    let get = |g: usize, s: usize| -> Option<(f64, f64)> {
        values
            .get(g)
            .and_then(|row| row.get(s).copied().flatten())
            .filter(|(v, _)| v.is_finite())
            .map(|(v, e)| (v, if e.is_finite() { e.abs() } else { 0.0 }))
    };
    let ns = series_labels.len();
    let ng = groups.len();
    let present: Vec<(f64, f64)> = (0..ng)
        .flat_map(|g| (0..ns).map(move |s| (g, s)))
        .filter_map(|(g, s)| get(g, s))
        .collect();
    let y_ext = extent(
        present
            .iter()
            .flat_map(|&(v, e)| [v - e, v + e])
            .chain([0.0])
            .chain(opts.hlines.iter().map(|h| h.0)),
    );
    let labels: Vec<&str> = series_labels.iter().map(String::as_str).collect();
    let lw = legend_width(&labels);
    let f = frame(opts.width, opts.height, lw, ns);
    let ya = Axis::new(y_ext, opts.y_range, 6);

    let mut out = String::new();
    open_svg(&mut out, &f, title, "", y_label, None, &ya);
    let clip_rect = format!(
        r#"<rect x="{}" y="{}" width="{}" height="{}"/>"#,
        px(f.left),
        px(f.top),
        px(f.right - f.left),
        px(f.bottom - f.top)
    );
    let mut plot = String::new();
    let zero = f.map_y(&ya, 0.0_f64.clamp(ya.lo, ya.hi));
    let gw = (f.right - f.left) / ng.max(1) as f64;
    let bw = gw * 0.8 / ns.max(1) as f64;
    let mut missing = String::new();
    for (g, name) in groups.iter().enumerate() {
        let gx = f.left + gw * g as f64;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(gx + gw / 2.0),
            px(f.bottom + 16.0),
            escape(name)
        );
        for (s, slabel) in series_labels.iter().enumerate() {
            let x = gx + gw * 0.1 + bw * s as f64;
            match get(g, s) {
                Some((v, e)) => {
                    let yv = f.map_y(&ya, v);
                    let _ = writeln!(
                        plot,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {}</title></rect>"#,
                        px(x),
                        px(yv.min(zero)),
                        px((bw - 1.0).max(0.5)),
                        px((yv - zero).abs()),
                        color(s),
                        escape(slabel),
                        escape(&format_value(v, e))
                    );
                    if e > 0.0 {
                        let (y1, y2) = (f.map_y(&ya, v - e), f.map_y(&ya, v + e));
                        let cx = x + bw / 2.0;
                        let cap = (bw / 4.0).min(6.0);
                        let _ = writeln!(
                            plot,
                            r#"<path d="M{cx} {y1}V{y2}M{a} {y1}H{b}M{a} {y2}H{b}" stroke="black" fill="none"/>"#,
                            cx = px(cx),
                            y1 = px(y1),
                            y2 = px(y2),
                            a = px(cx - cap),
                            b = px(cx + cap)
                        );
                    }
                }
                None => {
                    let _ = writeln!(
                        missing,
                        r##"<text x="{}" y="{}" text-anchor="middle" font-size="9" fill="#888">n/a</text>"##,
                        px(x + bw / 2.0),
                        px(zero - 4.0)
                    );
                }
            }
        }
    }
    let id = format!("weir-clip-{:016x}", fnv1a(&plot) ^ fnv1a(&out));
    let _ = writeln!(
        out,
        r#"<defs><clipPath id="{id}">{clip_rect}</clipPath></defs>"#
    );
    let _ = writeln!(out, r#"<g clip-path="url(#{id})">"#);
    out.push_str(&plot);
    out.push_str("</g>\n");
    out.push_str(&missing);
    if ng == 0 || ns == 0 {
        no_data(&mut out, &f);
    }
    draw_hlines(&mut out, &f, &ya, &opts.hlines);
    let entries: Vec<(&str, &str, bool)> = series_labels
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str(), color(i), false))
        .collect();
    draw_legend(&mut out, &f, &entries);
    out.push_str("</svg>\n");
    out
}

fn format_value(v: f64, e: f64) -> String {
    if e > 0.0 {
        format!("{v:.4} ± {e:.4}")
    } else {
        format!("{v:.4}")
    }
}

/// A piece of a report section.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A paragraph of text (escaped).
    Text(String),
    /// Preformatted text, e.g. a table from [`crate::table4::format_table`] (escaped).
    Pre(String),
    /// An SVG from this module, inlined as is (trusted).
    Svg(String),
}

/// A report section: a heading and its blocks in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Section {
    pub heading: String,
    pub blocks: Vec<Block>,
}

impl Section {
    pub fn new(heading: impl Into<String>) -> Self {
        Self {
            heading: heading.into(),
            blocks: Vec::new(),
        }
    }
    pub fn text(mut self, s: impl Into<String>) -> Self {
        self.blocks.push(Block::Text(s.into()));
        self
    }
    pub fn pre(mut self, s: impl Into<String>) -> Self {
        self.blocks.push(Block::Pre(s.into()));
        self
    }
    pub fn svg(mut self, s: impl Into<String>) -> Self {
        self.blocks.push(Block::Svg(s.into()));
        self
    }
}

/// A self-contained HTML page (no scripts, no external resources): the title as `<h1>`,
/// then each section with an `<h2>` heading and its blocks.
pub fn html_report(title: &str, sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "<!DOCTYPE html>");
    let _ = writeln!(out, r#"<html lang="en">"#);
    let _ = writeln!(out, "<head>");
    let _ = writeln!(out, r#"<meta charset="utf-8"/>"#);
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        "<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}}\
         pre{{background:#f6f6f6;padding:.6em;overflow-x:auto}}\
         svg{{display:block;max-width:100%;height:auto;margin:1em 0}}</style>"
    );
    let _ = writeln!(out, "</head>");
    let _ = writeln!(out, "<body>");
    let _ = writeln!(out, "<h1>{}</h1>", escape(title));
    for s in sections {
        let _ = writeln!(out, "<section>");
        let _ = writeln!(out, "<h2>{}</h2>", escape(&s.heading));
        for b in &s.blocks {
            match b {
                Block::Text(t) => {
                    let _ = writeln!(out, "<p>{}</p>", escape(t));
                }
                Block::Pre(t) => {
                    let _ = writeln!(out, "<pre>{}</pre>", escape(t));
                }
                Block::Svg(svg) => {
                    out.push_str(svg);
                    if !svg.ends_with('\n') {
                        out.push('\n');
                    }
                }
            }
        }
        let _ = writeln!(out, "</section>");
    }
    let _ = writeln!(out, "</body>");
    let _ = writeln!(out, "</html>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny well-formedness check: tags balance (with `<!…>` and `<?…?>` skipped and
    /// `/>` self-closing), no stray `<`/`>` inside tags, every `&` starts an entity.
    fn check_xml(s: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find(['<', '&', '>']) {
            let c = rest.as_bytes()[i];
            if c == b'>' {
                return Err(format!(
                    "stray '>' near {:?}",
                    &rest[i.saturating_sub(30)..i]
                ));
            }
            if c == b'&' {
                let after = &rest[i + 1..];
                let end = after.find(';').ok_or("unterminated entity")?;
                let name = &after[..end];
                let ok = matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
                    || (name.starts_with('#')
                        && name.len() > 1
                        && name[1..].chars().all(|c| c.is_ascii_digit()));
                if !ok {
                    return Err(format!("bad entity &{name};"));
                }
                rest = &after[end + 1..];
                continue;
            }
            let after = &rest[i + 1..];
            let end = after.find('>').ok_or("unterminated tag")?;
            let tag = &after[..end];
            if tag.contains('<') {
                return Err(format!("'<' inside tag {tag:?}"));
            }
            // attribute values must not contain a raw '&' that is not an entity
            if tag.starts_with('!') || tag.starts_with('?') {
                // declaration
            } else if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("close {name} without open"))?;
                if open != name.trim() {
                    return Err(format!("close {name} but open {open}"));
                }
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap_or("").to_string();
                if name.is_empty() {
                    return Err("empty tag".into());
                }
                stack.push(name);
            }
            rest = &after[end + 1..];
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("unclosed {stack:?}"))
        }
    }

    fn count(s: &str, needle: &str) -> usize {
        s.matches(needle).count()
    }

    #[test]
    fn checker_catches_errors() {
        assert!(check_xml("<a><b/></a>").is_ok());
        assert!(check_xml("<a><b></a>").is_err());
        assert!(check_xml("<a>x & y</a>").is_err());
        assert!(check_xml("<a>1 > 0</a>").is_err());
        assert!(check_xml("<a>&amp;&#39;</a>").is_ok());
    }

    #[test]
    fn nice_ticks_are_round() {
        // 0..97, target 6: range nice(97) = 100, step nice(100/5 = 20) = 20
        assert_eq!(
            nice_ticks(0.0, 97.0, 6),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        // 0..1: step 0.2; values are the nearest doubles to the decimals
        assert_eq!(nice_ticks(0.0, 1.0, 6), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        // 72.5..83.1 (inter-frame gaps in µs): 10.6/5 = 2.12 → 2; 72 … 84
        assert_eq!(
            nice_ticks(72.5, 83.1, 6),
            vec![72.0, 74.0, 76.0, 78.0, 80.0, 82.0, 84.0]
        );
        // 0..1.544e6 (T1 in bit/s): 3.088e5 → 5e5
        assert_eq!(nice_ticks(0.0, 1.544e6, 6), vec![0.0, 5e5, 1e6, 1.5e6, 2e6]);
        // negative ranges and small steps: 6/5 = 1.2 → 1; 0.0032/4 = 0.0008 → 0.001
        assert_eq!(
            nice_ticks(-3.0, 3.0, 6),
            vec![-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(
            nice_ticks(0.001, 0.0042, 5),
            vec![0.001, 0.002, 0.003, 0.004, 0.005]
        );
        // 0..1.05 (accuracy bars): 0.21 → 0.2; 0 … 1.2
        assert_eq!(
            nice_ticks(0.0, 1.05, 6),
            vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2]
        );
        assert!(nice_ticks(1.0, 1.0, 5).is_empty());
        assert!(nice_ticks(0.0, f64::NAN, 5).is_empty());
        assert!(nice_ticks(0.0, f64::INFINITY, 5).is_empty());
    }

    #[test]
    fn tick_labels_choose_decimals_and_suffix() {
        let (t, e) = ticks_exp(0.0, 1.0, 6);
        assert_eq!(tick_labels(&t, e), ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let (t, e) = ticks_exp(0.0, 97.0, 6);
        assert_eq!(tick_labels(&t, e), ["0", "20", "40", "60", "80", "100"]);
        let (t, e) = ticks_exp(0.0, 1.544e6, 6);
        assert_eq!(tick_labels(&t, e), ["0", "0.5M", "1.0M", "1.5M", "2.0M"]);
        let (t, e) = ticks_exp(0.0, 50_000.0, 6);
        assert_eq!(tick_labels(&t, e), ["0", "10k", "20k", "30k", "40k", "50k"]);
        let (t, e) = ticks_exp(-1.0, 1.0, 5);
        assert_eq!(tick_labels(&t, e), ["-1.0", "-0.5", "0", "0.5", "1.0"]);
        let (t, e) = ticks_exp(0.0, 2.3e7, 6);
        assert_eq!(tick_labels(&t, e), ["0", "5M", "10M", "15M", "20M", "25M"]);
        let (t, e) = ticks_exp(0.0, 5000.0, 6);
        assert_eq!(tick_labels(&t, e)[1], "1000");
    }

    #[test]
    fn escape_specials() {
        assert_eq!(
            escape(r#"a<b>&"c"'d'"#),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;"
        );
        assert_eq!(escape("x\u{1}y"), "x y");
    }

    #[test]
    fn line_chart_well_formed_with_labels_and_escapes() {
        let s = vec![
            Series::new(
                "weir <cbq> & \"red\"",
                vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)],
            ),
            Series::new("tc", vec![(0.0, 2.0), (1.0, 2.5), (2.0, 4.0)]),
        ];
        let opts = ChartOpts {
            hlines: vec![(3.5, "ideal > 3".into())],
            ..ChartOpts::default()
        };
        let svg = line_chart(
            "Goodput & friends",
            "time (s)",
            "goodput (bit/s)",
            &s,
            &opts,
        );
        check_xml(&svg).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("Goodput &amp; friends"));
        assert!(svg.contains("time (s)") && svg.contains("goodput (bit/s)"));
        assert!(svg.contains("weir &lt;cbq&gt; &amp; &quot;red&quot;"));
        assert!(svg.contains("ideal &gt; 3"));
        assert!(svg.contains(">tc</text>"));
        assert_eq!(count(&svg, "<path "), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // deterministic
        assert_eq!(
            svg,
            line_chart(
                "Goodput & friends",
                "time (s)",
                "goodput (bit/s)",
                &s,
                &opts
            )
        );
    }

    #[test]
    fn empty_and_non_finite_do_not_panic() {
        for series in [
            vec![],
            vec![Series::new("empty", vec![])],
            vec![Series::new(
                "bad",
                vec![
                    (f64::NAN, 1.0),
                    (1.0, f64::INFINITY),
                    (f64::NEG_INFINITY, 0.0),
                ],
            )],
        ] {
            for mark in [Mark::Line, Mark::Scatter] {
                let opts = ChartOpts {
                    mark,
                    ..ChartOpts::default()
                };
                let svg = line_chart("t", "x", "y", &series, &opts);
                check_xml(&svg).unwrap();
                assert!(svg.contains("no data"));
                assert!(!svg.contains("NaN") && !svg.contains("inf"));
            }
        }
        // NaN breaks a line into two pieces; a constant series gets a padded range
        let s = vec![Series::new(
            "gap",
            vec![
                (0.0, 5.0),
                (1.0, 5.0),
                (2.0, f64::NAN),
                (3.0, 5.0),
                (4.0, 5.0),
            ],
        )];
        let svg = line_chart("t", "x", "y", &s, &ChartOpts::default());
        check_xml(&svg).unwrap();
        let d = svg.split("<path d=\"").nth(1).unwrap();
        let d = &d[..d.find('"').unwrap()];
        assert_eq!(count(d, "M"), 2, "{d}");
        assert!(!svg.contains("NaN"));
        // huge values and invalid fixed ranges
        let s = vec![Series::new("big", vec![(0.0, 1e300), (1.0, -1e300)])];
        let opts = ChartOpts {
            x_range: Some((5.0, 5.0)),
            y_range: Some((f64::NAN, 1.0)),
            ..ChartOpts::default()
        };
        check_xml(&line_chart("t", "x", "y", &s, &opts)).unwrap();
    }

    #[test]
    fn decimation_bounds_points() {
        // 100k points of a noisy gap series over 0..100k, 700 columns: ≤ 4 per column
        let ys: Vec<f64> = (0..100_000)
            .map(|i| 78.0 + ((i * 7919) % 23) as f64 * 0.5)
            .collect();
        let s = Series::from_values("gap", &ys);
        let pieces = decimate_minmax(&s.points, (0.0, 100_000.0), 700);
        assert_eq!(pieces.len(), 1);
        let n = pieces[0].len();
        assert!(n <= 4 * 701, "{n}");
        assert!(n >= 2 * 700, "{n}");
        // extremes survive, order is kept
        let lo = pieces[0].iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = pieces[0]
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!((lo, hi), (78.0, 89.0));
        assert!(pieces[0].windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(pieces[0][0], (0.0, 78.0));
        assert_eq!(*pieces[0].last().unwrap(), *s.points.last().unwrap());

        // the SVG stays small, as a line and as a scatter
        let line = line_chart(
            "gap",
            "packet",
            "µs",
            std::slice::from_ref(&s),
            &ChartOpts::default(),
        );
        check_xml(&line).unwrap();
        assert!(line.len() < 200_000, "{}", line.len());
        let opts = ChartOpts {
            mark: Mark::Scatter,
            max_points: 5_000,
            ..ChartOpts::default()
        };
        let scatter = line_chart("gap", "packet", "µs", &[s], &opts);
        check_xml(&scatter).unwrap();
        assert!(count(&scatter, "h0") <= 5_000, "{}", count(&scatter, "h0"));
        assert!(scatter.len() < 200_000, "{}", scatter.len());
        // random-looking 2-D cloud of 100k points still obeys the budget
        let cloud: Vec<(f64, f64)> = (0..100_000u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                ((h >> 40) as f64, (h & 0xffff) as f64)
            })
            .collect();
        let svg = line_chart(
            "cloud",
            "x",
            "y",
            &[Series::new("a", cloud.clone()), Series::new("b", cloud)],
            &ChartOpts {
                mark: Mark::Scatter,
                ..ChartOpts::default()
            },
        );
        assert!(count(&svg, "h0") <= 20_000);
        assert!(svg.len() < 2_000_000);
    }

    #[test]
    fn small_series_are_not_decimated() {
        let pts = vec![(0.0, 1.0), (1.0, 2.0), (2.0, 0.0), (3.0, 5.0)];
        assert_eq!(decimate_minmax(&pts, (0.0, 3.0), 700), vec![pts.clone()]);
        // all in one column: first, min, max, last in order
        let pts = vec![(0.0, 1.0), (0.1, 5.0), (0.2, -1.0), (0.3, 2.0), (0.4, 3.0)];
        assert_eq!(
            decimate_minmax(&pts, (0.0, 100.0), 10),
            vec![vec![(0.0, 1.0), (0.1, 5.0), (0.2, -1.0), (0.4, 3.0)]]
        );
        assert!(decimate_minmax(&[], (0.0, 1.0), 10).is_empty());
        assert_eq!(decimate_minmax(&[(1.0, 1.0)], (1.0, 1.0), 0).len(), 1);
    }

    #[test]
    fn fixed_y_range_is_respected() {
        let s = vec![Series::new("a", vec![(0.0, 10.0), (1.0, 20.0)])];
        let opts = ChartOpts {
            y_range: Some((0.0, 50.0)),
            ..ChartOpts::default()
        };
        let svg = line_chart("t", "x", "y", &s, &opts);
        check_xml(&svg).unwrap();
        for l in [">0<", ">10<", ">20<", ">30<", ">40<", ">50<"] {
            assert!(svg.contains(l), "missing tick {l}");
        }
        assert!(!svg.contains(">60<"));
    }

    #[test]
    fn cumulative_and_from_values() {
        assert_eq!(
            cumulative(&[(1.0, 10.0), (2.0, f64::NAN), (3.0, 5.0)]),
            vec![(1.0, 10.0), (2.0, 10.0), (3.0, 15.0)]
        );
        assert_eq!(
            Series::from_values("v", &[3.0, 4.0]).points,
            vec![(0.0, 3.0), (1.0, 4.0)]
        );
    }

    #[test]
    fn bar_chart_groups_errors_and_missing() {
        let groups: Vec<String> = ["20 kb/s", "40 kb/s", "1.1 Mb/s"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let duts: Vec<String> = ["weir cbq", "tc <htb>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let values = vec![
            vec![Some((0.95, 0.1)), Some((1.02, 0.0))],
            vec![None, Some((f64::NAN, 0.1))],
            vec![Some((0.99, f64::INFINITY))], // short row: second missing
        ];
        let opts = BarOpts {
            hlines: vec![(1.0, "ideal".into())],
            ..BarOpts::default()
        };
        let svg = bar_chart(
            "Accuracy",
            "normalised goodput",
            &groups,
            &duts,
            &values,
            &opts,
        );
        check_xml(&svg).unwrap();
        for l in [
            "20 kb/s",
            "40 kb/s",
            "1.1 Mb/s",
            "weir cbq",
            "tc &lt;htb&gt;",
            "ideal",
        ] {
            assert!(svg.contains(l), "missing {l}");
        }
        // 3 bars (one with an error bar), 3 n/a marks
        assert_eq!(count(&svg, "</rect>"), 3);
        assert_eq!(count(&svg, ">n/a<"), 3);
        assert_eq!(count(&svg, "stroke=\"black\" fill=\"none\""), 1);
        assert!(svg.contains("0.9500 ± 0.1000"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        // y axis spans 0 .. 1.05 → ticks up to 1.2
        assert!(svg.contains(">1.2<"));

        for (g, s) in [(vec![], duts.clone()), (groups.clone(), vec![])] {
            let svg = bar_chart("t", "y", &g, &s, &[], &BarOpts::default());
            check_xml(&svg).unwrap();
            assert!(svg.contains("no data"));
        }
        // negative values: bars hang below zero
        let svg = bar_chart(
            "t",
            "y",
            &groups[..1],
            &duts[..1],
            &[vec![Some((-2.0, 0.5))]],
            &BarOpts::default(),
        );
        check_xml(&svg).unwrap();
        // -2.5 .. 0 in steps of 0.5
        assert!(svg.contains(">-2.5<") && svg.contains(">-1.0<"), "{svg}");
    }

    #[test]
    fn html_report_escapes_and_inlines() {
        let bars = bar_chart(
            "A & B",
            "y",
            &["g".to_string()],
            &["s".to_string()],
            &[vec![Some((1.0, 0.1))]],
            &BarOpts::default(),
        );
        let line = line_chart(
            "L",
            "x",
            "y",
            &[Series::new("s", vec![(0.0, 0.0), (1.0, 1.0)])],
            &ChartOpts::default(),
        );
        let sections = vec![
            Section::new("Table 4 <basic>")
                .text("weir & tc, \"quoted\"")
                .pre("class  DUT\n20k    <weir>")
                .svg(bars.clone()),
            Section::new("Series").svg(line.clone()),
        ];
        let html = html_report("Report 'seed 000' <x>", &sections);
        check_xml(&html).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>Report &#39;seed 000&#39; &lt;x&gt;</title>"));
        assert!(html.contains("<h2>Table 4 &lt;basic&gt;</h2>"));
        assert!(html.contains("<p>weir &amp; tc, &quot;quoted&quot;</p>"));
        assert!(html.contains("<pre>class  DUT\n20k    &lt;weir&gt;</pre>"));
        assert!(html.contains(&bars) && html.contains(&line));
        assert_eq!(count(&html, "<svg "), 2);
        assert_eq!(count(&html, "<section>"), 2);
        // the two inlined charts have distinct clip ids
        let ids: HashSet<&str> = html
            .match_indices("clipPath id=\"")
            .map(|(i, m)| {
                let rest = &html[i + m.len()..];
                &rest[..rest.find('"').unwrap()]
            })
            .collect();
        assert_eq!(ids.len(), 2);
        check_xml(&html_report("", &[])).unwrap();
    }
}
