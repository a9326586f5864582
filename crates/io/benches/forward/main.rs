//! Forwarding benchmark: RFC 2544-style zero-loss throughput of weir (pass-through, no
//! shaping) against the kernel's own bridge, on the same namespace topology, in one run.
//!
//! The goal (from the project's issue): ≥ 80 % of the kernel bridge's zero-loss rate with
//! 1518-byte frames (1500-byte IP packets) and ≥ 50 % with 64-byte frames; weir's CPU per
//! packet reported.
//!
//! Run it as root: `scripts/bench-forward [OPTIONS]` (= `cargo bench -p weir-io --bench
//! forward -- [OPTIONS]`); `--help` lists the options. Not a CI test: it needs root, takes
//! ~1.5 minutes and its numbers depend on the machine. Without root it prints SKIP and exits 0
//! (so `cargo bench --workspace` still works for a normal user).
//!
//! Set-up ([`BridgeTopo`]: `snd eth0 ── lan0 [dut] wan0 ── eth0 rcv`):
//! * Generator: a thread in `snd` with an AF_PACKET TX ring (qdisc bypass) sending
//!   pre-built UDP/IPv4 frames 10.77.0.1 → 10.77.0.2 to the receiver's real MAC (the
//!   sender's real MAC as source, so the kernel bridge learns as usual). The payload carries a
//!   64-bit sequence number and the trial number (UDP checksum 0, so the payload can change
//!   per frame). Pacing: frame *k* of a trial is due at *k*/rate; the generator sends the frames
//!   due so far in one `send` (at most 64), then sleeps (1 ns timer slack) until the frames of
//!   the next ~50 µs are due (it does not spin: its core also does kernel receive work, and
//!   the machine's busy time is measured). The "unlimited" trial sends as fast as it can.
//!   Open loop: the socket's send buffer is raised (`SO_SNDBUFFORCE`), else skbs queued in the
//!   DUT (they keep their socket reference across veth and the bridge) throttle the generator
//!   and turn the DUT's drops into back-pressure. A `send` stops at the first frame the device
//!   drops (veth: the peer's backlog is full → ENOBUFS) and leaves the rest queued in the
//!   ring, so the generator kicks the ring itself whenever it finds it full, and at the end of
//!   a trial until the interface has taken every frame.
//! * Receiver: a thread in `rcv` with an AF_PACKET RX ring (65,536 slots of 256 bytes: the
//!   kernel copies only the first 190 bytes of a frame) counting frames of this trial by
//!   sequence number in a bitmap (unique, duplicates, reordered, stale); it drains the ring,
//!   then sleeps 200 µs. The receiver's ring drops are read per trial: a trial where the
//!   receiver lost frames measures the receiver, and is reported as such.
//!   A tc ingress filter (classic BPF, direct action) drops the benchmark's UDP port after the
//!   packet taps, so the receiving host's IP stack does no work (and sends no ICMP port
//!   unreachable back through the DUT); where tc cannot do it, a bound UDP socket that is never
//!   read absorbs the frames instead (the JSON says which).
//! * DUTs: `weir` = `Bridge::open(BridgeConfig::new("lan0", "wan0"))`, no pipelines
//!   (pass-through both ways), started afresh for every trial on a thread in `dut` (so each
//!   trial has its own `BridgeReport`); `kernel` = the Linux bridge (`br0`, STP off) with
//!   `bridge-nf-call-{iptables,ip6tables,arptables}` = 0 (this kernel has br_netfilter built
//!   in, which would otherwise send every bridged frame through the netfilter hooks; pass
//!   `--bridge-nf` to keep the kernel's defaults); `kernel-rps` = the same bridge with RPS on
//!   `lan0` steering its receive processing to the DUT core; `kernel-htb` = that bridge with
//!   HTB shaping `wan0` to `--weir-policy`'s link rate (the kernel doing weir's job on the
//!   same link); `weir-workers` = weir with `--workers N`, beside `weir` with one (both
//!   shaping by a generated table of 64 circuits, one per generator address).
//!
//! Why two kernel rows: on veth, a frame is received by the peer inside the sender's own
//! `send()` (veth_xmit → netif_rx → softirq on the same CPU), so the plain kernel bridge does
//! its forwarding *in the generator's context, on the generator's core*: it cannot be offered
//! more than it forwards, so it never loses, and its "zero-loss rate" is the generator's
//! reach with the bridge's work added to it (always reported as generator-limited). weir
//! instead forwards on its own thread, on the other core. `kernel-rps` moves the bridge's work
//! to the DUT core as well (the same split as weir: generator + ingress on one core, DUT +
//! delivery to the receiver on the other), so that row is the like-for-like comparison.
//!
//! CPUs (2-core VM): the generator is pinned to CPU 0, weir's thread (and kernel-rps's
//! softirq work) to CPU 1; the receiver to CPU 2 if there is one, else to the core the DUT does
//! not use (CPU 1 for the plain bridge, whose work is on CPU 0; CPU 0 otherwise). `--no-pin`
//! pins nothing. The three threads run at nice -15 (`--nice`), and so does the benchmark's
//! autogroup for the run: with CONFIG_SCHED_AUTOGROUP the scheduler shares CPU time between
//! sessions before threads, so a busy process of another session would otherwise take half
//! a core from weir whatever its threads' nice value. The machine should still be otherwise
//! idle: the benchmark samples its load for a second first and warns above 5 %, and every
//! trial line shows the share of the trial the generator/weir spent runnable but waiting for a
//! CPU (`wait%`, schedstat run_delay).
//!
//! Method:
//! 1. Generator reach: unlimited trials on a direct veth pair (two extra namespaces, no DUT).
//! 2. Per (DUT, frame size): one unlimited trial at the DUT; if it loses nothing the DUT kept
//!    up with all the generator could offer, and the cell is *generator-limited* (reported as
//!    "≥ rate"). Otherwise a binary search over the offered rate between 0 and the rate the
//!    unlimited trial achieved (`--iterations`, default 8: resolution 1/256 of it). A trial
//!    passes when its loss ≤ `--loss-tolerance` (default 0: strictly zero loss). The zero-loss
//!    rate is the highest *achieved* rate of a passing trial (the generator's count of frames
//!    sent over the trial's duration, not the rate asked for); a passing trial whose achieved
//!    rate fell more than 2 % short of the rate asked for also marks the cell
//!    generator-limited.
//! 3. CPU: at a fixed rate (90 % of the lowest zero-loss rate of the frame size, the same for
//!    every DUT) one trial per DUT of `--cpu-ms`: weir's thread CPU time
//!    (`/proc/self/task/TID/schedstat`, ns) per forwarded packet, split user/system from
//!    `/proc/self/task/TID/stat`; and, for every DUT, the whole machine's busy CPU time
//!    (`/proc/stat`, all CPUs, 10 ms ticks) per packet — generator and receiver included, so
//!    only the difference between DUTs means something. This kernel has no
//!    CONFIG_IRQ_TIME_ACCOUNTING, so softirq work run inside a thread's context is charged to
//!    that thread: weir's thread time includes the kernel's transmit path on `wan0` and the
//!    receive path in `rcv` up to the receiver's packet tap. Per CPU, the softirq time per
//!    packet (tick-sampled from `/proc/stat`; it counts softirq work in interrupt context and
//!    in ksoftirqd alike): the kernel bridge's cost on its core whatever else runs there, the
//!    one CPU figure that stays comparable when other processes load the machine.
//!
//! Caveat on a shared machine: weir's thread is protected from other processes by the nice
//! value; the kernel bridge's softirq work is not when the kernel defers it to ksoftirqd
//! (nice 0), which it does once the DUT core is saturated. Under background load the
//! `kernel-rps` zero-loss rate therefore drops and varies from run to run (trial lines show
//! how long ksoftirqd waited); compare the softirq ns/pkt columns then.
//!
//! Output: a table on stdout, and every trial in `target/bench-forward.json` (`--json PATH`).

#![allow(clippy::disallowed_methods)] // a benchmark reads the wall clock

mod bench;
mod calibrate;
mod frame;
mod generator;
mod opts;
mod receiver;
mod sys;
mod tso;
mod weir;

use crate::bench::{Bench, Cell, CpuCell, Doc, Dut};
use crate::calibrate::calibrate;
use crate::generator::Gen;
use crate::opts::{parse_opts, Opts, HELP};
use crate::receiver::Recv;
use crate::sys::{install_sink, ksoftirqd_pid, mac_of, system_ticks, udp_in, NICE};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;
use weir_io::ethtool::{set_offloads, Offloads};
use weir_lab::topo::{skip_unless_root, BridgeTopo};

fn mbps(pps: f64, size: usize) -> f64 {
    pps * size as f64 * 8.0 / 1e6
}

fn main() {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench-forward: {e}\n\n{HELP}");
            std::process::exit(2);
        }
    };
    if skip_unless_root("forward benchmark") {
        eprintln!("bench-forward needs root: run `sudo scripts/bench-forward`");
        return;
    }
    if let Err(e) = run(opts) {
        eprintln!("bench-forward: {e}");
        std::process::exit(1);
    }
}

/// `--workers N` beside one worker: each frame size's zero-loss rates and the CPU per
/// forwarded packet of all of weir's threads at the common rate, with their ratios (the
/// issue's goals: no lower zero-loss rate, CPU per packet within 10 %).
fn workers_summary(opts: &Opts, cells: &[Cell], cpu: &[CpuCell]) {
    let n = opts.workers;
    println!();
    println!(
        "weir with {n} workers beside one, the same policy and traffic ({} source addresses){}:",
        opts.sources(),
        if opts.per_worker_rate {
            format!("; CPU trials at {n} × the rate for the {n} workers")
        } else {
            String::new()
        }
    );
    for &size in &opts.sizes {
        let zl = |d: Dut| {
            cells
                .iter()
                .find(|c| c.dut == d.name() && c.frame == size)
                .and_then(|c| c.zero_loss_pps.map(|p| (p, c.generator_limited)))
        };
        // each round's pair (weir, weir-workers): the median of the ratios, and their range
        let ns = |d: Dut, round: u32| {
            cpu.iter()
                .find(|c| c.dut == d.name() && c.frame == size && c.round == round)
                .and_then(|c| c.weir_thread_ns_per_pkt)
        };
        let mut ratios: Vec<f64> = (0..opts.repeat)
            .filter_map(|r| ns(Dut::Weir, r).zip(ns(Dut::WeirWorkers, r)))
            .map(|(a, b)| b / a)
            .collect();
        ratios.sort_by(f64::total_cmp);
        let show = |z: Option<(f64, bool)>| match z {
            Some((p, g)) => format!("{}{:.1} kpps", if g { "≥" } else { "" }, p / 1e3),
            None => "-".into(),
        };
        let (one, many) = (zl(Dut::Weir), zl(Dut::WeirWorkers));
        let rate = match (one, many) {
            (Some((a, _)), Some((b, _))) => format!(" ({:.0} %)", 100.0 * b / a),
            _ => String::new(),
        };
        let median = |v: &[f64]| match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        };
        let per = match (median(&ratios), ratios.first(), ratios.last()) {
            (Some(m), Some(lo), Some(hi)) => format!(
                "CPU per packet {:+.1} % (median of {} rounds; {:+.1} to {:+.1} %)",
                100.0 * (m - 1.0),
                ratios.len(),
                100.0 * (lo - 1.0),
                100.0 * (hi - 1.0)
            ),
            _ => "CPU -".into(),
        };
        let runs = |d: Dut| {
            let mut v: Vec<f64> = cpu
                .iter()
                .filter(|c| c.dut == d.name() && c.frame == size)
                .filter_map(|c| c.weir_runs_per_kpkt)
                .collect();
            v.sort_by(f64::total_cmp);
            median(&v).map_or("-".into(), |r| format!("{r:.0}"))
        };
        let per = format!(
            "{per}; wake-ups per 1,000 packets {} vs {}",
            runs(Dut::WeirWorkers),
            runs(Dut::Weir)
        );
        println!(
            "  {size:>4} B: zero loss {} vs {}{rate}; {per}",
            show(many),
            show(one)
        );
    }
}

/// With CONFIG_SCHED_AUTOGROUP, CPU time is first shared between autogroups (sessions) and
/// only then between the threads of one: a thread's nice value does nothing against another
/// session's busy process. So the benchmark's own autogroup gets the nice value too, for the
/// run, and its previous value back afterwards.
struct AutogroupNice(Option<i32>);

impl AutogroupNice {
    fn set(nice: i32) -> AutogroupNice {
        let read = || -> Option<i32> {
            let s = std::fs::read_to_string("/proc/self/autogroup").ok()?;
            s.split_whitespace().last()?.parse().ok()
        };
        let Some(old) = read() else {
            return AutogroupNice(None);
        };
        if nice == 0 || std::fs::write("/proc/self/autogroup", nice.to_string()).is_err() {
            return AutogroupNice(None);
        }
        AutogroupNice(Some(old))
    }
}

impl Drop for AutogroupNice {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = std::fs::write("/proc/self/autogroup", old.to_string());
        }
    }
}

fn run(opts: Opts) -> Result<(), String> {
    NICE.store(opts.nice, Ordering::Relaxed);
    let _autogroup = AutogroupNice::set(opts.nice);
    let interrupted = weir_io::signals::install();
    let t_start = std::time::Instant::now();
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (gen_cpu, dut_cpu, recv_cpu) = if opts.pin && ncpu >= 2 {
        (Some(0), Some(1), (ncpu >= 3).then_some(2))
    } else {
        (None, None, None)
    };
    let recv_place = match (recv_cpu, gen_cpu) {
        (Some(c), _) => format!("CPU {c}"),
        (None, Some(_)) => "the core the DUT does not use".into(),
        (None, None) => "unpinned".into(),
    };
    eprintln!(
        "bench-forward: {ncpu} CPUs; generator on {}, DUT on {}, receiver on {recv_place}; nice {}; trials {} ms, {} search steps, loss tolerance {}",
        gen_cpu.map(|c| format!("CPU {c}")).unwrap_or("unpinned".into()),
        dut_cpu.map(|c| format!("CPU {c}")).unwrap_or("unpinned".into()),
        opts.nice,
        opts.trial_ms,
        opts.iterations,
        opts.loss_tolerance
    );

    // the machine must be otherwise idle: 2 cores are shared by generator, DUT and receiver
    let i0 = system_ticks();
    std::thread::sleep(Duration::from_millis(1000));
    let i1 = system_ticks();
    let background = (i1[0].0 - i0[0].0) as f64 / (i1[0].1 - i0[0].1).max(1) as f64;
    if background > 0.05 {
        eprintln!(
            "WARNING: the machine is {:.0} % busy before the benchmark starts (other processes); \
             the results will be low and noisy",
            background * 100.0
        );
    }
    eprintln!("generator reach (direct veth, no DUT):");
    let reach = calibrate(&opts, gen_cpu, recv_cpu)?;

    let topo = BridgeTopo::new("fwd").map_err(|e| e.to_string())?;
    for (ns, ifname) in topo.interfaces() {
        let i = ifname.to_string();
        ns.run(move || set_offloads(&i, &Offloads::SEGMENTATION_OFF))
            .map_err(|e| e.to_string())?;
    }
    let (sink, _sock) = install_sink(&topo.rcv, &topo.rcv_if);
    let src_mac = mac_of(&topo.snd, &topo.snd_if)?;
    let dst_mac = mac_of(&topo.rcv, &topo.rcv_if)?;
    let recv = Recv::start(&topo.rcv, &topo.rcv_if, recv_cpu)?;
    let gen = Gen::start(&topo.snd, &topo.snd_if, gen_cpu)?;
    let udp0 = udp_in(&topo.rcv);
    let mut b = Bench {
        opts: opts.clone(),
        topo,
        gen,
        recv,
        src_mac,
        dst_mac,
        trial_no: 0,
        gen_cpu,
        move_receiver: recv_cpu.is_none() && gen_cpu.is_some(),
        ksoftirqd: ksoftirqd_pid(dut_cpu.unwrap_or(1)),
        dut_cpu,
        trials: Vec::new(),
        interrupted,
    };

    // searches, kernel first (so weir's OffloadGuard finds the offloads already off)
    let duts: Vec<Dut> = Dut::ALL
        .into_iter()
        .filter(|d| opts.duts.iter().any(|x| x == d.name()))
        .collect();
    let mut cells: Vec<Cell> = Vec::new();
    for &dut in duts.iter().filter(|_| opts.rate.is_none()) {
        b.set_dut(dut)?;
        for &size in &opts.sizes {
            eprintln!("search: {} {size} B", dut.name());
            let c = b.search(dut, size)?;
            cells.push(c);
        }
    }

    // CPU per packet at a common rate per frame size
    // (`--repeat K`: K rounds, the DUTs in turn within each, so that a pair of trials
    // compared round by round ran close together in time)
    let mut cpu_cells = Vec::new();
    for (round, &dut) in (0..opts.repeat).flat_map(|r| duts.iter().map(move |d| (r, d))) {
        b.set_dut(dut)?;
        for &size in &opts.sizes {
            let zl: Vec<f64> = cells
                .iter()
                .filter(|c| c.frame == size)
                .filter_map(|c| c.zero_loss_pps)
                .collect();
            let rate = match (opts.rate, zl.iter().cloned().reduce(f64::min)) {
                (Some(r), _) => r,
                (None, Some(min)) => 0.9 * min,
                (None, None) => continue,
            };
            let rate = match dut {
                Dut::WeirWorkers if opts.per_worker_rate => rate * opts.workers as f64,
                _ => rate,
            };
            eprintln!("cpu: {} {size} B at {rate:.0} pps", dut.name());
            let t = b.trial(
                dut,
                size,
                Some(rate),
                Duration::from_millis(opts.cpu_ms),
                "cpu",
            )?;
            let cpu = t.cpu.clone().unwrap();
            let fwd = t.recv.unique.max(1) as f64;
            cpu_cells.push(CpuCell {
                dut: dut.name().into(),
                round,
                frame: size,
                rate_pps: t.achieved_pps,
                forwarded: t.recv.unique,
                lost: t.lost,
                weir_thread_ns_per_pkt: cpu.weir_thread_ns.map(|x| x as f64 / fwd),
                weir_runs_per_kpkt: cpu.weir_runs.map(|r| r as f64 * 1e3 / fwd),
                weir_user_share: cpu
                    .weir_utime_ticks
                    .zip(cpu.weir_stime_ticks)
                    .map(|(u, s)| u as f64 / (u + s).max(1) as f64),
                system_busy_ns_per_pkt: cpu.system_busy_ns as f64 / fwd,
                generator_cpu_ns_per_pkt: t.gen.cpu_ns as f64 / t.gen.sent.max(1) as f64,
                cpu_busy: cpu.cpu_busy_share.clone(),
                softirq_ns_per_pkt: cpu.cpu_softirq_ns.iter().map(|&x| x as f64 / fwd).collect(),
            });
        }
    }

    // TSO sender: every interface back to its defaults (TSO/GSO on; veth's GRO is off by
    // default) for these trials, as a user has them: the sender hands out super-packets,
    // the kernel bridge forwards them whole, weir (which turns off only GRO/LRO) too
    let mut tso_cells = Vec::new();
    if opts.tso_ms > 0 && opts.rate.is_none() {
        let on = Offloads {
            tso: Some(true),
            gso: Some(true),
            ..Offloads::default()
        };
        for (ns, ifname) in b.topo.interfaces() {
            let i = ifname.to_string();
            ns.run(move || set_offloads(&i, &on))
                .map_err(|e| e.to_string())?;
        }
        for &dut in &duts {
            b.set_dut(dut)?;
            eprintln!("tso sender: {}", dut.name());
            tso_cells.push(b.tso_trial(dut, Duration::from_millis(opts.tso_ms))?);
        }
        for (ns, ifname) in b.topo.interfaces() {
            let i = ifname.to_string();
            ns.run(move || set_offloads(&i, &Offloads::SEGMENTATION_OFF))
                .map_err(|e| e.to_string())?;
        }
    }
    b.topo.without_kernel_bridge().ok();
    let udp1 = udp_in(&b.topo.rcv);

    // ---- report
    let tol = if opts.loss_tolerance == 0.0 {
        "strictly zero loss".to_string()
    } else {
        format!("loss ≤ {} %", opts.loss_tolerance * 100.0)
    };
    let cell = |dut: &str, size: usize| cells.iter().find(|c| c.dut == dut && c.frame == size);
    let fmt_cell = |c: Option<&Cell>| -> (String, String) {
        match c {
            None => ("-".into(), "-".into()),
            Some(c) => match c.zero_loss_pps {
                None => ("none".into(), "-".into()),
                Some(p) => {
                    let ge = if c.generator_limited { "≥" } else { "" };
                    (
                        format!("{ge}{:.1}", p / 1e3),
                        format!("{ge}{:.0}", mbps(p, c.frame)),
                    )
                }
            },
        }
    };
    println!();
    println!(
        "weir forwarding benchmark — zero-loss throughput ({tol}), {} ms trials, {} search steps",
        opts.trial_ms, opts.iterations
    );
    println!("frame sizes include the 4-byte FCS (RFC 2544); Mbit/s = frame bytes incl. FCS × 8");
    println!("≥ = generator-limited: the DUT lost nothing at the most the generator could offer");
    println!();
    println!("generator reach on a direct veth (no DUT):");
    for t in &reach {
        println!(
            "  {:>4} B: {:>8.1} kpps {:>7.0} Mbit/s",
            t.frame,
            t.achieved_pps / 1e3,
            mbps(t.achieved_pps, t.frame)
        );
    }
    println!();
    println!(
        "{:<6} {:<21} {:<21} {:<21} {:>8} {:>8} {:>10}",
        "frame", "kernel-bridge", "kernel-bridge+RPS", "weir", "weir/", "weir/", "weir CPU"
    );
    println!(
        "{:<6} {:<21} {:<21} {:<21} {:>8} {:>8} {:>10}",
        "", "kpps   Mbit/s", "kpps   Mbit/s", "kpps   Mbit/s", "kernel", "k+RPS", "ns/pkt"
    );
    let mut summary = Vec::new();
    for &size in &opts.sizes {
        let k = cell("kernel", size);
        let kr = cell("kernel-rps", size);
        let w = cell("weir", size);
        let (kp, km) = fmt_cell(k);
        let (krp, krm) = fmt_cell(kr);
        let (wp, wm) = fmt_cell(w);
        let ratio = |base: Option<&Cell>| -> (String, Option<f64>) {
            let (Some(wc), Some(bc)) = (w, base) else {
                return ("-".into(), None);
            };
            let (Some(wz), Some(bz)) = (wc.zero_loss_pps, bc.zero_loss_pps) else {
                return ("-".into(), None);
            };
            let r = wz / bz;
            // weir ≥ x (gen-limited) over an exact base: a lower bound; exact over ≥: an upper
            let mark = match (wc.generator_limited, bc.generator_limited) {
                (true, false) => "≥",
                (false, true) => "≤",
                (true, true) => "~",
                _ => "",
            };
            (format!("{mark}{:.0} %", r * 100.0), Some(r))
        };
        let (r1, r1v) = ratio(k);
        let (r2, r2v) = ratio(kr);
        let wcpu = cpu_cells
            .iter()
            .find(|c| c.dut == "weir" && c.frame == size)
            .and_then(|c| c.weir_thread_ns_per_pkt);
        println!(
            "{:<6} {:<21} {:<21} {:<21} {:>8} {:>8} {:>10}",
            size,
            format!("{kp:>8} {km:>7}"),
            format!("{krp:>8} {krm:>7}"),
            format!("{wp:>8} {wm:>7}"),
            r1,
            r2,
            wcpu.map(|x| format!("{x:.0}")).unwrap_or("-".into())
        );
        let goal = if size >= 1518 { 0.8 } else { 0.5 };
        summary.push((
            size,
            r1v.zip(r1.chars().next()),
            r2v.zip(r2.chars().next()),
            goal,
        ));
    }
    let htb: Vec<String> = opts
        .sizes
        .iter()
        .filter_map(|&size| cell(Dut::KernelHtb.name(), size))
        .map(|c| {
            let (p, m) = fmt_cell(Some(c));
            format!("{} B {p} kpps {m} Mbit/s", c.frame)
        })
        .collect();
    if !htb.is_empty() {
        println!(
            "kernel-bridge+RPS+HTB at the policy's link rate: {}",
            htb.join(", ")
        );
    }
    if opts.workers > 1 {
        workers_summary(&opts, &cells, &cpu_cells);
    }
    println!();
    match opts.rate {
        Some(r) => println!("CPU at {r:.0} frames/s (--rate):"),
        None => {
            println!("CPU at a common fixed rate (90 % of the frame size's lowest zero-loss rate):")
        }
    }
    println!(
        "  {:<11} {:>5} {:>8} {:>7} {:>12} {:>5} {:>17} {:>10} {:>12}  busy per CPU",
        "DUT",
        "frame",
        "kpps",
        "lost",
        "weir thread",
        "user",
        "softirq CPU0/CPU1",
        "generator",
        "system busy",
    );
    for c in &cpu_cells {
        println!(
            "  {:<11} {:>5} {:>8.1} {:>7} {:>12} {:>5} {:>17} {:>10} {:>12}  {}",
            c.dut,
            c.frame,
            c.rate_pps / 1e3,
            c.lost,
            c.weir_thread_ns_per_pkt
                .map(|x| format!("{x:.0}"))
                .unwrap_or("-".into()),
            c.weir_user_share
                .map(|x| format!("{:.0}%", x * 100.0))
                .unwrap_or("-".into()),
            c.softirq_ns_per_pkt
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join("/"),
            format!("{:.0}", c.generator_cpu_ns_per_pkt),
            format!("{:.0}", c.system_busy_ns_per_pkt),
            c.cpu_busy
                .iter()
                .map(|x| format!("{:.0}%", x * 100.0))
                .collect::<Vec<_>>()
                .join("/"),
        );
    }
    println!("  (all in ns of CPU per forwarded packet. weir thread: schedstat runtime, incl. the softirq work");
    println!("  done in its context; softirq: tick-sampled per CPU, i.e. the kernel bridge's work (kernel-rps:");
    println!("  CPU1) and the veth deliveries; generator: its thread, incl. softirq in its context; system");
    println!("  busy: all CPUs, generator and receiver included)");
    if background > 0.05 {
        println!("  (system busy is not meaningful here: other processes kept the CPUs busy)");
    }
    println!();
    if !tso_cells.is_empty() {
        println!(
            "TSO sender: one TCP flow (cubic) from a host with its default offloads (TSO/GSO on), {} ms:",
            opts.tso_ms
        );
        let base = |d: Dut| {
            tso_cells
                .iter()
                .find(|c| c.dut == d.name())
                .map(|c| c.goodput_bps)
        };
        for c in &tso_cells {
            let ratio = match Dut::parse(&c.dut).filter(|d| d.is_weir()) {
                Some(_) => [(Dut::KernelRps, "k+RPS"), (Dut::KernelHtb, "k+HTB")]
                    .into_iter()
                    .filter_map(|(d, name)| {
                        base(d).map(|b| format!("  weir/{name} {:.0} %", 100.0 * c.goodput_bps / b))
                    })
                    .collect(),
                None => String::new(),
            };
            let weir = match (c.weir_super_packets, c.weir_segments, c.weir_thread_ns_per_frame) {
                (Some(sp), Some(seg), Some(ns)) => format!(
                    "  ({} kept whole, {sp} super-packets → {seg} segments, {ns:.0} ns of weir's thread per wire frame, truncated {})",
                    c.weir_kept_whole.unwrap_or(0),
                    c.weir_truncated.unwrap_or(0)
                ),
                _ => String::new(),
            };
            println!(
                "  {:<11} {:>8.0} Mbit/s{ratio}{weir}",
                c.dut,
                c.goodput_bps / 1e6
            );
        }
        println!();
    }
    for (size, r1, r2, goal) in &summary {
        // the ratio's mark: '≤' an upper bound (the kernel cell is generator-limited), '≥' a
        // lower bound (weir's is), '~' both
        let verdict = |r: &Option<(f64, char)>| match r {
            None => "n/a",
            Some((r, m)) => match (*r >= *goal, m) {
                (true, '≤') | (true, '~') => "undetermined (kernel bridge generator-limited)",
                (false, '≥') | (false, '~') => "undetermined (weir generator-limited)",
                (true, _) => "met",
                (false, _) => "NOT met",
            },
        };
        println!(
            "goal {size} B: weir ≥ {:.0} % of the kernel bridge: {} (plain bridge), {} (bridge+RPS)",
            goal * 100.0,
            verdict(r1),
            verdict(r2)
        );
    }
    if background > 0.05 {
        println!(
            "WARNING: the machine was {:.0} % busy before the benchmark (other processes): results are low and noisy",
            background * 100.0
        );
    }
    let rl: u32 = cells.iter().map(|c| c.receiver_limited_trials).sum();
    if rl > 0 {
        println!("WARNING: {rl} trials had drops in the receiver's own ring (see the JSON)");
    }
    println!(
        "receiver sink: {sink}; UDP datagrams that reached rcv's stack: {}",
        udp1.saturating_sub(udp0)
    );

    let mut meta = BTreeMap::new();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    meta.insert("kernel", serde_json::json!(kernel.trim()));
    meta.insert("cpus", serde_json::json!(ncpu));
    meta.insert(
        "pinning",
        serde_json::json!({"generator": gen_cpu, "dut": dut_cpu, "receiver": recv_place, "nice": opts.nice}),
    );
    meta.insert("receiver_sink", serde_json::json!(sink));
    meta.insert("background_busy_before", serde_json::json!(background));
    meta.insert("loss_criterion", serde_json::json!(tol));
    meta.insert(
        "bridge_nf_call",
        serde_json::json!(if opts.bridge_nf {
            "kernel default"
        } else {
            "0"
        }),
    );
    meta.insert(
        "seconds",
        serde_json::json!(t_start.elapsed().as_secs_f64()),
    );
    let doc = Doc {
        meta,
        opts: &opts,
        generator_reach: &reach,
        cells: &cells,
        cpu: &cpu_cells,
        tso: &tso_cells,
        trials: &b.trials,
    };
    if let Some(dir) = opts.json.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut f =
        std::fs::File::create(&opts.json).map_err(|e| format!("{}: {e}", opts.json.display()))?;
    serde_json::to_writer_pretty(&mut f, &doc).map_err(|e| e.to_string())?;
    let _ = writeln!(f);
    println!(
        "all trials: {} ({:.0} s)",
        opts.json.display(),
        t_start.elapsed().as_secs_f64()
    );
    Ok(())
}
