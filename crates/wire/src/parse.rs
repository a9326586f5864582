//! One-shot parse of an Ethernet frame into the fields a classifier needs.
//!
//! [`parse_frame`] walks Ethernet (VLAN tags included), IPv4 or IPv6
//! (extension headers included) and the first transport header, and returns
//! a small `Copy` summary with offsets into the frame. Checksums are not
//! verified. ARP and other non-IP frames parse successfully with the IP
//! fields `None`; protocols other than TCP, UDP and ICMP get their L4 offset
//! but no ports. Non-first fragments get no ports and no L4 offset.

use core::net::IpAddr;

use crate::ethernet::{self, ethertype};
use crate::field::rd16;
use crate::ip::{self, protocol};
use crate::tcp::TcpFlags;
use crate::{icmp, icmpv6, ipv4, ipv6, tcp, udp, Error, Result};

/// Summary of a parsed frame. All offsets are from the start of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Parsed {
    /// VLAN id of the outer tag.
    pub vlan: Option<u16>,
    /// Priority code point of the outer tag.
    pub pcp: Option<u8>,
    /// VLAN id of the inner tag (double-tagged frames).
    pub inner_vlan: Option<u16>,
    /// Innermost EtherType.
    pub ethertype: u16,
    /// IP version, for IPv4 and IPv6 frames.
    pub ip_version: Option<ip::Version>,
    /// Source address.
    pub src_ip: Option<IpAddr>,
    /// Destination address.
    pub dst_ip: Option<IpAddr>,
    /// Upper-layer protocol (IPv4 protocol, or the IPv6 next header after
    /// the extension headers; see [`ipv6::UpperLayer::protocol`]).
    pub protocol: Option<u8>,
    /// DSCP (6 bits).
    pub dscp: Option<u8>,
    /// ECN (2 bits).
    pub ecn: Option<u8>,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: Option<u8>,
    /// True for any fragment (first or not) of a fragmented datagram.
    pub is_fragment: bool,
    /// Source port (TCP, UDP; first fragments only).
    pub src_port: Option<u16>,
    /// Destination port (TCP, UDP; first fragments only).
    pub dst_port: Option<u16>,
    /// TCP flags.
    pub tcp_flags: Option<TcpFlags>,
    /// ICMP / ICMPv6 type.
    pub icmp_type: Option<u8>,
    /// ICMP / ICMPv6 code.
    pub icmp_code: Option<u8>,
    /// Offset of the network-layer header (the Ethernet header length).
    pub l3_offset: usize,
    /// End of the network-layer packet (IPv4 total length / IPv6 payload
    /// length, i.e. excluding Ethernet padding); the frame length for non-IP.
    pub l3_end: usize,
    /// Offset of the transport header; `None` for non-IP and non-first fragments.
    pub l4_offset: Option<usize>,
    /// Offset of the application payload: after the TCP/UDP/ICMP header; at
    /// `l4_offset` for other protocols; the start of the fragment data for
    /// non-first fragments; `l3_offset` for non-IP frames.
    pub payload_offset: usize,
}

impl Default for Parsed {
    /// All `None`, offsets zero.
    fn default() -> Self {
        Parsed::empty(0, 0)
    }
}

impl Parsed {
    fn empty(l3_offset: usize, l3_end: usize) -> Self {
        Parsed {
            vlan: None,
            pcp: None,
            inner_vlan: None,
            ethertype: 0,
            ip_version: None,
            src_ip: None,
            dst_ip: None,
            protocol: None,
            dscp: None,
            ecn: None,
            ttl: None,
            is_fragment: false,
            src_port: None,
            dst_port: None,
            tcp_flags: None,
            icmp_type: None,
            icmp_code: None,
            l3_offset,
            l3_end,
            l4_offset: None,
            payload_offset: l3_offset,
        }
    }

    /// Length of the application payload (`l3_end - payload_offset`).
    pub fn payload_len(&self) -> usize {
        self.l3_end.saturating_sub(self.payload_offset)
    }

    /// The application payload of `frame` (the frame this was parsed from): after the
    /// TCP/UDP/ICMP header, up to the end of the IP packet; empty for a fragment (its
    /// bytes are not a message's start) and for anything that does not fit.
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        if self.is_fragment {
            return &[];
        }
        frame.get(self.payload_offset..self.l3_end).unwrap_or(&[])
    }

    /// The TCP segment of `frame` (the frame this was parsed from), read-only: `None`
    /// for anything but TCP, or a header that does not check.
    pub fn tcp<'a>(&self, frame: &'a [u8]) -> Option<tcp::Packet<&'a [u8]>> {
        self.tcp_flags?;
        let b = frame.get(self.l4_offset?..self.l3_end)?;
        tcp::Packet::new_checked(b).ok()
    }
}

/// Parses an Ethernet frame (without FCS).
///
/// Errors: whatever the layer views report for truncated or malformed
/// headers, including a transport header cut short inside the IP payload.
/// UDP length is checked only for unfragmented datagrams.
pub fn parse_frame(frame: &[u8]) -> Result<Parsed> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let l3 = eth.header_len();
    let mut p = Parsed::empty(l3, frame.len());
    p.vlan = eth.vlan_id();
    p.pcp = eth.pcp();
    p.inner_vlan = eth.inner_vlan_id();
    p.ethertype = eth.ethertype();
    match p.ethertype {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(eth.payload())?;
            p.ip_version = Some(ip::Version::V4);
            p.src_ip = Some(ip.src_addr().into());
            p.dst_ip = Some(ip.dst_addr().into());
            p.protocol = Some(ip.protocol());
            p.dscp = Some(ip.dscp());
            p.ecn = Some(ip.ecn());
            p.ttl = Some(ip.ttl());
            p.is_fragment = ip.is_fragment();
            p.l3_end = l3 + usize::from(ip.total_len());
            let l4 = l3 + ip.header_len();
            if ip.is_first_fragment() {
                transport(&mut p, ip.protocol(), ip.payload(), l4, ip::Version::V4)?;
            } else {
                p.payload_offset = l4;
            }
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(eth.payload())?;
            p.ip_version = Some(ip::Version::V6);
            p.src_ip = Some(ip.src_addr().into());
            p.dst_ip = Some(ip.dst_addr().into());
            p.dscp = Some(ip.dscp());
            p.ecn = Some(ip.ecn());
            p.ttl = Some(ip.hop_limit());
            p.l3_end = l3 + ip.total_len();
            let ul = ip.upper_layer()?;
            p.protocol = Some(ul.protocol);
            p.is_fragment = ul.is_fragment();
            let data = &eth.payload()[ul.offset..ip.total_len()];
            if ul.has_header() {
                transport(&mut p, ul.protocol, data, l3 + ul.offset, ip::Version::V6)?;
            } else {
                p.payload_offset = l3 + ul.offset;
            }
        }
        _ => {}
    }
    Ok(p)
}

/// Fills the transport fields from `data`, the upper-layer bytes at `l4`.
fn transport(p: &mut Parsed, proto: u8, data: &[u8], l4: usize, v: ip::Version) -> Result<()> {
    p.l4_offset = Some(l4);
    p.payload_offset = l4;
    match (proto, v) {
        (protocol::TCP, _) => {
            let t = tcp::Packet::new_checked(data)?;
            p.src_port = Some(t.src_port());
            p.dst_port = Some(t.dst_port());
            p.tcp_flags = Some(t.flags());
            p.payload_offset = l4 + t.header_len();
        }
        (protocol::UDP, _) => {
            // A first fragment holds only part of the datagram, so its UDP
            // length cannot be checked against the buffer.
            if !p.is_fragment {
                udp::Packet::new_checked(data)?;
            }
            let hdr = data.get(..udp::HEADER_LEN).ok_or(Error::Truncated)?;
            p.src_port = Some(rd16(hdr, 0));
            p.dst_port = Some(rd16(hdr, 2));
            p.payload_offset = l4 + udp::HEADER_LEN;
        }
        (protocol::ICMP, ip::Version::V4) => {
            let i = icmp::Packet::new_checked(data)?;
            p.icmp_type = Some(i.msg_type());
            p.icmp_code = Some(i.msg_code());
            p.payload_offset = l4 + icmp::HEADER_LEN;
        }
        (protocol::ICMPV6, ip::Version::V6) => {
            let i = icmpv6::Packet::new_checked(data)?;
            p.icmp_type = Some(i.msg_type());
            p.icmp_code = Some(i.msg_code());
            p.payload_offset = l4 + icmpv6::HEADER_LEN;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, EthSpec, Ipv4Spec, TcpSpec};
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;
    use std::vec::Vec;

    /// Ethernet + IPv4 + the Linux-style SYN of the tcp.rs fixture
    /// (IPv4 checksum 0x278B, TCP checksum 0xBA4F, cross-checked).
    static SYN_FRAME: [u8; 74] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00, //
        0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0x27, 0x8b, //
        0xc0, 0xa8, 0x00, 0x68, 0x5d, 0xb8, 0xd8, 0x22, //
        0xd4, 0x31, 0x00, 0x50, 0x6f, 0x4a, 0x1c, 0x22, 0x00, 0x00, 0x00, 0x00, //
        0xa0, 0x02, 0xfa, 0xf0, 0xba, 0x4f, 0x00, 0x00, //
        0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x9a, 0x3b, 0x4c, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    /// 802.1Q (PCP 5, VID 100) + IPv4 (DSCP 46) UDP 10.1.1.1:5000 ->
    /// 10.1.1.2:5001 "hello", padded to 64 bytes. IPv4 checksum 0x640F,
    /// UDP checksum 0x7EEC (cross-checked).
    static VLAN_UDP: [u8; 64] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, //
        0x81, 0x00, 0xa0, 0x64, 0x08, 0x00, //
        0x45, 0xb8, 0x00, 0x21, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0x64, 0x0f, //
        10, 1, 1, 1, 10, 1, 1, 2, //
        0x13, 0x88, 0x13, 0x89, 0x00, 0x0d, 0x7e, 0xec, b'h', b'e', b'l', b'l', b'o', //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    ];

    /// IPv4 ICMP echo request 10.0.0.1 -> 10.0.0.2 (IPv4 checksum 0x7AF1,
    /// ICMP checksum 0x3B27, cross-checked).
    fn icmp_frame() -> [u8; 74] {
        let mut f = [0u8; 74];
        f[..14].copy_from_slice(&SYN_FRAME[..14]);
        f[14..34].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x3c, 0xab, 0xcd, 0x00, 0x00, 0x80, 0x01, 0x7a, 0xf1, 10, 0, 0, 1,
            10, 0, 0, 2,
        ]);
        f[34..]
            .copy_from_slice(b"\x08\x00\x3b\x27\x12\x34\x00\x01abcdefghijklmnopqrstuvwabcdefghi");
        f
    }

    /// QinQ-tagged IPv6 UDP (the ipv6.rs fixture).
    fn qinq_udp6() -> Vec<u8> {
        let mut f = std::vec![
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, //
            0x88, 0xa8, 0x70, 0xc8, 0x81, 0x00, 0x00, 0x64, 0x86, 0xdd,
        ];
        f.extend_from_slice(&[0x6b, 0x81, 0x23, 0x45, 0x00, 0x10, 0x11, 0x40]);
        f.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).octets());
        f.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).octets());
        f.extend_from_slice(&[0xa1, 0xb2, 0x00, 0x35, 0x00, 0x10, 0x8f, 0xb4]);
        f.extend_from_slice(b"weir-udp");
        f
    }

    #[test]
    fn tcp_syn() {
        let p = parse_frame(&SYN_FRAME).unwrap();
        assert_eq!(p.vlan, None);
        assert_eq!(p.ethertype, ethertype::IPV4);
        assert_eq!(p.ip_version, Some(ip::Version::V4));
        assert_eq!(p.src_ip, Some(Ipv4Addr::new(192, 168, 0, 104).into()));
        assert_eq!(p.dst_ip, Some(Ipv4Addr::new(93, 184, 216, 34).into()));
        assert_eq!(p.protocol, Some(protocol::TCP));
        assert_eq!((p.dscp, p.ecn, p.ttl), (Some(0), Some(0), Some(64)));
        assert_eq!((p.src_port, p.dst_port), (Some(54321), Some(80)));
        assert_eq!(p.tcp_flags, Some(TcpFlags::SYN));
        assert!(!p.is_fragment);
        assert_eq!(
            (p.l3_offset, p.l4_offset, p.payload_offset),
            (14, Some(34), 74)
        );
        assert_eq!((p.l3_end, p.payload_len()), (74, 0));
        assert_eq!((p.icmp_type, p.icmp_code), (None, None));

        // The checksums in the fixture are right.
        let ip = ipv4::Packet::new_checked(&SYN_FRAME[14..]).unwrap();
        assert!(ip.verify_checksum());
        let t = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(t.verify_checksum(ip.src_addr().into(), ip.dst_addr().into()));

        // The builder produces the same bytes.
        let mut buf = [0u8; 74];
        let eth = EthSpec {
            dst: crate::ethernet::MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]),
            src: crate::ethernet::MacAddr([0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]),
            ..EthSpec::default()
        };
        let ip = Ipv4Spec {
            src: Ipv4Addr::new(192, 168, 0, 104),
            dst: Ipv4Addr::new(93, 184, 216, 34),
            ident: 0x1c46,
            ..Ipv4Spec::default()
        };
        let t = TcpSpec {
            src_port: 54321,
            dst_port: 80,
            seq: 0x6f4a1c22,
            flags: TcpFlags::SYN,
            window: 64240,
            mss: Some(1460),
            sack_permitted: true,
            timestamps: Some((0x009a3b4c, 0)),
            window_scale: Some(7),
            ..TcpSpec::default()
        };
        assert_eq!(build::tcp_v4_frame(&mut buf, &eth, &ip, &t, &[]), Ok(74));
        assert_eq!(buf, SYN_FRAME);
    }

    #[test]
    fn vlan_udp_with_padding() {
        let p = parse_frame(&VLAN_UDP).unwrap();
        assert_eq!((p.vlan, p.pcp, p.inner_vlan), (Some(100), Some(5), None));
        assert_eq!(p.dscp, Some(46));
        assert_eq!(p.protocol, Some(protocol::UDP));
        assert_eq!((p.src_port, p.dst_port), (Some(5000), Some(5001)));
        assert_eq!(p.tcp_flags, None);
        assert_eq!(
            (p.l3_offset, p.l4_offset, p.payload_offset),
            (18, Some(38), 46)
        );
        assert_eq!(p.l3_end, 51);
        assert_eq!(&VLAN_UDP[p.payload_offset..p.l3_end], b"hello");
        let ip = ipv4::Packet::new_checked(&VLAN_UDP[18..]).unwrap();
        assert!(ip.verify_checksum());
        let u = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(u.verify_checksum(ip.src_addr().into(), ip.dst_addr().into()));
    }

    #[test]
    fn icmp_echo() {
        let f = icmp_frame();
        let p = parse_frame(&f).unwrap();
        assert_eq!(p.protocol, Some(protocol::ICMP));
        assert_eq!(
            (p.icmp_type, p.icmp_code),
            (Some(icmp::ECHO_REQUEST), Some(0))
        );
        assert_eq!((p.src_port, p.dst_port), (None, None));
        assert_eq!(p.ttl, Some(128));
        assert_eq!((p.l4_offset, p.payload_offset), (Some(34), 42));
        let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert!(icmp::Packet::new_checked(ip.payload())
            .unwrap()
            .verify_checksum());
    }

    #[test]
    fn qinq_ipv6_udp() {
        let f = qinq_udp6();
        let p = parse_frame(&f).unwrap();
        assert_eq!(
            (p.vlan, p.pcp, p.inner_vlan),
            (Some(200), Some(3), Some(100))
        );
        assert_eq!(p.ethertype, ethertype::IPV6);
        assert_eq!(p.ip_version, Some(ip::Version::V6));
        assert_eq!(p.src_ip, Some("2001:db8::1".parse::<IpAddr>().unwrap()));
        assert_eq!(p.dscp, Some(46));
        assert_eq!(p.ttl, Some(64));
        assert_eq!((p.src_port, p.dst_port), (Some(41394), Some(53)));
        assert_eq!(
            (p.l3_offset, p.l4_offset, p.payload_offset),
            (22, Some(62), 70)
        );
        assert_eq!(&f[p.payload_offset..p.l3_end], b"weir-udp");
    }

    #[test]
    fn arp_and_other() {
        let mut f = [0u8; 60];
        f[..6].fill(0xff);
        f[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        f[14..22].copy_from_slice(&[0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01]);
        let p = parse_frame(&f).unwrap();
        assert_eq!(p.ethertype, ethertype::ARP);
        assert_eq!(
            (p.ip_version, p.src_ip, p.protocol, p.src_port),
            (None, None, None, None)
        );
        assert_eq!(
            (p.l3_offset, p.l4_offset, p.payload_offset, p.l3_end),
            (14, None, 14, 60)
        );
        // An 802.3 length field, and a bare 14-byte header, parse too.
        f[12..14].copy_from_slice(&46u16.to_be_bytes());
        assert_eq!(parse_frame(&f).unwrap().ethertype, 46);
        assert!(parse_frame(&f[..14]).is_ok());
    }

    #[test]
    fn ipv4_fragments() {
        let mut buf = [0u8; 128];
        let n = build::udp_v4_frame(
            &mut buf,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            7,
            9,
            &[0xab; 40],
        )
        .unwrap();
        // First fragment: MF set; cut the datagram short (UDP length says 48).
        let mut first = buf;
        first[20] = 0x20;
        first[16..18].copy_from_slice(&(20u16 + 16).to_be_bytes());
        ipv4::Packet::new_checked(&mut first[14..50])
            .unwrap()
            .fill_checksum();
        let p = parse_frame(&first[..50]).unwrap();
        assert!(p.is_fragment);
        assert_eq!((p.src_port, p.dst_port), (Some(7), Some(9)));
        assert_eq!(p.l4_offset, Some(34));
        // The same truncation without MF is a truncated UDP datagram.
        first[20] = 0;
        assert_eq!(parse_frame(&first[..50]), Err(Error::Truncated));

        // Non-first fragment (offset 8 bytes): no ports, no L4 offset.
        let mut later = buf;
        later[20..22].copy_from_slice(&1u16.to_be_bytes());
        let p = parse_frame(&later[..n]).unwrap();
        assert!(p.is_fragment);
        assert_eq!(p.protocol, Some(protocol::UDP));
        assert_eq!((p.src_port, p.dst_port, p.l4_offset), (None, None, None));
        assert_eq!(p.payload_offset, 34);

        // A first fragment too short for the TCP header is an error.
        let mut tiny = SYN_FRAME;
        tiny[16..18].copy_from_slice(&(20u16 + 8).to_be_bytes());
        tiny[20] = 0x20;
        assert_eq!(parse_frame(&tiny), Err(Error::Truncated));
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        let base = qinq_udp6();
        let l3 = 22;
        // Insert hop-by-hop + fragment headers in front of the UDP header.
        let mk = |frag_off_flags: u16| {
            let mut f = base[..l3 + 40].to_vec();
            f[l3 + 6] = protocol::HOPOPT;
            f.extend_from_slice(&[protocol::IPV6_FRAG, 0, 1, 4, 0, 0, 0, 0]);
            f.extend_from_slice(&[protocol::UDP, 0]);
            f.extend_from_slice(&frag_off_flags.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 42]);
            f.extend_from_slice(&base[l3 + 40..]);
            let pl = (f.len() - l3 - 40) as u16;
            f[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
            f
        };
        let f = mk(0x0001); // first fragment, M=1
        let p = parse_frame(&f).unwrap();
        assert!(p.is_fragment);
        assert_eq!(p.protocol, Some(protocol::UDP));
        assert_eq!((p.src_port, p.dst_port), (Some(41394), Some(53)));
        assert_eq!(p.l4_offset, Some(l3 + 56));
        assert_eq!(&f[p.payload_offset..p.l3_end], b"weir-udp");

        let f = mk(0x00b8); // offset 23*8, M=0
        let p = parse_frame(&f).unwrap();
        assert!(p.is_fragment);
        assert_eq!(p.protocol, Some(protocol::UDP));
        assert_eq!(
            (p.src_port, p.l4_offset, p.payload_offset),
            (None, None, l3 + 56)
        );

        // Hop-by-hop header claims more than the payload.
        let mut bad = mk(0);
        bad[l3 + 41] = 9;
        assert_eq!(parse_frame(&bad), Err(Error::Truncated));
    }

    #[test]
    fn truncated_and_malformed() {
        for n in 0..SYN_FRAME.len() {
            assert!(parse_frame(&SYN_FRAME[..n]).is_err(), "len {n}");
        }
        let q = qinq_udp6();
        for n in 0..q.len() {
            assert!(parse_frame(&q[..n]).is_err(), "len {n}");
        }
        let mut bad = SYN_FRAME;
        bad[46] = 0x40; // TCP data offset 4
        assert!(matches!(parse_frame(&bad), Err(Error::Malformed(_))));
        let mut bad = SYN_FRAME;
        bad[14] = 0x65; // IPv6 version in an IPv4 EtherType
        assert!(matches!(parse_frame(&bad), Err(Error::Malformed(_))));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = parse_frame(&data) {
                prop_assert!(p.l3_offset <= p.payload_offset);
                prop_assert!(p.payload_offset <= p.l3_end);
                prop_assert!(p.l3_end <= data.len());
            }
        }

        #[test]
        fn mutated_frames_never_panic(
            which in 0usize..4,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut f = match which {
                0 => SYN_FRAME.to_vec(),
                1 => VLAN_UDP.to_vec(),
                2 => icmp_frame().to_vec(),
                _ => qinq_udp6(),
            };
            for (i, v) in edits {
                let at = i.index(f.len());
                f[at] = v;
            }
            let n = cut.index(f.len() + 1);
            if let Ok(p) = parse_frame(&f[..n]) {
                prop_assert!(p.l3_offset <= p.payload_offset);
                prop_assert!(p.payload_offset <= p.l3_end);
                prop_assert!(p.l3_end <= n);
                if let Some(l4) = p.l4_offset {
                    prop_assert!(l4 <= p.payload_offset);
                }
            }
        }
    }
}
