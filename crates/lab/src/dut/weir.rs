//! weir as the device under test: its bridge ([`weir_io::bridge::Bridge`]) on a thread in
//! the DUT namespace ([`BridgeThread`], also what the testbed's WAN stage and the fidelity
//! lab run), with the policy under a technique preset and one pipeline per direction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use weir_core::policy::{MssCap, Policy, Technique};
use weir_core::{Direction, Instant};
use weir_io::bridge::{Bridge, BridgeConfig, BridgeReport};

use super::{refuse_if_bridged, DutSetup, DutSpec, RunningDut, State};
use crate::sys::pin_to_cpu;
use crate::topo::Netns;
use crate::{Error, Result};

/// Longest wait for weir's bridge to open its rings.
const WEIR_START_TIMEOUT: Duration = Duration::from_secs(10);

/// weir's bridge running on a thread inside a namespace: what the `weir:*` DUTs, the
/// testbed's WAN stage and the fidelity lab run. Dropping it stops and joins the thread.
pub struct BridgeThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::result::Result<BridgeReport, String>>>,
}

impl BridgeThread {
    /// Open `cfg` on a new thread in `ns` (pinned to `cpu` if given) and wait up to
    /// `timeout` until its rings are open. The error says why it could not open, or that it
    /// did not in time (the thread is then stopped when the error's value is dropped).
    pub fn start(
        ns: &Netns,
        cfg: BridgeConfig,
        cpu: Option<usize>,
        timeout: Duration,
    ) -> std::result::Result<BridgeThread, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let handle = ns
            .spawn(move || {
                if let Some(c) = cpu {
                    let _ = pin_to_cpu(c);
                }
                let mut b = match Bridge::open(cfg) {
                    Ok(b) => b,
                    Err(e) => {
                        let msg = e.to_string();
                        let _ = ready_tx.send(Err(msg.clone()));
                        return Err(msg);
                    }
                };
                let _ = ready_tx.send(Ok(()));
                b.run(&s).map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?;
        // from here on, Drop stops the thread
        let t = BridgeThread {
            stop,
            handle: Some(handle),
        };
        match ready_rx.recv_timeout(timeout) {
            Ok(Ok(())) => Ok(t),
            Ok(Err(e)) => Err(format!("cannot open the bridge: {e}")),
            Err(_) => Err(format!("the bridge did not start within {timeout:?}")),
        }
    }

    /// Whether the bridge is still running (it stops on its own only on an error).
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    /// Stop the bridge and join its thread: its report, or its error (a panic included);
    /// `None` once stopped.
    pub fn stop(&mut self) -> Option<std::result::Result<BridgeReport, String>> {
        self.stop.store(true, Ordering::SeqCst);
        let h = self.handle.take()?;
        Some(
            h.join()
                .unwrap_or_else(|_| Err("weir bridge thread panicked".into())),
        )
    }
}

impl Drop for BridgeThread {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) fn start<'a>(
    t: Technique,
    mss: Option<u16>,
    setup: &DutSetup<'a, '_>,
) -> Result<RunningDut<'a>> {
    let p = setup.policy.with_technique(t);
    let p = match mss {
        Some(m) => p.with_mss(MssCap::Bytes(m)),
        None => p,
    };
    start_policy(DutSpec::Weir(t, mss).name(), p, mss, setup)
}

/// weir's bridge enforcing `p` as it is, reported as `spec` (`mss`: the clamp a preset
/// added, for the description).
pub(super) fn start_policy<'a>(
    spec: String,
    p: Policy,
    mss: Option<u16>,
    setup: &DutSetup<'a, '_>,
) -> Result<RunningDut<'a>> {
    let place = setup.place;
    refuse_if_bridged(setup, &spec)?;
    let mut cfg = bridge_config(&p, place.lan, place.wan)
        .map_err(|e| Error::Invalid(format!("{spec}: policy {}: {e}", p.file)))?;
    cfg.busy_poll = setup.busy_poll;
    cfg.stats_socket = None;
    let what = |dir| match cfg.device.pipeline(dir) {
        None => "forwarded untouched",
        Some(p) => match (p.shaper().is_some(), p.emulator().is_some()) {
            (true, true) => "shaped and emulated",
            (true, false) => "shaped",
            _ => "emulated",
        },
    };
    let description = format!(
        "weir bridge {lan} <-> {wan} in netns {ns}: technique {tech}{clamp}, seed {seed}, busy_poll {bp}, \
         offloads off on both ports; outbound {o}, inbound {i}; policy {file}:\n{desc}",
        lan = place.lan,
        wan = place.wan,
        ns = place.ns.name(),
        tech = p.technique.name(),
        clamp = mss.map_or_else(String::new, |m| format!(", every TCP connection's MSS clamped to {m}")),
        seed = p.seed,
        bp = setup.busy_poll,
        o = what(Direction::Outbound),
        i = what(Direction::Inbound),
        file = p.file,
        desc = p.describe().trim_end(),
    );
    let bridge = BridgeThread::start(place.ns, cfg, None, WEIR_START_TIMEOUT)
        .map_err(|e| Error::Invalid(format!("{spec}: {e}")))?;
    Ok(RunningDut {
        place,
        spec,
        description,
        state: State::Weir(bridge),
    })
}

/// A bridge between `lan` and `wan` that enforces `policy` in both directions (its
/// `Device`: one pipeline per direction, none where the policy leaves a direction alone),
/// with the policy's seed.
pub fn bridge_config(
    policy: &Policy,
    lan: &str,
    wan: &str,
) -> std::result::Result<BridgeConfig, String> {
    let mut cfg = BridgeConfig::new(lan, wan);
    cfg.device = policy.build_device(Instant::ZERO)?;
    cfg.seed = policy.seed;
    Ok(cfg)
}

/// Stops the bridge: its report as JSON (problems into `errors`).
pub(crate) fn stop(b: &mut BridgeThread, errors: &mut Vec<String>) -> Value {
    match b.stop() {
        Some(Ok(report)) => serde_json::to_value(&report).unwrap_or_else(|e| {
            errors.push(format!("cannot serialise the bridge report: {e}"));
            Value::Null
        }),
        Some(Err(e)) => {
            errors.push(format!("weir bridge: {e}"));
            Value::Null
        }
        None => Value::Null,
    }
}
