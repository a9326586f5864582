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
use crate::wake::WakeStats;
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

mod control;
mod driver;
mod emu_set;
mod lane;
mod linklog;
mod publish;
mod report;
mod workers;
use control::{BridgeApply, Control};
use driver::{Driver, Engine};
pub use emu_set::EmuSetFn;
use lane::Lane;
pub use linklog::LinkLogSpec;
pub use publish::PublishCost;
use publish::Publisher;
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
    /// The engine and the lanes.
    drv: Driver,
    busy_poll: bool,
    batch: usize,
    /// `weir reload`, `weir emu set` and SIGHUP.
    control: Control,
    reloads_refused: u64,
    /// The statistics socket and the status document.
    publisher: Publisher,
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
                fresh_before: u64::MAX,
                held: false,
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
        // a worker's comes from its supervisor at its first turn
        let fresh = bypass
            .as_ref()
            .map_or(u64::MAX, failopen::Bypass::fresh_before);
        out.fresh_before = fresh;
        inb.fresh_before = fresh;
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
            drv: Driver {
                eng: Engine {
                    device: cfg.device,
                    pool: Pool::with_whole(cfg.pool_packets, slot, WHOLE_SLOTS, COPY_BUF + 4),
                    rng: Rng::new(cfg.seed),
                    dropped: Vec::with_capacity(256),
                    clock,
                },
                out,
                inb,
            },
            busy_poll: cfg.busy_poll,
            batch: cfg.batch.max(1),
            control: Control::new(control, reload_file),
            reloads_refused: 0,
            publisher: Publisher::new(stats),
            pcap_both,
            wake: WakeStats::new(cfg.catch_up),
            catch_up: cfg.catch_up,
            last_poll: Instant::ZERO,
            bypass,
            fail_open,
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
        let start = self.drv.eng.clock.now();
        let mut next_stats = start;
        while !stop.load(Ordering::Relaxed) {
            // (receive moves it on past a frame that came after it: see lane::receive)
            let mut now = self.drv.eng.clock.now();
            self.heartbeat(now);
            if let Some(w) = &mut self.worker {
                w.turn(now, &mut self.drv.out, &mut self.drv.inb);
            }
            self.watchdog.ping(now);
            self.catch_up(now);
            let work = self
                .drv
                .forward(&mut now, self.batch, self.pcap_both.as_mut());
            self.last_poll = now;
            if let Some(w) = &mut self.worker {
                w.coordinate(&mut self.drv.eng.device, now);
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
                    l.flush(&mut self.drv.eng.device, now, false);
                }
                if self.stop_when_played && self.drv.eng.device.emulation_played(now) {
                    log::notice("the trace has been played once (--once): stopping");
                    break;
                }
                next_stats = self.publisher.cost.next(now);
            }
            let held = self.drv.out.held || self.drv.inb.held;
            if work || (held && self.bypass.is_some()) {
                // (a frame held for the next beat: the beat is due now)
                continue;
            }
            // frames the kernel has not sent yet (a kick stopped early): kick again, soon
            let mut unsent = false;
            for lane in [&mut self.drv.out, &mut self.drv.inb] {
                if lane.tx.outstanding() > 0 {
                    let _ = lane.tx.flush();
                    unsent |= lane.tx.outstanding() > 0;
                }
            }
            let due = self.drv.eng.device.next_wakeup();
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
            let backlog = !self.drv.out.backlog.is_empty() || !self.drv.inb.backlog.is_empty();
            // a worker's frame held for its supervisor's next beat: look again soon
            let wake = if held {
                wake.min(now + Duration::from_micros(500))
            } else if unsent || backlog {
                wake.min(now + Duration::from_micros(50))
            } else {
                wake
            };
            // a sleep that ended at the engine's own instant: how late did it come?
            if self.sleep_until(now, wake)? && due == Some(wake) {
                self.wake.record(wake, self.drv.eng.clock.now());
            }
        }
        let end = self.drv.eng.clock.now();
        for l in &mut self.link_logs {
            l.flush(&mut self.drv.eng.device, end, true);
        }
        // hand the link to the kernel first: it forwards while the queues are purged
        hand_over_at_stop(self.bypass.as_mut(), &self.lan, &self.wan);
        self.shutdown(end);
        self.publish(end, start);
        let device = &self.drv.eng.device;
        Ok(BridgeReport {
            lan: self.lan.clone(),
            wan: self.wan.clone(),
            seconds: (end - start).as_secs_f64(),
            outbound: self.drv.out.stats.clone(),
            inbound: self.drv.inb.stats.clone(),
            policy_generation: device.generation(),
            reloads_refused: self.reloads_refused,
            reloads_throttled: self.control.gate.throttled,
            admission: device.admission_report(),
            adapt: device.adapt(),
            wake: self.wake.clone(),
            fail_open: self.fail_open.clone(),
            captures: self.captures(),
            pipelines: ReportPipelines {
                outbound: device.snapshot(Direction::Outbound, end),
                inbound: device.snapshot(Direction::Inbound, end),
            },
        })
    }

    /// Sleep until a frame arrives, a TX slot frees up, or `wake`. An interface that went
    /// away is an error (its socket reports POLLERR/POLLHUP/POLLNVAL for ever after); one
    /// that is merely down makes the loop back off for 10 ms instead of spinning.
    fn sleep_until(&mut self, now: Instant, wake: Instant) -> Result<bool, BridgeError> {
        // a lane holding a frame for the next beat would wake at once: not polled
        let rx_events = |held: bool| if held { 0 } else { libc::POLLIN };
        let mut fds = [
            pollfd(self.drv.out.rx.fd(), rx_events(self.drv.out.held)),
            pollfd(self.drv.inb.rx.fd(), rx_events(self.drv.inb.held)),
            pollfd(
                self.drv.out.tx.fd(),
                if self.drv.out.backlog.is_empty() {
                    0
                } else {
                    libc::POLLOUT
                },
            ),
            pollfd(
                self.drv.inb.tx.fd(),
                if self.drv.inb.backlog.is_empty() {
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
        let Some(beat) = b.beat(now.0) else { return };
        self.drv.out.fresh_before = b.fresh_before();
        self.drv.inb.fresh_before = b.fresh_before();
        let failopen::Beat::TookOver { before_realtime_ns } = beat else {
            return;
        };
        self.drv.out.skip_before = before_realtime_ns;
        self.drv.inb.skip_before = before_realtime_ns;
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
        let steps = self.drv.catch_up(&mut self.last_poll, now, self.catch_up);
        self.wake.catch_up_steps += steps as u64;
    }

    /// Reload requests: from `weir reload` (answered) and SIGHUP (logged).
    fn poll_control(&mut self, now: Instant) {
        let mut to = BridgeApply {
            drv: &mut self.drv,
            worker: &mut self.worker,
            emu_set: self.emu_set.as_ref(),
            refused: &mut self.reloads_refused,
        };
        self.control.poll(now, &mut to);
    }

    fn shutdown(&mut self, now: Instant) {
        self.drv.shutdown(now);
        for lane in [&mut self.drv.out, &mut self.drv.inb] {
            if let Some(p) = &mut lane.pcap {
                let _ = p.flush();
            }
        }
        if let Some(p) = &mut self.pcap_both {
            let _ = p.flush();
        }
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
