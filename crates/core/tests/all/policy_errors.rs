//! Invalid policies are rejected with `file:line:col` and a specific message.

use crate::common::{errors, has};

use weir_core::policy::{AdaptMode, Policy};

const HEAD: &str =
    "[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"500kbit\"\n";

#[test]
fn unknown_key_is_located() {
    let errs = errors(&format!("{HEAD}rat = \"5kbit\"\n"));
    has(&errs, "p.toml:7:1:");
    has(&errs, "unknown field `rat`");
    has(&errs, "`rate`"); // lists the valid keys
    let errs = errors("[link]\nrate = \"1Mbit\"\n[linkk]\n");
    has(&errs, "p.toml:3:");
    has(&errs, "unknown field `linkk`");
}

#[test]
fn bad_units_are_located_and_explained() {
    let errs = errors(&format!(
        "{HEAD}[[class]]\nname = \"b\"\nrate = \"125kbps\"\n"
    ));
    has(&errs, "p.toml:9:8:");
    has(&errs, "`rate`");
    has(&errs, "kbit");
    let errs = errors("[link]\nrate = 1000000\n");
    has(&errs, "p.toml:2:8:");
    has(&errs, "needs a unit");
    let errs = errors(&format!("{HEAD}limit = \"lots\"\n"));
    has(&errs, "p.toml:7:9:");
    has(&errs, "`limit`");
}

#[test]
fn oversubscribed_children_are_rejected() {
    let errs = errors(&format!(
        "{HEAD}[[class]]\nname = \"b\"\nrate = \"600kbit\"\n"
    ));
    has(&errs, "p.toml:2:8:");
    has(&errs, "children of 'link' are assured 1.1Mbit in total (a 500kbit + b 600kbit), more than its rate 1Mbit");
    // nested
    let errs = errors(&format!(
        "{HEAD}[[class]]\nname = \"x\"\nparent = \"a\"\nrate = \"400kbit\"\n[[class]]\nname = \"y\"\nparent = \"a\"\nrate = \"200kbit\"\n"
    ));
    has(&errs, "p.toml:6:8:");
    has(&errs, "children of 'a' are assured 600kbit");
}

#[test]
fn ceil_below_rate_is_rejected() {
    let errs = errors(&format!("{HEAD}ceil = \"400kbit\"\n"));
    has(&errs, "p.toml:7:8:");
    has(&errs, "`ceil` 400kbit is below the class's rate 500kbit");
}

#[test]
fn duplicate_class_names_are_rejected() {
    let errs = errors(&format!(
        "{HEAD}[[class]]\nname = \"a\"\nrate = \"100kbit\"\n"
    ));
    has(&errs, "p.toml:8:8:");
    has(&errs, "duplicate class name 'a' (first defined at line 4)");
}

#[test]
fn rule_naming_a_missing_class_is_rejected() {
    let errs = errors(&format!(
        "{HEAD}[[rule]]\nclass = \"nope\"\nproto = \"tcp\"\n"
    ));
    has(&errs, "p.toml:8:9:");
    has(&errs, "`class`: 'nope' is not a defined class");
    let errs = errors("[link]\nrate = \"1Mbit\"\ndefault = \"ghost\"\n[[class]]\nname = \"a\"\nrate = \"1kbit\"\n");
    has(&errs, "p.toml:3:11:");
    has(&errs, "'ghost' is not a defined class");
}

#[test]
fn parent_cycles_are_rejected() {
    let text = "[link]\nrate = \"1Mbit\"\ndefault = \"c\"\n\
        [[class]]\nname = \"a\"\nparent = \"b\"\nrate = \"1kbit\"\n\
        [[class]]\nname = \"b\"\nparent = \"a\"\nrate = \"1kbit\"\n\
        [[class]]\nname = \"c\"\nrate = \"1kbit\"\n";
    let errs = errors(text);
    has(&errs, "p.toml:6:10:");
    has(&errs, "parent cycle: a -> b -> a");
    assert_eq!(
        errs.iter().filter(|e| e.contains("cycle")).count(),
        1,
        "{errs:?}"
    );
    let errs = errors("[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nparent = \"a\"\nrate = \"1kbit\"\n");
    has(&errs, "parent cycle: a -> a");
}

#[test]
fn other_mistakes_have_specific_messages() {
    // rule to an inner class
    let errs = errors(&format!(
        "{HEAD}[[class]]\nname = \"x\"\nparent = \"a\"\nrate = \"100kbit\"\n[[rule]]\nclass = \"a\"\n"
    ));
    has(&errs, "rules must name a leaf class");
    // missing default
    let errs = errors("[link]\nrate = \"1Mbit\"\n[[class]]\nname = \"a\"\nrate = \"1kbit\"\n");
    has(&errs, "needs `default = \"CLASS\"`");
    // prio out of range, bad technique, bad prefix, port rule on icmp, bad RED
    let errs = errors(&format!("{HEAD}prio = 9\n"));
    has(&errs, "`prio`: 9 is outside 0..=7");
    let errs = errors("[link]\nrate = \"1Mbit\"\ntechnique = \"wfq\"\n");
    has(
        &errs,
        "unknown technique 'wfq'; expected one of: cbq, cbq+red, cbq+pfq, cbq+pfq+red",
    );
    let errs = errors(&format!(
        "{HEAD}[[rule]]\nclass = \"a\"\nsrc = \"10.0.0.1/8\"\n"
    ));
    has(&errs, "10.0.0.0/8");
    let errs = errors(&format!(
        "{HEAD}[[rule]]\nclass = \"a\"\nproto = \"icmp\"\ndport = 80\n"
    ));
    has(&errs, "can never match");
    let errs = errors(&format!("{HEAD}red = {{ min = \"20p\", max = \"10p\" }}\n"));
    has(&errs, "need 0 < min < max");
    let errs = errors(&format!("{HEAD}red = {{ min = \"20p\", maxp = 0.1 }}\n"));
    has(&errs, "unknown field `maxp`");
    // every problem is reported, in file order
    let errs = errors(&format!(
        "{HEAD}ceil = \"1kbit\"\nprio = -1\n[[rule]]\nclass = \"zz\"\n"
    ));
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn warnings_do_not_reject() {
    let p = Policy::parse(
        "p.toml",
        "[link]\nrate = \"1Mbit\"\ntechnique = \"cbq\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1kbit\"\n[[class]]\nname = \"b\"\nrate = \"1kbit\"\n[class.session]\nguarantee = \"50%\"\n",
    )
    .unwrap();
    let w: Vec<String> = p.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.iter().any(|w| w.contains("class 'b' has no rule")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("not enforced under technique cbq")),
        "{w:?}"
    );
}

/// Random text never panics the parser.
#[test]
fn garbage_never_panics() {
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&"[\\[\\]a-z =\"0-9.%\n#{},]{0,200}", |s| {
            let _ = Policy::parse("g.toml", &s);
            Ok(())
        })
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::default();
    let keys = prop::sample::select(vec![
        "rate = \"1kbit\"",
        "ceil = \"2kbit\"",
        "parent = \"a\"",
        "parent = \"b\"",
        "name = \"a\"",
        "name = \"b\"",
        "[[class]]",
        "[[rule]]",
        "class = \"a\"",
        "prio = 3",
        "red = true",
        "[class.session]",
        "guarantee = \"10%\"",
        "limit = \"5p\"",
        "queue = \"pfq\"",
        "rate = \"0%\"",
        "ceil = \"100%\"",
        "default = \"a\"",
    ]);
    runner
        .run(&prop::collection::vec(keys, 0..30), |lines| {
            let text = format!("[link]\nrate = \"1Mbit\"\n{}\n", lines.join("\n"));
            if let Ok(p) = Policy::parse("g.toml", &text) {
                p.build(weir_core::Instant::ZERO)
                    .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn mss_keys_are_checked_with_positions() {
    let errs = errors(&format!("{HEAD}mss = 20\n"));
    has(&errs, "`mss`: 20 is outside 88..=65495");
    let errs = errors(&format!("{HEAD}mss = \"small\"\n"));
    has(
        &errs,
        "`mss`: expected bytes of TCP payload per segment (e.g. 256) or \"pmtu\"",
    );
    let errs = errors(&format!("{HEAD}[[rule]]\nclass = \"a\"\nmss = 70000\n"));
    has(&errs, "`mss`: 70000 is outside 88..=65495");
    // accepted: bytes on a class, "pmtu" on a rule
    let text = format!("{HEAD}mss = 256\n[[rule]]\nclass = \"a\"\nmss = \"pmtu\"\n");
    weir_core::policy::Policy::parse("t.toml", &text).unwrap_or_else(|e| panic!("{e}"));
}

/// A per-session cap's `burst` (the premium shaper's bucket depth) needs the cap and must
/// hold a full-size packet.
#[test]
fn session_burst_needs_a_cap_and_an_mtu() {
    let pfq = "[[class]]\nname = \"ef\"\nrate = \"100kbit\"\nqueue = \"pfq\"\n[class.session]\n";
    let errs = errors(&format!("{HEAD}{pfq}burst = \"3000B\"\n"));
    has(&errs, "p.toml:12:9:");
    has(&errs, "needs a session `ceil`");
    let errs = errors(&format!(
        "{HEAD}{pfq}ceil = \"64kbit\"\nburst = \"1000B\"\n"
    ));
    has(&errs, "p.toml:13:9:");
    has(&errs, "below the link mtu 1514 B");
    let ok = Policy::parse(
        "p.toml",
        &format!("{HEAD}{pfq}ceil = \"64kbit\"\nburst = \"3000B\"\n"),
    )
    .unwrap();
    let ef = ok.classes.iter().find(|c| c.name == "ef").unwrap();
    assert_eq!(ef.session.cap_burst(ok.mtu), Some(3000));
    assert!(
        ok.describe().contains("cap 64kbit/session (burst 3kB)"),
        "{}",
        ok.describe()
    );
}

/// `[adapt]` (Postgate): every key checked, errors located.
#[test]
fn adapt_errors_are_located() {
    let head = "[link]\nrate = \"8Mbit\"\ndirection = \"inbound\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"4Mbit\"\n[adapt]\n";
    let good = "mode = \"postgate\"\ntarget = \"10.0.0.1\"\nsource = \"10.0.0.254\"\n";
    let p = Policy::parse("p.toml", &format!("{head}{good}")).unwrap();
    let a = p.adapt.as_ref().unwrap();
    let AdaptMode::Postgate(pg) = &a.mode else {
        panic!("{a:?}")
    };
    assert_eq!(pg.weights, vec![0.5]);
    assert_eq!((pg.p, pg.line_bps), (100, 8_000_000));

    let errs = errors(&format!("{head}{good}intervl = \"5ms\"\n"));
    has(&errs, "p.toml:12:1:");
    has(&errs, "unknown field `intervl`");
    let errs = errors(&format!(
        "{head}mode = \"magic\"\ntarget = \"10.0.0.1\"\nsource = \"10.0.0.254\"\n"
    ));
    has(&errs, "p.toml:9:8:");
    has(&errs, "'magic' is not one of postgate, autorate");
    let errs = errors(&format!(
        "{head}mode = \"postgate\"\ntarget = \"10.0.0.300\"\nsource = \"10.0.0.1\"\n"
    ));
    has(&errs, "p.toml:10:10:");
    has(&errs, "'10.0.0.300' is not an IPv4 address");
    let errs = errors(&format!(
        "{head}mode = \"postgate\"\ntarget = \"10.0.0.1\"\n"
    ));
    has(&errs, "[adapt] needs `source`");
    let errs = errors(&format!(
        "{head}{good}interval = \"100ms\"\ntimeout = \"50ms\"\n"
    ));
    has(&errs, "p.toml:13:11:");
    has(&errs, "must be longer than the probe `interval`");
    let errs = errors(&format!("{head}{good}p = 0\n"));
    has(&errs, "p.toml:12:5:");
    has(&errs, "outside 1..=10000");
    let errs = errors(&format!("{head}{good}floor = \"9Mbit\"\n"));
    has(&errs, "is not within the line's 8Mbit");
    let errs = errors(&format!("{head}{good}weights = {{ b = 1 }}\n"));
    has(&errs, "'b' names no class");
    let errs = errors(&format!("{head}{good}weights = {{ a = -1 }}\n"));
    has(&errs, "'a' needs a number above 0");
    let both = head.replace("\"inbound\"", "\"both\"");
    let errs = errors(&format!("{both}{good}"));
    has(&errs, "p.toml:8:1:");
    has(&errs, "set [link] direction to \"inbound\" or \"outbound\"");
}

/// `[adapt] mode = "autorate"`: defaults, every key checked, the other mode's keys refused.
#[test]
fn autorate_errors_are_located() {
    let head = "[link]\nrate = \"20Mbit\"\ndirection = \"inbound\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"10Mbit\"\n[adapt]\n";
    let good = "mode = \"autorate\"\nreflectors = [\"10.0.0.1\", \"10.0.0.2\", \"10.0.0.3\"]\nsource = \"10.0.0.254\"\n";
    let p = Policy::parse("p.toml", &format!("{head}{good}")).unwrap();
    let a = p.adapt.as_ref().unwrap();
    let AdaptMode::Autorate(ar) = &a.mode else {
        panic!("{a:?}")
    };
    assert_eq!(
        (ar.min_bps, ar.base_bps, ar.max_bps),
        (2_000_000, 20_000_000, 20_000_000)
    );
    assert_eq!((ar.reflectors, ar.pingers), (3, 3));
    assert_eq!(a.interval.as_nanos(), 300_000_000);
    assert!(
        p.describe()
            .contains("adapt autorate: probe 10.0.0.1, 10.0.0.2, 10.0.0.3"),
        "{}",
        p.describe()
    );

    let p = Policy::parse(
        "p.toml",
        &format!("{head}{good}floor = \"25%\"\nbase = \"15Mbit\"\npingers = 2\ngateway = \"10.0.0.9\"\ndelay_threshold = \"20ms\"\nhigh_load = 0.8\n"),
    )
    .unwrap();
    let a = p.adapt.as_ref().unwrap();
    let AdaptMode::Autorate(ar) = &a.mode else {
        panic!()
    };
    assert_eq!(
        (ar.min_bps, ar.base_bps, ar.pingers),
        (5_000_000, 15_000_000, 2)
    );
    assert_eq!(ar.delay_thr.as_nanos(), 20_000_000);
    assert_eq!(
        (ar.up_thr.as_nanos(), ar.down_thr.as_nanos()),
        (6_666_666, 40_000_000)
    );
    assert_eq!(a.gateway, Some("10.0.0.9".parse().unwrap()));

    let errs = errors(&format!("{head}{good}p = 100\n"));
    has(&errs, "p.toml:12:5:");
    has(
        &errs,
        "`p` belongs to mode = \"postgate\", not \"autorate\"",
    );
    let errs = errors(&format!(
        "{head}mode = \"autorate\"\nsource = \"10.0.0.254\"\n"
    ));
    has(&errs, "needs `reflectors`");
    let errs = errors(&format!(
        "{head}mode = \"autorate\"\nreflectors = [\"10.0.0.1\", \"10.0.0.1\"]\nsource = \"10.0.0.254\"\n"
    ));
    has(&errs, "p.toml:10:27:");
    has(&errs, "10.0.0.1 is listed twice");
    let errs = errors(&format!(
        "{head}mode = \"autorate\"\nreflectors = [\"10.0.0.1\", \"x\"]\nsource = \"10.0.0.254\"\n"
    ));
    has(&errs, "'x' is not an IPv4 address");
    let errs = errors(&format!("{head}{good}pingers = 4\n"));
    has(&errs, "outside 1..=3");
    let errs = errors(&format!("{head}{good}delay_threshold = \"0ms\"\n"));
    has(&errs, "`delay_threshold`: must be above 0");
    let errs = errors(&format!("{head}{good}high_load = 1.5\n"));
    has(&errs, "`high_load`: 1.5 is not in (0, 1)");
    let errs = errors(&format!("{head}{good}base = \"30Mbit\"\n"));
    has(&errs, "not within the line's 20Mbit");
    let errs = errors(&format!("{head}{good}base = \"1Mbit\"\n"));
    has(&errs, "0 < floor <= base <= line");
    let errs = errors(&format!("{head}{good}source = \"10.0.0.2\"\n"));
    has(&errs, "duplicate key");
    let errs = errors(&format!(
        "{head}mode = \"autorate\"\nreflectors = [\"10.0.0.1\"]\nsource = \"10.0.0.1\"\n"
    ));
    has(&errs, "`source` must differ");
}

#[test]
fn layer7_keys_are_checked_and_located() {
    let rule = |body: &str| format!("{HEAD}[[rule]]\nclass = \"a\"\n{body}\n");
    let errs = errors(&rule("http.hots = \"x.org\""));
    has(&errs, "p.toml:9:");
    has(&errs, "unknown field `hots`");
    has(&errs, "`host`");
    let errs = errors(&rule("http.path = \"video/*\""));
    has(&errs, "p.toml:9:13:");
    has(
        &errs,
        "`http.path`: invalid http.path 'video/*': a path pattern starts with /",
    );
    let errs = errors(&rule("http.mime = [\"video/*\", \"audio\"]"));
    has(&errs, "p.toml:9:13:");
    has(&errs, "type/subtype");
    let errs = errors(&rule("tls.sni = \"\""));
    has(&errs, "p.toml:9:11:");
    has(&errs, "empty pattern");
    let errs = errors(&rule("tls.name = \"a\""));
    has(&errs, "unknown field `name`");
    let errs = errors(&rule("app = \"gopher\""));
    has(&errs, "p.toml:9:7:");
    has(&errs, "expected one of ftp, ftp-data, http, tls");
    // an interior router classifies by DSCP only
    let errs = errors(
        "[link]\nrate = \"1Mbit\"\nrole = \"interior\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"500kbit\"\n[[rule]]\nclass = \"a\"\nhttp.host = \"x\"\n",
    );
    has(&errs, "p.toml:10:13:");
    has(&errs, "`http.host`: an interior router");
    // 64 distinct conditions at most
    let many: String = (0..65)
        .map(|i| format!("[[rule]]\nclass = \"a\"\ntls.sni = \"h{i}.example\"\n"))
        .collect();
    let errs = errors(&format!("{HEAD}{many}"));
    has(&errs, "at most 64 distinct layer-7 conditions");
}
