//! `GET /metrics`: the running weir's statistics document (the JSON of `weir stats
//! --json`) as Prometheus metrics, in the OpenMetrics text format (prometheus-client).
//!
//! Every scrape builds a fresh registry from the newest document, so a counter is the
//! value weir counted, never a difference the web server kept. Names follow the
//! Prometheus conventions: a `weir_` prefix, the unit in the name (`_bytes`,
//! `_packets`, `_bits_per_second`, `_seconds`), `_total` on counters (added by the
//! encoder). Labels: `direction` (`outbound`, `inbound`), `class`, `parent`, `rule`,
//! `emulator`, `cause` (why a packet was dropped). A leaf whose queue has an AQM or flow
//! queuing adds `weir_queue_*` (ECN marks, AQM and ACK-filter drops, flows) with its
//! class's labels, and a leaf's TCP health `weir_class_tcp_rtt_seconds` (a histogram
//! with weir's fixed buckets) and `weir_class_tcp_retransmits_total`. The metric list is
//! in docs/web.md.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use weir_core::snapshot::{AqmSnapshot, PipelineSnapshot, QueueSnapshot};

type Labels = Vec<(String, String)>;
type Float = Gauge<f64, AtomicU64>;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The families of one scrape, registered on first use (histograms when the scrape is
/// encoded).
#[derive(Default)]
struct Metrics {
    reg: Registry,
    counters: HashMap<&'static str, Family<Labels, Counter>>,
    gauges: HashMap<&'static str, Family<Labels, Float>>,
    histograms: Vec<(&'static str, &'static str, Histograms)>,
}

/// One histogram: its labels, sum, count and per-bucket (upper bound, count), not
/// cumulative (the encoder accumulates), the last bound +Inf.
type FixedHistogram = (Labels, f64, u64, Vec<(f64, u64)>);

/// A family of histograms whose buckets weir counted (prometheus-client's own
/// `Histogram` only observes values one at a time).
#[derive(Debug, Default)]
struct Histograms(Vec<FixedHistogram>);

impl EncodeMetric for Histograms {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, sum, count, buckets) in &self.0 {
            encoder
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Metrics {
    fn counter(&mut self, name: &'static str, help: &str, labels: &Labels, v: u64) {
        let reg = &mut self.reg;
        let f = self.counters.entry(name).or_insert_with(|| {
            let f = Family::<Labels, Counter>::default();
            reg.register(name, help, f.clone());
            f
        });
        f.get_or_create(labels).inc_by(v);
    }

    fn gauge(&mut self, name: &'static str, help: &str, labels: &Labels, v: f64) {
        let reg = &mut self.reg;
        let f = self.gauges.entry(name).or_insert_with(|| {
            let f = Family::<Labels, Float>::default();
            reg.register(name, help, f.clone());
            f
        });
        f.get_or_create(labels).set(v);
    }

    /// A histogram `name` with `labels` whose per-bucket counts are `counts` (the last
    /// +Inf) for the upper bounds `bounds` divided by `per` (µs → s: 1e6; a division, so
    /// that 500 µs prints as 0.0005), and whose sum is `sum`, already in the unit.
    fn histogram(
        &mut self,
        (name, help): (&'static str, &'static str),
        labels: &Labels,
        bounds: &[u32],
        per: f64,
        counts: &[u64],
        sum: f64,
    ) {
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            .map(|(i, &n)| (bounds.get(i).map_or(f64::INFINITY, |&b| b as f64 / per), n))
            .collect();
        let count = counts.iter().sum();
        let at = match self.histograms.iter().position(|h| h.0 == name) {
            Some(i) => i,
            None => {
                self.histograms.push((name, help, Histograms::default()));
                self.histograms.len() - 1
            }
        };
        self.histograms[at]
            .2
             .0
            .push((labels.clone(), sum, count, buckets));
    }

    /// A `Count`'s packets and bytes as `{name}_packets_total` and `{name}_bytes_total`.
    fn count(
        &mut self,
        (packets, bytes): (&'static str, &'static str),
        help: &str,
        labels: &Labels,
        c: &Value,
    ) {
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        self.counter(packets, &format!("{help}, packets"), labels, n("packets"));
        self.counter(bytes, &format!("{help}, bytes"), labels, n("bytes"));
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The metrics of statistics document `doc`; an error says what in it is malformed.
pub fn render(doc: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(doc).map_err(|e| format!("statistics document: {e}"))?;
    let mut m = Metrics::default();
    let none = Labels::new();
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    m.gauge(
        "weir_uptime_seconds",
        "Time since weir started forwarding",
        &none,
        v["uptime_s"].as_f64().unwrap_or(0.0),
    );
    let p = &v["policy"];
    let src = labels(&[("source", p["source"].as_str().unwrap_or(""))]);
    m.gauge(
        "weir_policy_generation",
        "The running policy's generation (1 + reloads)",
        &src,
        num(&p["generation"]) as f64,
    );
    m.counter(
        "weir_policy_reloads",
        "Policies reloaded",
        &none,
        num(&p["reloads"]),
    );
    m.counter(
        "weir_policy_reloads_refused",
        "Reloads refused (an invalid policy; the running one stayed)",
        &none,
        num(&p["reloads_refused"]),
    );
    for w in v["workers"].as_array().into_iter().flatten() {
        let worker = w["worker"].to_string();
        for (dir, k) in [("outbound", "outbound_rx"), ("inbound", "inbound_rx")] {
            m.counter(
                "weir_worker_rx_packets",
                "Frames a worker read (`weir run --workers`), per direction",
                &labels(&[("worker", &worker), ("direction", dir)]),
                num(&w[k]["packets"]),
            );
        }
    }
    for side in ["lan", "wan"] {
        if let Some(n) = v["unsteered"][side].as_u64() {
            m.counter(
                "weir_fanout_unsteered",
                "Frames the fanout program sent to worker 0 for want of a circuit",
                &labels(&[("side", side)]),
                n,
            );
        }
    }
    let c = &v["connections"];
    if c.is_object() {
        m.gauge(
            "weir_connections",
            "Connections in the connection table",
            &none,
            num(&c["live"]) as f64,
        );
        m.gauge(
            "weir_connections_capacity",
            "Size of the connection table",
            &none,
            num(&c["capacity"]) as f64,
        );
        for (name, k, help) in [
            (
                "weir_connections_inserted",
                "inserted",
                "Connections the table inserted",
            ),
            (
                "weir_connections_evicted",
                "evicted",
                "Connections evicted to make room",
            ),
            (
                "weir_connections_expired",
                "expired",
                "Connections that timed out",
            ),
        ] {
            m.counter(name, help, &none, num(&c[k]));
        }
    }
    if let Ok(a) = serde_json::from_value::<weir_core::device::AdaptSnapshot>(v["adapt"].clone()) {
        let mode = labels(&[("mode", &a.mode)]);
        m.gauge(
            "weir_adapt_rate_bits_per_second",
            "The adaptive controller's link rate",
            &mode,
            a.rate_bps as f64,
        );
        m.gauge(
            "weir_adapt_rate_fraction",
            "The adaptive controller's link rate as a fraction of the line (Postgate's B)",
            &mode,
            a.rate_fraction,
        );
        if let Some(d) = a.delay_ms {
            m.gauge(
                "weir_adapt_delay_seconds",
                "The newest queueing delay the controller measured",
                &mode,
                d / 1e3,
            );
        }
        m.gauge(
            "weir_adapt_fallback",
            "1 while replies stopped and the link is at its floor",
            &mode,
            f64::from(u8::from(a.fallback)),
        );
        m.counter(
            "weir_adapt_probes",
            "Probes sent",
            &mode,
            a.counters.probes_sent,
        );
        m.counter(
            "weir_adapt_replies",
            "Probe replies",
            &mode,
            a.counters.replies,
        );
    }
    for dir in ["outbound", "inbound"] {
        let d = labels(&[("direction", dir)]);
        let lane = &v[dir]["lane"];
        m.count(
            ("weir_rx_packets", "weir_rx_bytes"),
            "Frames received",
            &d,
            &lane["rx"],
        );
        m.count(
            ("weir_tx_packets", "weir_tx_bytes"),
            "Frames sent",
            &d,
            &lane["tx"],
        );
        m.count(
            ("weir_dropped_packets", "weir_dropped_bytes"),
            "Frames the policy dropped",
            &d,
            &lane["dropped"],
        );
        m.counter(
            "weir_kernel_rx_drops",
            "Frames the kernel's receive ring dropped",
            &d,
            num(&lane["kernel_rx_drops"]),
        );
        m.count(
            ("weir_oversize_packets", "weir_oversize_bytes"),
            "Frames longer than the outgoing interface's MTU, dropped",
            &d,
            &lane["oversize"],
        );
        let pmtu = &lane["pmtu"];
        for (kind, key) in [
            ("frag_needed", "frag_needed"),
            ("packet_too_big", "packet_too_big"),
        ] {
            m.counter(
                "weir_pmtu_replies",
                "ICMP replies sent to the senders of frames over the MTU",
                &labels(&[("direction", dir), ("kind", kind)]),
                num(&pmtu[key]["packets"]),
            );
        }
        for reason in ["rate_limited", "df_clear", "not_answered"] {
            m.counter(
                "weir_pmtu_unanswered",
                "Frames over the MTU whose sender got no ICMP reply",
                &labels(&[("direction", dir), ("reason", reason)]),
                num(&pmtu[reason]),
            );
        }
        match &v[dir]["pipeline"] {
            Value::Null => {}
            p => {
                let snap: PipelineSnapshot = serde_json::from_value(p.clone())
                    .map_err(|e| format!("statistics document, {dir}.pipeline: {e}"))?;
                pipeline(&mut m, dir, &snap);
            }
        }
    }
    for (name, help, h) in std::mem::take(&mut m.histograms) {
        m.reg.register(name, help, h);
    }
    let mut out = String::new();
    encode(&mut out, &m.reg).map_err(|e| format!("encoding the metrics: {e}"))?;
    Ok(out)
}

fn pipeline(m: &mut Metrics, dir: &str, s: &PipelineSnapshot) {
    for c in &s.classes {
        let l = labels(&[
            ("direction", dir),
            ("class", &c.name),
            ("parent", c.parent.as_deref().unwrap_or("")),
        ]);
        m.counter(
            "weir_class_sent_packets",
            "Packets a class sent",
            &l,
            c.sent.packets,
        );
        m.counter(
            "weir_class_sent_bytes",
            "Bytes a class sent",
            &l,
            c.sent.bytes,
        );
        m.gauge(
            "weir_class_rate_bits_per_second",
            "A class's current rate (the last second)",
            &l,
            c.rate_now_bps,
        );
        m.gauge(
            "weir_class_assured_rate_bits_per_second",
            "A class's assured rate",
            &l,
            c.rate_bps as f64,
        );
        m.gauge(
            "weir_class_ceil_bits_per_second",
            "A class's ceiling",
            &l,
            c.ceil_bps as f64,
        );
        m.counter(
            "weir_class_sent_own_rate_packets",
            "Packets a class sent on its own assured rate",
            &l,
            c.lends,
        );
        m.counter(
            "weir_class_sent_borrowed_packets",
            "Packets a class sent on bandwidth an ancestor lent",
            &l,
            c.borrows,
        );
        m.counter(
            "weir_class_overlimits",
            "Times a class went over its ceiling",
            &l,
            c.overlimits,
        );
        if let Some(q) = &c.queue {
            queue(m, CLASS_QUEUE, &l, q);
            if let Some(a) = &q.aqm {
                aqm(m, &l, a);
            }
        }
        if let Some(t) = &c.tcp {
            if t.rtt.counts.len() == s.rtt_bounds_us.len() + 1 {
                m.histogram(
                    (
                        "weir_class_tcp_rtt_seconds",
                        "End-to-end RTT samples of a class's TCP connections, taken by weir",
                    ),
                    &l,
                    &s.rtt_bounds_us,
                    1e6,
                    &t.rtt.counts,
                    t.rtt.sum_us as f64 / 1e6,
                );
            }
            m.counter(
                "weir_class_tcp_retransmits",
                "A class's TCP segments that carried sequence space already sent",
                &l,
                t.retransmits,
            );
        }
    }
    for r in &s.rules {
        let l = labels(&[("direction", dir), ("rule", &r.name), ("class", &r.class)]);
        m.counter(
            "weir_rule_hits_packets",
            "Packets a rule classified",
            &l,
            r.hits.packets,
        );
        m.counter(
            "weir_rule_hits_bytes",
            "Bytes a rule classified",
            &l,
            r.hits.bytes,
        );
    }
    for e in &s.emulators {
        let l = labels(&[("direction", dir), ("emulator", &e.name)]);
        queue(m, EMULATOR_QUEUE, &l, &e.queue);
        m.counter(
            "weir_emulator_lost_packets",
            "Packets the emulated link lost",
            &l,
            e.counters.lost.packets,
        );
    }
}

/// The metric names of a class's and an emulator's queue: backlog (packets, bytes),
/// drops (packets, bytes).
const CLASS_QUEUE: [&str; 4] = [
    "weir_class_queue_packets",
    "weir_class_queue_bytes",
    "weir_class_dropped_packets",
    "weir_class_dropped_bytes",
];
const EMULATOR_QUEUE: [&str; 4] = [
    "weir_emulator_queue_packets",
    "weir_emulator_queue_bytes",
    "weir_emulator_dropped_packets",
    "weir_emulator_dropped_bytes",
];

/// The counters of a leaf queue with an AQM or flow queuing.
fn aqm(m: &mut Metrics, l: &Labels, a: &AqmSnapshot) {
    for (name, help, v) in [
        (
            "weir_queue_ecn_marks",
            "Packets a leaf's AQM signalled with an ECN CE mark (not drops)",
            a.ecn_marks,
        ),
        (
            "weir_queue_aqm_drops",
            "Packets a leaf's AQM dropped (CoDel, COBALT)",
            a.aqm_drops,
        ),
        (
            "weir_queue_ack_filter_drops",
            "Pure ACKs a leaf's ACK filter dropped",
            a.ack_filter_drops,
        ),
        (
            "weir_queue_unmarkable",
            "AQM signals on packets whose headers could not be read (sent unchanged)",
            a.unmarkable,
        ),
        (
            "weir_queue_new_flows",
            "Flows that entered a leaf's new-flow list",
            a.new_flows,
        ),
    ] {
        m.counter(name, help, l, v);
    }
    for (name, help, v) in [
        (
            "weir_queue_flows",
            "Flows holding packets in a leaf's flow queue",
            a.flows,
        ),
        (
            "weir_queue_flows_max",
            "The most flows that held packets at once in a leaf's flow queue",
            a.max_flows,
        ),
        (
            "weir_queue_sparse_flows",
            "Flows in a leaf's new-flow (sparse) list",
            a.sparse_flows,
        ),
        (
            "weir_queue_bulk_flows",
            "Flows in a leaf's old-flow (bulk) list",
            a.bulk_flows,
        ),
    ] {
        m.gauge(name, help, l, f64::from(v));
    }
}

/// A queue's backlog and its drops by cause, under `names`.
fn queue(m: &mut Metrics, [qp, qb, dp, db]: [&'static str; 4], l: &Labels, q: &QueueSnapshot) {
    m.gauge(qp, "Packets queued", l, q.packets as f64);
    m.gauge(qb, "Bytes queued", l, q.bytes as f64);
    for (cause, c) in &q.drops {
        let mut l = l.clone();
        l.push(("cause".into(), cause.clone()));
        m.counter(dp, "Packets dropped, by cause", &l, c.packets);
        m.counter(db, "Bytes dropped, by cause", &l, c.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A statistics document with one outbound pipeline: `link` → leaves `fq` (with AQM
    /// counters) and `fifo` (without).
    fn doc() -> String {
        let count = |p: u64, b: u64| json!({ "packets": p, "bytes": b });
        let queue = |aqm: Option<Value>| {
            let mut q = json!({
                "packets": 2, "bytes": 3000,
                "received": count(100, 150_000), "enqueued": count(100, 150_000),
                "dequeued": count(91, 136_500), "dropped_on_enqueue": count(0, 0),
                "dropped_later": count(7, 10_500),
                "drops": { "aqm": count(4, 6000), "ack_filter": count(3, 4500) },
            });
            if let Some(a) = aqm {
                q["aqm"] = a;
            }
            q
        };
        let class = |name: &str, parent: Value, q: Value| {
            json!({
                "name": name, "parent": parent, "leaf": !q.is_null(),
                "rate_bps": 1_000_000, "ceil_bps": 1_000_000, "sent": count(91, 136_500),
                "lends": 91, "borrows": 0, "overlimits": 0, "queue": q, "rate_now_bps": 0.0,
            })
        };
        let aqm = json!({
            "ecn_marks": 17, "aqm_drops": 4, "ack_filter_drops": 3, "unmarkable": 1,
            "limit_drops": 0, "flows": 2, "max_flows": 9, "sparse_flows": 1, "bulk_flows": 1,
            "decaying_flows": 0, "new_flows": 30, "src_hosts": 1, "dst_hosts": 1,
            "collisions": 0,
        });
        json!({
            "uptime_s": 5.0,
            "policy": { "source": "t.toml", "generation": 1, "reloads": 0, "reloads_refused": 0 },
            "outbound": {
                "lane": {},
                "pipeline": {
                    "at_ns": 1, "rules": [], "default_rule": count(0, 0),
                    "default_class": "fq", "malformed": count(0, 0),
                    "classes": [
                        class("link", Value::Null, Value::Null),
                        class("fq", json!("link"), queue(Some(aqm))),
                        class("fifo", json!("link"), queue(None)),
                    ],
                },
            },
            "inbound": { "lane": {}, "pipeline": null },
        })
        .to_string()
    }

    /// The value of the sample `name{labels}` in `text`.
    fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
        let head = format!("{name}{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&head))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn queues_with_an_aqm_export_marks_drops_and_flows() {
        let text = render(&doc()).unwrap();
        let fq = r#"direction="outbound",class="fq",parent="link""#;
        for (name, want) in [
            ("weir_queue_ecn_marks_total", 17.0),
            ("weir_queue_aqm_drops_total", 4.0),
            ("weir_queue_ack_filter_drops_total", 3.0),
            ("weir_queue_unmarkable_total", 1.0),
            ("weir_queue_flows", 2.0),
            ("weir_queue_flows_max", 9.0),
            ("weir_queue_sparse_flows", 1.0),
            ("weir_queue_bulk_flows", 1.0),
            ("weir_queue_new_flows_total", 30.0),
        ] {
            assert_eq!(sample(&text, name, fq), Some(want), "{name}: {text}");
        }
        assert!(
            text.contains("# TYPE weir_queue_ecn_marks counter"),
            "{text}"
        );
        assert!(text.contains("# TYPE weir_queue_flows gauge"), "{text}");
        // The drops by cause stay where they were, the AQM's among them.
        let cause = r#"direction="outbound",class="fq",parent="link",cause="aqm""#;
        assert_eq!(
            sample(&text, "weir_class_dropped_packets_total", cause),
            Some(4.0)
        );
        // A queue without an AQM has none of them.
        assert!(!text.contains(r#"weir_queue_ecn_marks_total{direction="outbound",class="fifo""#));
        assert!(sample(
            &text,
            "weir_class_queue_packets",
            r#"direction="outbound",class="fifo",parent="link""#
        )
        .is_some());
        assert!(text.trim_end().ends_with("# EOF"));
    }

    /// Frames over the MTU and the ICMP replies: per direction, replies by kind, frames
    /// without a reply by reason.
    #[test]
    fn frames_over_the_mtu_and_their_replies() {
        let mut v: Value = serde_json::from_str(&doc()).unwrap();
        v["outbound"]["lane"] = json!({
            "oversize": { "packets": 9, "bytes": 13_500 },
            "pmtu": {
                "frag_needed": { "packets": 5, "bytes": 2950 },
                "packet_too_big": { "packets": 1, "bytes": 1294 },
                "rate_limited": 2, "df_clear": 1, "not_answered": 0,
            },
        });
        let text = render(&v.to_string()).unwrap();
        let out = r#"direction="outbound""#;
        assert_eq!(sample(&text, "weir_oversize_packets_total", out), Some(9.0));
        assert_eq!(
            sample(&text, "weir_oversize_bytes_total", out),
            Some(13_500.0)
        );
        for (kind, want) in [("frag_needed", 5.0), ("packet_too_big", 1.0)] {
            let l = format!(r#"direction="outbound",kind="{kind}""#);
            assert_eq!(
                sample(&text, "weir_pmtu_replies_total", &l),
                Some(want),
                "{text}"
            );
        }
        for (reason, want) in [
            ("rate_limited", 2.0),
            ("df_clear", 1.0),
            ("not_answered", 0.0),
        ] {
            let l = format!(r#"direction="outbound",reason="{reason}""#);
            assert_eq!(
                sample(&text, "weir_pmtu_unanswered_total", &l),
                Some(want),
                "{text}"
            );
        }
        // a lane without the fields (an older weir) counts zero
        let l = r#"direction="inbound""#;
        assert_eq!(sample(&text, "weir_oversize_packets_total", l), Some(0.0));
    }

    #[test]
    fn workers_and_unsteered_frames() {
        let mut v: Value = serde_json::from_str(&doc()).unwrap();
        v["workers"] = json!([
            { "worker": 0, "outbound_rx": { "packets": 7 }, "inbound_rx": { "packets": 5 } },
            { "worker": 1, "outbound_rx": { "packets": 3 }, "inbound_rx": { "packets": 2 } },
        ]);
        v["unsteered"] = json!({ "lan": 4, "wan": 1 });
        let text = render(&v.to_string()).unwrap();
        let l = r#"worker="1",direction="inbound""#;
        assert_eq!(
            sample(&text, "weir_worker_rx_packets_total", l),
            Some(2.0),
            "{text}"
        );
        let l = r#"worker="0",direction="outbound""#;
        assert_eq!(sample(&text, "weir_worker_rx_packets_total", l), Some(7.0));
        let l = r#"side="lan""#;
        assert_eq!(sample(&text, "weir_fanout_unsteered_total", l), Some(4.0));
        // one weir: no worker metrics
        let text = render(&doc()).unwrap();
        assert!(!text.contains("weir_worker_rx_packets"), "{text}");
    }

    /// Three RTT samples of 31, 40 and 41 ms (sum 112 ms) and 2 retransmissions in `fq`:
    /// the buckets are cumulative, the bounds in seconds.
    #[test]
    fn tcp_rtt_histogram_and_retransmits() {
        use weir_core::conn::health::{BOUNDS_US, BUCKETS};
        let mut v: Value = serde_json::from_str(&doc()).unwrap();
        let mut counts = vec![0u64; BUCKETS];
        counts[24] = 1; // (26909, 32000]
        counts[26] = 2; // (38055, 45255]
        let p = &mut v["outbound"]["pipeline"];
        p["rtt_bounds_us"] = json!(BOUNDS_US.to_vec());
        p["classes"][1]["tcp"] = json!({
            "rtt": { "counts": counts, "count": 3, "sum_us": 112_000 },
            "retransmits": 2,
        });
        let text = render(&v.to_string()).unwrap();
        let fq = r#"direction="outbound",class="fq",parent="link""#;
        let hist = "weir_class_tcp_rtt_seconds";
        assert!(text.contains(&format!("# TYPE {hist} histogram")), "{text}");
        assert_eq!(sample(&text, &format!("{hist}_count"), fq), Some(3.0));
        assert_eq!(sample(&text, &format!("{hist}_sum"), fq), Some(0.112));
        for (le, want) in [
            ("0.0005", 0.0),
            ("0.026909", 0.0),
            ("0.032", 1.0),
            ("0.038055", 1.0),
            ("0.045255", 3.0),
            ("4.096", 3.0),
            ("+Inf", 3.0),
        ] {
            let l = format!(r#"le="{le}",{fq}"#);
            assert_eq!(
                sample(&text, &format!("{hist}_bucket"), &l),
                Some(want),
                "le {le}: {text}"
            );
        }
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(&format!("{hist}_bucket{{le=")) && l.contains(fq))
                .count(),
            BUCKETS,
            "{text}"
        );
        assert_eq!(
            sample(&text, "weir_class_tcp_retransmits_total", fq),
            Some(2.0)
        );
        // a class without the field (an older document) has none
        assert!(
            !text.contains(r#"weir_class_tcp_retransmits_total{direction="outbound",class="fifo""#)
        );
    }

    #[test]
    fn no_aqm_no_queue_metrics() {
        let mut v: Value = serde_json::from_str(&doc()).unwrap();
        let q = &mut v["outbound"]["pipeline"]["classes"][1]["queue"];
        q.as_object_mut().unwrap().remove("aqm");
        let text = render(&v.to_string()).unwrap();
        assert!(!text.contains("weir_queue_"), "{text}");
        assert!(text.contains("weir_class_queue_packets"), "{text}");
    }
}
