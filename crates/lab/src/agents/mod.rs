//! The testbed's own traffic agents, one file per agent:
//!
//! | file | agent |
//! |---|---|
//! | `tcp_sender.rs` | [`TcpSender`]: bulk TCP with explicit TCP settings, for a fixed time |
//! | `tcp_sink.rs` | [`TcpSink`]: receives any number of connections, bytes per interval each |
//! | `tcp_stamped.rs` | [`StampedSender`], [`StampedSink`]: paced, time-stamped TCP records (seed 004 §3.2) |
//! | `tcp_info.rs` | [`TcpInfo`]: the kernel's `TCP_INFO` of a connection |
//! | `icmp.rs` | [`icmp_ping`]: ICMP echo round-trip times on a raw socket |
//! | `pmtu.rs` | [`path_mtu`]: the path MTU by probing with DF-marked UDP (RFC 4821, RFC 6349 §3.1) |
//! | `probe.rs` | [`Prober`], [`UdpReflector`]: periodic UDP (one-way each way) and ICMP latency probes under load |
//! | [`cbr`] | constant-bit-rate UDP sender and sink with kernel timestamps (seed 002) |
//! | [`voip`] | a G.729 call: an RTP stream on the CBR agents (seed 000's VoIP test) |
//! | `dscp_counter.rs` | [`DscpCounter`]: bytes received per flow and DSCP (seed 001's green throughput) |
//! | `echo.rs` | [`EchoProber`], [`EchoResponder`]: seed 004's clock-calibration probes |
//! | `discard.rs` | [`Discard`]: a UDP port that takes a flood and reads none of it |
//!
//! No external tool (iperf, ping) is needed, every byte is accounted, and the agents work at
//! any rate — a 5 kbit/s session included, because nothing in them blocks for longer than
//! the time left: sockets are non-blocking and every wait is a `poll` bounded by the deadline
//! and interruptible by a stop signal (an eventfd). Timestamps come from the monotonic clock
//! (`std::time::Instant`), the CBR agents' from the kernel and `weir_io::clock`.
//!
//! Agents create their sockets inside a namespace ([`Netns::try_run`](crate::topo::Netns::try_run))
//! and then run on ordinary threads: a socket stays in the namespace it was created in. A
//! running agent keeps its namespace alive, so stop agents before dropping the topology
//! (declare them after it).

pub mod cbr;
mod discard;
mod dscp_counter;
mod echo;
mod icmp;
mod pmtu;
mod probe;
mod tcp_info;
mod tcp_sender;
mod tcp_sink;
mod tcp_stamped;
pub mod voip;

pub use discard::Discard;
pub use dscp_counter::{DscpCounter, DscpCounts, DscpReport, FlowId};
pub use echo::{EchoProber, EchoReport, EchoResponder, Probes, PROBE_TIMEOUT};
pub use icmp::{icmp_ping, icmp_ping_with, PingOpts};
pub use pmtu::{path_mtu, MtuProbe, MtuReport, MtuSearch, MIN_SIZE as MIN_MTU_PROBE};
pub use probe::{
    ProbeKind, ProbeOpts, ProbeRecord, ProbeReport, Prober, ReflectorReport, UdpProbe,
    UdpReflector, ICMP_PROBE_PAYLOAD, UDP_PROBE_LEN,
};
pub use tcp_info::{tcp_info, TcpInfo};
pub use tcp_sender::{check_cc, InfoSample, SenderOpts, SenderReport, TcpSender};
pub use tcp_sink::{ConnReport, SinkOpts, SinkReport, TcpSink};
pub use tcp_stamped::{
    StampedSender, StampedSenderOpts, StampedSenderReport, StampedSink, StampedSinkReport,
};
