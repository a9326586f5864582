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
//!
//! A connection's application is a tag ([`App`]) kept in its connection-table entry and
//! matched by a rule's `app` key.

pub mod expect;
pub mod ftp;
pub mod http;
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

    const NAMES: [(&'static str, u8); 2] = [("ftp", Self::FTP), ("ftp-data", Self::FTP_DATA)];

    /// The tag of an application name (case-insensitive).
    pub fn parse(s: &str) -> Result<u8, UnitError> {
        let lower = s.trim().to_ascii_lowercase();
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|&(_, a)| a)
            .ok_or_else(|| UnitError::new("application", s, "expected ftp or ftp-data"))
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
        for n in ["ftp", "ftp-data"] {
            assert_eq!(App::name(App::parse(n).unwrap()), n);
        }
        assert_eq!(App::parse("FTP-Data").unwrap(), App::FTP_DATA);
        let e = App::parse("http").unwrap_err().to_string();
        assert!(e.contains("expected ftp or ftp-data"), "{e}");
    }
}
