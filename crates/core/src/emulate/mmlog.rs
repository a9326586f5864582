//! An emulated link's per-packet log in Mahimahi's `mm-link` format (`--uplink-log`,
//! `--downlink-log`; Netravali et al., "Mahimahi", USENIX ATC 2015; the format is
//! `src/frontend/link_queue.cc`), so that `mm-throughput-graph`, `mm-delay-graph` and
//! `weir mm-graph` read what `weir emu` did.
//!
//! The format: five header lines starting with `#` (the link and its trace, the command
//! line, the queue as `mm-link` describes it, the init timestamp — Unix ms when the clock
//! started — and the base timestamp — the ms, on that clock, at which the link's capacity
//! begins; readers subtract it), then one line per event, times in whole ms on the clock:
//!
//! | line | event |
//! |---|---|
//! | `T + BYTES` | a packet reaches the link's queue (after the loss model: a lost packet never reaches it, as with `mm-loss` outside `mm-link`) |
//! | `T # BYTES` | a delivery opportunity: a trace's 1500 bytes; for a fixed rate or a schedule, the bytes the rate carries in that ms |
//! | `T - BYTES DELAY` | a packet leaves the link (its serialisation ends) after DELAY ms in it (queue and serialisation; `T − DELAY` is its arrival ms) |
//! | `T d PACKETS BYTES` | packets the queue dropped (a full drop-tail queue's arrival, a drop-head queue's oldest) |
//!
//! Sizes are what the link's serialiser charges ([`EmuLink`]'s `charged`: a trace's IP
//! packet, as `mm-link` counts it; a rate's framed frame), so capacity and throughput in
//! one log are in the same bytes. Capacity lines start at the base: a trace's origin (its
//! first frame, where weir starts playing it) or, for a fixed rate, the first event; a
//! trace played once has none after its last opportunity.
//!
//! The writer is sans-IO: [`MmLogWriter::flush`] appends text for the events recorded up
//! to an instant, in time order (the link records departures when their frame retires, so
//! a flush holds back the last few ms: a frame read late may carry an earlier arrival
//! time). Invariants: no line is before the base timestamp, and no departure's `T −
//! DELAY` either (readers check it); lines are written in non-decreasing time order within a flush and
//! across flushes (events before the previous flush's horizon that arrive late are written
//! at that horizon's ms, never earlier); every recorded event is written exactly once by
//! the final flush.

use super::capacity::TRACE_MTU;
use super::{Capacity, EmuConfig, EmuLink, QueueDrop};
use crate::queue::fifo::Limits;
use crate::time::Instant;
use std::fmt::Write;

/// One event of a link (times in ns on the engine's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    Arrival { ns: u64, bytes: u32 },
    Departure { ns: u64, bytes: u32, delay_ns: u64 },
    Drop { ns: u64, bytes: u32 },
}

impl LinkEvent {
    pub fn ns(&self) -> u64 {
        match *self {
            LinkEvent::Arrival { ns, .. }
            | LinkEvent::Departure { ns, .. }
            | LinkEvent::Drop { ns, .. } => ns,
        }
    }
}

/// What the header says besides the times.
#[derive(Clone, Debug)]
pub struct LogHead {
    /// `Uplink` or `Downlink`, as `mm-link` names them.
    pub link: String,
    /// The trace file, or the rate (`10Mbit`).
    pub source: String,
    /// The log's own path.
    pub path: String,
    pub command_line: String,
    /// The engine clock's instant (ns, a whole ms) that the log's times count from, and
    /// its Unix time in ms (the init timestamp).
    pub zero_ns: u64,
    pub init_unix_ms: u64,
}

/// Bytes a trace opportunity delivers, as the `#` line says.
const OPPORTUNITY: u64 = TRACE_MTU;
const MS: u64 = 1_000_000;

/// How long a flush holds back events (a frame read late may carry an earlier arrival).
pub const HOLD_BACK_NS: u64 = 20 * MS;

/// Writes one link's log (see the module comment).
#[derive(Debug)]
pub struct MmLogWriter {
    head: LogHead,
    /// The base timestamp (ms) once the header is written.
    base_ms: Option<u64>,
    pending: Vec<LinkEvent>,
    /// Next trace opportunity (index over repeated periods) or next ms of a rate's
    /// capacity, and a rate's carried-over fraction (bit/s × ms, per 8000 a byte).
    next: u64,
    carry: u64,
    /// Time (ns) up to which lines were written.
    written_to: u64,
    lines: Vec<(u64, u8, String)>,
    /// The capacity the lines follow (trace or schedule, rate, origin): when it changes
    /// (`weir emu set`, a reload, a trace's first frame) they start over from it.
    cap_key: Option<(Option<Capacity>, Option<u64>, Option<u64>)>,
}

/// Most capacity lines one flush writes (a quarter of a second is 250 of a rate's): a
/// longer gap is skipped, not written line by line on the forwarding thread.
const MAX_CAPACITY_LINES: u64 = 100_000;

impl MmLogWriter {
    pub fn new(head: LogHead) -> Self {
        MmLogWriter {
            head,
            base_ms: None,
            pending: Vec::new(),
            next: 0,
            carry: 0,
            written_to: 0,
            lines: Vec::new(),
            cap_key: None,
        }
    }

    /// The events the link recorded since the last call (see [`EmuLink::take_log`]).
    pub fn pending(&mut self) -> &mut Vec<LinkEvent> {
        &mut self.pending
    }

    /// Append to `out` the lines of every event before `now − HOLD_BACK_NS` (every event,
    /// when `last`) and the link's capacity up to the same instant; the header first,
    /// once the base is known. `link` is the link the events came from (its configuration
    /// and origin give the capacity).
    pub fn flush(&mut self, link: &EmuLink, now: Instant, last: bool, out: &mut String) {
        self.pending.sort_by_key(LinkEvent::ns);
        let horizon = if last {
            self.pending
                .last()
                .map_or(now.0, |e| e.ns().max(now.0))
                .saturating_add(1)
        } else {
            now.0.saturating_sub(HOLD_BACK_NS)
        };
        let cfg = link.config();
        let base_ns = match self.base_ms {
            Some(b) => b * MS,
            None => {
                let first = self.pending.first().map(LinkEvent::ns);
                let Some(base) = link.origin().or(first) else {
                    return;
                };
                let base_ms = base / MS;
                // the log's times count from the clock's zero or the base, whichever is
                // first (a frame the ring held from before weir's clock started is older)
                let zero_ms = self.head.zero_ns / MS;
                if base_ms < zero_ms {
                    self.head.zero_ns = base_ms * MS;
                    self.head.init_unix_ms =
                        self.head.init_unix_ms.saturating_sub(zero_ms - base_ms);
                }
                self.base_ms = Some(base_ms);
                self.written_to = base_ms * MS;
                self.header(cfg, base_ms, out);
                base
            }
        };
        if horizon <= self.written_to {
            return;
        }
        self.capacity(link, cfg, base_ns, horizon);
        let keep = self.pending.partition_point(|e| e.ns() < horizon);
        let events: Vec<LinkEvent> = self.pending.drain(..keep).collect();
        for e in events {
            // an event older than what was written goes at the written horizon's ms
            let at = e.ns().max(self.written_to);
            let line = match e {
                LinkEvent::Arrival { bytes, .. } => format!("{} + {bytes}", self.ms(at)),
                LinkEvent::Departure {
                    bytes, delay_ns, ..
                } => {
                    // never before the base: a frame whose kernel timestamp is a little
                    // older than the first frame's (read from another CPU's queue)
                    let arrival = at.saturating_sub(delay_ns).max(base_ns / MS * MS);
                    format!("{} - {bytes} {}", self.ms(at), at / MS - arrival / MS)
                }
                LinkEvent::Drop { bytes, .. } => format!("{} d 1 {bytes}", self.ms(at)),
            };
            self.lines.push((at, 1, line));
        }
        self.lines.sort_by_key(|l| (l.0, l.1));
        for (_, _, l) in self.lines.drain(..) {
            out.push_str(&l);
            out.push('\n');
        }
        self.written_to = horizon;
    }

    /// The log's ms for an instant (ns on the engine clock).
    fn ms(&self, ns: u64) -> u64 {
        (ns / MS).saturating_sub(self.head.zero_ns / MS)
    }

    fn header(&self, cfg: &EmuConfig, base_ms: u64, out: &mut String) {
        let h = &self.head;
        let _ = writeln!(
            out,
            "# mahimahi mm-link ({}) [{}] > {}",
            h.link, h.source, h.path
        );
        let _ = writeln!(out, "# command line: {}", h.command_line);
        let _ = writeln!(out, "# queue: {}", queue_desc(cfg));
        let _ = writeln!(out, "# init timestamp: {}", h.init_unix_ms);
        let _ = writeln!(out, "# base timestamp: {}", self.ms(base_ms * MS));
    }

    /// Capacity lines from where the last flush stopped up to `horizon` (ns).
    fn capacity(&mut self, link: &EmuLink, cfg: &EmuConfig, base_ns: u64, horizon: u64) {
        let key = (cfg.capacity.clone(), cfg.rate_bps, link.origin());
        if self.cap_key.as_ref() != Some(&key) {
            // a new capacity: a trace from its first opportunity, a rate from what was
            // written (a fixed rate's from the first event's ms)
            self.next = match cfg.capacity {
                Some(Capacity::Trace(_)) => 0,
                _ => self.written_to / MS,
            };
            self.carry = 0;
            self.cap_key = Some(key);
        }
        let last = self.next.saturating_add(MAX_CAPACITY_LINES);
        match (&cfg.capacity, cfg.rate_bps) {
            (Some(Capacity::Trace(ms)), _) => {
                let Some(origin) = link.origin() else {
                    return;
                };
                let n = ms.len() as u64;
                let period = *ms.last().unwrap_or(&1);
                while self.next < last {
                    if cfg.once && self.next >= n {
                        break;
                    }
                    let k = self.next;
                    let at = ((k / n).saturating_mul(period) + ms[(k % n) as usize])
                        .saturating_mul(MS)
                        .saturating_add(origin);
                    if at >= horizon {
                        break;
                    }
                    let line = format!("{} # {OPPORTUNITY}", self.ms(at));
                    self.lines.push((at, 0, line));
                    self.next += 1;
                }
            }
            (Some(Capacity::Schedule(points)), _) => {
                let origin = link.origin().unwrap_or(base_ns);
                while (self.next + 1) * MS <= horizon && self.next < last {
                    let t = (self.next * MS).saturating_sub(origin);
                    let i = points.partition_point(|p| p.0 <= t).saturating_sub(1);
                    self.rate_ms(points[i].1);
                }
            }
            (None, Some(bps)) => {
                while (self.next + 1) * MS <= horizon && self.next < last {
                    self.rate_ms(bps);
                }
            }
            (None, None) => {}
        }
    }

    /// One ms of a rate of `bps`: the whole bytes it carries, the fraction carried over.
    fn rate_ms(&mut self, bps: u64) {
        self.carry += bps;
        let bytes = self.carry / 8000;
        self.carry -= bytes * 8000;
        if bytes > 0 {
            let at = self.next * MS;
            let line = format!("{} # {bytes}", self.ms(at));
            self.lines.push((at, 0, line));
        }
        self.next += 1;
    }
}

/// The queue as `mm-link` describes it: `infinite`, or `droptail [bytes=N, packets=M]` /
/// `drophead [...]` with the limits in force.
pub fn queue_desc(cfg: &EmuConfig) -> String {
    let l = cfg.limits();
    if cfg.sizing_bps().is_none() || l == Limits::UNLIMITED {
        return "infinite".into();
    }
    let kind = match (cfg.codel, cfg.queue_drop) {
        (Some(_), _) => "codel",
        (None, QueueDrop::Tail) => "droptail",
        (None, QueueDrop::Head) => "drophead",
    };
    let mut args = Vec::new();
    if l.bytes != Limits::UNLIMITED_BYTES {
        args.push(format!("bytes={}", l.bytes));
    }
    if l.packets != Limits::UNLIMITED_PACKETS {
        args.push(format!("packets={}", l.packets));
    }
    format!("{kind} [{}]", args.join(", "))
}

#[cfg(test)]
mod tests;
