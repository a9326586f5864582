//! One direction of the bridge: its rings and counters ([`Lane`]), the receive path (a
//! batch from the RX ring, super-packets cut, VLAN tags and checksums completed, frames
//! over the MTU answered) and the transmit path (what the pipeline releases, into the TX
//! ring, captured on the way).

use super::*;

pub(super) struct Lane {
    pub(super) dir: Direction,
    /// The outgoing interface's MTU.
    pub(super) mtu: u32,
    /// The incoming interface's MTU (what ICMP replies leave by).
    pub(super) reply_mtu: u32,
    /// Rate limit of the ICMP replies to this lane's `oversize` frames (one token each).
    pub(super) icmp: Option<TokenBucket>,
    /// ICMP replies to frames received this way, waiting to leave the other way (moved to
    /// the other lane's backlog after each receive).
    pub(super) replies: Vec<PktId>,
    /// The first segment of a super-packet too long for the outgoing interface (quoted in
    /// the ICMP reply), [`COPY_BUF`] bytes.
    pub(super) seg_buf: Vec<u8>,
    pub(super) rx: RxRing,
    pub(super) tx: TxRing,
    /// Released packets waiting for TX ring room, in order.
    pub(super) backlog: VecDeque<PktId>,
    /// A frame longer than a ring slot, read whole from the socket ([`COPY_BUF`] bytes).
    pub(super) copy_buf: Vec<u8>,
    /// A super-packet with its VLAN tag put back, before it is cut.
    pub(super) gso_buf: Vec<u8>,
    /// This direction's own capture file.
    pub(super) pcap: Option<PcapWriter>,
    pub(super) stats: LaneStats,
    /// Frames received before this CLOCK_REALTIME instant (ns) are skipped: the kernel's
    /// fail-open bypass may have forwarded them (set at a hand-over).
    pub(super) skip_before: u64,
    /// Frames received from this CLOCK_REALTIME instant (ns) on wait in the ring for the
    /// next fail-open beat ([`crate::failopen::Heart::fresh_before`]); `u64::MAX` without
    /// a bypass.
    pub(super) fresh_before: u64,
    /// The last [`receive`] left a frame in the ring for the next beat.
    pub(super) held: bool,
    pub(super) meter: RateMeter,
    /// Super-packets may cross this lane whole: no capture of wire frames (and while its
    /// TX ring still sends them whole: [`TxRing::sends_whole`]).
    pub(super) whole: bool,
}

/// Read up to `batch` frames from the lane's RX ring into its pipeline. True if any came.
/// `now` is the turn's clock reading, moved on past a frame that came after it.
pub(super) fn receive(lane: &mut Lane, eng: &mut Engine, now: &mut Instant, batch: usize) -> bool {
    let Engine {
        device,
        pool,
        rng,
        dropped,
        clock,
    } = eng;
    let mut got = false;
    lane.held = false;
    for _ in 0..batch {
        let Some(f) = lane.rx.peek() else { break };
        if f.ts_ns >= lane.fresh_before && f.ts_ns >= lane.skip_before {
            // the heartbeat may have gone stale before it came: the kernel may have
            // forwarded it; the next beat says (see crate::failopen)
            lane.held = true;
            break;
        }
        got = true;
        if f.ts_ns < lane.skip_before {
            // the kernel's fail-open bypass may have forwarded it: never twice
            let (copied, wire_len) = (f.copied, f.wire_len);
            if copied {
                let _ = lane.rx.recv_copy(&mut lane.copy_buf);
            }
            lane.stats.handover_skipped.add(wire_len);
            lane.rx.release();
            continue;
        }
        // the kernel's receive timestamp: when the frame really arrived (the loop may read
        // it some microseconds later); bounded to the last second in case of a clock step
        // A frame that came after the turn's clock reading (the loop was descheduled
        // between reading the clock and the ring) moves the turn's time on: capped at the
        // old reading it would be timed from before it arrived (an emulated delay cut short)
        let arrival = match f.ts_ns {
            0 => *now,
            ts => {
                let at = clock.from_unix_ns(ts);
                if at > *now {
                    *now = clock.now().max(*now);
                }
                at.max(now.saturating_sub(Duration::from_secs(1))).min(*now)
            }
        };
        let now = *now;
        let mut sink = Sink {
            whole: lane.whole && lane.tx.sends_whole(),
            dir: lane.dir,
            mtu: lane.mtu,
            reply_mtu: lane.reply_mtu,
            icmp: &mut lane.icmp,
            replies: &mut lane.replies,
            seg_buf: &mut lane.seg_buf[..],
            device,
            stats: &mut lane.stats,
            pool,
            rng,
            dropped,
            now,
            arrival,
        };
        let wire_len = f.wire_len;
        let rx = Received {
            vlan: f.vlan,
            csum_not_ready: f.csum_not_ready,
            vnet: VnetHdr::parse(&f.vnet).unwrap_or_default(),
        };
        if f.copied {
            // the slot holds a truncated copy; the whole frame waits on the socket
            match lane.rx.recv_copy(&mut lane.copy_buf) {
                Ok(Some(n)) if n <= lane.copy_buf.len() && n > vnet::LEN => {
                    let rx = Received {
                        vnet: VnetHdr::parse(&lane.copy_buf).unwrap_or_default(),
                        ..rx
                    };
                    sink.stats.copied += 1;
                    if !sink.whole_in_place(&mut lane.copy_buf, n, rx) {
                        sink.frame(&lane.copy_buf[vnet::LEN..n], rx, &mut lane.gso_buf);
                    }
                }
                _ => {
                    sink.stats.rx.add(wire_len);
                    sink.stats.truncated.add(wire_len);
                }
            }
        } else if (f.data.len() as u32) < wire_len {
            sink.stats.rx.add(wire_len);
            sink.stats.truncated.add(wire_len);
        } else {
            sink.frame(f.data, rx, &mut lane.gso_buf);
        }
        lane.rx.release();
    }
    got
}

/// What the RX ring said about a frame besides its bytes.
#[derive(Clone, Copy)]
struct Received {
    /// A VLAN tag the device stripped (TPID, TCI).
    vlan: Option<(u16, u16)>,
    /// `TP_STATUS_CSUMNOTREADY` (also said by `vnet`'s `F_NEEDS_CSUM`).
    csum_not_ready: bool,
    vnet: VnetHdr,
}

/// Where a received frame goes: segmented if it is a super-packet, copied into the
/// packet pool, completed (VLAN tag, checksum) and handed to the lane's pipeline.
struct Sink<'a> {
    /// Super-packets may stay whole (the device decides which: [`Device::keeps_whole`]).
    whole: bool,
    dir: Direction,
    /// The outgoing interface's MTU, and the incoming one's (for ICMP replies).
    mtu: u32,
    reply_mtu: u32,
    icmp: &'a mut Option<TokenBucket>,
    /// ICMP replies made, to leave the other way.
    replies: &'a mut Vec<PktId>,
    /// Room for a super-packet's first segment ([`COPY_BUF`] bytes).
    seg_buf: &'a mut [u8],
    device: &'a mut Device,
    stats: &'a mut LaneStats,
    pool: &'a mut Pool,
    rng: &'a mut Rng,
    dropped: &'a mut Vec<(PktId, DropCause)>,
    now: Instant,
    arrival: Instant,
}

impl Sink<'_> {
    /// One frame as the kernel gave it. `scratch` holds a super-packet whose VLAN tag is
    /// put back before it is cut.
    fn frame(&mut self, data: &[u8], rx: Received, scratch: &mut Vec<u8>) {
        let mut vnet = rx.vnet;
        if !vnet.is_gso() {
            return self.single(data, rx, scratch);
        }
        let data = match rx.vlan {
            Some(tag) if data.len() >= 12 => {
                vnet.csum_start = vnet.csum_start.saturating_add(4);
                if vnet.hdr_len != 0 {
                    vnet.hdr_len = vnet.hdr_len.saturating_add(4);
                }
                self.stats.vlan_restored += 1;
                with_tag(data, tag, scratch)
            }
            _ => data,
        };
        let seg = match Segmenter::new(data, &vnet) {
            Ok(s) => s,
            Err(e) => {
                self.stats.rx.add(data.len() as u32);
                self.stats.offload_errors.add(&e, data.len() as u32);
                return;
            }
        };
        if seg.max_segment_len() > pmtu::max_frame_len(data, self.mtu) {
            // the sender's segment size does not fit the outgoing interface's MTU: tell it,
            // quoting the first segment (as it would have left)
            self.stats.rx.add(data.len() as u32);
            let buf = std::mem::take(&mut self.seg_buf);
            let first = match seg.write(0, buf) {
                Ok(n) => &buf[..n],
                Err(_) => data,
            };
            self.over_mtu(first, data.len() as u32);
            self.seg_buf = buf;
            return;
        }
        if self.whole && vnet.needs_csum() && self.device.keeps_whole(self.dir, data) {
            if self.keep_whole(data, &vnet, &seg) {
                return;
            }
            // no large slot free: cut it, as always
            self.stats.gso.no_whole_slot += 1;
        }
        self.stats.gso.super_packets += 1;
        self.stats.gso.segments += seg.count() as u64;
        for i in 0..seg.count() {
            let len = seg.segment_len(i) as u32;
            self.stats.rx.add(len);
            let Some(id) = self.pool.alloc() else {
                self.stats.pool_exhausted.add(len);
                continue;
            };
            // fails only for a segment within a jumbo MTU but longer than a packet slot
            match seg.write(i, self.pool.slot_mut(id)) {
                Ok(n) => self.admit(id, n),
                Err(_) => {
                    self.stats.truncated.add(len);
                    self.pool.free(id);
                }
            }
        }
    }

    /// The common case of a super-packet kept whole without a copy: read whole into
    /// `buf` (`n` bytes, its virtio-net header first), no VLAN tag to put back, within
    /// the MTU, kept whole by the device: `buf` is swapped into a large slot. False when
    /// any of that does not hold (nothing done; [`Sink::frame`] takes it from there).
    fn whole_in_place(&mut self, buf: &mut Vec<u8>, n: usize, rx: Received) -> bool {
        let vnet = rx.vnet;
        if !self.whole || rx.vlan.is_some() || !vnet.is_gso() || !vnet.needs_csum() {
            return false;
        }
        let data = &buf[vnet::LEN..n];
        if !self.device.keeps_whole(self.dir, data) {
            // decided: `frame` cuts it without asking again
            self.whole = false;
            return false;
        }
        let Ok(seg) = Segmenter::new(data, &vnet) else {
            return false;
        };
        if seg.max_segment_len() > pmtu::max_frame_len(data, self.mtu) {
            return false;
        }
        let cost = wire_cost(&seg);
        let Some(id) = self.pool.alloc_whole_swap(buf) else {
            return false;
        };
        let at = vnet::LEN as u32;
        self.whole_admitted(id, vnet, cost, (at, n as u32 - at));
        true
    }

    /// Record a super-packet just put in large slot `id` — its virtio-net header (the
    /// checksum left to the kernel or the NIC, as it came), its `(segments, wire bytes)`
    /// cost as its length, where its bytes are (`(offset, stored)`) — count and admit it.
    fn whole_admitted(
        &mut self,
        id: PktId,
        vnet: VnetHdr,
        (segments, wire): (usize, usize),
        (offset, stored): (u32, u32),
    ) {
        self.pool.set_super(
            id,
            Super {
                vnet,
                segments: segments as u16,
                stored,
                offset,
            },
        );
        self.pool.meta_mut(id).len = wire as u32;
        // one packet (every drop counter counts it once), its wire bytes
        self.stats.rx.add(wire as u32);
        self.stats.gso.kept_whole += 1;
        self.stats.gso.whole_segments += segments as u64;
        self.admit(id, wire);
    }

    /// Copy a super-packet into a large slot and admit it ([`Sink::whole_admitted`]).
    /// False: no large slot free.
    fn keep_whole(&mut self, data: &[u8], vnet: &VnetHdr, seg: &Segmenter<'_>) -> bool {
        let Some(id) = self.pool.alloc_whole() else {
            return false;
        };
        let Some(to) = self.pool.slot_mut(id).get_mut(..data.len()) else {
            self.pool.free(id);
            return false;
        };
        to.copy_from_slice(data);
        self.whole_admitted(id, *vnet, wire_cost(seg), (0, data.len() as u32));
        true
    }

    /// A frame that is not a super-packet: copy, restore its VLAN tag, complete its
    /// checksum. `scratch` holds the tagged frame if it is too long to forward.
    fn single(&mut self, data: &[u8], rx: Received, scratch: &mut Vec<u8>) {
        let tagged = rx.vlan.is_some() && data.len() >= 12;
        let len = data.len() + if tagged { 4 } else { 0 };
        self.stats.rx.add(len as u32);
        let limit = match rx.vlan {
            Some((tpid, _)) if tagged => pmtu::frame_limit(tpid, self.mtu),
            _ => pmtu::max_frame_len(data, self.mtu),
        };
        if len > limit {
            // the kernel would refuse it on the way out
            let frame = match rx.vlan {
                Some(tag) if tagged => with_tag(data, tag, scratch),
                _ => data,
            };
            self.over_mtu(frame, len as u32);
            return;
        }
        if len > self.pool.slot_size() {
            // within the MTU (jumbo frames) but longer than weir's packet slots
            self.stats.truncated.add(len as u32);
            return;
        }
        let Some(id) = self.pool.alloc() else {
            self.stats.pool_exhausted.add(len as u32);
            return;
        };
        let slot = self.pool.slot_mut(id);
        let shift = match rx.vlan {
            Some(tag) if tagged => {
                slot[..12].copy_from_slice(&data[..12]);
                slot[12..16].copy_from_slice(&tag_bytes(tag));
                slot[16..len].copy_from_slice(&data[12..]);
                self.stats.vlan_restored += 1;
                4
            }
            _ => {
                slot[..len].copy_from_slice(data);
                0
            }
        };
        let frame = &mut self.pool.slot_mut(id)[..len];
        if rx.vnet.needs_csum() {
            let start = usize::from(rx.vnet.csum_start) + shift;
            match fixup::complete_partial_checksum(frame, start, rx.vnet.csum_offset.into()) {
                Ok(()) => self.stats.csum_filled += 1,
                Err(_) => {
                    self.stats
                        .offload_errors
                        .add(&GsoError::ChecksumOffsets, len as u32);
                    self.pool.free(id);
                    return;
                }
            }
        } else if rx.csum_not_ready && fixup::fill_l4_checksum(frame).unwrap_or(false) {
            self.stats.csum_filled += 1;
        }
        self.admit(id, len);
    }

    /// A frame (`counted` bytes as received) too long for the outgoing interface: drop
    /// it, and tell its sender the MTU if it asked not to be fragmented (rate-limited).
    fn over_mtu(&mut self, frame: &[u8], counted: u32) {
        self.stats.oversize.add(counted);
        let st = &mut self.stats.pmtu;
        let Some(bucket) = self.icmp.as_mut() else {
            st.not_answered += 1;
            return;
        };
        let Some(id) = self.pool.alloc() else {
            st.not_answered += 1;
            return;
        };
        match pmtu::too_big_reply(self.pool.slot_mut(id), frame, self.mtu, self.reply_mtu) {
            Ok(r) if bucket.try_consume(1, self.now) => {
                let m = self.pool.meta_mut(id);
                m.len = r.len as u32;
                m.dir = self.dir.reverse();
                m.arrival = self.now;
                match r.version {
                    weir_wire::ip::Version::V4 => st.frag_needed.add(r.len as u32),
                    weir_wire::ip::Version::V6 => st.packet_too_big.add(r.len as u32),
                }
                self.replies.push(id);
                return;
            }
            Ok(_) => st.rate_limited += 1,
            Err(NoReply::MayFragment) => st.df_clear += 1,
            Err(_) => st.not_answered += 1,
        }
        self.pool.free(id);
    }

    /// Hand a packet of `len` bytes in the pool to the device.
    fn admit(&mut self, id: PktId, len: usize) {
        self.pool.meta_mut(id).len = len as u32;
        let mut cx = Ctx::new(self.now, self.pool, self.rng, self.dropped);
        if self
            .device
            .ingress(self.dir, id, &mut cx, self.arrival)
            .is_err()
        {
            self.stats.dropped.add(len as u32);
            self.pool.free(id);
        }
        settle(self.stats, self.pool, self.dropped);
    }
}

/// What a super-packet costs on the wire: (its segments, their frame lengths summed).
fn wire_cost(seg: &Segmenter<'_>) -> (usize, usize) {
    let n = seg.count();
    (n, (0..n).map(|i| seg.segment_len(i)).sum())
}

/// `data` with the VLAN tag the device stripped put back after the MAC addresses, in
/// `scratch` (`data` is at least 12 bytes long).
fn with_tag<'s>(data: &[u8], tag: (u16, u16), scratch: &'s mut Vec<u8>) -> &'s [u8] {
    scratch.clear();
    scratch.extend_from_slice(&data[..12]);
    scratch.extend_from_slice(&tag_bytes(tag));
    scratch.extend_from_slice(&data[12..]);
    scratch
}

/// The 4 bytes of an 802.1Q/802.1ad tag.
fn tag_bytes((tpid, tci): (u16, u16)) -> [u8; 4] {
    let (a, b) = (tpid.to_be_bytes(), tci.to_be_bytes());
    [a[0], a[1], b[0], b[1]]
}

/// Packets a pipeline discarded after accepting them: count and free.
pub(super) fn settle(
    stats: &mut LaneStats,
    pool: &mut Pool,
    dropped: &mut Vec<(PktId, DropCause)>,
) {
    for (id, _) in dropped.drain(..) {
        stats.dropped.add(pool.len(id));
        pool.free(id);
    }
}

/// Move released packets into the TX ring (frames over the lane's MTU dropped as
/// `oversize`), captured into `both` (a capture of both directions) or else the lane's
/// own; keep what does not fit in the backlog.
pub(super) fn transmit(
    lane: &mut Lane,
    eng: &mut Engine,
    both: Option<&mut PcapWriter>,
    now: Instant,
) {
    let unix_ns = eng.clock.to_unix_ns(now);
    let (device, pool, rng, dropped) = eng.split();
    let Lane {
        dir,
        mtu,
        backlog,
        tx,
        stats,
        pcap,
        ..
    } = lane;
    let (dir, mtu) = (*dir, *mtu);
    let mut pcap = match both {
        Some(w) => Some(w),
        None => pcap.as_mut(),
    };
    let mut sent = false;
    loop {
        let id = match backlog.pop_front() {
            Some(id) => id,
            None => {
                let mut cx = Ctx::new(now, pool, rng, dropped);
                let got = device.poll_transmit(dir, &mut cx);
                settle(stats, pool, dropped);
                match got {
                    Some(id) => id,
                    None => break,
                }
            }
        };
        let data = pool.data(id);
        if let Some(s) = pool.super_packet(id) {
            let mut hdr = [0u8; vnet::LEN];
            let _ = s.vnet.emit(&mut hdr);
            let wire = pool.len(id);
            match tx.send_whole(&hdr, data) {
                WholeSent::Sent => stats.tx.add(wire),
                WholeSent::Busy => {
                    // it goes first next time
                    stats.tx_ring_full += 1;
                    backlog.push_front(id);
                    break;
                }
                // handed to the kernel and lost there, as a ring frame a full device drops:
                // part of `tx`, named apart
                WholeSent::Dropped => {
                    stats.tx.add(wire);
                    stats.gso.whole_dropped.add(wire);
                }
                // dropped and counted; after WHOLE_REFUSALS in a row the ring stops sending
                // whole and the lane cuts (`TxRing::sends_whole`)
                WholeSent::Refused { error, gave_up } => {
                    if stats.gso.whole_refused.packets == 0 || gave_up {
                        let then = if gave_up {
                            "weir cuts super-packets on this interface from now on"
                        } else {
                            "further refusals are counted (gso.whole_refused)"
                        };
                        crate::log::warning(&format!(
                            "{}: the kernel refused a super-packet sent whole ({error}); it \
                             was dropped; {then}",
                            tx.iface()
                        ));
                    }
                    stats.tx.add(wire);
                    stats.gso.whole_refused.add(wire);
                }
            }
            pool.free(id);
            continue;
        }
        if pmtu::over_mtu(data, mtu) {
            // the kernel would refuse it; frames received were checked on the way in, so
            // only a packet the engine made itself can get here
            stats.oversize.add(data.len() as u32);
            pool.free(id);
            continue;
        }
        let ok = tx.push_with(|buf| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            n
        });
        if !ok {
            stats.tx_ring_full += 1;
            backlog.push_front(id);
            break;
        }
        if let Some(w) = pcap.as_deref_mut() {
            w.write(unix_ns, data);
        }
        stats.tx.add(data.len() as u32);
        pool.free(id);
        sent = true;
    }
    if sent {
        let _ = tx.flush();
    }
}

#[cfg(test)]
mod tests;
