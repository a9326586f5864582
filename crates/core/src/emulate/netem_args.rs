//! `weir emu --netem "…"`: a tc-netem argument string, as written for `tc qdisc add dev
//! DEV root netem …`, translated into an [`EmuConfig`] — or refused, naming the word the
//! translation stopped at. Sans-IO: distribution tables other than the ones weir computes
//! come from a caller-supplied lookup.
//!
//! The grammar is iproute2's (`tc/q_netem.c` `netem_parse_opt`, tc-netem(8)); keywords may
//! be abbreviated to any prefix, tried in iproute2's order (`d` is `delay`, `l` is
//! `limit`), and a whole `tc qdisc … netem …` line is accepted (the words up to `netem`
//! are skipped):
//!
//! ```text
//! limit PACKETS
//! delay|latency TIME [JITTER [CORRELATION]]   distribution NAME
//! loss|drop { [random] PERCENT [CORRELATION] | state P13 [P31 [P32 [P23 [P14]]]]
//!           | gemodel P [R [1-H [1-K]]] }     ecn
//! corrupt PERCENT [CORRELATION]               duplicate PERCENT [CORRELATION]
//! reorder PERCENT [CORRELATION]               gap DISTANCE
//! rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]]
//! slot { MIN [MAX] | distribution NAME DELAY JITTER } [packets N] [bytes SIZE]
//! seed N
//! ```
//!
//! Units as tc(8) reads them: times `s`/`sec`/`secs`, `ms`/`msec`/`msecs`,
//! `us`/`usec`/`usecs` or a bare number (microseconds), `ns`/`nsec`/`nsecs`; rates `bit` or
//! a bare number (bit/s), `kbit` `mbit` `gbit` `tbit` (SI), `kibit` … `tibit` (IEC), and
//! `bps` `kbps` `mbps` … in **bytes** per second (tc's `10mbps` is 80 Mbit/s), any case;
//! sizes `b` or bare (bytes), `k`/`kb`, `m`/`mb`, `g`/`gb` (×1024), `kbit` `mbit` `gbit`;
//! percentages `1.5%` or a bare number (also percent, as tc's `parse_percent`); integer
//! values decimal, `0x` hex or `0` octal. An optional argument is present when the next
//! word starts with a digit (`-` too for the overheads), as tc decides.
//!
//! Translation (netem → weir, see docs/emulator.md's table): `delay D J C` → `delay`,
//! `jitter` (uniform ±J; `distribution normal|pareto|paretonormal` weir's computed ones,
//! any other name a `.dist` table from the lookup), `jitter_correlation`; `loss P C` →
//! [`LossModel::correlated`]; `loss state` → [`LossModel::FourState`]; `loss gemodel p r
//! 1-h 1-k` → Gilbert–Elliott with `k = 1 − (1-k)`, `h = 1 − (1-h)` (iproute2's defaults
//! `r = 1 − p`, `1-h = 100 %`, `1-k = 0`); `corrupt`/`duplicate` with correlations;
//! `reorder P C gap N` → [`EmuConfig::reorder_early`]; `rate R OH CS CO` → `rate_bps` and
//! [`Framing::netem`]; `slot …` → [`EmuConfig::slot`]; `ecn` → `ecn`; `limit N` →
//! [`EmuConfig::limit_held`], netem's 1000 when not given (netem counts every packet it
//! holds, the delayed ones too), with the serialiser's own queue unlimited as netem's is;
//! `seed N` → [`Netem::seed`].
//!
//! Refused, as tc refuses them: a second loss, `gap` without `reorder`, `reorder` without
//! `delay`, `ecn` without a loss, `distribution` without both delay and jitter, a slot
//! distribution with a jitter ≤ 0, `slot MIN MAX` with MAX < MIN; and, beyond tc,
//! anything out of range (percentages outside 0–100 %, a 0 limit) and a rate as a
//! percentage of the device's speed (weir does not read it). Nothing panics on any input.

use super::dist::{Jitter, MAX_DELAY_NS};
use super::slot::{Slot, SlotGap};
use super::table::{c_integer, DistTable};
use super::{EmuConfig, LossModel, Reorder};
use crate::framing::Framing;
use crate::queue::fifo::Limits;
use crate::time::Duration;

/// netem's default `limit` (packets).
pub const NETEM_LIMIT: u32 = 1000;

/// A translated netem argument string.
#[derive(Clone, Debug, PartialEq)]
pub struct Netem {
    pub cfg: EmuConfig,
    /// `seed N`: the random number generator's seed, if given.
    pub seed: Option<u64>,
}

/// Why a netem argument string was refused: the word it stopped at (1-based position
/// among the netem arguments; 0 and an empty word when the string as a whole is wrong).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("netem: at '{word}' (word {index}): {what}")]
pub struct NetemError {
    pub word: String,
    pub index: usize,
    pub what: String,
}

/// Where a distribution table named `NAME` (not one weir computes) comes from: its file
/// read and parsed, or why not.
pub type TableLookup<'a> = dyn FnMut(&str) -> Result<DistTable, String> + 'a;

/// netem's keywords in `netem_parse_opt`'s order (prefix matching tries them in turn).
const KEYWORDS: [&str; 15] = [
    "limit",
    "latency",
    "delay",
    "loss",
    "drop",
    "ecn",
    "reorder",
    "corrupt",
    "gap",
    "duplicate",
    "distribution",
    "rate",
    "slot",
    "seed",
    "help",
];

/// iproute2's `matches`: `word` is a non-empty prefix of `keyword`.
fn matches(word: &str, keyword: &str) -> bool {
    !word.is_empty() && keyword.starts_with(word)
}

/// The numeric prefix of `s` (as `strtod` reads a decimal) and the rest.
fn split_float(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i == digits_start || (i == digits_start + 1 && b[digits_start] == b'.') {
        return None;
    }
    // an exponent only if digits follow
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let k = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > k {
            i = j;
        }
    }
    let v: f64 = s[..i].parse().ok()?;
    v.is_finite().then_some((v, &s[i..]))
}

struct Words<'a> {
    w: Vec<&'a str>,
    /// Index of the current word.
    i: usize,
    tables: &'a mut TableLookup<'a>,
}

type R<T> = Result<T, NetemError>;

impl<'a> Words<'a> {
    fn err_at(&self, i: usize, what: impl Into<String>) -> NetemError {
        NetemError {
            word: self.w.get(i).copied().unwrap_or("").to_string(),
            index: i + 1,
            what: what.into(),
        }
    }

    fn err(&self, what: impl Into<String>) -> NetemError {
        self.err_at(self.i, what)
    }

    fn cur(&self) -> &'a str {
        self.w.get(self.i).copied().unwrap_or("")
    }

    /// Move to the argument of the current word (tc's `NEXT_ARG`).
    fn next_arg(&mut self, of: &str) -> R<&'a str> {
        if self.i + 1 >= self.w.len() {
            return Err(self.err(format!("'{of}' needs an argument")));
        }
        self.i += 1;
        Ok(self.cur())
    }

    fn peek(&self) -> Option<&'a str> {
        self.w.get(self.i + 1).copied()
    }

    /// tc's `NEXT_IS_NUMBER`: the next word starts with a digit.
    fn next_is_number(&self) -> bool {
        self.peek()
            .is_some_and(|w| w.as_bytes()[0].is_ascii_digit())
    }

    /// tc's `NEXT_IS_SIGNED_NUMBER`: a digit or `-`.
    fn next_is_signed(&self) -> bool {
        self.peek()
            .is_some_and(|w| w.as_bytes()[0].is_ascii_digit() || w.starts_with('-'))
    }

    /// A percentage (`1.5%` or a bare `1.5`) as a fraction in [0, 1].
    fn percent(&self, what: &str) -> R<f64> {
        let w = self.cur();
        let (v, rest) = split_float(w)
            .ok_or_else(|| self.err(format!("{what}: expected a percentage like 1.5%")))?;
        if !(rest.is_empty() || rest == "%") {
            return Err(self.err(format!("{what}: expected a percentage like 1.5%")));
        }
        if !(0.0..=100.0).contains(&v) {
            return Err(self.err(format!("{what}: {v}% is outside 0%..100%")));
        }
        Ok(v / 100.0)
    }

    /// A time in ns (tc's units; a bare number is microseconds).
    fn time(&self, what: &str) -> R<u64> {
        let w = self.cur();
        let bad = || self.err(format!("{what}: expected a time like 100ms, 500us or 1s"));
        let (v, unit) = split_float(w).ok_or_else(bad)?;
        let mult = match unit.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" => 1e9,
            "ms" | "msec" | "msecs" => 1e6,
            "" | "us" | "usec" | "usecs" => 1e3,
            "ns" | "nsec" | "nsecs" => 1.0,
            _ => return Err(bad()),
        };
        let ns = (v * mult).round();
        if ns < 0.0 {
            return Err(self.err(format!("{what}: a time cannot be negative")));
        }
        if ns > MAX_DELAY_NS as f64 {
            return Err(self.err(format!("{what}: at most 1 hour")));
        }
        Ok(ns as u64)
    }

    /// A rate in bit/s (tc's units).
    fn rate(&self) -> R<u64> {
        let w = self.cur();
        if w.ends_with('%') {
            return Err(self.err(
                "a rate as a percentage of the device's speed is not supported; give a rate \
                 like 10mbit",
            ));
        }
        let bad = || self.err("rate: expected a rate like 10mbit, 512kbit or 1gbit");
        let (v, unit) = split_float(w).ok_or_else(bad)?;
        let u = unit.to_ascii_lowercase();
        let (prefix, bytes) = if let Some(p) = u.strip_suffix("bit") {
            (p, false)
        } else if let Some(p) = u.strip_suffix("bps") {
            (p, true)
        } else if u.is_empty() {
            ("", false)
        } else {
            return Err(bad());
        };
        let scale = match prefix {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            "t" => 1e12,
            "ki" => 1024.0,
            "mi" => 1024f64.powi(2),
            "gi" => 1024f64.powi(3),
            "ti" => 1024f64.powi(4),
            _ => return Err(bad()),
        };
        let bps = (v * scale * if bytes { 8.0 } else { 1.0 }).round();
        if !(8.0..=u64::MAX as f64).contains(&bps) {
            return Err(self.err("rate: must be at least 8 bit/s"));
        }
        Ok(bps as u64)
    }

    /// A size in bytes (tc's `get_size`).
    fn size(&self, what: &str) -> R<u64> {
        let w = self.cur();
        let bad = || self.err(format!("{what}: expected a size like 1000, 64kb or 1mb"));
        let (v, unit) = split_float(w).ok_or_else(bad)?;
        let mult = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" => 1024.0,
            "m" | "mb" => 1024f64.powi(2),
            "g" | "gb" => 1024f64.powi(3),
            "kbit" => 1024.0 / 8.0,
            "mbit" => 1024f64.powi(2) / 8.0,
            "gbit" => 1024f64.powi(3) / 8.0,
            _ => return Err(bad()),
        };
        let b = (v * mult).floor();
        if !(0.0..=u32::MAX as f64).contains(&b) {
            return Err(self.err(format!("{what}: must be within 0..=4294967295 bytes")));
        }
        Ok(b as u64)
    }

    /// An integer value (decimal, `0x` hex, `0` octal) in `lo..=hi`.
    fn int(&self, what: &str, lo: i64, hi: i64) -> R<i64> {
        match c_integer(self.cur()) {
            Some(v) if (lo..=hi).contains(&v) => Ok(v),
            Some(v) => Err(self.err(format!("{what}: {v} is outside {lo}..={hi}"))),
            None => Err(self.err(format!("{what}: expected a whole number"))),
        }
    }

    /// An optional correlation after a percentage.
    fn correlation(&mut self, what: &str) -> R<f64> {
        if self.next_is_number() {
            self.i += 1;
            self.percent(&format!("{what} correlation"))
        } else {
            Ok(0.0)
        }
    }

    /// The jitter distribution `name` with width `ns`.
    fn distribution(&mut self, at: usize, name: &str, ns: u64) -> R<Jitter> {
        let j = match name {
            "uniform" => Jitter::Uniform { half_width: ns },
            "normal" => Jitter::Normal { sigma: ns },
            "pareto" => Jitter::netem_pareto(ns),
            "paretonormal" => Jitter::ParetoNormal { sigma: ns },
            other => Jitter::Table {
                sigma: ns,
                table: (self.tables)(other).map_err(|e| self.err_at(at, e))?,
            },
        };
        j.validate().map_err(|e| self.err_at(at, e.to_string()))?;
        Ok(j)
    }
}

/// Translate netem arguments `args` (see the module comment); `tables` reads the
/// distribution tables weir does not compute.
pub fn parse(args: &str, tables: &mut TableLookup<'_>) -> Result<Netem, NetemError> {
    let all: Vec<&str> = args.split_whitespace().collect();
    let start = match all.iter().position(|&w| w == "netem") {
        Some(i) => i + 1,
        None if all.first() == Some(&"tc") => {
            // a tc command for another qdisc: name its kind (the word after the handle
            // or parent and their values, i.e. the first word tc does not take itself)
            let kind = all
                .iter()
                .enumerate()
                .skip(1)
                .find(|&(i, w)| {
                    !matches!(
                        *w,
                        "qdisc"
                            | "add"
                            | "change"
                            | "replace"
                            | "del"
                            | "link"
                            | "dev"
                            | "root"
                            | "parent"
                            | "handle"
                            | "ingress"
                            | "clsact"
                    ) && !matches!(all[i - 1], "dev" | "parent" | "handle")
                })
                .map_or(0, |(i, _)| i);
            return Err(NetemError {
                word: all.get(kind).copied().unwrap_or("").to_string(),
                index: kind + 1,
                what: "not a netem qdisc: only netem's arguments translate".into(),
            });
        }
        None => 0,
    };
    let mut w = Words {
        w: all[start..].to_vec(),
        i: 0,
        tables,
    };
    let mut cfg = EmuConfig {
        limit_packets: Some(Limits::UNLIMITED_PACKETS),
        limit_held: Some(NETEM_LIMIT),
        ..EmuConfig::default()
    };
    let mut seed = None;
    let mut jitter_ns = 0u64;
    let mut dist: Option<(usize, &str)> = None;
    let mut loss_at: Option<usize> = None;
    let mut ecn_at: Option<usize> = None;
    let mut gap: Option<(usize, u32)> = None;
    let mut reorder: Option<(usize, f64, f64)> = None;
    let mut rate_framing = (0i32, 0u32, 0i32);
    while w.i < w.w.len() {
        let word = w.cur();
        let Some(&kw) = KEYWORDS.iter().find(|k| matches(word, k)) else {
            return Err(w.err(format!(
                "not a netem option weir knows; expected one of {}",
                KEYWORDS[..KEYWORDS.len() - 1].join(", ")
            )));
        };
        match kw {
            "limit" => {
                w.next_arg(kw)?;
                let n = w.size("limit")?;
                if n == 0 {
                    return Err(w.err("limit: 0 packets would refuse every packet"));
                }
                cfg.limit_held = Some(n as u32);
            }
            "latency" | "delay" => {
                w.next_arg(kw)?;
                cfg.delay = Duration(w.time("delay")?);
                if w.next_is_number() {
                    w.i += 1;
                    jitter_ns = w.time("jitter")?;
                    cfg.jitter_correlation = w.correlation("delay")?;
                }
            }
            "loss" | "drop" => {
                if loss_at.is_some() {
                    return Err(w.err("a second loss: netem takes one loss model"));
                }
                loss_at = Some(w.i);
                let model = w.next_arg(kw)?;
                cfg.loss = if model.as_bytes()[0].is_ascii_digit() || model == "random" {
                    if model == "random" {
                        w.next_arg("loss random")?;
                    }
                    let p = w.percent("loss")?;
                    let c = w.correlation("loss")?;
                    LossModel::correlated(p, c)
                } else if model == "state" {
                    w.next_arg("loss state")?;
                    let p13 = w.percent("loss state p13")?;
                    let mut rest = Vec::new();
                    for name in ["p31", "p32", "p23", "p14"] {
                        if !w.next_is_number() {
                            break;
                        }
                        w.i += 1;
                        rest.push(w.percent(&format!("loss state {name}"))?);
                    }
                    LossModel::four_state(p13, &rest)
                } else if model == "gemodel" {
                    w.next_arg("loss gemodel")?;
                    let p = w.percent("loss gemodel p")?;
                    let mut v = [1.0 - p, 1.0, 0.0]; // r, 1-h, 1-k
                    for (k, name) in ["r", "1-h", "1-k"].iter().enumerate() {
                        if !w.next_is_number() {
                            break;
                        }
                        w.i += 1;
                        v[k] = w.percent(&format!("loss gemodel {name}"))?;
                    }
                    LossModel::GilbertElliott {
                        p,
                        r: v[0],
                        k: 1.0 - v[2],
                        h: 1.0 - v[1],
                    }
                } else {
                    return Err(
                        w.err("not a loss model; expected a percentage, random, state or gemodel")
                    );
                };
                cfg.loss
                    .validate()
                    .map_err(|e| w.err_at(loss_at.unwrap_or(0), e.to_string()))?;
            }
            "ecn" => {
                ecn_at = Some(w.i);
                cfg.ecn = true;
            }
            "reorder" => {
                let at = w.i;
                w.next_arg(kw)?;
                let p = w.percent("reorder")?;
                let c = w.correlation("reorder")?;
                reorder = Some((at, p, c));
            }
            "corrupt" => {
                w.next_arg(kw)?;
                cfg.corrupt = w.percent("corrupt")?;
                cfg.corrupt_correlation = w.correlation("corrupt")?;
            }
            "duplicate" => {
                w.next_arg(kw)?;
                cfg.duplicate = w.percent("duplicate")?;
                cfg.duplicate_correlation = w.correlation("duplicate")?;
            }
            "gap" => {
                let at = w.i;
                w.next_arg(kw)?;
                gap = Some((at, w.int("gap", 0, u32::MAX.into())? as u32));
            }
            "distribution" => {
                let name = w.next_arg(kw)?;
                dist = Some((w.i, name));
            }
            "rate" => {
                w.next_arg(kw)?;
                cfg.rate_bps = Some(w.rate()?);
                if w.next_is_signed() {
                    w.i += 1;
                    rate_framing.0 = w.int("rate packet overhead", -4096, 4096)? as i32;
                    if w.next_is_number() {
                        w.i += 1;
                        rate_framing.1 = w.int("rate cell size", 0, 65535)? as u32;
                        if w.next_is_signed() {
                            w.i += 1;
                            rate_framing.2 = w.int("rate cell overhead", -127, 127)? as i32;
                        }
                    }
                }
                let (o, s, c) = rate_framing;
                cfg.framing = Framing::netem(o, s, c).map_err(|e| w.err(e.to_string()))?;
            }
            "slot" => cfg.slot = Some(parse_slot(&mut w)?),
            "seed" => {
                w.next_arg(kw)?;
                seed = Some(w.int("seed", 0, i64::MAX)? as u64);
            }
            _ => return Err(w.err("help is not an option here; see tc-netem(8)")),
        }
        w.i += 1;
    }
    if jitter_ns > 0 {
        cfg.jitter = match dist {
            Some((at, name)) => w.distribution(at, name, jitter_ns)?,
            None => Jitter::Uniform {
                half_width: jitter_ns,
            },
        };
    } else if let Some((at, _)) = dist {
        return Err(w.err_at(
            at - 1,
            "distribution specified but no delay and jitter values (delay TIME JITTER)",
        ));
    }
    if let Some((at, p, c)) = reorder {
        if cfg.delay.0 == 0 {
            return Err(w.err_at(at, "reordering not possible without specifying some delay"));
        }
        cfg.reorder_early = Reorder {
            probability: p,
            correlation: c,
            gap: gap.map_or(1, |g| g.1.max(1)),
        };
    } else if let Some((at, g)) = gap {
        if g > 0 {
            return Err(w.err_at(at, "gap specified without reorder probability"));
        }
    }
    if let Some(at) = ecn_at {
        if cfg.loss == LossModel::None || cfg.loss == (LossModel::Bernoulli { p: 0.0 }) {
            return Err(w.err_at(at, "ecn requested without loss model"));
        }
    }
    cfg.validate()
        .map_err(|e| w.err_at(w.w.len().saturating_sub(1), e.to_string()))?;
    Ok(Netem { cfg, seed })
}

/// `slot { MIN [MAX] | distribution NAME DELAY JITTER } [packets N] [bytes SIZE]`, the
/// current word being `slot`.
fn parse_slot(w: &mut Words<'_>) -> R<Slot> {
    let gap = if w.next_is_number() {
        w.i += 1;
        let min = w.time("slot min")?;
        let max = if w.next_is_number() {
            w.i += 1;
            let max = w.time("slot max")?;
            if max < min {
                return Err(w.err(format!("slot max {max} ns is below slot min {min} ns")));
            }
            max
        } else {
            min
        };
        SlotGap::Uniform { min, max }
    } else {
        let sub = w.next_arg("slot")?;
        if sub != "distribution" {
            return Err(w.err("unknown slot parameter; expected a time or 'distribution'"));
        }
        let at = w.i + 1;
        let name = w.next_arg("slot distribution")?;
        w.next_arg("slot distribution")?;
        let delay = w.time("slot delay")?;
        w.next_arg("slot distribution")?;
        let jitter = w.time("slot jitter")?;
        if jitter == 0 {
            return Err(w.err("slot jitter: must be positive"));
        }
        let jitter = w.distribution(at, name, jitter)?;
        SlotGap::Dist { delay, jitter }
    };
    let mut slot = Slot {
        gap,
        packets: None,
        bytes: None,
    };
    if w.peek().is_some_and(|p| matches(p, "packets")) {
        w.i += 1;
        w.next_arg("slot packets")?;
        let n = w.int("slot packets", 0, i32::MAX.into())?;
        slot.packets = (n > 0).then_some(n as u32);
    }
    if w.peek().is_some_and(|p| matches(p, "bytes")) {
        w.i += 1;
        w.next_arg("slot bytes")?;
        let b = w.size("slot bytes")?.min(i32::MAX as u64);
        slot.bytes = (b > 0).then_some(b);
    }
    if matches!(slot.gap, SlotGap::Uniform { min: 0, max: 0 }) {
        return Err(w.err("slot 0 0 opens no slots (netem ignores it); leave it out"));
    }
    Ok(slot)
}

#[cfg(test)]
mod tests;
