//! The transparent bridge: frames entering one interface pass weir's engine (a
//! [`Device`]: both directions, each a policy pipeline or pass-through) and leave the
//! other (seed 000's in-line bandwidth manager; seed 002's transparent delay node).
//!
//! ```text
//!   lan rx ring ──► Device (outbound) ──► wan tx ring
//!   lan tx ring ◄── Device (inbound)  ◄── wan rx ring
//! ```
//!
//! The bridge drives the device through its public calls only (`ingress`,
//! `poll_transmit`, `next_wakeup`, `snapshot`, `purge`).
//!
//! The loop: read the clock once, take a batch from each RX ring (copying each frame into
//! the packet pool, restoring a VLAN tag the device stripped, filling an L4 checksum a
//! local stack left to offload), hand it to the direction's pipeline, then move everything
//! the pipelines release into the TX rings and kick them. With nothing to do it sleeps in
//! `ppoll` until a frame arrives or the earliest pipeline wake-up, with 1 ns timer slack;
//! `busy_poll` spins instead (precision for a core).
//!
//! Nothing is lost without a name: every frame read is forwarded, or counted in the
//! pipeline's drop causes, or in this lane's counters (`truncated`, `oversize`,
//! `pool_exhausted`, `shutdown_drops`). A full TX ring does not drop: released packets
//! wait in a backlog.
//!
//! A frame longer than the outgoing interface sends ([`weir_wire::pmtu::max_frame_len`],
//! the kernel's own rule: MTU + 14 bytes, + 4 behind an 802.1Q tag) is dropped as it
//! arrives, before the engine (a super-packet whose segments would be too long, as a
//! whole), and counted as `oversize`; the sender is told the MTU with an ICMP
//! Fragmentation Needed (IPv4 with DF) or ICMPv6 Packet Too Big, sent back out of the
//! interface the frame came in by, at most [`BridgeConfig::icmp_rate`] a second
//! ([`weir_wire::pmtu::too_big_reply`]; counters in [`PmtuStats`]). The TX side checks
//! the same rule again before a frame enters a ring (only the engine's own packets could
//! fail it), so the kernel never refuses a frame.

use crate::afpacket::{RingConfig, RingError, RxRing, TxRing, WholeSent};
use crate::clock::{set_timer_slack_1ns, Clock};
use crate::ethtool::OffloadGuard;
use crate::failopen;
use crate::log;
use crate::pcap::PcapWriter;
use crate::stats::{ControlRequest, StatsServer};
use crate::wake::{self, WakeStats};
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use weir_core::device::Device;
use weir_core::meter::token_bucket::TokenBucket;
use weir_core::snapshot::RateMeter;
use weir_core::{Count, Ctx, Direction, DropCause, Duration, Instant, PktId, Pool, Rng, Super};
use weir_wire::fixup;
use weir_wire::gso::{GsoError, Segmenter};
use weir_wire::pmtu::{self, NoReply};
use weir_wire::vnet::{self, VnetHdr};

mod emu_set;
mod lane;
mod linklog;
mod report;
mod workers;
pub use emu_set::EmuSetFn;
use lane::{receive, settle, transmit, Lane};
pub use linklog::LinkLogSpec;
pub use report::*;
pub use workers::{auto_workers, WorkerRole, Workers, WorkersConfig};

/// Extra room in a pool slot for a VLAN tag put back into a frame.
const VLAN_ROOM: usize = 4;

/// Room for the largest frame a peer hands over in one piece: a 64 KB super-packet (IP
/// length field), its Ethernet header with two VLAN tags, and the virtio-net header.
const COPY_BUF: usize = 65_535 + 22 + vnet::LEN;
/// Large packet slots for super-packets kept whole (of [`COPY_BUF`] + a VLAN tag each:
/// 4 MiB), per bridge or worker.
const WHOLE_SLOTS: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The capabilities a bridge needs that this process lacks ([`crate::caps`]).
    #[error("not privileged enough to bridge: {0}")]
    Privileges(String),
    #[error("--lan and --wan are both '{0}'; weir bridges two different interfaces")]
    SameInterface(String),
    #[error("interface '{0}' does not exist")]
    NoSuchInterface(String),
    #[error("interface '{0}' is down; bring it up first (ip link set {0} up)")]
    InterfaceDown(String),
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error("{0}")]
    Other(String),
}

/// Top talkers in the statistics, and the connection-table slots swept for them per
/// publish (once a second): a default table of 65,536 slots is swept every 8 s.
const TOP_TALKERS: usize = 10;
const TALKER_SLOTS_PER_PUBLISH: usize = 8192;

/// Reload requests through the statistics socket taken a second (more are refused).
pub const RELOADS_PER_SECOND: u64 = 10;

/// Default of [`BridgeConfig::icmp_rate`]: ICMP "too big" replies a second, per direction.
pub const DEFAULT_ICMP_RATE: u32 = 10;
/// Default of [`BridgeConfig::icmp_burst`].
pub const DEFAULT_ICMP_BURST: u32 = 10;

/// Default of [`BridgeConfig::catch_up`]: oversleeps up to 20 ms are made up (a
/// descheduled thread on a busy host); longer stalls are not turned into a burst.
pub const DEFAULT_CATCH_UP: Duration = Duration::from_millis(20);

/// What to bridge and how.
pub struct BridgeConfig {
    pub lan: String,
    pub wan: String,
    /// The engine (`Policy::build_device`); default: both directions forwarded untouched.
    pub device: Device,
    pub ring: RingConfig,
    /// Frames read from one ring per loop turn.
    pub batch: usize,
    pub busy_poll: bool,
    /// Capture of what leaves weir: one file for both directions, or one per direction.
    pub pcap: PcapSpec,
    pub stats_socket: Option<PathBuf>,
    /// The group whose members may read the statistics socket and reload, besides root
    /// and weir's own user.
    pub socket_group: Option<u32>,
    /// Keep the interfaces' offloads as they are (default: turn GRO and LRO off).
    pub keep_offloads: bool,
    /// What SIGHUP reads again (`weir run`'s policy file, `weir emu`'s options); `None`:
    /// SIGHUP is not handled.
    pub reload: Option<crate::control::ReloadSource>,
    /// Packets the pool holds (queued in pipelines plus in flight).
    pub pool_packets: u32,
    pub seed: u64,
    /// How far back a late wake-up is made up (see [`crate::wake`]); zero: never.
    pub catch_up: Duration,
    /// ICMP Fragmentation Needed / Packet Too Big replies to frames over the egress MTU,
    /// per second and direction (a token bucket); 0: never reply.
    pub icmp_rate: u32,
    /// Replies the bucket holds (sent at once after a quiet spell).
    pub icmp_burst: u32,
    /// Fail-open: the kernel forwards between the interfaces once weir has not beaten
    /// its heartbeat for this long ([`crate::failopen`]); `None`: fail-closed (an earlier
    /// weir's bypass is removed).
    pub fail_open: Option<Duration>,
    /// One of the workers of `weir run --workers N` ([`Workers`] sets it).
    pub worker: Option<WorkerRole>,
    /// `mm-link` logs of the emulated links (`weir emu --uplink-log/--downlink-log`).
    pub link_logs: Vec<LinkLogSpec>,
    /// Stop once an emulated link has played its trace once (`weir emu --once`).
    pub stop_when_played: bool,
    /// How `weir emu set`'s options change a direction's emulated link (`weir emu`);
    /// `None`: such requests are refused.
    pub emu_set: Option<EmuSetFn>,
}

impl BridgeConfig {
    pub fn new(lan: &str, wan: &str) -> Self {
        BridgeConfig {
            lan: lan.into(),
            wan: wan.into(),
            device: Device::passthrough(),
            ring: RingConfig::default(),
            batch: 64,
            busy_poll: false,
            pcap: PcapSpec::None,
            stats_socket: None,
            socket_group: None,
            keep_offloads: false,
            reload: None,
            pool_packets: 65_536,
            seed: 1,
            catch_up: DEFAULT_CATCH_UP,
            icmp_rate: DEFAULT_ICMP_RATE,
            icmp_burst: DEFAULT_ICMP_BURST,
            fail_open: None,
            worker: None,
            link_logs: Vec::new(),
            stop_when_played: false,
            emu_set: None,
        }
    }
}

/// Where captures go.
pub enum PcapSpec {
    None,
    /// Both directions, interleaved in time order, into one file.
    Both(PcapWriter),
    /// Per direction (either may be absent).
    PerDirection {
        outbound: Option<PcapWriter>,
        inbound: Option<PcapWriter>,
    },
}

pub struct Bridge {
    lan: String,
    wan: String,
    out: Lane,
    inb: Lane,
    device: Device,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    clock: Clock,
    busy_poll: bool,
    batch: usize,
    stats: Option<StatsServer>,
    /// Reload requests from `weir reload` (through the statistics socket).
    control: Option<std::sync::mpsc::Receiver<ControlRequest>>,
    /// The policy file SIGHUP re-reads (on a thread of its own).
    reload_file: Option<crate::control::HupReloads>,
    reloads_refused: u64,
    reload_gate: ReloadGate,
    /// Whether the adaptive controller was at its fallback at the last look (a change is
    /// logged).
    adapt_fallback: bool,
    /// The autorate's reflector swaps at the last look (a change is logged).
    adapt_swaps: u64,
    /// How long publishing the statistics held the loop (snapshot and JSON).
    publish_cost: PublishCost,
    /// Top talkers, swept a bounded number of table slots per publish.
    talkers: weir_core::conn::talkers::Talkers,
    /// When the discovery tree's rates are next updated (every [`DISCOVER_RATE_WINDOW`]:
    /// its rates are per second, the publisher runs every 250 ms).
    discovery_due: Instant,
    /// A capture shared by both directions.
    pcap_both: Option<PcapWriter>,
    /// Timer wake-ups and the catch-up after late ones.
    wake: WakeStats,
    catch_up: Duration,
    /// The last instant the engine was polled at.
    last_poll: Instant,
    /// The kernel bypass while fail-open.
    bypass: Option<failopen::Bypass>,
    fail_open: FailOpenDoc,
    /// Captures whose stop was logged (by path).
    captures_stopped: Vec<String>,
    /// systemd's watchdog, pinged from this loop (`WatchdogSec=` of the unit).
    watchdog: crate::notify::Watchdog,
    /// One of several workers: its part of the coordination ([`Workers`]).
    worker: Option<workers::Worker>,
    link_logs: Vec<linklog::LinkLog>,
    stop_when_played: bool,
    emu_set: Option<EmuSetFn>,
    _offloads: Vec<OffloadGuard>,
}

/// The interfaces' receive merging (GRO, LRO) turned off (unless `keep_offloads`): weir
/// sees frames as they were on the wire. Segmentation offloads (TSO, GSO) stay as they
/// are: a super-packet weir sends whole is cut by the device or the kernel, after weir.
/// The guards restore what they changed.
fn offloads_off(cfg: &BridgeConfig) -> Result<Vec<OffloadGuard>, BridgeError> {
    if cfg.keep_offloads {
        return Ok(Vec::new());
    }
    [&cfg.lan, &cfg.wan]
        .into_iter()
        .map(|i| {
            OffloadGuard::apply(i, &crate::ethtool::Offloads::MERGING_OFF)
                .map_err(|e| BridgeError::Other(e.to_string()))
        })
        .collect()
}

/// Fail-open: the bypass installed in place of any earlier weir's. Fail-closed: an
/// earlier weir's removed (said in the log).
fn bypass_for(cfg: &BridgeConfig) -> Result<Option<failopen::Bypass>, BridgeError> {
    let err = |e: failopen::FailOpenError| BridgeError::Other(e.to_string());
    if let Some(after) = cfg.fail_open {
        return Ok(Some(
            failopen::Bypass::install(&cfg.lan, &cfg.wan, after).map_err(err)?,
        ));
    }
    let had = failopen::remove(&[&cfg.lan, &cfg.wan]).map_err(err)?;
    if !had.is_empty() {
        log::notice(&format!(
            "fail-closed: removed an earlier weir's fail-open bypass from {}",
            had.join(" and ")
        ));
    }
    Ok(None)
}

fn check_iface(name: &str) -> Result<(), BridgeError> {
    if !crate::ethtool::exists(name) {
        return Err(BridgeError::NoSuchInterface(name.into()));
    }
    match crate::ethtool::is_up(name) {
        Ok(true) => Ok(()),
        Ok(false) => Err(BridgeError::InterfaceDown(name.into())),
        Err(e) => Err(BridgeError::Other(e.to_string())),
    }
}

/// The checks `Bridge::open` makes before touching anything: the capabilities (for the
/// fail-open bypass as well if `fail_open`), two different interfaces that exist and are
/// up. Callers run it before creating output files.
pub fn preflight(lan: &str, wan: &str, fail_open: bool) -> Result<(), BridgeError> {
    if let Some(m) = crate::caps::Caps::effective().missing_for_bridge(fail_open) {
        return Err(BridgeError::Privileges(m));
    }
    if lan == wan {
        return Err(BridgeError::SameInterface(lan.into()));
    }
    check_iface(lan)?;
    check_iface(wan)
}

impl Bridge {
    /// Check the environment, turn offloads off, and open the rings.
    pub fn open(mut cfg: BridgeConfig) -> Result<Bridge, BridgeError> {
        let mut role = cfg.worker.take();
        if role.is_none() {
            // (a worker's supervisor has checked)
            preflight(&cfg.lan, &cfg.wan, cfg.fail_open.is_some())?;
        }
        let offloads = offloads_off(&cfg)?;
        let (pcap_both, pcap_out, pcap_in) = match std::mem::replace(&mut cfg.pcap, PcapSpec::None)
        {
            PcapSpec::None => (None, None, None),
            PcapSpec::Both(w) => (Some(w), None, None),
            PcapSpec::PerDirection { outbound, inbound } => (None, outbound, inbound),
        };
        let capturing = pcap_both.is_some() || pcap_out.is_some() || pcap_in.is_some();
        let icmp = match cfg.icmp_rate {
            0 => None,
            // one byte a reply: `icmp_rate` bytes a second, `icmp_burst` bytes deep
            r => Some(TokenBucket::new(
                weir_core::Rate::from_bps(u64::from(r) * 8),
                cfg.icmp_burst.max(1),
                Instant::ZERO,
            )),
        };
        let mtu = |i: &str| crate::ethtool::mtu(i).map_err(|e| BridgeError::Other(e.to_string()));
        // mapping a ring takes tens of ms: the new bypass's heartbeat is kept fresh
        // between them, or a slow start would be taken for a stall (the kernel would
        // forward beside the rings); a real stall meanwhile is a hand-over as in `run`
        let mut took_over = 0;
        let mut keep_alive = |bypass: &mut Option<failopen::Bypass>| {
            if let Some(failopen::Beat::TookOver { before_realtime_ns }) = bypass
                .as_mut()
                .and_then(|b| b.beat(crate::clock::monotonic_ns()))
            {
                took_over = before_realtime_ns;
            }
        };
        let role_ref = role.as_ref();
        let mut lane = |dir,
                        rx: &str,
                        tx: &str,
                        pcap: Option<PcapWriter>,
                        bypass: &mut _|
         -> Result<Lane, BridgeError> {
            let lan_side = dir == Direction::Outbound;
            let join = role_ref.map(|r| move |fd| r.join(lan_side, fd));
            let rx_ring = RxRing::open_joined(
                rx,
                cfg.ring,
                join.as_ref()
                    .map(|j| j as &dyn Fn(RawFd) -> Result<(), String>),
            )?;
            keep_alive(bypass);
            let tx_ring = TxRing::open(tx, cfg.ring)?;
            keep_alive(bypass);
            Ok(Lane {
                // a capture (either lane's or one of both) is of wire frames: it sees
                // super-packets cut
                whole: !capturing,
                dir,
                mtu: mtu(tx)?,
                reply_mtu: mtu(rx)?,
                icmp,
                replies: Vec::with_capacity(64),
                seg_buf: vec![0; COPY_BUF],
                rx: rx_ring,
                tx: tx_ring,
                backlog: VecDeque::new(),
                // as long as a large packet slot: swapped into one when kept whole
                copy_buf: vec![0; COPY_BUF + 4],
                gso_buf: Vec::with_capacity(COPY_BUF + 4),
                pcap,
                stats: LaneStats::default(),
                skip_before: 0,
                meter: RateMeter::default(),
            })
        };
        // the bypass before the rings: no frame a ring holds was forwarded by an earlier
        // weir's bypass (see crate::failopen)
        // a worker's bypass is its supervisor's
        let mut bypass = match role {
            Some(_) => None,
            None => bypass_for(&cfg)?,
        };
        let mut out = lane(
            Direction::Outbound,
            &cfg.lan,
            &cfg.wan,
            pcap_out,
            &mut bypass,
        )?;
        let mut inb = lane(Direction::Inbound, &cfg.wan, &cfg.lan, pcap_in, &mut bypass)?;
        out.skip_before = took_over;
        inb.skip_before = took_over;
        if took_over != 0 {
            log::warning(&format!(
                "fail-open: opening the rings took past {} ms; the kernel forwarded meanwhile",
                cfg.fail_open.map_or(0, |d| d.as_nanos() / 1_000_000)
            ));
        }
        let fail_open = FailOpenDoc {
            enabled: bypass.is_some(),
            timeout_ms: cfg.fail_open.map_or(0.0, |d| d.as_secs_f64() * 1e3),
            handovers: u64::from(took_over != 0),
        };
        // the socket last: once it exists, the rings are bound and no frame is missed
        let mut stats = match &cfg.stats_socket {
            Some(p) => Some(
                StatsServer::start(p, cfg.socket_group)
                    .map_err(|e| BridgeError::Other(e.to_string()))?,
            ),
            None => None,
        };
        let control = match &mut role {
            Some(r) => Some(r.take_control()),
            None => stats.as_mut().and_then(StatsServer::take_control),
        };
        let reload_file = cfg
            .reload
            .take()
            .map(|f| crate::control::HupReloads::new(f, crate::signals::install_hup(), 1));
        let slot = cfg.ring.frame_size as usize + VLAN_ROOM;
        let worker = role.map(|r| r.into_worker(&mut cfg.device));
        let clock = Clock::new();
        let start = clock.now();
        let link_logs = std::mem::take(&mut cfg.link_logs)
            .into_iter()
            .map(|spec| linklog::LinkLog::open(spec, &mut cfg.device, &clock, start))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Bridge {
            lan: cfg.lan,
            wan: cfg.wan,
            out,
            inb,
            device: cfg.device,
            pool: Pool::with_whole(cfg.pool_packets, slot, WHOLE_SLOTS, COPY_BUF + 4),
            rng: Rng::new(cfg.seed),
            dropped: Vec::with_capacity(256),
            clock,
            busy_poll: cfg.busy_poll,
            batch: cfg.batch.max(1),
            stats,
            control,
            reload_file,
            reloads_refused: 0,
            reload_gate: ReloadGate::new(),
            adapt_fallback: false,
            adapt_swaps: 0,
            publish_cost: PublishCost::default(),
            talkers: weir_core::conn::talkers::Talkers::new(TOP_TALKERS),
            discovery_due: Instant::ZERO,
            pcap_both,
            wake: WakeStats::new(cfg.catch_up),
            catch_up: cfg.catch_up,
            last_poll: Instant::ZERO,
            bypass,
            fail_open,
            captures_stopped: Vec::new(),
            watchdog: match worker {
                Some(_) => crate::notify::Watchdog::off(),
                None => crate::notify::Watchdog::from_env(),
            },
            worker,
            link_logs,
            stop_when_played: cfg.stop_when_played,
            emu_set: cfg.emu_set.take(),
            _offloads: offloads,
        })
    }

    /// Bridge until `stop` is set; then discard what is queued (counted) and report.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<BridgeReport, BridgeError> {
        let _ = set_timer_slack_1ns();
        let start = self.clock.now();
        let mut next_stats = start;
        while !stop.load(Ordering::Relaxed) {
            // (receive moves it on past a frame that came after it: see lane::receive)
            let mut now = self.clock.now();
            self.heartbeat(now);
            if let Some(w) = &mut self.worker {
                w.turn(now, &mut self.out, &mut self.inb);
            }
            self.watchdog.ping(now);
            self.catch_up(now);
            let mut work = false;
            for lane in [&mut self.out, &mut self.inb] {
                work |= receive(
                    lane,
                    &mut self.device,
                    &mut self.pool,
                    &mut self.rng,
                    &mut self.dropped,
                    &mut now,
                    &self.clock,
                    self.batch,
                );
                let cap = match &mut self.pcap_both {
                    Some(w) => Some(w),
                    None => lane.pcap.as_mut(),
                };
                let ts = self.clock.to_unix_ns(now);
                transmit(
                    &mut self.device,
                    lane.dir,
                    lane.mtu,
                    &mut lane.backlog,
                    &mut lane.tx,
                    &mut lane.stats,
                    cap,
                    &mut self.pool,
                    &mut self.rng,
                    &mut self.dropped,
                    now,
                    ts,
                );
            }
            // ICMP replies leave by the interface the frame came in by: next turn
            self.inb.backlog.extend(self.out.replies.drain(..));
            self.out.backlog.extend(self.inb.replies.drain(..));
            self.last_poll = now;
            if let Some(w) = &mut self.worker {
                w.coordinate(&mut self.device, now);
            }
            self.poll_control(now);
            if now >= next_stats {
                // a deleted interface leaves its sockets silent after one error report:
                // look for it on every tick, not only when a poll reports trouble
                for iface in [&self.lan, &self.wan] {
                    if !crate::ethtool::exists(iface) {
                        return Err(BridgeError::Other(format!(
                            "interface '{iface}' went away; stopping"
                        )));
                    }
                }
                self.publish(now, start);
                for l in &mut self.link_logs {
                    l.flush(&mut self.device, now, false);
                }
                if self.stop_when_played && self.device.emulation_played(now) {
                    log::notice("the trace has been played once (--once): stopping");
                    break;
                }
                // every 250 ms, or less often where a snapshot is costly (thousands of
                // classes): publishing holds forwarding at most 1 % of the time
                let cost_ns = (self.publish_cost.last_ms * 1e6) as u64;
                next_stats =
                    now + Duration::from_millis(250).max(Duration::from_nanos(cost_ns * 100));
            }
            if work {
                continue;
            }
            // frames the kernel has not sent yet (a kick stopped early): kick again, soon
            let mut unsent = false;
            for lane in [&mut self.out, &mut self.inb] {
                if lane.tx.outstanding() > 0 {
                    let _ = lane.tx.flush();
                    unsent |= lane.tx.outstanding() > 0;
                }
            }
            let due = self.device.next_wakeup();
            let mut wake = due.unwrap_or(next_stats).min(next_stats);
            if let Some(b) = &self.bypass {
                wake = wake.min(now + b.interval());
            }
            if let Some(t) = self.worker.as_ref().and_then(|w| w.wake_by(now)) {
                wake = wake.min(t);
            }
            if self.busy_poll {
                std::hint::spin_loop();
                continue;
            }
            // unsent frames or a backlog: the TX ring's POLLOUT only reports a free head
            // slot, so wake soon to kick again rather than wait for it
            let backlog = !self.out.backlog.is_empty() || !self.inb.backlog.is_empty();
            let wake = if unsent || backlog {
                wake.min(now + Duration::from_micros(50))
            } else {
                wake
            };
            // a sleep that ended at the engine's own instant: how late did it come?
            if self.sleep_until(now, wake)? && due == Some(wake) {
                self.wake.record(wake, self.clock.now());
            }
        }
        let end = self.clock.now();
        for l in &mut self.link_logs {
            l.flush(&mut self.device, end, true);
        }
        // hand the link to the kernel first: it forwards while the queues are purged
        hand_over_at_stop(self.bypass.as_mut(), &self.lan, &self.wan);
        self.shutdown(end);
        self.publish(end, start);
        Ok(BridgeReport {
            lan: self.lan.clone(),
            wan: self.wan.clone(),
            seconds: (end - start).as_secs_f64(),
            outbound: self.out.stats.clone(),
            inbound: self.inb.stats.clone(),
            policy_generation: self.device.generation(),
            reloads_refused: self.reloads_refused,
            reloads_throttled: self.reload_gate.throttled,
            admission: self.device.admission_report(),
            adapt: self.device.adapt(),
            wake: self.wake.clone(),
            fail_open: self.fail_open.clone(),
            captures: self.captures(),
            pipelines: ReportPipelines {
                outbound: self.device.snapshot(Direction::Outbound, end),
                inbound: self.device.snapshot(Direction::Inbound, end),
            },
        })
    }

    /// Sleep until a frame arrives, a TX slot frees up, or `wake`. An interface that went
    /// away is an error (its socket reports POLLERR/POLLHUP/POLLNVAL for ever after); one
    /// that is merely down makes the loop back off for 10 ms instead of spinning.
    fn sleep_until(&mut self, now: Instant, wake: Instant) -> Result<bool, BridgeError> {
        let mut fds = [
            pollfd(self.out.rx.fd(), libc::POLLIN),
            pollfd(self.inb.rx.fd(), libc::POLLIN),
            pollfd(
                self.out.tx.fd(),
                if self.out.backlog.is_empty() {
                    0
                } else {
                    libc::POLLOUT
                },
            ),
            pollfd(
                self.inb.tx.fd(),
                if self.inb.backlog.is_empty() {
                    0
                } else {
                    libc::POLLOUT
                },
            ),
        ];
        let ns = wake.saturating_since(now).as_nanos();
        let ts = libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: ppoll over a live array of pollfds with a valid timeout.
        let n = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if n <= 0 {
            return Ok(n == 0); // timeout (true) or a signal
        }
        const BAD: libc::c_short = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
        let mut trouble = false;
        for (fd, iface) in [(&fds[0], &self.lan), (&fds[1], &self.wan)] {
            if fd.revents & BAD != 0 {
                trouble = true;
                clear_socket_error(fd.fd);
                if !crate::ethtool::exists(iface) {
                    return Err(BridgeError::Other(format!(
                        "interface '{iface}' went away; stopping"
                    )));
                }
            }
        }
        if trouble {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(false)
    }

    /// Beat the fail-open heartbeat if due; after a stall past its timeout, take over
    /// from the kernel: skip the frames it may have forwarded.
    fn heartbeat(&mut self, now: Instant) {
        let Some(b) = &mut self.bypass else { return };
        let Some(failopen::Beat::TookOver { before_realtime_ns }) = b.beat(now.0) else {
            return;
        };
        self.out.skip_before = before_realtime_ns;
        self.inb.skip_before = before_realtime_ns;
        self.fail_open.handovers += 1;
        let (out, back) = b.forwarded();
        log::warning(&format!(
            "fail-open: the loop had stalled past {} ms; the kernel forwarded meanwhile ({} frames {} -> {} and {} {} -> {} so far); weir forwards again",
            self.fail_open.timeout_ms, out.packets, self.lan, self.wan, back.packets, self.wan, self.lan
        ));
    }

    /// Replay the engine's departures scheduled between the last poll and `now` (a late
    /// wake-up), at their own instants; see [`crate::wake`].
    fn catch_up(&mut self, now: Instant) {
        if self.catch_up == Duration::ZERO {
            return;
        }
        let Bridge {
            device,
            out,
            inb,
            pool,
            rng,
            dropped,
            last_poll,
            ..
        } = self;
        // what each step releases joins the lane's backlog, which `transmit` sends first:
        // one ring kick for the whole replay, not one per step
        let steps = wake::replay(
            device,
            |d| d.next_wakeup(),
            |device, at| {
                for lane in [&mut *out, &mut *inb] {
                    let mut cx = Ctx::new(at, pool, rng, dropped);
                    while let Some(id) = device.poll_transmit(lane.dir, &mut cx) {
                        lane.backlog.push_back(id);
                    }
                    settle(&mut lane.stats, pool, dropped);
                }
            },
            last_poll,
            now,
            self.catch_up,
        );
        self.wake.catch_up_steps += steps as u64;
    }

    /// Reload requests: from `weir reload` (answered) and SIGHUP (logged).
    fn poll_control(&mut self, now: Instant) {
        if let Some(rx) = &self.control {
            if let Ok(mut req) = rx.try_recv() {
                if let Some(args) = req.emu_set.take() {
                    let answer = match self.reload_gate.admit(now) {
                        Ok(()) => emu_set::apply(&mut self.device, self.emu_set.as_ref(), &args),
                        Err(refusal) => refusal,
                    };
                    emu_set::log_answer(&args, &answer);
                    req.respond(answer.to_string());
                    return;
                }
                // (a worker's reloads come from its supervisor, which limits them)
                let admitted = match self.worker {
                    Some(_) => Ok(()),
                    None => self.reload_gate.admit(now),
                };
                let answer = match admitted {
                    Ok(()) => {
                        let prepared = std::mem::replace(&mut req.prepared, Err(String::new()));
                        let a = self.reload(&req.name, prepared, now);
                        if self.worker.is_none() {
                            // (a worker's supervisor logs the merged answer)
                            log_reload("weir reload", &req.name, &a);
                        }
                        a
                    }
                    Err(refusal) => refusal,
                };
                req.respond(answer.to_string());
            }
        }
        let Some(h) = &mut self.reload_file else {
            return;
        };
        let Some(prepared) = h.poll() else {
            return;
        };
        let name = h.name().to_string();
        let answer = self.reload(&name, prepared, now);
        log_reload("SIGHUP", &name, &answer);
    }

    /// Put a prepared policy ([`crate::control`]) in place of the running one, keeping
    /// every packet held (`Device::replace_policy`). The answer is a JSON document.
    fn reload(
        &mut self,
        name: &str,
        prepared: crate::control::Prepared,
        now: Instant,
    ) -> serde_json::Value {
        let refused = |me: &mut Bridge, errors: String| {
            me.reloads_refused += 1;
            serde_json::json!({ "ok": false, "errors": errors })
        };
        let (cfg, shared) = match prepared {
            Ok(r) => match r.configs.into_iter().next() {
                Some(c) => (c, r.shared),
                None => return refused(self, format!("{name}: no configuration")),
            },
            Err(e) => return refused(self, e),
        };
        let started = self.clock.now();
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        let report = match self.device.replace_policy(cfg, &mut cx) {
            Ok(r) => r,
            Err(e) => return refused(self, format!("{name}: {e}")),
        };
        for (id, _) in self.dropped.drain(..) {
            let lane = match self.pool.meta(id).dir {
                Direction::Outbound => &mut self.out,
                Direction::Inbound => &mut self.inb,
            };
            lane.stats.reload_drops.add(self.pool.len(id));
            self.pool.free(id);
        }
        // the new stages count from zero: rates start afresh
        self.out.meter = RateMeter::default();
        self.inb.meter = RateMeter::default();
        let mut report = serde_json::to_value(&report).unwrap_or_default();
        if let Some(w) = &mut self.worker {
            let before = w.wholes();
            w.rebuild(&mut self.device, Some(shared));
            w.unchanged_shared(&before, &mut report);
        }
        // how long forwarding waited for the swap (the policy was prepared elsewhere)
        let applied_ms = (self.clock.now() - started).as_nanos() as f64 / 1e6;
        let summary = reload_summary(&report, applied_ms);
        serde_json::json!({ "ok": true, "report": report, "summary": summary, "applied_ms": applied_ms })
    }

    fn publish(&mut self, now: Instant, start: Instant) {
        let adapt = self.device.adapt();
        if let Some(a) = &adapt {
            if a.counters.reflector_swaps != self.adapt_swaps {
                self.adapt_swaps = a.counters.reflector_swaps;
                let active: Vec<&str> = a
                    .reflectors
                    .iter()
                    .filter(|r| r.active)
                    .map(|r| r.address.as_str())
                    .collect();
                log::notice(&format!(
                    "adapt: a reflector missed its replies or strayed from the others and was replaced ({} swaps); probing {}",
                    self.adapt_swaps,
                    active.join(", ")
                ));
            }
            if a.fallback != self.adapt_fallback {
                self.adapt_fallback = a.fallback;
                if a.fallback {
                    log::warning(&format!(
                        "adapt: no reply from {} for the timeout: the link falls back to its floor, {} bit/s",
                        a.target, a.rate_bps
                    ));
                } else {
                    log::notice(&format!(
                        "adapt: replies from {} again: the controller resumes",
                        a.target
                    ));
                }
            }
        }
        // the ICMP replies to one lane's oversize frames leave by the other
        let replies = [self.inb.stats.pmtu.sent(), self.out.stats.pmtu.sent()];
        for (lane, replies) in [&mut self.out, &mut self.inb].into_iter().zip(replies) {
            lane.stats.kernel_rx_drops += lane.rx.kernel_drops();
            lane.stats.duplicated = self.device.duplicated(lane.dir);
            lane.stats.non_ip_bypassed = self.device.bypassed(lane.dir);
            lane.stats.originated = self.device.originated(lane.dir) + replies;
            lane.stats.consumed = self.device.consumed(lane.dir);
            lane.stats.mss = self.device.mss_stats(lane.dir);
            lane.stats.tcr = self.device.tcr_stats(lane.dir);
            lane.stats.tx_rejected = lane.tx.rejected;
            if let Some(b) = &self.bypass {
                let (out, back) = b.forwarded();
                let f = match lane.dir {
                    Direction::Outbound => out,
                    Direction::Inbound => back,
                };
                lane.stats.kernel_forwarded = Count {
                    packets: f.packets,
                    bytes: f.bytes,
                };
            }
            if let Some(p) = &mut lane.pcap {
                let _ = p.flush();
            }
        }
        if let Some(p) = &mut self.pcap_both {
            let _ = p.flush();
        }
        let captures = self.captures();
        for c in &captures {
            if let Some(why) = &c.stopped {
                if !self.captures_stopped.contains(&c.path) {
                    self.captures_stopped.push(c.path.clone());
                    log::warning(&format!(
                        "capture {} stopped ({why}) after {} frames; forwarding goes on, later frames are not captured",
                        c.path, c.stats.written
                    ));
                }
            }
        }
        if self.stats.is_none() && self.worker.is_none() {
            return;
        }
        if now >= self.discovery_due {
            self.device.discovery_tick(now);
            self.discovery_due = now + DISCOVER_RATE_WINDOW;
        }
        if let Some(t) = self.device.connections() {
            self.talkers.sweep(t, TALKER_SLOTS_PER_PUBLISH, now);
        }
        let device = &self.device;
        let snap = |lane: &mut Lane| {
            device.snapshot(lane.dir, now).map(|mut s| {
                lane.meter.update(&mut s);
                s
            })
        };
        let mut out_snap = snap(&mut self.out);
        let mut in_snap = snap(&mut self.inb);
        if let Some(w) = &self.worker {
            // a shared class's copy runs at its part: the document says the whole
            w.whole_rates(0, out_snap.as_mut());
            w.whole_rates(1, in_snap.as_mut());
        }
        let doc = StatusDoc {
            lan: self.lan.clone(),
            wan: self.wan.clone(),
            uptime_s: (now - start).as_secs_f64(),
            policy: PolicyDoc {
                source: self.device.source().to_string(),
                generation: self.device.generation(),
                reloads: self.device.generation() - 1,
                reloads_refused: self.reloads_refused,
                reloads_throttled: self.reload_gate.throttled,
            },
            connections: self.device.connection_stats(),
            top_talkers: self.talkers.top().to_vec(),
            apps: self.device.app_stats(),
            discovery: self.device.discovery(DISCOVER_APPS, DISCOVER_SERVERS),
            admission: self.device.admission_report(),
            adapt,
            wake: self.wake.clone(),
            publish: self.publish_cost,
            fail_open: self.fail_open.clone(),
            captures,
            stats_clients_given_up: self.stats.as_ref().map_or(0, StatsServer::clients_given_up),
            outbound: LaneDoc {
                lane: self.out.stats.clone(),
                pipeline: out_snap,
            },
            inbound: LaneDoc {
                lane: self.inb.stats.clone(),
                pipeline: in_snap,
            },
        };
        match (&self.worker, &self.stats) {
            // the supervisor merges the workers' documents
            (Some(w), _) => w.post(doc),
            // the JSON (milliseconds for thousands of classes) is written by the client
            (None, Some(server)) => server.publish_lazy(std::sync::Arc::new(move || {
                serde_json::to_string(&doc).unwrap_or_default()
            })),
            (None, None) => {}
        }
        let ms = (self.clock.now() - now).as_nanos() as f64 / 1e6;
        self.publish_cost.record(ms);
    }

    /// Every capture file's state.
    fn captures(&self) -> Vec<crate::pcap::CaptureStatus> {
        [&self.pcap_both, &self.out.pcap, &self.inb.pcap]
            .into_iter()
            .flatten()
            .map(PcapWriter::status)
            .collect()
    }

    fn shutdown(&mut self, now: Instant) {
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        self.device.purge(&mut cx, DropCause::Shutdown);
        for lane in [&mut self.out, &mut self.inb] {
            while let Some(id) = lane.backlog.pop_front() {
                cx.drop_later(id, DropCause::Shutdown);
            }
            for id in lane.replies.drain(..) {
                cx.drop_later(id, DropCause::Shutdown);
            }
        }
        for (id, _) in self.dropped.drain(..) {
            let lane = match self.pool.meta(id).dir {
                Direction::Outbound => &mut self.out,
                Direction::Inbound => &mut self.inb,
            };
            lane.stats.shutdown_drops.add(self.pool.len(id));
            self.pool.free(id);
        }
        for lane in [&mut self.out, &mut self.inb] {
            if let Some(p) = &mut lane.pcap {
                let _ = p.flush();
            }
        }
        if let Some(p) = &mut self.pcap_both {
            let _ = p.flush();
        }
    }
}

/// `weir reload` requests through the statistics socket: at most [`RELOADS_PER_SECOND`]
/// (a token bucket, one byte a request); more are refused unread and counted, so that a
/// flood of them never stalls forwarding, and the refusals logged a line a second at most.
struct ReloadGate {
    bucket: TokenBucket,
    throttled: u64,
    /// When a refusal was last logged.
    logged: Instant,
}

impl ReloadGate {
    fn new() -> ReloadGate {
        ReloadGate {
            // RELOADS_PER_SECOND bytes a second, as many deep
            bucket: TokenBucket::new(
                weir_core::Rate::from_bps(RELOADS_PER_SECOND * 8),
                RELOADS_PER_SECOND as u32,
                Instant::ZERO,
            ),
            throttled: 0,
            logged: Instant::ZERO,
        }
    }

    /// Take a request at `now`, or the answer that refuses it.
    fn admit(&mut self, now: Instant) -> Result<(), serde_json::Value> {
        if self.bucket.try_consume(1, now) {
            return Ok(());
        }
        self.throttled += 1;
        if now >= self.logged + Duration::from_secs(1) {
            self.logged = now;
            log::warning(&format!(
                "weir reload: more than {RELOADS_PER_SECOND} requests a second; refused {} so far",
                self.throttled
            ));
        }
        Err(serde_json::json!({ "ok": false, "errors": format!(
            "too many reload requests: at most {RELOADS_PER_SECOND} a second; try again"
        ) }))
    }
}

/// At a clean stop: the kernel forwards from now on (fail-open), said in the log.
fn hand_over_at_stop(bypass: Option<&mut failopen::Bypass>, lan: &str, wan: &str) {
    if let Some(b) = bypass {
        b.hand_to_kernel();
        log::notice(&format!(
            "stopping: fail-open: the kernel forwards between {lan} and {wan} (unshaped) until weir runs again"
        ));
    }
}

/// One line for a reload's report (`Device::replace_policy`'s, as JSON; the workers'
/// merged): per direction what became of the held packets and of the classes.
fn reload_summary(report: &serde_json::Value, applied_ms: f64) -> String {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let len = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
    let summary = ["outbound", "inbound"]
        .iter()
        .map(|d| {
            let r = &report[*d];
            let mut line = format!(
                "{d}: {} kept, {} reclassified, {} re-emulated, {} dropped",
                n(&r["kept"]),
                n(&r["reclassified"]),
                n(&r["re_emulated"]),
                n(&r["dropped"])
            );
            let (a, x, c) = (
                len(&r["classes_added"]),
                len(&r["classes_removed"]),
                len(&r["classes_changed"]),
            );
            if a + x + c > 0 {
                line += &format!("; classes {a} added, {x} removed, {c} changed");
            }
            line
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!("{summary}; applied in {applied_ms:.1} ms")
}

/// Log a reload's outcome (`answer` as [`Bridge::reload`] makes it); `how`: "SIGHUP" or
/// "weir reload".
fn log_reload(how: &str, name: &str, answer: &serde_json::Value) {
    match answer["ok"].as_bool() {
        Some(true) => log::info(&format!(
            "{how}: reloaded {name} (generation {}): {}",
            answer["report"]["generation"],
            answer["summary"].as_str().unwrap_or("")
        )),
        _ => log::warning(&format!(
            "{how}: the new policy was refused; the running one stays:\n{}",
            answer["errors"].as_str().unwrap_or("?")
        )),
    }
}

/// Read (and so clear) a socket's pending error.
fn clear_socket_error(fd: RawFd) {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR into a c_int of the right size.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        );
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: if events == 0 { -1 } else { fd },
        events,
        revents: 0,
    }
}
