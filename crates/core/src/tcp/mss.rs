//! MSS clamping in the device (seed 000 "MSS-Clamping": Sitara QoSWorks lowers the MSS a
//! TCP connection negotiates so that one full-size segment of a bulk transfer holds a
//! narrow link for less time — G.729 voice over 125 kbit/s became good only with FTP's
//! MSS clamped to 256 bytes).
//!
//! Which cap applies: a policy gives a cap per class or per rule (`mss = 256`, or
//! `"pmtu"`: the link's IP MTU minus the IP and TCP headers). The connection's *first SYN*
//! decides: it is classified like any packet and the cap of its rule (else of its class)
//! is stored in the connection table entry ([`TcpConn::set_mss_cap`](crate::conn::TcpConn)).
//! The SYN-ACK, which travels the other direction and is classified by that direction's
//! rules, gets the connection's cap, so both ends learn the lower MSS and the connection
//! carries small segments both ways (the data direction is usually the SYN-ACK's sender,
//! e.g. an FTP server). A SYN-ACK of a connection whose SYN weir did not see gets its own
//! class's cap, if any.
//!
//! The frame is edited in place by [`weir_wire::mss::clamp_mss`] (lowered, never raised;
//! an option inserted when absent and there is room; incremental checksums); the packet's
//! length follows an insertion. Counters: SYNs lowered, kept (already at or below the
//! cap), inserted, and skipped by named cause.
//!
//! Parameters: `cap`, bytes of TCP payload per segment, [`MIN_MSS`] (88) ..= 65,495
//! (65,535 − 20 − 20), checked by the policy.

use crate::pool::{PktId, Pool};
use serde::Serialize;
use weir_wire::mss::{clamp_mss, MssAction, MssSkip};
pub use weir_wire::mss::{DEFAULT_MSS_V4, DEFAULT_MSS_V6, MIN_MSS};

/// The MSS caps of a policy, resolved to bytes (by class and rule ids of the policy's pipelines).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MssTable {
    /// By class id (inherited from ancestors): `(IPv4 cap, IPv6 cap)`.
    pub by_class: Vec<Option<(u16, u16)>>,
    /// By rule index: wins over the class's.
    pub by_rule: Vec<Option<(u16, u16)>>,
}

impl MssTable {
    /// The cap for a packet labelled `class`/`rule` (rule `u16::MAX`: none matched).
    pub fn cap(&self, class: u32, rule: u16, v6: bool) -> Option<u16> {
        let pick = |c: (u16, u16)| if v6 { c.1 } else { c.0 };
        self.by_rule
            .get(rule as usize)
            .copied()
            .flatten()
            .or_else(|| self.by_class.get(class as usize).copied().flatten())
            .map(pick)
    }
}

/// Largest cap: an IPv4 datagram of 65,535 bytes less 20-byte IP and TCP headers.
pub const MAX_MSS: u16 = 65_495;

/// What MSS clamping did, in SYNs (and SYN-ACKs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MssStats {
    /// The option was above the cap and was lowered.
    pub lowered: u64,
    /// The option was already at or below the cap.
    pub kept: u64,
    /// The segment had no option; one was inserted.
    pub inserted: u64,
    /// No option and no room to insert one (header full, payload, buffer).
    pub skipped_no_room: u64,
    /// Headers or options inconsistent with the frame (forwarded unchanged).
    pub skipped_malformed: u64,
}

impl MssStats {
    fn count(&mut self, r: &Result<MssAction, MssSkip>) {
        match r {
            Ok(MssAction::Lowered { .. }) => self.lowered += 1,
            Ok(MssAction::Kept(_)) => self.kept += 1,
            Ok(MssAction::Inserted(_)) => self.inserted += 1,
            Err(MssSkip::HasPayload | MssSkip::HeaderFull | MssSkip::NoRoom) => {
                self.skipped_no_room += 1
            }
            Err(MssSkip::Malformed) => self.skipped_malformed += 1,
            // not counted: not a SYN, not TCP (the caller only offers SYNs; see `clamp`)
            Err(MssSkip::NotSyn | MssSkip::NotTcp) => {}
        }
    }

    /// SYNs that met a cap.
    pub fn total(&self) -> u64 {
        self.lowered + self.kept + self.inserted + self.skipped_no_room + self.skipped_malformed
    }
}

/// Clamp the MSS of packet `pkt` (a TCP SYN or SYN-ACK parsed as `p`) to `cap`, updating
/// its length after an insertion, and count what happened in `stats`.
pub fn clamp(
    pool: &mut Pool,
    pkt: PktId,
    p: &weir_wire::Parsed,
    cap: u16,
    stats: &mut MssStats,
) -> Result<MssAction, MssSkip> {
    let len = pool.len(pkt) as usize;
    let r = clamp_mss(pool.slot_mut(pkt), len, p, cap).map(|c| {
        if c.len != len {
            pool.meta_mut(pkt).len = c.len as u32;
        }
        c.action
    });
    stats.count(&r);
    r
}

/// The cap for packet-size `pmtu`: the link's largest IP packet less the IP and TCP
/// headers (`ip_mtu − 40` for IPv4, `− 60` for IPv6 — the IPv4 figure is what
/// `xt_TCPMSS --clamp-mss-to-pmtu` uses on an IPv4 route).
pub fn pmtu_cap(ip_mtu: u32, v6: bool) -> u16 {
    let hdrs = if v6 { 60 } else { 40 };
    ip_mtu
        .saturating_sub(hdrs)
        .clamp(MIN_MSS as u32, MAX_MSS as u32) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
    use weir_wire::tcp::TcpFlags;

    #[test]
    fn pmtu_caps_follow_the_ip_mtu() {
        // Ethernet: IP MTU 1500 → 1460 (v4), 1440 (v6); a 576-byte path → 536 (RFC 879)
        assert_eq!(pmtu_cap(1500, false), 1460);
        assert_eq!(pmtu_cap(1500, true), 1440);
        assert_eq!(pmtu_cap(576, false), 536);
        assert_eq!(pmtu_cap(68, false), MIN_MSS, "never below the minimum");
    }

    #[test]
    fn clamping_updates_the_packet_length_and_counts() {
        let mut pool = Pool::new(4, 256);
        let mut stats = MssStats::default();
        // a SYN without options: an option is inserted, the packet grows by 4 bytes
        let id = pool.alloc().unwrap();
        let spec = TcpSpec {
            flags: TcpFlags::SYN,
            ..TcpSpec::default()
        };
        let n = build::tcp_v4_frame(
            pool.slot_mut(id),
            &EthSpec::default(),
            &Ipv4Spec::default(),
            &spec,
            &[],
        )
        .unwrap();
        pool.meta_mut(id).len = n as u32;
        let p = weir_wire::parse_frame(pool.data(id)).unwrap();
        assert_eq!(
            clamp(&mut pool, id, &p, 256, &mut stats),
            Ok(MssAction::Inserted(256))
        );
        assert_eq!(pool.len(id) as usize, n + 4);
        let p = weir_wire::parse_frame(pool.data(id)).unwrap();
        assert_eq!(p.l3_end, n + 4);
        // the same SYN again: its option (256) is kept
        assert_eq!(
            clamp(&mut pool, id, &p, 1000, &mut stats),
            Ok(MssAction::Kept(256))
        );
        // lowered
        assert_eq!(
            clamp(&mut pool, id, &p, 200, &mut stats),
            Ok(MssAction::Lowered { from: 256, to: 200 })
        );
        assert_eq!(
            stats,
            MssStats {
                lowered: 1,
                kept: 1,
                inserted: 1,
                ..MssStats::default()
            }
        );
        assert_eq!(stats.total(), 3);
    }
}
