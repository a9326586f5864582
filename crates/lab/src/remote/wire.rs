//! The agent protocol: JSON lines on the SSH channel's standard input and output.
//!
//! The lab writes one [`Request`] per line and `weir agent` answers each with one
//! [`Reply`] per line carrying the request's `id`; requests are handled concurrently (a
//! `join` waits for its agent without holding up a `stop`), so replies may come out of
//! order. A request the agent cannot parse is answered with `id` 0 and an error.
//!
//! ```text
//! > {"id":1,"op":"hello"}
//! < {"id":1,"ok":{"protocol":1,"version":"0.1.0","hostname":"h1"}}
//! > {"id":2,"op":"start","agent":{"kind":"tcp_sink","opts":{...}}}
//! < {"id":2,"ok":{"handle":1}}
//! > {"id":3,"op":"stop","handle":1}
//! < {"id":3,"ok":{...the agent's report...}}
//! ```
//!
//! Instants do not cross hosts: a sender's latest stop time travels as microseconds from
//! the moment the agent reads the request (`until_us`), so it is late by the channel's
//! one-way delay (a few ms on a LAN).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_io::ethtool::Offloads;

use std::net::{Ipv4Addr, SocketAddr};

use crate::agents::cbr::{CbrSenderOpts, CbrSinkOpts};
use crate::agents::{ProbeOpts, SenderOpts, SinkOpts, StampedSenderOpts};
use crate::stats::skew::ReceiverClock;
use crate::tests::streams::FiguresOf;

/// The protocol's version: `hello` refuses a peer that speaks another.
pub const PROTOCOL: u32 = 4;

/// One request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the lab, unique on the channel (never 0).
    pub id: u64,
    /// What to do.
    #[serde(flatten)]
    pub op: Op,
}

/// What a request asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// The agent's [`Hello`].
    Hello,
    /// The host's `CLOCK_REALTIME`, ns since the Unix epoch (a JSON number).
    Clock,
    /// Nothing: the lab's keep-alive (the agent ends a session that stays silent).
    Ping,
    /// Write a sysctl (dotted, `net.ipv4.tcp_sack`); the old value is written back when
    /// the session ends.
    Sysctl { key: String, value: String },
    /// Set an interface's offloads (`None` fields untouched); the old ones are set back
    /// when the session ends.
    Offloads { ifname: String, want: Offloads },
    /// `ip link set IFNAME up` (set down again when the session ends, if it was down), and
    /// wait until it has carrier (3 s); an error when the interface does not exist.
    LinkUp { ifname: String },
    /// `ip addr add CIDR dev IFNAME`; removed when the session ends.
    AddrAdd { ifname: String, cidr: String },
    /// `ip route add DST dev IFNAME`, or with `rto_min_ms` `ip route replace DST dev
    /// IFNAME rto_min Nms` (the minimum retransmission timeout of TCP on that route, for
    /// a route the session's own address made); removed when the session ends.
    RouteAdd {
        dst: String,
        ifname: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rto_min_ms: Option<u64>,
    },
    /// Start an agent; the reply is `{"handle": N}`.
    Start { agent: Box<StartAgent> },
    /// Stop agent `handle` now; the reply is its report.
    Stop { handle: u64 },
    /// Wait until agent `handle` is done by itself; the reply is its report.
    Join { handle: u64 },
    /// A CBR sink (`handle`): wait until `expected` packets arrived or none for `idle_us`,
    /// then stop it; the reply is the stream's
    /// [`StreamFigures`](crate::tests::streams::StreamFigures), computed here from `of`
    /// (a trial of small frames is millions of records).
    Drain {
        handle: u64,
        expected: u64,
        idle_us: u64,
        of: FiguresOf,
    },
    /// A CBR sink (`handle`), as `Drain`, but the reply is every record
    /// ([`CbrRecords`](crate::agents::cbr::CbrRecords)): for streams whose analysis needs
    /// each packet (voice calls), of a few thousand packets.
    Records {
        handle: u64,
        expected: u64,
        idle_us: u64,
    },
    /// Read a sysctl (dotted); the reply is its value as a string.
    SysctlGet { key: String },
}

/// The agents a remote host runs, with their options.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StartAgent {
    /// A [`TcpSink`](crate::agents::TcpSink); its report is a
    /// [`SinkReport`](crate::agents::SinkReport).
    TcpSink {
        opts: SinkOpts,
        /// `opts.epoch` as µs before the agent reads the request.
        #[serde(default)]
        epoch_ago_us: Option<u64>,
    },
    /// A [`TcpSender`](crate::agents::TcpSender); its report is a
    /// [`SenderReport`](crate::agents::SenderReport).
    TcpSender {
        opts: SenderOpts,
        /// `opts.until` as µs from when the agent reads the request.
        #[serde(default)]
        until_us: Option<u64>,
        /// `opts.info_origin` as µs before the agent reads the request.
        #[serde(default)]
        origin_ago_us: Option<u64>,
    },
    /// A [`Prober`](crate::agents::Prober); its report (at `stop`) is a
    /// [`ProbeReport`](crate::agents::ProbeReport).
    Prober { opts: ProbeOpts },
    /// A [`UdpReflector`](crate::agents::UdpReflector); its report is a
    /// [`ReflectorReport`](crate::agents::ReflectorReport).
    UdpReflector { bind: SocketAddr, tos: Option<u8> },
    /// A [`CbrSender`](crate::agents::cbr::CbrSender); its report is a
    /// [`CbrSenderReport`](crate::agents::cbr::CbrSenderReport).
    CbrSender { opts: CbrSenderOpts },
    /// A [`CbrSink`](crate::agents::cbr::CbrSink); end it with [`Op::Drain`] (or `stop`).
    CbrSink { opts: CbrSinkOpts },
    /// A [`DscpCounter`](crate::agents::DscpCounter) on the host's interface `ifname`; its
    /// report (at `stop`) is a [`DscpReport`](crate::agents::DscpReport).
    DscpCounter { ifname: String },
    /// [`path_mtu`](crate::agents::path_mtu) from `src` to the reflector at `to`; its
    /// report (at `join`) is a [`MtuReport`](crate::agents::MtuReport).
    PathMtu {
        src: Option<Ipv4Addr>,
        to: SocketAddr,
        max: u32,
        wait_us: u64,
        tries: u32,
    },
    /// A [`StampedSink`](crate::agents::StampedSink) on `bind`; its report (at `stop`) is
    /// a [`StampedSinkReport`](crate::agents::StampedSinkReport).
    StampedSink { bind: SocketAddr, record_len: usize },
    /// A [`StampedSender`](crate::agents::StampedSender); its report (at `join`) is a
    /// [`StampedSenderReport`](crate::agents::StampedSenderReport).
    StampedSender { opts: StampedSenderOpts },
    /// An [`EchoResponder`](crate::agents::EchoResponder) on `bind` stamping with
    /// `clock`; its report (at `stop`) is an [`EchoReport`](crate::agents::EchoReport).
    EchoResponder {
        bind: SocketAddr,
        clock: ReceiverClock,
    },
    /// An [`EchoProber`](crate::agents::EchoProber) to `to`; its report (at `join`) is
    /// its [`Probes`](crate::agents::Probes).
    EchoProber {
        to: SocketAddr,
        duration_us: u64,
        rate: f64,
    },
    /// A [`Discard`](crate::agents::Discard) port on `bind`; nothing to report.
    Discard { bind: SocketAddr },
}

/// One reply: exactly one of `ok` and `error`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// The request's id (0: a request that could not be read).
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    /// The reply's result.
    pub fn into_result(self) -> std::result::Result<Value, String> {
        match (self.ok, self.error) {
            (_, Some(e)) => Err(e),
            (Some(v), None) => Ok(v),
            (None, None) => Ok(Value::Null),
        }
    }
}

/// What `hello` answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL`].
    pub protocol: u32,
    /// weir's version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// The host's name (`/proc/sys/kernel/hostname`).
    pub hostname: String,
}

/// What `start` answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Started {
    /// The agent's handle for `stop` and `join`.
    pub handle: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Duration;

    #[test]
    fn requests_are_one_json_object_with_their_op() {
        let r = Request {
            id: 7,
            op: Op::Sysctl {
                key: "net.ipv4.tcp_sack".into(),
                value: "1".into(),
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            r#"{"id":7,"op":"sysctl","key":"net.ipv4.tcp_sack","value":"1"}"#
        );
        let back: Request = serde_json::from_str(&line).unwrap();
        assert_eq!(back.id, 7);
        assert!(matches!(back.op, Op::Sysctl { .. }));
        let hello: Request = serde_json::from_str(r#"{"id":1,"op":"hello"}"#).unwrap();
        assert!(matches!(hello.op, Op::Hello));
    }

    #[test]
    fn agent_options_cross_the_wire() {
        let dst: SocketAddr = "10.77.0.2:5001".parse().unwrap();
        let mut o = SenderOpts::new(dst, Duration::from_millis(2500), "cubic");
        o.mss = Some(1460);
        let r = Request {
            id: 2,
            op: Op::Start {
                agent: Box::new(StartAgent::TcpSender {
                    opts: o,
                    until_us: Some(3_000_000),
                    origin_ago_us: None,
                }),
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        let back: Request = serde_json::from_str(&line).unwrap();
        let Op::Start { agent } = back.op else {
            panic!("{:?}", back.op)
        };
        match *agent {
            StartAgent::TcpSender { opts, until_us, .. } => {
                assert_eq!(opts.dst, dst);
                assert_eq!(opts.duration, Duration::from_millis(2500));
                assert_eq!(opts.mss, Some(1460));
                assert_eq!(opts.cc, "cubic");
                assert_eq!(until_us, Some(3_000_000));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reply_is_ok_or_error() {
        let ok: Reply = serde_json::from_str(r#"{"id":3,"ok":{"handle":1}}"#).unwrap();
        assert_eq!(ok.into_result().unwrap()["handle"], 1);
        let err: Reply = serde_json::from_str(r#"{"id":3,"error":"no such agent"}"#).unwrap();
        assert_eq!(err.into_result().unwrap_err(), "no such agent");
        let line = serde_json::to_string(&Reply {
            id: 4,
            ok: None,
            error: Some("x".into()),
        })
        .unwrap();
        assert_eq!(line, r#"{"id":4,"error":"x"}"#);
    }
}
