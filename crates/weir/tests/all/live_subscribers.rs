//! Subscriber tables, live (issue 27): `weir run` with a `[subscribers]` policy (a
//! LibreQoS `ShapedDevices.csv`) between two namespaces. Three circuits are three source
//! addresses of the sender (aliases), each with its own plan; iperf3 TCP (cubic, default
//! host settings) from all three at once, uploading and then downloading (`-R`), through a
//! 1 Gbit/s link: each circuit is held to its plan's maximum in each direction, its
//! goodput within ± 3 % of the maximum's TCP payload share (1448 of each 1514-byte frame:
//! weir counts whole frames). Nothing of theirs reaches the `other` class (the table is
//! looked up before the rules). Then the table changes one plan and `weir reload` picks
//! it up: that circuit alone gets its new maximum, and the answer counts the change.
//!
//! `weir run` picks its workers itself (`--workers auto`): on a machine of two CPUs or
//! more, two workers or more, the three circuits dealt among them.
//!
//! Root and iperf3 needed; without them the test prints `SKIP: …` and passes, except
//! under CI (`CI` set).

use crate::common::{have, in_ns, start_weir, stats, weir, Counted, KillOnDrop, TempDir};
use std::net::IpAddr;
use std::process::Stdio;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

/// Download / upload maxima of the three circuits, Mbit/s.
const PLANS: [(u32, u32); 3] = [(12, 6), (24, 12), (36, 18)];
/// TCP payload of a full-sized frame (timestamps on): what iperf3 counts of what weir
/// counts.
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;
const SECONDS: u32 = 6;

fn table(aliases: &[IpAddr], plans: &[(u32, u32)]) -> String {
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    for (i, (a, (down, up))) in aliases.iter().zip(plans).enumerate() {
        csv += &format!("c{i},Subscriber {i},d{i},cpe,,,{a},,1,1,{down},{up},\n");
    }
    csv
}

const POLICY: &str = "[link]\nrate = \"1Gbit\"\ndirection = \"both\"\ndefault = \"other\"\n\
    [[class]]\nname = \"other\"\nrate = \"100Mbit\"\n\
    [subscribers]\nshaped_devices = \"ShapedDevices.csv\"\n";

/// iperf3 from each of `circuits` (their alias) to its own server at once, uploading or
/// (`download`) downloading; each one's goodput in Mbit/s (the receiver's count, first
/// second omitted).
fn iperf3_all(t: &BridgeTopo, circuits: &[(usize, IpAddr)], download: bool) -> Vec<f64> {
    let servers: Vec<KillOnDrop> = circuits
        .iter()
        .map(|&(i, _)| {
            let port = (5301 + i).to_string();
            KillOnDrop(Some(
                in_ns(&t.rcv, &["iperf3", "-s", "-1", "-p", &port])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            ))
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let clients: Vec<_> = circuits
        .iter()
        .map(|&(i, a)| {
            let (port, secs, bind) = ((5301 + i).to_string(), SECONDS.to_string(), a.to_string());
            let mut argv = vec![
                "iperf3", "-c", &rcv, "-p", &port, "-B", &bind, "-C", "cubic", "-t", &secs, "-O",
                "1", "-J",
            ];
            if download {
                argv.push("-R");
            }
            in_ns(&t.snd, &argv)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let got = clients
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "iperf3 output ({e}): {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let bps = v["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .unwrap_or_else(|| panic!("no sum_received: {v}"));
            bps / 1e6
        })
        .collect();
    drop(servers);
    got
}

/// Each goodput against its plan's maximum (`max` Mbit/s): within ± 3 % of its payload
/// share.
fn check(what: &str, got: &[f64], max: &[u32]) {
    for (i, (&g, &m)) in got.iter().zip(max).enumerate() {
        let want = m as f64 * PAYLOAD_SHARE;
        let err = (g - want) / want;
        eprintln!("{what}: circuit c{i}: {g:.2} Mbit/s of goodput, plan {m} Mbit/s (want {want:.2}, {:+.1} %)", err * 100.0);
        assert!(
            err.abs() <= 0.03,
            "{what}: circuit c{i} got {g:.2} Mbit/s, want {want:.2} ± 3 % (plan {m} Mbit/s)"
        );
    }
}

#[test]
fn circuits_get_their_plans_both_ways_and_a_reload_changes_one() {
    let _group = crate::common::group(module_path!());
    let test = "circuits_get_their_plans_both_ways_and_a_reload_changes_one";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let t = BridgeTopo::new("subs").unwrap();
    let aliases = t.add_sender_aliases(PLANS.len()).unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("weir-live-subs-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let policy = dir.0.join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    std::fs::write(dir.0.join("ShapedDevices.csv"), table(&aliases, &PLANS)).unwrap();
    let sock = dir.0.join("weir.sock");
    let _weir = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);

    let circuits: Vec<(usize, IpAddr)> = aliases.iter().copied().enumerate().collect();
    let up = iperf3_all(&t, &circuits, false);
    eprintln!("upload: {}", crate::common::fail_open_note(&stats(&sock)));
    check("upload", &up, &PLANS.map(|p| p.1));
    let down = iperf3_all(&t, &circuits, true);
    let v = stats(&sock);
    eprintln!("download: {}", crate::common::fail_open_note(&v));
    check("download", &down, &PLANS.map(|p| p.0));

    // the circuits' traffic never reached `other` (ARP and the like may)
    let other = crate::common::class_bytes(&v, &["outbound", "inbound"], "other", Counted::Sent);
    assert!(other < 100_000, "'other' sent {other} bytes: {v}");
    for i in 0..PLANS.len() {
        let name = format!("c{i}");
        let sent = crate::common::class_bytes(&v, &["outbound", "inbound"], &name, Counted::Sent);
        assert!(sent > 1_000_000, "circuit {name} sent {sent} bytes");
    }

    // a new plan for c0: upload 6 -> 15 Mbit/s, by reloading the table
    let mut plans = PLANS;
    plans[0].1 = 15;
    std::fs::write(dir.0.join("ShapedDevices.csv"), table(&aliases, &plans)).unwrap();
    let (code, out, err) = weir(&[
        "reload",
        "--socket",
        sock.to_str().unwrap(),
        "--json",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let answer: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        answer["report"]["outbound"]["classes_changed"],
        serde_json::json!(["c0"]),
        "{answer}"
    );
    assert_eq!(
        answer["report"]["inbound"]["classes_changed"],
        serde_json::json!([])
    );
    let up = iperf3_all(&t, &circuits[..1], false);
    check("upload after the reload", &up, &[15]);
}
