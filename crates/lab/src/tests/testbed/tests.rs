//! The testbed's unit tests (no namespaces).
use super::*;

fn basic() -> Policy {
    Policy::parse(
        "basic-test.toml",
        include_str!("../../../../../examples/basic-test.toml"),
    )
    .unwrap()
}

#[test]
fn addresses_come_from_the_rules_and_are_checked() {
    let p = basic();
    let a = addresses_for_class(&p, "c20", 4, &[]).unwrap();
    assert_eq!(
        a,
        [
            Ipv4Addr::new(10, 1, 1, 1),
            Ipv4Addr::new(10, 1, 1, 2),
            Ipv4Addr::new(10, 1, 1, 3),
            Ipv4Addr::new(10, 1, 1, 4)
        ]
    );
    let b = addresses_for_class(&p, "c20", 2, &a).unwrap();
    assert_eq!(b[0], Ipv4Addr::new(10, 1, 1, 5));
    assert!(addresses_for_class(&p, "nope", 1, &[]).is_err());
    // a session put in the wrong class is refused
    let wrong = SessionPlan {
        name: "x".into(),
        class: "c40".into(),
        src: a[0],
        cc: "cubic".into(),
        mss: None,
        rcvbuf: None,
        start_s: 0.0,
        stop_s: 1.0,
        wan: None,
    };
    let e = check_classes(&p, &[wrong]).unwrap_err().to_string();
    assert!(e.contains("classified into 'c20', not 'c40'"), "{e}");
}

#[test]
fn wan_policy_has_one_profile_per_impaired_session() {
    let mk = |i: u8, wan: Option<Wan>| SessionPlan {
        name: format!("s{i}"),
        class: "c".into(),
        src: Ipv4Addr::new(10, 1, 1, i),
        cc: "cubic".into(),
        mss: None,
        rcvbuf: None,
        start_s: 0.0,
        stop_s: 1.0,
        wan,
    };
    assert!(wan_policy(&[mk(1, None)], 1).is_none());
    let t = wan_policy(
        &[
            mk(1, None),
            mk(
                2,
                Some(Wan {
                    delay_ms: 50.0,
                    loss: Some("periodic 1%".into()),
                }),
            ),
        ],
        9,
    )
    .unwrap();
    let p = Policy::parse("w", &t).unwrap();
    assert_eq!(p.emulators.len(), 1);
    assert_eq!(p.emulators[0].cfg.delay.0, 50_000_000);
    assert_eq!(p.seed, 9);
    assert_eq!(p.rules[0].emulate, Some(0));
}

#[test]
fn line_policy_serialises_everything() {
    let p = Policy::parse("l", &line_policy(125_000, 3)).unwrap();
    assert_eq!(p.emulators.len(), 1);
    assert_eq!(p.rules.len(), 1);
    assert_eq!(p.rules[0].emulate, Some(0));
    assert!(p.rules[0].m.src.is_empty());
}

#[test]
fn dut_list_puts_compare_first_and_names_each_dut_once() {
    assert_eq!(dut_list(false, Vec::new()).unwrap(), None);
    assert_eq!(
        dut_list(false, vec!["kernel:htb".into(), "weir:cbq".into()]).unwrap(),
        Some(vec!["kernel:htb".to_string(), "weir:cbq".to_string()])
    );
    // --compare and a --dut it already lists: eight; one it does not: appended
    let c = dut_list(true, vec!["kernel:htb".into()]).unwrap().unwrap();
    assert_eq!(c, COMPARE);
    let c = dut_list(true, vec!["weir:cbq+pfq+mss256".into()])
        .unwrap()
        .unwrap();
    assert_eq!(c.len(), 9);
    assert_eq!(c[8], "weir:cbq+pfq+mss256");
    let e = dut_list(true, vec!["weir:fast".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown weir technique 'fast'"), "{e}");
}
