//! Top talkers: the connections that moved the most bytes, found by sweeping the
//! connection table a bounded number of slots at a time (for `weir stats`, the live page).
//!
//! Scanning the whole table at once would cost the forwarding thread a pause
//! proportional to its capacity (65,536 slots by default, several MB). Instead
//! [`Talkers::sweep`] visits at most `max` slots per call from a hand that goes round the
//! table, keeps the `n` largest connections of the round in a small sorted list, and when
//! the hand wraps publishes that list as the result ([`Talkers::top`]) and starts the
//! next round. With the bridge's one call a second and `max` = 8,192, a default table
//! is swept every 8 s.
//!
//! Invariants: `round` holds at most `n` entries, in decreasing bytes; [`Talkers::top`]
//! is the best `n` of the last complete round (connections that came or went during a
//! round may be missed or reported with the bytes they had when the hand passed).
//! Cost per call: O(max · n) compares on a list of `n` ≤ 20, no allocation after the
//! first rounds.

use super::ConnTable;
use crate::flow::Side;
use crate::time::Instant;
use core::net::SocketAddr;
use serde::{Deserialize, Serialize};

/// One connection among the top talkers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Talker {
    /// IP protocol number (6 TCP, 17 UDP, …).
    pub proto: u8,
    /// The originator (who sent the first packet) and the other end (`address:port` in
    /// JSON).
    pub orig: SocketAddr,
    pub reply: SocketAddr,
    /// Bytes each way: originator → other end, and back.
    pub bytes_orig: u64,
    pub bytes_reply: u64,
    /// Seconds since its first packet.
    pub age_s: f64,
    /// TCP: the smoothed end-to-end RTT (the sum of the two halves' smoothed RTTs, as
    /// the hand passed), ms; `None` for other protocols and before both halves have a
    /// sample.
    #[serde(default)]
    pub rtt_ms: Option<f64>,
    /// TCP: the least end-to-end RTT (the sum of the halves' minima), ms.
    #[serde(default)]
    pub rtt_min_ms: Option<f64>,
}

impl Talker {
    pub fn bytes(&self) -> u64 {
        self.bytes_orig + self.bytes_reply
    }
}

/// See the module comment.
#[derive(Clone, Debug)]
pub struct Talkers {
    n: usize,
    hand: usize,
    /// The best of this round, most bytes first.
    round: Vec<Talker>,
    top: Vec<Talker>,
}

impl Talkers {
    /// Keep the `n` top talkers.
    pub fn new(n: usize) -> Talkers {
        Talkers {
            n,
            hand: 0,
            round: Vec::with_capacity(n + 1),
            top: Vec::new(),
        }
    }

    /// Visit up to `max` slots of `t` from the hand (see the module comment).
    pub fn sweep(&mut self, t: &ConnTable, max: usize, now: Instant) {
        let cap = t.conns.len();
        if cap == 0 || self.n == 0 {
            return;
        }
        for _ in 0..max.min(cap) {
            let slot = self.hand;
            self.hand += 1;
            let c = &t.conns[slot];
            if !c.key.is_free() {
                let bytes = c.bytes[0] + c.bytes[1];
                let worst = self.round.last().map_or(0, Talker::bytes);
                if self.round.len() < self.n || bytes > worst {
                    let (o, r) = (c.orig(), c.reply());
                    let ms = |d: Option<crate::time::Duration>| d.map(|d| d.0 as f64 / 1e6);
                    let talker = Talker {
                        proto: c.proto(),
                        orig: SocketAddr::new(o.0, o.1),
                        reply: SocketAddr::new(r.0, r.1),
                        bytes_orig: c.bytes(Side::Orig),
                        bytes_reply: c.bytes(Side::Reply),
                        age_s: now.saturating_since(c.first_seen).as_secs_f64(),
                        rtt_ms: ms(c.tcp().and_then(|t| t.srtt_total())),
                        rtt_min_ms: ms(c.tcp().and_then(|t| t.rtt_min_total())),
                    };
                    let at = self.round.partition_point(|x| x.bytes() >= bytes);
                    self.round.insert(at, talker);
                    self.round.truncate(self.n);
                }
            }
            if self.hand == cap {
                self.hand = 0;
                std::mem::swap(&mut self.top, &mut self.round);
                self.round.clear();
            }
        }
    }

    /// The top talkers of the last complete round, most bytes first.
    pub fn top(&self) -> &[Talker] {
        &self.top
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::ConnConfig;
    use crate::flow::FlowKey;
    use crate::time::Duration;
    use core::net::Ipv4Addr;

    fn key(port: u16) -> FlowKey {
        FlowKey::v4(
            Ipv4Addr::new(10, 0, 0, 1),
            port,
            Ipv4Addr::new(10, 0, 0, 2),
            80,
            6,
        )
    }

    /// Eight connections of 100, 200, … 800 bytes in a 16-slot table: a round of 16 slots
    /// swept 5 at a time finds the best three once the hand wraps (the 4th call), not before.
    #[test]
    fn a_round_finds_the_largest() {
        let mut t = ConnTable::new(ConnConfig {
            capacity: 16,
            ..ConnConfig::default()
        })
        .unwrap();
        let now = Instant::ZERO + Duration::from_secs(1);
        for i in 1..=8u16 {
            let (id, side) = t.lookup_or_insert(&key(1000 + i), Instant::ZERO).unwrap();
            assert_eq!(side, Side::Orig);
            t.observe(id, Side::Orig, 60 * i as u32, now);
            t.observe(id, Side::Reply, 40 * i as u32, now);
        }
        let mut k = Talkers::new(3);
        for _ in 0..3 {
            k.sweep(&t, 5, now);
            assert!(k.top().is_empty(), "a round is 16 slots");
        }
        k.sweep(&t, 5, now);
        let top: Vec<(u64, String)> = k
            .top()
            .iter()
            .map(|x| (x.bytes(), x.orig.to_string()))
            .collect();
        assert_eq!(
            top,
            vec![
                (800, "10.0.0.1:1008".to_string()),
                (700, "10.0.0.1:1007".to_string()),
                (600, "10.0.0.1:1006".to_string())
            ]
        );
        let best = &k.top()[0];
        assert_eq!(
            (best.bytes_orig, best.bytes_reply, best.proto),
            (480, 320, 6)
        );
        assert_eq!(best.reply.to_string(), "10.0.0.2:80");
        assert!((best.age_s - 1.0).abs() < 1e-9);
        assert_eq!(
            (best.rtt_ms, best.rtt_min_ms),
            (None, None),
            "no TCP segment seen"
        );
    }

    /// A TCP connection's RTT: handshake halves of 10 ms (SYN → SYN-ACK) and 20 ms
    /// (SYN-ACK → ACK), then a reply-half sample of 18 ms: srtt 10 + (18 - 10) / 8 = 11,
    /// so 31 ms end to end, least 30 ms.
    #[test]
    fn tcp_talkers_carry_their_rtt() {
        use crate::conn::Segment;
        use weir_wire::tcp::TcpFlags;
        let mut t = ConnTable::new(ConnConfig {
            capacity: 4,
            ..ConnConfig::default()
        })
        .unwrap();
        let ms = |n: u64| Instant::ZERO + Duration::from_millis(n);
        let seg = |flags: TcpFlags, seq, ack, payload_len| Segment {
            flags,
            seq,
            ack,
            window: 1000,
            payload_len,
            ..Segment::default()
        };
        let (id, _) = t.lookup_or_insert(&key(1), ms(0)).unwrap();
        let synack = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
        t.observe_segment(id, Side::Orig, &seg(TcpFlags::SYN, 100, 0, 0), ms(0));
        t.observe_segment(id, Side::Reply, &seg(synack, 500, 101, 0), ms(10));
        t.observe_segment(id, Side::Orig, &seg(TcpFlags::ACK, 101, 501, 0), ms(30));
        t.observe_segment(id, Side::Orig, &seg(TcpFlags::ACK, 101, 501, 1000), ms(40));
        let o = t.observe_segment(id, Side::Reply, &seg(TcpFlags::ACK, 501, 1101, 0), ms(58));
        assert_eq!(o.rtt_sample, Some(Duration::from_millis(18)));
        assert_eq!(o.rtt_total, Some(Duration::from_millis(38)), "18 + 20");
        let s = t.stats();
        assert_eq!((s.rtt_samples, s.rtt_end_to_end), (3, 2));
        let mut k = Talkers::new(1);
        k.sweep(&t, 4, ms(60));
        let x = &k.top()[0];
        assert_eq!((x.rtt_ms, x.rtt_min_ms), (Some(31.0), Some(30.0)));
    }
}
