//! Application awareness (seed 000 step 3, Table 2 "layer awareness"): parsers of the
//! application protocols whose connections a bandwidth manager must follow beyond their
//! ports. Each is sans-IO, bounded and allocation-free per packet; the device feeds them
//! payload (`device/apps.rs`).
//!
//! | module | what |
//! |---|---|
//! | [`ftp`] | FTP's control channel: PORT/EPRT and 227/229 announce the data connection |
//! | [`expect`] | expected connections: what a control channel announced, bounded, timed, bounce-safe |
//! | [`http`] | HTTP/1.x heads: a request's method, target and host, a response's MIME type; globs |
//! | [`tls`] | TLS: the server name (SNI) of a ClientHello |
//! | [`detect`] | applications by their first bytes on any port: HTTP, TLS, SSH, SIP, DNS, QUIC |
//! | [`quic`] | the ClientHello in a QUIC client's Initial packets (RFC 9001 §5), put together from its fragments |
//! | [`l7`] | rules' layer-7 conditions (`http.host`, `tls.sni`, ...) as bits per connection |
//! | [`sdp`] | SIP's session descriptions: the media (RTP) ports a call announces |
//!
//! A connection's application is a tag ([`App`]) kept in its connection-table entry and
//! matched by a rule's `app` key.

pub mod detect;
pub mod expect;
pub mod ftp;
pub mod http;
pub mod l7;
pub mod quic;
pub mod sdp;
pub mod tls;

use crate::units::UnitError;

/// Application tags (a connection's `app`; 0: not known).
pub struct App;

impl App {
    pub const NONE: u8 = 0;
    /// An FTP control connection (TCP to port 21).
    pub const FTP: u8 = 1;
    /// A data connection an FTP control connection announced (PORT, EPRT, 227, 229).
    pub const FTP_DATA: u8 = 2;

    /// HTTP/1.x (a request line first).
    pub const HTTP: u8 = 3;
    /// TLS (a ClientHello first): HTTPS and others.
    pub const TLS: u8 = 4;
    pub const SSH: u8 = 5;
    pub const DNS: u8 = 6;
    /// QUIC (HTTP/3 and others): an Initial packet first.
    pub const QUIC: u8 = 7;
    /// SIP signalling, on any port.
    pub const SIP: u8 = 8;
    /// Media (RTP/RTCP) a SIP session description announced.
    pub const RTP: u8 = 9;

    const NAMES: [(&'static str, u8); 9] = [
        ("ftp", Self::FTP),
        ("ftp-data", Self::FTP_DATA),
        ("http", Self::HTTP),
        ("tls", Self::TLS),
        ("ssh", Self::SSH),
        ("dns", Self::DNS),
        ("quic", Self::QUIC),
        ("sip", Self::SIP),
        ("rtp", Self::RTP),
    ];

    /// Every application name, in tag order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::NAMES.iter().map(|&(n, _)| n)
    }

    /// The tag of an application name (case-insensitive).
    pub fn parse(s: &str) -> Result<u8, UnitError> {
        let lower = s.trim().to_ascii_lowercase();
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|&(_, a)| a)
            .ok_or_else(|| {
                UnitError::new(
                    "application",
                    s,
                    "expected one of ftp, ftp-data, http, tls, ssh, dns, quic, sip, rtp",
                )
            })
    }

    /// The name of a tag.
    pub fn name(a: u8) -> &'static str {
        Self::NAMES
            .iter()
            .find(|&&(_, x)| x == a)
            .map_or("unknown", |&(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::App;

    #[test]
    fn names_round_trip() {
        for n in App::names() {
            assert_eq!(App::name(App::parse(n).unwrap()), n);
        }
        assert_eq!(App::parse("FTP-Data").unwrap(), App::FTP_DATA);
        let e = App::parse("gopher").unwrap_err().to_string();
        assert!(e.contains("expected one of ftp, ftp-data, http"), "{e}");
    }
}
