//! Box plots as SVG: one box per entry (a DUT in a result file, say) of a measure taken
//! over several runs, for `weir lab report`'s comparison of result files.
//!
//! A box spans the first to the third quartile with a line at the median, and its
//! whiskers reach the smallest and the largest value (no outlier rule: with a handful of
//! runs every run counts). Every value is also drawn as a dot, so one or two runs read as
//! what they are. Quartiles are [`percentile`]'s (linear interpolation between order
//! statistics). Non-finite values are left out; an entry without any shows "n/a".

use std::fmt::Write as _;

use super::svg::{
    color, draw_hlines, escape, extent, frame, no_data, open_svg, push_clipped, px, Axis,
};
use crate::stats::dist::percentile;

/// The five numbers a box shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoxStats {
    pub min: f64,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub max: f64,
}

impl BoxStats {
    /// Of the finite `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<BoxStats> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable_by(f64::total_cmp);
        Some(BoxStats {
            min: v[0],
            q1: percentile(&v, 25.0),
            median: percentile(&v, 50.0),
            q3: percentile(&v, 75.0),
            max: v[v.len() - 1],
        })
    }
}

/// An SVG box plot: along x one box per `(label, values)` entry; `hlines` are dashed
/// reference lines (y, label).
pub fn box_chart(
    title: &str,
    y_label: &str,
    boxes: &[(String, Vec<f64>)],
    hlines: &[(f64, String)],
) -> String {
    let stats: Vec<Option<BoxStats>> = boxes.iter().map(|(_, v)| BoxStats::of(v)).collect();
    let y_ext = extent(
        stats
            .iter()
            .flatten()
            .flat_map(|s| [s.min, s.max])
            .chain(hlines.iter().map(|h| h.0)),
    );
    let f = frame(800, 450, 0.0, 0);
    let ya = Axis::new(y_ext, None, 6);
    let mut out = String::new();
    open_svg(&mut out, &f, title, "", y_label, None, &ya);
    let n = boxes.len();
    let gw = (f.right - f.left) / n.max(1) as f64;
    let mut plot = String::new();
    let mut missing = String::new();
    for (i, ((label, values), s)) in boxes.iter().zip(&stats).enumerate() {
        let cx = f.left + gw * (i as f64 + 0.5);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(cx),
            px(f.bottom + 16.0),
            escape(label)
        );
        let Some(s) = s else {
            let _ = writeln!(
                missing,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="9" fill="#888">n/a</text>"##,
                px(cx),
                px(f.bottom - 4.0)
            );
            continue;
        };
        let w = (gw * 0.5).min(80.0);
        let (x0, x1) = (cx - w / 2.0, cx + w / 2.0);
        let y = |v: f64| f.map_y(&ya, v);
        let _ = writeln!(
            plot,
            r##"<path d="M{cx} {ymin}V{yq1}M{cx} {yq3}V{ymax}M{a} {ymin}H{b}M{a} {ymax}H{b}" stroke="#333" fill="none"/>"##,
            cx = px(cx),
            ymin = px(y(s.min)),
            yq1 = px(y(s.q1)),
            yq3 = px(y(s.q3)),
            ymax = px(y(s.max)),
            a = px(cx - w / 4.0),
            b = px(cx + w / 4.0)
        );
        let _ = writeln!(
            plot,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="{}" fill-opacity="0.35" stroke="#333"><title>{}: min {:.4}, q1 {:.4}, median {:.4}, q3 {:.4}, max {:.4} ({} values)</title></rect>"##,
            px(x0),
            px(y(s.q3)),
            px(w),
            px((y(s.q1) - y(s.q3)).max(0.5)),
            color(i),
            escape(label),
            s.min,
            s.q1,
            s.median,
            s.q3,
            s.max,
            values.iter().filter(|v| v.is_finite()).count()
        );
        let _ = writeln!(
            plot,
            r##"<path d="M{} {}H{}" stroke="#000" stroke-width="2"/>"##,
            px(x0),
            px(y(s.median)),
            px(x1)
        );
        for v in values.iter().filter(|v| v.is_finite()) {
            let _ = writeln!(
                plot,
                r#"<circle cx="{}" cy="{}" r="2.5" fill="{}"/>"#,
                px(cx + w * 0.35),
                px(y(*v)),
                color(i)
            );
        }
    }
    push_clipped(&mut out, &f, &plot);
    out.push_str(&missing);
    if stats.iter().all(Option::is_none) {
        no_data(&mut out, &f);
    }
    draw_hlines(&mut out, &f, &ya, hlines);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::svg::{check_xml, count};
    use super::*;

    #[test]
    fn five_numbers_by_hand() {
        // 1 2 3 4 5: quartiles at 25 % and 75 % of the 4 gaps: 2 and 4
        let s = BoxStats::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(
            (s.min, s.q1, s.median, s.q3, s.max),
            (1.0, 2.0, 3.0, 4.0, 5.0)
        );
        // 1 2 3 4: q1 = 1 + 0.75, median 2.5, q3 = 3.25
        let s = BoxStats::of(&[1.0, 2.0, 3.0, 4.0, f64::NAN]).unwrap();
        assert_eq!((s.q1, s.median, s.q3), (1.75, 2.5, 3.25));
        let one = BoxStats::of(&[7.0]).unwrap();
        assert_eq!(
            (one.min, one.q1, one.median, one.q3, one.max),
            (7.0, 7.0, 7.0, 7.0, 7.0)
        );
        assert!(BoxStats::of(&[f64::NAN]).is_none());
        assert!(BoxStats::of(&[]).is_none());
    }

    #[test]
    fn a_box_per_entry_dots_per_value_and_missing_entries() {
        let boxes = vec![
            ("a: weir".to_string(), vec![1.0, 2.0, 3.0]),
            ("b: <htb>".to_string(), vec![f64::NAN]),
            ("c".to_string(), vec![4.0]),
        ];
        let svg = box_chart("TTR", "ratio", &boxes, &[(1.0, "ideal".into())]);
        check_xml(&svg).unwrap();
        assert_eq!(count(&svg, "</rect>"), 2);
        assert_eq!(count(&svg, "<circle"), 4);
        assert_eq!(count(&svg, ">n/a<"), 1);
        assert!(svg.contains("b: &lt;htb&gt;") && svg.contains("ideal"));
        assert!(svg.contains("median 2.0000"));
        let empty = box_chart("t", "y", &[], &[]);
        check_xml(&empty).unwrap();
        assert!(empty.contains("no data"));
    }
}
