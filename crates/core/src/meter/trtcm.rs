//! Two-rate three-colour markers: RFC 2698 (trTCM) and RFC 4115's variant.
//!
//! What they do: meter a packet stream against a committed rate and burst and a second
//! rate and burst, and colour each packet green within the committed profile, yellow
//! within the second, red beyond. A [`Meter`] with [`MeterSpec::Trtcm`] or
//! [`MeterSpec::Rfc4115`] runs them; this file holds their update and RFC 2698's marking
//! rule (RFC 4115 marks with the srTCM's rule, `srtcm::mark`).
//!
//! Both have two buckets that earn independently, each at its own rate up to its own depth,
//! and both start full (RFC 2698 section 3, RFC 4115 section 3): the committed bucket C
//! (`cir` bit/s, `cbs` bytes) and a second one. They differ in what the second bucket means
//! and in how a packet is tested against the two.
//!
//! **RFC 2698.** Parameters: `cir` and `pir` (peak information rate), bit/s, `pir >= cir`
//! (section 2's MUST); `cbs` and `pbs` (peak burst size), bytes, each at least 1 (section
//! 2: both MUST be greater than 0) and at most 512 MiB. The second bucket P (`pir`, `pbs`)
//! bounds all traffic that is not red, so a packet is tested against P first and a green
//! packet takes from both buckets (section 3; colour-blind is colour-aware with every
//! packet green):
//!
//! ```text
//! if incoming is red or Tp < B:             red     (no tokens taken)
//! else if incoming is yellow or Tc < B:     yellow, Tp -= B
//! else:                                     green,  Tp -= B, Tc -= B
//! ```
//!
//! So when P runs out before C (a `pbs` below `cbs`, or yellow traffic draining P), even a
//! packet C could cover is red. Over any interval of T seconds green bytes are at most
//! `cbs + cir·T/8` and green plus yellow bytes at most `pbs + pir·T/8`.
//!
//! **RFC 4115.** Parameters: `cir` and `eir` (excess information rate), bit/s, at least 1
//! each (no order between them); `cbs` and `ebs` (excess burst size), bytes, at least 1
//! each (section 2 wants them above the largest packet) and at most 512 MiB. The second
//! bucket E (`eir`, `ebs`) holds only the excess: a green packet takes from C alone and
//! yellow is tested against E alone, exactly the srTCM's marking (section 3), so in-profile
//! traffic does not use up the excess allowance and no peak-rate shaping of it is
//! needed. Over any interval of T seconds green bytes are at most `cbs + cir·T/8` and
//! yellow bytes at most `ebs + eir·T/8`.
//!
//! Invariants (both): `0 <= tokens <= depth` in each bucket; tokens are taken only when
//! they cover the whole packet; colour-aware marking never promotes.

use super::Buckets;
#[cfg(doc)]
use super::{Meter, MeterSpec};
use crate::pool::Color;

/// RFC 2698 and RFC 4115 section 3's update for `elapsed_ns` nanoseconds: each bucket earns
/// at its own rate, up to its own depth.
#[inline]
pub(super) fn refill(b: &mut Buckets, elapsed_ns: u64) {
    b.c.refill_ns(elapsed_ns);
    b.x.refill_ns(elapsed_ns);
}

/// Colour a `len`-byte packet that arrived `incoming` (green when colour-blind) by RFC 2698
/// section 3: against the peak bucket P first, then the committed bucket C.
#[inline]
pub(super) fn mark(b: &mut Buckets, len: u32, incoming: Color) -> Color {
    let (c, p) = (&mut b.c, &mut b.x);
    if incoming == Color::Red || !p.covers(len) {
        return Color::Red;
    }
    p.consume(len, 0);
    if incoming == Color::Yellow || !c.covers(len) {
        Color::Yellow
    } else {
        c.consume(len, 0);
        Color::Green
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{meter, run};
    use super::super::ColorMode::{self, Aware, Blind};
    use super::super::{Meter, MeterSpec};

    // Hand computations in bytes and µs: 8 Mbit/s earns a byte a microsecond, 16 Mbit/s
    // two. Scripts (see `run`): `@T` time in µs, `LEN:C` a green arrival expected colour C,
    // `yLEN:C`/`rLEN:C` yellow/red arrivals, `=C/X` the levels of C and P (or E) in bytes.
    const MBIT8: u64 = 8_000_000;

    fn trtcm(cbs: u32, pbs: u32, mode: ColorMode) -> Meter {
        let pir = 2 * MBIT8;
        meter(
            MeterSpec::Trtcm {
                cir: MBIT8,
                cbs,
                pir,
                pbs,
            },
            mode,
        )
    }

    /// CIR = EIR = 8 Mbit/s, CBS 3000, EBS 2000.
    fn rfc4115(mode: ColorMode) -> Meter {
        let (cir, eir) = (MBIT8, MBIT8);
        meter(
            MeterSpec::Rfc4115 {
                cir,
                cbs: 3000,
                eir,
                ebs: 2000,
            },
            mode,
        )
    }

    #[test]
    fn trtcm_colour_blind() {
        // C: 1 B/us, 3000 B. P: 2 B/us, 4000 B.
        // @0: full. 1500 -> Tp and Tc cover: green, Tp 2500, Tc 1500; 1500 -> green,
        //     Tp 1000, Tc 0; 1000 -> Tp covers, Tc 0 does not: yellow, Tp 0; 100 -> Tp 0:
        //     red.
        // @500: Tp +1000 = 1000, Tc +500 = 500. 600 -> Tp covers, Tc 500 < 600: yellow,
        //     Tp 400; 500 -> Tp 400 < 500: red, although Tc 500 would cover it (P runs out
        //     first); 400 -> both cover: green, Tp 0, Tc 100.
        // @10000: both full again.
        run(
            &mut trtcm(3000, 4000, Blind),
            "@0     =3000/4000 1500:G 1500:G 1000:Y 100:R =0/0
             @500   600:Y 500:R 400:G =100/0
             @10000 =3000/4000",
        );
    }

    #[test]
    fn trtcm_peak_bucket_smaller_than_committed() {
        // PBS 2000 < CBS 3000 (RFC 2698 asks no order): green takes from both, so P empties
        // first. @0: 1000 -> green (Tp 1000, Tc 2000); 1000 -> green (Tp 0, Tc 1000);
        // 500 -> Tp 0: red, with 1000 B in C.
        run(
            &mut trtcm(3000, 2000, Blind),
            "@0 1000:G 1000:G 500:R =1000/0",
        );
    }

    #[test]
    fn trtcm_colour_aware() {
        // C: 1 B/us, 3000 B. P: 2 B/us, 4000 B.
        // @0: red 100 -> red, nothing taken; yellow 1500 -> Tp covers: yellow (never
        //     green), Tp 2500, C untouched; yellow 1500 -> yellow, Tp 1000; green 1500 ->
        //     Tp 1000 < 1500: red, although Tc 3000 would cover it; green 1000 -> green,
        //     Tp 0, Tc 2000.
        // @1000: Tp 2000, Tc 3000 (capped). yellow 2000 -> yellow, Tp 0; red 1 -> red.
        run(
            &mut trtcm(3000, 4000, Aware),
            "@0    r100:R y1500:Y y1500:Y 1500:R 1000:G =2000/0
             @1000 y2000:Y r1:R =3000/0",
        );
    }

    #[test]
    fn rfc4115_colour_blind() {
        // C: 1 B/us, 3000 B. E: 1 B/us, 2000 B.
        // @0: 3000 -> green, Tc 0, and E keeps its 2000 (a green packet takes nothing from
        //     E; a trTCM's P would have lost them); 2000 -> Tc 0, Te 2000: yellow, Te 0;
        //     1 -> red.
        // @500: Tc 500 and Te 500: E earns at its own rate while C is not full (an srTCM's
        //     E would still be empty). 400 -> green, Tc 100; 500 -> Tc 100 < 500, Te 500:
        //     yellow, Te 0; 1 -> Tc 100 covers it: green, Tc 99 B.
        // @4000: +3500 B each, capped independently, nothing spills: both full.
        run(
            &mut rfc4115(Blind),
            "@0    3000:G =0/2000 2000:Y 1:R
             @500  400:G 500:Y 1:G =99/0
             @4000 =3000/2000",
        );
    }

    #[test]
    fn rfc4115_colour_aware_tests_yellow_against_e_only() {
        // @0: Tc 3000, Te 2000. yellow 1000 -> Te covers: yellow, Te 1000 (C is not for
        //     yellow); green 2500 -> green, Tc 500; green 1000 -> Tc 500 < 1000, Te 1000:
        //     yellow, Te 0; red 1 -> red; yellow 500 -> Te 0: red, although Tc 500 would
        //     cover it; green 500 -> green, Tc 0.
        run(
            &mut rfc4115(Aware),
            "@0 y1000:Y 2500:G 1000:Y r1:R y500:R 500:G =0/0",
        );
    }
}
