//! Test topologies: network namespaces joined by veth pairs, their addresses, and the
//! ready-made topologies the labs use.
//!
//! - [`Netns`] (`netns.rs`): a namespace the testbed created and deletes on drop, and running
//!   commands or Rust closures inside it; cleanup of namespaces left by dead runs.
//! - `link.rs`: veth pairs, addresses, links up and down, routes, MTU, sysctls.
//! - [`BridgeTopo`] (`bridge.rs`): sender, DUT and receiver on one L2 segment (seed 000
//!   Fig. 6), with sender address aliases and an optional WAN-emulator stage.
//! - [`DutPlace`] (`place.rs`): where a DUT runs, a namespace's two ports and their kernel
//!   bridge; [`LocalDut`], two interfaces of this machine (a testbed of real hosts).
//! - [`VethPair`] (`pair.rs`): two hosts joined directly (calibration).
//! - [`ChainTopo`] (`chain.rs`): seed 004's chain of routers, each with a background host.

mod bridge;
mod chain;
mod link;
mod netns;
mod pair;
mod place;

pub use bridge::BridgeTopo;
pub use chain::ChainTopo;
pub use link::{
    add_addr, add_route, check_ifname, is_link_up, link_veth, parse_cidr, set_down, set_mtu,
    set_rto_min, set_sysctl, set_up, unique_ifname, unique_veth_names, wait_link_up, IFNAME_MAX,
};
pub use netns::{
    cleanup_registered, list_testbed_namespaces, process_prefix, remove_stale_namespaces,
    require_root, skip_unless_root, Netns, NETNS_PREFIX, NETNS_RUN_DIR,
};
pub use pair::VethPair;
pub use place::{DutPlace, KernelBridge, LocalChain, LocalDut, LocalWan, WanPlace};
