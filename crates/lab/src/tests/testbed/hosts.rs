//! The testbed's sender, receiver and DUT place for one run: three namespaces of this
//! machine ([`BridgeTopo`], the default) or the real hosts of a topology file
//! ([`RemoteBed`]: hosts `sender` and `receiver` over SSH, the DUT here between two
//! interfaces or external).
//!
//! On real hosts the run gives the test interfaces the testbed's addresses, as in
//! namespaces — the sender 10.77.0.1/24 and one /32 per session's source address, the
//! receiver 10.77.0.2/24 and a route back to each — so the policy's rules classify the
//! same sessions; the agents there take them away again when the run ends. Put the hosts'
//! test interfaces on a network of their own.

use std::net::Ipv4Addr;

use weir_io::ethtool::Offloads;

use super::Plan;
use crate::dut::RunningDut;
use crate::remote::{Host, HostInfo, RemoteBed, Topology};
use crate::topo::{BridgeTopo, DutPlace, WanPlace};
use crate::{Error, Result};

/// The host names a topology file gives the seed 000 testbed.
pub const HOSTS: [&str; 2] = ["sender", "receiver"];

/// What a run's testbed is made of, owned for the run.
pub(crate) enum Owned {
    Namespaces(BridgeTopo),
    /// The hosts and the names of the sending and the receiving side.
    Remote(RemoteBed, [&'static str; 2]),
}

/// The run's view of its testbed.
#[derive(Clone, Copy)]
pub(crate) struct Bed<'a> {
    pub snd: Host<'a>,
    pub rcv: Host<'a>,
    pub snd_if: &'a str,
    pub rcv_if: &'a str,
    /// Where DUTs run; `None`: an external DUT.
    pub place: Option<DutPlace<'a>>,
    /// Where the WAN stage runs, if the testbed has one.
    pub wan: Option<WanPlace<'a>>,
    /// The namespaces (`None` on real hosts).
    pub topo: Option<&'a BridgeTopo>,
}

impl Owned {
    /// A fresh testbed for one run: namespaces labelled `label` (with a WAN stage when
    /// `wan_stage`), or `topology` connected, its hosts `roles` (sending side first).
    pub fn new(
        topology: Option<&Topology>,
        roles: [&'static str; 2],
        label: &str,
        wan_stage: bool,
    ) -> Result<Owned> {
        match topology {
            Some(t) => Ok(Owned::Remote(RemoteBed::connect(t)?, roles)),
            None if wan_stage => Ok(Owned::Namespaces(BridgeTopo::with_wan_stage(label)?)),
            None => Ok(Owned::Namespaces(BridgeTopo::new(label)?)),
        }
    }

    pub fn bed(&self) -> Result<Bed<'_>> {
        Ok(match self {
            Owned::Namespaces(t) => Bed {
                snd: Host::Local(&t.snd),
                rcv: Host::Local(&t.rcv),
                snd_if: &t.snd_if,
                rcv_if: &t.rcv_if,
                place: Some(t.dut_place()),
                wan: t.wan_place(),
                topo: Some(t),
            },
            Owned::Remote(r, [snd, rcv]) => Bed {
                snd: r.host(snd)?,
                rcv: r.host(rcv)?,
                snd_if: r.interface(snd)?,
                rcv_if: r.interface(rcv)?,
                place: r.dut_place(),
                wan: r.wan_place(),
                topo: None,
            },
        })
    }

    /// A real host whose agent has ended, as the error that says why.
    pub fn dead_host(&self) -> Option<Error> {
        match self {
            Owned::Namespaces(_) => None,
            Owned::Remote(r, _) => r.dead_host(),
        }
    }

    /// The real hosts' names, versions and clock offsets (empty in namespaces).
    pub fn host_info(&self) -> Vec<HostInfo> {
        match self {
            Owned::Namespaces(_) => Vec::new(),
            Owned::Remote(r, _) => r.info().to_vec(),
        }
    }

    /// Still able to go on: no real host's agent has ended, and `running` (a DUT started
    /// here, `None` for an external one), named `name`, still runs.
    pub fn check_alive(&self, name: &str, running: Option<&RunningDut>) -> Result<()> {
        if let Some(e) = self.dead_host() {
            return Err(e);
        }
        match running {
            Some(r) if !r.is_running() => {
                Err(Error::Invalid(format!("{name} stopped during the test")))
            }
            _ => Ok(()),
        }
    }

    /// How far the receiving host's clock is ahead of the sending host's, ns, when `calls`
    /// (voice calls, judged by one-way delays) are none or the hosts' clocks allow them;
    /// otherwise the error that says `who` needs synchronised clocks.
    pub fn calls_clock(&self, calls: bool, who: &str) -> Result<i64> {
        let (ahead, one_way) = self.receiver_ahead();
        if calls && !one_way {
            return Err(Error::Invalid(format!(
                "{who}: voice calls are judged by one-way delays, and the hosts' clock \
                 offsets are not known within {} ms together ({}); synchronise their clocks \
                 (chrony, PTP)",
                crate::remote::ONE_WAY_BOUND_MS,
                self.host_info()
                    .iter()
                    .map(crate::remote::HostInfo::line)
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        Ok(ahead)
    }

    /// How far the receiving host's clock is ahead of the sending host's, ns, and whether
    /// their offsets are known well enough for one-way delays (the two bounds summing to
    /// at most [`ONE_WAY_BOUND_MS`](crate::remote::ONE_WAY_BOUND_MS)); `(0, true)` in namespaces (one clock).
    pub fn receiver_ahead(&self) -> (i64, bool) {
        let Owned::Remote(r, [snd, rcv]) = self else {
            return (0, true);
        };
        match (r.clock(snd), r.clock(rcv)) {
            (Some(s), Some(c)) => (
                ((c.offset_ms - s.offset_ms) * 1e6) as i64,
                s.one_way_with(&c),
            ),
            _ => (0, false),
        }
    }
}

impl<'a> Bed<'a> {
    /// The hosts as a seed 000 plan wants them: no segmentation offload (wire-size frames
    /// through the DUT), the plan's TCP options, its minimum RTO, every session's source
    /// address.
    pub fn prepare(&self, plan: &Plan, srcs: &[Ipv4Addr]) -> Result<()> {
        for (h, ifname) in [(self.snd, self.snd_if), (self.rcv, self.rcv_if)] {
            h.set_offloads(ifname, &Offloads::SEGMENTATION_OFF)?;
            h.set_tcp_options(plan.tcp.sack, plan.tcp.timestamps, plan.tcp.window_scaling)?;
        }
        self.address(srcs)?;
        // on the sender's route to the receiver (its prefix route, made by the address)
        if let Some(rto) = plan.tcp.min_rto_ms {
            self.snd.set_rto_min("10.77.0.0/24", self.snd_if, rto)?;
        }
        Ok(())
    }

    /// The testbed's addresses: in namespaces the sender's extra source addresses `srcs`
    /// (the main ones exist); on real hosts also the main ones, the sender's 10.77.0.1/24
    /// and the receiver's 10.77.0.2/24, on their test interfaces. Each of `srcs` is a /32
    /// on the sender's interface with a route back at the receiver.
    pub fn address(&self, srcs: &[Ipv4Addr]) -> Result<()> {
        match (self.topo, self.snd, self.rcv) {
            (Some(topo), _, _) => topo.add_sender_addrs(srcs),
            (None, Host::Remote(snd), Host::Remote(rcv)) => {
                addr_add(snd, self.snd_if, format!("{}/24", BridgeTopo::SND_ADDR))?;
                addr_add(rcv, self.rcv_if, format!("{}/24", BridgeTopo::RCV_ADDR))?;
                for a in srcs {
                    addr_add(snd, self.snd_if, format!("{a}/32"))?;
                    rcv.call(crate::remote::wire::Op::RouteAdd {
                        dst: format!("{a}/32"),
                        ifname: self.rcv_if.into(),
                        rto_min_ms: None,
                    })?;
                }
                Ok(())
            }
            _ => Err(mixed()),
        }
    }

    /// One more address (`CIDR`) on the receiver's test interface.
    pub fn receiver_addr(&self, cidr: &str) -> Result<()> {
        match (self.topo, self.rcv) {
            (Some(topo), _) => crate::topo::add_addr(&topo.rcv, &topo.rcv_if, cidr),
            (None, Host::Remote(rcv)) => addr_add(rcv, self.rcv_if, cidr.to_string()),
            _ => Err(mixed()),
        }
    }
}

fn mixed() -> Error {
    Error::Invalid("a testbed of namespaces and real hosts mixed".into())
}

/// `ip addr add CIDR dev IFNAME` on a remote host (removed when its session ends).
pub(crate) fn addr_add(h: &crate::remote::SshHost, ifname: &str, cidr: String) -> Result<()> {
    h.call(crate::remote::wire::Op::AddrAdd {
        ifname: ifname.into(),
        cidr: cidr.clone(),
    })
    .map(drop)
    .map_err(|e| {
        Error::Invalid(format!(
            "{}: address {cidr} on {ifname}: {}",
            h.name(),
            e.message()
        ))
    })
}

/// What a plan asks of real hosts that the topology cannot give: refused before anything
/// connects. A WAN stage (per-session delays or loss, a serial line) and a second router
/// (which runs there) need the topology's `[wan]`.
pub(crate) fn check_remote(plan: &Plan, t: &Topology) -> Result<()> {
    if t.wan.is_some() {
        return Ok(());
    }
    let needs = if plan.stage_policy.is_some() {
        "a second router"
    } else if plan.sessions.iter().any(|s| s.wan.is_some()) || plan.line_bps.is_some() {
        "a WAN stage"
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "plan '{}' needs {needs}, and the topology {} has no [wan]: name two interfaces of \
         this machine between the DUT and the receiver (`[wan] lan = \"…\"`, `wan = \"…\"`)",
        plan.name, t.file
    )))
}

/// The DUT list fits the topology: `external` exactly when its `[dut]` is external (never
/// in namespaces, `None`).
pub fn check_duts(t: Option<&Topology>, duts: &[String]) -> Result<()> {
    let Some(t) = t else {
        for d in duts {
            crate::dut::in_namespaces(crate::dut::DutSpec::parse(d)?)?;
        }
        return Ok(());
    };
    let external = matches!(t.dut, crate::remote::TopoDut::External);
    for d in duts {
        if (d == "external") != external {
            return Err(Error::Invalid(if external {
                format!(
                    "--dut {d}: the DUT of {} is external (`[dut] external = true`), a device \
                     the lab does not configure: run with --dut external",
                    t.file
                )
            } else {
                format!(
                    "--dut external: {} names the DUT's interfaces on this machine ([dut] lan, \
                     wan); `external` is for `[dut] external = true`",
                    t.file
                )
            }));
        }
    }
    Ok(())
}
