//! TCP-aware control: edits of TCP segments in flight, using the connection table's
//! per-connection state — MSS clamping ([`mss`]), and TCP Rate Control ([`tcr`]: window
//! sizing with the arithmetic in [`window`], and ACK pacing).

pub mod ack_filter;
pub mod mss;
pub mod tcr;
pub mod window;
