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
//!   `lan0` steering its receive processing to the DUT core.
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

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::afpacket::{RingConfig, RxRing, TxRing};
use weir_io::bridge::{Bridge, BridgeConfig, BridgeReport, LaneStats};
use weir_io::clock::{set_timer_slack_1ns, Clock};
use weir_io::ethtool::{set_offloads, Offloads};
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{link_veth, set_up, skip_unless_root, wait_link_up, BridgeTopo, Netns};
use weir_wire::build::{udp_v4_frame, EthSpec, Ipv4Spec};
use weir_wire::ethernet::MacAddr;

const SRC_PORT: u16 = 40_000;
const DST_PORT: u16 = 40_001;
/// Marks the benchmark's frames (payload bytes 12..16).
const MAGIC: u32 = 0x5745_4952; // "WEIR"
/// Offsets in the frame: Ethernet 14 + IPv4 20 + UDP 8 = 42.
const OFF_SEQ: usize = 42;
const OFF_TRIAL: usize = 50;
const OFF_MAGIC: usize = 54;
/// Frames per `send()` at most.
const GEN_BATCH: u64 = 64;
/// Pacing quantum: a paced generator sends the frames due every ~50 µs in one `send()`.
const PACE_NS: u64 = 50_000;
/// A passing trial whose achieved rate is below this fraction of the rate asked for marks
/// the cell generator-limited.
const GEN_SHORTFALL: f64 = 0.98;

// ---------------------------------------------------------------------------------------
// options

#[derive(Clone, Debug, Serialize)]
struct Opts {
    trial_ms: u64,
    cpu_ms: u64,
    iterations: u32,
    /// Frame sizes including the 4-byte FCS (RFC 2544 convention): 64, 1518.
    sizes: Vec<usize>,
    duts: Vec<String>,
    loss_tolerance: f64,
    pin: bool,
    busy_poll: bool,
    bridge_nf: bool,
    perf: bool,
    nice: i32,
    /// Skip the searches; only the CPU trials, at this rate.
    rate: Option<f64>,
    /// Length of the TSO-sender trial per DUT (0 = skip it).
    tso_ms: u64,
    json: PathBuf,
}

const HELP: &str = "\
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
  --quick              --trial-ms 500 --cpu-ms 1000 --iterations 6
  --json PATH          where to write all trials (default target/bench-forward.json)
";

fn parse_opts() -> Result<Opts, String> {
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

// ---------------------------------------------------------------------------------------
// small system helpers

/// Nice value for the benchmark's threads (set by `--nice`, default -15).
static NICE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-15);

/// Pin this thread to `cpu` and give it the benchmark's nice value.
fn pin_to(cpu: Option<usize>) {
    let nice = NICE.load(Ordering::Relaxed);
    if nice != 0 {
        // SAFETY: setpriority on this thread (Linux: PRIO_PROCESS with a tid is per thread).
        unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid() as libc::id_t, nice) };
    }
    let Some(cpu) = cpu else { return };
    // SAFETY: a zeroed cpu_set_t is empty; sched_setaffinity(0) applies to this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A thread's CPU time: schedstat's sum_exec_runtime (ns) and stat's utime/stime (ticks).
/// Plus schedstat's run_delay (ns spent runnable but waiting for a CPU) and the involuntary
/// context switches.
#[derive(Clone, Copy, Debug, Default)]
struct TaskCpu {
    exec_ns: u64,
    run_delay_ns: u64,
    utime: u64,
    stime: u64,
    nonvoluntary: u64,
}

fn task_cpu(tid: i32) -> TaskCpu {
    let sched: Vec<u64> = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let nonvoluntary = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let (utime, stime) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
        })
        .unwrap_or((0, 0));
    TaskCpu {
        exec_ns: sched.first().copied().unwrap_or(0),
        run_delay_ns: sched.get(1).copied().unwrap_or(0),
        utime,
        stime,
        nonvoluntary,
    }
}

/// Busy and total ticks (`/proc/stat`, USER_HZ) of all CPUs together (index 0) and of each
/// CPU (index 1 + n).
fn system_ticks() -> Vec<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .take_while(|l| l.starts_with("cpu"))
        .map(|line| {
            let v: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() < 8 {
                return (0, 0);
            }
            // user nice system idle iowait irq softirq steal
            let idle = v[3] + v[4];
            let total: u64 = v[..8].iter().sum();
            (total - idle, total)
        })
        .collect()
}

/// The pid of `ksoftirqd/CPU` (softirq work the kernel defers from interrupt context runs
/// there, at nice 0: on a loaded machine it waits for the CPU like any other thread).
fn ksoftirqd_pid(cpu: usize) -> Option<i32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == want).then_some(pid)
    })
}

/// schedstat of any task: (runtime ns, run_delay ns).
fn pid_schedstat(pid: i32) -> (u64, u64) {
    let v: Vec<u64> = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (
        v.first().copied().unwrap_or(0),
        v.get(1).copied().unwrap_or(0),
    )
}

/// Softirq ticks (`/proc/stat`, USER_HZ) of each CPU. Without CONFIG_IRQ_TIME_ACCOUNTING
/// these are sampled by the tick, which counts softirq work in interrupt context and in
/// ksoftirqd alike: a fair estimate of the kernel bridge's work on a core, whatever else runs
/// there.
fn softirq_ticks() -> Vec<u64> {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .take_while(|l| l.starts_with("cpu"))
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .nth(7)
                .and_then(|x| x.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let r = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if r > 0 {
        r as u64
    } else {
        100
    }
}

/// Sum of the `dropped` column of /proc/net/softnet_stat (backlog queue overflows, all CPUs).
fn softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum()
}

/// Interface counters as a namespace sees them (`/proc/thread-self/net/dev`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct IfCounters {
    rx_packets: u64,
    rx_dropped: u64,
    tx_packets: u64,
    tx_dropped: u64,
}

fn if_counters(ns: &Netns, ifname: &str) -> IfCounters {
    let want = format!("{ifname}:");
    ns.run(move || {
        let s = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
        for l in s.lines() {
            let l = l.trim_start();
            if let Some(rest) = l.strip_prefix(&want) {
                let v: Vec<u64> = rest
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if v.len() >= 12 {
                    return IfCounters {
                        rx_packets: v[1],
                        rx_dropped: v[3],
                        tx_packets: v[9],
                        tx_dropped: v[11],
                    };
                }
            }
        }
        IfCounters::default()
    })
}

fn counters_delta(a: IfCounters, b: IfCounters) -> IfCounters {
    IfCounters {
        rx_packets: b.rx_packets.wrapping_sub(a.rx_packets),
        rx_dropped: b.rx_dropped.wrapping_sub(a.rx_dropped),
        tx_packets: b.tx_packets.wrapping_sub(a.tx_packets),
        tx_dropped: b.tx_dropped.wrapping_sub(a.tx_dropped),
    }
}

fn mac_of(ns: &Netns, ifname: &str) -> Result<MacAddr, String> {
    let out = ns
        .ip(&["-o", "link", "show", "dev", ifname])
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut w = text.split_whitespace();
    let mac = w
        .by_ref()
        .find(|x| *x == "link/ether")
        .and_then(|_| w.next())
        .ok_or_else(|| format!("no MAC address for {ifname} in {}", ns.name()))?;
    let mut b = [0u8; 6];
    let parts: Vec<&str> = mac.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("bad MAC {mac}"));
    }
    for (i, p) in parts.iter().enumerate() {
        b[i] = u8::from_str_radix(p, 16).map_err(|_| format!("bad MAC {mac}"))?;
    }
    Ok(MacAddr(b))
}

fn sh(ns: &Netns, script: &str) -> Result<(), String> {
    ns.exec_checked(&["sh", "-c", script])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Make the receiving host drop the benchmark's frames right after its packet taps: a tc
/// ingress filter (classic BPF, direct action) returning TC_ACT_SHOT for UDP to DST_PORT.
/// Falls back to a bound, never-read UDP socket (no ICMP port unreachable either, but the IP
/// stack does its work). Returns how, and the socket to keep alive.
fn install_sink(ns: &Netns, ifname: &str) -> (String, Option<std::net::UdpSocket>) {
    // cls_bpf runs classic BPF at ingress with the MAC header pushed back: offsets are from
    // the Ethernet header. ldh [12]; jeq 0x800 else ok; ldb [23]; jeq 17 else ok;
    // ldh [36]; jeq DST_PORT else ok; ret 2 (shot); ret 0 (ok).
    let prog = format!(
        "8,40 0 0 12,21 0 5 2048,48 0 0 23,21 0 3 17,40 0 0 36,21 0 1 {DST_PORT},6 0 0 2,6 0 0 0"
    );
    let tc = sh(
        ns,
        &format!(
            "tc qdisc add dev {ifname} ingress && \
             tc filter add dev {ifname} ingress protocol ip pref 1 bpf da bytecode '{prog}'"
        ),
    );
    match tc {
        Ok(()) => (
            "tc ingress classic-BPF drop (after the packet taps)".into(),
            None,
        ),
        Err(e) => {
            eprintln!("note: tc ingress drop unavailable ({e}); using a UDP socket sink");
            let sock = ns.run(|| {
                std::net::UdpSocket::bind((BridgeTopo::RCV_ADDR, DST_PORT)).expect("udp sink")
            });
            (
                "bound UDP socket, never read (IP stack runs)".into(),
                Some(sock),
            )
        }
    }
}

/// UDP datagrams the namespace's stack delivered or found no socket for (InDatagrams,
/// NoPorts, RcvbufErrors), to check the sink.
fn udp_in(ns: &Netns) -> u64 {
    ns.run(|| {
        let s = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap_or_default();
        let mut it = s.lines().filter(|l| l.starts_with("Udp:"));
        let (Some(h), Some(v)) = (it.next(), it.next()) else {
            return 0;
        };
        let h: Vec<&str> = h.split_whitespace().collect();
        let v: Vec<&str> = v.split_whitespace().collect();
        ["InDatagrams", "NoPorts", "RcvbufErrors"]
            .iter()
            .filter_map(|k| {
                let i = h.iter().position(|x| x == k)?;
                v.get(i)?.parse::<u64>().ok()
            })
            .sum()
    })
}

// ---------------------------------------------------------------------------------------
// frames

/// A frame of `size` bytes including FCS (so `size - 4` bytes built): Ethernet / IPv4 / UDP
/// with the payload [seq u64][trial u32][MAGIC u32][zeros]. UDP checksum 0 (none).
fn build_frame(size: usize, src: MacAddr, dst: MacAddr) -> Vec<u8> {
    let len = size - 4;
    let mut payload = vec![0u8; len - OFF_SEQ];
    payload[OFF_MAGIC - OFF_SEQ..OFF_MAGIC - OFF_SEQ + 4].copy_from_slice(&MAGIC.to_be_bytes());
    let mut buf = vec![0u8; len];
    let eth = EthSpec {
        src,
        dst,
        vlan: None,
        pcp: 0,
    };
    let ip = Ipv4Spec {
        src: BridgeTopo::SND_ADDR,
        dst: BridgeTopo::RCV_ADDR,
        ..Ipv4Spec::default()
    };
    let n = udp_v4_frame(&mut buf, &eth, &ip, SRC_PORT, DST_PORT, &payload).expect("frame");
    assert_eq!(n, len);
    buf[40..42].copy_from_slice(&[0, 0]);
    buf
}

// ---------------------------------------------------------------------------------------
// generator

struct GenCmd {
    trial: u32,
    /// Frames per second; `None` = as fast as possible.
    rate: Option<f64>,
    dur: Duration,
    frame: Arc<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
struct GenOut {
    sent: u64,
    elapsed_ns: u64,
    /// The TX ring had no free slot when a frame was due.
    ring_full: u64,
    send_errors: u64,
    rejected: u64,
    /// The generator thread's CPU time (includes softirq work done in its context).
    cpu_ns: u64,
    /// Time the generator thread waited for a CPU while runnable.
    run_delay_ns: u64,
}

struct Gen {
    cmd: Option<Sender<GenCmd>>,
    out: Receiver<GenOut>,
    handle: Option<JoinHandle<()>>,
}

impl Gen {
    fn start(ns: &Netns, ifname: &str, cpu: Option<usize>) -> Result<Gen, String> {
        let (cmd_tx, cmd_rx) = channel::<GenCmd>();
        let (out_tx, out_rx) = channel::<GenOut>();
        let (ready_tx, ready_rx) = channel::<Result<(), String>>();
        let ifname = ifname.to_string();
        let handle = ns
            .spawn(move || {
                pin_to(cpu);
                let _ = set_timer_slack_1ns();
                let cfg = RingConfig {
                    frame_size: 2048,
                    frames: 4096,
                };
                let mut tx = match TxRing::open(&ifname, cfg) {
                    Ok(t) => {
                        // open loop: without this the socket's send buffer (212 KB) throttles
                        // the generator whenever the DUT holds its skbs (they keep their
                        // socket reference across veth and the bridge, e.g. in an RPS
                        // backlog), which would turn the DUT's drops into back-pressure
                        let big: libc::c_int = 1 << 28;
                        // SAFETY: setsockopt with an int option on our socket.
                        unsafe {
                            libc::setsockopt(
                                t.fd(),
                                libc::SOL_SOCKET,
                                libc::SO_SNDBUFFORCE,
                                &big as *const libc::c_int as *const libc::c_void,
                                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                            );
                        }
                        let _ = ready_tx.send(Ok(()));
                        t
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let clock = Clock::new();
                while let Ok(c) = cmd_rx.recv() {
                    let r = gen_trial(&mut tx, &ifname, &clock, &c);
                    if out_tx.send(r).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "generator did not start".to_string())??;
        Ok(Gen {
            cmd: Some(cmd_tx),
            out: out_rx,
            handle: Some(handle),
        })
    }

    fn run(&self, cmd: GenCmd) -> GenOut {
        self.cmd
            .as_ref()
            .unwrap()
            .send(cmd)
            .expect("generator alive");
        self.out.recv().expect("generator result")
    }
}

impl Drop for Gen {
    fn drop(&mut self) {
        self.cmd = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// send(2) on the TX ring whatever TxRing's own bookkeeping says.
fn kick(tx: &TxRing) {
    // SAFETY: send(2) with an empty buffer kicks the TX ring.
    unsafe { libc::send(tx.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
}

/// Frames the kernel has taken from `ifname` for transmission (in the calling thread's
/// namespace).
fn if_tx_taken(ifname: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    let want = format!("{ifname}:");
    s.lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix(want.as_str())
                .map(str::to_string)
        })
        .map(|rest| {
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // tx_packets: on veth it counts the frames the peer's backlog dropped as well
            v.get(9).copied().unwrap_or(0)
        })
        .unwrap_or(0)
}

fn gen_trial(tx: &mut TxRing, ifname: &str, clock: &Clock, c: &GenCmd) -> GenOut {
    let frame = &c.frame[..];
    let trial = c.trial.to_be_bytes();
    let dur_ns = c.dur.as_nanos() as u64;
    let total = match c.rate {
        Some(r) => ((r * c.dur.as_secs_f64()).round() as u64).max(1),
        None => u64::MAX,
    };
    // frames per send when paced: those due in PACE_NS (at least 1, at most GEN_BATCH)
    let min_batch = match c.rate {
        Some(r) => ((r * PACE_NS as f64 / 1e9) as u64).clamp(1, GEN_BATCH),
        None => 1,
    };
    // a generator that cannot keep up still stops in bounded time
    let deadline_ns = dur_ns * 2;
    let mut o = GenOut::default();
    let rejected0 = tx.rejected;
    let taken0 = if_tx_taken(ifname);
    let cpu0 = thread_cpu_ns();
    let delay0 = task_cpu(gettid()).run_delay_ns;
    let start = clock.now();
    let mut el;
    loop {
        el = clock.now().0 - start.0;
        if o.sent >= total || el >= deadline_ns || (c.rate.is_none() && el >= dur_ns) {
            break;
        }
        let due = match c.rate {
            Some(r) => ((el as f64 * r / 1e9) as u64 + 1).min(total),
            None => u64::MAX,
        };
        let want = due.saturating_sub(o.sent).min(GEN_BATCH);
        if want < min_batch && due < total {
            // sleep until `min_batch` frames are due (no spinning: the generator's core also
            // does the kernel's receive work, and the machine's busy time is measured)
            let r = c.rate.unwrap_or(f64::INFINITY);
            let next = ((o.sent + min_batch - 1) as f64 * 1e9 / r) as u64;
            let gap = next.saturating_sub(el);
            if gap > 5_000 {
                std::thread::sleep(Duration::from_nanos(gap));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let mut n = 0;
        while n < want {
            let seq = (o.sent + n).to_be_bytes();
            let ok = tx.push_with(|buf| {
                // the slot keeps what it held last time: copy the whole frame only when the
                // headers differ (first use, or another frame size)
                if buf[..OFF_SEQ] != frame[..OFF_SEQ] {
                    buf[..frame.len()].copy_from_slice(frame);
                }
                buf[OFF_SEQ..OFF_SEQ + 8].copy_from_slice(&seq);
                buf[OFF_TRIAL..OFF_TRIAL + 4].copy_from_slice(&trial);
                frame.len()
            });
            if !ok {
                break;
            }
            n += 1;
        }
        o.sent += n;
        if tx.flush().is_err() {
            o.send_errors += 1;
        }
        if n < want {
            // ring full: frames the kernel left queued (EAGAIN) are only sent by another
            // send(), and TxRing::flush does nothing without new frames; kick it directly
            o.ring_full += 1;
            kick(tx);
            std::thread::yield_now();
        }
    }
    // send whatever is still queued in the ring: a send() stops at the first frame the
    // device drops (veth returns NET_XMIT_DROP when the peer's backlog is full, and the
    // kernel ends the call with ENOBUFS), leaving the rest queued; kick until the interface
    // has taken every frame (the host's own ARP/ICMP frames only make this end sooner)
    for _ in 0..500 {
        kick(tx);
        if if_tx_taken(ifname).wrapping_sub(taken0) >= o.sent {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    o.elapsed_ns = el.max(1);
    o.rejected = tx.rejected - rejected0;
    o.cpu_ns = thread_cpu_ns() - cpu0;
    o.run_delay_ns = task_cpu(gettid()).run_delay_ns - delay0;
    o
}

// ---------------------------------------------------------------------------------------
// receiver

#[derive(Default)]
struct RecvState {
    trial: u32,
    bits: Vec<u64>,
    unique: u64,
    dup: u64,
    reordered: u64,
    out_of_range: u64,
    /// Benchmark frames of another trial.
    stale: u64,
    /// Other frames (ARP, ...).
    foreign: u64,
    next_seq: u64,
    ring_drops: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
struct RecvOut {
    unique: u64,
    dup: u64,
    reordered: u64,
    out_of_range: u64,
    stale: u64,
    foreign: u64,
    ring_drops: u64,
}

struct Recv {
    state: Arc<Mutex<RecvState>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    tid: i32,
}

impl Recv {
    fn start(ns: &Netns, ifname: &str, cpu: Option<usize>) -> Result<Recv, String> {
        let state = Arc::new(Mutex::new(RecvState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = channel::<Result<i32, String>>();
        let (st, sp, ifname) = (state.clone(), stop.clone(), ifname.to_string());
        let handle = ns
            .spawn(move || {
                pin_to(cpu);
                let _ = set_timer_slack_1ns();
                let cfg = RingConfig {
                    frame_size: 256,
                    frames: 65_536,
                };
                let mut rx = match RxRing::open(&ifname, cfg) {
                    Ok(r) => {
                        let _ = ready_tx.send(Ok(gettid()));
                        r
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                while !sp.load(Ordering::Relaxed) {
                    let mut n = 0;
                    {
                        let mut s = st.lock().unwrap();
                        while n < 8192 {
                            let Some(f) = rx.peek() else { break };
                            on_frame(f.data, &mut s);
                            rx.release();
                            n += 1;
                        }
                        if n == 0 {
                            s.ring_drops += rx.kernel_drops();
                        }
                    }
                    if n == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let tid = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "receiver did not start".to_string())??;
        Ok(Recv {
            state,
            stop,
            handle: Some(handle),
            tid,
        })
    }

    /// Move the receiver thread to `cpu`.
    fn pin(&self, cpu: Option<usize>) {
        let Some(cpu) = cpu else { return };
        // SAFETY: as in pin_to, for the receiver's thread id.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(self.tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    fn begin(&self, trial: u32, cap: u64) {
        let mut s = self.state.lock().unwrap();
        *s = RecvState {
            trial,
            bits: vec![0; cap.div_ceil(64) as usize],
            ring_drops: s.ring_drops,
            ..RecvState::default()
        };
        s.ring_drops = 0;
    }

    /// Wait until the ring has been seen empty (after `settle`), then read the counts.
    fn end(&self, settle: Duration) -> RecvOut {
        std::thread::sleep(settle);
        // the receiver reads its ring drops whenever it finds the ring empty
        std::thread::sleep(Duration::from_millis(2));
        let s = self.state.lock().unwrap();
        RecvOut {
            unique: s.unique,
            dup: s.dup,
            reordered: s.reordered,
            out_of_range: s.out_of_range,
            stale: s.stale,
            foreign: s.foreign,
            ring_drops: s.ring_drops,
        }
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[inline]
fn on_frame(d: &[u8], s: &mut RecvState) {
    let ours = d.len() >= OFF_MAGIC + 4
        && d[12..14] == [0x08, 0x00]
        && d[23] == 17
        && d[36..38] == DST_PORT.to_be_bytes()
        && d[OFF_MAGIC..OFF_MAGIC + 4] == MAGIC.to_be_bytes();
    if !ours {
        s.foreign += 1;
        return;
    }
    let trial = u32::from_be_bytes(d[OFF_TRIAL..OFF_TRIAL + 4].try_into().unwrap());
    if trial != s.trial {
        s.stale += 1;
        return;
    }
    let seq = u64::from_be_bytes(d[OFF_SEQ..OFF_SEQ + 8].try_into().unwrap());
    let (w, b) = ((seq / 64) as usize, seq % 64);
    let Some(word) = s.bits.get_mut(w) else {
        s.out_of_range += 1;
        return;
    };
    if *word >> b & 1 == 1 {
        s.dup += 1;
    } else {
        *word |= 1 << b;
        s.unique += 1;
    }
    if seq < s.next_seq {
        s.reordered += 1;
    } else {
        s.next_seq = seq + 1;
    }
}

// ---------------------------------------------------------------------------------------
// weir as the DUT

struct WeirRun {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<BridgeReport, String>>>,
    tid: i32,
}

impl WeirRun {
    fn start(t: &BridgeTopo, cpu: Option<usize>, busy_poll: bool) -> Result<WeirRun, String> {
        let mut cfg = BridgeConfig::new(&t.dut_lan, &t.dut_wan);
        cfg.busy_poll = busy_poll;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (ready_tx, ready_rx) = channel::<Result<i32, String>>();
        let handle = t
            .dut
            .spawn(move || {
                pin_to(cpu);
                let mut b = match Bridge::open(cfg) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return Err(e.to_string());
                    }
                };
                let _ = ready_tx.send(Ok(gettid()));
                b.run(&s).map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?;
        let tid = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "weir did not start".to_string())??;
        Ok(WeirRun {
            stop,
            handle: Some(handle),
            tid,
        })
    }

    fn stop(mut self) -> Result<BridgeReport, String> {
        self.stop.store(true, Ordering::SeqCst);
        match self.handle.take().unwrap().join() {
            Ok(r) => r,
            Err(_) => Err("weir thread panicked".into()),
        }
    }
}

impl Drop for WeirRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct WeirLane {
    rx: u64,
    tx: u64,
    kernel_rx_drops: u64,
    tx_ring_full: u64,
    pool_exhausted: u64,
    truncated: u64,
    dropped: u64,
    shutdown_drops: u64,
    tx_rejected: u64,
}

fn weir_lane(l: &LaneStats) -> WeirLane {
    WeirLane {
        rx: l.rx.packets,
        tx: l.tx.packets,
        kernel_rx_drops: l.kernel_rx_drops,
        tx_ring_full: l.tx_ring_full,
        pool_exhausted: l.pool_exhausted.packets,
        truncated: l.truncated.packets,
        dropped: l.dropped.packets,
        shutdown_drops: l.shutdown_drops.packets,
        tx_rejected: l.tx_rejected,
    }
}

// ---------------------------------------------------------------------------------------
// trials

#[derive(Clone, Debug, Serialize)]
struct CpuRec {
    /// weir's thread: sum_exec_runtime over the trial.
    weir_thread_ns: Option<u64>,
    weir_utime_ticks: Option<u64>,
    weir_stime_ticks: Option<u64>,
    /// Time weir's thread was runnable but waiting for a CPU (scheduling latency), and its
    /// involuntary context switches.
    weir_run_delay_ns: Option<u64>,
    weir_nonvoluntary_switches: Option<u64>,
    /// ksoftirqd on the DUT core: runtime and time waiting for the CPU (ns).
    ksoftirqd_dut_ns: Option<u64>,
    ksoftirqd_dut_run_delay_ns: Option<u64>,
    /// All CPUs' busy time over the trial (from /proc/stat ticks).
    system_busy_ns: u64,
    system_total_ns: u64,
    /// Busy share of each CPU over the trial.
    cpu_busy_share: Vec<f64>,
    /// Softirq time of each CPU over the trial (tick-sampled, USER_HZ resolution).
    cpu_softirq_ns: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
struct Trial {
    dut: String,
    frame: usize,
    phase: String,
    target_pps: Option<f64>,
    gen: GenOut,
    achieved_pps: f64,
    recv: RecvOut,
    lost: i64,
    loss_fraction: f64,
    pass: bool,
    /// The generator offered less than asked (more than 2 % short).
    gen_short: bool,
    /// The receiver's own ring dropped frames: the trial measured the receiver.
    receiver_limited: bool,
    softnet_dropped: u64,
    /// Frames the generator queued that its interface never took (should be ≤ 0; the sending
    /// host's own ARP or ICMP frames make it negative).
    left_in_generator: i64,
    /// Frames weir counted as sent that did not leave wan0 (should be 0).
    weir_tx_not_on_wire: Option<i64>,
    ifs: BTreeMap<String, IfCounters>,
    weir_outbound: Option<WeirLane>,
    weir_inbound: Option<WeirLane>,
    cpu: Option<CpuRec>,
}

struct Bench {
    opts: Opts,
    topo: BridgeTopo,
    gen: Gen,
    recv: Recv,
    src_mac: MacAddr,
    dst_mac: MacAddr,
    trial_no: u32,
    gen_cpu: Option<usize>,
    dut_cpu: Option<usize>,
    /// Move the receiver to the core the DUT does not use (2 CPUs, pinning on).
    move_receiver: bool,
    ksoftirqd: Option<i32>,
    trials: Vec<Trial>,
    interrupted: &'static AtomicBool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dut {
    Weir,
    Kernel,
    KernelRps,
}

impl Dut {
    fn name(self) -> &'static str {
        match self {
            Dut::Weir => "weir",
            Dut::Kernel => "kernel",
            Dut::KernelRps => "kernel-rps",
        }
    }
    fn parse(s: &str) -> Dut {
        match s {
            "weir" => Dut::Weir,
            "kernel" => Dut::Kernel,
            _ => Dut::KernelRps,
        }
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
    fn check_interrupt(&self) -> Result<(), String> {
        if self.interrupted.load(Ordering::Relaxed) {
            Err("interrupted".into())
        } else {
            Ok(())
        }
    }

    /// One trial through the topology with `dut` already in place (weir is started here).
    fn trial(
        &mut self,
        dut: Dut,
        size: usize,
        rate: Option<f64>,
        dur: Duration,
        phase: &str,
    ) -> Result<Trial, String> {
        self.check_interrupt()?;
        self.trial_no += 1;
        let frame = Arc::new(build_frame(size, self.src_mac, self.dst_mac));
        let weir = if dut == Dut::Weir {
            Some(WeirRun::start(
                &self.topo,
                self.dut_cpu,
                self.opts.busy_poll,
            )?)
        } else {
            None
        };
        let cap = match rate {
            Some(r) => (r * dur.as_secs_f64()).round() as u64 + 64,
            None => (dur.as_secs_f64() * 10e6) as u64,
        };
        self.recv.begin(self.trial_no, cap);
        let ifs0 = ifs_snapshot(&self.topo);
        let sn0 = softnet_dropped();
        let cpu_phase = phase == "cpu";
        let weir_tid = weir.as_ref().map(|w| w.tid);
        let perf = if cpu_phase && self.opts.perf {
            weir_tid.and_then(|tid| start_perf(tid, &self.opts.json, size))
        } else {
            None
        };
        let t0 = weir_tid.map(task_cpu);
        let k0 = self.ksoftirqd.map(pid_schedstat);
        let s0 = system_ticks();
        let q0 = softirq_ticks();
        let g = self.gen.run(GenCmd {
            trial: self.trial_no,
            rate,
            dur,
            frame,
        });
        let s1 = system_ticks();
        let q1 = softirq_ticks();
        let t1 = weir_tid.map(task_cpu);
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
            .map(|x| x.outbound.tx.packets as i64 - ifs["dut.wan0"].tx_packets as i64);
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
            weir_outbound: report.as_ref().map(|x| weir_lane(&x.outbound)),
            weir_inbound: report.as_ref().map(|x| weir_lane(&x.inbound)),
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
        if let Some(c) = t.cpu.as_ref().filter(|_| dut == Dut::KernelRps) {
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

    fn set_dut(&self, dut: Dut) -> Result<(), String> {
        let t = &self.topo;
        if self.move_receiver {
            // the plain bridge works on the generator's core; the others on the DUT core
            self.recv.pin(if dut == Dut::Kernel {
                self.dut_cpu
            } else {
                self.gen_cpu
            });
        }
        match dut {
            Dut::Weir => {
                t.without_kernel_bridge().map_err(|e| e.to_string())?;
                set_rps(t, None)?;
            }
            Dut::Kernel | Dut::KernelRps => {
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
                    if dut == Dut::KernelRps {
                        Some(self.dut_cpu.unwrap_or(1))
                    } else {
                        None
                    },
                )?;
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
    fn search(&mut self, dut: Dut, size: usize) -> Result<Cell, String> {
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

fn start_perf(
    tid: i32,
    json: &std::path::Path,
    size: usize,
) -> Option<(std::process::Child, PathBuf)> {
    let out = json.with_file_name(format!("bench-forward-weir-{size}.perf.data"));
    let child = std::process::Command::new("perf")
        .args(["record", "-q", "-g", "-F", "2999", "-t"])
        .arg(tid.to_string())
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
        eprintln!("  perf profile of weir's thread ({}):", out.display());
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
struct Cell {
    dut: String,
    frame: usize,
    zero_loss_pps: Option<f64>,
    generator_limited: bool,
    receiver_limited_trials: u32,
    unlimited_pps: f64,
    unlimited_loss: f64,
    trials: u32,
}

#[derive(Clone, Debug, Serialize)]
struct CpuCell {
    dut: String,
    frame: usize,
    rate_pps: f64,
    forwarded: u64,
    lost: i64,
    weir_thread_ns_per_pkt: Option<f64>,
    weir_user_share: Option<f64>,
    system_busy_ns_per_pkt: f64,
    generator_cpu_ns_per_pkt: f64,
    /// Busy share of each CPU over the trial.
    cpu_busy: Vec<f64>,
    /// Softirq time per forwarded packet on each CPU (tick-sampled).
    softirq_ns_per_pkt: Vec<f64>,
}

#[derive(Serialize)]
struct Doc<'a> {
    meta: BTreeMap<&'static str, serde_json::Value>,
    opts: &'a Opts,
    generator_reach: &'a [Trial],
    cells: &'a [Cell],
    cpu: &'a [CpuCell],
    tso: &'a [TsoCell],
    trials: &'a [Trial],
}

// ---------------------------------------------------------------------------------------
// TSO sender: one bulk TCP flow from a host that keeps its segmentation offloads on

/// One DUT's TSO-sender trial.
#[derive(Clone, Debug, Serialize)]
struct TsoCell {
    dut: String,
    /// Receiver's goodput after the first second (slow start excluded), bit/s.
    goodput_bps: f64,
    /// Seconds measured.
    seconds: f64,
    /// weir: super-packets cut, and the segments they made.
    weir_super_packets: Option<u64>,
    weir_segments: Option<u64>,
    /// weir: frames it forwarded towards the receiver.
    weir_tx: Option<u64>,
    /// weir: its thread's CPU time per frame forwarded towards the receiver (ns).
    weir_thread_ns_per_frame: Option<f64>,
    /// weir: frames it could not read whole (must be 0).
    weir_truncated: Option<u64>,
}

/// A bulk TCP flow (cubic, the host's default offloads on the sender's veth) from `snd`
/// to `rcv` for `dur`; the receiver's goodput after the first second, with the seconds
/// measured. Sender and receiver threads on `cpu`.
fn tcp_bulk(t: &BridgeTopo, dur: Duration, cpu: Option<usize>) -> Result<(f64, f64), String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from((BridgeTopo::RCV_ADDR, 5999));
    let listener = t
        .rcv
        .run(move || std::net::TcpListener::bind(addr))
        .map_err(|e| format!("tcp listen: {e}"))?;
    let receiver = std::thread::spawn(move || -> Result<(f64, f64), String> {
        pin_to(cpu);
        let (mut c, _) = listener.accept().map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 18];
        let mut total = 0u64;
        let start = std::time::Instant::now();
        let mut mark: Option<(u64, std::time::Instant)> = None;
        loop {
            let n = c.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if mark.is_none() && start.elapsed() >= Duration::from_secs(1) {
                mark = Some((total, std::time::Instant::now()));
            }
        }
        let (b0, t0) = mark.ok_or("the flow lasted less than a second")?;
        let secs = t0.elapsed().as_secs_f64();
        Ok(((total - b0) as f64 * 8.0 / secs, secs))
    });
    let sender = t
        .snd
        .spawn(move || -> Result<(), String> {
            pin_to(cpu);
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .map_err(|e| format!("tcp connect: {e}"))?;
            let cc = b"cubic";
            // SAFETY: setsockopt with a valid buffer of the given length.
            let r = unsafe {
                use std::os::fd::AsRawFd;
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_CONGESTION,
                    cc.as_ptr() as *const libc::c_void,
                    cc.len() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(format!(
                    "TCP_CONGESTION cubic: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let chunk = vec![0x5au8; 1 << 16];
            let end = std::time::Instant::now() + dur;
            while std::time::Instant::now() < end {
                s.write_all(&chunk).map_err(|e| e.to_string())?;
            }
            s.shutdown(std::net::Shutdown::Write)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())?;
    sender.join().map_err(|_| "sender panicked")??;
    receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())?
}

impl Bench {
    /// The TSO-sender trial through `dut` (already in place; weir is started here).
    fn tso_trial(&mut self, dut: Dut, dur: Duration) -> Result<TsoCell, String> {
        self.check_interrupt()?;
        let weir = match dut {
            Dut::Weir => Some(WeirRun::start(
                &self.topo,
                self.dut_cpu,
                self.opts.busy_poll,
            )?),
            _ => None,
        };
        let c0 = weir.as_ref().map(|w| task_cpu(w.tid));
        let flow = tcp_bulk(&self.topo, dur, self.gen_cpu);
        let c1 = weir.as_ref().map(|w| task_cpu(w.tid));
        let report = match weir {
            Some(w) => Some(w.stop()?),
            None => None,
        };
        let (goodput_bps, seconds) = flow?;
        let out = report.as_ref().map(|r| &r.outbound);
        let tx = out.map(|l| l.tx.packets);
        Ok(TsoCell {
            dut: dut.name().into(),
            goodput_bps,
            seconds,
            weir_super_packets: out.map(|l| l.gso.super_packets),
            weir_segments: out.map(|l| l.gso.segments),
            weir_tx: tx,
            weir_thread_ns_per_frame: c0
                .zip(c1)
                .zip(tx)
                .map(|((a, b), n)| (b.exec_ns - a.exec_ns) as f64 / n.max(1) as f64),
            weir_truncated: out.map(|l| l.truncated.packets),
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Generator reach on a direct veth pair (two extra namespaces, no DUT).
fn calibrate(
    opts: &Opts,
    gen_cpu: Option<usize>,
    recv_cpu: Option<usize>,
) -> Result<Vec<Trial>, String> {
    let a = Netns::new("fwd-gen").map_err(|e| e.to_string())?;
    let b = Netns::new("fwd-sink").map_err(|e| e.to_string())?;
    link_veth(&a, "gen0", &b, "sink0").map_err(|e| e.to_string())?;
    set_up(&a, "gen0").map_err(|e| e.to_string())?;
    set_up(&b, "sink0").map_err(|e| e.to_string())?;
    wait_link_up(&a, "gen0", Duration::from_secs(3)).map_err(|e| e.to_string())?;
    wait_link_up(&b, "sink0", Duration::from_secs(3)).map_err(|e| e.to_string())?;
    for (ns, i) in [(&a, "gen0"), (&b, "sink0")] {
        ns.run(move || set_offloads(i, &Offloads::SEGMENTATION_OFF))
            .map_err(|e| e.to_string())?;
    }
    sh(&b, "ip addr add 10.77.0.2/24 dev sink0").ok();
    let (_, _sock) = install_sink(&b, "sink0");
    let src = mac_of(&a, "gen0")?;
    let dst = mac_of(&b, "sink0")?;
    let recv = Recv::start(&b, "sink0", recv_cpu)?;
    let gen = Gen::start(&a, "gen0", gen_cpu)?;
    let dur = Duration::from_millis(opts.trial_ms);
    let mut out = Vec::new();
    for (k, &size) in opts.sizes.iter().enumerate() {
        let trial = 1_000_000 + k as u32;
        recv.begin(trial, (dur.as_secs_f64() * 10e6) as u64);
        let g = gen.run(GenCmd {
            trial,
            rate: None,
            dur,
            frame: Arc::new(build_frame(size, src, dst)),
        });
        let r = recv.end(Duration::from_millis(100));
        let achieved = g.sent as f64 * 1e9 / g.elapsed_ns as f64;
        let lost = g.sent as i64 - r.unique as i64;
        eprintln!(
            "  direct veth {size:>4} B: generator reach {achieved:>9.0} pps, receiver lost {lost}{}",
            if r.ring_drops > 0 { " [receiver ring dropped]" } else { "" }
        );
        out.push(Trial {
            dut: "direct-veth".into(),
            frame: size,
            phase: "reach".into(),
            target_pps: None,
            gen: g,
            achieved_pps: achieved,
            recv: r,
            lost,
            loss_fraction: lost.max(0) as f64 / g.sent.max(1) as f64,
            pass: lost <= 0,
            gen_short: false,
            receiver_limited: r.ring_drops > 0,
            softnet_dropped: 0,
            left_in_generator: 0,
            weir_tx_not_on_wire: None,
            ifs: BTreeMap::new(),
            weir_outbound: None,
            weir_inbound: None,
            cpu: None,
        });
    }
    drop(gen);
    drop(recv);
    Ok(out)
}

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
    let duts: Vec<Dut> = ["kernel", "kernel-rps", "weir"]
        .iter()
        .filter(|d| opts.duts.iter().any(|x| x == *d))
        .map(|d| Dut::parse(d))
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
    let mut cpu_cells = Vec::new();
    for &dut in &duts {
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
                frame: size,
                rate_pps: t.achieved_pps,
                forwarded: t.recv.unique,
                lost: t.lost,
                weir_thread_ns_per_pkt: cpu.weir_thread_ns.map(|x| x as f64 / fwd),
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

    // TSO sender: the sender's veth back to its defaults (TSO/GSO on) for these trials
    let mut tso_cells = Vec::new();
    if opts.tso_ms > 0 && opts.rate.is_none() {
        let i = b.topo.snd_if.clone();
        let on = Offloads {
            tso: Some(true),
            gso: Some(true),
            ..Offloads::default()
        };
        b.topo
            .snd
            .run(move || set_offloads(&i, &on))
            .map_err(|e| e.to_string())?;
        for &dut in &duts {
            b.set_dut(dut)?;
            eprintln!("tso sender: {}", dut.name());
            tso_cells.push(b.tso_trial(dut, Duration::from_millis(opts.tso_ms))?);
        }
        let i = b.topo.snd_if.clone();
        b.topo
            .snd
            .run(move || set_offloads(&i, &Offloads::SEGMENTATION_OFF))
            .map_err(|e| e.to_string())?;
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
        let base = tso_cells
            .iter()
            .find(|c| c.dut == "kernel-rps")
            .map(|c| c.goodput_bps);
        for c in &tso_cells {
            let ratio = match (c.dut.as_str(), base) {
                ("weir", Some(b)) => format!("  weir/k+RPS {:.0} %", 100.0 * c.goodput_bps / b),
                _ => String::new(),
            };
            let weir = match (c.weir_super_packets, c.weir_segments, c.weir_thread_ns_per_frame) {
                (Some(sp), Some(seg), Some(ns)) => format!(
                    "  ({sp} super-packets → {seg} segments, {ns:.0} ns of weir's thread per frame, truncated {})",
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
