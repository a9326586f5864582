//! weir-lab: the testbed. Network namespaces joined by veth, the project's own traffic
//! agents, collectors and statistics.
#![allow(clippy::disallowed_methods)] // the testbed measures wall-clock time

pub mod agents;
pub mod netns;
