//! Software segmentation of TCP and UDP super-packets (GSO/TSO/USO), as a NIC or the
//! kernel's `skb_gso_segment` would do it, so that a forwarder that received a 64 KB
//! super-packet from a peer (a veth or tap whose sender has TSO on) sends wire-size frames.
//!
//! Input: one Ethernet frame (VLAN tags allowed) holding IPv4 or IPv6 (extension headers
//! allowed, no fragments) and a TCP or UDP header followed by up to 64 KB of payload, plus
//! the [`VnetHdr`] that came with it (`gso_type`, `gso_size`). Output: `count()` segments,
//! each `write(i, out)` into a caller's buffer (no allocation), each carrying the
//! original headers with, per segment (Linux `tcp_gso_segment`, `__udp_gso_segment`,
//! `inet_gso_segment`, `ipv6_gso_segment`; Open vSwitch `dp-packet-gso.c`):
//! - IPv4: total length, identification `id + i` (mod 2^16), header checksum;
//!   IPv6: payload length (extension headers kept as they are);
//! - TCP: sequence number `seq + i × gso_size` (mod 2^32); FIN and PSH only on the last
//!   segment, CWR only on the first; the full checksum (pseudo-header included);
//! - UDP (`UDP_L4`, one datagram per segment): length and the full checksum.
//!
//! Every segment but the last carries exactly `gso_size` payload bytes; the last carries
//! the rest. A super-packet without payload gives one segment (its headers).
//!
//! The header is not trusted (see [`GsoError`]): a `gso_size` of 0, checksum offsets
//! outside the frame, a GSO type that does not match the headers, UFO (`gso_type` UDP:
//! IP fragmentation, gone from Linux since 4.14) or another type, a fragment, or more
//! than [`MAX_SEGMENTS`] segments are refused with a named cause. Checksums are
//! recomputed from scratch, so a partial checksum in the input does not matter.

use core::fmt;
use core::net::IpAddr;

use crate::field::{rd16, rd32, wr16, wr32};
use crate::ip::{self, protocol};
use crate::vnet::{gso_type, VnetHdr};
use crate::{ipv4, parse_frame, tcp, udp, Error};

/// Most segments one super-packet may make. Linux senders make at most 128 UDP segments
/// (`UDP_MAX_SEGMENTS`) and about 745 TCP ones (64 KB at the 88-byte minimum MSS); a lying
/// `gso_size` of 1 would otherwise turn one frame into 65,000.
pub const MAX_SEGMENTS: usize = 1024;

/// Why a super-packet cannot be segmented. [`GsoError::cause`] names it for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoError {
    /// `gso_size` is 0.
    ZeroSize,
    /// `csum_start + csum_offset` lies outside the frame.
    ChecksumOffsets,
    /// A GSO type weir does not segment (UFO, or an unknown value).
    UnsupportedType(u8),
    /// The GSO type says TCPv4/TCPv6/UDP but the headers say otherwise, or the packet is
    /// an IP fragment.
    Mismatch,
    /// More than [`MAX_SEGMENTS`] segments.
    TooManySegments,
    /// The headers do not parse.
    Headers(Error),
}

impl GsoError {
    /// A short snake_case name for counters and reports.
    pub fn cause(&self) -> &'static str {
        match self {
            GsoError::ZeroSize => "gso_size_zero",
            GsoError::ChecksumOffsets => "csum_offsets_outside",
            GsoError::UnsupportedType(_) => "gso_type_unsupported",
            GsoError::Mismatch => "gso_type_mismatch",
            GsoError::TooManySegments => "too_many_segments",
            GsoError::Headers(_) => "bad_headers",
        }
    }
}

impl fmt::Display for GsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GsoError::ZeroSize => f.write_str("virtio header: gso_size is 0"),
            GsoError::ChecksumOffsets => {
                f.write_str("virtio header: checksum offsets outside the frame")
            }
            GsoError::UnsupportedType(t) => write!(f, "virtio header: GSO type {t} not supported"),
            GsoError::Mismatch => f.write_str("virtio header: GSO type does not match the headers"),
            GsoError::TooManySegments => {
                write!(
                    f,
                    "super-packet would make more than {MAX_SEGMENTS} segments"
                )
            }
            GsoError::Headers(e) => write!(f, "super-packet headers: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GsoError {}

/// Whether the checksum offsets of `hdr` lie inside a frame of `len` bytes (only
/// meaningful when [`VnetHdr::needs_csum`]).
pub fn csum_offsets_ok(hdr: &VnetHdr, len: usize) -> bool {
    usize::from(hdr.csum_start) + usize::from(hdr.csum_offset) + 2 <= len
}

/// A validated super-packet, ready to be cut. See the module documentation.
#[derive(Clone)]
pub struct Segmenter<'a> {
    /// The frame up to the end of the IP packet (Ethernet padding dropped).
    frame: &'a [u8],
    l3: usize,
    l4: usize,
    /// Length of all headers (Ethernet to the end of TCP/UDP): where the payload starts.
    hdr_len: usize,
    v4: bool,
    tcp: bool,
    mss: usize,
    count: usize,
    src: IpAddr,
    dst: IpAddr,
}

impl fmt::Debug for Segmenter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segmenter")
            .field("len", &self.frame.len())
            .field("header_len", &self.hdr_len)
            .field("gso_size", &self.mss)
            .field("count", &self.count)
            .finish()
    }
}

impl<'a> Segmenter<'a> {
    /// Check `frame` against `hdr` (which must describe a super-packet: `hdr.is_gso()`).
    pub fn new(frame: &'a [u8], hdr: &VnetHdr) -> Result<Self, GsoError> {
        let kind = hdr.gso_kind();
        let (want_v4, want_tcp) = match kind {
            gso_type::TCPV4 => (Some(true), true),
            gso_type::TCPV6 => (Some(false), true),
            gso_type::UDP_L4 => (None, false),
            t => return Err(GsoError::UnsupportedType(t)),
        };
        if hdr.gso_size == 0 {
            return Err(GsoError::ZeroSize);
        }
        if hdr.needs_csum() && !csum_offsets_ok(hdr, frame.len()) {
            return Err(GsoError::ChecksumOffsets);
        }
        let p = parse_frame(frame).map_err(GsoError::Headers)?;
        let v4 = match p.ip_version {
            Some(ip::Version::V4) => true,
            Some(ip::Version::V6) => false,
            None => return Err(GsoError::Mismatch),
        };
        let proto = if want_tcp {
            protocol::TCP
        } else {
            protocol::UDP
        };
        if want_v4.is_some_and(|w| w != v4) || p.protocol != Some(proto) || p.is_fragment {
            return Err(GsoError::Mismatch);
        }
        let (Some(l4), Some(src), Some(dst)) = (p.l4_offset, p.src_ip, p.dst_ip) else {
            return Err(GsoError::Mismatch);
        };
        let mss = usize::from(hdr.gso_size);
        let payload = p.l3_end - p.payload_offset;
        let count = payload.div_ceil(mss).max(1);
        if count > MAX_SEGMENTS {
            return Err(GsoError::TooManySegments);
        }
        Ok(Segmenter {
            frame: &frame[..p.l3_end],
            l3: p.l3_offset,
            l4,
            hdr_len: p.payload_offset,
            v4,
            tcp: want_tcp,
            mss,
            count,
            src,
            dst,
        })
    }

    /// Number of segments.
    #[inline]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Length of the headers every segment repeats (Ethernet to the end of TCP/UDP).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.hdr_len
    }

    /// Length of the longest segment (the first): headers + at most `gso_size` bytes.
    pub fn max_segment_len(&self) -> usize {
        self.segment_len(0)
    }

    /// Length of segment `i` (`i < count()`).
    pub fn segment_len(&self, i: usize) -> usize {
        let start = self.hdr_len + i * self.mss;
        self.hdr_len + (self.frame.len().saturating_sub(start)).min(self.mss)
    }

    /// Write segment `i` (`i < count()`) into `out`; returns its length.
    ///
    /// Errors: [`Error::BufferTooSmall`] if `out` is shorter than the segment,
    /// [`Error::Unsupported`] if `i >= count()`.
    pub fn write(&self, i: usize, out: &mut [u8]) -> Result<usize, Error> {
        if i >= self.count {
            return Err(Error::Unsupported("segment index out of range"));
        }
        let (hl, l3, l4) = (self.hdr_len, self.l3, self.l4);
        let start = hl + i * self.mss;
        let n = self.segment_len(i) - hl;
        let total = hl + n;
        let out = out.get_mut(..total).ok_or(Error::BufferTooSmall)?;
        out[..hl].copy_from_slice(&self.frame[..hl]);
        out[hl..].copy_from_slice(&self.frame[start..start + n]);
        // lengths fit in 16 bits: the input's own length fields did
        if self.v4 {
            wr16(out, l3 + 2, (total - l3) as u16);
            let id = rd16(self.frame, l3 + 4).wrapping_add(i as u16);
            wr16(out, l3 + 4, id);
            ipv4::Packet::new_checked(&mut out[l3..])?.fill_checksum();
        } else {
            wr16(out, l3 + 4, (total - l3 - 40) as u16);
        }
        let seg = &mut out[l4..];
        if self.tcp {
            let seq = rd32(self.frame, l4 + 4).wrapping_add((i * self.mss) as u32);
            wr32(seg, 4, seq);
            let mut flags = seg[13];
            if i + 1 != self.count {
                flags &= !(tcp::TcpFlags::FIN.0 | tcp::TcpFlags::PSH.0);
            }
            if i != 0 {
                flags &= !tcp::TcpFlags::CWR.0;
            }
            seg[13] = flags;
            tcp::Packet::new_checked(seg)?.fill_checksum(self.src, self.dst);
        } else {
            let len = seg.len() as u16;
            wr16(seg, 4, len);
            udp::Packet::new_checked(seg)?.fill_checksum(self.src, self.dst);
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};
    use crate::tcp::TcpFlags;
    use crate::vnet::F_NEEDS_CSUM;
    use crate::{ipv6, Parsed};
    use std::vec::Vec;

    fn hdr(kind: u8, mss: u16) -> VnetHdr {
        VnetHdr {
            gso_type: kind,
            gso_size: mss,
            ..VnetHdr::default()
        }
    }

    fn tcp4(payload: &[u8], flags: TcpFlags, seq: u32, ident: u16) -> Vec<u8> {
        let mut buf = std::vec![0u8; payload.len() + 200];
        let ip = Ipv4Spec {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            ident,
            ..Default::default()
        };
        let spec = TcpSpec {
            seq,
            flags,
            timestamps: Some((1, 2)),
            ..TcpSpec::default()
        };
        let n = build::tcp_v4_frame(&mut buf, &EthSpec::default(), &ip, &spec, payload).unwrap();
        buf.truncate(n);
        buf
    }

    fn all(seg: &Segmenter<'_>) -> Vec<Vec<u8>> {
        (0..seg.count())
            .map(|i| {
                let mut out = std::vec![0u8; 2048];
                let n = seg.write(i, &mut out).unwrap();
                assert_eq!(n, seg.segment_len(i));
                out.truncate(n);
                out
            })
            .collect()
    }

    fn checked(f: &[u8]) -> Parsed {
        let p = parse_frame(f).unwrap();
        let (src, dst) = (p.src_ip.unwrap(), p.dst_ip.unwrap());
        let l4 = &f[p.l4_offset.unwrap()..p.l3_end];
        match p.protocol.unwrap() {
            protocol::TCP => assert!(tcp::Packet::new_checked(l4)
                .unwrap()
                .verify_checksum(src, dst)),
            _ => assert!(udp::Packet::new_checked(l4)
                .unwrap()
                .verify_checksum(src, dst)),
        }
        if src.is_ipv4() {
            assert!(ipv4::Packet::new_checked(&f[p.l3_offset..])
                .unwrap()
                .verify_checksum());
        }
        p
    }

    #[test]
    fn tcpv4_worked_example() {
        // 3000 payload bytes at MSS 1448: 1448 + 1448 + 104; headers 14 + 20 + 32 = 66.
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let flags = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        let f = tcp4(&payload, flags, 0xffff_f000, 0xfffe);
        let s = Segmenter::new(&f, &hdr(gso_type::TCPV4, 1448)).unwrap();
        assert_eq!(
            (s.count(), s.header_len(), s.max_segment_len()),
            (3, 66, 1514)
        );
        let segs = all(&s);
        assert_eq!(
            segs.iter().map(Vec::len).collect::<Vec<_>>(),
            [1514, 1514, 170]
        );
        let mut joined = Vec::new();
        for (i, seg) in segs.iter().enumerate() {
            let p = checked(seg);
            let ip = ipv4::Packet::new_checked(&seg[14..]).unwrap();
            assert_eq!(usize::from(ip.total_len()), seg.len() - 14);
            // identification 0xfffe, 0xffff, 0x0000
            assert_eq!(ip.ident(), 0xfffeu16.wrapping_add(i as u16));
            let t = tcp::Packet::new_checked(&seg[34..]).unwrap();
            // sequence numbers wrap: 0xfffff000 + 1448 × i
            assert_eq!(t.seq_number(), 0xffff_f000u32.wrapping_add(1448 * i as u32));
            let fl = p.tcp_flags.unwrap();
            assert_eq!(fl.contains(TcpFlags::CWR), i == 0, "CWR on the first only");
            assert_eq!(fl.contains(TcpFlags::FIN), i == 2, "FIN on the last only");
            assert_eq!(fl.contains(TcpFlags::PSH), i == 2, "PSH on the last only");
            assert!(fl.contains(TcpFlags::ACK));
            assert_eq!(
                t.options(),
                tcp::Packet::new_checked(&f[34..]).unwrap().options()
            );
            joined.extend_from_slice(t.payload());
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn tcpv6_with_extension_header_and_vlan() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let mut buf = std::vec![0u8; 6000];
        let ip = Ipv6Spec {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            ..Default::default()
        };
        let eth = EthSpec {
            vlan: Some(7),
            ..EthSpec::default()
        };
        let n = build::tcp_v6_frame(&mut buf, &eth, &ip, &TcpSpec::default(), &payload).unwrap();
        // insert an 8-byte destination-options header (next header TCP) after the IPv6 header
        let l3 = 18;
        let mut f = buf[..l3 + 40].to_vec();
        f.extend_from_slice(&[protocol::TCP, 0, 1, 4, 0, 0, 0, 0]);
        f.extend_from_slice(&buf[l3 + 40..n]);
        f[l3 + 6] = protocol::IPV6_OPTS;
        let plen = rd16(&f, l3 + 4) + 8;
        wr16(&mut f, l3 + 4, plen);
        let s = Segmenter::new(&f, &hdr(gso_type::TCPV6, 1000)).unwrap();
        assert_eq!(s.count(), 5);
        let mut joined = Vec::new();
        for seg in all(&s) {
            let p = checked(&seg);
            assert_eq!(p.vlan, Some(7));
            let ip = ipv6::Packet::new_checked(&seg[l3..]).unwrap();
            assert_eq!(ip.total_len(), seg.len() - l3);
            assert_eq!(ip.upper_layer().unwrap().offset, 48);
            joined.extend_from_slice(&seg[p.payload_offset..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn udp_gso_makes_one_datagram_per_segment() {
        let payload = [0xabu8; 2500];
        let mut buf = [0u8; 3000];
        let ip = Ipv4Spec::default();
        let n =
            build::udp_v4_frame(&mut buf, &EthSpec::default(), &ip, 5000, 6000, &payload).unwrap();
        let s = Segmenter::new(&buf[..n], &hdr(gso_type::UDP_L4, 1200)).unwrap();
        let segs = all(&s);
        assert_eq!(
            segs.iter().map(Vec::len).collect::<Vec<_>>(),
            [1242, 1242, 142]
        );
        for seg in &segs {
            let p = checked(seg);
            let u = udp::Packet::new_checked(&seg[34..]).unwrap();
            assert_eq!(usize::from(u.len()), seg.len() - 34);
            assert_eq!(p.src_port, Some(5000));
        }
    }

    #[test]
    fn no_payload_gives_one_segment_and_padding_is_dropped() {
        let mut f = tcp4(&[], TcpFlags::ACK | TcpFlags::FIN, 5, 1);
        let len = f.len();
        f.extend_from_slice(&[0u8; 6]); // Ethernet padding
        let s = Segmenter::new(&f, &hdr(gso_type::TCPV4, 1448)).unwrap();
        let segs = all(&s);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0], f[..len]);
    }

    #[test]
    fn refuses_what_it_cannot_segment() {
        let f = tcp4(&[1u8; 3000], TcpFlags::ACK, 0, 0);
        let err = |h: VnetHdr, f: &[u8]| Segmenter::new(f, &h).unwrap_err();
        assert_eq!(err(hdr(gso_type::TCPV4, 0), &f), GsoError::ZeroSize);
        assert_eq!(
            err(hdr(gso_type::UDP, 1448), &f),
            GsoError::UnsupportedType(3)
        );
        assert_eq!(err(hdr(9, 1448), &f), GsoError::UnsupportedType(9));
        assert_eq!(err(hdr(gso_type::TCPV6, 1448), &f), GsoError::Mismatch);
        assert_eq!(err(hdr(gso_type::UDP_L4, 1448), &f), GsoError::Mismatch);
        assert_eq!(err(hdr(gso_type::TCPV4, 2), &f), GsoError::TooManySegments);
        let lying = VnetHdr {
            flags: F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 3031, // 34 + 3031 + 2 = one byte past the 3066-byte frame
            ..hdr(gso_type::TCPV4, 1448)
        };
        assert_eq!(err(lying, &f), GsoError::ChecksumOffsets);
        assert!(matches!(
            err(hdr(gso_type::TCPV4, 1448), &f[..40]),
            GsoError::Headers(_)
        ));
        let mut arp = [0u8; 60];
        arp[12..14].copy_from_slice(&[8, 6]);
        assert_eq!(err(hdr(gso_type::TCPV4, 1448), &arp), GsoError::Mismatch);
        // ECN flag is fine
        Segmenter::new(&f, &hdr(gso_type::TCPV4 | gso_type::ECN, 1448)).unwrap();
        // a short output buffer
        let s = Segmenter::new(&f, &hdr(gso_type::TCPV4, 1448)).unwrap();
        assert_eq!(s.write(0, &mut [0u8; 100]), Err(Error::BufferTooSmall));
        assert!(s.write(3, &mut [0u8; 2048]).is_err());
        for e in [GsoError::ZeroSize, GsoError::Headers(Error::Truncated)] {
            assert!(!e.cause().is_empty() && !std::format!("{e}").is_empty());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Segments re-joined = the original payload; every checksum valid; sequence
        /// numbers contiguous; lengths consistent; flags where they belong.
        #[test]
        fn segments_rejoin_to_the_original(
            len in 0usize..20_000, mss in 88u16..1500, v6: bool, seq: u32, flag_bits: u8,
            udp: bool, vlan: bool,
        ) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut buf = std::vec![0u8; len + 200];
            let eth = EthSpec { vlan: vlan.then_some(3), ..EthSpec::default() };
            let flags = TcpFlags(flag_bits & 0xf9 | TcpFlags::ACK.0); // no SYN/RST
            let spec = TcpSpec { seq, flags, ..TcpSpec::default() };
            let n = match (v6, udp) {
                (false, false) => build::tcp_v4_frame(&mut buf, &eth, &Ipv4Spec::default(), &spec, &payload),
                (true, false) => build::tcp_v6_frame(&mut buf, &eth, &Ipv6Spec::default(), &spec, &payload),
                (false, true) => build::udp_v4_frame(&mut buf, &eth, &Ipv4Spec::default(), 1, 2, &payload),
                (true, true) => build::udp_v6_frame(&mut buf, &eth, &Ipv6Spec::default(), 1, 2, &payload),
            }.unwrap();
            let kind = match (v6, udp) {
                (_, true) => gso_type::UDP_L4,
                (false, false) => gso_type::TCPV4,
                (true, false) => gso_type::TCPV6,
            };
            let s = Segmenter::new(&buf[..n], &hdr(kind, mss)).unwrap();
            proptest::prop_assert_eq!(s.count(), len.div_ceil(usize::from(mss)).max(1));
            let mut joined = Vec::new();
            for (i, seg) in all(&s).iter().enumerate() {
                let p = checked(seg);
                proptest::prop_assert!(seg.len() <= s.header_len() + usize::from(mss));
                proptest::prop_assert_eq!(p.l3_end, seg.len());
                if !udp {
                    let t = tcp::Packet::new_checked(&seg[p.l4_offset.unwrap()..]).unwrap();
                    proptest::prop_assert_eq!(t.seq_number(), seq.wrapping_add(joined.len() as u32));
                    let last = i + 1 == s.count();
                    let fl = t.flags();
                    proptest::prop_assert_eq!(fl.contains(TcpFlags::FIN), last && flags.contains(TcpFlags::FIN));
                    proptest::prop_assert_eq!(fl.contains(TcpFlags::PSH), last && flags.contains(TcpFlags::PSH));
                    proptest::prop_assert_eq!(fl.contains(TcpFlags::CWR), i == 0 && flags.contains(TcpFlags::CWR));
                }
                joined.extend_from_slice(&seg[p.payload_offset..]);
            }
            proptest::prop_assert_eq!(joined, payload);
        }

        /// Any virtio header over any bytes: an error or valid segments, never a panic.
        #[test]
        fn random_input_never_panics(h in proptest::array::uniform10(0u8..), f in proptest::collection::vec(0u8.., 0..3000)) {
            let h = VnetHdr::parse(&h).unwrap();
            if let Ok(s) = Segmenter::new(&f, &h) {
                let mut out = std::vec![0u8; 65_600];
                for i in 0..s.count() {
                    let _ = s.write(i, &mut out);
                }
            }
            let mut g = f.clone();
            let _ = crate::fixup::complete_partial_checksum(&mut g, h.csum_start.into(), h.csum_offset.into());
        }

        /// A real super-packet with a random virtio header and random byte edits (lengths,
        /// header lengths, versions): an error or valid-length segments, never a panic.
        #[test]
        fn corrupted_super_packets_never_panic(
            h in proptest::array::uniform10(0u8..), edits in proptest::collection::vec((0usize..120, 0u8..), 0..6),
            v6: bool, cut in 0usize..200,
        ) {
            let mut buf = std::vec![0u8; 4000];
            let spec = TcpSpec { timestamps: Some((1, 2)), ..TcpSpec::default() };
            let n = if v6 {
                build::tcp_v6_frame(&mut buf, &EthSpec::default(), &Ipv6Spec::default(), &spec, &[5u8; 3500])
            } else {
                build::tcp_v4_frame(&mut buf, &EthSpec::default(), &Ipv4Spec::default(), &spec, &[5u8; 3500])
            }.unwrap();
            let mut f = buf[..n - cut].to_vec();
            for (at, b) in edits {
                f[at] = b;
            }
            let mut h = VnetHdr::parse(&h).unwrap();
            h.gso_type = if h.gso_type & 1 == 0 { gso_type::TCPV4 } else { h.gso_type };
            if let Ok(s) = Segmenter::new(&f, &h) {
                let mut out = std::vec![0u8; 65_600];
                for i in 0..s.count() {
                    let n = s.write(i, &mut out).unwrap();
                    proptest::prop_assert_eq!(n, s.segment_len(i));
                }
            }
        }
    }
}
