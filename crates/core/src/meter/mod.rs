//! Meters: the token bucket every rate limit in the engine counts with ([`token_bucket`]),
//! and the DiffServ three-colour meters/markers built on it, one algorithm a file:
//!
//! * [`srtcm`]: RFC 2697's single-rate three-colour marker (CIR, CBS, EBS): tokens that
//!   overflow the committed bucket C go into the excess bucket E.
//! * [`trtcm`]: RFC 2698's two-rate three-colour marker (CIR/CBS, PIR/PBS): every packet is
//!   tested against the peak bucket P first, and a green one takes from both buckets; and
//!   RFC 4115's variant (CIR/CBS, EIR/EBS), two independent rates marked like the srTCM:
//!   a green packet takes only from C, and yellow is tested against E only.
//!
//! ## The common front
//!
//! A [`Meter`] is a [`MeterSpec`] (the algorithm and its parameters), a [`ColorMode`] and
//! the state: two [`Bucket<Exact>`]s, the committed bucket C and a second one (E or P),
//! refilled together from one shared checkpoint. [`Meter::mark`] adds what the time since
//! the checkpoint earned, moves the checkpoint to `now`, and colours the packet.
//! Colour-blind metering is colour-aware metering of a stream that is all green (that is
//! how each RFC's two algorithms relate), so `mark` only replaces the incoming colour.
//! The caller decides what to do with the colour (remark the DSCP, pick a drop
//! precedence, police): a meter drops nothing.
//!
//! Units: rates in bit/s (RFC 4115 says bit/s; RFCs 2697 and 2698 say bytes of IP packets
//! per second; weir's policy language speaks bit/s everywhere), bursts and packet lengths
//! in bytes. Which bytes of a packet count (the IP packet as the RFCs have it, or the
//! whole frame) is the caller's choice of `len`.
//!
//! Exactness: the buckets count nano-bits ([`Exact`]): a `len`-byte packet costs
//! `len * 8e9`, `elapsed` ns at `rate` bit/s earn `elapsed * rate`. Every colour is the
//! one the RFCs' real-valued token counts give for integer-nanosecond arrival times, at
//! any rate (no rate quantisation, no rounding, no drift over time). Per packet: one or
//! two multiplies to refill, one to cost the packet, compares and subtracts; no division,
//! no floating point, no allocation. `cargo bench -p weir-core --bench meter` measured 8
//! to 16 ns per packet for every meter and mode on the project's loaded 2-core VM (goal
//! ≤ 30 ns; the figures are in `docs/engine.md`).
//!
//! Validation ([`MeterSpec::validate`], also run by [`Meter::new`]) enforces the RFCs'
//! MUSTs and what the arithmetic needs: every rate at least 1 bit/s; srTCM: not both
//! bursts 0 (RFC 2697 section 2); trTCM: `pir >= cir`, both bursts at least 1 byte (RFC
//! 2698 section 2); RFC 4115: both bursts at least 1 byte (its section 2 wants them above
//! the largest packet); every burst at most [`MAX_EXACT_BURST`] (512 MiB). The RFCs'
//! advice that a non-zero burst be at least the largest packet is not enforced: a packet
//! larger than a bucket's depth simply never takes from it.
//!
//! Invariants: `0 <= tokens <= depth` in each bucket; the buckets start full (all three
//! RFCs); the checkpoint never moves backwards, and a `now` earlier than it earns nothing
//! (and never panics); a packet takes tokens from a bucket only when they cover its whole
//! length; colour-aware metering never promotes a packet (yellow never becomes green, red
//! stays red). Over any interval of `T` seconds, green bytes are at most `CBS + CIR·T/8`,
//! and for the trTCM green plus yellow bytes at most `PBS + PIR·T/8` (property-tested).

pub mod fair;
pub mod srtcm;
pub mod token_bucket;
pub mod trtcm;

#[cfg(test)]
mod tests;

use crate::pool::Color;
use crate::rate::Rate;
use crate::time::Instant;
use crate::units::{fmt_rate, fmt_size};
use core::fmt;
use token_bucket::{Bucket, Exact, EXACT_PER_BYTE, MAX_EXACT_BURST};

/// Which three-colour meter, with its parameters: rates in bit/s, bursts in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MeterSpec {
    /// RFC 2697 single-rate three-colour marker.
    Srtcm { cir: u64, cbs: u32, ebs: u32 },
    /// RFC 2698 two-rate three-colour marker.
    Trtcm {
        cir: u64,
        cbs: u32,
        pir: u64,
        pbs: u32,
    },
    /// RFC 4115 two-rate three-colour marker with efficient handling of in-profile traffic.
    Rfc4115 {
        cir: u64,
        cbs: u32,
        eir: u64,
        ebs: u32,
    },
}

/// Whether a meter looks at the colour a packet arrives with (RFC 2697/2698/4115 section 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ColorMode {
    /// Every packet is metered as if it arrived green.
    Blind,
    /// A packet never leaves better than it arrived: yellow never becomes green, red stays red.
    Aware,
}

/// RFC 2697 section 2: "at least one of them must be larger than 0".
const SRTCM_NO_BURST: &str =
    "cbs and ebs are both 0 bytes: at least one must be at least 1 byte (RFC 2697)";

/// `name` as a rate of at least 1 bit/s.
fn rate_positive(name: &str, bps: u64) -> Result<(), String> {
    if bps == 0 {
        return Err(format!("{name} must be at least 1 bit/s"));
    }
    Ok(())
}

/// `name` as a burst no deeper than the exact arithmetic allows.
fn burst_fits(name: &str, bytes: u32) -> Result<(), String> {
    if bytes > MAX_EXACT_BURST {
        return Err(format!(
            "{name} ({bytes} bytes) is above the largest meter burst ({MAX_EXACT_BURST} bytes)"
        ));
    }
    Ok(())
}

/// `name` as a burst of at least 1 byte that fits.
fn burst_positive(name: &str, bytes: u32) -> Result<(), String> {
    if bytes == 0 {
        return Err(format!("{name} must be at least 1 byte"));
    }
    burst_fits(name, bytes)
}

/// A full bucket of `burst` bytes at `bps`. Not [`Bucket::new`], which costs the burst as a
/// frame and so makes a 0-byte burst one byte deep ([`Rate::wire_len`]).
fn exact_bucket(bps: u64, burst: u32) -> Bucket<Exact> {
    Bucket::with_depth(Rate::from_bps(bps), burst as i64 * EXACT_PER_BYTE as i64)
}

impl MeterSpec {
    /// Check the parameters against the RFCs' requirements and the arithmetic's bounds
    /// (see the module); the message names the parameter and its value.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            MeterSpec::Srtcm { cir, cbs, ebs } => {
                rate_positive("cir", cir)?;
                if cbs == 0 && ebs == 0 {
                    return Err(SRTCM_NO_BURST.into());
                }
                burst_fits("cbs", cbs)?;
                burst_fits("ebs", ebs)
            }
            MeterSpec::Trtcm { cir, cbs, pir, pbs } => {
                rate_positive("cir", cir)?;
                rate_positive("pir", pir)?;
                if pir < cir {
                    return Err(format!("pir ({pir} bit/s) is below cir ({cir} bit/s)"));
                }
                burst_positive("cbs", cbs)?;
                burst_positive("pbs", pbs)
            }
            MeterSpec::Rfc4115 { cir, cbs, eir, ebs } => {
                rate_positive("cir", cir)?;
                rate_positive("eir", eir)?;
                burst_positive("cbs", cbs)?;
                burst_positive("ebs", ebs)
            }
        }
    }

    /// The committed bucket's (rate, burst) and the second bucket's: E for the srTCM (fed
    /// by C's overflow; its rate is CIR only nominally) and RFC 4115, P for the trTCM.
    fn buckets(&self) -> ((u64, u32), (u64, u32)) {
        match *self {
            MeterSpec::Srtcm { cir, cbs, ebs } => ((cir, cbs), (cir, ebs)),
            MeterSpec::Trtcm { cir, cbs, pir, pbs } => ((cir, cbs), (pir, pbs)),
            MeterSpec::Rfc4115 { cir, cbs, eir, ebs } => ((cir, cbs), (eir, ebs)),
        }
    }
}

impl fmt::Display for MeterSpec {
    /// `srtcm cir 800kbit cbs 15kB ebs 3kB`: rates and sizes as [`crate::units`] writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, rate2_name, burst2_name) = match self {
            MeterSpec::Srtcm { .. } => ("srtcm", None, "ebs"),
            MeterSpec::Trtcm { .. } => ("trtcm", Some("pir"), "pbs"),
            MeterSpec::Rfc4115 { .. } => ("rfc4115", Some("eir"), "ebs"),
        };
        let ((cir, cbs), (rate2, burst2)) = self.buckets();
        write!(
            f,
            "{name} cir {} cbs {}",
            fmt_rate(cir),
            fmt_size(cbs as u64)
        )?;
        if let Some(r) = rate2_name {
            write!(f, " {r} {}", fmt_rate(rate2))?;
        }
        write!(f, " {burst2_name} {}", fmt_size(burst2 as u64))
    }
}

/// A meter's two buckets, which the algorithms' files update and mark with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Buckets {
    /// The committed bucket C.
    c: Bucket<Exact>,
    /// The second bucket: E (srTCM, RFC 4115) or P (trTCM).
    x: Bucket<Exact>,
}

/// A three-colour meter: spec, mode and the state of its two buckets (see the module).
/// No allocation; a flat value of at most 160 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meter {
    spec: MeterSpec,
    mode: ColorMode,
    b: Buckets,
    /// When both buckets were last refilled.
    t_c: Instant,
}

impl Meter {
    /// A meter with full buckets, checkpointed at `now`; the error is
    /// [`MeterSpec::validate`]'s.
    pub fn new(spec: MeterSpec, mode: ColorMode, now: Instant) -> Result<Meter, String> {
        spec.validate()?;
        let ((cir, cbs), (rate2, burst2)) = spec.buckets();
        Ok(Meter {
            spec,
            mode,
            b: Buckets {
                c: exact_bucket(cir, cbs),
                x: exact_bucket(rate2, burst2),
            },
            t_c: now,
        })
    }

    /// Colour a packet of `len` bytes (the caller decides which bytes count; 0 counts as
    /// 1, as [`Rate::wire_len`] has it) that arrived with colour `incoming` (ignored when
    /// colour-blind) at `now`, taking its tokens.
    #[inline]
    pub fn mark(&mut self, len: u32, incoming: Color, now: Instant) -> Color {
        let incoming = self.begin(incoming, now);
        match self.spec {
            MeterSpec::Srtcm { .. } | MeterSpec::Rfc4115 { .. } => {
                srtcm::mark(&mut self.b, len, incoming)
            }
            MeterSpec::Trtcm { .. } => trtcm::mark(&mut self.b, len, incoming),
        }
    }

    /// The start of every marking at `now`: refill the buckets, and the colour the packet
    /// is metered with (green when colour-blind, `incoming` when colour-aware).
    #[inline]
    fn begin(&mut self, incoming: Color, now: Instant) -> Color {
        self.refill(now);
        match self.mode {
            ColorMode::Blind => Color::Green,
            ColorMode::Aware => incoming,
        }
    }

    /// Add what the time from the checkpoint to `now` earned (nothing if `now` is
    /// earlier) and move the checkpoint there (never backwards).
    #[inline]
    fn refill(&mut self, now: Instant) {
        let elapsed_ns = now.saturating_since(self.t_c).0;
        self.t_c = self.t_c.max(now);
        match self.spec {
            MeterSpec::Srtcm { .. } => srtcm::refill(&mut self.b, elapsed_ns),
            MeterSpec::Trtcm { .. } | MeterSpec::Rfc4115 { .. } => {
                trtcm::refill(&mut self.b, elapsed_ns)
            }
        }
    }

    pub fn spec(&self) -> &MeterSpec {
        &self.spec
    }

    pub fn mode(&self) -> ColorMode {
        self.mode
    }

    /// Tokens in each bucket at `now`, in bytes (rounded down), for statistics and tests:
    /// (C, E) for the srTCM and RFC 4115, (C, P) for the trTCM. No state change.
    pub fn levels(&self, now: Instant) -> (u64, u64) {
        let mut m = self.clone();
        m.refill(now);
        let bytes = |b: &Bucket<Exact>| b.tokens().max(0) as u64 / EXACT_PER_BYTE;
        (bytes(&m.b.c), bytes(&m.b.x))
    }
}
