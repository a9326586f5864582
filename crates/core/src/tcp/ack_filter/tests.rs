//! The ACK filter on hand-made ACK sequences (each case worked out with CAKE's rules), and
//! a property test on random ACK streams through a queue.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use weir_wire::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};
use weir_wire::tcp::TcpOption;

const ACK: TcpFlags = TcpFlags::ACK;
const ECE: TcpFlags = TcpFlags::ECE;
const CWR: TcpFlags = TcpFlags::CWR;

/// One segment to build: a pure ACK from 10.0.0.2:80 to 10.0.0.1:40000 unless changed
/// (also the flow queue's ACK-filter tests' frames).
#[derive(Clone, Debug)]
pub(crate) struct Seg {
    pub(crate) v6: bool,
    pub(crate) src_port: u16,
    /// Swap the addresses (the other direction) when set.
    pub(crate) reverse: bool,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: TcpFlags,
    pub(crate) window: u16,
    pub(crate) ts: Option<(u32, u32)>,
    pub(crate) sack: Vec<(u32, u32)>,
    /// Options written after the timestamps and SACK.
    pub(crate) extra: Vec<TcpOption>,
    pub(crate) data: usize,
}

impl Default for Seg {
    fn default() -> Self {
        Seg {
            v6: false,
            src_port: 80,
            reverse: false,
            seq: 5000,
            ack: 1000,
            flags: ACK,
            window: 1000,
            ts: None,
            sack: vec![],
            extra: vec![],
            data: 0,
        }
    }
}

pub(crate) fn ack(n: u32) -> Seg {
    Seg {
        ack: n,
        ..Seg::default()
    }
}

fn sack_option(blocks: &[(u32, u32)]) -> TcpOption {
    let mut b = [(0, 0); 4];
    b[..blocks.len()].copy_from_slice(blocks);
    TcpOption::Sack {
        blocks: b,
        count: blocks.len() as u8,
    }
}

impl Seg {
    pub(crate) fn ts(mut self, tsval: u32, tsecr: u32) -> Seg {
        self.ts = Some((tsval, tsecr));
        self
    }
    pub(crate) fn sack(mut self, blocks: &[(u32, u32)]) -> Seg {
        self.sack = blocks.to_vec();
        self
    }
    pub(crate) fn flags(mut self, f: TcpFlags) -> Seg {
        self.flags = f;
        self
    }
    pub(crate) fn opt(mut self, o: TcpOption) -> Seg {
        self.extra.push(o);
        self
    }
    pub(crate) fn v6(mut self) -> Seg {
        self.v6 = true;
        self
    }

    pub(crate) fn frame(&self) -> Vec<u8> {
        let spec = TcpSpec {
            src_port: self.src_port,
            dst_port: 40000,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            window: self.window,
            timestamps: self.ts,
            ..TcpSpec::default()
        };
        let mut extra = vec![];
        if !self.sack.is_empty() {
            extra.extend([TcpOption::Nop, TcpOption::Nop, sack_option(&self.sack)]);
        }
        extra.extend_from_slice(&self.extra);
        let data = vec![0x5a; self.data];
        let mut buf = vec![0u8; 2048];
        let eth = EthSpec::default();
        let n = if self.v6 {
            let (a, b) = (
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            );
            let (src, dst) = if self.reverse { (b, a) } else { (a, b) };
            let ip = Ipv6Spec {
                src,
                dst,
                ..Ipv6Spec::default()
            };
            build::tcp_v6_frame_opts(&mut buf, &eth, &ip, &spec, &extra, &data)
        } else {
            let (a, b) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
            let (src, dst) = if self.reverse { (b, a) } else { (a, b) };
            let ip = Ipv4Spec {
                src,
                dst,
                ..Ipv4Spec::default()
            };
            build::tcp_v4_frame_opts(&mut buf, &eth, &ip, &spec, &extra, &data)
        };
        buf.truncate(n.unwrap());
        buf
    }
}

/// A UDP frame (never a trigger nor a candidate).
pub(crate) fn udp_frame() -> Vec<u8> {
    let mut udp = vec![0u8; 128];
    let ip = Ipv4Spec::default();
    let n = build::udp_v4_frame(&mut udp, &EthSpec::default(), &ip, 1, 2, b"x").unwrap();
    udp.truncate(n);
    udp
}

/// The filter's answer for `queued` (head first) and a new segment.
fn run(mode: AckFilterMode, queued: &[Seg], new: &Seg) -> Option<usize> {
    let frames: Vec<Vec<u8>> = queued.iter().map(Seg::frame).collect();
    run_frames(mode, &frames, &new.frame())
}

fn run_frames(mode: AckFilterMode, queued: &[Vec<u8>], new: &[u8]) -> Option<usize> {
    find_redundant(
        mode,
        new,
        queued.iter().enumerate().map(|(i, f)| (i, f.as_slice())),
    )
}

/// The answers in modes On and Aggressive.
fn both(queued: &[Seg], new: &Seg) -> (Option<usize>, Option<usize>) {
    (
        run(AckFilterMode::On, queued, new),
        run(AckFilterMode::Aggressive, queued, new),
    )
}

#[test]
fn modes_have_names() {
    for m in AckFilterMode::ALL {
        assert_eq!(AckFilterMode::parse(m.name()), Some(m));
    }
    assert_eq!(AckFilterMode::parse("conservative"), None);
    assert_eq!(AckFilterMode::default(), AckFilterMode::Off);
}

#[test]
fn cumulative_acks_advancing() {
    // one queued ACK: only the aggressive mode drops it (it is right before the new one)
    assert_eq!(both(&[ack(100)], &ack(200)), (None, Some(0)));
    // two queued: the conservative mode drops the first, keeping the second
    assert_eq!(both(&[ack(100), ack(150)], &ack(200)), (Some(0), Some(0)));
    // the first eligible is dropped, however many follow
    assert_eq!(
        both(&[ack(100), ack(110), ack(120), ack(130)], &ack(200)),
        (Some(0), Some(0))
    );
    // an equal cumulative ACK with no SACK says nothing new: nothing is eligible
    assert_eq!(both(&[ack(200), ack(200)], &ack(200)), (None, None));
    // a queued ACK ahead of the new one (reordered) stays; the one before it is eligible
    assert_eq!(both(&[ack(100), ack(300)], &ack(200)), (None, None));
    assert_eq!(
        both(&[ack(300), ack(100), ack(150)], &ack(200)),
        (Some(1), Some(1))
    );
    // mode Off never drops
    assert_eq!(run(AckFilterMode::Off, &[ack(1), ack(2)], &ack(3)), None);
    // nothing queued
    assert_eq!(both(&[], &ack(3)), (None, None));
}

#[test]
fn sequence_numbers_wrap() {
    // 0xffff_ff00 is before 0x100: eligible; 0x100 is after 0xffff_ff00: kept
    assert_eq!(both(&[ack(0xffff_ff00)], &ack(0x100)), (None, Some(0)));
    assert_eq!(both(&[ack(0x100)], &ack(0xffff_ff00)), (None, None));
}

#[test]
fn aggressive_needs_the_ack_right_before_the_new_one() {
    let data = Seg {
        data: 100,
        ..ack(120)
    };
    // the eligible ACK is followed by a data segment of its connection
    assert_eq!(both(&[ack(100), data.clone()], &ack(200)), (None, None));
    // or by another connection's packet: still not adjacent
    let other = Seg {
        src_port: 81,
        ..ack(120)
    };
    assert_eq!(both(&[ack(100), other], &ack(200)), (None, None));
    // two eligible with a data segment between: the conservative mode drops the first
    assert_eq!(
        both(&[ack(100), data, ack(150)], &ack(200)),
        (Some(0), Some(0))
    );
}

#[test]
fn duplicate_acks_with_new_sack_information() {
    let a = ack(100).sack(&[(200, 300)]);
    // same cumulative ACK, the new one SACKs more: the old one is redundant
    let more = ack(100).sack(&[(200, 300), (400, 500)]);
    assert_eq!(both(std::slice::from_ref(&a), &more), (None, Some(0)));
    // the block grew
    assert_eq!(
        both(std::slice::from_ref(&a), &ack(100).sack(&[(150, 350)])),
        (None, Some(0))
    );
    // the new one lacks the old one's block: the old one carries news, kept
    assert_eq!(
        both(std::slice::from_ref(&a), &ack(100).sack(&[(400, 500)])),
        (None, None)
    );
    // the very same blocks and cumulative ACK: nothing new
    assert_eq!(both(std::slice::from_ref(&a), &a), (None, None));
    // the same blocks with a higher cumulative ACK: redundant
    assert_eq!(
        both(std::slice::from_ref(&a), &ack(150).sack(&[(200, 300)])),
        (None, Some(0))
    );
    // the new ACK has no SACK: an old one with blocks is kept, even below its ACK
    assert_eq!(both(std::slice::from_ref(&a), &ack(400)), (None, None));
    // the old one has none, the new one has: redundant (same cumulative ACK)
    assert_eq!(both(&[ack(100)], &a), (None, Some(0)));
    // conservative: of three duplicate ACKs with growing SACK, the first goes
    let b = ack(100).sack(&[(200, 300), (400, 500)]);
    let c = ack(100).sack(&[(200, 300), (400, 500), (600, 700)]);
    assert_eq!(both(&[a, b], &c), (Some(0), Some(0)));
}

#[test]
fn sack_blocks_are_compared_as_cake_does() {
    // the old block spans two of the new ones: not inside any one of them, kept
    let old = ack(100).sack(&[(200, 400)]);
    assert_eq!(
        both(&[old], &ack(100).sack(&[(200, 300), (300, 400)])),
        (None, None)
    );
    // all old blocks covered, but not more bytes and the same cumulative ACK: kept
    let old = ack(100).sack(&[(200, 300), (400, 500)]);
    assert_eq!(
        both(
            std::slice::from_ref(&old),
            &ack(100).sack(&[(400, 500), (200, 300)])
        ),
        (None, None)
    );
    // ... with a higher cumulative ACK: redundant
    assert_eq!(
        both(&[old], &ack(101).sack(&[(400, 500), (200, 300)])),
        (None, Some(0))
    );
    // sequence-space comparison across the wrap
    let old = ack(0xffff_fe00).sack(&[(0xffff_ff00, 0x10)]);
    let new = ack(0xffff_fe00).sack(&[(0xffff_fe80, 0x20)]);
    assert_eq!(both(&[old], &new), (None, Some(0)));
}

#[test]
fn a_dsack_is_never_dropped() {
    // a block below the cumulative ACK reports a duplicate segment (RFC 2883)
    let dsack = ack(500).sack(&[(100, 200)]);
    let new = ack(600).sack(&[(50, 250), (700, 800)]);
    assert_eq!(both(&[dsack], &new), (None, None));
    // a D-SACK as the second block too
    let dsack = ack(500).sack(&[(700, 800), (100, 200)]);
    assert_eq!(both(&[dsack], &new), (None, None));
}

#[test]
fn ece_and_cwr_changes_are_kept() {
    // the eligible ACK's ECE differs from the next ACK's: forgotten, and the second one
    // becomes the first eligible; the conservative mode then finds only one
    let q = [ack(100).flags(ACK | ECE), ack(150)];
    assert_eq!(both(&q, &ack(200)), (None, Some(1)));
    // the aggressive mode also needs the new ACK's bits to match
    assert_eq!(both(&q, &ack(200).flags(ACK | ECE)), (None, None));
    // a run of ECE ACKs: redundant ones go
    let q = [ack(100).flags(ACK | ECE), ack(150).flags(ACK | ECE)];
    assert_eq!(both(&q, &ack(200).flags(ACK | ECE)), (Some(0), Some(0)));
    // a data segment (never eligible itself) with other bits also resets
    let data = Seg {
        data: 10,
        ..ack(120).flags(ACK | CWR)
    };
    let q = [ack(100), data, ack(150)];
    assert_eq!(both(&q, &ack(200)), (None, Some(2)));
    // CWR counts like ECE
    let q = [ack(100).flags(ACK | CWR), ack(150).flags(ACK | CWR)];
    assert_eq!(both(&q, &ack(200).flags(ACK | CWR)), (Some(0), Some(0)));
    assert_eq!(both(&q, &ack(200)), (Some(0), Some(0)));
    // another connection's bits do not matter
    let other = Seg {
        src_port: 81,
        ..ack(120).flags(ACK | ECE)
    };
    assert_eq!(
        both(&[ack(100), other, ack(150)], &ack(200)),
        (Some(0), Some(0))
    );
}

#[test]
fn window_updates_are_not_read() {
    // CAKE compares no windows: a newer ACK carries the receiver's current window
    let q = [
        Seg {
            window: 65535,
            ..ack(100)
        },
        Seg {
            window: 10,
            ..ack(150)
        },
    ];
    let new = Seg {
        window: 5,
        ..ack(200)
    };
    assert_eq!(both(&q, &new), (Some(0), Some(0)));
    // a pure window update (same ACK, no SACK) says nothing new by CAKE's rules: kept
    let q = [Seg {
        window: 10,
        ..ack(200)
    }];
    let new = Seg {
        window: 60000,
        ..ack(200)
    };
    assert_eq!(both(&q, &new), (None, None));
}

#[test]
fn timestamps_must_not_be_newer_than_the_new_acks() {
    // older timestamps: redundant
    assert_eq!(
        both(&[ack(100).ts(10, 5)], &ack(200).ts(11, 6)),
        (None, Some(0))
    );
    // equal: redundant
    assert_eq!(
        both(&[ack(100).ts(10, 5)], &ack(200).ts(10, 5)),
        (None, Some(0))
    );
    // a newer TSval or TSecr (reordered ACKs): kept
    assert_eq!(
        both(&[ack(100).ts(12, 5)], &ack(200).ts(11, 6)),
        (None, None)
    );
    assert_eq!(
        both(&[ack(100).ts(10, 7)], &ack(200).ts(11, 6)),
        (None, None)
    );
    // the middle one is newer: kept, and the first is then not adjacent to the new one
    let q = [ack(100).ts(10, 5), ack(150).ts(12, 5)];
    assert_eq!(both(&q, &ack(200).ts(11, 6)), (None, None));
    // serial-number arithmetic: 0xffff_fff0 is before 5
    assert_eq!(
        both(&[ack(100).ts(0xffff_fff0, 1)], &ack(200).ts(5, 1)),
        (None, Some(0))
    );
    // a new ACK without timestamps counts as (0, 0): a queued one with them is kept,
    // unless they are "before" 0 too
    assert_eq!(both(&[ack(100).ts(10, 5)], &ack(200)), (None, None));
    assert_eq!(
        both(&[ack(100).ts(0x8000_0001, 0xffff_ffff)], &ack(200)),
        (None, Some(0))
    );
    // a queued ACK without timestamps before one with: redundant
    assert_eq!(both(&[ack(100)], &ack(200).ts(1, 1)), (None, Some(0)));
}

#[test]
fn options_the_filter_does_not_understand_keep_the_ack() {
    let new = ack(200);
    let keep = [
        TcpOption::Mss(1460),
        TcpOption::WindowScale(7),
        TcpOption::SackPermitted,
        TcpOption::Unknown { kind: 34, len: 10 }, // TCP fast open cookie
        TcpOption::Unknown { kind: 254, len: 4 }, // experimental
        TcpOption::Unknown { kind: 30, len: 4 },  // MPTCP
        TcpOption::Unknown { kind: 5, len: 6 },   // SACK of a length 2 + 8n is not
        TcpOption::Unknown { kind: 8, len: 6 },   // a timestamp of length 6
    ];
    for o in keep {
        assert_eq!(both(&[ack(100).opt(o)], &new), (None, None), "{o:?}");
    }
    // MD5 signatures, NOPs and an empty SACK option do not matter
    for o in [
        TcpOption::Unknown { kind: 19, len: 18 },
        TcpOption::Nop,
        TcpOption::Unknown { kind: 5, len: 2 },
    ] {
        assert_eq!(both(&[ack(100).opt(o)], &new), (None, Some(0)), "{o:?}");
    }
    // anything after EOL is not read
    let after_eol = ack(100).opt(TcpOption::Eol).opt(TcpOption::Mss(1460));
    assert_eq!(both(&[after_eol], &new), (None, Some(0)));
    // a malformed option (length past the header) ends the walk, as in Linux: what came
    // before it decides
    let mut bad = ack(100)
        .opt(TcpOption::Unknown { kind: 30, len: 4 })
        .frame();
    let at = bad.len() - 3; // the option's length octet
    assert_eq!(bad[at - 1], 30);
    bad[at] = 40;
    let newf = new.frame();
    assert_eq!(
        run_frames(AckFilterMode::Aggressive, std::slice::from_ref(&bad), &newf),
        Some(0)
    );
    let mss_first = ack(100)
        .opt(TcpOption::Mss(1460))
        .opt(TcpOption::Unknown { kind: 30, len: 4 })
        .frame();
    let mut bad2 = mss_first.clone();
    let at = bad2.len() - 3;
    bad2[at] = 40;
    assert_eq!(run_frames(AckFilterMode::Aggressive, &[bad2], &newf), None);
}

#[test]
fn segments_with_data_or_other_flags_are_kept() {
    let new = ack(200);
    let data = Seg {
        data: 1,
        ..ack(100)
    };
    assert_eq!(both(&[data], &new), (None, None));
    for f in [
        TcpFlags::SYN,
        TcpFlags::FIN,
        TcpFlags::RST,
        TcpFlags::PSH,
        TcpFlags::URG,
    ] {
        assert_eq!(
            both(&[ack(100).flags(ACK | f)], &new),
            (None, None),
            "{f:?}"
        );
    }
    // no ACK flag at all
    assert_eq!(both(&[ack(100).flags(TcpFlags(0))], &new), (None, None));
    // the AE bit (octet 12's lowest) or a reserved bit
    for bit in [0x01u8, 0x02, 0x08] {
        let mut f = ack(100).frame();
        f[14 + 20 + 12] |= bit;
        assert_eq!(
            run_frames(AckFilterMode::Aggressive, &[f], &new.frame()),
            None
        );
    }
}

#[test]
fn what_triggers_the_filter() {
    let q = [ack(100), ack(150)];
    // a data segment with ACK (and FIN, PSH) triggers
    let data = Seg {
        data: 500,
        ..ack(200).flags(ACK | TcpFlags::PSH | TcpFlags::FIN)
    };
    assert_eq!(both(&q, &data), (Some(0), Some(0)));
    // SYN-ACK and segments without ACK do not
    assert_eq!(both(&q, &ack(200).flags(ACK | TcpFlags::SYN)), (None, None));
    assert_eq!(both(&q, &ack(200).flags(TcpFlags::RST)), (None, None));
    assert!(may_trigger(ACK | ECE | TcpFlags::FIN));
    assert!(!may_trigger(ACK | TcpFlags::SYN));
    assert!(!may_trigger(TcpFlags::PSH));
    assert!(Trigger::of(&ack(1).frame()).is_some());
    // not TCP, truncated, garbage: no trigger, and such queued frames are skipped
    let udp = udp_frame();
    let full = ack(200).frame();
    for bad in [&udp[..], &full[..full.len() - 1], &[0u8; 10][..], &[]] {
        assert!(Trigger::of(bad).is_none());
        let q = [ack(100).frame(), bad.to_vec(), ack(150).frame()];
        assert_eq!(run_frames(AckFilterMode::On, &q, &full), Some(0));
    }
}

#[test]
fn only_the_same_connection_and_direction_counts() {
    let new = ack(200);
    let port = |p: u16| Seg {
        src_port: p,
        ..ack(100)
    };
    let rev = Seg {
        reverse: true,
        ..ack(100)
    };
    // colliding flows in one queue: ACKs of another port or direction are not candidates
    assert_eq!(both(&[port(81), port(81)], &new), (None, None));
    assert_eq!(both(&[rev.clone(), rev], &new), (None, None));
    // ... and do not hide the connection's own
    assert_eq!(
        both(&[port(81), ack(100), port(81), ack(150)], &new),
        (Some(1), Some(1))
    );
    // an IPv6 ACK is not an IPv4 one
    assert_eq!(both(&[ack(100).v6()], &new), (None, None));
}

#[test]
fn ipv6() {
    assert_eq!(both(&[ack(100).v6()], &ack(200).v6()), (None, Some(0)));
    let q = [
        ack(100).v6().sack(&[(300, 400)]),
        ack(150).v6().sack(&[(300, 500)]),
    ];
    assert_eq!(
        both(&q, &ack(200).v6().sack(&[(300, 600)])),
        (Some(0), Some(0))
    );
    let other = Seg {
        reverse: true,
        ..ack(100).v6()
    };
    assert_eq!(both(&[other], &ack(200).v6()), (None, None));
    // TCP after an extension header: neither candidate nor trigger (CAKE reads TCP only
    // right after the fixed header)
    let with_ext = |s: Seg| {
        let mut f = s.v6().frame();
        // destination options, 8 bytes of PadN, between the header and TCP
        let l4 = 14 + 40;
        f.splice(l4..l4, [6u8, 0, 1, 4, 0, 0, 0, 0]);
        f[14 + 6] = 60;
        let plen = u16::from_be_bytes([f[18], f[19]]) + 8;
        f[18..20].copy_from_slice(&plen.to_be_bytes());
        f
    };
    let newf = ack(200).v6().frame();
    assert!(weir_wire::parse_frame(&with_ext(ack(100)))
        .unwrap()
        .tcp_flags
        .is_some());
    assert_eq!(
        run_frames(AckFilterMode::Aggressive, &[with_ext(ack(100))], &newf),
        None
    );
    assert!(Trigger::of(&with_ext(ack(200))).is_none());
}

/// `s` (IPv6) carried in IPv4 protocol 41 between `outer.0` and `outer.1`.
fn six_in_four(s: &Seg, outer: (Ipv4Addr, Ipv4Addr)) -> Vec<u8> {
    let inner = s.clone().v6().frame();
    let v6 = &inner[14..];
    let mut f = inner[..14].to_vec();
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + v6.len()) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 41;
    ip[12..16].copy_from_slice(&outer.0.octets());
    ip[16..20].copy_from_slice(&outer.1.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(v6);
    weir_wire::ipv4::Packet::new_checked(&mut f[14..])
        .unwrap()
        .fill_checksum();
    f
}

#[test]
fn six_in_four_tunnels() {
    let t = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 1));
    let q = [six_in_four(&ack(100), t), six_in_four(&ack(150), t)];
    let new = six_in_four(&ack(200), t);
    assert_eq!(run_frames(AckFilterMode::On, &q, &new), Some(0));
    // native IPv6 ACKs of the same inner connection, or another tunnel: not the same
    let native = [ack(100).v6().frame(), ack(150).v6().frame()];
    assert_eq!(run_frames(AckFilterMode::On, &native, &new), None);
    let t2 = (t.0, Ipv4Addr::new(198, 51, 100, 2));
    let other = [six_in_four(&ack(100), t2), six_in_four(&ack(150), t2)];
    assert_eq!(run_frames(AckFilterMode::On, &other, &new), None);
}

#[test]
fn ipv4_fragments_are_left_alone() {
    let mut frag = ack(100).frame();
    frag[14 + 6] |= 0x20; // more fragments
    weir_wire::ipv4::Packet::new_checked(&mut frag[14..])
        .unwrap()
        .fill_checksum();
    let new = ack(200).frame();
    assert_eq!(
        run_frames(AckFilterMode::Aggressive, std::slice::from_ref(&frag), &new),
        None
    );
    assert!(Trigger::of(&frag).is_none());
}

#[test]
fn vlan_tagged_frames() {
    let tagged = |s: Seg| {
        let mut f = s.frame();
        f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        f
    };
    let q = [tagged(ack(100)), tagged(ack(150))];
    assert_eq!(
        run_frames(AckFilterMode::On, &q, &tagged(ack(200))),
        Some(0)
    );
}

/// The pre-check accepts what may trigger, refuses what cannot, reading VLAN tags, IPv6
/// and 6in4 as `Trigger::of` does.
#[test]
fn the_pre_check() {
    let yes = |f: &[u8]| assert!(may_trigger_frame(f), "{f:02x?}");
    let no = |f: &[u8]| assert!(!may_trigger_frame(f), "{f:02x?}");
    yes(&ack(1).frame());
    yes(&ack(1).v6().frame());
    yes(&Seg {
        data: 100,
        ..ack(1)
    }
    .frame());
    yes(&ack(1).flags(ACK | TcpFlags::FIN | ECE).frame());
    let mut tagged = ack(1).frame();
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07, 0x81, 0x00, 0x00, 0x08]);
    yes(&tagged);
    let t = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 1));
    yes(&six_in_four(&ack(1), t));
    no(&ack(1).flags(ACK | TcpFlags::SYN).frame());
    no(&ack(1).flags(TcpFlags::PSH).frame());
    no(&ack(1).v6().flags(TcpFlags::SYN).frame());
    no(&udp_frame());
    let f = ack(1).frame();
    for cut in [0, 13, 14 + 9, 14 + 20 + 13] {
        no(&f[..cut]);
    }
    yes(&f[..14 + 20 + 14]);
}

proptest::proptest! {
    /// Every frame `Trigger::of` accepts passes the pre-check: valid segments of any
    /// flags, IPv4 or IPv6, 0-2 VLAN tags, with random bytes overwritten and cut short.
    #[test]
    fn the_pre_check_keeps_every_trigger(
        flags in proptest::prelude::any::<u8>(),
        v6 in proptest::prelude::any::<bool>(),
        tags in 0usize..3,
        data in 0usize..40,
        edits in proptest::collection::vec(
            (proptest::prelude::any::<u16>(), proptest::prelude::any::<u8>()), 0..4),
        cut in proptest::prelude::any::<u16>(),
    ) {
        let s = Seg { v6, data, ..ack(7).flags(TcpFlags(flags)).ts(1, 2) };
        let mut f = s.frame();
        for _ in 0..tags {
            f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        }
        for (at, b) in edits {
            let at = at as usize % f.len();
            f[at] = b;
        }
        f.truncate(f.len() - cut as usize % 8);
        if Trigger::of(&f).is_some() {
            proptest::prop_assert!(may_trigger_frame(&f));
        }
        let valid = Seg { v6, data, ..ack(7).flags(TcpFlags(flags)) }.frame();
        proptest::prop_assert_eq!(may_trigger_frame(&valid), may_trigger(TcpFlags(flags)));
    }
}

mod stream;
