//! Interface queries and offload control through `ioctl` (no external `ethtool`/`ip` tool).
//!
//! # What and why
//! veth and many NICs hand AF_PACKET sockets GRO/GSO/TSO/LRO super-packets of up to 64 KB
//! with checksums not filled in. Shaping and TCP rewriting must see wire-size frames, so
//! the bridge turns those offloads off on the interfaces it owns for as long as it runs
//! ([`OffloadGuard`]) and puts the previous settings back when it stops.
//!
//! # Interface
//! * [`ifindex`], [`exists`], [`is_up`] (`SIOCGIFFLAGS` & `IFF_UP`, the administrative
//!   state), [`require_up`], [`mtu`] (`SIOCGIFMTU`).
//! * [`get_offloads`] / [`set_offloads`] read and write GRO, GSO, TSO, LRO and the generic
//!   receive/transmit checksum offloads with the legacy `SIOCETHTOOL` commands
//!   (`ETHTOOL_[GS]GRO` 0x2b/0x2c, `[GS]GSO` 0x23/0x24, `[GS]TSO` 0x1e/0x1f,
//!   `[GS]FLAGS` 0x25/0x26 with `ETH_FLAG_LRO`, `[GS]RXCSUM` 0x14/0x15, `[GS]TXCSUM`
//!   0x16/0x17) on a `struct ethtool_value { cmd, data }` pointed to by `ifr_data`.
//!   Every kernel since 2.6.39 maps these onto the netdev feature bits.
//! * A setting a driver cannot change (`EOPNOTSUPP`: a fixed feature) is not an error:
//!   there is nothing to change; [`set_offloads`] lists it in
//!   [`SetOutcome::not_supported`]. A setting the kernel accepted but did not apply (a
//!   feature held by a dependency, e.g. TSO without TX checksumming) is listed in
//!   [`SetOutcome::did_not_stick`]. Reading a setting the driver does not report gives
//!   `None`.
//! * [`OffloadGuard`] records the settings, applies new ones (by default: GRO, GSO, TSO,
//!   LRO off), and restores what it recorded on `Drop` (or [`OffloadGuard::restore`],
//!   which reports errors). Restoring sets the checksum offloads before the segmentation
//!   offloads that depend on them.
//!
//! All calls need an `AF_INET` datagram socket, which any user may open; changing
//! settings needs `CAP_NET_ADMIN`. Errors name the interface and what failed.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCGIFMTU: libc::c_ulong = 0x8921;

const ETHTOOL_GRXCSUM: u32 = 0x14;
const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// Longest interface name (IFNAMSIZ − 1).
pub const MAX_NAME_LEN: usize = 15;

/// Errors of this module; every one names the interface.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("interface '{iface}' does not exist")]
    NoSuchInterface { iface: String },
    #[error("interface '{iface}' is down")]
    Down { iface: String },
    #[error("invalid interface name '{iface}': {reason}")]
    BadName { iface: String, reason: &'static str },
    #[error("interface '{iface}': permission denied to {what} (needs root or CAP_NET_ADMIN)")]
    PermissionDenied { iface: String, what: String },
    #[error("interface '{iface}': cannot {what}: {source}")]
    Io {
        iface: String,
        what: String,
        #[source]
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// One offload setting.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    Gro,
    Gso,
    Tso,
    Lro,
    RxCsum,
    TxCsum,
}

impl Feature {
    /// Every feature, in the order settings are applied when restoring (checksums first:
    /// TSO/GSO depend on TX checksumming).
    pub const ALL: [Feature; 6] = [
        Feature::RxCsum,
        Feature::TxCsum,
        Feature::Gso,
        Feature::Tso,
        Feature::Gro,
        Feature::Lro,
    ];

    /// The name `ethtool -k` prints.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Gro => "generic-receive-offload",
            Feature::Gso => "generic-segmentation-offload",
            Feature::Tso => "tcp-segmentation-offload",
            Feature::Lro => "large-receive-offload",
            Feature::RxCsum => "rx-checksumming",
            Feature::TxCsum => "tx-checksumming",
        }
    }

    /// Short name: "gro", "gso", "tso", "lro", "rx", "tx".
    pub fn short(self) -> &'static str {
        match self {
            Feature::Gro => "gro",
            Feature::Gso => "gso",
            Feature::Tso => "tso",
            Feature::Lro => "lro",
            Feature::RxCsum => "rx",
            Feature::TxCsum => "tx",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// Offload settings. Read: `None` = the driver does not report it. Write: `None` = leave
/// as it is.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Offloads {
    pub gro: Option<bool>,
    pub gso: Option<bool>,
    pub tso: Option<bool>,
    pub lro: Option<bool>,
    pub rx_csum: Option<bool>,
    pub tx_csum: Option<bool>,
}

impl Offloads {
    /// GRO, GSO, TSO and LRO off; checksum offloads left alone.
    pub const SEGMENTATION_OFF: Offloads = Offloads {
        gro: Some(false),
        gso: Some(false),
        tso: Some(false),
        lro: Some(false),
        rx_csum: None,
        tx_csum: None,
    };

    /// GRO and LRO off (received segments stay apart); segmentation and checksum
    /// offloads left alone. What the bridge wants.
    pub const MERGING_OFF: Offloads = Offloads {
        gro: Some(false),
        gso: None,
        tso: None,
        lro: Some(false),
        rx_csum: None,
        tx_csum: None,
    };

    pub fn get(&self, f: Feature) -> Option<bool> {
        match f {
            Feature::Gro => self.gro,
            Feature::Gso => self.gso,
            Feature::Tso => self.tso,
            Feature::Lro => self.lro,
            Feature::RxCsum => self.rx_csum,
            Feature::TxCsum => self.tx_csum,
        }
    }

    pub fn set(&mut self, f: Feature, v: Option<bool>) {
        match f {
            Feature::Gro => self.gro = v,
            Feature::Gso => self.gso = v,
            Feature::Tso => self.tso = v,
            Feature::Lro => self.lro = v,
            Feature::RxCsum => self.rx_csum = v,
            Feature::TxCsum => self.tx_csum = v,
        }
    }
}

impl fmt::Display for Offloads {
    /// "gro on, gso off, tso on, lro n/a, rx on, tx on"
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order = [
            Feature::Gro,
            Feature::Gso,
            Feature::Tso,
            Feature::Lro,
            Feature::RxCsum,
            Feature::TxCsum,
        ];
        for (i, feat) in order.into_iter().enumerate() {
            let v = match self.get(feat) {
                Some(true) => "on",
                Some(false) => "off",
                None => "n/a",
            };
            write!(f, "{}{} {v}", if i > 0 { ", " } else { "" }, feat.short())?;
        }
        Ok(())
    }
}

/// What [`set_offloads`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SetOutcome {
    /// The settings read back afterwards.
    pub after: Offloads,
    /// Requested changes the driver cannot make (fixed features): nothing was changed.
    pub not_supported: Vec<Feature>,
    /// Requested changes the kernel accepted but did not apply (held by a dependency).
    pub did_not_stick: Vec<Feature>,
}

// ----- ioctl plumbing -----------------------------------------------------------------

#[repr(C)]
#[derive(Copy, Clone)]
union IfrU {
    data: *mut libc::c_void,
    flags: libc::c_short,
    ivalue: libc::c_int,
    // struct ifmap is the largest member: 24 bytes on 64-bit, 16 on 32-bit.
    _pad: [u8; 24],
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; 16],
    u: IfrU,
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

fn check_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::BadName {
            iface: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("reserved name");
    }
    if name
        .bytes()
        .any(|b| b == 0 || b == b'/' || b == b':' || b.is_ascii_whitespace())
    {
        return bad("contains '/', ':', NUL or whitespace");
    }
    Ok(())
}

fn ifreq(name: &str) -> Result<IfReq> {
    check_name(name)?;
    let mut r = IfReq {
        name: [0; 16],
        u: IfrU { _pad: [0; 24] },
    };
    for (d, s) in r.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

fn control_socket(name: &str) -> Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the fd is owned immediately.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Error::Io {
            iface: name.to_string(),
            what: "open a control socket".into(),
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: fd is a freshly opened descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn map_err(name: &str, what: impl Into<String>, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::ENXIO) => Error::NoSuchInterface {
            iface: name.to_string(),
        },
        Some(libc::EPERM) | Some(libc::EACCES) => Error::PermissionDenied {
            iface: name.to_string(),
            what: what.into(),
        },
        _ => Error::Io {
            iface: name.to_string(),
            what: what.into(),
            source: e,
        },
    }
}

/// ioctl on `req`; returns the raw OS error on failure.
fn raw_ioctl(fd: &OwnedFd, request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: `req` is a valid, properly sized `struct ifreq` for the duration of the call;
    // for SIOCETHTOOL its data pointer refers to a live `ethtool_value`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut IfReq) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// An open control socket bound to one interface name, for several ethtool calls.
struct Ctl {
    fd: OwnedFd,
    name: String,
}

impl Ctl {
    fn new(name: &str) -> Result<Ctl> {
        check_name(name)?;
        Ok(Ctl {
            fd: control_socket(name)?,
            name: name.to_string(),
        })
    }

    /// One `ethtool_value` command; `Ok(None)` when the driver says "not supported".
    fn value(&self, cmd: u32, data: u32) -> io::Result<Option<u32>> {
        let mut v = EthtoolValue { cmd, data };
        let mut r = ifreq(&self.name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        r.u.data = (&mut v as *mut EthtoolValue).cast();
        match raw_ioctl(&self.fd, SIOCETHTOOL, &mut r) {
            Ok(()) => Ok(Some(v.data)),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn get(&self, f: Feature) -> Result<Option<bool>> {
        let cmd = match f {
            Feature::Gro => ETHTOOL_GGRO,
            Feature::Gso => ETHTOOL_GGSO,
            Feature::Tso => ETHTOOL_GTSO,
            Feature::Lro => ETHTOOL_GFLAGS,
            Feature::RxCsum => ETHTOOL_GRXCSUM,
            Feature::TxCsum => ETHTOOL_GTXCSUM,
        };
        let v = self
            .value(cmd, 0)
            .map_err(|e| map_err(&self.name, format!("read {}", f.name()), e))?;
        Ok(v.map(|d| match f {
            Feature::Lro => d & ETH_FLAG_LRO != 0,
            _ => d != 0,
        }))
    }

    /// Set one feature; `Ok(false)` when the driver does not support changing it.
    fn set(&self, f: Feature, on: bool) -> Result<bool> {
        let what = || format!("turn {} {}", f.name(), if on { "on" } else { "off" });
        let (cmd, data) = match f {
            Feature::Gro => (ETHTOOL_SGRO, on as u32),
            Feature::Gso => (ETHTOOL_SGSO, on as u32),
            Feature::Tso => (ETHTOOL_STSO, on as u32),
            Feature::RxCsum => (ETHTOOL_SRXCSUM, on as u32),
            Feature::TxCsum => (ETHTOOL_STXCSUM, on as u32),
            Feature::Lro => {
                // Read-modify-write: the flags word also carries VLAN, ntuple and hash bits.
                let flags = match self
                    .value(ETHTOOL_GFLAGS, 0)
                    .map_err(|e| map_err(&self.name, what(), e))?
                {
                    Some(fl) => fl,
                    None => return Ok(false),
                };
                let new = if on {
                    flags | ETH_FLAG_LRO
                } else {
                    flags & !ETH_FLAG_LRO
                };
                (ETHTOOL_SFLAGS, new)
            }
        };
        match self.value(cmd, data) {
            Ok(Some(_)) => Ok(true),
            Ok(None) => Ok(false),
            // Older kernels answer EINVAL for a flag the device cannot change.
            Err(e) if f == Feature::Lro && e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(map_err(&self.name, what(), e)),
        }
    }

    fn get_all(&self) -> Result<Offloads> {
        let mut o = Offloads::default();
        for f in Feature::ALL {
            o.set(f, self.get(f)?);
        }
        Ok(o)
    }

    fn set_all(&self, want: &Offloads) -> Result<SetOutcome> {
        let mut out = SetOutcome::default();
        // Turning things off: segmentation offloads first, then checksums; turning
        // them on: the reverse. Iterating twice in dependency order covers both.
        let order_off = [
            Feature::Lro,
            Feature::Gro,
            Feature::Tso,
            Feature::Gso,
            Feature::TxCsum,
            Feature::RxCsum,
        ];
        let mut requested = Vec::new();
        for pass_on in [false, true] {
            let order: Vec<Feature> = if pass_on {
                Feature::ALL.to_vec()
            } else {
                order_off.to_vec()
            };
            for f in order {
                let Some(v) = want.get(f) else { continue };
                if v != pass_on {
                    continue;
                }
                requested.push(f);
                match self.get(f)? {
                    Some(cur) if cur == v => continue,
                    None => {
                        out.not_supported.push(f);
                        continue;
                    }
                    Some(_) => {}
                }
                if !self.set(f, v)? {
                    out.not_supported.push(f);
                }
            }
        }
        out.after = self.get_all()?;
        for f in requested {
            if out.not_supported.contains(&f) {
                continue;
            }
            if out.after.get(f) != want.get(f) {
                out.did_not_stick.push(f);
            }
        }
        Ok(out)
    }
}

// ----- public interface ---------------------------------------------------------------

/// The interface's index.
pub fn ifindex(name: &str) -> Result<u32> {
    check_name(name)?;
    let c = std::ffi::CString::new(name).map_err(|_| Error::BadName {
        iface: name.to_string(),
        reason: "contains NUL",
    })?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) | Some(libc::ENOENT) | None | Some(0) => {
                Error::NoSuchInterface {
                    iface: name.to_string(),
                }
            }
            _ => map_err(name, "read its index", e),
        });
    }
    Ok(idx)
}

/// Whether the interface exists (false for invalid names too).
pub fn exists(name: &str) -> bool {
    ifindex(name).is_ok()
}

/// Whether the interface is administratively up (`IFF_UP`).
pub fn is_up(name: &str) -> Result<bool> {
    let fd = control_socket(name)?;
    let mut r = ifreq(name)?;
    raw_ioctl(&fd, SIOCGIFFLAGS, &mut r).map_err(|e| map_err(name, "read its flags", e))?;
    // SAFETY: SIOCGIFFLAGS filled in `ifr_flags`.
    let flags = unsafe { r.u.flags } as libc::c_int;
    Ok(flags & libc::IFF_UP != 0)
}

/// `Ok(())` if the interface exists and is up; otherwise the error that says which.
pub fn require_up(name: &str) -> Result<()> {
    if is_up(name)? {
        Ok(())
    } else {
        Err(Error::Down {
            iface: name.to_string(),
        })
    }
}

/// The interface's MTU in bytes.
pub fn mtu(name: &str) -> Result<u32> {
    let fd = control_socket(name)?;
    let mut r = ifreq(name)?;
    raw_ioctl(&fd, SIOCGIFMTU, &mut r).map_err(|e| map_err(name, "read its MTU", e))?;
    // SAFETY: SIOCGIFMTU filled in `ifr_mtu`.
    Ok(unsafe { r.u.ivalue } as u32)
}

/// Current offload settings (`None`: the driver does not report that one).
pub fn get_offloads(name: &str) -> Result<Offloads> {
    Ctl::new(name)?.get_all()
}

/// Apply the `Some` settings of `want`, leaving `None` ones alone. Unsupported changes
/// are recorded in the outcome, not errors.
pub fn set_offloads(name: &str, want: &Offloads) -> Result<SetOutcome> {
    Ctl::new(name)?.set_all(want)
}

/// Offload settings changed for as long as the guard lives; the recorded settings are
/// put back on `Drop` (errors ignored) or by [`OffloadGuard::restore`].
#[derive(Debug)]
pub struct OffloadGuard {
    name: String,
    saved: Offloads,
    outcome: SetOutcome,
    restored: bool,
}

impl OffloadGuard {
    /// Record the current settings and turn GRO, GSO, TSO and LRO off.
    pub fn disable(name: &str) -> Result<OffloadGuard> {
        Self::apply(name, &Offloads::SEGMENTATION_OFF)
    }

    /// Record the current settings and apply `want`.
    pub fn apply(name: &str, want: &Offloads) -> Result<OffloadGuard> {
        let ctl = Ctl::new(name)?;
        let current = ctl.get_all()?;
        // Restore only what we asked to change (and could read).
        let mut saved = Offloads::default();
        for f in Feature::ALL {
            if want.get(f).is_some() {
                saved.set(f, current.get(f));
            }
        }
        let mut guard = OffloadGuard {
            name: name.to_string(),
            saved,
            outcome: SetOutcome::default(),
            restored: false,
        };
        // If applying fails half way, dropping `guard` restores what was changed.
        guard.outcome = ctl.set_all(want)?;
        Ok(guard)
    }

    pub fn interface(&self) -> &str {
        &self.name
    }
    /// The settings recorded before the change (the ones that will be restored).
    pub fn saved(&self) -> &Offloads {
        &self.saved
    }
    /// What applying the new settings did.
    pub fn outcome(&self) -> &SetOutcome {
        &self.outcome
    }

    /// Put the recorded settings back now and report errors.
    pub fn restore(mut self) -> Result<SetOutcome> {
        self.restored = true;
        set_offloads(&self.name, &self.saved)
    }
}

impl Drop for OffloadGuard {
    fn drop(&mut self) {
        if !self.restored {
            self.restored = true;
            let _ = set_offloads(&self.name, &self.saved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Say a test is skipped, on the real stderr (not captured by the test harness).
    fn skip(why: &str) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIP: {why}");
    }
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// A veth pair deleted on drop (even when the test panics).
    struct Veth {
        a: String,
        b: String,
    }

    impl Veth {
        fn new() -> Veth {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let base = format!("wt{}{n}", std::process::id() % 10000);
            let v = Veth {
                a: format!("{base}a"),
                b: format!("{base}b"),
            };
            let st = Command::new("ip")
                .args(["link", "add", &v.a, "type", "veth", "peer", "name", &v.b])
                .status()
                .expect("run ip");
            assert!(st.success(), "ip link add {} failed", v.a);
            v
        }
        fn up(&self, name: &str) {
            let st = Command::new("ip")
                .args(["link", "set", name, "up"])
                .status()
                .expect("run ip");
            assert!(st.success());
        }
    }

    impl Drop for Veth {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.a]).status();
        }
    }

    macro_rules! need_root {
        () => {
            if !is_root() {
                skip("needs root (creates veth interfaces)");
                return;
            }
        };
    }

    #[test]
    fn names_are_validated_and_missing_interfaces_named() {
        assert!(matches!(ifindex(""), Err(Error::BadName { .. })));
        assert!(matches!(
            ifindex("a-very-long-interface-name"),
            Err(Error::BadName { .. })
        ));
        assert!(matches!(ifindex("a/b"), Err(Error::BadName { .. })));
        assert!(!exists("nosuchif0"));
        let e = ifindex("nosuchif0").unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif0' does not exist");
        let e = is_up("nosuchif0").unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif0' does not exist");
        let e = mtu("nosuchif0").unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif0' does not exist");
        let e = get_offloads("nosuchif0").unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif0' does not exist");
    }

    #[test]
    fn loopback_queries() {
        if !exists("lo") {
            skip("no loopback interface");
            return;
        }
        assert_eq!(
            ifindex("lo").unwrap(),
            std::fs::read_to_string("/sys/class/net/lo/ifindex")
                .unwrap()
                .trim()
                .parse::<u32>()
                .unwrap()
        );
        assert!(mtu("lo").unwrap() >= 1500);
        let o = get_offloads("lo").unwrap();
        eprintln!("lo offloads: {o}");
    }

    #[test]
    fn interface_helpers_on_veth() {
        need_root!();
        let v = Veth::new();
        assert!(exists(&v.a) && exists(&v.b));
        let want: u32 = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", v.a))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(ifindex(&v.a).unwrap(), want);
        assert_eq!(mtu(&v.a).unwrap(), 1500);
        assert!(!is_up(&v.a).unwrap());
        assert_eq!(
            require_up(&v.a).unwrap_err().to_string(),
            format!("interface '{}' is down", v.a)
        );
        v.up(&v.a);
        assert!(is_up(&v.a).unwrap(), "IFF_UP is the admin state");
        require_up(&v.a).unwrap();
    }

    #[test]
    fn guard_turns_offloads_off_and_restores_them() {
        need_root!();
        let v = Veth::new();
        let fresh = get_offloads(&v.a).unwrap();
        // Seen on Linux 6.18: "gro off, gso on, tso on, lro off, rx on, tx on" — veth
        // leaves GRO off unless XDP or the user turns it on; TSO/GSO are on.
        eprintln!("fresh veth {}: {fresh}", v.a);
        assert_eq!(fresh.tso, Some(true), "TSO on by default on veth");
        assert_eq!(fresh.gso, Some(true), "GSO on by default on veth");
        assert_ne!(fresh.lro, Some(true), "veth has no LRO");
        // Turn GRO on (as a user or an XDP program would) so that restoring is tested
        // for a setting that is on.
        let out = set_offloads(
            &v.a,
            &Offloads {
                gro: Some(true),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(out.not_supported.is_empty() && out.did_not_stick.is_empty());
        let before = get_offloads(&v.a).unwrap();
        assert_eq!(before.gro, Some(true));
        assert_eq!(
            Offloads {
                gro: fresh.gro,
                ..before
            },
            fresh,
            "only GRO changed"
        );
        {
            let g = OffloadGuard::disable(&v.a).unwrap();
            let now = get_offloads(&v.a).unwrap();
            eprintln!(
                "guarded: {now} (not supported: {:?}, did not stick: {:?})",
                g.outcome().not_supported,
                g.outcome().did_not_stick
            );
            assert_eq!(now.gro, Some(false));
            assert_eq!(now.gso, Some(false));
            assert_eq!(now.tso, Some(false));
            assert_ne!(now.lro, Some(true));
            assert_eq!(now.rx_csum, before.rx_csum, "checksums untouched");
            assert_eq!(now.tx_csum, before.tx_csum, "checksums untouched");
            assert!(g.outcome().did_not_stick.is_empty());
            assert_eq!(g.outcome().after, now);
        }
        assert_eq!(get_offloads(&v.a).unwrap(), before, "Drop restores");

        // Explicit restore reports, and a second guard on top restores correctly.
        let g = OffloadGuard::disable(&v.a).unwrap();
        let out = g.restore().unwrap();
        assert_eq!(out.after, before);

        // Setting what is already set changes nothing; None leaves alone.
        let out = set_offloads(
            &v.a,
            &Offloads {
                gro: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(out.after.gro, Some(false));
        assert_eq!(out.after.tso, before.tso);
        set_offloads(&v.a, &before).unwrap();
        assert_eq!(get_offloads(&v.a).unwrap(), before);
    }

    #[test]
    fn guard_on_missing_interface_errs() {
        let e = OffloadGuard::disable("nosuchif1").unwrap_err();
        assert_eq!(e.to_string(), "interface 'nosuchif1' does not exist");
    }

    #[test]
    fn checksum_dependency_is_reported_not_failed() {
        need_root!();
        let v = Veth::new();
        let before = get_offloads(&v.a).unwrap();
        {
            let g = OffloadGuard::apply(
                &v.a,
                &Offloads {
                    tx_csum: Some(false),
                    ..Default::default()
                },
            )
            .unwrap();
            // TSO needs TX checksumming: the kernel drops it along with it.
            let now = get_offloads(&v.a).unwrap();
            eprintln!("tx checksumming off: {now}");
            assert_eq!(now.tx_csum, Some(false));
            assert_eq!(now.tso, Some(false));
            let out = set_offloads(
                &v.a,
                &Offloads {
                    tso: Some(true),
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(out.did_not_stick, vec![Feature::Tso]);
            drop(g);
        }
        // The guard restored TX checksumming, and TSO (still wanted) came back with it.
        assert_eq!(get_offloads(&v.a).unwrap(), before);
    }

    #[test]
    fn panicking_test_still_deletes_veth() {
        need_root!();
        let mut name = String::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let v = Veth::new();
            name = v.a.clone();
            let _g = OffloadGuard::disable(&v.a).unwrap();
            panic!(
                "intentional panic: the veth guard must still delete {}",
                v.a
            );
        }));
        assert!(r.is_err());
        assert!(
            !name.is_empty() && !exists(&name),
            "veth {name} left behind"
        );
    }
}
