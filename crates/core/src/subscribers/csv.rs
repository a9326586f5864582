//! A CSV reader that keeps where each field starts (line and column, 1-based), for
//! messages at `file:line:col` (RFC 4180: fields separated by commas, records by LF or
//! CRLF; a field in double quotes may hold commas, line breaks and `""` for a quote).
//!
//! Blank lines are skipped. A quote inside an unquoted field is taken literally (as
//! spreadsheets write it); a quoted field that never closes is an error at its start.

/// One field: its text (quotes removed) and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub text: String,
    pub line: usize,
    pub col: usize,
}

/// One record: its fields and the line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub line: usize,
    pub fields: Vec<Field>,
}

/// A quoted field that never closes: (line, column) of its opening quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unclosed {
    pub line: usize,
    pub col: usize,
}

/// Every record of `text`, or the first unclosed quote.
pub fn records(text: &str) -> Result<Vec<Record>, Unclosed> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text); // a spreadsheet's BOM
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let (mut line, mut col) = (1usize, 1usize);
    let mut rec: Vec<Field> = Vec::new();
    let mut rec_line = 1;
    // a record starts with a field at the current position
    let mut field_start = (line, col);
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false; // the record has a character (blank lines are skipped)
    loop {
        let Some(c) = chars.next() else {
            if quoted {
                return Err(Unclosed {
                    line: field_start.0,
                    col: field_start.1,
                });
            }
            if any {
                rec.push(field(&mut cur, field_start));
                out.push(Record {
                    line: rec_line,
                    fields: std::mem::take(&mut rec),
                });
            }
            return Ok(out);
        };
        let here = (line, col);
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    col += 1;
                    cur.push('"');
                } else {
                    quoted = false;
                }
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            '"' if cur.is_empty() && here == field_start => {
                quoted = true;
                any = true;
            }
            ',' => {
                any = true;
                rec.push(field(&mut cur, field_start));
                field_start = (line, col);
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                if any {
                    rec.push(field(&mut cur, field_start));
                    out.push(Record {
                        line: rec_line,
                        fields: std::mem::take(&mut rec),
                    });
                }
                cur.clear();
                any = false;
                rec_line = line;
                field_start = (line, col);
            }
            c => {
                any = true;
                cur.push(c);
            }
        }
    }
}

fn field(cur: &mut String, (line, col): (usize, usize)) -> Field {
    Field {
        text: std::mem::take(cur),
        line,
        col,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(r: &Record) -> Vec<&str> {
        r.fields.iter().map(|f| f.text.as_str()).collect()
    }

    #[test]
    fn fields_and_where_they_start() {
        let t = "a,b,c\n1,\"x, y\",3\r\n\n\"say \"\"hi\"\"\",,\n";
        let r = records(t).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(texts(&r[0]), vec!["a", "b", "c"]);
        assert_eq!(texts(&r[1]), vec!["1", "x, y", "3"]);
        assert_eq!(
            (r[1].line, r[1].fields[2].line, r[1].fields[2].col),
            (2, 2, 10)
        );
        // the blank line 3 is skipped; the record on line 4
        assert_eq!(r[2].line, 4);
        assert_eq!(texts(&r[2]), vec!["say \"hi\"", "", ""]);
        assert_eq!((r[2].fields[1].col, r[2].fields[2].col), (14, 15));
    }

    #[test]
    fn a_quoted_field_may_span_lines_and_the_last_record_needs_no_newline() {
        let r = records("id,comment\n7,\"two\nlines\"\n8,end").unwrap();
        assert_eq!(texts(&r[1]), vec!["7", "two\nlines"]);
        assert_eq!((r[2].line, texts(&r[2])), (4, vec!["8", "end"]));
    }

    #[test]
    fn an_unclosed_quote_is_located_and_a_stray_one_is_text() {
        assert_eq!(
            records("a,b\n1,\"open\n2,3\n"),
            Err(Unclosed { line: 2, col: 3 })
        );
        let r = records("5\" disk,x\n").unwrap();
        assert_eq!(texts(&r[0]), vec!["5\" disk", "x"]);
        let r = records("\u{feff}h1,h2\n").unwrap();
        assert_eq!(texts(&r[0]), vec!["h1", "h2"]);
    }
}
