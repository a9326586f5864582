//! `weir stats`: print the counters of a running `weir run`.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::snapshot::{format_table, PipelineSnapshot};

#[derive(clap::Args)]
pub struct Args {
    /// The running weir's statistics socket.
    #[arg(long, default_value = "/run/weir/weir.sock")]
    socket: PathBuf,
    /// Print the raw JSON document.
    #[arg(long)]
    json: bool,
    /// Refresh every second until interrupted.
    #[arg(long)]
    watch: bool,
}

/// What the senders of a lane's frames over the MTU were told (`lane.pmtu` of the
/// statistics document); `None` when no frame was over the MTU.
pub fn pmtu_line(lane: &serde_json::Value) -> Option<String> {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    if n(&lane["oversize"]["packets"]) == 0 {
        return None;
    }
    let p = &lane["pmtu"];
    Some(format!(
        "over MTU: {} ICMP frag-needed + {} ICMPv6 packet-too-big sent back; no reply: {} rate-limited, {} IPv4 without DF, {} not due",
        n(&p["frag_needed"]["packets"]),
        n(&p["packet_too_big"]["packets"]),
        n(&p["rate_limited"]),
        n(&p["df_clear"]),
        n(&p["not_answered"])
    ))
}

/// Fail-open or fail-closed, and what the kernel forwarded while weir did not (a
/// statistics document or a final report).
pub fn failopen_line(doc: &serde_json::Value) -> String {
    let f = &doc["fail_open"];
    if f["enabled"].as_bool() != Some(true) {
        return "fail-closed: nothing passes while weir is not forwarding".into();
    }
    let n = |dir: &str, k: &str| {
        doc[dir]["lane"][k]["packets"]
            .as_u64()
            .or_else(|| doc[dir][k]["packets"].as_u64())
            .unwrap_or(0)
    };
    format!(
        "fail-open after {} ms: the kernel forwarded {} frames outbound and {} inbound while weir was not; {} hand-overs back to weir ({} frames skipped as already forwarded)",
        f["timeout_ms"].as_f64().unwrap_or(0.0),
        n("outbound", "kernel_forwarded"),
        n("inbound", "kernel_forwarded"),
        f["handovers"].as_u64().unwrap_or(0),
        n("outbound", "handover_skipped") + n("inbound", "handover_skipped"),
    )
}

/// One line per capture file (`captures` of a statistics document or a final report).
pub fn capture_lines(doc: &serde_json::Value) -> Vec<String> {
    doc["captures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let stopped = c["stopped"]
                .as_str()
                .map_or(String::new(), |w| format!("; stopped: {w}"));
            format!(
                "capture {}: {} frames written ({} bytes), {} skipped{stopped}",
                c["path"].as_str().unwrap_or("?"),
                c["written"],
                c["bytes"],
                c["skipped"]
            )
        })
        .collect()
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    loop {
        let doc = weir_io::stats::query(&a.socket)?;
        if a.json {
            println!("{}", doc.trim_end());
        } else {
            let v: serde_json::Value = serde_json::from_str(&doc)?;
            if a.watch {
                print!("\x1b[2J\x1b[H");
            }
            println!(
                "weir {} <-> {}, up {:.0}s",
                v["lan"].as_str().unwrap_or("?"),
                v["wan"].as_str().unwrap_or("?"),
                v["uptime_s"].as_f64().unwrap_or(0.0)
            );
            let p = &v["policy"];
            println!(
                "policy {} generation {} ({} reloads, {} refused, {} refused for the rate)",
                p["source"].as_str().unwrap_or("?"),
                p["generation"],
                p["reloads"],
                p["reloads_refused"],
                p["reloads_throttled"].as_u64().unwrap_or(0)
            );
            let c = &v["connections"];
            if !c.is_null() {
                println!(
                    "connections: {} live of {}, {} inserted, {} evicted, {} expired; tcp: {} rtt samples ({} end to end), {} retransmissions",
                    c["live"], c["capacity"], c["inserted"], c["evicted"], c["expired"],
                    c["rtt_samples"], c["rtt_end_to_end"], c["retransmissions"]
                );
            }
            if let Ok(a) =
                serde_json::from_value::<weir_core::device::apps::AppStats>(v["apps"].clone())
            {
                if a.ftp_control > 0 {
                    println!(
                        "ftp: {} control connections ({} not read), {} data connections followed; {} announced, {} refused (third host), {} malformed, {} lines too long, {} gaps, {} expired",
                        a.ftp_control, a.ftp_control_unread, a.ftp_data, a.announced,
                        a.refused_bounce, a.malformed, a.too_long, a.gaps, a.expired
                    );
                }
                let found = [
                    ("http", a.http),
                    ("tls", a.tls),
                    ("ssh", a.ssh),
                    ("dns", a.dns),
                    ("quic", a.quic),
                    ("sip", a.sip),
                    ("rtp", a.rtp),
                ];
                if found.iter().any(|&(_, n)| n > 0) {
                    let list: Vec<String> = found.iter().map(|(k, n)| format!("{k} {n}")).collect();
                    println!(
                        "applications recognised (connections): {}; heads read: {} requests, {} responses, {} ClientHellos ({} over QUIC), {} unread; {} connections not followed (table full)",
                        list.join(", "),
                        a.http_requests, a.http_responses, a.tls_hellos + a.quic_hellos, a.quic_hellos, a.heads_unread, a.streams_full
                    );
                }
            }
            let talkers = v["top_talkers"]
                .as_array()
                .map_or(&[][..], |a| a.as_slice());
            if !talkers.is_empty() {
                println!("top talkers (bytes each way, as of the last sweep of the table):");
                for t in talkers {
                    let t: weir_core::conn::talkers::Talker = serde_json::from_value(t.clone())?;
                    let proto = weir_core::classify::Proto::name(t.proto)
                        .map_or(t.proto.to_string(), str::to_string);
                    let rtt = match (t.rtt_ms, t.rtt_min_ms) {
                        (Some(r), Some(m)) => format!(", rtt {r:.1} ms (least {m:.1})"),
                        _ => String::new(),
                    };
                    println!(
                        "  {proto:<4} {} -> {}: {} / {} bytes, {:.0} s old{rtt}",
                        t.orig, t.reply, t.bytes_orig, t.bytes_reply, t.age_s
                    );
                }
            }
            if let Ok(w) = serde_json::from_value::<weir_io::wake::WakeStats>(v["wake"].clone()) {
                println!("{w}");
            }
            if !v["fail_open"].is_null() {
                println!("{}", failopen_line(&v));
            }
            for l in capture_lines(&v) {
                println!("{l}");
            }
            if !v["adapt"].is_null() {
                let a: weir_core::device::AdaptSnapshot =
                    serde_json::from_value(v["adapt"].clone())?;
                println!("{a}");
            }
            for a in v["admission"].as_array().into_iter().flatten() {
                let a: weir_core::admission::ClassAdmission = serde_json::from_value(a.clone())?;
                println!("{a}");
            }
            for dir in ["outbound", "inbound"] {
                let lane = &v[dir]["lane"];
                println!(
                    "\n{dir}: rx {} frames, tx {} frames, dropped {}, truncated {}, over MTU {}, pool exhausted {}",
                    lane["rx"]["packets"], lane["tx"]["packets"], lane["dropped"]["packets"],
                    lane["truncated"]["packets"], lane["oversize"]["packets"],
                    lane["pool_exhausted"]["packets"]
                );
                if let Some(line) = pmtu_line(lane) {
                    println!("  {line}");
                }
                let m = &lane["mss"];
                let n = |k: &str| m[k].as_u64().unwrap_or(0);
                if n("lowered")
                    + n("kept")
                    + n("inserted")
                    + n("skipped_no_room")
                    + n("skipped_malformed")
                    > 0
                {
                    println!(
                        "  mss clamping: {} lowered, {} kept, {} inserted, {} skipped (no room), {} skipped (malformed)",
                        n("lowered"), n("kept"), n("inserted"), n("skipped_no_room"), n("skipped_malformed")
                    );
                }
                let t = &lane["tcr"];
                if t.is_object() {
                    let n = |k: &str| t[k].as_u64().unwrap_or(0);
                    println!(
                        "  tcp rate control (ACKs towards senders): {} sized, {} unchanged, {} paced, {} at once (dup/SACK/ECE), {} handshakes held, {} without RTT, {} handshake not seen, {} malformed",
                        n("sized"), n("unchanged"), n("paced"), n("at_once"), n("handshakes_held"), n("no_rtt"), n("not_seen"), n("malformed")
                    );
                }
                match v[dir]["pipeline"].clone() {
                    serde_json::Value::Null => println!("  (not shaped: forwarded as is)"),
                    p => {
                        let snap: PipelineSnapshot = serde_json::from_value(p)?;
                        print!("{}", format_table(&snap, dir));
                    }
                }
            }
        }
        if !a.watch {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::pmtu_line;
    use serde_json::json;

    #[test]
    fn the_over_mtu_line() {
        let lane = json!({
            "oversize": { "packets": 9, "bytes": 13_500 },
            "pmtu": {
                "frag_needed": { "packets": 5, "bytes": 2950 },
                "packet_too_big": { "packets": 1, "bytes": 1294 },
                "rate_limited": 2, "df_clear": 1, "not_answered": 0,
            },
        });
        assert_eq!(
            pmtu_line(&lane).unwrap(),
            "over MTU: 5 ICMP frag-needed + 1 ICMPv6 packet-too-big sent back; no reply: 2 rate-limited, 1 IPv4 without DF, 0 not due"
        );
        assert_eq!(pmtu_line(&json!({ "oversize": { "packets": 0 } })), None);
        assert_eq!(pmtu_line(&json!({})), None);
    }
}
