//! Seed 004's test network (Fig. 5): host A → ingress → interior → egress → host B, each
//! router's outgoing link also loaded by a background host of its own.
//!
//! ```text
//!         c0                 c1                 c2            background hosts
//!         │ bg               │ bg               │ bg
//!   a ── uplink ┐           ┌─ uplink ┐           ┌─ uplink ┐
//!           br0 ─ inner ═ lan0 [r0] wan0 ─┘  br0 ─ inner ═ lan0 [r1] wan0 ─┘  br0 ─ inner ═ lan0 [r2] wan0 ── b
//! ```
//!
//! Every router namespace `{label}-r{i}` joins its upstream port `uplink` and its background
//! port `bg` in a kernel bridge `br0` (no queue: veth and the bridge forward at once), whose
//! third port `inner` is one end of a veth pair inside the namespace; the router proper
//! forwards between the other end, `lan0`, and `wan0` towards the next router (or host B).
//! So the router's outgoing interface `wan0` carries the upstream traffic and its own
//! background, as in the seed, and whatever forwards `lan0` ↔ `wan0` (weir's bridge, or a
//! kernel bridge with a qdisc on `wan0`: [`ChainTopo::with_kernel_routers`]) is where the
//! queue builds. Until then nothing passes.
//!
//! All hosts share one /24: A 10.78.0.1, B 10.78.0.2, background host `c{i}` 10.78.0.(10+i).
//! Router namespaces have IPv6 disabled and no addresses, so they send nothing of their own.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::link::{add_addr, link_veth, set_up, wait_link_up};
use super::netns::Netns;
use super::place::{DutPlace, KernelBridge};
use crate::{Error, Result};

/// Seed 004's chain of routers with a background host per router.
#[derive(Debug)]
pub struct ChainTopo {
    /// Host A, the measured sender.
    pub a: Netns,
    /// Host B, the receiver of everything.
    pub b: Netns,
    /// The routers, ingress first.
    pub routers: Vec<Netns>,
    /// The background host of each router.
    pub background: Vec<Netns>,
    /// Each router's kernel bridge `br1` over `lan0` and `wan0` (the kernel peer's
    /// forwarding, whose queue is the qdisc on `wan0`), when made.
    kernel: Vec<KernelBridge>,
}

impl ChainTopo {
    /// Host A's address.
    pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
    /// Host B's address.
    pub const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
    /// The router side of each router: weir's (or the kernel's) ports.
    pub const LAN: &'static str = "lan0";
    pub const WAN: &'static str = "wan0";
    /// Most routers.
    pub const MAX_ROUTERS: usize = 8;
    const LINK_UP_TIMEOUT: Duration = Duration::from_secs(3);

    /// The address of background host `i`.
    pub fn background_addr(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 78, 0, 10 + i as u8)
    }

    /// Creates the namespaces (`{label}-a`, `-b`, `-r{i}`, `-c{i}`), links and addresses for
    /// `routers` routers (1..=[`Self::MAX_ROUTERS`]); returns once every interface is up.
    /// On error, whatever was made is removed (the namespaces are dropped).
    pub fn new(label: &str, routers: usize) -> Result<ChainTopo> {
        if !(1..=Self::MAX_ROUTERS).contains(&routers) {
            return Err(Error::Invalid(format!(
                "a chain of {routers} routers: expected 1 to {}",
                Self::MAX_ROUTERS
            )));
        }
        let a = Netns::new(&format!("{label}-a"))?;
        let b = Netns::new(&format!("{label}-b"))?;
        let routers = (0..routers)
            .map(|i| Netns::new(&format!("{label}-r{i}")))
            .collect::<Result<Vec<_>>>()?;
        let background = (0..routers.len())
            .map(|i| Netns::new(&format!("{label}-c{i}")))
            .collect::<Result<Vec<_>>>()?;
        let kernel = routers.iter().map(|_| KernelBridge::new("br1")).collect();
        let t = ChainTopo {
            a,
            b,
            routers,
            background,
            kernel,
        };
        t.build()?;
        Ok(t)
    }

    fn build(&self) -> Result<()> {
        for r in &self.routers {
            // before the veths exist, so they are born without IPv6
            r.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
            r.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        }
        let n = self.routers.len();
        link_veth(&self.a, "eth0", &self.routers[0], "uplink")?;
        for (i, r) in self.routers.iter().enumerate() {
            link_veth(&self.background[i], "eth0", r, "bg")?;
            link_veth(r, "inner", r, Self::LAN)?;
            if i + 1 < n {
                link_veth(r, Self::WAN, &self.routers[i + 1], "uplink")?;
            } else {
                link_veth(r, Self::WAN, &self.b, "eth0")?;
            }
            r.ip_batch(&[
                "link add br0 type bridge stp_state 0 forward_delay 0".to_string(),
                "link set dev uplink master br0".into(),
                "link set dev bg master br0".into(),
                "link set dev inner master br0".into(),
            ])?;
            for ifname in ["uplink", "bg", "inner", Self::LAN, Self::WAN, "br0"] {
                set_up(r, ifname)?;
            }
        }
        add_addr(&self.a, "eth0", &format!("{}/24", Self::A_ADDR))?;
        add_addr(&self.b, "eth0", &format!("{}/24", Self::B_ADDR))?;
        for (i, c) in self.background.iter().enumerate() {
            add_addr(c, "eth0", &format!("{}/24", Self::background_addr(i)))?;
        }
        for ns in self.hosts() {
            set_up(ns, "eth0")?;
        }
        // a veth end has carrier only once its peer is up: wait after all are up
        for ns in self.hosts() {
            wait_link_up(ns, "eth0", Self::LINK_UP_TIMEOUT)?;
        }
        for r in &self.routers {
            for ifname in ["uplink", "bg", "inner", Self::LAN, Self::WAN, "br0"] {
                wait_link_up(r, ifname, Self::LINK_UP_TIMEOUT)?;
            }
        }
        Ok(())
    }

    /// Hosts A, B and the background hosts.
    pub fn hosts(&self) -> impl Iterator<Item = &Netns> {
        [&self.a, &self.b].into_iter().chain(&self.background)
    }

    /// Every namespace's name.
    pub fn namespace_names(&self) -> Vec<String> {
        self.hosts()
            .chain(&self.routers)
            .map(|n| n.name().to_string())
            .collect()
    }

    /// Where router `i` runs: its namespace, `lan0` and `wan0`, and its kernel bridge
    /// `br1` for the kernel peer.
    pub fn router_place(&self, i: usize) -> DutPlace<'_> {
        DutPlace::new(&self.routers[i], Self::LAN, Self::WAN, &self.kernel[i])
    }
}
