//! The device's application tracking (`app` rules): which application each connection
//! is, FTP's control channels read for the data connections they announce, and those
//! data connections classified with their control connection.
//!
//! * **Tags.** A side table indexed by connection id (grown on demand, like TCP rate
//!   control's) holds each tagged connection's [`App`] tag, its control connection if
//!   it has one, and the connection's first-seen time, so a reused slot starts afresh.
//!   A packet of an untagged connection costs one bounds check and one compare.
//! * **FTP control** (`App::FTP`): a TCP connection to port 21. Its payload is read in
//!   sequence order per direction ([`Stream`]: a retransmission adds only what is new; a
//!   gap — bytes lost before weir — drops the partial line and resumes at the next); lines
//!   go to [`ftp::parse_line`]. At most [`MAX_CONTROL`] control connections are read at
//!   once (more are tagged but not read, counted).
//! * **Expectations.** Each announcement becomes an [`Expectations`] entry (at most
//!   [`MAX_EXPECT`], each for [`EXPECT_TIMEOUT`]): active mode (`PORT`/`EPRT` from the
//!   client), the server connects to the named address and port; passive (`227`/`229`
//!   from the server), the client connects to it. A named address that is not one of the
//!   control connection's ends is refused (the FTP bounce attack) and counted.
//! * **Data** (`App::FTP_DATA`): a connection whose first packet fulfils an expectation.
//!   A rule with `app = "ftp-data"` classifies it; if no rule matches it (the default
//!   rule), it goes to the class its control connection's packets last went to in the
//!   same direction.
//!
//! Malformed announcements, over-long lines, refused addresses: counted in
//! [`AppStats`], never an error; the packets are forwarded and classified as usual.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::app::expect::{ExpectStats, Expectations};
use crate::app::ftp::{self, Announce, LineAssembler, Party};
use crate::app::App;
use crate::conn::{seq_gt, ConnId, ConnTable, Side};
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

/// Control connections read at once.
pub const MAX_CONTROL: usize = 256;
/// Expected data connections pending at once.
pub const MAX_EXPECT: usize = 256;
/// How long an announced data connection is expected.
pub const EXPECT_TIMEOUT: Duration = Duration::from_secs(60);
/// The FTP control port.
const FTP_PORT: u16 = 21;

/// What the tracking did (`weir stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppStats {
    /// FTP control connections seen, and those not read (over [`MAX_CONTROL`]).
    pub ftp_control: u64,
    pub ftp_control_unread: u64,
    /// Data connections matched to an announcement.
    pub ftp_data: u64,
    /// Announcements: expected, refused (a third host named), malformed.
    pub announced: u64,
    pub refused_bounce: u64,
    pub malformed: u64,
    /// Control lines longer than the inspection limit (skipped).
    pub too_long: u64,
    /// Gaps in a control stream (bytes lost before weir): the partial line was dropped.
    pub gaps: u64,
    pub expired: u64,
}

#[derive(Clone, Copy)]
struct Tag {
    stamp: Instant,
    app: u8,
    /// The control connection (FTP data), its id.
    owner: u32,
}

/// In-order bytes of one direction of a TCP stream.
#[derive(Default)]
struct Stream {
    /// The next sequence number expected; `None` before the first segment.
    next: Option<u32>,
    lines: LineAssembler,
}

/// One FTP control connection being read.
struct Control {
    stamp: Instant,
    /// Client (the originator), server.
    ends: [IpAddr; 2],
    streams: [Stream; 2],
    /// The class its packets last went to, per direction (outbound, inbound).
    class: [Option<u32>; 2],
}

/// See the module comment.
pub struct Apps {
    tags: Vec<Option<Tag>>,
    control: HashMap<u32, Control>,
    expect: Expectations,
    stats: AppStats,
}

impl Apps {
    pub(super) fn new() -> Apps {
        Apps {
            tags: Vec::new(),
            control: HashMap::new(),
            expect: Expectations::new(MAX_EXPECT, EXPECT_TIMEOUT),
            stats: AppStats::default(),
        }
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
    /// `data`): tag a new connection, read an FTP control channel. Returns the
    /// connection's application, if known.
    pub(super) fn observe(
        &mut self,
        t: &ConnTable,
        (id, side): (ConnId, Side),
        p: &weir_wire::Parsed,
        data: &[u8],
        now: Instant,
    ) -> Option<u8> {
        if id == ConnId::NONE || !t.is_live(id) {
            return None;
        }
        let c = t.get(id);
        let stamp = c.first_seen();
        let mut tag = self.tag(id, stamp);
        let first = side == Side::Orig && c.packets(Side::Orig) == 1 && c.packets(Side::Reply) == 0;
        if tag.is_none() && first {
            tag = self.classify_new(t, (id, stamp), p, now);
        }
        let tag = tag?;
        if tag.app == App::FTP && p.payload_len() > 0 {
            self.read_control(id, stamp, side, p, data, now);
        }
        Some(tag.app)
    }

    /// The first packet of connection `id`: an expected data connection, or an FTP
    /// control connection.
    fn classify_new(
        &mut self,
        t: &ConnTable,
        (id, stamp): (ConnId, Instant),
        p: &weir_wire::Parsed,
        now: Instant,
    ) -> Option<Tag> {
        let (src, dst, proto) = (p.src_ip?, p.dst_ip?, p.protocol?);
        let dport = p.dst_port?;
        if let Some(e) = self.expect.take(src, dst, dport, proto, now) {
            self.stats.ftp_data += 1;
            let tag = Tag {
                stamp,
                app: e.app,
                owner: e.owner,
            };
            self.set_tag(id, tag);
            return Some(tag);
        }
        if proto != 6 || dport != FTP_PORT {
            return None;
        }
        self.stats.ftp_control += 1;
        let tag = Tag {
            stamp,
            app: App::FTP,
            owner: id.0,
        };
        self.set_tag(id, tag);
        if self.control.len() >= MAX_CONTROL {
            // make room from connections that are gone
            self.control.retain(|&k, c| t.is_same(ConnId(k), c.stamp));
        }
        if self.control.len() < MAX_CONTROL {
            self.control.insert(
                id.0,
                Control {
                    stamp,
                    ends: [src, dst],
                    streams: Default::default(),
                    class: [None; 2],
                },
            );
        } else {
            self.stats.ftp_control_unread += 1;
        }
        Some(tag)
    }

    /// A segment of control connection `id` with payload: its new bytes through the
    /// line assembler, each announcement into the expectations.
    fn read_control(
        &mut self,
        id: ConnId,
        stamp: Instant,
        side: Side,
        p: &weir_wire::Parsed,
        data: &[u8],
        now: Instant,
    ) {
        let Some(ctl) = self.control.get_mut(&id.0).filter(|c| c.stamp == stamp) else {
            return;
        };
        let Some(seg) = p.tcp(data) else {
            return;
        };
        let payload = seg.payload();
        let seq = seg.seq_number();
        let s = &mut ctl.streams[side as usize];
        let next = *s.next.get_or_insert(seq);
        let end = seq.wrapping_add(payload.len() as u32);
        let new: &[u8] = if seq == next {
            payload
        } else if seq_gt(seq, next) {
            // bytes lost before weir: drop the partial line, resume at the next one
            self.stats.gaps += 1;
            s.lines.resync();
            payload
        } else if seq_gt(end, next) {
            &payload[next.wrapping_sub(seq) as usize..]
        } else {
            &[] // a retransmission of what was read
        };
        if seq_gt(end, next) || seq == next {
            s.next = Some(end);
        }
        let party = if side == Side::Orig {
            Party::Client
        } else {
            Party::Server
        };
        let (ends, owner) = (ctl.ends, id.0);
        let [client, server] = ends;
        let (expect, stats) = (&mut self.expect, &mut self.stats);
        let before = s.lines.too_long;
        s.lines
            .push(new, |line| match ftp::parse_line(line, party) {
                None => {}
                Some(Err(_)) => stats.malformed += 1,
                Some(Ok(a)) => {
                    let (initiator, responder, port) = match a {
                        Announce::Active(ip, port) => (server, ip, port),
                        Announce::Passive(ip, port) => (client, ip, port),
                        Announce::PassivePort(port) => (client, server, port),
                    };
                    // a refusal (a third host) is counted by the expectations
                    let _ = expect.add(
                        (initiator, responder, port),
                        (6, App::FTP_DATA),
                        (owner, ends),
                        now,
                    );
                }
            });
        stats.too_long += s.lines.too_long - before;
    }

    /// A new policy numbers its classes anew: forget the control connections' classes
    /// (each learns its class again from its next packet; until then its data
    /// connections go where the rules send them).
    pub(super) fn forget_classes(&mut self) {
        for c in self.control.values_mut() {
            c.class = [None; 2];
        }
    }

    /// After classification of a packet of connection `id` travelling direction `d`
    /// (0 outbound, 1 inbound) into `class` by rule `rule`: an FTP data connection no rule
    /// matched takes its control connection's class; a control connection's class is
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
        match tag.app {
            App::FTP => {
                if let Some(c) = self.control.get_mut(&id.0) {
                    c.class[d] = Some(class);
                }
                class
            }
            App::FTP_DATA if default_rule => self
                .control
                .get(&tag.owner)
                .and_then(|c| c.class[d])
                .unwrap_or(class),
            _ => class,
        }
    }
}
