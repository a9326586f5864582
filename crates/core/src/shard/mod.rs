//! Sharing a class across workers: the coordinator of `weir run --workers N` (issue 27).
//!
//! With N workers each owns a shard of the subscriber circuits (a scheduler of its own),
//! but some classes span them all — the link itself, a node too big for one core. Each
//! shard holds a copy of such a class; [`Coordinator::tick`] re-divides its rate among
//! the copies every `period` (≤ 1 ms) from what each shard did in the last one, so that
//! the copies together give what the one class would.
//!
//! # The rule: weighted water-filling
//! Inputs per shard, for the last period: the bytes its copy sent, whether it still holds
//! a backlog, its **weight** — the assured rates of the shared class's children that hold
//! packets in that shard (what HTB would share the class's rate by: each child its rate,
//! the spare in proportion to quantum, which weir derives from the rates) — and the bytes
//! its children without a backlog sent.
//! * A shard with a backlog wants more than it has: its demand is unbounded.
//! * A shard without one used what it needed: its demand is its rate in the last period
//!   plus [`HEADROOM`] (so it can grow without first building a queue), at least
//!   [`FLOOR`] of the class's rate (so a shard that wakes up is served at once, and
//!   builds a backlog to ask for more if it needs it).
//! * A backlogged shard's children without a backlog need what they sent, plus headroom,
//!   averaged over [`SMOOTHING`] periods.
//! * The class's rate is then filled like water ([`divide`]): every shard gets what its
//!   children without a backlog need (below any part the backlogged children could be
//!   offered), and the rest is shared by the backlogged shards by weight (a shard with
//!   nothing active counts one unit) — as one HTB class would share it among all the
//!   children. Each backlogged shard keeps at least [`FLOOR`] of the rate.
//!
//! The copies' rates always add up to the class's rate (the rounding remainder goes to
//! the heaviest shard), so the link is never oversubscribed; a shard's ceil is its rate
//! (the copy must not borrow what another shard was given). cake_mq's rule (each of the
//! active queues gets an equal part) is the case where every shard is backlogged with
//! equal weights.
//!
//! Sans-IO: the caller measures and applies (a worker's `LinkShare::set_rates` on its
//! copy); time comes in as `now`. Tests: the hand-computed splits below and, on the
//! virtual clock, four shards against one scheduler (`tests.rs`).

use crate::time::{Duration, Instant};

pub mod copies;
pub mod plan;
pub use copies::{Copies, Tally};
pub use plan::{deal, Plan};

/// A non-backlogged shard may use this much more than it did (fraction).
pub const HEADROOM: f64 = 0.10;
/// A shard's least part of the class's rate (fraction): enough to start at once.
pub const FLOOR: f64 = 0.01;
/// How often the rates are re-divided by default.
pub const PERIOD: Duration = Duration::from_millis(1);

/// What one shard's copy of the shared class did in the last period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardLoad {
    /// Bytes its copy sent.
    pub sent_bytes: u64,
    /// It still holds packets (it wants more than it had).
    pub backlogged: bool,
    /// The assured rates (bit/s) of the class's children holding packets in this shard.
    pub weight: u64,
    /// Bytes sent by its children that hold no packets (they used what they needed).
    pub unqueued_bytes: u64,
}

/// Re-divides one shared class's rate among N shards; see the module comment.
#[derive(Clone, Debug)]
pub struct Coordinator {
    rate_bps: u64,
    period: Duration,
    last: Option<Instant>,
    shares: Vec<u64>,
    /// Each shard's fixed part (what its children without a backlog use), bit/s,
    /// smoothed over [`SMOOTHING`] periods.
    fixed: Vec<f64>,
}

/// The fixed parts are averaged over about this many periods (an exponential moving
/// average): a child sending one packet every 12 ms measures 0 or 12 Mbit/s in a 1 ms
/// period, and shares that swing with it drop a shard's share below its children's
/// assured rates for a period — which they then use anyway, and the shard's copy of the
/// class repays as debt, idle, later.
pub const SMOOTHING: f64 = 16.0;

impl Coordinator {
    /// A class of `rate_bps` shared by `shards` (≥ 1) shards, re-divided every `period`;
    /// it starts evenly divided.
    pub fn new(rate_bps: u64, shards: usize, period: Duration) -> Coordinator {
        let n = shards.max(1);
        let mut shares = vec![rate_bps / n as u64; n];
        shares[0] += rate_bps - rate_bps / n as u64 * n as u64;
        Coordinator {
            rate_bps,
            period,
            last: None,
            shares,
            fixed: vec![0.0; n],
        }
    }

    /// The shards' current parts of the rate, bit/s (they add up to the class's rate).
    pub fn shares(&self) -> &[u64] {
        &self.shares
    }

    /// When the next [`Coordinator::tick`] is due.
    pub fn due(&self) -> Instant {
        self.last.map_or(Instant::ZERO, |t| t + self.period)
    }

    /// Re-divide at `now` from each shard's load in the period since the last tick (the
    /// first tick only starts the clock). Returns the new shares, bit/s.
    pub fn tick(&mut self, now: Instant, loads: &[ShardLoad]) -> &[u64] {
        let Some(last) = self.last.replace(now) else {
            return &self.shares;
        };
        let dt = (now - last).as_secs_f64();
        if dt <= 0.0 || loads.len() != self.shares.len() {
            return &self.shares;
        }
        let r = self.rate_bps as f64;
        let grown = |bytes: u64| bytes as f64 * 8.0 / dt * (1.0 + HEADROOM);
        // a backlogged shard's fixed part is the smoothed one; a shard without a backlog
        // gets at least what it used in the last period (a rising demand at once)
        let mut fixed = Vec::with_capacity(loads.len());
        for (f, l) in self.fixed.iter_mut().zip(loads) {
            let now = match l.backlogged {
                false => grown(l.sent_bytes),
                true => grown(l.unqueued_bytes),
            };
            *f += (now - *f) / SMOOTHING;
            fixed.push(match l.backlogged {
                true => *f,
                false => f.max(now).max(r * FLOOR),
            });
        }
        let backlogged: Vec<bool> = loads.iter().map(|l| l.backlogged).collect();
        let weight: Vec<f64> = loads.iter().map(|l| l.weight.max(1) as f64).collect();
        let alloc = divide(r, &fixed, &backlogged, &weight);
        // whole bits per second that add up exactly: the remainder to the heaviest
        let mut shares: Vec<u64> = alloc.iter().map(|&a| a.floor() as u64).collect();
        let rest = self.rate_bps - shares.iter().sum::<u64>().min(self.rate_bps);
        let heaviest = (0..shares.len())
            .max_by(|&a, &b| alloc[a].total_cmp(&alloc[b]))
            .unwrap_or(0);
        shares[heaviest] += rest;
        self.shares = shares;
        &self.shares
    }
}

/// Divide `total` among shards. Each gets its `fixed` part — a shard without a backlog
/// what it needs, a backlogged one what its children without a backlog need — and the
/// rest is shared among the `backlogged` shards by `weight` (water-filling: what every
/// child without a backlog uses is below any part the backlogged would be offered). If
/// the fixed parts leave less than [`FLOOR`] of `total` for each backlogged shard, they are
/// scaled down to leave it. With no backlogged shard the spare goes to all by weight: the
/// parts always add up to `total`.
pub fn divide(total: f64, fixed: &[f64], backlogged: &[bool], weight: &[f64]) -> Vec<f64> {
    let queued = backlogged.iter().filter(|&&b| b).count();
    let room = (total - total * FLOOR * queued as f64).max(0.0);
    let want: f64 = fixed.iter().sum();
    let scale = if want > room { room / want } else { 1.0 };
    let mut alloc: Vec<f64> = fixed.iter().map(|f| f * scale).collect();
    let left = total - alloc.iter().sum::<f64>();
    let takes = |i: usize| queued == 0 || backlogged[i];
    let w: f64 = (0..fixed.len())
        .filter(|&i| takes(i))
        .map(|i| weight[i])
        .sum();
    if w > 0.0 {
        for (i, a) in alloc.iter_mut().enumerate() {
            if takes(i) {
                *a += left * weight[i] / w;
            }
        }
    }
    alloc
}

#[cfg(test)]
mod tests;
