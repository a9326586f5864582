//! Applications recognised by what a connection's first bytes say, on any port (seed 000
//! step 3; PacketShaper's "auto traffic discovery" finds applications by content).
//!
//! * TCP, the first payload of either side: a TLS handshake record (`16 03 0x`), an
//!   HTTP/1.x request line (an upper-case method, a space, a target), an SSH identification
//!   string (`SSH-2.0-`, RFC 4253 §4.2; either side may speak first), a SIP request line or
//!   status line (`INVITE sip:`, `SIP/2.0 `, RFC 3261 §7).
//! * UDP, each datagram of a connection until one is recognised: a QUIC Initial (RFC 9000
//!   §17.2: long header, version 1 or 2, connection ids ≤ 20 bytes, a client's first
//!   datagram padded to at least 1,200 bytes), SIP, or a DNS query or response (RFC 1035
//!   §4.1: one question whose name is well-formed labels and whose class is IN or ANY; the
//!   message holds nothing past its records but an EDNS OPT record).
//! * What is too short to judge is [`Verdict::More`]; what is none of these,
//!   [`Verdict::Unknown`]. Nothing is copied.

use super::App;

/// What the first bytes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    App(u8),
    /// Too few bytes to judge yet.
    More,
    Unknown,
}

const SIP_METHODS: [&[u8]; 14] = [
    b"INVITE ",
    b"ACK ",
    b"BYE ",
    b"CANCEL ",
    b"OPTIONS ",
    b"REGISTER ",
    b"PRACK ",
    b"SUBSCRIBE ",
    b"NOTIFY ",
    b"PUBLISH ",
    b"INFO ",
    b"REFER ",
    b"MESSAGE ",
    b"UPDATE ",
];

/// Whether `b` starts a SIP message: a request line `METHOD sip:` / `sips:`, or `SIP/2.0 `.
pub fn is_sip(b: &[u8]) -> bool {
    if b.starts_with(b"SIP/2.0 ") {
        return true;
    }
    SIP_METHODS.iter().any(|m| {
        b.starts_with(m) && {
            let rest = &b[m.len()..];
            rest.starts_with(b"sip:") || rest.starts_with(b"sips:")
        }
    })
}

/// The first payload of a TCP connection, sent by the client (`true`) or the server.
pub fn tcp(b: &[u8], from_client: bool) -> Verdict {
    if b.len() < 8 {
        // a whole signature fits in 8 bytes; a shorter first segment is rare
        return Verdict::More;
    }
    if b.starts_with(b"SSH-") {
        return Verdict::App(App::SSH);
    }
    if is_sip(b) {
        return Verdict::App(App::SIP);
    }
    if !from_client {
        return Verdict::Unknown;
    }
    if b[0] == 22 && b[1] == 3 && b[2] <= 4 && b[5] == 1 {
        return Verdict::App(App::TLS); // a handshake record holding a ClientHello
    }
    let method = b
        .iter()
        .take(16)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    if (3..=10).contains(&method)
        && b[method] == b' '
        && matches!(b[method + 1], b'/' | b'h' | b'*')
    {
        return Verdict::App(App::HTTP);
    }
    Verdict::Unknown
}

/// One UDP datagram's payload.
pub fn udp(b: &[u8]) -> Verdict {
    if is_quic_initial(b) {
        Verdict::App(App::QUIC)
    } else if is_sip(b) {
        Verdict::App(App::SIP)
    } else if is_dns(b) {
        Verdict::App(App::DNS)
    } else {
        Verdict::Unknown
    }
}

/// A QUIC v1/v2 Initial packet at the start of a datagram of at least 1,200 bytes.
fn is_quic_initial(b: &[u8]) -> bool {
    if b.len() < 1200 || b[0] & 0xc0 != 0xc0 {
        return false;
    }
    let version = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
    // the long-header type of an Initial: 0 in v1, 1 in v2 (RFC 9369 §3.2)
    let ty = (b[0] >> 4) & 3;
    let initial = match version {
        1 => ty == 0,
        0x6b33_43cf => ty == 1,
        _ => return false,
    };
    let dcid = usize::from(b[5]);
    initial && dcid <= 20 && b.get(6 + dcid).is_some_and(|&s| s <= 20)
}

/// A DNS message with exactly one well-formed question (see the module comment).
fn is_dns(b: &[u8]) -> bool {
    if b.len() < 17 || b.len() > 4096 {
        return false;
    }
    let w = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let (flags, qd, an, ns, ar) = (w(2), w(4), w(6), w(8), w(10));
    let opcode = (flags >> 11) & 0xf;
    let query = flags & 0x8000 == 0;
    if qd != 1 || opcode > 6 || (query && (an != 0 || ns != 0)) || (query && ar > 1) {
        return false;
    }
    // the question's name: labels of 1-63 bytes of letters, digits, '-' and '_'
    let mut i = 12;
    let mut total = 0;
    loop {
        let Some(&n) = b.get(i) else {
            return false;
        };
        let n = usize::from(n);
        i += 1;
        if n == 0 {
            break;
        }
        total += n + 1;
        let Some(label) = b.get(i..i + n) else {
            return false;
        };
        if n > 63
            || total > 255
            || !label
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        {
            return false;
        }
        i += n;
    }
    let Some(q) = b.get(i..i + 4) else {
        return false;
    };
    let class = u16::from_be_bytes([q[2], q[3]]);
    if !matches!(class, 1 | 255) {
        return false;
    }
    // a query ends after its question and at most an OPT record (11 bytes + options)
    !query
        || b.len() == i + 4
        || (ar == 1 && b.len() >= i + 4 + 11 && b[i + 4] == 0 && w(i + 5) == 41)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A query for `www.example.com` A IN (RFC 1035 §4.1), as `dig` sends it without EDNS.
    fn dns_query() -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in ["www", "example", "com"] {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    #[test]
    fn tcp_signatures() {
        assert_eq!(
            tcp(b"GET /index.html HTTP/1.1\r\n", true),
            Verdict::App(App::HTTP)
        );
        assert_eq!(
            tcp(b"OPTIONS * HTTP/1.1\r\n", true),
            Verdict::App(App::HTTP)
        );
        // a ClientHello record: 16 03 01 len 01 ...
        assert_eq!(
            tcp(&[22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3], true),
            Verdict::App(App::TLS)
        );
        assert_eq!(
            tcp(b"SSH-2.0-OpenSSH_9.2\r\n", false),
            Verdict::App(App::SSH)
        );
        assert_eq!(
            tcp(b"INVITE sip:bob@example.com SIP/2.0\r\n", true),
            Verdict::App(App::SIP)
        );
        assert_eq!(tcp(b"GET", true), Verdict::More);
        // an SMTP banner, a server's HTTP-looking bytes, binary
        assert_eq!(tcp(b"220 mail ESMTP\r\n", false), Verdict::Unknown);
        assert_eq!(tcp(b"GET / HTTP/1.1\r\n", false), Verdict::Unknown);
        assert_eq!(tcp(&[0; 64], true), Verdict::Unknown);
        // a method-like word without a target
        assert_eq!(tcp(b"HELLO world\r\n", true), Verdict::Unknown);
    }

    #[test]
    fn udp_signatures() {
        assert_eq!(udp(&dns_query()), Verdict::App(App::DNS));
        let mut edns = dns_query();
        edns[11] = 1; // ARCOUNT 1: an OPT record
        edns.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(udp(&edns), Verdict::App(App::DNS));
        let mut trailing = dns_query();
        trailing.push(7);
        assert_eq!(udp(&trailing), Verdict::Unknown);
        let mut bad_label = dns_query();
        bad_label[13] = b' ';
        assert_eq!(udp(&bad_label), Verdict::Unknown);
        // a QUIC v1 Initial: long header, type 0, DCID 8 bytes, SCID 0, padded to 1200
        let mut quic = vec![0xc3, 0, 0, 0, 1, 8];
        quic.extend_from_slice(&[0xaa; 8]);
        quic.push(0);
        quic.resize(1200, 0);
        assert_eq!(udp(&quic), Verdict::App(App::QUIC));
        assert_eq!(udp(&quic[..1199]), Verdict::Unknown);
        quic[4] = 2; // an unknown version
        assert_eq!(udp(&quic), Verdict::Unknown);
        assert_eq!(
            udp(b"REGISTER sip:example.com SIP/2.0\r\n"),
            Verdict::App(App::SIP)
        );
        assert_eq!(udp(b"SIP/2.0 200 OK\r\n"), Verdict::App(App::SIP));
        assert_eq!(udp(&[0x80, 0x00, 0, 1, 0, 0, 0, 0]), Verdict::Unknown);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..1400), c in any::<bool>()) {
            let _ = tcp(&b, c);
            let _ = udp(&b);
        }
    }
}
