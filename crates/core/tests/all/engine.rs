//! The engine issue's acceptance figures, measured on the virtual clock with the policies
//! in examples/ (seed 000's Basic Test and Advanced Test).

use weir_core::policy::{Policy, Technique};
use weir_core::time::Duration;
use weir_core::whatif::{self, Idle, WhatIf, WhatIfReport};

fn example(name: &str) -> Policy {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    Policy::load(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{e}"))
}

fn run(p: &Policy, w: WhatIf) -> WhatIfReport {
    whatif::run(p, &w).unwrap()
}

fn class<'a>(r: &'a WhatIfReport, name: &str) -> &'a whatif::ClassReport {
    r.classes.iter().find(|c| c.name == name).unwrap()
}

/// Every leaf of the Basic Test policy (T1 into 20/40/128/256/1100 kbit/s) delivers its
/// assured rate within ±1 % with all classes backlogged, the 20 kbit/s class included; and
/// per-flow queuing splits each class into four equal quarters.
#[test]
fn basic_test_policy_accuracy_and_session_guarantee() {
    let p = example("basic-test.toml");
    let r = run(
        &p,
        WhatIf {
            duration: Duration::from_secs(200),
            warmup: Duration::from_secs(10),
            flows: 4,
            ..Default::default()
        },
    );
    for c in r.classes.iter().filter(|c| c.leaf) {
        let acc = c.delivered_bps / c.rate_bps as f64;
        assert!((acc - 1.0).abs() <= 0.01, "{}: accuracy {acc:.4}", c.name);
        assert_eq!(c.sessions_bps.len(), 4);
        for s in &c.sessions_bps {
            let share = s / (c.rate_bps as f64 / 4.0);
            // a 20 kbit/s class sends 1.6 packets/s: allow one packet over the run
            let tol = 0.01f64.max(1514.0 * 8.0 / 190.0 / (c.rate_bps as f64 / 4.0));
            assert!(
                (share - 1.0).abs() <= tol,
                "{}: session share {share:.4}",
                c.name
            );
        }
        assert!(c.jain.unwrap() >= 0.999, "{}: jain {:?}", c.name, c.jain);
    }
    assert!(
        r.utilisation >= 0.99 && r.utilisation <= 1.01,
        "{}",
        r.utilisation
    );
}

/// Four backlogged sessions in one class each get a quarter ±1 % with per-flow queuing,
/// even when they are unequally aggressive (windows 1, 2, 4, 8 packets); without it the
/// same sessions split the class in proportion to their aggressiveness.
#[test]
fn per_flow_queuing_is_fair_and_fifo_is_not() {
    let text = r#"
        [link]
        rate = "1Mbit"
        default = "bulk"
        [[class]]
        name = "bulk"
        rate = "1Mbit"
        [class.session]
        guarantee = "25%"
    "#;
    let p = Policy::parse("inline.toml", text).unwrap();
    let w = WhatIf {
        duration: Duration::from_secs(60),
        warmup: Duration::from_secs(5),
        flows: 4,
        windows: vec![1, 2, 4, 8],
        ..Default::default()
    };
    let pfq = run(&p.with_technique(Technique::CbqPfq), w.clone());
    let c = class(&pfq, "bulk");
    for s in &c.sessions_bps {
        assert!((s / 250_000.0 - 1.0).abs() <= 0.01, "pfq session {s}");
    }
    assert!(c.jain.unwrap() >= 0.999, "pfq jain {:?}", c.jain);

    let fifo = run(&p.with_technique(Technique::Cbq), w);
    let c = class(&fifo, "bulk");
    let j = c.jain.unwrap();
    assert!(j < 0.75, "fifo jain {j} should show the unfairness");
    // shares follow the windows 1:2:4:8
    let s = &c.sessions_bps;
    assert!(s[3] > 6.0 * s[0], "fifo shares {s:?}");
    // the class total is the same either way
    assert!((c.delivered_bps / 1e6 - 1.0).abs() < 0.01);
}

/// Inter-class borrowing (seed 000 Table 6): while class b is idle, a borrows its rate up
/// to its ceil, the link stays ≥ 99 % utilised, and b is served again within two packet
/// times of its return.
#[test]
fn inter_class_borrowing_and_return() {
    let p = example("borrowing.toml");
    let r = run(
        &p,
        WhatIf {
            duration: Duration::from_secs(20),
            flows: 1,
            idle: vec![Idle::parse("b@5s-15s").unwrap()],
            interval: Duration::from_secs(1),
            ..Default::default()
        },
    );
    let (a, b, link) = (class(&r, "a"), class(&r, "b"), class(&r, "link"));
    // A T1 carries 127.5 full frames a second, so a one-second bucket holds 126..=129 of
    // them: per second allow one and a half frames, over the idle period 1 %.
    let frame = 1514.0 * 8.0;
    for s in 6..15 {
        assert!(
            link.series_bps[s] >= 1_544_000.0 - 1.5 * frame,
            "second {s}: link {}",
            link.series_bps[s]
        );
        assert_eq!(b.series_bps[s], 0.0);
    }
    let a_idle: f64 = a.series_bps[6..15].iter().sum::<f64>() / 9.0;
    assert!(
        a_idle >= 0.99 * 1_544_000.0,
        "a took {a_idle} of b's idle bandwidth"
    );
    for s in (1..5).chain(16..20) {
        for x in [a.series_bps[s], b.series_bps[s]] {
            assert!((x / 772_000.0 - 1.0).abs() < 0.02, "second {s}: {x}");
        }
    }
    let pkt_time = 1514.0 * 8.0 / 1_544_000.0;
    let d = b.resume_delay_s.unwrap();
    assert!(
        d <= 2.0 * pkt_time,
        "b resumed after {d}s (> 2 packet times {})",
        2.0 * pkt_time
    );
    assert!(r.utilisation >= 0.99);
}

/// Borrowing respects ceilings: with one class idle, the spare goes to the busy classes but
/// none exceeds its ceil; what the capped class cannot take goes to the other.
#[test]
fn borrowing_stops_at_ceil() {
    let text = r#"
        [link]
        rate = "10Mbit"
        default = "a"
        [[class]]
        name = "a"
        rate = "2Mbit"
        ceil = "3Mbit"
        [[class]]
        name = "b"
        rate = "2Mbit"
        [[class]]
        name = "idle"
        rate = "6Mbit"
    "#;
    let p = Policy::parse("inline.toml", text).unwrap();
    let r = run(
        &p,
        WhatIf {
            duration: Duration::from_secs(30),
            warmup: Duration::from_secs(1),
            flows: 2,
            idle: vec![Idle::parse("idle@0s-30s").unwrap()],
            ..Default::default()
        },
    );
    let a = class(&r, "a").delivered_bps;
    let b = class(&r, "b").delivered_bps;
    assert!((a / 3e6 - 1.0).abs() < 0.01, "a {a}");
    assert!((b / 7e6 - 1.0).abs() < 0.01, "b {b}");
    assert!(r.utilisation > 0.99);
}

/// Intra-class borrowing (seed 000 Table 6): one class, two sessions each assured half; when
/// session 2 stops, session 1 takes the whole class at once.
#[test]
fn intra_class_borrowing() {
    let text = r#"
        [link]
        rate = "1.544Mbit"
        technique = "cbq+pfq"
        default = "a"
        [[class]]
        name = "a"
        rate = "100%"
        [class.session]
        guarantee = "50%"
        ceil = "100%"
    "#;
    let p = Policy::parse("inline.toml", text).unwrap();
    let r = run(
        &p,
        WhatIf {
            duration: Duration::from_secs(10),
            flows: 2,
            idle: vec![Idle::parse("a#2@5s-10s").unwrap()],
            interval: Duration::from_secs(1),
            ..Default::default()
        },
    );
    let a = class(&r, "a");
    for s in 6..10 {
        assert!(
            a.series_bps[s] >= 0.99 * 1_544_000.0,
            "second {s}: {}",
            a.series_bps[s]
        );
    }
}

/// The hierarchical example: idle bandwidth stays in the subtree first.
#[test]
fn hierarchy_example_runs_and_respects_assured_rates() {
    let p = example("hierarchy.toml");
    let r = run(
        &p,
        WhatIf {
            duration: Duration::from_secs(20),
            warmup: Duration::from_secs(1),
            flows: 3,
            idle: vec![Idle::parse("sales-all@0s-20s").unwrap()],
            ..Default::default()
        },
    );
    // sales idle: eng takes the whole link, its two leaves at least their rates
    let eng = class(&r, "eng").delivered_bps;
    assert!(eng >= 0.99e7, "eng {eng}");
    assert!(class(&r, "eng-interactive").delivered_bps >= 0.99e6);
    assert!(class(&r, "eng-bulk").delivered_bps >= 0.99 * 5e6);
}

/// Every technique preset runs every example; counters balance (checked inside `run`).
#[test]
fn all_presets_run_all_examples() {
    for f in [
        "basic-test.toml",
        "borrowing.toml",
        "hierarchy.toml",
        "voip-ftp.toml",
    ] {
        let p = example(f);
        for t in Technique::ALL {
            let r = whatif::run(
                &p.with_technique(t),
                &WhatIf {
                    duration: Duration::from_secs(5),
                    flows: 3,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{f} {}: {e}", t.name()));
            assert!(r.utilisation > 0.9, "{f} {}: {}", t.name(), r.utilisation);
        }
    }
}

/// Seed 004's dsclsfr as link sharing with priorities (examples/diffserv-interior.toml),
/// every class backlogged: EF gets exactly its 5 Mbit/s reservation and no more (policed),
/// network control its 1 Mbit/s, and AF1 and best effort share the remaining 94 Mbit/s
/// 40:60; with AF1 silent, best effort takes all 94 Mbit/s and EF still only 5.
#[test]
fn the_dsclsfr_example_is_priority_plus_weighted_fair_sharing() {
    let p = example("diffserv-interior.toml");
    let mut w = WhatIf {
        duration: Duration::from_secs(6),
        warmup: Duration::from_secs(1),
        flows: 2,
        ..Default::default()
    };
    let r = whatif::run(&p, &w).unwrap();
    let got = |r: &whatif::WhatIfReport, n: &str| class(r, n).delivered_bps / 1e6;
    for (n, want) in [("ef", 5.0), ("nc", 1.0), ("af1", 37.6), ("be", 56.4)] {
        let g = got(&r, n);
        assert!(
            (g - want).abs() <= 0.02 * want,
            "{n}: {g:.2} Mbit/s, want {want}"
        );
    }
    w.idle = vec![whatif::Idle::parse("af1@0s-6s").unwrap()];
    let r = whatif::run(&p, &w).unwrap();
    assert!(got(&r, "af1") < 0.01);
    assert!(
        (got(&r, "be") - 94.0).abs() <= 0.02 * 94.0,
        "be {:.2}",
        got(&r, "be")
    );
    assert!(got(&r, "ef") <= 5.0 * 1.01, "ef {:.2}", got(&r, "ef"));
}

/// Seed 004's premium shaper (examples/diffserv-ingress.toml): every EF session is shaped
/// by its own 64 kbit/s token bucket. 40 backlogged sessions get 64 kbit/s each (2.56
/// Mbit/s in all, below the class's 5 Mbit/s reservation). 100 would want 6.4 Mbit/s:
/// the class's policing ceil holds them to 5 Mbit/s, and no session exceeds its bucket
/// (they are not equal then: 100 sessions of 8-packet windows overrun the class's 80
/// packets, and the longest session loses its head packet).
#[test]
fn the_premium_shaper_holds_each_ef_session_to_its_bucket() {
    let p = example("diffserv-ingress.toml");
    for (flows, class_want) in [(40, 2.56), (100, 5.0)] {
        let w = WhatIf {
            duration: Duration::from_secs(6),
            warmup: Duration::from_secs(1),
            flows,
            ..Default::default()
        };
        let r = whatif::run(&p, &w).unwrap();
        let ef = class(&r, "ef");
        let got = ef.delivered_bps / 1e6;
        assert!(
            (got - class_want).abs() <= 0.02 * class_want,
            "{flows} sessions: ef {got:.3} Mbit/s, want {class_want}"
        );
        // the bucket's envelope over the 5 s measured: 3000 B + 64 kbit/s x 5 s
        let most = 0.064 + 3000.0 * 8.0 / 5.0 / 1e6;
        for (k, s) in ef.sessions_bps.iter().enumerate() {
            let g = s / 1e6;
            let fair = if flows == 40 { 0.064 * 0.97 } else { 0.0 };
            assert!(
                g <= most && g >= fair,
                "{flows} sessions: session {k} {g:.4} Mbit/s, want {fair:.4}..{most:.4}"
            );
        }
    }
}
