//! An indexed `D`-ary min-heap ([`IndexedHeap`]: the binary one): ids `0..n` with a `u64`
//! key each, supporting insert, update-key and remove by id in O(log n), and peek-min in
//! O(1).
//!
//! Used for event queues keyed by time (class mode changes in the link-sharing scheduler,
//! throttled queues, parked flows). Memory: 16 bytes per heap entry + 4 bytes per id.
//! Invariant: `pos[heap[i].1] == i` for every entry; `pos[id] == NIL` for absent ids.
//!
//! Which of several entries with equal keys `peek` returns depends on the arity and on the
//! history of operations (deterministically). Users whose outcome depends on that choice
//! (parked flows, the emulator's links) use the binary [`IndexedHeap`]. The link-sharing
//! scheduler's `wait`, whose outcome does not, is 4-ary: half the depth, so a pop or sift
//! does fewer comparisons (the smallest child is chosen by conditional moves).

const NIL: u32 = u32::MAX;

/// The binary heap.
pub type IndexedHeap = IndexedDHeap<2>;

/// An indexed min-heap in which every entry has up to `D` children.
#[derive(Clone, Debug, Default)]
pub struct IndexedDHeap<const D: usize> {
    heap: Vec<(u64, u32)>,
    pos: Vec<u32>,
}

impl<const D: usize> IndexedDHeap<D> {
    pub fn with_ids(n: usize) -> Self {
        IndexedDHeap {
            heap: Vec::with_capacity(n),
            pos: vec![NIL; n],
        }
    }
    /// Make room for ids up to `n - 1`.
    pub fn grow(&mut self, n: usize) {
        if self.pos.len() < n {
            self.pos.resize(n, NIL);
        }
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.pos[id as usize] != NIL
    }
    /// The entry with the smallest key: `(key, id)`.
    #[inline]
    pub fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().copied()
    }
    pub fn key(&self, id: u32) -> Option<u64> {
        let p = self.pos[id as usize];
        (p != NIL).then(|| self.heap[p as usize].0)
    }

    /// Insert `id` with `key`, or change its key if present.
    pub fn set(&mut self, id: u32, key: u64) {
        let p = self.pos[id as usize];
        if p == NIL {
            let i = self.heap.len();
            self.heap.push((key, id));
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.heap[i].0;
            if key == old {
                return;
            }
            self.heap[i].0 = key;
            if key < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    pub fn remove(&mut self, id: u32) -> bool {
        let p = self.pos[id as usize];
        if p == NIL {
            return false;
        }
        self.remove_at(p as usize);
        true
    }

    /// Subtract `d` from every key (keys below `d` become 0): for keys that grow without
    /// bound, such as round numbers, to start again from a smaller base. The order is kept
    /// when every key is at least `d`. O(n).
    pub fn sub_all(&mut self, d: u64) {
        for e in &mut self.heap {
            e.0 = e.0.saturating_sub(d);
        }
    }

    /// Remove every entry. O(len).
    pub fn clear(&mut self) {
        for &(_, id) in &self.heap {
            self.pos[id as usize] = NIL;
        }
        self.heap.clear();
    }

    pub fn pop(&mut self) -> Option<(u64, u32)> {
        if self.heap.is_empty() {
            return None;
        }
        let top = self.heap[0];
        self.remove_at(0);
        Some(top)
    }

    fn remove_at(&mut self, i: usize) {
        let id = self.heap[i].1;
        self.pos[id as usize] = NIL;
        let last = self.heap.pop().expect("remove_at on an empty heap");
        if i < self.heap.len() {
            // the last entry fills the hole, then moves whichever way its key requires
            self.heap[i] = last;
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    // The sifts move a hole instead of swapping: the entry is written once, at its final
    // place, and every entry it passes moves by one store (and one `pos` update). They
    // work on local slices, which lets the compiler drop most bounds checks.

    /// Move the entry at `i` up while its parent's key is larger; records its position.
    fn sift_up(&mut self, mut i: usize) {
        let (heap, pos) = (&mut self.heap[..], &mut self.pos[..]);
        let e = heap[i];
        while i > 0 {
            let parent = (i - 1) / D;
            let p = heap[parent];
            if p.0 <= e.0 {
                break;
            }
            place(heap, pos, i, p);
            i = parent;
        }
        place(heap, pos, i, e);
    }

    /// Move the entry at `i` down while a child's key is smaller (the smallest child, the
    /// first one on ties); records its position.
    fn sift_down(&mut self, mut i: usize) {
        let (heap, pos) = (&mut self.heap[..], &mut self.pos[..]);
        let n = heap.len();
        let e = heap[i];
        loop {
            let first = D * i + 1;
            if first >= n {
                break;
            }
            // the smallest child (conditional moves, not branches on the keys)
            let kids = &heap[first..(first + D).min(n)];
            let (mut c, mut ck) = (0, kids[0].0);
            for (j, &(k, _)) in kids.iter().enumerate().skip(1) {
                if k < ck {
                    (c, ck) = (j, k);
                }
            }
            let c = first + c;
            if e.0 <= ck {
                break;
            }
            place(heap, pos, i, heap[c]);
            i = c;
        }
        place(heap, pos, i, e);
    }
}

/// Put entry `e` at index `i` and record its position.
#[inline]
fn place(heap: &mut [(u64, u32)], pos: &mut [u32], i: usize, e: (u64, u32)) {
    heap[i] = e;
    pos[e.1 as usize] = i as u32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A model check against a sorted map, for each heap (both have the same API).
    macro_rules! model_check {
        ($name:ident, $heap:expr) => {
            proptest! {
                #[test]
                fn $name(ops in proptest::collection::vec((0u32..32, 0u64..1000, 0u8..3), 0..300)) {
                    let mut h = $heap;
                    let mut model: std::collections::BTreeMap<u32, u64> = Default::default();
                    for (id, key, op) in ops {
                        match op {
                            0 => { h.set(id, key); model.insert(id, key); }
                            1 => { prop_assert_eq!(h.remove(id), model.remove(&id).is_some()); }
                            _ => {
                                let want = model.iter().map(|(&i, &k)| (k, i)).min_by_key(|&(k, _)| k);
                                let got = h.pop();
                                prop_assert_eq!(got.map(|g| g.0), want.map(|w| w.0));
                                if let Some((_, id)) = got { model.remove(&id); }
                            }
                        }
                        prop_assert_eq!(h.len(), model.len());
                        for (&i, &k) in &model { prop_assert_eq!(h.key(i), Some(k)); }
                    }
                }
            }
        };
    }

    #[test]
    fn sub_all_keeps_the_order() {
        let mut h = IndexedDHeap::<4>::with_ids(8);
        for (id, k) in [(0, 105), (1, 100), (2, 130), (3, 101)] {
            h.set(id, k);
        }
        h.sub_all(100);
        assert_eq!(h.key(2), Some(30));
        let order: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(order, vec![(0, 1), (1, 3), (5, 0), (30, 2)]);
    }

    model_check!(behaves_like_a_sorted_map, IndexedHeap::with_ids(32));
    model_check!(
        four_ary_behaves_like_a_sorted_map,
        IndexedDHeap::<4>::with_ids(32)
    );
}
