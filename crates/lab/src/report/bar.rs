//! Grouped bar charts as SVG, with ± error bars: seed 000 Figs. 8–10 (accuracy, fairness,
//! retransmissions per class, one bar per DUT). Non-finite or missing values show "n/a".

use std::fmt::Write as _;

use super::svg::{
    color, draw_hlines, draw_legend, escape, extent, frame, legend_width, no_data, open_svg,
    push_clipped, px, Axis,
};

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
    push_clipped(&mut out, &f, &plot);
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

#[cfg(test)]
mod tests {
    use super::super::svg::{check_xml, count};
    use super::*;

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
}
