//! A connection's first bytes: which application it is ([`detect`]) and, for the
//! policy's layer-7 conditions, the heads of its HTTP messages or its TLS ClientHello (see
//! the parent module).
//!
//! An HTTP side is followed message by message, in sequence order: each head is judged
//! (a request's bits replace the previous request's; a response's, the previous
//! response's), then its body is skipped by its `Content-Length` to the next head. A
//! chunked body, one that lasts until the connection closes, or a `HEAD` request (whose
//! response has no body whatever it says) ends the reading of that side: the connection
//! keeps the verdicts it has. A head in one segment (the usual case) is read where it
//! lies; one split over segments is gathered in a buffer of at most [`MAX_HEAD`] bytes
//! (at most [`MAX_BUFFERED`] at once, buffers reused). At most [`MAX_STREAMS`] sides are
//! followed at once; past that a connection's first head is read where it lies and its
//! later ones are not.

use super::control::in_order;
use super::{Apps, Tag, MAX_BUFFERED, MAX_TRIES, WANT_ORIG, WANT_REPLY};
use crate::app::detect::{self, Verdict};
use crate::app::http::{self, Body, Head, MAX_HEAD};
use crate::app::l7::{L7Kind, L7Set};
use crate::app::tls::{self, Sni};
use crate::app::App;
use crate::conn::{ConnId, ConnTable, Side};
use crate::discover::Label;
use crate::time::Instant;

/// Sides (connection, direction) followed at once.
pub const MAX_STREAMS: usize = 4096;

/// One side of a connection being followed.
pub(super) struct Follow {
    stamp: Instant,
    next: Option<u32>,
    /// Body bytes of the current message before the next head.
    skip: u64,
    /// A head being gathered (empty: none).
    buf: Vec<u8>,
}

/// Which heads a side carries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum What {
    Request,
    Response,
    Hello,
}

enum Judged {
    /// The bits earned, the head's bytes, what follows it (`None`: stop reading the
    /// side), and whether it was a `HEAD` request.
    Head {
        bits: u64,
        len: usize,
        body: Option<u64>,
        head_request: bool,
    },
    Incomplete,
    Unreadable,
}

/// The `tls.sni` bits a ClientHello earns (over TCP or QUIC); `None`: not readable.
pub(super) fn sni_bits(l7: &L7Set, sni: Sni<'_>) -> Option<u64> {
    match sni {
        Sni::Name(n) => Some(l7.sni(Some(n))),
        Sni::NoName => Some(0),
        Sni::Incomplete | Sni::NotTls => None,
    }
}

fn judge(what: What, b: &[u8], l7: &L7Set) -> Judged {
    let follow = |body| match body {
        Body::Length(n) => Some(n),
        Body::Chunked | Body::UntilClose => None,
    };
    match what {
        What::Hello => match tls::client_hello_sni(b) {
            Sni::Incomplete if b.len() < MAX_HEAD => Judged::Incomplete,
            sni => match sni_bits(l7, sni) {
                Some(bits) => Judged::Head {
                    bits,
                    len: b.len(),
                    body: None,
                    head_request: false,
                },
                None => Judged::Unreadable,
            },
        },
        _ => match (what, http::head(b)) {
            (
                What::Request,
                Head::Request {
                    method,
                    target,
                    host,
                    len,
                    body,
                },
            ) => Judged::Head {
                bits: l7.request(method, target, host),
                len,
                body: follow(body),
                head_request: method == "HEAD",
            },
            (
                What::Response,
                Head::Response {
                    mime, len, body, ..
                },
            ) => Judged::Head {
                bits: l7.response(mime),
                len,
                body: follow(body),
                head_request: false,
            },
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
            App::TLS | App::QUIC if l7.wants(L7Kind::TlsSni) => WANT_ORIG,
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
                    tag.tries = 0; // from here: QUIC datagrams read for the ClientHello
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
                None if tag.app == App::QUIC && side == Side::Orig => {
                    tag = self.read_quic(t, id, tag, payload)
                }
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

    /// A segment (`seq`, `payload`) of side `bit` of connection `id`, whose heads are
    /// wanted: follow its messages (see the module comment).
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
        let known = self.streams.get(&key).is_some_and(|f| f.stamp == tag.stamp);
        if !known && !self.follow(t, key, tag.stamp) {
            // no room to follow: the head in this segment only
            self.stats.streams_full += 1;
            if let Judged::Head { bits, .. } = judge(what, payload, &self.l7) {
                tag.l7 = earned(&self.l7, what, tag.l7, bits);
            } else {
                self.stats.heads_unread += 1;
            }
            tag.want &= !bit;
            return tag;
        }
        let Apps {
            streams,
            l7,
            stats,
            buffered,
            spare,
            ..
        } = self;
        let Some(f) = streams.get_mut(&key) else {
            return tag;
        };
        let mut cx = Feed {
            l7,
            stats,
            buffered,
            spare,
        };
        let (keep, head_request) = cx.feed(f, what, &mut tag.l7, (seq, payload));
        if !keep {
            tag.want &= !bit;
            self.unfollow(key);
        }
        if head_request {
            // its response has no body, whatever it says: stop reading responses
            tag.want &= !WANT_REPLY;
            self.unfollow((id.0, Side::Reply as u8));
        }
        tag
    }

    /// Start following side `key` of a connection; `false` if [`MAX_STREAMS`] are
    /// followed (after dropping those whose connections are gone).
    fn follow(&mut self, t: &ConnTable, key: (u32, u8), stamp: Instant) -> bool {
        let Apps {
            streams,
            streams_room,
            buffered,
            spare,
            ..
        } = self;
        let live = |(k, _): (u32, u8), f: &Follow| t.is_same(ConnId(k), f.stamp);
        if !streams_room.make_room(streams, MAX_STREAMS, live, |f| release(f, buffered, spare)) {
            return false;
        }
        let f = Follow {
            stamp,
            next: None,
            skip: 0,
            buf: Vec::new(),
        };
        if let Some(old) = self.streams.insert(key, f) {
            self.release(old); // a side of an older connection in the same slot
        }
        true
    }

    fn unfollow(&mut self, key: (u32, u8)) {
        if let Some(f) = self.streams.remove(&key) {
            self.release(f);
        }
    }

    /// A followed side's buffer back to the spares.
    fn release(&mut self, f: Follow) {
        release(f, &mut self.buffered, &mut self.spare);
    }
}

fn release(f: Follow, buffered: &mut usize, spare: &mut Vec<Vec<u8>>) {
    if !f.buf.is_empty() {
        *buffered -= 1;
    }
    let mut b = f.buf;
    if b.capacity() > 0 && spare.len() < 16 {
        b.clear();
        spare.push(b);
    }
}

/// The bits of a connection after a head of kind `what` earned `bits`: they replace
/// what the previous head of that kind earned.
pub(super) fn earned(l7: &L7Set, what: What, bits_before: u64, bits: u64) -> u64 {
    let mask = l7.mask(|k| match what {
        What::Request => matches!(k, L7Kind::HttpHost | L7Kind::HttpPath | L7Kind::HttpMethod),
        What::Response => k == L7Kind::HttpMime,
        What::Hello => k == L7Kind::TlsSni,
    });
    (bits_before & !mask) | bits
}

/// What following a side needs besides the side itself.
struct Feed<'a> {
    l7: &'a L7Set,
    stats: &'a mut super::AppStats,
    buffered: &'a mut usize,
    spare: &'a mut Vec<Vec<u8>>,
}

impl Feed<'_> {
    /// A segment of side `f` carrying heads of kind `what`: skip bodies, judge heads into
    /// `l7`. Returns whether to go on following the side, and whether a `HEAD` request
    /// was seen.
    fn feed(
        &mut self,
        f: &mut Follow,
        what: What,
        l7: &mut u64,
        (seq, payload): (u32, &[u8]),
    ) -> (bool, bool) {
        let (new, gap) = in_order(&mut f.next, seq, payload);
        if gap {
            self.stats.gaps += 1;
            return (false, false);
        }
        let mut rest = new;
        let mut head_request = false;
        while !rest.is_empty() {
            if f.skip > 0 {
                let k = rest
                    .len()
                    .min(usize::try_from(f.skip).unwrap_or(usize::MAX));
                f.skip -= k as u64;
                rest = &rest[k..];
                continue;
            }
            let had = f.buf.len();
            let judged = if had == 0 {
                judge(what, rest, self.l7)
            } else {
                let room = MAX_HEAD.saturating_sub(had);
                f.buf.extend_from_slice(&rest[..rest.len().min(room)]);
                match judge(what, &f.buf, self.l7) {
                    Judged::Incomplete if f.buf.len() >= MAX_HEAD => Judged::Unreadable,
                    j => j,
                }
            };
            match judged {
                Judged::Incomplete => {
                    if had == 0 {
                        if *self.buffered >= MAX_BUFFERED {
                            self.stats.heads_unread += 1;
                            return (false, head_request);
                        }
                        *self.buffered += 1;
                        if f.buf.capacity() == 0 {
                            f.buf = self
                                .spare
                                .pop()
                                .unwrap_or_else(|| Vec::with_capacity(MAX_HEAD));
                        }
                        f.buf.extend_from_slice(&rest[..rest.len().min(MAX_HEAD)]);
                    }
                    return (true, head_request);
                }
                Judged::Unreadable => {
                    self.stats.heads_unread += 1;
                    return (false, head_request);
                }
                Judged::Head {
                    bits,
                    len,
                    body,
                    head_request: h,
                } => {
                    *l7 = earned(self.l7, what, *l7, bits);
                    let s = &mut *self.stats;
                    *match what {
                        What::Request => &mut s.http_requests,
                        What::Response => &mut s.http_responses,
                        What::Hello => &mut s.tls_hellos,
                    } += 1;
                    if had > 0 {
                        *self.buffered -= 1;
                        f.buf.clear();
                    }
                    head_request |= h;
                    rest = &rest[len.saturating_sub(had).min(rest.len())..];
                    match body {
                        Some(n) => f.skip = n,
                        None => return (false, head_request),
                    }
                }
            }
        }
        (true, head_request)
    }
}
