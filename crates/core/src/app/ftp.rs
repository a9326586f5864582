//! FTP's control channel: the commands and replies that announce a data connection
//! (seed 000 step 3: "active-mode FTP uses the FTP-Command port (port 21) to negotiate
//! data transmission port X … If the bandwidth manager cannot recognize that port X was
//! chosen, it would never know what the session is transferring").
//!
//! * Active mode, client → server: `PORT h1,h2,h3,h4,p1,p2` (RFC 959 §4.1.2: address
//!   h1.h2.h3.h4, port p1·256 + p2) or `EPRT |1|a.b.c.d|port|` / `EPRT |2|ipv6|port|`
//!   (RFC 2428 §2; any printable delimiter in place of `|`). The server then connects
//!   from its data port to that address and port.
//! * Passive mode, server → client: `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` (RFC
//!   959 §4.2: the text around the numbers is free; the numbers are the first six
//!   comma-separated values after the code) or `229 Entering Extended Passive Mode
//!   (|||port|)` (RFC 2428 §3: port only, the address is the control connection's
//!   server). The client then connects to that address and port.
//!
//! [`parse_line`] turns one complete line (without its CR LF) into an [`Announce`]; the
//! caller assembles lines from the TCP byte stream ([`LineAssembler`]) and checks the
//! address (never expect a connection to a host other than the control connection's
//! peer: the FTP bounce attack, RFC 2577 §3). Everything is bounded: a line longer than
//! [`MAX_LINE`] bytes is skipped to its end, numbers out of range are
//! [`FtpError`]s, nothing allocates.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest control line inspected (RFC 959 has no limit; real commands and 227/229
/// replies are under 100 bytes; vsftpd accepts 4 KB commands, which are skipped).
pub const MAX_LINE: usize = 256;

/// What a line announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// Active mode (PORT, EPRT, from the client): the server will connect to this address
    /// and port.
    Active(IpAddr, u16),
    /// Passive mode (227, from the server): the client will connect to this address and
    /// port.
    Passive(IpAddr, u16),
    /// Extended passive mode (229, from the server): the client will connect to this port
    /// of the control connection's server.
    PassivePort(u16),
}

/// A line that names a data connection but does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FtpError {
    /// PORT / 227 without six numbers 0-255.
    BadHostPort,
    /// EPRT without `<d>proto<d>address<d>port<d>`, an unknown protocol, or an address that
    /// does not parse as the protocol says.
    BadExtended,
    /// Port 0.
    PortZero,
}

/// Which side sent the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Party {
    Client,
    Server,
}

/// The announcement in `line` (no CR LF), if it is one: `None` for every other command
/// or reply; `Some(Err)` for a PORT, EPRT, 227 or 229 that does not parse.
pub fn parse_line(line: &[u8], from: Party) -> Option<Result<Announce, FtpError>> {
    match from {
        Party::Client => {
            if let Some(rest) = strip_verb(line, b"PORT") {
                Some(host_port(rest).map(|(ip, p)| Announce::Active(IpAddr::V4(ip), p)))
            } else {
                strip_verb(line, b"EPRT")
                    .map(|rest| eprt(rest).map(|(ip, p)| Announce::Active(ip, p)))
            }
        }
        Party::Server => {
            if let Some(rest) = line.strip_prefix(b"227") {
                // "227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)", the numbers anywhere
                let start = rest.iter().position(u8::is_ascii_digit);
                Some(
                    start
                        .ok_or(FtpError::BadHostPort)
                        .and_then(|s| host_port(&rest[s..]))
                        .map(|(ip, p)| Announce::Passive(IpAddr::V4(ip), p)),
                )
            } else {
                line.strip_prefix(b"229")
                    .map(|rest| epsv(rest).map(Announce::PassivePort))
            }
        }
    }
}

/// `line` without a case-insensitive `verb` and the spaces after it, if it starts so.
fn strip_verb<'a>(line: &'a [u8], verb: &[u8]) -> Option<&'a [u8]> {
    let head = line.get(..verb.len())?;
    if !head.eq_ignore_ascii_case(verb) {
        return None;
    }
    let rest = &line[verb.len()..];
    match rest.first() {
        Some(b' ') => Some(trim_start(rest)),
        None => Some(rest),
        _ => None, // "PORTS", another verb
    }
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b' ').count();
    &s[n..]
}

/// Six comma-separated numbers 0-255 at the start of `s` (spaces around commas allowed):
/// (h1.h2.h3.h4, p1·256 + p2).
fn host_port(s: &[u8]) -> Result<(Ipv4Addr, u16), FtpError> {
    let mut v = [0u8; 6];
    let mut i = 0;
    for (k, slot) in v.iter_mut().enumerate() {
        while s.get(i) == Some(&b' ') {
            i += 1;
        }
        let (n, used) = number(&s[i.min(s.len())..], 255).ok_or(FtpError::BadHostPort)?;
        *slot = n as u8;
        i += used;
        while s.get(i) == Some(&b' ') {
            i += 1;
        }
        if k < 5 {
            if s.get(i) != Some(&b',') {
                return Err(FtpError::BadHostPort);
            }
            i += 1;
        }
    }
    let port = u16::from(v[4]) << 8 | u16::from(v[5]);
    if port == 0 {
        return Err(FtpError::PortZero);
    }
    Ok((Ipv4Addr::new(v[0], v[1], v[2], v[3]), port))
}

/// A decimal number at most `max` at the start of `s` (1-5 digits): (value, digits).
fn number(s: &[u8], max: u32) -> Option<(u32, usize)> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 5 {
        return None;
    }
    let v = s[..digits]
        .iter()
        .fold(0u32, |a, b| a * 10 + u32::from(b - b'0'));
    (v <= max).then_some((v, digits))
}

/// RFC 2428 `<d><net-prt><d><net-addr><d><tcp-port><d>`.
fn eprt(s: &[u8]) -> Result<(IpAddr, u16), FtpError> {
    let bad = FtpError::BadExtended;
    let (&d, body) = s.split_first().ok_or(bad)?;
    if !(33..=126).contains(&d) {
        return Err(bad);
    }
    let mut parts = body.split(|b| *b == d);
    let (proto, addr, port) = (
        parts.next().ok_or(bad)?,
        parts.next().ok_or(bad)?,
        parts.next().ok_or(bad)?,
    );
    // the closing delimiter, then nothing but spaces
    if !parts
        .next()
        .is_some_and(|rest| rest.iter().all(|b| *b == b' '))
    {
        return Err(bad);
    }
    let addr = core::str::from_utf8(addr).map_err(|_| bad)?;
    let ip = match proto {
        b"1" => IpAddr::V4(addr.parse::<Ipv4Addr>().map_err(|_| bad)?),
        b"2" => IpAddr::V6(addr.parse::<Ipv6Addr>().map_err(|_| bad)?),
        _ => return Err(bad),
    };
    let (p, used) = number(port, 65535).ok_or(bad)?;
    if used != port.len() {
        return Err(bad);
    }
    if p == 0 {
        return Err(FtpError::PortZero);
    }
    Ok((ip, p as u16))
}

/// RFC 2428 §3: `229 <text> (<d><d><d><tcp-port><d>)`.
fn epsv(s: &[u8]) -> Result<u16, FtpError> {
    let bad = FtpError::BadExtended;
    let open = s.iter().position(|b| *b == b'(').ok_or(bad)?;
    let inner = &s[open + 1..];
    let (&d, rest) = inner.split_first().ok_or(bad)?;
    if !(33..=126).contains(&d) || rest.get(..2) != Some(&[d, d][..]) {
        return Err(bad);
    }
    let rest = &rest[2..];
    let (p, used) = number(rest, 65535).ok_or(bad)?;
    if rest.get(used) != Some(&d) {
        return Err(bad);
    }
    if p == 0 {
        return Err(FtpError::PortZero);
    }
    Ok(p as u16)
}

/// Lines from a byte stream, at most [`MAX_LINE`] bytes each, in a fixed buffer: push
/// each segment's payload in order; a line longer than the buffer is skipped to its LF
/// and counted.
#[derive(Clone, Debug)]
pub struct LineAssembler {
    buf: [u8; MAX_LINE],
    len: usize,
    /// Inside a line too long to keep: skip to its LF.
    skipping: bool,
    /// Lines skipped for their length.
    pub too_long: u64,
}

impl Default for LineAssembler {
    fn default() -> Self {
        LineAssembler {
            buf: [0; MAX_LINE],
            len: 0,
            skipping: false,
            too_long: 0,
        }
    }
}

impl LineAssembler {
    /// Drop the partial line and skip to the next LF (bytes of the stream were lost).
    pub fn resync(&mut self) {
        self.len = 0;
        self.skipping = true;
    }

    /// Feed `data`; `line` is called with every complete line (CR LF or LF stripped).
    pub fn push(&mut self, data: &[u8], mut line: impl FnMut(&[u8])) {
        for &b in data {
            if b == b'\n' {
                if !self.skipping {
                    let end = if self.len > 0 && self.buf[self.len - 1] == b'\r' {
                        self.len - 1
                    } else {
                        self.len
                    };
                    line(&self.buf[..end]);
                }
                self.len = 0;
                self.skipping = false;
            } else if self.skipping {
                continue;
            } else if self.len == MAX_LINE {
                self.skipping = true;
                self.too_long += 1;
                self.len = 0;
            } else {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    /// RFC 959's example numbers: PORT 192,168,1,2,7,138 is port 7·256 + 138 = 1930.
    #[test]
    fn port_and_227() {
        assert_eq!(
            parse_line(b"PORT 192,168,1,2,7,138", Party::Client),
            Some(Ok(Announce::Active(v4(192, 168, 1, 2), 1930)))
        );
        assert_eq!(
            parse_line(b"port 10,0,0,1,0,21", Party::Client),
            Some(Ok(Announce::Active(v4(10, 0, 0, 1), 21)))
        );
        // vsftpd's reply, and free text around the numbers (RFC 1123 §4.1.2.6)
        assert_eq!(
            parse_line(
                b"227 Entering Passive Mode (10,77,0,2,156,64).",
                Party::Server
            ),
            Some(Ok(Announce::Passive(v4(10, 77, 0, 2), 156 * 256 + 64)))
        );
        assert_eq!(
            parse_line(b"227 =10,77,0,2,4,1", Party::Server),
            Some(Ok(Announce::Passive(v4(10, 77, 0, 2), 1025)))
        );
        // other commands and replies are not announcements
        for (l, f) in [
            (&b"RETR file"[..], Party::Client),
            (b"PORTS", Party::Client),
            (b"PASV", Party::Client),
            (b"226 Transfer complete.", Party::Server),
            (b"PORT 1,2,3,4,5,6", Party::Server),
            (b"227 x", Party::Client),
        ] {
            assert_eq!(parse_line(l, f), None, "{}", String::from_utf8_lossy(l));
        }
    }

    /// RFC 2428's examples: EPRT |1|132.235.1.2|6275| and |2|1080::8:800:200C:417A|5282|;
    /// 229 Entering Extended Passive Mode (|||6446|).
    #[test]
    fn eprt_and_229() {
        assert_eq!(
            parse_line(b"EPRT |1|132.235.1.2|6275|", Party::Client),
            Some(Ok(Announce::Active(v4(132, 235, 1, 2), 6275)))
        );
        assert_eq!(
            parse_line(b"EPRT |2|1080::8:800:200C:417A|5282|", Party::Client),
            Some(Ok(Announce::Active(
                "1080::8:800:200C:417A".parse().unwrap(),
                5282
            )))
        );
        assert_eq!(
            parse_line(b"EPRT !1!10.0.0.1!40000!", Party::Client),
            Some(Ok(Announce::Active(v4(10, 0, 0, 1), 40000)))
        );
        assert_eq!(
            parse_line(
                b"229 Entering Extended Passive Mode (|||6446|)",
                Party::Server
            ),
            Some(Ok(Announce::PassivePort(6446)))
        );
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for l in [
            &b"PORT 1,2,3,4,5"[..],
            b"PORT 1,2,3,4,5,",
            b"PORT 256,0,0,1,0,21",
            b"PORT a,b,c,d,e,f",
            b"PORT 1,2,3,4,5,6789",
            b"PORT",
            b"PORT 99999999999999999999",
        ] {
            assert_eq!(
                parse_line(l, Party::Client),
                Some(Err(FtpError::BadHostPort)),
                "{}",
                String::from_utf8_lossy(l)
            );
        }
        assert_eq!(
            parse_line(b"PORT 1,2,3,4,0,0", Party::Client),
            Some(Err(FtpError::PortZero))
        );
        for l in [
            &b"EPRT |3|1.2.3.4|21|"[..],
            b"EPRT |1|1.2.3|21|",
            b"EPRT |2|1.2.3.4|21|",
            b"EPRT |1|1.2.3.4|70000|",
            b"EPRT |1|1.2.3.4|21",
            b"EPRT",
            b"EPRT \x01x",
        ] {
            assert_eq!(
                parse_line(l, Party::Client),
                Some(Err(FtpError::BadExtended)),
                "{}",
                String::from_utf8_lossy(l)
            );
        }
        for l in [
            &b"229 (|||x|)"[..],
            b"229 no parens",
            b"229 (||6446|)",
            b"229 (|||6446",
        ] {
            assert_eq!(
                parse_line(l, Party::Server),
                Some(Err(FtpError::BadExtended)),
                "{}",
                String::from_utf8_lossy(l)
            );
        }
        assert_eq!(
            parse_line(b"227 no numbers", Party::Server),
            Some(Err(FtpError::BadHostPort))
        );
    }

    #[test]
    fn lines_are_assembled_across_segments_and_long_ones_skipped() {
        let mut a = LineAssembler::default();
        let mut got: Vec<Vec<u8>> = Vec::new();
        a.push(b"USER anon\r\nPORT 10,0,", |l| got.push(l.to_vec()));
        a.push(b"0,1,4,1\r\n", |l| got.push(l.to_vec()));
        a.push(b"NOOP\n", |l| got.push(l.to_vec()));
        assert_eq!(
            got,
            vec![
                b"USER anon".to_vec(),
                b"PORT 10,0,0,1,4,1".to_vec(),
                b"NOOP".to_vec()
            ]
        );
        got.clear();
        let long = vec![b'A'; MAX_LINE + 10];
        a.push(&long, |l| got.push(l.to_vec()));
        a.push(b"\r\nQUIT\r\n", |l| got.push(l.to_vec()));
        assert_eq!(got, vec![b"QUIT".to_vec()]);
        assert_eq!(a.too_long, 1);
        // bytes lost: the rest of the broken line is skipped, the next one read
        got.clear();
        a.push(b"PORT 10,0,", |l| got.push(l.to_vec()));
        a.resync();
        a.push(b"4,1\r\nPASV\r\n", |l| got.push(l.to_vec()));
        assert_eq!(got, vec![b"PASV".to_vec()]);
    }

    proptest::proptest! {
        /// Any bytes, as lines from either side and as a stream in any cut: no panic,
        /// and an announcement only from a line that starts with its verb or code.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), cut in 0usize..600) {
            for party in [Party::Client, Party::Server] {
                if let Some(Ok(_)) = parse_line(&data, party) {
                    let head = data.get(..4).map(|h| h.to_ascii_uppercase());
                    let ok = matches!(head.as_deref(), Some(b"PORT") | Some(b"EPRT"))
                        || data.starts_with(b"227")
                        || data.starts_with(b"229");
                    proptest::prop_assert!(ok);
                }
            }
            let mut a = LineAssembler::default();
            let cut = cut.min(data.len());
            let mut n = 0;
            a.push(&data[..cut], |l| { n += 1; let _ = parse_line(l, Party::Client); });
            a.push(&data[cut..], |l| { n += 1; let _ = parse_line(l, Party::Server); });
            proptest::prop_assert!(n <= data.iter().filter(|b| **b == b'\n').count());
        }
    }
}
