//! Which TSO/GSO super-packets cross the device whole, and which are cut into wire-size
//! frames first.
//!
//! A host with default offloads hands its device TCP super-packets of up to 64 KB (one
//! header, up to 45 segments of payload). Cutting one in software costs weir ~44 frame
//! copies and ring slots; sending it whole (with its virtio-net header) lets the kernel,
//! the NIC or the receiver segment it — the way the kernel bridge forwards it. It is kept
//! whole only where segmenting buys nothing:
//!
//! - **Rate** (`super_packets = "auto"`, the default): the class it lands in is assured
//!   at least [`WHOLE_MIN_BPS`] (1 Gbit/s), so a 64 KB super-packet takes at most ~0.5 ms
//!   of the class's own time — CAKE's rule (`CAKE_SPLIT_GSO_THRESHOLD`, sch_cake.c: it
//!   splits GSO packets when its shaper rate is ≤ 1 Gbit/s). A class's *assured* rate is
//!   used, not its ceil: under contention that is what the class gets. A direction the
//!   policy does not shape (no shaper stage) keeps every super-packet whole.
//!   `super_packets = "whole"` keeps them whole at any rate (what LibreQoS's HTB does with
//!   the GRO packets of its NICs); `"split"` cuts every one (weir before this rule).
//! - **Stages**: a direction with a stage that must see each wire frame cuts them all:
//!   DiffServ meters and markers (a 64 KB packet against a committed burst of a few
//!   frames is always out of profile), TCP rate control (its window and ACK arithmetic is
//!   per segment), the WAN emulator (loss, jitter and reordering are per frame), and the
//!   adaptive controller. A class whose rate counts framing (overhead, mpu, ATM/PTM
//!   cells) cuts them too: framing is charged per frame. Applications recognised by their
//!   connection (`[[app]]` rules) may move a packet to another class after the lookup
//!   here, so with any in the policy only `"whole"` or an all-fast direction keeps them.
//! - **What stays per packet**: a whole super-packet is one packet to the queues and the
//!   AQM (CAKE's behaviour above 1 Gbit/s): a drop drops all its segments, an ECN mark on
//!   its IP header reaches every segment. It is *charged* its wire bytes — its segments'
//!   frame lengths, headers repeated in each ([`crate::pool::Super`]). MSS clamping acts
//!   on SYNs, which are never super-packets, so it does not force a cut.
//!
//! The I/O side decides the rest: a capture of wire frames, or no free large slot, cuts
//! the super-packet as before (docs/live.md, "Super-packets kept whole").
//!
//! Invariant: [`WholeRule::keeps`] has no side effect (the classifier's `lookup`, not its
//! counting `classify`), so asking costs one extra lookup per super-packet, not per frame.

use crate::classify::Classifier;
use crate::sched::linkshare::LinkShare;
use crate::stage::{Rank, Stage};

/// Assured class rate from which super-packets stay whole under `"auto"`, bit/s (CAKE's
/// `CAKE_SPLIT_GSO_THRESHOLD`, 125,000,000 bytes/s).
pub const WHOLE_MIN_BPS: u64 = 1_000_000_000;

/// The policy's `[link] super_packets`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SuperPackets {
    /// Whole in classes assured ≥ [`WHOLE_MIN_BPS`] (see the module comment).
    #[default]
    Auto,
    /// Whole at any rate, where no stage needs wire frames.
    Whole,
    /// Always cut into wire-size frames.
    Split,
}

impl SuperPackets {
    /// The policy's keyword.
    pub fn parse(s: &str) -> Option<SuperPackets> {
        match s {
            "auto" => Some(SuperPackets::Auto),
            "whole" => Some(SuperPackets::Whole),
            "split" => Some(SuperPackets::Split),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SuperPackets::Auto => "auto",
            SuperPackets::Whole => "whole",
            SuperPackets::Split => "split",
        }
    }
}

/// One direction's rule, computed when its pipeline is built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WholeRule {
    /// Every super-packet is cut.
    #[default]
    Never,
    /// Every super-packet stays whole.
    Always,
    /// Whole if the class it is looked up to is `true` here (indexed by class id).
    Classes(Vec<bool>),
}

impl WholeRule {
    /// The rule for a direction with `stages` (rank order) under `knob`; `apps`: the
    /// policy recognises applications by connection (a packet's class may change after
    /// the lookup).
    pub fn new(knob: SuperPackets, stages: &[Box<dyn Stage>], apps: bool) -> WholeRule {
        if knob == SuperPackets::Split
            || stages
                .iter()
                .any(|s| matches!(s.rank(), Rank::Pace | Rank::Condition | Rank::Emulate))
        {
            return WholeRule::Never;
        }
        let Some(ls) = stages
            .iter()
            .find_map(|s| s.as_ref().as_any().downcast_ref::<LinkShare>())
        else {
            return WholeRule::Always;
        };
        let ok: Vec<bool> = (0..ls.num_classes() as u32)
            .map(|c| {
                let r = ls.rate(c);
                ls.is_leaf(c)
                    && r.framing() == crate::framing::Framing::default()
                    && (knob == SuperPackets::Whole || r.bps() >= WHOLE_MIN_BPS)
            })
            .collect();
        let leaves = (0..ls.num_classes() as u32).filter(|&c| ls.is_leaf(c));
        let (mut all, mut any) = (true, false);
        for c in leaves {
            all &= ok[c as usize];
            any |= ok[c as usize];
        }
        match (all, any) {
            (true, _) => WholeRule::Always,
            (_, false) => WholeRule::Never,
            _ if apps => WholeRule::Never,
            _ => WholeRule::Classes(ok),
        }
    }

    /// Whether the super-packet `frame` stays whole (`classifier`: the direction's). The
    /// headers are parsed only when the class decides; ones that do not parse are cut.
    pub fn keeps(&self, classifier: Option<&Classifier>, frame: &[u8]) -> bool {
        match self {
            WholeRule::Never => false,
            WholeRule::Always => true,
            WholeRule::Classes(ok) => {
                let (Some(c), Ok(f)) = (classifier, crate::pipeline::frame_fields(frame)) else {
                    return false;
                };
                ok.get(c.lookup(&f).0 as usize).copied().unwrap_or(false)
            }
        }
    }
}

#[cfg(test)]
mod tests;
