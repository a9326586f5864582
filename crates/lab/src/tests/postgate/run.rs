//! Running `weir lab postgate`: per device, a fresh testbed (servers → ATU-C emulator →
//! DUT → clients: namespaces of this machine, or with `--topology` the real hosts `client`
//! and `server` with the DUT at `[dut]` and the ATU-C at `[wan]`), the sinks, a sampler of
//! the emulator's and the device's statistics, the CBR and the bulk flows on their
//! schedule; then the figures of the run.
//!
//! Threads: the ATU-C's and (weir devices) the DUT's bridges, one thread per TCP sender,
//! the CBR sender (sleep-paced) and sink, the class sinks and the sampler; nothing is
//! pinned (the line is 8 Mbit/s: the two cores are mostly idle, and no figure here is
//! finer than the sample period). On real hosts the agents run there (`weir agent`); the
//! bridges and the sampler run here.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_core::policy::Policy;

use super::{
    checks, weighted_percentile, CbrStats, Device, DeviceRun, LabConfig, LabResult, Sample,
    CBR_PORT, HOSTS, PROBE_SOURCE, REFLECTORS, SINK_PORT,
};
use crate::agents::cbr::{CbrSenderOpts, CbrSinkOpts, Pacing};
use crate::agents::{SenderOpts, SinkOpts};
use crate::dut::{bridge_config, stop_bridge, BridgeThread, DutSetup, DutSpec, RunningDut};
use crate::stats::dist::DistUs;
use crate::tests::testbed::Owned;
use crate::topo::{require_root, BridgeTopo, DutPlace};
use crate::{Error, Result};

/// The CBR's flow id.
const CBR_FLOW: u32 = 0x5EED_0003;
/// Longest wait for a bridge to open.
const BRIDGE_START: Duration = Duration::from_secs(10);
/// The client's address (where the sinks listen).
const CLIENT: Ipv4Addr = BridgeTopo::SND_ADDR;

/// Runs the lab: every device on the seed's line, then on the varying line (its trace
/// written into `dir`). `progress` is called about once a step.
pub fn run(c: &LabConfig, dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<LabResult> {
    c.validate()?;
    for &d in c.devices.iter().chain(&c.varying) {
        if let Some(t) = device_policy(c, d) {
            Policy::parse(&format!("{}.toml", d.name()), &t)
                .map_err(|e| Error::Invalid(format!("device {}: policy: {e}", d.name())))?;
        }
    }
    require_root()?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Invalid(format!("cannot create {}: {e}", dir.display())))?;
    let mut runs = Vec::new();
    for &d in &c.devices {
        runs.push(run_device(c, d, None, progress)?);
    }
    if !c.varying.is_empty() {
        // absolute: the ATU-C's policy names it, and a policy's relative paths are read
        // from the policy's own directory
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| Error::Invalid(format!("cannot resolve {}: {e}", dir.display())))?;
        let trace = dir.join("varying-line.trace");
        std::fs::write(&trace, trace_text(c))
            .map_err(|e| Error::Invalid(format!("cannot write {}: {e}", trace.display())))?;
        for &d in &c.varying {
            runs.push(run_device(c, d, Some(&trace), progress)?);
        }
    }
    Ok(LabResult {
        kind: "postgate".into(),
        config: c.clone(),
        meta: crate::report::meta(),
        checks: checks(&runs, c.quick),
        runs,
    })
}

/// The varying line as a Mahimahi trace: each of `varying_rates` for `varying_step_s`,
/// `rate / 12 000` opportunities of 1500 bytes per ms spread evenly; it repeats.
pub fn trace_text(c: &LabConfig) -> String {
    let step_ms = (c.varying_step_s * 1000.0).round() as u64;
    let mut out = String::new();
    let mut t0 = 0u64;
    for &r in &c.varying_rates {
        // opportunities up to ms m of the segment: floor(r·m / 12e6)
        let mut done = 0u64;
        for m in 1..=step_ms {
            let due = r as u128 * m as u128 / 12_000_000;
            for _ in done..due as u64 {
                out.push_str(&format!("{}\n", t0 + m));
            }
            done = due as u64;
        }
        t0 += step_ms;
    }
    out
}

/// The capacity of the varying line at `t` s (its trace's rate), or the fixed line's.
fn capacity_at(c: &LabConfig, varying: bool, t: f64) -> f64 {
    if !varying {
        return c.line_bps as f64;
    }
    let n = c.varying_rates.len();
    let k = (t / c.varying_step_s).floor().max(0.0) as usize % n;
    c.varying_rates[k] as f64
}

/// The ATU-C: one emulation profile on the downstream (inbound: from the servers at
/// `wan0` to the device at `lan0`).
pub fn atu_policy(c: &LabConfig, trace: Option<&Path>, seed: u64) -> String {
    let rate = match trace {
        None => format!("rate = \"{}bit\"", c.line_bps),
        Some(t) => format!("trace = \"{}\"", t.display()),
    };
    format!(
        "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nseed = {seed}\n\n\
         [[emulate]]\nname = \"atu-c\"\ndirection = \"inbound\"\n{rate}\n\
         limit = \"{}p\"\ndelay = \"{}ms\"\n\n\
         [[rule]]\nname = \"all\"\nemulate = \"atu-c\"\n",
        c.atu_queue, c.line_delay_ms
    )
}

/// The device's policy (weir's language; the HTB device is translated from it), `None`
/// for the bare bridge. Classes `c0`… by the sinks' ports, `cbr` by its port.
pub fn device_policy(c: &LabConfig, d: Device) -> Option<String> {
    let line = c.line_bps as f64;
    let (link, ceil_all) = match d {
        Device::None => return None,
        Device::Partition | Device::Sfq | Device::Htb => (line * c.share, false),
        Device::Postgate { .. } | Device::Autorate { .. } => (line, true),
    };
    let each = (link - c.cbr_class_bps as f64) / c.classes as f64;
    let ceil = |own: f64| match d {
        Device::Partition => own,
        _ if ceil_all => line,
        _ => link,
    };
    let tcr = match d {
        Device::Postgate { tcr, .. } | Device::Autorate { tcr, .. } => tcr,
        _ => false,
    };
    let mut s = format!(
        "# weir lab postgate: device '{}' on a {} bit/s line\n\
         [link]\nrate = \"{:.0}bit\"\ndirection = \"inbound\"\ndefault = \"c0\"\n",
        d.name(),
        c.line_bps,
        link
    );
    for k in 0..c.classes {
        s.push_str(&format!(
            "\n[[class]]\nname = \"c{k}\"\nrate = \"{each:.0}bit\"\nceil = \"{:.0}bit\"\nprio = 1\nqueue = \"pfq\"\nlimit = \"{}p\"\n{}[class.session]\nlimit = \"{}p\"\n",
            ceil(each),
            c.class_limit,
            if tcr { "tcr = true\n" } else { "" },
            c.session_limit
        ));
    }
    let cbr = c.cbr_class_bps as f64;
    // the real-time class borrows first (prio 0): an adaptive link's cuts scale its
    // assured rate with the rest
    s.push_str(&format!(
        "\n[[class]]\nname = \"cbr\"\nrate = \"{cbr:.0}bit\"\nceil = \"{:.0}bit\"\nprio = 0\n",
        ceil(cbr)
    ));
    for k in 0..c.classes {
        s.push_str(&format!(
            "\n[[rule]]\nname = \"class{k}\"\nproto = \"tcp\"\ndport = {}\nclass = \"c{k}\"\n",
            SINK_PORT + k as u16
        ));
    }
    s.push_str(&format!(
        "\n[[rule]]\nname = \"cbr\"\nproto = \"udp\"\ndport = {CBR_PORT}\nclass = \"cbr\"\n"
    ));
    match d {
        Device::Postgate { delta_ms, .. } => s.push_str(&format!(
            "\n[adapt]\nmode = \"postgate\"\ntarget = \"{}\"\nsource = \"{PROBE_SOURCE}\"\n\
             interval = \"{}ms\"\np = {}\ndelta = \"{delta_ms}ms\"\n",
            REFLECTORS[0], c.probe_ms, c.p
        )),
        Device::Autorate { threshold_ms, .. } => {
            let list: Vec<String> = REFLECTORS.iter().map(|r| format!("\"{r}\"")).collect();
            s.push_str(&format!(
                "\n[adapt]\nmode = \"autorate\"\nreflectors = [{}]\nsource = \"{PROBE_SOURCE}\"\n\
                 interval = \"150ms\"\nfloor = \"20%\"\ndelay_threshold = \"{threshold_ms}ms\"\n",
                list.join(", ")
            ))
        }
        _ => {}
    }
    Some(s)
}

/// One reading of the statistics sockets.
#[derive(Clone, Debug, Default)]
struct Reading {
    t_s: f64,
    frames: u64,
    sum_ns: u64,
    max_ns: u64,
    line_bytes: u64,
    rate_bps: Option<f64>,
    probe_delay_ms: Option<f64>,
    weights: Vec<f64>,
}

fn read_sockets(emu: &Path, dut: Option<&Path>, t_s: f64) -> Option<Reading> {
    let doc: Value = serde_json::from_str(&weir_io::stats::query(emu).ok()?).ok()?;
    // the profile by name (index 0 is the one for traffic no rule emulates)
    let e = doc["inbound"]["pipeline"]["emulators"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "atu-c")?;
    let q = &e["counters"]["queue_delay"];
    let mut r = Reading {
        t_s,
        frames: q["frames"].as_u64()?,
        sum_ns: q["sum_ns"].as_u64()?,
        max_ns: q["max_ns"].as_u64()?,
        line_bytes: e["queue"]["dequeued"]["bytes"].as_u64()?,
        ..Reading::default()
    };
    if let Some(p) = dut {
        if let Some(doc) = weir_io::stats::query(p)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        {
            let a = &doc["adapt"];
            r.rate_bps = a["rate_bps"].as_f64();
            r.probe_delay_ms = a["delay_ms"].as_f64();
            r.weights = a["classes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["weight"].as_f64())
                .collect();
        }
    }
    Some(r)
}

/// A unique socket path for this process.
fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "weir-lab-postgate-{}-{tag}.sock",
        std::process::id()
    ))
}

/// The running device: weir's bridge (with its statistics socket) or the kernel's bridge,
/// HTB or not (removed again when it stops, from a real machine's interfaces too).
enum Running<'a> {
    Weir(BridgeThread, PathBuf),
    Kernel(RunningDut<'a>),
}

struct RunningDevice<'a> {
    running: Running<'a>,
    description: String,
}

impl RunningDevice<'_> {
    /// weir's statistics socket.
    fn socket(&self) -> Option<&Path> {
        match &self.running {
            Running::Weir(_, s) => Some(s),
            Running::Kernel(_) => None,
        }
    }

    /// Stops it: weir's bridge report or the kernel's `tc` counters (problems into
    /// `errors`), the statistics socket removed.
    fn stop(self, errors: &mut Vec<String>) -> Value {
        match self.running {
            Running::Weir(mut b, sock) => {
                let v = stop_bridge(&mut b, errors);
                let _ = std::fs::remove_file(sock);
                v
            }
            Running::Kernel(k) => {
                let r = k.stop();
                errors.extend(r.errors);
                r.counters
            }
        }
    }
}

/// Device `d`'s policy (its text, `None` for the bare bridge) and what the DUT is started
/// with (for the bare bridge, which reads none, a link at the line's rate).
fn parsed_policy(c: &LabConfig, d: Device) -> Result<(Option<String>, Policy)> {
    let text = device_policy(c, d);
    let line = format!("[link]\nrate = \"{}bit\"\n", c.line_bps);
    let p = Policy::parse(
        &format!("{}.toml", d.name()),
        text.as_deref().unwrap_or(&line),
    )
    .map_err(|e| Error::Invalid(format!("device {}: policy: {e}", d.name())))?;
    Ok((text, p))
}

fn start_device<'a>(place: DutPlace<'a>, d: Device, p: &Policy) -> Result<RunningDevice<'a>> {
    let kernel = |spec: DutSpec| -> Result<Running<'a>> {
        let setup = DutSetup {
            place,
            policy: p,
            sessions: &[],
            busy_poll: false,
        };
        crate::dut::start(&spec, &setup).map(Running::Kernel)
    };
    let running = match d {
        Device::None => kernel(DutSpec::KernelBridge)?,
        Device::Htb => kernel(DutSpec::KernelHtb)?,
        _ => {
            let mut cfg = bridge_config(p, place.lan, place.wan).map_err(Error::Invalid)?;
            let sock = socket_path("dut");
            cfg.stats_socket = Some(sock.clone());
            let b = BridgeThread::start(place.ns, cfg, None, BRIDGE_START)
                .map_err(|e| Error::Invalid(format!("device {}: {e}", d.name())))?;
            Running::Weir(b, sock)
        }
    };
    let description = match &running {
        Running::Kernel(k) => k.description().to_string(),
        Running::Weir(..) => format!(
            "weir bridge {} <-> {} in netns {}, host offloads as they are:\n{}",
            place.lan,
            place.wan,
            place.ns.name(),
            p.describe().trim_end()
        ),
    };
    Ok(RunningDevice {
        running,
        description,
    })
}

/// One device on the seed's line (`trace` = `None`) or the varying line.
fn run_device(
    c: &LabConfig,
    d: Device,
    trace: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<DeviceRun> {
    let varying = trace.is_some();
    let scenario = if varying { "varying" } else { "seed" };
    let duration_s = if varying { c.varying_s } else { c.duration_s() };
    progress(&format!("{} ({scenario}): setting up", d.name()));
    let owned = Owned::new(c.topology.as_ref(), HOSTS, "pg", true)?;
    let bed = owned.bed()?;
    bed.address(&[])?;
    for r in &REFLECTORS[1..] {
        bed.receiver_addr(&format!("{r}/24"))?;
    }
    // the CBR runs from the server to the client: its one-way delays need their clocks
    let (server_ahead_ns, one_way) = owned.receiver_ahead();
    // the ATU-C
    let wan = bed
        .wan
        .ok_or_else(|| Error::Invalid("the postgate lab needs a WAN stage (the ATU-C)".into()))?;
    let text = atu_policy(c, trace, 1);
    let p = Policy::parse_in("atu-c.toml", &text, trace.and_then(Path::parent))
        .map_err(|e| Error::Invalid(format!("ATU-C policy: {e}")))?;
    let mut cfg = bridge_config(&p, wan.lan, wan.wan).map_err(Error::Invalid)?;
    let emu_sock = socket_path("atu");
    cfg.stats_socket = Some(emu_sock.clone());
    let mut atu = BridgeThread::start(wan.ns, cfg, None, BRIDGE_START)
        .map_err(|e| Error::Invalid(format!("ATU-C: {e}")))?;
    let place = bed.place.ok_or_else(|| {
        Error::Invalid("the postgate lab configures its device: the DUT cannot be external".into())
    })?;
    let dev_policy = parsed_policy(c, d)?;
    let dev = start_device(place, d, &dev_policy.1)?;

    // sinks at the client
    let bin = Duration::from_millis(c.sample_ms);
    let sinks = (0..c.classes)
        .map(|k| {
            let addr = SocketAddr::new(IpAddr::V4(CLIENT), SINK_PORT + k as u16);
            bed.snd.tcp_sink(SinkOpts::new(addr, bin))
        })
        .collect::<Result<Vec<_>>>()?;
    let cbr_addr = SocketAddr::new(IpAddr::V4(CLIENT), CBR_PORT);
    let pps = c.cbr_bps as f64 / (8.0 * c.cbr_payload as f64);
    let mut sink_opts = CbrSinkOpts::new(cbr_addr, Some(CBR_FLOW));
    sink_opts.expected = (pps * duration_s) as usize + 16;
    sink_opts.wake_every = Some(Duration::from_millis(20));
    let cbr_sink = bed.snd.cbr_sink(sink_opts)?;

    // the sampler
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let sampler = {
        let (stop, emu_sock, dut_sock) = (
            stop.clone(),
            emu_sock.clone(),
            dev.socket().map(Path::to_path_buf),
        );
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut next = t0;
            while !stop.load(Ordering::Relaxed) {
                let t = t0.elapsed().as_secs_f64();
                if let Some(r) = read_sockets(&emu_sock, dut_sock.as_deref(), t) {
                    out.push(r);
                }
                next += bin;
                if let Some(w) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
            }
            out
        })
    };

    // the CBR from 0 s, the flows on their schedule
    let mut o = CbrSenderOpts::new(
        cbr_addr,
        pps,
        c.cbr_payload + 8 + 20 + 14, // UDP + IPv4 + Ethernet headers
    );
    o.flow = CBR_FLOW;
    o.duration = Some(Duration::from_secs_f64(duration_s - 1.0));
    o.pacing = Pacing::Sleep;
    let cbr = bed.rcv.cbr_sender(o)?;
    let mut plan: Vec<(usize, f64, f64)> = (0..c.flows())
        .map(|i| {
            if varying {
                let (k, _, _) = c.flow_times(i);
                (k, i as f64 * 0.05, duration_s - 1.0)
            } else {
                c.flow_times(i)
            }
        })
        .collect();
    plan.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut senders = Vec::new();
    let mut errors = Vec::new();
    let mut said = -1.0;
    for (k, start, stop_s) in &plan {
        if let Some(w) = Duration::from_secs_f64(*start).checked_sub(t0.elapsed()) {
            std::thread::sleep(w);
        }
        if *start >= said + c.step_s.min(10.0) {
            said = *start;
            progress(&format!(
                "{} ({scenario}): {:.0} s of {:.0}, {} flows started",
                d.name(),
                t0.elapsed().as_secs_f64(),
                duration_s,
                senders.len()
            ));
        }
        let dst = SocketAddr::new(IpAddr::V4(CLIENT), SINK_PORT + *k as u16);
        let mut o = SenderOpts::new(dst, Duration::from_secs_f64(stop_s - start), &c.cc);
        o.notsent_lowat = Some(16 * 1024);
        o.drain_timeout = Duration::from_secs(2);
        o.until = Some(t0 + Duration::from_secs_f64(*stop_s));
        match bed.rcv.tcp_sender(o) {
            Ok(s) => senders.push(s),
            Err(e) => errors.push(format!("flow to {dst}: {e}")),
        }
    }
    let flows = plan.len();
    let mut reports = Vec::new();
    for s in senders {
        match s.join() {
            Ok(r) => reports.push(r),
            Err(e) => errors.push(format!("a flow's report: {e}")),
        }
    }
    if let Some(w) = Duration::from_secs_f64(duration_s).checked_sub(t0.elapsed()) {
        std::thread::sleep(w);
    }
    stop.store(true, Ordering::Relaxed);
    let readings = sampler.join().unwrap_or_default();
    // a host that died mid-run ends the lab (its agents' reports are lost)
    if let Some(e) = owned.dead_host() {
        return Err(e);
    }
    let cbr_report = cbr.join()?;
    let mut records = cbr_sink.finish(cbr_report.attempted, Duration::from_millis(500))?;
    let sink_reports = sinks
        .into_iter()
        .map(|s| s.stop())
        .collect::<Result<Vec<_>>>()?;
    let (policy, description) = (dev_policy.0.clone(), dev.description.clone());
    let dut_report = dev.stop(&mut errors);
    if let Some(Err(e)) = atu.stop() {
        errors.push(format!("ATU-C: {e}"));
    }
    let _ = std::fs::remove_file(&emu_sock);
    let hosts = owned.host_info();
    drop(owned);

    for r in &reports {
        if let Some(e) = &r.error {
            errors.push(format!("flow {}: {e}", r.peer));
        }
    }
    // the client's receive stamps onto the server's clock (its sends' clock): the
    // client is `-server_ahead_ns` ahead of the server
    records.rx_on_sender_clock(-server_ahead_ns);
    let flows_ok = reports
        .iter()
        .filter(|r| r.error.is_none() && r.bytes_written > 0)
        .count();

    // per class (then the CBR) at the client, per bin
    let mut class_series: Vec<Vec<u64>> = sink_reports.iter().map(|s| s.total_series()).collect();
    let mut cbr_series = Vec::new();
    let first_tx = cbr_report.first_send_ns.unwrap_or(0);
    for r in &records.records {
        // bins from the CBR's first send (≈ t0)
        let b = ((r.rx_ns.saturating_sub(first_tx)) / (c.sample_ms * 1_000_000)) as usize;
        if cbr_series.len() <= b {
            cbr_series.resize(b + 1, 0u64);
        }
        cbr_series[b] += c.cbr_payload as u64;
    }
    class_series.push(cbr_series);

    let samples = samples(c, varying, &readings, &class_series);
    let mut run = DeviceRun {
        device: d,
        name: d.name(),
        scenario: scenario.into(),
        duration_s,
        samples,
        delay_p50_ms: 0.0,
        delay_p95_ms: 0.0,
        delay_p95_all_ms: 0.0,
        delay_max_ms: 0.0,
        utilisation: 0.0,
        min_utilisation_10s: 0.0,
        class_mean_bps: Vec::new(),
        cbr: cbr_stats(&cbr_report, &records, duration_s, (c.step_s * pps) as u64),
        flows_ok,
        flows,
        policy,
        description,
        dut_report,
        errors,
        hosts,
    };
    if !one_way {
        // the hosts' clocks are not known well enough for one-way delays
        run.cbr.delay = None;
    }
    let active_end = if varying {
        duration_s - 1.0
    } else {
        c.flow_times(c.flows() - 1).2
    };
    let all_on = if varying {
        (2.0, duration_s - 1.0)
    } else {
        (c.flow_times(c.flows() - 1).1 + c.step_s / 2.0, c.stop_at_s)
    };
    summarise(&mut run, c, (c.step_s, active_end), all_on);
    // the largest single wait: the emulator's own maximum (the whole run)
    run.delay_max_ms = readings.last().map_or(0.0, |r| r.max_ns as f64 / 1e6);
    progress(&format!(
        "{} ({scenario}): ATU-C delay p95 {:.1} ms, utilisation {:.1} %, CBR loss {:.2} %",
        run.name,
        run.delay_p95_ms,
        run.utilisation * 100.0,
        run.cbr.loss_pct
    ));
    Ok(run)
}

/// The readings turned into sample periods.
fn samples(c: &LabConfig, varying: bool, rd: &[Reading], classes: &[Vec<u64>]) -> Vec<Sample> {
    let bin_s = c.sample_ms as f64 / 1e3;
    rd.windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let dt = (b.t_s - a.t_s).max(1e-6);
            let frames = b.frames.saturating_sub(a.frames);
            let bin = ((b.t_s / bin_s).round() as usize).saturating_sub(1);
            Sample {
                t_s: b.t_s,
                atu_delay_ms: (frames > 0)
                    .then(|| b.sum_ns.saturating_sub(a.sum_ns) as f64 / frames as f64 / 1e6),
                atu_frames: frames,
                line_bps: b.line_bytes.saturating_sub(a.line_bytes) as f64 * 8.0 / dt,
                capacity_bps: capacity_at(c, varying, (a.t_s + b.t_s) / 2.0),
                class_bps: classes
                    .iter()
                    .map(|s| s.get(bin).copied().unwrap_or(0) as f64 * 8.0 / bin_s)
                    .collect(),
                rate_bps: b.rate_bps,
                probe_delay_ms: b.probe_delay_ms,
                weights: b.weights.clone(),
            }
        })
        .collect()
}

/// Delay percentiles, utilisation and class means over the active period `(warm-up,
/// end]` (the whole-run p95 from 0), and the all-flows-on period `on`.
fn summarise(r: &mut DeviceRun, c: &LabConfig, (warmup, end): (f64, f64), on: (f64, f64)) {
    let pairs = |from: f64| -> Vec<(f64, u64)> {
        r.samples
            .iter()
            .filter(|s| s.t_s > from && s.t_s <= end)
            .filter_map(|s| s.atu_delay_ms.map(|d| (d, s.atu_frames)))
            .collect()
    };
    r.delay_p95_all_ms = weighted_percentile(pairs(0.0), 0.95);
    r.delay_p50_ms = weighted_percentile(pairs(warmup), 0.5);
    r.delay_p95_ms = weighted_percentile(pairs(warmup), 0.95);
    let active: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.t_s > warmup && s.t_s <= end)
        .collect();
    let sent: f64 = active.iter().map(|s| s.line_bps).sum();
    let cap: f64 = active.iter().map(|s| s.capacity_bps).sum();
    r.utilisation = if cap > 0.0 { sent / cap } else { 0.0 };
    let per = (10.0 / (c.sample_ms as f64 / 1e3)).round().max(1.0) as usize;
    r.min_utilisation_10s = active
        .chunks(per)
        .filter(|w| w.len() == per)
        .map(|w| {
            let s: f64 = w.iter().map(|x| x.line_bps).sum();
            let k: f64 = w.iter().map(|x| x.capacity_bps).sum();
            s / k.max(1.0)
        })
        .fold(f64::INFINITY, f64::min);
    if !r.min_utilisation_10s.is_finite() {
        r.min_utilisation_10s = r.utilisation;
    }
    let during: Vec<&Sample> = r
        .samples
        .iter()
        .filter(|s| s.t_s > on.0 && s.t_s <= on.1)
        .collect();
    let n = during.len().max(1) as f64;
    let k = r.samples.first().map_or(0, |s| s.class_bps.len());
    r.class_mean_bps = (0..k)
        .map(|i| during.iter().map(|s| s.class_bps[i]).sum::<f64>() / n)
        .collect();
}

/// The CBR's figures; `warmup` = the packets sent during the warm-up.
fn cbr_stats(
    sent: &crate::agents::cbr::CbrSenderReport,
    rec: &crate::agents::cbr::CbrRecords,
    duration_s: f64,
    warmup: u64,
) -> CbrStats {
    let received = rec.distinct();
    let delays = rec.delays_ns();
    let jitter: Vec<i64> = delays.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    CbrStats {
        sent: sent.attempted,
        received,
        loss_pct: if sent.attempted == 0 {
            0.0
        } else {
            rec.lost(sent.attempted) as f64 * 100.0 / sent.attempted as f64
        },
        lost_after_warmup: rec.lost_between(warmup, sent.attempted),
        delay: (!delays.is_empty()).then(|| DistUs::from_ns(&delays)),
        jitter: (!jitter.is_empty()).then(|| DistUs::from_ns(&jitter)),
        goodput_bps: rec.records.iter().map(|r| r.len as f64).sum::<f64>() * 8.0 / duration_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every device's policy compiles; the classes' guaranteed rates add up to the link;
    /// the adaptive ones probe the server; the ATU-C's policy has the line and the queue.
    #[test]
    fn the_policies_compile() {
        let c = LabConfig::paper();
        for d in Device::PAPER.into_iter().chain([
            Device::Postgate {
                delta_ms: 40,
                tcr: true,
            },
            Device::Autorate {
                threshold_ms: 10,
                tcr: true,
            },
        ]) {
            let Some(t) = device_policy(&c, d) else {
                assert_eq!(d, Device::None);
                continue;
            };
            let p =
                Policy::parse("d.toml", &t).unwrap_or_else(|e| panic!("{}: {e}\n{t}", d.name()));
            let leaves: u64 = p.classes.iter().filter(|k| k.leaf).map(|k| k.rate).sum();
            assert!(
                leaves.abs_diff(p.link_rate) <= 8,
                "{}: {leaves} of {}",
                d.name(),
                p.link_rate
            );
            assert_eq!(
                p.adapt.is_some(),
                d.is_weir() && matches!(d, Device::Postgate { .. } | Device::Autorate { .. })
            );
        }
        let atu = Policy::parse("a.toml", &atu_policy(&c, None, 1)).unwrap();
        assert_eq!(atu.emulators[0].cfg.rate_bps, Some(8_000_000));
    }

    /// The trace by hand: 12 Mbit/s is one 1500-byte opportunity per ms; 6 Mbit/s one
    /// every other ms; two 2 ms segments give ms 1, 2, then 4.
    #[test]
    fn the_trace_spreads_opportunities_evenly() {
        let mut c = LabConfig::quick();
        c.varying_step_s = 0.002;
        c.varying_rates = vec![12_000_000, 6_000_000];
        assert_eq!(trace_text(&c), "1\n2\n4\n");
        assert_eq!(capacity_at(&c, true, 0.003), 6e6);
        assert_eq!(capacity_at(&c, true, 0.0041), 12e6);
        assert_eq!(capacity_at(&c, false, 1.0), 8e6);
    }
}
