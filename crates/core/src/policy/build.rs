//! Build: the checked [`Policy`] → runnable parts: each leaf's queue, one direction's
//! [`Pipeline`] (classifier and link-sharing scheduler, then the emulator where a profile
//! applies), and the [`Device`] with both directions — the only way to assemble one.

use super::{ClassDef, MssCap, Policy, QueueKind, RedSpec, Shapes, SubscriberClass, Technique};
use crate::adapt::{AdaptClassDef, AdaptConfig};
use crate::aqm::fifo::AqmFifoConfig;
use crate::aqm::{AqmKind, AqmParams};
use crate::classify::{Classifier, Endpoint, Rule};
use crate::device::{Configure, Device, DeviceConfig, LaneConfig};
use crate::diffserv::{Conditioner, Role, NO_METER};
use crate::emulate::{self, EmuConfig, Emulator};
use crate::pipeline::Pipeline;
use crate::pool::Direction;
use crate::qdisc::Qdisc;
use crate::queue::fifo::{Fifo, Limits};
use crate::queue::fq::FqConfig;
use crate::queue::gred::{DropProfile, GredParams, GredQueue};
use crate::queue::lazy::Lazy;
use crate::queue::pfq::{Pfq, PfqConfig};
use crate::queue::red::{RedMode, RedParams, RedQueue};
use crate::rate::Rate;
use crate::sched::linkshare::{ClassId, ClassSpec, LinkShare};
use crate::stage::EmuStage;
use crate::tcp::mss::{pmtu_cap, MssTable};
use crate::tcp::tcr::{TcrClass, TcrTable};
use crate::time::Instant;
use crate::units::Limit;

impl Policy {
    fn leaf_queue(&self, c: &ClassDef) -> Result<Box<dyn Qdisc>, String> {
        if let Some(r) = &c.red {
            if r.colors.is_some() {
                let (gred, p, b, _) = gred_params(c, r, self.mtu)?;
                return Ok(Box::new(GredQueue::new(gred, p, b)?));
            }
        }
        let red = c.red.as_ref().map(|r| self.red_params(c, r));
        Ok(match c.queue {
            QueueKind::Fifo if c.aqm != AqmKind::None => {
                let (packets, bytes) = c.limit.packets_and_bytes();
                let cfg = AqmFifoConfig {
                    aqm: c.aqm,
                    params: self.aqm_params(c),
                    limits: Limits::new(packets, bytes),
                };
                cfg.build()
                    .map_err(|e| format!("class '{}': {e}", c.name))?
            }
            QueueKind::Fq => {
                let mut cfg = FqConfig::for_rate(Some(self.class_rate(c)));
                cfg.flows = c.session.buckets;
                cfg.isolate = c.isolate;
                cfg.aqm = c.aqm;
                cfg.params = self.aqm_params(c);
                cfg.ack_filter = c.ack_filter;
                match c.limit {
                    Limit::Packets(n) => cfg.limit_packets = n,
                    Limit::Bytes(b) => cfg.limit_bytes = b,
                }
                let seed = self.seed ^ crate::rng::mix64(c.line as u64);
                cfg.validate()
                    .map_err(|e| format!("class '{}': {e}", c.name))?;
                if c.subscriber == Some(SubscriberClass::Circuit) {
                    // built while the circuit has traffic (`queue::lazy`)
                    return Ok(Box::new(Lazy::new(Box::new(move || {
                        cfg.build(seed).expect("the configuration was validated")
                    }))));
                }
                cfg.build(seed)
                    .map_err(|e| format!("class '{}': {e}", c.name))?
            }
            QueueKind::Fifo => {
                let (p, b) = c.limit.packets_and_bytes();
                match red {
                    Some(r) => Box::new(RedQueue::new(r?, p, b)?),
                    None => Box::new(Fifo::new(p, b)),
                }
            }
            QueueKind::Pfq => {
                let limit = match c.limit {
                    Limit::Packets(n) => n,
                    Limit::Bytes(b) => (b / self.mtu as u64).max(1) as u32,
                };
                Box::new(Pfq::new(PfqConfig {
                    buckets: c.session.buckets,
                    quantum: self.mtu,
                    flow_limit: c.session.flow_limit,
                    limit,
                    red: red.transpose()?,
                    session_ceil: c
                        .session
                        .ceil
                        .zip(c.session.cap_burst(self.mtu))
                        .map(|(bps, burst)| (Rate::with_framing(bps, self.framing), burst)),
                })?)
            }
        })
    }

    /// The rate a leaf's AQM MTU time and a flow queue's quantum and memory derive from
    /// (framed as the policy counts frames): what it is sure of, its assured `rate` — but
    /// a subscriber's circuit, assured a small minimum (often 1 % of its plan), drains at
    /// its plan's rate: its `ceil` (as CAKE under LibreQoS's HTB class, whose own rate is
    /// unlimited, keeps its 5 ms target).
    fn class_rate(&self, c: &ClassDef) -> Rate {
        let bps = match c.subscriber {
            Some(super::SubscriberClass::Circuit) => c.ceil,
            _ => c.rate,
        };
        Rate::with_framing(bps, self.framing)
    }

    /// A leaf's CoDel/COBALT parameters: CAKE's derivation from its assured rate
    /// ([`AqmParams::for_rate`]: the target at least 1.5 MTU times at that rate) of the
    /// written or default target and interval; ECN as resolved.
    pub(super) fn aqm_params(&self, c: &ClassDef) -> AqmParams {
        let mut p = AqmParams::for_rate(
            Some(self.class_rate(c)),
            c.target.unwrap_or(AqmParams::TARGET),
            c.interval.unwrap_or(AqmParams::INTERVAL),
            self.mtu,
        );
        p.ecn = c.ecn;
        p
    }

    fn red_params(&self, c: &ClassDef, r: &RedSpec) -> Result<RedParams, String> {
        let (min, max, mode) = match (r.min, r.max) {
            (Limit::Packets(a), Limit::Packets(b)) => (a as u64, b as u64, RedMode::Packets),
            (Limit::Bytes(a), Limit::Bytes(b)) => (a, b, RedMode::Bytes { mean_pkt: self.mtu }),
            _ => {
                return Err(format!(
                    "class '{}': RED min and max must both be packets or both bytes",
                    c.name
                ))
            }
        };
        let p = RedParams {
            min_th: min as f64,
            max_th: max as f64,
            max_p: r.max_p,
            wq: r.wq,
            gentle: r.gentle,
            mode,
            idle_pkt_ns: Rate::from_bps(c.rate).tx_ns(self.mtu),
            ecn: c.ecn,
        };
        p.validate()
            .map_err(|e| format!("class '{}': RED {e}", c.name))?;
        Ok(p)
    }

    /// The shaper at time `now`: the class tree under the link-sharing scheduler, each
    /// leaf with its queue.
    fn shaper(&self, now: Instant) -> Result<LinkShare, String> {
        let mut specs = Vec::with_capacity(self.classes.len());
        // TCR alone: the scheduler holds only the link rate; every class may use all of it
        let tcr_only = self.technique == Technique::Tcr;
        for c in &self.classes {
            let ceil = if tcr_only { self.link_rate } else { c.ceil };
            specs.push(ClassSpec {
                name: c.name.clone(),
                parent: c.parent.map(|p| p as ClassId),
                rate: Rate::with_framing(c.rate, self.framing),
                ceil: Rate::with_framing(ceil, self.framing),
                burst: c.burst,
                cburst: if tcr_only {
                    super::compile::burst_for(ceil, self.mtu)
                } else {
                    c.cburst
                },
                prio: c.prio,
                quantum: c.quantum,
                queue: if c.leaf {
                    Some(self.leaf_queue(c)?)
                } else {
                    None
                },
            });
        }
        LinkShare::new(specs, self.default_class as ClassId, now)
    }

    /// The classifier of the policy's rules.
    pub fn classifier(&self) -> Result<Classifier, String> {
        let rules = self
            .rules
            .iter()
            .map(|r| Rule {
                m: r.m.clone(),
                class: r.class as u32,
                name: r.name.clone(),
            })
            .collect();
        Classifier::new(rules, self.default_class as u32).map_err(|e| e.to_string())
    }

    /// The classifier of packets travelling `dir`: the subscriber table's circuits (by
    /// the source address outbound, the destination inbound: the subscriber's side)
    /// before the policy's rules.
    pub fn classifier_in(&self, dir: Direction) -> Result<Classifier, String> {
        let c = self.classifier()?;
        Ok(match &self.subscribers {
            None => c,
            Some(s) => c.with_circuits(
                s.table.clone(),
                match dir {
                    Direction::Outbound => Endpoint::Src,
                    Direction::Inbound => Endpoint::Dst,
                },
            ),
        })
    }

    /// The shaping pipeline on its own, at time `now` (classifier, conditioner, shaper;
    /// no device around it): for the simulator, `weir sim` and `weir check`.
    pub fn build(&self, now: Instant) -> Result<Pipeline, String> {
        let (classifier, stages) = LaneConfig {
            classifier: Some(self.classifier_in(Direction::Outbound)?),
            conditioner: self.conditioner(now)?,
            shaper: Some(self.shaper(now)?),
            emulator: None,
        }
        .into_parts(Vec::new());
        Ok(Pipeline::new(classifier, stages))
    }

    /// The pipeline of `dir` on its own, at time `now` (as [`Policy::lane_config`] makes
    /// it, without the device-wide stages: for tests and tools); `None` when the policy
    /// leaves the direction untouched.
    pub fn build_direction(
        &self,
        dir: Direction,
        now: Instant,
    ) -> Result<Option<Pipeline>, String> {
        let lane = self.lane_config(dir, now)?;
        if lane.is_empty() {
            return Ok(None);
        }
        let (classifier, stages) = lane.into_parts(Vec::new());
        Ok(Some(Pipeline::new(classifier, stages)))
    }

    /// The DiffServ conditioner: meters per rule and per class (a class without a `meter`
    /// shares its nearest ancestor's), full at `now`; `None` for an edge router without
    /// meters.
    fn conditioner(&self, now: Instant) -> Result<Option<Conditioner>, String> {
        let marks: Vec<Option<u8>> = self.rules.iter().map(|r| r.mark).collect();
        if self.role == Role::Edge && self.meters.is_empty() && marks.iter().all(Option::is_none) {
            return Ok(None);
        }
        let index = |m: Option<usize>| m.map_or(NO_METER, |i| i as u16);
        let by_rule = self.rules.iter().map(|r| index(r.meter)).collect();
        let mut by_class: Vec<u16> = Vec::with_capacity(self.classes.len());
        for c in &self.classes {
            let inherited = c.parent.map_or(NO_METER, |p| by_class[p]);
            by_class.push(c.meter.map_or(inherited, |i| i as u16));
        }
        Conditioner::new(self.role, self.meters.clone(), by_rule, by_class, now)
            .map(|c| Some(c.with_marks(marks)))
    }

    /// The `mss` keys resolved to bytes per class (a class without one takes its nearest
    /// ancestor's) and per rule; `None` when the policy has none.
    pub fn mss_table(&self) -> Option<MssTable> {
        let ip_mtu = self.mtu.saturating_sub(14);
        let bytes = |c: MssCap| match c {
            MssCap::Bytes(b) => (b, b),
            MssCap::Pmtu => (pmtu_cap(ip_mtu, false), pmtu_cap(ip_mtu, true)),
        };
        let mut by_class: Vec<Option<(u16, u16)>> = Vec::with_capacity(self.classes.len());
        for c in &self.classes {
            let inherited = c.parent.and_then(|p| by_class[p]);
            by_class.push(c.mss.map(bytes).or(inherited));
        }
        let by_rule: Vec<_> = self.rules.iter().map(|r| r.mss.map(bytes)).collect();
        (by_class.iter().chain(&by_rule).any(Option::is_some))
            .then_some(MssTable { by_class, by_rule })
    }

    /// The leaves' admission control (`max_sessions`) by class index; `None` when there
    /// is none or nothing is shaped.
    pub fn admission_table(&self) -> Option<crate::admission::AdmissionTable> {
        let by_class: Vec<_> = self.classes.iter().map(|c| c.admission).collect();
        (self.shapes != Shapes::None && by_class.iter().any(Option::is_some)).then(|| {
            crate::admission::AdmissionTable {
                by_class,
                names: self.classes.iter().map(|c| c.name.clone()).collect(),
            }
        })
    }

    /// The rate-controlled leaves (`tcr` key, inherited, else the technique) with their
    /// assured rate and per-session guarantee; `None` when there are none or nothing is
    /// shaped.
    pub fn tcr_table(&self) -> Option<TcrTable> {
        let by_class: Vec<Option<TcrClass>> = (0..self.classes.len())
            .map(|i| {
                let c = &self.classes[i];
                self.rate_controlled(i).then(|| TcrClass {
                    rate_bps: c.rate,
                    guarantee_bps: match c.queue {
                        QueueKind::Pfq | QueueKind::Fq => c.session.guarantee.unwrap_or(0),
                        QueueKind::Fifo => 0,
                    },
                })
            })
            .collect();
        by_class
            .iter()
            .any(Option::is_some)
            .then_some(TcrTable { by_class })
    }

    /// Whether class `i` is a rate-controlled leaf: its own `tcr` key, else its nearest
    /// ancestor's, else the technique's; never when nothing is shaped.
    pub fn rate_controlled(&self, i: usize) -> bool {
        let c = &self.classes[i];
        if !c.leaf || self.shapes == Shapes::None {
            return false;
        }
        let mut at = Some(i);
        while let Some(j) = at {
            if let Some(on) = self.classes[j].tcr {
                return on;
            }
            at = self.classes[j].parent;
        }
        self.technique.tcr()
    }

    /// What travelling in `dir` takes: the classifier, conditioner and shaper if `[link]
    /// direction` covers it, the emulator if any `[[emulate]]` profile in use applies to
    /// it; nothing when neither (the direction is forwarded untouched).
    pub fn lane_config(&self, dir: Direction, now: Instant) -> Result<LaneConfig, String> {
        let p = self.for_direction(dir);
        p.lane_config_as_is(dir, now)
    }

    /// The policy as `dir` sees it: inbound, the classes' and the link's inbound rates
    /// (`inbound_rate`, `inbound_ceil`, `[link] inbound_rate`) in place of `rate` and
    /// `ceil`; the policy itself when they do not differ by direction.
    pub fn for_direction(&self, dir: Direction) -> std::borrow::Cow<'_, Policy> {
        if dir == Direction::Outbound || self.classes[0].inbound.is_none() {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut p = self.clone();
        p.link_rate = self.inbound_link_rate.unwrap_or(self.link_rate);
        p.inbound_link_rate = None;
        for c in &mut p.classes {
            if let Some(d) = c.inbound.take() {
                (c.rate, c.ceil, c.burst, c.cburst, c.quantum) =
                    (d.rate, d.ceil, d.burst, d.cburst, d.quantum);
            }
        }
        std::borrow::Cow::Owned(p)
    }

    fn lane_config_as_is(&self, dir: Direction, now: Instant) -> Result<LaneConfig, String> {
        let emulator = self.emulator_for(dir)?;
        let shaped = self.shapes.covers(dir);
        if !shaped && emulator.is_none() {
            return Ok(LaneConfig::default());
        }
        Ok(LaneConfig {
            classifier: Some(self.classifier_in(dir)?),
            conditioner: if shaped { self.conditioner(now)? } else { None },
            shaper: if shaped {
                Some(self.shaper(now)?)
            } else {
                None
            },
            emulator,
        })
    }

    /// Everything the device of this policy is made of, at time `now` (see
    /// [`DeviceConfig`]): each direction as [`Policy::lane_config`] makes it, and a
    /// connection table when the policy shapes (`[link] direction` other than `none`).
    pub fn device_config(&self, now: Instant) -> Result<DeviceConfig, String> {
        Ok(DeviceConfig {
            source: self.file.clone(),
            framing: self.framing,
            lanes: [
                self.lane_config(Direction::Outbound, now)?,
                self.lane_config(Direction::Inbound, now)?,
            ],
            // a policy that only emulates keeps no table: nothing in an emulator uses one
            // yet, and its per-packet lookups widen the emulator's delay spread (weir lab
            // fidelity at 80 kpps: p90 - p10 from under 50 us to 86-120 us)
            conns: (self.shapes != Shapes::None).then(|| crate::conn::ConnConfig {
                seed: self.seed,
                ..crate::conn::ConnConfig::default()
            }),
            mss: self.mss_table(),
            tcr: self.tcr_table(),
            admission: self.admission_table(),
            l7: self.l7.clone(),
            adapt: self.adapt_config(),
            super_packets: self.super_packets,
        })
    }

    /// The device for this policy at time `now` ([`Policy::device_config`]).
    pub fn build_device(&self, now: Instant) -> Result<Device, String> {
        Device::new(self.device_config(now)?)
    }

    /// The adaptive controller with its classes resolved, if the policy has `[adapt]`.
    fn adapt_config(&self) -> Option<AdaptConfig> {
        let def = self.adapt.as_ref()?;
        let class = |i: usize| {
            let c = &self.classes[i];
            AdaptClassDef {
                name: c.name.clone(),
                index: i,
                rate: c.rate,
                ceil: c.ceil,
                burst: c.burst,
                cburst: c.cburst,
            }
        };
        Some(AdaptConfig {
            def: def.clone(),
            root: class(0),
            leaves: def.classes.iter().map(|&i| class(i)).collect(),
            framing: self.framing,
        })
    }

    /// The emulation stage for `dir`: profile 0 is `[link] emulate` (or transparent), one
    /// profile per `[[emulate]]` used in that direction (others are transparent there),
    /// rules routed to theirs. `None` when nothing is emulated in `dir`.
    pub fn emulator_for(&self, dir: Direction) -> Result<Option<EmuStage>, String> {
        let applies = |i: usize| self.emulators[i].direction.covers(dir);
        let used_default = self.default_emulate.iter().copied().find(|&i| applies(i));
        let used_rules = self.rules.iter().any(|r| r.emulate.is_some_and(applies));
        if used_default.is_none() && !used_rules {
            return Ok(None);
        }
        let err = |e: emulate::EmuError| e.to_string();
        let default_cfg =
            used_default.map_or_else(EmuConfig::default, |i| self.emulators[i].cfg.clone());
        let mut emu = Emulator::new(default_cfg).map_err(err)?;
        let mut names =
            vec![used_default.map_or("(none)".to_string(), |i| self.emulators[i].name.clone())];
        let mut profile_of = vec![None; self.emulators.len()];
        let mut transparent = None;
        for (ri, r) in self.rules.iter().enumerate() {
            let profile = match r.emulate {
                Some(i) if applies(i) => match profile_of[i] {
                    Some(p) => p,
                    None => {
                        let p = emu
                            .add_profile(self.emulators[i].cfg.clone())
                            .map_err(err)?;
                        names.push(self.emulators[i].name.clone());
                        profile_of[i] = Some(p);
                        p
                    }
                },
                // the rule's own profile is for the other direction: untouched here,
                // not the link's default impairment
                Some(_) if used_default.is_some() => match transparent {
                    Some(p) => p,
                    None => {
                        let p = emu.add_profile(EmuConfig::default()).map_err(err)?;
                        names.push("(none)".to_string());
                        transparent = Some(p);
                        p
                    }
                },
                _ => continue,
            };
            emu.route(ri as u32, profile).map_err(err)?;
        }
        Ok(Some(EmuStage { emu, names }))
    }
}

impl Configure for &Policy {
    fn configure(self, now: Instant) -> Result<DeviceConfig, String> {
        self.device_config(now)
    }
}

/// A leaf's three-colour RED (its `red` table has per-colour profiles), checked
/// against the leaf's limit, with that limit in packets and bytes. Three-colour RED
/// keeps one FIFO (packets of a flow never reorder): per-flow queuing is an error.
pub(crate) fn gred_params(
    c: &ClassDef,
    r: &RedSpec,
    mtu: u32,
) -> Result<(GredParams, u32, u64, Vec<String>), String> {
    let Some(colors) = &r.colors else {
        return Err(format!(
            "class '{}': RED has no per-colour profiles",
            c.name
        ));
    };
    if c.queue == QueueKind::Pfq {
        return Err(format!(
            "class '{}': three-colour RED runs on one FIFO (queue = \"fifo\"), not on \
             per-flow queues",
            c.name
        ));
    }
    let bytes = matches!(colors.profiles[0].0, Limit::Bytes(_));
    let th = |l: Limit| match l {
        Limit::Packets(n) => n as f64,
        Limit::Bytes(b) => b as f64,
    };
    let [g, y, rd] = colors.profiles.map(|(min, max, max_p)| DropProfile {
        min_th: th(min),
        max_th: th(max),
        max_p,
    });
    let params = GredParams {
        green: g,
        yellow: y,
        red: rd,
        wq: r.wq,
        gentle: r.gentle,
        mode: if bytes {
            RedMode::Bytes { mean_pkt: mtu }
        } else {
            RedMode::Packets
        },
        idle_pkt_ns: Rate::from_bps(c.rate).tx_ns(mtu),
        averaging: colors.averaging,
        ecn: c.ecn,
    };
    let (p, b) = c.limit.packets_and_bytes();
    let warnings = params
        .validate(p, b)
        .map_err(|e| format!("class '{}': {e}", c.name))?;
    Ok((params, p, b, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Pool;
    use crate::qdisc::Ctx;
    use crate::queue::red::tests::{ecn_pkt, Frame, SLOT};
    use crate::rng::Rng;
    use weir_wire::ip::ecn::ECT0;

    /// `ecn` reaches RED on a FIFO, per-session RED (`pfq`) and three-colour RED: 200
    /// ECN-capable arrivals with no departure push the average past the thresholds, and
    /// the early decisions are marks with `ecn = true`, drops without.
    #[test]
    fn ecn_reaches_every_red() {
        let red = "[link]\nrate = \"10Mbit\"\ndefault = \"a\"\n[[class]]\nname = \"a\"\n\
                   rate = \"1Mbit\"\nlimit = \"300p\"\n";
        let leaves = [
            "aqm = \"red\"\n[class.red]\nmin = \"5p\"\nmax = \"150p\"\nmax_p = 0.1\nwq = 0.2\n",
            "queue = \"pfq\"\naqm = \"red\"\n[class.red]\nmin = \"2p\"\nmax = \"60p\"\nmax_p = 0.5\nwq = 0.2\n",
            "[class.red]\nwq = 0.2\ngreen = { min = \"5p\", max = \"150p\", max_p = 0.1 }\n\
             yellow = { min = \"4p\", max = \"100p\", max_p = 0.1 }\nred = { min = \"3p\", max = \"50p\", max_p = 0.1 }\n",
        ];
        for leaf in leaves {
            for ecn in [true, false] {
                let text = format!("{red}ecn = {ecn}\n{leaf}");
                let p = Policy::parse("p.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                let mut q = p
                    .leaf_queue(&p.classes[p.class_index("a").unwrap()])
                    .unwrap();
                let mut pool = Pool::new(512, SLOT);
                let (mut rng, mut dropped) = (Rng::new(1), Vec::new());
                let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
                for _ in 0..200 {
                    let id = ecn_pkt(cx.pool, Frame::V4(ECT0));
                    if q.enqueue(id, &mut cx).is_err() {
                        cx.pool.free(id);
                    }
                }
                let a = q.aqm_stats().expect("RED reports its counters");
                if ecn {
                    assert!(a.ecn_marked > 10, "{leaf}: {a:?}");
                } else {
                    assert_eq!(a.ecn_marked, 0, "{leaf}");
                    assert!(a.aqm_dropped > 10, "{leaf}: {a:?}");
                }
            }
        }
    }
}
