use std::collections::HashMap;
use std::fmt::Write as _;

use proptest::prelude::*;

use super::*;

/// The hand-computed log (times before the base of 5000 ms):
/// - a delivery opportunity of 1500 B every ms at 1..=1000: 12,000,000 bit over the 1 s
///   from the first event (0) to the last (1000): capacity 12 Mbit/s;
/// - 20 arrivals of 1500 B at 0, 50, …, 950: 240,000 bit in 1 s, ingress 0.24 Mbit/s;
/// - the i-th (0-based) departs at 50·i + i + 1 after a delay of i + 1 ms: throughput
///   0.24 Mbit/s, utilisation 100 · 0.24 / 12 = 2 %;
/// - two drop lines: 2 packets of 3000 B and 1 of 1500 B.
fn sample() -> String {
    let mut t = String::from(
        "# mahimahi mm-link (uplink) [12mbps.trace] > up.log\n\
         # command line: mm-link 12mbps.trace 12mbps.trace --uplink-log=up.log\n\
         # queue: droptail [packets=100]\n\
         # init timestamp: 4990\n\
         # base timestamp: 5000\n",
    );
    let mut lines: Vec<(u64, String)> = Vec::new();
    for ms in 1..=1000u64 {
        lines.push((ms, format!("{} # 1500", 5000 + ms)));
    }
    for i in 0..20u64 {
        lines.push((50 * i, format!("{} + 1500", 5000 + 50 * i)));
        let dep = 50 * i + i + 1;
        lines.push((dep, format!("{} - 1500 {}", 5000 + dep, i + 1)));
    }
    lines.push((500, "5500 d 2 3000".into()));
    lines.push((700, "5700 d 1 1500".into()));
    // time order, stable: the arrival at 0 is the first event line
    lines.sort_by_key(|l| l.0);
    for (_, l) in lines {
        let _ = writeln!(t, "{l}");
    }
    t
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn summary_by_hand() {
    let log = parse("up.log", &sample()).unwrap();
    assert_eq!(log.base_timestamp, 5000);
    assert_eq!(log.init_timestamp, Some(4990));
    assert_eq!(log.queue.as_deref(), Some("droptail [packets=100]"));
    assert_eq!(
        log.command_line.as_deref(),
        Some("mm-link 12mbps.trace 12mbps.trace --uplink-log=up.log")
    );
    assert_eq!(
        log.other_headers,
        ["# mahimahi mm-link (uplink) [12mbps.trace] > up.log"]
    );
    assert_eq!(log.events.len(), 1000 + 40 + 2);
    assert_eq!(
        log.events[0],
        MmEvent {
            t_ms: 0,
            bytes: 1500,
            kind: MmKind::Arrival
        }
    );
    let s = log.summary();
    assert_eq!((s.first_ms, s.last_ms), (Some(0), Some(1000)));
    assert!(close(s.duration_s, 1.0));
    assert!(close(s.capacity_mbps, 12.0), "{:?}", s.capacity_mbps);
    assert!(close(s.ingress_mbps, 0.24));
    assert!(close(s.throughput_mbps, 0.24));
    assert!(close(s.utilization_pct, 2.0));
    // delays 1..=20 ms; rank ⌊0.95 · 20⌋ = 19: the largest, 20 ms
    assert_eq!(s.queue_delay_p95_ms, Some(20));
    // send times 0, 50, …, 950 with delays 1, 2, …, 20: 951 per-ms values, the runs [1] and
    // [i+1, i+50] for i = 1..=19. Rank ⌊0.95 · 951⌋ = 903. Values ≤ x: 1 + Σ min(50, x − i):
    // x = 59 → 1 + 9·50 + (49+…+40) = 896; x = 60 → 1 + 10·50 + (49+…+41) = 906 > 903.
    assert_eq!(s.signal_delay_p95_ms, Some(60));
    assert_eq!((s.opportunities, s.capacity_bytes), (1000, 1_500_000));
    assert_eq!((s.arrivals, s.arrival_bytes), (20, 30_000));
    assert_eq!((s.departures, s.departure_bytes), (20, 30_000));
    assert_eq!((s.dropped_packets, s.dropped_bytes), (3, 4500));
    assert_eq!(
        s.to_string(),
        "Average capacity: 12.00 Mbits/s\n\
         Average ingress: 0.24 Mbits/s\n\
         Average throughput: 0.24 Mbits/s (2.0% utilization)\n\
         95th percentile per-packet queueing delay: 20 ms\n\
         95th percentile signal delay: 60 ms\n\
         Dropped: 3 packets, 4500 bytes (15.0% of arrivals)"
    );
}

#[test]
fn bins_by_hand() {
    let log = parse("up.log", &sample()).unwrap();
    let b = log.bins(500).unwrap();
    assert_eq!(b.len(), 3, "{b:?}");
    let t: Vec<f64> = b.iter().map(|b| b.t_s).collect();
    assert_eq!(t, [0.0, 0.5, 1.0]);
    // bin 0 holds the opportunities 1..=499 (499 · 12,000 bit / 0.5 s), bin 1 500..=999,
    // bin 2 the one at 1000
    let cap: Vec<f64> = b.iter().map(|b| b.capacity_mbps).collect();
    assert!(
        (cap[0] - 11.976).abs() < 1e-9 && (cap[1] - 12.0).abs() < 1e-9,
        "{cap:?}"
    );
    assert!((cap[2] - 0.024).abs() < 1e-9, "{cap:?}");
    // 10 arrivals (0..=450) and 10 departures (1..=460) in bin 0, the rest in bin 1:
    // 120,000 bit / 0.5 s
    for b in &b[..2] {
        assert!((b.arrivals_mbps - 0.24).abs() < 1e-9, "{b:?}");
        assert!((b.departures_mbps - 0.24).abs() < 1e-9, "{b:?}");
    }
    assert_eq!((b[2].arrivals_mbps, b[2].departures_mbps), (0.0, 0.0));
    // one bin of 2 s; 0 ms is refused
    assert_eq!(log.bins(2000).unwrap().len(), 1);
    assert!(log.bins(0).unwrap_err().contains("0 ms"));
}

#[test]
fn delay_series_by_hand() {
    let log = parse(
        "x",
        "# base timestamp: 0\n5 - 100 5\n5 - 100 3\n9 - 100 6\n20 - 100 2\n",
    )
    .unwrap();
    // per packet: at its send time
    assert_eq!(log.packet_delays(), [(0, 5), (2, 3), (3, 6), (18, 2)]);
    // signal delay per ms: 0 → 5; 1 (no packet) → 2's 3 + 1 = 4; 2 → 3; 3 → 6;
    // 4..=17 (none) → 16, 15, …, 3; 18 → 2. Corners where a run without packets starts.
    let sd = SignalDelay::of(&log);
    assert_eq!(
        sd.points(),
        [(0, 5), (1, 4), (2, 3), (3, 6), (4, 16), (18, 2)]
    );
    assert_eq!(sd.len_ms(), 19);
    assert_eq!(brute_signal(&log), {
        let mut v = vec![5, 4, 3, 6];
        v.extend((3..=16).rev());
        v.push(2);
        v.sort_unstable();
        v
    });
    // 19 values, rank ⌊0.95 · 19⌋ = 18: the largest, 16
    assert_eq!(sd.percentile(0.95), Some(16));
    assert_eq!(log.summary().signal_delay_p95_ms, Some(16));
}

#[test]
fn ranks_truncate_as_perl() {
    assert_eq!(mm_rank(0, 0.95), None);
    assert_eq!(mm_rank(1, 0.95), Some(0));
    assert_eq!(mm_rank(10, 0.95), Some(9)); // 9.5
    assert_eq!(mm_rank(20, 0.95), Some(19)); // 0.95 · 20 rounds to 19.0 in f64
    assert_eq!(mm_rank(100, 0.95), Some(95));
    assert_eq!(mm_rank(951, 0.95), Some(903)); // 903.45
    assert_eq!(mm_rank(4, 0.5), Some(2));
    assert_eq!(mm_rank(3, 1.0), Some(2)); // at most n − 1
}

#[test]
fn mahimahi_log_with_drops_parses() {
    // as mm-link writes it since 2018 (link_queue.cc), drops after their arrivals
    let text = "# mahimahi mm-link (downlink) [/usr/share/mahimahi/traces/TMobile-LTE-driving.down] > down.log\n\
                # command line: mm-link /usr/share/mahimahi/traces/TMobile-LTE-driving.up /usr/share/mahimahi/traces/TMobile-LTE-driving.down --downlink-queue=droptail --downlink-queue-args=packets=2 --downlink-log=down.log\n\
                # queue: droptail [packets=2]\n\
                # init timestamp: 1543900000000\n\
                # base timestamp: 1543900000100\n\
                1543900000105 # 1500\n\
                1543900000105 + 1400\n\
                1543900000105 + 1400\n\
                1543900000105 + 1400\n\
                1543900000105 d 1 1400\n\
                1543900000106 - 1400 1\n\
                1543900000110 d 3 4200\n";
    let log = parse("down.log", text).unwrap();
    assert_eq!(log.queue.as_deref(), Some("droptail [packets=2]"));
    assert_eq!(
        log.events[4],
        MmEvent {
            t_ms: 5,
            bytes: 1400,
            kind: MmKind::Drop { packets: 1 }
        }
    );
    let s = log.summary();
    assert_eq!((s.dropped_packets, s.dropped_bytes), (4, 5600));
    assert_eq!((s.arrivals, s.departures), (3, 1));
    // the drop at 10 is the last event: duration 5 ms
    assert!(close(s.duration_s, 0.005));
    // 1500 B in 5 ms: 2.4 Mbit/s; 1400 B: 2.24; 100 · 2.24 / 2.4
    assert!(close(s.capacity_mbps, 2.4));
    assert!(close(s.throughput_mbps, 2.24));
    assert!(close(s.utilization_pct, 100.0 * 1400.0 / 1500.0));
    assert_eq!(
        (s.queue_delay_p95_ms, s.signal_delay_p95_ms),
        (Some(1), Some(1))
    );
}

#[test]
fn undefined_figures_are_none() {
    // one event: duration 0, no departure
    let s = parse("x", "# base timestamp: 7\n7 + 100\n")
        .unwrap()
        .summary();
    assert_eq!(s.duration_s, Some(0.0));
    assert_eq!(s.capacity_mbps, None);
    assert_eq!(s.utilization_pct, None);
    assert_eq!((s.queue_delay_p95_ms, s.signal_delay_p95_ms), (None, None));
    assert_eq!(
        s.to_string(),
        "Average capacity: n/a (the log spans 0 ms)\n\
         Average ingress: n/a (the log spans 0 ms)\n\
         Average throughput: n/a (the log spans 0 ms)\n\
         95th percentile per-packet queueing delay: n/a (no departures)\n\
         95th percentile signal delay: n/a (no departures)\n\
         Dropped: 0 packets, 0 bytes (0.0% of arrivals)"
    );
    // no capacity: no utilisation, the rest defined
    let s = parse("x", "# base timestamp: 0\n0 + 100\n10 - 100 10\n")
        .unwrap()
        .summary();
    assert!(close(s.capacity_mbps, 0.0));
    assert!(close(s.throughput_mbps, 0.08));
    assert_eq!(s.utilization_pct, None);
    assert!(s
        .to_string()
        .contains("Average throughput: 0.08 Mbits/s (utilization n/a: no delivery opportunities)"));
    // no events at all
    let log = parse("x", "# base timestamp: 0\n\n").unwrap();
    assert_eq!(log.summary(), MmSummary::default());
    assert!(log
        .summary()
        .to_string()
        .starts_with("Average capacity: n/a (no events)\n"));
    assert!(log.bins(500).unwrap().is_empty());
    // only drops: counted, no bins
    let log = parse("x", "# base timestamp: 0\n3 d 1 100\n").unwrap();
    assert!(log.bins(500).unwrap().is_empty());
    assert_eq!(log.summary().dropped_packets, 1);
}

#[test]
fn errors_name_the_line_and_what_was_expected() {
    let e = |text: &str| parse("f.log", text).unwrap_err();
    let b = "# base timestamp: 100\n";
    assert_eq!(
        e("101 + 1500\n"),
        "f.log:1: an event before the `# base timestamp: N` header (mm-link writes it first)"
    );
    assert!(e("").starts_with("f.log: no `# base timestamp: N` header"));
    assert_eq!(
        e(&format!("{b}# base timestamp: 3\n")),
        "f.log:2: a second `# base timestamp` (the first is on line 1)"
    );
    assert_eq!(
        e("# base timestamp: soon\n"),
        "f.log:1: `# base timestamp: soon`: expected a whole number of milliseconds"
    );
    assert!(e("# init timestamp: -1\n").starts_with("f.log:1: `# init timestamp: -1`"));
    assert_eq!(
        e(&format!("{b}101 x 1500\n")),
        "f.log:2: unknown event `x`: expected `+` (arrival), `#` (delivery opportunity), `-` (departure) or `d` (drop)"
    );
    assert_eq!(
        e(&format!("{b}\n101 - 1500\n")),
        "f.log:3: a departure without its delay: expected `TIME - BYTES DELAY`, found 3 fields"
    );
    assert_eq!(
        e(&format!("{b}101 + 1500 9\n")),
        "f.log:2: expected `TIME + BYTES`, found 4 fields"
    );
    assert_eq!(
        e(&format!("{b}101\n")),
        "f.log:2: `101`: expected `TIME EVENT BYTES [DELAY]`, e.g. `1042 - 1500 23`"
    );
    assert_eq!(
        e(&format!("{b}1.5 + 1500\n")),
        "f.log:2: `1.5` in `TIME + BYTES`: expected the time in ms (a whole number ≥ 0)"
    );
    assert_eq!(
        e(&format!("{b}101 # big\n")),
        "f.log:2: `big` in `TIME # BYTES`: expected bytes (a whole number ≥ 0)"
    );
    assert_eq!(
        e(&format!("{b}110 - 1500 -3\n")),
        "f.log:2: `-3` in `TIME - BYTES DELAY`: expected the delay in ms (a whole number ≥ 0)"
    );
    assert_eq!(
        e(&format!("{b}110 d x 1500\n")),
        "f.log:2: `x` in `TIME d PACKETS BYTES`: expected packets (a whole number ≥ 0)"
    );
    assert_eq!(
        e(&format!("{b}99 + 1500\n")),
        "f.log:2: time 99 is before the base timestamp 100"
    );
    assert_eq!(
        e(&format!("{b}105 - 1500 6\n")),
        "f.log:2: departure at 5 ms after the base with a delay of 6 ms: it would have arrived before the base timestamp"
    );
    assert!(e(&format!("{b}99999999999999999999 + 1\n")).contains("expected the time in ms"));
    // what is quoted is escaped and cut
    assert_eq!(
        e(&format!("{b}1\x00\x1b[2J + 1\n")),
        "f.log:2: `1\\0\\u{1b}[2J` in `TIME + BYTES`: expected the time in ms (a whole number ≥ 0)"
    );
    let long = "x".repeat(100);
    assert_eq!(
        e(&format!("{b}{long}\n")),
        format!(
            "f.log:2: `{}…`: expected `TIME EVENT BYTES [DELAY]`, e.g. `1042 - 1500 23`",
            &long[..40]
        )
    );
    // CRLF line ends and leading blanks are read
    let log = parse("f.log", "# base timestamp: 100\r\n  105 - 1500 5\r\n").unwrap();
    assert_eq!(log.events.len(), 1);
}

#[test]
fn too_many_bins_names_a_width_that_fits() {
    let t = MAX_BINS * 2;
    let log = parse("x", &format!("# base timestamp: 0\n0 + 1\n{t} + 1\n")).unwrap();
    let e = log.bins(1).unwrap_err();
    assert!(e.contains("use bins of at least 3 ms"), "{e}");
    assert!(log.bins(2).is_err());
    assert_eq!(log.bins(3).unwrap().len() as u64, t / 3 + 1);
}

#[test]
fn huge_spans_are_cheap() {
    // a packet sent at 0 with delay 5 and one sent at 10¹⁸ with delay 0: the per-ms values
    // are 5 and 0, 1, …, 10¹⁸ − 1; value x has x + 1 + [x ≥ 5] values ≤ it
    let t = 1_000_000_000_000_000_000u64;
    let log = parse("x", &format!("# base timestamp: 0\n5 - 1 5\n{t} - 1 0\n")).unwrap();
    let sd = SignalDelay::of(&log);
    assert_eq!(sd.len_ms(), u128::from(t) + 1);
    let rank = mm_rank(u128::from(t) + 1, 0.95).unwrap() as u64;
    assert_eq!(sd.percentile(0.95), Some(rank - 1));
    assert_eq!(sd.points(), [(0, 5), (1, t - 1), (t, 0)]);
    assert!(log.bins(DEFAULT_MS_PER_BIN).is_err());
}

#[test]
fn graphs_are_svg_with_the_means() {
    let log = parse("up.log", &sample()).unwrap();
    let s = log.summary();
    let t = throughput_svg(&log, &s, &log.bins(100).unwrap());
    crate::report::check_xml(&t).unwrap();
    assert!(t.contains("up.log: throughput"));
    assert!(t.contains("Capacity (mean 12.00 Mbits/s)"), "{t}");
    assert!(t.contains("Ingress (mean 0.24 Mbits/s)"));
    assert!(t.contains("Egress (mean 0.24 Mbits/s)"));
    assert!(t.contains(r#"fill-opacity="0.25""#), "capacity is shaded");
    let d = delay_svg(&log, &s);
    crate::report::check_xml(&d).unwrap();
    assert!(d.contains("p95 signal delay (60 ms)"));
    assert!(d.contains("p95 per-packet delay (20 ms)"));
    assert!(d.contains("Per-packet delay") && d.contains("Signal delay"));
}

/// `mm-throughput-graph`'s own signal-delay computation, one entry per ms: the smallest
/// delay per send time, then downwards from the last send time each empty ms is the next
/// one's value + 1. Sorted.
fn brute_signal(log: &MmLog) -> Vec<u64> {
    let mut m: HashMap<u64, u64> = HashMap::new();
    for (s, d) in log.packet_delays() {
        let e = m.entry(s).or_insert(d);
        *e = (*e).min(d);
    }
    let (Some(&lo), Some(&hi)) = (m.keys().min(), m.keys().max()) else {
        return Vec::new();
    };
    for ts in (lo..hi).rev() {
        if !m.contains_key(&ts) {
            let next = m[&(ts + 1)];
            m.insert(ts, next + 1);
        }
    }
    let mut v: Vec<u64> = m.into_values().collect();
    v.sort_unstable();
    v
}

/// Lines made of the format's own tokens, so that the parser's deeper paths are reached.
fn loglike() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("+".to_string()),
        Just("-".to_string()),
        Just("#".to_string()),
        Just("d".to_string()),
        Just("# base timestamp: 10".to_string()),
        Just("# init timestamp:".to_string()),
        (0u64..40).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[ -~]{0,4}",
    ];
    prop::collection::vec(prop::collection::vec(token, 0..5), 0..30).prop_map(|lines| {
        let mut s = String::from("# base timestamp: 10\n");
        for l in lines {
            s.push_str(&l.join(" "));
            s.push('\n');
        }
        s
    })
}

fn exercise(text: &str) {
    if let Ok(log) = parse("p", text) {
        let s = log.summary();
        let _ = log.bins(1);
        if let Ok(b) = log.bins(DEFAULT_MS_PER_BIN) {
            let _ = throughput_svg(&log, &s, &b);
        }
        let _ = delay_svg(&log, &s);
        for e in &log.events {
            if let MmKind::Departure { delay_ms } = e.kind {
                assert!(delay_ms <= e.t_ms);
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        exercise(&text);
    }

    #[test]
    fn loglike_text_never_panics(text in loglike()) {
        exercise(&text);
    }

    /// The run-based percentile equals the script's per-ms computation.
    #[test]
    fn signal_delay_matches_the_script(
        deps in prop::collection::vec((0u64..300, 0u64..80), 1..40),
        p in 0.0f64..1.0,
    ) {
        let mut text = String::from("# base timestamp: 0\n");
        for (send, delay) in deps {
            let _ = writeln!(text, "{} - 1500 {delay}", send + delay);
        }
        let log = parse("p", &text).unwrap();
        let brute = brute_signal(&log);
        let sd = SignalDelay::of(&log);
        prop_assert_eq!(sd.len_ms(), brute.len() as u128);
        let want = brute[mm_rank(brute.len() as u128, p).unwrap() as usize];
        prop_assert_eq!(sd.percentile(p), Some(want));
        // the corners, joined by straight lines, give every per-ms value
        let pts = sd.points();
        let mut expanded = vec![pts[pts.len() - 1].1];
        for w in pts.windows(2) {
            let ((t0, v0), (t1, v1)) = (w[0], w[1]);
            let (dv, dt) = (i128::from(v1) - i128::from(v0), i128::from(t1 - t0));
            for t in t0..t1 {
                let step = dv * i128::from(t - t0);
                prop_assert_eq!(step % dt, 0, "a corner missing between {:?} and {:?}", w[0], w[1]);
                expanded.push((i128::from(v0) + step / dt) as u64);
            }
        }
        expanded.sort_unstable();
        prop_assert_eq!(expanded, brute);
    }
}
