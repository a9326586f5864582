//! Slotted delivery: netem's `slot MIN [MAX] [packets N] [bytes B]` and `slot
//! distribution DIST DELAY JITTER [packets N] [bytes B]` — packets leave the link only in
//! transmission opportunities ("slots"), a crude model of bursty MACs (Wi-Fi aggregation,
//! DOCSIS grants, LTE scheduling).
//!
//! Model (Linux `sch_netem.c`: `get_slot_next`, the slot test in `netem_dequeue`),
//! evaluated on the packet at the head of the delay line, ready (released by the delay
//! line) at `r`:
//! 1. A slot opens at `next` with a budget of `packets` packets and `bytes` bytes (each
//!    unlimited when not given). The first slot opens at time 0.
//! 2. If `next < r` (the slot opened before the head was ready, and would idle), it is
//!    abandoned: a new slot opens at `r + gap` with a fresh budget.
//! 3. Otherwise the head leaves at `max(r, next) = next`; its length comes off the
//!    budget, and when either budget reaches 0 or below, the next slot opens at the
//!    departure `+ gap`.
//!
//! `gap` is drawn per slot: uniform on `[MIN, MAX)` ns (`MIN + (MAX − MIN)·U`, one draw;
//! MIN when MAX = MIN), or `max(0, DELAY + jitter)` from a [`Jitter`] distribution (netem's
//! `tabledist`, uncorrelated). So with `packets N` and a backlog, packets leave in bursts
//! of exactly N at slot openings, one gap apart; with `bytes B`, in bursts of the fewest
//! packets whose lengths reach B.
//!
//! netem takes the reference times of rules 2 and 3 from whenever its dequeue runs (the
//! watchdog, the next enqueue); weir takes them from the packets' own times (`r`, the
//! departure), so the pattern does not depend on when the driver polls. Packets that
//! netem's `reorder` sends at once skip the slots, as netem's head-of-queue list does.
//!
//! Parameters: `Slot { gap, packets, bytes }` ([`SlotGap::Uniform`] `{ min, max }` ns with
//! `min <= max <= 1 h`, or [`SlotGap::Dist`] `{ delay, jitter }`); `packets`/`bytes` >= 1
//! when given. Statistics: the link counts the slots opened (`EmuCounters::slots`).
//! Invariants: a packet never leaves before it is ready nor before its slot opens; no
//! allocation; no panic (times saturate).

use super::dist::{delay_with, Jitter, MAX_DELAY_NS};
use super::EmuError;
use crate::rng::Rng;

/// How long from one slot to the next.
#[derive(Clone, Debug, PartialEq)]
pub enum SlotGap {
    /// Uniform on `[min, max)` ns.
    Uniform { min: u64, max: u64 },
    /// `max(0, delay + jitter sample)` ns.
    Dist { delay: u64, jitter: Jitter },
}

/// Slotted delivery (see the module comment).
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub gap: SlotGap,
    /// Packets per slot; `None` = unlimited.
    pub packets: Option<u32>,
    /// Bytes per slot (`Meta::len`); `None` = unlimited.
    pub bytes: Option<u64>,
}

impl Slot {
    /// Check the parameters: `min <= max <= 1 h`, a valid distribution, budgets >= 1.
    pub fn validate(&self) -> Result<(), EmuError> {
        match &self.gap {
            SlotGap::Uniform { min, max } => {
                if min > max {
                    return Err(EmuError::SlotMinMax {
                        min: *min,
                        max: *max,
                    });
                }
                if *max > MAX_DELAY_NS {
                    return Err(EmuError::TooLong {
                        what: "slot delay",
                        ns: *max,
                    });
                }
            }
            SlotGap::Dist { delay, jitter } => {
                if *delay > MAX_DELAY_NS {
                    return Err(EmuError::TooLong {
                        what: "slot delay",
                        ns: *delay,
                    });
                }
                jitter.validate()?;
            }
        }
        if self.packets == Some(0) || self.bytes == Some(0) {
            return Err(EmuError::SlotBudget);
        }
        Ok(())
    }

    /// One gap between slots, ns.
    #[inline]
    pub fn draw_gap(&self, rng: &mut Rng) -> u64 {
        match &self.gap {
            SlotGap::Uniform { min, max } => min + rng.below(max.saturating_sub(*min)),
            SlotGap::Dist { delay, jitter } => delay_with(*delay, jitter.sample(rng)),
        }
    }

    /// The mean gap, ns (the jitter's mean included, the clamp at 0 not).
    pub fn mean_gap(&self) -> f64 {
        match &self.gap {
            SlotGap::Uniform { min, max } => (*min as f64 + *max as f64) / 2.0,
            SlotGap::Dist { delay, jitter } => *delay as f64 + jitter.mean(),
        }
    }
}

/// The slot process of one link.
#[derive(Clone, Debug)]
pub struct SlotState {
    /// When the current (or next) slot opens, ns.
    next: u64,
    packets_left: i64,
    bytes_left: i64,
}

impl SlotState {
    /// The first slot opens at 0 with a full budget.
    pub fn new(slot: &Slot) -> Self {
        let mut s = SlotState {
            next: 0,
            packets_left: 0,
            bytes_left: 0,
        };
        s.refill(slot);
        s
    }

    fn refill(&mut self, slot: &Slot) {
        self.packets_left = slot.packets.map_or(i64::MAX, i64::from);
        self.bytes_left = slot
            .bytes
            .map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    }

    /// When the current or next slot opens, ns.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The earliest a head ready at `ready` can leave (before rule 2 is applied, which
    /// happens at `ready`).
    #[inline]
    pub fn gate(&self, ready: u64) -> u64 {
        self.next.max(ready)
    }

    /// Rule 2 at time `ready` (the head's): abandon a slot that opened before the head
    /// was ready. Returns true when a new slot was drawn.
    #[inline]
    pub fn expire(&mut self, slot: &Slot, ready: u64, rng: &mut Rng) -> bool {
        if self.next < ready {
            self.next = ready.saturating_add(slot.draw_gap(rng));
            self.refill(slot);
            true
        } else {
            false
        }
    }

    /// Rule 3: the head (`len` bytes) leaves at `at`; returns true when that exhausted
    /// the slot and a new one was drawn.
    #[inline]
    pub fn take(&mut self, slot: &Slot, at: u64, len: u32, rng: &mut Rng) -> bool {
        self.packets_left -= 1;
        self.bytes_left -= i64::from(len);
        if self.packets_left <= 0 || self.bytes_left <= 0 {
            self.next = at.saturating_add(slot.draw_gap(rng));
            self.refill(slot);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Departures of packets ready at `ready` (ascending) through a slot process.
    fn departures(slot: &Slot, ready: &[(u64, u32)], seed: u64) -> Vec<u64> {
        let mut st = SlotState::new(slot);
        let mut rng = Rng::new(seed);
        let mut out = Vec::new();
        for &(r, len) in ready {
            st.expire(slot, r, &mut rng);
            let at = st.gate(r);
            out.push(at);
            st.take(slot, at, len, &mut rng);
        }
        out
    }

    const MS: u64 = 1_000_000;

    /// `slot 10ms 10ms packets 4`: 10 packets ready at 0 leave 4 at 0, 4 at 10 ms, 2 at
    /// 20 ms.
    #[test]
    fn packets_per_slot_by_hand() {
        let slot = Slot {
            gap: SlotGap::Uniform {
                min: 10 * MS,
                max: 10 * MS,
            },
            packets: Some(4),
            bytes: None,
        };
        let d = departures(&slot, &[(0, 100); 10], 1);
        assert_eq!(d, [0, 0, 0, 0, 10, 10, 10, 10, 20, 20].map(|x| x * MS));
        // A packet ready at 25 ms, after the slot at 20 ms opened: a new slot from 25.
        let mut ready = vec![(0, 100); 10];
        ready.push((25 * MS, 100));
        assert_eq!(departures(&slot, &ready, 1)[10], 35 * MS);
    }

    /// `bytes 3000`: 1000-byte packets leave 3 per slot (the third takes the budget to 0);
    /// 1200-byte ones 3 too (3600 >= 3000 on the third).
    #[test]
    fn bytes_per_slot_by_hand() {
        let slot = Slot {
            gap: SlotGap::Uniform { min: MS, max: MS },
            packets: None,
            bytes: Some(3000),
        };
        let d = departures(&slot, &[(0, 1000); 7], 1);
        assert_eq!(d, [0, 0, 0, 1, 1, 1, 2].map(|x| x * MS));
        let d = departures(&slot, &[(0, 1200); 4], 1);
        assert_eq!(d, [0, 0, 0, 1].map(|x| x * MS));
    }

    /// Uniform gaps between 1 and 3 ms: mean 2 ms; every packet waits for a slot.
    #[test]
    fn uniform_gap_mean_and_bounds() {
        let slot = Slot {
            gap: SlotGap::Uniform {
                min: MS,
                max: 3 * MS,
            },
            packets: Some(1),
            bytes: None,
        };
        let mut rng = Rng::new(3);
        let n = 100_000;
        let gaps: Vec<u64> = (0..n).map(|_| slot.draw_gap(&mut rng)).collect();
        assert!(gaps.iter().all(|&g| (MS..3 * MS).contains(&g)));
        let mean = gaps.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean / slot.mean_gap() - 1.0).abs() < 0.01, "{mean}");
        // one packet per slot, all ready at 0: departures one gap apart
        let d = departures(&slot, &[(0, 100); 1000], 4);
        assert!(d.windows(2).all(|w| (MS..3 * MS).contains(&(w[1] - w[0]))));
    }

    #[test]
    fn a_distribution_gap_is_never_negative() {
        let slot = Slot {
            gap: SlotGap::Dist {
                delay: MS,
                jitter: Jitter::Normal { sigma: 5 * MS },
            },
            packets: Some(2),
            bytes: None,
        };
        slot.validate().unwrap();
        let mut rng = Rng::new(5);
        let gaps: Vec<u64> = (0..10_000).map(|_| slot.draw_gap(&mut rng)).collect();
        assert!(gaps.contains(&0));
        assert!(gaps.iter().any(|&g| g > 5 * MS));
    }

    #[test]
    fn bad_slots_are_refused() {
        let s = |min, max, packets| Slot {
            gap: SlotGap::Uniform { min, max },
            packets,
            bytes: None,
        };
        assert_eq!(
            s(2, 1, None).validate(),
            Err(EmuError::SlotMinMax { min: 2, max: 1 })
        );
        assert_eq!(s(1, 2, Some(0)).validate(), Err(EmuError::SlotBudget));
        assert!(s(0, MAX_DELAY_NS + 1, None).validate().is_err());
        assert!(s(0, 0, Some(1)).validate().is_ok());
    }
}
