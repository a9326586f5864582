//! Writers for complete, valid Ethernet frames (correct lengths and
//! checksums), for tests, the simulator and the testbed.
//!
//! Each function writes one frame at the start of `buf` and returns its
//! length; bytes after it are untouched. Frames are not padded to the
//! Ethernet minimum of 60 bytes. Errors: [`Error::BufferTooSmall`] if `buf`
//! cannot hold the frame, [`Error::Unsupported`] if the payload does not fit
//! the IP length fields.
//!
//! ```
//! use weir_wire::build::{self, EthSpec, Ipv4Spec};
//! let mut buf = [0u8; 128];
//! let n = build::udp_v4_frame(&mut buf, &EthSpec::default(), &Ipv4Spec::default(), 1000, 53, b"q")
//!     .unwrap();
//! let p = weir_wire::parse_frame(&buf[..n]).unwrap();
//! assert_eq!(p.dst_port, Some(53));
//! ```

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ethernet::{self, ethertype, MacAddr};
use crate::field::{wr16, wr32};
use crate::ip::{self, protocol};
use crate::tcp::{TcpFlags, TcpOption};
use crate::{icmp, ipv4, ipv6, tcp, udp, Error, Result};

/// Ethernet header parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthSpec {
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// One 802.1Q tag with this VLAN id (low 12 bits), if set.
    pub vlan: Option<u16>,
    /// Priority code point for the tag (ignored when untagged).
    pub pcp: u8,
}

impl Default for EthSpec {
    /// `02:00:00:00:00:01 -> 02:00:00:00:00:02`, untagged.
    fn default() -> Self {
        EthSpec {
            src: MacAddr([0x02, 0, 0, 0, 0, 0x01]),
            dst: MacAddr([0x02, 0, 0, 0, 0, 0x02]),
            vlan: None,
            pcp: 0,
        }
    }
}

/// IPv4 header parameters (no options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Spec {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Time to live.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Default for Ipv4Spec {
    /// `10.0.0.1 -> 10.0.0.2`, TTL 64, DF set, best effort.
    fn default() -> Self {
        Ipv4Spec {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }
    }
}

/// IPv6 header parameters (no extension headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Spec {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Default for Ipv6Spec {
    /// `fd00::1 -> fd00::2`, hop limit 64.
    fn default() -> Self {
        Ipv6Spec {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    }
}

/// TCP header parameters. Options are written in Linux SYN order (MSS,
/// SACK-permitted, timestamps, NOP, window scale) with NOP padding so the
/// option area is a multiple of four bytes (at most 20 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpSpec {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// MSS option.
    pub mss: Option<u16>,
    /// Window-scale option.
    pub window_scale: Option<u8>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// Timestamps option (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

impl TcpSpec {
    /// Writes the option area into `buf`: this spec's options, then `extra`, then NOPs up
    /// to a multiple of four bytes; returns its length.
    fn emit_options(&self, extra: &[TcpOption], buf: &mut [u8; MAX_OPTIONS]) -> Result<usize> {
        let mut at = 0;
        let mut put = |o: TcpOption, at: &mut usize| -> Result<()> {
            let room = buf.get_mut(*at..).unwrap_or_default();
            *at += o.emit(room).map_err(|e| match e {
                Error::BufferTooSmall => Error::Unsupported("TCP options longer than 40 bytes"),
                e => e,
            })?;
            Ok(())
        };
        if let Some(mss) = self.mss {
            put(TcpOption::Mss(mss), &mut at)?;
        }
        match (self.sack_permitted, self.timestamps) {
            (true, Some((tsval, tsecr))) => {
                put(TcpOption::SackPermitted, &mut at)?;
                put(TcpOption::Timestamps { tsval, tsecr }, &mut at)?;
            }
            (false, Some((tsval, tsecr))) => {
                put(TcpOption::Nop, &mut at)?;
                put(TcpOption::Nop, &mut at)?;
                put(TcpOption::Timestamps { tsval, tsecr }, &mut at)?;
            }
            (true, None) => {
                put(TcpOption::Nop, &mut at)?;
                put(TcpOption::Nop, &mut at)?;
                put(TcpOption::SackPermitted, &mut at)?;
            }
            (false, None) => {}
        }
        if let Some(shift) = self.window_scale {
            put(TcpOption::Nop, &mut at)?;
            put(TcpOption::WindowScale(shift), &mut at)?;
        }
        for o in extra {
            put(*o, &mut at)?;
        }
        while at % 4 != 0 {
            put(TcpOption::Nop, &mut at)?;
        }
        Ok(at)
    }
}

/// The largest TCP option area (data offset 15).
const MAX_OPTIONS: usize = tcp::MAX_HEADER_LEN - tcp::HEADER_LEN;

/// Which IP header to write.
#[derive(Clone, Copy)]
pub(crate) enum IpSpec<'a> {
    V4(&'a Ipv4Spec),
    V6(&'a Ipv6Spec),
}

impl IpSpec<'_> {
    pub(crate) fn header_len(self) -> usize {
        match self {
            IpSpec::V4(_) => ipv4::HEADER_LEN,
            IpSpec::V6(_) => ipv6::HEADER_LEN,
        }
    }

    fn addrs(self) -> (IpAddr, IpAddr) {
        match self {
            IpSpec::V4(s) => (s.src.into(), s.dst.into()),
            IpSpec::V6(s) => (s.src.into(), s.dst.into()),
        }
    }
}

fn write_eth(buf: &mut [u8], eth: &EthSpec, ethertype: u16) -> usize {
    buf[0..6].copy_from_slice(&eth.dst.0);
    buf[6..12].copy_from_slice(&eth.src.0);
    match eth.vlan {
        Some(vid) => {
            wr16(buf, 12, ethertype::VLAN);
            wr16(buf, 14, (u16::from(eth.pcp & 0x07) << 13) | (vid & 0x0fff));
            wr16(buf, 16, ethertype);
            ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN
        }
        None => {
            wr16(buf, 12, ethertype);
            ethernet::HEADER_LEN
        }
    }
}

/// Writes the IP header for an upper-layer message of `l4_len` bytes.
pub(crate) fn write_ip(buf: &mut [u8], ip: IpSpec<'_>, proto: u8, l4_len: usize) -> Result<()> {
    match ip {
        IpSpec::V4(s) => {
            let total = u16::try_from(ipv4::HEADER_LEN + l4_len)
                .map_err(|_| Error::Unsupported("payload too large for IPv4"))?;
            buf[0] = 0x45;
            buf[1] = ip::tos(s.dscp, s.ecn);
            wr16(buf, 2, total);
            wr16(buf, 4, s.ident);
            wr16(buf, 6, if s.dont_frag { 0x4000 } else { 0 });
            buf[8] = s.ttl;
            buf[9] = proto;
            wr16(buf, 10, 0);
            buf[12..16].copy_from_slice(&s.src.octets());
            buf[16..20].copy_from_slice(&s.dst.octets());
            ipv4::Packet::new_checked(&mut buf[..usize::from(total)])?.fill_checksum();
        }
        IpSpec::V6(s) => {
            let plen = u16::try_from(l4_len)
                .map_err(|_| Error::Unsupported("payload too large for IPv6 (no jumbograms)"))?;
            let vtf = (6u32 << 28)
                | (u32::from(ip::tos(s.dscp, s.ecn)) << 20)
                | (s.flow_label & 0x000f_ffff);
            wr32(buf, 0, vtf);
            wr16(buf, 4, plen);
            buf[6] = proto;
            buf[7] = s.hop_limit;
            buf[8..24].copy_from_slice(&s.src.octets());
            buf[24..40].copy_from_slice(&s.dst.octets());
        }
    }
    Ok(())
}

/// Common frame assembly: checks space, writes Ethernet and IP headers, and
/// hands the upper-layer region (`l4_len` bytes) to `write_l4`.
fn frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: IpSpec<'_>,
    proto: u8,
    l4_len: usize,
    write_l4: impl FnOnce(&mut [u8], IpAddr, IpAddr) -> Result<()>,
) -> Result<usize> {
    let eth_len = ethernet::HEADER_LEN + if eth.vlan.is_some() { 4 } else { 0 };
    let total = eth_len + ip.header_len() + l4_len;
    if buf.len() < total {
        return Err(Error::BufferTooSmall);
    }
    let buf = &mut buf[..total];
    let et = match ip {
        IpSpec::V4(_) => ethertype::IPV4,
        IpSpec::V6(_) => ethertype::IPV6,
    };
    write_eth(buf, eth, et);
    let (_, ip_buf) = buf.split_at_mut(eth_len);
    write_ip(ip_buf, ip, proto, l4_len)?;
    let (src, dst) = ip.addrs();
    write_l4(&mut ip_buf[ip.header_len()..], src, dst)?;
    Ok(total)
}

fn udp_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: IpSpec<'_>,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize> {
    let len = udp::HEADER_LEN + payload.len();
    let len16 = u16::try_from(len).map_err(|_| Error::Unsupported("payload too large for UDP"))?;
    frame(buf, eth, ip, protocol::UDP, len, |l4, src, dst| {
        wr16(l4, 0, src_port);
        wr16(l4, 2, dst_port);
        wr16(l4, 4, len16);
        wr16(l4, 6, 0);
        l4[udp::HEADER_LEN..].copy_from_slice(payload);
        udp::Packet::new_checked(l4)?.fill_checksum(src, dst);
        Ok(())
    })
}

fn tcp_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: IpSpec<'_>,
    spec: &TcpSpec,
    extra: &[TcpOption],
    payload: &[u8],
) -> Result<usize> {
    let mut opts = [0u8; MAX_OPTIONS];
    let opt_len = spec.emit_options(extra, &mut opts)?;
    let hl = tcp::HEADER_LEN + opt_len;
    frame(
        buf,
        eth,
        ip,
        protocol::TCP,
        hl + payload.len(),
        |l4, src, dst| {
            wr16(l4, 0, spec.src_port);
            wr16(l4, 2, spec.dst_port);
            wr32(l4, 4, spec.seq);
            wr32(l4, 8, spec.ack);
            l4[12] = ((hl / 4) as u8) << 4;
            l4[13] = spec.flags.bits();
            wr16(l4, 14, spec.window);
            wr16(l4, 16, 0);
            wr16(l4, 18, spec.urgent);
            l4[tcp::HEADER_LEN..hl].copy_from_slice(&opts[..opt_len]);
            l4[hl..].copy_from_slice(payload);
            tcp::Packet::new_checked(l4)?.fill_checksum(src, dst);
            Ok(())
        },
    )
}

/// Writes an Ethernet / IPv4 / UDP frame.
pub fn udp_v4_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv4Spec,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize> {
    udp_frame(buf, eth, IpSpec::V4(ip), src_port, dst_port, payload)
}

/// Writes an Ethernet / IPv6 / UDP frame.
pub fn udp_v6_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv6Spec,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Result<usize> {
    udp_frame(buf, eth, IpSpec::V6(ip), src_port, dst_port, payload)
}

/// Writes an Ethernet / IPv4 / TCP frame (options per [`TcpSpec`]).
pub fn tcp_v4_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv4Spec,
    tcp: &TcpSpec,
    payload: &[u8],
) -> Result<usize> {
    tcp_frame(buf, eth, IpSpec::V4(ip), tcp, &[], payload)
}

/// Writes an Ethernet / IPv6 / TCP frame (options per [`TcpSpec`]).
pub fn tcp_v6_frame(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv6Spec,
    tcp: &TcpSpec,
    payload: &[u8],
) -> Result<usize> {
    tcp_frame(buf, eth, IpSpec::V6(ip), tcp, &[], payload)
}

/// Writes an Ethernet / IPv4 / TCP frame whose options are [`TcpSpec`]'s followed by
/// `extra` as given (any kinds, in any order: e.g. `NOP NOP SACK` after the timestamps of
/// an ACK), NOP-padded to a multiple of four bytes. Errors also:
/// [`Error::Unsupported`] if the options exceed 40 bytes, [`Error::Malformed`] for an
/// option [`TcpOption::emit`] refuses.
pub fn tcp_v4_frame_opts(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv4Spec,
    tcp: &TcpSpec,
    extra: &[TcpOption],
    payload: &[u8],
) -> Result<usize> {
    tcp_frame(buf, eth, IpSpec::V4(ip), tcp, extra, payload)
}

/// Writes an Ethernet / IPv6 / TCP frame with extra options (as [`tcp_v4_frame_opts`]).
pub fn tcp_v6_frame_opts(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv6Spec,
    tcp: &TcpSpec,
    extra: &[TcpOption],
    payload: &[u8],
) -> Result<usize> {
    tcp_frame(buf, eth, IpSpec::V6(ip), tcp, extra, payload)
}

/// Writes an ICMP echo request (`request == true`) or echo reply message with
/// its checksum: the ICMP header and payload only, as a raw `IPPROTO_ICMP`
/// socket sends it (the kernel adds the IP header). Returns its length,
/// `8 + payload.len()`.
pub fn icmp_echo(
    buf: &mut [u8],
    request: bool,
    ident: u16,
    seq_no: u16,
    payload: &[u8],
) -> Result<usize> {
    let len = icmp::HEADER_LEN + payload.len();
    let m = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
    m[0] = if request {
        icmp::ECHO_REQUEST
    } else {
        icmp::ECHO_REPLY
    };
    m[1] = 0;
    wr16(m, 2, 0);
    wr16(m, 4, ident);
    wr16(m, 6, seq_no);
    m[icmp::HEADER_LEN..].copy_from_slice(payload);
    icmp::Packet::new_checked(m)?.fill_checksum();
    Ok(len)
}

/// Writes an Ethernet / IPv4 / ICMP echo request (`request == true`) or
/// echo reply frame.
pub fn icmp_echo_v4(
    buf: &mut [u8],
    eth: &EthSpec,
    ip: &Ipv4Spec,
    request: bool,
    ident: u16,
    seq_no: u16,
    payload: &[u8],
) -> Result<usize> {
    let len = icmp::HEADER_LEN + payload.len();
    frame(buf, eth, IpSpec::V4(ip), protocol::ICMP, len, |l4, _, _| {
        icmp_echo(l4, request, ident, seq_no, payload).map(|_| ())
    })
}

/// Writes the RST a TCP endpoint with no connection would answer `frame` (parsed as `p`)
/// with (RFC 9293 §3.10.7.1, "If the state is CLOSED"): from the segment's destination to
/// its source, MAC addresses swapped and the outer VLAN tag kept; a segment without ACK
/// gets `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>` (SYN and FIN count one each), one
/// with ACK gets `<SEQ=SEG.ACK><CTL=RST>`. Errors: [`Error::Unsupported`] for a frame
/// that is not a whole TCP segment or has two VLAN tags, [`Error::BufferTooSmall`].
pub fn tcp_reset_reply(buf: &mut [u8], frame: &[u8], p: &crate::Parsed) -> Result<usize> {
    let (Some(src), Some(dst), Some(sport), Some(dport), Some(flags), Some(l4)) = (
        p.src_ip,
        p.dst_ip,
        p.src_port,
        p.dst_port,
        p.tcp_flags,
        p.l4_offset,
    ) else {
        return Err(Error::Unsupported("not a TCP segment"));
    };
    if p.inner_vlan.is_some() {
        return Err(Error::Unsupported("double-tagged frame"));
    }
    let seg = frame
        .get(l4..p.l3_end)
        .and_then(|b| tcp::Packet::new_checked(b).ok())
        .ok_or(Error::Unsupported("truncated TCP header"))?;
    let mac = |at: usize| {
        let mut m = [0u8; 6];
        m.copy_from_slice(&frame[at..at + 6]);
        MacAddr(m)
    };
    let eth = EthSpec {
        src: mac(0),
        dst: mac(6),
        vlan: p.vlan,
        pcp: p.pcp.unwrap_or(0),
    };
    let mut spec = TcpSpec {
        src_port: dport,
        dst_port: sport,
        ..TcpSpec::default()
    };
    if flags.contains(TcpFlags::ACK) {
        spec.seq = seg.ack_number();
        spec.flags = TcpFlags::RST;
    } else {
        let len = p.payload_len() as u32
            + u32::from(flags.contains(TcpFlags::SYN))
            + u32::from(flags.contains(TcpFlags::FIN));
        spec.ack = seg.seq_number().wrapping_add(len);
        spec.flags = TcpFlags::RST | TcpFlags::ACK;
    }
    match (dst, src) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = Ipv4Spec {
                src: s,
                dst: d,
                ..Ipv4Spec::default()
            };
            tcp_v4_frame(buf, &eth, &ip, &spec, &[])
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Spec {
                src: s,
                dst: d,
                ..Ipv6Spec::default()
            };
            tcp_v6_frame(buf, &eth, &ip, &spec, &[])
        }
        _ => Err(Error::Unsupported("mixed IP versions")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_frame;
    use proptest::prelude::*;

    /// The reply's TCP header and the checksums of the frame `tcp_reset_reply` wrote.
    fn reset_of(frame: &[u8]) -> (crate::Parsed, u32, u32, bool) {
        let mut buf = [0u8; 128];
        let p = parse_frame(frame).unwrap();
        let n = tcp_reset_reply(&mut buf, frame, &p).unwrap();
        let r = parse_frame(&buf[..n]).unwrap();
        let seg = tcp::Packet::new_checked(&buf[r.l4_offset.unwrap()..r.l3_end]).unwrap();
        let ok = seg.verify_checksum(r.src_ip.unwrap(), r.dst_ip.unwrap());
        let (seq, ack) = (seg.seq_number(), seg.ack_number());
        // MAC addresses swapped
        assert_eq!((&buf[0..6], &buf[6..12]), (&frame[6..12], &frame[0..6]));
        (r, seq, ack, ok)
    }

    #[test]
    fn reset_answers_a_syn_and_an_ack_as_rfc_9293_says() {
        // a SYN, seq 1000, 10.0.0.1:40000 -> 10.0.0.2:80: <SEQ=0><ACK=1001><CTL=RST,ACK>
        let mut f = [0u8; 256];
        let syn = TcpSpec {
            src_port: 40000,
            dst_port: 80,
            seq: 1000,
            flags: TcpFlags::SYN,
            window: 64240,
            mss: Some(1460),
            ..TcpSpec::default()
        };
        let eth = EthSpec {
            vlan: Some(7),
            ..EthSpec::default()
        };
        let n = tcp_v4_frame(&mut f, &eth, &Ipv4Spec::default(), &syn, &[]).unwrap();
        let (r, seq, ack, ok) = reset_of(&f[..n]);
        assert!(ok, "checksum");
        assert_eq!(r.tcp_flags, Some(TcpFlags::RST | TcpFlags::ACK));
        assert_eq!((seq, ack), (0, 1001));
        assert_eq!(r.src_ip, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))));
        assert_eq!((r.src_port, r.dst_port), (Some(80), Some(40000)));
        assert_eq!(r.vlan, Some(7));
        // an ACK with 100 bytes of data, ack 5000 (IPv6): <SEQ=5000><CTL=RST>
        let data = TcpSpec {
            src_port: 40000,
            dst_port: 80,
            seq: 1001,
            ack: 5000,
            flags: TcpFlags::ACK | TcpFlags::PSH,
            ..TcpSpec::default()
        };
        let n = tcp_v6_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv6Spec::default(),
            &data,
            &[1; 100],
        )
        .unwrap();
        let (r, seq, ack, ok) = reset_of(&f[..n]);
        assert!(ok, "checksum");
        assert_eq!(r.tcp_flags, Some(TcpFlags::RST));
        assert_eq!((seq, ack), (5000, 0));
        // a SYN+FIN with 10 bytes: ack = seq + 10 + 1 + 1
        let odd = TcpSpec {
            flags: TcpFlags::SYN | TcpFlags::FIN,
            ..syn
        };
        let n = tcp_v4_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            &odd,
            &[0; 10],
        )
        .unwrap();
        assert_eq!(reset_of(&f[..n]).2, 1012);
        // not TCP
        let n = udp_v4_frame(
            &mut f,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            1,
            2,
            b"x",
        )
        .unwrap();
        let p = parse_frame(&f[..n]).unwrap();
        assert!(matches!(
            tcp_reset_reply(&mut [0u8; 128], &f[..n], &p),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn icmp_echo_message_matches_fixture() {
        // The echo request of the icmp.rs fixture: id 0x1234, seq 1, the 32-byte
        // Windows ping payload, checksum 0x3b27.
        let want = b"\x08\x00\x3b\x27\x12\x34\x00\x01abcdefghijklmnopqrstuvwabcdefghi";
        let mut buf = [0xaau8; 64];
        let n = icmp_echo(
            &mut buf,
            true,
            0x1234,
            1,
            b"abcdefghijklmnopqrstuvwabcdefghi",
        )
        .unwrap();
        assert_eq!(&buf[..n], &want[..]);
        assert_eq!(buf[n], 0xaa, "bytes after the message are untouched");
        // A reply: type 0, checksum valid.
        let n = icmp_echo(&mut buf, false, 7, 9, b"abc").unwrap();
        assert_eq!(n, 11);
        let m = icmp::Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(m.msg_type(), icmp::ECHO_REPLY);
        assert_eq!(
            (m.echo_ident(), m.echo_seq_no(), m.payload()),
            (7, 9, &b"abc"[..])
        );
        assert!(m.verify_checksum());
        assert_eq!(
            icmp_echo(&mut buf[..10], true, 1, 1, b"abc"),
            Err(Error::BufferTooSmall)
        );
    }

    #[test]
    fn linux_syn_options_layout() {
        let spec = TcpSpec {
            mss: Some(1460),
            sack_permitted: true,
            timestamps: Some((0x009a3b4c, 0)),
            window_scale: Some(7),
            ..TcpSpec::default()
        };
        let mut opts = [0u8; MAX_OPTIONS];
        let n = spec.emit_options(&[], &mut opts).unwrap();
        assert_eq!(
            opts[..n],
            [
                0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x9a, 0x3b, 0x4c, 0, 0, 0, 0,
                0x01, 0x03, 0x03, 0x07
            ]
        );
        for (sack, ts, ws) in [
            (false, true, false),
            (true, false, true),
            (false, false, false),
        ] {
            let s = TcpSpec {
                mss: None,
                sack_permitted: sack,
                timestamps: ts.then_some((1, 2)),
                window_scale: ws.then_some(3),
                ..spec
            };
            assert_eq!(s.emit_options(&[], &mut opts).unwrap() % 4, 0);
        }
    }

    #[test]
    fn matches_tcp_fixture() {
        // Same SYN as the tcp.rs fixture, with an IPv4 header around it.
        let spec = TcpSpec {
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
        let ip = Ipv4Spec {
            src: Ipv4Addr::new(192, 168, 0, 104),
            dst: Ipv4Addr::new(93, 184, 216, 34),
            ident: 0x1c46,
            ..Ipv4Spec::default()
        };
        let mut buf = [0u8; 100];
        let n = tcp_v4_frame(&mut buf, &EthSpec::default(), &ip, &spec, &[]).unwrap();
        assert_eq!(n, 14 + 20 + 40);
        // IPv4 checksum 0x278B and TCP checksum 0xBA4F, both cross-checked.
        assert_eq!(buf[24..26], [0x27, 0x8b]);
        assert_eq!(buf[34 + 16..34 + 18], [0xba, 0x4f]);
    }

    #[test]
    fn extra_options_follow_the_spec_and_are_padded() {
        // a Linux ACK with two SACK blocks: NOP NOP TS NOP NOP SACK (12 + 20 bytes)
        let spec = TcpSpec {
            ack: 1000,
            flags: TcpFlags::ACK,
            timestamps: Some((7, 9)),
            ..TcpSpec::default()
        };
        let sack = TcpOption::Sack {
            blocks: [(2000, 2100), (3000, 3500), (0, 0), (0, 0)],
            count: 2,
        };
        let mut buf = [0u8; 128];
        let n = tcp_v6_frame_opts(
            &mut buf,
            &EthSpec::default(),
            &Ipv6Spec::default(),
            &spec,
            &[TcpOption::Nop, TcpOption::Nop, sack],
            &[],
        )
        .unwrap();
        assert_eq!(n, 14 + 40 + 20 + 32);
        let p = parse_frame(&buf[..n]).unwrap();
        let seg = p.tcp(&buf[..n]).unwrap();
        assert!(seg.verify_checksum(p.src_ip.unwrap(), p.dst_ip.unwrap()));
        let opts: std::vec::Vec<_> = seg.options_iter().map(|o| o.unwrap()).collect();
        assert_eq!(
            opts,
            [
                TcpOption::Nop,
                TcpOption::Nop,
                TcpOption::Timestamps { tsval: 7, tsecr: 9 },
                TcpOption::Nop,
                TcpOption::Nop,
                sack
            ]
        );
        // an odd length is padded with NOPs: MD5 (18 bytes) + 2 NOPs
        let md5 = TcpOption::Unknown { kind: 19, len: 18 };
        let n = tcp_v4_frame_opts(
            &mut buf,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            &TcpSpec::default(),
            &[md5],
            b"x",
        )
        .unwrap();
        let p = parse_frame(&buf[..n]).unwrap();
        let seg = p.tcp(&buf[..n]).unwrap();
        assert_eq!(seg.header_len(), 20 + 20);
        assert_eq!(seg.options()[18..], [1, 1]);
        assert_eq!(seg.payload(), b"x");
        assert!(seg.verify_checksum(p.src_ip.unwrap(), p.dst_ip.unwrap()));
        // more than 40 bytes of options, and an option emit refuses
        let four = TcpOption::Sack {
            blocks: [(1, 2); 4],
            count: 4,
        };
        let e = EthSpec::default();
        let v4 = Ipv4Spec::default();
        assert!(matches!(
            tcp_v4_frame_opts(&mut buf, &e, &v4, &spec, &[four], &[]),
            Err(Error::Unsupported(_))
        ));
        let none = TcpOption::Sack {
            blocks: [(0, 0); 4],
            count: 0,
        };
        assert!(matches!(
            tcp_v4_frame_opts(&mut buf, &e, &v4, &TcpSpec::default(), &[none], &[]),
            Err(Error::Malformed(_))
        ));
    }

    #[test]
    fn small_buffers() {
        // 14 + 20 + 8 + 6 = 48 bytes.
        let mut buf = [0u8; 48];
        let e = EthSpec::default();
        let r = udp_v4_frame(&mut buf, &e, &Ipv4Spec::default(), 1, 2, b"abcdefg");
        assert_eq!(r, Err(Error::BufferTooSmall));
        assert_eq!(
            udp_v4_frame(&mut buf, &e, &Ipv4Spec::default(), 1, 2, b"abcdef"),
            Ok(48)
        );
        let tagged = EthSpec { vlan: Some(3), ..e };
        assert_eq!(
            icmp_echo_v4(
                &mut buf,
                &tagged,
                &Ipv4Spec::default(),
                true,
                1,
                1,
                &[0; 20]
            ),
            Err(Error::BufferTooSmall)
        );
        let mut big = std::vec![0u8; 70_000];
        let payload = std::vec![0u8; 65_600];
        assert!(matches!(
            udp_v4_frame(&mut big, &e, &Ipv4Spec::default(), 1, 2, &payload),
            Err(Error::Unsupported(_))
        ));
    }

    fn eth_spec() -> impl Strategy<Value = EthSpec> {
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            proptest::option::of(0u16..4096),
            0u8..8,
        )
            .prop_map(|(s, d, vlan, pcp)| EthSpec {
                src: MacAddr(s),
                dst: MacAddr(d),
                vlan,
                pcp,
            })
    }

    fn v4_spec() -> impl Strategy<Value = Ipv4Spec> {
        (
            any::<u32>(),
            any::<u32>(),
            0u8..64,
            0u8..4,
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
        )
            .prop_map(|(s, d, dscp, ecn, ttl, ident, dont_frag)| Ipv4Spec {
                src: s.into(),
                dst: d.into(),
                dscp,
                ecn,
                ttl,
                ident,
                dont_frag,
            })
    }

    fn v6_spec() -> impl Strategy<Value = Ipv6Spec> {
        (
            any::<u128>(),
            any::<u128>(),
            0u8..64,
            0u8..4,
            0u32..1 << 20,
            any::<u8>(),
        )
            .prop_map(|(s, d, dscp, ecn, flow_label, hop_limit)| Ipv6Spec {
                src: s.into(),
                dst: d.into(),
                dscp,
                ecn,
                flow_label,
                hop_limit,
            })
    }

    fn tcp_spec() -> impl Strategy<Value = TcpSpec> {
        (
            (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()),
            (any::<u8>(), any::<u16>(), any::<u16>()),
            (
                proptest::option::of(any::<u16>()),
                proptest::option::of(0u8..15),
                any::<bool>(),
                proptest::option::of(any::<(u32, u32)>()),
            ),
        )
            .prop_map(
                |((sp, dp, seq, ack), (flags, window, urgent), (mss, ws, sack, ts))| TcpSpec {
                    src_port: sp,
                    dst_port: dp,
                    seq,
                    ack,
                    flags: TcpFlags(flags),
                    window,
                    urgent,
                    mss,
                    window_scale: ws,
                    sack_permitted: sack,
                    timestamps: ts,
                },
            )
    }

    fn payload() -> impl Strategy<Value = std::vec::Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..64)
    }

    fn check_eth(p: &crate::Parsed, e: &EthSpec) {
        assert_eq!(p.vlan, e.vlan);
        assert_eq!(p.pcp, e.vlan.map(|_| e.pcp));
        assert_eq!(p.l3_offset, if e.vlan.is_some() { 18 } else { 14 });
    }

    proptest! {
        #[test]
        fn udp_v4_roundtrip(e in eth_spec(), ip in v4_spec(), sp in any::<u16>(), dp in any::<u16>(), pl in payload()) {
            let mut buf = [0u8; 256];
            let n = udp_v4_frame(&mut buf, &e, &ip, sp, dp, &pl).unwrap();
            let p = parse_frame(&buf[..n]).unwrap();
            check_eth(&p, &e);
            prop_assert_eq!(p.ethertype, ethertype::IPV4);
            prop_assert_eq!(p.ip_version, Some(ip::Version::V4));
            prop_assert_eq!((p.src_ip, p.dst_ip), (Some(ip.src.into()), Some(ip.dst.into())));
            prop_assert_eq!((p.dscp, p.ecn, p.ttl), (Some(ip.dscp), Some(ip.ecn), Some(ip.ttl)));
            prop_assert_eq!(p.protocol, Some(protocol::UDP));
            prop_assert_eq!((p.src_port, p.dst_port), (Some(sp), Some(dp)));
            prop_assert_eq!(&buf[p.payload_offset..p.l3_end], &pl[..]);
            prop_assert_eq!(p.l3_end, n);
            let ipp = ipv4::Packet::new_checked(&buf[p.l3_offset..n]).unwrap();
            prop_assert!(ipp.verify_checksum());
            prop_assert_eq!(ipp.dont_frag(), ip.dont_frag);
            prop_assert_eq!(ipp.ident(), ip.ident);
            let u = udp::Packet::new_checked(ipp.payload()).unwrap();
            prop_assert!(u.verify_checksum(ip.src.into(), ip.dst.into()));
        }

        #[test]
        fn udp_v6_roundtrip(e in eth_spec(), ip in v6_spec(), sp in any::<u16>(), dp in any::<u16>(), pl in payload()) {
            let mut buf = [0u8; 256];
            let n = udp_v6_frame(&mut buf, &e, &ip, sp, dp, &pl).unwrap();
            let p = parse_frame(&buf[..n]).unwrap();
            check_eth(&p, &e);
            prop_assert_eq!(p.ethertype, ethertype::IPV6);
            prop_assert_eq!(p.ip_version, Some(ip::Version::V6));
            prop_assert_eq!((p.src_ip, p.dst_ip), (Some(ip.src.into()), Some(ip.dst.into())));
            prop_assert_eq!((p.dscp, p.ecn, p.ttl), (Some(ip.dscp), Some(ip.ecn), Some(ip.hop_limit)));
            prop_assert_eq!((p.src_port, p.dst_port), (Some(sp), Some(dp)));
            prop_assert_eq!(&buf[p.payload_offset..p.l3_end], &pl[..]);
            let ipp = ipv6::Packet::new_checked(&buf[p.l3_offset..n]).unwrap();
            prop_assert_eq!(ipp.flow_label(), ip.flow_label);
            let u = udp::Packet::new_checked(ipp.payload()).unwrap();
            prop_assert!(u.verify_checksum(ip.src.into(), ip.dst.into()));
        }

        #[test]
        fn tcp_roundtrip(e in eth_spec(), ip4 in v4_spec(), ip6 in v6_spec(), t in tcp_spec(), pl in payload(), v6 in any::<bool>()) {
            let mut buf = [0u8; 256];
            let (n, src, dst): (usize, IpAddr, IpAddr) = if v6 {
                (tcp_v6_frame(&mut buf, &e, &ip6, &t, &pl).unwrap(), ip6.src.into(), ip6.dst.into())
            } else {
                (tcp_v4_frame(&mut buf, &e, &ip4, &t, &pl).unwrap(), ip4.src.into(), ip4.dst.into())
            };
            let p = parse_frame(&buf[..n]).unwrap();
            check_eth(&p, &e);
            prop_assert_eq!((p.src_ip, p.dst_ip), (Some(src), Some(dst)));
            prop_assert_eq!(p.protocol, Some(protocol::TCP));
            prop_assert_eq!((p.src_port, p.dst_port), (Some(t.src_port), Some(t.dst_port)));
            prop_assert_eq!(p.tcp_flags, Some(t.flags));
            prop_assert_eq!(&buf[p.payload_offset..p.l3_end], &pl[..]);
            let l4 = p.l4_offset.unwrap();
            let seg = tcp::Packet::new_checked(&buf[l4..n]).unwrap();
            prop_assert!(seg.verify_checksum(src, dst));
            prop_assert_eq!((seg.seq_number(), seg.ack_number()), (t.seq, t.ack));
            prop_assert_eq!((seg.window(), seg.urgent_at()), (t.window, t.urgent));
            prop_assert_eq!(seg.mss_option(), t.mss);
            prop_assert_eq!(seg.window_scale_option(), t.window_scale);
            let opts: std::vec::Vec<_> = seg.options_iter().collect::<Result<_>>().unwrap();
            prop_assert_eq!(opts.contains(&TcpOption::SackPermitted), t.sack_permitted);
            let ts = t.timestamps.map(|(tsval, tsecr)| TcpOption::Timestamps { tsval, tsecr });
            prop_assert_eq!(opts.iter().find(|o| matches!(o, TcpOption::Timestamps { .. })).copied(), ts);
        }

        #[test]
        fn tcp_v4_frame_edits(e in eth_spec(), ip4 in v4_spec(), t in tcp_spec(), pl in payload(),
                              window in any::<u16>(), mss in any::<u16>(), ports in any::<(u16, u16)>(),
                              dscp in 0u8..64) {
            let mut buf = [0u8; 256];
            let n = tcp_v4_frame(&mut buf, &e, &ip4, &t, &pl).unwrap();
            let p = parse_frame(&buf[..n]).unwrap();
            let (src, dst) = (ip4.src.into(), ip4.dst.into());
            {
                let mut ipp = ipv4::Packet::new_checked(&mut buf[p.l3_offset..n]).unwrap();
                ipp.set_dscp(dscp);
                prop_assert!(ipp.verify_checksum());
                let inc = ipp.checksum();
                ipp.fill_checksum();
                prop_assert_eq!(inc, ipp.checksum());
            }
            let mut seg = tcp::Packet::new_checked(&mut buf[p.l4_offset.unwrap()..n]).unwrap();
            seg.set_window(window);
            prop_assert_eq!(seg.set_mss_option(mss), Ok(t.mss));
            seg.set_ports(ports.0, ports.1);
            prop_assert!(seg.verify_checksum(src, dst));
            let inc = seg.checksum();
            seg.fill_checksum(src, dst);
            prop_assert_eq!(inc, seg.checksum());
            let p2 = parse_frame(&buf[..n]).unwrap();
            prop_assert_eq!((p2.src_port, p2.dst_port, p2.dscp), (Some(ports.0), Some(ports.1), Some(dscp)));
        }

        #[test]
        fn icmp_roundtrip(e in eth_spec(), ip in v4_spec(), req in any::<bool>(), id in any::<u16>(), seq in any::<u16>(), pl in payload()) {
            let mut buf = [0u8; 256];
            let n = icmp_echo_v4(&mut buf, &e, &ip, req, id, seq, &pl).unwrap();
            let p = parse_frame(&buf[..n]).unwrap();
            prop_assert_eq!(p.protocol, Some(protocol::ICMP));
            prop_assert_eq!(p.icmp_type, Some(if req { icmp::ECHO_REQUEST } else { icmp::ECHO_REPLY }));
            prop_assert_eq!(p.icmp_code, Some(0));
            prop_assert_eq!((p.src_port, p.dst_port), (None, None));
            let m = icmp::Packet::new_checked(&buf[p.l4_offset.unwrap()..n]).unwrap();
            prop_assert!(m.verify_checksum());
            prop_assert_eq!((m.echo_ident(), m.echo_seq_no()), (id, seq));
            prop_assert_eq!(m.payload(), &pl[..]);
        }
    }
}
