//! What `weir lab rrul` computes from one run ([`row`]), every figure from the raw run in
//! the result file, so `weir lab report` re-makes it.
//!
//! | figure | definition |
//! |---|---|
//! | latency p50/p90/p99, mean | per probe measure (UDP round trip, UDP one-way up, UDP one-way down, ICMP round trip): the delays of the probes *sent* in the window that were answered, ms; percentiles by numpy's linear rule ([`percentile`]); `loss` = probes sent in the window without a reply |
//! | idle / loaded | the windows `[0.5 s, idle]` and `[idle + warm-up, idle + load]` |
//! | added p50 / p99 | loaded p50 − idle p50, loaded p99 − idle p99 (the latency the load adds) |
//! | grade | the bufferbloat grade (DSLReports, Waveform: [`grade`]) of the mean UDP round trip under load minus its idle mean ("average uplift") |
//! | goodput | per direction, the bytes its flows' sinks read in the loaded window × 8 / its length |
//! | share | goodput / what the rate carries: the rate the DUT shapes the direction to ([`Link::shaped_bps`]) × payload / frame = 1448 / 1514 (MSS 1460 less the 12-byte timestamp option, in a 1514-byte frame; the other direction's ACKs not deducted, so a perfect shaper reads about 97.8 % under `rrul`) |
//! | Jain | Jain's index (Σx)² / (n Σx²) of the flows' goodputs (all flows of the case) |
//! | smoothed RTT mean / max | per flow, over its `TCP_INFO` samples in the loaded window (the sender's `tcpi_rtt`) |
//! | retransmissions | per direction, Σ `tcpi_total_retrans` / Σ `tcpi_data_segs_out` of its senders (whole run) |
//! | stall | a flow that, after its first byte and before the load ends, has a whole second (10 bins) with nothing read: the start of the first such second |
//! | host share | `hosts`: each host's goodput / both hosts' |
//! | calls | `voice`: each call's packets sent in the loaded window, judged as `weir lab voip` does (G.729A, a 60 ms jitter buffer): one-way delay, RFC 3550 jitter, loss, MOS |
//! | DUT counters | summed over the DUT report's counters wherever these keys appear: ECN marks ([`ECN_MARK_KEYS`]), AQM drops ([`AQM_DROP_KEYS`]), ACK-filter drops ([`ACK_FILTER_KEYS`]) (a `{packets, bytes}` object counts its packets); absent when no key is found |
//! | uplink ACK rate | `ackfilter`: the downloads' ACK frames' bytes (IP + 14) counted at the server's interface over the run, × 8 / the load's length |

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::case::{Dir, Host};
use super::policy::Link;
use super::{InfoSeries, PartSpec, ProbeSeries, RrulConfig, RrulRun, BIN_MS};
use crate::agents::voip::G729_PACKET_MS;
use crate::stats::dist::percentile;
use crate::stats::emodel::Codec;
use crate::stats::series::window_goodput;
use crate::stats::voice::{VoiceJudge, VoicePacket, VoiceStats};

/// TCP payload per full segment (MSS 1460 less the 12-byte timestamp option).
pub const PAYLOAD: u64 = 1448;
/// Its Ethernet frame (without FCS).
pub const FRAME: u64 = 1514;
/// The calls' fixed jitter buffer, ms (as `weir lab voip`).
pub const CALL_BUFFER_MS: f64 = 60.0;
/// Keys of the DUT report read as ECN marks, AQM drops and ACK-filter drops.
pub const ECN_MARK_KEYS: [&str; 1] = ["ecn_marks"];
pub const AQM_DROP_KEYS: [&str; 1] = ["aqm_drops"];
pub const ACK_FILTER_KEYS: [&str; 1] = ["ack_filter_drops"];

/// A distribution of delays, ms (`None` without answered probes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lat {
    /// Probes sent in the window, and of those unanswered.
    pub sent: usize,
    pub lost: usize,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Lat {
    /// The summary of `ms` (answered probes) of `sent` sent.
    pub fn of(ms: &[f64], sent: usize) -> Lat {
        let mut v: Vec<f64> = ms.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_unstable_by(f64::total_cmp);
        let p = |q: f64| (!v.is_empty()).then(|| percentile(&v, q));
        Lat {
            sent,
            lost: sent.saturating_sub(v.len()),
            mean_ms: (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
            p50_ms: p(50.0),
            p90_ms: p(90.0),
            p99_ms: p(99.0),
        }
    }
}

/// One probe measure, idle and loaded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyRow {
    /// `udp rtt`, `udp up`, `udp down`, `icmp rtt`.
    pub measure: String,
    pub idle: Lat,
    pub loaded: Lat,
    pub added_p50_ms: Option<f64>,
    pub added_p99_ms: Option<f64>,
}

/// One direction's traffic.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirRow {
    pub flows: usize,
    pub goodput_bps: f64,
    /// The rate the DUT gives the direction, and what it carries of TCP payload.
    pub rate_bps: u64,
    pub carried_bps: f64,
    /// goodput / carried (`None` without flows).
    pub share: Option<f64>,
    pub retrans: u64,
    pub data_segs: u64,
}

/// One flow's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowRow {
    pub name: String,
    pub dir: Dir,
    pub host: Host,
    pub dscp: u8,
    pub goodput_bps: f64,
    pub srtt_mean_ms: Option<f64>,
    pub srtt_max_ms: Option<f64>,
    pub retrans: u64,
    pub data_segs_out: u64,
    pub ecn: bool,
    pub delivered_ce: u64,
    /// The start of its first second without a byte (s since the run's start).
    pub stall_s: Option<f64>,
    pub error: Option<String>,
}

/// A call's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRow {
    pub name: String,
    pub stats: VoiceStats,
}

/// Counters read from the DUT's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DutCounters {
    pub ecn_marks: Option<u64>,
    pub aqm_drops: Option<u64>,
    pub ack_filter_drops: Option<u64>,
}

/// The measures of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RrulRow {
    pub dut: String,
    pub run: u32,
    pub latency: Vec<LatencyRow>,
    /// Mean UDP round trip under load minus idle, ms, and its grade.
    pub added_mean_ms: Option<f64>,
    pub grade: Option<String>,
    pub up: DirRow,
    pub down: DirRow,
    pub jain: Option<f64>,
    pub flows: Vec<FlowRow>,
    /// `hosts`: (host, share of both hosts' goodput).
    pub hosts: Vec<(String, f64)>,
    pub calls: Vec<CallRow>,
    pub counters: DutCounters,
    /// `ackfilter`: the downloads' ACKs on the uplink, bit/s.
    pub ack_up_bps: Option<f64>,
    /// What went wrong in the agents (expected empty).
    pub problems: Vec<String>,
}

impl RrulRow {
    /// A probe measure by name.
    pub fn latency(&self, measure: &str) -> Option<&LatencyRow> {
        self.latency.iter().find(|l| l.measure == measure)
    }

    /// Both directions' goodput, bit/s.
    pub fn total_bps(&self) -> f64 {
        self.up.goodput_bps + self.down.goodput_bps
    }
}

/// The bufferbloat grade of an added round trip (DSLReports' FAQ "Bufferbloat Grades",
/// Waveform's test): A+ below 5 ms, A below 30, B below 60, C below 200, D below 400, F
/// from 400 ms. A negative figure (less delay under load) is A+.
pub fn grade(added_ms: f64) -> &'static str {
    match added_ms {
        x if x < 5.0 => "A+",
        x if x < 30.0 => "A",
        x if x < 60.0 => "B",
        x if x < 200.0 => "C",
        x if x < 400.0 => "D",
        _ => "F",
    }
}

/// What `rate_bps` carries of TCP payload in full segments, bit/s.
pub fn carried_bps(rate_bps: u64) -> f64 {
    rate_bps as f64 * PAYLOAD as f64 / FRAME as f64
}

/// The start (s) of the first whole second without a byte in `series` (bins of `bin_ms`
/// from 0) from the first non-empty bin until `until_s`: a stalled connection.
pub fn stall_s(series: &[u64], bin_ms: u64, until_s: f64) -> Option<f64> {
    let first = series.iter().position(|&b| b > 0)?;
    let per_s = (1000 / bin_ms.max(1)).max(1) as usize;
    let end = ((until_s * 1000.0 / bin_ms as f64).floor() as usize).min(series.len());
    let mut i = first + 1;
    while i + per_s <= end {
        if series[i..i + per_s].iter().all(|&b| b == 0) {
            return Some(i as f64 * bin_ms as f64 / 1000.0);
        }
        i += 1;
    }
    None
}

/// Sum of every value under one of `keys`, anywhere in `v` (numbers, or `{packets, …}`
/// objects); `None` when no key is present.
pub fn counter(v: &Value, keys: &[&str]) -> Option<u64> {
    fn walk(v: &Value, keys: &[&str], sum: &mut Option<u64>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if keys.contains(&k.as_str()) {
                        let n = x
                            .as_u64()
                            .or_else(|| x.get("packets").and_then(Value::as_u64));
                        if let Some(n) = n {
                            *sum = Some(sum.unwrap_or(0) + n);
                            continue;
                        }
                    }
                    walk(x, keys, sum);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, keys, sum)),
            _ => {}
        }
    }
    let mut sum = None;
    walk(v, keys, &mut sum);
    sum
}

/// The delays (ms) of the probes sent within `window` (s), and how many were sent there.
fn in_window(sent_us: &[u64], delays: &[Option<i64>], window: (f64, f64)) -> (Vec<f64>, usize) {
    let (a, b) = ((window.0 * 1e6) as u64, (window.1 * 1e6) as u64);
    let mut v = Vec::new();
    let mut sent = 0;
    for (i, &t) in sent_us.iter().enumerate() {
        if t >= a && t < b {
            sent += 1;
            if let Some(Some(d)) = delays.get(i) {
                v.push(*d as f64 / 1000.0);
            }
        }
    }
    (v, sent)
}

fn latency_row(measure: &str, p: &ProbeSeries, d: &[Option<i64>], c: &RrulConfig) -> LatencyRow {
    let (iv, isent) = in_window(&p.sent_us, d, c.idle_window());
    let (lv, lsent) = in_window(&p.sent_us, d, c.load_window());
    let idle = Lat::of(&iv, isent);
    let loaded = Lat::of(&lv, lsent);
    let sub = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
    LatencyRow {
        measure: measure.into(),
        added_p50_ms: sub(loaded.p50_ms, idle.p50_ms),
        added_p99_ms: sub(loaded.p99_ms, idle.p99_ms),
        idle,
        loaded,
    }
}

/// Mean and max of the smoothed RTT samples (ms) taken within `window` (s).
pub fn srtt_stats(samples: &InfoSeries, window: (f64, f64)) -> (Option<f64>, Option<f64>) {
    let v: Vec<f64> = samples
        .t_ms
        .iter()
        .zip(&samples.srtt_us)
        .filter(|&(&t, &r)| {
            let t = f64::from(t) / 1000.0;
            t >= window.0 && t < window.1 && r > 0
        })
        .map(|(_, &r)| f64::from(r) / 1000.0)
        .collect();
    if v.is_empty() {
        return (None, None);
    }
    (
        Some(v.iter().sum::<f64>() / v.len() as f64),
        v.iter().copied().reduce(f64::max),
    )
}

/// A call's packets sent in `window` (s since `t0_ns`), renumbered from 0, and how many
/// were sent there (packet i leaves at first + i × 20 ms).
fn call_window(
    packets: &[VoicePacket],
    first_ns: u64,
    sent: u64,
    t0_ns: u64,
    window: (f64, f64),
) -> (Vec<VoicePacket>, u64) {
    let period = G729_PACKET_MS * 1_000_000;
    let at = |s: f64| t0_ns as f64 + s * 1e9;
    let idx = |t: f64| ((t - first_ns as f64) / period as f64).ceil().max(0.0) as u64;
    let (i0, i1) = (idx(at(window.0)).min(sent), idx(at(window.1)).min(sent));
    let v = packets
        .iter()
        .filter(|p| p.seq >= i0 && p.seq < i1)
        .map(|p| VoicePacket {
            seq: p.seq - i0,
            ..*p
        })
        .collect();
    (v, i1 - i0)
}

/// The measures of one run.
pub fn row(c: &RrulConfig, spec: &PartSpec, r: &RrulRun) -> RrulRow {
    let window = c.load_window();
    let shapes = super::DutKind::parse(&r.dut).is_ok_and(|k| k.shapes());
    let mut problems = Vec::new();
    let mut latency = Vec::new();
    for p in &r.probes {
        let kind = p.kind.map_or("?", |k| k.name());
        if let Some(e) = &p.error {
            problems.push(format!("{kind} prober: {e}"));
        }
        latency.push(latency_row(&format!("{kind} rtt"), p, &p.rtt_us, c));
        if !p.up_us.is_empty() {
            latency.push(latency_row(&format!("{kind} up"), p, &p.up_us, c));
            latency.push(latency_row(&format!("{kind} down"), p, &p.down_us, c));
        }
    }
    let added_mean_ms = latency
        .iter()
        .find(|l| l.measure == "udp rtt")
        .and_then(|l| Some(l.loaded.mean_ms? - l.idle.mean_ms?));
    let flows: Vec<FlowRow> = r
        .flows
        .iter()
        .map(|f| {
            if let Some(e) = &f.error {
                problems.push(format!("{}: {e}", f.name));
            }
            let (srtt_mean_ms, srtt_max_ms) = srtt_stats(&f.samples, window);
            FlowRow {
                name: f.name.clone(),
                dir: f.dir,
                host: f.host,
                dscp: f.dscp,
                goodput_bps: window_goodput(&f.series, BIN_MS, window),
                srtt_mean_ms,
                srtt_max_ms,
                retrans: f.retrans,
                data_segs_out: f.data_segs_out,
                ecn: f.ecn,
                delivered_ce: f.delivered_ce,
                stall_s: stall_s(&f.series, BIN_MS, c.idle_s + c.load_s),
                error: f.error.clone(),
            }
        })
        .collect();
    let dir_row = |d: Dir| {
        let of: Vec<&FlowRow> = flows.iter().filter(|f| f.dir == d).collect();
        let rate_bps = spec.link.bottleneck_bps(d == Dir::Up, shapes);
        let goodput_bps: f64 = of.iter().map(|f| f.goodput_bps).sum();
        let carried = carried_bps(rate_bps);
        DirRow {
            flows: of.len(),
            goodput_bps,
            rate_bps,
            carried_bps: carried,
            share: (!of.is_empty()).then(|| goodput_bps / carried),
            retrans: of.iter().map(|f| f.retrans).sum(),
            data_segs: of.iter().map(|f| f.data_segs_out).sum(),
        }
    };
    let goodputs: Vec<f64> = flows.iter().map(|f| f.goodput_bps).collect();
    let hosts = {
        let of = |h: Host| -> f64 {
            flows
                .iter()
                .filter(|f| f.host == h)
                .map(|f| f.goodput_bps)
                .sum()
        };
        let (a, b) = (of(Host::A), of(Host::B));
        if flows.iter().any(|f| f.host != Host::Client) && a + b > 0.0 {
            vec![
                ("A".to_string(), a / (a + b)),
                ("B".to_string(), b / (a + b)),
            ]
        } else {
            Vec::new()
        }
    };
    let judge = VoiceJudge {
        period_ns: G729_PACKET_MS as f64 * 1e6,
        buffer_ns: (CALL_BUFFER_MS * 1e6) as i64,
        codec: Codec::G729A,
    };
    let calls = r
        .calls
        .iter()
        .map(|call| {
            if let Some(e) = &call.error {
                problems.push(format!("{}: {e}", call.name));
            }
            let (pk, sent) = match call.first_send_ns {
                Some(f) => call_window(&call.packets, f, call.sent, r.t0_ns, window),
                None => (Vec::new(), 0),
            };
            CallRow {
                name: call.name.clone(),
                stats: judge.stats(&pk, sent),
            }
        })
        .collect();
    let counters_json = &r.dut_report["counters"];
    if let Some(errs) = r.dut_report["errors"].as_array() {
        problems.extend(
            errs.iter()
                .filter_map(Value::as_str)
                .map(|e| format!("DUT: {e}")),
        );
    }
    RrulRow {
        dut: r.dut.clone(),
        run: r.run,
        grade: added_mean_ms.map(|a| grade(a).to_string()),
        added_mean_ms,
        latency,
        up: dir_row(Dir::Up),
        down: dir_row(Dir::Down),
        jain: weir_core::stats::jain(&goodputs),
        hosts,
        calls,
        counters: DutCounters {
            ecn_marks: counter(counters_json, &ECN_MARK_KEYS),
            aqm_drops: counter(counters_json, &AQM_DROP_KEYS),
            ack_filter_drops: counter(counters_json, &ACK_FILTER_KEYS),
        },
        ack_up_bps: r.ack_bytes.map(|b| b as f64 * 8.0 / c.load_s),
        flows,
        problems,
    }
}

/// The link as the lab prints it, for a part's heading.
pub fn rates_text(l: &Link) -> String {
    use crate::tests::robustness::rate_text;
    if l.symmetric() {
        format!(
            "the DUT shapes {} each way, the line behind it runs at {}",
            rate_text(l.up_bps),
            rate_text(l.line_bps(true))
        )
    } else {
        format!(
            "the DUT shapes the uplink to {} (the line: {}); the downlink is the line's, {} (one rate per policy)",
            rate_text(l.up_bps),
            rate_text(l.line_bps(true)),
            rate_text(l.line_bps(false))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grades_follow_dslreports() {
        // DSLReports FAQ 17930: A+ < 5 ms, A < 30, B < 60, C < 200, D < 400, F beyond
        for (ms, g) in [
            (-1.0, "A+"),
            (0.0, "A+"),
            (4.99, "A+"),
            (5.0, "A"),
            (29.9, "A"),
            (30.0, "B"),
            (59.0, "B"),
            (60.0, "C"),
            (199.0, "C"),
            (200.0, "D"),
            (399.9, "D"),
            (400.0, "F"),
            (3000.0, "F"),
        ] {
            assert_eq!(grade(ms), g, "{ms}");
        }
    }

    #[test]
    fn carried_rate_of_full_segments() {
        // 9.5 Mbit/s × 1448 / 1514 = 9 085 865.3 bit/s
        assert!((carried_bps(9_500_000) - 9_085_865.257_595_773).abs() < 1e-6);
    }

    #[test]
    fn latency_summary_by_hand() {
        // 1..=10 ms of 12 sent: mean 5.5, p50 5.5, p90 9.1, p99 9.91 (numpy linear)
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let l = Lat::of(&v, 12);
        assert_eq!((l.sent, l.lost), (12, 2));
        assert_eq!(l.mean_ms, Some(5.5));
        assert_eq!(l.p50_ms, Some(5.5));
        assert!((l.p90_ms.unwrap() - 9.1).abs() < 1e-12);
        assert!((l.p99_ms.unwrap() - 9.91).abs() < 1e-12);
        let none = Lat::of(&[], 3);
        assert_eq!((none.lost, none.p50_ms), (3, None));
    }

    #[test]
    fn probes_are_taken_by_their_send_time() {
        // sent at 0.4, 1.0, 1.5, 2.0 s; the one at 1.5 s unanswered
        let sent = [400_000, 1_000_000, 1_500_000, 2_000_000];
        let d = [Some(1000), Some(2000), None, Some(4000)];
        let (v, n) = in_window(&sent, &d, (0.5, 2.0));
        assert_eq!((v, n), (vec![2.0], 2));
    }

    #[test]
    fn stalls_are_whole_seconds_without_a_byte() {
        // 100 ms bins: data from bin 3, nothing in bins 10..=19, data again from 20
        let mut s = vec![0u64; 40];
        for (i, b) in s.iter_mut().enumerate() {
            if (3..10).contains(&i) || i >= 20 {
                *b = 1000;
            }
        }
        assert_eq!(stall_s(&s, 100, 4.0), Some(1.0));
        // a 0.9 s gap is not a stall
        s[10] = 1;
        assert_eq!(stall_s(&s, 100, 4.0), None);
        // silence before the first byte is not a stall; nor is silence after `until`
        let late = [
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(stall_s(&late, 100, 1.4), None);
        assert_eq!(stall_s(&late, 100, 2.4), Some(1.4));
        assert_eq!(stall_s(&[0, 0], 100, 1.0), None);
    }

    #[test]
    fn counters_are_found_anywhere() {
        let v = json!({
            "outbound": { "queue": { "ecn_marks": 7, "aqm_drops": { "packets": 2, "bytes": 3028 } } },
            "inbound": [ { "ecn_marks": 3 } ],
        });
        assert_eq!(counter(&v, &ECN_MARK_KEYS), Some(10));
        assert_eq!(counter(&v, &AQM_DROP_KEYS), Some(2));
        assert_eq!(counter(&v, &ACK_FILTER_KEYS), None);
        assert_eq!(counter(&Value::Null, &ECN_MARK_KEYS), None);
    }

    #[test]
    fn srtt_over_the_window() {
        let s = |t_ms: u64, srtt_ms: u32| crate::agents::InfoSample {
            t_us: t_ms * 1000,
            srtt_us: srtt_ms * 1000,
            cwnd: 10,
            retrans: 0,
            delivered_ce: 0,
        };
        let v = InfoSeries::of(&[s(500, 90), s(1000, 52), s(1500, 58), s(2000, 200)]);
        assert_eq!(v.t_ms, [500, 1000, 1500, 2000]);
        assert_eq!(srtt_stats(&v, (1.0, 2.0)), (Some(55.0), Some(58.0)));
        assert_eq!(srtt_stats(&v, (3.0, 4.0)), (None, None));
    }

    #[test]
    fn calls_are_cut_to_the_window() {
        // t0 = 0; packet i sent at 1 s + i × 20 ms; window 2..3 s is packets 50..100
        let first = 1_000_000_000u64;
        let pk: Vec<VoicePacket> = (0..150)
            .filter(|i| i % 10 != 0)
            .map(|i| VoicePacket {
                seq: i,
                tx_ns: first + i * 20_000_000,
                rx_ns: first + i * 20_000_000 + 5_000_000,
            })
            .collect();
        let (v, sent) = call_window(&pk, first, 150, 0, (2.0, 3.0));
        assert_eq!(sent, 50);
        assert_eq!(v.len(), 45, "every 10th lost");
        assert_eq!(v[0].seq, 1, "renumbered from packet 50 (lost)");
    }
}
