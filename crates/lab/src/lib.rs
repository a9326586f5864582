//! weir-lab: the testbed. Network namespaces joined by veth, the project's own traffic
//! agents, collectors and statistics.

pub mod agents;
pub mod cbr;
pub mod fidelity;
pub mod meta;
pub mod netns;
pub mod plot;
pub mod table4;

pub use meta::meta;
