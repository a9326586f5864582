//! Generator reach: unlimited trials on a direct veth pair (two extra namespaces, no DUT).

use crate::bench::Trial;
use crate::frame::build_frames;
use crate::generator::{Gen, GenCmd};
use crate::opts::Opts;
use crate::receiver::Recv;
use crate::sys::{install_sink, mac_of, sh};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use weir_io::ethtool::{set_offloads, Offloads};
use weir_lab::topo::{link_veth, set_up, wait_link_up, Netns};

/// Generator reach on a direct veth pair (two extra namespaces, no DUT).
pub(crate) fn calibrate(
    opts: &Opts,
    gen_cpu: Option<usize>,
    recv_cpu: Option<usize>,
) -> Result<Vec<Trial>, String> {
    let a = Netns::new("fwd-gen").map_err(|e| e.to_string())?;
    let b = Netns::new("fwd-sink").map_err(|e| e.to_string())?;
    link_veth(&a, "gen0", &b, "sink0").map_err(|e| e.to_string())?;
    set_up(&a, "gen0").map_err(|e| e.to_string())?;
    set_up(&b, "sink0").map_err(|e| e.to_string())?;
    wait_link_up(&a, "gen0", Duration::from_secs(3)).map_err(|e| e.to_string())?;
    wait_link_up(&b, "sink0", Duration::from_secs(3)).map_err(|e| e.to_string())?;
    for (ns, i) in [(&a, "gen0"), (&b, "sink0")] {
        ns.run(move || set_offloads(i, &Offloads::SEGMENTATION_OFF))
            .map_err(|e| e.to_string())?;
    }
    sh(&b, "ip addr add 10.77.0.2/24 dev sink0").ok();
    let (_, _sock) = install_sink(&b, "sink0");
    let src = mac_of(&a, "gen0")?;
    let dst = mac_of(&b, "sink0")?;
    let recv = Recv::start(&b, "sink0", recv_cpu)?;
    let gen = Gen::start(&a, "gen0", gen_cpu)?;
    let dur = Duration::from_millis(opts.trial_ms);
    let mut out = Vec::new();
    for (k, &size) in opts.sizes.iter().enumerate() {
        let trial = 1_000_000 + k as u32;
        recv.begin(trial, (dur.as_secs_f64() * 10e6) as u64);
        let g = gen.run(GenCmd {
            trial,
            rate: None,
            dur,
            frames: Arc::new(build_frames(size, src, dst, 1)),
        });
        let r = recv.end(Duration::from_millis(100));
        let achieved = g.sent as f64 * 1e9 / g.elapsed_ns as f64;
        let lost = g.sent as i64 - r.unique as i64;
        eprintln!(
            "  direct veth {size:>4} B: generator reach {achieved:>9.0} pps, receiver lost {lost}{}",
            if r.ring_drops > 0 { " [receiver ring dropped]" } else { "" }
        );
        out.push(Trial {
            dut: "direct-veth".into(),
            frame: size,
            phase: "reach".into(),
            target_pps: None,
            gen: g,
            achieved_pps: achieved,
            recv: r,
            lost,
            loss_fraction: lost.max(0) as f64 / g.sent.max(1) as f64,
            pass: lost <= 0,
            gen_short: false,
            receiver_limited: r.ring_drops > 0,
            softnet_dropped: 0,
            left_in_generator: 0,
            weir_tx_not_on_wire: None,
            ifs: BTreeMap::new(),
            weir_outbound: None,
            weir_inbound: None,
            cpu: None,
        });
    }
    drop(gen);
    drop(recv);
    Ok(out)
}
