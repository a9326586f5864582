//! `GET /metrics`: the running weir's statistics document (the JSON of `weir stats
//! --json`) as Prometheus metrics, in the OpenMetrics text format (prometheus-client).
//!
//! Every scrape builds a fresh registry from the newest document, so a counter is the
//! value weir counted, never a difference the web server kept. Names follow the
//! Prometheus conventions: a `weir_` prefix, the unit in the name (`_bytes`,
//! `_packets`, `_bits_per_second`, `_seconds`), `_total` on counters (added by the
//! encoder). Labels: `direction` (`outbound`, `inbound`), `class`, `parent`, `rule`,
//! `emulator`, `cause` (why a packet was dropped). The metric list is in
//! docs/web.md.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use weir_core::snapshot::{PipelineSnapshot, QueueSnapshot};

type Labels = Vec<(String, String)>;
type Float = Gauge<f64, AtomicU64>;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The families of one scrape, registered on first use.
#[derive(Default)]
struct Metrics {
    reg: Registry,
    counters: HashMap<&'static str, Family<Labels, Counter>>,
    gauges: HashMap<&'static str, Family<Labels, Float>>,
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
        match &v[dir]["pipeline"] {
            Value::Null => {}
            p => {
                let snap: PipelineSnapshot = serde_json::from_value(p.clone())
                    .map_err(|e| format!("statistics document, {dir}.pipeline: {e}"))?;
                pipeline(&mut m, dir, &snap);
            }
        }
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
