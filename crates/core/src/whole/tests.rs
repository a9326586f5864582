//! The rule on policies as a user writes them: rates, the knob, the stages that force a
//! cut, the lookup per class.

use super::*;
use crate::device::Device;
use crate::policy::Policy;
use crate::pool::Direction;
use crate::time::Instant;
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};

/// A TCP frame to port `dport` (the headers of a super-packet: the rule reads no more).
fn frame(dport: u16) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let tcp = TcpSpec {
        src_port: 40000,
        dst_port: dport,
        ..Default::default()
    };
    let n = build::tcp_v4_frame(
        &mut buf,
        &EthSpec::default(),
        &Ipv4Spec::default(),
        &tcp,
        &[0u8; 1448],
    )
    .unwrap();
    buf.truncate(n);
    buf
}

fn device(text: &str) -> Device {
    let p = Policy::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}"));
    p.build_device(Instant::ZERO).unwrap()
}

/// Two classes, 2 Gbit/s (port 5001) and `slow` (port 5002, the default), with `link`
/// added to `[link]` and `extra` after the classes.
fn policy(slow: &str, link: &str, extra: &str) -> String {
    format!(
        "[link]\nrate = \"10Gbit\"\ndefault = \"slow\"\n{link}\n\
         [[class]]\nname = \"fast\"\nrate = \"2Gbit\"\n\
         [[class]]\nname = \"slow\"\nrate = \"{slow}\"\n\
         [[rule]]\nname = \"f\"\nclass = \"fast\"\ndport = 5001\n{extra}"
    )
}

const OUT: Direction = Direction::Outbound;

#[test]
fn auto_keeps_whole_in_classes_assured_a_gigabit() {
    let d = device(&policy("100Mbit", "", ""));
    let rule = d.pipeline(OUT).unwrap().whole();
    assert!(matches!(rule, WholeRule::Classes(_)), "{rule:?}");
    assert!(d.keeps_whole(OUT, &frame(5001)), "2 Gbit/s class");
    assert!(
        !d.keeps_whole(OUT, &frame(5002)),
        "100 Mbit/s default class"
    );
    // headers that do not parse are cut (and forwarded by the default class as frames)
    assert!(!d.keeps_whole(OUT, &frame(5001)[..20]));
    // the boundary: exactly 1 Gbit/s assured is whole, just under is not
    let d = device(&policy("1Gbit", "", ""));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Always);
    let d = device(&policy("999Mbit", "", ""));
    assert!(!d.keeps_whole(OUT, &frame(5002)));
    // a direction the policy does not shape keeps every super-packet whole
    assert!(d.keeps_whole(Direction::Inbound, &frame(5002)));
    // so does a device with no policy
    assert!(Device::passthrough().keeps_whole(OUT, &frame(1)));
}

#[test]
fn the_knob_overrides_the_rate() {
    let d = device(&policy("1Mbit", "super_packets = \"whole\"", ""));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Always);
    let d = device(&policy("5Gbit", "super_packets = \"split\"", ""));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Never);
    assert!(!d.keeps_whole(OUT, &frame(5001)));
    assert!(!d.keeps_whole(Direction::Inbound, &frame(5001)));
    let e = Policy::parse("t.toml", &policy("1Gbit", "super_packets = \"yes\"", ""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("super_packets") && e.contains("auto, whole, split") && e.contains(":4"),
        "{e}"
    );
}

#[test]
fn stages_that_need_wire_frames_cut_them_all() {
    // a meter (DiffServ conditioning) in the direction
    let meter = "[[meter]]\nname = \"m\"\ntype = \"srtcm\"\ncir = \"1Gbit\"\ncbs = \"15p\"\n\
                 ebs = \"15p\"\ngreen = \"af11\"\nyellow = \"af12\"\nred = \"af13\"\n\
                 [[rule]]\nname = \"metered\"\nclass = \"fast\"\ndport = 5003\nmeter = \"m\"\n";
    let d = device(&policy("2Gbit", "role = \"edge\"", meter));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Never);
    // the emulator
    let emu = "[[emulate]]\nname = \"d\"\ndelay = \"10ms\"\n\
               [[rule]]\nname = \"far\"\nclass = \"fast\"\ndport = 5004\nemulate = \"d\"\n";
    let d = device(&policy("2Gbit", "", emu));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Never);
    // framing counted per frame
    let d = device(&policy("2Gbit", "overhead = 18", ""));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Never);
    // MSS clamping alone does not (it rewrites SYNs, never super-packets)
    let d = device(
        &policy("2Gbit", "", "").replace("rate = \"2Gbit\"\n", "rate = \"2Gbit\"\nmss = 1400\n"),
    );
    assert!(
        d.stage_names(OUT).contains(&"mss"),
        "{:?}",
        d.stage_names(OUT)
    );
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Always);
}

#[test]
fn application_rules_make_a_mixed_direction_cut() {
    let app = "[[rule]]\nname = \"web\"\nclass = \"fast\"\napp = \"http\"\n";
    let d = device(&policy("100Mbit", "", app));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Never);
    // unless every class is fast: then the class does not matter
    let d = device(&policy("1Gbit", "", app));
    assert_eq!(d.pipeline(OUT).unwrap().whole(), &WholeRule::Always);
}
