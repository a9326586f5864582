//! Time-varying capacity for the emulator's serialiser: links whose rate changes (an ADSL
//! line retraining, LTE, Wi-Fi, Starlink), as a **rate schedule** or a **delivery
//! trace**.
//!
//! * Schedule: `[(t_0 = 0, r_0), (t_1, r_1), …]`, times in ns from the link's origin,
//!   strictly increasing, rates in bit/s (≥ 8, frames counted by the link's framing as for
//!   a fixed rate); the rate is `r_i` during `[t_i, t_{i+1})` and the last rate holds for ever. A
//!   frame that starts in one segment and ends in a later one is sent at each segment's
//!   rate in turn (bits are conserved; picosecond arithmetic as the fixed-rate serialiser).
//! * Trace: Mahimahi's format (Netravali et al., "Mahimahi", USENIX ATC 2015): one line
//!   per delivery opportunity, the millisecond (from the origin) at which 1500 bytes may
//!   leave; several lines with the same millisecond are several opportunities. The trace
//!   repeats with its last timestamp as its period, as `mm-link` does (or, played once as
//!   `mm-link --once`, delivers nothing after its last opportunity). A frame leaves at
//!   the opportunity that completes its bytes; an opportunity that finds the link idle is
//!   lost, and the bytes of one that a frame does not use are used by the next frame (a
//!   frame may span opportunities: byte accounting, as `mm-link`'s). The bytes a frame
//!   takes are `mm-link`'s: its IP packet, the frame less its 14-byte Ethernet header,
//!   with the link's framing applied to the frame ([`Capacity::charge`]), so that a
//!   full-size 1514-byte frame takes exactly one opportunity as a 1500-byte packet does in
//!   `mm-link`.
//!
//! The origin is the arrival of the first frame the link carries (`weir emu` and the lab
//! start their traffic after the link is up).
//!
//! Invariants: a frame never ends before it starts; for a schedule, the bits sent over
//! any interval equal the integral of the rate over the time the serialiser was busy;
//! for a trace, at most 1500 bytes leave per opportunity.

use std::sync::Arc;

use crate::framing::Framing;
use crate::rate::Rate;

/// Bytes one trace opportunity delivers.
pub const TRACE_MTU: u64 = 1500;

/// The Ethernet header a trace does not count (`mm-link` carries IP packets).
const MAC_HEADER: u64 = crate::framing::MAC_HEADER as u64;

/// A serialisation that never ends: a trace played once has no opportunity left.
pub const NEVER_PS: u128 = u64::MAX as u128 * 1000;

/// A time-varying capacity; see the module comment.
#[derive(Clone, Debug, PartialEq)]
pub enum Capacity {
    /// (start ns from the origin, rate bit/s), the first at 0, starts increasing.
    Schedule(Arc<Vec<(u64, u64)>>),
    /// Opportunity times in ms from the origin, non-decreasing, the last > 0 (the period).
    Trace(Arc<Vec<u64>>),
}

impl Capacity {
    /// Check a schedule; the message says what is wrong.
    pub fn schedule(points: Vec<(u64, u64)>) -> Result<Capacity, String> {
        match points.first() {
            None => return Err("a rate schedule needs at least one point".into()),
            Some(&(t, _)) if t != 0 => {
                return Err("a rate schedule must start at 0s".into());
            }
            _ => {}
        }
        if let Some(w) = points.windows(2).find(|w| w[1].0 <= w[0].0) {
            return Err(format!(
                "rate schedule times must increase ({} ns is not after {} ns)",
                w[1].0, w[0].0
            ));
        }
        if let Some(&(t, r)) = points.iter().find(|p| p.1 < 8) {
            return Err(format!(
                "rate schedule at {t} ns: {r} bit/s is below 8 bit/s"
            ));
        }
        Ok(Capacity::Schedule(Arc::new(points)))
    }

    /// Parse a Mahimahi trace (one millisecond timestamp per line; blank lines and lines
    /// starting with `#` are skipped). Errors name the line.
    pub fn parse_trace(text: &str) -> Result<Capacity, String> {
        let mut ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let t: u64 = l.parse().map_err(|_| {
                format!(
                    "line {}: '{l}' is not a millisecond timestamp (a whole number)",
                    i + 1
                )
            })?;
            if ms.last().is_some_and(|&p| t < p) {
                return Err(format!(
                    "line {}: {t} ms is before the line above ({} ms): timestamps must not decrease",
                    i + 1,
                    ms.last().unwrap()
                ));
            }
            ms.push(t);
        }
        match ms.last() {
            None => Err("the trace has no delivery opportunity".into()),
            Some(0) => {
                Err("the trace's last timestamp must be above 0 ms (it is the period)".into())
            }
            Some(_) => Ok(Capacity::Trace(Arc::new(ms))),
        }
    }

    /// The bytes a frame of `len` bytes takes from this capacity: a schedule counts the
    /// frame as a fixed rate does (`framing`), a trace counts its IP packet as `mm-link`
    /// does (the framed length less the 14-byte Ethernet header; at least 1 byte).
    #[inline]
    pub fn charge(&self, framing: Framing, len: u32) -> u64 {
        let framed = u64::from(framing.wire_len(len));
        match self {
            Capacity::Schedule(_) => framed,
            Capacity::Trace(_) => framed.saturating_sub(MAC_HEADER).max(1),
        }
    }

    /// A trace's period in ms (its last timestamp); `None` for a schedule.
    pub fn period_ms(&self) -> Option<u64> {
        match self {
            Capacity::Schedule(_) => None,
            Capacity::Trace(ms) => ms.last().copied(),
        }
    }

    /// The highest rate (bit/s) the capacity reaches: a schedule's largest rate, a trace's
    /// busiest millisecond × 1500 B × 8 × 1000 (for the default queue size).
    pub fn peak_bps(&self) -> u64 {
        match self {
            Capacity::Schedule(p) => p.iter().map(|p| p.1).max().unwrap_or(8),
            Capacity::Trace(ms) => {
                let mut best = 0u64;
                let mut i = 0;
                while i < ms.len() {
                    let j = ms[i..].iter().take_while(|&&t| t == ms[i]).count();
                    best = best.max(j as u64);
                    i += j;
                }
                best * TRACE_MTU * 8 * 1000
            }
        }
    }

    /// The mean rate over the schedule's points (up to the last) or over one trace period,
    /// bit/s (for reports).
    pub fn mean_bps(&self) -> u64 {
        match self {
            Capacity::Schedule(p) => {
                let end = p.last().map_or(0, |l| l.0);
                if end == 0 {
                    return p[0].1;
                }
                let bits: u128 = p
                    .windows(2)
                    .map(|w| (w[1].0 - w[0].0) as u128 * w[0].1 as u128)
                    .sum();
                (bits / end as u128) as u64
            }
            Capacity::Trace(ms) => {
                let period = *ms.last().unwrap_or(&1);
                ms.len() as u64 * TRACE_MTU * 8 * 1000 / period.max(1)
            }
        }
    }
}

/// The serialiser's position in a [`Capacity`]: for a schedule, the segment the last
/// frame ended in (a hint); for a trace, the next opportunity with bytes left and the
/// bytes of it already used.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cursor {
    index: u64,
    used: u64,
}

/// Picoseconds in a millisecond.
const MS_PS: u128 = 1_000_000_000;

impl Cursor {
    /// Serialise a frame of `len` bytes (counted as [`Capacity::charge`] says) that may
    /// start at `start_ps` (ps from the origin): when its last bit leaves, ps from the
    /// origin. A trace played `once` has no opportunity after its last line: a frame that
    /// needs one never ends ([`NEVER_PS`]).
    pub fn serialise(
        &mut self,
        cap: &Capacity,
        start_ps: u128,
        len: u32,
        framing: Framing,
        once: bool,
    ) -> u128 {
        match cap {
            Capacity::Schedule(points) => self.through_schedule(points, start_ps, len, framing),
            Capacity::Trace(ms) => {
                let bytes = cap.charge(framing, len);
                self.through_trace(ms, start_ps, bytes, once)
            }
        }
    }

    fn through_schedule(
        &mut self,
        points: &[(u64, u64)],
        start_ps: u128,
        len: u32,
        framing: Framing,
    ) -> u128 {
        let ps = |ns: u64| ns as u128 * 1000;
        // the segment holding `start`
        let mut i = (self.index as usize).min(points.len() - 1);
        while i > 0 && ps(points[i].0) > start_ps {
            i -= 1;
        }
        while i + 1 < points.len() && ps(points[i + 1].0) <= start_ps {
            i += 1;
        }
        // the frame's time at segment i's rate; the fraction not sent when the next
        // segment begins continues at that segment's rate
        let mut t = start_ps;
        let mut left = 1.0f64;
        loop {
            let full = Rate::with_framing(points[i].1, framing).tx_ps(len) as u128;
            let need = (full as f64 * left).ceil() as u128;
            match points.get(i + 1) {
                Some(&(next, _)) if t + need > ps(next) => {
                    left -= (ps(next) - t) as f64 / full.max(1) as f64;
                    t = ps(next);
                    i += 1;
                }
                _ => {
                    self.index = i as u64;
                    return t + need;
                }
            }
        }
    }

    fn through_trace(&mut self, ms: &[u64], start_ps: u128, mut bytes: u64, once: bool) -> u128 {
        let n = ms.len() as u64;
        let period = *ms.last().unwrap_or(&1);
        let at = |k: u64| ((k / n) * period + ms[(k % n) as usize]) as u128 * MS_PS;
        if at(self.index) < start_ps {
            // the opportunities that found the link idle are lost: the first one at or
            // after `start` (jumping whole periods; one period back for a boundary)
            let p = (start_ps / MS_PS) as u64 / period;
            let mut k = self.index.max(p.saturating_sub(1) * n);
            while at(k) < start_ps {
                k += 1;
            }
            self.index = k;
            self.used = 0;
        }
        loop {
            if once && self.index >= n {
                return NEVER_PS;
            }
            let take = bytes.min(TRACE_MTU - self.used);
            bytes -= take;
            self.used += take;
            let end = at(self.index);
            if self.used == TRACE_MTU {
                self.index += 1;
                self.used = 0;
            }
            if bytes == 0 {
                return end;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u128 = 1_000_000_000; // ps

    /// 1500 bytes at 12 Mbit/s take 1 ms; at 1.2 Mbit/s 10 ms. A frame starting 0.5 ms
    /// before the change from 12 to 1.2 Mbit/s sends half its bits fast (0.5 ms) and the
    /// other half at the slow rate (5 ms): it ends at 5.5 ms after its start.
    const F0: Framing = Framing::plain(0);

    #[test]
    fn a_schedule_carries_a_frame_across_a_change() {
        let cap = Capacity::schedule(vec![(0, 12_000_000), (10_000_000, 1_200_000)]).unwrap();
        let mut c = Cursor::default();
        // within 10 ps: `Rate::tx_ps` is a fixed-point product, a few ps short of the
        // exact rational at these rates
        let near = |got: u128, want: u128| assert!(got.abs_diff(want) <= 10, "{got} != {want}");
        near(c.serialise(&cap, 0, 1500, F0, false), MS);
        let end = c.serialise(&cap, 9 * MS + MS / 2, 1500, F0, false);
        near(end, 9 * MS + MS / 2 + MS / 2 + 5 * MS);
        // later frames at the last rate, for ever
        near(c.serialise(&cap, 100 * MS, 1500, F0, false), 110 * MS);
        // a start before the cursor's segment (a reconfigured link) is found again
        near(c.serialise(&cap, MS, 1500, F0, false), 2 * MS);
        assert_eq!(cap.peak_bps(), 12_000_000);
    }

    /// Mahimahi: opportunities at 1, 1, 3 ms, period 3 ms. Three 1500-byte packets (1514-
    /// byte frames) queued at 0 leave at 1, 1 and 3 ms; a fourth at 4 ms (1 ms into the
    /// next period). A 500-byte packet and a 1000-byte packet share one opportunity. An
    /// idle gap loses the opportunities it skips.
    #[test]
    fn a_trace_delivers_1500_bytes_per_opportunity() {
        let cap = Capacity::parse_trace("# test\n1\n1\n\n3\n").unwrap();
        let mut c = Cursor::default();
        let ends: Vec<u128> = (0..4)
            .map(|_| c.serialise(&cap, 0, 1514, F0, false))
            .collect();
        assert_eq!(ends, vec![MS, MS, 3 * MS, 4 * MS]);
        let mut c = Cursor::default();
        assert_eq!(c.serialise(&cap, 0, 514, F0, false), MS);
        assert_eq!(
            c.serialise(&cap, 0, 1014, F0, false),
            MS,
            "the rest of the same opportunity"
        );
        assert_eq!(
            c.serialise(&cap, 0, 114, F0, false),
            MS,
            "the second opportunity at 1 ms"
        );
        // idle until 10 ms: opportunities at 3, 4, 4, 6, 7, 7, 9 are gone; next at 10
        assert_eq!(c.serialise(&cap, 10 * MS, 1514, F0, false), 10 * MS);
        assert_eq!(c.serialise(&cap, 10 * MS, 1514, F0, false), 10 * MS);
        assert_eq!(c.serialise(&cap, 10 * MS, 1514, F0, false), 12 * MS);
        // 3 opportunities per 3 ms = 12 Mbit/s on average, 24 at the busiest ms
        assert_eq!(cap.mean_bps(), 12_000_000);
        assert_eq!(cap.peak_bps(), 24_000_000);
        assert_eq!(cap.period_ms(), Some(3));
    }

    /// `mm-link`'s byte count: a trace charges the IP packet (the frame less 14 bytes, at
    /// least 1), framing applied to the frame first; a schedule charges the framed frame.
    #[test]
    fn a_trace_charges_the_ip_packet() {
        let cap = Capacity::parse_trace("1\n").unwrap();
        assert_eq!(cap.charge(F0, 1514), 1500);
        assert_eq!(cap.charge(F0, 10), 1);
        assert_eq!(cap.charge(Framing::plain(24), 1514), 1524);
        let sched = Capacity::schedule(vec![(0, 8000)]).unwrap();
        assert_eq!(sched.charge(F0, 1514), 1514);
        assert_eq!(sched.period_ms(), None);
    }

    /// Played once (`mm-link --once`): opportunities at 1, 1, 3 ms and none after; the
    /// fourth full-size packet never leaves.
    #[test]
    fn a_trace_played_once_ends() {
        let cap = Capacity::parse_trace("1\n1\n3\n").unwrap();
        let mut c = Cursor::default();
        let ends: Vec<u128> = (0..4)
            .map(|_| c.serialise(&cap, 0, 1514, F0, true))
            .collect();
        assert_eq!(ends, vec![MS, MS, 3 * MS, NEVER_PS]);
        // a frame starting after the end finds nothing either
        let mut c = Cursor::default();
        assert_eq!(c.serialise(&cap, 5 * MS, 100, F0, true), NEVER_PS);
    }

    #[test]
    fn bad_schedules_and_traces_are_explained() {
        assert!(Capacity::schedule(vec![])
            .unwrap_err()
            .contains("at least one"));
        assert!(Capacity::schedule(vec![(5, 8000)])
            .unwrap_err()
            .contains("start at 0s"));
        let e = Capacity::schedule(vec![(0, 8000), (0, 9000)]).unwrap_err();
        assert!(e.contains("must increase"), "{e}");
        assert!(Capacity::schedule(vec![(0, 7)])
            .unwrap_err()
            .contains("below 8"));
        let e = Capacity::parse_trace("1\n2\nx\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
        let e = Capacity::parse_trace("5\n2\n").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("must not decrease"),
            "{e}"
        );
        assert!(Capacity::parse_trace("")
            .unwrap_err()
            .contains("no delivery"));
        assert!(Capacity::parse_trace("0\n0\n")
            .unwrap_err()
            .contains("above 0"));
    }
}
