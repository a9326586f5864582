//! An ordered round-robin set over slots `0..n`: a bitmap of members and a cursor.
//!
//! `current()` is the first member at or after the cursor (wrapping), found with
//! `trailing_zeros` one word at a time; `advance(slot)` moves the cursor just past a slot.
//! A member that leaves and comes back keeps its place in the order (the position is its
//! slot, not its arrival time), so a class that briefly stops borrowing does not lose its
//! turn — the property Linux HTB gets from its id-ordered rb-trees. Insert and remove are
//! O(1); `current` is O(n/64) in the worst case and O(1) when members are dense.
//!
//! Slots 0..64 live in a word inside the set (no pointer to follow: a scheduler's sets
//! are usually that small and are read on every packet); slots from 64 on, if any, in a
//! heap-allocated array. 40 bytes plus 8 per 64 slots beyond the first 64.
//!
//! Invariant: `count` equals the number of set bits; bits at or beyond `n` are clear.

#[derive(Clone, Debug, Default)]
pub struct RrSet {
    /// Slots 0..64.
    low: u64,
    /// Slots 64.., 64 a word (empty when `n <= 64`).
    high: Box<[u64]>,
    n: u32,
    cursor: u32,
    count: u32,
}

impl RrSet {
    pub fn new(n: usize) -> Self {
        RrSet {
            low: 0,
            high: vec![0; n.saturating_sub(64).div_ceil(64)].into_boxed_slice(),
            n: n as u32,
            cursor: 0,
            count: 0,
        }
    }
    /// Members.
    #[inline]
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Slots (`n`).
    pub fn slots(&self) -> usize {
        self.n as usize
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Word `i` of the bitmap (slots `64 i .. 64 i + 64`).
    #[inline]
    fn word(&self, i: usize) -> u64 {
        if i == 0 {
            self.low
        } else {
            self.high[i - 1]
        }
    }
    #[inline]
    fn word_mut(&mut self, i: usize) -> &mut u64 {
        if i == 0 {
            &mut self.low
        } else {
            &mut self.high[i - 1]
        }
    }
    #[inline]
    pub fn contains(&self, slot: u32) -> bool {
        self.word((slot / 64) as usize) & (1 << (slot % 64)) != 0
    }
    #[inline]
    pub fn insert(&mut self, slot: u32) {
        let w = self.word_mut((slot / 64) as usize);
        let b = 1u64 << (slot % 64);
        debug_assert!(*w & b == 0, "slot {slot} inserted twice");
        *w |= b;
        self.count += 1;
    }
    #[inline]
    pub fn remove(&mut self, slot: u32) {
        let w = self.word_mut((slot / 64) as usize);
        let b = 1u64 << (slot % 64);
        debug_assert!(*w & b != 0, "slot {slot} removed but absent");
        *w &= !b;
        self.count -= 1;
    }

    /// The member whose turn it is: the first at or after the cursor, wrapping.
    #[inline]
    pub fn current(&self) -> Option<u32> {
        if self.count == 0 {
            return None;
        }
        if self.high.is_empty() {
            // one word (the cursor is below n <= 64): members from the cursor on, else
            // the first member
            let above = self.low & (!0u64 << self.cursor);
            let w = if above != 0 { above } else { self.low };
            return Some(w.trailing_zeros());
        }
        let words = self.high.len() + 1;
        let start = (self.cursor / 64) as usize;
        // the cursor's own word, bits at or above the cursor
        let first = self.word(start) & (!0u64 << (self.cursor % 64));
        if first != 0 {
            return Some((start * 64) as u32 + first.trailing_zeros());
        }
        for k in 1..=words {
            let i = (start + k) % words;
            let w = if i == start {
                // wrapped all the way: the bits below the cursor
                self.word(i) & !(!0u64 << (self.cursor % 64))
            } else {
                self.word(i)
            };
            if w != 0 {
                return Some((i * 64) as u32 + w.trailing_zeros());
            }
        }
        None
    }

    /// Give the next turn to the member after `slot`.
    #[inline]
    pub fn advance(&mut self, slot: u32) {
        self.cursor = if slot + 1 >= self.n { 0 } else { slot + 1 };
    }

    /// Members in slot order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.low)
            .chain(self.high.iter().copied())
            .enumerate()
            .flat_map(|(i, w)| {
                let mut w = w;
                std::iter::from_fn(move || {
                    if w == 0 {
                        return None;
                    }
                    let b = w.trailing_zeros();
                    w &= w - 1;
                    Some(i as u32 * 64 + b)
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_robin_in_slot_order_and_keeps_place() {
        let mut s = RrSet::new(130);
        for x in [3, 64, 129] {
            s.insert(x);
        }
        let mut order = vec![];
        for _ in 0..6 {
            let c = s.current().unwrap();
            order.push(c);
            s.advance(c);
        }
        assert_eq!(order, [3, 64, 129, 3, 64, 129]);
        // 64 leaves while it is its turn, comes back: its turn is kept
        assert_eq!(s.current(), Some(3));
        s.advance(3);
        s.remove(64);
        assert_eq!(s.current(), Some(129));
        s.insert(64);
        assert_eq!(s.current(), Some(64));
        assert_eq!(s.iter().collect::<Vec<_>>(), [3, 64, 129]);
    }

    proptest! {
        #[test]
        fn current_is_first_member_at_or_after_cursor(n in 1usize..300, ops in proptest::collection::vec((0u8..3, 0u32..300), 0..200)) {
            let mut s = RrSet::new(n);
            let mut model = std::collections::BTreeSet::new();
            let mut cursor = 0u32;
            for (op, x) in ops {
                let x = x % n as u32;
                match op {
                    0 => if model.insert(x) { s.insert(x) },
                    1 => if model.remove(&x) { s.remove(x) },
                    _ => { s.advance(x); cursor = if x + 1 >= n as u32 { 0 } else { x + 1 }; }
                }
                let want = model.range(cursor..).next().or_else(|| model.iter().next()).copied();
                prop_assert_eq!(s.current(), want);
                prop_assert_eq!(s.len(), model.len());
            }
        }
    }
}
