//! RFC 6349's formulas (section 3.3), each on its inputs' units:
//!
//! - **BDP** (3.3.1's first table), bits = bottleneck bandwidth (bit/s) × RTT (s); the
//!   minimum TCP receive window that fills the path is BDP / 8 bytes.
//! - **Maximum achievable TCP throughput** (3.3.1.1): the bottleneck bandwidth's share
//!   that TCP payload can take, BB × payload / (MTU + per-frame overhead). The RFC's
//!   Ethernet example counts the whole wire (8 preamble + 14 header + 4 FCS + 12
//!   inter-frame gap = 38 bytes) and 1460 payload bytes (MTU − 40 of IP and TCP headers):
//!   a gigabit carries 949.3 Mbit/s of TCP payload. The lab measures BB as the DUTs
//!   count it (Ethernet frames without FCS: 14 bytes of overhead) and takes the payload the
//!   connection really carried per segment (its MSS: 1448 with TCP timestamps).
//! - **TCP Transfer Time Ratio** (3.3.1) = actual transfer time / ideal transfer time, the
//!   ideal being the transfer's bytes at the maximum achievable TCP throughput; 1.0 is a
//!   transfer at the maximum from its first byte.
//! - **TCP Efficiency** (3.3.2), % = (transmitted bytes − retransmitted bytes) /
//!   transmitted bytes × 100, transmitted bytes counting the retransmissions (the RFC's
//!   example: 100,000 bytes of data, 2,000 of them sent again: 100,000 / 102,000 = 98.04 %).
//! - **Buffer Delay Percentage** (3.3.3), % = (average RTT during the transfer − baseline
//!   RTT) / baseline RTT × 100 (the RFC's example: 25 ms baseline, 32 ms average: 28 %).

/// Bandwidth-delay product, bits.
pub fn bdp_bits(bb_bps: f64, rtt_s: f64) -> f64 {
    bb_bps * rtt_s
}

/// The smallest TCP receive window that fills the path, bytes (BDP / 8).
pub fn min_rwnd_bytes(bb_bps: f64, rtt_s: f64) -> f64 {
    bdp_bits(bb_bps, rtt_s) / 8.0
}

/// Maximum achievable TCP throughput, bit/s of payload, on a bottleneck of `bb_bps` whose
/// frames are `mtu + overhead` bytes, each carrying `payload` bytes of TCP payload.
pub fn max_tcp_bps(bb_bps: f64, mtu: u32, payload: u32, overhead: u32) -> f64 {
    bb_bps * f64::from(payload) / f64::from(mtu + overhead)
}

/// Ideal TCP transfer time, s: `bytes` at `max_bps`.
pub fn ideal_transfer_s(bytes: u64, max_bps: f64) -> f64 {
    bytes as f64 * 8.0 / max_bps
}

/// TCP Transfer Time Ratio: actual / ideal.
pub fn transfer_time_ratio(actual_s: f64, ideal_s: f64) -> f64 {
    actual_s / ideal_s
}

/// TCP Efficiency, %: `transmitted` bytes (retransmissions included), `retransmitted`
/// of them sent again. `None` when nothing was transmitted.
pub fn tcp_efficiency_pct(transmitted: u64, retransmitted: u64) -> Option<f64> {
    (transmitted > 0)
        .then(|| transmitted.saturating_sub(retransmitted) as f64 / transmitted as f64 * 100.0)
}

/// Buffer Delay Percentage, %.
pub fn buffer_delay_pct(avg_rtt_ms: f64, baseline_rtt_ms: f64) -> f64 {
    (avg_rtt_ms - baseline_rtt_ms) / baseline_rtt_ms * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn the_rfcs_gigabit_ethernet_example() {
        // 1e9 / (1538 × 8) = 81,274 frames/s × 1460 × 8 = 949.28 Mbit/s
        let m = max_tcp_bps(1e9, 1500, 1460, 38);
        assert!(close(m / 1e6, 949.28, 0.01), "{m}");
        // 100 Mbit/s Fast Ethernet: 94.93 Mbit/s
        assert!(close(
            max_tcp_bps(100e6, 1500, 1460, 38) / 1e6,
            94.928,
            0.001
        ));
    }

    #[test]
    fn the_labs_own_overhead_and_payload() {
        // a shaper counting frames without FCS (1514 bytes), 1448 bytes of payload with
        // timestamps: 10 Mbit/s × 1448 / 1514 = 9.5641 Mbit/s
        assert!(close(
            max_tcp_bps(10e6, 1500, 1448, 14) / 1e6,
            9.5641,
            0.0001
        ));
    }

    #[test]
    fn bdp_and_window() {
        // 100 Mbit/s × 50 ms = 5,000,000 bits = 625,000 bytes
        assert!(close(bdp_bits(100e6, 0.050), 5e6, 1e-6));
        assert!(close(min_rwnd_bytes(100e6, 0.050), 625_000.0, 1e-6));
        // a T3 (44.21 Mbit/s) at 25 ms: 1,105,250 bits, 138,156.25 bytes
        assert!(close(min_rwnd_bytes(44.21e6, 0.025), 138_156.25, 1e-6));
    }

    #[test]
    fn transfer_time_ratio_of_a_100_mb_file() {
        // 100 MB over the gigabit's 949.28 Mbit/s: ideal 0.8427 s; taking 1.2 s is 1.42
        let ideal = ideal_transfer_s(100_000_000, max_tcp_bps(1e9, 1500, 1460, 38));
        assert!(close(ideal, 0.84275, 0.0001), "{ideal}");
        assert!(close(transfer_time_ratio(1.2, ideal), 1.4239, 0.0001));
        assert_eq!(transfer_time_ratio(2.0, 2.0), 1.0);
    }

    #[test]
    fn the_rfcs_efficiency_example() {
        // 100,000 bytes, 2,000 of them retransmitted: 102,000 transmitted
        let e = tcp_efficiency_pct(102_000, 2_000).unwrap();
        assert!(close(e, 98.039, 0.001), "{e}");
        assert_eq!(tcp_efficiency_pct(5000, 0), Some(100.0));
        assert_eq!(tcp_efficiency_pct(0, 0), None);
    }

    #[test]
    fn the_rfcs_buffer_delay_example() {
        assert!(close(buffer_delay_pct(32.0, 25.0), 28.0, 1e-9));
        assert_eq!(buffer_delay_pct(25.0, 25.0), 0.0);
    }
}
