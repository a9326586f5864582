//! Running the Y.1564 lab: a fresh testbed per DUT, the DUT started on it, then every
//! configuration-test stream one at a time and the performance test's streams together
//! ([`crate::tests::streams::send`]).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use weir_core::policy::Policy;

use super::{
    finish, plan_config, services, validate, DutRun, Phase, Service, Stream, Y1564Config,
    Y1564Result,
};
use crate::dut::{self, DutSetup};
use crate::report;
use crate::tests::streams::{self, DutChoice, Send};
use crate::topo::{require_root, BridgeTopo};
use crate::{Error, Result};

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
    let topo = BridgeTopo::new("y1564")?;
    topo.add_sender_addrs(&svc.iter().map(|s| s.src).collect::<Vec<_>>())?;
    let sessions: Vec<dut::Session> = svc
        .iter()
        .map(|s| dut::Session {
            src: SocketAddr::new(IpAddr::V4(s.src), 0),
            dst: SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), s.port),
            proto: 17,
        })
        .collect();
    let setup = DutSetup {
        place: topo.dut_place(),
        policy: p,
        sessions: &sessions,
        busy_poll: c.busy_poll,
    };
    let running = choice.start(name, &setup)?;
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
            streams.extend(measure(&topo, &[(s, phase, bps)], c.step_s)?);
            if !running.is_running() {
                return Err(Error::Invalid(format!("{name} stopped during the test")));
            }
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
    streams.extend(measure(&topo, &all, c.perf_s)?);
    let rep = running.stop();
    Ok(DutRun {
        dut: name.to_string(),
        description: rep.description,
        streams,
        counters: rep.counters,
        errors: rep.errors,
    })
}

/// Send one stream per `(service, test, rate)` at once for `duration_s` and measure each.
fn measure(
    topo: &BridgeTopo,
    set: &[(&Service, Phase, f64)],
    duration_s: f64,
) -> Result<Vec<Stream>> {
    let sends: Vec<Send> = set
        .iter()
        .map(|&(s, _, bps)| Send::for_duration(s.src, s.port, s.frame, bps, duration_s))
        .collect();
    let sent = streams::send(topo, &sends, DRAIN)?;
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
            error: x.error,
            verdict: Default::default(),
        })
        .collect())
}
