//! One-way delay, jitter, bandwidth and loss between two machines whose clocks differ:
//! seed 004's measurement method (section 3.2), as pure functions.
//!
//! # The clocks
//!
//! Every packet carries its sequence number and the sender's clock at sending, `t`; the
//! receiver adds its own clock at arrival, `T` (both integer ns, e.g. since each machine's
//! epoch). The receiver's clock runs off the sender's by a *skew* that seed 004 takes as
//! linear over a test: `c(t) = a·t + b` — `b` the offset, `a` the drift (dimensionless:
//! 40 ppm is `a = 40e-6`). A packet sent at `t` that spends `d` in the network then reads
//! `T = t + d + c(t)` (up to `a·d`, 40 ns for 1 ms at 40 ppm), so
//!
//! ```text
//! d = T − t − c(t)                                  (seed 004 §3.2)
//! ```
//!
//! # Calibration: estimating c(t)
//!
//! Before the test, without load (the seed: two minutes), each calibration packet gives a
//! point `(t, T − t)` ([`fit_skew`] takes the `(t, T)` pairs). In the seed the receiver
//! echoes each packet and the sender notes its return `t1`; with equal delays both ways
//! `c = T − t − (t1 − t)/2` — [`echo_sample`] turns such a triple into the pair that gives
//! exactly this point. Without an echo, `T − t` still includes the unloaded one-way delay:
//! `b` absorbs it, and the delays of [`one_way`] become the excess over the calibration's.
//!
//! A line is fitted through the points by one of the seed's "two different statistical
//! methods" ([`SkewFit`]):
//!
//! * **least squares** ([`least_squares`]): minimises `Σ r²`; a few packets delayed by
//!   cross traffic pull it up, because its errors are not normally distributed;
//! * **least absolute deviation** ([`least_absolute`]), the "M-estimate … minimizing
//!   absolute deviation" that the seed kept: minimises `Σ |r|`, the line of the conditional
//!   median, which outliers barely move. Computed **exactly** (up to rounding) by
//!   Wesolowsky's direct descent (G. O. Wesolowsky, "A new descent algorithm for the least
//!   absolute value regression problem", Communications in Statistics — Simulation and
//!   Computation B10(5), 1981, 479–491): an optimal line passes through two of the points;
//!   the best line through a pivot point `p` has the **weighted median** of the slopes
//!   `(y_i − y_p)/(x_i − x_p)`, weights `|x_i − x_p|`, and passes through the point `q`
//!   that sets it; the descent pivots on `q` and repeats while `Σ |r|` strictly falls. A
//!   line best through both `p` and `q` is optimal when no third point lies on it (the
//!   objective is separable in the two residuals there); when others do (ties in integer
//!   data), the lines through each of them are tried too, which covers every edge out of
//!   that vertex. `O(n log n)` per step; a handful of steps in practice.
//!
//! Times are re-based before any floating point: `x = t − t0` with `t0` the first (smallest)
//! calibration send time, `y = (T − t) − c0` with `c0` that sample's `T − t`, both exact
//! integers first, so f64 never holds a 1.7·10¹⁸ ns epoch time ([`Skew`] keeps both
//! origins).
//!
//! # The measured packets ([`one_way`])
//!
//! * **Delay** of each packet: `d = T − t − c(t)`, ns.
//! * **Jitter** (the seed, after RFC 2598): `j = |T₂ − T₁ − (t₂ − t₁)|` for two subsequent
//!   packets. Here with the skew's rate removed, `j = |d₂ − d₁| = |ΔT − Δt − a·Δt|` (with
//!   `a = 0` the seed's formula to the letter; at 40 ppm and 20 ms apart the difference is
//!   0.8 µs, the order of the seed's unloaded jitter, < 2 µs). "Subsequent" is by **sequence
//!   order**: received packets sorted by sequence number, the first copy of a duplicate
//!   kept. A loss leaves a gap: the pair is then the two received neighbours around it
//!   (as RFC 3550's `D(i, j)`, which is defined for any two packets). Since `t` is each
//!   packet's own send time, not a nominal one, `ΔT − Δt` is still the difference of the
//!   two transit times, only over a longer spacing; callers that want adjacent pairs only
//!   skip the values whose `seq` does not follow its predecessor's by one.
//! * **Bins** of `bin_ns` (the seed: 100 ms) by arrival time on the *sender's* clock
//!   (`t + d`), counted from the first send time: packets, bytes, bandwidth
//!   (`8 · bytes / bin`, bit/s), the mean delay of the packets that arrived in the bin and
//!   the mean jitter of the pairs whose later packet did. An empty bin has 0 packets, 0 bit/s
//!   and no means (`None`). The last bin is usually partial but is divided by a whole width.
//! * **Loss**: sequence numbers missing between the first and the last received. Losses
//!   before the first or after the last are invisible here; a caller that knows the
//!   sender's count uses [`Loss::lost_of`].
//!
//! Invariants: no panics and no NaN for finite input (a calibration with fewer than two
//! distinct send times gives `None`); `packets` is sorted by `seq` without duplicates;
//! `bins` are contiguous from `start_ns = 0` to the bin of the last arrival (an arrival
//! before the origin, i.e. a negative estimated delay, counts in bin 0; one wild
//! timestamp therefore makes a long series); `Σ bins.packets = loss.received`.

use serde::{Deserialize, Serialize};

/// One received packet of a measured stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Sequence number written by the sender.
    pub seq: u64,
    /// Send time, sender's clock, ns.
    pub t_ns: i64,
    /// Receive time, receiver's clock, ns.
    pub rx_ns: i64,
    /// Bytes counted for the bandwidth (the caller says at which layer).
    pub bytes: u32,
}

/// How to fit the skew line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkewFit {
    /// Ordinary least squares.
    LeastSquares,
    /// Least absolute deviation (the seed's choice; see the module documentation).
    LeastAbsolute,
}

/// An estimated clock skew `c(t) = c0_ns + b_ns + a·(t − t0_ns)`: the receiver's clock
/// minus the sender's at sender time `t`, ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skew {
    /// Time origin: the first calibration send time, sender's clock, ns.
    pub t0_ns: i64,
    /// Integer part of the offset: the first calibration sample's `T − t`, ns.
    pub c0_ns: i64,
    /// Drift, ns per ns (40 ppm = 40e-6).
    pub a: f64,
    /// The fitted offset at `t0_ns` relative to `c0_ns`, ns.
    pub b_ns: f64,
}

impl Skew {
    /// Sender and receiver share one clock: `c(t) = 0`.
    pub const SHARED_CLOCK: Skew = Skew {
        t0_ns: 0,
        c0_ns: 0,
        a: 0.0,
        b_ns: 0.0,
    };

    /// The offset at `t0_ns`, `c(t0)`, ns.
    pub fn offset_ns(&self) -> f64 {
        self.c0_ns as f64 + self.b_ns
    }

    /// The drift in parts per million.
    pub fn drift_ppm(&self) -> f64 {
        self.a * 1e6
    }

    /// One-way delay of a packet sent at `t_ns` (sender's clock) and received at `rx_ns`
    /// (receiver's clock): `T − t − c(t)`, ns. Integer parts are subtracted first.
    pub fn delay_ns(&self, t_ns: i64, rx_ns: i64) -> f64 {
        let raw = rx_ns.wrapping_sub(t_ns).wrapping_sub(self.c0_ns);
        raw as f64 - self.b_ns - self.a * t_ns.wrapping_sub(self.t0_ns) as f64
    }
}

/// The `(t, T)` pair of an echoed calibration packet — sent at `t0_ns`, stamped
/// `rx_ns` by the receiver, back at the sender at `t1_ns` — whose `T − t` is the seed's
/// `c = T0 − t0 − (t1 − t0)/2`: `(t0, T0 − (t1 − t0)/2)`, the half rounded toward
/// negative infinity (to the ns).
pub fn echo_sample(t0_ns: i64, rx_ns: i64, t1_ns: i64) -> (i64, i64) {
    (t0_ns, rx_ns - (t1_ns - t0_ns).div_euclid(2))
}

/// Fits the skew through calibration pairs `(t, T)` (send time on the sender's clock,
/// receive time on the receiver's, ns) by `method`. `None` with fewer than two distinct
/// send times.
pub fn fit_skew(samples: &[(i64, i64)], method: SkewFit) -> Option<Skew> {
    let &(t0, rx0) = samples.iter().min_by_key(|s| s.0)?;
    let c0 = rx0.wrapping_sub(t0);
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .map(|&(t, rx)| {
            let y = rx.wrapping_sub(t).wrapping_sub(c0);
            (t.wrapping_sub(t0) as f64, y as f64)
        })
        .collect();
    let (a, b) = match method {
        SkewFit::LeastSquares => least_squares(&pts)?,
        SkewFit::LeastAbsolute => least_absolute(&pts)?,
    };
    Some(Skew {
        t0_ns: t0,
        c0_ns: c0,
        a,
        b_ns: b,
    })
}

/// The least-squares line `y = slope·x + intercept` through `pts`, as `(slope,
/// intercept)`: `slope = Sxy / Sxx` with sums of centred products. `None` when all `x` are
/// equal (or there are no points).
pub fn least_squares(pts: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let (sxx, sxy) = pts.iter().fold((0.0, 0.0), |(sxx, sxy), &(x, y)| {
        (sxx + (x - mx) * (x - mx), sxy + (x - mx) * (y - my))
    });
    (sxx > 0.0).then(|| (sxy / sxx, my - sxy / sxx * mx))
}

/// Most descent steps of [`least_absolute`]; each strictly lowers `Σ |r|`, so the bound is
/// never met in practice (if it were, the line reached so far is returned).
const LAD_MAX_STEPS: usize = 1000;

/// The least-absolute-deviation line through `pts`, `(slope, intercept)`: a line that
/// minimises `Σ |y − slope·x − intercept|`, by Wesolowsky's descent (see the module
/// documentation). Where several lines tie, one of them (it passes through two points).
/// `None` when all `x` are equal (or there are fewer than two points).
pub fn least_absolute(pts: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pts.len();
    if n < 2 {
        return None;
    }
    // Start at the point of median x.
    let mut order: Vec<usize> = (0..n).collect();
    order.select_nth_unstable_by(n / 2, |&i, &j| pts[i].0.total_cmp(&pts[j].0));
    let mut buf = Vec::with_capacity(n);
    let mut p = order[n / 2];
    let (mut s, mut q) = best_through(pts, p, &mut buf)?;
    let mut f = abs_dev(pts, p, s);
    // Rounding allowances: an improvement must beat `tol`; a point within `on` of the line
    // counts as lying on it.
    let ymax = pts.iter().map(|p| p.1.abs()).fold(0.0, f64::max);
    let xspan = pts.iter().map(|p| p.0.abs()).fold(0.0, f64::max);
    let tol = 1e-12 * (n as f64 * ymax + 1.0);
    for _ in 0..LAD_MAX_STEPS {
        if f <= tol {
            break; // every point on the line
        }
        let (s2, q2) = best_through(pts, q, &mut buf)?;
        let f2 = abs_dev(pts, q, s2);
        let next = if f2 < f - tol {
            Some((q, s2, q2, f2))
        } else {
            // Best through p and through q: optimal unless more points lie on the line.
            let on = 1e-9 * (ymax + s.abs() * xspan + 1.0);
            let (xp, yp) = pts[p];
            (0..n)
                .filter(|&m| m != p && m != q)
                .filter(|&m| (pts[m].1 - yp - s * (pts[m].0 - xp)).abs() <= on)
                .find_map(|m| {
                    let (sm, qm) = best_through(pts, m, &mut buf)?;
                    let fm = abs_dev(pts, m, sm);
                    (fm < f - tol).then_some((m, sm, qm, fm))
                })
        };
        let Some(step) = next else { break };
        (p, s, q, f) = step;
    }
    Some((s, pts[p].1 - s * pts[p].0))
}

/// The best line through `pts[p]`: the weighted median of the slopes to the points of
/// another `x`, weights `|x_i − x_p|`, and the point that sets it. `None` if every point has
/// `p`'s `x`.
fn best_through(
    pts: &[(f64, f64)],
    p: usize,
    buf: &mut Vec<(f64, f64, usize)>,
) -> Option<(f64, usize)> {
    let (xp, yp) = pts[p];
    buf.clear();
    buf.extend(
        pts.iter()
            .enumerate()
            .filter(|(_, pt)| pt.0 != xp)
            .map(|(i, &(x, y))| ((y - yp) / (x - xp), (x - xp).abs(), i)),
    );
    buf.sort_unstable_by(|u, v| u.0.total_cmp(&v.0));
    let half = buf.iter().map(|e| e.1).sum::<f64>() / 2.0;
    let mut acc = 0.0;
    buf.iter()
        .find(|e| {
            acc += e.1;
            acc >= half
        })
        .map(|e| (e.0, e.2))
}

/// `Σ |r|` of the line through `pts[p]` with slope `s`.
fn abs_dev(pts: &[(f64, f64)], p: usize, s: f64) -> f64 {
    let (xp, yp) = pts[p];
    pts.iter()
        .map(|&(x, y)| (y - yp - s * (x - xp)).abs())
        .sum()
}

/// A receiver clock that runs `offset_ns` ahead of true time at `t0_ns` and drifts by
/// `drift_ppm`: its reading at true time `t_true_ns`,
/// `t + offset + round(drift·10⁻⁶·(t − t0))`. For the labs' injected skews.
pub fn inject(t_true_ns: i64, offset_ns: i64, drift_ppm: f64, t0_ns: i64) -> i64 {
    let drift = (drift_ppm * 1e-6 * (t_true_ns - t0_ns) as f64).round() as i64;
    t_true_ns + offset_ns + drift
}

/// A receiving host's simulated clock (seed 004's calibration in namespaces, which share
/// one clock): true time plus `offset_ns` at `t0_ns`, drifting by `drift_ppm`;
/// [`ReceiverClock::TRUE`] reads true time (a real host's own clock).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiverClock {
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Where the drift is counted from (true time, ns since the epoch).
    pub t0_ns: i64,
}

impl ReceiverClock {
    /// No offset, no drift.
    pub const TRUE: ReceiverClock = ReceiverClock {
        offset_ns: 0,
        drift_ppm: 0.0,
        t0_ns: 0,
    };

    /// B's reading at true time `t_ns`.
    pub fn read(&self, t_ns: i64) -> i64 {
        inject(t_ns, self.offset_ns, self.drift_ppm, self.t0_ns)
    }

    /// B's clock minus A's at A's time `t_ns`: what a perfect estimate gives.
    pub fn skew_at(&self, t_ns: i64) -> f64 {
        self.offset_ns as f64 + self.drift_ppm * 1e-6 * (t_ns - self.t0_ns) as f64
    }
}

/// The queueing delay of a packet that finds `packets` packets of `bytes` each ahead of it
/// at each of `hops` links of `rate_bps`: `hops · packets · 8 · bytes / rate`, ns. Seed 004
/// §3.3: three full 100-packet FIFOs of 1174-byte frames at 100 Mbit/s, 28.2 ms.
pub fn queueing_delay_ns(packets: u64, bytes: u64, rate_bps: f64, hops: u32) -> f64 {
    f64::from(hops) * packets as f64 * bytes as f64 * 8.0 / rate_bps * 1e9
}

/// One received packet's delay and jitter.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PacketDelay {
    pub seq: u64,
    /// Send time, sender's clock, ns.
    pub t_ns: i64,
    /// One-way delay, ns.
    pub delay_ns: f64,
    /// `|d − d_prev|` against the previous received packet in sequence order, ns; `None`
    /// for the first.
    pub jitter_ns: Option<f64>,
}

/// One time bin of a measured stream.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bin {
    /// Start, ns since the stream's first send time (sender's clock).
    pub start_ns: i64,
    /// Packets that arrived in the bin.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// `8 · bytes / bin width`, bit/s.
    pub bandwidth_bps: f64,
    /// Mean delay of those packets, ns; `None` for an empty bin.
    pub mean_delay_ns: Option<f64>,
    /// Mean jitter of the pairs whose later packet arrived in the bin, ns.
    pub mean_jitter_ns: Option<f64>,
}

/// Losses by sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// Lowest and highest sequence number received (0 without packets).
    pub first_seq: u64,
    pub last_seq: u64,
    /// Distinct sequence numbers received.
    pub received: u64,
    /// Missing between the first and the last: `last − first + 1 − received`.
    pub lost: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
}

impl Loss {
    /// `lost / (lost + received)`; `None` without packets.
    pub fn ratio(&self) -> Option<f64> {
        let expected = self.lost + self.received;
        (expected > 0).then(|| self.lost as f64 / expected as f64)
    }

    /// Packets lost of `sent` (sequence numbers `0..sent`) — losses at either end included.
    pub fn lost_of(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.received)
    }
}

/// The measured stream's figures (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneWay {
    /// The first (smallest) send time, sender's clock, ns: the origin of the bins.
    pub origin_ns: i64,
    /// Bin width, ns.
    pub bin_ns: u64,
    /// Per distinct received packet, by sequence number.
    pub packets: Vec<PacketDelay>,
    pub bins: Vec<Bin>,
    pub loss: Loss,
}

/// Delay, jitter, bins of `bin_ns` (0 counts as 1) and loss of the received `records`
/// (any order, duplicates allowed) under the clock skew `skew`.
pub fn one_way(records: &[Record], skew: &Skew, bin_ns: u64) -> OneWay {
    let mut recs = records.to_vec();
    recs.sort_by_key(|r| r.seq); // stable: the first copy of a duplicate stays first
    recs.dedup_by_key(|r| r.seq);
    let loss = match (recs.first(), recs.last()) {
        (Some(f), Some(l)) => Loss {
            first_seq: f.seq,
            last_seq: l.seq,
            received: recs.len() as u64,
            lost: (l.seq - f.seq) - (recs.len() as u64 - 1),
            duplicates: (records.len() - recs.len()) as u64,
        },
        _ => Loss::default(),
    };
    let origin = recs.iter().map(|r| r.t_ns).min().unwrap_or(0);
    let mut packets: Vec<PacketDelay> = Vec::with_capacity(recs.len());
    for r in &recs {
        let delay_ns = skew.delay_ns(r.t_ns, r.rx_ns);
        let jitter_ns = packets.last().map(|p| (delay_ns - p.delay_ns).abs());
        packets.push(PacketDelay {
            seq: r.seq,
            t_ns: r.t_ns,
            delay_ns,
            jitter_ns,
        });
    }
    let bin_ns = bin_ns.max(1);
    let width = bin_ns as f64;
    // per bin: packets, bytes, Σ delay, jitter values, Σ jitter
    let mut acc: Vec<(u64, u64, f64, u64, f64)> = Vec::new();
    for (r, p) in recs.iter().zip(&packets) {
        let arrival = r.t_ns.wrapping_sub(origin) as f64 + p.delay_ns;
        let k = (arrival.max(0.0) / width) as usize;
        if acc.len() <= k {
            acc.resize(k + 1, (0, 0, 0.0, 0, 0.0));
        }
        let b = &mut acc[k];
        b.0 += 1;
        b.1 += u64::from(r.bytes);
        b.2 += p.delay_ns;
        if let Some(j) = p.jitter_ns {
            b.3 += 1;
            b.4 += j;
        }
    }
    let bins = acc
        .iter()
        .enumerate()
        .map(|(k, &(n, bytes, dsum, jn, jsum))| Bin {
            start_ns: k as i64 * bin_ns as i64,
            packets: n,
            bytes,
            bandwidth_bps: bytes as f64 * 8.0 * 1e9 / width,
            mean_delay_ns: (n > 0).then(|| dsum / n as f64),
            mean_jitter_ns: (jn > 0).then(|| jsum / jn as f64),
        })
        .collect();
    OneWay {
        origin_ns: origin,
        bin_ns,
        packets,
        bins,
        loss,
    }
}

#[cfg(test)]
mod tests;
