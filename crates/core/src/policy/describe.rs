//! Describe: the text `weir check` prints for a compiled policy — the link, the class tree
//! with each leaf's queue, the rules and the emulation profiles.

use super::{AdaptMode, ClassDef, Policy, QueueKind, SubscriberClass};

/// Tables with more circuits than this print one summary line per node for its circuits.
const MAX_CIRCUITS_LISTED: usize = 50;
use crate::classify::{IpNet, Match, Proto};
use crate::emulate;
use crate::units::{fmt_rate, fmt_size};

impl Policy {
    /// A human-readable tree of the compiled policy (what `weir check` prints).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "link {}  technique {}  shapes {}  default class '{}'  mtu {}  {}\n",
            fmt_rate(self.link_rate),
            self.technique.name(),
            self.shapes.name(),
            self.classes[self.default_class].name,
            self.mtu,
            self.framing
        ));
        if !self.framing.is_plain() {
            // what the framing does to a full frame and a small one, and CAKE's number
            let f = self.framing;
            s.push_str(&format!(
                "framing: a {}-byte frame counts {} B on the link, a 64-byte one {} B \
                 (CAKE's overhead {} on the IP packet)\n",
                self.mtu,
                f.wire_len(self.mtu),
                f.wire_len(64),
                f.overhead() + crate::framing::MAC_HEADER
            ));
        }
        let header = format!(
            "{:<28} {:>11} {:>11} {:>4} {:>8}  {}\n",
            "class", "rate", "ceil", "prio", "quantum", "queue"
        );
        if self.classes[0].inbound.is_some() {
            s.push_str("outbound (LAN -> WAN):\n");
        }
        s.push_str(&header);
        let kids = self.children_lists();
        self.describe_class(0, ("", true), &kids, &mut s);
        if self.classes[0].inbound.is_some() {
            let inb = self.for_direction(crate::pool::Direction::Inbound);
            s.push_str(&format!(
                "inbound (WAN -> LAN): link {}\n",
                fmt_rate(inb.link_rate)
            ));
            s.push_str(&header);
            inb.describe_class(0, ("", true), &kids, &mut s);
        }
        if let Some(t) = &self.subscribers {
            s.push_str(&format!(
                "subscribers: {} circuits, {} prefixes, {} nodes from {}{}; a circuit is found \
                 by its prefixes (the source address outbound, the destination inbound) before \
                 the rules; its queue exists while it has traffic\n",
                t.circuits,
                t.prefixes,
                t.nodes,
                t.shaped_devices,
                t.network
                    .as_ref()
                    .map_or(String::new(), |n| format!(" and {n}"))
            ));
        }
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
                    describe_match(&r.m, &self.l7)
                ));
            }
            s.push_str(&format!(
                "  default          -> {}\n",
                self.classes[self.default_class].name
            ));
        }
        self.describe_diffserv(&mut s);
        if let Some(a) = &self.adapt {
            let targets: Vec<String> = a.targets.iter().map(|t| t.to_string()).collect();
            let via = a.gateway.map_or(String::new(), |g| format!(" via {g}"));
            s.push_str(&format!(
                "adapt {}: probe {}{via} from {} every {} each (fallback after {}), ",
                a.mode.name(),
                targets.join(", "),
                a.source,
                a.interval,
                a.timeout,
            ));
            match &a.mode {
                AdaptMode::Postgate(pg) => s.push_str(&format!(
                    "line {}, p {}, delta {}, floor {:.0}%",
                    fmt_rate(pg.line_bps),
                    pg.p,
                    pg.delta,
                    pg.floor * 100.0,
                )),
                AdaptMode::Autorate(ar) => s.push_str(&format!(
                    "rate {} .. {} (base {}), {} probed at once, delay threshold {}, high load {:.0}%",
                    fmt_rate(ar.min_bps),
                    fmt_rate(ar.max_bps),
                    fmt_rate(ar.base_bps),
                    ar.pingers,
                    ar.delay_thr,
                    ar.high_load * 100.0,
                )),
            }
            s.push_str(&format!("; probes leave {}\n", a.shaped.reverse().name()));
            if let AdaptMode::Postgate(pg) = &a.mode {
                for (&c, w) in a.classes.iter().zip(&pg.weights) {
                    s.push_str(&format!(
                        "  class {:<16} initial weight {w:.4}\n",
                        self.classes[c].name
                    ));
                }
            }
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
            for &d in &self.default_emulate {
                s.push_str(&format!(
                    "  other traffic    -> {}\n",
                    self.emulators[d].name
                ));
            }
        }
        s
    }

    /// The DiffServ role, the meters and who uses them (nothing for an edge router
    /// without meters).
    fn describe_diffserv(&self, s: &mut String) {
        use crate::diffserv::Role;
        match self.role {
            Role::Interior => s.push_str(
                "diffserv: interior router (colour from the DSCP: AFx1 green, AFx2 yellow, \
                 AFx3 red)\n",
            ),
            Role::Edge if self.meters.is_empty() && self.rules.iter().all(|r| r.mark.is_none()) => {
                return
            }
            Role::Edge => s.push_str("diffserv: edge router\n"),
        }
        for r in self.rules.iter().filter(|r| r.mark.is_some()) {
            let d = r.mark.unwrap_or(0);
            let name =
                crate::classify::dscp_name(d).map_or_else(|| format!("dscp {d}"), str::to_string);
            s.push_str(&format!("  rule {:<11} marks {name}\n", r.name));
        }
        if !self.meters.is_empty() {
            s.push_str("  meters:\n");
        }
        for (i, m) in self.meters.iter().enumerate() {
            let users: Vec<String> = self
                .classes
                .iter()
                .filter(|c| c.meter == Some(i))
                .map(|c| format!("class {}", c.name))
                .chain(
                    self.rules
                        .iter()
                        .filter(|r| r.meter == Some(i))
                        .map(|r| format!("rule {}", r.name)),
                )
                .collect();
            let users = if users.is_empty() {
                "unused".to_string()
            } else {
                users.join(", ")
            };
            s.push_str(&format!(
                "    {:<14} {}  <- {users}\n",
                m.name,
                m.describe()
            ));
        }
    }

    /// Each class's children, in order.
    fn children_lists(&self) -> Vec<Vec<usize>> {
        let mut kids = vec![Vec::new(); self.classes.len()];
        for (k, c) in self.classes.iter().enumerate() {
            if let Some(p) = c.parent {
                kids[p].push(k);
            }
        }
        kids
    }

    /// A summary line standing for `circuits` (circuit classes of one parent): how many,
    /// and the range of their rates and ceilings.
    fn describe_circuits(&self, circuits: &[usize], prefix: &str, s: &mut String) {
        let range = |f: &dyn Fn(&ClassDef) -> u64| {
            let lo = circuits
                .iter()
                .map(|&k| f(&self.classes[k]))
                .min()
                .unwrap_or(0);
            let hi = circuits
                .iter()
                .map(|&k| f(&self.classes[k]))
                .max()
                .unwrap_or(0);
            if lo == hi {
                fmt_rate(lo)
            } else {
                format!("{}..{}", fmt_rate(lo), fmt_rate(hi))
            }
        };
        let queue = self.describe_queue(&self.classes[circuits[0]]);
        s.push_str(&format!(
            "{prefix}└─ {} circuits: rate {}, ceil {}  {queue}\n",
            circuits.len(),
            range(&|c| c.rate),
            range(&|c| c.ceil),
        ));
    }

    fn describe_class(
        &self,
        i: usize,
        (prefix, last): (&str, bool),
        kids: &[Vec<usize>],
        s: &mut String,
    ) {
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
            let mut q = self.describe_queue(c);
            if self.rate_controlled(i) {
                q.push_str(" +tcr");
            }
            if let Some(a) = c.admission {
                q.push_str(&format!(
                    ", max {} sessions ({} beyond)",
                    a.max_sessions,
                    a.mode.name()
                ));
            }
            q
        } else {
            String::new()
        };
        // under the `tcr` preset the scheduler holds only the link rate (see build.rs)
        let ceil = if self.technique == super::Technique::Tcr {
            self.link_rate
        } else {
            c.ceil
        };
        let pad = 28usize.saturating_sub(label.chars().count());
        s.push_str(&format!(
            "{label}{:pad$} {:>11} {:>11} {:>4} {:>8}  {queue}\n",
            "",
            fmt_rate(c.rate),
            fmt_rate(ceil),
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
        // a large table's circuits are summarised per parent
        let circuit = |k: &usize| self.classes[*k].subscriber == Some(SubscriberClass::Circuit);
        let many = self
            .subscribers
            .as_ref()
            .is_some_and(|t| t.circuits > MAX_CIRCUITS_LISTED);
        let (listed, summed): (Vec<usize>, Vec<usize>) =
            kids[i].iter().partition(|k| !(many && circuit(k)));
        for (k, &ch) in listed.iter().enumerate() {
            let last = k + 1 == listed.len() && summed.is_empty();
            self.describe_class(ch, (&next_prefix, last), kids, s);
        }
        if !summed.is_empty() {
            self.describe_circuits(&summed, &next_prefix, s);
        }
    }

    fn describe_queue(&self, c: &ClassDef) -> String {
        let mut q = match c.queue {
            QueueKind::Fifo => format!("fifo limit {}", c.limit),
            QueueKind::Fq => {
                let mut q = format!(
                    "fq {} flows, isolate {}, limit {}",
                    c.session.buckets,
                    c.isolate.name(),
                    c.limit
                );
                if c.ack_filter != crate::tcp::ack_filter::AckFilterMode::Off {
                    q += &format!(", ack filter {}", c.ack_filter.name());
                }
                q
            }
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
                if let (Some(cap), Some(b)) = (c.session.ceil, c.session.cap_burst(self.mtu)) {
                    q += &format!(
                        ", cap {}/session (burst {})",
                        fmt_rate(cap),
                        fmt_size(b as u64)
                    );
                }
                q
            }
        };
        if let Some(cr) = c
            .red
            .as_ref()
            .and_then(|r| r.colors.as_ref().map(|k| (r, k)))
        {
            let (r, colors) = cr;
            let names = ["green", "yellow", "red"];
            let profiles: Vec<String> = names
                .iter()
                .zip(&colors.profiles)
                .map(|(n, (min, max, p))| format!("{n} {min}..{max} max_p {p}"))
                .collect();
            q += &format!(
                ", three-colour red ({:?} averages) {} wq {}{}",
                colors.averaging,
                profiles.join(", "),
                r.wq,
                if r.gentle { " gentle" } else { "" }
            );
        } else if let Some(r) = &c.red {
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
        if c.aqm != crate::aqm::AqmKind::None {
            let p = self.aqm_params(c);
            q += &format!(
                ", {} target {} interval {}",
                c.aqm.name(),
                p.target,
                p.interval
            );
        }
        if c.ecn {
            q += ", ecn";
        }
        q
    }
}

fn describe_match(m: &Match, l7: &crate::app::l7::L7Set) -> String {
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
    if let Some(a) = &m.app {
        parts.push(format!(
            "app {}",
            a.iter()
                .map(|&x| crate::app::App::name(x))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    for (i, c) in l7.conds.iter().enumerate() {
        if m.l7 & (1 << i) != 0 {
            parts.push(format!("{} {}", c.kind.key(), c.patterns.join(",")));
        }
    }
    if parts.is_empty() {
        "any".into()
    } else {
        parts.join(" ")
    }
}
