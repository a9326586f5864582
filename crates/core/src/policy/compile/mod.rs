//! Compile: the raw TOML (`raw.rs`) → the checked [`Policy`] model.
//!
//! One function per section of the file, in the order [`compile`] runs them: `[link]`,
//! class names, parents and cycles, the tree order, each class (rates, priority, sizes,
//! queue keys, per-session settings), depths, assured-rate sums and default quanta, the
//! default class, `[[emulate]]` profiles (`emulators.rs`), `[link] emulate` and `seed`,
//! the rules, and the warning for classes no rule feeds. Every problem is recorded in `Src` with its
//! position and compiling goes on where it can, so one run reports all of them
//! ([`Policy::parse`] sorts them by position).

use super::raw::{
    parse_direction, parse_list, parse_mtu, parse_ports, parse_with, RawClass, RawLink, RawPolicy,
    RawRule, Src,
};
use super::{
    ClassDef, DirRates, MssCap, Policy, PolicyError, QueueKind, RuleDef, SessionSpec, Shapes,
    Technique, Written, DEFAULT_BUCKETS, DEFAULT_FIFO_LIMIT, DEFAULT_FLOW_LIMIT, DEFAULT_SEED,
    ROOT,
};
use crate::classify::{parse_dscp, parse_vlan, IpNet, Match, Proto};
use crate::diffserv::Role;
use crate::framing::Framing;
use crate::sched::linkshare::MAX_LEVEL;
use crate::units::{self, fmt_rate, Limit};
use crate::whole::SuperPackets;
use std::collections::HashMap;
use toml::{Spanned, Value};

mod adapt;
mod app;
mod class;
mod diffserv;
mod emulators;
mod framing;
mod netem;
mod subscribers;

use class::compile_class;
use diffserv::{
    check_interior_rule, compile_meters, compile_role, meter_ref, rule_mark, warn_unused_meters,
};
use emulators::{compile_emulators, emulate_profile};
use framing::{compile_framing, FramingKeys};

/// Largest default quantum (bytes) when quanta are derived from rates.
const MAX_DEFAULT_QUANTUM: u64 = 200_000;

/// A class while it is being resolved (rates may be percentages of the parent).
struct Pending {
    raw: Spanned<RawClass>,
    parent: Option<usize>,
}

/// `[link]` as compiled: what the rest of the policy needs from it.
struct Link {
    /// `None` when `rate` is invalid (already reported).
    rate: Option<u64>,
    mtu: u32,
    framing: Framing,
    technique: Technique,
    shapes: Shapes,
    super_packets: SuperPackets,
}

/// The whole policy; `None` when the class tree cannot be built (errors are in `src`).
pub(super) fn compile(src: &mut Src<'_>, raw: RawPolicy) -> Option<Policy> {
    let link_span = raw.link.span();
    let link = raw.link.into_inner();
    let _ = &link.description;
    let Link {
        rate: link_rate,
        mtu,
        framing,
        technique,
        shapes,
        super_packets,
    } = compile_link(src, &link);

    let role = compile_role(src, &link);
    let (meters, meter_index) = compile_meters(src, &raw.meters, role, mtu.saturating_sub(14));
    let (mut pending, index) = class_names(src, raw.classes);
    let parents_ok = resolve_parents(src, &mut pending, &index);
    let cycles = find_cycles(src, &pending);
    if cycles || !parents_ok {
        return None;
    }
    // with a bad link rate, go on checking the classes against a placeholder (the
    // assured-rate sums against it are not reported)
    let link_known = link_rate.is_some();
    let link_rate = link_rate.unwrap_or(u64::MAX / 4);

    let (order, pos, mut has_children) = tree_order(&pending);
    // `[subscribers]`: the table is read now; its classes hang from `attach`
    let table = raw
        .subscribers
        .as_ref()
        .and_then(|s| subscribers::load(src, s));
    let attach = match raw
        .subscribers
        .as_ref()
        .and_then(|s| s.get_ref().parent.as_ref())
    {
        None => Some(0),
        Some(p) if p.get_ref() == ROOT || p.get_ref() == "root" => Some(0),
        Some(p) => match index.get(p.get_ref()) {
            Some(&j) => Some(pos[j]),
            None => {
                src.err(
                    p.span(),
                    format!("`parent`: '{}' is not a defined class", p.get_ref()),
                );
                None
            }
        },
    };
    if raw.subscribers.is_some() {
        // the attach point has children even if the file gives it none
        has_children[attach.unwrap_or(0)] = true;
    }
    let root = root_class(
        src,
        link_rate,
        mtu,
        technique,
        !has_children[0],
        link_span.clone(),
    );
    let mut classes = vec![root];
    let mut spans = vec![link.rate.span()];
    for &i in &order {
        let c = pending[i].raw.get_ref();
        let k = classes.len();
        let parent = pending[i].parent.map_or(0, |j| pos[j]);
        let mut def = compile_class(
            src,
            &pending[i].raw,
            (parent, &classes[parent]),
            !has_children[k],
            mtu,
            technique,
        );
        def.meter = c
            .meter
            .as_ref()
            .and_then(|v| meter_ref(src, v, &meter_index));
        classes.push(def);
        spans.push(c.rate.span());
        let _ = &c.description;
    }

    check_shares_and_quanta(src, &mut classes, &spans, link_known, mtu, "");
    let inbound_link_rate = link
        .inbound_rate
        .as_ref()
        .and_then(|v| parse_with(src, "inbound_rate", v, units::parse_rate));
    let any_inbound = link.inbound_rate.is_some()
        || raw.subscribers.is_some()
        || pending.iter().any(|p| {
            let c = p.raw.get_ref();
            c.inbound_rate.is_some() || c.inbound_ceil.is_some()
        });
    if any_inbound {
        let explicit: Vec<bool> = std::iter::once(true)
            .chain(
                order
                    .iter()
                    .map(|&i| pending[i].raw.get_ref().quantum.is_some()),
            )
            .collect();
        compile_inbound(
            src,
            (&mut classes, &spans, &explicit),
            inbound_link_rate.unwrap_or(link_rate),
            (link_known, mtu),
            |src, k, parent| {
                class::inbound_rates(src, pending[order[k - 1]].raw.get_ref(), parent, mtu)
            },
        );
    }
    let subscribers = match (table, attach) {
        (Some(table), Some(attach)) => {
            let s = subscribers::add_classes(
                src,
                (&mut classes, &mut spans),
                table,
                attach,
                (technique, mtu),
            );
            // the new classes' sums (they fit by construction) and quanta
            check_shares_and_quanta(src, &mut classes, &spans, link_known, mtu, "");
            inbound_shares_and_quanta(src, &mut classes, &spans, (link_known, mtu));
            s
        }
        _ => None,
    };
    // the whole tree's depths, the table's classes included
    check_depths(src, &classes, &spans);

    let default_class = compile_default_class(src, &link, &classes, link_span);
    let (emulators, emu_index) = compile_emulators(src, &raw.emulators, mtu);
    // `[link] emulate`: the profile of packets whose rule names none
    let default_emulate = link
        .emulate
        .as_ref()
        .and_then(|e| emulate_profile(src, e, &emu_index))
        .into_iter()
        .collect();
    let seed = compile_seed(src, &link);
    let mut l7 = crate::app::l7::L7Set::default();
    let rules = compile_rules(
        src,
        &mut l7,
        &raw.rules,
        &classes,
        default_class,
        (&emu_index, &meter_index, role),
    );
    warn_classes_without_rules(src, &classes, &rules, default_class, &spans);
    let used = classes.iter().filter_map(|c| c.meter);
    let used = used.chain(rules.iter().filter_map(|r| r.meter));
    warn_unused_meters(src, &raw.meters, &meter_index, used);
    let adapt = adapt::compile_adapt(src, raw.adapt.as_ref(), (link_rate, mtu, shapes), &classes);
    if let Some(a) = &raw.adapt {
        let _ = &a.get_ref().description;
    }

    Some(Policy {
        file: src.file.to_string(),
        link_rate,
        inbound_link_rate,
        overhead: framing.overhead(),
        framing,
        mtu,
        technique,
        shapes,
        default_class,
        classes,
        rules,
        emulators,
        default_emulate,
        seed,
        role,
        meters,
        adapt,
        l7,
        subscribers,
        super_packets,
        warnings: vec![],
    })
}

/// `[link]`: rate, mtu, framing, technique and direction.
fn compile_link(src: &mut Src<'_>, link: &RawLink) -> Link {
    let link_rate = parse_with(src, "rate", &link.rate, units::parse_rate);
    let mtu = link
        .mtu
        .as_ref()
        .and_then(|m| parse_mtu(src, m))
        .unwrap_or(1514);
    let keys = FramingKeys {
        framing: link.framing.as_ref(),
        overhead: link.overhead.as_ref(),
        mpu: link.mpu.as_ref(),
        atm: link.atm.as_ref(),
        ptm: link.ptm.as_ref(),
    };
    // CAKE's ranges (iproute2 tc/q_cake.c)
    let framing = compile_framing(src, keys, -64..=256, 256);
    let technique = match &link.technique {
        None => Technique::DEFAULT,
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
    let super_packets = match &link.super_packets {
        None => SuperPackets::default(),
        Some(s) => SuperPackets::parse(s.get_ref()).unwrap_or_else(|| {
            src.err(
                s.span(),
                format!(
                    "`super_packets`: unknown value '{}'; expected one of: auto, whole, split",
                    s.get_ref()
                ),
            );
            SuperPackets::default()
        }),
    };
    Link {
        rate: link_rate,
        mtu,
        framing,
        technique,
        shapes,
        super_packets,
    }
}

/// Class names: reserved, malformed and duplicate names are errors (and the class is
/// left out). Returns the classes in file order and a name → index map.
fn class_names(
    src: &mut Src<'_>,
    raw: Vec<Spanned<RawClass>>,
) -> (Vec<Pending>, HashMap<String, usize>) {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    for c in raw {
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
    (pending, index)
}

/// Resolve each class's `parent` (absent, `link` or `root` = the link). Returns whether
/// every parent is a defined class.
fn resolve_parents(
    src: &mut Src<'_>,
    pending: &mut [Pending],
    index: &HashMap<String, usize>,
) -> bool {
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
    parent_ok.iter().all(|&x| x)
}

/// Report parent cycles, once per cycle. Returns whether there is one.
fn find_cycles(src: &mut Src<'_>, pending: &[Pending]) -> bool {
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
    in_cycle.iter().any(|&x| x)
}

/// Topological order (each class after its parent), each class's index in the policy
/// (the root is 0) and, by policy index, whether a class has children.
fn tree_order(pending: &[Pending]) -> (Vec<usize>, Vec<usize>, Vec<bool>) {
    let n = pending.len();
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
        visit(i, pending, &mut order);
    }
    // pending index -> policy index (root is 0)
    let mut pos = vec![0usize; n];
    for (k, &i) in order.iter().enumerate() {
        pos[i] = k + 1;
    }
    let mut has_children = vec![false; n + 1];
    for p in pending {
        has_children[p.parent.map_or(0, |j| pos[j])] = true;
    }
    (order, pos, has_children)
}

/// The implicit root class: the link itself (a leaf when no class is defined).
fn root_class(
    src: &Src<'_>,
    link_rate: u64,
    mtu: u32,
    technique: Technique,
    no_classes: bool,
    link_span: std::ops::Range<usize>,
) -> ClassDef {
    let mut root = ClassDef {
        name: ROOT.into(),
        parent: None,
        rate: link_rate,
        ceil: link_rate,
        prio: 0,
        quantum: mtu,
        burst: burst_for(link_rate, mtu),
        cburst: burst_for(link_rate, mtu),
        leaf: no_classes,
        queue: QueueKind::Fifo,
        limit: Limit::Packets(DEFAULT_FIFO_LIMIT),
        red: None,
        aqm: crate::aqm::AqmKind::None,
        target: None,
        interval: None,
        ecn: false,
        isolate: Default::default(),
        ack_filter: Default::default(),
        session: SessionSpec {
            guarantee: None,
            ceil: None,
            burst: None,
            buckets: DEFAULT_BUCKETS,
            flow_limit: DEFAULT_FLOW_LIMIT,
            configured: false,
        },
        mss: None,
        tcr: None,
        admission: None,
        written: Written::default(),
        meter: None,
        line: src.line(link_span),
        inbound: None,
        subscriber: None,
    };
    root.apply(technique, false);
    root
}

/// Classes nested deeper than the scheduler supports.
fn check_depths(src: &mut Src<'_>, classes: &[ClassDef], spans: &[std::ops::Range<usize>]) {
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
}

/// Children's assured rates must fit in their parent's (the link's only when its rate is
/// known); quanta not written are derived from the rates among siblings.
/// The classes' inbound rates (`inbound`): the root's is the link's inbound rate, each
/// class's from `rate_of(src, index, parent's inbound (rate, ceil))` in tree order; then
/// the assured-rate sums checked and the default quanta resolved among them, as
/// outbound. `explicit[k]`: class `k` has its own `quantum`.
fn compile_inbound(
    src: &mut Src<'_>,
    (classes, spans, explicit): (&mut [ClassDef], &[std::ops::Range<usize>], &[bool]),
    link_rate: u64,
    (link_known, mtu): (bool, u32),
    mut rate_of: impl FnMut(&mut Src<'_>, usize, (u64, u64)) -> DirRates,
) {
    classes[0].inbound = Some(DirRates {
        rate: link_rate,
        ceil: link_rate,
        burst: burst_for(link_rate, mtu),
        cburst: burst_for(link_rate, mtu),
        quantum: classes[0].quantum,
    });
    for k in 1..classes.len() {
        let p = classes[k].parent.unwrap_or(0);
        let parent = classes[p].inbound.expect("parents come first");
        let mut d = rate_of(src, k, (parent.rate, parent.ceil));
        d.quantum = if explicit[k] { classes[k].quantum } else { 0 };
        classes[k].inbound = Some(d);
    }
    inbound_shares_and_quanta(src, classes, spans, (link_known, mtu));
}

/// [`check_shares_and_quanta`] of the classes' inbound rates; an inbound quantum of 0 is
/// resolved (every class has its `inbound`).
fn inbound_shares_and_quanta(
    src: &mut Src<'_>,
    classes: &mut [ClassDef],
    spans: &[std::ops::Range<usize>],
    (link_known, mtu): (bool, u32),
) {
    let mut inb: Vec<ClassDef> = classes
        .iter()
        .map(|c| {
            let d = c.inbound.expect("every class has its inbound rates");
            ClassDef {
                rate: d.rate,
                ceil: d.ceil,
                quantum: d.quantum,
                ..c.clone()
            }
        })
        .collect();
    check_shares_and_quanta(src, &mut inb, spans, link_known, mtu, " inbound");
    for (c, i) in classes.iter_mut().zip(&inb) {
        if let Some(d) = &mut c.inbound {
            d.quantum = i.quantum;
        }
    }
}

/// The children's assured rates against each parent's (an error past it) and the default
/// quanta; `dir`: "" or " inbound", for the messages.
fn check_shares_and_quanta(
    src: &mut Src<'_>,
    classes: &mut [ClassDef],
    spans: &[std::ops::Range<usize>],
    link_known: bool,
    mtu: u32,
    dir: &str,
) {
    let mut children = vec![Vec::new(); classes.len()];
    for (k, c) in classes.iter().enumerate() {
        if let Some(p) = c.parent {
            children[p].push(k);
        }
    }
    for (p, kids) in children.iter().enumerate() {
        if kids.is_empty() {
            continue;
        }
        let sum: u64 = kids.iter().map(|&k| classes[k].rate).sum();
        if sum > classes[p].rate && (link_known || p != 0) {
            let mut names: Vec<String> = kids
                .iter()
                .take(10)
                .map(|&k| format!("{} {}", classes[k].name, fmt_rate(classes[k].rate)))
                .collect();
            if kids.len() > 10 {
                names.push(format!("{} more", kids.len() - 10));
            }
            src.err(
                spans[p].clone(),
                format!(
                    "children of '{}' are assured {} in total{dir} ({}), more than its{dir} rate {}",
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
        for &k in kids {
            if classes[k].quantum == 0 {
                let q = (mtu as u128 * classes[k].rate as u128 / min_rate as u128) as u64;
                classes[k].quantum = q.clamp(mtu as u64, MAX_DEFAULT_QUANTUM) as u32;
            }
        }
    }
}

/// `[link] default`: the leaf class for traffic no rule matches.
fn compile_default_class(
    src: &mut Src<'_>,
    link: &RawLink,
    classes: &[ClassDef],
    link_span: std::ops::Range<usize>,
) -> usize {
    match &link.default {
        None => {
            if classes.len() == 1 {
                0
            } else {
                src.err(link_span, "[link] needs `default = \"CLASS\"`: the leaf class for traffic no rule matches (ARP, ND, anything unclassified)");
                0
            }
        }
        Some(d) => leaf_class(
            src,
            classes,
            "default",
            "the default must be a leaf class",
            d,
        )
        .unwrap_or(0),
    }
}

/// A key naming a leaf class (`[link] default`, a rule's `class`): its index, or an error
/// (`must` says why an inner class will not do).
fn leaf_class(
    src: &mut Src<'_>,
    classes: &[ClassDef],
    key: &str,
    must: &str,
    name: &Spanned<String>,
) -> Option<usize> {
    match classes.iter().position(|c| c.name == *name.get_ref()) {
        Some(i) if classes[i].leaf => Some(i),
        Some(_) => {
            src.err(
                name.span(),
                format!("`{key}`: '{}' has children; {must}", name.get_ref()),
            );
            None
        }
        None => {
            src.err(
                name.span(),
                format!("`{key}`: '{}' is not a defined class", name.get_ref()),
            );
            None
        }
    }
}

/// `[link] seed`.
fn compile_seed(src: &mut Src<'_>, link: &RawLink) -> u64 {
    match &link.seed {
        None => DEFAULT_SEED,
        Some(v) if *v.get_ref() >= 0 => *v.get_ref() as u64,
        Some(v) => {
            src.err(v.span(), "`seed`: must be a non-negative integer");
            DEFAULT_SEED
        }
    }
}

/// An `mss` key (class or rule): whole bytes of TCP payload, `MIN_MSS..=MAX_MSS`, or
/// `"pmtu"`.
fn mss_cap(src: &mut Src<'_>, v: &Spanned<Value>) -> Option<MssCap> {
    use crate::tcp::mss::{MAX_MSS, MIN_MSS};
    match v.get_ref() {
        Value::Integer(n) if (MIN_MSS as i64..=MAX_MSS as i64).contains(n) => {
            Some(MssCap::Bytes(*n as u16))
        }
        Value::Integer(n) => {
            src.err(
                v.span(),
                format!(
                    "`mss`: {n} is outside {MIN_MSS}..={MAX_MSS} (bytes of TCP payload per \
                     segment; {MIN_MSS} is the least Linux sends with)"
                ),
            );
            None
        }
        Value::String(s) if s == "pmtu" => Some(MssCap::Pmtu),
        other => {
            src.err(
                v.span(),
                format!(
                    "`mss`: expected bytes of TCP payload per segment (e.g. 256) or \"pmtu\", \
                     found {other}"
                ),
            );
            None
        }
    }
}

/// The `[[rule]]`s, in order; a rule with an error is left out.
fn compile_rules(
    src: &mut Src<'_>,
    l7: &mut crate::app::l7::L7Set,
    raw: &[Spanned<RawRule>],
    classes: &[ClassDef],
    default_class: usize,
    (emu_index, meter_index, role): (&HashMap<String, usize>, &HashMap<String, usize>, Role),
) -> Vec<RuleDef> {
    let rule_spans: Vec<_> = raw.iter().map(|r| r.span()).collect();
    let mut rules = Vec::new();
    for (ri, r) in raw.iter().enumerate() {
        let r = r.get_ref();
        let name = r
            .name
            .as_ref()
            .map_or(format!("rule{}", ri + 1), |n| n.get_ref().clone());
        let emulate = match &r.emulate {
            None => None,
            Some(e) => match emulate_profile(src, e, emu_index) {
                Some(i) => Some(i),
                None => continue,
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
            Some(rc) => match leaf_class(src, classes, "class", "rules must name a leaf class", rc)
            {
                Some(i) => i,
                None => continue,
            },
        };
        if role == Role::Interior {
            check_interior_rule(src, r);
        }
        let mut m = rule_match(src, r);
        m.l7 = app::rule_l7(src, r, l7);
        let mss = r.mss.as_ref().and_then(|v| mss_cap(src, v));
        let meter = r
            .meter
            .as_ref()
            .and_then(|v| meter_ref(src, v, meter_index));
        let mark = r.mark.as_ref().and_then(|v| rule_mark(src, v));
        rules.push(RuleDef {
            name,
            class,
            m,
            emulate,
            mss,
            meter,
            mark,
        });
    }
    rules
}

/// A rule's conditions.
fn rule_match(src: &mut Src<'_>, r: &RawRule) -> Match {
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
    if let Some(v) = &r.app {
        m.app = parse_list(src, "app", v, crate::app::App::parse);
    }
    if (m.sport.is_some() || m.dport.is_some() || m.port.is_some())
        && m.proto.is_some_and(|p| ![6u8, 17].contains(&p))
    {
        let span = r.proto.as_ref().unwrap().span();
        src.err(span, "port conditions only match TCP and UDP packets; with this `proto` the rule can never match");
    }
    m
}

/// Leaves (other than the default) that no rule sends traffic to.
fn warn_classes_without_rules(
    src: &mut Src<'_>,
    classes: &[ClassDef],
    rules: &[RuleDef],
    default_class: usize,
    spans: &[std::ops::Range<usize>],
) {
    for (i, c) in classes.iter().enumerate() {
        let table = c.subscriber.is_some();
        if c.leaf && !table && i != default_class && !rules.iter().any(|r| r.class == i) {
            let span = spans[i].clone();
            src.warn(
                span,
                format!("class '{}' has no rule sending traffic to it", c.name),
            );
        }
    }
}

/// Warnings for leaves whose per-session settings the resolved queue cannot enforce.
pub(super) fn session_warnings(p: &Policy) -> Vec<PolicyError> {
    let warn = |c: &ClassDef, msg: String| PolicyError {
        file: p.file.clone(),
        line: c.line,
        col: 1,
        msg,
    };
    let mut out = Vec::new();
    for c in p.classes.iter().filter(|c| c.leaf && c.session.configured) {
        match c.queue {
            QueueKind::Fifo => out.push(warn(
                c,
                format!(
                    "class '{}': per-session settings are not enforced under technique {} (no per-flow queuing)",
                    c.name,
                    p.technique.name()
                ),
            )),
            // flow queuing shares equally among flows (a guarantee holds while the flows
            // fit in the rate) but has no per-session cap or queue limit
            QueueKind::Fq if c.session.ceil.is_some() || c.session.flow_limit != DEFAULT_FLOW_LIMIT => {
                out.push(warn(
                    c,
                    format!(
                        "class '{}': a per-session `ceil` or `limit` is not enforced by flow queuing (queue = \"fq\"); seed 000's per-flow queue (queue = \"pfq\") enforces them",
                        c.name
                    ),
                ))
            }
            _ => {}
        }
    }
    out
}

/// Default bucket depth: one MTU plus 1 ms at the rate (tc's `rate/HZ + mtu`).
pub(super) fn burst_for(rate: u64, mtu: u32) -> u32 {
    (mtu as u64 + rate / 8 / 1000).min(u32::MAX as u64 / 4) as u32
}
