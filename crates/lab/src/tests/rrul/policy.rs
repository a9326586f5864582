//! The devices under test of `weir lab rrul`, the policy each gets per case (generated as
//! TOML text), and the line behind them.
//!
//! | DUT | what runs | policy |
//! |---|---|---|
//! | `kernel:bridge` | the Linux bridge, qdiscs unchanged: shapes nothing | (none used) |
//! | `router:fifo` | weir's bridge, one drop-tail FIFO of 100 packets at the link's rate | `technique = "cbq"`, one class |
//! | `kernel:htb`, `kernel:htb-perflow` | the Linux bridge with HTB translated from the policy, `pfifo` leaves | `technique = "cbq"`, one class |
//! | `weir:T` | weir's bridge with the policy as written: technique `T` | `technique = "T"`, one class; for the modern queue ([`MODERN`]) also `queue = "fq"`, `aqm`, `ecn = true` and the case's keys |
//! | `cmd:SCRIPT` | your script (`WEIR_POLICY` names the policy file, `WEIR_LINK_RATE` the link's rate) | no `technique` (weir's default), one class |
//!
//! The case's keys for the modern queue: `hosts` writes `isolate = "triple"`, `ackfilter`
//! writes `ack_filter = "aggressive"` or `"off"`: on a 40:1 line the downloads' ACKs
//! alone would take the uplink, and the conservative mode (`"on"`, which keeps one older
//! ACK queued beside the newest, as CAKE's `ack-filter`) leaves each ACK flow backlogged
//! with its full DRR share — measured: ACK bytes −29 %, upload ×2.5; the aggressive mode
//! (CAKE's `ack-filter-aggressive`) keeps only the newest: ACK bytes −64 %, upload ×4.3.
//! The modern queue's names are kept here in one place ([`MODERN`]); a technique the policy compiler does not know is refused before
//! anything runs, with the compiler's message.
//!
//! **Bottleneck** (decided here, see the lab's module documentation and docs/lab.md):
//! every shaping DUT shapes to the link's rate (`--rate`); the line behind it runs at
//! [`LINE_PCT`] % of that with a large drop-tail FIFO ([`LINE_BUFFER_MS`] of the line, like
//! a modem), so the bottleneck's queue is the DUT's in both directions, and a DUT that does
//! not shape (`kernel:bridge`) shows the line's bufferbloat. Both directions are shaped
//! (`direction = "both"`), except on the `ackfilter` case's asymmetric link: a weir policy
//! has one rate for both directions, so there the DUT shapes the uplink only (where the
//! ACK filter acts) and the downlink's queue is the line's, at the link's 20 Mbit/s.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::case::{Case, Variant};
use crate::dut::{self, DutSetup, DutSpec, RunningDut};
use crate::tests::robustness::rate_text;
use crate::{Error, Result};

/// A plain router's FIFO at the shaped rate: weir's bridge with one drop-tail queue.
pub const ROUTER: &str = "router:fifo";
/// The Linux bridge alone.
pub const BRIDGE: &str = "kernel:bridge";
/// weir's modern queue (per-flow fair queuing with an AQM per flow): its techniques and the
/// AQM each uses. A weir DUT named here gets the modern class keys in its policy and is the
/// one the modern checks judge.
pub const MODERN: [(&str, &str); 2] = [("fq_cobalt", "cobalt"), ("fq_codel", "codel")];
/// weir's default for a policy without a technique: the DUT the acceptance judges.
pub const DEFAULT_MODERN: &str = "weir:fq_cobalt";
/// The default DUTs, side by side.
pub const DEFAULT_DUTS: [&str; 5] = [BRIDGE, ROUTER, "kernel:htb", "weir:cbq+pfq", DEFAULT_MODERN];
/// The line's rate by default, percent of the rate the DUT shapes to.
pub const LINE_PCT: u64 = 150;
/// The line's FIFO: this many ms of the line's rate, in bytes (a modem's buffer).
pub const LINE_BUFFER_MS: u64 = 250;
/// The line's FIFO holds at least this many full frames.
pub const LINE_BUFFER_MIN_FRAMES: u64 = 20;
/// The router's FIFO, packets.
pub const ROUTER_LIMIT: u32 = 100;
/// The name of the policy's one class.
pub const CLASS: &str = "all";

/// A link: the rates the DUT shapes to each way, the base round trip (split over both
/// directions) and how much faster the line behind the DUT runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Server → client, bit/s.
    pub down_bps: u64,
    /// Client → server, bit/s.
    pub up_bps: u64,
    /// Base round-trip time, ms (half each way).
    pub rtt_ms: u64,
    /// The line's rate, percent of the link's (see [`Link::line_bps`]).
    pub line_pct: u64,
}

impl Link {
    pub fn symmetric(&self) -> bool {
        self.down_bps == self.up_bps
    }

    /// `10Mbit 50ms` or `20Mbit/500kbit 50ms` (down/up).
    pub fn name(&self) -> String {
        if self.symmetric() {
            format!("{} {}ms", rate_text(self.down_bps), self.rtt_ms)
        } else {
            format!(
                "{}/{} {}ms",
                rate_text(self.down_bps),
                rate_text(self.up_bps),
                self.rtt_ms
            )
        }
    }

    /// The rate a shaping DUT gives a direction (its policy's), or `None` where it shapes
    /// nothing (the asymmetric link's downlink: one rate per policy).
    pub fn shaped_bps(&self, up: bool) -> Option<u64> {
        match (self.symmetric(), up) {
            (true, _) | (false, true) => Some(self.up_bps),
            (false, false) => None,
        }
    }

    /// The line's rate each way: [`Link::line_pct`] of the link's where the DUT shapes,
    /// the link's own where it does not (there the line is the bottleneck by design).
    pub fn line_bps(&self, up: bool) -> u64 {
        match self.shaped_bps(up) {
            Some(r) => r * self.line_pct / 100,
            None => self.down_bps,
        }
    }

    /// The bottleneck's rate of a direction: the DUT's for a DUT that shapes, the line's
    /// for one that does not.
    pub fn bottleneck_bps(&self, up: bool, dut_shapes: bool) -> u64 {
        match self.shaped_bps(up) {
            Some(r) if dut_shapes => r,
            _ => self.line_bps(up),
        }
    }

    /// The line's FIFO for a direction of `bps`, bytes.
    pub fn buffer_bytes(bps: u64) -> u64 {
        (bps * LINE_BUFFER_MS / 8000).max(LINE_BUFFER_MIN_FRAMES * 1514)
    }
}

/// Whether a topology's DUT is external (`[dut] external = true`; `None`: namespaces).
pub fn external_dut(topology: Option<&crate::remote::Topology>) -> bool {
    topology.is_some_and(|t| matches!(t.dut, crate::remote::TopoDut::External))
}

/// What a lab on rrul's testbed needs on real hosts (`lab` prefixes the message): the
/// line (its rates and base RTT) runs at the topology's `[wan]`; without one the path is
/// the network's own, so `--rtt 0` only; and DUTs that fit the topology's `[dut]`.
pub fn check_real_hosts(
    lab: &str,
    t: &crate::remote::Topology,
    rtts_ms: &[u64],
    duts: &[String],
) -> Result<()> {
    if t.wan.is_none() && rtts_ms != [0] {
        return Err(Error::Invalid(format!(
            "{lab}: --topology {}: without a [wan] the path is the network's own (no \
             emulated line): run with --rtt 0, or name two interfaces of this machine \
             between the DUT and the server as [wan] for the lab's line",
            t.file
        )));
    }
    crate::tests::testbed::check_duts(Some(t), duts)
}

/// Refuse a matrix of links and DUTs that cannot run, with a message that names what is
/// wrong (the caller prefixes its lab): RTTs of 0 to 2 s, the line faster than the DUT
/// (`line_pct` 101 to 1000), DUT names [`DutKind::parse`] accepts, none twice, and — when
/// `rates` is given — rates of 100 kbit/s to 1 Gbit/s; `external` only where
/// `external_ok` (a topology whose DUT is external). `Ok(None)`: it can run.
pub fn matrix_error(
    duts: &[String],
    rates: Option<&[u64]>,
    rtts_ms: &[u64],
    line_pct: u64,
    external_ok: bool,
) -> Result<Option<String>> {
    if rtts_ms.is_empty() || rtts_ms.iter().any(|&r| r > 2000) {
        return Ok(Some("base RTTs of 0 to 2000 ms are needed".into()));
    }
    if rates
        .is_some_and(|r| r.is_empty() || r.iter().any(|b| !(100_000..=1_000_000_000).contains(b)))
    {
        return Ok(Some("rates of 100 kbit/s to 1 Gbit/s are needed".into()));
    }
    if !(101..=1000).contains(&line_pct) {
        return Ok(Some(format!(
            "the line at {line_pct} % of the DUT's rate (101 to 1000: it must be faster)"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for d in duts {
        if DutKind::parse(d)? == DutKind::External && !external_ok {
            return Ok(Some(dut::EXTERNAL_NEEDS_HOSTS.into()));
        }
        if !seen.insert(d) {
            return Ok(Some(format!("DUT {d} listed twice")));
        }
    }
    Ok(None)
}

/// What a DUT name means here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DutKind {
    Bridge,
    Router,
    /// `kernel:htb` or `kernel:htb-perflow`.
    Kernel(DutSpec),
    /// weir with technique `technique`; `aqm` when it is the modern queue.
    Weir {
        technique: String,
        aqm: Option<&'static str>,
    },
    Cmd(PathBuf),
    /// A device the lab does not configure (`external`, with a topology file whose `[dut]`
    /// is external): assumed to shape to the link's rate.
    External,
}

impl DutKind {
    /// `kernel:bridge`, `router:fifo`, `kernel:htb`, `kernel:htb-perflow`, `weir:TECHNIQUE`
    /// (any name: the policy compiler judges it) or `cmd:SCRIPT`.
    pub fn parse(s: &str) -> Result<DutKind> {
        if s == ROUTER {
            return Ok(DutKind::Router);
        }
        if let Some(t) = s.strip_prefix("weir:") {
            if t.is_empty() {
                return Err(Error::Invalid(format!(
                    "DUT {s:?}: weir: needs a technique"
                )));
            }
            let aqm = MODERN.iter().find(|(m, _)| *m == t).map(|(_, a)| *a);
            return Ok(DutKind::Weir {
                technique: t.to_string(),
                aqm,
            });
        }
        match DutSpec::parse(s).map_err(|e| Error::Invalid(format!("{e}, or {ROUTER}")))? {
            DutSpec::KernelBridge => Ok(DutKind::Bridge),
            k @ (DutSpec::KernelHtb | DutSpec::KernelHtbPerFlow) => Ok(DutKind::Kernel(k)),
            DutSpec::Cmd(p) => Ok(DutKind::Cmd(p)),
            DutSpec::External => Ok(DutKind::External),
            DutSpec::Weir(..) => unreachable!("weir: handled above"),
        }
    }

    /// Whether this is weir's modern queue (the modern checks judge it).
    pub fn is_modern(&self) -> bool {
        matches!(self, DutKind::Weir { aqm: Some(_), .. })
    }

    /// Whether the DUT has an ACK filter to turn on (the `ackfilter` case's `filter=on`).
    pub fn has_ack_filter(&self) -> bool {
        self.is_modern()
    }

    /// Whether the DUT shapes (everything but the bare bridge; a script is assumed to).
    pub fn shapes(&self) -> bool {
        !matches!(self, DutKind::Bridge)
    }

    /// Start it at `setup.place`, reported under `name` (weir's DUTs with
    /// the policy as written: [`shaper_policy`] writes their technique).
    pub fn start<'a>(&self, name: &str, setup: &DutSetup<'a, '_>) -> Result<RunningDut<'a>> {
        match self {
            DutKind::Bridge => dut::start(&DutSpec::KernelBridge, setup),
            DutKind::Router | DutKind::Weir { .. } => dut::start_weir_as_written(name, setup),
            DutKind::Kernel(s) => dut::start(s, setup),
            DutKind::Cmd(p) => dut::start(&DutSpec::Cmd(p.clone()), setup),
            DutKind::External => dut::start(&DutSpec::External, setup),
        }
    }

    /// Starts the DUT named `name` at `place` (a testbed's `Bed::place`; `None`: the
    /// topology's DUT is external) with `policy`; `None` for an external DUT, which
    /// nothing here starts. The other kinds need a place.
    pub fn start_at<'a>(
        &self,
        name: &str,
        place: Option<crate::topo::DutPlace<'a>>,
        policy: &'a weir_core::policy::Policy,
        sessions: &'a [dut::Session],
        busy_poll: bool,
    ) -> Result<Option<RunningDut<'a>>> {
        let external = matches!(self, DutKind::External);
        let with = (policy, sessions, busy_poll);
        dut::start_at(name, external, place, with, |s| self.start(name, s))
    }
}

/// The policy `dut` enforces in `case`/`variant` on `link`, as TOML text: the
/// [`shaper_policy`] with the case's keys for the modern queue.
pub fn dut_policy(kind: &DutKind, case: Case, variant: Variant, link: &Link) -> String {
    let title = format!(
        "weir lab rrul: case {case}{sep}{var}",
        case = case.name(),
        sep = if variant == Variant::Plain { "" } else { " " },
        var = variant.name(),
    );
    let mut s = shaper_policy(kind, link, &title);
    if kind.is_modern() {
        if case == Case::Hosts {
            s += "isolate = \"triple\"\n";
        }
        if let Variant::AckFilter(on) = variant {
            s += &format!(
                "ack_filter = \"{}\"\n",
                if on { "aggressive" } else { "off" }
            );
        }
    }
    s
}

/// The policy of a DUT that shapes `link` with one class (see the table above), as TOML
/// text under a comment `title`; the class's table comes last, so a caller may add keys.
pub fn shaper_policy(kind: &DutKind, link: &Link, title: &str) -> String {
    let up = link.up_bps;
    let (direction, dirs) = if link.symmetric() {
        ("both", "both directions")
    } else {
        ("outbound", "the uplink only (one rate per policy)")
    };
    let technique = match kind {
        DutKind::Bridge | DutKind::Router | DutKind::Kernel(_) => Some("cbq"),
        DutKind::Weir { technique, .. } => Some(technique.as_str()),
        DutKind::Cmd(_) | DutKind::External => None,
    };
    let mut s = format!(
        "# {title}, line {line}\n\
         # generated: the DUT shapes {dirs}; the line behind it runs at {pct} % of that\n\
         [link]\nrate = \"{r}\"\ndirection = \"{direction}\"\n",
        line = link.name(),
        pct = link.line_pct,
        r = rate_text(up),
    );
    if let Some(t) = technique {
        s += &format!("technique = \"{t}\"\n");
    }
    s += &format!(
        "default = \"{CLASS}\"\n\n[[class]]\nname = \"{CLASS}\"\nrate = \"{}\"\n",
        rate_text(up)
    );
    match kind {
        DutKind::Router => s += &format!("limit = \"{ROUTER_LIMIT}p\"\n"),
        DutKind::Weir { aqm: Some(aqm), .. } => {
            s += &format!("queue = \"fq\"\naqm = \"{aqm}\"\necn = true\n");
        }
        _ => {}
    }
    s
}

/// The line (weir's emulator in the WAN stage): rate, half the base RTT and a FIFO of
/// [`Link::buffer_bytes`] each way; nothing shaped beyond that.
pub fn line_policy(link: &Link, seed: u64) -> String {
    let half_us = link.rtt_ms * 500;
    let profile = |name: &str, dir: &str, bps: u64| {
        let mut p = format!(
            "\n[[emulate]]\nname = \"{name}\"\ndirection = \"{dir}\"\nrate = \"{bps}bit\"\nlimit = \"{}B\"\n",
            Link::buffer_bytes(bps)
        );
        if half_us > 0 {
            p += &format!("delay = \"{half_us}us\"\n");
        }
        p
    };
    let mut s = format!(
        "# weir lab rrul: the line behind the DUT on {} (a modem's FIFO of {LINE_BUFFER_MS} ms each way)\n\
         [link]\nrate = \"10Gbit\"\ndirection = \"none\"\nseed = {seed}\n",
        link.name()
    );
    if link.symmetric() {
        s += "emulate = \"line\"\n";
        s += &profile("line", "both", link.line_bps(true));
    } else {
        // the uplink for everything; the server's packets take the downlink profile
        s += "emulate = \"up\"\n";
        s += &profile("up", "outbound", link.line_bps(true));
        s += &profile("down", "inbound", link.line_bps(false));
        s += &format!(
            "\n[[rule]]\nname = \"from-server\"\nsrc = \"{}/32\"\nemulate = \"down\"\n",
            crate::topo::BridgeTopo::RCV_ADDR
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::policy::Policy;

    const TEN: Link = Link {
        down_bps: 10_000_000,
        up_bps: 10_000_000,
        rtt_ms: 50,
        line_pct: 150,
    };
    const ACK: Link = Link {
        down_bps: 20_000_000,
        up_bps: 500_000,
        rtt_ms: 50,
        line_pct: 150,
    };

    #[test]
    fn links_and_rates() {
        assert_eq!(TEN.name(), "10Mbit 50ms");
        assert_eq!(ACK.name(), "20Mbit/500kbit 50ms");
        assert_eq!(TEN.shaped_bps(true), Some(10_000_000));
        assert_eq!(TEN.shaped_bps(false), Some(10_000_000));
        assert_eq!(TEN.line_bps(false), 15_000_000);
        assert_eq!(TEN.bottleneck_bps(true, true), 10_000_000);
        assert_eq!(
            TEN.bottleneck_bps(true, false),
            15_000_000,
            "the bare bridge's is the line's"
        );
        assert_eq!(ACK.shaped_bps(true), Some(500_000));
        assert_eq!(ACK.line_bps(true), 750_000);
        assert_eq!(ACK.shaped_bps(false), None, "not shaped by the DUT");
        assert_eq!(ACK.line_bps(false), 20_000_000);
        assert_eq!(ACK.bottleneck_bps(false, true), 20_000_000);
        // 250 ms of 10 Mbit/s; 20 frames at least
        assert_eq!(Link::buffer_bytes(10_000_000), 312_500);
        assert_eq!(Link::buffer_bytes(500_000), 30_280);
    }

    #[test]
    fn dut_names() {
        assert_eq!(DutKind::parse("kernel:bridge").unwrap(), DutKind::Bridge);
        assert_eq!(DutKind::parse(ROUTER).unwrap(), DutKind::Router);
        assert_eq!(
            DutKind::parse("kernel:htb").unwrap(),
            DutKind::Kernel(DutSpec::KernelHtb)
        );
        let m = DutKind::parse(DEFAULT_MODERN).unwrap();
        assert!(m.is_modern() && m.has_ack_filter());
        let old = DutKind::parse("weir:cbq+pfq").unwrap();
        assert!(!old.is_modern() && old.shapes());
        assert!(!DutKind::Bridge.shapes());
        // any technique parses here; the compiler judges it
        assert!(DutKind::parse("weir:nonesuch").is_ok());
        for bad in ["weir:", "kernel:cake", "netem:x", "router:red"] {
            assert!(DutKind::parse(bad).is_err(), "{bad}");
        }
        assert!(DutKind::parse("router:red")
            .unwrap_err()
            .to_string()
            .contains(ROUTER));
    }

    #[test]
    fn generated_policies_compile_for_the_existing_duts() {
        for d in [
            "kernel:bridge",
            ROUTER,
            "kernel:htb",
            "weir:cbq",
            "weir:cbq+pfq",
            "cmd:/x",
        ] {
            let k = DutKind::parse(d).unwrap();
            for case in Case::ALL {
                for v in case.variants() {
                    let link = if case == Case::AckFilter { ACK } else { TEN };
                    let t = dut_policy(&k, case, v, &link);
                    let p = Policy::parse("<t>", &t)
                        .unwrap_or_else(|e| panic!("{d} {case:?}: {e}\n{t}"));
                    assert_eq!(Some(p.link_rate), link.shaped_bps(true), "{t}");
                    assert_eq!(p.leaves().count(), 1);
                }
            }
        }
        let r = Policy::parse(
            "<t>",
            &dut_policy(&DutKind::Router, Case::RrulBe, Variant::Plain, &TEN),
        )
        .unwrap();
        assert_eq!(r.technique.name(), "cbq");
        assert!(
            r.shapes.covers(weir_core::Direction::Inbound)
                && r.shapes.covers(weir_core::Direction::Outbound)
        );
        let a = Policy::parse(
            "<t>",
            &dut_policy(
                &DutKind::Router,
                Case::AckFilter,
                Variant::AckFilter(false),
                &ACK,
            ),
        )
        .unwrap();
        assert!(!a.shapes.covers(weir_core::Direction::Inbound));
    }

    #[test]
    fn the_modern_queue_gets_the_case_keys() {
        let m = DutKind::parse("weir:fq_codel").unwrap();
        let hosts = dut_policy(&m, Case::Hosts, Variant::Plain, &TEN);
        assert!(hosts.contains("technique = \"fq_codel\""), "{hosts}");
        assert!(hosts.contains("aqm = \"codel\"") && hosts.contains("ecn = true"));
        assert!(hosts.contains("isolate = \"triple\""));
        assert!(!hosts.contains("ack_filter"));
        let on = dut_policy(&m, Case::AckFilter, Variant::AckFilter(true), &ACK);
        let off = dut_policy(&m, Case::AckFilter, Variant::AckFilter(false), &ACK);
        assert!(on.contains("ack_filter = \"aggressive\"") && off.contains("ack_filter = \"off\""));
        assert!(!on.contains("isolate"));
        // the existing presets never get them
        let old = dut_policy(
            &DutKind::parse("weir:cbq+pfq").unwrap(),
            Case::Hosts,
            Variant::Plain,
            &TEN,
        );
        assert!(!old.contains("isolate") && !old.contains("aqm"));
    }

    #[test]
    fn line_policies_compile() {
        let s = Policy::parse("<line>", &line_policy(&TEN, 1)).unwrap();
        assert_eq!(s.emulators.len(), 1);
        let a = line_policy(&ACK, 1);
        let p = Policy::parse("<line>", &a).unwrap();
        assert_eq!(p.emulators.len(), 2, "{a}");
        assert!(a.contains("src = \"10.77.0.2/32\""));
        let zero = Link { rtt_ms: 0, ..TEN };
        let z = line_policy(&zero, 1);
        assert!(!z.contains("delay"), "{z}");
        Policy::parse("<line>", &z).unwrap();
        assert!(line_policy(&TEN, 1).contains("delay = \"25000us\""));
        assert!(line_policy(&TEN, 1).contains("rate = \"15000000bit\""));
    }
}
