//! The Linux kernel as the device under test (`kernel:bridge`, `kernel:htb`,
//! `kernel:htb-perflow`): the bridge `br0` over `lan0` + `wan0` and, for the HTB DUTs, the
//! HTB tree [`htb_commands`] translates from the policy, run with one `tc -batch`; stopping
//! collects `tc -s` statistics and removes both.

use serde_json::Value;
use weir_core::policy::Policy;
use weir_core::Direction;

use super::htb::htb_commands;
use super::tc::{clean_qdiscs, tc_batch, tc_counters};
use super::{DutSetup, DutSpec, RunningDut, Session, State};
use crate::topo::DutPlace;
use crate::{Error, Result};

pub(super) fn start<'a>(
    spec: &DutSpec,
    setup: &DutSetup<'a, '_>,
    sessions: Option<&[Session]>,
) -> Result<RunningDut<'a>> {
    let place = setup.place;
    let name = spec.name();
    let cmds = htb_commands(setup.policy, place.lan, place.wan, sessions)
        .map_err(|e| Error::Invalid(format!("{name}: {e}")))?;
    let shaped = shaped_devices(setup.policy, place.lan, place.wan);
    let mut description = format!(
        "{name}: Linux bridge {br} over {lan} + {wan} in netns {ns}; policy {file} \
         (link {rate} bit/s, shapes {shapes}); HTB on {devs}; leaf queues drop-tail FIFOs \
         (weir:cbq's counterpart){sess}\n",
        br = place.bridge_name(),
        lan = place.lan,
        wan = place.wan,
        ns = place.ns.name(),
        file = setup.policy.file,
        rate = setup.policy.link_rate,
        shapes = setup.policy.shapes.name(),
        devs = if shaped.is_empty() {
            "no device".to_string()
        } else {
            shaped.join(" and ")
        },
        sess = match sessions {
            Some(s) => format!("; {} sessions listed", s.len()),
            None => String::new(),
        },
    );
    description.push_str(&format!(
        "ip link add {br} type bridge stp_state 0 forward_delay 0; ip link set {lan} master {br}; \
         ip link set {wan} master {br}; ip link set {br} up\n",
        br = place.bridge_name(),
        lan = place.lan,
        wan = place.wan
    ));
    for c in &cmds {
        description.push_str(c);
        description.push('\n');
    }
    // the guard first: whatever fails below is undone by its Drop
    let dut = RunningDut {
        place,
        spec: name,
        description,
        state: State::Kernel { shaped },
    };
    place.with_kernel_bridge()?;
    tc_batch(place.ns, &cmds)?;
    Ok(dut)
}

/// `kernel:bridge`: the bridge alone, the qdiscs left as they are; the policy is not used.
pub(super) fn start_bridge<'a>(setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
    let place = setup.place;
    let description = format!(
        "kernel:bridge: Linux bridge {br} over {lan} + {wan} in netns {ns}, qdiscs unchanged \
         (nothing shaped; the policy is not used)\n\
         ip link add {br} type bridge stp_state 0 forward_delay 0; ip link set {lan} master {br}; \
         ip link set {wan} master {br}; ip link set {br} up\n",
        br = place.bridge_name(),
        lan = place.lan,
        wan = place.wan,
        ns = place.ns.name(),
    );
    // the guard first: whatever fails below is undone by its Drop
    let dut = RunningDut {
        place,
        spec: DutSpec::KernelBridge.name(),
        description,
        state: State::Kernel { shaped: Vec::new() },
    };
    place.with_kernel_bridge()?;
    Ok(dut)
}

/// The devices that get an HTB tree under the policy's `[link] direction`.
fn shaped_devices(policy: &Policy, lan: &str, wan: &str) -> Vec<String> {
    let mut v = Vec::new();
    if policy.shapes.covers(Direction::Outbound) {
        v.push(wan.to_string());
    }
    if policy.shapes.covers(Direction::Inbound) {
        v.push(lan.to_string());
    }
    v
}

/// Collects the counters (with `collect`) and removes the qdiscs and the bridge.
pub(super) fn stop(
    place: DutPlace<'_>,
    shaped: &[String],
    collect: bool,
    errors: &mut Vec<String>,
) -> Value {
    let counters = if collect {
        tc_counters(place.ns, shaped, errors)
    } else {
        Value::Null
    };
    clean_qdiscs(place, errors);
    if let Err(e) = place.without_kernel_bridge() {
        errors.push(format!("removing {}: {e}", place.bridge_name()));
    }
    counters
}
