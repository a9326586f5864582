//! Three-colour RED (GRED, RIO): RED with one drop profile per drop precedence, in front of
//! one drop-tail FIFO, for an Assured Forwarding class (RFC 2597).
//!
//! A meter/marker upstream colours each packet green, yellow or red ([`Meta::color`], low,
//! medium and high drop precedence). Each colour has its own RED thresholds and `max_p`
//! (a [`DropProfile`]); the packet's colour picks the profile and the average it is judged
//! against. All colours share one physical FIFO, so packets leave in arrival order and a
//! microflow is never reordered whatever its colours (RFC 2597 section 2; seed 004's TRIO
//! "sustaining the order of the packets within the AF flow"). This is RIO (Clark & Fang,
//! "Explicit allocation of best-effort packet delivery service", IEEE/ACM ToN 6(4), 1998)
//! extended to three precedences, as seed 001 ("RIO-like ... GRED", Table 1) and seed 004
//! (TRIO, section 2.1) use it, and as ALTQ's `altq_rio.c` and Linux `sch_gred.c` implement it.
//!
//! ```text
//! colour index c: green 0, yellow 1, red 2.   level j: the average colour j is judged by.
//! counts(j, c): whether level j's average counts colour-c packets (see GredAveraging).
//! on arrival of a colour-c packet of len bytes:
//!     for every level j with counts(j, c):            (RIO: an IN arrival updates avg_in
//!         q_j = packets (or bytes) held of the colours  and avg_total, an OUT one only
//!               that level j counts, before this one    avg_total)
//!         avg_j = RED's EWMA of q_j, aged over its idle period (RedParams::update_avg)
//!     decide with colour c's profile at avg_c: RED's p_b, p_a and count, the count being
//!         colour c's own (RedParams::decide)  -> RedEarly / RedForced
//!     else the FIFO's hard limits                     -> QueueFull / ByteLimit (tail drop)
//! after every dequeue and on purge: each level whose colours hold no packet starts (or
//!     continues) an idle period, as RED's queue does when it empties.
//! ```
//!
//! Averaging ([`GredAveraging`]):
//! * `Coupled` (default): level j counts colours `0..=j`: green's average is over the green
//!   packets held, yellow's over green + yellow, red's over all. An arrival updates the
//!   averages that count its colour. RIO's `avg_in` / `avg_total` generalised to three
//!   levels exactly as ALTQ RIO does. Linux `sch_gred` in RIO mode (`grio`) instead adds
//!   the (non-idle) averages of the lower-precedence virtual queues to the packet's own;
//!   that equals the average of the summed occupancy except for when each term was sampled.
//! * `Separate`: level j counts colour j only: each colour is a RED over its own packets
//!   (Linux `sch_gred` without `grio`, its virtual queues sharing one FIFO).
//! * `Single`: one average over the whole queue, updated on every arrival, judged against
//!   per-colour thresholds (WRED; `sch_gred` with `grio` and equal priorities).
//!
//! Seed 001 calls its AQM "RIO-like" (Linux GRED offers RIO as its `grio` mode), and its
//! Table 1 staggers the thresholds as fractions of one queue length L (red below yellow
//! below green, each colour's max_th the next's min_th), which fits averages that grow
//! from green to red; seed 004's TRIO is described as RED with "three dropping functions,
//! one for each color", its name a three-colour RIO. Neither paper spells out the
//! averaging; both point to RIO, so the default is `Coupled` and
//! [`GredParams::seed001_table1`] uses it.
//!
//! Parameters ([`GredParams`]; defaults are those of [`GredParams::seed001_table1`]):
//! * per colour `green`, `yellow`, `red` ([`DropProfile`]): `min_th`, `max_th` (packets or
//!   bytes per `mode`) and `max_p` in (0, 1], exactly as RED's. Table 1: with L = 120 kB
//!   green 0.375L / 0.75L / 0.02, yellow 0.1875L / 0.375L / 0.05, red 0.0875L / 0.1875L /
//!   0.1.
//! * shared: `wq` (0.002), `gentle` (off), `mode` ([`RedMode`]; bytes, `mean_pkt` given),
//!   `idle_pkt_ns` (ns, one `mean_pkt` packet at the link rate), `averaging` (`Coupled`),
//!   `ecn` (off).
//!
//! ECN (`ecn` on; Linux `sch_gred` with its `ecn` and `harddrop` flags): every colour acts
//! on its decision as RED does ([`RedParams::mark_or_drop`], see [`crate::queue::red`]):
//! an early decision on an ECT(0)/ECT(1) packet sets CE and enqueues it (already CE:
//! enqueued as it is; headers the marker cannot read: enqueued unchanged, `unmarkable`);
//! on a packet that is not ECN-capable it drops; a forced decision always drops (RFC 3168
//! section 7: drop rather than mark while the average exceeds the upper threshold), and so
//! do the hard limits. The colour's count resets on a mark as on a drop.
//!
//! [`GredParams::validate`] takes the queue's limits and returns an error for a parameter
//! RED would refuse (named by colour) or a colour whose `max_th` lies above the limit in the
//! mode's unit (the average could never reach it). A profile that lets a lower precedence
//! be dropped before a higher one (green `min_th` or `max_th` below yellow's, or its `max_p`
//! above yellow's; likewise yellow against red) is legal but returned as a warning:
//! RFC 2597 section 2 says a packet of lower drop precedence must not be forwarded with
//! smaller probability than one of higher. The check is on the profiles only: sufficient
//! with `Single` (one average), nearly so with `Coupled` (the averages grow from green to
//! red but are sampled at different arrivals), no guarantee with `Separate`.
//!
//! Statistics ([`GredStats`], per colour): arrivals, early drops, forced drops and tail
//! drops, packets and bytes; `arrived = accepted + early + forced + tail`; ECN marks and
//! unmarkable signals, both among the accepted (not drops). The drops are also reported
//! with their [`DropCause`] to [`crate::Counted`] like any qdisc's, and the sums over the
//! colours as [`AqmStats`] through [`Qdisc::aqm_stats`] (`ecn_marked`, `unmarkable`,
//! `aqm_dropped` = early + forced, `overlimit_dropped` = tail).
//!
//! Invariants: per-colour occupancy ([`GredQueue::held`]) sums to the FIFO's `len()` and
//! `bytes()` and equals what the queue holds after every call (property-tested); packets
//! leave in arrival order; averages follow RED's invariants (finite, >= 0). No allocation
//! per packet; at most three EWMA updates and one RED decision per arrival; randomness only
//! from the caller's seeded [`crate::Rng`] (one draw per arrival in a probabilistic band).
//!
//! [`Meta::color`]: crate::pool::Meta::color

use crate::aqm::{AqmStats, Delivered};
use crate::pool::{Color, PktId};
use crate::qdisc::{Count, Ctx, DropCause, Qdisc};
use crate::queue::fifo::{Fifo, Limits};
use crate::queue::red::{RedMode, RedParams, RedState};
use crate::rate::Rate;
use crate::time::Instant;
use serde::Serialize;

/// Colours by index (green 0, yellow 1, red 2: increasing drop precedence).
const COLORS: [Color; 3] = [Color::Green, Color::Yellow, Color::Red];
const NAMES: [&str; 3] = ["green", "yellow", "red"];

#[inline]
fn index(c: Color) -> usize {
    match c {
        Color::Green => 0,
        Color::Yellow => 1,
        Color::Red => 2,
    }
}

/// RED thresholds and maximum probability of one colour (drop precedence).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct DropProfile {
    /// Lower threshold on the colour's average (packets or bytes per the mode).
    pub min_th: f64,
    /// Upper threshold on the colour's average (packets or bytes per the mode).
    pub max_th: f64,
    /// Drop probability at `avg = max_th`, in (0, 1].
    pub max_p: f64,
}

/// Which packets the average of each colour counts (see the module comment).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum GredAveraging {
    /// RIO: a colour's average counts its own packets and those of lower drop precedence
    /// (green: green; yellow: green + yellow; red: all).
    #[default]
    Coupled,
    /// Each colour's average counts its own packets only.
    Separate,
    /// One average over the whole queue (WRED).
    Single,
}

impl GredAveraging {
    /// Whether the average colour `level` is judged by counts colour-`color` packets (an
    /// arrival of `color` updates exactly the averages that count it).
    #[inline]
    fn counts(self, level: usize, color: usize) -> bool {
        match self {
            GredAveraging::Coupled => color <= level,
            GredAveraging::Separate => color == level,
            GredAveraging::Single => true,
        }
    }
}

/// Three-colour RED parameters (see the module comment).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct GredParams {
    pub green: DropProfile,
    pub yellow: DropProfile,
    pub red: DropProfile,
    /// EWMA weight of the instantaneous queue size, shared by the colours.
    pub wq: f64,
    /// Floyd's gentle variant for every colour.
    pub gentle: bool,
    /// Packets or bytes, for the thresholds and the queue sizes averaged.
    pub mode: RedMode,
    /// `s`: transmission time of a typical packet in ns, for the idle-period decay.
    pub idle_pkt_ns: u64,
    pub averaging: GredAveraging,
    /// Mark ECN-capable packets with CE on early decisions instead of dropping them
    /// (every colour).
    pub ecn: bool,
}

impl GredParams {
    /// Seed 001's queue length L = 120 kB, read as 120 000 bytes (Linux `tc` would read
    /// `120kb` as 122 880; pass that to [`Self::seed001_table1`] to mirror such a script).
    pub const SEED001_QUEUE_BYTES: u64 = 120_000;

    /// Seed 001, Table 1 ("GRED parameters used for experiments"), in byte mode for a queue
    /// of `queue_bytes` (L; [`Self::SEED001_QUEUE_BYTES`], which is also the queue's byte
    /// limit):
    ///
    /// | | green | yellow | red |
    /// |---|---|---|---|
    /// | min_th | 0.375 L | 0.1875 L | 0.0875 L |
    /// | max_th | 0.75 L | 0.375 L | 0.1875 L |
    /// | max_p | 0.02 | 0.05 | 0.1 |
    /// | wq | 0.002 | 0.002 | 0.002 |
    ///
    /// Not in the table, chosen here: `Coupled` averaging (the paper's "RIO-like"), not
    /// gentle, no ECN, `s` = `mean_pkt` bytes at `link`, and `p_b` scaled by
    /// `len / mean_pkt` (RED's byte mode; Linux GRED does not scale, so pass the full-size
    /// frame, 1514, to leave full-size segments at the table's probabilities).
    pub fn seed001_table1(queue_bytes: u64, link: Rate, mean_pkt: u32) -> Self {
        let m = mean_pkt.max(1);
        // Fractions as exact ratios so that L = 120 000 gives whole bytes.
        let l = |num: f64, den: f64| queue_bytes as f64 * num / den;
        GredParams {
            green: DropProfile {
                min_th: l(3.0, 8.0),
                max_th: l(3.0, 4.0),
                max_p: 0.02,
            },
            yellow: DropProfile {
                min_th: l(3.0, 16.0),
                max_th: l(3.0, 8.0),
                max_p: 0.05,
            },
            red: DropProfile {
                min_th: l(7.0, 80.0),
                max_th: l(3.0, 16.0),
                max_p: 0.1,
            },
            wq: 0.002,
            gentle: false,
            mode: RedMode::Bytes { mean_pkt: m },
            idle_pkt_ns: link.tx_ns(m).max(1),
            averaging: GredAveraging::Coupled,
            ecn: false,
        }
    }

    /// The drop profile of colour `c`.
    pub fn profile(&self, c: Color) -> &DropProfile {
        match c {
            Color::Green => &self.green,
            Color::Yellow => &self.yellow,
            Color::Red => &self.red,
        }
    }

    /// The RED parameters colour `c` is decided with (its profile and the shared fields).
    pub fn red_params(&self, c: Color) -> RedParams {
        let p = self.profile(c);
        RedParams {
            min_th: p.min_th,
            max_th: p.max_th,
            max_p: p.max_p,
            wq: self.wq,
            gentle: self.gentle,
            mode: self.mode,
            idle_pkt_ns: self.idle_pkt_ns,
            ecn: self.ecn,
        }
    }

    /// Check the parameters against the queue's limits (`limit_packets` applies in packet
    /// mode, `limit_bytes` in byte mode). `Err` names the colour and the parameter; `Ok`
    /// carries warnings (possibly none) about profiles out of drop-precedence order.
    pub fn validate(&self, limit_packets: u32, limit_bytes: u64) -> Result<Vec<String>, String> {
        let (limit, unit) = match self.mode {
            RedMode::Packets => (limit_packets as f64, "packets"),
            RedMode::Bytes { .. } => (limit_bytes as f64, "bytes"),
        };
        // The shared fields first, with a placeholder profile, so that their messages do not
        // name a colour.
        let shared = RedParams {
            min_th: 1.0,
            max_th: 2.0,
            max_p: 1.0,
            ..self.red_params(Color::Green)
        };
        shared.validate_as("gred")?;
        for (i, &c) in COLORS.iter().enumerate() {
            let who = format!("gred {}", NAMES[i]);
            let p = self.red_params(c);
            p.validate_as(&who)?;
            if p.max_th > limit {
                return Err(format!(
                    "{who}: max_th ({}) is above the queue limit ({limit} {unit}); the \
                     average can never reach it",
                    p.max_th
                ));
            }
        }
        // RFC 2597 section 2: at any average, a packet of lower drop precedence is dropped
        // no more often than one of higher. The curves are piecewise linear (a jump to 1
        // at max_th, or the gentle ramp to 2 max_th), so comparing them at each
        // breakpoint, and just below each, covers every average.
        let mut warnings = Vec::new();
        for (lo, hi) in [(0, 1), (1, 2)] {
            let (a, b) = (self.red_params(COLORS[lo]), self.red_params(COLORS[hi]));
            let mut points: Vec<f64> = [&a, &b]
                .iter()
                .flat_map(|p| [p.min_th, p.max_th, p.forced_threshold()])
                .flat_map(|x| [x, x * (1.0 - 1e-9)])
                .collect();
            points.sort_by(f64::total_cmp);
            let mean = match self.mode {
                RedMode::Packets => 1,
                RedMode::Bytes { mean_pkt } => mean_pkt,
            };
            if let Some(&avg) = points
                .iter()
                .find(|&&x| a.p_b(x, mean) > b.p_b(x, mean) + 1e-12)
            {
                warnings.push(format!(
                    "gred: at an average of {avg:.0} {unit} {} packets would be dropped with \
                     probability {:.3}, {} ones with {:.3}: RFC 2597 section 2 asks that a \
                     lower drop precedence is never dropped more often",
                    NAMES[lo],
                    a.p_b(avg, mean),
                    NAMES[hi],
                    b.p_b(avg, mean)
                ));
            }
        }
        Ok(warnings)
    }
}

/// Per-colour counters of one [`GredQueue`], packets and bytes.
#[derive(Copy, Clone, Default, Debug, PartialEq, Eq, Serialize)]
pub struct ColorStats {
    /// Every packet of this colour offered to `enqueue`.
    pub arrived: Count,
    /// Dropped by RED with probability `p_a` ([`DropCause::RedEarly`]).
    pub early: Count,
    /// Dropped because the colour's average reached its forced threshold
    /// ([`DropCause::RedForced`]).
    pub forced: Count,
    /// Refused by the hard limits ([`DropCause::QueueFull`], [`DropCause::ByteLimit`]).
    pub tail: Count,
    /// Early decisions delivered as a CE mark (`ecn`; already-CE packets included):
    /// accepted, not drops.
    pub marked: Count,
    /// Early decisions on packets whose headers the marker could not read (`ecn`):
    /// accepted unchanged, not drops.
    pub unmarkable: Count,
}

impl ColorStats {
    /// Early + forced + tail drops.
    pub fn dropped(&self) -> Count {
        self.early + self.forced + self.tail
    }

    /// Dropped packets over arrived packets (0 when none arrived).
    pub fn drop_fraction(&self) -> f64 {
        if self.arrived.packets == 0 {
            0.0
        } else {
            self.dropped().packets as f64 / self.arrived.packets as f64
        }
    }
}

/// [`ColorStats`] for each colour.
#[derive(Copy, Clone, Default, Debug, PartialEq, Eq, Serialize)]
pub struct GredStats {
    pub green: ColorStats,
    pub yellow: ColorStats,
    pub red: ColorStats,
}

impl GredStats {
    pub fn color(&self, c: Color) -> &ColorStats {
        match c {
            Color::Green => &self.green,
            Color::Yellow => &self.yellow,
            Color::Red => &self.red,
        }
    }

    /// The colours' counters added up.
    pub fn total(&self) -> ColorStats {
        let [g, y, r] = [&self.green, &self.yellow, &self.red];
        ColorStats {
            arrived: g.arrived + y.arrived + r.arrived,
            early: g.early + y.early + r.early,
            forced: g.forced + y.forced + r.forced,
            tail: g.tail + y.tail + r.tail,
            marked: g.marked + y.marked + r.marked,
            unmarkable: g.unmarkable + y.unmarkable + r.unmarkable,
        }
    }

    fn color_mut(&mut self, c: Color) -> &mut ColorStats {
        match c {
            Color::Green => &mut self.green,
            Color::Yellow => &mut self.yellow,
            Color::Red => &mut self.red,
        }
    }
}

/// Three-colour RED in front of one drop-tail FIFO with hard limits: a [`Qdisc`] for an
/// AF class queue (see the module comment).
#[derive(Clone, Debug)]
pub struct GredQueue {
    fifo: Fifo,
    params: GredParams,
    /// Per colour: its RED parameters (the shared fields are equal in all three).
    red: [RedParams; 3],
    /// Per level: the average (and idle period) the colour is judged by, and the colour's
    /// own count.
    state: [RedState; 3],
    /// Per colour: packets and bytes held.
    held: [Count; 3],
    stats: GredStats,
}

impl GredQueue {
    /// Three-colour RED with `params` over a FIFO of at most `limit_packets` packets and
    /// `limit_bytes` bytes ([`Limits::UNLIMITED_PACKETS`] / [`Limits::UNLIMITED_BYTES`]
    /// for none). Fails as [`GredParams::validate`] does; its warnings are not kept (call
    /// it to show them).
    pub fn new(params: GredParams, limit_packets: u32, limit_bytes: u64) -> Result<Self, String> {
        params.validate(limit_packets, limit_bytes)?;
        Ok(GredQueue {
            fifo: Fifo::new(limit_packets, limit_bytes),
            red: COLORS.map(|c| params.red_params(c)),
            params,
            state: [RedState::new(); 3],
            held: [Count::default(); 3],
            stats: GredStats::default(),
        })
    }

    pub fn params(&self) -> &GredParams {
        &self.params
    }

    pub fn limits(&self) -> Limits {
        self.fifo.limits()
    }

    pub fn stats(&self) -> &GredStats {
        &self.stats
    }

    /// Packets and bytes of colour `c` held.
    pub fn held(&self, c: Color) -> Count {
        self.held[index(c)]
    }

    /// The average colour `c` is judged by (packets or bytes), as of its last update.
    pub fn avg(&self, c: Color) -> f64 {
        self.state[index(c)].avg
    }

    /// Size of what level `level`'s average counts, in the mode's unit.
    #[inline]
    fn level_size(&self, level: usize) -> f64 {
        let counted = (0..3).filter(|&c| self.params.averaging.counts(level, c));
        match self.params.mode {
            RedMode::Packets => counted.map(|c| self.held[c].packets).sum::<u64>() as f64,
            RedMode::Bytes { .. } => counted.map(|c| self.held[c].bytes).sum::<u64>() as f64,
        }
    }

    /// Every level whose colours hold nothing is idle from `now` (or keeps its earlier
    /// start).
    fn start_idle_periods(&mut self, now: Instant) {
        for level in 0..3 {
            let empty = (0..3)
                .filter(|&c| self.params.averaging.counts(level, c))
                .all(|c| self.held[c].packets == 0);
            if empty {
                self.red[level].on_queue_empty(&mut self.state[level], now);
            }
        }
    }

    /// Update the averages that count colour `c`, then RED's decision for it.
    #[inline]
    fn red_decision(&mut self, c: usize, len: u32, cx: &mut Ctx<'_>) -> Option<DropCause> {
        for level in 0..3 {
            if self.params.averaging.counts(level, c) {
                let q = self.level_size(level);
                self.red[level].update_avg(&mut self.state[level], q, cx.now);
            }
        }
        self.red[c].decide(&mut self.state[c], len, cx.rng)
    }
}

impl Qdisc for GredQueue {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let m = cx.pool.meta(pkt);
        let (color, len) = (m.color, m.len);
        let c = index(color);
        self.stats.color_mut(color).arrived.add(len);
        let decision = self.red_decision(c, len, cx);
        let r = self.red[c]
            .mark_or_drop(decision, cx.pool, pkt)
            .and_then(|signal| self.fifo.try_push(cx.pool, pkt).map(|()| signal));
        match r {
            Ok(signal) => {
                self.held[c].add(len);
                let s = self.stats.color_mut(color);
                match signal {
                    None => {}
                    Some(Delivered::Ce) => s.marked.add(len),
                    Some(Delivered::Unmarkable) => s.unmarkable.add(len),
                }
            }
            Err(cause) => {
                let s = self.stats.color_mut(color);
                match cause {
                    DropCause::RedEarly => s.early.add(len),
                    DropCause::RedForced => s.forced.add(len),
                    _ => s.tail.add(len),
                }
            }
        }
        r.map(|_| ())
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        let p = self.fifo.pop(cx.pool);
        if let Some(id) = p {
            let m = cx.pool.meta(id);
            let h = &mut self.held[index(m.color)];
            h.packets -= 1;
            h.bytes -= m.len as u64;
        }
        self.start_idle_periods(cx.now);
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
        self.held = [Count::default(); 3];
        self.start_idle_periods(cx.now);
    }

    fn aqm_stats(&self) -> Option<AqmStats> {
        let t = self.stats.total();
        Some(AqmStats {
            ecn_marked: t.marked.packets,
            unmarkable: t.unmarkable.packets,
            aqm_dropped: (t.early + t.forced).packets,
            overlimit_dropped: t.tail.packets,
            ..AqmStats::default()
        })
    }
}

#[cfg(test)]
mod tests;
