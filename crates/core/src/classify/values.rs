//! Value parsers for the policy compiler's rule conditions: [`IpNet::parse`] (CIDR
//! prefixes, host bits must be clear), [`PortSet::parse`] ("80", "6000-6100",
//! "22,80,443"), [`Proto::parse`] (names or numbers), [`parse_dscp`] (RFC
//! 2474/2597/3246/5865/8622 names or 0–63) and [`parse_vlan`]; all return [`UnitError`].
//! IPv4-mapped IPv6 addresses are IPv6 addresses here: an IPv4 prefix never matches an IPv6
//! address. Prefixes are stored as pre-masked `u128` words so a prefix test is an XOR and
//! an AND.

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
