//! The ready-made topology for testing a transparent bridge (the device under test) between
//! a sender and a receiver on one L2 segment, optionally with a WAN-emulator stage.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::Duration;

use super::link::{add_addr, link_veth, set_up, wait_link_up};
use super::netns::Netns;
use super::place::{DutPlace, KernelBridge};
use crate::{Error, Result};

/// The testbed for a transparent bridge: three namespaces on one L2 segment.
///
/// ```text
///   snd (10.77.0.1/24)            dut (no addresses)            rcv (10.77.0.2/24)
///     eth0 ──────────────────── lan0        wan0 ──────────────────── eth0
/// ```
///
/// The DUT's interfaces are up, carry no addresses, and the DUT has IPv6 disabled
/// (`net.ipv6.conf.{all,default}.disable_ipv6=1`) so that it sends nothing of its own. Until a
/// DUT forwards between `lan0` and `wan0` (weir, or [`BridgeTopo::with_kernel_bridge`]), the
/// sender and the receiver cannot reach each other.
///
/// Source-address aliases ([`BridgeTopo::add_sender_aliases`]) live in further /24 subnets of
/// 10.77.0.0/16 on the same L2 segment: `10.77.S.H/24` on the sender with S = 1, 2, … and
/// H = 1..=253, and for every such subnet the receiver gets `10.77.S.254/24` — only so that it
/// has an on-link route back to the aliases. Sessions still connect to the receiver's main
/// address [`BridgeTopo::RCV_ADDR`] (10.77.0.2), binding their source to an alias.
#[derive(Debug)]
pub struct BridgeTopo {
    /// The sender host.
    pub snd: Netns,
    /// The device under test.
    pub dut: Netns,
    /// The receiver host.
    pub rcv: Netns,
    /// Sender interface (`eth0`).
    pub snd_if: String,
    /// DUT interface facing the sender (`lan0`).
    pub dut_lan: String,
    /// DUT interface facing the receiver (`wan0`).
    pub dut_wan: String,
    /// Receiver interface (`eth0`).
    pub rcv_if: String,
    /// The WAN-emulator stage between the DUT and the receiver, when made with
    /// [`BridgeTopo::with_wan_stage`]: `dut wan0 ── lan0 emu wan0 ── eth0 rcv`.
    pub emu: Option<Netns>,
    /// How many sender aliases exist so far.
    aliases: Mutex<usize>,
    /// The kernel bridge of the `kernel:*` DUTs.
    kernel_bridge: KernelBridge,
}

impl BridgeTopo {
    /// The sender's main address.
    pub const SND_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    /// The receiver's main address.
    pub const RCV_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    /// Name of the kernel bridge made by [`BridgeTopo::with_kernel_bridge`].
    pub const KERNEL_BRIDGE: &'static str = "br0";
    /// Most aliases [`BridgeTopo::add_sender_aliases`] can make (253 per /24, subnets 1..=254).
    pub const MAX_ALIASES: usize = 253 * 254;
    /// Longest wait for interfaces to come up.
    pub const LINK_UP_TIMEOUT: Duration = Duration::from_secs(3);

    /// Creates the three namespaces (`{label}-snd`, `{label}-dut`, `{label}-rcv`), the two veth
    /// pairs and the addresses; returns once every interface is operationally up. On error,
    /// whatever was made is removed.
    pub fn new(label: &str) -> Result<BridgeTopo> {
        Self::build(label, false)
    }

    /// Like [`BridgeTopo::new`], with a fourth namespace `{label}-emu` between the DUT and
    /// the receiver (seed 000's wan-emu position: the sink-side last hop). Its interfaces
    /// are `lan0` (towards the DUT) and `wan0` (towards the receiver); until something
    /// forwards there too (a weir emulator, or [`BridgeTopo::with_kernel_bridge_in_wan_stage`]),
    /// nothing passes.
    pub fn with_wan_stage(label: &str) -> Result<BridgeTopo> {
        Self::build(label, true)
    }

    fn build(label: &str, wan_stage: bool) -> Result<BridgeTopo> {
        let snd = Netns::new(&format!("{label}-snd"))?;
        let dut = Netns::new(&format!("{label}-dut"))?;
        let emu = if wan_stage {
            Some(Netns::new(&format!("{label}-emu"))?)
        } else {
            None
        };
        let rcv = Netns::new(&format!("{label}-rcv"))?;
        let topo = BridgeTopo {
            emu,
            snd,
            dut,
            rcv,
            snd_if: "eth0".into(),
            dut_lan: "lan0".into(),
            dut_wan: "wan0".into(),
            rcv_if: "eth0".into(),
            aliases: Mutex::new(0),
            kernel_bridge: KernelBridge::new(Self::KERNEL_BRIDGE),
        };
        // Before the veths exist, so they are born without IPv6.
        for ns in std::iter::once(&topo.dut).chain(topo.emu.as_ref()) {
            ns.set_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
            ns.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        }
        link_veth(&topo.snd, &topo.snd_if, &topo.dut, &topo.dut_lan)?;
        match &topo.emu {
            None => link_veth(&topo.dut, &topo.dut_wan, &topo.rcv, &topo.rcv_if)?,
            Some(emu) => {
                link_veth(&topo.dut, &topo.dut_wan, emu, "lan0")?;
                link_veth(emu, "wan0", &topo.rcv, &topo.rcv_if)?;
                set_up(emu, "lan0")?;
                set_up(emu, "wan0")?;
            }
        }
        add_addr(&topo.snd, &topo.snd_if, &format!("{}/24", Self::SND_ADDR))?;
        add_addr(&topo.rcv, &topo.rcv_if, &format!("{}/24", Self::RCV_ADDR))?;
        set_up(&topo.dut, &topo.dut_lan)?;
        set_up(&topo.dut, &topo.dut_wan)?;
        set_up(&topo.snd, &topo.snd_if)?;
        set_up(&topo.rcv, &topo.rcv_if)?;
        for (ns, ifname) in topo.interfaces() {
            wait_link_up(ns, ifname, Self::LINK_UP_TIMEOUT)?;
        }
        // a veth end has carrier only once its peer is up too: wait after all are up
        if let Some(emu) = &topo.emu {
            wait_link_up(emu, "lan0", Self::LINK_UP_TIMEOUT)?;
            wait_link_up(emu, "wan0", Self::LINK_UP_TIMEOUT)?;
        }
        Ok(topo)
    }

    /// The four veth ends at the hosts and the DUT, with their namespaces: sender, DUT LAN
    /// side, DUT WAN side, receiver (the WAN stage's ends are not included).
    pub fn interfaces(&self) -> [(&Netns, &str); 4] {
        [
            (&self.snd, self.snd_if.as_str()),
            (&self.dut, self.dut_lan.as_str()),
            (&self.dut, self.dut_wan.as_str()),
            (&self.rcv, self.rcv_if.as_str()),
        ]
    }

    /// The three namespaces' names.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut v = vec![self.snd.name().to_string(), self.dut.name().to_string()];
        if let Some(e) = &self.emu {
            v.push(e.name().to_string());
        }
        v.push(self.rcv.name().to_string());
        v
    }

    /// Adds `n` more source addresses to the sender (see the type's documentation for the
    /// plan) and returns them. Addresses are added in one `ip -batch` per namespace.
    pub fn add_sender_aliases(&self, n: usize) -> Result<Vec<IpAddr>> {
        let mut count = self.aliases.lock().unwrap_or_else(|e| e.into_inner());
        if *count + n > Self::MAX_ALIASES {
            return Err(Error::Invalid(format!(
                "{} aliases requested, at most {} possible",
                *count + n,
                Self::MAX_ALIASES
            )));
        }
        let mut addrs = Vec::with_capacity(n);
        let mut snd_cmds = Vec::with_capacity(n);
        let mut rcv_cmds = Vec::new();
        for i in *count..*count + n {
            let subnet = (1 + i / 253) as u8;
            let host = (1 + i % 253) as u8;
            if host == 1 {
                rcv_cmds.push(format!(
                    "addr add 10.77.{subnet}.254/24 dev {}",
                    self.rcv_if
                ));
            }
            snd_cmds.push(format!(
                "addr add 10.77.{subnet}.{host}/24 dev {}",
                self.snd_if
            ));
            addrs.push(IpAddr::V4(Ipv4Addr::new(10, 77, subnet, host)));
        }
        self.snd.ip_batch(&snd_cmds)?;
        self.rcv.ip_batch(&rcv_cmds)?;
        *count += n;
        Ok(addrs)
    }

    /// Where the DUTs run: the DUT namespace's `lan0` and `wan0`.
    pub fn dut_place(&self) -> DutPlace<'_> {
        DutPlace::new(&self.dut, &self.dut_lan, &self.dut_wan, &self.kernel_bridge)
    }

    /// Where the WAN stage runs, if this testbed has one ([`BridgeTopo::with_wan_stage`]).
    pub fn wan_place(&self) -> Option<super::WanPlace<'_>> {
        self.emu.as_ref().map(|ns| super::WanPlace {
            ns,
            lan: "lan0",
            wan: "wan0",
        })
    }

    /// Makes the DUT a plain Linux bridge (`br0` with `lan0` and `wan0` as ports, STP off,
    /// forward delay 0), the baseline to compare a DUT with. Idempotent.
    pub fn with_kernel_bridge(&self) -> Result<()> {
        self.dut_place().with_kernel_bridge()
    }

    /// Makes the WAN stage a plain kernel bridge (`br0` over its `lan0` and `wan0`): the
    /// stage forwards without impairment. An error without a WAN stage.
    pub fn with_kernel_bridge_in_wan_stage(&self) -> Result<()> {
        let emu = self
            .emu
            .as_ref()
            .ok_or_else(|| Error::Invalid("this topology has no WAN stage".into()))?;
        let br = Self::KERNEL_BRIDGE;
        emu.ip_batch(&[
            format!("link add {br} type bridge stp_state 0 forward_delay 0"),
            format!("link set dev lan0 master {br}"),
            format!("link set dev wan0 master {br}"),
            format!("link set dev {br} up"),
        ])?;
        wait_link_up(emu, br, Self::LINK_UP_TIMEOUT)
    }

    /// Gives the sender the addresses `addrs` (as /32s on its interface) and the receiver an
    /// on-link route back to each, so that sessions can bind to them whatever subnet a
    /// policy's rules expect (seed 000's IP aliasing). Addresses already present are an
    /// error from `ip`.
    pub fn add_sender_addrs(&self, addrs: &[Ipv4Addr]) -> Result<()> {
        if addrs.is_empty() {
            return Ok(());
        }
        let snd: Vec<String> = addrs
            .iter()
            .map(|a| format!("addr add {a}/32 dev {}", self.snd_if))
            .collect();
        let rcv: Vec<String> = addrs
            .iter()
            .map(|a| format!("route add {a}/32 dev {}", self.rcv_if))
            .collect();
        self.snd.ip_batch(&snd)?;
        self.rcv.ip_batch(&rcv)
    }

    /// Removes the kernel bridge again (the DUT interfaces stay up, unbridged).
    pub fn without_kernel_bridge(&self) -> Result<()> {
        self.dut_place().without_kernel_bridge()
    }
}
