//! The status document of a running bridge, published every [`PUBLISH_EVERY`] (less often
//! where a snapshot is costly: forwarding waits at most 1 % of the time, [`PublishCost`]).
//!
//! [`Bridge::publish`]: the adaptive controller's changes logged, the lanes' counters
//! that live elsewhere (the kernel's, the device's, the bypass's) gathered, captures
//! flushed and a stopped one logged once; then, if anyone reads it (the statistics socket,
//! or a worker's supervisor), the discovery tree's rates every [`DISCOVER_RATE_WINDOW`],
//! a bounded sweep of the connection table for the top talkers ([`TOP_TALKERS`],
//! [`TALKER_SLOTS_PER_PUBLISH`] slots a publish), each direction's snapshot, and the
//! [`StatusDoc`]: handed to the supervisor (a worker), or to the statistics server whose
//! client's thread writes the JSON ([`StatsServer::publish_lazy`]). The supervisor of
//! `--workers N` merges its workers' documents (`workers.rs`) and counts the bypass's
//! frames with [`kernel_count`].

use super::*;
use serde::Serialize;

/// Top talkers in the statistics, and the connection-table slots swept for them per
/// publish (once a second): a default table of 65,536 slots is swept every 8 s.
pub(super) const TOP_TALKERS: usize = 10;
pub(super) const TALKER_SLOTS_PER_PUBLISH: usize = 8192;

/// How often the status document is published (at most).
pub(super) const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// How long the loop spent publishing the statistics (snapshotting every class; the JSON
/// is written by the client's thread): forwarding waits meanwhile. It grows with the
/// classes (a subscriber table's thousands of circuits).
/// The pace is set by the thread's CPU time for the last one (`last_cpu_ms`), not its
/// wall time: a publication the scheduler interrupted (a busy machine) cost forwarding
/// nothing extra, and once put the next one seconds away.
#[derive(Serialize, Default, Clone, Copy, Debug)]
pub struct PublishCost {
    pub publications: u64,
    /// The last one, and the longest, ms (wall time).
    pub last_ms: f64,
    pub max_ms: f64,
    /// Their mean, ms.
    pub mean_ms: f64,
    /// The thread's CPU time for the last one, ms.
    pub last_cpu_ms: f64,
}

impl PublishCost {
    /// One publication that took `ms` of wall time and `cpu_ms` of the thread's CPU.
    pub fn record(&mut self, ms: f64, cpu_ms: f64) {
        self.publications += 1;
        self.last_cpu_ms = cpu_ms;
        self.last_ms = ms;
        self.max_ms = self.max_ms.max(ms);
        self.mean_ms += (ms - self.mean_ms) / self.publications as f64;
    }

    /// When to publish next after publishing at `now`: every [`PUBLISH_EVERY`], or less
    /// often where a snapshot is costly (thousands of classes): publishing holds
    /// forwarding at most 1 % of the time.
    pub(super) fn next(&self, now: Instant) -> Instant {
        let cost_ns = (self.last_cpu_ms * 1e6) as u64;
        now + PUBLISH_EVERY.max(Duration::from_nanos(cost_ns * 100))
    }
}

/// A bridge's publishing state.
pub(super) struct Publisher {
    /// The statistics socket (`None`: not asked for, or a worker's: its supervisor's).
    pub(super) stats: Option<StatsServer>,
    /// Whether the adaptive controller was at its fallback at the last look (a change is
    /// logged).
    adapt_fallback: bool,
    /// The autorate's reflector swaps at the last look (a change is logged).
    adapt_swaps: u64,
    /// How long publishing the statistics held the loop (snapshot and JSON).
    pub(super) cost: PublishCost,
    /// Top talkers, swept a bounded number of table slots per publish.
    talkers: weir_core::conn::talkers::Talkers,
    /// When the discovery tree's rates are next updated (every [`DISCOVER_RATE_WINDOW`]:
    /// its rates are per second, the publisher runs every 250 ms).
    discovery_due: Instant,
    /// Captures whose stop was logged (by path).
    captures_stopped: Vec<String>,
}

impl Publisher {
    pub(super) fn new(stats: Option<StatsServer>) -> Publisher {
        Publisher {
            stats,
            adapt_fallback: false,
            adapt_swaps: 0,
            cost: PublishCost::default(),
            talkers: weir_core::conn::talkers::Talkers::new(TOP_TALKERS),
            discovery_due: Instant::ZERO,
            captures_stopped: Vec::new(),
        }
    }

    /// Log the adaptive controller's reflector swaps and fallbacks since the last look.
    fn log_adapt(&mut self, a: &weir_core::device::AdaptSnapshot) {
        if a.counters.reflector_swaps != self.adapt_swaps {
            self.adapt_swaps = a.counters.reflector_swaps;
            let active: Vec<&str> = a
                .reflectors
                .iter()
                .filter(|r| r.active)
                .map(|r| r.address.as_str())
                .collect();
            log::notice(&format!(
                "adapt: a reflector missed its replies or strayed from the others and was replaced ({} swaps); probing {}",
                self.adapt_swaps,
                active.join(", ")
            ));
        }
        if a.fallback != self.adapt_fallback {
            self.adapt_fallback = a.fallback;
            if a.fallback {
                log::warning(&format!(
                    "adapt: no reply from {} for the timeout: the link falls back to its floor, {} bit/s",
                    a.target, a.rate_bps
                ));
            } else {
                log::notice(&format!(
                    "adapt: replies from {} again: the controller resumes",
                    a.target
                ));
            }
        }
    }

    /// Log a capture that stopped, once.
    fn log_stopped(&mut self, captures: &[crate::pcap::CaptureStatus]) {
        for c in captures {
            if let Some(why) = &c.stopped {
                if !self.captures_stopped.contains(&c.path) {
                    self.captures_stopped.push(c.path.clone());
                    log::warning(&format!(
                        "capture {} stopped ({why}) after {} frames; forwarding goes on, later frames are not captured",
                        c.path, c.stats.written
                    ));
                }
            }
        }
    }
}

/// What the kernel forwarded in direction `dir`, of the bypass's counts (`forwarded`:
/// LAN → WAN, WAN → LAN).
pub(super) fn kernel_count(
    dir: Direction,
    (out, back): (failopen::Forwarded, failopen::Forwarded),
) -> Count {
    let f = match dir {
        Direction::Outbound => out,
        Direction::Inbound => back,
    };
    Count {
        packets: f.packets,
        bytes: f.bytes,
    }
}

impl Bridge {
    pub(super) fn publish(&mut self, now: Instant, start: Instant) {
        // the cost is this call's own: `now` is the loop's, taken before the iteration's
        // forwarding and control work (a reload's compile counted here once put the next
        // publication seconds away)
        let began = self.drv.eng.clock.now();
        let began_cpu = crate::clock::thread_cpu_ns();
        let adapt = self.drv.eng.device.adapt();
        if let Some(a) = &adapt {
            self.publisher.log_adapt(a);
        }
        let Driver { eng, out, inb } = &mut self.drv;
        let device = &mut eng.device;
        // the ICMP replies to one lane's oversize frames leave by the other
        let replies = [inb.stats.pmtu.sent(), out.stats.pmtu.sent()];
        for (lane, replies) in [&mut *out, &mut *inb].into_iter().zip(replies) {
            lane.stats.kernel_rx_drops += lane.rx.kernel_drops();
            lane.stats.duplicated = device.duplicated(lane.dir);
            lane.stats.non_ip_bypassed = device.bypassed(lane.dir);
            lane.stats.originated = device.originated(lane.dir) + replies;
            lane.stats.consumed = device.consumed(lane.dir);
            lane.stats.mss = device.mss_stats(lane.dir);
            lane.stats.tcr = device.tcr_stats(lane.dir);
            lane.stats.tx_rejected = lane.tx.rejected;
            if let Some(b) = &self.bypass {
                lane.stats.kernel_forwarded = kernel_count(lane.dir, b.forwarded());
            }
            if let Some(p) = &mut lane.pcap {
                let _ = p.flush();
            }
        }
        if let Some(p) = &mut self.pcap_both {
            let _ = p.flush();
        }
        let captures = self.captures();
        self.publisher.log_stopped(&captures);
        let p = &mut self.publisher;
        if p.stats.is_none() && self.worker.is_none() {
            return;
        }
        let Driver { eng, out, inb } = &mut self.drv;
        if now >= p.discovery_due {
            eng.device.discovery_tick(now);
            p.discovery_due = now + DISCOVER_RATE_WINDOW;
        }
        if let Some(t) = eng.device.connections() {
            p.talkers.sweep(t, TALKER_SLOTS_PER_PUBLISH, now);
        }
        let device = &eng.device;
        let snap = |lane: &mut Lane| {
            device.snapshot(lane.dir, now).map(|mut s| {
                lane.meter.update(&mut s);
                s
            })
        };
        let mut out_snap = snap(out);
        let mut in_snap = snap(inb);
        if let Some(w) = &self.worker {
            // a shared class's copy runs at its part: the document says the whole
            w.whole_rates(0, out_snap.as_mut());
            w.whole_rates(1, in_snap.as_mut());
        }
        let doc = StatusDoc {
            lan: self.lan.clone(),
            wan: self.wan.clone(),
            uptime_s: (now - start).as_secs_f64(),
            policy: PolicyDoc {
                source: device.source().to_string(),
                generation: device.generation(),
                reloads: device.generation() - 1,
                reloads_refused: self.reloads_refused,
                reloads_throttled: self.control.gate.throttled,
            },
            connections: device.connection_stats(),
            top_talkers: p.talkers.top().to_vec(),
            apps: device.app_stats(),
            discovery: device.discovery(DISCOVER_APPS, DISCOVER_SERVERS),
            admission: device.admission_report(),
            adapt,
            wake: self.wake.clone(),
            publish: p.cost,
            fail_open: self.fail_open.clone(),
            captures,
            stats_clients_given_up: p.stats.as_ref().map_or(0, StatsServer::clients_given_up),
            outbound: LaneDoc {
                lane: out.stats.clone(),
                pipeline: out_snap,
            },
            inbound: LaneDoc {
                lane: inb.stats.clone(),
                pipeline: in_snap,
            },
        };
        match (&self.worker, &p.stats) {
            // the supervisor merges the workers' documents
            (Some(w), _) => w.post(doc),
            // the JSON (milliseconds for thousands of classes) is written by the client
            (None, Some(server)) => server.publish_lazy(std::sync::Arc::new(move || {
                serde_json::to_string(&doc).unwrap_or_default()
            })),
            (None, None) => {}
        }
        let ms = (eng.clock.now() - began).as_nanos() as f64 / 1e6;
        let cpu_ms = crate::clock::thread_cpu_ns().saturating_sub(began_cpu) as f64 / 1e6;
        p.cost.record(ms, cpu_ms);
    }

    /// Every capture file's state.
    pub(super) fn captures(&self) -> Vec<crate::pcap::CaptureStatus> {
        [&self.pcap_both, &self.drv.out.pcap, &self.drv.inb.pcap]
            .into_iter()
            .flatten()
            .map(PcapWriter::status)
            .collect()
    }
}
