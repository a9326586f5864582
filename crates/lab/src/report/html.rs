//! A small HTML report writer: a self-contained page (no scripts, no external resources)
//! of sections, each a heading with paragraphs, preformatted tables and inlined SVG charts.
//! All text is escaped; SVG given to [`Block::Svg`] is inserted as is and must come from this
//! module's charts (or be otherwise trusted).

use std::fmt::Write as _;

use super::svg::escape;

/// A piece of a report section.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A paragraph of text (escaped).
    Text(String),
    /// Preformatted text, e.g. a table from [`crate::stats::table4::format_table`] (escaped).
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
    use std::collections::HashSet;

    use super::super::svg::{check_xml, count};
    use super::super::{bar_chart, line_chart, BarOpts, ChartOpts, Series};
    use super::*;

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
        // self-contained: nothing fetched from elsewhere (the SVG namespace is a name,
        // not a fetch), no scripts, no web fonts
        let without_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        for external in ["http://", "https://", "<link", "<script", "@import"] {
            assert!(!without_ns.contains(external), "{external} in the report");
        }
        // url() only for the charts' own clip paths
        assert_eq!(count(&html, "url("), count(&html, "url(#"));
    }
}
