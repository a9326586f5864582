//! TCP-aware control: edits of TCP segments in flight, using the connection table's
//! per-connection state — MSS clamping ([`mss`]) and TCP Rate Control's window sizing
//! ([`window`]; ACK pacing and the stage that applies both come with the TCR issue).

pub mod mss;
pub mod window;
