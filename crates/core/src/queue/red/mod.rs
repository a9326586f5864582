//! Random Early Detection (RED), after Floyd & Jacobson, "Random Early Detection Gateways
//! for Congestion Avoidance", IEEE/ACM Transactions on Networking 1(4), 1993, with the
//! "gentle" variant (Floyd, "Recommendation on using the gentle_ variant of RED", 2000).
//!
//! RED keeps an exponentially weighted moving average `avg` of the queue size, updated on
//! every arrival, and drops arrivals with a probability that grows with `avg`:
//!
//! ```text
//! on arrival (q = current queue size, before this packet):
//!     if the queue has been idle since q_time:  m = (now - q_time) / s
//!                                               avg = (1 - wq)^m * avg
//!     else:                                     avg = (1 - wq) * avg + wq * q
//!     if avg < min_th:                          count = -1, accept
//!     elif avg < max_th  (or < 2 max_th when gentle):
//!         p_b = max_p (avg - min_th) / (max_th - min_th)                  [below max_th]
//!         p_b = max_p + (1 - max_p) (avg - max_th) / max_th               [gentle band]
//!         p_b = p_b * len / mean_pkt                                      [byte mode]
//!         p_a = p_b / (1 - count * p_b)     (1 when count * p_b >= 1 - p_b)
//!         with probability p_a: drop (RedEarly), count = 0
//!         otherwise count = count + 1
//!     else: drop (RedForced), count = 0
//! when the queue becomes empty: q_time = now (start of the idle period)
//! ```
//!
//! `count` is the number of unmarked packets that arrived since the last drop (the paper's
//! section 7 definition, also Linux `red_action`): the n-th arrival after a drop uses
//! `count = n - 1`, so the gap between drops is uniform on `{1, .., 1/p_b}` and the long-run
//! drop rate at a constant `p_b` is `2 p_b / (1 + p_b)`. (The paper's Figure 2 increments
//! `count` *before* computing `p_a`, which after a drop is one ahead of its own analysis
//! and would give gaps uniform on `{1, .., 1/p_b - 1}`; we follow the analysis.) An arrival
//! entering the band from below `min_th` (`count == -1`) starts counting afresh with
//! `count = 0`.
//!
//! Parameters ([`RedParams`]; defaults are the paper's suggestions, [`RedParams::floyd_defaults`]):
//! * `min_th`, `max_th`: thresholds on `avg`, in packets ([`RedMode::Packets`]) or bytes
//!   ([`RedMode::Bytes`]). Default 5 and 15 packets (`max_th = 3 min_th`; the paper asks for
//!   `max_th >= 2 min_th`).
//! * `max_p`: drop probability at `avg = max_th` (0 < max_p <= 1). Default 1/50.
//! * `wq`: EWMA weight (0 < wq <= 1). Default 0.002.
//! * `gentle`: drop probability rises from `max_p` to 1 between `max_th` and `2 max_th`
//!   instead of jumping to 1 at `max_th`. Default off (as the 1993 paper).
//! * `mode`: `Packets`, or `Bytes { mean_pkt }` where the queue is measured in bytes and
//!   `p_b` is scaled by `len / mean_pkt` (the paper's byte-mode variant, section 4, so a
//!   small packet is less likely to be dropped). Default `Packets`.
//! * `idle_pkt_ns` (ns): `s`, the transmission time of a typical packet on the output link,
//!   used to age `avg` over an idle period as if `m = idle / s` empty-queue samples had
//!   been taken. Default: 1000 bytes at the link rate.
//! * `ecn`: signal ECN-capable packets with a CE mark instead of dropping them on an early
//!   decision (below). Default off (the 1993 paper's and the seed papers' RED drops).
//!
//! ECN (with `ecn` on; Linux `sch_red`/`sch_gred` with the `ecn` and `harddrop` flags,
//! [`RedParams::mark_or_drop`]): the decision is unchanged (the same `avg`, `p_a`, and
//! `count` reset to 0 by a mark as by a drop, as Linux `red_action` resets `qcount` before
//! the qdisc chooses), only its action differs:
//! * early decision (`RedEarly`, the gentle band included) on an ECT(0)/ECT(1) packet: CE
//!   is set (IPv4's header checksum fixed by the RFC 1624 incremental update) and the
//!   packet is enqueued, counted as a mark, not a drop; already CE: enqueued as it is,
//!   also a mark (Linux's `INET_ECN_set_ce` succeeds on it too); not ECN-capable (ECN
//!   `00`, or not IP): dropped as without ECN; headers the marker cannot read (truncated,
//!   impossible, a wrong IPv4 checksum): enqueued **unchanged** and counted `unmarkable`,
//!   the AQMs' policy ([`crate::aqm::mark_signal`], the one marking rule of every queue);
//! * forced decision (`avg >= max_th`, or `>= 2 max_th` when gentle): always a drop.
//!   This is Linux's `harddrop`, and RFC 3168 section 7's recommendation: routers mark
//!   only while the marking rate is reasonably low, and drop rather than set CE while the
//!   average exceeds an upper threshold. Marking there would let traffic that sets ECT
//!   but ignores CE hold the average above `max_th` for good, every non-ECT arrival then
//!   dropped: the unresponsive would lock the responsive out;
//! * the hard limits of the queue always drop (a full queue cannot take a marked packet).
//!   They are checked after the mark; a marked packet they refuse is a tail drop and is
//!   not counted as a mark (marks count packets enqueued with the signal);
//! * a pool without frame bytes (the simulator's) has no ECN field: every decision drops.
//!
//! State ([`RedState`], 32 bytes, one per queue; per-flow RED keeps one per flow and shares
//! one `RedParams`): `avg`, `count` (-1 initially), `idle_since` (the paper's `q_time`,
//! `Some` while the queue is idle). The idle test is `idle_since.is_some()` together with an
//! empty queue: the owner of the queue calls [`RedParams::on_queue_empty`] when its queue
//! drains.
//!
//! Statistics: RED drops are reported with [`DropCause::RedEarly`] (probabilistic, including
//! the gentle band) and [`DropCause::RedForced`]; [`crate::Counted`] counts them by cause.
//! [`RedQueue`] also keeps [`AqmStats`] (through [`Qdisc::aqm_stats`]): `ecn_marked` and
//! `unmarkable` (early decisions delivered without a drop, enqueued: not drops),
//! `aqm_dropped` (its `RedEarly` + `RedForced` drops) and `overlimit_dropped` (its
//! `QueueFull` + `ByteLimit` tail drops).
//!
//! Invariants: `avg >= 0` and finite for valid parameters; `count >= -1`; `p_b, p_a` in
//! [0, 1]. No allocation; the only float work per arrival is a few multiply-adds, a
//! division and (after an idle period only) one `powf`. Randomness comes from the caller's
//! seeded [`Rng`] (one draw per arrival in the probabilistic band).
//!
//! [`RedQueue`] is RED in front of a drop-tail FIFO with hard limits (a "cbq+red" class
//! queue).

use crate::aqm::{mark_signal, AqmStats, Delivered};
use crate::pool::{PktId, Pool};
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::fifo::{Fifo, Limits};
use crate::rate::Rate;
use crate::rng::Rng;
use crate::time::Instant;

/// What RED measures the queue in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum RedMode {
    /// Queue size and thresholds in packets.
    #[default]
    Packets,
    /// Queue size and thresholds in bytes; `p_b` scaled by `len / mean_pkt`.
    Bytes { mean_pkt: u32 },
}

/// RED parameters, shared by any number of [`RedState`]s (see the module comment).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RedParams {
    /// Lower threshold on `avg` (packets or bytes per `mode`).
    pub min_th: f64,
    /// Upper threshold on `avg` (packets or bytes per `mode`).
    pub max_th: f64,
    /// Drop probability at `avg = max_th`.
    pub max_p: f64,
    /// EWMA weight of the instantaneous queue size.
    pub wq: f64,
    /// Floyd's 2000 gentle variant.
    pub gentle: bool,
    pub mode: RedMode,
    /// `s`: transmission time of a typical packet in ns, for the idle-period decay.
    pub idle_pkt_ns: u64,
    /// Mark ECN-capable packets with CE on early decisions instead of dropping them.
    pub ecn: bool,
}

/// Per-queue RED state. 32 bytes.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RedState {
    /// Average queue size (packets or bytes per the params' mode).
    pub avg: f64,
    /// Unmarked arrivals since the last drop; -1 when `avg` was last below `min_th`.
    pub count: i64,
    /// Start of the current idle period (`q_time`), if the queue is idle.
    pub idle_since: Option<Instant>,
}

impl Default for RedState {
    fn default() -> Self {
        Self::new()
    }
}

impl RedState {
    /// `avg = 0`, `count = -1`, not idle (as the paper's initialisation).
    pub const fn new() -> Self {
        RedState {
            avg: 0.0,
            count: -1,
            idle_since: None,
        }
    }
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.idle_since.is_some()
    }
}

impl RedParams {
    /// Typical packet size (bytes) used by the default constructors for `s` and `mean_pkt`.
    pub const DEFAULT_AVPKT: u32 = 1000;

    /// The paper's suggested parameters in packet mode: min_th = 5, max_th = 15 (3·min_th)
    /// packets, max_p = 1/50, wq = 0.002, not gentle, `s` = 1000 bytes at `link`, no ECN.
    pub fn floyd_defaults(link: Rate) -> Self {
        RedParams {
            min_th: 5.0,
            max_th: 15.0,
            max_p: 0.02,
            wq: 0.002,
            gentle: false,
            mode: RedMode::Packets,
            idle_pkt_ns: link.tx_ns(Self::DEFAULT_AVPKT).max(1),
            ecn: false,
        }
    }

    /// The same in byte mode: thresholds 5 and 15 `mean_pkt`-byte packets, `p_b` scaled by
    /// `len / mean_pkt`, `s` = `mean_pkt` bytes at `link`.
    pub fn floyd_bytes(link: Rate, mean_pkt: u32) -> Self {
        let m = mean_pkt.max(1);
        RedParams {
            min_th: 5.0 * m as f64,
            max_th: 15.0 * m as f64,
            mode: RedMode::Bytes { mean_pkt: m },
            idle_pkt_ns: link.tx_ns(m).max(1),
            ..Self::floyd_defaults(link)
        }
    }

    /// Check the parameters; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_as("red")
    }

    /// [`Self::validate`] with messages prefixed by `who` instead of `red` (three-colour RED
    /// names the colour: `gred yellow: max_p ...`).
    pub fn validate_as(&self, who: &str) -> Result<(), String> {
        // Comparisons are written so that NaN fails them.
        if !(self.min_th > 0.0 && self.min_th.is_finite()) {
            return Err(format!(
                "{who}: min_th must be a finite number > 0 (got {})",
                self.min_th
            ));
        }
        if !(self.max_th > self.min_th && self.max_th.is_finite()) {
            return Err(format!(
                "{who}: max_th ({}) must be finite and greater than min_th ({})",
                self.max_th, self.min_th
            ));
        }
        if !(self.max_p > 0.0 && self.max_p <= 1.0) {
            return Err(format!(
                "{who}: max_p must be in (0, 1] (got {})",
                self.max_p
            ));
        }
        if !(self.wq > 0.0 && self.wq <= 1.0) {
            return Err(format!("{who}: wq must be in (0, 1] (got {})", self.wq));
        }
        if self.idle_pkt_ns == 0 {
            return Err(format!(
                "{who}: idle_pkt_ns (s, transmission time of a typical packet) must be > 0 ns"
            ));
        }
        if let RedMode::Bytes { mean_pkt: 0 } = self.mode {
            return Err(format!("{who}: byte mode needs mean_pkt > 0 bytes"));
        }
        Ok(())
    }

    /// Update `st.avg` for an arrival that sees a queue of size `q` (packets or bytes).
    #[inline]
    pub fn update_avg(&self, st: &mut RedState, q: f64, now: Instant) {
        match st.idle_since.take() {
            Some(since) if q <= 0.0 => {
                // m = idle time / s; avg <- (1 - wq)^m avg.
                let m = now.saturating_since(since).0 as f64 / self.idle_pkt_ns.max(1) as f64;
                if m > 0.0 {
                    st.avg *= (1.0 - self.wq).powf(m);
                }
            }
            _ => st.avg = (1.0 - self.wq) * st.avg + self.wq * q,
        }
    }

    /// The RED decision for one arriving packet of `pkt_len` bytes, given the queue it joins
    /// (`qlen_pkts` packets, `qlen_bytes` bytes, not counting it). Updates `st`; returns the
    /// drop cause if the packet must be dropped.
    #[inline]
    pub fn on_arrival(
        &self,
        st: &mut RedState,
        qlen_pkts: usize,
        qlen_bytes: u64,
        pkt_len: u32,
        now: Instant,
        rng: &mut Rng,
    ) -> Option<DropCause> {
        let q = match self.mode {
            RedMode::Packets => qlen_pkts as f64,
            RedMode::Bytes { .. } => qlen_bytes as f64,
        };
        self.update_avg(st, q, now);
        self.decide(st, pkt_len, rng)
    }

    /// The drop decision at the current `st.avg` (already updated for this arrival) for a
    /// packet of `pkt_len` bytes: accept below `min_th` (`count = -1`), force at
    /// [`Self::forced_threshold`], else drop with `p_a`. Updates `st.count`. Split from
    /// [`Self::on_arrival`] for queues whose average is kept apart from the decision
    /// (three-colour RED, [`crate::queue::gred`]).
    #[inline]
    pub fn decide(&self, st: &mut RedState, pkt_len: u32, rng: &mut Rng) -> Option<DropCause> {
        let avg = st.avg;
        if avg < self.min_th {
            st.count = -1;
            return None;
        }
        if avg >= self.forced_threshold() {
            st.count = 0;
            return Some(DropCause::RedForced);
        }
        let count = st.count.max(0);
        let pa = Self::p_a(self.p_b(avg, pkt_len), count);
        if rng.chance(pa) {
            st.count = 0;
            Some(DropCause::RedEarly)
        } else {
            st.count = count.saturating_add(1);
            None
        }
    }

    /// What becomes of an arrival given RED's `decision` for it ([`Self::on_arrival`],
    /// [`Self::decide`]): `Ok(None)` accepted without a signal; `Ok(Some(_))` an early
    /// decision delivered without a drop (`ecn` on: CE set or already there, or headers
    /// unreadable and left unchanged, [`mark_signal`]); `Err(cause)` dropped: a forced
    /// decision always, an early one with `ecn` off or on a packet that is not ECN-capable
    /// (see the module comment). An accepted packet must still fit the queue's limits.
    #[inline]
    pub fn mark_or_drop(
        &self,
        decision: Option<DropCause>,
        pool: &mut Pool,
        pkt: PktId,
    ) -> Result<Option<Delivered>, DropCause> {
        match decision {
            None => Ok(None),
            Some(DropCause::RedEarly) if self.ecn => mark_signal(true, pool, pkt)
                .map(Some)
                .ok_or(DropCause::RedEarly),
            Some(cause) => Err(cause),
        }
    }

    /// Start of an idle period: the queue this state belongs to has just become empty.
    #[inline]
    pub fn on_queue_empty(&self, st: &mut RedState, now: Instant) {
        if st.idle_since.is_none() {
            st.idle_since = Some(now);
        }
    }

    /// `avg` at or above which every arrival is dropped: `max_th`, or `2 max_th` if gentle.
    #[inline]
    pub fn forced_threshold(&self) -> f64 {
        if self.gentle {
            2.0 * self.max_th
        } else {
            self.max_th
        }
    }

    /// The paper's `p_b` for an average `avg` and a packet of `pkt_len` bytes: 0 below
    /// `min_th`, linear up to `max_p` at `max_th`, then (gentle) linear up to 1 at
    /// `2 max_th`, else 1. Scaled by `pkt_len / mean_pkt` in byte mode; clamped to [0, 1].
    #[inline]
    pub fn p_b(&self, avg: f64, pkt_len: u32) -> f64 {
        let base = if avg < self.min_th {
            return 0.0;
        } else if avg < self.max_th {
            self.max_p * (avg - self.min_th) / (self.max_th - self.min_th)
        } else if avg < self.forced_threshold() {
            self.max_p + (1.0 - self.max_p) * (avg - self.max_th) / self.max_th
        } else {
            return 1.0;
        };
        let scaled = match self.mode {
            RedMode::Packets => base,
            RedMode::Bytes { mean_pkt } => base * pkt_len as f64 / mean_pkt.max(1) as f64,
        };
        scaled.clamp(0.0, 1.0)
    }

    /// The paper's `p_a = p_b / (1 - count p_b)`, with `count` unmarked arrivals since the
    /// last drop; 1 once `(count + 1) p_b >= 1` (where the formula reaches 1, which includes
    /// `count p_b >= 1`).
    #[inline]
    pub fn p_a(p_b: f64, count: i64) -> f64 {
        if p_b <= 0.0 {
            return 0.0;
        }
        // p_b / (1 - c p_b) >= 1  <=>  (c + 1) p_b >= 1 (also covers c p_b >= 1).
        let c = count.max(0) as f64;
        if (c + 1.0) * p_b >= 1.0 {
            1.0
        } else {
            p_b / (1.0 - c * p_b)
        }
    }
}

/// RED in front of a drop-tail FIFO with hard limits: a [`Qdisc`] for one class queue.
///
/// An arrival first updates RED (which may drop it with `RedEarly`/`RedForced`, or with
/// `ecn` mark it instead of an early drop), then must fit the hard limits
/// (`QueueFull`/`ByteLimit`). The idle period starts when `dequeue` empties the queue (or
/// finds it empty) and when the queue is purged.
#[derive(Clone, Debug)]
pub struct RedQueue {
    fifo: Fifo,
    params: RedParams,
    state: RedState,
    stats: AqmStats,
}

impl RedQueue {
    /// RED with `params` over a FIFO of at most `limit_packets` packets and `limit_bytes`
    /// bytes ([`Limits::UNLIMITED_PACKETS`] / [`Limits::UNLIMITED_BYTES`] for none).
    pub fn new(params: RedParams, limit_packets: u32, limit_bytes: u64) -> Result<Self, String> {
        params.validate()?;
        Ok(RedQueue {
            fifo: Fifo::new(limit_packets, limit_bytes),
            params,
            state: RedState::new(),
            stats: AqmStats::default(),
        })
    }

    pub fn params(&self) -> &RedParams {
        &self.params
    }

    /// Replace the parameters at run time; the average, count and held packets are kept.
    pub fn set_params(&mut self, params: RedParams) -> Result<(), String> {
        params.validate()?;
        self.params = params;
        Ok(())
    }

    pub fn state(&self) -> &RedState {
        &self.state
    }

    /// For tests and for restoring state across a reconfiguration.
    pub fn state_mut(&mut self) -> &mut RedState {
        &mut self.state
    }

    pub fn limits(&self) -> Limits {
        self.fifo.limits()
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.fifo.set_limits(limits);
    }

    pub fn head(&self) -> Option<PktId> {
        self.fifo.head()
    }
}

impl Qdisc for RedQueue {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let len = cx.pool.len(pkt);
        let decision = self.params.on_arrival(
            &mut self.state,
            self.fifo.len(),
            self.fifo.bytes(),
            len,
            cx.now,
            cx.rng,
        );
        let signal = self
            .params
            .mark_or_drop(decision, cx.pool, pkt)
            .inspect_err(|_| self.stats.aqm_dropped += 1)?;
        self.fifo
            .try_push(cx.pool, pkt)
            .inspect_err(|_| self.stats.overlimit_dropped += 1)?;
        if let Some(d) = signal {
            self.stats.count_delivered(d);
        }
        Ok(())
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        let p = self.fifo.pop(cx.pool);
        if self.fifo.is_empty() {
            self.params.on_queue_empty(&mut self.state, cx.now);
        }
        p
    }

    fn len(&self) -> usize {
        self.fifo.len()
    }

    fn bytes(&self) -> u64 {
        self.fifo.bytes()
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.fifo.drain_to(cx, cause);
        self.params.on_queue_empty(&mut self.state, cx.now);
    }

    fn aqm_stats(&self) -> Option<AqmStats> {
        Some(self.stats)
    }
}

#[cfg(test)]
pub(crate) mod tests;
