//! Ethernet II frames (IEEE 802.3) with IEEE 802.1Q VLAN tags, including
//! 802.1ad (QinQ) double tagging.
//!
//! A [`Frame`] accepts zero, one or two VLAN tags (TPID `0x8100` or
//! `0x88A8`); a third tag is reported as [`Error::Unsupported`].
//! [`Frame::ethertype`] is the innermost EtherType and [`Frame::payload`]
//! starts after the last tag. The frame check sequence is not expected in
//! the buffer.

use core::fmt;

use crate::field::{rd16, wr16};
use crate::{Error, Result};

/// EtherType values (IEEE registry).
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q VLAN tag (customer tag, C-TAG).
    pub const VLAN: u16 = 0x8100;
    /// Internet Protocol version 6.
    pub const IPV6: u16 = 0x86DD;
    /// IEEE 802.1ad service tag (S-TAG, "QinQ").
    pub const QINQ: u16 = 0x88A8;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one VLAN tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// Maximum number of stacked VLAN tags accepted.
pub const MAX_VLAN_TAGS: usize = 2;

const DST: usize = 0;
const SRC: usize = 6;
const TYPE: usize = 12;

/// A 48-bit IEEE MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// The six octets.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// True for the broadcast address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True if the group bit is set (multicast or broadcast).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True if the locally administered bit is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> Self {
        MacAddr(b)
    }
}

/// True for the TPIDs that introduce a VLAN tag.
#[inline]
pub const fn is_vlan_tpid(ethertype: u16) -> bool {
    ethertype == ethertype::VLAN || ethertype == ethertype::QINQ
}

/// A view of an Ethernet II frame, possibly VLAN tagged.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Validates that the buffer holds a full header including all VLAN tags.
    ///
    /// Errors: [`Error::Truncated`] if it does not; [`Error::Unsupported`] for
    /// more than [`MAX_VLAN_TAGS`] tags.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let mut tags = 0;
        let mut at = TYPE;
        while is_vlan_tpid(rd16(b, at)) {
            if tags == MAX_VLAN_TAGS {
                return Err(Error::Unsupported("more than two VLAN tags"));
            }
            tags += 1;
            at += VLAN_TAG_LEN;
            if b.len() < at + 2 {
                return Err(Error::Truncated);
            }
        }
        Ok(Frame { buffer })
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole underlying buffer.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Destination MAC address.
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[DST..DST + 6]);
        MacAddr(a)
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[SRC..SRC + 6]);
        MacAddr(a)
    }

    /// Number of VLAN tags (0, 1 or 2).
    pub fn vlan_count(&self) -> usize {
        let b = self.buffer.as_ref();
        if !is_vlan_tpid(rd16(b, TYPE)) {
            0
        } else if !is_vlan_tpid(rd16(b, TYPE + VLAN_TAG_LEN)) {
            1
        } else {
            2
        }
    }

    /// The outer TCI (tag control information), if tagged.
    fn tci(&self, index: usize) -> Option<u16> {
        (self.vlan_count() > index)
            .then(|| rd16(self.buffer.as_ref(), TYPE + 2 + index * VLAN_TAG_LEN))
    }

    /// TPID of the outer tag (`0x8100` or `0x88A8`), if tagged.
    pub fn outer_tpid(&self) -> Option<u16> {
        (self.vlan_count() > 0).then(|| rd16(self.buffer.as_ref(), TYPE))
    }

    /// VLAN identifier (12 bits) of the outer tag, if tagged.
    pub fn vlan_id(&self) -> Option<u16> {
        self.tci(0).map(|t| t & 0x0fff)
    }

    /// Priority code point (802.1p, 3 bits) of the outer tag, if tagged.
    pub fn pcp(&self) -> Option<u8> {
        self.tci(0).map(|t| (t >> 13) as u8)
    }

    /// Drop eligible indicator of the outer tag, if tagged.
    pub fn dei(&self) -> Option<bool> {
        self.tci(0).map(|t| t & 0x1000 != 0)
    }

    /// VLAN identifier of the inner tag of a double-tagged frame.
    pub fn inner_vlan_id(&self) -> Option<u16> {
        self.tci(1).map(|t| t & 0x0fff)
    }

    /// The innermost EtherType (after all VLAN tags). Values below `0x0600`
    /// are IEEE 802.3 length fields and are returned as they are.
    pub fn ethertype(&self) -> u16 {
        rd16(
            self.buffer.as_ref(),
            TYPE + self.vlan_count() * VLAN_TAG_LEN,
        )
    }

    /// Header length including VLAN tags: the offset of the payload.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.vlan_count() * VLAN_TAG_LEN
    }

    /// Everything after the header (may include Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[DST..DST + 6].copy_from_slice(&addr.0);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[SRC..SRC + 6].copy_from_slice(&addr.0);
    }

    fn update_outer_tci(&mut self, f: impl FnOnce(u16) -> u16) -> Result<()> {
        let tci = self
            .tci(0)
            .ok_or(Error::Unsupported("frame has no VLAN tag"))?;
        wr16(self.buffer.as_mut(), TYPE + 2, f(tci));
        Ok(())
    }

    /// Rewrites the outer tag's VLAN id (low 12 bits of `vid`).
    /// Errors with [`Error::Unsupported`] on an untagged frame.
    pub fn set_vlan_id(&mut self, vid: u16) -> Result<()> {
        self.update_outer_tci(|t| (t & 0xf000) | (vid & 0x0fff))
    }

    /// Rewrites the outer tag's priority code point (low 3 bits of `pcp`).
    /// Errors with [`Error::Unsupported`] on an untagged frame.
    pub fn set_pcp(&mut self, pcp: u8) -> Result<()> {
        self.update_outer_tci(|t| (t & 0x1fff) | (u16::from(pcp & 0x07) << 13))
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An ARP request (who-has 192.168.1.1 tell 192.168.1.100), padded to 60.
    static ARP_FRAME: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst: broadcast
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
        0x08, 0x06, // ARP
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // htype, ptype, hlen, plen, op
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc0, 0xa8, 0x01, 0x64, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01, // target
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding
    ];

    /// 802.1Q tag PCP 5, VID 100, then an IPv4 header start.
    static VLAN_FRAME: [u8; 22] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, //
        0x81, 0x00, 0xa0, 0x64, // TPID, TCI = 101 0 000001100100
        0x08, 0x00, // IPv4
        0x45, 0x00, 0x00, 0x14,
    ];

    /// 802.1ad S-tag VID 200 (PCP 3, DEI) outside a C-tag VID 100, then IPv6.
    static QINQ_FRAME: [u8; 24] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, //
        0x88, 0xa8, 0x70, 0xc8, // S-tag: PCP 3, DEI 1, VID 200
        0x81, 0x00, 0x00, 0x64, // C-tag: VID 100
        0x86, 0xdd, // IPv6
        0x60, 0x00,
    ];

    #[test]
    fn arp() {
        let f = Frame::new_checked(&ARP_FRAME[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.src_addr().to_string(), "52:54:00:12:34:56");
        assert_eq!(f.ethertype(), ethertype::ARP);
        assert_eq!(f.vlan_count(), 0);
        assert_eq!(f.vlan_id(), None);
        assert_eq!(f.pcp(), None);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload().len(), 46);
    }

    #[test]
    fn single_tag() {
        let f = Frame::new_checked(&VLAN_FRAME[..]).unwrap();
        assert_eq!(f.vlan_count(), 1);
        assert_eq!(f.outer_tpid(), Some(ethertype::VLAN));
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(f.pcp(), Some(5));
        assert_eq!(f.dei(), Some(false));
        assert_eq!(f.inner_vlan_id(), None);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0x45, 0x00, 0x00, 0x14]);
    }

    #[test]
    fn double_tag() {
        let f = Frame::new_checked(&QINQ_FRAME[..]).unwrap();
        assert_eq!(f.vlan_count(), 2);
        assert_eq!(f.outer_tpid(), Some(ethertype::QINQ));
        assert_eq!(f.vlan_id(), Some(200));
        assert_eq!(f.pcp(), Some(3));
        assert_eq!(f.dei(), Some(true));
        assert_eq!(f.inner_vlan_id(), Some(100));
        assert_eq!(f.ethertype(), ethertype::IPV6);
        assert_eq!(f.header_len(), 22);
        assert_eq!(f.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn three_tags_unsupported() {
        let mut b = [0u8; 30];
        b[12..14].copy_from_slice(&[0x88, 0xa8]);
        b[16..18].copy_from_slice(&[0x81, 0x00]);
        b[20..22].copy_from_slice(&[0x81, 0x00]);
        b[24..26].copy_from_slice(&[0x08, 0x00]);
        assert!(matches!(
            Frame::new_checked(&b[..]),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Frame::new_checked(&ARP_FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
        // Tag announced but inner EtherType missing.
        assert_eq!(
            Frame::new_checked(&VLAN_FRAME[..17]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Frame::new_checked(&QINQ_FRAME[..21]).unwrap_err(),
            Error::Truncated
        );
        assert!(Frame::new_checked(&VLAN_FRAME[..18]).is_ok());
    }

    #[test]
    fn setters() {
        let mut b = QINQ_FRAME;
        let mut f = Frame::new_checked(&mut b[..]).unwrap();
        f.set_vlan_id(0xfff5).unwrap();
        f.set_pcp(6).unwrap();
        f.set_src_addr(MacAddr([2, 0, 0, 0, 0, 1]));
        f.set_dst_addr(MacAddr::BROADCAST);
        assert_eq!(f.vlan_id(), Some(0xff5));
        assert_eq!(f.pcp(), Some(6));
        assert_eq!(f.dei(), Some(true));
        assert_eq!(f.inner_vlan_id(), Some(100));
        assert_eq!(f.src_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert!(f.dst_addr().is_multicast());
        f.payload_mut()[0] = 0x6f;
        assert_eq!(b[22], 0x6f);

        let mut a = ARP_FRAME;
        let mut f = Frame::new_checked(&mut a[..]).unwrap();
        assert!(f.set_vlan_id(5).is_err());
        assert!(f.set_pcp(5).is_err());
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = Frame::new_checked(&data[..]) {
                let _ = (f.dst_addr(), f.src_addr(), f.vlan_id(), f.pcp(), f.dei());
                let _ = (f.inner_vlan_id(), f.outer_tpid(), f.ethertype());
                prop_assert_eq!(f.payload().len() + f.header_len(), data.len());
            }
        }
    }
}
