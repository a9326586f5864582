//! UDP datagrams (RFC 768) with the pseudo-header checksum over IPv4
//! (RFC 768; a zero checksum means "none") and IPv6 (RFC 8200 §8.1; the
//! checksum is mandatory).
//!
//! [`Packet::new_checked`] validates the length field against the buffer;
//! the buffer may be longer (the datagram then ends at the length field).
//! A computed checksum of zero is transmitted as `0xFFFF`.

use core::net::IpAddr;

use crate::checksum;
use crate::field::{rd16, rd32, wr16, wr32};
use crate::ip::protocol;
use crate::{Error, Result};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

const SRC_PORT: usize = 0;
const DST_PORT: usize = 2;
const LENGTH: usize = 4;
const CHECKSUM: usize = 6;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the header.
    ///
    /// Errors: [`Error::Truncated`] if the buffer is shorter than 8 bytes or
    /// than the length field; [`Error::Malformed`] if the length field is < 8
    /// (this includes IPv6 jumbograms, which are not supported).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(rd16(b, LENGTH));
        if len < HEADER_LEN {
            return Err(Error::Malformed("UDP: length < 8"));
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        rd16(self.b(), SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        rd16(self.b(), DST_PORT)
    }

    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        rd16(self.b(), LENGTH)
    }

    /// True if the payload is empty (length field is 8).
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) == HEADER_LEN
    }

    /// Checksum field (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), CHECKSUM)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..usize::from(self.len())]
    }

    fn sum_with_pseudo(&self, src: IpAddr, dst: IpAddr) -> u32 {
        let len = self.len();
        checksum::combine(
            checksum::pseudo_header(src, dst, protocol::UDP, u32::from(len)),
            checksum::sum16(&self.b()[..usize::from(len)]),
        )
    }

    /// True if the checksum is correct for the given pseudo-header
    /// addresses. A zero checksum is accepted over IPv4 ("no checksum") and
    /// rejected over IPv6, where it is mandatory.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 {
            return src.is_ipv4() && dst.is_ipv4();
        }
        checksum::fold(self.sum_with_pseudo(src, dst)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn update32(&mut self, at: usize, new: u32) {
        let b = self.buffer.as_mut();
        let old = rd32(b, at);
        wr32(b, at, new);
        let csum = rd16(b, CHECKSUM);
        if csum != 0 {
            let c = checksum::incremental_update32(csum, old, new);
            wr16(b, CHECKSUM, if c == 0 { 0xffff } else { c });
        }
    }

    /// Sets both ports, fixing the checksum incrementally (a zero "no
    /// checksum" field is left as zero).
    pub fn set_ports(&mut self, src: u16, dst: u16) {
        self.update32(SRC_PORT, (u32::from(src) << 16) | u32::from(dst));
    }

    /// Sets the source port (incremental checksum, as [`Self::set_ports`]).
    pub fn set_src_port(&mut self, port: u16) {
        let dst = self.dst_port();
        self.set_ports(port, dst);
    }

    /// Sets the destination port (incremental checksum, as [`Self::set_ports`]).
    pub fn set_dst_port(&mut self, port: u16) {
        let src = self.src_port();
        self.set_ports(src, port);
    }

    /// Sets the checksum field verbatim.
    pub fn set_checksum(&mut self, csum: u16) {
        wr16(self.buffer.as_mut(), CHECKSUM, csum);
    }

    /// Computes and stores the checksum for the given pseudo-header
    /// addresses; a result of zero is stored as `0xFFFF`.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let c = !checksum::fold(self.sum_with_pseudo(src, dst));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Mutable payload, up to the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;

    /// 10.1.1.1:5000 -> 10.1.1.2:5001, "hello", checksum 0x7EEC (cross-checked).
    static UDP4: [u8; 13] = [
        0x13, 0x88, 0x13, 0x89, 0x00, 0x0d, 0x7e, 0xec, b'h', b'e', b'l', b'l', b'o',
    ];
    const S4: Ipv4Addr = Ipv4Addr::new(10, 1, 1, 1);
    const D4: Ipv4Addr = Ipv4Addr::new(10, 1, 1, 2);

    /// The UDP part of the IPv6 fixture in `ipv6.rs` (checksum 0x8FB4).
    static UDP6: [u8; 16] = [
        0xa1, 0xb2, 0x00, 0x35, 0x00, 0x10, 0x8f, 0xb4, b'w', b'e', b'i', b'r', b'-', b'u', b'd',
        b'p',
    ];
    const S6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const D6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    #[test]
    fn parse_v4() {
        let p = Packet::new_checked(&UDP4[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5000, 5001, 13));
        assert_eq!(p.payload(), b"hello");
        assert!(!p.is_empty());
        assert!(p.verify_checksum(S4.into(), D4.into()));
        let mut b = UDP4;
        let mut q = Packet::new_checked(&mut b[..]).unwrap();
        q.fill_checksum(S4.into(), D4.into());
        assert_eq!(q.checksum(), 0x7eec);
        // "No checksum" is fine on IPv4, and survives port rewrites.
        q.set_checksum(0);
        assert!(q.verify_checksum(S4.into(), D4.into()));
        q.set_ports(1, 2);
        assert_eq!(q.checksum(), 0);
    }

    #[test]
    fn parse_v6() {
        let p = Packet::new_checked(&UDP6[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (41394, 53));
        assert_eq!(p.payload(), b"weir-udp");
        assert!(p.verify_checksum(S6.into(), D6.into()));
        assert!(!p.verify_checksum(S6.into(), Ipv6Addr::LOCALHOST.into()));
        let mut b = UDP6;
        let mut q = Packet::new_checked(&mut b[..]).unwrap();
        q.set_checksum(0);
        assert!(!q.verify_checksum(S6.into(), D6.into()));
        q.fill_checksum(S6.into(), D6.into());
        assert_eq!(q.checksum(), 0x8fb4);
    }

    #[test]
    fn zero_result_is_sent_as_ffff() {
        // Choose the payload word so that the checksum computes to zero.
        let mut b = [0u8; 10];
        b[4..6].copy_from_slice(&10u16.to_be_bytes());
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(S4.into(), D4.into());
        let c = p.checksum();
        // Adding the checksum value as a payload word makes the sum 0xFFFF.
        p.payload_mut().copy_from_slice(&c.to_be_bytes());
        p.fill_checksum(S4.into(), D4.into());
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(S4.into(), D4.into()));
    }

    #[test]
    fn errors_and_trailing_bytes() {
        assert_eq!(
            Packet::new_checked(&UDP4[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&UDP4[..12]).unwrap_err(),
            Error::Truncated
        );
        let mut b = UDP4;
        b[5] = 7;
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
        let mut long = [0u8; 20];
        long[..13].copy_from_slice(&UDP4);
        let p = Packet::new_checked(&long[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert!(p.verify_checksum(S4.into(), D4.into()));
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.checksum(), p.payload());
                let _ = p.verify_checksum(S4.into(), D4.into());
                let _ = p.verify_checksum(S6.into(), D6.into());
            }
        }

        #[test]
        fn incremental_ports_match_full(
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            ports in any::<(u16, u16)>(), new in any::<(u16, u16)>(), v6 in any::<bool>(),
        ) {
            let (s, d): (IpAddr, IpAddr) = if v6 { (S6.into(), D6.into()) } else { (S4.into(), D4.into()) };
            let mut b = std::vec![0u8; 8];
            b.extend_from_slice(&payload);
            let len = b.len() as u16;
            b[0..2].copy_from_slice(&ports.0.to_be_bytes());
            b[2..4].copy_from_slice(&ports.1.to_be_bytes());
            b[4..6].copy_from_slice(&len.to_be_bytes());
            let mut p = Packet::new_checked(&mut b[..]).unwrap();
            p.fill_checksum(s, d);
            p.set_ports(new.0, new.1);
            prop_assert!(p.verify_checksum(s, d));
            let inc = p.checksum();
            p.fill_checksum(s, d);
            prop_assert_eq!(inc, p.checksum());
            p.set_src_port(ports.0);
            p.set_dst_port(ports.1);
            prop_assert!(p.verify_checksum(s, d));
        }
    }
}
