//! Command-line options: `Opts`, the `--help` text and its parser.

use serde::Serialize;
use std::path::PathBuf;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Opts {
    pub(crate) trial_ms: u64,
    pub(crate) cpu_ms: u64,
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
    pub(crate) json: PathBuf,
}

pub(crate) const HELP: &str = "\
weir forwarding benchmark (needs root): zero-loss throughput of weir vs the kernel bridge

options:
  --trial-ms N         length of one search trial (default 1000)
  --cpu-ms N           length of the CPU-per-packet trial (default 2000)
  --iterations N       binary-search steps after the unlimited trial (default 8)
  --sizes A,B          frame sizes incl. FCS, 64..1518 (default 64,1518)
  --duts X,Y           any of weir,kernel,kernel-rps (default all three)
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
        json: target.join("bench-forward.json"),
    };
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
                if let Some(d) = o
                    .duts
                    .iter()
                    .find(|d| !["weir", "kernel", "kernel-rps"].contains(&d.as_str()))
                {
                    return Err(format!("--duts: unknown DUT {d:?}"));
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
    Ok(o)
}
