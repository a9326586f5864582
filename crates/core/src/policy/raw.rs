//! The TOML side of a policy: the file's tables as serde reads them (`Raw*`, unknown keys
//! refused), positions for messages ([`Src`]: `file:line:col` from a byte span), and the
//! parsers of single keys and values that record an error where they fail (rates and
//! sizes through [`crate::units`], lists, port sets, `mtu`, `direction`, `red`).

use super::{ColorRedSpec, PolicyError, PolicyErrors, RedSpec, Shapes};
use crate::classify::PortSet;
use crate::units::{self, Limit};
use serde::Deserialize;
use std::fmt;
use toml::{Spanned, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub(super) link: Spanned<RawLink>,
    #[serde(default, rename = "class")]
    pub(super) classes: Vec<Spanned<RawClass>>,
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<Spanned<RawRule>>,
    #[serde(default, rename = "emulate")]
    pub(super) emulators: Vec<Spanned<RawEmulate>>,
    #[serde(default, rename = "meter")]
    pub(super) meters: Vec<Spanned<RawMeter>>,
    pub(super) adapt: Option<Spanned<RawAdapt>>,
    pub(super) subscribers: Option<Spanned<RawSubscribers>>,
}

/// `[subscribers]`: circuits and their node tree from a subscriber table (LibreQoS's
/// `ShapedDevices.csv` and `network.json`), read relative to the policy's directory.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubscribers {
    pub(super) shaped_devices: Spanned<String>,
    pub(super) network: Option<Spanned<String>>,
    /// The class the table's tree hangs from (default: the link).
    pub(super) parent: Option<Spanned<String>>,
    pub(super) description: Option<String>,
}

/// `[adapt]`: an adaptive controller (Postgate) and its probe.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdapt {
    pub(super) mode: Spanned<String>,
    pub(super) target: Option<Spanned<String>>,
    pub(super) reflectors: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) gateway: Option<Spanned<String>>,
    pub(super) source: Option<Spanned<String>>,
    pub(super) line: Option<Spanned<Value>>,
    pub(super) base: Option<Spanned<Value>>,
    pub(super) pingers: Option<Spanned<i64>>,
    pub(super) delay_threshold: Option<Spanned<Value>>,
    pub(super) high_load: Option<Spanned<f64>>,
    pub(super) interval: Option<Spanned<Value>>,
    pub(super) timeout: Option<Spanned<Value>>,
    pub(super) p: Option<Spanned<i64>>,
    pub(super) delta: Option<Spanned<Value>>,
    pub(super) floor: Option<Spanned<Value>>,
    pub(super) weights: Option<Spanned<Value>>,
    pub(super) description: Option<String>,
}

/// A `[[meter]]`: a DiffServ token-bucket meter and its actions per colour.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMeter {
    pub(super) name: Spanned<String>,
    #[serde(rename = "type")]
    pub(super) kind: Spanned<String>,
    pub(super) cir: Option<Spanned<Value>>,
    pub(super) cbs: Option<Spanned<Value>>,
    pub(super) ebs: Option<Spanned<Value>>,
    pub(super) pir: Option<Spanned<Value>>,
    pub(super) pbs: Option<Spanned<Value>>,
    pub(super) eir: Option<Spanned<Value>>,
    #[serde(alias = "colour")]
    pub(super) color: Option<Spanned<String>>,
    pub(super) share: Option<Spanned<String>>,
    pub(super) flows: Option<Spanned<i64>>,
    pub(super) green: Option<Spanned<Value>>,
    pub(super) yellow: Option<Spanned<Value>>,
    pub(super) red: Option<Spanned<Value>>,
    pub(super) description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmulate {
    pub(super) name: Spanned<String>,
    pub(super) rate: Option<Spanned<Value>>,
    pub(super) overhead: Option<Spanned<i64>>,
    pub(super) mpu: Option<Spanned<i64>>,
    pub(super) atm: Option<Spanned<bool>>,
    pub(super) ptm: Option<Spanned<bool>>,
    pub(super) framing: Option<Spanned<String>>,
    pub(super) mtu: Option<Spanned<i64>>,
    pub(super) delay: Option<Spanned<Value>>,
    pub(super) jitter: Option<Spanned<Value>>,
    pub(super) distribution: Option<Spanned<String>>,
    pub(super) reorder: Option<bool>,
    pub(super) loss: Option<Spanned<Value>>,
    pub(super) duplicate: Option<Spanned<Value>>,
    pub(super) corrupt: Option<Spanned<Value>>,
    pub(super) limit: Option<Spanned<Value>>,
    pub(super) direction: Option<Spanned<String>>,
    pub(super) trace: Option<Spanned<String>>,
    // netem's knobs (docs/emulator.md)
    pub(super) jitter_correlation: Option<Spanned<Value>>,
    pub(super) distribution_table: Option<Spanned<String>>,
    pub(super) duplicate_correlation: Option<Spanned<Value>>,
    pub(super) corrupt_correlation: Option<Spanned<Value>>,
    pub(super) reorder_probability: Option<Spanned<Value>>,
    pub(super) reorder_correlation: Option<Spanned<Value>>,
    pub(super) reorder_gap: Option<Spanned<i64>>,
    pub(super) slot: Option<Spanned<Vec<Spanned<Value>>>>,
    pub(super) slot_packets: Option<Spanned<i64>>,
    pub(super) slot_bytes: Option<Spanned<Value>>,
    pub(super) ecn: Option<Spanned<bool>>,
    pub(super) limit_held: Option<Spanned<i64>>,
    pub(super) cell_size: Option<Spanned<i64>>,
    pub(super) cell_overhead: Option<Spanned<i64>>,
    // mm-link's
    pub(super) queue: Option<Spanned<String>>,
    pub(super) once: Option<Spanned<bool>>,
    pub(super) target: Option<Spanned<Value>>,
    pub(super) interval: Option<Spanned<Value>>,
    // time-varying paths
    pub(super) outages: Option<Spanned<Value>>,
    pub(super) delay_trace: Option<Spanned<String>>,
    pub(super) loss_trace: Option<Spanned<String>>,
    pub(super) description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLink {
    pub(super) rate: Spanned<Value>,
    pub(super) inbound_rate: Option<Spanned<Value>>,
    pub(super) overhead: Option<Spanned<i64>>,
    pub(super) mpu: Option<Spanned<i64>>,
    pub(super) atm: Option<Spanned<bool>>,
    pub(super) ptm: Option<Spanned<bool>>,
    pub(super) framing: Option<Spanned<String>>,
    pub(super) mtu: Option<Spanned<i64>>,
    pub(super) technique: Option<Spanned<String>>,
    pub(super) default: Option<Spanned<String>>,
    pub(super) direction: Option<Spanned<String>>,
    pub(super) emulate: Option<Spanned<String>>,
    pub(super) seed: Option<Spanned<i64>>,
    pub(super) role: Option<Spanned<String>>,
    pub(super) super_packets: Option<Spanned<String>>,
    pub(super) description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClass {
    pub(super) name: Spanned<String>,
    pub(super) parent: Option<Spanned<String>>,
    pub(super) rate: Spanned<Value>,
    pub(super) ceil: Option<Spanned<Value>>,
    pub(super) inbound_rate: Option<Spanned<Value>>,
    pub(super) inbound_ceil: Option<Spanned<Value>>,
    pub(super) prio: Option<Spanned<i64>>,
    pub(super) quantum: Option<Spanned<Value>>,
    pub(super) burst: Option<Spanned<Value>>,
    pub(super) cburst: Option<Spanned<Value>>,
    pub(super) queue: Option<Spanned<String>>,
    pub(super) limit: Option<Spanned<Value>>,
    pub(super) red: Option<Spanned<Value>>,
    pub(super) aqm: Option<Spanned<String>>,
    pub(super) target: Option<Spanned<Value>>,
    pub(super) interval: Option<Spanned<Value>>,
    pub(super) ecn: Option<Spanned<Value>>,
    pub(super) isolate: Option<Spanned<String>>,
    pub(super) ack_filter: Option<Spanned<Value>>,
    pub(super) session: Option<Spanned<RawSession>>,
    pub(super) mss: Option<Spanned<Value>>,
    pub(super) tcr: Option<Spanned<Value>>,
    pub(super) max_sessions: Option<Spanned<i64>>,
    pub(super) admission: Option<Spanned<String>>,
    pub(super) session_idle: Option<Spanned<Value>>,
    pub(super) meter: Option<Spanned<String>>,
    pub(super) description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSession {
    pub(super) guarantee: Option<Spanned<Value>>,
    pub(super) ceil: Option<Spanned<Value>>,
    pub(super) burst: Option<Spanned<Value>>,
    pub(super) buckets: Option<Spanned<i64>>,
    pub(super) limit: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRed {
    min: Option<Value>,
    max: Option<Value>,
    max_p: Option<f64>,
    wq: Option<f64>,
    gentle: Option<bool>,
    average: Option<String>,
    green: Option<RawDropProfile>,
    yellow: Option<RawDropProfile>,
    red: Option<RawDropProfile>,
}

/// One colour's drop profile in a three-colour `red` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDropProfile {
    min: Value,
    max: Value,
    max_p: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) name: Option<Spanned<String>>,
    pub(super) class: Option<Spanned<String>>,
    pub(super) emulate: Option<Spanned<String>>,
    pub(super) src: Option<Spanned<Value>>,
    pub(super) dst: Option<Spanned<Value>>,
    pub(super) proto: Option<Spanned<Value>>,
    pub(super) sport: Option<Spanned<Value>>,
    pub(super) dport: Option<Spanned<Value>>,
    pub(super) port: Option<Spanned<Value>>,
    pub(super) dscp: Option<Spanned<Value>>,
    pub(super) vlan: Option<Spanned<Value>>,
    pub(super) app: Option<Spanned<Value>>,
    /// `http.host`, `http.path`, `http.method`, `http.mime` (a dotted key: a table).
    /// (Not `Spanned`: toml cannot give a dotted-key table's position; its values have.)
    pub(super) http: Option<RawHttp>,
    /// `tls.sni`.
    pub(super) tls: Option<RawTls>,
    pub(super) mss: Option<Spanned<Value>>,
    pub(super) meter: Option<Spanned<String>>,
    pub(super) mark: Option<Spanned<Value>>,
}

impl RawRule {
    /// The `http.*` and `tls.*` values of this rule, with their keys.
    pub(super) fn l7_values(&self) -> Vec<(crate::app::l7::L7Kind, &Spanned<Value>)> {
        use crate::app::l7::L7Kind as K;
        let mut v = Vec::new();
        if let Some(h) = &self.http {
            let http = [
                (K::HttpHost, &h.host),
                (K::HttpPath, &h.path),
                (K::HttpMethod, &h.method),
                (K::HttpMime, &h.mime),
            ];
            v.extend(http.into_iter().filter_map(|(k, x)| Some((k, x.as_ref()?))));
        }
        if let Some(x) = self.tls.as_ref().and_then(|t| t.sni.as_ref()) {
            v.push((K::TlsSni, x));
        }
        v
    }
}

/// A rule's `http.*` conditions.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) host: Option<Spanned<Value>>,
    pub(super) path: Option<Spanned<Value>>,
    pub(super) method: Option<Spanned<Value>>,
    pub(super) mime: Option<Spanned<Value>>,
}

/// A rule's `tls.*` conditions.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) sni: Option<Spanned<Value>>,
}

// ---- error positions ------------------------------------------------------------------

pub(super) struct Src<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    /// The directory of the policy file, where files it names (`trace`) are read; `None`
    /// for policy text that came from no file.
    pub(super) dir: Option<&'a std::path::Path>,
    pub(super) errors: Vec<PolicyError>,
    pub(super) warnings: Vec<PolicyError>,
}

impl<'a> Src<'a> {
    pub(super) fn pos(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
        (line, col)
    }
    pub(super) fn at(&self, span: std::ops::Range<usize>, msg: impl Into<String>) -> PolicyError {
        let (line, col) = self.pos(span.start);
        PolicyError {
            file: self.file.to_string(),
            line,
            col,
            msg: msg.into(),
        }
    }
    /// Record an error; the same message at the same place is recorded once (a key read
    /// for both directions, `rate` resolved outbound and inbound, reports once).
    pub(super) fn err(&mut self, span: std::ops::Range<usize>, msg: impl Into<String>) {
        let e = self.at(span, msg);
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }
    /// Record a warning, once per message and place (as [`Src::err`]).
    pub(super) fn warn(&mut self, span: std::ops::Range<usize>, msg: impl Into<String>) {
        let e = self.at(span, msg);
        if !self.warnings.contains(&e) {
            self.warnings.push(e);
        }
    }
    pub(super) fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.pos(span.start).0
    }
}

/// A TOML scalar as the text a unit parser reads (numbers become their decimal text).
pub(super) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

/// Parse a spanned scalar with `f`, recording an error (prefixed by `key`) on failure.
pub(super) fn parse_with<T, E: fmt::Display>(
    src: &mut Src<'_>,
    key: &str,
    v: &Spanned<Value>,
    f: impl Fn(&str) -> Result<T, E>,
) -> Option<T> {
    let Some(text) = scalar_text(v.get_ref()) else {
        src.err(
            v.span(),
            format!(
                "`{key}`: expected a string or number, found {}",
                v.get_ref().type_str()
            ),
        );
        return None;
    };
    match f(&text) {
        Ok(x) => Some(x),
        Err(e) => {
            src.err(v.span(), format!("`{key}`: {e}"));
            None
        }
    }
}

/// A value that may be one item or an array of items.
fn items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    }
}

pub(super) fn parse_list<T>(
    src: &mut Src<'_>,
    key: &str,
    v: &Spanned<Value>,
    f: impl Fn(&str) -> Result<T, units::UnitError>,
) -> Option<Vec<T>> {
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        src.err(v.span(), format!("`{key}`: empty list matches nothing"));
        return None;
    }
    for item in list {
        let Some(text) = scalar_text(item) else {
            src.err(
                v.span(),
                format!(
                    "`{key}`: expected strings or numbers, found {}",
                    item.type_str()
                ),
            );
            return None;
        };
        match f(&text) {
            Ok(x) => out.push(x),
            Err(e) => {
                src.err(v.span(), format!("`{key}`: {e}"));
                return None;
            }
        }
    }
    Some(out)
}

pub(super) fn parse_ports(src: &mut Src<'_>, key: &str, v: &Spanned<Value>) -> Option<PortSet> {
    let sets = parse_list(src, key, v, PortSet::parse)?;
    let ranges: Vec<(u16, u16)> = sets
        .iter()
        .flat_map(|s| s.ranges().iter().copied())
        .collect();
    match PortSet::from_ranges(ranges) {
        Ok(s) => Some(s),
        Err(e) => {
            src.err(v.span(), format!("`{key}`: {e}"));
            None
        }
    }
}

pub(super) fn toml_error(file: &str, text: &str, e: toml::de::Error) -> PolicyErrors {
    let src = Src {
        file,
        text,
        dir: None,
        errors: vec![],
        warnings: vec![],
    };
    let span = e.span().unwrap_or(0..0);
    let msg = e.message().trim().to_string();
    PolicyErrors(vec![src.at(span, msg)])
}

/// An `mtu` key: 68..=65535 bytes, else an error and `None`.
pub(super) fn parse_mtu(src: &mut Src<'_>, m: &Spanned<i64>) -> Option<u32> {
    match u32::try_from(*m.get_ref()) {
        Ok(x) if (68..=65_535).contains(&x) => Some(x),
        _ => {
            src.err(
                m.span(),
                format!("`mtu`: {} is outside 68..=65535 bytes", m.get_ref()),
            );
            None
        }
    }
}

/// A `direction` key: outbound (default), inbound, both, and `none` where `allow_none`.
/// An unknown value is an error listing the valid ones, and reads as outbound.
pub(super) fn parse_direction(
    src: &mut Src<'_>,
    d: Option<&Spanned<String>>,
    allow_none: bool,
) -> Shapes {
    match d.map(|d| d.get_ref().as_str()) {
        None | Some("outbound") => Shapes::Outbound,
        Some("inbound") => Shapes::Inbound,
        Some("both") => Shapes::Both,
        Some("none") if allow_none => Shapes::None,
        Some(other) => {
            let valid = if allow_none {
                "outbound, inbound, both, none"
            } else {
                "outbound, inbound, both"
            };
            src.err(
                d.unwrap().span(),
                format!("`direction`: '{other}' is not one of {valid}"),
            );
            Shapes::Outbound
        }
    }
}

/// A `red` key: `true`, `false` or a table of parameters (defaults for the rest).
pub(super) fn parse_red(src: &mut Src<'_>, v: &Spanned<Value>) -> Option<RedSpec> {
    match v.get_ref() {
        Value::Boolean(false) => None,
        Value::Boolean(true) => Some(RedSpec::defaults()),
        Value::Table(t) => {
            let raw = match RawRed::deserialize(Value::Table(t.clone())) {
                Ok(r) => r,
                Err(e) => {
                    src.err(v.span(), format!("`red`: {}", e.message().trim()));
                    return None;
                }
            };
            let mut r = RedSpec::defaults();
            let lim = |src: &mut Src<'_>, key: &str, x: &Value| -> Option<Limit> {
                let text = scalar_text(x)?;
                match units::parse_limit(&text) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        src.err(v.span(), format!("`red.{key}`: {e}"));
                        None
                    }
                }
            };
            if let Some(l) = raw.min.as_ref().and_then(|x| lim(src, "min", x)) {
                r.min = l;
                if raw.max.is_none() {
                    r.max = match l {
                        Limit::Packets(p) => Limit::Packets(p.saturating_mul(3)),
                        Limit::Bytes(b) => Limit::Bytes(b.saturating_mul(3)),
                    };
                }
            }
            if let Some(l) = raw.max.as_ref().and_then(|x| lim(src, "max", x)) {
                r.max = l;
            }
            if let Some(p) = raw.max_p {
                r.max_p = p;
            }
            if let Some(w) = raw.wq {
                r.wq = w;
            }
            if let Some(g) = raw.gentle {
                r.gentle = g;
            }
            let colours = [
                ("green", &raw.green),
                ("yellow", &raw.yellow),
                ("red", &raw.red),
            ];
            if colours.iter().all(|(_, c)| c.is_none()) {
                if raw.average.is_some() {
                    src.err(
                        v.span(),
                        "`red.average` is for three-colour RED: add green, yellow and red tables",
                    );
                }
                check_profile(src, v, "red", (r.min, r.max, r.max_p));
            } else {
                r.colors = color_red(src, v, &raw, &colours, &lim);
            }
            if !(r.wq > 0.0 && r.wq <= 1.0) {
                src.err(v.span(), format!("`red.wq`: {} is outside (0, 1]", r.wq));
            }
            Some(r)
        }
        other => {
            src.err(v.span(), format!("`red`: expected true, false or a table {{ min, max, max_p, wq, gentle }}, found {}", other.type_str()));
            None
        }
    }
}

/// One RED profile's checks: thresholds of one kind, `0 < min < max`, `max_p` in (0, 1]
/// (`who` names it in messages: `red`, `red.green`, ...).
fn check_profile(
    src: &mut Src<'_>,
    v: &Spanned<Value>,
    who: &str,
    (min, max, max_p): (Limit, Limit, f64),
) {
    let (lo, hi) = match (min, max) {
        (Limit::Packets(a), Limit::Packets(b)) => (a as u64, b as u64),
        (Limit::Bytes(a), Limit::Bytes(b)) => (a, b),
        _ => {
            src.err(
                v.span(),
                format!("`{who}`: min and max must both be in packets or both in bytes"),
            );
            (1, 2)
        }
    };
    if lo == 0 || lo >= hi {
        src.err(
            v.span(),
            format!("`{who}`: need 0 < min < max, got min {min} max {max}"),
        );
    }
    if !(max_p > 0.0 && max_p <= 1.0) {
        src.err(
            v.span(),
            format!("`{who}.max_p`: {max_p} is outside (0, 1]"),
        );
    }
}

/// The per-colour tables of a three-colour `red` (all three, thresholds all in packets or
/// all in bytes) and its `average`.
fn color_red(
    src: &mut Src<'_>,
    v: &Spanned<Value>,
    raw: &RawRed,
    colours: &[(&str, &Option<RawDropProfile>); 3],
    lim: &dyn Fn(&mut Src<'_>, &str, &Value) -> Option<Limit>,
) -> Option<ColorRedSpec> {
    use crate::queue::gred::GredAveraging;
    if raw.min.is_some() || raw.max.is_some() || raw.max_p.is_some() {
        src.err(
            v.span(),
            "`red`: with green, yellow and red tables, min, max and max_p go inside each \
             colour's table",
        );
    }
    let averaging = match raw.average.as_deref() {
        None | Some("coupled") => GredAveraging::Coupled,
        Some("separate") => GredAveraging::Separate,
        Some("single") => GredAveraging::Single,
        Some(other) => {
            src.err(
                v.span(),
                format!("`red.average`: '{other}' is not one of coupled, separate, single"),
            );
            GredAveraging::Coupled
        }
    };
    let missing: Vec<&str> = colours
        .iter()
        .filter(|(_, c)| c.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing.is_empty() {
        src.err(
            v.span(),
            format!(
                "`red`: three-colour RED needs green, yellow and red tables (missing: {})",
                missing.join(", ")
            ),
        );
        return None;
    }
    let mut profiles = Vec::with_capacity(3);
    for (name, c) in colours {
        let c = c.as_ref()?;
        let min = lim(src, &format!("{name}.min"), &c.min)?;
        let max = lim(src, &format!("{name}.max"), &c.max)?;
        check_profile(src, v, &format!("red.{name}"), (min, max, c.max_p));
        profiles.push((min, max, c.max_p));
    }
    let bytes = |l: &Limit| matches!(l, Limit::Bytes(_));
    let kinds: Vec<bool> = profiles
        .iter()
        .flat_map(|(a, b, _)| [bytes(a), bytes(b)])
        .collect();
    if kinds.iter().any(|&k| k != kinds[0]) {
        src.err(
            v.span(),
            "`red`: the colours' thresholds must all be in packets or all in bytes",
        );
        return None;
    }
    Some(ColorRedSpec {
        profiles: [profiles[0], profiles[1], profiles[2]],
        averaging,
    })
}
