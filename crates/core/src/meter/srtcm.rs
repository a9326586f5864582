//! Single-rate three-colour marker: RFC 2697 (srTCM).
//!
//! What it does: meters a packet stream against one rate and two bursts and colours each
//! packet green while the stream stays within the committed burst, yellow while it stays
//! within the excess burst, and red beyond (RFC 2697 section 1). A [`Meter`] with
//! [`MeterSpec::Srtcm`] runs it; this file holds the update and the marking rule.
//!
//! Parameters: `cir`, the committed information rate, bit/s (at least 1); `cbs`, the
//! committed burst size, and `ebs`, the excess burst size, bytes (0 to 512 MiB each, not
//! both 0: section 2's MUST).
//!
//! Buckets (section 3): C, `cbs` deep, and E, `ebs` deep, both full at the start. One rate
//! feeds both: tokens go into C until it is full, then into E until it is full, then are
//! lost. Here the `elapsed × cir` nano-bits earned since the meter's checkpoint go into C
//! at once and what overflows C goes into E ([`Bucket::refill_spill`]): the same as the
//! RFC's token-by-token update, since E gets nothing while C has room.
//!
//! Marking a packet of B bytes (section 3, colour-aware; colour-blind is the same with every
//! packet green):
//!
//! ```text
//! if incoming is green and Tc >= B:         green,  Tc -= B
//! else if incoming is not red and Te >= B:  yellow, Te -= B
//! else:                                     red     (no tokens taken)
//! ```
//!
//! Invariants: `0 <= Tc <= cbs` and `0 <= Te <= ebs` (in bytes); a packet takes tokens
//! from one bucket at most, and only when they cover all of it; colour-aware marking never
//! promotes (a yellow arrival is never green, a red one stays red). Over any interval of T
//! seconds green bytes are at most `cbs + cir·T/8`, and green plus yellow bytes at most
//! `cbs + ebs + cir·T/8`.
//!
//! RFC 4115 marks with this same rule, its E bucket fed by a rate of its own (see
//! [`trtcm`](super::trtcm)); `mark` below serves both.

use super::Buckets;
#[cfg(doc)]
use super::{token_bucket::Bucket, Meter, MeterSpec};
use crate::pool::Color;

/// RFC 2697 section 3's update for `elapsed_ns` nanoseconds: C takes what CIR earned, E
/// what overflows C.
#[inline]
pub(super) fn refill(b: &mut Buckets, elapsed_ns: u64) {
    let spill = b.c.refill_spill(b.c.earned(elapsed_ns));
    b.x.refill(spill);
}

/// Colour a `len`-byte packet that arrived `incoming` (green when colour-blind) against the
/// committed bucket C, then the excess bucket E (RFC 2697 section 3, RFC 4115 section 3),
/// taking its tokens from the bucket that coloured it.
#[inline]
pub(super) fn mark(b: &mut Buckets, len: u32, incoming: Color) -> Color {
    let (c, e) = (&mut b.c, &mut b.x);
    if incoming == Color::Green && c.covers(len) {
        c.consume(len, 0);
        Color::Green
    } else if incoming != Color::Red && e.covers(len) {
        e.consume(len, 0);
        Color::Yellow
    } else {
        Color::Red
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{meter, run, srtcm};
    use super::super::ColorMode::{Aware, Blind};

    // Hand computations in bytes and µs: at CIR 8 Mbit/s a microsecond earns one byte.
    // Scripts (see `run`): `@T` time in µs, `LEN:C` a green arrival expected colour C,
    // `yLEN:C`/`rLEN:C` yellow/red arrivals, `=C/E` the bucket levels in bytes.
    const CIR: u64 = 8_000_000;

    #[test]
    fn colour_blind_full_partial_and_overflow_into_e() {
        // CBS 3000, EBS 2000.
        // @0: full, Tc 3000, Te 2000. 1500 -> Tc covers: green, Tc 1500; 1500 -> green,
        //     Tc 0; 1500 -> Tc 0, Te 2000: yellow, Te 500; 600 -> Te 500 < 600: red,
        //     nothing taken; 500 -> Te 500 covers it (equal is enough): yellow, Te 0.
        // @1000: +1000 B, all into C (not full): Tc 1000. 1000 -> green, Tc 0.
        // @1200: Tc 200. 300 -> Tc 200 < 300, Te 0: red. 200 -> green, Tc 0.
        // @5700: +4500 B: C takes 3000 (full), the 1500 that overflow go into E.
        //     1600 -> green, Tc 1400; 1600 -> Tc 1400 and Te 1500 both short: red;
        //     1500 -> yellow, Te 0; 1400 -> green, Tc 0.
        // @10700: +5000 B: C takes 3000, E the 2000 that overflow: both full. Arrival
        //     colours are ignored when colour-blind: red and yellow arrivals are green.
        let mut m = meter(srtcm(CIR, 3000, 2000), Blind);
        run(
            &mut m,
            "@0     =3000/2000 1500:G 1500:G 1500:Y 600:R 500:Y =0/0
             @1000  1000:G
             @1200  300:R 200:G
             @5700  =3000/1500 1600:G 1600:R 1500:Y 1400:G =0/0
             @10700 =3000/2000 r100:G y100:G",
        );
    }

    #[test]
    fn colour_aware_never_promotes() {
        // CBS 3000, EBS 2000.
        // @0: Tc 3000, Te 2000. yellow 100 -> never green, although C could cover it:
        //     yellow, Te 1900; red 100 -> red, nothing taken (3000/1900);
        //     green 1500 -> green, Tc 1500; green 2000 -> Tc 1500 and Te 1900 short: red;
        //     green 1900 -> demoted: yellow, Te 0; yellow 1000 -> Te 0, and C is not for
        //     yellow: red; green 1500 -> green, Tc 0.
        // @2500: Tc 2500, Te 0. red 1 -> red; yellow 1 -> red.
        // @6000: +3500 B: Tc 3000, the 3000 that overflow fill E to 2000. yellow 2000 ->
        //     yellow, Te 0.
        let mut m = meter(srtcm(CIR, 3000, 2000), Aware);
        run(
            &mut m,
            "@0    y100:Y r100:R =3000/1900 1500:G 2000:R 1900:Y y1000:R 1500:G =0/0
             @2500 r1:R y1:R
             @6000 y2000:Y =3000/0",
        );
    }

    #[test]
    fn one_burst_zero() {
        // CBS 0: everything CIR earns overflows into E; packets are yellow or red.
        // @0: Te 1500. 1000 -> yellow, Te 500. @500: Te 1000. 1000 -> yellow; 1 -> red.
        run(
            &mut meter(srtcm(CIR, 0, 1500), Blind),
            "@0 1000:Y @500 1000:Y 1:R",
        );
        // EBS 0: green or red only. @0: Tc 1500. 1500 -> green; 1 -> red.
        // @1000: Tc 1000, nothing overflows into a 0-byte E. 1000 -> green.
        // @1000000: C full again, E still 0.
        run(
            &mut meter(srtcm(CIR, 1500, 0), Blind),
            "@0 1500:G 1:R @1000 1000:G @1000000 =1500/0",
        );
    }
}
