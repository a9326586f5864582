//! Compile `[[emulate]]`: each profile's keys into an [`EmuConfig`] (rate, schedule or
//! Mahimahi trace, framing, delay and its schedule or trace file, jitter, loss and its
//! schedule or trace file, outages, mm-link's queue; netem's knobs in `netem.rs`), the
//! files a profile names read relative to the policy's directory ([`read_named`]), and the
//! `emulate` references of `[link]` and the rules ([`emulate_profile`]).

use super::super::raw::{parse_direction, parse_mtu, parse_with, RawEmulate, Src};
use super::super::EmuDef;
use super::framing::{compile_framing, FramingKeys};
use super::netem;
use crate::emulate::{self, spec, EmuConfig};
use crate::framing::Framing;
use crate::units::{self, Limit};
use std::collections::HashMap;
use toml::{Spanned, Value};

/// An `emulate` key (`[link]`'s or a rule's): the index of the `[[emulate]]` profile it
/// names; an unknown name is an error.
pub(super) fn emulate_profile(
    src: &mut Src<'_>,
    e: &Spanned<String>,
    emu_index: &HashMap<String, usize>,
) -> Option<usize> {
    let i = emu_index.get(e.get_ref()).copied();
    if i.is_none() {
        src.err(
            e.span(),
            format!(
                "`emulate`: '{}' is not a defined [[emulate]] profile",
                e.get_ref()
            ),
        );
    }
    i
}

/// Compile the `[[emulate]]` profiles; returns them and a name → index map.
pub(super) fn compile_emulators(
    src: &mut Src<'_>,
    raw: &[Spanned<RawEmulate>],
    link_mtu: u32,
) -> (Vec<EmuDef>, HashMap<String, usize>) {
    let mut out = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    for e in raw {
        let span = e.span();
        let e = e.get_ref();
        let _ = &e.description;
        let name = e.name.get_ref().clone();
        if let Some(&first) = index.get(&name) {
            let line = src.line(spans[first].clone());
            src.err(
                e.name.span(),
                format!("duplicate [[emulate]] name '{name}' (first defined at line {line})"),
            );
            continue;
        }
        let mut cfg = EmuConfig {
            mtu: link_mtu,
            ..EmuConfig::default()
        };
        if let Some(v) = &e.rate {
            match v.get_ref() {
                Value::Array(points) => cfg.capacity = rate_schedule(src, v, points),
                _ => cfg.rate_bps = parse_with(src, "rate", v, units::parse_rate),
            }
        }
        if let Some(t) = &e.trace {
            let other = ("rate", e.rate.is_some(), "the link's rate");
            cfg.capacity = file_instead(src, ("trace", t), other, emulate::Capacity::parse_trace);
        }
        let keys = FramingKeys {
            framing: e.framing.as_ref(),
            overhead: e.overhead.as_ref(),
            mpu: e.mpu.as_ref(),
            atm: e.atm.as_ref(),
            ptm: e.ptm.as_ref(),
        };
        let max = EmuConfig::MAX_OVERHEAD;
        cfg.framing = compile_framing(src, keys, -max..=max, Framing::MAX_MPU);
        if let Some(m) = e.mtu.as_ref().and_then(|m| parse_mtu(src, m)) {
            cfg.mtu = m;
        }
        if let Some(v) = &e.delay {
            match v.get_ref() {
                Value::Array(points) => {
                    cfg.path.delay = schedule_points(
                        src,
                        ("delay", r#"["TIME", "DELAY"], e.g. ["30s", "80ms"]"#),
                        v,
                        points,
                        |d| units::parse_duration(d).map_err(|e| e.to_string()),
                    )
                    .map(std::sync::Arc::new)
                }
                _ => {
                    if let Some(ns) = parse_with(src, "delay", v, units::parse_duration) {
                        cfg.delay = crate::time::Duration(ns);
                    }
                }
            }
        }
        if let Some(t) = &e.delay_trace {
            let other = ("delay", e.delay.is_some(), "the delay");
            if let Some(p) = file_instead(src, ("delay_trace", t), other, spec::parse_delay_trace) {
                cfg.path.delay = Some(std::sync::Arc::new(p));
            }
        }
        if let Some(t) = &e.loss_trace {
            let other = ("loss", e.loss.is_some(), "the loss");
            if let Some(p) = file_instead(src, ("loss_trace", t), other, spec::parse_loss_trace) {
                cfg.path.loss = Some(std::sync::Arc::new(p));
            }
        }
        if let Some(v) = &e.outages {
            cfg.path.outages = match v.get_ref() {
                Value::Array(points) => schedule_points(
                    src,
                    ("outages", r#"["START", "END"], e.g. ["10s", "12s"]"#),
                    v,
                    points,
                    |d| units::parse_duration(d).map_err(|e| e.to_string()),
                )
                .map(std::sync::Arc::new)
                .unwrap_or_default(),
                _ => {
                    src.err(
                        v.span(),
                        "`outages`: expected [[\"START\", \"END\"], …], e.g. [[\"10s\", \"12s\"]]",
                    );
                    Default::default()
                }
            };
        }
        let jitter_ns = e
            .jitter
            .as_ref()
            .and_then(|v| parse_with(src, "jitter", v, units::parse_duration));
        match (&e.distribution, jitter_ns) {
            (Some(d), None) if e.jitter.is_none() => {
                src.err(d.span(), "`distribution`: needs a `jitter` width to shape")
            }
            (d, Some(ns)) => {
                let (dist, dspan) = d.as_ref().map_or(("uniform", span.clone()), |d| {
                    (d.get_ref().as_str(), d.span())
                });
                match emulate::spec::parse_jitter(ns, dist) {
                    Ok(j) => cfg.jitter = j,
                    Err(msg) => src.err(dspan, format!("`distribution`: {msg}")),
                }
            }
            _ => {}
        }
        cfg.reorder = e.reorder.unwrap_or(false);
        netem::netem_keys(src, e, jitter_ns, &mut cfg);
        if let Some(v) = &e.loss {
            match v.get_ref() {
                Value::Array(points) => {
                    cfg.path.loss = schedule_points(
                        src,
                        ("loss", r#"["TIME", "LOSS"], e.g. ["10s", "5%"]"#),
                        v,
                        points,
                        emulate::spec::parse_loss,
                    )
                    .map(std::sync::Arc::new)
                }
                _ => {
                    cfg.loss =
                        parse_with(src, "loss", v, emulate::spec::parse_loss).unwrap_or_default()
                }
            }
        }
        if let Some(v) = &e.duplicate {
            cfg.duplicate =
                parse_with(src, "duplicate", v, emulate::spec::parse_prob).unwrap_or(0.0);
        }
        if let Some(v) = &e.corrupt {
            cfg.corrupt = parse_with(src, "corrupt", v, emulate::spec::parse_prob).unwrap_or(0.0);
        }
        if let Some(v) = &e.limit {
            match parse_with(src, "limit", v, units::parse_limit) {
                Some(Limit::Packets(n)) if n > 0 => cfg.limit_packets = Some(n),
                Some(Limit::Bytes(b)) if b > 0 => cfg.limit_bytes = Some(b),
                Some(_) => src.err(v.span(), "`limit`: must be positive"),
                None => {}
            }
        }
        let duration = |src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>, default: u64| {
            v.as_ref()
                .and_then(|v| parse_with(src, key, v, units::parse_duration))
                .map_or(crate::time::Duration(default), crate::time::Duration)
        };
        if let Some(q) = &e.queue {
            match q.get_ref().as_str() {
                "droptail" => cfg.queue_drop = emulate::QueueDrop::Tail,
                "drophead" => cfg.queue_drop = emulate::QueueDrop::Head,
                "codel" => {
                    cfg.codel = Some(emulate::QueueCodel {
                        target: duration(src, "target", &e.target, 5_000_000),
                        interval: duration(src, "interval", &e.interval, 100_000_000),
                        ecn: false,
                    })
                }
                other => src.err(
                    q.span(),
                    format!("`queue`: '{other}' is not one of droptail, drophead, codel"),
                ),
            }
        }
        if cfg.codel.is_none() {
            for (key, v) in [("target", &e.target), ("interval", &e.interval)] {
                if let Some(v) = v {
                    src.err(
                        v.span(),
                        format!("`{key}` is CoDel's: it needs `queue = \"codel\"`"),
                    );
                }
            }
        }
        cfg.once = e.once.as_ref().is_some_and(|v| *v.get_ref());
        let direction = parse_direction(src, e.direction.as_ref(), false);
        if let Err(err) = cfg.validate() {
            src.err(span.clone(), format!("[[emulate]] '{name}': {err}"));
        }
        if cfg.is_transparent() {
            src.warn(
                span.clone(),
                format!("[[emulate]] '{name}' changes nothing (no rate, delay, jitter, loss, duplication or corruption)"),
            );
        }
        index.insert(name.clone(), out.len());
        spans.push(span.clone());
        out.push(EmuDef {
            name,
            cfg,
            direction,
        });
    }
    (out, index)
}

/// `rate = [["0s", "8Mbit"], ["30s", "2Mbit"], …]`: a rate schedule.
fn rate_schedule(
    src: &mut Src<'_>,
    v: &Spanned<Value>,
    points: &[Value],
) -> Option<emulate::Capacity> {
    let out = schedule_points(
        src,
        ("rate", r#"["TIME", "RATE"], e.g. ["30s", "2Mbit"]"#),
        v,
        points,
        |r| units::parse_rate(r).map_err(|e| e.to_string()),
    )?;
    emulate::Capacity::schedule(out)
        .map_err(|e| src.err(v.span(), format!("`rate`: {e}")))
        .ok()
}

/// `key = [["TIME", "VALUE"], …]`: the points of a schedule (or outages), each value read
/// by `value`; errors at the key's position name the point. `(key, shape)`: the key and
/// what a point looks like, for the message.
fn schedule_points<T>(
    src: &mut Src<'_>,
    (key, shape): (&str, &str),
    v: &Spanned<Value>,
    points: &[Value],
    value: impl Fn(&str) -> Result<T, String>,
) -> Option<Vec<(u64, T)>> {
    let mut out = Vec::with_capacity(points.len());
    for p in points {
        let pair = p.as_array().filter(|a| a.len() == 2);
        let parsed = pair.and_then(|a| {
            let t = a[0]
                .as_str()
                .map(|t| units::parse_duration(t).map_err(|e| e.to_string()))?;
            let r = a[1].as_str().map(&value)?;
            Some((t, r))
        });
        match parsed {
            Some((Ok(t), Ok(r))) => out.push((t, r)),
            Some((Err(e), _)) | Some((_, Err(e))) => {
                src.err(v.span(), format!("`{key}` point {p}: {e}"));
                return None;
            }
            None => {
                src.err(v.span(), format!("`{key}` point {p}: expected {shape}"));
                return None;
            }
        }
    }
    Some(out)
}

/// A file a policy names under `key`, read relative to the policy's directory: its path
/// as shown in messages, and its text.
pub(super) fn read_named(
    src: &mut Src<'_>,
    key: &str,
    t: &Spanned<String>,
) -> Option<(String, String)> {
    let Some(dir) = src.dir else {
        src.err(
            t.span(),
            format!("`{key}`: this policy came from no file, so '{}' cannot be read (give the policy as a file)", t.get_ref()),
        );
        return None;
    };
    let path = dir.join(t.get_ref());
    match std::fs::read_to_string(&path) {
        Ok(text) => Some((path.display().to_string(), text)),
        Err(e) => {
            src.err(
                t.span(),
                format!("`{key}`: cannot read {}: {e}", path.display()),
            );
            None
        }
    }
}

/// `key = "FILE"`, read relative to the policy's directory and parsed by `parse` (errors
/// name the key, the file and its line).
fn read_points<T>(
    src: &mut Src<'_>,
    key: &str,
    t: &Spanned<String>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    let (path, text) = read_named(src, key, t)?;
    parse(&text)
        .map_err(|e| src.err(t.span(), format!("`{key}` {path}: {e}")))
        .ok()
}

/// A file key that sets what another key sets (`trace` the rate, `delay_trace` the
/// delay, `loss_trace` the loss): refused beside that key (`other`: its name, whether it
/// is given, what both set), else [`read_points`].
fn file_instead<T>(
    src: &mut Src<'_>,
    (key, t): (&str, &Spanned<String>),
    (other, given, what): (&str, bool, &str),
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    if given {
        src.err(
            t.span(),
            format!("`{key}` and `{other}` both set {what}: give one"),
        );
        return None;
    }
    read_points(src, key, t, parse)
}
