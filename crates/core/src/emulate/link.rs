//! `EmuLink`: a qdisc that emulates one WAN link — loss, corruption and duplication on
//! arrival, a drop-tail queue in front of a serialiser running at the link rate, and a
//! delay line with optional jitter and reordering.
//!
//! This is the transparent delay node of seed 002 (Chertov & Almeroth, "High-Fidelity Link
//! Shaping", Fig. 1: a rate limiter, then a delay, with the queue sized to the
//! bandwidth-delay product) combined with the per-session impairments of seed 000's
//! wan-emu (delay, jitter, random/periodic loss) and Linux netem's duplication, corruption
//! and reordering. Fidelity is the point: the serialiser keeps time in picoseconds, so
//! back-to-back frames leave one transmission time apart without drift (1518-byte frames
//! at 155 Mbit/s: gaps of 78 348 or 78 349 ns, 78.348 387 µs on average; each frame's time
//! is `Rate::tx_ps`, short of the exact rational by less than 1 ps — 10 ns over 100 000
//! such frames, where a nanosecond serialiser would be off by up to 100 µs), and the only
//! losses are the configured ones and genuine queue overflows.
//!
//! ```text
//!  enqueue ─► loss? ──► queue limit? ─┬─► serialiser ─► delay line ─► slots? ─► dequeue
//!         ecn: mark CE │ Err(QueueFull/ByteLimit)  (rate)  (delay ± jitter)   ▲
//!               │ Err(Emulated)       └─► reorder: sent at once ──────────────┘
//!               admitted ─► duplicate? (a copy: queue limit, serialiser, delay line)
//!                        └► corrupt? (original and copy, independently)
//! ```
//!
//! Model, per arriving packet of `len` bytes at time `now` (ns):
//! 1. Loss ([`super::loss`]): the link's loss model decides; a lost packet is refused with
//!    [`DropCause::Emulated`] and never occupies the queue or the link (loss on arrival,
//!    as netem). With `ecn` (netem's `ecn`), a packet the model loses is marked CE instead
//!    when it is ECN-capable ([`crate::aqm::mark_signal`], the one marking rule; counted
//!    in `ecn_marked`), sent unchanged when its headers cannot be read
//!    (`ecn_unmarkable`), and lost only when it is not ECN-capable.
//! 2. Queue: frames that have been admitted but whose serialisation has not started are
//!    the queue; the frame being serialised does not count (it has left the queue, as a
//!    frame handed to a NIC has). The arrival is refused with [`DropCause::QueueFull`] if
//!    `limit_packets` frames wait, or [`DropCause::ByteLimit`] if `waiting bytes + len >
//!    limit_bytes` ([`crate::queue::fifo::Limits::admit`]). netem's own `limit`
//!    (`limit_held`) counts every packet the link holds, the delay line included (netem's
//!    `sch->q.qlen >= sch->limit`), and refuses an arrival with `QueueFull` when that many
//!    are held; it applies with or without a rate.
//! 3. Serialiser (only with a rate): the frame starts at `max(now, busy_until)` and ends
//!    `rate.tx_ps(len)` picoseconds later (the framing applied); `busy_until` is
//!    kept as ns plus a picosecond remainder, so rounding never accumulates. The frame's
//!    last bit leaves at the end time rounded *up* to a whole ns. Without a rate the
//!    serialiser takes no time and the queue is always empty.
//! 4. Delay line: `release = tx_end + max(0, delay + jitter sample)`
//!    ([`super::dist::delay_with`]). With `reorder = false` (default) `release =
//!    max(release, previous release)`, so a packet never overtakes an earlier one and the
//!    line is a FIFO (jitter then only stretches gaps, as on a real path with one queue);
//!    with `reorder = true` packets leave in release-time order (ties in arrival order),
//!    so a large jitter reorders them, as netem with jitter does. Jitter offsets are
//!    independent, or correlated (`jitter_correlation`, [`super::corr::Ar1`]).
//!    netem's `reorder P C gap N` (`reorder_early`): after `N − 1` packets scheduled
//!    normally, each packet is with probability `P` (correlated, [`super::corr::Chance`])
//!    released at its arrival instead, skipping the serialiser, the delay and the slots,
//!    ahead of everything in the delay line (netem puts it at the head of its queue); one
//!    sent early restarts the count (`sch_netem.c`: `q->counter`, `q->gap`). Those packets
//!    wait in a FIFO of their own (`counters.reordered`).
//!    Slots (`slot`, [`super::slot`]): the delay line's head leaves only when a slot is
//!    open, at most `packets`/`bytes` per slot.
//! 5. Duplication: with probability `duplicate` (correlated by `duplicate_correlation`)
//!    an admitted packet is copied (metadata and
//!    stored bytes, as it arrived) into a new slot of `cx.pool`; the copy is a new arrival
//!    of the same length right behind the original that skips the loss model (a lost or
//!    refused packet is never duplicated) but gets its own queue admission, serialisation,
//!    jitter sample and corruption draw. If the pool is empty the copy is skipped and
//!    counted in `dup_pool_empty`; a copy the queue refuses is freed by the link and
//!    counted as a queue drop.
//! 6. Corruption: with probability `corrupt` (correlated by `corrupt_correlation`) one
//!    random bit of an admitted packet's stored
//!    frame is flipped ([`super::loss::corrupt`]), independently for the original and its
//!    copy; with no stored bytes (simulator pools) the event is only counted.
//!
//! Because all times are known on arrival, the release time is computed in `enqueue`; the
//! serialiser finishing a frame is not a separate event (release ≥ tx_end always).
//! `next_wakeup()` is the release time of the delay line's head (the earliest packet), `None`
//! when empty; `dequeue` returns the head when `release <= now`.
//!
//! Parameters ([`EmuConfig`], all optional; units in brackets): `rate_bps` [bit/s, ≥ 8,
//! default none = infinitely fast], `framing` [[`crate::framing::Framing`]: bytes added to
//! each frame's `Meta::len` for serialisation, ±4096, default 0 — `Meta::len` excludes the
//! FCS, so 4 gives seed 002's frame sizes ([`OVERHEAD_FCS`]) and 24 = FCS 4 + preamble 7 +
//! SFD 1 + inter-frame gap 12 gives the true occupancy of an Ethernet line
//! ([`OVERHEAD_ETHERNET`]) — and a minimum packet unit, ATM cells or PTM coding], `mtu` [bytes,
//! default 1514], `delay` [ns, ≤ 1 h, default 0], `jitter` [[`super::Jitter`], default
//! none], `reorder` [default false], `loss` [[`super::LossModel`], default none],
//! `duplicate` and `corrupt` [probabilities, default 0], `limit_packets` / `limit_bytes`
//! [default: see [`EmuConfig::limits`]: with a rate and a delay, the bandwidth-delay
//! product `rate × delay / 8` bytes but at least 2 MTU (seed 002); with a rate only, 1000
//! packets (netem's default limit); without a rate, unlimited — nothing ever waits].
//! The delay line itself is not limited (packets "on the wire"); the packet pool bounds it.
//!
//! Statistics: [`EmuLink::stats`] is a full [`QStats`] kept by the link itself in which each
//! duplicate counts as a received packet (so `received = enqueued + dropped_on_enqueue`
//! and `enqueued = dequeued + dropped_later + queued` always hold: [`EmuLink::check`]), and
//! [`EmuCounters`] has the emulation events: lost, duplicated, corrupted, queue drops, the
//! largest queue seen. A [`crate::Counted`] wrapper around the link sees only the original
//! packets, so its identities hold exactly when `duplicate == 0`; with duplication its
//! `enqueued + counters.dup_admitted = dequeued + dropped_later + queued`, and its
//! `held()` (`enqueued − dequeued − dropped_later`, unsigned) is wrong and can underflow:
//! do not put a duplicating link under a parent that reads `Counted::held`; use the link's
//! own statistics instead. The realised delays and inter-frame gaps are for the testbed to
//! measure, not counted here.
//!
//! Invariants: `len()`/`bytes()` are the packets held in the delay line (every admitted,
//! not yet dequeued packet); with `reorder = false` release times are non-decreasing in
//! FIFO order; a packet is never released before its serialisation ends; no allocation per
//! packet in steady state (the delay line, the serialiser's ring and the copy buffer grow
//! to their high-water marks and are reused); no panic on any input (frame lengths above
//! 2^20 bytes are costed as 2^20; times saturate). Run-time reconfiguration
//! ([`EmuLink::reconfigure`]) keeps every held packet with its release time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;

use super::corr::{Ar1, Chance};
use super::dist::delay_with;
use super::loss::{corrupt, Loss};
use super::mmlog::LinkEvent;
use super::slot::SlotState;
use super::{EmuConfig, EmuError, QueueDrop};
use crate::aqm::{mark_signal, Delivered};
use crate::meter::token_bucket::MAX_FRAME;
use crate::pool::PktId;
use crate::qdisc::{Count, Ctx, DropCause, QStats, Qdisc};
use crate::queue::fifo::Limits;
use crate::rate::Rate;
use crate::time::Instant;

/// Per-frame overhead that turns `Meta::len` (no FCS) into seed 002's frame size (FCS
/// included): 4 bytes.
pub const OVERHEAD_FCS: i32 = 4;
/// Per-frame overhead for the full occupancy of an Ethernet line: FCS 4 + preamble 7 +
/// start-of-frame delimiter 1 + minimum inter-frame gap 12 = 24 bytes.
pub const OVERHEAD_ETHERNET: i32 = 24;

/// Initial capacity of the delay line (it grows to its high-water mark if needed).
const INITIAL_LINE: usize = 256;

/// Emulation events of one link (see the module comment).
#[derive(Clone, Default, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct EmuCounters {
    /// Packets the loss model lost (refused with `DropCause::Emulated`).
    pub lost: Count,
    /// Copies made (admitted or not).
    pub duplicated: Count,
    /// Copies admitted into the queue (the correction to a `Counted` wrapper's identity).
    pub dup_admitted: Count,
    /// Copies not made because the packet pool was empty.
    pub dup_pool_empty: u64,
    /// Admitted packets (originals and copies) chosen for corruption.
    pub corrupted: Count,
    /// Of those, packets with no stored bytes to flip (counted only).
    pub corrupted_no_data: u64,
    /// Packets (originals and copies) refused by the queue limits.
    pub queue_drops: Count,
    /// Largest number of packets waiting for the serialiser.
    pub max_queue_packets: u64,
    /// Largest number of bytes waiting for the serialiser.
    pub max_queue_bytes: u64,
    /// How long the admitted frames waited for the serialiser (the queueing delay).
    #[serde(default)]
    pub queue_delay: QueueDelay,
    /// Packets the loss model chose that were marked CE instead (`ecn`).
    #[serde(default)]
    pub ecn_marked: Count,
    /// Packets the loss model chose, with `ecn`, whose headers could not be read: sent
    /// unchanged.
    #[serde(default)]
    pub ecn_unmarkable: u64,
    /// Packets sent at once by netem's `reorder` (ahead of the delayed ones).
    #[serde(default)]
    pub reordered: Count,
    /// Slots opened (`slot`).
    #[serde(default)]
    pub slots: u64,
    /// Frames the queue's CoDel dropped (`mm-link --…-queue=codel`).
    #[serde(default)]
    pub aqm_drops: Count,
    /// Frames the queue's CoDel marked CE instead (`ecn`).
    #[serde(default)]
    pub aqm_marks: Count,
}

/// Running totals of the queueing delay of the frames a link admitted: each frame's wait
/// from its arrival to the start of its serialisation, known on arrival. Differences
/// of two readings give the mean over the interval between them.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct QueueDelay {
    pub frames: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
}

impl QueueDelay {
    #[inline]
    fn add(&mut self, ns: u64) {
        self.frames += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }
}

/// A frame admitted to the serialiser: its arrival, the start (ns and the picoseconds
/// past it) and end (ns, rounded up) of its transmission, its length, and the varying
/// capacity's cursor before it (a drop-head queue serialises the frames after a dropped
/// one again from there).
#[derive(Clone, Debug)]
struct Tx {
    /// The frame, to check it against the delay line's entry (a drop-head or CoDel drop).
    id: PktId,
    arrival: u64,
    start: u64,
    start_ps: u64,
    end: u64,
    len: u32,
    cursor: super::capacity::Cursor,
}

/// One emulated link (see the module comment).
#[derive(Clone, Debug)]
pub struct EmuLink {
    cfg: EmuConfig,
    /// The fixed rate; with a varying capacity, its peak (so that "has a serialiser"
    /// checks hold), the timing then coming from `varying`.
    rate: Option<Rate>,
    /// A varying capacity, where the serialiser is in it, and its origin (the first
    /// frame's start, ns; `None` before it).
    varying: Option<(super::Capacity, super::capacity::Cursor, Option<u64>)>,
    limits: Limits,
    loss: Loss,
    /// The serialiser is busy until `busy_ns` ns + `busy_ps` ps (`busy_ps < 1000`).
    busy_ns: u64,
    busy_ps: u64,
    /// Frames admitted whose transmission has not ended, in order.
    backlog: VecDeque<Tx>,
    backlog_bytes: u64,
    /// Delay line when `reorder == false`: (release ns, packet), release non-decreasing.
    line: VecDeque<(u64, PktId)>,
    /// Delay line when `reorder == true`: min-heap of (release ns, arrival seq, packet).
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    seq: u64,
    last_release: u64,
    /// Packets netem's `reorder` sends at once: (release = arrival ns, packet), in order.
    express: VecDeque<(u64, PktId)>,
    /// `reorder_early`'s draw and its count of packets scheduled since the last early one.
    early: Chance,
    early_count: u32,
    /// Correlated jitter's normal process (`jitter_correlation > 0`).
    delay_corr: Option<Ar1>,
    dup: Chance,
    corrupt: Chance,
    /// The slot process (`slot`).
    slots: Option<SlotState>,
    held_bytes: u64,
    /// Copy buffer for duplication (the pool cannot copy between two of its own slots).
    scratch: Vec<u8>,
    stats: QStats,
    counters: EmuCounters,
    /// The link's events for an `mm-link` log ([`super::mmlog`]), when asked for.
    log: Option<Vec<LinkEvent>>,
    /// The time-varying path's origin (the first frame's arrival, ns) and the loss
    /// schedule's segment in force (`usize::MAX` before the first).
    path_origin: Option<u64>,
    loss_segment: usize,
    /// The queue's CoDel (`EmuConfig::codel`) and its parameters, and how many frames at
    /// the backlog's front it has judged (at their start, their dequeue from the queue).
    codel: Option<(crate::aqm::Codel, crate::aqm::AqmParams)>,
    judged: usize,
}

impl EmuLink {
    /// A link with configuration `cfg`, or the first invalid parameter.
    pub fn new(cfg: EmuConfig) -> Result<Self, EmuError> {
        cfg.validate()?;
        Ok(EmuLink {
            rate: cfg
                .sizing_bps()
                .map(|bps| Rate::with_framing(bps, cfg.framing)),
            varying: cfg.capacity.clone().map(|c| (c, Default::default(), None)),
            limits: cfg.limits(),
            loss: Loss::new(cfg.loss),
            busy_ns: 0,
            busy_ps: 0,
            backlog: VecDeque::with_capacity(Self::backlog_capacity(&cfg)),
            backlog_bytes: 0,
            line: VecDeque::with_capacity(if cfg.reorder { 0 } else { INITIAL_LINE }),
            heap: BinaryHeap::with_capacity(if cfg.reorder { INITIAL_LINE } else { 0 }),
            seq: 0,
            last_release: 0,
            express: VecDeque::new(),
            early: Chance::new(cfg.reorder_early.probability, cfg.reorder_early.correlation),
            early_count: 0,
            delay_corr: Self::delay_corr(&cfg),
            dup: Chance::new(cfg.duplicate, cfg.duplicate_correlation),
            corrupt: Chance::new(cfg.corrupt, cfg.corrupt_correlation),
            slots: cfg.slot.as_ref().map(SlotState::new),
            held_bytes: 0,
            scratch: Vec::new(),
            stats: QStats::default(),
            counters: EmuCounters::default(),
            log: None,
            path_origin: None,
            loss_segment: usize::MAX,
            codel: Self::codel_for(&cfg),
            judged: 0,
            cfg,
        })
    }

    fn delay_corr(cfg: &EmuConfig) -> Option<Ar1> {
        (cfg.jitter_correlation > 0.0)
            .then(|| Ar1::new(cfg.jitter.copula_rho(cfg.jitter_correlation)))
    }

    fn backlog_capacity(cfg: &EmuConfig) -> usize {
        if cfg.sizing_bps().is_none() {
            return 0;
        }
        let l = cfg.limits();
        let by_bytes = l.bytes / 64 + 2;
        (l.packets as u64).min(by_bytes).min(4096) as usize + 1
    }

    pub fn config(&self) -> &EmuConfig {
        &self.cfg
    }

    /// The queue limits in force (defaults resolved).
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The link's own statistics (duplicates count as arrivals).
    pub fn stats(&self) -> &QStats {
        &self.stats
    }

    pub fn counters(&self) -> &EmuCounters {
        &self.counters
    }

    /// The loss model's state.
    pub fn loss_state(&self) -> &Loss {
        &self.loss
    }

    /// Verify the counter identities of [`EmuLink::stats`] against the packets held.
    pub fn check(&self) -> Result<(), String> {
        self.stats.check(Qdisc::len(self), self.held_bytes)
    }

    /// Release time (ns) of the delay line's head (slots not applied), if any.
    #[inline]
    fn line_head(&self) -> Option<u64> {
        if self.cfg.reorder {
            self.heap.peek().map(|r| r.0 .0)
        } else {
            self.line.front().map(|e| e.0)
        }
    }

    /// Release time (ns) of the packet that leaves next, if any: the earlier of the
    /// early packets' head and the delay line's head held for its slot.
    #[inline]
    pub fn head_release(&self) -> Option<u64> {
        let line = self
            .line_head()
            .map(|r| self.slots.as_ref().map_or(r, |s| s.gate(r)));
        let due = match (self.express.front(), line) {
            (Some(&(e, _)), Some(l)) => Some(e.min(l)),
            (Some(&(e, _)), None) => Some(e),
            (None, l) => l,
        };
        // the queue's CoDel judges the next frame when it starts
        match (due, self.judge_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The instant the serialiser finishes everything admitted so far (rounded up to a
    /// whole ns), or `None` without a rate.
    pub fn busy_until(&self) -> Option<Instant> {
        self.rate
            .map(|_| Instant(self.busy_ns.saturating_add((self.busy_ps > 0) as u64)))
    }

    /// Record the link's events for an `mm-link` log ([`EmuLink::take_log`]) or stop.
    pub fn set_logging(&mut self, on: bool) {
        self.log = on.then(Vec::new);
    }

    /// Move the events recorded up to `now` to `out` (departures of the frames whose
    /// serialisation ended by then included); arrivals and drops in the order they
    /// happened, departures when their frame retires (sort by time to interleave).
    pub fn take_log(&mut self, now: Instant, out: &mut Vec<LinkEvent>) {
        if self.log.is_none() {
            return;
        }
        self.retire(now.0);
        if let Some(log) = &mut self.log {
            out.append(log);
        }
    }

    /// Where a varying capacity's time starts (the first frame's start, ns), once known.
    pub fn origin(&self) -> Option<u64> {
        self.varying.as_ref().and_then(|v| v.2)
    }

    /// Whether a trace played once (`once`) has delivered its last opportunity by `now`.
    pub fn played(&self, now: Instant) -> bool {
        match (&self.varying, self.cfg.once) {
            (Some((cap, _, Some(origin))), true) => cap
                .period_ms()
                .is_some_and(|p| now.0 >= origin.saturating_add(p.saturating_mul(1_000_000))),
            _ => false,
        }
    }

    /// Packets and bytes waiting for the serialiser at `now` (the frame being serialised
    /// excluded).
    pub fn queued_at(&self, now: Instant) -> (usize, u64) {
        let mut n = 0;
        let mut b = 0;
        for tx in &self.backlog {
            if tx.start > now.0 {
                n += 1;
                b += tx.len as u64;
            }
        }
        (n, b)
    }

    /// Replace the configuration at run time. Held packets keep their release times (and
    /// leave in release order if `reorder` changes); the serialiser's commitment, the loss
    /// state (when the kind of loss model is unchanged) and the statistics are kept.
    pub fn reconfigure(&mut self, cfg: EmuConfig) -> Result<(), EmuError> {
        cfg.validate()?;
        self.rate = cfg
            .sizing_bps()
            .map(|bps| Rate::with_framing(bps, cfg.framing));
        // a new capacity starts from its origin at the next frame; the same one goes on
        if cfg.capacity != self.cfg.capacity {
            self.varying = cfg.capacity.clone().map(|c| (c, Default::default(), None));
        }
        // a new CoDel starts afresh and judges the frames that wait
        if cfg.codel != self.cfg.codel {
            self.codel = Self::codel_for(&cfg);
            self.judged = 0;
        }
        // a new path starts from its origin at the next frame, as a new capacity
        if cfg.path != self.cfg.path {
            self.path_origin = None;
        }
        // (`set_model` below installs `cfg.loss`: a loss schedule's model in force comes
        // back at the next arrival)
        if cfg.path != self.cfg.path || cfg.path.loss.is_some() {
            self.loss_segment = usize::MAX;
        }
        if self.rate.is_none() {
            // No serialiser any more: nothing waits.
            self.backlog.clear();
            self.backlog_bytes = 0;
        }
        self.limits = cfg.limits();
        self.loss.set_model(cfg.loss);
        self.early
            .set(cfg.reorder_early.probability, cfg.reorder_early.correlation);
        self.early_count = 0;
        self.dup.set(cfg.duplicate, cfg.duplicate_correlation);
        self.corrupt.set(cfg.corrupt, cfg.corrupt_correlation);
        match (&mut self.delay_corr, cfg.jitter_correlation > 0.0) {
            (Some(a), true) => a.set(cfg.jitter.copula_rho(cfg.jitter_correlation)),
            (slot, _) => *slot = Self::delay_corr(&cfg),
        }
        if cfg.slot != self.cfg.slot {
            self.slots = cfg.slot.as_ref().map(SlotState::new);
        }
        if cfg.reorder != self.cfg.reorder {
            if cfg.reorder {
                self.heap.reserve(self.line.len());
                while let Some((rel, id)) = self.line.pop_front() {
                    self.heap.push(Reverse((rel, self.seq, id.0)));
                    self.seq += 1;
                }
            } else {
                self.line.reserve(self.heap.len());
                while let Some(Reverse((rel, _, id))) = self.heap.pop() {
                    self.line.push_back((rel, PktId(id)));
                }
                self.last_release = self.line.back().map_or(0, |e| e.0);
            }
        }
        self.cfg = cfg;
        Ok(())
    }

    /// Drop finished frames from the serialiser's ring.
    #[inline]
    fn retire(&mut self, now: u64) {
        while let Some(tx) = self.backlog.front() {
            // a frame the queue's CoDel has not judged stays (its dequeue is still due)
            if tx.end > now || (self.codel.is_some() && self.judged == 0) {
                break;
            }
            self.judged = self.judged.saturating_sub(1);
            self.backlog_bytes -= tx.len as u64;
            if let Some(log) = &mut self.log {
                log.push(LinkEvent::Departure {
                    ns: tx.end,
                    bytes: charged(&self.cfg, tx.len),
                    delay_ns: tx.end.saturating_sub(tx.arrival),
                });
            }
            self.backlog.pop_front();
        }
    }

    /// Packets and bytes waiting at `now`, after `retire(now)`: the backlog minus the
    /// frame in transmission (only the front can be).
    #[inline]
    fn waiting(&self, now: u64) -> (usize, u64) {
        match self.backlog.front() {
            Some(tx) if tx.start <= now => {
                (self.backlog.len() - 1, self.backlog_bytes - tx.len as u64)
            }
            _ => (self.backlog.len(), self.backlog_bytes),
        }
    }

    /// Admission by the queue limits at `now` (after `retire`).
    #[inline]
    fn admit(&self, now: u64, len: u32) -> Result<(), DropCause> {
        if let Some(held) = self.cfg.limit_held {
            if Qdisc::len(self) >= held as usize {
                return Err(DropCause::QueueFull);
            }
        }
        if self.rate.is_none() {
            return Ok(());
        }
        let (n, b) = self.waiting(now);
        self.limits.admit(n, b, len)
    }

    /// Serialise and delay an admitted packet: compute its release time and put it in the
    /// delay line.
    #[inline]
    fn schedule(&mut self, id: PktId, len: u32, now: u64, cx: &mut Ctx<'_>) {
        if self.send_early(cx) {
            self.express.push_back((now, id));
            self.held_bytes += len as u64;
            self.stats.enqueued.add(len);
            self.counters.reordered.add(len);
            return;
        }
        let tx_end = match self.rate {
            None => {
                // a frame arriving while the path is down waits for it to come up
                let up = match self.path_origin {
                    Some(o) if !self.cfg.path.outages.is_empty() => {
                        o.saturating_add(self.cfg.path.up_at(now.saturating_sub(o)))
                    }
                    _ => now,
                };
                if let Some(log) = &mut self.log {
                    let bytes = charged(&self.cfg, len);
                    log.push(LinkEvent::Departure {
                        ns: up,
                        bytes,
                        delay_ns: up - now,
                    });
                }
                up
            }
            Some(rate) => {
                let (s_ns, s_ps) = if (now, 0) >= (self.busy_ns, self.busy_ps) {
                    (now, 0)
                } else {
                    (self.busy_ns, self.busy_ps)
                };
                let (s_ns, s_ps, cursor) = self.place(rate, s_ns, s_ps, len);
                let end = self.busy_ns.saturating_add((self.busy_ps > 0) as u64);
                self.counters.queue_delay.add(s_ns - now);
                self.backlog.push_back(Tx {
                    id,
                    arrival: now,
                    start: s_ns,
                    start_ps: s_ps,
                    end,
                    len,
                    cursor,
                });
                self.backlog_bytes += len as u64;
                let (n, b) = self.waiting(now);
                self.counters.max_queue_packets = self.counters.max_queue_packets.max(n as u64);
                self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(b);
                end
            }
        };
        let offset = match &mut self.delay_corr {
            Some(ar) if !self.cfg.jitter.is_none() => {
                self.cfg.jitter.sample_normal(ar.next(cx.rng))
            }
            _ => self.cfg.jitter.sample(cx.rng),
        };
        let base = match self.path_origin {
            Some(o) => self
                .cfg
                .path
                .delay_at(tx_end.saturating_sub(o))
                .unwrap_or(self.cfg.delay.0),
            None => self.cfg.delay.0,
        };
        let release = tx_end.saturating_add(delay_with(base, offset));
        if self.cfg.reorder {
            self.heap.push(Reverse((release, self.seq, id.0)));
            self.seq += 1;
        } else {
            let release = release.max(self.last_release);
            self.last_release = release;
            self.line.push_back((release, id));
        }
        self.held_bytes += len as u64;
        self.stats.enqueued.add(len);
    }

    /// Serialise a frame of `len` bytes starting at `s_ns` ns + `s_ps` ps: the serialiser
    /// is busy until its end. Returns the varying capacity's cursor from before it.
    #[inline]
    fn occupy(&mut self, rate: Rate, s_ns: u64, s_ps: u64, len: u32) -> super::capacity::Cursor {
        match &mut self.varying {
            None => {
                let total = s_ps + rate.tx_ps(len.min(MAX_FRAME));
                self.busy_ns = s_ns.saturating_add(total / 1000);
                self.busy_ps = total % 1000;
                Default::default()
            }
            Some((cap, cursor, origin)) => {
                let before = cursor.clone();
                let o = *origin.get_or_insert(s_ns);
                let start = s_ns.saturating_sub(o) as u128 * 1000 + s_ps as u128;
                let end = cursor.serialise(
                    cap,
                    start,
                    len.min(MAX_FRAME),
                    self.cfg.framing,
                    self.cfg.once,
                );
                let end_ns = (end / 1000).min(u64::MAX as u128) as u64;
                self.busy_ns = o.saturating_add(end_ns);
                self.busy_ps = (end % 1000) as u64;
                before
            }
        }
    }

    /// [`EmuLink::occupy`] where the path may be down: a frame that would start in an
    /// outage starts at its end, one an outage would cut starts after it. Returns the
    /// start used and the cursor before the frame.
    #[inline]
    fn place(
        &mut self,
        rate: Rate,
        mut s_ns: u64,
        mut s_ps: u64,
        len: u32,
    ) -> (u64, u64, super::capacity::Cursor) {
        let origin = match self.path_origin {
            Some(o) if !self.cfg.path.outages.is_empty() => o,
            _ => return (s_ns, s_ps, self.occupy(rate, s_ns, s_ps, len)),
        };
        loop {
            let t = s_ns.saturating_sub(origin);
            let up = self.cfg.path.up_at(t);
            if up > t {
                s_ns = origin.saturating_add(up);
                s_ps = 0;
            }
            let cursor = self.occupy(rate, s_ns, s_ps, len);
            let end = self.busy_ns.saturating_add((self.busy_ps > 0) as u64);
            let (t, end) = (s_ns.saturating_sub(origin), end.saturating_sub(origin));
            match self.cfg.path.down_within(t, end) {
                Some(down) => {
                    // cut by an outage: sent again once it is over
                    if let Some((_, c, _)) = &mut self.varying {
                        *c = cursor;
                    }
                    s_ns = origin.saturating_add(self.cfg.path.up_at(down));
                    s_ps = 0;
                }
                None => return (s_ns, s_ps, cursor),
            }
        }
    }

    /// netem's reorder decision (`sch_netem.c` `netem_enqueue`): scheduled normally while
    /// fewer than `gap − 1` packets were since the last early one, or when the draw says
    /// so; otherwise sent early.
    #[inline]
    fn send_early(&mut self, cx: &mut Ctx<'_>) -> bool {
        let r = self.cfg.reorder_early;
        if r.probability <= 0.0 {
            return false;
        }
        if self.early_count < r.gap.saturating_sub(1) || !self.early.fire(cx.rng) {
            self.early_count = self.early_count.saturating_add(1);
            false
        } else {
            self.early_count = 0;
            true
        }
    }

    #[inline]
    fn refuse(&mut self, len: u32, cause: DropCause, now: u64) {
        self.stats.dropped_on_enqueue.add(len);
        self.stats.drops[cause.index()].add(len);
        if cause != DropCause::Emulated {
            self.counters.queue_drops.add(len);
            self.log_event(|cfg| LinkEvent::Drop {
                ns: now,
                bytes: charged(cfg, len),
            });
        }
    }

    /// Record an event when logging.
    #[inline]
    fn log_event(&mut self, ev: impl FnOnce(&EmuConfig) -> LinkEvent) {
        if let Some(log) = &mut self.log {
            log.push(ev(&self.cfg));
        }
    }

    /// Admit a frame of `len` bytes at `now`: by the limits, or, for a drop-head queue,
    /// after dropping the oldest waiting frames until it fits. The refusal is counted.
    #[inline]
    fn admit_or_evict(&mut self, now: u64, len: u32, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        self.log_event(|cfg| LinkEvent::Arrival {
            ns: now,
            bytes: charged(cfg, len),
        });
        loop {
            match self.admit(now, len) {
                Ok(()) => return Ok(()),
                Err(cause) => {
                    if self.cfg.queue_drop == QueueDrop::Head && self.evict_head(now, cause, cx) {
                        continue;
                    }
                    self.refuse(len, cause, now);
                    return Err(cause);
                }
            }
        }
    }

    #[inline]
    fn maybe_corrupt(&mut self, id: PktId, len: u32, cx: &mut Ctx<'_>) {
        if self.cfg.corrupt > 0.0 && self.corrupt.fire(cx.rng) {
            self.counters.corrupted.add(len);
            if !corrupt(cx.pool, id, cx.rng) {
                self.counters.corrupted_no_data += 1;
            }
        }
    }

    /// Make, admit, schedule and maybe corrupt a copy of `orig` (admitted, not yet
    /// corrupted).
    fn duplicate(&mut self, orig: PktId, len: u32, now: u64, cx: &mut Ctx<'_>) {
        // a whole super-packet (only one a reload carried over from a direction that kept
        // it whole can get here) is not copied: its bytes do not fit a packet slot
        if cx.pool.super_packet(orig).is_some() {
            return;
        }
        let Some(copy) = cx.pool.alloc() else {
            self.counters.dup_pool_empty += 1;
            return;
        };
        let meta = cx.pool.meta(orig).clone();
        *cx.pool.meta_mut(copy) = meta;
        self.scratch.clear();
        self.scratch.extend_from_slice(cx.pool.data(orig));
        let n = self.scratch.len();
        cx.pool.slot_mut(copy)[..n].copy_from_slice(&self.scratch);
        self.counters.duplicated.add(len);
        self.stats.received.add(len);
        if self.admit_or_evict(now, len, cx).is_err() {
            cx.pool.free(copy);
            return;
        }
        self.counters.dup_admitted.add(len);
        self.schedule(copy, len, now, cx);
        self.maybe_corrupt(copy, len, cx);
    }
}

impl EmuLink {
    /// Enqueue a packet that reached the link at `at` (≤ `cx.now`; e.g. the kernel's
    /// receive timestamp of a frame the driver read a little later): it is serialised and
    /// delayed from `at`, so the driver's own reading latency does not add to the emulated
    /// delay. [`Qdisc::enqueue`] is this with `at = cx.now`.
    pub fn enqueue_at(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        at: Instant,
    ) -> Result<(), DropCause> {
        let len = cx.pool.len(pkt);
        let now = at.min(cx.now).0;
        self.stats.received.add(len);
        self.judge_started(now, cx);
        self.retire(now);
        if !self.cfg.path.is_empty() {
            let o = *self.path_origin.get_or_insert(now);
            if let Some((i, model)) = self.cfg.path.loss_at(now.saturating_sub(o)) {
                if i != self.loss_segment {
                    self.loss.set_model(*model);
                    self.loss_segment = i;
                }
            }
        }
        if self.loss.lose(cx.rng) {
            match self
                .cfg
                .ecn
                .then(|| mark_signal(true, cx.pool, pkt))
                .flatten()
            {
                Some(Delivered::Ce) => self.counters.ecn_marked.add(len),
                Some(Delivered::Unmarkable) => self.counters.ecn_unmarkable += 1,
                None => {
                    self.counters.lost.add(len);
                    self.refuse(len, DropCause::Emulated, now);
                    return Err(DropCause::Emulated);
                }
            }
        }
        self.admit_or_evict(now, len, cx)?;
        self.schedule(pkt, len, now, cx);
        if self.cfg.duplicate > 0.0 && self.dup.fire(cx.rng) {
            // Copy the frame as it arrived, before it is corrupted (netem clones first).
            self.duplicate(pkt, len, now, cx);
        }
        self.maybe_corrupt(pkt, len, cx);
        Ok(())
    }
}

impl Qdisc for EmuLink {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let now = cx.now;
        self.enqueue_at(pkt, cx, now)
    }

    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        let now = cx.now.0;
        self.judge_started(now, cx);
        if let Some(&(e, id)) = self.express.front() {
            if e <= now && self.line_head().is_none_or(|l| e <= l) {
                self.express.pop_front();
                return Some(self.departed(id, now, cx));
            }
        }
        let (head, head_len) = match self.slots {
            Some(_) => (self.line_head(), self.line_head_len(cx)),
            None => (None, 0),
        };
        if let (Some(st), Some(slot), Some(r)) = (&mut self.slots, &self.cfg.slot, head) {
            if r > now {
                return None;
            }
            if st.expire(slot, r, cx.rng) {
                self.counters.slots += 1;
            }
            let at = st.gate(r);
            if at > now {
                return None;
            }
            if st.take(slot, at, head_len, cx.rng) {
                self.counters.slots += 1;
            }
        }
        let id = if self.cfg.reorder {
            match self.heap.peek() {
                Some(Reverse((rel, _, id))) if *rel <= now => {
                    let id = PktId(*id);
                    self.heap.pop();
                    id
                }
                _ => return None,
            }
        } else {
            match self.line.front() {
                Some(&(rel, id)) if rel <= now => {
                    self.line.pop_front();
                    id
                }
                _ => return None,
            }
        };
        Some(self.departed(id, now, cx))
    }

    fn next_wakeup(&self) -> Option<Instant> {
        self.head_release().map(Instant)
    }

    fn len(&self) -> usize {
        self.line.len() + self.heap.len() + self.express.len()
    }

    fn bytes(&self) -> u64 {
        self.held_bytes
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        while let Some((_, id)) = self.line.pop_front() {
            self.purged(id, cx, cause);
        }
        while let Some(Reverse((_, _, id))) = self.heap.pop() {
            self.purged(PktId(id), cx, cause);
        }
        while let Some((_, id)) = self.express.pop_front() {
            self.purged(id, cx, cause);
        }
        self.held_bytes = 0;
        self.last_release = 0;
        self.backlog.clear();
        self.backlog_bytes = 0;
        self.judged = 0;
        self.busy_ns = 0;
        self.busy_ps = 0;
    }
}

impl EmuLink {
    /// Account packet `id` leaving at `now`.
    #[inline]
    fn departed(&mut self, id: PktId, now: u64, cx: &mut Ctx<'_>) -> PktId {
        let len = cx.pool.len(id);
        self.held_bytes = self.held_bytes.saturating_sub(len as u64);
        self.stats.dequeued.add(len);
        self.retire(now);
        id
    }

    /// Length of the delay line's head (0 if empty).
    #[inline]
    fn line_head_len(&self, cx: &Ctx<'_>) -> u32 {
        let id = if self.cfg.reorder {
            self.heap.peek().map(|r| PktId(r.0 .2))
        } else {
            self.line.front().map(|e| e.1)
        };
        id.map_or(0, |id| cx.pool.len(id))
    }

    fn purged(&mut self, id: PktId, cx: &mut Ctx<'_>, cause: DropCause) {
        let len = cx.pool.len(id);
        self.stats.dropped_later.add(len);
        self.stats.drops[cause.index()].add(len);
        cx.drop_later(id, cause);
    }
}

/// The bytes the link's serialiser charges a frame of `len` bytes — a trace's IP packet, a
/// rate's framed frame — or, without a serialiser, its IP packet (the `mm-link` log's
/// sizes; at least 1).
fn charged(cfg: &EmuConfig, len: u32) -> u32 {
    let framed = cfg.framing.wire_len(len);
    let b = match (&cfg.capacity, cfg.rate_bps) {
        (Some(c), _) => c.charge(cfg.framing, len),
        (None, Some(_)) => u64::from(framed),
        (None, None) => u64::from(len.saturating_sub(crate::framing::MAC_HEADER as u32)),
    };
    b.clamp(1, u64::from(u32::MAX)) as u32
}

mod codel;
mod evict;

#[cfg(test)]
pub(super) mod tests;
