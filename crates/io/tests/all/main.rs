//! weir-io's integration tests, one binary (linked once, not once per file): each file a
//! module whose tests run side by side and never beside another file's
//! ([`weir_lab::testing::group`]).

mod live_bridge;
mod live_failopen;
mod live_fanout;
