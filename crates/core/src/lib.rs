//! weir-core: the sans-IO engine of weir.
//!
//! Everything here is driven by the caller: time comes in as `now`, randomness from a
//! caller-owned seeded [`rng::Rng`], packets live in a caller-owned [`pool::Pool`]. No
//! socket, syscall, wall clock or thread RNG is touched, so the same pipeline runs live
//! (wall clock) and in simulation (virtual clock) with identical behaviour.

pub mod pool;
pub mod qdisc;
pub mod rate;
pub mod rng;
pub mod time;

pub use pool::{Color, Direction, Meta, PktId, PktQueue, Pool, Super};
pub use qdisc::{Count, Counted, Ctx, DropCause, QStats, Qdisc};
pub use rate::Rate;
pub use rng::Rng;
pub use time::{Duration, Instant};

pub mod adapt;
pub mod admission;
pub mod app;
pub mod aqm;
pub mod classify;
pub mod conn;
pub mod device;
pub mod diffserv;
pub mod discover;
pub mod emulate;
pub mod flow;
pub mod framing;
pub mod meter;
pub mod pipeline;
pub mod policy;
pub mod queue;
pub mod sched;
pub mod shard;
pub mod sim;
pub mod snapshot;
pub mod stage;
pub mod stats;
pub mod subscribers;
pub mod tcp;
pub mod units;
pub mod whatif;
pub mod whole;
