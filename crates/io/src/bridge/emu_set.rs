//! `weir emu set` in the data path: the options a client sent change the device's emulated
//! links in place (the parsing is `weir emu`'s: the [`EmuSetFn`] it gives the bridge).

use crate::log;
use weir_core::device::Device;
use weir_core::emulate::EmuConfig;
use weir_core::Direction;

/// `weir emu set`: the new configuration of `dir`'s link (`None`: the options do not
/// touch that direction) from its current one and the options, or what is wrong.
pub type EmuSetFn =
    Box<dyn Fn(Direction, &EmuConfig, &[String]) -> Result<Option<EmuConfig>, String> + Send>;

/// The answer to `weir emu set` from a weir that is not a `weir emu`.
pub(super) const NOT_EMU: &str = r#"{"ok": false, "errors": "weir emu set changes a running weir emu; this weir runs a policy: change it with weir reload"}"#;

/// Every emulated link the options touch gets its new configuration, its packets kept
/// with their release times ([`weir_core::emulate::EmuLink::reconfigure`]); all or none.
/// A link whose rate is a managed queue's (`weir emu --aqm`) keeps its rate and queue.
/// The answer is a JSON document, as a reload's; `f` is `None` outside `weir emu`.
pub(super) fn apply(
    device: &mut Device,
    f: Option<&EmuSetFn>,
    args: &[String],
) -> serde_json::Value {
    let refused = |errors: String| serde_json::json!({ "ok": false, "errors": errors });
    let Some(f) = f else {
        return serde_json::from_str(NOT_EMU).unwrap_or_default();
    };
    let mut changes = Vec::new();
    for dir in [Direction::Outbound, Direction::Inbound] {
        let Some(link) = device.emu_link(dir) else {
            continue;
        };
        let old = link.config();
        let new = match f(dir, old, args) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => return refused(e),
        };
        let managed = device.pipeline(dir).is_some_and(|p| p.shaper().is_some());
        if managed
            && (new.rate_bps != old.rate_bps
                || new.capacity != old.capacity
                || new.limits() != old.limits())
        {
            return refused(
                "the link's rate and queue are its managed queue's (--aqm): restart weir emu to change them".into(),
            );
        }
        changes.push((dir, new));
    }
    if changes.is_empty() {
        return refused("no emulated link in the direction asked".into());
    }
    let mut lines = Vec::new();
    let mut links = Vec::new();
    for (dir, cfg) in changes {
        let what = weir_core::emulate::spec::describe(&cfg);
        if let Err(e) = device.reconfigure_emu_link(dir, cfg) {
            return refused(e);
        }
        lines.push(format!("{}: {what}", dir.name()));
        links.push(serde_json::json!({ "direction": dir.name(), "link": what }));
    }
    serde_json::json!({ "ok": true, "summary": lines.join("\n"), "links": links })
}

/// Log what `weir emu set` asked and the answer.
pub(super) fn log_answer(args: &[String], answer: &serde_json::Value) {
    let asked = args.join(" ");
    match answer["ok"].as_bool() {
        Some(true) => log::info(&format!(
            "weir emu set {asked}:\n{}",
            answer["summary"].as_str().unwrap_or("")
        )),
        _ => log::warning(&format!(
            "weir emu set {asked}: refused ({}); the links stay as they were",
            answer["errors"].as_str().unwrap_or("?")
        )),
    }
}
