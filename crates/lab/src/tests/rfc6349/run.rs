//! Running the RFC 6349 lab: per path a fresh testbed (client, DUT, line, server: namespaces
//! of this machine, or with `--topology` the real hosts `client` and `server` over SSH, the
//! network's own path and the DUT here or external), the line and the DUT, the reflector;
//! then the path MTU, the baseline RTT, the bottleneck bandwidth and each throughput test
//! in turn. Everything a path made is removed when it returns, also on error (the testbed
//! and every agent are dropped; real hosts undo their changes when their session ends).
//!
//! Threads: the line's and (weir) the DUT's bridges, the reflector, the prober, the CBR
//! sender (pinned to CPU 0 by [`streams::send_between`]) and its sink, one per TCP sender and the
//! sink.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    finish, metrics, Baseline, Bottleneck, Conn, PathRun, Rfc6349Config, Rfc6349Result, TcpTest,
    FRAME_OVERHEAD, TCP_HEADERS,
};
use crate::agents::{ProbeKind, ProbeOpts, SenderOpts, SenderReport, SinkOpts};
use crate::dut;
use crate::remote::Host;
use crate::report;
use crate::stats::dist::DistUs;
use crate::tests::rrul::policy::{line_policy, shaper_policy};
use crate::tests::rrul::{DutKind, Link, HOSTS};
use crate::tests::streams::{self, Send};
use crate::tests::testbed::{join_each, start_wan_stage, Bed, Owned};
use crate::topo::{require_root, BridgeTopo};
use crate::{Error, Result};

const CLIENT: Ipv4Addr = BridgeTopo::SND_ADDR;
const SERVER: Ipv4Addr = BridgeTopo::RCV_ADDR;
/// The sink of the transfers, the reflector, the bottleneck stream.
const TCP_PORT: u16 = 5001;
const PROBE_PORT: u16 = 7001;
const BB_PORT: u16 = 9300;
/// Attempts per path MTU probe size.
const MTU_TRIES: u32 = 3;
/// Pause before each throughput test (queues drain), and the bottleneck stream's drain.
const PAUSE: Duration = Duration::from_secs(1);
const BB_DRAIN: Duration = Duration::from_millis(500);
/// `TCP_INFO` sampling period, ms.
const INFO_MS: u64 = 100;

/// Run the lab: every path in turn, then the metrics and checks.
pub fn run(c: &Rfc6349Config, progress: &mut dyn FnMut(&str)) -> Result<Rfc6349Result> {
    c.validate()?;
    require_root()?;
    let mut paths = Vec::new();
    for (dut, link, run) in c.paths() {
        crate::check_interrupted()?;
        paths.push(run_path(c, &dut, &link, run, progress)?);
    }
    let mut r = Rfc6349Result {
        kind: "rfc6349".into(),
        meta: report::meta(),
        config: c.clone(),
        paths,
        checks: Vec::new(),
    };
    finish(&mut r)?;
    Ok(r)
}

/// One DUT on one link: a topology of its own.
fn run_path(
    c: &Rfc6349Config,
    dut: &str,
    link: &Link,
    run: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<PathRun> {
    let kind = DutKind::parse(dut)?;
    let label = format!("{dut} {}", link.name());
    let text = shaper_policy(&kind, link, "weir lab rfc6349: one class at the rate");
    let tag = format!("rfc6349 {}-{run}", link.name());
    let (policy, _temp) = crate::tests::rrul::dut_policy_file(&kind, dut, &tag, &text)?;
    let owned = Owned::new(c.topology.as_ref(), HOSTS, "r6349", true)?;
    let bed = owned.bed()?;
    // the hosts' defaults (offloads, autotuning) with the RFC's options made explicit
    for h in [bed.snd, bed.rcv] {
        h.set_tcp_options(true, true, true)?;
    }
    bed.address(&[])?;
    // the emulated line: in namespaces, or on real hosts at the topology's `[wan]`;
    // without one the path is the network's own
    let mut line = bed
        .wan
        .map(|w| {
            let line = line_policy(link, 1 + u64::from(run));
            start_wan_stage(Some(w), &line, c.busy_poll)
        })
        .transpose()?;
    let sessions = [
        dut::Session::tcp(
            SocketAddr::new(IpAddr::V4(CLIENT), 0),
            SocketAddr::new(IpAddr::V4(SERVER), TCP_PORT),
        ),
        dut::Session {
            src: SocketAddr::new(IpAddr::V4(CLIENT), 0),
            dst: SocketAddr::new(IpAddr::V4(SERVER), BB_PORT),
            proto: 17,
        },
    ];
    // an external DUT: nothing to start (the topology's `[dut] external = true`)
    let running = kind.start_at(dut, bed.place, &policy, &sessions, c.busy_poll)?;
    let reflector = bed
        .rcv
        .udp_reflector(SocketAddr::new(IpAddr::V4(SERVER), PROBE_PORT), None)?;
    let mut errors = Vec::new();
    let alive = |running: &Option<dut::RunningDut>| -> Result<()> {
        crate::check_interrupted()?;
        owned.check_alive(dut, running.as_ref())
    };

    // baseline RTT first: it sets how long a path MTU probe waits
    progress(&format!("{label}: baseline RTT ({} s)", c.baseline_s));
    let baseline = baseline_rtt(bed.snd, c)?;
    alive(&running)?;
    let wait =
        Duration::from_secs_f64((baseline.map_or(1.0, |b| b.max_ms * 3.0 / 1e3)).clamp(0.2, 5.0));
    progress(&format!("{label}: path MTU"));
    let mtu = bed.snd.path_mtu(
        Some(CLIENT),
        SocketAddr::new(IpAddr::V4(SERVER), PROBE_PORT),
        c.max_mtu,
        wait,
        MTU_TRIES,
    )?;
    alive(&running)?;
    let path_mtu_b = mtu.mtu.unwrap_or(super::HOST_MTU);
    if mtu.mtu.is_none() {
        errors.push(format!(
            "path MTU: no probe came back; the hosts' {} B is assumed",
            super::HOST_MTU
        ));
    }

    progress(&format!("{label}: bottleneck bandwidth ({} s)", c.bb_s));
    let frame = path_mtu_b + FRAME_OVERHEAD;
    let offered = link.up_bps as f64 * c.bb_offered_pct as f64 / 100.0;
    let s = Send::for_duration(CLIENT, BB_PORT, frame as usize, offered, c.bb_s);
    let x = streams::send_between(bed.snd, bed.rcv, &[s], BB_DRAIN, owned.receiver_ahead().0)?
        .remove(0);
    if let Some(e) = &x.error {
        errors.push(format!("bottleneck test: {e}"));
    }
    let bb = Bottleneck {
        frame,
        offered_bps: offered,
        achieved_bps: x.achieved_bps,
        sent: x.attempted - x.send_errors,
        lost: x.figures.lost,
        bb_bps: x.figures.ir_bps,
    };
    alive(&running)?;
    let rmem_max = bed
        .rcv
        .get_sysctl("net.ipv4.tcp_rmem")
        .ok()
        .and_then(|v| v.split_whitespace().last().and_then(|x| x.parse().ok()));

    // the transfer: transfer_s of the maximum achievable TCP throughput at the measured BB
    let bb_bps = bb.bb_bps.unwrap_or(link.up_bps as f64);
    let max_tcp =
        metrics::max_tcp_bps(bb_bps, path_mtu_b, path_mtu_b - TCP_HEADERS, FRAME_OVERHEAD);
    let size_bytes = (max_tcp * c.transfer_s / 8.0).round() as u64;
    let mut tests = Vec::new();
    for &n in &c.connections {
        std::thread::sleep(PAUSE);
        alive(&running)?;
        tests.push(throughput_test(&bed, c, n, size_bytes, &label, progress)?);
        alive(&running)?;
    }
    drop(reflector.stop());
    let dut_report = dut::DutReport::of(running, c.topology.as_ref());
    let line_report = match line.as_mut().and_then(|l| l.stop()) {
        Some(Ok(r)) => serde_json::to_value(r).unwrap_or_default(),
        Some(Err(e)) => json!({ "error": e }),
        None => serde_json::Value::Null,
    };
    errors.extend(dut_report.errors.iter().cloned());
    Ok(PathRun {
        dut: dut.to_string(),
        link: *link,
        run,
        policy: text,
        mtu: Some(mtu),
        baseline,
        bb: Some(bb),
        rmem_max,
        tests,
        dut_report: json!({ "dut": dut_report, "line": line_report }),
        errors,
        hosts: owned.host_info(),
    })
}

/// UDP probes on the idle path for `baseline_s`; `None` when no reply came.
fn baseline_rtt(client: Host, c: &Rfc6349Config) -> Result<Option<Baseline>> {
    let mut o = ProbeOpts::new(
        ProbeKind::Udp,
        SocketAddr::new(IpAddr::V4(SERVER), PROBE_PORT),
        Duration::from_secs_f64(c.probe_ms / 1e3),
    );
    o.src = Some(CLIENT);
    let prober = client.prober(o)?;
    let end = Instant::now() + Duration::from_secs_f64(c.baseline_s);
    while Instant::now() < end {
        crate::check_interrupted()?;
        std::thread::sleep(
            end.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100)),
        );
    }
    let rep = prober.stop()?;
    if let Some(e) = rep.error {
        return Err(Error::Invalid(format!("baseline RTT probes: {e}")));
    }
    let rtts: Vec<i64> = rep.records.iter().filter_map(|p| p.rtt_ns()).collect();
    if rtts.is_empty() {
        return Ok(None);
    }
    let d = DistUs::from_ns(&rtts);
    Ok(Some(Baseline {
        min_ms: d.min / 1e3,
        p50_ms: d.p50 / 1e3,
        mean_ms: d.mean / 1e3,
        max_ms: d.max / 1e3,
        probes: rep.records.len() as u64,
        lost: (rep.records.len() - rtts.len()) as u64,
    }))
}

/// One throughput test: `n` connections share `size_bytes`.
fn throughput_test(
    bed: &Bed,
    c: &Rfc6349Config,
    n: usize,
    size_bytes: u64,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<TcpTest> {
    progress(&format!(
        "{label}: {n} connection(s): a transfer of {size_bytes} bytes"
    ));
    let t0 = Instant::now();
    let mut so = SinkOpts::new(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), TCP_PORT),
        Duration::from_millis(INFO_MS),
    );
    so.epoch = Some(t0);
    let sink = bed.rcv.tcp_sink(so)?;
    // each connection's part; the first takes the remainder
    let parts: Vec<u64> = (0..n as u64)
        .map(|i| size_bytes / n as u64 + if i == 0 { size_bytes % n as u64 } else { 0 })
        .collect();
    // time limit: four times the ideal time at the rate asked, and 20 s
    let limit = Duration::from_secs_f64(c.transfer_s * 4.0 + 20.0);
    let reports = std::thread::scope(|sc| {
        let handles: Vec<_> = parts
            .iter()
            .map(|&bytes| {
                let mut o =
                    SenderOpts::new(SocketAddr::new(IpAddr::V4(SERVER), TCP_PORT), limit, &c.cc);
                o.src = Some(IpAddr::V4(CLIENT));
                o.bytes = Some(bytes);
                o.notsent_lowat = Some(64 * 1024);
                o.info_every = Some(Duration::from_millis(INFO_MS));
                o.info_origin = Some(t0);
                o.connect_timeout = Duration::from_secs(10);
                o.drain_timeout = Duration::from_secs(30);
                let client = bed.snd;
                sc.spawn(move || -> std::result::Result<SenderReport, String> {
                    let s = client.tcp_sender(o).map_err(|e| e.to_string())?;
                    s.join().map_err(|e| e.to_string())
                })
            })
            .collect();
        join_each::<SenderReport>(handles, "sender")
    });
    progress(&format!(
        "{label}: {n} connection(s): done in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
    let sink = sink.stop()?;
    let conns = parts
        .iter()
        .zip(reports)
        .map(|(&asked, rep)| conn(asked, rep, &sink))
        .collect();
    Ok(TcpTest {
        connections: n,
        size_bytes,
        conns,
        metrics: None,
    })
}

/// A connection's figures from its sender's report and the sink's side of it.
fn conn(
    asked: u64,
    rep: std::result::Result<SenderReport, String>,
    sink: &crate::agents::SinkReport,
) -> Conn {
    let mut c = Conn {
        local: None,
        bytes_asked: asked,
        bytes_received: 0,
        start_s: None,
        end_s: None,
        bytes_sent: 0,
        bytes_retrans: 0,
        mss: 0,
        srtt_ms: Vec::new(),
        max_cwnd: 0,
        error: None,
    };
    match rep {
        Ok(r) => {
            if let Some(k) = sink.conns.iter().find(|k| k.peer == r.local) {
                c.bytes_received = k.bytes;
                c.start_s = Some(k.accepted_at.as_secs_f64());
                c.end_s = k.last_byte.map(|d| d.as_secs_f64());
                if let Some(e) = &k.error {
                    c.error = Some(format!("sink: {e}"));
                }
            }
            c.local = Some(r.local);
            c.bytes_sent = r.info_final.bytes_sent;
            c.bytes_retrans = r.info_final.bytes_retrans;
            c.mss = r.info_final.snd_mss;
            c.srtt_ms = r
                .samples
                .iter()
                .filter(|s| s.srtt_us > 0)
                .map(|s| f64::from(s.srtt_us) / 1e3)
                .collect();
            c.max_cwnd = r.samples.iter().map(|s| s.cwnd).max().unwrap_or(0);
            if r.bytes_written < asked {
                c.error.get_or_insert(format!(
                    "wrote {} of {asked} bytes before the time limit",
                    r.bytes_written
                ));
            }
            if let Some(e) = r.error {
                c.error = Some(e);
            } else if !r.drained {
                c.error
                    .get_or_insert("the sink did not read everything within 30 s".into());
            }
        }
        Err(e) => c.error = Some(e),
    }
    c
}
