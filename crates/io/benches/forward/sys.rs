//! Small system helpers: thread pinning and nice, CPU time and counters from /proc, interface
//! counters, MAC addresses, shell commands in a namespace, the receiving host's sink.

use crate::frame::DST_PORT;
use serde::Serialize;
use std::sync::atomic::Ordering;
use weir_lab::topo::{BridgeTopo, Netns};
use weir_wire::ethernet::MacAddr;

/// Nice value for the benchmark's threads (set by `--nice`, default -15).
pub(crate) static NICE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-15);

/// Pin this thread to `cpu` and give it the benchmark's nice value.
pub(crate) fn pin_to(cpu: Option<usize>) {
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

pub(crate) fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() }
}

/// A thread's CPU time: schedstat's sum_exec_runtime (ns) and stat's utime/stime (ticks).
/// Plus schedstat's run_delay (ns spent runnable but waiting for a CPU) and its count of
/// times the thread ran (`runs`: a wake-up from a sleep is one), and the involuntary
/// context switches.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TaskCpu {
    pub(crate) exec_ns: u64,
    pub(crate) run_delay_ns: u64,
    pub(crate) utime: u64,
    pub(crate) stime: u64,
    pub(crate) nonvoluntary: u64,
    pub(crate) runs: u64,
}

pub(crate) fn task_cpu(tid: i32) -> TaskCpu {
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
        runs: sched.get(2).copied().unwrap_or(0),
        utime,
        stime,
        nonvoluntary,
    }
}

/// Busy and total ticks (`/proc/stat`, USER_HZ) of all CPUs together (index 0) and of each
/// CPU (index 1 + n).
pub(crate) fn system_ticks() -> Vec<(u64, u64)> {
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
pub(crate) fn ksoftirqd_pid(cpu: usize) -> Option<i32> {
    let want = format!("ksoftirqd/{cpu}");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == want).then_some(pid)
    })
}

/// schedstat of any task: (runtime ns, run_delay ns).
pub(crate) fn pid_schedstat(pid: i32) -> (u64, u64) {
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
pub(crate) fn softirq_ticks() -> Vec<u64> {
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

pub(crate) fn user_hz() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let r = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if r > 0 {
        r as u64
    } else {
        100
    }
}

/// Sum of the `dropped` column of /proc/net/softnet_stat (backlog queue overflows, all CPUs).
pub(crate) fn softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum()
}

/// Interface counters as a namespace sees them (`/proc/thread-self/net/dev`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct IfCounters {
    rx_packets: u64,
    rx_dropped: u64,
    pub(crate) tx_packets: u64,
    tx_dropped: u64,
}

pub(crate) fn if_counters(ns: &Netns, ifname: &str) -> IfCounters {
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

pub(crate) fn counters_delta(a: IfCounters, b: IfCounters) -> IfCounters {
    IfCounters {
        rx_packets: b.rx_packets.wrapping_sub(a.rx_packets),
        rx_dropped: b.rx_dropped.wrapping_sub(a.rx_dropped),
        tx_packets: b.tx_packets.wrapping_sub(a.tx_packets),
        tx_dropped: b.tx_dropped.wrapping_sub(a.tx_dropped),
    }
}

pub(crate) fn mac_of(ns: &Netns, ifname: &str) -> Result<MacAddr, String> {
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

pub(crate) fn sh(ns: &Netns, script: &str) -> Result<(), String> {
    ns.exec_checked(&["sh", "-c", script])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Make the receiving host drop the benchmark's frames right after its packet taps: a tc
/// ingress filter (classic BPF, direct action) returning TC_ACT_SHOT for UDP to DST_PORT.
/// Falls back to a bound, never-read UDP socket (no ICMP port unreachable either, but the IP
/// stack does its work). Returns how, and the socket to keep alive.
pub(crate) fn install_sink(ns: &Netns, ifname: &str) -> (String, Option<std::net::UdpSocket>) {
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
pub(crate) fn udp_in(ns: &Netns) -> u64 {
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
