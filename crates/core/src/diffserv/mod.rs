//! DiffServ traffic conditioning: the meter → marker/policer step between the classifier
//! and the shaper (RFC 2475 §2.3.3; seed 001 section 2, seed 004 sections 1.2-2.2).
//!
//! A router has a role ([`Role`]):
//! * **edge** (a boundary router, seed 004's ingress; seed 001's edge routers): a rule's
//!   `mark` first writes its DSCP into the rule's packets (seed 004's service handler,
//!   a marker without a meter; the packet's colour is then the new DSCP's). A packet's
//!   meter — its rule's, else its class's (`meter` keys) — measures it and gives it a
//!   colour; a colour-aware meter starts from the colour its DSCP already carries. The
//!   meter's action for that colour keeps the DSCP, writes another (a marker), or drops the
//!   packet (a policer, [`DropCause::Policed`]). A packet without a meter is green.
//! * **interior** (a core router): no meters. The colour is the DSCP's AF drop precedence
//!   (behaviour-aggregate classification, RFC 2597 §6: AFx1 green, AFx2 yellow, AFx3 red;
//!   every other codepoint green).
//!
//! The colour travels in [`Meta::color`](crate::pool::Meta) to the class's three-colour RED.
//!
//! Bytes counted by a meter: the IP packet (the frame less its Ethernet header and VLAN
//! tags), as RFC 2697/2698 count; the whole frame for non-IP traffic. Marking rewrites the
//! DSCP of the IPv4 header (incremental checksum, RFC 1624) or the IPv6 traffic class,
//! keeping ECN. A meter with `share = "flow"` divides its allowance among the flows it
//! measures ([`crate::meter::fair`]; the flow is the classifier's 5-tuple hash). Frames reach the conditioner segmented (the live path splits GSO
//! super-packets first), so a colour is a wire packet's colour.
//!
//! Per meter the conditioner counts packets and bytes of each colour, the packets it
//! remarked and those it dropped ([`MeterStats`]). Invariant: `green + yellow + red` is
//! every packet the meter measured; `dropped` ⊆ those.
//!
//! Cost per packet: one Ethernet/IP header look-up, one meter (a few integer operations),
//! and for a remark one 16-bit checksum update. No allocation.

use crate::meter::fair::{FlowShare, Share};
use crate::meter::{ColorMode, Meter, MeterSpec};
use crate::pool::{Color, PktId};
use crate::qdisc::{Count, Ctx, DropCause};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use weir_wire::ethernet::{ethertype, Frame};

#[cfg(test)]
mod tests;

/// Where the router sits in a DiffServ domain.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Role {
    /// A boundary router: multi-field classification, meters, markers, policers.
    #[default]
    Edge,
    /// An interior router: behaviour-aggregate classification; the colour is the DSCP's.
    Interior,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Edge => "edge",
            Role::Interior => "interior",
        }
    }
}

/// What a meter does with a packet of one colour.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave the DSCP as it is.
    Keep,
    /// Write this DSCP (0-63).
    Mark(u8),
    /// Drop the packet (a policer).
    Drop,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Keep => f.write_str("keep"),
            Action::Drop => f.write_str("drop"),
            Action::Mark(d) => match crate::classify::dscp_name(*d) {
                Some(n) => f.write_str(n),
                None => write!(f, "dscp {d}"),
            },
        }
    }
}

/// A meter as the policy defines it (`[[meter]]`).
#[derive(Clone, Debug, PartialEq)]
pub struct MeterDef {
    pub name: String,
    pub spec: MeterSpec,
    pub mode: ColorMode,
    /// One allowance for the aggregate (the RFCs), or divided among its flows.
    pub share: Share,
    /// Actions for green, yellow and red, in that order.
    pub actions: [Action; 3],
    /// Line of the definition, for messages.
    pub line: usize,
}

impl MeterDef {
    /// The action for packets of colour `c`.
    pub fn action(&self, c: Color) -> Action {
        self.actions[color_index(c)]
    }

    /// One line: the meter, its colour mode and its actions.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            ColorMode::Blind => "colour-blind",
            ColorMode::Aware => "colour-aware",
        };
        let share = match self.share {
            Share::Aggregate => String::new(),
            Share::Flow { slots } => format!(", fair per flow ({slots} slots)"),
        };
        format!(
            "{}, {mode}{share}; green {}, yellow {}, red {}",
            self.spec, self.actions[0], self.actions[1], self.actions[2]
        )
    }
}

/// What one meter has seen and done.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterStats {
    pub green: Count,
    pub yellow: Count,
    pub red: Count,
    /// Packets whose DSCP was rewritten.
    pub remarked: Count,
    /// Packets dropped by the colour's `drop` action.
    pub dropped: Count,
    /// Flows active in a meter shared per flow (`share = "flow"`); 0 for the others.
    #[serde(default)]
    pub flows: u64,
}

impl MeterStats {
    /// Every packet the meter measured.
    pub fn measured(&self) -> Count {
        self.green + self.yellow + self.red
    }
    fn colour_mut(&mut self, c: Color) -> &mut Count {
        match c {
            Color::Green => &mut self.green,
            Color::Yellow => &mut self.yellow,
            Color::Red => &mut self.red,
        }
    }
}

/// No meter for this rule or class.
pub const NO_METER: u16 = u16::MAX;

/// One direction's conditioner (see the module comment).
#[derive(Clone, Debug)]
pub struct Conditioner {
    role: Role,
    defs: Vec<MeterDef>,
    meters: Vec<Meter>,
    /// The flow table of each meter shared per flow.
    shares: Vec<Option<FlowShare>>,
    stats: Vec<MeterStats>,
    /// Meter of each classifier rule ([`NO_METER`]: none).
    by_rule: Vec<u16>,
    /// Meter of each class ([`NO_METER`]: none), for packets whose rule names none.
    by_class: Vec<u16>,
    /// DSCP each classifier rule writes ([`NO_MARK`]: none).
    marks: Vec<u8>,
    /// Packets whose DSCP a rule's `mark` rewrote.
    marked: Count,
}

/// No `mark` for this rule.
pub const NO_MARK: u8 = u8::MAX;

impl Conditioner {
    /// A conditioner for `role` with `defs`' meters (full buckets at `now`); `by_rule` and
    /// `by_class` give each rule's and class's meter index into `defs`, or [`NO_METER`].
    pub fn new(
        role: Role,
        defs: Vec<MeterDef>,
        by_rule: Vec<u16>,
        by_class: Vec<u16>,
        now: Instant,
    ) -> Result<Conditioner, String> {
        if role == Role::Interior && !defs.is_empty() {
            return Err("an interior router has no meters (role = \"edge\" meters)".into());
        }
        if defs.len() >= NO_METER as usize {
            return Err(format!("{} meters: at most {}", defs.len(), NO_METER - 1));
        }
        let n = defs.len() as u16;
        if let Some(i) = by_rule
            .iter()
            .chain(&by_class)
            .find(|&&i| i != NO_METER && i >= n)
        {
            return Err(format!("meter index {i} out of range ({n} meters)"));
        }
        let meters = defs
            .iter()
            .map(|d| {
                Meter::new(d.spec, d.mode, now).map_err(|e| format!("meter '{}': {e}", d.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let shares = defs
            .iter()
            .zip(&meters)
            .map(|(d, m)| match d.share {
                Share::Aggregate => Ok(None),
                Share::Flow { slots } => FlowShare::new(m, slots, now)
                    .map(Some)
                    .map_err(|e| format!("meter '{}': {e}", d.name)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Conditioner {
            role,
            shares,
            stats: vec![MeterStats::default(); defs.len()],
            defs,
            meters,
            by_rule,
            by_class,
            marks: Vec::new(),
            marked: Count::default(),
        })
    }

    /// The same conditioner with each classifier rule's `mark` (a DSCP, or `None`), in rule
    /// order. Values above 63 are ignored.
    pub fn with_marks(mut self, marks: Vec<Option<u8>>) -> Conditioner {
        self.marks = marks
            .into_iter()
            .map(|m| m.filter(|&d| d < 64).unwrap_or(NO_MARK))
            .collect();
        self
    }

    /// Packets whose DSCP a rule's `mark` rewrote.
    pub fn marked(&self) -> Count {
        self.marked
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The meters' definitions and counters, in definition order.
    pub fn meters(&self) -> impl Iterator<Item = (&MeterDef, &MeterStats)> {
        self.defs.iter().zip(&self.stats)
    }

    /// The meter that measures a packet of rule `rule` (`u16::MAX`: none matched) and
    /// class `class`, if any.
    #[inline]
    fn meter_of(&self, rule: u16, class: u32) -> Option<usize> {
        let by_rule = self.by_rule.get(rule as usize).copied().unwrap_or(NO_METER);
        let i = if by_rule != NO_METER {
            by_rule
        } else {
            self.by_class
                .get(class as usize)
                .copied()
                .unwrap_or(NO_METER)
        };
        (i != NO_METER).then_some(i as usize)
    }

    /// Colour the labelled packet `pkt` (class and rule set) and apply its meter's action
    /// at `cx.now`. `Err(Policed)`: dropped (the caller frees it; counted here).
    pub fn apply(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        let (rule, class, flow) = {
            let m = cx.pool.meta(pkt);
            (m.rule, m.class, m.flow)
        };
        let mut ip = ip_header(cx.pool.data(pkt));
        let mark = match self.role {
            Role::Edge => self.marks.get(rule as usize).copied().unwrap_or(NO_MARK),
            Role::Interior => NO_MARK,
        };
        if mark != NO_MARK {
            if let Some(h) = ip.filter(|h| h.dscp != mark) {
                set_dscp(cx.pool.data_mut(pkt), h, mark);
                self.marked.add(cx.pool.len(pkt));
                ip = ip.map(|h| IpHeader { dscp: mark, ..h });
            }
        }
        let dscp = ip.map(|h| h.dscp);
        let incoming = dscp.map_or(Color::Green, dscp_color);
        let meter = match self.role {
            Role::Interior => None,
            Role::Edge => self.meter_of(rule, class),
        };
        let Some(i) = meter else {
            cx.pool.meta_mut(pkt).color = match self.role {
                Role::Edge if mark == NO_MARK => Color::Green,
                _ => incoming,
            };
            return Ok(());
        };
        let len = cx.pool.len(pkt);
        let counted = ip.map_or(len, |h| len.saturating_sub(h.offset as u32));
        let stats = &mut self.stats[i];
        let color = match &mut self.shares[i] {
            None => self.meters[i].mark(counted, incoming, cx.now),
            Some(f) => {
                let c = self.meters[i].mark_fair(f, flow, counted, incoming, cx.now);
                stats.flows = f.active() as u64;
                c
            }
        };
        stats.colour_mut(color).add(counted);
        cx.pool.meta_mut(pkt).color = color;
        match self.defs[i].action(color) {
            Action::Keep => Ok(()),
            Action::Drop => {
                stats.dropped.add(counted);
                Err(DropCause::Policed)
            }
            Action::Mark(d) => {
                if let Some(h) = ip.filter(|h| h.dscp != d) {
                    set_dscp(cx.pool.data_mut(pkt), h, d);
                    stats.remarked.add(counted);
                }
                Ok(())
            }
        }
    }
}

#[inline]
fn color_index(c: Color) -> usize {
    match c {
        Color::Green => 0,
        Color::Yellow => 1,
        Color::Red => 2,
    }
}

/// The colour a DSCP carries: the drop precedence of the AF codepoints (RFC 2597 §6:
/// AFxy = 8x + 2y, x = 1..4, y = 1 green, 2 yellow, 3 red); green for every other.
#[inline]
pub fn dscp_color(dscp: u8) -> Color {
    let (class, dp) = (dscp >> 3, dscp & 7);
    match (class, dp) {
        (1..=4, 4) => Color::Yellow,
        (1..=4, 6) => Color::Red,
        _ => Color::Green,
    }
}

/// Where a frame's IP header is and the DSCP it carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct IpHeader {
    offset: u16,
    v6: bool,
    dscp: u8,
}

/// The IP header of an Ethernet frame (after up to two VLAN tags), if it is IPv4 or IPv6
/// with a header byte to read.
#[inline]
fn ip_header(frame: &[u8]) -> Option<IpHeader> {
    let eth = Frame::new_checked(frame).ok()?;
    let offset = eth.header_len();
    let first = *frame.get(offset)?;
    let second = *frame.get(offset + 1)?;
    let (v6, tos) = match (eth.ethertype(), first >> 4) {
        (ethertype::IPV4, 4) => (false, second),
        (ethertype::IPV6, 6) => (true, (first << 4) | (second >> 4)),
        _ => return None,
    };
    Some(IpHeader {
        offset: offset as u16,
        v6,
        dscp: tos >> 2,
    })
}

/// Write `dscp` into the header `h` of `frame`, keeping ECN (IPv4: incremental header
/// checksum).
fn set_dscp(frame: &mut [u8], h: IpHeader, dscp: u8) {
    let l3 = &mut frame[h.offset as usize..];
    if h.v6 {
        if let Ok(mut p) = weir_wire::ipv6::Packet::new_checked(l3) {
            p.set_dscp(dscp);
        }
    } else if let Ok(mut p) = weir_wire::ipv4::Packet::new_checked(l3) {
        p.set_dscp(dscp);
    }
}
