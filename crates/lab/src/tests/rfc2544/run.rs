//! Running the RFC 2544 lab: a fresh testbed per DUT (namespaces of this machine, or with
//! `--topology` the real hosts `sender` and `receiver` over SSH, the DUT here or external),
//! the DUT started on it, then per frame size the throughput search, the latency trial,
//! the frame loss steps and the back-to-back searches, each trial one stream of
//! [`crate::tests::streams::send_between`]. On real hosts the frame delays count only when
//! the hosts' clock offsets are known to within
//! [`ONE_WAY_BOUND_MS`](crate::remote::ONE_WAY_BOUND_MS) together.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use weir_core::policy::Policy;

use super::{
    back_to_back, class_under_test, finish, loss_steps, throughput, validate, Burst, DutRun,
    Rfc2544Config, Rfc2544Result, SizeRun, Trial, BURST_BATCH, FCS, PORT,
};
use crate::dut;
use crate::report;
use crate::tests::streams::{self, DutChoice, Send};
use crate::tests::testbed::{Owned, HOSTS};
use crate::topo::{require_root, BridgeTopo};
use crate::Result;

/// A trial is over when nothing arrived for this long after its sender finished.
const DRAIN: Duration = Duration::from_millis(500);

/// Run the lab: every DUT in turn, then the checks.
pub fn run(
    p: &Policy,
    policy_text: String,
    c: &Rfc2544Config,
    progress: &mut dyn FnMut(&str),
) -> Result<Rfc2544Result> {
    validate(c)?;
    let (class, class_bps, src) = class_under_test(p, c)?;
    require_root()?;
    let mut duts = Vec::new();
    for d in &c.duts {
        crate::check_interrupted()?;
        duts.push(run_dut(p, src, c, d, progress)?);
    }
    let mut r = Rfc2544Result {
        kind: "rfc2544".into(),
        meta: report::meta(),
        config: c.clone(),
        policy_file: p.file.clone(),
        policy_text,
        class,
        class_bps,
        src,
        duts,
        checks: Vec::new(),
    };
    finish(&mut r)?;
    Ok(r)
}

fn run_dut(
    p: &Policy,
    src: std::net::Ipv4Addr,
    c: &Rfc2544Config,
    name: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<DutRun> {
    let choice = DutChoice::parse(name)?;
    let owned = Owned::new(c.topology.as_ref(), HOSTS, "r2544", false)?;
    let bed = owned.bed()?;
    bed.address(&[src])?;
    let (rcv_ahead_ns, one_way) = owned.receiver_ahead();
    let sessions = [dut::Session {
        src: SocketAddr::new(IpAddr::V4(src), 0),
        dst: SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), PORT),
        proto: 17,
    }];
    // an external DUT: nothing to start (the topology's `[dut] external = true`)
    let running = choice.start_at(name, bed.place, p, &sessions, c.busy_poll)?;
    let alive = || owned.check_alive(name, running.as_ref());
    let send = |s: Send| -> Result<streams::Sent> {
        let x = streams::send_between(bed.snd, bed.rcv, &[s], DRAIN, rcv_ahead_ns)?.remove(0);
        alive()?;
        Ok(x)
    };
    let line = c.line_bps as f64;
    let mut sizes = Vec::new();
    for &size in &c.sizes {
        let frame = (size - FCS) as usize;
        let mut n = 0;
        let mut trial = |what: &str, bps: f64| -> Result<Trial> {
            crate::check_interrupted()?;
            n += 1;
            progress(&format!(
                "{name}: {size} B: {what} trial {n} at {:.3} Mbit/s",
                bps / 1e6
            ));
            let x = send(Send::for_duration(src, PORT, frame, bps, c.trial_s))?;
            Ok(Trial {
                asked_bps: bps,
                achieved_bps: x.achieved_bps,
                sent: x.attempted - x.send_errors,
                lost: x.figures.lost,
                ir_bps: x.figures.ir_bps,
                // one-way: only on one clock, or two known well enough
                ftd: x.figures.ftd.filter(|_| one_way),
                error: x.error,
            })
        };
        let (tput, throughput_trials) =
            throughput(line, c.resolution, &mut |r| trial("throughput", r))?;
        let throughput_limited = throughput_trials
            .iter()
            .any(|t| t.limited() && t.lost == 0 && t.rate_bps() >= tput * 0.999);
        let latency = if tput > 0.0 {
            Some(trial("latency", tput)?)
        } else {
            None
        };
        let loss = loss_steps(line, c.loss_step, &mut |r| trial("frame loss", r))?;
        let mut b2b = Vec::new();
        let mut b2b_bursts = Vec::new();
        if c.b2b_s > 0.0 {
            let pps = line / (frame as f64 * 8.0);
            let max = ((pps * c.b2b_s).round() as u64).max(2);
            for k in 0..c.b2b_trials {
                let mut bursts = 0;
                let (longest, tried) = back_to_back(max, &mut |frames| {
                    crate::check_interrupted()?;
                    bursts += 1;
                    progress(&format!(
                        "{name}: {size} B: back-to-back search {}/{}, burst {bursts} of {frames} frames",
                        k + 1,
                        c.b2b_trials
                    ));
                    let x = send(Send {
                        src,
                        port: PORT,
                        frame,
                        bps: line,
                        count: frames.max(2),
                        burst_batch: Some(BURST_BATCH),
                    })?;
                    Ok(Burst {
                        frames,
                        lost: x.figures.lost,
                        achieved_bps: x.achieved_bps,
                    })
                })?;
                b2b.push(longest);
                b2b_bursts.extend(tried);
            }
        }
        sizes.push(SizeRun {
            size,
            throughput_bps: tput,
            throughput_limited,
            throughput_trials,
            latency,
            loss,
            b2b,
            b2b_bursts,
        });
    }
    let rep = dut::DutReport::of(running, c.topology.as_ref());
    Ok(DutRun {
        dut: name.to_string(),
        description: rep.description,
        sizes,
        counters: rep.counters,
        errors: rep.errors,
        hosts: owned.host_info(),
        one_way,
    })
}
