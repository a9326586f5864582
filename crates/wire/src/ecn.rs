//! ECN congestion marking of a whole Ethernet frame (RFC 3168 §5, §6.1.1.1): set the
//! IP header's ECN field to CE (`11`) when it says ECT(0) (`10`) or ECT(1) (`01`).
//!
//! An AQM (CoDel, COBALT) that decides to signal congestion calls [`mark_ce`] on the
//! packet at the head of its queue: a [`MarkOutcome::Marked`] or
//! [`MarkOutcome::AlreadyCe`] packet is sent on (the signal was delivered), a
//! [`MarkOutcome::NotEct`] one is dropped instead, as Linux's `INET_ECN_set_ce` tells
//! `codel_dequeue` and `cobalt_should_drop`.
//!
//! The frame is walked as [`crate::parse_frame`] walks it: Ethernet with up to two VLAN
//! tags ([`ethernet::Frame`]), then the IPv4 or IPv6 fixed header. Nothing past the IP
//! header is read. The rules:
//!
//! * **IPv4**: the TOS octet's low two bits. The header checksum is fixed by the RFC 1624
//!   incremental update of [`ipv4::Packet::set_ecn`] (the edited word is `ver/IHL | TOS`,
//!   which rises by `CE - ECT`). The checksum is verified first: a header whose checksum is
//!   already wrong is [`MarkOutcome::Malformed`] and left alone, so a `Marked` IPv4 header
//!   always carries the checksum a full recomputation gives.
//! * **IPv6**: the traffic class's low two bits (bits 20-21 of the first word); IPv6 has
//!   no header checksum.
//! * A frame that is not IPv4 or IPv6 (ARP, an 802.3 length field, ...) is
//!   [`MarkOutcome::NotEct`]: it has no ECN field.
//! * A frame cut short or with impossible fields (an Ethernet header or VLAN tag cut
//!   short, more than two tags, an IP version that contradicts the EtherType, IHL < 5, a
//!   length field longer than the frame, a wrong IPv4 checksum) is
//!   [`MarkOutcome::Malformed`].
//!
//! Invariant: the frame's bytes change only when the outcome is `Marked`, and then only
//! the ECN bits (plus, for IPv4, the two checksum bytes). No allocation, no panic on any
//! input. Fragments are marked like any other datagram (RFC 3168 §5.3: every fragment of
//! a datagram carries the ECN field; the receiver's reassembly merges CE).

use crate::ethernet::{self, ethertype};
use crate::ip::ecn::{CE, ECT0, ECT1};
use crate::{ipv4, ipv6};

/// What [`mark_ce`] did to a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkOutcome {
    /// The ECN field was ECT(0) or ECT(1) and now says CE.
    Marked,
    /// The ECN field already said CE; nothing changed (the signal is already carried).
    AlreadyCe,
    /// Not ECN-capable: an IP packet with ECN `00`, or a frame that is not IP. Unchanged.
    NotEct,
    /// Truncated or impossible headers, or a wrong IPv4 header checksum. Unchanged.
    Malformed,
}

impl MarkOutcome {
    /// True when the frame carries CE after the call (`Marked` or `AlreadyCe`).
    #[inline]
    pub fn carries_ce(self) -> bool {
        matches!(self, MarkOutcome::Marked | MarkOutcome::AlreadyCe)
    }
}

/// The ECN field (two bits, see [`crate::ip::ecn`]) of an IPv4 or IPv6 frame with
/// well-formed headers (the IPv4 checksum is not verified here); `None` for a frame that
/// is not IP or is malformed.
pub fn ecn_field(frame: &[u8]) -> Option<u8> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    match eth.ethertype() {
        ethertype::IPV4 => Some(ipv4::Packet::new_checked(eth.payload()).ok()?.ecn()),
        ethertype::IPV6 => Some(ipv6::Packet::new_checked(eth.payload()).ok()?.ecn()),
        _ => None,
    }
}

/// True for an IP frame whose ECN field is ECT(0) or ECT(1) (a cheap read, no edit).
pub fn is_ect(frame: &[u8]) -> bool {
    matches!(ecn_field(frame), Some(ECT0 | ECT1))
}

/// Sets CE on an ECN-capable IP frame in place (see the module comment for the rules).
pub fn mark_ce(frame: &mut [u8]) -> MarkOutcome {
    let Ok(mut eth) = ethernet::Frame::new_checked(&mut *frame) else {
        return MarkOutcome::Malformed;
    };
    match eth.ethertype() {
        ethertype::IPV4 => {
            let Ok(mut ip) = ipv4::Packet::new_checked(eth.payload_mut()) else {
                return MarkOutcome::Malformed;
            };
            if !ip.verify_checksum() {
                return MarkOutcome::Malformed;
            }
            set_ce(ip.ecn(), || ip.set_ecn(CE))
        }
        ethertype::IPV6 => {
            let Ok(mut ip) = ipv6::Packet::new_checked(eth.payload_mut()) else {
                return MarkOutcome::Malformed;
            };
            set_ce(ip.ecn(), || ip.set_ecn(CE))
        }
        _ => MarkOutcome::NotEct,
    }
}

/// The outcome for a header whose ECN field is `ecn`; `set` writes CE when it is ECT.
#[inline]
fn set_ce(ecn: u8, set: impl FnOnce()) -> MarkOutcome {
    match ecn {
        CE => MarkOutcome::AlreadyCe,
        ECT0 | ECT1 => {
            set();
            MarkOutcome::Marked
        }
        _ => MarkOutcome::NotEct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};
    use crate::checksum;
    use crate::ip::ecn::NOT_ECT;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// The classic IPv4 header 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7 (checksum
    /// 0xB861 with TOS 0) behind an untagged Ethernet header, with TOS `tos` and its
    /// checksum: the folded sum of the other words is !0xB861 = 0x479E, so TOS t (the low
    /// byte of word 0x45tt) gives 0xB861 - t.
    fn v4_frame(tos: u8) -> Vec<u8> {
        let mut f = std::vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
        let csum = 0xb861u16 - tos as u16;
        f.extend_from_slice(&[0x45, tos, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11]);
        f.extend_from_slice(&csum.to_be_bytes());
        f.extend_from_slice(&[0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7]);
        f.resize(14 + 0x73, 0xab);
        f
    }

    #[test]
    fn ipv4_ect0_and_ect1_become_ce_with_the_hand_computed_checksum() {
        for tos in [0x02u8, 0x01, 0xba, 0xb9] {
            let mut f = v4_frame(tos);
            assert!(is_ect(&f));
            assert_eq!(mark_ce(&mut f), MarkOutcome::Marked, "tos {tos:#x}");
            let want_tos = tos | 0x03;
            assert_eq!(f[15], want_tos);
            // 0xB861 - TOS, with the new TOS
            assert_eq!(&f[24..26], &(0xb861u16 - want_tos as u16).to_be_bytes());
            let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
            assert!(ip.verify_checksum());
            // everything else untouched
            let mut orig = v4_frame(tos);
            orig[15] = f[15];
            orig[24..26].copy_from_slice(&f[24..26]);
            assert_eq!(f, orig);
            assert_eq!(ecn_field(&f), Some(CE));
        }
    }

    #[test]
    fn ipv4_not_ect_ce_and_bad_checksum_are_left_alone() {
        let mut f = v4_frame(0xb8); // EF, not ECT
        let orig = f.clone();
        assert!(!is_ect(&f));
        assert_eq!(mark_ce(&mut f), MarkOutcome::NotEct);
        assert_eq!(f, orig);
        let mut f = v4_frame(0x03);
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), MarkOutcome::AlreadyCe);
        assert!(MarkOutcome::AlreadyCe.carries_ce());
        assert_eq!(f, orig);
        // an ECT packet whose checksum is wrong is not touched
        let mut f = v4_frame(0x02);
        f[25] ^= 0x10;
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), MarkOutcome::Malformed);
        assert!(!MarkOutcome::Malformed.carries_ce());
        assert_eq!(f, orig);
    }

    /// Built frames with each codepoint, IPv4 and IPv6, untagged and tagged.
    #[test]
    fn built_frames_with_each_codepoint() {
        for vlan in [None, Some(42)] {
            let eth = EthSpec {
                vlan,
                ..EthSpec::default()
            };
            for ecn in [NOT_ECT, ECT1, ECT0, CE] {
                let mut buf = [0u8; 256];
                let ip4 = Ipv4Spec {
                    ecn,
                    dscp: 10,
                    ..Ipv4Spec::default()
                };
                let n =
                    build::tcp_v4_frame(&mut buf, &eth, &ip4, &TcpSpec::default(), b"x").unwrap();
                let ip6 = Ipv6Spec {
                    ecn,
                    dscp: 46,
                    flow_label: 0xabcde,
                    ..Ipv6Spec::default()
                };
                let mut buf6 = [0u8; 256];
                let n6 = build::udp_v6_frame(&mut buf6, &eth, &ip6, 1, 2, b"hello").unwrap();
                for f in [&mut buf[..n], &mut buf6[..n6]] {
                    let before = f.to_vec();
                    assert_eq!(ecn_field(f), Some(ecn));
                    let out = mark_ce(f);
                    let want = match ecn {
                        NOT_ECT => MarkOutcome::NotEct,
                        CE => MarkOutcome::AlreadyCe,
                        _ => MarkOutcome::Marked,
                    };
                    assert_eq!(out, want, "ecn {ecn} vlan {vlan:?}");
                    let p = crate::parse_frame(f).unwrap();
                    assert_eq!(p.ecn, Some(if out.carries_ce() { CE } else { ecn }));
                    // DSCP, flow label, addresses, ports: as before
                    let q = crate::parse_frame(&before).unwrap();
                    assert_eq!(
                        (p.dscp, p.src_ip, p.dst_port),
                        (q.dscp, q.src_ip, q.dst_port)
                    );
                    if out != MarkOutcome::Marked {
                        assert_eq!(f, &before[..]);
                    }
                    if p.ip_version == Some(crate::ip::Version::V4) {
                        let ip = ipv4::Packet::new_checked(&f[p.l3_offset..]).unwrap();
                        assert!(ip.verify_checksum());
                        // the transport checksum does not cover the TOS octet
                        let t = crate::tcp::Packet::new_checked(ip.payload()).unwrap();
                        assert!(t.verify_checksum(ip.src_addr().into(), ip.dst_addr().into()));
                    } else {
                        let ip = ipv6::Packet::new_checked(&f[p.l3_offset..]).unwrap();
                        assert_eq!((ip.flow_label(), ip.dscp()), (0xabcde, 46));
                    }
                }
            }
        }
    }

    #[test]
    fn non_ip_and_truncated_frames() {
        // ARP: no ECN field
        let mut arp = [0u8; 60];
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(mark_ce(&mut arp), MarkOutcome::NotEct);
        assert_eq!(ecn_field(&arp), None);
        // every proper prefix of an ECT(0) frame is cut short inside a header or the IPv4
        // total length
        let full = v4_frame(0x02);
        for n in 0..full.len() {
            let mut f = full[..n].to_vec();
            assert_eq!(mark_ce(&mut f), MarkOutcome::Malformed, "len {n}");
            assert_eq!(f, full[..n]);
            assert!(!is_ect(&f));
        }
        // an IPv4 EtherType carrying an IPv6 header
        let mut f = v4_frame(0x02);
        f[14] = 0x65;
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), MarkOutcome::Malformed);
        assert_eq!(f, orig);
        // three VLAN tags
        let mut f = std::vec![0u8; 12];
        for _ in 0..3 {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&v4_frame(0x02)[14..]);
        assert_eq!(mark_ce(&mut f), MarkOutcome::Malformed);
    }

    /// Frames for the property tests: built IPv4/IPv6 frames with any ECN codepoint.
    fn some_frame(which: usize, ecn: u8, vlan: Option<u16>) -> Vec<u8> {
        let eth = EthSpec {
            vlan,
            ..EthSpec::default()
        };
        let mut buf = [0u8; 256];
        let n = if which % 2 == 0 {
            let ip = Ipv4Spec {
                ecn,
                ..Ipv4Spec::default()
            };
            build::tcp_v4_frame(&mut buf, &eth, &ip, &TcpSpec::default(), b"data").unwrap()
        } else {
            let ip = Ipv6Spec {
                ecn,
                ..Ipv6Spec::default()
            };
            build::udp_v6_frame(&mut buf, &eth, &ip, 7, 9, b"data").unwrap()
        };
        buf[..n].to_vec()
    }

    /// The frame is unchanged unless marked; when marked, only the ECN bits and the IPv4
    /// checksum changed, and the checksum equals a full recomputation.
    fn check_marking(before: &[u8]) -> Result<(), TestCaseError> {
        let mut f = before.to_vec();
        let out = mark_ce(&mut f);
        if out != MarkOutcome::Marked {
            prop_assert_eq!(&f[..], before);
            return Ok(());
        }
        prop_assert_eq!(ecn_field(&f), Some(CE));
        let p = crate::parse_frame(&f);
        let eth = ethernet::Frame::new_checked(&f[..]).unwrap();
        let l3 = eth.header_len();
        let changed: Vec<usize> = (0..f.len()).filter(|&i| f[i] != before[i]).collect();
        if eth.ethertype() == ethertype::IPV4 {
            let hl = usize::from(f[l3] & 0x0f) * 4;
            let mut hdr = f[l3..l3 + hl].to_vec();
            let got = u16::from_be_bytes([hdr[10], hdr[11]]);
            hdr[10] = 0;
            hdr[11] = 0;
            prop_assert_eq!(got, checksum::checksum(&hdr));
            prop_assert!(changed
                .iter()
                .all(|&i| i == l3 + 1 || i == l3 + 10 || i == l3 + 11));
            prop_assert_eq!(f[l3 + 1] & !3, before[l3 + 1] & !3);
        } else {
            prop_assert!(changed.iter().all(|&i| i == l3 + 1));
            prop_assert_eq!(f[l3 + 1] & 0xcf, before[l3 + 1] & 0xcf);
        }
        // marking does not change what the classifier sees, apart from the ECN field
        if let (Ok(a), Ok(b)) = (p, crate::parse_frame(before)) {
            prop_assert_eq!(crate::Parsed { ecn: b.ecn, ..a }, b);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_and_stay_unless_marked(
            data in proptest::collection::vec(any::<u8>(), 0..120),
            ipv6 in any::<bool>(),
        ) {
            let mut data = data;
            // make an IP EtherType likely, so the IP paths are exercised
            if data.len() >= 14 {
                let t = if ipv6 { ethertype::IPV6 } else { ethertype::IPV4 };
                data[12..14].copy_from_slice(&t.to_be_bytes());
            }
            let _ = is_ect(&data);
            check_marking(&data)?;
        }

        #[test]
        fn mutated_built_frames(
            which in 0usize..2,
            ecn in 0u8..4,
            vlan in proptest::option::of(0u16..4096),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut f = some_frame(which, ecn, vlan);
            check_marking(&f)?;
            for (i, v) in edits {
                let at = i.index(f.len());
                f[at] = v;
            }
            let n = cut.index(f.len() + 1);
            check_marking(&f[..n])?;
        }

        /// An intact built frame with an ECT codepoint is always marked.
        #[test]
        fn ect_frames_are_always_marked(which in 0usize..2, ect1 in any::<bool>(), vlan in proptest::option::of(0u16..4096)) {
            let mut f = some_frame(which, if ect1 { ECT1 } else { ECT0 }, vlan);
            prop_assert!(is_ect(&f));
            prop_assert_eq!(mark_ce(&mut f), MarkOutcome::Marked);
            prop_assert_eq!(mark_ce(&mut f), MarkOutcome::AlreadyCe);
        }
    }
}
