//! The device: both directions of a bridged link in one sans-IO object, the way
//! quinn-proto's `Connection` holds a whole connection.
//!
//! ```text
//!   Device::new(DeviceConfig) -> Device           from plain data (Policy::device_config)
//!   Device::ingress(dir, pkt, cx, arrival)        a received frame (arrival = kernel timestamp)
//!   Device::poll_transmit(dir, cx) -> Option<Pkt> what is due now in that direction
//!   Device::next_wakeup() -> Option<Instant>      earliest instant anything is due
//!   Device::originate(dir, pkt, cx)               a packet the engine itself emits
//!   Device::set_class_rates(…, now)               run-time controls, `now` passed in
//!   Device::replace_policy(config, cx)            hot reload: nothing queued is lost
//!   Device::snapshot(dir, now)                    counters for `weir stats`
//! ```
//!
//! A *connection table* ([`crate::conn::ConnTable`]) shared by both directions: every IP
//! frame a policy device receives, in either direction, finds (or makes) its connection's
//! entry — the same one for a packet and its reply — whose id goes into `Meta.conn`; TCP
//! segments update its state (options from SYN/SYN-ACK, sequence and ACK edges, windows,
//! RTT samples). Idle entries expire a few per new connection (bounded work); the table is
//! bounded and counts evictions. It survives policy reloads. [`Device::passthrough`] and
//! a policy that only emulates (`[link] direction = "none"`, `weir emu`) have none.
//!
//! Per direction ([`Direction`]): a [`Pipeline`] — a classifier (if the policy shapes or
//! emulates the direction) and one ordered list of [`crate::stage`]s: MSS clamping,
//! admission control, TCP rate control, the DiffServ conditioner, the shaper with its leaf
//! queues, the emulator, each present when the [`DeviceConfig`] asks for it. A direction
//! with no stage is forwarded untouched, in order. Beside each, an *originate queue*:
//! packets the engine emits itself (ICMP probes, RSTs), sent before anything else due in
//! that direction. What belongs to connections rather than to a direction — the
//! connection table, TCP rate control's and admission control's state, the originate
//! queues — is the device's [`Shared`] state, lent to every stage.
//!
//! Every call takes `now` (in its [`Ctx`] or as an argument); nothing caches a clock it
//! did not receive in that call. Randomness comes from the caller's seeded RNG in `Ctx`.
//!
//! Hot reload ([`Device::replace_policy`]): the new configuration's pipelines are built,
//! then every packet held moves across, per direction, in queue order within each flow
//! ([`Pipeline::take_over`]):
//! - a shaper's packets whose class has a namesake in the new tree stay in that class
//!   (its token state carried over, clamped to the new buckets) unless a new rule their
//!   headers match sends them to another class — where the flow's next packets go, so it
//!   stays in order; the others are classified by the new rules and enter the new
//!   pipeline's first stage;
//! - an emulation profile with a namesake keeps its whole link — queue, delay line with
//!   every release time, loss state — reconfigured to the new profile for what comes
//!   next; packets of a profile that is gone are sent through the new emulator (or
//!   released) as if arriving now;
//! - pass-through and originate queues stay as they are.
//!
//! A packet the new limits have no room for is dropped with cause `reload_limit`.
//! Counters of the new stages start from zero; the rules' counters do not count the
//! carried packets. [`ReloadReport`] says what moved.
//!
//! The driver (io's bridge, the simulator, tests) owns the packet pool; it frees what
//! `poll_transmit` returns once sent, and what lands in `cx.dropped` (late drops), and
//! counts them. Identity per direction, checked by the bridge's live tests:
//! `ingress + originated = transmitted + refused at ingress + dropped later + consumed +
//! len(dir)` (originated: packets the engine emitted itself, [`Device::originated`];
//! consumed: frames addressed to the engine, [`Device::consumed`]).
//!
//! An adaptive controller (`[adapt]`, seed 003's Postgate; [`adapt`]) probes the line
//! through the originate queue, consumes its replies, and sets the shaped link's and
//! classes' rates at run time.

mod adapt;
pub mod apps;
mod config;

pub use crate::pipeline::LaneReload;
pub use adapt::{AdaptClass, AdaptCounters, AdaptSnapshot, ReflectorSnapshot};
pub use config::{Configure, DeviceConfig, LaneConfig};

use crate::admission::{Admission, AdmissionStats};
use crate::classify::Fields;
use crate::conn::{ConnId, ConnStats, ConnTable, Observed};
use crate::flow::FlowKey;
use crate::flow::Side;
use crate::pipeline::{parsed_fields, Pipeline};
use crate::pool::{Direction, PktId};
use crate::qdisc::{Count, Ctx, DropCause};
use crate::rate::Rate;
use crate::snapshot::{snapshot, PipelineSnapshot};
use crate::stage::gates::{AdmissionStage, MssStage, TcrStage};
use crate::stage::{Packet, Rank, Shared, Stage};
use crate::tcp::mss::MssStats;
use crate::tcp::tcr::{Tcr, TcrStats};
use crate::time::Instant;
use serde::Serialize;

/// Both directions of a bridged link; see the module comment.
pub struct Device {
    /// Indexed by [`Direction::index`]: outbound, inbound.
    lanes: [Pipeline; 2],
    /// What both directions' stages share: connections, TCR, admission, originate queues.
    shared: Shared,
    /// How the policy's rates count a frame, for run-time rate changes.
    framing: crate::framing::Framing,
    /// Where the policy came from (its file name).
    source: String,
    /// 1 for the policy the device was built with, +1 per reload.
    generation: u64,
    /// The adaptive controller (`[adapt]`); `None` when the policy has none.
    adapt: Option<adapt::Adapt>,
    /// Application tracking (FTP control and data); with the connection table.
    apps: Option<apps::Apps>,
}

/// Idle connection entries examined per new connection.
const EXPIRE_PER_INSERT: u32 = 8;

/// What [`Device::replace_policy`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReloadReport {
    /// The device's policy generation after the reload.
    pub generation: u64,
    pub outbound: LaneReload,
    pub inbound: LaneReload,
}

/// The index of a direction in per-direction arrays: outbound 0, inbound 1
/// ([`Direction::index`]).
#[inline]
pub fn dir_index(dir: Direction) -> usize {
    dir.index()
}

/// One direction's pipeline from its own parts and the device-wide ones, its stages in
/// rank order: MSS clamping (where the policy has caps), admission control (where the
/// direction classifies), TCP rate control, the conditioner, the shaper, the emulator.
fn lane(dir: Direction, lane: LaneConfig, cfg: &DeviceConfig) -> Pipeline {
    let mut stages: Vec<Box<dyn Stage>> = Vec::new();
    if let Some(t) = &cfg.mss {
        stages.push(Box::new(MssStage::new(t.clone())));
    }
    if cfg.admission.is_some() && lane.classifier.is_some() {
        stages.push(Box::new(AdmissionStage::new(dir)));
    }
    if cfg.tcr.is_some() {
        stages.push(Box::new(TcrStage::new(dir)));
    }
    let (classifier, stages) = lane.into_parts(stages);
    let mut p = Pipeline::new(classifier, stages);
    // the adaptive controller changes rates and probes per frame: it sees wire frames
    p.set_whole(match cfg.adapt {
        Some(_) => crate::whole::SuperPackets::Split,
        None => cfg.super_packets,
    });
    p
}

/// Both pipelines of `cfg` (its lanes taken out of it).
fn lanes(cfg: &mut DeviceConfig) -> [Pipeline; 2] {
    let [out, inb] = std::mem::take(&mut cfg.lanes);
    [
        lane(Direction::Outbound, out, cfg),
        lane(Direction::Inbound, inb, cfg),
    ]
}

impl Device {
    /// A device from its configuration (see [`DeviceConfig`]).
    pub fn new(mut cfg: DeviceConfig) -> Result<Device, String> {
        cfg.check()?;
        let lanes = lanes(&mut cfg);
        let adapt = cfg
            .adapt
            .as_ref()
            .map(|a| adapt::Adapt::new(a, &lanes, Instant::ZERO))
            .transpose()?;
        let conns = cfg.conns.map(ConnTable::new).transpose()?;
        Ok(Device {
            lanes,
            apps: conns.is_some().then(|| apps::Apps::new(cfg.l7)),
            shared: Shared {
                conns,
                tcr: cfg.tcr.map(Tcr::new),
                admission: cfg.admission.map(Admission::new),
                origin: Default::default(),
            },
            framing: cfg.framing,
            source: cfg.source,
            generation: 1,
            adapt,
        })
    }

    /// A device that forwards both directions untouched (no policy, no connection table).
    pub fn passthrough() -> Device {
        Device::new(DeviceConfig {
            source: "(none)".into(),
            ..DeviceConfig::default()
        })
        .expect("an empty configuration builds")
    }

    /// A device that forwards nothing and watches everything: a connection table and
    /// application tracking, no policy (`weir discover --pcap`: frames of a capture go
    /// to [`Device::observe`]).
    pub fn observer() -> Result<Device, String> {
        Device::new(DeviceConfig {
            source: "(none)".into(),
            conns: Some(crate::conn::ConnConfig::default()),
            ..DeviceConfig::default()
        })
    }

    /// Track a frame seen at `now` (a capture's) without forwarding it: its connection,
    /// its application, the discovery tree. Needs a connection table
    /// ([`Device::observer`], or a policy that shapes); otherwise does nothing.
    pub fn observe(&mut self, frame: &[u8], now: Instant) {
        self.watch(&weir_wire::parse_frame(frame), frame, now);
    }

    /// A frame `data` (parsed as `p`) seen at `now`: its connection tracked, its
    /// application observed, a frame that does not parse counted for discovery. What
    /// [`Device::ingress`] and [`Device::observe`] both do first.
    fn watch(
        &mut self,
        p: &weir_wire::Result<weir_wire::Parsed>,
        data: &[u8],
        now: Instant,
    ) -> (ConnId, Side, apps::Seen, Observed) {
        let (mut conn, mut side, mut seen) = (ConnId::NONE, Side::Orig, apps::Seen::default());
        let mut tcp = Observed::default();
        match (&mut self.shared.conns, p, &mut self.apps) {
            (Some(t), Ok(p), Some(a)) => {
                (conn, side, tcp) = track(t, p, data, now);
                seen = a.observe(t, (conn, side), p, data, now);
            }
            (Some(t), Ok(p), None) => (conn, side, tcp) = track(t, p, data, now),
            (_, Err(_), Some(a)) => a.unparsed(data.len()),
            _ => {}
        }
        (conn, side, seen, tcp)
    }

    /// Update the discovery tree's current rates (the statistics publisher calls this
    /// about once a second).
    pub fn discovery_tick(&mut self, now: Instant) {
        if let Some(a) = &mut self.apps {
            a.tick(now);
        }
    }

    /// What discovery saw: at most `top_apps` applications with at most `top_servers`
    /// servers each; `None` without a connection table.
    pub fn discovery(
        &self,
        top_apps: usize,
        top_servers: usize,
    ) -> Option<crate::discover::Report> {
        self.apps.as_ref().map(|a| a.report(top_apps, top_servers))
    }

    /// The connection table (both directions), if this device keeps one.
    pub fn connections(&self) -> Option<&ConnTable> {
        self.shared.conns.as_ref()
    }

    /// What application tracking did (FTP control and data connections); `None` without
    /// a connection table.
    pub fn app_stats(&self) -> Option<apps::AppStats> {
        self.apps.as_ref().map(apps::Apps::stats)
    }

    /// The connection table's counters.
    pub fn connection_stats(&self) -> Option<ConnStats> {
        self.shared.conns.as_ref().map(ConnTable::stats)
    }

    /// Where the policy came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The policy generation: 1 for the policy the device was built with, +1 per
    /// [`Device::replace_policy`]. `generation() - 1` reloads so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Move the device onto the configuration `cfg` (or a policy's) at `cx.now`, keeping every packet
    /// held (see the module comment). `Err` (nothing changed) if the new configuration
    /// cannot be built or needs a connection table this device does not keep (the table
    /// stays as it is: it is the device's, not the policy's). Packets the new limits
    /// refuse land in `cx.dropped` with `DropCause::Reload`.
    pub fn replace_policy(
        &mut self,
        cfg: impl Configure,
        cx: &mut Ctx<'_>,
    ) -> Result<ReloadReport, String> {
        let mut cfg = cfg.configure(cx.now)?;
        cfg.check()?;
        if self.shared.conns.is_none() {
            if cfg.tcr.is_some() {
                return Err("TCP rate control needs the connection table".into());
            }
            if cfg.admission.is_some() {
                return Err("admission control needs the connection table".into());
            }
        }
        let fresh = lanes(&mut cfg);
        let adapt = match (&cfg.adapt, &self.adapt) {
            (Some(c), Some(a)) => Some(a.reconfigured(c, &fresh, cx.now)?),
            (Some(c), None) => Some(adapt::Adapt::new(c, &fresh, cx.now)?),
            (None, _) => None,
        };
        // nothing can fail from here on
        let mut report = ReloadReport::default();
        // class numbers are the old policy's: control connections learn theirs again
        if let Some(a) = &mut self.apps {
            a.set_policy(&cfg.l7);
        }
        // class indices change meaning: every session is counted afresh from its next
        // packet (TCP sessions as picked up in mid-stream), counters from zero
        self.shared.admission = cfg.admission.map(Admission::new);
        let keeps_tcr = cfg.tcr.is_some();
        match (cfg.tcr, &mut self.shared.tcr) {
            (Some(table), Some(t)) => t.reconfigure(table, cx.pool),
            (Some(table), None) => self.shared.tcr = Some(Tcr::new(table)),
            (None, Some(t)) => t.reconfigure(crate::tcp::tcr::TcrTable::default(), cx.pool),
            (None, None) => {}
        }
        let reps = [&mut report.outbound, &mut report.inbound];
        for ((lane, new), rep) in self.lanes.iter_mut().zip(fresh).zip(reps) {
            let old = std::mem::replace(lane, new);
            lane.take_over(old, &mut self.shared, cx, rep);
        }
        // ACKs TCP rate control released because the new policy has none go out through
        // the new pipelines, from the stage after where TCR would be
        if !keeps_tcr {
            if let Some(mut t) = self.shared.tcr.take() {
                for dir in [Direction::Outbound, Direction::Inbound] {
                    while let Some(a) = t.take_ready(dir, cx.pool) {
                        self.lanes[dir.index()].enter_after(Rank::Pace, a, &mut self.shared, cx);
                    }
                }
                if !t.is_empty() {
                    self.shared.tcr = Some(t);
                }
            }
        }
        self.adapt = adapt;
        self.framing = cfg.framing;
        self.source = cfg.source;
        self.generation += 1;
        report.generation = self.generation;
        Ok(report)
    }

    /// The pipeline of `dir`, if that direction is classified (the policy shapes or
    /// emulates it; read-only: for reports).
    pub fn pipeline(&self, dir: Direction) -> Option<&Pipeline> {
        Some(&self.lanes[dir.index()]).filter(|p| p.classifies())
    }

    /// The default emulation profile of `dir` (`weir emu`'s link in that direction), if
    /// that direction emulates.
    pub fn emu_link(&self, dir: Direction) -> Option<&crate::emulate::EmuLink> {
        self.lanes[dir.index()].emulator()?.emu.profile(0)
    }

    /// Give `dir`'s default emulated link a new configuration at run time, its packets
    /// kept with their release times (`weir emu set`).
    pub fn reconfigure_emu_link(
        &mut self,
        dir: Direction,
        cfg: crate::emulate::EmuConfig,
    ) -> Result<(), String> {
        let stage = self.lanes[dir.index()]
            .stage_mut::<crate::stage::EmuStage>()
            .ok_or_else(|| format!("no emulated link {}", dir.name()))?;
        stage.emu.reconfigure(0, cfg).map_err(|e| e.to_string())
    }

    /// [`Device::emu_link`], mutable (to log its events).
    pub fn emu_link_mut(&mut self, dir: Direction) -> Option<&mut crate::emulate::EmuLink> {
        let stage = self.lanes[dir.index()].stage_mut::<crate::stage::EmuStage>()?;
        stage.emu.profile_mut(0)
    }

    /// Whether every link that plays its trace once (`once`) has played it by `now`, and
    /// there is one (`weir emu --once` then stops, as `mm-link --once` exits; each trace
    /// starts at its own link's first frame, so both directions' logs are whole).
    pub fn emulation_played(&self, now: Instant) -> bool {
        let mut once = self
            .lanes
            .iter()
            .filter_map(Pipeline::emulator)
            .flat_map(|e| e.emu.profiles())
            .filter(|l| l.config().once)
            .peekable();
        once.peek().is_some() && once.all(|l| l.played(now))
    }

    /// The stages `dir`'s packets cross, by name, in order.
    pub fn stage_names(&self, dir: Direction) -> Vec<&'static str> {
        self.lanes[dir.index()].stage_names()
    }

    /// A frame received in `dir`, held in `pkt`, that arrived at `arrival` (≤ `cx.now`;
    /// e.g. the kernel's receive timestamp). `Err`: refused (the caller frees it); the
    /// cause is counted by the stage that refused it.
    pub fn ingress(
        &mut self,
        dir: Direction,
        pkt: PktId,
        cx: &mut Ctx<'_>,
        arrival: Instant,
    ) -> Result<(), DropCause> {
        let d = dir.index();
        cx.pool.meta_mut(pkt).dir = dir;
        if !self.lanes[d].classifies() && self.shared.conns.is_none() {
            // nothing looks at this direction: forwarded in order, untouched
            let lane = &mut self.lanes[d];
            lane.label(pkt, None, cx, arrival);
            return lane.run(pkt, &Packet::RELEASED, &mut self.shared, cx);
        }
        let p = weir_wire::parse_frame(cx.pool.data(pkt));
        // the adaptive controller's replies and ARP end here
        if let (Some(a), Ok(parsed)) = (&mut self.adapt, &p) {
            if dir == a.shaped()
                && a.intercept(pkt, parsed, arrival, &mut self.lanes, &mut self.shared, cx)
            {
                self.shared.origin[d].consume(pkt, cx);
                return Ok(());
            }
        }
        let (conn, side, seen, tcp) = self.watch(&p, cx.pool.data(pkt), cx.now);
        cx.pool.meta_mut(pkt).conn = conn.0;
        let parsed = p.as_ref().ok();
        let lane = &mut self.lanes[d];
        // Frames that are not IP (ARP, LLDP, STP, …) bypass a shaper: a transparent
        // bridge must keep neighbour discovery working whatever the load — in a
        // saturated default class ARP replies were dropped and hosts could not reach
        // each other (seed 001's lab: 4 of 10 connections timed out). They are counted
        // (`bypassed`), not charged to any class.
        if lane.is_shaped() && parsed.is_some_and(|p| p.ip_version.is_none()) {
            cx.pool.meta_mut(pkt).arrival = arrival.min(cx.now);
            lane.bypass(pkt, cx);
            return Ok(());
        }
        let fields = parsed.map(|p| Fields {
            app: seen.app,
            l7: seen.l7,
            ..parsed_fields(p)
        });
        lane.label(pkt, fields.as_ref(), cx, arrival);
        let labelled = lane.classifies();
        if let (Some(a), Some(t), true, true) = (
            &mut self.apps,
            &self.shared.conns,
            seen.app.is_some(),
            labelled,
        ) {
            let m = cx.pool.meta(pkt);
            let default = m.rule == crate::classify::DEFAULT_RULE;
            let class = a.class(t, conn, d, m.class, default);
            cx.pool.meta_mut(pkt).class = class;
        }
        // the segment's RTT sample and retransmission count for the class it was given
        lane.record_tcp(labelled.then(|| cx.pool.meta(pkt).class), &tcp);
        let pk = Packet {
            parsed,
            conn,
            side,
            labelled,
        };
        lane.run(pkt, &pk, &mut self.shared, cx)
    }

    /// Whether a TSO/GSO super-packet `frame` received to travel `dir` may cross whole
    /// ([`crate::whole`]): no side effect, one classifier lookup at most.
    pub fn keeps_whole(&self, dir: Direction, frame: &[u8]) -> bool {
        let lane = &self.lanes[dir.index()];
        lane.whole().keeps(lane.classifier(), frame)
    }

    /// What TCP rate control did to the ACKs travelling `dir` (`None`: the policy has no
    /// `tcr` class).
    pub fn tcr_stats(&self, dir: Direction) -> Option<TcrStats> {
        self.shared.tcr.as_ref().map(|t| t.stats(dir))
    }

    /// TCP rate control's state (sessions per class, rates), if the policy has any.
    pub fn tcr(&self) -> Option<&Tcr> {
        self.shared.tcr.as_ref()
    }

    /// Admission control's counters of policy class `class` (`None`: the class has no
    /// `max_sessions`).
    pub fn admission_stats(&self, class: u32) -> Option<AdmissionStats> {
        self.shared.admission.as_ref().and_then(|a| a.stats(class))
    }

    /// Every class with admission control and its counters (empty: none).
    pub fn admission_report(&self) -> Vec<crate::admission::ClassAdmission> {
        self.shared
            .admission
            .as_ref()
            .map_or_else(Vec::new, Admission::report)
    }

    /// What MSS clamping did to the SYNs and SYN-ACKs travelling `dir`.
    pub fn mss_stats(&self, dir: Direction) -> MssStats {
        self.lanes[dir.index()]
            .stage::<MssStage>()
            .map_or_else(MssStats::default, MssStage::stats)
    }

    /// A packet the engine emits itself in `dir` (its frame already in `pkt`): sent before
    /// anything else due in that direction.
    pub fn originate(&mut self, dir: Direction, pkt: PktId, cx: &mut Ctx<'_>) {
        self.shared.origin[dir.index()].push(pkt, dir, cx);
    }

    /// The adaptive controller's state (`None`: the policy has no `[adapt]`).
    pub fn adapt(&self) -> Option<AdaptSnapshot> {
        self.adapt.as_ref().map(adapt::Adapt::snapshot)
    }

    /// Frames received in `dir` that the engine consumed (the adaptive controller's
    /// probe replies and ARP).
    pub fn consumed(&self, dir: Direction) -> Count {
        self.shared.origin[dir.index()].consumed
    }

    /// Packets the engine emitted in `dir` ([`Device::originate`], admission control's
    /// RSTs): sent on top of what was received.
    pub fn originated(&self, dir: Direction) -> Count {
        self.shared.origin[dir.index()].originated
    }

    /// The next packet due in `dir` at `cx.now`, if any. Late drops land in `cx.dropped`.
    #[inline]
    pub fn poll_transmit(&mut self, dir: Direction, cx: &mut Ctx<'_>) -> Option<PktId> {
        if let Some(a) = &mut self.adapt {
            if cx.now >= a.next_wakeup() {
                a.poll(&mut self.lanes, &mut self.shared, cx);
            }
        }
        let d = dir.index();
        if let Some(p) = self.shared.origin[d].queue.pop_front(cx.pool) {
            return Some(p);
        }
        self.lanes[d].poll(&mut self.shared, cx)
    }

    /// The earliest instant something becomes due in either direction; `None` when
    /// nothing is waiting for time (packets that are due now are found by
    /// `poll_transmit` without a wake-up).
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.lanes
            .iter()
            .filter_map(Pipeline::next_wakeup)
            .chain(self.shared.tcr.as_ref().and_then(Tcr::next_wakeup))
            .chain(self.adapt.as_ref().map(adapt::Adapt::next_wakeup))
            .min()
    }

    /// Packets held in `dir`.
    pub fn len(&self, dir: Direction) -> usize {
        let d = dir.index();
        let held = self.shared.tcr.as_ref().map_or(0, |t| t.len(dir));
        self.lanes[d].len() + self.shared.origin[d].queue.len() + held
    }

    /// Whether nothing is held in either direction.
    pub fn is_empty(&self) -> bool {
        self.len(Direction::Outbound) + self.len(Direction::Inbound) == 0
    }

    /// Discard everything held in both directions (e.g. at shutdown), reporting each
    /// packet through `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        if let Some(t) = &mut self.shared.tcr {
            t.purge(cx, cause);
        }
        for (l, o) in self.lanes.iter_mut().zip(&mut self.shared.origin) {
            l.purge(cx, cause);
            while let Some(id) = o.queue.pop_front(cx.pool) {
                cx.drop_later(id, cause);
            }
        }
    }

    /// Run-time control: change the assured rate and ceiling (bits/s, frames counted as
    /// the policy's framing says) and bursts (bytes) of class `name` in `dir`, from `now`
    /// on. Queued packets stay.
    pub fn set_class_rates(
        &mut self,
        dir: Direction,
        name: &str,
        (rate_bps, ceil_bps): (u64, u64),
        (burst, cburst): (u32, u32),
        now: Instant,
    ) -> Result<(), String> {
        if rate_bps == 0 || ceil_bps < rate_bps {
            return Err(format!(
                "class '{name}': rate {rate_bps} bit/s and ceil {ceil_bps} bit/s: need 0 < rate <= ceil"
            ));
        }
        let framing = self.framing;
        let sched = self.lanes[dir.index()]
            .shaper_mut()
            .ok_or_else(|| format!("{dir:?} traffic is not shaped"))?;
        let c = sched
            .class_id(name)
            .ok_or_else(|| format!("no class '{name}'"))?;
        sched.set_rates(
            c,
            Rate::with_framing(rate_bps, framing),
            Rate::with_framing(ceil_bps, framing),
            burst,
            cburst,
            now,
        );
        Ok(())
    }

    /// `dir`'s scheduler, if the direction is shaped.
    pub fn shaper(&self, dir: Direction) -> Option<&crate::sched::linkshare::LinkShare> {
        self.lanes[dir.index()].shaper()
    }

    /// `dir`'s scheduler, to change (`shard::Copies::apply` of `weir run --workers`).
    pub fn shaper_mut(
        &mut self,
        dir: Direction,
    ) -> Option<&mut crate::sched::linkshare::LinkShare> {
        self.lanes[dir.index()].shaper_mut()
    }

    /// Counters of `dir`'s pipeline at `now` (`None` when the direction is forwarded
    /// untouched).
    pub fn snapshot(&self, dir: Direction, now: Instant) -> Option<PipelineSnapshot> {
        self.pipeline(dir).map(|p| snapshot(p, now))
    }

    /// RTT samples and retransmissions per class of `dir`'s packets (see
    /// [`crate::conn::health`]).
    pub fn tcp_health(&self, dir: Direction) -> &crate::conn::health::TcpHealth {
        self.lanes[dir.index()].tcp_health()
    }

    /// Frames that are not IP that bypassed `dir`'s shaper (see [`Device::ingress`]).
    pub fn bypassed(&self, dir: Direction) -> Count {
        self.lanes[dir.index()].bypassed()
    }

    /// Copies the emulator made and admitted in `dir` (they leave on top of what was
    /// received).
    pub fn duplicated(&self, dir: Direction) -> Count {
        let mut dup = Count::default();
        if let Some(e) = self.lanes[dir.index()].emulator() {
            for l in e.emu.profiles() {
                dup = dup + l.counters().dup_admitted;
            }
        }
        dup
    }
}

/// Find or make the connection of a parsed frame (`data`), count it, feed TCP segments to
/// its state (what that did: an RTT sample, a retransmission), and expire a few idle
/// entries. `ConnId::NONE` for non-IP frames and a full table that could not evict.
fn track(
    t: &mut ConnTable,
    p: &weir_wire::Parsed,
    data: &[u8],
    now: Instant,
) -> (ConnId, Side, Observed) {
    let none = (ConnId::NONE, Side::Orig, Observed::default());
    let Some(key) = FlowKey::from_parsed(p) else {
        return none;
    };
    let id = match t.lookup(&key) {
        Some(found) => found,
        None => {
            // idle entries are swept as new connections come, not on every packet: the
            // sweep walks the whole table's memory, which is not free for the hot path
            t.expire(now, EXPIRE_PER_INSERT);
            match t.lookup_or_insert(&key, now) {
                Some(found) => found,
                None => return none,
            }
        }
    };
    let (id, side) = id;
    t.observe(id, side, data.len() as u32, now);
    let tcp = match p.tcp(data) {
        Some(seg) => t.observe_tcp(id, side, &seg, p.payload_len(), now),
        None => Observed::default(),
    };
    (id, side, tcp)
}

#[cfg(test)]
mod tests;
