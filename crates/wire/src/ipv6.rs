//! IPv6 fixed header (RFC 8200 §3) and the extension-header walk
//! (RFC 8200 §4: hop-by-hop, routing, fragment, destination options; plus
//! the authentication header, RFC 4302) that locates the upper-layer header.
//!
//! The traffic class is split into DSCP and ECN (RFC 2474, RFC 3168). IPv6
//! has no header checksum, and the traffic class and flow label are not in
//! the upper-layer pseudo-header, so their setters need no checksum fix-up.
//! Jumbograms (RFC 2675) are not supported: a zero payload length is taken
//! literally.

use core::net::Ipv6Addr;

use crate::field::{rd16, rd32, wr32};
use crate::ip::{self, protocol};
use crate::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Maximum number of extension headers [`Packet::upper_layer`] walks through.
pub const MAX_EXT_HEADERS: usize = 8;

const VTF: usize = 0; // version, traffic class, flow label
const PAYLOAD_LEN: usize = 4;
const NEXT_HEADER: usize = 6;
const HOP_LIMIT: usize = 7;
const SRC: usize = 8;
const DST: usize = 24;

/// Fragment header contents, as found by [`Packet::upper_layer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Fragment offset in **bytes**.
    pub offset: u16,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

/// Where the upper-layer data of an IPv6 packet starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// The upper-layer protocol: the last next-header value. This is also
    /// what is reported for a non-first fragment, whose data does not start
    /// with that protocol's header, and for headers that cannot be walked
    /// (ESP, "no next header" 59, unknown values).
    pub protocol: u8,
    /// Offset of the upper-layer data from the start of the IPv6 header.
    pub offset: usize,
    /// Present if a fragment header was crossed.
    pub fragment: Option<FragmentInfo>,
}

impl UpperLayer {
    /// True unless this is a fragment with a non-zero offset: the data at
    /// `offset` starts with the upper-layer header.
    pub fn has_header(&self) -> bool {
        !matches!(self.fragment, Some(f) if f.offset != 0)
    }

    /// True if a fragment header was present.
    pub fn is_fragment(&self) -> bool {
        self.fragment.is_some()
    }
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the fixed header.
    ///
    /// Errors: [`Error::Truncated`] if the buffer is shorter than 40 bytes
    /// plus the payload length; [`Error::Malformed`] if the version is not 6.
    /// The buffer may be longer (Ethernet padding).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[VTF] >> 4 != 6 {
            return Err(Error::Malformed("IPv6: version is not 6"));
        }
        if b.len() < HEADER_LEN + usize::from(rd16(b, PAYLOAD_LEN)) {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The version field (always 6).
    pub fn version(&self) -> u8 {
        self.b()[VTF] >> 4
    }

    /// Traffic class octet (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (rd16(self.b(), VTF) >> 4) as u8
    }

    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        ip::dscp_of(self.traffic_class())
    }

    /// ECN codepoint (2 bits, see [`ip::ecn`]).
    pub fn ecn(&self) -> u8 {
        ip::ecn_of(self.traffic_class())
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        rd32(self.b(), VTF) & 0x000f_ffff
    }

    /// Payload length (everything after the fixed header, extension headers
    /// included).
    pub fn payload_len(&self) -> u16 {
        rd16(self.b(), PAYLOAD_LEN)
    }

    /// Total length: 40 + payload length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// Next header of the fixed header (see [`ip::protocol`]).
    pub fn next_header(&self) -> u8 {
        self.b()[NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[SRC..SRC + 16]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[DST..DST + 16]);
        Ipv6Addr::from(a)
    }

    /// Everything after the fixed header, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.total_len()]
    }

    /// Walks the extension headers (hop-by-hop, routing, fragment,
    /// destination options, AH) to the upper-layer protocol.
    ///
    /// Stops at the first other next-header value (including ESP and "no next
    /// header"), or after a fragment header with a non-zero offset, in which
    /// case [`UpperLayer::has_header`] is false. The returned offset is from
    /// the start of the IPv6 header and is `<= total_len()`; the upper-layer
    /// data is `&packet[offset..total_len()]`.
    ///
    /// Errors: [`Error::Truncated`] if an extension header runs past the
    /// payload; [`Error::Unsupported`] after [`MAX_EXT_HEADERS`] headers.
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        let b = self.b();
        let end = self.total_len();
        let mut next = self.next_header();
        let mut at = HEADER_LEN;
        let mut fragment = None;
        for _ in 0..=MAX_EXT_HEADERS {
            let len = match next {
                protocol::HOPOPT | protocol::IPV6_ROUTE | protocol::IPV6_OPTS => {
                    if at + 2 > end {
                        return Err(Error::Truncated);
                    }
                    (usize::from(b[at + 1]) + 1) * 8
                }
                protocol::AH => {
                    if at + 2 > end {
                        return Err(Error::Truncated);
                    }
                    (usize::from(b[at + 1]) + 2) * 4
                }
                protocol::IPV6_FRAG => 8,
                _ => {
                    return Ok(UpperLayer {
                        protocol: next,
                        offset: at,
                        fragment,
                    })
                }
            };
            if at + len > end {
                return Err(Error::Truncated);
            }
            let header_next = b[at];
            if next == protocol::IPV6_FRAG {
                let off_flags = rd16(b, at + 2);
                let info = FragmentInfo {
                    offset: off_flags & 0xfff8,
                    more_frags: off_flags & 1 != 0,
                    ident: rd32(b, at + 4),
                };
                fragment = Some(info);
                if info.offset != 0 {
                    return Ok(UpperLayer {
                        protocol: header_next,
                        offset: at + len,
                        fragment,
                    });
                }
            }
            next = header_next;
            at += len;
        }
        Err(Error::Unsupported("IPv6: too many extension headers"))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_vtf(&mut self, f: impl FnOnce(u32) -> u32) {
        let b = self.buffer.as_mut();
        let v = f(rd32(b, VTF));
        wr32(b, VTF, v);
    }

    /// Sets the traffic class octet.
    pub fn set_traffic_class(&mut self, tc: u8) {
        self.set_vtf(|v| (v & 0xf00f_ffff) | (u32::from(tc) << 20));
    }

    /// Sets the DSCP (low 6 bits of `dscp`), keeping ECN.
    pub fn set_dscp(&mut self, dscp: u8) {
        self.set_traffic_class(ip::tos(dscp, self.ecn()));
    }

    /// Sets the ECN field (low 2 bits of `ecn`), keeping DSCP.
    pub fn set_ecn(&mut self, ecn: u8) {
        self.set_traffic_class(ip::tos(self.dscp(), ecn));
    }

    /// Sets the flow label (low 20 bits of `label`).
    pub fn set_flow_label(&mut self, label: u32) {
        self.set_vtf(|v| (v & 0xfff0_0000) | (label & 0x000f_ffff));
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hops: u8) {
        self.buffer.as_mut()[HOP_LIMIT] = hops;
    }

    /// Mutable payload (up to the payload length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// IPv6 UDP 2001:db8::1 port 41394 -> 2001:db8::2 port 53, traffic class
    /// 0xB8 (EF), flow label 0x12345, hop limit 64, payload "weir-udp".
    static UDP6: [u8; 56] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x10, 0x11, 0x40, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, //
        0xa1, 0xb2, 0x00, 0x35, 0x00, 0x10, 0x8f, 0xb4, // UDP header, checksum 0x8FB4
        b'w', b'e', b'i', b'r', b'-', b'u', b'd', b'p',
    ];

    #[test]
    fn fixed_header() {
        let p = Packet::new_checked(&UDP6[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), 0);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 16);
        assert_eq!(p.next_header(), protocol::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload().len(), 16);
        let ul = p.upper_layer().unwrap();
        assert_eq!(
            ul,
            UpperLayer {
                protocol: protocol::UDP,
                offset: 40,
                fragment: None
            }
        );
        assert!(ul.has_header());
    }

    #[test]
    fn setters() {
        let mut b = UDP6;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_ecn(ip::ecn::CE);
        assert_eq!((p.dscp(), p.ecn()), (46, 3));
        p.set_dscp(10);
        assert_eq!((p.dscp(), p.ecn()), (10, 3));
        assert_eq!(p.flow_label(), 0x12345);
        p.set_flow_label(0xfffff_u32 | 0xf00000);
        assert_eq!(p.flow_label(), 0xfffff);
        assert_eq!(p.traffic_class(), (10 << 2) | 3);
        assert_eq!(p.version(), 6);
        p.set_hop_limit(1);
        assert_eq!(p.hop_limit(), 1);
        p.payload_mut()[0] = 0;
        assert_eq!(b[40], 0);
    }

    /// Builds a packet with the given extension chain ending in `upper`.
    fn with_ext(chain: &[(u8, &[u8])], upper: u8, tail: &[u8]) -> std::vec::Vec<u8> {
        let mut v = UDP6[..40].to_vec();
        v[NEXT_HEADER] = chain.first().map_or(upper, |c| c.0);
        for (i, (_, body)) in chain.iter().enumerate() {
            let next = chain.get(i + 1).map_or(upper, |c| c.0);
            v.push(next);
            v.extend_from_slice(body);
        }
        v.extend_from_slice(tail);
        let pl = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&pl.to_be_bytes());
        v
    }

    #[test]
    fn extension_headers() {
        // Hop-by-hop (8 bytes: hdr-ext-len 0, PadN), routing (24 bytes,
        // hdr-ext-len 2), destination options (8), first fragment (8), TCP.
        let hbh: &[u8] = &[0, 1, 4, 0, 0, 0, 0];
        let mut rt = [0u8; 23];
        rt[0] = 2;
        let dst: &[u8] = &[0, 1, 4, 0, 0, 0, 0];
        let frag: &[u8] = &[0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]; // offset 0, M=1
        let v = with_ext(
            &[
                (protocol::HOPOPT, hbh),
                (protocol::IPV6_ROUTE, &rt),
                (protocol::IPV6_OPTS, dst),
                (protocol::IPV6_FRAG, frag),
            ],
            protocol::TCP,
            &[0u8; 20],
        );
        let p = Packet::new_checked(&v[..]).unwrap();
        let ul = p.upper_layer().unwrap();
        assert_eq!(ul.protocol, protocol::TCP);
        assert_eq!(ul.offset, 40 + 8 + 24 + 8 + 8);
        assert_eq!(
            ul.fragment,
            Some(FragmentInfo {
                offset: 0,
                more_frags: true,
                ident: 0xdeadbeef
            })
        );
        assert!(ul.has_header());
        assert!(ul.is_fragment());
    }

    #[test]
    fn non_first_fragment() {
        let frag: &[u8] = &[0, 0x05, 0xa8, 0, 0, 0, 7]; // offset 181*8 = 1448, M=0
        let v = with_ext(&[(protocol::IPV6_FRAG, frag)], protocol::UDP, &[1, 2, 3]);
        let ul = Packet::new_checked(&v[..]).unwrap().upper_layer().unwrap();
        assert_eq!(ul.protocol, protocol::UDP);
        assert_eq!(ul.offset, 48);
        assert!(!ul.has_header());
        assert_eq!(
            ul.fragment,
            Some(FragmentInfo {
                offset: 1448,
                more_frags: false,
                ident: 7
            })
        );
    }

    #[test]
    fn ah_esp_and_nonxt() {
        // AH with payload len 4 => (4+2)*4 = 24 bytes, then ESP (not walked).
        let mut ah = [0u8; 23];
        ah[0] = 4;
        let v = with_ext(&[(protocol::AH, &ah)], protocol::ESP, &[0u8; 8]);
        let ul = Packet::new_checked(&v[..]).unwrap().upper_layer().unwrap();
        assert_eq!((ul.protocol, ul.offset), (protocol::ESP, 64));

        let v = with_ext(&[], protocol::IPV6_NONXT, &[]);
        let ul = Packet::new_checked(&v[..]).unwrap().upper_layer().unwrap();
        assert_eq!((ul.protocol, ul.offset), (protocol::IPV6_NONXT, 40));
    }

    #[test]
    fn malformed_chains() {
        // Extension header length runs past the payload.
        let hbh: &[u8] = &[5, 0, 0, 0, 0, 0, 0];
        let v = with_ext(&[(protocol::HOPOPT, hbh)], protocol::TCP, &[]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), Error::Truncated);
        // Next header announced, nothing there.
        let v = with_ext(&[], protocol::IPV6_FRAG, &[]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), Error::Truncated);
        // Too many headers.
        let opt: &[u8] = &[0, 1, 4, 0, 0, 0, 0];
        let chain = [(protocol::IPV6_OPTS, opt); MAX_EXT_HEADERS + 1];
        let v = with_ext(&chain, protocol::TCP, &[]);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert!(matches!(p.upper_layer(), Err(Error::Unsupported(_))));
        // Exactly the maximum is fine.
        let v = with_ext(&chain[..MAX_EXT_HEADERS], protocol::TCP, &[]);
        let ul = Packet::new_checked(&v[..]).unwrap().upper_layer().unwrap();
        assert_eq!(ul.offset, 40 + 8 * MAX_EXT_HEADERS);
    }

    #[test]
    fn new_checked_errors() {
        assert_eq!(
            Packet::new_checked(&UDP6[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&UDP6[..55]).unwrap_err(),
            Error::Truncated
        );
        let mut b = UDP6;
        b[0] = 0x4b;
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.traffic_class(), p.flow_label(), p.hop_limit(), p.src_addr(), p.dst_addr());
                let _ = p.payload();
                if let Ok(ul) = p.upper_layer() {
                    prop_assert!(ul.offset <= p.total_len());
                }
            }
        }

        #[test]
        fn ext_walk_never_panics(
            nh in prop::sample::select(std::vec![0u8, 43, 44, 60, 51, 6, 17]),
            mut tail in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            // Bias the random tail towards extension header next-header values.
            for (i, b) in tail.iter_mut().enumerate() {
                if i % 8 == 0 && *b % 2 == 0 {
                    *b = [0u8, 43, 44, 60, 51][usize::from(*b) % 5];
                }
            }
            let v = with_ext(&[], nh, &tail);
            let p = Packet::new_checked(&v[..]).unwrap();
            if let Ok(ul) = p.upper_layer() {
                prop_assert!(ul.offset <= p.total_len());
            }
        }
    }
}
