//! Set-associative flow buckets, as `sch_cake.c`'s `cake_hash`: a flow hash picks a set
//! of [`WAYS`] buckets; the flow takes the way already tagged with its hash, else the
//! first way its queue says is free (and tags it), else — every way busy — it shares a
//! way (a collision). Distinct flows thus share a queue only when more than eight busy
//! flows hash to one set, where a plain hash table shares one as soon as two flows land on
//! the same bucket.
//!
//! * The set is the hash's high bits times the number of sets (multiply-shift), so any
//!   bucket count that is a multiple of 8 works, and the hash's low bits pick the way on a
//!   collision.
//! * A tag is `hash | 1`; 0 marks a way never used.
//! * On a collision the shared way keeps its tag (CAKE re-tags it for the newcomer, which
//!   then takes it from its owner at the owner's next packet; sharing without re-tagging
//!   keeps a lookup free of writes and the owner's state in place).
//! * The tags of a set share one 64-byte cache line, apart from the queues: a lookup
//!   reads that line, compares all eight tags at once (no branch per way) and then touches
//!   the one queue it needs.
//!
//! Used by per-flow queuing ([`super::pfq`]) and flow queuing ([`super::fq`]); what "free"
//! means is theirs (an empty queue; for `fq` also one whose AQM state has decayed).
//! Memory: 8 bytes per bucket.

/// Ways per set (CAKE's `CAKE_SET_WAYS`).
pub const WAYS: usize = 8;

/// The tags of one set's ways, in one cache line.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct SetTags([u64; WAYS]);

/// Where a lookup put a flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Way {
    /// The bucket already tagged with the flow's hash.
    Hit(u32),
    /// A free bucket, now tagged with the flow's hash.
    Claimed(u32),
    /// Every way of the set busy with other flows: the bucket the flow shares (its tag
    /// unchanged).
    Collision(u32),
}

impl Way {
    /// The bucket.
    #[inline]
    pub fn bucket(self) -> u32 {
        match self {
            Way::Hit(i) | Way::Claimed(i) | Way::Collision(i) => i,
        }
    }
}

/// The tags of `buckets` buckets in sets of [`WAYS`].
#[derive(Clone)]
pub struct SetAssoc {
    tags: Vec<SetTags>,
    nsets: u64,
}

impl SetAssoc {
    /// Tags for `buckets` buckets, which must be a positive multiple of [`WAYS`]
    /// ([`SetAssoc::round`]).
    pub fn new(buckets: u32) -> Self {
        debug_assert!(buckets > 0 && (buckets as usize).is_multiple_of(WAYS));
        let nsets = buckets as usize / WAYS;
        SetAssoc {
            tags: vec![SetTags::default(); nsets],
            nsets: nsets as u64,
        }
    }

    /// The bucket count used for a requested one: a multiple of the ways.
    pub fn round(n: u32) -> u32 {
        n.div_ceil(WAYS as u32) * WAYS as u32
    }

    /// The bucket of flow hash `h`; `free(i)` says whether bucket `i` may be claimed.
    #[inline]
    pub fn lookup(&mut self, h: u64, mut free: impl FnMut(usize) -> bool) -> Way {
        let tag = h | 1;
        let set = ((h as u128 * self.nsets as u128) >> 64) as usize;
        let base = set * WAYS;
        // compare all ways at once; a tag is in at most one way
        let mut hit = 0u32;
        for (w, &t) in self.tags[set].0.iter().enumerate() {
            hit |= ((t == tag) as u32) << w;
        }
        if hit != 0 {
            return Way::Hit((base + hit.trailing_zeros() as usize) as u32);
        }
        for w in 0..WAYS {
            if free(base + w) {
                self.tags[set].0[w] = tag;
                return Way::Claimed((base + w) as u32);
            }
        }
        Way::Collision((base + (h as usize >> 3) % WAYS) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::mix64;

    #[test]
    fn hit_claim_and_collide() {
        let mut s = SetAssoc::new(8);
        let mut busy = [false; 8];
        let hashes: Vec<u64> = (0..9).map(mix64).collect();
        for (k, &h) in hashes.iter().take(8).enumerate() {
            let w = s.lookup(h, |i| !busy[i]);
            assert_eq!(w, Way::Claimed(k as u32));
            busy[w.bucket() as usize] = true;
        }
        for (k, &h) in hashes.iter().take(8).enumerate() {
            assert_eq!(
                s.lookup(h, |_| panic!("a hit asks nothing")),
                Way::Hit(k as u32)
            );
        }
        let w = s.lookup(hashes[8], |i| !busy[i]);
        assert_eq!(w, Way::Collision(((hashes[8] >> 3) % 8) as u32));
        // a freed way is claimed, and keeps its new tag
        busy[3] = false;
        assert_eq!(s.lookup(hashes[8], |i| !busy[i]), Way::Claimed(3));
        assert_eq!(s.lookup(hashes[8], |_| false), Way::Hit(3));
        // the flow that lost its way shares one, its tag nowhere
        let w = s.lookup(hashes[3], |_| false);
        assert_eq!(w, Way::Collision(((hashes[3] >> 3) % 8) as u32));
        assert_eq!(SetAssoc::round(1), 8);
        assert_eq!(SetAssoc::round(1025), 1032);
    }
}
