//! IPv4 headers (RFC 791), with the DSCP / ECN view of the TOS octet
//! (RFC 2474, RFC 3168) and the header checksum (RFC 1071, RFC 1624).
//!
//! [`Packet::new_checked`] validates version, IHL and total length against
//! the buffer. The buffer may be longer than the total length (Ethernet
//! padding); [`Packet::payload`] stops at the total length. Options are
//! exposed as raw bytes. Setters that touch the header keep the header
//! checksum valid by incremental update (RFC 1624); note that the TCP/UDP
//! pseudo-header contains the addresses, so address setters do not fix the
//! upper-layer checksum.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::field::{rd16, rd32, wr16, wr32};
use crate::{ip, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Maximum header length (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const VER_IHL: usize = 0;
const TOS: usize = 1;
const LENGTH: usize = 2;
const IDENT: usize = 4;
const FLAGS_FRAG: usize = 6;
const TTL: usize = 8;
const PROTOCOL: usize = 9;
const CHECKSUM: usize = 10;
const SRC: usize = 12;
const DST: usize = 16;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the header.
    ///
    /// Errors: [`Error::Truncated`] if the buffer is shorter than 20 bytes, the
    /// IHL-declared header, or the total length; [`Error::Malformed`] if the
    /// version is not 4, IHL < 5, or total length < header length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[VER_IHL] >> 4 != 4 {
            return Err(Error::Malformed("IPv4: version is not 4"));
        }
        let hl = usize::from(b[VER_IHL] & 0x0f) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed("IPv4: IHL < 5"));
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        let total = usize::from(rd16(b, LENGTH));
        if total < hl {
            return Err(Error::Malformed("IPv4: total length < header length"));
        }
        if b.len() < total {
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

    /// The version field (always 4).
    pub fn version(&self) -> u8 {
        self.b()[VER_IHL] >> 4
    }

    /// The IHL field, in 32-bit words (5..=15).
    pub fn ihl(&self) -> u8 {
        self.b()[VER_IHL] & 0x0f
    }

    /// Header length in bytes, including options.
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// The whole TOS octet (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.b()[TOS]
    }

    /// Differentiated services code point (6 bits).
    pub fn dscp(&self) -> u8 {
        ip::dscp_of(self.tos())
    }

    /// ECN codepoint (2 bits, see [`ip::ecn`]).
    pub fn ecn(&self) -> u8 {
        ip::ecn_of(self.tos())
    }

    /// Total length (header + payload) in bytes.
    pub fn total_len(&self) -> u16 {
        rd16(self.b(), LENGTH)
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        rd16(self.b(), IDENT)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        rd16(self.b(), FLAGS_FRAG) & 0x4000 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        rd16(self.b(), FLAGS_FRAG) & 0x2000 != 0
    }

    /// Fragment offset in **bytes** (the field times 8).
    pub fn frag_offset(&self) -> u16 {
        (rd16(self.b(), FLAGS_FRAG) & 0x1fff) << 3
    }

    /// True if this is any fragment of a fragmented datagram (MF set or a
    /// non-zero offset).
    pub fn is_fragment(&self) -> bool {
        rd16(self.b(), FLAGS_FRAG) & 0x3fff != 0
    }

    /// True unless this is a fragment with a non-zero offset, i.e. the payload
    /// starts with the upper-layer header.
    pub fn is_first_fragment(&self) -> bool {
        self.frag_offset() == 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[TTL]
    }

    /// Protocol number (see [`ip::protocol`]).
    pub fn protocol(&self) -> u8 {
        self.b()[PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(rd32(self.b(), SRC))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(rd32(self.b(), DST))
    }

    /// Raw options bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }

    /// The header, options included.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }

    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..usize::from(self.total_len())]
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum16(self.header())) == 0xffff
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

    fn update32(&mut self, at: usize, new: u32) {
        let b = self.buffer.as_mut();
        let old = rd32(b, at);
        wr32(b, at, new);
        let c = checksum::incremental_update32(rd16(b, CHECKSUM), old, new);
        wr16(b, CHECKSUM, c);
    }

    /// Sets the whole TOS octet, fixing the checksum incrementally.
    pub fn set_tos(&mut self, tos: u8) {
        let word = u16::from_be_bytes([self.b()[VER_IHL], tos]);
        self.update16(VER_IHL, word);
    }

    /// Sets the DSCP (low 6 bits of `dscp`), keeping ECN; incremental checksum.
    pub fn set_dscp(&mut self, dscp: u8) {
        self.set_tos(ip::tos(dscp, self.ecn()));
    }

    /// Sets the ECN field (low 2 bits of `ecn`), keeping DSCP; incremental checksum.
    pub fn set_ecn(&mut self, ecn: u8) {
        self.set_tos(ip::tos(self.dscp(), ecn));
    }

    /// Sets the TTL; incremental checksum.
    pub fn set_ttl(&mut self, ttl: u8) {
        let word = u16::from_be_bytes([ttl, self.protocol()]);
        self.update16(TTL, word);
    }

    /// Sets the identification field; incremental checksum.
    pub fn set_ident(&mut self, ident: u16) {
        self.update16(IDENT, ident);
    }

    /// Sets the source address; incremental header checksum (the upper-layer
    /// checksum is not touched).
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.update32(SRC, u32::from(addr));
    }

    /// Sets the destination address; incremental header checksum (the
    /// upper-layer checksum is not touched).
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.update32(DST, u32::from(addr));
    }

    /// Sets the checksum field verbatim.
    pub fn set_checksum(&mut self, csum: u16) {
        wr16(self.buffer.as_mut(), CHECKSUM, csum);
    }

    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// Mutable payload (up to the total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Header of the classic worked example (UDP, 192.168.0.1 -> 192.168.0.199,
    /// checksum 0xB861) followed by 95 payload bytes.
    fn example() -> [u8; 115] {
        let mut p = [0u8; 115];
        p[..20].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ]);
        p
    }

    #[test]
    fn parse_example() {
        let b = example();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp(), 0);
        assert_eq!(p.ecn(), 0);
        assert_eq!(p.total_len(), 115);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert!(!p.is_fragment());
        assert!(p.is_first_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), ip::protocol::UDP);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.options().is_empty());
        assert_eq!(p.payload().len(), 95);
        assert!(p.verify_checksum());
    }

    #[test]
    fn padding_and_options() {
        // IHL 6 with a 4-byte option (NOP NOP NOP EOL), total 28, 4 bytes padding.
        let mut b = [0u8; 32];
        b[..24].copy_from_slice(&[
            0x46, 0xb8, 0x00, 0x1c, 0x12, 0x34, 0x20, 0x01, 0x01, 0x06, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2, 0x01, 0x01, 0x01, 0x00,
        ]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.dscp(), 46);
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 8);
        assert!(p.is_fragment());
        assert!(!p.is_first_fragment());
    }

    #[test]
    fn errors() {
        let b = example();
        assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&b[..114]).unwrap_err(),
            Error::Truncated
        );
        let mut v6 = b;
        v6[0] = 0x65;
        assert!(matches!(
            Packet::new_checked(&v6[..]),
            Err(Error::Malformed(_))
        ));
        let mut short_ihl = b;
        short_ihl[0] = 0x44;
        assert!(matches!(
            Packet::new_checked(&short_ihl[..]),
            Err(Error::Malformed(_))
        ));
        let mut long_ihl = b;
        long_ihl[0] = 0x4f;
        assert!(Packet::new_checked(&long_ihl[..40]).is_err());
        let mut small_total = b;
        small_total[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(matches!(
            Packet::new_checked(&small_total[..]),
            Err(Error::Malformed(_))
        ));
    }

    #[test]
    fn setters_keep_checksum() {
        let mut b = example();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_dscp(46);
        assert!(p.verify_checksum());
        p.set_ecn(ip::ecn::CE);
        assert!(p.verify_checksum());
        assert_eq!((p.dscp(), p.ecn()), (46, 3));
        p.set_ttl(1);
        p.set_ident(0xbeef);
        p.set_src_addr(Ipv4Addr::new(203, 0, 113, 9));
        p.set_dst_addr(Ipv4Addr::new(198, 51, 100, 200));
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.ident(), 0xbeef);
        assert_eq!(p.dst_addr(), Ipv4Addr::new(198, 51, 100, 200));
        let inc = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), inc);
        p.payload_mut()[0] = 1;
        assert_eq!(b[20], 1);
    }

    fn header_strategy() -> impl Strategy<Value = std::vec::Vec<u8>> {
        (
            0usize..=10,
            proptest::collection::vec(any::<u8>(), 60),
            0usize..=10,
        )
            .prop_map(|(ihl_extra, mut bytes, payload)| {
                let ihl = 5 + ihl_extra;
                let hl = ihl * 4;
                bytes.truncate(hl);
                bytes[0] = 0x40 | ihl as u8;
                let total = (hl + payload) as u16;
                bytes[2..4].copy_from_slice(&total.to_be_bytes());
                bytes.resize(hl + payload, 0xaa);
                let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
                p.fill_checksum();
                bytes
            })
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.version(), p.dscp(), p.ecn(), p.ident(), p.dont_frag(), p.more_frags());
                let _ = (p.frag_offset(), p.ttl(), p.protocol(), p.checksum(), p.src_addr(), p.dst_addr());
                let _ = (p.options(), p.payload(), p.verify_checksum(), p.is_fragment());
            }
        }

        #[test]
        fn incremental_edits_match_full(
            mut bytes in header_strategy(),
            dscp in 0u8..64, ecn in 0u8..4, ttl in any::<u8>(),
            src in any::<u32>(), dst in any::<u32>(),
        ) {
            let mut p = Packet::new_checked(&mut bytes[..]).unwrap();
            prop_assert!(p.verify_checksum());
            p.set_dscp(dscp);
            p.set_ecn(ecn);
            prop_assert!(p.verify_checksum());
            let inc = p.checksum();
            p.fill_checksum();
            prop_assert_eq!(inc, p.checksum());
            p.set_ttl(ttl);
            p.set_src_addr(Ipv4Addr::from(src));
            p.set_dst_addr(Ipv4Addr::from(dst));
            let inc = p.checksum();
            p.fill_checksum();
            prop_assert_eq!(inc, p.checksum());
            prop_assert_eq!((p.dscp(), p.ecn(), p.ttl()), (dscp, ecn, ttl));
        }
    }
}
