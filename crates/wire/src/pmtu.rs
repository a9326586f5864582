//! Frames too long for the way out: the length rule of a Linux packet socket, and the
//! ICMP message that tells the sender to send smaller packets (path MTU discovery).
//!
//! A forwarder that cannot send a frame because it is longer than the outgoing
//! interface's MTU drops it and, if the sender asked for no fragmentation, answers with
//! - IPv4: Destination Unreachable, code 4 "fragmentation needed and DF set" (RFC 792),
//!   the next-hop MTU in the low 16 bits of the rest-of-header (RFC 1191 §4), quoting as
//!   much of the packet as fits in a 576-byte reply (RFC 1812 §4.3.2.3; at least the IP
//!   header and 8 bytes, RFC 792);
//! - IPv6: Packet Too Big (RFC 4443 §3.2, used by RFC 8201), the 32-bit MTU, quoting as
//!   much as fits in a 1280-byte reply (RFC 4443 §2.4(c)).
//!
//! [`too_big_reply`] writes that reply as a whole Ethernet frame for the interface the
//! packet came in by: the packet's own layer-2 header (VLAN tags kept) with the MAC
//! addresses swapped, and IP addresses swapped. A transparent bridge has no IP address of
//! its own, so the reply's source is the packet's *destination*: the sender's stack
//! matches an ICMP error by the quoted header (addresses, ports, TCP sequence), not by
//! who sent it (Linux `icmp_unreach` → `tcp_v4_err`, `icmpv6_notify` → `tcp_v6_err`), and
//! the destination is an address the sender already talks to, so no firewall on its
//! side sees an unknown host. The source MAC is the packet's destination MAC, already
//! learnt on the sender's side of the bridge, so no switch relearns a port. IPv4 replies
//! carry DSCP CS6 (Linux's `IPTOS_PREC_INTERNETCONTROL` for ICMP errors), TTL 64, DF set
//! (an atomic datagram, identification 0, RFC 6864); IPv6 replies traffic class 0, hop
//! limit 64.
//!
//! No reply ([`NoReply`], each a cause for a counter) to what RFC 1812 §4.3.2.7 and
//! RFC 4443 §2.4(e) forbid answering with an error: an ICMP error, a non-initial IPv4
//! fragment, a source that is not one host (unspecified, loopback, multicast, broadcast,
//! class E), a multicast or broadcast destination (IPv6 would allow a Packet Too Big to a
//! multicast destination, but the reply's source would then be a group address), or a
//! group MAC address on either side. IPv4 without DF is not answered either: its sender
//! allows fragmentation, which a forwarder that does not fragment (weir) can only refuse
//! by dropping.
//!
//! [`max_frame_len`] is the length rule itself, as Linux `tpacket_snd` applies it: a
//! frame may be `mtu` + the 14-byte Ethernet header long, 4 bytes more when its outer
//! EtherType is 802.1Q (`packet_extra_vlan_len_allowed`); a longer one is refused (and
//! with `PACKET_LOSS` silently skipped). The MTU a reply reports is what that rule leaves
//! for the IP packet behind this frame's own layer-2 header: the MTU itself for an
//! untagged or 802.1Q frame, 4 bytes less for two 802.1Q tags, 8 less behind 802.1ad.
//!
//! Parameters: the outgoing interface's MTU (bytes of IP packet; the MTU reported) and the
//! MTU of the interface the reply leaves by (the reply stays within it). Statistics are
//! the caller's: [`NoReply::cause`] names why a frame got no reply. Invariants
//! (property-tested): a reply is a frame the way back sends ([`max_frame_len`]), at most
//! 576 (IPv4) or 1280 (IPv6) bytes of IP, with correct IP and ICMP checksums, quoting at
//! least the IP header and 8 bytes. Nothing here allocates or panics: malformed or
//! truncated input is a [`NoReply`].

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::build::{self, IpSpec, Ipv4Spec, Ipv6Spec};
use crate::ethernet::{self, ethertype};
use crate::field::{rd16, wr16, wr32};
use crate::ip::{self, protocol};
use crate::{icmp, icmpv6, ipv4, ipv6, parse_frame};

/// Longest ICMPv4 error, IP header included (RFC 1812 §4.3.2.3).
pub const V4_REPLY_MAX: usize = 576;
/// Longest ICMPv6 error, IPv6 header included: the IPv6 minimum MTU (RFC 4443 §2.4(c)).
pub const V6_REPLY_MAX: usize = 1280;
/// Destination Unreachable code 4: fragmentation needed and DF set (RFC 792, RFC 1191).
pub const FRAG_NEEDED: u8 = 4;
/// DSCP of IPv4 ICMP errors: CS6, as Linux sends them.
const REPLY_DSCP_V4: u8 = 48;
const REPLY_TTL: u8 = 64;

/// The longest frame like `frame` (the same outer EtherType) a Linux packet socket sends
/// on an interface of `mtu`: `mtu + 14`, or `mtu + 18` behind an 802.1Q tag.
pub fn max_frame_len(frame: &[u8], mtu: u32) -> usize {
    let outer = match frame.get(12..14) {
        Some(t) => rd16(t, 0),
        None => 0,
    };
    frame_limit(outer, mtu)
}

/// [`max_frame_len`] for a frame whose outer EtherType (or TPID) is `outer`.
pub fn frame_limit(outer: u16, mtu: u32) -> usize {
    let tag = if outer == ethertype::VLAN {
        ethernet::VLAN_TAG_LEN
    } else {
        0
    };
    mtu as usize + ethernet::HEADER_LEN + tag
}

/// True if `frame` is longer than an interface of `mtu` sends ([`max_frame_len`]).
#[inline]
pub fn over_mtu(frame: &[u8], mtu: u32) -> bool {
    frame.len() > max_frame_len(frame, mtu)
}

/// The reply [`too_big_reply`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    /// Length of the reply frame.
    pub len: usize,
    /// ICMP Fragmentation Needed (IPv4) or ICMPv6 Packet Too Big (IPv6).
    pub version: ip::Version,
    /// The MTU it reports.
    pub mtu: u32,
}

/// Why a frame too long for the way out gets no ICMP reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoReply {
    /// Neither IPv4 nor IPv6 (ARP, …).
    NotIp,
    /// Headers that do not parse, or a packet within the MTU behind trailing bytes.
    Malformed,
    /// IPv4 without DF: the sender allows fragmentation (weir drops instead).
    MayFragment,
    /// An ICMP error is never answered with another (RFC 1122 §3.2.2, RFC 4443 §2.4(e)).
    IcmpError,
    /// A non-initial IPv4 fragment (RFC 1812 §4.3.2.7).
    Fragment,
    /// A source or destination (IP or MAC) that is not one host.
    NotUnicast,
    /// The way back (its MTU) or the output buffer cannot hold the headers and the
    /// shortest quote.
    NoRoom,
}

impl NoReply {
    /// A short snake_case name for counters and reports.
    pub fn cause(&self) -> &'static str {
        match self {
            NoReply::NotIp => "not_ip",
            NoReply::Malformed => "malformed",
            NoReply::MayFragment => "df_clear",
            NoReply::IcmpError => "icmp_error",
            NoReply::Fragment => "fragment",
            NoReply::NotUnicast => "not_unicast",
            NoReply::NoRoom => "no_room",
        }
    }
}

fn v4_unicast(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.octets()[0] >= 240)
}

fn v6_unicast(a: Ipv6Addr) -> bool {
    !(a.is_unspecified() || a.is_loopback() || a.is_multicast())
}

/// Writes into `buf` the ICMP error that tells the sender of `frame` (an Ethernet frame
/// longer than an interface of `egress_mtu` sends) the MTU to use: Fragmentation Needed
/// for IPv4 with DF, Packet Too Big for IPv6 (see the module). `reply_mtu` is the MTU of
/// the interface the reply leaves by (the one `frame` came in by): the reply's IP packet
/// stays within it and within 576 (IPv4) or 1280 (IPv6) bytes.
pub fn too_big_reply(
    buf: &mut [u8],
    frame: &[u8],
    egress_mtu: u32,
    reply_mtu: u32,
) -> Result<TooBig, NoReply> {
    let p = parse_frame(frame).map_err(|_| NoReply::Malformed)?;
    let l2 = p.l3_offset;
    let (Some(src), Some(dst)) = (p.src_ip, p.dst_ip) else {
        return Err(NoReply::NotIp);
    };
    // the MTU this frame's layer-2 header leaves for its IP packet
    let mtu = max_frame_len(frame, egress_mtu).saturating_sub(l2);
    let packet = frame.get(l2..p.l3_end).ok_or(NoReply::Malformed)?;
    if packet.len() <= mtu {
        return Err(NoReply::Malformed);
    }
    let group = |at: usize| frame[at] & 1 != 0;
    if group(0) || group(6) {
        return Err(NoReply::NotUnicast);
    }
    let l4 = |p: &crate::Parsed| p.l4_offset.and_then(|o| frame.get(o..p.l3_end));
    // the reply's IP header, its limit, and the shortest quote worth sending
    let (reply, limit, min_quote) = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = ipv4::Packet::new_checked(packet).map_err(|_| NoReply::Malformed)?;
            if !ip.dont_frag() {
                return Err(NoReply::MayFragment);
            }
            if !ip.is_first_fragment() {
                return Err(NoReply::Fragment);
            }
            if p.protocol == Some(protocol::ICMP)
                && l4(&p)
                    .and_then(|b| icmp::Packet::new_checked(b).ok())
                    .is_some_and(|m| m.is_error())
            {
                return Err(NoReply::IcmpError);
            }
            if !v4_unicast(s) || !v4_unicast(d) || d.is_broadcast() {
                return Err(NoReply::NotUnicast);
            }
            let spec = Ipv4Spec {
                src: d,
                dst: s,
                dscp: REPLY_DSCP_V4,
                ecn: 0,
                ttl: REPLY_TTL,
                ident: 0,
                dont_frag: true,
            };
            // RFC 792: the internet header and 64 bits of the data
            (Header::V4(spec), V4_REPLY_MAX, ip.header_len() + 8)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            if p.protocol == Some(protocol::ICMPV6)
                && l4(&p)
                    .and_then(|b| icmpv6::Packet::new_checked(b).ok())
                    .is_some_and(|m| m.is_error())
            {
                return Err(NoReply::IcmpError);
            }
            if !v6_unicast(s) || !v6_unicast(d) {
                return Err(NoReply::NotUnicast);
            }
            let spec = Ipv6Spec {
                src: d,
                dst: s,
                dscp: 0,
                ecn: 0,
                flow_label: 0,
                hop_limit: REPLY_TTL,
            };
            (Header::V6(spec), V6_REPLY_MAX, ipv6::HEADER_LEN + 8)
        }
        _ => return Err(NoReply::Malformed),
    };
    let hdr = reply.ip().header_len();
    let mtu = match reply {
        Header::V4(_) => mtu.min(usize::from(u16::MAX)) as u32,
        Header::V6(_) => mtu.min(u32::MAX as usize) as u32,
    };
    let room = limit.min(max_frame_len(frame, reply_mtu).saturating_sub(l2));
    let quote = packet
        .len()
        .min(room.saturating_sub(hdr + icmp::HEADER_LEN));
    if quote < min_quote {
        return Err(NoReply::NoRoom);
    }
    let msg_len = icmp::HEADER_LEN + quote;
    let total = l2 + hdr + msg_len;
    let out = buf.get_mut(..total).ok_or(NoReply::NoRoom)?;
    out[..l2].copy_from_slice(&frame[..l2]);
    out[0..6].copy_from_slice(&frame[6..12]);
    out[6..12].copy_from_slice(&frame[0..6]);
    let msg = &mut out[l2 + hdr..];
    msg[icmp::HEADER_LEN..].copy_from_slice(&packet[..quote]);
    wr16(msg, 2, 0);
    match &reply {
        Header::V4(_) => {
            msg[0] = icmp::DEST_UNREACHABLE;
            msg[1] = FRAG_NEEDED;
            wr16(msg, 4, 0);
            wr16(msg, 6, mtu as u16);
            icmp::Packet::new_checked(msg)
                .map_err(|_| NoReply::NoRoom)?
                .fill_checksum();
        }
        Header::V6(s) => {
            msg[0] = icmpv6::PACKET_TOO_BIG;
            msg[1] = 0;
            wr32(msg, 4, mtu);
            icmpv6::Packet::new_checked(msg)
                .map_err(|_| NoReply::NoRoom)?
                .fill_checksum(&s.src, &s.dst);
        }
    }
    build::write_ip(&mut out[l2..], reply.ip(), reply.protocol(), msg_len)
        .map_err(|_| NoReply::NoRoom)?;
    let version = match reply {
        Header::V4(_) => ip::Version::V4,
        Header::V6(_) => ip::Version::V6,
    };
    Ok(TooBig {
        len: total,
        version,
        mtu,
    })
}

/// The reply's IP header.
enum Header {
    V4(Ipv4Spec),
    V6(Ipv6Spec),
}

impl Header {
    fn ip(&self) -> IpSpec<'_> {
        match self {
            Header::V4(s) => IpSpec::V4(s),
            Header::V6(s) => IpSpec::V6(s),
        }
    }

    fn protocol(&self) -> u8 {
        match self {
            Header::V4(_) => protocol::ICMP,
            Header::V6(_) => protocol::ICMPV6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{udp_v4_frame, udp_v6_frame, EthSpec};
    use crate::ethernet::MacAddr;
    use proptest::prelude::*;

    const PAYLOAD: &[u8] = b"0123456789ab";

    fn v4(buf: &mut [u8], ip: &Ipv4Spec, eth: &EthSpec, payload: &[u8]) -> usize {
        udp_v4_frame(buf, eth, ip, 1000, 53, payload).unwrap()
    }

    #[test]
    fn the_length_rule_is_the_kernels() {
        let mut f = [0u8; 64];
        // untagged: mtu + 14
        assert_eq!(max_frame_len(&f, 1500), 1514);
        wr16(&mut f, 12, ethertype::VLAN);
        assert_eq!(max_frame_len(&f, 1500), 1518);
        // 802.1ad outside: no extra room (packet_extra_vlan_len_allowed: 802.1Q only)
        wr16(&mut f, 12, ethertype::QINQ);
        assert_eq!(max_frame_len(&f, 1500), 1514);
        assert_eq!(max_frame_len(&f[..5], 1400), 1414);
        assert!(!over_mtu(&[0u8; 1414], 1400));
        assert!(over_mtu(&[0u8; 1415], 1400));
    }

    /// A 40-byte IPv4/UDP packet (DF) over an MTU of 36, answered whole.
    ///
    /// Reply IP header words: 45c0 0044 0000 4000 4001 0000 0a00 0002 0a00 0001 sum to
    /// 0xda08, checksum 0x25f7. ICMP: the header words 0304 0000 0000 0024 sum to 0x0328;
    /// the quoted IP header sums to 0xffff (-0, a valid header); the quoted UDP segment
    /// sums to the complement of its pseudo-header (0a00+0001+0a00+0002+0011+0014 =
    /// 0x1428), 0xebd7; 0x0328 + 0xebd7 = 0xeeff, checksum 0x1100.
    #[test]
    fn frag_needed_by_hand() {
        let mut f = [0u8; 128];
        let n = v4(&mut f, &Ipv4Spec::default(), &EthSpec::default(), PAYLOAD);
        assert_eq!(n, 54);
        let mut r = [0u8; 256];
        let m = too_big_reply(&mut r, &f[..n], 36, 1500).unwrap().len;
        assert_eq!(m, 14 + 20 + 8 + 40);
        assert_eq!(&r[0..6], &[2, 0, 0, 0, 0, 1], "to the sender's MAC");
        assert_eq!(&r[6..12], &[2, 0, 0, 0, 0, 2], "from the destination's MAC");
        assert_eq!(&r[12..14], &[0x08, 0x00]);
        assert_eq!(
            &r[14..34],
            &[0x45, 0xc0, 0x00, 0x44, 0, 0, 0x40, 0, 64, 1, 0x25, 0xf7, 10, 0, 0, 2, 10, 0, 0, 1]
        );
        assert_eq!(&r[34..42], &[3, 4, 0x11, 0x00, 0, 0, 0, 36]);
        assert_eq!(&r[42..m], &f[14..n], "the whole packet quoted");
        // the wire crate's own views agree
        let ip = ipv4::Packet::new_checked(&r[14..m]).unwrap();
        assert!(ip.verify_checksum());
        let msg = icmp::Packet::new_checked(ip.payload()).unwrap();
        assert!(msg.verify_checksum() && msg.is_error());
        assert_eq!(msg.rest_of_header(), 36);
    }

    /// A 60-byte IPv6/UDP packet over an MTU of 50. ICMPv6 checksum 0x921b: the message
    /// (header words 0200 0000 0000 0032 and the 60 quoted bytes) with the pseudo-header
    /// fd00::2 → fd00::1, length 68, next header 58 (one's-complement sum computed
    /// separately from the bytes).
    #[test]
    fn packet_too_big_by_hand() {
        let mut f = [0u8; 128];
        let n = udp_v6_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv6Spec::default(),
            1000,
            53,
            PAYLOAD,
        )
        .unwrap();
        assert_eq!(n, 74);
        let mut r = [0u8; 256];
        let t = too_big_reply(&mut r, &f[..n], 50, 1500).unwrap();
        assert_eq!((t.version, t.mtu), (ip::Version::V6, 50));
        let m = t.len;
        assert_eq!(m, 14 + 40 + 8 + 60);
        assert_eq!((&r[0..6], &r[6..12]), (&f[6..12], &f[0..6]));
        assert_eq!(&r[12..14], &[0x86, 0xdd]);
        // version 6, traffic class 0, payload 68, next header 58, hop limit 64
        assert_eq!(&r[14..22], &[0x60, 0, 0, 0, 0, 68, 58, 64]);
        assert_eq!(
            &r[22..38],
            &Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets()
        );
        assert_eq!(
            &r[38..54],
            &Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets()
        );
        assert_eq!(&r[54..62], &[2, 0, 0x92, 0x1b, 0, 0, 0, 50]);
        assert_eq!(&r[62..m], &f[14..n]);
        let msg = icmpv6::Packet::new_checked(&r[54..m]).unwrap();
        let (s, d) = (Ipv6Spec::default().src, Ipv6Spec::default().dst);
        assert!(msg.verify_checksum(&d, &s));
        assert_eq!(msg.mtu(), Some(50));
    }

    /// A full-size packet: the quote stops at the RFC limits (576 and 1280 bytes of reply),
    /// and at the way back's MTU when that is smaller.
    #[test]
    fn quotes_stop_at_the_limits() {
        let mut f = [0u8; 1600];
        let n = v4(
            &mut f,
            &Ipv4Spec::default(),
            &EthSpec::default(),
            &[7u8; 1472],
        );
        assert_eq!(n, 1514);
        let mut r = [0u8; 1600];
        let m = too_big_reply(&mut r, &f[..n], 1400, 1500).unwrap().len;
        assert_eq!(m, 14 + 576);
        let ip = ipv4::Packet::new_checked(&r[14..m]).unwrap();
        assert_eq!(ip.total_len(), 576);
        let msg = icmp::Packet::new_checked(ip.payload()).unwrap();
        assert!(msg.verify_checksum());
        assert_eq!(msg.rest_of_header(), 1400);
        assert_eq!(msg.payload(), &f[14..14 + 548]);
        // a way back of MTU 300: a 300-byte reply
        let m = too_big_reply(&mut r, &f[..n], 1400, 300).unwrap().len;
        assert_eq!(m, 14 + 300);
        // too small for the IP header and 8 bytes: no reply
        assert_eq!(
            too_big_reply(&mut r, &f[..n], 1400, 20 + 8 + 20 + 7).err(),
            Some(NoReply::NoRoom)
        );
        assert_eq!(
            too_big_reply(&mut r[..100], &f[..n], 1400, 1500).err(),
            Some(NoReply::NoRoom)
        );
        let n = udp_v6_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv6Spec::default(),
            1,
            2,
            &[9u8; 1452],
        )
        .unwrap();
        let m = too_big_reply(&mut r, &f[..n], 1280, 1500).unwrap().len;
        assert_eq!(m, 14 + 1280);
        assert_eq!(&r[62..m], &f[14..14 + 1232]);
        let msg = icmpv6::Packet::new_checked(&r[54..m]).unwrap();
        let (s, d) = (Ipv6Spec::default().src, Ipv6Spec::default().dst);
        assert!(msg.verify_checksum(&d, &s));
        assert_eq!(msg.mtu(), Some(1280));
    }

    /// Tags are kept; the MTU reported is what the tags leave for the packet.
    #[test]
    fn vlan_tags_stay_and_shrink_the_mtu() {
        let eth = EthSpec {
            vlan: Some(7),
            ..EthSpec::default()
        };
        let mut f = [0u8; 1600];
        let n = v4(&mut f, &Ipv4Spec::default(), &eth, &[0u8; 1400]);
        let mut r = [0u8; 1600];
        // 802.1Q: 4 bytes of room on top of the MTU, so the packet meets the whole MTU
        let m = too_big_reply(&mut r, &f[..n], 1400, 1500).unwrap().len;
        assert_eq!(&r[12..18], &f[12..18], "tag and EtherType kept");
        let msg = icmp::Packet::new_checked(&r[18 + 20..m]).unwrap();
        assert_eq!(msg.rest_of_header(), 1400);
        // the same frame behind an 802.1ad tag: the kernel gives no extra room
        wr16(&mut f, 12, ethertype::QINQ);
        let m = too_big_reply(&mut r, &f[..n], 1400, 1500).unwrap().len;
        let msg = icmp::Packet::new_checked(&r[18 + 20..m]).unwrap();
        assert_eq!(msg.rest_of_header(), 1396);
    }

    #[test]
    fn what_is_not_answered() {
        let mut f = [0u8; 1600];
        let mut r = [0u8; 1600];
        let big = [0u8; 1000];
        let mut reply = |f: &[u8]| too_big_reply(&mut r, f, 500, 1500);
        let df_clear = Ipv4Spec {
            dont_frag: false,
            ..Ipv4Spec::default()
        };
        let n = v4(&mut f, &df_clear, &EthSpec::default(), &big);
        assert_eq!(reply(&f[..n]).err(), Some(NoReply::MayFragment));
        // within the MTU (a frame too long only by trailing bytes)
        let n = v4(
            &mut f,
            &Ipv4Spec::default(),
            &EthSpec::default(),
            &big[..100],
        );
        assert_eq!(reply(&f[..n + 500]).err(), Some(NoReply::Malformed));
        // a non-initial fragment (offset 8 × 100), DF set
        let n = v4(&mut f, &Ipv4Spec::default(), &EthSpec::default(), &big);
        let mut frag = f;
        wr16(&mut frag, 14 + 6, 0x4000 | 100);
        ipv4::Packet::new_checked(&mut frag[14..n])
            .unwrap()
            .fill_checksum();
        assert_eq!(reply(&frag[..n]).err(), Some(NoReply::Fragment));
        // broadcast, multicast, unspecified, loopback, class E
        let cases: [([u8; 4], [u8; 4]); 5] = [
            ([10, 0, 0, 1], [255, 255, 255, 255]),
            ([10, 0, 0, 1], [224, 0, 0, 1]),
            ([0, 0, 0, 0], [10, 0, 0, 2]),
            ([127, 0, 0, 1], [10, 0, 0, 2]),
            ([240, 0, 0, 1], [10, 0, 0, 2]),
        ];
        for (src, dst) in cases {
            let ip = Ipv4Spec {
                src: src.into(),
                dst: dst.into(),
                ..Ipv4Spec::default()
            };
            let n = v4(&mut f, &ip, &EthSpec::default(), &big);
            assert_eq!(
                reply(&f[..n]).err(),
                Some(NoReply::NotUnicast),
                "{src:?} {dst:?}"
            );
        }
        let eth = EthSpec {
            dst: MacAddr::BROADCAST,
            ..EthSpec::default()
        };
        let n = v4(&mut f, &Ipv4Spec::default(), &eth, &big);
        assert_eq!(reply(&f[..n]).err(), Some(NoReply::NotUnicast));
        let ip6 = Ipv6Spec {
            dst: Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
            ..Ipv6Spec::default()
        };
        let n = udp_v6_frame(&mut f, &EthSpec::default(), &ip6, 1, 2, &big).unwrap();
        assert_eq!(reply(&f[..n]).err(), Some(NoReply::NotUnicast));
        // an ICMP error (a Fragmentation Needed itself) is not answered
        let n = v4(&mut f, &Ipv4Spec::default(), &EthSpec::default(), &big);
        let mut err = [0u8; 1600];
        let m = too_big_reply(&mut err, &f[..n], 500, 1500).unwrap().len;
        assert_eq!(
            too_big_reply(&mut r, &err[..m], 100, 1500).err(),
            Some(NoReply::IcmpError)
        );
        // an ICMPv6 Packet Too Big neither
        let n = udp_v6_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv6Spec::default(),
            1,
            2,
            &big,
        )
        .unwrap();
        let m = too_big_reply(&mut err, &f[..n], 500, 1500).unwrap().len;
        assert_eq!(
            too_big_reply(&mut r, &err[..m], 100, 1500).err(),
            Some(NoReply::IcmpError)
        );
        // ARP is not IP
        let mut arp = [0u8; 600];
        wr16(&mut arp, 12, ethertype::ARP);
        assert_eq!(
            too_big_reply(&mut r, &arp, 100, 1500).err(),
            Some(NoReply::NotIp)
        );
        assert_eq!(
            too_big_reply(&mut r, &arp[..5], 0, 1500).err(),
            Some(NoReply::Malformed)
        );
    }

    proptest! {
        /// Arbitrary bytes never panic; a reply, when there is one, is a valid IPv4 or
        /// IPv6 ICMP error whose checksums hold and which fits the way back.
        #[test]
        fn never_panics(
            data in proptest::collection::vec(any::<u8>(), 0..1600),
            mtu in 0u32..2000,
            back in 0u32..2000,
            out in 0usize..1600,
        ) {
            let mut r = vec![0u8; out];
            if let Ok(t) = too_big_reply(&mut r, &data, mtu, back) {
                check_reply(&r[..t.len], back)?;
            }
        }

        /// Real IPv4 and IPv6 frames of any size with any MTUs: a reply whenever the
        /// packet is over the MTU and the way back has room, always a valid one.
        #[test]
        fn real_frames(len in 0usize..1500, v6 in any::<bool>(), mtu in 0u32..1600,
                       back in 0u32..1600) {
            let mut f = vec![0u8; 1600];
            let payload = vec![0x5a; len.min(1400)];
            let n = if v6 {
                udp_v6_frame(&mut f, &EthSpec::default(), &Ipv6Spec::default(), 1, 2, &payload)
            } else {
                udp_v4_frame(&mut f, &EthSpec::default(), &Ipv4Spec::default(), 1, 2, &payload)
            }.unwrap();
            let mut r = vec![0u8; 1600];
            match too_big_reply(&mut r, &f[..n], mtu, back) {
                Ok(t) => check_reply(&r[..t.len], back)?,
                Err(e) => prop_assert!(
                    matches!(e, NoReply::NoRoom | NoReply::Malformed),
                    "{e:?}"
                ),
            }
            prop_assert_eq!(
                too_big_reply(&mut r, &f[..n], mtu, back).err() == Some(NoReply::Malformed),
                n <= mtu as usize + 14
            );
        }
    }

    fn check_reply(r: &[u8], back: u32) -> Result<(), TestCaseError> {
        let p = parse_frame(r).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert!(r.len() <= max_frame_len(r, back));
        let body = &r[p.l3_offset..p.l3_end];
        match (p.src_ip, p.dst_ip) {
            (Some(IpAddr::V4(_)), _) => {
                prop_assert!(body.len() <= V4_REPLY_MAX);
                // an IP header and 8 bytes quoted, at least
                prop_assert!(body.len() >= 20 + 8 + 20 + 8);
                let ip = ipv4::Packet::new_checked(body).unwrap();
                prop_assert!(ip.verify_checksum());
                let msg = icmp::Packet::new_checked(ip.payload()).unwrap();
                prop_assert!(msg.verify_checksum());
                prop_assert_eq!((msg.msg_type(), msg.msg_code()), (3, 4));
            }
            (Some(IpAddr::V6(s)), Some(IpAddr::V6(d))) => {
                prop_assert!(body.len() <= V6_REPLY_MAX);
                prop_assert!(body.len() >= 40 + 8 + 40 + 8);
                let msg = icmpv6::Packet::new_checked(&body[40..]).unwrap();
                prop_assert!(msg.verify_checksum(&s, &d));
                prop_assert_eq!(msg.msg_type(), icmpv6::PACKET_TOO_BIG);
            }
            _ => prop_assert!(false, "not an IP reply"),
        }
        Ok(())
    }
}
