//! Labs on real hosts: the hosts are machines reached over SSH, the DUT is this machine
//! between two of its interfaces or a device the lab does not touch (seed 000's testbed of
//! PCs around a hardware box).
//!
//! | file | what |
//! |---|---|
//! | `wire.rs` | the agent protocol: JSON lines on the SSH channel |
//! | `serve.rs` | [`serve`]: `weir agent`, the far end; undoes its changes when the channel ends |
//! | `ssh.rs` | [`SshHost`]: one `ssh … weir agent` per host, calls by id, failures named by host |
//! | `host.rs` | [`Host`]: a namespace here or a host there, one API for the labs; [`Agent`] handles |
//! | `topology.rs` | [`Topology`]: the file naming the hosts, their interfaces and the DUT |
//!
//! No authentication or transport of weir's own: the system's `ssh` with the user's keys,
//! agent, `~/.ssh/config` and `known_hosts`. Agents run on the remote host from the same
//! code as in namespaces. Clocks are compared by an NTP-style exchange on the channel
//! ([`SshHost::clock_offset`]); a lab that needs one-way delays refuses hosts whose offset
//! it cannot bound tightly enough.

mod host;
mod serve;
mod ssh;
mod topology;
pub mod wire;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use host::{Agent, Host, LocalAgent};
pub use serve::{serve, IDLE_TIMEOUT};
pub use ssh::{ClockOffset, SshHost, SshTarget, ONE_WAY_BOUND_MS};
pub use topology::{TopoDut, TopoHost, TopoRouter, Topology};

use crate::topo::{DutPlace, LocalChain, LocalDut, LocalWan, WanPlace};
use crate::{Error, Result};

/// How many `clock` exchanges estimate a host's offset.
const CLOCK_EXCHANGES: usize = 8;

/// What a lab learned about a remote host when it connected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The topology's name (role).
    pub name: String,
    /// `ssh` target.
    pub ssh: String,
    /// The host's own name.
    pub hostname: String,
    /// weir's version there.
    pub version: String,
    /// Its clock against this machine's.
    pub clock: ClockOffset,
}

impl HostInfo {
    /// One line for a report: `host NAME: SSH (HOSTNAME), weir VERSION, clock ±`.
    pub fn line(&self) -> String {
        format!(
            "host {}: {} ({}), weir {}, clock {:+.3} ms ± {:.3} ms",
            self.name,
            self.ssh,
            self.hostname,
            self.version,
            self.clock.offset_ms,
            self.clock.uncertainty_ms
        )
    }
}

/// A topology's hosts, connected, and its DUT place.
#[derive(Debug)]
pub struct RemoteBed {
    topology: Topology,
    hosts: BTreeMap<String, SshHost>,
    dut: Option<LocalDut>,
    wan: Option<LocalWan>,
    /// A chain's routers on this machine (`[[router]]`).
    chain: Option<Box<LocalChain>>,
    info: Vec<HostInfo>,
}

impl RemoteBed {
    /// Connects to every host of `t` at once; checks each test interface exists there and
    /// brings it up; estimates the clocks. On an error, the hosts already reached are
    /// released (their agents undo what they did).
    pub fn connect(t: &Topology) -> Result<RemoteBed> {
        let (dut, chain) =
            match &t.dut {
                TopoDut::Local { lan, wan } => (
                    Some(LocalDut::new(lan, wan).map_err(|e| {
                        Error::Invalid(format!("{}: [dut]: {}", t.file, e.message()))
                    })?),
                    None,
                ),
                TopoDut::External => (None, None),
                TopoDut::Chain { routers } => {
                    let r: Vec<_> = routers
                        .iter()
                        .map(|r| (r.lan.clone(), r.wan.clone(), r.background.clone()))
                        .collect();
                    let c = LocalChain::new(&r).map_err(|e| {
                        Error::Invalid(format!("{}: [[router]]: {}", t.file, e.message()))
                    })?;
                    (None, Some(Box::new(c)))
                }
            };
        let wan = match &t.wan {
            Some(w) => Some(
                LocalWan::new(&w.lan, &w.wan)
                    .map_err(|e| Error::Invalid(format!("{}: [wan]: {}", t.file, e.message())))?,
            ),
            None => None,
        };
        let connected: Vec<(String, Result<SshHost>)> = std::thread::scope(|sc| {
            let hs: Vec<_> = t
                .hosts
                .iter()
                .map(|(name, h)| {
                    (
                        name.clone(),
                        sc.spawn(move || SshHost::connect(name, &h.target)),
                    )
                })
                .collect();
            hs.into_iter()
                .map(|(name, h)| {
                    let r = h.join().unwrap_or_else(|_| {
                        Err(Error::Invalid(format!("{name}: connect panicked")))
                    });
                    (name, r)
                })
                .collect()
        });
        let mut hosts = BTreeMap::new();
        let mut first_err = None;
        for (name, r) in connected {
            match r {
                Ok(h) => {
                    hosts.insert(name, h);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let mut info = Vec::new();
        for (name, h) in &hosts {
            let th = &t.hosts[name];
            h.call(wire::Op::LinkUp {
                ifname: th.interface.clone(),
            })
            .map_err(|e| {
                Error::Invalid(format!(
                    "{}: [hosts.{name}] interface {} on {}: {}",
                    th.interface_at,
                    th.interface,
                    th.target.ssh,
                    e.message()
                ))
            })?;
            info.push(HostInfo {
                name: name.clone(),
                ssh: th.target.ssh.clone(),
                hostname: h.hello().hostname.clone(),
                version: h.hello().version.clone(),
                clock: h.clock_offset(CLOCK_EXCHANGES)?,
            });
        }
        Ok(RemoteBed {
            topology: t.clone(),
            hosts,
            dut,
            wan,
            chain,
            info,
        })
    }

    /// The host called `name` in the topology.
    pub fn host(&self, name: &str) -> Result<Host<'_>> {
        self.hosts
            .get(name)
            .map(Host::Remote)
            .ok_or_else(|| Error::Invalid(format!("{}: no host {name}", self.topology.file)))
    }

    /// Host `name`'s test interface.
    pub fn interface(&self, name: &str) -> Result<&str> {
        self.topology
            .hosts
            .get(name)
            .map(|h| h.interface.as_str())
            .ok_or_else(|| Error::Invalid(format!("{}: no host {name}", self.topology.file)))
    }

    /// Where DUTs run (`None`: an external DUT).
    pub fn dut_place(&self) -> Option<DutPlace<'_>> {
        self.dut.as_ref().map(LocalDut::place)
    }

    /// Where router `i` of the topology's chain runs (`None`: no such router).
    pub fn router_place(&self, i: usize) -> Option<DutPlace<'_>> {
        self.chain
            .as_ref()
            .filter(|c| i < c.len())
            .map(|c| c.place(i))
    }

    /// Where the WAN stage runs: the topology's `[wan]` on this machine, if it has one.
    pub fn wan_place(&self) -> Option<WanPlace<'_>> {
        self.wan.as_ref().map(LocalWan::place)
    }

    /// The first host whose agent has ended, as the error that says why (`None`: all
    /// alive).
    pub fn dead_host(&self) -> Option<Error> {
        self.hosts
            .values()
            .find(|h| !h.is_alive())
            .map(SshHost::gone)
    }

    /// Host `name`'s clock offset from this machine's, as estimated when it connected.
    pub fn clock(&self, name: &str) -> Option<ClockOffset> {
        self.info.iter().find(|h| h.name == name).map(|h| h.clock)
    }

    /// What each host said and its clock offset, by name.
    pub fn info(&self) -> &[HostInfo] {
        &self.info
    }
}
