//! DiffServ keys: `[link] role`, `[[meter]]` tables (RFC 2697/2698/4115 meters and their
//! actions per colour), the `meter` key of classes and rules, and the interior router's
//! behaviour-aggregate rule check.

use super::super::raw::{scalar_text, RawLink, RawMeter, RawRule, Src};
use crate::classify::parse_dscp;
use crate::diffserv::{Action, MeterDef, Role};
use crate::meter::fair::{self, Share};
use crate::meter::{ColorMode, MeterSpec};
use crate::units::{self, Limit};
use std::collections::HashMap;
use toml::{Spanned, Value};

/// `[link] role`: `edge` (default) or `interior`.
pub(super) fn compile_role(src: &mut Src<'_>, link: &RawLink) -> Role {
    match link.role.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
        None | Some(("edge", _)) => Role::Edge,
        Some(("interior", _)) => Role::Interior,
        Some((other, span)) => {
            src.err(
                span,
                format!("`role`: '{other}' is not one of edge, interior"),
            );
            Role::Edge
        }
    }
}

/// The `[[meter]]` tables and a name → index map. An interior router may define none.
pub(super) fn compile_meters(
    src: &mut Src<'_>,
    raw: &[Spanned<RawMeter>],
    role: Role,
    ip_mtu: u32,
) -> (Vec<MeterDef>, HashMap<String, usize>) {
    let mut defs = Vec::new();
    let mut index = HashMap::new();
    for m in raw {
        let span = m.span();
        let r = m.get_ref();
        let _ = &r.description;
        let name = r.name.get_ref().clone();
        if role == Role::Interior {
            src.err(
                span.clone(),
                format!(
                    "meter '{name}': an interior router (role = \"interior\") takes the colour \
                     from the DSCP and has no meters; meters belong to role = \"edge\""
                ),
            );
            continue;
        }
        if index.contains_key(&name) {
            src.err(r.name.span(), format!("meter '{name}' is defined twice"));
            continue;
        }
        let Some(spec) = meter_spec(src, r, ip_mtu) else {
            continue;
        };
        let mode = match r.color.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
            None | Some(("blind", _)) => ColorMode::Blind,
            Some(("aware", _)) => ColorMode::Aware,
            Some((other, s)) => {
                src.err(s, format!("`color`: '{other}' is not one of blind, aware"));
                ColorMode::Blind
            }
        };
        let share = share(src, r, &spec);
        let actions = [
            action(src, "green", &r.green),
            action(src, "yellow", &r.yellow),
            action(src, "red", &r.red),
        ];
        index.insert(name.clone(), defs.len());
        defs.push(MeterDef {
            name,
            spec,
            mode,
            share,
            actions,
            line: src.line(span),
        });
    }
    (defs, index)
}

/// A meter's `share` (`aggregate`, the default, or `flow`) and `flows` (the flow table's
/// slots, a power of two; only with `share = "flow"`).
fn share(src: &mut Src<'_>, r: &RawMeter, spec: &MeterSpec) -> Share {
    let name = r.name.get_ref();
    let slots = match &r.flows {
        None => fair::DEFAULT_SLOTS,
        Some(v) => {
            let n = *v.get_ref();
            let max = fair::MAX_SLOTS as i64;
            if n < 1 || n > max || (n as u64).count_ones() != 1 {
                src.err(
                    v.span(),
                    format!(
                        "meter '{name}': `flows` is {n}: expected a power of two from 1 to \
                         {max} (slots of the flow table)"
                    ),
                );
            }
            n.clamp(1, max) as u32
        }
    };
    let flow = match r.share.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("aggregate", _)) => false,
        Some(("flow", s)) => {
            if !Share::supports(spec) {
                src.err(
                    s,
                    format!(
                        "meter '{name}': `share = \"flow\"` needs a trtcm or rfc4115 meter (two \
                         rates to divide among flows); an srtcm's excess bucket is fed by its \
                         committed bucket's overflow"
                    ),
                );
            }
            true
        }
        Some((other, s)) => {
            src.err(
                s,
                format!("meter '{name}': `share`: '{other}' is not one of aggregate, flow"),
            );
            false
        }
    };
    if let (false, Some(v)) = (flow, &r.flows) {
        src.err(
            v.span(),
            format!("meter '{name}': `flows` sizes the flow table of `share = \"flow\"` only"),
        );
    }
    match flow {
        true => Share::Flow { slots },
        false => Share::Aggregate,
    }
}

/// A meter's type and its rates and bursts, checked against the RFC (errors at the key
/// they concern).
fn meter_spec(src: &mut Src<'_>, r: &RawMeter, ip_mtu: u32) -> Option<MeterSpec> {
    let name = r.name.get_ref();
    let kind = r.kind.get_ref().as_str();
    let keys: [(&str, &Option<Spanned<Value>>); 6] = [
        ("cir", &r.cir),
        ("cbs", &r.cbs),
        ("ebs", &r.ebs),
        ("pir", &r.pir),
        ("pbs", &r.pbs),
        ("eir", &r.eir),
    ];
    let wanted: &[&str] = match kind {
        "srtcm" => &["cir", "cbs", "ebs"],
        "trtcm" => &["cir", "cbs", "pir", "pbs"],
        "rfc4115" => &["cir", "cbs", "eir", "ebs"],
        other => {
            src.err(
                r.kind.span(),
                format!(
                    "meter '{name}': `type` '{other}' is not one of srtcm (RFC 2697), trtcm \
                     (RFC 2698), rfc4115"
                ),
            );
            return None;
        }
    };
    let mut ok = true;
    let mut rate = HashMap::new();
    let mut burst = HashMap::new();
    for (key, v) in keys {
        match (v, wanted.contains(&key)) {
            (None, true) => {
                src.err(
                    r.kind.span(),
                    format!(
                        "meter '{name}': a {kind} meter needs `{key}` ({kind}: {})",
                        wanted.join(", ")
                    ),
                );
                ok = false;
            }
            (Some(v), false) => {
                src.err(
                    v.span(),
                    format!(
                        "meter '{name}': `{key}` is not a {kind} key ({kind}: {})",
                        wanted.join(", ")
                    ),
                );
                ok = false;
            }
            (Some(v), true) if key.ends_with("ir") => {
                match super::super::raw::parse_with(src, key, v, units::parse_rate) {
                    Some(x) => {
                        rate.insert(key, x);
                    }
                    None => ok = false,
                }
            }
            (Some(v), true) => match burst_bytes(src, key, v, ip_mtu) {
                Some(x) => {
                    burst.insert(key, x);
                }
                None => ok = false,
            },
            (None, false) => {}
        }
    }
    if !ok {
        return None;
    }
    let spec = match kind {
        "srtcm" => MeterSpec::Srtcm {
            cir: rate["cir"],
            cbs: burst["cbs"],
            ebs: burst["ebs"],
        },
        "trtcm" => MeterSpec::Trtcm {
            cir: rate["cir"],
            cbs: burst["cbs"],
            pir: rate["pir"],
            pbs: burst["pbs"],
        },
        _ => MeterSpec::Rfc4115 {
            cir: rate["cir"],
            cbs: burst["cbs"],
            eir: rate["eir"],
            ebs: burst["ebs"],
        },
    };
    if let Err(e) = spec.validate() {
        // point at the first key the message names, else at the type
        let span = keys
            .iter()
            .filter_map(|(k, v)| Some((e.find(k)?, v.as_ref()?.span())))
            .min_by_key(|(at, _)| *at)
            .map_or(r.kind.span(), |(_, s)| s);
        src.err(span, format!("meter '{name}': {e}"));
        return None;
    }
    Some(spec)
}

/// A burst: bytes (`"15000B"`, `"15kB"`, a bare number) or packets (`"15p"`: that many
/// IP MTUs, `[link] mtu` − 14).
fn burst_bytes(src: &mut Src<'_>, key: &str, v: &Spanned<Value>, ip_mtu: u32) -> Option<u32> {
    let text = scalar_text(v.get_ref());
    let parsed = text.as_deref().map(|t| match units::parse_limit(t) {
        Ok(Limit::Packets(n)) => Ok(n as u64 * ip_mtu as u64),
        Ok(Limit::Bytes(b)) => Ok(b),
        Err(_) => units::parse_size(t).map_err(|e| e.to_string()),
    });
    match parsed {
        Some(Ok(b)) if b <= u32::MAX as u64 => Some(b as u32),
        Some(Ok(b)) => {
            src.err(
                v.span(),
                format!(
                    "`{key}`: {b} bytes is too large; at most {} bytes",
                    u32::MAX
                ),
            );
            None
        }
        Some(Err(e)) => {
            src.err(
                v.span(),
                format!("`{key}`: {e}; a burst is bytes (15000B, 15kB) or packets (15p)"),
            );
            None
        }
        None => {
            src.err(
                v.span(),
                format!(
                    "`{key}`: expected a size or packet count, found {}",
                    v.get_ref().type_str()
                ),
            );
            None
        }
    }
}

/// A colour's action: `keep` (default), `drop`, or a DSCP to write.
fn action(src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>) -> Action {
    let Some(v) = v else { return Action::Keep };
    match scalar_text(v.get_ref()).as_deref() {
        Some("keep") => Action::Keep,
        Some("drop") => Action::Drop,
        Some(t) => match parse_dscp(t) {
            Ok(d) => Action::Mark(d),
            Err(e) => {
                src.err(
                    v.span(),
                    format!("`{key}`: {e}; or keep (leave the DSCP) or drop (police)"),
                );
                Action::Keep
            }
        },
        None => {
            src.err(
                v.span(),
                format!(
                    "`{key}`: expected keep, drop or a DSCP, found {}",
                    v.get_ref().type_str()
                ),
            );
            Action::Keep
        }
    }
}

/// A rule's `mark`: the DSCP (a name or 0-63) its packets get at an edge router.
pub(super) fn rule_mark(src: &mut Src<'_>, v: &Spanned<Value>) -> Option<u8> {
    let found = match scalar_text(v.get_ref()) {
        Some(t) => match parse_dscp(&t) {
            Ok(d) => return Some(d),
            Err(e) => e.to_string(),
        },
        None => format!("found {}", v.get_ref().type_str()),
    };
    src.err(
        v.span(),
        format!("`mark`: expected a DSCP to write (a name such as ef or af11, or 0-63): {found}"),
    );
    None
}

/// A `meter` key of a class or rule: the index of a defined meter.
pub(super) fn meter_ref(
    src: &mut Src<'_>,
    v: &Spanned<String>,
    index: &HashMap<String, usize>,
) -> Option<usize> {
    let name = v.get_ref();
    match index.get(name) {
        Some(&i) => Some(i),
        None => {
            let mut known: Vec<_> = index.keys().map(String::as_str).collect();
            known.sort_unstable();
            let known = if known.is_empty() {
                "none is defined".to_string()
            } else {
                format!("defined: {}", known.join(", "))
            };
            src.err(
                v.span(),
                format!("`meter`: no [[meter]] named '{name}' ({known})"),
            );
            None
        }
    }
}

/// An interior router classifies by DSCP only (behaviour aggregate): a rule's
/// multi-field conditions are errors there.
pub(super) fn check_interior_rule(src: &mut Src<'_>, r: &RawRule) {
    let span = |v: &Option<Spanned<Value>>| v.as_ref().map(Spanned::span);
    let mf = [
        ("src", span(&r.src)),
        ("dst", span(&r.dst)),
        ("proto", span(&r.proto)),
        ("sport", span(&r.sport)),
        ("dport", span(&r.dport)),
        ("port", span(&r.port)),
        ("vlan", span(&r.vlan)),
        ("app", span(&r.app)),
    ];
    let l7 = r
        .l7_values()
        .into_iter()
        .map(|(k, v)| (k.key(), Some(v.span())));
    for (key, span) in mf.into_iter().chain(l7) {
        if let Some(span) = span {
            src.err(
                span,
                format!(
                    "`{key}`: an interior router (role = \"interior\") classifies by `dscp` \
                     only (behaviour aggregate); multi-field rules need role = \"edge\""
                ),
            );
        }
    }
    if let Some(m) = &r.meter {
        src.err(
            m.span(),
            "`meter`: an interior router (role = \"interior\") has no meters",
        );
    }
    if let Some(m) = &r.mark {
        src.err(
            m.span(),
            "`mark`: an interior router (role = \"interior\") keeps the DSCP it is given; \
             marking belongs to role = \"edge\"",
        );
    }
}

/// A meter no class or rule names measures nothing: a warning at its name.
pub(super) fn warn_unused_meters(
    src: &mut Src<'_>,
    raw: &[Spanned<RawMeter>],
    index: &HashMap<String, usize>,
    used: impl Iterator<Item = usize>,
) {
    let used: std::collections::HashSet<usize> = used.collect();
    for m in raw {
        let name = m.get_ref().name.get_ref();
        if index.get(name).is_some_and(|i| !used.contains(i)) {
            src.warn(
                m.get_ref().name.span(),
                format!("meter '{name}' is not used: no class or rule names it in `meter`"),
            );
        }
    }
}
