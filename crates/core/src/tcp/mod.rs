//! TCP-aware control: edits of TCP segments in flight (MSS clamping; TCP Rate Control
//! later), using the connection table's per-connection state.

pub mod mss;
