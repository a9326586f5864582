//! weir as the DUT: a `Bridge` (one worker) or `Workers` (`--workers N`) run on its own
//! thread for one trial (`WeirRun`), and its per-lane counters as recorded (`WeirLane`).

use crate::sys::{gettid, pin_to, task_cpu, TaskCpu};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::bridge::{Bridge, BridgeConfig, Workers, WorkersConfig};
use weir_lab::topo::BridgeTopo;

type Report = Result<serde_json::Value, String>;

pub(crate) struct WeirRun {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Report>>,
    /// Every thread weir started for the trial (the bridge's, or the supervisor's first,
    /// then its workers'): their CPU time is weir's.
    pub(crate) tids: Vec<i32>,
}

/// The threads of this process.
fn threads() -> BTreeSet<i32> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The CPU time of `tids` added up.
pub(crate) fn tasks_cpu(tids: &[i32]) -> TaskCpu {
    tids.iter()
        .map(|&t| task_cpu(t))
        .fold(TaskCpu::default(), |a, b| TaskCpu {
            exec_ns: a.exec_ns + b.exec_ns,
            run_delay_ns: a.run_delay_ns + b.run_delay_ns,
            utime: a.utime + b.utime,
            stime: a.stime + b.stime,
            nonvoluntary: a.nonvoluntary + b.nonvoluntary,
            runs: a.runs + b.runs,
        })
}

impl WeirRun {
    /// weir on `t`'s DUT: one bridge on `cpu` (`workers` 1), or `workers` workers, which
    /// weir pins to the CPUs one by one itself (its supervisor unpinned) — or, with
    /// `share_cpu`, which all run on `cpu` (weir pins nothing when it has fewer CPUs than
    /// workers; its threads inherit the CPU).
    pub(crate) fn start(
        t: &BridgeTopo,
        cpu: Option<usize>,
        busy_poll: bool,
        policy: Option<&std::path::Path>,
        (workers, share_cpu): (usize, bool),
    ) -> Result<WeirRun, String> {
        let mut cfg = BridgeConfig::new(&t.dut_lan, &t.dut_wan);
        cfg.busy_poll = busy_poll;
        let policy = policy
            .map(|p| weir_core::policy::Policy::load(p).map_err(|e| e.to_string()))
            .transpose()?;
        let ready = match (&policy, workers) {
            (Some(p), n) if n > 1 => Some(weir_io::control::ready(
                p,
                n,
                weir_core::Instant(weir_io::clock::monotonic_ns()),
            )?),
            (None, n) if n > 1 => return Err("--workers needs a policy".into()),
            (Some(p), _) => {
                cfg.device = p.build_device(weir_core::Instant::ZERO)?;
                None
            }
            (None, _) => None,
        };
        let before = threads();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (ready_tx, ready_rx) = channel::<Result<i32, String>>();
        let handle = t
            .dut
            .spawn(move || -> Report {
                let fail = |e: String| {
                    let _ = ready_tx.send(Err(e.clone()));
                    Err(e)
                };
                match ready {
                    None => {
                        pin_to(cpu);
                        let mut b = match Bridge::open(cfg) {
                            Ok(b) => b,
                            Err(e) => return fail(e.to_string()),
                        };
                        let _ = ready_tx.send(Ok(gettid()));
                        let r = b.run(&s).map_err(|e| e.to_string())?;
                        serde_json::to_value(&r).map_err(|e| e.to_string())
                    }
                    Some(ready) => {
                        // unpinned: the workers take the CPUs this thread may use
                        pin_to(if share_cpu { cpu } else { None });
                        let w = match Workers::start(WorkersConfig { bridge: cfg, ready }) {
                            Ok(w) => w,
                            Err(e) => return fail(e.to_string()),
                        };
                        let _ = ready_tx.send(Ok(gettid()));
                        w.run(&s).map_err(|e| e.to_string())
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let tid = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "weir did not start".to_string())??;
        let mut tids = vec![tid];
        tids.extend(threads().difference(&before).filter(|&&x| x != tid));
        Ok(WeirRun {
            stop,
            handle: Some(handle),
            tids,
        })
    }

    /// Stop weir; its final report (one bridge's, or the workers' merged).
    pub(crate) fn stop(mut self) -> Report {
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
pub(crate) struct WeirLane {
    rx: u64,
    tx: u64,
    pub(crate) kernel_rx_drops: u64,
    tx_ring_full: u64,
    pool_exhausted: u64,
    truncated: u64,
    dropped: u64,
    shutdown_drops: u64,
    tx_rejected: u64,
}

/// A number of a report (0 when absent).
pub(crate) fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A lane of a final report (`report["outbound"]`).
pub(crate) fn weir_lane(l: &serde_json::Value) -> WeirLane {
    WeirLane {
        rx: n(&l["rx"]["packets"]),
        tx: n(&l["tx"]["packets"]),
        kernel_rx_drops: n(&l["kernel_rx_drops"]),
        tx_ring_full: n(&l["tx_ring_full"]),
        pool_exhausted: n(&l["pool_exhausted"]["packets"]),
        truncated: n(&l["truncated"]["packets"]),
        dropped: n(&l["dropped"]["packets"]),
        shutdown_drops: n(&l["shutdown_drops"]["packets"]),
        tx_rejected: n(&l["tx_rejected"]),
    }
}
