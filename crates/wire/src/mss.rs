//! MSS clamping of a whole frame, in place: lower the Maximum Segment Size option of a TCP
//! SYN (or SYN-ACK) to a cap, or insert one when the segment has none (seed 000's "MSS
//! clamping", Sitara QoSWorks; the behaviour follows Linux's `xt_TCPMSS`).
//!
//! # What [`clamp_mss`] does
//! * Only TCP segments with SYN set, of unfragmented IPv4 or IPv6 packets (IPv6 extension
//!   headers allowed: the TCP header is wherever [`Parsed::l4_offset`] says).
//! * An MSS option above `cap` is rewritten to `cap` in place (any alignment: an odd offset
//!   after a single NOP included); one at or below `cap` is left alone — clamping never
//!   raises an MSS.
//! * No MSS option: the peer would assume the default send MSS, 536 for IPv4 (RFC 1122
//!   §4.2.2.6, RFC 9293 §3.7.1) and 1220 for IPv6 (RFC 8200 §8.3: 1280 − 40 − 20). A
//!   4-byte option `kind 2, len 4, min(cap, default)` is inserted right after the fixed
//!   20-byte header, the existing options move 4 bytes back, the TCP data offset grows by
//!   one word, the IP length field by 4 and the frame by 4 bytes — when there is room: the
//!   header is below its 60-byte maximum, the segment carries no payload (moving data
//!   could make the SYN too long for the path, as `xt_TCPMSS` reasons), and the buffer
//!   holds 4 more bytes. Otherwise the frame is left unchanged and the reason returned.
//!   Bytes after the IP packet (Ethernet padding of a short frame) are dropped by an
//!   insertion: the new frame ends where the grown IP packet ends.
//!
//! # Checksums
//! Every edit keeps the checksums valid by incremental update (RFC 1624 eqn. 3), never a
//! full recomputation, so a segment whose checksum was wrong stays wrong (weir does not
//! launder corrupt packets). For an insertion: the moved options shift by 4 bytes, an even
//! amount, so their 16-bit words contribute the same sum; what changes is the data-offset
//! word, the pseudo-header's TCP length (+4) and the two new option words; IPv4's header
//! checksum follows its total length (+4). IPv6 has no header checksum.
//!
//! # Input errors
//! Truncated or inconsistent headers and malformed options before an MSS option yield
//! [`MssSkip`] reasons and leave the frame untouched; nothing here panics on any input
//! (proptests over random bytes and random edits of real SYNs).

use crate::checksum::{incremental_update16, incremental_update32};
use crate::field::{rd16, wr16};
use crate::ip::Version;
use crate::parse::Parsed;
use crate::tcp;
use crate::tcp::{option_kind, TcpFlags};

/// Default send MSS when a SYN has no MSS option: IPv4 (RFC 1122 §4.2.2.6).
pub const DEFAULT_MSS_V4: u16 = 536;
/// Default send MSS when a SYN has no MSS option: IPv6 (RFC 8200 §8.3, 1280 − 60).
pub const DEFAULT_MSS_V6: u16 = 1220;
/// The smallest cap a policy may ask for: Linux's `TCP_MIN_MSS` (include/net/tcp.h), the
/// least MSS Linux itself sends with. [`clamp_mss`] applies whatever it is given.
pub const MIN_MSS: u16 = 88;

/// Bytes of the inserted option.
const OPTION_LEN: usize = 4;

/// What [`clamp_mss`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MssAction {
    /// The option was lowered from `from` to `to`.
    Lowered {
        /// The option's value before.
        from: u16,
        /// The cap written.
        to: u16,
    },
    /// The option was already at or below the cap.
    Kept(u16),
    /// An option was inserted with this value; the frame grew by 4 bytes.
    Inserted(u16),
}

/// Why [`clamp_mss`] left a frame alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MssSkip {
    /// Not TCP over IP, or a fragment.
    NotTcp,
    /// TCP without SYN.
    NotSyn,
    /// No MSS option, and the segment carries payload (an insertion would move data).
    HasPayload,
    /// No MSS option, and the header is already 60 bytes long.
    HeaderFull,
    /// No MSS option, and the buffer has no room for 4 more bytes.
    NoRoom,
    /// Headers or options inconsistent with the frame.
    Malformed,
}

impl MssSkip {
    /// A short name for counters and logs.
    pub fn name(&self) -> &'static str {
        match self {
            MssSkip::NotTcp => "not_tcp",
            MssSkip::NotSyn => "not_syn",
            MssSkip::HasPayload => "has_payload",
            MssSkip::HeaderFull => "header_full",
            MssSkip::NoRoom => "no_room",
            MssSkip::Malformed => "malformed",
        }
    }
}

/// The result of [`clamp_mss`]: what changed and the frame's new length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clamped {
    /// What changed.
    pub action: MssAction,
    /// Frame length after the edit (`len + 4` after an insertion, else `len`).
    pub len: usize,
}

/// Clamp the MSS option of the frame `buf[..len]` (parsed as `p`) to `cap` bytes; `buf`
/// beyond `len` is room the frame may grow into. See the module documentation.
pub fn clamp_mss(buf: &mut [u8], len: usize, p: &Parsed, cap: u16) -> Result<Clamped, MssSkip> {
    let (Some(version), Some(l4), Some(flags)) = (p.ip_version, p.l4_offset, p.tcp_flags) else {
        return Err(MssSkip::NotTcp);
    };
    if p.is_fragment || p.protocol != Some(crate::ip::protocol::TCP) {
        return Err(MssSkip::NotTcp);
    }
    if !flags.contains(TcpFlags::SYN) {
        return Err(MssSkip::NotSyn);
    }
    if len > buf.len() || p.l3_end > len || l4 + tcp::HEADER_LEN > p.l3_end {
        return Err(MssSkip::Malformed);
    }
    let mut seg =
        tcp::Packet::new_checked(&mut buf[l4..p.l3_end]).map_err(|_| MssSkip::Malformed)?;
    match seg.clamp_mss_option(cap) {
        Ok(Some(old)) if old > cap => {
            return Ok(Clamped {
                action: MssAction::Lowered { from: old, to: cap },
                len,
            })
        }
        Ok(Some(old)) => {
            return Ok(Clamped {
                action: MssAction::Kept(old),
                len,
            })
        }
        Ok(None) => {}
        Err(_) => return Err(MssSkip::Malformed),
    }
    let hlen = seg.header_len();
    if l4 + hlen != p.l3_end {
        return Err(MssSkip::HasPayload);
    }
    if hlen + OPTION_LEN > tcp::MAX_HEADER_LEN {
        return Err(MssSkip::HeaderFull);
    }
    if p.l3_end + OPTION_LEN > buf.len() {
        return Err(MssSkip::NoRoom);
    }
    let mss = cap.min(match version {
        Version::V4 => DEFAULT_MSS_V4,
        Version::V6 => DEFAULT_MSS_V6,
    });
    insert_mss(buf, p, version, l4, hlen, mss);
    Ok(Clamped {
        action: MssAction::Inserted(mss),
        len: p.l3_end + OPTION_LEN,
    })
}

/// Insert `kind 2, len 4, mss` after the fixed header of the TCP segment at `l4` (header
/// length `hlen`, no payload; checked by the caller) and grow the IP packet by 4 bytes.
fn insert_mss(buf: &mut [u8], p: &Parsed, version: Version, l4: usize, hlen: usize, mss: u16) {
    let opts = l4 + tcp::HEADER_LEN;
    let end = l4 + hlen;
    buf.copy_within(opts..end, opts + OPTION_LEN);
    buf[opts..opts + OPTION_LEN].copy_from_slice(&[
        option_kind::MSS,
        4,
        (mss >> 8) as u8,
        mss as u8,
    ]);

    let mut csum = rd16(buf, l4 + tcp::CHECKSUM);
    // data offset: one more 32-bit word
    let old_word = rd16(buf, l4 + tcp::OFF_FLAGS);
    let new_word = old_word + 0x1000;
    wr16(buf, l4 + tcp::OFF_FLAGS, new_word);
    csum = incremental_update16(csum, old_word, new_word);
    // the two new option words (absent before: 0)
    csum = incremental_update16(csum, 0, u16::from_be_bytes([option_kind::MSS, 4]));
    csum = incremental_update16(csum, 0, mss);
    // the pseudo-header's TCP length
    let tcp_len = hlen as u32;
    csum = match version {
        Version::V4 => incremental_update16(csum, tcp_len as u16, tcp_len as u16 + 4),
        Version::V6 => incremental_update32(csum, tcp_len, tcp_len + 4),
    };
    wr16(buf, l4 + tcp::CHECKSUM, csum);

    let l3 = p.l3_offset;
    match version {
        Version::V4 => {
            let old = rd16(buf, l3 + 2);
            wr16(buf, l3 + 2, old + OPTION_LEN as u16);
            let c = incremental_update16(rd16(buf, l3 + 10), old, old + OPTION_LEN as u16);
            wr16(buf, l3 + 10, c);
        }
        Version::V6 => {
            let old = rd16(buf, l3 + 4);
            wr16(buf, l3 + 4, old + OPTION_LEN as u16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};
    use crate::ip::protocol;
    use crate::{ipv4, parse_frame};
    use proptest::prelude::*;
    use std::vec::Vec;

    /// Every checksum of the frame recomputed from scratch, and the lengths consistent.
    fn assert_valid(frame: &[u8]) {
        let p = parse_frame(frame).expect("parses");
        let l4 = p.l4_offset.unwrap();
        assert_eq!(p.l3_end, frame.len(), "IP length = frame length");
        if p.ip_version == Some(Version::V4) {
            assert!(ipv4::Packet::new_checked(&frame[p.l3_offset..])
                .unwrap()
                .verify_checksum());
        }
        let seg = tcp::Packet::new_checked(&frame[l4..p.l3_end]).unwrap();
        assert!(
            seg.verify_checksum(p.src_ip.unwrap(), p.dst_ip.unwrap()),
            "TCP checksum"
        );
    }

    fn syn_v4(spec: &TcpSpec) -> (Vec<u8>, usize) {
        let mut buf = std::vec![0u8; 256];
        let n = build::tcp_v4_frame(
            &mut buf,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            spec,
            &[],
        )
        .unwrap();
        (buf, n)
    }

    fn syn_v6(spec: &TcpSpec) -> (Vec<u8>, usize) {
        let mut buf = std::vec![0u8; 256];
        let ip = Ipv6Spec {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            ..Default::default()
        };
        let n = build::tcp_v6_frame(&mut buf, &EthSpec::default(), &ip, spec, &[]).unwrap();
        (buf, n)
    }

    fn linux_syn() -> TcpSpec {
        TcpSpec {
            flags: TcpFlags::SYN,
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamps: Some((12345, 0)),
            ..TcpSpec::default()
        }
    }

    fn clamp(buf: &mut [u8], n: usize, cap: u16) -> Result<Clamped, MssSkip> {
        let p = parse_frame(&buf[..n]).unwrap();
        clamp_mss(buf, n, &p, cap)
    }

    fn mss_of(frame: &[u8]) -> Option<u16> {
        let p = parse_frame(frame).unwrap();
        tcp::Packet::new_checked(&frame[p.l4_offset.unwrap()..p.l3_end])
            .unwrap()
            .mss_option()
    }

    #[test]
    fn lowers_a_larger_mss_and_keeps_a_smaller_one() {
        // seed 000's VoIP case: 1460 → 256
        let (mut buf, n) = syn_v4(&linux_syn());
        let c = clamp(&mut buf, n, 256).unwrap();
        assert_eq!(
            c,
            Clamped {
                action: MssAction::Lowered {
                    from: 1460,
                    to: 256
                },
                len: n
            }
        );
        assert_eq!(mss_of(&buf[..n]), Some(256));
        assert_valid(&buf[..n]);
        // clamping never raises: a second clamp to 1000 keeps 256
        let before = buf.clone();
        let c = clamp(&mut buf, n, 1000).unwrap();
        assert_eq!(c.action, MssAction::Kept(256));
        assert_eq!(buf, before, "nothing written");
        // equal to the cap: kept
        assert_eq!(
            clamp(&mut buf, n, 256).unwrap().action,
            MssAction::Kept(256)
        );
    }

    #[test]
    fn syn_ack_and_ipv6_are_clamped_too() {
        let mut spec = linux_syn();
        spec.flags = TcpFlags::SYN | TcpFlags::ACK;
        spec.mss = Some(1440);
        let (mut buf, n) = syn_v6(&spec);
        let c = clamp(&mut buf, n, 1220).unwrap();
        assert_eq!(
            c.action,
            MssAction::Lowered {
                from: 1440,
                to: 1220
            }
        );
        assert_valid(&buf[..n]);
    }

    #[test]
    fn an_mss_at_an_odd_offset_is_rewritten_with_a_valid_checksum() {
        // options: NOP, MSS 1460, NOP, NOP, NOP (MSS value at option offset 3: odd)
        let (mut buf, n) = syn_v4(&TcpSpec {
            flags: TcpFlags::SYN,
            ..TcpSpec::default()
        });
        let p = parse_frame(&buf[..n]).unwrap();
        let l4 = p.l4_offset.unwrap();
        // grow the header by 8 bytes of options and fix lengths/checksums from scratch
        let opts = [1u8, 2, 4, 0x05, 0xb4, 1, 1, 1];
        let mut f = buf[..l4 + 20].to_vec();
        f.extend_from_slice(&opts);
        f[l4 + 12] = 7 << 4;
        let total = (f.len() - p.l3_offset) as u16;
        f[p.l3_offset + 2..p.l3_offset + 4].copy_from_slice(&total.to_be_bytes());
        let mut ip = ipv4::Packet::new_checked(&mut f[p.l3_offset..]).unwrap();
        ip.fill_checksum();
        let mut seg = tcp::Packet::new_checked(&mut f[l4..]).unwrap();
        seg.fill_checksum(p.src_ip.unwrap(), p.dst_ip.unwrap());
        assert_valid(&f);
        let n = f.len();
        f.resize(n + 16, 0);
        let c = clamp(&mut f, n, 536).unwrap();
        assert_eq!(
            c.action,
            MssAction::Lowered {
                from: 1460,
                to: 536
            }
        );
        assert_eq!(mss_of(&f[..n]), Some(536));
        assert_valid(&f[..n]);
        buf.clear();
    }

    #[test]
    fn a_missing_option_is_inserted_at_the_protocol_default_or_the_cap() {
        // IPv4 SYN with window scale and SACK-permitted but no MSS
        let mut spec = linux_syn();
        spec.mss = None;
        let (mut buf, n) = syn_v4(&spec);
        let before = parse_frame(&buf[..n]).unwrap();
        let old_opts = {
            let l4 = before.l4_offset.unwrap();
            tcp::Packet::new_checked(&buf[l4..n])
                .unwrap()
                .options()
                .to_vec()
        };
        let c = clamp(&mut buf, n, 1400).unwrap();
        // the peer would assume 536 without the option: inserting 1400 would raise it
        assert_eq!(
            c,
            Clamped {
                action: MssAction::Inserted(536),
                len: n + 4
            }
        );
        let f = &buf[..c.len];
        assert_valid(f);
        assert_eq!(mss_of(f), Some(536));
        let p = parse_frame(f).unwrap();
        let seg = tcp::Packet::new_checked(&f[p.l4_offset.unwrap()..p.l3_end]).unwrap();
        assert_eq!(
            &seg.options()[4..],
            &old_opts[..],
            "the other options follow, unchanged"
        );
        assert_eq!(seg.window_scale_option(), Some(7));

        // IPv6: default 1220; a cap below it is inserted as the cap
        let (mut buf, n) = syn_v6(&spec);
        let c = clamp(&mut buf, n, 256).unwrap();
        assert_eq!(c.action, MssAction::Inserted(256));
        assert_valid(&buf[..c.len]);
        let (mut buf, n) = syn_v6(&spec);
        assert_eq!(
            clamp(&mut buf, n, 1400).unwrap().action,
            MssAction::Inserted(1220)
        );
        assert_valid(&buf[..n + 4]);
    }

    #[test]
    fn insertion_after_an_ipv6_extension_header() {
        let mut spec = linux_syn();
        spec.mss = None;
        let (buf, n) = syn_v6(&spec);
        let l3 = 14;
        let mut f = buf[..l3 + 40].to_vec();
        f.extend_from_slice(&[protocol::TCP, 0, 1, 4, 0, 0, 0, 0]);
        f.extend_from_slice(&buf[l3 + 40..n]);
        f[l3 + 6] = protocol::IPV6_OPTS;
        let plen = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) + 8;
        f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        assert_valid(&f);
        let n = f.len();
        f.resize(n + 4, 0);
        let c = clamp(&mut f, n, 512).unwrap();
        assert_eq!(
            c,
            Clamped {
                action: MssAction::Inserted(512),
                len: n + 4
            }
        );
        assert_valid(&f);
    }

    #[test]
    fn padding_after_a_short_frame_is_dropped_by_an_insertion() {
        // a bare SYN (no options): 14 + 20 + 20 = 54 bytes, padded to 60 on the wire
        let (mut buf, n) = syn_v4(&TcpSpec {
            flags: TcpFlags::SYN,
            ..TcpSpec::default()
        });
        assert_eq!(n, 54);
        let padded = 60;
        let c = clamp(&mut buf, padded, 1000).unwrap();
        assert_eq!(
            c,
            Clamped {
                action: MssAction::Inserted(536),
                len: 58
            }
        );
        assert_valid(&buf[..58]);
    }

    #[test]
    fn skips_are_named_and_leave_the_frame_alone() {
        let mut spec = linux_syn();
        spec.mss = None;
        // with payload: no insertion
        let mut buf = std::vec![0u8; 256];
        let n = build::tcp_v4_frame(
            &mut buf,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            &spec,
            b"data",
        )
        .unwrap();
        let before = buf.clone();
        assert_eq!(clamp(&mut buf, n, 500), Err(MssSkip::HasPayload));
        assert_eq!(buf, before);
        // no room in the buffer
        let (buf, n) = syn_v4(&spec);
        let mut tight = buf[..n].to_vec();
        assert_eq!(clamp(&mut tight, n, 500), Err(MssSkip::NoRoom));
        assert_eq!(tight, buf[..n]);
        // not a SYN
        let (mut buf, n) = syn_v4(&TcpSpec {
            flags: TcpFlags::ACK,
            mss: Some(1460),
            ..TcpSpec::default()
        });
        assert_eq!(clamp(&mut buf, n, 500), Err(MssSkip::NotSyn));
        // UDP
        let mut buf = std::vec![0u8; 128];
        let n = build::udp_v4_frame(
            &mut buf,
            &EthSpec::default(),
            &Ipv4Spec::default(),
            1,
            2,
            b"x",
        )
        .unwrap();
        assert_eq!(clamp(&mut buf, n, 500), Err(MssSkip::NotTcp));
        // a full 60-byte header without MSS: 40 bytes of NOPs
        let (buf, n) = syn_v4(&TcpSpec {
            flags: TcpFlags::SYN,
            ..TcpSpec::default()
        });
        let p = parse_frame(&buf[..n]).unwrap();
        let l4 = p.l4_offset.unwrap();
        let mut f = buf[..l4 + 20].to_vec();
        f.extend_from_slice(&[1u8; 40]);
        f[l4 + 12] = 15 << 4;
        let total = (f.len() - p.l3_offset) as u16;
        f[p.l3_offset + 2..p.l3_offset + 4].copy_from_slice(&total.to_be_bytes());
        ipv4::Packet::new_checked(&mut f[p.l3_offset..])
            .unwrap()
            .fill_checksum();
        let n = f.len();
        f.resize(n + 8, 0);
        assert_eq!(clamp(&mut f, n, 500), Err(MssSkip::HeaderFull));
        // malformed options before the MSS: an option claiming 40 bytes
        let (mut buf, n) = syn_v4(&linux_syn());
        let l4 = parse_frame(&buf[..n]).unwrap().l4_offset.unwrap();
        buf[l4 + 20] = 8; // kind 8 (timestamps) with…
        buf[l4 + 21] = 40; // …a length beyond the options
        assert_eq!(clamp(&mut buf, n, 500), Err(MssSkip::Malformed));
    }

    #[test]
    fn a_wrong_checksum_stays_wrong() {
        let (mut buf, n) = syn_v4(&linux_syn());
        let l4 = parse_frame(&buf[..n]).unwrap().l4_offset.unwrap();
        buf[l4 + 16] ^= 0x5a;
        clamp(&mut buf, n, 256).unwrap();
        let p = parse_frame(&buf[..n]).unwrap();
        let seg = tcp::Packet::new_checked(&buf[l4..n]).unwrap();
        assert!(!seg.verify_checksum(p.src_ip.unwrap(), p.dst_ip.unwrap()));
    }

    proptest! {
        /// Any cap on any real SYN (random options present or not, v4 or v6, SYN or
        /// SYN-ACK): the result parses, every checksum is valid, the MSS is min(old, cap)
        /// or the inserted default, and the other options are unchanged.
        #[test]
        fn clamped_syns_are_valid(
            v6 in any::<bool>(),
            synack in any::<bool>(),
            mss in proptest::option::of(1u16..=65535),
            ws in proptest::option::of(0u8..=14),
            sack in any::<bool>(),
            ts in proptest::option::of(any::<(u32, u32)>()),
            cap in MIN_MSS..=9000u16,
        ) {
            let spec = TcpSpec {
                flags: if synack { TcpFlags::SYN | TcpFlags::ACK } else { TcpFlags::SYN },
                mss, window_scale: ws, sack_permitted: sack, timestamps: ts,
                ..TcpSpec::default()
            };
            let (mut buf, n) = if v6 { syn_v6(&spec) } else { syn_v4(&spec) };
            let c = clamp(&mut buf, n, cap).unwrap();
            let f = &buf[..c.len];
            assert_valid(f);
            let default = if v6 { DEFAULT_MSS_V6 } else { DEFAULT_MSS_V4 };
            let want = match mss { Some(m) => m.min(cap), None => cap.min(default) };
            prop_assert_eq!(mss_of(f), Some(want));
            let p = parse_frame(f).unwrap();
            let seg = tcp::Packet::new_checked(&f[p.l4_offset.unwrap()..p.l3_end]).unwrap();
            prop_assert_eq!(seg.window_scale_option(), ws);
        }

        /// Random bytes after a real frame's Ethernet header, random lengths: never a
        /// panic, and a frame that comes back unchanged unless an action is reported.
        #[test]
        fn random_frames_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            room in 0usize..8,
            cap in any::<u16>(),
        ) {
            let (base, n) = syn_v4(&linux_syn());
            let mut buf = base[..14].to_vec();
            buf.extend_from_slice(&bytes);
            let len = buf.len();
            buf.resize(len + room, 0);
            if let Ok(p) = parse_frame(&buf[..len]) {
                let before = buf.clone();
                if clamp_mss(&mut buf, len, &p, cap).is_err() {
                    prop_assert_eq!(&buf, &before);
                }
            }
            let _ = n;
        }

        /// Random edits of a real SYN's header bytes: never a panic.
        #[test]
        fn edited_syns_never_panic(
            v6 in any::<bool>(),
            edits in proptest::collection::vec((0usize..120, any::<u8>()), 1..6),
            cap in any::<u16>(),
        ) {
            let (mut buf, n) = if v6 { syn_v6(&linux_syn()) } else { syn_v4(&linux_syn()) };
            for (at, v) in edits { if at < n { buf[at] = v; } }
            if let Ok(p) = parse_frame(&buf[..n]) {
                let _ = clamp_mss(&mut buf, n, &p, cap);
            }
        }
    }
}
