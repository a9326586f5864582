//! The packet classifier: an ordered list of rules, first match wins, no match → the
//! default class (seed 000 step 3: group a subnet/application/protocol into a class).
//!
//! * [`Fields`] is what the classifier looks at, extracted from a frame by the caller
//!   (VLAN id, ethertype, IP addresses, protocol, ports, DSCP). It is `Copy` and has no
//!   heap data; absent fields are `None` (an ARP frame has no addresses, an ICMP packet no
//!   ports, a fragment after the first no ports either).
//! * [`Match`] is one rule's condition: every field optional, AND across fields, OR within
//!   a field's list. An empty `Match` matches every frame. A condition on a field the packet
//!   does not have never matches (a port condition never matches ICMP; a VLAN condition
//!   never matches an untagged frame).
//! * [`Classifier::classify`] walks the rules in order, counts the hit (packets, bytes) on
//!   the winning rule or on the default, and returns `(class, rule index)`, with
//!   `u16::MAX` as the rule index of the default. Matching allocates nothing; address
//!   prefixes are stored as pre-masked `u128` words so a prefix test is an XOR and an AND.
//! * [`Fields::flow_hash`] is the seeded, direction-independent flow hash that per-flow
//!   queueing and the connection table key on: a packet and its reply hash equal.
//! * [`lpm::PrefixTable`] is a longest-prefix-match table over many IPv4/IPv6 prefixes
//!   (subscriber circuits), with the builder's duplicate and overlap check.
//!
//! Value parsers for the policy compiler live in `values.rs` (re-exported here):
//! [`IpNet::parse`] (CIDR prefixes, host bits must be clear), [`PortSet::parse`] ("80",
//! "6000-6100", "22,80,443"), [`Proto::parse`] (names or numbers), [`parse_dscp`] (RFC
//! 2474/2597/3246/5865/8622 names or 0–63) and [`parse_vlan`]; all return [`UnitError`].
//! IPv4-mapped IPv6 addresses are IPv6 addresses here: an IPv4 prefix never matches an IPv6
//! address.

pub mod lpm;
mod values;
pub use values::{dscp_name, parse_dscp, parse_vlan, IpNet, PortSet, Proto};

use crate::qdisc::Count;
use crate::units::UnitError;
use core::net::IpAddr;

// ---------------------------------------------------------------------------------------
// Fields and the flow hash

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;

/// What the classifier looks at, extracted from a frame by the caller.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fields {
    /// 802.1Q VLAN id (outermost tag), if tagged.
    pub vlan: Option<u16>,
    /// Ethertype after any VLAN tags.
    pub ethertype: u16,
    pub src: Option<IpAddr>,
    pub dst: Option<IpAddr>,
    /// IP protocol / IPv6 next header (after extension headers).
    pub proto: Option<u8>,
    /// TCP/UDP/SCTP source port.
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    /// DSCP (0-63).
    pub dscp: Option<u8>,
    /// The connection's application ([`crate::app::App`]), once known.
    pub app: Option<u8>,
    /// The layer-7 conditions its connection satisfies (bits of the policy's
    /// [`crate::app::l7::L7Set`]).
    pub l7: u64,
}

/// One endpoint in hashable form: family tag (0 none, 1 v4, 2 v6), address, port.
/// (`pub(crate)` so that [`crate::flow::FlowKey::hash`] computes the same hash.)
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct End {
    pub(crate) tag: u8,
    pub(crate) addr: u128,
    pub(crate) port: u16,
}

#[inline]
fn end(a: Option<IpAddr>, port: Option<u16>) -> End {
    let (tag, addr) = match a {
        None => (0, 0),
        Some(IpAddr::V4(a)) => (1, u32::from(a) as u128),
        Some(IpAddr::V6(a)) => (2, u128::from(a)),
    };
    End {
        tag,
        addr,
        port: port.unwrap_or(0),
    }
}

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xBF58_476D_1CE4_E5B9;

/// One absorbing step: bijective in `w` for a fixed `h`.
#[inline]
fn absorb(h: u64, w: u64) -> u64 {
    let x = (h ^ w).wrapping_mul(K1);
    x ^ (x >> 29)
}

/// murmur3's 64-bit finaliser (full avalanche).
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The flow hash of two endpoints given in canonical order (`a <= b`) or, for the
/// directional variant, in packet order.
#[inline]
pub(crate) fn hash_ends(seed: u64, proto: Option<u8>, a: End, b: End) -> u64 {
    let tail = proto.map_or(0x100, |p| p as u64)
        | (a.port as u64) << 9
        | (b.port as u64) << 25
        | (a.tag as u64) << 41
        | (b.tag as u64) << 43;
    let mut h = seed ^ K0;
    if a.tag < 2 && b.tag < 2 {
        h = absorb(h, (a.addr as u64) << 32 | b.addr as u64);
    } else {
        h = absorb(h, a.addr as u64);
        h = absorb(h, (a.addr >> 64) as u64);
        h = absorb(h, b.addr as u64);
        h = absorb(h, (b.addr >> 64) as u64);
    }
    fmix64(absorb(h, tail))
}

impl Fields {
    /// Fields of an IP packet: ethertype from the address family of `src`, no VLAN, no DSCP.
    pub fn ip(src: IpAddr, dst: IpAddr, proto: u8, sport: Option<u16>, dport: Option<u16>) -> Self {
        Fields {
            vlan: None,
            ethertype: if src.is_ipv4() {
                ETHERTYPE_IPV4
            } else {
                ETHERTYPE_IPV6
            },
            src: Some(src),
            dst: Some(dst),
            proto: Some(proto),
            sport,
            dport,
            dscp: None,
            app: None,
            l7: 0,
        }
    }

    /// The same packet seen in the other direction (addresses and ports swapped).
    pub fn reversed(&self) -> Self {
        Fields {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// A seeded, direction-independent hash of (proto, {src, sport}, {dst, dport}): a packet
    /// and its reply hash equal. The two endpoints are put in a canonical order, then the
    /// words are absorbed with a multiply–xorshift step and finished with murmur3 fmix64.
    /// VLAN, DSCP and ethertype are not part of the flow. No allocation.
    #[inline]
    pub fn flow_hash(&self, seed: u64) -> u64 {
        let a = end(self.src, self.sport);
        let b = end(self.dst, self.dport);
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        hash_ends(seed, self.proto, a, b)
    }

    /// Like [`Fields::flow_hash`] but direction-dependent: a packet and its reply differ.
    #[inline]
    pub fn flow_hash_directional(&self, seed: u64) -> u64 {
        hash_ends(
            seed ^ 0x5bd1_e995_5bd1_e995,
            self.proto,
            end(self.src, self.sport),
            end(self.dst, self.dport),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Rules

/// The condition of one rule. Every field is optional (`None` / empty = any); all present
/// fields must match (AND); within a list any element may match (OR).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Match {
    /// Source address in any of these prefixes (empty = any).
    pub src: Vec<IpNet>,
    /// Destination address in any of these prefixes (empty = any).
    pub dst: Vec<IpNet>,
    /// IP protocol number (see [`Proto`]).
    pub proto: Option<u8>,
    pub sport: Option<PortSet>,
    pub dport: Option<PortSet>,
    /// Either the source or the destination port is in the set (both directions of a
    /// session).
    pub port: Option<PortSet>,
    /// DSCP in this list (values 0-63).
    pub dscp: Option<Vec<u8>>,
    /// VLAN id in this list (values 0-4095); never matches an untagged frame.
    pub vlan: Option<Vec<u16>>,
    pub ethertype: Option<u16>,
    /// The connection's application in this list ([`crate::app::App`] tags); never
    /// matches a packet whose application is not known.
    pub app: Option<Vec<u8>>,
    /// Layer-7 conditions (`http.host`, `tls.sni`, ...): bits of the policy's
    /// [`crate::app::l7::L7Set`] the packet's connection must all have (0: none).
    pub l7: u64,
}

#[inline]
fn in_nets(nets: &[IpNet], a: Option<IpAddr>) -> bool {
    nets.is_empty() || a.is_some_and(|a| nets.iter().any(|n| n.contains(a)))
}

#[inline]
fn in_ports(set: &Option<PortSet>, p: Option<u16>) -> bool {
    match set {
        None => true,
        Some(s) => p.is_some_and(|p| s.contains(p)),
    }
}

#[inline]
fn in_list<T: PartialEq + Copy>(list: &Option<Vec<T>>, v: Option<T>) -> bool {
    match list {
        None => true,
        Some(l) => v.is_some_and(|v| l.contains(&v)),
    }
}

impl Match {
    /// The condition that matches every frame.
    pub fn any() -> Self {
        Match::default()
    }

    /// Whether this condition has no field set (matches every frame).
    pub fn is_any(&self) -> bool {
        *self == Match::default()
    }

    /// Check value ranges the types do not enforce: DSCP 0-63, VLAN 0-4095, non-empty
    /// DSCP/VLAN lists and port sets.
    pub fn validate(&self) -> Result<(), UnitError> {
        if let Some(d) = &self.dscp {
            if let Some(&bad) = d.iter().find(|&&v| v > 63) {
                return Err(UnitError::new(
                    "DSCP",
                    &bad.to_string(),
                    "DSCP values are 0-63",
                ));
            }
            if d.is_empty() {
                return Err(UnitError::new("DSCP", "[]", "empty list matches nothing"));
            }
        }
        if let Some(v) = &self.vlan {
            if let Some(&bad) = v.iter().find(|&&v| v > 4095) {
                return Err(UnitError::new(
                    "VLAN id",
                    &bad.to_string(),
                    "VLAN ids are 0-4095",
                ));
            }
            if v.is_empty() {
                return Err(UnitError::new(
                    "VLAN id",
                    "[]",
                    "empty list matches nothing",
                ));
            }
        }
        if self.app.as_ref().is_some_and(Vec::is_empty) {
            return Err(UnitError::new(
                "application",
                "[]",
                "empty list matches nothing",
            ));
        }
        for p in [&self.sport, &self.dport, &self.port].into_iter().flatten() {
            if p.is_empty() {
                return Err(UnitError::new("port set", "", "empty set matches nothing"));
            }
        }
        Ok(())
    }

    /// Whether the frame described by `f` satisfies this condition. No allocation.
    #[inline]
    pub fn matches(&self, f: &Fields) -> bool {
        if let Some(e) = self.ethertype {
            if f.ethertype != e {
                return false;
            }
        }
        if let Some(p) = self.proto {
            if f.proto != Some(p) {
                return false;
            }
        }
        if !in_list(&self.vlan, f.vlan) || !in_list(&self.dscp, f.dscp) {
            return false;
        }
        if !in_list(&self.app, f.app) || f.l7 & self.l7 != self.l7 {
            return false;
        }
        if !in_ports(&self.sport, f.sport) || !in_ports(&self.dport, f.dport) {
            return false;
        }
        if let Some(s) = &self.port {
            let hit =
                f.sport.is_some_and(|p| s.contains(p)) || f.dport.is_some_and(|p| s.contains(p));
            if !hit {
                return false;
            }
        }
        in_nets(&self.src, f.src) && in_nets(&self.dst, f.dst)
    }
}

/// One classifier rule: if `m` matches, the packet goes to `class`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub m: Match,
    /// Leaf class index.
    pub class: u32,
    /// Name for statistics and error messages.
    pub name: String,
}

/// Ordered rules, first match wins, with hit counters per rule and for the default;
/// before the rules, a subscriber table's circuits when it has one.
#[derive(Clone, Debug)]
pub struct Classifier {
    pub rules: Vec<Rule>,
    pub default_class: u32,
    /// Hits per rule, parallel to `rules`.
    pub hits: Vec<Count>,
    pub default_hits: Count,
    /// Circuits by longest-prefix match, looked up before the rules.
    pub circuits: Option<CircuitLookup>,
}

/// Which address of a packet a subscriber table is looked up by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Src,
    Dst,
}

/// A subscriber table in a classifier: prefix → class, keyed by one address of the packet
/// (the subscriber's: the source travelling outbound, the destination inbound).
#[derive(Clone, Debug)]
pub struct CircuitLookup {
    pub table: std::sync::Arc<lpm::PrefixTable>,
    pub by: Endpoint,
    /// Packets the table classified.
    pub hits: Count,
}

/// Rule index reported for the default class.
pub const DEFAULT_RULE: u16 = u16::MAX;
/// Rule index reported for a packet the subscriber table classified.
pub const CIRCUIT_RULE: u16 = u16::MAX - 1;

impl Classifier {
    /// Most rules a classifier holds (rule indices are `u16`; [`CIRCUIT_RULE`] and
    /// [`DEFAULT_RULE`] are taken).
    pub const MAX_RULES: usize = CIRCUIT_RULE as usize;

    /// A classifier over `rules` in order. Errors if there are more than
    /// [`Classifier::MAX_RULES`] rules or a rule fails [`Match::validate`].
    pub fn new(rules: Vec<Rule>, default_class: u32) -> Result<Self, UnitError> {
        if rules.len() > Self::MAX_RULES {
            return Err(UnitError::new(
                "classifier",
                &format!("{} rules", rules.len()),
                format!("at most {} rules", Self::MAX_RULES),
            ));
        }
        for r in &rules {
            r.m.validate().map_err(|e| {
                UnitError::new(
                    e.what(),
                    e.input(),
                    format!("{} (in rule '{}')", e.reason(), r.name),
                )
            })?;
        }
        Ok(Classifier {
            hits: vec![Count::default(); rules.len()],
            rules,
            default_class,
            default_hits: Count::default(),
            circuits: None,
        })
    }

    /// The same classifier looking `table` up by the packet's `by` address before its
    /// rules (a subscriber table: prefix → circuit class).
    pub fn with_circuits(mut self, table: std::sync::Arc<lpm::PrefixTable>, by: Endpoint) -> Self {
        self.circuits = Some(CircuitLookup {
            table,
            by,
            hits: Count::default(),
        });
        self
    }

    /// Whether a rule tests the connection's application or layer-7 fields (known only
    /// once the connection table has seen the packet).
    pub fn uses_apps(&self) -> bool {
        self.rules.iter().any(|r| r.m.app.is_some() || r.m.l7 != 0)
    }

    /// The class and rule index for `f` without counting ([`CIRCUIT_RULE`]: the
    /// subscriber table's, [`DEFAULT_RULE`]: the default).
    #[inline]
    pub fn lookup(&self, f: &Fields) -> (u32, u16) {
        if let Some(class) = self.circuit(f) {
            return (class, CIRCUIT_RULE);
        }
        for (i, r) in self.rules.iter().enumerate() {
            if r.m.matches(f) {
                return (r.class, i as u16);
            }
        }
        (self.default_class, DEFAULT_RULE)
    }

    /// The class of the subscriber circuit whose prefix holds `f`'s address, if any.
    #[inline]
    fn circuit(&self, f: &Fields) -> Option<u32> {
        let c = self.circuits.as_ref()?;
        let a = match c.by {
            Endpoint::Src => f.src,
            Endpoint::Dst => f.dst,
        };
        c.table.lookup(a?)
    }

    /// [`Classifier::lookup`] from a packet's headers alone (`f.app` and `f.l7` unknown):
    /// the class and rule that take it, or `None` when only the default does or when a
    /// rule that names an application (`app`, `l7`) comes first, whose answer the
    /// headers cannot give. A hot reload moves a queued packet by this.
    pub fn lookup_by_headers(&self, f: &Fields) -> Option<(u32, u16)> {
        if let Some(class) = self.circuit(f) {
            return Some((class, CIRCUIT_RULE));
        }
        for (i, r) in self.rules.iter().enumerate() {
            if r.m.app.is_some() || r.m.l7 != 0 {
                return None;
            }
            if r.m.matches(f) {
                return Some((r.class, i as u16));
            }
        }
        None
    }

    /// Classify a frame of `len` bytes: returns (class, rule index or `u16::MAX` for the
    /// default) and counts the hit.
    #[inline]
    pub fn classify(&mut self, f: &Fields, len: u32) -> (u32, u16) {
        let (class, rule) = self.lookup(f);
        match (self.hits.get_mut(rule as usize), &mut self.circuits) {
            (Some(c), _) => c.add(len),
            (None, Some(c)) if rule == CIRCUIT_RULE => c.hits.add(len),
            _ => self.default_hits.add(len),
        }
        (class, rule)
    }

    /// Zero all hit counters.
    pub fn reset_hits(&mut self) {
        self.hits.iter_mut().for_each(|c| *c = Count::default());
        self.default_hits = Count::default();
        if let Some(c) = &mut self.circuits {
            c.hits = Count::default();
        }
    }
}

#[cfg(test)]
mod tests;
