//! Quantities as network engineers write them: rates, shares, sizes, queue limits and
//! durations, parsed from policy text and formatted back for display.
//!
//! Units and conventions:
//!
//! * **Rates** are `u64` bits per second. SI prefixes are powers of 1000 and their letter is
//!   case-insensitive (`kbit` = `Kbit`, `mbit` = `Mbit`). Accepted: `bit`, `kbit`, `Mbit`,
//!   `Gbit`, `Tbit` (also `bits`), each optionally followed by `/s`; `b/s`, `kb/s`, `Mb/s`,
//!   `Gb/s`, `Tb/s` (lower-case `b` = bits, as seed 000 writes "125 kb/s"); `B/s`, `kB/s`,
//!   `MB/s`, `GB/s`, `TB/s` (upper-case `B` = bytes, ×8). `bps`/`kbps`/`Mbps`... are
//!   rejected as ambiguous, because `tc` reads `kbps` as kilo*bytes* per second.
//! * **Shares** are a rate or a percentage `0 < p <= 100` ("25%": each session gets a
//!   quarter of its class).
//! * **Sizes** are `u64` bytes: a bare integer is bytes; `B`, `kB`/`KB` (1000), `KiB`
//!   (1024), `MB`, `MiB`, `GB`, `GiB`, `TB`, `TiB`. A lower-case `b` (`kb`) is rejected as
//!   ambiguous (kilobits or kilobytes?).
//! * **Limits** are packets (`1000p`, `1000pkt`, `1000 packets`) or a size with a unit;
//!   never zero. A bare number is rejected as ambiguous (packets or bytes?).
//! * **Durations** are `u64` nanoseconds: `ns`, `us`/`µs`, `ms`, `s` (and tc's `nsec`,
//!   `usec`, `msec`, `sec`). A bare number is rejected: "5" could mean anything.
//!
//! Numbers are decimal with an optional fraction ("1.544Mbit", "0.25s", ".5ms"); whitespace
//! between number and unit is allowed ("125 kb/s"). Parsing is exact: the number is read as
//! an integer mantissa and a power-of-ten scale (no floating point), the unit multiplier is
//! applied in `u128`, and the result must be a whole number of the base unit ("0.5bit" and
//! "1.5ns" are errors) that fits in `u64`. Exponents ("1e6"), signs other than a rejected
//! leading `-`, NaN and infinity are errors. Rates must be positive; sizes and durations may
//! be zero (the policy compiler decides where zero makes sense).
//!
//! Formatting (`fmt_rate`, `fmt_size`, `fmt_duration`) is exact as well: the value is shown
//! in the largest unit in which it is at least 1, as a decimal with no trailing zeros
//! ("1.544Mbit", "125kbit", "999bit"), so `parse(fmt(x)) == x` for every value the parser
//! accepts. Nothing here panics on any input.

use core::fmt;

/// A policy value that could not be parsed: names what was being parsed, the offending
/// text, and what was expected. Also used by the classifier's parsers (prefixes, ports,
/// protocols, DSCP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    what: &'static str,
    input: String,
    reason: String,
}

impl UnitError {
    /// `what` is the kind of value ("rate", "size", "IP prefix", ...), `input` the text as
    /// written, `reason` what is wrong and what was expected.
    pub fn new(what: &'static str, input: &str, reason: impl Into<String>) -> Self {
        UnitError {
            what,
            input: input.to_string(),
            reason: reason.into(),
        }
    }
    /// The kind of value that failed to parse.
    pub fn what(&self) -> &'static str {
        self.what
    }
    /// The offending text.
    pub fn input(&self) -> &str {
        &self.input
    }
    /// What is wrong and what was expected.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} '{}': {}", self.what, self.input, self.reason)
    }
}

impl std::error::Error for UnitError {}

/// A per-session (or per-child) share: an absolute rate or a fraction of the parent.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Share {
    /// Bits per second.
    Bps(u64),
    /// Percent of the parent, `0 < p <= 100`.
    Percent(f64),
}

impl Share {
    /// The share in bits per second of a parent of `total_bps` (percentages round down,
    /// absolute rates are returned as written).
    pub fn of(&self, total_bps: u64) -> u64 {
        match *self {
            Share::Bps(b) => b,
            Share::Percent(p) => (total_bps as f64 * p / 100.0) as u64,
        }
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Share::Bps(b) => f.write_str(&fmt_rate(b)),
            Share::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A queue limit: in packets or in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    Packets(u32),
    Bytes(u64),
}

impl Limit {
    /// The packet and byte limits of a queue bounded by this limit (the other unbounded).
    pub fn packets_and_bytes(self) -> (u32, u64) {
        match self {
            Limit::Packets(n) => (n, u64::MAX),
            Limit::Bytes(b) => (u32::MAX, b),
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Limit::Packets(n) => write!(f, "{n}p"),
            Limit::Bytes(b) => f.write_str(&fmt_size(b)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Exact decimal numbers

/// A non-negative decimal `mant / 10^scale`, read exactly.
#[derive(Copy, Clone, Debug)]
struct Dec {
    mant: u128,
    scale: u32,
}

/// Most significant digits a `Dec` holds (10^38 < 2^128).
const MAX_DIGITS: u32 = 38;

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Dec {
    /// `self * mult` if it is a whole number; `Err(true)` if not whole, `Err(false)` if it
    /// overflows `u64`.
    fn times(self, mult: u128) -> Result<u64, bool> {
        // value * mult = int * mult + rem * mult / div. With g = gcd(mult, div), the
        // fraction is whole iff div/g divides rem, and then equals (rem / (div/g)) * (mult/g),
        // a product below mult^2, so nothing here can overflow u128 unless the integer part
        // alone exceeds it (and then the result is far beyond u64 anyway).
        let div = 10u128.pow(self.scale);
        let (int, rem) = (self.mant / div, self.mant % div);
        let g = gcd(mult, div);
        let (m, d) = (mult / g, div / g);
        if rem % d != 0 {
            return Err(true);
        }
        let whole = int.checked_mul(mult).ok_or(false)?;
        let frac = (rem / d) * m;
        let v = whole.checked_add(frac).ok_or(false)?;
        u64::try_from(v).map_err(|_| false)
    }
    fn is_zero(&self) -> bool {
        self.mant == 0
    }
    fn to_f64(self) -> f64 {
        self.mant as f64 / 10f64.powi(self.scale as i32)
    }
}

/// Split trimmed `s` into a decimal number and the rest (the unit, leading whitespace
/// removed). Errors are returned as reasons; the caller wraps them with `what` and `s`.
fn split_number<'a>(s: &'a str, example: &str) -> Result<(Dec, &'a str), String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!(
            "empty; expected a number and a unit, e.g. {example}"
        ));
    }
    let body = t.strip_prefix('+').unwrap_or(t);
    if let Some(rest) = body.strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Err(format!("must not be negative; expected e.g. {example}"));
        }
    }
    let lower = body.trim_start_matches('-').to_ascii_lowercase();
    if lower.starts_with("nan") || lower.starts_with("inf") {
        return Err(format!(
            "NaN and infinity are not quantities; expected e.g. {example}"
        ));
    }
    let end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, unit) = body.split_at(end);
    if !num.bytes().any(|b| b.is_ascii_digit()) {
        return Err(format!("expected a number first, e.g. {example}"));
    }
    if num.bytes().filter(|&b| b == b'.').count() > 1 {
        return Err(format!(
            "'{num}' is not a decimal number; expected e.g. {example}"
        ));
    }
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f.trim_end_matches('0')),
        None => (num, ""),
    };
    let int = int.trim_start_matches('0');
    if int.len() + frac.len() > MAX_DIGITS as usize {
        return Err(format!("'{num}' has too many digits"));
    }
    let mut mant = 0u128;
    for b in int.bytes().chain(frac.bytes()) {
        mant = mant * 10 + (b - b'0') as u128;
    }
    let unit = unit.trim_start();
    if unit.starts_with(['e', 'E'])
        && unit[1..].starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+')
    {
        return Err(format!(
            "exponent notation is not supported; write the unit instead, e.g. {example}"
        ));
    }
    Ok((
        Dec {
            mant,
            scale: frac.len() as u32,
        },
        unit,
    ))
}

// ---------------------------------------------------------------------------------------
// Rates

const RATE_EXAMPLE: &str = "125kbit";
const RATE_UNITS: &str = "bit, kbit, Mbit, Gbit, Tbit (optionally with /s), b/s, kb/s, Mb/s, \
                          Gb/s, or B/s, kB/s, MB/s, GB/s for bytes per second";

/// Multiplier of an SI prefix letter (case-insensitive), if `c` is one.
fn si_prefix(c: char) -> Option<u128> {
    match c.to_ascii_lowercase() {
        'k' => Some(1_000),
        'm' => Some(1_000_000),
        'g' => Some(1_000_000_000),
        't' => Some(1_000_000_000_000),
        _ => None,
    }
}

/// Bits-per-second multiplier of a rate unit.
fn rate_unit(unit: &str) -> Result<u128, String> {
    if unit.is_empty() {
        return Err(format!("rate needs a unit, e.g. {RATE_EXAMPLE}"));
    }
    let lower = unit.to_ascii_lowercase();
    let p = unit.get(..unit.len().saturating_sub(3)).unwrap_or("");
    if lower.ends_with("bps")
        && (p.is_empty() || (p.len() == 1 && p.chars().all(|c| si_prefix(c).is_some())))
    {
        let (bits, bytes) = if p.is_empty() {
            ("bit".to_string(), "B/s".to_string())
        } else {
            (format!("{p}bit"), format!("{}B/s", fix_byte_prefix(p)))
        };
        return Err(format!(
            "ambiguous: tc reads '{unit}' as {}bytes/s; write '{bits}' for {}bits/s or \
             '{bytes}' for {}bytes/s",
            prefix_word(p),
            prefix_word(p),
            prefix_word(p)
        ));
    }
    let (body, per_s) = match unit.strip_suffix("/s") {
        Some(b) => (b, true),
        None => (unit, false),
    };
    let mut chars = body.chars();
    let (mult, rest) = match chars.next().and_then(si_prefix) {
        Some(m) if body.len() > 1 => (m, chars.as_str()),
        _ => (1, body),
    };
    if rest.eq_ignore_ascii_case("bit") || rest.eq_ignore_ascii_case("bits") {
        return Ok(mult);
    }
    if rest == "b" {
        if per_s {
            return Ok(mult);
        }
        return Err(format!(
            "ambiguous: '{unit}' could be bits or bytes; write '{body}it' for bits/s or \
             '{}B/s' for bytes/s",
            &body[..body.len() - 1]
        ));
    }
    if rest == "B" {
        if per_s {
            return Ok(mult * 8);
        }
        return Err(format!(
            "'{unit}' is a size, not a rate; write '{unit}/s' for bytes per second"
        ));
    }
    Err(format!("unknown rate unit '{unit}'; expected {RATE_UNITS}"))
}

fn prefix_word(p: &str) -> &'static str {
    match p.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('k') => "kilo",
        Some('m') => "mega",
        Some('g') => "giga",
        Some('t') => "tera",
        _ => "",
    }
}

/// `k` stays lower-case in kB, other SI prefixes are upper-case.
fn fix_byte_prefix(p: &str) -> String {
    match p.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('k') => "k".into(),
        Some(c) if p.len() == 1 => c.to_ascii_uppercase().to_string(),
        _ => p.to_string(),
    }
}

/// Parse a rate ("125kbit", "1.544Mbit", "125 kb/s", "10Mbit/s", "2MB/s") into bits per
/// second. See the module comment for the accepted units.
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let err = |r: String| UnitError::new("rate", s, r);
    let (num, unit) = split_number(s, RATE_EXAMPLE).map_err(err)?;
    let mult = rate_unit(unit).map_err(err)?;
    if num.is_zero() {
        return Err(err(format!("rate must be positive, e.g. {RATE_EXAMPLE}")));
    }
    num.times(mult).map_err(|frac| {
        if frac {
            err("not a whole number of bits per second".into())
        } else {
            err(format!("too large; at most {} bits per second", u64::MAX))
        }
    })
}

/// Parse a share: a rate (see [`parse_rate`]) or a percentage "25%" with `0 < p <= 100`.
pub fn parse_share(s: &str) -> Result<Share, UnitError> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let err = |r: String| UnitError::new("share", s, r);
        let (num, rest) = split_number(p, "25%").map_err(err)?;
        if !rest.is_empty() {
            return Err(err(
                "expected a percentage like 25% or a rate like 125kbit".into()
            ));
        }
        let v = num.to_f64();
        if !(v > 0.0 && v <= 100.0) {
            return Err(err(format!(
                "percentage must be greater than 0 and at most 100, e.g. 25%; got {v}%"
            )));
        }
        return Ok(Share::Percent(v));
    }
    parse_rate(s).map(Share::Bps).map_err(|e| {
        UnitError::new(
            "share",
            s,
            format!("{}; or a percentage like 25%", e.reason()),
        )
    })
}

// ---------------------------------------------------------------------------------------
// Sizes and limits

const SIZE_EXAMPLE: &str = "20kB";
const SIZE_UNITS: &str = "B, kB, KiB, MB, MiB, GB, GiB, TB, TiB, or a bare number of bytes";

/// Byte multiplier of a size unit ("" = bytes).
fn size_unit(unit: &str) -> Result<u128, String> {
    match unit {
        "" | "B" | "byte" | "bytes" => return Ok(1),
        _ => {}
    }
    let mut chars = unit.chars();
    let first = chars.next();
    let rest = chars.as_str();
    if let Some(c) = first {
        if let Some(m) = si_prefix(c) {
            let bin_pow = match c.to_ascii_lowercase() {
                'k' => 1,
                'm' => 2,
                'g' => 3,
                _ => 4,
            };
            match rest {
                "B" => return Ok(m),
                "iB" => return Ok(1u128 << (10 * bin_pow)),
                "b" | "ib" => {
                    let up = c.to_ascii_uppercase();
                    let fix = match (rest, up) {
                        ("b", 'K') => "kB".to_string(),
                        ("b", _) => format!("{up}B"),
                        _ => format!("{up}iB"),
                    };
                    return Err(format!(
                        "ambiguous: lower-case 'b' means bits; sizes are in bytes, write \
                         '{fix}'"
                    ));
                }
                _ => {}
            }
            if rest.eq_ignore_ascii_case("bit") || rest.eq_ignore_ascii_case("bits") {
                return Err(format!(
                    "'{unit}' is a number of bits (or a rate); sizes are in bytes, e.g. \
                     {SIZE_EXAMPLE}"
                ));
            }
        }
    }
    if unit == "b" || unit.eq_ignore_ascii_case("bit") || unit.eq_ignore_ascii_case("bits") {
        return Err(format!(
            "sizes are in bytes; write 'B', e.g. {SIZE_EXAMPLE}"
        ));
    }
    if unit.contains("/s") {
        return Err(format!(
            "'{unit}' is a rate, not a size; expected {SIZE_UNITS}"
        ));
    }
    Err(format!("unknown size unit '{unit}'; expected {SIZE_UNITS}"))
}

fn parse_size_as(what: &'static str, s: &str) -> Result<u64, UnitError> {
    let err = |r: String| UnitError::new(what, s, r);
    let (num, unit) = split_number(s, SIZE_EXAMPLE).map_err(err)?;
    let mult = size_unit(unit).map_err(err)?;
    num.times(mult).map_err(|frac| {
        if frac {
            err("not a whole number of bytes".into())
        } else {
            err(format!("too large; at most {} bytes", u64::MAX))
        }
    })
}

/// Parse a size ("1500", "1500B", "20kB", "64KiB", "1.5MB") into bytes.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    parse_size_as("size", s)
}

/// Parse a queue limit: packets ("1000p", "1000pkt", "1000 packets") or a size with a unit
/// ("64KiB", "1500B"). Zero is rejected, and so is a bare number: `tc` reads a bare
/// `limit 1000` as packets for pfifo but bytes for bfifo, so weir asks which.
pub fn parse_limit(s: &str) -> Result<Limit, UnitError> {
    let err = |r: String| UnitError::new("limit", s, r);
    let (num, unit) = split_number(s, "1000p").map_err(err)?;
    let is_pkts = matches!(
        unit.to_ascii_lowercase().as_str(),
        "p" | "pkt" | "pkts" | "packet" | "packets"
    );
    if unit.is_empty() {
        return Err(err(
            "ambiguous: a bare number could be packets or bytes; write e.g. 1000p for \
             packets or 1500B for bytes"
                .into(),
        ));
    }
    let lim = if is_pkts {
        let n = num.times(1).map_err(|frac| {
            if frac {
                err("not a whole number of packets".into())
            } else {
                err(format!("too large; at most {} packets", u32::MAX))
            }
        })?;
        let n = u32::try_from(n)
            .map_err(|_| err(format!("too large; at most {} packets", u32::MAX)))?;
        Limit::Packets(n)
    } else {
        let b = parse_size_as("limit", s)
            .map_err(|e| err(format!("{}; or packets, e.g. 1000p", e.reason())))?;
        Limit::Bytes(b)
    };
    if num.is_zero() {
        return Err(err("limit must be positive, e.g. 1000p or 64KiB".into()));
    }
    Ok(lim)
}

// ---------------------------------------------------------------------------------------
// Durations

const DUR_EXAMPLE: &str = "5ms";

fn duration_unit(unit: &str) -> Result<u128, String> {
    Ok(match unit {
        "ns" | "nsec" => 1,
        "us" | "µs" | "μs" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "s" | "sec" | "secs" => 1_000_000_000,
        "" => return Err(format!("duration needs a unit, e.g. {DUR_EXAMPLE}")),
        _ => {
            return Err(format!(
                "unknown duration unit '{unit}'; expected ns, us, ms or s"
            ))
        }
    })
}

/// Parse a duration ("5ms", "1.5ms", "0.25s", "100us", "20 µs") into nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, UnitError> {
    let err = |r: String| UnitError::new("duration", s, r);
    let (num, unit) = split_number(s, DUR_EXAMPLE).map_err(err)?;
    let mult = duration_unit(unit).map_err(err)?;
    num.times(mult).map_err(|frac| {
        if frac {
            err("not a whole number of nanoseconds".into())
        } else {
            err(format!("too large; at most {} ns", u64::MAX))
        }
    })
}

// ---------------------------------------------------------------------------------------
// Formatting

/// `v / unit` as an exact decimal with no trailing zeros; `unit` is a power of ten.
fn fmt_dec(v: u64, unit: u64) -> String {
    let int = v / unit;
    let frac = v % unit;
    if frac == 0 {
        return int.to_string();
    }
    let width = unit.ilog10() as usize;
    let f = format!("{frac:0width$}");
    format!("{int}.{}", f.trim_end_matches('0'))
}

/// Format `v` in the largest of `units` (descending powers of ten) in which it is >= 1.
fn fmt_si(v: u64, units: &[(u64, &str)]) -> String {
    for &(u, name) in units {
        if v >= u {
            return format!("{}{name}", fmt_dec(v, u));
        }
    }
    let last = units.last().map_or("", |u| u.1);
    format!("0{last}")
}

/// Format a rate in bits per second: "125kbit", "1.544Mbit", "999bit". Exact, so
/// `parse_rate(&fmt_rate(x)) == Ok(x)` for every `x > 0`.
pub fn fmt_rate(bps: u64) -> String {
    fmt_si(
        bps,
        &[
            (1_000_000_000_000, "Tbit"),
            (1_000_000_000, "Gbit"),
            (1_000_000, "Mbit"),
            (1_000, "kbit"),
            (1, "bit"),
        ],
    )
}

/// Format a size in bytes: the largest SI ("20kB") or binary ("64KiB") unit in which it is
/// a whole number, whichever is shorter (SI on a tie); "1500B" otherwise. Exact.
pub fn fmt_size(bytes: u64) -> String {
    const SI: [(u64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "kB"),
    ];
    const BIN: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    let pick = |units: &[(u64, &str)]| {
        units
            .iter()
            .find(|&&(u, _)| bytes != 0 && bytes.checked_rem(u) == Some(0))
            .map(|&(u, n)| format!("{}{n}", bytes / u))
            .unwrap_or_else(|| format!("{bytes}B"))
    };
    let si = pick(&SI);
    let bin = pick(&BIN);
    if bin.len() < si.len() {
        bin
    } else {
        si
    }
}

/// Format a duration in nanoseconds: "5ms", "1.5ms", "250ms", "2s", "0s". Exact.
pub fn fmt_duration(ns: u64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    fmt_si(
        ns,
        &[
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rate_err(s: &str) -> String {
        parse_rate(s).unwrap_err().to_string()
    }

    #[test]
    fn rates_from_the_paper() {
        assert_eq!(parse_rate("125kbit"), Ok(125_000));
        assert_eq!(parse_rate("1.544Mbit"), Ok(1_544_000));
        assert_eq!(parse_rate("90kbit"), Ok(90_000));
        assert_eq!(parse_rate("777kbit"), Ok(777_000));
        assert_eq!(parse_rate("125 kb/s"), Ok(125_000));
        assert_eq!(parse_rate("1.544 Mb/s"), Ok(1_544_000));
        assert_eq!(parse_rate("1.1 Mb/s"), Ok(1_100_000));
        assert_eq!(parse_rate("20kb/s"), Ok(20_000));
        assert_eq!(parse_rate("30kb/s"), Ok(30_000));
    }

    #[test]
    fn every_rate_form() {
        for (s, v) in [
            ("1bit", 1u64),
            ("999bit", 999),
            ("5bits", 5),
            ("8bit/s", 8),
            ("1kbit", 1_000),
            ("1Kbit", 1_000),
            ("1KBIT", 1_000),
            ("1kbit/s", 1_000),
            ("1mbit", 1_000_000),
            ("1Mbit", 1_000_000),
            ("10Mbit/s", 10_000_000),
            ("1Gbit", 1_000_000_000),
            ("1gbit/s", 1_000_000_000),
            ("1Tbit", 1_000_000_000_000),
            ("1tbit", 1_000_000_000_000),
            ("7b/s", 7),
            ("1kb/s", 1_000),
            ("1Kb/s", 1_000),
            ("1Mb/s", 1_000_000),
            ("1Gb/s", 1_000_000_000),
            ("1Tb/s", 1_000_000_000_000),
            ("1B/s", 8),
            ("1.5B/s", 12),
            ("1kB/s", 8_000),
            ("1KB/s", 8_000),
            ("2MB/s", 16_000_000),
            ("1GB/s", 8_000_000_000),
            ("1TB/s", 8_000_000_000_000),
            ("  125   kbit  ", 125_000),
            ("0.5kbit", 500),
            (".5kbit", 500),
            ("+3kbit", 3_000),
            ("0001.50000kbit", 1_500),
            ("18446744073709551615bit", u64::MAX),
            ("18446744.073709551615Tbit", u64::MAX),
        ] {
            assert_eq!(parse_rate(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn rate_rejections_say_why() {
        assert_eq!(
            rate_err("1000"),
            "invalid rate '1000': rate needs a unit, e.g. 125kbit"
        );
        assert!(rate_err("0kbit").contains("rate must be positive"));
        assert!(rate_err("0").contains("rate needs a unit"));
        assert!(rate_err("-5kbit").contains("must not be negative"));
        assert_eq!(
            rate_err("125kbps"),
            "invalid rate '125kbps': ambiguous: tc reads 'kbps' as kilobytes/s; write 'kbit' \
             for kilobits/s or 'kB/s' for kilobytes/s"
        );
        assert!(rate_err("10mbps").contains("tc reads 'mbps' as megabytes/s"));
        assert!(rate_err("10mbps").contains("'mbit'"));
        assert!(rate_err("10mbps").contains("'MB/s'"));
        assert!(rate_err("10Mbps").contains("ambiguous"));
        assert!(rate_err("100bps").contains("ambiguous: tc reads 'bps' as bytes/s"));
        assert!(rate_err("5furlongs").contains("unknown rate unit 'furlongs'; expected bit, kbit"));
        assert!(rate_err("5kibit").contains("unknown rate unit"));
        assert!(rate_err("5xyzbps").contains("unknown rate unit"));
        assert!(rate_err("0\u{2d7f}!").contains("unknown rate unit"));
        assert!(rate_err("0.5bit").contains("not a whole number of bits per second"));
        assert!(rate_err("0.1B/s").contains("not a whole number"));
        assert!(rate_err("18446744073709551616bit").contains("too large"));
        assert!(rate_err("99999999999999999999Tbit").contains("too large"));
        assert!(rate_err("NaN").contains("NaN and infinity"));
        assert!(rate_err("inf").contains("NaN and infinity"));
        assert!(rate_err("-infinity kbit").contains("NaN and infinity"));
        assert!(rate_err("").contains("empty"));
        assert!(rate_err("kbit").contains("expected a number first"));
        assert!(rate_err("1.2.3kbit").contains("not a decimal number"));
        assert!(rate_err("1e6bit").contains("exponent notation"));
        assert!(rate_err("20kB").contains("'20kB'") && rate_err("20kB").contains("is a size"));
        assert!(rate_err("20kb").contains("ambiguous"));
        assert!(rate_err(&"1".repeat(60)).contains("too many digits"));
    }

    #[test]
    fn shares() {
        assert_eq!(parse_share("25%"), Ok(Share::Percent(25.0)));
        assert_eq!(parse_share(" 12.5 % "), Ok(Share::Percent(12.5)));
        assert_eq!(parse_share("100%"), Ok(Share::Percent(100.0)));
        assert_eq!(parse_share("5kbit"), Ok(Share::Bps(5_000)));
        assert_eq!(parse_share("11.6 kb/s"), Ok(Share::Bps(11_600)));
        assert!(parse_share("0%")
            .unwrap_err()
            .to_string()
            .contains("greater than 0"));
        assert!(parse_share("100.5%")
            .unwrap_err()
            .to_string()
            .contains("at most 100"));
        assert!(parse_share("-5%")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert!(parse_share("x%")
            .unwrap_err()
            .to_string()
            .contains("number"));
        let e = parse_share("25").unwrap_err();
        assert_eq!(e.what(), "share");
        assert!(e.to_string().contains("needs a unit") && e.to_string().contains("25%"));
        assert_eq!(Share::Percent(25.0).of(20_000), 5_000);
        assert_eq!(Share::Bps(7).of(20_000), 7);
    }

    #[test]
    fn sizes() {
        for (s, v) in [
            ("1500", 1500u64),
            ("0", 0),
            ("1500B", 1500),
            ("1500 bytes", 1500),
            ("20kB", 20_000),
            ("20KB", 20_000),
            ("64KiB", 65_536),
            ("64kiB", 65_536),
            ("1.5MB", 1_500_000),
            ("1MiB", 1 << 20),
            ("2GB", 2_000_000_000),
            ("1GiB", 1 << 30),
            ("1TiB", 1 << 40),
            ("0.5KiB", 512),
            ("1.518kB", 1518),
        ] {
            assert_eq!(parse_size(s), Ok(v), "{s}");
        }
        let e = |s: &str| parse_size(s).unwrap_err().to_string();
        assert!(e("20kb").contains("ambiguous: lower-case 'b' means bits"));
        assert!(e("20kb").contains("'kB'"));
        assert!(e("20mb").contains("'MB'"));
        assert!(e("20Kib").contains("'KiB'"));
        assert!(e("1.5").contains("not a whole number of bytes"));
        assert_eq!(parse_size("0.1kB"), Ok(100));
        assert!(e("0.0001kB").contains("not a whole number of bytes"));
        assert!(e("5kbit").contains("sizes are in bytes"));
        assert!(e("5kB/s").contains("is a rate"));
        assert!(e("5 parsecs").contains("unknown size unit"));
        assert!(e("99999999999TB").contains("too large"));
        assert!(e("-1").contains("negative"));
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit("1000p"), Ok(Limit::Packets(1000)));
        assert_eq!(parse_limit("1000pkt"), Ok(Limit::Packets(1000)));
        assert_eq!(parse_limit("1000 packets"), Ok(Limit::Packets(1000)));
        assert_eq!(parse_limit("1 packet"), Ok(Limit::Packets(1)));
        assert_eq!(parse_limit("20kB"), Ok(Limit::Bytes(20_000)));
        assert_eq!(parse_limit("1500B"), Ok(Limit::Bytes(1500)));
        assert_eq!(parse_limit("64 KiB"), Ok(Limit::Bytes(65_536)));
        let e = |s: &str| parse_limit(s).unwrap_err().to_string();
        assert!(e("0p").contains("must be positive"));
        assert!(e("1000").contains("ambiguous: a bare number could be packets or bytes"));
        assert!(e("0kB").contains("must be positive"));
        assert!(e("1.5p").contains("whole number of packets"));
        assert!(e("5000000000p").contains("too large"));
        assert!(e("5 frogs").contains("or packets, e.g. 1000p"));
    }

    #[test]
    fn durations() {
        for (s, v) in [
            ("5ms", 5_000_000u64),
            ("1.5ms", 1_500_000),
            ("0.25s", 250_000_000),
            ("50ms", 50_000_000),
            ("100us", 100_000),
            ("20µs", 20_000),
            ("20μs", 20_000),
            ("7ns", 7),
            ("2 sec", 2_000_000_000),
            ("3msec", 3_000_000),
            ("0ms", 0),
        ] {
            assert_eq!(parse_duration(s), Ok(v), "{s}");
        }
        let e = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert_eq!(
            e("5"),
            "invalid duration '5': duration needs a unit, e.g. 5ms"
        );
        assert!(e("1.5ns").contains("whole number of nanoseconds"));
        assert!(e("5 fortnights").contains("expected ns, us, ms or s"));
        assert!(e("5Ms").contains("unknown duration unit"));
        assert!(e("-5ms").contains("negative"));
        assert!(e("99999999999s").contains("too large"));
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(125_000), "125kbit");
        assert_eq!(fmt_rate(1_544_000), "1.544Mbit");
        assert_eq!(fmt_rate(20_000), "20kbit");
        assert_eq!(fmt_rate(999), "999bit");
        assert_eq!(fmt_rate(1_100_000), "1.1Mbit");
        assert_eq!(fmt_rate(10_000_000_000), "10Gbit");
        assert_eq!(fmt_rate(1_000_001), "1.000001Mbit");
        assert_eq!(fmt_rate(0), "0bit");
        assert_eq!(fmt_size(1500), "1500B");
        assert_eq!(fmt_size(20_000), "20kB");
        assert_eq!(fmt_size(65_536), "64KiB");
        assert_eq!(fmt_size(1 << 20), "1MiB");
        assert_eq!(fmt_size(2_000_000), "2MB");
        assert_eq!(fmt_size(0), "0B");
        assert_eq!(fmt_duration(5_000_000), "5ms");
        assert_eq!(fmt_duration(1_500_000), "1.5ms");
        assert_eq!(fmt_duration(250_000_000), "250ms");
        assert_eq!(fmt_duration(2_000_000_000), "2s");
        assert_eq!(fmt_duration(1_500), "1.5us");
        assert_eq!(fmt_duration(7), "7ns");
        assert_eq!(fmt_duration(0), "0s");
        assert_eq!(Limit::Packets(1000).to_string(), "1000p");
        assert_eq!(Share::Percent(25.0).to_string(), "25%");
        assert_eq!(Share::Bps(5_000).to_string(), "5kbit");
    }

    proptest! {
        #[test]
        fn rate_round_trips(bps in 1u64..) {
            prop_assert_eq!(parse_rate(&fmt_rate(bps)), Ok(bps));
        }
        #[test]
        fn round_rate_round_trips(n in 1u64..1_000_000, p in 0u32..5) {
            let bps = n.saturating_mul(10u64.pow(3 * p));
            let s = fmt_rate(bps);
            prop_assert_eq!(parse_rate(&s), Ok(bps));
            let num = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            prop_assert!(!num.contains('.') || !num.ends_with('0'), "{}", s);
        }
        #[test]
        fn size_round_trips(b in 0u64..) {
            prop_assert_eq!(parse_size(&fmt_size(b)), Ok(b));
        }
        #[test]
        fn duration_round_trips(ns in 0u64..) {
            prop_assert_eq!(parse_duration(&fmt_duration(ns)), Ok(ns));
        }
        #[test]
        fn parsers_never_panic(s in "\\PC{0,24}") {
            let _ = parse_rate(&s);
            let _ = parse_share(&s);
            let _ = parse_size(&s);
            let _ = parse_limit(&s);
            let _ = parse_duration(&s);
        }
        #[test]
        fn numeric_looking_never_panic(s in "[-+.0-9]{0,45}[ ]?(k|M|G|T|Ki|m|)(bit|b/s|B/s|B|iB|bps|%|ms|s|p|)") {
            let _ = parse_rate(&s);
            let _ = parse_share(&s);
            let _ = parse_size(&s);
            let _ = parse_limit(&s);
            let _ = parse_duration(&s);
        }
    }
}
