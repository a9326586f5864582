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

use crate::afpacket::{RingConfig, RingError, RxRing, TxRing};
use crate::clock::{set_timer_slack_1ns, Clock};
use crate::ethtool::OffloadGuard;
use crate::pcap::PcapWriter;
use crate::stats::{ControlRequest, StatsServer};
use crate::wake::{self, WakeStats};
use serde::Serialize;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use weir_core::device::Device;
use weir_core::meter::token_bucket::TokenBucket;
use weir_core::snapshot::{PipelineSnapshot, RateMeter};
use weir_core::{Count, Ctx, Direction, DropCause, Duration, Instant, PktId, Pool, Rng};
use weir_wire::fixup;
use weir_wire::gso::{GsoError, Segmenter};
use weir_wire::pmtu::{self, NoReply};
use weir_wire::vnet::{self, VnetHdr};

/// Extra room in a pool slot for a VLAN tag put back into a frame.
const VLAN_ROOM: usize = 4;

/// Room for the largest frame a peer hands over in one piece: a 64 KB super-packet (IP
/// length field), its Ethernet header with two VLAN tags, and the virtio-net header.
const COPY_BUF: usize = 65_535 + 22 + vnet::LEN;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("weir run needs root: it opens packet sockets and changes interface offloads; run it as root")]
    NotRoot,
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
    /// Keep the interfaces' offloads as they are (default: turn GRO/GSO/TSO/LRO off).
    pub keep_offloads: bool,
    /// The policy file SIGHUP re-reads (`weir run`); `None`: SIGHUP is not handled.
    pub reload_file: Option<PathBuf>,
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
            keep_offloads: false,
            reload_file: None,
            pool_packets: 65_536,
            seed: 1,
            catch_up: DEFAULT_CATCH_UP,
            icmp_rate: DEFAULT_ICMP_RATE,
            icmp_burst: DEFAULT_ICMP_BURST,
        }
    }
}

/// Counters of one direction.
///
/// `rx` counts wire-size frames: a super-packet counts as the segments weir cut it into
/// (or as one frame if it was refused before). Every frame counted in `rx` is sent, or
/// dropped under a named cause, or still queued:
/// `rx + duplicated + originated = tx + truncated + oversize + pool_exhausted + dropped
///  + offload_errors + reload_drops + shutdown_drops + consumed + queued`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LaneStats {
    pub rx: Count,
    pub tx: Count,
    /// Frames weir could not hold whole; dropped: longer than a ring slot while the
    /// socket's copy queue was full, or longer than a packet slot (jumbo frames within the
    /// MTU).
    pub truncated: Count,
    /// Frames longer than the outgoing interface's MTU allows (its IP packet longer than
    /// the MTU); dropped before the engine. A super-packet whose segments would be too
    /// long counts once, whole.
    pub oversize: Count,
    /// What the senders of `oversize` frames were told (ICMP replies, rate-limited).
    pub pmtu: PmtuStats,
    /// Frames dropped because the packet pool was exhausted.
    pub pool_exhausted: Count,
    /// Frames the pipeline refused or dropped (causes are in the pipeline's counters).
    pub dropped: Count,
    /// Super-packets (TSO/GSO from a peer) cut into wire-size segments.
    pub gso: GsoStats,
    /// Frames longer than a ring slot read whole from the socket's copy queue.
    pub copied: u64,
    /// Frames whose virtio-net header weir could not honour; dropped, by cause.
    pub offload_errors: OffloadErrors,
    /// Frames whose L4 checksum weir filled (offloaded by a local sender).
    pub csum_filled: u64,
    /// Frames whose stripped VLAN tag weir put back.
    pub vlan_restored: u64,
    /// Times a released packet had to wait for a TX ring slot.
    pub tx_ring_full: u64,
    /// Frames the kernel rejected on transmit.
    pub tx_rejected: u64,
    /// Frames the kernel dropped because the RX ring was full.
    pub kernel_rx_drops: u64,
    /// Packets still queued at shutdown, discarded.
    pub shutdown_drops: Count,
    /// Copies the link emulator made and admitted (`duplicate`): they leave on top of
    /// what was received, so `rx + duplicated = tx + every drop + queued`.
    pub duplicated: Count,
    /// Packets held across a policy reload that the new policy's limits had no room for.
    pub reload_drops: Count,
    /// Packets weir itself sent this way (admission control's RSTs, the adaptive
    /// controller's probes and ARP, and the ICMP replies to the other direction's
    /// `oversize` frames, `pmtu`): they leave on top of what was received, so
    /// `rx + duplicated + originated = tx + every drop + consumed + queued`.
    pub originated: Count,
    /// Frames received this way that the engine consumed: the adaptive controller's probe
    /// replies and ARP (`[adapt]`).
    pub consumed: Count,
    /// MSS clamping of the SYNs and SYN-ACKs travelling this way (policy `mss` keys).
    pub mss: weir_core::tcp::mss::MssStats,
    /// TCP rate control of the ACKs travelling this way (policy `tcr`); `None` without.
    pub tcr: Option<weir_core::tcp::tcr::TcrStats>,
    /// Frames that are not IP (ARP, …) forwarded around this direction's shaper (counted
    /// in `tx` as usual).
    pub non_ip_bypassed: Count,
}

/// The answers to frames too long for the outgoing interface (`oversize`): each such
/// frame is dropped, and counted once here, in one of the fields. The replies leave the
/// other way (and count there in `originated` and `tx`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PmtuStats {
    /// ICMP Fragmentation Needed (type 3 code 4, RFC 1191) sent to IPv4 senders (DF set).
    pub frag_needed: Count,
    /// ICMPv6 Packet Too Big (type 2, RFC 4443 / RFC 8201) sent.
    pub packet_too_big: Count,
    /// Replies the rate limit ([`BridgeConfig::icmp_rate`]) held back.
    pub rate_limited: u64,
    /// IPv4 packets without DF: dropped without a reply (weir does not fragment).
    pub df_clear: u64,
    /// Frames no reply is due for (not IP, an ICMP error, a non-initial fragment, a
    /// source or destination that is not one host, malformed, no room on the way back;
    /// see [`weir_wire::pmtu::NoReply`]), or that found the packet pool empty.
    pub not_answered: u64,
}

impl PmtuStats {
    /// The replies sent (both kinds).
    pub fn sent(&self) -> Count {
        self.frag_needed + self.packet_too_big
    }
}

/// Super-packets and the segments they made.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GsoStats {
    pub super_packets: u64,
    pub segments: u64,
}

/// Frames dropped because their virtio-net header lies or asks for what weir does not do
/// (see [`weir_wire::gso::GsoError`]); each frame counted once, as received.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OffloadErrors {
    pub gso_size_zero: Count,
    pub csum_offsets_outside: Count,
    pub gso_type_unsupported: Count,
    pub gso_type_mismatch: Count,
    pub too_many_segments: Count,
    pub bad_headers: Count,
}

impl OffloadErrors {
    fn add(&mut self, e: &GsoError, len: u32) {
        match e {
            GsoError::ZeroSize => &mut self.gso_size_zero,
            GsoError::ChecksumOffsets => &mut self.csum_offsets_outside,
            GsoError::UnsupportedType(_) => &mut self.gso_type_unsupported,
            GsoError::Mismatch => &mut self.gso_type_mismatch,
            GsoError::TooManySegments => &mut self.too_many_segments,
            GsoError::Headers(_) => &mut self.bad_headers,
        }
        .add(len)
    }

    /// All causes together.
    pub fn total(&self) -> Count {
        self.gso_size_zero
            + self.csum_offsets_outside
            + self.gso_type_unsupported
            + self.gso_type_mismatch
            + self.too_many_segments
            + self.bad_headers
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

struct Lane {
    dir: Direction,
    /// The outgoing interface's MTU.
    mtu: u32,
    /// The incoming interface's MTU (what ICMP replies leave by).
    reply_mtu: u32,
    /// Rate limit of the ICMP replies to this lane's `oversize` frames (one token each).
    icmp: Option<TokenBucket>,
    /// ICMP replies to frames received this way, waiting to leave the other way (moved to
    /// the other lane's backlog after each receive).
    replies: Vec<PktId>,
    /// The first segment of a super-packet too long for the outgoing interface (quoted in
    /// the ICMP reply), [`COPY_BUF`] bytes.
    seg_buf: Vec<u8>,
    rx: RxRing,
    tx: TxRing,
    /// Released packets waiting for TX ring room, in order.
    backlog: VecDeque<PktId>,
    /// A frame longer than a ring slot, read whole from the socket ([`COPY_BUF`] bytes).
    copy_buf: Vec<u8>,
    /// A super-packet with its VLAN tag put back, before it is cut.
    gso_buf: Vec<u8>,
    /// This direction's own capture file.
    pcap: Option<PcapWriter>,
    stats: LaneStats,
    meter: RateMeter,
}

/// The final report of a run.
#[derive(Clone, Debug, Serialize)]
pub struct BridgeReport {
    pub lan: String,
    pub wan: String,
    pub seconds: f64,
    pub outbound: LaneStats,
    pub inbound: LaneStats,
    /// The policy generation at the end (1 + successful reloads).
    pub policy_generation: u64,
    /// Reloads refused (the running policy stayed).
    pub reloads_refused: u64,
    /// Admission control of the classes that have it (`max_sessions`), at the end.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub admission: Vec<weir_core::admission::ClassAdmission>,
    /// The adaptive controller (`[adapt]`) at the end.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub adapt: Option<weir_core::device::AdaptSnapshot>,
    /// The loop's timer wake-ups: how late, and what was made up.
    pub wake: WakeStats,
    /// Each direction's pipeline counters at the end, after the shutdown purge (as `weir
    /// stats --json` has them under `pipeline`, `rate_now_bps` 0): per class, and per
    /// leaf queue its drops by cause and, with an AQM, `aqm` (`ecn_marks`, `aqm_drops`,
    /// `ack_filter_drops`, flows).
    pub pipelines: ReportPipelines,
}

/// [`BridgeReport::pipelines`]: `None` for a direction the policy leaves alone.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReportPipelines {
    pub outbound: Option<PipelineSnapshot>,
    pub inbound: Option<PipelineSnapshot>,
}

/// Applications the published discovery tree lists (the rest summed into one entry).
pub const DISCOVER_APPS: usize = 48;
/// Servers per application it lists.
pub const DISCOVER_SERVERS: usize = 8;
/// What the tree's current rates are measured over.
pub const DISCOVER_RATE_WINDOW: Duration = Duration::from_secs(1);

#[derive(Serialize)]
struct StatusDoc<'a> {
    lan: &'a str,
    wan: &'a str,
    uptime_s: f64,
    policy: PolicyDoc<'a>,
    /// The device's connection table (both directions); absent without a policy.
    connections: Option<weir_core::conn::ConnStats>,
    /// The connections that moved the most bytes, as of the last full sweep of the table.
    top_talkers: &'a [weir_core::conn::talkers::Talker],
    /// Application tracking (FTP control and data connections); absent without a policy.
    apps: Option<weir_core::device::apps::AppStats>,
    /// Traffic discovery: applications and their servers since weir started (the top
    /// [`DISCOVER_APPS`] and [`DISCOVER_SERVERS`] each; totals exact).
    discovery: Option<weir_core::discover::Report>,
    /// Admission control of the classes that have it.
    admission: Vec<weir_core::admission::ClassAdmission>,
    /// The adaptive controller (`[adapt]`), if the policy has one.
    adapt: Option<weir_core::device::AdaptSnapshot>,
    /// The loop's timer wake-ups: how late, and what was made up.
    wake: &'a WakeStats,
    outbound: LaneDoc<'a>,
    inbound: LaneDoc<'a>,
}

/// Which policy runs: where it came from, its generation (1 + reloads) and the reloads.
#[derive(Serialize)]
struct PolicyDoc<'a> {
    source: &'a str,
    generation: u64,
    reloads: u64,
    /// Reload attempts refused (an invalid policy): the running one stayed.
    reloads_refused: u64,
}

#[derive(Serialize)]
struct LaneDoc<'a> {
    lane: &'a LaneStats,
    pipeline: Option<PipelineSnapshot>,
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
    /// The policy file SIGHUP re-reads, and the flag SIGHUP sets.
    reload_file: Option<(PathBuf, &'static AtomicBool)>,
    reloads_refused: u64,
    /// Whether the adaptive controller was at its fallback at the last look (a change is
    /// logged).
    adapt_fallback: bool,
    /// The autorate's reflector swaps at the last look (a change is logged).
    adapt_swaps: u64,
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
    _offloads: Vec<OffloadGuard>,
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

/// The checks `Bridge::open` makes before touching anything: root, two different
/// interfaces that exist and are up. Callers run it before creating output files.
pub fn preflight(lan: &str, wan: &str) -> Result<(), BridgeError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(BridgeError::NotRoot);
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
        preflight(&cfg.lan, &cfg.wan)?;
        let mut offloads = Vec::new();
        if !cfg.keep_offloads {
            for i in [&cfg.lan, &cfg.wan] {
                offloads
                    .push(OffloadGuard::disable(i).map_err(|e| BridgeError::Other(e.to_string()))?);
            }
        }
        let (pcap_both, pcap_out, pcap_in) = match std::mem::replace(&mut cfg.pcap, PcapSpec::None)
        {
            PcapSpec::None => (None, None, None),
            PcapSpec::Both(w) => (Some(w), None, None),
            PcapSpec::PerDirection { outbound, inbound } => (None, outbound, inbound),
        };
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
        let lane = |dir, rx: &str, tx: &str, pcap| -> Result<Lane, BridgeError> {
            Ok(Lane {
                dir,
                mtu: mtu(tx)?,
                reply_mtu: mtu(rx)?,
                icmp,
                replies: Vec::with_capacity(64),
                seg_buf: vec![0; COPY_BUF],
                rx: RxRing::open(rx, cfg.ring)?,
                tx: TxRing::open(tx, cfg.ring)?,
                backlog: VecDeque::new(),
                copy_buf: vec![0; COPY_BUF],
                gso_buf: Vec::with_capacity(COPY_BUF + 4),
                pcap,
                stats: LaneStats::default(),
                meter: RateMeter::default(),
            })
        };
        let out = lane(Direction::Outbound, &cfg.lan, &cfg.wan, pcap_out)?;
        let inb = lane(Direction::Inbound, &cfg.wan, &cfg.lan, pcap_in)?;
        // the socket last: once it exists, the rings are bound and no frame is missed
        let mut stats = match &cfg.stats_socket {
            Some(p) => Some(StatsServer::start(p).map_err(|e| BridgeError::Other(e.to_string()))?),
            None => None,
        };
        let control = stats.as_mut().and_then(StatsServer::take_control);
        let reload_file = cfg
            .reload_file
            .take()
            .map(|f| (f, crate::signals::install_hup()));
        let slot = cfg.ring.frame_size as usize + VLAN_ROOM;
        Ok(Bridge {
            lan: cfg.lan,
            wan: cfg.wan,
            out,
            inb,
            device: cfg.device,
            pool: Pool::new(cfg.pool_packets, slot),
            rng: Rng::new(cfg.seed),
            dropped: Vec::with_capacity(256),
            clock: Clock::new(),
            busy_poll: cfg.busy_poll,
            batch: cfg.batch.max(1),
            stats,
            control,
            reload_file,
            reloads_refused: 0,
            adapt_fallback: false,
            adapt_swaps: 0,
            talkers: weir_core::conn::talkers::Talkers::new(TOP_TALKERS),
            discovery_due: Instant::ZERO,
            pcap_both,
            wake: WakeStats::new(cfg.catch_up),
            catch_up: cfg.catch_up,
            last_poll: Instant::ZERO,
            _offloads: offloads,
        })
    }

    /// Bridge until `stop` is set; then discard what is queued (counted) and report.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<BridgeReport, BridgeError> {
        let _ = set_timer_slack_1ns();
        let start = self.clock.now();
        let mut next_stats = start;
        while !stop.load(Ordering::Relaxed) {
            let now = self.clock.now();
            self.catch_up(now);
            let mut work = false;
            for lane in [&mut self.out, &mut self.inb] {
                work |= receive(
                    lane,
                    &mut self.device,
                    &mut self.pool,
                    &mut self.rng,
                    &mut self.dropped,
                    now,
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
                next_stats = now + Duration::from_millis(250);
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
            let wake = due.unwrap_or(next_stats).min(next_stats);
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
            admission: self.device.admission_report(),
            adapt: self.device.adapt(),
            wake: self.wake.clone(),
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
            if let Ok(req) = rx.try_recv() {
                let answer = self.reload(&req.name, &req.text, now);
                req.respond(answer.to_string());
            }
        }
        let Some((file, hup)) = &self.reload_file else {
            return;
        };
        if !hup.swap(false, Ordering::SeqCst) {
            return;
        }
        let file = file.clone();
        let name = file.display().to_string();
        let answer = match std::fs::read_to_string(&file) {
            Ok(text) => self.reload(&name, &text, now),
            Err(e) => {
                self.reloads_refused += 1;
                serde_json::json!({ "ok": false, "errors": format!("cannot read policy {name}: {e}") })
            }
        };
        match answer["ok"].as_bool() {
            Some(true) => eprintln!(
                "weir: SIGHUP: reloaded {name} (generation {}): {}",
                answer["report"]["generation"],
                answer["summary"].as_str().unwrap_or("")
            ),
            _ => eprintln!(
                "weir: SIGHUP: the new policy was refused; the running one stays:\n{}",
                answer["errors"].as_str().unwrap_or("?")
            ),
        }
    }

    /// Validate `text` as a policy and put it in place of the running one, keeping every
    /// packet held (`Device::replace_policy`). The answer is a JSON document.
    fn reload(&mut self, name: &str, text: &str, now: Instant) -> serde_json::Value {
        let refused = |me: &mut Bridge, errors: String| {
            me.reloads_refused += 1;
            serde_json::json!({ "ok": false, "errors": errors })
        };
        let policy = match weir_core::policy::Policy::parse(name, text) {
            Ok(p) => p,
            Err(e) => return refused(self, e.to_string()),
        };
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        let report = match self.device.replace_policy(&policy, &mut cx) {
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
        let summary = [("outbound", &report.outbound), ("inbound", &report.inbound)]
            .iter()
            .map(|(d, r)| {
                format!(
                    "{d}: {} kept, {} reclassified, {} re-emulated, {} dropped",
                    r.kept, r.reclassified, r.re_emulated, r.dropped
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        serde_json::json!({ "ok": true, "report": report, "summary": summary })
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
                eprintln!(
                    "weir: adapt: a reflector missed its replies or strayed from the others and was replaced ({} swaps); probing {}",
                    self.adapt_swaps,
                    active.join(", ")
                );
            }
            if a.fallback != self.adapt_fallback {
                self.adapt_fallback = a.fallback;
                if a.fallback {
                    eprintln!(
                        "weir: adapt: no reply from {} for the timeout: the link falls back to its floor, {} bit/s",
                        a.target, a.rate_bps
                    );
                } else {
                    eprintln!(
                        "weir: adapt: replies from {} again: the controller resumes",
                        a.target
                    );
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
            if let Some(p) = &mut lane.pcap {
                let _ = p.flush();
            }
        }
        if let Some(p) = &mut self.pcap_both {
            let _ = p.flush();
        }
        let Some(server) = &self.stats else { return };
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
        let out_snap = snap(&mut self.out);
        let in_snap = snap(&mut self.inb);
        let doc = StatusDoc {
            lan: &self.lan,
            wan: &self.wan,
            uptime_s: (now - start).as_secs_f64(),
            policy: PolicyDoc {
                source: self.device.source(),
                generation: self.device.generation(),
                reloads: self.device.generation() - 1,
                reloads_refused: self.reloads_refused,
            },
            connections: self.device.connection_stats(),
            top_talkers: self.talkers.top(),
            apps: self.device.app_stats(),
            discovery: self.device.discovery(DISCOVER_APPS, DISCOVER_SERVERS),
            admission: self.device.admission_report(),
            adapt,
            wake: &self.wake,
            outbound: LaneDoc {
                lane: &self.out.stats,
                pipeline: out_snap,
            },
            inbound: LaneDoc {
                lane: &self.inb.stats,
                pipeline: in_snap,
            },
        };
        if let Ok(json) = serde_json::to_string(&doc) {
            server.publish(json);
        }
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

/// Read up to `batch` frames from the lane's RX ring into its pipeline. True if any came.
#[allow(clippy::too_many_arguments)]
fn receive(
    lane: &mut Lane,
    device: &mut Device,
    pool: &mut Pool,
    rng: &mut Rng,
    dropped: &mut Vec<(PktId, DropCause)>,
    now: Instant,
    clock: &crate::clock::Clock,
    batch: usize,
) -> bool {
    let mut got = false;
    for _ in 0..batch {
        let Some(f) = lane.rx.peek() else { break };
        got = true;
        // the kernel's receive timestamp: when the frame really arrived (the loop may read
        // it some microseconds later); bounded to the last second in case of a clock step
        let arrival = match f.ts_ns {
            0 => now,
            ts => clock
                .from_unix_ns(ts)
                .max(now.saturating_sub(Duration::from_secs(1)))
                .min(now),
        };
        let mut sink = Sink {
            dir: lane.dir,
            mtu: lane.mtu,
            reply_mtu: lane.reply_mtu,
            icmp: &mut lane.icmp,
            replies: &mut lane.replies,
            seg_buf: &mut lane.seg_buf[..],
            device,
            stats: &mut lane.stats,
            pool,
            rng,
            dropped,
            now,
            arrival,
        };
        let wire_len = f.wire_len;
        let rx = Received {
            vlan: f.vlan,
            csum_not_ready: f.csum_not_ready,
            vnet: VnetHdr::parse(&f.vnet).unwrap_or_default(),
        };
        if f.copied {
            // the slot holds a truncated copy; the whole frame waits on the socket
            match lane.rx.recv_copy(&mut lane.copy_buf) {
                Ok(Some(n)) if n <= lane.copy_buf.len() && n > vnet::LEN => {
                    let rx = Received {
                        vnet: VnetHdr::parse(&lane.copy_buf).unwrap_or_default(),
                        ..rx
                    };
                    sink.stats.copied += 1;
                    sink.frame(&lane.copy_buf[vnet::LEN..n], rx, &mut lane.gso_buf);
                }
                _ => {
                    sink.stats.rx.add(wire_len);
                    sink.stats.truncated.add(wire_len);
                }
            }
        } else if (f.data.len() as u32) < wire_len {
            sink.stats.rx.add(wire_len);
            sink.stats.truncated.add(wire_len);
        } else {
            sink.frame(f.data, rx, &mut lane.gso_buf);
        }
        lane.rx.release();
    }
    got
}

/// What the RX ring said about a frame besides its bytes.
#[derive(Clone, Copy)]
struct Received {
    /// A VLAN tag the device stripped (TPID, TCI).
    vlan: Option<(u16, u16)>,
    /// `TP_STATUS_CSUMNOTREADY` (also said by `vnet`'s `F_NEEDS_CSUM`).
    csum_not_ready: bool,
    vnet: VnetHdr,
}

/// Where a received frame goes: segmented if it is a super-packet, copied into the
/// packet pool, completed (VLAN tag, checksum) and handed to the lane's pipeline.
struct Sink<'a> {
    dir: Direction,
    /// The outgoing interface's MTU, and the incoming one's (for ICMP replies).
    mtu: u32,
    reply_mtu: u32,
    icmp: &'a mut Option<TokenBucket>,
    /// ICMP replies made, to leave the other way.
    replies: &'a mut Vec<PktId>,
    /// Room for a super-packet's first segment ([`COPY_BUF`] bytes).
    seg_buf: &'a mut [u8],
    device: &'a mut Device,
    stats: &'a mut LaneStats,
    pool: &'a mut Pool,
    rng: &'a mut Rng,
    dropped: &'a mut Vec<(PktId, DropCause)>,
    now: Instant,
    arrival: Instant,
}

impl Sink<'_> {
    /// One frame as the kernel gave it. `scratch` holds a super-packet whose VLAN tag is
    /// put back before it is cut.
    fn frame(&mut self, data: &[u8], rx: Received, scratch: &mut Vec<u8>) {
        let mut vnet = rx.vnet;
        if !vnet.is_gso() {
            return self.single(data, rx, scratch);
        }
        let data = match rx.vlan {
            Some(tag) if data.len() >= 12 => {
                vnet.csum_start = vnet.csum_start.saturating_add(4);
                self.stats.vlan_restored += 1;
                with_tag(data, tag, scratch)
            }
            _ => data,
        };
        let seg = match Segmenter::new(data, &vnet) {
            Ok(s) => s,
            Err(e) => {
                self.stats.rx.add(data.len() as u32);
                self.stats.offload_errors.add(&e, data.len() as u32);
                return;
            }
        };
        if seg.max_segment_len() > pmtu::max_frame_len(data, self.mtu) {
            // the sender's segment size does not fit the outgoing interface's MTU: tell it,
            // quoting the first segment (as it would have left)
            self.stats.rx.add(data.len() as u32);
            let buf = std::mem::take(&mut self.seg_buf);
            let first = match seg.write(0, buf) {
                Ok(n) => &buf[..n],
                Err(_) => data,
            };
            self.over_mtu(first, data.len() as u32);
            self.seg_buf = buf;
            return;
        }
        self.stats.gso.super_packets += 1;
        self.stats.gso.segments += seg.count() as u64;
        for i in 0..seg.count() {
            let len = seg.segment_len(i) as u32;
            self.stats.rx.add(len);
            let Some(id) = self.pool.alloc() else {
                self.stats.pool_exhausted.add(len);
                continue;
            };
            // fails only for a segment within a jumbo MTU but longer than a packet slot
            match seg.write(i, self.pool.slot_mut(id)) {
                Ok(n) => self.admit(id, n),
                Err(_) => {
                    self.stats.truncated.add(len);
                    self.pool.free(id);
                }
            }
        }
    }

    /// A frame that is not a super-packet: copy, restore its VLAN tag, complete its
    /// checksum. `scratch` holds the tagged frame if it is too long to forward.
    fn single(&mut self, data: &[u8], rx: Received, scratch: &mut Vec<u8>) {
        let tagged = rx.vlan.is_some() && data.len() >= 12;
        let len = data.len() + if tagged { 4 } else { 0 };
        self.stats.rx.add(len as u32);
        let limit = match rx.vlan {
            Some((tpid, _)) if tagged => pmtu::frame_limit(tpid, self.mtu),
            _ => pmtu::max_frame_len(data, self.mtu),
        };
        if len > limit {
            // the kernel would refuse it on the way out
            let frame = match rx.vlan {
                Some(tag) if tagged => with_tag(data, tag, scratch),
                _ => data,
            };
            self.over_mtu(frame, len as u32);
            return;
        }
        if len > self.pool.slot_size() {
            // within the MTU (jumbo frames) but longer than weir's packet slots
            self.stats.truncated.add(len as u32);
            return;
        }
        let Some(id) = self.pool.alloc() else {
            self.stats.pool_exhausted.add(len as u32);
            return;
        };
        let slot = self.pool.slot_mut(id);
        let shift = match rx.vlan {
            Some(tag) if tagged => {
                slot[..12].copy_from_slice(&data[..12]);
                slot[12..16].copy_from_slice(&tag_bytes(tag));
                slot[16..len].copy_from_slice(&data[12..]);
                self.stats.vlan_restored += 1;
                4
            }
            _ => {
                slot[..len].copy_from_slice(data);
                0
            }
        };
        let frame = &mut self.pool.slot_mut(id)[..len];
        if rx.vnet.needs_csum() {
            let start = usize::from(rx.vnet.csum_start) + shift;
            match fixup::complete_partial_checksum(frame, start, rx.vnet.csum_offset.into()) {
                Ok(()) => self.stats.csum_filled += 1,
                Err(_) => {
                    self.stats
                        .offload_errors
                        .add(&GsoError::ChecksumOffsets, len as u32);
                    self.pool.free(id);
                    return;
                }
            }
        } else if rx.csum_not_ready && fixup::fill_l4_checksum(frame).unwrap_or(false) {
            self.stats.csum_filled += 1;
        }
        self.admit(id, len);
    }

    /// A frame (`counted` bytes as received) too long for the outgoing interface: drop
    /// it, and tell its sender the MTU if it asked not to be fragmented (rate-limited).
    fn over_mtu(&mut self, frame: &[u8], counted: u32) {
        self.stats.oversize.add(counted);
        let st = &mut self.stats.pmtu;
        let Some(bucket) = self.icmp.as_mut() else {
            st.not_answered += 1;
            return;
        };
        let Some(id) = self.pool.alloc() else {
            st.not_answered += 1;
            return;
        };
        match pmtu::too_big_reply(self.pool.slot_mut(id), frame, self.mtu, self.reply_mtu) {
            Ok(r) if bucket.try_consume(1, self.now) => {
                let m = self.pool.meta_mut(id);
                m.len = r.len as u32;
                m.dir = self.dir.reverse();
                m.arrival = self.now;
                match r.version {
                    weir_wire::ip::Version::V4 => st.frag_needed.add(r.len as u32),
                    weir_wire::ip::Version::V6 => st.packet_too_big.add(r.len as u32),
                }
                self.replies.push(id);
                return;
            }
            Ok(_) => st.rate_limited += 1,
            Err(NoReply::MayFragment) => st.df_clear += 1,
            Err(_) => st.not_answered += 1,
        }
        self.pool.free(id);
    }

    /// Hand a packet of `len` bytes in the pool to the device.
    fn admit(&mut self, id: PktId, len: usize) {
        self.pool.meta_mut(id).len = len as u32;
        let mut cx = Ctx::new(self.now, self.pool, self.rng, self.dropped);
        if self
            .device
            .ingress(self.dir, id, &mut cx, self.arrival)
            .is_err()
        {
            self.stats.dropped.add(len as u32);
            self.pool.free(id);
        }
        settle(self.stats, self.pool, self.dropped);
    }
}

/// `data` with the VLAN tag the device stripped put back after the MAC addresses, in
/// `scratch` (`data` is at least 12 bytes long).
fn with_tag<'s>(data: &[u8], tag: (u16, u16), scratch: &'s mut Vec<u8>) -> &'s [u8] {
    scratch.clear();
    scratch.extend_from_slice(&data[..12]);
    scratch.extend_from_slice(&tag_bytes(tag));
    scratch.extend_from_slice(&data[12..]);
    scratch
}

/// The 4 bytes of an 802.1Q/802.1ad tag.
fn tag_bytes((tpid, tci): (u16, u16)) -> [u8; 4] {
    let (a, b) = (tpid.to_be_bytes(), tci.to_be_bytes());
    [a[0], a[1], b[0], b[1]]
}

/// Packets a pipeline discarded after accepting them: count and free.
fn settle(stats: &mut LaneStats, pool: &mut Pool, dropped: &mut Vec<(PktId, DropCause)>) {
    for (id, _) in dropped.drain(..) {
        stats.dropped.add(pool.len(id));
        pool.free(id);
    }
}

/// Move released packets into the TX ring (frames over `mtu` dropped as `oversize`); keep
/// what does not fit in the backlog.
#[allow(clippy::too_many_arguments)]
fn transmit(
    device: &mut Device,
    dir: Direction,
    mtu: u32,
    backlog: &mut VecDeque<PktId>,
    tx: &mut TxRing,
    stats: &mut LaneStats,
    mut pcap: Option<&mut PcapWriter>,
    pool: &mut Pool,
    rng: &mut Rng,
    dropped: &mut Vec<(PktId, DropCause)>,
    now: Instant,
    unix_ns: u64,
) {
    let mut sent = false;
    loop {
        let id = match backlog.pop_front() {
            Some(id) => id,
            None => {
                let mut cx = Ctx::new(now, pool, rng, dropped);
                let got = device.poll_transmit(dir, &mut cx);
                settle(stats, pool, dropped);
                match got {
                    Some(id) => id,
                    None => break,
                }
            }
        };
        let data = pool.data(id);
        if pmtu::over_mtu(data, mtu) {
            // the kernel would refuse it; frames received were checked on the way in, so
            // only a packet the engine made itself can get here
            stats.oversize.add(data.len() as u32);
            pool.free(id);
            continue;
        }
        let ok = tx.push_with(|buf| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            n
        });
        if !ok {
            stats.tx_ring_full += 1;
            backlog.push_front(id);
            break;
        }
        if let Some(w) = pcap.as_deref_mut() {
            w.write(unix_ns, data);
        }
        stats.tx.add(data.len() as u32);
        pool.free(id);
        sent = true;
    }
    if sent {
        let _ = tx.flush();
    }
}

#[cfg(test)]
mod tests;
