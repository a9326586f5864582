//! Latency probes under load (Flent's "Ping (ms) UDP" and "Ping (ms) ICMP" beside the
//! RRUL load): [`Prober`] sends one small probe every `interval` and records, per probe,
//! its send time and the kernel receive time of its reply.
//!
//! * **UDP** ([`ProbeKind::Udp`]): a 36-byte datagram to a [`UdpReflector`], which writes
//!   its own kernel receive time and its send time into the probe and returns it to the
//!   sender (as TWAMP-light or irtt do). Prober and reflector are namespaces of one machine
//!   and share `CLOCK_REALTIME`, so the **one-way delay each way** is measured directly:
//!   up = far receive − send, down = receive − far send, and the round trip is up + down
//!   (the reflector's turnaround, a few µs, is left out).
//! * **ICMP** ([`ProbeKind::Icmp`]): an echo request (56 bytes of payload, the first 8 the
//!   probe's 64-bit sequence number) on a raw socket; the target's kernel answers; round
//!   trip only.
//!
//! # The UDP probe (all integers big-endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `WPRB` |
//! | 4 | 8 | sequence number, 0, 1, 2, … |
//! | 12 | 8 | send time, ns of `CLOCK_REALTIME`, read just before `send` |
//! | 20 | 8 | the reflector's kernel receive time (`SO_TIMESTAMPNS`; 0 in a request) |
//! | 28 | 8 | the reflector's send time, read just before its `send` (0 in a request) |
//!
//! A 36-byte payload makes a 78-byte Ethernet frame: 100 probes/s are 62 kbit/s each way.
//!
//! # Schedule and stop
//!
//! Probe `k` is due at `start + k · interval` on the monotonic clock (waits in `ppoll` with
//! 1 ns timer slack): an absolute schedule, so lateness never accumulates. A probe more than
//! one interval late is not sent (its slot is counted in `skipped`): a descheduled prober
//! does not send a burst that would measure itself. [`Prober::finish`] stops sending and
//! waits up to `grace` for the replies still in flight, less once every probe is answered.
//! A reply is matched to its probe by the sequence number it carries; a second reply to one
//! probe counts in `duplicates`; replies that are not this prober's (another prober's id,
//! another magic) in `ignored`. Receive times are the kernel's (`SO_TIMESTAMPNS`), so the
//! prober's own scheduling does not move them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use weir_io::clock::{monotonic_ns, realtime_ns, set_timer_slack_1ns};

use super::icmp::{echo_reply, echo_request, echo_socket, ping_id};
use crate::sys::{poll, pollfd, recv_stamped, setsockopt_int, Waker, Worker};
use crate::topo::Netns;
use crate::{Error, Result};

/// Magic at the start of a UDP probe: ASCII "WPRB".
pub const UDP_PROBE_MAGIC: u32 = u32::from_be_bytes(*b"WPRB");
/// Bytes of a UDP probe's payload.
pub const UDP_PROBE_LEN: usize = 36;
/// Bytes of an ICMP probe's payload (the usual `ping`'s 56).
pub const ICMP_PROBE_PAYLOAD: usize = 56;

/// What is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// UDP to a [`UdpReflector`]: one-way delays and round trip.
    Udp,
    /// ICMP echo: round trip.
    Icmp,
}

impl ProbeKind {
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Udp => "udp",
            ProbeKind::Icmp => "icmp",
        }
    }
}

/// A UDP probe's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpProbe {
    pub seq: u64,
    pub tx_ns: u64,
    pub far_rx_ns: u64,
    pub far_tx_ns: u64,
}

impl UdpProbe {
    /// The probe's [`UDP_PROBE_LEN`] bytes.
    pub fn encode(&self) -> [u8; UDP_PROBE_LEN] {
        let mut b = [0u8; UDP_PROBE_LEN];
        b[0..4].copy_from_slice(&UDP_PROBE_MAGIC.to_be_bytes());
        b[4..12].copy_from_slice(&self.seq.to_be_bytes());
        b[12..20].copy_from_slice(&self.tx_ns.to_be_bytes());
        b[20..28].copy_from_slice(&self.far_rx_ns.to_be_bytes());
        b[28..36].copy_from_slice(&self.far_tx_ns.to_be_bytes());
        b
    }

    /// Parses a probe; `None` if too short or without the magic.
    pub fn decode(b: &[u8]) -> Option<UdpProbe> {
        let b: &[u8; UDP_PROBE_LEN] = b.get(..UDP_PROBE_LEN)?.try_into().ok()?;
        let word = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        (u32::from_be_bytes([b[0], b[1], b[2], b[3]]) == UDP_PROBE_MAGIC).then(|| UdpProbe {
            seq: word(4),
            tx_ns: word(12),
            far_rx_ns: word(20),
            far_tx_ns: word(28),
        })
    }
}

/// Settings of a [`Prober`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeOpts {
    pub kind: ProbeKind,
    /// Source address to bind; `None`: the kernel chooses.
    pub src: Option<Ipv4Addr>,
    /// The reflector (UDP) or the host to ping (ICMP; the port is ignored).
    pub dst: SocketAddr,
    /// Time between two probes.
    pub interval: Duration,
    /// IPv4 TOS byte of the probes (DSCP << 2).
    pub tos: Option<u8>,
    /// After [`Prober::finish`]: longest wait for replies still in flight.
    pub grace: Duration,
}

impl ProbeOpts {
    /// `kind` probes to `dst` every `interval`, 1 s of grace, unmarked.
    pub fn new(kind: ProbeKind, dst: SocketAddr, interval: Duration) -> ProbeOpts {
        ProbeOpts {
            kind,
            src: None,
            dst,
            interval,
            tos: None,
            grace: Duration::from_secs(1),
        }
    }
}

/// One probe: when it left and, if a reply came, when (ns of `CLOCK_REALTIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub seq: u64,
    pub tx_ns: u64,
    /// Kernel receive time of the reply.
    pub rx_ns: Option<u64>,
    /// UDP: the reflector's receive and send times.
    pub far_rx_ns: Option<u64>,
    pub far_tx_ns: Option<u64>,
}

impl ProbeRecord {
    /// Round trip, ns: up + down for a UDP probe (the reflector's turnaround left out),
    /// reply − send for ICMP.
    pub fn rtt_ns(&self) -> Option<i64> {
        match (self.up_ns(), self.down_ns()) {
            (Some(u), Some(d)) => Some(u + d),
            _ => Some(self.rx_ns? as i64 - self.tx_ns as i64),
        }
    }
    /// UDP: far receive − send, ns.
    pub fn up_ns(&self) -> Option<i64> {
        Some(self.far_rx_ns? as i64 - self.tx_ns as i64)
    }
    /// UDP: receive − far send, ns (only once the reply came).
    pub fn down_ns(&self) -> Option<i64> {
        Some(self.rx_ns? as i64 - self.far_tx_ns? as i64)
    }
}

/// What a [`Prober`] did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Every probe sent, in order.
    pub records: Vec<ProbeRecord>,
    /// Slots not sent because the prober was more than one interval late.
    pub skipped: u64,
    /// Probes `send` refused (counted, the slot used up).
    pub send_errors: u64,
    /// Second replies to one probe.
    pub duplicates: u64,
    /// The probes (sequence numbers) that had a second reply, once each.
    #[serde(default)]
    pub duplicated: Vec<u64>,
    /// Datagrams that were not replies to this prober.
    pub ignored: u64,
    pub error: Option<String>,
}

/// A periodic prober on its own thread; [`Prober::finish`] ends it.
#[derive(Debug)]
pub struct Prober {
    worker: Worker<ProbeReport>,
}

impl Prober {
    /// Opens the socket in `ns` and starts probing at once.
    pub fn start(ns: &Netns, opts: ProbeOpts) -> Result<Prober> {
        if opts.interval.is_zero() {
            return Err(Error::Invalid("probe interval must be > 0".into()));
        }
        let o = opts.clone();
        let sock = ns.try_run(move || open_prober(&o))??;
        let worker = Worker::spawn(
            format!("probe-{}:{}", opts.kind.name(), opts.dst),
            "prober",
            move |waker| probe_loop(&sock, &opts, waker),
        )?;
        Ok(Prober { worker })
    }

    /// Stops sending, waits (at most the grace) for the replies in flight, and reports.
    pub fn finish(self) -> ProbeReport {
        self.worker.stop()
    }
}

fn open_prober(o: &ProbeOpts) -> Result<Socket> {
    let dst = o.dst;
    let ctx = |what: &str, e| Error::io(format!("{} prober to {dst}: {what}", o.kind.name()), e);
    let s = match o.kind {
        ProbeKind::Udp => {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
                .map_err(|e| ctx("socket", e))?;
            let src = o.src.unwrap_or(Ipv4Addr::UNSPECIFIED);
            s.bind(&SockAddr::from(SocketAddr::new(IpAddr::V4(src), 0)))
                .map_err(|e| ctx("bind", e))?;
            s
        }
        ProbeKind::Icmp => {
            let IpAddr::V4(d) = dst.ip() else {
                return Err(Error::Invalid(format!("ICMP probes to {dst}: IPv4 only")));
            };
            echo_socket(d, o.src)?
        }
    };
    let fd = s.as_raw_fd();
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
        .map_err(|e| ctx("SO_TIMESTAMPNS", e))?;
    if let Some(t) = o.tos {
        s.set_tos_v4(u32::from(t)).map_err(|e| ctx("IP_TOS", e))?;
    }
    s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
    Ok(s)
}

/// The request of probe `seq` sent at `tx_ns`.
fn request(kind: ProbeKind, icmp_id: u16, seq: u64, tx_ns: u64) -> Vec<u8> {
    match kind {
        ProbeKind::Udp => UdpProbe {
            seq,
            tx_ns,
            far_rx_ns: 0,
            far_tx_ns: 0,
        }
        .encode()
        .to_vec(),
        ProbeKind::Icmp => {
            let mut payload = [0u8; ICMP_PROBE_PAYLOAD];
            payload[..8].copy_from_slice(&seq.to_be_bytes());
            echo_request(icmp_id, seq as u16, &payload)
        }
    }
}

/// A reply's sequence number and (UDP) the far end's stamps.
fn reply(
    kind: ProbeKind,
    icmp_id: u16,
    dst: SocketAddr,
    pkt: &[u8],
) -> Option<(u64, Option<(u64, u64)>)> {
    match kind {
        ProbeKind::Udp => UdpProbe::decode(pkt).map(|p| (p.seq, Some((p.far_rx_ns, p.far_tx_ns)))),
        ProbeKind::Icmp => {
            let IpAddr::V4(from) = dst.ip() else {
                return None;
            };
            let (id, seq16, payload) = echo_reply(pkt, from)?;
            let seq = u64::from_be_bytes(payload.get(..8)?.try_into().ok()?);
            (id == icmp_id && seq as u16 == seq16).then_some((seq, None))
        }
    }
}

fn probe_loop(sock: &Socket, o: &ProbeOpts, waker: &Waker) -> ProbeReport {
    let _ = set_timer_slack_1ns();
    let mut rep = ProbeReport::default();
    let fd = sock.as_raw_fd();
    let to = SockAddr::from(o.dst);
    let icmp_id = ping_id();
    let interval = o.interval.as_nanos() as u64;
    let start = monotonic_ns();
    let mut slot: u64 = 0;
    let mut answered: u64 = 0;
    // monotonic deadline of the grace period, once stopping
    let mut stop_at: Option<u64> = None;
    let mut buf = [0u8; 2048];
    loop {
        let now = monotonic_ns();
        if stop_at.is_none() {
            let due = start + slot * interval;
            if now >= due {
                if now >= due + interval {
                    // more than one interval late: skip to the current slot
                    let cur = (now - start) / interval;
                    rep.skipped += cur - slot;
                    slot = cur;
                    continue;
                }
                let seq = rep.records.len() as u64;
                let tx_ns = realtime_ns();
                let pkt = request(o.kind, icmp_id, seq, tx_ns);
                if sock.send_to(&pkt, &to).is_err() {
                    rep.send_errors += 1;
                }
                rep.records.push(ProbeRecord {
                    seq,
                    tx_ns,
                    rx_ns: None,
                    far_rx_ns: None,
                    far_tx_ns: None,
                });
                slot += 1;
                continue;
            }
        }
        let deadline = stop_at.unwrap_or(start + slot * interval);
        let mut fds = [pollfd(fd, libc::POLLIN), pollfd(waker.fd(), libc::POLLIN)];
        // the stop signal stays readable once raised: watch it only until then
        let watch = if stop_at.is_none() { 2 } else { 1 };
        let wait = Duration::from_nanos(deadline.saturating_sub(now));
        if let Err(e) = poll(&mut fds[..watch], Some(wait)) {
            rep.error = Some(format!("poll: {e}"));
            break;
        }
        if watch == 2 && fds[1].revents != 0 {
            stop_at = Some(monotonic_ns() + o.grace.as_nanos() as u64);
        }
        loop {
            match recv_stamped(fd, &mut buf) {
                Ok(Some((n, _, rx))) => {
                    let rx_ns = rx.unwrap_or_else(realtime_ns);
                    match reply(o.kind, icmp_id, o.dst, &buf[..n]) {
                        Some((seq, far)) if (seq as usize) < rep.records.len() => {
                            let r = &mut rep.records[seq as usize];
                            if r.rx_ns.is_some() {
                                rep.duplicates += 1;
                                if rep.duplicated.last() != Some(&r.seq) {
                                    rep.duplicated.push(r.seq);
                                }
                            } else {
                                r.rx_ns = Some(rx_ns);
                                if let Some((frx, ftx)) = far {
                                    r.far_rx_ns = Some(frx);
                                    r.far_tx_ns = Some(ftx);
                                }
                                answered += 1;
                            }
                        }
                        _ => rep.ignored += 1,
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    rep.error = Some(format!("recv: {e}"));
                    return rep;
                }
            }
        }
        if let Some(t) = stop_at {
            let all = answered + rep.send_errors >= rep.records.len() as u64;
            if all || monotonic_ns() >= t {
                break;
            }
        }
    }
    rep
}

/// What a [`UdpReflector`] did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReflectorReport {
    pub reflected: u64,
    /// Datagrams without the probe magic, and replies `send` refused.
    pub ignored: u64,
    pub send_errors: u64,
    pub error: Option<String>,
}

/// The far end of the UDP probes: stamps and returns every probe it receives.
#[derive(Debug)]
pub struct UdpReflector {
    local: SocketAddr,
    worker: Worker<ReflectorReport>,
}

impl UdpReflector {
    /// Binds `bind` in `ns` (replies marked with `tos`, if given) and starts reflecting.
    pub fn start(ns: &Netns, bind: SocketAddr, tos: Option<u8>) -> Result<UdpReflector> {
        let sock = ns.try_run(move || -> Result<Socket> {
            let ctx = |what: &str, e| Error::io(format!("UDP reflector {bind}: {what}"), e);
            let s = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))
                .map_err(|e| ctx("socket", e))?;
            setsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
                .map_err(|e| ctx("SO_TIMESTAMPNS", e))?;
            if let Some(t) = tos {
                s.set_tos_v4(u32::from(t)).map_err(|e| ctx("IP_TOS", e))?;
            }
            s.bind(&bind.into()).map_err(|e| ctx("bind", e))?;
            s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
            Ok(s)
        })??;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Invalid("reflector socket has no local address".into()))?;
        let worker = Worker::spawn(format!("reflector:{local}"), "reflector", move |w| {
            reflect_loop(&sock, w)
        })?;
        Ok(UdpReflector { local, worker })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops and reports.
    pub fn stop(self) -> ReflectorReport {
        self.worker.stop()
    }
}

fn reflect_loop(sock: &Socket, waker: &Waker) -> ReflectorReport {
    let mut rep = ReflectorReport::default();
    let fd = sock.as_raw_fd();
    let mut buf = [0u8; 2048];
    loop {
        let mut fds = [pollfd(fd, libc::POLLIN), pollfd(waker.fd(), libc::POLLIN)];
        if let Err(e) = poll(&mut fds, None) {
            rep.error = Some(format!("poll: {e}"));
            break;
        }
        if fds[1].revents != 0 {
            break;
        }
        loop {
            match recv_stamped(fd, &mut buf) {
                Ok(Some((n, from, rx))) => {
                    let Some(mut p) = UdpProbe::decode(&buf[..n]) else {
                        rep.ignored += 1;
                        continue;
                    };
                    p.far_rx_ns = rx.unwrap_or_else(realtime_ns);
                    p.far_tx_ns = realtime_ns();
                    match sock.send_to(&p.encode(), &SockAddr::from(from)) {
                        Ok(_) => rep.reflected += 1,
                        Err(_) => rep.send_errors += 1,
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    rep.error = Some(format!("recv: {e}"));
                    return rep;
                }
            }
        }
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_probe_layout_and_roundtrip() {
        let p = UdpProbe {
            seq: 0x0102_0304_0506_0708,
            tx_ns: 0x1112_1314_1516_1718,
            far_rx_ns: 0x2122_2324_2526_2728,
            far_tx_ns: 0x3132_3334_3536_3738,
        };
        let b = p.encode();
        assert_eq!(&b[..4], b"WPRB");
        assert_eq!(b[4], 0x01);
        assert_eq!(b[12], 0x11);
        assert_eq!(b[20], 0x21);
        assert_eq!(b[35], 0x38);
        assert_eq!(UdpProbe::decode(&b), Some(p));
        assert_eq!(UdpProbe::decode(&b[..35]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(UdpProbe::decode(&bad), None);
        // 14 + 20 + 8 + 36 = a 78-byte frame
        assert_eq!(14 + 20 + 8 + UDP_PROBE_LEN, 78);
    }

    #[test]
    fn delays_of_a_record() {
        // sent at 1000, reflector got it at 1400 and sent at 1410, back at 1700 (ns)
        let r = ProbeRecord {
            seq: 0,
            tx_ns: 1000,
            rx_ns: Some(1700),
            far_rx_ns: Some(1400),
            far_tx_ns: Some(1410),
        };
        assert_eq!(r.up_ns(), Some(400));
        assert_eq!(r.down_ns(), Some(290));
        assert_eq!(r.rtt_ns(), Some(690), "the 10 ns turnaround is left out");
        let icmp = ProbeRecord {
            far_rx_ns: None,
            far_tx_ns: None,
            ..r
        };
        assert_eq!(icmp.rtt_ns(), Some(700));
        assert_eq!(icmp.up_ns(), None);
        let lost = ProbeRecord {
            rx_ns: None,
            far_rx_ns: None,
            far_tx_ns: None,
            ..r
        };
        assert_eq!(lost.rtt_ns(), None);
    }

    #[test]
    fn icmp_request_carries_the_full_sequence_number() {
        let req = request(ProbeKind::Icmp, 0x1234, 70_000, 5);
        // echo header: type 8, code 0, checksum, id, seq (70 000 mod 65 536 = 4464)
        assert_eq!(req[0], 8);
        assert_eq!(u16::from_be_bytes([req[4], req[5]]), 0x1234);
        assert_eq!(u16::from_be_bytes([req[6], req[7]]), 4464);
        assert_eq!(u64::from_be_bytes(req[8..16].try_into().unwrap()), 70_000);
        assert_eq!(req.len(), 8 + ICMP_PROBE_PAYLOAD);
    }
}
