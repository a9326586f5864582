//! Hierarchical link-sharing scheduler: CBQ's link-sharing model (Floyd & Jacobson 1995,
//! "Link-sharing and resource management models for packet networks") implemented with the
//! algorithm of Linux HTB (`net/sched/sch_htb.c`, Devera), over integer nanoseconds.
//!
//! # Model
//! A tree of classes. The root is the link (seed 000 step 1: rate = ceil = link rate). Every
//! class has an assured `rate`, a `ceil` it may reach by borrowing, a priority `prio`
//! (0 = highest) and a DRR `quantum` in bytes. Leaves own a queue (any [`Qdisc`]). A class
//! that has sent less than its rate may send on its own (mode *CanSend*); one over its rate
//! but under its ceil may send only with bandwidth lent by the nearest ancestor that is
//! under its own rate (*MayBorrow*); one over its ceil may not send (*CantSend*). Idle
//! bandwidth therefore flows to busy siblings and cousins (inter-class borrowing), higher
//! priority borrowers first, in proportion to quantum among equal priorities; a flat tree
//! (root + leaves) is the special case of depth one.
//!
//! # Algorithm (as HTB)
//! * Each class keeps two token buckets ([`Bucket<Ps>`]) measured in **picoseconds of
//!   transmission time**, sharing one checkpoint `t_c`: `rate` (depth `burst`, HTB's
//!   `tokens`) and `ceil` (depth `cburst`, HTB's `ctokens`). Sending `len` bytes costs
//!   `rate.tx_ps(len)` — one multiply and shift, no division. (HTB counts nanoseconds; at
//!   100 Gbit/s that under-charges a 64-byte frame by 2.4 %.) Tokens may go into debt down
//!   to `1 - mbuffer` (60 s), as HTB's.
//! * Levels: leaves are level 0; an inner class at depth d is level `MAX_LEVEL - d`, so a
//!   closer lender always has a lower level. `row[level][prio]` holds the *CanSend* classes
//!   of that level with backlogged descendants of that priority; an inner class's
//!   `feed[prio]` holds its *MayBorrow* children with such descendants. Dequeue scans
//!   levels from 0 (own rate first, then nearest lender), priorities from 0, and descends
//!   from the row through feeds to a leaf. Each row and feed is an id-ordered round-robin
//!   set ([`RrSet`]: a `u64` bitmap searched with `trailing_zeros` and a cursor), so a class
//!   that leaves a set for a moment (to send on its own rate) keeps its turn, as in HTB's
//!   id-ordered trees; a class is in at most one set per priority.
//! * After a packet is sent, every class from the leaf to the root is charged: classes at
//!   or above the lending level pay from the rate bucket and all from the ceil bucket;
//!   mode changes move the class between row, parent feed and nowhere. Classes not in
//!   *CanSend* wait in an indexed heap keyed by the instant their mode changes;
//!   `next_wakeup` is its minimum.
//! * Leaves whose queue is non-work-conserving (returns nothing while holding packets) are
//!   *throttled*: removed from the lists until their queue's `next_wakeup`.
//!
//! # Layout (for speed; the algorithm does not depend on it)
//! Every packet reads and writes the state of each class on its path, and with borrowing
//! about two classes change mode per packet, each moving between lists and in and out of
//! the wait heap. So: the per-class state those steps use is one 192-byte `Class` (three
//! cache lines, counters included; names and the tree's shape are elsewhere); all rows and
//! feeds are `List`s in one array, their member ids and DRR deficits slices of two shared
//! arrays, and a set's bitmap is inline ([`RrSet`]), so descending from a row to a leaf
//! follows no per-class allocation; `wait` is a 4-ary heap (half the depth of a binary
//! one); and a leaf's backlog is counted from what its queue's calls return and hand back
//! as dropped, so knowing that a leaf emptied needs no call into the queue.
//!
//! Deviations from HTB, on purpose: DRR deficits are per set and charged along the whole
//! path (hierarchical DRR), so spare bandwidth is shared in proportion to quanta at every
//! level and quanta smaller than a packet still share bytes exactly; a deficit never
//! exceeds one quantum (it is topped up only once spent), so a class that leaves a set and
//! comes back brings no stored-up burst; borrowers' rate tokens are capped at `burst` when
//! the elapsed time is credited.
//!
//! # Statistics
//! Per class: bytes/packets sent, `lends` (packets sent on own rate at this class's
//! level), `borrows` (packets sent with lent bandwidth), `overlimits` (entries into
//! *CantSend*). Leaf queues carry their own [`QStats`] through [`Counted`].
//!
//! # Invariants (checked by `check_invariants` in tests)
//! A leaf is in a set iff it is active (backlogged, not throttled) and not *CantSend*; a
//! class appears in `row[l][p]` iff it is *CanSend* with bit p in `prio_activity`; in its
//! parent's `feed[p]` iff it is *MayBorrow* with bit p set; an inner class's `prio_activity`
//! bit p is set iff its `feed[p]` is non-empty. A class is in `wait` iff it is not
//! *CanSend*. No deficit exceeds its class's quantum. A leaf's `held` is its queue's length.

use crate::meter::token_bucket::{Bucket, Ps};
use crate::pool::PktId;
use crate::qdisc::{Count, Counted, Ctx, DropCause, QStats, Qdisc};
use crate::rate::Rate;
use crate::sched::heap::{IndexedDHeap, IndexedHeap};
use crate::sched::rrset::RrSet;
use crate::time::{Duration, Instant};

/// Number of priorities (0 = highest).
pub const PRIOS: usize = 8;
/// Highest level; inner classes live at levels 1..=MAX_LEVEL, leaves at 0.
pub const MAX_LEVEL: usize = 7;
const LEVELS: usize = MAX_LEVEL + 1;
/// Largest DRR quantum in bytes (deficits are `i32`).
pub const MAX_QUANTUM: u32 = i32::MAX as u32 / 4;
/// Cap on the time credited at once and on token debt (HTB's mbuffer): 60 s, in ps.
const MBUFFER_PS: i64 = 60_000_000_000_000;
/// Most negative token level (HTB's `1 - mbuffer`).
const DEBT_FLOOR_PS: i64 = 1 - MBUFFER_PS;
const PS_PER_NS: i64 = 1_000;
const NIL: u32 = u32::MAX;

/// Time from `since` to `now` in picoseconds, capped at the mbuffer.
#[inline]
fn elapsed_ps(now: Instant, since: Instant) -> i64 {
    ((now - since).as_nanos() as i64).min(MBUFFER_PS / PS_PER_NS) * PS_PER_NS
}

/// Packets and bytes a child queue handed back through `cx.dropped` since `mark`.
#[inline]
fn dropped_since(cx: &Ctx<'_>, mark: usize) -> (u32, u64) {
    let d = &cx.dropped[mark..];
    let bytes = d.iter().map(|&(p, _)| cx.pool.len(p) as u64).sum();
    (d.len() as u32, bytes)
}

/// Index of a class in the scheduler (0 is the root).
pub type ClassId = u32;

/// How to build one class.
pub struct ClassSpec {
    pub name: String,
    /// `None` for the root (which must be the first spec).
    pub parent: Option<ClassId>,
    pub rate: Rate,
    pub ceil: Rate,
    /// Rate bucket depth in bytes.
    pub burst: u32,
    /// Ceil bucket depth in bytes.
    pub cburst: u32,
    pub prio: u8,
    /// DRR quantum in bytes (> 0).
    pub quantum: u32,
    /// The leaf's queue; required for leaves, must be `None` for inner classes.
    pub queue: Option<Box<dyn Qdisc>>,
}

impl ClassSpec {
    /// A class held to `rate` (ceil = rate, no borrowing beyond it) with buckets of 1 ms
    /// at the rate plus one 1514-byte frame, priority 0, a 1514-byte quantum: the plain
    /// class tests and tools build trees of (a leaf when `queue` is given).
    pub fn fixed(
        name: &str,
        parent: Option<ClassId>,
        rate: Rate,
        queue: Option<Box<dyn Qdisc>>,
    ) -> ClassSpec {
        let burst = (rate.bytes_in(Duration::from_millis(1)) + 1514).min(u32::MAX as u64) as u32;
        ClassSpec {
            name: name.into(),
            parent,
            rate,
            ceil: rate,
            burst,
            cburst: burst,
            prio: 0,
            quantum: 1514,
            queue,
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Mode {
    CantSend,
    MayBorrow,
    CanSend,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum LeafState {
    Idle,
    Active,
    Throttled,
}

/// Per-class counters.
#[derive(Clone, Default, Debug, serde::Serialize)]
pub struct ClassStats {
    pub sent: Count,
    pub lends: u64,
    pub borrows: u64,
    pub overlimits: u64,
}

/// Per-class state read or written for every packet that passes the class (counters
/// included), in three whole cache lines. Names and the tree's shape live in other arrays.
#[repr(align(64))]
struct Class {
    /// Bucket at the assured rate (depth `burst`).
    rate: Bucket<Ps>,
    /// Bucket at the ceil (depth `cburst`).
    ceil: Bucket<Ps>,
    /// Checkpoint of both buckets: when they were last refilled.
    t_c: Instant,
    parent: u32,
    quantum: i32,
    /// Inner classes: index in `lists` of the feed at prio 0 (the feeds at prios 0..PRIOS
    /// follow it); `NIL` for leaves.
    feed: u32,
    /// Position among the parent's children (its slot in the parent's feeds).
    slot_parent: u32,
    /// Position among the classes of its level (its slot in that level's rows).
    slot_level: u32,
    level: u8,
    prio: u8,
    mode: Mode,
    prio_activity: u8,
    leaf: LeafState,
    /// Leaves: packets in the queue, counted from what its calls report (no call needed to
    /// know it emptied).
    held: u32,
    stats: ClassStats,
}

/// One round-robin list: a row (a level at a prio) or an inner class's feed at a prio.
/// Member `slot` is class `members[members + slot]`; its DRR deficit in this list is
/// `deficit[deficits + slot]`.
struct List {
    set: RrSet,
    members: u32,
    deficits: u32,
}

/// Index in `lists` of `row[level][prio]` (the rows come first).
#[inline]
const fn row_list(level: usize, prio: usize) -> usize {
    level * PRIOS + prio
}

/// The hierarchical link-sharing scheduler (a [`Qdisc`]).
pub struct LinkShare {
    classes: Vec<Class>,
    names: Vec<String>,
    /// Class ids by name (a reload finds each carried packet's class by it).
    by_name: std::collections::HashMap<String, ClassId>,
    queues: Vec<Option<Counted<dyn Qdisc>>>,
    /// All round-robin lists: `row[level][prio]` at `row_list(level, prio)` (CanSend
    /// classes of a level with active descendants of a prio), then each inner class's
    /// feeds.
    lists: Vec<List>,
    /// Class ids by slot: the classes of each level (rows), the children of each inner
    /// class (feeds).
    members: Vec<u32>,
    /// DRR deficit in bytes of every (list, slot).
    deficit: Vec<i32>,
    row_mask: [u8; LEVELS],
    level_mask: u8,
    /// Classes not in CanSend, keyed by the instant their mode may change. 4-ary: it is
    /// sifted on most packets when classes borrow, and the order in which events due at
    /// the same instant are processed does not matter (see `do_events`).
    wait: IndexedDHeap<4>,
    /// Throttled leaves, keyed by their queue's next wakeup.
    throttled: IndexedHeap,
    now: Instant,
    len: usize,
    bytes: u64,
    default_leaf: u32,
    /// Leaves whose queue can be freed while idle ([`Qdisc::releasable`]), oldest idle
    /// first; each at most once (capacity: all of them, so pushing never allocates).
    idle: std::collections::VecDeque<u32>,
    /// Per class: [`NOT_RELEASABLE`], [`NOT_IDLE`] (a releasable leaf not in `idle`), or
    /// the instant (ns) it last went idle while in `idle`.
    idle_since: Vec<u64>,
    /// Queues freed after [`RELEASE_AFTER`] idle.
    releases: u64,
}

/// `idle_since` of a leaf whose queue cannot be freed (or an inner class).
const NOT_RELEASABLE: u64 = u64::MAX;
/// `idle_since` of a releasable leaf that is not waiting in `idle`.
const NOT_IDLE: u64 = u64::MAX - 1;
pub use crate::queue::lazy::RELEASE_AFTER;

impl LinkShare {
    /// Build the tree. `specs[0]` is the root; parents must precede their children.
    /// `default_leaf` receives packets whose `meta.class` is not a leaf.
    pub fn new(specs: Vec<ClassSpec>, default_leaf: ClassId, now: Instant) -> Result<Self, String> {
        if specs.is_empty() {
            return Err("no classes".into());
        }
        let n = specs.len();
        let mut depth = vec![0usize; n];
        let mut has_children = vec![false; n];
        for (i, s) in specs.iter().enumerate() {
            match (i, s.parent) {
                (0, None) => {}
                (0, Some(_)) => return Err("the first class must be the root".into()),
                (_, None) => return Err(format!("class '{}' has no parent", s.name)),
                (_, Some(p)) if p as usize >= i => {
                    return Err(format!(
                        "class '{}': parent must be defined before it",
                        s.name
                    ))
                }
                (_, Some(p)) => {
                    depth[i] = depth[p as usize] + 1;
                    has_children[p as usize] = true;
                }
            }
            if s.prio as usize >= PRIOS {
                return Err(format!(
                    "class '{}': prio {} > {}",
                    s.name,
                    s.prio,
                    PRIOS - 1
                ));
            }
            if s.quantum == 0 || s.quantum > MAX_QUANTUM {
                return Err(format!(
                    "class '{}': quantum {} out of range",
                    s.name, s.quantum
                ));
            }
        }
        let mut classes = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        let mut queues = Vec::with_capacity(n);
        for (i, s) in specs.into_iter().enumerate() {
            let leaf = !has_children[i];
            let level = if leaf {
                0
            } else {
                if depth[i] >= MAX_LEVEL {
                    return Err(format!(
                        "class '{}': tree deeper than {} levels of inner classes",
                        s.name, MAX_LEVEL
                    ));
                }
                (MAX_LEVEL - depth[i]) as u8
            };
            match (&s.queue, leaf) {
                (None, true) => return Err(format!("leaf class '{}' has no queue", s.name)),
                (Some(_), false) => {
                    return Err(format!("inner class '{}' cannot own a queue", s.name))
                }
                _ => {}
            }
            classes.push(Class {
                rate: Bucket::new(s.rate, s.burst),
                ceil: Bucket::new(s.ceil, s.cburst),
                t_c: now,
                parent: s.parent.unwrap_or(NIL),
                quantum: s.quantum as i32,
                feed: NIL,
                slot_parent: 0,
                slot_level: 0,
                level,
                prio: s.prio,
                mode: Mode::CanSend,
                prio_activity: 0,
                leaf: LeafState::Idle,
                held: 0,
                stats: ClassStats::default(),
            });
            names.push(s.name);
            queues.push(s.queue.map(Counted::new));
        }
        if queues
            .get(default_leaf as usize)
            .is_none_or(|q| q.is_none())
        {
            return Err("the default class must be a leaf".into());
        }
        let mut level_members = vec![Vec::new(); LEVELS];
        let mut children = vec![Vec::new(); n];
        for (i, cl) in classes.iter_mut().enumerate() {
            let level = cl.level as usize;
            cl.slot_level = level_members[level].len() as u32;
            level_members[level].push(i as u32);
            if cl.parent != NIL {
                let siblings = &mut children[cl.parent as usize];
                cl.slot_parent = siblings.len() as u32;
                siblings.push(i as u32);
            }
        }
        // The rows, then each inner class's feeds; every list's deficits start at its
        // members' quanta.
        let mut lists = Vec::new();
        let mut members = Vec::new();
        let mut deficit = Vec::new();
        let groups = level_members
            .iter()
            .map(|m| (NIL, m))
            .chain(children.iter().enumerate().map(|(c, m)| (c as u32, m)))
            .filter(|&(c, m)| c == NIL || !m.is_empty());
        for (owner, group) in groups {
            if owner != NIL {
                classes[owner as usize].feed = lists.len() as u32;
            }
            let base = members.len() as u32;
            members.extend_from_slice(group);
            for _ in 0..PRIOS {
                lists.push(List {
                    set: RrSet::new(group.len()),
                    members: base,
                    deficits: deficit.len() as u32,
                });
                deficit.extend(group.iter().map(|&m| classes[m as usize].quantum));
            }
        }
        let idle_since: Vec<u64> = queues
            .iter()
            .map(|q| match q {
                Some(q) if q.lazy_built().is_some() => NOT_IDLE,
                _ => NOT_RELEASABLE,
            })
            .collect();
        let releasable = idle_since.iter().filter(|&&s| s == NOT_IDLE).count();
        Ok(LinkShare {
            idle: std::collections::VecDeque::with_capacity(releasable),
            idle_since,
            releases: 0,
            by_name: names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.clone(), i as ClassId))
                .collect(),
            wait: IndexedDHeap::with_ids(n),
            throttled: IndexedHeap::with_ids(n),
            classes,
            names,
            queues,
            lists,
            members,
            deficit,
            row_mask: [0; LEVELS],
            level_mask: 0,
            now,
            len: 0,
            bytes: 0,
            default_leaf,
        })
    }

    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }
    pub fn name(&self, c: ClassId) -> &str {
        &self.names[c as usize]
    }
    /// The class called `name`.
    pub fn class_id(&self, name: &str) -> Option<ClassId> {
        self.by_name.get(name).copied()
    }
    pub fn parent(&self, c: ClassId) -> Option<ClassId> {
        let p = self.classes[c as usize].parent;
        (p != NIL).then_some(p)
    }
    pub fn is_leaf(&self, c: ClassId) -> bool {
        self.queues[c as usize].is_some()
    }
    pub fn rate(&self, c: ClassId) -> Rate {
        self.classes[c as usize].rate.rate()
    }
    pub fn ceil(&self, c: ClassId) -> Rate {
        self.classes[c as usize].ceil.rate()
    }
    pub fn mode(&self, c: ClassId) -> Mode {
        self.classes[c as usize].mode
    }
    pub fn class_stats(&self, c: ClassId) -> &ClassStats {
        &self.classes[c as usize].stats
    }
    /// Queue statistics of a leaf.
    pub fn queue_stats(&self, c: ClassId) -> Option<&QStats> {
        self.queues[c as usize].as_ref().map(|q| &q.stats)
    }
    /// The AQM and flow counters of a leaf's queue ([`Qdisc::aqm_stats`]): `None` for an
    /// inner class and for a queue without an AQM.
    pub fn queue_aqm(&self, c: ClassId) -> Option<crate::aqm::AqmStats> {
        self.queues[c as usize].as_ref().and_then(|q| q.aqm_stats())
    }
    /// (packets, bytes) queued in a leaf.
    pub fn backlog(&self, c: ClassId) -> (usize, u64) {
        self.queues[c as usize]
            .as_ref()
            .map_or((0, 0), |q| (q.len(), q.bytes()))
    }
    /// Packets held in each class's subtree (a leaf: its queue's), into `out` (one entry
    /// per class). O(classes); nothing is held anywhere when [`Qdisc::len`] is zero.
    pub fn subtree_held(&self, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.classes.iter().map(|c| c.held));
        // parents precede their children: one pass from the leaves up
        for k in (1..self.classes.len()).rev() {
            let p = self.classes[k].parent;
            if p != NIL {
                out[p as usize] += out[k];
            }
        }
    }
    /// Verify every leaf queue's counter identities.
    pub fn check_counters(&self) -> Result<(), String> {
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(q) = q {
                q.check()
                    .map_err(|e| format!("class '{}': {e}", self.names[i]))?;
            }
        }
        Ok(())
    }

    /// Change a class's rate and ceil at run time (`now`: when the change takes effect);
    /// queued packets are kept.
    pub fn set_rates(
        &mut self,
        c: ClassId,
        rate: Rate,
        ceil: Rate,
        burst: u32,
        cburst: u32,
        now: Instant,
    ) {
        let cl = &mut self.classes[c as usize];
        cl.rate.set_rate_burst(rate, burst);
        cl.ceil.set_rate_burst(ceil, cburst);
        let now = now.max(self.now);
        self.update_event(c, now);
    }

    /// Class `c`'s token state: credit at its rate and at its ceil (picoseconds of
    /// transmission time, as the buckets hold it) and when it was last brought up to date.
    /// For carrying a class across a policy reload ([`LinkShare::set_tokens`]).
    pub fn tokens(&self, c: ClassId) -> (i64, i64, Instant) {
        let cl = &self.classes[c as usize];
        (cl.rate.tokens(), cl.ceil.tokens(), cl.t_c)
    }

    /// Give class `c` the token state another scheduler's class had ([`LinkShare::tokens`]),
    /// clamped to this class's buckets; its mode follows at `now`.
    pub fn set_tokens(
        &mut self,
        c: ClassId,
        (tokens, ctokens, t_c): (i64, i64, Instant),
        now: Instant,
    ) {
        let cl = &mut self.classes[c as usize];
        cl.rate.set_tokens(tokens);
        cl.ceil.set_tokens(ctokens);
        cl.t_c = t_c.min(now);
        let now = now.max(self.now);
        self.update_event(c, now);
    }

    // ----- round-robin lists -------------------------------------------------------

    /// Put the member in `slot` into list `l`. It keeps its deficit, which is never more
    /// than one quantum (it is topped up only once spent), so it brings no stored-up burst.
    #[inline]
    fn list_add(&mut self, l: usize, slot: u32) {
        self.lists[l].set.insert(slot);
    }

    #[inline]
    fn list_remove(&mut self, l: usize, slot: u32) {
        self.lists[l].set.remove(slot);
    }

    fn add_to_row(&mut self, c: u32, mask: u8) {
        let cl = &self.classes[c as usize];
        let (level, slot) = (cl.level as usize, cl.slot_level);
        let mut m = mask;
        while m != 0 {
            let prio = m.trailing_zeros() as usize;
            m &= m - 1;
            self.list_add(row_list(level, prio), slot);
            self.row_mask[level] |= 1 << prio;
        }
        if self.row_mask[level] != 0 {
            self.level_mask |= 1 << level;
        }
    }

    fn remove_from_row(&mut self, c: u32, mask: u8) {
        let cl = &self.classes[c as usize];
        let (level, slot) = (cl.level as usize, cl.slot_level);
        let mut m = mask;
        while m != 0 {
            let prio = m.trailing_zeros() as usize;
            m &= m - 1;
            self.list_remove(row_list(level, prio), slot);
            if self.lists[row_list(level, prio)].set.is_empty() {
                self.row_mask[level] &= !(1 << prio);
            }
        }
        if self.row_mask[level] == 0 {
            self.level_mask &= !(1 << level);
        }
    }

    /// Propagate `c`'s activity up through borrowing ancestors (htb_activate_prios).
    fn activate_prios(&mut self, mut c: u32) {
        let mut p = self.classes[c as usize].parent;
        let mut mask = self.classes[c as usize].prio_activity;
        while self.classes[c as usize].mode == Mode::MayBorrow && p != NIL && mask != 0 {
            let slot = self.classes[c as usize].slot_parent;
            let feed = self.classes[p as usize].feed as usize;
            let mut m = mask;
            while m != 0 {
                let prio = m.trailing_zeros() as usize;
                m &= m - 1;
                if !self.lists[feed + prio].set.is_empty() {
                    // parent already active for this prio: nothing to propagate further
                    mask &= !(1 << prio);
                }
                self.list_add(feed + prio, slot);
            }
            self.classes[p as usize].prio_activity |= mask;
            c = p;
            p = self.classes[c as usize].parent;
        }
        if self.classes[c as usize].mode == Mode::CanSend && mask != 0 {
            self.add_to_row(c, mask);
        }
    }

    /// Inverse of `activate_prios` (htb_deactivate_prios).
    fn deactivate_prios(&mut self, mut c: u32) {
        let mut p = self.classes[c as usize].parent;
        let mut mask = self.classes[c as usize].prio_activity;
        while self.classes[c as usize].mode == Mode::MayBorrow && p != NIL && mask != 0 {
            let slot = self.classes[c as usize].slot_parent;
            let feed = self.classes[p as usize].feed as usize;
            let mut m = mask;
            mask = 0;
            while m != 0 {
                let prio = m.trailing_zeros() as usize;
                m &= m - 1;
                self.list_remove(feed + prio, slot);
                if self.lists[feed + prio].set.is_empty() {
                    mask |= 1 << prio;
                }
            }
            self.classes[p as usize].prio_activity &= !mask;
            c = p;
            p = self.classes[c as usize].parent;
        }
        if self.classes[c as usize].mode == Mode::CanSend && mask != 0 {
            self.remove_from_row(c, mask);
        }
    }

    fn activate_leaf(&mut self, c: u32) {
        let cl = &mut self.classes[c as usize];
        cl.leaf = LeafState::Active;
        cl.prio_activity = 1 << cl.prio;
        self.activate_prios(c);
    }

    fn deactivate_leaf(&mut self, c: u32, to: LeafState) {
        self.deactivate_prios(c);
        let cl = &mut self.classes[c as usize];
        cl.prio_activity = 0;
        cl.leaf = to;
        if to == LeafState::Idle {
            self.went_idle(c);
        }
    }

    // ----- queues freed while idle (`queue::lazy`) ----------------------------------

    /// Leaf `c` went idle at `self.now`: if its queue can be freed, it waits in `idle`.
    #[inline]
    fn went_idle(&mut self, c: u32) {
        match self.idle_since[c as usize] {
            NOT_RELEASABLE => {}
            NOT_IDLE => {
                self.idle_since[c as usize] = self.now.as_nanos();
                self.idle.push_back(c);
            }
            // already waiting: it waits from now
            _ => self.idle_since[c as usize] = self.now.as_nanos(),
        }
    }

    /// Free the queues of leaves idle for [`RELEASE_AFTER`] at `now` (a leaf that went idle
    /// again while waiting holds up those behind it: each is freed between
    /// `RELEASE_AFTER` and twice that after it went idle). Amortised O(1): an entry is
    /// pushed once per time its leaf goes idle while not waiting, and popped once.
    #[inline]
    fn release_idle(&mut self, now: Instant) {
        let Some(&c) = self.idle.front() else {
            return;
        };
        let due = now.as_nanos().saturating_sub(RELEASE_AFTER.as_nanos());
        if self.idle_since[c as usize] > due {
            return;
        }
        self.release_idle_slow(due);
    }

    #[cold]
    fn release_idle_slow(&mut self, due: u64) {
        while let Some(&c) = self.idle.front() {
            let since = self.idle_since[c as usize];
            let cl = &self.classes[c as usize];
            let idle = cl.leaf == LeafState::Idle && cl.held == 0;
            if idle && since > due {
                // it went idle again after it was queued: its turn (and that of those
                // behind it, at most RELEASE_AFTER later than theirs) comes at `since`
                break;
            }
            self.idle.pop_front();
            self.idle_since[c as usize] = NOT_IDLE;
            if idle {
                if let Some(q) = self.queues[c as usize].as_mut() {
                    self.releases += q.release() as u64;
                }
            }
        }
    }

    /// Leaves whose queue exists only while used ([`crate::queue::lazy`]): (how many,
    /// how many have their queue built now, queues freed so far).
    pub fn lazy_queues(&self) -> (usize, usize, u64) {
        let mut n = 0;
        let mut built = 0;
        for (q, &s) in self.queues.iter().zip(&self.idle_since) {
            if let (Some(q), true) = (q, s != NOT_RELEASABLE) {
                n += 1;
                built += (q.lazy_built() == Some(true)) as usize;
            }
        }
        (n, built, self.releases)
    }

    // ----- tokens and modes ----------------------------------------------------------

    /// The mode `c` would have `diff` ps after its checkpoint, and the ps until it changes.
    /// (A level capped at its depth, `>= 0`, has the same sign and shortfall as uncapped.)
    #[inline]
    fn class_mode(cl: &Class, diff: i64) -> (Mode, i64) {
        let ct = cl.ceil.level_after(diff);
        if ct < 0 {
            return (Mode::CantSend, -ct);
        }
        let t = cl.rate.level_after(diff);
        if t >= 0 {
            return (Mode::CanSend, 0);
        }
        (Mode::MayBorrow, -t)
    }

    /// Give `c` mode `new` (computed at `now`, changing `wait` ps later): move it between
    /// lists and keep its entry in `wait` (where exactly the classes not in CanSend are).
    fn set_mode(&mut self, c: u32, new: Mode, wait: i64, now: Instant) {
        let cl = &mut self.classes[c as usize];
        let old = cl.mode;
        if new != old {
            if new == Mode::CantSend {
                cl.stats.overlimits += 1;
            }
            if cl.prio_activity != 0 {
                if old != Mode::CantSend {
                    self.deactivate_prios(c);
                }
                self.classes[c as usize].mode = new;
                if new != Mode::CantSend {
                    self.activate_prios(c);
                }
            } else {
                cl.mode = new;
            }
        }
        if new != Mode::CanSend {
            // wait is in ps; wake at the first nanosecond the mode can have changed
            let wait_ns = (wait as u64).div_ceil(PS_PER_NS as u64);
            self.wait.set(c, now.as_nanos().saturating_add(wait_ns));
        } else if old != Mode::CanSend {
            self.wait.remove(c);
        }
    }

    /// Recompute `c`'s mode at `now`.
    fn update_event(&mut self, c: u32, now: Instant) {
        let cl = &self.classes[c as usize];
        let (mode, wait) = Self::class_mode(cl, elapsed_ps(now, cl.t_c));
        self.set_mode(c, mode, wait, now);
    }

    /// Process mode-change and throttle events due at `now`. The order among events due
    /// together does not matter: an event changes only its own class's mode and `wait`
    /// entry, the lists are a function of the modes and leaf states (the invariants in the
    /// module comment), and moving classes between lists leaves deficits and cursors alone.
    fn do_events(&mut self, now: Instant) {
        while let Some((t, c)) = self.wait.peek() {
            if t > now.as_nanos() {
                break;
            }
            // re-keys or removes c in place
            self.update_event(c, now);
        }
        while let Some((t, c)) = self.throttled.peek() {
            if t > now.as_nanos() {
                break;
            }
            self.throttled.remove(c);
            if self.classes[c as usize].leaf == LeafState::Throttled {
                if self.queues[c as usize]
                    .as_ref()
                    .is_some_and(|q| !q.is_empty())
                {
                    self.activate_leaf(c);
                } else {
                    self.classes[c as usize].leaf = LeafState::Idle;
                    self.went_idle(c);
                }
            }
        }
    }

    /// Charge a sent packet from leaf `c` up to the root; `level` is the lending level.
    fn charge(&mut self, mut c: u32, level: u8, len: u32, now: Instant) {
        while c != NIL {
            let cl = &mut self.classes[c as usize];
            let diff = elapsed_ps(now, cl.t_c);
            cl.rate.refill(diff);
            if cl.level >= level {
                if cl.level == level {
                    cl.stats.lends += 1;
                }
                cl.rate.consume(len, DEBT_FLOOR_PS);
            } else {
                cl.stats.borrows += 1;
            }
            cl.ceil.refill(diff);
            cl.ceil.consume(len, DEBT_FLOOR_PS);
            cl.t_c = now;
            cl.stats.sent.add(len);
            let parent = cl.parent;
            // the checkpoint is now: nothing more to credit
            let (mode, wait) = Self::class_mode(cl, 0);
            if mode != Mode::CanSend || cl.mode != Mode::CanSend {
                self.set_mode(c, mode, wait, now);
            }
            c = parent;
        }
    }

    // ----- dequeue -----------------------------------------------------------------

    /// Descend from `row[level][prio]` to a leaf with hierarchical DRR. Returns the leaf and
    /// the number of lists passed; `path` receives the index in `deficit` of each.
    fn lookup_leaf(
        &mut self,
        level: usize,
        prio: usize,
        path: &mut [u32; LEVELS + 1],
    ) -> (u32, usize) {
        let mut l = row_list(level, prio);
        let mut n = 0;
        loop {
            let list = &mut self.lists[l];
            // DRR: skip members whose deficit is spent, granting them a quantum.
            let (c, d) = loop {
                let slot = list.set.current().expect("active list in lookup");
                let d = (list.deficits + slot) as usize;
                let c = self.members[(list.members + slot) as usize];
                if self.deficit[d] > 0 {
                    break (c, d);
                }
                self.deficit[d] += self.classes[c as usize].quantum;
                list.set.advance(slot);
            };
            path[n] = d as u32;
            n += 1;
            let cl = &self.classes[c as usize];
            if cl.level == 0 {
                return (c, n);
            }
            l = cl.feed as usize + prio;
        }
    }

    fn dequeue_tree(&mut self, level: usize, prio: usize, cx: &mut Ctx<'_>) -> Option<PktId> {
        let mut path = [0u32; LEVELS + 1];
        loop {
            let (leaf, n) = self.lookup_leaf(level, prio, &mut path);
            let q = self.queues[leaf as usize].as_mut().expect("leaf queue");
            let mark = cx.dropped.len();
            let got = q.dequeue(cx);
            // the leaf lost the packet it returned and any it dropped
            let len = got.map_or(0, |p| cx.pool.len(p));
            let (dp, db) = dropped_since(cx, mark);
            let (lost, lost_bytes) = (got.is_some() as u32 + dp, len as u64 + db);
            let cl = &mut self.classes[leaf as usize];
            cl.held -= lost;
            let empty = cl.held == 0;
            self.len -= lost as usize;
            self.bytes -= lost_bytes;
            match got {
                Some(pkt) => {
                    for &d in &path[..n] {
                        self.deficit[d as usize] -= len as i32;
                    }
                    if empty {
                        self.deactivate_leaf(leaf, LeafState::Idle);
                    }
                    self.charge(leaf, level as u8, len, cx.now);
                    return Some(pkt);
                }
                None if empty => self.deactivate_leaf(leaf, LeafState::Idle),
                None => {
                    // non-work-conserving queue: park it until it can send
                    let at = self.queues[leaf as usize]
                        .as_ref()
                        .and_then(|q| q.next_wakeup())
                        .unwrap_or(cx.now + Duration::from_micros(1))
                        .max(cx.now + Duration(1));
                    self.deactivate_leaf(leaf, LeafState::Throttled);
                    self.throttled.set(leaf, at.as_nanos());
                }
            }
            if self.row_mask[level] & (1 << prio) == 0 {
                return None;
            }
        }
    }

    /// Check the structural invariants (tests and debug builds).
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.classes.len();
        let mut in_row = vec![0u8; n];
        for level in 0..LEVELS {
            for prio in 0..PRIOS {
                let list = &self.lists[row_list(level, prio)];
                if list.set.is_empty() == (self.row_mask[level] & (1 << prio) != 0) {
                    return Err(format!("row_mask[{level}] bit {prio} disagrees with row"));
                }
                for slot in list.set.iter() {
                    in_row[self.members[(list.members + slot) as usize] as usize] |= 1 << prio;
                }
            }
            if (self.row_mask[level] != 0) != (self.level_mask & (1 << level) != 0) {
                return Err(format!("level_mask bit {level} wrong"));
            }
        }
        for list in &self.lists {
            for slot in 0..list.set.slots() as u32 {
                let c = self.members[(list.members + slot) as usize];
                let d = self.deficit[(list.deficits + slot) as usize];
                if d > self.classes[c as usize].quantum {
                    return Err(format!("class {c}: deficit {d} above its quantum"));
                }
            }
        }
        let mut in_feed = vec![0u8; n];
        for (i, cl) in self.classes.iter().enumerate() {
            if cl.feed == NIL {
                continue;
            }
            for prio in 0..PRIOS {
                let list = &self.lists[cl.feed as usize + prio];
                let bit = 1u8 << prio;
                for slot in list.set.iter() {
                    in_feed[self.members[(list.members + slot) as usize] as usize] |= bit;
                }
                if list.set.is_empty() == (cl.prio_activity & bit != 0) {
                    return Err(format!(
                        "class {i}: feed/prio_activity mismatch at prio {prio}"
                    ));
                }
            }
        }
        for (i, cl) in self.classes.iter().enumerate() {
            let act = cl.prio_activity;
            let want_row = if cl.mode == Mode::CanSend { act } else { 0 };
            let want_feed = if cl.mode == Mode::MayBorrow && cl.parent != NIL {
                act
            } else {
                0
            };
            if in_row[i] != want_row || in_feed[i] != want_feed {
                return Err(format!(
                    "class {i} ({}) mode {:?} activity {act:#b}: in row {:#b}, in feed {:#b}",
                    self.names[i], cl.mode, in_row[i], in_feed[i]
                ));
            }
            if self.wait.contains(i as u32) != (cl.mode != Mode::CanSend) {
                return Err(format!("class {i} mode {:?}: wrong entry in wait", cl.mode));
            }
            if let Some(q) = &self.queues[i] {
                if cl.held as usize != q.len() {
                    return Err(format!(
                        "leaf {i}: counted {} packets, holds {}",
                        cl.held,
                        q.len()
                    ));
                }
                let active = cl.leaf == LeafState::Active;
                if active != (act != 0) || (active && q.is_empty()) {
                    return Err(format!(
                        "leaf {i} activity {act:#b} state {:?} len {}",
                        cl.leaf,
                        q.len()
                    ));
                }
                if cl.leaf == LeafState::Idle && !q.is_empty() {
                    return Err(format!("leaf {i} idle with {} packets", q.len()));
                }
            }
        }
        Ok(())
    }
}

impl Qdisc for LinkShare {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        self.now = cx.now;
        self.release_idle(cx.now);
        let mut c = cx.pool.meta(pkt).class;
        if self.queues.get(c as usize).is_none_or(|q| q.is_none()) {
            c = self.default_leaf;
            cx.pool.meta_mut(pkt).class = c;
        }
        let q = self.queues[c as usize].as_mut().expect("leaf");
        let len = cx.pool.len(pkt) as u64;
        let mark = cx.dropped.len();
        let r = q.enqueue(pkt, cx);
        // the leaf gained the packet if it took it, and lost any it dropped meanwhile
        let (gained, gained_bytes) = if r.is_ok() { (1, len) } else { (0, 0) };
        let (dp, db) = dropped_since(cx, mark);
        let cl = &mut self.classes[c as usize];
        cl.held = cl.held + gained - dp;
        self.len = self.len + gained as usize - dp as usize;
        self.bytes = self.bytes + gained_bytes - db;
        if cl.held > 0 && cl.leaf == LeafState::Idle {
            self.activate_leaf(c);
        }
        r
    }

    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.now = cx.now;
        if self.len == 0 {
            return None;
        }
        self.do_events(cx.now);
        self.release_idle(cx.now);
        let mut lm = self.level_mask;
        while lm != 0 {
            let level = lm.trailing_zeros() as usize;
            lm &= lm - 1;
            let mut m = self.row_mask[level];
            while m != 0 {
                let prio = m.trailing_zeros() as usize;
                m &= m - 1;
                if let Some(p) = self.dequeue_tree(level, prio, cx) {
                    return Some(p);
                }
            }
        }
        None
    }

    fn next_wakeup(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let a = self.wait.peek().map(|(t, _)| t);
        let b = self.throttled.peek().map(|(t, _)| t);
        match (a, b) {
            (Some(a), Some(b)) => Some(Instant(a.min(b))),
            (a, b) => a.or(b).map(Instant),
        }
    }

    fn len(&self) -> usize {
        self.len
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for c in 0..self.classes.len() as u32 {
            let Some(q) = self.queues[c as usize].as_mut() else {
                continue;
            };
            q.purge(cx, cause);
            self.classes[c as usize].held = 0;
            match self.classes[c as usize].leaf {
                LeafState::Active => self.deactivate_leaf(c, LeafState::Idle),
                LeafState::Throttled => {
                    self.throttled.remove(c);
                    self.classes[c as usize].leaf = LeafState::Idle;
                    self.went_idle(c);
                }
                LeafState::Idle => {}
            }
        }
        self.len = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests;
