//! The policy language's `[[emulate]]` profiles: parsing, errors, routing per rule and per
//! direction, and a shaped-then-emulated pipeline on the virtual clock.

use crate::common::{errors, has};

use std::collections::HashMap;
use weir_core::emulate::{Jitter, LossModel};
use weir_core::policy::{Policy, Shapes};
use weir_core::pool::Direction;
use weir_core::{Ctx, DropCause, Duration, Instant, PktId, Pool, Rng};
use weir_wire::build::{self, EthSpec, Ipv4Spec};

const POLICY: &str = r#"
[link]
rate = "10Mbit"
default = "bulk"
emulate = "wan"
seed = 7

[[class]]
name = "bulk"
rate = "10Mbit"
limit = "1000p"

[[emulate]]
name = "wan"
delay = "20ms"

[[emulate]]
name = "far"
delay = "150ms"
jitter = "1ms"
distribution = "normal"
loss = "periodic 1%"

[[emulate]]
name = "acks"
delay = "5ms"
direction = "inbound"

[[rule]]
name = "far-hosts"
src = "10.1.4.0/24"
emulate = "far"

[[rule]]
name = "ack-path"
dst = "10.1.5.0/24"
emulate = "acks"
"#;

#[test]
fn profiles_parse_and_describe() {
    let p = Policy::parse("p.toml", POLICY).unwrap();
    assert_eq!(p.seed, 7);
    assert_eq!(p.emulators.len(), 3);
    let far = &p.emulators[1];
    assert_eq!(far.cfg.delay, Duration::from_millis(150));
    assert_eq!(far.cfg.jitter, Jitter::Normal { sigma: 1_000_000 });
    assert_eq!(far.cfg.loss, LossModel::Periodic { every: 100 });
    assert_eq!(far.direction, Shapes::Outbound);
    assert_eq!(p.emulators[2].direction, Shapes::Inbound);
    assert_eq!(p.default_emulate, vec![0]);
    assert_eq!(p.rules[0].emulate, Some(1));
    assert_eq!(
        p.rules[0].class, p.default_class,
        "no class: the default class"
    );
    let d = p.describe();
    assert!(d.contains("emulation (seed 7)"), "{d}");
    assert!(d.contains("far-hosts"), "{d}");
    assert!(d.contains("delay 150ms σ 1ms normal"), "{d}");
    assert!(d.contains("other traffic    -> wan"), "{d}");
}

#[test]
fn routing_per_rule_and_direction() {
    let p = Policy::parse("p.toml", POLICY).unwrap();
    let out = p.emulator_for(Direction::Outbound).unwrap().unwrap();
    // profile 0 = wan (the link default), far added for rule 0; the inbound-only "acks"
    // rule is routed to a transparent profile, not to the link default
    assert_eq!(out.names, ["wan", "far", "(none)"]);
    assert_eq!(out.emu.profile_for_key(0), 1);
    assert_eq!(out.emu.profile_for_key(1), 2);
    assert!(out.emu.profiles()[2].config().is_transparent());
    assert_eq!(
        out.emu.profile_for_key(u16::MAX as u32),
        0,
        "no rule: default"
    );
    let inb = p.emulator_for(Direction::Inbound).unwrap().unwrap();
    assert_eq!(inb.names, ["(none)", "acks"]);
    assert_eq!(inb.emu.profile_for_key(1), 1);
    assert_eq!(inb.emu.profile_for_key(0), 0);
    // shaping outbound only: inbound pipeline exists (emulated) but has no shaper
    let pi = p
        .build_direction(Direction::Inbound, Instant::ZERO)
        .unwrap()
        .unwrap();
    assert!(pi.shaper().is_none() && pi.emulator().is_some());
    let po = p
        .build_direction(Direction::Outbound, Instant::ZERO)
        .unwrap()
        .unwrap();
    assert!(po.shaper().is_some() && po.emulator().is_some());
    // a policy without emulation: no emulator, inbound not touched at all
    let plain = Policy::parse(
        "q.toml",
        "[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n",
    )
    .unwrap();
    assert!(plain
        .build_direction(Direction::Inbound, Instant::ZERO)
        .unwrap()
        .is_none());
    assert!(plain
        .build_direction(Direction::Outbound, Instant::ZERO)
        .unwrap()
        .unwrap()
        .emulator()
        .is_none());
}

#[test]
fn emulate_mistakes_have_specific_messages() {
    let head =
        "[link]\nrate = \"1Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n";
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nloss = \"often\"\n"
    ));
    has(&errs, "p.toml:9:8:");
    has(&errs, "`loss`");
    let errs = errors(&format!("{head}[[emulate]]\nname = \"x\"\nloss = \"2\"\n"));
    has(&errs, "outside 0%..100%");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\n[[emulate]]\nname = \"x\"\ndelay = \"2ms\"\n"
    ));
    has(
        &errs,
        "duplicate [[emulate]] name 'x' (first defined at line 7)",
    );
    let errs = errors(&format!(
        "{head}[[rule]]\nclass = \"a\"\nemulate = \"nowhere\"\n"
    ));
    has(&errs, "'nowhere' is not a defined [[emulate]] profile");
    let errs = errors(&format!("{head}[[rule]]\nport = 80\n"));
    has(&errs, "a rule needs a `class`");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndistribution = \"normal\"\ndelay = \"1ms\"\n"
    ));
    has(&errs, "needs a `jitter`");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\njitter = \"1ms\"\ndistribution = \"gauss\"\n"
    ));
    has(&errs, "not one of uniform, normal, pareto, paretonormal");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nrate = \"4bit\"\n"
    ));
    has(&errs, "rate must be at least 8 bit/s");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\ndirection = \"up\"\n"
    ));
    has(&errs, "`direction`: 'up'");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\nlimit = \"0p\"\n"
    ));
    has(&errs, "limit must be positive");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelya = \"1ms\"\n"
    ));
    has(&errs, "unknown field `delya`");
    let p = Policy::parse("p.toml", &format!("{head}[[emulate]]\nname = \"x\"\n")).unwrap();
    assert!(p.warnings.iter().any(|w| w.msg.contains("changes nothing")));
    // mm-link's queue and --once
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\nqueue = \"pie\"\n"
    ));
    has(
        &errs,
        "p.toml:10:9: `queue`: 'pie' is not one of droptail, drophead, codel",
    );
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\ntarget = \"5ms\"\n"
    ));
    has(&errs, "`target` is CoDel's: it needs `queue = \"codel\"`");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\nqueue = \"codel\"\ntarget = \"200ms\"\n"
    ));
    has(&errs, "CoDel's target");
    let p = Policy::parse(
        "p.toml",
        &format!("{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\nlimit = \"100p\"\nqueue = \"codel\"\ntarget = \"10ms\"\n"),
    )
    .unwrap();
    let q = p.emulators[0].cfg.codel.unwrap();
    assert_eq!((q.target.0, q.interval.0), (10_000_000, 100_000_000));
    assert!(
        p.describe().contains("CoDel target 10ms interval 100ms"),
        "{}",
        p.describe()
    );
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\nqueue = \"drophead\"\n"
    ));
    has(&errs, "a drop-head queue needs a rate");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\nonce = true\n"
    ));
    has(&errs, "'once' plays a delivery trace once");
    let p = Policy::parse(
        "p.toml",
        &format!("{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\nlimit = \"10p\"\nqueue = \"drophead\"\n"),
    )
    .unwrap();
    assert_eq!(
        p.emulators[0].cfg.queue_drop,
        weir_core::emulate::QueueDrop::Head
    );
    assert!(
        p.describe().contains("queue 10 packets, drop-head"),
        "{}",
        p.describe()
    );
    // time-varying paths: a delay schedule, a loss schedule, outages
    let p = Policy::parse(
        "p.toml",
        &format!(
            "{head}[[emulate]]\nname = \"x\"\nrate = \"1Mbit\"\ndelay = [[\"0s\", \"20ms\"], [\"30s\", \"80ms\"]]\nloss = [[\"0s\", \"0%\"], [\"10s\", \"random 5%\"]]\noutages = [[\"5s\", \"6s\"]]\n"
        ),
    )
    .unwrap();
    let path = &p.emulators[0].cfg.path;
    assert_eq!(path.delay_at(31_000_000_000), Some(80_000_000));
    assert_eq!(path.loss_at(10_000_000_000).unwrap().0, 1);
    assert_eq!(*path.outages, vec![(5_000_000_000, 6_000_000_000)]);
    let d = p.describe();
    assert!(
        d.contains("delay schedule of 2 points (20ms to 80ms)"),
        "{d}"
    );
    assert!(d.contains("1 outage (1s down in all)"), "{d}");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = [[\"0s\", \"soon\"]]\n"
    ));
    has(&errs, "`delay` point [\"0s\", \"soon\"]:");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\noutages = [[\"5s\", \"4s\"]]\n"
    ));
    has(&errs, "the end must come after the start");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = [[\"1s\", \"5ms\"]]\n"
    ));
    has(&errs, "delay schedule: must start at 0s");
    let errs = errors(&format!(
        "{head}[[emulate]]\nname = \"x\"\ndelay = \"1ms\"\noutages = \"5s-6s\"\n"
    ));
    has(&errs, "`outages`: expected");
}

fn udp(pool: &mut Pool, src: &str, n: u16) -> PktId {
    let id = pool.alloc().unwrap();
    let ip = Ipv4Spec {
        src: src.parse().unwrap(),
        dst: "10.77.0.2".parse().unwrap(),
        ..Default::default()
    };
    let len = build::udp_v4_frame(
        pool.slot_mut(id),
        &EthSpec::default(),
        &ip,
        5000 + n,
        9,
        &[0u8; 1472],
    )
    .unwrap();
    pool.meta_mut(id).len = len as u32;
    id
}

/// Offer 200 frames at t = 0 (even ones from a near host, odd ones from 10.1.4.0/24)
/// and run `pipe` to empty; returns the departure time of every packet by pool id, the
/// ids of near and far packets, and the number lost.
fn drive(
    mut pipe: weir_core::policy::Pipeline,
    seed: u64,
) -> (HashMap<u32, u64>, Vec<PktId>, Vec<PktId>, usize) {
    let mut pool = Pool::new(512, 2048);
    let mut rng = Rng::new(seed);
    let mut dropped: Vec<(PktId, DropCause)> = Vec::new();
    let mut near = Vec::new();
    let mut far = Vec::new();
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for n in 0..200u16 {
            let (src, list) = if n % 2 == 0 {
                ("10.1.1.1", &mut near)
            } else {
                ("10.1.4.1", &mut far)
            };
            let id = udp(cx.pool, src, n);
            list.push(id);
            pipe.ingress(id, &mut cx).unwrap();
        }
    }
    let mut departs = HashMap::new();
    let mut now = Instant::ZERO;
    let mut lost = 0;
    loop {
        let mut cx = Ctx::new(now, &mut pool, &mut rng, &mut dropped);
        while let Some(id) = pipe.dequeue(&mut cx) {
            departs.insert(id.0, now.as_nanos());
            cx.pool.free(id);
        }
        for (id, cause) in cx.dropped.drain(..) {
            assert_eq!(cause, DropCause::Emulated);
            cx.pool.free(id);
            lost += 1;
        }
        match pipe.next_wakeup() {
            Some(w) => now = now.max(w),
            None if pipe.is_empty() => break,
            None => panic!("packets held but no wake-up"),
        }
    }
    (departs, near, far, lost)
}

/// 1514-byte frames shaped to 10 Mbit/s, then delayed 20 ms (link default) or 150 ms with
/// every 100th lost (rule "far-hosts"): each departure is exactly the shaper's departure
/// (the same policy without emulation) plus the profile's delay.
#[test]
fn shaped_then_delayed_on_the_virtual_clock() {
    let mut p = Policy::parse("p.toml", POLICY).unwrap();
    p.emulators[1].cfg.jitter = Jitter::None; // exact departures
    let shaped = p.build(Instant::ZERO).unwrap();
    let both = p
        .build_direction(Direction::Outbound, Instant::ZERO)
        .unwrap()
        .unwrap();
    let (base, near, far, lost0) = drive(shaped, p.seed);
    assert_eq!((base.len(), lost0), (200, 0));
    let (emu, _, _, lost) = drive(both, p.seed);
    assert_eq!(lost, 1, "every 100th of the 100 far packets");
    assert_eq!(emu.len(), 199);
    // the shaper spaces frames one transmission time (1514 B at 10 Mbit/s) apart
    let mut t: Vec<u64> = base.values().copied().collect();
    t.sort_unstable();
    assert_eq!(t[199] - t[198], 1_211_200);
    for id in &near {
        assert_eq!(emu[&id.0], base[&id.0] + 20_000_000, "near {id:?}");
    }
    let mut kept = 0;
    for id in &far {
        if let Some(&d) = emu.get(&id.0) {
            assert_eq!(d, base[&id.0] + 150_000_000, "far {id:?}");
            kept += 1;
        }
    }
    assert_eq!(kept, 99);
}

/// A frame that arrived at 1 ms but is read at 3 ms leaves an emulated 10 ms link at
/// 11 ms: the emulator times it from its arrival, not from when the driver read it. Behind
/// a shaper, the shaper's clock (the read time) is used instead.
#[test]
fn emulated_delay_counts_from_the_arrival_time() {
    let text = "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nemulate = \"wan\"\n\
                [[emulate]]\nname = \"wan\"\ndelay = \"10ms\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    let mut pipe = p
        .build_direction(Direction::Outbound, Instant::ZERO)
        .unwrap()
        .unwrap();
    assert!(pipe.shaper().is_none());
    let mut pool = Pool::new(8, 2048);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let now = Instant(3_000_000);
    let mut cx = Ctx::new(now, &mut pool, &mut rng, &mut dropped);
    let id = udp(cx.pool, "10.1.1.1", 0);
    pipe.ingress_at(id, &mut cx, Instant(1_000_000)).unwrap();
    assert_eq!(cx.now, now, "the driver's clock is untouched");
    assert_eq!(cx.pool.meta(id).arrival, Instant(1_000_000));
    assert_eq!(pipe.next_wakeup(), Some(Instant(11_000_000)));
    // an arrival "after" now is clamped to now
    let id2 = udp(cx.pool, "10.1.1.1", 1);
    pipe.ingress_at(id2, &mut cx, Instant(9_000_000)).unwrap();
    assert_eq!(cx.pool.meta(id2).arrival, now);
}

/// A rate that changes over time: `rate` as a schedule of [time, rate] points, or
/// `trace` naming a Mahimahi file read beside the policy; errors located.
#[test]
fn rate_schedules_and_traces() {
    use weir_core::emulate::Capacity;
    let head = "[link]\nrate = \"100Mbit\"\ndirection = \"none\"\nemulate = \"line\"\n[[emulate]]\nname = \"line\"\n";
    let p = Policy::parse(
        "p.toml",
        &format!("{head}rate = [[\"0s\", \"8Mbit\"], [\"30s\", \"2Mbit\"]]\n"),
    )
    .unwrap();
    assert_eq!(
        p.emulators[0].cfg.capacity,
        Some(Capacity::schedule(vec![(0, 8_000_000), (30_000_000_000, 2_000_000)]).unwrap())
    );
    assert!(
        p.describe()
            .contains("rate schedule of 2 points (2Mbit to 8Mbit"),
        "{}",
        p.describe()
    );

    let err = |text: &str| match Policy::parse("p.toml", text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    };
    let e = err(&format!("{head}rate = [[\"0s\", \"8Mbit\"], [\"30s\"]]\n"));
    assert!(
        e.contains("p.toml:7:8:") && e.contains("expected [\"TIME\", \"RATE\"]"),
        "{e}"
    );
    let e = err(&format!("{head}rate = [[\"0s\", \"8Mbps\"]]\n"));
    assert!(
        e.contains("p.toml:7:8:") && e.contains("write 'Mbit'"),
        "{e}"
    );
    let e = err(&format!("{head}rate = [[\"1s\", \"8Mbit\"]]\n"));
    assert!(e.contains("must start at 0s"), "{e}");
    let e = err(&format!("{head}trace = \"line.trace\"\n"));
    assert!(
        e.contains("p.toml:7:9:") && e.contains("came from no file"),
        "{e}"
    );
    let e = err(&format!("{head}rate = \"8Mbit\"\ntrace = \"x\"\n"));
    assert!(e.contains("give one"), "{e}");

    // from files: the trace beside the policy
    let dir = std::env::temp_dir().join(format!("weir-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("p.toml");
    std::fs::write(&policy, format!("{head}trace = \"line.trace\"\n")).unwrap();
    std::fs::write(dir.join("line.trace"), "1\n1\n3\n").unwrap();
    let p = Policy::load(&policy).unwrap();
    assert_eq!(
        p.emulators[0].cfg.capacity,
        Some(Capacity::parse_trace("1\n1\n3\n").unwrap())
    );
    std::fs::write(dir.join("line.trace"), "1\nfast\n").unwrap();
    let e = Policy::load(&policy).unwrap_err().to_string();
    assert!(
        e.contains(":7:9:") && e.contains("line 2: 'fast' is not a millisecond"),
        "{e}"
    );
    std::fs::remove_file(dir.join("line.trace")).unwrap();
    let e = Policy::load(&policy).unwrap_err().to_string();
    assert!(e.contains("cannot read"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `delay_trace = "FILE"` and `loss_trace = "FILE"`: schedules from files beside the policy,
/// their errors naming the policy's line, the file and the file's line and field.
#[test]
fn delay_and_loss_traces_from_files() {
    use weir_core::emulate::LossModel;
    let head = "[link]\nrate = \"100Mbit\"\ndirection = \"none\"\nemulate = \"line\"\n[[emulate]]\nname = \"line\"\nrate = \"10Mbit\"\n";
    let dir = std::env::temp_dir().join(format!("weir-path-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("p.toml");
    let body = "delay_trace = \"rtt.txt\"\nloss_trace = \"loss.txt\"\n";
    std::fs::write(&policy, format!("{head}{body}")).unwrap();
    std::fs::write(dir.join("rtt.txt"), "0 20\n1000 80.5\n").unwrap();
    std::fs::write(dir.join("loss.txt"), "0s 0%\n2s random 5%\n").unwrap();
    let p = Policy::load(&policy).unwrap();
    let path = &p.emulators[0].cfg.path;
    assert_eq!(
        path.delay.as_deref(),
        Some(&vec![(0, 20_000_000), (1_000_000_000, 80_500_000)])
    );
    assert_eq!(
        path.loss.as_deref(),
        Some(&vec![
            (0, LossModel::Bernoulli { p: 0.0 }),
            (2_000_000_000, LossModel::Bernoulli { p: 0.05 })
        ])
    );
    std::fs::write(dir.join("rtt.txt"), "0 20\n1000 80\n900 10\n").unwrap();
    let e = Policy::load(&policy).unwrap_err().to_string();
    assert!(
        e.contains(":8:15:")
            && e.contains("`delay_trace`")
            && e.contains("rtt.txt: line 3: field 1 (TIME): 900ms is not after"),
        "{e}"
    );
    std::fs::write(
        &policy,
        format!("{head}delay = \"5ms\"\ndelay_trace = \"rtt.txt\"\n"),
    )
    .unwrap();
    let e = Policy::load(&policy).unwrap_err().to_string();
    assert!(e.contains("give one"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `weir emu --aqm`: the rate moves to a shaper whose only leaf has the managed queue; the
/// emulator behind it keeps the delay and loses its serialiser; the options' limit is the
/// managed queue's; a schedule or no rate is refused.
#[test]
fn a_managed_bottleneck_queue_is_a_shaper_before_the_delay_line() {
    use weir_core::aqm::AqmKind;
    use weir_core::emulate::EmuConfig;
    use weir_core::policy::{QueueKind, Shapes, Technique};
    let cfg = EmuConfig {
        rate_bps: Some(10_000_000),
        delay: weir_core::Duration::from_millis(25),
        limit_packets: Some(500),
        ..EmuConfig::default()
    };
    let p = Policy::emulation_managed(cfg.clone(), Shapes::Both, 7, (Technique::FqCobalt, None))
        .unwrap();
    assert_eq!(p.link_rate, 10_000_000);
    let line = &p.classes[p.class_index("line").unwrap()];
    assert_eq!(
        (line.queue, line.aqm, line.ecn),
        (QueueKind::Fq, AqmKind::Cobalt, true)
    );
    assert_eq!(line.limit, weir_core::units::Limit::Packets(500));
    assert_eq!(
        p.emulators[0].cfg.rate_bps, None,
        "the serialiser is the shaper now"
    );
    assert_eq!(p.emulators[0].cfg.delay, cfg.delay);
    let dev = p.build_device(Instant::ZERO).unwrap();
    for d in [Direction::Outbound, Direction::Inbound] {
        assert_eq!(dev.stage_names(d), ["shape", "emulate"]);
    }
    let fifo = Policy::emulation_managed(
        cfg.clone(),
        Shapes::Outbound,
        7,
        (Technique::FqCobalt, Some(AqmKind::Codel)),
    )
    .unwrap();
    let line = &fifo.classes[fifo.class_index("line").unwrap()];
    assert_eq!((line.queue, line.aqm), (QueueKind::Fifo, AqmKind::Codel));
    let no_rate = EmuConfig {
        rate_bps: None,
        ..cfg
    };
    let e = Policy::emulation_managed(no_rate, Shapes::Outbound, 7, (Technique::FqCobalt, None))
        .unwrap_err();
    assert!(e.contains("needs --rate"), "{e}");
}

/// netem's knobs as `[[emulate]]` keys: correlations, `reorder_*`, `slot*`, `ecn`,
/// `limit_held`, cells, and a `.dist` table read beside the policy; their mistakes.
#[test]
fn netem_knobs_as_keys() {
    use weir_core::emulate::slot::SlotGap;
    let head = "[link]\nrate = \"10Mbit\"\ndirection = \"none\"\nemulate = \"e\"\n[[emulate]]\nname = \"e\"\n";
    let p = Policy::parse(
        "p.toml",
        &format!(
            "{head}delay = \"50ms\"\njitter = \"10ms\"\njitter_correlation = \"25%\"\n\
             duplicate = \"1%\"\nduplicate_correlation = \"10%\"\ncorrupt = \"1%\"\n\
             corrupt_correlation = \"5%\"\nreorder_probability = \"25%\"\n\
             reorder_correlation = \"50%\"\nreorder_gap = 5\nslot = [\"800us\", \"1ms\"]\n\
             slot_packets = 4\nslot_bytes = \"6KB\"\necn = true\nloss = \"1%\"\n\
             limit_held = 1000\nrate = \"5kbit\"\noverhead = 20\ncell_size = 100\ncell_overhead = 5\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let c = &p.emulators[0].cfg;
    assert_eq!(c.jitter_correlation, 0.25);
    assert_eq!(
        (c.duplicate_correlation, c.corrupt_correlation),
        (0.10, 0.05)
    );
    assert_eq!(
        (
            c.reorder_early.probability,
            c.reorder_early.correlation,
            c.reorder_early.gap
        ),
        (0.25, 0.5, 5)
    );
    let slot = c.slot.as_ref().expect("slot");
    assert_eq!(
        slot.gap,
        SlotGap::Uniform {
            min: 800_000,
            max: 1_000_000
        }
    );
    assert_eq!((slot.packets, slot.bytes), (Some(4), Some(6_000)));
    assert!(c.ecn);
    assert_eq!(c.limit_held, Some(1000));
    // netem's cell example (tc-netem(8): rate 5kbit 20 100 5): 20 bytes of packet
    // overhead, then 100-byte cells of 105 bytes: 80 + 20 fills one cell, 81 + 20 two
    assert_eq!(c.framing.wire_len(80), 105);
    assert_eq!(c.framing.wire_len(81), 210);

    let err = |extra: &str| {
        Policy::parse("p.toml", &format!("{head}delay = \"1ms\"\n{extra}"))
            .unwrap_err()
            .to_string()
    };
    let e = err("jitter = \"1ms\"\njitter_correlation = \"150%\"\n");
    assert!(e.contains("jitter_correlation"), "{e}");
    let e = err("slot = [\"2ms\", \"1ms\"]\n");
    assert!(e.contains("slot"), "{e}");
    let e = err("slot = [\"2ms\"]\n");
    assert!(e.contains("expected [\"MIN\", \"MAX\"]"), "{e}");
    let e = err("slot_packets = 3\n");
    assert!(e.contains("`slot_packets` needs `slot`"), "{e}");
    let e = err("reorder_gap = 3\n");
    assert!(e.contains("need `reorder_probability`"), "{e}");
    let e = err("reorder_probability = \"10%\"\nreorder_gap = 0\n");
    assert!(
        e.contains("`reorder_gap`: expected a whole number from 1"),
        "{e}"
    );
    let e = err("cell_size = 53\natm = true\n");
    assert!(e.contains("not with `framing`, `atm` or `ptm`"), "{e}");
    let e = err("distribution_table = \"x.dist\"\n");
    assert!(e.contains("needs a `jitter`"), "{e}");

    // a table beside the policy; a malformed one named with its line
    let dir = std::env::temp_dir().join(format!("weir-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("p.toml");
    std::fs::write(
        &policy,
        format!("{head}delay = \"50ms\"\njitter = \"10ms\"\ndistribution_table = \"my.dist\"\n"),
    )
    .unwrap();
    let values: Vec<String> = (-8..=8).map(|v| (v * 1000).to_string()).collect();
    std::fs::write(dir.join("my.dist"), values.join(" ") + "\n").unwrap();
    let p = Policy::load(&policy).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        p.emulators[0].cfg.jitter,
        Jitter::Table {
            sigma: 10_000_000,
            ..
        }
    ));
    std::fs::write(dir.join("my.dist"), "1 2 3\n4 five 6\n").unwrap();
    let e = Policy::load(&policy).unwrap_err().to_string();
    assert!(e.contains("my.dist:2:"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
