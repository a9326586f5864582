//! The packet arena: preallocated slots addressed by `PktId` (a `u32`), each holding the
//! frame bytes and the per-packet metadata that travels with it through the pipeline.
//!
//! No allocation happens per packet: `alloc` pops a free slot, `free` pushes it back.
//! Queues are intrusive singly-linked FIFOs threaded through `Meta::next`, so moving a
//! packet between queues costs a few stores. A pool may have `slot_size == 0` (the
//! simulator) in which case only metadata is stored.
//!
//! **Whole super-packets.** A pool may also keep a few large slots ([`Pool::with_whole`],
//! 64 KB each) for TSO/GSO super-packets that cross the device whole (docs/live.md,
//! "Super-packets kept whole"): such a packet has one metadata entry like any other, its
//! bytes in a large slot, and its [`Super`] — the virtio-net header it arrived with (GSO
//! type and segment size, partial-checksum offsets) and its segment count. Its `Meta::len`
//! is what it costs on the wire — the sum of its segments' frame lengths, headers repeated
//! in each — so every queue, counter and rate charges it as its segments; the bytes
//! stored ([`Pool::data`]) are fewer (the headers once).
//!
//! Invariant: a `PktId` is owned by exactly one holder (a queue, the driver, or the free
//! list) at a time. Freeing a packet twice is a logic error caught by a debug assertion.
//! A large slot belongs to exactly one live packet, and goes back with it.

use crate::time::Instant;
use weir_wire::vnet::VnetHdr;

/// Index of a packet slot in a [`Pool`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct PktId(pub u32);

const NIL: u32 = u32::MAX;

/// Which way a packet crosses the device.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum Direction {
    /// LAN → WAN (the direction seed 000 shapes).
    #[default]
    Outbound,
    /// WAN → LAN.
    Inbound,
}

impl Direction {
    /// The other direction (the way a reply travels).
    pub fn reverse(self) -> Direction {
        match self {
            Direction::Outbound => Direction::Inbound,
            Direction::Inbound => Direction::Outbound,
        }
    }

    /// The index of this direction in per-direction arrays: outbound 0, inbound 1.
    #[inline]
    pub const fn index(self) -> usize {
        match self {
            Direction::Outbound => 0,
            Direction::Inbound => 1,
        }
    }

    /// `"outbound"` or `"inbound"`, as the policy writes it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        }
    }
}

/// DiffServ drop precedence carried as metadata from a meter/marker to an AQM.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum Color {
    #[default]
    Green,
    Yellow,
    Red,
}

/// Per-packet metadata.
#[derive(Clone, Debug)]
pub struct Meta {
    /// Frame length in bytes as seen on the wire side of AF_PACKET (L2 header, no FCS).
    pub len: u32,
    /// When the packet entered the pipeline.
    pub arrival: Instant,
    /// Leaf class index assigned by the classifier.
    pub class: u32,
    /// Index of the classifier rule that matched (`u16::MAX` = default class).
    pub rule: u16,
    pub dir: Direction,
    pub color: Color,
    /// Hash of the flow's 5-tuple (direction-independent), used by per-flow queuing.
    pub flow: u64,
    /// Connection-table entry shared by both directions (`u32::MAX` = none).
    pub conn: u32,
    /// Intrusive queue link; owned by whichever queue holds the packet.
    next: u32,
    /// The large slot of a whole super-packet (`NIL`: the bytes are in the packet's own
    /// slot).
    whole: u32,
    #[cfg(debug_assertions)]
    live: bool,
}

impl Meta {
    fn blank() -> Self {
        Meta {
            len: 0,
            arrival: Instant::ZERO,
            class: 0,
            rule: u16::MAX,
            dir: Direction::Outbound,
            color: Color::Green,
            flow: 0,
            conn: u32::MAX,
            next: NIL,
            whole: NIL,
            #[cfg(debug_assertions)]
            live: false,
        }
    }
}

/// What a whole super-packet carries besides its bytes (see the module comment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Super {
    /// The virtio-net header to send it with (GSO type and size, checksum offsets).
    pub vnet: VnetHdr,
    /// How many wire frames it stands for.
    pub segments: u16,
    /// Bytes stored (headers once, then the payload).
    pub stored: u32,
    /// Where they start in the large slot (a buffer swapped in may hold a header first:
    /// [`Pool::alloc_whole_swap`]).
    pub offset: u32,
}

/// The large slots of a pool: buffers of their own, so that one can be swapped with a
/// buffer the driver has just filled instead of copied.
struct Wholes {
    bufs: Vec<Vec<u8>>,
    size: usize,
    info: Vec<Super>,
    free: Vec<u32>,
}

/// Preallocated packet storage.
pub struct Pool {
    meta: Vec<Meta>,
    data: Vec<u8>,
    slot: usize,
    free: Vec<u32>,
    wholes: Wholes,
}

impl Pool {
    /// A pool of `capacity` packets with `slot_size` bytes of frame storage each.
    pub fn new(capacity: u32, slot_size: usize) -> Self {
        let cap = capacity as usize;
        Pool {
            meta: (0..cap).map(|_| Meta::blank()).collect(),
            data: vec![0u8; cap * slot_size],
            slot: slot_size,
            free: (0..capacity).rev().collect(),
            wholes: Wholes {
                bufs: Vec::new(),
                size: 0,
                info: Vec::new(),
                free: Vec::new(),
            },
        }
    }

    /// A pool as [`Pool::new`] plus `count` large slots of `size` bytes each for whole
    /// super-packets.
    pub fn with_whole(capacity: u32, slot_size: usize, count: u32, size: usize) -> Self {
        let mut p = Pool::new(capacity, slot_size);
        p.wholes = Wholes {
            bufs: (0..count).map(|_| vec![0u8; size]).collect(),
            size,
            info: vec![Super::default(); count as usize],
            free: (0..count).rev().collect(),
        };
        p
    }

    /// Bytes a large slot holds (0: the pool has none).
    pub fn whole_size(&self) -> usize {
        self.wholes.size
    }
    /// Large slots free.
    pub fn wholes_available(&self) -> usize {
        self.wholes.free.len()
    }

    /// Take a packet with a large slot, or `None` when either runs out. Write the bytes
    /// with [`Pool::slot_mut`], then [`Pool::set_super`] and `meta.len` (the wire cost).
    pub fn alloc_whole(&mut self) -> Option<PktId> {
        let w = *self.wholes.free.last()?;
        let id = self.alloc()?;
        self.wholes.free.pop();
        self.wholes.info[w as usize] = Super::default();
        self.meta[id.0 as usize].whole = w;
        Some(id)
    }

    /// Take a packet with a large slot whose buffer is swapped with `buf` (of
    /// [`Pool::whole_size`] bytes, just filled by the driver: no copy); `buf` gets the
    /// slot's old buffer. `None` (and `buf` untouched) when either runs out or `buf` is
    /// not of that size.
    pub fn alloc_whole_swap(&mut self, buf: &mut Vec<u8>) -> Option<PktId> {
        if buf.len() != self.wholes.size {
            return None;
        }
        let id = self.alloc_whole()?;
        let w = self.meta[id.0 as usize].whole as usize;
        std::mem::swap(&mut self.wholes.bufs[w], buf);
        Some(id)
    }

    /// Record what a whole super-packet is (its bytes already written).
    pub fn set_super(&mut self, id: PktId, s: Super) {
        let w = self.meta[id.0 as usize].whole;
        debug_assert!(w != NIL, "packet {} has no large slot", id.0);
        let size = self.wholes.size as u32;
        if let Some(i) = self.wholes.info.get_mut(w as usize) {
            let offset = s.offset.min(size);
            *i = Super {
                offset,
                stored: s.stored.min(size - offset),
                ..s
            };
        }
    }

    /// The packet's [`Super`] if it is a whole super-packet.
    #[inline]
    pub fn super_packet(&self, id: PktId) -> Option<&Super> {
        let w = self.meta[id.0 as usize].whole;
        (w != NIL).then(|| &self.wholes.info[w as usize])
    }

    pub fn capacity(&self) -> usize {
        self.meta.len()
    }
    pub fn available(&self) -> usize {
        self.free.len()
    }
    pub fn in_use(&self) -> usize {
        self.meta.len() - self.free.len()
    }
    pub fn slot_size(&self) -> usize {
        self.slot
    }

    /// Take a free slot with metadata reset to defaults, or `None` when the pool is
    /// exhausted (the driver counts that as a drop).
    #[inline]
    pub fn alloc(&mut self) -> Option<PktId> {
        let i = self.free.pop()?;
        let m = &mut self.meta[i as usize];
        *m = Meta::blank();
        #[cfg(debug_assertions)]
        {
            m.live = true;
        }
        Some(PktId(i))
    }

    #[inline]
    pub fn free(&mut self, id: PktId) {
        let m = &mut self.meta[id.0 as usize];
        #[cfg(debug_assertions)]
        {
            assert!(m.live, "double free of packet {}", id.0);
            m.live = false;
        }
        if m.whole != NIL {
            self.wholes.free.push(m.whole);
            m.whole = NIL;
        }
        self.free.push(id.0);
    }

    #[inline]
    pub fn meta(&self, id: PktId) -> &Meta {
        &self.meta[id.0 as usize]
    }
    #[inline]
    pub fn meta_mut(&mut self, id: PktId) -> &mut Meta {
        &mut self.meta[id.0 as usize]
    }
    #[inline]
    pub fn len(&self, id: PktId) -> u32 {
        self.meta[id.0 as usize].len
    }

    /// The frame bytes: `meta.len` of them, at most `slot_size`; a whole super-packet's
    /// stored bytes.
    #[inline]
    pub fn data(&self, id: PktId) -> &[u8] {
        let m = &self.meta[id.0 as usize];
        if m.whole == NIL {
            let start = id.0 as usize * self.slot;
            return &self.data[start..start + (m.len as usize).min(self.slot)];
        }
        let w = m.whole as usize;
        let i = &self.wholes.info[w];
        let (at, n) = (i.offset as usize, i.stored as usize);
        &self.wholes.bufs[w][at..at + n]
    }
    /// The whole writable slot (a large one for a whole super-packet); set `meta.len` to
    /// the frame length after writing.
    #[inline]
    pub fn slot_mut(&mut self, id: PktId) -> &mut [u8] {
        let w = self.meta[id.0 as usize].whole as usize;
        if w != NIL as usize {
            let at = self.wholes.info[w].offset as usize;
            return &mut self.wholes.bufs[w][at..];
        }
        let start = id.0 as usize * self.slot;
        &mut self.data[start..start + self.slot]
    }
    /// The frame bytes, writable (for in-place header edits).
    #[inline]
    pub fn data_mut(&mut self, id: PktId) -> &mut [u8] {
        let m = &self.meta[id.0 as usize];
        if m.whole == NIL {
            let start = id.0 as usize * self.slot;
            let n = (m.len as usize).min(self.slot);
            return &mut self.data[start..start + n];
        }
        let w = m.whole as usize;
        let i = &self.wholes.info[w];
        let (at, n) = (i.offset as usize, i.stored as usize);
        &mut self.wholes.bufs[w][at..at + n]
    }
}

/// An intrusive FIFO of packets threaded through the pool's `Meta::next` links, with
/// packet and byte counts. 24 bytes; no allocation.
#[derive(Clone, Debug)]
pub struct PktQueue {
    head: u32,
    tail: u32,
    len: u32,
    bytes: u64,
}

impl Default for PktQueue {
    fn default() -> Self {
        PktQueue {
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        }
    }
}

impl PktQueue {
    pub const fn new() -> Self {
        PktQueue {
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        }
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    #[inline]
    pub fn head(&self) -> Option<PktId> {
        (self.head != NIL).then_some(PktId(self.head))
    }

    #[inline]
    pub fn push_back(&mut self, pool: &mut Pool, id: PktId) {
        let m = pool.meta_mut(id);
        m.next = NIL;
        self.bytes += m.len as u64;
        if self.tail == NIL {
            self.head = id.0;
        } else {
            pool.meta_mut(PktId(self.tail)).next = id.0;
        }
        self.tail = id.0;
        self.len += 1;
    }

    #[inline]
    pub fn pop_front(&mut self, pool: &mut Pool) -> Option<PktId> {
        if self.head == NIL {
            return None;
        }
        let id = PktId(self.head);
        let m = pool.meta_mut(id);
        self.head = m.next;
        m.next = NIL;
        self.bytes -= m.len as u64;
        self.len -= 1;
        if self.head == NIL {
            self.tail = NIL;
        }
        Some(id)
    }

    /// The last packet (the one `push_back` added last).
    #[inline]
    pub fn tail(&self) -> Option<PktId> {
        (self.tail != NIL).then_some(PktId(self.tail))
    }

    /// The packets from head to tail (for a filter that looks for one to remove, such as
    /// CAKE's ACK filter; pair with [`PktQueue::remove_after`]).
    pub fn iter<'a>(&self, pool: &'a Pool) -> impl Iterator<Item = PktId> + 'a {
        let mut at = self.head;
        core::iter::from_fn(move || {
            (at != NIL).then(|| {
                let id = PktId(at);
                at = pool.meta(id).next;
                id
            })
        })
    }

    /// Unlink and return the packet that follows `prev` (the head when `prev` is `None`),
    /// from anywhere in the queue, in O(1): the queue is singly linked, so the caller
    /// names the predecessor (a filter walking [`PktQueue::iter`] has it). `prev` must be
    /// in this queue; `None` when it is the tail (or the queue is empty).
    #[inline]
    pub fn remove_after(&mut self, pool: &mut Pool, prev: Option<PktId>) -> Option<PktId> {
        let Some(prev) = prev else {
            return self.pop_front(pool);
        };
        let id = pool.meta(prev).next;
        if id == NIL {
            return None;
        }
        let m = pool.meta_mut(PktId(id));
        let next = m.next;
        m.next = NIL;
        self.bytes -= m.len as u64;
        self.len -= 1;
        pool.meta_mut(prev).next = next;
        if next == NIL {
            self.tail = prev.0;
        }
        Some(PktId(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_and_queue_order() {
        let mut pool = Pool::new(4, 64);
        let mut q = PktQueue::new();
        let ids: Vec<_> = (0..4).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none(), "exhausted pool returns None");
        for (i, &id) in ids.iter().enumerate() {
            pool.meta_mut(id).len = 100 + i as u32;
            q.push_back(&mut pool, id);
        }
        assert_eq!(q.len(), 4);
        assert_eq!(q.bytes(), 100 + 101 + 102 + 103);
        for &id in &ids {
            assert_eq!(q.pop_front(&mut pool), Some(id));
            pool.free(id);
        }
        assert!(q.pop_front(&mut pool).is_none());
        assert_eq!(q.bytes(), 0);
        assert_eq!(pool.available(), 4);
    }

    /// Removal from the head, the middle and the tail keeps the order, the counts and the
    /// tail (a later `push_back` links after the right packet).
    #[test]
    fn remove_after_unlinks_anywhere() {
        let mut pool = Pool::new(8, 0);
        let mut q = PktQueue::new();
        let ids: Vec<_> = (0..6).map(|_| pool.alloc().unwrap()).collect();
        for (i, &id) in ids.iter().enumerate() {
            pool.meta_mut(id).len = 10 * (i as u32 + 1);
            q.push_back(&mut pool, id);
        }
        let order = |q: &PktQueue, pool: &Pool| q.iter(pool).collect::<Vec<_>>();
        assert_eq!(order(&q, &pool), ids);
        // middle: after ids[1] comes ids[2]
        assert_eq!(q.remove_after(&mut pool, Some(ids[1])), Some(ids[2]));
        // head
        assert_eq!(q.remove_after(&mut pool, None), Some(ids[0]));
        // tail: after ids[4] comes ids[5], the tail
        assert_eq!(q.remove_after(&mut pool, Some(ids[4])), Some(ids[5]));
        assert_eq!(q.tail(), Some(ids[4]));
        // nothing after the tail
        assert_eq!(q.remove_after(&mut pool, Some(ids[4])), None);
        assert_eq!(order(&q, &pool), vec![ids[1], ids[3], ids[4]]);
        assert_eq!((q.len(), q.bytes()), (3, 20 + 40 + 50));
        q.push_back(&mut pool, ids[5]);
        assert_eq!(order(&q, &pool), vec![ids[1], ids[3], ids[4], ids[5]]);
        // down to one packet and empty: head and tail follow
        q.remove_after(&mut pool, Some(ids[1]));
        q.remove_after(&mut pool, Some(ids[1]));
        q.remove_after(&mut pool, Some(ids[1]));
        assert_eq!(
            (q.head(), q.tail(), q.len()),
            (Some(ids[1]), Some(ids[1]), 1)
        );
        assert_eq!(q.remove_after(&mut pool, None), Some(ids[1]));
        assert_eq!((q.head(), q.tail(), q.bytes()), (None, None, 0));
        assert_eq!(q.iter(&pool).count(), 0);
    }

    /// A whole super-packet: its bytes in a large slot, its wire cost in `len`, the slot
    /// back on free; without large slots (or all taken) `alloc_whole` says no.
    #[test]
    fn whole_super_packets_use_large_slots() {
        let mut pool = Pool::with_whole(3, 16, 1, 100);
        let id = pool.alloc_whole().unwrap();
        assert_eq!(pool.slot_mut(id).len(), 100);
        pool.slot_mut(id)[..40].fill(7);
        let s = Super {
            segments: 2,
            stored: 40,
            ..Super::default()
        };
        pool.set_super(id, s);
        // 20 bytes of headers and 20 of payload cut in two: frames of 20 + 10 each
        pool.meta_mut(id).len = 60;
        assert_eq!(pool.data(id), &[7u8; 40][..]);
        assert_eq!(pool.super_packet(id), Some(&s));
        assert!(pool.alloc_whole().is_none(), "one large slot");
        let small = pool.alloc().unwrap();
        assert_eq!(pool.super_packet(small), None);
        assert_eq!(pool.slot_mut(small).len(), 16);
        pool.free(id);
        assert_eq!(pool.wholes_available(), 1);
        let again = pool.alloc_whole().unwrap();
        assert_eq!(pool.super_packet(again).unwrap().segments, 0, "info reset");
        pool.free(again);
        pool.free(small);
        // a packet reusing the metadata entry of a whole one is an ordinary packet
        let id = pool.alloc().unwrap();
        assert_eq!(pool.super_packet(id), None);
        assert!(Pool::new(2, 16).alloc_whole().is_none());
        // a filled buffer swapped in, its packet after a 4-byte header
        let mut buf = vec![1, 2, 3, 4, 5, 6, 7];
        assert!(
            pool.alloc_whole_swap(&mut buf).is_none(),
            "not of the slots' size"
        );
        pool.free(id);
        let mut buf = vec![9u8; 100];
        buf[4..8].copy_from_slice(&[5, 6, 7, 8]);
        let id = pool.alloc_whole_swap(&mut buf).unwrap();
        assert_eq!(buf.len(), 100, "the slot's old buffer back");
        pool.set_super(
            id,
            Super {
                offset: 4,
                stored: 4,
                ..Super::default()
            },
        );
        assert_eq!(pool.data(id), &[5, 6, 7, 8]);
        pool.data_mut(id)[0] = 1;
        assert_eq!(pool.data(id), &[1, 6, 7, 8]);
        // the writable slot starts where the packet does
        assert_eq!(pool.slot_mut(id)[..4], [1, 6, 7, 8]);
    }

    #[test]
    fn data_views_follow_len() {
        let mut pool = Pool::new(2, 16);
        let id = pool.alloc().unwrap();
        pool.slot_mut(id)[..3].copy_from_slice(&[1, 2, 3]);
        pool.meta_mut(id).len = 3;
        assert_eq!(pool.data(id), &[1, 2, 3]);
        pool.data_mut(id)[0] = 9;
        assert_eq!(pool.data(id), &[9, 2, 3]);
    }
}
