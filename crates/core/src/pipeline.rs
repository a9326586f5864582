//! One direction's engine: classifier → an ordered list of stages.
//!
//! `ingress` reads the frame's headers (with `weir-wire`), classifies it, stamps the
//! packet's metadata (class, rule, direction-independent flow hash, arrival time) and
//! enqueues it into the first stage. Frames the parser rejects (truncated or malformed
//! headers) are not dropped: they go to the default class and are counted in
//! `malformed`, so unknown traffic still flows.
//!
//! Between the classifier and the first stage, the DiffServ conditioner (if the policy
//! has meters or is an interior router) colours each packet and marks or polices it
//! ([`crate::diffserv`]); packets carried over by a reload are not metered again.
//!
//! A stage holds, drops or releases packets ([`Stage`]): today the shaper (per-class
//! queues under the link-sharing scheduler) and the link emulator; the policy decides
//! which a direction has, in which order (a WAN behind a bandwidth manager: shaper, then
//! emulator). With no stage, packets pass through a FIFO that never drops (the
//! classifier's counters still count them). `dequeue` moves everything a stage releases
//! into the next one, front to back, then releases what the last stage has due;
//! `next_wakeup` is the earliest of the stages' wake-ups. Packets a later stage refuses on
//! the way (loss, queue limit) are reported through `Ctx::drop_later`, so the driver frees
//! and counts them like any other late drop.
//!
//! Time: a packet reaches the first stage at its arrival (`ingress_at`: e.g. the kernel's
//! receive timestamp, a little before the driver reads it) and every later stage at the
//! release time of the one before it (`cx.now`). An emulator times a packet from when it
//! reached it; a shaper always works on `cx.now` (its clock never runs backwards).

use crate::classify::{Classifier, Fields};
use crate::diffserv::Conditioner;
use crate::emulate::Emulator;
use crate::pool::PktId;
use crate::qdisc::{Count, Ctx, DropCause, Qdisc};
use crate::queue::fifo::Fifo;
use crate::sched::linkshare::LinkShare;
use crate::time::Instant;

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

/// The emulation stage: the emulator and its profiles' names (index = profile).
pub struct EmuStage {
    pub emu: Emulator,
    pub names: Vec<String>,
}

/// One stage of a pipeline.
pub enum Stage {
    /// Per-class queues under the hierarchical link-sharing scheduler.
    Shape(LinkShare),
    /// The WAN link emulator.
    Emulate(EmuStage),
}

impl Stage {
    /// A short name for reports: `shape`, `emulate`.
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Shape(_) => "shape",
            Stage::Emulate(_) => "emulate",
        }
    }

    /// Take `pkt`, which reached this stage at `at` (≤ `cx.now`).
    #[inline]
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>, at: Instant) -> Result<(), DropCause> {
        match self {
            Stage::Shape(s) => s.enqueue(pkt, cx),
            Stage::Emulate(e) => e.emu.enqueue_at(pkt, cx, at),
        }
    }

    #[inline]
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        match self {
            Stage::Shape(s) => s.dequeue(cx),
            Stage::Emulate(e) => e.emu.dequeue(cx),
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        match self {
            Stage::Shape(s) => s.next_wakeup(),
            Stage::Emulate(e) => e.emu.next_wakeup(),
        }
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        match self {
            Stage::Shape(s) => s.len(),
            Stage::Emulate(e) => e.emu.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        match self {
            Stage::Shape(s) => s.purge(cx, cause),
            Stage::Emulate(e) => e.emu.purge(cx, cause),
        }
    }
}

pub struct Pipeline {
    pub classifier: Classifier,
    /// The stages, in the order a packet crosses them.
    pub stages: Vec<Stage>,
    /// Work-conserving pass-through: all packets when there is no stage; otherwise only
    /// packets carried over from a replaced policy that no stage takes.
    pass: Fifo,
    /// Seed of the flow hash (per-flow queuing buckets).
    pub flow_seed: u64,
    /// Frames whose headers could not be parsed (sent to the default class).
    pub malformed: Count,
    /// DiffServ meters and markers, between the classifier and the first stage (`None`:
    /// every packet stays green and keeps its DSCP).
    pub conditioner: Option<Conditioner>,
}

impl Pipeline {
    pub fn new(classifier: Classifier, stages: Vec<Stage>, flow_seed: u64) -> Self {
        Pipeline {
            classifier,
            stages,
            pass: Fifo::new(u32::MAX, u64::MAX),
            flow_seed,
            malformed: Count::default(),
            conditioner: None,
        }
    }

    /// The shaping stage, if this pipeline has one.
    pub fn shaper(&self) -> Option<&LinkShare> {
        self.stages.iter().find_map(|s| match s {
            Stage::Shape(l) => Some(l),
            _ => None,
        })
    }

    /// The shaping stage, mutable.
    pub fn shaper_mut(&mut self) -> Option<&mut LinkShare> {
        self.stages.iter_mut().find_map(|s| match s {
            Stage::Shape(l) => Some(l),
            _ => None,
        })
    }

    /// The emulation stage, if this pipeline has one.
    pub fn emulator(&self) -> Option<&EmuStage> {
        self.stages.iter().find_map(|s| match s {
            Stage::Emulate(e) => Some(e),
            _ => None,
        })
    }

    /// The emulation stage, mutable.
    pub fn emulator_mut(&mut self) -> Option<&mut EmuStage> {
        self.stages.iter_mut().find_map(|s| match s {
            Stage::Emulate(e) => Some(e),
            _ => None,
        })
    }

    /// Classify the frame held in `pkt` and enqueue it, arriving now. `Err` means it was
    /// dropped (the caller frees it); its cause is counted by the stage that refused it.
    pub fn ingress(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let now = cx.now;
        self.ingress_at(pkt, cx, now)
    }

    /// [`Pipeline::ingress`] for a frame that arrived at `arrival` (≤ `cx.now`), e.g. the
    /// kernel's receive timestamp of a frame the driver reads a little later. The arrival
    /// is recorded in the packet's metadata, and the first stage takes the packet as
    /// reaching it then (see the module comment).
    pub fn ingress_at(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) -> Result<(), DropCause> {
        let fields = match frame_fields(cx.pool.data(pkt)) {
            Ok(f) => f,
            Err(_) => {
                self.malformed.add(cx.pool.len(pkt));
                Fields::default()
            }
        };
        self.ingress_fields(pkt, &fields, cx, arrival)
    }

    /// [`Pipeline::ingress_at`] for a frame whose header fields the caller has parsed.
    pub fn ingress_fields(
        &mut self,
        pkt: PktId,
        fields: &Fields,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) -> Result<(), DropCause> {
        self.label(pkt, fields, cx, arrival);
        self.admit(pkt, cx)
    }

    /// The first half of [`Pipeline::ingress_fields`]: classify and stamp the metadata
    /// (class, rule, flow hash, arrival ≤ `cx.now`), so that the caller can act on the
    /// class (e.g. MSS clamping) before [`Pipeline::admit`].
    pub fn label(&mut self, pkt: PktId, fields: &Fields, cx: &mut Ctx<'_>, arrival: Instant) {
        let len = cx.pool.len(pkt);
        let (class, rule) = self.classifier.classify(fields, len);
        let m = cx.pool.meta_mut(pkt);
        m.class = class;
        m.rule = rule;
        m.flow = fields.flow_hash(self.flow_seed);
        m.arrival = arrival.min(cx.now);
    }

    /// The second half of [`Pipeline::ingress_fields`]: a labelled packet through the
    /// DiffServ conditioner (colour, remark, police) into the first stage, reaching it at
    /// its arrival.
    pub fn admit(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        if let Some(c) = &mut self.conditioner {
            c.apply(pkt, cx)?;
        }
        let arrival = cx.pool.meta(pkt).arrival;
        match self.stages.first_mut() {
            Some(s) => s.enqueue(pkt, cx, arrival),
            None => self.pass.enqueue(pkt, cx),
        }
    }

    /// Index of the shaping stage, if any.
    pub fn shaper_index(&self) -> Option<usize> {
        self.stages
            .iter()
            .position(|s| matches!(s, Stage::Shape(_)))
    }

    /// Index of the emulation stage, if any.
    pub fn emulator_index(&self) -> Option<usize> {
        self.stages
            .iter()
            .position(|s| matches!(s, Stage::Emulate(_)))
    }

    /// Take a packet carried over from a replaced policy: label it with this pipeline's
    /// rules (class, rule, flow hash; no hit is counted) — in class `keep_class` instead
    /// when it keeps a class of the same name — and put it into stage `stage` as reaching
    /// it now (`None`, or past the last stage: released as it is due). `Err`: the stage
    /// had no room (the caller drops it).
    pub fn readmit(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        keep_class: Option<u32>,
        stage: Option<usize>,
    ) -> Result<(), DropCause> {
        let fields = frame_fields(cx.pool.data(pkt)).unwrap_or_default();
        let (class, rule) = self.classifier.lookup(&fields);
        let m = cx.pool.meta_mut(pkt);
        m.class = keep_class.unwrap_or(class);
        m.rule = rule;
        m.flow = fields.flow_hash(self.flow_seed);
        let now = cx.now;
        match stage.and_then(|i| self.stages.get_mut(i)) {
            Some(s) => s.enqueue(pkt, cx, now),
            None => self.pass.enqueue(pkt, cx),
        }
    }

    /// The next packet due now, if any.
    pub fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        // the pass-through FIFO: everything when there is no stage, else packets carried
        // over from a replaced policy with no stage to go to
        if !self.pass.is_empty() {
            return self.pass.dequeue(cx);
        }
        let (last, front) = self.stages.split_last_mut()?;
        // move what each stage releases into the next one, front to back
        for i in 0..front.len() {
            let (a, b) = front.split_at_mut(i + 1);
            let next = b.first_mut().unwrap_or(&mut *last);
            let now = cx.now;
            while let Some(p) = a[i].dequeue(cx) {
                if let Err(cause) = next.enqueue(p, cx, now) {
                    cx.drop_later(p, cause);
                }
            }
        }
        last.dequeue(cx)
    }

    pub fn next_wakeup(&self) -> Option<Instant> {
        // the pass-through FIFO is work-conserving: it never needs a wake-up
        self.stages.iter().filter_map(Stage::next_wakeup).min()
    }

    /// Packets held by all stages.
    pub fn len(&self) -> usize {
        self.stages.iter().map(Stage::len).sum::<usize>() + self.pass.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Discard what stage `k` holds into `cx.dropped` with `cause` (a policy reload takes
    /// the packets from there).
    pub fn purge_stage(&mut self, k: usize, cx: &mut Ctx<'_>, cause: DropCause) {
        if let Some(s) = self.stages.get_mut(k) {
            s.purge(cx, cause);
        }
    }

    /// The next packet of the pass-through FIFO, if any.
    pub fn dequeue_passed(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.pass.dequeue(cx)
    }

    /// Discard everything held (e.g. at shutdown), reporting each packet through
    /// `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        for s in &mut self.stages {
            s.purge(cx, cause);
        }
        self.pass.purge(cx, cause);
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
        assert_eq!(pipe.malformed.packets, 1);
        assert_eq!(pipe.classifier.hits[0].packets, 2);
        assert_eq!(pipe.classifier.default_hits.packets, 2);
        let mut out = 0;
        while let Some(p) = pipe.dequeue(&mut cx) {
            cx.pool.free(p);
            out += 1;
        }
        assert_eq!(out, 4);
        pipe.shaper().unwrap().check_counters().unwrap();
    }
}
