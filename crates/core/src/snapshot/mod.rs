//! A point-in-time copy of one pipeline's statistics, for the statistics socket, `weir
//! stats` and test reports.
//!
//! * [`snapshot`] copies every counter the pipeline keeps, through public accessors only:
//!   per class (in scheduler order: the root first, every parent before its children) the
//!   configured rate and ceil, packets/bytes sent, lends, borrows and overlimits, and for
//!   leaves the queue's backlog and [`QStats`](crate::qdisc::QStats) with drops by cause
//!   (non-zero causes only, keyed by [`DropCause::as_str`]), and for a queue with an AQM
//!   or flow queuing its [`AqmSnapshot`] (ECN marks, AQM and ACK-filter drops, flows),
//!   and its TCP health (`tcp`: a histogram of end-to-end RTT samples, retransmitted
//!   segments; [`crate::conn::health`]; the samples no class took in `tcp_unclassified`); per
//!   rule the hits; the default-class hits and the frames whose headers could not be
//!   parsed.
//! * [`RateMeter`] fills in each class's current rate, `rate_now_bps` = bytes sent × 8 / Δt
//!   between two successive snapshots (0 for the first, for a class it has not seen before,
//!   and when the counters went backwards, e.g. after the policy was replaced).
//! * [`format_table`] renders a snapshot as the text table `weir stats` prints.
//!
//! Snapshots serialize to JSON (serde) and deserialize back, so a client can format what
//! the statistics socket sends. Times are the driver's `Instant` in nanoseconds.
//!
//! Identities that hold in every snapshot (tests assert them): for each leaf queue,
//! `received = enqueued + dropped_on_enqueue`, `enqueued = dequeued + dropped_later +
//! queued`, the `drops` map sums to `dropped_on_enqueue + dropped_later`; the rule hits
//! plus `default_rule` equal the packets that entered the pipeline; a queue's `aqm.aqm_drops`
//! equals its `drops.aqm` packets and `aqm.ack_filter_drops` its `drops.ack_filter`
//! packets (0 when absent).

use crate::aqm::AqmStats;
use crate::conn::health::{ClassTcp, TcpHealth, BOUNDS_US};
use crate::emulate::EmuCounters;
use crate::pipeline::Pipeline;
use crate::qdisc::{Count, DropCause, QStats, Qdisc};
use crate::sched::linkshare::ClassId;
use crate::time::Instant;
use crate::units::fmt_rate;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Statistics of one pipeline (one direction) at one instant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineSnapshot {
    /// The driver's time of the snapshot, ns.
    pub at_ns: u64,
    /// Classes in scheduler order (root first, parents before children).
    pub classes: Vec<ClassSnapshot>,
    /// Rules in match order.
    pub rules: Vec<RuleSnapshot>,
    /// Packets no rule matched (sent to the default class).
    #[serde(deserialize_with = "de_count")]
    pub default_rule: Count,
    /// Name of the default class.
    #[serde(default)]
    pub default_class: String,
    /// Frames whose headers could not be parsed (sent to the default class; also counted
    /// in `default_rule`).
    #[serde(deserialize_with = "de_count")]
    pub malformed: Count,
    /// Emulation profiles, profile 0 (the default) first; empty when not emulated.
    #[serde(default)]
    pub emulators: Vec<EmuSnapshot>,
    /// DiffServ meters, in definition order; empty when the policy has none.
    #[serde(default)]
    pub meters: Vec<MeterSnapshot>,
    /// The upper bounds of the classes' RTT histogram buckets, µs (the last bucket, +Inf,
    /// has none): [`crate::conn::health::BOUNDS_US`].
    #[serde(default)]
    pub rtt_bounds_us: Vec<u32>,
    /// RTT samples and retransmissions of this direction's packets that no class took
    /// (see [`crate::conn::health`]).
    #[serde(default)]
    pub tcp_unclassified: ClassTcp,
}

/// One DiffServ meter: its configuration and what it coloured, remarked and dropped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeterSnapshot {
    pub name: String,
    /// One-line description: the meter, its colour mode and its actions.
    pub config: String,
    #[serde(flatten)]
    pub stats: crate::diffserv::MeterStats,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassSnapshot {
    pub name: String,
    /// `None` for the root.
    pub parent: Option<String>,
    pub leaf: bool,
    pub rate_bps: u64,
    pub ceil_bps: u64,
    #[serde(deserialize_with = "de_count")]
    pub sent: Count,
    /// Packets sent on this class's own rate at its level.
    pub lends: u64,
    /// Packets sent with bandwidth lent by an ancestor.
    pub borrows: u64,
    /// Entries into the can't-send state (over ceil).
    pub overlimits: u64,
    /// The leaf's queue (`None` for inner classes).
    pub queue: Option<QueueSnapshot>,
    /// Current sending rate, filled in by [`RateMeter::update`] (0 until then).
    #[serde(default)]
    pub rate_now_bps: f64,
    /// For leaves: end-to-end RTT samples and retransmissions of the class's TCP
    /// segments ([`crate::conn::health`]); `None` (absent) for inner classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<ClassTcp>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    /// Packets queued now.
    pub packets: u64,
    /// Bytes queued now.
    pub bytes: u64,
    #[serde(deserialize_with = "de_count")]
    pub received: Count,
    #[serde(deserialize_with = "de_count")]
    pub enqueued: Count,
    #[serde(deserialize_with = "de_count")]
    pub dequeued: Count,
    #[serde(deserialize_with = "de_count")]
    pub dropped_on_enqueue: Count,
    #[serde(deserialize_with = "de_count")]
    pub dropped_later: Count,
    /// Drops by cause ([`DropCause::as_str`]), non-zero causes only.
    #[serde(deserialize_with = "de_count_map")]
    pub drops: BTreeMap<String, Count>,
    /// The AQM and flow counters; `None` (absent from the JSON) for a queue without an
    /// AQM or flow queuing (a plain FIFO, per-flow DRR, RED, an emulator's queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aqm: Option<AqmSnapshot>,
}

/// The counters of a leaf queue managed by CoDel or COBALT, or of a flow queue
/// ([`crate::Qdisc::aqm_stats`], [`crate::aqm::AqmStats`]), under the names reports are
/// searched by (`ecn_marks`, `aqm_drops`, `ack_filter_drops`). Packet counts; the
/// counters run from the queue's creation, the gauges are the state now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AqmSnapshot {
    /// Packets sent with CE because the AQM signalled them (not drops).
    pub ecn_marks: u64,
    /// Packets the AQM dropped (also `drops.aqm`).
    pub aqm_drops: u64,
    /// Pure ACKs the ACK filter dropped (also `drops.ack_filter`).
    pub ack_filter_drops: u64,
    /// Signals on packets whose headers could not be read: sent unchanged.
    pub unmarkable: u64,
    /// Packets dropped to respect the packet or byte limit (`drops.overlimit`, or a
    /// FIFO's `queue_full`/`byte_limit`).
    pub limit_drops: u64,
    /// Flows holding packets now (0 for a single FIFO).
    pub flows: u32,
    /// The most flows that held packets at once.
    pub max_flows: u32,
    /// Flows in the new-flow (sparse) list now.
    pub sparse_flows: u32,
    /// Flows in the old-flow list with packets (bulk) now.
    pub bulk_flows: u32,
    /// Empty flows whose AQM state still decays (COBALT) now.
    pub decaying_flows: u32,
    /// Flows that entered the new-flow list, since the start.
    pub new_flows: u64,
    /// Source and destination hosts with bulk flows now (host isolation modes).
    pub src_hosts: u32,
    pub dst_hosts: u32,
    /// Arrivals that shared a bucket with another flow (every way of their set taken).
    pub collisions: u64,
}

impl AqmSnapshot {
    /// The counters `a` of a queue whose [`QStats`] are `q` (the ACK filter's drops are
    /// read from `q`, where [`crate::Counted`] counts them by cause).
    pub fn new(a: &AqmStats, q: &QStats) -> Self {
        AqmSnapshot {
            ecn_marks: a.ecn_marked,
            aqm_drops: a.aqm_dropped,
            ack_filter_drops: q.drops_by(DropCause::AckFilter).packets,
            unmarkable: a.unmarkable,
            limit_drops: a.overlimit_dropped,
            flows: a.active_flows,
            max_flows: a.max_flows_seen,
            sparse_flows: a.sparse_flows,
            bulk_flows: a.bulk_flows,
            decaying_flows: a.decaying_flows,
            new_flows: a.new_flows,
            src_hosts: a.src_hosts,
            dst_hosts: a.dst_hosts,
            collisions: a.collisions,
        }
    }

    /// Whether the queue keeps flows (a flow queue that has seen one; a FIFO never does).
    pub fn has_flows(&self) -> bool {
        self.new_flows > 0 || self.max_flows > 0
    }

    /// The second line of a leaf's row in [`format_table`]: marks and AQM drops, then the
    /// rest that is non-zero or meaningful for the queue.
    pub fn summary(&self) -> String {
        let mut s = format!("ecn marks {}, aqm drops {}", self.ecn_marks, self.aqm_drops);
        if self.ack_filter_drops > 0 {
            let _ = write!(s, ", ack filter drops {}", self.ack_filter_drops);
        }
        if self.unmarkable > 0 {
            let _ = write!(s, ", unmarkable {}", self.unmarkable);
        }
        if self.has_flows() {
            let _ = write!(
                s,
                "; flows {} now, {} most (sparse {}, bulk {}, decaying {}; {} new)",
                self.flows,
                self.max_flows,
                self.sparse_flows,
                self.bulk_flows,
                self.decaying_flows,
                self.new_flows
            );
        }
        if self.src_hosts > 0 || self.dst_hosts > 0 {
            let _ = write!(s, "; hosts {} src, {} dst", self.src_hosts, self.dst_hosts);
        }
        if self.collisions > 0 {
            let _ = write!(s, "; collisions {}", self.collisions);
        }
        s
    }
}

impl QueueSnapshot {
    /// All drops (on enqueue and later).
    pub fn dropped(&self) -> Count {
        self.dropped_on_enqueue + self.dropped_later
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleSnapshot {
    pub name: String,
    /// Name of the class the rule sends to.
    pub class: String,
    #[serde(deserialize_with = "de_count")]
    pub hits: Count,
    /// The emulation profile the rule's packets take (`None`: the direction is not
    /// emulated).
    #[serde(default)]
    pub emulate: Option<String>,
}

/// One emulation profile: its configuration, queue statistics (duplicates count as
/// arrivals) and emulation events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmuSnapshot {
    pub name: String,
    /// One-line description of the configuration.
    pub config: String,
    pub queue: QueueSnapshot,
    pub counters: EmuCounters,
}

// `Count` derives only `Serialize`; these read it back.
#[derive(Deserialize)]
struct CountDe {
    packets: u64,
    bytes: u64,
}

impl From<CountDe> for Count {
    fn from(c: CountDe) -> Count {
        Count {
            packets: c.packets,
            bytes: c.bytes,
        }
    }
}

fn de_count<'de, D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
    CountDe::deserialize(d).map(Count::from)
}

fn de_count_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Count>, D::Error> {
    let m = BTreeMap::<String, CountDe>::deserialize(d)?;
    Ok(m.into_iter().map(|(k, v)| (k, v.into())).collect())
}

/// Copy a queue's statistics: its counters `q`, its backlog, its AQM's counters `aqm`.
fn queue_snapshot(q: &QStats, packets: usize, bytes: u64, aqm: Option<AqmStats>) -> QueueSnapshot {
    QueueSnapshot {
        packets: packets as u64,
        bytes,
        received: q.received,
        enqueued: q.enqueued,
        dequeued: q.dequeued,
        dropped_on_enqueue: q.dropped_on_enqueue,
        dropped_later: q.dropped_later,
        drops: DropCause::ALL
            .iter()
            .map(|&cause| (cause, q.drops_by(cause)))
            .filter(|(_, cnt)| cnt.packets != 0 || cnt.bytes != 0)
            .map(|(cause, cnt)| (cause.as_str().to_string(), cnt))
            .collect(),
        aqm: aqm.map(|a| AqmSnapshot::new(&a, q)),
    }
}

/// Copy the statistics of `p` at `at`.
pub fn snapshot(p: &Pipeline, at: Instant) -> PipelineSnapshot {
    let mut classes = Vec::new();
    let n = p.shaper().map_or(0, |s| s.num_classes());
    if let Some(s) = p.shaper() {
        classes = class_snapshots(s, p.tcp_health());
    }
    let class_name = |c: u32| match p.shaper() {
        Some(s) if (c as usize) < n => s.name(c).to_string(),
        Some(_) => format!("#{c}"),
        None => "(unshaped)".to_string(),
    };
    let emu_name = |rule: u16| {
        p.emulator().map(|e| {
            let i = match e.emu.select() {
                crate::emulate::Select::Rule => e.emu.profile_for_key(rule as u32),
                crate::emulate::Select::Class => 0,
            };
            e.names.get(i).cloned().unwrap_or_else(|| format!("#{i}"))
        })
    };
    let emulators = p
        .emulator()
        .map(|e| {
            e.emu
                .profiles()
                .iter()
                .enumerate()
                .map(|(i, l)| EmuSnapshot {
                    name: e.names.get(i).cloned().unwrap_or_else(|| format!("#{i}")),
                    config: crate::emulate::spec::describe(l.config()),
                    queue: queue_snapshot(l.stats(), l.len(), l.bytes(), None),
                    counters: l.counters().clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let cl = p.classifier();
    let rules = cl
        .iter()
        .flat_map(|cl| cl.rules.iter().zip(&cl.hits))
        .enumerate()
        .map(|(i, (r, hits))| RuleSnapshot {
            name: if r.name.is_empty() {
                format!("rule {}", i + 1)
            } else {
                r.name.clone()
            },
            class: class_name(r.class),
            hits: *hits,
            emulate: emu_name(i as u16),
        })
        .collect();
    PipelineSnapshot {
        at_ns: at.as_nanos(),
        classes,
        rules,
        default_rule: cl.map(|c| c.default_hits).unwrap_or_default(),
        default_class: cl.map(|c| class_name(c.default_class)).unwrap_or_default(),
        malformed: p.malformed(),
        emulators,
        meters: p
            .conditioner()
            .into_iter()
            .flat_map(|c| c.meters())
            .map(|(d, st)| MeterSnapshot {
                name: d.name.clone(),
                config: d.describe(),
                stats: *st,
            })
            .collect(),
        rtt_bounds_us: BOUNDS_US.to_vec(),
        tcp_unclassified: p.tcp_health().unclassified().clone(),
    }
}

fn class_snapshots(s: &crate::sched::linkshare::LinkShare, tcp: &TcpHealth) -> Vec<ClassSnapshot> {
    let n = s.num_classes();
    let mut classes = Vec::with_capacity(n);
    for c in 0..n as ClassId {
        let st = s.class_stats(c);
        let queue = s.queue_stats(c).map(|q| {
            let (packets, bytes) = s.backlog(c);
            queue_snapshot(q, packets, bytes, s.queue_aqm(c))
        });
        classes.push(ClassSnapshot {
            name: s.name(c).to_string(),
            parent: s.parent(c).map(|pc| s.name(pc).to_string()),
            leaf: s.is_leaf(c),
            rate_bps: s.rate(c).bps(),
            ceil_bps: s.ceil(c).bps(),
            sent: st.sent,
            lends: st.lends,
            borrows: st.borrows,
            overlimits: st.overlimits,
            // (a class without samples has none to copy: most circuits of a table, most
            // of the time)
            tcp: s
                .is_leaf(c)
                .then(|| tcp.class(c).filter(|t| !t.is_empty()).cloned())
                .flatten(),
            queue,
            rate_now_bps: 0.0,
        });
    }
    classes
}

/// Fills in `rate_now_bps` from the difference between successive snapshots.
#[derive(Clone, Debug, Default)]
pub struct RateMeter {
    /// The previous snapshot's time, class names and bytes sent (names are compared, not
    /// copied, while they stay the same: a table's 20,000 classes, four times a second).
    prev: Option<(u64, Vec<String>, Vec<u64>)>,
}

impl RateMeter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Set every class's `rate_now_bps` to the bytes it sent since the previous update ×
    /// 8 / the time between them, and remember this snapshot. The first update (and any
    /// whose time did not advance) gives 0; a class is matched by name.
    pub fn update(&mut self, snap: &mut PipelineSnapshot) {
        let same = self.prev.as_ref().is_some_and(|(_, names, _)| {
            names.len() == snap.classes.len()
                && names.iter().zip(&snap.classes).all(|(n, c)| *n == c.name)
        });
        let cur_bytes: Vec<u64> = snap.classes.iter().map(|c| c.sent.bytes).collect();
        match &self.prev {
            Some((t0, names, prev)) if snap.at_ns > *t0 => {
                let dt = (snap.at_ns - t0) as f64 / 1e9;
                let by_name: Option<std::collections::HashMap<&str, u64>> = (!same).then(|| {
                    names
                        .iter()
                        .map(String::as_str)
                        .zip(prev.iter().copied())
                        .collect()
                });
                for (i, c) in snap.classes.iter_mut().enumerate() {
                    let before = match &by_name {
                        None => prev.get(i).copied(),
                        Some(m) => m.get(c.name.as_str()).copied(),
                    };
                    c.rate_now_bps = match before {
                        Some(b) if c.sent.bytes >= b => (c.sent.bytes - b) as f64 * 8.0 / dt,
                        _ => 0.0,
                    };
                }
            }
            Some((t0, _, _)) if snap.at_ns == *t0 => {
                // No time passed: report 0 and keep the older baseline.
                snap.classes.iter_mut().for_each(|c| c.rate_now_bps = 0.0);
                return;
            }
            _ => snap.classes.iter_mut().for_each(|c| c.rate_now_bps = 0.0),
        }
        let names = match self.prev.take() {
            Some((_, names, _)) if same => names,
            _ => snap.classes.iter().map(|c| c.name.clone()).collect(),
        };
        self.prev = Some((snap.at_ns, names, cur_bytes));
    }

    /// Forget the previous snapshot (the next update reports 0).
    pub fn reset(&mut self) {
        self.prev = None;
    }
}

/// A rate in bit/s with three significant digits: "0bit", "950bit", "4.87Mbit", "12.3kbit".
pub fn fmt_rate_approx(bps: f64) -> String {
    if !bps.is_finite() || bps <= 0.0 {
        return "0bit".into();
    }
    const UNITS: [(f64, &str); 5] = [
        (1e12, "Tbit"),
        (1e9, "Gbit"),
        (1e6, "Mbit"),
        (1e3, "kbit"),
        (1.0, "bit"),
    ];
    let (div, unit) = UNITS
        .iter()
        .copied()
        .find(|&(d, _)| bps >= d * 0.9995)
        .unwrap_or((1.0, "bit"));
    let v = bps / div;
    if unit == "bit" {
        return format!("{v:.0}bit");
    }
    if v >= 99.95 {
        format!("{v:.0}{unit}")
    } else if v >= 9.995 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

/// The statistics table `weir stats` prints for one direction: the class tree with
/// configured rate and ceil, current rate, packets and bytes sent, borrows, queue length,
/// drops in total and by cause, and under a leaf whose queue has an AQM a second line
/// `aqm: …` ([`AqmSnapshot::summary`]), under a leaf with TCP RTT samples or
/// retransmissions a line `tcp: …` ([`ClassTcp::summary`]: RTT p50, p95 and mean since
/// the policy was loaded); then the rules with their hits.
pub fn format_table(s: &PipelineSnapshot, direction: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "direction {direction}  (at {:.3}s)",
        s.at_ns as f64 / 1e9
    );

    // Tree order: depth-first from the roots, children in snapshot order.
    let idx: BTreeMap<&str, usize> = s
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); s.classes.len()];
    let mut roots = Vec::new();
    for (i, c) in s.classes.iter().enumerate() {
        match c.parent.as_deref().and_then(|p| idx.get(p)) {
            Some(&p) if p != i => children[p].push(i),
            _ => roots.push(i),
        }
    }
    // (label, class index, the tree's lines below the label: a second line's prefix)
    let mut rows: Vec<(String, usize, String)> = Vec::with_capacity(s.classes.len());
    fn walk(
        i: usize,
        prefix: &str,
        branch: &str,
        children: &[Vec<usize>],
        rows: &mut Vec<(String, usize, String)>,
        depth: usize,
        names: &[ClassSnapshot],
    ) {
        let next = match branch {
            "" => prefix.to_string(),
            "└─ " => format!("{prefix}   "),
            _ => format!("{prefix}│  "),
        };
        rows.push((
            format!("{prefix}{branch}{}", names[i].name),
            i,
            next.clone(),
        ));
        if depth > names.len() {
            return; // defensive: a malformed document with a parent cycle
        }
        let kids = &children[i];
        for (k, &c) in kids.iter().enumerate() {
            let b = if k + 1 == kids.len() {
                "└─ "
            } else {
                "├─ "
            };
            walk(c, &next, b, children, rows, depth + 1, names);
        }
    }
    for &r in &roots {
        walk(r, "", "", &children, &mut rows, 0, &s.classes);
    }

    let w = rows
        .iter()
        .map(|(l, _, _)| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let pad = |l: &str| " ".repeat(w - l.chars().count());
    let _ = writeln!(
        out,
        "{:<w$} {:>10} {:>10} {:>10} {:>11} {:>14} {:>9} {:>7} {:>11} {:>9}  drops by cause",
        "class",
        "rate",
        "ceil",
        "now",
        "sent pkts",
        "sent bytes",
        "borrows",
        "queued",
        "queued B",
        "dropped",
    );
    for (label, i, below) in &rows {
        let c = &s.classes[*i];
        let (queued, queued_b, dropped, causes) = match &c.queue {
            Some(q) => (
                q.packets.to_string(),
                q.bytes.to_string(),
                q.dropped().packets.to_string(),
                q.drops
                    .iter()
                    .map(|(k, v)| format!("{k} {}", v.packets))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            None => ("-".into(), "-".into(), "-".into(), String::new()),
        };
        let line = format!(
            "{label}{} {:>10} {:>10} {:>10} {:>11} {:>14} {:>9} {:>7} {:>11} {:>9}  {causes}",
            pad(label),
            fmt_rate_or_zero(c.rate_bps),
            fmt_rate_or_zero(c.ceil_bps),
            fmt_rate_approx(c.rate_now_bps),
            c.sent.packets,
            c.sent.bytes,
            c.borrows,
            queued,
            queued_b,
            dropped,
        );
        let _ = writeln!(out, "{}", line.trim_end());
        if let Some(a) = c.queue.as_ref().and_then(|q| q.aqm.as_ref()) {
            let _ = writeln!(out, "{below}  aqm: {}", a.summary());
        }
        if let Some(t) = c.tcp.as_ref().filter(|t| !t.is_empty()) {
            let _ = writeln!(out, "{below}  tcp: {}", t.summary());
        }
    }

    let rw = s
        .rules
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(9);
    let cw = s
        .rules
        .iter()
        .map(|r| r.class.chars().count())
        .chain(std::iter::once(s.default_class.chars().count()))
        .max()
        .unwrap_or(0)
        .max(5);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<rw$} {:<cw$} {:>11} {:>14}",
        "rule", "class", "hits pkts", "hits bytes"
    );
    for r in &s.rules {
        let _ = writeln!(
            out,
            "{:<rw$} {:<cw$} {:>11} {:>14}",
            r.name, r.class, r.hits.packets, r.hits.bytes
        );
    }
    let _ = writeln!(
        out,
        "{:<rw$} {:<cw$} {:>11} {:>14}",
        "(default)", s.default_class, s.default_rule.packets, s.default_rule.bytes
    );
    if !s.tcp_unclassified.is_empty() {
        let _ = writeln!(
            out,
            "tcp, packets of no class: {}",
            s.tcp_unclassified.summary()
        );
    }
    if s.malformed.packets > 0 {
        let _ = writeln!(
            out,
            "unparsable frames (sent to the default class): {} packets, {} bytes",
            s.malformed.packets, s.malformed.bytes
        );
    }
    named_table(
        &mut out,
        [
            "emulate", "in pkts", "out pkts", "lost", "q-drops", "dups", "queued",
        ],
        s.emulators.iter().map(|e| {
            let row = [
                e.queue.received.packets,
                e.queue.dequeued.packets,
                e.counters.lost.packets,
                e.counters.queue_drops.packets,
                e.counters.dup_admitted.packets,
                e.queue.packets,
            ];
            (e.name.as_str(), row, e.config.as_str())
        }),
    );
    named_table(
        &mut out,
        [
            "meter", "green", "yellow", "red", "remarked", "dropped", "flows",
        ],
        s.meters.iter().map(|m| {
            let st = &m.stats;
            let row = [
                st.green.packets,
                st.yellow.packets,
                st.red.packets,
                st.remarked.packets,
                st.dropped.packets,
                st.flows,
            ];
            (m.name.as_str(), row, m.config.as_str())
        }),
    );
    out
}

/// A table of named rows: `headers[0]` heads the name column, the rest head numeric
/// columns (each as wide as its header, at least 8), then each row's configuration.
/// Nothing when there is no row.
fn named_table<'a, const N: usize, const M: usize>(
    out: &mut String,
    headers: [&str; N],
    rows: impl Iterator<Item = (&'a str, [u64; M], &'a str)>,
) {
    debug_assert_eq!(N, M + 1);
    let rows: Vec<_> = rows.collect();
    if rows.is_empty() {
        return;
    }
    let nw = rows
        .iter()
        .map(|r| r.0.chars().count())
        .chain([headers[0].len()])
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = headers[1..].iter().map(|h| h.len().max(8)).collect();
    let _ = write!(out, "\n{:<nw$}", headers[0]);
    for (h, w) in headers[1..].iter().zip(&widths) {
        let _ = write!(out, " {h:>w$}");
    }
    let _ = writeln!(out, "  config");
    for (name, row, config) in rows {
        let _ = write!(out, "{name:<nw$}");
        for (v, w) in row.iter().zip(&widths) {
            let _ = write!(out, " {v:>w$}");
        }
        let _ = writeln!(out, "  {config}");
    }
}

fn fmt_rate_or_zero(bps: u64) -> String {
    if bps == 0 {
        "0bit".into()
    } else {
        fmt_rate(bps)
    }
}

#[cfg(test)]
mod tests;
