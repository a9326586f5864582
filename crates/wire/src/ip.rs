//! IP-level constants shared by IPv4 and IPv6: IANA protocol numbers, the
//! IP version, and the DSCP / ECN split of the TOS / traffic-class octet
//! (RFC 2474, RFC 3168).

/// IANA "Assigned Internet Protocol Numbers" (IPv4 protocol / IPv6 next header).
pub mod protocol {
    /// IPv6 hop-by-hop options extension header.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// IGMP.
    pub const IGMP: u8 = 2;
    /// IPv4 encapsulation (IP-in-IP).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation.
    pub const IPV6: u8 = 41;
    /// IPv6 routing extension header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment extension header.
    pub const IPV6_FRAG: u8 = 44;
    /// Generic Routing Encapsulation.
    pub const GRE: u8 = 47;
    /// IPsec Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// IPsec Authentication Header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options extension header.
    pub const IPV6_OPTS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// Explicit Congestion Notification codepoints (RFC 3168 §5).
pub mod ecn {
    /// Not ECN-capable transport.
    pub const NOT_ECT: u8 = 0b00;
    /// ECN-capable transport (1).
    pub const ECT1: u8 = 0b01;
    /// ECN-capable transport (0).
    pub const ECT0: u8 = 0b10;
    /// Congestion experienced.
    pub const CE: u8 = 0b11;
}

/// IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The DSCP (upper six bits) of a TOS / traffic-class octet.
#[inline]
pub const fn dscp_of(tos: u8) -> u8 {
    tos >> 2
}

/// The ECN field (lower two bits) of a TOS / traffic-class octet.
#[inline]
pub const fn ecn_of(tos: u8) -> u8 {
    tos & 0x03
}

/// Builds a TOS / traffic-class octet; excess bits of the inputs are dropped.
#[inline]
pub const fn tos(dscp: u8, ecn: u8) -> u8 {
    ((dscp & 0x3f) << 2) | (ecn & 0x03)
}
