//! Technique presets: what a class's queue becomes under each, and how explicit keys and
//! a forced technique (the testbed, `--technique`) interact.

use weir_core::policy::{Policy, QueueKind, Technique};
use weir_core::units::Limit;

const TEXT: &str = r#"
[link]
rate = "10Mbit"
technique = "cbq+red"
default = "plain"

[[class]]
name = "plain"
rate = "1Mbit"

[[class]]
name = "tuned"
rate = "1Mbit"
limit = "1000p"
red = { min = "20p", max = "60p", max_p = 0.1 }

[[class]]
name = "nored"
rate = "1Mbit"
red = false
queue = "pfq"
"#;

fn leaf<'a>(p: &'a Policy, n: &str) -> &'a weir_core::policy::ClassDef {
    &p.classes[p.class_index(n).unwrap()]
}

#[test]
fn written_keys_win_over_the_policys_technique() {
    let p = Policy::parse("t.toml", TEXT).unwrap();
    let plain = leaf(&p, "plain");
    assert_eq!(plain.queue, QueueKind::Fifo);
    assert_eq!(plain.limit, Limit::Packets(100));
    assert_eq!(plain.red.as_ref().unwrap().max, Limit::Packets(15));
    let tuned = leaf(&p, "tuned");
    assert_eq!(tuned.limit, Limit::Packets(1000));
    assert_eq!(tuned.red.as_ref().unwrap().min, Limit::Packets(20));
    let nored = leaf(&p, "nored");
    assert_eq!(nored.queue, QueueKind::Pfq);
    assert!(nored.red.is_none());
    assert_eq!(nored.limit, Limit::Packets(1024), "pfq default limit");
}

#[test]
fn a_forced_technique_decides_queue_and_red_but_keeps_parameters() {
    let p = Policy::parse("t.toml", TEXT).unwrap();
    for t in Technique::ALL {
        let q = p.with_technique(t);
        assert_eq!(q.technique, t);
        let pfq = t.name().contains("pfq");
        let fq = t.name().starts_with("fq_");
        let red = t.name().contains("red");
        let kind = match (pfq, fq) {
            (true, _) => QueueKind::Pfq,
            (_, true) => QueueKind::Fq,
            _ => QueueKind::Fifo,
        };
        for c in q.classes.iter().filter(|c| c.leaf) {
            assert_eq!(c.queue, kind, "{} {}", t.name(), c.name);
            assert_eq!(c.red.is_some(), red, "{} {}", t.name(), c.name);
            // the seed presets mark nothing: the papers' RED dropped
            assert_eq!(c.ecn, fq, "{} {}", t.name(), c.name);
            assert_eq!(c.aqm != weir_core::aqm::AqmKind::None, fq, "{}", t.name());
        }
        // explicit limit and RED parameters survive; unwritten limits follow the queue
        assert_eq!(leaf(&q, "tuned").limit, Limit::Packets(1000));
        if red {
            assert_eq!(leaf(&q, "tuned").red.as_ref().unwrap().max_p, 0.1);
        }
        let want = match kind {
            QueueKind::Pfq => 1024,
            QueueKind::Fq => 10_240,
            QueueKind::Fifo => 100,
        };
        assert_eq!(
            leaf(&q, "plain").limit,
            Limit::Packets(want),
            "{}",
            t.name()
        );
        q.build(weir_core::Instant::ZERO).unwrap();
    }
}

#[test]
fn a_link_only_policy_follows_the_technique() {
    let p = Policy::parse(
        "t.toml",
        "[link]\nrate = \"5Mbit\"\ntechnique = \"cbq+pfq+red\"\n",
    )
    .unwrap();
    assert_eq!(p.classes.len(), 1);
    assert_eq!(p.classes[0].queue, QueueKind::Pfq);
    assert!(p.classes[0].red.is_some());
    let q = p.with_technique(Technique::Cbq);
    assert_eq!(q.classes[0].queue, QueueKind::Fifo);
    assert!(q.classes[0].red.is_none());
}

#[test]
fn session_warnings_follow_the_resolved_queue() {
    let text = "[link]\nrate = \"1Mbit\"\ntechnique = \"cbq\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n[class.session]\nguarantee = \"50%\"\n";
    let p = Policy::parse("t.toml", text).unwrap();
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(p.warnings[0].to_string().starts_with(
        "t.toml:5:1: class 'a': per-session settings are not enforced under technique cbq"
    ));
    // the default's flow queuing shares equally (a guarantee holds), but caps nothing
    let modern = Policy::parse("t.toml", &text.replace("technique = \"cbq\"\n", "")).unwrap();
    assert!(modern.warnings.is_empty(), "{:?}", modern.warnings);
    let capped = text.replace("technique = \"cbq\"\n", "") + "ceil = \"90%\"\n";
    let capped = Policy::parse("t.toml", &capped).unwrap();
    assert!(
        capped.warnings[0]
            .msg
            .contains("not enforced by flow queuing"),
        "{:?}",
        capped.warnings
    );
    let q = p.with_technique(Technique::CbqPfq);
    assert!(q.warnings.is_empty(), "{:?}", q.warnings);
    let r = q.with_technique(Technique::CbqRed);
    assert_eq!(r.warnings.len(), 1);
}
