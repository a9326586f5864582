//! A SIP call through `weir run` (issue 13): the caller on the LAN side sends an INVITE
//! over UDP whose session description offers audio on a port chosen at random, the callee
//! answers 200 OK with its own random port, and G.711 RTP (172-byte packets every 20 ms)
//! flows both ways between those ports for two seconds. The policy has one rule, `app =
//! "sip"`: weir recognises SIP by content, reads the session descriptions, and classifies
//! the RTP with the call from its first packet, though no rule names its ports. A second
//! stream between ports nobody announced goes to the default class.
//!
//! Checked: the `voice` class's bytes (both directions) equal the frames of the SIP
//! messages and the announced RTP (±2 %; each frame is the payload + 42 bytes of
//! Ethernet, IPv4 and UDP headers), the unannounced stream's frames are all in `bulk`,
//! and weir counted one SIP connection and the RTP stream.
//!
//! Root needed; without it the test prints `SKIP: …` and passes.

use crate::common::{class_bytes, start_weir, stats, Counted, TempDir};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const POLICY: &str = r#"
[link]
rate = "100Mbit"
direction = "both"
default = "bulk"

[[class]]
name = "voice"
rate = "1Mbit"
ceil = "1Mbit"

[[class]]
name = "bulk"
rate = "99Mbit"

[[rule]]
class = "voice"
app = "sip"
"#;

/// Frame bytes of a UDP payload of `n` bytes (Ethernet 14, IPv4 20, UDP 8).
fn frame(n: usize) -> u64 {
    n as u64 + 42
}

fn sdp_message(first_line: &str, addr: &str, port: u16) -> Vec<u8> {
    let body = format!(
        "v=0\r\no=- 1 1 IN IP4 {addr}\r\ns=call\r\nc=IN IP4 {addr}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    );
    format!(
        "{first_line}\r\nVia: SIP/2.0/UDP {addr}:5060;branch=z9hG4bK776asdhds\r\n\
         From: <sip:alice@{addr}>;tag=1928301774\r\nTo: <sip:bob@example.com>\r\n\
         Call-ID: a84b4c76e66710@{addr}\r\nCSeq: 314159 INVITE\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Both directions of `weir stats`.
const BOTH: &[&str] = &["outbound", "inbound"];

/// A random even port in 20000-59998 (RTP uses even ports, RTCP the next).
fn random_port() -> u16 {
    let mut b = [0u8; 2];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    20000 + (u16::from_le_bytes(b) % 20000) * 2
}

/// `n` RTP packets of 160 bytes of audio every 20 ms from `a` to `b` and back.
fn rtp_both_ways(a: &UdpSocket, b: &UdpSocket, n: u16) -> u64 {
    let (to_b, to_a) = (b.local_addr().unwrap(), a.local_addr().unwrap());
    let mut bytes = 0;
    for seq in 0..n {
        let mut pkt = vec![0x80, 0x00];
        pkt.extend_from_slice(&seq.to_be_bytes());
        pkt.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
        pkt.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        pkt.resize(12 + 160, 0xd5);
        a.send_to(&pkt, to_b).unwrap();
        b.send_to(&pkt, to_a).unwrap();
        bytes += 2 * frame(pkt.len());
        std::thread::sleep(Duration::from_millis(20));
    }
    bytes
}

#[test]
fn sip_calls_media_on_random_ports_is_voice() {
    let _group = crate::common::group(module_path!());
    let test = "sip_calls_media_on_random_ports_is_voice";
    if skip_unless_root(test) {
        return;
    }
    let t = BridgeTopo::new("sip").unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("weir-sip-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let policy = dir.0.join("sip.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let (caller_ip, callee_ip) = (BridgeTopo::SND_ADDR, BridgeTopo::RCV_ADDR);
    let (port_a, port_b) = (random_port(), random_port() + 1000);
    let bind = |ns: &weir_lab::topo::Netns, addr: SocketAddr| {
        ns.run(move || UdpSocket::bind(addr)).unwrap()
    };
    let caller_sip = bind(&t.snd, SocketAddr::from((caller_ip, 5060)));
    let callee_sip = bind(&t.rcv, SocketAddr::from((callee_ip, 5060)));
    let caller_rtp = bind(&t.snd, SocketAddr::from((caller_ip, port_a)));
    let callee_rtp = bind(&t.rcv, SocketAddr::from((callee_ip, port_b)));
    let stray_a = bind(&t.snd, SocketAddr::from((caller_ip, port_a + 2)));
    let stray_b = bind(&t.rcv, SocketAddr::from((callee_ip, port_b + 2)));
    callee_sip
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    caller_sip
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sock = dir.0.join("weir.sock");
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let v0 = stats(&sock);
    let before = (
        class_bytes(&v0, BOTH, "voice", Counted::Received),
        class_bytes(&v0, BOTH, "bulk", Counted::Received),
    );
    // the call: INVITE with the caller's offer, 200 OK with the callee's answer
    let invite = sdp_message(
        &format!("INVITE sip:bob@{callee_ip} SIP/2.0"),
        &caller_ip.to_string(),
        port_a,
    );
    caller_sip.send_to(&invite, (callee_ip, 5060)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = callee_sip.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], &invite[..]);
    let ok = sdp_message("SIP/2.0 200 OK", &callee_ip.to_string(), port_b);
    callee_sip.send_to(&ok, (caller_ip, 5060)).unwrap();
    caller_sip.recv_from(&mut buf).unwrap();
    let mut voice = frame(invite.len()) + frame(ok.len());
    voice += rtp_both_ways(&caller_rtp, &callee_rtp, 100);
    let stray = rtp_both_ways(&stray_a, &stray_b, 20);
    std::thread::sleep(Duration::from_millis(1300)); // one statistics publish
    let v = stats(&sock);
    drop(w);
    let got_voice = class_bytes(&v, BOTH, "voice", Counted::Received) - before.0;
    let got_bulk = class_bytes(&v, BOTH, "bulk", Counted::Received) - before.1;
    let apps = &v["apps"];
    let line = format!(
        "RTP {port_a} <-> {port_b}: class voice +{got_voice} bytes of the call's {voice} ({:+.2} %); \
         unannounced stream {} <-> {}: bulk +{got_bulk} of {stray}; apps {apps}",
        (got_voice as f64 / voice as f64 - 1.0) * 100.0,
        port_a + 2,
        port_b + 2
    );
    eprintln!("{line}");
    assert!(
        (0.98..=1.02).contains(&(got_voice as f64 / voice as f64)),
        "{line}"
    );
    // bulk also carries what the hosts send on their own (neighbour discovery)
    assert!(got_bulk >= stray, "{line}");
    assert_eq!(apps["sip"], 1, "{line}");
    assert!(apps["rtp"].as_u64().unwrap() >= 1, "{line}");
}
