//! The device: both directions of a bridged link in one sans-IO object, the way
//! quinn-proto's `Connection` holds a whole connection.
//!
//! ```text
//!   Policy::build_device(now) -> Device           the only way to assemble one
//!   Device::ingress(dir, pkt, cx, arrival)        a received frame (arrival = kernel timestamp)
//!   Device::poll_transmit(dir, cx) -> Option<Pkt> what is due now in that direction
//!   Device::next_wakeup() -> Option<Instant>      earliest instant anything is due
//!   Device::originate(dir, pkt, cx)               a packet the engine itself emits
//!   Device::set_class_rates(…, now)               run-time controls, `now` passed in
//!   Device::replace_policy(policy, cx)            hot reload: nothing queued is lost
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
//! Per direction ([`Direction`]): a [`Pipeline`] (classifier → ordered stages: shaper,
//! emulator), or nothing — the direction is then forwarded untouched, in order, through a
//! queue that never drops. Beside it an *originate queue*: packets the engine emits itself
//! (ICMP probes, substitute ACKs), sent before anything else due in that direction.
//!
//! Every call takes `now` (in its [`Ctx`] or as an argument); nothing caches a clock it
//! did not receive in that call. Randomness comes from the caller's seeded RNG in `Ctx`.
//!
//! Hot reload ([`Device::replace_policy`]): the new policy's pipelines are built, then
//! every packet held moves across, per direction, in queue order within each flow:
//! - a shaper's packets whose class has a namesake in the new tree stay in that class
//!   (its token state carried over, clamped to the new buckets); the others are classified
//!   by the new rules and enter the new pipeline's first stage;
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

pub use adapt::{AdaptClass, AdaptCounters, AdaptSnapshot, ReflectorSnapshot};

use crate::admission::{Admission, AdmissionStats, AdmissionTable, Decision};
use crate::classify::Fields;
use crate::conn::{ConnConfig, ConnId, ConnStats, ConnTable};
use crate::emulate::{EmuConfig, EmuLink};
use crate::flow::FlowKey;
use crate::flow::Side;
use crate::pipeline::{parsed_fields, Pipeline};
use crate::policy::Policy;
use crate::pool::{Direction, PktId, PktQueue};
use crate::qdisc::{Count, Ctx, DropCause};
use crate::rate::Rate;
use crate::snapshot::{snapshot, PipelineSnapshot};
use crate::tcp::mss::{MssStats, MssTable};
use crate::tcp::tcr::{Tcr, TcrStats, TcrTable, Verdict};
use crate::time::Instant;
use serde::Serialize;
use weir_wire::tcp::TcpFlags;

/// One direction of the device.
struct Lane {
    /// `None`: forwarded untouched through `pass`.
    pipe: Option<Pipeline>,
    /// Forwarded untouched, ahead of the pipeline: everything without a pipeline, and
    /// frames that are not IP in a shaped direction (see [`Device::ingress`]).
    pass: PktQueue,
    /// Frames that are not IP that bypassed this direction's shaper.
    bypassed: Count,
    /// Packets the engine emits in this direction, sent first.
    originate: PktQueue,
    /// Frames received in this direction that the engine consumed (the adaptive
    /// controller's probe replies and ARP).
    consumed: Count,
    /// MSS clamping of the SYNs and SYN-ACKs travelling this direction.
    mss: MssStats,
    /// Packets the engine emitted in this direction.
    originated: Count,
}

impl Lane {
    /// Queue a frame the engine wrote into `pkt` (`n`: its length, or why it could not be
    /// written) to leave in `dir`, this lane's direction, ahead of everything; `false`, and
    /// `pkt` freed, if it could not be written.
    fn originate_written(
        &mut self,
        pkt: PktId,
        n: weir_wire::Result<usize>,
        dir: Direction,
        cx: &mut Ctx<'_>,
    ) -> bool {
        let Ok(n) = n else {
            cx.pool.free(pkt);
            return false;
        };
        cx.pool.meta_mut(pkt).len = n as u32;
        self.push_originated(pkt, dir, cx);
        true
    }

    /// Queue `pkt` (its `len` set), which the engine emits, to leave in `dir`, this
    /// lane's direction, ahead of everything; counted as originated.
    fn push_originated(&mut self, pkt: PktId, dir: Direction, cx: &mut Ctx<'_>) {
        let m = cx.pool.meta_mut(pkt);
        m.dir = dir;
        m.arrival = cx.now;
        let len = m.len;
        self.originated.add(len);
        self.originate.push_back(cx.pool, pkt);
    }

    fn new(pipe: Option<Pipeline>) -> Lane {
        Lane {
            pipe,
            pass: PktQueue::new(),
            bypassed: Count::default(),
            mss: MssStats::default(),
            originate: PktQueue::new(),
            originated: Count::default(),
            consumed: Count::default(),
        }
    }
}

/// Both directions of a bridged link; see the module comment.
pub struct Device {
    /// Indexed by [`dir_index`]: outbound, inbound.
    lanes: [Lane; 2],
    /// Per-frame overhead the policy's rates count (bytes), for run-time rate changes.
    overhead: i32,
    /// Where the policy came from (its file name).
    source: String,
    /// 1 for the policy the device was built with, +1 per reload.
    generation: u64,
    /// Connections of both directions; `None` for a pass-through device.
    conns: Option<ConnTable>,
    /// The policy's MSS caps (both directions: a SYN-ACK is clamped in a direction that
    /// is not shaped too); `None` when it has none.
    mss: Option<MssTable>,
    /// TCP Rate Control of the policy's `tcr` classes; `None` when it has none.
    tcr: Option<Tcr>,
    /// Admission control of the policy's `max_sessions` classes; `None` when it has none.
    admission: Option<Admission>,
    /// The adaptive controller (`[adapt]`); `None` when the policy has none.
    adapt: Option<adapt::Adapt>,
    /// Application tracking (FTP control and data); with the connection table.
    apps: Option<apps::Apps>,
}

/// MSS clamping of a labelled packet (see [`crate::tcp::mss`]): a SYN takes its
/// rule's/class's cap and leaves it in its connection's entry; a SYN-ACK takes its
/// connection's cap, else its own class's.
#[allow(clippy::too_many_arguments)]
fn clamp_mss(
    table: &MssTable,
    labelled: bool,
    conns: Option<&mut ConnTable>,
    conn: ConnId,
    p: &weir_wire::Parsed,
    pkt: PktId,
    cx: &mut Ctx<'_>,
    stats: &mut MssStats,
) {
    let Some(flags) = p.tcp_flags else { return };
    if !flags.contains(TcpFlags::SYN) {
        return;
    }
    let m = cx.pool.meta(pkt);
    let v6 = p.ip_version == Some(weir_wire::ip::Version::V6);
    let own = labelled.then(|| table.cap(m.class, m.rule, v6)).flatten();
    let entry = conns
        .filter(|_| conn != ConnId::NONE)
        .and_then(|t| t.get_mut(conn).tcp_mut());
    let cap = if flags.contains(TcpFlags::ACK) {
        entry.and_then(|t| t.mss_cap()).or(own)
    } else {
        if let Some(t) = entry {
            t.set_mss_cap(own.unwrap_or(0));
        }
        own
    };
    if let Some(cap) = cap {
        let _ = crate::tcp::mss::clamp(cx.pool, pkt, p, cap, stats);
    }
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

/// What a reload did in one direction.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
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
}

impl LaneReload {
    /// Packets carried into the new policy (not dropped).
    pub fn carried(&self) -> u64 {
        self.kept + self.reclassified + self.re_emulated
    }
}

/// The index of a direction in per-direction arrays: outbound 0, inbound 1.
#[inline]
pub fn dir_index(dir: Direction) -> usize {
    match dir {
        Direction::Outbound => 0,
        Direction::Inbound => 1,
    }
}

impl Device {
    /// A device from the pipelines of each direction (`None`: forwarded untouched).
    /// Crate-internal: a device is assembled by [`crate::policy::Policy::build_device`]
    /// or is [`Device::passthrough`].
    pub(crate) fn new(
        outbound: Option<Pipeline>,
        inbound: Option<Pipeline>,
        overhead: i32,
        source: String,
        conns: Option<ConnConfig>,
        (mss, tcr, admission, l7): (
            Option<MssTable>,
            Option<TcrTable>,
            Option<AdmissionTable>,
            crate::app::l7::L7Set,
        ),
        adapt: Option<(&crate::policy::AdaptDef, &Policy, Instant)>,
    ) -> Result<Device, String> {
        if tcr.is_some() && conns.is_none() {
            return Err("TCP rate control needs the connection table".into());
        }
        if admission.is_some() && conns.is_none() {
            return Err("admission control needs the connection table".into());
        }
        let lanes = [Lane::new(outbound), Lane::new(inbound)];
        let adapt = adapt
            .map(|(def, policy, now)| adapt::Adapt::new(def, policy, &lanes, now))
            .transpose()?;
        Ok(Device {
            lanes,
            overhead,
            source,
            generation: 1,
            apps: conns.is_some().then(|| apps::Apps::new(l7)),
            conns: conns.map(ConnTable::new).transpose()?,
            mss,
            tcr: tcr.map(Tcr::new),
            admission: admission.map(Admission::new),
            adapt,
        })
    }

    /// A device that forwards both directions untouched (no policy, no connection table).
    pub fn passthrough() -> Device {
        Device {
            lanes: [Lane::new(None), Lane::new(None)],
            overhead: 0,
            source: "(none)".into(),
            generation: 1,
            conns: None,
            mss: None,
            tcr: None,
            admission: None,
            adapt: None,
            apps: None,
        }
    }

    /// A device that forwards nothing and watches everything: a connection table and
    /// application tracking, no policy (`weir discover --pcap`: frames of a capture go
    /// to [`Device::observe`]).
    pub fn observer() -> Result<Device, String> {
        let mut d = Device::passthrough();
        d.conns = Some(ConnTable::new(ConnConfig::default())?);
        d.apps = Some(apps::Apps::new(crate::app::l7::L7Set::default()));
        Ok(d)
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
    ) -> (ConnId, Side, apps::Seen) {
        let (mut conn, mut side, mut seen) = (ConnId::NONE, Side::Orig, apps::Seen::default());
        match (&mut self.conns, p, &mut self.apps) {
            (Some(t), Ok(p), Some(a)) => {
                (conn, side) = track(t, p, data, now);
                seen = a.observe(t, (conn, side), p, data, now);
            }
            (Some(t), Ok(p), None) => (conn, side) = track(t, p, data, now),
            (_, Err(_), Some(a)) => a.unparsed(data.len()),
            _ => {}
        }
        (conn, side, seen)
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
        self.conns.as_ref()
    }

    /// What application tracking did (FTP control and data connections); `None` without
    /// a connection table.
    pub fn app_stats(&self) -> Option<apps::AppStats> {
        self.apps.as_ref().map(apps::Apps::stats)
    }

    /// The connection table's counters.
    pub fn connection_stats(&self) -> Option<ConnStats> {
        self.conns.as_ref().map(ConnTable::stats)
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

    /// Replace the policy at `cx.now`, keeping every packet held (see the module
    /// comment). `Err` (nothing changed) if the new policy's pipelines cannot be built.
    /// Packets the new limits refuse land in `cx.dropped` with `DropCause::Reload`.
    pub fn replace_policy(
        &mut self,
        policy: &Policy,
        cx: &mut Ctx<'_>,
    ) -> Result<ReloadReport, String> {
        // the new pipelines (the connection table stays: it is the device's, not the policy's)
        let fresh = [
            policy.build_direction(Direction::Outbound, cx.now)?,
            policy.build_direction(Direction::Inbound, cx.now)?,
        ];
        let mut report = ReloadReport::default();
        // class numbers are the old policy's: control connections learn theirs again
        if let Some(a) = &mut self.apps {
            a.set_policy(&policy.l7);
        }
        let reps = [&mut report.outbound, &mut report.inbound];
        for ((lane, mut new), rep) in self.lanes.iter_mut().zip(fresh).zip(reps) {
            carry(lane.pipe.take(), &mut new, &mut lane.pass, cx, rep)?;
            lane.pipe = new;
        }
        self.overhead = policy.overhead;
        self.mss = policy.mss_table();
        // class indices change meaning: every session is counted afresh from its next
        // packet (TCP sessions as picked up in mid-stream), counters from zero
        self.admission = match policy.admission_table() {
            Some(_) if self.conns.is_none() => {
                return Err("admission control needs the connection table".into())
            }
            table => table.map(Admission::new),
        };
        let tcr_table = policy.tcr_table();
        let keeps_tcr = tcr_table.is_some();
        match (tcr_table, &mut self.tcr) {
            (Some(table), Some(t)) => t.reconfigure(table, cx.pool),
            (Some(table), None) if self.conns.is_some() => self.tcr = Some(Tcr::new(table)),
            (Some(_), None) => return Err("TCP rate control needs the connection table".into()),
            (None, Some(t)) => t.reconfigure(TcrTable::default(), cx.pool),
            (None, None) => {}
        }
        // ACKs released by the reload go out through the new pipelines
        if let Some(t) = &mut self.tcr {
            for dir in [Direction::Outbound, Direction::Inbound] {
                drain_ready(t, &mut self.lanes[dir_index(dir)], dir, cx);
            }
            if !keeps_tcr && t.is_empty() {
                self.tcr = None;
            }
        }
        self.adapt = match (&policy.adapt, &self.adapt) {
            (Some(def), Some(a)) => Some(a.reconfigured(def, policy, &self.lanes, cx.now)?),
            (Some(def), None) => Some(adapt::Adapt::new(def, policy, &self.lanes, cx.now)?),
            (None, _) => None,
        };
        self.source = policy.file.clone();
        self.generation += 1;
        report.generation = self.generation;
        Ok(report)
    }

    /// The pipeline of `dir`, if that direction has one (read-only: for reports).
    pub fn pipeline(&self, dir: Direction) -> Option<&Pipeline> {
        self.lanes[dir_index(dir)].pipe.as_ref()
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
        let mut fields = None;
        let mut parsed = None;
        let mut conn = ConnId::NONE;
        let mut side = Side::Orig;
        let mut seen = apps::Seen::default();
        if self.lanes[dir_index(dir)].pipe.is_some() || self.conns.is_some() {
            let p = weir_wire::parse_frame(cx.pool.data(pkt));
            // the adaptive controller's replies and ARP end here
            if let (Some(a), Ok(parsed)) = (&mut self.adapt, &p) {
                let tcr = self.tcr.as_mut();
                if dir == a.shaped() && a.intercept(pkt, parsed, arrival, &mut self.lanes, tcr, cx)
                {
                    adapt::consume(&mut self.lanes[dir_index(dir)], pkt, cx);
                    return Ok(());
                }
            }
            (conn, side, seen) = self.watch(&p, cx.pool.data(pkt), cx.now);
            cx.pool.meta_mut(pkt).conn = conn.0;
            fields = Some(
                p.as_ref()
                    .map(|p| Fields {
                        app: seen.app,
                        l7: seen.l7,
                        ..parsed_fields(p)
                    })
                    .map_err(|_| ()),
            );
            parsed = p.ok();
        }
        let lane = &mut self.lanes[dir_index(dir)];
        cx.pool.meta_mut(pkt).dir = dir;
        // Frames that are not IP (ARP, LLDP, STP, …) bypass a shaper: a transparent
        // bridge must keep neighbour discovery working whatever the load — in a
        // saturated default class ARP replies were dropped and hosts could not reach
        // each other (seed 001's lab: 4 of 10 connections timed out). They are counted
        // (`bypassed`), not charged to any class.
        let shaped = lane.pipe.as_ref().is_some_and(|p| p.shaper().is_some());
        if shaped && parsed.as_ref().is_some_and(|p| p.ip_version.is_none()) {
            cx.pool.meta_mut(pkt).arrival = arrival.min(cx.now);
            lane.bypassed.add(cx.pool.len(pkt));
            lane.pass.push_back(cx.pool, pkt);
            return Ok(());
        }
        match (&mut lane.pipe, fields) {
            (Some(p), Some(f)) => {
                let f = f.unwrap_or_else(|_| {
                    p.malformed.add(cx.pool.len(pkt));
                    Fields::default()
                });
                p.label(pkt, &f, cx, arrival);
                if let (Some(a), Some(t), true) = (&mut self.apps, &self.conns, seen.app.is_some())
                {
                    let m = cx.pool.meta(pkt);
                    let default = m.rule == crate::classify::DEFAULT_RULE;
                    let class = a.class(t, conn, dir_index(dir), m.class, default);
                    cx.pool.meta_mut(pkt).class = class;
                }
                if let (Some(table), Some(parsed)) = (&self.mss, &parsed) {
                    let conns = self.conns.as_mut();
                    clamp_mss(table, true, conns, conn, parsed, pkt, cx, &mut lane.mss);
                }
            }
            _ => {
                if let (Some(table), Some(parsed)) = (&self.mss, &parsed) {
                    // not classified in this direction: only a connection's cap applies
                    let conns = self.conns.as_mut();
                    clamp_mss(table, false, conns, conn, parsed, pkt, cx, &mut lane.mss);
                }
                cx.pool.meta_mut(pkt).arrival = arrival.min(cx.now);
            }
        }
        if let (Some(a), Some(conns), Some(parsed), true) = (
            &mut self.admission,
            &self.conns,
            &parsed,
            lane.pipe.is_some(),
        ) {
            let class = cx.pool.meta(pkt).class;
            let syn_only = parsed
                .tcp_flags
                .is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK));
            match a.check(class, (conn, side), syn_only, conns, cx.now) {
                Decision::Pass => {}
                Decision::Drop => return Err(DropCause::Admission),
                Decision::Reset => {
                    let sent =
                        send_reset(&mut self.lanes[dir_index(dir.reverse())], pkt, parsed, cx);
                    a.reset_sent(class, sent);
                    return Err(DropCause::Admission);
                }
            }
        }
        if let (Some(t), Some(conns), Some(parsed)) = (&mut self.tcr, &self.conns, &parsed) {
            let labelled = lane.pipe.is_some().then(|| cx.pool.meta(pkt).class);
            let v = t.ingress(
                dir,
                pkt,
                parsed,
                conns,
                (conn, side),
                labelled,
                cx.pool,
                cx.now,
            );
            // what TCR released ahead of this frame goes first
            drain_ready(t, lane, dir, cx);
            if v == Verdict::Held {
                return Ok(());
            }
        }
        match &mut lane.pipe {
            Some(p) => p.admit(pkt, cx),
            None => {
                lane.pass.push_back(cx.pool, pkt);
                Ok(())
            }
        }
    }

    /// What TCP rate control did to the ACKs travelling `dir` (`None`: the policy has no
    /// `tcr` class).
    pub fn tcr_stats(&self, dir: Direction) -> Option<TcrStats> {
        self.tcr.as_ref().map(|t| t.stats(dir))
    }

    /// TCP rate control's state (sessions per class, rates), if the policy has any.
    pub fn tcr(&self) -> Option<&Tcr> {
        self.tcr.as_ref()
    }

    /// Admission control's counters of policy class `class` (`None`: the class has no
    /// `max_sessions`).
    pub fn admission_stats(&self, class: u32) -> Option<AdmissionStats> {
        self.admission.as_ref().and_then(|a| a.stats(class))
    }

    /// Every class with admission control and its counters (empty: none).
    pub fn admission_report(&self) -> Vec<crate::admission::ClassAdmission> {
        self.admission
            .as_ref()
            .map_or_else(Vec::new, Admission::report)
    }

    /// What MSS clamping did to the SYNs and SYN-ACKs travelling `dir`.
    pub fn mss_stats(&self, dir: Direction) -> MssStats {
        self.lanes[dir_index(dir)].mss
    }

    /// A packet the engine emits itself in `dir` (its frame already in `pkt`): sent before
    /// anything else due in that direction.
    pub fn originate(&mut self, dir: Direction, pkt: PktId, cx: &mut Ctx<'_>) {
        self.lanes[dir_index(dir)].push_originated(pkt, dir, cx);
    }

    /// The adaptive controller's state (`None`: the policy has no `[adapt]`).
    pub fn adapt(&self) -> Option<AdaptSnapshot> {
        self.adapt.as_ref().map(adapt::Adapt::snapshot)
    }

    /// Frames received in `dir` that the engine consumed (the adaptive controller's
    /// probe replies and ARP).
    pub fn consumed(&self, dir: Direction) -> Count {
        self.lanes[dir_index(dir)].consumed
    }

    /// Packets the engine emitted in `dir` ([`Device::originate`], admission control's
    /// RSTs): sent on top of what was received.
    pub fn originated(&self, dir: Direction) -> Count {
        self.lanes[dir_index(dir)].originated
    }

    /// The next packet due in `dir` at `cx.now`, if any. Late drops land in `cx.dropped`.
    #[inline]
    pub fn poll_transmit(&mut self, dir: Direction, cx: &mut Ctx<'_>) -> Option<PktId> {
        if let Some(a) = &mut self.adapt {
            if cx.now >= a.next_wakeup() {
                a.poll(&mut self.lanes, self.tcr.as_mut(), cx);
            }
        }
        let lane = &mut self.lanes[dir_index(dir)];
        if let Some(p) = lane.originate.pop_front(cx.pool) {
            return Some(p);
        }
        if lane.pipe.is_some() {
            if let Some(p) = lane.pass.pop_front(cx.pool) {
                return Some(p); // a frame that bypassed the shaper
            }
        }
        if let Some(t) = &mut self.tcr {
            if t.due(dir, cx.now) {
                t.release(dir, cx.pool, cx.now);
                drain_ready(t, lane, dir, cx);
            }
        }
        match &mut lane.pipe {
            Some(p) => p.dequeue(cx),
            None => lane.pass.pop_front(cx.pool),
        }
    }

    /// The earliest instant something becomes due in either direction; `None` when
    /// nothing is waiting for time (packets that are due now are found by
    /// `poll_transmit` without a wake-up).
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.lanes
            .iter()
            .filter_map(|l| l.pipe.as_ref().and_then(Pipeline::next_wakeup))
            .chain(self.tcr.as_ref().and_then(Tcr::next_wakeup))
            .chain(self.adapt.as_ref().map(adapt::Adapt::next_wakeup))
            .min()
    }

    /// Packets held in `dir`.
    pub fn len(&self, dir: Direction) -> usize {
        let l = &self.lanes[dir_index(dir)];
        let held = self.tcr.as_ref().map_or(0, |t| t.len(dir));
        l.pipe.as_ref().map_or(0, Pipeline::len) + l.pass.len() + l.originate.len() + held
    }

    /// Whether nothing is held in either direction.
    pub fn is_empty(&self) -> bool {
        self.len(Direction::Outbound) + self.len(Direction::Inbound) == 0
    }

    /// Discard everything held in both directions (e.g. at shutdown), reporting each
    /// packet through `cx.drop_later` with `cause`.
    pub fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        if let Some(t) = &mut self.tcr {
            t.purge(cx, cause);
        }
        for l in &mut self.lanes {
            if let Some(p) = &mut l.pipe {
                p.purge(cx, cause);
            }
            for q in [&mut l.pass, &mut l.originate] {
                while let Some(id) = q.pop_front(cx.pool) {
                    cx.drop_later(id, cause);
                }
            }
        }
    }

    /// Run-time control: change the assured rate and ceiling (bits/s, the policy's
    /// per-frame overhead counted) and bursts (bytes) of class `name` in `dir`, from `now`
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
        let overhead = self.overhead;
        let sched = self.lanes[dir_index(dir)]
            .pipe
            .as_mut()
            .and_then(Pipeline::shaper_mut)
            .ok_or_else(|| format!("{dir:?} traffic is not shaped"))?;
        let c = sched
            .class_id(name)
            .ok_or_else(|| format!("no class '{name}'"))?;
        sched.set_rates(
            c,
            Rate::with_overhead(rate_bps, overhead),
            Rate::with_overhead(ceil_bps, overhead),
            burst,
            cburst,
            now,
        );
        Ok(())
    }

    /// Counters of `dir`'s pipeline at `now` (`None` when the direction is forwarded
    /// untouched).
    pub fn snapshot(&self, dir: Direction, now: Instant) -> Option<PipelineSnapshot> {
        self.pipeline(dir).map(|p| snapshot(p, now))
    }

    /// Frames that are not IP that bypassed `dir`'s shaper (see [`Device::ingress`]).
    pub fn bypassed(&self, dir: Direction) -> Count {
        self.lanes[dir_index(dir)].bypassed
    }

    /// Copies the emulator made and admitted in `dir` (they leave on top of what was
    /// received).
    pub fn duplicated(&self, dir: Direction) -> Count {
        let mut dup = Count::default();
        if let Some(e) = self.pipeline(dir).and_then(Pipeline::emulator) {
            for l in e.emu.profiles() {
                dup = dup + l.counters().dup_admitted;
            }
        }
        dup
    }
}

/// Find or make the connection of a parsed frame (`data`), count it, feed TCP segments to
/// its state, and expire a few idle entries. `ConnId::NONE` for non-IP frames and a full
/// table that could not evict.
fn track(t: &mut ConnTable, p: &weir_wire::Parsed, data: &[u8], now: Instant) -> (ConnId, Side) {
    let none = (ConnId::NONE, Side::Orig);
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
    if let Some(seg) = p.tcp(data) {
        t.observe_tcp(id, side, &seg, p.payload_len(), now);
    }
    (id, side)
}

/// Answer the refused TCP SYN `pkt` (parsed as `p`) with an RST, queued to go first in
/// `lane` (the way the SYN came). `false`: no RST could be built (no free packet, a frame
/// it cannot answer).
fn send_reset(lane: &mut Lane, pkt: PktId, p: &weir_wire::Parsed, cx: &mut Ctx<'_>) -> bool {
    let Some(rst) = cx.pool.alloc() else {
        return false;
    };
    let frame = cx.pool.data(pkt).to_vec();
    let n = weir_wire::build::tcp_reset_reply(cx.pool.slot_mut(rst), &frame, p);
    let dir = cx.pool.meta(pkt).dir.reverse();
    lane.originate_written(rst, n, dir, cx)
}

/// Move the ACKs TCP rate control released in `dir` into that direction's pipeline (or
/// pass-through queue), oldest first; what the pipeline refuses is dropped later.
fn drain_ready(t: &mut Tcr, lane: &mut Lane, dir: Direction, cx: &mut Ctx<'_>) {
    while let Some(a) = t.take_ready(dir, cx.pool) {
        match &mut lane.pipe {
            Some(p) => {
                if let Err(c) = p.admit(a, cx) {
                    cx.drop_later(a, c);
                }
            }
            None => lane.pass.push_back(cx.pool, a),
        }
    }
}

/// Move what `old` holds into `new` (see the module comment); `pass` takes what has no
/// pipeline to go to.
fn carry(
    old: Option<Pipeline>,
    new: &mut Option<Pipeline>,
    pass: &mut PktQueue,
    cx: &mut Ctx<'_>,
    rep: &mut LaneReload,
) -> Result<(), String> {
    let names = |p: Option<&Pipeline>| -> Vec<String> {
        p.and_then(Pipeline::shaper)
            .map(|s| {
                (0..s.num_classes() as u32)
                    .map(|c| s.name(c).to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (old_names, new_names) = (names(old.as_ref()), names(new.as_ref()));
    rep.classes_added = new_names
        .iter()
        .filter(|n| !old_names.contains(n))
        .cloned()
        .collect();
    rep.classes_removed = old_names
        .iter()
        .filter(|n| !new_names.contains(n))
        .cloned()
        .collect();
    let Some(mut old) = old else {
        return Ok(());
    };
    // 1. emulation profiles with a namesake keep their links (delay lines and all)
    let mut kept_profiles = Vec::new();
    if let (Some(o), Some(n)) = (
        old.emulator_mut(),
        new.as_mut().and_then(Pipeline::emulator_mut),
    ) {
        for (j, name) in n.names.clone().iter().enumerate() {
            let Some(i) = o.names.iter().position(|x| x == name) else {
                continue;
            };
            if kept_profiles.contains(&i) {
                continue;
            }
            let cfg = n.emu.profiles()[j].config().clone();
            let empty = EmuLink::new(EmuConfig::default()).map_err(|e| e.to_string())?;
            if let Some(mut link) = o.emu.replace_profile(i, empty) {
                link.reconfigure(cfg).map_err(|e| e.to_string())?;
                n.emu.replace_profile(j, link);
                kept_profiles.push(i);
                rep.profiles_kept.push(name.clone());
            }
        }
    }
    // 2. everything else the old stages hold, stage by stage, in queue order per flow
    for k in 0..old.stages.len() {
        let mark = cx.dropped.len();
        let is_shaper = old.shaper_index() == Some(k);
        let old_class_names: Vec<String> = old
            .shaper()
            .filter(|_| is_shaper)
            .map(|s| {
                (0..s.num_classes() as u32)
                    .map(|c| s.name(c).to_string())
                    .collect()
            })
            .unwrap_or_default();
        old.purge_stage(k, cx, crate::qdisc::DropCause::Reload);
        let held: Vec<PktId> = cx.dropped.drain(mark..).map(|(p, _)| p).collect();
        for pkt in held {
            let Some(np) = new.as_mut() else {
                pass.push_back(cx.pool, pkt);
                if is_shaper {
                    rep.reclassified += 1;
                } else {
                    rep.re_emulated += 1;
                }
                continue;
            };
            let (keep, stage) = if is_shaper {
                let name = old_class_names.get(cx.pool.meta(pkt).class as usize);
                let keep = np
                    .shaper()
                    .and_then(|s| name.and_then(|n| s.class_id(n)).filter(|&c| s.is_leaf(c)));
                (
                    keep,
                    if keep.is_some() {
                        np.shaper_index()
                    } else {
                        Some(0)
                    },
                )
            } else {
                (None, np.emulator_index())
            };
            match np.readmit(pkt, cx, keep, stage) {
                Ok(()) if !is_shaper => rep.re_emulated += 1,
                Ok(()) if keep.is_some() => rep.kept += 1,
                Ok(()) => rep.reclassified += 1,
                Err(_) => {
                    rep.dropped += 1;
                    cx.drop_later(pkt, crate::qdisc::DropCause::Reload);
                }
            }
        }
    }
    // 3. token state of classes with a namesake
    if let (Some(o), Some(n)) = (old.shaper(), new.as_mut().and_then(Pipeline::shaper_mut)) {
        for c in 0..o.num_classes() as u32 {
            if let Some(nc) = n.class_id(o.name(c)) {
                n.set_tokens(nc, o.tokens(c), cx.now);
            }
        }
    }
    // 4. what the old pass-through held
    while let Some(p) = old.dequeue_passed(cx) {
        pass.push_back(cx.pool, p);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
