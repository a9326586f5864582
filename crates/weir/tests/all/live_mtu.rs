//! Frames longer than the egress MTU, through `weir emu` in network namespaces (root;
//! skips with the reason otherwise): the WAN-side interface of the DUT has MTU 1400, the
//! LAN side and both hosts 1500, so the receiver advertises a TCP MSS of 1460 and the
//! sender's full-size packets cannot leave weir towards it.
//!
//! - TCP (iperf3; the sender keeps TSO, so weir sees super-packets whose segments are too
//!   long) still works: weir drops those, answers ICMP Fragmentation Needed, and the
//!   sender's path MTU discovery lowers its segment size.
//! - A UDP socket that sends with DF regardless of the path MTU (`IP_PMTUDISC_PROBE`)
//!   and reads its error queue (`IP_RECVERR`): each 1500-byte datagram is answered by a
//!   Fragmentation Needed with MTU 1400, from the receiver's address, which the sender's
//!   kernel accepts (checksums and quote right) and reports as `EMSGSIZE`; the kernel's
//!   path MTU becomes 1400; datagrams between the oversize ones and one of exactly 1400
//!   bytes all arrive, in order (nothing stalls). The same over IPv6 with Packet Too Big.

use crate::common::{have, in_ns, iperf3_server, start_weir, stats, KillOnDrop, TempDir};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;
use weir_lab::topo::{set_mtu, skip_unless_root, BridgeTopo, Netns};

const WAN_MTU: u32 = 1400;
const SND6: &str = "fd77::1";
const RCV6: &str = "fd77::2";
const PORT: u16 = 6000;

/// One error from a socket's error queue: origin, ICMP type, code, info (the MTU), and the
/// address the ICMP came from.
#[derive(Debug, PartialEq)]
struct IcmpError {
    origin: u8,
    icmp_type: u8,
    code: u8,
    info: u32,
    errno: u32,
    from: Option<IpAddr>,
}

fn setsockopt(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: an int option on a socket this test owns.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt {level}/{name}: {}",
        std::io::Error::last_os_error()
    );
}

fn getsockopt(fd: i32, level: i32, name: i32) -> i32 {
    let mut v = 0i32;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: an int option of a socket this test owns, into an int.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut v as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(
        r,
        0,
        "getsockopt {level}/{name}: {}",
        std::io::Error::last_os_error()
    );
    v
}

/// Drain the error queue of `fd` (IP_RECVERR / IPV6_RECVERR).
fn icmp_errors(fd: i32) -> Vec<IcmpError> {
    let mut out = vec![];
    loop {
        let mut data = [0u8; 2048];
        let mut ctrl = [0u64; 64];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: a zeroed msghdr is valid; the buffers outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return out;
        }
        // SAFETY: walking the control messages the kernel wrote into `ctrl`.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !c.is_null() {
            let h = unsafe { &*c };
            let ours = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
            if ours {
                // SAFETY: IP_RECVERR data: a sock_extended_err, then the offender's address.
                let (e, from) = unsafe {
                    let p = libc::CMSG_DATA(c);
                    let e: libc::sock_extended_err = std::ptr::read_unaligned(p.cast());
                    let a = p.add(std::mem::size_of::<libc::sock_extended_err>());
                    let family = std::ptr::read_unaligned(a.cast::<libc::sa_family_t>());
                    let from = match i32::from(family) {
                        libc::AF_INET => {
                            let s: libc::sockaddr_in = std::ptr::read_unaligned(a.cast());
                            Some(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()))
                        }
                        libc::AF_INET6 => {
                            let s: libc::sockaddr_in6 = std::ptr::read_unaligned(a.cast());
                            Some(IpAddr::from(s.sin6_addr.s6_addr))
                        }
                        _ => None,
                    };
                    (e, from)
                };
                out.push(IcmpError {
                    origin: e.ee_origin,
                    icmp_type: e.ee_type,
                    code: e.ee_code,
                    info: e.ee_info,
                    errno: e.ee_errno,
                    from,
                });
            }
            // SAFETY: as above.
            c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
        }
    }
}

/// What the UDP part saw.
#[derive(Debug)]
struct Probe {
    errors: Vec<IcmpError>,
    /// The kernel's path MTU towards the receiver afterwards.
    path_mtu: i32,
    /// Sizes of the datagrams the receiver got, in order.
    received: Vec<usize>,
}

/// From `snd` to `rcv:PORT`: five rounds of a datagram of `big` bytes (DF, path MTU
/// ignored) then one of 100 bytes, then one of `fits` bytes (exactly the WAN MTU).
fn udp_probe(t: &BridgeTopo, snd: IpAddr, rcv: IpAddr, big: usize, fits: usize) -> Probe {
    let dst = SocketAddr::new(rcv, PORT);
    let listener = t
        .rcv
        .spawn(move || {
            let s = UdpSocket::bind(dst).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 2048];
            let mut got = vec![];
            while let Ok(n) = s.recv(&mut buf) {
                got.push(n);
            }
            got
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (errors, path_mtu) = t.snd.run(move || {
        let s = UdpSocket::bind(SocketAddr::new(snd, 0)).unwrap();
        s.connect(dst).unwrap();
        let fd = s.as_raw_fd();
        let (level, discover, probe, recverr, mtu) = match snd {
            IpAddr::V4(_) => (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_PROBE,
                libc::IP_RECVERR,
                libc::IP_MTU,
            ),
            IpAddr::V6(_) => (
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_PROBE,
                libc::IPV6_RECVERR,
                libc::IPV6_MTU,
            ),
        };
        setsockopt(fd, level, discover, probe);
        setsockopt(fd, level, recverr, 1);
        // the first datagram makes ARP / neighbour discovery happen
        s.send(&[1u8; 10]).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut errors = vec![];
        for _ in 0..5 {
            s.send(&vec![2u8; big]).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            // reading the queue also clears the socket's pending error for the next send
            errors.extend(icmp_errors(fd));
            s.send(&[3u8; 100]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        s.send(&vec![4u8; fits]).unwrap();
        (errors, getsockopt(fd, level, mtu))
    });
    let received = listener.join().unwrap();
    Probe {
        errors,
        path_mtu,
        received,
    }
}

/// Five errors of `(origin, type, code)` with the WAN MTU, from `rcv` (the reply's
/// source: the packet's destination); the kernel's path MTU lowered; every datagram but
/// the long ones arrived, in order, the last one `fits` bytes.
fn check_probe(p: &Probe, (origin, icmp_type, code): (u8, u8, u8), rcv: IpAddr, fits: usize) {
    eprintln!("{rcv}: {p:?}");
    let want = IcmpError {
        origin,
        icmp_type,
        code,
        info: WAN_MTU,
        errno: libc::EMSGSIZE as u32,
        from: Some(rcv),
    };
    assert_eq!(p.errors.len(), 5, "{p:?}");
    assert!(p.errors.iter().all(|e| e == &want), "{p:?}");
    assert_eq!(p.path_mtu, WAN_MTU as i32);
    assert_eq!(p.received, vec![10, 100, 100, 100, 100, 100, fits], "{p:?}");
}

/// iperf3 (TCP, cubic) from the sender for `secs`: the bytes the receiver got.
fn tcp_transfer(t: &BridgeTopo, secs: u32) -> f64 {
    let server = iperf3_server(t);
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let out = in_ns(
        &t.snd,
        &[
            "iperf3",
            "-c",
            &rcv,
            "-p",
            "5201",
            "-C",
            "cubic",
            "-t",
            &secs.to_string(),
            "-J",
        ],
    )
    .output()
    .unwrap();
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "iperf3 failed: {text}");
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("iperf3 output: {e}: {text}"));
    v["end"]["sum_received"]["bytes"]
        .as_f64()
        .unwrap_or_else(|| panic!("no bytes in {v}"))
}

fn add_v6(ns: &Netns, ifname: &str, addr: &str) {
    let cidr = format!("{addr}/64");
    ns.ip(&["-6", "addr", "add", cidr.as_str(), "dev", ifname, "nodad"])
        .unwrap();
}

#[test]
fn frames_over_the_wan_mtu_are_answered_and_do_not_stall() {
    let _group = crate::common::group(module_path!());
    let test = "frames_over_the_wan_mtu_are_answered_and_do_not_stall";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let t = BridgeTopo::new("mtu").unwrap();
    set_mtu(&t.dut, &t.dut_wan, WAN_MTU).unwrap();
    add_v6(&t.snd, &t.snd_if, SND6);
    add_v6(&t.rcv, &t.rcv_if, RCV6);
    let dir = TempDir(std::env::temp_dir().join(format!("weir-live-mtu-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let sock = dir.0.join("w.sock");
    let w: KillOnDrop = start_weir(&t, &["emu", "--rate", "20Mbit"], &sock);

    // TCP: path MTU discovery through weir
    let bytes = tcp_transfer(&t, 3);
    let s = stats(&sock);
    let o = &s["outbound"]["lane"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    eprintln!(
        "TCP across a {WAN_MTU}-byte WAN MTU: {:.0} kbit/s; outbound over MTU {}, frag-needed sent {}, rate-limited {}",
        bytes * 8.0 / 3e3,
        n(&o["oversize"]["packets"]),
        n(&o["pmtu"]["frag_needed"]["packets"]),
        n(&o["pmtu"]["rate_limited"])
    );
    assert!(n(&o["oversize"]["packets"]) >= 1, "{o}");
    assert!(n(&o["pmtu"]["frag_needed"]["packets"]) >= 1, "{o}");
    // 3 s at 20 Mbit/s carry 7.5 MB; a sender stuck on oversize segments moves nothing
    assert!(bytes > 2.5e6, "TCP moved only {bytes} bytes");
    std::thread::sleep(Duration::from_secs(1)); // the reply bucket refills

    // UDP, IPv4: Fragmentation Needed, MTU 1400, from the receiver's address
    let rcv4 = IpAddr::V4(BridgeTopo::RCV_ADDR);
    let p = udp_probe(&t, IpAddr::V4(BridgeTopo::SND_ADDR), rcv4, 1472, 1372);
    check_probe(&p, (libc::SO_EE_ORIGIN_ICMP, 3, 4), rcv4, 1372);

    // UDP, IPv6: Packet Too Big
    std::thread::sleep(Duration::from_secs(1));
    let rcv6: IpAddr = RCV6.parse().unwrap();
    let p = udp_probe(&t, SND6.parse().unwrap(), rcv6, 1452, 1352);
    check_probe(&p, (libc::SO_EE_ORIGIN_ICMP6, 2, 0), rcv6, 1352);

    // the counters: every oversize frame named, every reply accounted for
    let out = w.terminate();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let o = &r["outbound"];
    let pm = &o["pmtu"];
    // five UDP datagrams and at least one TCP super-packet
    assert!(n(&pm["frag_needed"]["packets"]) > 5, "{o}");
    assert_eq!(n(&pm["packet_too_big"]["packets"]), 5, "{o}");
    assert_eq!(
        n(&o["oversize"]["packets"]),
        n(&pm["frag_needed"]["packets"])
            + n(&pm["packet_too_big"]["packets"])
            + n(&pm["rate_limited"])
            + n(&pm["df_clear"])
            + n(&pm["not_answered"]),
        "{o}"
    );
    let i = &r["inbound"];
    assert!(
        n(&i["originated"]["packets"])
            >= n(&pm["frag_needed"]["packets"]) + n(&pm["packet_too_big"]["packets"]),
        "{i}"
    );
    for l in [o, i] {
        let c = |k: &str| n(&l[k]["packets"]);
        let errors: u64 = l["offload_errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| n(&v["packets"]))
            .sum();
        assert_eq!(
            c("rx") + c("duplicated") + c("originated"),
            c("tx")
                + c("truncated")
                + c("oversize")
                + c("pool_exhausted")
                + c("dropped")
                + c("reload_drops")
                + c("shutdown_drops")
                + c("consumed")
                + errors,
            "{l}"
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("longer than the other interface's MTU"),
        "{err}"
    );
}
