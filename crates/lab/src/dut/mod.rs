//! Devices under test (DUTs): what forwards between the testbed's `lan0` and `wan0` in the
//! DUT namespace of a [`BridgeTopo`](crate::topo::BridgeTopo), and how a weir [`Policy`] is given to it.
//!
//! | spec | what runs |
//! |---|---|
//! | `weir:cbq`, `weir:cbq+red`, `weir:cbq+pfq`, `weir:cbq+pfq+red`, `weir:tcr`, `weir:cbq+tcr`, `weir:cbq+pfq+tcr` | weir's own bridge ([`weir_io::bridge::Bridge`]) on a thread in the DUT namespace, with the policy under that technique preset (`Policy::with_technique`), its `Device` (`Policy::build_device`: one pipeline per direction) |
//! | any of these `+mssN`, e.g. `weir:cbq+pfq+mss256` | as above, and every TCP connection's SYN and SYN-ACK clamped to an MSS of N bytes (`Policy::with_mss`: seed 000's Sitara QoSWorks on the VoIP test) |
//! | `kernel:bridge` | the Linux bridge `br0` over `lan0` + `wan0` and nothing else: the qdiscs stay as they are (a veth's default, `noqueue`); the policy is ignored — the baseline of a device that forwards and does not shape |
//! | `kernel:htb` | the Linux bridge `br0` over `lan0` + `wan0` ([`BridgeTopo::with_kernel_bridge`](crate::topo::BridgeTopo::with_kernel_bridge)) and an HTB tree translated from the policy on the egress device(s) |
//! | `kernel:htb-perflow` | as `kernel:htb`, and every leaf that the listed [`Session`]s classify into gets one HTB child class per session: the closest the kernel comes to a per-session guarantee |
//! | `cmd:/path/script` | any script that makes the DUT forward (see `script.rs`) |
//!
//! [`start`] starts one, [`start_weir_as_written`] starts weir's bridge with a policy exactly
//! as its file says (its own `technique`, no preset forced: the labs that generate a policy
//! per device), [`RunningDut::stop`] stops it and returns a [`DutReport`] that says
//! exactly what ran (the preset and compiled policy, the full `tc` command list, or the
//! script with its output) and its counters (weir's `BridgeReport`, or `tc -s` statistics
//! as JSON).
//!
//! [`htb_commands`] (`htb.rs`) translates a policy into the kernel's HTB; `tc.rs` runs `tc`
//! and parses its statistics ([`parse_tc_classes`]); `weir.rs` runs weir's bridge on a
//! thread ([`BridgeThread`]); `kernel.rs` and `script.rs` start and stop the `kernel:*` and
//! `cmd:` DUTs.
//!
//! # Cleanup
//!
//! Stopping or dropping a [`RunningDut`] (also while unwinding from a panic) undoes what
//! [`start`] did: weir's thread is stopped and joined (the bridge restores the offloads it
//! turned off); `kernel:*` deletes the root qdiscs of `lan0` and `wan0` and removes `br0`;
//! `cmd:` runs the script's `stop`, then deletes the root qdiscs and takes `lan0` and `wan0`
//! out of any bridge. Errors during cleanup are ignored on drop and listed in the report on
//! stop. A failed [`start`] cleans up before it returns.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;
use weir_core::classify::Fields;
use weir_core::policy::{Policy, Technique};

use crate::topo::{DutPlace, Netns};
use crate::{Error, Result};

mod htb;
mod kernel;
mod script;
mod tc;
mod weir;

pub use htb::{htb_commands, port_blocks, MAX_FILTERS_PER_RULE};
pub use script::SCRIPT_TIMEOUT;
pub use tc::parse_tc_classes;
pub use weir::bridge_config;
pub(crate) use weir::stop as stop_bridge;
pub use weir::BridgeThread;

// ---------------------------------------------------------------------------------------
// Specs

/// Which device forwards between `lan0` and `wan0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DutSpec {
    /// weir's bridge with the policy under this technique preset and, when given, every
    /// TCP connection clamped to this MSS (bytes of payload).
    Weir(Technique, Option<u16>),
    /// The Linux bridge alone: forwards, shapes nothing.
    KernelBridge,
    /// The Linux bridge with an HTB tree translated from the policy.
    KernelHtb,
    /// As [`DutSpec::KernelHtb`], plus one HTB child class per session in each leaf.
    KernelHtbPerFlow,
    /// A script that sets the DUT up (see the module documentation for its contract).
    Cmd(PathBuf),
    /// A device the lab does not configure, between real hosts (a topology file's
    /// `[dut] external = true`): nothing is started or stopped, nothing is counted.
    External,
}

impl DutSpec {
    /// The accepted forms, for messages.
    pub fn valid_forms() -> String {
        let mut forms: Vec<String> = Technique::ALL
            .iter()
            .map(|t| format!("weir:{}", t.name()))
            .collect();
        forms.push("weir:TECHNIQUE+mssN (e.g. weir:cbq+pfq+mss256)".into());
        forms.push("kernel:bridge".into());
        forms.push("kernel:htb".into());
        forms.push("kernel:htb-perflow".into());
        forms.push("cmd:/path/to/script".into());
        forms.push("external (with a topology file)".into());
        forms.join(", ")
    }

    /// Parses `weir:TECHNIQUE[+mssN]`, `kernel:bridge`, `kernel:htb`, `kernel:htb-perflow` or
    /// `cmd:PATH`, or `external`.
    pub fn parse(s: &str) -> Result<DutSpec> {
        if s == "external" {
            return Ok(DutSpec::External);
        }
        let bad = |why: String| {
            Error::Invalid(format!(
                "DUT {s:?}: {why}; expected one of: {}",
                Self::valid_forms()
            ))
        };
        let (kind, arg) = s
            .split_once(':')
            .ok_or_else(|| bad("missing ':' between kind and argument".into()))?;
        match kind {
            "weir" => {
                let (tech, mss) = split_mss(arg).map_err(bad)?;
                Technique::parse(tech)
                    .map(|t| DutSpec::Weir(t, mss))
                    .ok_or_else(|| bad(format!("unknown weir technique '{tech}'")))
            }
            "kernel" => match arg {
                "bridge" => Ok(DutSpec::KernelBridge),
                "htb" => Ok(DutSpec::KernelHtb),
                "htb-perflow" => Ok(DutSpec::KernelHtbPerFlow),
                _ => Err(bad(format!("unknown kernel DUT '{arg}'"))),
            },
            "cmd" if arg.trim().is_empty() => Err(bad("cmd: needs a script path".into())),
            "cmd" => Ok(DutSpec::Cmd(PathBuf::from(arg))),
            _ => Err(bad(format!("unknown DUT kind '{kind}'"))),
        }
    }

    /// The spec as it is written (`weir:cbq+pfq`, `kernel:htb`, `cmd:/x/y`).
    pub fn name(&self) -> String {
        match self {
            DutSpec::Weir(t, None) => format!("weir:{}", t.name()),
            DutSpec::Weir(t, Some(m)) => format!("weir:{}+mss{m}", t.name()),
            DutSpec::KernelBridge => "kernel:bridge".into(),
            DutSpec::KernelHtb => "kernel:htb".into(),
            DutSpec::KernelHtbPerFlow => "kernel:htb-perflow".into(),
            DutSpec::Cmd(p) => format!("cmd:{}", p.display()),
            DutSpec::External => "external".into(),
        }
    }
}

/// Splits a trailing `+mssN` off a weir DUT's argument: `cbq+pfq+mss256` is
/// (`cbq+pfq`, 256). N must be an MSS the policy language accepts.
fn split_mss(arg: &str) -> std::result::Result<(&str, Option<u16>), String> {
    use weir_core::tcp::mss::{MAX_MSS, MIN_MSS};
    let Some((tech, last)) = arg.rsplit_once('+') else {
        return Ok((arg, None));
    };
    let Some(n) = last.strip_prefix("mss") else {
        return Ok((arg, None));
    };
    match n.parse::<u16>() {
        Ok(m) if (MIN_MSS..=MAX_MSS).contains(&m) => Ok((tech, Some(m))),
        _ => Err(format!(
            "'+{last}': expected +mssN with N bytes of TCP payload in {MIN_MSS}..={MAX_MSS}"
        )),
    }
}

impl fmt::Display for DutSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for DutSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<DutSpec> {
        DutSpec::parse(s)
    }
}

// ---------------------------------------------------------------------------------------
// Setup and report

/// One session of a test, as `kernel:htb-perflow` needs it: a port of 0 means "any".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Session {
    /// The sender's end (sender alias, source port or 0).
    pub src: SocketAddr,
    /// The receiver's end.
    pub dst: SocketAddr,
    /// IP protocol (6 = TCP, 17 = UDP).
    pub proto: u8,
}

impl Session {
    /// A TCP session from `src` to `dst`.
    pub fn tcp(src: SocketAddr, dst: SocketAddr) -> Session {
        Session { src, dst, proto: 6 }
    }

    /// The same session seen from the other end.
    pub fn reversed(&self) -> Session {
        Session {
            src: self.dst,
            dst: self.src,
            proto: self.proto,
        }
    }

    /// What weir's classifier sees in a packet of this session (ports of 0 unknown).
    pub fn fields(&self) -> Fields {
        let port = |p: u16| (p != 0).then_some(p);
        Fields::ip(
            self.src.ip(),
            self.dst.ip(),
            self.proto,
            port(self.src.port()),
            port(self.dst.port()),
        )
    }
}

/// What a DUT is started with. The running DUT ([`RunningDut`]) borrows only the place
/// (`'a`); the policy and sessions (`'p`) are read while it starts.
#[derive(Clone, Copy, Debug)]
pub struct DutSetup<'a, 'p> {
    /// Where the DUT runs: a namespace and its two ports (a namespace testbed's
    /// [`BridgeTopo::dut_place`](crate::topo::BridgeTopo::dut_place), or a
    /// [`LocalDut`](crate::topo::LocalDut)).
    pub place: DutPlace<'a>,
    /// The policy to enforce.
    pub policy: &'p Policy,
    /// The sessions of the test (used by `kernel:htb-perflow`; others ignore them).
    pub sessions: &'p [Session],
    /// weir: spin instead of sleeping in `ppoll` (precision for a core).
    pub busy_poll: bool,
}

/// What ran and what it counted.
#[derive(Clone, Debug, Serialize)]
pub struct DutReport {
    /// The spec ([`DutSpec::name`]).
    pub spec: String,
    /// Exactly what ran: weir's preset and compiled policy, the full `tc` command list, or
    /// the script's path, environment and output.
    pub description: String,
    /// weir: its `BridgeReport`; kernel: per device `{ "qdiscs": tc -s -j qdisc show,
    /// "classes": tc -s class show parsed ([`parse_tc_classes`]) }`; cmd: the script runs
    /// and the devices' qdiscs.
    pub counters: Value,
    /// Problems while running or stopping (a bridge error, a failed `stop` script, a
    /// cleanup command that failed). Empty when all went well.
    pub errors: Vec<String>,
}

/// Why the DUT `external` is refused without real hosts (every lab says the same).
pub const EXTERNAL_NEEDS_HOSTS: &str = "DUT external: only on real hosts, with a topology \
     file whose [dut] is `external = true` (--topology: basic, advanced, robustness, \
     voip, rrul, rfc6349, rfc2544, y1564)";

/// Start a DUT at `place` (a testbed's; `None`: the topology's DUT is external) with
/// `start`, or nothing when it is `external` (`None`: a device nothing here starts).
pub fn start_at<'a>(
    name: &str,
    external: bool,
    place: Option<DutPlace<'a>>,
    (policy, sessions, busy_poll): (&'a Policy, &'a [Session], bool),
    start: impl FnOnce(&DutSetup<'a, '_>) -> Result<RunningDut<'a>>,
) -> Result<Option<RunningDut<'a>>> {
    match (external, place) {
        (true, _) => Ok(None),
        (false, Some(place)) => start(&DutSetup {
            place,
            policy,
            sessions,
            busy_poll,
        })
        .map(Some),
        (false, None) => Err(Error::Invalid(format!(
            "{name}: the topology's DUT is external: run with --dut external"
        ))),
    }
}

/// `spec`, refused when it is `external` (for the labs that run only in namespaces).
pub fn in_namespaces(spec: DutSpec) -> Result<DutSpec> {
    match spec {
        DutSpec::External => Err(Error::Invalid(EXTERNAL_NEEDS_HOSTS.into())),
        s => Ok(s),
    }
}

impl DutReport {
    /// `running`'s report once stopped, or (`None`) an external DUT's between the hosts of
    /// `topology`.
    pub fn of(
        running: Option<RunningDut<'_>>,
        topology: Option<&crate::remote::Topology>,
    ) -> DutReport {
        match running {
            Some(r) => r.stop(),
            None => DutReport::external(topology.map_or("the topology", |t| t.file.as_str())),
        }
    }

    /// The report of an external DUT (`--dut external`): nothing ran here, nothing counted.
    pub fn external(topology_file: &str) -> DutReport {
        DutReport {
            spec: DutSpec::External.name(),
            description: format!(
                "external: a device the lab does not configure, between the hosts of {topology_file}"
            ),
            counters: Value::Null,
            errors: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running DUTs

enum State {
    Weir(BridgeThread),
    Kernel {
        /// Devices with an HTB tree.
        shaped: Vec<String>,
    },
    Cmd(script::Started),
    Done,
}

/// A started DUT. [`RunningDut::stop`] ends it with a report; dropping it ends it too.
pub struct RunningDut<'a> {
    place: DutPlace<'a>,
    spec: String,
    description: String,
    state: State,
}

impl fmt::Debug for RunningDut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningDut")
            .field("spec", &self.spec)
            .field("namespace", &self.place.ns.name())
            .finish_non_exhaustive()
    }
}

/// Starts `spec` at `setup.place`. On error nothing is left behind.
pub fn start<'a>(spec: &DutSpec, setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
    match spec {
        DutSpec::Weir(t, mss) => weir::start(*t, *mss, setup),
        DutSpec::KernelBridge => kernel::start_bridge(setup),
        DutSpec::KernelHtb => kernel::start(spec, setup, None),
        DutSpec::KernelHtbPerFlow => kernel::start(spec, setup, Some(setup.sessions)),
        DutSpec::Cmd(p) => script::start(p, setup),
        DutSpec::External => Err(Error::Invalid(
            "external: a device the lab does not configure; only with a topology file whose \
             [dut] is `external = true` (--topology)"
                .into(),
        )),
    }
}

/// weir's bridge at `setup.place` enforcing `setup.policy` exactly as
/// written — its own `technique` and class keys, no preset forced (as `weir run` would) —
/// reported under the name `spec`. On error nothing is left behind.
pub fn start_weir_as_written<'a>(spec: &str, setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
    weir::start_policy(spec.to_string(), setup.policy.clone(), None, setup)
}

impl<'a> RunningDut<'a> {
    /// The spec that runs.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// What runs (the report's `description`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Whether weir's bridge thread is still running (always true for other DUTs).
    pub fn is_running(&self) -> bool {
        match &self.state {
            State::Weir(b) => b.is_running(),
            State::Done => false,
            _ => true,
        }
    }

    /// Stops the DUT, cleans up, and reports.
    pub fn stop(mut self) -> DutReport {
        let (counters, errors) = self.finish(true);
        DutReport {
            spec: std::mem::take(&mut self.spec),
            description: std::mem::take(&mut self.description),
            counters,
            errors,
        }
    }

    /// Ends whatever runs; with `collect`, gathers counters first.
    fn finish(&mut self, collect: bool) -> (Value, Vec<String>) {
        let mut errors = Vec::new();
        let counters = match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Value::Null,
            State::Weir(mut b) => weir::stop(&mut b, &mut errors),
            State::Kernel { shaped } => kernel::stop(self.place, &shaped, collect, &mut errors),
            State::Cmd(s) => script::stop(self.place, s, collect, &mut errors),
        };
        (counters, errors)
    }
}

impl Drop for RunningDut<'_> {
    fn drop(&mut self) {
        let _ = self.finish(false);
    }
}

/// Whether `dev` in `ns` is a port of some bridge (has a `master`).
fn has_master(ns: &Netns, dev: &str) -> Result<bool> {
    let out = ns.ip(&["-o", "link", "show", "dev", dev])?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.split_whitespace().any(|w| w == "master"))
}

fn refuse_if_bridged(setup: &DutSetup<'_, '_>, what: &str) -> Result<()> {
    let place = setup.place;
    for dev in [place.lan, place.wan] {
        if has_master(place.ns, dev)? {
            return Err(Error::Invalid(format!(
                "{what}: {dev} in {} is already a bridge port (the kernel bridge is still up?); \
                 remove it first (BridgeTopo::without_kernel_bridge)",
                place.ns.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        assert_eq!(
            DutSpec::parse("weir:cbq").unwrap(),
            DutSpec::Weir(Technique::Cbq, None)
        );
        assert_eq!(
            DutSpec::parse("weir:cbq+pfq").unwrap(),
            DutSpec::Weir(Technique::CbqPfq, None)
        );
        assert_eq!(
            DutSpec::parse("weir:cbq+red").unwrap(),
            DutSpec::Weir(Technique::CbqRed, None)
        );
        assert_eq!(
            DutSpec::parse("weir:cbq+pfq+red").unwrap(),
            DutSpec::Weir(Technique::CbqPfqRed, None)
        );
        assert_eq!(DutSpec::parse("kernel:htb").unwrap(), DutSpec::KernelHtb);
        assert_eq!(
            DutSpec::parse("kernel:bridge").unwrap(),
            DutSpec::KernelBridge
        );
        assert_eq!(
            DutSpec::parse("kernel:htb-perflow").unwrap(),
            DutSpec::KernelHtbPerFlow
        );
        assert_eq!(
            DutSpec::parse("cmd:/usr/local/bin/dut.sh").unwrap(),
            DutSpec::Cmd(PathBuf::from("/usr/local/bin/dut.sh"))
        );
        assert_eq!(
            DutSpec::parse("weir:cbq+pfq+tcr+mss256").unwrap(),
            DutSpec::Weir(Technique::CbqPfqTcr, Some(256))
        );
        for s in [
            "weir:cbq",
            "weir:cbq+pfq+red",
            "weir:cbq+pfq+mss256",
            "kernel:bridge",
            "kernel:htb",
            "kernel:htb-perflow",
            "cmd:/x/y.sh",
        ] {
            assert_eq!(DutSpec::parse(s).unwrap().name(), s);
            assert_eq!(s.parse::<DutSpec>().unwrap().to_string(), s);
        }
        for bad in [
            "",
            "weir",
            "weir:",
            "weir:hfsc",
            "kernel:cbq",
            "kernel:",
            "cmd:",
            "cmd:  ",
            "netem:x",
            "weir:cbq+mss20",
            "weir:cbq+mssx",
            "weir:+mss256",
        ] {
            let e = DutSpec::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("kernel:htb-perflow") && e.contains("weir:cbq+pfq+red"),
                "{bad}: {e}"
            );
        }
        assert!(DutSpec::parse("weir:hfsc")
            .unwrap_err()
            .to_string()
            .contains("unknown weir technique 'hfsc'"));
        assert!(DutSpec::parse("weir:cbq+mss20")
            .unwrap_err()
            .to_string()
            .contains("'+mss20': expected +mssN with N bytes of TCP payload in 88..=65495"));
    }
}
