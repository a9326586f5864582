//! Whole-frame fix-ups.
//!
//! [`fill_l4_checksum`] recomputes the TCP or UDP checksum of an Ethernet frame from
//! scratch (pseudo-header included). A frame that a local stack handed to a device with
//! checksum offload (`CHECKSUM_PARTIAL`; AF_PACKET reports it as `TP_STATUS_CSUMNOTREADY`)
//! carries only the pseudo-header sum in its checksum field; once such a frame is
//! forwarded through a packet socket no device will finish it, so the forwarder must.

use crate::{parse_frame, tcp, udp, Error, Result};

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
    fn leaves_other_frames_alone() {
        let mut arp = [0u8; 60];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!fill_l4_checksum(&mut arp).unwrap());
        let mut short = [0u8; 5];
        assert!(fill_l4_checksum(&mut short).is_err());
    }
}
