//! One run of `weir lab rrul`: a fresh topology (client, DUT, line, server), the line and
//! the DUT, the sinks and the reflector, the probes from the start, the flows after the
//! idle phase, the calls; then every report. Everything it made is removed when it
//! returns, also on error (the topology and every agent are dropped). On real hosts the
//! line runs at the topology's `[wan]`, and without one the path is the network's own.
//!
//! Threads: the line's and (weir) the DUT's bridges, one per TCP sender, the two sinks,
//! the reflector and two probers, the calls' senders and sinks; nothing is pinned.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir_core::policy::Policy;

use super::case::{Case, Dir, FlowPlan, Host};
use super::policy::{line_policy, DutKind};
use super::{DutPolicy, FlowOutcome, PartSpec, ProbeSeries, RrulConfig, RrulRun, BIN_MS, INFO_MS};
use crate::agents::cbr::CbrSenderReport;
use crate::agents::voip::{voice_sender, voice_sink};
use crate::agents::{ProbeKind, ProbeOpts, ProbeReport, SenderOpts, SenderReport, SinkOpts};
use crate::dut;
use crate::tests::testbed::Owned;
use crate::tests::testbed::{join_each, send_cbr, start_wan_stage, VoiceOutcome};
use crate::topo::BridgeTopo;
use crate::{Error, Result};

/// The host names a topology file gives `weir lab rrul`.
pub const HOSTS: [&str; 2] = ["client", "server"];

/// The client's main address (probes and flows) and the server's.
const CLIENT: Ipv4Addr = BridgeTopo::SND_ADDR;
pub(super) const SERVER: Ipv4Addr = BridgeTopo::RCV_ADDR;
/// The `hosts` case's two client hosts (aliases on the client's interface).
pub const HOST_A: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
pub const HOST_B: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
/// The server address host B's uploads go to in the `hosts` case: a second address of the
/// server, so that the hosts' flows fan out to different far ends as a LAN's do (where
/// every flow goes to one far host, CAKE's `triple` is flow-fair: see docs/lab.md).
pub const SERVER_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The server's sink of uploads, the client's sink of downloads, the reflector, the calls.
pub const UP_PORT: u16 = 5001;
pub const DOWN_PORT: u16 = 5002;
pub const PROBE_PORT: u16 = 7001;
pub const CALL_PORT: u16 = 16384;

fn host_addr(h: Host) -> Ipv4Addr {
    match h {
        Host::Client => CLIENT,
        Host::A => HOST_A,
        Host::B => HOST_B,
    }
}

/// A policy written to a temporary file for a `cmd:` DUT (`WEIR_POLICY`), removed on drop.
pub(crate) struct TempPolicy(PathBuf);

impl Drop for TempPolicy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The policy `text` of DUT `dut` parsed; for a `cmd:` DUT also written to a temporary file
/// named after `tag` (the policy's file, which the script gets as `WEIR_POLICY`), kept
/// while the returned guard lives.
pub(crate) fn dut_policy_file(
    kind: &DutKind,
    dut: &str,
    tag: &str,
    text: &str,
) -> Result<(Policy, Option<TempPolicy>)> {
    let mut temp = None;
    let file = match kind {
        DutKind::Cmd(_) => {
            let path = std::env::temp_dir().join(format!(
                "weir-{}-{}.toml",
                std::process::id(),
                crate::report::file_safe(tag)
            ));
            std::fs::write(&path, text)
                .map_err(|e| Error::io(format!("write {}", path.display()), e))?;
            temp = Some(TempPolicy(path.clone()));
            path.display().to_string()
        }
        _ => format!("<{tag} {dut}>"),
    };
    let policy = Policy::parse(&file, text)
        .map_err(|e| Error::Invalid(format!("DUT {dut}: policy: {e}")))?;
    Ok((policy, temp))
}

/// Runs one DUT once in one part.
pub(super) fn run_one(
    c: &RrulConfig,
    spec: &PartSpec,
    flows: &[FlowPlan],
    pol: &DutPolicy,
    run: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<RrulRun> {
    let kind = DutKind::parse(&pol.dut)?;
    let tag = format!("rrul {}-{run}", spec.name());
    let (policy, temp) = dut_policy_file(&kind, &pol.dut, &tag, &pol.policy)?;
    let owned = Owned::new(c.topology.as_ref(), HOSTS, "rr", true)?;
    let bed = owned.bed()?;
    // the calls' one-way delays need the hosts' clocks (one clock in namespaces)
    let server_ahead = owned.calls_clock(spec.case.has_calls(), "the voice case")?;
    // the hosts keep their default offloads (TSO/GSO super-packets reach the DUT as they
    // would from a real host: weir segments them, the kernel's qdiscs take them whole)
    for h in [bed.snd, bed.rcv] {
        h.set_tcp_options(true, true, true)?;
        h.set_sysctl("net.ipv4.tcp_ecn", &spec.variant.tcp_ecn().to_string())?;
    }
    let two_hosts = flows.iter().any(|f| f.host != Host::Client);
    bed.address(if two_hosts { &[HOST_A, HOST_B] } else { &[] })?;
    if two_hosts {
        bed.receiver_addr(&format!("{SERVER_B}/24"))?;
    }
    // the emulated line: in namespaces, or on real hosts at the topology's `[wan]`;
    // without one the path is the network's own
    let line_text = line_policy(&spec.link, 1 + u64::from(run));
    let mut line = bed
        .wan
        .map(|w| start_wan_stage(Some(w), &line_text, c.busy_poll))
        .transpose()?;
    let up_sink = SocketAddr::new(IpAddr::V4(SERVER), UP_PORT);
    // where a host's uploads go: host B's to the server's second address (`hosts`)
    let up_to = |h: Host| match h {
        Host::B => SocketAddr::new(IpAddr::V4(SERVER_B), UP_PORT),
        _ => up_sink,
    };
    let down_sink = SocketAddr::new(IpAddr::V4(CLIENT), DOWN_PORT);
    let sessions: Vec<dut::Session> = flows
        .iter()
        .map(|f| match f.dir {
            Dir::Up => dut::Session::tcp(
                SocketAddr::new(IpAddr::V4(host_addr(f.host)), 0),
                up_to(f.host),
            ),
            Dir::Down => dut::Session::tcp(SocketAddr::new(IpAddr::V4(SERVER), 0), down_sink),
        })
        .collect();
    // an external DUT: nothing to start (the topology's `[dut] external = true`)
    let running = kind.start_at(&pol.dut, bed.place, &policy, &sessions, c.busy_poll)?;

    let t0 = Instant::now();
    let t0_ns = weir_io::clock::realtime_ns();
    let sink = |port| {
        let mut o = SinkOpts::new(
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            Duration::from_millis(BIN_MS),
        );
        o.epoch = Some(t0);
        o
    };
    let sink_up = bed.rcv.tcp_sink(sink(UP_PORT))?;
    let sink_down = bed.snd.tcp_sink(sink(DOWN_PORT))?;
    let reflector = bed
        .rcv
        .udp_reflector(SocketAddr::new(IpAddr::V4(SERVER), PROBE_PORT), None)?;
    // the upstream's ACKs as they reach the server
    let acks = if spec.case == Case::AckFilter {
        Some(bed.rcv.dscp_counter(bed.rcv_if)?)
    } else {
        None
    };
    let calls = spec.case.has_calls();
    let call_sinks = if calls {
        vec![
            bed.rcv
                .cbr_sink(voice_sink(SocketAddr::new(IpAddr::V4(SERVER), CALL_PORT)))?,
            bed.snd
                .cbr_sink(voice_sink(SocketAddr::new(IpAddr::V4(CLIENT), CALL_PORT)))?,
        ]
    } else {
        Vec::new()
    };
    let interval = Duration::from_secs_f64(spec.probe_ms / 1000.0);
    let probe = |k: ProbeKind, port: u16| {
        let mut o = ProbeOpts::new(k, SocketAddr::new(IpAddr::V4(SERVER), port), interval);
        o.src = Some(CLIENT);
        o.grace = Duration::from_secs(1);
        bed.snd.prober(o)
    };
    let probers = [
        probe(ProbeKind::Udp, PROBE_PORT)?,
        probe(ProbeKind::Icmp, 0)?,
    ];
    let load_at = Duration::from_secs_f64(c.idle_s);
    let end = Duration::from_secs_f64(c.idle_s + c.load_s);
    let label = format!("{} run {} {}", spec.name(), run + 1, pol.dut);

    let mut dead = None;
    let (reports, call_reports, probe_reports) = std::thread::scope(|sc| {
        let call_handles: Vec<_> = if calls {
            [(bed.snd, CLIENT, SERVER), (bed.rcv, SERVER, CLIENT)]
                .into_iter()
                .map(|(h, from, to)| {
                    let o = voice_sender(
                        SocketAddr::new(IpAddr::V4(from), 0),
                        SocketAddr::new(IpAddr::V4(to), CALL_PORT),
                        end,
                    );
                    sc.spawn(move || send_cbr(h, 0.0, o, t0))
                })
                .collect()
        } else {
            Vec::new()
        };
        let handles: Vec<_> = flows
            .iter()
            .map(|f| {
                let (h, dst, src) = match f.dir {
                    Dir::Up => (bed.snd, up_to(f.host), Some(IpAddr::V4(host_addr(f.host)))),
                    Dir::Down => (bed.rcv, down_sink, None),
                };
                let mut o = SenderOpts::new(dst, end - load_at, &c.cc);
                o.src = src;
                o.mss = Some(1460);
                o.notsent_lowat = Some(64 * 1024);
                o.tos = (f.dscp != 0).then_some(f.dscp << 2);
                o.info_every = Some(Duration::from_millis(INFO_MS));
                o.info_origin = Some(t0);
                o.connect_timeout = Duration::from_secs(10);
                o.drain_timeout = Duration::from_secs(2);
                o.until = Some(t0 + end);
                sc.spawn(move || -> std::result::Result<SenderReport, String> {
                    while t0.elapsed() < load_at {
                        if crate::interrupted() {
                            return Err("interrupted".into());
                        }
                        std::thread::sleep((load_at - t0.elapsed()).min(Duration::from_millis(50)));
                    }
                    let s = h.tcp_sender(o).map_err(|e| e.to_string())?;
                    s.join().map_err(|e| e.to_string())
                })
            })
            .collect();
        while t0.elapsed() < end {
            std::thread::sleep(Duration::from_secs(1).min(end.saturating_sub(t0.elapsed())));
            progress(&format!(
                "{label}: {:.0}/{:.0} s",
                t0.elapsed().min(end).as_secs_f64(),
                end.as_secs_f64()
            ));
            if !running.as_ref().is_none_or(|r| r.is_running()) || crate::interrupted() {
                break;
            }
            if let Some(e) = owned.dead_host() {
                dead = Some(e);
                break;
            }
        }
        // the probes end with the load (their replies come back within the grace)
        let probe_reports: Vec<Result<ProbeReport>> =
            probers.into_iter().map(|p| p.stop()).collect();
        let reports = join_each::<SenderReport>(handles, "sender");
        let call_reports = join_each::<CbrSenderReport>(call_handles, "call");
        (reports, call_reports, probe_reports)
    });
    if let Some(e) = dead {
        return Err(Error::Invalid(format!(
            "a host died mid-run: {}",
            e.message()
        )));
    }
    let probe_reports = probe_reports.into_iter().collect::<Result<Vec<_>>>()?;
    // the probes' times on this machine's clock (real hosts: each host's offset taken out)
    let clocks = Clocks::of(&owned.host_info());
    let up_report = sink_up.stop()?;
    let down_report = sink_down.stop()?;
    // each call's receive times on its sender's clock: the server is `server_ahead`
    // ahead of the client (0 in namespaces)
    let calls: Vec<VoiceOutcome> = call_sinks
        .into_iter()
        .zip(call_reports)
        .zip([
            ("call up", CLIENT, server_ahead),
            ("call down", SERVER, -server_ahead),
        ])
        .map(|((sink, rep), (name, src, ahead))| {
            VoiceOutcome::collect(name, super::policy::CLASS, src, sink, rep, ahead)
        })
        .collect();
    let refl = reflector.stop()?;
    let (ack_frames, ack_bytes) = match acks.map(|a| a.stop()).transpose()? {
        Some(d) => {
            let c = d.sum_where(|f| f.proto == 6 && f.src.port() == DOWN_PORT);
            let frames: u64 = c.frames.iter().sum();
            let ip: u64 = c.ip_bytes.iter().sum();
            (Some(frames), Some(ip + 14 * frames))
        }
        None => (None, None),
    };
    let dut_report = dut::DutReport::of(running, c.topology.as_ref());
    let line_report = match line.as_mut().and_then(|l| l.stop()) {
        Some(Ok(r)) => serde_json::to_value(r).unwrap_or(Value::Null),
        Some(Err(e)) => json!({ "error": e }),
        None => Value::Null,
    };
    drop(temp);
    crate::check_interrupted()?;
    let seconds = t0.elapsed().as_secs_f64();
    let flows = flows
        .iter()
        .zip(reports)
        .map(|(f, rep)| {
            let sink = match f.dir {
                Dir::Up => &up_report,
                Dir::Down => &down_report,
            };
            flow_outcome(f, &c.cc, rep, sink)
        })
        .collect();
    let mut probes: Vec<ProbeSeries> = probe_reports
        .iter()
        .zip([ProbeKind::Udp, ProbeKind::Icmp])
        .map(|(r, k)| probe_series(k, r, t0_ns, &clocks))
        .collect();
    if let Some(e) = refl.error {
        probes[0].error.get_or_insert(format!("reflector: {e}"));
    }
    Ok(RrulRun {
        dut: pol.dut.clone(),
        run,
        t0_ns,
        probes,
        flows,
        calls,
        ack_frames,
        ack_bytes,
        dut_report: serde_json::to_value(&dut_report).unwrap_or_default(),
        line_report: match bed.wan {
            Some(_) => json!({ "policy": line_text, "report": line_report }),
            None => json!({ "none": "real hosts without [wan]: the network's own path" }),
        },
        seconds,
        hosts: owned.host_info(),
    })
}

/// A flow's outcome from its sender's report and its sink's connection.
fn flow_outcome(
    f: &FlowPlan,
    cc: &str,
    rep: std::result::Result<SenderReport, String>,
    sink: &crate::agents::SinkReport,
) -> FlowOutcome {
    let mut out = FlowOutcome {
        name: f.name.clone(),
        dir: f.dir,
        host: f.host,
        dscp: f.dscp,
        cc: cc.into(),
        local: None,
        bytes: 0,
        series: Vec::new(),
        segs_out: 0,
        data_segs_out: 0,
        retrans: 0,
        ecn: false,
        delivered_ce: 0,
        samples: Default::default(),
        error: None,
    };
    match rep {
        Ok(r) => {
            if let Some(conn) = sink.conns.iter().find(|c| c.peer == r.local) {
                out.bytes = conn.bytes;
                out.series = conn.series.clone();
            }
            out.local = Some(r.local);
            out.cc = r.cc;
            out.segs_out = u64::from(r.info_final.segs_out);
            out.data_segs_out = u64::from(r.info_final.data_segs_out);
            out.retrans = u64::from(r.info_final.total_retrans);
            out.ecn = r.info_final.ecn;
            out.delivered_ce = u64::from(r.info_final.delivered_ce);
            out.samples = super::InfoSeries::of(&r.samples);
            out.error = r.error;
        }
        Err(e) => out.error = Some(e),
    }
    out
}

/// The real hosts' clocks against this machine's: each probe time moves onto this
/// machine's clock. One-way delays are kept only when the two hosts' offsets are known to
/// within [`ONE_WAY_BOUND_MS`] together (round trips never depend on them).
#[derive(Clone, Copy, Debug, Default)]
struct Clocks {
    /// The client's and the server's clock minus this machine's, ns.
    client_ns: i64,
    server_ns: i64,
    one_way: bool,
}

pub use crate::remote::ONE_WAY_BOUND_MS;

impl Clocks {
    fn of(hosts: &[crate::remote::HostInfo]) -> Clocks {
        let find = |n: &str| hosts.iter().find(|h| h.name == n).map(|h| h.clock);
        match (find(HOSTS[0]), find(HOSTS[1])) {
            (Some(c), Some(s)) => Clocks {
                client_ns: (c.offset_ms * 1e6) as i64,
                server_ns: (s.offset_ms * 1e6) as i64,
                one_way: c.one_way_with(&s),
            },
            _ => Clocks {
                one_way: true,
                ..Clocks::default()
            },
        }
    }

    /// `r`'s record on this machine's clock.
    fn local(&self, r: &crate::agents::ProbeRecord) -> crate::agents::ProbeRecord {
        let on = |t: u64, off: i64| (t as i64 - off).max(0) as u64;
        crate::agents::ProbeRecord {
            seq: r.seq,
            tx_ns: on(r.tx_ns, self.client_ns),
            rx_ns: r.rx_ns.map(|t| on(t, self.client_ns)),
            far_rx_ns: r.far_rx_ns.map(|t| on(t, self.server_ns)),
            far_tx_ns: r.far_tx_ns.map(|t| on(t, self.server_ns)),
        }
    }
}

/// A prober's report on the run's timeline (µs since `t0_ns`), its times on this
/// machine's clock.
fn probe_series(kind: ProbeKind, r: &ProbeReport, t0_ns: u64, clocks: &Clocks) -> ProbeSeries {
    let us = |ns: Option<i64>| ns.map(|n| n / 1000);
    let udp = kind == ProbeKind::Udp && clocks.one_way;
    let records: Vec<crate::agents::ProbeRecord> =
        r.records.iter().map(|p| clocks.local(p)).collect();
    let r = ProbeReport {
        records,
        ..r.clone()
    };
    let r = &r;
    ProbeSeries {
        kind: Some(kind),
        sent_us: r
            .records
            .iter()
            .map(|p| p.tx_ns.saturating_sub(t0_ns) / 1000)
            .collect(),
        rtt_us: r.records.iter().map(|p| us(p.rtt_ns())).collect(),
        up_us: if udp {
            r.records.iter().map(|p| us(p.up_ns())).collect()
        } else {
            Vec::new()
        },
        down_us: if udp {
            r.records.iter().map(|p| us(p.down_ns())).collect()
        } else {
            Vec::new()
        },
        skipped: r.skipped,
        send_errors: r.send_errors,
        duplicates: r.duplicates,
        error: r.error.clone(),
    }
}
