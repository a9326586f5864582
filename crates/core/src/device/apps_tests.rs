//! Application tracking in the device: FTP's control channel announces the data
//! connection (active and passive), which is classified with its control connection or
//! by an `app = "ftp-data"` rule; a PORT naming a third host is refused.

use super::test_env::Env;
use super::*;
use crate::app::App;
use std::net::Ipv4Addr;
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};

pub(super) const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// The client on the LAN side (its packets outbound), the FTP server on the WAN side.
const POLICY: &str = r#"
    [link]
    rate = "100Mbit"
    direction = "both"
    default = "bulk"
    [[class]]
    name = "ftp"
    rate = "10Mbit"
    [[class]]
    name = "bulk"
    rate = "89Mbit"
    [[rule]]
    class = "ftp"
    proto = "tcp"
    port = 21
"#;

/// A TCP segment `from:sport → to:dport` with `flags`, `seq` and `payload` through `d`
/// (outbound when the client sends it).
#[allow(clippy::too_many_arguments)]
pub(super) fn segment(
    d: &mut Device,
    e: &mut Env,
    (from, sport): (Ipv4Addr, u16),
    (to, dport): (Ipv4Addr, u16),
    flags: weir_wire::tcp::TcpFlags,
    seq: u32,
    payload: &[u8],
) {
    let dir = if from == CLIENT {
        Direction::Outbound
    } else {
        Direction::Inbound
    };
    let id = e.pool.alloc().unwrap();
    let ip = Ipv4Spec {
        src: from,
        dst: to,
        ..Default::default()
    };
    let tcp = TcpSpec {
        src_port: sport,
        dst_port: dport,
        seq,
        ack: 1,
        flags,
        window: 65535,
        ..Default::default()
    };
    let n =
        build::tcp_v4_frame(e.pool.slot_mut(id), &EthSpec::default(), &ip, &tcp, payload).unwrap();
    e.pool.meta_mut(id).len = n as u32;
    d.ingress(dir, id, &mut e.cx(Instant::ZERO), Instant::ZERO)
        .unwrap();
}

/// Packets each class received in `dir`.
pub(super) fn received(d: &Device, dir: Direction, class: &str) -> u64 {
    let s = d.snapshot(dir, Instant::ZERO).unwrap();
    let c = s.classes.iter().find(|c| c.name == class).unwrap();
    c.queue.as_ref().unwrap().received.packets
}

pub(super) fn flags(names: &str) -> weir_wire::tcp::TcpFlags {
    use weir_wire::tcp::TcpFlags;
    let mut f = TcpFlags(0);
    for n in names.split('|') {
        f = TcpFlags(
            f.0 | match n {
                "syn" => TcpFlags::SYN.0,
                "ack" => TcpFlags::ACK.0,
                "psh" => TcpFlags::PSH.0,
                _ => unreachable!(),
            },
        );
    }
    f
}

/// The control connection's handshake and one line from each side.
fn control(d: &mut Device, e: &mut Env, client_line: &[u8], server_line: &[u8]) {
    let (c, s) = ((CLIENT, 40000), (SERVER, 21));
    segment(d, e, c, s, flags("syn"), 100, b"");
    segment(d, e, s, c, flags("syn|ack"), 500, b"");
    segment(d, e, c, s, flags("ack|psh"), 101, client_line);
    segment(d, e, s, c, flags("ack|psh"), 501, server_line);
}

pub(super) fn device(policy: &str) -> Device {
    Policy::parse("apps.toml", policy)
        .unwrap()
        .build_device(Instant::ZERO)
        .unwrap()
}

/// Active mode: PORT 10,0,0,1,160,0 (port 40960); the server's connection from port 20
/// to it is the data connection and goes, inbound, where the control connection's
/// inbound packets went: class ftp, though no rule names port 20 or 40960.
#[test]
fn active_ftp_data_follows_its_control_connection() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    control(
        &mut d,
        &mut e,
        b"PORT 10,0,0,1,160,0\r\n",
        b"200 PORT command successful.\r\n",
    );
    assert_eq!(received(&d, Direction::Inbound, "ftp"), 2);
    segment(
        &mut d,
        &mut e,
        (SERVER, 20),
        (CLIENT, 40960),
        flags("syn"),
        9000,
        b"",
    );
    segment(
        &mut d,
        &mut e,
        (SERVER, 20),
        (CLIENT, 40960),
        flags("ack"),
        9001,
        &[7; 1000],
    );
    assert_eq!(received(&d, Direction::Inbound, "ftp"), 4);
    assert_eq!(received(&d, Direction::Inbound, "bulk"), 0);
    // another connection to another port is not FTP data
    segment(
        &mut d,
        &mut e,
        (SERVER, 20),
        (CLIENT, 40961),
        flags("syn"),
        9000,
        b"",
    );
    assert_eq!(received(&d, Direction::Inbound, "bulk"), 1);
    let s = d.app_stats().unwrap();
    assert_eq!((s.ftp_control, s.ftp_data, s.announced), (1, 1, 1), "{s:?}");
}

/// Passive mode, the control line split over two segments and a retransmission: the
/// 227 reply names the server's port 50000; the client's connection to it is classified
/// by a rule `app = "ftp-data"` into its own class.
#[test]
fn passive_ftp_data_is_matched_by_an_app_rule() {
    let policy = format!(
        "{POLICY}\n[[class]]\nname = \"data\"\nrate = \"1Mbit\"\n[[rule]]\nclass = \"data\"\napp = \"ftp-data\"\n"
    );
    let (mut d, mut e) = (device(&policy), Env::new());
    let (c, s) = ((CLIENT, 40000), (SERVER, 21));
    segment(&mut d, &mut e, c, s, flags("syn"), 100, b"");
    segment(&mut d, &mut e, s, c, flags("syn|ack"), 500, b"");
    segment(&mut d, &mut e, c, s, flags("ack|psh"), 101, b"PASV\r\n");
    let reply = b"227 Entering Passive Mode (10,0,0,2,195,80).\r\n";
    segment(&mut d, &mut e, s, c, flags("ack|psh"), 501, &reply[..20]);
    segment(&mut d, &mut e, s, c, flags("ack|psh"), 501, &reply[..20]);
    segment(&mut d, &mut e, s, c, flags("ack|psh"), 521, &reply[20..]);
    segment(
        &mut d,
        &mut e,
        (CLIENT, 41000),
        (SERVER, 50000),
        flags("syn"),
        1,
        b"",
    );
    segment(
        &mut d,
        &mut e,
        (SERVER, 50000),
        (CLIENT, 41000),
        flags("syn|ack"),
        1,
        b"",
    );
    assert_eq!(received(&d, Direction::Outbound, "data"), 1);
    assert_eq!(received(&d, Direction::Inbound, "data"), 1);
    assert_eq!(d.app_stats().unwrap().ftp_data, 1);
}

/// RFC 2577's bounce: PORT naming a third host opens no expectation (counted); a
/// malformed PORT is counted; both connections stay in their classes.
#[test]
fn a_bounce_and_garbage_are_counted_not_followed() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    control(
        &mut d,
        &mut e,
        b"PORT 192,0,2,9,0,25\r\n",
        b"\x00\xff garbage\r\n",
    );
    let (c, s) = ((CLIENT, 40000), (SERVER, 21));
    segment(
        &mut d,
        &mut e,
        c,
        s,
        flags("ack|psh"),
        122,
        b"PORT 1,2,3\r\nEPRT |9|x|1|\r\n",
    );
    segment(
        &mut d,
        &mut e,
        (SERVER, 20),
        (Ipv4Addr::new(192, 0, 2, 9), 25),
        flags("syn"),
        1,
        b"",
    );
    let st = d.app_stats().unwrap();
    assert_eq!(
        (st.refused_bounce, st.malformed, st.announced, st.ftp_data),
        (1, 2, 0, 0),
        "{st:?}"
    );
    assert_eq!(received(&d, Direction::Inbound, "bulk"), 1);
    assert_eq!(App::name(App::FTP), "ftp");
}
