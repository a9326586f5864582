//! Per-flow queuing (PFQ) inside a class: deficit round robin (Shreedhar & Varghese 1995)
//! over per-session queues, as seed 000 Fig. 4 describes ("a separate queue for each
//! session ... each per-flow queue is isolated and is guaranteed to obtain a fixed share
//! of the class").
//!
//! # Parameters
//! * `buckets` — number of flow queues (rounded up to a multiple of 8, default 1024).
//!   Flows map to queues by their 5-tuple hash (`Meta::flow`), **8-way set-associative**
//!   as in sch_cake: a flow takes a free way of its set, so distinct sessions share a queue
//!   only when more than 8 busy flows hash to one set (counted as `collisions`).
//! * `quantum` — DRR quantum in bytes (default 1514): every backlogged session receives
//!   an equal byte share of the class (max-min fair); a session that goes idle leaves the
//!   round and its share is divided among the rest at once (intra-class borrowing).
//! * `flow_limit` — packets per flow queue (default 64); beyond it the arriving packet is
//!   dropped (`FlowLimit`).
//! * `limit` — packets over all flows (default 1024); when full the head packet of the
//!   longest flow is dropped (`QueueFull`, as SFQ does) — or the arriving packet when its
//!   own flow is the longest. The longest flow is tracked approximately (updated on
//!   enqueue) to keep this O(1).
//! * `red` — optional RED parameters applied to **each** flow queue with per-flow state
//!   ("cbq+pfq+red", seed 000: FloodGate). With its `ecn` on, a flow's early decision on
//!   an ECN-capable packet marks it CE instead of dropping it, exactly as
//!   [`crate::queue::red::RedQueue`] does ([`RedParams::mark_or_drop`]); the mark comes
//!   before the `limit` check below, which may still refuse the packet (then a tail drop,
//!   not a mark).
//! * `session_ceil` — optional cap per session (a token bucket per flow, rate + burst; one
//!   [`Bucket`] rate and depth, a level and checkpoint per flow):
//!   capped sessions are parked until they conform, making the queue non-work-conserving
//!   (`next_wakeup` reports when). A per-session *guarantee* is what the equal DRR share
//!   provides while `sessions × guarantee ≤ class rate`; the compiler checks and reports it.
//!
//! # Statistics
//! `flows_active()`, `collisions`, `max_flows_seen`. With RED, also [`AqmStats`] through
//! [`Qdisc::aqm_stats`], summed over the flows: `ecn_marked` and `unmarkable` (early
//! decisions delivered without a drop, enqueued: not drops), `aqm_dropped` (`RedEarly` +
//! `RedForced`), `overlimit_dropped` (`FlowLimit` and `QueueFull`, arrivals refused and
//! heads pushed out), `active_flows`, `max_flows_seen`, `collisions`.
//!
//! # Memory
//! Allocated up front, per bucket: [`Pfq::bytes_per_flow`] = 44 bytes. An 8-byte tag; a
//! 32-byte `Flow` (queue, deficit, next flow in the round), aligned so that no flow
//! straddles two cache lines; and the 4-byte link to the previous flow, kept apart since
//! only joining and leaving the round use it. A set's 8 tags share one cache line, apart
//! from the flows, so a lookup reads that line and then the one flow it needs. State that
//! only some configurations use lives in side arrays allocated only with them: RED adds a
//! [`RedState`] (32 bytes) per bucket, a session cap 16 bytes of tokens plus 20 bytes of
//! `parked` heap.
//!
//! # Invariants
//! A flow is in the DRR list iff it holds packets and is not parked; a flow is parked iff
//! it is in `parked`, and parked flows hold packets; `len`/`bytes` equal the sums over
//! flows. `red` is empty unless `cfg.red` is set, `caps` and the `parked` ids unless
//! `cfg.session_ceil` is; otherwise they have one entry per bucket.

use crate::aqm::AqmStats;
use crate::meter::token_bucket::{Bucket, Ns};
use crate::pool::{PktId, PktQueue};
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::red::{RedParams, RedState};
use crate::queue::setassoc::{SetAssoc, Way};
use crate::rate::Rate;
use crate::sched::heap::IndexedHeap;
use crate::time::Instant;

const NIL: u32 = u32::MAX;

/// Configuration of a [`Pfq`].
#[derive(Clone, Debug)]
pub struct PfqConfig {
    pub buckets: u32,
    pub quantum: u32,
    pub flow_limit: u32,
    pub limit: u32,
    pub red: Option<RedParams>,
    /// Per-session cap: (rate, burst bytes).
    pub session_ceil: Option<(Rate, u32)>,
}

impl PfqConfig {
    pub const DEFAULT: PfqConfig = PfqConfig {
        buckets: 1024,
        quantum: 1514,
        flow_limit: 64,
        limit: 1024,
        red: None,
        session_ceil: None,
    };
}

impl Default for PfqConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A flow queue's scheduling state: 32 bytes, aligned so that a flow never straddles two
/// cache lines.
#[derive(Clone)]
#[repr(align(32))]
struct Flow {
    q: PktQueue,
    deficit: i32,
    /// Next flow in the DRR list (its predecessor is in `Pfq::prev`).
    next: u32,
}

/// A flow's session-cap token bucket: its level in ns and checkpoint (rate and depth are
/// the class's, [`Pfq::cap`]).
#[derive(Clone, Copy)]
struct Cap {
    tokens: i64,
    t_c: Instant,
}

/// Per-flow DRR queue (a [`Qdisc`]).
pub struct Pfq {
    cfg: PfqConfig,
    /// Tags by set; bucket `i` is way `i % WAYS` of set `i / WAYS`.
    sets: SetAssoc,
    flows: Vec<Flow>,
    /// Predecessor of each flow in the DRR list (touched only when a flow joins or leaves
    /// it).
    prev: Vec<u32>,
    /// Per-bucket RED state (empty without `cfg.red`).
    red: Vec<RedState>,
    /// Per-bucket session-cap tokens (empty without `cfg.session_ceil`).
    caps: Vec<Cap>,
    /// Head of the circular DRR list of active flows.
    head: u32,
    active: u32,
    /// Capped flows waiting to conform, keyed by when they may send (ids only with a cap).
    parked: IndexedHeap,
    longest: u32,
    len: usize,
    bytes: u64,
    /// The session cap's rate and depth (`tx_ns(burst)`), shared by every flow's level in
    /// `caps`; `None` without `cfg.session_ceil`.
    cap: Option<Bucket<Ns>>,
    /// RED's counters, summed over the flows (reported only with `cfg.red`).
    stats: AqmStats,
    pub collisions: u64,
    pub max_flows_seen: u32,
}

impl Pfq {
    pub fn new(mut cfg: PfqConfig) -> Result<Self, String> {
        if cfg.buckets == 0 || cfg.buckets > 1 << 24 {
            return Err(format!("buckets {} out of range 1..=16777216", cfg.buckets));
        }
        if cfg.quantum == 0 || cfg.flow_limit == 0 || cfg.limit == 0 {
            return Err("quantum, flow_limit and limit must be positive".into());
        }
        if let Some(r) = &cfg.red {
            r.validate()?;
        }
        cfg.buckets = Self::round_buckets(cfg.buckets);
        let cap = cfg
            .session_ceil
            .map(|(rate, burst)| Bucket::<Ns>::new(rate, burst));
        let n = cfg.buckets as usize;
        let flow = Flow {
            q: PktQueue::new(),
            deficit: 0,
            next: NIL,
        };
        let capped = cap.is_some();
        let full = Cap {
            tokens: cap.map_or(0, |b| b.depth()),
            t_c: Instant::ZERO,
        };
        Ok(Pfq {
            sets: SetAssoc::new(cfg.buckets),
            flows: vec![flow; n],
            prev: vec![NIL; n],
            red: if cfg.red.is_some() {
                vec![RedState::default(); n]
            } else {
                Vec::new()
            },
            caps: if capped { vec![full; n] } else { Vec::new() },
            head: NIL,
            active: 0,
            parked: IndexedHeap::with_ids(if capped { n } else { 0 }),
            longest: NIL,
            len: 0,
            bytes: 0,
            cap,
            stats: AqmStats::default(),
            collisions: 0,
            max_flows_seen: 0,
            cfg,
        })
    }

    /// The bucket count actually used for a requested one (a multiple of the 8 ways).
    pub fn round_buckets(n: u32) -> u32 {
        SetAssoc::round(n)
    }

    /// Bytes of state per flow bucket every configuration allocates (tag, `Flow` and
    /// link to the previous flow); RED and session caps add their side arrays (see the
    /// module comment).
    pub const fn bytes_per_flow() -> usize {
        core::mem::size_of::<u64>() + core::mem::size_of::<Flow>() + core::mem::size_of::<u32>()
    }
    /// Flows currently holding packets (active or parked).
    pub fn flows_active(&self) -> u32 {
        self.active + self.parked.len() as u32
    }
    pub fn config(&self) -> &PfqConfig {
        &self.cfg
    }

    /// Find (or claim) the bucket of flow hash `h`.
    #[inline]
    fn bucket(&mut self, h: u64) -> u32 {
        // a new flow takes the first free way (a parked flow holds packets)
        let flows = &self.flows;
        match self.sets.lookup(h, |i| flows[i].q.is_empty()) {
            Way::Hit(i) => i,
            Way::Claimed(i) => {
                if let Some(red) = self.red.get_mut(i as usize) {
                    *red = RedState::default();
                }
                if let (Some(cap), Some(b)) = (self.caps.get_mut(i as usize), &self.cap) {
                    cap.tokens = b.depth();
                }
                i
            }
            Way::Collision(i) => {
                self.collisions += 1;
                i
            }
        }
    }

    fn list_add(&mut self, i: u32) {
        if self.head == NIL {
            self.prev[i as usize] = i;
            self.flows[i as usize].next = i;
            self.head = i;
        } else {
            let head = self.head;
            let tail = self.prev[head as usize];
            self.prev[i as usize] = tail;
            self.flows[i as usize].next = head;
            self.flows[tail as usize].next = i;
            self.prev[head as usize] = i;
        }
        self.active += 1;
        let seen = self.flows_active();
        self.max_flows_seen = self.max_flows_seen.max(seen);
    }

    fn list_remove(&mut self, i: u32) {
        let (prev, next) = (self.prev[i as usize], self.flows[i as usize].next);
        if next == i {
            self.head = NIL;
        } else {
            self.flows[prev as usize].next = next;
            self.prev[next as usize] = prev;
            if self.head == i {
                self.head = next;
            }
        }
        self.active -= 1;
    }

    /// Move parked flows whose cap allows them to send again back into the round.
    fn unpark(&mut self, now: Instant) {
        while let Some((t, i)) = self.parked.peek() {
            if t > now.as_nanos() {
                break;
            }
            self.parked.remove(i);
            self.list_add(i);
        }
    }

    fn drop_head(&mut self, i: u32, cx: &mut Ctx<'_>, cause: DropCause) {
        let f = &mut self.flows[i as usize];
        if let Some(p) = f.q.pop_front(cx.pool) {
            let len = cx.pool.len(p);
            self.len -= 1;
            self.bytes -= len as u64;
            cx.drop_later(p, cause);
            if f.q.is_empty() {
                self.flow_emptied(i, cx.now);
            }
        }
    }

    fn flow_emptied(&mut self, i: u32, now: Instant) {
        if let Some(red) = &self.cfg.red {
            red.on_queue_empty(&mut self.red[i as usize], now);
        }
        // parked flows are out of the DRR list, in `parked` (which has ids only with caps)
        let parked = !self.caps.is_empty() && self.parked.remove(i);
        if !parked {
            self.list_remove(i);
        }
        if self.longest == i {
            self.longest = NIL;
        }
    }
}

impl Qdisc for Pfq {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let (h, len) = {
            let m = cx.pool.meta(pkt);
            (m.flow, m.len)
        };
        let i = self.bucket(h);
        let f = &mut self.flows[i as usize];
        if f.q.len() >= self.cfg.flow_limit as usize {
            self.stats.overlimit_dropped += 1;
            return Err(DropCause::FlowLimit);
        }
        let mut signal = None;
        if let Some(red) = &self.cfg.red {
            let st = &mut self.red[i as usize];
            let decision = red.on_arrival(st, f.q.len(), f.q.bytes(), len, cx.now, cx.rng);
            signal = red
                .mark_or_drop(decision, cx.pool, pkt)
                .inspect_err(|_| self.stats.aqm_dropped += 1)?;
        }
        if self.len >= self.cfg.limit as usize {
            let victim = self.longest;
            let vlen = if victim == NIL {
                0
            } else {
                self.flows[victim as usize].q.len()
            };
            self.stats.overlimit_dropped += 1;
            if victim == NIL || victim == i || vlen <= self.flows[i as usize].q.len() {
                return Err(DropCause::QueueFull);
            }
            self.drop_head(victim, cx, DropCause::QueueFull);
        }
        if let Some(d) = signal {
            self.stats.count_delivered(d);
        }
        let f = &mut self.flows[i as usize];
        let was_empty = f.q.is_empty();
        f.q.push_back(cx.pool, pkt);
        let flen = f.q.len();
        self.len += 1;
        self.bytes += len as u64;
        if was_empty {
            f.deficit = self.cfg.quantum as i32;
            self.list_add(i);
        }
        if self.longest == NIL || flen > self.flows[self.longest as usize].q.len() {
            self.longest = i;
        }
        Ok(())
    }

    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        if !self.parked.is_empty() {
            self.unpark(cx.now);
        }
        loop {
            let i = self.head;
            if i == NIL {
                return None;
            }
            let quantum = self.cfg.quantum as i32;
            let f = &mut self.flows[i as usize];
            if f.deficit <= 0 {
                f.deficit += quantum;
                self.head = f.next;
                continue;
            }
            let id = f.q.head()?;
            let len = cx.pool.len(id);
            if let Some(bucket) = &self.cap {
                let cap = &mut self.caps[i as usize];
                let elapsed = (cx.now - cap.t_c).as_nanos().min(i64::MAX as u64) as i64;
                let mut b = bucket.with_tokens(cap.tokens);
                b.refill(elapsed);
                cap.t_c = cx.now;
                // a session sends only what it has earned, whatever the depth
                let short = b.cost(len) - b.tokens();
                if short > 0 {
                    // park the session until it has earned the cost
                    cap.tokens = b.tokens();
                    let at = cx.now.as_nanos() + short as u64;
                    self.list_remove(i);
                    self.parked.set(i, at);
                    continue;
                }
                b.consume(len, 0);
                cap.tokens = b.tokens();
            }
            let f = &mut self.flows[i as usize];
            f.q.pop_front(cx.pool);
            f.deficit -= len as i32;
            self.len -= 1;
            self.bytes -= len as u64;
            if f.q.is_empty() {
                self.flow_emptied(i, cx.now);
            }
            return Some(id);
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        if self.active > 0 {
            return None;
        }
        self.parked.peek().map(|(t, _)| Instant(t))
    }

    fn len(&self) -> usize {
        self.len
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for i in 0..self.flows.len() as u32 {
            while !self.flows[i as usize].q.is_empty() {
                self.drop_head(i, cx, cause);
            }
        }
    }

    fn aqm_stats(&self) -> Option<AqmStats> {
        self.cfg.red.as_ref()?;
        Some(AqmStats {
            active_flows: self.flows_active(),
            max_flows_seen: self.max_flows_seen,
            collisions: self.collisions,
            ..self.stats
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Counted;
    use crate::rng::{mix64, Rng};
    use crate::time::Duration;

    struct Bench {
        pool: Pool,
        rng: Rng,
        dropped: Vec<(PktId, DropCause)>,
        now: Instant,
    }

    impl Bench {
        fn new() -> Self {
            Bench {
                pool: Pool::new(8192, 0),
                rng: Rng::new(3),
                dropped: Vec::new(),
                now: Instant::ZERO,
            }
        }
        fn push(&mut self, q: &mut dyn Qdisc, flow: u64, len: u32) -> Result<(), DropCause> {
            let p = self.pool.alloc().unwrap();
            self.pool.meta_mut(p).len = len;
            self.pool.meta_mut(p).flow = flow;
            let mut cx = Ctx::new(self.now, &mut self.pool, &mut self.rng, &mut self.dropped);
            let r = q.enqueue(p, &mut cx);
            if r.is_err() {
                self.pool.free(p);
            }
            r
        }
        fn pop(&mut self, q: &mut dyn Qdisc) -> Option<(u64, u32)> {
            let mut cx = Ctx::new(self.now, &mut self.pool, &mut self.rng, &mut self.dropped);
            let p = q.dequeue(&mut cx)?;
            let m = self.pool.meta(p);
            let r = (m.flow, m.len);
            self.pool.free(p);
            Some(r)
        }
        fn free_dropped(&mut self) -> Vec<DropCause> {
            let v: Vec<_> = self.dropped.drain(..).collect();
            v.iter().for_each(|&(p, _)| self.pool.free(p));
            v.into_iter().map(|(_, c)| c).collect()
        }
    }

    fn cfg() -> PfqConfig {
        PfqConfig {
            flow_limit: 1000,
            limit: 4000,
            ..Default::default()
        }
    }

    /// DRR gives equal bytes, not equal packets: a flow of 1500-byte frames and one of
    /// 300-byte frames, both backlogged, each get half the bytes.
    #[test]
    fn drr_shares_bytes_equally_across_packet_sizes() {
        let mut b = Bench::new();
        let mut q = Counted::new(Box::new(
            Pfq::new(PfqConfig {
                flow_limit: 4000,
                limit: 8000,
                ..cfg()
            })
            .unwrap(),
        ));
        let (big, small) = (mix64(1), mix64(2));
        for _ in 0..400 {
            b.push(&mut q, big, 1500).unwrap();
        }
        for _ in 0..2000 {
            b.push(&mut q, small, 300).unwrap();
        }
        let mut bytes = [0u64; 2];
        for _ in 0..1200 {
            let (f, len) = b.pop(&mut q).unwrap();
            bytes[(f == small) as usize] += len as u64;
        }
        let ratio = bytes[0] as f64 / bytes[1] as f64;
        assert!((ratio - 1.0).abs() < 0.01, "{bytes:?}");
        q.check().unwrap();
    }

    #[test]
    fn flow_limit_refuses_only_the_full_flow() {
        let mut b = Bench::new();
        let mut q = Pfq::new(PfqConfig {
            flow_limit: 3,
            ..cfg()
        })
        .unwrap();
        for _ in 0..3 {
            b.push(&mut q, 7, 100).unwrap();
        }
        assert_eq!(b.push(&mut q, 7, 100), Err(DropCause::FlowLimit));
        assert!(b.push(&mut q, 8, 100).is_ok());
        assert_eq!(q.flows_active(), 2);
    }

    /// When the class limit is reached the longest flow loses its head packet, so a
    /// light flow can still get in.
    #[test]
    fn overflow_drops_from_the_longest_flow() {
        let mut b = Bench::new();
        let mut q = Counted::new(Box::new(
            Pfq::new(PfqConfig { limit: 10, ..cfg() }).unwrap(),
        ));
        for _ in 0..10 {
            b.push(&mut q, 1, 100).unwrap();
        }
        // the hog itself is refused
        assert_eq!(b.push(&mut q, 1, 100), Err(DropCause::QueueFull));
        // a light flow gets in; the hog's head is dropped to make room
        b.push(&mut q, 2, 100).unwrap();
        assert_eq!(b.free_dropped(), vec![DropCause::QueueFull]);
        assert_eq!(q.len(), 10);
        q.check().unwrap();
        assert_eq!(q.stats.dropped_later.packets, 1);
        assert_eq!(q.stats.dropped_on_enqueue.packets, 1);
    }

    /// Sessions that go idle leave the round at once; the rest share what they left.
    #[test]
    fn idle_sessions_leave_the_round() {
        let mut b = Bench::new();
        let mut q = Pfq::new(cfg()).unwrap();
        b.push(&mut q, 1, 1000).unwrap();
        for _ in 0..10 {
            b.push(&mut q, 2, 1000).unwrap();
        }
        let order: Vec<u64> = (0..11).map(|_| b.pop(&mut q).unwrap().0).collect();
        assert_eq!(order[..2].iter().filter(|&&f| f == 1).count(), 1);
        assert!(order[2..].iter().all(|&f| f == 2));
        assert_eq!(q.flows_active(), 0);
        assert!(b.pop(&mut q).is_none());
    }

    /// Distinct sessions get distinct queues (8-way buckets) until a set is full.
    #[test]
    fn set_associative_buckets_avoid_collisions() {
        let mut b = Bench::new();
        let mut q = Pfq::new(PfqConfig {
            buckets: 1024,
            ..cfg()
        })
        .unwrap();
        // 200 flows in 128 sets of 8: a set overflows with probability ~1e-4
        for i in 0..200u64 {
            b.push(&mut q, mix64(i), 100).unwrap();
        }
        assert_eq!(q.flows_active(), 200);
        assert_eq!(q.collisions, 0);
        // 8 flows forced into one set fill its ways; a ninth collides
        let mut q = Pfq::new(PfqConfig {
            buckets: 8,
            ..cfg()
        })
        .unwrap();
        for i in 0..9u64 {
            b.push(&mut q, mix64(i), 100).unwrap();
        }
        assert_eq!(q.flows_active(), 8);
        assert_eq!(q.collisions, 1);
    }

    /// A session cap holds each session to its rate, and the queue reports when a parked
    /// session may send.
    #[test]
    fn session_cap_limits_each_session() {
        let mut b = Bench::new();
        let rate = Rate::from_bps(1_000_000); // 1000-byte frame = 8 ms
        let mut q = Pfq::new(PfqConfig {
            session_ceil: Some((rate, 1000)),
            ..cfg()
        })
        .unwrap();
        for _ in 0..200 {
            b.push(&mut q, 1, 1000).unwrap();
            b.push(&mut q, 2, 1000).unwrap();
        }
        let mut sent = [0u32; 2];
        let end = Instant(Duration::from_secs(1).as_nanos());
        while b.now < end {
            while let Some((f, _)) = b.pop(&mut q) {
                sent[(f == 2) as usize] += 1;
            }
            b.now = q
                .next_wakeup()
                .expect("parked sessions report a wakeup")
                .max(b.now + Duration(1));
        }
        // 1 s at 1 Mbit/s = 125 frames of 1000 bytes, plus the initial bucket
        for s in sent {
            assert!((125..=127).contains(&s), "{sent:?}");
        }
    }

    /// Seed 004's premium shaper at scale: 4096 sessions, each shaped by its own token
    /// bucket (64 kbit/s, depth 400 B = two 200-byte packets) and kept backlogged. Over
    /// every interval between two departures of one session, it sends at most
    /// `burst + rate * interval` (bytes, at 64 kbit/s 8 bytes a ms), and in the end close
    /// to the rate (a backlogged session is never held back beyond its bucket); each
    /// session's packets leave in order.
    #[test]
    fn premium_shaping_of_4096_sessions() {
        const FLOWS: usize = 4096;
        const LEN: u32 = 200;
        const BURST: f64 = 400.0;
        const BYTES_PER_NS: f64 = 64_000.0 / 8e9;
        let mut b = Bench::new();
        let mut q = Pfq::new(PfqConfig {
            buckets: 8 * FLOWS as u32,
            flow_limit: 4,
            limit: 8192,
            session_ceil: Some((Rate::from_bps(64_000), BURST as u32)),
            ..cfg()
        })
        .unwrap();
        let flow_of: std::collections::HashMap<u64, usize> =
            (0..FLOWS).map(|i| (mix64(i as u64 + 1), i)).collect();
        // per session: packets queued, next tag to send, bytes sent, and the least value
        // of (bytes sent before a departure - rate * its time)
        let mut queued = vec![0u32; FLOWS];
        let mut next_tag = vec![0u64; FLOWS];
        let mut expect_tag = vec![0u64; FLOWS];
        let mut sent = vec![0.0f64; FLOWS];
        let mut low = vec![0.0f64; FLOWS];
        let end = Instant(Duration::from_millis(500).as_nanos());
        while b.now < end {
            for i in 0..FLOWS {
                while queued[i] < 2 {
                    let p = b.pool.alloc().unwrap();
                    let m = b.pool.meta_mut(p);
                    (m.len, m.flow, m.arrival) = (LEN, mix64(i as u64 + 1), Instant(next_tag[i]));
                    let mut cx = Ctx::new(b.now, &mut b.pool, &mut b.rng, &mut b.dropped);
                    q.enqueue(p, &mut cx).unwrap();
                    (queued[i], next_tag[i]) = (queued[i] + 1, next_tag[i] + 1);
                }
            }
            loop {
                let mut cx = Ctx::new(b.now, &mut b.pool, &mut b.rng, &mut b.dropped);
                let Some(p) = q.dequeue(&mut cx) else { break };
                let (flow, tag, len) = {
                    let m = b.pool.meta(p);
                    (m.flow, m.arrival.0, m.len)
                };
                b.pool.free(p);
                let i = flow_of[&flow];
                assert_eq!(tag, expect_tag[i], "session {i} out of order");
                expect_tag[i] += 1;
                queued[i] -= 1;
                let t = b.now.0 as f64;
                low[i] = low[i].min(sent[i] - BYTES_PER_NS * t);
                sent[i] += len as f64;
                let excess = sent[i] - BYTES_PER_NS * t - low[i];
                assert!(
                    excess <= BURST + 1.0,
                    "session {i} at {t} ns: {excess} B over the rate"
                );
            }
            // (an empty queue, after the first bursts, is refilled just after)
            b.now = q.next_wakeup().unwrap_or(b.now).max(b.now + Duration(1));
        }
        assert_eq!(q.collisions, 0);
        // 0.5 s at 64 kbit/s = 4000 B, plus the 400-byte bucket: 22 packets each
        let t = b.now.0 as f64;
        for (i, &s) in sent.iter().enumerate() {
            let floor = BYTES_PER_NS * t + BURST - 2.0 * LEN as f64;
            assert!(
                s >= floor && s <= 4400.0 + LEN as f64,
                "session {i}: {s} B in {t} ns"
            );
        }
    }

    /// Per-flow RED drops from the flow that builds a queue, not from a light one.
    #[test]
    fn per_flow_red_isolates_sessions() {
        let mut b = Bench::new();
        let red = RedParams {
            min_th: 5.0,
            max_th: 15.0,
            max_p: 0.1,
            wq: 0.2,
            gentle: false,
            mode: crate::queue::red::RedMode::Packets,
            idle_pkt_ns: 1000,
            ecn: false,
        };
        let mut q = Pfq::new(PfqConfig {
            red: Some(red),
            ..cfg()
        })
        .unwrap();
        let mut drops = [0; 2];
        for i in 0..2000 {
            // one departure every other step, served fairly: flow 1 (one arrival per
            // step) builds a queue, flow 2 (one arrival every fourth step) never does
            if b.push(&mut q, 1, 500).is_err() {
                drops[0] += 1;
            }
            if i % 4 == 0 && b.push(&mut q, 2, 500).is_err() {
                drops[1] += 1;
            }
            if i % 2 == 0 {
                b.pop(&mut q);
            }
        }
        assert!(drops[0] > 100, "{drops:?}");
        assert_eq!(drops[1], 0, "{drops:?}");
    }

    /// Per-flow RED with ECN, by hand: RED 10/20 packets, `max_p` 0.1, `wq` 1 (a flow's
    /// average is its packets held). Flows A and C hold 11 packets (their arrivals saw
    /// 0..=10, at most min_th: p_b = 0, none dropped), flow B 3. At 11, p_b = 0.1 · 1/10 =
    /// 0.01, and with the flow's count at 99, (count + 1) p_b = 1: p_a = 1. An ECT packet
    /// of A or C is marked and enqueued, a not-ECT one of A dropped; B (below min_th)
    /// passes unmarked. The marks of every flow add up; without RED there are no counters.
    #[test]
    fn per_flow_red_marks_ect() {
        use crate::queue::red::tests::{drive_ecn, ecn_pkt, frame_bytes, Frame, SLOT};
        use weir_wire::ip::ecn::{CE, ECT0, NOT_ECT};
        let red = RedParams {
            ecn: true,
            ..RedParams::floyd_defaults(Rate::from_bps(1_000_000))
        };
        let red = RedParams {
            min_th: 10.0,
            max_th: 20.0,
            max_p: 0.1,
            wq: 1.0,
            ..red
        };
        let mut q = Pfq::new(PfqConfig {
            red: Some(red),
            ..cfg()
        })
        .unwrap();
        let mut pool = Pool::new(64, SLOT);
        let mut rng = Rng::new(5);
        let mut dropped = Vec::new();
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let (a, b, c) = (mix64(1), mix64(2), mix64(3));
        // `count`: the flow's RED count to set first
        let mut offer = |q: &mut Pfq, flow: u64, f: Frame, count: Option<i64>| {
            let id = ecn_pkt(cx.pool, f);
            cx.pool.meta_mut(id).flow = flow;
            if let Some(n) = count {
                let i = q.bucket(flow) as usize;
                q.red[i].count = n;
            }
            let r = q.enqueue(id, &mut cx);
            let now = cx.pool.data(id).to_vec();
            if r.is_err() {
                cx.pool.free(id);
            }
            (r, now)
        };
        for (flow, n) in [(a, 11), (b, 3), (c, 11)] {
            for _ in 0..n {
                assert_eq!(offer(&mut q, flow, Frame::V4(NOT_ECT), None).0, Ok(()));
            }
        }
        let len = frame_bytes(Frame::V4(ECT0)).len() as u32;
        assert_eq!(RedParams::p_a(red.p_b(11.0, len), 99), 1.0);
        let cases = [
            (a, Frame::V4(ECT0), Ok(()), Frame::V4(CE)),
            (
                a,
                Frame::V4(NOT_ECT),
                Err(DropCause::RedEarly),
                Frame::V4(NOT_ECT),
            ),
            (b, Frame::V4(ECT0), Ok(()), Frame::V4(ECT0)),
            (c, Frame::V6(ECT0), Ok(()), Frame::V6(CE)),
        ];
        for (flow, f, want, after) in cases {
            let (r, now) = offer(&mut q, flow, f, Some(99));
            assert_eq!(r, want, "{f:?}");
            assert_eq!(now, frame_bytes(after), "{f:?}");
        }
        let s = q.aqm_stats().unwrap();
        assert_eq!((s.ecn_marked, s.aqm_dropped, s.unmarkable), (2, 1, 0));
        assert_eq!((s.active_flows, s.max_flows_seen), (3, 3));
        assert_eq!(Qdisc::len(&q), 11 + 3 + 11 + 3);
        assert!(Pfq::new(cfg()).unwrap().aqm_stats().is_none());

        // random traffic over 8 flows with tight limits: the counters add up
        let tight = PfqConfig {
            red: Some(RedParams {
                min_th: 2.0,
                max_th: 6.0,
                wq: 0.2,
                gentle: true,
                ..red
            }),
            flow_limit: 12,
            limit: 40,
            ..cfg()
        };
        let q = drive_ecn(Pfq::new(tight).unwrap(), 0.6, 30_000, 9);
        let s = q.aqm_stats().unwrap();
        assert!(s.ecn_marked > 100 && s.unmarkable > 10, "{s:?}");
        assert!(s.aqm_dropped > 100 && s.overlimit_dropped > 0, "{s:?}");
        assert_eq!(s.max_flows_seen, 8);
    }

    /// The memory the module comment states.
    #[test]
    fn a_bucket_is_44_bytes() {
        assert_eq!(Pfq::bytes_per_flow(), 44);
        assert_eq!(std::mem::size_of::<Flow>(), 32);
    }

    #[test]
    fn purge_empties_everything() {
        let mut b = Bench::new();
        let mut q = Counted::new(Box::new(Pfq::new(cfg()).unwrap()));
        for i in 0..50u64 {
            b.push(&mut q, i % 7, 100).unwrap();
        }
        let mut cx = Ctx::new(b.now, &mut b.pool, &mut b.rng, &mut b.dropped);
        q.purge(&mut cx, DropCause::Shutdown);
        assert_eq!(q.len(), 0);
        assert_eq!(b.free_dropped().len(), 50);
        q.check().unwrap();
        assert_eq!(q.stats.drops_by(DropCause::Shutdown).packets, 50);
        assert!(b.pop(&mut q).is_none());
    }
}
