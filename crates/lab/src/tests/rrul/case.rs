//! The cases of `weir lab rrul` (Flent's tests and the additions), their variants
//! and their flows.
//!
//! | case | load (from the end of the idle phase) | Flent |
//! |---|---|---|
//! | `rrul` | 4 TCP uploads + 4 downloads marked BE, BK (CS1), CS5, EF | `rrul` |
//! | `rrul_be` | 4 + 4, unmarked | `rrul_be` |
//! | `tcp_nup` | N uploads (`streams`, default 4) | `tcp_nup` |
//! | `tcp_ndown` | N downloads | `tcp_ndown` |
//! | `hosts` | host A: 1 upload to the server; host B: 16 uploads to the server's second address (two client addresses, two far ends) | — (CAKE's host isolation) |
//! | `voice` | `rrul_be`'s 8 flows and a G.729 call each way (from the start of the idle phase) | `voip` mixin |
//! | `ecn` | `rrul_be`, twice: every host's `net.ipv4.tcp_ecn` = 1, then 0 | — |
//! | `ackfilter` | 4 downloads + 1 upload on a 20 / 0.5 Mbit/s line, twice: the DUT's ACK filter on, then off | — |
//!
//! Uploads go from the client side (the DUT's LAN) to the server, downloads the other way.
//! `rrul`'s marks are on the data: each sender sets `IP_TOS`; the receivers' ACKs go
//! unmarked (Flent's netperf marks both ends, `-Y CS1,CS1`; one sink serves every flow of a
//! direction here).

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Flows of host B in the `hosts` case.
pub const HOST_B_FLOWS: usize = 16;
/// Downloads and uploads of the `ackfilter` case.
pub const ACKFILTER_DOWNLOADS: usize = 4;
pub const ACKFILTER_UPLOADS: usize = 1;
/// Flent's rrul markings, in its order: BE (CS0), BK (CS1), CS5, EF.
pub const RRUL_MARKS: [(&str, u8); 4] = [("BE", 0), ("BK", 8), ("CS5", 40), ("EF", 46)];

/// A test case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    Rrul,
    RrulBe,
    TcpNup,
    TcpNdown,
    Hosts,
    Voice,
    Ecn,
    AckFilter,
}

impl Case {
    pub const ALL: [Case; 8] = [
        Case::Rrul,
        Case::RrulBe,
        Case::TcpNup,
        Case::TcpNdown,
        Case::Hosts,
        Case::Voice,
        Case::Ecn,
        Case::AckFilter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::Rrul => "rrul",
            Case::RrulBe => "rrul_be",
            Case::TcpNup => "tcp_nup",
            Case::TcpNdown => "tcp_ndown",
            Case::Hosts => "hosts",
            Case::Voice => "voice",
            Case::Ecn => "ecn",
            Case::AckFilter => "ackfilter",
        }
    }

    pub fn parse(s: &str) -> Result<Case> {
        Case::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "unknown case '{s}'; expected some of {}",
                    Case::ALL.map(Case::name).join(", ")
                ))
            })
    }

    /// The runs of the case within one part of the matrix: one, or two for `ecn` and
    /// `ackfilter` (the second only for a DUT that has an ACK filter, see
    /// [`Variant::applies`]).
    pub fn variants(self) -> Vec<Variant> {
        match self {
            Case::Ecn => vec![Variant::Ecn(true), Variant::Ecn(false)],
            Case::AckFilter => vec![Variant::AckFilter(true), Variant::AckFilter(false)],
            _ => vec![Variant::Plain],
        }
    }

    /// The case's own asymmetric line (down, up bit/s), instead of `--rate`.
    pub fn fixed_line(self) -> Option<(u64, u64)> {
        match self {
            Case::AckFilter => Some((20_000_000, 500_000)),
            _ => None,
        }
    }

    /// Its TCP flows (`streams` for tcp_nup and tcp_ndown).
    pub fn flows(self, streams: usize) -> Vec<FlowPlan> {
        let plain = |dir: Dir, n: usize| -> Vec<FlowPlan> {
            (1..=n)
                .map(|i| FlowPlan {
                    name: format!("{} {i}", dir.name()),
                    dir,
                    host: Host::Client,
                    dscp: 0,
                })
                .collect()
        };
        match self {
            Case::Rrul => [Dir::Up, Dir::Down]
                .into_iter()
                .flat_map(|dir| {
                    RRUL_MARKS.iter().map(move |&(m, dscp)| FlowPlan {
                        name: format!("{} {m}", dir.name()),
                        dir,
                        host: Host::Client,
                        dscp,
                    })
                })
                .collect(),
            Case::RrulBe | Case::Voice | Case::Ecn => {
                let mut v = plain(Dir::Up, 4);
                v.extend(plain(Dir::Down, 4));
                v
            }
            Case::TcpNup => plain(Dir::Up, streams),
            Case::TcpNdown => plain(Dir::Down, streams),
            Case::Hosts => {
                let mut v = vec![FlowPlan {
                    name: "A up 1".into(),
                    dir: Dir::Up,
                    host: Host::A,
                    dscp: 0,
                }];
                v.extend((1..=HOST_B_FLOWS).map(|i| FlowPlan {
                    name: format!("B up {i}"),
                    dir: Dir::Up,
                    host: Host::B,
                    dscp: 0,
                }));
                v
            }
            Case::AckFilter => {
                let mut v = plain(Dir::Down, ACKFILTER_DOWNLOADS);
                v.extend(plain(Dir::Up, ACKFILTER_UPLOADS));
                v
            }
        }
    }

    /// Whether the case carries a G.729 call each way.
    pub fn has_calls(self) -> bool {
        self == Case::Voice
    }
}

/// One run's setting within a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    Plain,
    /// Every host's `net.ipv4.tcp_ecn`: 1 (request ECN) or 0.
    Ecn(bool),
    /// The DUT's ACK filter on or off.
    AckFilter(bool),
}

impl Variant {
    /// "" for [`Variant::Plain`], else `ecn=1`, `ecn=0`, `filter=on`, `filter=off`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "",
            Variant::Ecn(true) => "ecn=1",
            Variant::Ecn(false) => "ecn=0",
            Variant::AckFilter(true) => "filter=on",
            Variant::AckFilter(false) => "filter=off",
        }
    }

    /// The hosts' `net.ipv4.tcp_ecn` (0 unless the variant asks for ECN).
    pub fn tcp_ecn(self) -> u8 {
        u8::from(self == Variant::Ecn(true))
    }

    /// Whether a DUT runs this variant: `filter=on` only on a DUT with an ACK filter (the
    /// same run twice would measure nothing new).
    pub fn applies(self, has_ack_filter: bool) -> bool {
        self != Variant::AckFilter(true) || has_ack_filter
    }
}

/// Direction of a flow's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Client → server: through the DUT from `lan0` to `wan0` (weir's outbound).
    Up,
    /// Server → client.
    Down,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Up => "up",
            Dir::Down => "down",
        }
    }
}

/// The client-side address a flow uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Host {
    /// The client's main address (probes, and every flow but the `hosts` case's).
    Client,
    /// The `hosts` case's two hosts: address aliases on the client side.
    A,
    B,
}

/// One TCP flow of a case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowPlan {
    pub name: String,
    pub dir: Dir,
    pub host: Host,
    /// DSCP of its data (the sender's `IP_TOS` = dscp << 2).
    pub dscp: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_of_each_case() {
        let rrul = Case::Rrul.flows(4);
        assert_eq!(rrul.len(), 8);
        assert_eq!(
            rrul.iter().map(|f| f.dscp).collect::<Vec<_>>(),
            [0, 8, 40, 46, 0, 8, 40, 46]
        );
        assert_eq!(rrul[3].name, "up EF");
        assert_eq!(rrul[4].dir, Dir::Down);
        let be = Case::RrulBe.flows(4);
        assert!(be.iter().all(|f| f.dscp == 0 && f.host == Host::Client));
        assert_eq!(be.iter().filter(|f| f.dir == Dir::Up).count(), 4);
        assert_eq!(Case::TcpNup.flows(6).len(), 6);
        assert!(Case::TcpNdown.flows(3).iter().all(|f| f.dir == Dir::Down));
        let hosts = Case::Hosts.flows(4);
        assert_eq!(hosts.iter().filter(|f| f.host == Host::A).count(), 1);
        assert_eq!(hosts.iter().filter(|f| f.host == Host::B).count(), 16);
        let ack = Case::AckFilter.flows(4);
        assert_eq!(
            (
                ack.iter().filter(|f| f.dir == Dir::Down).count(),
                ack.iter().filter(|f| f.dir == Dir::Up).count()
            ),
            (4, 1)
        );
        assert_eq!(Case::AckFilter.fixed_line(), Some((20_000_000, 500_000)));
    }

    #[test]
    fn names_variants_and_parsing() {
        for c in Case::ALL {
            assert_eq!(Case::parse(c.name()).unwrap(), c);
        }
        let e = Case::parse("rrul_cs8").unwrap_err().to_string();
        assert!(
            e.contains("unknown case 'rrul_cs8'") && e.contains("ackfilter"),
            "{e}"
        );
        assert_eq!(Case::Ecn.variants().len(), 2);
        assert_eq!(Variant::Ecn(true).tcp_ecn(), 1);
        assert_eq!(Variant::Ecn(false).tcp_ecn(), 0);
        assert_eq!(Variant::Plain.tcp_ecn(), 0);
        assert!(!Variant::AckFilter(true).applies(false));
        assert!(Variant::AckFilter(false).applies(false));
        assert!(Variant::AckFilter(true).applies(true));
        assert_eq!(Variant::AckFilter(true).name(), "filter=on");
    }
}
