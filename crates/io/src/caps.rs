//! Which of the capabilities weir needs this process holds (`CapEff` of
//! `/proc/self/status`), and the refusal that names the missing ones.
//!
//! `weir run` and `weir emu` need CAP_NET_RAW (packet sockets) and CAP_NET_ADMIN
//! (interface offloads, the `clsact` qdisc and filter of the fail-open bypass); the
//! bypass also loads a BPF program, which needs CAP_BPF (Linux 5.8+; CAP_SYS_ADMIN
//! before, and instead). Root has them all; so does a process given them by systemd
//! (`AmbientCapabilities=`) or by file capabilities (`setcap`).

/// Capability numbers (linux/capability.h).
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_BPF: u32 = 39;

/// An effective capability set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps(pub u64);

impl Caps {
    /// This process's effective set; an unreadable status file reads as empty.
    pub fn effective() -> Caps {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| Caps::parse_status(&s))
            .unwrap_or(Caps(0))
    }

    /// The `CapEff:` line of a `/proc/PID/status` text (hexadecimal).
    pub fn parse_status(status: &str) -> Option<Caps> {
        let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
        u64::from_str_radix(hex.trim(), 16).ok().map(Caps)
    }

    pub fn has(self, cap: u32) -> bool {
        cap < 64 && self.0 & (1 << cap) != 0
    }

    /// What a bridge needs that this set lacks, as a sentence; `None`: nothing lacks.
    /// `fail_open`: the kernel bypass is wanted (CAP_BPF or CAP_SYS_ADMIN as well).
    pub fn missing_for_bridge(self, fail_open: bool) -> Option<String> {
        let mut lack = Vec::new();
        if !self.has(CAP_NET_RAW) {
            lack.push("CAP_NET_RAW (packet sockets)");
        }
        if !self.has(CAP_NET_ADMIN) {
            lack.push("CAP_NET_ADMIN (interface offloads, the fail-open filter)");
        }
        let bpf = self.has(CAP_BPF) || self.has(CAP_SYS_ADMIN);
        if fail_open && !bpf {
            lack.push("CAP_BPF (the fail-open bypass's BPF program; or run with --fail-closed)");
        }
        if lack.is_empty() {
            return None;
        }
        let grant = if fail_open {
            "cap_net_raw,cap_net_admin,cap_bpf"
        } else {
            "cap_net_raw,cap_net_admin"
        };
        Some(format!(
            "this process lacks {}: run it as root, or give it the capabilities (systemd: \
             AmbientCapabilities=; a file: setcap {grant}+ep /usr/bin/weir)",
            lack.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root's full set on a 6.x kernel is 0x1ffffffffff (41 capabilities); a process given
    /// NET_ADMIN, NET_RAW and BPF has bits 12, 13 and 39: 0x8000003000.
    #[test]
    fn parses_the_status_line() {
        let status = "Name:\tweir\nCapInh:\t0000000000000000\nCapPrm:\t0000008000003000\n\
                      CapEff:\t0000008000003000\nCapBnd:\t000001ffffffffff\n";
        let c = Caps::parse_status(status).unwrap();
        assert_eq!(c, Caps(0x80_0000_3000));
        assert!(c.has(CAP_NET_ADMIN) && c.has(CAP_NET_RAW) && c.has(CAP_BPF));
        assert!(!c.has(CAP_SYS_ADMIN));
        assert_eq!(c.missing_for_bridge(true), None);
        assert_eq!(Caps::parse_status("Name:\tx\n"), None);
        assert_eq!(Caps::parse_status("CapEff:\tzz\n"), None);
        assert!(Caps(0x1ff_ffff_ffff).missing_for_bridge(true).is_none());
    }

    #[test]
    fn names_what_lacks() {
        let raw_only = Caps(1 << CAP_NET_RAW);
        let m = raw_only.missing_for_bridge(false).unwrap();
        assert!(m.contains("lacks CAP_NET_ADMIN"), "{m}");
        assert!(!m.contains("CAP_NET_RAW ("), "{m}");
        assert!(m.contains("setcap cap_net_raw,cap_net_admin+ep"), "{m}");
        // fail-open also wants BPF; CAP_SYS_ADMIN stands in for it
        let net = Caps((1 << CAP_NET_RAW) | (1 << CAP_NET_ADMIN));
        assert_eq!(net.missing_for_bridge(false), None);
        let m = net.missing_for_bridge(true).unwrap();
        assert!(
            m.contains("lacks CAP_BPF") && m.contains("--fail-closed"),
            "{m}"
        );
        assert_eq!(
            Caps(net.0 | (1 << CAP_SYS_ADMIN)).missing_for_bridge(true),
            None
        );
        let none = Caps(0).missing_for_bridge(true).unwrap();
        assert!(
            none.contains("CAP_NET_RAW")
                && none.contains("CAP_NET_ADMIN")
                && none.contains("CAP_BPF"),
            "{none}"
        );
    }
}
