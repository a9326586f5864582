//! Per-connection TCP state as a middle box sees it: what the handshake negotiated,
//! sequence and acknowledgement progress, advertised windows, and round-trip times split
//! at the middle box.
//!
//! A [`TcpConn`] lives in every connection-table entry and is fed every TCP segment of the
//! connection, from both directions, by [`TcpConn::observe`] (via
//! [`super::ConnTable::observe_tcp`]). It never edits a packet; MSS clamping and window
//! rewriting read it. It is passive and forgiving: it never drops or refuses a segment,
//! and a connection picked up in mid-stream (after a restart) is tracked from its first
//! segment, with whatever the handshake would have said left unknown (`None`).
//!
//! # What is recorded, per side
//! * From the side's SYN (RFC 9293 §3.1, RFC 7323, RFC 2018): the MSS option (RFC 9293
//!   §3.7.1; an option value of 0 counts as absent), the window-scale shift (clamped to
//!   14 as RFC 7323 §2.3 says), SACK-permitted, and whether it carried timestamps. The
//!   connection-wide results follow the RFCs: window scaling is in force only if **both**
//!   SYN and SYN-ACK carried the option (RFC 7323 §2.2), SACK only if both carried
//!   SACK-permitted (RFC 2018 §2), timestamps only if both carried TSopt (RFC 7323 §3.2).
//! * `next_seq`: the highest sequence number sent plus one (`SEG.SEQ + SEG.LEN`, where SYN
//!   and FIN each count one, RFC 9293 §3.4); `max_ack`: the highest acknowledgement number
//!   sent; the last advertised window, raw and scaled (windows in SYN segments are never
//!   scaled, RFC 7323 §2.2); FIN and RST seen. All sequence comparisons are modulo 2^32
//!   (RFC 9293 §3.4: `a < b` iff `(a - b) as i32 < 0`), so numbers wrap freely.
//!
//! # Round-trip times, split at the middle box
//! The middle box sits somewhere between the two endpoints, so it measures two halves:
//! `rtt(Side::Reply)` is the round trip middle box → reply endpoint → middle box, and
//! `rtt(Side::Orig)` the one to the originator and back; their sum is the end-to-end RTT.
//! A sample for the `s` half is started by a segment *towards* `s` and completed by the
//! first segment *from* `s` that answers it:
//! * **Handshake**: SYN → SYN-ACK gives the reply half, SYN-ACK → ACK the originator half
//!   (SYN at 0, SYN-ACK at 10 ms, ACK at 30 ms: 10 ms + 20 ms = 30 ms). Kept separately
//!   as [`TcpConn::handshake_rtt`] and also fed to the estimators below.
//! * **Timestamps** (RFC 7323 §4, as `pping` does), once both sides have sent TSopt: a
//!   segment whose TSval appears for the first time is timed; the answer is a segment
//!   from the other side with ACK set whose TSecr equals that TSval. An echo of a *later*
//!   TSval means the echo of ours was missed: the timing is dropped without a sample.
//!   Only first appearances are timed, so a TSval repeated by later segments (TSval
//!   ticks are often 1 ms) cannot shorten a sample. Pure ACKs are timed too, which is
//!   what gives the originator half during a one-way bulk transfer (the sender answers an
//!   ACK with new data); an application-limited sender answers late and inflates such
//!   samples (the minimum is unaffected, the smoothed value is not).
//! * **Sequence/ACK matching** otherwise: a segment carrying new sequence space (data, SYN
//!   or FIN, starting at or beyond `next_seq`) is timed by its end; the answer is a
//!   cumulative ACK from the other side at or beyond that end (and not beyond what was
//!   sent). Karn's rule (Karn & Partridge 1987; RFC 6298 §3): when a segment that
//!   overlaps the timed one is sent again (a retransmission, or reordering before the
//!   middle box, which looks the same), the timing is dropped: no sample from
//!   retransmitted data. A retransmitted SYN therefore gives no handshake sample.
//!   Delayed ACKs lengthen these samples by the receiver's ACK delay, as for any sender.
//!
//! One segment per direction is timed at a time. Per half the estimators keep the
//! minimum and a smoothed RTT (`srtt += (sample - srtt) / 8`, RFC 6298 §2, starting from
//! the first sample). The minimum is over the whole connection (no window: a path that
//! gets longer keeps its old minimum).
//!
//! # Units and limits
//! RTTs are stored as `u32` microseconds (1 µs resolution; `Duration` in the API), and the
//! start of a timing as the low 32 bits of `now` in microseconds, a clock that wraps every
//! 71.6 minutes: samples above [`MAX_RTT_SAMPLE`] (60 s) are discarded, and the
//! connection table cancels pending timings when a connection has been silent for more
//! than 30 minutes, so a wrapped clock cannot produce a sample.
//!
//! # Memory
//! 80 bytes (78 used): per side four `u32` sequence/timestamp words, four `u32` RTT words,
//! window and MSS (`u16`), flags (`u16`), window-scale shift (`u8`).
//!
//! # Invariants
//! `next_seq` is valid iff the side has sent a non-RST segment, `max_ack` iff it has sent
//! an ACK; a side has at most one pending timing, and `timed <= next_seq` (mod 2^32) for a
//! sequence-mode timing; `rtt_min` is at most every sample taken, and `handshake_rtt` is
//! set at most once per half. A pure SYN on a closed connection (RST seen, or FIN from both sides) starts the
//! state afresh: the 5-tuple is being reused.

use crate::flow::Side;
use crate::time::{Duration, Instant};
use weir_wire::tcp::{Packet, TcpFlags, TcpOption};

/// Per-side flag bits.
const F_SEEN: u16 = 1 << 0; // a non-RST segment was seen (next_seq, window valid)
const F_SYN: u16 = 1 << 1; // sent a SYN
const F_ACK: u16 = 1 << 2; // sent an ACK (max_ack valid)
const F_FIN: u16 = 1 << 3;
const F_RST: u16 = 1 << 4;
const F_SACK_OK: u16 = 1 << 5; // SYN carried SACK-permitted
const F_TS_SYN: u16 = 1 << 6; // SYN carried timestamps
const F_TS: u16 = 1 << 7; // some segment carried timestamps (ts_last valid)
const F_WIN_SYN: u16 = 1 << 8; // the last window came from a SYN (never scaled)
const F_PENDING: u16 = 1 << 9; // a segment of this side is being timed
const F_PENDING_TS: u16 = 1 << 10; // ... by its TSval (else by its end sequence number)
const F_PENDING_SYN: u16 = 1 << 11; // ... and it is a SYN: a handshake sample
const PENDING_MASK: u16 = F_PENDING | F_PENDING_TS | F_PENDING_SYN;

/// Window-scale shift "no option".
const WS_NONE: u8 = u8::MAX;
/// RTT "no sample yet".
const NO_RTT: u32 = u32::MAX;
/// Samples longer than this are discarded (see the module documentation).
pub const MAX_RTT_SAMPLE: Duration = Duration::from_secs(60);
const MAX_RTT_US: u32 = (MAX_RTT_SAMPLE.0 / 1000) as u32;

/// `a < b` in sequence space (RFC 9293 §3.4).
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
/// `a <= b` in sequence space.
#[inline]
pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}
/// `a > b` in sequence space.
#[inline]
pub fn seq_gt(a: u32, b: u32) -> bool {
    seq_lt(b, a)
}
/// `a >= b` in sequence space.
#[inline]
pub fn seq_ge(a: u32, b: u32) -> bool {
    seq_le(b, a)
}

/// The low 32 bits of `now` in microseconds (wraps every 71.6 minutes).
#[inline]
fn micros(now: Instant) -> u32 {
    (now.0 / 1000) as u32
}

/// What [`TcpConn::observe`] needs of a segment, parsed once. Build it with
/// [`Segment::parse`] or by hand (tests, the simulator).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub flags: TcpFlags,
    pub seq: u32,
    pub ack: u32,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Bytes of data (not counting SYN or FIN).
    pub payload_len: u32,
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

impl Segment {
    /// The header fields and options of `p`, with `payload_len` bytes of data (normally
    /// `p.payload().len()`). Options are read up to the first malformed one.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, payload_len: usize) -> Segment {
        let mut s = Segment {
            flags: p.flags(),
            seq: p.seq_number(),
            ack: p.ack_number(),
            window: p.window(),
            payload_len: payload_len.min(u32::MAX as usize) as u32,
            ..Segment::default()
        };
        for o in p.options_iter().map_while(|o| o.ok()) {
            match o {
                TcpOption::Mss(m) if s.mss.is_none() => s.mss = Some(m),
                TcpOption::WindowScale(w) if s.window_scale.is_none() => s.window_scale = Some(w),
                TcpOption::SackPermitted => s.sack_permitted = true,
                TcpOption::Timestamps { tsval, tsecr } if s.timestamps.is_none() => {
                    s.timestamps = Some((tsval, tsecr))
                }
                _ => {}
            }
        }
        s
    }

    /// Sequence space the segment occupies: data plus one for SYN and one for FIN.
    #[inline]
    pub fn seq_len(&self) -> u32 {
        self.payload_len
            .wrapping_add(self.flags.contains(TcpFlags::SYN) as u32)
            .wrapping_add(self.flags.contains(TcpFlags::FIN) as u32)
    }
}

/// What one segment did (besides updating the state).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// An RTT sample this segment completed: the round trip from the middle box to the
    /// segment's *sender* and back.
    pub rtt_sample: Option<Duration>,
    /// With `rtt_sample`: the end-to-end RTT it gives, the sample plus the other half's
    /// smoothed RTT (`None` while the other half has no sample).
    pub rtt_total: Option<Duration>,
    /// The segment carried sequence space that had been sent before (a retransmission,
    /// or reordering upstream of the middle box).
    pub retransmission: bool,
    /// ... and that cancelled the sender's pending timing (Karn's rule).
    pub ambiguous: bool,
    /// A pure SYN on a closed connection reset the state (the 5-tuple is reused).
    pub reopened: bool,
}

/// Where a connection is, as far as the middle box can tell.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TcpPhase {
    /// Not yet both sides have sent an ACK (a SYN without answer, a half-seen handshake).
    Opening,
    /// Both sides have sent ACKs; no FIN or RST yet.
    Established,
    /// One side has sent a FIN.
    Closing,
    /// An RST was seen, or both sides have sent a FIN.
    Closed,
}

/// TCP state of one connection; indices are [`Side::index`]. See the module documentation.
#[derive(Clone, Debug)]
pub struct TcpConn {
    next_seq: [u32; 2],
    max_ack: [u32; 2],
    /// Highest TSval seen from the side.
    ts_last: [u32; 2],
    /// The timed segment's end sequence number or TSval, by sending side.
    timed: [u32; 2],
    /// When it passed, in the wrapping µs clock.
    timed_at: [u32; 2],
    /// RTT estimators in µs, by *measured* side (the endpoint the round trip goes to).
    rtt_min: [u32; 2],
    srtt: [u32; 2],
    hs_rtt: [u32; 2],
    window: [u16; 2],
    mss: [u16; 2],
    flags: [u16; 2],
    wscale: [u8; 2],
    /// The MSS cap a policy put on this connection at its SYN (0: none), applied to the
    /// SYN-ACK too (in the padding: the struct stays 80 bytes).
    mss_cap: u16,
}

impl Default for TcpConn {
    fn default() -> Self {
        TcpConn::new()
    }
}

impl TcpConn {
    /// Nothing seen yet.
    pub const fn new() -> Self {
        TcpConn {
            next_seq: [0; 2],
            max_ack: [0; 2],
            ts_last: [0; 2],
            timed: [0; 2],
            timed_at: [0; 2],
            rtt_min: [NO_RTT; 2],
            srtt: [NO_RTT; 2],
            hs_rtt: [NO_RTT; 2],
            window: [0; 2],
            mss: [0; 2],
            flags: [0; 2],
            wscale: [WS_NONE; 2],
            mss_cap: 0,
        }
    }

    /// Update the state with one segment sent by `side`, seen at `now`.
    pub fn observe(&mut self, side: Side, seg: &Segment, now: Instant) -> Observed {
        let s = side.index();
        let o = 1 - s;
        let us = micros(now);
        let mut out = Observed::default();
        let syn = seg.flags.contains(TcpFlags::SYN);
        let ack = seg.flags.contains(TcpFlags::ACK);
        let fin = seg.flags.contains(TcpFlags::FIN);

        if syn && !ack && self.phase() == TcpPhase::Closed {
            *self = TcpConn::new();
            out.reopened = true;
        }
        let had = self.flags[s];
        let mut f = had;

        // Options of the SYN (a retransmitted SYN replaces them).
        if syn {
            f |= F_SYN;
            self.mss[s] = seg.mss.unwrap_or(0);
            self.wscale[s] = seg.window_scale.map_or(WS_NONE, |w| w.min(14));
            f = flag(f, F_SACK_OK, seg.sack_permitted);
            f = flag(f, F_TS_SYN, seg.timestamps.is_some());
        }
        let mut new_tsval = false;
        if let Some((tsval, _)) = seg.timestamps {
            if had & F_TS == 0 || seq_gt(tsval, self.ts_last[s]) {
                self.ts_last[s] = tsval;
                new_tsval = true;
            }
            f |= F_TS;
        }

        if seg.flags.contains(TcpFlags::RST) {
            // The connection is gone: nothing will answer a timing.
            self.flags[s] = (f | F_RST) & !PENDING_MASK;
            self.flags[o] &= !PENDING_MASK;
            return out;
        }

        // The acknowledgement: progress, and the answer to the other side's timing.
        if ack {
            if had & F_ACK == 0 || seq_gt(seg.ack, self.max_ack[s]) {
                self.max_ack[s] = seg.ack;
            }
            f |= F_ACK;
            let fo = self.flags[o];
            if fo & F_PENDING != 0 {
                let t = self.timed[o];
                // Some(true): answered; Some(false): the answer was missed.
                let done = if fo & F_PENDING_TS != 0 {
                    match seg.timestamps {
                        Some((_, ecr)) if ecr == t => Some(true),
                        Some((_, ecr)) if seq_gt(ecr, t) => Some(false),
                        _ => None,
                    }
                } else {
                    (seq_ge(seg.ack, t) && seq_le(seg.ack, self.next_seq[o])).then_some(true)
                };
                if let Some(answered) = done {
                    self.flags[o] = fo & !PENDING_MASK;
                    let rtt = us.wrapping_sub(self.timed_at[o]);
                    if answered && rtt <= MAX_RTT_US {
                        self.sample(s, rtt, fo & F_PENDING_SYN != 0);
                        out.rtt_sample = Some(Duration::from_micros(rtt as u64));
                        out.rtt_total = (self.srtt[o] != NO_RTT)
                            .then(|| Duration::from_micros(rtt as u64 + self.srtt[o] as u64));
                    }
                }
            }
        }

        self.window[s] = seg.window;
        f = flag(f, F_WIN_SYN, syn);

        // Sequence space.
        let len = seg.seq_len();
        let end = seg.seq.wrapping_add(len);
        let fresh = if had & F_SEEN == 0 {
            self.next_seq[s] = end;
            true
        } else {
            let prev = self.next_seq[s];
            let fresh = seq_ge(seg.seq, prev);
            if len > 0 && !fresh {
                out.retransmission = true;
                if f & F_PENDING != 0 && f & F_PENDING_TS == 0 && seq_lt(seg.seq, self.timed[s]) {
                    f &= !PENDING_MASK;
                    out.ambiguous = true;
                }
            }
            if seq_gt(end, prev) {
                self.next_seq[s] = end;
            }
            fresh
        };
        f |= F_SEEN;
        if fin {
            f |= F_FIN;
        }

        // Time this segment if nothing of this side is being timed.
        if f & F_PENDING == 0 {
            let syn_bit = if syn { F_PENDING_SYN } else { 0 };
            let ts_mode = f & F_TS != 0 && self.flags[o] & F_TS != 0;
            match seg.timestamps {
                Some((tsval, _)) if ts_mode && new_tsval => {
                    self.timed[s] = tsval;
                    self.timed_at[s] = us;
                    f |= F_PENDING | F_PENDING_TS | syn_bit;
                }
                _ if !ts_mode && len > 0 && fresh => {
                    self.timed[s] = end;
                    self.timed_at[s] = us;
                    f |= F_PENDING | syn_bit;
                }
                _ => {}
            }
        }
        self.flags[s] = f;
        out
    }

    /// Feed one RTT sample (µs) for the round trip to `far`.
    fn sample(&mut self, far: usize, rtt: u32, handshake: bool) {
        if handshake && self.hs_rtt[far] == NO_RTT {
            self.hs_rtt[far] = rtt;
        }
        self.rtt_min[far] = self.rtt_min[far].min(rtt);
        self.srtt[far] = if self.srtt[far] == NO_RTT {
            rtt
        } else {
            let s = self.srtt[far] as i64;
            (s + (rtt as i64 - s) / 8) as u32
        };
    }

    /// Drop pending timings (the connection table does this after a long silence, see
    /// the module documentation).
    pub fn cancel_timings(&mut self) {
        self.flags[0] &= !PENDING_MASK;
        self.flags[1] &= !PENDING_MASK;
    }

    #[inline]
    fn has(&self, side: Side, bit: u16) -> bool {
        self.flags[side.index()] & bit != 0
    }

    #[inline]
    fn both(&self, bit: u16) -> bool {
        self.flags[0] & self.flags[1] & bit != 0
    }

    /// Where the connection is; decides its idle timeout in the table.
    pub fn phase(&self) -> TcpPhase {
        if self.flags[0] & F_RST != 0 || self.flags[1] & F_RST != 0 || self.both(F_FIN) {
            TcpPhase::Closed
        } else if (self.flags[0] | self.flags[1]) & F_FIN != 0 {
            TcpPhase::Closing
        } else if self.both(F_ACK) {
            TcpPhase::Established
        } else {
            TcpPhase::Opening
        }
    }

    /// Both SYN and SYN-ACK were seen (a SYN from each side).
    pub fn handshake_seen(&self) -> bool {
        self.both(F_SYN)
    }

    /// `side` has sent a SYN.
    pub fn syn_seen(&self, side: Side) -> bool {
        self.has(side, F_SYN)
    }

    /// The MSS cap set with [`Self::set_mss_cap`] since the last SYN opened the
    /// connection.
    pub fn mss_cap(&self) -> Option<u16> {
        (self.mss_cap != 0).then_some(self.mss_cap)
    }

    /// Remember the MSS cap the policy chose for this connection (0 clears it).
    pub fn set_mss_cap(&mut self, cap: u16) {
        self.mss_cap = cap;
    }

    /// The MSS option of `side`'s SYN (as the endpoint sent it, before any clamping).
    pub fn mss(&self, side: Side) -> Option<u16> {
        let m = self.mss[side.index()];
        (self.has(side, F_SYN) && m != 0).then_some(m)
    }

    /// The window-scale shift `side`'s SYN offered (clamped to 14), whether or not the
    /// other side agreed.
    pub fn offered_window_scale(&self, side: Side) -> Option<u8> {
        let w = self.wscale[side.index()];
        (w != WS_NONE).then_some(w)
    }

    /// The shift that applies to windows advertised by `side`: `Some` only if both SYN
    /// and SYN-ACK carried the option (RFC 7323 §2.2).
    pub fn window_scale(&self, side: Side) -> Option<u8> {
        let [a, b] = self.wscale;
        (a != WS_NONE && b != WS_NONE).then_some(self.wscale[side.index()])
    }

    /// `side`'s SYN carried SACK-permitted.
    pub fn offered_sack(&self, side: Side) -> bool {
        self.has(side, F_SACK_OK)
    }

    /// SACK may be used: both SYNs carried SACK-permitted (RFC 2018 §2).
    pub fn sack_permitted(&self) -> bool {
        self.both(F_SACK_OK)
    }

    /// `side`'s SYN carried the timestamps option.
    pub fn offered_timestamps(&self, side: Side) -> bool {
        self.has(side, F_TS_SYN)
    }

    /// Timestamps are in use: both SYNs carried TSopt (RFC 7323 §3.2).
    pub fn timestamps(&self) -> bool {
        self.both(F_TS_SYN)
    }

    /// The highest TSval `side` has sent.
    pub fn tsval(&self, side: Side) -> Option<u32> {
        self.has(side, F_TS).then_some(self.ts_last[side.index()])
    }

    /// Highest sequence number `side` has sent plus one (SYN and FIN count one).
    pub fn next_seq(&self, side: Side) -> Option<u32> {
        self.has(side, F_SEEN)
            .then_some(self.next_seq[side.index()])
    }

    /// Highest acknowledgement number `side` has sent.
    pub fn max_ack(&self, side: Side) -> Option<u32> {
        self.has(side, F_ACK).then_some(self.max_ack[side.index()])
    }

    /// Sequence space `side` has sent that the other side has not acknowledged yet, as
    /// far as the middle box has seen.
    pub fn in_flight(&self, side: Side) -> Option<u32> {
        let sent = self.next_seq(side)?;
        let acked = self.max_ack(side.other())?;
        Some(if seq_gt(sent, acked) {
            sent.wrapping_sub(acked)
        } else {
            0
        })
    }

    /// The window field of `side`'s last segment, as sent.
    pub fn window(&self, side: Side) -> Option<u16> {
        self.has(side, F_SEEN).then_some(self.window[side.index()])
    }

    /// `side`'s last advertised window in bytes: the raw value shifted by the negotiated
    /// scale; unshifted for a SYN segment or when the handshake showed no scaling;
    /// `None` when unknown (nothing seen, or a SYN was missed so the scale is unknown).
    pub fn scaled_window(&self, side: Side) -> Option<u32> {
        let raw = self.window(side)? as u32;
        if self.has(side, F_WIN_SYN) {
            Some(raw)
        } else if let Some(shift) = self.window_scale(side) {
            Some(raw << shift)
        } else if self.handshake_seen() {
            Some(raw)
        } else {
            None
        }
    }

    /// `side` has sent a FIN.
    pub fn fin(&self, side: Side) -> bool {
        self.has(side, F_FIN)
    }

    /// `side` has sent an RST.
    pub fn rst(&self, side: Side) -> bool {
        self.has(side, F_RST)
    }

    /// A segment of `side` is being timed (for tests and diagnostics).
    pub fn timing_pending(&self, side: Side) -> bool {
        self.has(side, F_PENDING)
    }

    fn dur(us: u32) -> Option<Duration> {
        (us != NO_RTT).then_some(Duration::from_micros(us as u64))
    }

    fn total(a: u32, b: u32) -> Option<Duration> {
        Some(Duration::from_micros(
            Self::dur(a)?.0 / 1000 + Self::dur(b)?.0 / 1000,
        ))
    }

    /// Minimum round trip from the middle box to the `side` endpoint and back.
    pub fn rtt_min(&self, side: Side) -> Option<Duration> {
        Self::dur(self.rtt_min[side.index()])
    }

    /// Smoothed round trip from the middle box to the `side` endpoint and back.
    pub fn srtt(&self, side: Side) -> Option<Duration> {
        Self::dur(self.srtt[side.index()])
    }

    /// The handshake's sample of the round trip to `side` (SYN → SYN-ACK for the reply
    /// side, SYN-ACK → ACK for the originator).
    pub fn handshake_rtt(&self, side: Side) -> Option<Duration> {
        Self::dur(self.hs_rtt[side.index()])
    }

    /// End-to-end minimum RTT: the sum of the two halves' minima.
    pub fn rtt_min_total(&self) -> Option<Duration> {
        Self::total(self.rtt_min[0], self.rtt_min[1])
    }

    /// End-to-end smoothed RTT: the sum of the two halves.
    pub fn srtt_total(&self) -> Option<Duration> {
        Self::total(self.srtt[0], self.srtt[1])
    }

    /// End-to-end RTT of the handshake (SYN → ACK as seen by the middle box).
    pub fn handshake_rtt_total(&self) -> Option<Duration> {
        Self::total(self.hs_rtt[0], self.hs_rtt[1])
    }
}

#[inline]
fn flag(f: u16, bit: u16, on: bool) -> u16 {
    if on {
        f | bit
    } else {
        f & !bit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};

    const SYN: TcpFlags = TcpFlags::SYN;
    const ACK: TcpFlags = TcpFlags::ACK;
    const SYNACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
    const O: Side = Side::Orig;
    const R: Side = Side::Reply;

    fn ms(n: u64) -> Instant {
        Instant(n * 1_000_000)
    }

    fn dms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    /// Builds the frame with `weir_wire::build` (IPv4, or IPv6 when `v6`), parses it back
    /// and returns the segment as the table would see it.
    fn wire(spec: TcpSpec, payload_len: usize, v6: bool) -> Segment {
        let mut buf = [0u8; 2048];
        let payload = vec![0xabu8; payload_len];
        let n = if v6 {
            build::tcp_v6_frame(
                &mut buf,
                &EthSpec::default(),
                &Ipv6Spec::default(),
                &spec,
                &payload,
            )
        } else {
            build::tcp_v4_frame(
                &mut buf,
                &EthSpec::default(),
                &Ipv4Spec::default(),
                &spec,
                &payload,
            )
        }
        .unwrap();
        let p = weir_wire::parse_frame(&buf[..n]).unwrap();
        let seg = Packet::new_checked(&buf[p.l4_offset.unwrap()..p.l3_end]).unwrap();
        assert_eq!(seg.payload().len(), payload_len);
        Segment::parse(&seg, seg.payload().len())
    }

    fn seg(flags: TcpFlags, seq: u32, ack: u32, len: u32) -> Segment {
        Segment {
            flags,
            seq,
            ack,
            window: 1000,
            payload_len: len,
            ..Segment::default()
        }
    }

    /// A Linux-like handshake with all options, built on the wire: SYN at 0, SYN-ACK at
    /// 10 ms, ACK at 30 ms.
    fn linux_handshake(t: &mut TcpConn, v6: bool, ws: (Option<u8>, Option<u8>)) {
        let syn = TcpSpec {
            src_port: 40000,
            dst_port: 80,
            seq: 1000,
            flags: SYN,
            window: 64240,
            mss: Some(1460),
            sack_permitted: true,
            timestamps: Some((500, 0)),
            window_scale: ws.0,
            ..TcpSpec::default()
        };
        let synack = TcpSpec {
            src_port: 80,
            dst_port: 40000,
            seq: 9000,
            ack: 1001,
            flags: SYNACK,
            window: 65160,
            mss: Some(1400),
            sack_permitted: true,
            timestamps: Some((7000, 500)),
            window_scale: ws.1,
            ..TcpSpec::default()
        };
        let ack = TcpSpec {
            src_port: 40000,
            dst_port: 80,
            seq: 1001,
            ack: 9001,
            flags: ACK,
            window: 502,
            timestamps: Some((530, 7000)),
            ..TcpSpec::default()
        };
        let a = t.observe(O, &wire(syn, 0, v6), ms(0));
        assert_eq!(a.rtt_sample, None);
        let b = t.observe(R, &wire(synack, 0, v6), ms(10));
        assert_eq!(b.rtt_sample, dms(10));
        assert_eq!(b.rtt_total, None, "no sample of the originator's half yet");
        let c = t.observe(O, &wire(ack, 0, v6), ms(30));
        assert_eq!(c.rtt_sample, dms(20));
        assert_eq!(c.rtt_total, dms(30), "20 ms + the reply half's 10 ms");
    }

    #[test]
    fn size() {
        assert_eq!(core::mem::size_of::<TcpConn>(), 80);
    }

    #[test]
    fn options_recorded_from_the_handshake() {
        for v6 in [false, true] {
            let mut t = TcpConn::new();
            linux_handshake(&mut t, v6, (Some(7), Some(9)));
            assert!(t.handshake_seen());
            assert_eq!(t.phase(), TcpPhase::Established);
            assert_eq!((t.mss(O), t.mss(R)), (Some(1460), Some(1400)));
            assert_eq!((t.window_scale(O), t.window_scale(R)), (Some(7), Some(9)));
            assert!(t.sack_permitted() && t.offered_sack(O) && t.offered_sack(R));
            assert!(t.timestamps() && t.offered_timestamps(O));
            assert_eq!((t.tsval(O), t.tsval(R)), (Some(530), Some(7000)));
            assert_eq!((t.next_seq(O), t.next_seq(R)), (Some(1001), Some(9001)));
            assert_eq!((t.max_ack(O), t.max_ack(R)), (Some(9001), Some(1001)));
            // The SYN-ACK's window is unscaled; the ACK's is scaled by O's shift.
            assert_eq!(t.window(R), Some(65160));
            assert_eq!(t.scaled_window(R), Some(65160));
            assert_eq!(t.window(O), Some(502));
            assert_eq!(t.scaled_window(O), Some(502 << 7));
            assert_eq!((t.in_flight(O), t.in_flight(R)), (Some(0), Some(0)));
            assert!(!t.fin(O) && !t.rst(R));
        }
    }

    #[test]
    fn window_scale_only_when_both_offer_it() {
        let mut t = TcpConn::new();
        linux_handshake(&mut t, false, (Some(7), None));
        assert_eq!(t.offered_window_scale(O), Some(7));
        assert_eq!(t.offered_window_scale(R), None);
        assert_eq!((t.window_scale(O), t.window_scale(R)), (None, None));
        // No scaling in force: the window is taken as it is.
        assert_eq!(t.scaled_window(O), Some(502));

        let mut t = TcpConn::new();
        linux_handshake(&mut t, false, (None, Some(7)));
        assert_eq!(t.window_scale(R), None);
        assert_eq!(t.scaled_window(O), Some(502));

        // A shift above 14 counts as 14 (RFC 7323 §2.3).
        let mut t = TcpConn::new();
        linux_handshake(&mut t, false, (Some(15), Some(3)));
        assert_eq!((t.window_scale(O), t.window_scale(R)), (Some(14), Some(3)));
        assert_eq!(t.scaled_window(O), Some(502 << 14));

        // SACK and timestamps need both sides as well.
        let mut t = TcpConn::new();
        let mut a = seg(SYN, 1, 0, 0);
        a.sack_permitted = true;
        a.timestamps = Some((1, 0));
        t.observe(O, &a, ms(0));
        t.observe(R, &seg(SYNACK, 50, 2, 0), ms(1));
        assert!(t.offered_sack(O) && !t.sack_permitted());
        assert!(t.offered_timestamps(O) && !t.timestamps());
        assert_eq!(t.mss(O), None);
    }

    #[test]
    fn midstream_pickup_leaves_the_handshake_unknown() {
        let mut t = TcpConn::new();
        t.observe(O, &seg(ACK, 5000, 100, 1000), ms(0));
        t.observe(R, &seg(ACK, 100, 6000, 0), ms(10));
        assert!(!t.handshake_seen());
        assert_eq!(t.phase(), TcpPhase::Established);
        assert_eq!(t.window_scale(O), None);
        assert_eq!(t.scaled_window(O), None, "the scale is unknown");
        assert_eq!(t.mss(O), None);
        assert_eq!(t.handshake_rtt(R), None);
        // Data/ACK matching works without a handshake.
        assert_eq!(t.rtt_min(R), dms(10));
        assert_eq!(t.next_seq(O), Some(6000));
    }

    #[test]
    fn handshake_rtt_halves() {
        let mut t = TcpConn::new();
        linux_handshake(&mut t, false, (Some(7), Some(7)));
        assert_eq!(t.handshake_rtt(R), dms(10), "SYN -> SYN-ACK");
        assert_eq!(t.handshake_rtt(O), dms(20), "SYN-ACK -> ACK");
        assert_eq!(t.handshake_rtt_total(), dms(30));
        assert_eq!(t.rtt_min_total(), dms(30));
        assert_eq!(t.srtt_total(), dms(30));

        // Without timestamps: the same from sequence numbers.
        let mut t = TcpConn::new();
        t.observe(O, &seg(SYN, u32::MAX, 0, 0), ms(0));
        t.observe(R, &seg(SYNACK, 77, 0, 0), ms(10));
        t.observe(O, &seg(ACK, 0, 78, 0), Instant(30_000_999));
        assert_eq!(t.handshake_rtt(R), dms(10));
        assert_eq!(t.handshake_rtt(O), dms(20), "µs resolution");
        assert_eq!(t.next_seq(O), Some(0), "SYN counts one, across the wrap");
    }

    #[test]
    fn timestamp_rtt() {
        let mut t = TcpConn::new();
        linux_handshake(&mut t, false, (Some(7), Some(7)));
        let data = |seq, (tsval, tsecr)| Segment {
            flags: ACK,
            seq,
            ack: 9001,
            window: 500,
            payload_len: 1000,
            timestamps: Some((tsval, tsecr)),
            ..Segment::default()
        };
        let ackr = |ack, (tsval, tsecr)| Segment {
            flags: ACK,
            seq: 9001,
            ack,
            window: 500,
            timestamps: Some((tsval, tsecr)),
            ..Segment::default()
        };
        // The handshake's ACK (TSval 530, first appearance) is being timed; R never
        // echoes 530 because it sends nothing before O's data (TSval 600) arrives.
        assert!(t.timing_pending(O));
        assert_eq!(
            t.observe(O, &data(1001, (600, 7000)), ms(100)),
            Observed::default()
        );
        // R's ACK echoes 600, a later TSval than the timed 530: no sample, timing dropped.
        let r = t.observe(R, &ackr(2001, (7040, 600)), ms(140));
        assert_eq!(r.rtt_sample, None);
        assert!(!t.timing_pending(O));
        // R's ACK had a new TSval (7040): timed; O's next data echoes it 5 ms later.
        assert!(t.timing_pending(R));
        let o = t.observe(O, &data(2001, (650, 7040)), ms(145));
        assert_eq!(o.rtt_sample, dms(5));
        // end to end: 5 ms + the reply half's srtt, 10 ms
        assert_eq!(o.rtt_total, dms(15));
        assert_eq!(t.rtt_min(O), dms(5));
        // O's 650 is timed at 145 ms; the next segment with the same TSval is not a first
        // appearance and is not timed (it would shorten the sample).
        t.observe(O, &data(3001, (650, 7040)), ms(146));
        let r = t.observe(R, &ackr(4001, (7080, 650)), ms(185));
        assert_eq!(r.rtt_sample, dms(40));
        // O's srtt: 20 ms, then 20 + (5 - 20) / 8 = 18.125 ms; 40 + 18.125
        assert_eq!(r.rtt_total, Some(Duration::from_micros(58_125)));
        assert_eq!(
            t.rtt_min(R),
            dms(10),
            "the handshake's 10 ms is still the minimum"
        );
        // srtt: 10 ms, then 10 + (40 - 10) / 8 = 13.75 ms.
        assert_eq!(t.srtt(R), Some(Duration::from_micros(13_750)));
        assert_eq!(t.handshake_rtt(R), dms(10));
        // A retransmission with timestamps answers R's timing and is itself timed (its
        // TSval is new): timestamps make retransmissions unambiguous.
        let o = t.observe(O, &data(1001, (700, 7080)), ms(190));
        assert!(o.retransmission && !o.ambiguous);
        assert_eq!(o.rtt_sample, dms(5));
        assert!(t.timing_pending(O));
        // An echo of an older TSval leaves the timing alone; the echo of 700 ends it.
        assert_eq!(
            t.observe(R, &ackr(4001, (7100, 650)), ms(200)).rtt_sample,
            None
        );
        assert!(t.timing_pending(O));
        assert_eq!(
            t.observe(R, &ackr(4001, (7110, 700)), ms(220)).rtt_sample,
            dms(30)
        );
        assert_eq!(t.rtt_min_total(), dms(15));
        // Sequence-based matching is not used once both sides send timestamps: an ACK
        // covering new data without the matching echo is no sample.
        t.observe(O, &data(4001, (800, 7110)), ms(300));
        assert_eq!(
            t.observe(R, &ackr(5001, (7200, 790)), ms(310)).rtt_sample,
            None
        );
    }

    #[test]
    fn karn_no_sample_from_retransmitted_data() {
        let mut t = TcpConn::new();
        t.observe(O, &seg(SYN, 100, 0, 0), ms(0));
        t.observe(R, &seg(SYNACK, 500, 101, 0), ms(10));
        t.observe(O, &seg(ACK, 101, 501, 0), ms(20));
        assert_eq!(t.rtt_min(R), dms(10));
        // Data 101..1101 timed at 100 ms, retransmitted at 300 ms, ACKed at 310 ms: no sample.
        t.observe(O, &seg(ACK, 101, 501, 1000), ms(100));
        assert!(t.timing_pending(O));
        let rx = t.observe(O, &seg(ACK, 101, 501, 1000), ms(300));
        assert!(rx.retransmission && rx.ambiguous);
        assert!(!t.timing_pending(O));
        let a = t.observe(R, &seg(ACK, 501, 1101, 0), ms(310));
        assert_eq!(a.rtt_sample, None);
        assert_eq!(t.rtt_min(R), dms(10));
        // New data is timed again and sampled.
        t.observe(O, &seg(ACK, 1101, 501, 1000), ms(400));
        assert_eq!(
            t.observe(R, &seg(ACK, 501, 2101, 0), ms(425)).rtt_sample,
            dms(25)
        );
        // A partial ACK does not complete the timing; one beyond what was sent is ignored.
        t.observe(O, &seg(ACK, 2101, 501, 1000), ms(500));
        assert_eq!(
            t.observe(R, &seg(ACK, 501, 2600, 0), ms(510)).rtt_sample,
            None
        );
        assert_eq!(
            t.observe(R, &seg(ACK, 501, 9999, 0), ms(511)).rtt_sample,
            None
        );
        assert_eq!(t.max_ack(R), Some(9999));
        assert_eq!(
            t.observe(R, &seg(ACK, 501, 3101, 0), ms(530)).rtt_sample,
            dms(30)
        );

        // A retransmitted SYN gives no handshake sample for the reply side.
        let mut t = TcpConn::new();
        t.observe(O, &seg(SYN, 100, 0, 0), ms(0));
        let rx = t.observe(O, &seg(SYN, 100, 0, 0), ms(1000));
        assert!(rx.ambiguous);
        assert_eq!(
            t.observe(R, &seg(SYNACK, 500, 101, 0), ms(1010)).rtt_sample,
            None
        );
        assert_eq!(
            t.observe(O, &seg(ACK, 101, 501, 0), ms(1030)).rtt_sample,
            dms(20)
        );
        assert_eq!(t.handshake_rtt(R), None);
        assert_eq!(t.handshake_rtt(O), dms(20));
        assert_eq!(t.handshake_rtt_total(), None);
    }

    #[test]
    fn sequence_wraparound() {
        const W: u64 = 1 << 32;
        let isn = (W - 1501) as u32;
        let mut t = TcpConn::new();
        t.observe(O, &seg(SYN, isn, 0, 0), ms(0));
        t.observe(R, &seg(SYNACK, 7, isn.wrapping_add(1), 0), ms(1));
        t.observe(O, &seg(ACK, isn.wrapping_add(1), 8, 0), ms(2));
        // 1000 bytes up to 2^32 - 500, then 1000 across the wrap, ending at 500.
        t.observe(O, &seg(ACK, isn.wrapping_add(1), 8, 1000), ms(10));
        assert_eq!(t.next_seq(O), Some((W - 500) as u32));
        t.observe(O, &seg(ACK, (W - 500) as u32, 8, 1000), ms(11));
        assert_eq!(t.next_seq(O), Some(500));
        assert_eq!(t.in_flight(O), Some(2000));
        // A retransmission from before the wrap does not move next_seq back.
        let rx = t.observe(O, &seg(ACK, isn.wrapping_add(1), 8, 1000), ms(12));
        assert!(rx.retransmission);
        assert_eq!(t.next_seq(O), Some(500));
        // The first segment (timed at 10 ms) is acknowledged across the wrap.
        t.observe(R, &seg(ACK, 8, 500, 0), ms(20));
        assert_eq!(t.max_ack(R), Some(500));
        assert_eq!(t.in_flight(O), Some(0));
        // ...but the retransmission cancelled that timing: only the handshake sample.
        assert_eq!(t.rtt_min(R), dms(1));
        // An older ACK does not lower max_ack.
        t.observe(R, &seg(ACK, 8, (W - 500) as u32, 0), ms(21));
        assert_eq!(t.max_ack(R), Some(500));
        // New data after the wrap is timed and sampled.
        t.observe(O, &seg(ACK, 500, 8, 100), ms(30));
        assert_eq!(
            t.observe(R, &seg(ACK, 8, 600, 0), ms(37)).rtt_sample,
            dms(7)
        );
        assert!(seq_lt(u32::MAX, 0) && seq_gt(0, u32::MAX) && seq_le(5, 5) && seq_ge(5, 5));
    }

    #[test]
    fn fin_rst_and_reuse() {
        let mut t = TcpConn::new();
        t.observe(O, &seg(SYN, 1, 0, 0), ms(0));
        assert_eq!(t.phase(), TcpPhase::Opening);
        t.observe(R, &seg(SYNACK, 1, 2, 0), ms(1));
        assert_eq!(t.phase(), TcpPhase::Opening);
        t.observe(O, &seg(ACK, 2, 2, 0), ms(2));
        assert_eq!(t.phase(), TcpPhase::Established);
        let fin = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
        t.observe(O, &seg(fin, 2, 2, 0), ms(3));
        assert!(t.fin(O));
        assert_eq!(t.next_seq(O), Some(3), "FIN counts one");
        assert_eq!(t.phase(), TcpPhase::Closing);
        t.observe(R, &seg(fin, 2, 3, 0), ms(4));
        assert_eq!(t.phase(), TcpPhase::Closed);
        // A new SYN on the closed 5-tuple starts over.
        let r = t.observe(O, &seg(SYN, 1000, 0, 0), ms(5));
        assert!(r.reopened);
        assert_eq!(t.phase(), TcpPhase::Opening);
        assert_eq!(t.next_seq(O), Some(1001));
        assert_eq!(t.next_seq(R), None);
        assert_eq!(t.handshake_rtt(R), None);
        // RST closes and cancels timings.
        assert!(t.timing_pending(O));
        t.observe(R, &seg(TcpFlags::RST, 0, 0, 0), ms(6));
        assert!(t.rst(R));
        assert!(!t.timing_pending(O));
        assert_eq!(t.phase(), TcpPhase::Closed);
    }

    #[test]
    fn samples_too_long_are_dropped() {
        let mut t = TcpConn::new();
        t.observe(O, &seg(ACK, 1, 1, 100), ms(0));
        let r = t.observe(R, &seg(ACK, 1, 101, 0), Instant(61_000_000_000));
        assert_eq!(r.rtt_sample, None);
        assert!(!t.timing_pending(O));
        t.observe(O, &seg(ACK, 101, 1, 100), ms(0));
        t.cancel_timings();
        assert!(!t.timing_pending(O));
    }
}
