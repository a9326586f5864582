//! A passive per-flow, per-DSCP counter: [`DscpCounter`] reads every IP frame an interface
//! receives (an `AF_PACKET` socket, outgoing frames ignored) and adds up, per flow (5-tuple)
//! and DSCP, the frames, the IP bytes and the transport payload bytes. Seed 001's "green
//! throughput" of a TCP flow is its payload bytes carried as AF11 at the receiver; its
//! throughput is all of its payload bytes (retransmissions included), its goodput what the
//! sink read.
//!
//! The receiving host keeps its offloads on, so a frame may be a GRO super-packet of several
//! segments: bytes are exact (the IP total length covers every segment, and GRO merges only
//! segments with one TOS byte), frame counts are then lower than segment counts. Frames that
//! do not parse as IPv4/IPv6 are counted in `unparsed` and otherwise ignored.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::sys::{poll, pollfd, Waker, Worker};
use crate::topo::Netns;
use crate::{Error, Result};

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20; not in every libc release).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// One direction of a flow: addresses, ports (0 without) and IP protocol.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowId {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub proto: u8,
}

/// Per DSCP (index 0..64): frames, IP bytes, transport payload bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DscpCounts {
    pub frames: Vec<u64>,
    pub ip_bytes: Vec<u64>,
    pub payload_bytes: Vec<u64>,
}

impl Default for DscpCounts {
    fn default() -> Self {
        DscpCounts {
            frames: vec![0; 64],
            ip_bytes: vec![0; 64],
            payload_bytes: vec![0; 64],
        }
    }
}

impl DscpCounts {
    /// Payload bytes over every DSCP.
    pub fn payload_total(&self) -> u64 {
        self.payload_bytes.iter().sum()
    }
    /// Payload bytes carried with one of `dscps`.
    pub fn payload_of(&self, dscps: &[u8]) -> u64 {
        dscps
            .iter()
            .map(|&d| self.payload_bytes.get(d as usize).copied().unwrap_or(0))
            .sum()
    }
    fn add(&mut self, o: &DscpCounts) {
        for (a, b) in [
            (&mut self.frames, &o.frames),
            (&mut self.ip_bytes, &o.ip_bytes),
            (&mut self.payload_bytes, &o.payload_bytes),
        ] {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
}

/// What a [`DscpCounter`] saw.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DscpReport {
    /// Per flow, sorted by flow.
    pub flows: Vec<(FlowId, DscpCounts)>,
    /// Frames read in all.
    pub frames: u64,
    /// Frames that were not IPv4/IPv6 or did not parse.
    pub unparsed: u64,
    /// An error that stopped the counter early, if any.
    pub error: Option<String>,
}

impl DscpReport {
    /// The counts of the flows from `src` (any destination, any protocol), summed.
    pub fn from_source(&self, src: SocketAddr) -> DscpCounts {
        self.sum_where(|f| f.src == src)
    }

    /// The counts of the flows `keep` selects, summed.
    pub fn sum_where(&self, keep: impl Fn(&FlowId) -> bool) -> DscpCounts {
        let mut sum = DscpCounts::default();
        for (_, c) in self.flows.iter().filter(|(f, _)| keep(f)) {
            sum.add(c);
        }
        sum
    }
}

/// Counts what interface `ifname` of a namespace receives, per flow and DSCP, until
/// stopped.
#[derive(Debug)]
pub struct DscpCounter {
    worker: Worker<DscpReport>,
}

impl DscpCounter {
    /// Starts counting on `ifname` in `ns`; the socket is bound when this returns.
    pub fn start(ns: &Netns, ifname: &str) -> Result<DscpCounter> {
        let name = ifname.to_string();
        let fd = ns.try_run(move || open(&name))??;
        let worker = Worker::spawn(format!("dscp:{ifname}"), "dscp counter", move |w| {
            count_loop(fd, w)
        })?;
        Ok(DscpCounter { worker })
    }

    /// Stops and returns what was counted.
    pub fn stop(self) -> DscpReport {
        self.worker.stop()
    }
}

/// An `AF_PACKET` socket for IP frames received on `ifname` (outgoing ignored).
fn open(ifname: &str) -> Result<OwnedFd> {
    let ctx = |what: &str, e| Error::io(format!("dscp counter on {ifname}: {what}"), e);
    let cname = std::ffi::CString::new(ifname)
        .map_err(|_| Error::Invalid(format!("interface name {ifname:?}")))?;
    // SAFETY: a NUL-terminated name; the result is checked.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(ctx("if_nametoindex", io::Error::last_os_error()));
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            proto as libc::c_int,
        )
    };
    if fd < 0 {
        return Err(ctx("socket(AF_PACKET)", io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: a c_int option value of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(ctx("PACKET_IGNORE_OUTGOING", io::Error::last_os_error()));
    }
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index as i32;
    // SAFETY: binds to a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(ctx("bind", io::Error::last_os_error()));
    }
    Ok(fd)
}

fn count_loop(fd: OwnedFd, waker: &Waker) -> DscpReport {
    let mut flows: HashMap<FlowId, DscpCounts> = HashMap::new();
    let mut report = DscpReport::default();
    let mut buf = vec![0u8; 65_536 + 64];
    'run: loop {
        let mut fds = [
            pollfd(fd.as_raw_fd(), libc::POLLIN),
            pollfd(waker.fd(), libc::POLLIN),
        ];
        if let Err(e) = poll(&mut fds, None) {
            report.error = Some(format!("poll: {e}"));
            break;
        }
        if fds[1].revents != 0 {
            break;
        }
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    break;
                }
                report.error = Some(format!("recv: {e}"));
                break 'run;
            }
            report.frames += 1;
            match count(&buf[..n as usize]) {
                Some((id, dscp, ip, payload)) => {
                    let c = flows.entry(id).or_default();
                    let d = dscp as usize;
                    c.frames[d] += 1;
                    c.ip_bytes[d] += ip;
                    c.payload_bytes[d] += payload;
                }
                None => report.unparsed += 1,
            }
        }
    }
    let mut flows: Vec<_> = flows.into_iter().collect();
    flows.sort_by_key(|(f, _)| *f);
    report.flows = flows;
    report
}

/// A received frame's flow, DSCP, IP bytes and transport payload bytes (`None`: not IP).
fn count(frame: &[u8]) -> Option<(FlowId, u8, u64, u64)> {
    let p = weir_wire::parse_frame(frame).ok()?;
    let (src, dst, dscp, proto) = (p.src_ip?, p.dst_ip?, p.dscp?, p.protocol?);
    let port = |x: Option<u16>| x.unwrap_or(0);
    let id = FlowId {
        src: SocketAddr::new(src, port(p.src_port)),
        dst: SocketAddr::new(dst, port(p.dst_port)),
        proto,
    };
    let ip = p.l3_end.saturating_sub(p.l3_offset) as u64;
    let payload = p.l3_end.saturating_sub(p.payload_offset) as u64;
    Some((id, dscp, ip, payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};

    #[test]
    fn a_frame_counts_its_flow_dscp_and_payload() {
        let mut buf = [0u8; 2048];
        let ip = Ipv4Spec {
            dscp: 10,
            ..Ipv4Spec::default()
        };
        let tcp = TcpSpec {
            src_port: 40000,
            dst_port: 5001,
            ..Default::default()
        };
        let n =
            build::tcp_v4_frame(&mut buf, &EthSpec::default(), &ip, &tcp, &[7u8; 1000]).unwrap();
        let (id, dscp, ipb, pay) = count(&buf[..n]).unwrap();
        assert_eq!(id.src, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(id.dst, "10.0.0.2:5001".parse().unwrap());
        assert_eq!((id.proto, dscp, ipb, pay), (6, 10, 1040, 1000));
        assert_eq!(count(&buf[..10]), None);
        let mut c = DscpCounts::default();
        c.payload_bytes[10] = 5;
        c.payload_bytes[12] = 7;
        assert_eq!((c.payload_of(&[10]), c.payload_total()), (5, 12));
    }
}
