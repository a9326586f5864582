//! A starting policy from what discovery saw (`weir discover --suggest-policy`): one
//! class per busy application, its assured rate in proportion to its bytes, every class
//! free to borrow up to the link, and a default class for the rest.
//!
//! * Busy: at least `min_share` of all bytes (e.g. 0.01), at most [`MAX_CLASSES`]
//!   applications, largest first; `other` and the report's "other applications" are
//!   left to the default class.
//! * Rates: the applications share [`ASSURED`] of the link in proportion to their bytes
//!   (each at least 8 kbit/s, rounded down to a kbit/s); the default class `other` gets
//!   what is left. Ceilings are the link (the classes borrow what others leave).
//! * Rules: a recognised application by `app`, a `proto/port` label by `proto` and
//!   `port` (either end's port, so both directions match), a protocol by `proto`.
//!   Application rules come first (they are the more specific).

use super::Report;
use crate::app::App;
use crate::classify::Proto;
use std::fmt::Write as _;

/// Classes suggested at most (besides the default).
pub const MAX_CLASSES: usize = 16;
/// The share of the link the suggested classes are assured between them.
pub const ASSURED: f64 = 0.9;

/// The rule conditions of a report label (`http`, `tcp/5201`, `icmp`), as TOML lines;
/// `None` for labels no rule can name.
fn conditions(label: &str) -> Option<String> {
    if App::parse(label).is_ok() {
        return Some(format!("app = \"{label}\"\n"));
    }
    if let Some((proto, port)) = label.split_once('/') {
        Proto::parse(proto).ok()?;
        let port: u16 = port.parse().ok()?;
        return Some(format!("proto = \"{proto}\"\nport = {port}\n"));
    }
    if let Some(n) = label.strip_prefix("proto-") {
        return Some(format!("proto = {}\n", n.parse::<u8>().ok()?));
    }
    Proto::parse(label).ok()?;
    Some(format!("proto = \"{label}\"\n"))
}

/// The suggested policy for a link of `link_bps`, as TOML text.
pub fn suggest(report: &Report, link_bps: u64, min_share: f64) -> String {
    let total = report.bytes.max(1) as f64;
    let mut busy: Vec<(&super::Node, String)> = report
        .apps
        .iter()
        .filter(|n| n.bytes as f64 / total >= min_share)
        .filter_map(|n| Some((n, conditions(&n.name)?)))
        .take(MAX_CLASSES)
        .collect();
    // application rules first
    busy.sort_by_key(|(n, _)| App::parse(&n.name).is_err());
    let busy_bytes: u64 = busy.iter().map(|(n, _)| n.bytes).sum();
    let kbit = |bps: f64| (bps / 1000.0).floor() as u64;
    let link_kbit = link_bps / 1000;
    let mut text = format!(
        "# Suggested by weir discover from {} bytes in {} packets: one class per \
         application with at least {:.1} % of the bytes,\n# assured {:.0} % of the link \
         between them in proportion to their bytes; each may borrow up to the link.\n\n\
         [link]\nrate = \"{link_kbit}kbit\"\ndirection = \"both\"\ndefault = \"other\"\n",
        report.bytes,
        report.packets,
        min_share * 100.0,
        ASSURED * 100.0
    );
    let mut assured = 0;
    let mut rules = String::new();
    for (n, cond) in &busy {
        let share = n.bytes as f64 / busy_bytes.max(1) as f64;
        let rate = kbit(link_bps as f64 * ASSURED * share).max(8);
        assured += rate;
        let name = class_name(&n.name);
        let _ = write!(
            text,
            "\n# {}: {} bytes ({:.1} % of all), {} sessions\n[[class]]\nname = \"{name}\"\n\
             rate = \"{rate}kbit\"\nceil = \"{link_kbit}kbit\"\n",
            n.name,
            n.bytes,
            n.bytes as f64 * 100.0 / total,
            n.sessions
        );
        let _ = write!(rules, "\n[[rule]]\nclass = \"{name}\"\n{cond}");
    }
    let rest = link_kbit.saturating_sub(assured).max(8);
    let _ = write!(
        text,
        "\n# everything else\n[[class]]\nname = \"other\"\nrate = \"{rest}kbit\"\n\
         ceil = \"{link_kbit}kbit\"\n{rules}"
    );
    text
}

/// A class name from a label: `tcp/5201` → `tcp-5201`.
fn class_name(label: &str) -> String {
    label.replace('/', "-")
}

#[cfg(test)]
mod tests {
    use super::super::{Node, Report};
    use super::*;
    use crate::policy::Policy;

    fn node(name: &str, bytes: u64) -> Node {
        Node {
            name: name.into(),
            bytes,
            packets: bytes / 1000,
            sessions: 3,
            ..Node::default()
        }
    }

    #[test]
    fn a_suggestion_compiles_and_shares_by_bytes() {
        let r = Report {
            bytes: 10_000_000,
            packets: 10_000,
            leaves: 9,
            overflowed: 0,
            apps: vec![
                node("tcp/5201", 6_000_000),
                node("http", 3_000_000),
                node("udp/53", 900_000),
                node("proto-47", 50_000), // 0.5 %: below the threshold
                node("other", 50_000),
            ],
        };
        let text = suggest(&r, 100_000_000, 0.01);
        let p = Policy::parse("suggested.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let rate = |n: &str| p.classes.iter().find(|c| c.name == n).unwrap().rate;
        // 90 Mbit/s shared 6 : 3 : 0.9
        assert_eq!(rate("tcp-5201"), 54_545_000);
        assert_eq!(rate("http"), 27_272_000);
        assert_eq!(rate("udp-53"), 8_181_000);
        assert_eq!(
            rate("other"),
            100_000_000 - 54_545_000 - 27_272_000 - 8_181_000
        );
        assert!(p.classes.iter().all(|c| c.name != "proto-47"));
        // the application rule first
        assert_eq!(p.rules[0].m.app, Some(vec![App::HTTP]));
        assert_eq!(p.rules[1].m.proto, Some(6));
    }

    #[test]
    fn conditions_of_labels() {
        assert_eq!(conditions("sip").unwrap(), "app = \"sip\"\n");
        assert_eq!(
            conditions("udp/5060").unwrap(),
            "proto = \"udp\"\nport = 5060\n"
        );
        assert_eq!(conditions("icmp").unwrap(), "proto = \"icmp\"\n");
        assert_eq!(conditions("proto-253").unwrap(), "proto = 253\n");
        assert_eq!(conditions("other applications"), None);
        assert_eq!(conditions("other"), None);
    }

    #[test]
    fn an_empty_report_still_compiles() {
        let text = suggest(&Report::default(), 10_000_000, 0.01);
        Policy::parse("empty.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}
