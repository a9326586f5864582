//! The modern queue's keys (`queue = "fq"`, `aqm`, `target`, `interval`, `ecn`,
//! `isolate`, `ack_filter`), the presets `fq_codel`/`fq_cobalt` and the default: what a
//! leaf becomes, what `weir check` prints, and the mistakes refused at `file:line:col`.

use crate::common::{errors, has};

use weir_core::aqm::AqmKind;
use weir_core::policy::{Policy, QueueKind, Technique};
use weir_core::queue::fq::Isolation;
use weir_core::units::Limit;
use weir_core::{Duration, Instant};

const HEAD: &str =
    "[link]\nrate = \"10Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n";

fn leaf<'a>(p: &'a Policy, n: &str) -> &'a weir_core::policy::ClassDef {
    &p.classes[p.class_index(n).unwrap()]
}

#[test]
fn a_policy_without_a_technique_gets_flow_queuing_with_cobalt_and_ecn() {
    let p = Policy::parse("p.toml", HEAD).unwrap();
    assert_eq!(p.technique, Technique::FqCobalt);
    let a = leaf(&p, "a");
    assert_eq!(a.queue, QueueKind::Fq);
    assert_eq!(a.aqm, AqmKind::Cobalt);
    assert!(a.ecn);
    assert_eq!(a.isolate, Isolation::Triple);
    assert_eq!(a.limit, Limit::Packets(10_240));
    // CAKE's derivation at the class's 1 Mbit/s: one 1514-byte frame takes 12.112 ms,
    // so the target is 1.5 of that, 18.168 ms, and the interval 100 + 13.168 ms
    let text = p.describe();
    assert!(
        text.contains("fq 1024 flows, isolate triple, limit 10240p, cobalt target 18.168ms interval 113.168ms, ecn"),
        "{text}"
    );
    p.build_device(Instant::ZERO).unwrap();
}

#[test]
fn the_class_keys_choose_the_queue_and_its_parameters() {
    let p = Policy::parse(
        "p.toml",
        &format!(
            "{HEAD}aqm = \"codel\"\ntarget = \"2ms\"\ninterval = \"50ms\"\nisolate = \"dual-src\"\necn = false\nlimit = \"2MB\"\n\
             [[class]]\nname = \"voice\"\nrate = \"1Mbit\"\nqueue = \"fifo\"\naqm = \"cobalt\"\n\
             [[class]]\nname = \"old\"\nrate = \"1Mbit\"\nred = true\n\
             [[class]]\nname = \"marking\"\nrate = \"1Mbit\"\nqueue = \"pfq\"\naqm = \"red\"\necn = true\n\
             [[class]]\nname = \"plain\"\nrate = \"1Mbit\"\naqm = \"none\"\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let a = leaf(&p, "a");
    assert_eq!(
        (a.queue, a.aqm, a.ecn, a.isolate),
        (QueueKind::Fq, AqmKind::Codel, false, Isolation::DualSrc)
    );
    assert_eq!(a.target, Some(Duration::from_millis(2)));
    assert_eq!(a.limit, Limit::Bytes(2_000_000));
    let voice = leaf(&p, "voice");
    assert_eq!(
        (voice.queue, voice.aqm, voice.ecn),
        (QueueKind::Fifo, AqmKind::Cobalt, true)
    );
    assert_eq!(
        voice.limit,
        Limit::Packets(1000),
        "sch_codel's limit with an AQM"
    );
    // a RED table under the default technique: RED runs on a FIFO, as before
    let old = leaf(&p, "old");
    assert_eq!(
        (old.queue, old.aqm, old.ecn),
        (QueueKind::Fifo, AqmKind::None, false)
    );
    assert!(old.red.is_some());
    let marking = leaf(&p, "marking");
    assert_eq!((marking.queue, marking.ecn), (QueueKind::Pfq, true));
    assert!(marking.red.is_some());
    let plain = leaf(&p, "plain");
    assert_eq!(
        (plain.queue, plain.aqm, plain.ecn),
        (QueueKind::Fq, AqmKind::None, false)
    );
    let text = p.describe();
    // the written target (2 ms) is raised to 1.5 MTU times at 1 Mbit/s, as CAKE does
    assert!(
        text.contains(
            "fq 1024 flows, isolate dual-src, limit 2MB, codel target 18.168ms interval 66.168ms"
        ),
        "{text}"
    );
    assert!(
        text.contains("fifo limit 1000p, cobalt target 18.168ms"),
        "{text}"
    );
    p.build_device(Instant::ZERO).unwrap();
}

#[test]
fn the_ack_filter_reaches_the_flow_queue() {
    use weir_core::tcp::ack_filter::AckFilterMode;
    for (v, mode) in [
        ("\"on\"", AckFilterMode::On),
        ("\"aggressive\"", AckFilterMode::Aggressive),
        ("true", AckFilterMode::On),
        ("\"off\"", AckFilterMode::Off),
    ] {
        let p = Policy::parse("p.toml", &format!("{HEAD}ack_filter = {v}\n")).unwrap();
        assert_eq!(leaf(&p, "a").ack_filter, mode, "{v}");
        let text = p.describe();
        assert_eq!(
            text.contains(&format!("ack filter {}", mode.name())),
            mode != AckFilterMode::Off,
            "{text}"
        );
        p.build_device(Instant::ZERO).unwrap();
    }
}

#[test]
fn fq_codel_is_flow_fair_and_the_seed_presets_stay_as_they_were() {
    let p = Policy::parse(
        "p.toml",
        &HEAD.replace("[link]\n", "[link]\ntechnique = \"fq_codel\"\n"),
    )
    .unwrap();
    let a = leaf(&p, "a");
    assert_eq!(
        (a.queue, a.aqm, a.isolate, a.ecn),
        (QueueKind::Fq, AqmKind::Codel, Isolation::Flow, true)
    );
    // a file's modern keys give way to a forced seed preset (the labs' DUTs)
    let q = Policy::parse(
        "p.toml",
        &format!("{HEAD}aqm = \"codel\"\nisolate = \"flow\"\n"),
    )
    .unwrap()
    .with_technique(Technique::CbqPfq);
    let a = leaf(&q, "a");
    assert_eq!(
        (a.queue, a.aqm, a.ecn),
        (QueueKind::Pfq, AqmKind::None, false)
    );
    q.build_device(Instant::ZERO).unwrap();
}

#[test]
fn mistakes_are_located_and_explained() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "aqm = \"pie\"\n",
            "p.toml:7:7:",
            "'pie' is not one of codel, cobalt, red, none",
        ),
        (
            "queue = \"sfq\"\n",
            "p.toml:7:9:",
            "not one of fifo, pfq, fq",
        ),
        (
            "isolate = \"per-host\"\n",
            "p.toml:7:11:",
            "isolate: unknown value",
        ),
        (
            "ack_filter = \"maybe\"\n",
            "p.toml:7:14:",
            "not one of off, on, aggressive",
        ),
        ("ecn = \"yes\"\n", "p.toml:7:7:", "expected true or false"),
        (
            "target = \"150ms\"\n",
            "p.toml:7:10:",
            "not shorter than `interval` 100.000ms (the default)",
        ),
        (
            "target = \"50ms\"\ninterval = \"20ms\"\n",
            "p.toml:7:10:",
            "not shorter than `interval`",
        ),
        (
            "target = \"0ms\"\n",
            "p.toml:7:10:",
            "must be longer than 0",
        ),
        (
            "queue = \"fifo\"\nisolate = \"triple\"\n",
            "p.toml:8:11:",
            "host isolation is flow queuing's",
        ),
        (
            "queue = \"pfq\"\nack_filter = \"on\"\n",
            "p.toml:8:14:",
            "needs a TCP-aware flow queue",
        ),
        (
            "queue = \"pfq\"\naqm = \"cobalt\"\n",
            "p.toml:8:7:",
            "seed 000's per-flow queue",
        ),
        (
            "queue = \"fq\"\nred = true\n",
            "p.toml:8:7:",
            "not in flow queuing",
        ),
        (
            "aqm = \"cobalt\"\nred = { min = \"5p\" }\n",
            "p.toml:7:7:",
            "a leaf has one AQM",
        ),
        ("aqm = \"red\"\nred = false\n", "p.toml:7:7:", "contradict"),
        (
            "aqm = \"none\"\ntarget = \"5ms\"\n",
            "p.toml:8:10:",
            "no such AQM",
        ),
        (
            "aqm = \"none\"\necn = true\n",
            "p.toml:8:7:",
            "nothing on this leaf signals congestion",
        ),
    ];
    for (keys, at, what) in cases {
        let errs = errors(&format!("{HEAD}{keys}"));
        has(&errs, at);
        has(&errs, what);
    }
    // on an inner class: the leaves have the queues
    let errs = errors(
        "[link]\nrate = \"10Mbit\"\ndefault = \"b\"\n[[class]]\nname = \"a\"\nrate = \"5Mbit\"\naqm = \"codel\"\n[[class]]\nname = \"b\"\nparent = \"a\"\nrate = \"1Mbit\"\n",
    );
    has(&errs, "p.toml:7:7:");
    has(&errs, "has children");
}
