//! Constant-bit-rate (CBR) UDP traffic agents with kernel receive timestamps: the measurement
//! method of seed 002 (Chertov & Almeroth, "High-Fidelity Link Shaping", sections III-A and
//! IV): CBR flows of fixed-size frames (64, 800, 1518 bytes at 8k..200k packets/s), measuring
//! per-packet one-way delay, inter-frame gap (IFG) and loss at the receiver.
//!
//! - [`CbrSender`] sends UDP datagrams from a (bound) source to a destination at a constant
//!   rate in packets per second, each datagram padded so that its Ethernet frame has the
//!   requested size, each carrying a flow id, a sequence number and its send time.
//! - [`CbrSink`] receives them with kernel receive timestamps and records, per packet, the
//!   sequence number, send time, receive time, size and TOS byte (its ECN field shows CE
//!   marks); [`CbrRecords`] computes delays, gaps,
//!   loss, duplicates, reordering and a [`CbrSummary`] with the seed's percentiles.
//!
//! # Frame size
//!
//! "Frame size" is the Ethernet frame without the 4-byte FCS, as everywhere in weir:
//! frame = 14 (Ethernet) + 20 (IPv4) + 8 (UDP) + payload, so payload = frame − 42 (a 64-byte
//! frame carries 22 bytes); over IPv6, payload = frame − 62. Frames below the Ethernet minimum
//! of 60 bytes, and frames whose payload cannot hold the 18-byte header (below 80 bytes over
//! IPv6), are refused ([`payload_len`]). Frames larger than the path MTU + 14
//! are fragmented by IP and then are not single frames any more: keep `frame ≤ MTU + 14`.
//!
//! # Payload layout
//!
//! All integers big-endian (network order); bytes after the header are zero.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0  | 4 | flow id, also the magic the sink filters on (default [`DEFAULT_FLOW`], "WEIR") |
//! | 4  | 6 | sequence number, 0, 1, 2, … per sender (48 bits) |
//! | 10 | 8 | send time, ns since the Unix epoch (`CLOCK_REALTIME`) |
//! | 18 | … | zero padding up to the frame size |
//!
//! 18 bytes is exactly the UDP payload of a minimum Ethernet frame (60 bytes without FCS,
//! seed 002's "64-byte frame" with it), so every size of the seed can be sent.
//!
//! # Clocks
//!
//! One-way delay = kernel receive time − send time, so both must come from one clock. The
//! receiver uses `SO_TIMESTAMPNS`, whose timestamps are `CLOCK_REALTIME`, taken by the kernel
//! when the packet enters the receiving stack (for veth: when `netif_rx` queues it, with
//! `net.core.netdev_tstamp_prequeue=1`, the default) — not when the agent gets round to
//! reading it, so the sink's scheduling does not disturb delays or gaps. The sender therefore
//! stamps packets with `CLOCK_REALTIME` (`clock_gettime`, read immediately before the send
//! call). Sender and sink run on one machine (namespaces share the clocks), so no
//! synchronisation is needed, just as the seed's Black Box Profiler both sends and receives.
//! A step of the real-time clock during a run (NTP, `date`) would corrupt delays; slewing
//! affects both ends alike. Pacing itself runs on `CLOCK_MONOTONIC`, immune to steps.
//!
//! # Pacing
//!
//! Packet `i` is due at `t0 + round(i · 10⁹ / pps)` ns on the monotonic clock, `t0` being the
//! start time plus the start delay: an absolute schedule, so errors never accumulate. Waiting
//! follows [`Pacing`]: by default the thread sleeps with `clock_nanosleep(TIMER_ABSTIME)` until
//! 100 µs before the due time (timer slack set to 1 ns with `prctl(PR_SET_TIMERSLACK)`) and
//! busy-spins on the clock for the rest, so the send starts within well under a microsecond
//! of its due time (at rates above ~10 kpps this spins a whole core). A packet sent after its
//! due time is "late" by the difference; a sender that falls behind sends at once, one
//! `send` per packet, each with a fresh stamp. Optionally (`max_batch` > 1) the packets
//! already due go out together in one `sendmmsg`; they all carry the stamp taken just before
//! that call, so the k-th packet of a batch shows k × (per-packet kernel cost, ~3 µs for
//! 64-byte frames on veth) of extra delay. On veth this bought no throughput (the receiving
//! stack runs in the sender's softirq and dominates), hence the default of 1. The report
//! counts late packets (later than one period, i.e. the next packet was due too, unless set
//! otherwise), the largest and mean lateness, and the achieved rate.
//!
//! Send errors are counted, not fatal: `ENOBUFS` from a full qdisc (reported because the
//! socket sets `IP_RECVERR`), `EAGAIN` from a full send buffer, `ECONNREFUSED` after an ICMP
//! port unreachable. The packet's sequence number is used up all the same, so the sink sees
//! it as lost, and `lost − send_errors.total` is what the path lost.
//!
//! On veth the whole receiving stack runs in the sending thread's softirq, so the sender's
//! ceiling is about one packet per ~3 µs of kernel work (64-byte frames: ~170k–270k packets/s
//! on a busy 2-core VM; seed 002 goes up to 200k). The `late` count and `achieved_pps` tell
//! when a run asked for more than the sender could do.
//!
//! # Statistics ([`CbrRecords`])
//!
//! Records are kept in arrival order (the socket's queue order).
//! - delay of a packet: `rx_ns − tx_ns` (signed; negative only if the clock stepped);
//! - inter-frame gap: the difference of consecutive kernel receive timestamps in arrival
//!   order — the seed's "time between frames as they enter" (start to start, so a CBR flow's
//!   ideal gap is `10⁶ / pps` µs), one fewer than the packets;
//! - lost: `expected − distinct sequence numbers below expected`, `expected` being the
//!   sender's `attempted` count;
//! - duplicates: records − distinct sequence numbers;
//! - reordered: packets whose sequence number is lower than the largest seen before them
//!   (a late duplicate of an earlier packet counts too);
//! - percentiles: linear interpolation between the closest ranks (numpy's default,
//!   Hyndman & Fan type 7, see [`percentile`](crate::stats::dist::percentile)), reported
//!   in µs with mean, min and max.
//!
//! Agents create their sockets inside a namespace
//! ([`Netns::try_run`](crate::topo::Netns::try_run)) and then run on ordinary threads; stop
//! them before dropping the topology (declare them after it).
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | frame sizes and the payload header |
//! | `pacing.rs` | [`Pacing`]: the absolute schedule and how the sender waits for it |
//! | `sender.rs` | [`CbrSender`] |
//! | `sink.rs` | [`CbrSink`] |
//! | `records.rs` | [`CbrRecords`], [`CbrSummary`]: what the sink received, and the statistics |

use serde::Serialize;

use crate::{Error, Result};

mod pacing;
mod records;
mod sender;
mod sink;

pub use pacing::Pacing;
pub use records::{CbrRecord, CbrRecords, CbrSummary};
pub use sender::{CbrSender, CbrSenderOpts, CbrSenderReport, SendErrors};
pub use sink::{CbrSink, CbrSinkOpts};

// ---------------------------------------------------------------------------------------------
// Frames and the payload header.

/// Ethernet + IPv4 + UDP header bytes: frame = payload + 42.
pub const IPV4_UDP_OVERHEAD: usize = 14 + 20 + 8;
/// Ethernet + IPv6 + UDP header bytes: frame = payload + 62.
pub const IPV6_UDP_OVERHEAD: usize = 14 + 40 + 8;
/// Smallest Ethernet frame without FCS.
pub const MIN_FRAME: usize = 60;
/// Bytes of the CBR header at the start of every payload.
pub const HEADER_LEN: usize = 18;
/// Sequence numbers are carried in 48 bits (they wrap after 2.8 × 10¹⁴ packets).
pub const SEQ_MASK: u64 = (1 << 48) - 1;
/// Default flow id: ASCII "WEIR".
pub const DEFAULT_FLOW: u32 = 0x5745_4952;
/// Largest `max_batch` (datagrams per `sendmmsg`).
pub const MAX_BATCH: usize = 1024;

/// The UDP payload length that makes an Ethernet frame of `frame` bytes (without FCS), over
/// IPv4 or IPv6. Errors below the Ethernet minimum, when the payload cannot hold the
/// [`HEADER_LEN`]-byte header, or above the largest UDP datagram.
pub fn payload_len(frame: usize, ipv6: bool) -> Result<usize> {
    let (overhead, max_payload, fam) = if ipv6 {
        (IPV6_UDP_OVERHEAD, 65_535 - 8, "IPv6")
    } else {
        (IPV4_UDP_OVERHEAD, 65_535 - 28, "IPv4")
    };
    if frame < MIN_FRAME {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes is below the Ethernet minimum of {MIN_FRAME} \
             (frame sizes exclude the 4-byte FCS)"
        )));
    }
    let min = overhead + HEADER_LEN;
    if frame < min {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes leaves {} bytes of UDP payload over {fam}; the CBR \
             header needs {HEADER_LEN}, so frames must be at least {min} bytes",
            frame.saturating_sub(overhead)
        )));
    }
    let p = frame - overhead;
    if p > max_payload {
        return Err(Error::Invalid(format!(
            "CBR frame size {frame} bytes needs a {p}-byte UDP payload; at most {max_payload} \
             over {fam}"
        )));
    }
    Ok(p)
}

/// The header at the start of every CBR payload (see the module documentation for the byte
/// layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CbrHeader {
    /// Flow id.
    pub flow: u32,
    /// Sequence number (0 for a sender's first packet).
    pub seq: u64,
    /// Send time, ns since the Unix epoch (`CLOCK_REALTIME`).
    pub tx_ns: u64,
}

impl CbrHeader {
    /// The header's [`HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.encode_into(&mut b);
        b
    }

    pub(super) fn encode_into(&self, b: &mut [u8; HEADER_LEN]) {
        b[0..4].copy_from_slice(&self.flow.to_be_bytes());
        b[4..10].copy_from_slice(&(self.seq & SEQ_MASK).to_be_bytes()[2..]);
        b[10..18].copy_from_slice(&self.tx_ns.to_be_bytes());
    }

    /// Parses the header at the start of `payload`; `None` if it is shorter than
    /// [`HEADER_LEN`].
    pub fn decode(payload: &[u8]) -> Option<CbrHeader> {
        let b: &[u8; HEADER_LEN] = payload.get(..HEADER_LEN)?.try_into().ok()?;
        Some(CbrHeader {
            flow: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            seq: u64::from_be_bytes([0, 0, b[4], b[5], b[6], b[7], b[8], b[9]]),
            tx_ns: u64::from_be_bytes(b[10..18].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_and_roundtrip() {
        let h = CbrHeader {
            flow: 0x0102_0304,
            seq: 0x1314_1516_1718,
            tx_ns: 0x2122_2324_2526_2728,
        };
        let b = h.encode();
        assert_eq!(
            b,
            [
                0x01, 0x02, 0x03, 0x04, // flow
                0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // seq (48 bits)
                0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, // tx_ns
            ]
        );
        assert_eq!(CbrHeader::decode(&b), Some(h));
        // Padding after the header is ignored; a short payload is refused.
        let mut p = b.to_vec();
        p.extend_from_slice(&[0xff; 2]);
        assert_eq!(CbrHeader::decode(&p), Some(h));
        assert_eq!(CbrHeader::decode(&b[..HEADER_LEN - 1]), None);
        assert_eq!(CbrHeader::decode(&[]), None);
        assert_eq!(&DEFAULT_FLOW.to_be_bytes(), b"WEIR");
    }

    #[test]
    fn frame_to_payload() {
        assert_eq!(payload_len(64, false).unwrap(), 22);
        assert_eq!(payload_len(800, false).unwrap(), 758);
        assert_eq!(payload_len(1518, false).unwrap(), 1476);
        assert_eq!(payload_len(60, false).unwrap(), HEADER_LEN);
        assert_eq!(payload_len(80, true).unwrap(), HEADER_LEN);
        assert_eq!(payload_len(1518, true).unwrap(), 1456);
        let e = payload_len(59, false).unwrap_err().to_string();
        assert!(e.contains("Ethernet minimum"), "{e}");
        let e = payload_len(79, true).unwrap_err().to_string();
        assert!(e.contains("at least 80"), "{e}");
        assert!(payload_len(64, true).is_err());
        assert_eq!(payload_len(65_549, false).unwrap(), 65_507);
        assert!(payload_len(65_550, false).is_err());
    }
}
