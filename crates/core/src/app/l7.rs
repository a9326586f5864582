//! Layer-7 conditions of rules (`http.host`, `http.path`, `http.method`, `http.mime`,
//! `tls.sni`): what a connection carries, judged as its heads are read and kept as bits.
//!
//! * A policy's distinct conditions form one [`L7Set`] (at most [`MAX_CONDS`]): each
//!   condition is a kind and a list of patterns (any may match), and has a bit.
//! * A rule requires the bits of its conditions ([`crate::classify::Match::l7`]); a
//!   packet carries the bits its connection has earned ([`crate::classify::Fields::l7`]);
//!   the rule matches when all its bits are there. A connection whose head has not been
//!   read yet has none, so its packets fall through to the rules below — the connection
//!   is reclassified from the packet that completes its head on, and what it had queued stays where
//!   it is.
//! * The device judges a request head ([`L7Set::request`]), a response head
//!   ([`L7Set::response`]) and a ClientHello's server name ([`L7Set::sni`]) as it reads them,
//!   with the globs of [`super::http::glob`]: host names, server names and media types
//!   case-insensitively, methods and paths exactly.
//! * After a reload the kept connections' bits are renumbered ([`L7Set::renumber`]): a
//!   condition both policies have keeps its verdict, a new one is false for connections
//!   whose heads were read before it (heads are not kept).

use super::http::glob;
use crate::units::UnitError;

/// Distinct layer-7 conditions a policy may have (bits of a `u64`).
pub const MAX_CONDS: usize = 64;

/// What a condition looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L7Kind {
    /// The request's `Host` (without port).
    HttpHost,
    /// The request target (path and query, or the absolute form).
    HttpPath,
    HttpMethod,
    /// The response's media type (`Content-Type` without parameters).
    HttpMime,
    /// The ClientHello's server name.
    TlsSni,
}

impl L7Kind {
    /// The policy key.
    pub fn key(self) -> &'static str {
        match self {
            L7Kind::HttpHost => "http.host",
            L7Kind::HttpPath => "http.path",
            L7Kind::HttpMethod => "http.method",
            L7Kind::HttpMime => "http.mime",
            L7Kind::TlsSni => "tls.sni",
        }
    }

    /// Whether patterns compare case-insensitively.
    fn fold(self) -> bool {
        matches!(self, L7Kind::HttpHost | L7Kind::HttpMime | L7Kind::TlsSni)
    }

    /// Check one pattern of this kind.
    pub fn check(self, p: &str) -> Result<String, UnitError> {
        let bad = |why: &str| UnitError::new(self.key(), p, why);
        if p.is_empty() {
            return Err(bad("an empty pattern matches nothing"));
        }
        if p.len() > 255 {
            return Err(bad("patterns are at most 255 bytes"));
        }
        if !p.bytes().all(|c| c.is_ascii_graphic()) {
            return Err(bad("expected printable ASCII without spaces"));
        }
        match self {
            L7Kind::HttpPath if !p.starts_with(['/', '*']) => {
                Err(bad("a path pattern starts with / (or * for any)"))
            }
            L7Kind::HttpMethod if !p.bytes().all(|c| c.is_ascii_uppercase() || c == b'*') => {
                Err(bad("methods are upper case (GET, POST, ...)"))
            }
            L7Kind::HttpMime if !p.contains('/') && p != "*" => {
                Err(bad("a media type is type/subtype (video/*, text/html)"))
            }
            _ => Ok(p.to_string()),
        }
    }
}

/// One condition: any of its patterns matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L7Cond {
    pub kind: L7Kind,
    pub patterns: Vec<String>,
}

impl L7Cond {
    fn matches(&self, text: Option<&str>) -> bool {
        let fold = self.kind.fold();
        text.is_some_and(|t| self.patterns.iter().any(|p| glob(p, t, fold)))
    }
}

/// A policy's layer-7 conditions; condition `i` is bit `1 << i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L7Set {
    pub conds: Vec<L7Cond>,
}

impl L7Set {
    pub fn is_empty(&self) -> bool {
        self.conds.is_empty()
    }

    /// The bit of a condition, added if new; `None` when the set is full.
    pub fn intern(&mut self, c: L7Cond) -> Option<u64> {
        if let Some(i) = self.conds.iter().position(|x| *x == c) {
            return Some(1 << i);
        }
        if self.conds.len() >= MAX_CONDS {
            return None;
        }
        self.conds.push(c);
        Some(1 << (self.conds.len() - 1))
    }

    /// Whether any condition looks at `kind`.
    pub fn wants(&self, kind: L7Kind) -> bool {
        self.conds.iter().any(|c| c.kind == kind)
    }

    /// The bits of the conditions whose kind `f` accepts.
    pub fn mask(&self, f: impl Fn(L7Kind) -> bool) -> u64 {
        self.bits(|c| f(c.kind))
    }

    fn bits(&self, mut f: impl FnMut(&L7Cond) -> bool) -> u64 {
        self.conds
            .iter()
            .enumerate()
            .filter(|(_, c)| f(c))
            .fold(0, |b, (i, _)| b | 1 << i)
    }

    /// The bits a request head earns.
    pub fn request(&self, method: &str, target: &str, host: Option<&str>) -> u64 {
        self.bits(|c| match c.kind {
            L7Kind::HttpHost => c.matches(host),
            L7Kind::HttpPath => c.matches(Some(target)),
            L7Kind::HttpMethod => c.matches(Some(method)),
            _ => false,
        })
    }

    /// The bits a response's media type earns.
    pub fn response(&self, mime: Option<&str>) -> u64 {
        self.bits(|c| c.kind == L7Kind::HttpMime && c.matches(mime))
    }

    /// The bits a ClientHello's server name earns.
    pub fn sni(&self, name: Option<&str>) -> u64 {
        self.bits(|c| c.kind == L7Kind::TlsSni && c.matches(name))
    }

    /// Bits of this set's conditions, renumbered into `new`'s (conditions `new` lacks are
    /// dropped). Returns a table: for each old bit, the new bit (0: gone).
    pub fn renumber(&self, new: &L7Set) -> [u64; MAX_CONDS] {
        let mut t = [0; MAX_CONDS];
        for (i, c) in self.conds.iter().enumerate() {
            if let Some(j) = new.conds.iter().position(|x| x == c) {
                t[i] = 1 << j;
            }
        }
        t
    }
}

/// Apply a [`L7Set::renumber`] table to a connection's bits.
pub fn renumbered(bits: u64, table: &[u64; MAX_CONDS]) -> u64 {
    (0..MAX_CONDS)
        .filter(|&i| bits & (1 << i) != 0)
        .fold(0, |b, i| b | table[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(kind: L7Kind, p: &[&str]) -> L7Cond {
        L7Cond {
            kind,
            patterns: p.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn bits_per_condition() {
        let mut s = L7Set::default();
        let host = s
            .intern(cond(L7Kind::HttpHost, &["*.example.com"]))
            .unwrap();
        let video = s
            .intern(cond(L7Kind::HttpPath, &["/video/*", "/live/*"]))
            .unwrap();
        let mime = s.intern(cond(L7Kind::HttpMime, &["video/*"])).unwrap();
        let sni = s.intern(cond(L7Kind::TlsSni, &["*.example.org"])).unwrap();
        let get = s.intern(cond(L7Kind::HttpMethod, &["GET"])).unwrap();
        assert_eq!((host, video, mime, sni, get), (1, 2, 4, 8, 16));
        // the same condition again: the same bit
        assert_eq!(
            s.intern(cond(L7Kind::HttpPath, &["/video/*", "/live/*"])),
            Some(2)
        );
        assert_eq!(
            s.request("GET", "/live/x.ts", Some("WWW.Example.COM")),
            host | video | get
        );
        assert_eq!(s.request("POST", "/video", Some("example.com")), 0);
        assert_eq!(s.request("GET", "/", None), get);
        assert_eq!(s.response(Some("Video/MP4")), mime);
        assert_eq!(s.response(None), 0);
        assert_eq!(s.sni(Some("a.example.org")), sni);
        assert_eq!(s.sni(Some("a.example.com")), 0);
        assert!(s.wants(L7Kind::TlsSni) && !L7Set::default().wants(L7Kind::TlsSni));
    }

    #[test]
    fn full_set_refuses() {
        let mut s = L7Set::default();
        for i in 0..MAX_CONDS {
            assert!(s
                .intern(cond(L7Kind::HttpHost, &[&format!("h{i}")]))
                .is_some());
        }
        assert_eq!(s.intern(cond(L7Kind::HttpHost, &["one-more"])), None);
        assert_eq!(s.intern(cond(L7Kind::HttpHost, &["h3"])), Some(1 << 3));
    }

    #[test]
    fn renumbering_keeps_shared_conditions() {
        let (a, b, c) = (
            cond(L7Kind::HttpHost, &["a"]),
            cond(L7Kind::HttpHost, &["b"]),
            cond(L7Kind::TlsSni, &["c"]),
        );
        let old = L7Set {
            conds: vec![a.clone(), b.clone()],
        };
        let new = L7Set {
            conds: vec![c, b, a],
        };
        let t = old.renumber(&new);
        assert_eq!(renumbered(0b11, &t), 0b110);
        assert_eq!(renumbered(0b10, &t), 0b010);
        let gone = old.renumber(&L7Set::default());
        assert_eq!(renumbered(0b11, &gone), 0);
    }

    #[test]
    fn pattern_checks() {
        assert!(L7Kind::HttpPath.check("/video/*").is_ok());
        assert!(L7Kind::HttpPath.check("*.mp4").is_ok());
        let e = L7Kind::HttpPath.check("video").unwrap_err().to_string();
        assert!(e.contains("starts with /"), "{e}");
        assert!(L7Kind::HttpMethod.check("get").is_err());
        assert!(L7Kind::HttpMime.check("video").is_err());
        assert!(L7Kind::HttpMime.check("video/*").is_ok());
        assert!(L7Kind::HttpHost.check("a b").is_err());
        assert!(L7Kind::TlsSni.check("").is_err());
    }
}
