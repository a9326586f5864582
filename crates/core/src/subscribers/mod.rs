//! Subscriber tables: an ISP's circuits and the node tree they hang from, read from
//! LibreQoS's own files as they are ([`libreqos`]: `ShapedDevices.csv` and `network.json`).
//!
//! * A **node** (a site, a tower, an access point) has a download and an upload rate and
//!   children; `virtual` nodes group for display only: their children are promoted to the
//!   nearest real ancestor (LibreQoS's rule).
//! * A **circuit** is a subscriber's service: one or more devices (CSV rows with the same
//!   circuit id), their IPv4 and IPv6 prefixes, a parent node (none in a flat network),
//!   download and upload minimum (assured) and maximum (ceiling) rates.
//!
//! Everything is checked and reported at `file:line:col` ([`Diag`]): malformed fields,
//! min above max, an unknown parent, rows of one circuit that disagree, a prefix listed
//! twice or inside another circuit's (errors, found by
//! [`crate::classify::lpm::PrefixTable::conflicts`]); a node whose circuits' and children's
//! minimums add up to more than its rate (a warning, as LibreQoS warns).
//!
//! Sans-IO: the parsers take the files' text and names.

pub mod csv;
pub mod generate;
pub mod libreqos;

use crate::classify::IpNet;

/// A message about a place in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diag {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl std::fmt::Display for Diag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

/// A node of the tree (`network.json`).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    /// Index of the parent in the node list (`None`: under the link).
    pub parent: Option<usize>,
    pub download_bps: u64,
    pub upload_bps: u64,
    /// Display only: not shaped; its children hang from its nearest real ancestor.
    pub virtual_node: bool,
    /// Where its key is in the file.
    pub line: usize,
    pub col: usize,
}

/// A subscriber's circuit (`ShapedDevices.csv` rows with one circuit id).
#[derive(Clone, Debug, PartialEq)]
pub struct Circuit {
    pub id: String,
    pub name: String,
    /// Index of its node (after virtual nodes are skipped); `None`: under the link.
    pub node: Option<usize>,
    pub prefixes: Vec<IpNet>,
    pub download_min_bps: u64,
    pub download_max_bps: u64,
    pub upload_min_bps: u64,
    pub upload_max_bps: u64,
    /// The devices' ids, names and MACs, as written.
    pub devices: Vec<(String, String, String)>,
    /// The line of its first row.
    pub line: usize,
}

/// A checked table: nodes parents-first, circuits in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub nodes: Vec<Node>,
    pub circuits: Vec<Circuit>,
    pub warnings: Vec<Diag>,
}

impl Table {
    /// The nearest non-virtual ancestor of node `i` (itself if real); `None`: the link.
    pub fn shaped_node(&self, mut i: usize) -> Option<usize> {
        loop {
            if !self.nodes[i].virtual_node {
                return Some(i);
            }
            i = self.nodes[i].parent?;
        }
    }

    /// Totals for a summary line: (nodes shaped, circuits, prefixes).
    pub fn counts(&self) -> (usize, usize, usize) {
        let nodes = self.nodes.iter().filter(|n| !n.virtual_node).count();
        let prefixes = self.circuits.iter().map(|c| c.prefixes.len()).sum();
        (nodes, self.circuits.len(), prefixes)
    }
}
