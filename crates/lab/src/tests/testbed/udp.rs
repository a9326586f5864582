//! Constant-rate UDP flows beside a plan's TCP sessions (background load: seed 001's
//! "unbounded best effort UDP traffic"), and the receiver's per-flow DSCP counts.
//!
//! A [`UdpPlan`] is sent by the CBR agent ([`crate::agents::cbr`]: frames of a fixed size
//! at a fixed packet rate, paced) from its own source address to a UDP port of the
//! receiver, where a CBR sink reads it; [`UdpOutcome`] is what was sent and what arrived.
//! With [`super::Plan::count_dscp`], a [`DscpCounter`] on the receiver's interface adds up
//! the payload and IP bytes of every flow per DSCP over the whole run; [`DscpBytes`] are
//! one flow's non-zero entries.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agents::cbr::{CbrSenderOpts, CbrSinkOpts};
use crate::agents::DscpCounts;
use crate::topo::BridgeTopo;

/// A constant-rate UDP flow from `src` to the receiver's UDP `port`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpPlan {
    pub name: String,
    /// The class the policy should put it in (checked, as UDP to `port`).
    pub class: String,
    pub src: Ipv4Addr,
    pub port: u16,
    /// Rate, bit/s of Ethernet frames (without FCS).
    pub rate_bps: u64,
    /// Ethernet frame size, bytes (without FCS; 60..=1514).
    pub frame: usize,
    /// Start and stop, seconds after the receiver starts.
    pub start_s: f64,
    pub stop_s: f64,
}

impl UdpPlan {
    /// Packets per second.
    pub fn pps(&self) -> f64 {
        self.rate_bps as f64 / (self.frame as f64 * 8.0)
    }

    /// The receiver's address.
    pub fn dst(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), self.port)
    }

    /// The flow id the sender writes and the sink filters on: "UDP" and the plan's index.
    fn flow(index: usize) -> u32 {
        u32::from_be_bytes(*b"UDP\0") | index as u32
    }

    /// The receiver's sink settings (started here or on a real host).
    pub(super) fn sink_opts(&self, index: usize) -> CbrSinkOpts {
        let mut o = CbrSinkOpts::new(self.dst(), Some(Self::flow(index)));
        o.rcvbuf = 4 << 20;
        o
    }

    /// The sender's settings (the run sends them with [`super::send_cbr`]).
    pub(super) fn sender(&self, index: usize) -> CbrSenderOpts {
        let mut o = CbrSenderOpts::new(self.dst(), self.pps(), self.frame);
        o.src = Some(SocketAddr::new(IpAddr::V4(self.src), 0));
        o.flow = Self::flow(index);
        o.duration = Some(Duration::from_secs_f64(self.stop_s - self.start_s));
        o.sndbuf = Some(1 << 20);
        o
    }
}

/// What one UDP flow sent and what the receiver got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpOutcome {
    pub name: String,
    pub class: String,
    pub src: Ipv4Addr,
    /// Packets the sender tried to send.
    pub sent: u64,
    /// Distinct packets the sink received, and the frame bytes they make.
    pub received: u64,
    pub frame_bytes: u64,
    /// DSCP counts at the receiver's interface (with `count_dscp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<DscpBytes>,
    pub error: Option<String>,
}

/// One DSCP's share of a flow at the receiver's interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DscpBytes {
    pub dscp: u8,
    /// Transport payload bytes (TCP/UDP data, retransmissions included).
    pub payload: u64,
    /// IP bytes (headers included).
    pub ip: u64,
}

impl DscpBytes {
    /// The non-zero entries of `c`, by DSCP.
    pub fn of(c: &DscpCounts) -> Vec<DscpBytes> {
        (0..64)
            .filter(|&d| c.ip_bytes[d] > 0)
            .map(|d| DscpBytes {
                dscp: d as u8,
                payload: c.payload_bytes[d],
                ip: c.ip_bytes[d],
            })
            .collect()
    }

    /// Payload bytes carried with one of `dscps` in `v`.
    pub fn payload_of(v: &[DscpBytes], dscps: &[u8]) -> u64 {
        v.iter()
            .filter(|b| dscps.contains(&b.dscp))
            .map(|b| b.payload)
            .sum()
    }

    /// Payload bytes over every DSCP in `v`.
    pub fn payload_total(v: &[DscpBytes]) -> u64 {
        v.iter().map(|b| b.payload).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_is_its_rate_in_frames() {
        let u = UdpPlan {
            name: "be".into(),
            class: "be".into(),
            src: Ipv4Addr::new(10, 77, 4, 1),
            port: 9000,
            rate_bps: 10_000_000,
            frame: 1250,
            start_s: 0.0,
            stop_s: 1.0,
        };
        assert_eq!(u.pps(), 1000.0);
        assert_eq!(u.dst().to_string(), "10.77.0.2:9000");
        assert_ne!(UdpPlan::flow(0), UdpPlan::flow(1));
    }

    #[test]
    fn dscp_bytes_keep_the_non_zero_entries() {
        let mut c = DscpCounts::default();
        c.ip_bytes[10] = 1540;
        c.payload_bytes[10] = 1448;
        c.ip_bytes[14] = 100;
        c.payload_bytes[14] = 48;
        let v = DscpBytes::of(&c);
        assert_eq!(v.len(), 2);
        assert_eq!(DscpBytes::payload_of(&v, &[10]), 1448);
        assert_eq!(DscpBytes::payload_of(&v, &[12, 14]), 48);
        assert_eq!(DscpBytes::payload_total(&v), 1496);
    }
}
