//! Flow queuing with sparse-flow priority, host isolation and a per-flow AQM
//! (`queue = "fq"`): DRR++ (RFC 8290, FQ-CoDel) over set-associative flow buckets, with
//! CAKE's host isolation modes and COBALT (Linux `sch_cake.c`) or CoDel on every flow.
//!
//! # Flows and hosts (`isolate`, CAKE's `flow_mode`)
//! A packet's queue is found by a key, looked up in [`SetAssoc`] buckets (8 ways a set):
//! * `flow`: the 5-tuple (`Meta::flow`, the pipeline's seeded direction-independent hash).
//! * `src-host`, `dst-host`, `hosts`: the source address, the destination address, or
//!   both (the XOR of the two host hashes, as CAKE): one queue per host or host pair, all
//!   its flows in it.
//! * `dual-src`, `dual-dst`, `triple` (the default, as CAKE's): 5-tuple queues whose DRR
//!   quantum is divided by the **load** of their source host, of their destination
//!   host, or by the larger of the two: hosts share the class fairly first, then each
//!   host's flows share its part (`cake_get_flow_quantum`:
//!   `quantum · ⌊65535 / load⌋ + random16 >> 16`, dithered so the rounding does not
//!   accumulate). A flow's hosts are found when it claims a bucket (as CAKE sets them at
//!   allocation): the frame's IPv4/IPv6 addresses are read (Ethernet, VLAN tags, the IP
//!   fixed header) and hashed with the queue's seed (SplitMix64's mixer) into 8-way host
//!   tables (a slot is reused once no flow counts on it).
//!
//! **Host load** (`Flow::loaded`): the host's flows that hold packets or pay back an
//! overspent quantum — counted from the arrival that finds the flow empty until a dequeue
//! finds it empty, except that a flow in the new list that empties within its quantum
//! (it owes nothing: a probe, a DNS query) stops counting at once. CAKE counts its bulk
//! set instead (a flow from the moment it overspends with packets left until found
//! empty), which counts too few and too many: a host's intermittent TCP flows (ACK-clocked
//! bursts of a packet or two) that send from the new list and pay back empty in the old
//! list are not counted, so the host's other flows get larger quanta; and a sparse flow
//! that gets its next packet while it waits empty in the old list turns bulk and counts.
//! Measured in `weir lab rrul`'s `hosts` case (10 Mbit/s, 50 ms, cubic: host A's one
//! upload, host B's 16, the latency probes sharing A's destination), CAKE's count showed
//! the probes in A's destination load (3 instead of 1 at A's departures), this one 1.
//!
//! A frame without IP addresses (ARP, garbage, or a pool without frame bytes as in the
//! simulator) counts as one "no address" host.
//!
//! # DRR++ (RFC 8290 §4, with CAKE's flow sets)
//! Flows wait in three lists: **new** (sparse: a flow that just became active), **old**
//! (bulk) and **decaying** (COBALT only: empty flows whose AQM state has not come to rest).
//! * Enqueue: an idle or decaying flow joins the tail of the new list with one quantum
//!   of deficit (`new_flows` counts these); a flow waiting empty in the old list becomes
//!   bulk again; a flow in a list stays where it is.
//! * Dequeue takes the head of the new list, else of the old list (a decaying flow
//!   first, once per call, so that its state keeps decaying: CAKE's order). A flow whose
//!   deficit is used up gets another quantum and goes to the tail of the old list. The
//!   packet at a flow's head is judged by the flow's AQM (drops continue with the next
//!   packet of the same flow); the sent packet's length is taken from the deficit.
//! * A flow found empty: if its AQM state must still decay (COBALT: `p_drop`, `count` or
//!   a pending `drop_next`), it goes to the decaying list and keeps its bucket; else, if
//!   it was in the new list and the old list is not empty, it goes to the old list
//!   (**RFC 8290's rule**: a flow cannot keep its priority by emptying after each packet);
//!   else it leaves the lists and its bucket is free. With CoDel (and no AQM) nothing
//!   decays, so FQ-CoDel behaves exactly as RFC 8290 and Linux `fq_codel`; with COBALT, as
//!   CAKE (whose emptied flows mostly decay for one interval and come back as new ones).
//!
//! **Divided quanta and the round calendar.** Where quanta are divided by host loads
//! (`dual-*`, `triple`), a flow of a host with load `n` gets `quantum / n` bytes a
//! round: at `n = 100` a 1514-byte packet takes it ~100 rounds, and DRR (as CAKE) visits
//! every flow once a round to add its share — 100 visits of every flow per packet each
//! sends (measured: 1.5 µs a packet at 10,000 flows of 100 hosts). There the old list is
//! a calendar instead of a ring: a 4-ary heap keyed by (round, arrival in that round). A
//! flow whose deficit is used up gets at once the shares of the `r` rounds it needs to
//! reach a positive deficit (`r = ⌈(1 - deficit) / share⌉`, one division, only when
//! `r > 1`) and is filed `r` rounds on; the head of the calendar is the next flow DRR
//! would serve. Each host still gets `quantum` a round and each of its flows an equal
//! part; a flow's shares for the rounds it skips are taken at the load of the moment it
//! is filed; within a round flows go in the order they were filed (DRR's ring order
//! except for flows that skipped rounds). Cost: O(log n) a refill instead of O(n) a
//! round. The other modes keep the ring (a quantum of at least 256 bytes needs at most
//! 6 visits per 1514-byte packet).
//!
//! # Limits (`limit`: packets and bytes)
//! After an arrival, while more than `limit_packets` packets or `limit_bytes` bytes are
//! held, the head of the **fattest flow** (most bytes) is dropped
//! ([`DropCause::Overlimit`]) and its AQM told ([`Aqm::on_overflow`]: BLUE's probability
//! rises). If that head is the arriving packet itself, the arrival is refused. The fattest
//! flow comes from a 4-ary max-heap of the backlogged flows' byte counts — CAKE's choice
//! (`cake_heapify`), preferred to `fq_codel_drop`'s linear scan of all buckets (4 KB at
//! 1024 flows, amortised by dropping up to half the fat flow's bytes, 64 packets at most:
//! at 10,000 flows the scan alone is 40 KB per overflow, and the batch throws away far
//! more than the one packet that was too many). As CAKE's (`overflow_timeout`), the heap
//! is kept only near overflows: the first overflow builds it from every bucket (O(flows)),
//! and it is then updated on every enqueue and dequeue (O(log n)) until 65,535 dequeues
//! pass without an overflow, when it is dropped. A queue that never overflows pays
//! nothing for it: kept always, its two updates a packet were a quarter of the cost at
//! 10,000 flows (`cargo bench --bench aqm`: 74 → 53 ns a packet).
//!
//! # ACK filter (`ack_filter`: off, on, aggressive)
//! CAKE's: in `enqueue`, right after the arrival joins its flow's queue and before the
//! limits, a queued pure ACK the arrival makes redundant is dropped
//! ([`DropCause::AckFilter`], counted in `ack_drops`). See `ack.rs`.
//!
//! # Parameters ([`FqConfig`]; [`FqConfig::for_rate`] gives CAKE's defaults for a rate)
//! * `flows` (buckets, default 1024 = CAKE's `CAKE_QUEUES`; rounded up to a multiple of 8).
//! * `quantum` (bytes): CAKE's `max(min(rate / 4096 B/s, 1514), 300)`, 1514 when the rate
//!   is unlimited — at low rates a smaller quantum lets a sparse packet through sooner.
//! * `limit_packets` (default 10,240: CAKE's and fq_codel's `limit`).
//! * `limit_bytes`: CAKE's `buffer_limit`, four times the bytes of one interval at the
//!   rate, at least 4 MiB, at most `limit_packets × 1514` (weir counts frame bytes where
//!   CAKE counts the kernel's `truesize`).
//! * `isolate` (default `triple`), `aqm` (default COBALT) and its [`AqmParams`].
//! * `ack_filter` (default off): see above.
//!
//! # Cost and memory
//! Per packet: one bucket lookup (one cache line of tags), O(1) list work (O(log n) with
//! the round calendar), near overflows two updates of the fattest-flow heap (O(log n)),
//! and the AQM's judgement; a host-keyed mode also reads the frame's IP header; the ACK
//! filter, when on, reads TCP headers (`ack.rs`).
//! Per bucket: the 8-byte tag, a `Flow` (40 bytes + the AQM state: 72 with COBALT or
//! CoDel), 20 bytes of heap (its position, its entry while backlogged); the dual and
//! triple modes add two host indices, 12 bytes of host table per role and 20 of round
//! calendar ([`Fq::bytes_per_flow`]: 100 bytes with COBALT in `flow` mode, 152 in
//! `triple`).
//!
//! # Statistics ([`crate::Qdisc::aqm_stats`])
//! ECN marks, AQM drops, unmarkable signals, limit drops, ACK-filter drops (`ack_drops`),
//! new flows (since the start), sparse, bulk and decaying flows now, flows holding packets
//! now and at most, source and destination hosts with a load, bucket collisions.
//!
//! # Invariants
//! `len`/`bytes` are the sums over the flows; a flow is in exactly the list its state
//! names (`Idle`: none); every backlogged flow is in the new or old list and, while the
//! heap is kept, in the heap with its byte count (the heap is empty when it is not); a
//! host's load is the number of `loaded` flows that point at it; `Idle` flows are empty
//! and are the only free buckets. Checked by the tests after
//! every operation.

use crate::aqm::{judge_packet, Aqm, AqmKind, AqmParams, AqmStats, Cobalt, Codel, NoAqm, Verdict};
use crate::pool::{PktId, PktQueue, Pool};
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::setassoc::{SetAssoc, Way};
use crate::rate::Rate;
use crate::rng::{mix64, Rng};
use crate::sched::heap::IndexedDHeap;
use crate::tcp::ack_filter::AckFilterMode;
use crate::time::Instant;
use weir_wire::ethernet::{self, ethertype};
use weir_wire::{ipv4, ipv6};

const NIL: u32 = u32::MAX;

/// How flows are told apart and how hosts share (the policy's `isolate`, CAKE's modes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// `"flow"`: one queue per 5-tuple.
    Flow,
    /// `"src-host"`: one queue per source address.
    SrcHost,
    /// `"dst-host"`: one queue per destination address.
    DstHost,
    /// `"hosts"`: one queue per (source, destination) pair.
    Hosts,
    /// `"dual-src"`: 5-tuple queues, fair among source hosts first.
    DualSrc,
    /// `"dual-dst"`: 5-tuple queues, fair among destination hosts first.
    DualDst,
    /// `"triple"`: 5-tuple queues, fair among source and destination hosts first.
    #[default]
    Triple,
}

impl Isolation {
    pub const ALL: [Isolation; 7] = [
        Isolation::Flow,
        Isolation::SrcHost,
        Isolation::DstHost,
        Isolation::Hosts,
        Isolation::DualSrc,
        Isolation::DualDst,
        Isolation::Triple,
    ];
    /// The policy's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Flow => "flow",
            Isolation::SrcHost => "src-host",
            Isolation::DstHost => "dst-host",
            Isolation::Hosts => "hosts",
            Isolation::DualSrc => "dual-src",
            Isolation::DualDst => "dual-dst",
            Isolation::Triple => "triple",
        }
    }
    /// Parse a policy value.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or_else(|| {
                format!(
                    "isolate: unknown value {s:?} (expected \"flow\", \"src-host\", \"dst-host\", \
                 \"hosts\", \"dual-src\", \"dual-dst\" or \"triple\")"
                )
            })
    }
    /// Whether a flow's quantum is divided by its source host's load.
    fn by_src(self) -> bool {
        matches!(self, Isolation::DualSrc | Isolation::Triple)
    }
    /// Whether a flow's quantum is divided by its destination host's load.
    fn by_dst(self) -> bool {
        matches!(self, Isolation::DualDst | Isolation::Triple)
    }
}

/// Configuration of a flow queue (the policy's `queue = "fq"` keys: `flows`, `quantum`,
/// `limit`, `isolate`, `aqm`, `target`, `interval`, `ecn`, `ack_filter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FqConfig {
    /// Flow buckets (rounded up to a multiple of 8).
    pub flows: u32,
    /// DRR quantum in bytes.
    pub quantum: u32,
    /// Packets held at most.
    pub limit_packets: u32,
    /// Bytes held at most.
    pub limit_bytes: u64,
    pub isolate: Isolation,
    pub aqm: AqmKind,
    pub params: AqmParams,
    /// CAKE's ACK filter on every flow (default off).
    pub ack_filter: AckFilterMode,
}

impl FqConfig {
    /// CAKE's `CAKE_QUEUES`.
    pub const FLOWS: u32 = 1024;
    /// CAKE's and fq_codel's packet limit.
    pub const LIMIT_PACKETS: u32 = 10_240;

    /// CAKE's defaults for a class of `rate` (`None`: unlimited): see the module comment.
    pub fn for_rate(rate: Option<Rate>) -> Self {
        let params = AqmParams::cake(rate);
        let (quantum, memory) = match rate {
            None => (1514, u64::MAX),
            Some(r) => {
                let bytes_per_sec = r.bytes_per_sec();
                let q = (bytes_per_sec >> 12).clamp(300, 1514) as u32;
                // rate × interval × 4, at least 4 MiB
                let four_bdp =
                    bytes_per_sec as u128 * params.interval.0 as u128 * 4 / 1_000_000_000;
                (q, (four_bdp as u64).max(4 << 20))
            }
        };
        let by_packets = Self::LIMIT_PACKETS as u64 * AqmParams::MTU as u64;
        FqConfig {
            flows: Self::FLOWS,
            quantum,
            limit_packets: Self::LIMIT_PACKETS,
            limit_bytes: memory.min(by_packets),
            isolate: Isolation::Triple,
            aqm: AqmKind::Cobalt,
            params,
            ack_filter: AckFilterMode::Off,
        }
    }

    /// Check the values; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.flows == 0 || self.flows > 1 << 24 {
            return Err(format!(
                "flows: {} is out of range (1 to 16777216 buckets)",
                self.flows
            ));
        }
        if !(256..=65535).contains(&self.quantum) {
            return Err(format!(
                "quantum: {} bytes is out of range (256 to 65535)",
                self.quantum
            ));
        }
        if self.limit_packets == 0 {
            return Err("limit: a queue must hold at least one packet".into());
        }
        if self.limit_bytes < self.params.mtu as u64 {
            return Err(format!(
                "limit: {} bytes cannot hold one {}-byte frame",
                self.limit_bytes, self.params.mtu
            ));
        }
        self.params.validate()
    }

    /// The queue, its host hashes seeded with `seed`.
    pub fn build(&self, seed: u64) -> Result<Box<dyn Qdisc>, String> {
        Ok(match self.aqm {
            AqmKind::None => Box::new(Fq::<NoAqm>::new(self.clone(), seed)?),
            AqmKind::Codel => Box::new(Fq::<Codel>::new(self.clone(), seed)?),
            AqmKind::Cobalt => Box::new(Fq::<Cobalt>::new(self.clone(), seed)?),
        })
    }
}

impl Default for FqConfig {
    /// [`FqConfig::for_rate`] of an unlimited class.
    fn default() -> Self {
        Self::for_rate(None)
    }
}

/// Which list a flow is in, and how it counts (CAKE's `CAKE_SET_*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
enum Set {
    /// In no list, empty: the bucket is free.
    #[default]
    Idle,
    /// In the new list (sparse).
    New,
    /// In the old list, empty (counted sparse: CAKE's `SPARSE_WAIT`).
    OldWait,
    /// In the old list with packets (bulk).
    Bulk,
    /// In the decaying list, empty, its AQM state not at rest.
    Decaying,
}

/// One flow bucket: its queue, DRR deficit, list links and AQM state.
#[derive(Clone)]
struct Flow<A> {
    q: PktQueue,
    deficit: i32,
    next: u32,
    prev: u32,
    set: Set,
    /// Counted in its hosts' loads (see the module comment's *host load*).
    loaded: bool,
    aqm: A,
}

/// An intrusive doubly linked list of flows (through `Flow::next/prev`).
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// Which of the three lists.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Which {
    New,
    Old,
    Decaying,
}

/// The old list when quanta are divided by host loads (`dual-*`, `triple`): a calendar
/// of DRR rounds (see the module comment). A flow's key is `round << 24 | seq`: the round
/// in which it is next served, then the order in which it joined that round.
struct Rounds {
    heap: IndexedDHeap<4>,
    /// The round of the flow served last.
    round: u64,
    seq: u64,
}

impl Rounds {
    const SEQ_BITS: u32 = 24;
    /// Rebase the round numbers once they pass 2³⁹ (the keys keep 40 bits of round).
    const REBASE: u64 = 1 << 39;

    fn key(&mut self, rounds_ahead: u64) -> u64 {
        self.seq += 1;
        (self.round + rounds_ahead) << Self::SEQ_BITS | (self.seq & ((1 << Self::SEQ_BITS) - 1))
    }
}

/// A host table for one role (source or destination): tags and loads.
struct Hosts {
    sets: SetAssoc,
    /// Each slot's host load (see the module comment).
    load: Vec<u32>,
    /// Slots with a non-zero load.
    busy: u32,
}

impl Hosts {
    fn new(n: u32) -> Self {
        Hosts {
            sets: SetAssoc::new(n),
            load: vec![0; n as usize],
            busy: 0,
        }
    }
    /// The slot of host hash `h` (a slot no flow counts on may be taken).
    fn slot(&mut self, h: u64) -> u32 {
        let load = &self.load;
        self.sets.lookup(h, |j| load[j] == 0).bucket()
    }
    /// Count one flow more (`up`) or one less on slot `j`.
    fn count(&mut self, j: u32, up: bool) {
        let b = &mut self.load[j as usize];
        if up {
            self.busy += (*b == 0) as u32;
            *b += 1;
        } else if *b > 0 {
            *b -= 1;
            self.busy -= (*b == 0) as u32;
        }
    }
}

/// `65535 / load` for host loads up to 1024 (CAKE's `quantum_div`), so a refill does no
/// division; heavier loads divide.
static QUANTUM_DIV: [u16; 1025] = {
    let mut t = [0u16; 1025];
    let mut i = 1;
    while i < 1025 {
        t[i] = (65535 / i) as u16;
        i += 1;
    }
    t
};

/// The host table side of a flow queue in a `dual-*` or `triple` mode.
struct HostIsolation {
    src: Option<Hosts>,
    dst: Option<Hosts>,
    /// Per flow bucket: its source and destination host slots.
    src_of: Vec<u32>,
    dst_of: Vec<u32>,
}

/// The flow queue (a [`Qdisc`]; see the module comment), with per-flow AQM `A`.
pub struct Fq<A: Aqm> {
    cfg: FqConfig,
    seed: u64,
    sets: SetAssoc,
    flows: Vec<Flow<A>>,
    /// The new, old and decaying lists (the old one unused when `rounds` is set).
    lists: [List; 3],
    /// The old list as a calendar of rounds, in the modes that divide quanta.
    rounds: Option<Rounds>,
    /// Backlogged flows by `u64::MAX - bytes`: the fattest on top; kept while
    /// `fat_left > 0`, empty otherwise.
    fat: IndexedDHeap<4>,
    /// Dequeues left before the fattest-flow heap is dropped (reset by every overflow).
    fat_left: u32,
    hosts: Option<HostIsolation>,
    len: usize,
    bytes: u64,
    /// Flows holding packets.
    active: u32,
    /// Flows in the `Bulk` set.
    bulk: u32,
    stats: AqmStats,
    /// Flows picked by `dequeue` (the tests bound the work per packet with it).
    #[cfg(test)]
    picks: u64,
}

/// The source and destination addresses of an IPv4 or IPv6 frame, as 128-bit numbers
/// with the family in the top bit of IPv4 ones; `None` when the frame is not IP or its IP
/// header is cut short or impossible.
fn ip_addrs(frame: &[u8]) -> Option<(u128, u128)> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    const V4: u128 = 1 << 127;
    match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
            let a = |x: core::net::Ipv4Addr| V4 | u32::from(x) as u128;
            Some((a(ip.src_addr()), a(ip.dst_addr())))
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(eth.payload()).ok()?;
            Some((u128::from(ip.src_addr()), u128::from(ip.dst_addr())))
        }
        _ => None,
    }
}

/// A seeded 64-bit hash of a host address (`None`: the "no address" host).
#[inline]
fn host_hash(seed: u64, addr: Option<u128>) -> u64 {
    match addr {
        None => mix64(seed ^ 0x6e6f_2d61_6464_7221),
        Some(a) => mix64(mix64(seed ^ (a >> 64) as u64) ^ a as u64),
    }
}

impl<A: Aqm> Fq<A> {
    /// A flow queue with `cfg` (validated), host hashes seeded with `seed`.
    pub fn new(mut cfg: FqConfig, seed: u64) -> Result<Self, String> {
        cfg.validate()?;
        cfg.flows = SetAssoc::round(cfg.flows);
        let n = cfg.flows;
        let flow = Flow {
            q: PktQueue::new(),
            deficit: 0,
            next: NIL,
            prev: NIL,
            set: Set::Idle,
            loaded: false,
            aqm: A::default(),
        };
        let iso = cfg.isolate;
        let hosts = (iso.by_src() || iso.by_dst()).then(|| HostIsolation {
            src: iso.by_src().then(|| Hosts::new(n)),
            dst: iso.by_dst().then(|| Hosts::new(n)),
            src_of: vec![0; n as usize],
            dst_of: vec![0; n as usize],
        });
        let rounds = hosts.is_some().then(|| Rounds {
            heap: IndexedDHeap::with_ids(n as usize),
            round: 0,
            seq: 0,
        });
        Ok(Fq {
            seed,
            sets: SetAssoc::new(n),
            flows: vec![flow; n as usize],
            lists: [List::EMPTY; 3],
            rounds,
            fat: IndexedDHeap::with_ids(n as usize),
            fat_left: 0,
            hosts,
            len: 0,
            bytes: 0,
            active: 0,
            bulk: 0,
            stats: AqmStats::default(),
            #[cfg(test)]
            picks: 0,
            cfg,
        })
    }

    pub fn config(&self) -> &FqConfig {
        &self.cfg
    }
    /// The AQM parameters.
    pub fn params(&self) -> &AqmParams {
        &self.cfg.params
    }

    /// Bytes of state per flow bucket (see the module comment's "Cost and memory").
    pub fn bytes_per_flow(&self) -> usize {
        // host indices (8), per host table a tag and a bulk count (12), and the round
        // calendar's position and entry (20)
        let host = self.hosts.as_ref().map_or(0, |h| {
            8 + 12 * (h.src.is_some() as usize + h.dst.is_some() as usize) + 20
        });
        8 + core::mem::size_of::<Flow<A>>() + 4 + 16 + host
    }

    /// The counters (also through [`Qdisc::aqm_stats`]).
    pub fn stats(&self) -> AqmStats {
        let mut s = self.stats;
        s.active_flows = self.active;
        s.bulk_flows = self.bulk;
        s.sparse_flows = self.len_of(Which::New) + self.len_of(Which::Old) - self.bulk;
        s.decaying_flows = self.len_of(Which::Decaying);
        if let Some(h) = &self.hosts {
            s.src_hosts = h.src.as_ref().map_or(0, |t| t.busy);
            s.dst_hosts = h.dst.as_ref().map_or(0, |t| t.busy);
        }
        s
    }

    // ---- lists ----

    /// Flows in list `w`.
    #[inline]
    fn len_of(&self, w: Which) -> u32 {
        match (&self.rounds, w) {
            (Some(r), Which::Old) => r.heap.len() as u32,
            _ => self.lists[w as usize].len,
        }
    }

    /// Append flow `i` to list `w` (to the next round of the calendar).
    fn push(&mut self, w: Which, i: u32) {
        self.push_ahead(w, i, 1);
    }

    /// Append flow `i` to list `w`; to the calendar, `rounds_ahead` rounds on.
    fn push_ahead(&mut self, w: Which, i: u32, rounds_ahead: u64) {
        if let (Some(r), Which::Old) = (&mut self.rounds, w) {
            let key = r.key(rounds_ahead);
            r.heap.set(i, key);
            return;
        }
        let l = &mut self.lists[w as usize];
        let f = &mut self.flows[i as usize];
        f.next = NIL;
        f.prev = l.tail;
        if l.tail == NIL {
            l.head = i;
        } else {
            self.flows[l.tail as usize].next = i;
        }
        l.tail = i;
        l.len += 1;
    }

    fn unlink(&mut self, w: Which, i: u32) {
        if let (Some(r), Which::Old) = (&mut self.rounds, w) {
            r.heap.remove(i);
            return;
        }
        let (prev, next) = {
            let f = &self.flows[i as usize];
            (f.prev, f.next)
        };
        let l = &mut self.lists[w as usize];
        if prev == NIL {
            l.head = next;
        } else {
            self.flows[prev as usize].next = next;
        }
        if next == NIL {
            l.tail = prev;
        } else {
            self.flows[next as usize].prev = prev;
        }
        l.len -= 1;
    }

    /// Move flow `i` from list `from` to the tail of list `to`.
    #[inline]
    fn move_to(&mut self, from: Which, to: Which, i: u32) {
        self.unlink(from, i);
        self.push(to, i);
    }

    /// The first flow of list `w`; for the calendar, the round moves to its round.
    #[inline]
    fn head_of(&mut self, w: Which) -> u32 {
        let Some(r) = self.rounds.as_mut().filter(|_| w == Which::Old) else {
            return self.lists[w as usize].head;
        };
        let (key, i) = r.heap.peek().expect("a non-empty calendar");
        r.round = key >> Rounds::SEQ_BITS;
        if r.round >= Rounds::REBASE {
            r.heap.sub_all(r.round << Rounds::SEQ_BITS);
            r.round = 0;
        }
        i
    }

    // ---- hosts and quanta ----

    /// Count flow `i` in its hosts' loads (`on`) or stop counting it; nothing when it
    /// is counted so already.
    #[inline]
    fn set_loaded(&mut self, i: u32, on: bool) {
        if std::mem::replace(&mut self.flows[i as usize].loaded, on) == on {
            return;
        }
        if let Some(h) = &mut self.hosts {
            if let Some(t) = &mut h.src {
                t.count(h.src_of[i as usize], on);
            }
            if let Some(t) = &mut h.dst {
                t.count(h.dst_of[i as usize], on);
            }
        }
    }

    /// Flow `i`'s share of a round in units of 2⁻¹⁶ bytes in the modes that divide
    /// quanta: `quantum · ⌊65535 / load⌋`, the load being the larger load of
    /// its hosts (`cake_get_flow_quantum`, before its dithering); `None` in the others.
    #[inline]
    fn share16(&self, i: u32) -> Option<u64> {
        let h = self.hosts.as_ref()?;
        let of = |t: &Option<Hosts>, slots: &[u32]| {
            t.as_ref().map_or(0, |t| t.load[slots[i as usize] as usize])
        };
        let load = of(&h.src, &h.src_of).max(of(&h.dst, &h.dst_of)).max(1) as usize;
        let div = QUANTUM_DIV
            .get(load)
            .map_or(65535 / load as u64, |&d| d as u64);
        Some((self.cfg.quantum as u64 * div).max(1))
    }

    /// The deficit a flow starts with: the quantum, or its share dithered by a random
    /// 16-bit fraction so that the rounding does not accumulate.
    #[inline]
    fn quantum_of(&self, i: u32, rng: &mut Rng) -> i32 {
        self.share16(i).map_or(self.cfg.quantum as i32, |q16| {
            ((q16 + (rng.next_u64() >> 48)) >> 16) as i32
        })
    }

    /// Refill flow `i`, whose deficit is used up: one quantum and one round on, or — in
    /// the modes that divide quanta — the shares of as many rounds as it takes to get a
    /// positive deficit (the calendar skips them; DRR would visit the flow once a round
    /// until then). Returns the rounds.
    #[inline]
    fn refill(&mut self, i: u32, rng: &mut Rng) -> u64 {
        let share = self.share16(i);
        let f = &mut self.flows[i as usize];
        let Some(q16) = share else {
            f.deficit += self.cfg.quantum as i32;
            return 1;
        };
        // what the deficit needs to reach 1, in units of 2^-16 bytes
        let need = (1 - f.deficit as i64) as u64 * 65536;
        let rounds = if q16 >= need { 1 } else { need.div_ceil(q16) };
        f.deficit += ((rounds * q16 + (rng.next_u64() >> 48)) >> 16) as i32;
        rounds
    }

    /// Read flow `i`'s hosts from packet `pkt` (a bucket just claimed).
    fn set_hosts(&mut self, i: u32, pkt: PktId, pool: &Pool) {
        let seed = self.seed;
        let Some(h) = &mut self.hosts else { return };
        let addrs = ip_addrs(pool.data(pkt));
        if let Some(t) = &mut h.src {
            h.src_of[i as usize] = t.slot(host_hash(seed, addrs.map(|a| a.0)));
        }
        if let Some(t) = &mut h.dst {
            h.dst_of[i as usize] = t.slot(host_hash(seed, addrs.map(|a| a.1)));
        }
    }

    /// The key of packet `pkt` in the isolation mode.
    #[inline]
    fn key(&self, pkt: PktId, pool: &Pool) -> u64 {
        let iso = self.cfg.isolate;
        if !matches!(
            iso,
            Isolation::SrcHost | Isolation::DstHost | Isolation::Hosts
        ) {
            return pool.meta(pkt).flow;
        }
        let addrs = ip_addrs(pool.data(pkt));
        let src = || host_hash(self.seed, addrs.map(|a| a.0));
        let dst = || host_hash(self.seed, addrs.map(|a| a.1));
        match iso {
            Isolation::SrcHost => src(),
            Isolation::DstHost => dst(),
            _ => src() ^ dst(),
        }
    }

    /// The bucket of packet `pkt` (claimed, with its AQM state reset and its hosts read,
    /// if it was free).
    #[inline]
    fn bucket(&mut self, pkt: PktId, pool: &Pool) -> u32 {
        let key = self.key(pkt, pool);
        let flows = &self.flows;
        match self.sets.lookup(key, |i| flows[i].set == Set::Idle) {
            Way::Hit(i) => i,
            Way::Claimed(i) => {
                self.flows[i as usize].aqm = A::default();
                self.set_hosts(i, pkt, pool);
                i
            }
            Way::Collision(i) => {
                self.stats.collisions += 1;
                i
            }
        }
    }

    // ---- packets ----

    /// Dequeues the fattest-flow heap is kept for after an overflow (CAKE's
    /// `overflow_timeout`).
    const FAT_KEPT: u32 = 65_535;

    /// Keep flow `i`'s heap entry equal to its bytes (absent when empty), while the heap
    /// is kept.
    #[inline]
    fn reheap(&mut self, i: u32) {
        if self.fat_left == 0 {
            return;
        }
        let b = self.flows[i as usize].q.bytes();
        if b == 0 {
            self.fat.remove(i);
        } else {
            self.fat.set(i, u64::MAX - b);
        }
    }

    /// The fattest backlogged flow, the heap built from every bucket first if it was not
    /// kept; kept from now for [`Fq::FAT_KEPT`] dequeues.
    fn fattest(&mut self) -> Option<u32> {
        let build = self.fat_left == 0;
        // kept from here on, so `reheap` fills it
        self.fat_left = Self::FAT_KEPT;
        if build {
            for i in 0..self.flows.len() as u32 {
                self.reheap(i);
            }
        }
        self.fat.peek().map(|(_, v)| v)
    }

    /// Counters after packet of `len` bytes left flow `i`.
    #[inline]
    fn took(&mut self, i: u32, len: u32) {
        self.len -= 1;
        self.bytes -= len as u64;
        let f = &self.flows[i as usize];
        if f.q.is_empty() {
            self.active -= 1;
            if f.set == Set::New && f.deficit > 0 {
                // a sparse flow that owes nothing: it uses less than a share
                self.set_loaded(i, false);
            }
        }
        self.reheap(i);
    }

    /// Remove the packet after `prev` (the head when `None`) from flow `i`'s queue and hand
    /// it to `cx.dropped` with `cause`; the flow keeps its place in its list (found empty
    /// later, as any flow). The ACK filter's and the limits' way out.
    pub(crate) fn unlink_after(
        &mut self,
        i: u32,
        prev: Option<PktId>,
        cx: &mut Ctx<'_>,
        cause: DropCause,
    ) -> Option<PktId> {
        let p = self.flows[i as usize].q.remove_after(cx.pool, prev)?;
        self.took(i, cx.pool.len(p));
        cx.drop_later(p, cause);
        Some(p)
    }

    /// Flow `i` (from list `w`) was found empty at dequeue: decaying, to the old list (RFC
    /// 8290) or out (see the module comment).
    fn found_empty(&mut self, w: Which, i: u32, now: Instant) {
        let was = self.flows[i as usize].set;
        if was == Set::Bulk {
            self.bulk -= 1;
        }
        self.set_loaded(i, false);
        let (set, to) = if !self.flows[i as usize].aqm.at_rest(now) {
            (Set::Decaying, Some(Which::Decaying))
        } else if w == Which::New && self.len_of(Which::Old) > 0 {
            (Set::OldWait, Some(Which::Old))
        } else {
            (Set::Idle, None)
        };
        self.flows[i as usize].set = set;
        match to {
            Some(to) => self.move_to(w, to, i),
            None => self.unlink(w, i),
        }
    }

    /// The flow to serve next: the head of the decaying list on the first pick of a
    /// dequeue, else of the new list, the old list, the decaying list.
    #[inline]
    fn pick(&mut self, first: bool) -> Option<(Which, u32)> {
        let order = if first {
            [Which::Decaying, Which::New, Which::Old]
        } else {
            [Which::New, Which::Old, Which::Decaying]
        };
        let w = order.into_iter().find(|&w| self.len_of(w) > 0)?;
        #[cfg(test)]
        {
            self.picks += 1;
        }
        Some((w, self.head_of(w)))
    }
}

impl<A: Aqm> Qdisc for Fq<A> {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let len = cx.pool.len(pkt);
        let i = self.bucket(pkt, cx.pool);
        if self.flows[i as usize].q.is_empty() {
            self.active += 1;
            self.stats.max_flows_seen = self.stats.max_flows_seen.max(self.active);
            self.set_loaded(i, true);
        }
        self.flows[i as usize].q.push_back(cx.pool, pkt);
        self.len += 1;
        self.bytes += len as u64;
        self.reheap(i);
        match self.flows[i as usize].set {
            set @ (Set::Idle | Set::Decaying) => {
                if set == Set::Decaying {
                    self.unlink(Which::Decaying, i);
                }
                self.push(Which::New, i);
                let q = self.quantum_of(i, cx.rng);
                let f = &mut self.flows[i as usize];
                f.set = Set::New;
                f.deficit = q;
                self.stats.new_flows += 1;
            }
            Set::OldWait => {
                self.flows[i as usize].set = Set::Bulk;
                self.bulk += 1;
            }
            Set::New | Set::Bulk => {}
        }
        if self.cfg.ack_filter != AckFilterMode::Off && self.flows[i as usize].q.len() > 1 {
            self.ack_filter(i, pkt, cx);
        }
        while self.len > self.cfg.limit_packets as usize || self.bytes > self.cfg.limit_bytes {
            let Some(v) = self.fattest() else { break };
            self.stats.overlimit_dropped += 1;
            let f = &mut self.flows[v as usize];
            f.aqm.on_overflow(&self.cfg.params, cx.now);
            if f.q.head() == Some(pkt) {
                // the arrival is the fattest flow's head: refuse it
                f.q.pop_front(cx.pool);
                self.took(v, len);
                return Err(DropCause::Overlimit);
            }
            self.unlink_after(v, None, cx, DropCause::Overlimit);
        }
        Ok(())
    }

    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        if self.len == 0 {
            return None;
        }
        if self.fat_left > 0 {
            self.fat_left -= 1;
            if self.fat_left == 0 {
                self.fat.clear();
            }
        }
        let mut first = true;
        loop {
            let (w, i) = self.pick(first)?;
            first = false;
            if self.flows[i as usize].deficit <= 0 {
                let f = &mut self.flows[i as usize];
                match f.set {
                    Set::New if !f.q.is_empty() => {
                        f.set = Set::Bulk;
                        self.bulk += 1;
                    }
                    Set::New => f.set = Set::OldWait,
                    _ => {}
                }
                // it overspent: counted while it pays back (its quantum counts itself)
                self.set_loaded(i, true);
                let rounds = self.refill(i, cx.rng);
                let to = if w == Which::Decaying { w } else { Which::Old };
                self.unlink(w, i);
                self.push_ahead(to, i, rounds);
                continue;
            }
            loop {
                let f = &mut self.flows[i as usize];
                let Some(pkt) = f.q.pop_front(cx.pool) else {
                    f.aqm.on_empty(&self.cfg.params, cx.now);
                    self.found_empty(w, i, cx.now);
                    break;
                };
                let len = cx.pool.len(pkt);
                self.took(i, len);
                let f = &mut self.flows[i as usize];
                let v = judge_packet(
                    &mut f.aqm,
                    &self.cfg.params,
                    pkt,
                    f.q.bytes(),
                    self.bytes,
                    cx,
                    &mut self.stats,
                );
                if v == Verdict::Drop {
                    cx.drop_later(pkt, DropCause::Aqm);
                    continue;
                }
                f.deficit -= len as i32;
                return Some(pkt);
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for i in 0..self.flows.len() as u32 {
            while self.unlink_after(i, None, cx, cause).is_some() {}
        }
    }

    fn aqm_stats(&self) -> Option<AqmStats> {
        Some(self.stats())
    }
}

mod ack;
#[cfg(test)]
mod tests;
