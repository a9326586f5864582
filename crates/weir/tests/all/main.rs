//! weir's integration tests, one binary: each file of this directory is a module (run one
//! with `cargo test --release -p weir --test all FILE::`, e.g. `--test all live_tso::`).
//!
//! One binary is linked once instead of once per file (about 15 s of a core each with
//! thin LTO, ~4 minutes of CI's wall clock over 37 files). The tests keep the isolation
//! they had as binaries of their own: each takes its file's group
//! ([`common::group`]) first, so a file's tests may run side by side, as in its own
//! binary, but never beside another file's (timing checks need a quiet machine).

mod common;

mod cli;
mod docs_links;
mod lab_aggregates;
mod lab_basic;
mod lab_diffserv;
mod lab_fidelity;
mod lab_postgate;
mod lab_rfc2544;
mod lab_rfc6349;
mod lab_rrul;
mod lab_ssh;
mod lab_voip;
mod lab_y1564;
mod live_adapt;
mod live_discover;
mod live_emu_set;
mod live_failopen;
mod live_ftp;
mod live_http;
mod live_mahimahi;
mod live_mtu;
mod live_netem_knobs;
mod live_privileges;
mod live_quic;
mod live_reload;
mod live_rtt;
mod live_run;
mod live_service;
mod live_sip;
mod live_subscribers;
mod live_tso;
mod live_web;
mod live_workers;
mod mm_graph;
mod package;
mod soak;
