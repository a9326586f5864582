//! The benchmark's frames: their layout (ports, magic, payload offsets) and `build_frame`.

use std::net::Ipv4Addr;
use weir_lab::topo::BridgeTopo;
use weir_wire::build::{udp_v4_frame, EthSpec, Ipv4Spec};
use weir_wire::ethernet::MacAddr;

const SRC_PORT: u16 = 40_000;
pub(crate) const DST_PORT: u16 = 40_001;
/// Marks the benchmark's frames (payload bytes 12..16).
pub(crate) const MAGIC: u32 = 0x5745_4952; // "WEIR"
/// Offsets in the frame: Ethernet 14 + IPv4 20 + UDP 8 = 42.
pub(crate) const OFF_SEQ: usize = 42;
pub(crate) const OFF_TRIAL: usize = 50;
pub(crate) const OFF_MAGIC: usize = 54;

/// The source address of the generator's frames from source `k` of several
/// (`--workers`: one circuit each): 10.77.1.k.
pub(crate) fn source_addr(k: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 1, k)
}

/// The frames the generator sends in turn: one from [`BridgeTopo::SND_ADDR`], or one from
/// each of `sources` addresses ([`source_addr`]).
pub(crate) fn build_frames(size: usize, src: MacAddr, dst: MacAddr, sources: u8) -> Vec<Vec<u8>> {
    if sources <= 1 {
        return vec![build_frame(size, src, dst, BridgeTopo::SND_ADDR)];
    }
    (0..sources)
        .map(|k| build_frame(size, src, dst, source_addr(k)))
        .collect()
}

/// A frame of `size` bytes including FCS (so `size - 4` bytes built): Ethernet / IPv4 / UDP
/// from `from` with the payload [seq u64][trial u32][MAGIC u32][zeros]. UDP checksum 0
/// (none).
pub(crate) fn build_frame(size: usize, src: MacAddr, dst: MacAddr, from: Ipv4Addr) -> Vec<u8> {
    let len = size - 4;
    let mut payload = vec![0u8; len - OFF_SEQ];
    payload[OFF_MAGIC - OFF_SEQ..OFF_MAGIC - OFF_SEQ + 4].copy_from_slice(&MAGIC.to_be_bytes());
    let mut buf = vec![0u8; len];
    let eth = EthSpec {
        src,
        dst,
        vlan: None,
        pcp: 0,
    };
    let ip = Ipv4Spec {
        src: from,
        dst: BridgeTopo::RCV_ADDR,
        ..Ipv4Spec::default()
    };
    let n = udp_v4_frame(&mut buf, &eth, &ip, SRC_PORT, DST_PORT, &payload).expect("frame");
    assert_eq!(n, len);
    buf[40..42].copy_from_slice(&[0, 0]);
    buf
}
