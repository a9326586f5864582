//! ICMP for IPv6 (RFC 4443) and the Neighbor Discovery message types
//! (RFC 4861): type, code, checksum with the IPv6 pseudo-header
//! (RFC 8200 §8.1), echo fields, and the NDP target address.
//!
//! The buffer must be exactly the ICMPv6 message (the upper-layer data of
//! the IPv6 packet): its length is the pseudo-header's upper-layer length.

use core::net::Ipv6Addr;

use crate::checksum;
use crate::field::{rd16, rd32, wr16};
use crate::ip::protocol;
use crate::{Error, Result};

/// Length of the common header plus the 4-byte message-specific word that
/// every ICMPv6 message carries.
pub const HEADER_LEN: usize = 8;

/// Destination unreachable.
pub const DEST_UNREACHABLE: u8 = 1;
/// Packet too big.
pub const PACKET_TOO_BIG: u8 = 2;
/// Time exceeded.
pub const TIME_EXCEEDED: u8 = 3;
/// Parameter problem.
pub const PARAM_PROBLEM: u8 = 4;
/// Echo request.
pub const ECHO_REQUEST: u8 = 128;
/// Echo reply.
pub const ECHO_REPLY: u8 = 129;
/// Multicast listener query (RFC 2710).
pub const MLD_QUERY: u8 = 130;
/// Multicast listener report (RFC 2710).
pub const MLD_REPORT: u8 = 131;
/// Multicast listener done (RFC 2710).
pub const MLD_DONE: u8 = 132;
/// Router solicitation (NDP).
pub const ROUTER_SOLICIT: u8 = 133;
/// Router advertisement (NDP).
pub const ROUTER_ADVERT: u8 = 134;
/// Neighbor solicitation (NDP).
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbor advertisement (NDP).
pub const NEIGHBOR_ADVERT: u8 = 136;
/// Redirect (NDP).
pub const REDIRECT: u8 = 137;
/// Version 2 multicast listener report (RFC 3810).
pub const MLDV2_REPORT: u8 = 143;

const TYPE: usize = 0;
const CODE: usize = 1;
const CHECKSUM: usize = 2;
const IDENT: usize = 4;
const SEQ_NO: usize = 6;
const TARGET: usize = 8;

/// A view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the length. Errors: [`Error::Truncated`] if shorter than 8 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
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

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.b()[TYPE]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.b()[CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), CHECKSUM)
    }

    /// True for error messages (types 0..=127).
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }

    /// True for echo request and echo reply.
    pub fn is_echo(&self) -> bool {
        matches!(self.msg_type(), ECHO_REQUEST | ECHO_REPLY)
    }

    /// True for the Neighbor Discovery types (router solicitation and
    /// advertisement, neighbor solicitation and advertisement, redirect).
    pub fn is_ndp(&self) -> bool {
        matches!(self.msg_type(), ROUTER_SOLICIT..=REDIRECT)
    }

    /// Echo identifier (meaningful for echo).
    pub fn echo_ident(&self) -> u16 {
        rd16(self.b(), IDENT)
    }

    /// Echo sequence number (meaningful for echo).
    pub fn echo_seq_no(&self) -> u16 {
        rd16(self.b(), SEQ_NO)
    }

    /// The MTU of a packet-too-big message.
    pub fn mtu(&self) -> Option<u32> {
        (self.msg_type() == PACKET_TOO_BIG).then(|| rd32(self.b(), IDENT))
    }

    /// Target address of a neighbor solicitation / advertisement or
    /// redirect, if the message is one of those and long enough.
    pub fn target_addr(&self) -> Option<Ipv6Addr> {
        if !matches!(
            self.msg_type(),
            NEIGHBOR_SOLICIT | NEIGHBOR_ADVERT | REDIRECT
        ) {
            return None;
        }
        let bytes: [u8; 16] = self.b().get(TARGET..TARGET + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(bytes))
    }

    /// Everything after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    fn sum_with_pseudo(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> u32 {
        let b = self.b();
        checksum::combine(
            checksum::pseudo_header_v6(src, dst, protocol::ICMPV6, b.len() as u32),
            checksum::sum16(b),
        )
    }

    /// True if the checksum is correct for the given pseudo-header addresses.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        checksum::fold(self.sum_with_pseudo(src, dst)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn update16(&mut self, at: usize, new: u16) {
        let b = self.buffer.as_mut();
        let old = rd16(b, at);
        wr16(b, at, new);
        let c = checksum::incremental_update16(rd16(b, CHECKSUM), old, new);
        wr16(b, CHECKSUM, c);
    }

    /// Sets the message type; incremental checksum.
    pub fn set_msg_type(&mut self, ty: u8) {
        let word = u16::from_be_bytes([ty, self.msg_code()]);
        self.update16(TYPE, word);
    }

    /// Sets the message code; incremental checksum.
    pub fn set_msg_code(&mut self, code: u8) {
        let word = u16::from_be_bytes([self.msg_type(), code]);
        self.update16(TYPE, word);
    }

    /// Sets the echo identifier; incremental checksum.
    pub fn set_echo_ident(&mut self, ident: u16) {
        self.update16(IDENT, ident);
    }

    /// Sets the echo sequence number; incremental checksum.
    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        self.update16(SEQ_NO, seq_no);
    }

    /// Sets the checksum field verbatim.
    pub fn set_checksum(&mut self, csum: u16) {
        wr16(self.buffer.as_mut(), CHECKSUM, csum);
    }

    /// Recomputes the checksum with the given pseudo-header addresses.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = !checksum::fold(self.sum_with_pseudo(src, dst));
        self.set_checksum(c);
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 2);

    /// Neighbor solicitation fe80::1 -> ff02::1:ff00:2 for target fe80::2
    /// with a source link-layer address option; checksum 0xF5DB (cross-checked).
    static NS: [u8; 32] = [
        0x87, 0x00, 0xf5, 0xdb, 0, 0, 0, 0, // type 135, code, checksum, reserved
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // target
        0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // SLLA option
    ];

    #[test]
    fn neighbor_solicitation() {
        let p = Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(p.msg_type(), NEIGHBOR_SOLICIT);
        assert!(p.is_ndp());
        assert!(!p.is_error());
        assert!(!p.is_echo());
        assert_eq!(p.mtu(), None);
        assert_eq!(
            p.target_addr(),
            Some(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2))
        );
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(!p.verify_checksum(&SRC, &Ipv6Addr::LOCALHOST));
        let mut b = NS;
        let mut q = Packet::new_checked(&mut b[..]).unwrap();
        q.fill_checksum(&SRC, &DST);
        assert_eq!(q.checksum(), 0xf5db);
        // Short NS: no target.
        assert_eq!(Packet::new_checked(&NS[..20]).unwrap().target_addr(), None);
    }

    #[test]
    fn echo_and_edits() {
        let mut b = [0u8; 12];
        b[0] = ECHO_REQUEST;
        b[4..8].copy_from_slice(&[0xab, 0xcd, 0x00, 0x05]);
        b[8..].copy_from_slice(b"ping");
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&SRC, &DST);
        assert!(p.is_echo());
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0xabcd, 5));
        p.set_msg_type(ECHO_REPLY);
        p.set_msg_code(0);
        p.set_echo_ident(1);
        p.set_echo_seq_no(6);
        assert!(p.verify_checksum(&SRC, &DST));
        let inc = p.checksum();
        p.fill_checksum(&SRC, &DST);
        assert_eq!(inc, p.checksum());
        assert_eq!(p.payload(), b"ping");
        p.payload_mut()[0] = b'P';
        assert!(!p.verify_checksum(&SRC, &DST));

        let mut ptb = [0u8; 8];
        ptb[0] = PACKET_TOO_BIG;
        ptb[4..8].copy_from_slice(&1280u32.to_be_bytes());
        let p = Packet::new_checked(&ptb[..]).unwrap();
        assert_eq!(p.mtu(), Some(1280));
        assert!(p.is_error());
        assert_eq!(
            Packet::new_checked(&ptb[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.echo_seq_no());
                let _ = (p.payload(), p.verify_checksum(&SRC, &DST), p.is_ndp(), p.target_addr(), p.mtu());
            }
        }
    }
}
