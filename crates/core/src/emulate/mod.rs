//! WAN link emulation: per-profile rate, delay, jitter, loss, duplication, corruption and
//! reordering, as one [`Qdisc`].
//!
//! Files, one component each:
//!
//! | file | what |
//! |---|---|
//! | `dist.rs` | [`Jitter`]: delay-jitter distributions (uniform, normal, Pareto, NIST Net paretonormal, netem tables) |
//! | `table.rs` | [`table::DistTable`]: iproute2 `.dist` distribution tables |
//! | `corr.rs` | [`corr::Chance`] / [`corr::Ar1`]: correlated events and correlated jitter |
//! | `loss.rs` | [`LossModel`] / [`Loss`]: Bernoulli, periodic, Gilbert–Elliott, netem's 4-state model; frame corruption |
//! | `slot.rs` | [`slot::Slot`]: slotted delivery (netem's `slot`) |
//! | `netem_args.rs` | [`netem_args::parse`]: a tc-netem argument string → [`EmuConfig`] |
//! | `link.rs` | [`EmuLink`]: one emulated link (loss → queue → serialiser → delay line) |
//! | `capacity.rs` | [`Capacity`]: a rate that changes over time (a schedule, a Mahimahi trace) |
//! | `mod.rs` | [`EmuConfig`] + [`EmuConfig::validate`], [`EmuError`], [`Emulator`] |
//!
//! [`Emulator`] holds several [`EmuLink`]s ("profiles") and sends each packet to the
//! profile selected by a per-packet key — by default the classifier rule that matched
//! (`Meta::rule`), or the leaf class (`Meta::class`) — through a routing table; keys
//! without a route (including `u16::MAX`, "no rule matched") go to the default profile,
//! profile 0. This is how different sessions or routes see different impairments, as the
//! wan-emu devices of seed 000 (Table 5: per-session WAN delays of 10/50/100/150 ms,
//! periodic loss rates of 0.5–8 %) do. Profiles are independent links: each has its own
//! serialiser, queue, delay line and loss state.
//!
//! The emulator releases packets across profiles in release-time order: an
//! [`IndexedHeap`] keyed by each profile's head release time gives the next packet in
//! O(log profiles); `next_wakeup()` is its minimum. Non-work-conserving: `dequeue` returns
//! `None` until the earliest release time.
//!
//! Statistics: per profile, [`EmuLink::stats`] (a [`QStats`] in which duplicates count as
//! arrivals) and [`EmuLink::counters`]; [`Emulator::total`] sums them and
//! [`Emulator::check`] verifies every profile's identities. As for a single link, a
//! [`crate::Counted`] wrapper around the emulator sees only original packets: its identities
//! (and `Counted::held`) are right only when no profile duplicates, so the emulator is
//! best used unwrapped, as the last stage, with its own statistics.
//!
//! Invariants: every packet held is in exactly one profile; the heap holds exactly the
//! non-empty profiles keyed by their head release; `len()`/`bytes()` are the sums over
//! profiles; no allocation per packet; no panic on any input (an out-of-range profile in
//! [`Emulator::enqueue_to`] is refused with [`DropCause::Policy`]).

pub mod capacity;
pub mod corr;
pub mod dist;
pub mod link;
pub mod loss;
pub mod mmlog;
pub mod netem_args;
pub mod path;
pub mod slot;
pub mod spec;
pub mod table;

pub use capacity::Capacity;
pub use dist::Jitter;
pub use link::{EmuCounters, EmuLink, QueueDelay, OVERHEAD_ETHERNET, OVERHEAD_FCS};
pub use loss::{Loss, LossModel};
pub use mmlog::{LinkEvent, MmLogWriter};

use crate::framing::Framing;
use crate::meter::token_bucket::MAX_FRAME;
use crate::pool::{Meta, PktId};
use crate::qdisc::{Ctx, DropCause, QStats, Qdisc};
use crate::queue::fifo::Limits;
use crate::sched::heap::IndexedHeap;
use crate::time::{Duration, Instant};

/// A configuration error, naming the parameter.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EmuError {
    #[error("emulate: {what} must be a probability in [0, 1] (got {value})")]
    Probability { what: &'static str, value: f64 },
    #[error("emulate: periodic loss needs every >= 1 (every = 0 would divide by zero)")]
    PeriodicZero,
    #[error("emulate: pareto alpha must be finite and > 1 so that the mean exists (got {0})")]
    ParetoAlpha(f64),
    #[error("emulate: {what} must be at most 1 hour (got {ns} ns)")]
    TooLong { what: &'static str, ns: u64 },
    #[error("emulate: rate must be at least 8 bit/s (got {0} bit/s)")]
    RateTooLow(u64),
    #[error("emulate: a fixed rate and a rate schedule or trace: give one")]
    RateAndCapacity,
    #[error("emulate: overhead must be within +-{max} bytes (got {0})", max = EmuConfig::MAX_OVERHEAD)]
    Overhead(i32),
    #[error("emulate: mtu must be in 1..={max} bytes (got {0})", max = MAX_FRAME)]
    Mtu(u32),
    #[error("emulate: limit_packets must be > 0 (0 would refuse every packet)")]
    ZeroPacketLimit,
    #[error("emulate: limit_bytes ({limit}) must be at least the MTU ({mtu} bytes)")]
    ByteLimitBelowMtu { limit: u64, mtu: u32 },
    #[error("emulate: no profile {0}")]
    NoProfile(usize),
    #[error("emulate: at most {max} profiles", max = Emulator::MAX_PROFILES)]
    TooManyProfiles,
    #[error("emulate: routing key {0} is above {max}", max = Emulator::MAX_KEY)]
    KeyTooLarge(u32),
    #[error("emulate: {what} must be within 0%..100% (got {value})")]
    Correlation { what: &'static str, value: f64 },
    #[error("emulate: slot MIN ({min} ns) is above MAX ({max} ns)")]
    SlotMinMax { min: u64, max: u64 },
    #[error("emulate: slot packets and bytes must be >= 1 when given")]
    SlotBudget,
    #[error("emulate: reorder gap must be >= 1 (1: every packet may be sent early)")]
    ReorderGap,
    #[error("emulate: a drop-head queue needs a rate (without one nothing waits) and packets in order (no jitter reordering)")]
    DropHead,
    #[error("emulate: 'once' plays a delivery trace once: the link has no trace")]
    OnceWithoutTrace,
    #[error("emulate: {0}")]
    Schedule(String),
    #[error("emulate: {0}")]
    Codel(String),
}

/// What a full queue in front of the serialiser drops (`mm-link`'s `droptail` and
/// `drophead` queues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueDrop {
    /// The arriving packet (netem, `mm-link --…-queue=droptail`).
    #[default]
    Tail,
    /// The packet that waited longest (`mm-link --…-queue=drophead`): the arrival is
    /// admitted and the oldest waiting packets are dropped until the limits hold.
    Head,
}

/// `value` is a correlation: finite, in [0, 1].
pub(crate) fn check_corr(what: &'static str, value: f64) -> Result<(), EmuError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(EmuError::Correlation { what, value })
    }
}

/// netem's `reorder P [C] [gap N]`: after `gap − 1` packets delayed as usual, each packet
/// is sent at once (ahead of the delayed ones, skipping the serialiser, the delay and the
/// slots) with probability `probability` (lag-1 correlation `correlation`, see
/// [`corr`]); one sent early restarts the count. `gap = 1`: every packet may be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reorder {
    pub probability: f64,
    pub correlation: f64,
    pub gap: u32,
}

impl Reorder {
    /// No packet is sent early.
    pub const NONE: Reorder = Reorder {
        probability: 0.0,
        correlation: 0.0,
        gap: 1,
    };

    pub fn is_none(&self) -> bool {
        self.probability == 0.0
    }

    /// The long-run fraction of packets sent early, uncorrelated: with `g = gap` and
    /// `p = probability`, a cycle is `g − 1` delayed packets then a geometric number of
    /// trials until one is early (mean `1/p`), so `1 / (g − 1 + 1/p)`; `p` for `g = 1`.
    pub fn expected_fraction(&self) -> f64 {
        if self.probability <= 0.0 {
            return 0.0;
        }
        1.0 / (f64::from(self.gap.max(1) - 1) + 1.0 / self.probability)
    }

    pub fn validate(&self) -> Result<(), EmuError> {
        check_prob("reorder probability", self.probability)?;
        check_corr("reorder correlation", self.correlation)?;
        if self.probability > 0.0 && self.gap == 0 {
            return Err(EmuError::ReorderGap);
        }
        Ok(())
    }
}

impl Default for Reorder {
    fn default() -> Self {
        Reorder::NONE
    }
}

/// `value` is a probability: finite, in [0, 1].
pub(crate) fn check_prob(what: &'static str, value: f64) -> Result<(), EmuError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(EmuError::Probability { what, value })
    }
}

/// Configuration of one emulated link (see `link.rs` for the model). Plain data: build it
/// with struct-update syntax from [`EmuConfig::default`], which emulates nothing (a
/// transparent link).
#[derive(Clone, Debug, PartialEq)]
pub struct EmuConfig {
    /// Link rate in bit/s (>= 8); `None` = infinitely fast (no serialisation, no queue),
    /// unless `capacity` is set.
    pub rate_bps: Option<u64>,
    /// A rate that changes over time (a schedule or a delivery trace) instead of
    /// `rate_bps` (not both).
    pub capacity: Option<Capacity>,
    /// How a frame's `Meta::len` becomes bytes to serialise: bytes added to each frame
    /// (±4096; [`OVERHEAD_FCS`] = 4, [`OVERHEAD_ETHERNET`] = 24), a minimum, ATM cells or
    /// PTM coding ([`Framing`]). Default: the frame as it is.
    pub framing: Framing,
    /// Largest frame, bytes (for the default queue size). Default 1514.
    pub mtu: u32,
    /// Mean one-way delay added after serialisation (<= 1 hour). Default 0.
    pub delay: Duration,
    /// Delay jitter around `delay`. Default none.
    pub jitter: Jitter,
    /// Lag-1 autocorrelation of successive jitter offsets, in [0, 1] (netem's `delay D J
    /// C`; see [`corr`]). Default 0.
    pub jitter_correlation: f64,
    /// Let jitter reorder packets (`true`) or keep FIFO order (`false`, default).
    pub reorder: bool,
    /// Loss model applied on arrival. Default none.
    pub loss: LossModel,
    /// Probability that a packet is duplicated. Default 0.
    pub duplicate: f64,
    /// Lag-1 autocorrelation of duplications, in [0, 1]. Default 0.
    pub duplicate_correlation: f64,
    /// Probability that one bit of a packet is flipped. Default 0.
    pub corrupt: f64,
    /// Lag-1 autocorrelation of corruptions, in [0, 1]. Default 0.
    pub corrupt_correlation: f64,
    /// netem's `reorder`: packets sent at once, ahead of the delayed ones. Default none.
    pub reorder_early: Reorder,
    /// netem's `slot`: packets leave only in slots. Default none.
    pub slot: Option<slot::Slot>,
    /// netem's `ecn`: a packet the loss model loses is marked CE instead when it is
    /// ECN-capable (and sent unchanged when its headers cannot be read). Default false.
    pub ecn: bool,
    /// Queue limit in packets waiting for the serialiser. `None`: see [`EmuConfig::limits`].
    pub limit_packets: Option<u32>,
    /// Queue limit in bytes waiting for the serialiser. `None`: see [`EmuConfig::limits`].
    pub limit_bytes: Option<u64>,
    /// netem's `limit`: at most this many packets held by the link in all (waiting, being
    /// serialised, in the delay line); one more arriving is refused (`QueueFull`). `None`:
    /// no such limit.
    pub limit_held: Option<u32>,
    /// What a full queue drops. Default the arrival.
    pub queue_drop: QueueDrop,
    /// Play a delivery trace once (`mm-link --once`): after its last opportunity the link
    /// delivers nothing. Default false (the trace repeats).
    pub once: bool,
    /// Delay and loss that change over time, and outages ([`path`]); a delay schedule
    /// replaces `delay`, a loss schedule `loss`. Default none.
    pub path: path::Path,
    /// CoDel on the queue in front of the serialiser (`mm-link`'s `codel` queue), on top
    /// of the limits. Default none.
    pub codel: Option<QueueCodel>,
}

/// `mm-link`'s CoDel queue: RFC 8289 with `target` and `interval`; `ecn` marks CE on
/// ECN-capable frames instead of dropping them (`mm-link` drops).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueCodel {
    pub target: Duration,
    pub interval: Duration,
    pub ecn: bool,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            rate_bps: None,
            capacity: None,
            framing: Framing::default(),
            mtu: Self::DEFAULT_MTU,
            delay: Duration::ZERO,
            jitter: Jitter::None,
            jitter_correlation: 0.0,
            reorder: false,
            loss: LossModel::None,
            duplicate: 0.0,
            duplicate_correlation: 0.0,
            corrupt: 0.0,
            corrupt_correlation: 0.0,
            reorder_early: Reorder::NONE,
            slot: None,
            ecn: false,
            limit_packets: None,
            limit_bytes: None,
            limit_held: None,
            queue_drop: QueueDrop::Tail,
            once: false,
            path: path::Path::default(),
            codel: None,
        }
    }
}

impl EmuConfig {
    /// Ethernet frame without FCS, bytes.
    pub const DEFAULT_MTU: u32 = 1514;
    /// Default packet limit with a rate but no delay (netem's default `limit`).
    pub const DEFAULT_LIMIT_PACKETS: u32 = 1000;
    pub const MAX_OVERHEAD: i32 = Framing::MAX_OVERHEAD;
    /// Largest `delay` and jitter width.
    pub const MAX_DELAY: Duration = Duration(dist::MAX_DELAY_NS);

    /// The rate the queue is sized by: `rate_bps`, or a varying capacity's peak.
    pub fn sizing_bps(&self) -> Option<u64> {
        self.rate_bps
            .or(self.capacity.as_ref().map(Capacity::peak_bps))
    }

    /// The bandwidth-delay product `rate × delay / 8` in bytes, when both are given (a
    /// varying capacity counts at its peak).
    pub fn bdp_bytes(&self) -> Option<u64> {
        let bps = self.sizing_bps()?;
        if self.delay.0 == 0 {
            return None;
        }
        let b = bps as u128 * self.delay.0 as u128 / 8_000_000_000u128;
        Some(b.min(u64::MAX as u128) as u64)
    }

    /// The queue limits in force. If either limit is given, the given ones (the other
    /// unlimited). Otherwise: with a rate and a delay, `max(BDP, 2 × mtu)` bytes (seed 002:
    /// a queue of one bandwidth-delay product absorbs any burst the path could hold
    /// without artifact loss); with a rate only, [`Self::DEFAULT_LIMIT_PACKETS`] packets;
    /// without a rate, unlimited (nothing ever waits).
    pub fn limits(&self) -> Limits {
        if self.limit_packets.is_some() || self.limit_bytes.is_some() {
            return Limits::new(
                self.limit_packets.unwrap_or(Limits::UNLIMITED_PACKETS),
                self.limit_bytes.unwrap_or(Limits::UNLIMITED_BYTES),
            );
        }
        match (self.sizing_bps(), self.bdp_bytes()) {
            (Some(_), Some(bdp)) => {
                Limits::new(Limits::UNLIMITED_PACKETS, bdp.max(2 * self.mtu as u64))
            }
            (Some(_), None) => Limits::new(Self::DEFAULT_LIMIT_PACKETS, Limits::UNLIMITED_BYTES),
            (None, _) => Limits::UNLIMITED,
        }
    }

    /// Whether the link changes nothing (no rate, delay, jitter, loss, duplication,
    /// corruption, early sending or slots).
    pub fn is_transparent(&self) -> bool {
        self.rate_bps.is_none()
            && self.capacity.is_none()
            && self.delay.0 == 0
            && self.jitter.is_none()
            && self.loss == LossModel::None
            && self.duplicate == 0.0
            && self.corrupt == 0.0
            && self.reorder_early.is_none()
            && self.slot.is_none()
            && self.path.is_empty()
    }

    /// Check every parameter; the error names the first offending one.
    pub fn validate(&self) -> Result<(), EmuError> {
        if let Some(bps) = self.rate_bps {
            if bps < 8 {
                return Err(EmuError::RateTooLow(bps));
            }
            if self.capacity.is_some() {
                return Err(EmuError::RateAndCapacity);
            }
        }
        if self.framing.overhead().abs() > Self::MAX_OVERHEAD {
            return Err(EmuError::Overhead(self.framing.overhead()));
        }
        if self.mtu == 0 || self.mtu > MAX_FRAME {
            return Err(EmuError::Mtu(self.mtu));
        }
        if self.delay > Self::MAX_DELAY {
            return Err(EmuError::TooLong {
                what: "delay",
                ns: self.delay.0,
            });
        }
        self.jitter.validate()?;
        check_corr("jitter correlation", self.jitter_correlation)?;
        self.loss.validate()?;
        check_prob("duplicate probability", self.duplicate)?;
        check_corr("duplicate correlation", self.duplicate_correlation)?;
        check_prob("corrupt probability", self.corrupt)?;
        check_corr("corrupt correlation", self.corrupt_correlation)?;
        self.reorder_early.validate()?;
        if let Some(s) = &self.slot {
            s.validate()?;
        }
        if self.queue_drop == QueueDrop::Head && (self.sizing_bps().is_none() || self.reorder) {
            return Err(EmuError::DropHead);
        }
        if let Some(c) = &self.codel {
            if self.sizing_bps().is_none() || self.reorder || self.queue_drop == QueueDrop::Head {
                return Err(EmuError::Codel("a CoDel queue needs a rate (without one nothing waits), packets in order (no jitter reordering) and drop-tail limits".into()));
            }
            if c.target.0 == 0 || c.interval.0 <= c.target.0 {
                return Err(EmuError::Codel(format!(
                    "CoDel's target ({} ns) must be above 0 and below its interval ({} ns)",
                    c.target.0, c.interval.0
                )));
            }
        }
        self.path.validate()?;
        if self.once && !matches!(self.capacity, Some(Capacity::Trace(_))) {
            return Err(EmuError::OnceWithoutTrace);
        }
        if self.limit_packets == Some(0) || self.limit_held == Some(0) {
            return Err(EmuError::ZeroPacketLimit);
        }
        if let Some(limit) = self.limit_bytes {
            if limit < self.mtu as u64 {
                return Err(EmuError::ByteLimitBelowMtu {
                    limit,
                    mtu: self.mtu,
                });
            }
        }
        Ok(())
    }
}

/// Which packet metadata selects the profile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Select {
    /// `Meta::rule` (the classifier rule that matched; `u16::MAX` = none).
    #[default]
    Rule,
    /// `Meta::class` (the leaf class).
    Class,
}

const NO_ROUTE: u16 = u16::MAX;

/// Several emulated links selected per packet (see the module comment).
#[derive(Clone, Debug)]
pub struct Emulator {
    links: Vec<EmuLink>,
    /// Routing key → profile (`NO_ROUTE` = the default profile 0).
    route: Vec<u16>,
    select: Select,
    /// Non-empty profiles keyed by their head release time (ns).
    ready: IndexedHeap,
    held: usize,
    held_bytes: u64,
}

impl Emulator {
    /// Profiles are numbered `0..MAX_PROFILES`.
    pub const MAX_PROFILES: usize = u16::MAX as usize;
    /// Largest routing key.
    pub const MAX_KEY: u32 = 1 << 20;

    /// An emulator whose default profile (0) is `default`, selecting by [`Select::Rule`].
    pub fn new(default: EmuConfig) -> Result<Self, EmuError> {
        Ok(Emulator {
            links: vec![EmuLink::new(default)?],
            route: Vec::new(),
            select: Select::Rule,
            ready: IndexedHeap::with_ids(1),
            held: 0,
            held_bytes: 0,
        })
    }

    /// Select profiles by `select` instead.
    pub fn with_select(mut self, select: Select) -> Self {
        self.select = select;
        self
    }

    pub fn select(&self) -> Select {
        self.select
    }

    /// Add a profile; returns its index.
    pub fn add_profile(&mut self, cfg: EmuConfig) -> Result<usize, EmuError> {
        if self.links.len() >= Self::MAX_PROFILES {
            return Err(EmuError::TooManyProfiles);
        }
        self.links.push(EmuLink::new(cfg)?);
        self.ready.grow(self.links.len());
        Ok(self.links.len() - 1)
    }

    /// Send packets whose key is `key` to `profile` (`u16::MAX` may be routed too, to
    /// move "no rule matched" off profile 0).
    pub fn route(&mut self, key: u32, profile: usize) -> Result<(), EmuError> {
        if key > Self::MAX_KEY {
            return Err(EmuError::KeyTooLarge(key));
        }
        if profile >= self.links.len() {
            return Err(EmuError::NoProfile(profile));
        }
        let k = key as usize;
        if self.route.len() <= k {
            self.route.resize(k + 1, NO_ROUTE);
        }
        self.route[k] = profile as u16;
        Ok(())
    }

    /// Remove `key`'s route (back to the default profile).
    pub fn unroute(&mut self, key: u32) {
        if let Some(r) = self.route.get_mut(key as usize) {
            *r = NO_ROUTE;
        }
    }

    /// Replace profile `i`'s configuration at run time, keeping its packets.
    pub fn reconfigure(&mut self, i: usize, cfg: EmuConfig) -> Result<(), EmuError> {
        let l = self.links.get_mut(i).ok_or(EmuError::NoProfile(i))?;
        l.reconfigure(cfg)?;
        self.rekey(i);
        Ok(())
    }

    /// Put `link` in place of profile `i` (its queue, delay line and state with it) and
    /// return the link that was there: how a policy reload keeps a profile's packets and
    /// their release times. `None` if there is no profile `i`.
    pub fn replace_profile(&mut self, i: usize, link: EmuLink) -> Option<EmuLink> {
        let slot = self.links.get_mut(i)?;
        let old = std::mem::replace(slot, link);
        let new = &self.links[i];
        self.held = (self.held + Qdisc::len(new)).saturating_sub(Qdisc::len(&old));
        self.held_bytes = (self.held_bytes + new.bytes()).saturating_sub(old.bytes());
        self.rekey(i);
        Some(old)
    }

    pub fn profiles(&self) -> &[EmuLink] {
        &self.links
    }

    /// Profile `i`, mutable (to log its events: [`EmuLink::set_logging`]).
    pub fn profile_mut(&mut self, i: usize) -> Option<&mut EmuLink> {
        self.links.get_mut(i)
    }

    pub fn profile(&self, i: usize) -> Option<&EmuLink> {
        self.links.get(i)
    }

    /// The profile packets with routing key `key` go to.
    pub fn profile_for_key(&self, key: u32) -> usize {
        match self.route.get(key as usize) {
            Some(&p) if p != NO_ROUTE => p as usize,
            _ => 0,
        }
    }

    /// The profile a packet with metadata `m` goes to.
    #[inline]
    pub fn profile_for(&self, m: &Meta) -> usize {
        let key = match self.select {
            Select::Rule => m.rule as usize,
            Select::Class => m.class as usize,
        };
        match self.route.get(key) {
            Some(&p) if p != NO_ROUTE => p as usize,
            _ => 0,
        }
    }

    /// Enqueue `pkt` into profile `profile` explicitly (the caller selected it), as
    /// reaching the link at `at` (see [`EmuLink::enqueue_at`]).
    pub fn enqueue_to(
        &mut self,
        profile: usize,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        at: Instant,
    ) -> Result<(), DropCause> {
        let Some(l) = self.links.get_mut(profile) else {
            return Err(DropCause::Policy);
        };
        let (n0, b0) = (Qdisc::len(l), l.bytes());
        let r = l.enqueue_at(pkt, cx, at);
        let (n1, b1) = (Qdisc::len(l), l.bytes());
        // what the enqueue added (the original, maybe a copy) less what a drop-head queue
        // dropped to make room
        self.held = (self.held + n1).saturating_sub(n0);
        self.held_bytes = (self.held_bytes + b1).saturating_sub(b0);
        self.rekey(profile);
        r
    }

    /// The sum of every profile's statistics.
    pub fn total(&self) -> QStats {
        let mut t = QStats::default();
        for l in &self.links {
            let s = l.stats();
            t.received = t.received + s.received;
            t.enqueued = t.enqueued + s.enqueued;
            t.dequeued = t.dequeued + s.dequeued;
            t.dropped_on_enqueue = t.dropped_on_enqueue + s.dropped_on_enqueue;
            t.dropped_later = t.dropped_later + s.dropped_later;
            for (a, b) in t.drops.iter_mut().zip(s.drops.iter()) {
                *a = *a + *b;
            }
        }
        t
    }

    /// Verify every profile's counter identities and the emulator's totals.
    pub fn check(&self) -> Result<(), String> {
        for (i, l) in self.links.iter().enumerate() {
            l.check().map_err(|e| format!("profile {i}: {e}"))?;
        }
        let n: usize = self.links.iter().map(Qdisc::len).sum();
        let b: u64 = self.links.iter().map(Qdisc::bytes).sum();
        if (n, b) != (self.held, self.held_bytes) {
            return Err(format!(
                "held ({}, {}) != sum over profiles ({n}, {b})",
                self.held, self.held_bytes
            ));
        }
        self.total().check(n, b)
    }

    #[inline]
    fn rekey(&mut self, i: usize) {
        match self.links[i].head_release() {
            Some(t) => self.ready.set(i as u32, t),
            None => {
                self.ready.remove(i as u32);
            }
        }
    }
}

impl Emulator {
    /// Enqueue `pkt` into the profile its metadata selects, as reaching the emulator at
    /// `at` (≤ `cx.now`).
    #[inline]
    pub fn enqueue_at(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        at: Instant,
    ) -> Result<(), DropCause> {
        let p = self.profile_for(cx.pool.meta(pkt));
        self.enqueue_to(p, pkt, cx, at)
    }
}

impl Qdisc for Emulator {
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let now = cx.now;
        self.enqueue_at(pkt, cx, now)
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        // A slotted profile whose head was due may draw a later slot instead and return
        // nothing (`slot.rs`, rule 2; at most once per head), and a profile with CoDel may
        // only judge (and drop) frames: then another profile may still be due now.
        for _ in 0..3 {
            let (t, i) = self.ready.peek()?;
            if t > cx.now.0 {
                return None;
            }
            let i = i as usize;
            let l = &mut self.links[i];
            let (n0, b0) = (Qdisc::len(l), l.bytes());
            let r = l.dequeue(cx);
            // what left: the packet returned and any its CoDel dropped
            let (n1, b1) = (Qdisc::len(l), l.bytes());
            self.held = (self.held + n1).saturating_sub(n0);
            self.held_bytes = (self.held_bytes + b1).saturating_sub(b0);
            self.rekey(i);
            if r.is_some() {
                return r;
            }
        }
        None
    }

    fn next_wakeup(&self) -> Option<Instant> {
        self.ready.peek().map(|(t, _)| Instant(t))
    }

    fn len(&self) -> usize {
        self.held
    }

    fn bytes(&self) -> u64 {
        self.held_bytes
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for i in 0..self.links.len() {
            self.links[i].purge(cx, cause);
            self.rekey(i);
        }
        self.held = 0;
        self.held_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::rng::Rng;

    #[test]
    fn validate_names_each_problem() {
        let ok = EmuConfig::default();
        assert!(ok.validate().is_ok());
        assert!(ok.is_transparent());
        let bad = |c: EmuConfig| c.validate().unwrap_err();
        assert_eq!(
            bad(EmuConfig {
                rate_bps: Some(7),
                ..ok.clone()
            }),
            EmuError::RateTooLow(7)
        );
        assert!(matches!(
            bad(EmuConfig {
                duplicate: f64::NAN,
                ..ok.clone()
            }),
            EmuError::Probability {
                what: "duplicate probability",
                ..
            }
        ));
        assert!(matches!(
            bad(EmuConfig {
                corrupt: -0.5,
                ..ok.clone()
            }),
            EmuError::Probability {
                what: "corrupt probability",
                ..
            }
        ));
        assert!(matches!(
            bad(EmuConfig {
                loss: LossModel::Bernoulli { p: 1.5 },
                ..ok.clone()
            }),
            EmuError::Probability {
                what: "loss probability",
                ..
            }
        ));
        assert_eq!(
            bad(EmuConfig {
                loss: LossModel::Periodic { every: 0 },
                ..ok.clone()
            }),
            EmuError::PeriodicZero
        );
        assert_eq!(
            bad(EmuConfig {
                jitter: Jitter::Pareto {
                    scale: 10,
                    alpha: 0.9
                },
                ..ok.clone()
            }),
            EmuError::ParetoAlpha(0.9)
        );
        assert!(matches!(
            bad(EmuConfig {
                delay: Duration::from_secs(3601),
                ..ok.clone()
            }),
            EmuError::TooLong { what: "delay", .. }
        ));
        assert_eq!(
            bad(EmuConfig {
                framing: Framing::plain(5000),
                ..ok.clone()
            }),
            EmuError::Overhead(5000)
        );
        assert_eq!(
            bad(EmuConfig {
                mtu: 0,
                ..ok.clone()
            }),
            EmuError::Mtu(0)
        );
        assert_eq!(
            bad(EmuConfig {
                limit_packets: Some(0),
                ..ok.clone()
            }),
            EmuError::ZeroPacketLimit
        );
        assert_eq!(
            bad(EmuConfig {
                limit_bytes: Some(100),
                ..ok.clone()
            }),
            EmuError::ByteLimitBelowMtu {
                limit: 100,
                mtu: 1514
            }
        );
        let msg = bad(EmuConfig {
            loss: LossModel::gilbert(0.1, f64::INFINITY),
            ..ok
        })
        .to_string();
        assert!(
            msg.contains("r (bad to good)") && msg.contains("inf"),
            "{msg}"
        );
    }

    #[test]
    fn default_limits() {
        // Seed 002: 155 Mbit/s, 125 ms → BDP 2 421 875 bytes.
        let c = EmuConfig {
            rate_bps: Some(155_000_000),
            delay: Duration::from_millis(125),
            ..EmuConfig::default()
        };
        assert_eq!(c.bdp_bytes(), Some(2_421_875));
        assert_eq!(c.limits(), Limits::new(u32::MAX, 2_421_875));
        // Tiny BDP: at least 2 MTU.
        let c = EmuConfig {
            rate_bps: Some(64_000),
            delay: Duration::from_millis(1),
            ..EmuConfig::default()
        };
        assert_eq!(c.limits(), Limits::new(u32::MAX, 3028));
        // Rate only: 1000 packets; nothing: unlimited; explicit: as given.
        let c = EmuConfig {
            rate_bps: Some(64_000),
            ..EmuConfig::default()
        };
        assert_eq!(c.limits(), Limits::new(1000, u64::MAX));
        assert_eq!(EmuConfig::default().limits(), Limits::UNLIMITED);
        let c = EmuConfig {
            rate_bps: Some(64_000),
            delay: Duration::from_millis(100),
            limit_packets: Some(50),
            ..EmuConfig::default()
        };
        assert_eq!(c.limits(), Limits::new(50, u64::MAX));
    }

    #[test]
    fn routes_by_rule_with_default_profile() {
        let mut e = Emulator::new(EmuConfig::default()).unwrap();
        let slow = e
            .add_profile(EmuConfig {
                delay: Duration::from_millis(150),
                ..EmuConfig::default()
            })
            .unwrap();
        let fast = e
            .add_profile(EmuConfig {
                delay: Duration::from_millis(10),
                ..EmuConfig::default()
            })
            .unwrap();
        e.route(3, slow).unwrap();
        e.route(4, fast).unwrap();
        assert_eq!(e.route(5, 9), Err(EmuError::NoProfile(9)));
        assert!(e.route(Emulator::MAX_KEY + 1, 0).is_err());
        let mut pool = Pool::new(16, 0);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let mk = |cx: &mut Ctx<'_>, rule: u16| {
            let id = cx.pool.alloc().unwrap();
            cx.pool.meta_mut(id).len = 100;
            cx.pool.meta_mut(id).rule = rule;
            id
        };
        let a = mk(&mut cx, 3);
        let b = mk(&mut cx, 4);
        let c = mk(&mut cx, u16::MAX);
        let d = mk(&mut cx, 77); // unrouted rule: default profile
        for id in [a, b, c, d] {
            e.enqueue(id, &mut cx).unwrap();
        }
        assert_eq!(Qdisc::len(&e), 4);
        assert_eq!(e.profile(slow).map(Qdisc::len), Some(1));
        assert_eq!(e.profile(0).map(Qdisc::len), Some(2));
        // Default profile passes at once, then 10 ms, then 150 ms.
        assert_eq!(e.next_wakeup(), Some(Instant::ZERO));
        let mut got = Vec::new();
        while let Some(t) = e.next_wakeup() {
            cx.now = t;
            let id = e.dequeue(&mut cx).unwrap();
            got.push((t.0, id));
            e.check().unwrap();
        }
        assert_eq!(got[2], (10_000_000, b));
        assert_eq!(got[3], (150_000_000, a));
        assert_eq!(
            e.enqueue_to(99, a, &mut cx, Instant::ZERO),
            Err(DropCause::Policy)
        );
        e.unroute(3);
        assert_eq!(e.profile_for(cx.pool.meta(a)), 0);
        let e = e.with_select(Select::Class);
        assert_eq!(e.profile_for(cx.pool.meta(b)), 0);
    }
}
