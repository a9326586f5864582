//! One `[[class]]`: its rates against its parent's, priority, bucket sizes, the queue keys
//! as written, and per-session settings. Tree-wide checks (depths, assured-rate sums,
//! default quanta) are the caller's (`compile/mod.rs`).

use super::super::raw::{parse_red, parse_with, RawClass, Src};
use super::super::{
    AqmChoice, ClassDef, DirRates, QueueKind, SessionSpec, Technique, Written, DEFAULT_BUCKETS,
    DEFAULT_FIFO_LIMIT, DEFAULT_FLOW_LIMIT,
};
use super::burst_for;
use crate::admission;
use crate::aqm::{AqmKind, AqmParams};
use crate::queue::fq::Isolation;
use crate::queue::pfq::Pfq;
use crate::sched::linkshare::{MAX_QUANTUM, PRIOS};
use crate::tcp::ack_filter::AckFilterMode;
use crate::time::Duration;
use crate::units::{self, fmt_rate, fmt_size, Limit};
use toml::{Spanned, Value};

/// One `[[class]]` under `parent` (its index and its already compiled definition).
pub(super) fn compile_class(
    src: &mut Src<'_>,
    raw: &Spanned<RawClass>,
    (parent, parent_def): (usize, &ClassDef),
    leaf: bool,
    mtu: u32,
    technique: Technique,
) -> ClassDef {
    let c = raw.get_ref();
    let (rate, ceil) = class_rates(src, c, parent_def.rate, parent_def.ceil);
    let prio = class_prio(src, c);
    let quantum = class_size(src, "quantum", &c.quantum);
    let burst = class_size(src, "burst", &c.burst).unwrap_or_else(|| burst_for(rate, mtu));
    let cburst = class_size(src, "cburst", &c.cburst).unwrap_or_else(|| burst_for(ceil, mtu));
    let written = class_queue_keys(src, c, leaf);
    let session = class_session(src, c, rate, ceil, mtu, leaf, &written);
    let mut def = ClassDef {
        name: c.name.get_ref().clone(),
        parent: Some(parent),
        rate,
        ceil,
        prio,
        quantum: quantum.unwrap_or(0),
        burst,
        cburst,
        leaf,
        queue: QueueKind::Fifo,
        limit: Limit::Packets(DEFAULT_FIFO_LIMIT),
        red: None,
        aqm: AqmKind::None,
        target: None,
        interval: None,
        ecn: false,
        isolate: Isolation::default(),
        ack_filter: AckFilterMode::Off,
        session,
        written,
        mss: c.mss.as_ref().and_then(|v| super::mss_cap(src, v)),
        tcr: c.tcr.as_ref().and_then(|v| match v.get_ref() {
            Value::Boolean(b) => Some(*b),
            _ => {
                src.err(
                    v.span(),
                    "`tcr`: expected true or false (TCP rate control of the class's connections)",
                );
                None
            }
        }),
        admission: class_admission(src, c, leaf),
        meter: None,
        inbound: None,
        subscriber: None,
        line: src.line(raw.span()),
    };
    (def.target, def.interval) = aqm_times(src, c);
    def.apply(technique, false);
    check_queue(src, c, &def, mtu);
    if let (Some(r), Some(v)) = (def.red.as_ref().filter(|r| r.colors.is_some()), &c.red) {
        match super::super::build::gred_params(&def, r, mtu) {
            Ok((.., warnings)) => {
                for w in warnings {
                    src.warn(v.span(), format!("`red`: {w}"));
                }
            }
            Err(e) => src.err(v.span(), format!("`red`: {e}")),
        }
    }
    def
}

/// A class's `max_sessions`, `admission` and `session_idle` (leaves only).
fn class_admission(src: &mut Src<'_>, c: &RawClass, leaf: bool) -> Option<admission::Spec> {
    use admission::{Mode, Spec, DEFAULT_IDLE, MAX_SESSIONS};
    let Some(max) = &c.max_sessions else {
        for (key, span) in [
            ("admission", c.admission.as_ref().map(|v| v.span())),
            ("session_idle", c.session_idle.as_ref().map(|v| v.span())),
        ] {
            if let Some(span) = span {
                src.err(
                    span,
                    format!("`{key}` needs `max_sessions` in the same class"),
                );
            }
        }
        return None;
    };
    if !leaf {
        src.err(
            max.span(),
            format!(
                "`max_sessions`: class '{}' has child classes; sessions are counted in the \
                 leaf classes that classify them",
                c.name.get_ref()
            ),
        );
        return None;
    }
    let n = *max.get_ref();
    if !(1..=i64::from(MAX_SESSIONS)).contains(&n) {
        src.err(
            max.span(),
            format!("`max_sessions`: {n} is outside 1..={MAX_SESSIONS}"),
        );
        return None;
    }
    let mode = match &c.admission {
        None => Mode::Share,
        Some(m) => match Mode::parse(m.get_ref()) {
            Some(m) => m,
            None => {
                src.err(
                    m.span(),
                    format!(
                        "`admission`: unknown mode '{}'; expected \"share\", \"postpone\" or \
                         \"refuse\"",
                        m.get_ref()
                    ),
                );
                return None;
            }
        },
    };
    let idle = match &c.session_idle {
        None => DEFAULT_IDLE,
        Some(v) => match parse_with(src, "session_idle", v, units::parse_duration)? {
            0 => {
                src.err(v.span(), "`session_idle`: must be longer than 0");
                return None;
            }
            ns => Duration(ns),
        },
    };
    Some(Spec {
        max_sessions: n as u32,
        mode,
        idle,
    })
}

/// A class's `rate` and `ceil`, resolved against its parent's (`prate`, `pceil`).
fn class_rates(src: &mut Src<'_>, c: &RawClass, prate: u64, pceil: u64) -> (u64, u64) {
    let keys = RateKeys {
        rate: (&c.rate, "rate"),
        ceil: c.ceil.as_ref().map(|v| (v, "ceil")),
    };
    resolve_rates(src, c.name.get_ref(), keys, prate, pceil)
}

/// The keys a direction's rates come from: the value and its key's name each.
struct RateKeys<'a> {
    rate: (&'a Spanned<Value>, &'static str),
    ceil: Option<(&'a Spanned<Value>, &'static str)>,
}

/// A class's inbound rates when the policy has any inbound key: `inbound_rate` and
/// `inbound_ceil`, or else `rate` and `ceil`, resolved against the parent's inbound
/// rates (`parent`: its rate and ceil inbound). Buckets and quantum follow them.
pub(super) fn inbound_rates(
    src: &mut Src<'_>,
    c: &RawClass,
    parent: (u64, u64),
    mtu: u32,
) -> DirRates {
    let keys = RateKeys {
        rate: c
            .inbound_rate
            .as_ref()
            .map_or((&c.rate, "rate"), |v| (v, "inbound_rate")),
        ceil: match (&c.inbound_ceil, &c.ceil) {
            (Some(v), _) => Some((v, "inbound_ceil")),
            (None, Some(v)) => Some((v, "ceil")),
            (None, None) => None,
        },
    };
    let (rate, ceil) = resolve_rates(src, c.name.get_ref(), keys, parent.0, parent.1);
    DirRates {
        rate,
        ceil,
        burst: class_size(src, "burst", &c.burst).unwrap_or_else(|| burst_for(rate, mtu)),
        cburst: class_size(src, "cburst", &c.cburst).unwrap_or_else(|| burst_for(ceil, mtu)),
        quantum: 0,
    }
}

fn resolve_rates(
    src: &mut Src<'_>,
    name: &str,
    keys: RateKeys<'_>,
    prate: u64,
    pceil: u64,
) -> (u64, u64) {
    let (rate_v, rate_key) = keys.rate;
    let rate = parse_with(src, rate_key, rate_v, units::parse_share).map(|s| s.of(prate));
    let ceil = match keys.ceil {
        None => Some(pceil),
        Some((v, key)) => parse_with(src, key, v, units::parse_share).map(|s| s.of(pceil)),
    };
    let (rate, ceil) = match (rate, ceil) {
        (Some(r), Some(ce)) => (r, ce),
        _ => (1, 1),
    };
    let (rate, ceil) = if rate == 0 {
        src.err(rate_v.span(), format!("`{rate_key}`: resolves to 0 bit/s"));
        (1, ceil.max(1))
    } else {
        (rate, ceil)
    };
    let ceil_span = keys.ceil.map_or(rate_v.span(), |(v, _)| v.span());
    let ceil_key = keys.ceil.map_or("ceil", |(_, k)| k);
    if ceil < rate {
        src.err(
            ceil_span,
            format!(
                "`{ceil_key}` {} is below the class's {rate_key} {}",
                fmt_rate(ceil),
                fmt_rate(rate)
            ),
        );
    } else if ceil > pceil {
        src.warn(
            ceil_span,
            format!(
                "class '{name}': {ceil_key} {} exceeds its parent's {} {}; the parent limits it",
                fmt_rate(ceil),
                if ceil_key == "inbound_ceil" || rate_key == "inbound_rate" {
                    "inbound ceil"
                } else {
                    "ceil"
                },
                fmt_rate(pceil)
            ),
        );
    }
    (rate, ceil)
}

/// A class's `prio` (0 when absent or invalid).
fn class_prio(src: &mut Src<'_>, c: &RawClass) -> u8 {
    match &c.prio {
        None => 0,
        Some(p) if (0..PRIOS as i64).contains(p.get_ref()) => *p.get_ref() as u8,
        Some(p) => {
            src.err(
                p.span(),
                format!(
                    "`prio`: {} is outside 0..={} (0 is highest)",
                    p.get_ref(),
                    PRIOS - 1
                ),
            );
            0
        }
    }
}

/// A size key (`quantum`, `burst`, `cburst`): 1..=MAX_QUANTUM bytes.
fn class_size(src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>) -> Option<u32> {
    let v = v.as_ref()?;
    let b = parse_with(src, key, v, units::parse_size)?;
    if b == 0 || b > MAX_QUANTUM as u64 {
        src.err(
            v.span(),
            format!("`{key}`: {} is out of range", fmt_size(b)),
        );
        return None;
    }
    Some(b as u32)
}

/// The queue keys as written (`queue`, `limit`, `red`); on a class with children they are
/// errors, as is `[class.session]`.
fn class_queue_keys(src: &mut Src<'_>, c: &RawClass, leaf: bool) -> Written {
    let written_queue = match c.queue.as_ref().map(|q| (q.get_ref().as_str(), q.span())) {
        None => None,
        Some(("fifo", _)) => Some(QueueKind::Fifo),
        Some(("pfq", _)) => Some(QueueKind::Pfq),
        Some(("fq", _)) => Some(QueueKind::Fq),
        Some((other, span)) => {
            src.err(
                span,
                format!("`queue`: '{other}' is not one of fifo, pfq, fq"),
            );
            None
        }
    };
    if !leaf {
        for (key, present) in [
            ("queue", c.queue.as_ref().map(|v| v.span())),
            ("limit", c.limit.as_ref().map(|v| v.span())),
            ("red", c.red.as_ref().map(|v| v.span())),
            ("aqm", c.aqm.as_ref().map(|v| v.span())),
            ("target", c.target.as_ref().map(|v| v.span())),
            ("interval", c.interval.as_ref().map(|v| v.span())),
            ("ecn", c.ecn.as_ref().map(|v| v.span())),
            ("isolate", c.isolate.as_ref().map(|v| v.span())),
            ("ack_filter", c.ack_filter.as_ref().map(|v| v.span())),
            ("session", c.session.as_ref().map(|v| v.span())),
        ] {
            if let Some(span) = present {
                src.err(span, format!("`{key}`: class '{}' has children, so it has no queue of its own; set `{key}` on its leaf classes", c.name.get_ref()));
            }
        }
    }
    let written_limit = match &c.limit {
        Some(v) => match parse_with(src, "limit", v, units::parse_limit) {
            Some(Limit::Packets(0)) | Some(Limit::Bytes(0)) => {
                src.err(v.span(), "`limit`: must be positive");
                None
            }
            l => l,
        },
        None => None,
    };
    let aqm = c.aqm.as_ref().and_then(|v| match v.get_ref().as_str() {
        "red" => Some(AqmChoice::Red),
        other => match AqmKind::parse(other) {
            Ok(k) => Some(AqmChoice::Delay(k)),
            Err(_) => {
                src.err(
                    v.span(),
                    format!(
                        "`aqm`: '{other}' is not one of codel, cobalt, red, none (the AQM of the \
                         leaf's queue)"
                    ),
                );
                None
            }
        },
    });
    let ecn = c.ecn.as_ref().and_then(|v| match v.get_ref() {
        Value::Boolean(b) => Some(*b),
        _ => {
            src.err(
                v.span(),
                "`ecn`: expected true or false (mark ECN-capable packets instead of dropping them)",
            );
            None
        }
    });
    let isolate = c.isolate.as_ref().and_then(|v| {
        Isolation::parse(v.get_ref())
            .map_err(|e| src.err(v.span(), format!("`{e}")))
            .ok()
    });
    let ack_filter = c.ack_filter.as_ref().and_then(|v| {
        let text = match v.get_ref() {
            Value::Boolean(true) => "on".to_string(),
            Value::Boolean(false) => "off".to_string(),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        AckFilterMode::parse(&text)
            .ok_or_else(|| {
                src.err(
                    v.span(),
                    format!(
                        "`ack_filter`: '{text}' is not one of off, on, aggressive (CAKE's ACK filter)"
                    ),
                )
            })
            .ok()
    });
    Written {
        queue: written_queue,
        limit: written_limit,
        red: c.red.as_ref().map(|v| parse_red(src, v)),
        aqm,
        ecn,
        isolate,
        ack_filter,
    }
}

/// A class's CoDel/COBALT `target` and `interval` as written: durations, target shorter
/// than interval (the default interval when only `target` is written).
fn aqm_times(src: &mut Src<'_>, c: &RawClass) -> (Option<Duration>, Option<Duration>) {
    let dur = |src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>| {
        let v = v.as_ref()?;
        match parse_with(src, key, v, units::parse_duration)? {
            0 => {
                src.err(v.span(), format!("`{key}`: must be longer than 0"));
                None
            }
            ns if ns > 3_600_000_000_000 => {
                src.err(v.span(), format!("`{key}`: must be at most 1 hour"));
                None
            }
            ns => Some(Duration(ns)),
        }
    };
    let target = dur(src, "target", &c.target);
    let interval = dur(src, "interval", &c.interval);
    if let Some(t) = target {
        let (i, which) = match interval {
            Some(i) => (i, ""),
            None => (AqmParams::INTERVAL, " (the default)"),
        };
        if t >= i {
            let span = c.target.as_ref().map_or(0..0, |v| v.span());
            src.err(
                span,
                format!("`target` {t} is not shorter than `interval` {i}{which}: CoDel needs the queue above target for a whole interval before it acts"),
            );
        }
    }
    (target, interval)
}

/// The resolved queue against what the file asked of it: keys that need another kind of
/// queue, two AQMs at once, a signal with nothing to send it.
fn check_queue(src: &mut Src<'_>, c: &RawClass, def: &ClassDef, _mtu: u32) {
    let span = |v: &Option<Spanned<Value>>| v.as_ref().map(|v| v.span());
    let sspan = |v: &Option<Spanned<String>>| v.as_ref().map(|v| v.span());
    let w = &def.written;
    let red_written = matches!(w.red, Some(Some(_))) || w.aqm == Some(AqmChoice::Red);
    if let (Some(AqmChoice::Delay(k)), Some(Some(_))) = (w.aqm, &w.red) {
        if k != AqmKind::None {
            if let Some(s) = sspan(&c.aqm) {
                src.err(
                    s,
                    format!(
                        "`aqm` = \"{}\" and a `red` table: a leaf has one AQM; remove one of them",
                        k.name()
                    ),
                );
            }
        }
    }
    if w.aqm == Some(AqmChoice::Red) && matches!(w.red, Some(None)) {
        if let Some(s) = sspan(&c.aqm) {
            src.err(s, "`aqm` = \"red\" and `red = false` contradict each other");
        }
    }
    if def.queue == QueueKind::Fq && red_written {
        let s = span(&c.red).or(sspan(&c.aqm)).unwrap_or(0..0);
        src.err(s, "RED runs on queue = \"fifo\" or on seed 000's per-flow queue (queue = \"pfq\"), not in flow queuing (queue = \"fq\"), whose flows take aqm = \"codel\" or \"cobalt\"");
    }
    if def.queue == QueueKind::Pfq && def.aqm != AqmKind::None {
        if let Some(s) = sspan(&c.aqm) {
            src.err(s, format!("`aqm` = \"{}\": seed 000's per-flow queue (queue = \"pfq\") takes RED per flow; CoDel and COBALT per flow are flow queuing, queue = \"fq\"", def.aqm.name()));
        }
    }
    if def.queue != QueueKind::Fq {
        if let Some(s) = sspan(&c.isolate) {
            src.err(s, format!("`isolate`: host isolation is flow queuing's (queue = \"fq\"); this leaf's queue is {}", def.queue.name()));
        }
        if let (Some(s), Some(m)) = (span(&c.ack_filter), w.ack_filter) {
            if m != AckFilterMode::Off {
                src.err(s, format!("`ack_filter`: the ACK filter needs a TCP-aware flow queue (queue = \"fq\"), which finds a connection's queued ACKs; this leaf's queue is {}", def.queue.name()));
            }
        }
    }
    if def.aqm == AqmKind::None {
        for (key, v) in [("target", &c.target), ("interval", &c.interval)] {
            if let Some(s) = span(v) {
                src.err(s, format!("`{key}` is a CoDel/COBALT parameter, and this leaf has no such AQM (aqm = \"codel\" or \"cobalt\")"));
            }
        }
        if def.red.is_none() && w.ecn == Some(true) {
            if let Some(s) = span(&c.ecn) {
                src.err(s, "`ecn`: nothing on this leaf signals congestion (no aqm, no red) to mark packets with");
            }
        }
    }
}

/// `[class.session]`: guarantee and cap per session (shares of the class's `rate` and
/// `ceil`), buckets, per-flow limit.
fn class_session(
    src: &mut Src<'_>,
    c: &RawClass,
    rate: u64,
    ceil: u64,
    mtu: u32,
    leaf: bool,
    written: &Written,
) -> SessionSpec {
    let mut session = SessionSpec {
        guarantee: None,
        ceil: None,
        burst: None,
        buckets: DEFAULT_BUCKETS,
        flow_limit: DEFAULT_FLOW_LIMIT,
        configured: false,
    };
    if let Some(s) = &c.session {
        let s = s.get_ref();
        if let Some(g) = &s.guarantee {
            session.guarantee =
                parse_with(src, "guarantee", g, units::parse_share).map(|x| x.of(rate));
            if session.guarantee == Some(0) {
                src.err(g.span(), "`guarantee`: resolves to 0 bit/s");
                session.guarantee = None;
            } else if session.guarantee.is_some_and(|g| g > rate) {
                src.err(
                    g.span(),
                    format!("`guarantee`: more than the class rate {}", fmt_rate(rate)),
                );
            }
        }
        if let Some(v) = &s.ceil {
            session.ceil = parse_with(src, "ceil", v, units::parse_share).map(|x| x.of(ceil));
            if session.ceil == Some(0) {
                src.err(v.span(), "session `ceil`: resolves to 0 bit/s");
                session.ceil = None;
            }
            if let (Some(cap), Some(g)) = (session.ceil, session.guarantee) {
                if cap < g {
                    src.err(
                        v.span(),
                        format!(
                            "session `ceil` {} is below the session guarantee {}",
                            fmt_rate(cap),
                            fmt_rate(g)
                        ),
                    );
                }
            }
        }
        if let Some(v) = &s.burst {
            session.burst = class_size(src, "burst", &s.burst);
            if session.ceil.is_none() {
                src.err(
                    v.span(),
                    "session `burst` is the depth of the per-session cap: it needs a session `ceil`",
                );
                session.burst = None;
            } else if session.burst.is_some_and(|b| b < mtu) {
                src.err(
                    v.span(),
                    format!(
                        "session `burst` {} is below the link mtu {mtu} B: a full-size packet would never conform",
                        fmt_size(session.burst.unwrap_or(0) as u64)
                    ),
                );
                session.burst = None;
            }
        }
        if let Some(b) = &s.buckets {
            match u32::try_from(*b.get_ref()) {
                Ok(x) if (1..=1 << 24).contains(&x) => session.buckets = Pfq::round_buckets(x),
                _ => src.err(
                    b.span(),
                    format!("`buckets`: {} is outside 1..=16777216", b.get_ref()),
                ),
            }
        }
        if let Some(v) = &s.limit {
            match parse_with(src, "limit", v, units::parse_limit) {
                Some(Limit::Packets(p)) if p > 0 => session.flow_limit = p,
                Some(Limit::Bytes(b)) if b > 0 => {
                    session.flow_limit = (b / mtu as u64).max(1) as u32
                }
                Some(_) => src.err(v.span(), "`limit`: must be positive"),
                None => {}
            }
        }
        session.configured = true;
        if leaf && written.queue == Some(QueueKind::Fifo) {
            src.err(
                c.session.as_ref().unwrap().span(),
                "per-session settings need per-flow queuing: remove `queue = \"fifo\"` or the [class.session] table",
            );
        }
    }
    session
}
