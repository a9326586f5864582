//! Fanout steering in the kernel: N packet sockets on one veth end joined to one
//! `PACKET_FANOUT_EBPF` group with weir's program; frames sent from the other end with
//! addresses in prefixes mapped to workers 0..N arrive on that worker's socket only
//! (IPv4, IPv6, a VLAN-tagged frame, the longest prefix winning, source or destination
//! side); an address in no prefix, ARP and a double-tagged frame land on socket 0 and are
//! counted; `set_all` moves circuits live. Needs root; skips with a reason otherwise.
//! The namespaces (and with them the veth pair) are removed when the test ends, on
//! failure too; the sockets and BPF objects close with their descriptors.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;
use weir_core::classify::IpNet;
use weir_io::fanout::{Changes, Side, Steering};
use weir_lab::topo::{skip_unless_root, VethPair};

const MARK: &[u8] = b"WEIRFAN";

fn net(s: &str) -> IpNet {
    IpNet::parse(s).unwrap()
}

/// The other address of every frame (the side the steering must not read): in a prefix
/// of the last worker, so reading the wrong side steers wrongly.
const OTHER4: [u8; 4] = [192, 0, 2, 1];
fn other6() -> [u8; 16] {
    "2001:db8:ffff::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets()
}

/// Circuits: A (worker 0) a /24 and a /56; B (worker 1) a /24, a /32 and a /56, plus a
/// /24 nested in C's /16; C (worker 2, with 3 workers) a /16 and a /48.
fn table(n: u32) -> Vec<(IpNet, u32)> {
    let mut t = vec![
        (net("10.1.0.0/24"), 0),
        (net("2001:db8:a::/56"), 0),
        (net("10.2.0.0/24"), 1),
        (net("10.9.9.9/32"), 1),
        (net("2001:db8:b::/56"), 1),
        (net("10.3.7.0/24"), 1),
        (net("192.0.2.0/24"), n - 1),
        (net("2001:db8:ffff::/48"), n - 1),
    ];
    if n == 3 {
        t.extend([(net("10.3.0.0/16"), 2), (net("2001:db8:c::/48"), 2)]);
    }
    t
}

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Vlan,
    QinQ,
    Arp,
}

struct Case {
    addr: Option<IpAddr>,
    kind: Kind,
    want: usize,
    counted: bool,
}

fn cases(n: u32) -> Vec<Case> {
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    let c = |addr, want, counted| Case {
        addr,
        kind: Kind::Plain,
        want,
        counted,
    };
    let mut v = vec![
        c(ip("10.1.0.7"), 0, false),
        c(ip("10.2.0.200"), 1, false),
        c(ip("10.9.9.9"), 1, false),
        c(ip("2001:db8:a::5"), 0, false),
        c(ip("2001:db8:b:ff::1"), 1, false),
        c(ip("172.16.0.1"), 0, true),
        c(ip("2001:db8:dead::1"), 0, true),
        Case {
            addr: ip("10.2.0.9"),
            kind: Kind::Vlan,
            want: 1,
            counted: false,
        },
        Case {
            addr: ip("10.2.0.9"),
            kind: Kind::QinQ,
            want: 0,
            counted: true,
        },
        Case {
            addr: None,
            kind: Kind::Arp,
            want: 0,
            counted: true,
        },
    ];
    if n == 3 {
        v.extend([
            c(ip("10.3.1.1"), 2, false),
            c(ip("10.3.7.1"), 1, false), // the longer /24 wins over C's /16
            c(ip("2001:db8:c:1::1"), 2, false),
        ]);
    } else {
        // C's /16 is absent: its addresses outside B's /24 are unmatched
        v.push(c(ip("10.3.1.1"), 0, true));
    }
    v
}

/// An Ethernet frame to `dst_mac` carrying `addr` on `side` (the other address fixed),
/// ending with the marker and `id`.
fn frame(dst_mac: [u8; 6], case: &Case, side: Side, id: u16) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend([0x02, 0, 0, 0, 0, 1]);
    let mut tail = MARK.to_vec();
    tail.extend(id.to_be_bytes());
    match case.kind {
        Kind::Vlan => f.extend([0x81, 0x00, 0x00, 0x05]),
        Kind::QinQ => f.extend([0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x05]),
        Kind::Plain | Kind::Arp => {}
    }
    let order = |a: Vec<u8>, o: Vec<u8>| match side {
        Side::Src => [a, o].concat(),
        Side::Dst => [o, a].concat(),
    };
    match case.addr {
        Some(IpAddr::V4(a)) => {
            f.extend([0x08, 0x00, 0x45, 0, 0, (20 + tail.len()) as u8]);
            f.extend([0, 1, 0, 0, 64, 253, 0, 0]);
            f.extend(order(a.octets().to_vec(), OTHER4.to_vec()));
        }
        Some(IpAddr::V6(a)) => {
            f.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, tail.len() as u8, 253, 64]);
            f.extend(order(a.octets().to_vec(), other6().to_vec()));
        }
        None => {
            // an ARP request for 10.0.0.99 from 10.0.0.98
            f.extend([0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
            f.extend([0x02, 0, 0, 0, 0, 1, 10, 0, 0, 98]);
            f.extend([0, 0, 0, 0, 0, 0, 10, 0, 0, 99]);
        }
    }
    f.extend(tail);
    f
}

fn packet_socket(ifname: &str, protocol: u16, nonblock: bool) -> OwnedFd {
    let flags = if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | flags,
            i32::from(protocol.to_be()),
        )
    };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex > 0, "no interface {ifname}");
    // SAFETY: an all-zero sockaddr_ll is valid; the fields are set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a live sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

/// The ids of marked frames waiting on `fd`.
fn drain(fd: &OwnedFd) -> Vec<u16> {
    let mut ids = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: `buf` is live and its length passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return ids;
        }
        let f = &buf[..n as usize];
        if let Some(i) = f.windows(MARK.len()).position(|w| w == MARK) {
            let at = i + MARK.len();
            ids.push(u16::from_be_bytes([f[at], f[at + 1]]));
        }
    }
}

fn send_all(fd: &OwnedFd, frames: &[Vec<u8>]) {
    for f in frames {
        // SAFETY: `f` is live and its length passed.
        let n = unsafe { libc::send(fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        assert_eq!(
            n as usize,
            f.len(),
            "send: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn mac(p: &VethPair) -> [u8; 6] {
    let o = p
        .rcv
        .exec_checked(&["cat", "/sys/class/net/eth0/address"])
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// A veth pair whose hosts send nothing of their own (no IPv6: no neighbour discovery
/// or router solicitations), so every frame the receiving sockets see is the test's; and
/// the receiver's MAC address.
fn quiet_pair(label: &str) -> (VethPair, [u8; 6]) {
    let p = VethPair::new(label).expect("topology");
    for ns in [&p.snd, &p.rcv] {
        for key in ["all", "eth0"] {
            ns.set_sysctl(&format!("net.ipv6.conf.{key}.disable_ipv6"), "1")
                .unwrap();
        }
    }
    let m = mac(&p);
    (p, m)
}

/// Send every case and return, per case id, the sockets it arrived on.
fn exchange(p: &VethPair, socks: &[OwnedFd], frames: Vec<Vec<u8>>) -> BTreeMap<u16, Vec<usize>> {
    p.snd.run(move || {
        let tx = packet_socket("eth0", 0, false);
        send_all(&tx, &frames);
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut got: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, s) in socks.iter().enumerate() {
        for id in drain(s) {
            got.entry(id).or_default().push(i);
        }
    }
    got
}

fn check(p: &VethPair, dst_mac: [u8; 6], n: u32, side: Side, group: u16) {
    let (steering, socks) = p.rcv.run(move || {
        let s = Steering::new(n, side).unwrap_or_else(|e| panic!("{e}"));
        let c = s.set_all(&table(n)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.added, table(n).len());
        let socks: Vec<OwnedFd> = (0..n)
            .map(|_| {
                let fd = packet_socket("eth0", libc::ETH_P_ALL as u16, true);
                s.join(fd.as_raw_fd(), group)
                    .unwrap_or_else(|e| panic!("{e}"));
                fd
            })
            .collect();
        (s, socks)
    });
    let cs = cases(n);
    let frames = cs
        .iter()
        .enumerate()
        .map(|(id, c)| frame(dst_mac, c, side, id as u16))
        .collect();
    let got = exchange(p, &socks, frames);
    let ctx = format!("{n} workers, {side:?}");
    for (id, c) in cs.iter().enumerate() {
        let what = match c.addr {
            Some(a) => format!(
                "{a} ({})",
                ["plain", "vlan", "qinq", "arp"][c.kind as usize]
            ),
            None => "ARP".into(),
        };
        assert_eq!(
            got.get(&(id as u16)),
            Some(&vec![c.want]),
            "{ctx}: {what} should arrive on socket {} only",
            c.want
        );
    }
    let counted = cs.iter().filter(|c| c.counted).count() as u64;
    assert_eq!(steering.unsteered(), counted, "{ctx}: unsteered frames");

    // a reload: B's circuit moves to worker 0, A's IPv4 /24 is dropped
    let mut t: Vec<(IpNet, u32)> = table(n)
        .into_iter()
        .filter(|(p, _)| *p != net("10.1.0.0/24"))
        .map(|(p, w)| (p, if w == 1 { 0 } else { w }))
        .collect();
    t.push((net("10.4.0.0/24"), n - 1));
    let c = steering.set_all(&t).unwrap();
    // B's four prefixes change worker; with 2 workers the other side's two (worker 1) too
    let changed = if n == 2 { 6 } else { 4 };
    let want = Changes {
        added: 1,
        changed,
        removed: 1,
    };
    assert_eq!(c, want, "{ctx}");
    let moved = [
        ("10.1.0.7", 0, true),
        ("10.2.0.200", 0, false),
        ("2001:db8:b:ff::1", 0, false),
        ("10.4.0.1", n as usize - 1, false),
    ];
    let frames = moved
        .iter()
        .enumerate()
        .map(|(id, (a, _, _))| {
            let case = Case {
                addr: Some(a.parse().unwrap()),
                kind: Kind::Plain,
                want: 0,
                counted: false,
            };
            frame(dst_mac, &case, side, 100 + id as u16)
        })
        .collect();
    let got = exchange(p, &socks, frames);
    for (id, (a, want, _)) in moved.iter().enumerate() {
        assert_eq!(
            got.get(&(100 + id as u16)),
            Some(&vec![*want]),
            "{ctx}: after the reload {a} should arrive on socket {want} only"
        );
    }
    // weir's own transmissions on the interface are not received (the group's
    // PACKET_FANOUT_FLAG_IGNORE_OUTGOING), nor run through the program
    let out = frame(dst_mac, &cs[1], side, 200);
    p.rcv
        .run(move || send_all(&packet_socket("eth0", 0, false), &[out]));
    std::thread::sleep(Duration::from_millis(50));
    for (i, s) in socks.iter().enumerate() {
        let ids = drain(s);
        assert!(ids.is_empty(), "{ctx}: socket {i} received {ids:?}");
    }
    let more = moved.iter().filter(|m| m.2).count() as u64;
    assert_eq!(
        steering.unsteered(),
        counted + more,
        "{ctx}: after the reload"
    );
    assert!(!steering.remove(net("10.1.0.0/24")).unwrap());
    assert!(steering.remove(net("10.4.0.0/24")).unwrap());
}

#[test]
fn frames_reach_the_worker_of_their_circuit() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("frames_reach_the_worker_of_their_circuit") {
        return;
    }
    let (p, dst_mac) = quiet_pair("fan");
    let mut group = 0x5700;
    for n in [2, 3] {
        for side in [Side::Src, Side::Dst] {
            group += 1;
            check(&p, dst_mac, n, side, group);
        }
    }
}

/// Joining with a worker index past the group is refused before it reaches the kernel.
#[test]
fn a_worker_past_the_count_is_refused() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("a_worker_past_the_count_is_refused") {
        return;
    }
    let s = Steering::new(2, Side::Dst).unwrap_or_else(|e| panic!("{e}"));
    let e = s.insert(net("10.0.0.0/8"), 2).unwrap_err().to_string();
    assert!(e.contains("worker 2, but there are 2 workers"), "{e}");
    let e = s.set_all(&[(net("10.0.0.0/8"), 5)]).unwrap_err();
    assert!(e.to_string().contains("worker 5"), "{e}");
    assert!(s.entries().is_empty());
    s.insert(net("10.0.0.0/8"), 1).unwrap();
    assert_eq!(s.entries(), vec![(net("10.0.0.0/8"), 1)]);
}

/// The rings weir's workers use: two RX rings (TPACKET_V2, virtio-net headers, copy
/// threshold) in one group; 1000-byte frames sent from a TX ring, as a weir upstream
/// would send them; each frame is in its worker's ring only.
#[test]
fn rx_rings_in_a_group_get_their_circuits() {
    let _group = weir_lab::testing::group(module_path!());
    use weir_io::afpacket::{RingConfig, RxRing, TxRing};
    if skip_unless_root("rx_rings_in_a_group_get_their_circuits") {
        return;
    }
    let (p, dst_mac) = quiet_pair("fanr");
    let cfg = RingConfig {
        frame_size: 2048,
        frames: 64,
    };
    let (steering, mut rings) = p.rcv.run(move || {
        let s = Steering::new(2, Side::Dst).unwrap_or_else(|e| panic!("{e}"));
        s.set_all(&table(2)).unwrap();
        let rings: Vec<RxRing> = (0..2)
            .map(|_| {
                let r = RxRing::open("eth0", cfg).unwrap_or_else(|e| panic!("{e}"));
                s.join(r.fd(), 0x5800).unwrap_or_else(|e| panic!("{e}"));
                r
            })
            .collect();
        (s, rings)
    });
    let sent: Vec<(&str, usize)> = vec![
        ("10.1.0.1", 0),
        ("10.2.0.1", 1),
        ("2001:db8:a::1", 0),
        ("2001:db8:b::1", 1),
        ("10.9.9.9", 1),
    ];
    let frames: Vec<Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(id, (a, _))| {
            let case = Case {
                addr: Some(a.parse().unwrap()),
                kind: Kind::Plain,
                want: 0,
                counted: false,
            };
            let mut f = frame(dst_mac, &case, Side::Dst, id as u16);
            f.resize(1000, 0x55);
            f
        })
        .collect();
    p.snd.run(move || {
        let mut tx = TxRing::open("eth0", cfg).unwrap_or_else(|e| panic!("{e}"));
        for f in &frames {
            assert!(tx.push_with(|b| {
                b[..f.len()].copy_from_slice(f);
                f.len()
            }));
        }
        while tx.outstanding() > 0 {
            tx.flush().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut got: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, r) in rings.iter_mut().enumerate() {
        while let Some(f) = r.peek() {
            if let Some(at) = f.data.windows(MARK.len()).position(|w| w == MARK) {
                let at = at + MARK.len();
                let id = u16::from_be_bytes([f.data[at], f.data[at + 1]]);
                got.entry(id).or_default().push(i);
            }
            r.release();
        }
    }
    for (id, (a, want)) in sent.iter().enumerate() {
        assert_eq!(
            got.get(&(id as u16)),
            Some(&vec![*want]),
            "{a} should be in ring {want} only"
        );
    }
    assert_eq!(steering.unsteered(), 0);
}
