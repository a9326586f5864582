//! The little of rtnetlink weir needs to put a BPF program on an interface's ingress,
//! without the `tc` binary: add a `clsact` qdisc (if the interface has none), replace a
//! cls_bpf filter in direct-action mode at a fixed preference and handle, delete it.
//!
//! Equivalent commands (iproute2), for reading and for undoing by hand:
//!
//! ```text
//! tc qdisc add dev IF clsact
//! tc filter replace dev IF ingress pref PREF handle HANDLE bpf da fd PROG name NAME
//! tc filter del dev IF ingress pref PREF handle HANDLE bpf
//! ```
//!
//! Errors carry the kernel's extended acknowledgement (its own sentence) when it sends
//! one.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSG_ERROR: u16 = 2;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;
const NLA_F_NESTED: u16 = 1 << 15;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_FD: u16 = 6;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;
/// `TC_H_CLSACT` (= `TC_H_INGRESS`): the parent of the clsact/ingress qdisc.
const TC_H_CLSACT: u32 = 0xffff_fff1;
/// The clsact qdisc's handle, `ffff:`.
const CLSACT_HANDLE: u32 = 0xffff_0000;
/// Its ingress hook, `ffff:fff2` (also accepted by a plain `ingress` qdisc).
const INGRESS_PARENT: u32 = 0xffff_fff2;
const ETH_P_ALL: u16 = 0x0003;

#[derive(Debug, thiserror::Error)]
#[error("{what} on {iface}: {err}{}", kernel.as_deref().map(|m| format!(" (kernel: {m})")).unwrap_or_default())]
pub struct TcError {
    pub what: &'static str,
    pub iface: String,
    pub err: std::io::Error,
    /// The kernel's extended acknowledgement message, if it sent one.
    pub kernel: Option<String>,
}

/// Where a filter sits: the interface's ingress, at `pref` with `handle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterSlot {
    pub pref: u16,
    pub handle: u32,
}

/// A netlink message under construction: header, `tcmsg`, attributes.
struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    fn new(kind: u16, flags: u16, ifindex: i32, handle: u32, parent: u32, info: u32) -> Msg {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set in finish
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        buf.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
        buf.extend_from_slice(&[0u8; 4]); // family AF_UNSPEC, padding
        buf.extend_from_slice(&ifindex.to_ne_bytes());
        buf.extend_from_slice(&handle.to_ne_bytes());
        buf.extend_from_slice(&parent.to_ne_bytes());
        buf.extend_from_slice(&info.to_ne_bytes());
        Msg { buf }
    }

    fn attr(&mut self, kind: u16, data: &[u8]) {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(self.buf.len().next_multiple_of(4), 0);
    }

    fn str_attr(&mut self, kind: u16, s: &str) {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(kind, &v);
    }

    /// A nested attribute: `f` adds its members.
    fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Msg)) {
        let at = self.buf.len();
        self.attr(kind | NLA_F_NESTED, &[]);
        f(self);
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// The answer to a request: 0 or the negative errno, with the kernel's message.
fn parse_ack(reply: &[u8]) -> Option<(i32, Option<String>)> {
    if reply.len() < 20 {
        return None;
    }
    let u16_at = |b: &[u8], i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let kind = u16_at(reply, 4);
    let flags = u16_at(reply, 6);
    if kind != NLMSG_ERROR {
        return None;
    }
    let code = i32::from_ne_bytes(reply[16..20].try_into().ok()?);
    let mut msg = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        // with NETLINK_CAP_ACK the request is echoed as its header only (16 bytes)
        let mut at = 20 + 16;
        while at + 4 <= reply.len() {
            let len = u16_at(reply, at) as usize;
            let ty = u16_at(reply, at + 2) & 0x3fff;
            if len < 4 || at + len > reply.len() {
                break;
            }
            if ty == NLMSGERR_ATTR_MSG {
                let s = &reply[at + 4..at + len];
                let s = s.split(|&b| b == 0).next().unwrap_or(s);
                msg = Some(String::from_utf8_lossy(s).into_owned());
            }
            at += len.next_multiple_of(4);
        }
    }
    Some((code, msg))
}

fn netlink_socket() -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket creation.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
        let one: libc::c_int = 1;
        // SAFETY: an int option; failure (an old kernel) only loses the messages.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_NETLINK,
                opt,
                &one as *const libc::c_int as *const libc::c_void,
                4,
            )
        };
    }
    Ok(fd)
}

/// Send one request and wait for its acknowledgement.
fn request(msg: Msg) -> Result<(), (std::io::Error, Option<String>)> {
    let sock = netlink_socket().map_err(|e| (e, None))?;
    let buf = msg.finish();
    // SAFETY: sending our buffer to the kernel (a zeroed sockaddr_nl is the kernel).
    let sent = unsafe {
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            sock.as_raw_fd(),
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            0,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err((std::io::Error::last_os_error(), None));
    }
    let mut reply = vec![0u8; 8192];
    loop {
        // SAFETY: receiving into our buffer.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                reply.as_mut_ptr() as *mut libc::c_void,
                reply.len(),
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err((e, None));
        }
        match parse_ack(&reply[..n as usize]) {
            Some((0, _)) => return Ok(()),
            Some((code, msg)) => return Err((std::io::Error::from_raw_os_error(-code), msg)),
            None => continue, // not the acknowledgement
        }
    }
}

/// The interface's index ([`crate::ethtool::ifindex`]), as netlink's `tcmsg` has it.
pub fn ifindex(iface: &str) -> Result<i32, TcError> {
    crate::ethtool::ifindex(iface)
        .map(|i| i as i32)
        .map_err(|e| TcError {
            what: "interface index",
            iface: iface.into(),
            err: std::io::Error::other(e.to_string()),
            kernel: None,
        })
}

fn err<'a>(
    what: &'static str,
    iface: &'a str,
) -> impl FnOnce((std::io::Error, Option<String>)) -> TcError + 'a {
    move |(err, kernel)| TcError {
        what,
        iface: iface.into(),
        err,
        kernel,
    }
}

/// Give the interface a `clsact` qdisc unless it has one (or a plain `ingress` qdisc,
/// whose hook takes the same filters).
pub fn ensure_clsact(iface: &str) -> Result<(), TcError> {
    let mut m = Msg::new(
        RTM_NEWQDISC,
        NLM_F_CREATE | NLM_F_EXCL,
        ifindex(iface)?,
        CLSACT_HANDLE,
        TC_H_CLSACT,
        0,
    );
    m.str_attr(TCA_KIND, "clsact");
    match request(m) {
        Err((e, _)) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        r => r.map_err(err("adding a clsact qdisc", iface)),
    }
}

/// Put program `prog_fd` (a `SCHED_CLS` program) on the interface's ingress, in
/// direct-action mode, in place of whatever filter sits at `slot`.
pub fn replace_bpf_filter(
    iface: &str,
    slot: FilterSlot,
    prog_fd: i32,
    name: &str,
) -> Result<(), TcError> {
    let mut m = Msg::new(
        RTM_NEWTFILTER,
        NLM_F_CREATE | NLM_F_REPLACE,
        ifindex(iface)?,
        slot.handle,
        INGRESS_PARENT,
        (u32::from(slot.pref) << 16) | u32::from(ETH_P_ALL.to_be()),
    );
    m.str_attr(TCA_KIND, "bpf");
    m.nest(TCA_OPTIONS, |m| {
        m.attr(TCA_BPF_FD, &(prog_fd as u32).to_ne_bytes());
        m.str_attr(TCA_BPF_NAME, name);
        m.attr(TCA_BPF_FLAGS, &TCA_BPF_FLAG_ACT_DIRECT.to_ne_bytes());
    });
    request(m).map_err(err("attaching a bpf filter to the ingress", iface))
}

/// Remove the cls_bpf filter at `slot` from the interface's ingress. True if there was
/// one; false if there was none (or no ingress qdisc).
pub fn delete_bpf_filter(iface: &str, slot: FilterSlot) -> Result<bool, TcError> {
    let mut m = Msg::new(
        RTM_DELTFILTER,
        0,
        ifindex(iface)?,
        slot.handle,
        INGRESS_PARENT,
        (u32::from(slot.pref) << 16) | u32::from(ETH_P_ALL.to_be()),
    );
    m.str_attr(TCA_KIND, "bpf");
    match request(m) {
        Ok(()) => Ok(true),
        Err((e, _)) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => Ok(false),
        Err(e) => Err(err("removing the bpf filter from the ingress", iface)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter request byte by byte: nlmsghdr (len, RTM_NEWTFILTER = 44, flags
    /// REQUEST|ACK|REPLACE|CREATE = 0x505, seq 1, port 0), tcmsg (ifindex 7, handle 0x77,
    /// parent ffff:fff2, info pref 3 << 16 | htons(ETH_P_ALL)), TCA_KIND "bpf\0", and the
    /// nested options: fd 9, name "x\0" (padded), flags 1.
    #[test]
    fn filter_message_layout() {
        let mut m = Msg::new(
            RTM_NEWTFILTER,
            NLM_F_CREATE | NLM_F_REPLACE,
            7,
            0x77,
            INGRESS_PARENT,
            (3 << 16) | u32::from(ETH_P_ALL.to_be()),
        );
        m.str_attr(TCA_KIND, "bpf");
        m.nest(TCA_OPTIONS, |m| {
            m.attr(TCA_BPF_FD, &9u32.to_ne_bytes());
            m.str_attr(TCA_BPF_NAME, "x");
            m.attr(TCA_BPF_FLAGS, &1u32.to_ne_bytes());
        });
        let b = m.finish();
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        assert_eq!(u32_at(0) as usize, b.len());
        assert_eq!(b.len(), 16 + 20 + 8 + (4 + 8 + 8 + 8));
        assert_eq!((u16_at(4), u16_at(6), u32_at(8)), (44, 0x505, 1));
        assert_eq!((u32_at(20), u32_at(24), u32_at(28)), (7, 0x77, 0xffff_fff2));
        // the protocol in network order in the low half: ETH_P_ALL = 00 03
        #[cfg(target_endian = "little")]
        assert_eq!(&b[32..36], &[0x00, 0x03, 0x03, 0x00]);
        assert_eq!(
            (u16_at(36), u16_at(38), &b[40..44]),
            (8, TCA_KIND, &b"bpf\0"[..])
        );
        assert_eq!((u16_at(44), u16_at(46)), (28, TCA_OPTIONS | NLA_F_NESTED));
        assert_eq!((u16_at(48), u16_at(50), u32_at(52)), (8, TCA_BPF_FD, 9));
        assert_eq!(
            (u16_at(56), u16_at(58), &b[60..62]),
            (6, TCA_BPF_NAME, &b"x\0"[..])
        );
        assert_eq!((u16_at(64), u16_at(66), u32_at(68)), (8, TCA_BPF_FLAGS, 1));
    }

    /// An extended acknowledgement: error -EINVAL (-22), the echoed header, then a
    /// NLMSGERR_ATTR_MSG attribute with the kernel's sentence.
    #[test]
    fn ack_with_the_kernels_message() {
        let text = b"Parent Qdisc doesn't exists\0";
        let mut r = Vec::new();
        let attr_len = 4 + text.len();
        let total = 16 + 4 + 16 + attr_len.next_multiple_of(4);
        r.extend_from_slice(&(total as u32).to_ne_bytes());
        r.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        r.extend_from_slice(&NLM_F_ACK_TLVS.to_ne_bytes());
        r.extend_from_slice(&[0u8; 8]);
        r.extend_from_slice(&(-22i32).to_ne_bytes());
        r.extend_from_slice(&[0u8; 16]);
        r.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        r.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        r.extend_from_slice(text);
        r.resize(total, 0);
        let (code, msg) = parse_ack(&r).unwrap();
        assert_eq!(code, -22);
        assert_eq!(msg.as_deref(), Some("Parent Qdisc doesn't exists"));
        // a plain acknowledgement
        let mut ok = r[..36].to_vec();
        ok[6..8].copy_from_slice(&0u16.to_ne_bytes());
        ok[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert_eq!(parse_ack(&ok), Some((0, None)));
        // not an acknowledgement
        ok[4..6].copy_from_slice(&44u16.to_ne_bytes());
        assert_eq!(parse_ack(&ok), None);
    }
}
