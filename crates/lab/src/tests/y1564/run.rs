//! Running the Y.1564 lab: a fresh testbed per DUT (namespaces of this machine, or with
//! `--topology` the real hosts `sender` and `receiver` over SSH, the DUT here or external),
//! the DUT started on it, then every configuration-test stream one at a time and the
//! performance test's streams together ([`crate::tests::streams::send_between`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use weir_core::policy::Policy;

use super::{
    finish, plan_config, services, validate, DutRun, Phase, Service, Stream, Y1564Config,
    Y1564Result,
};
use crate::dut;
use crate::report;
use crate::tests::streams::{self, DutChoice, Send};
use crate::tests::testbed::{Bed, Owned, HOSTS};
use crate::topo::{require_root, BridgeTopo};
use crate::Result;

/// A queue drains at the service's rate: a stream is over when nothing arrived for this
/// long after its sender finished.
const DRAIN: Duration = Duration::from_millis(500);

/// Run the lab: every DUT in turn, then the verdicts and checks.
pub fn run(
    p: &Policy,
    policy_text: String,
    c: &Y1564Config,
    progress: &mut dyn FnMut(&str),
) -> Result<Y1564Result> {
    validate(c)?;
    let svc = services(p, c)?;
    require_root()?;
    let mut duts = Vec::new();
    for d in &c.duts {
        crate::check_interrupted()?;
        duts.push(run_dut(p, &svc, c, d, progress)?);
    }
    let mut r = Y1564Result {
        kind: "y1564".into(),
        meta: report::meta(),
        config: c.clone(),
        policy_file: p.file.clone(),
        policy_text,
        services: svc,
        duts,
        checks: Vec::new(),
    };
    finish(&mut r)?;
    Ok(r)
}

/// One DUT: its testbed, the configuration test of every service, the performance test.
fn run_dut(
    p: &Policy,
    svc: &[Service],
    c: &Y1564Config,
    name: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<DutRun> {
    let choice = DutChoice::parse(name)?;
    let owned = Owned::new(c.topology.as_ref(), HOSTS, "y1564", false)?;
    let bed = owned.bed()?;
    bed.address(&svc.iter().map(|s| s.src).collect::<Vec<_>>())?;
    let clocks = owned.receiver_ahead();
    let sessions: Vec<dut::Session> = svc
        .iter()
        .map(|s| dut::Session {
            src: SocketAddr::new(IpAddr::V4(s.src), 0),
            dst: SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), s.port),
            proto: 17,
        })
        .collect();
    // an external DUT: nothing to start (the topology's `[dut] external = true`)
    let running = choice.start_at(name, bed.place, p, &sessions, c.busy_poll)?;
    let alive = || owned.check_alive(name, running.as_ref());
    let mut streams = Vec::new();
    let total = c.streams(svc) + 1;
    for s in svc {
        for (phase, bps) in plan_config(s, c) {
            crate::check_interrupted()?;
            progress(&format!(
                "{name}: stream {}/{total}: {} {phase} at {:.3} Mbit/s",
                streams.len() + 1,
                s.name,
                bps / 1e6
            ));
            streams.extend(measure(&bed, clocks, &[(s, phase, bps)], c.step_s)?);
            alive()?;
        }
    }
    crate::check_interrupted()?;
    progress(&format!(
        "{name}: stream {total}/{total}: performance test, {} service(s) at their CIR for {} s",
        svc.len(),
        c.perf_s
    ));
    let all: Vec<(&Service, Phase, f64)> = svc
        .iter()
        .map(|s| (s, Phase::Performance, s.cir_bps as f64))
        .collect();
    streams.extend(measure(&bed, clocks, &all, c.perf_s)?);
    alive()?;
    let rep = dut::DutReport::of(running, c.topology.as_ref());
    Ok(DutRun {
        dut: name.to_string(),
        description: rep.description,
        streams,
        counters: rep.counters,
        errors: rep.errors,
        hosts: owned.host_info(),
    })
}

/// Send one stream per `(service, test, rate)` at once for `duration_s` and measure each;
/// `(rcv_ahead_ns, one_way)`: the testbed's clocks ([`Owned::receiver_ahead`]).
fn measure(
    bed: &Bed,
    (rcv_ahead_ns, one_way): (i64, bool),
    set: &[(&Service, Phase, f64)],
    duration_s: f64,
) -> Result<Vec<Stream>> {
    let sends: Vec<Send> = set
        .iter()
        .map(|&(s, _, bps)| Send::for_duration(s.src, s.port, s.frame, bps, duration_s))
        .collect();
    let sent = streams::send_between(bed.snd, bed.rcv, &sends, DRAIN, rcv_ahead_ns)?;
    Ok(set
        .iter()
        .zip(sent)
        .map(|(&(s, phase, bps), x)| Stream {
            service: s.name.clone(),
            phase,
            offered_bps: bps,
            achieved_bps: x.achieved_bps,
            attempted: x.attempted,
            send_errors: x.send_errors,
            late_max_ms: x.late_max_ms,
            figures: x.figures,
            one_way,
            error: x.error,
            verdict: Default::default(),
        })
        .collect())
}
