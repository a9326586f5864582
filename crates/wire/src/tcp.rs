//! TCP segments (RFC 9293) and their options: MSS (RFC 9293 §3.2), window
//! scale and timestamps (RFC 7323), SACK-permitted and SACK (RFC 2018).
//!
//! A [`Packet`] views exactly one segment: the buffer must end where the
//! segment ends (the IP payload), because the checksum covers all of it.
//! [`Packet::new_checked`] validates the data offset. Options are decoded
//! lazily by [`TcpOptions`], which yields an error item and stops on a
//! malformed option instead of panicking.
//!
//! All setters of checksummed fields fix the checksum incrementally
//! (RFC 1624 eqn. 3), which also works for an option at an odd offset.

use core::fmt;
use core::net::IpAddr;
use core::ops::{BitAnd, BitOr, BitOrAssign};

use crate::checksum;
use crate::field::{rd16, rd32, wr16, wr32};
use crate::ip::protocol;
use crate::{Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Maximum header length (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

const SRC_PORT: usize = 0;
const DST_PORT: usize = 2;
const SEQ: usize = 4;
const ACK: usize = 8;
pub(crate) const OFF_FLAGS: usize = 12;
const FLAGS: usize = 13;
const WINDOW: usize = 14;
pub(crate) const CHECKSUM: usize = 16;
const URGENT: usize = 18;

/// Option kinds (IANA "TCP Option Kind Numbers").
pub mod option_kind {
    /// End of option list.
    pub const EOL: u8 = 0;
    /// No-operation (padding).
    pub const NOP: u8 = 1;
    /// Maximum segment size.
    pub const MSS: u8 = 2;
    /// Window scale.
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted.
    pub const SACK_PERMITTED: u8 = 4;
    /// Selective acknowledgement.
    pub const SACK: u8 = 5;
    /// Timestamps.
    pub const TIMESTAMPS: u8 = 8;
}

/// The eight TCP flag bits of header octet 13.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgement field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN echo (RFC 3168).
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set in `self`.
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// True if no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    /// Formats as e.g. `SYN|ACK`, or `-` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut first = true;
        for (i, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// One decoded TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption {
    /// End of option list (kind 0). The iterator stops after it.
    Eol,
    /// No-operation (kind 1).
    Nop,
    /// Maximum segment size (kind 2).
    Mss(u16),
    /// Window scale shift count (kind 3).
    WindowScale(u8),
    /// SACK permitted (kind 4).
    SackPermitted,
    /// SACK blocks (kind 5): `blocks[..count]` are the (left, right) edges.
    Sack {
        /// Block edges; entries at `count..` are zero.
        blocks: [(u32, u32); 4],
        /// Number of valid blocks (1..=4).
        count: u8,
    },
    /// Timestamps (kind 8).
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other kind, skipped by its length (`len` includes kind and length bytes).
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option length field.
        len: u8,
    },
}

impl TcpOption {
    /// Encoded length in bytes.
    pub fn buffer_len(&self) -> usize {
        match *self {
            TcpOption::Eol | TcpOption::Nop => 1,
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack { count, .. } => 2 + 8 * usize::from(count.min(4)),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { len, .. } => usize::from(len),
        }
    }

    /// Writes the option at the start of `buf`, returning its length. An
    /// `Unknown` option is written with a zero-filled body.
    ///
    /// Errors: [`Error::BufferTooSmall`]; [`Error::Malformed`] for a SACK with
    /// no blocks or an `Unknown` length below 2.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let b = &mut buf[..len];
        match *self {
            TcpOption::Eol => b[0] = option_kind::EOL,
            TcpOption::Nop => b[0] = option_kind::NOP,
            TcpOption::Mss(mss) => {
                b[..2].copy_from_slice(&[option_kind::MSS, 4]);
                wr16(b, 2, mss);
            }
            TcpOption::WindowScale(shift) => {
                b.copy_from_slice(&[option_kind::WINDOW_SCALE, 3, shift]);
            }
            TcpOption::SackPermitted => b.copy_from_slice(&[option_kind::SACK_PERMITTED, 2]),
            TcpOption::Sack { blocks, count } => {
                if count == 0 {
                    return Err(Error::Malformed("TCP SACK option without blocks"));
                }
                b[..2].copy_from_slice(&[option_kind::SACK, len as u8]);
                for (i, (l, r)) in blocks.iter().take(usize::from(count.min(4))).enumerate() {
                    wr32(b, 2 + 8 * i, *l);
                    wr32(b, 6 + 8 * i, *r);
                }
            }
            TcpOption::Timestamps { tsval, tsecr } => {
                b[..2].copy_from_slice(&[option_kind::TIMESTAMPS, 10]);
                wr32(b, 2, tsval);
                wr32(b, 6, tsecr);
            }
            TcpOption::Unknown { kind, len } => {
                if len < 2 {
                    return Err(Error::Malformed("TCP option length < 2"));
                }
                b.fill(0);
                b[..2].copy_from_slice(&[kind, len]);
            }
        }
        Ok(len)
    }
}

/// Iterator over the options area of a TCP header, yielding
/// `Result<TcpOption, Error>`.
///
/// Stops after `Eol`, at the end of the area, or after yielding one error
/// (an option whose length byte is missing, below 2, runs past the area, or
/// does not fit its kind).
#[derive(Debug, Clone)]
pub struct TcpOptions<'a> {
    data: &'a [u8],
    pos: usize,
    done: bool,
}

/// One undecoded option: its offset in the options area, kind and body.
struct RawOption<'a> {
    at: usize,
    kind: u8,
    body: &'a [u8],
}

impl<'a> TcpOptions<'a> {
    /// Iterates over a raw options area (the bytes between the fixed header
    /// and the data offset).
    pub fn new(data: &'a [u8]) -> Self {
        TcpOptions {
            data,
            pos: 0,
            done: false,
        }
    }

    fn fail(&mut self, e: Error) -> Option<Result<RawOption<'a>>> {
        self.done = true;
        Some(Err(e))
    }

    fn next_raw(&mut self) -> Option<Result<RawOption<'a>>> {
        if self.done || self.pos >= self.data.len() {
            self.done = true;
            return None;
        }
        let at = self.pos;
        let kind = self.data[at];
        match kind {
            option_kind::EOL => {
                self.done = true;
                Some(Ok(RawOption {
                    at,
                    kind,
                    body: &[],
                }))
            }
            option_kind::NOP => {
                self.pos += 1;
                Some(Ok(RawOption {
                    at,
                    kind,
                    body: &[],
                }))
            }
            _ => {
                let Some(&len) = self.data.get(at + 1) else {
                    return self.fail(Error::Malformed("TCP option: missing length byte"));
                };
                let len = usize::from(len);
                if len < 2 {
                    return self.fail(Error::Malformed("TCP option: length < 2"));
                }
                let Some(body) = self.data.get(at + 2..at + len) else {
                    return self.fail(Error::Malformed("TCP option: runs past the header"));
                };
                self.pos += len;
                Some(Ok(RawOption { at, kind, body }))
            }
        }
    }
}

impl Iterator for TcpOptions<'_> {
    type Item = Result<TcpOption>;

    fn next(&mut self) -> Option<Self::Item> {
        let raw = match self.next_raw()? {
            Ok(raw) => raw,
            Err(e) => return Some(Err(e)),
        };
        let body = raw.body;
        let opt = match (raw.kind, body.len()) {
            (option_kind::EOL, _) => TcpOption::Eol,
            (option_kind::NOP, _) => TcpOption::Nop,
            (option_kind::MSS, 2) => TcpOption::Mss(rd16(body, 0)),
            (option_kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(body[0]),
            (option_kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
            (option_kind::SACK, n) if n > 0 && n % 8 == 0 && n <= 32 => {
                let mut blocks = [(0u32, 0u32); 4];
                for (i, slot) in blocks.iter_mut().take(n / 8).enumerate() {
                    *slot = (rd32(body, 8 * i), rd32(body, 8 * i + 4));
                }
                TcpOption::Sack {
                    blocks,
                    count: (n / 8) as u8,
                }
            }
            (option_kind::TIMESTAMPS, 8) => TcpOption::Timestamps {
                tsval: rd32(body, 0),
                tsecr: rd32(body, 4),
            },
            (
                option_kind::MSS
                | option_kind::WINDOW_SCALE
                | option_kind::SACK_PERMITTED
                | option_kind::SACK
                | option_kind::TIMESTAMPS,
                _,
            ) => {
                self.done = true;
                return Some(Err(Error::Malformed("TCP option: wrong length for kind")));
            }
            (kind, n) => TcpOption::Unknown {
                kind,
                len: (n + 2) as u8,
            },
        };
        Some(Ok(opt))
    }
}

impl core::iter::FusedIterator for TcpOptions<'_> {}

impl<'a> TcpOptions<'a> {
    /// The same walk without decoding: `(kind, body)` per option, the body being the
    /// bytes after the kind and length octets (empty for `EOL` and `NOP`). Lengths are
    /// not checked against the kind, so a reader can apply its own rules (CAKE's ACK
    /// filter refuses a timestamp option of the wrong length rather than ignoring it).
    /// Ends after `EOL`, at the end of the area, or with one error item for an option
    /// whose length byte is missing, below 2, or runs past the area — where Linux's
    /// `tcp_parse_options` stops reading too.
    pub fn raw(self) -> RawOptions<'a> {
        RawOptions(self)
    }
}

/// Iterator over undecoded options, from [`TcpOptions::raw`].
#[derive(Debug, Clone)]
pub struct RawOptions<'a>(TcpOptions<'a>);

impl<'a> Iterator for RawOptions<'a> {
    type Item = Result<(u8, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.next_raw()?.map(|o| (o.kind, o.body)))
    }
}

impl core::iter::FusedIterator for RawOptions<'_> {}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the header.
    ///
    /// Errors: [`Error::Truncated`] if the buffer is shorter than 20 bytes or
    /// than the data offset; [`Error::Malformed`] if the data offset is < 5.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[OFF_FLAGS] >> 4) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed("TCP: data offset < 5"));
        }
        if b.len() < hl {
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        rd32(self.b(), SEQ)
    }

    /// Acknowledgement number.
    pub fn ack_number(&self) -> u32 {
        rd32(self.b(), ACK)
    }

    /// Data offset field, in 32-bit words (5..=15).
    pub fn data_offset(&self) -> u8 {
        self.b()[OFF_FLAGS] >> 4
    }

    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The flag octet.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[FLAGS])
    }

    /// Receive window (unscaled).
    pub fn window(&self) -> u16 {
        rd16(self.b(), WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        rd16(self.b(), URGENT)
    }

    /// Raw options area.
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }

    /// Decoding iterator over the options.
    pub fn options_iter(&self) -> TcpOptions<'_> {
        TcpOptions::new(self.options())
    }

    /// Offset in the segment of the first MSS option's value; `Ok(None)` without one,
    /// [`Error::Malformed`] if the options are malformed before it.
    fn mss_option_at(&self) -> Result<Option<usize>> {
        let mut it = TcpOptions::new(self.options());
        while let Some(raw) = it.next_raw() {
            let raw = raw?;
            if raw.kind == option_kind::MSS {
                if raw.body.len() != 2 {
                    return Err(Error::Malformed("TCP option: wrong length for kind"));
                }
                return Ok(Some(HEADER_LEN + raw.at + 2));
            }
        }
        Ok(None)
    }

    /// The first MSS option's value, if there is a well-formed one before
    /// any malformed option.
    pub fn mss_option(&self) -> Option<u16> {
        self.options_iter()
            .map_while(|o| o.ok())
            .find_map(|o| match o {
                TcpOption::Mss(m) => Some(m),
                _ => None,
            })
    }

    /// The first window-scale option's shift count, if any (as [`Self::mss_option`]).
    pub fn window_scale_option(&self) -> Option<u8> {
        self.options_iter()
            .map_while(|o| o.ok())
            .find_map(|o| match o {
                TcpOption::WindowScale(s) => Some(s),
                _ => None,
            })
    }

    /// The segment data after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }

    /// Length of the whole segment (header + data), as used in the
    /// pseudo-header.
    pub fn segment_len(&self) -> usize {
        self.b().len()
    }

    fn sum_with_pseudo(&self, src: IpAddr, dst: IpAddr) -> u32 {
        let b = self.b();
        checksum::combine(
            checksum::pseudo_header(src, dst, protocol::TCP, b.len() as u32),
            checksum::sum16(b),
        )
    }

    /// True if the checksum is correct for the given pseudo-header addresses.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        checksum::fold(self.sum_with_pseudo(src, dst)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes a 16-bit value at `at` and fixes the checksum; returns the old value.
    fn update16(&mut self, at: usize, new: u16) -> u16 {
        let b = self.buffer.as_mut();
        let old = rd16(b, at);
        wr16(b, at, new);
        let c = checksum::incremental_update16_at(rd16(b, CHECKSUM), at, old, new);
        wr16(b, CHECKSUM, c);
        old
    }

    fn update32(&mut self, at: usize, new: u32) {
        let b = self.buffer.as_mut();
        let old = rd32(b, at);
        wr32(b, at, new);
        let c = checksum::incremental_update32(rd16(b, CHECKSUM), old, new);
        wr16(b, CHECKSUM, c);
    }

    /// Sets the source port; incremental checksum.
    pub fn set_src_port(&mut self, port: u16) {
        self.update16(SRC_PORT, port);
    }

    /// Sets the destination port; incremental checksum.
    pub fn set_dst_port(&mut self, port: u16) {
        self.update16(DST_PORT, port);
    }

    /// Sets both ports; incremental checksum.
    pub fn set_ports(&mut self, src: u16, dst: u16) {
        self.update32(SRC_PORT, (u32::from(src) << 16) | u32::from(dst));
    }

    /// Sets the sequence number; incremental checksum.
    pub fn set_seq_number(&mut self, seq: u32) {
        self.update32(SEQ, seq);
    }

    /// Sets the acknowledgement number; incremental checksum.
    pub fn set_ack_number(&mut self, ack: u32) {
        self.update32(ACK, ack);
    }

    /// Sets the flag octet (the data offset is untouched); incremental checksum.
    pub fn set_flags(&mut self, flags: TcpFlags) {
        let word = u16::from_be_bytes([self.b()[OFF_FLAGS], flags.0]);
        self.update16(OFF_FLAGS, word);
    }

    /// Sets the receive window; incremental checksum.
    pub fn set_window(&mut self, window: u16) {
        self.update16(WINDOW, window);
    }

    /// Sets the urgent pointer; incremental checksum.
    pub fn set_urgent_at(&mut self, urgent: u16) {
        self.update16(URGENT, urgent);
    }

    /// Rewrites the value of the first MSS option in place; incremental
    /// checksum (correct at odd offsets too).
    ///
    /// Returns `Ok(Some(old_mss))` if an MSS option was rewritten, `Ok(None)`
    /// if there is none, and [`Error::Malformed`] if the options are malformed
    /// before an MSS option is found (nothing is written then).
    pub fn set_mss_option(&mut self, mss: u16) -> Result<Option<u16>> {
        Ok(self.mss_option_at()?.map(|at| self.update16(at, mss)))
    }

    /// Lowers the first MSS option to `cap` if it is above it (never raises it), in
    /// place with an incremental checksum, at any alignment.
    ///
    /// Returns `Ok(Some(old_mss))` if there is an MSS option (rewritten only when
    /// `old_mss > cap`), `Ok(None)` if there is none, and [`Error::Malformed`] if the
    /// options are malformed before an MSS option is found (nothing is written then).
    pub fn clamp_mss_option(&mut self, cap: u16) -> Result<Option<u16>> {
        match self.mss_option_at()? {
            Some(at) => {
                let old = rd16(self.buffer.as_ref(), at);
                if old > cap {
                    self.update16(at, cap);
                }
                Ok(Some(old))
            }
            None => Ok(None),
        }
    }

    /// Sets the checksum field verbatim.
    pub fn set_checksum(&mut self, csum: u16) {
        wr16(self.buffer.as_mut(), CHECKSUM, csum);
    }

    /// Recomputes the checksum from scratch with the given pseudo-header
    /// addresses (both IPv4 or both IPv6).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let c = !checksum::fold(self.sum_with_pseudo(src, dst));
        self.set_checksum(c);
    }

    /// Mutable segment data.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use proptest::prelude::*;
    use std::vec::Vec;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 104);
    const DST: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

    /// A Linux-style SYN 192.168.0.104:54321 -> 93.184.216.34:80 with
    /// MSS 1460, SACK permitted, timestamps (0x009a3b4c, 0), NOP, window
    /// scale 7. Checksum 0xBA4F cross-checked with an independent
    /// implementation.
    static SYN: [u8; 40] = [
        0xd4, 0x31, 0x00, 0x50, // ports
        0x6f, 0x4a, 0x1c, 0x22, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, 0xfa, 0xf0, // data offset 10, SYN, window 64240
        0xba, 0x4f, 0x00, 0x00, // checksum, urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x00, 0x9a, 0x3b, 0x4c, 0x00, 0x00, 0x00, 0x00, // timestamps
        0x01, // NOP
        0x03, 0x03, 0x07, // window scale 7
    ];

    #[test]
    fn parse_syn() {
        let p = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!(p.src_port(), 54321);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x6f4a1c22);
        assert_eq!(p.ack_number(), 0);
        assert_eq!(p.data_offset(), 10);
        assert_eq!(p.header_len(), 40);
        assert_eq!(p.flags(), TcpFlags::SYN);
        assert_eq!(std::format!("{:?}", p.flags()), "SYN");
        assert_eq!(p.window(), 64240);
        assert_eq!(p.checksum(), 0xba4f);
        assert_eq!(p.urgent_at(), 0);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        assert!(!p.verify_checksum(SRC.into(), Ipv4Addr::new(93, 184, 216, 35).into()));
        let opts: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            opts,
            [
                TcpOption::Mss(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 0x009a3b4c,
                    tsecr: 0
                },
                TcpOption::Nop,
                TcpOption::WindowScale(7),
            ]
        );
        assert_eq!(p.mss_option(), Some(1460));
        assert_eq!(p.window_scale_option(), Some(7));

        let mut copy = SYN;
        let mut q = Packet::new_checked(&mut copy[..]).unwrap();
        q.fill_checksum(SRC.into(), DST.into());
        assert_eq!(q.checksum(), 0xba4f);
    }

    #[test]
    fn edits_on_syn() {
        let mut b = SYN;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.set_mss_option(1400), Ok(Some(1460)));
        assert_eq!(p.mss_option(), Some(1400));
        p.set_window(1000);
        p.set_ports(1, 2);
        p.set_seq_number(7);
        p.set_ack_number(8);
        p.set_flags(TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE);
        p.set_urgent_at(3);
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        assert_eq!((p.src_port(), p.dst_port()), (1, 2));
        assert_eq!((p.seq_number(), p.ack_number(), p.window()), (7, 8, 1000));
        assert_eq!(p.data_offset(), 10);
        assert_eq!(std::format!("{:?}", p.flags()), "SYN|ACK|ECE");
        p.set_src_port(9);
        p.set_dst_port(10);
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        let inc = p.checksum();
        p.fill_checksum(SRC.into(), DST.into());
        assert_eq!(inc, p.checksum());
    }

    #[test]
    fn mss_at_odd_offset() {
        // NOP, MSS, NOP, NOP, NOP: the MSS value sits at offset 23 (odd).
        let mut b = [0u8; 28 + 3];
        b[12] = 0x70;
        b[20..28].copy_from_slice(&[1, 2, 4, 0x05, 0xb4, 1, 1, 1]);
        b[28..].copy_from_slice(b"abc");
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(SRC.into(), DST.into());
        assert_eq!(p.set_mss_option(1200), Ok(Some(1460)));
        assert!(p.verify_checksum(SRC.into(), DST.into()));
        assert_eq!(p.mss_option(), Some(1200));
        assert_eq!(p.payload(), b"abc");
    }

    #[test]
    fn no_mss_and_malformed() {
        let mut b = [0u8; 24];
        b[12] = 0x60;
        b[20..24].copy_from_slice(&[1, 1, 1, 0]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(p.set_mss_option(1), Ok(None));
        assert_eq!(p.mss_option(), None);

        // Unknown option whose length runs past the area, before an MSS.
        let mut b = [0u8; 28];
        b[12] = 0x70;
        b[20..28].copy_from_slice(&[30, 9, 0, 0, 2, 4, 5, 0xb4]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(matches!(p.set_mss_option(1), Err(Error::Malformed(_))));
        assert_eq!(b[26..28], [5, 0xb4]);

        // MSS with a bad length.
        let mut b = [0u8; 24];
        b[12] = 0x60;
        b[20..24].copy_from_slice(&[2, 3, 5, 1]);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(p.set_mss_option(1).is_err());
        assert_eq!(p.mss_option(), None);
    }

    #[test]
    fn options_iterator_cases() {
        let collect = |d: &[u8]| TcpOptions::new(d).collect::<Vec<_>>();
        // EOL stops; bytes after it are ignored.
        assert_eq!(
            collect(&[1, 0, 2, 1]),
            [Ok(TcpOption::Nop), Ok(TcpOption::Eol)]
        );
        // SACK with two blocks, then unknown kind 30 skipped by length.
        let mut d = std::vec![5, 18];
        for v in [1u32, 2, 3, 4] {
            d.extend_from_slice(&v.to_be_bytes());
        }
        d.extend_from_slice(&[30, 4, 0xaa, 0xbb]);
        assert_eq!(
            collect(&d),
            [
                Ok(TcpOption::Sack {
                    blocks: [(1, 2), (3, 4), (0, 0), (0, 0)],
                    count: 2
                }),
                Ok(TcpOption::Unknown { kind: 30, len: 4 })
            ]
        );
        // Missing length byte, length 0 and 1, SACK with a partial block.
        for bad in [&[2u8][..], &[30, 0], &[30, 1, 1], &[5, 6, 0, 0, 0, 0]] {
            let v = collect(bad);
            assert_eq!(v.len(), 1, "{bad:?}");
            assert!(v[0].is_err());
        }
        // Error item then the iterator is finished.
        let mut it = TcpOptions::new(&[1, 3, 2, 7, 1, 1]);
        assert_eq!(it.next(), Some(Ok(TcpOption::Nop)));
        assert!(matches!(it.next(), Some(Err(Error::Malformed(_)))));
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
    }

    #[test]
    fn raw_options_keep_lengths_the_decoder_refuses() {
        fn raw(d: &[u8]) -> Vec<Result<(u8, &[u8])>> {
            TcpOptions::new(d).raw().collect()
        }
        // a timestamp option 8 bytes long and a 6-byte SACK: the decoder stops with an
        // error at the first; the raw walk hands both over, then stops at EOL
        let d = [1, 8, 8, 1, 2, 3, 4, 5, 6, 5, 6, 9, 9, 9, 9, 0, 30, 2];
        assert_eq!(
            raw(&d),
            [
                Ok((1, &[][..])),
                Ok((8, &[1, 2, 3, 4, 5, 6][..])),
                Ok((5, &[9, 9, 9, 9][..])),
                Ok((0, &[][..])),
            ]
        );
        assert!(TcpOptions::new(&d).any(|o| o.is_err()));
        // the walk ends where Linux's does: missing length byte, length < 2, past the end
        for bad in [&[1u8, 30][..], &[30, 1, 0, 0], &[30, 5, 0, 0]] {
            let v = raw(bad);
            assert!(v.last().unwrap().is_err(), "{bad:?}");
            assert!(v[..v.len() - 1].iter().all(|o| o.is_ok()));
        }
        assert_eq!(raw(&[]), []);
    }

    #[test]
    fn option_emit_roundtrip() {
        let opts = [
            TcpOption::Mss(536),
            TcpOption::WindowScale(14),
            TcpOption::SackPermitted,
            TcpOption::Sack {
                blocks: [(1, 2), (3, 4), (5, 6), (0, 0)],
                count: 3,
            },
            TcpOption::Timestamps {
                tsval: 9,
                tsecr: 10,
            },
            TcpOption::Unknown { kind: 253, len: 4 },
            TcpOption::Nop,
            TcpOption::Eol,
        ];
        let mut buf = [0u8; 64];
        let mut at = 0;
        for o in &opts {
            at += o.emit(&mut buf[at..]).unwrap();
        }
        let back: Vec<_> = TcpOptions::new(&buf[..at]).map(|o| o.unwrap()).collect();
        assert_eq!(back, opts);
        assert_eq!(
            TcpOption::Mss(1).emit(&mut [0u8; 3]),
            Err(Error::BufferTooSmall)
        );
        assert!(TcpOption::Sack {
            blocks: [(0, 0); 4],
            count: 0
        }
        .emit(&mut buf)
        .is_err());
        assert!(TcpOption::Unknown { kind: 9, len: 1 }
            .emit(&mut buf)
            .is_err());
    }

    #[test]
    fn new_checked_errors() {
        assert_eq!(
            Packet::new_checked(&SYN[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&SYN[..39]).unwrap_err(),
            Error::Truncated
        );
        let mut b = SYN;
        b[12] = 0x40;
        assert!(matches!(
            Packet::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
    }

    /// Strategy for an options area (<= 40 bytes, multiple of 4) that always
    /// contains an MSS option, optionally at an odd offset.
    fn options_area() -> impl Strategy<Value = Vec<u8>> {
        let opt = prop_oneof![
            Just(TcpOption::Nop),
            any::<u8>().prop_map(TcpOption::WindowScale),
            Just(TcpOption::SackPermitted),
            (any::<u32>(), any::<u32>())
                .prop_map(|(tsval, tsecr)| TcpOption::Timestamps { tsval, tsecr }),
            (any::<[(u32, u32); 4]>(), 1u8..=2)
                .prop_map(|(blocks, count)| TcpOption::Sack { blocks, count }),
            (9u8..=254, 2u8..=6).prop_map(|(kind, len)| TcpOption::Unknown { kind, len }),
        ];
        (
            0usize..=3,
            any::<u16>(),
            proptest::collection::vec(opt, 0..4),
        )
            .prop_map(|(nops, mss, rest)| {
                let mut v = std::vec![1u8; nops];
                let mut tmp = [0u8; 40];
                let n = TcpOption::Mss(mss).emit(&mut tmp).unwrap();
                v.extend_from_slice(&tmp[..n]);
                for o in rest {
                    let n = o.emit(&mut tmp).unwrap();
                    if v.len() + n <= 36 {
                        v.extend_from_slice(&tmp[..n]);
                    }
                }
                while v.len() % 4 != 0 {
                    v.push(0);
                }
                v
            })
    }

    prop_compose! {
        fn segment()(
            ports in any::<(u16, u16)>(),
            seq in any::<u32>(), ack in any::<u32>(),
            flags in any::<u8>(), window in any::<u16>(),
            options in options_area(),
            payload in proptest::collection::vec(any::<u8>(), 0..50),
            src in any::<u32>(), dst in any::<u32>(),
        ) -> (Vec<u8>, IpAddr, IpAddr) {
            let hl = HEADER_LEN + options.len();
            let mut v = std::vec![0u8; hl];
            wr16(&mut v, SRC_PORT, ports.0);
            wr16(&mut v, DST_PORT, ports.1);
            wr32(&mut v, SEQ, seq);
            wr32(&mut v, ACK, ack);
            v[OFF_FLAGS] = ((hl / 4) as u8) << 4;
            v[FLAGS] = flags;
            wr16(&mut v, WINDOW, window);
            v[HEADER_LEN..].copy_from_slice(&options);
            v.extend_from_slice(&payload);
            let (src, dst) = (IpAddr::V4(Ipv4Addr::from(src)), IpAddr::V4(Ipv4Addr::from(dst)));
            Packet::new_checked(&mut v[..]).unwrap().fill_checksum(src, dst);
            (v, src, dst)
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.flags());
                let _ = (p.window(), p.checksum(), p.urgent_at(), p.payload(), p.mss_option());
                let _ = p.window_scale_option();
                prop_assert!(p.options_iter().count() <= 40);
                let mut copy = data.clone();
                let mut q = Packet::new_checked(&mut copy[..]).unwrap();
                let _ = q.set_mss_option(1);
            }
        }

        #[test]
        fn options_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut n = 0;
            for o in TcpOptions::new(&data) {
                n += 1;
                if let Ok(o) = o {
                    let mut buf = [0u8; 64];
                    let _ = o.emit(&mut buf);
                }
            }
            prop_assert!(n <= data.len());
        }

        #[test]
        fn incremental_edits_match_full(
            (mut v, src, dst) in segment(),
            window in any::<u16>(), mss in any::<u16>(),
            ports in any::<(u16, u16)>(), seq in any::<u32>(), ack in any::<u32>(),
            flags in any::<u8>(),
        ) {
            let mut p = Packet::new_checked(&mut v[..]).unwrap();
            prop_assert!(p.verify_checksum(src, dst));
            let check = |p: &mut Packet<&mut [u8]>| -> core::result::Result<(), TestCaseError> {
                prop_assert!(p.verify_checksum(src, dst));
                let inc = p.checksum();
                p.fill_checksum(src, dst);
                prop_assert_eq!(inc, p.checksum());
                Ok(())
            };
            p.set_window(window);
            check(&mut p)?;
            let old = p.mss_option();
            prop_assert!(old.is_some());
            prop_assert_eq!(p.set_mss_option(mss), Ok(old));
            prop_assert_eq!(p.mss_option(), Some(mss));
            check(&mut p)?;
            p.set_ports(ports.0, ports.1);
            check(&mut p)?;
            p.set_seq_number(seq);
            p.set_ack_number(ack);
            check(&mut p)?;
            p.set_flags(TcpFlags(flags));
            p.set_src_port(ports.1);
            check(&mut p)?;
            prop_assert_eq!((p.src_port(), p.dst_port()), (ports.1, ports.1));
            prop_assert_eq!((p.seq_number(), p.ack_number(), p.window()), (seq, ack, window));
        }
    }
}
