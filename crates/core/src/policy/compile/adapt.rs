//! `[adapt]`: an adaptive controller for the shaped direction — seed 003's Postgate
//! (`mode = "postgate"`: one probed router, the line rate, `p`, `delta`, the initial
//! weights) or the delay-based autorate (`mode = "autorate"`: several reflectors, the
//! greatest, steady-state and least rates, the delay threshold) — with the probes'
//! addresses, interval and timeout.

use std::net::Ipv4Addr;

use super::super::raw::{parse_with, RawAdapt, Src};
use super::super::{AdaptDef, AdaptMode, ClassDef, Shapes};
use crate::adapt::autorate::AutorateConfig;
use crate::adapt::postgate::PostgateConfig;
use crate::pool::Direction;
use crate::time::Duration;
use crate::units::{self, Share};
use toml::{Spanned, Value};

/// Probe interval (per target) and reply timeout when not written.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_millis(20);
pub(crate) const DEFAULT_AUTORATE_INTERVAL: Duration = Duration::from_millis(300);
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// The autorate's least rate when `floor` is not written: this share of the line.
const DEFAULT_AUTORATE_FLOOR: f64 = 0.1;

type Span = std::ops::Range<usize>;

/// Compile `[adapt]` against the compiled classes (`classes[0]` is the link); `None` on
/// an error (reported) or without the table.
pub(super) fn compile_adapt(
    src: &mut Src<'_>,
    raw: Option<&Spanned<RawAdapt>>,
    (link_rate, mtu, shapes): (u64, u32, Shapes),
    classes: &[ClassDef],
) -> Option<AdaptDef> {
    let table = raw?;
    let a = table.get_ref();
    let errors = src.errors.len();
    let autorate = match a.mode.get_ref().as_str() {
        "postgate" => false,
        "autorate" => true,
        other => {
            src.err(
                a.mode.span(),
                format!("`mode`: '{other}' is not one of postgate, autorate"),
            );
            return None;
        }
    };
    // keys of the other mode
    let foreign: Vec<(&str, Option<Span>)> = if autorate {
        vec![
            ("target", a.target.as_ref().map(|v| v.span())),
            ("p", a.p.as_ref().map(|v| v.span())),
            ("delta", a.delta.as_ref().map(|v| v.span())),
            ("weights", a.weights.as_ref().map(|v| v.span())),
        ]
    } else {
        vec![
            ("reflectors", a.reflectors.as_ref().map(|v| v.span())),
            ("base", a.base.as_ref().map(|v| v.span())),
            ("pingers", a.pingers.as_ref().map(|v| v.span())),
            (
                "delay_threshold",
                a.delay_threshold.as_ref().map(|v| v.span()),
            ),
            ("high_load", a.high_load.as_ref().map(|v| v.span())),
        ]
    };
    let (mode, other) = if autorate {
        ("autorate", "postgate")
    } else {
        ("postgate", "autorate")
    };
    for (key, span) in foreign {
        if let Some(span) = span {
            src.err(
                span,
                format!("`{key}` belongs to mode = \"{other}\", not \"{mode}\""),
            );
        }
    }
    let shaped = match shapes {
        Shapes::Outbound => Some(Direction::Outbound),
        Shapes::Inbound => Some(Direction::Inbound),
        other => {
            src.err(
                table.span(),
                format!(
                    "[adapt] shapes the one direction its probes' replies come back in: set [link] direction to \"inbound\" or \"outbound\" (it is \"{}\")",
                    other.name()
                ),
            );
            None
        }
    };
    let targets: Option<Vec<Ipv4Addr>> = if autorate {
        reflectors(src, a, table.span())
    } else {
        address(src, "target", a.target.as_ref(), table.span()).map(|t| vec![t])
    };
    let source = address(src, "source", a.source.as_ref(), table.span());
    let gateway = a
        .gateway
        .as_ref()
        .and_then(|g| address(src, "gateway", Some(g), table.span()));
    if let (Some(ts), Some(s)) = (&targets, source) {
        if ts.contains(&s) || gateway == Some(s) {
            src.err(
                a.source.as_ref().map_or(table.span(), |v| v.span()),
                "`source` must differ from every target and the gateway",
            );
        }
    }
    let line_bps = match &a.line {
        None => link_rate,
        Some(v) => parse_with(src, "line", v, units::parse_rate).unwrap_or(link_rate),
    };
    let interval_default = if autorate {
        DEFAULT_AUTORATE_INTERVAL
    } else {
        DEFAULT_INTERVAL
    };
    let interval = duration(src, "interval", &a.interval, interval_default);
    let timeout = duration(src, "timeout", &a.timeout, DEFAULT_TIMEOUT);
    let floor_default = if autorate {
        DEFAULT_AUTORATE_FLOOR
    } else {
        PostgateConfig::paper(line_bps, Vec::new()).floor
    };
    let floor = a
        .floor
        .as_ref()
        .and_then(|v| share(src, "floor", v, line_bps))
        .unwrap_or(floor_default);
    let leaves: Vec<usize> = (1..classes.len()).filter(|&i| classes[i].leaf).collect();
    let mode = if autorate {
        let n = targets.as_ref().map_or(1, Vec::len);
        let mut cfg = AutorateConfig::new(1, 1, line_bps, n);
        cfg.min_bps = ((floor * line_bps as f64).round() as u64).max(1);
        cfg.base_bps = a
            .base
            .as_ref()
            .and_then(|v| share(src, "base", v, line_bps))
            .map_or(line_bps, |f| (f * line_bps as f64).round() as u64);
        cfg.max_frame_bits = (mtu as u64 + 14) * 8;
        if let Some(p) = &a.pingers {
            match usize::try_from(*p.get_ref()) {
                Ok(x) if (1..=n).contains(&x) => cfg.pingers = x,
                _ => src.err(
                    p.span(),
                    format!(
                        "`pingers`: {} is outside 1..={n} (the reflectors listed)",
                        p.get_ref()
                    ),
                ),
            }
        }
        // the thresholds of the largest increase and the largest cut keep
        // cake-autorate's ratios to it (10 and 60 ms to 30 ms)
        if let Some(d) = duration(src, "delay_threshold", &a.delay_threshold, cfg.delay_thr) {
            cfg.delay_thr = d;
            cfg.up_thr = Duration(d.as_nanos() / 3);
            cfg.down_thr = Duration(d.as_nanos() * 2);
        }
        if let Some(h) = &a.high_load {
            let x = *h.get_ref();
            if x > 0.0 && x < 1.0 {
                cfg.high_load = x;
            } else {
                src.err(h.span(), format!("`high_load`: {x} is not in (0, 1)"));
            }
        }
        AdaptMode::Autorate(cfg)
    } else {
        let mut cfg = PostgateConfig::paper(line_bps, Vec::new());
        cfg.mtu = mtu;
        cfg.floor = floor;
        if let Some(p) = &a.p {
            match u32::try_from(*p.get_ref()) {
                Ok(x) if (1..=10_000).contains(&x) => cfg.p = x,
                _ => src.err(
                    p.span(),
                    format!("`p`: {} is outside 1..=10000", p.get_ref()),
                ),
            }
        }
        if let Some(d) = duration(src, "delta", &a.delta, cfg.delta) {
            cfg.delta = d;
        }
        cfg.weights = leaves
            .iter()
            .map(|&i| classes[i].rate as f64 / line_bps as f64)
            .collect();
        if let Some(w) = &a.weights {
            weights(src, w, classes, &leaves, &mut cfg.weights);
        }
        AdaptMode::Postgate(cfg)
    };
    if let (Some(i), Some(t), Some(v)) = (interval, timeout, &a.timeout) {
        if t <= i {
            src.err(
                v.span(),
                format!("`timeout` {t} must be longer than the probe `interval` {i}"),
            );
        }
    }
    if src.errors.len() > errors {
        return None;
    }
    let checked = match &mode {
        AdaptMode::Postgate(c) => c.validate(),
        AdaptMode::Autorate(c) => c.validate(),
    };
    if let Err(e) = checked {
        src.err(table.span(), e);
        return None;
    }
    Some(AdaptDef {
        targets: targets?,
        gateway,
        source: source?,
        interval: interval?,
        timeout: timeout?,
        shaped: shaped?,
        classes: leaves,
        mode,
    })
}

/// A duration key: `default` when absent; above 0.
fn duration(
    src: &mut Src<'_>,
    key: &str,
    v: &Option<Spanned<Value>>,
    default: Duration,
) -> Option<Duration> {
    match v {
        None => Some(default),
        Some(v) => match parse_with(src, key, v, units::parse_duration) {
            Some(0) => {
                src.err(v.span(), format!("`{key}`: must be above 0"));
                None
            }
            ns => ns.map(Duration),
        },
    }
}

/// A rate or percentage of the line, as a fraction of it in (0, 1].
fn share(src: &mut Src<'_>, key: &str, v: &Spanned<Value>, line_bps: u64) -> Option<f64> {
    match parse_with(src, key, v, units::parse_share)? {
        Share::Percent(p) => Some(p / 100.0),
        Share::Bps(b) if b > 0 && b <= line_bps => Some(b as f64 / line_bps as f64),
        Share::Bps(b) => {
            src.err(
                v.span(),
                format!(
                    "`{key}`: {} is not within the line's {}",
                    units::fmt_rate(b),
                    units::fmt_rate(line_bps)
                ),
            );
            None
        }
    }
}

/// `reflectors = ["a", "b", …]`: at least one, distinct host addresses.
fn reflectors(src: &mut Src<'_>, a: &RawAdapt, table: Span) -> Option<Vec<Ipv4Addr>> {
    let Some(list) = &a.reflectors else {
        src.err(
            table,
            "[adapt] mode = \"autorate\" needs `reflectors`, a list of IPv4 addresses to probe",
        );
        return None;
    };
    if list.get_ref().is_empty() {
        src.err(list.span(), "`reflectors`: list at least one address");
        return None;
    }
    let mut out = Vec::new();
    for r in list.get_ref() {
        let ip = address(src, "reflectors", Some(r), r.span())?;
        if out.contains(&ip) {
            src.err(r.span(), format!("`reflectors`: {ip} is listed twice"));
            return None;
        }
        out.push(ip);
    }
    Some(out)
}

fn address(
    src: &mut Src<'_>,
    key: &str,
    v: Option<&Spanned<String>>,
    table: Span,
) -> Option<Ipv4Addr> {
    let Some(v) = v else {
        src.err(table, format!("[adapt] needs `{key}`, an IPv4 address"));
        return None;
    };
    match v.get_ref().parse::<Ipv4Addr>() {
        Ok(a) if a.is_unspecified() || a.is_broadcast() || a.is_multicast() => {
            src.err(v.span(), format!("`{key}`: {a} is not a host's address"));
            None
        }
        Ok(a) => Some(a),
        Err(_) => {
            src.err(
                v.span(),
                format!("`{key}`: '{}' is not an IPv4 address", v.get_ref()),
            );
            None
        }
    }
}

/// `weights = { class = w, … }`: φ_0 of leaf classes (numbers > 0); a leaf not named
/// keeps its default (its rate as a fraction of the line).
fn weights(
    src: &mut Src<'_>,
    v: &Spanned<Value>,
    classes: &[ClassDef],
    leaves: &[usize],
    out: &mut [f64],
) {
    let Some(table) = v.get_ref().as_table() else {
        src.err(v.span(), "`weights`: expected a table of class = weight");
        return;
    };
    for (name, w) in table {
        let Some(k) = leaves.iter().position(|&i| classes[i].name == *name) else {
            let what = if classes.iter().any(|c| c.name == *name) {
                "is not a leaf class"
            } else {
                "names no class"
            };
            src.err(v.span(), format!("`weights`: '{name}' {what}"));
            continue;
        };
        match w.as_float().or(w.as_integer().map(|i| i as f64)) {
            Some(x) if x > 0.0 && x.is_finite() => out[k] = x,
            _ => src.err(
                v.span(),
                format!("`weights`: '{name}' needs a number above 0, found {w}"),
            ),
        }
    }
}
