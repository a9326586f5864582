//! The fail-open bypass in the kernel, without weir's loop: the BPF program on the DUT's
//! two ingresses forwards between them once the heartbeat is stale, not while it is
//! fresh; counts what it forwards; a heartbeat of 0 forwards at once; removing the filters
//! stops it. Needs root; skips with a reason otherwise.

use std::time::{Duration, Instant};
use weir_io::failopen::{self, Bypass};
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

fn reaches(t: &BridgeTopo) -> bool {
    let r = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 1, Duration::from_millis(300)).unwrap();
    r[0].is_some()
}

/// Static neighbour entries on both hosts: an unresolved address would make the first
/// pings wait for ARP's one-second retries, not for the bypass.
fn static_neighbours(t: &BridgeTopo) {
    let mac = |ns: &weir_lab::topo::Netns, ifname: &str| {
        let o = ns
            .exec_checked(&["cat", &format!("/sys/class/net/{ifname}/address")])
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let (snd_mac, rcv_mac) = (mac(&t.snd, &t.snd_if), mac(&t.rcv, &t.rcv_if));
    for (ns, ifname, addr, lladdr) in [
        (&t.snd, &t.snd_if, BridgeTopo::RCV_ADDR, &rcv_mac),
        (&t.rcv, &t.rcv_if, BridgeTopo::SND_ADDR, &snd_mac),
    ] {
        let a = addr.to_string();
        ns.ip(&[
            "neigh",
            "replace",
            &a,
            "lladdr",
            lladdr,
            "dev",
            ifname,
            "nud",
            "permanent",
        ])
        .unwrap();
    }
}

#[test]
fn the_kernel_forwards_only_while_the_heartbeat_is_stale() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("the_kernel_forwards_only_while_the_heartbeat_is_stale") {
        return;
    }
    let t = BridgeTopo::new("fo").expect("topology");
    static_neighbours(&t);
    let (lan, wan) = (t.dut_lan.clone(), t.dut_wan.clone());
    // nothing forwards yet
    assert!(!reaches(&t));
    let timeout = weir_core::Duration::from_millis(100);
    let mut b = t
        .dut
        .run(move || Bypass::install(&lan, &wan, timeout))
        .unwrap_or_else(|e| panic!("{e}"));
    // fresh: keep beating from another thread in the DUT (the map is shared memory)
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let beater = std::thread::spawn(move || {
        let mut took_over = 0;
        while !s.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some(failopen::Beat::TookOver { .. }) = b.beat(weir_io::clock::monotonic_ns()) {
                took_over += 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        (b, took_over)
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!reaches(&t), "forwarded while the heartbeat was fresh");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut b, took_over) = beater.join().unwrap();
    assert_eq!(took_over, 0, "a 2 ms beat never goes stale");
    assert_eq!(b.forwarded(), Default::default());
    // stale: the kernel forwards within the timeout (and a beat's interval)
    let stopped = Instant::now();
    let mut first = None;
    while stopped.elapsed() < Duration::from_secs(2) {
        if icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 1, Duration::from_millis(20)).unwrap()[0]
            .is_some()
        {
            first = Some(stopped.elapsed());
            break;
        }
    }
    let first = first.expect("the kernel never forwarded with a stale heartbeat");
    assert!(first >= Duration::from_millis(80), "too early: {first:?}");
    assert!(first <= Duration::from_millis(200), "too late: {first:?}");
    let (out, back) = b.forwarded();
    assert!(out.packets >= 1 && back.packets >= 1, "{out:?} {back:?}");
    // an echo request is 98 bytes on the wire without the FCS (14 + 20 + 8 + 56)
    assert!(out.bytes >= 98 * out.packets, "{out:?}");
    // the next beat finds it stale: a take-over; forwarding stops again
    match b.beat(weir_io::clock::monotonic_ns() + 1_000_000_000) {
        Some(failopen::Beat::TookOver { before_realtime_ns }) => {
            let now = weir_io::clock::realtime_ns();
            assert!(before_realtime_ns <= now && now - before_realtime_ns < 1_000_000_000);
        }
        other => panic!("expected a take-over, got {other:?}"),
    }
    let _ = b.beat(weir_io::clock::monotonic_ns() + 2_000_000_000);
    // (heartbeats in the future keep it fresh for the rest of the test)
    assert!(!reaches(&t));
    // a clean stop hands over at once
    b.hand_to_kernel();
    assert!(reaches(&t), "a heartbeat of 0 forwards at once");
    // the filter outlives the map's owner
    drop(b);
    assert!(reaches(&t), "the bypass died with weir's mapping");
    let out = t
        .dut
        .exec_checked(&["tc", "filter", "show", "dev", &t.dut_lan, "ingress"])
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        shown.contains(failopen::NAME) && shown.contains("direct-action"),
        "{shown}"
    );
    // fail-closed removes it
    let (lan, wan) = (t.dut_lan.clone(), t.dut_wan.clone());
    let had = t.dut.run(move || failopen::remove(&[&lan, &wan])).unwrap();
    assert_eq!(had.len(), 2);
    assert!(!reaches(&t), "forwarded after the filters were removed");
    let (lan, wan) = (t.dut_lan.clone(), t.dut_wan.clone());
    let had = t.dut.run(move || failopen::remove(&[&lan, &wan])).unwrap();
    assert!(had.is_empty(), "removed twice: {had:?}");
}
