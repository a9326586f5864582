//! The control channel of a running weir: `weir reload` and `weir emu set` through the
//! statistics socket (answered), SIGHUP (its policy or options read again on a thread of
//! their own, [`crate::control::HupReloads`]; logged).
//!
//! [`Control`] holds the channel and the [`ReloadGate`] (at most [`RELOADS_PER_SECOND`]
//! socket requests a second, more refused unread and counted); [`Control::poll`] takes
//! at most one socket request and one SIGHUP reload a loop turn and hands them to what
//! applies them ([`Apply`]): a bridge ([`BridgeApply`]: its device, one worker's or the
//! only one) or the supervisor of `--workers N` (which hands the policy to every worker).
//! A request is prepared elsewhere (the statistics server's thread, the SIGHUP thread):
//! the loop only swaps it in. [`log_reload`] and [`reload_summary`] make the log line
//! both use.

use super::driver::Driver;
use super::workers::Worker;
use super::{emu_set, EmuSetFn, RELOADS_PER_SECOND};
use crate::control::{HupReloads, Prepared};
use crate::log;
use crate::stats::ControlRequest;
use std::sync::mpsc::Receiver;
use weir_core::meter::token_bucket::TokenBucket;
use weir_core::snapshot::RateMeter;
use weir_core::{Ctx, Duration, Instant};

/// Where control requests come from.
pub(super) struct Control {
    /// Reload requests from `weir reload` (through the statistics socket).
    pub(super) rx: Option<Receiver<ControlRequest>>,
    /// What SIGHUP re-reads (on a thread of its own).
    pub(super) hup: Option<HupReloads>,
    pub(super) gate: ReloadGate,
}

/// What applies the requests [`Control::poll`] takes.
pub(super) trait Apply {
    /// `weir emu set`'s options (`args`), at most as often as `gate` lets: the answer
    /// (a JSON document), logged as the taker logs it.
    fn emu_set(&mut self, args: &[String], gate: &mut ReloadGate, now: Instant) -> String;
    /// Whether `weir reload` requests pass `gate` here (a worker's reloads come from its
    /// supervisor, which limits them), and are logged here (a worker's supervisor logs the
    /// merged answer).
    fn gated(&self) -> bool;
    /// Put a prepared policy (`name`, its `text`) in place: the answer, a JSON document.
    fn reload(
        &mut self,
        name: &str,
        text: &str,
        prepared: Prepared,
        now: Instant,
    ) -> serde_json::Value;
}

impl Control {
    pub(super) fn new(rx: Option<Receiver<ControlRequest>>, hup: Option<HupReloads>) -> Control {
        Control {
            rx,
            hup,
            gate: ReloadGate::new(),
        }
    }

    /// Reload requests: from `weir reload` (answered) and SIGHUP (logged).
    pub(super) fn poll(&mut self, now: Instant, to: &mut impl Apply) {
        if let Some(rx) = &self.rx {
            if let Ok(mut req) = rx.try_recv() {
                if let Some(args) = req.emu_set.take() {
                    req.respond(to.emu_set(&args, &mut self.gate, now));
                    return;
                }
                let gated = to.gated();
                let admitted = match gated {
                    true => self.gate.admit(now),
                    false => Ok(()),
                };
                let answer = match admitted {
                    Ok(()) => {
                        let prepared = std::mem::replace(&mut req.prepared, Err(String::new()));
                        let a = to.reload(&req.name, &req.text, prepared, now);
                        if gated {
                            log_reload("weir reload", &req.name, &a);
                        }
                        a
                    }
                    Err(refusal) => refusal,
                };
                req.respond(answer.to_string());
            }
        }
        let Some(h) = &mut self.hup else {
            return;
        };
        let Some(prepared) = h.poll() else {
            return;
        };
        let name = h.name().to_string();
        let answer = to.reload(&name, "", prepared, now);
        log_reload("SIGHUP", &name, &answer);
    }
}

/// A bridge's device as what applies control requests.
pub(super) struct BridgeApply<'a> {
    pub(super) drv: &'a mut Driver,
    pub(super) worker: &'a mut Option<Worker>,
    pub(super) emu_set: Option<&'a EmuSetFn>,
    /// Reloads refused.
    pub(super) refused: &'a mut u64,
}

impl Apply for BridgeApply<'_> {
    fn emu_set(&mut self, args: &[String], gate: &mut ReloadGate, now: Instant) -> String {
        let answer = match gate.admit(now) {
            Ok(()) => emu_set::apply(&mut self.drv.eng.device, self.emu_set, args),
            Err(refusal) => refusal,
        };
        emu_set::log_answer(args, &answer);
        answer.to_string()
    }

    fn gated(&self) -> bool {
        self.worker.is_none()
    }

    /// Put a prepared policy ([`crate::control`]) in place of the running one, keeping
    /// every packet held (`Device::replace_policy`).
    fn reload(
        &mut self,
        name: &str,
        _text: &str,
        prepared: Prepared,
        now: Instant,
    ) -> serde_json::Value {
        let refused = |me: &mut BridgeApply, errors: String| {
            *me.refused += 1;
            serde_json::json!({ "ok": false, "errors": errors })
        };
        let (cfg, shared) = match prepared {
            Ok(r) => match r.configs.into_iter().next() {
                Some(c) => (c, r.shared),
                None => return refused(self, format!("{name}: no configuration")),
            },
            Err(e) => return refused(self, e),
        };
        let eng = &mut self.drv.eng;
        let started = eng.clock.now();
        let mut cx = Ctx::new(now, &mut eng.pool, &mut eng.rng, &mut eng.dropped);
        let report = match eng.device.replace_policy(cfg, &mut cx) {
            Ok(r) => r,
            Err(e) => return refused(self, format!("{name}: {e}")),
        };
        self.drv.settle_by_dir(|s| &mut s.reload_drops);
        // the new stages count from zero: rates start afresh
        self.drv.out.meter = RateMeter::default();
        self.drv.inb.meter = RateMeter::default();
        let mut report = serde_json::to_value(&report).unwrap_or_default();
        if let Some(w) = self.worker.as_mut() {
            let before = w.wholes();
            w.rebuild(&mut self.drv.eng.device, Some(shared));
            w.unchanged_shared(&before, &mut report);
        }
        // how long forwarding waited for the swap (the policy was prepared elsewhere)
        let applied_ms = (self.drv.eng.clock.now() - started).as_nanos() as f64 / 1e6;
        let summary = reload_summary(&report, applied_ms);
        serde_json::json!({ "ok": true, "report": report, "summary": summary, "applied_ms": applied_ms })
    }
}

/// `weir reload` requests through the statistics socket: at most [`RELOADS_PER_SECOND`]
/// (a token bucket, one byte a request); more are refused unread and counted, so that a
/// flood of them never stalls forwarding, and the refusals logged a line a second at most.
pub(super) struct ReloadGate {
    bucket: TokenBucket,
    pub(super) throttled: u64,
    /// When a refusal was last logged.
    logged: Instant,
}

impl ReloadGate {
    pub(super) fn new() -> ReloadGate {
        ReloadGate {
            // RELOADS_PER_SECOND bytes a second, as many deep
            bucket: TokenBucket::new(
                weir_core::Rate::from_bps(RELOADS_PER_SECOND * 8),
                RELOADS_PER_SECOND as u32,
                Instant::ZERO,
            ),
            throttled: 0,
            logged: Instant::ZERO,
        }
    }

    /// Take a request at `now`, or the answer that refuses it.
    pub(super) fn admit(&mut self, now: Instant) -> Result<(), serde_json::Value> {
        if self.bucket.try_consume(1, now) {
            return Ok(());
        }
        self.throttled += 1;
        if now >= self.logged + Duration::from_secs(1) {
            self.logged = now;
            log::warning(&format!(
                "weir reload: more than {RELOADS_PER_SECOND} requests a second; refused {} so far",
                self.throttled
            ));
        }
        Err(serde_json::json!({ "ok": false, "errors": format!(
            "too many reload requests: at most {RELOADS_PER_SECOND} a second; try again"
        ) }))
    }
}

/// One line for a reload's report (`Device::replace_policy`'s, as JSON; the workers'
/// merged): per direction what became of the held packets and of the classes.
pub(super) fn reload_summary(report: &serde_json::Value, applied_ms: f64) -> String {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let len = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
    let summary = ["outbound", "inbound"]
        .iter()
        .map(|d| {
            let r = &report[*d];
            let mut line = format!(
                "{d}: {} kept, {} reclassified, {} re-emulated, {} dropped",
                n(&r["kept"]),
                n(&r["reclassified"]),
                n(&r["re_emulated"]),
                n(&r["dropped"])
            );
            let (a, x, c) = (
                len(&r["classes_added"]),
                len(&r["classes_removed"]),
                len(&r["classes_changed"]),
            );
            if a + x + c > 0 {
                line += &format!("; classes {a} added, {x} removed, {c} changed");
            }
            line
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!("{summary}; applied in {applied_ms:.1} ms")
}

/// Log a reload's outcome (`answer` as [`Apply::reload`] makes it); `how`: "SIGHUP" or
/// "weir reload".
pub(super) fn log_reload(how: &str, name: &str, answer: &serde_json::Value) {
    match answer["ok"].as_bool() {
        Some(true) => log::info(&format!(
            "{how}: reloaded {name} (generation {}): {}",
            answer["report"]["generation"],
            answer["summary"].as_str().unwrap_or("")
        )),
        _ => log::warning(&format!(
            "{how}: the new policy was refused; the running one stays:\n{}",
            answer["errors"].as_str().unwrap_or("?")
        )),
    }
}
