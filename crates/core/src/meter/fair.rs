//! Flow-fair marking inside an aggregate: a two-rate meter whose committed and second
//! allowances are divided among the aggregate's active flows (weir's answer to seed 001).
//!
//! **Why.** An aggregate meter (RFC 2698, one per customer) gives green to whichever packet
//! finds tokens, so the flows of one customer share its committed rate by arrival luck:
//! seed 001 measured Jain's index 0.88 among flows and 63-80 % of the committed rate
//! reaching the flows of an aggregate. A flow that loses green suffers the core's
//! yellow/red drops, backs off and loses more green. Per-flow marking fixes the
//! fairness but gives up the aggregate's statistical multiplexing (an idle flow's share is
//! lost). This marker keeps both:
//!
//! * The aggregate's own buckets (C at `cir`, P at `pir` for RFC 2698; C and E at `eir` for
//!   RFC 4115) decide exactly as the RFC does, so the customer's contract is unchanged:
//!   green bytes at most `cbs + cir·T/8` and (RFC 2698) green plus yellow at most
//!   `pbs + pir·T/8` over any T. A packet is never given a better colour than those
//!   buckets allow.
//! * Each active flow also has a share of each bucket: the same depth, `rate / n` where `n`
//!   is the number of active flows. A packet takes a colour only if its flow's share covers
//!   it **or** the aggregate bucket holds *spare* tokens: after taking the packet at least
//!   half the bucket would remain. Spare tokens are ones the other flows leave unused (a
//!   bucket that all flows drain at their shares stays below half), so a flow that sends
//!   less than its share lends the rest to the others, and the half kept back is what
//!   flows within their share can still draw on.
//!
//! Marking (colour-aware; colour-blind is every packet arriving green), `A` the aggregate's
//! bucket, `F` the flow's share of it, `spare(A) = A - B >= depth(A)/2`:
//!
//! ```text
//! RFC 2698:  if incoming red or P < B or not (Fp >= B or spare(P)):   red
//!            else if incoming yellow or C < B or not (Fc >= B or spare(C)):
//!                                               yellow, P -= B, Fp -= B
//!            else                               green,  P, Fp, C, Fc -= B
//! RFC 4115:  if incoming green and C >= B and (Fc >= B or spare(C)):  green, C, Fc -= B
//!            else if incoming not red and E >= B and (Fe >= B or spare(E)):
//!                                               yellow, E, Fe -= B
//!            else                               red
//! ```
//!
//! A share never goes below zero (a packet that borrowed takes what its share had).
//! RFC 2697's srTCM has no fair form: its excess bucket is fed by the committed one's
//! overflow, not by a rate that can be divided.
//!
//! **Flows.** A flow is the direction-independent 5-tuple hash the classifier stamps
//! ([`Meta::flow`](crate::pool::Meta)). Shares live in a table of `slots` entries (a power
//! of two, chosen by the policy; 1024 by default), indexed by the hash. A flow that sent
//! nothing for [`IDLE`] is inactive: its slot may be taken by another flow, and it no
//! longer counts in `n`. A new flow counts at once (the shares shrink at its first packet);
//! departures are counted every [`RECOUNT`] by a scan of the table. Two active flows in one
//! slot share one share (with 1024 slots and 100 flows, about 5 % of flows collide).
//!
//! **Units and exactness.** The aggregate buckets are the meter's exact ones. A share's
//! rate is `rate / n` bit/s rounded down (an error under 1 bit/s per flow); shares are
//! refilled lazily at their flow's packets, at the rate in force then.
//!
//! **Cost.** One slot look-up and two more bucket refills per packet; a scan of the table
//! every 100 ms. Memory: 32 bytes a slot (32 KiB for 1024).

use super::token_bucket::{Bucket, Exact};
use super::{Buckets, Meter, MeterSpec};
use crate::pool::Color;
use crate::rate::Rate;
use crate::time::{Duration, Instant};

/// Slots of a flow table unless the policy says otherwise.
pub const DEFAULT_SLOTS: u32 = 1024;
/// The largest flow table.
pub const MAX_SLOTS: u32 = 1 << 20;
/// A flow that sent nothing for this long is no longer active.
pub const IDLE: Duration = Duration::from_secs(1);
/// How often departed flows are uncounted.
pub const RECOUNT: Duration = Duration::from_millis(100);

/// How a meter's allowance is shared among the packets it measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Share {
    /// The RFCs' meter: the whole aggregate draws on one set of buckets.
    #[default]
    Aggregate,
    /// Divided among the active flows, with spare tokens lent ([`FlowShare`]), in a table of
    /// this many slots (a power of two).
    Flow { slots: u32 },
}

impl Share {
    /// Whether `spec` can be shared per flow (RFC 2698 and RFC 4115: two divisible rates).
    pub fn supports(spec: &MeterSpec) -> bool {
        !matches!(spec, MeterSpec::Srtcm { .. })
    }
}

/// One flow's shares of the two buckets.
#[derive(Copy, Clone, Debug)]
struct Slot {
    flow: u64,
    /// Last packet, and the shares' checkpoint. Meaningful only when `used`.
    seen: Instant,
    c: i64,
    x: i64,
    used: bool,
}

const EMPTY: Slot = Slot {
    flow: 0,
    seen: Instant::ZERO,
    c: 0,
    x: 0,
    used: false,
};

/// The per-flow state of a fair meter (see the module). The aggregate buckets stay in the
/// [`Meter`]; [`Meter::mark_fair`] colours with both.
#[derive(Clone, Debug)]
pub struct FlowShare {
    slots: Vec<Slot>,
    /// Shares' rate and depth (their token levels live in the slots).
    c: Bucket<Exact>,
    x: Bucket<Exact>,
    /// The aggregate's rates, divided by `active`.
    rates: (u64, u64),
    active: u32,
    next_recount: Instant,
    /// Packets of a flow that found its slot held by another active flow.
    collisions: u64,
}

impl FlowShare {
    /// A table of `slots` (rounded up to a power of two, at most [`MAX_SLOTS`]) for `m`'s
    /// buckets; `Err` for an srTCM.
    pub fn new(m: &Meter, slots: u32, now: Instant) -> Result<FlowShare, String> {
        if !Share::supports(&m.spec) {
            return Err(
                "an srtcm meter cannot be shared per flow (its excess bucket is fed \
                        by the committed one's overflow); use trtcm or rfc4115"
                    .into(),
            );
        }
        let n = slots.clamp(1, MAX_SLOTS).next_power_of_two();
        let ((cir, _), (rate2, _)) = m.spec.buckets();
        let mut f = FlowShare {
            slots: vec![EMPTY; n as usize],
            c: m.b.c,
            x: m.b.x,
            rates: (cir, rate2),
            active: 0,
            next_recount: now + RECOUNT,
            collisions: 0,
        };
        f.set_active(0);
        Ok(f)
    }

    /// Flows counted active now.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Packets that shared a slot with another active flow.
    pub fn collisions(&self) -> u64 {
        self.collisions
    }

    /// Slots in the table.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The shares' rates in bit/s (committed, second) for the current count.
    pub fn share_rates(&self) -> (u64, u64) {
        (self.c.rate().bps(), self.x.rate().bps())
    }

    /// Count `n` active flows and give each `rate / n` (the whole rate when none).
    fn set_active(&mut self, n: u32) {
        self.active = n;
        let n = n.max(1);
        let share = |bps: u64| Rate::from_bps((bps / n as u64).max(1));
        self.c.set_rate(share(self.rates.0), self.c.depth());
        self.x.set_rate(share(self.rates.1), self.x.depth());
    }

    /// Uncount the flows idle for [`IDLE`] (every [`RECOUNT`]).
    fn recount(&mut self, now: Instant) {
        if now < self.next_recount {
            return;
        }
        self.next_recount = now + RECOUNT;
        let mut n = 0;
        for s in self.slots.iter_mut().filter(|s| s.used) {
            if now.saturating_since(s.seen) >= IDLE {
                s.used = false;
            } else {
                n += 1;
            }
        }
        self.set_active(n);
    }

    /// The slot of `flow` at `now`, its shares refilled to `now`: a new or returning flow
    /// starts with full shares and is counted.
    fn slot(&mut self, flow: u64, now: Instant) -> usize {
        self.recount(now);
        let i = (flow as usize) & (self.slots.len() - 1);
        let s = self.slots[i];
        let idle = !s.used || now.saturating_since(s.seen) >= IDLE;
        if idle {
            if !s.used {
                self.set_active(self.active + 1);
            }
            self.slots[i] = Slot {
                flow,
                seen: now,
                c: self.c.depth(),
                x: self.x.depth(),
                used: true,
            };
        } else {
            self.collisions += (s.flow != flow) as u64;
            let elapsed = now.saturating_since(s.seen).as_nanos();
            let s = &mut self.slots[i];
            s.c = self.c.with_tokens(s.c).level_after(self.c.earned(elapsed));
            s.x = self.x.with_tokens(s.x).level_after(self.x.earned(elapsed));
            s.seen = s.seen.max(now);
        }
        i
    }
}

/// Whether `share` covers a `len`-byte packet, or `agg` would keep at least half its depth
/// after taking it (spare tokens).
#[inline]
fn may_take(agg: &Bucket<Exact>, share: &Bucket<Exact>, len: u32) -> bool {
    share.covers(len) || agg.tokens() - agg.cost(len) >= agg.depth() / 2
}

/// The fair marking rule of the module for the aggregate's buckets `b` and the flow's
/// shares `fc`, `fx`.
fn mark(
    spec: &MeterSpec,
    b: &mut Buckets,
    fc: &mut Bucket<Exact>,
    fx: &mut Bucket<Exact>,
    len: u32,
    incoming: Color,
) -> Color {
    let (c, x) = (&mut b.c, &mut b.x);
    let green_ok = |c: &Bucket<Exact>, fc: &Bucket<Exact>| c.covers(len) && may_take(c, fc, len);
    match spec {
        MeterSpec::Trtcm { .. } => {
            if incoming == Color::Red || !x.covers(len) || !may_take(x, fx, len) {
                return Color::Red;
            }
            x.consume(len, 0);
            fx.consume(len, 0);
            if incoming == Color::Yellow || !green_ok(c, fc) {
                return Color::Yellow;
            }
            c.consume(len, 0);
            fc.consume(len, 0);
            Color::Green
        }
        _ => {
            if incoming == Color::Green && green_ok(c, fc) {
                c.consume(len, 0);
                fc.consume(len, 0);
                Color::Green
            } else if incoming != Color::Red && x.covers(len) && may_take(x, fx, len) {
                x.consume(len, 0);
                fx.consume(len, 0);
                Color::Yellow
            } else {
                Color::Red
            }
        }
    }
}

impl Meter {
    /// Colour a `len`-byte packet of flow `flow` that arrived `incoming` at `now` with the
    /// flow-fair rule (see [`fair`](self)), `f` being this meter's flow table.
    #[inline]
    pub fn mark_fair(
        &mut self,
        f: &mut FlowShare,
        flow: u64,
        len: u32,
        incoming: Color,
        now: Instant,
    ) -> Color {
        let incoming = self.begin(incoming, now);
        let i = f.slot(flow, now);
        let mut fc = f.c.with_tokens(f.slots[i].c);
        let mut fx = f.x.with_tokens(f.slots[i].x);
        let color = mark(&self.spec, &mut self.b, &mut fc, &mut fx, len, incoming);
        f.slots[i].c = fc.tokens();
        f.slots[i].x = fx.tokens();
        color
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meter::tests::US;
    use crate::meter::ColorMode;
    use crate::pool::Color::{Green as G, Red as R, Yellow as Y};

    const A: u64 = 0xA;
    const B: u64 = 0xB;

    /// trTCM CIR 8 Mbit/s (1 byte/µs) CBS 2000 B, PIR 16 Mbit/s PBS 4000 B.
    fn trtcm() -> Meter {
        let spec = MeterSpec::Trtcm {
            cir: 8_000_000,
            cbs: 2000,
            pir: 16_000_000,
            pbs: 4000,
        };
        Meter::new(spec, ColorMode::Blind, Instant::ZERO).unwrap()
    }

    fn at(us: u64) -> Instant {
        Instant(us * US)
    }

    /// Hand-computed (bytes, µs): two flows, shares 0.5 B/µs of C and 1 B/µs of P once
    /// both are active. The plain trTCM gives A's second packet at 1000 µs green and B's
    /// yellow; the fair one the opposite.
    #[test]
    fn hand_computed_two_flows() {
        let mut m = trtcm();
        let mut plain = m.clone();
        let mut f = FlowShare::new(&m, 16, Instant::ZERO).unwrap();
        let mut mark = |flow, t| m.mark_fair(&mut f, flow, 1000, G, at(t));
        // t=0: A 1000: P 4000→3000, Fp_A 3000; C 2000→1000, Fc_A 1000: green.
        assert_eq!(mark(A, 0), G);
        // A 1000: P 2000, Fp_A 2000; C 0, Fc_A 0: green.
        assert_eq!(mark(A, 0), G);
        // B 1000 (n = 2): P 1000, Fp_B 3000; C 0 < 1000: yellow.
        assert_eq!(mark(B, 0), Y);
        // t=1000: C 1000, P 3000; Fc_A 0+500 = 500, Fp_A 2000+1000 = 3000.
        // A: P ok → 2000, Fp_A 2000; C covers but Fc_A 500 < 1000 and C-B = 0 < 1000
        // (half of CBS): yellow.
        assert_eq!(mark(A, 1000), Y);
        // B: Fc_B min(2000, 2000+500) covers; C 1000→0: green.
        assert_eq!(mark(B, 1000), G);
        assert_eq!(f.active(), 2);
        assert_eq!(f.share_rates(), (4_000_000, 8_000_000));

        let mut p = |t| plain.mark(1000, G, at(t));
        assert_eq!([p(0), p(0), p(0), p(1000), p(1000)], [G, G, Y, G, Y]);
    }

    /// Spare tokens: a flow alone in a two-flow aggregate borrows what the other leaves,
    /// up to the aggregate's rate, but not below half the bucket.
    #[test]
    fn an_idle_flows_share_is_lent() {
        let mut m = trtcm();
        let mut f = FlowShare::new(&m, 16, Instant::ZERO).unwrap();
        // B speaks once, then only A sends: 1000 B every 100 µs (80 Mbit/s) for 500 ms.
        m.mark_fair(&mut f, B, 100, G, at(0));
        let mut green = 0u64;
        for k in 0..5000 {
            if m.mark_fair(&mut f, A, 1000, G, at(k * 100)) == G {
                green += 1000;
            }
        }
        // CIR earns 500,000 B in 500 ms, plus the 2000 B burst; A's own share is half.
        // A takes whatever leaves C above half (1000 B), so all but ~1 packet's worth.
        assert!((495_000..=502_000).contains(&green), "{green}");
        assert_eq!(f.active(), 2);
    }

    /// Two flows offering the same load interleaved: the plain meter gives one of them
    /// all the green; the fair one splits it evenly and still uses all of it.
    #[test]
    fn equal_flows_get_equal_green() {
        let (mut plain, mut fair) = (trtcm(), trtcm());
        let mut f = FlowShare::new(&fair, 64, Instant::ZERO).unwrap();
        let (mut gp, mut gf) = ([0u64; 2], [0u64; 2]);
        for k in 0..10_000u64 {
            // A at k ms, B at k ms + 500 µs: 1000 B each, 8 Mbit/s each (twice CIR).
            for (j, (flow, t)) in [(A, k * 1000), (B, k * 1000 + 500)].into_iter().enumerate() {
                if plain.mark(1000, G, at(t)) == G {
                    gp[j] += 1;
                }
                if fair.mark_fair(&mut f, flow, 1000, G, at(t)) == G {
                    gf[j] += 1;
                }
            }
        }
        // The plain trTCM: C earns 500 B between B and A, 500 between A and B: A's arrival
        // finds 1000, B's 500 — A takes every green.
        assert!(gp[1] <= 2 && gp[0] >= 9_990, "{gp:?}");
        // Fair: CIR·10 s = 10,000 packets of green in all, half each.
        assert!(gf[0] + gf[1] >= 9_990, "{gf:?}");
        assert!(gf[0].abs_diff(gf[1]) <= 10, "{gf:?}");
    }

    /// Flows idle for a second stop counting (at the next recount) and their slot can be
    /// taken by another flow.
    #[test]
    fn idle_flows_are_uncounted() {
        let m = trtcm();
        let mut f = FlowShare::new(&m, 16, Instant::ZERO).unwrap();
        for flow in [1, 2, 3] {
            f.slot(flow, at(0));
        }
        assert_eq!(f.active(), 3);
        assert_eq!(f.share_rates().0, 8_000_000 / 3);
        // Flow 1 keeps sending; 2 and 3 fall silent.
        for ms in (100..=1_200).step_by(100) {
            f.slot(1, at(ms * 1000));
        }
        assert_eq!(f.active(), 1);
        assert_eq!(f.share_rates(), (8_000_000, 16_000_000));
        // Flow 18 hashes to flow 2's slot (16 slots) and takes it.
        f.slot(18, at(1_250_000));
        assert_eq!(f.active(), 2);
        assert_eq!(f.slots[2].flow, 18);
        // Flow 17 collides with the active flow 1: it shares flow 1's shares.
        assert_eq!(f.collisions(), 0);
        f.slot(17, at(1_260_000));
        assert_eq!((f.active(), f.collisions(), f.slots[1].flow), (2, 1, 1));
    }

    #[test]
    fn rfc4115_hand_computed() {
        // CIR 8 Mbit/s CBS 2000, EIR 8 Mbit/s EBS 2000.
        let spec = MeterSpec::Rfc4115 {
            cir: 8_000_000,
            cbs: 2000,
            eir: 8_000_000,
            ebs: 2000,
        };
        let mut m = Meter::new(spec, ColorMode::Aware, Instant::ZERO).unwrap();
        let mut f = FlowShare::new(&m, 16, Instant::ZERO).unwrap();
        let mut mark = |flow, inc, t| m.mark_fair(&mut f, flow, 1000, inc, at(t));
        // A: green twice (C 0, Fc_A 0); B (n=2): C empty → E 2000→1000: yellow.
        assert_eq!([mark(A, G, 0), mark(A, G, 0), mark(B, G, 0)], [G, G, Y]);
        // A arrives yellow: E 1000 covers, Fe_A full: yellow (E 0); then red (E empty).
        assert_eq!([mark(A, Y, 0), mark(A, G, 0)], [Y, R]);
        // t=1000: C 1000, E 1000; Fc_A 500: A may not take C (C-B = 0 < 1000) → E: Fe_A
        // 1000+500 covers: yellow. B: Fc_B full: green.
        assert_eq!([mark(A, G, 1000), mark(B, G, 1000)], [Y, G]);
        // Red stays red.
        assert_eq!(mark(B, R, 5000), R);
    }

    #[test]
    fn srtcm_cannot_be_shared() {
        let m = Meter::new(
            MeterSpec::Srtcm {
                cir: 1_000_000,
                cbs: 3000,
                ebs: 3000,
            },
            ColorMode::Blind,
            Instant::ZERO,
        )
        .unwrap();
        let e = FlowShare::new(&m, 16, Instant::ZERO).unwrap_err();
        assert!(e.contains("srtcm"), "{e}");
        assert_eq!(
            FlowShare::new(&trtcm(), 1000, Instant::ZERO)
                .unwrap()
                .slots(),
            1024
        );
    }

    proptest::proptest! {
        /// The aggregate's contract holds whatever the flows do: over the whole run, green
        /// bytes at most CBS + CIR·T and green + yellow at most PBS + PIR·T.
        #[test]
        fn the_aggregate_envelope_holds(
            pkts in proptest::collection::vec((0u64..8, 40u32..1600, 0u64..400), 1..400),
        ) {
            let mut m = trtcm();
            let mut f = FlowShare::new(&m, 4, Instant::ZERO).unwrap();
            let (mut t, mut green, mut passed) = (0u64, 0u64, 0u64);
            for (flow, len, gap) in pkts {
                t += gap;
                match m.mark_fair(&mut f, flow, len, G, at(t)) {
                    G => { green += len as u64; passed += len as u64 }
                    Y => passed += len as u64,
                    R => {}
                }
            }
            proptest::prop_assert!(green <= 2000 + t);
            proptest::prop_assert!(passed <= 4000 + 2 * t);
        }
    }
}
