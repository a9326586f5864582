use super::*;
use crate::framing::Coding;
use crate::time::Duration;
use proptest::prelude::*;

/// The lookup the tests use: `experimental` is a small table, anything else is missing.
fn lookup(name: &str) -> Result<DistTable, String> {
    match name {
        "experimental" => DistTable::parse(
            "experimental.dist",
            "# test table\n-8192 -4096 0 4096 8192 16384\n",
        )
        .map_err(|e| e.to_string()),
        other => Err(format!(
            "no distribution table '{other}' ({other}.dist not found)"
        )),
    }
}

fn netem(s: &str) -> Result<Netem, NetemError> {
    parse(s, &mut lookup)
}

const MS: u64 = 1_000_000;

#[test]
fn the_issues_example() {
    let n = netem("delay 100ms 10ms 25% distribution normal loss 0.1% 25% rate 10mbit").unwrap();
    let c = &n.cfg;
    assert_eq!(c.delay, Duration(100 * MS));
    assert_eq!(c.jitter, Jitter::Normal { sigma: 10 * MS });
    assert_eq!(c.jitter_correlation, 0.25);
    assert_eq!(c.loss, LossModel::correlated(0.001, 0.25));
    assert_eq!(c.rate_bps, Some(10_000_000));
    assert_eq!(c.limit_held, Some(NETEM_LIMIT));
    assert_eq!(c.limits(), Limits::UNLIMITED);
    assert_eq!(n.seed, None);
}

#[test]
fn each_knob_translates() {
    let c = netem("tc qdisc add dev eth0 root netem rate 5kbit 20 100 5")
        .unwrap()
        .cfg;
    assert_eq!(c.rate_bps, Some(5000));
    assert_eq!(c.framing.overhead(), 20);
    assert_eq!(
        c.framing.coding(),
        Coding::Cells {
            size: 100,
            overhead: 5
        }
    );
    let c = netem("delay 10ms reorder 25% 50% gap 5").unwrap().cfg;
    assert_eq!(
        c.reorder_early,
        Reorder {
            probability: 0.25,
            correlation: 0.5,
            gap: 5
        }
    );
    let c = netem("delay 10ms reorder 25%").unwrap().cfg;
    assert_eq!(c.reorder_early.gap, 1);
    let c = netem("loss state 1% 30% 10% 20% 0.1%").unwrap().cfg;
    assert_eq!(c.loss, LossModel::four_state(0.01, &[0.3, 0.1, 0.2, 0.001]));
    // gemodel p r 1-h 1-k: weir's k = 1 - (1-k), h = 1 - (1-h)
    let c = netem("loss gemodel 1% 10% 70% 0.1%").unwrap().cfg;
    let LossModel::GilbertElliott { p, r, k, h } = c.loss else {
        panic!("{:?}", c.loss)
    };
    assert_eq!((p, r), (0.01, 0.1));
    assert!((k - 0.999).abs() < 1e-12 && (h - 0.3).abs() < 1e-12);
    // defaults: r = 1 - p, 1-h = 100 %, 1-k = 0: Bernoulli
    let c = netem("loss gemodel 1%").unwrap().cfg;
    assert!((c.loss.expected_loss() - 0.01).abs() < 1e-12);
    let c = netem("loss 0.5 ecn").unwrap().cfg;
    assert_eq!(
        c.loss,
        LossModel::Bernoulli { p: 0.005 },
        "a bare number is a percent"
    );
    assert!(c.ecn);
    let c = netem("rate 10mbps").unwrap().cfg;
    assert_eq!(c.rate_bps, Some(80_000_000), "tc's mbps is megabytes/s");
    let c = netem("rate 1Gibit limit 2k").unwrap().cfg;
    assert_eq!(c.rate_bps, Some(1 << 30));
    assert_eq!(c.limit_held, Some(2048));
    let c = netem("delay 100 50").unwrap().cfg;
    assert_eq!(c.delay, Duration(100_000), "a bare time is microseconds");
    let c = netem("slot 800us 1ms packets 32 bytes 64k").unwrap().cfg;
    assert_eq!(
        c.slot,
        Some(Slot {
            gap: SlotGap::Uniform {
                min: 800_000,
                max: MS
            },
            packets: Some(32),
            bytes: Some(65536)
        })
    );
    let c = netem("slot distribution normal 1ms 100us").unwrap().cfg;
    assert_eq!(
        c.slot.unwrap().gap,
        SlotGap::Dist {
            delay: MS,
            jitter: Jitter::Normal { sigma: 100_000 }
        }
    );
    let c = netem("delay 10ms 2ms distribution experimental")
        .unwrap()
        .cfg;
    let Jitter::Table { sigma, table } = &c.jitter else {
        panic!("{:?}", c.jitter)
    };
    assert_eq!((*sigma, table.len()), (2 * MS, 6));
    let c = netem("corrupt 0.1% 25% duplicate 1% 10% seed 42").unwrap();
    assert_eq!(c.seed, Some(42));
    assert_eq!((c.cfg.corrupt, c.cfg.corrupt_correlation), (0.001, 0.25));
    assert_eq!((c.cfg.duplicate, c.cfg.duplicate_correlation), (0.01, 0.1));
}

#[test]
fn refusals_name_the_word() {
    let e = netem("delay 100ms 10ms loss 1% frobnicate 3").unwrap_err();
    assert_eq!((e.word.as_str(), e.index), ("frobnicate", 6));
    assert!(
        e.to_string().starts_with("netem: at 'frobnicate' (word 6)"),
        "{e}"
    );
    let e = netem("delay 10ms 1ms distribution nosuchtable").unwrap_err();
    assert_eq!((e.word.as_str(), e.index), ("nosuchtable", 5));
    assert!(e.what.contains("nosuchtable.dist not found"), "{e}");
    let e = netem("loss state 60% 50% 70%").unwrap_err();
    assert!(e.what.contains("p31 + p32"), "{e}");
}

/// Every line of the corpus is translated or refused at the word it says.
#[test]
fn corpus() {
    let text = include_str!("corpus.txt");
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (want, cmd) = line.split_once(" | ").expect("corpus line: WANT | COMMAND");
        let got = netem(cmd);
        match (want.split_once(' '), &got) {
            (None, Ok(nm)) if want == "ok" => {
                println!(
                    "ok    {cmd}\n   -> {}",
                    super::super::spec::describe(&nm.cfg)
                )
            }
            (Some(("refuse", word)), Err(e)) => {
                assert_eq!(e.word, word, "corpus line {}: {cmd}: {e}", i + 1);
                println!("refused {cmd}\n   -> {e}");
            }
            _ => panic!("corpus line {}: {cmd}: want {want}, got {got:?}", i + 1),
        }
        n += 1;
    }
    assert!(n >= 60, "{n} lines");
}

#[test]
fn numbers_as_tc_reads_them() {
    assert_eq!(split_float("1.5ms"), Some((1.5, "ms")));
    assert_eq!(split_float("1e3us"), Some((1000.0, "us")));
    assert_eq!(split_float("2e"), Some((2.0, "e")));
    assert_eq!(split_float(".5%"), Some((0.5, "%")));
    assert_eq!(split_float("."), None);
    assert_eq!(split_float("-"), None);
    assert_eq!(split_float("x1"), None);
    assert_eq!(split_float("1e999"), None);
    assert!(matches("d", "delay") && !matches("", "delay") && !matches("delays", "delay"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary strings never panic.
    #[test]
    fn never_panics(s in "\\PC{0,80}") {
        let _ = netem(&s);
    }

    /// Arbitrary sequences of netem's words and values never panic, and what is
    /// accepted validates.
    #[test]
    fn word_soup_never_panics(words in proptest::collection::vec(prop_oneof![
        Just("delay"), Just("loss"), Just("state"), Just("gemodel"), Just("random"),
        Just("ecn"), Just("reorder"), Just("gap"), Just("rate"), Just("slot"),
        Just("distribution"), Just("normal"), Just("experimental"), Just("packets"),
        Just("bytes"), Just("limit"), Just("corrupt"), Just("duplicate"), Just("seed"),
        Just("10ms"), Just("0"), Just("1"), Just("-1"), Just("50%"), Just("100%"),
        Just("1e9"), Just("10mbit"), Just("0x10"), Just("999999999999"), Just("-0"),
        Just("1.5"), Just("3000"), Just("netem"), Just("tc"),
    ], 0..16)) {
        let s = words.join(" ");
        if let Ok(n) = netem(&s) {
            prop_assert!(n.cfg.validate().is_ok(), "{s}");
        }
    }
}
