//! Rates that differ by direction: `[link] inbound_rate` and the classes' `inbound_rate`
//! and `inbound_ceil` (an asymmetric line, a subscriber's download and upload). Shares
//! resolve against the parent's inbound rates; what has no inbound key is as outbound.

use crate::common::{errors, has};

use weir_core::policy::Policy;
use weir_core::{Direction, Instant};

const ASYM: &str = r#"
[link]
rate = "20Mbit"
inbound_rate = "100Mbit"
direction = "both"
default = "web"

[[class]]
name = "voice"
rate = "1Mbit"
inbound_rate = "2Mbit"
prio = 0

[[class]]
name = "bulk"
rate = "50%"
ceil = "100%"

[[class]]
name = "web"
parent = "bulk"
rate = "4Mbit"
inbound_ceil = "60%"
"#;

fn rates(p: &Policy, dir: Direction) -> Vec<(String, u64, u64)> {
    p.for_direction(dir)
        .classes
        .iter()
        .map(|c| (c.name.clone(), c.rate, c.ceil))
        .collect()
}

#[test]
fn each_direction_gets_its_rates() {
    let p = Policy::parse("p.toml", ASYM).unwrap_or_else(|e| panic!("{e}"));
    let m = 1_000_000;
    assert_eq!(
        rates(&p, Direction::Outbound),
        vec![
            ("link".into(), 20 * m, 20 * m),
            ("voice".into(), m, 20 * m),
            ("bulk".into(), 10 * m, 20 * m),
            ("web".into(), 4 * m, 20 * m),
        ]
    );
    // inbound: the link 100 Mbit/s; voice its own 2 Mbit/s; bulk 50 % of 100; web keeps
    // its absolute 4 Mbit/s, its ceil 60 % of bulk's inbound ceil (100)
    assert_eq!(
        rates(&p, Direction::Inbound),
        vec![
            ("link".into(), 100 * m, 100 * m),
            ("voice".into(), 2 * m, 100 * m),
            ("bulk".into(), 50 * m, 100 * m),
            ("web".into(), 4 * m, 60 * m),
        ]
    );
    let inb = p.for_direction(Direction::Inbound);
    assert_eq!(inb.link_rate, 100 * m);
    // default quanta resolve among the siblings' inbound rates: voice 2, bulk 50 -> 25 MTU
    let q = |p: &Policy, n: &str| p.classes.iter().find(|c| c.name == n).unwrap().quantum;
    assert_eq!((q(&p, "voice"), q(&p, "bulk")), (1514, 10 * 1514));
    assert_eq!((q(&inb, "voice"), q(&inb, "bulk")), (1514, 25 * 1514));
    // the device shapes each direction at its own rates
    let d = p.build_device(Instant::ZERO).unwrap();
    for (dir, link) in [(Direction::Outbound, 20 * m), (Direction::Inbound, 100 * m)] {
        let s = d.snapshot(dir, Instant::ZERO).unwrap();
        let root = s.classes.iter().find(|c| c.name == "link").unwrap();
        assert_eq!(root.rate_bps, link, "{dir:?}");
    }
    let text = p.describe();
    assert!(
        text.contains("inbound (WAN -> LAN): link 100Mbit"),
        "{text}"
    );
}

#[test]
fn without_inbound_keys_both_directions_are_the_same_policy() {
    let p = Policy::parse(
        "p.toml",
        "[link]\nrate = \"10Mbit\"\ndirection = \"both\"\n",
    )
    .unwrap();
    assert!(matches!(
        p.for_direction(Direction::Inbound),
        std::borrow::Cow::Borrowed(_)
    ));
    assert!(!p.describe().contains("inbound (WAN"));
}

#[test]
fn inbound_mistakes_are_located_and_explained() {
    let head = "[link]\nrate = \"10Mbit\"\ninbound_rate = \"50Mbit\"\ndefault = \"a\"\n\
                [[class]]\nname = \"a\"\nrate = \"1Mbit\"\n";
    let errs = errors(&format!(
        "{head}inbound_rate = \"8Mbit\"\ninbound_ceil = \"4Mbit\"\n"
    ));
    has(&errs, "p.toml:9:16:");
    has(
        &errs,
        "`inbound_ceil` 4Mbit is below the class's inbound_rate 8Mbit",
    );
    let errs = errors(&format!(
        "{head}[[class]]\nname = \"b\"\nrate = \"1Mbit\"\ninbound_rate = \"45Mbit\"\n\
         [[class]]\nname = \"c\"\nrate = \"1Mbit\"\ninbound_rate = \"10Mbit\"\n"
    ));
    has(
        &errs,
        "children of 'link' are assured 56Mbit in total inbound",
    );
    has(&errs, "more than its inbound rate 50Mbit");
    let errs = errors("[link]\nrate = \"10Mbit\"\ninbound_rate = \"fast\"\n");
    has(&errs, "p.toml:3:16:");
    has(&errs, "`inbound_rate`");
    // a key read for both directions reports once
    let errs = errors(
        "[link]\nrate = \"10Mbit\"\ninbound_rate = \"20Mbit\"\ndefault = \"a\"\n\
         [[class]]\nname = \"a\"\nrate = \"fast\"\nburst = \"huge\"\n",
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    has(&errs, "p.toml:7:8: `rate`: invalid share 'fast'");
    has(&errs, "p.toml:8:9: `burst`: invalid size 'huge'");
    let errs = errors(&format!("{head}inbound_rate = \"0%\"\n"));
    has(&errs, "p.toml:8:16: `inbound_rate`: invalid share '0%'");
}
