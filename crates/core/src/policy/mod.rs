//! The policy language: a TOML file → a validated [`Policy`] → a [`Pipeline`].
//!
//! A policy expresses seed 000's configuration steps and three policy types:
//! step 1 the WAN link rate (`[link] rate`), step 2 its partition into a class tree
//! (`[[class]]` with `parent`, assured `rate`, borrowing limit `ceil`), step 3 the
//! classifier (`[[rule]]`, first match wins, `[link] default` for the rest), step 4 the
//! buffer management of each class (`queue`, `red`, `[class.session]` per-session
//! guarantee and cap), step 5 the link-sharing scheduler that enforces it all.
//! Class-based limitation is `rate`/`ceil`; session guarantee is per-flow queuing with
//! `[class.session] guarantee`; inter-class borrowing is `ceil > rate`; intra-class
//! borrowing is per-flow queuing's redistribution of an idle session's share.
//!
//! `technique` selects one of the presets the testbed compares (`cbq`, `cbq+red`,
//! `cbq+pfq`, `cbq+pfq+red`, and with TCP rate control `tcr`, `cbq+tcr`, `cbq+pfq+tcr`);
//! a class's own `queue`/`red`/`tcr` keys override it.
//! The full reference is docs/policy.md. Every error carries `file:line:col`.
//!
//! The code: `raw.rs` (the TOML tables, positions, key parsers), `compile/` (raw → the
//! checked model below, one function per section of the file), `build.rs` (model → queues,
//! pipelines, the [`Device`]) and `describe.rs` (the text `weir check` prints); this file
//! holds the model, its errors and `parse`/`load`.

pub(crate) mod build;
mod compile;
mod describe;
mod raw;

pub use crate::adapt::{AdaptDef, AdaptMode};
pub use crate::device::Device;
pub use crate::pipeline::Pipeline;

use crate::aqm::fifo::AqmFifoConfig;
use crate::aqm::AqmKind;
use crate::classify::Match;
use crate::emulate::EmuConfig;
use crate::pool::Direction;
use crate::queue::fq::{FqConfig, Isolation};
use crate::queue::pfq::PfqConfig;
use crate::tcp::ack_filter::AckFilterMode;
use crate::time::Duration;
use crate::units::Limit;
use compile::{compile, session_warnings};
use raw::{toml_error, RawPolicy, Src};
use std::fmt;

/// RNG seed when `[link] seed` is not given.
pub const DEFAULT_SEED: u64 = 1;

/// Name of the implicit root class (the link).
pub const ROOT: &str = "link";

/// One problem in a policy file, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            // not about a place in the file (e.g. the file cannot be read)
            return write!(f, "{}: {}", self.file, self.msg);
        }
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

/// All problems found in a policy (at least one).
#[derive(Clone, Debug)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
impl std::error::Error for PolicyErrors {}

/// Queue-management technique combinations (seed 000 Table 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Technique {
    Cbq,
    CbqRed,
    CbqPfq,
    CbqPfqRed,
    /// TCP rate control alone (iPolicer): class rates are held by TCR only; the scheduler
    /// enforces nothing but the link rate (every class may use all of it).
    Tcr,
    /// Class-based queuing with TCR (Guardian Pro, QoSWorks).
    CbqTcr,
    /// Class-based queuing, per-flow queuing and TCR (PacketShaper, WiseWAN).
    CbqPfqTcr,
    /// The link-sharing classes with RFC 8290's leaf in each: flow queuing with
    /// sparse-flow priority, CoDel per flow, ECN (Linux `fq_codel`).
    FqCodel,
    /// The modern default (no `technique`): flow queuing with sparse-flow priority and
    /// CAKE's triple host isolation, COBALT per flow, ECN (CAKE's leaf).
    FqCobalt,
}

impl Technique {
    pub const ALL: [Technique; 9] = [
        Technique::Cbq,
        Technique::CbqRed,
        Technique::CbqPfq,
        Technique::CbqPfqRed,
        Technique::Tcr,
        Technique::CbqTcr,
        Technique::CbqPfqTcr,
        Technique::FqCodel,
        Technique::FqCobalt,
    ];
    /// What a policy gets when it names no `technique`.
    pub const DEFAULT: Technique = Technique::FqCobalt;
    /// The presets that reproduce the seed papers' bandwidth managers (the labs' DUTs).
    pub const SEED: [Technique; 7] = [
        Technique::Cbq,
        Technique::CbqRed,
        Technique::CbqPfq,
        Technique::CbqPfqRed,
        Technique::Tcr,
        Technique::CbqTcr,
        Technique::CbqPfqTcr,
    ];
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
    pub fn name(self) -> &'static str {
        match self {
            Technique::Cbq => "cbq",
            Technique::CbqRed => "cbq+red",
            Technique::CbqPfq => "cbq+pfq",
            Technique::CbqPfqRed => "cbq+pfq+red",
            Technique::Tcr => "tcr",
            Technique::CbqTcr => "cbq+tcr",
            Technique::CbqPfqTcr => "cbq+pfq+tcr",
            Technique::FqCodel => "fq_codel",
            Technique::FqCobalt => "fq_cobalt",
        }
    }
    /// The leaf queue kind the preset gives a class that does not name one.
    fn queue(self) -> QueueKind {
        match self {
            Technique::CbqPfq | Technique::CbqPfqRed | Technique::CbqPfqTcr => QueueKind::Pfq,
            Technique::FqCodel | Technique::FqCobalt => QueueKind::Fq,
            _ => QueueKind::Fifo,
        }
    }
    /// The AQM the preset gives a leaf that does not name one (RED is [`Technique::red`]).
    fn aqm(self) -> AqmKind {
        match self {
            Technique::FqCodel => AqmKind::Codel,
            Technique::FqCobalt => AqmKind::Cobalt,
            _ => AqmKind::None,
        }
    }
    /// The host isolation the preset gives a flow-queued leaf: CAKE's `triple` for
    /// `fq_cobalt`, flows only for `fq_codel` (as Linux's `fq_codel`).
    fn isolate(self) -> Isolation {
        match self {
            Technique::FqCodel => Isolation::Flow,
            _ => Isolation::Triple,
        }
    }
    /// Whether the preset turns TCP rate control on (for classes without a `tcr` key).
    pub fn tcr(self) -> bool {
        matches!(
            self,
            Technique::Tcr | Technique::CbqTcr | Technique::CbqPfqTcr
        )
    }
    fn red(self) -> bool {
        matches!(self, Technique::CbqRed | Technique::CbqPfqRed)
    }
}

/// Which traffic the policy shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Shapes {
    Outbound,
    Inbound,
    Both,
    /// Shape nothing: classify (and emulate) only.
    None,
}

impl Shapes {
    pub fn name(self) -> &'static str {
        match self {
            Shapes::Outbound => "outbound",
            Shapes::Inbound => "inbound",
            Shapes::Both => "both",
            Shapes::None => "none",
        }
    }

    /// Whether traffic travelling in `dir` is covered.
    pub fn covers(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Shapes::Both, _)
                | (Shapes::Outbound, Direction::Outbound)
                | (Shapes::Inbound, Direction::Inbound)
        )
    }
}

/// One named impairment profile (`[[emulate]]`).
#[derive(Clone, Debug, PartialEq)]
pub struct EmuDef {
    pub name: String,
    pub cfg: EmuConfig,
    /// Which direction(s) it applies to (never `Shapes::None`).
    pub direction: Shapes,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// One drop-tail FIFO (with RED, three-colour RED, CoDel or COBALT if the leaf has
    /// one).
    Fifo,
    /// Seed 000's per-flow queuing: DRR over per-session queues (with RED per flow).
    Pfq,
    /// Flow queuing with sparse-flow priority (RFC 8290 DRR++), host isolation and CoDel
    /// or COBALT per flow ([`crate::queue::fq`]).
    Fq,
}

impl QueueKind {
    /// As the policy writes it.
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Fifo => "fifo",
            QueueKind::Pfq => "pfq",
            QueueKind::Fq => "fq",
        }
    }
}

/// A leaf's `aqm` as written: RED (with the `red` table's parameters or its defaults) or
/// one of the delay-based AQMs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AqmChoice {
    Red,
    Delay(AqmKind),
}

/// RED thresholds as written: packets or bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct RedSpec {
    pub min: Limit,
    pub max: Limit,
    pub max_p: f64,
    pub wq: f64,
    pub gentle: bool,
    /// Three-colour RED (`green`/`yellow`/`red` tables): these profiles replace `min`,
    /// `max` and `max_p`.
    pub colors: Option<ColorRedSpec>,
}

/// Three-colour RED as written: one drop profile per colour and how averages are kept.
#[derive(Clone, Debug, PartialEq)]
pub struct ColorRedSpec {
    /// Green, yellow, red: `(min, max, max_p)`, all in packets or all in bytes.
    pub profiles: [(Limit, Limit, f64); 3],
    pub averaging: crate::queue::gred::GredAveraging,
}

impl RedSpec {
    /// Floyd & Jacobson's suggested values (min_th 5 packets, max_th 15 packets = 3×min,
    /// max_p 1/50, w_q 0.002) with Floyd's later "gentle" ramp (2000) on, as most
    /// deployments run RED today.
    pub fn defaults() -> Self {
        RedSpec {
            min: Limit::Packets(5),
            max: Limit::Packets(15),
            max_p: 0.02,
            wq: 0.002,
            gentle: true,
            colors: None,
        }
    }
}

/// Per-session settings of a per-flow-queued class.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSpec {
    /// Assured rate per session, bits/s (resolved from a percentage of the class rate).
    pub guarantee: Option<u64>,
    /// Cap per session, bits/s.
    pub ceil: Option<u64>,
    /// Depth of each session's cap bucket, bytes, as written (`None`: the default, see
    /// [`SessionSpec::cap_burst`]).
    pub burst: Option<u32>,
    pub buckets: u32,
    pub flow_limit: u32,
    /// The class has a `[class.session]` table.
    pub configured: bool,
}

impl SessionSpec {
    /// Depth of each session's cap bucket in bytes: the written `burst`, else one `mtu`
    /// plus 1 ms at the cap (tc's `rate/HZ + mtu`, as a class's `burst`).
    pub fn cap_burst(&self, mtu: u32) -> Option<u32> {
        let cap = self.ceil?;
        Some(self.burst.unwrap_or_else(|| compile::burst_for(cap, mtu)))
    }
}

/// A class's rates in one direction, where they differ by direction (`inbound_rate`,
/// `inbound_ceil`, `[link] inbound_rate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirRates {
    pub rate: u64,
    pub ceil: u64,
    pub burst: u32,
    pub cburst: u32,
    /// The DRR quantum (the default one resolved among its siblings' inbound rates).
    pub quantum: u32,
}

/// A validated class.
#[derive(Clone, Debug)]
pub struct ClassDef {
    pub name: String,
    /// Index of the parent in `Policy::classes` (`None` for the root).
    pub parent: Option<usize>,
    pub rate: u64,
    pub ceil: u64,
    pub prio: u8,
    pub quantum: u32,
    pub burst: u32,
    pub cburst: u32,
    pub leaf: bool,
    pub queue: QueueKind,
    pub limit: Limit,
    pub red: Option<RedSpec>,
    /// The delay-based AQM of the leaf's queue (CoDel, COBALT; `None` without).
    pub aqm: AqmKind,
    /// CoDel/COBALT `target` and `interval` as written (`None`: CAKE's defaults for the
    /// class rate, [`crate::aqm::AqmParams::for_rate`]).
    pub target: Option<Duration>,
    pub interval: Option<Duration>,
    /// Whether the AQM (CoDel, COBALT, RED) marks ECN-capable packets instead of dropping.
    pub ecn: bool,
    /// Flow queuing's host isolation.
    pub isolate: Isolation,
    /// Flow queuing's ACK filter.
    pub ack_filter: AckFilterMode,
    pub session: SessionSpec,
    /// The queue keys as written in the file, before a technique was applied.
    pub written: Written,
    /// MSS clamping of the class's TCP connections (`mss`; inherited by children).
    pub mss: Option<MssCap>,
    /// TCP rate control of the class's connections as written (`tcr`; inherited by
    /// children; `None`: as the technique says).
    pub tcr: Option<bool>,
    /// Admission control of a leaf's sessions (`max_sessions`, `admission`,
    /// `session_idle`).
    pub admission: Option<crate::admission::Spec>,
    /// The DiffServ meter of the class's packets (`meter`; index into `Policy::meters`;
    /// inherited by children, who then share it). A rule's meter wins.
    pub meter: Option<usize>,
    /// Line of the definition, for messages.
    pub line: usize,
    /// Its rates inbound, when the policy's differ by direction (`None`: as `rate`,
    /// `ceil`); [`Policy::for_direction`] puts them in place.
    pub inbound: Option<DirRates>,
    /// Made from the subscriber table (`[subscribers]`): a node or a circuit.
    pub subscriber: Option<SubscriberClass>,
}

/// What a class made from the subscriber table stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriberClass {
    /// A node of `network.json` (a site, an access point).
    Node,
    /// A circuit of `ShapedDevices.csv`: a leaf whose queue exists only while it has
    /// traffic ([`crate::queue::lazy`]).
    Circuit,
}

/// The subscriber table of a policy (`[subscribers]`), as the classifier uses it: every
/// circuit's prefixes → its class, and what was loaded.
#[derive(Clone, Debug)]
pub struct Subscribers {
    /// Prefix → index in `Policy::classes` of the circuit's class.
    pub table: std::sync::Arc<crate::classify::lpm::PrefixTable>,
    /// The entries the table was built from (to split it over workers).
    pub entries: std::sync::Arc<Vec<(crate::classify::IpNet, u32)>>,
    /// The files as named in the policy (resolved against its directory).
    pub shaped_devices: String,
    pub network: Option<String>,
    /// Node classes, circuit classes, prefixes.
    pub nodes: usize,
    pub circuits: usize,
    pub prefixes: usize,
}

/// An `mss` key: the MSS a TCP connection's SYN and SYN-ACK are clamped to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MssCap {
    /// Bytes of TCP payload per segment.
    Bytes(u16),
    /// `"pmtu"`: the link's IP MTU (`[link] mtu` − 14) less the IP and TCP headers.
    Pmtu,
}

/// A leaf's queue settings as written (`None` = not written).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    pub queue: Option<QueueKind>,
    pub limit: Option<Limit>,
    /// `Some(None)` is `red = false`.
    pub red: Option<Option<RedSpec>>,
    pub aqm: Option<AqmChoice>,
    pub ecn: Option<bool>,
    pub isolate: Option<Isolation>,
    pub ack_filter: Option<AckFilterMode>,
}

impl ClassDef {
    /// Resolve the leaf's queue from a technique and what the file says. Normally the
    /// class's own `queue`/`aqm`/`red`/`ecn`/`isolate`/`ack_filter` keys win over the
    /// technique; `forced` (the testbed and `--technique`) makes the technique decide the
    /// queue kind, the AQM and whether RED is on, the class's `red` table, `target` and
    /// `interval` still giving the parameters (so a seed preset is exactly what the
    /// papers measured). An unwritten `limit` takes the default of the resulting queue.
    /// Where the written keys and the preset do not fit together (RED on a flow queue,
    /// CoDel on seed 000's per-flow queue), the written keys win and the preset's queue
    /// kind gives way; keys that cannot fit at all are the compiler's errors
    /// (`compile/class.rs`).
    fn apply(&mut self, t: Technique, forced: bool) {
        let w = if forced {
            Written {
                limit: self.written.limit,
                ..Written::default()
            }
        } else {
            self.written.clone()
        };
        let red_params = || {
            self.written
                .red
                .clone()
                .flatten()
                .unwrap_or_else(RedSpec::defaults)
        };
        // the AQM: written (`aqm`, or a `red` table), else the preset's
        let (red, aqm) = match (w.aqm, &w.red) {
            (Some(AqmChoice::Red), _) => (Some(red_params()), AqmKind::None),
            (Some(AqmChoice::Delay(k)), _) => (None, k),
            (None, Some(r)) => (r.clone(), AqmKind::None),
            (None, None) => (t.red().then(red_params), t.aqm()),
        };
        self.red = red;
        self.aqm = aqm;
        // the queue: written, else the preset's — unless the AQM asks for another kind
        self.queue = w.queue.unwrap_or_else(|| {
            let q = t.queue();
            let colours = self.red.as_ref().is_some_and(|r| r.colors.is_some());
            match q {
                // three-colour RED keeps one FIFO (packets of a flow never reorder)
                _ if colours && !forced => QueueKind::Fifo,
                // RED runs on a FIFO or per flow in seed 000's queue, not in flow queuing
                QueueKind::Fq if self.red.is_some() => QueueKind::Fifo,
                // CoDel and COBALT per flow are flow queuing
                QueueKind::Pfq if aqm != AqmKind::None => QueueKind::Fq,
                q => q,
            }
        });
        self.limit = w.limit.unwrap_or(match (self.queue, self.aqm) {
            (QueueKind::Pfq, _) => Limit::Packets(DEFAULT_PFQ_LIMIT),
            (QueueKind::Fq, _) => Limit::Packets(FqConfig::LIMIT_PACKETS),
            (QueueKind::Fifo, AqmKind::None) => Limit::Packets(DEFAULT_FIFO_LIMIT),
            (QueueKind::Fifo, _) => Limit::Packets(AqmFifoConfig::LIMIT),
        });
        // ECN: on with CoDel/COBALT, off with RED (the seed papers' RED dropped)
        self.ecn = w.ecn.unwrap_or(self.aqm != AqmKind::None);
        self.isolate = w.isolate.unwrap_or_else(|| t.isolate());
        self.ack_filter = w.ack_filter.unwrap_or_default();
    }
}

/// A validated classifier rule.
#[derive(Clone, Debug)]
pub struct RuleDef {
    pub name: String,
    pub class: usize,
    pub m: Match,
    /// Index into `Policy::emulators` of the profile this rule's packets take.
    pub emulate: Option<usize>,
    /// MSS clamping of the connections this rule starts (wins over the class's `mss`).
    pub mss: Option<MssCap>,
    /// The DiffServ meter of the rule's packets (index into `Policy::meters`).
    pub meter: Option<usize>,
    /// The DSCP an edge router writes into the rule's packets before metering them
    /// (`mark`: seed 004's service handler).
    pub mark: Option<u8>,
}

/// A validated policy. `classes[0]` is the root (the link); parents precede children.
#[derive(Clone, Debug)]
pub struct Policy {
    pub file: String,
    pub link_rate: u64,
    /// `[link] inbound_rate`: the link's rate inbound, when it differs.
    pub inbound_link_rate: Option<u64>,
    /// The framing's per-frame overhead (bytes added to each frame), for what takes a
    /// plain overhead; rates take [`Policy::framing`], which also has the mpu and cells.
    pub overhead: i32,
    /// How the link counts a frame's bytes (`[link]` `framing`, `overhead`, `mpu`, `atm`,
    /// `ptm`).
    pub framing: crate::framing::Framing,
    pub mtu: u32,
    pub technique: Technique,
    pub shapes: Shapes,
    pub default_class: usize,
    pub classes: Vec<ClassDef>,
    pub rules: Vec<RuleDef>,
    /// Impairment profiles (`[[emulate]]`), selected per rule.
    pub emulators: Vec<EmuDef>,
    /// The profiles of packets whose rule names none (`[link] emulate`; `weir emu --up
    /// --down` has one per direction): the first whose direction covers a packet's.
    pub default_emulate: Vec<usize>,
    /// Seed of the random number generator (RED, per-flow hashing, emulation).
    pub seed: u64,
    /// DiffServ role of the router (`[link] role`).
    pub role: crate::diffserv::Role,
    /// DiffServ meters (`[[meter]]`), selected per rule or class.
    pub meters: Vec<crate::diffserv::MeterDef>,
    /// The adaptive controller (`[adapt]`), if any.
    pub adapt: Option<AdaptDef>,
    /// The rules' layer-7 conditions (`http.*`, `tls.*`), one bit each.
    pub l7: crate::app::l7::L7Set,
    /// The subscriber table (`[subscribers]`), looked up before the rules.
    pub subscribers: Option<Subscribers>,
    /// `[link] super_packets`: which TSO/GSO super-packets may cross whole.
    pub super_packets: crate::whole::SuperPackets,
    /// Advice that does not stop the policy from working.
    pub warnings: Vec<PolicyError>,
}

const DEFAULT_FIFO_LIMIT: u32 = 100;
const DEFAULT_PFQ_LIMIT: u32 = PfqConfig::DEFAULT.limit;
const DEFAULT_FLOW_LIMIT: u32 = PfqConfig::DEFAULT.flow_limit;
const DEFAULT_BUCKETS: u32 = PfqConfig::DEFAULT.buckets;

impl Policy {
    /// Parse and validate policy text; `file` is used in messages. Files the policy names
    /// (an emulator's `trace`) cannot be read: use [`Policy::load`] for those.
    pub fn parse(file: &str, text: &str) -> Result<Policy, PolicyErrors> {
        Self::parse_in(file, text, None)
    }

    /// [`Policy::parse`], reading the files the policy names relative to `dir`.
    pub fn parse_in(
        file: &str,
        text: &str,
        dir: Option<&std::path::Path>,
    ) -> Result<Policy, PolicyErrors> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| toml_error(file, text, e))?;
        let mut src = Src {
            file,
            text,
            dir,
            errors: vec![],
            warnings: vec![],
        };
        let policy = compile(&mut src, raw);
        // the policy's own messages first, then each file it names (a subscriber table),
        // by position; a summary of a file (line 0) after that file's messages
        let order = |e: &PolicyError| (e.file != file, e.file.clone(), e.line == 0, e.line, e.col);
        if !src.errors.is_empty() {
            src.errors.sort_by_key(order);
            return Err(PolicyErrors(src.errors));
        }
        let mut p = policy.expect("no errors implies a policy");
        p.warnings = src.warnings;
        let unenforced = session_warnings(&p);
        p.warnings.extend(unenforced);
        p.warnings.sort_by_key(order);
        Ok(p)
    }

    /// Read and validate a policy file.
    pub fn load(path: &std::path::Path) -> Result<Policy, PolicyErrors> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            PolicyErrors(vec![PolicyError {
                file: name.clone(),
                line: 0,
                col: 0,
                msg: format!("cannot read policy: {e}"),
            }])
        })?;
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        Self::parse_in(&name, &text, Some(dir))
    }

    /// The same policy with another technique preset (what the testbed compares).
    pub fn with_technique(&self, t: Technique) -> Policy {
        let mut p = self.clone();
        for c in p.classes.iter_mut() {
            if c.leaf {
                c.apply(t, true);
            }
            // forced: the technique decides TCR as it decides the queue
            c.tcr = None;
        }
        p.technique = t;
        p.warnings
            .retain(|w| !w.msg.contains("not enforced under technique"));
        let unenforced = session_warnings(&p);
        p.warnings.extend(unenforced);
        p
    }

    /// The same policy with every TCP connection clamped to `cap` (every class's and
    /// rule's `mss` replaced): what the testbed's `weir:TECHNIQUE+mssN` DUTs run.
    pub fn with_mss(&self, cap: MssCap) -> Policy {
        let mut p = self.clone();
        for c in p.classes.iter_mut() {
            c.mss = Some(cap);
        }
        for r in p.rules.iter_mut() {
            r.mss = Some(cap);
        }
        p
    }

    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }
    pub fn leaves(&self) -> impl Iterator<Item = usize> + '_ {
        self.classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.leaf)
            .map(|(i, _)| i)
    }
    pub fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.classes
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.parent == Some(i))
            .map(|(i, _)| i)
    }

    /// A policy that only emulates (what `weir emu` runs): every packet travelling in
    /// `direction` through one profile, `emu`; nothing shaped or classified.
    pub fn emulation(cfg: EmuConfig, direction: Shapes, seed: u64) -> Result<Policy, String> {
        cfg.validate().map_err(|e| e.to_string())?;
        if direction == Shapes::None {
            return Err("an emulated link needs a direction".into());
        }
        // the link rate of a policy that shapes nothing is never used
        let p = Policy::parse(
            "weir emu",
            "[link]\nrate = \"100Gbit\"\ndirection = \"none\"\n",
        )
        .map_err(|e| e.to_string())?;
        Ok(p.emulating(cfg, direction, seed))
    }

    /// `self` with every packet travelling in `direction` through one emulator profile,
    /// `emu`, and the seed: the part both emulation policies share.
    fn emulating(mut self, cfg: EmuConfig, direction: Shapes, seed: u64) -> Policy {
        self.emulators = vec![EmuDef {
            name: "emu".into(),
            cfg,
            direction,
        }];
        self.default_emulate = vec![0];
        self.seed = seed;
        self
    }

    /// An asymmetric emulated link (`weir emu --up … --down …`, `mm-link UP DOWN`): `up`
    /// for outbound packets (LAN → WAN), `down` for inbound, each its own link.
    pub fn emulation_pair(up: EmuConfig, down: EmuConfig, seed: u64) -> Result<Policy, String> {
        let mut p = Policy::emulation(up, Shapes::Outbound, seed)?;
        down.validate().map_err(|e| e.to_string())?;
        p.emulators[0].name = "up".into();
        p.emulators.push(EmuDef {
            name: "down".into(),
            cfg: down,
            direction: Shapes::Inbound,
        });
        p.default_emulate = vec![0, 1];
        Ok(p)
    }

    /// [`Policy::emulation`] whose bottleneck queue is managed (`weir emu --aqm`): the
    /// link's rate moves from the emulator's serialiser to a shaper of that rate in the
    /// same direction(s), whose only leaf (the link) has the queue of `technique`
    /// (`fq_cobalt`, `fq_codel`: flow queuing with COBALT or CoDel and ECN) or a FIFO with
    /// `aqm` (CoDel or COBALT, ECN on); the emulator behind it keeps the delay, jitter,
    /// loss, duplication and corruption. `limit` is the managed queue's (default: its
    /// own). Needs a fixed rate: a rate schedule or a trace is the serialiser's.
    pub fn emulation_managed(
        mut cfg: EmuConfig,
        direction: Shapes,
        seed: u64,
        queue: (Technique, Option<AqmKind>),
    ) -> Result<Policy, String> {
        cfg.validate().map_err(|e| e.to_string())?;
        if cfg.capacity.is_some() {
            return Err("--aqm needs a fixed --rate: a rate schedule or a trace runs in the emulator's serialiser, which has no AQM".into());
        }
        let Some(rate) = cfg.rate_bps.take() else {
            return Err("--aqm needs --rate: without a rate nothing queues".into());
        };
        let (technique, aqm) = queue;
        let dir = match direction {
            Shapes::Outbound => "outbound",
            Shapes::Inbound => "inbound",
            Shapes::Both => "both",
            Shapes::None => return Err("an emulated link needs a direction".into()),
        };
        let mut text = format!(
            "[link]\nrate = \"{rate}bit\"\ndirection = \"{dir}\"\ntechnique = \"{}\"\nmtu = {}\n\
             default = \"line\"\n[[class]]\nname = \"line\"\nrate = \"100%\"\n",
            technique.name(),
            cfg.mtu
        );
        match (cfg.limit_packets.take(), cfg.limit_bytes.take()) {
            (Some(n), _) => text += &format!("limit = \"{n}p\"\n"),
            (None, Some(b)) => text += &format!("limit = \"{b}B\"\n"),
            (None, None) => {}
        }
        if let Some(k) = aqm {
            text += &format!("queue = \"fifo\"\naqm = \"{}\"\n", k.name());
        }
        let mut p = Policy::parse("weir emu", &text).map_err(|e| e.to_string())?;
        p.framing = cfg.framing;
        p.overhead = cfg.framing.overhead();
        Ok(p.emulating(cfg, direction, seed))
    }
}
