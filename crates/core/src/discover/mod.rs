//! Traffic discovery (PacketShaper's "auto traffic discovery", seed 000 Table 2): what
//! crosses the device, as a tree of applications and their servers, with bytes, packets,
//! sessions and the current rate — the starting point of a policy.
//!
//! * A connection's **label** is its application when recognised
//!   ([`crate::app::App`]: by its first bytes, or announced by a control channel), else
//!   its protocol and the responder's port (`tcp/5201`), else its protocol (`icmp`).
//!   Frames of no connection (fragments after the first, malformed IP) are `other`.
//! * A **leaf** is a (label, server) pair, the server being the connection's responder
//!   address. Each packet adds its frame length to its connection's leaf: one index into
//!   a vector, no lookup. A connection is counted once, as a session, on its leaf; when
//!   it is recognised later (its first payload), its bytes, packets and session move to
//!   the new label's leaf, so every byte ends up under the application it belongs to.
//! * Bounds: at most [`MAX_LEAVES`] leaves. When full, a new server of a known label
//!   goes to that label's "other servers" leaf if it has one, else everything new goes to
//!   the `other` leaf (counted: `overflowed`). Leaves are never removed: the tree covers
//!   everything since the device started.
//! * The rate of each leaf is its bytes between two [`Discovery::tick`]s over the time
//!   between them (the statistics publisher ticks about once a second).
//! * [`Discovery::report`] sums leaves per label, sorts labels and servers by bytes and
//!   keeps the top ones (the rest summed into one "other" entry each), so the report is
//!   bounded whatever the traffic; totals are exact. [`suggest`] turns a report into a
//!   starting policy.

pub mod suggest;

use crate::app::App;
use crate::classify::Proto;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

/// Leaves (label, server) kept at most.
pub const MAX_LEAVES: usize = 4096;
/// The leaf of frames of no connection and of everything past [`MAX_LEAVES`].
pub const OTHER: u32 = 0;

/// What a connection is, for discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// A recognised application ([`App`] tag).
    App(u8),
    /// Protocol (TCP, UDP, SCTP, ...) and the responder's port.
    Port(u8, u16),
    /// An IP protocol without ports.
    Proto(u8),
    Other,
}

impl Label {
    /// The label of a connection of `proto` whose responder port is `port` and whose
    /// application is `app` (0: not known).
    pub fn of(app: u8, proto: u8, port: Option<u16>) -> Label {
        match (app, port) {
            (App::NONE, Some(p)) => Label::Port(proto, p),
            (App::NONE, None) => Label::Proto(proto),
            (a, _) => Label::App(a),
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = |p: u8| Proto::name(p).map_or(format!("proto-{p}"), str::to_string);
        match *self {
            Label::App(a) => f.write_str(App::name(a)),
            Label::Port(p, port) => write!(f, "{}/{port}", proto(p)),
            Label::Proto(p) => f.write_str(&proto(p)),
            Label::Other => f.write_str("other"),
        }
    }
}

#[derive(Clone, Debug)]
struct Leaf {
    label: Label,
    /// `None`: the label's "other servers" (or the `other` leaf).
    server: Option<IpAddr>,
    bytes: u64,
    packets: u64,
    sessions: u64,
    /// Bytes at the last tick, and the rate since the tick before it (bit/s).
    at_tick: u64,
    rate_bps: f64,
}

/// See the module comment.
#[derive(Clone, Debug)]
pub struct Discovery {
    leaves: Vec<Leaf>,
    index: HashMap<(Label, Option<IpAddr>), u32>,
    last_tick: Option<Instant>,
    overflowed: u64,
}

impl Default for Discovery {
    fn default() -> Self {
        Self::new()
    }
}

impl Discovery {
    pub fn new() -> Discovery {
        let mut d = Discovery {
            leaves: Vec::new(),
            index: HashMap::new(),
            last_tick: None,
            overflowed: 0,
        };
        d.insert(Label::Other, None);
        d
    }

    fn insert(&mut self, label: Label, server: Option<IpAddr>) -> u32 {
        let i = self.leaves.len() as u32;
        self.leaves.push(Leaf {
            label,
            server,
            bytes: 0,
            packets: 0,
            sessions: 0,
            at_tick: 0,
            rate_bps: 0.0,
        });
        self.index.insert((label, server), i);
        i
    }

    /// The leaf of `label` and `server`, made if new (see the module comment for when
    /// it is full).
    pub fn leaf(&mut self, label: Label, server: Option<IpAddr>) -> u32 {
        if let Some(&i) = self.index.get(&(label, server)) {
            return i;
        }
        if self.leaves.len() < MAX_LEAVES {
            return self.insert(label, server);
        }
        self.overflowed += 1;
        self.index.get(&(label, None)).copied().unwrap_or(OTHER)
    }

    /// A new connection on `leaf`.
    pub fn session(&mut self, leaf: u32) {
        self.leaves[leaf as usize].sessions += 1;
    }

    /// A packet of `bytes` on `leaf`.
    #[inline]
    pub fn count(&mut self, leaf: u32, bytes: u64) {
        let l = &mut self.leaves[leaf as usize];
        l.bytes += bytes;
        l.packets += 1;
    }

    /// A connection that had `bytes` and `packets` on leaf `from` belongs to `to`.
    pub fn relabel(&mut self, from: u32, to: u32, bytes: u64, packets: u64) {
        if from == to {
            return;
        }
        let f = &mut self.leaves[from as usize];
        let (bytes, packets) = (bytes.min(f.bytes), packets.min(f.packets));
        f.bytes -= bytes;
        f.packets -= packets;
        f.sessions = f.sessions.saturating_sub(1);
        let t = &mut self.leaves[to as usize];
        t.bytes += bytes;
        t.packets += packets;
        t.sessions += 1;
    }

    /// Update every leaf's rate from the bytes since the last tick.
    pub fn tick(&mut self, now: Instant) {
        let secs = self
            .last_tick
            .map(|t| (now - t).as_secs_f64())
            .filter(|&s| s > 0.0);
        for l in &mut self.leaves {
            if let Some(s) = secs {
                l.rate_bps = (l.bytes - l.at_tick.min(l.bytes)) as f64 * 8.0 / s;
            }
            l.at_tick = l.bytes;
        }
        self.last_tick = Some(now);
    }

    /// The tree: at most `top_apps` labels with at most `top_servers` servers each (the
    /// rest summed into "other" entries), largest first.
    pub fn report(&self, top_apps: usize, top_servers: usize) -> Report {
        let mut apps: HashMap<Label, Vec<&Leaf>> = HashMap::new();
        for l in self
            .leaves
            .iter()
            .filter(|l| l.packets > 0 || l.sessions > 0)
        {
            apps.entry(l.label).or_default().push(l);
        }
        let node = |name: String, ls: &[&Leaf]| Node {
            name,
            bytes: ls.iter().map(|l| l.bytes).sum(),
            packets: ls.iter().map(|l| l.packets).sum(),
            sessions: ls.iter().map(|l| l.sessions).sum(),
            rate_bps: ls.iter().map(|l| l.rate_bps).sum(),
            servers: Vec::new(),
        };
        let mut out: Vec<Node> = apps
            .into_iter()
            .map(|(label, mut ls)| {
                ls.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.server.cmp(&b.server)));
                let mut n = node(label.to_string(), &ls);
                let (named, rest): (Vec<&Leaf>, Vec<&Leaf>) =
                    ls.iter().partition(|l| l.server.is_some());
                let keep = named.len().min(top_servers);
                n.servers = named[..keep]
                    .iter()
                    .map(|l| node(l.server.unwrap().to_string(), &[l]))
                    .collect();
                let others: Vec<&Leaf> = named[keep..].iter().chain(&rest).copied().collect();
                if !others.is_empty() {
                    n.servers.push(node("other servers".into(), &others));
                }
                n
            })
            .collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        let mut r = Report {
            bytes: out.iter().map(|n| n.bytes).sum(),
            packets: out.iter().map(|n| n.packets).sum(),
            leaves: self.leaves.len(),
            overflowed: self.overflowed,
            apps: out,
        };
        r.truncate(top_apps, usize::MAX);
        r
    }
}

/// One application (or server) in a [`Report`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The label (`http`, `tcp/5201`) or the server's address.
    pub name: String,
    pub bytes: u64,
    pub packets: u64,
    /// Connections.
    pub sessions: u64,
    /// Over the last second or so, bit/s.
    pub rate_bps: f64,
    /// Servers (an application's), largest first; empty for a server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<Node>,
}

/// What [`Discovery::report`] gives (`weir discover --json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Frame bytes and packets seen in all.
    pub bytes: u64,
    pub packets: u64,
    /// Leaves (label, server) in the tree, and new ones that did not fit.
    pub leaves: usize,
    pub overflowed: u64,
    /// Applications, largest first.
    pub apps: Vec<Node>,
}

impl Report {
    /// Keep at most `apps` applications and `servers` servers each, summing the rest
    /// into "other applications" / "other servers" entries (totals unchanged).
    pub fn truncate(&mut self, apps: usize, servers: usize) {
        fn fold(into: &mut Node, from: &Node) {
            into.bytes += from.bytes;
            into.packets += from.packets;
            into.sessions += from.sessions;
            into.rate_bps += from.rate_bps;
        }
        let other = |name: &str, rest: Vec<Node>| {
            let mut o = Node {
                name: name.into(),
                ..Node::default()
            };
            rest.iter().for_each(|r| fold(&mut o, r));
            o
        };
        for a in &mut self.apps {
            if a.servers.len() > servers {
                let rest = a.servers.split_off(servers);
                a.servers.push(other("other servers", rest));
            }
        }
        if self.apps.len() > apps {
            let rest = self.apps.split_off(apps);
            self.apps.push(other("other applications", rest));
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::units::fmt_rate;
        writeln!(
            f,
            "{:<28} {:>14} {:>10} {:>9} {:>7} {:>12}",
            "application / server", "bytes", "packets", "sessions", "share", "rate"
        )?;
        let total = self.bytes.max(1) as f64;
        let line = |f: &mut fmt::Formatter<'_>, n: &Node, indent: &str| {
            writeln!(
                f,
                "{:<28} {:>14} {:>10} {:>9} {:>6.1}% {:>12}",
                format!("{indent}{}", n.name),
                n.bytes,
                n.packets,
                n.sessions,
                n.bytes as f64 * 100.0 / total,
                fmt_rate(n.rate_bps as u64)
            )
        };
        for a in &self.apps {
            line(f, a, "")?;
            for s in &a.servers {
                line(f, s, "  ")?;
            }
        }
        write!(
            f,
            "total {} bytes, {} packets; {} leaves{}",
            self.bytes,
            self.packets,
            self.leaves,
            if self.overflowed > 0 {
                format!(
                    ", {} new ones did not fit (counted as other)",
                    self.overflowed
                )
            } else {
                String::new()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn counts_move_with_a_relabel_and_sum_per_application() {
        let mut d = Discovery::new();
        let port = d.leaf(Label::of(0, 6, Some(80)), ip("10.0.0.2"));
        d.session(port);
        d.count(port, 74); // SYN
        d.count(port, 74); // SYN-ACK
        let http = d.leaf(Label::of(App::HTTP, 6, Some(80)), ip("10.0.0.2"));
        d.count(port, 200); // the request, counted before it is read
        d.relabel(port, http, 348, 3);
        d.count(http, 1514);
        let other_server = d.leaf(Label::App(App::HTTP), ip("10.0.0.3"));
        d.session(other_server);
        d.count(other_server, 100);
        let r = d.report(10, 10);
        assert_eq!(r.apps.len(), 1, "{r:?}");
        let a = &r.apps[0];
        assert_eq!(
            (a.name.as_str(), a.bytes, a.packets, a.sessions),
            ("http", 1962, 5, 2)
        );
        assert_eq!(a.servers[0].name, "10.0.0.2");
        assert_eq!(a.servers[0].bytes, 1862);
        assert_eq!(r.bytes, 1962);
    }

    #[test]
    fn labels_print_as_a_user_reads_them() {
        assert_eq!(Label::of(0, 6, Some(5201)).to_string(), "tcp/5201");
        assert_eq!(Label::of(0, 17, Some(53)).to_string(), "udp/53");
        assert_eq!(Label::of(0, 1, None).to_string(), "icmp");
        assert_eq!(Label::of(0, 47, None).to_string(), "gre");
        assert_eq!(Label::of(0, 253, None).to_string(), "proto-253");
        assert_eq!(
            Label::of(App::FTP_DATA, 6, Some(20)).to_string(),
            "ftp-data"
        );
    }

    #[test]
    fn rates_between_ticks() {
        let mut d = Discovery::new();
        let l = d.leaf(Label::Port(17, 9), ip("10.0.0.2"));
        d.tick(Instant::ZERO);
        d.count(l, 125_000);
        d.tick(Instant::ZERO + Duration::from_millis(500));
        // 125 kB in half a second: 2 Mbit/s
        assert_eq!(d.report(4, 4).apps[0].rate_bps, 2e6);
    }

    #[test]
    fn bounded_with_exact_totals() {
        let mut d = Discovery::new();
        // one label's "other servers" leaf exists before the tree fills
        let rest = d.leaf(Label::Port(6, 443), None);
        let mut n = 0u64;
        for i in 0..(MAX_LEAVES as u32 + 100) {
            let label = Label::Port(6, if i % 2 == 0 { 443 } else { (i % 3000) as u16 });
            let server = Some(IpAddr::from(i.to_be_bytes()));
            let l = d.leaf(label, server);
            d.session(l);
            d.count(l, 100);
            n += 100;
        }
        assert!(d.leaves.len() <= MAX_LEAVES);
        assert!(
            d.leaves[rest as usize].bytes > 0,
            "443's overflow went to its own leaf"
        );
        let r = d.report(5, 3);
        assert_eq!(r.bytes, n);
        assert_eq!(r.apps.len(), 6);
        assert_eq!(r.apps[5].name, "other applications");
        assert!(r.overflowed > 0);
        let https = &r.apps[0];
        assert_eq!(https.name, "tcp/443");
        assert_eq!(https.servers.len(), 4);
        assert_eq!(
            https.servers.iter().map(|s| s.bytes).sum::<u64>(),
            https.bytes
        );
        assert!(r.to_string().contains("did not fit"));
    }
}
