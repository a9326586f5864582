//! The ICMP echo prober: [`icmp_ping`] sends echo requests on a raw socket, one after
//! another, and times the replies. Requests are built and replies parsed with `weir-wire`
//! (`build::icmp_echo`, the `ipv4` and `icmp` views).

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use weir_wire::{build, icmp, ip, ipv4};

use crate::sys::{poll, pollfd};
use crate::topo::Netns;
use crate::{Error, Result};

/// Options of [`icmp_ping_with`].
#[derive(Debug, Clone)]
pub struct PingOpts {
    /// Number of echo requests.
    pub count: usize,
    /// How long to wait for each reply.
    pub timeout: Duration,
    /// Least time between two requests (a request is never sent before the previous one got
    /// its reply or timed out).
    pub interval: Duration,
    /// Bytes of payload after the 8-byte ICMP header.
    pub payload_len: usize,
    /// Source address to bind; `None`: the kernel chooses.
    pub src: Option<Ipv4Addr>,
}

impl PingOpts {
    /// `count` requests, each waited for up to `timeout`, back to back, 56 bytes of payload.
    pub fn new(count: usize, timeout: Duration) -> PingOpts {
        PingOpts {
            count,
            timeout,
            interval: Duration::ZERO,
            payload_len: 56,
            src: None,
        }
    }
}

/// Sends `count` ICMP echo requests from `ns` to `dst`, one after another, and returns for
/// each the round-trip time, or `None` if no reply came within `timeout`.
pub fn icmp_ping(
    ns: &Netns,
    dst: Ipv4Addr,
    count: usize,
    timeout: Duration,
) -> Result<Vec<Option<Duration>>> {
    icmp_ping_with(ns, dst, &PingOpts::new(count, timeout))
}

/// An ICMP echo request message (header and payload) with its checksum.
pub(super) fn echo_request(id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; icmp::HEADER_LEN + payload.len()];
    build::icmp_echo(&mut p, true, id, seq, payload).expect("buffer sized for the message");
    p
}

/// If `pkt` (an IPv4 datagram as a raw socket returns it) is a valid echo reply from `from`,
/// returns its `(id, seq)`.
fn parse_echo_reply(pkt: &[u8], from: Ipv4Addr) -> Option<(u16, u16)> {
    echo_reply(pkt, from).map(|(id, seq, _)| (id, seq))
}

/// [`parse_echo_reply`] with the echoed payload.
pub(super) fn echo_reply(pkt: &[u8], from: Ipv4Addr) -> Option<(u16, u16, &[u8])> {
    let ip = ipv4::Packet::new_checked(pkt).ok()?;
    if ip.protocol() != ip::protocol::ICMP || ip.src_addr() != from {
        return None;
    }
    let m = icmp::Packet::new_checked(ip.payload()).ok()?;
    if m.msg_type() != icmp::ECHO_REPLY || m.msg_code() != 0 || !m.verify_checksum() {
        return None;
    }
    let (id, seq) = (m.echo_ident(), m.echo_seq_no());
    let payload = pkt.get(ip.header_len() + icmp::HEADER_LEN..usize::from(ip.total_len()))?;
    Some((id, seq, payload))
}

pub(super) fn ping_id() -> u16 {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) as u32;
    ((std::process::id() ^ n.wrapping_mul(0x9e37)) & 0xffff) as u16
}

/// A raw ICMP socket that receives echo replies only (`ICMP_FILTER`), bound to `src` when
/// given; `dst` names the target in errors.
pub(super) fn echo_socket(dst: Ipv4Addr, src: Option<Ipv4Addr>) -> Result<Socket> {
    let ctx = |what: &str, e| Error::io(format!("ping {dst}: {what}"), e);
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
        .map_err(|e| ctx("raw ICMP socket", e))?;
    // Only echo replies (type 0) reach the socket: ICMP_FILTER's mask drops the types set.
    const SOL_RAW: libc::c_int = 255;
    const ICMP_FILTER: libc::c_int = 1;
    let mask: u32 = !1u32;
    // SAFETY: passes a valid u32 of the given size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            SOL_RAW,
            ICMP_FILTER,
            (&mask as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        );
    }
    if let Some(src) = src {
        s.bind(&SockAddr::from(SocketAddr::new(IpAddr::V4(src), 0)))
            .map_err(|e| ctx(&format!("bind {src}"), e))?;
    }
    Ok(s)
}

/// [`icmp_ping`] with all options.
pub fn icmp_ping_with(ns: &Netns, dst: Ipv4Addr, o: &PingOpts) -> Result<Vec<Option<Duration>>> {
    let o = o.clone();
    ns.try_run(move || ping_inner(dst, &o))?
}

fn ping_inner(dst: Ipv4Addr, o: &PingOpts) -> Result<Vec<Option<Duration>>> {
    let ctx = |what: &str, e| Error::io(format!("ping {dst}: {what}"), e);
    let s = echo_socket(dst, o.src)?;
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    let to = SockAddr::from(SocketAddr::new(IpAddr::V4(dst), 0));
    let id = ping_id();
    let payload: Vec<u8> = (0..o.payload_len).map(|i| (i & 0xff) as u8).collect();
    let mut results = Vec::with_capacity(o.count);
    let mut buf = [MaybeUninit::<u8>::uninit(); 65536];
    let mut next_send = Instant::now();
    for seq in 0..o.count {
        let now = Instant::now();
        if next_send > now {
            std::thread::sleep(next_send - now);
        }
        let seq16 = seq as u16;
        let pkt = echo_request(id, seq16, &payload);
        let sent = Instant::now();
        next_send = sent + o.interval;
        s.send_to(&pkt, &to).map_err(|e| ctx("send", e))?;
        let deadline = sent + o.timeout;
        let mut rtt = None;
        'wait: loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut fds = [pollfd(s.as_raw_fd(), libc::POLLIN)];
            poll(&mut fds, Some(deadline - now)).map_err(|e| ctx("poll", e))?;
            loop {
                match s.recv(&mut buf) {
                    Ok(n) => {
                        let at = Instant::now();
                        // SAFETY: recv initialised the first n bytes.
                        let pkt: &[u8] =
                            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), n) };
                        if parse_echo_reply(pkt, dst) == Some((id, seq16)) {
                            rtt = Some(at - sent);
                            break 'wait;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ctx("recv", e)),
                }
            }
        }
        results.push(rtt);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::checksum;

    #[test]
    fn checksum_and_echo_roundtrip() {
        // RFC 1071 example: 0001 f203 f4f5 f6f7 sums to ddf2, checksum 220d.
        assert_eq!(
            checksum::checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        let req = echo_request(0x1234, 7, b"abc");
        assert_eq!(checksum::checksum(&req), 0);
        assert_eq!(&req[..2], &[8, 0]);
        // Make it a reply inside an IPv4 header from 10.0.0.2.
        let mut reply = req.clone();
        icmp::Packet::new_checked(&mut reply[..])
            .unwrap()
            .set_msg_type(icmp::ECHO_REPLY);
        assert_eq!(checksum::checksum(&reply), 0);
        let total = (20 + reply.len()) as u8;
        let mut ip = vec![
            0x45, 0, 0, total, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        ip.extend_from_slice(&reply);
        let from = Ipv4Addr::new(10, 0, 0, 2);
        assert_eq!(parse_echo_reply(&ip, from), Some((0x1234, 7)));
        assert_eq!(parse_echo_reply(&ip, Ipv4Addr::new(10, 0, 0, 3)), None);
        ip[25] ^= 1; // corrupt the ICMP part
        assert_eq!(parse_echo_reply(&ip, from), None);
        assert_eq!(parse_echo_reply(&ip[..24], from), None);
    }
}
