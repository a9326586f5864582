//! ICMP for IPv4 (RFC 792): the common 8-byte header (type, code,
//! checksum, rest-of-header), echo identifier / sequence number, and the
//! checksum over the whole message (no pseudo-header).
//!
//! The buffer must be exactly the ICMP message (the IPv4 payload).

use crate::checksum;
use crate::field::{rd16, rd32, wr16};
use crate::{Error, Result};

/// Length of the ICMP header (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;

/// Echo reply.
pub const ECHO_REPLY: u8 = 0;
/// Destination unreachable.
pub const DEST_UNREACHABLE: u8 = 3;
/// Redirect.
pub const REDIRECT: u8 = 5;
/// Echo request.
pub const ECHO_REQUEST: u8 = 8;
/// Router advertisement (RFC 1256).
pub const ROUTER_ADVERT: u8 = 9;
/// Router solicitation (RFC 1256).
pub const ROUTER_SOLICIT: u8 = 10;
/// Time exceeded.
pub const TIME_EXCEEDED: u8 = 11;
/// Parameter problem.
pub const PARAM_PROBLEM: u8 = 12;
/// Timestamp request.
pub const TIMESTAMP: u8 = 13;
/// Timestamp reply.
pub const TIMESTAMP_REPLY: u8 = 14;

const TYPE: usize = 0;
const CODE: usize = 1;
const CHECKSUM: usize = 2;
const REST: usize = 4;
const IDENT: usize = 4;
const SEQ_NO: usize = 6;

/// A view of an ICMPv4 message.
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

    /// The 4-byte rest-of-header field, whose meaning depends on the type.
    pub fn rest_of_header(&self) -> u32 {
        rd32(self.b(), REST)
    }

    /// True for echo request and echo reply.
    pub fn is_echo(&self) -> bool {
        matches!(self.msg_type(), ECHO_REQUEST | ECHO_REPLY)
    }

    /// True for error messages (unreachable, redirect, time exceeded,
    /// parameter problem), whose payload quotes the offending IP header.
    pub fn is_error(&self) -> bool {
        matches!(
            self.msg_type(),
            DEST_UNREACHABLE | REDIRECT | TIME_EXCEEDED | PARAM_PROBLEM
        )
    }

    /// Echo identifier (first half of rest-of-header; meaningful for echo).
    pub fn echo_ident(&self) -> u16 {
        rd16(self.b(), IDENT)
    }

    /// Echo sequence number (second half of rest-of-header; meaningful for echo).
    pub fn echo_seq_no(&self) -> u16 {
        rd16(self.b(), SEQ_NO)
    }

    /// Everything after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// True if the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum16(self.b())) == 0xffff
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

    /// Recomputes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.b());
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

    /// Echo request id 0x1234 seq 1 with the 32-byte Windows ping payload;
    /// checksum 0x3B27 (cross-checked).
    static ECHO: [u8; 40] = *b"\x08\x00\x3b\x27\x12\x34\x00\x01abcdefghijklmnopqrstuvwabcdefghi";

    #[test]
    fn echo_request() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), ECHO_REQUEST);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x3b27);
        assert!(p.is_echo());
        assert!(!p.is_error());
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.payload(), b"abcdefghijklmnopqrstuvwabcdefghi");
        assert!(p.verify_checksum());
    }

    #[test]
    fn turn_into_reply() {
        let mut b = ECHO;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(ECHO_REPLY);
        p.set_echo_seq_no(2);
        p.set_echo_ident(7);
        p.set_msg_code(0);
        assert!(p.verify_checksum());
        let inc = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), inc);
        p.payload_mut()[0] = b'z';
        assert!(!p.verify_checksum());
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.echo_seq_no());
                let _ = (p.payload(), p.verify_checksum(), p.is_error(), p.rest_of_header());
            }
        }
    }
}
