//! Expected connections: what an application's control channel announced (an FTP data
//! connection, later a SIP call's media), kept until the connection comes or the
//! expectation times out, so the new connection can be classified with its control
//! connection from its first packet (the way Linux conntrack's helpers do it).
//!
//! An [`Expectation`] names the connection's initiator address (any port), the
//! responder's address and port, the protocol, what it is (`app`, a tag the caller
//! defines) and who announced it (`owner`, the control connection's id). [`Expectations::take`] matches a connection's first packet
//! (initiator address, responder address and port, protocol) and removes the expectation:
//! each is used once.
//!
//! Bounds: at most `capacity` expectations in all (the oldest is replaced when full,
//! counted) and at most [`PER_OWNER`] per control connection (its oldest is replaced);
//! each lives `timeout` (the caller's choice: a client opens an FTP data connection
//! within a second or two of the announcement) or until its owner closes
//! ([`Expectations::forget`]). Lookups are linear over at most `capacity` entries: new
//! connections are rare next to packets.
//!
//! Security: [`Expectations::add`] refuses an expectation whose responder is not one of
//! the control connection's two ends (RFC 2577 §3, the FTP bounce attack: a PORT naming
//! a third host must not open a path to it); the caller passes both ends.

use crate::time::{Duration, Instant};
use core::net::IpAddr;
use serde::Serialize;

/// Most expectations one control connection may have pending.
pub const PER_OWNER: usize = 4;

/// A connection expected to come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// Who will open it (any source port).
    pub initiator: IpAddr,
    /// Where to.
    pub responder: IpAddr,
    pub port: u16,
    /// IP protocol (6 for FTP data).
    pub proto: u8,
    /// What it is (the caller's application tag).
    pub app: u8,
    /// The control connection that announced it (a connection id).
    pub owner: u32,
    /// Until when it is kept.
    pub expires: Instant,
}

/// Why [`Expectations::add`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The responder is neither end of the control connection (a bounce).
    ThirdHost,
    /// The initiator is neither end of the control connection.
    Stranger,
}

/// What the table did, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpectStats {
    pub added: u64,
    /// Refused: a third host named (the FTP bounce attack).
    pub refused_bounce: u64,
    /// Matched by a new connection.
    pub matched: u64,
    pub expired: u64,
    /// Replaced because the table or the owner's share was full.
    pub replaced: u64,
}

/// See the module comment.
#[derive(Clone, Debug)]
pub struct Expectations {
    list: Vec<Expectation>,
    capacity: usize,
    timeout: Duration,
    pub stats: ExpectStats,
}

impl Expectations {
    pub fn new(capacity: usize, timeout: Duration) -> Expectations {
        Expectations {
            list: Vec::with_capacity(capacity),
            capacity: capacity.max(1),
            timeout,
            stats: ExpectStats::default(),
        }
    }

    /// Pending expectations.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Expect `initiator` → `responder`:`port` (`proto`, tagged `app`), announced on the
    /// control connection `owner` between `ends`, from `now` for the timeout.
    pub fn add(
        &mut self,
        (initiator, responder, port): (IpAddr, IpAddr, u16),
        (proto, app): (u8, u8),
        (owner, ends): (u32, [IpAddr; 2]),
        now: Instant,
    ) -> Result<(), Refused> {
        if !ends.contains(&responder) {
            self.stats.refused_bounce += 1;
            return Err(Refused::ThirdHost);
        }
        if !ends.contains(&initiator) {
            self.stats.refused_bounce += 1;
            return Err(Refused::Stranger);
        }
        self.expire(now);
        let e = Expectation {
            initiator,
            responder,
            port,
            proto,
            app,
            owner,
            expires: now + self.timeout,
        };
        // the same announcement again (a retransmitted PORT): renew it
        if let Some(x) = self.list.iter_mut().find(|x| same_target(x, &e)) {
            *x = e;
            return Ok(());
        }
        let mine = self.list.iter().filter(|x| x.owner == owner).count();
        if mine >= PER_OWNER {
            self.remove_oldest(|x| x.owner == owner);
        } else if self.list.len() >= self.capacity {
            self.remove_oldest(|_| true);
        }
        self.list.push(e);
        self.stats.added += 1;
        Ok(())
    }

    /// The expectation a connection's first packet `src` → `dst`:`dport` (`proto`)
    /// fulfils, removed; `None` if none.
    pub fn take(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        dport: u16,
        proto: u8,
        now: Instant,
    ) -> Option<Expectation> {
        if self.list.is_empty() {
            return None;
        }
        self.expire(now);
        let i = self.list.iter().position(|x| {
            x.initiator == src && x.responder == dst && x.port == dport && x.proto == proto
        })?;
        self.stats.matched += 1;
        Some(self.list.swap_remove(i))
    }

    /// Forget what control connection `owner` announced (it closed).
    pub fn forget(&mut self, owner: u32) {
        self.list.retain(|x| x.owner != owner);
    }

    fn expire(&mut self, now: Instant) {
        let before = self.list.len();
        self.list.retain(|x| x.expires > now);
        self.stats.expired += (before - self.list.len()) as u64;
    }

    fn remove_oldest(&mut self, which: impl Fn(&Expectation) -> bool) {
        if let Some(i) = self
            .list
            .iter()
            .enumerate()
            .filter(|(_, x)| which(x))
            .min_by_key(|(_, x)| x.expires)
            .map(|(i, _)| i)
        {
            self.list.swap_remove(i);
            self.stats.replaced += 1;
        }
    }
}

fn same_target(a: &Expectation, b: &Expectation) -> bool {
    a.initiator == b.initiator
        && a.responder == b.responder
        && a.port == b.port
        && a.proto == b.proto
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9));
    const FTP_DATA: u8 = 2;

    fn at(s: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(s)
    }

    /// Passive mode: the server's 227 names itself, port 40000; the client's connection
    /// to it matches once, then no more.
    #[test]
    fn an_expectation_is_used_once() {
        let mut x = Expectations::new(8, Duration::from_secs(60));
        x.add(
            (CLIENT, SERVER, 40000),
            (6, FTP_DATA),
            (7, [CLIENT, SERVER]),
            at(0),
        )
        .unwrap();
        assert_eq!(
            x.take(CLIENT, SERVER, 40001, 6, at(1)),
            None,
            "another port"
        );
        assert_eq!(
            x.take(OTHER, SERVER, 40000, 6, at(1)),
            None,
            "another initiator"
        );
        assert_eq!(x.take(CLIENT, SERVER, 40000, 17, at(1)), None, "UDP");
        let e = x.take(CLIENT, SERVER, 40000, 6, at(1)).unwrap();
        assert_eq!((e.app, e.owner), (FTP_DATA, 7));
        assert_eq!(x.take(CLIENT, SERVER, 40000, 6, at(2)), None);
        assert_eq!(x.stats.matched, 1);
    }

    /// RFC 2577's bounce: a PORT naming a third host is refused and counted.
    #[test]
    fn a_third_host_is_refused() {
        let mut x = Expectations::new(8, Duration::from_secs(60));
        let r = x.add(
            (SERVER, OTHER, 25),
            (6, FTP_DATA),
            (7, [CLIENT, SERVER]),
            at(0),
        );
        assert_eq!(r, Err(Refused::ThirdHost));
        let r = x.add(
            (OTHER, SERVER, 2000),
            (6, FTP_DATA),
            (7, [CLIENT, SERVER]),
            at(0),
        );
        assert_eq!(r, Err(Refused::Stranger));
        assert!(x.is_empty());
        assert_eq!(x.stats.refused_bounce, 2);
    }

    /// Timed out after 60 s; bounded per owner (4) and in all (capacity).
    #[test]
    fn expectations_expire_and_are_bounded() {
        let mut x = Expectations::new(6, Duration::from_secs(60));
        x.add(
            (CLIENT, SERVER, 1000),
            (6, FTP_DATA),
            (1, [CLIENT, SERVER]),
            at(0),
        )
        .unwrap();
        assert_eq!(x.take(CLIENT, SERVER, 1000, 6, at(60)), None);
        assert_eq!(x.stats.expired, 1);
        for p in 0..6 {
            x.add(
                (CLIENT, SERVER, 2000 + p),
                (6, FTP_DATA),
                (1, [CLIENT, SERVER]),
                at(100 + p as u64),
            )
            .unwrap();
        }
        // owner 1 keeps its newest four
        assert_eq!(x.len(), PER_OWNER);
        assert!(x.take(CLIENT, SERVER, 2000, 6, at(110)).is_none());
        assert!(x.take(CLIENT, SERVER, 2005, 6, at(110)).is_some());
        for o in 2..10u32 {
            x.add(
                (CLIENT, SERVER, 3000 + o as u16),
                (6, FTP_DATA),
                (o, [CLIENT, SERVER]),
                at(120 + o as u64),
            )
            .unwrap();
        }
        assert_eq!(x.len(), 6, "the table's capacity");
        assert!(x.stats.replaced >= 2 + 5);
        x.forget(9);
        assert!(x.take(CLIENT, SERVER, 3009, 6, at(130)).is_none());
        // a repeated announcement renews, not duplicates
        let n = x.len();
        x.add(
            (CLIENT, SERVER, 3008),
            (6, FTP_DATA),
            (8, [CLIENT, SERVER]),
            at(131),
        )
        .unwrap();
        assert_eq!(x.len(), n);
    }
}
