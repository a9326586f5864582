//! The per-flow DSCP counter on a veth pair: datagrams sent with three TOS values from two
//! sockets are counted per flow and DSCP at the receiver, bytes exact. Needs root; elsewhere
//! it prints SKIP and passes.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use weir_lab::agents::DscpCounter;
use weir_lab::topo::{skip_unless_root, VethPair};

const SND: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 1);
const RCV: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);

#[test]
fn counts_bytes_per_flow_and_dscp() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("counts_bytes_per_flow_and_dscp") {
        return;
    }
    let pair = VethPair::with_addrs("dscp", SND, RCV).expect("veth pair");
    // the receiver must not answer with ICMP port unreachable for nothing: bind a sink
    let sink = pair
        .rcv
        .try_run(|| UdpSocket::bind((RCV, 9000)))
        .unwrap()
        .unwrap();
    let counter = DscpCounter::start(&pair.rcv, "eth0").expect("counter");
    let dst = SocketAddr::from((RCV, 9000));
    // flow A: 5 x AF11 (DSCP 10) + 3 x AF13 (14); flow B: 4 x EF (46); payload 100 bytes
    let send = |port: u16, plan: &[(u8, usize)]| -> SocketAddr {
        pair.snd
            .try_run(|| {
                let s = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
                s.bind(&SocketAddr::from((SND, port)).into()).unwrap();
                for &(dscp, n) in plan {
                    s.set_tos_v4(u32::from(dscp) << 2).unwrap();
                    for _ in 0..n {
                        s.send_to(&[0u8; 100], &dst.into()).unwrap();
                    }
                }
                s.local_addr().unwrap().as_socket().unwrap()
            })
            .unwrap()
    };
    let a = send(40001, &[(10, 5), (14, 3)]);
    let b = send(40002, &[(46, 4)]);
    std::thread::sleep(Duration::from_millis(200));
    let r = counter.stop();
    drop(sink);
    assert_eq!(r.error, None);
    let ca = r.from_source(a);
    let cb = r.from_source(b);
    assert_eq!((ca.frames[10], ca.frames[14], ca.frames[46]), (5, 3, 0));
    assert_eq!((ca.payload_bytes[10], ca.payload_bytes[14]), (500, 300));
    assert_eq!(ca.ip_bytes[10], 5 * 128, "IP 20 + UDP 8 + 100");
    assert_eq!((cb.frames[46], cb.payload_total()), (4, 400));
    assert_eq!(ca.payload_of(&[10, 12]), 500);
}
