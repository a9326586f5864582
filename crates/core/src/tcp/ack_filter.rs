//! CAKE's ACK filter, as pure logic on Ethernet frames: when a TCP segment joins a flow's
//! queue, which one queued pure ACK of the same connection it makes redundant, so the
//! queue may drop it (Linux `net/sched/sch_cake.c`: `cake_ack_filter`,
//! `cake_tcph_may_drop`, `cake_tcph_sack_compare`, `cake_get_tcpopt`; Høiland-Jørgensen,
//! Täht, Morton, "Piece of CAKE", IEEE LANMAN 2018, §III-D). On an asymmetric link the
//! ACKs of a download queue behind each other; a newer ACK carries everything an older
//! one says, so sending both wastes the slow direction.
//!
//! The rules, exactly CAKE's:
//! - **The trigger** is the segment just queued at the flow's tail: any TCP segment with
//!   ACK set and SYN clear (it may carry data, FIN or anything else). Its timestamps
//!   (TSval, TSecr) are read from its first timestamp option of length 10; without one
//!   they count as 0.
//! - **A candidate** is a queued packet, head to tail, of the *same connection in the same
//!   direction*: same IP version, source and destination addresses and ports (a flow
//!   queue may hold colliding flows). It is eligible when all of these hold:
//!   - its flags are ACK alone, apart from ECE and CWR (no SYN, FIN, RST, PSH, URG), and
//!     the four bits after the data offset (three reserved, AE/NS) are clear;
//!   - it carries no data (IP payload length = TCP header length);
//!   - its options are only NOP, EOL (the rest of the area unread), MD5 signature (19),
//!     SACK with a length of 2 + 8n, and a timestamp of length 10 whose TSval and TSecr
//!     are both not after the trigger's (serial-number arithmetic, RFC 1982). MSS, window
//!     scale, SACK-permitted, fast open, experimental or any other kind keep the packet.
//!     A malformed option (length missing, below 2, or past the header) ends the walk, as
//!     in Linux's `tcp_parse_options`;
//!   - its cumulative ACK is not after the trigger's;
//!   - the trigger's SACK information covers its own: every SACK block of the candidate
//!     lies inside one block of the trigger, the candidate has no D-SACK (a block
//!     starting before its cumulative ACK), and a candidate with SACK blocks is kept
//!     when the trigger has none. Blocks are read from the first SACK option; a partial
//!     block at its end is ignored;
//!   - the trigger says something new: a higher cumulative ACK, or more SACKed bytes.
//! - **ECN**: the first eligible ACK found is remembered with its ECE and CWR bits. A
//!   later packet of the connection (eligible or not) with other ECE/CWR bits forgets
//!   it: dropping it would lose the moment the sender should see the change.
//! - **Mode `On`** (CAKE's `ack-filter`, conservative) drops the first eligible ACK only
//!   when a second one is found after it, so one older ACK always stays queued besides
//!   the trigger. **Mode `Aggressive`** (`ack-filter-aggressive`) also drops a single
//!   eligible ACK when it is the packet right before the trigger in the flow queue and
//!   has the trigger's ECE/CWR bits. At most one packet is dropped per arrival.
//! - CAKE reads no window field: the newer ACK carries the receiver's current window.
//!
//! What this guarantees the sender, with `D` the packet that finally carries a dropped
//! ACK `A`'s information (its trigger, or the trigger's own trigger if that was dropped
//! too; always later in the queue and of the same connection): `D`'s cumulative ACK is
//! not below `A`'s, each of `A`'s SACK blocks is inside one of `D`'s, `D`'s timestamps
//! are not below `A`'s, and `A`'s ECE/CWR bits equal those of the next packet of the
//! connection, so the sequence of ECE/CWR changes the sender sees is unchanged. Nothing is
//! lost, but a dropped ACK's SACK blocks and timestamps arrive with `D` rather than at
//! `A`'s place. With a receiver that never shrinks its window's right edge, the right
//! edge `D` announces is not below `A`'s. The property test in `ack_filter/tests.rs`
//! checks these on random ACK streams, and that at every delivery the filtered sender's
//! cumulative ACK, window edge and ECE/CWR history are at least the unfiltered one's.
//!
//! Where this differs from CAKE, always by keeping a packet CAKE might drop: IPv4
//! fragments are never candidates nor triggers (CAKE reads their first bytes as TCP);
//! IPv6 is read only with TCP right after the fixed header (as CAKE), and 6in4 (IPv4
//! protocol 41, CAKE's special case) also compares the outer addresses, which CAKE
//! ignores. Frames are read with weir-wire's checked views; anything that does not parse
//! is neither trigger nor candidate.
//!
//! Cost: the trigger is read once; each queued packet is read up to its TCP options (no
//! allocation), head to tail, stopping at the second eligible ACK in mode `On`. A queue
//! checks [`may_trigger_frame`] (a few loads; or [`may_trigger`] on flags it already
//! has), then calls [`Trigger::of`], and scans only for a trigger. Statistics are the
//! queue's (CAKE counts `ack_drops` per tin); the flow queue runs the filter in
//! `crate::queue::fq`.

use std::net::{Ipv4Addr, Ipv6Addr};

use weir_wire::ethernet::{self, ethertype};
use weir_wire::ip::protocol;
use weir_wire::tcp::{self, option_kind, TcpFlags, TcpOptions};
use weir_wire::{ipv4, ipv6};

/// How hard the filter works (CAKE's `no-ack-filter`, `ack-filter`,
/// `ack-filter-aggressive`). Default `Off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AckFilterMode {
    /// Drop nothing.
    #[default]
    Off,
    /// Conservative: drop an eligible ACK only when a second eligible one follows it.
    On,
    /// Also drop a single eligible ACK right before the trigger.
    Aggressive,
}

impl AckFilterMode {
    /// Every mode, in order.
    pub const ALL: [AckFilterMode; 3] = [Self::Off, Self::On, Self::Aggressive];

    /// The mode's name: `off`, `on`, `aggressive`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Aggressive => "aggressive",
        }
    }

    /// The mode of a name ([`Self::name`]), `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Whether a segment with these flags triggers the filter when it joins a queue (ACK set,
/// SYN clear): a pre-check for a queue that already has the flags from its own parse.
#[inline]
pub fn may_trigger(flags: TcpFlags) -> bool {
    flags & (TcpFlags::ACK | TcpFlags::SYN) == TcpFlags::ACK
}

/// Whether `frame` may hold a trigger, from a few reads at fixed offsets and no header
/// checks: the queue's pre-check before [`Trigger::of`], so that a frame which cannot
/// trigger (not TCP, SYN set, ACK clear) costs a few loads. True when the EtherType after
/// at most two VLAN tags is IPv4 with protocol TCP and flags that [`may_trigger`] (or
/// protocol 41, 6in4, left to `Trigger::of`), or IPv6 with TCP as the next header and
/// such flags. True for every frame `Trigger::of` accepts (property-tested); false for a
/// frame too short to read.
#[inline]
pub fn may_trigger_frame(frame: &[u8]) -> bool {
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
    };
    let flags_at = |l4: usize| {
        frame
            .get(l4 + 13)
            .is_some_and(|&f| may_trigger(TcpFlags(f)))
    };
    let (mut l3, mut et) = (ethernet::HEADER_LEN, be16(12));
    for _ in 0..ethernet::MAX_VLAN_TAGS {
        if !ethernet::is_vlan_tpid(et) {
            break;
        }
        et = be16(l3 + 2);
        l3 += 4;
    }
    match et {
        ethertype::IPV4 => match frame.get(l3 + 9) {
            Some(&protocol::TCP) => flags_at(l3 + 4 * usize::from(frame[l3] & 0x0f)),
            Some(&protocol::IPV6) => true,
            _ => false,
        },
        ethertype::IPV6 => {
            frame.get(l3 + 6) == Some(&protocol::TCP) && flags_at(l3 + ipv6::HEADER_LEN)
        }
        _ => false,
    }
}

/// The packet of `queued` that `new` makes redundant, if any (see the module). `new` is
/// the frame just queued at the flow's tail; `queued` are the flow queue's other packets,
/// head to tail, as `(index, frame)`: all of them, up to the one right before `new`
/// (mode `Aggressive` looks at which packet that is). Returns the index of the packet to
/// drop.
pub fn find_redundant<'a>(
    mode: AckFilterMode,
    new: &[u8],
    queued: impl IntoIterator<Item = (usize, &'a [u8])>,
) -> Option<usize> {
    if mode == AckFilterMode::Off {
        return None;
    }
    Trigger::of(new)?.find_redundant(mode, queued)
}

/// A segment that may make queued ACKs redundant, read once from its frame.
#[derive(Clone, Debug)]
pub struct Trigger<'a> {
    seg: Segment<'a>,
    tsval: u32,
    tsecr: u32,
}

impl<'a> Trigger<'a> {
    /// The trigger in `frame`: `None` unless it is a whole TCP segment with ACK set and
    /// SYN clear (the cheap check before a scan).
    pub fn of(frame: &'a [u8]) -> Option<Self> {
        let seg = Segment::read(frame)?;
        if !may_trigger(TcpFlags(seg.flags)) {
            return None;
        }
        let (tsval, tsecr) = seg.timestamps().unwrap_or((0, 0));
        Some(Trigger { seg, tsval, tsecr })
    }

    /// As [`find_redundant`], for this trigger.
    pub fn find_redundant<'q>(
        &self,
        mode: AckFilterMode,
        queued: impl IntoIterator<Item = (usize, &'q [u8])>,
    ) -> Option<usize> {
        if mode == AckFilterMode::Off {
            return None;
        }
        let t = &self.seg;
        // the first eligible ACK and its ECE/CWR bits; how many eligible ACKs since
        let mut elig: Option<(usize, u8)> = None;
        let mut found = 0u32;
        let mut last = None;
        for (i, frame) in queued {
            last = Some(i);
            let Some(c) = Segment::read(frame) else {
                continue;
            };
            if !c.same_connection(t) {
                continue;
            }
            if let Some((_, ecn)) = elig {
                if c.ecn_bits() != ecn {
                    elig = None;
                    found -= 1;
                }
            }
            if !self.may_drop(&c) || c.data_len != 0 || after(c.ack, t.ack) {
                continue;
            }
            let sack = sack_compare(&c, t);
            if sack == SackCmp::Check || (c.ack == t.ack && sack == SackCmp::Same) {
                continue;
            }
            let first = *elig.get_or_insert((i, c.ecn_bits()));
            found += 1;
            if found > 1 {
                return Some(first.0);
            }
        }
        match elig {
            Some((i, ecn))
                if mode == AckFilterMode::Aggressive && last == Some(i) && ecn == t.ecn_bits() =>
            {
                Some(i)
            }
            _ => None,
        }
    }

    /// CAKE's `cake_tcph_may_drop`: flags and options that allow dropping `c`.
    fn may_drop(&self, c: &Segment<'_>) -> bool {
        // ACK alone (ECE/CWR aside), reserved and AE bits clear
        if c.flags & !(TcpFlags::ECE | TcpFlags::CWR).bits() != TcpFlags::ACK.bits()
            || c.reserved != 0
        {
            return false;
        }
        for o in TcpOptions::new(c.options).raw() {
            let Ok((kind, body)) = o else { break };
            match kind {
                option_kind::EOL => break,
                option_kind::NOP | MD5SIG => {}
                option_kind::SACK if body.len() % 8 == 0 => {}
                option_kind::TIMESTAMPS if body.len() == 8 => {
                    let (tsval, tsecr) = timestamp_values(body);
                    if after(tsval, self.tsval) || after(tsecr, self.tsecr) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        true
    }
}

/// TCP MD5 signature option (RFC 2385): carries no state, so it does not keep an ACK.
const MD5SIG: u8 = 19;

/// The fields the filter reads from one TCP segment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment<'a> {
    addrs: Addrs,
    /// Source port in the high half, destination in the low.
    ports: u32,
    ack: u32,
    /// Header octet 13.
    flags: u8,
    /// The low four bits of header octet 12 (reserved bits and AE).
    reserved: u8,
    /// Bytes of data after the TCP header.
    data_len: usize,
    /// The option area.
    options: &'a [u8],
}

/// The connection's addresses, CAKE's way: the inner IPv6 header of 6in4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
    /// IPv6 in IPv4 (protocol 41): the tunnel's ends, then the inner addresses.
    V6in4(Ipv4Addr, Ipv4Addr, Ipv6Addr, Ipv6Addr),
}

impl<'a> Segment<'a> {
    /// The TCP segment of an Ethernet frame (VLAN tags skipped), as CAKE finds it: IPv4
    /// (not a fragment), IPv6 with TCP as the next header, or 6in4. `None` otherwise, or
    /// when any header does not check.
    fn read(frame: &'a [u8]) -> Option<Self> {
        let eth = ethernet::Frame::new_checked(frame).ok()?;
        let l3 = &frame[eth.header_len()..];
        let (addrs, l4) = match eth.ethertype() {
            ethertype::IPV4 => {
                let ip = ipv4::Packet::new_checked(l3).ok()?;
                if ip.is_fragment() {
                    return None;
                }
                let l4 = &l3[ip.header_len()..usize::from(ip.total_len())];
                match ip.protocol() {
                    protocol::TCP => (Addrs::V4(ip.src_addr(), ip.dst_addr()), l4),
                    protocol::IPV6 => {
                        let (s6, d6, l4) = v6_tcp(l4)?;
                        (Addrs::V6in4(ip.src_addr(), ip.dst_addr(), s6, d6), l4)
                    }
                    _ => return None,
                }
            }
            ethertype::IPV6 => {
                let (s, d, l4) = v6_tcp(l3)?;
                (Addrs::V6(s, d), l4)
            }
            _ => return None,
        };
        let seg = tcp::Packet::new_checked(l4).ok()?;
        let hl = seg.header_len();
        Some(Segment {
            addrs,
            ports: u32::from(seg.src_port()) << 16 | u32::from(seg.dst_port()),
            ack: seg.ack_number(),
            flags: seg.flags().bits(),
            reserved: l4[12] & 0x0f,
            data_len: l4.len() - hl,
            options: &l4[tcp::HEADER_LEN..hl],
        })
    }

    fn same_connection(&self, o: &Segment<'_>) -> bool {
        self.ports == o.ports && self.addrs == o.addrs
    }

    /// ECE and CWR.
    fn ecn_bits(&self) -> u8 {
        self.flags & (TcpFlags::ECE | TcpFlags::CWR).bits()
    }

    /// The first option of `kind`, as CAKE's `cake_get_tcpopt` finds it: its body.
    fn option(&self, kind: u8) -> Option<&'a [u8]> {
        TcpOptions::new(self.options)
            .raw()
            .map_while(Result::ok)
            .take_while(|o| o.0 != option_kind::EOL)
            .find(|o| o.0 == kind)
            .map(|o| o.1)
    }

    /// (TSval, TSecr) of the first timestamp option, if it has the right length.
    fn timestamps(&self) -> Option<(u32, u32)> {
        self.option(option_kind::TIMESTAMPS)
            .filter(|b| b.len() == 8)
            .map(timestamp_values)
    }

    /// The whole blocks of the first SACK option (empty without one).
    fn sack_blocks(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.option(option_kind::SACK)
            .unwrap_or_default()
            .chunks_exact(8)
            .map(|b| (be32(&b[..4]), be32(&b[4..])))
    }
}

/// The IPv6 packet in `l3`, when TCP follows the fixed header: addresses and segment.
fn v6_tcp(l3: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr, &[u8])> {
    let ip = ipv6::Packet::new_checked(l3).ok()?;
    (ip.next_header() == protocol::TCP).then(|| {
        let l4 = &l3[ipv6::HEADER_LEN..ip.total_len()];
        (ip.src_addr(), ip.dst_addr(), l4)
    })
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn timestamp_values(body: &[u8]) -> (u32, u32) {
    (be32(&body[..4]), be32(&body[4..8]))
}

/// `a` is after `b` in sequence space (RFC 1982; Linux `after()`).
#[inline]
fn after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

/// `a` is before `b` in sequence space (Linux `before()`).
#[inline]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What comparing a candidate's SACK blocks with the trigger's found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SackCmp {
    /// The candidate SACKs something the trigger does not, or has a D-SACK: keep it.
    Check,
    /// Same information (no blocks on either side, or the same bytes).
    Same,
    /// The trigger's blocks cover the candidate's and SACK more bytes.
    Trigger,
}

/// CAKE's `cake_tcph_sack_compare(check, trigger)`: bytes are summed block by block in
/// 32-bit arithmetic, as there.
fn sack_compare(c: &Segment<'_>, t: &Segment<'_>) -> SackCmp {
    let (mut ca, mut ta) = (c.sack_blocks().peekable(), t.sack_blocks().peekable());
    match (ca.peek().is_some(), ta.peek().is_some()) {
        (true, false) => return SackCmp::Check,
        (false, true) => return SackCmp::Trigger,
        (false, false) => return SackCmp::Same,
        (true, true) => {}
    }
    let (mut bytes_c, mut bytes_t) = (0u32, 0u32);
    for (i, (start, end)) in ca.enumerate() {
        if before(start, c.ack) {
            return SackCmp::Check;
        }
        bytes_c = bytes_c.wrapping_add(end.wrapping_sub(start));
        let mut found = false;
        for (ts, te) in t.sack_blocks() {
            if i == 0 {
                bytes_t = bytes_t.wrapping_add(te.wrapping_sub(ts));
            }
            if !after(ts, start) && !before(te, end) {
                found = true;
                if i > 0 {
                    break;
                }
            }
        }
        if !found {
            return SackCmp::Check;
        }
    }
    if bytes_t > bytes_c {
        SackCmp::Trigger
    } else {
        SackCmp::Same
    }
}

#[cfg(test)]
pub(crate) mod tests;
