//! `[adapt]`: an adaptive controller for the shaped direction (seed 003's Postgate): the
//! probe's target and source addresses, its interval and timeout, the line rate, and
//! the controller's parameters and initial weights.

use std::net::Ipv4Addr;

use super::super::raw::{parse_with, RawAdapt, Src};
use super::super::{AdaptDef, ClassDef, Shapes};
use crate::adapt::postgate::PostgateConfig;
use crate::pool::Direction;
use crate::time::Duration;
use crate::units::{self, Share};
use toml::{Spanned, Value};

/// Probe interval and reply timeout when not written.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_millis(20);
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

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
    match a.mode.get_ref().as_str() {
        "postgate" => {}
        other => src.err(
            a.mode.span(),
            format!("`mode`: '{other}' is not one of postgate"),
        ),
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
    let target = address(src, "target", &a.target, table.span());
    let source = address(src, "source", &a.source, table.span());
    if let (Some(t), Some(s)) = (target, source) {
        if t == s {
            src.err(
                a.source.as_ref().map_or(table.span(), |v| v.span()),
                "`source` must differ from `target`",
            );
        }
    }
    let line_bps = match &a.line {
        None => link_rate,
        Some(v) => parse_with(src, "line", v, units::parse_rate).unwrap_or(link_rate),
    };
    let duration = |src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>, default| match v {
        None => Some(default),
        Some(v) => match parse_with(src, key, v, units::parse_duration) {
            Some(0) => {
                src.err(v.span(), format!("`{key}`: must be above 0"));
                None
            }
            ns => ns.map(Duration),
        },
    };
    let interval = duration(src, "interval", &a.interval, DEFAULT_INTERVAL);
    let timeout = duration(src, "timeout", &a.timeout, DEFAULT_TIMEOUT);
    if let (Some(i), Some(t), Some(v)) = (interval, timeout, &a.timeout) {
        if t <= i {
            src.err(
                v.span(),
                format!("`timeout` {t} must be longer than the probe `interval` {i}"),
            );
        }
    }
    let leaves: Vec<usize> = (1..classes.len()).filter(|&i| classes[i].leaf).collect();
    let mut cfg = PostgateConfig::paper(line_bps, Vec::new());
    cfg.mtu = mtu;
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
    if let Some(v) = &a.floor {
        match parse_with(src, "floor", v, units::parse_share) {
            Some(Share::Percent(p)) => cfg.floor = p / 100.0,
            Some(Share::Bps(b)) if b > 0 && b <= line_bps => cfg.floor = b as f64 / line_bps as f64,
            Some(Share::Bps(b)) => src.err(
                v.span(),
                format!(
                    "`floor`: {} is not within the line's {}",
                    units::fmt_rate(b),
                    units::fmt_rate(line_bps)
                ),
            ),
            None => {}
        }
    }
    cfg.weights = leaves
        .iter()
        .map(|&i| classes[i].rate as f64 / line_bps as f64)
        .collect();
    if let Some(w) = &a.weights {
        weights(src, w, classes, &leaves, &mut cfg.weights);
    }
    if src.errors.len() > errors {
        return None;
    }
    if let Err(e) = cfg.validate() {
        src.err(table.span(), e);
        return None;
    }
    Some(AdaptDef {
        target: target?,
        source: source?,
        interval: interval?,
        timeout: timeout?,
        shaped: shaped?,
        classes: leaves,
        postgate: cfg,
    })
}

fn address(
    src: &mut Src<'_>,
    key: &str,
    v: &Option<Spanned<String>>,
    table: std::ops::Range<usize>,
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
