//! The conformance labs' arguments (`y1564`, `rfc2544`, `rfc6349`): the standards' tests
//! against any DUT.

use std::path::PathBuf;
use weir_lab::tests::rfc2544::{self, Rfc2544, Rfc2544Config};
use weir_lab::tests::rfc6349::{Rfc6349, Rfc6349Config};
use weir_lab::tests::y1564::{self, Y1564Config, Y1564};

use super::{rate_arg, rates_arg, read_policy, rtts_arg, runs_arg, set};
use crate::lab::LabArgs;

#[derive(clap::Args)]
pub(in crate::lab) struct Y1564Args {
    /// Devices under test: weir (the policy as written), weir:TECHNIQUE, kernel:htb,
    /// kernel:bridge, cmd:SCRIPT. Default: weir,kernel:htb.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// The policy every DUT enforces; each leaf class is a service (default: the embedded
    /// examples/y1564-services.toml, three services on 100 Mbit/s).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The classes to test (comma-separated). Default: every leaf class.
    #[arg(long, value_delimiter = ',')]
    services: Vec<String>,
    /// Service acceptance criteria FTD/FDV/FLR[/AVAIL] of every service (default
    /// 10ms/5ms/0.1%/99.9%), or CLASS:FTD/FDV/FLR[/AVAIL] for one; repeat for several.
    #[arg(long)]
    sac: Vec<String>,
    /// Ethernet frame size of the test streams, bytes without FCS (default 1514).
    #[arg(long)]
    frame: Option<usize>,
    /// Sending time of each configuration-test stream (paper: 60s; quick: 1.5s).
    #[arg(long, value_parser = crate::sim::dur)]
    step_time: Option<weir_core::Duration>,
    /// Length of the service performance test (paper: 15min; quick: 4s).
    #[arg(long, value_parser = crate::sim::dur)]
    perf_time: Option<weir_core::Duration>,
    /// The CIR step test's steps, percent of the CIR (default 25,50,75,100).
    #[arg(long, value_delimiter = ',')]
    steps: Vec<f64>,
    /// The policing test sends CIR + OVERSHOOT x EIR (OVERSHOOT x CIR without EIR).
    #[arg(long)]
    overshoot: Option<f64>,
    /// weir DUTs busy-poll.
    #[arg(long)]
    busy_poll: bool,
    /// Run on real hosts: a topology file naming the hosts `sender` and `receiver` (reached
    /// over SSH, `weir agent` there) and the DUT's interfaces on this machine, or an
    /// external DUT (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for Y1564Args {
    type Lab = Y1564;
    const QUICK: &'static str =
        "CI-sized run: 1.5 s per configuration stream, a 4 s performance test (paper: 60 s and 15 min)";
    const OUT: &'static str = "weir-lab-y1564";
    const OUT_HELP: &'static str =
        "Directory for result.json, tables.txt, streams.csv, an IR chart per DUT (ir-DUT.svg) and report.html";

    fn apply(self, c: &mut Y1564Config) -> anyhow::Result<Y1564> {
        if !self.dut.is_empty() {
            c.duts = self.dut.iter().map(|d| d.trim().to_string()).collect();
        }
        if !self.services.is_empty() {
            c.services = self.services.iter().map(|d| d.trim().to_string()).collect();
        }
        for spec in &self.sac {
            let sac_of = |t: &str| y1564::Sac::parse(t).map_err(|e| anyhow::anyhow!("--sac: {e}"));
            match spec.split_once(':') {
                Some((class, t)) => {
                    c.sac_by_class.insert(class.trim().to_string(), sac_of(t)?);
                }
                None => c.sac = sac_of(spec)?,
            }
        }
        set(&mut c.frame, self.frame);
        set(&mut c.step_s, self.step_time.map(|d| d.as_secs_f64()));
        set(&mut c.perf_s, self.perf_time.map(|d| d.as_secs_f64()));
        if !self.steps.is_empty() {
            c.steps = self.steps.iter().map(|p| p / 100.0).collect();
        }
        set(&mut c.overshoot, self.overshoot);
        c.busy_poll = self.busy_poll;
        c.topology = super::sender_receiver(self.topology.as_deref())?;
        let (policy_file, policy_text) =
            read_policy(self.policy.as_deref(), y1564::DEFAULT_POLICY)?;
        Ok(Y1564 {
            policy_file,
            policy_text,
        })
    }
}

#[derive(clap::Args)]
pub(in crate::lab) struct Rfc2544Args {
    /// Devices under test: weir (the policy as written), weir:TECHNIQUE, kernel:htb,
    /// kernel:bridge, cmd:SCRIPT. Default: weir,kernel:htb.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// The policy every DUT enforces (default: the embedded examples/rfc2544-link.toml, one
    /// class on 100 Mbit/s).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The class the test stream is classified into (default: the policy's default class).
    #[arg(long)]
    class: Option<String>,
    /// Frame sizes in bytes, FCS included (comma-separated; paper: 64,128,256,512,1024,1280,1518;
    /// quick: 512,1518).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u32>,
    /// The medium's maximum rate (default 1Gbit).
    #[arg(long)]
    line_rate: Option<String>,
    /// Length of a throughput, latency or frame-loss trial (paper: 60s; quick: 1s).
    #[arg(long, value_parser = crate::sim::dur)]
    trial_time: Option<weir_core::Duration>,
    /// The throughput search stops within this percent of its answer (paper: 0.1; quick: 1).
    #[arg(long)]
    resolution: Option<f64>,
    /// Frame loss rate steps, percent of the maximum rate (default 10).
    #[arg(long)]
    loss_step: Option<f64>,
    /// Longest back-to-back burst tried, as time at the maximum rate (paper: 2s; quick:
    /// 500ms; 0s skips the test).
    #[arg(long, value_parser = crate::sim::dur)]
    b2b_time: Option<weir_core::Duration>,
    /// Back-to-back searches per frame size, averaged (paper: 50; quick: 1).
    #[arg(long)]
    b2b_trials: Option<u32>,
    /// weir DUTs busy-poll.
    #[arg(long)]
    busy_poll: bool,
    /// Run on real hosts: a topology file naming the hosts `sender` and `receiver` (reached
    /// over SSH, `weir agent` there) and the DUT's interfaces on this machine, or an
    /// external DUT (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for Rfc2544Args {
    type Lab = Rfc2544;
    const QUICK: &'static str =
        "CI-sized run: 512- and 1518-byte frames, 1 s trials, 1 % resolution, one back-to-back search of bursts up to 0.5 s";
    const OUT: &'static str = "weir-lab-rfc2544";
    const OUT_HELP: &'static str =
        "Directory for result.json, tables.txt, trials.csv, throughput.svg, frame-loss.svg and report.html";

    fn apply(self, c: &mut Rfc2544Config) -> anyhow::Result<Rfc2544> {
        if !self.dut.is_empty() {
            c.duts = self.dut.iter().map(|d| d.trim().to_string()).collect();
        }
        if self.class.is_some() {
            c.class = self.class;
        }
        if !self.sizes.is_empty() {
            c.sizes = self.sizes;
        }
        if let Some(r) = &self.line_rate {
            c.line_bps = rate_arg(r, "--line-rate")?;
        }
        set(&mut c.trial_s, self.trial_time.map(|d| d.as_secs_f64()));
        set(&mut c.resolution, self.resolution.map(|p| p / 100.0));
        set(&mut c.loss_step, self.loss_step.map(|p| p / 100.0));
        set(&mut c.b2b_s, self.b2b_time.map(|d| d.as_secs_f64()));
        set(&mut c.b2b_trials, self.b2b_trials);
        c.busy_poll = self.busy_poll;
        c.topology = super::sender_receiver(self.topology.as_deref())?;
        let (policy_file, policy_text) =
            read_policy(self.policy.as_deref(), rfc2544::DEFAULT_POLICY)?;
        Ok(Rfc2544 {
            policy_file,
            policy_text,
        })
    }
}

#[derive(clap::Args)]
pub(in crate::lab) struct Rfc6349Args {
    /// Devices under test: weir:TECHNIQUE (weir:fq_cobalt is weir's default queue),
    /// kernel:htb, kernel:htb-perflow, router:fifo, kernel:bridge, cmd:SCRIPT. Default:
    /// weir:fq_cobalt,kernel:htb (quick: weir:fq_cobalt).
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// Rates the DUT shapes to (comma-separated; a bare number is Mbit/s): default 10,100
    /// (quick: 10).
    #[arg(long, value_delimiter = ',')]
    rate: Vec<String>,
    /// Base round-trip times (comma-separated; a bare number is ms): default 50.
    #[arg(long, value_delimiter = ',')]
    rtt: Vec<String>,
    /// TCP connections of each throughput test, one test per value (default 1,4; quick: 1).
    #[arg(long, value_delimiter = ',')]
    connections: Vec<usize>,
    /// Congestion control of every connection: cubic (default), reno, bbr.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// The transfer's size as time at the maximum achievable TCP throughput (paper: 30s;
    /// quick: 10s).
    #[arg(long, value_parser = crate::sim::dur)]
    transfer: Option<weir_core::Duration>,
    /// Length of the baseline RTT measurement (paper: 5s; quick: 1s).
    #[arg(long, value_parser = crate::sim::dur)]
    baseline: Option<weir_core::Duration>,
    /// Length of the bottleneck bandwidth test (paper: 10s; quick: 2s).
    #[arg(long, value_parser = crate::sim::dur)]
    bb_time: Option<weir_core::Duration>,
    /// The bottleneck bandwidth test offers this percent of the rate (default 125).
    #[arg(long)]
    bb_offered: Option<u64>,
    /// The largest path MTU probed, bytes (default 9000).
    #[arg(long)]
    max_mtu: Option<u32>,
    /// The line behind the DUT runs at this percent of the DUT's rate (default 150).
    #[arg(long)]
    line_pct: Option<u64>,
    /// Runs per DUT, rate and RTT.
    #[arg(long)]
    runs: Option<u32>,
    /// weir DUTs and the line busy-poll.
    #[arg(long)]
    busy_poll: bool,
    /// Run on real hosts: a topology file naming the hosts `client` and `server` (reached
    /// over SSH, `weir agent` there) and the DUT's interfaces on this machine, or an
    /// external DUT; the line runs at the file's `[wan]`, or without one use --rtt 0 (the
    /// network's own path) (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for Rfc6349Args {
    type Lab = Rfc6349;
    const QUICK: &'static str = "CI-sized run: weir:fq_cobalt at 10 Mbit/s and 50 ms, one \
                                 connection, a 10 s transfer, 1 s baseline, 2 s bottleneck test";
    const OUT: &'static str = "weir-lab-rfc6349";
    const OUT_HELP: &'static str =
        "Directory for result.json, tables.txt, tests.csv, ttr.svg, buffer-delay.svg and report.html";

    fn apply(self, c: &mut Rfc6349Config) -> anyhow::Result<Rfc6349> {
        if !self.dut.is_empty() {
            c.duts = self.dut.iter().map(|d| d.trim().to_string()).collect();
        }
        if !self.rate.is_empty() {
            c.rates_bps = rates_arg(&self.rate)?;
        }
        if !self.rtt.is_empty() {
            c.rtts_ms = rtts_arg(&self.rtt)?;
        }
        if !self.connections.is_empty() {
            c.connections = self.connections;
        }
        c.cc = self.cc;
        set(&mut c.transfer_s, self.transfer.map(|d| d.as_secs_f64()));
        set(&mut c.baseline_s, self.baseline.map(|d| d.as_secs_f64()));
        set(&mut c.bb_s, self.bb_time.map(|d| d.as_secs_f64()));
        set(&mut c.bb_offered_pct, self.bb_offered);
        set(&mut c.max_mtu, self.max_mtu);
        set(&mut c.line_pct, self.line_pct);
        set(&mut c.runs, runs_arg(self.runs)?);
        c.busy_poll = self.busy_poll;
        if let Some(t) = &self.topology {
            c.topology = Some(weir_lab::remote::Topology::read(
                &t.display().to_string(),
                &weir_lab::tests::rrul::HOSTS,
            )?);
        }
        Ok(Rfc6349)
    }
}
