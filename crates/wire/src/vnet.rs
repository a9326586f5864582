//! The virtio-net header (`struct virtio_net_hdr`, virtio spec 1.2 §5.1.6; Linux
//! `include/uapi/linux/virtio_net.h`) that an AF_PACKET socket with `PACKET_VNET_HDR`
//! puts in front of every received frame, and that tap/virtio devices exchange.
//!
//! It tells what the sender left for a device to do:
//! - `flags & F_NEEDS_CSUM`: the L4 checksum is partial (`CHECKSUM_PARTIAL`): the field at
//!   `csum_start + csum_offset` holds the pseudo-header sum, and the device must add the
//!   one's-complement sum of everything from `csum_start` to the end of the frame
//!   (see [`crate::fixup::complete_partial_checksum`]).
//! - `gso_type != GSO_NONE`: the frame is a super-packet of up to 64 KB that a device must
//!   cut into segments of `gso_size` payload bytes (see [`crate::gso`]).
//!
//! Layout (10 bytes, no padding): flags u8, gso_type u8, hdr_len u16, gso_size u16,
//! csum_start u16, csum_offset u16. Packet sockets use the legacy virtio byte order, which
//! is the host's own (`vio_le()` in `af_packet.c` is true exactly on little-endian hosts),
//! so the 16-bit fields are read in native byte order.
//!
//! Nothing here trusts the header: [`VnetHdr::parse`] only splits the bytes; the users
//! check every offset against the frame (a peer, a tap or a bug may send anything).

use crate::{Error, Result};

/// Length of `struct virtio_net_hdr` (without the `num_buffers` of the mergeable variant).
pub const LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` is partial.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was verified by the sender's side.
pub const F_DATA_VALID: u8 = 2;

/// `gso_type` values.
pub mod gso_type {
    /// Not a super-packet.
    pub const NONE: u8 = 0;
    /// TCP over IPv4 (TSO).
    pub const TCPV4: u8 = 1;
    /// UDP fragmentation offload (UFO: one datagram cut into IP fragments; gone from
    /// Linux since 4.14).
    pub const UDP: u8 = 3;
    /// TCP over IPv6 (TSO).
    pub const TCPV6: u8 = 4;
    /// UDP segmentation offload (USO, `UDP_SEGMENT`): one datagram per segment.
    pub const UDP_L4: u8 = 5;
    /// Flag: the sender used ECN (CWR stays on the first segment only).
    pub const ECN: u8 = 0x80;
}

/// A parsed virtio-net header. Fields are as the sender wrote them: unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`.
    pub flags: u8,
    /// One of [`gso_type`], possibly with [`gso_type::ECN`].
    pub gso_type: u8,
    /// Length of the headers (advisory; segmentation reads the headers themselves).
    pub hdr_len: u16,
    /// Payload bytes per segment (the MSS for TCP).
    pub gso_size: u16,
    /// Where the checksummed region starts, from the start of the frame.
    pub csum_start: u16,
    /// Where the checksum field is, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Split the first [`LEN`] bytes of `b` into the header's fields.
    pub fn parse(b: &[u8]) -> Result<VnetHdr> {
        let b = b.get(..LEN).ok_or(Error::Truncated)?;
        let rd = |at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: rd(2),
            gso_size: rd(4),
            csum_start: rd(6),
            csum_offset: rd(8),
        })
    }

    /// Write the header into the first [`LEN`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let out = out.get_mut(..LEN).ok_or(Error::BufferTooSmall)?;
        out[0] = self.flags;
        out[1] = self.gso_type;
        for (at, v) in [
            (2, self.hdr_len),
            (4, self.gso_size),
            (6, self.csum_start),
            (8, self.csum_offset),
        ] {
            out[at..at + 2].copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    }

    /// The GSO type without the ECN flag.
    #[inline]
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !gso_type::ECN
    }

    /// Whether the frame is a super-packet that must be segmented.
    #[inline]
    pub fn is_gso(&self) -> bool {
        self.gso_kind() != gso_type::NONE
    }

    /// Whether the L4 checksum is partial and must be completed.
    #[inline]
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_emit_round_trip() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: gso_type::TCPV4 | gso_type::ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let mut b = [0u8; LEN];
        h.emit(&mut b).unwrap();
        assert_eq!(VnetHdr::parse(&b).unwrap(), h);
        assert_eq!(h.gso_kind(), gso_type::TCPV4);
        assert!(h.is_gso() && h.needs_csum());
        assert_eq!(VnetHdr::parse(&b[..9]), Err(Error::Truncated));
        assert_eq!(h.emit(&mut [0u8; 9]), Err(Error::BufferTooSmall));
        // native byte order, as the kernel writes it for packet sockets
        assert_eq!(&b[4..6], &1448u16.to_ne_bytes());
        assert!(!VnetHdr::default().is_gso());
    }
}
