//! `weir run`'s data path with real kernel TCP, in network namespaces:
//! sender → weir (transparent bridge) → receiver. Needs root; skips with a reason otherwise.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration as StdDuration;
use weir_core::device::{Device, DeviceConfig, LaneConfig};
use weir_core::policy::Policy;
use weir_core::{Instant, Rate};
use weir_io::afpacket::{RingConfig, RxRing};
use weir_io::bridge::{Bridge, BridgeConfig, BridgeReport};
use weir_io::ethtool::{set_offloads, Offloads};
use weir_lab::agents::{icmp_ping, SenderOpts, TcpSender, TcpSink};
use weir_lab::remote::Host;
use weir_lab::report::StealMeter;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

/// The live tests measure rates: run them one at a time so they do not share the two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The testbed with hosts that send wire-size frames (segmentation offloads off: these
/// tests are about shaping accuracy up to 100 Mbit/s; hosts with their default offloads
/// are tested in crates/weir/tests/all/live_tso.rs, and a single TSO flow at 100 Mbit/s came
/// 6.8 % short here — under investigation) and TCP timestamps off (so the MSS is 1460,
/// which the expected goodputs use). SACK stays on: without it a
/// drop-tail overflow costs NewReno one round trip per lost segment, and with a full queue
/// a round trip at 1.544 Mbit/s is most of a second — the flow's own recovery, not weir,
/// would set the goodput.
fn topo(label: &str) -> BridgeTopo {
    let t = BridgeTopo::new(label).expect("topology");
    for (ns, ifname) in [(&t.snd, t.snd_if.clone()), (&t.rcv, t.rcv_if.clone())] {
        ns.run(move || set_offloads(&ifname, &Offloads::SEGMENTATION_OFF))
            .expect("offloads");
        Host::Local(ns).set_tcp_options(true, false, true).unwrap();
    }
    t
}

struct Weir {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<BridgeReport, String>>>,
}

impl Weir {
    fn start(t: &BridgeTopo, policy: &str) -> Weir {
        let p = Policy::parse("test.toml", policy).unwrap_or_else(|e| panic!("{e}"));
        Weir::start_device(t, p.build_device(Instant::ZERO).unwrap())
    }
    fn start_device(t: &BridgeTopo, device: Device) -> Weir {
        let mut cfg = BridgeConfig::new(&t.dut_lan, &t.dut_wan);
        cfg.device = device;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = t
            .dut
            .spawn(move || {
                let mut b = Bridge::open(cfg).unwrap_or_else(|e| panic!("bridge: {e}"));
                ready_tx.send(()).unwrap();
                b.run(&s).map_err(|e| e.to_string())
            })
            .unwrap();
        ready_rx
            .recv_timeout(StdDuration::from_secs(5))
            .expect("bridge started");
        Weir {
            stop,
            handle: Some(handle),
        }
    }
    fn stop(mut self) -> BridgeReport {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("bridge thread")
            .expect("bridge run")
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn check_no_unnamed_loss(r: &BridgeReport) {
    for l in [&r.outbound, &r.inbound] {
        // every frame read (or made by weir: `originated`, ICMP replies included) was
        // sent, or dropped with a reason, or still counted at shutdown
        let accounted = l.consumed.packets
            + l.tx.packets
            + l.dropped.packets
            + l.truncated.packets
            + l.oversize.packets
            + l.pool_exhausted.packets
            + l.offload_errors.total().packets
            + l.shutdown_drops.packets;
        assert_eq!(
            l.rx.packets + l.duplicated.packets + l.originated.packets,
            accounted,
            "{l:?}"
        );
        assert_eq!(
            l.truncated.packets, 0,
            "frames longer than weir could read: {l:?}"
        );
    }
}

#[test]
fn ping_and_arp_cross_the_bridge() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("ping_and_arp_cross_the_bridge") {
        return;
    }
    let _serial = serial();
    let t = topo("ping");
    let w = Weir::start(&t, "[link]\nrate = \"10Mbit\"\n");
    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 5, StdDuration::from_secs(1)).unwrap();
    let r = w.stop();
    assert!(rtts.iter().all(|x| x.is_some()), "{rtts:?}");
    // ARP request out, ARP reply back, echo requests out and replies back
    assert!(
        r.outbound.tx.packets >= 6 && r.inbound.tx.packets >= 6,
        "{r:?}"
    );
    check_no_unnamed_loss(&r);
}

/// One TCP flow shaped to 128 kbit/s, 1.544, 10 and 100 Mbit/s: goodput after slow start is
/// within ±3 % of what the rate carries (rate × 1460/1514: payload per Ethernet frame), and
/// two segments over the window (1.7 % at 128 kbit/s, under 0.3 % at the others).
///
/// This VM's virtual CPUs lose time to the hypervisor (`steal` in /proc/stat), from 0.5 %
/// to 30 % of the CPU time (measured in this test's runs). A shaper cannot send in time it
/// does not get, and its bucket holds only `burst` (mtu + 1 ms of rate) to make up for it:
/// with 12 % stolen, 100 Mbit/s came 6.6 % short, with 30 % stolen 10 Mbit/s came 31 %
/// short (the commit before the device too). So every attempt is printed with the steal it
/// saw; an attempt outside the allowance fails the test if the machine was quiet (steal ≤
/// `StealMeter::QUIET`), and is retried (up to four attempts) if it was not. If every
/// attempt was on a machine losing more, the rate's result is reported as inconclusive.
#[test]
fn single_tcp_flow_gets_the_shaped_rate() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("single_tcp_flow_gets_the_shaped_rate") {
        return;
    }
    let _serial = serial();
    let t = topo("tcp1");
    for (rate, bps, secs, from) in [
        ("128kbit", 128_000.0, 16u64, 5u64),
        ("1.544Mbit", 1_544_000.0, 9, 3),
        ("10Mbit", 10e6, 6, 2),
        ("100Mbit", 100e6, 6, 2),
    ] {
        let want = bps * 1460.0 / 1514.0;
        // ±3 %, and two segments over the window: a hole filled just after the window
        // opens releases what queued behind it at once (CI, 128 kbit/s: +3.23 %, one
        // 100 ms bin at 2.1 Mbit/s; a segment is 0.85 % of 11 s at that rate)
        let tol = 0.03 + 2.0 * 1448.0 * 8.0 / (want * (secs - from) as f64);
        let mut attempts = Vec::new();
        let mut passed = false;
        for attempt in 1..=4 {
            let meter = StealMeter::start();
            let got = shaped_flow_goodput(&t, rate, secs, from);
            let steal = meter.finish();
            let err = got / want - 1.0;
            let line = format!(
                "{rate} attempt {attempt}: {:+.2}% of the expected {want:.0} bit/s; {}",
                err * 100.0,
                steal.map_or("steal unknown".into(), |s| s.to_string())
            );
            eprintln!("{line}");
            attempts.push(line);
            if err.abs() <= tol {
                passed = true;
                break;
            }
            assert!(
                !steal.is_some_and(|s| s.quiet()),
                "goodput off by more than {:.1} % on a quiet machine:\n{}",
                tol * 100.0,
                attempts.join("\n")
            );
        }
        if !passed {
            eprintln!(
                "{rate}: INCONCLUSIVE, the hypervisor took more than {:.0} % of the CPU time in every attempt:\n{}",
                StealMeter::QUIET * 100.0,
                attempts.join("\n")
            );
        }
    }
}

/// One cubic flow through weir shaping the link to `rate` for `secs`: its goodput from
/// `from` seconds on, bit/s. Prints the per-interval series and weir's drops, so a failure
/// shows whether a deficit is steady (rate) or a stall (recovery, lost CPU time).
fn shaped_flow_goodput(t: &BridgeTopo, rate: &str, secs: u64, from: u64) -> f64 {
    let sink_addr = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001);
    let w = Weir::start(t, &format!("[link]\nrate = \"{rate}\"\n"));
    let sink = TcpSink::start(&t.rcv, sink_addr, StdDuration::from_millis(100)).unwrap();
    let mut o = SenderOpts::new(sink_addr, StdDuration::from_secs(secs), "cubic");
    o.notsent_lowat = Some(16_384);
    let snd = TcpSender::start(&t.snd, o).unwrap();
    let sr = snd.join();
    let rep = sink.stop();
    let r = w.stop();
    check_no_unnamed_loss(&r);
    let conn = rep.conns.first().expect("a connection");
    let got = conn.goodput_bps(
        rep.interval,
        StdDuration::from_secs(from),
        StdDuration::from_secs(secs),
    );
    let kbps: Vec<u64> = conn
        .series
        .iter()
        .map(|b| b * 8 / rep.interval.as_millis() as u64)
        .collect();
    eprintln!(
        "{rate}: goodput {got:.0} bit/s, retrans {}, weir dropped {}; kbit/s per {:?}: {kbps:?}",
        sr.retrans, r.outbound.dropped.packets, rep.interval,
    );
    got
}

/// seed 000's Basic Test policy with 20 sessions (4 per class, distinct source addresses):
/// the rate each class leaves weir at, measured at the receiver from the frames' kernel
/// timestamps, is within ±5 % of the class's rate.
#[test]
fn basic_test_policy_with_20_sessions() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("basic_test_policy_with_20_sessions") {
        return;
    }
    let _serial = serial();
    let t = topo("basic");
    let aliases = t.add_sender_aliases(20).unwrap();
    let classes = [
        ("c20", 20_000.0),
        ("c40", 40_000.0),
        ("c128", 128_000.0),
        ("c256", 256_000.0),
        ("c1100", 1_100_000.0),
    ];
    let mut policy = String::from(
        "[link]\nrate = \"1.544Mbit\"\ntechnique = \"cbq+pfq\"\ndefault = \"c1100\"\n",
    );
    for (k, (name, bps)) in classes.iter().enumerate() {
        let srcs: Vec<String> = aliases[4 * k..4 * k + 4]
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        policy += &format!(
            "[[class]]\nname = \"{name}\"\nrate = \"{}bit\"\nceil = \"{}bit\"\n[class.session]\nguarantee = \"25%\"\n[[rule]]\nclass = \"{name}\"\nsrc = [{}]\n",
            *bps as u64,
            *bps as u64,
            srcs.join(", ")
        );
    }
    let w = Weir::start(&t, &policy);
    // receiver-side capture of frame arrival times per source
    let stop_cap = Arc::new(AtomicBool::new(false));
    let sc = stop_cap.clone();
    let rif = t.rcv_if.clone();
    let cap = t
        .rcv
        .spawn(move || {
            let mut rx = RxRing::open(&rif, RingConfig::default()).unwrap();
            let mut frames: Vec<(IpAddr, u64, u32)> = Vec::new();
            while !sc.load(Ordering::Relaxed) {
                match rx.peek() {
                    Some(f) => {
                        if let Ok(p) = weir_wire::parse_frame(f.data) {
                            if let Some(src) = p.src_ip {
                                frames.push((src, f.ts_ns, f.wire_len));
                            }
                        }
                        rx.release();
                    }
                    None => std::thread::sleep(StdDuration::from_micros(200)),
                }
            }
            frames
        })
        .unwrap();
    let secs = 30;
    let sink_addr = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001);
    let sink = TcpSink::start(&t.rcv, sink_addr, StdDuration::from_millis(100)).unwrap();
    let senders: Vec<TcpSender> = aliases
        .iter()
        .map(|a| {
            let mut o = SenderOpts::new(sink_addr, StdDuration::from_secs(secs), "cubic");
            o.src = Some(*a);
            o.notsent_lowat = Some(16_384);
            o.connect_timeout = StdDuration::from_secs(20);
            TcpSender::start(&t.snd, o).unwrap()
        })
        .collect();
    let t0 = std::time::Instant::now();
    std::thread::sleep(StdDuration::from_secs(secs));
    stop_cap.store(true, Ordering::SeqCst);
    let frames = cap.join().unwrap();
    for s in senders {
        s.stop();
    }
    sink.stop();
    let r = w.stop();
    check_no_unnamed_loss(&r);
    // window: from 10 s after the start to the end of the run
    let first_ts = frames.iter().map(|f| f.1).min().unwrap();
    let from = first_ts + 10_000_000_000;
    let _ = t0;
    for (k, (name, bps)) in classes.iter().enumerate() {
        let mine: Vec<(u64, u32)> = frames
            .iter()
            .filter(|f| aliases[4 * k..4 * k + 4].contains(&f.0) && f.1 >= from)
            .map(|f| (f.1, f.2))
            .collect();
        assert!(mine.len() >= 10, "{name}: only {} frames", mine.len());
        // bytes after the first frame over the time from first to last: no edge quantisation
        let bytes: u64 = mine[1..].iter().map(|f| f.1 as u64).sum();
        let dt = (mine.last().unwrap().0 - mine[0].0) as f64 / 1e9;
        let got = bytes as f64 * 8.0 / dt;
        let err = got / bps - 1.0;
        eprintln!(
            "{name}: {got:.0} bit/s over {dt:.1}s ({:+.2}%)",
            err * 100.0
        );
        assert!(
            err.abs() <= 0.05,
            "{name}: {got:.0} bit/s vs {bps} ({:+.2}%)",
            err * 100.0
        );
    }
}

/// A 10 Mbit/s link whose one leaf is a flow queue with COBALT (built from its parts: the
/// policy keys for it come separately), one ECN-capable cubic flow through it for 6 s:
/// the final report carries the leaf's AQM counters under `pipelines`, with the marks
/// COBALT made, under the JSON key the lab's rrul reads (`ecn_marks`).
#[test]
fn aqm_counters_reach_the_final_report() {
    let _group = weir_lab::testing::group(module_path!());
    use weir_core::classify::Classifier;
    use weir_core::queue::fq::FqConfig;
    use weir_core::sched::linkshare::{ClassSpec, LinkShare};
    if skip_unless_root("aqm_counters_reach_the_final_report") {
        return;
    }
    let _serial = serial();
    let t = topo("aqmrep");
    for ns in [&t.snd, &t.rcv] {
        ns.set_sysctl("net.ipv4.tcp_ecn", "1").unwrap();
    }
    let rate = Rate::from_bps(10_000_000);
    let spec = |name: &str, parent, queue| ClassSpec::fixed(name, parent, rate, queue);
    let fq = FqConfig::for_rate(Some(rate)).build(1).unwrap();
    let ls = LinkShare::new(
        vec![spec("link", None, None), spec("fq", Some(0), Some(fq))],
        1,
        Instant::ZERO,
    )
    .unwrap();
    let mut cfg = DeviceConfig::default();
    cfg.lanes[0] = LaneConfig {
        classifier: Some(Classifier::new(Vec::new(), 1).unwrap()),
        shaper: Some(ls),
        ..Default::default()
    };
    let w = Weir::start_device(&t, Device::new(cfg).unwrap());
    let sink_addr = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001);
    let sink = TcpSink::start(&t.rcv, sink_addr, StdDuration::from_millis(100)).unwrap();
    let snd = TcpSender::start(
        &t.snd,
        SenderOpts::new(sink_addr, StdDuration::from_secs(6), "cubic"),
    )
    .unwrap();
    let sr = snd.join();
    sink.stop();
    let r = w.stop();
    check_no_unnamed_loss(&r);
    assert!(r.pipelines.inbound.is_none(), "inbound is not shaped");
    let snap = r.pipelines.outbound.as_ref().expect("outbound is shaped");
    let q = snap.classes[1].queue.as_ref().unwrap();
    let a = q.aqm.expect("an FQ + COBALT leaf has AQM counters");
    eprintln!(
        "{a:?}; drops {:?}; sender retransmits {}",
        q.drops, sr.retrans
    );
    assert!(a.ecn_marks > 0, "COBALT marked the ECN flow: {a:?}");
    assert!(a.max_flows >= 1 && a.new_flows >= 1, "{a:?}");
    assert_eq!(
        a.aqm_drops,
        q.drops.get("aqm").map_or(0, |c| c.packets),
        "{q:?}"
    );
    let v = serde_json::to_value(&r).unwrap();
    let aqm = &v["pipelines"]["outbound"]["classes"][1]["queue"]["aqm"];
    assert_eq!(aqm["ecn_marks"].as_u64(), Some(a.ecn_marks), "{v}");
    assert_eq!(aqm["aqm_drops"].as_u64(), Some(a.aqm_drops), "{v}");
    assert_eq!(aqm["ack_filter_drops"].as_u64(), Some(0), "{v}");
}

/// A frame longer than the outgoing interface's MTU is dropped and counted (`oversize`),
/// its sender gets an ICMP Fragmentation Needed (Linux sets DF on UDP by default), and it
/// does not hold up the frames behind it.
#[test]
fn oversize_frames_are_named_and_do_not_stall() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("oversize_frames_are_named_and_do_not_stall") {
        return;
    }
    let _serial = serial();
    let t = topo("mtu");
    weir_lab::topo::set_mtu(&t.snd, &t.snd_if, 1600).unwrap();
    weir_lab::topo::set_mtu(&t.dut, &t.dut_lan, 1600).unwrap();
    let w = Weir::start(&t, "[link]\nrate = \"10Mbit\"\n");
    let rx = t
        .rcv
        .spawn(|| {
            let s = std::net::UdpSocket::bind("10.77.0.2:6000").unwrap();
            s.set_read_timeout(Some(StdDuration::from_secs(2))).unwrap();
            let mut buf = [0u8; 2048];
            let mut got = vec![];
            while let Ok(n) = s.recv(&mut buf) {
                got.push(n);
            }
            got
        })
        .unwrap();
    std::thread::sleep(StdDuration::from_millis(100));
    t.snd.run(|| {
        let s = std::net::UdpSocket::bind("10.77.0.1:0").unwrap();
        // the first datagram makes ARP happen; give it time
        s.send_to(&[0u8; 10], "10.77.0.2:6000").unwrap();
        std::thread::sleep(StdDuration::from_millis(200));
        s.send_to(&[0u8; 1572], "10.77.0.2:6000").unwrap(); // 1600-byte IP packet
        for _ in 0..5 {
            s.send_to(&[0u8; 100], "10.77.0.2:6000").unwrap();
        }
    });
    let got = rx.join().unwrap();
    let r = w.stop();
    assert_eq!(got, vec![10, 100, 100, 100, 100, 100], "{r:?}");
    assert_eq!(r.outbound.oversize.packets, 1, "{r:?}");
    assert_eq!(r.outbound.pmtu.frag_needed.packets, 1, "{r:?}");
    assert_eq!(
        r.inbound.originated.packets, 1,
        "the reply went back: {r:?}"
    );
    check_no_unnamed_loss(&r);
}

/// When an interface disappears under it, the bridge stops with an error instead of
/// spinning on a socket that reports an error for ever.
#[test]
fn a_vanished_interface_stops_the_bridge() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("a_vanished_interface_stops_the_bridge") {
        return;
    }
    let _serial = serial();
    let t = topo("gone");
    let mut w = Weir::start(&t, "[link]\nrate = \"10Mbit\"\n");
    t.dut.ip(&["link", "del", &t.dut_wan]).unwrap();
    let h = w.handle.take().unwrap();
    let deadline = std::time::Instant::now() + StdDuration::from_secs(3);
    while !h.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "bridge still running after its interface vanished"
        );
        std::thread::sleep(StdDuration::from_millis(20));
    }
    let err = h.join().unwrap().expect_err("an error");
    assert!(
        err.contains(&format!("interface '{}' went away", t.dut_wan)),
        "{err}"
    );
}
