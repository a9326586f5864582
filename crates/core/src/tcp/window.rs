//! TCP Rate Control, window sizing: the receive window weir lets an ACK advertise to a
//! rate-controlled sender (seed 000 "Class-Based Queuing with Per-Flow Queuing and TCR";
//! Karandikar et al., "TCP Rate Control", CCR 30(1), 2000).
//!
//! To shape flow *i* to X bit/s, size the window of its ACKs to X·Y bytes, Y its RTT: the
//! sender then keeps about one bandwidth-delay product in flight and nothing queues at the
//! bottleneck. This file is the arithmetic only; which ACKs, which rate and which RTT are
//! the device's business.
//!
//! # Rules, in order
//! 1. Target: `X · Y / 8 + MSS` bytes, at least 2 MSS — [`target_bytes`]. `Y` is the
//!    path's *minimum* RTT, which leaves out the time the segment itself takes to leave
//!    a shaper serving the flow at `X` (`MSS · 8 / X`); the extra MSS is that time's
//!    worth of data, without which a flow sized to exactly `X · Y` runs below `X`. Two
//!    segments is the floor: less stalls the sender on delayed ACKs and cannot carry
//!    fast retransmit.
//! 2. Never advertise more than the receiver did: weir only shrinks the offer (the
//!    receiver's buffer is the receiver's limit; RFC 9293 §3.8.6).
//! 3. Never pull the right edge (`ack + window`) back behind one already advertised to the
//!    sender: RFC 9293 §3.8.6.2.1 strongly discourages shrinking the window, and a sender
//!    that already sent up to that edge would see its data fall outside the window.
//! 4. During loss recovery keep the edge at or beyond the highest SACKed byte + 2 MSS, so
//!    the sender can retransmit and still send new data for limited transmit / fast
//!    recovery (seed 000: PacketShaper and iPolicer "stop sizing on triple duplicate ACKs
//!    and burst"; weir keeps sizing, but never below what recovery needs).
//! 5. The field carries `window >> shift` (RFC 7323 window scaling; `shift` from the
//!    *receiver's* SYN, 0 without scaling on both SYNs): the value is rounded **up**, so
//!    rounding never shrinks the window below the rules above, and capped at 65,535 and at
//!    the receiver's own field value.
//!
//! Units: bytes, bits per second, microseconds; sequence arithmetic modulo 2³².

/// Bytes of data the sender may have outstanding to send at `rate_bps` over a path whose
/// minimum RTT is `rtt_us`: `rate · rtt / 8 + mss`, at least two segments of `mss` bytes.
pub fn target_bytes(rate_bps: u64, rtt_us: u32, mss: u16) -> u32 {
    // in u64, so the division by a constant is a multiplication (no 128-bit division
    // per ACK); a product beyond u64 is beyond 2^64 / 8·10^6 ≈ 2.3·10^12 bytes, far above
    // the u32 cap
    let bdp = match rate_bps.checked_mul(rtt_us as u64) {
        Some(bit_us) => bit_us / 8_000_000 + mss as u64,
        None => u64::MAX,
    };
    (bdp.min(u32::MAX as u64) as u32).max(2 * mss as u32)
}

/// What the ACK being rewritten says and what weir advertised before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckView {
    /// The ACK's acknowledgement number.
    pub ack: u32,
    /// Its window field as the receiver wrote it.
    pub field: u16,
    /// The receiver's window-scale shift (0..=14).
    pub shift: u8,
    /// The furthest right edge already advertised to the sender (by weir or the
    /// receiver), if any.
    pub right_edge: Option<u32>,
    /// The highest SACKed sequence number (end of the highest SACK block) in this ACK.
    pub sack_high: Option<u32>,
    /// The sender's MSS (for rule 4).
    pub mss: u16,
}

/// The window field to write into the ACK for a target of `target` bytes, or `None` when
/// the receiver's own field is already at or below it (nothing to rewrite).
pub fn sized_field(a: &AckView, target: u32) -> Option<u16> {
    let shift = a.shift.min(14);
    let offered = (a.field as u64) << shift;
    let mut want = (target as u64).min(offered);
    // rule 3: not behind an edge already advertised
    if let Some(edge) = a.right_edge {
        let ahead = edge.wrapping_sub(a.ack);
        if (ahead as i32) > 0 {
            want = want.max(ahead as u64);
        }
    }
    // rule 4: room for recovery beyond the highest SACKed byte
    if let Some(high) = a.sack_high {
        let beyond = high.wrapping_sub(a.ack);
        if (beyond as i32) > 0 {
            want = want.max(beyond as u64 + 2 * a.mss as u64);
        }
    }
    let want = want.min(offered);
    // rule 5: the field, rounded up
    let field = want.div_ceil(1u64 << shift).min(u16::MAX as u64) as u16;
    (field < a.field).then_some(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(ack: u32, field: u16, shift: u8) -> AckView {
        AckView {
            ack,
            field,
            shift,
            right_edge: None,
            sack_high: None,
            mss: 1460,
        }
    }

    #[test]
    fn target_is_the_bandwidth_delay_product_with_a_two_segment_floor() {
        // seed 000's narrowest share: 20 kbit/s class, 4 sessions → 5 kbit/s each; with a
        // 200 ms RTT that is 125 bytes in flight: the floor, 2 × 1460, applies
        assert_eq!(target_bytes(5_000, 200_000, 1460), 2920);
        // 1 Mbit/s × 100 ms = 12,500 bytes, + one 1460-byte segment = 13,960
        assert_eq!(target_bytes(1_000_000, 100_000, 1460), 13_960);
        // 1.544 Mbit/s × 250 ms = 48,250 bytes, + 1460 = 49,710
        assert_eq!(target_bytes(1_544_000, 250_000, 1460), 49_710);
        // 128 kbit/s × 50 ms = 800 bytes + 1460 = 2260: below the 2-segment floor
        assert_eq!(target_bytes(128_000, 50_000, 1460), 2920);
        // 256-byte MSS (clamped) lowers the floor
        assert_eq!(target_bytes(5_000, 200_000, 256), 512);
        // 1 Tbit/s × 20 ms = 2.5·10^9 bytes, + 1460: still below the u32 cap
        assert_eq!(target_bytes(1_000_000_000_000, 20_000, 1460), 2_500_001_460);
        // 4 Tbit/s × 10 s = 5·10^12 bytes (the product, 4·10^19 bit·µs, overflows u64):
        // capped at u32::MAX, as is 2^40 bit/s × 16 s (2.2·10^12 bytes, no overflow)
        assert_eq!(target_bytes(4_000_000_000_000, 10_000_000, 1460), u32::MAX);
        assert_eq!(target_bytes(1 << 40, 16_000_000, 1460), u32::MAX);
        assert_eq!(target_bytes(u64::MAX, u32::MAX, 1460), u32::MAX);
    }

    #[test]
    fn the_field_shrinks_to_the_target_rounded_up_by_the_scale() {
        // no scaling: 64,240-byte offer sized to 12,500
        assert_eq!(sized_field(&view(1000, 64_240, 0), 12_500), Some(12_500));
        // shift 7 (128-byte units): 12,500 / 128 = 97.66 → 98 (12,544 bytes, not less)
        assert_eq!(sized_field(&view(1000, 502, 7), 12_500), Some(98));
        // the receiver offers less than the target: untouched
        assert_eq!(sized_field(&view(1000, 8_000, 0), 12_500), None);
        // an offer of exactly the target: untouched
        assert_eq!(sized_field(&view(1000, 12_500, 0), 12_500), None);
    }

    #[test]
    fn the_right_edge_never_moves_back() {
        // weir advertised up to 1000 + 20,000; the next ACK (ack 5000) may not offer less
        // than 16,000 even if the target is now 12,500
        let mut a = view(5000, 60_000, 0);
        a.right_edge = Some(21_000);
        assert_eq!(sized_field(&a, 12_500), Some(16_000));
        // once the ACK passes the old edge, the target rules again
        a.ack = 30_000;
        assert_eq!(sized_field(&a, 12_500), Some(12_500));
        // across the 2^32 wrap: edge 0x0000_1000, ack 0xFFFF_F000 → 8192 ahead
        let mut w = view(0xFFFF_F000, 60_000, 0);
        w.right_edge = Some(0x0000_1000);
        assert_eq!(sized_field(&w, 2920), Some(8192));
    }

    #[test]
    fn recovery_keeps_room_beyond_the_highest_sack() {
        // ack 1000, SACK up to 1000 + 10 × 1460: edge ≥ 14,600 + 2 × 1460 = 17,520 ahead
        let mut a = view(1000, 60_000, 0);
        a.sack_high = Some(1000 + 14_600);
        assert_eq!(sized_field(&a, 2920), Some(17_520));
        // but never beyond what the receiver offered
        a.field = 15_000;
        assert_eq!(sized_field(&a, 2920), None);
    }

    #[test]
    fn a_large_shift_is_capped_at_14() {
        // RFC 7323 §2.3: shifts above 14 are treated as 14
        let a = view(0, 4, 15);
        // 4 << 14 = 65,536 offered; target 20,000 → ceil(20,000 / 16,384) = 2
        assert_eq!(sized_field(&a, 20_000), Some(2));
    }
}
