//! One FIFO managed by an AQM (`queue = "fifo"` with `aqm = "codel"` or `"cobalt"`):
//! Linux `sch_codel` for CoDel, and the same shape with COBALT.
//!
//! * Enqueue: the FIFO's hard limits ([`Limits`]: packets, default 1000 as `sch_codel`,
//!   and bytes, default unlimited) refuse the arrival (`queue_full` / `byte_limit`, tail
//!   drop); the refusal is told to the AQM ([`Aqm::on_overflow`]: BLUE's probability
//!   rises, CoDel's count grows) and counted in [`AqmStats::overlimit_dropped`].
//! * Dequeue: the head is taken and judged ([`super::judge_packet`], sojourn =
//!   `now - arrival`, the bytes left behind it); a drop goes to `cx.dropped` as
//!   [`DropCause::Aqm`] and the next head is judged at the same `now`; a queue found
//!   empty is told to the AQM ([`Aqm::on_empty`]).
//! * Work-conserving: `next_wakeup` is `None`.
//!
//! Statistics: [`AqmStats`] through [`Qdisc::aqm_stats`] (marks, AQM drops, unmarkable
//! signals, tail drops); [`crate::Counted`] counts the drops by cause.
//! Invariants: as [`Fifo`]'s; every packet the AQM drops was held by the FIFO.

use super::{judge_packet, Aqm, AqmKind, AqmParams, AqmStats, Cobalt, Codel, Verdict};
use crate::pool::PktId;
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::fifo::{Fifo, Limits};
use crate::rate::Rate;

/// Configuration of a FIFO with an AQM (the policy's `queue = "fifo"`, `aqm`, `target`,
/// `interval`, `ecn`, `limit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AqmFifoConfig {
    pub aqm: AqmKind,
    pub params: AqmParams,
    pub limits: Limits,
}

impl AqmFifoConfig {
    /// `sch_codel`'s packet limit.
    pub const LIMIT: u32 = 1000;

    /// COBALT with CAKE's parameters for `rate` ([`AqmParams::cake`]), 1000 packets.
    pub fn for_rate(rate: Option<Rate>) -> Self {
        AqmFifoConfig {
            aqm: AqmKind::Cobalt,
            params: AqmParams::cake(rate),
            limits: Limits::new(Self::LIMIT, Limits::UNLIMITED_BYTES),
        }
    }

    /// Check the values; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.limits.packets == 0 {
            return Err("limit: a queue must hold at least one packet".into());
        }
        if self.limits.bytes == 0 {
            return Err("limit: a queue must hold at least one byte".into());
        }
        self.params.validate()
    }

    /// The queue: a plain [`Fifo`] for `aqm = "none"`.
    pub fn build(&self) -> Result<Box<dyn Qdisc>, String> {
        self.validate()?;
        Ok(match self.aqm {
            AqmKind::None => Box::new(Fifo::with_limits(self.limits)),
            AqmKind::Codel => Box::new(AqmFifo::<Codel>::new(self.limits, self.params)?),
            AqmKind::Cobalt => Box::new(AqmFifo::<Cobalt>::new(self.limits, self.params)?),
        })
    }
}

impl Default for AqmFifoConfig {
    /// [`AqmFifoConfig::for_rate`] of an unlimited class.
    fn default() -> Self {
        Self::for_rate(None)
    }
}

/// A FIFO whose head is judged by the AQM `A` (see the module comment).
pub struct AqmFifo<A: Aqm> {
    fifo: Fifo,
    aqm: A,
    params: AqmParams,
    stats: AqmStats,
}

impl<A: Aqm> AqmFifo<A> {
    pub fn new(limits: Limits, params: AqmParams) -> Result<Self, String> {
        params.validate()?;
        Ok(AqmFifo {
            fifo: Fifo::with_limits(limits),
            aqm: A::default(),
            params,
            stats: AqmStats::default(),
        })
    }
    pub fn params(&self) -> &AqmParams {
        &self.params
    }
    /// The AQM's state.
    pub fn aqm(&self) -> &A {
        &self.aqm
    }
}

impl<A: Aqm> Qdisc for AqmFifo<A> {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        self.fifo.try_push(cx.pool, pkt).inspect_err(|_| {
            self.stats.overlimit_dropped += 1;
            self.aqm.on_overflow(&self.params, cx.now);
        })
    }

    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        loop {
            let Some(pkt) = self.fifo.pop(cx.pool) else {
                self.aqm.on_empty(&self.params, cx.now);
                return None;
            };
            let left = self.fifo.bytes();
            let v = judge_packet(
                &mut self.aqm,
                &self.params,
                pkt,
                left,
                left,
                cx,
                &mut self.stats,
            );
            if v != Verdict::Drop {
                return Some(pkt);
            }
            cx.drop_later(pkt, DropCause::Aqm);
        }
    }

    fn len(&self) -> usize {
        self.fifo.len()
    }
    fn bytes(&self) -> u64 {
        self.fifo.bytes()
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.fifo.drain_to(cx, cause);
    }
    fn aqm_stats(&self) -> Option<AqmStats> {
        Some(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Counted;
    use crate::rng::Rng;
    use crate::time::{Duration, Instant};
    use weir_wire::build::{self, EthSpec, Ipv4Spec};
    use weir_wire::ecn::ecn_field;
    use weir_wire::ip::ecn::{CE, ECT0, NOT_ECT};

    const MS: u64 = 1_000_000;

    struct Bench {
        pool: Pool,
        rng: Rng,
        dropped: Vec<(PktId, DropCause)>,
    }

    impl Bench {
        fn new() -> Self {
            Bench {
                pool: Pool::new(4096, 256),
                rng: Rng::new(1),
                dropped: Vec::new(),
            }
        }
        /// A 192-byte UDP frame with `ecn`, arriving at `t`.
        fn push(&mut self, q: &mut dyn Qdisc, t: u64, ecn: u8) -> Result<(), DropCause> {
            let p = self.pool.alloc().unwrap();
            let ip = Ipv4Spec {
                ecn,
                ..Ipv4Spec::default()
            };
            let n = build::udp_v4_frame(
                self.pool.slot_mut(p),
                &EthSpec::default(),
                &ip,
                1,
                2,
                &[0; 150],
            )
            .unwrap();
            let m = self.pool.meta_mut(p);
            (m.len, m.arrival) = (n as u32, Instant(t));
            let mut cx = Ctx::new(Instant(t), &mut self.pool, &mut self.rng, &mut self.dropped);
            let r = q.enqueue(p, &mut cx);
            if r.is_err() {
                self.pool.free(p);
            }
            r
        }
        /// Dequeue at `t`: the ECN field of the packet sent, if any.
        fn pop(&mut self, q: &mut dyn Qdisc, t: u64) -> Option<u8> {
            let mut cx = Ctx::new(Instant(t), &mut self.pool, &mut self.rng, &mut self.dropped);
            let p = q.dequeue(&mut cx)?;
            let e = ecn_field(self.pool.data(p)).unwrap();
            self.pool.free(p);
            Some(e)
        }
        fn free_dropped(&mut self) -> usize {
            let n = self.dropped.len();
            for (p, c) in self.dropped.drain(..) {
                assert_eq!(c, DropCause::Aqm);
                self.pool.free(p);
            }
            n
        }
    }

    /// A standing queue: 2 packets in per 1 out every ms, so the sojourn grows. CoDel
    /// signals from one interval after the sojourn passed the target; ECT packets are
    /// marked (and sent), the others dropped; the counters add up.
    #[test]
    fn codel_fifo_marks_ect_and_drops_the_rest() {
        for ecn in [ECT0, NOT_ECT] {
            let mut b = Bench::new();
            let params = AqmParams::cake(None);
            let mut q = Counted::new(Box::new(
                AqmFifo::<Codel>::new(Limits::new(4000, u64::MAX), params).unwrap(),
            ));
            let (mut ce, mut sent) = (0, 0);
            let mut first_signal = None;
            for t in 0..400u64 {
                b.push(&mut q, t * MS, ecn).unwrap();
                b.push(&mut q, t * MS, ecn).unwrap();
                if let Some(e) = b.pop(&mut q, t * MS) {
                    sent += 1;
                    if e == CE {
                        ce += 1;
                        first_signal.get_or_insert(t);
                    }
                }
                if b.free_dropped() > 0 {
                    first_signal.get_or_insert(t);
                }
                q.check().unwrap();
            }
            let s = q.aqm_stats().unwrap();
            // the packet sent at t arrived at t/2 (two arrive, one leaves a ms): its
            // sojourn reaches the 5 ms target at t = 9, so the first signal comes at the
            // first dequeue strictly after 9 + 100 ms
            assert_eq!(first_signal, Some(110), "ecn {ecn}");
            if ecn == ECT0 {
                assert_eq!(s.aqm_dropped, 0);
                assert_eq!(s.ecn_marked, ce);
                assert!(ce >= 5, "{ce}");
                assert_eq!(sent, 400);
            } else {
                assert_eq!(s.ecn_marked, 0);
                assert!(s.aqm_dropped >= 5);
                assert_eq!(q.stats.drops_by(DropCause::Aqm).packets, s.aqm_dropped);
            }
        }
    }

    /// COBALT on a FIFO: tail drops raise BLUE's probability, which then drops packets
    /// that CoDel alone would send.
    #[test]
    fn cobalt_fifo_overflow_feeds_blue() {
        let mut b = Bench::new();
        let mut q = Counted::new(Box::new(
            AqmFifo::<Cobalt>::new(Limits::new(10, u64::MAX), AqmParams::cake(None)).unwrap(),
        ));
        // 30 arrivals at once: 20 refused, p_drop rises once (once per target)
        for _ in 0..30 {
            let _ = b.push(&mut q, 6 * MS, NOT_ECT);
        }
        let s = q.aqm_stats().unwrap();
        assert_eq!(s.overlimit_dropped, 20);
        assert_eq!(q.stats.drops_by(DropCause::QueueFull).packets, 20);
        let mut f =
            AqmFifo::<Cobalt>::new(Limits::new(1, u64::MAX), AqmParams::cake(None)).unwrap();
        let mut t = 0;
        for _ in 0..128 {
            t += 6 * MS;
            b.push(&mut f, t, NOT_ECT).unwrap();
            assert!(b.push(&mut f, t, NOT_ECT).is_err());
            b.pop(&mut f, t);
        }
        assert_eq!(
            f.aqm().p_drop(),
            128 << 24,
            "one step per overflow > target apart"
        );
        q.check().unwrap();
    }

    /// Headers the marker cannot read are sent unchanged and counted; a pool without
    /// frame bytes (the simulator) has nothing to mark: the signal is a drop.
    #[test]
    fn unmarkable_and_metadata_only_packets() {
        let params = AqmParams::cake(None);
        for (slot, garbage) in [(256, true), (0, false)] {
            let mut pool = Pool::new(64, slot);
            let mut rng = Rng::new(1);
            let mut dropped = Vec::new();
            let mut q = AqmFifo::<Codel>::new(Limits::UNLIMITED, params).unwrap();
            let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
            for _ in 0..40 {
                let p = cx.pool.alloc().unwrap();
                if garbage {
                    // an IPv4 EtherType with a truncated header
                    cx.pool.slot_mut(p)[12..16].copy_from_slice(&[0x08, 0x00, 0x45, 0x02]);
                }
                cx.pool.meta_mut(p).len = 1000;
                q.enqueue(p, &mut cx).unwrap();
            }
            let mut sent = Vec::new();
            for t in [0, 10, 111, 112] {
                cx.now = Instant(t * MS);
                sent.extend(q.dequeue(&mut cx));
            }
            let s = q.aqm_stats().unwrap();
            if garbage {
                assert_eq!((s.unmarkable, s.aqm_dropped, s.ecn_marked), (1, 0, 0));
                let f = cx.pool.data(sent[2]);
                assert_eq!(&f[12..16], &[0x08, 0x00, 0x45, 0x02], "unchanged");
            } else {
                assert_eq!((s.unmarkable, s.aqm_dropped, s.ecn_marked), (0, 1, 0));
                assert_eq!(dropped.len(), 1);
            }
        }
    }

    #[test]
    fn config_defaults_validation_and_build() {
        let c = AqmFifoConfig::default();
        assert_eq!(c.aqm, AqmKind::Cobalt);
        assert_eq!(c.limits.packets, 1000);
        assert_eq!(c.params.target, Duration::from_millis(5));
        for kind in [AqmKind::None, AqmKind::Codel, AqmKind::Cobalt] {
            let q = AqmFifoConfig {
                aqm: kind,
                ..c.clone()
            }
            .build()
            .unwrap();
            assert_eq!(q.aqm_stats().is_some(), kind != AqmKind::None);
        }
        let bad = AqmFifoConfig {
            limits: Limits::new(0, u64::MAX),
            ..c.clone()
        };
        assert!(bad.build().err().unwrap().contains("limit"));
        let mut bad = c.clone();
        bad.params.target = Duration::from_millis(200);
        assert_eq!(
            bad.build().err().unwrap(),
            "aqm: target (200.000ms) must be shorter than interval (100.000ms)"
        );
    }
}
