//! Admission control through the device: each mode at the limit, sessions leaving (TCP
//! close, UDP idle), mid-stream pick-up, replies, and the policy keys' errors.

use super::*;
use crate::device::Device;
use crate::policy::Policy;
use crate::pool::{Direction, PktId, Pool};
use crate::qdisc::{Ctx, DropCause};
use crate::rng::Rng;
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::tcp::TcpFlags;

const OUT: Direction = Direction::Outbound;
const IN: Direction = Direction::Inbound;

fn policy(extra: &str) -> Policy {
    let text = format!(
        "[link]\nrate = \"10Mbit\"\ndirection = \"both\"\ndefault = \"bulk\"\n\
         [[class]]\nname = \"bulk\"\nrate = \"10Mbit\"\n{extra}\n"
    );
    Policy::parse("a.toml", &text).unwrap()
}

struct Env {
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    dev: Device,
}

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [10, 0, 0, 2];

impl Env {
    fn new(extra: &str) -> Env {
        Env {
            pool: Pool::new(256, 2048),
            rng: Rng::new(1),
            dropped: Vec::new(),
            dev: policy(extra).build_device(Instant::ZERO).unwrap(),
        }
    }

    /// A TCP segment of client port `port` (`reply`: from the server) into the device at
    /// `t_ms`; the device's verdict.
    fn tcp(&mut self, port: u16, reply: bool, flags: TcpFlags, t_ms: u64) -> Result<(), DropCause> {
        let id = self.pool.alloc().unwrap();
        let (src, dst) = if reply {
            (SERVER, CLIENT)
        } else {
            (CLIENT, SERVER)
        };
        let (sp, dp) = if reply { (80, port) } else { (port, 80) };
        let spec = TcpSpec {
            src_port: sp,
            dst_port: dp,
            seq: 1000,
            ack: if flags.contains(TcpFlags::ACK) { 7 } else { 0 },
            flags,
            window: 1000,
            ..TcpSpec::default()
        };
        let ip = Ipv4Spec {
            src: src.into(),
            dst: dst.into(),
            ..Ipv4Spec::default()
        };
        let n = build::tcp_v4_frame(self.pool.slot_mut(id), &EthSpec::default(), &ip, &spec, &[])
            .unwrap();
        self.ingress(id, n, if reply { IN } else { OUT }, t_ms)
    }

    /// A UDP datagram from client port `port` at `t_ms`.
    fn udp(&mut self, port: u16, t_ms: u64) -> Result<(), DropCause> {
        let id = self.pool.alloc().unwrap();
        let ip = Ipv4Spec {
            src: CLIENT.into(),
            dst: SERVER.into(),
            ..Ipv4Spec::default()
        };
        let n = build::udp_v4_frame(
            self.pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            port,
            53,
            b"q",
        )
        .unwrap();
        self.ingress(id, n, OUT, t_ms)
    }

    fn ingress(&mut self, id: PktId, n: usize, dir: Direction, t_ms: u64) -> Result<(), DropCause> {
        self.pool.meta_mut(id).len = n as u32;
        let now = at(t_ms);
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        let r = self.dev.ingress(dir, id, &mut cx, now);
        if r.is_err() {
            self.pool.free(id);
        }
        // drain both directions (the shaper at 10 Mbit/s sends these at once)
        for d in [OUT, IN] {
            let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
            while let Some(p) = self.dev.poll_transmit(d, &mut cx) {
                if d == IN
                    && weir_wire::parse_frame(cx.pool.data(p)).unwrap().tcp_flags
                        == Some(TcpFlags::RST | TcpFlags::ACK)
                {
                    RESETS.with(|r| r.borrow_mut().push(cx.pool.data(p).to_vec()));
                }
                cx.pool.free(p);
            }
        }
        r
    }

    fn stats(&self) -> AdmissionStats {
        self.dev
            .admission_stats(1)
            .expect("class bulk has admission control")
    }

    /// A whole handshake of client port `port` at `t_ms`.
    fn open(&mut self, port: u16, t_ms: u64) -> Result<(), DropCause> {
        self.tcp(port, false, TcpFlags::SYN, t_ms)?;
        self.tcp(port, true, TcpFlags::SYN | TcpFlags::ACK, t_ms)?;
        self.tcp(port, false, TcpFlags::ACK, t_ms)
    }

    /// Both FINs and the last ACK of client port `port`.
    fn close(&mut self, port: u16, t_ms: u64) {
        self.tcp(port, false, TcpFlags::FIN | TcpFlags::ACK, t_ms)
            .unwrap();
        self.tcp(port, true, TcpFlags::FIN | TcpFlags::ACK, t_ms)
            .unwrap();
        self.tcp(port, false, TcpFlags::ACK, t_ms).unwrap();
    }
}

thread_local! {
    static RESETS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn at(ms: u64) -> Instant {
    Instant(Duration::from_millis(ms).0)
}

const ADM: Result<(), DropCause> = Err(DropCause::Admission);

#[test]
fn share_admits_beyond_the_limit_and_counts_it() {
    let mut e = Env::new("max_sessions = 2");
    for port in [1001, 1002, 1003] {
        e.open(port, 10).unwrap();
    }
    let s = e.stats();
    assert_eq!((s.sessions, s.admitted, s.shared), (3, 2, 1));
    assert_eq!((s.postponed, s.refused), (0, 0));
}

#[test]
fn postpone_holds_a_new_session_until_one_closes() {
    let mut e = Env::new("max_sessions = 2\nadmission = \"postpone\"");
    e.open(1001, 0).unwrap();
    e.open(1002, 0).unwrap();
    // the third SYN is dropped, and again on its retransmission 1 s later
    assert_eq!(e.tcp(1003, false, TcpFlags::SYN, 10), ADM);
    assert_eq!(e.tcp(1003, false, TcpFlags::SYN, 1010), ADM);
    assert_eq!(e.stats().postponed, 2);
    // the first session closes; the SYN after that gets in
    e.close(1001, 1500);
    assert_eq!(e.tcp(1003, false, TcpFlags::SYN, 3010), Ok(()));
    let s = e.stats();
    assert_eq!((s.sessions, s.admitted, s.postponed), (2, 3, 2));
    // replies and later segments of admitted sessions are never checked
    assert_eq!(e.tcp(1002, false, TcpFlags::ACK, 3020), Ok(()));
    assert_eq!(e.tcp(1002, true, TcpFlags::ACK, 3020), Ok(()));
}

#[test]
fn refuse_answers_the_syn_with_an_rst() {
    RESETS.with(|r| r.borrow_mut().clear());
    let mut e = Env::new("max_sessions = 1\nadmission = \"refuse\"");
    e.open(1001, 0).unwrap();
    assert_eq!(e.tcp(1002, false, TcpFlags::SYN, 10), ADM);
    let s = e.stats();
    assert_eq!((s.refused, s.resets, s.resets_failed), (1, 1, 0));
    // the RST went back (inbound) from the server's address: <SEQ=0><ACK=1001><RST,ACK>
    let rst = RESETS.with(|r| r.borrow().clone());
    assert_eq!(rst.len(), 1);
    let p = weir_wire::parse_frame(&rst[0]).unwrap();
    assert_eq!(p.src_ip, Some(std::net::IpAddr::from(SERVER)));
    assert_eq!((p.src_port, p.dst_port), (Some(80), Some(1002)));
    let seg = weir_wire::tcp::Packet::new_checked(&rst[0][p.l4_offset.unwrap()..p.l3_end]).unwrap();
    assert_eq!((seg.seq_number(), seg.ack_number()), (0, 1001));
    // the client may try again once there is room
    e.tcp(1001, false, TcpFlags::RST, 20).unwrap();
    assert_eq!(e.tcp(1002, false, TcpFlags::SYN, 1010), Ok(()));
    assert_eq!(e.stats().admitted, 2);
}

#[test]
fn udp_sessions_leave_when_idle_and_a_refused_flow_stays_refused() {
    let mut e = Env::new("max_sessions = 1\nadmission = \"postpone\"\nsession_idle = \"2s\"");
    e.udp(5001, 0).unwrap();
    assert_eq!(e.udp(5002, 100), ADM);
    e.udp(5001, 1000).unwrap();
    // 5001 was last heard at 1 s: still a session at 2.9 s, gone after 3 s
    assert_eq!(e.udp(5002, 2900), ADM);
    assert_eq!(e.udp(5002, 3100), Ok(()));
    assert_eq!(e.stats().postponed, 2);

    let mut e = Env::new("max_sessions = 1\nadmission = \"refuse\"\nsession_idle = \"2s\"");
    e.udp(5001, 0).unwrap();
    assert_eq!(e.udp(5002, 100), ADM);
    assert_eq!(
        e.udp(5002, 5000),
        ADM,
        "refused for as long as the flow lives"
    );
    let s = e.stats();
    assert_eq!((s.refused, s.refused_packets, s.resets), (1, 1, 0));
}

#[test]
fn a_connection_picked_up_in_mid_stream_is_a_session() {
    let mut e = Env::new("max_sessions = 1\nadmission = \"refuse\"");
    // no SYN seen: a session that exists already; it counts
    assert_eq!(e.tcp(1001, false, TcpFlags::ACK, 0), Ok(()));
    assert_eq!(e.stats().sessions, 1);
    assert_eq!(e.tcp(1002, false, TcpFlags::SYN, 10), ADM);
}

#[test]
fn unknown_and_malformed_frames_pass() {
    let mut e = Env::new("max_sessions = 1\nadmission = \"postpone\"");
    e.open(1001, 0).unwrap();
    // a frame too short to parse, and an ARP frame
    for frame in [&[0u8; 10][..], &[0xff; 42][..]] {
        let id = e.pool.alloc().unwrap();
        e.pool.slot_mut(id)[..frame.len()].copy_from_slice(frame);
        assert_eq!(e.ingress(id, frame.len(), OUT, 5), Ok(()));
    }
}

#[test]
fn policy_keys_are_checked() {
    let bad = |extra: &str, want: &str| {
        let text = format!(
            "[link]\nrate = \"10Mbit\"\ndefault = \"bulk\"\n\
             [[class]]\nname = \"bulk\"\nrate = \"10Mbit\"\n{extra}\n"
        );
        let e = Policy::parse("a.toml", &text).unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
        // the key's own line: the class starts at line 5, its keys at 7
        let line = 7 + extra.lines().count() - 1;
        assert!(e.contains(&format!("a.toml:{line}:")), "{extra}: {e}");
    };
    bad(
        "max_sessions = 0",
        "`max_sessions`: 0 is outside 1..=1048576",
    );
    bad(
        "max_sessions = 2\nadmission = \"wait\"",
        "unknown mode 'wait'",
    );
    bad("admission = \"refuse\"", "`admission` needs `max_sessions`");
    bad("max_sessions = 2\nmax_sessions = 3", "duplicate key");
    bad(
        "max_sessions = 2\nsession_idle = \"0s\"",
        "`session_idle`: must be longer than 0",
    );
    bad(
        "max_sessions = 2\nsession_idle = \"soon\"",
        "`session_idle`:",
    );
    let parent = "[link]\nrate = \"10Mbit\"\ndefault = \"leaf\"\n\
                  [[class]]\nname = \"top\"\nrate = \"10Mbit\"\nmax_sessions = 3\n\
                  [[class]]\nname = \"leaf\"\nparent = \"top\"\nrate = \"5Mbit\"\n";
    let e = Policy::parse("p.toml", parent).unwrap_err().to_string();
    assert!(
        e.contains("p.toml:7:") && e.contains("has child classes"),
        "{e}"
    );
    // a good one
    let p = policy("max_sessions = 4\nadmission = \"refuse\"\nsession_idle = \"10s\"");
    let spec = p.admission_table().unwrap().by_class[1].unwrap();
    assert_eq!(
        spec,
        Spec {
            max_sessions: 4,
            mode: Mode::Refuse,
            idle: Duration::from_secs(10)
        }
    );
}

#[test]
fn other_protocols_are_not_sessions() {
    let mut e = Env::new("max_sessions = 1\nadmission = \"refuse\"");
    e.open(1001, 0).unwrap();
    // an ICMP echo request from the client: passes, not counted
    let id = e.pool.alloc().unwrap();
    let ip = Ipv4Spec {
        src: CLIENT.into(),
        dst: SERVER.into(),
        ..Ipv4Spec::default()
    };
    let slot = e.pool.slot_mut(id);
    let n = build::icmp_echo_v4(slot, &EthSpec::default(), &ip, true, 1, 1, b"12345678").unwrap();
    assert_eq!(e.ingress(id, n, OUT, 5), Ok(()));
    assert_eq!(e.stats().sessions, 1);
}

#[test]
fn a_class_report_prints_as_weir_stats_shows_it_and_survives_json() {
    let a = ClassAdmission {
        class: "bulk".into(),
        max_sessions: 2,
        mode: Mode::Postpone,
        stats: AdmissionStats {
            sessions: 2,
            admitted: 4,
            postponed: 2,
            ..AdmissionStats::default()
        },
    };
    assert_eq!(
        a.to_string(),
        "admission 'bulk' (max 2 sessions, postpone): 2 sessions, 4 admitted, 0 shared, \
         2 packets postponed, 0 refused (0 RSTs sent, 0 not answered), 0 packets of refused flows"
    );
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["admitted"], 4, "counters flattened: {json}");
    assert_eq!(serde_json::from_value::<ClassAdmission>(json).unwrap(), a);
}
