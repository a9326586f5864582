//! HTTP/1.x message heads: a request's method, path and `Host`, a response's status and
//! `Content-Type` (RFC 9112 §2-3, RFC 9110 §7.2, §8.3), for rules on what a connection
//! carries (`http.host`, `http.path`, `http.mime`).
//!
//! [`head`] reads the bytes at the start of a message: the start line and header fields
//! up to the empty line. Until the empty line has arrived it answers
//! [`Head::Incomplete`]; a head longer than [`MAX_HEAD`] bytes, or bytes that are not an
//! HTTP/1.x message, answer [`Head::NotHttp`]. Field names are case-insensitive, values
//! trimmed; obsolete line folding is refused (RFC 9112 §5.2). Nothing is copied.

/// Longest head read (requests with large cookies are skipped: their rules see no host).
pub const MAX_HEAD: usize = 4096;

/// What follows a head (RFC 9112 §6.3): how the next message on the connection is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// This many bytes (0: the next message follows the head at once).
    Length(u64),
    /// Chunked transfer coding: the next message is after the last chunk.
    Chunked,
    /// A response without a length: it ends when the connection closes.
    UntilClose,
}

/// A request's or a response's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head<'a> {
    Request {
        method: &'a str,
        /// The request target: origin form (`/path?q`) or absolute form.
        target: &'a str,
        /// The `Host` field, without a port; `None` if absent.
        host: Option<&'a str>,
        /// The head's bytes, its empty line included.
        len: usize,
        body: Body,
    },
    Response {
        status: u16,
        /// The media type of `Content-Type`, without parameters (`text/html`).
        mime: Option<&'a str>,
        len: usize,
        /// The body as the head frames it; a response to `HEAD` has none whatever it
        /// says (the caller knows the request).
        body: Body,
    },
    Incomplete,
    NotHttp,
}

/// The fields a head is read for.
#[derive(Default)]
struct Fields<'a> {
    host: Option<&'a str>,
    content_type: Option<&'a str>,
    content_length: Option<&'a str>,
    transfer_encoding: Option<&'a str>,
}

/// The message head at the start of `b`.
pub fn head(b: &[u8]) -> Head<'_> {
    let Some(end) = find(b, b"\r\n\r\n") else {
        return if b.len() >= MAX_HEAD || !plausible(b) {
            Head::NotHttp
        } else {
            Head::Incomplete
        };
    };
    if end > MAX_HEAD {
        return Head::NotHttp;
    }
    let Ok(text) = core::str::from_utf8(&b[..end]) else {
        return Head::NotHttp;
    };
    let len = end + 4;
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or("");
    let mut f = Fields::default();
    for l in lines {
        if l.starts_with([' ', '\t']) {
            return Head::NotHttp; // obsolete line folding
        }
        let Some((k, v)) = l.split_once(':') else {
            return Head::NotHttp;
        };
        if k.is_empty() || k.contains([' ', '\t']) {
            return Head::NotHttp;
        }
        let slot = match k.len() {
            4 if k.eq_ignore_ascii_case("host") => &mut f.host,
            12 if k.eq_ignore_ascii_case("content-type") => &mut f.content_type,
            14 if k.eq_ignore_ascii_case("content-length") => &mut f.content_length,
            17 if k.eq_ignore_ascii_case("transfer-encoding") => &mut f.transfer_encoding,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v.trim());
        }
    }
    // RFC 9112 §6.3: a transfer coding wins over a length; chunked must be the last
    let body = match (f.transfer_encoding, f.content_length) {
        (Some(te), _) => {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            if last.eq_ignore_ascii_case("chunked") {
                Body::Chunked
            } else {
                Body::UntilClose
            }
        }
        (None, Some(cl)) => match cl.parse::<u64>() {
            Ok(n) => Body::Length(n),
            Err(_) => return Head::NotHttp, // a length that is not one number
        },
        (None, None) => Body::Length(0),
    };
    if let Some(rest) = start.strip_prefix("HTTP/1.") {
        // "HTTP/1.1 200 OK"
        let mut p = rest.splitn(3, ' ');
        let (minor, code) = (p.next(), p.next());
        let status = match (minor, code) {
            (Some("0" | "1"), Some(c)) if c.len() == 3 => c.parse::<u16>().ok(),
            _ => None,
        };
        let Some(status) = status else {
            return Head::NotHttp;
        };
        let mime = f
            .content_type
            .map(|v| v.split(';').next().unwrap_or("").trim())
            .filter(|m| !m.is_empty());
        let body = match (status, body) {
            (100..=199 | 204 | 304, _) => Body::Length(0),
            (_, Body::Length(0)) if f.content_length.is_none() => Body::UntilClose,
            (_, b) => b,
        };
        return Head::Response {
            status,
            mime,
            len,
            body,
        };
    }
    // "GET /path HTTP/1.1"
    let mut p = start.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (p.next(), p.next(), p.next(), p.next())
    else {
        return Head::NotHttp;
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1")
        || method.is_empty()
        || !method.bytes().all(|c| c.is_ascii_uppercase())
        || target.is_empty()
    {
        return Head::NotHttp;
    }
    let host = f.host.map(strip_port).filter(|h| !h.is_empty());
    Head::Request {
        method,
        target,
        host,
        len,
        // a request without a length has no body (RFC 9112 §6.3 item 6)
        body: if body == Body::UntilClose {
            return Head::NotHttp;
        } else {
            body
        },
    }
}

/// `example.org:8080` → `example.org`; `[2001:db8::1]:80` → `[2001:db8::1]`.
fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.find(']').map_or(h, |i| &h[..=i]);
    }
    h.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|c| c.is_ascii_digit()))
        .map_or(h, |(a, _)| a)
}

/// Whether `b` could still become an HTTP/1.x head: a method or `HTTP/` first.
fn plausible(b: &[u8]) -> bool {
    let n = b
        .iter()
        .take(8)
        .take_while(|c| c.is_ascii_uppercase() || **c == b'/')
        .count();
    n == b.len().min(8) || b.get(n) == Some(&b' ') || b.starts_with(b"HTTP/1.")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A shell-style pattern: `*` any run of characters, `?` one; case-insensitive (host
/// names, media types) when `fold`. `*.example.com` matches `www.example.com`, not
/// `example.com`.
pub fn glob(pattern: &str, text: &str, fold: bool) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let eq = |a: u8, b: u8| {
        if fold {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    // the classic two-pointer match with one backtrack point
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == b'?' || (p[i] != b'*' && eq(p[i], t[j]))) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == b'*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let r = b"GET /video/a.mp4?x=1 HTTP/1.1\r\nUser-Agent: curl/8\r\nhost: Media.Example.com:8080\r\n\r\n";
        assert_eq!(
            head(r),
            Head::Request {
                method: "GET",
                target: "/video/a.mp4?x=1",
                host: Some("Media.Example.com"),
                len: r.len(),
                body: Body::Length(0),
            }
        );
        // a request split anywhere before its empty line is incomplete
        for n in 0..r.len() {
            assert_eq!(head(&r[..n]), Head::Incomplete, "{n} bytes");
        }
        assert_eq!(
            head(b"POST / HTTP/1.0\r\nContent-Length: 4\r\n\r\nbody"),
            Head::Request {
                method: "POST",
                target: "/",
                host: None,
                len: 38,
                body: Body::Length(4),
            }
        );
        assert_eq!(
            head(b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"),
            Head::Request {
                method: "GET",
                target: "/",
                host: Some("[2001:db8::1]"),
                len: 42,
                body: Body::Length(0),
            }
        );
    }

    #[test]
    fn responses() {
        let ok =
            b"HTTP/1.1 200 OK\r\nContent-Type: video/mp4; codecs=avc1\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(
            head(ok),
            Head::Response {
                status: 200,
                mime: Some("video/mp4"),
                len: ok.len(),
                body: Body::Length(9)
            }
        );
        assert_eq!(
            head(b"HTTP/1.0 404 Not Found\r\n\r\n"),
            Head::Response {
                status: 404,
                mime: None,
                len: 26,
                body: Body::UntilClose
            }
        );
        // RFC 9112 §6.3: chunked wins over a length; 204 and 304 have no body
        let framing = [
            (&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n"[..], Body::Chunked),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", Body::UntilClose),
            (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", Body::Length(0)),
            (b"HTTP/1.1 204 No Content\r\n\r\n", Body::Length(0)),
        ];
        for (h, want) in framing {
            let Head::Response { body, .. } = head(h) else {
                panic!()
            };
            assert_eq!(body, want, "{}", String::from_utf8_lossy(h));
        }
    }

    #[test]
    fn not_http() {
        for b in [
            &b"\x16\x03\x01\x02\x00"[..],
            b"SSH-2.0-OpenSSH_9.2\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"get / HTTP/1.1\r\n\r\n",
            b"GET /a b HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert_eq!(head(b), Head::NotHttp, "{}", String::from_utf8_lossy(b));
        }
        let long = [b'A'; MAX_HEAD + 1];
        assert_eq!(head(&long), Head::NotHttp);
    }

    #[test]
    fn globs() {
        assert!(glob("*.example.com", "www.Example.com", true));
        assert!(!glob("*.example.com", "example.com", true));
        assert!(glob("/video/*", "/video/a/b.mp4", false));
        assert!(!glob("/video/*", "/Video/a", false));
        assert!(glob("video/*", "video/mp4", true));
        assert!(glob("a?c*", "abcdef", false));
        assert!(glob("*", "", false));
        assert!(!glob("?", "", false));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), pat in "[a-c*?]{0,6}", text in "[a-c]{0,8}") {
            let _ = head(&data);
            let _ = glob(&pat, &text, true);
        }
    }
}
