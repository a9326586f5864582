//! The labs, one file (or folder) per test of the papers:
//!
//! | lab | what | seed |
//! |---|---|---|
//! | [`basic`] | class-based bandwidth limitation and per-session guarantee (Table 4 statistics) | 000 |
//! | [`robustness`] | heterogeneous WAN delays, periodic loss, heterogeneous TCP senders (Table 5) | 000 |
//! | [`advanced`] | inter- and intra-class bandwidth borrowing (Table 6) | 000 |
//! | [`voip`] | a G.729 call beside 20 FTP sessions on 125 kbit/s and a T1: delay, jitter, loss, E-model MOS, time to establish (Table 6, Fig. 13, Table 7) | 000 |
//! | [`fidelity`] | link-shaping fidelity: inter-frame gaps, delay and loss of CBR flows | 002 |
//! | [`diffserv`] | a chain of three DiffServ routers against 3 × 100 Mbit/s of background: EF and AF for UDP and TCP, one-way delay and jitter with clock-skew estimation (Figs. 8-25), beside the kernel's HTB | 004 |
//! | [`aggregates`] | aggregate marking (trTCM) and three-colour RED: Aggr1 (8 TCP flows) vs Aggr2 (2), utilisation of CIR, Jain's index (Tables 2-4) | 001 |
//! | [`rrul`] | Flent's Realtime Response Under Load against any DUT: idle and loaded latency (UDP one-way each way, ICMP), goodput and its share, Jain, each flow's smoothed RTT, the bufferbloat grade; host isolation, a voice call, ECN, an ACK filter | Flent |
//! | [`y1564`] | ITU-T Y.1564 service activation: per service (a leaf class: CIR = rate, EIR = ceil − rate) the CIR step, EIR and traffic policing tests, then every service at its CIR at once; IR, FTD, FDV, FLR and availability against the SAC, pass/fail | ITU-T Y.1564 |
//! | [`rfc2544`] | RFC 2544 benchmarks against any DUT: throughput by binary search, latency at the throughput rate, frame loss rate in 10 % steps, back-to-back frames, at the RFC's frame sizes | RFC 2544 |
//! | [`rfc6349`] | RFC 6349 TCP throughput testing against any DUT: path MTU, baseline RTT, bottleneck bandwidth, then TCP transfers with the Transfer Time Ratio, TCP Efficiency and Buffer Delay Percentage | RFC 6349 |
//! | [`postgate`] | moving the bottleneck off an ADSL line's ATU-C: 48 FTP flows and a CBR through none, partition, SFQ, Postgate, the autorate and HTB; ATU-C queueing delay, utilisation, per-class bandwidth, weights (Figs. 3-5); a varying line | 003 |
//!
//! Each implements [`crate::lab::Lab`] (the shape every lab has; how to add one) and holds
//! its own presets, so that the command line only declares its flags.
//!
//! [`testbed`] is what the seed 000 labs share: a [`Plan`](testbed::Plan) of TCP sessions,
//! its runner ([`testbed::run_plan`]: topology, DUT, WAN stage, agents) and the outputs
//! every one of them writes. [`streams`] is what the conformance labs share: constant-rate
//! test streams through a DUT and their figures (IR, FTD, FDV, loss, availability).

pub mod advanced;
pub mod aggregates;
pub mod basic;
pub mod diffserv;
pub mod fidelity;
pub mod postgate;
pub mod rfc2544;
pub mod rfc6349;
pub mod robustness;
pub mod rrul;
pub mod streams;
pub mod testbed;
pub mod voip;
pub mod y1564;
