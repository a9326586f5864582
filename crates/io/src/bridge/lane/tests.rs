//! The receive path's handling of frames over the egress MTU, without sockets: frames go
//! straight into a [`Sink`] (what `receive` builds for each frame of a ring).

use super::*;
use weir_wire::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};
use weir_wire::vnet::gso_type;
use weir_wire::{icmp, icmpv6, parse_frame};

const MTU: u32 = 1400;

/// One lane's receive side: the device, the pool, the counters, the reply bucket.
struct Rx {
    device: Device,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    stats: LaneStats,
    icmp: Option<TokenBucket>,
    replies: Vec<PktId>,
    seg_buf: Vec<u8>,
    scratch: Vec<u8>,
    /// Super-packets may stay whole (`Lane::whole`).
    whole: bool,
}

impl Rx {
    /// Replies limited to `rate` a second, `burst` deep (as `Bridge::open` makes them).
    fn new(rate: u32, burst: u32) -> Rx {
        Rx {
            device: Device::passthrough(),
            pool: Pool::new(256, 2052),
            rng: Rng::new(1),
            dropped: vec![],
            stats: LaneStats::default(),
            icmp: Some(TokenBucket::new(
                weir_core::Rate::from_bps(u64::from(rate) * 8),
                burst,
                Instant::ZERO,
            )),
            replies: vec![],
            seg_buf: vec![0; COPY_BUF],
            scratch: vec![],
            whole: false,
        }
    }

    /// The lane's receive side as `receive` builds it for a frame at `now`, outbound
    /// (towards an interface of MTU 1400; the frames came in by one of 1500).
    fn sink(&mut self, now: Instant) -> Sink<'_> {
        Sink {
            whole: self.whole,
            dir: Direction::Outbound,
            mtu: MTU,
            reply_mtu: 1500,
            icmp: &mut self.icmp,
            replies: &mut self.replies,
            seg_buf: &mut self.seg_buf[..],
            device: &mut self.device,
            stats: &mut self.stats,
            pool: &mut self.pool,
            rng: &mut self.rng,
            dropped: &mut self.dropped,
            now,
            arrival: now,
        }
    }

    /// A frame as the ring gives it, at `now`.
    fn feed(&mut self, frame: &[u8], vnet: VnetHdr, vlan: Option<(u16, u16)>, now: Instant) {
        let rx = Received {
            vlan,
            csum_not_ready: false,
            vnet,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        self.sink(now).frame(frame, rx, &mut scratch);
        self.scratch = scratch;
    }

    fn single(&mut self, frame: &[u8], now: Instant) {
        self.feed(frame, VnetHdr::default(), None, now);
    }

    /// Frames the device forwards (each freed).
    fn forwarded(&mut self) -> Vec<usize> {
        let mut cx = Ctx::new(
            Instant::ZERO,
            &mut self.pool,
            &mut self.rng,
            &mut self.dropped,
        );
        let mut ids = vec![];
        while let Some(id) = self.device.poll_transmit(Direction::Outbound, &mut cx) {
            ids.push(id);
        }
        ids.into_iter()
            .map(|id| {
                let n = self.pool.len(id) as usize;
                self.pool.free(id);
                n
            })
            .collect()
    }

    /// Every oversize frame is in exactly one of the `pmtu` counters.
    fn check_identity(&self) {
        let p = &self.stats.pmtu;
        assert_eq!(
            self.stats.oversize.packets,
            p.sent().packets + p.rate_limited + p.df_clear + p.not_answered,
            "{:?}",
            self.stats
        );
    }
}

/// An Ethernet/IPv4/UDP frame whose IP packet is `ip_len` bytes long.
fn udp4(ip_len: usize, df: bool) -> Vec<u8> {
    let mut f = vec![0u8; 2048];
    let ip = Ipv4Spec {
        dont_frag: df,
        ..Ipv4Spec::default()
    };
    let n = build::udp_v4_frame(
        &mut f,
        &EthSpec::default(),
        &ip,
        1,
        2,
        &vec![0; ip_len - 28],
    )
    .unwrap();
    f.truncate(n);
    f
}

#[test]
fn over_mtu_frames_are_answered_at_a_limited_rate() {
    let mut rx = Rx::new(10, 10);
    // the largest packet that fits passes; one byte more does not
    rx.single(&udp4(1400, true), Instant::ZERO);
    assert_eq!(rx.forwarded(), vec![1414]);
    for _ in 0..15 {
        rx.single(&udp4(1401, true), Instant::ZERO);
    }
    let p = &rx.stats.pmtu;
    assert_eq!(rx.stats.oversize.packets, 15);
    assert_eq!(rx.stats.oversize.bytes, 15 * 1415);
    assert_eq!((p.frag_needed.packets, p.rate_limited), (10, 5));
    assert_eq!(rx.stats.rx.packets, 16);
    assert!(
        rx.forwarded().is_empty(),
        "nothing over the MTU reaches the device"
    );
    // the bucket earns one reply per 100 ms
    rx.single(&udp4(1500, true), Instant::ZERO + Duration::from_millis(99));
    assert_eq!(rx.stats.pmtu.rate_limited, 6);
    rx.single(
        &udp4(1500, true),
        Instant::ZERO + Duration::from_millis(100),
    );
    assert_eq!(rx.stats.pmtu.frag_needed.packets, 11);
    rx.check_identity();
    // the replies: back the other way, Fragmentation Needed with MTU 1400, 576 bytes of IP
    assert_eq!(rx.replies.len(), 11);
    assert_eq!(rx.stats.pmtu.frag_needed.bytes, 11 * (14 + 576));
    for &id in &rx.replies {
        assert_eq!(rx.pool.meta(id).dir, Direction::Inbound);
        let f = rx.pool.data(id);
        let p = parse_frame(f).unwrap();
        let m = icmp::Packet::new_checked(&f[p.l4_offset.unwrap()..p.l3_end]).unwrap();
        assert_eq!(
            (m.msg_type(), m.msg_code(), m.rest_of_header()),
            (3, 4, MTU)
        );
        assert!(m.verify_checksum());
        assert_eq!(p.src_ip, Some(Ipv4Spec::default().dst.into()));
    }
}

#[test]
fn what_gets_no_reply_is_counted_by_reason() {
    let mut rx = Rx::new(10, 10);
    rx.single(&udp4(1500, false), Instant::ZERO);
    assert_eq!(rx.stats.pmtu.df_clear, 1);
    let mut arp = vec![0u8; 1500];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    rx.single(&arp, Instant::ZERO);
    assert_eq!(rx.stats.pmtu.not_answered, 1);
    let mut f = vec![0u8; 2048];
    let n = build::udp_v6_frame(
        &mut f,
        &EthSpec::default(),
        &Ipv6Spec::default(),
        1,
        2,
        &[0; 1452],
    )
    .unwrap();
    rx.single(&f[..n], Instant::ZERO);
    let p = &rx.stats.pmtu;
    assert_eq!(p.packet_too_big.packets, 1);
    let r = rx.pool.data(rx.replies[0]);
    assert_eq!(r.len(), 14 + 1280, "as much as fits in 1280 bytes");
    let m = icmpv6::Packet::new_checked(&r[14 + 40..]).unwrap();
    assert_eq!(m.mtu(), Some(MTU));
    assert_eq!(rx.stats.oversize.packets, 3);
    rx.check_identity();
    // without a bucket (icmp_rate 0): never a reply
    rx.icmp = None;
    rx.single(&udp4(1500, true), Instant::ZERO);
    assert_eq!(rx.stats.pmtu.not_answered, 2);
    rx.check_identity();
    assert_eq!(rx.pool.in_use(), 1, "only the one reply holds a slot");
}

/// The 4 bytes of slack are for a frame's own 802.1Q tag: an untagged frame gets none, a
/// tag the device stripped gets it back, and the reply carries the tag.
#[test]
fn vlan_slack_only_for_tagged_frames() {
    let mut rx = Rx::new(10, 10);
    for ip_len in 1401..=1404 {
        rx.single(&udp4(ip_len, true), Instant::ZERO);
    }
    assert_eq!(rx.stats.oversize.packets, 4);
    let tag = Some((0x8100, 7));
    rx.feed(&udp4(1400, true), VnetHdr::default(), tag, Instant::ZERO);
    assert_eq!(rx.forwarded(), vec![1418]);
    rx.feed(&udp4(1401, true), VnetHdr::default(), tag, Instant::ZERO);
    assert_eq!(rx.stats.oversize.packets, 5);
    let r = rx.pool.data(*rx.replies.last().unwrap());
    assert_eq!(&r[12..16], &[0x81, 0x00, 0x00, 0x07], "the tag kept");
    let m = icmp::Packet::new_checked(&r[18 + 20..]).unwrap();
    assert_eq!(m.rest_of_header(), MTU);
    rx.check_identity();
}

/// A TSO super-packet whose segments would be 1500-byte packets: dropped whole, one
/// reply, quoting its first segment as it would have left (IP total length 1500).
#[test]
fn a_super_packet_too_long_is_answered_once_with_its_first_segment() {
    let mut rx = Rx::new(10, 10);
    let (f, vnet) = tso(TcpSpec::default().dst_port, 3, 1460);
    let n = f.len();
    rx.feed(&f[..n], vnet, None, Instant::ZERO);
    assert_eq!(rx.stats.oversize.packets, 1);
    assert_eq!(rx.stats.oversize.bytes, n as u64);
    assert_eq!(rx.stats.rx.packets, 1);
    assert_eq!(rx.stats.gso.super_packets, 0);
    assert_eq!(rx.stats.pmtu.frag_needed.packets, 1);
    let r = rx.pool.data(rx.replies[0]);
    let quoted = weir_wire::ipv4::Packet::new_checked(&r[14 + 28..]).unwrap_err();
    // the quote is cut at 548 bytes: its IP header says 1500, the whole first segment
    assert_eq!(quoted, weir_wire::Error::Truncated);
    assert_eq!(&r[14 + 28 + 2..14 + 28 + 4], &1500u16.to_be_bytes());
    assert!(rx.forwarded().is_empty());
    // the same sender after path MTU discovery: segments of 1360 bytes pass, cut
    let (f, vnet) = tso(TcpSpec::default().dst_port, 3, 1360);
    rx.feed(&f, vnet, None, Instant::ZERO);
    assert_eq!(rx.forwarded(), vec![1414; 3]);
    rx.check_identity();
}

/// A TSO super-packet of `segs` segments of `size` bytes (1360: frames of 1414), partial
/// checksum as a local stack leaves it, to port `dport`.
fn tso(dport: u16, segs: usize, size: u16) -> (Vec<u8>, VnetHdr) {
    let mut f = vec![0u8; 65_536];
    let tcp = TcpSpec {
        seq: 1000,
        ack: 1,
        dst_port: dport,
        flags: weir_wire::tcp::TcpFlags::ACK,
        window: 100,
        ..TcpSpec::default()
    };
    let n = build::tcp_v4_frame(
        &mut f,
        &EthSpec::default(),
        &Ipv4Spec::default(),
        &tcp,
        &vec![7; segs * usize::from(size)],
    )
    .unwrap();
    f.truncate(n);
    let vnet = VnetHdr {
        flags: weir_wire::vnet::F_NEEDS_CSUM,
        gso_type: gso_type::TCPV4,
        gso_size: size,
        hdr_len: 54,
        csum_start: 34,
        csum_offset: 16,
    };
    (f, vnet)
}

/// Where the device keeps a super-packet whole, it is one packet in a large slot with
/// its virtio header, charged its segments' frames (3 × 1414 bytes); where the class is
/// slower than a gigabit it is cut; with no large slot free it is cut and counted.
#[test]
fn super_packets_stay_whole_where_the_device_says() {
    let policy = "[link]\nrate = \"10Gbit\"\ndefault = \"slow\"\n\
                  [[class]]\nname = \"fast\"\nrate = \"5Gbit\"\n\
                  [[class]]\nname = \"slow\"\nrate = \"100Mbit\"\n\
                  [[rule]]\nname = \"f\"\nclass = \"fast\"\ndport = 5001\n";
    let p = weir_core::policy::Policy::parse("t.toml", policy).unwrap();
    let mut rx = Rx::new(10, 10);
    rx.device = p.build_device(Instant::ZERO).unwrap();
    rx.pool = Pool::with_whole(256, 2052, 1, COPY_BUF + 4);
    rx.whole = true;
    let (fast, vnet) = tso(5001, 3, 1360);
    rx.feed(&fast, vnet, None, Instant::ZERO);
    assert_eq!(
        (rx.stats.gso.kept_whole, rx.stats.gso.whole_segments),
        (1, 3)
    );
    assert_eq!((rx.stats.rx.packets, rx.stats.rx.bytes), (1, 3 * 1414));
    assert_eq!(rx.stats.gso.super_packets, 0);
    let mut cx = Ctx::new(Instant::ZERO, &mut rx.pool, &mut rx.rng, &mut rx.dropped);
    let id = rx
        .device
        .poll_transmit(Direction::Outbound, &mut cx)
        .unwrap();
    assert_eq!(rx.pool.len(id), 3 * 1414, "charged as its segments");
    assert_eq!(rx.pool.data(id), &fast[..], "stored as it came");
    let s = *rx.pool.super_packet(id).unwrap();
    assert_eq!((s.vnet, s.segments), (vnet, 3));
    // the large slot is still taken: the next one is cut
    rx.feed(&fast, vnet, None, Instant::ZERO);
    assert_eq!(rx.stats.gso.no_whole_slot, 1);
    assert_eq!(rx.forwarded(), vec![1414; 3]);
    rx.pool.free(id);
    // the slow class: cut
    let (slow, vnet) = tso(5002, 3, 1360);
    rx.feed(&slow, vnet, None, Instant::ZERO);
    assert_eq!(rx.stats.gso.kept_whole, 1);
    assert_eq!(rx.stats.gso.super_packets, 2);
    assert_eq!(rx.forwarded(), vec![1414; 3]);
    // a lane that may not (a capture): cut
    rx.whole = false;
    rx.feed(&fast, vnet, None, Instant::ZERO);
    assert_eq!(
        (rx.stats.gso.kept_whole, rx.stats.gso.super_packets),
        (1, 3)
    );
    assert_eq!(rx.forwarded(), vec![1414; 3]);
}

/// A super-packet read whole from the socket (virtio-net header first) is swapped into a
/// large slot, not copied: the driver's buffer comes back as the slot's old one, the
/// packet's bytes are the frame after the header. A VLAN tag to put back, or a device that
/// cuts, leaves the buffer alone.
#[test]
fn a_super_packet_read_whole_is_swapped_in_not_copied() {
    let mut rx = Rx::new(10, 10);
    rx.pool = Pool::with_whole(64, 2052, 2, COPY_BUF + 4);
    rx.whole = true;
    let (f, vnet) = tso(5001, 4, 1360);
    let mut buf = vec![0u8; COPY_BUF + 4];
    vnet.emit(&mut buf).unwrap();
    buf[vnet::LEN..vnet::LEN + f.len()].copy_from_slice(&f);
    let n = vnet::LEN + f.len();
    let rxd = |vlan| Received {
        vlan,
        csum_not_ready: false,
        vnet,
    };
    let mut sink = rx.sink(Instant::ZERO);
    assert!(
        !sink.whole_in_place(&mut buf, n, rxd(Some((0x8100, 7)))),
        "a tag to restore"
    );
    assert_eq!(&buf[vnet::LEN..n], &f[..], "left alone");
    assert!(sink.whole_in_place(&mut buf, n, rxd(None)));
    assert!(
        buf[..n].iter().all(|&b| b == 0),
        "the slot's fresh buffer came back"
    );
    assert_eq!(
        (sink.stats.gso.kept_whole, sink.stats.gso.whole_segments),
        (1, 4)
    );
    assert_eq!(rx.stats.rx.bytes, 4 * 1414);
    let mut cx = Ctx::new(Instant::ZERO, &mut rx.pool, &mut rx.rng, &mut rx.dropped);
    let id = rx
        .device
        .poll_transmit(Direction::Outbound, &mut cx)
        .unwrap();
    assert_eq!(rx.pool.data(id), &f[..]);
    assert_eq!(rx.pool.super_packet(id).unwrap().vnet, vnet);
    rx.pool.free(id);
}
