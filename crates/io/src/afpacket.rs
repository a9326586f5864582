//! AF_PACKET memory-mapped rings (PACKET_MMAP, TPACKET_V2) bound to one interface.
//!
//! One socket per direction of use: an RX socket (`ETH_P_ALL`, promiscuous, outgoing
//! frames ignored with `PACKET_IGNORE_OUTGOING`) with an RX ring, and a TX socket
//! (protocol 0, so it receives nothing) with a TX ring and `PACKET_QDISC_BYPASS` (weir
//! does its own queuing; the kernel qdisc would only add a second queue).
//!
//! Why TPACKET_V2 and not V3: a V3 RX ring hands a *block* to user space only when the
//! block is full or its retire timer (`tp_retire_blk_tov`, at least 1 ms) fires, so at
//! low packet rates every frame can wait up to that long — far more than the emulator's
//! delay-spread budget (100 µs). V2 publishes every frame as soon as it is written. The TX
//! side is the same in V2 and V3 (fixed-size frames).
//!
//! Frames: `frame_size` bytes each (default 2048: header 32 + sockaddr_ll + an MTU-size
//! frame with room for a VLAN tag); `frames` of them per ring (default 4096). A received
//! frame longer than fits is truncated by the kernel (`snaplen < len`) and reported so
//! the caller can count it.
//!
//! Super-packets (TSO/GSO from a peer): a veth or tap peer whose sender keeps its
//! segmentation offloads on hands weir TCP frames of up to 64 KB that weir cannot switch
//! off. The RX socket sets `PACKET_VNET_HDR`, so the kernel writes a `virtio_net_hdr`
//! (10 bytes: GSO type and size, partial-checksum offsets) just before each frame's MAC
//! header ([`RxFrame::vnet`]), and `PACKET_COPY_THRESH`, so a frame longer than a ring
//! slot still fills a (truncated) slot flagged `TP_STATUS_COPY` while the whole skb is
//! queued on the socket's receive queue, in ring order; [`RxRing::recv_copy`] reads it
//! (with its virtio header in front). The ring keeps its small slots (memory stays
//! `frames × frame_size`); the copies are bounded by the socket's receive buffer
//! (`COPY_RCVBUF`, 8 MiB: about 60 super-packets of 64 KB by the kernel's truesize
//! accounting). A slot whose copy could not be queued (buffer full) stays truncated and
//! is counted by the caller.
//!
//! The kernel strips a VLAN tag into the frame header when the device offloads it
//! (`TP_STATUS_VLAN_VALID`); [`RxFrame::vlan`] returns it so the caller can put it back.
//! `TP_STATUS_CSUMNOTREADY` (a locally generated frame whose L4 checksum was left for the
//! device to fill) is reported too: once such a frame is re-sent through a packet socket
//! nobody would fill it, so the caller fixes it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

const TPACKET_V2: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_COPY_THRESH: libc::c_int = 7;
const PACKET_VNET_HDR: libc::c_int = 15;

/// Receive buffer for the copies of frames longer than a ring slot (see the module
/// comment).
pub const COPY_RCVBUF: usize = 8 << 20;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_LOSING: u32 = 1 << 2;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;

/// `struct tpacket2_hdr`.
#[repr(C)]
struct Tpacket2Hdr {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_sec: u32,
    tp_nsec: u32,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
    tp_padding: [u8; 4],
}

/// TPACKET_ALIGN(sizeof(struct tpacket2_hdr)): where TX data starts in a frame.
const TX_DATA_OFFSET: usize = 32;

#[repr(C)]
struct TpacketReq {
    tp_block_size: libc::c_uint,
    tp_block_nr: libc::c_uint,
    tp_frame_size: libc::c_uint,
    tp_frame_nr: libc::c_uint,
}

#[repr(C)]
struct TpacketStats {
    tp_packets: libc::c_uint,
    tp_drops: libc::c_uint,
}

#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("{what} on interface '{iface}': {source}")]
    Sys {
        what: &'static str,
        iface: String,
        #[source]
        source: io::Error,
    },
    #[error("interface '{0}' does not exist")]
    NoSuchInterface(String),
    #[error("interface '{iface}': {what}")]
    Fanout { iface: String, what: String },
}

fn sys(what: &'static str, iface: &str) -> RingError {
    RingError::Sys {
        what,
        iface: iface.to_string(),
        source: io::Error::last_os_error(),
    }
}

/// Ring geometry.
#[derive(Copy, Clone, Debug)]
pub struct RingConfig {
    pub frame_size: u32,
    pub frames: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            frame_size: 2048,
            frames: 4096,
        }
    }
}

pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points to a live T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn if_index(iface: &str) -> Result<u32, RingError> {
    let c = std::ffi::CString::new(iface).map_err(|_| RingError::NoSuchInterface(iface.into()))?;
    // SAFETY: a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(RingError::NoSuchInterface(iface.into()))
    } else {
        Ok(i)
    }
}

/// A mapped ring of fixed-size frames.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    frame_size: usize,
    frames: usize,
}

// SAFETY: the mapping is owned by one ring, which is used by one thread at a time.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(
        fd: RawFd,
        cfg: RingConfig,
        opt: libc::c_int,
        iface: &str,
    ) -> Result<Mapping, RingError> {
        let page = 4096u32;
        let frame = cfg.frame_size;
        // one block holds a whole number of frames; use page-sized multiples
        let block = (frame.max(page) / page) * page;
        let per_block = block / frame;
        let blocks = cfg.frames.div_ceil(per_block);
        let req = TpacketReq {
            tp_block_size: block,
            tp_block_nr: blocks,
            tp_frame_size: frame,
            tp_frame_nr: blocks * per_block,
        };
        setsockopt(fd, libc::SOL_PACKET, opt, &req).map_err(|source| RingError::Sys {
            what: "cannot set up the packet ring",
            iface: iface.into(),
            source,
        })?;
        let len = block as usize * blocks as usize;
        // SAFETY: mapping a ring the kernel just allocated for this socket.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(sys("cannot map the packet ring", iface));
        }
        Ok(Mapping {
            base: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
            frame_size: frame as usize,
            frames: (blocks * per_block) as usize,
        })
    }

    #[inline]
    fn frame(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.frames);
        // SAFETY: i < frames, and frames * frame_size <= len.
        unsafe { self.base.as_ptr().add(i * self.frame_size) }
    }

    #[inline]
    fn hdr(&self, i: usize) -> *mut Tpacket2Hdr {
        self.frame(i) as *mut Tpacket2Hdr
    }

    #[inline]
    fn status(&self, i: usize) -> u32 {
        // SAFETY: the header is inside the mapping; the kernel writes it concurrently, so
        // read it volatile and order the following reads after it.
        let s = unsafe { std::ptr::read_volatile(&(*self.hdr(i)).tp_status) };
        fence(Ordering::Acquire);
        s
    }

    #[inline]
    fn set_status(&self, i: usize, s: u32) {
        fence(Ordering::Release);
        // SAFETY: as above; hands the frame back to the kernel.
        unsafe { std::ptr::write_volatile(&mut (*self.hdr(i)).tp_status, s) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what was mapped.
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

fn packet_socket(proto: u16, iface: &str) -> Result<OwnedFd, RingError> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto.to_be() as libc::c_int,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        let what = if e.raw_os_error() == Some(libc::EPERM) {
            "opening an AF_PACKET socket needs root (CAP_NET_RAW)"
        } else {
            "cannot open an AF_PACKET socket"
        };
        return Err(RingError::Sys {
            what,
            iface: iface.into(),
            source: e,
        });
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        PACKET_VERSION,
        &TPACKET_V2,
    )
    .map_err(|source| RingError::Sys {
        what: "TPACKET_V2 is not supported",
        iface: iface.into(),
        source,
    })?;
    Ok(fd)
}

fn bind(fd: RawFd, ifindex: u32, proto: u16, iface: &str) -> Result<(), RingError> {
    // SAFETY: zeroed sockaddr_ll is a valid bit pattern.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: binding with a valid sockaddr_ll of the right size.
    let r = unsafe {
        libc::bind(
            fd,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(sys("cannot bind the packet socket", iface));
    }
    Ok(())
}

/// A received frame, borrowed from the RX ring until [`RxRing::release`].
pub struct RxFrame<'a> {
    pub data: &'a [u8],
    /// Original length on the wire (more than `data.len()` if truncated).
    pub wire_len: u32,
    /// Kernel receive timestamp (CLOCK_REALTIME), nanoseconds.
    pub ts_ns: u64,
    /// The VLAN tag the device stripped: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
    /// The L4 checksum was left for a device to fill (see the module comment).
    pub csum_not_ready: bool,
    /// The virtio-net header the kernel wrote in front of the frame (GSO type and size,
    /// partial-checksum offsets); see [`weir_wire::vnet`].
    pub vnet: [u8; weir_wire::vnet::LEN],
    /// The frame was longer than the slot, and its whole copy waits on the socket's
    /// receive queue: read it with [`RxRing::recv_copy`] before releasing this slot.
    pub copied: bool,
}

/// The receive side of one interface.
pub struct RxRing {
    fd: OwnedFd,
    map: Mapping,
    next: usize,
    iface: String,
}

/// A classic BPF program that accepts nothing (`ret #0`): a socket joining a fanout
/// group wears it from before its bind until it has joined, so that it never receives
/// a frame on its own besides the group's (a frame would reach it twice).
const DROP_ALL: [libc::sock_filter; 1] = [libc::sock_filter {
    code: 0x06, // BPF_RET | BPF_K
    jt: 0,
    jf: 0,
    k: 0,
}];

impl RxRing {
    pub fn open(iface: &str, cfg: RingConfig) -> Result<RxRing, RingError> {
        Self::open_joined(iface, cfg, None)
    }

    /// Open the ring and, with `join`, make its socket a member of a fanout group
    /// (`join` gets the bound socket: [`crate::fanout::Steering::join`]) before it
    /// receives anything.
    pub fn open_joined(
        iface: &str,
        cfg: RingConfig,
        join: Option<&dyn Fn(RawFd) -> Result<(), String>>,
    ) -> Result<RxRing, RingError> {
        let ifindex = if_index(iface)?;
        const ETH_P_ALL: u16 = 0x0003;
        let fd = packet_socket(ETH_P_ALL, iface)?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32).map_err(|source| {
            RingError::Sys {
                what: "PACKET_IGNORE_OUTGOING is not supported (Linux >= 4.20 needed)",
                iface: iface.into(),
                source,
            }
        })?;
        // before the ring: the kernel refuses PACKET_VNET_HDR on a socket with one
        for (opt, what) in [
            (PACKET_VNET_HDR, "PACKET_VNET_HDR is not supported"),
            (PACKET_COPY_THRESH, "PACKET_COPY_THRESH is not supported"),
        ] {
            setsockopt(raw, libc::SOL_PACKET, opt, &1i32).map_err(|source| RingError::Sys {
                what,
                iface: iface.into(),
                source,
            })?;
        }
        let rcvbuf = COPY_RCVBUF as libc::c_int;
        // FORCE lifts net.core.rmem_max for root; otherwise take what the sysctl allows
        if setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf).is_err() {
            let _ = setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf);
        }
        let map = Mapping::new(raw, cfg, PACKET_RX_RING, iface)?;
        let err = |what: &'static str| {
            let iface = iface.to_string();
            move |source| RingError::Sys {
                what,
                iface,
                source,
            }
        };
        if join.is_some() {
            let prog = libc::sock_fprog {
                len: DROP_ALL.len() as u16,
                filter: DROP_ALL.as_ptr() as *mut libc::sock_filter,
            };
            setsockopt(raw, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
                .map_err(err("cannot attach a socket filter"))?;
        }
        bind(raw, ifindex, ETH_P_ALL, iface)?;
        if let Some(join) = join {
            join(raw).map_err(|what| RingError::Fanout {
                iface: iface.into(),
                what,
            })?;
            setsockopt(raw, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &0i32)
                .map_err(err("cannot detach the socket filter"))?;
        }
        // promiscuous: we forward frames addressed to anyone
        // SAFETY: packet_mreq zeroed is valid.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = PACKET_MR_PROMISC;
        setsockopt(raw, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq).map_err(|source| {
            RingError::Sys {
                what: "cannot set promiscuous mode",
                iface: iface.into(),
                source,
            }
        })?;
        Ok(RxRing {
            fd,
            map,
            next: 0,
            iface: iface.into(),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The next received frame, if any. Call [`RxRing::release`] when done with it.
    #[inline]
    pub fn peek(&self) -> Option<RxFrame<'_>> {
        let i = self.next;
        let st = self.map.status(i);
        if st & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the kernel handed the frame to us (TP_STATUS_USER); the header and the
        // data it describes lie inside this frame.
        unsafe {
            let h = &*self.map.hdr(i);
            let mac = h.tp_mac as usize;
            let snap = (h.tp_snaplen as usize).min(self.map.frame_size.saturating_sub(mac));
            let data = std::slice::from_raw_parts(self.map.frame(i).add(mac), snap);
            let mut vnet = [0u8; weir_wire::vnet::LEN];
            // the kernel puts the virtio header right before the MAC header (tp_mac leaves
            // room for it); a slot too small for any of it reads as "no offload"
            if let Some(at) = mac.checked_sub(weir_wire::vnet::LEN) {
                if at >= std::mem::size_of::<Tpacket2Hdr>() {
                    let p = self.map.frame(i).add(at);
                    vnet.copy_from_slice(std::slice::from_raw_parts(p, weir_wire::vnet::LEN));
                }
            }
            let vlan = (st & TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if st & TP_STATUS_VLAN_TPID_VALID != 0 {
                    h.tp_vlan_tpid
                } else {
                    0x8100
                };
                (tpid, h.tp_vlan_tci)
            });
            Some(RxFrame {
                data,
                wire_len: h.tp_len,
                ts_ns: h.tp_sec as u64 * 1_000_000_000 + h.tp_nsec as u64,
                vlan,
                csum_not_ready: st & TP_STATUS_CSUMNOTREADY != 0,
                vnet,
                copied: st & TP_STATUS_COPY != 0,
            })
        }
    }

    /// Give the frame returned by `peek` back to the kernel.
    #[inline]
    pub fn release(&mut self) {
        self.map.set_status(self.next, TP_STATUS_KERNEL);
        self.next = (self.next + 1) % self.map.frames;
    }

    /// Read the whole copy of the frame the current slot holds truncated (`copied`): its
    /// virtio-net header followed by the frame, into `buf`. Returns the length the copy
    /// really has (more than `buf.len()` if it did not fit: the rest is lost), or `None`
    /// if no copy is queued.
    pub fn recv_copy(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: recv(2) into a live buffer of the given length.
        let r = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(r as usize))
    }

    /// The kernel's count of frames dropped because the ring was full, since the last call.
    pub fn kernel_drops(&self) -> u64 {
        let mut st = TpacketStats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: reading a tpacket_stats into a correctly sized buffer.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStats as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            st.tp_drops as u64
        } else {
            0
        }
    }
}

/// The transmit side of one interface.
pub struct TxRing {
    fd: OwnedFd,
    map: Mapping,
    next: usize,
    /// Oldest slot handed to the kernel and not yet seen back (`done..next` are the
    /// kernel's).
    done: usize,
    outstanding: usize,
    iface: String,
    /// Frames the kernel rejected (`TP_STATUS_WRONG_FORMAT`), e.g. longer than the MTU.
    pub rejected: u64,
    /// Frames put in the ring since the last kick that took them all.
    unkicked: usize,
    /// A plain socket with `PACKET_VNET_HDR` for super-packets sent whole (a ring slot
    /// holds 2 KB); `None` if the kernel refused to set it up.
    whole: Option<OwnedFd>,
    /// [`TxRing::send_whole`] calls in a row that found it could not send yet.
    whole_busy: u32,
    /// Super-packets in a row the kernel refused.
    whole_refusals: u32,
}

/// What became of a super-packet handed to [`TxRing::send_whole`].
#[derive(Debug)]
pub enum WholeSent {
    /// Handed to the device (or to its qdisc).
    Sent,
    /// Not now: frames before it are still queued, or the socket's buffer is full. Try
    /// again later.
    Busy,
    /// The device dropped it (its queue was full), as it may drop a ring frame; or it
    /// stayed [`WholeSent::Busy`] for [`WHOLE_BUSY_LIMIT`] tries in a row.
    Dropped,
    /// The kernel refuses this packet (a virtio-net header it does not accept): dropped.
    /// After [`WHOLE_REFUSALS`] in a row the ring stops sending whole
    /// ([`TxRing::sends_whole`] false from then on: `gave_up`).
    Refused { error: io::Error, gave_up: bool },
}

/// Refusals in a row after which super-packets are no longer sent whole on an interface.
pub const WHOLE_REFUSALS: u32 = 8;

/// Tries in a row after which a super-packet that cannot leave is dropped (a loop turn
/// takes microseconds: some milliseconds).
pub const WHOLE_BUSY_LIMIT: u32 = 1000;

/// A socket to send super-packets whole with their virtio-net header, a send buffer of
/// 4 MiB (about 60 super-packets of 64 KB). Unlike the ring's, it does not bypass the
/// kernel's qdisc: only that path (`dev_queue_xmit`) cuts a super-packet in software when
/// the device cannot (TSO off, no checksum offload); the direct path drops it. A bridge
/// port's qdisc is empty (weir queues) or absent (`noqueue`, veth).
fn whole_socket(iface: &str, ifindex: u32) -> Result<OwnedFd, RingError> {
    let fd = packet_socket(0, iface)?;
    let raw = fd.as_raw_fd();
    let _ = setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &(4i32 << 20));
    setsockopt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &1i32).map_err(|source| RingError::Sys {
        what: "PACKET_VNET_HDR is not supported",
        iface: iface.into(),
        source,
    })?;
    bind(raw, ifindex, 0, iface)?;
    Ok(fd)
}

impl TxRing {
    pub fn open(iface: &str, cfg: RingConfig) -> Result<TxRing, RingError> {
        let ifindex = if_index(iface)?;
        let fd = packet_socket(0, iface)?;
        let raw = fd.as_raw_fd();
        // bypassing the kernel qdisc is an optimisation; carry on without it
        let _ = setsockopt(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, &1i32);
        // without PACKET_LOSS one frame the kernel refuses would stop the ring behind it
        setsockopt(raw, libc::SOL_PACKET, PACKET_LOSS, &1i32).map_err(|source| RingError::Sys {
            what: "cannot set PACKET_LOSS on the transmit ring",
            iface: iface.into(),
            source,
        })?;
        let map = Mapping::new(raw, cfg, PACKET_TX_RING, iface)?;
        bind(raw, ifindex, 0, iface)?;
        Ok(TxRing {
            fd,
            map,
            next: 0,
            done: 0,
            outstanding: 0,
            iface: iface.into(),
            rejected: 0,
            unkicked: 0,
            whole: whole_socket(iface, ifindex).ok(),
            whole_busy: 0,
            whole_refusals: 0,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    pub fn iface(&self) -> &str {
        &self.iface
    }
    /// Largest frame a TX slot holds.
    pub fn max_frame(&self) -> usize {
        self.map.frame_size - TX_DATA_OFFSET
    }

    /// Take back the slots the kernel has finished with (sent, or refused and counted).
    #[inline]
    fn reap(&mut self) {
        while self.outstanding > 0 {
            let st = self.map.status(self.done);
            if st & TP_STATUS_WRONG_FORMAT != 0 {
                self.rejected += 1;
                self.map.set_status(self.done, TP_STATUS_AVAILABLE);
            } else if st != TP_STATUS_AVAILABLE {
                break;
            }
            self.done = (self.done + 1) % self.map.frames;
            self.outstanding -= 1;
        }
    }

    /// Frames handed to the kernel that it has not sent yet.
    pub fn outstanding(&mut self) -> usize {
        self.reap();
        self.outstanding
    }

    /// Whether the next slot is free for a frame.
    #[inline]
    pub fn has_room(&mut self) -> bool {
        if self.outstanding == self.map.frames {
            self.reap();
        }
        self.outstanding < self.map.frames
    }

    /// Queue a frame built by `fill` (which writes into the slot and returns the length)
    /// for transmission. Returns false when the ring is full (nothing was written).
    #[inline]
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if !self.has_room() {
            return false;
        }
        let i = self.next;
        let cap = self.max_frame();
        // SAFETY: the slot is ours (TP_STATUS_AVAILABLE) and lies inside the mapping.
        let len = unsafe {
            let buf = std::slice::from_raw_parts_mut(self.map.frame(i).add(TX_DATA_OFFSET), cap);
            let len = fill(buf).min(cap);
            let h = &mut *self.map.hdr(i);
            h.tp_len = len as u32;
            h.tp_snaplen = len as u32;
            len
        };
        debug_assert!(len > 0);
        self.map.set_status(i, TP_STATUS_SEND_REQUEST);
        self.next = (self.next + 1) % self.map.frames;
        self.outstanding += 1;
        self.unkicked += 1;
        true
    }

    /// Whether super-packets can be sent whole ([`TxRing::send_whole`]).
    pub fn sends_whole(&self) -> bool {
        self.whole.is_some()
    }

    /// Send a super-packet whole, with its virtio-net header `vnet`, after the frames
    /// queued in the ring before it (see [`WholeSent`]).
    pub fn send_whole(&mut self, vnet: &[u8; weir_wire::vnet::LEN], frame: &[u8]) -> WholeSent {
        let r = self.try_whole(vnet, frame);
        if let WholeSent::Refused { error, .. } = r {
            self.whole_busy = 0;
            self.whole_refusals += 1;
            let gave_up = self.whole_refusals >= WHOLE_REFUSALS;
            if gave_up {
                self.whole = None;
            }
            return WholeSent::Refused { error, gave_up };
        }
        if !matches!(r, WholeSent::Busy) {
            self.whole_busy = 0;
            self.whole_refusals = 0;
            return r;
        }
        self.whole_busy += 1;
        if self.whole_busy >= WHOLE_BUSY_LIMIT {
            self.whole_busy = 0;
            return WholeSent::Dropped;
        }
        WholeSent::Busy
    }

    fn try_whole(&mut self, vnet: &[u8; weir_wire::vnet::LEN], frame: &[u8]) -> WholeSent {
        let Some(fd) = self.whole.as_ref().map(|f| f.as_raw_fd()) else {
            return WholeSent::Refused {
                error: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                gave_up: true,
            };
        };
        if self.unkicked > 0 {
            // a kick that fails (the link flapping) is a device not ready yet: retried,
            // and dropped after WHOLE_BUSY_LIMIT tries
            if self.flush().is_err() || self.unkicked > 0 {
                return WholeSent::Busy;
            }
        }
        let mut iov = [
            libc::iovec {
                iov_base: vnet.as_ptr() as *mut libc::c_void,
                iov_len: vnet.len(),
            },
            libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            },
        ];
        // SAFETY: a zeroed msghdr is valid; it points at two live buffers for the call.
        let r = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = iov.len();
            libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT)
        };
        if r >= 0 {
            return WholeSent::Sent;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => WholeSent::Busy,
            // a full queue or backlog dropped it (ENETDOWN: a queue-less virtual device
            // with its queue stopped, "asks to queue packet")
            Some(libc::ENOBUFS) | Some(libc::ENETDOWN) => WholeSent::Dropped,
            _ => WholeSent::Refused {
                error: e,
                gave_up: false,
            },
        }
    }

    /// Ask the kernel to send the queued frames. A kick can stop early (a busy device,
    /// EAGAIN/ENOBUFS) and leave frames queued: call again while [`TxRing::outstanding`]
    /// is non-zero.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.outstanding() == 0 {
            self.unkicked = 0;
            return Ok(());
        }
        // SAFETY: send(2) with an empty buffer kicks the TX ring.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // EAGAIN/ENOBUFS: the device is busy; frames stay queued in the ring
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                return Ok(());
            }
            return Err(e);
        }
        self.unkicked = 0;
        Ok(())
    }
}

/// The losing flag is reported for completeness (the kernel dropped frames since the
/// last statistics read).
pub const fn losing_flag() -> u32 {
    TP_STATUS_LOSING
}
