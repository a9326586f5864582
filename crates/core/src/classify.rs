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
//!
//! Value parsers for the policy compiler live here too: [`IpNet::parse`] (CIDR prefixes,
//! host bits must be clear), [`PortSet::parse`] ("80", "6000-6100", "22,80,443"),
//! [`Proto::parse`] (names or numbers), [`parse_dscp`] (RFC 2474/2597/3246/5865/8622 names
//! or 0–63) and [`parse_vlan`]; all return [`UnitError`]. IPv4-mapped IPv6 addresses are
//! IPv6 addresses here: an IPv4 prefix never matches an IPv6 address.

use crate::qdisc::Count;
use crate::units::UnitError;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// ---------------------------------------------------------------------------------------
// IP prefixes

/// An IPv4 or IPv6 prefix ("10.0.0.0/8", "2001:db8::/32"); a bare address is a host
/// prefix (/32 or /128).
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct IpNet {
    /// Network address, IPv4 in the low 32 bits.
    net: u128,
    /// Prefix mask in the same layout.
    mask: u128,
    len: u8,
    v6: bool,
}

impl IpNet {
    /// The prefix `addr/len`. Errors if `len` is too long for the family or if `addr` has
    /// bits set beyond the prefix (the message suggests the network address).
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, UnitError> {
        let (v6, bits, word) = match addr {
            IpAddr::V4(a) => (false, 32u8, u32::from(a) as u128),
            IpAddr::V6(a) => (true, 128u8, u128::from(a)),
        };
        let shown = format!("{addr}/{len}");
        if len > bits {
            return Err(UnitError::new(
                "IP prefix",
                &shown,
                format!(
                    "prefix length {len} is longer than {bits} bits; expected e.g. {}",
                    if v6 { "2001:db8::/32" } else { "10.0.0.0/8" }
                ),
            ));
        }
        let mask = prefix_mask(len, bits);
        if word & !mask != 0 {
            let fixed = IpNet {
                net: word & mask,
                mask,
                len,
                v6,
            };
            return Err(UnitError::new(
                "IP prefix",
                &shown,
                format!("host bits are set after the /{len} prefix; did you mean {fixed}?"),
            ));
        }
        Ok(IpNet {
            net: word,
            mask,
            len,
            v6,
        })
    }

    /// The single-address prefix of `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Self {
        let (v6, bits, word) = match addr {
            IpAddr::V4(a) => (false, 32u8, u32::from(a) as u128),
            IpAddr::V6(a) => (true, 128u8, u128::from(a)),
        };
        IpNet {
            net: word,
            mask: prefix_mask(bits, bits),
            len: bits,
            v6,
        }
    }

    /// Parse "10.0.0.0/8", "2001:db8::/32", "192.168.1.7" (= /32) or "::1" (= /128).
    pub fn parse(s: &str) -> Result<Self, UnitError> {
        let t = s.trim();
        let err = |r: String| UnitError::new("IP prefix", s, r);
        let (a, l) = match t.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (t, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| {
            err(format!(
                "'{a}' is not an IPv4 or IPv6 address; expected e.g. 10.0.0.0/8, \
                 192.168.1.7 or 2001:db8::/32"
            ))
        })?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => bits,
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err(format!(
                        "prefix length '{l}' is not a number from 0 to {bits}"
                    )));
                }
                let n: u16 = l.parse().unwrap_or(u16::MAX);
                if n > bits as u16 {
                    return Err(err(format!("prefix length {n} is longer than {bits} bits")));
                }
                n as u8
            }
        };
        IpNet::new(addr, len).map_err(|e| err(e.reason().to_string()))
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.net))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.net as u32))
        }
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    pub fn is_ipv4(&self) -> bool {
        !self.v6
    }

    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// Whether `a` is inside this prefix. An IPv4 prefix never contains an IPv6 address
    /// (IPv4-mapped included) and vice versa.
    #[inline]
    pub fn contains(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => !self.v6 && (u32::from(a) as u128 ^ self.net) & self.mask == 0,
            IpAddr::V6(a) => self.v6 && (u128::from(a) ^ self.net) & self.mask == 0,
        }
    }
}

/// Mask of the top `len` bits of a `bits`-wide address, in the low `bits` bits of a u128.
fn prefix_mask(len: u8, bits: u8) -> u128 {
    let all = if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    if len == 0 {
        0
    } else {
        all & !all.checked_shr(len as u32).unwrap_or(0)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

impl fmt::Debug for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for IpNet {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        IpNet::parse(s)
    }
}

// ---------------------------------------------------------------------------------------
// Port sets

/// A set of ports as sorted, merged, inclusive ranges.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct PortSet {
    ranges: Vec<(u16, u16)>,
}

impl PortSet {
    /// The set of one port.
    pub fn single(p: u16) -> Self {
        PortSet {
            ranges: vec![(p, p)],
        }
    }

    /// The union of inclusive ranges `(lo, hi)`; errors if some `lo > hi`. Overlapping and
    /// adjacent ranges are merged.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u16, u16)>) -> Result<Self, UnitError> {
        let mut v: Vec<(u16, u16)> = Vec::new();
        for (lo, hi) in ranges {
            if lo > hi {
                return Err(UnitError::new(
                    "port range",
                    &format!("{lo}-{hi}"),
                    format!("range is reversed; did you mean {hi}-{lo}?"),
                ));
            }
            v.push((lo, hi));
        }
        v.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(v.len());
        for (lo, hi) in v {
            match out.last_mut() {
                Some(last) if lo as u32 <= last.1 as u32 + 1 => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        Ok(PortSet { ranges: out })
    }

    /// Parse "80", "6000-6100", or a list separated by commas and/or whitespace
    /// ("22, 80,443 6000-6100").
    pub fn parse(s: &str) -> Result<Self, UnitError> {
        let err = |r: String| UnitError::new("port set", s, r);
        let mut ranges = Vec::new();
        for item in s.split(|c: char| c == ',' || c.is_whitespace()) {
            if item.is_empty() {
                continue;
            }
            let (lo, hi) = match item.split_once('-') {
                Some((lo, hi)) => (parse_port(lo).map_err(err)?, parse_port(hi).map_err(err)?),
                None => {
                    let p = parse_port(item).map_err(err)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(err(format!(
                    "range '{item}' is reversed; did you mean {hi}-{lo}?"
                )));
            }
            ranges.push((lo, hi));
        }
        if ranges.is_empty() {
            return Err(err(
                "empty; expected a port (80), a range (6000-6100) or a list (22,80,443)".into(),
            ));
        }
        PortSet::from_ranges(ranges).map_err(|e| err(e.reason().to_string()))
    }

    /// Whether `p` is in the set (binary search over the ranges).
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        let i = self.ranges.partition_point(|r| r.1 < p);
        self.ranges.get(i).is_some_and(|r| r.0 <= p)
    }

    /// The merged ranges, ascending.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    let t = s.trim();
    if t.is_empty() || t.len() > 5 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{t}' is not a port number (0-65535); expected e.g. 80, 6000-6100 or 22,80,443"
        ));
    }
    t.parse::<u16>()
        .map_err(|_| format!("port {t} is out of range; ports are 0-65535"))
}

impl fmt::Display for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PortSet({self})")
    }
}

impl core::str::FromStr for PortSet {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        PortSet::parse(s)
    }
}

// ---------------------------------------------------------------------------------------
// Protocols, DSCP, VLAN

/// IP protocol numbers by name (IANA "Assigned Internet Protocol Numbers").
pub struct Proto;

impl Proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;

    const NAMES: [(&'static str, u8); 7] = [
        ("icmp", Self::ICMP),
        ("tcp", Self::TCP),
        ("udp", Self::UDP),
        ("gre", Self::GRE),
        ("esp", Self::ESP),
        ("icmpv6", Self::ICMPV6),
        ("sctp", Self::SCTP),
    ];

    /// Parse a protocol name (tcp, udp, icmp, icmpv6, gre, esp, sctp; case-insensitive;
    /// "ipv6-icmp" too) or a number 0-255.
    pub fn parse(s: &str) -> Result<u8, UnitError> {
        let t = s.trim();
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            return t.parse::<u8>().map_err(|_| {
                UnitError::new("protocol", s, "protocol numbers are 0-255, e.g. 6 for tcp")
            });
        }
        let lower = t.to_ascii_lowercase();
        if lower == "ipv6-icmp" {
            return Ok(Self::ICMPV6);
        }
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|&(_, p)| p)
            .ok_or_else(|| {
                UnitError::new(
                    "protocol",
                    s,
                    "unknown protocol; expected tcp, udp, icmp, icmpv6, gre, esp, sctp or a \
                     number 0-255",
                )
            })
    }

    /// The name of a protocol number, if it has one here.
    pub fn name(p: u8) -> Option<&'static str> {
        Self::NAMES.iter().find(|&&(_, q)| q == p).map(|&(n, _)| n)
    }
}

/// DSCP code point names: RFC 2474 (CS0-CS7, DF/BE), RFC 2597 (AFxy), RFC 3246 (EF),
/// RFC 5865 (VOICE-ADMIT), RFC 8622 (LE).
const DSCP_NAMES: [(&str, u8); 25] = [
    ("be", 0),
    ("df", 0),
    ("cs0", 0),
    ("le", 1),
    ("cs1", 8),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("cs2", 16),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("cs3", 24),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("cs4", 32),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("cs5", 40),
    ("va", 44),
    ("ef", 46),
    ("cs6", 48),
    ("cs7", 56),
];

/// Parse a DSCP: a number 0-63 or a name (be, df, cs0-cs7, af11-af43, ef, va, le),
/// case-insensitive.
pub fn parse_dscp(s: &str) -> Result<u8, UnitError> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u8>() {
            Ok(v) if v <= 63 => Ok(v),
            _ => Err(UnitError::new(
                "DSCP",
                s,
                "DSCP values are 0-63 (the upper six bits of the TOS/traffic class byte)",
            )),
        };
    }
    let lower = t.to_ascii_lowercase();
    DSCP_NAMES
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|&(_, v)| v)
        .ok_or_else(|| {
            UnitError::new(
                "DSCP",
                s,
                "unknown DSCP name; expected a number 0-63 or be, df, cs0-cs7, af11-af43, \
                 ef, va, le",
            )
        })
}

/// The conventional name of a DSCP value ("be", "cs1", "af11", "ef", ...), if it has one.
pub fn dscp_name(v: u8) -> Option<&'static str> {
    DSCP_NAMES.iter().find(|&&(_, d)| d == v).map(|&(n, _)| n)
}

/// Parse a VLAN id 0-4095.
pub fn parse_vlan(s: &str) -> Result<u16, UnitError> {
    let t = s.trim();
    match t.parse::<u16>() {
        Ok(v) if v <= 4095 && t.bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(UnitError::new("VLAN id", s, "VLAN ids are numbers 0-4095")),
    }
}

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

/// Ordered rules, first match wins, with hit counters per rule and for the default.
#[derive(Clone, Debug)]
pub struct Classifier {
    pub rules: Vec<Rule>,
    pub default_class: u32,
    /// Hits per rule, parallel to `rules`.
    pub hits: Vec<Count>,
    pub default_hits: Count,
}

/// Rule index reported for the default class.
pub const DEFAULT_RULE: u16 = u16::MAX;

impl Classifier {
    /// Most rules a classifier holds (rule indices are `u16`; `u16::MAX` means default).
    pub const MAX_RULES: usize = u16::MAX as usize;

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
        })
    }

    /// The class and rule index for `f` without counting (`DEFAULT_RULE` = default).
    #[inline]
    pub fn lookup(&self, f: &Fields) -> (u32, u16) {
        for (i, r) in self.rules.iter().enumerate() {
            if r.m.matches(f) {
                return (r.class, i as u16);
            }
        }
        (self.default_class, DEFAULT_RULE)
    }

    /// Classify a frame of `len` bytes: returns (class, rule index or `u16::MAX` for the
    /// default) and counts the hit.
    #[inline]
    pub fn classify(&mut self, f: &Fields, len: u32) -> (u32, u16) {
        let (class, rule) = self.lookup(f);
        match self.hits.get_mut(rule as usize) {
            Some(c) if rule != DEFAULT_RULE => c.add(len),
            _ => self.default_hits.add(len),
        }
        (class, rule)
    }

    /// Zero all hit counters.
    pub fn reset_hits(&mut self) {
        self.hits.iter_mut().for_each(|c| *c = Count::default());
        self.default_hits = Count::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn net(s: &str) -> IpNet {
        IpNet::parse(s).unwrap()
    }
    fn tcp4(src: &str, sport: u16, dst: &str, dport: u16) -> Fields {
        Fields::ip(ip(src), ip(dst), Proto::TCP, Some(sport), Some(dport))
    }

    #[test]
    fn prefixes_parse_and_contain() {
        let n = net("10.0.0.0/8");
        assert!(n.contains(ip("10.0.0.0")));
        assert!(n.contains(ip("10.255.255.255")));
        assert!(!n.contains(ip("11.0.0.0")));
        assert!(!n.contains(ip("9.255.255.255")));
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert_eq!(n.prefix_len(), 8);
        assert_eq!(n.addr(), ip("10.0.0.0"));

        let h = net("192.168.1.7");
        assert_eq!(h.prefix_len(), 32);
        assert!(h.contains(ip("192.168.1.7")));
        assert!(!h.contains(ip("192.168.1.6")));
        assert_eq!(net("192.168.1.7/32"), h);
        assert_eq!(IpNet::host(ip("192.168.1.7")), h);

        let all4 = net("0.0.0.0/0");
        assert!(all4.contains(ip("255.255.255.255")));
        assert!(all4.contains(ip("0.0.0.0")));
        assert!(!all4.contains(ip("::")), "v4 prefix never matches v6");
        assert!(!all4.contains(ip("::ffff:10.0.0.1")), "v4-mapped is v6");

        let d = net("2001:db8::/32");
        assert!(d.is_ipv6());
        assert!(d.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!d.contains(ip("2001:db9::")));
        assert!(!d.contains(ip("32.1.13.184")));
        let lo = net("::1");
        assert_eq!(lo.prefix_len(), 128);
        assert!(lo.contains(ip("::1")) && !lo.contains(ip("::2")));
        assert_eq!(net("::1/128"), lo);
        let all6 = net("::/0");
        assert!(all6.contains(ip("ffff::1")) && !all6.contains(ip("1.2.3.4")));
        assert!(net("::ffff:0:0/96").contains(ip("::ffff:10.0.0.1")));
        assert!(!net("::ffff:0:0/96").contains(ip("10.0.0.1")));
        assert!(net("10.1.2.128/25").contains(ip("10.1.2.255")));
        assert!(!net("10.1.2.128/25").contains(ip("10.1.2.127")));
        assert_eq!(" 10.0.0.0/8 ".parse::<IpNet>(), Ok(n));
    }

    #[test]
    fn prefix_errors() {
        let e = |s: &str| IpNet::parse(s).unwrap_err().to_string();
        assert_eq!(
            e("10.0.0.1/8"),
            "invalid IP prefix '10.0.0.1/8': host bits are set after the /8 prefix; did you \
             mean 10.0.0.0/8?"
        );
        assert!(e("2001:db8::1/32").contains("did you mean 2001:db8::/32?"));
        assert!(e("10.0.0.0/33").contains("longer than 32 bits"));
        assert!(e("::/129").contains("longer than 128 bits"));
        assert!(e("10.0.0.0/99999").contains("not a number from 0 to 32"));
        assert!(e("10.0.0.0/").contains("not a number"));
        assert!(e("10.0.0.0/-1").contains("not a number"));
        assert!(e("10.0.0/8").contains("not an IPv4 or IPv6 address"));
        assert!(e("fe80::1%eth0").contains("not an IPv4 or IPv6 address"));
        assert!(e("").contains("not an IPv4 or IPv6 address"));
        assert!(IpNet::new(ip("10.0.0.0"), 33).is_err());
        assert!(IpNet::new(ip("10.0.0.0"), 0).is_err());
        assert!(IpNet::new(ip("0.0.0.0"), 0).is_ok());
    }

    #[test]
    fn port_sets() {
        let s = PortSet::parse("6000-6100").unwrap();
        assert!(!s.contains(5999));
        assert!(s.contains(6000));
        assert!(s.contains(6100));
        assert!(!s.contains(6101));
        let l = PortSet::parse("22, 80,443 6000-6100,81").unwrap();
        assert_eq!(l.ranges(), &[(22, 22), (80, 81), (443, 443), (6000, 6100)]);
        assert_eq!(l.to_string(), "22,80-81,443,6000-6100");
        for p in [22, 80, 81, 443, 6000, 6050, 6100] {
            assert!(l.contains(p), "{p}");
        }
        for p in [0, 21, 23, 79, 82, 442, 444, 5999, 6101, 65535] {
            assert!(!l.contains(p), "{p}");
        }
        let full = PortSet::parse("0-65535").unwrap();
        assert!(full.contains(0) && full.contains(65535));
        assert_eq!(PortSet::single(80), PortSet::parse("80").unwrap());
        let e = |s: &str| PortSet::parse(s).unwrap_err().to_string();
        assert!(e("100-80").contains("did you mean 80-100?"));
        assert!(e("65536").contains("out of range"));
        assert!(e("http").contains("not a port number"));
        assert!(e("").contains("empty"));
        assert!(e("1-2-3").contains("not a port number"));
        assert!(PortSet::from_ranges([(5, 1)]).is_err());
        assert_eq!(
            PortSet::from_ranges([(10, 20), (15, 30), (31, 31), (40, 50)])
                .unwrap()
                .ranges(),
            &[(10, 31), (40, 50)]
        );
    }

    #[test]
    fn protocols_dscp_vlan() {
        assert_eq!(Proto::parse("tcp"), Ok(6));
        assert_eq!(Proto::parse("UDP"), Ok(17));
        assert_eq!(Proto::parse("icmp"), Ok(1));
        assert_eq!(Proto::parse("icmpv6"), Ok(58));
        assert_eq!(Proto::parse("ipv6-icmp"), Ok(58));
        assert_eq!(Proto::parse("gre"), Ok(47));
        assert_eq!(Proto::parse("esp"), Ok(50));
        assert_eq!(Proto::parse("sctp"), Ok(132));
        assert_eq!(Proto::parse("89"), Ok(89));
        assert!(Proto::parse("256")
            .unwrap_err()
            .to_string()
            .contains("0-255"));
        assert!(Proto::parse("quic")
            .unwrap_err()
            .to_string()
            .contains("unknown protocol"));
        assert_eq!(Proto::name(6), Some("tcp"));
        assert_eq!(Proto::name(89), None);

        for (s, v) in [
            ("be", 0),
            ("DF", 0),
            ("cs0", 0),
            ("cs1", 8),
            ("cs2", 16),
            ("cs3", 24),
            ("cs4", 32),
            ("cs5", 40),
            ("cs6", 48),
            ("CS7", 56),
            ("EF", 46),
            ("af11", 10),
            ("af12", 12),
            ("af13", 14),
            ("af21", 18),
            ("af22", 20),
            ("af23", 22),
            ("af31", 26),
            ("af32", 28),
            ("af33", 30),
            ("af41", 34),
            ("AF42", 36),
            ("af43", 38),
            ("va", 44),
            ("le", 1),
            ("0", 0),
            ("63", 63),
        ] {
            assert_eq!(parse_dscp(s), Ok(v), "{s}");
        }
        assert!(parse_dscp("64").unwrap_err().to_string().contains("0-63"));
        assert!(parse_dscp("af44")
            .unwrap_err()
            .to_string()
            .contains("unknown DSCP"));
        assert!(parse_dscp("").is_err());
        assert_eq!(dscp_name(46), Some("ef"));
        assert_eq!(dscp_name(0), Some("be"));
        assert_eq!(dscp_name(3), None);

        assert_eq!(parse_vlan("100"), Ok(100));
        assert_eq!(parse_vlan("4095"), Ok(4095));
        assert!(parse_vlan("4096").is_err());
        assert!(parse_vlan("+5").is_err());
    }

    /// The seed-000 style policy: VoIP (UDP from one host) and FTP (a subnet) classes.
    fn policy() -> Classifier {
        let rules = vec![
            Rule {
                m: Match {
                    src: vec![net("10.1.0.5")],
                    proto: Some(Proto::UDP),
                    ..Match::default()
                },
                class: 1,
                name: "voip".into(),
            },
            Rule {
                m: Match {
                    src: vec![net("10.1.0.0/16"), net("2001:db8:1::/48")],
                    proto: Some(Proto::TCP),
                    port: Some(PortSet::parse("20-21").unwrap()),
                    ..Match::default()
                },
                class: 2,
                name: "ftp".into(),
            },
            Rule {
                m: Match {
                    src: vec![net("10.1.0.0/16")],
                    ..Match::default()
                },
                class: 3,
                name: "subnet".into(),
            },
        ];
        Classifier::new(rules, 9).unwrap()
    }

    #[test]
    fn first_match_wins_and_counts() {
        let mut c = policy();
        let voip = Fields::ip(
            ip("10.1.0.5"),
            ip("10.2.0.1"),
            Proto::UDP,
            Some(5004),
            Some(5004),
        );
        assert_eq!(c.classify(&voip, 74), (1, 0));
        // TCP from the VoIP host on the FTP port: rule 0 needs UDP, so rule 1.
        let ftp = tcp4("10.1.0.5", 40000, "10.2.0.1", 21);
        assert_eq!(c.classify(&ftp, 1500), (2, 1));
        // Reply direction matches through `port` (sport 20) — but src is the far side, so
        // it is not in 10.1/16: default.
        assert_eq!(c.classify(&ftp.reversed(), 40), (9, DEFAULT_RULE));
        // Other TCP from the subnet: rule 2.
        assert_eq!(
            c.classify(&tcp4("10.1.3.4", 1, "10.2.0.1", 80), 1000),
            (3, 2)
        );
        // IPv6 FTP.
        let v6 = Fields::ip(
            ip("2001:db8:1::9"),
            ip("2001:db8:2::1"),
            Proto::TCP,
            Some(20),
            Some(50000),
        );
        assert_eq!(c.classify(&v6, 1400), (2, 1));
        // IPv6 outside: default.
        let v6o = Fields::ip(
            ip("2001:db8:3::9"),
            ip("2001:db8:2::1"),
            Proto::TCP,
            Some(20),
            Some(50000),
        );
        assert_eq!(c.classify(&v6o, 100), (9, DEFAULT_RULE));
        // ARP: no addresses, default.
        let arp = Fields {
            ethertype: ETHERTYPE_ARP,
            ..Fields::default()
        };
        assert_eq!(c.classify(&arp, 60), (9, DEFAULT_RULE));

        assert_eq!(
            c.hits[0],
            Count {
                packets: 1,
                bytes: 74
            }
        );
        assert_eq!(
            c.hits[1],
            Count {
                packets: 2,
                bytes: 2900
            }
        );
        assert_eq!(
            c.hits[2],
            Count {
                packets: 1,
                bytes: 1000
            }
        );
        assert_eq!(
            c.default_hits,
            Count {
                packets: 3,
                bytes: 200
            }
        );
        assert_eq!(c.lookup(&voip), (1, 0));
        assert_eq!(c.hits[0].packets, 1, "lookup does not count");
        c.reset_hits();
        assert_eq!(c.default_hits, Count::default());
        assert!(c.hits.iter().all(|h| *h == Count::default()));
    }

    #[test]
    fn empty_classifier_and_match_any() {
        let mut c = Classifier::new(vec![], 4).unwrap();
        assert_eq!(c.classify(&Fields::default(), 1), (4, u16::MAX));
        assert_eq!(c.default_hits.packets, 1);
        assert!(Match::any().matches(&Fields::default()));
        assert!(Match::any().is_any());
        let r = Rule {
            m: Match::any(),
            class: 7,
            name: "all".into(),
        };
        let mut c = Classifier::new(vec![r.clone(), r], 4).unwrap();
        assert_eq!(c.classify(&tcp4("1.2.3.4", 1, "5.6.7.8", 2), 1), (7, 0));
    }

    #[test]
    fn port_conditions_need_ports() {
        let icmp = Fields::ip(ip("10.0.0.1"), ip("10.0.0.2"), Proto::ICMP, None, None);
        for m in [
            Match {
                port: Some(PortSet::parse("0-65535").unwrap()),
                ..Match::default()
            },
            Match {
                sport: Some(PortSet::parse("0-65535").unwrap()),
                ..Match::default()
            },
            Match {
                dport: Some(PortSet::parse("0-65535").unwrap()),
                ..Match::default()
            },
        ] {
            assert!(!m.matches(&icmp), "{m:?}");
            assert!(m.matches(&tcp4("10.0.0.1", 0, "10.0.0.2", 65535)));
        }
    }

    #[test]
    fn port_boundaries_and_directions() {
        let m = Match {
            dport: Some(PortSet::parse("6000-6100").unwrap()),
            ..Match::default()
        };
        assert!(!m.matches(&tcp4("1.1.1.1", 6000, "2.2.2.2", 5999)));
        assert!(m.matches(&tcp4("1.1.1.1", 1, "2.2.2.2", 6000)));
        assert!(m.matches(&tcp4("1.1.1.1", 1, "2.2.2.2", 6100)));
        assert!(!m.matches(&tcp4("1.1.1.1", 6050, "2.2.2.2", 6101)));
        let s = Match {
            sport: Some(PortSet::single(80)),
            dport: Some(PortSet::single(1000)),
            ..Match::default()
        };
        assert!(s.matches(&tcp4("1.1.1.1", 80, "2.2.2.2", 1000)));
        assert!(!s.matches(&tcp4("1.1.1.1", 1000, "2.2.2.2", 80)));
        let either = Match {
            port: Some(PortSet::single(80)),
            ..Match::default()
        };
        let f = tcp4("1.1.1.1", 40000, "2.2.2.2", 80);
        assert!(either.matches(&f) && either.matches(&f.reversed()));
        assert!(!either.matches(&tcp4("1.1.1.1", 81, "2.2.2.2", 79)));
    }

    #[test]
    fn vlan_dscp_ethertype() {
        let m = Match {
            vlan: Some(vec![10, 20]),
            dscp: Some(vec![parse_dscp("ef").unwrap(), parse_dscp("af41").unwrap()]),
            ethertype: Some(ETHERTYPE_IPV4),
            ..Match::default()
        };
        let mut f = Fields::ip(ip("10.0.0.1"), ip("10.0.0.2"), Proto::UDP, Some(1), Some(2));
        f.vlan = Some(20);
        f.dscp = Some(46);
        assert!(m.matches(&f));
        f.dscp = Some(34);
        assert!(m.matches(&f));
        f.dscp = Some(0);
        assert!(!m.matches(&f));
        f.dscp = None;
        assert!(!m.matches(&f));
        f.dscp = Some(46);
        f.vlan = Some(30);
        assert!(!m.matches(&f));
        f.vlan = None;
        assert!(!m.matches(&f), "untagged never matches a VLAN condition");
        f.vlan = Some(10);
        assert!(m.matches(&f));
        f.ethertype = ETHERTYPE_IPV6;
        assert!(!m.matches(&f));
        let arp = Match {
            ethertype: Some(ETHERTYPE_ARP),
            ..Match::default()
        };
        assert!(arp.matches(&Fields {
            ethertype: ETHERTYPE_ARP,
            ..Fields::default()
        }));
    }

    #[test]
    fn validation() {
        let bad = |m: Match| {
            Classifier::new(
                vec![Rule {
                    m,
                    class: 1,
                    name: "r".into(),
                }],
                0,
            )
            .unwrap_err()
            .to_string()
        };
        assert!(bad(Match {
            dscp: Some(vec![64]),
            ..Match::default()
        })
        .contains("0-63 (in rule 'r')"));
        assert!(bad(Match {
            vlan: Some(vec![4096]),
            ..Match::default()
        })
        .contains("0-4095"));
        assert!(bad(Match {
            vlan: Some(vec![]),
            ..Match::default()
        })
        .contains("empty"));
        assert!(bad(Match {
            port: Some(PortSet::default()),
            ..Match::default()
        })
        .contains("empty"));
        let many: Vec<Rule> = (0..=Classifier::MAX_RULES)
            .map(|i| Rule {
                m: Match::any(),
                class: i as u32,
                name: String::new(),
            })
            .collect();
        assert!(Classifier::new(many, 0).is_err());
    }

    #[test]
    fn flow_hash_is_symmetric_and_discriminating() {
        let f = tcp4("10.0.0.1", 40000, "192.168.1.2", 80);
        assert_eq!(f.flow_hash(1), f.reversed().flow_hash(1));
        assert_ne!(f.flow_hash(1), f.flow_hash(2), "seeded");
        assert_ne!(
            f.flow_hash_directional(1),
            f.reversed().flow_hash_directional(1)
        );
        let v6 = Fields::ip(
            ip("2001:db8::1"),
            ip("2001:db8::2"),
            Proto::UDP,
            Some(5),
            Some(6),
        );
        assert_eq!(v6.flow_hash(7), v6.reversed().flow_hash(7));
        // Same addresses, swapped ports only: a different flow.
        let g = tcp4("10.0.0.1", 80, "192.168.1.2", 40000);
        assert_ne!(f.flow_hash(1), g.flow_hash(1));
        // Protocol matters.
        let mut u = f;
        u.proto = Some(Proto::UDP);
        assert_ne!(f.flow_hash(1), u.flow_hash(1));
        // VLAN and DSCP do not.
        let mut d = f;
        d.dscp = Some(46);
        d.vlan = Some(3);
        assert_eq!(f.flow_hash(1), d.flow_hash(1));
        // v4 vs v4-mapped v6 differ.
        let m = Fields::ip(
            ip("::ffff:10.0.0.1"),
            ip("::ffff:192.168.1.2"),
            Proto::TCP,
            Some(40000),
            Some(80),
        );
        assert_ne!(f.flow_hash(1), m.flow_hash(1));
        // Many distinct 5-tuples: no collisions in 64 bits.
        let mut seen = std::collections::HashSet::new();
        for a in 0..50u32 {
            for p in 0..200u16 {
                let f = Fields::ip(
                    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + a)),
                    ip("192.168.1.2"),
                    Proto::TCP,
                    Some(1024 + p),
                    Some(80),
                );
                assert!(seen.insert(f.flow_hash(0)));
                assert_eq!(f.flow_hash(0), f.reversed().flow_hash(0));
            }
        }
    }

    /// Chi-square of `hashes` over 1024 buckets taken from the given bit offset.
    fn chi2(hashes: &[u64], shift: u32) -> f64 {
        let mut b = [0u32; 1024];
        for h in hashes {
            b[((h >> shift) & 1023) as usize] += 1;
        }
        let e = hashes.len() as f64 / 1024.0;
        b.iter().map(|&o| (o as f64 - e).powi(2) / e).sum()
    }

    #[test]
    fn flow_hash_spreads_sequential_ports() {
        // 10,000 flows differing only in the source port: chi-square over 1024 buckets has
        // 1023 degrees of freedom, mean 1023, sd ~45; 1250 is about 5 sd.
        for seed in [0u64, 1, 0xdead_beef] {
            for (v6, directional) in [(false, false), (true, false), (false, true)] {
                let (s, d) = if v6 {
                    (ip("2001:db8::1"), ip("2001:db8::2"))
                } else {
                    (ip("10.0.0.1"), ip("10.0.0.2"))
                };
                let hs: Vec<u64> = (0..10_000u16)
                    .map(|p| {
                        let f = Fields::ip(s, d, Proto::TCP, Some(1024 + p), Some(80));
                        if directional {
                            f.flow_hash_directional(seed)
                        } else {
                            f.flow_hash(seed)
                        }
                    })
                    .collect();
                for shift in [0, 27, 54] {
                    let x = chi2(&hs, shift);
                    assert!(x < 1250.0, "seed {seed} v6 {v6} shift {shift}: chi2 {x}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = IpNet::parse(&s);
            let _ = PortSet::parse(&s);
            let _ = Proto::parse(&s);
            let _ = parse_dscp(&s);
            let _ = parse_vlan(&s);
        }

        #[test]
        fn prefix_contains_agrees_with_bit_compare(a: u32, b: u32, len in 0u8..=32) {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            let n = IpNet::new(IpAddr::V4(Ipv4Addr::from(a & m)), len).unwrap();
            proptest::prop_assert_eq!(n.contains(IpAddr::V4(Ipv4Addr::from(b))), (a ^ b) & m == 0);
            proptest::prop_assert_eq!(IpNet::parse(&n.to_string()), Ok(n));
            proptest::prop_assert_eq!(IpNet::new(IpAddr::V4(Ipv4Addr::from(a)), len).is_ok(), a & !m == 0);
        }

        #[test]
        fn prefix6_contains_agrees_with_bit_compare(a: u128, b: u128, len in 0u8..=128) {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - len as u32) };
            let n = IpNet::new(IpAddr::V6(Ipv6Addr::from(a & m)), len).unwrap();
            proptest::prop_assert_eq!(n.contains(IpAddr::V6(Ipv6Addr::from(b))), (a ^ b) & m == 0);
            proptest::prop_assert_eq!(IpNet::parse(&n.to_string()), Ok(n));
        }

        #[test]
        fn port_set_agrees_with_naive(rs in proptest::collection::vec((0u16.., 0u16..200), 1..6), p: u16) {
            let rs: Vec<(u16, u16)> = rs.into_iter().map(|(lo, w)| (lo, lo.saturating_add(w))).collect();
            let s = PortSet::from_ranges(rs.iter().copied()).unwrap();
            let naive = rs.iter().any(|&(lo, hi)| lo <= p && p <= hi);
            proptest::prop_assert_eq!(s.contains(p), naive);
            proptest::prop_assert_eq!(PortSet::parse(&s.to_string()), Ok(s));
        }

        #[test]
        fn flow_hash_always_symmetric(a: u128, b: u128, v6: bool, proto: Option<u8>,
                                      sp: Option<u16>, dp: Option<u16>, seed: u64) {
            let mk = |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
            let f = Fields { src: Some(mk(a)), dst: Some(mk(b)), proto, sport: sp, dport: dp, ..Fields::default() };
            proptest::prop_assert_eq!(f.flow_hash(seed), f.reversed().flow_hash(seed));
        }
    }

    #[test]
    fn flow_hash_avalanche() {
        // Flipping one input bit flips about half the output bits.
        let base = tcp4("10.0.0.1", 40000, "192.168.1.2", 80);
        let mut total = 0u32;
        let mut n = 0u32;
        for bit in 0..16 {
            let mut f = base;
            f.sport = Some(40000 ^ (1 << bit));
            total += (f.flow_hash(3) ^ base.flow_hash(3)).count_ones();
            let mut g = base;
            g.src = Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0001u32 ^ (1 << bit))));
            total += (g.flow_hash(3) ^ base.flow_hash(3)).count_ones();
            n += 2;
        }
        let avg = total as f64 / n as f64;
        assert!((26.0..38.0).contains(&avg), "avg flipped bits {avg}");
    }
}
