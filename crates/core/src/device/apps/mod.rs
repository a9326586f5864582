//! The device's application tracking: which application each connection is (`app`
//! rules), what its first request or ClientHello asks for (`http.*`, `tls.sni` rules),
//! and the connections a control connection announces (FTP data, SIP's RTP), classified
//! with it.
//!
//! * **Tags.** A side table indexed by connection id (grown on demand, like TCP rate
//!   control's) holds each new connection's [`Tag`]: its application, the layer-7
//!   condition bits it has earned, which sides are still being read, its control
//!   connection if it has one, and its first-seen time, so a reused slot starts afresh.
//!   A packet of a connection no longer read costs one bounds check and one compare.
//!   Connections that were open before weir started are not tagged (their first bytes
//!   went by).
//! * **Recognition** (`heads.rs`): the first payload of a TCP connection, or each UDP
//!   datagram until one is recognised (at most [`MAX_TRIES`]), goes to
//!   [`crate::app::detect`]: HTTP, TLS, SSH, SIP, DNS, QUIC by content, on any port. TCP
//!   to port 21 is FTP.
//! * **Heads** (`heads.rs`): when the policy has layer-7 conditions, an HTTP
//!   connection's request heads (and response heads, if a rule has `http.mime`) are read
//!   message by message, each judged by [`L7Set`] and replacing the previous one's
//!   verdict; a TLS connection's ClientHello once; a QUIC connection's ClientHello from
//!   the client's Initial datagrams, put together from its fragments (`quic.rs`). At most
//!   [`crate::app::http::MAX_HEAD`] bytes a head, in sequence order; one split over
//!   segments is gathered in a bounded buffer (at most [`MAX_BUFFERED`] at once).
//! * **Control channels** (`control.rs`): FTP's (PORT/EPRT/227/229) and SIP's session
//!   descriptions (`m=` ports) become [`Expectations`] (at most [`MAX_EXPECT`], each for
//!   [`EXPECT_TIMEOUT`]; an address that is not one of the control connection's ends is
//!   refused: the FTP bounce attack, or media steered to a third host). At most
//!   [`MAX_CONTROL`] control connections are read at once (more are tagged, not read).
//! * **Children** (`App::FTP_DATA`, `App::RTP`): a connection whose first packet
//!   fulfils an expectation. A rule with its `app` classifies it; if no rule matches it
//!   (the default rule), it goes to the class its control connection's packets last went
//!   to in the same direction.
//!
//! Malformed announcements, over-long lines and heads, refused addresses: counted in
//! [`AppStats`], never an error; the packets are forwarded and classified as usual.

mod control;
mod heads;
mod quic;

use std::collections::HashMap;
use std::hash::Hash;

use crate::app::expect::{ExpectStats, Expectations};
use crate::app::l7::{self, L7Set};
use crate::app::App;
use crate::conn::{ConnId, ConnTable, Side};
use crate::discover::{Discovery, Label, Report, OTHER};
use crate::time::{Duration, Instant};
use control::Control;
use heads::Follow;
use serde::{Deserialize, Serialize};

/// Control connections read at once.
pub const MAX_CONTROL: usize = 256;
/// Expected connections pending at once.
pub const MAX_EXPECT: usize = 256;
/// How long an announced connection is expected.
pub const EXPECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Heads split over segments being gathered at once.
pub const MAX_BUFFERED: usize = 256;
/// Payload packets of a connection judged before it is left unrecognised.
pub const MAX_TRIES: u8 = 4;
/// The FTP control port.
const FTP_PORT: u16 = 21;

/// What the tracking did (`weir stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppStats {
    /// FTP control connections seen, and those not read (over [`MAX_CONTROL`]).
    pub ftp_control: u64,
    pub ftp_control_unread: u64,
    /// Data connections matched to an announcement.
    pub ftp_data: u64,
    /// Announcements (FTP and SIP): expected, refused (a third host named), malformed.
    pub announced: u64,
    pub refused_bounce: u64,
    pub malformed: u64,
    /// Control lines longer than the inspection limit (skipped).
    pub too_long: u64,
    /// Gaps in a control stream or a head (bytes lost before weir).
    pub gaps: u64,
    pub expired: u64,
    /// Connections recognised by their first bytes.
    pub http: u64,
    pub tls: u64,
    pub ssh: u64,
    pub dns: u64,
    pub quic: u64,
    pub sip: u64,
    /// Media streams matched to a SIP session description.
    pub rtp: u64,
    /// Heads read for layer-7 conditions: requests, responses, ClientHellos.
    pub http_requests: u64,
    pub http_responses: u64,
    pub tls_hellos: u64,
    /// ClientHellos read from QUIC Initial packets, and Initial packets that did not
    /// open (not authentic under the connection's keys: forged or corrupted) or held
    /// malformed frames.
    pub quic_hellos: u64,
    pub quic_unopened: u64,
    /// Heads not read: too long, malformed, or no buffer free for a split one.
    pub heads_unread: u64,
    /// Connections whose later heads were not read: [`heads::MAX_STREAMS`] sides were
    /// followed already.
    pub streams_full: u64,
}

/// Sides still being read (`Tag::want`).
const WANT_ORIG: u8 = 1;
const WANT_REPLY: u8 = 2;

/// What is known of one connection.
#[derive(Clone, Copy)]
struct Tag {
    stamp: Instant,
    /// Layer-7 condition bits earned.
    l7: u64,
    /// The control connection (a child's), its id; the connection's own otherwise.
    owner: u32,
    app: u8,
    /// Sides still read ([`WANT_ORIG`], [`WANT_REPLY`]); 0: done.
    want: u8,
    /// Payload packets judged so far while unrecognised.
    tries: u8,
    /// Its leaf in the discovery tree.
    leaf: u32,
}

/// What [`Apps::observe`] found for a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    pub app: Option<u8>,
    pub l7: u64,
}

/// Sweeps of a full side table (`streams`, `control`, QUIC hellos) for the entries of
/// connections that are gone, at most one per `max / 4` refusals: a table full of live
/// entries costs O(1) a refusal, not a walk over it each time.
#[derive(Default)]
pub(super) struct Room {
    /// Refusals left before the next sweep.
    credit: usize,
}

impl Room {
    /// Room for one more entry in `map`, full at `max`: when it is full and a sweep is
    /// due, the entries that are not `live` are taken out and handed to `gone`; `false`
    /// if it is still full (the entry is refused).
    pub(super) fn make_room<K: Copy + Eq + Hash, V>(
        &mut self,
        map: &mut HashMap<K, V>,
        max: usize,
        live: impl Fn(K, &V) -> bool,
        mut gone: impl FnMut(V),
    ) -> bool {
        if map.len() >= max && self.credit == 0 {
            self.credit = max / 4;
            for (_, v) in map.extract_if(|&k, v| !live(k, v)) {
                gone(v);
            }
        }
        if map.len() >= max {
            self.credit = self.credit.saturating_sub(1);
            return false;
        }
        true
    }
}

/// See the module comment.
pub struct Apps {
    tags: Vec<Option<Tag>>,
    control: HashMap<u32, Control>,
    /// HTTP and TLS sides being followed, by (connection, side).
    streams: HashMap<(u32, u8), Follow>,
    /// Of those, the ones gathering a split head.
    buffered: usize,
    /// When `streams` is full: its sweeps for sides that are gone.
    streams_room: Room,
    /// The same for `control`.
    control_room: Room,
    /// Buffers of finished heads, for reuse.
    spare: Vec<Vec<u8>>,
    /// QUIC ClientHellos being put together, by connection (see `quic.rs`).
    hellos: quic::Hellos,
    expect: Expectations,
    l7: L7Set,
    stats: AppStats,
    discovery: Discovery,
}

impl Apps {
    pub(super) fn new(l7: L7Set) -> Apps {
        Apps {
            tags: Vec::new(),
            control: HashMap::new(),
            streams: HashMap::new(),
            buffered: 0,
            streams_room: Room::default(),
            control_room: Room::default(),
            spare: Vec::new(),
            hellos: quic::Hellos::default(),
            expect: Expectations::new(MAX_EXPECT, EXPECT_TIMEOUT),
            l7,
            stats: AppStats::default(),
            discovery: Discovery::new(),
        }
    }

    /// Update the discovery tree's rates (about once a second).
    pub(super) fn tick(&mut self, now: Instant) {
        self.discovery.tick(now);
    }

    /// A frame that does not parse (counted as `other`).
    pub(super) fn unparsed(&mut self, len: usize) {
        self.discovery.count(OTHER, len as u64);
    }

    /// The discovery tree (see [`Discovery::report`]).
    pub(super) fn report(&self, top_apps: usize, top_servers: usize) -> Report {
        self.discovery.report(top_apps, top_servers)
    }

    pub(super) fn stats(&self) -> AppStats {
        let ExpectStats {
            added,
            refused_bounce,
            expired,
            ..
        } = self.expect.stats;
        AppStats {
            announced: added,
            refused_bounce,
            expired,
            ..self.stats
        }
    }

    fn tag(&self, id: ConnId, stamp: Instant) -> Option<Tag> {
        self.tags
            .get(id.0 as usize)
            .copied()
            .flatten()
            .filter(|t| t.stamp == stamp)
    }

    fn set_tag(&mut self, id: ConnId, tag: Tag) {
        let i = id.0 as usize;
        if i >= self.tags.len() {
            self.tags.resize(i + 1, None);
        }
        self.tags[i] = Some(tag);
    }

    /// A packet of connection `(id, side)` (tracked in `t`; parsed as `p`, its frame
    /// `data`): tag a new connection, read its first bytes, read a control channel.
    /// Returns the connection's application, if known, and its layer-7 bits.
    pub(super) fn observe(
        &mut self,
        t: &ConnTable,
        (id, side): (ConnId, Side),
        p: &weir_wire::Parsed,
        data: &[u8],
        now: Instant,
    ) -> Seen {
        if id == ConnId::NONE || !t.is_live(id) {
            self.discovery.count(OTHER, data.len() as u64);
            return Seen::default();
        }
        let c = t.get(id);
        let stamp = c.first_seen();
        let mut tag = self.tag(id, stamp);
        let first = side == Side::Orig && c.packets(Side::Orig) == 1 && c.packets(Side::Reply) == 0;
        if tag.is_none() && first {
            tag = self.classify_new(t, (id, stamp), p, now);
        }
        let Some(mut tag) = tag else {
            self.discovery.count(OTHER, data.len() as u64);
            return Seen::default();
        };
        self.discovery.count(tag.leaf, data.len() as u64);
        if p.payload_len() > 0 {
            if tag.want != 0 {
                tag = self.read_first_bytes(t, (id, side), tag, p, data);
            }
            match tag.app {
                App::FTP => self.read_ftp(id, stamp, side, p, data, now),
                App::SIP => self.read_sip(id, stamp, side, p, data, now),
                _ => {}
            }
        }
        Seen {
            app: (tag.app != App::NONE).then_some(tag.app),
            l7: tag.l7,
        }
    }

    /// The first packet of connection `id`: an expected connection, an FTP control
    /// connection, or one to recognise by its first bytes.
    fn classify_new(
        &mut self,
        t: &ConnTable,
        (id, stamp): (ConnId, Instant),
        p: &weir_wire::Parsed,
        now: Instant,
    ) -> Option<Tag> {
        let (src, dst, proto) = (p.src_ip?, p.dst_ip?, p.protocol?);
        let mut tag = Tag {
            stamp,
            l7: 0,
            owner: id.0,
            app: App::NONE,
            want: 0,
            tries: 0,
            leaf: OTHER,
        };
        let dport = p.dst_port.unwrap_or(0);
        let expected = p
            .dst_port
            .and_then(|d| self.expect.take(src, dst, d, proto, now));
        if let Some(e) = expected {
            match e.app {
                App::FTP_DATA => self.stats.ftp_data += 1,
                _ => self.stats.rtp += 1,
            }
            tag.app = e.app;
            tag.owner = e.owner;
        } else if proto == 6 && dport == FTP_PORT {
            self.stats.ftp_control += 1;
            tag.app = App::FTP;
            if !self.add_control(t, id, stamp, [src, dst]) {
                self.stats.ftp_control_unread += 1;
            }
        } else if proto == 6 || proto == 17 {
            tag.want = WANT_ORIG | WANT_REPLY;
        }
        tag.leaf = self
            .discovery
            .leaf(Label::of(tag.app, proto, p.dst_port), Some(dst));
        self.discovery.session(tag.leaf);
        self.set_tag(id, tag);
        Some(tag)
    }

    /// A new policy: its layer-7 conditions, the kept connections' bits renumbered into
    /// them; the control connections' classes forgotten (a new policy numbers its
    /// classes anew: each learns its class again from its next packet; until then its
    /// children go where the rules send them).
    pub(super) fn set_policy(&mut self, l7: &L7Set) {
        for c in self.control.values_mut() {
            c.class = [None; 2];
        }
        if *l7 != self.l7 {
            let table = self.l7.renumber(l7);
            for t in self.tags.iter_mut().flatten() {
                t.l7 = l7::renumbered(t.l7, &table);
            }
            self.l7 = l7.clone();
        }
    }

    /// After classification of a packet of connection `id` travelling direction `d`
    /// (0 outbound, 1 inbound) into `class` by rule `rule`: a child no rule matched
    /// takes its control connection's class; a control connection's class is
    /// remembered. Returns the class to use.
    pub(super) fn class(
        &mut self,
        t: &ConnTable,
        id: ConnId,
        d: usize,
        class: u32,
        default_rule: bool,
    ) -> u32 {
        if id == ConnId::NONE || !t.is_live(id) {
            return class;
        }
        let Some(tag) = self.tag(id, t.get(id).first_seen()) else {
            return class;
        };
        if tag.owner == id.0 {
            if let Some(c) = self.control.get_mut(&id.0).filter(|c| c.stamp == tag.stamp) {
                c.class[d] = Some(class);
            }
            return class;
        }
        if !default_rule {
            return class;
        }
        self.control
            .get(&tag.owner)
            .and_then(|c| c.class[d])
            .unwrap_or(class)
    }
}

#[cfg(test)]
mod tests {
    use super::Room;

    #[test]
    fn a_full_table_is_swept_once_per_quarter_of_its_size_in_refusals() {
        use std::collections::HashMap;
        let mut r = Room::default();
        // 256 entries, the even ones live
        let mut map: HashMap<u32, u32> = (0..256).map(|k| (k, k)).collect();
        let live = |k: u32, _: &u32| k.is_multiple_of(2);
        let mut gone = Vec::new();
        assert!(
            r.make_room(&mut map, 256, live, |v| gone.push(v)),
            "swept the first time"
        );
        assert_eq!((map.len(), gone.len()), (128, 128));
        // full of live entries: refused, with no sweep for 64 refusals
        map.extend((256..384).map(|k| (k * 2, k)));
        let swept = std::cell::Cell::new(0);
        let count = |_: u32, _: &u32| {
            swept.set(swept.get() + 1);
            true
        };
        for i in 0..64 {
            assert!(!r.make_room(&mut map, 256, count, drop), "refusal {i}");
        }
        assert_eq!(swept.get(), 0, "no sweep within 64 refusals");
        assert!(!r.make_room(&mut map, 256, count, drop));
        assert_eq!(swept.get(), 256, "one sweep after 64 refusals");
    }
}
