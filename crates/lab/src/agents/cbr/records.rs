//! What a [`CbrSink`](super::CbrSink) received and the statistics over it: one-way delay
//! (`rx − tx`), inter-frame gaps (consecutive kernel receive timestamps), loss against the
//! sender's count, duplicates, reordering, and a [`CbrSummary`] with the seed's
//! percentiles (see the [module documentation](super) for the definitions).

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::stats::dist::DistUs;

/// One received CBR packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CbrRecord {
    /// Sequence number.
    pub seq: u64,
    /// Send time from the header, ns since the Unix epoch.
    pub tx_ns: u64,
    /// Kernel receive timestamp (`SO_TIMESTAMPNS`), ns since the Unix epoch.
    pub rx_ns: u64,
    /// UDP payload bytes (frame = len + 42 over IPv4).
    pub len: u32,
    /// Flow id.
    pub flow: u32,
    /// The IPv4 TOS / IPv6 traffic class byte as received (DSCP << 2 | ECN): the ECN
    /// field shows a CE mark set on the way.
    pub tos: u8,
}

/// What a [`CbrSink`](super::CbrSink) received, in arrival order, and the statistics over
/// it (see the module documentation for the definitions).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CbrRecords {
    /// The address the sink was bound to.
    pub local: SocketAddr,
    /// The flow filter.
    pub flow: Option<u32>,
    /// Per packet, in arrival order.
    pub records: Vec<CbrRecord>,
    /// Datagrams ignored: too short for the header, or of another flow.
    pub ignored: u64,
    /// Datagrams without a kernel timestamp (given the time of reading instead; expected 0).
    pub no_timestamp: u64,
    /// Datagrams the socket dropped (full receive buffer; `SO_RXQ_OVFL`'s counter).
    pub socket_drops: u64,
    /// The receive buffer the kernel granted (`SO_RCVBUF` read back), bytes.
    pub rcvbuf: usize,
    /// An error that stopped the sink early, if any.
    pub error: Option<String>,
}

impl CbrRecords {
    /// Empty records (for tests and synthetic data).
    pub fn new(local: SocketAddr, flow: Option<u32>, records: Vec<CbrRecord>) -> CbrRecords {
        CbrRecords {
            local,
            flow,
            records,
            ignored: 0,
            no_timestamp: 0,
            socket_drops: 0,
            rcvbuf: 0,
            error: None,
        }
    }

    /// Number of records (duplicates included).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was received.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records of one flow (for a sink without a filter).
    pub fn of_flow(&self, flow: u32) -> CbrRecords {
        CbrRecords {
            flow: Some(flow),
            records: self
                .records
                .iter()
                .filter(|r| r.flow == flow)
                .copied()
                .collect(),
            ..self.clone_meta()
        }
    }

    fn clone_meta(&self) -> CbrRecords {
        CbrRecords {
            local: self.local,
            flow: self.flow,
            records: Vec::new(),
            ignored: self.ignored,
            no_timestamp: self.no_timestamp,
            socket_drops: self.socket_drops,
            rcvbuf: self.rcvbuf,
            error: self.error.clone(),
        }
    }

    /// Puts the receive stamps on the sender's clock: the receiving host's clock was
    /// `rcv_ahead_ns` ahead of the sender's (0 on one machine; negative when behind).
    pub fn rx_on_sender_clock(&mut self, rcv_ahead_ns: i64) {
        for r in &mut self.records {
            r.rx_ns = r.rx_ns.wrapping_sub(rcv_ahead_ns as u64);
        }
    }

    /// One-way delay per packet, `rx_ns − tx_ns`, in arrival order.
    pub fn delays_ns(&self) -> Vec<i64> {
        self.records
            .iter()
            .map(|r| r.rx_ns.wrapping_sub(r.tx_ns) as i64)
            .collect()
    }

    /// Inter-frame gaps: differences of consecutive kernel receive timestamps in arrival
    /// order (one fewer than the records).
    pub fn gaps_ns(&self) -> Vec<i64> {
        self.records
            .windows(2)
            .map(|w| w[1].rx_ns.wrapping_sub(w[0].rx_ns) as i64)
            .collect()
    }

    /// Sorted distinct sequence numbers.
    fn distinct_seqs(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.records.iter().map(|r| r.seq).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Distinct sequence numbers received.
    pub fn distinct(&self) -> u64 {
        self.distinct_seqs().len() as u64
    }

    /// Packets missing: `expected` minus the distinct sequence numbers below `expected`
    /// (pass the sender's `attempted`).
    pub fn lost(&self, expected: u64) -> u64 {
        self.lost_between(0, expected)
    }

    /// Packets missing among sequence numbers `from..to` (none when `to <= from`).
    pub fn lost_between(&self, from: u64, to: u64) -> u64 {
        let s = self.distinct_seqs();
        let got = s.partition_point(|&q| q < to) - s.partition_point(|&q| q < from);
        to.saturating_sub(from).saturating_sub(got as u64)
    }

    /// Records beyond the first of each sequence number.
    pub fn duplicates(&self) -> u64 {
        self.records.len() as u64 - self.distinct()
    }

    /// Packets whose sequence number is lower than the largest seen before them.
    pub fn reordered(&self) -> u64 {
        let mut it = self.records.iter();
        let Some(first) = it.next() else { return 0 };
        let mut max = first.seq;
        let mut n = 0;
        for r in it {
            if r.seq < max {
                n += 1;
            } else {
                max = r.seq;
            }
        }
        n
    }

    /// Counts and distributions, given the sender's `attempted` count.
    pub fn summary(&self, expected: u64) -> CbrSummary {
        let s = self.distinct_seqs();
        let distinct = s.len() as u64;
        let lost = expected - s.partition_point(|&q| q < expected) as u64;
        CbrSummary {
            expected,
            received: self.records.len() as u64,
            distinct,
            lost,
            loss_ratio: if expected > 0 {
                lost as f64 / expected as f64
            } else {
                0.0
            },
            duplicates: self.records.len() as u64 - distinct,
            reordered: self.reordered(),
            ignored: self.ignored,
            socket_drops: self.socket_drops,
            delay_us: DistUs::from_ns(&self.delays_ns()),
            ifg_us: DistUs::from_ns(&self.gaps_ns()),
        }
    }
}

/// Loss, ordering and the delay and IFG distributions of one CBR flow.
#[derive(Debug, Clone, Serialize)]
pub struct CbrSummary {
    /// Packets the sender attempted.
    pub expected: u64,
    /// Records (duplicates included).
    pub received: u64,
    /// Distinct sequence numbers.
    pub distinct: u64,
    /// Packets missing.
    pub lost: u64,
    /// `lost / expected` (0 when nothing was expected).
    pub loss_ratio: f64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// Datagrams ignored by the sink (other flows, too short).
    pub ignored: u64,
    /// Datagrams dropped by the sink's socket (receive buffer full).
    pub socket_drops: u64,
    /// One-way delay.
    pub delay_us: DistUs,
    /// Inter-frame gap.
    pub ifg_us: DistUs,
}

impl fmt::Display for CbrSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received {}/{} lost {} ({:.4}%) dup {} reordered {} ignored {} sockdrops {} | \
             delay {} | ifg {}",
            self.distinct,
            self.expected,
            self.lost,
            self.loss_ratio * 100.0,
            self.duplicates,
            self.reordered,
            self.ignored,
            self.socket_drops,
            self.delay_us,
            self.ifg_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::DEFAULT_FLOW;
    use super::*;

    fn rec(seq: u64, tx: u64, rx: u64) -> CbrRecord {
        CbrRecord {
            seq,
            tx_ns: tx,
            rx_ns: rx,
            len: 22,
            flow: DEFAULT_FLOW,
            tos: 0,
        }
    }

    fn records(v: Vec<CbrRecord>) -> CbrRecords {
        CbrRecords::new("127.0.0.1:9".parse().unwrap(), Some(DEFAULT_FLOW), v)
    }

    #[test]
    fn loss_duplicates_reordering() {
        // Sent 0..8. Arrival: 0 1 3 2 2 5 4 7; 6 lost; 2 duplicated; 2 (first) and 4
        // reordered, and the duplicate 2 too (lower than max 3).
        let seqs = [0u64, 1, 3, 2, 2, 5, 4, 7];
        let r = records(
            seqs.iter()
                .enumerate()
                .map(|(i, &s)| rec(s, 1000 * s, 1000 * s + 50 + i as u64))
                .collect(),
        );
        assert_eq!(r.len(), 8);
        assert_eq!(r.distinct(), 7);
        assert_eq!(r.duplicates(), 1);
        assert_eq!(r.lost(8), 1);
        assert_eq!(r.reordered(), 3);
        // A packet beyond `expected` does not reduce the loss count.
        assert_eq!(r.lost(7), 1); // 0..7 expected: 6 missing
        assert_eq!(r.lost(6), 0);
        // a range: 6 is the only gap in 3..8; none in 0..6; an empty range loses nothing
        assert_eq!(r.lost_between(3, 8), 1);
        assert_eq!(r.lost_between(0, 6), 0);
        assert_eq!(r.lost_between(7, 7), 0);
        assert_eq!(r.lost_between(8, 10), 2);
        let s = r.summary(8);
        assert_eq!(
            (
                s.expected,
                s.received,
                s.distinct,
                s.lost,
                s.duplicates,
                s.reordered
            ),
            (8, 8, 7, 1, 1, 3)
        );
        assert!((s.loss_ratio - 0.125).abs() < 1e-12);
        // Empty and in-order cases.
        let e = records(vec![]);
        assert_eq!((e.lost(5), e.duplicates(), e.reordered()), (5, 0, 0));
        assert_eq!(e.summary(0).loss_ratio, 0.0);
        let inorder = records((0..100).map(|s| rec(s, s, s + 1)).collect());
        assert_eq!(
            (inorder.lost(100), inorder.duplicates(), inorder.reordered()),
            (0, 0, 0)
        );
    }

    #[test]
    fn delays_and_gaps() {
        let r = records(vec![
            rec(0, 1_000, 1_010),
            rec(1, 2_000, 2_030),
            rec(2, 3_000, 2_990), // clock went backwards: negative delay
            rec(3, 4_000, 5_000),
        ]);
        assert_eq!(r.delays_ns(), vec![10, 30, -10, 1_000]);
        assert_eq!(r.gaps_ns(), vec![1_020, 960, 2_010]);
        let s = r.summary(4);
        assert_eq!(s.ifg_us.count, 3);
        assert!((s.ifg_us.p50 - 1.02).abs() < 1e-12);
        assert_eq!(s.delay_us.min, -0.01);
        assert!(records(vec![rec(0, 0, 0)]).gaps_ns().is_empty());
    }

    #[test]
    fn flow_split() {
        let mut v = vec![rec(0, 0, 1), rec(1, 0, 2)];
        v.push(CbrRecord {
            flow: 7,
            ..rec(0, 0, 3)
        });
        let r = records(v);
        assert_eq!(r.of_flow(7).len(), 1);
        assert_eq!(r.of_flow(DEFAULT_FLOW).len(), 2);
        assert_eq!(r.of_flow(7).flow, Some(7));
    }
}
