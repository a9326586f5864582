//! A path whose delay and loss change over time, and that goes down: delay and loss
//! **schedules** and **outages** beside the rate's (`capacity.rs`), for handovers,
//! route changes and coverage gaps (issue 28's time-varying paths).
//!
//! Times are ns from the link's origin — its first frame, as a rate schedule's — so a
//! run replays the same path whenever the traffic starts.
//!
//! * Delay schedule `[(t_0 = 0, d_0), (t_1, d_1), …]`: a frame whose serialisation ends
//!   at `t ∈ [t_i, t_{i+1})` gets the base delay `d_i` (jitter on top, as with a fixed
//!   delay); the last holds for ever. With the FIFO delay line (`reorder = false`) a step
//!   down makes the frames behind wait for those ahead (no reordering, as one queue on
//!   one path); with `reorder = true` the frames after the step overtake the ones still
//!   in flight — a handover to a shorter path, with its reordering burst.
//! * Loss schedule `[(t_0 = 0, model_0), …]`: a frame arriving at `t ∈ [t_i, t_{i+1})` meets
//!   `model_i`; the model's state restarts when its kind changes (as a reconfiguration).
//! * Outages `[(s, e), …]` (sorted, disjoint, `s < e`): the link is down in `[s, e)`.
//!   Nothing is serialised then: a frame that would start in an outage starts at its end,
//!   one that could not finish before an outage starts after it (the frames wait in the
//!   queue, whose limit drops what does not fit: a link down, not a blackhole; for loss
//!   instead, a loss schedule of 100 % for the interval). A link without a rate holds the
//!   frames that arrive in an outage until its end.
//!
//! Invariants: schedules start at 0 with increasing times; delays ≤ 1 hour; lookups are
//! binary searches (O(log n) per frame, no allocation).

use std::sync::Arc;

use super::{EmuError, LossModel};

/// The latest time a schedule or an outage may name: a year (ns).
pub const MAX_TIME_NS: u64 = 365 * 86_400 * 1_000_000_000;

/// Delay and loss schedules and outages; see the module comment. Empty by default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Path {
    /// (start ns, delay ns), the first at 0, starts increasing.
    pub delay: Option<Arc<Vec<(u64, u64)>>>,
    /// (start ns, loss model), the first at 0, starts increasing.
    pub loss: Option<Arc<Vec<(u64, LossModel)>>>,
    /// (start ns, end ns): sorted, disjoint, start < end.
    pub outages: Arc<Vec<(u64, u64)>>,
}

/// Check a schedule's times: the first at 0, increasing.
fn check_times<T>(what: &str, points: &[(u64, T)]) -> Result<(), EmuError> {
    let bad = |m: String| Err(EmuError::Schedule(format!("{what}: {m}")));
    match points.first() {
        None => return bad("needs at least one point".into()),
        Some(p) if p.0 != 0 => return bad("must start at 0s".into()),
        _ => {}
    }
    if let Some(w) = points.windows(2).find(|w| w[1].0 <= w[0].0) {
        return bad(format!(
            "times must increase ({} ns is not after {} ns)",
            w[1].0, w[0].0
        ));
    }
    Ok(())
}

/// The index of the segment holding `t` in a schedule starting at 0.
#[inline]
fn segment<T>(points: &[(u64, T)], t: u64) -> usize {
    points.partition_point(|p| p.0 <= t).saturating_sub(1)
}

impl Path {
    pub fn is_empty(&self) -> bool {
        self.delay.is_none() && self.loss.is_none() && self.outages.is_empty()
    }

    pub fn validate(&self) -> Result<(), EmuError> {
        let times = self
            .delay
            .iter()
            .flat_map(|d| d.iter().map(|p| p.0))
            .chain(self.loss.iter().flat_map(|l| l.iter().map(|p| p.0)))
            .chain(self.outages.iter().map(|o| o.1));
        if let Some(t) = times.into_iter().find(|&t| t > MAX_TIME_NS) {
            return Err(EmuError::Schedule(format!(
                "{t} ns is more than a year from the link's first frame"
            )));
        }
        if let Some(d) = &self.delay {
            check_times("delay schedule", d)?;
            if let Some(&(t, ns)) = d.iter().find(|p| p.1 > super::dist::MAX_DELAY_NS) {
                return Err(EmuError::Schedule(format!(
                    "delay schedule at {t} ns: {ns} ns is more than 1 hour"
                )));
            }
        }
        if let Some(l) = &self.loss {
            check_times("loss schedule", l)?;
            for (_, m) in l.iter() {
                m.validate()?;
            }
        }
        if let Some(&(s, e)) = self.outages.iter().find(|o| o.0 >= o.1) {
            return Err(EmuError::Schedule(format!(
                "outage from {s} ns to {e} ns: the end must come after the start"
            )));
        }
        if let Some(w) = self.outages.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(EmuError::Schedule(format!(
                "outages must be in order and apart (one from {} ns starts before the one before ends at {} ns)",
                w[1].0, w[0].1
            )));
        }
        Ok(())
    }

    /// The base delay at `t` (ns from the origin), if scheduled.
    #[inline]
    pub fn delay_at(&self, t: u64) -> Option<u64> {
        self.delay.as_ref().map(|d| d[segment(d, t)].1)
    }

    /// The loss segment at `t` and its model, if scheduled.
    #[inline]
    pub fn loss_at(&self, t: u64) -> Option<(usize, &LossModel)> {
        self.loss.as_ref().map(|l| {
            let i = segment(l, t);
            (i, &l[i].1)
        })
    }

    /// The first instant at or after `t` at which the link is up.
    #[inline]
    pub fn up_at(&self, t: u64) -> u64 {
        let i = self.outages.partition_point(|o| o.1 <= t);
        match self.outages.get(i) {
            Some(&(s, e)) if s <= t => e,
            _ => t,
        }
    }

    /// The start of the first outage that begins after `t` and before `end` (a frame
    /// sent in `[t, end)` would be cut by it).
    #[inline]
    pub fn down_within(&self, t: u64, end: u64) -> Option<u64> {
        let i = self.outages.partition_point(|o| o.0 <= t);
        self.outages.get(i).map(|o| o.0).filter(|&s| s < end)
    }

    /// Total outage time (ns), for descriptions.
    pub fn outage_ns(&self) -> u64 {
        self.outages.iter().map(|o| o.1 - o.0).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn path() -> Path {
        Path {
            delay: Some(Arc::new(vec![(0, 20 * MS), (30 * MS, 80 * MS)])),
            loss: Some(Arc::new(vec![
                (0, LossModel::None),
                (10 * MS, LossModel::Bernoulli { p: 0.05 }),
            ])),
            outages: Arc::new(vec![(5 * MS, 7 * MS), (7 * MS + 1, 9 * MS)]),
        }
    }

    /// Lookups by hand: the delay is 20 ms before 30 ms and 80 ms from it; the loss model
    /// changes at 10 ms; the link is down in [5, 7) and [7 ms + 1 ns, 9) ms.
    #[test]
    fn lookups_by_hand() {
        let p = path();
        p.validate().unwrap();
        assert_eq!(p.delay_at(0), Some(20 * MS));
        assert_eq!(p.delay_at(30 * MS - 1), Some(20 * MS));
        assert_eq!(p.delay_at(30 * MS), Some(80 * MS));
        assert_eq!(p.delay_at(u64::MAX), Some(80 * MS));
        assert_eq!(p.loss_at(9 * MS).unwrap().0, 0);
        assert_eq!(
            p.loss_at(10 * MS).unwrap(),
            (1, &LossModel::Bernoulli { p: 0.05 })
        );
        assert_eq!(p.up_at(4 * MS), 4 * MS);
        assert_eq!(p.up_at(5 * MS), 7 * MS);
        assert_eq!(p.up_at(7 * MS), 7 * MS, "up for 1 ns between the two");
        assert_eq!(p.up_at(8 * MS), 9 * MS);
        assert_eq!(p.up_at(9 * MS), 9 * MS);
        assert_eq!(p.down_within(4 * MS, 6 * MS), Some(5 * MS));
        assert_eq!(p.down_within(4 * MS, 5 * MS), None, "ends as it starts");
        assert_eq!(p.down_within(7 * MS, 8 * MS), Some(7 * MS + 1));
        assert_eq!(p.down_within(9 * MS, u64::MAX), None);
        assert_eq!(p.outage_ns(), 4 * MS - 1);
        assert!(Path::default().is_empty());
    }

    #[test]
    fn bad_paths_are_explained() {
        let mut p = path();
        p.delay = Some(Arc::new(vec![(5, 1)]));
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("must start at 0s"));
        p.delay = Some(Arc::new(vec![(0, 1), (0, 2)]));
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("must increase"));
        p.delay = Some(Arc::new(vec![(0, 4_000 * 1_000 * MS)]));
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("more than 1 hour"));
        let mut p = path();
        p.outages = Arc::new(vec![(3, 3)]);
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("after the start"));
        p.outages = Arc::new(vec![(1, 5), (4, 9)]);
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .contains("in order and apart"));
        let mut p = path();
        p.loss = Some(Arc::new(vec![(0, LossModel::Bernoulli { p: 2.0 })]));
        assert!(p.validate().is_err());
    }
}
