//! One shard's copies of the classes that span shards: what the [`super::Coordinator`]
//! reads from a worker's scheduler and what it writes back (`weir run --workers N`).
//!
//! A shard holds a copy of every shared class (the link, the classes above the
//! subscriber table: [`super::Plan`]). [`Copies::measure`] reads, from the shard's
//! [`LinkShare`], each copy's running [`Tally`] — bytes it sent, whether its subtree
//! holds packets, the assured rates of its children that hold packets (its weight), and
//! the bytes sent by its children while they held none. Tallies are cumulative, so the
//! coordinator can take them at its own pace: [`Tally::since`] gives the
//! [`super::ShardLoad`] of the interval between two of them. [`Copies::apply`] sets each
//! copy to its part of the class: the coordinator divides the class's ceil; the copy's
//! assured rate keeps the class's rate/ceil proportion, its bursts are 1 ms at its part
//! plus one full frame (the simulator's rule, tested against one scheduler in
//! `tests.rs`).
//!
//! Cost: a measurement with packets queued walks every class once
//! ([`LinkShare::subtree_held`]: ~2 ns a class), one with nothing queued only the
//! children of the shared classes; the coordinator asks once a millisecond.

use super::ShardLoad;
use crate::qdisc::Qdisc;
use crate::rate::Rate;
use crate::sched::linkshare::LinkShare;
use crate::time::Instant;

/// A copy's running totals since the shard's scheduler was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent_bytes: u64,
    pub unqueued_bytes: u64,
    pub backlogged: bool,
    pub weight: u64,
}

impl Tally {
    /// The load between `before` and this tally.
    pub fn since(&self, before: &Tally) -> ShardLoad {
        ShardLoad {
            sent_bytes: self.sent_bytes.saturating_sub(before.sent_bytes),
            backlogged: self.backlogged,
            weight: self.weight,
            unqueued_bytes: self.unqueued_bytes.saturating_sub(before.unqueued_bytes),
        }
    }
}

/// One shared class in this shard.
#[derive(Clone, Debug)]
pub struct ClassCopy {
    pub name: String,
    id: u32,
    /// The whole class's rate and ceil (as the policy gives them, across all shards).
    pub rate: Rate,
    pub ceil: Rate,
    /// Children: (class, assured bit/s, bytes sent at the last measurement).
    kids: Vec<(u32, u64, u64)>,
    unqueued: u64,
}

/// This shard's copies, in the order of the names they were made from.
#[derive(Clone, Debug, Default)]
pub struct Copies {
    copies: Vec<ClassCopy>,
    held: Vec<u32>,
}

impl Copies {
    /// The copies of the classes `names` in `ls` (before any [`Copies::apply`]: their
    /// rates are the whole class's). A name `ls` lacks is left out.
    pub fn new(ls: &LinkShare, names: &[String]) -> Copies {
        let mut copies: Vec<ClassCopy> = names
            .iter()
            .filter_map(|n| ls.class_id(n).map(|id| (n, id)))
            .map(|(n, id)| ClassCopy {
                name: n.clone(),
                id,
                rate: ls.rate(id),
                ceil: ls.ceil(id),
                kids: Vec::new(),
                unqueued: 0,
            })
            .collect();
        for k in 0..ls.num_classes() as u32 {
            let Some(p) = ls.parent(k) else { continue };
            if let Some(c) = copies.iter_mut().find(|c| c.id == p) {
                c.kids
                    .push((k, ls.rate(k).bps(), ls.class_stats(k).sent.bytes));
            }
        }
        Copies {
            copies,
            held: Vec::new(),
        }
    }

    pub fn copies(&self) -> &[ClassCopy] {
        &self.copies
    }

    /// Each copy's tally now, into `out` (one per copy).
    pub fn measure(&mut self, ls: &LinkShare, out: &mut Vec<Tally>) {
        out.clear();
        let queued = ls.len() > 0;
        if queued {
            ls.subtree_held(&mut self.held);
        }
        let held = &self.held;
        for c in &mut self.copies {
            let mut weight = 0;
            for (k, rate, before) in &mut c.kids {
                let sent = ls.class_stats(*k).sent.bytes;
                if queued && held[*k as usize] > 0 {
                    weight += *rate;
                } else {
                    c.unqueued += sent.saturating_sub(*before);
                }
                *before = sent;
            }
            out.push(Tally {
                sent_bytes: ls.class_stats(c.id).sent.bytes,
                unqueued_bytes: c.unqueued,
                backlogged: queued && held[c.id as usize] > 0,
                weight,
            });
        }
    }

    /// Give copy `i` the part `shares[i]` (bit/s) of its class's ceil, from `now`.
    pub fn apply(&self, ls: &mut LinkShare, shares: &[u64], now: Instant) {
        for (c, &share) in self.copies.iter().zip(shares) {
            let (ceil, rate) = part(c, share);
            let burst = |bps: u64| (bps / 8 / 1000) as u32 + 1514;
            ls.set_rates(
                c.id,
                Rate::with_framing(rate, c.rate.framing()),
                Rate::with_framing(ceil, c.ceil.framing()),
                burst(rate),
                burst(ceil),
                now,
            );
        }
    }
}

/// A copy's (ceil, rate) for its part `share` of the class's ceil: at least 1 bit/s
/// each, the rate in the class's rate/ceil proportion.
fn part(c: &ClassCopy, share: u64) -> (u64, u64) {
    let ceil = share.max(1);
    let whole = c.ceil.bps().max(1);
    let rate = (u128::from(ceil) * u128::from(c.rate.bps()) / u128::from(whole)) as u64;
    (ceil, rate.clamp(1, ceil))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Ctx;
    use crate::queue::fifo::Fifo;
    use crate::rng::Rng;
    use crate::sched::linkshare::ClassSpec;

    const MBIT: u64 = 1_000_000;

    fn spec(name: &str, parent: Option<u32>, rate: u64, ceil: u64, leaf: bool) -> ClassSpec {
        ClassSpec {
            name: name.into(),
            parent,
            rate: Rate::from_bps(rate),
            ceil: Rate::from_bps(ceil),
            burst: 15_140,
            cburst: 15_140,
            prio: 0,
            quantum: 1514,
            queue: leaf.then(|| Box::new(Fifo::packets(100)) as Box<dyn Qdisc>),
        }
    }

    /// link 10M ─ subs 4M/8M ─ a 1M, b 3M; link ─ other 6M
    fn tree() -> LinkShare {
        LinkShare::new(
            vec![
                spec("link", None, 10 * MBIT, 10 * MBIT, false),
                spec("subs", Some(0), 4 * MBIT, 8 * MBIT, false),
                spec("a", Some(1), MBIT, 8 * MBIT, true),
                spec("b", Some(1), 3 * MBIT, 8 * MBIT, true),
                spec("other", Some(0), 6 * MBIT, 10 * MBIT, true),
            ],
            4,
            Instant::ZERO,
        )
        .unwrap()
    }

    #[test]
    fn subtree_held_sums_the_leaves_below_each_class() {
        let mut ls = tree();
        let mut pool = Pool::new(16, 0);
        let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for class in [2, 2, 3] {
            let p = cx.pool.alloc().unwrap();
            cx.pool.meta_mut(p).len = 1000;
            cx.pool.meta_mut(p).class = class;
            ls.enqueue(p, &mut cx).unwrap();
        }
        let mut held = Vec::new();
        ls.subtree_held(&mut held);
        assert_eq!(held, vec![3, 3, 2, 1, 0]);
    }

    #[test]
    fn a_measurement_reads_backlog_weight_and_what_idle_children_sent() {
        let mut ls = tree();
        let mut pool = Pool::new(16, 0);
        let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
        let names: Vec<String> = ["link", "subs", "nowhere"].map(String::from).to_vec();
        let mut copies = Copies::new(&ls, &names);
        assert_eq!(
            copies.copies().len(),
            2,
            "a class the shard lacks is left out"
        );
        let mut t = Vec::new();
        copies.measure(&ls, &mut t);
        assert_eq!(t, vec![Tally::default(); 2], "nothing sent, nothing queued");
        // one 1000-byte packet for 'a' and one for 'other', both sent at once (the
        // buckets are full); then two more for 'a', which stay queued
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        let send = |ls: &mut LinkShare, class: u32, cx: &mut Ctx<'_>| {
            let p = cx.pool.alloc().unwrap();
            cx.pool.meta_mut(p).len = 1000;
            cx.pool.meta_mut(p).class = class;
            ls.enqueue(p, cx).unwrap();
        };
        send(&mut ls, 2, &mut cx);
        send(&mut ls, 4, &mut cx);
        while let Some(p) = ls.dequeue(&mut cx) {
            cx.pool.free(p);
        }
        send(&mut ls, 2, &mut cx);
        send(&mut ls, 2, &mut cx);
        copies.measure(&ls, &mut t);
        let before = t.clone();
        // link: 2000 bytes sent; backlogged (a's two); weight = subs' 4 Mbit/s (the child
        // holding packets); 'other' sent 1000 while holding none
        assert_eq!(
            t[0],
            Tally {
                sent_bytes: 2000,
                unqueued_bytes: 1000,
                backlogged: true,
                weight: 4 * MBIT
            }
        );
        // subs: 1000 sent, backlogged by a (weight 1 Mbit/s), b sent nothing
        assert_eq!(
            t[1],
            Tally {
                sent_bytes: 1000,
                unqueued_bytes: 0,
                backlogged: true,
                weight: MBIT
            }
        );
        while let Some(p) = ls.dequeue(&mut cx) {
            cx.pool.free(p);
        }
        copies.measure(&ls, &mut t);
        // the interval: 2000 bytes more, drained; what a child sent counts as unqueued
        // when it holds nothing at the look
        let load = t[0].since(&before[0]);
        assert_eq!(
            load,
            ShardLoad {
                sent_bytes: 2000,
                backlogged: false,
                weight: 0,
                unqueued_bytes: 2000
            }
        );
        assert_eq!(t[1].since(&before[1]).unqueued_bytes, 2000);
    }

    #[test]
    fn applying_a_share_divides_the_ceil_and_keeps_the_rate_in_proportion() {
        let mut ls = tree();
        let names: Vec<String> = ["link", "subs"].map(String::from).to_vec();
        let copies = Copies::new(&ls, &names);
        // subs: rate 4M of ceil 8M; a part of 2M of the ceil → rate 1M
        copies.apply(&mut ls, &[5 * MBIT, 2 * MBIT], Instant::ZERO);
        assert_eq!((ls.rate(0).bps(), ls.ceil(0).bps()), (5 * MBIT, 5 * MBIT));
        assert_eq!((ls.rate(1).bps(), ls.ceil(1).bps()), (MBIT, 2 * MBIT));
        // the whole is remembered: a later part is of the class, not of the last part
        copies.apply(&mut ls, &[10 * MBIT, 0], Instant::ZERO);
        assert_eq!(ls.ceil(0).bps(), 10 * MBIT);
        assert_eq!((ls.rate(1).bps(), ls.ceil(1).bps()), (1, 1), "never zero");
    }
}
