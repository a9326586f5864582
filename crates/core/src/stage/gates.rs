//! The stages that act on a packet's connection before it is queued: MSS clamping
//! ([`MssStage`], a rewrite), admission control ([`AdmissionStage`], a gate) and TCP rate
//! control ([`TcrStage`], which holds ACKs to pace their senders). Their algorithms live
//! in [`crate::tcp::mss`], [`crate::admission`] and [`crate::tcp::tcr`]; admission and TCR
//! keep their state in the device's [`Shared`] (a connection has two directions), so these
//! stages are their per-direction views.

use super::{Packet, Rank, Shared, Stage, Step};
use crate::admission::Decision;
use crate::conn::ConnId;
use crate::pool::{Direction, PktId};
use crate::qdisc::{Ctx, DropCause};
use crate::tcp::mss::{MssStats, MssTable};
use crate::tcp::tcr::Verdict;
use crate::time::Instant;
use weir_wire::tcp::TcpFlags;

/// MSS clamping of the SYNs and SYN-ACKs travelling one direction (see
/// [`crate::tcp::mss`]): a SYN takes its rule's or class's cap and leaves it in its
/// connection's entry; a SYN-ACK takes its connection's cap, else its own class's (only
/// where this direction classifies).
pub struct MssStage {
    table: MssTable,
    stats: MssStats,
}

impl MssStage {
    pub fn new(table: MssTable) -> MssStage {
        MssStage {
            table,
            stats: MssStats::default(),
        }
    }

    /// What clamping did in this direction.
    pub fn stats(&self) -> MssStats {
        self.stats
    }
}

impl Stage for MssStage {
    fn name(&self) -> &'static str {
        "mss"
    }
    fn rank(&self) -> Rank {
        Rank::Rewrite
    }
    fn input(
        &mut self,
        pkt: PktId,
        _at: Instant,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        let Some(p) = pk.parsed else {
            return Step::Next;
        };
        let Some(flags) = p.tcp_flags else {
            return Step::Next;
        };
        // a SYN is never a super-packet from an honest stack; one that claims to be is
        // forwarded as it is (its length is its wire cost, not its bytes)
        if !flags.contains(TcpFlags::SYN) || cx.pool.super_packet(pkt).is_some() {
            return Step::Next;
        }
        let m = cx.pool.meta(pkt);
        let v6 = p.ip_version == Some(weir_wire::ip::Version::V6);
        let own = pk
            .labelled
            .then(|| self.table.cap(m.class, m.rule, v6))
            .flatten();
        let entry = sh
            .conns
            .as_mut()
            .filter(|_| pk.conn != ConnId::NONE)
            .and_then(|t| t.get_mut(pk.conn).tcp_mut());
        let cap = if flags.contains(TcpFlags::ACK) {
            entry.and_then(|t| t.mss_cap()).or(own)
        } else {
            if let Some(t) = entry {
                t.set_mss_cap(own.unwrap_or(0));
            }
            own
        };
        if let Some(cap) = cap {
            let _ = crate::tcp::mss::clamp(cx.pool, pkt, p, cap, &mut self.stats);
        }
        Step::Next
    }
}

/// Admission control (`max_sessions`) of the packets this direction classifies: a new
/// session beyond its class's limit is shared, postponed (dropped until there is room) or
/// refused — a refused TCP SYN is answered with an RST towards its sender.
pub struct AdmissionStage {
    dir: Direction,
}

impl AdmissionStage {
    pub fn new(dir: Direction) -> AdmissionStage {
        AdmissionStage { dir }
    }
}

impl Stage for AdmissionStage {
    fn name(&self) -> &'static str {
        "admission"
    }
    fn rank(&self) -> Rank {
        Rank::Admit
    }
    fn input(
        &mut self,
        pkt: PktId,
        _at: Instant,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        let (Some(a), Some(conns), Some(p)) = (&mut sh.admission, &sh.conns, pk.parsed) else {
            return Step::Next;
        };
        let class = cx.pool.meta(pkt).class;
        let syn_only = p
            .tcp_flags
            .is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK));
        match a.check(class, (pk.conn, pk.side), syn_only, conns, cx.now) {
            Decision::Pass => Step::Next,
            Decision::Drop => Step::Drop(DropCause::Admission),
            Decision::Reset => {
                let back = self.dir.reverse();
                let sent = reset(&mut sh.origin[back.index()], back, pkt, p, cx);
                if let Some(a) = &mut sh.admission {
                    a.reset_sent(class, sent);
                }
                Step::Drop(DropCause::Admission)
            }
        }
    }
}

/// Answer the refused TCP SYN `pkt` (parsed as `p`) with an RST, queued in `origin` to go
/// first in `back` (the way the SYN came). `false`: no RST could be built (no free
/// packet, a frame it cannot answer).
fn reset(
    origin: &mut super::Origin,
    back: Direction,
    pkt: PktId,
    p: &weir_wire::Parsed,
    cx: &mut Ctx<'_>,
) -> bool {
    let Some(rst) = cx.pool.alloc() else {
        return false;
    };
    let frame = cx.pool.data(pkt).to_vec();
    let n = weir_wire::build::tcp_reset_reply(cx.pool.slot_mut(rst), &frame, p);
    origin.push_written(rst, n, back, cx)
}

/// TCP rate control's view of one direction: data segments of `tcr` classes mark their
/// connections; ACKs travelling here towards such senders are sized and may be held,
/// then released at their pacing times ([`crate::tcp::tcr`]).
pub struct TcrStage {
    dir: Direction,
}

impl TcrStage {
    pub fn new(dir: Direction) -> TcrStage {
        TcrStage { dir }
    }
}

impl Stage for TcrStage {
    fn name(&self) -> &'static str {
        "tcr"
    }
    fn rank(&self) -> Rank {
        Rank::Pace
    }
    fn holds(&self) -> bool {
        true
    }
    fn input(
        &mut self,
        pkt: PktId,
        _at: Instant,
        pk: &Packet<'_>,
        sh: &mut Shared,
        cx: &mut Ctx<'_>,
    ) -> Step {
        let (Some(t), Some(conns), Some(p)) = (&mut sh.tcr, &sh.conns, pk.parsed) else {
            return Step::Next;
        };
        let labelled = pk.labelled.then(|| cx.pool.meta(pkt).class);
        let v = t.ingress(
            self.dir,
            pkt,
            p,
            conns,
            (pk.conn, pk.side),
            labelled,
            cx.pool,
            cx.now,
        );
        match v {
            Verdict::Held => Step::Held,
            Verdict::Forward => Step::Next,
        }
    }
    fn releases_on_input(&self) -> bool {
        true
    }
    fn take_released(&mut self, sh: &mut Shared, cx: &mut Ctx<'_>) -> Option<PktId> {
        sh.tcr.as_mut()?.take_ready(self.dir, cx.pool)
    }
    fn poll(&mut self, sh: &mut Shared, cx: &mut Ctx<'_>) -> Option<PktId> {
        let t = sh.tcr.as_mut()?;
        if t.due(self.dir, cx.now) {
            t.release(self.dir, cx.pool, cx.now);
        }
        t.take_ready(self.dir, cx.pool)
    }
}
