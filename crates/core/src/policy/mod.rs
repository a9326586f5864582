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
//! `cbq+pfq`, `cbq+pfq+red`); a class's own `queue`/`red` keys override it.
//! The full reference is docs/policy.md. Every error carries `file:line:col`.

use crate::classify::{parse_dscp, parse_vlan, Classifier, IpNet, Match, PortSet, Proto, Rule};
pub use crate::device::Device;
use crate::emulate::{self, EmuConfig, Emulator};
use crate::pipeline::EmuStage;
pub use crate::pipeline::Pipeline;
use crate::pipeline::Stage;
use crate::pool::Direction;
use crate::qdisc::Qdisc;
use crate::queue::fifo::Fifo;
use crate::queue::pfq::{Pfq, PfqConfig};
use crate::queue::red::{RedMode, RedParams, RedQueue};
use crate::rate::Rate;
use crate::sched::linkshare::{ClassId, ClassSpec, LinkShare, MAX_LEVEL, MAX_QUANTUM, PRIOS};
use crate::time::Instant;
use crate::units::{self, fmt_rate, fmt_size, Limit};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use toml::{Spanned, Value};

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
}

impl Technique {
    pub const ALL: [Technique; 4] = [
        Technique::Cbq,
        Technique::CbqRed,
        Technique::CbqPfq,
        Technique::CbqPfqRed,
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
        }
    }
    fn pfq(self) -> bool {
        matches!(self, Technique::CbqPfq | Technique::CbqPfqRed)
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
    Fifo,
    Pfq,
}

/// RED thresholds as written: packets or bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct RedSpec {
    pub min: Limit,
    pub max: Limit,
    pub max_p: f64,
    pub wq: f64,
    pub gentle: bool,
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
    pub buckets: u32,
    pub flow_limit: u32,
    /// The class has a `[class.session]` table.
    pub configured: bool,
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
    pub session: SessionSpec,
    /// The queue keys as written in the file, before a technique was applied.
    pub written: Written,
    /// Line of the definition, for messages.
    pub line: usize,
}

/// A leaf's queue settings as written (`None` = not written).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    pub queue: Option<QueueKind>,
    pub limit: Option<Limit>,
    /// `Some(None)` is `red = false`.
    pub red: Option<Option<RedSpec>>,
}

impl ClassDef {
    /// Resolve the leaf's queue from a technique and what the file says. Normally the
    /// class's own `queue`/`red` keys win over the technique; `forced` (the testbed and
    /// `--technique`) makes the technique decide the queue kind and whether RED is on,
    /// the class's `red` table still giving the parameters. An unwritten `limit` takes
    /// the default of the resulting queue kind.
    fn apply(&mut self, t: Technique, forced: bool) {
        let by_technique = if t.pfq() {
            QueueKind::Pfq
        } else {
            QueueKind::Fifo
        };
        self.queue = match self.written.queue {
            Some(q) if !forced => q,
            _ => by_technique,
        };
        self.limit = self.written.limit.unwrap_or(match self.queue {
            QueueKind::Pfq => Limit::Packets(DEFAULT_PFQ_LIMIT),
            QueueKind::Fifo => Limit::Packets(DEFAULT_FIFO_LIMIT),
        });
        let params = || {
            self.written
                .red
                .clone()
                .flatten()
                .unwrap_or_else(RedSpec::defaults)
        };
        self.red = match &self.written.red {
            Some(r) if !forced => r.clone(),
            _ => t.red().then(params),
        };
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
}

/// A validated policy. `classes[0]` is the root (the link); parents precede children.
#[derive(Clone, Debug)]
pub struct Policy {
    pub file: String,
    pub link_rate: u64,
    pub overhead: i32,
    pub mtu: u32,
    pub technique: Technique,
    pub shapes: Shapes,
    pub default_class: usize,
    pub classes: Vec<ClassDef>,
    pub rules: Vec<RuleDef>,
    /// Impairment profiles (`[[emulate]]`), selected per rule.
    pub emulators: Vec<EmuDef>,
    /// The profile of packets whose rule names none (`[link] emulate`).
    pub default_emulate: Option<usize>,
    /// Seed of the random number generator (RED, per-flow hashing, emulation).
    pub seed: u64,
    /// Advice that does not stop the policy from working.
    pub warnings: Vec<PolicyError>,
}

// ---- raw TOML ------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    link: Spanned<RawLink>,
    #[serde(default, rename = "class")]
    classes: Vec<Spanned<RawClass>>,
    #[serde(default, rename = "rule")]
    rules: Vec<Spanned<RawRule>>,
    #[serde(default, rename = "emulate")]
    emulators: Vec<Spanned<RawEmulate>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmulate {
    name: Spanned<String>,
    rate: Option<Spanned<Value>>,
    overhead: Option<Spanned<i64>>,
    mtu: Option<Spanned<i64>>,
    delay: Option<Spanned<Value>>,
    jitter: Option<Spanned<Value>>,
    distribution: Option<Spanned<String>>,
    reorder: Option<bool>,
    loss: Option<Spanned<Value>>,
    duplicate: Option<Spanned<Value>>,
    corrupt: Option<Spanned<Value>>,
    limit: Option<Spanned<Value>>,
    direction: Option<Spanned<String>>,
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    rate: Spanned<Value>,
    overhead: Option<Spanned<i64>>,
    mtu: Option<Spanned<i64>>,
    technique: Option<Spanned<String>>,
    default: Option<Spanned<String>>,
    direction: Option<Spanned<String>>,
    emulate: Option<Spanned<String>>,
    seed: Option<Spanned<i64>>,
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: Spanned<String>,
    parent: Option<Spanned<String>>,
    rate: Spanned<Value>,
    ceil: Option<Spanned<Value>>,
    prio: Option<Spanned<i64>>,
    quantum: Option<Spanned<Value>>,
    burst: Option<Spanned<Value>>,
    cburst: Option<Spanned<Value>>,
    queue: Option<Spanned<String>>,
    limit: Option<Spanned<Value>>,
    red: Option<Spanned<Value>>,
    session: Option<Spanned<RawSession>>,
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSession {
    guarantee: Option<Spanned<Value>>,
    ceil: Option<Spanned<Value>>,
    buckets: Option<Spanned<i64>>,
    limit: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRed {
    min: Option<Value>,
    max: Option<Value>,
    max_p: Option<f64>,
    wq: Option<f64>,
    gentle: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<Spanned<String>>,
    class: Option<Spanned<String>>,
    emulate: Option<Spanned<String>>,
    src: Option<Spanned<Value>>,
    dst: Option<Spanned<Value>>,
    proto: Option<Spanned<Value>>,
    sport: Option<Spanned<Value>>,
    dport: Option<Spanned<Value>>,
    port: Option<Spanned<Value>>,
    dscp: Option<Spanned<Value>>,
    vlan: Option<Spanned<Value>>,
}

// ---- error positions ------------------------------------------------------------------

struct Src<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<PolicyError>,
    warnings: Vec<PolicyError>,
}

impl<'a> Src<'a> {
    fn pos(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
        (line, col)
    }
    fn at(&self, span: std::ops::Range<usize>, msg: impl Into<String>) -> PolicyError {
        let (line, col) = self.pos(span.start);
        PolicyError {
            file: self.file.to_string(),
            line,
            col,
            msg: msg.into(),
        }
    }
    fn err(&mut self, span: std::ops::Range<usize>, msg: impl Into<String>) {
        let e = self.at(span, msg);
        self.errors.push(e);
    }
    fn warn(&mut self, span: std::ops::Range<usize>, msg: impl Into<String>) {
        let e = self.at(span, msg);
        self.warnings.push(e);
    }
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.pos(span.start).0
    }
}

/// A TOML scalar as the text a unit parser reads (numbers become their decimal text).
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

/// Parse a spanned scalar with `f`, recording an error (prefixed by `key`) on failure.
fn parse_with<T, E: fmt::Display>(
    src: &mut Src<'_>,
    key: &str,
    v: &Spanned<Value>,
    f: impl Fn(&str) -> Result<T, E>,
) -> Option<T> {
    let Some(text) = scalar_text(v.get_ref()) else {
        src.err(
            v.span(),
            format!(
                "`{key}`: expected a string or number, found {}",
                v.get_ref().type_str()
            ),
        );
        return None;
    };
    match f(&text) {
        Ok(x) => Some(x),
        Err(e) => {
            src.err(v.span(), format!("`{key}`: {e}"));
            None
        }
    }
}

/// A value that may be one item or an array of items.
fn items(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    }
}

fn parse_list<T>(
    src: &mut Src<'_>,
    key: &str,
    v: &Spanned<Value>,
    f: impl Fn(&str) -> Result<T, units::UnitError>,
) -> Option<Vec<T>> {
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        src.err(v.span(), format!("`{key}`: empty list matches nothing"));
        return None;
    }
    for item in list {
        let Some(text) = scalar_text(item) else {
            src.err(
                v.span(),
                format!(
                    "`{key}`: expected strings or numbers, found {}",
                    item.type_str()
                ),
            );
            return None;
        };
        match f(&text) {
            Ok(x) => out.push(x),
            Err(e) => {
                src.err(v.span(), format!("`{key}`: {e}"));
                return None;
            }
        }
    }
    Some(out)
}

fn parse_ports(src: &mut Src<'_>, key: &str, v: &Spanned<Value>) -> Option<PortSet> {
    let sets = parse_list(src, key, v, PortSet::parse)?;
    let ranges: Vec<(u16, u16)> = sets
        .iter()
        .flat_map(|s| s.ranges().iter().copied())
        .collect();
    match PortSet::from_ranges(ranges) {
        Ok(s) => Some(s),
        Err(e) => {
            src.err(v.span(), format!("`{key}`: {e}"));
            None
        }
    }
}

fn toml_error(file: &str, text: &str, e: toml::de::Error) -> PolicyErrors {
    let src = Src {
        file,
        text,
        errors: vec![],
        warnings: vec![],
    };
    let span = e.span().unwrap_or(0..0);
    let msg = e.message().trim().to_string();
    PolicyErrors(vec![src.at(span, msg)])
}

const DEFAULT_FIFO_LIMIT: u32 = 100;
const DEFAULT_PFQ_LIMIT: u32 = PfqConfig::DEFAULT.limit;
const DEFAULT_FLOW_LIMIT: u32 = PfqConfig::DEFAULT.flow_limit;
const DEFAULT_BUCKETS: u32 = PfqConfig::DEFAULT.buckets;
/// Largest default quantum (bytes) when quanta are derived from rates.
const MAX_DEFAULT_QUANTUM: u64 = 200_000;

impl Policy {
    /// Parse and validate policy text; `file` is used in messages.
    pub fn parse(file: &str, text: &str) -> Result<Policy, PolicyErrors> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| toml_error(file, text, e))?;
        let mut src = Src {
            file,
            text,
            errors: vec![],
            warnings: vec![],
        };
        let policy = compile(&mut src, raw);
        if !src.errors.is_empty() {
            src.errors.sort_by_key(|e| (e.line, e.col));
            return Err(PolicyErrors(src.errors));
        }
        let mut p = policy.expect("no errors implies a policy");
        p.warnings = src.warnings;
        let unenforced = session_warnings(&p);
        p.warnings.extend(unenforced);
        p.warnings.sort_by_key(|w| (w.line, w.col));
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
        Self::parse(&name, &text)
    }

    /// The same policy with another technique preset (what the testbed compares).
    pub fn with_technique(&self, t: Technique) -> Policy {
        let mut p = self.clone();
        for c in p.classes.iter_mut().filter(|c| c.leaf) {
            c.apply(t, true);
        }
        p.technique = t;
        p.warnings
            .retain(|w| !w.msg.contains("not enforced under technique"));
        let unenforced = session_warnings(&p);
        p.warnings.extend(unenforced);
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

    fn leaf_queue(&self, c: &ClassDef) -> Result<Box<dyn Qdisc>, String> {
        let red = c.red.as_ref().map(|r| self.red_params(c, r));
        Ok(match c.queue {
            QueueKind::Fifo => {
                let (p, b) = match c.limit {
                    Limit::Packets(n) => (n, u64::MAX),
                    Limit::Bytes(b) => (u32::MAX, b),
                };
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
                    session_ceil: c.session.ceil.map(|bps| {
                        (
                            Rate::with_overhead(bps, self.overhead),
                            self.mtu + (bps / 8000) as u32,
                        )
                    }),
                })?)
            }
        })
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
        };
        p.validate()
            .map_err(|e| format!("class '{}': RED {e}", c.name))?;
        Ok(p)
    }

    /// Build the runnable pipeline at time `now`.
    pub fn build(&self, now: Instant) -> Result<Pipeline, String> {
        let mut specs = Vec::with_capacity(self.classes.len());
        for c in &self.classes {
            specs.push(ClassSpec {
                name: c.name.clone(),
                parent: c.parent.map(|p| p as ClassId),
                rate: Rate::with_overhead(c.rate, self.overhead),
                ceil: Rate::with_overhead(c.ceil, self.overhead),
                burst: c.burst,
                cburst: c.cburst,
                prio: c.prio,
                quantum: c.quantum,
                queue: if c.leaf {
                    Some(self.leaf_queue(c)?)
                } else {
                    None
                },
            });
        }
        let sched = LinkShare::new(specs, self.default_class as ClassId, now)?;
        let rules = self
            .rules
            .iter()
            .map(|r| Rule {
                m: r.m.clone(),
                class: r.class as u32,
                name: r.name.clone(),
            })
            .collect();
        let classifier =
            Classifier::new(rules, self.default_class as u32).map_err(|e| e.to_string())?;
        Ok(Pipeline::new(
            classifier,
            vec![Stage::Shape(sched)],
            0x5eed_f10e,
        ))
    }

    /// The live pipeline for traffic travelling in `dir`: shaped if `[link] direction`
    /// covers it, emulated if any `[[emulate]]` profile in use applies to it; `None` when
    /// neither (the direction is forwarded untouched).
    pub fn build_direction(
        &self,
        dir: Direction,
        now: Instant,
    ) -> Result<Option<Pipeline>, String> {
        let emu = self.emulator_for(dir)?;
        let shaped = self.shapes.covers(dir);
        if !shaped && emu.is_none() {
            return Ok(None);
        }
        let mut p = self.build(now)?;
        if !shaped {
            p.stages.clear();
        }
        p.stages.extend(emu.map(Stage::Emulate));
        Ok(Some(p))
    }

    /// The device for this policy at time `now`: each direction's pipeline as
    /// [`Policy::build_direction`] makes it, and a connection table when the policy shapes
    /// (`[link] direction` other than `none`). The only way to assemble a [`Device`] from
    /// a policy.
    pub fn build_device(&self, now: Instant) -> Result<Device, String> {
        Device::new(
            self.build_direction(Direction::Outbound, now)?,
            self.build_direction(Direction::Inbound, now)?,
            self.overhead,
            self.file.clone(),
            // a policy that only emulates keeps no table: nothing in an emulator uses one
            // yet, and its per-packet lookups widen the emulator's delay spread (weir lab
            // fidelity at 80 kpps: p90 - p10 from under 50 us to 86-120 us)
            (self.shapes != Shapes::None).then(|| crate::conn::ConnConfig {
                seed: self.seed,
                ..crate::conn::ConnConfig::default()
            }),
        )
    }

    /// A policy that only emulates (what `weir emu` runs): every packet travelling in
    /// `direction` through one profile, `emu`; nothing shaped or classified.
    pub fn emulation(cfg: EmuConfig, direction: Shapes, seed: u64) -> Result<Policy, String> {
        cfg.validate().map_err(|e| e.to_string())?;
        if direction == Shapes::None {
            return Err("an emulated link needs a direction".into());
        }
        // the link rate of a policy that shapes nothing is never used
        let mut p = Policy::parse(
            "weir emu",
            "[link]\nrate = \"100Gbit\"\ndirection = \"none\"\n",
        )
        .map_err(|e| e.to_string())?;
        p.emulators = vec![EmuDef {
            name: "emu".into(),
            cfg,
            direction,
        }];
        p.default_emulate = Some(0);
        p.seed = seed;
        Ok(p)
    }

    /// The emulation stage for `dir`: profile 0 is `[link] emulate` (or transparent), one
    /// profile per `[[emulate]]` used in that direction (others are transparent there),
    /// rules routed to theirs. `None` when nothing is emulated in `dir`.
    pub fn emulator_for(&self, dir: Direction) -> Result<Option<EmuStage>, String> {
        let applies = |i: usize| self.emulators[i].direction.covers(dir);
        let used_default = self.default_emulate.filter(|&i| applies(i));
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

    /// A human-readable tree of the compiled policy (what `weir check` prints).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "link {}  technique {}  shapes {}  default class '{}'  mtu {}  overhead {}B\n",
            fmt_rate(self.link_rate),
            self.technique.name(),
            self.shapes.name(),
            self.classes[self.default_class].name,
            self.mtu,
            self.overhead
        ));
        s.push_str(&format!(
            "{:<28} {:>11} {:>11} {:>4} {:>8}  {}\n",
            "class", "rate", "ceil", "prio", "quantum", "queue"
        ));
        self.describe_class(0, "", true, &mut s);
        if self.rules.is_empty() {
            s.push_str("rules: none (everything goes to the default class)\n");
        } else {
            s.push_str("rules (first match wins):\n");
            for (i, r) in self.rules.iter().enumerate() {
                s.push_str(&format!(
                    "  {:>3}  {:<16} -> {:<14} {}\n",
                    i + 1,
                    r.name,
                    self.classes[r.class].name,
                    describe_match(&r.m)
                ));
            }
            s.push_str(&format!(
                "  default          -> {}\n",
                self.classes[self.default_class].name
            ));
        }
        if !self.emulators.is_empty() {
            s.push_str(&format!("emulation (seed {}):\n", self.seed));
            for e in &self.emulators {
                s.push_str(&format!(
                    "  {:<16} {:<9} {}\n",
                    e.name,
                    e.direction.name(),
                    emulate::spec::describe(&e.cfg)
                ));
            }
            for r in self.rules.iter().filter(|r| r.emulate.is_some()) {
                s.push_str(&format!(
                    "  rule {:<11} -> {}\n",
                    r.name,
                    self.emulators[r.emulate.unwrap()].name
                ));
            }
            if let Some(d) = self.default_emulate {
                s.push_str(&format!(
                    "  other traffic    -> {}\n",
                    self.emulators[d].name
                ));
            }
        }
        s
    }

    fn describe_class(&self, i: usize, prefix: &str, last: bool, s: &mut String) {
        let c = &self.classes[i];
        let (branch, next_prefix) = if i == 0 {
            (String::new(), String::new())
        } else if last {
            (format!("{prefix}└─ "), format!("{prefix}   "))
        } else {
            (format!("{prefix}├─ "), format!("{prefix}│  "))
        };
        let label = format!("{branch}{}", c.name);
        let queue = if c.leaf {
            self.describe_queue(c)
        } else {
            String::new()
        };
        let pad = 28usize.saturating_sub(label.chars().count());
        s.push_str(&format!(
            "{label}{:pad$} {:>11} {:>11} {:>4} {:>8}  {queue}\n",
            "",
            fmt_rate(c.rate),
            fmt_rate(c.ceil),
            if i == 0 {
                "-".to_string()
            } else {
                c.prio.to_string()
            },
            if i == 0 {
                "-".to_string()
            } else {
                fmt_size(c.quantum as u64)
            },
        ));
        let kids: Vec<usize> = self.children(i).collect();
        for (k, &ch) in kids.iter().enumerate() {
            self.describe_class(ch, &next_prefix, k + 1 == kids.len(), s);
        }
    }

    fn describe_queue(&self, c: &ClassDef) -> String {
        let mut q = match c.queue {
            QueueKind::Fifo => format!("fifo limit {}", c.limit),
            QueueKind::Pfq => {
                let mut q = format!(
                    "pfq {} buckets, flow limit {}p, limit {}",
                    c.session.buckets, c.session.flow_limit, c.limit
                );
                if let Some(g) = c.session.guarantee {
                    q += &format!(
                        ", guarantee {}/session (up to {} sessions)",
                        fmt_rate(g),
                        c.rate / g.max(1)
                    );
                }
                if let Some(cap) = c.session.ceil {
                    q += &format!(", cap {}/session", fmt_rate(cap));
                }
                q
            }
        };
        if let Some(r) = &c.red {
            let per = if c.queue == QueueKind::Pfq {
                " per flow"
            } else {
                ""
            };
            q += &format!(
                ", red{per} {}..{} max_p {} wq {}{}",
                r.min,
                r.max,
                r.max_p,
                r.wq,
                if r.gentle { " gentle" } else { "" }
            );
        }
        q
    }
}

fn describe_match(m: &Match) -> String {
    let mut parts = Vec::new();
    if let Some(p) = m.proto {
        parts.push(Proto::name(p).map_or(format!("proto {p}"), str::to_string));
    }
    let nets = |v: &[IpNet]| {
        v.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if !m.src.is_empty() {
        parts.push(format!("src {}", nets(&m.src)));
    }
    if !m.dst.is_empty() {
        parts.push(format!("dst {}", nets(&m.dst)));
    }
    if let Some(p) = &m.sport {
        parts.push(format!("sport {p}"));
    }
    if let Some(p) = &m.dport {
        parts.push(format!("dport {p}"));
    }
    if let Some(p) = &m.port {
        parts.push(format!("port {p}"));
    }
    if let Some(d) = &m.dscp {
        parts.push(format!(
            "dscp {}",
            d.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
        ));
    }
    if let Some(v) = &m.vlan {
        parts.push(format!(
            "vlan {}",
            v.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
        ));
    }
    if parts.is_empty() {
        "any".into()
    } else {
        parts.join(" ")
    }
}

/// A class while it is being resolved (rates may be percentages of the parent).
struct Pending {
    raw: Spanned<RawClass>,
    parent: Option<usize>,
}

fn compile(src: &mut Src<'_>, raw: RawPolicy) -> Option<Policy> {
    let link_span = raw.link.span();
    let link = raw.link.into_inner();
    let _ = &link.description;
    let link_rate = parse_with(src, "rate", &link.rate, units::parse_rate);
    let mtu = link
        .mtu
        .as_ref()
        .and_then(|m| parse_mtu(src, m))
        .unwrap_or(1514);
    let overhead = match &link.overhead {
        None => 0,
        Some(o) if (-64..=256).contains(o.get_ref()) => *o.get_ref() as i32,
        Some(o) => {
            src.err(
                o.span(),
                format!(
                    "`overhead`: {} is outside -64..=256 bytes per frame",
                    o.get_ref()
                ),
            );
            0
        }
    };
    let technique = match &link.technique {
        None => Technique::Cbq,
        Some(t) => Technique::parse(t.get_ref()).unwrap_or_else(|| {
            src.err(
                t.span(),
                format!(
                    "`technique`: unknown technique '{}'; expected one of: {}",
                    t.get_ref(),
                    Technique::ALL.map(|t| t.name()).join(", ")
                ),
            );
            Technique::Cbq
        }),
    };
    let shapes = parse_direction(src, link.direction.as_ref(), true);

    // --- names, parents, cycles -----------------------------------------------------
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    for c in raw.classes {
        let name = c.get_ref().name.get_ref().clone();
        let nspan = c.get_ref().name.span();
        if name == ROOT || name == "root" {
            src.err(
                nspan,
                format!("class name '{name}' is reserved for the link itself"),
            );
            continue;
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        {
            src.err(
                nspan,
                format!("class name '{name}': use letters, digits, '-', '_' or '.'"),
            );
            continue;
        }
        if let Some(&first) = index.get(&name) {
            let line = src.line(pending[first].raw.span());
            src.err(
                nspan,
                format!("duplicate class name '{name}' (first defined at line {line})"),
            );
            continue;
        }
        index.insert(name, pending.len());
        pending.push(Pending {
            raw: c,
            parent: None,
        });
    }
    let mut parent_ok = vec![true; pending.len()];
    for i in 0..pending.len() {
        let pname = pending[i]
            .raw
            .get_ref()
            .parent
            .as_ref()
            .map(|p| (p.get_ref().clone(), p.span()));
        match pname {
            None => pending[i].parent = None,
            Some((p, _)) if p == ROOT || p == "root" => pending[i].parent = None,
            Some((p, span)) => match index.get(&p) {
                Some(&j) => pending[i].parent = Some(j),
                None => {
                    src.err(span, format!("`parent`: '{p}' is not a defined class"));
                    parent_ok[i] = false;
                }
            },
        }
    }
    // cycle detection: follow parents; more than n steps means a cycle
    let n = pending.len();
    let mut in_cycle = vec![false; n];
    for i in 0..n {
        let mut seen = vec![i];
        let mut c = i;
        while let Some(p) = pending[c].parent {
            if p == i {
                if !in_cycle[i] {
                    let path: Vec<&str> = seen
                        .iter()
                        .chain(std::iter::once(&i))
                        .map(|&k| pending[k].raw.get_ref().name.get_ref().as_str())
                        .collect();
                    for &k in &seen {
                        in_cycle[k] = true;
                    }
                    let span = pending[i].raw.get_ref().parent.as_ref().unwrap().span();
                    src.err(span, format!("parent cycle: {}", path.join(" -> ")));
                }
                break;
            }
            if seen.contains(&p) || seen.len() > n {
                break; // a cycle not through i; reported from its own members
            }
            seen.push(p);
            c = p;
        }
    }
    if in_cycle.iter().any(|&x| x) || parent_ok.iter().any(|&x| !x) {
        return None;
    }
    // with a bad link rate, go on checking the classes against a placeholder (the
    // assured-rate sums against it are not reported)
    let link_known = link_rate.is_some();
    let link_rate = link_rate.unwrap_or(u64::MAX / 4);

    // --- topological order: root, then each class after its parent -------------------
    let mut order: Vec<usize> = Vec::new();
    fn visit(i: usize, pending: &[Pending], order: &mut Vec<usize>) {
        if order.contains(&i) {
            return;
        }
        if let Some(p) = pending[i].parent {
            visit(p, pending, order);
        }
        order.push(i);
    }
    for i in 0..n {
        visit(i, &pending, &mut order);
    }
    // pending index -> policy index (root is 0)
    let mut pos = vec![0usize; n];
    for (k, &i) in order.iter().enumerate() {
        pos[i] = k + 1;
    }
    let mut has_children = vec![false; n + 1];
    for p in &pending {
        has_children[p.parent.map_or(0, |j| pos[j])] = true;
    }

    let mut root = ClassDef {
        name: ROOT.into(),
        parent: None,
        rate: link_rate,
        ceil: link_rate,
        prio: 0,
        quantum: mtu,
        burst: burst_for(link_rate, mtu),
        cburst: burst_for(link_rate, mtu),
        leaf: n == 0,
        queue: QueueKind::Fifo,
        limit: Limit::Packets(DEFAULT_FIFO_LIMIT),
        red: None,
        session: SessionSpec {
            guarantee: None,
            ceil: None,
            buckets: DEFAULT_BUCKETS,
            flow_limit: DEFAULT_FLOW_LIMIT,
            configured: false,
        },
        written: Written::default(),
        line: src.line(link_span.clone()),
    };
    root.apply(technique, false);
    let mut classes = vec![root];
    let mut spans = vec![link.rate.span()];
    for &i in &order {
        let c = pending[i].raw.get_ref();
        let k = classes.len();
        let parent = pending[i].parent.map_or(0, |j| pos[j]);
        let (prate, pceil) = (classes[parent].rate, classes[parent].ceil);
        let rate = parse_with(src, "rate", &c.rate, units::parse_share).map(|s| s.of(prate));
        let ceil = match &c.ceil {
            None => Some(pceil),
            Some(v) => parse_with(src, "ceil", v, units::parse_share).map(|s| s.of(pceil)),
        };
        let (rate, ceil) = match (rate, ceil) {
            (Some(r), Some(ce)) => (r, ce),
            _ => (1, 1),
        };
        let (rate, ceil) = if rate == 0 {
            src.err(c.rate.span(), "`rate`: resolves to 0 bit/s");
            (1, ceil.max(1))
        } else {
            (rate, ceil)
        };
        if ceil < rate {
            let span = c.ceil.as_ref().map_or(c.rate.span(), |v| v.span());
            src.err(
                span,
                format!(
                    "`ceil` {} is below the class's rate {}",
                    fmt_rate(ceil),
                    fmt_rate(rate)
                ),
            );
        } else if ceil > pceil {
            let span = c.ceil.as_ref().map_or(c.rate.span(), |v| v.span());
            src.warn(
                span,
                format!(
                    "class '{}': ceil {} exceeds its parent's ceil {}; the parent limits it",
                    c.name.get_ref(),
                    fmt_rate(ceil),
                    fmt_rate(pceil)
                ),
            );
        }
        let prio = match &c.prio {
            None => 0,
            Some(p) if (0..PRIOS as i64).contains(p.get_ref()) => *p.get_ref() as u8,
            Some(p) => {
                src.err(
                    p.span(),
                    format!(
                        "`prio`: {} is outside 0..={} (0 is highest)",
                        p.get_ref(),
                        PRIOS - 1
                    ),
                );
                0
            }
        };
        let size = |src: &mut Src<'_>, key: &str, v: &Option<Spanned<Value>>| -> Option<u32> {
            let v = v.as_ref()?;
            let b = parse_with(src, key, v, units::parse_size)?;
            if b == 0 || b > MAX_QUANTUM as u64 {
                src.err(
                    v.span(),
                    format!("`{key}`: {} is out of range", fmt_size(b)),
                );
                return None;
            }
            Some(b as u32)
        };
        let quantum = size(src, "quantum", &c.quantum);
        let burst = size(src, "burst", &c.burst).unwrap_or_else(|| burst_for(rate, mtu));
        let cburst = size(src, "cburst", &c.cburst).unwrap_or_else(|| burst_for(ceil, mtu));
        let leaf = !has_children[k];
        let written_queue = match c.queue.as_ref().map(|q| (q.get_ref().as_str(), q.span())) {
            None => None,
            Some(("fifo", _)) => Some(QueueKind::Fifo),
            Some(("pfq", _)) => Some(QueueKind::Pfq),
            Some((other, span)) => {
                src.err(span, format!("`queue`: '{other}' is not one of fifo, pfq"));
                None
            }
        };
        if !leaf {
            for (key, present) in [
                ("queue", c.queue.as_ref().map(|v| v.span())),
                ("limit", c.limit.as_ref().map(|v| v.span())),
                ("red", c.red.as_ref().map(|v| v.span())),
                ("session", c.session.as_ref().map(|v| v.span())),
            ] {
                if let Some(span) = present {
                    src.err(span, format!("`{key}`: class '{}' has children, so it has no queue of its own; set `{key}` on its leaf classes", c.name.get_ref()));
                }
            }
        }
        let written_limit = match &c.limit {
            Some(v) => match parse_with(src, "limit", v, units::parse_limit) {
                Some(Limit::Packets(0)) | Some(Limit::Bytes(0)) => {
                    src.err(v.span(), "`limit`: must be positive");
                    None
                }
                l => l,
            },
            None => None,
        };
        let written = Written {
            queue: written_queue,
            limit: written_limit,
            red: c.red.as_ref().map(|v| parse_red(src, v)),
        };
        let mut session = SessionSpec {
            guarantee: None,
            ceil: None,
            buckets: DEFAULT_BUCKETS,
            flow_limit: DEFAULT_FLOW_LIMIT,
            configured: false,
        };
        if let Some(s) = &c.session {
            let s = s.get_ref();
            if let Some(g) = &s.guarantee {
                session.guarantee =
                    parse_with(src, "guarantee", g, units::parse_share).map(|x| x.of(rate));
                if session.guarantee == Some(0) {
                    src.err(g.span(), "`guarantee`: resolves to 0 bit/s");
                    session.guarantee = None;
                } else if session.guarantee.is_some_and(|g| g > rate) {
                    src.err(
                        g.span(),
                        format!("`guarantee`: more than the class rate {}", fmt_rate(rate)),
                    );
                }
            }
            if let Some(v) = &s.ceil {
                session.ceil = parse_with(src, "ceil", v, units::parse_share).map(|x| x.of(ceil));
                if session.ceil == Some(0) {
                    src.err(v.span(), "session `ceil`: resolves to 0 bit/s");
                    session.ceil = None;
                }
                if let (Some(cap), Some(g)) = (session.ceil, session.guarantee) {
                    if cap < g {
                        src.err(
                            v.span(),
                            format!(
                                "session `ceil` {} is below the session guarantee {}",
                                fmt_rate(cap),
                                fmt_rate(g)
                            ),
                        );
                    }
                }
            }
            if let Some(b) = &s.buckets {
                match u32::try_from(*b.get_ref()) {
                    Ok(x) if (1..=1 << 24).contains(&x) => session.buckets = Pfq::round_buckets(x),
                    _ => src.err(
                        b.span(),
                        format!("`buckets`: {} is outside 1..=16777216", b.get_ref()),
                    ),
                }
            }
            if let Some(v) = &s.limit {
                match parse_with(src, "limit", v, units::parse_limit) {
                    Some(Limit::Packets(p)) if p > 0 => session.flow_limit = p,
                    Some(Limit::Bytes(b)) if b > 0 => {
                        session.flow_limit = (b / mtu as u64).max(1) as u32
                    }
                    Some(_) => src.err(v.span(), "`limit`: must be positive"),
                    None => {}
                }
            }
            session.configured = true;
            if leaf && written.queue == Some(QueueKind::Fifo) {
                src.err(
                    c.session.as_ref().unwrap().span(),
                    "per-session settings need per-flow queuing: remove `queue = \"fifo\"` or the [class.session] table",
                );
            }
        }
        let mut def = ClassDef {
            name: c.name.get_ref().clone(),
            parent: Some(parent),
            rate,
            ceil,
            prio,
            quantum: quantum.unwrap_or(0),
            burst,
            cburst,
            leaf,
            queue: QueueKind::Fifo,
            limit: Limit::Packets(DEFAULT_FIFO_LIMIT),
            red: None,
            session,
            written,
            line: src.line(pending[i].raw.span()),
        };
        def.apply(technique, false);
        classes.push(def);
        spans.push(c.rate.span());
        let _ = &c.description;
    }

    // --- depth, assured-rate sums, default quanta ------------------------------------
    for k in 1..classes.len() {
        let mut depth = 0;
        let mut c = k;
        while let Some(p) = classes[c].parent {
            depth += 1;
            c = p;
        }
        if depth > MAX_LEVEL {
            src.err(
                spans[k].clone(),
                format!(
                    "class '{}' is {depth} levels deep; at most {MAX_LEVEL} are supported",
                    classes[k].name
                ),
            );
        }
    }
    for p in 0..classes.len() {
        let kids: Vec<usize> = (0..classes.len())
            .filter(|&k| classes[k].parent == Some(p))
            .collect();
        if kids.is_empty() {
            continue;
        }
        let sum: u64 = kids.iter().map(|&k| classes[k].rate).sum();
        if sum > classes[p].rate && (link_known || p != 0) {
            let names: Vec<String> = kids
                .iter()
                .map(|&k| format!("{} {}", classes[k].name, fmt_rate(classes[k].rate)))
                .collect();
            src.err(
                spans[p].clone(),
                format!(
                    "children of '{}' are assured {} in total ({}), more than its rate {}",
                    classes[p].name,
                    fmt_rate(sum),
                    names.join(" + "),
                    fmt_rate(classes[p].rate)
                ),
            );
        }
        // default quantum: proportional to rate among siblings, the smallest gets one MTU
        let min_rate = kids
            .iter()
            .map(|&k| classes[k].rate)
            .min()
            .unwrap_or(1)
            .max(1);
        for &k in &kids {
            if classes[k].quantum == 0 {
                let q = (mtu as u128 * classes[k].rate as u128 / min_rate as u128) as u64;
                classes[k].quantum = q.clamp(mtu as u64, MAX_DEFAULT_QUANTUM) as u32;
            }
        }
    }

    // --- default class and rules ------------------------------------------------------
    let leaf_index = |name: &str| classes.iter().position(|c| c.name == name);
    let default_class = match &link.default {
        None => {
            if classes.len() == 1 {
                0
            } else {
                src.err(link_span.clone(), "[link] needs `default = \"CLASS\"`: the leaf class for traffic no rule matches (ARP, ND, anything unclassified)");
                0
            }
        }
        Some(d) => match leaf_index(d.get_ref()) {
            Some(i) if classes[i].leaf => i,
            Some(_) => {
                src.err(
                    d.span(),
                    format!(
                        "`default`: '{}' has children; the default must be a leaf class",
                        d.get_ref()
                    ),
                );
                0
            }
            None => {
                src.err(
                    d.span(),
                    format!("`default`: '{}' is not a defined class", d.get_ref()),
                );
                0
            }
        },
    };
    let (emulators, emu_index) = compile_emulators(src, &raw.emulators, mtu);
    let default_emulate = link.emulate.as_ref().and_then(|e| {
        let i = emu_index.get(e.get_ref()).copied();
        if i.is_none() {
            src.err(
                e.span(),
                format!(
                    "`emulate`: '{}' is not a defined [[emulate]] profile",
                    e.get_ref()
                ),
            );
        }
        i
    });
    let seed = match &link.seed {
        None => DEFAULT_SEED,
        Some(v) if *v.get_ref() >= 0 => *v.get_ref() as u64,
        Some(v) => {
            src.err(v.span(), "`seed`: must be a non-negative integer");
            DEFAULT_SEED
        }
    };
    let rule_spans: Vec<_> = raw.rules.iter().map(|r| r.span()).collect();
    let mut rules = Vec::new();
    for (ri, r) in raw.rules.iter().enumerate() {
        let r = r.get_ref();
        let name = r
            .name
            .as_ref()
            .map_or(format!("rule{}", ri + 1), |n| n.get_ref().clone());
        let emulate = match &r.emulate {
            None => None,
            Some(e) => match emu_index.get(e.get_ref()) {
                Some(&i) => Some(i),
                None => {
                    src.err(
                        e.span(),
                        format!(
                            "`emulate`: '{}' is not a defined [[emulate]] profile",
                            e.get_ref()
                        ),
                    );
                    continue;
                }
            },
        };
        let class = match &r.class {
            None if emulate.is_some() => default_class,
            None => {
                src.err(
                    rule_spans[ri].clone(),
                    "a rule needs a `class` to send traffic to, an `emulate` profile, or both",
                );
                continue;
            }
            Some(rc) => match leaf_index(rc.get_ref()) {
                Some(i) if classes[i].leaf => i,
                Some(_) => {
                    src.err(
                        rc.span(),
                        format!(
                            "`class`: '{}' has children; rules must name a leaf class",
                            rc.get_ref()
                        ),
                    );
                    continue;
                }
                None => {
                    src.err(
                        rc.span(),
                        format!("`class`: '{}' is not a defined class", rc.get_ref()),
                    );
                    continue;
                }
            },
        };
        let mut m = Match::default();
        if let Some(v) = &r.src {
            m.src = parse_list(src, "src", v, IpNet::parse).unwrap_or_default();
        }
        if let Some(v) = &r.dst {
            m.dst = parse_list(src, "dst", v, IpNet::parse).unwrap_or_default();
        }
        if let Some(v) = &r.proto {
            m.proto = parse_with(src, "proto", v, Proto::parse);
        }
        if let Some(v) = &r.sport {
            m.sport = parse_ports(src, "sport", v);
        }
        if let Some(v) = &r.dport {
            m.dport = parse_ports(src, "dport", v);
        }
        if let Some(v) = &r.port {
            m.port = parse_ports(src, "port", v);
        }
        if let Some(v) = &r.dscp {
            m.dscp = parse_list(src, "dscp", v, parse_dscp);
        }
        if let Some(v) = &r.vlan {
            m.vlan = parse_list(src, "vlan", v, parse_vlan);
        }
        if (m.sport.is_some() || m.dport.is_some() || m.port.is_some())
            && m.proto.is_some_and(|p| ![6u8, 17].contains(&p))
        {
            let span = r.proto.as_ref().unwrap().span();
            src.err(span, "port conditions only match TCP and UDP packets; with this `proto` the rule can never match");
        }
        rules.push(RuleDef {
            name,
            class,
            m,
            emulate,
        });
    }
    for (i, c) in classes.iter().enumerate() {
        if c.leaf && i != default_class && !rules.iter().any(|r| r.class == i) {
            let span = spans[i].clone();
            src.warn(
                span,
                format!("class '{}' has no rule sending traffic to it", c.name),
            );
        }
    }

    Some(Policy {
        file: src.file.to_string(),
        link_rate,
        overhead,
        mtu,
        technique,
        shapes,
        default_class,
        classes,
        rules,
        emulators,
        default_emulate,
        seed,
        warnings: vec![],
    })
}

/// An `mtu` key: 68..=65535 bytes, else an error and `None`.
fn parse_mtu(src: &mut Src<'_>, m: &Spanned<i64>) -> Option<u32> {
    match u32::try_from(*m.get_ref()) {
        Ok(x) if (68..=65_535).contains(&x) => Some(x),
        _ => {
            src.err(
                m.span(),
                format!("`mtu`: {} is outside 68..=65535 bytes", m.get_ref()),
            );
            None
        }
    }
}

/// A `direction` key: outbound (default), inbound, both, and `none` where `allow_none`.
/// An unknown value is an error listing the valid ones, and reads as outbound.
fn parse_direction(src: &mut Src<'_>, d: Option<&Spanned<String>>, allow_none: bool) -> Shapes {
    match d.map(|d| d.get_ref().as_str()) {
        None | Some("outbound") => Shapes::Outbound,
        Some("inbound") => Shapes::Inbound,
        Some("both") => Shapes::Both,
        Some("none") if allow_none => Shapes::None,
        Some(other) => {
            let valid = if allow_none {
                "outbound, inbound, both, none"
            } else {
                "outbound, inbound, both"
            };
            src.err(
                d.unwrap().span(),
                format!("`direction`: '{other}' is not one of {valid}"),
            );
            Shapes::Outbound
        }
    }
}

/// Compile the `[[emulate]]` profiles; returns them and a name → index map.
fn compile_emulators(
    src: &mut Src<'_>,
    raw: &[Spanned<RawEmulate>],
    link_mtu: u32,
) -> (Vec<EmuDef>, HashMap<String, usize>) {
    let mut out = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    for e in raw {
        let span = e.span();
        let e = e.get_ref();
        let _ = &e.description;
        let name = e.name.get_ref().clone();
        if let Some(&first) = index.get(&name) {
            let line = src.line(spans[first].clone());
            src.err(
                e.name.span(),
                format!("duplicate [[emulate]] name '{name}' (first defined at line {line})"),
            );
            continue;
        }
        let mut cfg = EmuConfig {
            mtu: link_mtu,
            ..EmuConfig::default()
        };
        if let Some(v) = &e.rate {
            cfg.rate_bps = parse_with(src, "rate", v, units::parse_rate);
        }
        if let Some(o) = &e.overhead {
            match i32::try_from(*o.get_ref()) {
                Ok(x) if x.abs() <= EmuConfig::MAX_OVERHEAD => cfg.overhead = x,
                _ => src.err(
                    o.span(),
                    format!(
                        "`overhead`: {} is outside ±{} bytes per frame",
                        o.get_ref(),
                        EmuConfig::MAX_OVERHEAD
                    ),
                ),
            }
        }
        if let Some(m) = e.mtu.as_ref().and_then(|m| parse_mtu(src, m)) {
            cfg.mtu = m;
        }
        if let Some(v) = &e.delay {
            if let Some(ns) = parse_with(src, "delay", v, units::parse_duration) {
                cfg.delay = crate::time::Duration(ns);
            }
        }
        let jitter_ns = e
            .jitter
            .as_ref()
            .and_then(|v| parse_with(src, "jitter", v, units::parse_duration));
        match (&e.distribution, jitter_ns) {
            (Some(d), None) if e.jitter.is_none() => {
                src.err(d.span(), "`distribution`: needs a `jitter` width to shape")
            }
            (d, Some(ns)) => {
                let (dist, dspan) = d.as_ref().map_or(("uniform", span.clone()), |d| {
                    (d.get_ref().as_str(), d.span())
                });
                match emulate::spec::parse_jitter(ns, dist) {
                    Ok(j) => cfg.jitter = j,
                    Err(msg) => src.err(dspan, format!("`distribution`: {msg}")),
                }
            }
            _ => {}
        }
        cfg.reorder = e.reorder.unwrap_or(false);
        if let Some(v) = &e.loss {
            cfg.loss = parse_with(src, "loss", v, emulate::spec::parse_loss).unwrap_or_default();
        }
        if let Some(v) = &e.duplicate {
            cfg.duplicate =
                parse_with(src, "duplicate", v, emulate::spec::parse_prob).unwrap_or(0.0);
        }
        if let Some(v) = &e.corrupt {
            cfg.corrupt = parse_with(src, "corrupt", v, emulate::spec::parse_prob).unwrap_or(0.0);
        }
        if let Some(v) = &e.limit {
            match parse_with(src, "limit", v, units::parse_limit) {
                Some(Limit::Packets(n)) if n > 0 => cfg.limit_packets = Some(n),
                Some(Limit::Bytes(b)) if b > 0 => cfg.limit_bytes = Some(b),
                Some(_) => src.err(v.span(), "`limit`: must be positive"),
                None => {}
            }
        }
        let direction = parse_direction(src, e.direction.as_ref(), false);
        if let Err(err) = cfg.validate() {
            src.err(span.clone(), format!("[[emulate]] '{name}': {err}"));
        }
        if cfg.is_transparent() {
            src.warn(
                span.clone(),
                format!("[[emulate]] '{name}' changes nothing (no rate, delay, jitter, loss, duplication or corruption)"),
            );
        }
        index.insert(name.clone(), out.len());
        spans.push(span.clone());
        out.push(EmuDef {
            name,
            cfg,
            direction,
        });
    }
    (out, index)
}

/// Warnings for leaves whose per-session settings the resolved queue cannot enforce.
fn session_warnings(p: &Policy) -> Vec<PolicyError> {
    p.classes
        .iter()
        .filter(|c| c.leaf && c.session.configured && c.queue == QueueKind::Fifo)
        .map(|c| PolicyError {
            file: p.file.clone(),
            line: c.line,
            col: 1,
            msg: format!(
                "class '{}': per-session settings are not enforced under technique {} (no per-flow queuing)",
                c.name,
                p.technique.name()
            ),
        })
        .collect()
}

/// Default bucket depth: one MTU plus 1 ms at the rate (tc's `rate/HZ + mtu`).
fn burst_for(rate: u64, mtu: u32) -> u32 {
    (mtu as u64 + rate / 8 / 1000).min(u32::MAX as u64 / 4) as u32
}

fn parse_red(src: &mut Src<'_>, v: &Spanned<Value>) -> Option<RedSpec> {
    match v.get_ref() {
        Value::Boolean(false) => None,
        Value::Boolean(true) => Some(RedSpec::defaults()),
        Value::Table(t) => {
            let raw = match RawRed::deserialize(Value::Table(t.clone())) {
                Ok(r) => r,
                Err(e) => {
                    src.err(v.span(), format!("`red`: {}", e.message().trim()));
                    return None;
                }
            };
            let mut r = RedSpec::defaults();
            let lim = |src: &mut Src<'_>, key: &str, x: &Option<Value>| -> Option<Limit> {
                let text = scalar_text(x.as_ref()?)?;
                match units::parse_limit(&text) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        src.err(v.span(), format!("`red.{key}`: {e}"));
                        None
                    }
                }
            };
            if let Some(l) = lim(src, "min", &raw.min) {
                r.min = l;
                if raw.max.is_none() {
                    r.max = match l {
                        Limit::Packets(p) => Limit::Packets(p.saturating_mul(3)),
                        Limit::Bytes(b) => Limit::Bytes(b.saturating_mul(3)),
                    };
                }
            }
            if let Some(l) = lim(src, "max", &raw.max) {
                r.max = l;
            }
            if let Some(p) = raw.max_p {
                r.max_p = p;
            }
            if let Some(w) = raw.wq {
                r.wq = w;
            }
            if let Some(g) = raw.gentle {
                r.gentle = g;
            }
            let same_kind = matches!(
                (r.min, r.max),
                (Limit::Packets(_), Limit::Packets(_)) | (Limit::Bytes(_), Limit::Bytes(_))
            );
            let (lo, hi) = match (r.min, r.max) {
                (Limit::Packets(a), Limit::Packets(b)) => (a as u64, b as u64),
                (Limit::Bytes(a), Limit::Bytes(b)) => (a, b),
                _ => (0, 0),
            };
            if !same_kind {
                src.err(
                    v.span(),
                    "`red`: min and max must both be in packets or both in bytes",
                );
            } else if lo == 0 || lo >= hi {
                src.err(
                    v.span(),
                    format!("`red`: need 0 < min < max, got min {} max {}", r.min, r.max),
                );
            }
            if !(r.max_p > 0.0 && r.max_p <= 1.0) {
                src.err(
                    v.span(),
                    format!("`red.max_p`: {} is outside (0, 1]", r.max_p),
                );
            }
            if !(r.wq > 0.0 && r.wq <= 1.0) {
                src.err(v.span(), format!("`red.wq`: {} is outside (0, 1]", r.wq));
            }
            Some(r)
        }
        other => {
            src.err(v.span(), format!("`red`: expected true, false or a table {{ min, max, max_p, wq, gentle }}, found {}", other.type_str()));
            None
        }
    }
}
