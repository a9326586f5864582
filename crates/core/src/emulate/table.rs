//! Delay distribution tables in iproute2's `.dist` format (netem's `distribution NAME`,
//! `slot distribution NAME`), read into a [`DistTable`] that a [`super::Jitter::Table`]
//! samples.
//!
//! The format (iproute2 `tc/q_netem.c` `get_distribution`; the tables `normal.dist`,
//! `pareto.dist`, `paretonormal.dist` that `netem/maketable.c` and its siblings generate,
//! and the ones a user makes from measured delays with `maketable`): text lines; a line
//! that is empty or starts with `#` is skipped; every other line holds integers separated
//! by white space (decimal, or `0x` hex and `0` octal as C's `strtol(.., 0)` reads them).
//! Together they are up to [`MAX_ENTRIES`] (`NETEM_DIST_MAX`, 16384) signed 16-bit values,
//! each a quantile of the distribution in units of σ scaled by [`SCALE`] (`NETEM_DIST_SCALE`,
//! 8192): netem's `tabledist` draws an entry `t` uniformly and adds `σ · t / 8192` (rounded
//! half away from zero) to the mean delay. iproute2's tables have 4096 entries.
//!
//! Stricter than `tc`, which stops reading a line at the first word that is not a number
//! and stores out-of-range values truncated to 16 bits: here a word that is not an integer,
//! a value outside `-32768..=32767`, an empty table or more than 16384 values is an error
//! naming the file, the line and the word ([`TableError`]).
//!
//! The values are kept sorted (ascending). Drawing an entry uniformly sees the same
//! multiset, so the distribution is unchanged; sorted, the table is a quantile function,
//! which correlated jitter needs (a larger underlying variate must give a larger delay).
//!
//! Invariants: a table has 1..=16384 entries; it is shared (`Arc`), so cloning a
//! configuration or reloading a policy does not copy it; sampling allocates nothing.

use std::fmt;
use std::sync::Arc;

/// netem's `NETEM_DIST_SCALE`: a table value of 8192 is one σ.
pub const SCALE: i64 = 8192;
/// netem's `NETEM_DIST_MAX`: the most entries a table may have.
pub const MAX_ENTRIES: usize = 16384;

/// A malformed `.dist` table: where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {what}")]
pub struct TableError {
    pub file: String,
    /// 1-based line number (the last line for an empty table).
    pub line: usize,
    pub what: String,
}

/// A netem distribution table (see the module comment), sorted, shared.
#[derive(Clone, PartialEq, Eq)]
pub struct DistTable {
    name: Arc<str>,
    values: Arc<[i16]>,
}

impl fmt::Debug for DistTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DistTable({}, {} entries)", self.name, self.values.len())
    }
}

/// One C `strtol(word, &end, 0)` that must consume the whole word.
pub(crate) fn c_integer(word: &str) -> Option<i64> {
    let (neg, body) = match word.as_bytes().first() {
        Some(b'-') => (true, &word[1..]),
        Some(b'+') => (false, &word[1..]),
        _ => (false, word),
    };
    let (radix, digits) =
        if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, h)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

impl DistTable {
    /// Read a table from `text`; `file` names it in errors and descriptions.
    pub fn parse(file: &str, text: &str) -> Result<DistTable, TableError> {
        let err = |line: usize, what: String| TableError {
            file: file.to_string(),
            line,
            what,
        };
        let mut values = Vec::with_capacity(4096);
        let mut last = 0;
        for (i, line) in text.lines().enumerate() {
            last = i + 1;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            for word in line.split_whitespace() {
                let v = c_integer(word).ok_or_else(|| {
                    err(
                        i + 1,
                        format!("'{word}' is not an integer (a .dist table holds 16-bit integers)"),
                    )
                })?;
                let v = i16::try_from(v).map_err(|_| {
                    err(
                        i + 1,
                        format!("{v} is outside the 16-bit range -32768..=32767"),
                    )
                })?;
                if values.len() == MAX_ENTRIES {
                    return Err(err(
                        i + 1,
                        format!("too much data: more than {MAX_ENTRIES} values"),
                    ));
                }
                values.push(v);
            }
        }
        if values.is_empty() {
            return Err(err(last.max(1), "the table has no values".into()));
        }
        values.sort_unstable();
        Ok(DistTable {
            name: file.into(),
            values: values.into(),
        })
    }

    /// A table from values (sorted here); `None` if empty or longer than [`MAX_ENTRIES`].
    pub fn from_values(name: &str, mut values: Vec<i16>) -> Option<DistTable> {
        if values.is_empty() || values.len() > MAX_ENTRIES {
            return None;
        }
        values.sort_unstable();
        Some(DistTable {
            name: name.into(),
            values: values.into(),
        })
    }

    /// Where the table came from (a file name, or a distribution's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The values, ascending.
    pub fn values(&self) -> &[i16] {
        &self.values
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The entry at quantile `u` in [0, 1) (clamped): `values[floor(u · len)]`.
    #[inline]
    pub fn at_quantile(&self, u: f64) -> i16 {
        let n = self.values.len();
        let i = ((u * n as f64) as usize).min(n - 1);
        self.values[i]
    }

    /// The entry at index `i` (modulo the length, as netem's `rnd % size`).
    #[inline]
    pub fn at(&self, i: u64) -> i16 {
        self.values[(i % self.values.len() as u64) as usize]
    }

    /// Mean of the entries in units of σ (value / 8192).
    pub fn mean_sigmas(&self) -> f64 {
        let s: i64 = self.values.iter().map(|&v| i64::from(v)).sum();
        s as f64 / self.values.len() as f64 / SCALE as f64
    }

    /// Population standard deviation of the entries in units of σ.
    pub fn sd_sigmas(&self) -> f64 {
        let m = self.mean_sigmas();
        let n = self.values.len() as f64;
        let var = self
            .values
            .iter()
            .map(|&v| (f64::from(v) / SCALE as f64 - m).powi(2))
            .sum::<f64>()
            / n;
        var.sqrt()
    }
}

/// `sigma · t / 8192` rounded half away from zero, as netem's `tabledist` (in i128, so no
/// `sigma` overflows).
#[inline]
pub fn scaled(sigma: u64, t: i16) -> i64 {
    let x = i128::from(sigma) * i128::from(t);
    let half = SCALE as i128 / 2;
    let r = if x >= 0 {
        (x + half) / SCALE as i128
    } else {
        (x - half) / SCALE as i128
    };
    r.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_format() {
        let t = DistTable::parse(
            "t.dist",
            "# a comment\n\n 100 -200\t0x10\n#x 5\n010 -0x8 +3\n",
        )
        .unwrap();
        // 0x10 = 16, 010 (octal) = 8, -0x8 = -8
        assert_eq!(t.values(), &[-200, -8, 3, 8, 16, 100]);
        assert_eq!(t.name(), "t.dist");
        assert_eq!(t.at_quantile(0.0), -200);
        assert_eq!(t.at_quantile(0.999), 100);
        assert_eq!(t.at_quantile(7.0), 100);
        assert_eq!(t.at(7), -8);
        assert!((t.mean_sigmas() - (-81.0 / 6.0 / 8192.0)).abs() < 1e-12);
    }

    #[test]
    fn errors_name_file_line_and_word() {
        let e = DistTable::parse("bad.dist", "# c\n1 2\n3 x4 5\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("bad.dist", 3));
        assert!(e.to_string().starts_with("bad.dist:3: 'x4'"), "{e}");
        let e = DistTable::parse("big.dist", "1\n40000\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.what.contains("16-bit"), "{e}");
        let e = DistTable::parse("e.dist", "# nothing\n\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.what.contains("no values"));
        assert!(DistTable::parse("e.dist", "").is_err());
        let many = "1 ".repeat(MAX_ENTRIES + 1);
        let e = DistTable::parse("m.dist", &many).unwrap_err();
        assert!(e.what.contains("too much data"), "{e}");
        assert!(DistTable::parse("ok.dist", &"1 ".repeat(MAX_ENTRIES)).is_ok());
        // strtol forms that are not numbers
        for w in ["0x", "--1", "1.5", "1e3", "09", "-"] {
            assert!(DistTable::parse("w.dist", w).is_err(), "{w}");
        }
    }

    /// netem's integer rounding: x = (σ % 8192)·t ± 4096, x / 8192 + (σ / 8192)·t.
    #[test]
    fn scaling_rounds_as_tabledist() {
        let netem = |sigma: i64, t: i64| {
            let mut x = (sigma % SCALE) * t;
            if x >= 0 {
                x += SCALE / 2
            } else {
                x -= SCALE / 2
            }
            x / SCALE + (sigma / SCALE) * t
        };
        for sigma in [0u64, 1, 4095, 4096, 8191, 8192, 10_000_000, 123_456_789] {
            for t in [-32768i16, -8193, -4096, -1, 0, 1, 4096, 8192, 32767] {
                assert_eq!(
                    scaled(sigma, t),
                    netem(sigma as i64, t.into()),
                    "{sigma} {t}"
                );
            }
        }
        // 10 ms · 8192/8192 = 10 ms
        assert_eq!(scaled(10_000_000, 8192), 10_000_000);
    }
}
