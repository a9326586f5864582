//! Plain-text tables and number cells for the labs' printed reports.

/// `v` with `decimals` decimals, or `n/a` when missing or not finite.
pub fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "n/a".into(),
    }
}

/// A CSV field: quoted (quotes doubled) when it contains a comma, quote or line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A plain-text table: the first row the headings; the first `left` columns left-aligned,
/// the others right-aligned; two spaces between columns, no trailing spaces. Rows may be
/// shorter than others.
pub fn text_table(rows: &[Vec<String>], left: usize) -> String {
    let ncols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |v| v.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, v) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(widths[c] - v.chars().count());
            if c < left {
                line.push_str(v);
                line.push_str(&pad);
            } else {
                line.push_str(&pad);
                line.push_str(v);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_or_na() {
        assert_eq!(fmt_opt(Some(1.23456), 3), "1.235");
        assert_eq!(fmt_opt(Some(2.0), 0), "2");
        assert_eq!(fmt_opt(None, 2), "n/a");
        assert_eq!(fmt_opt(Some(f64::NAN), 2), "n/a");
    }

    #[test]
    fn columns_align() {
        let rows: Vec<Vec<String>> = [
            vec!["name", "DUT", "value"],
            vec!["a", "weir", "1.5"],
            vec!["long name", "x", "10.25"],
            vec!["short"],
        ]
        .iter()
        .map(|r| r.iter().map(|s| s.to_string()).collect())
        .collect();
        assert_eq!(
            text_table(&rows, 1),
            "name        DUT  value\na          weir    1.5\nlong name     x  10.25\nshort\n"
        );
        assert_eq!(
            text_table(&rows, 2),
            "name       DUT   value\na          weir    1.5\nlong name  x     10.25\nshort\n"
        );
    }
}
