//! weir-lab: the testbed. Network namespaces joined by veth, the project's own traffic
//! agents, devices under test, the labs of the papers, their statistics and reports.
//!
//! | module | what |
//! |---|---|
//! | [`topo`] | network namespaces, veth pairs, addresses, the bridge topologies |
//! | [`agents`] | traffic agents: bulk TCP sender and sink, CBR UDP sender and sink, ICMP echo, latency probes |
//! | [`dut`] | devices under test: weir presets, the kernel's HTB (policy translator), scripts |
//! | [`lab`] | the [`Lab`](lab::Lab) trait: the one shape every lab has, and how to add one |
//! | [`tests`] | the labs (basic, robustness, advanced, voip, fidelity, aggregates, diffserv, postgate, rrul) and the testbed runner |
//! | [`stats`] | Table 4, percentiles and distributions, byte series |
//! | [`report`] | checks (PASS/FAIL), text tables, SVG charts, HTML, metadata, files |
//! | [`remote`] | labs on real hosts over SSH: `weir agent`, the topology file, [`remote::Host`] |
//! | [`mmlog`] | Mahimahi's mm-link log: reader, `mm-throughput-graph`/`mm-delay-graph` summary, series and graphs |

pub mod agents;
pub mod dut;
mod error;
pub mod lab;
pub mod mmlog;
pub mod remote;
pub mod report;
pub mod stats;
mod sys;
pub mod testing;
pub mod tests;
pub mod topo;

pub use error::{Error, Result};

/// Whether SIGINT/SIGTERM arrived (when the caller installed weir's handlers with
/// `weir_io::signals::install`). Long runs check it between steps and return
/// [`Error::Invalid`] ("interrupted") so that everything they made is dropped and removed on
/// the way out.
pub fn interrupted() -> bool {
    weir_io::signals::flag().load(std::sync::atomic::Ordering::Relaxed)
}

/// `Err("interrupted")` once a stop signal arrived.
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        Err(Error::Invalid("interrupted".into()))
    } else {
        Ok(())
    }
}
