//! TCP Rate Control in the device: window sizing and ACK pacing of the TCP connections a
//! policy puts in a `tcr` class (seed 000 "Class-Based Queuing with TCR": Packeteer's
//! PacketShaper, iPolicer; Karandikar et al., "TCP Rate Control", CCR 30(1), 2000).
//!
//! A shaper alone controls TCP by queueing and dropping its data; TCR controls the
//! *sender* through the ACKs travelling back to it, so the data does not queue at all:
//!
//! * **Window sizing.** Every ACK from the data receiver to the sender gets its receive
//!   window lowered to what the flow's rate needs over its RTT ([`super::window`]: the
//!   target, never above the receiver's offer, never pulling back a right edge already
//!   advertised, room beyond the highest SACKed byte for recovery, rounded up to the
//!   window scale).
//! * **ACK pacing.** A pure ACK that acknowledges `B` new bytes lets the next one leave
//!   `B · 8 / rate` later: ACKs are held and released at even intervals, so the sender is
//!   clocked at its rate. An ACK is never held longer than [`MAX_HOLD`] past its arrival
//!   (a wrong rate estimate, or a huge cumulative ACK after recovery, must not stall the
//!   sender into a retransmission timeout; the shaper behind still enforces the rate).
//! * **Handshake.** The SYN-ACK towards a rate-controlled sender has its window (never
//!   scaled in a SYN) sized to the target over the half RTT known so far, and is held for
//!   one segment's time at the session's rate, at most [`HANDSHAKE_HOLD`]. The sender's
//!   first RTT sample sets its retransmission timeout (RFC 6298 §2.2: RTO = 3 × the first
//!   sample, at least its minimum); a sample of a few hundred µs from a LAN handshake,
//!   followed by segments that take seconds at a 5 kbit/s share, is what made seed 000's
//!   narrow classes retransmit every segment (Karn's rule then keeps the estimate from
//!   ever learning: a retransmitted segment gives no sample). The largest window a Linux
//!   sender has seen also bounds its segment size (half of it, `tcp_bound_to_half_wnd`),
//!   so an unsized SYN-ACK window would leave it sending full bursts.
//! * **Loss.** Duplicate ACKs, ACKs with SACK blocks, ECN-echo ACKs, ACKs that carry
//!   data or FIN, and RSTs are never held: whatever the connection has held is sent
//!   first, then they go at once, in order. Their window is sized by the same rules, so
//!   a duplicate ACK carries the window the sender last saw (a changed window would stop
//!   the sender counting it as a duplicate: RFC 5681 §2 (e)) unless recovery needs more
//!   room (rule 4 of [`super::window`]). Pacing restarts from the next new ACK.
//!
//! # Which connections, which rate
//! A TCP connection is rate-controlled when its data is classified into a class with
//! `tcr` on: each labelled data segment (or SYN) marks the connection's entry with its
//! class and the side that sends the data; ACKs from the other side are then sized and
//! paced. The connection must have been seen from its handshake (window scale, MSS):
//! ACKs of connections picked up in mid-stream pass untouched (`not_seen`).
//!
//! The rate of a flow is its share of the class: the class's assured rate divided by the
//! number of its active rate-controlled sessions (those that sent data in the last
//! [`IDLE`], not closed), or the per-session guarantee when that is higher. A class's
//! member list is swept at most once per [`SWEEP`], so the count follows sessions
//! arriving and leaving within about a second and costs O(1) per packet. The RTT is the
//! connection's minimum end-to-end RTT (handshake, timestamps, sequence/ACK matching;
//! [`crate::conn::TcpConn::rtt_min_total`]); without one the window is not sized (pacing
//! still applies). The MSS is the connection's cap if the policy clamped it, else the
//! receiver's MSS option, else 536 (RFC 9293 §3.7.1).
//!
//! # State and cost
//! A side table indexed by connection id (grown on demand; one 64-byte cache line per
//! entry, plus the time of its last data in a table of its own), checked
//! against the connection's first-seen time so a reused slot starts afresh; per
//! direction a binary heap of (release time, connection) for connections with held ACKs
//! and a queue of released ACKs the device moves into the pipeline. Held ACKs keep their
//! release time in `Meta::arrival` and are counted in the device's `len(dir)`. Per class
//! its member list keeps the session rate its count makes (worked out when the count
//! changes) and the last pacing gap (ACKs of full segments repeat it), so a typical ACK
//! divides by no variable.
//!
//! Units: bits per second, bytes, nanoseconds (`Instant`).

use crate::conn::{seq_gt, ConnId, ConnTable, TcpPhase};
use crate::flow::Side;
use crate::pool::{Direction, PktId, PktQueue, Pool};
use crate::qdisc::{Ctx, DropCause};
use crate::tcp::window::{sized_field, target_bytes, AckView};
use crate::time::{Duration, Instant};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use weir_wire::tcp::{Packet, TcpFlags, TcpOption, TcpOptions};

/// Longest an ACK is held for pacing.
pub const MAX_HOLD: Duration = Duration::from_millis(1000);
/// Longest a SYN-ACK is held: below the 1 s initial retransmission timeout of a SYN
/// (RFC 6298 §2.1), so the client does not send its SYN again.
pub const HANDSHAKE_HOLD: Duration = Duration::from_millis(900);
/// A session that sent no data for this long no longer counts in its class's share.
pub const IDLE: Duration = Duration::from_secs(5);
/// How often a class's member list is swept (at most).
pub const SWEEP: Duration = Duration::from_millis(500);
/// The MSS assumed when neither a cap nor the receiver's option is known.
const DEFAULT_MSS: u16 = 536;
const NO_CLASS: u32 = u32::MAX;

/// TCR settings of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcrClass {
    /// The class's assured rate, bits/s.
    pub rate_bps: u64,
    /// Per-session guarantee, bits/s (0: none).
    pub guarantee_bps: u64,
}

/// A policy's TCR classes, by class id (`None`: not rate-controlled).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcrTable {
    pub by_class: Vec<Option<TcrClass>>,
}

impl TcrTable {
    fn get(&self, class: u32) -> Option<TcrClass> {
        self.by_class.get(class as usize).copied().flatten()
    }
}

/// What TCR did to the ACKs travelling one direction (towards rate-controlled senders).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TcrStats {
    /// ACKs whose window was lowered.
    pub sized: u64,
    /// ACKs examined whose window was already at or below the target.
    pub unchanged: u64,
    /// ACKs held for pacing.
    pub paced: u64,
    /// Duplicate, SACK and ECN-echo ACKs sent at once (what was held sent first).
    pub at_once: u64,
    /// SYN-ACKs held one segment time (the sender's first RTT sample).
    pub handshakes_held: u64,
    /// ACKs not sized for want of an RTT sample.
    pub no_rtt: u64,
    /// ACKs of connections whose handshake weir did not see: untouched.
    pub not_seen: u64,
    /// TCP headers inconsistent with the frame: untouched.
    pub malformed: u64,
}

const F_ACK_VALID: u8 = 1 << 0; // last_ack holds an ACK seen from the receiver
const F_EDGE_VALID: u8 = 1 << 1; // right_edge holds an edge advertised to the sender
const F_ACTIVE: u8 = 1 << 2; // in its class's member list
const F_QUEUED: u8 = 1 << 3; // `queued` is the time of a live heap item

/// Per-connection state, indexed by connection id: what an ACK towards the sender reads
/// and writes, in one cache line (the time of the last data is apart, in
/// [`Tcr::last_data`]: only data segments and the sweep use it).
#[derive(Clone, Debug)]
#[repr(align(64))]
struct Entry {
    /// The first-seen time of the connection this entry belongs to.
    stamp: Instant,
    /// Pacing: the earliest release of the connection's next ACK.
    next_free: Instant,
    /// Time of the connection's live heap item (with `F_QUEUED`).
    queued: Instant,
    /// ACKs held for pacing (release time in `Meta::arrival`), oldest first.
    held: PktQueue,
    class: u32,
    right_edge: u32,
    last_ack: u32,
    data_side: u8,
    /// Direction index of the held ACKs.
    lane: u8,
    flags: u8,
}

// one cache line: grow it and every ACK touches two
const _: () = assert!(std::mem::size_of::<Entry>() == 64);

impl Entry {
    fn blank(stamp: Instant) -> Entry {
        Entry {
            stamp,
            next_free: Instant::ZERO,
            queued: Instant::ZERO,
            held: PktQueue::new(),
            class: NO_CLASS,
            right_edge: 0,
            last_ack: 0,
            data_side: 0,
            lane: 0,
            flags: 0,
        }
    }
}

/// The segment size a connection's sender uses, as far as TCR knows: the policy's cap,
/// else the MSS option of `receiver`'s SYN, else [`DEFAULT_MSS`].
fn sender_mss(tcp: &crate::conn::TcpConn, receiver: Side) -> u16 {
    tcp.mss_cap()
        .or(tcp.mss(receiver))
        .unwrap_or(DEFAULT_MSS)
        .max(1)
}

/// Time `bytes` take at `rate_bps` (rounded up to the ns).
fn time_at(bytes: u64, rate_bps: u64) -> Duration {
    Duration::from_nanos((bytes * 8_000_000_000).div_ceil(rate_bps))
}

/// The TCP header of parsed frame `p` in `pkt`, to edit in place; `None` when it is
/// inconsistent with the frame.
fn tcp_header_mut<'a>(
    pool: &'a mut Pool,
    pkt: PktId,
    p: &weir_wire::Parsed,
) -> Option<Packet<&'a mut [u8]>> {
    let l4 = p.l4_offset?;
    pool.data_mut(pkt)
        .get_mut(l4..p.l3_end)
        .and_then(|b| Packet::new_checked(b).ok())
}

/// The highest SACKed sequence number (the furthest right edge of the SACK blocks) in a
/// TCP options area, reading the options up to the first malformed one.
#[inline]
fn sack_high(options: &[u8]) -> Option<u32> {
    // fast path, the ACKs of nearly every sender: no options, or NOP NOP timestamps
    const NOP_NOP_TS: [u8; 4] = [1, 1, 8, 10];
    if options.is_empty() || options.len() == 12 && options[..4] == NOP_NOP_TS {
        return None;
    }
    sack_high_slow(options)
}

#[cold]
#[inline(never)]
fn sack_high_slow(options: &[u8]) -> Option<u32> {
    let mut high: Option<u32> = None;
    for o in TcpOptions::new(options).map_while(|o| o.ok()) {
        if let TcpOption::Sack { blocks, count } = o {
            for &(_, right) in &blocks[..count as usize] {
                if high.is_none_or(|h| seq_gt(right, h)) {
                    high = Some(right);
                }
            }
        }
    }
    high
}

/// A class's rate-controlled sessions, and what their number makes of the class rate
/// (worked out when it changes, not per ACK).
#[derive(Clone, Debug)]
struct Members {
    ids: Vec<u32>,
    swept: Instant,
    /// The session rate for `ids.len()` sessions, bits/s ([`share`]); 0 when the class is
    /// not rate-controlled.
    rate: u64,
    /// The last pacing gap worked out: (bytes, [`time_at`] of them at `rate`).
    gap: (u32, Duration),
}

/// A session's share of `c` when `n` sessions count: the class rate over `n` (at least
/// one), or the per-session guarantee when that is higher; at least 1 bit/s.
fn share(c: TcrClass, n: usize) -> u64 {
    (c.rate_bps / n.max(1) as u64).max(c.guarantee_bps).max(1)
}

impl Members {
    /// The member list of a class with TCR settings `c` (`None`: not rate-controlled).
    fn new(c: Option<TcrClass>) -> Members {
        let mut m = Members {
            ids: Vec::new(),
            swept: Instant::ZERO,
            rate: 0,
            gap: (0, Duration::ZERO),
        };
        m.recount(c);
        m
    }

    /// After `ids` changed: the session rate for the new count (`c`: the class's settings).
    fn recount(&mut self, c: Option<TcrClass>) {
        let rate = c.map_or(0, |c| share(c, self.ids.len()));
        if rate != self.rate {
            self.rate = rate;
            self.gap = (0, Duration::ZERO);
        }
    }

    /// The pacing gap of an ACK of `bytes` new bytes: [`time_at`] at the session rate,
    /// worked out again only when `bytes` or the rate changed (ACKs of full segments
    /// repeat it).
    fn gap(&mut self, bytes: u32) -> Duration {
        if self.gap.0 != bytes {
            self.gap = (bytes, time_at(bytes as u64, self.rate));
        }
        self.gap.1
    }
}

/// The TCR state of a device; see the module comment.
pub struct Tcr {
    table: TcrTable,
    members: Vec<Members>,
    entries: Vec<Entry>,
    /// When each entry's connection last sent data (or its SYN) in its class, by entry.
    last_data: Vec<Instant>,
    heaps: [BinaryHeap<Reverse<(Instant, u32)>>; 2],
    /// Released ACKs the device has yet to move into its pipeline, per direction.
    ready: [PktQueue; 2],
    /// ACKs held in entries, per direction.
    held: [usize; 2],
    stats: [TcrStats; 2],
}

/// What to do with a frame after [`Tcr::ingress`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it now (after whatever [`Tcr::take_ready`] yields).
    Forward,
    /// TCR holds it; it comes back through [`Tcr::take_ready`].
    Held,
}

impl Tcr {
    pub fn new(table: TcrTable) -> Tcr {
        let members = table.by_class.iter().map(|&c| Members::new(c)).collect();
        Tcr {
            table,
            members,
            entries: Vec::new(),
            last_data: Vec::new(),
            heaps: [BinaryHeap::new(), BinaryHeap::new()],
            ready: [PktQueue::new(), PktQueue::new()],
            held: [0; 2],
            stats: [TcrStats::default(); 2],
        }
    }

    /// A new policy's classes (hot reload): class ids change meaning, so every
    /// connection is unmarked until its next data segment; held ACKs stay.
    pub fn reconfigure(&mut self, table: TcrTable, pool: &mut Pool) {
        self.members = table.by_class.iter().map(|&c| Members::new(c)).collect();
        self.table = table;
        for e in &mut self.entries {
            e.class = NO_CLASS;
            e.flags &= !F_ACTIVE;
        }
        if self.table.by_class.iter().all(Option::is_none) {
            self.flush_all(pool);
        }
    }

    /// Send everything held now (it comes back through [`Tcr::take_ready`]).
    pub fn flush_all(&mut self, pool: &mut Pool) {
        for i in 0..self.entries.len() {
            self.flush(i, pool);
        }
        self.heaps = [BinaryHeap::new(), BinaryHeap::new()];
    }

    pub fn stats(&self, dir: Direction) -> TcrStats {
        self.stats[dir.index()]
    }

    /// ACKs held or released-but-not-taken in `dir`.
    pub fn len(&self, dir: Direction) -> usize {
        let l = dir.index();
        self.held[l] + self.ready[l].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len(Direction::Outbound) + self.len(Direction::Inbound) == 0
    }

    /// Run-time control: class `class`'s assured rate is now `rate_bps` (an adaptive
    /// controller moved it); its sessions' share follows at once. Nothing for a class
    /// that is not rate-controlled.
    pub fn set_class_rate(&mut self, class: u32, rate_bps: u64) {
        let Some(Some(c)) = self.table.by_class.get_mut(class as usize) else {
            return;
        };
        c.rate_bps = rate_bps.max(1);
        let c = *c;
        if let Some(m) = self.members.get_mut(class as usize) {
            m.recount(Some(c));
        }
    }

    /// Rate-controlled sessions counted in `class` (as of its last sweep and marks).
    pub fn sessions(&self, class: u32) -> usize {
        self.members.get(class as usize).map_or(0, |m| m.ids.len())
    }

    /// The rate a session of `class` is held to now, bits/s.
    pub fn session_rate(&self, class: u32) -> Option<u64> {
        // kept by `Members::recount`: `share` of the class for its sessions, 0 without TCR
        let rate = self.members.get(class as usize)?.rate;
        (rate > 0).then_some(rate)
    }

    /// Take entry `i` out of its class's member list (no class: nothing to do).
    fn leave_members(&mut self, i: usize) {
        let class = self.entries[i].class;
        if let Some(m) = self.members.get_mut(class as usize) {
            m.ids.retain(|&x| x as usize != i);
            m.recount(self.table.get(class));
        }
        self.entries[i].flags &= !F_ACTIVE;
    }

    /// The entry of connection `id` whose first packet was at `stamp`, made or reset.
    fn entry(&mut self, id: ConnId, stamp: Instant, pool: &mut Pool) -> usize {
        let i = id.0 as usize;
        if i >= self.entries.len() {
            self.entries.resize(i + 1, Entry::blank(Instant::ZERO));
            self.last_data.resize(i + 1, Instant::ZERO);
        }
        if self.entries[i].stamp != stamp {
            // the slot holds another connection now: what it held goes, then start afresh
            self.flush(i, pool);
            self.leave_members(i);
            self.entries[i] = Entry::blank(stamp);
            self.last_data[i] = Instant::ZERO;
        }
        i
    }

    /// Move entry `i`'s held ACKs to its lane's ready queue, released now.
    fn flush(&mut self, i: usize, pool: &mut Pool) {
        let e = &mut self.entries[i];
        let l = e.lane as usize;
        while let Some(p) = e.held.pop_front(pool) {
            self.ready[l].push_back(pool, p);
            self.held[l] -= 1;
        }
        e.flags &= !F_QUEUED;
    }

    /// A frame received in `dir` (already tracked in `conns` as connection `conn`, sent by
    /// `side`; `labelled`: the class the pipeline gave it, if it was classified), parsed
    /// as `p`. Marks data of TCR classes; sizes and maybe holds ACKs towards their
    /// senders. Call [`Tcr::take_ready`] after it, whatever the verdict.
    #[allow(clippy::too_many_arguments)]
    pub fn ingress(
        &mut self,
        dir: Direction,
        pkt: PktId,
        p: &weir_wire::Parsed,
        conns: &ConnTable,
        (conn, side): (ConnId, Side),
        labelled: Option<u32>,
        pool: &mut Pool,
        now: Instant,
    ) -> Verdict {
        let Some(flags) = p.tcp_flags else {
            return Verdict::Forward;
        };
        if conn == ConnId::NONE {
            return Verdict::Forward;
        }
        let c = conns.get(conn);
        let Some(tcp) = c.tcp() else {
            return Verdict::Forward;
        };
        let payload = p.payload_len();
        let opening = flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK);
        if labelled.is_none()
            && (self.entries.len() <= conn.0 as usize
                || self.entries[conn.0 as usize].class == NO_CLASS)
        {
            // neither marked nor markable: the common case for untouched traffic
            return Verdict::Forward;
        }
        let i = self.entry(conn, c.first_seen(), pool);
        // 1. data (or the opening SYN) classified here marks the connection
        if let Some(class) = labelled.filter(|_| payload > 0 || opening) {
            self.mark(i, class, side, payload > 0, conns, now);
        }
        let e = &self.entries[i];
        if e.class == NO_CLASS || side.index() == e.data_side as usize {
            return Verdict::Forward;
        }
        // 2. a segment towards a rate-controlled sender
        let l = dir.index();
        if flags.contains(TcpFlags::SYN | TcpFlags::ACK) && !flags.contains(TcpFlags::RST) {
            return self.syn_ack(i, l, pkt, p, tcp, side, pool, now);
        }
        if flags.contains(TcpFlags::SYN) || !flags.contains(TcpFlags::ACK) {
            return Verdict::Forward;
        }
        if flags.contains(TcpFlags::RST) {
            self.flush(i, pool);
            return Verdict::Forward;
        }
        if !tcp.handshake_seen() {
            self.stats[l].not_seen += 1;
            return Verdict::Forward;
        }
        let Some(rate) = self.session_rate(e.class) else {
            return Verdict::Forward;
        };
        let receiver = side;
        let mss = sender_mss(tcp, receiver);
        let shift = tcp.window_scale(receiver).unwrap_or(0);
        let rtt = tcp.rtt_min_total();
        // the TCP header, edited in place
        let Some(mut seg) = tcp_header_mut(pool, pkt, p) else {
            self.stats[l].malformed += 1;
            return Verdict::Forward;
        };
        let ack = seg.ack_number();
        let sack_high = sack_high(seg.options());
        let e = &mut self.entries[i];
        // window sizing
        let field = seg.window();
        let mut sent_field = field;
        match rtt {
            Some(rtt) => {
                let rtt_us = (rtt.0 / 1000).min(u32::MAX as u64) as u32;
                let view = AckView {
                    ack,
                    field,
                    shift,
                    right_edge: (e.flags & F_EDGE_VALID != 0).then_some(e.right_edge),
                    sack_high,
                    mss,
                };
                match sized_field(&view, target_bytes(rate, rtt_us, mss)) {
                    Some(f) => {
                        seg.set_window(f);
                        sent_field = f;
                        self.stats[l].sized += 1;
                    }
                    None => self.stats[l].unchanged += 1,
                }
            }
            None => self.stats[l].no_rtt += 1,
        }
        let edge = ack.wrapping_add((sent_field as u32) << shift.min(14));
        if e.flags & F_EDGE_VALID == 0 || seq_gt(edge, e.right_edge) {
            e.right_edge = edge;
            e.flags |= F_EDGE_VALID;
        }
        // pacing
        let new_ack = e.flags & F_ACK_VALID != 0 && seq_gt(ack, e.last_ack);
        let at_once = payload > 0
            || flags.intersects(TcpFlags::FIN | TcpFlags::ECE)
            || sack_high.is_some()
            || e.flags & F_ACK_VALID != 0 && !new_ack;
        let newly = if new_ack {
            ack.wrapping_sub(e.last_ack)
        } else {
            0
        };
        if e.flags & F_ACK_VALID == 0 || seq_gt(ack, e.last_ack) {
            e.last_ack = ack;
            e.flags |= F_ACK_VALID;
        }
        if at_once || !new_ack {
            if at_once && payload == 0 && !flags.contains(TcpFlags::FIN) {
                self.stats[l].at_once += 1;
            }
            e.next_free = now;
            self.flush(i, pool);
            return Verdict::Forward;
        }
        let gap = self.members[e.class as usize].gap(newly);
        let release = e.next_free.max(now);
        e.next_free = Instant((release.0 + gap.0).min(now.0 + MAX_HOLD.0));
        if release <= now && e.held.is_empty() {
            return Verdict::Forward;
        }
        self.stats[l].paced += 1;
        self.hold(i, l, pkt, release, pool)
    }

    /// Hold `pkt` in entry `i` (lane `l`) until `release`.
    fn hold(
        &mut self,
        i: usize,
        l: usize,
        pkt: PktId,
        release: Instant,
        pool: &mut Pool,
    ) -> Verdict {
        let e = &mut self.entries[i];
        pool.meta_mut(pkt).arrival = release;
        e.held.push_back(pool, pkt);
        e.lane = l as u8;
        self.held[l] += 1;
        if e.flags & F_QUEUED == 0 {
            e.flags |= F_QUEUED;
            e.queued = release;
            self.heaps[l].push(Reverse((release, i as u32)));
        }
        Verdict::Held
    }

    /// The SYN-ACK of a connection whose SYN was classified into a TCR class (see the
    /// module comment, "Handshake"): its window (never scaled in a SYN) sized to the target
    /// over the half RTT known so far, and held one segment time at the session's rate,
    /// at most [`HANDSHAKE_HOLD`].
    #[allow(clippy::too_many_arguments)]
    fn syn_ack(
        &mut self,
        i: usize,
        l: usize,
        pkt: PktId,
        p: &weir_wire::Parsed,
        tcp: &crate::conn::TcpConn,
        receiver: Side,
        pool: &mut Pool,
        now: Instant,
    ) -> Verdict {
        let Some(rate) = self.session_rate(self.entries[i].class) else {
            return Verdict::Forward;
        };
        let mss = sender_mss(tcp, receiver);
        let Some(mut seg) = tcp_header_mut(pool, pkt, p) else {
            self.stats[l].malformed += 1;
            return Verdict::Forward;
        };
        let half = tcp.rtt_min(receiver).map_or(0, |d| (d.0 / 1000) as u32);
        let target = target_bytes(rate, half, mss).min(u16::MAX as u32) as u16;
        let field = seg.window();
        let sent = if target < field {
            seg.set_window(target);
            self.stats[l].sized += 1;
            target
        } else {
            self.stats[l].unchanged += 1;
            field
        };
        let ack = seg.ack_number();
        let e = &mut self.entries[i];
        e.right_edge = ack.wrapping_add(sent as u32);
        e.last_ack = ack;
        e.flags |= F_EDGE_VALID | F_ACK_VALID;
        let gap = time_at(mss as u64, rate);
        let release = Instant(now.0 + gap.0.min(HANDSHAKE_HOLD.0));
        e.next_free = release;
        self.stats[l].handshakes_held += 1;
        self.hold(i, l, pkt, release, pool)
    }

    /// Entry `i` carries data of `class` from `side` (`data`: payload, else a SYN).
    fn mark(
        &mut self,
        i: usize,
        class: u32,
        side: Side,
        data: bool,
        conns: &ConnTable,
        now: Instant,
    ) {
        if self.table.get(class).is_none() {
            // classified into a class without TCR: no longer rate-controlled
            if data {
                self.leave_members(i);
                self.entries[i].class = NO_CLASS;
            }
            return;
        }
        if self.entries[i].class != class {
            self.leave_members(i);
            self.entries[i].class = class;
        }
        let e = &mut self.entries[i];
        e.data_side = side.index() as u8;
        // a SYN counts as activity: the session is in the share from its first packet
        self.last_data[i] = now;
        if e.flags & F_ACTIVE == 0 {
            e.flags |= F_ACTIVE;
            let m = &mut self.members[class as usize];
            m.ids.push(i as u32);
            m.recount(self.table.get(class));
        }
        self.sweep(class, conns, now);
    }

    /// Drop `class`'s members that went idle, closed or were replaced (at most once per
    /// [`SWEEP`]).
    fn sweep(&mut self, class: u32, conns: &ConnTable, now: Instant) {
        let m = &mut self.members[class as usize];
        if now.saturating_since(m.swept) < SWEEP {
            return;
        }
        m.swept = now;
        let (entries, last_data) = (&mut self.entries, &self.last_data);
        m.ids.retain(|&x| {
            let e = &mut entries[x as usize];
            let id = ConnId(x);
            let keep = e.class == class
                && now.saturating_since(last_data[x as usize]) <= IDLE
                && conns.is_same(id, e.stamp)
                && conns
                    .get(id)
                    .tcp()
                    .is_some_and(|t| t.phase() != TcpPhase::Closed);
            if !keep {
                e.flags &= !F_ACTIVE;
            }
            keep
        });
        m.recount(self.table.get(class));
    }

    /// Release the ACKs of `dir` due at `now` (they come back through [`Tcr::take_ready`]).
    pub fn release(&mut self, dir: Direction, pool: &mut Pool, now: Instant) {
        let l = dir.index();
        while let Some(&Reverse((t, i))) = self.heaps[l].peek() {
            if t > now {
                break;
            }
            self.heaps[l].pop();
            let e = &mut self.entries[i as usize];
            if e.flags & F_QUEUED == 0 || e.queued != t {
                continue; // stale: flushed (and maybe queued again) since
            }
            e.flags &= !F_QUEUED;
            while let Some(h) = e.held.head() {
                let due = pool.meta(h).arrival;
                if due > now {
                    e.flags |= F_QUEUED;
                    e.queued = due;
                    self.heaps[l].push(Reverse((due, i)));
                    break;
                }
                let h = e.held.pop_front(pool).expect("head");
                pool.meta_mut(h).arrival = now;
                self.ready[l].push_back(pool, h);
                self.held[l] -= 1;
            }
        }
    }

    /// The next released ACK of `dir` for the device to forward, oldest first.
    #[inline]
    pub fn take_ready(&mut self, dir: Direction, pool: &mut Pool) -> Option<PktId> {
        self.ready[dir.index()].pop_front(pool)
    }

    /// Whether `dir` has ACKs due at `now` or released and not yet taken.
    #[inline]
    pub fn due(&self, dir: Direction, now: Instant) -> bool {
        let l = dir.index();
        !self.ready[l].is_empty()
            || self.heaps[l]
                .peek()
                .is_some_and(|Reverse((t, _))| *t <= now)
    }

    /// The earliest release time of a held ACK (may be early: a stale heap item).
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.heaps
            .iter()
            .filter_map(|h| h.peek().map(|Reverse((t, _))| *t))
            .min()
    }

    /// Discard everything held (shutdown), through `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.flush_all(cx.pool);
        for q in &mut self.ready {
            while let Some(p) = q.pop_front(cx.pool) {
                cx.drop_later(p, cause);
            }
        }
    }
}

#[cfg(test)]
mod tests;
