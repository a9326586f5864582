//! Longest-prefix match: map an IP address to the value (a subscriber circuit's index) of
//! the longest of a set of IPv4/IPv6 prefixes that contains it, in place of a linear rule
//! scan (issue 27). Built once from a list of `(IpNet, u32)`; a lookup allocates nothing,
//! takes no lock and has no hash or division (the table is immutable: a reload builds a
//! new one). IPv4-mapped IPv6 addresses are IPv6 here, as in the rest of `classify`: an
//! IPv4 prefix never matches an IPv6 address.
//!
//! ## Data structure
//!
//! Per family, a leaf-pushed, path-compressed multibit trie with adaptive nodes: a
//! direct-indexed root of 2^16 entries (2^8 for a family of 256 prefixes or fewer), and
//! below it nodes that may sit at any bit position.
//!
//! * **Leaf pushing over elementary intervals.** The prefixes are first turned into the
//!   sorted, disjoint address intervals on which the longest match is constant (a sweep
//!   with a stack of the open prefixes; adjacent intervals with equal values merged), so
//!   nesting is resolved once at build time and every entry holds the final answer or a
//!   child (leaf pushing: Srinivasan & Varghese, "Fast address lookups using controlled
//!   prefix expansion", ACM TOCS 1999; answering from one array read: DIR-24-8, Gupta,
//!   Lin & McKeown, INFOCOM 1998).
//! * **Path compression with a key check** (the LC-trie of Nilsson & Karlsson, IEEE JSAC
//!   1999, as Linux `net/ipv4/fib_trie.c` tests a node's skipped bits in one XOR): a node
//!   is placed at the bit where the intervals below it diverge, and keeps those leading
//!   bits (`key`) and the answer for addresses whose bits differ (`fallback`, the value
//!   around it). Lookup: `(addr ^ key) & mask(depth) != 0` → `fallback`. A lone /128 under
//!   a /32 is one node at bit 120, not twelve.
//! * **Adaptive nodes** (node sizes as in the adaptive radix tree, Leis et al., ICDE 2013;
//!   runs of equal entries stored once, as Poptrie's leaf vector, Asai & Ohara, SIGCOMM
//!   2015):
//!   - *run node*, one or two 64-byte lines: a stride of up to 16 bits, the start indices
//!     (u16) of its runs of equal entries and one entry per run: up to 9/19 runs (IPv4,
//!     one/two lines) or 7/17 (IPv6). The entry for index `x` is
//!     `entries[#{run starts <= x}]`, a fixed branch-free count. The builder takes the
//!     widest stride up to 16 bits whose runs fit, so a sparse block is resolved in one
//!     node: below the IPv4 root a /16 holding up to 9 intervals (4 scattered prefixes)
//!     is a single line;
//!   - *full node*: stride 8, a header line and 256 entries (1 KiB), for blocks with more
//!     runs than a two-line run node holds. Its entry in the parent carries its depth, so
//!     the header and the entry line are fetched in parallel.
//!
//! No popcount (a library routine without `-C target-cpu`). A lookup reads one root entry
//! (256 KiB per family, mostly in L2) and one node per level, each one or two cache lines.
//!
//! Entries are `u32`: bit 31 clear → a value (`0x7FFF_FFFF` = no match), so values are at
//! most [`PrefixTable::MAX_VALUE`]; bit 31 set → a child: bit 30 full, bit 29 (run nodes) two-line
//! node, bits 23–29 (full nodes) the depth, bits 0–22 the first line (at most 2^23
//! lines, 512 MiB: [`BuildError::TooLarge`] beyond).
//!
//! ## Conflicts
//!
//! [`PrefixTable::conflicts`] reports every duplicate (the same prefix twice: the first
//! entry's index and the repeat's) and every overlap (a prefix inside another: the nearest
//! enclosing prefix and the inner one; each inner prefix once, so the list is never longer
//! than the input), sorted by the later entry, for the caller to turn into file:line:col
//! errors. [`Nesting::Reject`] (subscriber circuits: LibreQoS treats overlapping circuit
//! prefixes as an error) refuses both; [`Nesting::LongestWins`] (a policy's own rules)
//! allows nesting and refuses only duplicates.
//!
//! ## Figures
//!
//! `taskset -c 1 cargo bench -p weir-core --bench lpm` (2-core AMD EPYC VM, shared; see
//! `benches/lpm.rs`): 100,000 prefixes (80,000 IPv4 /32 /30 /29 /24, 20,000 IPv6 /56 /64
//! /128), lookups of random addresses in random order, ns per lookup (criterion's
//! median); "chained": each address depends on the previous answer (latency, no overlap).
//!
//! | placement | IPv4 hit | IPv6 hit | miss | chained IPv4 / IPv6 | memory | build |
//! |---|---|---|---|---|---|---|
//! | scattered over the space | 11.8 | 26.9 | 23.7 | 22.8 / 35.6 | 4.9 MiB, 51 B/prefix | 14 ms |
//! | ISP pools | 13.2 | 24.1 | 20.4 | 22.2 / 30.3 | 3.7 MiB, 39 B/prefix | 12 ms |
//!
//! A linear scan of the same prefixes takes about 33 µs a lookup.

use super::IpNet;
use core::net::IpAddr;
use core::ops::{Add, BitAnd, BitOr, BitXor, Not, Shl, Shr, Sub};

/// A built longest-prefix-match table; see the module documentation.
#[derive(Clone)]
pub struct PrefixTable {
    v4: Family<u32>,
    v6: Family<u128>,
}

/// Whether a prefix may contain another.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// Overlapping prefixes are an error (subscriber circuits).
    Reject,
    /// A prefix may contain others; the longest match wins (a policy's rules).
    LongestWins,
}

/// A conflict between two entries of the input, by their indices in it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Conflict {
    /// The same prefix twice; `first < second`.
    Duplicate { first: usize, second: usize },
    /// Entry `outer`'s prefix contains entry `inner`'s (longer) prefix; `outer` is the
    /// nearest enclosing prefix (the longest, the first of equal ones).
    Overlap { outer: usize, inner: usize },
}

impl Conflict {
    /// The index of the entry the conflict is reported at (the later or inner one).
    pub fn at(&self) -> usize {
        match *self {
            Conflict::Duplicate { second, .. } => second,
            Conflict::Overlap { inner, .. } => inner,
        }
    }

    /// The index of the other entry (the earlier or outer one).
    pub fn other(&self) -> usize {
        match *self {
            Conflict::Duplicate { first, .. } => first,
            Conflict::Overlap { outer, .. } => outer,
        }
    }
}

/// Why a table could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("{} conflicting prefixes (duplicates or overlaps)", .0.len())]
    Conflicts(Vec<Conflict>),
    #[error(
        "entry {index}: value {value} is larger than {}",
        PrefixTable::MAX_VALUE
    )]
    ValueTooLarge { index: usize, value: u32 },
    #[error("the table would need more than 2^23 node lines (512 MiB)")]
    TooLarge,
}

/// Sizes of a built table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    pub v4_prefixes: usize,
    pub v6_prefixes: usize,
    /// Elementary intervals (distinct answers along the address line) per family.
    pub v4_intervals: usize,
    pub v6_intervals: usize,
    /// Run nodes of one line and of two; full nodes (256 entries).
    pub small_nodes: usize,
    pub wide_nodes: usize,
    pub full_nodes: usize,
    /// The most node levels below the root on any path (either family).
    pub max_levels: usize,
    /// Bytes of the roots and nodes.
    pub bytes: usize,
}

impl core::fmt::Debug for PrefixTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("PrefixTable").field(&self.stats()).finish()
    }
}

impl Default for PrefixTable {
    fn default() -> Self {
        PrefixTable::build(&[], Nesting::Reject).expect("the empty table")
    }
}

impl PrefixTable {
    /// The largest value an entry may carry (`0x7FFF_FFFF` means "no match" inside).
    pub const MAX_VALUE: u32 = NONE - 1;

    /// Build the table from `(prefix, value)` entries. With [`Nesting::Reject`] any
    /// duplicate or overlap is an error; with [`Nesting::LongestWins`] only duplicates are.
    /// The error lists every conflict ([`PrefixTable::conflicts`]).
    pub fn build(entries: &[(IpNet, u32)], nesting: Nesting) -> Result<Self, BuildError> {
        if let Some((index, &(_, value))) = entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.1 > Self::MAX_VALUE)
        {
            return Err(BuildError::ValueTooLarge { index, value });
        }
        let order = sorted(entries);
        let mut conflicts = scan(entries, &order);
        if nesting == Nesting::LongestWins {
            conflicts.retain(|c| matches!(c, Conflict::Duplicate { .. }));
        }
        if !conflicts.is_empty() {
            return Err(BuildError::Conflicts(conflicts));
        }
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for &i in &order {
            let (net, value) = entries[i];
            match net.addr() {
                IpAddr::V4(a) => v4.push((u32::from(a), net.prefix_len(), value)),
                IpAddr::V6(a) => v6.push((u128::from(a), net.prefix_len(), value)),
            }
        }
        Ok(PrefixTable {
            v4: Family::build(&v4)?,
            v6: Family::build(&v6)?,
        })
    }

    /// Every duplicate and overlap among `entries`, sorted by the entry they are reported
    /// at ([`Conflict::at`]), then by the other entry.
    pub fn conflicts(entries: &[(IpNet, u32)]) -> Vec<Conflict> {
        scan(entries, &sorted(entries))
    }

    /// The value of the longest prefix containing `addr`, if any.
    #[inline]
    pub fn lookup(&self, addr: IpAddr) -> Option<u32> {
        match addr {
            IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            IpAddr::V6(a) => self.lookup_v6(u128::from(a)),
        }
    }

    /// [`PrefixTable::lookup`] of an IPv4 address given as its 32-bit number.
    #[inline]
    pub fn lookup_v4(&self, addr: u32) -> Option<u32> {
        some(self.v4.find(addr))
    }

    /// [`PrefixTable::lookup`] of an IPv6 address given as its 128-bit number.
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> Option<u32> {
        some(self.v6.find(addr))
    }

    /// The number of prefixes.
    pub fn len(&self) -> usize {
        self.v4.prefixes + self.v6.prefixes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the roots and nodes (what lookups read).
    pub fn memory_bytes(&self) -> usize {
        self.v4.bytes() + self.v6.bytes()
    }

    pub fn stats(&self) -> TableStats {
        TableStats {
            v4_prefixes: self.v4.prefixes,
            v6_prefixes: self.v6.prefixes,
            v4_intervals: self.v4.intervals,
            v6_intervals: self.v6.intervals,
            small_nodes: self.v4.small + self.v6.small,
            wide_nodes: self.v4.wide + self.v6.wide,
            full_nodes: self.v4.full + self.v6.full,
            max_levels: self.v4.levels.max(self.v6.levels),
            bytes: self.memory_bytes(),
        }
    }
}

#[inline]
fn some(e: u32) -> Option<u32> {
    if e == NONE {
        None
    } else {
        Some(e)
    }
}

// ---------------------------------------------------------------------------------------
// Conflict detection

/// The prefix of an entry as (is IPv6, network address, length).
fn key_of(net: &IpNet) -> (bool, u128, u8) {
    match net.addr() {
        IpAddr::V4(a) => (false, u32::from(a) as u128, net.prefix_len()),
        IpAddr::V6(a) => (true, u128::from(a), net.prefix_len()),
    }
}

/// Entry indices sorted by family, network address, length, index: a containing prefix
/// comes before the prefixes inside it, and duplicates in input order.
fn sorted(entries: &[(IpNet, u32)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by_key(|&i| (key_of(&entries[i].0), i));
    order
}

/// The last address of a prefix, in its family's width.
fn last_of(v6: bool, net: u128, len: u8) -> u128 {
    let host = if v6 { 128 } else { 32 } - len as u32;
    if host == 0 {
        net
    } else {
        net | u128::MAX >> (128 - host)
    }
}

/// Duplicates and overlaps, by a sweep over the sorted entries with a stack of the open
/// (enclosing) prefixes. Prefixes are nested or disjoint, so the entry on top of the stack,
/// if it has not ended, is the nearest enclosing one.
fn scan(entries: &[(IpNet, u32)], order: &[usize]) -> Vec<Conflict> {
    let mut out = Vec::new();
    // (is IPv6, last address, length, index)
    let mut open: Vec<(bool, u128, u8, usize)> = Vec::new();
    for &i in order {
        let (v6, net, len) = key_of(&entries[i].0);
        while open
            .last()
            .is_some_and(|&(f, last, _, _)| f != v6 || last < net)
        {
            open.pop();
        }
        match open.last() {
            Some(&(_, _, l, j)) if l == len => {
                out.push(Conflict::Duplicate {
                    first: j,
                    second: i,
                });
                continue;
            }
            Some(&(_, _, _, j)) => out.push(Conflict::Overlap { outer: j, inner: i }),
            None => {}
        }
        open.push((v6, last_of(v6, net, len), len, i));
    }
    out.sort_unstable_by_key(|c| (c.at(), c.other()));
    out
}

// ---------------------------------------------------------------------------------------
// The trie

/// Entry: a child node (else a value).
const CHILD: u32 = 1 << 31;
/// Entry of a child: the child is a full node (else a run node).
const FULL: u32 = 1 << 30;
/// Entry of a run-node child: the node has two lines (else one).
const WIDE: u32 = 1 << 29;
/// Entry of a full child: where its depth (7 bits) starts.
const DEPTH_SHIFT: u32 = 23;
/// Entry of a child: its first line.
const LINE_MASK: u32 = (1 << DEPTH_SHIFT) - 1;
/// Entry: no prefix matches.
const NONE: u32 = 0x7FFF_FFFF;

/// One cache line of node storage.
#[derive(Copy, Clone)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// An address family's key: `u32` (IPv4) or `u128` (IPv6).
trait Key:
    Copy
    + Ord
    + core::fmt::Debug
    + From<u16>
    + Add<Output = Self>
    + Sub<Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
{
    const BITS: u32;
    /// Words of the key in a node header.
    const WORDS: usize;
    fn leading_zeros(self) -> u32;
    /// The low 32 bits.
    fn low32(self) -> u32;
    fn load(w: &[u32]) -> Self;
    fn store(self, w: &mut [u32]);

    #[inline(always)]
    fn zero() -> Self {
        Self::from(0)
    }
    /// The low `n` bits set (`n < BITS`).
    #[inline(always)]
    fn low_mask(n: u32) -> Self {
        (Self::from(1) << n) - Self::from(1)
    }
    /// The top `depth` bits set (`0 < depth <= BITS`).
    #[inline(always)]
    fn mask(depth: u32) -> Self {
        !Self::zero() << (Self::BITS - depth)
    }
    /// The `n` bits after the first `depth` (`0 < n`, `depth + n <= BITS`).
    #[inline(always)]
    fn bits_at(self, depth: u32, n: u32) -> usize {
        ((self << depth) >> (Self::BITS - n)).low32() as usize
    }
}

impl Key for u32 {
    const BITS: u32 = 32;
    const WORDS: usize = 1;
    #[inline(always)]
    fn leading_zeros(self) -> u32 {
        u32::leading_zeros(self)
    }
    #[inline(always)]
    fn low32(self) -> u32 {
        self
    }
    #[inline(always)]
    fn load(w: &[u32]) -> Self {
        w[0]
    }
    fn store(self, w: &mut [u32]) {
        w[0] = self;
    }
}

impl Key for u128 {
    const BITS: u32 = 128;
    const WORDS: usize = 4;
    #[inline(always)]
    fn leading_zeros(self) -> u32 {
        u128::leading_zeros(self)
    }
    #[inline(always)]
    fn low32(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn load(w: &[u32]) -> Self {
        w[0] as u128 | (w[1] as u128) << 32 | (w[2] as u128) << 64 | (w[3] as u128) << 96
    }
    fn store(self, w: &mut [u32]) {
        for (i, x) in w[..4].iter_mut().enumerate() {
            *x = (self >> (32 * i)) as u32;
        }
    }
}

/// One family's trie.
#[derive(Clone)]
struct Family<K> {
    root_bits: u32,
    root: Vec<u32>,
    lines: Vec<Line>,
    prefixes: usize,
    intervals: usize,
    small: usize,
    wide: usize,
    full: usize,
    levels: usize,
    _key: core::marker::PhantomData<K>,
}

// Node layout, in words from its first line: [fallback, key (K::WORDS), meta, ...]
//   run node of L lines (1 or 2): meta = depth | stride << 8; runs(L) - 1 run starts
//              after the first, as u16 (bound_words(L) words), then runs(L) entries.
//   full node: meta = depth | 8 << 8; the rest of the line unused; then 16 lines of 256
//              entries.

/// Words before a run node's run starts.
const fn header<K: Key>() -> usize {
    2 + K::WORDS
}

/// Runs a run node of `lines` lines holds: the most `r` with `r / 2` words of run starts
/// (`r - 1` u16) and `r` entries after the header.
const fn runs_in<K: Key>(lines: usize) -> usize {
    (2 * (16 * lines - header::<K>()) + 1) / 3
}

impl<K: Key> Family<K> {
    /// A run node's entry for `a` (`L` lines at `line`).
    #[inline(always)]
    fn run<const L: usize>(&self, line: usize, a: K) -> (u32, u32) {
        let w = |i: usize| self.lines[line + i / 16].0[i % 16];
        let h = header::<K>();
        let r = runs_in::<K>(L);
        let meta = w(h - 1);
        let depth = meta & 0xFF;
        let x = a.bits_at(depth, meta >> 8) as u32;
        let mut idx = 0;
        for i in 0..r - 1 {
            let start = (w(h + i / 2) >> (16 * (i % 2))) & 0xFFFF;
            idx += (start <= x) as usize;
        }
        (depth, w(h + r / 2 + idx))
    }

    #[inline(always)]
    fn find(&self, a: K) -> u32 {
        let mut e = self.root[(a >> (K::BITS - self.root_bits)).low32() as usize];
        while e & CHILD != 0 {
            let line = (e & LINE_MASK) as usize;
            let head = &self.lines[line].0;
            let (depth, next) = if e & FULL != 0 {
                // The depth comes with the entry: the entry's line is fetched in parallel
                // with the header.
                let depth = (e >> DEPTH_SHIFT) & 0x7F;
                let b = a.bits_at(depth, 8);
                (depth, self.lines[line + 1 + (b >> 4)].0[b & 15])
            } else if e & WIDE == 0 {
                self.run::<1>(line, a)
            } else {
                self.run::<2>(line, a)
            };
            if (a ^ K::load(&head[1..])) & K::mask(depth) != K::zero() {
                return head[0];
            }
            e = next;
        }
        e
    }

    fn bytes(&self) -> usize {
        self.root.capacity() * 4 + self.lines.capacity() * core::mem::size_of::<Line>()
    }

    /// Build from `(net, len, value)` sorted by net then length, without duplicates.
    fn build(prefixes: &[(K, u8, u32)]) -> Result<Self, BuildError> {
        let (starts, vals) = intervals(prefixes);
        let root_bits = if prefixes.len() > 256 { 16 } else { 8 };
        let mut b = Builder::<K> {
            starts: &starts,
            vals: &vals,
            lines: Vec::new(),
            small: 0,
            wide: 0,
            full: 0,
            levels: 0,
        };
        let mut runs = Vec::new();
        b.runs(K::zero(), 0, root_bits, 0, starts.len(), Some(0), &mut runs)?;
        let mut root = vec![NONE; 1 << root_bits];
        expand(&runs, &mut root);
        let mut lines = b.lines;
        lines.shrink_to_fit();
        Ok(Family {
            root_bits,
            root,
            lines,
            prefixes: prefixes.len(),
            intervals: starts.len(),
            small: b.small,
            wide: b.wide,
            full: b.full,
            levels: b.levels,
            _key: core::marker::PhantomData,
        })
    }
}

/// The elementary intervals of nested-or-disjoint prefixes sorted by (net, len): their
/// start addresses (the first is 0) and the longest match on each, adjacent equal values
/// merged.
fn intervals<K: Key>(prefixes: &[(K, u8, u32)]) -> (Vec<K>, Vec<u32>) {
    let mut starts = vec![K::zero()];
    let mut vals = vec![NONE];
    let mut emit = |at: K, v: u32| {
        let n = starts.len();
        if starts[n - 1] == at {
            vals[n - 1] = v;
            if n >= 2 && vals[n - 2] == v {
                starts.pop();
                vals.pop();
            }
        } else if vals[n - 1] != v {
            starts.push(at);
            vals.push(v);
        }
    };
    // (last address, value) of the open prefixes, outermost first.
    let mut open: Vec<(K, u32)> = Vec::new();
    for &(net, len, v) in prefixes {
        while let Some(&(last, _)) = open.last() {
            if last >= net {
                break;
            }
            open.pop();
            emit(last + K::from(1), open.last().map_or(NONE, |o| o.1));
        }
        emit(net, v);
        let last = if len == 0 {
            !K::zero()
        } else {
            net | K::low_mask(K::BITS - len as u32)
        };
        open.push((last, v));
    }
    while let Some((last, _)) = open.pop() {
        if last != !K::zero() {
            emit(last + K::from(1), open.last().map_or(NONE, |o| o.1));
        }
    }
    (starts, vals)
}

/// Runs `(first sub-block, entry)` → one entry per sub-block.
fn expand(runs: &[(u32, u32)], out: &mut [u32]) {
    for (r, &(b, e)) in runs.iter().enumerate() {
        let end = runs.get(r + 1).map_or(out.len(), |n| n.0 as usize);
        out[b as usize..end].fill(e);
    }
}

struct Builder<'a, K> {
    starts: &'a [K],
    vals: &'a [u32],
    lines: Vec<Line>,
    small: usize,
    wide: usize,
    full: usize,
    levels: usize,
}

impl<K: Key> Builder<'_, K> {
    /// The runs of equal entries of the block of 2^(BITS - `depth`) addresses at `start`
    /// cut into 2^`stride` sub-blocks, into `out`: `(first sub-block, entry)`. The
    /// interval starts inside the block are among `starts[i + 1..j]`, and `starts[i]` is
    /// the last at or before `start` (or before the first sub-block the caller reads; see
    /// [`Builder::block`]). Children are built when `level` (nodes above them) is given,
    /// else counted with a placeholder entry.
    #[allow(clippy::too_many_arguments)]
    fn runs(
        &mut self,
        start: K,
        depth: u32,
        stride: u32,
        i: usize,
        j: usize,
        level: Option<usize>,
        out: &mut Vec<(u32, u32)>,
    ) -> Result<(), BuildError> {
        let sub = K::BITS - depth - stride;
        let n = 1usize << stride;
        let mut push = |b: usize, e: u32| match out.last() {
            Some(l) if l.1 == e && e & CHILD == 0 => {}
            _ => out.push((b as u32, e)),
        };
        let mut k = i;
        let mut b = 0;
        while b < n {
            let cs = start | K::from(b as u16) << sub;
            while k + 1 < j && self.starts[k + 1] <= cs {
                k += 1;
            }
            let cl = cs | K::low_mask(sub);
            if k + 1 < j && self.starts[k + 1] <= cl {
                // An interval starts inside this sub-block: a child.
                let mut m = k + 2;
                while m < j && self.starts[m] <= cl {
                    m += 1;
                }
                let e = match level {
                    Some(level) => self.block(cs, depth + stride, k, m, level)?,
                    None => CHILD,
                };
                push(b, e);
                k = m - 1;
                b += 1;
            } else {
                // Constant up to the sub-block holding the next interval start.
                let next = if k + 1 < j {
                    let q = (self.starts[k + 1] - start) >> sub;
                    if q > K::from((n - 1) as u16) {
                        n
                    } else {
                        q.low32() as usize
                    }
                } else {
                    n
                };
                push(b, self.vals[k]);
                b = next;
            }
        }
        Ok(())
    }

    /// The entry for the block of 2^(BITS - `depth`) addresses at `start`, where
    /// `starts[i] <= start` and the interval starts inside it are `starts[i + 1..j]`. It
    /// answers for every address of the block; a full node it makes may cover a larger
    /// block (when this one has fewer than 256 addresses), whose other entries are never
    /// read.
    fn block(
        &mut self,
        start: K,
        depth: u32,
        i: usize,
        j: usize,
        level: usize,
    ) -> Result<u32, BuildError> {
        if j == i + 1 {
            return Ok(self.vals[i]);
        }
        // Everything that differs from `fallback` lies in [lo, hi]; the node goes where lo
        // and hi diverge. The fallback is the value at both ends of the block if they
        // agree, else the one at the end whose side leaves the smaller block.
        let one = K::from(1);
        let end = start | K::low_mask(K::BITS - depth);
        let (first, last) = (self.vals[i], self.vals[j - 1]);
        let (fallback, lo, hi) = if first == last {
            (first, self.starts[i + 1], self.starts[j - 1] - one)
        } else {
            let (lo, hi) = (self.starts[i + 1], self.starts[j - 1] - one);
            if (start ^ hi).leading_zeros() > (lo ^ end).leading_zeros() {
                (last, start, hi)
            } else {
                (first, lo, end)
            }
        };
        let nd = (lo ^ hi).leading_zeros().min(K::BITS - 1);
        debug_assert!(nd >= depth);
        // The widest stride up to 16 bits whose runs fit a run node, else a full node of 8.
        let mut runs = Vec::new();
        let mut kind = None;
        for stride in [(K::BITS - nd).min(16), 8] {
            let nd = nd.min(K::BITS - stride);
            let ns = lo & K::mask(nd);
            // The interval holding `ns` (`i`, or `i + 1` if that one starts exactly there;
            // `i` also if `ns` is before `start`, for a full node over a larger block).
            let k = if ns == self.starts[i + 1] { i + 1 } else { i };
            runs.clear();
            self.runs(ns, nd, stride, k, j, None, &mut runs)?;
            let lines = [1, 2].into_iter().find(|&l| runs.len() <= runs_in::<K>(l));
            if lines.is_some() || stride == 8 {
                kind = Some((ns, nd, stride, k, lines));
                break;
            }
        }
        let (ns, nd, stride, k, lines) = kind.expect("stride 8 is always taken");
        runs.clear();
        self.runs(ns, nd, stride, k, j, Some(level + 1), &mut runs)?;
        self.levels = self.levels.max(level + 1);
        self.node(&runs, ns, nd, stride, fallback, lines)
    }

    /// Store a node: a run node of `lines` lines, else a full one; its entry in the parent.
    fn node(
        &mut self,
        runs: &[(u32, u32)],
        key: K,
        depth: u32,
        stride: u32,
        fallback: u32,
        lines: Option<usize>,
    ) -> Result<u32, BuildError> {
        let at = self.lines.len();
        if at + 17 > LINE_MASK as usize {
            return Err(BuildError::TooLarge);
        }
        let h = header::<K>();
        let mut w = [0u32; 32];
        w[0] = fallback;
        key.store(&mut w[1..]);
        w[h - 1] = depth | stride << 8;
        if let Some(lines) = lines {
            // Pad with the last run: its start counts for every index at or after it.
            let r = runs_in::<K>(lines);
            let run = |i: usize| runs[i.min(runs.len() - 1)];
            for i in 1..r {
                w[h + (i - 1) / 2] |= run(i).0 << (16 * ((i - 1) % 2));
            }
            for i in 0..r {
                w[h + r / 2 + i] = run(i).1;
            }
            for l in w.chunks_exact(16).take(lines) {
                self.lines.push(Line(l.try_into().expect("16 words")));
            }
            if lines == 1 {
                self.small += 1;
                Ok(CHILD | at as u32)
            } else {
                self.wide += 1;
                Ok(CHILD | WIDE | at as u32)
            }
        } else {
            let head = Line(w[..16].try_into().expect("16 words"));
            debug_assert_eq!(stride, 8);
            let mut e = [NONE; 256];
            expand(runs, &mut e);
            self.lines.push(head);
            for c in e.chunks_exact(16) {
                self.lines.push(Line(c.try_into().expect("16 entries")));
            }
            self.full += 1;
            Ok(CHILD | FULL | depth << DEPTH_SHIFT | at as u32)
        }
    }
}

#[cfg(test)]
mod tests;
