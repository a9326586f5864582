//! The routers' policies for each scenario of `weir lab diffserv` (seed 004 §3.3), as
//! weir policy text: the kernel peer's HTB trees are translated from the same text
//! ([`crate::dut::htb_commands`]).
//!
//! * **No DiffServ**: every router is a 100 Mbit/s link with one drop-tail FIFO of 100
//!   packets ("the default queue length of the FIFO queues in the routers is 100 packets").
//! * **DiffServ** — seed 004's `dsclsfr` at every router: EF first (strict priority 0,
//!   `rate = ceil` = the reservation, a queue of `ef_queue_ms` at that rate: 25 ms for UDP,
//!   100 ms for TCP), network control next (CS6/CS7, 1 Mbit/s), then AF1 and best effort
//!   sharing the rest 40 : 60 by weight. AF1's queue is TRIO over 200 packets, configured
//!   as the seed's AF runs: red dropped from the start of the queue up to 20 % of it
//!   (1 to 40 packets, `max_p` 1), green from 80 % to 100 % (160 to 200 packets, `max_p`
//!   1); yellow between (40 to 160, 0.5), though the ingress marks none.
//!   - The **ingress** router (`role = "edge"`) classifies host A's traffic to B by its
//!     addresses and protocol (multi-field) and marks it: EF runs with `mark = "ef"` (seed
//!     004's service handler), AF runs with a two-rate marker whose peak rate equals the
//!     committed one (CIR = PIR = the reservation, so "all exceeding traffic" is red:
//!     green AF11, red AF13, §3.3).
//!   - The **interior** and **egress** routers (`role = "interior"`) classify by DSCP
//!     alone (behaviour aggregate).
//!
//! For the kernel peer, host A marks its own packets (`IP_TOS`) and every router, the
//! ingress included, is the interior policy translated to HTB: EF as a priority class with
//! `rate = ceil`, the other classes as HTB siblings, every leaf a FIFO (the kernel here has
//! no three-colour RED, and HTB cannot mark).

use super::{Service, Transport, LINK_BPS, RESERVATION_BPS};
use crate::topo::ChainTopo;

/// Packets of each router's FIFO without DiffServ.
pub const FIFO_PACKETS: u32 = 100;
/// Packets of the AF class's TRIO queue.
pub const TRIO_PACKETS: u32 = 200;
/// The AF marker's committed (= peak) burst, packets of the IP MTU.
pub const AF_BURST_PACKETS: u32 = 10;
/// Network control's rate.
pub const NC_BPS: u64 = 1_000_000;
/// AF1's share of what EF and network control leave, percent (seed 004: "a 40 % weight").
pub const AF_WEIGHT_PCT: u64 = 40;

/// Where a router sits in the chain.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Position {
    Ingress,
    Interior,
    Egress,
}

impl Position {
    /// The position of router `i` of `n`.
    pub fn of(i: usize, n: usize) -> Position {
        match i {
            0 => Position::Ingress,
            _ if i + 1 == n => Position::Egress,
            _ => Position::Interior,
        }
    }
}

/// The EF queue's delay bound: 25 ms for UDP, 100 ms for TCP (§3.3, "four times larger").
pub fn ef_queue_ms(t: Transport) -> u64 {
    match t {
        Transport::Udp { .. } => 25,
        Transport::Tcp => 100,
    }
}

/// EF queue bytes: the delay bound at the reservation.
pub fn ef_queue_bytes(t: Transport) -> u64 {
    RESERVATION_BPS * ef_queue_ms(t) / 8 / 1000
}

fn mbit(bps: u64) -> String {
    format!("{}Mbit", bps as f64 / 1e6)
}

/// The policy text of a router at `pos` for a run of `service` over `transport`.
/// `host_marks`: host A marks its own packets (the kernel peer), so even the ingress
/// classifies by DSCP.
pub fn router_policy(
    service: Service,
    transport: Transport,
    pos: Position,
    host_marks: bool,
) -> String {
    let link = mbit(LINK_BPS);
    if service == Service::BestEffort {
        return format!(
            "# seed 004, no DiffServ: a {link} link with a drop-tail FIFO of {FIFO_PACKETS} packets\n\
             [link]\nrate = \"{link}\"\ntechnique = \"cbq\"\ndefault = \"fifo\"\n\n\
             [[class]]\nname = \"fifo\"\nrate = \"{link}\"\nlimit = \"{FIFO_PACKETS}p\"\n"
        );
    }
    let edge = pos == Position::Ingress && !host_marks;
    let rest = LINK_BPS - RESERVATION_BPS - NC_BPS;
    let af = rest * AF_WEIGHT_PCT / 100;
    let be = rest - af;
    let mut s = format!(
        "# seed 004, {what} router, {service} run over {tr}: dsclsfr (EF > NC > AF1 : BE 40 : 60)\n\
         [link]\nrate = \"{link}\"\ntechnique = \"cbq\"\nrole = \"{role}\"\ndefault = \"be\"\n\n\
         [[class]]\nname = \"ef\"\nrate = \"{res}\"\nceil = \"{res}\"\nprio = 0\nlimit = \"{efq}B\"\n\n\
         [[class]]\nname = \"nc\"\nrate = \"{nc}\"\nceil = \"{nc}\"\nprio = 1\n\n\
         [[class]]\nname = \"af1\"\nrate = \"{af}\"\nprio = 2\nlimit = \"{TRIO_PACKETS}p\"\n\n\
         [class.red]\naverage = \"coupled\"\ngentle = false\n\
         green = {{ min = \"{g0}p\", max = \"{TRIO_PACKETS}p\", max_p = 1.0 }}\n\
         yellow = {{ min = \"{r1}p\", max = \"{g0}p\", max_p = 0.5 }}\n\
         red = {{ min = \"1p\", max = \"{r1}p\", max_p = 1.0 }}\n\n\
         [[class]]\nname = \"be\"\nrate = \"{be}\"\nprio = 2\n",
        what = match pos {
            Position::Ingress => "ingress",
            Position::Interior => "interior",
            Position::Egress => "egress",
        },
        service = service.name(),
        tr = transport.name(),
        role = if edge { "edge" } else { "interior" },
        res = mbit(RESERVATION_BPS),
        efq = ef_queue_bytes(transport),
        nc = mbit(NC_BPS),
        af = mbit(af),
        be = mbit(be),
        g0 = TRIO_PACKETS * 8 / 10,
        r1 = TRIO_PACKETS * 2 / 10,
    );
    if edge {
        let proto = match transport {
            Transport::Udp { .. } => "udp",
            Transport::Tcp => "tcp",
        };
        let (class, action) = match service {
            Service::Ef => ("ef", "mark = \"ef\"".to_string()),
            _ => ("af1", "meter = \"af\"".to_string()),
        };
        if service == Service::Af {
            let res = mbit(RESERVATION_BPS);
            s += &format!(
                "\n[[meter]]\nname = \"af\"\ntype = \"trtcm\"\ncir = \"{res}\"\ncbs = \"{b}p\"\n\
                 pir = \"{res}\"\npbs = \"{b}p\"\ngreen = \"af11\"\nyellow = \"af13\"\nred = \"af13\"\n",
                b = AF_BURST_PACKETS
            );
        }
        s += &format!(
            "\n[[rule]]\nname = \"host-a\"\nclass = \"{class}\"\nsrc = \"{a}/32\"\ndst = \"{b}/32\"\n\
             proto = \"{proto}\"\n{action}\n",
            a = ChainTopo::A_ADDR,
            b = ChainTopo::B_ADDR,
        );
    } else {
        s += "\n[[rule]]\nname = \"ef\"\nclass = \"ef\"\ndscp = \"ef\"\n\n\
              [[rule]]\nname = \"nc\"\nclass = \"nc\"\ndscp = [\"cs6\", \"cs7\"]\n\n\
              [[rule]]\nname = \"af1\"\nclass = \"af1\"\ndscp = [\"af11\", \"af12\", \"af13\"]\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::policy::Policy;

    #[test]
    fn every_router_policy_compiles() {
        let services = [Service::BestEffort, Service::Ef, Service::Af];
        let transports = [Transport::Udp { payload: 500 }, Transport::Tcp];
        for s in services {
            for t in transports {
                for pos in [Position::Ingress, Position::Interior, Position::Egress] {
                    for host in [false, true] {
                        let text = router_policy(s, t, pos, host);
                        let p = Policy::parse("gen.toml", &text);
                        assert!(p.is_ok(), "{s:?} {t:?} {pos:?} {host}:\n{text}\n{p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn queue_sizes_follow_the_seed() {
        // 25 ms at 5 Mbit/s = 15625 bytes; 100 ms = 62500 (§3.3)
        assert_eq!(ef_queue_bytes(Transport::Udp { payload: 200 }), 15_625);
        assert_eq!(ef_queue_bytes(Transport::Tcp), 62_500);
        let t = router_policy(Service::Af, Transport::Tcp, Position::Interior, false);
        assert!(
            t.contains("min = \"160p\"") && t.contains("max = \"40p\""),
            "{t}"
        );
        assert_eq!(Position::of(0, 3), Position::Ingress);
        assert_eq!(Position::of(1, 3), Position::Interior);
        assert_eq!(Position::of(2, 3), Position::Egress);
    }
}
