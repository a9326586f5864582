//! Per-interval byte series — what a sink counts per session, bin `i` covering
//! `[i·interval, (i+1)·interval)` since the sink started — and what the labs derive from
//! them: goodput over a window (bytes / time), the byte-time line (cumulative bytes against
//! time) and its least-squares slope, sliding means, the time a sliding mean takes to reach
//! a level, the last non-empty bin, bin-by-bin sums, and the spread of several goodputs.

use std::time::Duration;

/// Goodput in bit/s over the window `[from, to)` of a per-interval byte series whose bin `i`
/// covers `[i*interval, (i+1)*interval)`. Bins that straddle a window edge count in
/// proportion to their overlap (bytes assumed uniform within a bin). The window is clipped to
/// the series' extent; an empty window gives 0.0. Use `from` to skip slow start.
pub fn goodput_bps(series: &[u64], interval: Duration, from: Duration, to: Duration) -> f64 {
    let iv = interval.as_nanos() as f64;
    if iv <= 0.0 || series.is_empty() {
        return 0.0;
    }
    let end = iv * series.len() as f64;
    let from = from.as_nanos() as f64;
    let to = (to.as_nanos() as f64).min(end);
    if to <= from {
        return 0.0;
    }
    let first = (from / iv).floor() as usize;
    let mut bytes = 0.0;
    for (i, &b) in series.iter().enumerate().skip(first) {
        let start = i as f64 * iv;
        if start >= to {
            break;
        }
        let overlap = (start + iv).min(to) - start.max(from);
        if overlap > 0.0 {
            bytes += b as f64 * overlap / iv;
        }
    }
    bytes * 8.0 / ((to - from) / 1e9)
}

/// Analysis-window goodput of a series with `interval_ms` bins, bit/s, over `window_s`
/// (seconds since the sink started): [`goodput_bps`], the testbed's definition.
pub fn window_goodput(series: &[u64], interval_ms: u64, window_s: (f64, f64)) -> f64 {
    goodput_bps(
        series,
        Duration::from_millis(interval_ms),
        Duration::from_secs_f64(window_s.0),
        Duration::from_secs_f64(window_s.1),
    )
}

/// The bin-by-bin sum of several series (as long as the longest).
pub fn sum_series<'a>(series: impl IntoIterator<Item = &'a [u64]>) -> Vec<u64> {
    let mut total: Vec<u64> = Vec::new();
    for s in series {
        if total.len() < s.len() {
            total.resize(s.len(), 0);
        }
        for (t, b) in total.iter_mut().zip(s) {
            *t += b;
        }
    }
    total
}

/// Running sum of y: per-interval amounts (bytes per second) to a "byte-time" line
/// (cumulative bytes at the end of each interval). Non-finite y values add nothing.
pub fn cumulative(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sum = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            if y.is_finite() {
                sum += y;
            }
            (x, sum)
        })
        .collect()
}

/// Goodput as the least-squares slope of the byte-time line ([`byte_time`]) over the
/// points whose time lies in `window_s`, bit/s; 0 with fewer than 3 points.
///
/// Why not only bytes / time: a lost segment holds back everything behind it in the
/// receiver until the retransmission arrives, which behind a deep DUT queue takes seconds;
/// the endpoint count then moves by up to one receive window (64 KB without window
/// scaling: 21 kbit/s over a 25 s window, 10 % of a 200 kbit/s class) depending on where
/// a window edge falls. The slope uses every point of the line ("the slope is the
/// bandwidth", seed 000 on Fig. 12) and moves much less; over the paper's 200 s window
/// the two agree.
pub fn slope_bps(series: &[u64], interval_ms: u64, window_s: (f64, f64)) -> f64 {
    let eps = 1e-9;
    let pts: Vec<(f64, f64)> = byte_time(series, interval_ms)
        .into_iter()
        .filter(|&(t, _)| t >= window_s.0 - eps && t <= window_s.1 + eps)
        .collect();
    if pts.len() < 3 {
        return 0.0;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx > 0.0 {
        sxy / sxx * 8.0
    } else {
        0.0
    }
}

/// The byte-time line of a per-interval byte series: (0, 0), then (end of bin i in s,
/// bytes received up to it), as [`cumulative`] makes it.
pub fn byte_time(series: &[u64], interval_ms: u64) -> Vec<(f64, f64)> {
    let iv = interval_ms as f64 / 1000.0;
    let per_bin: Vec<(f64, f64)> = series
        .iter()
        .enumerate()
        .map(|(i, &b)| ((i + 1) as f64 * iv, b as f64))
        .collect();
    let mut out = vec![(0.0, 0.0)];
    out.extend(cumulative(&per_bin));
    out
}

/// max/min of positive goodputs; `None` with fewer than two or any at zero.
pub fn spread(goodputs: &[f64]) -> Option<f64> {
    if goodputs.len() < 2 || goodputs.iter().any(|&g| g.is_nan() || g <= 0.0) {
        return None;
    }
    let max = goodputs.iter().cloned().fold(f64::MIN, f64::max);
    let min = goodputs.iter().cloned().fold(f64::MAX, f64::min);
    Some(max / min)
}

/// Sliding mean in bit/s over the `window_ms / interval_ms` bins ending at each bin (fewer
/// at the start of the series).
pub fn sliding_bps(series: &[u64], interval_ms: u64, window_ms: u64) -> Vec<f64> {
    let k = (window_ms / interval_ms.max(1)).max(1) as usize;
    let iv_s = interval_ms as f64 / 1000.0;
    (0..series.len())
        .map(|i| {
            let lo = (i + 1).saturating_sub(k);
            let sum: u64 = series[lo..=i].iter().sum();
            sum as f64 * 8.0 / ((i + 1 - lo) as f64 * iv_s)
        })
        .collect()
}

/// Seconds from `from_s` until the sliding mean ([`sliding_bps`]) first reaches
/// `threshold_bps`, timed at the end of the first window that ends after `from_s`; `None`
/// if it never does.
pub fn time_to_reach(
    series: &[u64],
    interval_ms: u64,
    window_ms: u64,
    from_s: f64,
    threshold_bps: f64,
) -> Option<f64> {
    let iv = interval_ms as f64 / 1000.0;
    sliding_bps(series, interval_ms, window_ms)
        .into_iter()
        .enumerate()
        .map(|(i, v)| ((i + 1) as f64 * iv, v))
        .find(|&(end, v)| end > from_s + 1e-9 && v >= threshold_bps)
        .map(|(end, _)| end - from_s)
}

/// The end of the last non-empty bin, s; `None` for an empty series.
pub fn last_byte_s(series: &[u64], interval_ms: u64) -> Option<f64> {
    let i = series.iter().rposition(|&b| b > 0)?;
    Some((i + 1) as f64 * interval_ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn goodput_whole_bins() {
        // 1 s bins of 125_000 bytes = 1 Mbit/s each.
        let s = [125_000, 125_000, 250_000, 250_000];
        assert_eq!(goodput_bps(&s, S, Duration::ZERO, 4 * S), 1_500_000.0);
        assert_eq!(goodput_bps(&s, S, 2 * S, 4 * S), 2_000_000.0);
        // Window past the end is clipped to the series.
        assert_eq!(goodput_bps(&s, S, 2 * S, 10 * S), 2_000_000.0);
        assert_eq!(goodput_bps(&s, S, 5 * S, 10 * S), 0.0);
        assert_eq!(goodput_bps(&[], S, Duration::ZERO, S), 0.0);
    }

    #[test]
    fn goodput_partial_bins() {
        let s = [100, 200];
        // [0.5, 1.5): half of bin 0 (50 bytes) + half of bin 1 (100 bytes) = 150 B in 1 s.
        let g = goodput_bps(
            &s,
            S,
            Duration::from_millis(500),
            Duration::from_millis(1500),
        );
        assert!((g - 1200.0).abs() < 1e-9, "{g}");
        // 100 ms bins.
        let s = [10u64; 10];
        let g = goodput_bps(&s, Duration::from_millis(100), Duration::ZERO, S);
        assert!((g - 800.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn cumulative_running_sum() {
        assert_eq!(
            cumulative(&[(1.0, 10.0), (2.0, f64::NAN), (3.0, 5.0)]),
            vec![(1.0, 10.0), (2.0, 10.0), (3.0, 15.0)]
        );
    }

    #[test]
    fn series_add_bin_by_bin() {
        assert_eq!(
            sum_series([&[1u64, 2, 3][..], &[10, 20][..], &[][..]]),
            vec![11, 22, 3]
        );
        assert!(sum_series(std::iter::empty::<&[u64]>()).is_empty());
    }

    #[test]
    fn byte_time_is_the_running_sum_at_bin_ends() {
        assert_eq!(
            byte_time(&[100, 0, 50], 1000),
            vec![(0.0, 0.0), (1.0, 100.0), (2.0, 100.0), (3.0, 150.0)]
        );
        assert_eq!(
            byte_time(&[10, 20], 500),
            vec![(0.0, 0.0), (0.5, 10.0), (1.0, 30.0)]
        );
        assert_eq!(byte_time(&[], 1000), vec![(0.0, 0.0)]);
    }

    #[test]
    fn spread_is_max_over_min() {
        assert_eq!(spread(&[50.0, 100.0, 75.0]), Some(2.0));
        assert_eq!(spread(&[50.0]), None);
        assert_eq!(spread(&[50.0, 0.0]), None);
    }

    #[test]
    fn slope_of_the_byte_time_line_by_hand() {
        // constant 1000 B/s: 8000 bit/s, whatever the window
        let s = vec![1000u64; 10];
        assert!((slope_bps(&s, 1000, (0.0, 10.0)) - 8000.0).abs() < 1e-9);
        assert!((slope_bps(&s, 1000, (2.0, 7.0)) - 8000.0).abs() < 1e-9);
        // [0, 0, 3000] over 0-3 s: points (0,0) (1,0) (2,0) (3,3000); mean t 1.5, mean
        // bytes 750; Sxy = 1125 + 375 - 375 + 3375 = 4500, Sxx = 5: 900 B/s = 7200 bit/s
        // (bytes / time: 8000 bit/s)
        assert!((slope_bps(&[0, 0, 3000], 1000, (0.0, 3.0)) - 7200.0).abs() < 1e-9);
        // fewer than 3 points
        assert_eq!(slope_bps(&[1000], 1000, (0.0, 1.0)), 0.0);
        // a hole at the window's start (3 s held back, delivered in one bin at 5 s) moves
        // bytes / time by 2/25 = 8 % but the slope by much less
        let mut h = vec![1000u64; 30];
        h[2] = 0;
        h[3] = 0;
        h[4] = 3000; // bin 4 ends at 5 s: inside a window from 5 s
        let base = 8000.0;
        let endpoint = window_goodput(&h, 1000, (4.0, 30.0));
        let slope = slope_bps(&h, 1000, (4.0, 30.0));
        assert!((endpoint - base) / base > 0.07, "{endpoint}");
        assert!(((slope - base) / base).abs() < 0.03, "{slope}");
    }

    #[test]
    fn sliding_mean_and_time_to_95_by_hand() {
        // 100 ms bins: 1000 B (80 kbit/s) for 1 s, then 2000 B (160 kbit/s)
        let mut s = vec![1000u64; 10];
        s.extend(vec![2000u64; 10]);
        let sm = sliding_bps(&s, 100, 500);
        assert!((sm[0] - 80_000.0).abs() < 1e-9); // one bin
        assert!((sm[9] - 80_000.0).abs() < 1e-9);
        assert!((sm[10] - 96_000.0).abs() < 1e-9); // (4 x 1000 + 2000) / 0.5 s
        assert!((sm[13] - 144_000.0).abs() < 1e-9);
        assert!((sm[14] - 160_000.0).abs() < 1e-9);
        // threshold 95 % of 160 kbit/s = 152 kbit/s: first reached by the window ending at
        // 1.5 s -> 0.5 s after the step at 1.0 s
        let t = time_to_reach(&s, 100, 500, 1.0, 0.95 * 160_000.0).unwrap();
        assert!((t - 0.5).abs() < 1e-9, "{t}");
        // a lower threshold (120 kbit/s) is reached by the window ending at 1.3 s
        let t = time_to_reach(&s, 100, 500, 1.0, 120_000.0).unwrap();
        assert!((t - 0.3).abs() < 1e-9, "{t}");
        // windows ending at or before the stop do not count, even if already high
        let t = time_to_reach(&s, 100, 500, 1.0, 50_000.0).unwrap();
        assert!((t - 0.1).abs() < 1e-9, "{t}");
        // never
        assert_eq!(time_to_reach(&s, 100, 500, 1.0, 200_000.0), None);
        assert_eq!(last_byte_s(&[5, 0, 7, 0, 0], 100), Some(0.3));
        assert_eq!(last_byte_s(&[0, 0], 100), None);
    }

    #[test]
    fn window_goodput_uses_the_testbed_definition() {
        // 1000 bytes per second for 10 s: 8 kbit/s over any window inside
        let s = vec![1000u64; 10];
        assert!((window_goodput(&s, 1000, (2.0, 8.0)) - 8000.0).abs() < 1e-9);
    }
}
