//! [`Discard`]: a bound UDP socket that is never read, so that a flood sent to it (seed
//! 004's background traffic) meets no ICMP port-unreachable replies: the kernel drops
//! what overflows the socket's buffer, cheaply.

use std::net::{SocketAddr, UdpSocket};

use crate::topo::Netns;
use crate::{Error, Result};

/// A UDP port that takes what comes and reads none of it; dropping it closes the port.
#[derive(Debug)]
pub struct Discard {
    _sock: UdpSocket,
}

impl Discard {
    /// Binds `bind` in `ns`.
    pub fn start(ns: &Netns, bind: SocketAddr) -> Result<Discard> {
        let sock = ns
            .try_run(|| UdpSocket::bind(bind))?
            .map_err(|e| Error::io(format!("discard port {bind}"), e))?;
        Ok(Discard { _sock: sock })
    }
}
