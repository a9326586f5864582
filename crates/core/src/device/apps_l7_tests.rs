//! Application recognition and layer-7 rules in the device: HTTP host, path and media
//! type, TLS server names, heads split over segments, SIP calls' media, signatures on
//! any port, and a reload that keeps what connections earned.

use super::apps_tests::{device, flags, received, segment, CLIENT, SERVER};
use super::test_env::Env;
use super::*;
use crate::app::tls::tests::{hello, sni_ext};
use std::net::Ipv4Addr;
use weir_wire::build::{self, EthSpec, Ipv4Spec};

/// Web on port 80 (a port rule), two layer-7 classes above it.
const POLICY: &str = r#"
    [link]
    rate = "100Mbit"
    direction = "both"
    default = "bulk"
    [[class]]
    name = "video"
    rate = "1Mbit"
    [[class]]
    name = "web"
    rate = "10Mbit"
    [[class]]
    name = "secure"
    rate = "2Mbit"
    [[class]]
    name = "bulk"
    rate = "87Mbit"
    [[rule]]
    class = "video"
    http.host = "*.example.com"
    http.path = ["/video/*", "/live/*"]
    [[rule]]
    class = "video"
    http.mime = "video/*"
    [[rule]]
    class = "secure"
    tls.sni = "*.example.org"
    [[rule]]
    class = "web"
    port = [80, 443]
"#;

/// A TCP handshake `client:cport` → `SERVER:sport`.
fn handshake(d: &mut Device, e: &mut Env, cport: u16, sport: u16) {
    let (c, s) = ((CLIENT, cport), (SERVER, sport));
    segment(d, e, c, s, flags("syn"), 100, b"");
    segment(d, e, s, c, flags("syn|ack"), 500, b"");
}

fn req(d: &mut Device, e: &mut Env, cport: u16, seq: u32, bytes: &[u8]) {
    let (c, s) = ((CLIENT, cport), (SERVER, 80));
    segment(d, e, c, s, flags("ack|psh"), seq, bytes);
}

fn resp(d: &mut Device, e: &mut Env, cport: u16, seq: u32, bytes: &[u8]) {
    let (c, s) = ((CLIENT, cport), (SERVER, 80));
    segment(d, e, s, c, flags("ack|psh"), seq, bytes);
}

#[test]
fn http_host_and_path_pick_the_class_from_the_request_on() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    assert_eq!(received(&d, Direction::Outbound, "web"), 1);
    let get = b"GET /video/a.mp4 HTTP/1.1\r\nHost: media.example.com\r\n\r\n";
    req(&mut d, &mut e, 40000, 101, get);
    resp(&mut d, &mut e, 40000, 501, &[1; 1000]);
    assert_eq!(received(&d, Direction::Outbound, "video"), 1);
    assert_eq!(received(&d, Direction::Inbound, "video"), 1);
    // the same host, another path: the port rule
    handshake(&mut d, &mut e, 40001, 80);
    let get = b"GET /index.html HTTP/1.1\r\nHost: media.example.com\r\n\r\n";
    req(&mut d, &mut e, 40001, 101, get);
    assert_eq!(received(&d, Direction::Outbound, "web"), 3);
    let s = d.app_stats().unwrap();
    assert_eq!((s.http, s.http_requests), (2, 2), "{s:?}");
}

/// A request head in three segments, one retransmitted: the connection changes class
/// with the segment that completes the head, not before.
#[test]
fn a_split_head_is_gathered() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    let get: &[u8] = b"GET /live/x.ts HTTP/1.1\r\nHost: tv.example.com\r\nAccept: */*\r\n\r\n";
    req(&mut d, &mut e, 40000, 101, &get[..10]);
    req(&mut d, &mut e, 40000, 101, &get[..10]);
    req(&mut d, &mut e, 40000, 111, &get[10..30]);
    assert_eq!(received(&d, Direction::Outbound, "video"), 0);
    req(&mut d, &mut e, 40000, 131, &get[30..]);
    assert_eq!(received(&d, Direction::Outbound, "video"), 1);
    assert_eq!(received(&d, Direction::Outbound, "web"), 4);
    assert_eq!(d.app_stats().unwrap().http_requests, 1);
}

/// The response's media type: the request goes by the port rule, the response head and
/// everything after it by `http.mime`.
#[test]
fn a_mime_rule_reclassifies_from_the_response_head() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    req(
        &mut d,
        &mut e,
        40000,
        101,
        b"GET /clip HTTP/1.1\r\nHost: other.net\r\n\r\n",
    );
    assert_eq!(received(&d, Direction::Outbound, "web"), 2);
    let head =
        b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4; codecs=avc1\r\nContent-Length: 9\r\n\r\n";
    resp(&mut d, &mut e, 40000, 501, head);
    resp(&mut d, &mut e, 40000, 501 + head.len() as u32, &[0; 1000]);
    assert_eq!(received(&d, Direction::Inbound, "video"), 2);
    // the client's later ACKs too
    req(&mut d, &mut e, 40000, 140, b"");
    assert_eq!(received(&d, Direction::Outbound, "video"), 1);
    assert_eq!(d.app_stats().unwrap().http_responses, 1);
}

#[test]
fn tls_server_names() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    for (port, name, class) in [
        (40000, &b"www.example.org"[..], "secure"),
        (40001, b"www.example.com", "web"),
    ] {
        handshake(&mut d, &mut e, port, 443);
        let (c, s) = ((CLIENT, port), (SERVER, 443));
        let h = hello(&sni_ext(name));
        segment(&mut d, &mut e, c, s, flags("ack|psh"), 101, &h);
        let before = received(&d, Direction::Inbound, class);
        segment(&mut d, &mut e, s, c, flags("ack"), 501, &[22; 900]);
        assert_eq!(
            received(&d, Direction::Inbound, class),
            before + 1,
            "{class}"
        );
    }
    let s = d.app_stats().unwrap();
    assert_eq!((s.tls, s.tls_hellos), (2, 2), "{s:?}");
}

/// QUIC: the ClientHello in the client's Initial packets picks the class (`tls.sni`
/// rules apply to QUIC as to TLS over TCP), from the datagram that completes it on.
#[test]
fn quic_server_names() {
    use crate::app::quic::tests::{crypto_frame, seal, seal_as};
    use crate::app::quic::V1;
    let (mut d, mut e) = (device(POLICY), Env::new());
    let (c, s) = ((CLIENT, 50000), (SERVER, 443));
    // one Initial datagram with the whole hello: "secure" at once, and the reply too
    let msg = hello(&sni_ext(b"cdn.example.org"))[5..].to_vec();
    datagram(
        &mut d,
        &mut e,
        c,
        s,
        &seal(V1, &[1; 8], 0, &crypto_frame(0, &msg), 1200),
    );
    assert_eq!(received(&d, Direction::Outbound, "secure"), 1);
    datagram(&mut d, &mut e, s, c, &[0x40; 300]);
    assert_eq!(received(&d, Direction::Inbound, "secure"), 1);
    // a hello over two datagrams, its second half first: the port rule until the
    // datagram that completes it
    let (c2, cut) = ((CLIENT, 50001), msg.len() / 2);
    let first = seal(V1, &[2; 8], 0, &crypto_frame(cut as u64, &msg[cut..]), 1200);
    let second = seal(V1, &[2; 8], 1, &crypto_frame(0, &msg[..cut]), 1200);
    datagram(&mut d, &mut e, c2, s, &first);
    assert_eq!(received(&d, Direction::Outbound, "web"), 1);
    datagram(&mut d, &mut e, c2, s, &second);
    assert_eq!(received(&d, Direction::Outbound, "secure"), 2);
    // the same, the second half retransmitted after the server's reply: to the server's
    // connection id, under the first one's keys
    let c5 = (CLIENT, 50004);
    let first = seal(V1, &[5; 8], 0, &crypto_frame(cut as u64, &msg[cut..]), 1200);
    let later = seal_as(
        V1,
        (&[5; 8], &[9; 4]),
        2,
        &crypto_frame(0, &msg[..cut]),
        1200,
    );
    datagram(&mut d, &mut e, c5, s, &first);
    datagram(&mut d, &mut e, s, c5, &[0xc0; 200]);
    datagram(&mut d, &mut e, c5, s, &later);
    assert_eq!(received(&d, Direction::Outbound, "secure"), 3);
    // a name no rule matches, and a datagram that does not open: the port rule
    let (c3, c4) = ((CLIENT, 50002), (CLIENT, 50003));
    let other = hello(&sni_ext(b"www.example.net"))[5..].to_vec();
    datagram(
        &mut d,
        &mut e,
        c3,
        s,
        &seal(V1, &[3; 8], 0, &crypto_frame(0, &other), 1200),
    );
    let mut bad = seal(V1, &[4; 8], 0, &crypto_frame(0, &msg), 1200);
    bad[600] ^= 1;
    datagram(&mut d, &mut e, c4, s, &bad);
    assert_eq!(received(&d, Direction::Outbound, "web"), 4);
    assert_eq!(received(&d, Direction::Outbound, "secure"), 3);
    let st = d.app_stats().unwrap();
    assert_eq!(
        (st.quic, st.quic_hellos, st.quic_unopened),
        (5, 4, 1),
        "{st:?}"
    );
}

/// Applications by content on ports no rule names: an `app` rule finds HTTP on 8080 and
/// SSH whose server speaks first; garbage is left unrecognised.
#[test]
fn signatures_on_any_port() {
    let policy = format!("{POLICY}\n[[rule]]\nclass = \"web\"\napp = [\"http\", \"ssh\"]\n");
    let (mut d, mut e) = (device(&policy), Env::new());
    let send = |d: &mut Device, e: &mut Env, sport: u16, from_client: bool, b: &[u8]| {
        let (c, s) = ((CLIENT, 41000 + sport), (SERVER, sport));
        let (a, z) = if from_client { (c, s) } else { (s, c) };
        segment(d, e, a, z, flags("ack|psh"), 101, b);
    };
    handshake(&mut d, &mut e, 41000 + 8080, 8080);
    send(
        &mut d,
        &mut e,
        8080,
        true,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    handshake(&mut d, &mut e, 41000 + 2222, 2222);
    send(&mut d, &mut e, 2222, false, b"SSH-2.0-OpenSSH_9.2p1\r\n");
    handshake(&mut d, &mut e, 41000 + 9999, 9999);
    send(&mut d, &mut e, 9999, true, &[0xde; 100]);
    assert_eq!(received(&d, Direction::Outbound, "web"), 1);
    assert_eq!(received(&d, Direction::Inbound, "web"), 1);
    let s = d.app_stats().unwrap();
    assert_eq!((s.http, s.ssh), (1, 1), "{s:?}");
}

fn datagram(d: &mut Device, e: &mut Env, from: (Ipv4Addr, u16), to: (Ipv4Addr, u16), b: &[u8]) {
    let dir = if from.0 == CLIENT {
        Direction::Outbound
    } else {
        Direction::Inbound
    };
    let id = e.pool.alloc().unwrap();
    let ip = Ipv4Spec {
        src: from.0,
        dst: to.0,
        ..Default::default()
    };
    let n = build::udp_v4_frame(
        e.pool.slot_mut(id),
        &EthSpec::default(),
        &ip,
        from.1,
        to.1,
        b,
    )
    .unwrap();
    e.pool.meta_mut(id).len = n as u32;
    d.ingress(dir, id, &mut e.cx(Instant::ZERO), Instant::ZERO)
        .unwrap();
}

fn sip(first: &str, addr: Ipv4Addr, port: u16) -> Vec<u8> {
    format!(
        "{first}\r\nVia: SIP/2.0/UDP x\r\nContent-Type: application/sdp\r\n\r\n\
         v=0\r\no=- 1 1 IN IP4 {addr}\r\ns=-\r\nc=IN IP4 {addr}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\n"
    )
    .into_bytes()
}

/// A SIP call on port 5060 announces its media on ports 16400 (the caller) and 30000
/// (the callee); RTP between them is the call's, in either direction, from the first
/// packet; RTP to a port nobody announced is not.
#[test]
fn sip_media_follows_the_call() {
    let policy = format!(
        "{}\n[[class]]\nname = \"voice\"\nrate = \"1Mbit\"\n[[rule]]\nclass = \"voice\"\napp = \"sip\"\n",
        POLICY.replace("87Mbit", "86Mbit")
    );
    let (mut d, mut e) = (device(&policy), Env::new());
    let (c, s) = ((CLIENT, 5060), (SERVER, 5060));
    let invite = sip("INVITE sip:bob@10.0.0.2 SIP/2.0", CLIENT, 16400);
    datagram(&mut d, &mut e, c, s, &invite);
    let ok = sip("SIP/2.0 200 OK", SERVER, 30000);
    datagram(&mut d, &mut e, s, c, &ok);
    assert_eq!(received(&d, Direction::Outbound, "voice"), 1);
    // RTP: the callee first, to the caller's port; the caller's reply, same connection
    let rtp = [0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    datagram(&mut d, &mut e, (SERVER, 30000), (CLIENT, 16400), &rtp);
    datagram(&mut d, &mut e, (CLIENT, 16400), (SERVER, 30000), &rtp);
    // RTCP on the next ports, the caller first
    datagram(&mut d, &mut e, (CLIENT, 16401), (SERVER, 30001), &rtp);
    assert_eq!(received(&d, Direction::Inbound, "voice"), 2);
    assert_eq!(received(&d, Direction::Outbound, "voice"), 3);
    // not announced
    datagram(&mut d, &mut e, (CLIENT, 16500), (SERVER, 30100), &rtp);
    assert_eq!(received(&d, Direction::Outbound, "bulk"), 1);
    let st = d.app_stats().unwrap();
    assert_eq!((st.sip, st.rtp), (1, 2), "{st:?}");
    // media steered to a third host is refused
    let bounce = sip("INVITE sip:x@y SIP/2.0", Ipv4Addr::new(192, 0, 2, 7), 4000);
    datagram(&mut d, &mut e, c, s, &bounce);
    assert!(d.app_stats().unwrap().refused_bounce >= 2);
}

/// A reload that reorders the conditions keeps each connection's verdicts; one that
/// drops a condition drops its bit.
#[test]
fn a_reload_keeps_what_connections_earned() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 443);
    let (c, s) = ((CLIENT, 40000), (SERVER, 443));
    segment(
        &mut d,
        &mut e,
        c,
        s,
        flags("ack|psh"),
        101,
        &hello(&sni_ext(b"a.example.org")),
    );
    // the same rules with the SNI rule first
    let moved = POLICY.replace(
        "[[rule]]\n    class = \"secure\"\n    tls.sni = \"*.example.org\"\n",
        "",
    );
    let moved = moved.replacen(
        "[[rule]]",
        "[[rule]]\n    class = \"secure\"\n    tls.sni = \"*.example.org\"\n    [[rule]]",
        1,
    );
    assert_ne!(moved, POLICY);
    let p = Policy::parse("moved.toml", &moved).unwrap();
    assert_eq!(p.l7.conds[0].kind, crate::app::l7::L7Kind::TlsSni);
    d.replace_policy(&p, &mut e.cx(Instant::ZERO)).unwrap();
    segment(&mut d, &mut e, s, c, flags("ack"), 501, &[0; 500]);
    assert_eq!(received(&d, Direction::Inbound, "secure"), 1);
}

/// Garbage, a head longer than the limit and a non-HTTP reply are counted, never
/// followed; the packets keep going by the port rule.
#[test]
fn unreadable_heads_are_counted() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    let mut big = b"GET /video/x HTTP/1.1\r\nHost: a.example.com\r\nCookie: ".to_vec();
    big.resize(5000, b'x');
    req(&mut d, &mut e, 40000, 101, &big[..1400]);
    req(&mut d, &mut e, 40000, 1501, &big[1400..2800]);
    req(&mut d, &mut e, 40000, 2901, &big[2800..4200]);
    req(&mut d, &mut e, 40000, 4301, &big[4200..]);
    assert_eq!(received(&d, Direction::Outbound, "video"), 0);
    assert_eq!(received(&d, Direction::Outbound, "web"), 5);
    let s = d.app_stats().unwrap();
    assert_eq!(
        (s.http, s.heads_unread, s.http_requests),
        (1, 1, 0),
        "{s:?}"
    );
}

/// Bytes every class's queue received, both directions.
fn received_by_classes(d: &Device) -> u64 {
    [Direction::Outbound, Direction::Inbound]
        .iter()
        .map(|&dir| {
            let s = d.snapshot(dir, Instant::ZERO).unwrap();
            s.classes
                .iter()
                .filter_map(|c| c.queue.as_ref())
                .map(|q| q.received.bytes)
                .sum::<u64>()
        })
        .sum()
}

/// Discovery: every frame counted once, under the application its connection turned out
/// to be — the handshake that came before the request included.
#[test]
fn discovery_counts_every_frame_under_its_application() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    req(
        &mut d,
        &mut e,
        40000,
        101,
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    resp(&mut d, &mut e, 40000, 501, &[1; 1400]);
    handshake(&mut d, &mut e, 40001, 5201);
    let (c, s) = ((CLIENT, 40001), (SERVER, 5201));
    segment(&mut d, &mut e, c, s, flags("ack|psh"), 101, &[0xa5; 1000]);
    datagram(
        &mut d,
        &mut e,
        (CLIENT, 5000),
        (SERVER, 9),
        b"not dns at all, just bytes",
    );
    let r = d.discovery(10, 10).unwrap();
    let total = received_by_classes(&d);
    assert_eq!(r.bytes, total, "{r:?}");
    let names: Vec<(&str, u64, u64)> = r
        .apps
        .iter()
        .map(|a| (a.name.as_str(), a.packets, a.sessions))
        .collect();
    assert_eq!(
        names,
        [("http", 4, 1), ("tcp/5201", 3, 1), ("udp/9", 1, 1)],
        "{r}"
    );
    assert_eq!(r.apps[0].servers[0].name, "10.0.0.2");
    let text = crate::discover::suggest::suggest(&r, 10_000_000, 0.01);
    Policy::parse("suggested.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Garbage on the ports weir reads (21, 80, 443 over TCP, 5060 over UDP), from either
    /// side, in segments at any sequence numbers: never a panic, every frame counted once
    /// in discovery, and nothing recognised that was not sent.
    #[test]
    fn garbage_on_watched_ports_is_forwarded_and_counted(
        msgs in proptest::collection::vec(
            (0usize..4, proptest::prelude::any::<bool>(), proptest::prelude::any::<u32>(),
             proptest::collection::vec(proptest::prelude::any::<u8>(), 1..1400)),
            1..24,
        )
    ) {
        let (mut d, mut e) = (device(POLICY), Env::new());
        let ports = [21u16, 80, 443, 5060];
        for &p in &ports[..3] {
            handshake(&mut d, &mut e, 40000 + p, p);
        }
        for (i, from_client, seq, bytes) in &msgs {
            let p = ports[*i];
            let (c, s) = ((CLIENT, 40000 + p), (SERVER, p));
            let (a, z) = if *from_client { (c, s) } else { (s, c) };
            if p == 5060 {
                datagram(&mut d, &mut e, a, z, bytes);
            } else {
                segment(&mut d, &mut e, a, z, flags("ack|psh"), *seq, bytes);
            }
        }
        let r = d.discovery(64, 64).unwrap();
        let total = received_by_classes(&d);
        proptest::prop_assert_eq!(r.bytes, total);
        let s = d.app_stats().unwrap();
        proptest::prop_assert_eq!(s.ftp_data + s.rtp + s.dns + s.quic, 0);
    }
}

/// A kept-alive connection: each request is judged in turn (its body skipped by its
/// length), and so is each response; a chunked response ends the reading of responses,
/// the requests are still read.
#[test]
fn kept_alive_connections_are_judged_per_request() {
    let (mut d, mut e) = (device(POLICY), Env::new());
    handshake(&mut d, &mut e, 40000, 80);
    let page = b"GET /index.html HTTP/1.1\r\nHost: media.example.com\r\n\r\n";
    req(&mut d, &mut e, 40000, 101, page);
    let body = [b'x'; 700];
    let mut r1 =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n".to_vec();
    r1.extend_from_slice(&body);
    resp(&mut d, &mut e, 40000, 501, &r1);
    // the rest of the body, 300 bytes, then (a pipelined) second response in one segment
    let mut r2 = vec![b'y'; 300];
    let second = b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    r2.extend_from_slice(second);
    let at = 501 + r1.len() as u32;
    resp(&mut d, &mut e, 40000, at, &r2);
    assert_eq!(
        received(&d, Direction::Inbound, "web"),
        2,
        "the first response"
    );
    assert_eq!(
        received(&d, Direction::Inbound, "video"),
        1,
        "the video/mp4 head"
    );
    // the second request, for a video path: its packet on
    let video = b"GET /video/a.mp4 HTTP/1.1\r\nHost: media.example.com\r\n\r\n";
    req(&mut d, &mut e, 40000, 101 + page.len() as u32, video);
    assert_eq!(received(&d, Direction::Outbound, "video"), 1);
    // a third, back to a page: the path rule no longer holds, but the MIME verdict stays
    // (responses are no longer read after the chunked one)
    let third = b"GET /about HTTP/1.1\r\nHost: media.example.com\r\n\r\n";
    let seq = 101 + (page.len() + video.len()) as u32;
    req(&mut d, &mut e, 40000, seq, third);
    let html = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 0\r\n\r\n";
    resp(&mut d, &mut e, 40000, at + r2.len() as u32, html);
    assert_eq!(received(&d, Direction::Outbound, "video"), 2);
    assert_eq!(received(&d, Direction::Inbound, "video"), 2);
    let s = d.app_stats().unwrap();
    assert_eq!((s.http_requests, s.http_responses), (3, 2), "{s:?}");
}
