//! A testbed host, wherever it is: [`Host::Local`] is a namespace of this machine (the
//! default testbed), [`Host::Remote`] a machine reached over SSH. A lab written against
//! [`Host`] runs on either; the agents are the same code, run here on a thread or there by
//! `weir agent`.

use serde::de::DeserializeOwned;
use weir_io::ethtool::Offloads;

use super::ssh::SshHost;
use super::wire::{Op, StartAgent};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::agents::cbr::{
    CbrRecords, CbrSender, CbrSenderOpts, CbrSenderReport, CbrSink, CbrSinkOpts,
};
use crate::agents::{
    path_mtu, Discard, DscpCounter, DscpReport, EchoProber, EchoReport, EchoResponder, MtuReport,
    ProbeOpts, ProbeReport, Prober, Probes, ReflectorReport, SenderOpts, SenderReport, SinkOpts,
    SinkReport, StampedSender, StampedSenderOpts, StampedSenderReport, StampedSink,
    StampedSinkReport, TcpSender, TcpSink, UdpReflector,
};
use crate::stats::skew::ReceiverClock;
use crate::tests::streams::{received_figures, FiguresOf, StreamFigures};
use crate::topo::Netns;
use crate::{Error, Result};

/// A testbed host (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum Host<'a> {
    /// A namespace of this machine.
    Local(&'a Netns),
    /// A machine running `weir agent` over SSH.
    Remote(&'a SshHost),
}

impl<'a> Host<'a> {
    /// The namespace's or the topology's name of the host.
    pub fn name(&self) -> &str {
        match self {
            Host::Local(ns) => ns.name(),
            Host::Remote(h) => h.name(),
        }
    }

    /// Writes a sysctl (on a remote host, until the session ends).
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        match self {
            Host::Local(ns) => ns.set_sysctl(key, value),
            Host::Remote(h) => h
                .call(Op::Sysctl {
                    key: key.into(),
                    value: value.into(),
                })
                .map(drop),
        }
    }

    /// Sets TCP's minimum retransmission timeout on the route to `dst` through `ifname`
    /// ([`crate::topo::set_rto_min`]; on a remote host, until the session ends).
    pub fn set_rto_min(&self, dst: &str, ifname: &str, ms: u64) -> Result<()> {
        match self {
            Host::Local(ns) => crate::topo::set_rto_min(ns, dst, ifname, ms),
            Host::Remote(h) => h
                .call(Op::RouteAdd {
                    dst: dst.into(),
                    ifname: ifname.into(),
                    rto_min_ms: Some(ms),
                })
                .map(drop),
        }
    }

    /// Sets the TCP options the host's sockets negotiate: SACK (`net.ipv4.tcp_sack`),
    /// timestamps (`net.ipv4.tcp_timestamps`) and window scaling
    /// (`net.ipv4.tcp_window_scaling`). These are per-namespace sysctls, not per-socket
    /// options: give senders that need different settings different namespaces (the
    /// options of a connection are what both ends agree on, so setting them on the
    /// sender's side is enough to turn them off).
    pub fn set_tcp_options(
        &self,
        sack: bool,
        timestamps: bool,
        window_scaling: bool,
    ) -> Result<()> {
        let b = |v: bool| if v { "1" } else { "0" };
        self.set_sysctl("net.ipv4.tcp_sack", b(sack))?;
        self.set_sysctl("net.ipv4.tcp_timestamps", b(timestamps))?;
        self.set_sysctl("net.ipv4.tcp_window_scaling", b(window_scaling))
    }

    /// Sets an interface's offloads (on a remote host, until the session ends).
    pub fn set_offloads(&self, ifname: &str, want: &Offloads) -> Result<()> {
        match self {
            Host::Local(ns) => {
                let (i, w) = (ifname.to_string(), *want);
                ns.try_run(move || weir_io::ethtool::set_offloads(&i, &w))?
                    .map(drop)
                    .map_err(|e| Error::Invalid(format!("offloads of {ifname}: {e}")))
            }
            Host::Remote(h) => h
                .call(Op::Offloads {
                    ifname: ifname.into(),
                    want: *want,
                })
                .map(drop),
        }
    }

    /// Starts a [`TcpSink`].
    pub fn tcp_sink(&self, opts: SinkOpts) -> Result<Agent<'a, TcpSink>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(TcpSink::start_with(ns, opts)?)),
            Host::Remote(h) => {
                let epoch_ago_us = opts.epoch.map(us_ago);
                Ok(Agent::Remote(
                    h,
                    h.start(StartAgent::TcpSink { opts, epoch_ago_us })?,
                ))
            }
        }
    }

    /// Starts a [`TcpSender`] (connected when this returns).
    pub fn tcp_sender(&self, opts: SenderOpts) -> Result<Agent<'a, TcpSender>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(TcpSender::start(ns, opts)?)),
            Host::Remote(h) => {
                let origin_ago_us = opts.info_origin.map(us_ago);
                let until_us = opts.until.map(|u| {
                    u.saturating_duration_since(std::time::Instant::now())
                        .as_micros() as u64
                });
                Ok(Agent::Remote(
                    h,
                    h.start(StartAgent::TcpSender {
                        opts,
                        until_us,
                        origin_ago_us,
                    })?,
                ))
            }
        }
    }
}

impl<'a> Host<'a> {
    /// Starts a [`Prober`] (probing at once; stop it for its report).
    pub fn prober(&self, opts: ProbeOpts) -> Result<Agent<'a, Prober>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(Prober::start(ns, opts)?)),
            Host::Remote(h) => Ok(Agent::Remote(h, h.start(StartAgent::Prober { opts })?)),
        }
    }

    /// Starts a [`UdpReflector`] on `bind`.
    pub fn udp_reflector(
        &self,
        bind: SocketAddr,
        tos: Option<u8>,
    ) -> Result<Agent<'a, UdpReflector>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(UdpReflector::start(ns, bind, tos)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::UdpReflector { bind, tos })?,
            )),
        }
    }
}

impl<'a> Host<'a> {
    /// Reads a sysctl (dotted, `net.ipv4.tcp_rmem`).
    pub fn get_sysctl(&self, key: &str) -> Result<String> {
        match self {
            Host::Local(ns) => ns.get_sysctl(key),
            Host::Remote(h) => {
                let v = h.call(Op::SysctlGet { key: key.into() })?;
                v.as_str().map(str::to_string).ok_or_else(|| {
                    Error::Invalid(format!("{}: sysctl {key}: not a string: {v}", h.name()))
                })
            }
        }
    }

    /// Starts a [`CbrSender`] (sending `opts.start_delay` after it is ready).
    pub fn cbr_sender(&self, opts: CbrSenderOpts) -> Result<Agent<'a, CbrSender>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(CbrSender::start(ns, opts)?)),
            Host::Remote(h) => Ok(Agent::Remote(h, h.start(StartAgent::CbrSender { opts })?)),
        }
    }

    /// Starts a [`CbrSink`]; end it with [`Agent::drain_figures`].
    pub fn cbr_sink(&self, opts: CbrSinkOpts) -> Result<Agent<'a, CbrSink>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(CbrSink::start_with(ns, opts)?)),
            Host::Remote(h) => Ok(Agent::Remote(h, h.start(StartAgent::CbrSink { opts })?)),
        }
    }

    /// Starts a [`DscpCounter`] on this host's interface `ifname`; end it with
    /// [`Agent::stop`].
    pub fn dscp_counter(&self, ifname: &str) -> Result<Agent<'a, DscpCounter>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(DscpCounter::start(ns, ifname)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::DscpCounter {
                    ifname: ifname.into(),
                })?,
            )),
        }
    }

    /// [`path_mtu`] from this host (from `src`, if given) to the reflector at `to`.
    pub fn path_mtu(
        &self,
        src: Option<Ipv4Addr>,
        to: SocketAddr,
        max: u32,
        wait: Duration,
        tries: u32,
    ) -> Result<MtuReport> {
        match self {
            Host::Local(ns) => path_mtu(ns, src, to, max, wait, tries),
            Host::Remote(h) => {
                let id = h.start(StartAgent::PathMtu {
                    src,
                    to,
                    max,
                    wait_us: wait.as_micros() as u64,
                    tries,
                })?;
                h.finish(id, true)
            }
        }
    }
}

/// Seed 004's agents: time-stamped TCP records, the calibration's echo probes, a port
/// for the background flood.
impl<'a> Host<'a> {
    /// Starts a [`StampedSink`] listening on `bind` for `record_len`-byte records.
    pub fn stamped_sink(
        &self,
        bind: SocketAddr,
        record_len: usize,
    ) -> Result<Agent<'a, StampedSink>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(StampedSink::start(ns, bind, record_len)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::StampedSink { bind, record_len })?,
            )),
        }
    }

    /// Starts a [`StampedSender`] (connected when this returns).
    pub fn stamped_sender(&self, opts: StampedSenderOpts) -> Result<Agent<'a, StampedSender>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(StampedSender::start(ns, opts)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::StampedSender { opts })?,
            )),
        }
    }

    /// Starts an [`EchoResponder`] on `bind`, stamping with `clock`.
    pub fn echo_responder(
        &self,
        bind: SocketAddr,
        clock: ReceiverClock,
    ) -> Result<Agent<'a, EchoResponder>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(EchoResponder::start(ns, bind, clock)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::EchoResponder { bind, clock })?,
            )),
        }
    }

    /// Starts an [`EchoProber`] to `to` for `duration` at up to `rate` probes a second;
    /// [`Agent::join`] it for its probes.
    pub fn echo_prober(
        &self,
        to: SocketAddr,
        duration: Duration,
        rate: f64,
    ) -> Result<Agent<'a, EchoProber>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(EchoProber::start(ns, to, duration, rate)?)),
            Host::Remote(h) => Ok(Agent::Remote(
                h,
                h.start(StartAgent::EchoProber {
                    to,
                    duration_us: duration.as_micros() as u64,
                    rate,
                })?,
            )),
        }
    }

    /// Opens a [`Discard`] port on `bind`.
    pub fn discard(&self, bind: SocketAddr) -> Result<Agent<'a, Discard>> {
        match self {
            Host::Local(ns) => Ok(Agent::Local(Discard::start(ns, bind)?)),
            Host::Remote(h) => Ok(Agent::Remote(h, h.start(StartAgent::Discard { bind })?)),
        }
    }
}

/// µs from `t` (in the past) to now, for an instant sent to a remote host.
fn us_ago(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

/// An agent that runs on this machine and ends with a report.
pub trait LocalAgent {
    /// What it reports.
    type Report: DeserializeOwned;
    /// Stop it now.
    fn stop_now(self) -> Self::Report;
    /// Wait until it is done by itself.
    fn wait(self) -> Self::Report;
}

impl LocalAgent for TcpSink {
    type Report = SinkReport;
    fn stop_now(self) -> SinkReport {
        self.stop()
    }
    fn wait(self) -> SinkReport {
        self.stop()
    }
}

impl LocalAgent for Prober {
    type Report = ProbeReport;
    fn stop_now(self) -> ProbeReport {
        self.finish()
    }
    fn wait(self) -> ProbeReport {
        self.finish()
    }
}

impl LocalAgent for UdpReflector {
    type Report = ReflectorReport;
    fn stop_now(self) -> ReflectorReport {
        self.stop()
    }
    fn wait(self) -> ReflectorReport {
        self.stop()
    }
}

impl LocalAgent for CbrSender {
    type Report = CbrSenderReport;
    fn stop_now(self) -> CbrSenderReport {
        self.stop()
    }
    fn wait(self) -> CbrSenderReport {
        self.join()
    }
}

impl LocalAgent for CbrSink {
    type Report = CbrRecords;
    fn stop_now(self) -> CbrRecords {
        self.stop()
    }
    fn wait(self) -> CbrRecords {
        self.stop()
    }
}

impl LocalAgent for DscpCounter {
    type Report = DscpReport;
    fn stop_now(self) -> DscpReport {
        self.stop()
    }
    fn wait(self) -> DscpReport {
        self.stop()
    }
}

impl LocalAgent for StampedSink {
    type Report = StampedSinkReport;
    fn stop_now(self) -> StampedSinkReport {
        self.stop()
    }
    fn wait(self) -> StampedSinkReport {
        self.stop()
    }
}

impl LocalAgent for StampedSender {
    type Report = StampedSenderReport;
    fn stop_now(self) -> StampedSenderReport {
        self.stop()
    }
    fn wait(self) -> StampedSenderReport {
        self.join()
    }
}

impl LocalAgent for EchoResponder {
    type Report = EchoReport;
    fn stop_now(self) -> EchoReport {
        self.stop()
    }
    fn wait(self) -> EchoReport {
        self.stop()
    }
}

impl LocalAgent for EchoProber {
    type Report = Probes;
    fn stop_now(self) -> Probes {
        self.join()
    }
    fn wait(self) -> Probes {
        self.join()
    }
}

impl LocalAgent for Discard {
    type Report = ();
    fn stop_now(self) {}
    fn wait(self) {}
}

impl LocalAgent for TcpSender {
    type Report = SenderReport;
    fn stop_now(self) -> SenderReport {
        self.stop()
    }
    fn wait(self) -> SenderReport {
        self.join()
    }
}

/// A running agent on a [`Host`].
#[derive(Debug)]
pub enum Agent<'a, L> {
    /// Here.
    Local(L),
    /// On a remote host, by its handle there.
    Remote(&'a SshHost, u64),
}

impl<L: LocalAgent> Agent<'_, L> {
    /// Stops it now and returns its report.
    pub fn stop(self) -> Result<L::Report> {
        match self {
            Agent::Local(a) => Ok(a.stop_now()),
            Agent::Remote(h, id) => h.finish(id, false),
        }
    }

    /// Waits until it is done and returns its report.
    pub fn join(self) -> Result<L::Report> {
        match self {
            Agent::Local(a) => Ok(a.wait()),
            Agent::Remote(h, id) => h.finish(id, true),
        }
    }
}

impl Agent<'_, CbrSink> {
    /// Waits until `expected` packets arrived or none for `idle`, then stops the sink and
    /// returns the figures of its records ([`CbrSink::finish`], [`received_figures`]),
    /// computed on the host that received them.
    pub fn drain_figures(
        self,
        expected: u64,
        idle: Duration,
        of: FiguresOf,
    ) -> Result<StreamFigures> {
        match self {
            Agent::Local(a) => Ok(received_figures(&a.finish(expected, idle), &of)),
            Agent::Remote(h, id) => h.drain(id, expected, idle, of),
        }
    }

    /// As [`Agent::drain_figures`], but returns every record ([`CbrSink::finish`]): for
    /// streams of a few thousand packets whose analysis needs each (voice calls).
    pub fn finish(self, expected: u64, idle: Duration) -> Result<CbrRecords> {
        match self {
            Agent::Local(a) => Ok(a.finish(expected, idle)),
            Agent::Remote(h, id) => h.records(id, expected, idle),
        }
    }
}
