//! Unit tests of the RFC 2544 searches on a model shaper, and of the checks.

use super::*;

/// A shaper at `rate` bit/s with a queue of `queue_bits` behind a sender that reaches at
/// most `gen` bit/s: a trial of `t` s at `r` loses the excess beyond what the queue holds.
fn shaper(rate: f64, queue_bits: f64, gen: f64, t: f64) -> impl FnMut(f64) -> Result<Trial> {
    move |asked| {
        let r = asked.min(gen);
        let frame_bits = 1514.0 * 8.0;
        let sent = (r * t / frame_bits).round() as u64;
        let excess = ((r - rate) * t - queue_bits).max(0.0);
        Ok(Trial {
            asked_bps: asked,
            achieved_bps: r,
            sent,
            lost: (excess / frame_bits).ceil() as u64,
            ir_bps: Some(r.min(rate)),
            ftd: None,
            error: None,
        })
    }
}

#[test]
fn throughput_finds_the_shaping_rate_to_the_resolution() {
    let mut dut = shaper(100e6, 0.0, 10e9, 1.0);
    let (tput, trials) = throughput(1e9, 0.01, &mut dut).unwrap();
    // the answer lies in [tput, tput / (1 - 0.01)] and never above the rate
    assert!((100e6 * 0.99..=100e6).contains(&tput), "{tput}");
    // first at the line rate, then halving: 1000 → 500 → 250 → 125 → 62.5 → … ten
    // halvings narrow 1000 Mbit/s to < 1 % of ~100
    assert_eq!(trials[0].asked_bps, 1e9);
    assert_eq!(trials[1].asked_bps, 500e6);
    assert_eq!(trials[2].asked_bps, 250e6);
    assert!(trials.len() <= 12, "{} trials", trials.len());
    // a DUT that loses nothing at the line rate: one trial
    let mut fast = shaper(10e9, 0.0, 10e9, 1.0);
    let (tput, trials) = throughput(1e9, 0.01, &mut fast).unwrap();
    assert_eq!((tput, trials.len()), (1e9, 1));
}

#[test]
fn a_deep_queue_hides_an_excess_in_a_short_trial() {
    // Q = 1000 frames of 1514 bytes = 12.1 Mbit: a 1 s trial at up to 112 Mbit/s loses
    // nothing; a 60 s trial only up to 100.2 Mbit/s
    let q = 1000.0 * 1514.0 * 8.0;
    let (short, _) = throughput(1e9, 0.001, &mut shaper(100e6, q, 10e9, 1.0)).unwrap();
    let (long, _) = throughput(1e9, 0.001, &mut shaper(100e6, q, 10e9, 60.0)).unwrap();
    assert!((111.0e6..=112.2e6).contains(&short), "{short}");
    assert!((100.0e6..=100.3e6).contains(&long), "{long}");
}

#[test]
fn a_generator_limited_search_stops_at_what_the_sender_reached() {
    // the sender tops out at 300 Mbit/s, the shaper at 500: no loss anywhere it can send
    let mut dut = shaper(500e6, 0.0, 300e6, 1.0);
    let (tput, trials) = throughput(1e9, 0.01, &mut dut).unwrap();
    assert_eq!(tput, 300e6);
    assert_eq!(trials.len(), 1);
    assert!(trials[0].limited());
    // the shaper below the sender's limit but the line above it: the search ends at the
    // first loss-free limited trial instead of spinning
    let mut dut = shaper(280e6, 0.0, 300e6, 1.0);
    let (tput, trials) = throughput(1e9, 0.01, &mut dut).unwrap();
    assert!(tput <= 280e6, "{tput}");
    assert!(trials.len() < 20, "{}", trials.len());
}

#[test]
fn loss_steps_stop_after_two_clean_trials() {
    // 100 Mbit/s shaper on a 1 Gbit/s line, 10 % steps: 100 % .. 20 % lose, 10 % does
    // not, and the rate cannot go lower: 10 trials
    let mut dut = shaper(100e6, 0.0, 10e9, 1.0);
    let v = loss_steps(1e9, 0.1, &mut dut).unwrap();
    assert_eq!(v.len(), 10);
    // frame loss rate = 1 - R/r: 90 % at the line rate, 50 % at 200 Mbit/s
    assert!((v[0].loss_ratio() - 0.9).abs() < 1e-3);
    assert!((v[8].loss_ratio() - 0.5).abs() < 1e-3);
    assert_eq!(v[9].lost, 0);
    // a shaper at 350: 30 % and 20 % are clean, and the search stops there (9 trials)
    let mut dut = shaper(350e6, 0.0, 10e9, 1.0);
    let v = loss_steps(1e9, 0.1, &mut dut).unwrap();
    let rates: Vec<f64> = v.iter().map(|t| t.asked_bps / 1e6).collect();
    assert_eq!(rates.len(), 9, "{rates:?}");
    assert_eq!(v[7].lost + v[8].lost, 0);
}

#[test]
fn back_to_back_finds_the_longest_clean_burst() {
    // a queue of 300 frames: bursts of up to 300 pass
    let mut dut = |n: u64| -> Result<Burst> {
        Ok(Burst {
            frames: n,
            lost: n.saturating_sub(300),
            achieved_bps: 1e9,
        })
    };
    let (n, tried) = back_to_back(10_000, &mut dut).unwrap();
    // within 1 % or one frame below the true 300
    assert!((297..=300).contains(&n), "{n}");
    assert!(tried.len() <= 16, "{}", tried.len());
    let (n, tried) = back_to_back(200, &mut dut).unwrap();
    assert_eq!((n, tried.len()), (200, 1));
}

fn result(duts: Vec<DutRun>) -> Rfc2544Result {
    Rfc2544Result {
        kind: "rfc2544".into(),
        meta: BTreeMap::new(),
        config: Rfc2544Config::quick(),
        policy_file: "p.toml".into(),
        policy_text: String::new(),
        class: "all".into(),
        class_bps: 100_000_000,
        src: Ipv4Addr::new(10, 77, 200, 1),
        duts,
        checks: Vec::new(),
    }
}

fn size_run(size: u32, tput: f64, loss: Vec<Trial>) -> SizeRun {
    SizeRun {
        size,
        throughput_bps: tput,
        throughput_limited: false,
        throughput_trials: Vec::new(),
        latency: Some(Trial {
            asked_bps: tput,
            achieved_bps: tput,
            sent: 1000,
            lost: 0,
            ir_bps: Some(tput),
            ftd: None,
            error: None,
        }),
        loss,
        b2b: vec![500],
        b2b_bursts: Vec::new(),
    }
}

#[test]
fn the_checks_judge_weir_by_the_shapers_arithmetic() {
    let mut model = shaper(100e6, 0.0, 10e9, 1.0);
    let steps = loss_steps(1e9, 0.1, &mut model).unwrap();
    let weir = DutRun {
        dut: "weir".into(),
        description: String::new(),
        sizes: vec![
            size_run(1518, 99.5e6, steps.clone()),
            size_run(512, 100.4e6, steps),
        ],
        counters: serde_json::Value::Null,
        errors: Vec::new(),
        hosts: Vec::new(),
        one_way: true,
    };
    let mut htb = weir.clone();
    htb.dut = "kernel:htb".into();
    htb.sizes[0].throughput_bps = 112e6;
    let mut r = result(vec![weir, htb]);
    finish(&mut r).unwrap();
    let lines: Vec<String> = r.checks.iter().map(|c| c.to_string()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        lines[0],
        "PASS weir: throughput within 2.0 % of the class's rate at every frame size [2 sizes] 1518 B -0.50 %, 512 B +0.40 %"
    );
    // 9 steps above 102 Mbit/s per size
    assert!(
        lines[1].starts_with(
            "PASS weir: above the class's rate, the rate received is the class's within 2 % [18 steps]"
        ),
        "{}",
        lines[1]
    );
    // a throughput 3 % off, a step that forwarded 3 % too little
    r.duts[0].sizes[1].throughput_bps = 103e6;
    r.duts[0].sizes[0].loss[0].ir_bps = Some(97e6);
    finish(&mut r).unwrap();
    assert!(r.checks.iter().all(|c| !c.passed), "{:?}", r.checks);
    // the tables print
    let t = text(&r);
    assert!(
        t.contains("weir: throughput (26.1)")
            && t.contains("kernel:htb: back-to-back frames (26.4)"),
        "{t}"
    );
}

#[test]
fn the_class_under_test_is_the_default_or_named() {
    let p = Policy::parse(DEFAULT_POLICY.0, DEFAULT_POLICY.1).unwrap();
    let (name, bps, src) = class_under_test(&p, &Rfc2544Config::quick()).unwrap();
    assert_eq!((name.as_str(), bps), ("all", 100_000_000));
    assert_eq!(src, Ipv4Addr::new(10, 77, 200, 1));
    let y = crate::tests::y1564::DEFAULT_POLICY;
    let p = Policy::parse(y.0, y.1).unwrap();
    let mut c = Rfc2544Config::quick();
    c.class = Some("video".into());
    // video may borrow up to its ceil, 30 Mbit/s
    assert_eq!(class_under_test(&p, &c).unwrap().1, 30_000_000);
    c.class = Some("gold".into());
    let e = class_under_test(&p, &c).unwrap_err().to_string();
    assert!(e.contains("--class gold: no such class"), "{e}");
}

#[test]
fn settings_that_cannot_run_are_refused() {
    validate(&Rfc2544Config::quick()).unwrap();
    validate(&Rfc2544Config::paper()).unwrap();
    type Change = fn(&mut Rfc2544Config);
    let cases: Vec<(Change, &str)> = vec![
        (|c| c.duts.clear(), "no DUT"),
        (|c| c.duts = vec!["kernel:tbf".into()], "unknown kernel DUT"),
        (|c| c.sizes = vec![32], "frame sizes [32]"),
        (|c| c.line_bps = 0, "maximum rate 0"),
        (|c| c.trial_s = 0.0, "trial time 0"),
        (|c| c.resolution = 0.5, "resolution 0.5"),
        (|c| c.loss_step = 0.0, "loss step 0"),
        (|c| c.b2b_trials = 0, "back-to-back trials"),
    ];
    for (f, want) in cases {
        let mut c = Rfc2544Config::quick();
        f(&mut c);
        let e = validate(&c).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}
