//! The kernel HTB translator: a weir [`Policy`] as the `tc` commands of an HTB tree with u32
//! filters, the kernel's counterpart of `weir:cbq` (`kernel:htb`), optionally with one
//! child class per session (`kernel:htb-perflow`). Pure: it runs nothing ([`htb_commands`]).
//!
//! # Policy → HTB (`kernel:htb`)
//!
//! Direction: outbound data (sender → receiver) leaves the DUT on `wan0`, inbound on `lan0`.
//! `[link] direction` decides which egress gets a tree: outbound → `wan0`, inbound → `lan0`,
//! both → both (the same tree and filters on each), none → no tree (a plain bridge).
//!
//! | policy | HTB |
//! |---|---|
//! | the link (`classes[0]`) | root qdisc `1: htb default D` and root class `1:1`: `rate`/`ceil` = link rate, `burst`/`cburst` as compiled |
//! | class *k* ≥ 1 (policy order, parents first) | class `1:X` with X = 0x10 + *k* − 1 in hex (`1:10`, `1:11`, … `1:1a`, …; tc reads class ids in hex) under its parent's id |
//! | `rate`, `ceil` (bit/s) | `rate <N>bit ceil <N>bit` |
//! | `burst`, `cburst` (bytes, compiled: given, or MTU + 1 ms at the rate) | `burst <N>b cburst <N>b` |
//! | `prio` (0-7) | `prio <p>` |
//! | `quantum` (bytes, compiled: given, or proportional to rate among siblings, MTU..200 kB) | `quantum <q>` (HTB takes any value given explicitly) |
//! | `[link] overhead` ≥ 0, `mpu`, ATM cells (`atm`, `framing`) | `overhead <n> mpu <m> linklayer atm` on every class (the kernel's `psched_l2t_ns` counts as weir: overhead, mpu, cells); tc refuses negative overheads and has no PTM: errors |
//! | leaf queue | `pfifo limit <packets>` or `bfifo limit <bytes>b`, handle `X:`: the class's `limit` as `weir:cbq` resolves it (written, else 100 packets). Per-flow queuing and RED are not reproduced: `kernel:htb` is the kernel's counterpart of `weir:cbq` |
//! | `[link] default` | `default X` of the default leaf (ARP and everything unmatched) |
//! | rule *n* (first match wins) | u32 filters at `parent 1:`, `flowid 1:X`, one `prio` per rule and protocol, increasing in rule order, so the first matching rule wins as in weir |
//!
//! Rule conditions (all must hold; any element of a list):
//!
//! | condition | u32 |
//! |---|---|
//! | `src`/`dst` IPv4 prefix | `protocol ip` … `match ip src A/len` / `match ip dst A/len` |
//! | `src`/`dst` IPv6 prefix | `protocol ipv6` … `match ip6 src A/len` / `match ip6 dst A/len` |
//! | `proto` | `match ip protocol P 0xff` (IPv6: `match ip6 protocol`, the first next-header field) |
//! | `sport`, `dport` | `match ip sport V 0xMASK`: each range is split into mask-aligned blocks ([`port_blocks`]), one filter per block; without a `proto`, one filter set for TCP and one for UDP (weir reads ports of TCP and UDP only) |
//! | `port` (either direction) | two filter sets: source port in the set, destination port in the set |
//! | `dscp` | `match ip tos (dscp<<2) 0xfc` (IPv6: `match ip6 priority`) |
//! | no address condition but `proto`/ports/`dscp` | filters for both IPv4 and IPv6 |
//! | no condition at all | `protocol all u32 match u32 0 0` (everything, ARP included) |
//!
//! A list expands into the cross product of its alternatives (at most
//! [`MAX_FILTERS_PER_RULE`] filters per rule). A rule to the default class needs no filter
//! unless a later rule sends traffic elsewhere (it may shadow it); such rules are skipped.
//!
//! Not expressible, refused with an error naming the rule: `vlan` conditions, an `ethertype`
//! other than IPv4/IPv6 combined with IP conditions, `[[emulate]]` profiles (no netem here)
//! and negative overheads. Approximations, documented rather than refused: u32 reads ports at
//! a fixed offset (IPv4 header without options, IPv6 without extension headers), and reads
//! them in non-first fragments too, where weir sees no ports.
//!
//! # Sessions (`kernel:htb-perflow`)
//!
//! Each [`Session`] is classified with the policy's own classifier (per direction: the
//! inbound tree sees it reversed). A leaf `1:X` that receives sessions becomes an inner
//! class with children, numbered from `1:1000` upwards (hex):
//!
//! - one per distinct session: `rate` = the class's `[class.session] guarantee`, else the
//!   class rate / number of sessions; `ceil` = the session `ceil`, else the class ceil;
//!   `pfifo limit` = the session `limit` (per-flow limit, default 64 packets); filter at
//!   `parent 1:X`: source address (+ source port if non-zero), destination address
//!   (+ destination port if non-zero) and protocol;
//! - one "other" child for whatever else the rules send to the class (catch-all filter at
//!   `parent 1:X`): `rate` = what the sessions leave of the class rate, at least 1 % of it;
//!   `ceil` = the class ceil; the class's own pfifo limit.
//!
//! HTB sends a packet that a filter steers to an inner class on through that class's
//! filters; a packet that no filter classifies goes to `default`, which must be a leaf. So
//! when the default class is split, `default` names its "other" child, and a last catch-all
//! filter at `parent 1:` steers everything unmatched to the default class, whose session
//! filters then apply. A class 7 levels deep cannot be split (HTB has 8 levels).
//!

use std::collections::BTreeMap;

use weir_core::classify::{IpNet, Match, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use weir_core::policy::{Policy, Technique};
use weir_core::units::Limit;
use weir_core::Direction;

use super::Session;

/// Most u32 filters one rule may expand into (prefix lists × port blocks × protocols).
pub const MAX_FILTERS_PER_RULE: usize = 4096;

/// First minor id (hex) of the per-session child classes of `kernel:htb-perflow`.
const SESSION_MINOR_BASE: u32 = 0x1000;

/// First minor id (hex) of the policy's classes (`classes[1]`).
const CLASS_MINOR_BASE: u32 = 0x10;

/// HTB's deepest level (`TC_HTB_MAXDEPTH` - 1): the root class is depth 0.
const HTB_MAX_DEPTH: usize = 7;

/// Splits the inclusive port range `lo..=hi` into the fewest blocks `(value, mask)` such
/// that a port `p` is in the range iff `p & mask == value` for one block (the classic
/// range-to-prefix expansion; at most 30 blocks). `0..=65535` is one block with mask 0.
/// Empty when `lo > hi`.
pub fn port_blocks(lo: u16, hi: u16) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (lo as u32, hi as u32);
    while lo <= hi {
        let mut size: u32 = if lo == 0 {
            1 << 16
        } else {
            1 << lo.trailing_zeros()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u16, (!(size - 1) & 0xffff) as u16));
        lo += size;
    }
    out
}

/// Minor id (hex in tc syntax) of policy class `k`.
fn class_minor(k: usize) -> u32 {
    if k == 0 {
        1
    } else {
        CLASS_MINOR_BASE + k as u32 - 1
    }
}

/// Handle major of the leaf qdisc under class minor `m` (not `1:`, the HTB's own).
fn leaf_handle(m: u32) -> u32 {
    if m == 1 {
        2
    } else {
        m
    }
}

fn fifo(limit: Limit) -> String {
    match limit {
        Limit::Packets(n) => format!("pfifo limit {n}"),
        Limit::Bytes(b) => format!("bfifo limit {b}b"),
    }
}

/// Default bucket of a child class: one MTU plus 1 ms at the rate (as the policy compiler).
fn default_burst(rate: u64, mtu: u32) -> u64 {
    mtu as u64 + rate / 8 / 1000
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fam {
    V4,
    V6,
}

impl Fam {
    fn word(self) -> &'static str {
        match self {
            Fam::V4 => "ip",
            Fam::V6 => "ip6",
        }
    }
    fn protocol(self) -> &'static str {
        match self {
            Fam::V4 => "ip",
            Fam::V6 => "ipv6",
        }
    }
    fn of(net: &IpNet) -> Fam {
        if net.is_ipv4() {
            Fam::V4
        } else {
            Fam::V6
        }
    }
}

/// The u32 selectors (`match …` groups) of one rule, per protocol keyword (`ip`, `ipv6`,
/// `all` or an ethertype), in order. Errors say why the rule cannot be expressed.
fn rule_selectors(m: &Match) -> std::result::Result<Vec<(String, Vec<String>)>, String> {
    if m.vlan.is_some() {
        return Err(
            "VLAN conditions cannot be expressed: the kernel strips the tag into \
                    metadata before the qdisc on veth, and u32 cannot match it (use weir, or \
                    drop the `vlan` key)"
                .into(),
        );
    }
    let ip_conditions = !m.src.is_empty()
        || !m.dst.is_empty()
        || m.proto.is_some()
        || m.sport.is_some()
        || m.dport.is_some()
        || m.port.is_some()
        || m.dscp.is_some();
    let mut fams = vec![Fam::V4, Fam::V6];
    match m.ethertype {
        None => {}
        Some(ETHERTYPE_IPV4) => fams.retain(|f| *f == Fam::V4),
        Some(ETHERTYPE_IPV6) => fams.retain(|f| *f == Fam::V6),
        Some(e) if !ip_conditions => {
            return Ok(vec![(format!("0x{e:04x}"), vec!["match u32 0 0".into()])]);
        }
        Some(e) => {
            return Err(format!(
                "ethertype 0x{e:04x} is not IP, yet the rule has IP conditions (it can never match)"
            ))
        }
    }
    if !ip_conditions && m.ethertype.is_none() {
        return Ok(vec![("all".into(), vec!["match u32 0 0".into()])]);
    }
    // families the address lists allow
    fams.retain(|&f| {
        (m.src.is_empty() || m.src.iter().any(|n| Fam::of(n) == f))
            && (m.dst.is_empty() || m.dst.iter().any(|n| Fam::of(n) == f))
    });
    let mut out = Vec::new();
    for fam in fams {
        let w = fam.word();
        // each factor: alternatives (OR); each alternative: keys (AND)
        let mut factors: Vec<Vec<Vec<String>>> = Vec::new();
        let nets = |list: &[IpNet], dir: &str| -> Vec<Vec<String>> {
            list.iter()
                .filter(|n| Fam::of(n) == fam)
                .map(|n| vec![format!("match {w} {dir} {}/{}", n.addr(), n.prefix_len())])
                .collect()
        };
        if !m.src.is_empty() {
            factors.push(nets(&m.src, "src"));
        }
        if !m.dst.is_empty() {
            factors.push(nets(&m.dst, "dst"));
        }
        let has_ports = m.sport.is_some() || m.dport.is_some() || m.port.is_some();
        match (m.proto, has_ports) {
            (Some(p), _) => factors.push(vec![vec![format!("match {w} protocol {p} 0xff")]]),
            (None, true) => factors.push(vec![
                vec![format!("match {w} protocol 6 0xff")],
                vec![format!("match {w} protocol 17 0xff")],
            ]),
            (None, false) => {}
        }
        let blocks = |set: &weir_core::classify::PortSet, dir: &str| -> Vec<Vec<String>> {
            set.ranges()
                .iter()
                .flat_map(|&(lo, hi)| port_blocks(lo, hi))
                .map(|(v, mask)| vec![format!("match {w} {dir} {v} 0x{mask:04x}")])
                .collect()
        };
        if let Some(s) = &m.sport {
            factors.push(blocks(s, "sport"));
        }
        if let Some(s) = &m.dport {
            factors.push(blocks(s, "dport"));
        }
        if let Some(s) = &m.port {
            let mut either = blocks(s, "sport");
            either.extend(blocks(s, "dport"));
            factors.push(either);
        }
        if let Some(d) = &m.dscp {
            let key = match fam {
                Fam::V4 => "tos",
                Fam::V6 => "priority",
            };
            factors.push(
                d.iter()
                    .map(|v| vec![format!("match {w} {key} 0x{:02x} 0xfc", v << 2)])
                    .collect(),
            );
        }
        let mut combos: Vec<Vec<String>> = vec![vec![]];
        for f in &factors {
            let n = combos.len() * f.len();
            if n > MAX_FILTERS_PER_RULE {
                return Err(format!(
                    "expands into more than {MAX_FILTERS_PER_RULE} u32 filters (address lists × \
                     port blocks × protocols); split it or use fewer, aligned port ranges"
                ));
            }
            let mut next = Vec::with_capacity(n);
            for c in &combos {
                for alt in f {
                    let mut k = c.clone();
                    k.extend(alt.iter().cloned());
                    next.push(k);
                }
            }
            combos = next;
        }
        let sels: Vec<String> = combos
            .into_iter()
            .map(|keys| {
                if keys.is_empty() {
                    "match u32 0 0".to_string()
                } else {
                    keys.join(" ")
                }
            })
            .collect();
        if !sels.is_empty() {
            out.push((fam.protocol().to_string(), sels));
        }
    }
    Ok(out)
}

/// The u32 selector of one session (both addresses, non-zero ports, protocol).
fn session_selector(s: &Session) -> (String, String) {
    let fam = if s.src.is_ipv4() { Fam::V4 } else { Fam::V6 };
    let w = fam.word();
    let host = if s.src.is_ipv4() { 32 } else { 128 };
    let mut k = vec![format!("match {w} src {}/{host}", s.src.ip())];
    if s.src.port() != 0 {
        k.push(format!("match {w} sport {} 0xffff", s.src.port()));
    }
    k.push(format!("match {w} dst {}/{host}", s.dst.ip()));
    if s.dst.port() != 0 {
        k.push(format!("match {w} dport {} 0xffff", s.dst.port()));
    }
    k.push(format!("match {w} protocol {} 0xff", s.proto));
    (fam.protocol().to_string(), k.join(" "))
}

/// One split leaf: its sessions and the minor ids of their children and of "other".
struct Split {
    sessions: Vec<Session>,
    first_minor: u32,
    other_minor: u32,
}

/// The `tc` commands (each starting with `tc `) that make an HTB tree enforcing `policy` on
/// the egress device(s) its `[link] direction` covers (`wan` for outbound, `lan` for
/// inbound). With `sessions`, the `kernel:htb-perflow` variant. See the module
/// documentation for the mapping. Errors name the rule or class that cannot be expressed.
pub fn htb_commands(
    policy: &Policy,
    lan: &str,
    wan: &str,
    sessions: Option<&[Session]>,
) -> std::result::Result<Vec<String>, String> {
    let emulated =
        !policy.default_emulate.is_empty() || policy.rules.iter().any(|r| r.emulate.is_some());
    if emulated {
        return Err(
            "the policy uses [[emulate]] profiles; the kernel DUT cannot emulate a WAN \
                    (no netem on this testbed) — run it with weir"
                .into(),
        );
    }
    if policy.overhead < 0 {
        return Err(format!(
            "[link] overhead {} is negative; tc's HTB takes only overheads >= 0",
            policy.overhead
        ));
    }
    if policy.framing.coding() == weir_core::framing::Coding::Ptm {
        return Err("[link] framing codes frames as PTM; tc's HTB has no PTM link layer".into());
    }
    let n = policy.classes.len();
    if CLASS_MINOR_BASE as usize + n > SESSION_MINOR_BASE as usize {
        return Err(format!(
            "{n} classes: at most {} fit the class-id plan",
            SESSION_MINOR_BASE - CLASS_MINOR_BASE
        ));
    }
    // the kernel's queues: drop-tail FIFOs with weir:cbq's limits
    let cbq = policy.with_technique(Technique::Cbq);
    let mut out = Vec::new();
    for (dev, dir) in [(wan, Direction::Outbound), (lan, Direction::Inbound)] {
        if !policy.shapes.covers(dir) {
            continue;
        }
        let sess: Option<Vec<Session>> = sessions.map(|s| {
            s.iter()
                .map(|x| {
                    if dir == Direction::Outbound {
                        *x
                    } else {
                        x.reversed()
                    }
                })
                .collect()
        });
        out.extend(htb_device(&cbq, dev, sess.as_deref())?);
    }
    Ok(out)
}

fn depth(policy: &Policy, mut k: usize) -> usize {
    let mut d = 0;
    while let Some(p) = policy.classes[k].parent {
        d += 1;
        k = p;
    }
    d
}

fn htb_device(
    policy: &Policy,
    dev: &str,
    sessions: Option<&[Session]>,
) -> std::result::Result<Vec<String>, String> {
    let id = |m: u32| format!("1:{m:x}");
    // sessions per leaf
    let mut splits: BTreeMap<usize, Split> = BTreeMap::new();
    if let Some(sessions) = sessions {
        // the policy's own classifier, as weir runs it
        let cls = policy.classifier()?;
        let mut per_leaf: BTreeMap<usize, Vec<Session>> = BTreeMap::new();
        for s in sessions {
            if s.src.is_ipv4() != s.dst.is_ipv4() {
                return Err(format!(
                    "session {} -> {} mixes IPv4 and IPv6",
                    s.src, s.dst
                ));
            }
            let (leaf, _) = cls.lookup(&s.fields());
            let v = per_leaf.entry(leaf as usize).or_default();
            if !v.contains(s) {
                v.push(*s);
            }
        }
        let mut next = SESSION_MINOR_BASE;
        for (leaf, v) in per_leaf {
            if depth(policy, leaf) >= HTB_MAX_DEPTH {
                return Err(format!(
                    "class '{}' is {} levels deep; HTB has {} levels, so its sessions cannot get \
                     child classes",
                    policy.classes[leaf].name,
                    HTB_MAX_DEPTH,
                    HTB_MAX_DEPTH + 1
                ));
            }
            let k = v.len() as u32;
            if next + k + 1 > 0xffff {
                return Err(format!(
                    "too many sessions: at most {} child classes fit",
                    0xffff - SESSION_MINOR_BASE
                ));
            }
            splits.insert(
                leaf,
                Split {
                    sessions: v,
                    first_minor: next,
                    other_minor: next + k,
                },
            );
            next += k + 1;
        }
    }
    let dflt = policy.default_class;
    let default_minor = match splits.get(&dflt) {
        Some(s) => s.other_minor,
        None => class_minor(dflt),
    };
    let mut overhead = if policy.overhead > 0 {
        format!(" overhead {}", policy.overhead)
    } else {
        String::new()
    };
    if policy.framing.mpu() > 0 {
        overhead += &format!(" mpu {}", policy.framing.mpu());
    }
    if policy.framing.coding() == weir_core::framing::Coding::Atm {
        overhead += " linklayer atm";
    }
    let mut cmds = vec![format!(
        "tc qdisc add dev {dev} root handle 1: htb default {default_minor:x}"
    )];
    let mut qdiscs = Vec::new();
    for (k, c) in policy.classes.iter().enumerate() {
        let me = class_minor(k);
        let parent = match c.parent {
            None => "1:".to_string(),
            Some(p) => id(class_minor(p)),
        };
        let extra = if k == 0 {
            String::new()
        } else {
            format!(" prio {} quantum {}", c.prio, c.quantum)
        };
        cmds.push(format!(
            "tc class add dev {dev} parent {parent} classid {} htb rate {}bit ceil {}bit burst {}b cburst {}b{extra}{overhead}",
            id(me),
            c.rate,
            c.ceil,
            c.burst,
            c.cburst
        ));
        if !c.leaf {
            continue;
        }
        match splits.get(&k) {
            None => qdiscs.push(format!(
                "tc qdisc add dev {dev} parent {} handle {:x}: {}",
                id(me),
                leaf_handle(me),
                fifo(c.limit)
            )),
            Some(sp) => {
                let count = sp.sessions.len() as u64;
                let each = c.session.guarantee.unwrap_or(c.rate / count).max(8);
                let ceil = c.session.ceil.unwrap_or(c.ceil).max(each);
                for i in 0..sp.sessions.len() {
                    let m = sp.first_minor + i as u32;
                    cmds.push(format!(
                        "tc class add dev {dev} parent {} classid {} htb rate {each}bit ceil {ceil}bit burst {}b cburst {}b prio {} quantum {}{overhead}",
                        id(me),
                        id(m),
                        default_burst(each, policy.mtu),
                        default_burst(ceil, policy.mtu),
                        c.prio,
                        policy.mtu
                    ));
                    qdiscs.push(format!(
                        "tc qdisc add dev {dev} parent {} handle {m:x}: pfifo limit {}",
                        id(m),
                        c.session.flow_limit
                    ));
                }
                let rest = c
                    .rate
                    .saturating_sub(each.saturating_mul(count))
                    .max(c.rate / 100)
                    .max(8);
                cmds.push(format!(
                    "tc class add dev {dev} parent {} classid {} htb rate {rest}bit ceil {}bit burst {}b cburst {}b prio {} quantum {}{overhead}",
                    id(me),
                    id(sp.other_minor),
                    c.ceil,
                    default_burst(rest, policy.mtu),
                    default_burst(c.ceil, policy.mtu),
                    c.prio,
                    policy.mtu
                ));
                qdiscs.push(format!(
                    "tc qdisc add dev {dev} parent {} handle {:x}: {}",
                    id(sp.other_minor),
                    sp.other_minor,
                    fifo(c.limit)
                ));
            }
        }
    }
    cmds.extend(qdiscs);
    // root filters, rule by rule
    let mut prio = 0u32;
    for (ri, r) in policy.rules.iter().enumerate() {
        let shadows = policy.rules[ri + 1..]
            .iter()
            .any(|later| later.class != dflt);
        if r.class == dflt && !shadows {
            continue; // HTB's default does it
        }
        let groups = rule_selectors(&r.m).map_err(|why| {
            format!(
                "rule '{}' (class '{}'): {why}",
                r.name, policy.classes[r.class].name
            )
        })?;
        for (proto, sels) in groups {
            prio += 1;
            for sel in sels {
                cmds.push(format!(
                    "tc filter add dev {dev} parent 1: protocol {proto} prio {prio} u32 {sel} flowid {}",
                    id(class_minor(r.class))
                ));
            }
        }
    }
    if splits.contains_key(&dflt) {
        prio += 1;
        cmds.push(format!(
            "tc filter add dev {dev} parent 1: protocol all prio {prio} u32 match u32 0 0 flowid {}",
            id(class_minor(dflt))
        ));
    }
    if prio > 0xffff {
        return Err(format!("{prio} filter priorities needed; tc has 65535"));
    }
    // inner filters of the split leaves
    for (&leaf, sp) in &splits {
        let parent = id(class_minor(leaf));
        let mut prios: Vec<String> = Vec::new();
        for (i, s) in sp.sessions.iter().enumerate() {
            let (proto, sel) = session_selector(s);
            let p = match prios.iter().position(|x| *x == proto) {
                Some(p) => p + 1,
                None => {
                    prios.push(proto.clone());
                    prios.len()
                }
            };
            cmds.push(format!(
                "tc filter add dev {dev} parent {parent} protocol {proto} prio {p} u32 {sel} flowid {}",
                id(sp.first_minor + i as u32)
            ));
        }
        cmds.push(format!(
            "tc filter add dev {dev} parent {parent} protocol all prio {} u32 match u32 0 0 flowid {}",
            prios.len() + 1,
            id(sp.other_minor)
        ));
    }
    Ok(cmds)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::Path;

    use super::*;

    fn basic_test() -> Policy {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/basic-test.toml"
        );
        Policy::load(Path::new(path)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn policy(text: &str) -> Policy {
        Policy::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every port of `lo..=hi` is in exactly one block and no other port is.
    fn check_blocks(lo: u16, hi: u16) {
        let b = port_blocks(lo, hi);
        for p in 0..=u16::MAX {
            let hits = b.iter().filter(|(v, m)| p & m == *v).count();
            let want = usize::from((lo..=hi).contains(&p));
            assert_eq!(hits, want, "{lo}-{hi}: port {p} in {hits} blocks {b:?}");
        }
        for (v, m) in &b {
            assert_eq!(v & !m, 0, "value {v} not aligned to mask {m:#x}");
        }
    }

    #[test]
    fn port_ranges_split_into_aligned_blocks() {
        // hand-checked: 1000-1007, 1008-1023, 1024-1535, 1536-1791, 1792-1919, 1920-1983,
        // 1984-1999 (8 + 16 + 512 + 256 + 128 + 64 + 16 = 1000 ports)
        assert_eq!(
            port_blocks(1000, 1999),
            vec![
                (1000, 0xfff8),
                (1008, 0xfff0),
                (1024, 0xfe00),
                (1536, 0xff00),
                (1792, 0xff80),
                (1920, 0xffc0),
                (1984, 0xfff0),
            ]
        );
        assert_eq!(port_blocks(0, 65535), vec![(0, 0)]);
        assert_eq!(port_blocks(80, 80), vec![(80, 0xffff)]);
        assert_eq!(port_blocks(65535, 65535), vec![(65535, 0xffff)]);
        assert_eq!(
            port_blocks(1024, 65535),
            vec![
                (1024, 0xfc00),
                (2048, 0xf800),
                (4096, 0xf000),
                (8192, 0xe000),
                (16384, 0xc000),
                (32768, 0x8000)
            ]
        );
        assert_eq!(port_blocks(0, 1), vec![(0, 0xfffe)]);
        assert!(port_blocks(5, 4).is_empty());
        // worst case: 1-65534 needs 30 blocks
        assert_eq!(port_blocks(1, 65534).len(), 30);
        for (lo, hi) in [
            (1000, 1999),
            (0, 65535),
            (1, 65534),
            (6000, 6100),
            (0, 0),
            (443, 444),
        ] {
            check_blocks(lo, hi);
        }
    }

    #[test]
    fn basic_test_to_htb() {
        let p = basic_test();
        let cmds = htb_commands(&p, "lan0", "wan0", None).unwrap();
        let want = [
            "tc qdisc add dev wan0 root handle 1: htb default 14",
            "tc class add dev wan0 parent 1: classid 1:1 htb rate 1544000bit ceil 1544000bit burst 1707b cburst 1707b",
            "tc class add dev wan0 parent 1:1 classid 1:10 htb rate 20000bit ceil 20000bit burst 1516b cburst 1516b prio 0 quantum 1514",
            "tc class add dev wan0 parent 1:1 classid 1:11 htb rate 40000bit ceil 40000bit burst 1519b cburst 1519b prio 0 quantum 3028",
            "tc class add dev wan0 parent 1:1 classid 1:12 htb rate 128000bit ceil 128000bit burst 1530b cburst 1530b prio 0 quantum 9689",
            "tc class add dev wan0 parent 1:1 classid 1:13 htb rate 256000bit ceil 256000bit burst 1546b cburst 1546b prio 0 quantum 19379",
            "tc class add dev wan0 parent 1:1 classid 1:14 htb rate 1100000bit ceil 1100000bit burst 1651b cburst 1651b prio 0 quantum 83270",
            "tc qdisc add dev wan0 parent 1:10 handle 10: pfifo limit 100",
            "tc qdisc add dev wan0 parent 1:11 handle 11: pfifo limit 100",
            "tc qdisc add dev wan0 parent 1:12 handle 12: pfifo limit 100",
            "tc qdisc add dev wan0 parent 1:13 handle 13: pfifo limit 100",
            "tc qdisc add dev wan0 parent 1:14 handle 14: pfifo limit 100",
            "tc filter add dev wan0 parent 1: protocol ip prio 1 u32 match ip src 10.1.1.0/24 flowid 1:10",
            "tc filter add dev wan0 parent 1: protocol ip prio 2 u32 match ip src 10.1.2.0/24 flowid 1:11",
            "tc filter add dev wan0 parent 1: protocol ip prio 3 u32 match ip src 10.1.3.0/24 flowid 1:12",
            "tc filter add dev wan0 parent 1: protocol ip prio 4 u32 match ip src 10.1.4.0/24 flowid 1:13",
        ];
        assert_eq!(cmds, want, "\n{}", cmds.join("\n"));
    }

    #[test]
    fn basic_test_perflow_has_a_child_per_session() {
        let p = basic_test();
        let dst: SocketAddr = "10.77.0.2:5001".parse().unwrap();
        let sessions: Vec<Session> = (1..=5)
            .flat_map(|c| {
                (1..=4).map(move |h| {
                    Session::tcp(
                        SocketAddr::new(format!("10.1.{c}.{h}").parse().unwrap(), 0),
                        dst,
                    )
                })
            })
            .collect();
        let cmds = htb_commands(&p, "lan0", "wan0", Some(&sessions)).unwrap();
        let text = cmds.join("\n");
        let rates = [20_000u64, 40_000, 128_000, 256_000, 1_100_000];
        let mut minor = SESSION_MINOR_BASE;
        for (k, rate) in rates.iter().enumerate() {
            let leaf = format!("1:{:x}", CLASS_MINOR_BASE + k as u32);
            for h in 1..=4 {
                let child = format!("1:{minor:x}");
                let want = format!(
                    "tc class add dev wan0 parent {leaf} classid {child} htb rate {}bit ceil {rate}bit ",
                    rate / 4
                );
                assert!(text.contains(&want), "missing `{want}` in\n{text}");
                let f = format!(
                    "tc filter add dev wan0 parent {leaf} protocol ip prio 1 u32 match ip src 10.1.{}.{h}/32 match ip dst 10.77.0.2/32 match ip dport 5001 0xffff match ip protocol 6 0xff flowid {child}",
                    k + 1
                );
                assert!(text.contains(&f), "missing `{f}` in\n{text}");
                minor += 1;
            }
            // the class's "other" child and its catch-all
            let other = format!("1:{minor:x}");
            assert!(text.contains(&format!(
                "tc filter add dev wan0 parent {leaf} protocol all prio 2 u32 match u32 0 0 flowid {other}"
            )));
            minor += 1;
        }
        let leaves: Vec<String> = (0..5)
            .map(|k| format!("parent 1:{:x} ", CLASS_MINOR_BASE + k))
            .collect();
        let children: Vec<&String> = cmds
            .iter()
            .filter(|c| {
                c.starts_with("tc class add") && leaves.iter().any(|l| c.contains(l.as_str()))
            })
            .collect();
        assert_eq!(children.len(), 25, "20 session children + 5 others\n{text}");
        let per_session = children
            .iter()
            .filter(|c| {
                rates
                    .iter()
                    .any(|r| c.contains(&format!(" rate {}bit ceil {r}bit ", r / 4)))
            })
            .count();
        assert_eq!(per_session, 20, "{text}");
        let flow_fifos = cmds
            .iter()
            .filter(|c| c.ends_with("pfifo limit 64"))
            .count();
        assert_eq!(flow_fifos, 20, "{text}");
        // the default class (c1100) is split: HTB's default is its "other" child, and a last
        // catch-all steers unmatched traffic into c1100 so its session filters apply
        assert!(
            cmds[0].ends_with(&format!("htb default {:x}", SESSION_MINOR_BASE + 4 * 5 + 4)),
            "{}",
            cmds[0]
        );
        assert!(text.contains("tc filter add dev wan0 parent 1: protocol all prio 5 u32 match u32 0 0 flowid 1:14"), "{text}");
    }

    #[test]
    fn rule_conditions_to_u32() {
        let p = policy(
            r#"
[link]
rate = "10Mbit"
default = "bulk"
overhead = 24
direction = "both"
[[class]]
name = "voip"
rate = "1Mbit"
prio = 1
limit = "30000B"
[[class]]
name = "web"
rate = "4Mbit"
[[class]]
name = "bulk"
rate = "5Mbit"
[[rule]]
name = "ef"
class = "voip"
dscp = "EF"
[[rule]]
name = "web"
class = "web"
proto = "tcp"
dst = ["192.0.2.0/24", "2001:db8::/32"]
dport = "80,443"
[[rule]]
name = "any-http"
class = "bulk"
port = "8000-8001"
[[rule]]
name = "rest"
class = "web"
src = "10.0.0.0/8"
"#,
        );
        let cmds = htb_commands(&p, "lan0", "wan0", None).unwrap();
        let text = cmds.join("\n");
        for want in [
            "tc qdisc add dev wan0 root handle 1: htb default 12",
            "tc class add dev wan0 parent 1: classid 1:1 htb rate 10000000bit ceil 10000000bit burst 2764b cburst 2764b overhead 24",
            "tc class add dev wan0 parent 1:1 classid 1:10 htb rate 1000000bit ceil 10000000bit burst 1639b cburst 2764b prio 1 quantum 1514 overhead 24",
            "tc qdisc add dev wan0 parent 1:10 handle 10: bfifo limit 30000b",
            "tc filter add dev wan0 parent 1: protocol ip prio 1 u32 match ip tos 0xb8 0xfc flowid 1:10",
            "tc filter add dev wan0 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0xb8 0xfc flowid 1:10",
            "tc filter add dev wan0 parent 1: protocol ip prio 3 u32 match ip dst 192.0.2.0/24 match ip protocol 6 0xff match ip dport 80 0xffff flowid 1:11",
            "tc filter add dev wan0 parent 1: protocol ip prio 3 u32 match ip dst 192.0.2.0/24 match ip protocol 6 0xff match ip dport 443 0xffff flowid 1:11",
            "tc filter add dev wan0 parent 1: protocol ipv6 prio 4 u32 match ip6 dst 2001:db8::/32 match ip6 protocol 6 0xff match ip6 dport 443 0xffff flowid 1:11",
            // a default-class rule before a non-default one keeps its filter (it shadows)
            "tc filter add dev wan0 parent 1: protocol ip prio 5 u32 match ip protocol 6 0xff match ip sport 8000 0xfffe flowid 1:12",
            "tc filter add dev wan0 parent 1: protocol ip prio 5 u32 match ip protocol 17 0xff match ip dport 8000 0xfffe flowid 1:12",
            "tc filter add dev wan0 parent 1: protocol ipv6 prio 6 u32 match ip6 protocol 17 0xff match ip6 sport 8000 0xfffe flowid 1:12",
            "tc filter add dev wan0 parent 1: protocol ip prio 7 u32 match ip src 10.0.0.0/8 flowid 1:11",
            // direction both: the same tree on lan0
            "tc qdisc add dev lan0 root handle 1: htb default 12",
            "tc filter add dev lan0 parent 1: protocol ip prio 7 u32 match ip src 10.0.0.0/8 flowid 1:11",
        ] {
            assert!(text.contains(want), "missing `{want}` in\n{text}");
        }
        // the IPv6 filters of "web" have no IPv4 prefix and vice versa
        assert!(!text.contains("ip6 dst 192.0.2.0"));
        // 2 (ef) + 2×2 (web v4, v6) + 2 protos × 2 directions × 2 families (any-http) + 1 (rest)
        let filters = cmds
            .iter()
            .filter(|c| c.starts_with("tc filter add dev wan0"))
            .count();
        assert_eq!(filters, 2 + 4 + 8 + 1, "{text}");
    }

    #[test]
    fn unexpressible_rules_are_refused_with_the_rule_name() {
        let vlan = policy(
            "[link]\nrate = \"10Mbit\"\ndefault = \"b\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n[[class]]\nname = \"b\"\nrate = \"1Mbit\"\n[[rule]]\nname = \"tagged\"\nclass = \"a\"\nvlan = 100\n",
        );
        let e = htb_commands(&vlan, "lan0", "wan0", None).unwrap_err();
        assert!(e.contains("rule 'tagged'") && e.contains("VLAN"), "{e}");
        let neg = policy("[link]\nrate = \"10Mbit\"\noverhead = -4\n");
        assert!(htb_commands(&neg, "lan0", "wan0", None)
            .unwrap_err()
            .contains("overhead -4"));
        let ptm = policy("[link]\nrate = \"10Mbit\"\nframing = \"bridged-ptm\"\n");
        assert!(htb_commands(&ptm, "lan0", "wan0", None)
            .unwrap_err()
            .contains("PTM"));
        // ATM cells and an mpu are HTB's own keywords
        let atm = policy("[link]\nrate = \"10Mbit\"\nframing = \"conservative\"\nmpu = 64\n");
        let cmds = htb_commands(&atm, "lan0", "wan0", None).unwrap();
        assert!(
            cmds[1].ends_with(" overhead 34 mpu 64 linklayer atm"),
            "{}",
            cmds[1]
        );
        let emu = policy("[link]\nrate = \"10Mbit\"\nemulate = \"wan\"\n[[emulate]]\nname = \"wan\"\ndelay = \"10ms\"\n");
        assert!(htb_commands(&emu, "lan0", "wan0", None)
            .unwrap_err()
            .contains("emulate"));
    }

    #[test]
    fn link_only_policy_and_direction_none() {
        let p = policy("[link]\nrate = \"10Mbit\"\n");
        let cmds = htb_commands(&p, "lan0", "wan0", None).unwrap();
        assert_eq!(
            cmds,
            [
                "tc qdisc add dev wan0 root handle 1: htb default 1",
                "tc class add dev wan0 parent 1: classid 1:1 htb rate 10000000bit ceil 10000000bit burst 2764b cburst 2764b",
                "tc qdisc add dev wan0 parent 1:1 handle 2: pfifo limit 100",
            ]
        );
        let none = policy("[link]\nrate = \"10Mbit\"\ndirection = \"none\"\n");
        assert!(htb_commands(&none, "lan0", "wan0", None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn inbound_sessions_are_reversed() {
        let p = policy(
            "[link]\nrate = \"10Mbit\"\ndefault = \"b\"\ndirection = \"inbound\"\n[[class]]\nname = \"a\"\nrate = \"2Mbit\"\n[[class]]\nname = \"b\"\nrate = \"8Mbit\"\n[[rule]]\nclass = \"a\"\nsrc = \"10.77.0.2\"\n",
        );
        let s = [Session::tcp(
            "10.77.1.1:0".parse().unwrap(),
            "10.77.0.2:5001".parse().unwrap(),
        )];
        let cmds = htb_commands(&p, "lan0", "wan0", Some(&s)).unwrap();
        let text = cmds.join("\n");
        assert!(text.contains("tc filter add dev lan0 parent 1:10 protocol ip prio 1 u32 match ip src 10.77.0.2/32 match ip sport 5001 0xffff match ip dst 10.77.1.1/32 match ip protocol 6 0xff flowid 1:1000"), "{text}");
        assert!(!text.contains("wan0"), "{text}");
    }
}
