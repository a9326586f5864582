//! SIP session descriptions (SDP, RFC 8866): where a call's media will flow, so the RTP
//! streams — on ports chosen per call — are classified as the call's from their first
//! packet (seed 000 step 3's argument for FTP holds for VoIP too).
//!
//! [`media`] reads the body of one SIP message (after the empty line that ends its
//! head): each `m=` line with an `RTP/...` transport and a port other than 0 (0: a
//! declined stream) gives the connection address that applies to it — the media-level
//! `c=` if it has one, else the session-level `c=` (RFC 8866 §5.7) — and its port.
//! `c=` addresses are `IN IP4` or `IN IP6` unicast literals; anything else (names,
//! multicast TTL forms) is skipped. At most [`MAX_MEDIA`] streams are read. Nothing is
//! copied or allocated.

use core::net::IpAddr;

/// Media streams read per message.
pub const MAX_MEDIA: usize = 4;

/// The RTP streams the SDP body of SIP message `msg` announces (address, port).
pub fn media(msg: &[u8]) -> [Option<(IpAddr, u16)>; MAX_MEDIA] {
    let mut out = [None; MAX_MEDIA];
    let Some(start) = find(msg, b"\r\n\r\n").map(|i| i + 4) else {
        return out;
    };
    let Ok(body) = core::str::from_utf8(&msg[start..]) else {
        return out;
    };
    let mut session_c = None;
    // the media being read: its port, its own c= (if any)
    let mut current: Option<(u16, Option<IpAddr>)> = None;
    let mut n = 0;
    let mut flush = |m: Option<(u16, Option<IpAddr>)>, session: Option<IpAddr>| {
        if let Some((port, Some(addr))) = m.map(|(p, c)| (p, c.or(session))) {
            if n < MAX_MEDIA {
                out[n] = Some((addr, port));
                n += 1;
            }
        }
    };
    for line in body.lines() {
        let line = line.trim_end();
        if let Some(c) = line.strip_prefix("c=") {
            let addr = connection(c);
            match &mut current {
                Some((_, own)) => *own = addr,
                None => session_c = addr,
            }
        } else if let Some(m) = line.strip_prefix("m=") {
            flush(current.take(), session_c);
            current = rtp_port(m).map(|p| (p, None));
        }
    }
    flush(current, session_c);
    out
}

/// `IN IP4 192.0.2.1` → the address (unicast only).
fn connection(c: &str) -> Option<IpAddr> {
    let mut p = c.split(' ');
    let (Some("IN"), Some(fam), Some(addr)) = (p.next(), p.next(), p.next()) else {
        return None;
    };
    let a: IpAddr = addr.parse().ok()?;
    let ok = matches!((fam, a), ("IP4", IpAddr::V4(_)) | ("IP6", IpAddr::V6(_)));
    (ok && !a.is_multicast() && !a.is_unspecified()).then_some(a)
}

/// `audio 49170 RTP/AVP 0` → 49170 (an RTP transport, port not 0).
fn rtp_port(m: &str) -> Option<u16> {
    let mut p = m.split(' ');
    let (Some(_media), Some(port), Some(proto)) = (p.next(), p.next(), p.next()) else {
        return None;
    };
    // "49170/2": a port count; the first port is the stream's
    let port: u16 = port.split('/').next()?.parse().ok()?;
    (port != 0 && proto.starts_with("RTP/")).then_some(port)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// After RFC 3665 §3.1's INVITE from Alice (head shortened, the address a literal).
    const INVITE: &[u8] = b"INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP client.atlanta.example.com:5060;branch=z9hG4bK74bf9\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 151\r\n\
\r\n\
v=0\r\n\
o=alice 2890844526 2890844526 IN IP4 client.atlanta.example.com\r\n\
s=-\r\n\
c=IN IP4 192.0.2.101\r\n\
t=0 0\r\n\
m=audio 49172 RTP/AVP 0\r\n\
a=rtpmap:0 PCMU/8000\r\n";

    #[test]
    fn rfc3665_invite() {
        let m = media(INVITE);
        assert_eq!(m[0], Some(("192.0.2.101".parse().unwrap(), 49172)));
        assert_eq!(m[1], None);
    }

    #[test]
    fn media_level_address_and_declined_streams() {
        let msg = b"SIP/2.0 200 OK\r\nContent-Type: application/sdp\r\n\r\n\
v=0\r\nc=IN IP4 192.0.2.1\r\nm=audio 0 RTP/AVP 0\r\n\
m=video 51372 RTP/AVP 99\r\nc=IN IP6 2001:db8::7\r\n\
m=audio 5004 RTP/SAVP 8\r\nm=application 9 TCP/BFCP *\r\n";
        let m = media(msg);
        assert_eq!(m[0], Some(("2001:db8::7".parse().unwrap(), 51372)));
        assert_eq!(m[1], Some(("192.0.2.1".parse().unwrap(), 5004)));
        assert_eq!(m[2], None);
    }

    #[test]
    fn no_body_or_no_address() {
        assert_eq!(media(b"BYE sip:a@b SIP/2.0\r\n\r\n"), [None; 4]);
        assert_eq!(media(b"INVITE sip:a@b SIP/2.0\r\n"), [None; 4]);
        let named = b"X\r\n\r\nc=IN IP4 host.example\r\nm=audio 4000 RTP/AVP 0\r\n";
        assert_eq!(media(named), [None; 4]);
        let mcast = b"X\r\n\r\nc=IN IP4 224.2.1.1/127\r\nm=audio 4000 RTP/AVP 0\r\n";
        assert_eq!(media(mcast), [None; 4]);
    }

    proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut msg = b"INVITE sip:a@b SIP/2.0\r\n\r\n".to_vec();
            msg.extend_from_slice(&b);
            let _ = media(&msg);
            let _ = media(&b);
        }
    }
}
