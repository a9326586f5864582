//! The little of the `bpf(2)` system call weir needs, without clang or libbpf: an array
//! map of one element that user space maps into memory (`BPF_F_MMAPABLE`), longest-prefix
//! -match tries ([`LpmTrie`], `BPF_MAP_TYPE_LPM_TRIE`) updated from user space, and a
//! program loaded from instructions assembled here ([`Insn`]), with the verifier's log
//! in the error when it refuses one.
//!
//! Used by [`crate::failopen`] and [`crate::fanout`]; the instruction set is the kernel's
//! (Documentation/bpf/standardization/instruction-set.rst).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_LPM_TRIE: u32 = 11;
const BPF_F_NO_PREALLOC: u32 = 1;
const BPF_F_MMAPABLE: u32 = 1 << 10;
/// `BPF_PROG_TYPE_SOCKET_FILTER`: a socket filter, also the type of a
/// `PACKET_FANOUT_EBPF` program.
pub const PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// `BPF_PROG_TYPE_SCHED_CLS`: a `tc` classifier (cls_bpf).
pub const PROG_TYPE_SCHED_CLS: u32 = 3;
/// Helper `bpf_map_lookup_elem(map, key)`: a pointer to the value, or NULL.
pub const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
/// Helper `bpf_skb_load_bytes(skb, offset, to, len)`: copy `len` bytes at `offset` from
/// `skb->data` (paged data too) to the stack; 0 or a negative error.
pub const HELPER_SKB_LOAD_BYTES: i32 = 26;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("bpf({cmd}): {err}{}", hint(.err))]
    Syscall {
        cmd: &'static str,
        err: std::io::Error,
    },
    /// A kernel feature weir needs is missing (too old a kernel, or one built without it).
    #[error("{what}: {err}; this kernel lacks {missing}")]
    Unsupported {
        what: &'static str,
        missing: &'static str,
        err: std::io::Error,
    },
    /// A socket option around a program (attaching it).
    #[error("{what}: {err}")]
    Socket { what: String, err: std::io::Error },
    /// An argument weir's caller got wrong (a value the program could not use).
    #[error("{0}")]
    Invalid(String),
    #[error("the kernel's verifier refused weir's {name} program: {err}\n{log}")]
    Verifier {
        name: String,
        err: std::io::Error,
        log: String,
    },
}

fn hint(err: &std::io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::EPERM) => " (loading a program needs CAP_BPF and CAP_NET_ADMIN, or root)",
        Some(libc::ENOSYS) => " (this kernel has no bpf system call)",
        _ => "",
    }
}

/// One instruction (`struct bpf_insn`): opcode, destination and source registers (4
/// bits each), a signed offset and a signed immediate.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// Opcode parts.
pub mod op {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const STX: u8 = 0x03;
    pub const ALU64: u8 = 0x07;
    pub const JMP: u8 = 0x05;
    pub const W: u8 = 0x00;
    pub const DW: u8 = 0x18;
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const ATOMIC: u8 = 0xc0;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const MOV: u8 = 0xb0;
    pub const ST: u8 = 0x02;
    pub const ADD: u8 = 0x00;
    pub const SUB: u8 = 0x10;
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JNE: u8 = 0x50;
    pub const JSLE: u8 = 0xd0;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    /// `src` of a 64-bit immediate load: the map itself (`imm` the map fd).
    pub const PSEUDO_MAP_FD: u8 = 1;
    /// `src` of a 64-bit immediate load: the address of a map's value (`imm` the map fd,
    /// the next instruction's `imm` the offset).
    pub const PSEUDO_MAP_VALUE: u8 = 2;
}

impl Insn {
    fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }
    /// `dst = imm`.
    pub fn mov_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
    }
    /// `dst = src`.
    pub fn mov_reg(dst: u8, src: u8) -> Insn {
        Insn::new(op::ALU64 | op::MOV | op::X, dst, src, 0, 0)
    }
    /// `dst += imm`.
    pub fn add_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(op::ALU64 | op::ADD | op::K, dst, 0, 0, imm)
    }
    /// `dst -= src`.
    pub fn sub_reg(dst: u8, src: u8) -> Insn {
        Insn::new(op::ALU64 | op::SUB | op::X, dst, src, 0, 0)
    }
    /// `dst = *(u64 *)(src + off)`.
    pub fn load64(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::LDX | op::MEM | op::DW, dst, src, off, 0)
    }
    /// `dst = *(u32 *)(src + off)`.
    pub fn load32(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::LDX | op::MEM | op::W, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = imm`.
    pub fn store32_imm(dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(op::ST | op::MEM | op::W, dst, 0, off, imm)
    }
    /// `lock *(u64 *)(dst + off) += src`.
    pub fn atomic_add64(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(op::STX | op::ATOMIC | op::DW, dst, src, off, 0)
    }
    /// `if (s64)dst <= (s64)src goto +off`.
    pub fn jsle_reg(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::JMP | op::JSLE | op::X, dst, src, off, 0)
    }
    /// `if dst == imm goto +off`.
    pub fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(op::JMP | op::JEQ | op::K, dst, 0, off, imm)
    }
    /// `if dst != imm goto +off`.
    pub fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(op::JMP | op::JNE | op::K, dst, 0, off, imm)
    }
    /// `goto +off`.
    pub fn ja(off: i16) -> Insn {
        Insn::new(op::JMP | op::JA, 0, 0, off, 0)
    }
    /// Call helper `id` (arguments in r1–r5, result in r0; r1–r5 clobbered).
    pub fn call(id: i32) -> Insn {
        Insn::new(op::JMP | op::CALL, 0, 0, 0, id)
    }
    pub fn exit() -> Insn {
        Insn::new(op::JMP | op::EXIT, 0, 0, 0, 0)
    }
    /// `dst = &value_of(map)[off]` (two instructions).
    pub fn map_value(dst: u8, map_fd: i32, off: i32) -> [Insn; 2] {
        [
            Insn::new(
                op::LD | op::DW | op::IMM,
                dst,
                op::PSEUDO_MAP_VALUE,
                0,
                map_fd,
            ),
            Insn::new(0, 0, 0, 0, off),
        ]
    }
    /// `dst = map` (two instructions): the map argument of a helper such as
    /// [`HELPER_MAP_LOOKUP_ELEM`].
    pub fn map_fd(dst: u8, map_fd: i32) -> [Insn; 2] {
        [
            Insn::new(op::LD | op::DW | op::IMM, dst, op::PSEUDO_MAP_FD, 0, map_fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }
}

fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, zero-padded attribute block of its own size; the pointers
    // inside it (keys, values, instructions, logs) point at live buffers of the sizes the
    // command implies.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<OwnedFd> {
    let fd = sys_bpf(cmd, attr)?;
    // SAFETY: the kernel returned a new file descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn name16(name: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, s) in n.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    n
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    /// Named so that it is zeroed: as implicit padding before `pad` it held stack garbage,
    /// which the kernel read as an offload device (EINVAL, or worse).
    map_ifindex: u32,
    pad: [u64; 8],
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    pad: [u64; 12],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    pad0: u32,
    key: u64,
    value: u64,
    flags: u64,
    pad: [u64; 4],
}

/// A longest-prefix-match trie (`BPF_MAP_TYPE_LPM_TRIE`, kernel/bpf/lpm_trie.c) of
/// `ADDR`-byte addresses (4: IPv4, 16: IPv6) to `u32` values. Its key is
/// `struct bpf_lpm_trie_key`: a host-order `u32` prefix length, then the address in
/// network order. Entries are allocated as they are inserted (`BPF_F_NO_PREALLOC`, which
/// the trie requires), up to `max_entries`.
pub struct LpmTrie<const ADDR: usize> {
    fd: OwnedFd,
}

impl<const ADDR: usize> LpmTrie<ADDR> {
    pub fn create(name: &str, max_entries: u32) -> Result<LpmTrie<ADDR>, BpfError> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_LPM_TRIE,
            key_size: (4 + ADDR) as u32,
            value_size: 4,
            max_entries,
            map_flags: BPF_F_NO_PREALLOC,
            map_name: name16(name),
            ..Default::default()
        };
        let fd = bpf(BPF_MAP_CREATE, &mut attr).map_err(|err| match err.raw_os_error() {
            // an unknown map type (before Linux 4.11, or BPF built without it)
            Some(libc::EINVAL) => BpfError::Unsupported {
                what: "bpf(BPF_MAP_CREATE)",
                missing: "BPF_MAP_TYPE_LPM_TRIE (Linux 4.11)",
                err,
            },
            _ => BpfError::Syscall {
                cmd: "BPF_MAP_CREATE (an LPM trie)",
                err,
            },
        })?;
        Ok(LpmTrie { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The key in a buffer large enough for IPv6 (the kernel reads `4 + ADDR` bytes).
    fn key(len: u8, addr: [u8; ADDR]) -> [u8; 20] {
        let mut k = [0u8; 20];
        k[..4].copy_from_slice(&u32::from(len).to_ne_bytes());
        k[4..4 + ADDR].copy_from_slice(&addr);
        k
    }

    /// Map the prefix `addr/len` (network-order address) to `value`, replacing any earlier
    /// value.
    pub fn update(&self, addr: [u8; ADDR], len: u8, value: u32) -> Result<(), BpfError> {
        let key = Self::key(len, addr);
        let mut attr = MapElemAttr {
            map_fd: self.fd() as u32,
            key: key.as_ptr() as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map(|_| ())
            .map_err(|err| BpfError::Syscall {
                cmd: "BPF_MAP_UPDATE_ELEM",
                err,
            })
    }

    /// Remove the prefix `addr/len`; whether it was there.
    pub fn delete(&self, addr: [u8; ADDR], len: u8) -> Result<bool, BpfError> {
        let key = Self::key(len, addr);
        let mut attr = MapElemAttr {
            map_fd: self.fd() as u32,
            key: key.as_ptr() as u64,
            ..Default::default()
        };
        match sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
            Ok(_) => Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(err) => Err(BpfError::Syscall {
                cmd: "BPF_MAP_DELETE_ELEM",
                err,
            }),
        }
    }
}

/// An array map of one element of `WORDS` 64-bit words, mapped into this process: the
/// words are shared with the programs that use the map, read and written atomically.
pub struct SharedWords {
    fd: OwnedFd,
    ptr: *mut AtomicU64,
    len: usize,
    words: usize,
}

// SAFETY: the mapping is only touched through atomics.
unsafe impl Send for SharedWords {}
// SAFETY: as for Send: shared references only reach the words as atomics.
unsafe impl Sync for SharedWords {}

impl SharedWords {
    pub fn create(name: &str, words: usize) -> Result<SharedWords, BpfError> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: (words * 8) as u32,
            max_entries: 1,
            map_flags: BPF_F_MMAPABLE,
            map_name: name16(name),
            ..Default::default()
        };
        let fd = bpf(BPF_MAP_CREATE, &mut attr).map_err(|err| match err.raw_os_error() {
            Some(libc::EINVAL) => BpfError::Unsupported {
                what: "bpf(BPF_MAP_CREATE)",
                missing: "BPF_F_MMAPABLE arrays (Linux 5.5)",
                err,
            },
            _ => BpfError::Syscall {
                cmd: "BPF_MAP_CREATE",
                err,
            },
        })?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = (words * 8).div_ceil(page) * page;
        // SAFETY: a shared mapping of the map's value area, as long as the map allows.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(BpfError::Syscall {
                cmd: "mmap of a BPF_F_MMAPABLE array",
                err: std::io::Error::last_os_error(),
            });
        }
        Ok(SharedWords {
            fd,
            ptr: ptr as *mut AtomicU64,
            len,
            words,
        })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Word `i` (panics past the end: the layout is the caller's constant).
    pub fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words);
        // SAFETY: in bounds of a live, 8-byte-aligned shared mapping.
        unsafe { &*self.ptr.add(i) }
    }
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Load a program of `prog_type`; on refusal, the verifier's log is in the error.
pub fn load_program(name: &str, prog_type: u32, insns: &[Insn]) -> Result<OwnedFd, BpfError> {
    // any licence: the helpers weir calls are not GPL-only
    let license = c"MIT OR Apache-2.0";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name16(name),
        ..Default::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(err) if matches!(err.raw_os_error(), Some(libc::EACCES | libc::EINVAL)) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(BpfError::Verifier {
                name: name.into(),
                err,
                log: String::from_utf8_lossy(&log[..end]).trim_end().to_string(),
            })
        }
        Err(err) => Err(BpfError::Syscall {
            cmd: "BPF_PROG_LOAD",
            err,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings checked against the kernel's `BPF_*` macros by hand:
    /// `BPF_MOV64_REG(BPF_REG_6, BPF_REG_1)` = bf 16 00 00 00000000,
    /// `BPF_LDX_MEM(BPF_DW, 1, 7, 8)` = 79 71 08 00, `BPF_ATOMIC_OP(BPF_DW, BPF_ADD, 7, 1,
    /// 16)` = db 17 10 00 imm 0, `BPF_JMP_REG(BPF_JSLE, 0, 2, 8)` = dd 20 08 00,
    /// `BPF_LD_MAP_VALUE(7, fd, 0)` = 18 27 ..., `BPF_EMIT_CALL(5)` = 85 00 imm 5.
    #[test]
    fn encodings() {
        let b = |i: Insn| (i.code, i.regs, i.off, i.imm);
        assert_eq!(b(Insn::mov_reg(6, 1)), (0xbf, 0x16, 0, 0));
        assert_eq!(b(Insn::mov_imm(2, 0)), (0xb7, 0x02, 0, 0));
        assert_eq!(b(Insn::load64(1, 7, 8)), (0x79, 0x71, 8, 0));
        assert_eq!(b(Insn::load32(1, 6, 0)), (0x61, 0x61, 0, 0));
        assert_eq!(b(Insn::atomic_add64(7, 16, 1)), (0xdb, 0x17, 16, 0));
        assert_eq!(b(Insn::jsle_reg(0, 2, 8)), (0xdd, 0x20, 8, 0));
        assert_eq!(b(Insn::sub_reg(0, 1)), (0x1f, 0x10, 0, 0));
        assert_eq!(b(Insn::call(5)), (0x85, 0, 0, 5));
        assert_eq!(b(Insn::exit()), (0x95, 0, 0, 0));
        let [a, z] = Insn::map_value(7, 9, 24);
        assert_eq!((b(a), b(z)), ((0x18, 0x27, 0, 9), (0, 0, 0, 24)));
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }

    /// The instructions the fanout program adds, against the kernel's macros:
    /// `BPF_ALU64_IMM(BPF_ADD, 3, -4)` = 07 03 00 00 imm -4, `BPF_ST_MEM(BPF_W, 10, -8,
    /// 32)` = 62 0a f8 ff imm 32, `BPF_JMP_IMM(BPF_JEQ, 2, 8, 3)` = 15 02 03 00 imm 8,
    /// `BPF_JMP_IMM(BPF_JNE, 0, 0, 5)` = 55 00 05 00, `BPF_JMP_A(2)` = 05 00 02 00,
    /// `BPF_LD_MAP_FD(1, fd)` = 18 11 00 00 imm fd, then a zero instruction.
    #[test]
    fn fanout_encodings() {
        let b = |i: Insn| (i.code, i.regs, i.off, i.imm);
        assert_eq!(b(Insn::add_imm(3, -4)), (0x07, 0x03, 0, -4));
        assert_eq!(b(Insn::store32_imm(10, -8, 32)), (0x62, 0x0a, -8, 32));
        assert_eq!(b(Insn::jeq_imm(2, 8, 3)), (0x15, 0x02, 3, 8));
        assert_eq!(b(Insn::jne_imm(0, 0, 5)), (0x55, 0x00, 5, 0));
        assert_eq!(b(Insn::ja(2)), (0x05, 0, 2, 0));
        let [a, z] = Insn::map_fd(1, 11);
        assert_eq!((b(a), b(z)), ((0x18, 0x11, 0, 11), (0, 0, 0, 0)));
    }

    /// `struct bpf_lpm_trie_key`: host-order prefix length, then the address as given.
    #[test]
    fn lpm_keys() {
        let k = LpmTrie::<4>::key(24, [10, 1, 2, 0]);
        assert_eq!(
            &k[..8],
            &[24u32.to_ne_bytes().as_slice(), &[10, 1, 2, 0]].concat()[..]
        );
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[15] = 7;
        let k = LpmTrie::<16>::key(128, a);
        assert_eq!(k[..4], 128u32.to_ne_bytes());
        assert_eq!(k[4..], a);
    }

    /// The attribute blocks have no implicit padding (the kernel reads every byte: an
    /// unnamed hole is uninitialised stack): their sizes are the sums of their fields.
    #[test]
    fn attributes_have_no_holes() {
        use std::mem::size_of;
        assert_eq!(size_of::<MapCreateAttr>(), 7 * 4 + 16 + 4 + 8 * 8);
        assert_eq!(size_of::<MapElemAttr>(), 4 + 4 + 3 * 8 + 4 * 8);
        assert_eq!(
            size_of::<ProgLoadAttr>(),
            2 * 4 + 2 * 8 + 2 * 4 + 8 + 2 * 4 + 16 + 12 * 8
        );
    }

    #[test]
    fn names_are_cut_to_15_bytes_and_terminated() {
        let n = name16("weir_failopen_bypass");
        assert_eq!(&n[..15], b"weir_failopen_b");
        assert_eq!(n[15], 0);
    }
}
