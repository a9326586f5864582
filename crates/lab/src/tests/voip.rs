//! Seed 000's VoIP test (Table 6, "VoIP test using SmartVoIPQoS / VoIP Gateway"; results in
//! Fig. 13 and Table 7): one G.729 call beside 20 bulk FTP-like TCP sessions, through a
//! bandwidth manager on a narrow link.
//!
//! * **Link**: 125 kbit/s (`125k`) and/or a T1, 1.544 Mbit/s (`t1`).
//! * **Policy** ([`voip_policy`]): class `voice` of 30 kbit/s (prio 0) for the call, class
//!   `ftp` with the rest of the link (prio 1) for the TCP sessions; `ftp` may borrow up to
//!   the whole link, so until the call starts it takes the voice class's share too ("FTP
//!   traffic can occupy the voice class until voice traffic begins").
//! * **Traffic**: 20 TCP sessions (reno unless `--cc`, the testbed's senders and seed 000
//!   Table 3 hosts) from 0 s to the end; one G.729 call ([`crate::agents::voip`]: RTP, 74-byte
//!   frames at 50 packets/s, 29.6 kbit/s at layer 2) from `voice_start_s` to `voice_stop_s`.
//! * **DUTs**: any `--dut` of the testbed, and `router:fifo` ([`ROUTER`]): the router of
//!   seed 000 Fig. 6 with no bandwidth manager — weir's bridge (`weir:cbq`) running a policy
//!   of the link alone ([`router_policy`]): one drop-tail FIFO at the link rate, the queue
//!   of a plain router at the bottleneck (seed 000's "baseline with background FTP"). The
//!   TCR presets and MSS clamping (`weir:cbq+pfq+mss256`, [`CLAMPED`]) are `weir:` DUTs
//!   like any other.
//! * **Line**: the testbed serialises everything after the DUT at the line rate (125 kbit/s
//!   or 1.544 Mbit/s); every DUT's policy runs at [`SHAPED_PCT`] of it, so the bottleneck's
//!   queue is the DUT's.
//!
//! Per DUT and run, from the call's packets ([`crate::stats::voice`], [`crate::stats::emodel`]):
//! one-way delay p50/p95/max, RFC 3550 jitter, network loss, the losses of a fixed jitter
//! buffer (`buffer_ms`, default 60 ms), the E-model's R and MOS for G.729A, the **time to
//! establish** — from the call's first packet until its received rate, averaged over a
//! sliding 500 ms of 100 ms bins, first reaches 95 % of the call's rate (the DUT has taken
//! back the voice class's bandwidth from FTP; 0.1 s is the floor of this measure; `None`:
//! never, seed 000's "cannot establish") — and the FTP sessions' goodput over the call.
//!
//! Paper mode: 1 run of 90 s per link and DUT, the call from 10 to 88 s; quick: 1 run of
//! 16 s, the call from 4 to 14 s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_core::policy::{Policy, Technique};

use super::robustness::rate_text;
use super::testbed::{self, HostTcp, Plan, RunOutcome, SessionPlan, VoicePlan};
use crate::agents::voip::{g729_l2_bps, G729_FRAME, G729_PACKET_MS};
use crate::dut::DutSpec;
use crate::lab::{Lab, Outline};
use crate::report::{self, checks_text, fmt_opt, text_table, Check};
use crate::stats::emodel::Codec;
use crate::stats::series::{sum_series, time_to_reach, window_goodput};
use crate::stats::voice::{arrival_series, VoiceJudge, VoiceStats};
use crate::{Error, Result};

/// The links, in the order they run.
pub const LINKS: [&str; 2] = ["125k", "t1"];
/// The baseline DUT: a plain router's FIFO at the link rate.
pub const ROUTER: &str = "router:fifo";
/// Seed 000's cure (Sitara QoSWorks): CBQ with per-flow queuing and every TCP connection's
/// MSS clamped to 256 bytes.
pub const CLAMPED: &str = "weir:cbq+pfq+mss256";
/// Source prefixes of the call and of the FTP sessions.
pub const VOICE_SRC: &str = "10.8.1.0/24";
pub const FTP_SRC: &str = "10.8.2.0/24";
/// The call's UDP port at the receiver (in the RTP range of examples/voip-ftp.toml).
pub const VOICE_PORT: u16 = 16384;
/// The voice class's rate, bit/s.
pub const VOICE_CLASS_BPS: u64 = 30_000;
/// Time to establish: bins, sliding window and the share of the call's rate.
pub const ESTABLISH_BIN_MS: u64 = 100;
pub const ESTABLISH_WINDOW_MS: u64 = 500;
pub const ESTABLISH_LEVEL: f64 = 0.95;

/// The rate of a link name.
pub fn link_bps(link: &str) -> Result<u64> {
    match link {
        "125k" => Ok(125_000),
        "t1" => Ok(1_544_000),
        _ => Err(Error::Invalid(format!(
            "unknown link '{link}'; expected some of {}",
            LINKS.join(", ")
        ))),
    }
}

/// The queue limit of every class, packets: about one second of the link (at least 10,
/// at most the FIFO default of 100): a 100-packet FIFO at 125 kbit/s holds 9.7 s, TCP's
/// round trip grows past every retransmission timer, and the 20 sessions back off into
/// near silence within seconds (measured: 12 kbit/s of 125), which leaves nothing for
/// the call to compete with.
pub fn queue_limit(link: u64) -> u64 {
    (link / (1514 * 8)).clamp(10, 100)
}

/// The rate every DUT's policy gives the link, percent of the serial line's: a manager
/// must own the bottleneck's queue, so it is set a little below the line, as deployed
/// shapers are. At exactly the line rate every burst the shaper's buckets allow (a class's
/// `cburst`, one 1514-byte frame and 1 ms) is handed to a line that, never idle, can never
/// drain it: measured, a standing 100 ms in the line under every weir DUT (the call's
/// fastest packet took 101 ms with MSS 256), whatever the manager's priorities.
pub const SHAPED_PCT: u64 = 97;

/// The rate of the DUT's policy on a line of `link` bit/s ([`SHAPED_PCT`]).
pub fn shaped_bps(link: u64) -> u64 {
    link * SHAPED_PCT / 100
}

/// The managed policy: voice 30 kbit/s (prio 0), ftp the rest (prio 1), both may borrow
/// the whole link (the link at [`shaped_bps`] of the line); queues of [`queue_limit`].
pub fn voip_policy(line: u64) -> String {
    let link = shaped_bps(line);
    format!(
        "# seed 000 Table 6, VoIP test (generated by weir lab voip)\n\
         # a {l} link: voice class of 30 kbit/s for the G.729 call, ftp class with the rest;\n\
         # ftp borrows the voice class's share while no call is up\n\
         [link]\nrate = \"{l}\"\ntechnique = \"cbq+pfq\"\ndefault = \"ftp\"\n\n\
         [[class]]\nname = \"voice\"\nrate = \"{v}\"\nprio = 0\nlimit = \"{q}p\"\n\n\
         [[class]]\nname = \"ftp\"\nrate = \"{f}\"\nprio = 1\nlimit = \"{q}p\"\n\n\
         [[rule]]\nname = \"rtp\"\nclass = \"voice\"\nproto = \"udp\"\nsrc = \"{VOICE_SRC}\"\n\n\
         [[rule]]\nname = \"ftp\"\nclass = \"ftp\"\nsrc = \"{FTP_SRC}\"\n",
        l = rate_text(link),
        v = rate_text(VOICE_CLASS_BPS),
        f = rate_text(link - VOICE_CLASS_BPS),
        q = queue_limit(link),
    )
}

/// The router's policy: one class of the whole link for everything (a drop-tail FIFO of
/// [`queue_limit`] packets under `weir:cbq`, at [`shaped_bps`] of the line: the router's
/// queue is the bottleneck's).
pub fn router_policy(line: u64) -> String {
    let link = shaped_bps(line);
    format!(
        "# seed 000 Fig. 6, the router without a bandwidth manager (generated by weir lab voip):\n\
         # one drop-tail FIFO at the link rate\n\
         [link]\nrate = \"{l}\"\ntechnique = \"cbq\"\ndefault = \"all\"\n\n\
         [[class]]\nname = \"all\"\nrate = \"{l}\"\nlimit = \"{q}p\"\n",
        l = rate_text(link),
        q = queue_limit(link),
    )
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VoipConfig {
    /// Some of [`LINKS`].
    pub links: Vec<String>,
    pub duts: Vec<String>,
    pub cc: String,
    pub busy_poll: bool,
    pub runs: u32,
    pub duration_s: f64,
    pub voice_start_s: f64,
    pub voice_stop_s: f64,
    pub ftp_sessions: usize,
    /// Depth of the fixed jitter buffer, ms.
    pub buffer_ms: f64,
    /// MOS-over-time windows, s.
    pub mos_window_s: f64,
    /// Real hosts instead of namespaces (`--topology FILE`): the serial line is emulated
    /// at the topology's `[wan]`; without one the network between the DUT and the
    /// receiver is the line.
    #[serde(default)]
    pub topology: Option<crate::remote::Topology>,
}

impl VoipConfig {
    pub fn paper() -> Self {
        Self::with_times(90.0, 10.0, 88.0)
    }

    pub fn quick() -> Self {
        Self::with_times(16.0, 4.0, 14.0)
    }

    fn with_times(duration_s: f64, voice_start_s: f64, voice_stop_s: f64) -> Self {
        VoipConfig {
            links: LINKS.iter().map(|s| s.to_string()).collect(),
            duts: [
                ROUTER,
                "weir:cbq",
                "weir:cbq+pfq",
                "weir:cbq+pfq+tcr",
                CLAMPED,
                "kernel:htb",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            cc: "reno".into(),
            busy_poll: false,
            runs: 1,
            duration_s,
            voice_start_s,
            voice_stop_s,
            ftp_sessions: 20,
            buffer_ms: 60.0,
            mos_window_s: 1.0,
            topology: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(format!("voip test: {m}")));
        for l in &self.links {
            link_bps(l)?;
        }
        if self.links.is_empty() || self.duts.is_empty() || self.runs == 0 {
            return bad("no link, DUT or run".into());
        }
        for d in &self.duts {
            spec_of(d)?;
        }
        if !(0.0 <= self.voice_start_s
            && self.voice_start_s + 1.0 <= self.voice_stop_s
            && self.voice_stop_s <= self.duration_s)
        {
            return bad(format!(
                "the call ({}-{} s) must last at least 1 s within the {} s run",
                self.voice_start_s, self.voice_stop_s, self.duration_s
            ));
        }
        if !(self.buffer_ms >= 0.0 && self.mos_window_s >= 0.02 && self.ftp_sessions > 0) {
            return bad("jitter buffer >= 0, MOS window >= 20 ms, at least one FTP session".into());
        }
        Ok(())
    }

    /// How the call is judged.
    pub fn judge(&self) -> VoiceJudge {
        VoiceJudge {
            period_ns: G729_PACKET_MS as f64 * 1e6,
            buffer_ns: (self.buffer_ms * 1e6).round() as i64,
            codec: Codec::G729A,
        }
    }
}

/// The DUT list of `--compare` and `--dut`: the testbed's ([`testbed::dut_list`]) with
/// [`ROUTER`] first when it is named or compared, and [`CLAMPED`] added by `--compare`;
/// `None` for the default.
pub fn dut_list(compare: bool, dut: Vec<String>) -> Result<Option<Vec<String>>> {
    // the router is this test's own DUT; the rest are the testbed's
    let (router, others): (Vec<String>, Vec<String>) = dut.into_iter().partition(|d| d == ROUTER);
    Ok(match testbed::dut_list(compare, others)? {
        Some(mut d) => {
            if compare || !router.is_empty() {
                d.insert(0, ROUTER.into());
            }
            if compare && !d.iter().any(|x| x == CLAMPED) {
                d.push(CLAMPED.into());
            }
            Some(d)
        }
        None => (!router.is_empty()).then_some(router),
    })
}

/// What runs for a DUT name, and whether it is the router (its own policy).
pub fn spec_of(dut: &str) -> Result<(DutSpec, bool)> {
    if dut == ROUTER {
        Ok((DutSpec::Weir(Technique::Cbq, None), true))
    } else {
        DutSpec::parse(dut)
            .map_err(|e| Error::Invalid(format!("{e}, or {ROUTER}")))
            .map(|s| (s, false))
    }
}

/// The plan of one link: `router` picks the router's policy (every session in its one class).
pub fn plan(link: &str, router: bool, c: &VoipConfig) -> Result<Plan> {
    let bps = link_bps(link)?;
    let (text, name) = if router {
        (router_policy(bps), format!("voip-{link}-router"))
    } else {
        (voip_policy(bps), format!("voip-{link}"))
    };
    let file = format!("<generated {name}>");
    let p = Policy::parse(&file, &text).map_err(|e| Error::Invalid(format!("policy: {e}")))?;
    let managed = Policy::parse("<managed>", &voip_policy(bps))
        .map_err(|e| Error::Invalid(format!("policy: {e}")))?;
    // the same addresses under either policy: the managed policy's
    let ftp = testbed::addresses_for_class(&managed, "ftp", c.ftp_sessions, &[])?;
    let class_of = |managed_class: &str| -> String {
        if router {
            p.leaves()
                .next()
                .map_or_else(String::new, |i| p.classes[i].name.clone())
        } else {
            managed_class.into()
        }
    };
    let sessions = ftp
        .iter()
        .enumerate()
        .map(|(i, &src)| SessionPlan {
            name: format!("ftp-{}", i + 1),
            class: class_of("ftp"),
            src,
            cc: c.cc.clone(),
            mss: Some(1460),
            rcvbuf: None,
            start_s: 0.0,
            stop_s: c.duration_s,
            wan: None,
        })
        .collect();
    let plan = Plan {
        name,
        policy_text: text,
        policy_file: file,
        sessions,
        tcp: HostTcp::seed000(),
        duration_s: c.duration_s,
        window_s: (c.voice_start_s, c.voice_stop_s),
        interval_ms: ESTABLISH_BIN_MS,
        busy_poll: c.busy_poll,
        voice: vec![VoicePlan {
            name: "call".into(),
            class: class_of("voice"),
            src: "10.8.1.1".parse().expect("address"),
            port: VOICE_PORT,
            start_s: c.voice_start_s,
            stop_s: c.voice_stop_s,
        }],
        // on real hosts without a `[wan]` the network after the DUT is the line
        line_bps: (c.topology.as_ref())
            .is_none_or(|t| t.wan.is_some())
            .then_some(bps),
        udp: Vec::new(),
        stage_policy: None,
        count_dscp: false,
        topology: c.topology.clone(),
    };
    plan.validate()?;
    Ok(plan)
}

/// One link's plans and runs (every DUT, the router's included).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VoipPart {
    pub link: String,
    pub plan: Plan,
    /// The router's plan, when `router:fifo` ran.
    pub router_plan: Option<Plan>,
    pub runs: Vec<RunOutcome>,
    #[serde(default)]
    pub rows: Vec<VoipRow>,
}

/// The measures of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VoipRow {
    pub link: String,
    pub dut: String,
    pub run: u32,
    pub voice: VoiceStats,
    /// Seconds from the call's first packet until it was received at its rate.
    pub establish_s: Option<f64>,
    /// The TCP sessions' goodput over the call, bit/s.
    pub ftp_goodput_bps: f64,
    /// Sender or receiver problems (send errors, late sends, socket drops; expected 0).
    pub agent_problems: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VoipResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: VoipConfig,
    pub parts: Vec<VoipPart>,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// Every link's plans, built and validated (no root needed).
pub fn plans(c: &VoipConfig) -> Result<Vec<(String, Plan, Option<Plan>)>> {
    c.validate()?;
    let router = c.duts.iter().any(|d| d == ROUTER);
    LINKS
        .iter()
        .filter(|l| c.links.iter().any(|x| x == *l))
        .map(|l| {
            let r = if router {
                Some(plan(l, true, c)?)
            } else {
                None
            };
            Ok((l.to_string(), plan(l, false, c)?, r))
        })
        .collect()
}

/// Run the test: every link, every DUT, `runs` runs.
pub fn run(c: &VoipConfig, progress: &mut dyn FnMut(&str)) -> Result<VoipResult> {
    let plans = plans(c)?;
    let specs = c
        .duts
        .iter()
        .map(|d| Ok((d.clone(), spec_of(d)?)))
        .collect::<Result<Vec<_>>>()?;
    crate::topo::require_root()?;
    let mut parts = Vec::new();
    for (link, plan, router_plan) in plans {
        let mut runs = Vec::new();
        for (name, (spec, router)) in &specs {
            let p = match (&router_plan, router) {
                (Some(rp), true) => rp,
                _ => &plan,
            };
            for r in 0..c.runs {
                crate::check_interrupted()?;
                let mut out = testbed::run_plan(p, spec, r, progress)?;
                out.dut = name.clone();
                runs.push(out);
            }
        }
        parts.push(VoipPart {
            link,
            plan,
            router_plan,
            runs,
            rows: Vec::new(),
        });
    }
    let mut res = VoipResult {
        kind: "voip".into(),
        meta: report::meta(),
        config: c.clone(),
        parts,
        checks: Vec::new(),
    };
    finish(&mut res)?;
    Ok(res)
}

/// The measures of one run.
pub fn row(link: &str, c: &VoipConfig, r: &RunOutcome) -> Result<VoipRow> {
    let call = r
        .voice
        .first()
        .ok_or_else(|| Error::Invalid(format!("{} run {}: no call", r.dut, r.run + 1)))?;
    let voice = c.judge().stats(&call.packets, call.sent);
    let establish_s = call.first_send_ns.and_then(|t0| {
        let s = arrival_series(
            &call.packets,
            t0,
            ESTABLISH_BIN_MS * 1_000_000,
            G729_FRAME as u64,
        );
        time_to_reach(
            &s,
            ESTABLISH_BIN_MS,
            ESTABLISH_WINDOW_MS,
            0.0,
            ESTABLISH_LEVEL * g729_l2_bps(),
        )
    });
    let ftp = sum_series(r.sessions.iter().map(|s| s.series.as_slice()));
    Ok(VoipRow {
        link: link.into(),
        dut: r.dut.clone(),
        run: r.run,
        voice,
        establish_s,
        ftp_goodput_bps: window_goodput(&ftp, ESTABLISH_BIN_MS, (c.voice_start_s, c.voice_stop_s)),
        agent_problems: call.send_errors + call.late_sends + call.socket_drops,
    })
}

/// The lab (`weir lab voip`).
pub struct Voip;

impl Lab for Voip {
    const NAME: &'static str = "voip";
    type Config = VoipConfig;
    type Result = VoipResult;

    fn paper() -> VoipConfig {
        VoipConfig::paper()
    }

    fn quick() -> VoipConfig {
        VoipConfig::quick()
    }

    fn plan(&self, c: &VoipConfig) -> Result<Outline> {
        let plans = plans(c)?;
        // the router is a weir DUT like the others: on real hosts it runs at the DUT's
        // interfaces; in namespaces every other DUT must be one that runs there
        let others: Vec<String> = (c.duts.iter())
            .filter(|d| *d != ROUTER || c.topology.is_some())
            .cloned()
            .collect();
        testbed::check_duts(c.topology.as_ref(), &others)?;
        Ok(Outline {
            what: format!(
                "links {} on {} DUT(s) x {} run(s) of {} s",
                c.links.join(", "),
                c.duts.len(),
                c.runs,
                c.duration_s
            ),
            estimate_s: Some(
                (plans.len() * c.duts.len()) as f64 * c.runs as f64 * (c.duration_s + 4.0),
            ),
        })
    }

    fn run(
        self,
        c: &VoipConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<VoipResult> {
        run(c, progress)
    }

    fn finish(r: &mut VoipResult) -> Result<()> {
        finish(r)
    }

    fn text(r: &VoipResult) -> String {
        text(r)
    }

    fn checks(r: &VoipResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(r: &VoipResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Recompute the measures and checks from the runs (also for `weir lab report`).
pub fn finish(res: &mut VoipResult) -> Result<()> {
    let c = res.config.clone();
    for p in &mut res.parts {
        p.rows = p
            .runs
            .iter()
            .map(|r| row(&p.link, &c, r))
            .collect::<Result<_>>()?;
    }
    res.checks = checks(res);
    Ok(())
}

/// Most network loss the voice class may see under a weir bandwidth manager.
pub const MAX_VOICE_LOSS: f64 = 0.01;
/// Longest time to establish under a weir bandwidth manager, s.
pub const MAX_ESTABLISH_S: f64 = 2.0;

/// Least MOS of the call under a weir DUT that clamps the MSS (`+mssN`): seed 000's
/// "good" G.729 (its ceiling, R 82.2, is MOS 4.10).
pub const MIN_CLAMPED_MOS: f64 = 3.9;

/// For each weir DUT (the router excluded) and link: the voice class protects the call —
/// network loss at most 1 % and established within 2 s in every run. For a weir DUT that
/// clamps the MSS (`+mssN`), also MOS ≥ [`MIN_CLAMPED_MOS`] in every run: seed 000's
/// finding that only MSS clamping makes the call good on 125 kbit/s. The other DUTs'
/// delay and MOS are reported, not checked.
pub fn checks(res: &VoipResult) -> Vec<Check> {
    let mut out = Vec::new();
    for p in &res.parts {
        for dut in res.config.duts.iter().filter(|d| d.starts_with("weir:")) {
            let rows: Vec<&VoipRow> = p.rows.iter().filter(|r| &r.dut == dut).collect();
            out.push(Check::new(
                format!(
                    "{} {dut}: the call loses <= {:.0} % in the network and is established within {MAX_ESTABLISH_S} s",
                    p.link,
                    MAX_VOICE_LOSS * 100.0
                ),
                !rows.is_empty()
                    && rows.iter().all(|r| {
                        r.voice.net_loss <= MAX_VOICE_LOSS
                            && r.establish_s.is_some_and(|t| t <= MAX_ESTABLISH_S)
                    }),
                rows.len(),
                "runs",
                rows.iter()
                    .map(|r| {
                        format!(
                            "run {}: loss {:.2} %, established in {} s",
                            r.run + 1,
                            r.voice.net_loss * 100.0,
                            fmt_opt(r.establish_s, 1)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
            if matches!(DutSpec::parse(dut), Ok(DutSpec::Weir(_, Some(_)))) {
                let mos = |r: &VoipRow| r.voice.rating.as_ref().map(|x| x.mos);
                out.push(Check::new(
                    format!(
                        "{} {dut}: the clamped call's MOS >= {MIN_CLAMPED_MOS}",
                        p.link
                    ),
                    !rows.is_empty()
                        && rows
                            .iter()
                            .all(|r| mos(r).is_some_and(|m| m >= MIN_CLAMPED_MOS)),
                    rows.len(),
                    "runs",
                    rows.iter()
                        .map(|r| format!("run {}: MOS {}", r.run + 1, fmt_opt(mos(r), 2)))
                        .collect::<Vec<_>>()
                        .join(", "),
                ));
            }
        }
    }
    out
}

const HEAD: [&str; 14] = [
    "DUT / run",
    "sent",
    "net loss %",
    "late %",
    "delay p50",
    "p95",
    "max",
    "jitter",
    "m2e",
    "R",
    "MOS",
    "establish s",
    "FTP kbit/s",
    "agent",
];

fn cells(r: &VoipRow) -> Vec<String> {
    let v = &r.voice;
    let rating = v.rating.as_ref();
    vec![
        format!("{} #{}", r.dut, r.run + 1),
        v.sent.to_string(),
        format!("{:.2}", v.net_loss * 100.0),
        format!("{:.2}", v.buffer_loss * 100.0),
        fmt_opt(v.delay_p50_ms, 1),
        fmt_opt(v.delay_p95_ms, 1),
        fmt_opt(v.delay_max_ms, 1),
        fmt_opt(v.jitter_ms, 2),
        fmt_opt(rating.map(|x| x.delay_ms), 0),
        fmt_opt(rating.map(|x| x.r), 1),
        fmt_opt(Some(rating.map_or(1.0, |x| x.mos)), 2),
        fmt_opt(r.establish_s, 1),
        format!("{:.1}", r.ftp_goodput_bps / 1000.0),
        r.agent_problems.to_string(),
    ]
}

/// The measures table per link, and the checks.
pub fn text(res: &VoipResult) -> String {
    let c = &res.config;
    let mut s = format!(
        "VoIP test (seed 000 Table 6, Fig. 13, Table 7): {n} {cc} FTP sessions from 0 s + one G.729 call\n\
         (RTP, {frame} B frames, 50 packets/s = {l2:.1} kbit/s) from {a} s to {b} s of a {d} s run, {runs} run(s)\n\
         policy: voice class {vc} kbit/s (prio 0), ftp class the rest (prio 1), ftp borrows the voice share while idle\n\
         delay = one-way (send to kernel receive stamp), ms; jitter = RFC 3550 estimator, mean, ms;\n\
         late = discarded by a fixed {buf} ms jitter buffer; m2e = mouth-to-ear delay for the E-model\n\
         (codec 25 + fastest packet + buffer), ms; R, MOS = ITU-T G.107 E-model, G.729A (Ie 11, Bpl 19),\n\
         loss = lost + late; establish = call start -> received rate (500 ms sliding) >= 95 % of 29.6 kbit/s;\n\
         agent = sender/receiver problems (expected 0)\n",
        n = c.ftp_sessions,
        cc = c.cc,
        frame = G729_FRAME,
        l2 = g729_l2_bps() / 1000.0,
        a = c.voice_start_s,
        b = c.voice_stop_s,
        d = c.duration_s,
        runs = c.runs,
        vc = VOICE_CLASS_BPS / 1000,
        buf = c.buffer_ms,
    );
    for p in &res.parts {
        let bps = link_bps(&p.link).unwrap_or(0);
        s += &format!("\nlink {} ({} bit/s)\n", p.link, bps);
        let mut rows = vec![HEAD.iter().map(|x| x.to_string()).collect::<Vec<_>>()];
        rows.extend(p.rows.iter().map(cells));
        s += &text_table(&rows, 1);
    }
    s += "\n";
    s += &checks_text(&res.checks);
    s
}

/// The rows as CSV, one per link, DUT and run.
pub fn csv(res: &VoipResult) -> String {
    let mut s = format!("link,{}\n", HEAD.join(",").replace("DUT / run", "dut"));
    for p in &res.parts {
        for r in &p.rows {
            s += &format!("{},{}\n", p.link, cells(r).join(","));
        }
    }
    s
}

/// Per link: the call's one-way delay per packet against time since the call started, and
/// its MOS per window, one line per DUT (first run).
pub fn charts(res: &VoipResult) -> Vec<(String, String)> {
    let c = &res.config;
    let judge = c.judge();
    let per_window = (c.mos_window_s * 1000.0 / G729_PACKET_MS as f64)
        .round()
        .max(1.0) as u64;
    let mut out = Vec::new();
    for p in &res.parts {
        let mut delay = Vec::new();
        let mut mos = Vec::new();
        for dut in &c.duts {
            let Some(r) = p.runs.iter().find(|r| &r.dut == dut) else {
                continue;
            };
            let Some(call) = r.voice.first() else {
                continue;
            };
            let t0 = call.first_send_ns.unwrap_or(0);
            let mut pts: Vec<(f64, f64)> = call
                .packets
                .iter()
                .map(|k| {
                    (
                        k.tx_ns.saturating_sub(t0) as f64 / 1e9,
                        k.delay_ns() as f64 / 1e6,
                    )
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            delay.push(report::Series::new(dut.clone(), pts));
            mos.push(report::Series::new(
                dut.clone(),
                judge
                    .mos_windows(&call.packets, call.sent, per_window)
                    .into_iter()
                    .map(|(t, m)| (t + c.mos_window_s / 2.0, m))
                    .collect(),
            ));
        }
        out.push((
            format!("delay-{}.svg", p.link),
            report::line_chart(
                &format!(
                    "link {}: one-way delay of the call's packets (run 1)",
                    p.link
                ),
                "time since the call started (s)",
                "one-way delay (ms)",
                &delay,
                &report::ChartOpts {
                    y_include_zero: true,
                    ..Default::default()
                },
            ),
        ));
        out.push((
            format!("mos-{}.svg", p.link),
            report::line_chart(
                &format!(
                    "link {}: E-model MOS per {} s of the call, {} ms jitter buffer (run 1)",
                    p.link, c.mos_window_s, c.buffer_ms
                ),
                "time since the call started (s)",
                "MOS (G.107, G.729A)",
                &mos,
                &report::ChartOpts {
                    y_range: Some((1.0, 4.5)),
                    hlines: vec![(3.6, "MOS 3.6 (R 70, 'some users dissatisfied')".into())],
                    ..Default::default()
                },
            ),
        ));
    }
    out
}

/// Write result.json, table.txt, table.csv, the SVGs and report.html into `dir`.
pub fn write_outputs(res: &VoipResult, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let mut parts: Vec<(&Plan, &[RunOutcome])> = Vec::new();
    for p in &res.parts {
        parts.push((&p.plan, p.runs.as_slice()));
        if let Some(rp) = &p.router_plan {
            parts.push((rp, &[]));
        }
    }
    testbed::Outputs {
        title: "weir lab voip",
        meta: &res.meta,
        json: report::to_json(res)?,
        text_heading: "Voice quality",
        text: text(res),
        extra: vec![("table.csv".into(), csv(res))],
        figs_heading: "Figures",
        charts: charts(res),
        parts,
    }
    .write(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::voice::VoicePacket;
    use crate::tests::testbed::{SessionOutcome, VoiceOutcome};

    #[test]
    fn the_dut_list_puts_the_router_first() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(dut_list(false, Vec::new()).unwrap(), None);
        assert_eq!(dut_list(false, v(&[ROUTER])).unwrap(), Some(v(&[ROUTER])));
        assert_eq!(
            dut_list(false, v(&["kernel:htb", ROUTER])).unwrap(),
            Some(v(&[ROUTER, "kernel:htb"]))
        );
        assert_eq!(
            dut_list(false, v(&["weir:cbq"])).unwrap(),
            Some(v(&["weir:cbq"]))
        );
        // --compare: the router, the testbed's eight, the clamped DUT
        let c = dut_list(true, Vec::new()).unwrap().unwrap();
        assert_eq!(c.len(), 10);
        assert_eq!((c[0].as_str(), c[9].as_str()), (ROUTER, CLAMPED));
        assert_eq!(dut_list(true, v(&[CLAMPED])).unwrap().unwrap().len(), 10);
        assert!(dut_list(false, v(&["nope"])).is_err());
    }

    #[test]
    fn policies_and_plans() {
        let c = VoipConfig::quick();
        c.validate().unwrap();
        let p = plan("125k", false, &c).unwrap();
        let pol = p.policy().unwrap();
        assert_eq!(pol.link_rate, 121_250, "97 % of the line");
        let v = &pol.classes[pol.class_index("voice").unwrap()];
        let f = &pol.classes[pol.class_index("ftp").unwrap()];
        assert_eq!((v.rate, f.rate), (30_000, 91_250));
        assert_eq!(
            (v.ceil, f.ceil),
            (121_250, 121_250),
            "both may borrow the link"
        );
        assert_eq!(p.sessions.len(), 20);
        assert!(p
            .sessions
            .iter()
            .all(|s| s.class == "ftp" && s.cc == "reno"));
        assert_eq!(p.voice[0].class, "voice");
        // the router: one class, everything in it
        let r = plan("t1", true, &c).unwrap();
        let rp = r.policy().unwrap();
        assert_eq!(rp.link_rate, 1_497_680);
        assert_eq!(r.line_bps, Some(1_544_000));
        assert_eq!(rp.leaves().count(), 1);
        assert!(r.sessions.iter().all(|s| s.class == r.voice[0].class));
        // the same addresses under both policies
        assert_eq!(r.sessions[3].src, p.sessions[3].src);
        assert!(link_bps("56k").is_err());
        assert!(spec_of("router:fifo").unwrap().1);
        assert!(spec_of("weir:nope")
            .unwrap_err()
            .to_string()
            .contains(ROUTER));
        let mut bad = c.clone();
        bad.voice_stop_s = 30.0;
        assert!(bad.validate().is_err());
        assert_eq!(plans(&c).unwrap().len(), 2);
    }

    fn run_with(dut: &str, delay_ms: impl Fn(u64) -> Option<u64>) -> RunOutcome {
        let t0 = 1_000_000_000_000u64;
        let sent = 500u64;
        let packets = (0..sent)
            .filter_map(|i| {
                delay_ms(i).map(|d| VoicePacket {
                    seq: i,
                    tx_ns: t0 + i * 20_000_000,
                    rx_ns: t0 + i * 20_000_000 + d * 1_000_000,
                })
            })
            .collect();
        RunOutcome {
            dut: dut.into(),
            run: 0,
            sessions: vec![SessionOutcome {
                name: "ftp-1".into(),
                class: "ftp".into(),
                src: "10.8.2.1".parse().unwrap(),
                cc: "reno".into(),
                bytes: 0,
                goodput_bps: 0.0,
                // 1 kB per 100 ms: 80 kbit/s
                series: vec![1000; 200],
                segs_out: 0,
                data_segs_out: 0,
                retrans: 0,
                min_rtt_ms: 0.0,
                dscp: Vec::new(),
                error: None,
            }],
            dut_report: serde_json::Value::Null,
            wan_report: None,
            seconds: 20.0,
            voice: vec![VoiceOutcome {
                name: "call".into(),
                class: "voice".into(),
                src: "10.8.1.1".parse().unwrap(),
                sent,
                first_send_ns: Some(t0),
                send_errors: 0,
                late_sends: 0,
                socket_drops: 0,
                packets,
                error: None,
            }],
            udp: Vec::new(),
            hosts: Vec::new(),
        }
    }

    /// One link's runs as a finished result.
    fn finished(
        c: VoipConfig,
        plan: Plan,
        runs: Vec<RunOutcome>,
        meta: BTreeMap<String, String>,
    ) -> VoipResult {
        let mut res = VoipResult {
            kind: "voip".into(),
            meta,
            config: c,
            parts: vec![VoipPart {
                link: "125k".into(),
                plan,
                router_plan: None,
                runs,
                rows: Vec::new(),
            }],
            checks: Vec::new(),
        };
        finish(&mut res).unwrap();
        res
    }

    #[test]
    fn rows_checks_and_outputs_from_synthetic_calls() {
        let c = VoipConfig {
            links: vec!["125k".into()],
            duts: vec![ROUTER.into(), "weir:cbq".into(), "weir:cbq+pfq".into()],
            ..VoipConfig::quick()
        };
        let plan = plan("125k", false, &c).unwrap();
        // router: every 5th packet lost, the rest 2 s late; weir:cbq: delays 10..110 ms
        // (HOL blocking behind FTP packets); weir:cbq+pfq: nothing for the first 3 s
        let runs = vec![
            run_with(ROUTER, |i| (i % 5 != 0).then_some(2000)),
            run_with("weir:cbq", |i| Some(10 + (i * 7) % 100)),
            run_with("weir:cbq+pfq", |i| (i >= 150).then_some(10)),
        ];
        let res = finished(c, plan, runs, BTreeMap::new());
        let rows = &res.parts[0].rows;
        // router: 20 % lost, never at 95 % of the rate
        assert!((rows[0].voice.net_loss - 0.2).abs() < 1e-12);
        assert_eq!(rows[0].establish_s, None);
        // weir:cbq: no loss; delays 10..109 ms, late above 70 ms: 39 of every 100
        assert_eq!(rows[1].voice.lost, 0);
        assert!(
            (rows[1].voice.buffer_loss - 0.39).abs() < 0.01,
            "{:?}",
            rows[1].voice
        );
        // established within the first second (the delays spread arrivals over the bins)
        assert!(rows[1].establish_s.unwrap() <= 1.0, "{:?}", rows[1]);
        let mos_cbq = rows[1].voice.rating.unwrap().mos;
        assert!(mos_cbq < 2.5, "39 % late is a bad call: {mos_cbq}");
        // weir:cbq+pfq: established once a whole 500 ms window after 3 s is full
        assert!(
            (rows[2].establish_s.unwrap() - 3.5).abs() < 1e-9,
            "{:?}",
            rows[2]
        );
        assert!((rows[2].ftp_goodput_bps - 80_000.0).abs() < 1e-6);
        // checks: weir DUTs only; cbq passes (no loss, instant), cbq+pfq fails (30 % lost)
        assert_eq!(res.checks.len(), 2);
        assert!(
            res.checks[0].passed && !res.checks[1].passed,
            "{:?}",
            res.checks
        );
        let t = text(&res);
        assert!(
            t.contains("link 125k") && t.contains("router:fifo #1"),
            "{t}"
        );
        assert_eq!(csv(&res).lines().count(), 4);
        let ch = charts(&res);
        assert_eq!(ch.len(), 2);
        assert!(ch[0].0 == "delay-125k.svg" && ch[1].0 == "mos-125k.svg");
        // the JSON round trip re-makes the same text
        let back: VoipResult = serde_json::from_str(&report::to_json(&res).unwrap()).unwrap();
        let mut again = back.clone();
        finish(&mut again).unwrap();
        assert_eq!(text(&again), t);
    }

    /// The testbed's runs as Flent recordings (every testbed lab writes them the same
    /// way), and the files `write_outputs` puts beside result.json.
    #[test]
    fn runs_become_flent_recordings() {
        let c = VoipConfig {
            links: vec!["125k".into()],
            duts: vec!["weir:cbq".into()],
            ..VoipConfig::quick()
        };
        let plan = plan("125k", false, &c).unwrap();
        let runs = vec![run_with("weir:cbq", |i| Some(10 + i % 3))];
        let meta = BTreeMap::from([("unix_time".to_string(), "1795728217".to_string())]);
        let recs = crate::tests::testbed::recordings(&meta, &[(&plan, &runs[..])]);
        assert_eq!(recs.len(), 1);
        let r = &recs[0];
        assert_eq!(
            (r.test.as_str(), r.dut.as_str(), r.run),
            ("tcp_nup", "weir:cbq", 0)
        );
        assert_eq!(r.test_parameters["upload_streams"], "1");
        assert_eq!(r.start_unix_s, 1_795_728_217.0);
        assert_eq!(r.step_s, plan.interval_ms as f64 / 1000.0);
        assert_eq!(r.series[0].name, "TCP upload::1");
        assert_eq!(r.series[0].label, "ftp-1 (ftp) goodput");
        // 1000 B per bin, at each bin's end
        let iv = plan.interval_ms as f64 / 1000.0;
        assert_eq!(r.series[0].points[0], (iv, 1000.0 * 8.0 / iv / 1e6));
        // the call: packet i sent 20 ms apart from the call's start, delay 10 + i % 3 ms
        let call = &r.series[1];
        assert_eq!(
            (call.name.as_str(), call.units.as_str()),
            ("VoIP delay (ms) call", "ms")
        );
        let start = plan.voice[0].start_s;
        assert_eq!(call.points[0], (start, 10.0));
        assert!((call.points[4].0 - (start + 0.08)).abs() < 1e-9);
        assert_eq!(call.points[4].1, 11.0);

        let res = finished(c, plan, runs, meta);
        let dir = std::env::temp_dir().join(format!("weir-voip-flent-{}", std::process::id()));
        let written = write_outputs(&res, &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        let flent = format!(
            "{}-weir_cbq-run1.flent.gz",
            crate::report::file_safe(&res.parts[0].plan.name)
        );
        for n in ["result.json", "series.csv", flent.as_str()] {
            assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
        }
    }
}
