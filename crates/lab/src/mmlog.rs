//! Mahimahi's mm-link log: a reader, the summary of `mm-throughput-graph` and
//! `mm-delay-graph`, their binned and per-packet series, and their two graphs as SVG.
//!
//! # The format (Mahimahi `src/frontend/link_queue.cc`)
//!
//! Header lines start with `#`: `# mahimahi mm-link (…) [trace] > log`, `# command line: …`,
//! `# queue: …`, `# init timestamp: N`, `# base timestamp: N`, `# mahimahi config: …`. Then
//! one event a line, times in whole milliseconds of the emulator's clock:
//!
//! | line | event |
//! |---|---|
//! | `T + BYTES` | a packet of BYTES arrived at the link's queue |
//! | `T # BYTES` | a delivery opportunity of BYTES (capacity; mm-link: 1500 a line of its trace) |
//! | `T - BYTES DELAY` | a packet left the link; DELAY ms since it arrived (queue and serialisation) |
//! | `T d PACKETS BYTES` | the queue dropped PACKETS packets of BYTES bytes in all (mm-link since 2018) |
//!
//! [`parse`] needs `# base timestamp: N` before the first event and subtracts it from every
//! time (as the scripts do, "to correct for startup time variation"); a time before the base,
//! a departure whose DELAY reaches back before it, a repeated base, an unknown event, a
//! missing or non-numeric field (times, bytes, delays, packets are whole non-negative
//! numbers) or a field too many is refused as `name:line: what was found, what was expected`.
//! Blank lines are skipped. `d` lines are read and counted (Mahimahi's own
//! `mm-throughput-graph` stops at them with "Unknown event type").
//!
//! # The statistics (as `scripts/mm-throughput-graph` computes them)
//!
//! * first = the time of the first event line (in file order), last = the largest time;
//!   duration = (last − first) / 1000 s. Every event, a drop too, counts here.
//! * average capacity, ingress, throughput = bits of the `#`, `+`, `-` lines / duration,
//!   in Mbit/s (10⁶ bit/s); utilisation = 100 · throughput / capacity (%).
//! * 95th percentile per-packet queueing delay: the departures' DELAYs sorted ascending,
//!   the value at 0-based index ⌊0.95 · n⌋ ([`mm_rank`]; the script indexes a Perl array
//!   with the product, which truncates). Not numpy's interpolation (`stats::dist`).
//! * 95th percentile signal delay, "the minimum time for a message created at time t to get
//!   to the receiver", per millisecond: for each send time s = T − DELAY of a departure,
//!   the smallest DELAY of the packets sent at s; for a millisecond s between the first and
//!   the last send time at which no packet was sent, the value of s + 1 plus 1 (it waits
//!   for the next packet sent). The 95th percentile of these per-ms values (same rank rule).
//!   A send time k with value v that follows the previous send time by g + 1 ms
//!   contributes the run v, v+1, …, v+g, so the percentile is found by a binary search on
//!   the value over these runs ([`SignalDelay::percentile`]) without one entry per ms: a
//!   log spanning 10¹⁸ ms costs no more than one spanning 1 s.
//! * weir adds: packets of each kind, dropped packets and bytes.
//!
//! A figure the script cannot compute (it divides by zero or has no departure) is `None`.
//!
//! # The series
//!
//! * [`MmLog::bins`] (`mm-throughput-graph`'s plot): bin = ⌊T / MS_PER_BIN⌋ (default 500
//!   ms); from the earliest to the latest bin holding a `+`, `#` or `-` event (empty bins
//!   0), capacity, arrivals and departures each bits / (MS_PER_BIN / 1000) / 10⁶ Mbit/s,
//!   at t = bin · MS_PER_BIN / 1000 s. At most [`MAX_BINS`] bins (a larger count is refused
//!   with the smallest MS_PER_BIN that fits).
//! * `mm-delay-graph`'s plot: each departure's DELAY at its send time (T − DELAY) as a dot,
//!   and the signal delay as a shaded area, with the two 95th percentiles as lines across
//!   ([`delay_svg`]). The signal-delay series holds only its corners
//!   ([`SignalDelay::points`]): between them it is the straight line the script draws.
//! * The graphs are drawn by `report::line_chart` ([`throughput_svg`], [`delay_svg`]); the
//!   delay axis is linear from 0 (the script's is logarithmic from min(30, median)).
//!
//! # Invariants
//!
//! No input panics [`parse`] (property-tested on arbitrary text); a parsed log has every
//! departure's DELAY ≤ its T. Sums are in `u64` saturating (bytes) and `f64` (bits).

use std::fmt;

use serde::Serialize;

use crate::report::{line_chart, ChartOpts, Mark, Series};

/// Bin width of `mm-throughput-graph`'s plot when none is given (its usage example), ms.
pub const DEFAULT_MS_PER_BIN: u64 = 500;

/// The most bins [`MmLog::bins`] makes (2²⁰: 6 days at 500 ms, 17 min at 1 ms).
pub const MAX_BINS: u64 = 1 << 20;

/// What an event line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmKind {
    /// `+`: a packet arrived at the queue.
    Arrival,
    /// `#`: a delivery opportunity.
    Opportunity,
    /// `-`: a packet departed after `delay_ms` in the link.
    Departure { delay_ms: u64 },
    /// `d`: the queue dropped `packets` packets (`bytes` of the event in all).
    Drop { packets: u64 },
}

/// One event line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmEvent {
    /// ms since the base timestamp.
    pub t_ms: u64,
    pub bytes: u64,
    pub kind: MmKind,
}

/// A parsed mm-link log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MmLog {
    /// The name it was read under (a file name), for titles.
    pub name: String,
    /// `# base timestamp: N`, ms of the emulator's clock; every event's time is relative to it.
    pub base_timestamp: u64,
    /// `# init timestamp: N`, when the emulator started, ms of the same clock.
    pub init_timestamp: Option<u64>,
    /// `# queue: …` (e.g. `droptail [bytes=150000]`, `infinite`).
    pub queue: Option<String>,
    /// `# command line: …`.
    pub command_line: Option<String>,
    /// The other header lines as written (`# mahimahi mm-link (uplink) …`).
    pub other_headers: Vec<String>,
    /// The events in file order.
    pub events: Vec<MmEvent>,
}

/// `mm-throughput-graph`'s figures and weir's counts (see the module comment).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct MmSummary {
    /// Time of the first event line, ms after the base; `None` without events.
    pub first_ms: Option<u64>,
    /// The largest event time, ms after the base.
    pub last_ms: Option<u64>,
    /// (last − first) / 1000, s.
    pub duration_s: Option<f64>,
    /// Mbit/s of delivery opportunities; `None` when the duration is 0.
    pub capacity_mbps: Option<f64>,
    /// Mbit/s of arrivals.
    pub ingress_mbps: Option<f64>,
    /// Mbit/s of departures.
    pub throughput_mbps: Option<f64>,
    /// 100 · throughput / capacity; `None` without capacity.
    pub utilization_pct: Option<f64>,
    /// 95th percentile of the departures' delays, ms; `None` without departures.
    pub queue_delay_p95_ms: Option<u64>,
    /// 95th percentile of the per-ms signal delay, ms; `None` without departures.
    pub signal_delay_p95_ms: Option<u64>,
    pub opportunities: u64,
    pub capacity_bytes: u64,
    pub arrivals: u64,
    pub arrival_bytes: u64,
    pub departures: u64,
    pub departure_bytes: u64,
    /// Packets the `d` lines report dropped.
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
}

/// `mm-throughput-graph`'s lines in its wording (`Average capacity: 11.97 Mbits/s`, …), an
/// `Average ingress` line (its plot's legend gives it), `n/a (why)` where it could not
/// compute a figure, and weir's drop line.
impl fmt::Display for MmSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.duration_s {
            None => "n/a (no events)",
            Some(_) => "n/a (the log spans 0 ms)",
        };
        let mean = |v: Option<f64>| v.map_or(why.to_string(), |v| format!("{v:.2} Mbits/s"));
        writeln!(f, "Average capacity: {}", mean(self.capacity_mbps))?;
        writeln!(f, "Average ingress: {}", mean(self.ingress_mbps))?;
        write!(f, "Average throughput: {}", mean(self.throughput_mbps))?;
        match (self.throughput_mbps, self.utilization_pct) {
            (Some(_), Some(u)) => writeln!(f, " ({u:.1}% utilization)")?,
            (Some(_), None) => writeln!(f, " (utilization n/a: no delivery opportunities)")?,
            (None, _) => writeln!(f)?,
        }
        let p95 = |v: Option<u64>| v.map_or("n/a (no departures)".into(), |v| format!("{v} ms"));
        writeln!(
            f,
            "95th percentile per-packet queueing delay: {}",
            p95(self.queue_delay_p95_ms)
        )?;
        writeln!(
            f,
            "95th percentile signal delay: {}",
            p95(self.signal_delay_p95_ms)
        )?;
        write!(
            f,
            "Dropped: {} packets, {} bytes",
            self.dropped_packets, self.dropped_bytes
        )?;
        if self.arrivals > 0 {
            let pct = 100.0 * self.dropped_packets as f64 / self.arrivals as f64;
            write!(f, " ({pct:.1}% of arrivals)")?;
        }
        Ok(())
    }
}

/// One bin of [`MmLog::bins`]: rates in Mbit/s over the bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MmBin {
    /// Start of the bin, s after the base.
    pub t_s: f64,
    pub capacity_mbps: f64,
    pub arrivals_mbps: f64,
    pub departures_mbps: f64,
}

/// Read an mm-link log. `name` (a file name) prefixes every error: `name:line: …`.
pub fn parse(name: &str, text: &str) -> Result<MmLog, String> {
    let mut log = MmLog {
        name: name.to_string(),
        ..MmLog::default()
    };
    let mut base: Option<(u64, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        let err = |msg: String| format!("{name}:{at}: {msg}");
        if let Some(h) = line.strip_prefix('#') {
            let h = h.trim();
            if let Some(v) = h.strip_prefix("base timestamp:") {
                if let Some((_, first)) = base {
                    return Err(err(format!(
                        "a second `# base timestamp` (the first is on line {first})"
                    )));
                }
                base = Some((header_ms(v, "base").map_err(err)?, at));
            } else if let Some(v) = h.strip_prefix("init timestamp:") {
                log.init_timestamp = Some(header_ms(v, "init").map_err(err)?);
            } else if let Some(v) = h.strip_prefix("queue:") {
                log.queue = Some(v.trim().to_string());
            } else if let Some(v) = h.strip_prefix("command line:") {
                log.command_line = Some(v.trim().to_string());
            } else {
                log.other_headers.push(line.to_string());
            }
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let event = parse_event(&f, base.map(|b| b.0)).map_err(err)?;
        log.events.push(event);
    }
    match base {
        Some((b, _)) => log.base_timestamp = b,
        None => {
            return Err(format!(
                "{name}: no `# base timestamp: N` header (mm-link writes one at the top of its log)"
            ))
        }
    }
    Ok(log)
}

/// Text of the log quoted in a message: control characters escaped, at most 40 characters.
fn shown(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(40)
        .collect::<String>()
        .escape_debug()
        .collect();
    if s.chars().nth(40).is_some() {
        out.push('…');
    }
    out
}

/// The number of a `# WHICH timestamp: N` header.
fn header_ms(v: &str, which: &str) -> Result<u64, String> {
    let v = v.trim();
    v.parse::<u64>().map_err(|_| {
        format!(
            "`# {which} timestamp: {}`: expected a whole number of milliseconds",
            shown(v)
        )
    })
}

/// One event line split into fields, with the base timestamp read so far.
fn parse_event(f: &[&str], base: Option<u64>) -> Result<MmEvent, String> {
    const KINDS: &str = "`+` (arrival), `#` (delivery opportunity), `-` (departure) or `d` (drop)";
    let Some(&kind) = f.get(1) else {
        return Err(format!(
            "`{}`: expected `TIME EVENT BYTES [DELAY]`, e.g. `1042 - 1500 23`",
            shown(f[0])
        ));
    };
    let (form, arity) = match kind {
        "+" => ("TIME + BYTES", 3),
        "#" => ("TIME # BYTES", 3),
        "-" => ("TIME - BYTES DELAY", 4),
        "d" => ("TIME d PACKETS BYTES", 4),
        _ => return Err(format!("unknown event `{}`: expected {KINDS}", shown(kind))),
    };
    if f.len() != arity {
        let what = if kind == "-" && f.len() == 3 {
            "a departure without its delay: "
        } else {
            ""
        };
        return Err(format!(
            "{what}expected `{form}`, found {} field{}",
            f.len(),
            if f.len() == 1 { "" } else { "s" }
        ));
    }
    let num = |i: usize, what: &str| {
        f[i].parse::<u64>().map_err(|_| {
            format!(
                "`{}` in `{form}`: expected {what} (a whole number ≥ 0)",
                shown(f[i])
            )
        })
    };
    let raw_t = num(0, "the time in ms")?;
    let Some(base) = base else {
        return Err(
            "an event before the `# base timestamp: N` header (mm-link writes it first)".into(),
        );
    };
    let Some(t_ms) = raw_t.checked_sub(base) else {
        return Err(format!("time {raw_t} is before the base timestamp {base}"));
    };
    let (bytes, kind) = match kind {
        "+" => (num(2, "bytes")?, MmKind::Arrival),
        "#" => (num(2, "bytes")?, MmKind::Opportunity),
        "-" => {
            let bytes = num(2, "bytes")?;
            let delay_ms = num(3, "the delay in ms")?;
            if delay_ms > t_ms {
                return Err(format!(
                    "departure at {t_ms} ms after the base with a delay of {delay_ms} ms: it would have arrived before the base timestamp"
                ));
            }
            (bytes, MmKind::Departure { delay_ms })
        }
        _ => {
            let packets = num(2, "packets")?;
            (num(3, "bytes")?, MmKind::Drop { packets })
        }
    };
    Ok(MmEvent { t_ms, bytes, kind })
}

/// `mm-throughput-graph`'s rank for percentile `p` (0..1) of `n` sorted values: the 0-based
/// index ⌊p · n⌋ computed in `f64` as Perl does (0.95 · 20 = 19, the largest of 20), at most
/// n − 1. `None` for n = 0.
pub fn mm_rank(n: u128, p: f64) -> Option<u128> {
    if n == 0 {
        return None;
    }
    Some(((p * n as f64) as u128).min(n - 1))
}

/// `mm-throughput-graph`'s percentile of `values` ([`mm_rank`]); reorders them.
fn mm_percentile(values: &mut [u64], p: f64) -> Option<u64> {
    let i = mm_rank(values.len() as u128, p)? as usize;
    Some(*values.select_nth_unstable(i).1)
}

/// The per-millisecond signal delay of a log, held as its defined points: for each send
/// time (ms, ascending) the smallest delay of the packets sent then.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SignalDelay {
    sent: Vec<(u64, u64)>,
}

impl SignalDelay {
    /// From the departures of `log`.
    pub fn of(log: &MmLog) -> SignalDelay {
        let mut sent: Vec<(u64, u64)> = log
            .events
            .iter()
            .filter_map(|e| match e.kind {
                MmKind::Departure { delay_ms } => Some((e.t_ms.saturating_sub(delay_ms), delay_ms)),
                _ => None,
            })
            .collect();
        sent.sort_unstable();
        sent.dedup_by_key(|p| p.0); // sorted by (time, delay): the first is the smallest
        SignalDelay { sent }
    }

    /// The runs of values: (v, g) for v, v+1, …, v+g (see the module comment).
    fn runs(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        let mut prev: Option<u64> = None;
        self.sent.iter().map(move |&(k, v)| {
            let g = prev.map_or(0, |p| u128::from(k - p) - 1);
            prev = Some(k);
            (u128::from(v), g)
        })
    }

    /// Milliseconds from the first to the last send time, both included (0 when empty).
    pub fn len_ms(&self) -> u128 {
        match (self.sent.first(), self.sent.last()) {
            (Some(a), Some(b)) => u128::from(b.0 - a.0) + 1,
            _ => 0,
        }
    }

    /// Percentile `p` (0..1) of the per-ms values by [`mm_rank`]; `None` when empty. The
    /// smallest value x with more than rank values ≤ x, by binary search on x: a run (v, g)
    /// holds min(g + 1, max(0, x − v + 1)) values ≤ x.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let rank = mm_rank(self.len_ms(), p)?;
        let at_most = |x: u128| -> u128 {
            self.runs()
                .map(|(v, g)| (x + 1).saturating_sub(v).min(g + 1))
                .sum()
        };
        let mut lo = self.runs().map(|r| r.0).min()?;
        let mut hi = self.runs().map(|(v, g)| v + g).max()?;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at_most(mid) > rank {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(u64::try_from(lo).unwrap_or(u64::MAX))
    }

    /// The series' corners (send time ms, delay ms): at each send time its value, and where
    /// milliseconds without a packet precede it, the first of them (value + gap). A line
    /// through them is the per-ms series.
    pub fn points(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.sent.len() * 2);
        let mut prev: Option<u64> = None;
        for &(k, v) in &self.sent {
            if let Some(p) = prev.filter(|&p| k - p > 1) {
                out.push((p + 1, v.saturating_add(k - p - 1)));
            }
            out.push((k, v));
            prev = Some(k);
        }
        out
    }
}

impl MmLog {
    /// `mm-throughput-graph`'s figures (and weir's counts).
    pub fn summary(&self) -> MmSummary {
        let mut s = MmSummary {
            first_ms: self.events.first().map(|e| e.t_ms),
            last_ms: self.events.iter().map(|e| e.t_ms).max(),
            ..MmSummary::default()
        };
        let mut delays = Vec::new();
        for e in &self.events {
            let (n, b) = match e.kind {
                MmKind::Arrival => (&mut s.arrivals, &mut s.arrival_bytes),
                MmKind::Opportunity => (&mut s.opportunities, &mut s.capacity_bytes),
                MmKind::Departure { delay_ms } => {
                    delays.push(delay_ms);
                    (&mut s.departures, &mut s.departure_bytes)
                }
                MmKind::Drop { packets } => {
                    s.dropped_packets = s.dropped_packets.saturating_add(packets);
                    s.dropped_bytes = s.dropped_bytes.saturating_add(e.bytes);
                    continue;
                }
            };
            *n += 1;
            *b = b.saturating_add(e.bytes);
        }
        if let (Some(first), Some(last)) = (s.first_ms, s.last_ms) {
            let duration = last.saturating_sub(first) as f64 / 1000.0;
            s.duration_s = Some(duration);
            if duration > 0.0 {
                let mbps = |bytes: u64| bytes as f64 * 8.0 / duration / 1e6;
                s.capacity_mbps = Some(mbps(s.capacity_bytes));
                s.ingress_mbps = Some(mbps(s.arrival_bytes));
                s.throughput_mbps = Some(mbps(s.departure_bytes));
                if s.capacity_bytes > 0 {
                    s.utilization_pct =
                        Some(100.0 * mbps(s.departure_bytes) / mbps(s.capacity_bytes));
                }
            }
        }
        s.queue_delay_p95_ms = mm_percentile(&mut delays, 0.95);
        s.signal_delay_p95_ms = SignalDelay::of(self).percentile(0.95);
        s
    }

    /// `mm-throughput-graph`'s plot data: bins of `ms_per_bin` ms (see the module comment).
    /// Empty without `+`, `#` or `-` events.
    pub fn bins(&self, ms_per_bin: u64) -> Result<Vec<MmBin>, String> {
        if ms_per_bin == 0 {
            return Err("a bin of 0 ms: expected at least 1".into());
        }
        let binned = |e: &&MmEvent| !matches!(e.kind, MmKind::Drop { .. });
        let times = || self.events.iter().filter(binned).map(|e| e.t_ms);
        let (Some(t_lo), Some(t_hi)) = (times().min(), times().max()) else {
            return Ok(Vec::new());
        };
        let lo = t_lo / ms_per_bin;
        let n = t_hi / ms_per_bin - lo + 1;
        if n > MAX_BINS {
            // n ≤ ⌊span / w⌋ + 2, which is ≤ MAX_BINS when w > span / (MAX_BINS − 1)
            return Err(format!(
                "{n} bins of {ms_per_bin} ms: more than {MAX_BINS}; use bins of at least {} ms",
                (t_hi - t_lo) / (MAX_BINS - 1) + 1
            ));
        }
        let mut bits = vec![[0.0f64; 3]; n as usize];
        for e in self.events.iter().filter(binned) {
            let col = match e.kind {
                MmKind::Opportunity => 0,
                MmKind::Arrival => 1,
                _ => 2,
            };
            bits[(e.t_ms / ms_per_bin - lo) as usize][col] += e.bytes as f64 * 8.0;
        }
        let secs = ms_per_bin as f64 / 1000.0;
        Ok(bits
            .iter()
            .enumerate()
            .map(|(i, b)| MmBin {
                t_s: (lo + i as u64) as f64 * secs,
                capacity_mbps: b[0] / secs / 1e6,
                arrivals_mbps: b[1] / secs / 1e6,
                departures_mbps: b[2] / secs / 1e6,
            })
            .collect())
    }

    /// `mm-delay-graph`'s dots: (send time ms, delay ms) of each departure, in file order.
    pub fn packet_delays(&self) -> Vec<(u64, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e.kind {
                MmKind::Departure { delay_ms } => Some((e.t_ms.saturating_sub(delay_ms), delay_ms)),
                _ => None,
            })
            .collect()
    }
}

/// What both graphs share: the scripts' size (1024 × 560) and x range (first to last
/// event, s), y from 0.
fn graph_opts(s: &MmSummary) -> ChartOpts {
    let x_range = match (s.first_ms, s.last_ms) {
        (Some(a), Some(b)) => Some((a as f64 / 1000.0, b as f64 / 1000.0)),
        _ => None,
    };
    ChartOpts {
        width: 1024,
        height: 560,
        x_range,
        y_include_zero: true,
        ..ChartOpts::default()
    }
}

fn fmt_mean(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2} Mbits/s"))
}

/// `mm-throughput-graph`'s graph: capacity shaded, arrivals and departures per bin against
/// time (s), Mbit/s, each labelled with its mean.
pub fn throughput_svg(log: &MmLog, s: &MmSummary, bins: &[MmBin]) -> String {
    let col = |f: fn(&MmBin) -> f64| bins.iter().map(|b| (b.t_s, f(b))).collect();
    let series = [
        Series::new(
            format!("Capacity (mean {})", fmt_mean(s.capacity_mbps)),
            col(|b| b.capacity_mbps),
        )
        .with_mark(Mark::Area),
        Series::new(
            format!("Ingress (mean {})", fmt_mean(s.ingress_mbps)),
            col(|b| b.arrivals_mbps),
        ),
        Series::new(
            format!("Egress (mean {})", fmt_mean(s.throughput_mbps)),
            col(|b| b.departures_mbps),
        ),
    ];
    let opts = graph_opts(s);
    line_chart(
        &format!("{}: throughput", log.name),
        "time (s)",
        "throughput (Mbits/s)",
        &series,
        &opts,
    )
}

/// `mm-delay-graph`'s graph: the signal delay shaded, each packet's delay as a dot at its
/// send time, and the two 95th percentiles as lines across; ms against time (s).
pub fn delay_svg(log: &MmLog, s: &MmSummary) -> String {
    let secs = |pts: Vec<(u64, u64)>| -> Vec<(f64, f64)> {
        pts.into_iter()
            .map(|(t, d)| (t as f64 / 1000.0, d as f64))
            .collect()
    };
    let mut series = vec![
        Series::new("Signal delay", secs(SignalDelay::of(log).points())).with_mark(Mark::Area),
        Series::new("Per-packet delay", secs(log.packet_delays())).with_mark(Mark::Scatter),
    ];
    // the percentiles as lines across the graph, named in the legend
    let across = |v: u64| match (s.first_ms, s.last_ms) {
        (Some(a), Some(b)) => secs(vec![(a, v), (b, v)]),
        _ => Vec::new(),
    };
    if let Some(v) = s.signal_delay_p95_ms {
        series.push(Series::new(format!("p95 signal delay ({v} ms)"), across(v)));
    }
    if let Some(v) = s.queue_delay_p95_ms {
        series.push(Series::new(
            format!("p95 per-packet delay ({v} ms)"),
            across(v),
        ));
    }
    let opts = ChartOpts {
        dot: 1.5,
        ..graph_opts(s)
    };
    line_chart(
        &format!("{}: delay", log.name),
        "time (s)",
        "delay (ms)",
        &series,
        &opts,
    )
}

#[cfg(test)]
mod tests;
