//! The path MTU by probing, as RFC 6349 section 3.1 asks before a TCP throughput test
//! (Packetization Layer Path MTU Discovery, RFC 4821, done by the test tool itself rather
//! than trusting ICMP "fragmentation needed" messages that a black box may never send).
//!
//! A probe is one UDP datagram to a [`UdpReflector`](super::UdpReflector) carrying a
//! [`UdpProbe`] padded with zeros to the size under test, sent with the Don't Fragment bit
//! and without the kernel's path MTU cache (`IP_PMTUDISC_PROBE`): it crosses the path whole
//! or not at all. A size *passes* when the reflector's (small) reply comes back within the
//! wait, on any of `tries` attempts; a send the local host refuses (`EMSGSIZE`: larger than
//! its own interface) fails it. Sizes are IPv4 packet sizes (IP + UDP headers + payload),
//! the MTU's unit.
//!
//! The search ([`MtuSearch`], sans-IO) tries the largest size first (one probe on the usual
//! path), then bisects between the largest size that passed and the smallest that failed:
//! at most ⌈log2(max − min + 1)⌉ + 1 sizes. The result is the largest size that passed, or
//! none when even `min` fails (the path is down).
//!
//! Only the forward direction is measured (the replies are 36 bytes).

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::probe::{UdpProbe, UDP_PROBE_LEN};
use crate::sys::{poll, pollfd};
use crate::topo::Netns;
use crate::{Error, Result};

/// IPv4 (20) and UDP (8) header bytes in a probe's size.
pub const HEADERS: u32 = 28;
/// The smallest size a probe can have (its headers and the probe's fields).
pub const MIN_SIZE: u32 = HEADERS + UDP_PROBE_LEN as u32;

/// The bisection over sizes `min..=max` (module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtuSearch {
    min: u32,
    max: u32,
    /// The largest size that passed.
    passed: Option<u32>,
    /// The smallest size that failed (`max + 1` while none has).
    failed: u32,
}

impl MtuSearch {
    /// A search over `min..=max` (`min <= max`).
    pub fn new(min: u32, max: u32) -> MtuSearch {
        MtuSearch {
            min,
            max,
            passed: None,
            failed: max + 1,
        }
    }

    /// The next size to probe, or `None` when the MTU is known.
    pub fn next(&self) -> Option<u32> {
        let lo = self.passed.unwrap_or(self.min - 1);
        if self.failed - lo <= 1 {
            return None;
        }
        if self.passed.is_none() && self.failed == self.max + 1 {
            return Some(self.max);
        }
        Some(lo + (self.failed - lo) / 2)
    }

    /// What a probe of `size` did.
    pub fn record(&mut self, size: u32, passed: bool) {
        if passed {
            self.passed = Some(self.passed.map_or(size, |p| p.max(size)));
        } else {
            self.failed = self.failed.min(size);
        }
    }

    /// The largest size that passed so far.
    pub fn mtu(&self) -> Option<u32> {
        self.passed
    }
}

/// One size tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MtuProbe {
    /// IPv4 packet size, bytes.
    pub size: u32,
    pub passed: bool,
    /// Attempts sent (a pass stops the attempts).
    pub attempts: u32,
}

/// What [`path_mtu`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MtuReport {
    /// The largest size that crossed; `None`: not even the smallest.
    pub mtu: Option<u32>,
    /// Every size tried, in order.
    pub probes: Vec<MtuProbe>,
}

/// Probe the path from `ns` (from `src`, if given) to the reflector at `to` for sizes up to
/// `max` bytes, waiting `wait` for each reply and trying each size `tries` times.
pub fn path_mtu(
    ns: &Netns,
    src: Option<Ipv4Addr>,
    to: SocketAddr,
    max: u32,
    wait: Duration,
    tries: u32,
) -> Result<MtuReport> {
    if max < MIN_SIZE || tries == 0 {
        return Err(Error::Invalid(format!(
            "path MTU probe: the largest size must be at least {MIN_SIZE} bytes and tries at least 1 (got {max} and {tries})"
        )));
    }
    let sock = ns.try_run(move || -> Result<Socket> {
        let ctx = |what: &str, e| Error::io(format!("path MTU probe to {to}: {what}"), e);
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| ctx("socket", e))?;
        crate::sys::setsockopt_int(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )
        .map_err(|e| ctx("IP_MTU_DISCOVER", e))?;
        if let Some(a) = src {
            s.bind(&SockAddr::from(SocketAddr::new(a.into(), 0)))
                .map_err(|e| ctx(&format!("bind {a}"), e))?;
        }
        s.connect(&to.into()).map_err(|e| ctx("connect", e))?;
        s.set_nonblocking(true).map_err(|e| ctx("O_NONBLOCK", e))?;
        Ok(s)
    })??;
    let sock = std::net::UdpSocket::from(sock);
    let mut search = MtuSearch::new(MIN_SIZE, max);
    let mut probes = Vec::new();
    let mut seq = 0u64;
    let mut buf = vec![0u8; max as usize];
    while let Some(size) = search.next() {
        crate::check_interrupted()?;
        let mut attempts = 0;
        let mut passed = false;
        while attempts < tries && !passed {
            attempts += 1;
            seq += 1;
            let payload = (size - HEADERS) as usize;
            let p = UdpProbe {
                seq,
                tx_ns: 0,
                far_rx_ns: 0,
                far_tx_ns: 0,
            };
            let pkt = &mut buf[..payload];
            pkt.fill(0);
            pkt[..UDP_PROBE_LEN].copy_from_slice(&p.encode());
            match sock.send(pkt) {
                Ok(_) => {}
                // larger than this host's own interface: the size fails here
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => break,
                Err(e) => return Err(Error::io(format!("path MTU probe of {size} B"), e)),
            }
            passed = wait_reply(&sock, seq, wait)?;
        }
        search.record(size, passed);
        probes.push(MtuProbe {
            size,
            passed,
            attempts,
        });
    }
    Ok(MtuReport {
        mtu: search.mtu(),
        probes,
    })
}

/// Whether the reply to probe `seq` arrives within `wait` (older replies are skipped).
fn wait_reply(sock: &std::net::UdpSocket, seq: u64, wait: Duration) -> Result<bool> {
    let deadline = Instant::now() + wait;
    let mut rx = [0u8; 256];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        let mut fds = [pollfd(sock.as_raw_fd(), libc::POLLIN)];
        poll(&mut fds, Some(deadline - now)).map_err(|e| Error::io("path MTU probe: poll", e))?;
        loop {
            match sock.recv(&mut rx) {
                Ok(n) => {
                    if UdpProbe::decode(&rx[..n]).is_some_and(|p| p.seq == seq) {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // an ICMP error queued on the connected socket (e.g. port unreachable)
                Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search on a path whose MTU is `mtu`: (result, sizes tried).
    fn search(min: u32, max: u32, mtu: u32) -> (Option<u32>, Vec<u32>) {
        let mut s = MtuSearch::new(min, max);
        let mut tried = Vec::new();
        while let Some(size) = s.next() {
            assert!(!tried.contains(&size), "tried {size} twice");
            tried.push(size);
            s.record(size, size <= mtu);
        }
        (s.mtu(), tried)
    }

    #[test]
    fn the_usual_path_takes_one_probe() {
        assert_eq!(search(64, 1500, 1500), (Some(1500), vec![1500]));
        assert_eq!(search(64, 1500, 9000), (Some(1500), vec![1500]));
    }

    #[test]
    fn a_smaller_mtu_is_found_by_bisection() {
        // 1500 fails; lo = 63, hi = 1500: 781 passes, then between 781 and 1500 ...
        let (mtu, tried) = search(64, 1500, 1492);
        assert_eq!(mtu, Some(1492));
        assert_eq!(&tried[..3], &[1500, 781, 1140]);
        // 1 + ceil(log2(1437)) = 12 sizes at most
        assert!(tried.len() <= 12, "{tried:?}");
        for m in [64, 65, 576, 1280, 1499] {
            let (got, tried) = search(64, 1500, m);
            assert_eq!(got, Some(m), "{m}");
            assert!(tried.len() <= 12, "{m}: {tried:?}");
        }
    }

    #[test]
    fn a_dead_path_has_no_mtu() {
        let (mtu, tried) = search(64, 1500, 10);
        assert_eq!(mtu, None);
        assert_eq!(tried.last(), Some(&64), "the smallest size was tried");
    }

    #[test]
    fn probes_cross_loopback_up_to_the_largest_size_asked() {
        // loopback's MTU (65,536) is above the sizes asked: the largest passes at once
        let ns = Netns::host().unwrap();
        let refl =
            super::super::UdpReflector::start(&ns, "127.0.0.1:0".parse().unwrap(), None).unwrap();
        let r = path_mtu(
            &ns,
            None,
            refl.local_addr(),
            1500,
            Duration::from_secs(1),
            2,
        )
        .unwrap();
        assert_eq!(r.mtu, Some(1500));
        assert_eq!(r.probes.len(), 1);
        // nothing listens on the reflector's port once it stops: every size fails
        let to = refl.local_addr();
        refl.stop();
        let r = path_mtu(&ns, None, to, 100, Duration::from_millis(20), 1).unwrap();
        assert_eq!(r.mtu, None, "{r:?}");
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_runs() {
        let ns = Netns::host().unwrap();
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let e = path_mtu(&ns, None, to, 40, Duration::from_millis(1), 1).unwrap_err();
        assert!(e.to_string().contains("at least 64"), "{e}");
        assert!(path_mtu(&ns, None, to, 1500, Duration::from_millis(1), 0).is_err());
    }
}
