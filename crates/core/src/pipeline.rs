//! One direction's engine: label (classify) → an ordered list of [`Stage`]s → ready.
//!
//! The device hands a frame to its direction's pipeline after parsing it once:
//! [`Pipeline::label`] classifies it (class, rule, direction-independent flow hash,
//! arrival), then [`Pipeline::run`] passes it through the stages in order (see
//! [`crate::stage`]: rewrites and gates first, then the holding stages — the shaper and
//! its leaf queues, the emulator). Frames the parser rejects (truncated or malformed
//! headers) are not dropped: they go to the default class and are counted in
//! `malformed`, so unknown traffic still flows. A pipeline without a classifier (a
//! direction the policy neither shapes nor emulates) labels nothing; one without stages
//! forwards everything in order.
//!
//! [`Pipeline::poll`] moves what each holding stage has due into the stages after it,
//! front to back, and returns the first packet that has passed them all; packets that
//! passed every stage on arrival (and frames that bypass a shaper, and packets a reload
//! had nowhere else to put) wait in `ready` and go first. `next_wakeup` is the earliest of
//! the stages' wake-ups. Packets a later stage refuses on the way are reported through
//! `Ctx::drop_later`, so the driver frees and counts them like any other late drop.
//!
//! Time: a packet reaches the first holding stage at its arrival (e.g. the kernel's
//! receive timestamp, a little before the driver reads it) and every later stage at the
//! release time of the one before it (`cx.now`).
//!
//! The pipeline also keeps its classes' TCP health ([`crate::conn::health`]): the device
//! records there what the connection table made of each TCP segment (an RTT sample, a
//! retransmission) under the class the segment was given.
//!
//! A pipeline built on its own by [`crate::policy::Policy::build`] (the simulator, `weir
//! sim`, `weir check`) has no device around it: [`Pipeline::ingress`] and
//! [`Pipeline::dequeue`] drive it with empty shared state.

use crate::classify::{Classifier, Fields};
use crate::conn::health::TcpHealth;
use crate::conn::Observed;
use crate::diffserv::Conditioner;
use crate::pool::{PktId, PktQueue};
use crate::qdisc::{Count, Ctx, DropCause};
use crate::sched::linkshare::LinkShare;
use crate::stage::{Carried, Packet, Rank, Shared, Stage, Step};
use crate::time::Instant;

pub use crate::stage::EmuStage;

/// The header fields of a frame that classification uses, or the error that stopped the
/// parse.
pub fn frame_fields(frame: &[u8]) -> Result<Fields, weir_wire::Error> {
    Ok(parsed_fields(&weir_wire::parse_frame(frame)?))
}

/// The classification fields of an already parsed frame.
pub fn parsed_fields(p: &weir_wire::Parsed) -> Fields {
    Fields {
        vlan: p.vlan,
        ethertype: p.ethertype,
        src: p.src_ip,
        dst: p.dst_ip,
        proto: p.protocol,
        sport: p.src_port,
        dport: p.dst_port,
        dscp: p.dscp,
        app: None,
        l7: 0,
    }
}

/// Seed of the flow hash (per-flow queuing buckets).
pub const FLOW_SEED: u64 = 0x5eed_f10e;

/// One direction: a classifier, its stages and the packets ready to leave.
pub struct Pipeline {
    /// `None`: the direction is not classified (no policy stage applies to it).
    classifier: Option<Classifier>,
    /// The stages, in the order a packet crosses them (ascending [`Rank`]).
    stages: Vec<Box<dyn Stage>>,
    /// Packets that passed every stage, frames that bypassed the shaper, and packets a
    /// reload had no stage for: sent first, in order.
    ready: PktQueue,
    /// Frames whose headers could not be parsed (sent to the default class).
    malformed: Count,
    /// Frames that are not IP that bypassed this direction's shaper.
    bypassed: Count,
    /// Bit `i`: stage `i` holds packets ([`Stage::holds`]); bit 63: there is a shaper.
    /// Asked once, not per packet.
    holding: u64,
    /// Bit `i`: stage `i` may release packets on an input ([`Stage::releases_on_input`]).
    releasing: u64,
    /// TCP health (RTT samples, retransmissions) per class of this direction's packets.
    tcp: TcpHealth,
    /// Which super-packets stay whole in this direction.
    whole: crate::whole::WholeRule,
}

/// `holding`'s bit for "this direction has a shaper".
const SHAPED: u64 = 1 << 63;

impl Pipeline {
    /// A direction with `classifier` (if it classifies) and `stages`, which must be in
    /// ascending rank.
    pub(crate) fn new(classifier: Option<Classifier>, stages: Vec<Box<dyn Stage>>) -> Self {
        debug_assert!(stages.windows(2).all(|w| w[0].rank() <= w[1].rank()));
        assert!(stages.len() < 63, "at most 62 stages");
        let bits = |f: &dyn Fn(&dyn Stage) -> bool| {
            stages
                .iter()
                .enumerate()
                .filter(|(_, s)| f(s.as_ref()))
                .fold(0u64, |b, (i, _)| b | 1 << i)
        };
        let shaped = stages.iter().any(|s| s.rank() == Rank::Shape);
        let holding = bits(&|s| s.holds()) | if shaped { SHAPED } else { 0 };
        let releasing = bits(&|s| s.releases_on_input());
        let classes = stages
            .iter()
            .find_map(|s| s.as_ref().as_any().downcast_ref::<LinkShare>())
            .map_or(0, LinkShare::num_classes);
        Pipeline {
            tcp: TcpHealth::new(classes),
            classifier,
            stages,
            ready: PktQueue::new(),
            malformed: Count::default(),
            bypassed: Count::default(),
            holding,
            releasing,
            whole: crate::whole::WholeRule::Never,
        }
    }

    /// Set which super-packets stay whole under the policy's `knob` ([`crate::whole`]).
    pub(crate) fn set_whole(&mut self, knob: crate::whole::SuperPackets) {
        let apps = self.classifier.as_ref().is_some_and(Classifier::uses_apps);
        self.whole = crate::whole::WholeRule::new(knob, &self.stages, apps);
    }

    /// This direction's rule for super-packets.
    pub fn whole(&self) -> &crate::whole::WholeRule {
        &self.whole
    }

    /// Whether this direction classifies its packets (the policy shapes or emulates it).
    pub fn classifies(&self) -> bool {
        self.classifier.is_some()
    }

    /// The classifier and its rule counters, if this direction classifies.
    pub fn classifier(&self) -> Option<&Classifier> {
        self.classifier.as_ref()
    }

    /// Whether this direction has a shaper.
    #[inline]
    pub fn is_shaped(&self) -> bool {
        self.holding & SHAPED != 0
    }

    /// The stages' names, in order.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The stage of type `T`, if this direction has one.
    pub fn stage<T: Stage>(&self) -> Option<&T> {
        self.stages
            .iter()
            .find_map(|s| s.as_ref().as_any().downcast_ref::<T>())
    }

    /// The stage of type `T`, mutable.
    pub fn stage_mut<T: Stage>(&mut self) -> Option<&mut T> {
        self.stages
            .iter_mut()
            .find_map(|s| s.as_mut().as_any_mut().downcast_mut::<T>())
    }

    /// The shaping stage, if this pipeline has one.
    pub fn shaper(&self) -> Option<&LinkShare> {
        self.stage::<LinkShare>()
    }

    /// The shaping stage, mutable.
    pub fn shaper_mut(&mut self) -> Option<&mut LinkShare> {
        self.stage_mut::<LinkShare>()
    }

    /// The emulation stage, if this pipeline has one.
    pub fn emulator(&self) -> Option<&EmuStage> {
        self.stage::<EmuStage>()
    }

    /// The DiffServ conditioner, if this pipeline has one.
    pub fn conditioner(&self) -> Option<&Conditioner> {
        self.stage::<Conditioner>()
    }

    /// Frames whose headers could not be parsed (sent to the default class).
    pub fn malformed(&self) -> Count {
        self.malformed
    }

    /// Frames that are not IP that bypassed this direction's shaper.
    pub fn bypassed(&self) -> Count {
        self.bypassed
    }

    /// RTT samples and retransmissions per class of this direction's packets (see
    /// [`crate::conn::health`]).
    pub fn tcp_health(&self) -> &TcpHealth {
        &self.tcp
    }

    /// Count what the connection table made of a TCP segment labelled `class` by this
    /// direction (`None`: not classified).
    #[inline]
    pub(crate) fn record_tcp(&mut self, class: Option<u32>, o: &Observed) {
        self.tcp.record(class, o);
    }

    /// Classify the frame in `pkt` from its header `fields` (`None`: it did not parse;
    /// counted, default class) and stamp its metadata: class, rule, flow hash, arrival (≤
    /// `cx.now`). A direction that does not classify only stamps the arrival.
    pub(crate) fn label(
        &mut self,
        pkt: PktId,
        fields: Option<&Fields>,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) {
        let len = cx.pool.len(pkt);
        let arrival = arrival.min(cx.now);
        let Some(c) = &mut self.classifier else {
            cx.pool.meta_mut(pkt).arrival = arrival;
            return;
        };
        let unparsed = Fields::default();
        let f = fields.unwrap_or_else(|| {
            self.malformed.add(len);
            &unparsed
        });
        let (class, rule) = c.classify(f, len);
        let m = cx.pool.meta_mut(pkt);
        m.class = class;
        m.rule = rule;
        m.flow = f.flow_hash(FLOW_SEED);
        m.arrival = arrival;
    }

    /// A frame that bypasses the stages (not IP, in a shaped direction): it leaves with
    /// the packets ready now, counted in `bypassed`.
    pub(crate) fn bypass(&mut self, pkt: PktId, cx: &mut Ctx<'_>) {
        self.bypassed.add(cx.pool.len(pkt));
        self.ready.push_back(cx.pool, pkt);
    }

    /// Pass the labelled `pkt` through the stages from the first, reaching the first
    /// holding one at its arrival. `Err`: refused (the caller frees it; the stage that
    /// refused it counted the cause).
    pub(crate) fn run(
        &mut self,
        pkt: PktId,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Result<(), DropCause> {
        let at = cx.pool.meta(pkt).arrival;
        match self.run_from(0, pkt, at, pk, sh, cx) {
            Step::Drop(c) => Err(c),
            Step::Held => Ok(()),
            Step::Next => {
                self.ready.push_back(cx.pool, pkt);
                Ok(())
            }
        }
    }

    /// `pkt` through stages `from..`; what the stages release on the way (ahead of it)
    /// goes on through the stages after the one that released it.
    fn run_from(
        &mut self,
        from: usize,
        pkt: PktId,
        at: Instant,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        for i in from..self.stages.len() {
            let step = self.stages[i].input(pkt, at, pk, sh, cx);
            if self.releasing & 1 << i != 0 {
                while let Some(r) = self.stages[i].take_released(sh, cx) {
                    let now = cx.now;
                    self.forward(i + 1, r, now, sh, cx);
                }
            }
            if step != Step::Next {
                return step;
            }
        }
        Step::Next
    }

    /// A packet released at `at` by the stage before `from`: through the stages from
    /// `from`, into `ready` if it passes them all; a refusal is a late drop.
    fn forward(&mut self, from: usize, pkt: PktId, at: Instant, sh: &mut Shared, cx: &mut Ctx<'_>) {
        match self.run_from(from, pkt, at, &Packet::RELEASED, sh, cx) {
            Step::Next => self.ready.push_back(cx.pool, pkt),
            Step::Held => {}
            Step::Drop(c) => cx.drop_later(pkt, c),
        }
    }

    /// A packet released now by a stage of `rank` that this pipeline may not have (a
    /// reload took it away): through the stages of higher rank, as [`Pipeline::poll`]
    /// would pass it on.
    pub(crate) fn enter_after(
        &mut self,
        rank: Rank,
        pkt: PktId,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) {
        let from = self
            .stages
            .iter()
            .position(|s| s.rank() > rank)
            .unwrap_or(self.stages.len());
        let now = cx.now;
        self.forward(from, pkt, now, sh, cx);
    }

    /// The next packet due at `cx.now`, if any. Late drops land in `cx.dropped`.
    #[inline]
    pub(crate) fn poll(&mut self, sh: &mut Shared, cx: &mut Ctx<'_>) -> Option<PktId> {
        if let Some(p) = self.ready.pop_front(cx.pool) {
            return Some(p);
        }
        let mut holding = self.holding & !SHAPED;
        if holding == 0 {
            return None;
        }
        let now = cx.now;
        while holding != 0 {
            let i = holding.trailing_zeros() as usize;
            holding &= holding - 1;
            while let Some(p) = self.stages[i].poll(sh, cx) {
                match self.run_from(i + 1, p, now, &Packet::RELEASED, sh, cx) {
                    // passed every stage after it: it leaves now
                    Step::Next => return Some(p),
                    Step::Held => {}
                    Step::Drop(c) => cx.drop_later(p, c),
                }
            }
        }
        self.ready.pop_front(cx.pool)
    }

    /// The earliest instant a stage has something due (`None`: nothing waits for time;
    /// what is in `ready` is due now). State in [`Shared`] is the device's to add.
    #[inline]
    pub fn next_wakeup(&self) -> Option<Instant> {
        if self.holding & !SHAPED == 0 {
            return None;
        }
        self.stages.iter().filter_map(|s| s.next_wakeup()).min()
    }

    /// Packets held by the stages and ready to leave (not counting [`Shared`] state).
    pub fn len(&self) -> usize {
        self.stages.iter().map(|s| s.len()).sum::<usize>() + self.ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Discard everything held (e.g. at shutdown), reporting each packet through
    /// `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for s in &mut self.stages {
            s.purge(cx, cause);
        }
        while let Some(p) = self.ready.pop_front(cx.pool) {
            cx.drop_later(p, cause);
        }
    }

    /// A pipeline of its own, without a device: classify the frame in `pkt` (parsed
    /// here) and pass it through the stages, arriving now. `Err`: dropped (the caller
    /// frees it).
    pub fn ingress(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let now = cx.now;
        self.ingress_at(pkt, cx, now)
    }

    /// [`Pipeline::ingress`] for a frame that arrived at `arrival` (≤ `cx.now`).
    pub fn ingress_at(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) -> Result<(), DropCause> {
        let fields = frame_fields(cx.pool.data(pkt)).ok();
        self.label(pkt, fields.as_ref(), cx, arrival);
        let labelled = Packet {
            labelled: self.classifies(),
            ..Packet::RELEASED
        };
        self.run(pkt, &labelled, &mut Shared::default(), cx)
    }

    /// A pipeline of its own: the next packet due at `cx.now`.
    pub fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.poll(&mut Shared::default(), cx)
    }

    /// Hot reload: take over what `old` (this direction under the replaced policy)
    /// holds. First each stage takes over its namesake's state that survives
    /// ([`Stage::carry_from`]); then every packet the old stages hold, stage by stage in
    /// queue order, re-enters this pipeline at the first holding stage of the same or a
    /// later rank — a shaper's packet in the class of the same name when this shaper has
    /// that leaf and no rule its headers match sends it elsewhere
    /// ([`crate::classify::Classifier::lookup_by_headers`]), else classified by this
    /// pipeline's rules (no hit counted) — or `ready`
    /// when there is none. Packets the new limits refuse land in `cx.dropped` with
    /// `DropCause::Reload`.
    pub(crate) fn take_over(
        &mut self,
        mut old: Pipeline,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
        rep: &mut LaneReload,
    ) {
        class_changes(old.shaper(), self.shaper(), rep);
        let mut carried = Carried::default();
        for s in &mut self.stages {
            let tid = s.as_ref().as_any().type_id();
            if let Some(o) = old
                .stages
                .iter_mut()
                .find(|o| o.as_ref().as_any().type_id() == tid)
            {
                s.carry_from(o.as_mut(), cx, &mut carried);
            }
        }
        rep.profiles_kept = carried.profiles_kept;
        // what each carried packet counted as, until it is sure to stay
        let mut carried_ids: Vec<(PktId, Readmitted)> = Vec::new();
        for k in 0..old.stages.len() {
            let rank = old.stages[k].rank();
            let names = class_names(old.stages[k].as_ref().as_any().downcast_ref());
            let mark = cx.dropped.len();
            old.stages[k].purge(cx, DropCause::Reload);
            let held: Vec<PktId> = cx.dropped.drain(mark..).map(|(p, _)| p).collect();
            for pkt in held {
                let name = names.get(cx.pool.meta(pkt).class as usize);
                let mark = cx.dropped.len();
                let got = self.readmit(pkt, rank, name.map(String::as_str), sh, cx);
                // a queue that makes room by dropping another packet (flow queuing drops
                // from its fattest flow): that packet was carried, and is not any more
                for i in mark..cx.dropped.len() {
                    let gone = cx.dropped[i].0;
                    if let Some(k) = carried_ids.iter().position(|&(p, _)| p == gone) {
                        let (_, kind) = carried_ids.swap_remove(k);
                        rep.uncount(kind, rank);
                        rep.dropped += 1;
                    }
                }
                match got {
                    Ok(kind) => {
                        rep.count(kind, rank);
                        carried_ids.push((pkt, kind));
                    }
                    Err(_) => {
                        rep.dropped += 1;
                        cx.drop_later(pkt, DropCause::Reload);
                    }
                }
            }
        }
        while let Some(p) = old.ready.pop_front(cx.pool) {
            self.ready.push_back(cx.pool, p);
        }
    }

    /// A packet carried over from a stage of `rank` (in a shaper: its class named
    /// `class_name`) of a replaced policy, re-entering this pipeline now (see
    /// [`Pipeline::take_over`]).
    fn readmit(
        &mut self,
        pkt: PktId,
        rank: Rank,
        class_name: Option<&str>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Result<Readmitted, DropCause> {
        let Some(i) = self
            .stages
            .iter()
            .position(|s| s.holds() && s.rank() >= rank)
        else {
            self.ready.push_back(cx.pool, pkt);
            return Ok(Readmitted::Ready);
        };
        let fields = frame_fields(cx.pool.data(pkt)).unwrap_or_default();
        // a rule the headers show wins: the session's next packets go where it says, and
        // its queued ones must be there ahead of them (kept by name in the old class, a
        // session a new rule moved was reordered). Where it gives an answer it is
        // `lookup`'s; otherwise the full lookup decides for a packet not kept.
        let moved = self
            .classifier
            .as_ref()
            .and_then(|c| c.lookup_by_headers(&fields));
        let (class, rule) = match (moved, &self.classifier) {
            (Some(m), _) => m,
            (None, Some(c)) => c.lookup(&fields),
            (None, None) => (cx.pool.meta(pkt).class, crate::classify::DEFAULT_RULE),
        };
        let keep = self.stages[i]
            .as_ref()
            .as_any()
            .downcast_ref::<LinkShare>()
            .and_then(|s| {
                class_name
                    .and_then(|n| s.class_id(n))
                    .filter(|&c| s.is_leaf(c) && moved.is_none_or(|(m, _)| m == c))
            });
        let m = cx.pool.meta_mut(pkt);
        m.class = keep.unwrap_or(class);
        m.rule = rule;
        m.flow = fields.flow_hash(FLOW_SEED);
        let now = cx.now;
        let kind = match (keep, self.stages[i].rank()) {
            (Some(_), _) => Readmitted::Kept,
            (None, Rank::Emulate) => Readmitted::Emulated,
            (None, _) => Readmitted::Reclassified,
        };
        match self.stages[i].input(pkt, now, &Packet::RELEASED, sh, cx) {
            Step::Drop(c) => Err(c),
            Step::Held => Ok(kind),
            Step::Next => {
                self.forward(i + 1, pkt, now, sh, cx);
                Ok(kind)
            }
        }
    }
}

/// The class names of a shaper, by class id (none without one).
/// Classes of `new` with no namesake in `old` and the other way round, and those whose
/// rate or ceil changed, into `rep` (by [`LinkShare::class_id`]'s name index: linear in a
/// subscriber table's 20,000 classes).
fn class_changes(old: Option<&LinkShare>, new: Option<&LinkShare>, rep: &mut LaneReload) {
    if let Some(new) = new {
        for c in 0..new.num_classes() as u32 {
            let n = new.name(c);
            match old.and_then(|old| old.class_id(n).map(|o| (old, o))) {
                Some((old, o)) => {
                    if old.rate(o) != new.rate(c) || old.ceil(o) != new.ceil(c) {
                        rep.classes_changed.push(n.to_string());
                    }
                }
                None => rep.classes_added.push(n.to_string()),
            }
        }
    }
    if let Some(old) = old {
        rep.classes_removed = (0..old.num_classes() as u32)
            .map(|c| old.name(c))
            .filter(|n| new.is_none_or(|new| new.class_id(n).is_none()))
            .map(str::to_string)
            .collect();
    }
}

fn class_names(s: Option<&LinkShare>) -> Vec<String> {
    s.map(|s| {
        (0..s.num_classes() as u32)
            .map(|c| s.name(c).to_string())
            .collect()
    })
    .unwrap_or_default()
}

/// Where a carried packet went.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Readmitted {
    /// Into the class of the same name.
    Kept,
    /// Classified by the new rules, into a shaper (or a queue before the emulator).
    Reclassified,
    /// Into the new emulator.
    Emulated,
    /// No stage to take it: straight to `ready`.
    Ready,
}

/// What a reload did in one direction.
#[derive(Clone, Debug, Default, serde::Serialize, PartialEq)]
pub struct LaneReload {
    /// Packets that stayed in a class of the same name.
    pub kept: u64,
    /// Packets of classes the new policy does not have, classified by its rules.
    pub reclassified: u64,
    /// Emulation profiles kept with their queues and delay lines (same name).
    pub profiles_kept: Vec<String>,
    /// Packets held in delay lines of profiles that are gone, sent through the new
    /// emulator (or released).
    pub re_emulated: u64,
    /// Packets the new policy's limits had no room for: dropped (`reload_limit`).
    pub dropped: u64,
    /// Classes of the new tree with no namesake in the old one, and the other way round.
    pub classes_added: Vec<String>,
    pub classes_removed: Vec<String>,
    /// Classes of both whose rate or ceil differs (a subscriber's new plan).
    pub classes_changed: Vec<String>,
}

impl LaneReload {
    /// Count a packet carried from a stage of `rank` that went where `kind` says.
    fn count(&mut self, kind: Readmitted, rank: Rank) {
        *self.counter(kind, rank) += 1;
    }

    /// Take back [`LaneReload::count`] (the packet was dropped after all).
    fn uncount(&mut self, kind: Readmitted, rank: Rank) {
        let c = self.counter(kind, rank);
        *c = c.saturating_sub(1);
    }

    fn counter(&mut self, kind: Readmitted, rank: Rank) -> &mut u64 {
        match kind {
            Readmitted::Kept => &mut self.kept,
            Readmitted::Reclassified => &mut self.reclassified,
            Readmitted::Ready if rank < Rank::Emulate => &mut self.reclassified,
            Readmitted::Ready | Readmitted::Emulated => &mut self.re_emulated,
        }
    }

    /// Packets carried into the new policy (not dropped).
    pub fn carried(&self) -> u64 {
        self.kept + self.reclassified + self.re_emulated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::pool::Pool;
    use crate::rng::Rng;
    use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};

    const POLICY: &str = r#"
        [link]
        rate = "10Mbit"
        default = "other"
        technique = "cbq+pfq"
        [[class]]
        name = "web"
        rate = "5Mbit"
        [[class]]
        name = "other"
        rate = "5Mbit"
        [[rule]]
        class = "web"
        proto = "tcp"
        port = 80
    "#;

    fn frame(pool: &mut Pool, (src, sport): (&str, u16), (dst, dport): (&str, u16)) -> PktId {
        let id = pool.alloc().unwrap();
        let tcp = TcpSpec {
            src_port: sport,
            dst_port: dport,
            ..Default::default()
        };
        let ip = Ipv4Spec {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            ..Default::default()
        };
        let n = build::tcp_v4_frame(
            pool.slot_mut(id),
            &EthSpec::default(),
            &ip,
            &tcp,
            &[0u8; 100],
        )
        .unwrap();
        pool.meta_mut(id).len = n as u32;
        id
    }

    #[test]
    fn ingress_classifies_real_frames_and_passes_garbage_to_default() {
        let policy = Policy::parse("t.toml", POLICY).unwrap();
        let mut pipe = policy.build(Instant::ZERO).unwrap();
        let mut pool = Pool::new(16, 2048);
        let mut rng = Rng::new(1);
        let mut dropped = Vec::new();
        let (a, b) = ("10.0.0.1", "10.0.0.2");
        let web = frame(&mut pool, (a, 40000), (b, 80));
        let reply = frame(&mut pool, (b, 80), (a, 40000));
        let ssh = frame(&mut pool, (a, 40001), (b, 22));
        let junk = pool.alloc().unwrap();
        pool.slot_mut(junk)[..5].copy_from_slice(&[1, 2, 3, 4, 5]);
        pool.meta_mut(junk).len = 5;
        let mut cx = Ctx::new(Instant(7), &mut pool, &mut rng, &mut dropped);
        for p in [web, reply, ssh, junk] {
            pipe.ingress(p, &mut cx).unwrap();
        }
        let web_class = policy.class_index("web").unwrap() as u32;
        let other = policy.class_index("other").unwrap() as u32;
        assert_eq!(cx.pool.meta(web).class, web_class);
        assert_eq!(
            cx.pool.meta(reply).class,
            web_class,
            "port matches either direction"
        );
        assert_eq!(cx.pool.meta(ssh).class, other);
        assert_eq!(cx.pool.meta(junk).class, other);
        assert_eq!(
            cx.pool.meta(web).flow,
            cx.pool.meta(reply).flow,
            "a session hashes the same both ways"
        );
        assert_ne!(cx.pool.meta(web).flow, cx.pool.meta(ssh).flow);
        assert_eq!(cx.pool.meta(web).arrival, Instant(7));
        assert_eq!(pipe.malformed().packets, 1);
        assert_eq!(pipe.classifier().unwrap().hits[0].packets, 2);
        assert_eq!(pipe.classifier().unwrap().default_hits.packets, 2);
        let mut out = 0;
        while let Some(p) = pipe.dequeue(&mut cx) {
            cx.pool.free(p);
            out += 1;
        }
        assert_eq!(out, 4);
        pipe.shaper().unwrap().check_counters().unwrap();
    }
}
