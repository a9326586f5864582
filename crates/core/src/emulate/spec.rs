//! Text forms of the emulator's parameters, shared by the policy language (`[[emulate]]`)
//! and `weir emu`'s options, so that both accept exactly the same spellings.
//!
//! * probability: `"1%"`, `"0.5 %"`, `"0.01"` (a plain number is a fraction in [0, 1]).
//! * loss model (netem-like):
//!   - `"1%"` or `"random 1%"` — Bernoulli, each packet lost independently;
//!   - `"periodic 1%"` — every round(1/p)-th packet (seed 000's "periodic loss"), or
//!     `"every 100"` — every 100th packet;
//!   - `"gilbert P R"` — simple Gilbert: P = P(good→bad), R = P(bad→good), every packet
//!     lost in bad, none in good (mean burst 1/R, loss P/(P+R));
//!   - `"random P C"` — random loss `P` whose loss indicators have lag-1 autocorrelation
//!     `C` (netem's `loss random P C` with weir's definition: the simple Gilbert model of
//!     [`LossModel::correlated`], loss rate exactly `P`);
//!   - `"state P13 [P31 [P32 [P23 [P14]]]]"` — netem's 4-state Markov model
//!     ([`LossModel::FourState`]), iproute2's defaults for the ones left out;
//!   - `"gilbert-elliott P R K H"` (alias `"ge"`) — with K = P(deliver | good) and
//!     H = P(deliver | bad), as in RFC 3611's and netem's `gemodel` (netem's 3rd and 4th
//!     arguments are 1−H and 1−K; weir takes the delivery probabilities, as Elliott wrote).
//!   - `"none"` or `"0%"` — no loss.
//! * jitter distribution: `uniform` (netem's default: ±jitter), `normal` (σ = jitter),
//!   `pareto` (netem's: shape 3, scale 4σ/3, shifted to mean 0), `paretonormal` (σ).
//!
//! Errors are plain strings saying what was expected; callers add the file, line and
//! field (policy) or the option name (command line).

use super::slot::SlotGap;
use super::{EmuConfig, Jitter, LossModel};
use crate::framing::{Coding, Framing};
use crate::units::{fmt_duration, fmt_rate, fmt_size};

/// A probability: `"1%"` (percent) or `"0.01"` (fraction).
pub fn parse_prob(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| {
        format!("'{s}' is not a probability; expected a percentage like \"1%\" or a fraction like \"0.01\"")
    })?;
    let p = v / scale;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("'{s}' is outside 0%..100%"));
    }
    Ok(p)
}

/// A loss model (see the module comment for the grammar).
pub fn parse_loss(s: &str) -> Result<LossModel, String> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let probs = |args: &[&str], names: &[&str]| -> Result<Vec<f64>, String> {
        if args.len() != names.len() {
            return Err(format!(
                "loss '{s}': '{}' takes {} values ({}), got {}",
                words[0],
                names.len(),
                names.join(" "),
                args.len()
            ));
        }
        args.iter()
            .zip(names)
            .map(|(a, n)| parse_prob(a).map_err(|e| format!("loss '{s}': {n}: {e}")))
            .collect()
    };
    let model = match words.as_slice() {
        [] | ["none"] => LossModel::None,
        [p] => match parse_prob(p) {
            Ok(p) => LossModel::Bernoulli { p },
            Err(e) if p.trim_end_matches('%').trim().parse::<f64>().is_ok() => {
                return Err(format!("loss: {e}"))
            }
            Err(_) => return Err(grammar(s)),
        },
        ["random" | "bernoulli", p] => {
            let p = parse_prob(p).map_err(|e| format!("loss: {e}"))?;
            LossModel::Bernoulli { p }
        }
        ["random", p, c] => {
            let p = parse_prob(p).map_err(|e| format!("loss: {e}"))?;
            let c = parse_prob(c).map_err(|e| format!("loss: correlation: {e}"))?;
            LossModel::correlated(p, c)
        }
        ["state", args @ ..] if (1..=5).contains(&args.len()) => {
            let names = ["p13", "p31", "p32", "p23", "p14"];
            let v = probs(args, &names[..args.len()])?;
            LossModel::four_state(v[0], &v[1..])
        }
        ["periodic", p] => {
            let p = parse_prob(p).map_err(|e| format!("loss: {e}"))?;
            if p == 0.0 {
                LossModel::None
            } else {
                LossModel::periodic(p).ok_or_else(|| format!("loss '{s}': rate must be > 0"))?
            }
        }
        ["every", n] => match n.parse::<u64>() {
            Ok(every) if every >= 1 => LossModel::Periodic { every },
            _ => {
                return Err(format!(
                    "loss '{s}': 'every N' needs a whole number N >= 1 (lose every Nth packet)"
                ))
            }
        },
        ["gilbert", args @ ..] => {
            let v = probs(args, &["P(good->bad)", "P(bad->good)"])?;
            LossModel::gilbert(v[0], v[1])
        }
        ["gilbert-elliott" | "ge", args @ ..] => {
            let v = probs(
                args,
                &[
                    "P(good->bad)",
                    "P(bad->good)",
                    "P(deliver|good)",
                    "P(deliver|bad)",
                ],
            )?;
            LossModel::GilbertElliott {
                p: v[0],
                r: v[1],
                k: v[2],
                h: v[3],
            }
        }
        _ => return Err(grammar(s)),
    };
    model.validate().map_err(|e| e.to_string())?;
    Ok(model)
}

fn grammar(s: &str) -> String {
    format!(
        "loss '{s}': expected \"P%\", \"random P% [C%]\", \"periodic P%\", \"every N\", \
         \"gilbert P R\", \"gilbert-elliott P R K H\" or \"state P13 [P31 [P32 [P23 [P14]]]]\""
    )
}

/// The jitter distribution `dist` with width `ns` (half-width for uniform, σ otherwise).
pub fn parse_jitter(ns: u64, dist: &str) -> Result<Jitter, String> {
    let j = match dist.trim() {
        "uniform" => Jitter::Uniform { half_width: ns },
        "normal" => Jitter::Normal { sigma: ns },
        "pareto" => Jitter::netem_pareto(ns),
        "paretonormal" => Jitter::ParetoNormal { sigma: ns },
        other => {
            return Err(format!(
                "distribution '{other}' is not one of uniform, normal, pareto, paretonormal"
            ))
        }
    };
    j.validate().map_err(|e| e.to_string())?;
    Ok(j)
}

fn pct(p: f64) -> String {
    format!("{}%", (p * 100.0 * 1e6).round() / 1e6)
}

/// One line describing a loss model, in the grammar [`parse_loss`] reads.
pub fn describe_loss(m: &LossModel) -> String {
    match *m {
        LossModel::None => "none".into(),
        LossModel::Bernoulli { p } => format!("random {}", pct(p)),
        LossModel::Periodic { every } => format!("every {every}"),
        LossModel::GilbertElliott { p, r, k, h } if k == 1.0 && h == 0.0 => {
            format!("gilbert {} {}", pct(p), pct(r))
        }
        LossModel::GilbertElliott { p, r, k, h } => format!(
            "gilbert-elliott {} {} {} {}",
            pct(p),
            pct(r),
            pct(k),
            pct(h)
        ),
        LossModel::FourState {
            p13,
            p31,
            p32,
            p23,
            p14,
        } => format!(
            "state {} {} {} {} {}",
            pct(p13),
            pct(p31),
            pct(p32),
            pct(p23),
            pct(p14)
        ),
    }
}

/// A rate schedule as `weir emu --rate-schedule` writes it: `TIME=RATE` points separated
/// by commas, e.g. `0s=8Mbit,30s=2Mbit` (the policy writes `[["0s", "8Mbit"], …]`).
pub fn parse_schedule(s: &str) -> Result<super::Capacity, String> {
    let points = parse_points(s, "TIME=RATE, e.g. 30s=2Mbit", |r| {
        crate::units::parse_rate(r).map_err(|e| e.to_string())
    })?;
    super::Capacity::schedule(points)
}

/// `"T=V,T=V,…"`: points of a schedule, each value read by `value`; `example` is what the
/// error says a point looks like.
fn parse_points<T>(
    s: &str,
    example: &str,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(u64, T)>, String> {
    let mut points = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (t, v) = part
            .split_once('=')
            .ok_or_else(|| format!("'{part}': expected {example}"))?;
        let t = crate::units::parse_duration(t.trim()).map_err(|e| format!("'{part}': {e}"))?;
        let v = value(v.trim()).map_err(|e| format!("'{part}': {e}"))?;
        points.push((t, v));
    }
    Ok(points)
}

/// A delay schedule: `"0s=20ms,30s=80ms"` (each delay from its time on; see
/// [`super::path`]).
pub fn parse_delay_schedule(s: &str) -> Result<Vec<(u64, u64)>, String> {
    parse_points(s, "TIME=DELAY, e.g. 30s=80ms", |d| {
        crate::units::parse_duration(d).map_err(|e| e.to_string())
    })
}

/// A loss schedule: `"0s=0%,10s=random 5%,20s=gilbert 1% 30%"` (each model as [`parse_loss`]
/// reads it).
pub fn parse_loss_schedule(s: &str) -> Result<Vec<(u64, LossModel)>, String> {
    parse_points(s, "TIME=LOSS, e.g. 10s=5%", parse_loss)
}

/// A schedule read from a file (`--delay-trace`, `--loss-trace`, `delay_trace = "FILE"`):
/// one point per line, `TIME VALUE` (or `TIME=VALUE`, the schedule options' syntax), `#`
/// comments and blank lines ignored. A bare number is milliseconds, as in Mahimahi's
/// traces and a ping log's two columns (`0 20.5`, `1000 22`); times start at 0 and
/// increase. Errors name the line and field (the caller adds the file).
fn parse_points_file<T>(
    text: &str,
    what: &str,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(u64, T)>, String> {
    let mut points: Vec<(u64, T)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        let (t, v) = line
            .split_once(|c: char| c == '=' || c.is_whitespace())
            .map(|(t, v)| (t.trim(), v.trim()))
            .filter(|(_, v)| !v.is_empty())
            .ok_or_else(|| format!("line {n}: '{line}': expected TIME {what}, e.g. '30s 80ms'"))?;
        let t = bare_ms(t).map_err(|e| format!("line {n}: field 1 (TIME): {e}"))?;
        let v = value(v).map_err(|e| format!("line {n}: field 2 ({what}): {e}"))?;
        match points.last() {
            None if t != 0 => {
                return Err(format!(
                    "line {n}: field 1 (TIME): the first point must be at 0 (the link's first frame), not {}",
                    crate::units::fmt_duration(t)
                ))
            }
            Some(&(prev, _)) if t <= prev => {
                return Err(format!(
                    "line {n}: field 1 (TIME): {} is not after the line before's {}",
                    crate::units::fmt_duration(t),
                    crate::units::fmt_duration(prev)
                ))
            }
            _ => {}
        }
        points.push((t, v));
    }
    if points.is_empty() {
        return Err(format!("no points (expected lines of TIME {what})"));
    }
    Ok(points)
}

/// A delay trace file: `TIME DELAY` lines, bare numbers in ms (see [`parse_points_file`]).
pub fn parse_delay_trace(text: &str) -> Result<Vec<(u64, u64)>, String> {
    parse_points_file(text, "DELAY", bare_ms)
}

/// A duration where a bare number is milliseconds (`20.5` = `20.5ms`).
fn bare_ms(f: &str) -> Result<u64, String> {
    let bare = !f.is_empty() && f.chars().all(|c| c.is_ascii_digit() || c == '.');
    let f = if bare {
        format!("{f}ms")
    } else {
        f.to_string()
    };
    crate::units::parse_duration(&f).map_err(|e| e.to_string())
}

/// A loss trace file: `TIME LOSS` lines, each loss as [`parse_loss`] reads it
/// (`0 0%`, `10s random 5%`, `20s gilbert 1% 30%`).
pub fn parse_loss_trace(text: &str) -> Result<Vec<(u64, LossModel)>, String> {
    parse_points_file(text, "LOSS", parse_loss)
}

/// Outages: `"10s-12s,30s-30.5s"`, each from its start to its end (times from the link's
/// first frame).
pub fn parse_outages(s: &str) -> Result<Vec<(u64, u64)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part
            .split_once('-')
            .ok_or_else(|| format!("'{part}': expected START-END, e.g. 10s-12s"))?;
        let t =
            |x: &str| crate::units::parse_duration(x.trim()).map_err(|e| format!("'{part}': {e}"));
        out.push((t(a)?, t(b)?));
    }
    Ok(out)
}

/// `mm-link`'s queue options (`--uplink-queue=TYPE --uplink-queue-args="packets=N,
/// bytes=M"`) applied to `cfg`: `infinite` (no limit), `droptail` and `drophead` (a
/// packet and/or byte limit, at least one: `mm-link` refuses neither), `codel` (a
/// drop-tail limit and CoDel with `target=MS` and `interval=MS`, all required as in
/// `mm-link`). Arguments are `NAME=NUMBER` separated by commas or spaces. `pie` is
/// refused: weir has no PIE.
pub fn apply_mm_queue(cfg: &mut EmuConfig, kind: &str, args: &str) -> Result<(), String> {
    match kind {
        "infinite" | "droptail" | "drophead" | "codel" => {}
        "pie" => {
            return Err(
                "'pie': weir has no PIE; the queues are infinite, droptail, drophead and codel"
                    .into(),
            )
        }
        other => {
            return Err(format!(
                "'{other}' is not a queue type; expected infinite, droptail or drophead"
            ))
        }
    }
    let mut packets = None;
    let mut bytes = None;
    let (mut target, mut interval) = (None, None);
    for arg in args
        .split([',', ' '])
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("'{arg}': expected NAME=NUMBER, e.g. packets=100"))?;
        let n: u64 = value
            .trim()
            .parse()
            .map_err(|_| format!("'{arg}': '{value}' is not a whole number"))?;
        match name.trim() {
            "packets" => {
                packets = Some(u32::try_from(n).map_err(|_| format!("'{arg}': too many packets"))?)
            }
            "bytes" => bytes = Some(n),
            "target" if kind == "codel" => target = Some(n),
            "interval" if kind == "codel" => interval = Some(n),
            "target" | "interval" | "qdelay_ref" | "max_burst" => {
                return Err(format!(
                    "'{arg}': a {kind} queue takes packets= and bytes= only"
                ))
            }
            other => {
                return Err(format!(
                    "'{other}' is not a queue argument; expected packets or bytes"
                ))
            }
        }
    }
    match kind {
        "infinite" => {
            if packets.is_some() || bytes.is_some() {
                return Err("an infinite queue takes no limit".into());
            }
            cfg.limit_packets = Some(crate::queue::fifo::Limits::UNLIMITED_PACKETS);
            cfg.limit_bytes = None;
        }
        "codel" => {
            let (Some(t), Some(i)) = (target, interval) else {
                return Err("a codel queue needs target=MS and interval=MS (as mm-link)".into());
            };
            if packets.is_none() && bytes.is_none() {
                return Err("a codel queue needs a limit: packets=N and/or bytes=N".into());
            }
            cfg.limit_packets = packets;
            cfg.limit_bytes = bytes;
            cfg.queue_drop = super::QueueDrop::Tail;
            cfg.codel = Some(super::QueueCodel {
                target: crate::time::Duration::from_millis(t),
                interval: crate::time::Duration::from_millis(i),
                ecn: false,
            });
        }
        "droptail" | "drophead" => {
            if packets.is_none() && bytes.is_none() {
                return Err(format!(
                    "a {kind} queue needs a limit: packets=N and/or bytes=N"
                ));
            }
            cfg.limit_packets = packets;
            cfg.limit_bytes = bytes;
            cfg.queue_drop = if kind == "drophead" {
                super::QueueDrop::Head
            } else {
                super::QueueDrop::Tail
            };
        }
        _ => {} // refused above
    }
    Ok(())
}

/// One line describing a whole emulated link (what `weir check` and `weir emu` print).
pub fn describe(c: &EmuConfig) -> String {
    if c.is_transparent() {
        return "transparent".into();
    }
    let mut parts = Vec::new();
    match &c.capacity {
        Some(cap @ super::Capacity::Schedule(p)) => parts.push(format!(
            "rate schedule of {} points ({} to {}, mean {} up to the last)",
            p.len(),
            fmt_rate(p.iter().map(|x| x.1).min().unwrap_or(0)),
            fmt_rate(cap.peak_bps()),
            fmt_rate(cap.mean_bps())
        )),
        Some(cap @ super::Capacity::Trace(ms)) => parts.push(format!(
            "trace of {} opportunities over {} ms (mean {}, peak {}{})",
            ms.len(),
            ms.last().unwrap_or(&0),
            fmt_rate(cap.mean_bps()),
            fmt_rate(cap.peak_bps()),
            if c.once { ", played once" } else { "" }
        )),
        None => {}
    }
    if let Some(r) = c.rate_bps {
        parts.push(format!("rate {}", fmt_rate(r)));
    }
    if (c.rate_bps.is_some() || c.capacity.is_some()) && c.framing != Framing::default() {
        // on the rate's entry: "rate 155Mbit (+24 B/frame, mpu 84 B, atm)"
        let f = c.framing;
        let mut s = format!(" ({:+} B/frame", f.overhead());
        if f.mpu() > 0 {
            s += &format!(", mpu {} B", f.mpu());
        }
        if f.coding() != Coding::Plain {
            s += &format!(", {}", f.coding());
        }
        if let Some(last) = parts.last_mut() {
            *last += &(s + ")");
        }
    }
    if (c.delay.0 > 0 && c.path.delay.is_none()) || !c.jitter.is_none() {
        let mut s = format!("delay {}", fmt_duration(c.delay.0));
        match c.jitter {
            Jitter::None => {}
            Jitter::Uniform { half_width } => {
                s += &format!(" ± {} uniform", fmt_duration(half_width))
            }
            Jitter::Normal { sigma } => s += &format!(" σ {} normal", fmt_duration(sigma)),
            Jitter::Pareto { scale, alpha } => {
                s += &format!(" pareto (scale {}, α {alpha})", fmt_duration(scale))
            }
            Jitter::ParetoNormal { sigma } => {
                s += &format!(" σ {} paretonormal", fmt_duration(sigma))
            }
            Jitter::Table { sigma, ref table } => {
                s += &format!(" σ {} table {}", fmt_duration(sigma), table.name())
            }
        }
        if !c.jitter.is_none() && c.jitter_correlation > 0.0 {
            s += &format!(", correlation {}", pct(c.jitter_correlation));
        }
        if !c.jitter.is_none() && c.reorder {
            s += ", may reorder";
        }
        parts.push(s);
    }
    let r = c.reorder_early;
    if !r.is_none() {
        let mut s = format!("reorder {} sent at once", pct(r.probability));
        if r.correlation > 0.0 {
            s += &format!(" (correlation {})", pct(r.correlation));
        }
        if r.gap > 1 {
            s += &format!(" after every {} delayed", r.gap - 1);
        }
        parts.push(s);
    }
    if let Some(sl) = &c.slot {
        let mut s = match &sl.gap {
            SlotGap::Uniform { min, max } if min == max => {
                format!("slots every {}", fmt_duration(*min))
            }
            SlotGap::Uniform { min, max } => format!(
                "slots every {} to {}",
                fmt_duration(*min),
                fmt_duration(*max)
            ),
            SlotGap::Dist { delay, jitter } => {
                format!("slots every {} (±{})", fmt_duration(*delay), {
                    jitter
                        .std_dev()
                        .map_or("?".into(), |x| fmt_duration(x as u64))
                })
            }
        };
        if let Some(n) = sl.packets {
            s += &format!(", {n} packets");
        }
        if let Some(b) = sl.bytes {
            s += &format!(", {}", fmt_size(b));
        }
        parts.push(s);
    }
    let p = &c.path;
    if let Some(d) = &p.delay {
        parts.push(format!(
            "delay schedule of {} points ({} to {})",
            d.len(),
            fmt_duration(d.iter().map(|x| x.1).min().unwrap_or(0)),
            fmt_duration(d.iter().map(|x| x.1).max().unwrap_or(0))
        ));
    }
    if let Some(l) = &p.loss {
        parts.push(format!(
            "loss schedule of {} points ({})",
            l.len(),
            l.iter()
                .map(|(t, m)| format!("{} {}", fmt_duration(*t), describe_loss(m)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !p.outages.is_empty() {
        parts.push(format!(
            "{} outage{} ({} down in all)",
            p.outages.len(),
            if p.outages.len() == 1 { "" } else { "s" },
            fmt_duration(p.outage_ns())
        ));
    }
    if c.loss != LossModel::None && p.loss.is_none() {
        let mut s = format!("loss {}", describe_loss(&c.loss));
        if c.ecn {
            s += " (ECN-capable packets marked CE instead)";
        }
        parts.push(s);
    }
    let correlated = |name: &str, p: f64, corr: f64| {
        let mut s = format!("{name} {}", pct(p));
        if corr > 0.0 {
            s += &format!(" (correlation {})", pct(corr));
        }
        s
    };
    if c.duplicate > 0.0 {
        parts.push(correlated(
            "duplicate",
            c.duplicate,
            c.duplicate_correlation,
        ));
    }
    if c.corrupt > 0.0 {
        parts.push(correlated("corrupt", c.corrupt, c.corrupt_correlation));
    }
    if let Some(n) = c.limit_held {
        parts.push(format!("at most {n} packets held (netem's limit)"));
    }
    if c.sizing_bps().is_some() {
        let l = c.limits();
        let mut q = Vec::new();
        if l.packets != crate::queue::fifo::Limits::UNLIMITED_PACKETS {
            q.push(format!("{} packets", l.packets));
        }
        if l.bytes != crate::queue::fifo::Limits::UNLIMITED_BYTES {
            q.push(fmt_size(l.bytes));
        }
        let origin = if c.limit_packets.is_some() || c.limit_bytes.is_some() {
            ""
        } else if c.bdp_bytes().is_some() {
            " (bandwidth-delay product)"
        } else {
            " (default)"
        };
        let head = match (c.codel, c.queue_drop) {
            (Some(q), _) => format!(
                ", CoDel target {} interval {}",
                fmt_duration(q.target.0),
                fmt_duration(q.interval.0)
            ),
            (None, super::QueueDrop::Head) => ", drop-head".into(),
            (None, super::QueueDrop::Tail) => String::new(),
        };
        if !q.is_empty() {
            parts.push(format!("queue {}{origin}{head}", q.join(" / ")));
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    /// Delay and loss trace files: a ping log's two columns (bare ms), the options'
    /// syntax, comments; errors name the line and the field.
    #[test]
    fn path_trace_files() {
        assert_eq!(
            parse_delay_trace("# t delay\n0 20.5\n\n1000 22 # handover\n2.5s=80ms\n").unwrap(),
            vec![
                (0, 20_500_000),
                (1_000_000_000, 22_000_000),
                (2_500_000_000, 80_000_000)
            ]
        );
        assert_eq!(
            parse_loss_trace("0s 0%\n10s gilbert 1% 30%\n").unwrap(),
            vec![
                (0, LossModel::Bernoulli { p: 0.0 }),
                (10_000_000_000, LossModel::gilbert(0.01, 0.3))
            ]
        );
        let err = |t: &str| parse_delay_trace(t).unwrap_err();
        assert_eq!(
            err("0 20\n500 30\n400 10\n"),
            "line 3: field 1 (TIME): 400ms is not after the line before's 500ms"
        );
        assert!(err("5 20\n").starts_with("line 1: field 1 (TIME): the first point must be at 0"));
        assert!(
            err("0 20\n-5 3\n").starts_with("line 2: field 1 (TIME): "),
            "{}",
            err("0 20\n-5 3\n")
        );
        assert!(err("0 20\n10 x\n").starts_with("line 2: field 2 (DELAY): "));
        assert!(err("0\n").starts_with("line 1: '0': expected TIME DELAY"));
        assert_eq!(
            err("# nothing\n"),
            "no points (expected lines of TIME DELAY)"
        );
        let e = parse_loss_trace("0 0%\n1s random 150%\n").unwrap_err();
        assert!(e.starts_with("line 2: field 2 (LOSS): "), "{e}");
    }

    /// Schedules and outages as the command line writes them.
    #[test]
    fn path_schedules() {
        assert_eq!(
            parse_delay_schedule("0s=20ms, 30s=80ms").unwrap(),
            vec![(0, 20_000_000), (30_000_000_000, 80_000_000)]
        );
        assert_eq!(
            parse_loss_schedule("0s=0%,10s=random 5%").unwrap(),
            vec![
                (0, LossModel::Bernoulli { p: 0.0 }),
                (10_000_000_000, LossModel::Bernoulli { p: 0.05 })
            ]
        );
        assert_eq!(
            parse_outages("10s-12s,30s-30.5s").unwrap(),
            vec![
                (10_000_000_000, 12_000_000_000),
                (30_000_000_000, 30_500_000_000)
            ]
        );
        assert!(parse_delay_schedule("0s:20ms")
            .unwrap_err()
            .contains("TIME=DELAY"));
        assert!(parse_loss_schedule("0s=often")
            .unwrap_err()
            .starts_with("'0s=often':"));
        assert!(parse_outages("10s").unwrap_err().contains("START-END"));
        assert!(parse_outages("10s-x").unwrap_err().starts_with("'10s-x':"));
    }

    /// `mm-link`'s queue arguments, as its `get_arg` reads them.
    #[test]
    fn mm_link_queues() {
        let mut c = EmuConfig::default();
        apply_mm_queue(&mut c, "droptail", "packets=100, bytes=30000").unwrap();
        assert_eq!((c.limit_packets, c.limit_bytes), (Some(100), Some(30000)));
        assert_eq!(c.queue_drop, crate::emulate::QueueDrop::Tail);
        apply_mm_queue(&mut c, "drophead", "bytes=15000").unwrap();
        assert_eq!((c.limit_packets, c.limit_bytes), (None, Some(15000)));
        assert_eq!(c.queue_drop, crate::emulate::QueueDrop::Head);
        apply_mm_queue(&mut c, "infinite", "").unwrap();
        assert_eq!(c.limits(), crate::queue::fifo::Limits::UNLIMITED);
        let e = |k: &str, a: &str| apply_mm_queue(&mut EmuConfig::default(), k, a).unwrap_err();
        assert!(e("droptail", "").contains("needs a limit"));
        assert!(e("droptail", "packets=x").contains("not a whole number"));
        assert!(e("droptail", "packet=3").contains("not a queue argument"));
        assert!(e("droptail", "packets").contains("NAME=NUMBER"));
        apply_mm_queue(&mut c, "codel", "target=5, interval=100, packets=100").unwrap();
        let q = c.codel.unwrap();
        assert_eq!((q.target.0, q.interval.0), (5_000_000, 100_000_000));
        assert_eq!(c.limit_packets, Some(100));
        assert!(e("codel", "target=5, packets=10").contains("needs target=MS and interval=MS"));
        assert!(e("codel", "target=5, interval=100").contains("needs a limit"));
        assert!(e("pie", "qdelay_ref=20, max_burst=100").contains("no PIE"));
        assert!(e("droptail", "target=5").contains("packets= and bytes= only"));
        assert!(e("red", "").contains("not a queue type"));
        assert!(e("infinite", "packets=1").contains("no limit"));
    }

    #[test]
    fn probabilities() {
        assert_eq!(parse_prob("1%").unwrap(), 0.01);
        assert_eq!(parse_prob(" 0.5 % ").unwrap(), 0.005);
        assert_eq!(parse_prob("0.25").unwrap(), 0.25);
        assert!(parse_prob("101%").is_err());
        assert!(parse_prob("1.5").is_err());
        assert!(parse_prob("-1%").is_err());
        assert!(parse_prob("NaN").is_err());
        assert!(parse_prob("lots").unwrap_err().contains("percentage"));
    }

    #[test]
    fn loss_grammar() {
        assert_eq!(parse_loss("1%").unwrap(), LossModel::Bernoulli { p: 0.01 });
        assert_eq!(
            parse_loss("random 2%").unwrap(),
            LossModel::Bernoulli { p: 0.02 }
        );
        // seed 000's periodic loss rates: 0.5 % = every 200th packet, 8 % = every 12.5th → 13
        assert_eq!(
            parse_loss("periodic 0.5%").unwrap(),
            LossModel::Periodic { every: 200 }
        );
        assert_eq!(
            parse_loss("periodic 8%").unwrap(),
            LossModel::Periodic { every: 13 }
        );
        assert_eq!(
            parse_loss("every 100").unwrap(),
            LossModel::Periodic { every: 100 }
        );
        assert_eq!(
            parse_loss("gilbert 1% 25%").unwrap(),
            LossModel::gilbert(0.01, 0.25)
        );
        assert_eq!(
            parse_loss("ge 1% 25% 100% 10%").unwrap(),
            LossModel::GilbertElliott {
                p: 0.01,
                r: 0.25,
                k: 1.0,
                h: 0.1
            }
        );
        assert_eq!(parse_loss("none").unwrap(), LossModel::None);
        assert_eq!(parse_loss("periodic 0%").unwrap(), LossModel::None);
        assert!(parse_loss("every 0").unwrap_err().contains("N >= 1"));
        assert!(parse_loss("gilbert 1%")
            .unwrap_err()
            .contains("takes 2 values"));
        assert!(parse_loss("ge 1% 2% 3% x")
            .unwrap_err()
            .contains("P(deliver|bad)"));
        assert!(parse_loss("sometimes").unwrap_err().contains("expected"));
        assert_eq!(
            parse_loss("state 10%").unwrap(),
            LossModel::four_state(0.1, &[])
        );
        assert_eq!(
            parse_loss("state 5% 40% 10% 20% 1%").unwrap(),
            LossModel::four_state(0.05, &[0.4, 0.1, 0.2, 0.01])
        );
        assert!(parse_loss("state 5% 40% 10% 20% 1% 3%")
            .unwrap_err()
            .contains("expected"));
        assert!(parse_loss("state 60% 40% 70%")
            .unwrap_err()
            .contains("p31 + p32"));
        assert_eq!(
            parse_loss("random 10% 50%").unwrap(),
            LossModel::correlated(0.1, 0.5)
        );
        for m in [
            LossModel::Bernoulli { p: 0.015 },
            LossModel::Periodic { every: 7 },
            LossModel::gilbert(0.01, 0.3),
            LossModel::GilbertElliott {
                p: 0.01,
                r: 0.3,
                k: 0.99,
                h: 0.2,
            },
            LossModel::FourState {
                p13: 0.05,
                p31: 0.4,
                p32: 0.1,
                p23: 0.2,
                p14: 0.01,
            },
        ] {
            assert_eq!(parse_loss(&describe_loss(&m)).unwrap(), m, "round trip");
        }
    }

    #[test]
    fn jitter_distributions() {
        assert_eq!(
            parse_jitter(1000, "uniform").unwrap(),
            Jitter::Uniform { half_width: 1000 }
        );
        assert_eq!(
            parse_jitter(1000, "normal").unwrap(),
            Jitter::Normal { sigma: 1000 }
        );
        assert_eq!(
            parse_jitter(3000, "pareto").unwrap(),
            Jitter::Pareto {
                scale: 4000,
                alpha: 3.0
            }
        );
        assert!(parse_jitter(1, "gaussian").unwrap_err().contains("normal"));
    }

    #[test]
    fn describes_a_link() {
        let c = EmuConfig {
            rate_bps: Some(155_000_000),
            framing: Framing::plain(24),
            delay: Duration::from_millis(125),
            jitter: Jitter::Normal { sigma: 1_000_000 },
            loss: LossModel::Bernoulli { p: 0.01 },
            ..EmuConfig::default()
        };
        let d = describe(&c);
        assert!(d.contains("rate 155Mbit"), "{d}");
        assert!(d.contains("rate 155Mbit (+24 B/frame)"), "{d}");
        let atm = describe(&EmuConfig {
            framing: Framing::cake("pppoa-vcmux ethernet").unwrap(),
            ..c.clone()
        });
        assert!(
            atm.contains("rate 155Mbit (+34 B/frame, mpu 84 B, atm)"),
            "{atm}"
        );
        assert!(d.contains("delay 125ms σ 1ms normal"), "{d}");
        assert!(d.contains("loss random 1%"), "{d}");
        assert!(d.contains("bandwidth-delay product"), "{d}");
        assert_eq!(describe(&EmuConfig::default()), "transparent");
    }

    #[test]
    fn parses_a_command_line_schedule() {
        let c = parse_schedule("0s=8Mbit, 30s=2Mbit,60s=8Mbit").unwrap();
        let want = vec![
            (0, 8_000_000),
            (30_000_000_000, 2_000_000),
            (60_000_000_000, 8_000_000),
        ];
        assert_eq!(c, super::super::Capacity::schedule(want).unwrap());
        assert!(parse_schedule("0s:8Mbit")
            .unwrap_err()
            .contains("expected TIME=RATE"));
        assert!(parse_schedule("0s=8Mbps")
            .unwrap_err()
            .contains("'0s=8Mbps'"));
        assert!(parse_schedule("").unwrap_err().contains("at least one"));
        let d = describe(&EmuConfig {
            capacity: Some(c),
            ..EmuConfig::default()
        });
        assert!(
            d.contains("rate schedule of 3 points (2Mbit to 8Mbit, mean 5Mbit"),
            "{d}"
        );
    }
}
