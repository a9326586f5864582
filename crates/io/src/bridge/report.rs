//! What the bridge counts and reports: each direction's counters ([`LaneStats`]), the
//! final report of a run ([`BridgeReport`]) and the document `weir stats` reads
//! ([`StatusDoc`], published on the statistics socket every 250 ms).

use super::PublishCost;
use crate::wake::WakeStats;
use serde::Serialize;
use weir_core::snapshot::PipelineSnapshot;
use weir_core::{Count, Duration};
use weir_wire::gso::GsoError;

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
    /// Fail-open: frames the kernel forwarded this way while weir was not (its bypass
    /// counts them; see [`crate::failopen`]). Outside `rx` and `tx`.
    pub kernel_forwarded: Count,
    /// Frames weir read after a hand-over that the kernel had already forwarded: skipped,
    /// so that none leaves twice. Outside `rx`.
    pub handover_skipped: Count,
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
    /// Super-packets cut, into how many segments.
    pub super_packets: u64,
    pub segments: u64,
    /// Super-packets forwarded whole (docs/live.md, "Super-packets kept whole"), standing
    /// for how many segments.
    pub kept_whole: u64,
    pub whole_segments: u64,
    /// Super-packets that could have stayed whole but were cut: no large slot was free.
    pub no_whole_slot: u64,
    /// Super-packets the kernel refused to send whole; dropped (after
    /// [`crate::afpacket::WHOLE_REFUSALS`] in a row the lane cuts them from then on).
    /// Counted in `tx` too, as `tx_rejected` frames are.
    pub whole_refused: Count,
    /// Super-packets sent whole that the outgoing device dropped (its queue full), or that
    /// could not leave for [`crate::afpacket::WHOLE_BUSY_LIMIT`] tries. In `tx` too.
    pub whole_dropped: Count,
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
    pub(super) fn add(&mut self, e: &GsoError, len: u32) {
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
    /// Reload requests refused unread: more than [`super::RELOADS_PER_SECOND`] a second.
    pub reloads_throttled: u64,
    /// Admission control of the classes that have it (`max_sessions`), at the end.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub admission: Vec<weir_core::admission::ClassAdmission>,
    /// The adaptive controller (`[adapt]`) at the end.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub adapt: Option<weir_core::device::AdaptSnapshot>,
    /// The loop's timer wake-ups: how late, and what was made up.
    pub wake: WakeStats,
    /// Fail-open or fail-closed, and the hand-overs.
    pub fail_open: FailOpenDoc,
    /// The capture files (`--pcap*`): records written and skipped, why one stopped.
    pub captures: Vec<crate::pcap::CaptureStatus>,
    /// Each direction's pipeline counters at the end, after the shutdown purge (as `weir
    /// stats --json` has them under `pipeline`, `rate_now_bps` 0): per class, and per
    /// leaf queue its drops by cause and, with an AQM, `aqm` (`ecn_marks`, `aqm_drops`,
    /// `ack_filter_drops`, flows).
    pub pipelines: ReportPipelines,
}

/// What happens when weir stops forwarding ([`crate::failopen`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct FailOpenDoc {
    /// True: the kernel forwards (unshaped) while weir does not; false: fail-closed.
    pub enabled: bool,
    /// How long without a heartbeat before the kernel forwards, ms (fail-open only).
    pub timeout_ms: f64,
    /// Times weir took over from the kernel after its loop had stalled past the timeout.
    pub handovers: u64,
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

/// The statistics document; it owns its data, so that the JSON is written in a client's
/// thread when one asks, not in the forwarding loop ([`crate::stats::Publisher::publish_lazy`]).
#[derive(Serialize)]
pub(super) struct StatusDoc {
    pub(super) lan: String,
    pub(super) wan: String,
    pub(super) uptime_s: f64,
    pub(super) policy: PolicyDoc,
    /// The device's connection table (both directions); absent without a policy.
    pub(super) connections: Option<weir_core::conn::ConnStats>,
    /// The connections that moved the most bytes, as of the last full sweep of the table.
    pub(super) top_talkers: Vec<weir_core::conn::talkers::Talker>,
    /// Application tracking (FTP control and data connections); absent without a policy.
    pub(super) apps: Option<weir_core::device::apps::AppStats>,
    /// Traffic discovery: applications and their servers since weir started (the top
    /// [`DISCOVER_APPS`] and [`DISCOVER_SERVERS`] each; totals exact).
    pub(super) discovery: Option<weir_core::discover::Report>,
    /// Admission control of the classes that have it.
    pub(super) admission: Vec<weir_core::admission::ClassAdmission>,
    /// The adaptive controller (`[adapt]`), if the policy has one.
    pub(super) adapt: Option<weir_core::device::AdaptSnapshot>,
    /// The loop's timer wake-ups: how late, and what was made up.
    pub(super) wake: WakeStats,
    /// How long publishing held forwarding, before this one.
    pub(super) publish: PublishCost,
    pub(super) fail_open: FailOpenDoc,
    pub(super) captures: Vec<crate::pcap::CaptureStatus>,
    /// Statistics clients given up on: they did not read the document within 1 s.
    pub(super) stats_clients_given_up: u64,
    pub(super) outbound: LaneDoc,
    pub(super) inbound: LaneDoc,
}

/// Which policy runs: where it came from, its generation (1 + reloads) and the reloads.
#[derive(Serialize)]
pub(super) struct PolicyDoc {
    pub(super) source: String,
    pub(super) generation: u64,
    pub(super) reloads: u64,
    /// Reload attempts refused (an invalid policy): the running one stayed.
    pub(super) reloads_refused: u64,
    /// Reload requests refused unread: more than [`super::RELOADS_PER_SECOND`] a second.
    pub(super) reloads_throttled: u64,
}

#[derive(Serialize)]
pub(super) struct LaneDoc {
    pub(super) lane: LaneStats,
    pub(super) pipeline: Option<PipelineSnapshot>,
}
