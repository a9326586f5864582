//! Whole-frame fix-ups.
//!
//! [`fill_l4_checksum`] recomputes the TCP or UDP checksum of an Ethernet frame from
//! scratch (pseudo-header included). A frame that a local stack handed to a device with
//! checksum offload (`CHECKSUM_PARTIAL`; AF_PACKET reports it as `TP_STATUS_CSUMNOTREADY`)
//! carries only the pseudo-header sum in its checksum field; once such a frame is
//! forwarded through a packet socket no device will finish it, so the forwarder must.
//!
//! [`complete_partial_checksum`] finishes such a checksum the way a device does, from the
//! offsets of a virtio-net header (`csum_start`, `csum_offset`; see [`crate::vnet`]):
//! whatever the protocol, without parsing it.

use crate::checksum;
use crate::{parse_frame, tcp, udp, Error, Result};

/// Complete a partial (`CHECKSUM_PARTIAL`) checksum as a device would (Linux
/// `skb_checksum_help`): the one's-complement sum of `frame[csum_start..]`, which includes
/// the pseudo-header sum already in the field, is complemented into the 16-bit field at
/// `csum_start + csum_offset`; a result of 0 is written as 0xFFFF (`CSUM_MANGLED_0`: the
/// same value in one's complement, and the only form UDP allows).
///
/// Errors: the field (2 bytes) does not lie inside the frame (`Malformed`).
pub fn complete_partial_checksum(
    frame: &mut [u8],
    csum_start: usize,
    csum_offset: usize,
) -> Result<()> {
    let at = csum_start
        .checked_add(csum_offset)
        .filter(|&at| at.checked_add(2).is_some_and(|end| end <= frame.len()))
        .ok_or(Error::Malformed("checksum offsets outside the frame"))?;
    let sum = checksum::sum16(&frame[csum_start..]);
    let c = match checksum::finish(sum) {
        0 => 0xffff,
        c => c,
    };
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Fill the L4 checksum of a TCP or UDP frame. Returns `Ok(true)` if it did, `Ok(false)`
/// for frames with nothing to fill (not TCP/UDP, or a non-first fragment).
pub fn fill_l4_checksum(frame: &mut [u8]) -> Result<bool> {
    let p = parse_frame(frame)?;
    let (Some(l4), Some(src), Some(dst), Some(proto)) =
        (p.l4_offset, p.src_ip, p.dst_ip, p.protocol)
    else {
        return Ok(false);
    };
    if p.is_fragment {
        // the checksum covers the whole datagram, which this frame does not hold
        return Ok(false);
    }
    let seg = frame.get_mut(l4..p.l3_end).ok_or(Error::Truncated)?;
    match proto {
        crate::ip::protocol::TCP => {
            tcp::Packet::new_checked(seg)?.fill_checksum(src, dst);
            Ok(true)
        }
        crate::ip::protocol::UDP => {
            udp::Packet::new_checked(seg)?.fill_checksum(src, dst);
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, EthSpec, Ipv4Spec, Ipv6Spec, TcpSpec};

    #[test]
    fn restores_a_zeroed_or_partial_checksum() {
        let mut buf = [0u8; 256];
        let ip = Ipv4Spec {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            ..Default::default()
        };
        let n = build::tcp_v4_frame(
            &mut buf,
            &EthSpec::default(),
            &ip,
            &TcpSpec::default(),
            b"hello",
        )
        .unwrap();
        let good = buf[..n].to_vec();
        let p = parse_frame(&buf[..n]).unwrap();
        let at = p.l4_offset.unwrap() + 16;
        buf[at] = 0x12;
        buf[at + 1] = 0x34;
        assert!(fill_l4_checksum(&mut buf[..n]).unwrap());
        assert_eq!(&buf[..n], &good[..]);

        let ip6 = Ipv6Spec {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            ..Default::default()
        };
        let n = build::udp_v6_frame(&mut buf, &EthSpec::default(), &ip6, 5000, 6000, b"x").unwrap();
        let good = buf[..n].to_vec();
        let at = parse_frame(&buf[..n]).unwrap().l4_offset.unwrap() + 6;
        buf[at] = 0;
        buf[at + 1] = 0;
        assert!(fill_l4_checksum(&mut buf[..n]).unwrap());
        assert_eq!(&buf[..n], &good[..]);
    }

    #[test]
    fn completes_a_partial_checksum_from_offsets() {
        let mut buf = [0u8; 256];
        let ip = Ipv4Spec {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            ..Default::default()
        };
        for udp in [false, true] {
            let n = if udp {
                build::udp_v4_frame(&mut buf, &EthSpec::default(), &ip, 53, 9999, b"abc").unwrap()
            } else {
                build::tcp_v4_frame(
                    &mut buf,
                    &EthSpec::default(),
                    &ip,
                    &TcpSpec::default(),
                    b"hello",
                )
                .unwrap()
            };
            let good = buf[..n].to_vec();
            let l4 = parse_frame(&buf[..n]).unwrap().l4_offset.unwrap();
            let off = if udp { 6 } else { 16 };
            // what a local stack leaves: the folded pseudo-header sum, not complemented
            let len = (n - l4) as u32;
            let proto = if udp { 17 } else { 6 };
            let pseudo = checksum::pseudo_header(ip.src.into(), ip.dst.into(), proto, len);
            buf[l4 + off..l4 + off + 2].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
            complete_partial_checksum(&mut buf[..n], l4, off).unwrap();
            assert_eq!(&buf[..n], &good[..], "udp {udp}");
        }
        // a sum of zero is written as 0xFFFF
        let mut z = [0u8; 4];
        complete_partial_checksum(&mut z, 0, 2).unwrap();
        assert_eq!(z, [0, 0, 0xff, 0xff]);
        // offsets that point outside the frame
        let mut f = [0u8; 60];
        for (start, off) in [
            (60, 0),
            (59, 0),
            (40, 19),
            (0, 59),
            (usize::MAX, 2),
            (2, usize::MAX),
        ] {
            assert_eq!(
                complete_partial_checksum(&mut f, start, off),
                Err(Error::Malformed("checksum offsets outside the frame")),
                "{start} {off}"
            );
        }
        complete_partial_checksum(&mut f, 40, 18).unwrap();
    }

    #[test]
    fn leaves_other_frames_alone() {
        let mut arp = [0u8; 60];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!fill_l4_checksum(&mut arp).unwrap());
        let mut short = [0u8; 5];
        assert!(fill_l4_checksum(&mut short).is_err());
    }
}
