//! A connection's first bytes: which application it is ([`detect`]) and, for the
//! policy's layer-7 conditions, its first HTTP request and response heads or its TLS
//! ClientHello (see the parent module). A head in one segment (the usual case) is read
//! where it lies; one split over segments is gathered, in sequence order, in a buffer of
//! at most [`MAX_HEAD`] bytes (buffers are reused).

use super::control::in_order;
use super::{Apps, Tag, MAX_BUFFERED, MAX_TRIES, WANT_ORIG, WANT_REPLY};
use crate::app::detect::{self, Verdict};
use crate::app::http::{self, Head, MAX_HEAD};
use crate::app::l7::{L7Kind, L7Set};
use crate::app::tls::{self, Sni};
use crate::app::App;
use crate::conn::{ConnId, ConnTable, Side};
use crate::discover::Label;
use crate::time::Instant;

/// A head being gathered.
pub(super) struct HeadBuf {
    stamp: Instant,
    next: Option<u32>,
    buf: Vec<u8>,
}

/// Which head a side's first bytes are.
#[derive(Clone, Copy)]
enum What {
    Request,
    Response,
    Hello,
}

enum Judged {
    Bits(u64),
    Incomplete,
    Unreadable,
}

fn judge(what: What, b: &[u8], l7: &L7Set) -> Judged {
    match (what, b) {
        (What::Hello, b) => match tls::client_hello_sni(b) {
            Sni::Name(n) => Judged::Bits(l7.sni(Some(n))),
            Sni::NoName => Judged::Bits(0),
            Sni::Incomplete if b.len() < MAX_HEAD => Judged::Incomplete,
            Sni::Incomplete | Sni::NotTls => Judged::Unreadable,
        },
        (what, b) => match (what, http::head(b)) {
            (
                What::Request,
                Head::Request {
                    method,
                    target,
                    host,
                },
            ) => Judged::Bits(l7.request(method, target, host)),
            (What::Response, Head::Response { mime, .. }) => Judged::Bits(l7.response(mime)),
            (_, Head::Incomplete) => Judged::Incomplete,
            _ => Judged::Unreadable,
        },
    }
}

impl Apps {
    /// The sides of a connection of application `app` whose heads the policy's
    /// conditions need.
    fn heads_wanted(&self, app: u8) -> u8 {
        let l7 = &self.l7;
        match app {
            App::HTTP => {
                let req = [L7Kind::HttpHost, L7Kind::HttpPath, L7Kind::HttpMethod];
                let orig = req.iter().any(|&k| l7.wants(k));
                let reply = l7.wants(L7Kind::HttpMime);
                (if orig { WANT_ORIG } else { 0 }) | (if reply { WANT_REPLY } else { 0 })
            }
            App::TLS if l7.wants(L7Kind::TlsSni) => WANT_ORIG,
            _ => 0,
        }
    }

    /// A packet with payload of connection `(id, side)` whose first bytes are still
    /// read (`tag.want`): recognise it, read its heads. Returns the tag as updated
    /// (and stored).
    pub(super) fn read_first_bytes(
        &mut self,
        t: &ConnTable,
        (id, side): (ConnId, Side),
        mut tag: Tag,
        p: &weir_wire::Parsed,
        data: &[u8],
    ) -> Tag {
        let bit = if side == Side::Orig {
            WANT_ORIG
        } else {
            WANT_REPLY
        };
        let seq = p.tcp(data).map(|s| s.seq_number());
        let payload = p.payload(data);
        if payload.is_empty() {
            return tag;
        }
        if tag.app == App::NONE {
            let verdict = match seq {
                Some(_) => detect::tcp(payload, side == Side::Orig),
                None => detect::udp(payload),
            };
            match verdict {
                Verdict::App(a) => {
                    tag.app = a;
                    tag.want = self.heads_wanted(a);
                    self.count(a);
                    // the connection's bytes so far move to its application
                    let c = t.get(id);
                    let leaf = self.discovery.leaf(Label::App(a), Some(c.reply().0));
                    let (o, r) = (Side::Orig, Side::Reply);
                    let bytes = c.bytes(o) + c.bytes(r);
                    let packets = u64::from(c.packets(o)) + u64::from(c.packets(r));
                    self.discovery.relabel(tag.leaf, leaf, bytes, packets);
                    tag.leaf = leaf;
                    if a == App::SIP {
                        let c = t.get(id);
                        let ends = [c.orig().0, c.reply().0];
                        let _ = self.add_control(t, id, tag.stamp, ends);
                    }
                }
                Verdict::Unknown if seq.is_some() => tag.want = 0,
                Verdict::More | Verdict::Unknown => {
                    tag.tries += 1;
                    if tag.tries >= MAX_TRIES {
                        tag.want = 0;
                    }
                }
            }
        }
        if tag.app != App::NONE && tag.want & bit != 0 {
            match seq {
                Some(seq) => tag = self.read_head(t, (id, side), tag, bit, (seq, payload)),
                None => tag.want = 0,
            }
        }
        self.set_tag(id, tag);
        tag
    }

    fn count(&mut self, app: u8) {
        let s = &mut self.stats;
        let n = match app {
            App::HTTP => &mut s.http,
            App::TLS => &mut s.tls,
            App::SSH => &mut s.ssh,
            App::DNS => &mut s.dns,
            App::QUIC => &mut s.quic,
            App::SIP => &mut s.sip,
            _ => return,
        };
        *n += 1;
    }

    /// A segment (`seq`, `payload`) of side `bit` of connection `id`, whose head is
    /// wanted: judge it, gathering it first if it is split.
    fn read_head(
        &mut self,
        t: &ConnTable,
        (id, side): (ConnId, Side),
        mut tag: Tag,
        bit: u8,
        (seq, payload): (u32, &[u8]),
    ) -> Tag {
        let what = match (tag.app, side) {
            (App::HTTP, Side::Orig) => What::Request,
            (App::HTTP, Side::Reply) => What::Response,
            (App::TLS, Side::Orig) => What::Hello,
            _ => {
                tag.want &= !bit;
                return tag;
            }
        };
        let key = (id.0, side as u8);
        let judged = match self.heads.get_mut(&key).filter(|h| h.stamp == tag.stamp) {
            Some(h) => {
                let (new, gap) = in_order(&mut h.next, seq, payload);
                if gap {
                    self.stats.gaps += 1;
                    Judged::Unreadable
                } else {
                    let room = MAX_HEAD.saturating_sub(h.buf.len());
                    h.buf.extend_from_slice(&new[..new.len().min(room)]);
                    match judge(what, &h.buf, &self.l7) {
                        Judged::Incomplete if h.buf.len() >= MAX_HEAD => Judged::Unreadable,
                        j => j,
                    }
                }
            }
            None => match judge(what, payload, &self.l7) {
                Judged::Incomplete if !self.gather(t, key, tag.stamp, seq, payload) => {
                    Judged::Unreadable
                }
                j => j,
            },
        };
        match judged {
            Judged::Incomplete => return tag,
            Judged::Bits(b) => {
                tag.l7 |= b;
                let s = &mut self.stats;
                *match what {
                    What::Request => &mut s.http_requests,
                    What::Response => &mut s.http_responses,
                    What::Hello => &mut s.tls_hellos,
                } += 1;
            }
            Judged::Unreadable => self.stats.heads_unread += 1,
        }
        tag.want &= !bit;
        if let Some(h) = self.heads.remove(&key) {
            let mut b = h.buf;
            b.clear();
            if self.spare.len() < 16 {
                self.spare.push(b);
            }
        }
        tag
    }

    /// Start gathering a split head from its first segment; `false` if no buffer is
    /// free ([`MAX_BUFFERED`]).
    fn gather(
        &mut self,
        t: &ConnTable,
        key: (u32, u8),
        stamp: Instant,
        seq: u32,
        payload: &[u8],
    ) -> bool {
        if self.heads.len() >= MAX_BUFFERED {
            self.heads
                .retain(|&(k, _), h| t.is_same(ConnId(k), h.stamp));
        }
        if self.heads.len() >= MAX_BUFFERED {
            return false;
        }
        let mut buf = self
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(MAX_HEAD));
        buf.extend_from_slice(&payload[..payload.len().min(MAX_HEAD)]);
        let next = Some(seq.wrapping_add(payload.len() as u32));
        self.heads.insert(key, HeadBuf { stamp, next, buf });
        true
    }
}
