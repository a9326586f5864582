//! Steering frames to workers: an eBPF `PACKET_FANOUT` program that hands each received
//! frame to the worker owning the subscriber circuit of its address, so that with
//! `weir run --workers N` both directions of a circuit — and its connection table — meet
//! on one worker. The building block of issue 27's "every core"; `weir run` does not use
//! it yet.
//!
//! Each worker opens its own packet socket (its own RX ring) on an interface and joins
//! one fanout group ([`Steering::join`]); for every frame the interface receives, the
//! kernel runs the group's program and delivers the frame to member `ret % members`
//! (net/packet/af_packet.c: `packet_rcv_fanout` → `fanout_demux_bpf`). The program looks
//! the frame's subscriber address up in a longest-prefix-match trie mapping every
//! circuit's prefixes to its worker: on the LAN-side interface the source address
//! ([`Side::Src`], outbound), on the WAN side the destination ([`Side::Dst`], inbound).
//!
//! ```text
//!   proto = skb->protocol                        (VLAN tag already in metadata)
//!   0x0800: key = {32,  load_bytes(net + 12 | 16, 4)};  v = lookup(v4 trie, key)
//!   0x86DD: key = {128, load_bytes(net +  8 | 24, 16)}; v = lookup(v6 trie, key)
//!   v ? return *v : (unsteered += 1; return 0)
//! ```
//!
//! Why eBPF and not classic BPF (`PACKET_FANOUT_CBPF`, which issue 27 first named): a
//! circuit owns several prefixes (a /24 and a /56, a handful of /32s), so no function of
//! the address bits alone — a hash, a modulo — keeps all of a circuit's prefixes on one
//! worker; the assignment is a table. Only eBPF can read a map, and the kernel's LPM
//! trie gives the exact longest match per circuit, updated in place from user space on
//! a reload without reloading the program.
//!
//! Maps: two `BPF_MAP_TYPE_LPM_TRIE` (kernel/bpf/lpm_trie.c, `BPF_F_NO_PREALLOC`, up to
//! [`MAX_PREFIXES`] entries each, allocated as inserted): IPv4 keys `{u32 prefixlen; u8
//! addr[4]}`, IPv6 `{u32 prefixlen; u8 addr[16]}`, the address in network order, the
//! value the worker's index (`u32`). A one-word array counts the frames the program could
//! not steer ([`Steering::unsteered`]): a frame neither IPv4 nor IPv6 (ARP, LLDP, a
//! second VLAN tag, PPPoE), one too short to hold the address, or an address in no
//! prefix. All of these go to worker 0, which forwards them like any other frame (its
//! default class) — nothing is dropped for being unparsable.
//!
//! Kernel behaviour this relies on (net/core/dev.c `__netif_receive_skb_core`,
//! net/packet/af_packet.c, net/core/filter.c):
//! - On receive the taps run after `eth_type_trans` pulled the MAC header: `skb->data` is
//!   at the network header, so the program's offsets are the IP header's (`packet_rcv`
//!   pushes the MAC header back only after the fanout choice). `bpf_skb_load_bytes` reads
//!   relative to `skb->data`, paged data included (a frame sent from a TX ring holds its
//!   IP header in a page fragment, not the linear part).
//! - A VLAN tag is moved into metadata before the taps (`skb_vlan_untag`, or the device's
//!   VLAN offload): `__sk_buff.protocol` is the inner EtherType and the network header
//!   follows the tag, so a single-tagged frame is steered by its IP address. A second
//!   (QinQ) tag stays in the data: protocol 0x8100/0x88A8, unsteered.
//! - Outgoing frames would reach the group's hook with `skb->data` at the MAC header; the
//!   group is joined with `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` (the socket's own
//!   `PACKET_IGNORE_OUTGOING` no longer applies once it joins: its hook is replaced by the
//!   group's). A kernel older than that flag ignores it: weir's own transmissions on the
//!   interface would then be received again (so use one worker there).
//! - Every member of a group must ask for the same type and flags, on the same interface
//!   and protocol; the group id is per network namespace, so two weirs on one host need
//!   different ids. The return value is taken modulo the members: a worker index at or
//!   past N wraps, which [`Steering::insert`] prevents.
//!
//! Needs `CAP_BPF` (maps) and `CAP_NET_RAW` (the sockets); `BPF_MAP_TYPE_LPM_TRIE` (Linux
//! 4.11), `PACKET_FANOUT_EBPF` (4.5) and a mmap-able array (5.5).

use crate::bpf::{self, BpfError, Insn, LpmTrie, SharedWords};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use weir_core::classify::IpNet;

/// Entries each trie may hold (memory is allocated per entry as it is inserted).
pub const MAX_PREFIXES: u32 = 1 << 20;

const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_FANOUT_EBPF: u32 = 7;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;

/// `struct __sk_buff` offset of `protocol` (the EtherType as stored: network order).
const SKB_PROTOCOL: i16 = 16;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;

/// Which address of a frame names its subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The source: frames received on the LAN-side interface (outbound).
    Src,
    /// The destination: frames received on the WAN-side interface (inbound).
    Dst,
}

impl Side {
    /// Offset of the address in the IPv4 and IPv6 headers.
    fn offsets(self) -> (i32, i32) {
        match self {
            Side::Src => (12, 8),
            Side::Dst => (16, 24),
        }
    }
}

/// What [`Steering::set_all`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
}

/// Jump targets of the program.
#[derive(Clone, Copy)]
enum Label {
    V4,
    V6,
    Miss,
}

/// A little assembler: instructions and forward jumps patched once the labels are placed.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    fixups: Vec<(usize, Label)>,
    labels: [usize; 3],
}

impl Asm {
    fn emit(&mut self, i: impl IntoIterator<Item = Insn>) {
        self.insns.extend(i);
    }
    fn jump(&mut self, i: Insn, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.insns.push(i);
    }
    fn place(&mut self, l: Label) {
        self.labels[l as usize] = self.insns.len();
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, l) in self.fixups {
            self.insns[at].off = (self.labels[l as usize] as isize - at as isize - 1) as i16;
        }
        self.insns
    }

    /// Look the address of `len` bytes at network offset `off` up in `map`, with the key
    /// `{prefixlen = len * 8, addr}` at `fp - 4 - len`; return the worker or go to `Miss`.
    fn lookup(&mut self, map: i32, off: i32, len: i32) {
        let key = -(4 + len) as i16;
        self.emit([
            Insn::store32_imm(10, key, len * 8),
            Insn::mov_reg(1, 6),
            Insn::mov_imm(2, off),
            Insn::mov_reg(3, 10),
            Insn::add_imm(3, i32::from(key) + 4),
            Insn::mov_imm(4, len),
            Insn::call(bpf::HELPER_SKB_LOAD_BYTES),
        ]);
        self.jump(Insn::jne_imm(0, 0, 0), Label::Miss);
        self.emit(Insn::map_fd(1, map));
        self.emit([
            Insn::mov_reg(2, 10),
            Insn::add_imm(2, i32::from(key)),
            Insn::call(bpf::HELPER_MAP_LOOKUP_ELEM),
        ]);
        self.jump(Insn::jeq_imm(0, 0, 0), Label::Miss);
        self.emit([Insn::load32(0, 0, 0), Insn::exit()]);
    }
}

/// The program (see the module comment) over the tries `v4` and `v6` and the one-word
/// counter array `missed`.
pub fn program(side: Side, v4: i32, v6: i32, missed: i32) -> Vec<Insn> {
    let (off4, off6) = side.offsets();
    let mut a = Asm::default();
    a.emit([Insn::mov_reg(6, 1), Insn::load32(2, 1, SKB_PROTOCOL)]);
    a.jump(Insn::jeq_imm(2, i32::from(ETH_P_IP.to_be()), 0), Label::V4);
    a.jump(
        Insn::jeq_imm(2, i32::from(ETH_P_IPV6.to_be()), 0),
        Label::V6,
    );
    a.jump(Insn::ja(0), Label::Miss);
    a.place(Label::V4);
    a.lookup(v4, off4, 4);
    a.place(Label::V6);
    a.lookup(v6, off6, 16);
    a.place(Label::Miss);
    a.emit(Insn::map_value(1, missed, 0));
    a.emit([
        Insn::mov_imm(2, 1),
        Insn::atomic_add64(1, 0, 2),
        Insn::mov_imm(0, 0),
        Insn::exit(),
    ]);
    a.finish()
}

/// The steering of one interface's fanout group: the tries, the program, and a copy of
/// what the tries hold.
pub struct Steering {
    workers: u32,
    v4: LpmTrie<4>,
    v6: LpmTrie<16>,
    missed: SharedWords,
    prog: OwnedFd,
    table: Mutex<HashMap<IpNet, u32>>,
}

impl Steering {
    /// Empty tries and the program for `workers` workers reading the `side` address.
    pub fn new(workers: u32, side: Side) -> Result<Steering, BpfError> {
        if workers == 0 {
            return Err(BpfError::Invalid(
                "fanout steering needs at least one worker".into(),
            ));
        }
        let v4 = LpmTrie::<4>::create("weir_fanout_v4", MAX_PREFIXES)?;
        let v6 = LpmTrie::<16>::create("weir_fanout_v6", MAX_PREFIXES)?;
        let missed = SharedWords::create("weir_fanout_miss", 1)?;
        let prog = bpf::load_program(
            "weir_fanout",
            bpf::PROG_TYPE_SOCKET_FILTER,
            &program(side, v4.fd(), v6.fd(), missed.fd()),
        )?;
        Ok(Steering {
            workers,
            v4,
            v6,
            missed,
            prog,
            table: Mutex::new(HashMap::new()),
        })
    }

    pub fn workers(&self) -> u32 {
        self.workers
    }

    fn put(&self, prefix: IpNet, worker: u32) -> Result<(), BpfError> {
        if worker >= self.workers {
            return Err(BpfError::Invalid(format!(
                "fanout: {prefix} assigned to worker {worker}, but there are {} workers",
                self.workers
            )));
        }
        match prefix.addr() {
            IpAddr::V4(a) => self.v4.update(a.octets(), prefix.prefix_len(), worker),
            IpAddr::V6(a) => self.v6.update(a.octets(), prefix.prefix_len(), worker),
        }
    }

    fn take(&self, prefix: IpNet) -> Result<bool, BpfError> {
        match prefix.addr() {
            IpAddr::V4(a) => self.v4.delete(a.octets(), prefix.prefix_len()),
            IpAddr::V6(a) => self.v6.delete(a.octets(), prefix.prefix_len()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<IpNet, u32>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Steer frames whose address is in `prefix` (the longest matching prefix wins) to
    /// `worker`.
    pub fn insert(&self, prefix: IpNet, worker: u32) -> Result<(), BpfError> {
        let mut t = self.table();
        self.put(prefix, worker)?;
        t.insert(prefix, worker);
        Ok(())
    }

    /// Stop steering `prefix`; whether it was there.
    pub fn remove(&self, prefix: IpNet) -> Result<bool, BpfError> {
        let mut t = self.table();
        let had = self.take(prefix)?;
        t.remove(&prefix);
        Ok(had)
    }

    /// Replace the contents with `entries` (a reload): new and changed prefixes are
    /// written first, then stale ones deleted, so a prefix that stays never misses. A
    /// prefix given twice takes its last worker.
    pub fn set_all(&self, entries: &[(IpNet, u32)]) -> Result<Changes, BpfError> {
        let mut t = self.table();
        let want: HashMap<IpNet, u32> = entries.iter().copied().collect();
        if let Some((p, w)) = want.iter().find(|(_, &w)| w >= self.workers) {
            return Err(BpfError::Invalid(format!(
                "fanout: {p} assigned to worker {w}, but there are {} workers",
                self.workers
            )));
        }
        let mut c = Changes::default();
        for (&p, &w) in &want {
            match t.get(&p) {
                Some(&old) if old == w => continue,
                Some(_) => c.changed += 1,
                None => c.added += 1,
            }
            self.put(p, w)?;
            t.insert(p, w);
        }
        let stale: Vec<IpNet> = t
            .keys()
            .filter(|p| !want.contains_key(p))
            .copied()
            .collect();
        for p in stale {
            self.take(p)?;
            t.remove(&p);
            c.removed += 1;
        }
        Ok(c)
    }

    /// The prefixes steered now, and their workers.
    pub fn entries(&self) -> Vec<(IpNet, u32)> {
        self.table().iter().map(|(&p, &w)| (p, w)).collect()
    }

    /// Frames the program could not steer (not IP, too short, or no prefix), all sent to
    /// worker 0.
    pub fn unsteered(&self) -> u64 {
        self.missed.word(0).load(Ordering::Relaxed)
    }

    /// The program's descriptor.
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }

    /// Make the packet socket `fd` (bound to the interface, e.g. an
    /// [`crate::afpacket::RxRing`]) a member of fanout group `group_id` steered by this
    /// program. Members are numbered in the order they join: join worker 0's socket
    /// first. A member leaving (its socket closed) is replaced in its position by the
    /// last member (af_packet.c `__fanout_unlink`), which renumbers the group: workers
    /// must keep their sockets open for as long as the group steers.
    pub fn join(&self, fd: RawFd, group_id: u16) -> Result<(), BpfError> {
        let arg: u32 =
            u32::from(group_id) | ((PACKET_FANOUT_EBPF | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16);
        setsockopt_u32(fd, PACKET_FANOUT, arg).map_err(|err| match err.raw_os_error() {
            Some(libc::EINVAL) => BpfError::Socket {
                what: format!(
                    "setsockopt(PACKET_FANOUT, group {group_id}, PACKET_FANOUT_EBPF): the \
                     socket must be bound to an interface and protocol, and a group of that \
                     id in this namespace must be of the same type, flags and interface; \
                     kernels before Linux 4.5 lack PACKET_FANOUT_EBPF"
                ),
                err,
            },
            _ => BpfError::Socket {
                what: format!("setsockopt(PACKET_FANOUT, group {group_id})"),
                err,
            },
        })?;
        let prog = self.prog_fd() as u32;
        setsockopt_u32(fd, PACKET_FANOUT_DATA, prog).map_err(|err| match err.raw_os_error() {
            Some(libc::ENOPROTOOPT) => BpfError::Unsupported {
                what: "setsockopt(PACKET_FANOUT_DATA)",
                missing: "PACKET_FANOUT_DATA (Linux 4.5)",
                err,
            },
            _ => BpfError::Socket {
                what: format!("setsockopt(PACKET_FANOUT_DATA, group {group_id})"),
                err,
            },
        })
    }
}

fn setsockopt_u32(fd: RawFd, opt: libc::c_int, v: u32) -> std::io::Result<()> {
    crate::afpacket::setsockopt(fd, libc::SOL_PACKET, opt, &v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each jump lands, for a program assembled with map fds 41 (v4), 42 (v6) and
    /// 43 (counter).
    fn target(p: &[Insn], at: usize) -> usize {
        (at as isize + 1 + p[at].off as isize) as usize
    }

    #[test]
    fn program_shape() {
        for (side, off4, off6) in [(Side::Src, 12, 8), (Side::Dst, 16, 24)] {
            let p = program(side, 41, 42, 43);
            assert_eq!(p.len(), 5 + 2 * 16 + 6);
            // protocol from __sk_buff offset 16, compared in network order
            assert_eq!((p[1].code, p[1].off), (0x61, 16));
            assert_eq!((p[2].code, p[2].imm), (0x15, i32::from(0x0800u16.to_be())));
            assert_eq!((p[3].code, p[3].imm), (0x15, i32::from(0x86DDu16.to_be())));
            let (v4, v6, miss) = (target(&p, 2), target(&p, 3), target(&p, 4));
            assert_eq!((v4, v6, miss), (5, 21, 37));
            // each family: prefix length stored, the address loaded at its offset into
            // the key's address field, then the lookup in its own trie
            for (start, len, off, fd) in [(v4, 4, off4, 41), (v6, 16, off6, 42)] {
                let key = -(4 + len) as i16;
                assert_eq!(p[start], Insn::store32_imm(10, key, len * 8));
                assert_eq!(p[start + 2].imm, off);
                assert_eq!(p[start + 4].imm, i32::from(key) + 4);
                assert_eq!(p[start + 5].imm, len);
                assert_eq!(p[start + 6], Insn::call(26));
                assert_eq!(target(&p, start + 7), miss);
                assert_eq!(p[start + 8], Insn::map_fd(1, fd)[0]);
                assert_eq!(p[start + 11].imm, i32::from(key));
                assert_eq!(p[start + 12], Insn::call(1));
                assert_eq!(target(&p, start + 13), miss);
                assert_eq!(p[start + 14], Insn::load32(0, 0, 0));
                assert_eq!(p[start + 15], Insn::exit());
            }
            // miss: count, return 0
            assert_eq!(p[miss], Insn::map_value(1, 43, 0)[0]);
            assert_eq!(p[miss + 3], Insn::atomic_add64(1, 0, 2));
            assert_eq!(&p[miss + 4..], &[Insn::mov_imm(0, 0), Insn::exit()]);
        }
    }
}
