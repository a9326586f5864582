//! Each lab's arguments: its `weir lab` subcommand (help, example), its own flags beside
//! the options every lab has, and how they go into the lab's preset configuration
//! ([`LabArgs::apply`]). What the flags mean is the lab's (`weir_lab::tests::*`).

use std::path::{Path, PathBuf};
use weir_lab::tests::advanced::{Advanced, AdvancedConfig};
use weir_lab::tests::aggregates::{self, Aggregates, AggregatesConfig};
use weir_lab::tests::basic::{Basic, BasicConfig};
use weir_lab::tests::diffserv::{self, Diffserv, DiffservConfig};
use weir_lab::tests::fidelity::{self, Fidelity, FidelityConfig};
use weir_lab::tests::postgate::{self, Postgate};
use weir_lab::tests::robustness::{self, Robustness, RobustnessConfig};
use weir_lab::tests::rrul::{Case, Rrul, RrulConfig};
use weir_lab::tests::testbed;
use weir_lab::tests::voip::{self, Voip, VoipConfig};

use super::{LabArgs, WithCommon};

mod conformance;
pub(super) use conformance::{Rfc2544Args, Rfc6349Args, Y1564Args};

/// The subcommands: a lab each (its options: the common ones, then its own), and `report`.
#[derive(clap::Subcommand)]
pub(super) enum LabCmd {
    /// Seed 002's link-shaping fidelity tests: CBR flows of 64/800/1518-byte frames at
    /// 8k-200k packets/s through veth, weir (0 ms, 125 ms, 125 ms + 155 Mbit/s) and the
    /// kernel's TBF/HTB; inter-frame gap and delay percentiles, loss.
    #[command(after_help = "Example:\n  sudo weir lab fidelity --quick --out /tmp/fidelity")]
    Fidelity(WithCommon<FidelityArgs>),
    /// Seed 000's Basic Test: 4 TCP sessions per class of the policy (default: the T1
    /// split into 20/40/128/256/1100 kbit/s classes); accuracy, fairness, Jain's index and
    /// retransmissions (Table 4) for one or more DUTs side by side.
    #[command(
        after_help = "Example:\n  sudo weir lab basic --dut weir:cbq+pfq,kernel:htb --quick --out /tmp/basic"
    )]
    Basic(WithCommon<BasicArgs>),
    /// Seed 000's Robustness Test (Table 5): the Basic Test with WAN delays of 10/50/100/150
    /// ms per class (Table 4 again), one session in a 200 kbit/s class under 0.5-8 %
    /// periodic loss (goodput must degrade smoothly), and one session at a time in an 80
    /// kbit/s class from different TCP senders (reno/cubic/bbr, SACK on/off, min RTO).
    #[command(
        after_help = "Example:\n  sudo weir lab robustness --dut weir:cbq+pfq --only loss --quick --out /tmp/robustness"
    )]
    Robustness(WithCommon<RobustnessArgs>),
    /// Seed 000's Advanced Test (Table 6): inter-class and intra-class bandwidth borrowing on
    /// a T1: how much of the bandwidth a stopping session frees the other takes, and how fast.
    #[command(
        after_help = "Example:\n  sudo weir lab advanced --dut weir:cbq+pfq --quick --out /tmp/advanced"
    )]
    Advanced(WithCommon<AdvancedArgs>),
    /// Seed 000's VoIP test (Table 6, Fig. 13, Table 7): one G.729 call beside 20 FTP
    /// sessions on 125 kbit/s and a T1 (voice class 30 kbit/s, FTP borrows it while idle):
    /// one-way delay, RFC 3550 jitter, loss, E-model R and MOS, time to establish, per DUT.
    #[command(after_help = "Example:\n  sudo weir lab voip --quick --out /tmp/voip")]
    Voip(WithCommon<VoipArgs>),
    /// Seed 001's aggregate-marking test (Tables 2-4): two customers with equal trTCM
    /// profiles (CIR 800 kbit/s, PIR 1.4 Mbit/s), one with 8 TCP flows and one with 2,
    /// through a weir edge router into a 10 Mbit/s weir core (AF 3 Mbit/s with three-colour
    /// RED beside best-effort UDP): utilisation of CIR, per-flow goodput and throughput,
    /// Jain's index among flows and between aggregates.
    #[command(after_help = "Example:\n  sudo weir lab aggregates --quick --out /tmp/aggregates")]
    Aggregates(WithCommon<AggregatesArgs>),
    /// Seed 004's DiffServ router chain (Figs. 8-25): host A through ingress, interior and
    /// egress routers to host B, each router link also flooded by 100 Mbit/s of UDP; EF and
    /// AF reservations of 5 Mbit/s for UDP and TCP; one-way delay and jitter with the
    /// receiver's clock skew estimated from an echo calibration; weir beside the kernel's HTB.
    #[command(after_help = "Example:\n  sudo weir lab diffserv --quick --out /tmp/diffserv")]
    Diffserv(WithCommon<DiffservArgs>),
    /// Seed 003's simulation (Figs. 3-5): 48 bulk TCP flows in 4 classes and a 300 kbit/s
    /// CBR from servers through an ADSL line's ATU-C (a weir emulator: 8 Mbit/s, 256-packet
    /// queue) and the device under test to the clients: none, partition or SFQ at 90 %,
    /// Postgate, weir's autorate, the kernel's HTB; the ATU-C's queueing delay (read from
    /// the emulator), utilisation, per-class bandwidth, Postgate's weights; then a line
    /// whose rate varies (a trace) with static, Postgate and autorate.
    #[command(
        after_help = "Example:\n  sudo weir lab postgate --devices postgate+tcr,htb --varying autorate+tcr --out /tmp/postgate"
    )]
    Postgate(WithCommon<PostgateArgs>),
    /// Flent's Realtime Response Under Load against any DUT: probes (UDP one-way each way,
    /// ICMP) every 10 ms through an idle phase and then 4 TCP uploads and 4 downloads (rrul,
    /// rrul_be), N one way (tcp_nup, tcp_ndown), two hosts (hosts), a G.729 call (voice),
    /// with and without ECN (ecn), with and without an ACK filter (ackfilter); the DUT
    /// shapes at 95 % of a line with a modem's FIFO. Idle and loaded latency, the latency
    /// the load adds, goodput each way and its share of the rate, Jain, each flow's
    /// smoothed RTT, retransmissions, the bufferbloat grade.
    #[command(
        after_help = "Examples:\n  sudo weir lab rrul --quick --case rrul_be --dut kernel:bridge,router:fifo,weir:cbq+pfq --out /tmp/rrul\n  sudo weir lab rrul --case rrul_be,hosts --rate 10,100 --rtt 50 --dut kernel:htb,weir:cbq+pfq"
    )]
    Rrul(WithCommon<RrulArgs>),
    /// ITU-T Y.1564 service activation test against any DUT: each service of the policy (a
    /// leaf class: CIR = its rate, EIR = its ceil - rate) by a constant-rate UDP stream at
    /// 25/50/75/100 % of its CIR, at CIR+EIR and 25 % over its profile (policing), then
    /// every service at its CIR at once (service performance test); information rate, frame
    /// delay, delay variation, loss and availability against the acceptance criteria, per
    /// DUT side by side.
    #[command(
        after_help = "Examples:\n  sudo weir lab y1564 --quick --out /tmp/y1564\n  sudo weir lab y1564 --policy my-services.toml --dut weir,kernel:htb,cmd:./router.sh --sac 10ms/5ms/0.1% --sac voice:5ms/1ms/0.01%"
    )]
    Y1564(WithCommon<Y1564Args>),
    /// RFC 2544 benchmarks against any DUT: throughput (the highest rate without loss, by
    /// binary search), latency at that rate, frame loss rate from the maximum rate down in
    /// 10 % steps, back-to-back frames, at the RFC's frame sizes (64-1518 bytes), weir
    /// beside the kernel's HTB or a script.
    #[command(
        after_help = "Examples:\n  sudo weir lab rfc2544 --quick --out /tmp/rfc2544\n  sudo weir lab rfc2544 --policy examples/y1564-services.toml --class video --dut weir,kernel:htb --sizes 64,512,1518"
    )]
    Rfc2544(WithCommon<Rfc2544Args>),
    /// RFC 6349 TCP throughput testing against any DUT: the path MTU, the baseline RTT and
    /// the bottleneck bandwidth, then TCP transfers by 1 and 4 connections with the RFC's
    /// metrics (TCP Transfer Time Ratio, TCP Efficiency, Buffer Delay Percentage), the DUT
    /// shaping to each rate with a line of each RTT behind it.
    #[command(
        after_help = "Examples:\n  sudo weir lab rfc6349 --quick --out /tmp/rfc6349\n  sudo weir lab rfc6349 --rate 10,100 --rtt 50 --dut weir:fq_cobalt,kernel:htb,cmd:./router.sh"
    )]
    Rfc6349(WithCommon<Rfc6349Args>),
    /// Re-make the tables, plots and HTML report of a result file, or compare several.
    #[command(
        after_help = "Examples:\n  weir lab report /tmp/basic/result.json\n  weir lab report before/result.json after/result.json --label before,after --out /tmp/cmp"
    )]
    Report(ReportArgs),
}

/// `--out`'s help for a lab that also writes its table as CSV.
const OUT_HELP_CSV: &str = "Directory for result.json, table.txt/csv, SVG charts, report.html, Flent data (*.flent.gz) and series.csv";

/// Options shared by the seed 000 tests (`basic`, `robustness`, `advanced`, `voip`).
#[derive(clap::Args)]
struct TestbedArgs {
    /// A device under test: weir:cbq, weir:cbq+red, weir:cbq+pfq, weir:cbq+pfq+red, weir:tcr,
    /// weir:cbq+tcr, weir:cbq+pfq+tcr, kernel:htb, kernel:htb-perflow, cmd:SCRIPT; a weir DUT
    /// with +mssN (e.g. weir:cbq+pfq+mss256) also clamps every TCP connection's MSS to N
    /// bytes. Repeat or comma-separate for several.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// Compare weir:cbq, weir:cbq+pfq, weir:cbq+pfq+red, weir:tcr, weir:cbq+tcr,
    /// weir:cbq+pfq+tcr, kernel:htb and kernel:htb-perflow (plus any --dut) side by side.
    #[arg(long)]
    compare: bool,
    /// Runs per DUT (paper: 5).
    #[arg(long)]
    runs: Option<u32>,
    /// Congestion control of every sender: reno (the paper's), cubic, bbr.
    #[arg(long, default_value = "reno")]
    cc: String,
    /// weir DUTs busy-poll (more precise timing, one busy core).
    #[arg(long)]
    busy_poll: bool,
    /// Run on real hosts: a topology file naming the hosts `sender` and `receiver` (reached
    /// over SSH, `weir agent` there) and the DUT (docs/lab.md, "Real hosts"); for a WAN
    /// stage (robustness, voip's line) the file's `[wan]` names two interfaces here.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

/// Makes a lab's DUT list from `--compare` and `--dut` (`None`: the lab's default).
type DutList = fn(bool, Vec<String>) -> weir_lab::Result<Option<Vec<String>>>;

impl TestbedArgs {
    /// Put the options into a seed 000 lab's configuration; `list` makes its DUT list,
    /// `topology` takes `--topology`.
    fn apply(
        self,
        list: DutList,
        duts: &mut Vec<String>,
        runs: &mut u32,
        cc: &mut String,
        busy_poll: &mut bool,
        topology: &mut Option<weir_lab::remote::Topology>,
    ) -> anyhow::Result<()> {
        set(duts, list(self.compare, self.dut)?);
        set(runs, runs_arg(self.runs)?);
        *cc = self.cc;
        *busy_poll = self.busy_poll;
        // each lab refuses `external` in its plan, where it knows the topology
        *topology = sender_receiver(self.topology.as_deref())?;
        Ok(())
    }
}

/// `--topology FILE` of a lab on the seed 000 testbed's hosts `sender` and `receiver`.
fn sender_receiver(
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<weir_lab::remote::Topology>> {
    Ok(match file {
        Some(t) => Some(weir_lab::remote::Topology::read(
            &t.display().to_string(),
            &testbed::HOSTS,
        )?),
        None => None,
    })
}

/// `*to = v` when the flag was given.
fn set<T>(to: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *to = v;
    }
}

/// `--runs`, refused when 0.
fn runs_arg(runs: Option<u32>) -> anyhow::Result<Option<u32>> {
    match runs {
        Some(0) => anyhow::bail!("--runs: must be at least 1"),
        r => Ok(r),
    }
}

#[derive(clap::Args)]
pub(super) struct FidelityArgs {
    /// Frame sizes in bytes, FCS included (comma-separated).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<u32>>,
    /// Packet rates, packets/s (comma-separated).
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<u32>>,
    /// Repeats of every cell.
    #[arg(long)]
    repeats: Option<u32>,
    /// Sending time per cell (e.g. 1s, 400ms).
    #[arg(long, value_parser = crate::sim::dur)]
    cell_time: Option<weir_core::Duration>,
    /// Paths to run (comma-separated): veth, weir-0ms, weir-125ms, weir-125ms-jitter,
    /// weir-125ms-155M, weir-155M, tbf-155M, htb-155M. Default: all.
    #[arg(long, value_delimiter = ',')]
    paths: Option<Vec<String>>,
    /// Let weir's bridge sleep between packets instead of busy-polling.
    #[arg(long)]
    no_busy_poll: bool,
    /// Seed of weir's random number generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run on real hosts: a topology file naming the hosts `sender` and `receiver` (the
    /// CBR's ends, reached over SSH, `weir agent` there) and the DUT's interfaces on this
    /// machine, where every path runs; the default paths then leave out `veth`
    /// (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for FidelityArgs {
    type Lab = Fidelity;
    const QUICK: &'static str =
        "A CI-sized run: 64- and 1518-byte frames at 8k and 80k packets/s, one 0.4 s repeat";
    const OUT: &'static str = "weir-lab-fidelity";
    const OUT_HELP: &'static str =
        "Directory for result.json, tables.txt, SVG plots and report.html";

    fn apply(self, c: &mut FidelityConfig) -> anyhow::Result<Fidelity> {
        set(&mut c.sizes, self.sizes);
        set(&mut c.rates, self.rates);
        set(&mut c.repeats, self.repeats);
        set(
            &mut c.cell_ms,
            self.cell_time.map(|t| (t.as_nanos() / 1_000_000).max(1)),
        );
        if let Some(names) = &self.paths {
            c.paths = fidelity::paths_named(names).map_err(|e| anyhow::anyhow!("--paths: {e}"))?;
        }
        c.busy_poll = !self.no_busy_poll;
        c.seed = self.seed;
        c.topology = sender_receiver(self.topology.as_deref())?;
        if c.topology.is_some() && self.paths.is_none() {
            // the calibration path is two namespaces of this machine
            c.paths.retain(|p| p.kind != fidelity::PathKind::Veth);
        }
        Ok(Fidelity)
    }
}

#[derive(clap::Args)]
pub(super) struct BasicArgs {
    #[command(flatten)]
    t: TestbedArgs,
    /// The policy every DUT enforces (default: the embedded examples/basic-test.toml).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Length of a run (paper: 250s).
    #[arg(long, value_parser = crate::sim::dur)]
    duration: Option<weir_core::Duration>,
    /// Analysis window FROM-TO in seconds (paper: 30-230).
    #[arg(long)]
    window: Option<String>,
}

impl LabArgs for BasicArgs {
    type Lab = Basic;
    const OUT: &'static str = "weir-lab-basic";
    const OUT_HELP: &'static str = OUT_HELP_CSV;

    fn apply(self, c: &mut BasicConfig) -> anyhow::Result<Basic> {
        self.t.apply(
            testbed::dut_list,
            &mut c.duts,
            &mut c.runs,
            &mut c.cc,
            &mut c.busy_poll,
            &mut c.topology,
        )?;
        if let Some(d) = self.duration {
            // in the paper's proportions, unless --window says otherwise
            c.set_duration(d.as_secs_f64());
        }
        if let Some(w) = &self.window {
            c.window_s = window_arg(w)?;
        }
        let (policy_file, policy_text) =
            read_policy(self.policy.as_deref(), crate::DEFAULT_POLICY)?;
        Ok(Basic {
            policy_file,
            policy_text,
        })
    }
}

/// `--window FROM-TO`, in seconds.
fn window_arg(w: &str) -> anyhow::Result<(f64, f64)> {
    let (x, y) = w
        .split_once('-')
        .ok_or_else(|| anyhow::anyhow!("--window: expected FROM-TO in seconds, e.g. 30-230"))?;
    let p = |t: &str| {
        t.trim()
            .trim_end_matches('s')
            .parse::<f64>()
            .map_err(|_| anyhow::anyhow!("--window: '{t}' is not a number of seconds"))
    };
    Ok((p(x)?, p(y)?))
}

/// The policy file's name and text, or the lab's embedded `default` (name, text).
fn read_policy(path: Option<&Path>, default: (&str, &str)) -> anyhow::Result<(String, String)> {
    Ok(match path {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => (default.0.to_string(), default.1.to_string()),
    })
}

#[derive(clap::Args)]
pub(super) struct RobustnessArgs {
    #[command(flatten)]
    t: TestbedArgs,
    /// The policy of the heterogeneous-delays subtest (default: the embedded
    /// examples/basic-test.toml); the loss and senders subtests generate their own.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Subtests to run (comma-separated): delays, loss, senders. Default: all.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// A `weir lab basic` result.json to print and plot beside the delays subtest.
    #[arg(long)]
    baseline: Option<PathBuf>,
}

impl LabArgs for RobustnessArgs {
    type Lab = Robustness;
    const OUT: &'static str = "weir-lab-robustness";

    fn apply(self, c: &mut RobustnessConfig) -> anyhow::Result<Robustness> {
        self.t.apply(
            testbed::dut_list,
            &mut c.duts,
            &mut c.delays.runs,
            &mut c.cc,
            &mut c.busy_poll,
            &mut c.topology,
        )?;
        if !self.only.is_empty() {
            c.subtests = self.only;
        }
        let (policy_file, policy_text) =
            read_policy(self.policy.as_deref(), crate::DEFAULT_POLICY)?;
        let baseline = match &self.baseline {
            Some(p) => Some(robustness::load_baseline(p)?),
            None => None,
        };
        Ok(Robustness {
            policy_file,
            policy_text,
            baseline,
        })
    }
}

#[derive(clap::Args)]
pub(super) struct AdvancedArgs {
    #[command(flatten)]
    t: TestbedArgs,
    /// Subtests to run (comma-separated): inter, intra. Default: both.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

impl LabArgs for AdvancedArgs {
    type Lab = Advanced;
    const OUT: &'static str = "weir-lab-advanced";

    fn apply(self, c: &mut AdvancedConfig) -> anyhow::Result<Advanced> {
        self.t.apply(
            testbed::dut_list,
            &mut c.duts,
            &mut c.runs,
            &mut c.cc,
            &mut c.busy_poll,
            &mut c.topology,
        )?;
        if !self.only.is_empty() {
            c.subtests = self.only;
        }
        Ok(Advanced)
    }
}

#[derive(clap::Args)]
pub(super) struct VoipArgs {
    /// Devices under test as for the other tests, plus `router:fifo` (a plain router's FIFO
    /// at the link rate, no manager). Default: router:fifo, weir:cbq, weir:cbq+pfq,
    /// weir:cbq+pfq+tcr, weir:cbq+pfq+mss256, kernel:htb. --compare adds router:fifo and
    /// weir:cbq+pfq+mss256 to the usual eight.
    #[command(flatten)]
    t: TestbedArgs,
    /// Links (comma-separated): 125k, t1. Default: both.
    #[arg(long, value_delimiter = ',')]
    link: Vec<String>,
    /// Depth of the fixed jitter buffer, ms.
    #[arg(long, default_value_t = 60.0)]
    jitter_buffer: f64,
}

impl LabArgs for VoipArgs {
    type Lab = Voip;
    const OUT: &'static str = "weir-lab-voip";
    const OUT_HELP: &'static str = OUT_HELP_CSV;

    fn apply(self, c: &mut VoipConfig) -> anyhow::Result<Voip> {
        self.t.apply(
            voip::dut_list,
            &mut c.duts,
            &mut c.runs,
            &mut c.cc,
            &mut c.busy_poll,
            &mut c.topology,
        )?;
        if !self.link.is_empty() {
            c.links = self.link;
        }
        c.buffer_ms = self.jitter_buffer;
        Ok(Voip)
    }
}

#[derive(clap::Args)]
pub(super) struct AggregatesArgs {
    /// Runs (paper: 5).
    #[arg(long)]
    runs: Option<u32>,
    /// Length of a run (paper: 120s).
    #[arg(long, value_parser = crate::sim::dur)]
    duration: Option<weir_core::Duration>,
    /// When the ten monitored flows start (paper: 10s).
    #[arg(long, value_parser = crate::sim::dur)]
    start: Option<weir_core::Duration>,
    /// Flows of the background TCP aggregate.
    #[arg(long)]
    background_flows: Option<usize>,
    /// Rate of the best-effort UDP flood (e.g. 10Mbit).
    #[arg(long)]
    udp_rate: Option<String>,
    /// Delay the core adds to the ACKs (e.g. 20ms).
    #[arg(long, value_parser = crate::sim::dur)]
    ack_delay: Option<weir_core::Duration>,
    /// Congestion control of every sender: reno (default), cubic, bbr.
    #[arg(long, default_value = "reno")]
    cc: String,
    /// The two weir routers busy-poll.
    #[arg(long)]
    busy_poll: bool,
    /// Edge marker: aggregate (seed 001's trTCM per aggregate), fair (weir's flow-fair
    /// marker) or both, each a configuration run in turn.
    #[arg(long, default_value = "both")]
    marker: String,
    /// Run on real hosts: a topology file naming the hosts `sender` and `receiver`, the
    /// edge's interfaces here (`[dut]`) and the core's (`[wan]`) (docs/lab.md, "Real
    /// hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for AggregatesArgs {
    type Lab = Aggregates;
    const QUICK: &'static str = "CI-sized run: 1 run of 35 s, monitored flows from 5 s";
    const OUT: &'static str = "weir-lab-aggregates";

    fn apply(self, c: &mut AggregatesConfig) -> anyhow::Result<Aggregates> {
        set(&mut c.runs, runs_arg(self.runs)?);
        set(&mut c.duration_s, self.duration.map(|d| d.as_secs_f64()));
        set(
            &mut c.monitored_start_s,
            self.start.map(|d| d.as_secs_f64()),
        );
        if c.monitored_start_s >= c.duration_s {
            anyhow::bail!(
                "--start {} s: the monitored flows must start before the end of the {} s run",
                c.monitored_start_s,
                c.duration_s
            );
        }
        set(&mut c.background_flows, self.background_flows);
        if let Some(r) = &self.udp_rate {
            c.udp_bps = rate_arg(r, "--udp-rate")?;
        }
        set(
            &mut c.ack_delay_ms,
            self.ack_delay.map(|d| d.as_nanos() / 1_000_000),
        );
        c.cc = self.cc;
        c.busy_poll = self.busy_poll;
        c.markers = aggregates::Marker::parse_list(&self.marker)
            .map_err(|e| anyhow::anyhow!("--marker {}: {e}", self.marker))?;
        c.topology = sender_receiver(self.topology.as_deref())?;
        Ok(Aggregates)
    }
}

/// A rate flag (`10Mbit`), refused naming the flag.
fn rate_arg(r: &str, flag: &str) -> anyhow::Result<u64> {
    weir_core::units::parse_rate(r).map_err(|e| anyhow::anyhow!("{flag} {r}: {e}"))
}

#[derive(clap::Args)]
pub(super) struct DiffservArgs {
    /// Each run's measured stream (paper: 600s; default 60s).
    #[arg(long, value_parser = crate::sim::dur)]
    duration: Option<weir_core::Duration>,
    /// Background alone before each stream starts.
    #[arg(long, value_parser = crate::sim::dur)]
    warmup: Option<weir_core::Duration>,
    /// Clock calibration without load (paper: 120s).
    #[arg(long, value_parser = crate::sim::dur)]
    calibration: Option<weir_core::Duration>,
    /// Each background host's rate (paper: 100Mbit; 0 for none).
    #[arg(long)]
    background: Option<String>,
    /// Groups of runs: all, or a list of idle, loaded, ef-udp, af-udp, ef-tcp, af-tcp.
    #[arg(long, default_value = "all")]
    groups: String,
    /// Routers: weir, kernel:htb or both.
    #[arg(long, default_value = "both")]
    device: String,
    /// Congestion control of the TCP runs: reno, cubic (default), bbr.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Injected offset of the receiver's clock, ns.
    #[arg(long, allow_hyphen_values = true)]
    offset_ns: Option<i64>,
    /// Injected drift of the receiver's clock, ppm.
    #[arg(long, allow_hyphen_values = true)]
    drift_ppm: Option<f64>,
    /// Run on real hosts: a topology file naming the hosts `a` (the measured sender), `b`
    /// (the receiver) and `c0`-`c2` (the background), reached over SSH with `weir agent`
    /// there, and three `[[router]]` tables (lan, background, wan: interfaces of this
    /// machine, ingress first) where the routers run (docs/lab.md, "Real hosts"). B's
    /// clock is its own: no --offset-ns or --drift-ppm.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for DiffservArgs {
    type Lab = Diffserv;
    const QUICK: &'static str =
        "CI-sized run: a 2 s measured stream per run after 0.5 s of background alone, a 10 s \
         calibration, the kernel peer on the UDP groups only";
    const OUT: &'static str = "weir-lab-diffserv";

    fn apply(self, c: &mut DiffservConfig) -> anyhow::Result<Diffserv> {
        set(&mut c.duration_s, self.duration.map(|d| d.as_secs_f64()));
        set(&mut c.warmup_s, self.warmup.map(|d| d.as_secs_f64()));
        set(
            &mut c.calibration_s,
            self.calibration.map(|d| d.as_secs_f64()),
        );
        if let Some(r) = &self.background {
            c.background_bps = if r.trim() == "0" {
                0
            } else {
                rate_arg(r, "--background")?
            };
        }
        c.set_groups(
            diffserv::Group::parse_list(&self.groups)
                .map_err(|e| anyhow::anyhow!("--groups: {e}"))?,
        );
        c.devices = diffserv::Device::parse_list(&self.device)
            .map_err(|e| anyhow::anyhow!("--device: {e}"))?;
        c.cc = self.cc;
        set(&mut c.offset_ns, self.offset_ns);
        set(&mut c.drift_ppm, self.drift_ppm);
        if let Some(t) = &self.topology {
            if self.offset_ns.is_some() || self.drift_ppm.is_some() {
                anyhow::bail!(
                    "--offset-ns and --drift-ppm inject a skew into the receiver's clock in \
                     namespaces; with --topology the hosts' clocks are their own"
                );
            }
            c.topology = Some(weir_lab::remote::Topology::read_chain(
                &t.display().to_string(),
                &diffserv::HOSTS,
                diffserv::ROUTERS,
            )?);
        }
        Ok(Diffserv)
    }
}

#[derive(clap::Args)]
pub(super) struct PostgateArgs {
    /// Devices on the seed's line, comma-separated: none, partition, sfq,
    /// postgate[:DELTA][+tcr], autorate[:THRESHOLD][+tcr], htb; or paper (none, partition,
    /// sfq, postgate, autorate, htb).
    #[arg(long)]
    devices: Option<String>,
    /// Devices on the varying line (same forms), or none to skip it.
    #[arg(long)]
    varying: Option<String>,
    /// The ADSL downstream rate (default 8Mbit).
    #[arg(long)]
    line: Option<String>,
    /// Bulk flows per class (paper: 12).
    #[arg(long)]
    flows_per_class: Option<usize>,
    /// Time between two batches of four flows (paper: 10s).
    #[arg(long, value_parser = crate::sim::dur)]
    step: Option<weir_core::Duration>,
    /// When the first batch stops (paper: 350s).
    #[arg(long, value_parser = crate::sim::dur)]
    stop_at: Option<weir_core::Duration>,
    /// Length of the varying-line runs (default 120s).
    #[arg(long, value_parser = crate::sim::dur)]
    varying_length: Option<weir_core::Duration>,
    /// Congestion control of every flow: reno (default, ns-2's), cubic, bbr.
    #[arg(long, default_value = "reno")]
    cc: String,
    /// Run on real hosts: a topology file naming the hosts `client` (the sinks) and
    /// `server` (the senders and reflectors), reached over SSH with `weir agent` there;
    /// its `[dut]` is where the device runs and its `[wan]` where the ATU-C (the line)
    /// is emulated, both on this machine (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for PostgateArgs {
    type Lab = Postgate;
    const QUICK: &'static str = "CI-sized run: 8 flows in steps of 6 s (30 s) with none and \
                                 postgate+tcr; a 20 s varying line with none and autorate+tcr";
    const OUT: &'static str = "weir-lab-postgate";
    const OUT_HELP: &'static str =
        "Directory for result.json, table.txt, SVG charts, report.html, the trace, Flent data (*.flent.gz) and series.csv";

    fn apply(self, c: &mut postgate::LabConfig) -> anyhow::Result<Postgate> {
        use postgate::Device;
        if let Some(d) = &self.devices {
            c.devices = Device::parse_list(d).map_err(|e| anyhow::anyhow!("--devices: {e}"))?;
        }
        if let Some(d) = &self.varying {
            c.varying = if d.trim() == "none" {
                Vec::new()
            } else {
                Device::parse_list(d).map_err(|e| anyhow::anyhow!("--varying: {e}"))?
            };
        }
        if let Some(l) = &self.line {
            c.set_line(rate_arg(l, "--line")?);
        }
        set(&mut c.flows_per_class, self.flows_per_class);
        set(&mut c.step_s, self.step.map(|d| d.as_secs_f64()));
        set(&mut c.stop_at_s, self.stop_at.map(|d| d.as_secs_f64()));
        set(
            &mut c.varying_s,
            self.varying_length.map(|d| d.as_secs_f64()),
        );
        c.cc = self.cc;
        if let Some(t) = &self.topology {
            c.topology = Some(weir_lab::remote::Topology::read(
                &t.display().to_string(),
                &postgate::HOSTS,
            )?);
        }
        Ok(Postgate)
    }
}

#[derive(clap::Args)]
pub(super) struct RrulArgs {
    /// Cases (comma-separated): rrul, rrul_be, tcp_nup, tcp_ndown, hosts, voice, ecn,
    /// ackfilter. Default: all.
    #[arg(long, value_delimiter = ',')]
    case: Vec<String>,
    /// Devices under test: kernel:bridge, router:fifo, kernel:htb, kernel:htb-perflow,
    /// weir:TECHNIQUE (e.g. weir:cbq+pfq, weir:fq_cobalt), cmd:SCRIPT. Default:
    /// kernel:bridge, router:fifo, kernel:htb, weir:cbq+pfq, weir:fq_cobalt.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// Line rates (comma-separated; a bare number is Mbit/s): default 10,100 (quick: 10).
    /// The ackfilter case has its own 20 Mbit/s down, 0.5 Mbit/s up line.
    #[arg(long, value_delimiter = ',')]
    rate: Vec<String>,
    /// Base round-trip times (comma-separated; a bare number is ms): default 0,50 (quick: 50).
    #[arg(long, value_delimiter = ',')]
    rtt: Vec<String>,
    /// Congestion control of every flow: cubic (default), reno, bbr.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Runs per DUT and part.
    #[arg(long)]
    runs: Option<u32>,
    /// Flows of tcp_nup and tcp_ndown.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// The line behind the DUT runs at this percent of the DUT's rate (default 150).
    #[arg(long)]
    line_pct: Option<u64>,
    /// The idle phase (probes only) before the load.
    #[arg(long, value_parser = crate::sim::dur)]
    idle: Option<weir_core::Duration>,
    /// The load's length.
    #[arg(long, value_parser = crate::sim::dur)]
    length: Option<weir_core::Duration>,
    /// weir DUTs and the line busy-poll.
    #[arg(long)]
    busy_poll: bool,
    /// Run on real hosts: a topology file naming the hosts `client` and `server` (reached
    /// over SSH, `weir agent` there) and the DUT's interfaces on this machine; the line
    /// runs at the file's `[wan]`, or without one use --rtt 0 (the network's own path)
    /// (docs/lab.md, "Real hosts").
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
}

impl LabArgs for RrulArgs {
    type Lab = Rrul;
    const QUICK: &'static str = "CI-sized runs: 2 s idle and 10 s of load (paper: Flent's 5 s \
                                 and 60 s), at 10 Mbit/s and 50 ms unless --rate/--rtt say \
                                 otherwise";
    const OUT: &'static str = "weir-lab-rrul";
    const OUT_HELP: &'static str =
        "Directory for result.json, table.txt, CSVs, SVG charts, report.html, Flent data (*.flent.gz) and series.csv";
    const STRICT: &'static str = "Exit with status 3 when a check fails";

    fn apply(self, c: &mut RrulConfig) -> anyhow::Result<Rrul> {
        if !self.case.is_empty() {
            c.cases = self
                .case
                .iter()
                .map(|s| Case::parse(s.trim()))
                .collect::<weir_lab::Result<_>>()?;
        }
        if !self.dut.is_empty() {
            c.duts = self.dut.iter().map(|d| d.trim().to_string()).collect();
        }
        if !self.rate.is_empty() {
            c.rates_bps = rates_arg(&self.rate)?;
        }
        if !self.rtt.is_empty() {
            c.rtts_ms = rtts_arg(&self.rtt)?;
        }
        set(&mut c.runs, runs_arg(self.runs)?);
        set(&mut c.idle_s, self.idle.map(|d| d.as_secs_f64()));
        set(&mut c.load_s, self.length.map(|d| d.as_secs_f64()));
        c.cc = self.cc;
        c.streams = self.streams;
        set(&mut c.line_pct, self.line_pct);
        c.busy_poll = self.busy_poll;
        if let Some(t) = &self.topology {
            c.topology = Some(weir_lab::remote::Topology::read(
                &t.display().to_string(),
                &weir_lab::tests::rrul::HOSTS,
            )?);
        }
        Ok(Rrul)
    }
}

/// `--rate` values: a bare number is Mbit/s.
fn rates_arg(v: &[String]) -> anyhow::Result<Vec<u64>> {
    v.iter()
        .map(|r| quantity(r, "--rate", 1_000_000.0, weir_core::units::parse_rate))
        .collect()
}

/// `--rtt` values, ms: a bare number is ms.
fn rtts_arg(v: &[String]) -> anyhow::Result<Vec<u64>> {
    v.iter()
        .map(|r| {
            quantity(r, "--rtt", 1.0, |t| {
                weir_core::units::parse_duration(t).map(|ns| ns / 1_000_000)
            })
        })
        .collect()
}

/// A number in `unit`s (`10` with unit 1e6: 10 000 000) or a quantity `parse` reads.
fn quantity(
    text: &str,
    what: &str,
    unit: f64,
    parse: impl Fn(&str) -> Result<u64, weir_core::units::UnitError>,
) -> anyhow::Result<u64> {
    let t = text.trim();
    if let Ok(x) = t.parse::<f64>() {
        if x.is_finite() && x >= 0.0 {
            return Ok((x * unit).round() as u64);
        }
    }
    parse(t).map_err(|e| anyhow::anyhow!("{what} {t}: {e}"))
}

#[derive(clap::Args)]
pub(super) struct ReportArgs {
    /// result.json files written by `weir lab` commands: one is re-made; several are
    /// compared (their headline figures side by side, box plots over runs, CDFs).
    #[arg(required = true, num_args = 1..)]
    pub(super) result: Vec<PathBuf>,
    /// Directory for the outputs (default: one result's own directory; a comparison's
    /// `weir-lab-compare`).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// A comparison's label of each file, in order (default: each file's directory name,
    /// or A, B, C, … where those repeat).
    #[arg(long, value_delimiter = ',')]
    pub(super) label: Vec<String>,
}
