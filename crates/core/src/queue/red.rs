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
//!
//! State ([`RedState`], 32 bytes, one per queue; per-flow RED keeps one per flow and shares
//! one `RedParams`): `avg`, `count` (-1 initially), `idle_since` (the paper's `q_time`,
//! `Some` while the queue is idle). The idle test is `idle_since.is_some()` together with an
//! empty queue: the owner of the queue calls [`RedParams::on_queue_empty`] when its queue
//! drains.
//!
//! Statistics: RED drops are reported with [`DropCause::RedEarly`] (probabilistic, including
//! the gentle band) and [`DropCause::RedForced`]; [`crate::Counted`] counts them by cause.
//! Only dropping is implemented (no ECN marking).
//!
//! Invariants: `avg >= 0` and finite for valid parameters; `count >= -1`; `p_b, p_a` in
//! [0, 1]. No allocation; the only float work per arrival is a few multiply-adds, a
//! division and (after an idle period only) one `powf`. Randomness comes from the caller's
//! seeded [`Rng`] (one draw per arrival in the probabilistic band).
//!
//! [`RedQueue`] is RED in front of a drop-tail FIFO with hard limits (a "cbq+red" class
//! queue).

use crate::pool::PktId;
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
    /// packets, max_p = 1/50, wq = 0.002, not gentle, `s` = 1000 bytes at `link`.
    pub fn floyd_defaults(link: Rate) -> Self {
        RedParams {
            min_th: 5.0,
            max_th: 15.0,
            max_p: 0.02,
            wq: 0.002,
            gentle: false,
            mode: RedMode::Packets,
            idle_pkt_ns: link.tx_ns(Self::DEFAULT_AVPKT).max(1),
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
/// An arrival first updates RED (which may drop it with `RedEarly`/`RedForced`), then must
/// fit the hard limits (`QueueFull`/`ByteLimit`). The idle period starts when `dequeue`
/// empties the queue (or finds it empty) and when the queue is purged.
#[derive(Clone, Debug)]
pub struct RedQueue {
    fifo: Fifo,
    params: RedParams,
    state: RedState,
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
        if let Some(cause) = self.params.on_arrival(
            &mut self.state,
            self.fifo.len(),
            self.fifo.bytes(),
            len,
            cx.now,
            cx.rng,
        ) {
            return Err(cause);
        }
        self.fifo.try_push(cx.pool, pkt)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Counted;
    use crate::time::Duration;

    fn params(min_th: f64, max_th: f64, max_p: f64, wq: f64) -> RedParams {
        RedParams {
            min_th,
            max_th,
            max_p,
            wq,
            gentle: false,
            mode: RedMode::Packets,
            idle_pkt_ns: 1_000_000,
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn pkt(pool: &mut Pool, len: u32) -> PktId {
        let id = pool.alloc().expect("pool");
        pool.meta_mut(id).len = len;
        id
    }

    #[test]
    fn state_is_small() {
        assert!(core::mem::size_of::<RedState>() <= 32);
        let s = RedState::new();
        assert_eq!((s.avg, s.count, s.idle_since), (0.0, -1, None));
    }

    #[test]
    fn p_b_and_p_a_worked_example() {
        let p = params(5.0, 15.0, 0.02, 0.002);
        // avg = 10: p_b = 0.02 * (10 - 5) / (15 - 5) = 0.01.
        assert!(close(p.p_b(10.0, 1500), 0.01, 1e-15));
        // count = 50: p_a = 0.01 / (1 - 50 * 0.01) = 0.02.
        assert!(close(RedParams::p_a(0.01, 50), 0.02, 1e-15));
        // count = 0: p_a = p_b; count = 98: 0.01 / 0.02 = 0.5; count >= 99: 1.
        assert!(close(RedParams::p_a(0.01, 0), 0.01, 1e-15));
        assert!(close(RedParams::p_a(0.01, 98), 0.5, 1e-12));
        assert_eq!(RedParams::p_a(0.01, 99), 1.0);
        assert_eq!(RedParams::p_a(0.01, 100), 1.0);
        assert_eq!(RedParams::p_a(0.01, 1_000_000), 1.0);
        assert_eq!(RedParams::p_a(0.0, 5), 0.0);
        assert_eq!(RedParams::p_a(0.01, -1), 0.01);
        // Below min_th: 0; at min_th: 0; just below max_th: ~max_p; at max_th: forced (1).
        assert_eq!(p.p_b(4.99, 100), 0.0);
        assert_eq!(p.p_b(5.0, 100), 0.0);
        assert!(close(p.p_b(14.999, 100), 0.02, 1e-5));
        assert_eq!(p.p_b(15.0, 100), 1.0);
        assert_eq!(p.forced_threshold(), 15.0);
    }

    #[test]
    fn gentle_band() {
        let p = RedParams {
            gentle: true,
            ..params(5.0, 15.0, 0.02, 0.002)
        };
        // avg = 20, max_th = 15: p_b = 0.02 + 0.98 * 5 / 15 = 0.346666...
        assert!(close(p.p_b(20.0, 1), 0.02 + 0.98 * 5.0 / 15.0, 1e-15));
        assert!(close(p.p_b(20.0, 1), 0.346_666_666_666_666_7, 1e-12));
        assert!(close(p.p_b(15.0, 1), 0.02, 1e-15));
        assert!(close(p.p_b(29.999, 1), 1.0, 1e-4));
        assert_eq!(p.p_b(30.0, 1), 1.0);
        assert_eq!(p.forced_threshold(), 30.0);
        // Decisions: in the gentle band drops are early, at 2 max_th forced.
        let mut rng = Rng::new(3);
        let mut st = RedState {
            avg: 30.0,
            ..RedState::new()
        };
        assert_eq!(
            p.on_arrival(&mut st, 30, 0, 1, Instant::ZERO, &mut rng),
            Some(DropCause::RedForced)
        );
        let mut early = 0;
        for _ in 0..1000 {
            st.avg = 20.0;
            match p.on_arrival(&mut st, 20, 0, 1, Instant::ZERO, &mut rng) {
                Some(DropCause::RedEarly) => early += 1,
                None => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(early > 300, "{early}");
    }

    #[test]
    fn byte_mode_scales_by_packet_size() {
        let p = RedParams {
            mode: RedMode::Bytes { mean_pkt: 1500 },
            ..params(7_500.0, 22_500.0, 0.02, 0.002)
        };
        p.validate().unwrap();
        // avg = 15000 bytes: base p_b = 0.02 * 7500 / 15000 = 0.01, times len / 1500.
        assert!(close(p.p_b(15_000.0, 1500), 0.01, 1e-15));
        assert!(close(p.p_b(15_000.0, 750), 0.005, 1e-15));
        assert!(close(p.p_b(15_000.0, 64), 0.01 * 64.0 / 1500.0, 1e-15));
        // Larger than the mean: more likely, clamped to 1.
        assert!(close(p.p_b(15_000.0, 3000), 0.02, 1e-15));
        assert_eq!(p.p_b(22_499.0, 1_000_000), 1.0);
        // The queue is measured in bytes: 10 packets of 1500 bytes held (15000 bytes).
        let mut st = RedState {
            avg: 15_000.0,
            ..RedState::new()
        };
        let mut rng = Rng::new(1);
        let _ = p.on_arrival(&mut st, 10, 15_000, 1500, Instant::ZERO, &mut rng);
        assert!(close(st.avg, 15_000.0, 1e-9));
        // floyd_bytes: thresholds in bytes.
        let fb = RedParams::floyd_bytes(Rate::from_bps(10_000_000), 1000);
        fb.validate().unwrap();
        assert_eq!((fb.min_th, fb.max_th), (5_000.0, 15_000.0));
        assert_eq!(fb.idle_pkt_ns, 800_000);
    }

    #[test]
    fn ewma_converges_as_closed_form() {
        // Exact: wq = 1/2, q = 8 from avg = 0: 4, 6, 7 = 8 (1 - 2^-n).
        let p = params(100.0, 200.0, 0.1, 0.5);
        let mut st = RedState::new();
        let mut rng = Rng::new(1);
        for want in [4.0, 6.0, 7.0] {
            assert_eq!(
                p.on_arrival(&mut st, 8, 0, 100, Instant::ZERO, &mut rng),
                None
            );
            assert_eq!(st.avg, want);
        }
        // wq = 0.002, q = 10, n = 500: avg = 10 (1 - 0.998^500) = 6.3248874514...
        // (ln 0.998 = -0.00200200267; x 500 = -1.00100134; e^that = 0.36751125).
        let p = params(5.0, 15.0, 0.02, 0.002);
        let mut st = RedState::new();
        for n in 1..=500 {
            // The decision (including drops) does not affect avg; q is held at 10.
            let _ = p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng);
            let closed = 10.0 * (1.0 - 0.998f64.powi(n));
            assert!(close(st.avg, closed, 1e-9), "n={n}");
        }
        assert!(close(st.avg, 6.324_887_451, 1e-8), "{}", st.avg);
    }

    #[test]
    fn idle_decay() {
        // wq = 1/2, s = 1 ms: after 3 ms idle, avg = 8 * (1/2)^3 = 1; after 2.5 ms,
        // 8 * 2^-2.5 = sqrt(2).
        let p = params(5.0, 15.0, 0.02, 0.5);
        let mut rng = Rng::new(1);
        let t0 = Instant(10_000_000);
        let mut st = RedState {
            avg: 8.0,
            ..RedState::new()
        };
        p.on_queue_empty(&mut st, t0);
        p.on_queue_empty(&mut st, t0 + Duration::from_millis(1)); // keeps the first start
        assert_eq!(st.idle_since, Some(t0));
        let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_millis(3), &mut rng);
        assert!(close(st.avg, 1.0, 1e-12), "{}", st.avg);
        assert_eq!(st.idle_since, None);
        let mut st = RedState {
            avg: 8.0,
            ..RedState::new()
        };
        p.on_queue_empty(&mut st, t0);
        let _ = p.on_arrival(
            &mut st,
            0,
            0,
            100,
            t0 + Duration::from_micros(2500),
            &mut rng,
        );
        assert!(
            close(st.avg, core::f64::consts::SQRT_2, 1e-12),
            "{}",
            st.avg
        );
        // Realistic: wq = 0.002, s = 1 ms, idle 1 s: avg = 10 * 0.998^1000 = 1.35064522...
        let p = params(5.0, 15.0, 0.02, 0.002);
        let mut st = RedState {
            avg: 10.0,
            ..RedState::new()
        };
        p.on_queue_empty(&mut st, t0);
        let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_secs(1), &mut rng);
        assert!(close(st.avg, 1.350_645_224_5, 1e-9), "{}", st.avg);
        // Not idle (no on_queue_empty): an arrival to an empty queue is one EWMA sample.
        let mut st = RedState {
            avg: 10.0,
            ..RedState::new()
        };
        let _ = p.on_arrival(&mut st, 0, 0, 100, t0 + Duration::from_secs(1), &mut rng);
        assert!(close(st.avg, 9.98, 1e-12));
    }

    #[test]
    fn red_queue_starts_idle_period_when_drained() {
        let p = params(5.0, 15.0, 0.02, 0.5);
        let mut q = RedQueue::new(p, 100, u64::MAX).unwrap();
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for _ in 0..2 {
            let id = pkt(cx.pool, 100);
            q.enqueue(id, &mut cx).unwrap();
        }
        q.state_mut().avg = 8.0;
        cx.now = Instant(10_000_000);
        let a = q.dequeue(&mut cx).unwrap();
        assert!(!q.state().is_idle(), "one packet still queued");
        let b = q.dequeue(&mut cx).unwrap();
        assert_eq!(q.state().idle_since, Some(Instant(10_000_000)));
        cx.pool.free(a);
        cx.pool.free(b);
        // Arrival 3 ms (3 s) later: avg = 8 / 8 = 1.
        cx.now = Instant(13_000_000);
        let id = pkt(cx.pool, 100);
        q.enqueue(id, &mut cx).unwrap();
        assert!(close(q.state().avg, 1.0, 1e-12), "{}", q.state().avg);
        assert!(!q.state().is_idle());
    }

    #[test]
    fn count_resets_and_forced_drops() {
        let p = params(5.0, 15.0, 0.02, 0.002);
        let mut rng = Rng::new(5);
        let mut st = RedState {
            avg: 20.0,
            count: 17,
            idle_since: None,
        };
        assert_eq!(
            p.on_arrival(&mut st, 20, 0, 100, Instant::ZERO, &mut rng),
            Some(DropCause::RedForced)
        );
        assert_eq!(st.count, 0);
        st.avg = 1.0;
        assert_eq!(
            p.on_arrival(&mut st, 1, 0, 100, Instant::ZERO, &mut rng),
            None
        );
        assert_eq!(st.count, -1);
        // Entering the band: count becomes the number of unmarked arrivals.
        st.avg = 10.0;
        let mut undropped = 0;
        for _ in 0..10 {
            match p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng) {
                None => undropped += 1,
                Some(c) => {
                    assert_eq!(c, DropCause::RedEarly);
                    undropped = 0;
                }
            }
            assert_eq!(st.count, undropped);
        }
    }

    /// Statistical check of the count-based dropping at a constant average.
    ///
    /// With `avg` held at 10 and min_th/max_th/max_p = 5/15/0.1, p_b = 0.1 * 5/10 = 0.05.
    /// The n-th arrival after a drop is dropped with p_a(n-1) = p_b / (1 - (n-1) p_b), so
    /// P(gap = n) = p_a(n-1) * prod_{i=0}^{n-2} (1 - p_a(i)). Since
    /// 1 - p_a(i) = (1 - (i+1) p_b) / (1 - i p_b), the product telescopes to 1 - (n-1) p_b
    /// and P(gap = n) = p_b for n = 1..N, N = 1/p_b = 20: the gap is uniform on {1..20},
    /// E[gap] = (N+1)/2 = 10.5, and by renewal-reward the long-run drop fraction is
    /// 1/E[gap] = 2 p_b / (1 + p_b) = 0.1/1.05 = 0.0952381 (not p_b, and not the 2 p_b
    /// that Figure 2's increment-first pseudo-code would give).
    /// Tolerance: 4 binomial standard deviations, 4 sqrt(r(1-r)/n) = 0.0026 for n = 200,000
    /// (the renewal process has a smaller variance than binomial, so this is conservative).
    fn expected_drop_fraction() -> (f64, f64, usize) {
        let pb = 0.05;
        let r = 2.0 * pb / (1.0 + pb);
        let n = 200_000usize;
        let tol = 4.0 * (r * (1.0 - r) / n as f64).sqrt();
        (r, tol, n)
    }

    #[test]
    fn long_run_drop_rate_matches_formula() {
        let p = params(5.0, 15.0, 0.1, 0.002);
        assert!(close(p.p_b(10.0, 1), 0.05, 1e-15));
        let (r, tol, n) = expected_drop_fraction();
        let mut rng = Rng::new(0x5eed);
        let mut st = RedState {
            avg: 10.0,
            ..RedState::new()
        };
        let mut drops = 0usize;
        let mut max_gap = 0;
        let mut gap = 0;
        for _ in 0..n {
            gap += 1;
            match p.on_arrival(&mut st, 10, 0, 100, Instant::ZERO, &mut rng) {
                Some(DropCause::RedEarly) => {
                    drops += 1;
                    max_gap = max_gap.max(gap);
                    gap = 0;
                }
                None => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(close(st.avg, 10.0, 1e-9));
        let frac = drops as f64 / n as f64;
        assert!(
            close(frac, r, tol),
            "drop fraction {frac}, expected {r} +- {tol}"
        );
        assert_eq!(max_gap, 20, "gaps are bounded by 1/p_b");
    }

    #[test]
    fn red_queue_statistics_and_identities() {
        // Queue held at 10 packets on every arrival: an accepted arrival is followed by one
        // departure. avg starts at 10, so it stays there (see expected_drop_fraction).
        let p = params(5.0, 15.0, 0.1, 0.002);
        let (r, tol, n) = expected_drop_fraction();
        let mut pool = Pool::new(64, 0);
        let mut rng = Rng::new(42);
        let mut dropped = Vec::new();
        let mut q = Counted::new(Box::new(RedQueue::new(p, 1000, u64::MAX).unwrap()));
        {
            let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
            // Pre-fill (avg stays far below min_th, so RED accepts), then pin avg at 10.
            for _ in 0..10 {
                let id = pkt(cx.pool, 1000);
                q.enqueue(id, &mut cx).unwrap();
            }
            q.inner.state_mut().avg = 10.0;
            for i in 0..n {
                cx.now = Instant(i as u64 * 1000);
                let id = pkt(cx.pool, 1000);
                match q.enqueue(id, &mut cx) {
                    Ok(()) => {
                        let out = q.dequeue(&mut cx).unwrap();
                        cx.pool.free(out);
                    }
                    Err(_) => cx.pool.free(id),
                }
                assert_eq!(Qdisc::len(&q), 10);
            }
        }
        q.check().unwrap();
        let s = &q.stats;
        assert_eq!(s.received.packets, n as u64 + 10);
        let early = s.drops_by(DropCause::RedEarly).packets as f64 / n as f64;
        assert!(close(early, r, tol), "{early} vs {r} +- {tol}");
        assert_eq!(s.drops_by(DropCause::RedForced).packets, 0);
        assert_eq!(s.drops_by(DropCause::QueueFull).packets, 0);
        assert_eq!(s.dropped_later.packets, 0);
        assert!(dropped.is_empty());
    }

    #[test]
    fn counter_identities_with_all_causes() {
        let p = RedParams {
            gentle: true,
            ..params(4.0, 8.0, 0.1, 0.05)
        };
        let mut pool = Pool::new(128, 0);
        let mut rng = Rng::new(9);
        let mut dropped = Vec::new();
        let mut drive = Rng::new(10);
        let mut q = Counted::new(Box::new(RedQueue::new(p, 20, 12_000).unwrap()));
        {
            let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
            for i in 0..50_000u64 {
                cx.now = Instant(i * 10_000);
                // Phases of overload and drain.
                let p_arrive = if (i / 2_000) % 2 == 0 { 0.8 } else { 0.3 };
                if drive.chance(p_arrive) {
                    let id = pkt(cx.pool, 64 + drive.below(1437) as u32);
                    if q.enqueue(id, &mut cx).is_err() {
                        cx.pool.free(id);
                    }
                } else if let Some(id) = q.dequeue(&mut cx) {
                    cx.pool.free(id);
                }
                q.check().unwrap();
            }
            for c in [
                DropCause::RedEarly,
                DropCause::RedForced,
                DropCause::QueueFull,
                DropCause::ByteLimit,
            ] {
                assert!(q.stats.drops_by(c).packets > 0, "{c:?} never happened");
            }
            q.purge(&mut cx, DropCause::Shutdown);
            assert!(q.inner.state().is_idle());
        }
        q.check().unwrap();
        for (id, _) in dropped.drain(..) {
            pool.free(id);
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn hard_limits() {
        // Thresholds far above the limit: only the hard limits drop.
        let p = params(1_000.0, 2_000.0, 0.1, 0.002);
        let mut q = RedQueue::new(p, 3, 2_500).unwrap();
        let mut pool = Pool::new(8, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for _ in 0..2 {
            let id = pkt(cx.pool, 1000);
            q.enqueue(id, &mut cx).unwrap();
        }
        let id = pkt(cx.pool, 1000);
        assert_eq!(q.enqueue(id, &mut cx), Err(DropCause::ByteLimit));
        cx.pool.free(id);
        let id = pkt(cx.pool, 500);
        q.enqueue(id, &mut cx).unwrap();
        let id = pkt(cx.pool, 1);
        assert_eq!(q.enqueue(id, &mut cx), Err(DropCause::QueueFull));
    }

    #[test]
    fn validation_messages() {
        let ok = RedParams::floyd_defaults(Rate::from_bps(10_000_000));
        ok.validate().unwrap();
        assert_eq!(ok.idle_pkt_ns, 800_000, "1000 bytes at 10 Mbit/s");
        assert_eq!(
            (ok.min_th, ok.max_th, ok.max_p, ok.wq),
            (5.0, 15.0, 0.02, 0.002)
        );
        let bad = |f: &dyn Fn(&mut RedParams), needle: &str| {
            let mut p = ok;
            f(&mut p);
            let e = p.validate().unwrap_err();
            assert!(e.contains(needle), "{e}");
            assert!(RedQueue::new(p, 10, 10).is_err());
        };
        bad(&|p| p.min_th = 0.0, "min_th");
        bad(&|p| p.min_th = f64::NAN, "min_th");
        bad(&|p| p.max_th = 5.0, "max_th");
        bad(&|p| p.max_th = f64::INFINITY, "max_th");
        bad(&|p| p.max_p = 0.0, "max_p");
        bad(&|p| p.max_p = 1.5, "max_p");
        bad(&|p| p.wq = 0.0, "wq");
        bad(&|p| p.wq = f64::NAN, "wq");
        bad(&|p| p.idle_pkt_ns = 0, "idle_pkt_ns");
        bad(&|p| p.mode = RedMode::Bytes { mean_pkt: 0 }, "mean_pkt");
        let mut q = RedQueue::new(ok, 10, 10).unwrap();
        assert!(q.set_params(RedParams { wq: 2.0, ..ok }).is_err());
        assert_eq!(q.params(), &ok);
    }
}
