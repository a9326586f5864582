//! Seed 001: the impact of aggregate marking on TCP flows in a DiffServ network.
//!
//! Two customers with equal service profiles — a two-rate three-colour marker (RFC 2698)
//! each, CIR 800 kbit/s (CBS 15 packets), PIR 1.4 Mbit/s (PBS 18 packets), marking AF11 /
//! AF12 / AF13 — send different numbers of TCP flows: **Aggr1** 8, **Aggr2** 2. A
//! background TCP aggregate with the same profile and unbounded best-effort UDP load the
//! core's 10 Mbit/s bottleneck, where CBQ gives the AF class 3 Mbit/s (its ceiling) beside
//! best effort and three-colour RED (seed 001 Table 1: L = 120 kB) manages the AF queue.
//!
//! ```text
//!   snd ──── [edge: weir, the DUT] ──── [core: weir, 10 Mbit/s] ──── rcv
//!   aliases   trTCM per aggregate,       interior: AF 3 Mbit/s       DSCP counter
//!   by subnet AF11/12/13 by colour       (GRED Table 1) + BE         + TCP sink
//! ```
//!
//! * **Edge** ([`edge_policy`], `examples/diffserv-edge.toml` with the testbed's subnets):
//!   `role = "edge"`, one meter per aggregate selected by source subnet (Aggr1
//!   10.77.1.0/24, Aggr2 10.77.2.0/24, background 10.77.3.0/24); best effort keeps DSCP 0.
//! * **Core** ([`core_policy`], `examples/diffserv-core.toml`): `role = "interior"`,
//!   behaviour-aggregate classification by DSCP, AF1x in class `af` (rate = ceil =
//!   3 Mbit/s, GRED with coupled averages), the rest in `be` (7 Mbit/s, borrowing to 10).
//!   It also delays the ACKs by `ack_delay_ms` (the paper does not give its round-trip
//!   time; the queues add the rest).
//! * **Traffic**: the background TCP flows and the UDP flood from 0 s; the ten monitored
//!   flows start together at `monitored_start_s` ("after ten seconds the background
//!   traffic gets stabilized") and run to the end; Reno unless `--cc`; the seed 000 host
//!   settings of the testbed.
//!
//! Per monitored flow, over its life (start to end of the run): **goodput** (what the
//! sink read), **throughput** (TCP payload bytes at the receiver's interface,
//! retransmissions included), **green throughput** (payload carried as AF11) and
//! **excess** (AF12 + AF13). **Utilisation of CIR** = green throughput / the flow's fair
//! share of its aggregate's CIR (CIR / flows in the aggregate). Tables as the paper's:
//! Table 2 per aggregate (mean and standard deviation over the flows of every run, the
//! aggregate throughput over runs), Table 3 Jain's index among the ten flows, Table 4
//! between the two aggregates, each for committed (green), excess and total throughput,
//! mean and standard deviation over runs. Jain among flows of unequal aggregates is taken
//! on each flow's share of its aggregate's profile (value × flows in its aggregate), so
//! that 1 means every flow got an equal part of its own customer's profile.
//!
//! **Two edge markers** ([`Marker`]), each a configuration of the same network, run in
//! turn within each run index:
//! * `aggregate`: the paper's, one RFC 2698 meter per aggregate;
//! * `fair`: weir's flow-fair marker (`share = "flow"`, [`weir_core::meter::fair`]): the
//!   same meters with their committed and peak allowances divided among the aggregate's
//!   active flows, spare tokens lent. Its goal: both aggregates at 95 % of CIR or more
//!   and Jain's index among the flows at 0.98 or more ([`goals`]).
//!
//! Paper mode: 5 runs of 120 s, monitored flows from 10 s. Quick: 1 run of 35 s, from 5 s.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use weir_core::stats::{jain, mean, std_pop};

use super::testbed::{self, DscpBytes, HostTcp, Plan, RunOutcome, SessionPlan, UdpPlan};
use crate::lab::{Lab, Outline};
use crate::report::{self, checks_text, fmt_opt, text_table, Check};
use crate::{Error, Result};

/// The profile of every aggregate (seed 001 section 2).
pub const CIR_BPS: u64 = 800_000;
pub const PIR_BPS: u64 = 1_400_000;
pub const CBS_PACKETS: u32 = 15;
pub const PBS_PACKETS: u32 = 18;
/// The core's bottleneck and the AF class's ceiling.
pub const CORE_BPS: u64 = 10_000_000;
pub const AF_BPS: u64 = 3_000_000;
/// AF11, AF12, AF13 (green, yellow, red).
pub const AF11: u8 = 10;
pub const AF1X_EXCESS: [u8; 2] = [12, 14];
/// Bin of the sink's per-flow series, ms: a flow's life is measured from its first to
/// its last non-empty bin.
pub const BIN_MS: u64 = 100;
/// The monitored aggregates: name, flows, source subnet (third octet).
pub const AGGREGATES: [(&str, usize, u8); 2] = [("aggr1", 8, 1), ("aggr2", 2, 2)];
/// The background TCP aggregate's subnet, and the UDP flood's.
pub const BACKGROUND_NET: u8 = 3;
pub const UDP_NET: u8 = 4;
/// The UDP flood's port at the receiver.
pub const UDP_PORT: u16 = 9000;

/// Seed 001's Tables 2-4 (mean, standard deviation), for the side-by-side printout.
pub mod paper {
    /// Table 2, per aggregate (Aggr1, Aggr2): utilisation of CIR, per-flow goodput and
    /// throughput (kbit/s), aggregate throughput (kbit/s).
    pub const UTILISATION: [(f64, f64); 2] = [(0.80, 0.11), (0.63, 0.02)];
    pub const GOODPUT_KBPS: [(f64, f64); 2] = [(75.3, 28.8), (243.3, 16.1)];
    pub const THROUGHPUT_KBPS: [(f64, f64); 2] = [(78.4, 29.9), (257.6, 16.3)];
    pub const AGGREGATE_KBPS: [(f64, f64); 2] = [(629.9, 21.4), (515.1, 14.5)];
    /// Table 3 (among flows) and Table 4 (between aggregates): committed, excess, total.
    pub const JAIN_FLOWS: [(f64, f64); 3] = [(0.881, 0.022), (0.838, 0.064), (0.890, 0.031)];
    pub const JAIN_AGGREGATES: [(f64, f64); 3] = [(0.984, 0.017), (0.791, 0.026), (0.991, 0.001)];
}

/// The edge router's marker.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Marker {
    /// Seed 001's: one trTCM per aggregate.
    Aggregate,
    /// weir's flow-fair trTCM per aggregate (`share = "flow"`).
    Fair,
}

impl Marker {
    pub const ALL: [Marker; 2] = [Marker::Aggregate, Marker::Fair];

    pub fn name(self) -> &'static str {
        match self {
            Marker::Aggregate => "aggregate",
            Marker::Fair => "fair",
        }
    }

    /// `aggregate`, `fair` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Marker>> {
        match s {
            "aggregate" => Ok(vec![Marker::Aggregate]),
            "fair" => Ok(vec![Marker::Fair]),
            "both" => Ok(Marker::ALL.to_vec()),
            other => Err(Error::Invalid(format!(
                "marker '{other}': expected aggregate (seed 001's trTCM per aggregate), fair \
                 (weir's flow-fair marker) or both"
            ))),
        }
    }
}

fn all_markers() -> Vec<Marker> {
    Marker::ALL.to_vec()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AggregatesConfig {
    /// The edge markers to run, each a configuration.
    #[serde(default = "all_markers")]
    pub markers: Vec<Marker>,
    pub runs: u32,
    pub duration_s: f64,
    /// When the monitored flows start, s.
    pub monitored_start_s: f64,
    /// Flows of the background TCP aggregate.
    pub background_flows: usize,
    /// The best-effort UDP flood, bit/s of frames.
    pub udp_bps: u64,
    /// Delay the core adds to the ACKs, ms.
    pub ack_delay_ms: u64,
    pub cc: String,
    pub busy_poll: bool,
    /// Real hosts instead of namespaces (`--topology FILE`): the edge on this machine
    /// (`[dut]` lan and wan), the core at the topology's `[wan]`.
    #[serde(default)]
    pub topology: Option<crate::remote::Topology>,
}

impl AggregatesConfig {
    pub fn paper() -> Self {
        AggregatesConfig {
            markers: all_markers(),
            runs: 5,
            duration_s: 120.0,
            monitored_start_s: 10.0,
            background_flows: 4,
            udp_bps: CORE_BPS,
            ack_delay_ms: 20,
            cc: "reno".into(),
            busy_poll: false,
            topology: None,
        }
    }

    pub fn quick() -> Self {
        AggregatesConfig {
            runs: 1,
            duration_s: 35.0,
            monitored_start_s: 5.0,
            ..Self::paper()
        }
    }
}

fn net(third: u8) -> String {
    format!("10.77.{third}.0/24")
}

/// The edge router's policy: one trTCM per aggregate, by source subnet; `fair` shares
/// each among its flows.
pub fn edge_policy(marker: Marker) -> String {
    let share = match marker {
        Marker::Aggregate => "",
        Marker::Fair => "share = \"flow\"\n",
    };
    let mut t = String::from(
        "# seed 001's edge router (examples/diffserv-edge.toml on the testbed's subnets)\n\
         [link]\nrate = \"1Gbit\"\nrole = \"edge\"\ndefault = \"be\"\n",
    );
    let groups = AGGREGATES
        .iter()
        .map(|&(n, _, net)| (n, net))
        .chain(std::iter::once(("background", BACKGROUND_NET)));
    let mut rules = String::new();
    for (name, subnet) in groups {
        t += &format!(
            "\n[[meter]]\nname = \"{name}\"\ntype = \"trtcm\"\ncir = \"{CIR_BPS}bit\"\ncbs = \"{CBS_PACKETS}p\"\n\
             pir = \"{PIR_BPS}bit\"\npbs = \"{PBS_PACKETS}p\"\n{share}green = \"af11\"\nyellow = \"af12\"\nred = \"af13\"\n"
        );
        rules += &format!(
            "\n[[rule]]\nname = \"{name}\"\nclass = \"af\"\nsrc = \"{}\"\nmeter = \"{name}\"\n",
            net(subnet)
        );
    }
    t += "\n[[class]]\nname = \"af\"\nrate = \"500Mbit\"\n\n[[class]]\nname = \"be\"\nrate = \"500Mbit\"\n";
    t + &rules
}

/// The core router's policy: AF 3 Mbit/s with seed 001 Table 1's GRED beside best effort
/// on 10 Mbit/s; the ACKs (inbound) delayed by `ack_delay_ms`.
pub fn core_policy(ack_delay_ms: u64, seed: u64) -> String {
    format!(
        "# seed 001's core router (examples/diffserv-core.toml)\n\
         [link]\nrate = \"{CORE_BPS}bit\"\nrole = \"interior\"\ndefault = \"be\"\nemulate = \"acks\"\nseed = {seed}\n\n\
         [[emulate]]\nname = \"acks\"\ndelay = \"{ack_delay_ms}ms\"\ndirection = \"inbound\"\n\n\
         [[class]]\nname = \"af\"\nrate = \"{AF_BPS}bit\"\nceil = \"{AF_BPS}bit\"\nlimit = \"120kB\"\n\n\
         [class.red]\naverage = \"coupled\"\ngentle = false\nwq = 0.002\n\
         green = {{ min = \"45kB\", max = \"90kB\", max_p = 0.02 }}\n\
         yellow = {{ min = \"22.5kB\", max = \"45kB\", max_p = 0.05 }}\n\
         red = {{ min = \"10.5kB\", max = \"22.5kB\", max_p = 0.1 }}\n\n\
         [[class]]\nname = \"be\"\nrate = \"{}bit\"\n\n\
         [[rule]]\nname = \"af1x\"\nclass = \"af\"\ndscp = [\"af11\", \"af12\", \"af13\"]\n",
        CORE_BPS - AF_BPS
    )
}

/// The plan for `marker`: the monitored aggregates, the background aggregate, the UDP
/// flood.
pub fn plan(c: &AggregatesConfig, marker: Marker) -> Result<Plan> {
    if c.background_flows > 253 {
        return Err(Error::Invalid(format!(
            "{} background flows: at most 253 (one /24 of source addresses)",
            c.background_flows
        )));
    }
    let session = |name: String, net: u8, host: usize, start_s: f64| SessionPlan {
        name,
        class: "af".into(),
        src: Ipv4Addr::new(10, 77, net, host as u8),
        cc: c.cc.clone(),
        mss: None,
        rcvbuf: None,
        start_s,
        stop_s: c.duration_s,
        wan: None,
    };
    let mut sessions = Vec::new();
    for (name, n, subnet) in AGGREGATES {
        for k in 1..=n {
            sessions.push(session(
                format!("{name}-{k}"),
                subnet,
                k,
                c.monitored_start_s,
            ));
        }
    }
    for k in 1..=c.background_flows {
        sessions.push(session(format!("background-{k}"), BACKGROUND_NET, k, 0.0));
    }
    let plan = Plan {
        name: format!("aggregates-{}", marker.name()),
        policy_text: edge_policy(marker),
        policy_file: "edge.toml".into(),
        sessions,
        tcp: HostTcp::seed000(),
        duration_s: c.duration_s,
        window_s: (c.monitored_start_s, c.duration_s),
        interval_ms: BIN_MS,
        busy_poll: c.busy_poll,
        voice: Vec::new(),
        line_bps: None,
        udp: vec![UdpPlan {
            name: "be-udp".into(),
            class: "be".into(),
            src: Ipv4Addr::new(10, 77, UDP_NET, 1),
            port: UDP_PORT,
            rate_bps: c.udp_bps,
            frame: 1514,
            start_s: 0.0,
            stop_s: c.duration_s,
        }],
        stage_policy: Some(core_policy(c.ack_delay_ms, 1)),
        count_dscp: true,
        topology: c.topology.clone(),
    };
    plan.validate()?;
    Ok(plan)
}

/// One monitored flow's figures, bit/s over its life.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowRow {
    pub run: u32,
    pub aggregate: String,
    pub name: String,
    pub goodput_bps: f64,
    pub throughput_bps: f64,
    pub green_bps: f64,
    pub excess_bps: f64,
    /// Green throughput / (CIR / flows of the aggregate).
    pub cir_utilisation: f64,
    pub retrans: u64,
    /// From the first to the last data the sink read, s since the run started.
    pub first_s: f64,
    pub last_s: f64,
}

/// When a series of bins of `bin_s` seconds first and last carried data: (start of the
/// first non-empty bin, end of the last), or `None` for an empty series.
pub fn span_s(series: &[u64], bin_s: f64) -> Option<(f64, f64)> {
    let first = series.iter().position(|&b| b > 0)?;
    let last = series.iter().rposition(|&b| b > 0)?;
    Some((first as f64 * bin_s, (last + 1) as f64 * bin_s))
}

/// The monitored flows of one run, each over its own life: a sender writes for the same
/// time from the moment it connected, so a flow whose handshake was slow ends later.
pub fn flow_rows(run: &RunOutcome, bin_s: f64) -> Vec<FlowRow> {
    let mut rows = Vec::new();
    for (agg, n, _) in AGGREGATES {
        let prefix = format!("{agg}-");
        for s in run.sessions.iter().filter(|s| s.name.starts_with(&prefix)) {
            let (first_s, last_s) = span_s(&s.series, bin_s).unwrap_or((0.0, 0.0));
            let life_s = last_s - first_s;
            let bps = |bytes: u64| {
                if life_s > 0.0 {
                    bytes as f64 * 8.0 / life_s
                } else {
                    0.0
                }
            };
            let green = bps(DscpBytes::payload_of(&s.dscp, &[AF11]));
            rows.push(FlowRow {
                run: run.run,
                aggregate: agg.into(),
                name: s.name.clone(),
                goodput_bps: bps(s.bytes),
                throughput_bps: bps(DscpBytes::payload_total(&s.dscp)),
                green_bps: green,
                excess_bps: bps(DscpBytes::payload_of(&s.dscp, &AF1X_EXCESS)),
                cir_utilisation: green / (CIR_BPS as f64 / n as f64),
                retrans: s.retrans,
                first_s,
                last_s,
            });
        }
    }
    rows
}

/// Mean and population standard deviation (`None` when empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeanSd {
    pub mean: Option<f64>,
    pub sd: Option<f64>,
}

impl MeanSd {
    pub fn of(xs: &[f64]) -> MeanSd {
        MeanSd {
            mean: mean(xs),
            sd: if xs.len() > 1 { std_pop(xs) } else { None },
        }
    }
}

/// Table 2's row for one aggregate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateStats {
    pub aggregate: String,
    pub flows: usize,
    pub cir_utilisation: MeanSd,
    pub goodput_bps: MeanSd,
    pub throughput_bps: MeanSd,
    /// The aggregate's throughput (sum over its flows), over runs.
    pub aggregate_bps: MeanSd,
    /// Its green throughput, over runs.
    pub aggregate_green_bps: MeanSd,
}

/// Tables 2-4 from the flows of every run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tables {
    pub aggregates: Vec<AggregateStats>,
    /// Jain among the flows (committed, excess, total), over runs.
    pub jain_flows: [MeanSd; 3],
    /// Jain between the aggregates (committed, excess, total), over runs.
    pub jain_aggregates: [MeanSd; 3],
}

/// The three quantities Jain's index is taken on: committed, excess, total.
const JAIN_OF: [fn(&FlowRow) -> f64; 3] = [|f| f.green_bps, |f| f.excess_bps, |f| f.throughput_bps];

pub fn tables(rows: &[FlowRow]) -> Tables {
    let runs: Vec<u32> = {
        let mut r: Vec<u32> = rows.iter().map(|f| f.run).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let flows_in = |agg: &str| AGGREGATES.iter().find(|a| a.0 == agg).map_or(1, |a| a.1);
    let mut t = Tables::default();
    for (agg, n, _) in AGGREGATES {
        let of: Vec<&FlowRow> = rows.iter().filter(|f| f.aggregate == agg).collect();
        let col = |g: fn(&FlowRow) -> f64| of.iter().map(|f| g(f)).collect::<Vec<f64>>();
        let per_run = |g: fn(&FlowRow) -> f64| {
            runs.iter()
                .map(|r| of.iter().filter(|f| f.run == *r).map(|f| g(f)).sum())
                .collect::<Vec<f64>>()
        };
        t.aggregates.push(AggregateStats {
            aggregate: agg.into(),
            flows: n,
            cir_utilisation: MeanSd::of(&col(|f| f.cir_utilisation)),
            goodput_bps: MeanSd::of(&col(|f| f.goodput_bps)),
            throughput_bps: MeanSd::of(&col(|f| f.throughput_bps)),
            aggregate_bps: MeanSd::of(&per_run(|f| f.throughput_bps)),
            aggregate_green_bps: MeanSd::of(&per_run(|f| f.green_bps)),
        });
    }
    for (k, get) in JAIN_OF.iter().enumerate() {
        let mut among = Vec::new();
        let mut between = Vec::new();
        for r in &runs {
            let of_run: Vec<&FlowRow> = rows.iter().filter(|f| f.run == *r).collect();
            // each flow's share of its own aggregate's profile
            let xs: Vec<f64> = of_run
                .iter()
                .map(|f| get(f) * flows_in(&f.aggregate) as f64)
                .collect();
            among.extend(jain(&xs));
            let sums: Vec<f64> = AGGREGATES
                .iter()
                .map(|(a, _, _)| {
                    of_run
                        .iter()
                        .filter(|f| f.aggregate == *a)
                        .map(|f| get(f))
                        .sum()
                })
                .collect();
            between.extend(jain(&sums));
        }
        t.jain_flows[k] = MeanSd::of(&among);
        t.jain_aggregates[k] = MeanSd::of(&between);
    }
    t
}

/// One configuration (edge marker) of the lab: its plan, runs and tables.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Part {
    pub marker: Marker,
    pub plan: Plan,
    pub runs: Vec<RunOutcome>,
    #[serde(default)]
    pub flows: Vec<FlowRow>,
    #[serde(default)]
    pub tables: Tables,
}

/// A whole run of the lab.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AggregatesResult {
    pub kind: String,
    pub meta: BTreeMap<String, String>,
    pub config: AggregatesConfig,
    pub parts: Vec<Part>,
    #[serde(default)]
    pub checks: Vec<Check>,
    /// The flow-fair marker's goals (reported; not acceptance checks).
    #[serde(default)]
    pub goals: Vec<Check>,
}

/// The DUT of the lab: weir's bridge as the edge router (the policy's own technique).
pub const EDGE_DUT: &str = "weir:cbq";

/// Run every marker's configuration `c.runs` times, the markers in turn within each run
/// index (so that a slow spell of the machine touches both).
pub fn run(c: &AggregatesConfig, progress: &mut dyn FnMut(&str)) -> Result<AggregatesResult> {
    if c.markers.is_empty() {
        return Err(Error::Invalid("no marker to run".into()));
    }
    let mut parts = c
        .markers
        .iter()
        .map(|&m| {
            Ok(Part {
                marker: m,
                plan: plan(c, m)?,
                runs: Vec::new(),
                flows: Vec::new(),
                tables: Tables::default(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = testbed::dut_specs(&[EDGE_DUT.to_string()])?.remove(0);
    for r in 0..c.runs {
        for part in &mut parts {
            crate::check_interrupted()?;
            progress(&format!("marker {}", part.marker.name()));
            part.runs
                .push(testbed::run_plan(&part.plan, &spec, r, progress)?);
        }
    }
    let mut res = AggregatesResult {
        kind: "aggregates".into(),
        meta: report::meta(),
        config: c.clone(),
        parts,
        checks: Vec::new(),
        goals: Vec::new(),
    };
    finish(&mut res);
    Ok(res)
}

/// The lab (`weir lab aggregates`).
pub struct Aggregates;

impl Lab for Aggregates {
    const NAME: &'static str = "aggregates";
    type Config = AggregatesConfig;
    type Result = AggregatesResult;

    fn paper() -> AggregatesConfig {
        AggregatesConfig::paper()
    }

    fn quick() -> AggregatesConfig {
        AggregatesConfig::quick()
    }

    fn plan(&self, c: &AggregatesConfig) -> Result<Outline> {
        for &m in &c.markers {
            plan(c, m)?;
        }
        // the edge is weir on this machine: not an external DUT
        testbed::check_duts(c.topology.as_ref(), &[EDGE_DUT.to_string()])?;
        let n = c.runs as f64 * c.markers.len() as f64;
        Ok(Outline {
            what: format!(
                "{} run(s) of {} s for each of {} marker(s)",
                c.runs,
                c.duration_s,
                c.markers.len()
            ),
            estimate_s: Some(n * (c.duration_s + 6.0)),
        })
    }

    fn run(
        self,
        c: &AggregatesConfig,
        _out: &std::path::Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<AggregatesResult> {
        run(c, progress)
    }

    fn finish(r: &mut AggregatesResult) -> Result<()> {
        finish(r);
        Ok(())
    }

    fn text(r: &AggregatesResult) -> String {
        text(r)
    }

    fn checks(r: &AggregatesResult) -> &[Check] {
        &r.checks
    }

    fn write_outputs(
        r: &AggregatesResult,
        dir: &std::path::Path,
    ) -> Result<Vec<std::path::PathBuf>> {
        write_outputs(r, dir)
    }
}

/// Recompute flows, tables, checks and goals from the runs (also for `weir lab report`).
pub fn finish(res: &mut AggregatesResult) {
    for part in &mut res.parts {
        let bin_s = part.plan.interval_ms as f64 / 1e3;
        part.flows = part.runs.iter().flat_map(|r| flow_rows(r, bin_s)).collect();
        part.tables = tables(&part.flows);
    }
    res.checks = res
        .parts
        .iter()
        .flat_map(|p| checks(p, &res.config))
        .collect();
    res.goals = res
        .parts
        .iter()
        .filter(|p| p.marker == Marker::Fair)
        .flat_map(goals)
        .collect();
}

/// The flow-fair marker's goals: every aggregate at 95 % of its CIR or more (its mean
/// utilisation of CIR), and Jain's index among the flows at 0.98 or more for committed
/// and total throughput (means over runs).
pub fn goals(part: &Part) -> Vec<Check> {
    let t = &part.tables;
    let cells: Vec<(bool, String)> = t
        .aggregates
        .iter()
        .map(|a| {
            let u = a.cir_utilisation.mean;
            (
                u.is_some_and(|u| u >= 0.95),
                format!("{} {}", a.aggregate, fmt_opt(u, 3)),
            )
        })
        .collect();
    let mut out = vec![judged(
        "fair marker: every aggregate >= 95 % of its CIR",
        "aggregates",
        cells,
    )];
    let cells = [(0, "committed"), (2, "total")]
        .iter()
        .map(|&(k, what)| {
            let j = t.jain_flows[k].mean;
            (
                j.is_some_and(|j| j >= 0.98),
                format!("{what} {}", fmt_opt(j, 3)),
            )
        })
        .collect();
    out.push(judged(
        "fair marker: Jain among the flows >= 0.98 (committed, total)",
        "indices",
        cells,
    ));
    out
}

/// Acceptance checks of one marker's configuration (named after it): every monitored
/// flow connected and was measured; the edge never marks more green than an aggregate's
/// profile allows; the core keeps AF within its 3 Mbit/s and best effort gets the rest.
pub fn checks(part: &Part, config: &AggregatesConfig) -> Vec<Check> {
    let bin_s = part.plan.interval_ms as f64 / 1e3;
    let marker = part.marker.name();
    let mut out = Vec::new();
    let broken: Vec<String> = part
        .runs
        .iter()
        .flat_map(|r| r.sessions.iter().map(move |s| (r.run, s)))
        .filter(|(_, s)| s.error.is_some() || s.dscp.is_empty() || s.bytes == 0)
        .map(|(r, s)| {
            format!(
                "run {} {}: {}",
                r + 1,
                s.name,
                s.error.as_deref().unwrap_or("no data")
            )
        })
        .collect();
    let n_sessions: usize = part.runs.iter().map(|r| r.sessions.len()).sum();
    out.push(Check::new(
        format!("{marker}: every TCP flow carried data and was counted at the receiver"),
        broken.is_empty(),
        n_sessions,
        "flows",
        broken.join("; "),
    ));
    // green bytes <= CIR x T + CBS over the aggregate's life T (first to last byte of any
    // of its flows, one bin of slack at either end; payload is less than the frames the
    // meter counts)
    let mut cells = Vec::new();
    for r in &part.runs {
        for (agg, _, _) in AGGREGATES {
            let of: Vec<&FlowRow> = part
                .flows
                .iter()
                .filter(|f| f.run == r.run && f.aggregate == agg && f.last_s > f.first_s)
                .collect();
            let from = of.iter().map(|f| f.first_s).fold(f64::INFINITY, f64::min);
            let to = of.iter().map(|f| f.last_s).fold(0.0, f64::max);
            let green: f64 = of
                .iter()
                .map(|f| f.green_bps * (f.last_s - f.first_s) / 8.0)
                .sum();
            let cap =
                CIR_BPS as f64 / 8.0 * (to - from + 2.0 * bin_s) + CBS_PACKETS as f64 * 1514.0;
            cells.push((
                !of.is_empty() && green <= cap,
                format!(
                    "run {} {agg} {:.0} of {:.0} kB",
                    r.run + 1,
                    green / 1e3,
                    cap / 1e3
                ),
            ));
        }
    }
    out.push(judged(
        &format!("{marker}: green bytes of an aggregate <= CIR x its life + CBS"),
        "aggregates",
        cells,
    ));
    // the core: AF (every TCP flow) within its 3 Mbit/s ceiling over the span the TCP
    // flows ran; best effort carried
    let mut cells = Vec::new();
    for r in &part.runs {
        let spans: Vec<(f64, f64)> = r
            .sessions
            .iter()
            .filter_map(|s| span_s(&s.series, bin_s))
            .collect();
        let from = spans.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
        let to = spans.iter().map(|s| s.1).fold(0.0, f64::max);
        let af_bytes: u64 = r
            .sessions
            .iter()
            .map(|s| DscpBytes::payload_total(&s.dscp))
            .sum();
        let af = af_bytes as f64 * 8.0 / (to - from).max(bin_s);
        let be: f64 = r
            .udp
            .iter()
            .map(|u| u.frame_bytes as f64 * 8.0 / config.duration_s)
            .sum();
        cells.push((
            af <= AF_BPS as f64 * 1.02 && be >= (CORE_BPS - AF_BPS) as f64 * 0.9,
            format!(
                "run {}: AF payload {:.2} Mbit/s, BE frames {:.2} Mbit/s",
                r.run + 1,
                af / 1e6,
                be / 1e6
            ),
        ));
    }
    out.push(judged(
        &format!("{marker}: core: AF <= 3 Mbit/s (+2 %), best effort >= 90 % of its 7 Mbit/s"),
        "runs",
        cells,
    ));
    out
}

/// A check passed when it has cells and every one passed; the detail lists them all.
fn judged(name: &str, unit: &str, cells: Vec<(bool, String)>) -> Check {
    let ok = !cells.is_empty() && cells.iter().all(|c| c.0);
    let detail: Vec<String> = cells.iter().map(|c| c.1.clone()).collect();
    Check::new(name, ok, cells.len(), unit, detail.join("; "))
}

/// Tables 2-4 of every marker beside the paper's, the goals, the flows and the checks, as
/// text.
pub fn text(res: &AggregatesResult) -> String {
    let ms = |m: &MeanSd, scale: f64, d: usize| {
        format!(
            "{} ± {}",
            fmt_opt(m.mean.map(|x| x / scale), d),
            fmt_opt(m.sd.map(|x| x / scale), d)
        )
    };
    let p = |v: (f64, f64), d: usize| format!("{:.d$} ± {:.d$}", v.0, v.1, d = d);
    let c = &res.config;
    let markers: Vec<&str> = res.parts.iter().map(|p| p.marker.name()).collect();
    let mut s = format!(
        "Seed 001, aggregate marking: {} run(s) of {:.0} s, monitored flows from {:.0} s; \
         {} background TCP flows, best-effort UDP at {:.1} Mbit/s, ACKs delayed {} ms, {}; \
         edge markers: {}\n\n\
         Table 2. Measurement results for aggregates (weir per marker | paper)\n",
        c.runs,
        c.duration_s,
        c.monitored_start_s,
        c.background_flows,
        c.udp_bps as f64 / 1e6,
        c.ack_delay_ms,
        c.cc,
        markers.join(", ")
    );
    let mut rows = vec![vec!["".to_string()]];
    for (agg, n, _) in AGGREGATES {
        for m in &markers {
            rows[0].push(format!("{agg} ({n} flows) {m}"));
        }
        rows[0].push("paper".into());
    }
    type Get = fn(&AggregateStats) -> &MeanSd;
    type Line = (&'static str, Get, f64, usize, [(f64, f64); 2]);
    let lines: [Line; 4] = [
        (
            "Utilisation of CIR",
            |a| &a.cir_utilisation,
            1.0,
            2,
            paper::UTILISATION,
        ),
        (
            "Per-flow goodput [kbit/s]",
            |a| &a.goodput_bps,
            1e3,
            1,
            paper::GOODPUT_KBPS,
        ),
        (
            "Per-flow throughput [kbit/s]",
            |a| &a.throughput_bps,
            1e3,
            1,
            paper::THROUGHPUT_KBPS,
        ),
        (
            "Aggregate throughput [kbit/s]",
            |a| &a.aggregate_bps,
            1e3,
            1,
            paper::AGGREGATE_KBPS,
        ),
    ];
    for (label, get, scale, d, pap) in lines {
        let mut row = vec![label.to_string()];
        for (i, _) in AGGREGATES.iter().enumerate() {
            for part in &res.parts {
                let cell = part.tables.aggregates.get(i).map(|a| ms(get(a), scale, d));
                row.push(cell.unwrap_or_else(|| "-".into()));
            }
            row.push(p(pap[i], d));
        }
        rows.push(row);
    }
    s += &text_table(&rows, 1);
    type Jain = fn(&Tables) -> &[MeanSd; 3];
    type Paper = [(f64, f64); 3];
    let jains: [(&str, Jain, Paper); 2] = [
        (
            "Table 3. Jain's index among the ten flows",
            |t| &t.jain_flows,
            paper::JAIN_FLOWS,
        ),
        (
            "Table 4. Jain's index between the aggregates",
            |t| &t.jain_aggregates,
            paper::JAIN_AGGREGATES,
        ),
    ];
    for (title, ours, theirs) in jains {
        s += &format!("\n{title} (weir per marker | paper)\n");
        let mut rows = vec![vec![
            "".to_string(),
            "committed".into(),
            "excess".into(),
            "total".into(),
        ]];
        for part in &res.parts {
            rows.push(
                std::iter::once(format!("weir, {} marker", part.marker.name()))
                    .chain(ours(&part.tables).iter().map(|m| ms(m, 1.0, 3)))
                    .collect(),
            );
        }
        rows.push(
            std::iter::once("paper".to_string())
                .chain(theirs.iter().map(|v| p(*v, 3)))
                .collect(),
        );
        s += &text_table(&rows, 1);
    }
    if !res.goals.is_empty() {
        s += "\nGoals of the flow-fair marker (reported, not acceptance checks):\n";
        s += &checks_text(&res.goals);
    }
    s += "\nPer flow (bit/s over the flow's life):\n";
    let mut rows = vec![vec![
        "marker".to_string(),
        "run".into(),
        "flow".into(),
        "goodput".into(),
        "throughput".into(),
        "green".into(),
        "excess".into(),
        "util. CIR".into(),
        "retrans".into(),
    ]];
    for part in &res.parts {
        for f in &part.flows {
            rows.push(vec![
                part.marker.name().to_string(),
                (f.run + 1).to_string(),
                f.name.clone(),
                format!("{:.0}", f.goodput_bps),
                format!("{:.0}", f.throughput_bps),
                format!("{:.0}", f.green_bps),
                format!("{:.0}", f.excess_bps),
                format!("{:.2}", f.cir_utilisation),
                f.retrans.to_string(),
            ]);
        }
    }
    s += &text_table(&rows, 3);
    s += "\n";
    s += &checks_text(&res.checks);
    s
}

/// Fig. 2 for each marker: per-flow throughput (green and excess) of the first run, the
/// fair share of CIR as reference lines.
pub fn charts(res: &AggregatesResult) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in &res.parts {
        let first: Vec<&FlowRow> = part.flows.iter().filter(|f| f.run == 0).collect();
        if first.is_empty() {
            continue;
        }
        let groups: Vec<String> = first.iter().map(|f| f.name.clone()).collect();
        let series = vec!["green".to_string(), "excess".into(), "total".into()];
        let values: Vec<Vec<Option<(f64, f64)>>> = first
            .iter()
            .map(|f| {
                [f.green_bps, f.excess_bps, f.throughput_bps]
                    .iter()
                    .map(|v| Some((v / 1e3, 0.0)))
                    .collect()
            })
            .collect();
        let opts = report::BarOpts {
            width: 900,
            hlines: AGGREGATES
                .iter()
                .map(|(a, n, _)| {
                    (
                        CIR_BPS as f64 / *n as f64 / 1e3,
                        format!("{a} fair share of CIR"),
                    )
                })
                .collect(),
            ..Default::default()
        };
        let m = part.marker.name();
        out.push((
            format!("fig2-per-flow-throughput-{m}.svg"),
            report::bar_chart(
                &format!("Per-flow throughput, run 1, {m} marker (seed 001 Fig. 2)"),
                "kbit/s",
                &groups,
                &series,
                &values,
                &opts,
            ),
        ));
    }
    out
}

pub fn write_outputs(
    res: &AggregatesResult,
    dir: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    testbed::Outputs {
        title: "weir lab aggregates",
        meta: &res.meta,
        json: report::to_json(res)?,
        text_heading: "Tables 2-4",
        text: text(res),
        extra: Vec::new(),
        figs_heading: "Figures",
        charts: charts(res),
        parts: res
            .parts
            .iter()
            .map(|p| (&p.plan, p.runs.as_slice()))
            .collect(),
    }
    .write(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::policy::Policy;

    #[test]
    fn the_policies_parse_and_the_plan_classifies_every_flow() {
        Policy::parse("edge.toml", &edge_policy(Marker::Aggregate)).unwrap();
        let core = Policy::parse("core.toml", &core_policy(20, 1)).unwrap();
        // the core's AF class is seed 001 Table 1, as the shipped example
        let ex = Policy::parse(
            "diffserv-core.toml",
            include_str!("../../../../examples/diffserv-core.toml"),
        )
        .unwrap();
        let af = |p: &Policy| p.classes[p.class_index("af").unwrap()].clone();
        assert_eq!(format!("{:?}", af(&core).red), format!("{:?}", af(&ex).red));
        let p = plan(&AggregatesConfig::quick(), Marker::Aggregate).unwrap();
        assert_eq!(p.sessions.len(), 8 + 2 + 4);
        // the fair marker shares every aggregate's meter among its flows
        let fair = Policy::parse("edge.toml", &edge_policy(Marker::Fair)).unwrap();
        assert_eq!(fair.meters.len(), 3);
        assert!(fair
            .meters
            .iter()
            .all(|m| m.describe().contains("fair per flow")));
        assert!(Marker::parse_list("fiar").is_err());
        assert_eq!(Marker::parse_list("both").unwrap(), Marker::ALL);
        assert_eq!(p.udp.len(), 1);
    }

    fn row(run: u32, agg: &str, k: usize, green: f64, excess: f64) -> FlowRow {
        let n = AGGREGATES.iter().find(|a| a.0 == agg).unwrap().1;
        FlowRow {
            run,
            aggregate: agg.into(),
            name: format!("{agg}-{k}"),
            goodput_bps: green + excess - 1000.0,
            throughput_bps: green + excess,
            green_bps: green,
            excess_bps: excess,
            cir_utilisation: green / (CIR_BPS as f64 / n as f64),
            retrans: 0,
            first_s: 5.0,
            last_s: 35.0,
        }
    }

    /// Every flow at exactly its share of its aggregate's profile: utilisation 1, Jain 1
    /// among flows and between aggregates; one Aggr1 flow idle: hand-computed indices.
    #[test]
    fn a_flow_lives_from_its_first_to_its_last_bin() {
        assert_eq!(span_s(&[0, 0, 5, 0, 7, 0], 0.1), Some((0.2, 0.5)));
        assert_eq!(span_s(&[0, 0], 0.1), None);
    }

    #[test]
    fn tables_on_hand_computed_flows() {
        let mut rows: Vec<FlowRow> = (1..=8).map(|k| row(0, "aggr1", k, 100e3, 50e3)).collect();
        rows.extend((1..=2).map(|k| row(0, "aggr2", k, 400e3, 200e3)));
        let t = tables(&rows);
        assert_eq!(t.aggregates[0].cir_utilisation.mean, Some(1.0));
        assert_eq!(t.aggregates[1].aggregate_bps.mean, Some(1.2e6));
        assert_eq!(t.aggregates[0].aggregate_bps.sd, None); // one run
        for k in 0..3 {
            assert!((t.jain_flows[k].mean.unwrap() - 1.0).abs() < 1e-12);
            assert!((t.jain_aggregates[k].mean.unwrap() - 1.0).abs() < 1e-12);
        }
        // aggr1-1 gets nothing green: shares 0 and 7 × 800 (×8 flows … same scale) and
        // 2 × 800: Jain = (7·800 + 2·800)² / (10 · (7·800² + 2·800²)) = 81/90 = 0.9
        rows[0].green_bps = 0.0;
        let t = tables(&rows);
        assert!((t.jain_flows[0].mean.unwrap() - 0.9).abs() < 1e-12);
        // between aggregates: 700k vs 800k green: 1.5²/(2·(0.49+0.64)) = 2.25/2.26
        assert!((t.jain_aggregates[0].mean.unwrap() - 2.25 / 2.26).abs() < 1e-12);
        // a second run: mean and sd over the two
        rows.extend((1..=8).map(|k| row(1, "aggr1", k, 100e3, 50e3)));
        rows.extend((1..=2).map(|k| row(1, "aggr2", k, 400e3, 200e3)));
        let t = tables(&rows);
        let m = t.jain_flows[0];
        assert!((m.mean.unwrap() - 0.95).abs() < 1e-12);
        assert!((m.sd.unwrap() - 0.05).abs() < 1e-12);
    }
}
