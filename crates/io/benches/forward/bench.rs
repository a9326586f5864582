//! The benchmark's trials: `Bench` (one trial, the DUT set-up, the zero-loss search), the
//! trial and cell records, and the JSON document.

use crate::frame::build_frames;
use crate::generator::{Gen, GenCmd, GenOut};
use crate::opts::Opts;
use crate::receiver::{Recv, RecvOut};
use crate::sys::{
    counters_delta, if_counters, pid_schedstat, sh, softirq_ticks, softnet_dropped, system_ticks,
    user_hz, IfCounters,
};
use crate::tso::TsoCell;
use crate::weir::{n, tasks_cpu, weir_lane, WeirLane, WeirRun};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_lab::agents::icmp_ping;
use weir_lab::topo::BridgeTopo;
use weir_wire::ethernet::MacAddr;

/// A passing trial whose achieved rate is below this fraction of the rate asked for marks
/// the cell generator-limited.
const GEN_SHORTFALL: f64 = 0.98;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CpuRec {
    /// weir's thread: sum_exec_runtime over the trial.
    pub(crate) weir_thread_ns: Option<u64>,
    pub(crate) weir_utime_ticks: Option<u64>,
    pub(crate) weir_stime_ticks: Option<u64>,
    /// Time weir's thread was runnable but waiting for a CPU (scheduling latency), and its
    /// involuntary context switches.
    weir_run_delay_ns: Option<u64>,
    weir_nonvoluntary_switches: Option<u64>,
    /// Times weir's threads were put on a CPU (each wake-up from a sleep is one).
    pub(crate) weir_runs: Option<u64>,
    /// ksoftirqd on the DUT core: runtime and time waiting for the CPU (ns).
    ksoftirqd_dut_ns: Option<u64>,
    ksoftirqd_dut_run_delay_ns: Option<u64>,
    /// All CPUs' busy time over the trial (from /proc/stat ticks).
    pub(crate) system_busy_ns: u64,
    system_total_ns: u64,
    /// Busy share of each CPU over the trial.
    pub(crate) cpu_busy_share: Vec<f64>,
    /// Softirq time of each CPU over the trial (tick-sampled, USER_HZ resolution).
    pub(crate) cpu_softirq_ns: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Trial {
    pub(crate) dut: String,
    pub(crate) frame: usize,
    pub(crate) phase: String,
    pub(crate) target_pps: Option<f64>,
    pub(crate) gen: GenOut,
    pub(crate) achieved_pps: f64,
    pub(crate) recv: RecvOut,
    pub(crate) lost: i64,
    pub(crate) loss_fraction: f64,
    pub(crate) pass: bool,
    /// The generator offered less than asked (more than 2 % short).
    pub(crate) gen_short: bool,
    /// The receiver's own ring dropped frames: the trial measured the receiver.
    pub(crate) receiver_limited: bool,
    pub(crate) softnet_dropped: u64,
    /// Frames the generator queued that its interface never took (should be ≤ 0; the sending
    /// host's own ARP or ICMP frames make it negative).
    pub(crate) left_in_generator: i64,
    /// Frames weir counted as sent that did not leave wan0 (should be 0).
    pub(crate) weir_tx_not_on_wire: Option<i64>,
    pub(crate) ifs: BTreeMap<String, IfCounters>,
    pub(crate) weir_outbound: Option<WeirLane>,
    pub(crate) weir_inbound: Option<WeirLane>,
    pub(crate) cpu: Option<CpuRec>,
}

pub(crate) struct Bench {
    pub(crate) opts: Opts,
    pub(crate) topo: BridgeTopo,
    pub(crate) gen: Gen,
    pub(crate) recv: Recv,
    pub(crate) src_mac: MacAddr,
    pub(crate) dst_mac: MacAddr,
    pub(crate) trial_no: u32,
    pub(crate) gen_cpu: Option<usize>,
    pub(crate) dut_cpu: Option<usize>,
    /// Move the receiver to the core the DUT does not use (2 CPUs, pinning on).
    pub(crate) move_receiver: bool,
    pub(crate) ksoftirqd: Option<i32>,
    pub(crate) trials: Vec<Trial>,
    pub(crate) interrupted: &'static AtomicBool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dut {
    /// weir with one worker.
    Weir,
    /// weir with `--workers N`.
    WeirWorkers,
    Kernel,
    KernelRps,
    /// The bridge with RPS shaping the policy's link rate with HTB on `wan0` (the kernel
    /// doing weir's job on the same link: `--weir-policy`).
    KernelHtb,
}

impl Dut {
    /// Every DUT, in the order the benchmark runs them (the kernel first, so weir's
    /// OffloadGuard finds the offloads already off).
    pub(crate) const ALL: [Dut; 5] = [
        Dut::Kernel,
        Dut::KernelRps,
        Dut::KernelHtb,
        Dut::Weir,
        Dut::WeirWorkers,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Dut::Weir => "weir",
            Dut::WeirWorkers => "weir-workers",
            Dut::Kernel => "kernel",
            Dut::KernelRps => "kernel-rps",
            Dut::KernelHtb => "kernel-htb",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Dut> {
        Dut::ALL.into_iter().find(|d| d.name() == s)
    }

    pub(crate) fn is_weir(self) -> bool {
        matches!(self, Dut::Weir | Dut::WeirWorkers)
    }
}

fn ifs_snapshot(t: &BridgeTopo) -> BTreeMap<String, IfCounters> {
    let mut m = BTreeMap::new();
    m.insert("snd.eth0".into(), if_counters(&t.snd, &t.snd_if));
    m.insert("dut.lan0".into(), if_counters(&t.dut, &t.dut_lan));
    m.insert("dut.wan0".into(), if_counters(&t.dut, &t.dut_wan));
    m.insert("rcv.eth0".into(), if_counters(&t.rcv, &t.rcv_if));
    m
}

impl Bench {
    pub(crate) fn check_interrupt(&self) -> Result<(), String> {
        if self.interrupted.load(Ordering::Relaxed) {
            Err("interrupted".into())
        } else {
            Ok(())
        }
    }

    /// One trial through the topology with `dut` already in place (weir is started here).
    pub(crate) fn trial(
        &mut self,
        dut: Dut,
        size: usize,
        rate: Option<f64>,
        dur: Duration,
        phase: &str,
    ) -> Result<Trial, String> {
        self.check_interrupt()?;
        self.trial_no += 1;
        let frames = Arc::new(build_frames(
            size,
            self.src_mac,
            self.dst_mac,
            self.opts.sources(),
        ));
        let weir = self.start_weir(dut)?;
        let cap = match rate {
            Some(r) => (r * dur.as_secs_f64()).round() as u64 + 64,
            None => (dur.as_secs_f64() * 10e6) as u64,
        };
        self.recv.begin(self.trial_no, cap);
        let ifs0 = ifs_snapshot(&self.topo);
        let sn0 = softnet_dropped();
        let cpu_phase = phase == "cpu";
        let weir_tids = weir.as_ref().map(|w| &w.tids[..]);
        let perf = if cpu_phase && self.opts.perf {
            weir.as_ref()
                .and_then(|w| start_perf(&w.tids, &self.opts.json, size))
        } else {
            None
        };
        let t0 = weir_tids.map(tasks_cpu);
        let k0 = self.ksoftirqd.map(pid_schedstat);
        let s0 = system_ticks();
        let q0 = softirq_ticks();
        let g = self.gen.run(GenCmd {
            trial: self.trial_no,
            rate,
            dur,
            frames,
        });
        let s1 = system_ticks();
        let q1 = softirq_ticks();
        let t1 = weir_tids.map(tasks_cpu);
        let k1 = self.ksoftirqd.map(pid_schedstat);
        if let Some(p) = perf {
            stop_perf(p);
        }
        let r = self.recv.end(Duration::from_millis(100));
        let report = match weir {
            Some(w) => Some(w.stop()?),
            None => None,
        };
        let ifs1 = ifs_snapshot(&self.topo);
        let sn1 = softnet_dropped();
        let ifs: BTreeMap<String, IfCounters> = ifs0
            .iter()
            .map(|(k, a)| (k.clone(), counters_delta(*a, ifs1[k])))
            .collect();
        let left_in_generator = g.sent as i64 - ifs["snd.eth0"].tx_packets as i64;
        let weir_tx_not_on_wire = report
            .as_ref()
            .map(|x| n(&x["outbound"]["tx"]["packets"]) as i64 - ifs["dut.wan0"].tx_packets as i64);
        let achieved = g.sent as f64 * 1e9 / g.elapsed_ns as f64;
        let lost = g.sent as i64 - r.unique as i64;
        let loss_fraction = if g.sent > 0 {
            lost.max(0) as f64 / g.sent as f64
        } else {
            0.0
        };
        let gen_short = rate.is_some_and(|x| achieved < GEN_SHORTFALL * x);
        let hz = user_hz();
        let tick_ns = 1_000_000_000 / hz;
        let cpu = Some(CpuRec {
            weir_thread_ns: t0.zip(t1).map(|(a, b)| b.exec_ns - a.exec_ns),
            weir_utime_ticks: t0.zip(t1).map(|(a, b)| b.utime - a.utime),
            weir_stime_ticks: t0.zip(t1).map(|(a, b)| b.stime - a.stime),
            weir_run_delay_ns: t0.zip(t1).map(|(a, b)| b.run_delay_ns - a.run_delay_ns),
            weir_nonvoluntary_switches: t0.zip(t1).map(|(a, b)| b.nonvoluntary - a.nonvoluntary),
            weir_runs: t0.zip(t1).map(|(a, b)| b.runs - a.runs),
            ksoftirqd_dut_ns: k0.zip(k1).map(|(a, b)| b.0 - a.0),
            ksoftirqd_dut_run_delay_ns: k0.zip(k1).map(|(a, b)| b.1 - a.1),
            system_busy_ns: (s1[0].0 - s0[0].0) * tick_ns,
            system_total_ns: (s1[0].1 - s0[0].1) * tick_ns,
            cpu_busy_share: s0
                .iter()
                .zip(&s1)
                .skip(1)
                .map(|(a, b)| (b.0 - a.0) as f64 / (b.1 - a.1).max(1) as f64)
                .collect(),
            cpu_softirq_ns: q0.iter().zip(&q1).map(|(a, b)| (b - a) * tick_ns).collect(),
        });
        let t = Trial {
            dut: dut.name().into(),
            frame: size,
            phase: phase.into(),
            target_pps: rate,
            gen: g,
            achieved_pps: achieved,
            recv: r,
            lost,
            loss_fraction,
            pass: g.sent > 0 && loss_fraction <= self.opts.loss_tolerance && r.unique > 0,
            gen_short,
            receiver_limited: r.ring_drops > 0,
            softnet_dropped: sn1 - sn0,
            left_in_generator,
            weir_tx_not_on_wire,
            ifs,
            weir_outbound: report.as_ref().map(|x| weir_lane(&x["outbound"])),
            weir_inbound: report.as_ref().map(|x| weir_lane(&x["inbound"])),
            cpu,
        };
        let busy = t
            .cpu
            .as_ref()
            .map(|c| {
                c.cpu_busy_share
                    .iter()
                    .map(|x| format!("{:.0}", x * 100.0))
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .unwrap_or_default();
        // share of the trial the generator / weir waited for a CPU while runnable
        let el = g.elapsed_ns.max(1) as f64;
        let mut wait = format!("{:.0}", g.run_delay_ns as f64 / el * 100.0);
        if let Some(d) = t.cpu.as_ref().and_then(|c| c.weir_run_delay_ns) {
            wait += &format!(" weir {:.0}", d as f64 / el * 100.0);
        }
        if let Some(c) = t
            .cpu
            .as_ref()
            .filter(|_| matches!(dut, Dut::KernelRps | Dut::KernelHtb))
        {
            if let (Some(r), Some(d)) = (c.ksoftirqd_dut_ns, c.ksoftirqd_dut_run_delay_ns) {
                wait += &format!(
                    " (ksoftirqd ran {:.0}, waited {:.0})",
                    r as f64 / el * 100.0,
                    d as f64 / el * 100.0
                );
            }
        }
        eprintln!(
            "  {:<10} {:>4} B {:<6} target {:>9} pps  sent {:>9.0} pps  lost {:>7} ({:.4} %)  cpu% {busy}  wait% gen {wait}{}{}{}{}{}",
            t.dut,
            size,
            phase,
            rate.map(|x| format!("{x:.0}"))
                .unwrap_or_else(|| "max".into()),
            achieved,
            lost,
            loss_fraction * 100.0,
            if t.gen_short { "  [generator short]" } else { "" },
            if t.receiver_limited {
                "  [receiver ring dropped]"
            } else {
                ""
            },
            t.weir_outbound
                .as_ref()
                .filter(|l| l.kernel_rx_drops > 0)
                .map(|l| format!("  [weir lan0 ring drops {}]", l.kernel_rx_drops))
                .unwrap_or_default(),
            if t.softnet_dropped > 0 {
                format!("  [backlog drops {}]", t.softnet_dropped)
            } else {
                String::new()
            },
            if t.left_in_generator > 0 {
                format!("  [{} frames did not leave the generator]", t.left_in_generator)
            } else {
                String::new()
            },
        );
        if r.unique == 0 {
            return Err(format!(
                "{} {size} B: the receiver got no frames at all; the DUT does not forward",
                dut.name()
            ));
        }
        self.trials.push(t.clone());
        Ok(t)
    }

    /// weir for one trial, when `dut` is weir: one worker pinned to the DUT core, or
    /// `--workers N` pinned by weir (one per CPU).
    pub(crate) fn start_weir(&self, dut: Dut) -> Result<Option<WeirRun>, String> {
        let workers = match dut {
            Dut::Weir => (1, false),
            Dut::WeirWorkers => (self.opts.workers, self.opts.workers_on_dut_core),
            _ => return Ok(None),
        };
        WeirRun::start(
            &self.topo,
            self.dut_cpu,
            self.opts.busy_poll,
            self.opts.weir_policy.as_deref(),
            workers,
        )
        .map(Some)
    }

    pub(crate) fn set_dut(&self, dut: Dut) -> Result<(), String> {
        let t = &self.topo;
        if self.move_receiver {
            // the plain bridge works on the generator's core; the others on the DUT core
            self.recv.pin(if dut == Dut::Kernel {
                self.dut_cpu
            } else {
                self.gen_cpu
            });
        }
        // HTB only for kernel-htb (the bridge's other rows and weir find the default qdisc)
        let _ = sh(
            &t.dut,
            &format!("tc qdisc del dev {} root 2>/dev/null", t.dut_wan),
        );
        match dut {
            Dut::Weir | Dut::WeirWorkers => {
                t.without_kernel_bridge().map_err(|e| e.to_string())?;
                set_rps(t, None)?;
            }
            Dut::Kernel | Dut::KernelRps | Dut::KernelHtb => {
                t.with_kernel_bridge().map_err(|e| e.to_string())?;
                if !self.opts.bridge_nf {
                    for k in [
                        "net.bridge.bridge-nf-call-iptables",
                        "net.bridge.bridge-nf-call-ip6tables",
                        "net.bridge.bridge-nf-call-arptables",
                    ] {
                        let _ = t.dut.set_sysctl(k, "0");
                    }
                }
                set_rps(
                    t,
                    if dut == Dut::Kernel {
                        None
                    } else {
                        Some(self.dut_cpu.unwrap_or(1))
                    },
                )?;
                if dut == Dut::KernelHtb {
                    let rate = self.opts.link_rate()?;
                    sh(
                        &t.dut,
                        &format!(
                            "tc qdisc add dev {w} root handle 1: htb default 1 && \
                             tc class add dev {w} parent 1: classid 1:1 htb rate {rate}bit",
                            w = t.dut_wan
                        ),
                    )?;
                }
                // let the bridge learn both MACs (the sink only drops the benchmark's port)
                let mut ok = false;
                for _ in 0..5 {
                    let rtts =
                        icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 2, Duration::from_millis(500))
                            .map_err(|e| e.to_string())?;
                    if rtts.iter().any(|x| x.is_some()) {
                        ok = true;
                        break;
                    }
                }
                if !ok {
                    return Err("no ping reply across the kernel bridge".into());
                }
            }
        }
        Ok(())
    }

    /// Zero-loss search for one (DUT, frame size).
    pub(crate) fn search(&mut self, dut: Dut, size: usize) -> Result<Cell, String> {
        let dur = Duration::from_millis(self.opts.trial_ms);
        let first = self.trial(dut, size, None, dur, "search")?;
        let mut cell = Cell {
            dut: dut.name().into(),
            frame: size,
            zero_loss_pps: None,
            generator_limited: false,
            receiver_limited_trials: 0,
            unlimited_pps: first.achieved_pps,
            unlimited_loss: first.loss_fraction,
            trials: 1,
        };
        if first.receiver_limited {
            cell.receiver_limited_trials += 1;
        }
        if first.pass {
            cell.zero_loss_pps = Some(first.achieved_pps);
            cell.generator_limited = true;
            return Ok(cell);
        }
        let (mut lo, mut hi) = (0.0f64, first.achieved_pps);
        for _ in 0..self.opts.iterations {
            let mid = (lo + hi) / 2.0;
            let t = self.trial(dut, size, Some(mid), dur, "search")?;
            cell.trials += 1;
            if t.receiver_limited {
                cell.receiver_limited_trials += 1;
            }
            if t.pass {
                lo = mid;
                if !matches!(cell.zero_loss_pps, Some(z) if z >= t.achieved_pps) {
                    cell.zero_loss_pps = Some(t.achieved_pps);
                    cell.generator_limited = t.gen_short;
                }
            } else {
                hi = mid;
            }
        }
        Ok(cell)
    }
}

fn set_rps(t: &BridgeTopo, cpu: Option<usize>) -> Result<(), String> {
    let mask = cpu
        .map(|c| format!("{:x}", 1u64 << c))
        .unwrap_or("0".into());
    sh(
        &t.dut,
        &format!(
            "echo {mask} > /sys/class/net/{}/queues/rx-0/rps_cpus",
            t.dut_lan
        ),
    )
}

/// `perf record` of weir's threads (`tids`) into a file beside the JSON.
fn start_perf(
    tids: &[i32],
    json: &std::path::Path,
    size: usize,
) -> Option<(std::process::Child, PathBuf)> {
    let tids: Vec<String> = tids.iter().map(i32::to_string).collect();
    let out = json.with_file_name(format!("bench-forward-weir-{size}.perf.data"));
    let child = std::process::Command::new("perf")
        .args(["record", "-q", "-g", "-F", "2999", "-t"])
        .arg(tids.join(","))
        .arg("-o")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300)); // let perf attach
    Some((child, out))
}

fn stop_perf((mut child, out): (std::process::Child, PathBuf)) {
    // SAFETY: signalling the perf process this benchmark started, by its pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let _ = child.wait();
    let rep = std::process::Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-g",
            "none",
            "--percent-limit",
            "1.5",
            "-i",
        ])
        .arg(&out)
        .output();
    if let Ok(rep) = rep {
        eprintln!("  perf profile of weir's threads ({}):", out.display());
        for l in String::from_utf8_lossy(&rep.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(30)
        {
            eprintln!("    {l}");
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Cell {
    pub(crate) dut: String,
    pub(crate) frame: usize,
    pub(crate) zero_loss_pps: Option<f64>,
    pub(crate) generator_limited: bool,
    pub(crate) receiver_limited_trials: u32,
    unlimited_pps: f64,
    unlimited_loss: f64,
    trials: u32,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CpuCell {
    pub(crate) dut: String,
    /// Which of the `--repeat` rounds.
    pub(crate) round: u32,
    pub(crate) frame: usize,
    pub(crate) rate_pps: f64,
    pub(crate) forwarded: u64,
    pub(crate) lost: i64,
    pub(crate) weir_thread_ns_per_pkt: Option<f64>,
    pub(crate) weir_user_share: Option<f64>,
    /// Times weir's threads ran (woke) per 1,000 forwarded packets.
    pub(crate) weir_runs_per_kpkt: Option<f64>,
    pub(crate) system_busy_ns_per_pkt: f64,
    pub(crate) generator_cpu_ns_per_pkt: f64,
    /// Busy share of each CPU over the trial.
    pub(crate) cpu_busy: Vec<f64>,
    /// Softirq time per forwarded packet on each CPU (tick-sampled).
    pub(crate) softirq_ns_per_pkt: Vec<f64>,
}

#[derive(Serialize)]
pub(crate) struct Doc<'a> {
    pub(crate) meta: BTreeMap<&'static str, serde_json::Value>,
    pub(crate) opts: &'a Opts,
    pub(crate) generator_reach: &'a [Trial],
    pub(crate) cells: &'a [Cell],
    pub(crate) cpu: &'a [CpuCell],
    pub(crate) tso: &'a [TsoCell],
    pub(crate) trials: &'a [Trial],
}
