//! Discrete-event simulation of a qdisc on the virtual clock: the engine's own test bench
//! and the core of `weir sim`.
//!
//! Synthetic sessions feed pre-classified packets (`Meta::class` and `Meta::flow` set, no
//! header bytes) into a [`Qdisc`] — normally the policy's link-sharing scheduler — whose
//! output is an infinitely fast wire: the scheduler's root class is what limits the rate.
//! Two source models:
//! * `Source::Window(w)` — closed loop, "always backlogged": the session keeps `w` packets
//!   inside the device and sends a new one the instant one leaves (an ACK clock with zero
//!   RTT). A refused packet is retried after `retry` (like a retransmission timeout).
//!   With FIFO queuing, sessions share a class in proportion to their windows — the
//!   unfairness per-flow queuing removes.
//! * `Source::Rate(r)` — open loop constant bit rate at `r`; what the device cannot take is
//!   dropped and counted.
//!
//! A session may be silent during `idle` intervals (it sends nothing new; what it has
//! queued still drains). The run reports, per session, bytes delivered in the measurement
//! window `[warmup, duration)`, drops, a per-interval series of delivered bytes, and the
//! delay from the end of each idle interval to the session's next delivery.
//!
//! Deterministic: the same inputs and seed give the same result.

use crate::pool::{PktId, Pool};
use crate::qdisc::{Count, Ctx, DropCause, Qdisc};
use crate::rate::Rate;
use crate::rng::Rng;
use crate::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub enum Source {
    Window(u32),
    Rate(Rate),
}

#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// Leaf class the session's packets are classified into.
    pub class: u32,
    /// Flow hash carried in `Meta::flow`.
    pub flow: u64,
    /// Frame size in bytes.
    pub size: u32,
    pub source: Source,
    /// Half-open intervals `[from, to)` during which the session sends nothing new.
    pub idle: Vec<(Instant, Instant)>,
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub duration: Duration,
    /// Measurement starts here (deliveries before it are not counted in `delivered`).
    pub warmup: Duration,
    /// Bucket width of the per-session series.
    pub interval: Duration,
    /// Retry delay for a window source whose packet was refused.
    pub retry: Duration,
    pub seed: u64,
    /// Packet pool size.
    pub pool: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            interval: Duration::from_millis(100),
            retry: Duration::from_millis(1),
            seed: 1,
            pool: 65_536,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SessionResult {
    /// Delivered in the measurement window.
    pub delivered: Count,
    /// Offered (sent into the device) over the whole run.
    pub offered: Count,
    pub dropped: Count,
    /// Delivered bytes per `interval` over the whole run.
    pub series: Vec<u64>,
    /// For each idle interval that ends before the run does: delay from its end to the
    /// session's first delivery after it (`None` if it never delivered again).
    pub resume_delay: Vec<Option<Duration>>,
}

#[derive(Clone, Debug)]
pub struct SimResult {
    pub sessions: Vec<SessionResult>,
    /// Length of the measurement window.
    pub measured: Duration,
    pub drops_by_cause: [Count; DropCause::COUNT],
    pub events: u64,
}

impl SimResult {
    /// Delivered bits per second of session `i` over the measurement window.
    pub fn session_bps(&self, i: usize) -> f64 {
        self.sessions[i].delivered.bytes as f64 * 8.0 / self.measured.as_secs_f64()
    }
}

struct SessState {
    inflight: u32,
    next_send: Instant,
    retry_at: Option<Instant>,
    pending_resume: Vec<(usize, Instant)>,
}

fn is_idle(s: &SessionSpec, now: Instant) -> bool {
    s.idle.iter().any(|&(a, b)| now >= a && now < b)
}

/// Run the simulation. The qdisc is left holding whatever was queued at the end.
pub fn run(
    q: &mut dyn Qdisc,
    sessions: &[SessionSpec],
    cfg: &SimConfig,
) -> Result<SimResult, String> {
    if cfg.interval.as_nanos() == 0 {
        return Err("the series interval must be longer than 0s".into());
    }
    if cfg.warmup >= cfg.duration {
        return Err("--warmup must be shorter than --duration".into());
    }
    let mut w = World {
        pool: Pool::new(cfg.pool, 0),
        rng: Rng::new(cfg.seed),
        dropped: Vec::new(),
        owner: vec![u32::MAX; cfg.pool as usize],
        by_cause: [Count::default(); DropCause::COUNT],
    };
    let end = Instant(cfg.duration.as_nanos());
    let warm = Instant(cfg.warmup.as_nanos());
    let nint = cfg.duration.as_nanos().div_ceil(cfg.interval.as_nanos()) as usize;
    let mut res: Vec<SessionResult> = sessions
        .iter()
        .map(|_| SessionResult {
            series: vec![0; nint],
            ..Default::default()
        })
        .collect();
    let mut st: Vec<SessState> = sessions
        .iter()
        .map(|_| SessState {
            inflight: 0,
            next_send: Instant::ZERO,
            retry_at: None,
            pending_resume: Vec::new(),
        })
        .collect();
    // all idle boundaries, as wake-up points
    let mut boundaries: Vec<Instant> = sessions
        .iter()
        .flat_map(|s| s.idle.iter().flat_map(|&(a, b)| [a, b]))
        .collect();
    boundaries.sort();
    boundaries.dedup();
    for (i, s) in sessions.iter().enumerate() {
        for (k, &(_, to)) in s.idle.iter().enumerate() {
            if to < end {
                res[i].resume_delay.push(None);
                st[i].pending_resume.push((k, to));
            }
        }
    }

    let mut now = Instant::ZERO;
    let mut events = 0u64;
    while now < end {
        events += 1;
        // 1. sources
        for (i, s) in sessions.iter().enumerate() {
            if is_idle(s, now) {
                continue;
            }
            let state = &mut st[i];
            match s.source {
                Source::Window(win) => {
                    if state.retry_at.is_some_and(|t| t > now) {
                        continue;
                    }
                    state.retry_at = None;
                    let mut attempts = 0;
                    while state.inflight < win && attempts < win {
                        attempts += 1;
                        if !w.offer(q, s, i, now, &mut res[i]) {
                            state.retry_at = Some(now + cfg.retry);
                            break;
                        }
                        state.inflight += 1;
                    }
                }
                Source::Rate(r) => {
                    if state.next_send < now {
                        // resuming after idle: do not send the silent period's backlog
                        if state.next_send + r.tx_time(s.size) < now {
                            state.next_send = now;
                        }
                    }
                    while state.next_send <= now {
                        if w.offer(q, s, i, now, &mut res[i]) {
                            state.inflight += 1;
                        }
                        state.next_send += r.tx_time(s.size);
                    }
                }
            }
        }
        // 2. the wire takes everything the qdisc releases now
        loop {
            let got = w.dequeue(q, now);
            w.settle_drops(&mut st, &mut res);
            let Some(p) = got else { break };
            let i = w.owner[p.0 as usize] as usize;
            w.owner[p.0 as usize] = u32::MAX;
            let len = w.pool.len(p);
            w.pool.free(p);
            let state = &mut st[i];
            state.inflight -= 1;
            let r = &mut res[i];
            if now >= warm {
                r.delivered.add(len);
            }
            let k = (now.as_nanos() / cfg.interval.as_nanos()) as usize;
            if k < r.series.len() {
                r.series[k] += len as u64;
            }
            for (slot, &(_, to)) in state.pending_resume.iter().enumerate() {
                if now >= to && r.resume_delay[slot].is_none() {
                    r.resume_delay[slot] = Some(now - to);
                }
            }
            // ACK clock: a window source refills at once
            let s = &sessions[i];
            if let Source::Window(win) = s.source {
                if !is_idle(s, now) && state.inflight < win && state.retry_at.is_none() {
                    if w.offer(q, s, i, now, r) {
                        state.inflight += 1;
                    } else {
                        state.retry_at = Some(now + cfg.retry);
                    }
                }
            }
            w.settle_drops(&mut st, &mut res);
        }
        // 3. next event
        let mut next = end;
        if let Some(t) = q.next_wakeup() {
            next = next.min(t);
        }
        for (i, s) in sessions.iter().enumerate() {
            match s.source {
                Source::Rate(_) => next = next.min(st[i].next_send),
                Source::Window(win) => {
                    if let Some(t) = st[i].retry_at {
                        next = next.min(t);
                    } else if st[i].inflight < win && !is_idle(s, now) {
                        next = next.min(now + cfg.retry);
                    }
                }
            }
        }
        if let Some(&b) = boundaries.iter().find(|&&b| b > now) {
            next = next.min(b);
        }
        now = next.max(now + Duration(1));
    }
    Ok(SimResult {
        sessions: res,
        measured: Duration(cfg.duration.as_nanos() - cfg.warmup.as_nanos()),
        drops_by_cause: w.by_cause,
        events,
    })
}

/// The simulator's packet-side state.
struct World {
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    /// Session index of each packet slot in flight.
    owner: Vec<u32>,
    by_cause: [Count; DropCause::COUNT],
}

impl World {
    /// Offer one packet of session `i`; true if the qdisc took it.
    fn offer(
        &mut self,
        q: &mut dyn Qdisc,
        s: &SessionSpec,
        i: usize,
        now: Instant,
        r: &mut SessionResult,
    ) -> bool {
        let Some(p) = self.pool.alloc() else {
            r.dropped.add(s.size);
            self.by_cause[DropCause::PoolExhausted.index()].add(s.size);
            return false;
        };
        let m = self.pool.meta_mut(p);
        m.len = s.size;
        m.class = s.class;
        m.flow = s.flow;
        m.arrival = now;
        self.owner[p.0 as usize] = i as u32;
        r.offered.add(s.size);
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        match q.enqueue(p, &mut cx) {
            Ok(()) => true,
            Err(cause) => {
                self.owner[p.0 as usize] = u32::MAX;
                self.pool.free(p);
                r.dropped.add(s.size);
                self.by_cause[cause.index()].add(s.size);
                false
            }
        }
    }

    fn dequeue(&mut self, q: &mut dyn Qdisc, now: Instant) -> Option<PktId> {
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        q.dequeue(&mut cx)
    }

    /// Account packets the qdisc discarded after having accepted them.
    fn settle_drops(&mut self, st: &mut [SessState], res: &mut [SessionResult]) {
        for (p, cause) in self.dropped.drain(..) {
            let i = self.owner[p.0 as usize] as usize;
            self.owner[p.0 as usize] = u32::MAX;
            let len = self.pool.len(p);
            self.by_cause[cause.index()].add(len);
            st[i].inflight -= 1;
            res[i].dropped.add(len);
            self.pool.free(p);
        }
    }
}
