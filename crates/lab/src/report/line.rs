//! Line and scatter charts as SVG: per-second goodput against time, byte-time lines
//! (seed 000 Figs. 11–12), inter-frame gap per packet number (seed 002 Figs. 5 and 8: up to
//! ~10⁵ points, as a scatter or a line, with the ideal gap as a reference line), and
//! Mahimahi's throughput and delay graphs (a shaded capacity or signal-delay area under
//! lines or dots: a series may choose its own [`Mark`]).
//!
//! * Non-finite points (NaN, ±∞) are skipped; in a line they break it into separate pieces.
//! * Decimation, so that a 10⁵-point series stays small (well under 1 MB):
//!   - lines keep, per pixel column and contiguous piece, the first, last, lowest and highest
//!     point in their original order (the "M4" rule), which draws exactly the same pixels as
//!     the full line; for x increasing this is at most 4 points per column;
//!   - scatter keeps the first point of each occupied cell of a pixel grid, doubling the
//!     cell size until all series together fit [`ChartOpts::max_points`].

use std::collections::HashSet;
use std::fmt::Write as _;

use super::svg::{
    color, draw_hlines, draw_legend, extent, frame, legend_width, no_data, open_svg, push_clipped,
    px, Axis, Frame,
};

/// One named series of (x, y) points.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// How this series is drawn; `None`: the chart's [`ChartOpts::mark`].
    pub mark: Option<Mark>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points,
            mark: None,
        }
    }

    /// The same series drawn with its own `mark` (e.g. a shaded [`Mark::Area`] under the
    /// chart's lines).
    pub fn with_mark(self, mark: Mark) -> Self {
        Self {
            mark: Some(mark),
            ..self
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

/// How a [`line_chart`] draws its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mark {
    #[default]
    Line,
    /// Dots, no connecting line (seed 002 Fig. 5).
    Scatter,
    /// A line with the area between it and y = 0 (or the nearer edge of the plot) shaded,
    /// as gnuplot's `filledcurves above x1` (Mahimahi's capacity and signal delay).
    Area,
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
    /// Scatter only: a dot's diameter, px (3 by default; larger for a few points that
    /// each stand for a whole run).
    pub dot: f64,
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
            dot: 3.0,
        }
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
    let mut plot = String::new();
    let to_px = |(x, y): (f64, f64)| (f.map_x(&xa, x), f.map_y(&ya, y));
    let mark_of = |s: &Series| s.mark.unwrap_or(opts.mark);
    // scatter: the dots kept, one budget over every scatter series
    let pixel_series: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| match mark_of(s) {
            Mark::Scatter => s.points.iter().map(|&p| to_px(p)).collect(),
            Mark::Line | Mark::Area => Vec::new(),
        })
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
    let columns = (f.right - f.left).ceil().max(1.0) as usize;
    // an area's lower edge: y = 0, or the plot's edge nearer to it
    let base_y = f.map_y(&ya, 0.0f64.clamp(ya.lo, ya.hi));
    for (i, s) in series.iter().enumerate() {
        if mark_of(s) == Mark::Scatter {
            let pts = &kept[i];
            if pts.is_empty() {
                continue;
            }
            let mut d = String::new();
            for &(x, y) in pts {
                let _ = write!(d, "M{} {}h0", px(x), px(y));
            }
            let _ = writeln!(
                plot,
                r#"<path d="{d}" fill="none" stroke="{}" stroke-width="{}" stroke-linecap="round"/>"#,
                color(i),
                px(opts.dot)
            );
            continue;
        }
        let pieces = decimate_minmax(&s.points, (xa.lo, xa.hi), columns);
        if pieces.is_empty() {
            continue;
        }
        if mark_of(s) == Mark::Area {
            let mut d = String::new();
            for p in &pieces {
                let (x0, _) = to_px(p[0]);
                let (xn, _) = to_px(p[p.len() - 1]);
                let _ = write!(d, "M{} {}", px(x0), px(base_y));
                for &pt in p {
                    let (x, y) = to_px(pt);
                    let _ = write!(d, "L{} {}", px(x), px(y));
                }
                let _ = write!(d, "L{} {}Z", px(xn), px(base_y));
            }
            let _ = writeln!(
                plot,
                r#"<path d="{d}" fill="{}" fill-opacity="0.25" stroke="none"/>"#,
                color(i)
            );
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
    push_clipped(&mut body, &f, &plot);
    if x_ext.is_none() {
        no_data(&mut body, &f);
    }
    draw_hlines(&mut body, &f, &ya, &opts.hlines);
    let entries: Vec<(&str, &str, bool)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.label.as_str(), color(i), mark_of(s) == Mark::Line))
        .collect();
    draw_legend(&mut body, &f, &entries);
    body.push_str("</svg>\n");
    body
}

#[cfg(test)]
mod tests {
    use super::super::svg::{check_xml, count};
    use super::super::svg::{frame, legend_width, px};
    use super::*;

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
    fn series_choose_their_marks() {
        let s = vec![
            Series::new("capacity", vec![(0.0, 10.0), (1.0, 20.0)]).with_mark(Mark::Area),
            Series::new("dots", vec![(0.0, 5.0), (1.0, 7.0)]).with_mark(Mark::Scatter),
            Series::new("line", vec![(0.0, 1.0), (1.0, 2.0)]),
        ];
        let opts = ChartOpts {
            y_range: Some((0.0, 20.0)),
            ..ChartOpts::default()
        };
        let svg = line_chart("t", "x", "y", &s, &opts);
        check_xml(&svg).unwrap();
        // the area: its fill from y = 0 (the plot's bottom) up to the line and back, then
        // its line; the dots; the line
        assert_eq!(count(&svg, "<path "), 4, "{svg}");
        assert_eq!(count(&svg, r#"fill-opacity="0.25""#), 1);
        let f = frame(
            opts.width,
            opts.height,
            legend_width(&["capacity", "dots", "line"]),
            3,
        );
        let area = svg.split(r#"<path d=""#).nth(1).unwrap();
        let area = &area[..area.find('"').unwrap()];
        let (l, r, b, t) = (px(f.left), px(f.right), px(f.bottom), px(f.top));
        let mid = px((f.top + f.bottom) / 2.0);
        assert_eq!(area, format!("M{l} {b}L{l} {mid}L{r} {t}L{r} {b}Z"));
        assert_eq!(count(&svg, "h0"), 2, "two dots");
        // legend: a box for the area and the dots, a line for the line
        assert_eq!(count(&svg, r#"width="12" height="12""#), 2);
        // the chart's own mark still applies to a series without one
        let opts = ChartOpts {
            mark: Mark::Scatter,
            ..opts
        };
        let svg = line_chart("t", "x", "y", &s[2..], &opts);
        assert_eq!(count(&svg, "h0"), 2);
    }

    #[test]
    fn from_values() {
        assert_eq!(
            Series::from_values("v", &[3.0, 4.0]).points,
            vec![(0.0, 3.0), (1.0, 4.0)]
        );
    }
}
