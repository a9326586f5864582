//! # weir-wire
//!
//! Zero-copy parsing and in-place editing of the packet headers a bandwidth
//! manager needs to look at: Ethernet (with up to two 802.1Q / 802.1ad VLAN
//! tags), IPv4, IPv6 (with extension-header walking), TCP (with options),
//! UDP, ICMPv4 and ICMPv6, plus the Internet checksum (RFC 1071) and its
//! incremental update (RFC 1624), and ECN congestion marking of a frame ([`ecn`]).
//!
//! The style follows smoltcp's `wire` module: every protocol has a view type
//! `Packet<T: AsRef<[u8]>>` (or [`ethernet::Frame`]) over a borrowed or owned
//! buffer. The only constructor, `new_checked`, validates all length fields
//! once; afterwards every accessor is infallible and cannot panic. Setters are
//! available when `T: AsMut<[u8]>`; none of them can change a length field, so
//! the validated invariants hold for the lifetime of the view. Setters that
//! touch checksummed fields keep the checksum valid by incremental update.
//!
//! Nothing here allocates, reads a clock, or panics on any input: malformed or
//! truncated input yields an [`Error`].
//!
//! For classification, [`parse_frame`] does a one-shot parse of a whole
//! Ethernet frame into a small `Copy` summary ([`Parsed`]). The [`build`]
//! module writes valid frames (for tests, the simulator and the testbed).
//!
//! ```
//! use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
//! use weir_wire::{parse_frame, tcp};
//!
//! // A SYN announcing MSS 1460.
//! let mut frame = [0u8; 128];
//! let spec = TcpSpec { mss: Some(1460), flags: tcp::TcpFlags::SYN, ..TcpSpec::default() };
//! let ip = Ipv4Spec::default();
//! let n = build::tcp_v4_frame(&mut frame, &EthSpec::default(), &ip, &spec, &[]).unwrap();
//!
//! // Classify it, then clamp the MSS in place; the checksum stays valid.
//! let p = parse_frame(&frame[..n]).unwrap();
//! assert!(p.tcp_flags.unwrap().contains(tcp::TcpFlags::SYN));
//! let l4 = p.l4_offset.unwrap();
//! let mut seg = tcp::Packet::new_checked(&mut frame[l4..p.l3_end]).unwrap();
//! if seg.mss_option().is_some_and(|m| m > 1400) {
//!     assert_eq!(seg.set_mss_option(1400), Ok(Some(1460)));
//! }
//! assert!(seg.verify_checksum(ip.src.into(), ip.dst.into()));
//! ```
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod arp;
pub mod build;
pub mod checksum;
pub mod ecn;
mod error;
pub mod ethernet;
pub mod fixup;
pub mod gso;
pub mod icmp;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mss;
pub mod parse;
pub mod pmtu;
pub mod tcp;
pub mod udp;
pub mod vnet;

pub use error::{Error, Result};
pub use parse::{parse_frame, Parsed};

/// Big-endian field access. Callers guarantee bounds (checked by `new_checked`).
pub(crate) mod field {
    #[inline]
    pub fn rd16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    #[inline]
    pub fn rd32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    #[inline]
    pub fn wr16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline]
    pub fn wr32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}
