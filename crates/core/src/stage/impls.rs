//! The queueing components as stages: the DiffServ conditioner (a gate that marks and
//! polices), the link-sharing shaper and the WAN link emulator (both hold packets). Their
//! algorithms are in [`crate::diffserv`], [`crate::sched::linkshare`] and
//! [`crate::emulate`]; this file only says how each takes part in a direction and what it
//! carries across a policy reload.

use super::{Carried, Packet, Rank, Shared, Stage, Step};
use crate::diffserv::Conditioner;
use crate::emulate::{EmuConfig, EmuLink, Emulator};
use crate::pool::PktId;
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::sched::linkshare::LinkShare;
use crate::time::Instant;

impl Stage for Conditioner {
    fn name(&self) -> &'static str {
        "condition"
    }
    fn rank(&self) -> Rank {
        Rank::Condition
    }
    fn input(
        &mut self,
        pkt: PktId,
        _at: Instant,
        _pk: &Packet<'_>,
        _sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        match self.apply(pkt, cx) {
            Ok(()) => Step::Next,
            Err(c) => Step::Drop(c),
        }
    }
}

impl Stage for LinkShare {
    fn name(&self) -> &'static str {
        "shape"
    }
    fn rank(&self) -> Rank {
        Rank::Shape
    }
    fn holds(&self) -> bool {
        true
    }
    #[inline]
    fn input(
        &mut self,
        pkt: PktId,
        _at: Instant,
        _pk: &Packet<'_>,
        _sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        // a shaper works on `cx.now`: its clock never runs backwards
        match self.enqueue(pkt, cx) {
            Ok(()) => Step::Held,
            Err(c) => Step::Drop(c),
        }
    }
    #[inline]
    fn poll(&mut self, _sh: &mut Shared, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.dequeue(cx)
    }
    fn next_wakeup(&self) -> Option<Instant> {
        Qdisc::next_wakeup(self)
    }
    fn len(&self) -> usize {
        Qdisc::len(self)
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        Qdisc::purge(self, cx, cause)
    }
    /// Classes with a namesake keep their token state (clamped to the new buckets).
    fn carry_from(&mut self, old: &mut dyn Stage, cx: &mut Ctx<'_>, _report: &mut Carried) {
        let Some(o) = old.as_any().downcast_ref::<LinkShare>() else {
            return;
        };
        for c in 0..o.num_classes() as u32 {
            if let Some(nc) = self.class_id(o.name(c)) {
                self.set_tokens(nc, o.tokens(c), cx.now);
            }
        }
    }
}

/// The emulation stage: the emulator and its profiles' names (index = profile).
pub struct EmuStage {
    pub emu: Emulator,
    pub names: Vec<String>,
}

impl Stage for EmuStage {
    fn name(&self) -> &'static str {
        "emulate"
    }
    fn rank(&self) -> Rank {
        Rank::Emulate
    }
    fn holds(&self) -> bool {
        true
    }
    #[inline]
    fn input(
        &mut self,
        pkt: PktId,
        at: Instant,
        _pk: &Packet<'_>,
        _sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        // an emulator times a packet from when it reached it
        match self.emu.enqueue_at(pkt, cx, at) {
            Ok(()) => Step::Held,
            Err(c) => Step::Drop(c),
        }
    }
    #[inline]
    fn poll(&mut self, _sh: &mut Shared, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.emu.dequeue(cx)
    }
    fn next_wakeup(&self) -> Option<Instant> {
        self.emu.next_wakeup()
    }
    fn len(&self) -> usize {
        self.emu.len()
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.emu.purge(cx, cause)
    }
    /// Profiles with a namesake keep their whole link — queue, delay line with every
    /// release time, loss state — reconfigured to the new profile for what comes next.
    fn carry_from(&mut self, old: &mut dyn Stage, _cx: &mut Ctx<'_>, report: &mut Carried) {
        let Some(o) = old.as_any_mut().downcast_mut::<EmuStage>() else {
            return;
        };
        let mut taken = Vec::new();
        for (j, name) in self.names.clone().iter().enumerate() {
            let Some(i) = o.names.iter().position(|x| x == name) else {
                continue;
            };
            if taken.contains(&i) {
                continue;
            }
            let cfg = self.emu.profiles()[j].config().clone();
            let Ok(empty) = EmuLink::new(EmuConfig::default()) else {
                continue;
            };
            if let Some(mut link) = o.emu.replace_profile(i, empty) {
                if link.reconfigure(cfg).is_ok() {
                    self.emu.replace_profile(j, link);
                    taken.push(i);
                    report.profiles_kept.push(name.clone());
                } else {
                    // the old link cannot take the new profile: put it back, so its
                    // packets are purged and re-emulated like any other
                    o.emu.replace_profile(i, link);
                }
            }
        }
    }
}
