//! Application awareness (seed 000 step 3, Table 2 "layer awareness"): parsers of the
//! application protocols whose connections a bandwidth manager must follow beyond their
//! ports. Each is sans-IO, bounded and allocation-free; the device feeds them payload.
//!
//! | module | what |
//! |---|---|
//! | [`ftp`] | FTP's control channel: PORT/EPRT and 227/229 announce the data connection |

pub mod ftp;
