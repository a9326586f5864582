//! weir as the DUT: a `Bridge` run on its own thread for one trial (`WeirRun`), and its
//! per-lane counters as recorded (`WeirLane`).

use crate::sys::{gettid, pin_to};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use weir_io::bridge::{Bridge, BridgeConfig, BridgeReport, LaneStats};
use weir_lab::topo::BridgeTopo;

pub(crate) struct WeirRun {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<BridgeReport, String>>>,
    pub(crate) tid: i32,
}

impl WeirRun {
    pub(crate) fn start(
        t: &BridgeTopo,
        cpu: Option<usize>,
        busy_poll: bool,
        policy: Option<&std::path::Path>,
    ) -> Result<WeirRun, String> {
        let mut cfg = BridgeConfig::new(&t.dut_lan, &t.dut_wan);
        cfg.busy_poll = busy_poll;
        if let Some(p) = policy {
            let p = weir_core::policy::Policy::load(p).map_err(|e| e.to_string())?;
            cfg.device = p.build_device(weir_core::Instant::ZERO)?;
        }
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

    pub(crate) fn stop(mut self) -> Result<BridgeReport, String> {
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

pub(crate) fn weir_lane(l: &LaneStats) -> WeirLane {
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
