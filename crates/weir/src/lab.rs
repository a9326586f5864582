//! `weir lab`: the namespace testbed. Each subcommand runs one of the papers' methods and
//! writes a self-describing result (JSON) plus tables, SVG plots and an HTML report;
//! `weir lab report` re-makes the outputs from a result file without re-running.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_lab::report::{self, Check};
use weir_lab::tests::fidelity::{FidelityConfig, FidelityResult};
use weir_lab::tests::{
    advanced, aggregates, basic, diffserv, fidelity, postgate, robustness, rrul, voip,
};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(clap::Subcommand)]
enum LabCmd {
    /// Seed 002's link-shaping fidelity tests: CBR flows of 64/800/1518-byte frames at
    /// 8k-200k packets/s through veth, weir (0 ms, 125 ms, 125 ms + 155 Mbit/s) and the
    /// kernel's TBF/HTB; inter-frame gap and delay percentiles, loss.
    #[command(after_help = "Example:\n  sudo weir lab fidelity --quick --out /tmp/fidelity")]
    Fidelity(FidelityArgs),
    /// Seed 000's Basic Test: 4 TCP sessions per class of the policy (default: the T1
    /// split into 20/40/128/256/1100 kbit/s classes); accuracy, fairness, Jain's index and
    /// retransmissions (Table 4) for one or more DUTs side by side.
    #[command(
        after_help = "Example:\n  sudo weir lab basic --dut weir:cbq+pfq,kernel:htb --quick --out /tmp/basic"
    )]
    Basic(BasicArgs),
    /// Seed 000's Robustness Test (Table 5): the Basic Test with WAN delays of 10/50/100/150
    /// ms per class (Table 4 again), one session in a 200 kbit/s class under 0.5-8 %
    /// periodic loss (goodput must degrade smoothly), and one session at a time in an 80
    /// kbit/s class from different TCP senders (reno/cubic/bbr, SACK on/off, min RTO).
    #[command(
        after_help = "Example:\n  sudo weir lab robustness --dut weir:cbq+pfq --only loss --quick --out /tmp/robustness"
    )]
    Robustness(RobustnessArgs),
    /// Seed 000's Advanced Test (Table 6): inter-class and intra-class bandwidth borrowing on
    /// a T1: how much of the bandwidth a stopping session frees the other takes, and how fast.
    #[command(
        after_help = "Example:\n  sudo weir lab advanced --dut weir:cbq+pfq --quick --out /tmp/advanced"
    )]
    Advanced(AdvancedArgs),
    /// Seed 000's VoIP test (Table 6, Fig. 13, Table 7): one G.729 call beside 20 FTP
    /// sessions on 125 kbit/s and a T1 (voice class 30 kbit/s, FTP borrows it while idle):
    /// one-way delay, RFC 3550 jitter, loss, E-model R and MOS, time to establish, per DUT.
    #[command(after_help = "Example:\n  sudo weir lab voip --quick --out /tmp/voip")]
    Voip(VoipArgs),
    /// Seed 001's aggregate-marking test (Tables 2-4): two customers with equal trTCM
    /// profiles (CIR 800 kbit/s, PIR 1.4 Mbit/s), one with 8 TCP flows and one with 2,
    /// through a weir edge router into a 10 Mbit/s weir core (AF 3 Mbit/s with three-colour
    /// RED beside best-effort UDP): utilisation of CIR, per-flow goodput and throughput,
    /// Jain's index among flows and between aggregates.
    #[command(after_help = "Example:\n  sudo weir lab aggregates --quick --out /tmp/aggregates")]
    Aggregates(AggregatesArgs),
    /// Seed 004's DiffServ router chain (Figs. 8-25): host A through ingress, interior and
    /// egress routers to host B, each router link also flooded by 100 Mbit/s of UDP; EF and
    /// AF reservations of 5 Mbit/s for UDP and TCP; one-way delay and jitter with the
    /// receiver's clock skew estimated from an echo calibration; weir beside the kernel's HTB.
    #[command(after_help = "Example:\n  sudo weir lab diffserv --quick --out /tmp/diffserv")]
    Diffserv(DiffservArgs),
    /// Seed 003's simulation (Figs. 3-5): 48 bulk TCP flows in 4 classes and a 300 kbit/s
    /// CBR from servers through an ADSL line's ATU-C (a weir emulator: 8 Mbit/s, 256-packet
    /// queue) and the device under test to the clients: none, partition or SFQ at 90 %,
    /// Postgate, weir's autorate, the kernel's HTB; the ATU-C's queueing delay (read from
    /// the emulator), utilisation, per-class bandwidth, Postgate's weights; then a line
    /// whose rate varies (a trace) with static, Postgate and autorate.
    #[command(
        after_help = "Example:\n  sudo weir lab postgate --devices postgate+tcr,htb --varying autorate+tcr --out /tmp/postgate"
    )]
    Postgate(PostgateArgs),
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
    Rrul(RrulArgs),
    /// Re-make the tables, plots and HTML report of a result file.
    #[command(after_help = "Example:\n  weir lab report /tmp/basic/result.json")]
    Report(ReportArgs),
}

/// Options shared by the seed 000 tests (`basic`, `robustness`, `advanced`).
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
    /// CI-sized runs (see docs/lab.md for each test's quick settings).
    #[arg(long)]
    quick: bool,
    /// Runs per DUT (paper: 5).
    #[arg(long)]
    runs: Option<u32>,
    /// Congestion control of every sender: reno (the paper's), cubic, bbr.
    #[arg(long, default_value = "reno")]
    cc: String,
    /// weir DUTs busy-poll (more precise timing, one busy core).
    #[arg(long)]
    busy_poll: bool,
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
}

impl TestbedArgs {
    fn runs(&self) -> anyhow::Result<Option<u32>> {
        runs_arg(self.runs)
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
struct BasicArgs {
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
    /// Directory for result.json, table.txt/csv, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-basic")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct RobustnessArgs {
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
    /// Directory for result.json, table.txt, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-robustness")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct AdvancedArgs {
    #[command(flatten)]
    t: TestbedArgs,
    /// Subtests to run (comma-separated): inter, intra. Default: both.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Directory for result.json, table.txt, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-advanced")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct VoipArgs {
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
    /// Directory for result.json, table.txt/csv, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-voip")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct AggregatesArgs {
    /// CI-sized run: 1 run of 35 s, monitored flows from 5 s.
    #[arg(long)]
    quick: bool,
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
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
    /// Directory for result.json, table.txt, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-aggregates")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct DiffservArgs {
    /// CI-sized run: 3 s per run, a 10 s calibration, the kernel peer on the UDP groups only.
    #[arg(long)]
    quick: bool,
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
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
    /// Directory for result.json, table.txt, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-diffserv")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct PostgateArgs {
    /// CI-sized run: 8 flows in steps of 6 s (30 s) with none and postgate+tcr;
    /// a 20 s varying line with none and autorate+tcr.
    #[arg(long)]
    quick: bool,
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
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
    /// Directory for result.json, table.txt, SVG charts, report.html and the trace.
    #[arg(long, default_value = "weir-lab-postgate")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct RrulArgs {
    /// CI-sized runs: 2 s idle and 10 s of load (paper: Flent's 5 s and 60 s), at 10 Mbit/s
    /// and 50 ms unless --rate/--rtt say otherwise.
    #[arg(long)]
    quick: bool,
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
    /// Exit with status 3 when a check fails.
    #[arg(long)]
    strict: bool,
    /// Directory for result.json, table.txt, CSVs, SVG charts and report.html.
    #[arg(long, default_value = "weir-lab-rrul")]
    out: PathBuf,
}

#[derive(clap::Args)]
struct FidelityArgs {
    /// A CI-sized run: 64- and 1518-byte frames at 8k and 80k packets/s, one 0.4 s repeat.
    #[arg(long)]
    quick: bool,
    /// Directory for result.json, tables.txt, SVG plots and report.html.
    #[arg(long, default_value = "weir-lab-fidelity")]
    out: PathBuf,
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
    /// Exit with status 3 when an acceptance check fails.
    #[arg(long)]
    strict: bool,
}

#[derive(clap::Args)]
struct ReportArgs {
    /// A result.json written by a `weir lab` command.
    result: PathBuf,
    /// Directory for the re-made outputs (default: the result's directory).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    // the agents write to sockets whose peer may be gone: an error, not a signal
    // SAFETY: changing a signal disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Ctrl-C / SIGTERM: the run stops at its next step and removes what it made
    weir_io::signals::install();
    // namespaces of earlier runs that were killed outright (SIGKILL) and could not clean up
    if let Ok(stale) = weir_lab::topo::remove_stale_namespaces() {
        if !stale.is_empty() {
            eprintln!(
                "weir lab: removed {} namespace(s) left by dead runs: {}",
                stale.len(),
                stale.join(", ")
            );
        }
    }
    match a.cmd {
        LabCmd::Fidelity(f) => run_fidelity(f),
        LabCmd::Basic(b) => run_basic(b),
        LabCmd::Robustness(r) => run_robustness(r),
        LabCmd::Advanced(a) => run_advanced(a),
        LabCmd::Voip(v) => run_voip(v),
        LabCmd::Aggregates(a) => run_aggregates(a),
        LabCmd::Diffserv(d) => run_diffserv(d),
        LabCmd::Postgate(p) => run_postgate(p),
        LabCmd::Rrul(r) => run_rrul(r),
        LabCmd::Report(r) => report(r),
    }
}

fn run_fidelity(a: FidelityArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = if a.quick {
        FidelityConfig::quick()
    } else {
        FidelityConfig::paper()
    };
    if let Some(s) = a.sizes {
        cfg.sizes = s;
    }
    if let Some(r) = a.rates {
        cfg.rates = r;
    }
    if let Some(n) = a.repeats {
        cfg.repeats = n;
    }
    if let Some(t) = a.cell_time {
        cfg.cell_ms = (t.as_nanos() / 1_000_000).max(1);
    }
    if let Some(names) = a.paths {
        let all = fidelity::standard_paths();
        let mut chosen = Vec::new();
        for n in &names {
            match all.iter().find(|p| &p.name == n) {
                Some(p) => chosen.push(p.clone()),
                None => anyhow::bail!(
                    "--paths: unknown path '{n}'; expected some of {}",
                    all.iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        cfg.paths = chosen;
    }
    cfg.busy_poll = !a.no_busy_poll;
    cfg.seed = a.seed;
    cfg.validate()?;
    weir_lab::topo::require_root()?;
    let cells = cfg.paths.len() * cfg.sizes.len() * cfg.rates.len() * cfg.repeats as usize;
    eprintln!(
        "weir lab fidelity: {} paths x {} sizes x {} rates x {} repeats = {cells} cells of {} ms; outputs in {}",
        cfg.paths.len(),
        cfg.sizes.len(),
        cfg.rates.len(),
        cfg.repeats,
        cfg.cell_ms,
        a.out.display()
    );
    let r = fidelity::run(&cfg, |line| eprintln!("{line}"))?;
    finish(&r, &a.out, a.strict)
}

fn finish(r: &FidelityResult, out: &std::path::Path, strict: bool) -> anyhow::Result<ExitCode> {
    print!("{}", fidelity::tables(r));
    println!();
    print!("{}", report::checks_text(&r.checks));
    conclude(fidelity::write_outputs(r, out)?, &r.checks, strict)
}

/// Say which files were written; status 3 under `--strict` when a check failed.
fn conclude(files: Vec<PathBuf>, checks: &[Check], strict: bool) -> anyhow::Result<ExitCode> {
    eprintln!(
        "weir lab: wrote {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if strict && !report::all_passed(checks) {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// The policy file's name and text, or the embedded Basic Test policy.
fn read_policy(path: Option<&std::path::Path>) -> anyhow::Result<(String, String)> {
    Ok(match path {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => (
            crate::DEFAULT_POLICY.0.to_string(),
            crate::DEFAULT_POLICY.1.to_string(),
        ),
    })
}

fn report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&a.result)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a JSON result: {e}", a.result.display()))?;
    let out = a.out.clone().unwrap_or_else(|| {
        a.result
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|| PathBuf::from("."))
    });
    match v.get("kind").and_then(|k| k.as_str()) {
        Some("fidelity") => {
            let mut r: FidelityResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            r.checks = fidelity::check(&r);
            finish(&r, &out, false)
        }
        Some("basic") => {
            let mut r: basic::BasicResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            basic::finish(&mut r)?;
            finish_basic(&r, &out, false)
        }
        Some("robustness") => {
            let mut r: robustness::RobustnessResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            robustness::finish(&mut r)?;
            finish_robustness(&r, &out, false)
        }
        Some("advanced") => {
            let mut r: advanced::AdvancedResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            advanced::finish(&mut r)?;
            finish_advanced(&r, &out, false)
        }
        Some("aggregates") => {
            let mut r: aggregates::AggregatesResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            aggregates::finish(&mut r);
            finish_aggregates(&r, &out, false)
        }
        Some("diffserv") => {
            let mut r: diffserv::DiffservResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            diffserv::finish(&mut r);
            finish_diffserv(&r, &out, false)
        }
        Some("postgate") => {
            let mut r: postgate::LabResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            r.checks = postgate::checks(&r.runs, r.config.quick);
            finish_postgate(&r, &out, false)
        }
        Some("voip") => {
            let mut r: voip::VoipResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            voip::finish(&mut r)?;
            finish_voip(&r, &out, false)
        }
        Some("rrul") => {
            let mut r: rrul::RrulResult = serde_json::from_value(v)
                .map_err(|e| anyhow::anyhow!("{}: {e}", a.result.display()))?;
            rrul::finish(&mut r);
            finish_rrul(&r, &out, false)
        }
        Some(k) => anyhow::bail!("{}: unknown result kind '{k}'", a.result.display()),
        None => anyhow::bail!(
            "{}: no \"kind\" field: not a weir lab result",
            a.result.display()
        ),
    }
}

fn run_basic(a: BasicArgs) -> anyhow::Result<ExitCode> {
    use basic::BasicConfig;
    let mut c = if a.t.quick {
        BasicConfig::quick()
    } else {
        BasicConfig::paper()
    };
    if let Some(d) = dut_list(a.t.compare, a.t.dut.clone())? {
        c.duts = d;
    }
    if let Some(r) = a.t.runs()? {
        c.runs = r;
    }
    if let Some(d) = a.duration {
        c.duration_s = d.as_secs_f64();
        if a.window.is_none() {
            // keep the paper's proportions: skip the first 12 %, stop 8 % before the end
            c.window_s = (c.duration_s * 0.12, c.duration_s * 0.92);
        }
    }
    if let Some(w) = &a.window {
        let (x, y) = w
            .split_once('-')
            .ok_or_else(|| anyhow::anyhow!("--window: expected FROM-TO in seconds, e.g. 30-230"))?;
        let p = |t: &str| {
            t.trim()
                .trim_end_matches('s')
                .parse::<f64>()
                .map_err(|_| anyhow::anyhow!("--window: '{t}' is not a number of seconds"))
        };
        c.window_s = (p(x)?, p(y)?);
    }
    c.cc = a.t.cc.clone();
    c.busy_poll = a.t.busy_poll;
    let (file, text) = read_policy(a.policy.as_deref())?;
    // refuse a bad plan (policy, addressing, window) before asking for root
    let plan = basic::plan(&file, &text, &c)?;
    weir_lab::topo::require_root()?;
    let total = c.duts.len() as f64 * c.runs as f64 * (c.duration_s + 3.0);
    eprintln!(
        "weir lab basic: {} sessions, {} DUT(s) x {} run(s) of {} s (about {:.0} min); outputs in {}",
        plan.sessions.len(),
        c.duts.len(),
        c.runs,
        c.duration_s,
        total / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| basic::run(&file, &text, &c, progress))?;
    finish_basic(&r, &a.out, a.t.strict)
}

fn finish_basic(
    r: &basic::BasicResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", basic::text(r));
    conclude(basic::write_outputs(r, out)?, &r.checks, strict)
}

/// The DUT list of `--compare` and `--dut` (each checked), or `None` for the test's default.
fn dut_list(compare: bool, dut: Vec<String>) -> anyhow::Result<Option<Vec<String>>> {
    let mut duts: Vec<String> = Vec::new();
    if compare {
        for d in [
            "weir:cbq",
            "weir:cbq+pfq",
            "weir:cbq+pfq+red",
            "weir:tcr",
            "weir:cbq+tcr",
            "weir:cbq+pfq+tcr",
            "kernel:htb",
            "kernel:htb-perflow",
        ] {
            duts.push(d.into());
        }
    }
    for d in dut {
        weir_lab::dut::DutSpec::parse(&d)?;
        if !duts.contains(&d) {
            duts.push(d);
        }
    }
    Ok((!duts.is_empty()).then_some(duts))
}

/// Run `f` with a progress printer (see [`progress_printer`]); ends the progress line.
fn with_progress<T>(
    f: impl FnOnce(&mut dyn FnMut(&str)) -> weir_lab::Result<T>,
) -> anyhow::Result<T> {
    let (tty, mut progress) = progress_printer();
    let r = f(&mut progress);
    if tty {
        eprintln!();
    }
    Ok(r?)
}

/// Progress: rewritten in place on a terminal; otherwise one line as each run starts and
/// ends ("... 1/30 s", "... 30/30 s").
fn progress_printer() -> (bool, impl FnMut(&str)) {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let f = move |line: &str| {
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if let Some(frac) = line.strip_suffix(" s").and_then(|l| l.rsplit(' ').next()) {
            if let Some((a, b)) = frac.split_once('/') {
                if a == "0" || a == "1" || a == b {
                    eprintln!("{line}");
                }
            }
        }
    };
    (tty, f)
}

fn run_robustness(a: RobustnessArgs) -> anyhow::Result<ExitCode> {
    use robustness::RobustnessConfig;
    let mut c = if a.t.quick {
        RobustnessConfig::quick()
    } else {
        RobustnessConfig::paper()
    };
    if let Some(d) = dut_list(a.t.compare, a.t.dut.clone())? {
        c.duts = d;
    }
    if !a.only.is_empty() {
        c.subtests = a.only;
    }
    if let Some(r) = a.t.runs()? {
        c.delays.runs = r;
    }
    c.cc = a.t.cc.clone();
    c.busy_poll = a.t.busy_poll;
    let (file, text) = read_policy(a.policy.as_deref())?;
    let baseline = match &a.baseline {
        Some(p) => Some(robustness::load_baseline(p)?),
        None => None,
    };
    // refuse a bad plan (policy, addressing, subtests) before asking for root
    robustness::plans(&file, &text, &c)?;
    weir_lab::topo::require_root()?;
    let per_dut = c.seconds_per_dut() + 3.0 * c.runs_per_dut() as f64;
    eprintln!(
        "weir lab robustness: {} on {} DUT(s), {} run(s) per DUT (about {:.0} min); outputs in {}",
        c.subtests.join(", "),
        c.duts.len(),
        c.runs_per_dut(),
        per_dut * c.duts.len() as f64 / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| robustness::run(&file, &text, &c, baseline, progress))?;
    finish_robustness(&r, &a.out, a.t.strict)
}

fn finish_robustness(
    r: &robustness::RobustnessResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", robustness::text(r));
    conclude(robustness::write_outputs(r, out)?, &r.checks, strict)
}

fn run_advanced(a: AdvancedArgs) -> anyhow::Result<ExitCode> {
    use advanced::AdvancedConfig;
    let mut c = if a.t.quick {
        AdvancedConfig::quick()
    } else {
        AdvancedConfig::paper()
    };
    if let Some(d) = dut_list(a.t.compare, a.t.dut.clone())? {
        c.duts = d;
    }
    if !a.only.is_empty() {
        c.subtests = a.only;
    }
    if let Some(r) = a.t.runs()? {
        c.runs = r;
    }
    c.cc = a.t.cc.clone();
    c.busy_poll = a.t.busy_poll;
    let plans = advanced::plans(&c)?;
    weir_lab::topo::require_root()?;
    let total = (plans.len() * c.duts.len()) as f64 * c.runs as f64 * (c.duration_s + 3.0);
    eprintln!(
        "weir lab advanced: {} on {} DUT(s) x {} run(s) of {} s (about {:.0} min); outputs in {}",
        c.subtests.join(", "),
        c.duts.len(),
        c.runs,
        c.duration_s,
        total / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| advanced::run(&c, progress))?;
    finish_advanced(&r, &a.out, a.t.strict)
}

fn finish_advanced(
    r: &advanced::AdvancedResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", advanced::text(r));
    conclude(advanced::write_outputs(r, out)?, &r.checks, strict)
}

fn run_voip(a: VoipArgs) -> anyhow::Result<ExitCode> {
    use voip::VoipConfig;
    let mut c = if a.t.quick {
        VoipConfig::quick()
    } else {
        VoipConfig::paper()
    };
    // the router is this test's own DUT; the rest are the testbed's
    let (router, others): (Vec<String>, Vec<String>) =
        a.t.dut.iter().cloned().partition(|d| d == voip::ROUTER);
    if let Some(mut d) = dut_list(a.t.compare, others)? {
        if a.t.compare || !router.is_empty() {
            d.insert(0, voip::ROUTER.into());
        }
        if a.t.compare && !d.iter().any(|x| x == voip::CLAMPED) {
            d.push(voip::CLAMPED.into());
        }
        c.duts = d;
    } else if !router.is_empty() {
        c.duts = router;
    }
    if !a.link.is_empty() {
        c.links = a.link;
    }
    if let Some(r) = a.t.runs()? {
        c.runs = r;
    }
    c.cc = a.t.cc.clone();
    c.busy_poll = a.t.busy_poll;
    c.buffer_ms = a.jitter_buffer;
    // refuse a bad plan before asking for root
    let plans = voip::plans(&c)?;
    weir_lab::topo::require_root()?;
    let total = (plans.len() * c.duts.len()) as f64 * c.runs as f64 * (c.duration_s + 4.0);
    eprintln!(
        "weir lab voip: links {} on {} DUT(s) x {} run(s) of {} s (about {:.0} min); outputs in {}",
        c.links.join(", "),
        c.duts.len(),
        c.runs,
        c.duration_s,
        total / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| voip::run(&c, progress))?;
    finish_voip(&r, &a.out, a.t.strict)
}

fn finish_voip(
    r: &voip::VoipResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", voip::text(r));
    conclude(voip::write_outputs(r, out)?, &r.checks, strict)
}

fn run_aggregates(a: AggregatesArgs) -> anyhow::Result<ExitCode> {
    use aggregates::AggregatesConfig;
    let mut c = if a.quick {
        AggregatesConfig::quick()
    } else {
        AggregatesConfig::paper()
    };
    if let Some(r) = runs_arg(a.runs)? {
        c.runs = r;
    }
    if let Some(d) = a.duration {
        c.duration_s = d.as_secs_f64();
    }
    if let Some(s) = a.start {
        c.monitored_start_s = s.as_secs_f64();
    }
    if c.monitored_start_s >= c.duration_s {
        anyhow::bail!(
            "--start {} s: the monitored flows must start before the end of the {} s run",
            c.monitored_start_s,
            c.duration_s
        );
    }
    if let Some(n) = a.background_flows {
        c.background_flows = n;
    }
    if let Some(r) = &a.udp_rate {
        c.udp_bps =
            weir_core::units::parse_rate(r).map_err(|e| anyhow::anyhow!("--udp-rate {r}: {e}"))?;
    }
    if let Some(d) = a.ack_delay {
        c.ack_delay_ms = d.as_nanos() / 1_000_000;
    }
    c.cc = a.cc.clone();
    c.busy_poll = a.busy_poll;
    c.markers = aggregates::Marker::parse_list(&a.marker)
        .map_err(|e| anyhow::anyhow!("--marker {}: {e}", a.marker))?;
    // refuse a bad plan before asking for root
    for &m in &c.markers {
        aggregates::plan(&c, m)?;
    }
    weir_lab::topo::require_root()?;
    let n = c.runs as f64 * c.markers.len() as f64;
    eprintln!(
        "weir lab aggregates: {} run(s) of {} s for each of {} marker(s) (about {:.0} min); \
         outputs in {}",
        c.runs,
        c.duration_s,
        c.markers.len(),
        n * (c.duration_s + 6.0) / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| aggregates::run(&c, progress))?;
    finish_aggregates(&r, &a.out, a.strict)
}

fn finish_aggregates(
    r: &aggregates::AggregatesResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", aggregates::text(r));
    conclude(aggregates::write_outputs(r, out)?, &r.checks, strict)
}

fn run_diffserv(a: DiffservArgs) -> anyhow::Result<ExitCode> {
    use diffserv::{Device, DiffservConfig, Group};
    let mut c = if a.quick {
        DiffservConfig::quick()
    } else {
        DiffservConfig::paper()
    };
    if let Some(d) = a.duration {
        c.duration_s = d.as_secs_f64();
    }
    if let Some(d) = a.warmup {
        c.warmup_s = d.as_secs_f64();
    }
    if let Some(d) = a.calibration {
        c.calibration_s = d.as_secs_f64();
    }
    if let Some(r) = &a.background {
        c.background_bps = if r.trim() == "0" {
            0
        } else {
            weir_core::units::parse_rate(r).map_err(|e| anyhow::anyhow!("--background {r}: {e}"))?
        };
    }
    c.groups = Group::parse_list(&a.groups).map_err(|e| anyhow::anyhow!("--groups: {e}"))?;
    if !a.quick {
        c.peer_groups = c.groups.clone();
    }
    c.devices = Device::parse_list(&a.device).map_err(|e| anyhow::anyhow!("--device: {e}"))?;
    c.cc = a.cc.clone();
    if let Some(o) = a.offset_ns {
        c.offset_ns = o;
    }
    if let Some(d) = a.drift_ppm {
        c.drift_ppm = d;
    }
    // refuse bad settings before asking for root
    c.validate()?;
    weir_lab::topo::require_root()?;
    eprintln!(
        "weir lab diffserv: {} run(s) of {} s and a {} s calibration (about {:.0} min); \
         outputs in {}",
        c.devices
            .iter()
            .map(|&d| c.scenarios(d).len())
            .sum::<usize>(),
        c.duration_s,
        c.calibration_s,
        c.estimate_s() / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| diffserv::run(&c, progress))?;
    finish_diffserv(&r, &a.out, a.strict)
}

fn finish_diffserv(
    r: &diffserv::DiffservResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", diffserv::text(r));
    conclude(diffserv::write_outputs(r, out)?, &r.checks, strict)
}

fn run_postgate(a: PostgateArgs) -> anyhow::Result<ExitCode> {
    use postgate::{Device, LabConfig};
    let mut c = if a.quick {
        LabConfig::quick()
    } else {
        LabConfig::paper()
    };
    if let Some(d) = &a.devices {
        c.devices = Device::parse_list(d).map_err(|e| anyhow::anyhow!("--devices: {e}"))?;
    }
    if let Some(d) = &a.varying {
        c.varying = if d.trim() == "none" {
            Vec::new()
        } else {
            Device::parse_list(d).map_err(|e| anyhow::anyhow!("--varying: {e}"))?
        };
    }
    if let Some(l) = &a.line {
        let bps =
            weir_core::units::parse_rate(l).map_err(|e| anyhow::anyhow!("--line {l}: {e}"))?;
        // the varying line keeps its shape relative to the line
        let old = c.line_bps as f64;
        c.varying_rates = c
            .varying_rates
            .iter()
            .map(|&r| (r as f64 / old * bps as f64).round() as u64)
            .collect();
        c.line_bps = bps;
    }
    if let Some(n) = a.flows_per_class {
        c.flows_per_class = n;
    }
    if let Some(s) = a.step {
        c.step_s = s.as_secs_f64();
    }
    if let Some(s) = a.stop_at {
        c.stop_at_s = s.as_secs_f64();
    }
    if let Some(s) = a.varying_length {
        c.varying_s = s.as_secs_f64();
    }
    c.cc = a.cc.clone();
    // refuse bad settings before asking for root
    c.validate()?;
    weir_lab::topo::require_root()?;
    eprintln!(
        "weir lab postgate: {} device(s) for {:.0} s, {} on the varying line for {:.0} s (about {:.0} min); outputs in {}",
        c.devices.len(),
        c.duration_s(),
        c.varying.len(),
        c.varying_s,
        c.estimate_s() / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| postgate::run(&c, &a.out, progress))?;
    finish_postgate(&r, &a.out, a.strict)
}

fn finish_postgate(
    r: &postgate::LabResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", postgate::text(r));
    conclude(postgate::write_outputs(r, out)?, &r.checks, strict)
}

fn run_rrul(a: RrulArgs) -> anyhow::Result<ExitCode> {
    use rrul::{Case, RrulConfig};
    let mut c = if a.quick {
        RrulConfig::quick()
    } else {
        RrulConfig::paper()
    };
    if !a.case.is_empty() {
        c.cases = a
            .case
            .iter()
            .map(|s| Case::parse(s.trim()))
            .collect::<weir_lab::Result<_>>()?;
    }
    if !a.dut.is_empty() {
        c.duts = a.dut.iter().map(|d| d.trim().to_string()).collect();
    }
    if !a.rate.is_empty() {
        c.rates_bps = a
            .rate
            .iter()
            .map(|r| quantity(r, "--rate", 1_000_000.0, weir_core::units::parse_rate))
            .collect::<anyhow::Result<_>>()?;
    }
    if !a.rtt.is_empty() {
        c.rtts_ms = a
            .rtt
            .iter()
            .map(|r| {
                quantity(r, "--rtt", 1.0, |t| {
                    weir_core::units::parse_duration(t).map(|ns| ns / 1_000_000)
                })
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(r) = runs_arg(a.runs)? {
        c.runs = r;
    }
    if let Some(d) = a.idle {
        c.idle_s = d.as_secs_f64();
    }
    if let Some(d) = a.length {
        c.load_s = d.as_secs_f64();
    }
    c.cc = a.cc.clone();
    c.streams = a.streams;
    if let Some(p) = a.line_pct {
        c.line_pct = p;
    }
    c.busy_poll = a.busy_poll;
    // refuse bad settings (and a DUT whose policy weir's compiler refuses) before root
    let plans = c.plans()?;
    weir_lab::topo::require_root()?;
    eprintln!(
        "weir lab rrul: {} part(s), {} run(s) in all of {} s idle + {} s load (about {:.0} min); outputs in {}",
        plans.len(),
        plans.iter().map(|(_, d)| d.len()).sum::<usize>() * c.runs as usize,
        c.idle_s,
        c.load_s,
        c.estimate_s() / 60.0,
        a.out.display()
    );
    let r = with_progress(|progress| rrul::run(&c, progress))?;
    finish_rrul(&r, &a.out, a.strict)
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

fn finish_rrul(
    r: &rrul::RrulResult,
    out: &std::path::Path,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    print!("{}", rrul::text(r));
    conclude(rrul::write_outputs(r, out)?, &r.checks, strict)
}
