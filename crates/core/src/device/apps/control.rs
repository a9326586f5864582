//! Control connections: FTP's control channel read line by line in sequence order, SIP
//! messages read for the media their session descriptions announce; each announcement
//! an expectation (see the parent module).

use std::net::IpAddr;

use super::{Apps, MAX_CONTROL};
use crate::app::ftp::{self, Announce, LineAssembler, Party};
use crate::app::{detect, sdp, App};
use crate::conn::{seq_gt, ConnId, ConnTable, Side};
use crate::time::Instant;

/// In-order bytes of one direction of a TCP stream.
#[derive(Default)]
pub(super) struct Stream {
    /// The next sequence number expected; `None` before the first segment.
    next: Option<u32>,
    lines: LineAssembler,
}

/// One control connection being read.
pub(super) struct Control {
    pub(super) stamp: Instant,
    /// Client (the originator), server.
    pub(super) ends: [IpAddr; 2],
    streams: [Stream; 2],
    /// The class its packets last went to, per direction (outbound, inbound).
    pub(super) class: [Option<u32>; 2],
}

/// The part of a segment (`seq`, `payload`) not read yet, given the next sequence
/// number expected (`next`, set from the first segment and advanced); and whether bytes
/// were lost before it (a gap: the caller resynchronises).
pub(super) fn in_order<'a>(
    next: &mut Option<u32>,
    seq: u32,
    payload: &'a [u8],
) -> (&'a [u8], bool) {
    let n = *next.get_or_insert(seq);
    let end = seq.wrapping_add(payload.len() as u32);
    let (new, gap): (&[u8], bool) = if seq == n {
        (payload, false)
    } else if seq_gt(seq, n) {
        (payload, true)
    } else if seq_gt(end, n) {
        (&payload[n.wrapping_sub(seq) as usize..], false)
    } else {
        (&[], false) // a retransmission of what was read
    };
    if seq == n || seq_gt(end, n) {
        *next = Some(end);
    }
    (new, gap)
}

impl Apps {
    /// Start reading control connection `id` between `ends` (client, server); `false`
    /// if [`MAX_CONTROL`] are read already.
    pub(super) fn add_control(
        &mut self,
        t: &ConnTable,
        id: ConnId,
        stamp: Instant,
        ends: [IpAddr; 2],
    ) -> bool {
        let live = |k: u32, c: &Control| t.is_same(ConnId(k), c.stamp);
        if !self
            .control_room
            .make_room(&mut self.control, MAX_CONTROL, live, drop)
        {
            return false;
        }
        self.control.insert(
            id.0,
            Control {
                stamp,
                ends,
                streams: Default::default(),
                class: [None; 2],
            },
        );
        true
    }

    /// A segment of FTP control connection `id` with payload: its new bytes through the
    /// line assembler, each announcement into the expectations.
    pub(super) fn read_ftp(
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
        let s = &mut ctl.streams[side as usize];
        let (new, gap) = in_order(&mut s.next, seg.seq_number(), seg.payload());
        if gap {
            // bytes lost before weir: drop the partial line, resume at the next one
            self.stats.gaps += 1;
            s.lines.resync();
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

    /// A packet of SIP connection `id` with payload: a SIP message in it (one per UDP
    /// datagram; over TCP, a segment that starts one) announces its media; each stream
    /// (RTP, and RTCP on the next port) is expected from the other end.
    pub(super) fn read_sip(
        &mut self,
        id: ConnId,
        stamp: Instant,
        side: Side,
        p: &weir_wire::Parsed,
        data: &[u8],
        now: Instant,
    ) {
        let Some(ctl) = self.control.get(&id.0).filter(|c| c.stamp == stamp) else {
            return;
        };
        let payload = p.payload(data);
        if !detect::is_sip(payload) {
            return;
        }
        let ends = ctl.ends;
        // the media address is the sender's (a third host is refused by the expectations)
        let peer = ends[1 - side as usize];
        for (addr, port) in sdp::media(payload).into_iter().flatten() {
            for port in [port, port.wrapping_add(1)] {
                let _ = self
                    .expect
                    .add((peer, addr, port), (17, App::RTP), (id.0, ends), now);
            }
        }
    }
}
