//! weir-core's integration tests, one module per subject, in one test binary: each
//! integration test file is a binary of its own that links (with the release profile's
//! LTO) the whole crate, so nine files cost nine links in every clean build.
//!
//! | module | what |
//! |---|---|
//! | `engine` | the examples under the simulator (accuracy, per-flow fairness, borrowing) |
//! | `emulate` | the emulator's delay, jitter, loss and rate through the engine |
//! | `presets` | each technique preset's compiled pipeline |
//! | `policy_errors` | error positions and messages at `file:line:col` |
//! | `policy_aqm` | the modern queue's keys, presets and default |
//! | `policy_emulate` | `[[emulate]]` profiles and their rules |
//! | `policy_framing` | link-layer framing (`overhead`, `mpu`, `atm`, `ptm`, CAKE's keywords) |
//! | `policy_inbound` | inbound rates and what shapes each direction |
//! | `policy_subscribers` | subscriber tables (ShapedDevices.csv, network.json) |

mod common;
mod emulate;
mod engine;
mod policy_aqm;
mod policy_emulate;
mod policy_errors;
mod policy_framing;
mod policy_inbound;
mod policy_subscribers;
mod presets;
