//! The smallest topology: two hosts joined by one veth pair, nothing between them — the
//! calibration path of the fidelity lab (seed 002 Tables I–II) and of the agents' tests.
//!
//! ```text
//!   snd eth0 (SND/24) ──────────────── eth0 rcv (RCV/24)
//! ```

use std::net::Ipv4Addr;

use super::bridge::BridgeTopo;
use super::link::{add_addr, link_veth, set_up, wait_link_up};
use super::netns::Netns;
use crate::Result;

/// A sender and a receiver namespace joined by one veth pair (`eth0` in both).
#[derive(Debug)]
pub struct VethPair {
    /// The sender host.
    pub snd: Netns,
    /// The receiver host.
    pub rcv: Netns,
}

impl VethPair {
    /// Namespaces `{label}-snd` and `{label}-rcv` with the addresses of a [`BridgeTopo`]
    /// (sender [`BridgeTopo::SND_ADDR`], receiver [`BridgeTopo::RCV_ADDR`]).
    pub fn new(label: &str) -> Result<VethPair> {
        Self::with_addrs(label, BridgeTopo::SND_ADDR, BridgeTopo::RCV_ADDR)
    }

    /// Namespaces `{label}-snd` and `{label}-rcv`, `snd/24` and `rcv/24` on their `eth0`;
    /// returns once both ends are operationally up. On error, whatever was made is removed.
    pub fn with_addrs(label: &str, snd_addr: Ipv4Addr, rcv_addr: Ipv4Addr) -> Result<VethPair> {
        let snd = Netns::new(&format!("{label}-snd"))?;
        let rcv = Netns::new(&format!("{label}-rcv"))?;
        link_veth(&snd, "eth0", &rcv, "eth0")?;
        add_addr(&snd, "eth0", &format!("{snd_addr}/24"))?;
        add_addr(&rcv, "eth0", &format!("{rcv_addr}/24"))?;
        set_up(&snd, "eth0")?;
        set_up(&rcv, "eth0")?;
        wait_link_up(&snd, "eth0", BridgeTopo::LINK_UP_TIMEOUT)?;
        wait_link_up(&rcv, "eth0", BridgeTopo::LINK_UP_TIMEOUT)?;
        Ok(VethPair { snd, rcv })
    }

    /// The two namespaces' names.
    pub fn namespace_names(&self) -> Vec<String> {
        vec![self.snd.name().to_string(), self.rcv.name().to_string()]
    }
}
