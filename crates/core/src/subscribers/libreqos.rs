//! LibreQoS's two files, read as they are (LibreQoS v1.4–v2.0 formats; docs:
//! `configuration-advanced.md`, `src/network.example.json`):
//!
//! * `network.json`: an object of nodes by name; each has `downloadBandwidthMbps`,
//!   `uploadBandwidthMbps`, optionally `children` (an object of nodes), `virtual`
//!   (bool), `type` and `id` (kept out). `{}` is a flat network. Node names are unique
//!   across the tree (circuits name their parent by it).
//! * `ShapedDevices.csv`: a header and one row per device — `Circuit ID, Circuit Name,
//!   Device ID, Device Name, Parent Node, MAC, IPv4, IPv6, Download Min Mbps, Upload Min
//!   Mbps, Download Max Mbps, Upload Max Mbps, Comment` and an optional 14th `sqm`
//!   (accepted; weir's leaf queue is its own). IPv4 and IPv6 are comma-separated lists of
//!   addresses or prefixes. Rates are Mbit/s, decimals allowed. Rows with one circuit id
//!   are one circuit: their parent and rates must agree.

use super::csv::{self, Field};
use super::{Circuit, Diag, Node, Table};
use crate::classify::lpm::{Conflict, PrefixTable};
use crate::classify::IpNet;

const COLUMNS: [&str; 13] = [
    "circuit id",
    "circuit name",
    "device id",
    "device name",
    "parent node",
    "mac",
    "ipv4",
    "ipv6",
    "download min mbps",
    "upload min mbps",
    "download max mbps",
    "upload max mbps",
    "comment",
];

struct Diags<'a> {
    file: &'a str,
    errors: Vec<Diag>,
    warnings: Vec<Diag>,
}

impl Diags<'_> {
    fn err(&mut self, (line, col): (usize, usize), msg: impl Into<String>) {
        self.errors.push(Diag {
            file: self.file.into(),
            line,
            col,
            msg: msg.into(),
        });
    }
    fn warn(&mut self, (line, col): (usize, usize), msg: impl Into<String>) {
        self.warnings.push(Diag {
            file: self.file.into(),
            line,
            col,
            msg: msg.into(),
        });
    }
}

/// (line, col) of byte offset `at` in `text`.
fn position(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// Where the key `"name"` (followed by `:`) first appears at or after byte `from`.
fn key_position(text: &str, name: &str, from: usize) -> Option<usize> {
    let quoted = serde_json::to_string(name).ok()?;
    let mut at = from;
    while let Some(i) = text[at..].find(&quoted) {
        let end = at + i + quoted.len();
        if text[end..].trim_start().starts_with(':') {
            return Some(at + i);
        }
        at = end;
    }
    None
}

/// `network.json`: the nodes, parents first.
pub fn parse_network(file: &str, text: &str) -> Result<(Vec<Node>, Vec<Diag>), Vec<Diag>> {
    let mut d = Diags {
        file,
        errors: vec![],
        warnings: vec![],
    };
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            d.err((e.line(), e.column()), format!("not valid JSON: {e}"));
            return Err(d.errors);
        }
    };
    let Some(top) = v.as_object() else {
        d.err(
            (1, 1),
            "expected an object of nodes by name ({} for a flat network)",
        );
        return Err(d.errors);
    };
    let mut nodes = Vec::new();
    let mut seen = std::collections::HashMap::new();
    // (object, parent index, search start)
    let mut stack: Vec<(
        &serde_json::Map<String, serde_json::Value>,
        Option<usize>,
        usize,
    )> = vec![(top, None, 0)];
    while let Some((obj, parent, from)) = stack.pop() {
        for (name, node) in obj {
            let at = key_position(text, name, from).unwrap_or(from);
            let pos = position(text, at);
            if let Some(&(l, _)) = seen.get(name) {
                d.err(
                    pos,
                    format!(
                        "node '{name}' appears twice (first at line {l}); names must be unique"
                    ),
                );
                continue;
            }
            seen.insert(name.clone(), pos);
            let Some(o) = node.as_object() else {
                d.err(pos, format!("node '{name}': expected an object with downloadBandwidthMbps and uploadBandwidthMbps"));
                continue;
            };
            let rate = |key: &str, d: &mut Diags| -> u64 {
                match o.get(key).and_then(serde_json::Value::as_f64) {
                    Some(m) if m > 0.0 && m.is_finite() => (m * 1e6).round() as u64,
                    Some(m) => {
                        d.err(pos, format!("node '{name}': {key} {m} must be above 0"));
                        1
                    }
                    None => {
                        d.err(
                            pos,
                            format!("node '{name}': {key} (Mbit/s, a number) is missing"),
                        );
                        1
                    }
                }
            };
            let download_bps = rate("downloadBandwidthMbps", &mut d);
            let upload_bps = rate("uploadBandwidthMbps", &mut d);
            let virtual_node = o.get("virtual").and_then(serde_json::Value::as_bool) == Some(true);
            for k in o.keys() {
                if ![
                    "downloadBandwidthMbps",
                    "uploadBandwidthMbps",
                    "children",
                    "virtual",
                    "type",
                    "id",
                    "name",
                    "parent_site",
                ]
                .contains(&k.as_str())
                {
                    d.warn(pos, format!("node '{name}': unknown key '{k}' ignored"));
                }
            }
            let i = nodes.len();
            nodes.push(Node {
                name: name.clone(),
                parent,
                download_bps,
                upload_bps,
                virtual_node,
                line: pos.0,
                col: pos.1,
            });
            match o.get("children") {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::Object(c)) => stack.push((c, Some(i), at)),
                Some(_) => d.err(
                    pos,
                    format!("node '{name}': children must be an object of nodes by name"),
                ),
            }
        }
    }
    if d.errors.is_empty() {
        Ok((nodes, d.warnings))
    } else {
        Err(d.errors)
    }
}

fn mbps(d: &mut Diags, f: &Field, what: &str) -> Option<u64> {
    let t = f.text.trim();
    match t.parse::<f64>() {
        Ok(m) if m > 0.0 && m.is_finite() => Some((m * 1e6).round() as u64),
        _ => {
            d.err(
                (f.line, f.col),
                format!("{what}: '{t}' is not a rate in Mbit/s above 0 (e.g. 100 or 2.5)"),
            );
            None
        }
    }
}

/// The prefixes of an IPv4 or IPv6 field (a comma-separated list; may be empty).
fn prefixes(d: &mut Diags, f: &Field, v6: bool) -> Vec<IpNet> {
    let mut out = Vec::new();
    for item in f.text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match IpNet::parse(item) {
            Ok(n) if n.is_ipv6() == v6 => out.push(n),
            Ok(n) => d.err(
                (f.line, f.col),
                format!(
                    "{n} is an {} prefix in the {} column",
                    if v6 { "IPv4" } else { "IPv6" },
                    if v6 { "IPv6" } else { "IPv4" }
                ),
            ),
            Err(e) => d.err((f.line, f.col), e.to_string()),
        }
    }
    out
}

/// `ShapedDevices.csv` against `nodes` (from [`parse_network`]): the checked table.
pub fn parse_shaped_devices(file: &str, text: &str, nodes: Vec<Node>) -> Result<Table, Vec<Diag>> {
    let mut d = Diags {
        file,
        errors: vec![],
        warnings: vec![],
    };
    let recs = match csv::records(text) {
        Ok(r) => r,
        Err(u) => {
            d.err((u.line, u.col), "a quoted field never closes");
            return Err(d.errors);
        }
    };
    let Some((head, rows)) = recs.split_first() else {
        d.err(
            (1, 1),
            format!("empty: expected a header ({})", COLUMNS.join(", ")),
        );
        return Err(d.errors);
    };
    for (i, want) in COLUMNS.iter().enumerate() {
        let got = head
            .fields
            .get(i)
            .map(|f| f.text.trim().to_ascii_lowercase());
        if got.as_deref() != Some(want) {
            let pos = head
                .fields
                .get(i)
                .map_or((head.line, 1), |f| (f.line, f.col));
            d.err(
                pos,
                format!(
                    "header column {} should be '{want}', found '{}'",
                    i + 1,
                    got.unwrap_or_default()
                ),
            );
            return Err(d.errors);
        }
    }
    let width = if head
        .fields
        .get(13)
        .is_some_and(|f| f.text.trim().eq_ignore_ascii_case("sqm"))
    {
        14
    } else {
        13
    };
    let by_name: std::collections::HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut circuits: Vec<Circuit> = Vec::new();
    let mut by_id: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    // every prefix with its circuit and its field's place
    let mut all: Vec<(IpNet, usize)> = Vec::new();
    let mut places: Vec<(usize, (usize, usize))> = Vec::new();
    for r in rows {
        if r.fields.len() != width && !(width == 13 && r.fields.len() == 14) {
            d.err(
                (r.line, 1),
                format!("expected {width} fields, found {}", r.fields.len()),
            );
            continue;
        }
        let f = &r.fields;
        let id = f[0].text.trim();
        if id.is_empty() || id.contains('#') {
            d.err(
                (f[0].line, f[0].col),
                format!("Circuit ID '{id}': required, without '#'"),
            );
            continue;
        }
        let parent = f[4].text.trim();
        let node = if parent.is_empty() {
            None
        } else if let Some(&i) = by_name.get(parent) {
            Some(i)
        } else {
            d.err(
                (f[4].line, f[4].col),
                format!("Parent Node '{parent}' is not a node of the network file"),
            );
            continue;
        };
        let v4 = prefixes(&mut d, &f[6], false);
        let v6 = prefixes(&mut d, &f[7], true);
        if v4.is_empty()
            && v6.is_empty()
            && f[6].text.trim().is_empty()
            && f[7].text.trim().is_empty()
        {
            d.err(
                (f[6].line, f[6].col),
                format!("circuit '{id}': a device needs at least one IPv4 or IPv6 address"),
            );
        }
        let rates = [
            mbps(&mut d, &f[8], "Download Min Mbps"),
            mbps(&mut d, &f[9], "Upload Min Mbps"),
            mbps(&mut d, &f[10], "Download Max Mbps"),
            mbps(&mut d, &f[11], "Upload Max Mbps"),
        ];
        let [Some(dmin), Some(umin), Some(dmax), Some(umax)] = rates else {
            continue;
        };
        for (min, max, fi, what) in [(dmin, dmax, 8, "Download"), (umin, umax, 9, "Upload")] {
            if min > max {
                d.err(
                    (f[fi].line, f[fi].col),
                    format!(
                        "{what} Min {} Mbit/s is above {what} Max {} Mbit/s",
                        min as f64 / 1e6,
                        max as f64 / 1e6
                    ),
                );
            }
        }
        let device = (
            f[2].text.trim().into(),
            f[3].text.trim().into(),
            f[5].text.trim().into(),
        );
        let k = match by_id.get(id) {
            Some(&k) => {
                let c = &circuits[k];
                if c.node != node
                    || (
                        c.download_min_bps,
                        c.upload_min_bps,
                        c.download_max_bps,
                        c.upload_max_bps,
                    ) != (dmin, umin, dmax, umax)
                {
                    d.err((r.line, 1), format!("circuit '{id}': this device's parent node or rates differ from the circuit's first row (line {})", c.line));
                    continue;
                }
                k
            }
            None => {
                by_id.insert(id.into(), circuits.len());
                circuits.push(Circuit {
                    id: id.into(),
                    name: f[1].text.trim().into(),
                    node,
                    prefixes: vec![],
                    download_min_bps: dmin,
                    download_max_bps: dmax,
                    upload_min_bps: umin,
                    upload_max_bps: umax,
                    devices: vec![],
                    line: r.line,
                });
                circuits.len() - 1
            }
        };
        circuits[k].devices.push(device);
        for (n, fi) in v4
            .into_iter()
            .map(|n| (n, 6))
            .chain(v6.into_iter().map(|n| (n, 7)))
        {
            places.push((k, (f[fi].line, f[fi].col)));
            all.push((n, k));
            circuits[k].prefixes.push(n);
        }
    }
    let entries: Vec<(IpNet, u32)> = all.iter().map(|&(n, k)| (n, k as u32)).collect();
    for c in PrefixTable::conflicts(&entries) {
        let (at, other) = (c.at(), c.other());
        let (n, m) = (all[at].0, all[other].0);
        let ((ck, pos), (ek, epos)) = (places[at], places[other]);
        let what = match c {
            Conflict::Duplicate { .. } => "listed again",
            Conflict::Overlap { .. } => "lies inside",
        };
        let msg = format!(
            "{n} (circuit '{}') {what} {m} (circuit '{}', line {}): a packet must belong to one circuit",
            circuits[ck].id, circuits[ek].id, epos.0
        );
        d.err(pos, msg);
    }
    let mut table = Table {
        nodes,
        circuits,
        warnings: std::mem::take(&mut d.warnings),
    };
    // circuits under a virtual node hang from its nearest real ancestor
    for i in 0..table.circuits.len() {
        if let Some(n) = table.circuits[i].node {
            table.circuits[i].node = table.shaped_node(n);
        }
    }
    warn_oversubscribed(&mut table, file);
    if d.errors.is_empty() {
        Ok(table)
    } else {
        Err(d.errors)
    }
}

/// A node whose circuits' and real children's minimums add up to more than its rate:
/// a warning per direction (the circuits still get their maximums when there is room).
fn warn_oversubscribed(t: &mut Table, file: &str) {
    let n = t.nodes.len();
    let (mut down, mut up) = (vec![0u64; n], vec![0u64; n]);
    for c in &t.circuits {
        if let Some(i) = c.node {
            down[i] += c.download_min_bps;
            up[i] += c.upload_min_bps;
        }
    }
    // children come after their parents: backwards, each subtree's sum is complete
    for i in (0..n).rev() {
        if t.nodes[i].virtual_node {
            continue;
        }
        if let Some(p) = t.nodes[i].parent.and_then(|p| t.shaped_node(p)) {
            down[p] += t.nodes[i].download_bps.min(down[i].max(1));
            up[p] += t.nodes[i].upload_bps.min(up[i].max(1));
        }
    }
    let mut w = Vec::new();
    for (i, node) in t.nodes.iter().enumerate() {
        for (sum, rate, what) in [
            (down[i], node.download_bps, "download"),
            (up[i], node.upload_bps, "upload"),
        ] {
            if sum > rate {
                w.push(Diag {
                    file: file.into(),
                    line: node.line,
                    col: node.col,
                    msg: format!(
                        "node '{}': its circuits' and children's {what} minimums add up to {} Mbit/s, more than its {} Mbit/s",
                        node.name,
                        sum as f64 / 1e6,
                        rate as f64 / 1e6
                    ),
                });
            }
        }
    }
    t.warnings.extend(w);
}

#[cfg(test)]
mod tests;
