//! The connection table: one entry per transport session, shared by both directions of
//! the bridged link (a packet and its reply find the same entry), for TCP rate control,
//! MSS clamping and application classification.
//!
//! Sans-IO like the rest of the engine: every call that depends on time takes `now`, and
//! nothing allocates after [`ConnTable::new`].
//!
//! # Use
//! Per packet the driver builds a [`FlowKey`] ([`FlowKey::from_parsed`]), calls
//! [`ConnTable::lookup_or_insert`] (or the batch form for a receive batch; → `ConnId`,
//! which goes into `Meta::conn`, and the packet's [`Side`]), [`ConnTable::observe`]
//! (counters) and, for TCP, [`ConnTable::observe_tcp`] (handshake options, sequence
//! numbers, windows, RTT: see [`tcp`]). Now and then (e.g. once per batch) it calls
//! [`ConnTable::expire`] with a bounded budget.
//!
//! # Parameters ([`ConnConfig`])
//! * `capacity` — connections, a hard bound (default 65,536; at most 2^28).
//! * `idle_timeout` — an entry silent this long is removed (default 30 s): UDP, ICMP and
//!   other protocols, and TCP until both sides have sent an ACK (a SYN without answer).
//! * `tcp_established_timeout` — the same for TCP once both sides have sent an ACK, also
//!   while half-closed (default 300 s).
//! * `tcp_closed_timeout` — TCP after an RST or a FIN from both sides (default 10 s).
//! * `evict_candidates` — entries examined to choose a victim when full (default 8).
//! * `seed` — of the flow hash ([`FlowKey::hash`]; the classifier's `flow_hash` with the
//!   same seed is the same value, see [`ConnTable::lookup_or_insert_hashed`]).
//!
//! # Data structures
//! * An arena of `capacity` [`Conn`] entries (key + state, 160 bytes) addressed by a
//!   [`ConnId`] (`u32` slot). Free slots form a LIFO list threaded through the free
//!   entries, so a removed slot is reused first (still in cache).
//! * An index: open addressing with linear probing over a power-of-two array of `u64`
//!   buckets, at least twice the capacity (load ≤ 1/2, so a miss ends after ~2.5 probes
//!   on average). A bucket holds the high 32 bits of the key's hash (its low bits choose
//!   the home bucket, the rest is a tag that screens out other keys before the arena is
//!   touched) and the slot. Deletion shifts later buckets of the cluster back (Knuth's
//!   Algorithm R), so there are no tombstones and probe lengths do not decay with churn.
//! * A lookup hashes the key, reads one bucket (rarely two) and one entry to compare the
//!   key: two cache misses in a large table, the second depending on the first.
//!   [`ConnTable::lookup_or_insert_batch`] and [`ConnTable::lookup_batch`] take a batch
//!   of keys (a driver's receive batch) and work through it in chunks of 16 in passes —
//!   all hashes, then all home buckets, then all candidate entries — so the CPU has
//!   sixteen independent misses in flight instead of two dependent ones at a time; the
//!   results equal one call per key, in order.
//!
//! # Eviction (table full)
//! An insert into a full table first evicts one entry, chosen among
//! `evict_candidates` consecutive slots from a rotating hand (CLOCK-like: every slot comes
//! up in turn; the slot order is unrelated to age or address, so this is a sample). The
//! victim is the lowest by (rank, last seen), rank being: 0 already idle past its timeout
//! (counted as `expired`, not `evicted`), 1 closed TCP, 2 a connection that has not been
//! answered (TCP not established; other protocols with no packet from the reply side),
//! 3 the rest. A flood of unanswered SYNs or spoofed UDP therefore displaces its own
//! entries before established connections. O(`evict_candidates`) per insert, no
//! per-packet bookkeeping (an LRU list would cost two random writes on every packet).
//!
//! # Expiry
//! [`ConnTable::expire`]`(now, max)` advances a second rotating hand over at most `max`
//! slots and removes the entries idle past their timeout (`now - last_seen >= timeout`).
//! Bounded work per call; an idle entry goes at most one full pass (`capacity / max`
//! calls) after its timeout. Example: 65,536 slots, `expire(now, 64)` every millisecond →
//! a pass per 1.05 s.
//!
//! # Memory
//! 176 bytes a slot, all allocated by `new`: the 160-byte [`Conn`] (40-byte key, first
//! and last seen, packets and bytes per side: 40 bytes; [`TcpConn`]: 80 bytes) and two
//! 8-byte buckets. The entry is above the 128 bytes aimed at because of the TCP state:
//! per side sequence, acknowledgement, TSval, one timed segment and its time, the RTT
//! minimum, smoothed and handshake values (eight `u32`), window, MSS, flags and scale,
//! already in `u32` microseconds and a wrapping clock where `u64` nanoseconds would be
//! the plain choice. An entry is not cache-line aligned (a 192-byte aligned one would
//! keep every key in one line but cost 20 % more memory); a TCP packet touches the
//! entry's three lines and one index line.
//!
//! # Ids
//! A `ConnId` is valid until its entry is removed, evicted or expired; then the slot is
//! reused. Holders of ids across time (a packet queued while its connection is evicted)
//! can compare [`Conn::key`] with the packet's key.
//!
//! # Statistics ([`ConnStats`])
//! `live`, `inserted`, `hits`/`misses` (of `lookup_or_insert`; `lookup` is a read-only
//! query and counts nothing), `removed` (explicit), `evicted`, `expired`, `rtt_samples`,
//! `rtt_ambiguous` (timings cancelled by Karn's rule), `rtt_end_to_end` (samples that
//! gave an end-to-end RTT: the other half had an estimate; see [`health`]),
//! `retransmissions` (TCP segments carrying sequence space already sent).
//! Identities: `inserted = live + removed + evicted + expired`; `misses = inserted`.
//!
//! # Invariants
//! The index holds exactly the live slots, each once, each reachable from its home bucket
//! without crossing an empty bucket; a slot is live iff its key is not the free marker;
//! free slots are exactly those on the free list; `live <= capacity`.
//! [`ConnTable::check`] verifies all of it (tests).

pub mod health;
pub mod talkers;
pub mod tcp;

pub use crate::flow::{FlowKey, Side};
pub use tcp::{seq_ge, seq_gt, seq_le, seq_lt, Observed, Segment, TcpConn, TcpPhase};

use crate::time::{Duration, Instant};
use core::net::IpAddr;
use serde::Serialize;

const NIL: u32 = u32::MAX;
/// Keys per chunk of the batch lookups.
const BATCH: usize = 16;
const IPPROTO_TCP: u8 = 6;
/// A connection silent this long has its pending RTT timings cancelled (the timing clock
/// wraps after 71.6 minutes; see [`tcp`]).
const STALE_TIMINGS: Duration = Duration::from_secs(30 * 60);
/// Largest capacity accepted.
pub const MAX_CAPACITY: u32 = 1 << 28;

/// Index of an entry in a [`ConnTable`] (what `Meta::conn` holds).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl ConnId {
    /// "No connection" (`Meta::conn`'s default).
    pub const NONE: ConnId = ConnId(u32::MAX);
}

/// Configuration of a [`ConnTable`]; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnConfig {
    pub capacity: u32,
    pub idle_timeout: Duration,
    pub tcp_established_timeout: Duration,
    pub tcp_closed_timeout: Duration,
    pub evict_candidates: u32,
    pub seed: u64,
}

impl ConnConfig {
    pub const DEFAULT: ConnConfig = ConnConfig {
        capacity: 65_536,
        idle_timeout: Duration::from_secs(30),
        tcp_established_timeout: Duration::from_secs(300),
        tcp_closed_timeout: Duration::from_secs(10),
        evict_candidates: 8,
        seed: 0,
    };
}

impl Default for ConnConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Counters of a [`ConnTable`]; see the module documentation.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConnStats {
    pub capacity: u64,
    pub live: u64,
    pub inserted: u64,
    pub hits: u64,
    pub misses: u64,
    pub removed: u64,
    pub evicted: u64,
    pub expired: u64,
    pub rtt_samples: u64,
    pub rtt_ambiguous: u64,
    /// Samples that gave an end-to-end RTT (the other half had an estimate): what the
    /// classes' histograms count ([`health`]).
    pub rtt_end_to_end: u64,
    /// TCP segments that carried sequence space already sent (retransmissions, or
    /// reordering upstream).
    pub retransmissions: u64,
}

/// One connection: its key (oriented as its first packet: originator → reply), when it
/// was seen, packets and bytes per side, and TCP state.
#[derive(Clone, Debug)]
pub struct Conn {
    key: FlowKey,
    first_seen: Instant,
    last_seen: Instant,
    bytes: [u64; 2],
    /// Wrapping counters. In a free slot, `packets[0]` links the free list.
    packets: [u32; 2],
    tcp: TcpConn,
}

impl Conn {
    const fn free(next: u32) -> Conn {
        Conn {
            key: FlowKey::free(),
            first_seen: Instant::ZERO,
            last_seen: Instant::ZERO,
            bytes: [0; 2],
            packets: [next, 0],
            tcp: TcpConn::new(),
        }
    }

    #[inline]
    fn fresh(key: FlowKey, now: Instant) -> Conn {
        Conn {
            key,
            first_seen: now,
            last_seen: now,
            bytes: [0; 2],
            packets: [0; 2],
            tcp: TcpConn::new(),
        }
    }

    /// The key, oriented as the connection's first packet (`src()` is the originator).
    pub fn key(&self) -> &FlowKey {
        &self.key
    }

    /// The originator's address and port.
    pub fn orig(&self) -> (IpAddr, u16) {
        self.key.src()
    }

    /// The reply side's address and port.
    pub fn reply(&self) -> (IpAddr, u16) {
        self.key.dst()
    }

    /// IP protocol.
    pub fn proto(&self) -> u8 {
        self.key.proto()
    }

    pub fn is_tcp(&self) -> bool {
        self.key.proto() == IPPROTO_TCP
    }

    /// The side a packet with key `key` (equal to this connection's) comes from.
    #[inline]
    pub fn side_of(&self, key: &FlowKey) -> Side {
        if self.key.same_orientation(key) {
            Side::Orig
        } else {
            Side::Reply
        }
    }

    pub fn first_seen(&self) -> Instant {
        self.first_seen
    }

    pub fn last_seen(&self) -> Instant {
        self.last_seen
    }

    /// Time since the last packet.
    pub fn idle(&self, now: Instant) -> Duration {
        now - self.last_seen
    }

    /// Packets seen from `side` (wrapping at 2^32).
    pub fn packets(&self, side: Side) -> u32 {
        self.packets[side.index()]
    }

    /// Bytes seen from `side`, as the driver counted them in [`Conn::observe`].
    pub fn bytes(&self, side: Side) -> u64 {
        self.bytes[side.index()]
    }

    /// TCP state, for a TCP connection.
    pub fn tcp(&self) -> Option<&TcpConn> {
        self.is_tcp().then_some(&self.tcp)
    }

    /// TCP state to change (e.g. [`TcpConn::set_mss_cap`]), for a TCP connection.
    pub fn tcp_mut(&mut self) -> Option<&mut TcpConn> {
        self.is_tcp().then_some(&mut self.tcp)
    }

    /// Refresh `last_seen`; after a long silence, drop pending RTT timings.
    #[inline]
    fn touch(&mut self, now: Instant) {
        if now > self.last_seen {
            if now - self.last_seen > STALE_TIMINGS {
                self.tcp.cancel_timings();
            }
            self.last_seen = now;
        }
    }

    /// Count one packet of `len` bytes from `side` at `now`.
    #[inline]
    pub fn observe(&mut self, side: Side, len: u32, now: Instant) {
        self.touch(now);
        let i = side.index();
        self.packets[i] = self.packets[i].wrapping_add(1);
        self.bytes[i] += len as u64;
    }

    /// Feed one TCP segment from `side` to the TCP state (nothing for other protocols).
    #[inline]
    pub fn observe_tcp(&mut self, side: Side, seg: &Segment, now: Instant) -> Observed {
        if !self.is_tcp() {
            return Observed::default();
        }
        self.touch(now);
        self.tcp.observe(side, seg, now)
    }

    /// 0 expired, 1 closed TCP, 2 not answered, 3 the rest (eviction order).
    fn rank(&self, now: Instant, cfg: &ConnConfig) -> u8 {
        if self.idle(now) >= self.timeout(cfg) {
            return 0;
        }
        if self.is_tcp() {
            match self.tcp.phase() {
                TcpPhase::Closed => 1,
                TcpPhase::Opening => 2,
                TcpPhase::Established | TcpPhase::Closing => 3,
            }
        } else if self.packets[Side::Reply.index()] == 0 {
            2
        } else {
            3
        }
    }

    /// The idle timeout that applies to this connection now.
    pub fn timeout(&self, cfg: &ConnConfig) -> Duration {
        if !self.is_tcp() {
            return cfg.idle_timeout;
        }
        match self.tcp.phase() {
            TcpPhase::Opening => cfg.idle_timeout,
            TcpPhase::Established | TcpPhase::Closing => cfg.tcp_established_timeout,
            TcpPhase::Closed => cfg.tcp_closed_timeout,
        }
    }
}

/// The table. See the module documentation.
pub struct ConnTable {
    cfg: ConnConfig,
    conns: Vec<Conn>,
    /// 0 = empty, else `(hash >> 32) << 32 | (slot + 1)`.
    index: Vec<u64>,
    mask: usize,
    free_head: u32,
    live: u32,
    sweep_hand: u32,
    evict_hand: u32,
    stats: ConnStats,
}

impl ConnTable {
    /// A table with everything allocated up front. Errors on a capacity above
    /// [`MAX_CAPACITY`] or zero eviction candidates. A capacity of 0 makes a table that
    /// tracks nothing (`lookup_or_insert` returns `None`).
    pub fn new(cfg: ConnConfig) -> Result<Self, String> {
        if cfg.capacity > MAX_CAPACITY {
            return Err(format!(
                "connection table capacity {} is above the maximum {MAX_CAPACITY}",
                cfg.capacity
            ));
        }
        if cfg.evict_candidates == 0 {
            return Err("evict_candidates must be at least 1".into());
        }
        let cap = cfg.capacity;
        let buckets = (cap.max(1) as usize).next_power_of_two() * 2;
        let conns = (0..cap)
            .map(|i| Conn::free(if i + 1 < cap { i + 1 } else { NIL }))
            .collect();
        Ok(ConnTable {
            stats: ConnStats {
                capacity: cap as u64,
                ..ConnStats::default()
            },
            cfg,
            conns,
            index: vec![0; buckets],
            mask: buckets - 1,
            free_head: if cap > 0 { 0 } else { NIL },
            live: 0,
            sweep_hand: 0,
            evict_hand: 0,
        })
    }

    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    pub fn capacity(&self) -> usize {
        self.conns.len()
    }

    /// Live connections.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Bytes allocated by the table (arena + index), fixed at `new`.
    pub fn memory_bytes(&self) -> usize {
        self.conns.capacity() * core::mem::size_of::<Conn>()
            + self.index.capacity() * core::mem::size_of::<u64>()
    }

    /// The hash the table uses for `key` (= `key.hash(seed)`).
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        key.hash(self.cfg.seed)
    }

    pub fn stats(&self) -> ConnStats {
        ConnStats {
            live: self.live as u64,
            ..self.stats
        }
    }

    /// `Ok(slot)` if `key` is in the table, else `Err(first empty bucket of its probe)`.
    #[inline]
    fn probe(&self, key: &FlowKey, h: u64) -> Result<u32, usize> {
        let hi = h >> 32;
        let mut i = hi as usize & self.mask;
        loop {
            let b = self.index[i];
            if b == 0 {
                return Err(i);
            }
            if b >> 32 == hi {
                let slot = (b as u32).wrapping_sub(1);
                if self.conns[slot as usize].key == *key {
                    return Ok(slot);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The entry of `key` and the side the packet comes from.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<(ConnId, Side)> {
        self.lookup_hashed(key, self.hash(key))
    }

    /// [`Self::lookup`] with `hash == self.hash(key)` computed by the caller.
    #[inline]
    pub fn lookup_hashed(&self, key: &FlowKey, hash: u64) -> Option<(ConnId, Side)> {
        debug_assert_eq!(hash, self.hash(key));
        let slot = self.probe(key, hash).ok()?;
        Some((ConnId(slot), self.conns[slot as usize].side_of(key)))
    }

    /// The entry of `key`, created (with `key`'s sender as the originator) if there is
    /// none, evicting one entry if the table is full. Refreshes `last_seen`. `None` only
    /// for a table of capacity 0.
    #[inline]
    pub fn lookup_or_insert(&mut self, key: &FlowKey, now: Instant) -> Option<(ConnId, Side)> {
        let h = self.hash(key);
        self.lookup_or_insert_hashed(key, h, now)
    }

    /// [`Self::lookup_or_insert`] with `hash == self.hash(key)` computed by the caller
    /// (e.g. `Fields::flow_hash` with the table's seed, already in `Meta::flow`).
    #[inline]
    pub fn lookup_or_insert_hashed(
        &mut self,
        key: &FlowKey,
        hash: u64,
        now: Instant,
    ) -> Option<(ConnId, Side)> {
        debug_assert_eq!(hash, self.hash(key));
        match self.probe(key, hash) {
            Ok(slot) => {
                self.stats.hits += 1;
                let c = &mut self.conns[slot as usize];
                c.touch(now);
                Some((ConnId(slot), c.side_of(key)))
            }
            Err(mut bucket) => {
                if self.free_head == NIL {
                    if self.conns.is_empty() {
                        return None;
                    }
                    self.evict(now);
                    // Eviction may have shifted buckets: find the empty one again.
                    bucket = match self.probe(key, hash) {
                        Err(b) => b,
                        Ok(_) => unreachable!("key appeared during eviction"),
                    };
                }
                self.stats.misses += 1;
                self.stats.inserted += 1;
                let slot = self.free_head;
                let c = &mut self.conns[slot as usize];
                self.free_head = c.packets[0];
                *c = Conn::fresh(*key, now);
                self.index[bucket] = (hash >> 32) << 32 | (slot as u64 + 1);
                self.live += 1;
                Some((ConnId(slot), Side::Orig))
            }
        }
    }

    /// For each key of a chunk: its hash, and the slot its home bucket names if the tag
    /// and the key match (else `NIL`). The loads are independent across keys, so the CPU
    /// overlaps their cache misses instead of taking them one after the other.
    #[inline]
    fn first_candidates(&self, keys: &[FlowKey], h: &mut [u64; BATCH], slot: &mut [u32; BATCH]) {
        let n = keys.len();
        for i in 0..n {
            h[i] = self.hash(&keys[i]);
        }
        let mut b = [0u64; BATCH];
        for i in 0..n {
            b[i] = self.index[(h[i] >> 32) as usize & self.mask];
        }
        for i in 0..n {
            slot[i] = NIL;
            if b[i] != 0 && b[i] >> 32 == h[i] >> 32 {
                let s = (b[i] as u32).wrapping_sub(1);
                if self.conns[s as usize].key == keys[i] {
                    slot[i] = s;
                }
            }
        }
    }

    /// [`Self::lookup`] of many keys: `out[i]` for `keys[i]`. Works in chunks of 16 whose
    /// cache misses overlap (see the module documentation); same results as one call per
    /// key. Panics if the lengths differ.
    pub fn lookup_batch(&self, keys: &[FlowKey], out: &mut [Option<(ConnId, Side)>]) {
        assert_eq!(
            keys.len(),
            out.len(),
            "lookup_batch: keys and out differ in length"
        );
        let (mut h, mut slot) = ([0u64; BATCH], [NIL; BATCH]);
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.first_candidates(kc, &mut h, &mut slot);
            for i in 0..kc.len() {
                let s = slot[i];
                oc[i] = if s != NIL {
                    Some((ConnId(s), self.conns[s as usize].side_of(&kc[i])))
                } else {
                    self.lookup_hashed(&kc[i], h[i])
                };
            }
        }
    }

    /// [`Self::lookup_or_insert`] of many keys, in order (a key that appears twice is
    /// inserted once; an eviction may take an entry found earlier in the same batch, as
    /// with one call per key, which this equals). Works in chunks of 16 whose cache misses
    /// overlap. Panics if the lengths differ.
    pub fn lookup_or_insert_batch(
        &mut self,
        keys: &[FlowKey],
        now: Instant,
        out: &mut [Option<(ConnId, Side)>],
    ) {
        assert_eq!(
            keys.len(),
            out.len(),
            "lookup_or_insert_batch: lengths differ"
        );
        let (mut h, mut slot) = ([0u64; BATCH], [NIL; BATCH]);
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.first_candidates(kc, &mut h, &mut slot);
            for i in 0..kc.len() {
                let s = slot[i];
                // Check again: an insert earlier in this chunk may have evicted the entry.
                oc[i] = if s != NIL && self.conns[s as usize].key == kc[i] {
                    self.stats.hits += 1;
                    let c = &mut self.conns[s as usize];
                    c.touch(now);
                    Some((ConnId(s), c.side_of(&kc[i])))
                } else {
                    self.lookup_or_insert_hashed(&kc[i], h[i], now)
                };
            }
        }
    }

    /// The entry `id` (a free slot's blank entry if `id` is not live). Panics if `id` is
    /// out of range.
    #[inline]
    pub fn get(&self, id: ConnId) -> &Conn {
        &self.conns[id.0 as usize]
    }

    /// Mutable access to the entry `id` (its key cannot change). Panics if out of range.
    #[inline]
    pub fn get_mut(&mut self, id: ConnId) -> &mut Conn {
        &mut self.conns[id.0 as usize]
    }

    /// True if `id` is a live entry.
    pub fn is_live(&self, id: ConnId) -> bool {
        self.conns
            .get(id.0 as usize)
            .is_some_and(|c| !c.key.is_free())
    }

    /// True if `id` is live and still the connection first seen at `stamp` (a side table
    /// keyed by connection id checks its entry against a reused slot with this).
    pub fn is_same(&self, id: ConnId, stamp: Instant) -> bool {
        self.is_live(id) && self.conns[id.0 as usize].first_seen == stamp
    }

    /// Count a packet of `len` bytes from `side` (see [`Conn::observe`]).
    #[inline]
    pub fn observe(&mut self, id: ConnId, side: Side, len: u32, now: Instant) {
        self.conns[id.0 as usize].observe(side, len, now);
    }

    /// Feed a TCP segment (a view of exactly the segment, e.g. from `parse_frame`'s
    /// `l4_offset..l3_end`) with `payload_len` bytes of data to the connection's TCP
    /// state; counts RTT samples and Karn cancellations.
    #[inline]
    pub fn observe_tcp<T: AsRef<[u8]>>(
        &mut self,
        id: ConnId,
        side: Side,
        seg: &weir_wire::tcp::Packet<T>,
        payload_len: usize,
        now: Instant,
    ) -> Observed {
        self.observe_segment(id, side, &Segment::parse(seg, payload_len), now)
    }

    /// [`Self::observe_tcp`] with the segment already parsed.
    #[inline]
    pub fn observe_segment(
        &mut self,
        id: ConnId,
        side: Side,
        seg: &Segment,
        now: Instant,
    ) -> Observed {
        let r = self.conns[id.0 as usize].observe_tcp(side, seg, now);
        self.stats.rtt_samples += r.rtt_sample.is_some() as u64;
        self.stats.rtt_ambiguous += r.ambiguous as u64;
        self.stats.rtt_end_to_end += r.rtt_total.is_some() as u64;
        self.stats.retransmissions += r.retransmission as u64;
        r
    }

    /// Remove entry `id`; false if it was not live.
    pub fn remove(&mut self, id: ConnId) -> bool {
        if !self.is_live(id) {
            return false;
        }
        self.remove_slot(id.0);
        self.stats.removed += 1;
        true
    }

    fn remove_slot(&mut self, slot: u32) {
        let h = self.hash(&self.conns[slot as usize].key);
        let want = slot as u64 + 1;
        let mut i = (h >> 32) as usize & self.mask;
        while self.index[i] as u32 as u64 != want {
            debug_assert!(self.index[i] != 0, "live slot {slot} not in the index");
            i = (i + 1) & self.mask;
        }
        // Backward-shift deletion (Knuth, TAOCP 6.4, Algorithm R).
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let b = self.index[j];
            if b == 0 {
                break;
            }
            let home = (b >> 32) as usize & self.mask;
            // The entry at j may move to i unless its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.index[i] = b;
                i = j;
            }
        }
        self.index[i] = 0;
        let c = &mut self.conns[slot as usize];
        c.key = FlowKey::free();
        c.packets[0] = self.free_head;
        self.free_head = slot;
        self.live -= 1;
    }

    /// Make room in a full table: remove the lowest (rank, last seen) entry among
    /// `evict_candidates` slots from the eviction hand.
    fn evict(&mut self, now: Instant) {
        let cap = self.conns.len() as u32;
        let k = self.cfg.evict_candidates.min(cap);
        let mut best = (u8::MAX, Instant::MAX, NIL);
        let mut slot = self.evict_hand;
        for _ in 0..k {
            let c = &self.conns[slot as usize];
            debug_assert!(!c.key.is_free(), "evicting from a table that is not full");
            let score = (c.rank(now, &self.cfg), c.last_seen, slot);
            if score < best {
                best = score;
            }
            slot = if slot + 1 == cap { 0 } else { slot + 1 };
        }
        self.evict_hand = slot;
        self.remove_slot(best.2);
        if best.0 == 0 {
            self.stats.expired += 1;
        } else {
            self.stats.evicted += 1;
        }
    }

    /// Examine up to `max` slots from the expiry hand and remove the entries idle past
    /// their timeout; returns how many were removed.
    pub fn expire(&mut self, now: Instant, max: u32) -> u32 {
        let cap = self.conns.len() as u32;
        let mut removed = 0;
        for _ in 0..max.min(cap) {
            let slot = self.sweep_hand;
            self.sweep_hand = if slot + 1 == cap { 0 } else { slot + 1 };
            let c = &self.conns[slot as usize];
            if !c.key.is_free() && c.idle(now) >= c.timeout(&self.cfg) {
                self.remove_slot(slot);
                removed += 1;
            }
        }
        self.stats.expired += removed as u64;
        removed
    }

    /// The live entries, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.key.is_free())
            .map(|(i, c)| (ConnId(i as u32), c))
    }

    /// Verify the invariants of the module documentation (O(capacity); for tests).
    pub fn check(&self) -> Result<(), String> {
        let mut in_index = vec![false; self.conns.len()];
        let mut n = 0u32;
        for (i, &b) in self.index.iter().enumerate() {
            if b == 0 {
                continue;
            }
            n += 1;
            let slot = (b as u32).wrapping_sub(1) as usize;
            let c = self
                .conns
                .get(slot)
                .ok_or(format!("bucket {i}: slot {slot}"))?;
            if c.key.is_free() {
                return Err(format!("bucket {i} points to free slot {slot}"));
            }
            if std::mem::replace(&mut in_index[slot], true) {
                return Err(format!("slot {slot} indexed twice"));
            }
            let h = self.hash(&c.key);
            if h >> 32 != b >> 32 {
                return Err(format!("bucket {i}: wrong hash for slot {slot}"));
            }
            let mut j = (h >> 32) as usize & self.mask;
            while j != i {
                if self.index[j] == 0 {
                    return Err(format!("slot {slot} not reachable from its home {j}"));
                }
                j = (j + 1) & self.mask;
            }
        }
        if n != self.live {
            return Err(format!("{n} indexed, {} live", self.live));
        }
        let mut free = 0u32;
        let mut f = self.free_head;
        while f != NIL {
            let c = self.conns.get(f as usize).ok_or(format!("free link {f}"))?;
            if !c.key.is_free() || in_index[f as usize] {
                return Err(format!("live slot {f} on the free list"));
            }
            free += 1;
            if free > self.conns.len() as u32 {
                return Err("free list loops".into());
            }
            f = c.packets[0];
        }
        if free + self.live != self.conns.len() as u32 {
            return Err(format!(
                "{free} free + {} live != capacity {}",
                self.live,
                self.conns.len()
            ));
        }
        let s = self.stats();
        if s.inserted != s.live + s.removed + s.evicted + s.expired || s.misses != s.inserted {
            return Err(format!("counter identities broken: {s:?}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
