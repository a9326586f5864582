//! What one forwarding loop drives (the bridge's, or one worker's of `--workers N`): the
//! engine and what it runs on ([`Engine`]: the device, the packet pool, the RNG, the
//! drop list, the wall clock) and the two lanes ([`Driver`]).
//!
//! The ring I/O ([`super::lane`]) takes a lane and the [`Engine`]; a loop turn
//! ([`Driver::forward`]) is each lane's receive then transmit, as before the split; the
//! catch-up after a late wake-up ([`Driver::catch_up`], see [`crate::wake`]), and the
//! packets a reload or the shutdown takes out of the device ([`Driver::settle_by_dir`])
//! are here too. No allocation: every buffer was made when the rings were opened.

use super::lane::{receive, settle, transmit, Lane};
use super::LaneStats;
use crate::clock::Clock;
use crate::pcap::PcapWriter;
use crate::wake;
use weir_core::device::Device;
use weir_core::{Count, Ctx, Direction, DropCause, Duration, Instant, PktId, Pool, Rng};

/// The engine and what it runs on: what [`Ctx`] borrows, and the clock.
pub(super) struct Engine {
    pub(super) device: Device,
    pub(super) pool: Pool,
    pub(super) rng: Rng,
    /// Packets the device discarded after accepting them (counted and freed by the
    /// caller: [`settle`], [`Driver::settle_by_dir`]).
    pub(super) dropped: Vec<(PktId, DropCause)>,
    pub(super) clock: Clock,
}

impl Engine {
    /// The device and what a [`Ctx`] borrows, apart.
    #[inline]
    #[allow(clippy::type_complexity)]
    pub(super) fn split(
        &mut self,
    ) -> (
        &mut Device,
        &mut Pool,
        &mut Rng,
        &mut Vec<(PktId, DropCause)>,
    ) {
        (
            &mut self.device,
            &mut self.pool,
            &mut self.rng,
            &mut self.dropped,
        )
    }
}

/// A forwarding loop's state: the engine and the two directions.
pub(super) struct Driver {
    pub(super) eng: Engine,
    /// LAN → WAN.
    pub(super) out: Lane,
    /// WAN → LAN.
    pub(super) inb: Lane,
}

impl Driver {
    /// One turn of both lanes at `now` (moved on by a frame that came after it): up to
    /// `batch` frames received, then what the pipeline releases transmitted (captured into
    /// `both` if there is a capture of both directions); the ICMP replies made join the
    /// other lane's backlog. True if any frame came.
    #[inline]
    pub(super) fn forward(
        &mut self,
        now: &mut Instant,
        batch: usize,
        mut both: Option<&mut PcapWriter>,
    ) -> bool {
        let mut work = false;
        for lane in [&mut self.out, &mut self.inb] {
            work |= receive(lane, &mut self.eng, now, batch);
            transmit(lane, &mut self.eng, both.as_deref_mut(), *now);
        }
        // ICMP replies leave by the interface the frame came in by: next turn
        self.inb.backlog.extend(self.out.replies.drain(..));
        self.out.backlog.extend(self.inb.replies.drain(..));
        work
    }

    /// Replay the engine's departures scheduled between `last_poll` and `now` (a late
    /// wake-up), at their own instants, at most `catch_up` back (`last_poll` moved on as
    /// [`wake::replay`] does); the steps taken.
    pub(super) fn catch_up(
        &mut self,
        last_poll: &mut Instant,
        now: Instant,
        catch_up: Duration,
    ) -> usize {
        let Driver { eng, out, inb } = self;
        let (device, pool, rng, dropped) = eng.split();
        // what each step releases joins the lane's backlog, which `transmit` sends first:
        // one ring kick for the whole replay, not one per step
        wake::replay(
            device,
            |d| d.next_wakeup(),
            |device, at| {
                for lane in [&mut *out, &mut *inb] {
                    let mut cx = Ctx::new(at, pool, rng, dropped);
                    while let Some(id) = device.poll_transmit(lane.dir, &mut cx) {
                        lane.backlog.push_back(id);
                    }
                    settle(&mut lane.stats, pool, dropped);
                }
            },
            last_poll,
            now,
            catch_up,
        )
    }

    /// Count the packets in the drop list in their lane's counter `counter` (by their
    /// direction) and free them.
    pub(super) fn settle_by_dir(&mut self, counter: fn(&mut LaneStats) -> &mut Count) {
        for (id, _) in self.eng.dropped.drain(..) {
            let lane = match self.eng.pool.meta(id).dir {
                Direction::Outbound => &mut self.out,
                Direction::Inbound => &mut self.inb,
            };
            counter(&mut lane.stats).add(self.eng.pool.len(id));
            self.eng.pool.free(id);
        }
    }

    /// At the stop: discard what the device and the lanes hold (`shutdown_drops`).
    pub(super) fn shutdown(&mut self, now: Instant) {
        let mut cx = Ctx::new(
            now,
            &mut self.eng.pool,
            &mut self.eng.rng,
            &mut self.eng.dropped,
        );
        self.eng.device.purge(&mut cx, DropCause::Shutdown);
        for lane in [&mut self.out, &mut self.inb] {
            while let Some(id) = lane.backlog.pop_front() {
                cx.drop_later(id, DropCause::Shutdown);
            }
            for id in lane.replies.drain(..) {
                cx.drop_later(id, DropCause::Shutdown);
            }
        }
        self.settle_by_dir(|s| &mut s.shutdown_drops);
    }
}
