//! Testbed self-tests: namespaces, veth, the kernel-bridge baseline, the traffic agents, and
//! cleanup (also after a panic). They need root; elsewhere they print SKIP and pass.
#![allow(clippy::disallowed_methods)] // measures wall-clock time

use std::net::{IpAddr, SocketAddr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weir_lab::agents::{
    icmp_ping, icmp_ping_with, DscpCounter, PingOpts, ProbeKind, ProbeOpts, Prober, SenderOpts,
    SinkOpts, TcpSender, TcpSink, UdpReflector,
};
use weir_lab::topo::{
    list_testbed_namespaces, process_prefix, skip_unless_root, BridgeTopo, Netns,
};

/// The tests share the machine's network stack and check that *no* namespace of this process
/// is left, so they run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn own_namespaces() -> Vec<String> {
    let prefix = process_prefix();
    list_testbed_namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn assert_gone(names: &[String]) {
    let present = list_testbed_namespaces();
    for n in names {
        assert!(!present.contains(n), "namespace {n} still exists");
    }
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    for n in names {
        assert!(
            !listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(n)),
            "{n} listed"
        );
    }
    assert_eq!(
        own_namespaces(),
        Vec::<String>::new(),
        "leftover namespaces of this process"
    );
}

#[test]
fn kernel_bridge_ping_and_tcp_goodput() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("kernel_bridge_ping_and_tcp_goodput") {
        return;
    }
    let _g = serial();
    let names;
    {
        let topo = BridgeTopo::new("kbr").expect("topology");
        names = topo.namespace_names().to_vec();
        for n in &names {
            assert!(n.starts_with(&process_prefix()), "{n}");
        }
        topo.with_kernel_bridge().expect("kernel bridge");
        let rtts = icmp_ping(&topo.snd, BridgeTopo::RCV_ADDR, 3, Duration::from_secs(2)).unwrap();
        assert!(
            rtts.iter().all(Option::is_some),
            "ping through the kernel bridge: {rtts:?}"
        );
        eprintln!("ping rtts: {rtts:?}");

        let interval = Duration::from_millis(100);
        let bind: SocketAddr = "0.0.0.0:5001".parse().unwrap();
        let sink = TcpSink::start(&topo.rcv, bind, interval).expect("sink");
        let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001);
        let opts = SenderOpts::new(dst, Duration::from_secs(3), "cubic");
        let sender = TcpSender::start(&topo.snd, opts).expect("sender");
        let sent = sender.join();
        let report = sink.finish(Duration::from_secs(3));

        assert_eq!(sent.error, None);
        assert_eq!(sent.cc, "cubic");
        assert!(
            sent.drained,
            "sink did not close after reading everything: {sent:?}"
        );
        assert_eq!(report.conns.len(), 1, "{report:?}");
        let c = &report.conns[0];
        assert_eq!(c.peer.ip(), IpAddr::V4(BridgeTopo::SND_ADDR));
        assert_eq!(c.peer, sent.local);
        assert!(c.eof_at.is_some());
        // Every byte written was read.
        assert_eq!(c.bytes, sent.bytes_written);
        assert_eq!(c.series.iter().sum::<u64>(), c.bytes);
        assert!(sent.segs_out > 0 && sent.data_segs_out > 0);
        assert!(sent.rtt > Duration::ZERO);
        // Skip the first 500 ms (slow start), up to the end of writing.
        let first = c.first_byte.unwrap();
        let from = first + Duration::from_millis(500);
        let to = first + Duration::from_millis(2900);
        let bps = c.goodput_bps(interval, from, to);
        eprintln!(
            "kernel bridge goodput {:.1} Mbit/s, {} bytes, {} segs, {} retrans, rtt {:?}",
            bps / 1e6,
            c.bytes,
            sent.data_segs_out,
            sent.retrans,
            sent.rtt
        );
        assert!(bps > 100e6, "goodput {bps} bit/s through the kernel bridge");
    }
    assert_gone(&names);
}

#[test]
fn probes_marks_and_tcp_info_samples() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("probes_marks_and_tcp_info_samples") {
        return;
    }
    let _g = serial();
    let names;
    {
        let topo = BridgeTopo::new("prb").expect("topology");
        names = topo.namespace_names().to_vec();
        topo.with_kernel_bridge().expect("kernel bridge");
        let refl = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 7001);
        let reflector = UdpReflector::start(&topo.rcv, refl, None).unwrap();
        let every = Duration::from_millis(10);
        let udp = Prober::start(&topo.snd, ProbeOpts::new(ProbeKind::Udp, refl, every)).unwrap();
        let icmp = Prober::start(
            &topo.snd,
            ProbeOpts::new(ProbeKind::Icmp, SocketAddr::new(refl.ip(), 0), every),
        )
        .unwrap();
        // a marked sender sampling TCP_INFO, into a sink whose series start 1 s earlier
        let origin = Instant::now() - Duration::from_secs(1);
        let mut so = SinkOpts::new("0.0.0.0:5001".parse().unwrap(), Duration::from_millis(100));
        so.epoch = Some(origin);
        let sink = TcpSink::start_with(&topo.rcv, so).unwrap();
        let dscp = DscpCounter::start(&topo.rcv, &topo.rcv_if).unwrap();
        let mut o = SenderOpts::new(
            SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5001),
            Duration::from_millis(600),
            "cubic",
        );
        o.tos = Some(46 << 2);
        o.info_every = Some(Duration::from_millis(50));
        o.info_origin = Some(origin);
        let sent = TcpSender::start(&topo.snd, o).unwrap().join();
        let rec = sink.finish(Duration::from_secs(2));
        let counts = dscp.stop();
        let (u, i) = (udp.finish(), icmp.finish());
        let r = reflector.stop();
        // 10 ms probes for about 0.7 s: every one answered, one-way delays each way
        for (kind, p) in [("udp", &u), ("icmp", &i)] {
            assert!(p.records.len() >= 40, "{kind}: {} probes", p.records.len());
            assert_eq!(p.error, None);
            assert!(p.records.iter().all(|x| x.rx_ns.is_some()), "{kind}: {p:?}");
            let rtt = p.records.iter().map(|x| x.rtt_ns().unwrap()).max().unwrap();
            assert!(rtt > 0 && rtt < 100_000_000, "{kind}: worst {rtt} ns");
        }
        assert!(u
            .records
            .iter()
            .all(|x| x.up_ns().unwrap() > 0 && x.down_ns().unwrap() > 0));
        assert!(i.records.iter().all(|x| x.up_ns().is_none()));
        assert_eq!(r.reflected as usize, u.records.len());
        // the data went out as EF; the samples are timed from the origin, a second before
        assert_eq!(sent.error, None);
        let ef = counts.from_source(sent.local).payload_of(&[46]);
        assert!(
            ef > 100_000 && ef == counts.from_source(sent.local).payload_total(),
            "{ef}"
        );
        assert!(sent.samples.len() >= 8, "{} samples", sent.samples.len());
        assert!(sent.samples.iter().all(|s| s.srtt_us > 0 && s.cwnd > 0));
        assert!(sent.samples[0].t_us >= 1_000_000, "{:?}", sent.samples[0]);
        // the sink's bins count from the origin: nothing in the first second
        let c = &rec.conns[0];
        assert!(
            c.series[..10].iter().all(|&b| b == 0) && c.bytes > 0,
            "{:?}",
            c.series
        );
    }
    assert_gone(&names);
}

#[test]
fn aliases_and_tcp_options() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("aliases_and_tcp_options") {
        return;
    }
    let _g = serial();
    let names;
    {
        let topo = BridgeTopo::new("alias").expect("topology");
        names = topo.namespace_names().to_vec();
        topo.with_kernel_bridge().unwrap();
        weir_lab::remote::Host::Local(&topo.snd)
            .set_tcp_options(false, false, true)
            .unwrap();
        assert_eq!(topo.snd.get_sysctl("net.ipv4.tcp_sack").unwrap(), "0");

        let t = Instant::now();
        let aliases = topo.add_sender_aliases(300).unwrap();
        eprintln!("300 aliases in {:?}", t.elapsed());
        assert_eq!(aliases.len(), 300);
        assert_eq!(aliases[0], "10.77.1.1".parse::<IpAddr>().unwrap());
        assert_eq!(aliases[252], "10.77.1.253".parse::<IpAddr>().unwrap());
        assert_eq!(aliases[253], "10.77.2.1".parse::<IpAddr>().unwrap());
        let more = topo.add_sender_aliases(1).unwrap();
        assert_eq!(more[0], "10.77.2.48".parse::<IpAddr>().unwrap());

        let src = aliases[299];
        let IpAddr::V4(src4) = src else {
            unreachable!()
        };
        let mut p = PingOpts::new(1, Duration::from_secs(2));
        p.src = Some(src4);
        let r = icmp_ping_with(&topo.snd, BridgeTopo::RCV_ADDR, &p).unwrap();
        assert!(r[0].is_some(), "ping from alias {src}");

        let interval = Duration::from_millis(50);
        let sink = TcpSink::start(&topo.rcv, "0.0.0.0:0".parse().unwrap(), interval).expect("sink");
        let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), sink.local_addr().port());
        let mut opts = SenderOpts::new(dst, Duration::from_millis(300), "reno");
        opts.src = Some(src);
        opts.mss = Some(1000);
        opts.nodelay = true;
        let s1 = TcpSender::start(&topo.snd, opts.clone()).unwrap();
        opts.src = Some(aliases[0]);
        opts.cc = "bbr".into();
        let s2 = TcpSender::start(&topo.snd, opts).unwrap();
        let (r1, r2) = (s1.join(), s2.join());
        let report = sink.finish(Duration::from_secs(3));
        assert_eq!(report.conns.len(), 2);
        for (r, cc, ip) in [(&r1, "reno", src), (&r2, "bbr", aliases[0])] {
            assert_eq!(r.cc, cc);
            assert_eq!(r.local.ip(), ip);
            assert!(r.drained && r.error.is_none(), "{r:?}");
            let i = &r.info_final;
            assert!(!i.sack && !i.timestamps && i.window_scaling, "{i:?}");
            assert!(i.snd_mss <= 1000 && i.snd_mss > 0, "{i:?}");
            let c = report.conns_from(ip).next().expect("connection from alias");
            assert_eq!(c.bytes, r.bytes_written);
            assert!(c.bytes > 0);
        }
        // All series of a report share the same bins.
        assert_eq!(report.conns[0].series.len(), report.conns[1].series.len());
        assert_eq!(
            report.total_series().iter().sum::<u64>(),
            report.total_bytes()
        );
    }
    assert_gone(&names);
}

#[test]
fn sender_deadlines_hold() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("sender_deadlines_hold") {
        return;
    }
    let _g = serial();
    let names;
    {
        // No bridge: nothing gets through; a connect must time out on time.
        let topo = BridgeTopo::new("nobr").expect("topology");
        names = topo.namespace_names().to_vec();
        let r = icmp_ping(
            &topo.snd,
            BridgeTopo::RCV_ADDR,
            1,
            Duration::from_millis(200),
        )
        .unwrap();
        assert_eq!(r, vec![None], "reached the receiver with no bridge");
        let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 9);
        let mut opts = SenderOpts::new(dst, Duration::from_secs(1), "cubic");
        opts.connect_timeout = Duration::from_millis(300);
        let t = Instant::now();
        let e = TcpSender::start(&topo.snd, opts).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(e.to_string().contains("connect"), "{e}");
        // `until` bounds the connect too: a 30 s timeout gives up at a stop time 300 ms on
        let mut opts = SenderOpts::new(dst, Duration::from_secs(1), "cubic");
        opts.connect_timeout = Duration::from_secs(30);
        opts.until = Some(Instant::now() + Duration::from_millis(300));
        let t = Instant::now();
        let e = TcpSender::start(&topo.snd, opts).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(e.to_string().contains("connect"), "{e}");

        // A sender whose receiver never reads: writing stops at the deadline anyway,
        // and the drain ends at its timeout.
        topo.with_kernel_bridge().unwrap();
        let listener = topo
            .rcv
            .run(|| std::net::TcpListener::bind("0.0.0.0:5002"))
            .expect("listener");
        let mut opts = SenderOpts::new(
            SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5002),
            Duration::from_millis(300),
            "cubic",
        );
        opts.drain_timeout = Duration::from_millis(200);
        let t = Instant::now();
        let r = TcpSender::start(&topo.snd, opts).unwrap().join();
        let took = t.elapsed();
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert!(!r.drained);
        assert!(r.bytes_written > 0);
        // a 30 s sender with a stop time 300 ms on writes until then
        let mut opts = SenderOpts::new(
            SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5002),
            Duration::from_secs(30),
            "cubic",
        );
        opts.drain_timeout = Duration::from_millis(200);
        opts.until = Some(Instant::now() + Duration::from_millis(300));
        let r = TcpSender::start(&topo.snd, opts).unwrap().join();
        assert!(r.write_time < Duration::from_millis(1000), "{r:?}");
        assert!(r.bytes_written > 0);
        drop(listener);
    }
    assert_gone(&names);
}

#[test]
fn netns_run_exec_sysctl() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("netns_run_exec_sysctl") {
        return;
    }
    let _g = serial();
    let name;
    {
        let ns = Netns::new("basic").unwrap();
        name = ns.name().to_string();
        // A closure in the namespace sees only its loopback.
        let ifs = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap());
        assert!(ifs.contains("lo:") && ifs.lines().count() == 3, "{ifs}");
        // Sysctls are per namespace.
        let host = Netns::host().unwrap();
        let before = host.get_sysctl("net.ipv4.ip_forward").unwrap();
        let want = if before == "1" { "0" } else { "1" };
        ns.set_sysctl("net.ipv4.ip_forward", want).unwrap();
        assert_eq!(ns.get_sysctl("net.ipv4.ip_forward").unwrap(), want);
        assert_eq!(host.get_sysctl("net.ipv4.ip_forward").unwrap(), before);
        // exec and exec_checked.
        let out = ns.exec_checked(&["ip", "-o", "link"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
        assert!(ns.exec_checked(&["false"]).is_err());
        assert!(!ns.exec(&["false"]).unwrap().status.success());
        // Panics propagate out of run.
        let r = catch_unwind(AssertUnwindSafe(|| {
            ns.run(|| panic!("deliberate panic inside Netns::run"))
        }));
        assert!(r.is_err());
        // spawn.
        let h = ns.spawn(|| {
            std::fs::read_to_string("/proc/thread-self/net/dev")
                .unwrap()
                .lines()
                .count()
        });
        assert_eq!(h.unwrap().join().unwrap(), 3);
    }
    assert_gone(&[name]);
}

#[test]
fn cleanup_after_panic() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("cleanup_after_panic") {
        return;
    }
    let _g = serial();
    let names = Mutex::new(Vec::new());
    let r = catch_unwind(AssertUnwindSafe(|| {
        let topo = BridgeTopo::new("panic").expect("topology");
        *names.lock().unwrap() = topo.namespace_names().to_vec();
        topo.with_kernel_bridge().unwrap();
        // Agents alive too: they hold the namespaces until they are dropped.
        let _sink = TcpSink::start(
            &topo.rcv,
            "0.0.0.0:5003".parse().unwrap(),
            Duration::from_millis(100),
        )
        .unwrap();
        let dst = SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), 5003);
        let _sender = TcpSender::start(
            &topo.snd,
            SenderOpts::new(dst, Duration::from_secs(30), "cubic"),
        )
        .unwrap();
        assert!(!own_namespaces().is_empty());
        panic!("deliberate panic with a live topology");
    }));
    assert!(r.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 3);
    assert_gone(&names);
}

#[test]
fn veth_to_host_goes_with_the_namespace() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("veth_to_host_goes_with_the_namespace") {
        return;
    }
    let _g = serial();
    let host = Netns::host().unwrap();
    let (a, _) = weir_lab::topo::unique_veth_names();
    let name;
    {
        let ns = Netns::new("hostveth").unwrap();
        name = ns.name().to_string();
        weir_lab::topo::link_veth(&host, &a, &ns, "eth0").unwrap();
        weir_lab::topo::add_addr(&ns, "eth0", "fd00:77::2/64").unwrap();
        weir_lab::topo::set_up(&ns, "eth0").unwrap();
        weir_lab::topo::set_up(&host, &a).unwrap();
        weir_lab::topo::wait_link_up(&ns, "eth0", Duration::from_secs(3)).unwrap();
        assert!(host.ip(&["link", "show", "dev", &a]).is_ok());
    }
    assert_gone(&[name]);
    // The kernel destroys a deleted namespace (and the veth ends in it, taking their peers
    // along) asynchronously: the host's end disappears shortly after, not at once.
    let t = Instant::now();
    while host.ip(&["link", "show", "dev", &a]).is_ok() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "host end {a} still there"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "host end of the veth gone {:?} after the namespace",
        t.elapsed()
    );
}
