use super::*;
use crate::policy::Policy;
use crate::pool::{PktId, Pool};
use crate::qdisc::Ctx;
use crate::rng::Rng;
use crate::time::Duration;
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::ecn::ecn_field;
use weir_wire::ip::ecn::{CE, ECT0, NOT_ECT};

const POLICY: &str = r#"
    [link]
    rate = "1Mbit"
    default = "other"
    technique = "cbq"
    [[class]]
    name = "interactive"
    rate = "600kbit"
    [[class]]
    name = "web"
    parent = "interactive"
    rate = "400kbit"
    limit = "3p"
    [[class]]
    name = "ssh"
    parent = "interactive"
    rate = "200kbit"
    [[class]]
    name = "other"
    rate = "400kbit"
    [[rule]]
    name = "http"
    class = "web"
    proto = "tcp"
    port = 80
    [[rule]]
    name = "ssh"
    class = "ssh"
    proto = "tcp"
    port = 22
"#;

fn frame(pool: &mut Pool, dport: u16, payload: usize) -> PktId {
    frame_ecn(pool, dport, payload, NOT_ECT)
}

/// A TCP frame 10.0.0.1:40000 → 10.0.0.2:`dport` with `payload` bytes and ECN `ecn`.
fn frame_ecn(pool: &mut Pool, dport: u16, payload: usize, ecn: u8) -> PktId {
    let id = pool.alloc().unwrap();
    let tcp = TcpSpec {
        src_port: 40000,
        dst_port: dport,
        ..Default::default()
    };
    let ip = Ipv4Spec {
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
        ecn,
        ..Default::default()
    };
    let buf = vec![0u8; payload];
    let n = build::tcp_v4_frame(pool.slot_mut(id), &EthSpec::default(), &ip, &tcp, &buf).unwrap();
    pool.meta_mut(id).len = n as u32;
    id
}

/// Push 6 web frames (3 fit the queue), 1 ssh frame and 1 garbage frame at t=0, then
/// dequeue whatever the shaper lets out within `until`.
fn run(until: Duration) -> (Pipeline, u32) {
    let policy = Policy::parse("t.toml", POLICY).unwrap();
    let mut pipe = policy.build(Instant::ZERO).unwrap();
    let mut pool = Pool::new(64, 2048);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(frame(&mut pool, 80, 946)); // 1000-byte frames
    }
    ids.push(frame(&mut pool, 22, 46)); // 100 bytes
    let junk = pool.alloc().unwrap();
    pool.slot_mut(junk)[..5].copy_from_slice(&[1, 2, 3, 4, 5]);
    pool.meta_mut(junk).len = 5;
    ids.push(junk);
    let len = pool.len(ids[0]);
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for id in ids {
        if pipe.ingress(id, &mut cx).is_err() {
            cx.pool.free(id);
        }
    }
    let mut t = 0;
    while t <= until.0 {
        cx.now = Instant(t);
        while let Some(p) = pipe.dequeue(&mut cx) {
            cx.pool.free(p);
        }
        t += 1_000_000;
    }
    (pipe, len)
}

fn class<'a>(s: &'a PipelineSnapshot, name: &str) -> &'a ClassSnapshot {
    s.classes.iter().find(|c| c.name == name).unwrap()
}

/// The counter identities of every queue in `s` (see the module comment).
fn assert_identities(s: &PipelineSnapshot) {
    for c in s.classes.iter() {
        if let Some(q) = &c.queue {
            assert_eq!(q.received, q.enqueued + q.dropped_on_enqueue);
            assert_eq!(
                q.enqueued,
                q.dequeued
                    + q.dropped_later
                    + Count {
                        packets: q.packets,
                        bytes: q.bytes
                    }
            );
            let by_cause = q.drops.values().fold(Count::default(), |a, &b| a + b);
            assert_eq!(by_cause, q.dropped());
            if let Some(a) = &q.aqm {
                let n = |k: &str| q.drops.get(k).map_or(0, |c| c.packets);
                assert_eq!(a.aqm_drops, n("aqm"), "{}", c.name);
                assert_eq!(a.ack_filter_drops, n("ack_filter"), "{}", c.name);
            }
        }
    }
}

#[test]
fn snapshot_copies_counters() {
    let (pipe, len) = run(Duration::from_secs(1));
    assert_eq!(len, 1000);
    let s = snapshot(&pipe, Instant(1_000_000_000));
    assert_eq!(s.at_ns, 1_000_000_000);
    let names: Vec<&str> = s.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names[0], "link");
    assert!(s.classes[0].parent.is_none() && !s.classes[0].leaf);
    assert_eq!(s.classes[0].rate_bps, 1_000_000);
    let web = class(&s, "web");
    assert_eq!(web.parent.as_deref(), Some("interactive"));
    assert!(web.leaf);
    assert_eq!(web.rate_bps, 400_000);
    assert!(!class(&s, "interactive").leaf);
    assert!(class(&s, "interactive").queue.is_none());
    let q = web.queue.as_ref().unwrap();
    assert_eq!(q.received.packets, 6);
    assert_eq!(q.dropped_on_enqueue.packets, 3, "limit 3");
    assert_eq!(
        q.drops.get("queue_full").copied(),
        Some(Count {
            packets: 3,
            bytes: 3000
        })
    );
    assert_eq!(q.drops.len(), 1, "only non-zero causes");
    // 1 s at up to 1 Mbit/s is plenty for 3 kB: everything left.
    assert_eq!(q.packets, 0);
    assert_eq!(q.dequeued.packets, 3);
    assert_eq!(web.sent.packets, 3);
    assert_eq!(web.sent.bytes, 3000);
    // The root is charged for everything sent: 3 web + 1 ssh + 1 garbage.
    assert_eq!(s.classes[0].sent.packets, 5);
    assert_eq!(s.classes[0].sent.bytes, 3000 + 100 + 5);
    assert_identities(&s);
    assert!(
        s.classes
            .iter()
            .all(|c| c.queue.as_ref().is_none_or(|q| q.aqm.is_none())),
        "FIFOs and per-flow DRR have no AQM counters"
    );
    // Rules.
    assert_eq!(s.rules.len(), 2);
    assert_eq!(s.rules[0].name, "http");
    assert_eq!(s.rules[0].class, "web");
    assert_eq!(s.rules[0].hits.packets, 6);
    assert_eq!(s.rules[1].class, "ssh");
    assert_eq!(s.rules[1].hits.packets, 1);
    assert_eq!(s.default_class, "other");
    assert_eq!(
        s.default_rule,
        Count {
            packets: 1,
            bytes: 5
        }
    );
    assert_eq!(
        s.malformed,
        Count {
            packets: 1,
            bytes: 5
        }
    );
}

#[test]
fn backlog_is_reported_while_shaping() {
    // At t = 0 the web class sends what its burst allows; the rest waits.
    let (pipe, _) = run(Duration::ZERO);
    let s = snapshot(&pipe, Instant::ZERO);
    let q = class(&s, "web").queue.clone().unwrap();
    assert_eq!(q.packets + q.dequeued.packets, 3);
    assert_eq!(q.bytes, q.packets * 1000);
}

#[test]
fn rate_meter_measures_between_updates() {
    let (pipe, _) = run(Duration::from_secs(1));
    let mut m = RateMeter::new();
    let mut a = snapshot(&pipe, Instant(1_000_000_000));
    m.update(&mut a);
    assert!(a.classes.iter().all(|c| c.rate_now_bps == 0.0), "first: 0");
    // Pretend 2000 more bytes went through "web" and its ancestors in 0.5 s.
    let mut b = a.clone();
    b.at_ns += 500_000_000;
    for name in ["web", "interactive", "link"] {
        b.classes
            .iter_mut()
            .find(|c| c.name == name)
            .unwrap()
            .sent
            .bytes += 2000;
    }
    m.update(&mut b);
    assert_eq!(class(&b, "web").rate_now_bps, 32_000.0);
    assert_eq!(class(&b, "link").rate_now_bps, 32_000.0);
    assert_eq!(class(&b, "ssh").rate_now_bps, 0.0);
    // Same instant again: 0, baseline kept.
    let mut c = b.clone();
    m.update(&mut c);
    assert_eq!(class(&c, "web").rate_now_bps, 0.0);
    // Counters going backwards (policy replaced) give 0, and classes are matched by
    // name even when the order changes.
    let mut d = a.clone();
    d.at_ns = b.at_ns + 1_000_000_000;
    d.classes.reverse();
    m.update(&mut d);
    assert!(d.classes.iter().all(|c| c.rate_now_bps == 0.0));
    let mut e = d.clone();
    e.at_ns += 250_000_000;
    e.classes
        .iter_mut()
        .find(|c| c.name == "ssh")
        .unwrap()
        .sent
        .bytes += 125;
    m.update(&mut e);
    assert_eq!(class(&e, "ssh").rate_now_bps, 4_000.0);
}

#[test]
fn approx_rates() {
    assert_eq!(fmt_rate_approx(0.0), "0bit");
    assert_eq!(fmt_rate_approx(f64::NAN), "0bit");
    assert_eq!(fmt_rate_approx(950.0), "950bit");
    assert_eq!(fmt_rate_approx(12_345.0), "12.3kbit");
    assert_eq!(fmt_rate_approx(4_870_000.0), "4.87Mbit");
    assert_eq!(fmt_rate_approx(999_990.0), "1.00Mbit");
    assert_eq!(fmt_rate_approx(155_000_000.0), "155Mbit");
    assert_eq!(fmt_rate_approx(10e9), "10.0Gbit");
}

#[test]
fn table_shows_tree_rates_queues_drops_and_rules() {
    let (pipe, _) = run(Duration::from_secs(1));
    let mut m = RateMeter::new();
    let mut s = snapshot(&pipe, Instant(1_000_000_000));
    // The state before anything was sent.
    let mut s0 = s.clone();
    s0.at_ns = 0;
    s0.classes
        .iter_mut()
        .for_each(|c| c.sent = Count::default());
    m.update(&mut s0);
    m.update(&mut s);
    let t = format_table(&s, "lan0→wan0");
    eprintln!("{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("direction lan0→wan0"));
    assert!(lines[1].starts_with("class"));
    assert!(lines[2].starts_with("link "));
    assert!(lines[3].starts_with("├─ interactive "));
    assert!(lines[4].starts_with("│  ├─ web "));
    assert!(lines[5].starts_with("│  └─ ssh "));
    assert!(lines[6].starts_with("└─ other "));
    let web = lines[4];
    assert!(web.contains("400kbit"), "{web}");
    assert!(
        web.contains("24.0kbit"),
        "current rate: 3000 B in 1 s: {web}"
    );
    assert!(web.contains("queue_full 3"), "{web}");
    assert!(lines[3].contains(" - "), "inner classes have no queue");
    assert!(t.contains("http"));
    assert!(t.contains("(default)"));
    assert!(t.contains("unparsable frames (sent to the default class): 1 packets, 5 bytes"));
    // Columns line up: every class row has its rate column at the same place.
    let end_of = |line: &str, pat: &str| {
        let b = line.find(pat).unwrap() + pat.len();
        line[..b].chars().count()
    };
    assert_eq!(end_of(lines[2], "1Mbit"), end_of(lines[6], "400kbit"));
    assert_eq!(end_of(lines[2], "1Mbit"), end_of(lines[4], "400kbit"));
}
/// A 1 Mbit/s link with two leaves: `fq` (FQ + COBALT with its defaults for the
/// rate: target 18.168 ms, interval 113.168 ms, ECN on; the default class) and
/// `fifo` (a plain FIFO). 60 ECT(0) frames of flow A (port 80) and 60 Not-ECT
/// frames of flow B (port 81), 1000 bytes each, arrive at t = 0: 960 ms of backlog at
/// the rate, so the sojourn stays above the target for longer than the interval and
/// COBALT signals, by marking A's packets and dropping B's. Dequeued every ms for
/// 2 s. Returns the pipeline and, of what left, A's frames, A's frames with CE, and
/// B's frames.
fn run_fq() -> (Pipeline, [u64; 3]) {
    use crate::classify::Classifier;
    use crate::queue::fifo::Fifo;
    use crate::queue::fq::FqConfig;
    use crate::rate::Rate;
    use crate::sched::linkshare::{ClassSpec, LinkShare};
    let rate = Rate::from_bps(1_000_000);
    let spec = |name: &str, parent, queue| ClassSpec::fixed(name, parent, rate, queue);
    let fq = FqConfig::for_rate(Some(rate)).build(7).unwrap();
    let specs = vec![
        spec("link", None, None),
        spec("fq", Some(0), Some(fq)),
        spec("fifo", Some(0), Some(Box::new(Fifo::packets(100)))),
    ];
    let ls = LinkShare::new(specs, 1, Instant::ZERO).unwrap();
    let cl = Classifier::new(Vec::new(), 1).unwrap();
    let mut pipe = Pipeline::new(Some(cl), vec![Box::new(ls)]);
    let mut pool = Pool::new(256, 2048);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..60 {
        ids.push(frame_ecn(&mut pool, 80, 946, ECT0));
        ids.push(frame_ecn(&mut pool, 81, 946, NOT_ECT));
    }
    let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
    for id in ids {
        pipe.ingress(id, &mut cx).unwrap();
    }
    let mut out = [0u64; 3];
    for t in 0..=2000u64 {
        cx.now = Instant(t * 1_000_000);
        while let Some(p) = pipe.dequeue(&mut cx) {
            let f = cx.pool.data(p);
            let dport = u16::from_be_bytes([f[36], f[37]]);
            match (dport, ecn_field(f)) {
                (80, Some(CE)) => {
                    out[0] += 1;
                    out[1] += 1;
                }
                (80, Some(ECT0)) => out[0] += 1,
                (81, Some(NOT_ECT)) => out[2] += 1,
                other => panic!("unexpected frame {other:?}"),
            }
            cx.pool.free(p);
        }
        for (id, _) in cx.dropped.drain(..) {
            cx.pool.free(id);
        }
    }
    (pipe, out)
}

#[test]
fn fq_cobalt_leaf_reports_marks_drops_and_flows() {
    let (pipe, [a_out, a_ce, b_out]) = run_fq();
    let s = snapshot(&pipe, Instant(2_000_000_000));
    assert_identities(&s);
    let q = class(&s, "fq").queue.as_ref().unwrap();
    assert_eq!(q.packets, 0, "all sent or dropped within 2 s");
    let a = q.aqm.expect("an FQ + COBALT queue has AQM counters");
    // The ECT(0) flow is signalled by marks only, the Not-ECT flow by drops only.
    assert_eq!(a_out, 60, "no ECT(0) frame dropped");
    assert!(a_ce > 0, "COBALT signalled by marking");
    assert_eq!(a.ecn_marks, a_ce, "every mark counted, nothing else");
    assert!(b_out < 60, "COBALT dropped Not-ECT frames");
    assert_eq!(a.aqm_drops, 60 - b_out);
    assert_eq!(q.drops.get("aqm").map(|c| c.packets), Some(60 - b_out));
    assert_eq!((a.ack_filter_drops, a.unmarkable, a.limit_drops), (0, 0, 0));
    // Two flows, both empty now (an emptied flow may stay in the old list, as
    // `bulk`, until the scheduler next visits it).
    assert_eq!((a.max_flows, a.flows), (2, 0));
    assert!(a.sparse_flows + a.bulk_flows <= 2, "{a:?}");
    assert!(a.new_flows >= 2, "{a:?}");
    assert!(a.has_flows());
    // The FIFO leaf has none.
    assert_eq!(class(&s, "fifo").queue.as_ref().unwrap().aqm, None);
    assert!(class(&s, "link").queue.is_none());
}

#[test]
fn aqm_counters_round_trip_through_json() {
    let (pipe, [_, a_ce, b_out]) = run_fq();
    let s = snapshot(&pipe, Instant(2_000_000_000));
    let v = serde_json::to_value(&s).unwrap();
    // Where reports are searched for them (crates/lab rrul: `ecn_marks`,
    // `aqm_drops`, `ack_filter_drops`).
    let aqm = &v["classes"][1]["queue"]["aqm"];
    assert_eq!(v["classes"][1]["name"], "fq");
    assert_eq!(aqm["ecn_marks"].as_u64(), Some(a_ce));
    assert_eq!(aqm["aqm_drops"].as_u64(), Some(60 - b_out));
    assert_eq!(aqm["ack_filter_drops"].as_u64(), Some(0));
    assert_eq!(aqm["max_flows"].as_u64(), Some(2));
    // The FIFO's queue has no `aqm` key at all.
    let fifo = v["classes"][2]["queue"].as_object().unwrap();
    assert!(!fifo.contains_key("aqm"), "{fifo:?}");
    let text = serde_json::to_string(&s).unwrap();
    let back: PipelineSnapshot = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
    assert_eq!(
        back.classes[1]
            .queue
            .as_ref()
            .unwrap()
            .aqm
            .unwrap()
            .ecn_marks,
        a_ce
    );
    // A document with fewer AQM fields (an older or newer weir) still reads.
    let mut v2 = v.clone();
    v2["classes"][1]["queue"]["aqm"] = serde_json::json!({ "ecn_marks": 5 });
    let part: PipelineSnapshot = serde_json::from_value(v2).unwrap();
    let a = part.classes[1].queue.as_ref().unwrap().aqm.unwrap();
    assert_eq!(
        a,
        AqmSnapshot {
            ecn_marks: 5,
            ..Default::default()
        }
    );
}

#[test]
fn snapshots_without_aqm_round_trip_as_before() {
    let (pipe, _) = run(Duration::from_secs(1));
    let s = snapshot(&pipe, Instant(1_000_000_000));
    let text = serde_json::to_string(&s).unwrap();
    assert!(
        !text.contains("\"aqm\""),
        "no aqm key without an AQM: {text}"
    );
    assert!(!text.contains("ecn_marks"), "{text}");
    let back: PipelineSnapshot = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
    // An explicit null reads as none too.
    let mut v = serde_json::to_value(&s).unwrap();
    v["classes"][2]["queue"]["aqm"] = serde_json::Value::Null;
    let back: PipelineSnapshot = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}

#[test]
fn table_shows_a_second_line_under_a_leaf_with_an_aqm() {
    let (pipe, [_, a_ce, b_out]) = run_fq();
    let s = snapshot(&pipe, Instant(2_000_000_000));
    let t = format_table(&s, "lan0→wan0");
    eprintln!("{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[2].starts_with("link "));
    assert!(lines[3].starts_with("├─ fq "));
    // (the rest of the line: aqm_summary_names_what_is_there)
    let a = s.classes[1].queue.as_ref().unwrap().aqm.unwrap();
    let want = format!(
        "│    aqm: ecn marks {a_ce}, aqm drops {}; flows 0 now, 2 most (",
        60 - b_out
    );
    assert!(lines[4].starts_with(&want), "{}", lines[4]);
    assert_eq!(lines[4], format!("│    aqm: {}", a.summary()));
    assert!(
        lines[5].starts_with("└─ fifo "),
        "no second line for a FIFO"
    );
    assert!(lines[6].is_empty(), "{t}");
    // The drops by cause keep their place on the class row.
    assert!(
        lines[3].ends_with(&format!("aqm {}", 60 - b_out)),
        "{}",
        lines[3]
    );
}

#[test]
fn aqm_summary_names_what_is_there() {
    let fifo = AqmSnapshot {
        ecn_marks: 3,
        aqm_drops: 1,
        limit_drops: 4,
        ..Default::default()
    };
    assert!(!fifo.has_flows());
    assert_eq!(fifo.summary(), "ecn marks 3, aqm drops 1");
    let fq = AqmSnapshot {
        ecn_marks: 10,
        aqm_drops: 2,
        ack_filter_drops: 7,
        unmarkable: 1,
        flows: 3,
        max_flows: 9,
        sparse_flows: 1,
        bulk_flows: 2,
        decaying_flows: 4,
        new_flows: 30,
        src_hosts: 2,
        dst_hosts: 1,
        collisions: 5,
        ..Default::default()
    };
    assert_eq!(
        fq.summary(),
        "ecn marks 10, aqm drops 2, ack filter drops 7, unmarkable 1; flows 3 now, 9 most \
         (sparse 1, bulk 2, decaying 4; 30 new); hosts 2 src, 1 dst; collisions 5"
    );
}
