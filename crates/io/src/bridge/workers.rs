//! `weir run --workers N`: N forwarding loops, one per core, each with its own rings and
//! its own [`Device`] — a shard of the subscriber circuits ([`weir_core::shard::Plan`]) —
//! and one supervisor that makes them one weir.
//!
//! ```text
//!              ┌ lan rx ring (fanout, by source) ┐        ┌ wan tx ring
//!   worker 0 ──┤ Device: shard 0                 ├────────┤ lan tx ring
//!              └ wan rx ring (fanout, by dest.)  ┘        └
//!   worker 1 ── the same, shard 1 ...
//!   supervisor: fail-open heartbeat, statistics socket, reloads, the merged document
//! ```
//!
//! * **Steering.** Each worker's RX ring on each interface joins a `PACKET_FANOUT` group
//!   whose eBPF program sends a frame to the worker owning its circuit (LAN side by
//!   source address, WAN side by destination: [`crate::fanout`]); anything else — an
//!   address in no circuit, ARP, a frame the program cannot parse — goes to worker 0,
//!   which forwards it by its default class. A ring joins its group before it receives
//!   anything ([`crate::afpacket::RxRing::open_joined`]), in worker order (the kernel
//!   numbers members in the order they join).
//! * **Shared classes.** The classes every shard keeps (the link, the classes above the
//!   table) are divided among the workers by the sans-IO [`Coordinator`] every
//!   [`PERIOD`]: each worker, once a period while it has packets, writes its copies'
//!   [`Tally`]s ([`Copies::measure`]) into its slot; whichever worker finds the division
//!   due and the coordinator free runs it over every slot; each worker applies its parts
//!   ([`Copies::apply`]) when it sees new ones. No thread of its own, no lock held across
//!   a packet.
//! * **Fail-open.** The supervisor owns the bypass and beats for the worker that turned
//!   least recently ([`crate::failopen::Bypass::beat_for`]); a worker turns at least every
//!   beat interval. After a hand-over every worker skips the frames the kernel may have
//!   forwarded (the instant is shared).
//! * **One weir.** Each worker publishes its status document into its slot; the
//!   supervisor merges them ([`crate::merge`]) and serves the result on the statistics
//!   socket, with its own fail-open counters and a `workers` list (frames per worker).
//!   A reload is prepared once for N shards (in the statistics server's thread or the
//!   SIGHUP thread), handed to every worker, answered with the merged report, and the
//!   steering follows the new plan.
//! * **A worker that dies** (an error, a panic) stops them all: the link goes to the
//!   kernel (fail-open) or stops (fail-closed), the log names the worker and its error,
//!   and `weir run` exits with an error.
//!
//! Pinning: with no more workers than CPUs weir may use, worker i runs on the i-th of
//! them (`sched_setaffinity`); the supervisor and the statistics thread are not pinned.

use super::control::{reload_summary, Apply, ReloadGate};
use super::publish::{kernel_count, PUBLISH_EVERY};
use super::*;
use crate::control::{Prepared, Ready};
use crate::fanout::{Side, Steering};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use weir_core::shard::{Coordinator, Copies, Tally, PERIOD};

/// Each worker's slot of the coordination.
#[derive(Default)]
struct Slot {
    /// The policy generation its tallies are for.
    generation: u64,
    /// Per direction, per shared class: its copy's tally and the class's whole ceil.
    tallies: [Vec<Tally>; 2],
    ceils: [Vec<u64>; 2],
    /// Per direction, per shared class: its part (bit/s of the ceil), and the division
    /// that gave them.
    shares: [Vec<u64>; 2],
    seq: u64,
}

/// The division of the shared classes.
#[derive(Default)]
struct Division {
    /// The shared classes' whole ceils per direction the coordinators were made for.
    ceils: [Vec<u64>; 2],
    /// Each worker's policy generation at the last division: a worker whose policy
    /// changed counts afresh (its new scheduler's counters start from zero).
    generations: Vec<u64>,
    due: Instant,
    /// Per direction, per shared class: its coordinator and each worker's last tally.
    classes: [Vec<(Coordinator, Vec<Tally>)>; 2],
    seq: u64,
}

/// What the workers and their supervisor share.
pub struct Shared {
    /// Per worker: CLOCK_MONOTONIC ns of its last turn; `u64::MAX` until its rings are open.
    alive: Vec<AtomicU64>,
    /// CLOCK_REALTIME ns: frames received before may have been forwarded by the kernel.
    skip_before: AtomicU64,
    /// CLOCK_REALTIME ns: frames received from then on wait for the next beat
    /// ([`failopen::Bypass::fresh_before`]); stored after `skip_before`.
    fresh_before: AtomicU64,
    /// Stop every worker.
    stop: AtomicBool,
    slots: Vec<Mutex<Slot>>,
    division: Mutex<Division>,
    docs: Mutex<Vec<Option<Arc<StatusDoc>>>>,
    /// How often a worker must turn at least (the heartbeat's interval), if fail-open.
    beat: Option<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn new(n: usize, bypass: Option<&failopen::Bypass>) -> Shared {
        Shared {
            alive: (0..n).map(|_| AtomicU64::new(u64::MAX)).collect(),
            skip_before: AtomicU64::new(0),
            fresh_before: AtomicU64::new(bypass.map_or(u64::MAX, failopen::Bypass::fresh_before)),
            stop: AtomicBool::new(false),
            slots: (0..n).map(|_| Mutex::new(Slot::default())).collect(),
            division: Mutex::new(Division::default()),
            docs: Mutex::new((0..n).map(|_| None).collect()),
            beat: bypass.map(failopen::Bypass::interval),
        }
    }

    /// The least recent turn of the workers whose rings are open (`now` if none are).
    fn least_alive(&self, now: u64) -> u64 {
        self.alive
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .filter(|&a| a != u64::MAX)
            .min()
            .unwrap_or(now)
            .min(now)
    }

    /// Divide the shared classes if due (and no other worker is at it).
    fn divide(&self, now: Instant) {
        let Ok(mut d) = self.division.try_lock() else {
            return;
        };
        if now < d.due {
            return;
        }
        d.due = now + PERIOD;
        let mut slots: Vec<MutexGuard<'_, Slot>> = self.slots.iter().map(lock).collect();
        // every worker must have the same shared classes (a reload on its way through the
        // workers: divide once all have it); their policies' generations may differ
        let same = |s: &MutexGuard<'_, Slot>| {
            (0..2)
                .all(|k| s.ceils[k] == slots[0].ceils[k] && s.tallies[k].len() == s.ceils[k].len())
        };
        if !slots.iter().all(same) {
            return;
        }
        let n = slots.len();
        if d.ceils != slots[0].ceils || d.generations.len() != n {
            d.ceils = slots[0].ceils.clone();
            d.generations = slots.iter().map(|s| s.generation).collect();
            for k in 0..2 {
                d.classes[k] = slots[0].ceils[k]
                    .iter()
                    .enumerate()
                    .map(|(i, &ceil)| {
                        let last = slots.iter().map(|s| s.tallies[k][i]).collect();
                        (Coordinator::new(ceil, n, PERIOD), last)
                    })
                    .collect();
            }
        }
        for (w, s) in slots.iter().enumerate() {
            if d.generations[w] != s.generation {
                d.generations[w] = s.generation;
                for k in 0..2 {
                    for (i, (_, last)) in d.classes[k].iter_mut().enumerate() {
                        last[w] = s.tallies[k][i];
                    }
                }
            }
        }
        d.seq += 1;
        let seq = d.seq;
        for k in 0..2 {
            for (i, (coord, last)) in d.classes[k].iter_mut().enumerate() {
                let loads: Vec<_> = slots
                    .iter()
                    .zip(last.iter_mut())
                    .map(|(s, l)| {
                        let t = s.tallies[k][i];
                        let load = t.since(l);
                        *l = t;
                        load
                    })
                    .collect();
                let shares = coord.tick(now, &loads);
                for (s, &share) in slots.iter_mut().zip(shares) {
                    s.shares[k].resize(i + 1, 0);
                    s.shares[k][i] = share;
                }
            }
        }
        for s in &mut slots {
            s.seq = seq;
        }
    }
}

/// What makes a bridge one of the workers ([`BridgeConfig::worker`]).
pub struct WorkerRole {
    pub index: usize,
    shared: Arc<Shared>,
    /// The LAN side's and the WAN side's steering, with their fanout group ids.
    fanout: [(Arc<Steering>, u16); 2],
    control: Receiver<ControlRequest>,
    /// The classes every worker keeps and the coordinator divides.
    classes: Vec<String>,
}

/// A worker's own state in its bridge.
pub(super) struct Worker {
    index: usize,
    shared: Arc<Shared>,
    classes: Vec<String>,
    copies: [Copies; 2],
    /// The division last applied.
    applied: u64,
    next: Instant,
    /// The device held packets at the last measurement.
    busy: bool,
}

const DIRS: [Direction; 2] = [Direction::Outbound, Direction::Inbound];

impl WorkerRole {
    /// Join `fd` (a ring on the LAN side if `lan`) to this worker's fanout group.
    pub(super) fn join(&self, lan: bool, fd: RawFd) -> Result<(), String> {
        let (s, group) = &self.fanout[usize::from(!lan)];
        s.join(fd, *group).map_err(|e| e.to_string())
    }

    pub(super) fn take_control(&mut self) -> Receiver<ControlRequest> {
        let (_, dead) = std::sync::mpsc::channel();
        std::mem::replace(&mut self.control, dead)
    }

    pub(super) fn into_worker(self, device: &mut Device) -> Worker {
        let mut w = Worker {
            index: self.index,
            shared: self.shared,
            classes: self.classes,
            copies: Default::default(),
            applied: 0,
            next: Instant::ZERO,
            busy: false,
        };
        w.rebuild(device, None);
        w
    }
}

impl Worker {
    /// New copies after the device's policy changed (`classes`: the new shared ones),
    /// an even part of each class until the next division, and a first tally at once
    /// (the division needs every worker's, busy or not).
    pub(super) fn rebuild(&mut self, device: &mut Device, classes: Option<Vec<String>>) {
        if let Some(c) = classes {
            self.classes = c;
        }
        let n = self.shared.slots.len();
        let now = Instant(crate::clock::monotonic_ns());
        let mut s = lock(&self.shared.slots[self.index]);
        s.generation = device.generation();
        for (k, d) in DIRS.into_iter().enumerate() {
            s.tallies[k].clear();
            s.shares[k].clear();
            s.ceils[k].clear();
            let Some(ls) = device.shaper_mut(d) else {
                self.copies[k] = Copies::default();
                continue;
            };
            self.copies[k] = Copies::new(ls, &self.classes);
            let c = self.copies[k].copies();
            s.ceils[k] = c.iter().map(|c| c.ceil.bps()).collect();
            // the coordinator's own first division (the remainder to worker 0)
            let even: Vec<u64> = s.ceils[k]
                .iter()
                .map(|&ceil| Coordinator::new(ceil, n, PERIOD).shares()[self.index])
                .collect();
            self.copies[k].apply(ls, &even, now);
            self.copies[k].measure(ls, &mut s.tallies[k]);
        }
    }

    /// The shared classes' whole (rate, ceil) per direction, by name.
    pub(super) fn wholes(&self) -> [Vec<(String, u64, u64)>; 2] {
        self.copies.each_ref().map(|c| {
            c.copies()
                .iter()
                .map(|c| (c.name.clone(), c.rate.bps(), c.ceil.bps()))
                .collect()
        })
    }

    /// A reload's report (JSON) without the shared classes whose whole rate and ceil
    /// stayed as `before` ([`Worker::wholes`]): their copies' parts always differ from the
    /// new policy's whole, which is not a change.
    pub(super) fn unchanged_shared(
        &self,
        before: &[Vec<(String, u64, u64)>; 2],
        report: &mut serde_json::Value,
    ) {
        let now = self.wholes();
        for (k, dir) in ["outbound", "inbound"].into_iter().enumerate() {
            let same: Vec<&str> = now[k]
                .iter()
                .filter(|c| before[k].contains(c))
                .map(|c| c.0.as_str())
                .collect();
            if let Some(changed) = report[dir]["classes_changed"].as_array_mut() {
                changed.retain(|n| !n.as_str().is_some_and(|n| same.contains(&n)));
            }
        }
    }

    /// Once a turn: say this worker is alive and take a hand-over's skip instant.
    pub(super) fn turn(&mut self, now: Instant, out: &mut Lane, inb: &mut Lane) {
        self.shared.alive[self.index].store(now.0, Ordering::Relaxed);
        // the fresh instant first: a hand-over's skip instant is stored before it
        let fresh = self.shared.fresh_before.load(Ordering::Acquire);
        out.fresh_before = fresh;
        inb.fresh_before = fresh;
        let skip = self.shared.skip_before.load(Ordering::Relaxed);
        if skip > out.skip_before {
            out.skip_before = skip;
            inb.skip_before = skip;
        }
    }

    /// The latest this worker may sleep until.
    pub(super) fn wake_by(&self, now: Instant) -> Option<Instant> {
        self.shared.beat.map(|b| now + b)
    }

    /// Measure, divide if due, apply new parts: once a [`PERIOD`] while the device holds
    /// packets (an idle worker's tallies do not change).
    pub(super) fn coordinate(&mut self, device: &mut Device, now: Instant) {
        if now < self.next || self.shared.slots.len() < 2 {
            return;
        }
        // an idle worker's tallies do not change: measured once more after it empties
        // (or the division would go on reading it as backlogged), then left alone
        let busy = DIRS.iter().any(|&d| device.len(d) > 0);
        if !busy && !self.busy {
            return;
        }
        self.busy = busy;
        self.next = now + PERIOD;
        {
            let mut s = lock(&self.shared.slots[self.index]);
            for (k, d) in DIRS.into_iter().enumerate() {
                match device.shaper(d) {
                    Some(ls) => self.copies[k].measure(ls, &mut s.tallies[k]),
                    None => s.tallies[k].clear(),
                }
            }
        }
        self.shared.divide(now);
        let s = lock(&self.shared.slots[self.index]);
        if s.seq == self.applied {
            return;
        }
        self.applied = s.seq;
        for (k, d) in DIRS.into_iter().enumerate() {
            if let Some(ls) = device.shaper_mut(d) {
                self.copies[k].apply(ls, &s.shares[k], now);
            }
        }
    }

    /// The shared classes' whole rate and ceil in a snapshot of direction `k`'s pipeline.
    pub(super) fn whole_rates(
        &self,
        k: usize,
        snap: Option<&mut weir_core::snapshot::PipelineSnapshot>,
    ) {
        let Some(snap) = snap else { return };
        for c in self.copies[k].copies() {
            if let Some(s) = snap.classes.iter_mut().find(|s| s.name == c.name) {
                s.rate_bps = c.rate.bps();
                s.ceil_bps = c.ceil.bps();
            }
        }
    }

    /// Hand the status document to the supervisor.
    pub(super) fn post(&self, doc: StatusDoc) {
        lock(&self.shared.docs)[self.index] = Some(Arc::new(doc));
    }
}

/// How to run the workers.
pub struct WorkersConfig {
    /// Everything but the device, the captures and the statistics socket is each
    /// worker's; the socket, fail-open and offloads are the supervisor's.
    pub bridge: BridgeConfig,
    /// The policy split into one configuration per worker.
    pub ready: Ready,
}

/// What a worker thread sends when it ends.
type Ended = (usize, Result<BridgeReport, String>);

/// The running workers and their supervisor: [`Workers::start`], then [`Workers::run`].
pub struct Workers {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Result<BridgeReport, String>>>,
    ended: Receiver<Ended>,
    bypass: Option<failopen::Bypass>,
    handovers: u64,
    stats: Option<StatsServer>,
    /// `weir reload` and SIGHUP, limited by one gate for all workers, so that they all
    /// take the same reloads.
    control: Control,
    sup: Supervisor,
    _offloads: Vec<OffloadGuard>,
}

impl Workers {
    /// Check the environment, take over the interfaces (offloads, fail-open bypass,
    /// steering), start `cfg.ready.configs.len()` workers one by one (each opens its rings
    /// and joins the fanout groups in worker order), then the statistics socket.
    pub fn start(mut cfg: WorkersConfig) -> Result<Workers, BridgeError> {
        let b = &mut cfg.bridge;
        let n = cfg.ready.configs.len();
        let other = BridgeError::Other;
        preflight(&b.lan, &b.wan, b.fail_open.is_some())?;
        let offloads = offloads_off(b)?;
        let mut bypass = bypass_for(b)?;
        let steer = |side| -> Result<Arc<Steering>, BridgeError> {
            let s = Steering::new(n as u32, side).map_err(|e| other(format!("fanout: {e}")))?;
            s.set_all(&cfg.ready.steering)
                .map_err(|e| other(format!("fanout: {e}")))?;
            Ok(Arc::new(s))
        };
        let (lan_steer, wan_steer) = (steer(Side::Src)?, steer(Side::Dst)?);
        // group ids are per network namespace: two of weir's own, from its process id
        // (2 pid and 2 pid + 1, modulo 2^16: weirs of neighbouring pids do not collide)
        let group = (std::process::id().wrapping_mul(2) & 0xffff) as u16;
        let shared = Arc::new(Shared::new(n, bypass.as_ref()));
        let cpus = usable_cpus();
        let (ended_tx, ended) = std::sync::mpsc::channel::<Ended>();
        let mut controls = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        let mut handovers = 0u64;
        // every engine first: nothing to stop if one cannot be built
        let devices = std::mem::take(&mut cfg.ready.configs)
            .into_iter()
            .enumerate()
            .map(|(i, c)| Device::new(c).map_err(|e| other(format!("worker {i}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, device) in devices.into_iter().enumerate() {
            let (control_tx, control) = std::sync::mpsc::channel();
            controls.push(control_tx);
            let role = WorkerRole {
                index: i,
                shared: shared.clone(),
                fanout: [(lan_steer.clone(), group), (wan_steer.clone(), group + 1)],
                control,
                classes: cfg.ready.shared.clone(),
            };
            let wcfg = worker_config(b, device, (i, n), role);
            let cpu = (n <= cpus.len()).then(|| cpus[i]);
            let (opened_tx, opened) = std::sync::mpsc::channel::<Result<(), String>>();
            let (ended_tx, sh) = (ended_tx.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("weir-worker-{i}"))
                .spawn(move || worker_thread(i, wcfg, cpu, opened_tx, ended_tx, &sh.stop));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let e = other(format!("cannot start worker {i}: {e}"));
                    return Err(stop_all(&shared, threads, e));
                }
            }
            loop {
                // keep the heartbeat fresh while the worker maps its rings
                supervise_beat(&mut bypass, &shared, &mut handovers);
                match opened.recv_timeout(std::time::Duration::from_millis(5)) {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) => return Err(stop_all(&shared, threads, other(e))),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(_) => {
                        let e = other(format!("worker {i} ended while starting"));
                        return Err(stop_all(&shared, threads, e));
                    }
                }
            }
        }
        drop(ended_tx);
        let mut stats = match &b.stats_socket {
            Some(p) => match StatsServer::start(p, b.socket_group) {
                Ok(s) => Some(s),
                Err(e) => return Err(stop_all(&shared, threads, other(e.to_string()))),
            },
            None => None,
        };
        if let Some(s) = &stats {
            s.set_shards(n);
        }
        let control = stats.as_mut().and_then(StatsServer::take_control);
        let hup = b
            .reload
            .take()
            .map(|f| crate::control::HupReloads::new(f, crate::signals::install_hup(), n));
        let sup = Supervisor {
            shared: shared.clone(),
            controls,
            steering: [lan_steer, wan_steer],
            classes: cfg.ready.shared.clone(),
            lan: b.lan.clone(),
            wan: b.wan.clone(),
            timeout_ms: b.fail_open.map_or(0.0, |d| d.as_secs_f64() * 1e3),
            refused: 0,
        };
        Ok(Workers {
            shared,
            threads,
            ended,
            bypass,
            handovers,
            stats,
            control: Control::new(control, hup),
            sup,
            _offloads: offloads,
        })
    }

    /// Supervise until `stop` (or a worker ends); the merged final report (a JSON
    /// document shaped as [`BridgeReport`]'s, with `workers`).
    pub fn run(mut self, stop: &AtomicBool) -> Result<serde_json::Value, BridgeError> {
        let n = self.threads.len();
        let mut watchdog = crate::notify::Watchdog::from_env();
        let clock = Clock::new();
        let mut next_publish = clock.now();
        let mut failed: Option<String> = None;
        // wake at least every 5 ms, and twice a beat interval (an eighth of a 20 ms
        // --fail-open-after is 2.5 ms)
        let tick = std::time::Duration::from_nanos(
            self.shared
                .beat
                .map_or(5_000_000, |b| (b.as_nanos() / 2).min(5_000_000)),
        );
        while !stop.load(Ordering::Relaxed) {
            supervise_beat(&mut self.bypass, &self.shared, &mut self.handovers);
            let now = clock.now();
            let stalled = now.0.saturating_sub(self.shared.least_alive(now.0)) > 1_000_000_000;
            if !stalled {
                watchdog.ping(now);
            }
            self.poll_control(now);
            if now >= next_publish {
                next_publish = now + PUBLISH_EVERY;
                if let Some(s) = &self.stats {
                    let throttled = self.control.gate.throttled;
                    self.sup
                        .publish(s, self.handovers, self.bypass.as_ref(), throttled);
                }
            }
            match self.ended.recv_timeout(tick) {
                Ok((i, r)) => {
                    failed = Some(match r {
                        Ok(_) => format!("worker {i} stopped"),
                        Err(e) => format!("worker {i} failed: {e}"),
                    });
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => {
                    failed = Some("every worker ended".into());
                    break;
                }
            }
        }
        // hand the link to the kernel first: it forwards while the queues are purged
        hand_over_at_stop(self.bypass.as_mut(), &self.sup.lan, &self.sup.wan);
        self.shared.stop.store(true, Ordering::SeqCst);
        let mut reports = Vec::with_capacity(n);
        for (i, t) in std::mem::take(&mut self.threads).into_iter().enumerate() {
            match t.join() {
                Ok(Ok(r)) => reports.push(serde_json::to_value(&r).unwrap_or_default()),
                Ok(Err(e)) => {
                    failed.get_or_insert(format!("worker {i} failed: {e}"));
                }
                Err(_) => {
                    failed.get_or_insert(format!("worker {i} panicked"));
                }
            }
        }
        if let Some(why) = failed {
            let after = match self.bypass {
                Some(_) => "fail-open: the kernel forwards, unshaped",
                None => "fail-closed: nothing passes",
            };
            return Err(BridgeError::Other(format!(
                "{why}; every worker was stopped ({after})"
            )));
        }
        let mut report = crate::merge::merge_all(reports);
        report["fail_open"] = self.sup.fail_open(self.handovers, self.bypass.as_ref());
        report["workers"] = n.into();
        let forwarded = self.bypass.as_ref().map(|b| b.forwarded());
        for dir in ["outbound", "inbound"] {
            kernel_forwarded(&mut report[dir], dir, forwarded);
        }
        add_refusals(&mut report, (self.sup.refused, self.control.gate.throttled));
        Ok(report)
    }

    /// Reloads from `weir reload` (answered; at most [`RELOADS_PER_SECOND`] a second)
    /// and SIGHUP (logged).
    fn poll_control(&mut self, now: Instant) {
        let (bypass, shared, handovers) = (&mut self.bypass, &self.shared, &mut self.handovers);
        let mut beat = || supervise_beat(bypass, shared, handovers);
        let mut to = SupervisorApply {
            sup: &mut self.sup,
            beat: &mut beat,
        };
        self.control.poll(now, &mut to);
    }
}

/// The supervisor as what applies control requests: reloads handed to every worker
/// (beating the heartbeat meanwhile: `beat`); no `weir emu set`.
struct SupervisorApply<'a> {
    sup: &'a mut Supervisor,
    beat: &'a mut dyn FnMut(),
}

impl Apply for SupervisorApply<'_> {
    fn emu_set(&mut self, _: &[String], _: &mut ReloadGate, _: Instant) -> String {
        super::emu_set::NOT_EMU.to_string()
    }

    fn gated(&self) -> bool {
        true
    }

    fn reload(
        &mut self,
        name: &str,
        text: &str,
        prepared: Prepared,
        _: Instant,
    ) -> serde_json::Value {
        self.sup.reload(name, text, prepared, self.beat)
    }
}

/// Whatever ends the supervisor (an error after start, a panic) stops the workers first:
/// never workers forwarding beside the kernel's bypass.
impl Drop for Workers {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// The supervisor's part of the running workers.
struct Supervisor {
    shared: Arc<Shared>,
    controls: Vec<Sender<ControlRequest>>,
    steering: [Arc<Steering>; 2],
    classes: Vec<String>,
    lan: String,
    wan: String,
    timeout_ms: f64,
    /// Reloads refused (the policy did not prepare, or the workers refused it).
    refused: u64,
}

impl Supervisor {
    /// Hand a prepared policy to every worker (beating the heartbeat while they take it:
    /// `beat`); the merged answer. The workers check the same policy, so normally all
    /// apply it or all refuse it; if some refuse (a shard's own configuration failed),
    /// the answer and the log say which and that the policy must be fixed and reloaded.
    fn reload(
        &mut self,
        name: &str,
        text: &str,
        prepared: Prepared,
        beat: &mut dyn FnMut(),
    ) -> serde_json::Value {
        let ready = match prepared {
            Ok(r) if r.configs.len() == self.controls.len() => r,
            Ok(r) => {
                self.refused += 1;
                return serde_json::json!({ "ok": false, "errors": format!(
                    "{name}: prepared for {} workers, {} run", r.configs.len(), self.controls.len()
                ) });
            }
            Err(e) => {
                self.refused += 1;
                return serde_json::json!({ "ok": false, "errors": e });
            }
        };
        let mut waiting = Vec::with_capacity(self.controls.len());
        for (cfg, tx) in ready.configs.into_iter().zip(&self.controls) {
            let one = Ready {
                configs: vec![cfg],
                steering: Vec::new(),
                shared: ready.shared.clone(),
            };
            let (req, rx) = ControlRequest::new(name.into(), text.into(), Ok(one));
            // (a worker that has stopped answers nothing: counted below)
            let _ = tx.send(req);
            waiting.push(rx);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let answers: Vec<serde_json::Value> = waiting
            .into_iter()
            .map(|rx| loop {
                beat();
                match rx.recv_timeout(std::time::Duration::from_millis(5)) {
                    Ok(s) => break serde_json::from_str(&s).unwrap_or_default(),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                        if std::time::Instant::now() < deadline => {}
                    Err(_) => break serde_json::json!({ "ok": false, "errors": "no answer" }),
                }
            })
            .collect();
        let refused: Vec<usize> = (0..answers.len())
            .filter(|&i| answers[i]["ok"] != true)
            .collect();
        if refused.len() == answers.len() {
            self.refused += 1;
            return answers[0].clone();
        }
        for s in &self.steering {
            if let Err(e) = s.set_all(&ready.steering) {
                log::warning(&format!("fanout: the new steering was not applied: {e}"));
            }
        }
        self.classes = ready.shared;
        if !refused.is_empty() {
            self.refused += 1;
            let why: Vec<String> = refused
                .iter()
                .map(|&i| {
                    format!(
                        "worker {i}: {}",
                        answers[i]["errors"].as_str().unwrap_or("?")
                    )
                })
                .collect();
            return serde_json::json!({ "ok": false, "errors": format!(
                "{name}: applied by {} of {} workers and refused by the others ({}); weir now runs two policies: fix the policy and reload again",
                answers.len() - refused.len(), answers.len(), why.join("; ")
            ) });
        }
        let mut merged = crate::merge::merge_all(answers);
        let applied_ms = merged["applied_ms"].as_f64().unwrap_or(0.0);
        merged["summary"] = reload_summary(&merged["report"], applied_ms).into();
        merged
    }

    /// The fail-open document: the supervisor's bypass and hand-overs.
    fn fail_open(&self, handovers: u64, bypass: Option<&failopen::Bypass>) -> serde_json::Value {
        serde_json::to_value(FailOpenDoc {
            enabled: bypass.is_some(),
            timeout_ms: self.timeout_ms,
            handovers,
        })
        .unwrap_or_default()
    }

    /// Publish the workers' status documents as one: what is the supervisor's is taken
    /// now, the merging (milliseconds for thousands of classes) is done by the thread of
    /// a client that asks ([`StatsServer::publish_lazy`]). `throttled`: the reload
    /// requests refused for their rate.
    fn publish(
        &self,
        server: &StatsServer,
        handovers: u64,
        bypass: Option<&failopen::Bypass>,
        throttled: u64,
    ) {
        let docs: Vec<Option<Arc<StatusDoc>>> = lock(&self.shared.docs).clone();
        let extra = serde_json::json!({
            "fail_open": self.fail_open(handovers, bypass),
            "shared_classes": self.classes,
            "unsteered": {
                "lan": self.steering[0].unsteered(),
                "wan": self.steering[1].unsteered(),
            },
            "stats_clients_given_up": server.clients_given_up(),
            "lan": self.lan,
            "wan": self.wan,
        });
        let forwarded = bypass.map(|b| b.forwarded());
        let refused = (self.refused, throttled);
        server.publish_lazy(Arc::new(move || {
            let docs: Vec<serde_json::Value> = docs
                .iter()
                .map(|d| d.as_ref().map_or(serde_json::Value::Null, |d| {
                    serde_json::to_value(&**d).unwrap_or_default()
                }))
                .collect();
            let workers: Vec<serde_json::Value> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    serde_json::json!({
                        "worker": i,
                        "outbound_rx": d["outbound"]["lane"]["rx"],
                        "inbound_rx": d["inbound"]["lane"]["rx"],
                        "classes": d["outbound"]["pipeline"]["classes"].as_array().map_or(0, Vec::len),
                    })
                })
                .collect();
            let mut doc =
                crate::merge::merge_all(docs.into_iter().filter(|d| !d.is_null()).collect());
            if !doc.is_object() {
                doc = serde_json::json!({});
            }
            for dir in ["outbound", "inbound"] {
                kernel_forwarded(&mut doc[dir]["lane"], dir, forwarded);
            }
            add_refusals(&mut doc["policy"], refused);
            if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
                d.extend(e.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            doc["workers"] = workers.into();
            doc.to_string()
        }));
    }
}

/// What the kernel forwarded in direction `dir` (the bypass's counts: `forwarded`), into a
/// lane's counters.
fn kernel_forwarded(
    lane: &mut serde_json::Value,
    dir: &str,
    forwarded: Option<(failopen::Forwarded, failopen::Forwarded)>,
) {
    let Some(forwarded) = forwarded else { return };
    if lane.is_object() {
        let d = if dir == "outbound" {
            Direction::Outbound
        } else {
            Direction::Inbound
        };
        let f = kernel_count(d, forwarded);
        lane["kernel_forwarded"] = serde_json::json!({ "packets": f.packets, "bytes": f.bytes });
    }
}

/// The supervisor's own reload refusals (refused, refused for the rate) added to a
/// document's (its `policy` object, or the final report).
fn add_refusals(v: &mut serde_json::Value, (refused, throttled): (u64, u64)) {
    if !v.is_object() {
        return;
    }
    for (k, n) in [
        ("reloads_refused", refused),
        ("reloads_throttled", throttled),
    ] {
        let r = v[k].as_u64().unwrap_or(0);
        v[k] = (r + n).into();
    }
}

/// Beat for the workers; a hand-over makes every worker skip what the kernel forwarded.
fn supervise_beat(bypass: &mut Option<failopen::Bypass>, shared: &Shared, handovers: &mut u64) {
    let Some(b) = bypass else { return };
    let now = crate::clock::monotonic_ns();
    let Some(beat) = b.beat_for(shared.least_alive(now), now) else {
        return;
    };
    // the skip instant before the fresh one (a worker loads them the other way round)
    if let failopen::Beat::TookOver { before_realtime_ns } = beat {
        shared
            .skip_before
            .store(before_realtime_ns, Ordering::Relaxed);
    }
    shared
        .fresh_before
        .store(b.fresh_before(), Ordering::Release);
    if beat != failopen::Beat::Fresh {
        *handovers += 1;
        let (out, back) = b.forwarded();
        log::warning(&format!(
            "fail-open: a worker had stalled past the timeout; the kernel forwarded meanwhile ({} frames out, {} in, so far); weir forwards again",
            out.packets, back.packets
        ));
    }
}

/// Stop the workers started so far and pass on `e`.
fn stop_all(
    shared: &Shared,
    threads: Vec<std::thread::JoinHandle<Result<BridgeReport, String>>>,
    e: BridgeError,
) -> BridgeError {
    shared.stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    e
}

/// A worker's packet pool never holds fewer than this many packets.
const MIN_WORKER_POOL: u32 = 16_384;

/// Worker `i` of `n`'s bridge configuration: the template's, its own device and role, its
/// part of the packet pool (it holds the packets of its part of the circuits); no capture,
/// no socket, no bypass, the offloads left to the supervisor.
fn worker_config(
    b: &BridgeConfig,
    device: Device,
    (i, n): (usize, usize),
    role: WorkerRole,
) -> BridgeConfig {
    let mut c = BridgeConfig::new(&b.lan, &b.wan);
    c.device = device;
    c.ring = b.ring;
    c.batch = b.batch;
    c.busy_poll = b.busy_poll;
    c.keep_offloads = true;
    c.pool_packets = (b.pool_packets / n.max(1) as u32).max(MIN_WORKER_POOL);
    c.seed = b.seed.wrapping_add(i as u64);
    c.catch_up = b.catch_up;
    c.icmp_rate = b.icmp_rate;
    c.icmp_burst = b.icmp_burst;
    c.worker = Some(role);
    c
}

fn worker_thread(
    i: usize,
    cfg: BridgeConfig,
    cpu: Option<usize>,
    opened: Sender<Result<(), String>>,
    ended: Sender<Ended>,
    stop: &AtomicBool,
) -> Result<BridgeReport, String> {
    // whatever ends the thread (a panic too) tells the supervisor
    struct Tell(usize, Sender<Ended>, Option<Result<BridgeReport, String>>);
    impl Drop for Tell {
        fn drop(&mut self) {
            let r = self.2.take().unwrap_or_else(|| Err("panicked".into()));
            let _ = self.1.send((self.0, r));
        }
    }
    let mut tell = Tell(i, ended, None);
    if let Some(c) = cpu {
        if let Err(e) = pin(c) {
            log::warning(&format!("worker {i}: cannot run on CPU {c} only: {e}"));
        }
    }
    let mut bridge = match Bridge::open(cfg) {
        Ok(b) => b,
        Err(e) => {
            let e = format!("worker {i}: {e}");
            let _ = opened.send(Err(e.clone()));
            tell.2 = Some(Err(e.clone()));
            return Err(e);
        }
    };
    let _ = opened.send(Ok(()));
    let r = bridge.run(stop).map_err(|e| e.to_string());
    tell.2 = Some(r.clone());
    r
}

/// The CPUs this process may run on.
fn usable_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is empty; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Run the calling thread on `cpu` only.
fn pin(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET adds one CPU.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size passed, for the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// How many workers `--workers auto` means for `p`: one per CPU weir may use for a
/// policy with a subscriber table, one otherwise (and with `[adapt]`, whose controller
/// shapes the whole link).
pub fn auto_workers(p: &weir_core::policy::Policy) -> usize {
    if p.subscribers.is_some() && p.adapt.is_none() {
        usable_cpus().len().max(1)
    } else {
        1
    }
}

#[cfg(test)]
mod tests;
