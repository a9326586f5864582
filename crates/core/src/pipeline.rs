//! One direction's engine: classifier → shaping (per-class queues under the link-sharing
//! scheduler) → link emulator.
//!
//! `ingress` reads the frame's headers (with `weir-wire`), classifies it, stamps the
//! packet's metadata (class, rule, direction-independent flow hash, arrival time) and
//! enqueues it into the first stage present. Frames the parser rejects (truncated or
//! malformed headers) are not dropped: they go to the default class and are counted in
//! `malformed`, so unknown traffic still flows.
//!
//! Both stages are optional: a direction may be shaped, emulated, both (the shaper's output
//! enters the emulator: a WAN behind a bandwidth manager), or neither (packets pass
//! through a FIFO that never drops: the classifier's counters still count them).
//! `dequeue` first moves everything the shaper releases into the emulator, then releases
//! what the emulator has due; `next_wakeup` is the earlier of the two stages' wake-ups.
//! Packets the emulator refuses on the way (loss, queue limit) are reported through
//! `Ctx::drop_later`, so the driver frees and counts them like any other late drop.

use crate::classify::{Classifier, Fields};
use crate::emulate::Emulator;
use crate::fifo::Fifo;
use crate::linkshare::LinkShare;
use crate::pool::PktId;
use crate::qdisc::{Count, Ctx, DropCause, Qdisc};
use crate::time::Instant;

/// The header fields of a frame that classification uses, or the error that stopped the
/// parse.
pub fn frame_fields(frame: &[u8]) -> Result<Fields, weir_wire::Error> {
    let p = weir_wire::parse_frame(frame)?;
    Ok(Fields {
        vlan: p.vlan,
        ethertype: p.ethertype,
        src: p.src_ip,
        dst: p.dst_ip,
        proto: p.protocol,
        sport: p.src_port,
        dport: p.dst_port,
        dscp: p.dscp,
    })
}

/// The emulation stage: the emulator and its profiles' names (index = profile).
pub struct EmuStage {
    pub emu: Emulator,
    pub names: Vec<String>,
}

pub struct Pipeline {
    pub classifier: Classifier,
    /// The shaper; `None` when this direction is not shaped.
    pub sched: Option<LinkShare>,
    /// The link emulator; `None` when this direction is not emulated.
    pub emu: Option<EmuStage>,
    /// Used only when there is neither stage.
    pass: Fifo,
    /// Seed of the flow hash (per-flow queuing buckets).
    pub flow_seed: u64,
    /// Frames whose headers could not be parsed (sent to the default class).
    pub malformed: Count,
}

impl Pipeline {
    pub fn new(
        classifier: Classifier,
        sched: Option<LinkShare>,
        emu: Option<EmuStage>,
        flow_seed: u64,
    ) -> Self {
        Pipeline {
            classifier,
            sched,
            emu,
            pass: Fifo::new(u32::MAX, u64::MAX),
            flow_seed,
            malformed: Count::default(),
        }
    }

    /// Classify the frame held in `pkt` and enqueue it, arriving now. `Err` means it was
    /// dropped (the caller frees it); its cause is counted by the stage that refused it.
    pub fn ingress(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let now = cx.now;
        self.ingress_at(pkt, cx, now)
    }

    /// [`Pipeline::ingress`] for a frame that arrived at `arrival` (≤ `cx.now`), e.g. the
    /// kernel's receive timestamp of a frame the driver reads a little later. The
    /// arrival is recorded in the packet's metadata; an emulator fed directly (no shaper
    /// in front) times the frame from it, so the driver's own reading latency does not
    /// add to the emulated delay. A shaper always works on `cx.now` (its clock never
    /// runs backwards), and an emulator behind it sees the shaper's release time.
    pub fn ingress_at(
        &mut self,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) -> Result<(), DropCause> {
        let arrival = arrival.min(cx.now);
        let len = cx.pool.len(pkt);
        let fields = match frame_fields(cx.pool.data(pkt)) {
            Ok(f) => f,
            Err(_) => {
                self.malformed.add(len);
                Fields::default()
            }
        };
        let (class, rule) = self.classifier.classify(&fields, len);
        let m = cx.pool.meta_mut(pkt);
        m.class = class;
        m.rule = rule;
        m.flow = fields.flow_hash(self.flow_seed);
        m.arrival = arrival;
        match (&mut self.sched, &mut self.emu) {
            (Some(s), _) => s.enqueue(pkt, cx),
            (None, Some(e)) => {
                let now = cx.now;
                cx.now = arrival;
                let r = e.emu.enqueue(pkt, cx);
                cx.now = now;
                r
            }
            (None, None) => self.pass.enqueue(pkt, cx),
        }
    }

    pub fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        match (&mut self.sched, &mut self.emu) {
            (Some(s), None) => s.dequeue(cx),
            (s, Some(e)) => {
                if let Some(s) = s {
                    while let Some(p) = s.dequeue(cx) {
                        if let Err(cause) = e.emu.enqueue(p, cx) {
                            cx.drop_later(p, cause);
                        }
                    }
                }
                e.emu.dequeue(cx)
            }
            (None, None) => self.pass.dequeue(cx),
        }
    }

    pub fn next_wakeup(&self) -> Option<Instant> {
        let s = self.sched.as_ref().and_then(|s| s.next_wakeup());
        let e = self.emu.as_ref().and_then(|e| e.emu.next_wakeup());
        // the pass-through FIFO is work-conserving: it never needs a wake-up
        s.into_iter().chain(e).min()
    }

    /// Packets held by all stages.
    pub fn len(&self) -> usize {
        self.sched.as_ref().map_or(0, |s| s.len())
            + self.emu.as_ref().map_or(0, |e| e.emu.len())
            + self.pass.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Discard everything held (e.g. at shutdown), reporting each packet through
    /// `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        if let Some(s) = &mut self.sched {
            s.purge(cx, cause);
        }
        if let Some(e) = &mut self.emu {
            e.emu.purge(cx, cause);
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
        pipe.sched.as_ref().unwrap().check_counters().unwrap();
    }
}
