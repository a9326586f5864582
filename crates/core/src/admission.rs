//! Admission control (seed 000 "Three Policy Types": "If another FTP session attempts to
//! start, the admission control can be set to fairly share the 35 kb/s among the four
//! sessions, or to postpone the new session until a session in the 35 kb/s class stops").
//!
//! A class with `max_sessions = N` counts its sessions: the TCP and UDP connections whose
//! originator's first packet — a TCP SYN, a UDP flow's first datagram — it classified
//! (other protocols, ICMP and neighbour discovery among them, are not sessions and pass). While fewer than
//! N are live, a new session is admitted. Beyond N, by the class's `admission`:
//!
//! * **share** (default): admitted anyway; the class's rate is shared among all of them
//!   (counted `shared`).
//! * **postpone**: the new session's packets are dropped until a session leaves. A TCP
//!   client retransmits its SYN (1 s, 2 s, 4 s … later, RFC 6298 §5) and gets in with the
//!   first SYN that finds a free place; a UDP flow's datagrams are dropped until then
//!   (counted `postponed`, per packet).
//! * **refuse**: the session is refused: a TCP SYN is dropped and answered with an RST
//!   from the server's address ([`weir_wire::build::tcp_reset_reply`], sent back the way
//!   the SYN came), a UDP flow's datagrams are dropped while its entry lives (counted
//!   `refused` per session, `refused_packets` for a refused flow's later datagrams).
//!
//! # What a session is, and when it leaves
//! A connection of the device's connection table ([`crate::conn`]) whose originator's
//! packets the class classified. A TCP session leaves when it closes (both FINs or an RST:
//! [`TcpPhase::Closed`]) or its entry expires from the table; a UDP session when it has
//! sent nothing for the class's `session_idle` (default [`DEFAULT_IDLE`]). A TCP
//! connection picked up in mid-stream (its SYN not seen: weir restarted, a route change)
//! is admitted without a check — it is a session that already exists — and counts.
//! Only the originator's packets are checked; replies pass.
//!
//! # Cost
//! A side table indexed by connection id (16 bytes an entry), checked against the
//! connection's first-seen time so a reused slot starts afresh, and per class the list of
//! its live sessions. A packet of an admitted session costs one comparison; a new
//! session's decision counts the class's list, swept of sessions that left when it is
//! full (at most once per [`SWEEP`], so a SYN flood costs O(1) per SYN between sweeps).
//!
//! Units: nanoseconds ([`Instant`], [`Duration`]).

use crate::conn::{ConnId, ConnTable, TcpPhase};
use crate::flow::Side;
use crate::time::{Duration, Instant};
use serde::{Deserialize, Serialize};

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// How long a UDP session may be silent and still count, when the class does not say.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);
/// How often, at most, a full class's list is swept of sessions that left.
pub const SWEEP: Duration = Duration::from_millis(100);
/// The largest `max_sessions` (the connection table's order of magnitude).
pub const MAX_SESSIONS: u32 = 1 << 20;

/// What happens to a session beyond a class's `max_sessions`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Share,
    Postpone,
    Refuse,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Share, Mode::Postpone, Mode::Refuse];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Share => "share",
            Mode::Postpone => "postpone",
            Mode::Refuse => "refuse",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// A class's admission control, as the policy compiles it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Sessions admitted without question (≥ 1).
    pub max_sessions: u32,
    pub mode: Mode,
    /// A non-TCP session silent this long has left.
    pub idle: Duration,
}

/// Admission control by policy class index (`None`: none), with every class's name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdmissionTable {
    pub by_class: Vec<Option<Spec>>,
    pub names: Vec<String>,
}

/// One class's admission control and counters, for reports (printed by its `Display`:
/// `weir stats` and `weir run`'s final report).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassAdmission {
    pub class: String,
    pub max_sessions: u32,
    pub mode: Mode,
    #[serde(flatten)]
    pub stats: AdmissionStats,
}

/// One class's counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionStats {
    /// Live sessions at the class's last count.
    pub sessions: u64,
    /// Sessions admitted within the limit (and TCP connections picked up in mid-stream).
    pub admitted: u64,
    /// Sessions admitted beyond the limit (`share`).
    pub shared: u64,
    /// Packets of sessions waiting for a place, dropped (`postpone`).
    pub postponed: u64,
    /// Sessions refused (`refuse`).
    pub refused: u64,
    /// Later datagrams of refused non-TCP flows, dropped.
    pub refused_packets: u64,
    /// RSTs sent to refused TCP clients.
    pub resets: u64,
    /// Refused TCP SYNs no RST could be built for (no free packet, a double-tagged
    /// frame): dropped without an answer.
    pub resets_failed: u64,
}

impl std::fmt::Display for ClassAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.stats;
        write!(
            f,
            "admission '{}' (max {} sessions, {}): {} sessions, {} admitted, {} shared, \
             {} packets postponed, {} refused ({} RSTs sent, {} not answered), \
             {} packets of refused flows",
            self.class,
            self.max_sessions,
            self.mode.name(),
            s.sessions,
            s.admitted,
            s.shared,
            s.postponed,
            s.refused,
            s.resets,
            s.resets_failed,
            s.refused_packets
        )
    }
}

/// What the device does with a packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forward it.
    Pass,
    /// Drop it (postponed, or a refused flow's).
    Drop,
    /// Drop it and answer with an RST (a refused TCP SYN).
    Reset,
}

const NONE: u8 = 0;
const ADMITTED: u8 = 1;
const REFUSED: u8 = 2;

#[derive(Copy, Clone, Debug)]
struct Entry {
    stamp: Instant,
    class: u32,
    state: u8,
}

#[derive(Clone, Debug, Default)]
struct Class {
    ids: Vec<u32>,
    swept: Instant,
    stats: AdmissionStats,
}

/// The admission state of a device; see the module comment.
pub struct Admission {
    table: AdmissionTable,
    classes: Vec<Class>,
    entries: Vec<Entry>,
}

impl Admission {
    pub fn new(table: AdmissionTable) -> Admission {
        let classes = vec![Class::default(); table.by_class.len()];
        Admission {
            table,
            classes,
            entries: Vec::new(),
        }
    }

    /// Class `class`'s counters (`None`: it has no admission control).
    pub fn stats(&self, class: u32) -> Option<AdmissionStats> {
        self.spec(class)?;
        Some(self.classes[class as usize].stats)
    }

    /// Every class with admission control, in policy order.
    pub fn report(&self) -> Vec<ClassAdmission> {
        (0..self.table.by_class.len())
            .filter_map(|i| {
                let spec = self.table.by_class[i]?;
                Some(ClassAdmission {
                    class: self.table.names.get(i).cloned().unwrap_or_default(),
                    max_sessions: spec.max_sessions,
                    mode: spec.mode,
                    stats: self.classes[i].stats,
                })
            })
            .collect()
    }

    fn spec(&self, class: u32) -> Option<Spec> {
        self.table.by_class.get(class as usize).copied().flatten()
    }

    /// The packet of connection `conn` (sent by `side`, TCP flags `syn_only`: a SYN
    /// without ACK) that the pipeline classified into `class`, at `now`.
    pub fn check(
        &mut self,
        class: u32,
        (conn, side): (ConnId, Side),
        syn_only: bool,
        conns: &ConnTable,
        now: Instant,
    ) -> Decision {
        let Some(spec) = self.spec(class) else {
            return Decision::Pass;
        };
        if conn == ConnId::NONE || side != Side::Orig || !conns.is_live(conn) {
            return Decision::Pass;
        }
        let c = conns.get(conn);
        if !matches!(c.proto(), PROTO_TCP | PROTO_UDP) {
            // ICMP, neighbour discovery, IGMP/MLD…: not sessions; never held back
            return Decision::Pass;
        }
        let i = self.entry(conn, c.first_seen());
        match self.entries[i].state {
            ADMITTED => return Decision::Pass,
            // a refused flow stays refused; a TCP client may try again with a new SYN
            REFUSED if !(syn_only && c.tcp().is_some()) => {
                self.classes[class as usize].stats.refused_packets += 1;
                return Decision::Drop;
            }
            _ => {}
        }
        let tcp = c.tcp();
        if let Some(t) = tcp {
            if !syn_only {
                // picked up in mid-stream: a session that exists already (a closed one's
                // stragglers do not count)
                if t.phase() != TcpPhase::Closed {
                    self.admit(i, class);
                    self.classes[class as usize].stats.admitted += 1;
                }
                return Decision::Pass;
            }
        }
        if self.classes[class as usize].ids.len() >= spec.max_sessions as usize {
            self.sweep(class, spec, conns, now);
        }
        let full = self.classes[class as usize].ids.len() >= spec.max_sessions as usize;
        let st = &mut self.classes[class as usize].stats;
        if !full {
            st.admitted += 1;
        } else {
            match spec.mode {
                Mode::Share => st.shared += 1,
                Mode::Postpone => {
                    st.postponed += 1;
                    return Decision::Drop;
                }
                Mode::Refuse => {
                    st.refused += 1;
                    self.entries[i].state = REFUSED;
                    self.entries[i].class = class;
                    return if tcp.is_some() {
                        Decision::Reset
                    } else {
                        Decision::Drop
                    };
                }
            }
        }
        self.admit(i, class);
        Decision::Pass
    }

    /// Count the RST the device sent (or could not build) for a [`Decision::Reset`].
    pub fn reset_sent(&mut self, class: u32, sent: bool) {
        if let Some(c) = self.classes.get_mut(class as usize) {
            if sent {
                c.stats.resets += 1;
            } else {
                c.stats.resets_failed += 1;
            }
        }
    }

    fn admit(&mut self, i: usize, class: u32) {
        let e = &mut self.entries[i];
        e.state = ADMITTED;
        e.class = class;
        let c = &mut self.classes[class as usize];
        c.ids.push(i as u32);
        c.stats.sessions = c.ids.len() as u64;
    }

    /// The entry of connection `id` whose first packet was at `stamp`, made or reset.
    fn entry(&mut self, id: ConnId, stamp: Instant) -> usize {
        let i = id.0 as usize;
        let blank = Entry {
            stamp,
            class: 0,
            state: NONE,
        };
        if i >= self.entries.len() {
            self.entries.resize(
                i + 1,
                Entry {
                    stamp: Instant::ZERO,
                    ..blank
                },
            );
        }
        if self.entries[i].stamp != stamp {
            // the slot holds another connection now: the old one has left its class
            let old = self.entries[i];
            if old.state == ADMITTED {
                if let Some(c) = self.classes.get_mut(old.class as usize) {
                    c.ids.retain(|&x| x as usize != i);
                    c.stats.sessions = c.ids.len() as u64;
                }
            }
            self.entries[i] = blank;
        }
        i
    }

    /// Drop `class`'s sessions that left (at most once per [`SWEEP`]).
    fn sweep(&mut self, class: u32, spec: Spec, conns: &ConnTable, now: Instant) {
        let c = &mut self.classes[class as usize];
        if c.swept != Instant::ZERO && now.saturating_since(c.swept) < SWEEP {
            return;
        }
        c.swept = now;
        let entries = &mut self.entries;
        c.ids.retain(|&x| {
            let e = &mut entries[x as usize];
            let id = ConnId(x);
            let keep = e.state == ADMITTED
                && e.class == class
                && conns.is_same(id, e.stamp)
                && match conns.get(id).tcp() {
                    Some(t) => t.phase() != TcpPhase::Closed,
                    None => now.saturating_since(conns.get(id).last_seen()) <= spec.idle,
                };
            if !keep {
                e.state = NONE;
            }
            keep
        });
        c.stats.sessions = c.ids.len() as u64;
    }
}

#[cfg(test)]
mod tests;
