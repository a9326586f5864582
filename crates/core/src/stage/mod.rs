//! Stages: the one mechanism by which a direction of the device treats a packet after it
//! has been classified — Click's elements, net/sched's qdisc chain.
//!
//! ```text
//!   label (classify) → [mss] → [admission] → [tcr] → [condition] → [shape] → [emulate] → ready
//!                       rewrite   gate          hold    mark/police   queue     delay line
//! ```
//!
//! A direction ([`crate::pipeline::Pipeline`]) is an ordered list of stages, each a type
//! behind the [`Stage`] trait, built from the plain-data
//! [`crate::device::DeviceConfig`] in the canonical order of their [`Rank`]. A packet
//! enters the first stage at its arrival; each stage's [`Stage::input`] either passes it
//! on at once ([`Step::Next`]: a rewrite or a gate that let it through), keeps it
//! ([`Step::Held`]: a queue, a delay line, an ACK held for pacing), or refuses it
//! ([`Step::Drop`], the caller frees it). What a holding stage releases later
//! ([`Stage::poll`], at the driver's `now`) enters the stage after it, and so on; a packet
//! that passes the last stage waits in the direction's `ready` queue for the transmit.
//! A stage may also release packets *because of* an input (TCP rate control frees the
//! ACKs of a connection whose slot is reused): [`Stage::take_released`] hands them on
//! before the packet that caused it.
//!
//! Time: a packet reaches the first holding stage at its arrival (the kernel's receive
//! timestamp) and each later one at the release time of the one before it (`cx.now`).
//!
//! State that belongs to connections rather than to a direction — the connection table,
//! TCP rate control (data one way paces ACKs the other way), admission control (a class's
//! sessions), and the queues of packets the engine emits itself — is the device's
//! [`Shared`] state, lent to every stage call. A stage that works on it (admission, TCR)
//! is then a thin, per-direction view of it.
//!
//! To add a stage: a type implementing [`Stage`] (its own file, with its design comment),
//! a field in `DeviceConfig` (or `LaneConfig`) that the policy fills in, and a line in
//! `Device::lane_stages` that places it by its rank.

pub mod gates;
mod impls;

pub use impls::EmuStage;

use crate::admission::Admission;
use crate::conn::{ConnId, ConnTable};
use crate::flow::Side;
use crate::pool::{Direction, PktId, PktQueue};
use crate::qdisc::{Count, Ctx, DropCause};
use crate::tcp::tcr::Tcr;
use crate::time::Instant;
use std::any::Any;

/// What a stage did with a packet it was given.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Pass it to the next stage now.
    Next,
    /// The stage keeps it; it comes back out of [`Stage::poll`] or
    /// [`Stage::take_released`].
    Held,
    /// Refused; the caller frees it and counts the cause.
    Drop(DropCause),
}

/// Where a stage sits in a direction: stages are always ordered by rank. A packet carried
/// over by a policy reload re-enters at the first holding stage of the same or a later
/// rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// Header rewrites of the packet's own connection (MSS clamping).
    Rewrite,
    /// Admission control of new sessions.
    Admit,
    /// TCP rate control: ACKs held and paced.
    Pace,
    /// DiffServ metering, marking and policing.
    Condition,
    /// The link-sharing shaper with its leaf queues.
    Shape,
    /// The WAN link emulator.
    Emulate,
}

/// What a stage may know of the packet in hand, from the device's one parse of it.
/// Packets released by a stage further up carry no parse ([`Packet::RELEASED`]): only the
/// stages before the first holding one read headers.
#[derive(Copy, Clone)]
pub struct Packet<'a> {
    /// The frame's headers; `None` for a frame that did not parse and for released
    /// packets.
    pub parsed: Option<&'a weir_wire::Parsed>,
    /// Its connection in the device's table (`ConnId::NONE`: none).
    pub conn: ConnId,
    /// Which end of the connection sent it.
    pub side: Side,
    /// Whether this direction classified it (its `Meta::class` is a policy class).
    pub labelled: bool,
}

impl Packet<'_> {
    /// A packet released by a stage: nothing parsed, no connection.
    pub const RELEASED: Packet<'static> = Packet {
        parsed: None,
        conn: ConnId::NONE,
        side: Side::Orig,
        labelled: false,
    };
}

/// Packets the engine emits itself in one direction (probes, substitute ACKs, RSTs), sent
/// before anything else due there, and the frames it consumed.
#[derive(Default)]
pub struct Origin {
    pub queue: PktQueue,
    /// Packets the engine emitted in this direction.
    pub originated: Count,
    /// Frames received in this direction that the engine consumed (probe replies, ARP).
    pub consumed: Count,
}

impl Origin {
    /// Queue `pkt` (its `len` set), which the engine emits, to leave in `dir` (this
    /// origin's direction) ahead of everything; counted as originated.
    pub fn push(&mut self, pkt: PktId, dir: Direction, cx: &mut Ctx<'_>) {
        let m = cx.pool.meta_mut(pkt);
        m.dir = dir;
        m.arrival = cx.now;
        let len = m.len;
        self.originated.add(len);
        self.queue.push_back(cx.pool, pkt);
    }

    /// Queue a frame the engine wrote into `pkt` (`n`: its length, or why it could not be
    /// written) to leave in `dir` ahead of everything; `false`, and `pkt` freed, if it
    /// could not be written.
    pub fn push_written(
        &mut self,
        pkt: PktId,
        n: weir_wire::Result<usize>,
        dir: Direction,
        cx: &mut Ctx<'_>,
    ) -> bool {
        let Ok(n) = n else {
            cx.pool.free(pkt);
            return false;
        };
        cx.pool.meta_mut(pkt).len = n as u32;
        self.push(pkt, dir, cx);
        true
    }

    /// Count and free a frame the engine consumed.
    pub fn consume(&mut self, pkt: PktId, cx: &mut Ctx<'_>) {
        self.consumed.add(cx.pool.len(pkt));
        cx.pool.free(pkt);
    }
}

/// The device's state that both directions' stages share (see the module comment).
#[derive(Default)]
pub struct Shared {
    /// Connections of both directions; `None` for a device that keeps none.
    pub conns: Option<ConnTable>,
    /// TCP rate control of the policy's `tcr` classes.
    pub tcr: Option<Tcr>,
    /// Admission control of the policy's `max_sessions` classes.
    pub admission: Option<Admission>,
    /// What the engine emits, per direction (indexed by [`Direction::index`]).
    pub origin: [Origin; 2],
}

/// One element of a direction's chain; see the module comment.
pub trait Stage: AsAny + Send {
    /// A short name for reports (`mss`, `admission`, `tcr`, `condition`, `shape`,
    /// `emulate`).
    fn name(&self) -> &'static str;
    /// Where the stage sits in a direction.
    fn rank(&self) -> Rank;
    /// Whether the stage can keep packets (a queue, a delay line, held ACKs), as opposed
    /// to one that only rewrites, passes or refuses them.
    fn holds(&self) -> bool {
        false
    }
    /// Take `pkt`, which reached this stage at `at` (≤ `cx.now`). A stage knows its
    /// direction from when it was built.
    fn input(
        &mut self,
        pkt: PktId,
        at: Instant,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step;
    /// Whether an input may release packets ahead of the one given
    /// ([`Stage::take_released`]); asked once, when the direction is built.
    fn releases_on_input(&self) -> bool {
        false
    }
    /// A packet the last [`Stage::input`] released ahead of the one it was given.
    fn take_released(&mut self, _sh: &mut Shared, _cx: &mut Ctx<'_>) -> Option<PktId> {
        None
    }
    /// A held packet due at `cx.now`, if any. Late drops land in `cx.dropped`.
    fn poll(&mut self, _sh: &mut Shared, _cx: &mut Ctx<'_>) -> Option<PktId> {
        None
    }
    /// The earliest instant a held packet becomes due, when none is due now. State the
    /// stage keeps in [`Shared`] is counted by the device, not here.
    fn next_wakeup(&self) -> Option<Instant> {
        None
    }
    /// Packets held (not counting state in [`Shared`]).
    fn len(&self) -> usize {
        0
    }
    /// Whether the stage holds nothing (in its own state).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Discard everything held into `cx.dropped` with `cause`.
    fn purge(&mut self, _cx: &mut Ctx<'_>, _cause: DropCause) {}
    /// A policy reload: take over from `old`, the same kind of stage of the replaced
    /// policy, the state that should survive (before `old` is purged).
    fn carry_from(&mut self, _old: &mut dyn Stage, _cx: &mut Ctx<'_>, _report: &mut Carried) {}
}

/// What a reload's [`Stage::carry_from`] kept, for the reload report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Carried {
    /// Emulation profiles kept with their queues and delay lines (same name).
    pub profiles_kept: Vec<String>,
}

/// `Any` for stages, so a report can find a stage by its type.
pub trait AsAny: Any {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
