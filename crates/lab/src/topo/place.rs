//! Where a device under test runs: a network namespace and the two ports it forwards
//! between (`lan` faces the sender, `wan` the receiver).
//!
//! - [`DutPlace`]: a borrowed view, what the DUTs (`crate::dut`) are started on. A
//!   namespace testbed gives its DUT namespace's `lan0`/`wan0`
//!   ([`BridgeTopo::dut_place`](super::BridgeTopo::dut_place)); a testbed of real hosts
//!   gives two interfaces of the machine the lab runs on ([`LocalDut`]).
//! - [`KernelBridge`]: the Linux bridge over the two ports that the `kernel:*` DUTs forward
//!   with. In a testbed namespace it is `br0`; on a real machine `weirlab0`, so that it
//!   never meets a bridge of the machine's own.

use std::sync::Mutex;

use super::link::wait_link_up;
use super::Netns;
use crate::{Error, Result};

/// How long to wait for the kernel bridge to come up.
const BRIDGE_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The Linux bridge a `kernel:*` DUT forwards with: its name and whether it is up.
#[derive(Debug)]
pub struct KernelBridge {
    name: &'static str,
    on: Mutex<bool>,
}

impl KernelBridge {
    /// A bridge called `name`, not yet made.
    pub(crate) const fn new(name: &'static str) -> KernelBridge {
        KernelBridge {
            name,
            on: Mutex::new(false),
        }
    }
}

/// A DUT's namespace and ports (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct DutPlace<'a> {
    /// The namespace the DUT runs in.
    pub ns: &'a Netns,
    /// The port facing the sender.
    pub lan: &'a str,
    /// The port facing the receiver.
    pub wan: &'a str,
    bridge: &'a KernelBridge,
}

impl<'a> DutPlace<'a> {
    pub(crate) fn new(
        ns: &'a Netns,
        lan: &'a str,
        wan: &'a str,
        bridge: &'a KernelBridge,
    ) -> DutPlace<'a> {
        DutPlace {
            ns,
            lan,
            wan,
            bridge,
        }
    }

    /// The kernel bridge's name.
    pub fn bridge_name(&self) -> &'static str {
        self.bridge.name
    }

    /// Makes the DUT a plain Linux bridge over its two ports (STP off, forward delay 0),
    /// the baseline to compare a DUT with. Idempotent.
    pub fn with_kernel_bridge(&self) -> Result<()> {
        let mut on = self.bridge.on.lock().unwrap_or_else(|e| e.into_inner());
        if *on {
            return Ok(());
        }
        let br = self.bridge.name;
        self.ns.ip_batch(&[
            format!("link add {br} type bridge stp_state 0 forward_delay 0"),
            format!("link set dev {} master {br}", self.lan),
            format!("link set dev {} master {br}", self.wan),
            format!("link set dev {br} up"),
        ])?;
        *on = true;
        wait_link_up(self.ns, br, BRIDGE_UP_TIMEOUT)
    }

    /// Removes the kernel bridge again (the ports stay up, unbridged).
    pub fn without_kernel_bridge(&self) -> Result<()> {
        let mut on = self.bridge.on.lock().unwrap_or_else(|e| e.into_inner());
        if !*on {
            return Ok(());
        }
        self.ns.ip(&["link", "del", "dev", self.bridge.name])?;
        *on = false;
        Ok(())
    }
}

/// A DUT on the machine the lab runs on, between two of its interfaces (a testbed of real
/// hosts, `crate::remote`). Dropping it removes the kernel bridge if one is still up.
#[derive(Debug)]
pub struct LocalDut {
    ns: Netns,
    lan: String,
    wan: String,
    bridge: KernelBridge,
}

impl LocalDut {
    /// The bridge name on a real machine.
    pub const KERNEL_BRIDGE: &'static str = "weirlab0";

    /// The DUT between `lan` and `wan` of this process's namespace; both must exist, and
    /// no interface may already be called [`LocalDut::KERNEL_BRIDGE`].
    pub fn new(lan: &str, wan: &str) -> Result<LocalDut> {
        for i in [lan, wan] {
            if !weir_io::ethtool::exists(i) {
                return Err(Error::Invalid(format!(
                    "the DUT's interface {i} does not exist on this machine"
                )));
            }
        }
        if lan == wan {
            return Err(Error::Invalid(format!(
                "the DUT's lan and wan are both {lan}: they must be two interfaces"
            )));
        }
        if weir_io::ethtool::exists(Self::KERNEL_BRIDGE) {
            return Err(Error::Invalid(format!(
                "an interface {} already exists on this machine (left by a lab that died? \
                 remove it: ip link del {})",
                Self::KERNEL_BRIDGE,
                Self::KERNEL_BRIDGE
            )));
        }
        Ok(LocalDut {
            ns: Netns::host()?,
            lan: lan.to_string(),
            wan: wan.to_string(),
            bridge: KernelBridge::new(Self::KERNEL_BRIDGE),
        })
    }

    /// Where the DUTs run.
    pub fn place(&self) -> DutPlace<'_> {
        DutPlace::new(&self.ns, &self.lan, &self.wan, &self.bridge)
    }
}

/// Where a WAN stage runs (`crate::tests::testbed::start_wan_stage`): a namespace and
/// its two ports, `lan` from the DUT and `wan` towards the receiver.
#[derive(Clone, Copy, Debug)]
pub struct WanPlace<'a> {
    pub ns: &'a Netns,
    pub lan: &'a str,
    pub wan: &'a str,
}

/// A WAN stage on the machine the lab runs on, between two of its interfaces (a testbed
/// of real hosts whose topology has a `[wan]`).
#[derive(Debug)]
pub struct LocalWan {
    ns: Netns,
    lan: String,
    wan: String,
}

impl LocalWan {
    /// The stage between `lan` and `wan` of this process's namespace; both must exist.
    pub fn new(lan: &str, wan: &str) -> Result<LocalWan> {
        for i in [lan, wan] {
            if !weir_io::ethtool::exists(i) {
                return Err(Error::Invalid(format!(
                    "the WAN stage's interface {i} does not exist on this machine"
                )));
            }
        }
        Ok(LocalWan {
            ns: Netns::host()?,
            lan: lan.to_string(),
            wan: wan.to_string(),
        })
    }

    pub fn place(&self) -> WanPlace<'_> {
        WanPlace {
            ns: &self.ns,
            lan: &self.lan,
            wan: &self.wan,
        }
    }
}

impl Drop for LocalDut {
    fn drop(&mut self) {
        let _ = self.place().without_kernel_bridge();
    }
}

/// A chain of routers on the machine the lab runs on (`weir lab diffserv` on real hosts:
/// a topology's `[[router]]` tables, ingress first). A router with a background
/// interface gets what the namespace chain has: a kernel bridge `weirmrgN` (no queue)
/// joining its `lan` and `background` with one end of a veth pair `weirinN` ↔
/// `weirlanN`, and forwards from `weirlanN` to its `wan`; without one it forwards from
/// `lan`. Dropping it removes what it made (the merge bridges, the veth pairs, a kernel
/// router's bridge `weirrtrN`).
#[derive(Debug)]
pub struct LocalChain {
    ns: Netns,
    /// Per router: the port it forwards from, and its `wan`.
    ports: Vec<(String, String)>,
    /// How many routers have a merge bridge (router `i` for each `i` in this list).
    merged: Vec<usize>,
    bridges: Vec<KernelBridge>,
}

/// Most routers a chain on this machine has.
const CHAIN_MAX: usize = 8;
/// Kernel router bridges' names (a [`KernelBridge`]'s name is static).
const ROUTER_BRIDGES: [&str; CHAIN_MAX] = [
    "weirrtr0", "weirrtr1", "weirrtr2", "weirrtr3", "weirrtr4", "weirrtr5", "weirrtr6", "weirrtr7",
];

impl LocalChain {
    /// The chain of `routers` (`(lan, wan, background)`, ingress first): every interface
    /// must exist, and none of the names the chain makes may.
    pub fn new(routers: &[(String, String, Option<String>)]) -> Result<LocalChain> {
        if routers.is_empty() || routers.len() > CHAIN_MAX {
            return Err(Error::Invalid(format!(
                "a chain of {} routers: expected 1 to {CHAIN_MAX}",
                routers.len()
            )));
        }
        for (i, (lan, wan, bg)) in routers.iter().enumerate() {
            for name in [Some(lan), Some(wan), bg.as_ref()].into_iter().flatten() {
                if !weir_io::ethtool::exists(name) {
                    return Err(Error::Invalid(format!(
                        "router {i}'s interface {name} does not exist on this machine"
                    )));
                }
            }
            for made in [
                format!("weirmrg{i}"),
                format!("weirin{i}"),
                format!("weirlan{i}"),
                ROUTER_BRIDGES[i].to_string(),
            ] {
                if weir_io::ethtool::exists(&made) {
                    return Err(Error::Invalid(format!(
                        "an interface {made} already exists on this machine (left by a lab \
                         that died? remove it: ip link del {made})"
                    )));
                }
            }
        }
        let mut chain = LocalChain {
            ns: Netns::host()?,
            ports: Vec::new(),
            merged: Vec::new(),
            bridges: (0..routers.len())
                .map(|i| KernelBridge::new(ROUTER_BRIDGES[i]))
                .collect(),
        };
        for (i, (lan, wan, bg)) in routers.iter().enumerate() {
            let Some(bg) = bg else {
                chain.ports.push((lan.clone(), wan.clone()));
                continue;
            };
            // recorded first: Drop removes whatever of it was made if a step fails
            chain.merged.push(i);
            let (mrg, inner, rlan) = (
                format!("weirmrg{i}"),
                format!("weirin{i}"),
                format!("weirlan{i}"),
            );
            chain.ns.ip_batch(&[
                format!("link add {inner} type veth peer name {rlan}"),
                format!("link add {mrg} type bridge stp_state 0 forward_delay 0"),
            ])?;
            // what the chain made sends nothing of its own
            for made in [&inner, &rlan, &mrg] {
                let _ = chain
                    .ns
                    .set_sysctl(&format!("net.ipv6.conf.{made}.disable_ipv6"), "1");
            }
            chain.ns.ip_batch(&[
                format!("link set dev {lan} master {mrg}"),
                format!("link set dev {bg} master {mrg}"),
                format!("link set dev {inner} master {mrg}"),
            ])?;
            for dev in [lan, bg, &inner, &rlan, &mrg, wan] {
                chain.ns.ip(&["link", "set", "dev", dev, "up"])?;
            }
            for dev in [&inner, &rlan, &mrg] {
                wait_link_up(&chain.ns, dev, BRIDGE_UP_TIMEOUT)?;
            }
            chain.ports.push((rlan, wan.clone()));
        }
        Ok(chain)
    }

    /// Where router `i` runs.
    pub fn place(&self, i: usize) -> DutPlace<'_> {
        let (lan, wan) = &self.ports[i];
        DutPlace::new(&self.ns, lan, wan, &self.bridges[i])
    }

    /// Routers in the chain.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }
}

impl Drop for LocalChain {
    fn drop(&mut self) {
        for i in 0..self.ports.len() {
            let _ = self.place(i).without_kernel_bridge();
        }
        for &i in &self.merged {
            // deleting the bridge releases its ports; deleting one veth end, the pair
            let _ = self.ns.ip(&["link", "del", "dev", &format!("weirmrg{i}")]);
            let _ = self.ns.ip(&["link", "del", "dev", &format!("weirin{i}")]);
        }
    }
}
