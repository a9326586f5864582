//! weir-io: the live data path. Owns the wall clock, sockets and interfaces; contains no
//! queueing logic (that is weir-core's).

pub mod afpacket;
pub mod bpf;
pub mod bridge;
pub mod caps;
pub mod clock;
pub mod control;
pub mod ethtool;
pub mod failopen;
pub mod fanout;
pub mod log;
pub mod merge;
pub mod notify;
pub mod pcap;
pub mod pcap_read;
pub mod signals;
pub mod stats;
pub mod tc;
pub mod wake;
