//! `[subscribers]`: a subscriber table (LibreQoS's `ShapedDevices.csv` and `network.json`,
//! [`crate::subscribers`]) → classes under the link or under `parent`.
//!
//! * Each node of the tree (not `virtual`) is an inner class; each circuit is a leaf class
//!   under its node (or under the attach point in a flat network). Nodes with no circuit
//!   beneath them are left out (they would be leaves no traffic reaches).
//! * Directions: upload is outbound (`rate`, `ceil`), download inbound (`inbound_rate`,
//!   `inbound_ceil`), as `weir run` calls its interfaces (LAN side inside).
//! * A circuit is assured its minimum and may borrow up to its maximum. A node's ceiling
//!   is its bandwidth; it is assured what its children are (the sum of their assured
//!   rates), at most its bandwidth. Where the children's minimums add up to more than a
//!   node can assure (LibreQoS's oversubscription, a warning there), or the table's top
//!   more than the attach point has left after its other children, each child is assured
//!   the same fraction of its minimum (warned, per node and direction): weir's assured
//!   rates always fit in their parent's, as everywhere in a policy.
//! * Circuit leaves take the modern leaf queue (the policy's `technique` when it is
//!   `fq_cobalt` or `fq_codel`, else `fq_cobalt`: a seed technique's per-flow queue keeps
//!   65,536 buckets a leaf), built only while the circuit has traffic
//!   ([`crate::queue::lazy`]).
//! * Class names: the node's name, the circuit's id; a name already taken (by a written
//!   class, a node, another circuit) is an error at its place in the table's file.
//! * The classifier looks up every circuit's prefixes ([`PrefixTable`]) before the rules.
//!
//! Cost: linear in the table (the 10,000-circuit table of `scripts/subscribers-table`
//! compiles in well under `weir check`'s 2 s goal; see docs/subscribers.md).

use super::super::raw::{RawSubscribers, Src};
use super::super::{
    ClassDef, DirRates, PolicyError, SubscriberClass, Subscribers, Technique, Written,
};
use super::burst_for;
use super::emulators::read_named;
use crate::classify::lpm::{Nesting, PrefixTable};
use crate::subscribers::{libreqos, Diag, Table};
use crate::units::fmt_rate;
use std::collections::HashSet;
use std::ops::Range;
use toml::Spanned;

/// Most diagnostics of the table's files reported (a file of garbage would otherwise
/// print one per row); the rest are counted in one more line.
const MAX_DIAGS: usize = 50;

/// Upload (outbound) and download (inbound), in that order.
const DIRS: [&str; 2] = ["upload", "download"];

/// A table read and checked, before it becomes classes.
pub(super) struct Loaded {
    table: Table,
    shaped_devices: String,
    network: Option<String>,
    /// The `[subscribers]` table in the policy, where its classes' messages point.
    span: Range<usize>,
}

/// `diags` as errors (or warnings) of the policy, the first [`MAX_DIAGS`] of them.
fn report(src: &mut Src<'_>, diags: Vec<Diag>, errors: bool) {
    let n = diags.len();
    let to = if errors {
        &mut src.errors
    } else {
        &mut src.warnings
    };
    let file = diags.first().map(|d| d.file.clone()).unwrap_or_default();
    to.extend(diags.into_iter().take(MAX_DIAGS).map(|d| PolicyError {
        file: d.file,
        line: d.line,
        col: d.col,
        msg: d.msg,
    }));
    if n > MAX_DIAGS {
        to.push(PolicyError {
            file,
            line: 0,
            col: 0,
            msg: format!(
                "and {} more {} not shown",
                n - MAX_DIAGS,
                if errors { "errors" } else { "warnings" }
            ),
        });
    }
}

/// Read and check the table's files (relative to the policy's directory).
pub(super) fn load(src: &mut Src<'_>, raw: &Spanned<RawSubscribers>) -> Option<Loaded> {
    let r = raw.get_ref();
    let _ = &r.description;
    let (network, nodes) = match &r.network {
        None => (None, vec![]),
        Some(n) => {
            let (name, text) = read_named(src, "network", n)?;
            match libreqos::parse_network(&name, &text) {
                Ok((nodes, warnings)) => {
                    report(src, warnings, false);
                    (Some(name), nodes)
                }
                Err(e) => {
                    report(src, e, true);
                    return None;
                }
            }
        }
    };
    let (shaped_devices, text) = read_named(src, "shaped_devices", &r.shaped_devices)?;
    match libreqos::parse_shaped_devices(&shaped_devices, &text, nodes) {
        Ok(mut table) => {
            report(src, std::mem::take(&mut table.warnings), false);
            Some(Loaded {
                table,
                shaped_devices,
                network,
                span: raw.span(),
            })
        }
        Err(e) => {
            report(src, e, true);
            None
        }
    }
}

/// A class of the table: `template` (the link's definition) renamed and re-rated.
fn class_def(
    template: &ClassDef,
    name: &str,
    parent: usize,
    rates: [(u64, u64); 2],
    kind: SubscriberClass,
    line: usize,
    mtu: u32,
) -> ClassDef {
    let [(rate, ceil), (in_rate, in_ceil)] = rates;
    ClassDef {
        name: name.to_string(),
        parent: Some(parent),
        rate,
        ceil,
        prio: 0,
        quantum: 0,
        burst: burst_for(rate, mtu),
        cburst: burst_for(ceil, mtu),
        leaf: kind == SubscriberClass::Circuit,
        written: Written::default(),
        mss: None,
        tcr: None,
        admission: None,
        meter: None,
        line,
        inbound: Some(DirRates {
            rate: in_rate,
            ceil: in_ceil,
            burst: burst_for(in_rate, mtu),
            cburst: burst_for(in_ceil, mtu),
            quantum: 0,
        }),
        subscriber: Some(kind),
        ..template.clone()
    }
}

/// `x × num / den`, rounded down, at least 1 (an assured rate is never 0).
fn scale(x: u64, num: u64, den: u64) -> u64 {
    if num >= den {
        return x;
    }
    ((x as u128 * num as u128 / den.max(1) as u128) as u64).max(1)
}

/// Append the table's classes under `attach` (nodes parents first, then circuits) and
/// return the classifier's table. `classes` already holds every written class with its
/// inbound rates.
pub(super) fn add_classes(
    src: &mut Src<'_>,
    (classes, spans): (&mut Vec<ClassDef>, &mut Vec<Range<usize>>),
    l: Loaded,
    attach: usize,
    (technique, mtu): (Technique, u32),
) -> Option<Subscribers> {
    let t = &l.table;
    let nn = t.nodes.len();
    let shaped_parent = |i: usize| t.nodes[i].parent.and_then(|p| t.shaped_node(p));
    let bw = |i: usize| [t.nodes[i].upload_bps, t.nodes[i].download_bps];
    let mins = |c: &crate::subscribers::Circuit| [c.upload_min_bps, c.download_min_bps];

    // what each node would assure: the sum of its children's, at most its bandwidth
    // (nodes come parents first, so children are summed walking backwards)
    let mut used = vec![false; nn];
    let mut sum = vec![[0u64; 2]; nn];
    let mut top = [0u64; 2];
    for c in &t.circuits {
        let s = match c.node {
            Some(n) => {
                used[n] = true;
                &mut sum[n]
            }
            None => &mut top,
        };
        for (d, m) in mins(c).into_iter().enumerate() {
            s[d] += m;
        }
    }
    let mut want = vec![[0u64; 2]; nn];
    for i in (0..nn).rev() {
        if !used[i] || t.nodes[i].virtual_node {
            continue;
        }
        for d in 0..2 {
            want[i][d] = sum[i][d].min(bw(i)[d]);
        }
        let s = match shaped_parent(i) {
            Some(p) => {
                used[p] = true;
                &mut sum[p]
            }
            None => &mut top,
        };
        for d in 0..2 {
            s[d] += want[i][d];
        }
    }

    // what the attach point has left after its written children
    let attach_rates = {
        let a = &classes[attach];
        [a.rate, a.inbound.map_or(a.rate, |d| d.rate)]
    };
    let mut taken = [0u64; 2];
    for c in classes.iter().filter(|c| c.parent == Some(attach)) {
        taken[0] += c.rate;
        taken[1] += c.inbound.map_or(c.rate, |d| d.rate);
    }
    let attach_name = classes[attach].name.clone();
    let mut avail = [0u64; 2];
    for d in 0..2 {
        avail[d] = attach_rates[d].saturating_sub(taken[d]);
        if avail[d] == 0 {
            src.err(
                l.span.clone(),
                format!(
                    "[subscribers]: '{attach_name}' has no {} rate left to assure the table's circuits: its other children take all {}",
                    DIRS[d],
                    fmt_rate(attach_rates[d])
                ),
            );
            return None;
        }
    }
    let warn_scaled = |src: &mut Src<'_>, name: &str, d: usize, sum: u64, have: u64| {
        if sum > have {
            src.warn(
                l.span.clone(),
                format!(
                    "[subscribers]: the {} minimums under '{name}' add up to {}, more than the {} it can assure: each is assured {:.1} % of its minimum",
                    DIRS[d],
                    fmt_rate(sum),
                    fmt_rate(have),
                    have as f64 * 100.0 / sum as f64
                ),
            );
        }
    };
    for d in 0..2 {
        warn_scaled(src, &attach_name, d, top[d], avail[d]);
    }

    let mut names: HashSet<String> = classes.iter().map(|c| c.name.clone()).collect();
    let mut taken_name = |src: &mut Src<'_>,
                          name: &str,
                          (file, line, col): (&str, usize, usize)| {
        let bad = name.is_empty()
            || name
                .chars()
                .any(|ch| ch.is_control() || ch == '"' || ch == '\\');
        if bad {
            src.errors.push(PolicyError {
                file: file.into(),
                line,
                col,
                msg: format!("'{name}' cannot name a class: no quotes, backslashes or control characters, not empty"),
            });
        } else if !names.insert(name.to_string()) {
            src.errors.push(PolicyError {
                file: file.into(),
                line,
                col,
                msg: format!("'{name}' is already the name of a class (a class of the policy, a node or another circuit); class names must be unique"),
            });
        }
    };
    let template = &classes[0].clone();
    let net_file = l.network.as_deref().unwrap_or("network.json");
    let errors_before = src.errors.len();

    // nodes, parents first; each assured its `want` scaled by its parent's shortfall
    let mut class_of = vec![usize::MAX; nn];
    let mut assured = vec![[0u64; 2]; nn];
    for i in 0..nn {
        let n = &t.nodes[i];
        if !used[i] || n.virtual_node {
            continue;
        }
        taken_name(src, &n.name, (net_file, n.line, n.col));
        let (parent, have, total) = match shaped_parent(i) {
            Some(p) => (class_of[p], assured[p], sum[p]),
            None => (attach, avail, top),
        };
        let mut rates = [(0, 0); 2];
        for d in 0..2 {
            assured[i][d] = scale(want[i][d], have[d], total[d]);
            rates[d] = (assured[i][d], bw(i)[d]);
            warn_scaled(src, &n.name, d, sum[i][d], assured[i][d]);
        }
        class_of[i] = classes.len();
        classes.push(class_def(
            template,
            &n.name,
            parent,
            rates,
            SubscriberClass::Node,
            n.line,
            mtu,
        ));
        spans.push(l.span.clone());
    }

    // circuits under their nodes, with the modern leaf queue
    let leaf_technique = match technique {
        Technique::FqCodel | Technique::FqCobalt => technique,
        _ => Technique::DEFAULT,
    };
    let mut entries = Vec::with_capacity(t.counts().2);
    for c in &t.circuits {
        taken_name(src, &c.id, (&l.shaped_devices, c.line, 1));
        let (parent, have, total) = match c.node {
            Some(n) => (class_of[n], assured[n], sum[n]),
            None => (attach, avail, top),
        };
        let maxes = [c.upload_max_bps, c.download_max_bps];
        let mut rates = [(0, 0); 2];
        for (d, m) in mins(c).into_iter().enumerate() {
            let r = scale(m, have[d], total[d]);
            rates[d] = (r, maxes[d].max(r));
        }
        let k = classes.len();
        let mut def = class_def(
            template,
            &c.id,
            parent,
            rates,
            SubscriberClass::Circuit,
            c.line,
            mtu,
        );
        def.apply(leaf_technique, false);
        classes.push(def);
        spans.push(l.span.clone());
        entries.extend(c.prefixes.iter().map(|&p| (p, k as u32)));
    }
    if src.errors.len() > errors_before {
        return None;
    }
    let table = match PrefixTable::build(&entries, Nesting::Reject) {
        Ok(t) => t,
        Err(e) => {
            src.err(l.span.clone(), format!("[subscribers]: {e}"));
            return None;
        }
    };
    Some(Subscribers {
        table: std::sync::Arc::new(table),
        entries: std::sync::Arc::new(entries),
        shaped_devices: l.shaped_devices,
        network: l.network,
        nodes: class_of.iter().filter(|&&k| k != usize::MAX).count(),
        circuits: t.circuits.len(),
        prefixes: t.counts().2,
    })
}
