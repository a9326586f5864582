//! `[adapt]` (Postgate) with real stacks: `weir run` between two namespaces, shaping
//! inbound (rcv → snd), probing rcv — a real Linux host answering ARP and ICMP echo with
//! its default settings — from an address no host uses. Then the replies stop
//! (`net.ipv4.icmp_echo_ignore_all = 1` on rcv, as a router that filters or rate-limits
//! ICMP would) and come back.
//!
//! Root needed; otherwise the test prints `SKIP: …` and passes.

use crate::common::{in_ns, start_weir, TempDir};
use std::time::Duration;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

/// The adapt section of the running weir's statistics.
fn adapt(sock: &std::path::Path) -> serde_json::Value {
    let doc = weir_io::stats::query(sock).unwrap();
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    v["adapt"].clone()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn echo_ignore(t: &BridgeTopo, on: bool) {
    let v = format!("net.ipv4.icmp_echo_ignore_all={}", on as u8);
    let out = in_ns(&t.rcv, &["sysctl", "-qw", &v]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn postgate_probes_a_real_host_falls_back_when_replies_stop_and_recovers() {
    let _group = crate::common::group(module_path!());
    let test = "postgate_probes_a_real_host_falls_back_when_replies_stop_and_recovers";
    if skip_unless_root(test) {
        return;
    }
    let t = BridgeTopo::new("adapt").unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("weir-adapt-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let policy = dir.0.join("postgate.toml");
    std::fs::write(
        &policy,
        format!(
            r#"
[link]
rate = "20Mbit"
direction = "inbound"
default = "bulk"
[[class]]
name = "voice"
rate = "2Mbit"
[[class]]
name = "bulk"
rate = "18Mbit"
[[rule]]
class = "voice"
proto = "udp"
[adapt]
mode = "postgate"
target = "{}"
source = "10.77.0.250"
interval = "20ms"
timeout = "300ms"
floor = "40%"
"#,
            BridgeTopo::RCV_ADDR
        ),
    )
    .unwrap();
    let sock = dir.0.join("weir.sock");
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);

    // rcv answers weir's ARP request, then its probes
    std::thread::sleep(Duration::from_millis(1500));
    let a = adapt(&sock);
    assert!(a["target_mac"].is_string(), "{a}");
    assert!(n(&a["counters"]["replies"]) >= 40, "{a}");
    assert!(a["min_rtt_ms"].as_f64().unwrap() < 5.0, "{a}");
    assert_eq!(a["fallback"], false, "{a}");
    assert!(
        a["rate_fraction"].as_f64().unwrap() > 0.95,
        "an idle line: {a}"
    );

    // the replies stop: after the 300 ms timeout the link is at its floor, 8 Mbit/s
    echo_ignore(&t, true);
    std::thread::sleep(Duration::from_millis(900));
    let a = adapt(&sock);
    let restore = scopeguard(&t);
    assert_eq!(a["fallback"], true, "{a}");
    assert_eq!(n(&a["counters"]["fallbacks"]), 1, "{a}");
    assert_eq!(n(&a["rate_bps"]), 8_000_000, "{a}");
    let replies = n(&a["counters"]["replies"]);

    // and resume
    echo_ignore(&t, false);
    std::thread::sleep(Duration::from_millis(600));
    let a = adapt(&sock);
    assert_eq!(a["fallback"], false, "{a}");
    assert!(n(&a["counters"]["replies"]) > replies + 10, "{a}");
    drop(restore);

    let out = w.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("weir: warning: adapt: no reply from 10.77.0.2"),
        "{stderr}"
    );
    assert!(stderr.contains("replies from 10.77.0.2 again"), "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let (out_lane, in_lane) = (&r["outbound"], &r["inbound"]);
    // probes and ARP leave outbound on top of what snd sent; replies and ARP end inbound
    let probes = n(&r["adapt"]["counters"]["probes_sent"]);
    assert!(n(&out_lane["originated"]["packets"]) >= probes, "{r}");
    assert!(
        n(&in_lane["consumed"]["packets"]) >= n(&r["adapt"]["counters"]["replies"]),
        "{r}"
    );
}

/// Turn rcv's echo replies back on if the test fails in between.
fn scopeguard(t: &BridgeTopo) -> impl Drop + '_ {
    struct Restore<'a>(&'a BridgeTopo);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let v = "net.ipv4.icmp_echo_ignore_all=0";
            let _ = in_ns(&self.0.rcv, &["sysctl", "-qw", v]).output();
        }
    }
    Restore(t)
}
