//! `TCP_INFO`: the kernel's per-connection TCP statistics (segments sent and retransmitted,
//! RTT, congestion window, negotiated options, …), read from a socket as a [`TcpInfo`].

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use serde::Serialize;

/// The kernel's `struct tcp_info` (include/uapi/linux/tcp.h, as of Linux 6.x). Older kernels
/// fill a prefix; the rest stays zero.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8, // snd_wscale:4 (low bits), rcv_wscale:4
    flags: u8,  // delivery_rate_app_limited:1, fastopen_client_fail:2
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    rehash: u32,
    total_rto: u16,
    total_rto_recoveries: u16,
    total_rto_time: u32,
}

/// A snapshot of a socket's `TCP_INFO` (times in microseconds, as the kernel reports them).
/// Fields the running kernel does not provide are zero; `len` says how many bytes it filled.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct TcpInfo {
    /// Bytes of `struct tcp_info` the kernel filled.
    pub len: u32,
    /// TCP state (1 = ESTABLISHED, …).
    pub state: u8,
    /// Congestion-avoidance state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// SACK was negotiated.
    pub sack: bool,
    /// Timestamps were negotiated.
    pub timestamps: bool,
    /// Window scaling was negotiated.
    pub window_scaling: bool,
    /// ECN was negotiated.
    pub ecn: bool,
    /// Send window scale.
    pub snd_wscale: u8,
    /// Receive window scale.
    pub rcv_wscale: u8,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Sender MSS.
    pub snd_mss: u32,
    /// Receiver MSS estimate.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    /// Segments lost (estimate).
    pub lost: u32,
    /// Path MTU.
    pub pmtu: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Minimum RTT seen, µs (`u32::MAX` when unknown).
    pub min_rtt_us: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Reordering metric.
    pub reordering: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Segments sent, including pure ACKs and the SYN (`tcpi_segs_out`).
    pub segs_out: u32,
    /// Segments received (`tcpi_segs_in`).
    pub segs_in: u32,
    /// Segments sent carrying data, retransmissions included (`tcpi_data_segs_out`).
    pub data_segs_out: u32,
    /// Segments received carrying data.
    pub data_segs_in: u32,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Data bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Data bytes retransmitted.
    pub bytes_retrans: u64,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Pacing rate, bytes/s.
    pub pacing_rate: u64,
    /// Latest delivery-rate sample, bytes/s.
    pub delivery_rate: u64,
    /// Segments delivered.
    pub delivered: u32,
    /// Segments delivered with CE marks.
    pub delivered_ce: u32,
    /// Time limited by the receive window, µs.
    pub rwnd_limited_us: u64,
    /// Time limited by the send buffer, µs.
    pub sndbuf_limited_us: u64,
    /// Time busy sending, µs.
    pub busy_time_us: u64,
    /// Duplicate SACKs received.
    pub dsack_dups: u32,
    /// Reordering events seen.
    pub reord_seen: u32,
    /// Peer's advertised window after scaling, bytes.
    pub snd_wnd: u32,
    /// Our advertised window after scaling, bytes.
    pub rcv_wnd: u32,
    /// Retransmission timeouts (`tcpi_total_rto`).
    pub total_rto: u16,
}

/// Reads `TCP_INFO` from a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut raw = MaybeUninit::<RawTcpInfo>::zeroed();
    let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: raw is a writable buffer of `len` bytes; the kernel writes at most `len`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised, and every bit pattern is a valid RawTcpInfo (plain integers).
    let t = unsafe { raw.assume_init() };
    Ok(TcpInfo {
        len,
        state: t.state,
        ca_state: t.ca_state,
        timestamps: t.options & 1 != 0,
        sack: t.options & 2 != 0,
        window_scaling: t.options & 4 != 0,
        ecn: t.options & 8 != 0,
        snd_wscale: t.wscale & 0x0f,
        rcv_wscale: t.wscale >> 4,
        rto_us: t.rto,
        snd_mss: t.snd_mss,
        rcv_mss: t.rcv_mss,
        unacked: t.unacked,
        lost: t.lost,
        pmtu: t.pmtu,
        rtt_us: t.rtt,
        rttvar_us: t.rttvar,
        min_rtt_us: t.min_rtt,
        snd_ssthresh: t.snd_ssthresh,
        snd_cwnd: t.snd_cwnd,
        reordering: t.reordering,
        total_retrans: t.total_retrans,
        segs_out: t.segs_out,
        segs_in: t.segs_in,
        data_segs_out: t.data_segs_out,
        data_segs_in: t.data_segs_in,
        bytes_acked: t.bytes_acked,
        bytes_received: t.bytes_received,
        bytes_sent: t.bytes_sent,
        bytes_retrans: t.bytes_retrans,
        notsent_bytes: t.notsent_bytes,
        pacing_rate: t.pacing_rate,
        delivery_rate: t.delivery_rate,
        delivered: t.delivered,
        delivered_ce: t.delivered_ce,
        rwnd_limited_us: t.rwnd_limited,
        sndbuf_limited_us: t.sndbuf_limited,
        busy_time_us: t.busy_time,
        dsack_dups: t.dsack_dups,
        reord_seen: t.reord_seen,
        snd_wnd: t.snd_wnd,
        rcv_wnd: t.rcv_wnd,
        total_rto: t.total_rto,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_tcp_info_layout() {
        // Offsets from include/uapi/linux/tcp.h.
        assert_eq!(std::mem::offset_of!(RawTcpInfo, rto), 8);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, total_retrans), 100);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, segs_out), 136);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::size_of::<RawTcpInfo>(), 248);
    }
}
