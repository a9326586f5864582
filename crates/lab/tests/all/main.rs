//! weir-lab's integration tests, one binary (linked once, not once per file): each file a
//! module whose tests run side by side and never beside another file's
//! ([`weir_lab::testing::group`]).

mod cbr;
mod dscp_counter;
mod dut;
mod lab_tests;
mod netns_bridge;
