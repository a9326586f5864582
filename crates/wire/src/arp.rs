//! ARP for IPv4 over Ethernet (RFC 826): the 28-byte message that follows an Ethernet
//! header of type 0x0806 — hardware type 1, protocol type 0x0800, lengths 6 and 4, the
//! operation (1 request, 2 reply), and the sender's and target's MAC and IPv4 addresses.
//!
//! [`Packet`] views such a message (the Ethernet payload) and [`frame`] writes a whole
//! frame: weir's adaptive controllers use them to answer for the address their probes
//! come from and to learn the probed router's MAC address.

use core::net::Ipv4Addr;

use crate::ethernet::{self, ethertype, MacAddr};
use crate::field::{rd16, wr16};
use crate::{Error, Result};

/// Length of an ARP message for IPv4 over Ethernet.
pub const LEN: usize = 28;
/// Operation: request ("who has TPA? tell SPA").
pub const REQUEST: u16 = 1;
/// Operation: reply ("SPA is at SHA").
pub const REPLY: u16 = 2;

const HTYPE: usize = 0;
const PTYPE: usize = 2;
const HLEN: usize = 4;
const PLEN: usize = 5;
const OPER: usize = 6;
const SHA: usize = 8;
const SPA: usize = 14;
const THA: usize = 18;
const TPA: usize = 24;

/// A view of an ARP message for IPv4 over Ethernet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates length and the fixed fields. Errors: [`Error::Truncated`] if shorter
    /// than 28 bytes, [`Error::Unsupported`] for another hardware or protocol type.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        if rd16(b, HTYPE) != 1 || rd16(b, PTYPE) != ethertype::IPV4 || b[HLEN] != 6 || b[PLEN] != 4
        {
            return Err(Error::Unsupported("ARP for other than IPv4 over Ethernet"));
        }
        Ok(Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The operation ([`REQUEST`], [`REPLY`], or another value).
    pub fn operation(&self) -> u16 {
        rd16(self.b(), OPER)
    }

    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        MacAddr(self.b()[SHA..SHA + 6].try_into().unwrap_or([0; 6]))
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip4(&self.b()[SPA..SPA + 4])
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        MacAddr(self.b()[THA..THA + 6].try_into().unwrap_or([0; 6]))
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        ip4(&self.b()[TPA..TPA + 4])
    }
}

fn ip4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// What an ARP frame says: operation, sender (MAC, IP), target (MAC, IP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpSpec {
    /// [`REQUEST`] or [`REPLY`].
    pub operation: u16,
    /// Sender hardware and protocol address.
    pub sender: (MacAddr, Ipv4Addr),
    /// Target hardware and protocol address (the MAC is zero in a request).
    pub target: (MacAddr, Ipv4Addr),
}

impl ArpSpec {
    /// "Who has `ip`? Tell `me`": a request from `me`, sent to the broadcast address.
    pub fn request(me: (MacAddr, Ipv4Addr), ip: Ipv4Addr) -> ArpSpec {
        ArpSpec {
            operation: REQUEST,
            sender: me,
            target: (MacAddr([0; 6]), ip),
        }
    }

    /// The reply `me` gives to the request `req` (sent to its sender).
    pub fn reply_to<T: AsRef<[u8]>>(me: (MacAddr, Ipv4Addr), req: &Packet<T>) -> ArpSpec {
        ArpSpec {
            operation: REPLY,
            sender: me,
            target: (req.sender_mac(), req.sender_ip()),
        }
    }
}

/// Writes a whole untagged Ethernet frame carrying `arp`, padded to the 60-byte minimum:
/// to the broadcast address for a request, to the target for a reply. Returns its length
/// (60). Errors: [`Error::BufferTooSmall`].
pub fn frame(buf: &mut [u8], arp: &ArpSpec) -> Result<usize> {
    const MIN: usize = 60;
    let b = buf.get_mut(..MIN).ok_or(Error::BufferTooSmall)?;
    b.fill(0);
    let dst = if arp.operation == REQUEST {
        MacAddr::BROADCAST
    } else {
        arp.target.0
    };
    b[0..6].copy_from_slice(&dst.0);
    b[6..12].copy_from_slice(&arp.sender.0 .0);
    wr16(b, 12, ethertype::ARP);
    let m = &mut b[ethernet::HEADER_LEN..];
    wr16(m, HTYPE, 1);
    wr16(m, PTYPE, ethertype::IPV4);
    m[HLEN] = 6;
    m[PLEN] = 4;
    wr16(m, OPER, arp.operation);
    m[SHA..SHA + 6].copy_from_slice(&arp.sender.0 .0);
    m[SPA..SPA + 4].copy_from_slice(&arp.sender.1.octets());
    m[THA..THA + 6].copy_from_slice(&arp.target.0 .0);
    m[TPA..TPA + 4].copy_from_slice(&arp.target.1.octets());
    Ok(MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as tcpdump shows it: "who-has 192.168.1.1 tell 192.168.1.100", from
    /// 00:11:22:33:44:55.
    const REQ: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // htype, ptype, hlen, plen, request
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 192, 168, 1, 100, // sender
        0, 0, 0, 0, 0, 0, 192, 168, 1, 1, // target
    ];

    #[test]
    fn parses_a_request() {
        let p = Packet::new_checked(&REQ[..]).unwrap();
        assert_eq!(p.operation(), REQUEST);
        assert_eq!(
            p.sender_mac(),
            MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55])
        );
        assert_eq!(p.sender_ip(), Ipv4Addr::new(192, 168, 1, 100));
        assert_eq!(p.target_ip(), Ipv4Addr::new(192, 168, 1, 1));
    }

    #[test]
    fn refuses_short_and_foreign_messages() {
        assert_eq!(
            Packet::new_checked(&REQ[..27]).err(),
            Some(Error::Truncated)
        );
        let mut other = REQ;
        other[3] = 0xdd; // IPv6 protocol type
        assert!(matches!(
            Packet::new_checked(&other[..]),
            Err(Error::Unsupported(_))
        ));
    }

    /// The request weir would send is byte for byte the fixture, after a broadcast
    /// Ethernet header and before the padding; the reply to it swaps the roles.
    #[test]
    fn writes_request_and_reply_frames() {
        let me = (
            MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]),
            Ipv4Addr::new(192, 168, 1, 100),
        );
        let mut buf = [0xaa; 64];
        let n = frame(
            &mut buf,
            &ArpSpec::request(me, Ipv4Addr::new(192, 168, 1, 1)),
        )
        .unwrap();
        assert_eq!(n, 60);
        assert_eq!(&buf[..6], &[0xff; 6]);
        assert_eq!(&buf[6..12], &me.0 .0);
        assert_eq!(&buf[12..14], &[0x08, 0x06]);
        assert_eq!(&buf[14..42], &REQ[..]);
        assert!(buf[42..60].iter().all(|&b| b == 0));

        let router = (MacAddr([2, 0, 0, 0, 0, 1]), Ipv4Addr::new(192, 168, 1, 1));
        let req = Packet::new_checked(&REQ[..]).unwrap();
        let n = frame(&mut buf, &ArpSpec::reply_to(router, &req)).unwrap();
        let rep = Packet::new_checked(&buf[14..n]).unwrap();
        assert_eq!(&buf[..6], &me.0 .0);
        assert_eq!(rep.operation(), REPLY);
        assert_eq!((rep.sender_mac(), rep.sender_ip()), router);
        assert_eq!((rep.target_mac(), rep.target_ip()), me);
        assert_eq!(
            frame(&mut [0u8; 59], &ArpSpec::request(me, me.1)),
            Err(Error::BufferTooSmall)
        );
    }
}
