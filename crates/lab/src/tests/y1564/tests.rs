//! Unit tests of the Y.1564 lab's formulas on hand-computed examples.

use super::*;

fn example() -> Policy {
    Policy::parse(DEFAULT_POLICY.0, DEFAULT_POLICY.1).unwrap()
}

fn svc(name: &str, cir: u64, eir: u64) -> Service {
    Service {
        name: name.into(),
        cir_bps: cir,
        eir_bps: eir,
        frame: 1000,
        sac: Sac::parse("10ms/5ms/0.1%").unwrap(),
        src: Ipv4Addr::new(10, 1, 1, 1),
        port: PORT,
    }
}

#[test]
fn sac_is_read_with_its_units_and_default_availability() {
    let s = Sac::parse("10ms/5ms/0.1%").unwrap();
    assert_eq!((s.ftd_ms, s.fdv_ms), (10.0, 5.0));
    assert!((s.flr - 0.001).abs() < 1e-12);
    assert!((s.avail - 0.999).abs() < 1e-12);
    let s = Sac::parse("2/0.5/0/99%").unwrap();
    assert_eq!((s.ftd_ms, s.fdv_ms, s.flr), (2.0, 0.5, 0.0));
    assert!((s.avail - 0.99).abs() < 1e-12);
    for bad in [
        "10ms/5ms",
        "10ms/5ms/0.1%/99%/1",
        "0ms/5ms/0.1%",
        "10ms/x/0.1%",
        "10/5/101%",
    ] {
        let e = Sac::parse(bad).unwrap_err().to_string();
        assert!(e.contains("expected FTD/FDV/FLR[/AVAIL]"), "{bad}: {e}");
    }
}

#[test]
fn the_example_policy_makes_three_services_with_their_profiles() {
    let c = Y1564Config::quick();
    let s = services(&example(), &c).unwrap();
    let got: Vec<(&str, u64, u64, String)> = s
        .iter()
        .map(|s| (s.name.as_str(), s.cir_bps, s.eir_bps, s.src.to_string()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("voice", 5_000_000, 0, "10.1.1.1".to_string()),
            ("video", 20_000_000, 10_000_000, "10.1.2.1".to_string()),
            // the default class: an address no rule matches
            ("data", 30_000_000, 50_000_000, "10.77.200.1".to_string()),
        ]
    );
    assert_eq!(s[2].port, PORT + 2);
}

#[test]
fn services_name_what_is_wrong() {
    let mut c = Y1564Config::quick();
    c.services = vec!["gold".into()];
    let e = services(&example(), &c).unwrap_err().to_string();
    assert!(
        e.contains("service 'gold': no such class") && e.contains("voice, video, data"),
        "{e}"
    );
    let mut c = Y1564Config::quick();
    c.sac_by_class.insert("gold".into(), c.sac);
    let e = services(&example(), &c).unwrap_err().to_string();
    assert!(e.contains("'gold' is not one of the services"), "{e}");
    let nested = "[link]\nrate = \"10Mbit\"\ndefault = \"b\"\n\n[[class]]\nname = \"a\"\nrate = \"5Mbit\"\n\n\
                  [[class]]\nname = \"b\"\nparent = \"a\"\nrate = \"5Mbit\"\n";
    let p = Policy::parse("nested.toml", nested).unwrap();
    let mut c = Y1564Config::quick();
    c.services = vec!["a".into()];
    let e = services(&p, &c).unwrap_err().to_string();
    assert!(e.contains("has children"), "{e}");
}

#[test]
fn a_child_eir_is_bounded_by_its_parents_ceil() {
    let text = "[link]\nrate = \"100Mbit\"\ndefault = \"b\"\n\n\
                [[class]]\nname = \"a\"\nrate = \"40Mbit\"\nceil = \"50Mbit\"\n\n\
                [[class]]\nname = \"b\"\nparent = \"a\"\nrate = \"10Mbit\"\nceil = \"90Mbit\"\n";
    let p = Policy::parse("t.toml", text).unwrap();
    let s = services(&p, &Y1564Config::quick()).unwrap();
    assert_eq!((s[0].cir_bps, s[0].eir_bps), (10_000_000, 40_000_000));
}

#[test]
fn the_configuration_test_steps_by_hand() {
    let c = Y1564Config::quick();
    // CIR 20, EIR 10: 5, 10, 15, 20; EIR test 30; policing 20 + 1.25 x 10 = 32.5 Mbit/s
    let v = plan_config(&svc("video", 20_000_000, 10_000_000), &c);
    let rates: Vec<f64> = v.iter().map(|(_, r)| r / 1e6).collect();
    assert_eq!(rates, vec![5.0, 10.0, 15.0, 20.0, 30.0, 32.5]);
    assert_eq!(v[4].0, Phase::Eir);
    assert_eq!(v[5].0, Phase::Policing);
    // no EIR: no EIR test, policing at 1.25 x CIR = 6.25
    let v = plan_config(&svc("voice", 5_000_000, 0), &c);
    let rates: Vec<f64> = v.iter().map(|(_, r)| r / 1e6).collect();
    assert_eq!(rates, vec![1.25, 2.5, 3.75, 5.0, 6.25]);
    assert_eq!(v[0].0.to_string(), "CIR 25 %");
}

fn stream(phase: Phase, offered: f64, ir: f64, lost: u64) -> Stream {
    Stream {
        service: "video".into(),
        phase,
        offered_bps: offered,
        achieved_bps: offered,
        attempted: 10_000,
        send_errors: 0,
        late_max_ms: 0.0,
        figures: Figures {
            received: 10_000 - lost,
            lost,
            duplicates: 0,
            reordered: 0,
            ir_bps: Some(ir),
            ftd: Some(Ftd {
                min: 0.1,
                mean: 0.2,
                max: 0.5,
                p999: 0.4,
            }),
            ses: 0,
            unavailable_s: 0,
            seconds: 10,
        },
        one_way: true,
        error: None,
        verdict: Verdict::default(),
    }
}

/// On real hosts whose clocks are not known well enough the FTD is not judged; the FDV
/// (a difference of two delays, the offset cancels) still is.
#[test]
fn ftd_is_judged_only_on_known_clocks() {
    let s = svc("video", 20_000_000, 10_000_000);
    let mut st = stream(Phase::CirStep { fraction: 1.0 }, 20e6, 20e6, 0);
    // 20 ms mean against the 10 ms SAC; FDV 30 − 12 = 18 ms against 5 ms
    st.figures.ftd = Some(Ftd {
        min: 12.0,
        mean: 20.0,
        max: 40.0,
        p999: 30.0,
    });
    let v = judge(&st, &s, 0.01);
    assert_eq!(
        v.failures,
        ["FTD 20.000 ms > 10 ms", "FDV 18.000 ms > 5 ms"],
        "{v:?}"
    );
    st.one_way = false;
    let v = judge(&st, &s, 0.01);
    assert_eq!(v.failures, ["FDV 18.000 ms > 5 ms"], "{v:?}");
}

#[test]
fn verdicts_follow_each_tests_criteria() {
    let s = svc("video", 20_000_000, 10_000_000);
    let ok = judge(
        &stream(Phase::CirStep { fraction: 1.0 }, 20e6, 19.9e6, 10),
        &s,
        0.01,
    );
    assert!(ok.passed, "{ok:?}");
    // FLR 11 / 10 000 = 0.11 % > 0.1 %
    let v = judge(
        &stream(Phase::CirStep { fraction: 1.0 }, 20e6, 19.9e6, 11),
        &s,
        0.01,
    );
    assert_eq!(v.failures, vec!["FLR 0.110 % > 0.100 %".to_string()]);
    // IR 19.7 < 20 x 0.99
    let v = judge(
        &stream(Phase::CirStep { fraction: 1.0 }, 20e6, 19.7e6, 0),
        &s,
        0.01,
    );
    assert!(
        !v.passed && v.failures[0].starts_with("IR 19.700 Mbit/s < offered"),
        "{v:?}"
    );
    // policing: anything in [CIR (1 - FLR), CIR+EIR] passes, loss is not judged
    let v = judge(&stream(Phase::Policing, 32.5e6, 30.2e6, 2000), &s, 0.01);
    assert!(v.passed, "{v:?}");
    let v = judge(&stream(Phase::Policing, 32.5e6, 30.4e6, 0), &s, 0.01);
    assert_eq!(
        v.failures,
        vec!["IR 30.400 Mbit/s > CIR+EIR 30.000 Mbit/s".to_string()]
    );
    let v = judge(&stream(Phase::Eir, 30e6, 19.5e6, 0), &s, 0.01);
    assert!(!v.passed);
    // performance: availability judged too
    let mut p = stream(Phase::Performance, 20e6, 20e6, 0);
    p.figures.unavailable_s = 1;
    let v = judge(&p, &s, 0.01);
    assert_eq!(v.failures, vec!["AVAIL 90.000 % < 99.900 %".to_string()]);
    // a sender at 98 % of the rate is generator-limited
    let mut g = stream(Phase::CirStep { fraction: 1.0 }, 20e6, 19.6e6, 0);
    g.achieved_bps = 19.6e6;
    assert!(judge(&g, &s, 0.01).generator_limited);
}

#[test]
fn the_checks_judge_weir_duts_only_and_the_rates_within_one_percent() {
    let s = svc("video", 20_000_000, 10_000_000);
    let mk = |dut: &str, pol_ir: f64| DutRun {
        dut: dut.into(),
        description: String::new(),
        streams: vec![
            stream(Phase::CirStep { fraction: 1.0 }, 20e6, 20.1e6, 0),
            stream(Phase::Policing, 32.5e6, pol_ir, 1000),
            stream(Phase::Performance, 20e6, 20e6, 0),
        ],
        counters: serde_json::Value::Null,
        errors: Vec::new(),
        hosts: Vec::new(),
    };
    let mut r = Y1564Result {
        kind: "y1564".into(),
        meta: BTreeMap::new(),
        config: Y1564Config::quick(),
        policy_file: "x".into(),
        policy_text: String::new(),
        services: vec![s],
        duts: vec![mk("weir", 30.2e6), mk("kernel:htb", 31e6)],
        checks: Vec::new(),
    };
    finish(&mut r).unwrap();
    let lines: Vec<String> = r.checks.iter().map(|c| c.to_string()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0]
        .starts_with("PASS weir: every service passes the service configuration test [2 streams]"));
    assert!(lines[1]
        .starts_with("PASS weir: every service passes the service performance test [1 streams]"));
    assert_eq!(
        lines[2],
        "PASS weir: measured CIR and CIR+EIR within 1 % of the profile [2 rates] video CIR +0.50 %, video CIR+EIR +0.67 %"
    );
    // the kernel's policing stream failed, and shows so in its table
    assert!(!r.duts[1].streams[1].verdict.passed);
    let t = text(&r);
    let line = t
        .lines()
        .filter(|l| l.contains("policing"))
        .nth(1)
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        line.starts_with("video") && line.ends_with("FAIL"),
        "{line}"
    );
    // 30.4 is 1.33 % above 30
    r.duts[0].streams[1].figures.ir_bps = Some(30.4e6);
    finish(&mut r).unwrap();
    assert!(!r.checks[0].passed && !r.checks[2].passed);
}

#[test]
fn settings_that_cannot_run_are_refused() {
    let ok = Y1564Config::quick();
    validate(&ok).unwrap();
    type Change = fn(&mut Y1564Config);
    let cases: Vec<(Change, &str)> = vec![
        (|c| c.duts.clear(), "no DUT"),
        (
            |c| c.duts = vec!["weir:nonsense".into()],
            "unknown weir technique",
        ),
        (|c| c.steps = vec![0.5, 1.5], "CIR steps"),
        (|c| c.step_s = 0.1, "step time"),
        (|c| c.overshoot = 1.0, "overshoot"),
        (|c| c.frame = 40, "frame size 40"),
    ];
    for (f, want) in cases {
        let mut c = Y1564Config::quick();
        f(&mut c);
        let e = validate(&c).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}
