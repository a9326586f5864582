//! TCP rate control through a policy-built device: a handshake, data one way, ACKs the
//! other way, figures worked out by hand in each test.

use super::*;
use crate::policy::{Device, Policy};
use crate::rng::Rng;
use std::net::{IpAddr, Ipv4Addr};
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};

const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// 1 Mbit/s link, one rate-controlled class of 1 Mbit/s (the link shapes outbound: the
/// client's data; the server's ACKs come back inbound, unshaped).
const POLICY: &str = r#"
    [link]
    rate = "1Mbit"
    default = "bulk"
    [[class]]
    name = "bulk"
    rate = "1Mbit"
    tcr = true
"#;

struct Env {
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    dev: Device,
}

fn ms(x: u64) -> Instant {
    Instant(x * 1_000_000)
}

#[derive(Clone, Copy, Default)]
struct Seg {
    client: bool,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    wscale: Option<u8>,
    payload: usize,
    /// Replace the first 12 option bytes (timestamps + 2 NOPs) with NOP NOP SACK(one block).
    sack: Option<(u32, u32)>,
    sport: u16,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const SYNACK: u8 = SYN | ACK;

impl Env {
    fn new(policy: &str) -> Env {
        let p = Policy::parse("t.toml", policy).unwrap_or_else(|e| panic!("{e}"));
        Env {
            pool: Pool::new(256, 2048),
            rng: Rng::new(1),
            dropped: Vec::new(),
            dev: p.build_device(Instant::ZERO).unwrap(),
        }
    }

    fn frame(&mut self, s: Seg) -> PktId {
        let id = self.pool.alloc().unwrap();
        let sport = if s.sport == 0 { 40000 } else { s.sport };
        let (src, dst, sp, dp) = if s.client {
            (CLIENT, SERVER, sport, 5000)
        } else {
            (SERVER, CLIENT, 5000, sport)
        };
        let tcp = TcpSpec {
            src_port: sp,
            dst_port: dp,
            seq: s.seq,
            ack: s.ack,
            flags: TcpFlags(s.flags),
            window: s.window,
            mss: (s.flags & SYN != 0).then_some(1460),
            window_scale: s.wscale,
            timestamps: s.sack.map(|_| (1, 1)),
            ..Default::default()
        };
        let ip = Ipv4Spec {
            src,
            dst,
            ..Default::default()
        };
        let payload = vec![0u8; s.payload];
        let n = build::tcp_v4_frame(
            self.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            &tcp,
            &payload,
        )
        .unwrap();
        self.pool.meta_mut(id).len = n as u32;
        if let Some((left, right)) = s.sack {
            let d = self.pool.data_mut(id);
            let o = 14 + 20 + 20;
            d[o..o + 2].copy_from_slice(&[1, 1]);
            d[o + 2..o + 4].copy_from_slice(&[5, 10]);
            d[o + 4..o + 8].copy_from_slice(&left.to_be_bytes());
            d[o + 8..o + 12].copy_from_slice(&right.to_be_bytes());
            let mut p = Packet::new_checked(&mut d[14 + 20..n]).unwrap();
            p.fill_checksum(IpAddr::V4(src), IpAddr::V4(dst));
        }
        id
    }

    fn send(&mut self, s: Seg, now: Instant) -> PktId {
        let id = self.frame(s);
        let dir = if s.client {
            Direction::Outbound
        } else {
            Direction::Inbound
        };
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        self.dev.ingress(dir, id, &mut cx, now).unwrap();
        id
    }

    fn poll(&mut self, dir: Direction, now: Instant) -> Option<PktId> {
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        self.dev.poll_transmit(dir, &mut cx)
    }

    /// The window field of a frame, checking its TCP checksum and header length.
    fn window(&self, id: PktId) -> u16 {
        let f = self.pool.data(id);
        let q = weir_wire::parse_frame(f).unwrap();
        let p = Packet::new_checked(&f[q.l4_offset.unwrap()..q.l3_end]).unwrap();
        assert!(
            p.verify_checksum(q.src_ip.unwrap(), q.dst_ip.unwrap()),
            "checksum"
        );
        p.window()
    }

    fn ack_of(&self, id: PktId) -> u32 {
        let f = self.pool.data(id);
        let q = weir_wire::parse_frame(f).unwrap();
        Packet::new_checked(&f[q.l4_offset.unwrap()..q.l3_end])
            .unwrap()
            .ack_number()
    }

    /// SYN at 0, SYN-ACK at 50 ms, ACK at 100 ms (both halves 50 ms: RTT 100 ms), window
    /// scale 7 both ways, then 1460 bytes of data from the client at 100 ms.
    fn handshake(&mut self, sport: u16) {
        let c = |flags, seq, ack| Seg {
            client: true,
            flags,
            seq,
            ack,
            window: 1000,
            wscale: Some(7),
            sport,
            ..Default::default()
        };
        self.send(c(SYN, 0, 0), ms(0));
        let synack = Seg {
            client: false,
            flags: SYNACK,
            seq: 0,
            ack: 1,
            window: 65535,
            wscale: Some(7),
            sport,
            ..Default::default()
        };
        self.send(synack, ms(50));
        self.send(
            Seg {
                wscale: None,
                ..c(ACK, 1, 1)
            },
            ms(100),
        );
        let data = Seg {
            payload: 1460,
            wscale: None,
            ..c(ACK, 1, 1)
        };
        self.send(data, ms(100));
        for dir in [Direction::Outbound, Direction::Inbound] {
            while let Some(p) = self.poll(dir, ms(100)) {
                self.pool.free(p);
            }
        }
    }
}

/// An ACK from the server acknowledging up to `ack`, offering 1000 × 128 bytes.
fn server_ack(ack: u32) -> Seg {
    Seg {
        client: false,
        flags: ACK,
        seq: 1,
        ack,
        window: 1000,
        ..Default::default()
    }
}

#[test]
fn acks_are_sized_to_the_rate_times_the_rtt_and_paced() {
    let mut e = Env::new(POLICY);
    e.handshake(0);
    let tcr = e.dev.tcr().unwrap();
    assert_eq!(tcr.sessions(0), 0, "the root is not a TCR class");
    assert_eq!(tcr.sessions(1), 1);
    assert_eq!(tcr.session_rate(1), Some(1_000_000));
    // target: 1 Mbit/s × 100 ms / 8 = 12,500 + one 1460-byte segment = 13,960 bytes;
    // shift 7: ceil(13,960 / 128) = 110 (14,080 bytes), below the offered 1000
    let a1 = e.send(server_ack(1461), ms(150));
    // the SYN-ACK was held one segment time (11.68 ms) and sized over the 50 ms half:
    // 6250 + 1460 = 7710 bytes
    let out = e
        .poll(Direction::Inbound, ms(150))
        .expect("first ACK at once");
    assert_eq!(out, a1);
    assert_eq!(e.window(out), 110);
    e.pool.free(out);
    // it acknowledged 1460 new bytes: the next ACK leaves 1460 × 8 / 1 Mbit/s = 11.68 ms
    // later, at 161.68 ms
    let a2 = e.send(server_ack(2921), ms(151));
    assert!(e.poll(Direction::Inbound, ms(151)).is_none(), "held");
    assert_eq!(e.dev.len(Direction::Inbound), 1);
    assert_eq!(e.dev.next_wakeup(), Some(Instant(161_680_000)));
    assert!(e.poll(Direction::Inbound, Instant(161_679_999)).is_none());
    let out = e.poll(Direction::Inbound, Instant(161_680_000)).unwrap();
    assert_eq!(out, a2);
    assert_eq!(e.window(out), 110);
    e.pool.free(out);
    let s = e.dev.tcr_stats(Direction::Inbound).unwrap();
    // sized: the SYN-ACK and both ACKs
    assert_eq!(
        (s.sized, s.paced, s.at_once, s.handshakes_held),
        (3, 1, 0, 1),
        "{s:?}"
    );
    assert_eq!(e.dev.tcr_stats(Direction::Outbound).unwrap().sized, 0);
}

#[test]
fn a_duplicate_ack_flushes_what_is_held_and_keeps_the_window_the_sender_saw() {
    let mut e = Env::new(POLICY);
    e.handshake(0);
    for (ack, at) in [(1461, 150), (2921, 151), (4381, 152)] {
        e.send(server_ack(ack), ms(at));
    }
    let mut first = Vec::new();
    while let Some(p) = e.poll(Direction::Inbound, ms(152)) {
        first.push(e.ack_of(p));
        e.pool.free(p);
    }
    assert_eq!(first, vec![1461], "2921 and 4381 are held");
    // a duplicate of 4381 arrives: the held ACKs go first, then the duplicate, at once,
    // all with the window the sender last saw
    e.send(server_ack(4381), ms(153));
    let out: Vec<PktId> = (0..3)
        .map(|_| e.poll(Direction::Inbound, ms(153)).unwrap())
        .collect();
    let acks: Vec<u32> = out.iter().map(|&p| e.ack_of(p)).collect();
    assert_eq!(acks, vec![2921, 4381, 4381]);
    let windows: Vec<u16> = out.iter().map(|&p| e.window(p)).collect();
    assert_eq!(windows, vec![110, 110, 110]);
    assert!(e.poll(Direction::Inbound, ms(153)).is_none());
    assert_eq!(e.dev.len(Direction::Inbound), 0);
    assert_eq!(e.dev.tcr_stats(Direction::Inbound).unwrap().at_once, 1);
    // the stale heap item of the flushed ACK releases nothing later
    assert!(e.poll(Direction::Inbound, ms(200)).is_none());
    assert_eq!(e.pool.in_use(), 3);
}

#[test]
fn a_sack_keeps_room_for_recovery_beyond_the_highest_sacked_byte() {
    let mut e = Env::new(POLICY);
    e.handshake(0);
    e.send(server_ack(1461), ms(150));
    let out = e.poll(Direction::Inbound, ms(150)).unwrap();
    e.pool.free(out);
    // SACK of 1461 + 10 × 1460 .. 1461 + 20 × 1460: the edge must reach 20 × 1460 + 2 ×
    // 1460 = 32,120 bytes beyond ack 1461 → ceil(32,120 / 128) = 251
    let s = Seg {
        sack: Some((1461 + 14_600, 1461 + 29_200)),
        ..server_ack(1461)
    };
    e.send(s, ms(151));
    let out = e.poll(Direction::Inbound, ms(151)).expect("at once");
    assert_eq!(e.window(out), 251);
    assert_eq!(e.dev.tcr_stats(Direction::Inbound).unwrap().at_once, 1);
}

#[test]
fn a_connection_picked_up_in_mid_stream_is_left_alone() {
    let mut e = Env::new(POLICY);
    let data = Seg {
        client: true,
        flags: ACK,
        seq: 1,
        ack: 1,
        window: 1000,
        payload: 1460,
        ..Default::default()
    };
    e.send(data, ms(0));
    let a = e.send(server_ack(1461), ms(10));
    let before = e.pool.data(a).to_vec();
    let out = e.poll(Direction::Inbound, ms(10)).unwrap();
    assert_eq!(e.pool.data(out), &before[..], "untouched");
    let s = e.dev.tcr_stats(Direction::Inbound).unwrap();
    assert_eq!((s.not_seen, s.sized), (1, 0));
}

#[test]
fn sessions_share_the_class_rate_and_leave_it_when_idle() {
    let mut e = Env::new(POLICY);
    e.handshake(40000);
    e.handshake(40001);
    let t = e.dev.tcr().unwrap();
    assert_eq!(t.sessions(1), 2);
    assert_eq!(t.session_rate(1), Some(500_000));
    // only the first keeps sending: after IDLE (5 s) and a sweep the second is gone
    let more = Seg {
        client: true,
        flags: ACK,
        seq: 1461,
        ack: 1,
        window: 1000,
        payload: 1460,
        sport: 40000,
        ..Default::default()
    };
    e.send(more, ms(5_200));
    let t = e.dev.tcr().unwrap();
    assert_eq!(t.sessions(1), 1);
    assert_eq!(t.session_rate(1), Some(1_000_000));
}

#[test]
fn a_guarantee_above_the_share_wins() {
    let text = r#"
        [link]
        rate = "1Mbit"
        technique = "cbq+pfq+tcr"
        default = "bulk"
        [[class]]
        name = "bulk"
        rate = "1Mbit"
        [class.session]
        guarantee = "600kbit"
    "#;
    let mut e = Env::new(text);
    e.handshake(40000);
    e.handshake(40001);
    assert_eq!(e.dev.tcr().unwrap().session_rate(1), Some(600_000));
}

#[test]
fn policy_keys_and_presets() {
    // `tcr` is inherited; a child may turn it off; the preset decides the rest
    let text = r#"
        [link]
        rate = "1Mbit"
        default = "a"
        [[class]]
        name = "p"
        rate = "800kbit"
        tcr = true
        [[class]]
        name = "a"
        parent = "p"
        rate = "400kbit"
        [[class]]
        name = "b"
        parent = "p"
        rate = "400kbit"
        tcr = false
        [[class]]
        name = "c"
        rate = "200kbit"
    "#;
    let p = Policy::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let t = p.tcr_table().unwrap();
    let on: Vec<bool> = t.by_class.iter().map(Option::is_some).collect();
    assert_eq!(on, vec![false, false, true, false, false]);
    // forced preset: the technique decides every leaf
    let q = p.with_technique(crate::policy::Technique::CbqPfqTcr);
    let on: Vec<bool> = q
        .tcr_table()
        .unwrap()
        .by_class
        .iter()
        .map(Option::is_some)
        .collect();
    assert_eq!(on, vec![false, false, true, true, true]);
    assert!(p
        .with_technique(crate::policy::Technique::CbqPfq)
        .tcr_table()
        .is_none());
    // `tcr` alone: class ceilings are the link's, rates as written
    let r = p.with_technique(crate::policy::Technique::Tcr);
    let pipe = r.build(Instant::ZERO).unwrap();
    let s = pipe.shaper().unwrap();
    let c = s.class_id("c").unwrap();
    assert_eq!(s.ceil(c).bps(), 1_000_000);
    // and `weir check` says so: the link's ceiling, and which leaves are rate-controlled
    let d = r.describe();
    let line = d
        .lines()
        .find(|l| l.contains("└─ c") || l.contains("├─ c"))
        .unwrap();
    assert!(line.contains("1Mbit") && line.ends_with("+tcr"), "{d}");
    assert_eq!(
        p.describe().matches("+tcr").count(),
        1,
        "only 'a': {}",
        p.describe()
    );
    // a wrong value is an error at its place
    let bad = "[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\ntcr = \"yes\"\n";
    let err = Policy::parse("bad.toml", bad).unwrap_err().to_string();
    assert!(
        err.starts_with("bad.toml:7:7: `tcr`: expected true or false"),
        "{err}"
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Bad input towards a controlled sender — option bytes of any kind and length, a
        /// data offset beyond the frame, any flags and window — never panics; a frame whose
        /// checksum was valid leaves with a valid checksum, and one TCR could not read
        /// leaves unchanged.
        #[test]
        fn mangled_acks_are_forwarded_with_valid_checksums(
            opts in proptest::collection::vec(any::<u8>(), 12),
            offset in 0u8..16,
            flags in any::<u8>(),
            window in any::<u16>(),
            ack in 1461u32..40_000,
            fix_checksum in any::<bool>(),
        ) {
            let mut e = Env::new(POLICY);
            e.handshake(0);
            let s = Seg { sack: Some((1, 2)), window, flags: flags | ACK, ..server_ack(ack) };
            let id = e.frame(s);
            {
                let d = e.pool.data_mut(id);
                let o = 14 + 20 + 20;
                d[o..o + 12].copy_from_slice(&opts);
                d[14 + 20 + 12] = (offset << 4) | (d[14 + 20 + 12] & 0x0f);
                if fix_checksum {
                    use weir_wire::checksum::{combine, finish, pseudo_header, sum16};
                    let seg = &mut d[14 + 20..];
                    seg[16..18].copy_from_slice(&[0, 0]);
                    let ph = pseudo_header(IpAddr::V4(SERVER), IpAddr::V4(CLIENT), 6, seg.len() as u32);
                    let c = finish(combine(ph, sum16(seg)));
                    seg[16..18].copy_from_slice(&c.to_be_bytes());
                }
            }
            let before = e.pool.data(id).to_vec();
            let valid = {
                let q = weir_wire::parse_frame(&before);
                q.ok().and_then(|q| {
                    Packet::new_checked(&before[q.l4_offset?..q.l3_end])
                        .ok()
                        .map(|p| p.verify_checksum(IpAddr::V4(SERVER), IpAddr::V4(CLIENT)))
                })
            };
            let mut cx = Ctx::new(ms(150), &mut e.pool, &mut e.rng, &mut e.dropped);
            let _ = e.dev.ingress(Direction::Inbound, id, &mut cx, ms(150));
            let mut out = Vec::new();
            for t in [150, 2000] {
                while let Some(p) = e.poll(Direction::Inbound, ms(t)) {
                    out.push(p);
                }
            }
            prop_assert_eq!(out.len(), 1, "forwarded, once");
            let after = e.pool.data(out[0]).to_vec();
            match valid {
                Some(true) => {
                    let q = weir_wire::parse_frame(&after).unwrap();
                    let p = Packet::new_checked(&after[q.l4_offset.unwrap()..q.l3_end]).unwrap();
                    prop_assert!(p.verify_checksum(IpAddr::V4(SERVER), IpAddr::V4(CLIENT)));
                }
                None => prop_assert_eq!(&after, &before, "unreadable: unchanged"),
                Some(false) => {}
            }
        }
    }
}

#[test]
fn members_keep_the_session_rate_and_the_last_gap() {
    let c = TcrClass {
        rate_bps: 1_000_000_000,
        guarantee_bps: 0,
    };
    // no session yet: the whole class rate (the count is at least one)
    let mut m = Members::new(Some(c));
    assert_eq!(m.rate, 1_000_000_000);
    // 1 Gbit/s over 1,000 sessions = 1 Mbit/s; 1448 bytes take 1448 × 8 / 10^6 s
    m.ids = (0..1000).collect();
    m.recount(Some(c));
    assert_eq!(m.rate, 1_000_000);
    assert_eq!(m.gap(1448), Duration::from_nanos(11_584_000));
    assert_eq!(m.gap(2896), Duration::from_nanos(23_168_000));
    assert_eq!(m.gap(1448), Duration::from_nanos(11_584_000));
    // 10,000 sessions: 100 kbit/s, ten times the gap for the same bytes
    m.ids = (0..10_000).collect();
    m.recount(Some(c));
    assert_eq!(m.rate, 100_000);
    assert_eq!(m.gap(1448), Duration::from_nanos(115_840_000));
    // a 5 Mbit/s guarantee beats 1 Mbit/s: 1448 × 8 / (5 · 10^6) s = 2.3168 ms
    let g = TcrClass {
        guarantee_bps: 5_000_000,
        ..c
    };
    m.ids.truncate(1000);
    m.recount(Some(g));
    assert_eq!(m.rate, 5_000_000);
    assert_eq!(m.gap(1448), Duration::from_nanos(2_316_800));
    // rounded up to the ns: one byte at 3 bit/s is 8/3 s
    let mut slow = Members::new(Some(TcrClass {
        rate_bps: 3,
        guarantee_bps: 0,
    }));
    assert_eq!(slow.gap(1), Duration::from_nanos(2_666_666_667));
    // not rate-controlled: no rate
    assert_eq!(Members::new(None).rate, 0);
}

#[test]
fn sack_high_reads_the_highest_right_edge() {
    let ts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    assert_eq!(sack_high(&ts), None);
    assert_eq!(sack_high(&[]), None);
    // NOP NOP SACK with one block: as long as NOP NOP timestamps, not the fast path
    let one = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0x10, 0];
    assert_eq!(sack_high(&one), Some(0x1000));
    // two blocks, the higher first; across the 2^32 wrap 0x10 is beyond 0xFFFF_FF00
    let two = [
        1, 1, 5, 18, 0, 0, 0, 0, 0, 0, 0, 0x10, 0xFF, 0xFF, 0xFE, 0, 0xFF, 0xFF, 0xFF, 0,
    ];
    assert_eq!(sack_high(&two), Some(0x10));
    // a malformed option ends the reading: the SACK after it is not seen
    let bad = [3, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    assert_eq!(sack_high(&bad), None);
}

proptest::proptest! {
    /// The fast path answers as the full reading of the options does.
    #[test]
    fn sack_high_fast_path_agrees(
        opts in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=40),
        lead in proptest::prelude::any::<bool>(),
    ) {
        // half the cases start as NOP NOP timestamps would
        let mut opts = opts;
        if lead && opts.len() >= 4 {
            opts[..4].copy_from_slice(&[1, 1, 8, 10]);
        }
        proptest::prop_assert_eq!(sack_high(&opts), sack_high_slow(&opts));
    }
}

/// An adaptive controller moves a rate-controlled class's assured rate: the sessions'
/// share follows at once; a class without TCR is left alone.
#[test]
fn set_class_rate_moves_the_session_share() {
    let mut t = Tcr::new(TcrTable {
        by_class: vec![
            None,
            Some(TcrClass {
                rate_bps: 1_000_000,
                guarantee_bps: 0,
            }),
        ],
    });
    assert_eq!(t.session_rate(1), Some(1_000_000));
    t.set_class_rate(1, 400_000);
    assert_eq!(t.session_rate(1), Some(400_000));
    t.set_class_rate(0, 5);
    t.set_class_rate(7, 5);
    assert_eq!(t.session_rate(0), None);
}
