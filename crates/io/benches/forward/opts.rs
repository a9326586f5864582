//! Command-line options: `Opts`, the `--help` text and its parser.

use crate::bench::Dut;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Opts {
    pub(crate) trial_ms: u64,
    pub(crate) cpu_ms: u64,
    /// Rounds of CPU trials (every DUT in turn in each).
    pub(crate) repeat: u32,
    pub(crate) iterations: u32,
    /// Frame sizes including the 4-byte FCS (RFC 2544 convention): 64, 1518.
    pub(crate) sizes: Vec<usize>,
    pub(crate) duts: Vec<String>,
    pub(crate) loss_tolerance: f64,
    pub(crate) pin: bool,
    pub(crate) busy_poll: bool,
    pub(crate) bridge_nf: bool,
    pub(crate) perf: bool,
    pub(crate) nice: i32,
    /// Skip the searches; only the CPU trials, at this rate.
    pub(crate) rate: Option<f64>,
    /// Length of the TSO-sender trial per DUT (0 = skip it).
    pub(crate) tso_ms: u64,
    /// The policy weir runs (`None`: pass-through).
    pub(crate) weir_policy: Option<PathBuf>,
    /// Workers of the `weir-workers` DUT (`--workers N`; 1: no such DUT).
    pub(crate) workers: usize,
    /// `--workers-on-dut-core`: every worker on the DUT core (time-sharing it), instead of
    /// one per CPU as weir places them.
    pub(crate) workers_on_dut_core: bool,
    /// `--per-worker-rate`: the CPU trials offer `weir-workers` N times the rate, each
    /// worker what the one worker of `weir` is offered.
    pub(crate) per_worker_rate: bool,
    pub(crate) json: PathBuf,
}

pub(crate) const HELP: &str = "\
weir forwarding benchmark (needs root): zero-loss throughput of weir vs the kernel bridge

options:
  --trial-ms N         length of one search trial (default 1000)
  --cpu-ms N           length of the CPU-per-packet trial (default 2000)
  --iterations N       binary-search steps after the unlimited trial (default 8)
  --repeat K           rounds of CPU trials, every DUT in turn in each (default 1): on a
                       shared VM one trial's CPU per packet moves by 10-30 %; --workers
                       compares the rounds' pairs (median and range)
  --sizes A,B          frame sizes incl. FCS, 64..1518 (default 64,1518)
  --duts X,Y           any of weir,weir-workers,kernel,kernel-rps,kernel-htb (default
                       weir,kernel,kernel-rps; with --workers, weir-workers too;
                       kernel-htb: the bridge with RPS and HTB at --weir-policy's link rate)
  --loss-tolerance F   loss fraction a trial may have and still pass (default 0; e.g. 0.0001)
  --no-pin             do not pin threads to CPUs
  --busy-poll          run weir with busy_poll (spins instead of ppoll)
  --bridge-nf          keep br_netfilter's bridge-nf-call-* sysctls as the kernel has them
  --nice N             nice value of the generator, DUT and receiver threads and of the
                       benchmark's autogroup, for the run (default -15, against noise from
                       other processes; 0 leaves them alone)
  --perf               perf-record weir's thread during its CPU trial and print the top symbols
  --rate PPS           no searches: only the CPU trials, at PPS frames/s (for profiling)
  --tso-ms N           length of the TSO-sender trial per DUT: one bulk TCP flow (cubic)
                       from a host with its default offloads (TSO/GSO on) (default 5000; 0 = skip)
  --weir-policy FILE   weir shapes by this policy (default: pass-through, no policy);
                       e.g. scripts/bench-forward-10g.toml, a 10 Gbit/s link
  --workers N          also run weir with N workers (DUT weir-workers) beside one (weir):
                       the generator sends from 64 addresses, and unless --weir-policy
                       says otherwise both weirs shape by a generated subscriber table of
                       64 circuits (10.77.1.0-63, 1 Gbit/s each, a 100 Gbit/s link), so
                       the fanout spreads them; CPU per packet is all of weir's threads
  --workers-on-dut-core  the N workers share the DUT core (weir's own placement is one
                       per CPU, the first beside the generator on a 2-core machine): the
                       same CPU as one worker has, to compare the work per packet
  --per-worker-rate    the CPU trials offer weir-workers N times the rate: each worker the
                       traffic one worker has (the same frames per wake-up), where the same
                       total rate split N ways wakes each worker for each of the
                       generator's ~50 us bursts
  --quick              --trial-ms 500 --cpu-ms 1000 --iterations 6
  --json PATH          where to write all trials (default target/bench-forward.json)
";

pub(crate) fn parse_opts() -> Result<Opts, String> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let t = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
            t.canonicalize().unwrap_or(t)
        });
    let mut o = Opts {
        trial_ms: 1000,
        cpu_ms: 2000,
        repeat: 1,
        iterations: 8,
        sizes: vec![64, 1518],
        duts: vec!["kernel".into(), "kernel-rps".into(), "weir".into()],
        loss_tolerance: 0.0,
        pin: true,
        busy_poll: false,
        bridge_nf: false,
        perf: false,
        nice: -15,
        rate: None,
        tso_ms: 5000,
        weir_policy: None,
        workers: 1,
        workers_on_dut_core: false,
        per_worker_rate: false,
        json: target.join("bench-forward.json"),
    };
    let mut duts_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |s: String, name: &str| -> Result<u64, String> {
            s.parse().map_err(|_| format!("{name}: not a number: {s}"))
        };
        match a.as_str() {
            "--bench" => {} // passed by `cargo bench`
            "--help" | "-h" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--trial-ms" => o.trial_ms = num(val(&a)?, &a)?.max(100),
            "--cpu-ms" => o.cpu_ms = num(val(&a)?, &a)?.max(100),
            "--repeat" => o.repeat = num(val(&a)?, &a)?.clamp(1, 100) as u32,
            "--iterations" => o.iterations = num(val(&a)?, &a)? as u32,
            "--sizes" => {
                o.sizes = val(&a)?
                    .split(',')
                    .map(|s| num(s.trim().to_string(), "--sizes"))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .map(|x| x as usize)
                    .collect();
                if o.sizes.iter().any(|&s| !(64..=1518).contains(&s)) {
                    return Err("--sizes: frame sizes are 64..=1518 (including FCS)".into());
                }
            }
            "--duts" => {
                o.duts = val(&a)?.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(d) = o.duts.iter().find(|d| Dut::parse(d).is_none()) {
                    return Err(format!("--duts: unknown DUT {d:?}"));
                }
                duts_given = true;
            }
            "--workers-on-dut-core" => o.workers_on_dut_core = true,
            "--per-worker-rate" => o.per_worker_rate = true,
            "--workers" => {
                o.workers = num(val(&a)?, &a)? as usize;
                if !(2..=256).contains(&o.workers) {
                    return Err("--workers: 2 to 256 (one is the weir DUT)".into());
                }
            }
            "--loss-tolerance" => {
                let v = val(&a)?;
                o.loss_tolerance = v.parse().map_err(|_| format!("--loss-tolerance: {v}"))?;
            }
            "--no-pin" => o.pin = false,
            "--busy-poll" => o.busy_poll = true,
            "--bridge-nf" => o.bridge_nf = true,
            "--perf" => o.perf = true,
            "--nice" => {
                let v = val(&a)?;
                o.nice = v.parse().map_err(|_| format!("--nice: {v}"))?;
            }
            "--rate" => {
                let v = val(&a)?;
                o.rate = Some(v.parse().map_err(|_| format!("--rate: {v}"))?);
            }
            "--tso-ms" => o.tso_ms = num(val(&a)?, &a)?,
            "--weir-policy" => {
                // relative to where the user ran scripts/bench-forward (cargo moves to
                // crates/io); read now, so a bad policy stops the run before any trial
                let p = PathBuf::from(val(&a)?);
                let p = match std::env::var_os("WEIR_BENCH_CWD") {
                    Some(cwd) if p.is_relative() => PathBuf::from(cwd).join(p),
                    _ => p,
                };
                weir_core::policy::Policy::load(&p).map_err(|e| format!("--weir-policy: {e}"))?;
                o.weir_policy = Some(p);
            }
            "--quick" => {
                o.trial_ms = 500;
                o.cpu_ms = 1000;
                o.iterations = 6;
                o.tso_ms = o.tso_ms.min(3000);
            }
            "--json" => o.json = PathBuf::from(val(&a)?),
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            _ => {} // a filter string from `cargo bench NAME`: ignored
        }
    }
    if o.workers > 1 {
        if !duts_given {
            o.duts.push(Dut::WeirWorkers.name().into());
        }
        if o.weir_policy.is_none() {
            o.weir_policy = Some(subscriber_policy(
                &target.join("bench-forward-subscribers"),
            )?);
        }
    } else if o.duts.iter().any(|d| d == Dut::WeirWorkers.name()) {
        return Err("--duts weir-workers needs --workers N".into());
    }
    if o.duts.iter().any(|d| d == Dut::KernelHtb.name()) {
        o.link_rate()
            .map_err(|e| format!("--duts kernel-htb: {e}"))?;
    }
    Ok(o)
}

/// Addresses the generator sends from with `--workers` (one circuit each).
pub(crate) const SOURCES: u8 = 64;

impl Opts {
    /// The outbound link rate of weir's policy, bit/s (what `kernel-htb` shapes to).
    pub(crate) fn link_rate(&self) -> Result<u64, String> {
        let p = self
            .weir_policy
            .as_ref()
            .ok_or("kernel-htb shapes the link of --weir-policy: give one")?;
        let p = weir_core::policy::Policy::load(p).map_err(|e| e.to_string())?;
        Ok(p.link_rate)
    }

    /// How many source addresses the generator sends from.
    pub(crate) fn sources(&self) -> u8 {
        if self.workers > 1 {
            SOURCES
        } else {
            1
        }
    }
}

/// A policy with a subscriber table of [`SOURCES`] circuits, one per source address
/// ([`crate::frame::source_addr`]), 100 Mbit/s assured and 1 Gbit/s ceiling each, on a
/// 100 Gbit/s link, written in `dir`: every frame classified by the table and scheduled in
/// its circuit's class, none held back by a rate.
fn subscriber_policy(dir: &std::path::Path) -> Result<PathBuf, String> {
    let err = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    for k in 0..SOURCES {
        let a = crate::frame::source_addr(k);
        csv += &format!("{k},circuit {k},{k},device {k},,,{a},,100,100,1000,1000,\n");
    }
    std::fs::write(dir.join("ShapedDevices.csv"), csv).map_err(err)?;
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "# written by scripts/bench-forward --workers: one circuit per generator address\n\
         [link]\nrate = \"100Gbit\"\ninbound_rate = \"100Gbit\"\ndirection = \"both\"\n\
         default = \"other\"\n\n[[class]]\nname = \"other\"\nrate = \"1Gbit\"\n\n\
         [subscribers]\nshaped_devices = \"ShapedDevices.csv\"\n",
    )
    .map_err(err)?;
    weir_core::policy::Policy::load(&policy).map_err(|e| format!("generated policy: {e}"))?;
    Ok(policy)
}
