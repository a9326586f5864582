//! Flow keys: the direction-independent identity of a transport session, as the connection
//! table ([`crate::conn`]) keys it.
//!
//! A [`FlowKey`] holds an IPv4 or IPv6 5-tuple — protocol and two (address, port) ends —
//! with the two ends stored in a **canonical order** (the smaller (address, port) first), so
//! a packet and its reply produce equal keys. Besides the identity it carries one bit of
//! *orientation*: whether this packet travelled from the canonical first end to the second
//! or the other way. Equality and [`core::hash::Hash`] ignore the orientation; the
//! connection table compares it with the orientation of the first packet it saw to tell
//! the initiator's direction ([`Side::Orig`]) from the reply ([`Side::Reply`]).
//!
//! # Layout (40 bytes, no padding)
//! Each address is two big-endian `u64` halves of its 128-bit value (IPv4 in the low 32
//! bits), so comparing `[u64; 2]` arrays orders addresses as numbers. Ports, protocol,
//! family and orientation share one `u64` word, so equality is five word compares and a
//! mask. An IPv4 key is not shorter than an IPv6 one: the table keeps keys in fixed-size
//! preallocated slots, each of which must be able to hold an IPv6 key, so a variable
//! encoding would save nothing there. IPv4 stays cheap where it can: its hash absorbs one
//! word for both addresses instead of four.
//!
//! # Rules
//! * Non-IP packets have no key (`None`), nor do packets whose source and destination are
//!   of different families. IPv4 and IPv4-mapped IPv6 (`::ffff:a.b.c.d`) are different
//!   keys, as in the classifier.
//! * A packet without ports (ICMP, other protocols) has ports 0: one key per (protocol,
//!   address pair). [`FlowKey::from_parsed`] gives no key for a non-first fragment of a
//!   TCP or UDP datagram (its ports are unknown, and a port-0 key would be a different
//!   flow); [`FlowKey::from_fields`] cannot tell, because [`Fields`] does not say.
//! * VLAN, DSCP and the ethertype are not part of the flow.
//!
//! # Hash
//! [`FlowKey::hash`] is seeded and direction-independent, and equals the classifier's
//! [`Fields::flow_hash`] for the same packet and seed (it is the same function), so a
//! driver can hash a packet once for per-flow queueing (`Meta::flow`) and the connection
//! table.

use crate::classify::{self, Fields, Proto};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which endpoint of a connection sent a packet.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Side {
    /// The initiator: the source of the first packet the table saw for the connection
    /// (for TCP normally the SYN's sender).
    Orig = 0,
    /// The other endpoint.
    Reply = 1,
}

impl Side {
    /// Both sides, `Orig` first (indexing order).
    pub const BOTH: [Side; 2] = [Side::Orig, Side::Reply];

    /// 0 for `Orig`, 1 for `Reply`: the index into per-side arrays.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The other side.
    #[inline]
    pub fn other(self) -> Side {
        match self {
            Side::Orig => Side::Reply,
            Side::Reply => Side::Orig,
        }
    }
}

/// Bits of [`FlowKey::tail`] above the two ports.
const PROTO_SHIFT: u32 = 32;
const V6: u64 = 1 << 40;
/// Orientation: the packet went from the canonical second end to the first.
const REV: u64 = 1 << 41;
/// Marks an unused connection-table slot; never set by a constructor, so a free slot's
/// key equals no packet's key.
pub(crate) const FREE: u64 = 1 << 63;

/// A direction-independent 5-tuple with the orientation of one packet (see the module
/// documentation). `==` and `Hash` ignore the orientation.
#[derive(Copy, Clone)]
pub struct FlowKey {
    /// Canonical first end's address: high and low 64 bits (IPv4 in the low 32).
    a: [u64; 2],
    /// Canonical second end's address.
    b: [u64; 2],
    /// Port of `a` (bits 0-15), port of `b` (16-31), protocol (32-39), IPv6 (40),
    /// orientation (41), free-slot marker (63).
    tail: u64,
}

#[inline]
fn split(addr: u128) -> [u64; 2] {
    [(addr >> 64) as u64, addr as u64]
}

#[inline]
fn join(w: [u64; 2]) -> u128 {
    (w[0] as u128) << 64 | w[1] as u128
}

impl FlowKey {
    /// The key of a packet from `(src, sport)` to `(dst, dport)` with IP protocol `proto`;
    /// `None` if the two addresses are of different families.
    #[inline]
    pub fn new(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> Option<Self> {
        let (s, d, v6) = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (u32::from(s) as u128, u32::from(d) as u128, 0),
            (IpAddr::V6(s), IpAddr::V6(d)) => (u128::from(s), u128::from(d), V6),
            _ => return None,
        };
        Some(Self::from_words(s, sport, d, dport, proto, v6 != 0))
    }

    /// The key of an IPv4 packet.
    #[inline]
    pub fn v4(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, proto: u8) -> Self {
        Self::from_words(
            u32::from(src) as u128,
            sport,
            u32::from(dst) as u128,
            dport,
            proto,
            false,
        )
    }

    /// The key of an IPv6 packet.
    #[inline]
    pub fn v6(src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16, proto: u8) -> Self {
        Self::from_words(u128::from(src), sport, u128::from(dst), dport, proto, true)
    }

    #[inline]
    fn from_words(s: u128, sport: u16, d: u128, dport: u16, proto: u8, v6: bool) -> Self {
        let fam = if v6 { V6 } else { 0 };
        let p = (proto as u64) << PROTO_SHIFT | fam;
        if (s, sport) <= (d, dport) {
            FlowKey {
                a: split(s),
                b: split(d),
                tail: sport as u64 | (dport as u64) << 16 | p,
            }
        } else {
            FlowKey {
                a: split(d),
                b: split(s),
                tail: dport as u64 | (sport as u64) << 16 | p | REV,
            }
        }
    }

    /// The key of a packet the classifier has extracted; `None` unless it has both
    /// addresses (of one family) and a protocol. Missing ports count as 0.
    #[inline]
    pub fn from_fields(f: &Fields) -> Option<Self> {
        Self::new(
            f.src?,
            f.sport.unwrap_or(0),
            f.dst?,
            f.dport.unwrap_or(0),
            f.proto?,
        )
    }

    /// The key of a frame parsed by [`weir_wire::parse_frame`]; `None` for non-IP frames and
    /// for non-first fragments of TCP and UDP datagrams (their ports are unknown).
    #[inline]
    pub fn from_parsed(p: &weir_wire::Parsed) -> Option<Self> {
        let proto = p.protocol?;
        if p.is_fragment && p.src_port.is_none() && (proto == Proto::TCP || proto == Proto::UDP) {
            return None;
        }
        Self::new(
            p.src_ip?,
            p.src_port.unwrap_or(0),
            p.dst_ip?,
            p.dst_port.unwrap_or(0),
            proto,
        )
    }

    /// The same flow in the other orientation (the reply to this packet).
    #[inline]
    pub fn reversed(&self) -> Self {
        FlowKey {
            tail: self.tail ^ REV,
            ..*self
        }
    }

    /// True if this packet travelled from the canonical second end to the first.
    #[inline]
    pub fn is_reversed(&self) -> bool {
        self.tail & REV != 0
    }

    /// True if `other` has the same orientation as `self` (and, when the keys are equal,
    /// came from the same end). The connection table calls a packet `Side::Orig` when its
    /// key has the orientation of the connection's first packet.
    #[inline]
    pub fn same_orientation(&self, other: &FlowKey) -> bool {
        (self.tail ^ other.tail) & REV == 0
    }

    /// The IP protocol number.
    #[inline]
    pub fn proto(&self) -> u8 {
        (self.tail >> PROTO_SHIFT) as u8
    }

    /// True for an IPv6 key.
    #[inline]
    pub fn is_ipv6(&self) -> bool {
        self.tail & V6 != 0
    }

    fn addr(&self, w: [u64; 2]) -> IpAddr {
        if self.is_ipv6() {
            IpAddr::V6(Ipv6Addr::from(join(w)))
        } else {
            IpAddr::V4(Ipv4Addr::from(w[1] as u32))
        }
    }

    /// The two ends in canonical order.
    pub fn ends(&self) -> ((IpAddr, u16), (IpAddr, u16)) {
        (
            (self.addr(self.a), self.tail as u16),
            (self.addr(self.b), (self.tail >> 16) as u16),
        )
    }

    /// This packet's source address and port.
    pub fn src(&self) -> (IpAddr, u16) {
        let (a, b) = self.ends();
        if self.is_reversed() {
            b
        } else {
            a
        }
    }

    /// This packet's destination address and port.
    pub fn dst(&self) -> (IpAddr, u16) {
        let (a, b) = self.ends();
        if self.is_reversed() {
            a
        } else {
            b
        }
    }

    /// A seeded, direction-independent 64-bit hash; equal to [`Fields::flow_hash`] of the
    /// same packet with the same seed.
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let tag = if self.is_ipv6() { 2 } else { 1 };
        let a = classify::End {
            tag,
            addr: join(self.a),
            port: self.tail as u16,
        };
        let b = classify::End {
            tag,
            addr: join(self.b),
            port: (self.tail >> 16) as u16,
        };
        classify::hash_ends(seed, Some(self.proto()), a, b)
    }

    /// The key of an unused table slot (equal to no constructed key).
    pub(crate) const fn free() -> Self {
        FlowKey {
            a: [0; 2],
            b: [0; 2],
            tail: FREE,
        }
    }

    /// True for the key of an unused table slot.
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        self.tail & FREE != 0
    }
}

impl PartialEq for FlowKey {
    #[inline]
    fn eq(&self, o: &FlowKey) -> bool {
        // `|` rather than `||`: five word compares without branches.
        ((self.a[0] ^ o.a[0])
            | (self.a[1] ^ o.a[1])
            | (self.b[0] ^ o.b[0])
            | (self.b[1] ^ o.b[1])
            | ((self.tail ^ o.tail) & !REV))
            == 0
    }
}

impl Eq for FlowKey {}

impl core::hash::Hash for FlowKey {
    /// Direction-independent (the orientation bit is left out), for use in std maps.
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.a.hash(h);
        self.b.hash(h);
        (self.tail & !REV).hash(h);
    }
}

impl fmt::Display for FlowKey {
    /// `tcp 10.0.0.1:40000 > 192.168.1.2:80` (this packet's direction), IPv6 addresses in
    /// brackets, unknown protocols by number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |f: &mut fmt::Formatter<'_>, (a, p): (IpAddr, u16)| match a {
            IpAddr::V4(a) => write!(f, "{a}:{p}"),
            IpAddr::V6(a) => write!(f, "[{a}]:{p}"),
        };
        match Proto::name(self.proto()) {
            Some(n) => write!(f, "{n} ")?,
            None => write!(f, "proto {} ", self.proto())?,
        }
        end(f, self.src())?;
        f.write_str(" > ")?;
        end(f, self.dst())
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> FlowKey {
        FlowKey::new(ip(src), sport, ip(dst), dport, Proto::TCP).unwrap()
    }

    #[test]
    fn size_is_40_bytes() {
        assert_eq!(core::mem::size_of::<FlowKey>(), 40);
    }

    #[test]
    fn packet_and_reply_share_a_key_with_opposite_orientation() {
        let k = tcp("10.0.0.1", 40000, "192.168.1.2", 80);
        let r = tcp("192.168.1.2", 80, "10.0.0.1", 40000);
        assert_eq!(k, r);
        assert_eq!(k.hash(7), r.hash(7));
        assert!(!k.same_orientation(&r));
        assert!(k.same_orientation(&r.reversed()));
        assert_eq!(k.reversed(), k);
        assert_eq!(k.src(), (ip("10.0.0.1"), 40000));
        assert_eq!(k.dst(), (ip("192.168.1.2"), 80));
        assert_eq!(r.src(), (ip("192.168.1.2"), 80));
        assert_eq!(k.proto(), Proto::TCP);
        assert!(!k.is_ipv6());
        assert_eq!(k.to_string(), "tcp 10.0.0.1:40000 > 192.168.1.2:80");
        assert_eq!(r.to_string(), "tcp 192.168.1.2:80 > 10.0.0.1:40000");
        // The canonical first end is the smaller (address, port).
        assert_eq!(k.ends(), r.ends());
        assert_eq!(k.ends().0, (ip("10.0.0.1"), 40000));

        let v6 = FlowKey::new(ip("2001:db8::2"), 5, ip("2001:db8::1"), 6, Proto::UDP).unwrap();
        let v6r = FlowKey::new(ip("2001:db8::1"), 6, ip("2001:db8::2"), 5, Proto::UDP).unwrap();
        assert_eq!(v6, v6r);
        assert!(v6.is_reversed() && !v6r.is_reversed());
        assert!(v6.is_ipv6());
        assert_eq!(v6.to_string(), "udp [2001:db8::2]:5 > [2001:db8::1]:6");

        // Same address, ports decide the order.
        let s = tcp("10.0.0.1", 9, "10.0.0.1", 8);
        assert!(s.is_reversed());
        assert_eq!(s, tcp("10.0.0.1", 8, "10.0.0.1", 9));
    }

    #[test]
    fn discriminating() {
        let k = tcp("10.0.0.1", 40000, "192.168.1.2", 80);
        // Ports swapped: a different flow.
        let swapped = tcp("10.0.0.1", 80, "192.168.1.2", 40000);
        assert_ne!(k, swapped);
        assert_ne!(k.hash(1), swapped.hash(1));
        // v4 vs v4-mapped v6.
        let mapped = tcp("::ffff:10.0.0.1", 40000, "::ffff:192.168.1.2", 80);
        assert_ne!(k, mapped);
        assert_ne!(k.hash(1), mapped.hash(1));
        // Protocol.
        let udp = FlowKey::new(ip("10.0.0.1"), 40000, ip("192.168.1.2"), 80, Proto::UDP).unwrap();
        assert_ne!(k, udp);
        // Seeded.
        assert_ne!(k.hash(1), k.hash(2));
        // A free slot equals nothing built from a packet.
        assert_ne!(FlowKey::free(), k);
        assert!(FlowKey::free().is_free() && !k.is_free());
    }

    #[test]
    fn constructors() {
        // Mixed families and non-IP: no key.
        assert!(FlowKey::new(ip("10.0.0.1"), 1, ip("::1"), 2, 6).is_none());
        assert!(FlowKey::from_fields(&Fields {
            ethertype: classify::ETHERTYPE_ARP,
            ..Fields::default()
        })
        .is_none());
        let mut f = Fields::ip(ip("10.0.0.1"), ip("10.0.0.2"), Proto::ICMP, None, None);
        let k = FlowKey::from_fields(&f).unwrap();
        assert_eq!(k.src(), (ip("10.0.0.1"), 0));
        assert_eq!(k, FlowKey::from_fields(&f.reversed()).unwrap());
        f.proto = None;
        assert!(FlowKey::from_fields(&f).is_none());
        assert_eq!(
            FlowKey::v4(
                "10.0.0.1".parse().unwrap(),
                1,
                "10.0.0.2".parse().unwrap(),
                2,
                17
            ),
            FlowKey::new(ip("10.0.0.2"), 2, ip("10.0.0.1"), 1, 17).unwrap()
        );
        assert_eq!(
            FlowKey::v6("::1".parse().unwrap(), 1, "::2".parse().unwrap(), 2, 17),
            FlowKey::new(ip("::1"), 1, ip("::2"), 2, 17).unwrap()
        );
        assert_eq!(
            FlowKey::new(ip("10.0.0.1"), 1, ip("10.0.0.2"), 2, 253)
                .unwrap()
                .to_string(),
            "proto 253 10.0.0.1:1 > 10.0.0.2:2"
        );
    }

    #[test]
    fn from_parsed_frames() {
        use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
        let mut buf = [0u8; 128];
        let ipspec = Ipv4Spec::default();
        let spec = TcpSpec {
            src_port: 1234,
            dst_port: 80,
            ..TcpSpec::default()
        };
        let n = build::tcp_v4_frame(&mut buf, &EthSpec::default(), &ipspec, &spec, b"x").unwrap();
        let p = weir_wire::parse_frame(&buf[..n]).unwrap();
        let k = FlowKey::from_parsed(&p).unwrap();
        assert_eq!(k.src(), (IpAddr::V4(ipspec.src), 1234));
        assert_eq!(k.dst(), (IpAddr::V4(ipspec.dst), 80));
        // A non-first TCP fragment has no key; a first one does.
        let frag = weir_wire::Parsed {
            is_fragment: true,
            src_port: None,
            dst_port: None,
            ..p
        };
        assert!(FlowKey::from_parsed(&frag).is_none());
        assert!(FlowKey::from_parsed(&weir_wire::Parsed {
            is_fragment: true,
            ..p
        })
        .is_some());
        // Non-IP.
        assert!(FlowKey::from_parsed(&weir_wire::Parsed::default()).is_none());
    }

    #[test]
    fn hash_is_the_classifier_flow_hash() {
        for (s, d) in [("10.0.0.1", "192.168.1.2"), ("2001:db8::9", "2001:db8::1")] {
            for (sp, dp) in [(40000, 80), (80, 40000), (5, 5)] {
                let f = Fields::ip(ip(s), ip(d), Proto::TCP, Some(sp), Some(dp));
                let k = FlowKey::from_fields(&f).unwrap();
                for seed in [0, 1, 0xdead_beef] {
                    assert_eq!(k.hash(seed), f.flow_hash(seed), "{k} seed {seed}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn reply_key_is_equal(a: u128, b: u128, v6: bool, proto: u8, sp: u16, dp: u16, seed: u64) {
            let mk = |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
            let f = Fields::ip(mk(a), mk(b), proto, Some(sp), Some(dp));
            let k = FlowKey::from_fields(&f).unwrap();
            let r = FlowKey::from_fields(&f.reversed()).unwrap();
            prop_assert_eq!(k, r);
            prop_assert_eq!(k.hash(seed), r.hash(seed));
            prop_assert_eq!(k.hash(seed), f.flow_hash(seed));
            prop_assert_eq!(k.src(), (mk(a), sp));
            prop_assert_eq!(k.dst(), (mk(b), dp));
            prop_assert_eq!(r.src(), (mk(b), dp));
            // Opposite orientation unless both ends are the same.
            prop_assert_eq!(k.same_orientation(&r), (mk(a), sp) == (mk(b), dp));
        }
    }
}
