//! `sudo weir demo`: weir shaping real traffic in one command. Three network namespaces
//! (sender ─ weir ─ receiver, joined by veth), weir's bridge between them with the
//! embedded Basic Test policy (a T1 split into 20, 40, 128, 256 and 1100 kbit/s classes,
//! each matched by its sender subnet 10.1.N.0/24), two TCP connections (cubic) per class
//! and a 400 kbit/s UDP stream pushed into the 256 kbit/s class; the per-class table is
//! printed every second (the page too, with `--http`); then everything is removed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant as WallInstant};
use weir_core::policy::Policy;
use weir_core::snapshot::{format_table, PipelineSnapshot};
use weir_lab::agents::cbr::{CbrSender, CbrSenderOpts, CbrSink};
use weir_lab::agents::{SenderOpts, TcpSender, TcpSink};
use weir_lab::dut::{bridge_config, BridgeThread};
use weir_lab::topo::BridgeTopo;

#[derive(clap::Args)]
pub struct Args {
    /// How long the traffic runs.
    #[arg(long, default_value = "20s", value_parser = crate::sim::dur)]
    duration: weir_core::Duration,
    #[command(flatten)]
    web: crate::web::HttpArgs,
}

/// The sender's address in class `n`'s subnet (the embedded policy's rules).
fn class_addr(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, n, 1)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    crate::web::check(&a.web)?;
    weir_lab::topo::require_root()
        .map_err(|e| anyhow::anyhow!("weir demo builds network namespaces: {e}"))?;
    let stop = weir_io::signals::install();
    let (name, text) = crate::DEFAULT_POLICY;
    let policy = Policy::parse(name, text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let secs = Duration::from_nanos(a.duration.as_nanos());

    eprintln!("weir demo: building namespaces sender ─ weir ─ receiver …");
    let t = BridgeTopo::new("demo")?;
    let senders: Vec<Ipv4Addr> = (1..=5).map(class_addr).collect();
    t.add_sender_addrs(&senders)?;
    let dir = std::env::temp_dir().join(format!("weir-demo-{}", std::process::id()));
    let _rm = RemoveDir(dir.clone());
    let sock = dir.join("weir.sock");
    let mut cfg = bridge_config(&policy, &t.dut_lan, &t.dut_wan)
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    cfg.stats_socket = Some(sock.clone());
    let mut bridge = BridgeThread::start(&t.dut, cfg, None, Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("weir's bridge: {e}"))?;
    // the web server runs here, in the host's namespace, so a browser on the host sees it
    let web = crate::web::WebServer::start(&a.web, sock.clone())?;

    let rcv = IpAddr::V4(BridgeTopo::RCV_ADDR);
    let sink = TcpSink::start(&t.rcv, SocketAddr::new(rcv, 5001), Duration::from_secs(1))?;
    let udp_sink = CbrSink::start(&t.rcv, SocketAddr::new(rcv, 5002), None)?;
    let mut tcp = Vec::new();
    for &src in &senders {
        for _ in 0..2 {
            let mut o = SenderOpts::new(sink.local_addr(), secs, "cubic");
            o.src = Some(IpAddr::V4(src));
            tcp.push(TcpSender::start(&t.snd, o)?);
        }
    }
    // 50 frames/s of 1000 bytes: 400 kbit/s into the 256 kbit/s class
    let mut u = CbrSenderOpts::new(SocketAddr::new(rcv, 5002), 50.0, 1000);
    u.src = Some(SocketAddr::new(IpAddr::V4(class_addr(4)), 0));
    u.duration = Some(secs);
    let udp = CbrSender::start(&t.snd, u)?;

    eprintln!(
        "weir demo: 2 TCP connections (cubic) per class from 10.1.N.1 and 400 kbit/s of UDP from 10.1.4.1 (class c256), for {:.0} s; Ctrl-C stops early",
        secs.as_secs_f64()
    );
    if let Some(w) = &web {
        eprintln!("weir demo: live view http://{}/", w.addr());
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let start = WallInstant::now();
    let (mut first, mut last): (Option<PipelineSnapshot>, Option<PipelineSnapshot>) = (None, None);
    while start.elapsed() < secs && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        let Ok(doc) = weir_io::stats::query(&sock) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&doc)?;
        let Ok(snap) =
            serde_json::from_value::<PipelineSnapshot>(v["outbound"]["pipeline"].clone())
        else {
            continue;
        };
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "weir demo, {:.0} of {:.0} s: the embedded Basic Test policy on a T1 (1.544 Mbit/s)",
            start.elapsed().as_secs_f64(),
            secs.as_secs_f64()
        );
        print!("{}", format_table(&snap, "outbound"));
        if first.is_none() {
            first = Some(snap);
        } else {
            last = Some(snap);
        }
    }
    for s in tcp {
        s.stop();
    }
    let udp = udp.stop();
    let received = udp_sink.stop();
    sink.stop();
    let report = bridge.stop();
    drop(web);
    if let Some(Err(e)) = report {
        anyhow::bail!("weir's bridge: {e}");
    }
    if let (Some(f), Some(s)) = (first, last) {
        // from the first table on: the classes' initial bursts are behind
        let secs = (s.at_ns - f.at_ns) as f64 / 1e9;
        println!("\nwhat each class sent over the last {secs:.0} s (the rate it was held to):");
        for (c, c0) in s.classes.iter().zip(&f.classes).filter(|(c, _)| c.leaf) {
            println!(
                "  {:<6} {:>7.1} kbit/s of {:>5.0} kbit/s",
                c.name,
                (c.sent.bytes - c0.sent.bytes) as f64 * 8.0 / secs / 1e3,
                c.rate_bps as f64 / 1e3
            );
        }
        println!(
            "  UDP into c256: {} of {} datagrams arrived (the rest went over the class's share, or were still queued at the end)",
            received.distinct(),
            udp.sent
        );
    }
    eprintln!("weir demo: removing the namespaces");
    drop(t);
    Ok(ExitCode::SUCCESS)
}

/// A directory removed on the way out.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
