//! The documentation's own links: every link from one of the repository's markdown files
//! to a file or heading of the repository resolves, and docs/lab.md has a section for every
//! `weir lab` subcommand.
//!
//! The markdown is read by a small hand parser (no dependency), enough for what GitHub
//! renders here:
//! - fenced code blocks (``` or ~~~, CommonMark's rule: the closing fence uses the same
//!   character, at least as many, nothing after it) and inline code spans are not links;
//! - inline links and images `[text](target "title")` (the text may wrap onto the next
//!   line), reference definitions `[label]: target`, full references `[text][label]` (the
//!   label must be defined);
//! - external targets (`http:`, `https:`, `mailto:`) are not checked; any other scheme is
//!   reported;
//! - a path is relative to the linking file (`/` starts at the repository's root) and must
//!   exist; an `#anchor` into a markdown file must be produced by one of its headings (ATX
//!   headings, GitHub's slug rule in [`slug`]) or by an `<a name|id="...">`; an anchor into
//!   another file is not checked (GitHub's `#L10` line anchors).
//!
//! A failure lists every broken link as `file:line: target (why)`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `*.md` file under `dir`, skipping `target/` and hidden directories (`.git/`).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                markdown_files(&p, out);
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// GitHub's heading anchor (github-slugger): lowercase; drop every character that is not a
/// letter, digit, `_`, space or hyphen; each space becomes a hyphen. (github-slugger also
/// keeps combining marks and other connector punctuation, which the docs do not use.)
/// `text` is the heading as rendered (see [`heading_text`]).
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as GitHub renders it: code spans keep their content without the
/// backticks, links and images keep their text, emphasis markers (`*`) and HTML tags go.
/// A literal `_` is kept (it survives in the slug), so `_emphasis_` would differ; the
/// repository's headings use `*`.
fn heading_text(raw: &str) -> String {
    let raw = raw.trim();
    // Closing sequence of #s: "## Title ##".
    let raw = match raw.trim_end_matches('#') {
        t if t.len() < raw.len() && (t.is_empty() || t.ends_with(' ')) => t.trim_end(),
        _ => raw,
    };
    let mut out = String::new();
    let b: Vec<char> = raw.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '`' => {
                let n = b[i..].iter().take_while(|&&c| c == '`').count();
                let close = (i + n..b.len()).find(|&j| {
                    b[j..].iter().take_while(|&&c| c == '`').count() == n
                        && (j == 0 || b[j - 1] != '`')
                });
                match close {
                    Some(j) => {
                        let inner: String = b[i + n..j].iter().collect();
                        let inner = if inner.starts_with(' ')
                            && inner.ends_with(' ')
                            && !inner.trim().is_empty()
                        {
                            inner[1..inner.len() - 1].to_string()
                        } else {
                            inner
                        };
                        out.push_str(&inner);
                        i = j + n;
                    }
                    None => {
                        out.extend(&b[i..i + n]);
                        i += n;
                    }
                }
            }
            ']' if b.get(i + 1) == Some(&'(') => {
                // The end of a link's text: skip its destination.
                let mut depth = 0;
                let mut j = i + 1;
                while j < b.len() {
                    match b[j] {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                i = j + 1;
            }
            '[' | ']' | '*' => i += 1,
            '!' if b.get(i + 1) == Some(&'[') => i += 1,
            '<' => match b[i..].iter().position(|&c| c == '>') {
                Some(k)
                    if b.get(i + 1)
                        .is_some_and(|c| c.is_ascii_alphabetic() || *c == '/') =>
                {
                    i += k + 1
                }
                _ => {
                    out.push('<');
                    i += 1;
                }
            },
            '\\' if b.get(i + 1).is_some_and(|c| c.is_ascii_punctuation()) => {
                out.push(b[i + 1]);
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// A fence opening or closing line: (fence character, length, the rest of the line).
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let t = &line[indent..];
    let c = t.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = t.chars().take_while(|&x| x == c).count();
    if n < 3 {
        return None;
    }
    let rest = &t[n..];
    if c == '`' && rest.contains('`') {
        return None;
    }
    Some((c, n, rest))
}

/// One markdown file read for links: its text with code blanked out (same length, same
/// line breaks), its anchors, its headings in order.
struct Doc {
    masked: String,
    anchors: HashSet<String>,
    headings: Vec<String>,
}

fn read_doc(text: &str) -> Doc {
    // 1. Blank fenced code blocks, collect headings from the rest.
    let mut lines_out: Vec<String> = Vec::new();
    let mut open: Option<(char, usize)> = None;
    let mut headings = Vec::new();
    let mut anchors = HashSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in text.split('\n') {
        let blank = " ".repeat(line.len());
        if let Some((c, n)) = open {
            if let Some((c2, n2, rest)) = fence(line) {
                if c2 == c && n2 >= n && rest.trim().is_empty() {
                    open = None;
                }
            }
            lines_out.push(blank);
            continue;
        }
        if let Some((c, n, _)) = fence(line) {
            open = Some((c, n));
            lines_out.push(blank);
            continue;
        }
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() <= 3 {
            let level = t.chars().take_while(|&c| c == '#').count();
            if (1..=6).contains(&level) && (t.len() == level || t[level..].starts_with([' ', '\t']))
            {
                let text = heading_text(&t[level..]);
                let base = slug(&text);
                // github-slugger: a repeated slug gets -1, -2, ... (skipping any taken).
                let mut s = base.clone();
                while anchors.contains(&s) {
                    let n = seen.entry(base.clone()).or_insert(0);
                    *n += 1;
                    s = format!("{base}-{n}");
                }
                anchors.insert(s);
                headings.push(t.trim_end().to_string());
            }
        }
        for attr in ["name=\"", "id=\""] {
            let mut rest = line;
            while let Some(k) = rest.find("<a ") {
                rest = &rest[k + 3..];
                let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
                if let Some(a) = tag.find(attr) {
                    let v = &tag[a + attr.len()..];
                    anchors.insert(v[..v.find('"').unwrap_or(v.len())].to_string());
                }
            }
        }
        lines_out.push(line.to_string());
    }
    // 2. Blank inline code spans (they may wrap, not across a blank line).
    let text = lines_out.join("\n");
    let b = text.as_bytes();
    let mut masked = b.to_vec();
    let mut i = 0;
    while let Some(at) = next_unescaped(b, i, b'`') {
        i = at;
        let n = b[i..].iter().take_while(|&&c| c == b'`').count();
        let end_para = text[i..].find("\n\n").map_or(b.len(), |k| i + k);
        let mut j = i + n;
        let mut close = None;
        while j < end_para {
            if b[j] == b'`' {
                let m = b[j..].iter().take_while(|&&c| c == b'`').count();
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut masked[i..j + n] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    Doc {
        // Only ASCII bytes were replaced by spaces, and only whole code spans (which start
        // and end at backticks), so this stays UTF-8.
        masked: String::from_utf8(masked).expect("masking keeps UTF-8"),
        anchors,
        headings,
    }
}

/// The first `byte` at or after `i` that a backslash does not escape.
fn next_unescaped(b: &[u8], mut i: usize, byte: u8) -> Option<usize> {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == byte => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The `]` or `)` that closes the `[` or `(` at `open`, nesting and backslash escapes
/// counted; `None` when `stop` or the end comes first.
fn matching(b: &[u8], open: usize, stop: &[u8]) -> Option<usize> {
    let (up, down) = (b[open], if b[open] == b'[' { b']' } else { b')' });
    let mut depth = 0;
    let mut j = open;
    while j < b.len() && !b[j..].starts_with(stop) {
        match b[j] {
            b'\\' => j += 1,
            c if c == up => depth += 1,
            c if c == down => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// A link found in a file, with its line.
#[derive(Debug, PartialEq)]
enum Link {
    /// `[text](target)` or `![alt](target)`.
    Inline(usize, String),
    /// `[label]: target`.
    Definition(usize, String, String),
    /// `[text][label]` or `[label][]`.
    Reference(usize, String),
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The links of a masked text: inline links and images, full references, definitions.
fn links(masked: &str) -> Vec<Link> {
    let b = masked.as_bytes();
    let mut out = Vec::new();
    // Reference definitions: `[label]: target` at the start of a line (up to 3 spaces).
    let mut at = 0;
    for line in masked.split('\n') {
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() <= 3 && t.starts_with('[') && !t.starts_with("[^") {
            if let Some(k) = t.find("]:") {
                let target = t[k + 2..].split_whitespace().next().unwrap_or("");
                let target = target.trim_start_matches('<').trim_end_matches('>');
                out.push(Link::Definition(
                    line_of(masked, at),
                    t[1..k].to_string(),
                    target.to_string(),
                ));
            }
        }
        at += line.len() + 1;
    }
    let mut i = 0;
    while let Some(at) = next_unescaped(b, i, b'[') {
        i = at;
        // The link text's `]`, not across a blank line.
        let Some(j) = matching(b, i, b"\n\n") else {
            i += 1;
            continue;
        };
        match b.get(j + 1) {
            Some(b'(') => {
                // The destination ends on its line.
                let Some(k) = matching(b, j + 1, b"\n") else {
                    i += 1;
                    continue;
                };
                let start = j + 2;
                let inner = masked[start..k].trim();
                let target = if let Some(rest) = inner.strip_prefix('<') {
                    rest[..rest.find('>').unwrap_or(rest.len())].to_string()
                } else {
                    inner.split_whitespace().next().unwrap_or("").to_string()
                };
                out.push(Link::Inline(line_of(masked, start), target));
                // The link's text may hold an image: look inside it too.
                i += 1;
            }
            Some(b'[') => {
                let rest = &masked[j + 2..];
                if let Some(k) = rest.find(']') {
                    let label = &rest[..k];
                    let label = if label.is_empty() {
                        &masked[i + 1..j]
                    } else {
                        label
                    };
                    out.push(Link::Reference(line_of(masked, j), label.to_string()));
                    i = j + 2 + k + 1;
                } else {
                    i = j + 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// A URL's scheme (`https` of `https://...`), `None` for a path.
fn scheme(target: &str) -> Option<&str> {
    let (s, _) = target.split_once(':')?;
    let mut c = s.chars();
    (c.next()?.is_ascii_alphabetic() && c.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)))
        .then_some(s)
}

fn normalise_label(l: &str) -> String {
    l.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every broken link of the repository, as `file:line: target (why)`, and how many links
/// were checked.
fn broken_links(root: &Path) -> (Vec<String>, usize) {
    let mut files = Vec::new();
    markdown_files(root, &mut files);
    let docs: BTreeMap<PathBuf, Doc> = files
        .iter()
        .map(|f| (f.clone(), read_doc(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    for (file, doc) in &docs {
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        let all = links(&doc.masked);
        let labels: HashSet<String> = all
            .iter()
            .filter_map(|l| match l {
                Link::Definition(_, label, _) => Some(normalise_label(label)),
                _ => None,
            })
            .collect();
        for link in all {
            checked += 1;
            let (line, target) = match link {
                Link::Reference(line, label) => {
                    if !labels.contains(&normalise_label(&label)) {
                        bad.push(format!("{rel}:{line}: [{label}] (no reference definition)"));
                    }
                    continue;
                }
                Link::Inline(line, target) | Link::Definition(line, _, target) => (line, target),
            };
            match scheme(&target).map(|s| s.to_ascii_lowercase()).as_deref() {
                Some("http" | "https" | "mailto") => continue,
                Some(_) => {
                    bad.push(format!(
                        "{rel}:{line}: {target} (a scheme that is not checked)"
                    ));
                    continue;
                }
                None => {}
            }
            if target.is_empty() {
                bad.push(format!("{rel}:{line}: (empty target)"));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else if let Some(abs) = path.strip_prefix('/') {
                root.join(percent_decode(abs))
            } else {
                file.parent().unwrap().join(percent_decode(path))
            };
            if !dest.exists() {
                bad.push(format!("{rel}:{line}: {target} (no such file)"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if !dest.to_string_lossy().ends_with(".md") {
                continue;
            }
            let dest = dest.canonicalize().unwrap();
            match docs.get(&dest) {
                Some(d) if d.anchors.contains(&percent_decode(anchor)) => {}
                Some(_) => bad.push(format!(
                    "{rel}:{line}: {target} (no heading gives #{anchor})"
                )),
                None => bad.push(format!(
                    "{rel}:{line}: {target} (not a markdown file of the repository)"
                )),
            }
        }
    }
    (bad, checked)
}

#[test]
fn every_link_between_the_docs_resolves() {
    let _group = crate::common::group(module_path!());
    let (bad, checked) = broken_links(&root());
    // The parser finds the links (README and docs/ hold about 190 in November 2026).
    assert!(checked > 150, "only {checked} links found");
    assert!(
        bad.is_empty(),
        "{} broken links:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The names of `weir lab`'s subcommands, from its help as a user sees it.
fn lab_subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["lab", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let list = help
        .split("Commands:\n")
        .nth(1)
        .expect("a Commands: section");
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|n| n != "help")
        .collect()
}

#[test]
fn lab_md_has_a_section_for_every_lab_subcommand() {
    let _group = crate::common::group(module_path!());
    let cmds = lab_subcommands();
    for name in ["fidelity", "basic", "voip", "rrul", "report"] {
        assert!(cmds.iter().any(|c| c == name), "{name} not in {cmds:?}");
    }
    let doc = read_doc(&std::fs::read_to_string(root().join("docs/lab.md")).unwrap());
    let missing: Vec<_> = cmds
        .iter()
        .filter(|c| {
            !doc.headings
                .iter()
                .any(|h| *h == format!("## weir lab {c}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/lab.md has no `## weir lab NAME` section for {missing:?}"
    );
}

#[test]
fn slug_follows_github() {
    let _group = crate::common::group(module_path!());
    let s = |h: &str| slug(&heading_text(h));
    // Anchors GitHub gives these headings of docs/lab.md.
    assert_eq!(
        s(" DUTs (`--dut`, default `kernel:bridge`)"),
        "duts---dut-default-kernelbridge"
    );
    assert_eq!(
        s(" Outputs (`--out DIR`, default `weir-lab-basic`)"),
        "outputs---out-dir-default-weir-lab-basic"
    );
    assert_eq!(
        s(" The testbed (seed 000 Fig. 6)"),
        "the-testbed-seed-000-fig-6"
    );
    assert_eq!(
        s(" Code layout (`crates/lab/src`)"),
        "code-layout-crateslabsrc"
    );
    assert_eq!(
        s(" weir lab — the namespace testbed"),
        "weir-lab--the-namespace-testbed"
    );
    // Underscores and digits stay, emphasis and links keep their text only.
    assert_eq!(
        s(" `weir_lab::stats` *and* [E-model](x.md#y)"),
        "weir_labstats-and-e-model"
    );
    assert_eq!(
        s(" Adaptive bandwidth: Postgate (`[adapt]`)"),
        "adaptive-bandwidth-postgate-adapt"
    );
    assert_eq!(s(" Title ##"), "title");
    assert_eq!(s(" Ünïcode café"), "ünïcode-café");
}

#[test]
fn repeated_headings_get_numbered_anchors() {
    let _group = crate::common::group(module_path!());
    let d = read_doc("# A\n## Checks\n### Checks\n## Checks\n## Checks-1\n");
    for a in ["a", "checks", "checks-1", "checks-2", "checks-1-1"] {
        assert!(d.anchors.contains(a), "{a} in {:?}", d.anchors);
    }
}

#[test]
fn code_is_not_links_and_links_may_wrap() {
    let _group = crate::common::group(module_path!());
    let text = "Here [a\nb](x.md#one) and `[c](y.md)` and\n\n```\n[d](z.md)\n```\n\
                ![img](p.png \"t\") [r][lab] [s][]\n\n[lab]: <q.md>\n";
    let d = read_doc(text);
    let got = links(&d.masked);
    assert_eq!(
        got,
        vec![
            Link::Definition(9, "lab".into(), "q.md".into()),
            Link::Inline(2, "x.md#one".into()),
            Link::Inline(7, "p.png".into()),
            Link::Reference(7, "lab".into()),
            Link::Reference(7, "s".into()),
        ]
    );
    // A code block's heading-like line is no heading; an indented one (4 spaces) is not either.
    let d = read_doc("```\n# no\n```\n    # nor this\n# yes\n");
    assert_eq!(d.headings, vec!["# yes"]);
}

#[test]
fn broken_links_are_named_with_file_line_and_why() {
    let _group = crate::common::group(module_path!());
    let dir = std::env::temp_dir().join(format!("weir-docs-links-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(
        dir.join("README.md"),
        "# Top\n\nSee [b](docs/b.md#real), [c](docs/b.md#gone),\n[d](docs/none.md), [e](#top), \
         [f](#nope), [g](https://x.org/#q), [h](ftp://x).\n",
    )
    .unwrap();
    std::fs::write(dir.join("docs/b.md"), "## Real\n[up](../README.md#top)\n").unwrap();
    let dir = dir.canonicalize().unwrap();
    let (bad, checked) = broken_links(&dir);
    assert_eq!(checked, 8);
    assert_eq!(
        bad,
        vec![
            "README.md:3: docs/b.md#gone (no heading gives #gone)",
            "README.md:4: docs/none.md (no such file)",
            "README.md:4: #nope (no heading gives #nope)",
            "README.md:4: ftp://x (a scheme that is not checked)",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
