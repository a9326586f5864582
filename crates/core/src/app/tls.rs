//! TLS: the server name a client asks for in its ClientHello (the `server_name`
//! extension, RFC 6066 §3), the one thing a middlebox can read of today's HTTPS.
//!
//! [`client_hello_sni`] reads the first bytes a client sent on a connection: one or more
//! TLS records (RFC 8446 §5.1: type 22 handshake, version, 16-bit length) carrying a
//! ClientHello (§4.1.2: type 1, 24-bit length, version, 32 random bytes, session id,
//! cipher suites, compression methods, extensions). A ClientHello split over several
//! records (rare: clients send it in one) is reported as [`Sni::NoName`]: reading it
//! would need a copy. Every length is checked against what is there; nothing is copied
//! or allocated. Limits: the name must be a `host_name` (type 0) of printable
//! ASCII up to 255 bytes; ECH (encrypted ClientHello) shows only its outer, public name.

/// What the bytes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sni<'a> {
    /// The server name.
    Name(&'a str),
    /// A ClientHello without a server name.
    NoName,
    /// Not enough bytes yet: read more of the stream (at most the caller's limit).
    Incomplete,
    /// Not a TLS ClientHello, or a malformed one.
    NotTls,
}

/// Largest handshake message read (a ClientHello with post-quantum key shares is about
/// 1.8 KB; 16 KB is the record limit).
pub const MAX_HELLO: usize = 16 * 1024;

/// The server name of the ClientHello at the start of `stream` (the client's first
/// bytes on the connection).
pub fn client_hello_sni(stream: &[u8]) -> Sni<'_> {
    // the handshake message, gathered from consecutive records into a window over
    // `stream` when it is in one record (the usual case), else judged incomplete until
    // the records are all there
    let mut msg_start = None;
    let mut pos = 0;
    let mut need: Option<usize> = None;
    let mut have = 0usize;
    let mut single: Option<&[u8]> = None;
    loop {
        let Some(h) = stream.get(pos..pos + 5) else {
            return Sni::Incomplete;
        };
        if h[0] != 22 || h[1] != 3 {
            return Sni::NotTls;
        }
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        if len == 0 || len > MAX_HELLO + 2048 {
            return Sni::NotTls;
        }
        let Some(body) = stream.get(pos + 5..pos + 5 + len) else {
            return Sni::Incomplete;
        };
        if msg_start.is_none() {
            // the handshake header: type 1 (ClientHello), 24-bit length
            if body.len() < 4 || body[0] != 1 {
                return Sni::NotTls;
            }
            let n =
                (usize::from(body[1]) << 16) | (usize::from(body[2]) << 8) | usize::from(body[3]);
            if n > MAX_HELLO {
                return Sni::NotTls;
            }
            need = Some(n + 4);
            msg_start = Some(pos + 5);
            if len >= n + 4 {
                single = Some(&body[4..4 + n]);
            }
        }
        have += len;
        pos += 5 + len;
        if single.is_some() || have >= need.unwrap_or(usize::MAX) {
            break;
        }
    }
    match single {
        Some(hello) => parse_hello(hello),
        // a ClientHello split over records: not read (rare; it would need a copy)
        None => Sni::NoName,
    }
}

/// The server name of a bare ClientHello handshake message (type 1, 24-bit length,
/// body: what a QUIC client's CRYPTO frames carry, with no record layer; RFC 9001 §4).
pub fn handshake_sni(msg: &[u8]) -> Sni<'_> {
    let Some(h) = msg.get(..4) else {
        return if msg.first().is_some_and(|&t| t != 1) {
            Sni::NotTls
        } else {
            Sni::Incomplete
        };
    };
    if h[0] != 1 {
        return Sni::NotTls;
    }
    let n = (usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]);
    if n > MAX_HELLO {
        return Sni::NotTls;
    }
    match msg.get(4..4 + n) {
        Some(hello) => parse_hello(hello),
        None => Sni::Incomplete,
    }
}

/// A cursor over a byte slice; every read is checked.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}

fn parse_hello(hello: &[u8]) -> Sni<'_> {
    let r = (|| {
        let mut c = Cur(hello);
        c.take(2 + 32)?; // legacy_version, random
        let sid = c.u8()?;
        c.take(sid)?;
        let suites = c.u16()?;
        c.take(suites)?;
        let comp = c.u8()?;
        c.take(comp)?;
        if c.0.is_empty() {
            return Some(Sni::NoName); // no extensions at all
        }
        let ext_len = c.u16()?;
        let mut ext = Cur(c.take(ext_len)?);
        while !ext.0.is_empty() {
            let (ty, len) = (ext.u16()?, ext.u16()?);
            let body = ext.take(len)?;
            if ty != 0 {
                continue;
            }
            // server_name: a list of (type, name)
            let mut b = Cur(body);
            let list = b.u16()?;
            let mut l = Cur(b.take(list)?);
            while !l.0.is_empty() {
                let (kind, n) = (l.u8()?, l.u16()?);
                let name = l.take(n)?;
                if kind == 0 {
                    let ok = !name.is_empty()
                        && name.len() <= 255
                        && name.iter().all(|b| b.is_ascii_graphic());
                    return Some(if ok {
                        // checked ASCII: valid UTF-8
                        Sni::Name(core::str::from_utf8(name).ok()?)
                    } else {
                        Sni::NotTls
                    });
                }
            }
            return Some(Sni::NoName);
        }
        Some(Sni::NoName)
    })();
    r.unwrap_or(Sni::NotTls)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello record with `exts` as its extensions (built by hand after RFC 8446
    /// §4.1.2: version 0x0303, 32 zero random bytes, an empty session id, one suite
    /// 0x1301, one null compression method).
    pub(crate) fn hello(exts: &[u8]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // cipher suites
        body.extend_from_slice(&[1, 0]); // compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    /// server_name extension (type 0) for `name`: list length, type 0, name length, name.
    pub(crate) fn sni_ext(name: &[u8]) -> Vec<u8> {
        let mut list = vec![0];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend_from_slice(&list);
        let mut e = vec![0, 0];
        e.extend_from_slice(&(body.len() as u16).to_be_bytes());
        e.extend_from_slice(&body);
        e
    }

    #[test]
    fn the_server_name_is_read() {
        // another extension first (supported_versions, type 43), then server_name
        let mut exts = vec![0, 43, 0, 3, 2, 3, 4];
        exts.extend_from_slice(&sni_ext(b"www.example.org"));
        let rec = hello(&exts);
        assert_eq!(client_hello_sni(&rec), Sni::Name("www.example.org"));
        // any prefix is incomplete, never wrong
        for n in 0..rec.len() {
            assert_eq!(client_hello_sni(&rec[..n]), Sni::Incomplete, "{n} bytes");
        }
        // application data after the hello changes nothing
        let mut more = rec.clone();
        more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert_eq!(client_hello_sni(&more), Sni::Name("www.example.org"));
    }

    #[test]
    fn hellos_without_a_name_and_other_bytes() {
        assert_eq!(
            client_hello_sni(&hello(&[0, 43, 0, 3, 2, 3, 4])),
            Sni::NoName
        );
        assert_eq!(client_hello_sni(b"GET / HTTP/1.1\r\n"), Sni::NotTls);
        assert_eq!(client_hello_sni(&[22, 3, 1, 0, 0]), Sni::NotTls);
        // a ServerHello (type 2) is not a ClientHello
        let mut rec = hello(&[]);
        rec[5] = 2;
        assert_eq!(client_hello_sni(&rec), Sni::NotTls);
        // a name with a control byte, an extension longer than its list
        assert_eq!(client_hello_sni(&hello(&sni_ext(b"a\x01b"))), Sni::NotTls);
        let mut bad = sni_ext(b"example.org");
        bad[3] += 5;
        assert_eq!(client_hello_sni(&hello(&bad)), Sni::NotTls);
    }

    #[test]
    fn a_bare_handshake_message_is_read() {
        let rec = hello(&sni_ext(b"quic.example"));
        let msg = &rec[5..];
        assert_eq!(handshake_sni(msg), Sni::Name("quic.example"));
        for n in 0..msg.len() {
            assert_eq!(handshake_sni(&msg[..n]), Sni::Incomplete, "{n} bytes");
        }
        assert_eq!(handshake_sni(&rec), Sni::NotTls); // a record is not a bare message
        assert_eq!(handshake_sni(&[1, 0xff, 0, 0]), Sni::NotTls); // over MAX_HELLO
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = client_hello_sni(&data);
            let mut rec = hello(&sni_ext(b"x.example"));
            rec.extend_from_slice(&data);
            proptest::prop_assert_eq!(client_hello_sni(&rec), Sni::Name("x.example"));
        }
    }
}
