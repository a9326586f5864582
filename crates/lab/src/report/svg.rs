//! The SVG primitives the charts share: the palette, escaping, pixel coordinates, "nice"
//! axis ticks and their labels, the frame with grid and axis labels, reference lines, the
//! legend, and the clip path around the plotted data.
//!
//! # Conventions
//!
//! * Sizes are CSS pixels of the whole SVG (default 800 × 450); coordinates are written with
//!   one decimal.
//! * Axis ticks are "nice" numbers, 1, 2 or 5 × 10ᵏ apart (after Heckbert, "Nice numbers for
//!   graph labels", Graphics Gems, 1990), [`nice_ticks`]. Unless a range is fixed the axes
//!   extend to the enclosing ticks. Tick labels switch to k (≥ 10⁴), M (≥ 10⁶) or G
//!   (≥ 10⁹), e.g. for bit/s.
//! * All text is escaped with [`escape`]. Clip-path ids are a hash of the chart, so several
//!   charts can be inlined in one HTML page; the output is deterministic byte for byte.

use std::fmt::Write as _;

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

pub(super) fn color(i: usize) -> &'static str {
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
pub(super) fn px(v: f64) -> String {
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

pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    ticks: Vec<f64>,
    labels: Vec<String>,
}

impl Axis {
    /// From the data extent (or a fixed range, if valid).
    pub(super) fn new(
        extent: Option<(f64, f64)>,
        fixed: Option<(f64, f64)>,
        target: usize,
    ) -> Axis {
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
pub(super) struct Frame {
    pub(super) w: f64,
    pub(super) h: f64,
    pub(super) left: f64,
    pub(super) right: f64,
    pub(super) top: f64,
    pub(super) bottom: f64,
}

impl Frame {
    pub(super) fn map_x(&self, a: &Axis, x: f64) -> f64 {
        self.left + (x - a.lo) / (a.hi - a.lo) * (self.right - self.left)
    }
    pub(super) fn map_y(&self, a: &Axis, y: f64) -> f64 {
        self.bottom - (y - a.lo) / (a.hi - a.lo) * (self.bottom - self.top)
    }
}

pub(super) fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
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
pub(super) fn legend_width(labels: &[&str]) -> f64 {
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
pub(super) fn open_svg(
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

pub(super) fn draw_hlines(out: &mut String, f: &Frame, y: &Axis, hlines: &[(f64, String)]) {
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
pub(super) fn draw_legend(out: &mut String, f: &Frame, entries: &[(&str, &str, bool)]) {
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

pub(super) fn no_data(out: &mut String, f: &Frame) {
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#888">no data</text>"##,
        px((f.left + f.right) / 2.0),
        px((f.top + f.bottom) / 2.0)
    );
}

pub(super) fn frame(width: u32, height: u32, legend_w: f64, legend_entries: usize) -> Frame {
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

/// Appends `plot` (the data marks) clipped to the plot area of `f`: a clip path whose id
/// is a hash of the chart so far and of `plot`, then the group.
pub(super) fn push_clipped(out: &mut String, f: &Frame, plot: &str) {
    let clip_rect = format!(
        r#"<rect x="{}" y="{}" width="{}" height="{}"/>"#,
        px(f.left),
        px(f.top),
        px(f.right - f.left),
        px(f.bottom - f.top)
    );
    let id = format!("weir-clip-{:016x}", fnv1a(plot) ^ fnv1a(out));
    let _ = writeln!(
        out,
        r#"<defs><clipPath id="{id}">{clip_rect}</clipPath></defs>"#
    );
    let _ = writeln!(out, r#"<g clip-path="url(#{id})">"#);
    out.push_str(plot);
    out.push_str("</g>\n");
}

#[cfg(test)]
/// A tiny well-formedness check: tags balance (with `<!…>` and `<?…?>` skipped and
/// `/>` self-closing), no stray `<`/`>` inside tags, every `&` starts an entity.
pub(crate) fn check_xml(s: &str) -> Result<(), String> {
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

#[cfg(test)]
pub(crate) fn count(s: &str, needle: &str) -> usize {
    s.matches(needle).count()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
