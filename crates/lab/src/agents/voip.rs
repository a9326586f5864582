//! A G.729 voice call as the network sees it: one RTP stream over UDP (seed 000's VoIP test
//! sent one with SmartBits and a Cisco gateway) — the [CBR agents](super::cbr) with an RTP
//! header in front of their own.
//!
//! # The stream
//!
//! G.729 codes 10 ms of speech into 10 bytes; two frames go into each packet (20 ms
//! packetisation, the usual setting), so 50 packets/s, each
//!
//! ```text
//! 20 B voice + 12 B RTP + 8 B UDP + 20 B IPv4 = 60 B IP packet, 74 B Ethernet frame
//! 50 packets/s x 74 B x 8 = 29.6 kbit/s at layer 2 (24 kbit/s at IP, 8 kbit/s of voice)
//! ```
//!
//! The RTP header (RFC 3550 §5.1, 12 bytes, network order): version 2, no padding, no
//! extension, no CSRC, marker 0, payload type 18 (G.729, RFC 3551), the sequence number
//! (the packet's, modulo 2¹⁶), the timestamp (`seq × 160`: 8 kHz samples, 160 per 20 ms)
//! and the SSRC. The 20 "voice" bytes carry the CBR header (flow id, 48-bit sequence
//! number, send time in ns of `CLOCK_REALTIME`: see [`super::cbr`]) and two zero bytes.
//!
//! # Sending and receiving
//!
//! [`voice_sender`] is a [`CbrSender`](super::cbr::CbrSender) at 50 packets/s of 74-byte
//! frames with [`Rtp`] set: a UDP socket in the sender's namespace, paced on absolute
//! deadlines (`t0 + i · 20 ms` on the monotonic clock, `clock_nanosleep` with 1 ns timer
//! slack, `weir_io::clock`). [`voice_sink`] is a [`CbrSink`](super::cbr::CbrSink) reading
//! the CBR header after the RTP header, with kernel receive timestamps (`SO_TIMESTAMPNS`).
//! [`voice_packets`] turns its records into the per-packet input of
//! [`crate::stats::voice`].
//!
//! Sender and receiver are namespaces of one machine and share its `CLOCK_REALTIME`, so
//! the one-way delay `rx − tx` is measured directly, without clock synchronisation.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cbr::{CbrRecords, CbrSenderOpts, CbrSinkOpts};
use crate::stats::voice::VoicePacket;

/// Bytes of the fixed RTP header (no CSRC, no extension).
pub const RTP_HEADER_LEN: usize = 12;
/// RTP payload type of G.729 (RFC 3551 Table 4).
pub const PT_G729: u8 = 18;
/// Speech per packet, ms.
pub const G729_PACKET_MS: u64 = 20;
/// Voice bytes per packet (two 10-byte G.729 frames).
pub const G729_VOICE_BYTES: usize = 20;
/// Ethernet frame of a G.729 packet over IPv4: 14 + 20 + 8 + 12 + 20.
pub const G729_FRAME: usize = 14 + 20 + 8 + RTP_HEADER_LEN + G729_VOICE_BYTES;
/// Packets per second.
pub const G729_PPS: f64 = 1000.0 / G729_PACKET_MS as f64;

/// Layer-2 rate of the stream, bit/s (29 600 for G.729 at 20 ms).
pub fn g729_l2_bps() -> f64 {
    G729_FRAME as f64 * 8.0 * G729_PPS
}

/// The RTP header of a stream: what stays the same from packet to packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rtp {
    pub payload_type: u8,
    pub ssrc: u32,
    /// Timestamp increment per packet (samples).
    pub ts_step: u32,
}

impl Rtp {
    /// G.729 at 20 ms: payload type 18, 160 samples per packet.
    pub fn g729(ssrc: u32) -> Rtp {
        Rtp {
            payload_type: PT_G729,
            ssrc,
            ts_step: 160,
        }
    }

    /// Writes the header of packet `seq` into `b[..12]` (RFC 3550 §5.1).
    pub fn encode(&self, seq: u64, b: &mut [u8]) {
        b[0] = 0x80; // V=2, P=0, X=0, CC=0
        b[1] = self.payload_type & 0x7f; // M=0
        b[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
        b[4..8].copy_from_slice(&(seq as u32).wrapping_mul(self.ts_step).to_be_bytes());
        b[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
    }

    /// (payload type, sequence number, timestamp, SSRC) of an RTP version-2 header.
    pub fn decode(b: &[u8]) -> Option<(u8, u16, u32, u32)> {
        let b: &[u8; RTP_HEADER_LEN] = b.get(..RTP_HEADER_LEN)?.try_into().ok()?;
        (b[0] >> 6 == 2).then(|| {
            (
                b[1] & 0x7f,
                u16::from_be_bytes([b[2], b[3]]),
                u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            )
        })
    }
}

/// A G.729 call from `src` to `dst` for `duration`: the CBR sender's options.
pub fn voice_sender(src: SocketAddr, dst: SocketAddr, duration: Duration) -> CbrSenderOpts {
    let mut o = CbrSenderOpts::new(dst, G729_PPS, G729_FRAME);
    o.src = Some(src);
    o.duration = Some(duration);
    // "RTP0": the flow id the sink filters on
    o.flow = u32::from_be_bytes(*b"RTP0");
    o.rtp = Some(Rtp::g729(o.flow));
    o
}

/// The receiving end of [`voice_sender`] on `bind`.
pub fn voice_sink(bind: SocketAddr) -> CbrSinkOpts {
    let mut o = CbrSinkOpts::new(bind, Some(u32::from_be_bytes(*b"RTP0")));
    o.header_offset = RTP_HEADER_LEN;
    o.rcvbuf = 1 << 20;
    o
}

/// The sink's records as voice packets, in arrival order.
pub fn voice_packets(r: &CbrRecords) -> Vec<VoicePacket> {
    r.records
        .iter()
        .map(|r| VoicePacket {
            seq: r.seq,
            tx_ns: r.tx_ns,
            rx_ns: r.rx_ns,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g729_sizes_and_rate() {
        assert_eq!(G729_FRAME, 74);
        assert_eq!(G729_FRAME - 14, 60);
        assert_eq!(g729_l2_bps(), 29_600.0);
        let dst: SocketAddr = "10.77.0.2:16384".parse().unwrap();
        let o = voice_sender("10.9.1.1:0".parse().unwrap(), dst, Duration::from_secs(1));
        // UDP payload = RTP 12 + voice 20; the CBR header sits in the voice bytes
        assert_eq!(o.validate().unwrap(), 32);
        assert_eq!(o.header_offset(), RTP_HEADER_LEN);
    }

    #[test]
    fn rtp_header_bytes() {
        let mut b = [0u8; 12];
        Rtp::g729(0x0102_0304).encode(3, &mut b);
        assert_eq!(
            b,
            [
                0x80, 18, // V=2, PT=18
                0x00, 0x03, // seq 3
                0x00, 0x00, 0x01, 0xe0, // timestamp 3 x 160 = 480
                0x01, 0x02, 0x03, 0x04, // SSRC
            ]
        );
        assert_eq!(Rtp::decode(&b), Some((18, 3, 480, 0x0102_0304)));
        // sequence numbers and timestamps wrap
        Rtp::g729(1).encode(65_537, &mut b);
        assert_eq!(
            Rtp::decode(&b),
            Some((18, 1, 65_537u32.wrapping_mul(160), 1))
        );
        b[0] = 0x40;
        assert_eq!(Rtp::decode(&b), None, "not version 2");
        assert_eq!(Rtp::decode(&b[..11]), None);
    }
}
