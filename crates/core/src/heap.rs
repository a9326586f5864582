//! An indexed binary min-heap: ids `0..n` with a `u64` key each, supporting insert,
//! update-key and remove by id in O(log n), and peek-min in O(1).
//!
//! Used for event queues keyed by time (class mode changes in the link-sharing scheduler,
//! throttled queues). Memory: 12 bytes per heap entry + 4 bytes per id.
//! Invariant: `pos[heap[i].1] == i` for every entry; `pos[id] == NIL` for absent ids.

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub struct IndexedHeap {
    heap: Vec<(u64, u32)>,
    pos: Vec<u32>,
}

impl IndexedHeap {
    pub fn with_ids(n: usize) -> Self {
        IndexedHeap {
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
            self.pos[id as usize] = i as u32;
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.heap[i].0;
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

    pub fn pop(&mut self) -> Option<(u64, u32)> {
        if self.heap.is_empty() {
            return None;
        }
        let top = self.heap[0];
        self.remove_at(0);
        Some(top)
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        let id = self.heap[i].1;
        self.pos[id as usize] = NIL;
        if i != last {
            self.heap[i] = self.heap[last];
            self.pos[self.heap[i].1 as usize] = i as u32;
            self.heap.pop();
            self.sift_down(i);
            self.sift_up(i);
        } else {
            self.heap.pop();
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].0 <= self.heap[i].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.heap[r].0 < self.heap[l].0 {
                r
            } else {
                l
            };
            if self.heap[i].0 <= self.heap[c].0 {
                break;
            }
            self.swap(i, c);
            i = c;
        }
    }

    #[inline]
    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn behaves_like_a_sorted_map(ops in proptest::collection::vec((0u32..32, 0u64..1000, 0u8..3), 0..300)) {
            let mut h = IndexedHeap::with_ids(32);
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
}
