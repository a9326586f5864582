//! Real host traffic through `weir emu` and `weir run`, as a new user would send it: three
//! namespaces `snd ─ [weir] ─ rcv` joined by veth, the hosts' offloads left at their
//! defaults (TSO/GSO on: the sender hands weir 64 KB super-packets), iperf3 with cubic.
//!
//! Root and iperf3 needed (`scripts/test` installs iperf3); without them the tests print
//! `SKIP: …` and pass, except under CI (`CI` set), where a missing iperf3 is a failure.

use crate::common::{have, in_ns, iperf3_server, start_weir, KillOnDrop};
use std::process::Stdio;
use std::time::Duration;
use weir_io::ethtool::{get_offloads, set_offloads, Offloads};
use weir_lab::topo::{skip_unless_root, BridgeTopo};
/// The two tests measure rates: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// TCP payload per full frame with timestamps: 1448 of 1514 bytes.
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;

/// SIGTERM weir and return its JSON report.
fn stop_weir(g: KillOnDrop) -> serde_json::Value {
    let out = g.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// iperf3 (cubic, default host settings) from snd to rcv for `secs` after a `omit`-second
/// warm-up; the receiver's goodput in bit/s.
fn iperf3(t: &BridgeTopo, secs: u32, omit: u32) -> f64 {
    let v = iperf3_json(t, secs, omit);
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no goodput in {v}"))
}

/// [`iperf3`]'s whole JSON report.
fn iperf3_json(t: &BridgeTopo, secs: u32, omit: u32) -> serde_json::Value {
    let port = "5201";
    let server = iperf3_server(t);
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let (secs, omit) = (secs.to_string(), omit.to_string());
    let out = in_ns(
        &t.snd,
        &[
            "iperf3", "-c", &rcv, "-p", port, "-C", "cubic", "-t", &secs, "-O", &omit, "-J",
        ],
    )
    .output()
    .unwrap();
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("iperf3 output: {e}: {text}"));
    assert!(out.status.success(), "iperf3 failed: {text}");
    v
}

/// The sender really sends super-packets: its veth keeps TSO and GSO on.
fn assert_default_offloads(t: &BridgeTopo) {
    let i = t.snd_if.clone();
    let o = t.snd.run(move || get_offloads(&i)).unwrap();
    assert_eq!(
        (o.tso, o.gso),
        (Some(true), Some(true)),
        "sender offloads: {o}"
    );
}

/// Checks common to the cases that cut: super-packets really cut, none kept whole, and
/// [`check_accounts`].
fn check_report(r: &serde_json::Value) {
    let o = &r["outbound"];
    assert!(o["gso"]["super_packets"].as_u64().unwrap() > 100, "{o}");
    assert!(
        o["gso"]["segments"].as_u64().unwrap() > o["gso"]["super_packets"].as_u64().unwrap(),
        "{o}"
    );
    assert_eq!(o["gso"]["kept_whole"], 0, "{o}");
    check_accounts(r);
}

/// No frame truncated, no offload error, every frame accounted for.
fn check_accounts(r: &serde_json::Value) {
    let o = &r["outbound"];
    let n = |v: &serde_json::Value| v["packets"].as_u64().unwrap();
    assert_eq!(n(&o["truncated"]), 0, "{o}");
    let errors = &o["offload_errors"];
    let e: u64 = errors.as_object().unwrap().values().map(n).sum();
    assert_eq!(e, 0, "{errors}");
    for l in [&r["outbound"], &r["inbound"]] {
        let out = n(&l["tx"])
            + n(&l["truncated"])
            + n(&l["oversize"])
            + n(&l["pool_exhausted"])
            + n(&l["dropped"])
            + n(&l["shutdown_drops"])
            + n(&l["consumed"])
            + e;
        assert_eq!(
            n(&l["rx"]) + n(&l["duplicated"]) + n(&l["originated"]),
            out,
            "{l}"
        );
    }
}

#[test]
fn tcp_from_a_tso_sender_through_weir_emu_gets_the_rate() {
    let _group = crate::common::group(module_path!());
    let test = "tcp_from_a_tso_sender_through_weir_emu_gets_the_rate";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("tso-emu").unwrap();
    assert_default_offloads(&t);
    let sock = std::env::temp_dir().join(format!("weir-tso-emu-{}.sock", std::process::id()));
    let w = start_weir(&t, &["emu", "--rate", "10Mbit", "--delay", "25ms"], &sock);
    let goodput = iperf3(&t, 10, 2);
    let r = stop_weir(w);
    check_report(&r);
    let ideal = 10e6 * PAYLOAD_SHARE;
    eprintln!(
        "weir emu 10Mbit 25ms, iperf3 cubic from a TSO sender: {:.0} kbit/s = {:.1} % of {:.0}",
        goodput / 1e3,
        100.0 * goodput / ideal,
        ideal / 1e3
    );
    assert!(goodput >= 0.93 * ideal, "{goodput} < 93 % of {ideal}");
    assert!(goodput <= 1.02 * ideal, "{goodput} above the rate {ideal}");
}

/// `weir emu --rate-schedule`: the link runs at 20 Mbit/s, then at 5 Mbit/s from 4 s
/// after its first frame; iperf3 (cubic, TSO sender) follows each rate in turn.
#[test]
fn tcp_through_weir_emu_follows_a_rate_schedule() {
    let _group = crate::common::group(module_path!());
    let test = "tcp_through_weir_emu_follows_a_rate_schedule";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("emu-sched").unwrap();
    let sock = std::env::temp_dir().join(format!("weir-emu-sched-{}.sock", std::process::id()));
    let args = [
        "emu",
        "--rate-schedule",
        "0s=20Mbit,4s=5Mbit",
        "--delay",
        "10ms",
    ];
    let w = start_weir(&t, &args, &sock);
    let v = iperf3_json(&t, 8, 0);
    let r = stop_weir(w);
    check_report(&r);
    let per_s: Vec<f64> = v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sum"]["bits_per_second"].as_f64().unwrap())
        .collect();
    eprintln!(
        "weir emu 0s=20Mbit,4s=5Mbit: iperf3 per second {:?} Mbit/s",
        per_s
            .iter()
            .map(|b| (b / 1e5).round() / 10.0)
            .collect::<Vec<_>>()
    );
    // seconds 2-3 at the first rate, 6-8 at the second (the change falls in second 4
    // or 5, counted from the first frame: the ARP and the control connection); means
    // over those seconds, as the sender's one-second counts alternate with its writes
    let mean = |r: std::ops::Range<usize>| per_s[r.clone()].iter().sum::<f64>() / r.len() as f64;
    for (r, want) in [(1..3, 20e6), (5..8, 5e6)] {
        let got = mean(r.clone());
        assert!(
            got >= 0.9 * want * PAYLOAD_SHARE && got <= 1.05 * want,
            "seconds {}-{}: {got} bit/s, want {want} ({per_s:?})",
            r.start + 1,
            r.end
        );
    }
}

#[test]
fn tcp_from_a_tso_sender_through_weir_run_gets_its_class_rate() {
    let _group = crate::common::group(module_path!());
    let test = "tcp_from_a_tso_sender_through_weir_run_gets_its_class_rate";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("tso-run").unwrap();
    assert_default_offloads(&t);
    let sock = std::env::temp_dir().join(format!("weir-tso-run-{}.sock", std::process::id()));
    // the Basic Test policy: this session falls into the default class, c1100 (1100 kbit/s)
    let w = start_weir(&t, &["run", "--policy", "examples/basic-test.toml"], &sock);
    let goodput = iperf3(&t, 15, 3);
    let r = stop_weir(w);
    check_report(&r);
    let ideal = 1.1e6 * PAYLOAD_SHARE;
    eprintln!(
        "weir run basic-test.toml (c1100), iperf3 cubic from a TSO sender: {:.0} kbit/s = {:.1} % of {:.0}",
        goodput / 1e3,
        100.0 * goodput / ideal,
        ideal / 1e3
    );
    assert!(goodput >= 0.93 * ideal, "{goodput} < 93 % of {ideal}");
    assert!(goodput <= 1.02 * ideal, "{goodput} above the rate {ideal}");
}

/// A 10 Gbit/s link (one class assured all of it): the sender's super-packets cross weir
/// whole (`super_packets = "auto"`: the class is assured ≥ 1 Gbit/s) and the receiver
/// takes them as the kernel bridge would hand them over; the same policy with
/// `super_packets = "split"` cuts every one. Both in one run, the rates printed beside
/// their ratio; whole must be faster, and every frame accounted for either way. Then a
/// 100 Mbit/s class (cut: 93-102 % of its rate as goodput), and the 10 Gbit/s link with
/// TSO and GSO off on weir's outgoing interface (the kernel cuts after weir).
#[test]
fn tcp_from_a_tso_sender_crosses_a_10_gbit_link_whole() {
    let _group = crate::common::group(module_path!());
    let test = "tcp_from_a_tso_sender_crosses_a_10_gbit_link_whole";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("tso-whole").unwrap();
    assert_default_offloads(&t);
    let dir = std::env::temp_dir().join(format!("weir-tso-whole-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rates = vec![];
    // then a 100 Mbit/s class (slower than 1 Gbit/s: cut, wire-size frames on the wire);
    // the last run: weir's outgoing interface without TSO/GSO (a NIC without them): the
    // kernel cuts what weir sends whole, after weir, and nothing stalls
    let runs = [
        ("auto", true, "10Gbit"),
        ("split", true, "10Gbit"),
        ("auto", true, "100Mbit"),
        ("auto", false, "10Gbit"),
    ];
    for (knob, egress_tso, rate) in runs {
        if !egress_tso {
            let i = t.dut_wan.clone();
            t.dut
                .run(move || set_offloads(&i, &Offloads::SEGMENTATION_OFF))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let policy = dir.join(format!("{knob}-{rate}.toml"));
        std::fs::write(
            &policy,
            format!(
                "[link]\nrate = \"{rate}\"\ndefault = \"bulk\"\nsuper_packets = \"{knob}\"\n\
                 [[class]]\nname = \"bulk\"\nrate = \"{rate}\"\n"
            ),
        )
        .unwrap();
        let sock = dir.join(format!("{knob}-{rate}.sock"));
        let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
        let goodput = iperf3(&t, 4, 1);
        let r = stop_weir(w);
        check_accounts(&r);
        let g = &r["outbound"]["gso"];
        eprintln!(
            "{rate} link, super_packets = {knob}, egress TSO {}: {:.0} Mbit/s; weir outbound gso {g}",
            if egress_tso { "on" } else { "off" },
            goodput / 1e6
        );
        let (whole, cut) = (
            g["kept_whole"].as_u64().unwrap(),
            g["super_packets"].as_u64().unwrap(),
        );
        if rate == "100Mbit" {
            // cut; the class's rate as TCP goodput
            assert_eq!(whole, 0, "{g}");
            assert!(cut > 100, "{g}");
            let ideal = 100e6 * PAYLOAD_SHARE;
            assert!(
                goodput >= 0.93 * ideal && goodput <= 1.02 * ideal,
                "{goodput} vs {ideal}"
            );
        } else if knob == "auto" {
            assert!(whole > 100, "{g}");
            // a super-packet is cut only when all large slots are taken
            assert_eq!(cut, g["no_whole_slot"].as_u64().unwrap(), "{g}");
            assert!(cut * 10 < whole, "{g}");
            assert_eq!(g["whole_refused"]["packets"], 0, "{g}");
        } else {
            assert_eq!(whole, 0, "{g}");
            assert!(cut > 100, "{g}");
        }
        rates.push(goodput);
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "one cubic flow from a TSO sender through a 10 Gbit/s link: whole {:.0} Mbit/s, cut {:.0} Mbit/s, ratio {:.2}; whole with weir's egress TSO off {:.0} Mbit/s; through a 100 Mbit/s class {:.1} Mbit/s ({:.1} % of its rate's goodput)",
        rates[0] / 1e6,
        rates[1] / 1e6,
        rates[0] / rates[1],
        rates[3] / 1e6,
        rates[2] / 1e6,
        100.0 * rates[2] / (100e6 * PAYLOAD_SHARE)
    );
    assert!(
        rates[3] > 0.5 * rates[1],
        "egress TSO off: {} Mbit/s",
        rates[3] / 1e6
    );
    assert!(
        rates[0] > rates[1],
        "whole {} <= cut {}",
        rates[0],
        rates[1]
    );
}

/// MSS clamping with real stacks: iperf3 through `weir run` with a class clamped to 256
/// bytes. The client's SYN (outbound, classified into the class) and the server's SYN-ACK
/// (inbound, not shaped: the policy shapes outbound) are both lowered, so the connection
/// the kernel sets up uses segments of at most 256 bytes (iperf3 reports the socket's
/// TCP_MAXSEG: 256 less 12 bytes of timestamp option), data flows, and weir counts it.
#[test]
fn iperf3_through_an_mss_clamped_class_uses_small_segments() {
    let _group = crate::common::group(module_path!());
    let test = "iperf3_through_an_mss_clamped_class_uses_small_segments";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("mss").unwrap();
    let dir = std::env::temp_dir().join(format!("weir-mss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("mss.toml");
    std::fs::write(
        &policy,
        "[link]\nrate = \"10Mbit\"\ndefault = \"bulk\"\n[[class]]\nname = \"bulk\"\nrate = \"10Mbit\"\nmss = 256\n",
    )
    .unwrap();
    let sock = dir.join("weir.sock");
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let v = iperf3_json(&t, 3, 0);
    let r = stop_weir(w);
    let _ = std::fs::remove_dir_all(&dir);
    let mss = v["start"]["tcp_mss_default"].as_u64().unwrap_or(0);
    let goodput = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let (o, i) = (&r["outbound"]["mss"], &r["inbound"]["mss"]);
    eprintln!("iperf3 through mss = 256: TCP_MAXSEG {mss}, goodput {goodput:.0} bit/s; weir outbound {o}, inbound {i}");
    assert!(mss > 0 && mss <= 256, "TCP_MAXSEG {mss}: {v}");
    assert!(goodput > 1e6, "{goodput}");
    // iperf3's control and data connections: each SYN lowered out, each SYN-ACK in
    assert!(o["lowered"].as_u64().unwrap() >= 2, "{o}");
    assert!(i["lowered"].as_u64().unwrap() >= 2, "{i}");
    check_report(&r);
}

/// An iperf3 client (cubic, `secs` s, JSON) from snd to the server on `port`, started now.
fn iperf3_client(t: &BridgeTopo, port: u16, secs: u32) -> std::process::Child {
    let rcv = BridgeTopo::RCV_ADDR.to_string();
    let (port, secs) = (port.to_string(), secs.to_string());
    in_ns(
        &t.snd,
        &[
            "iperf3", "-c", &rcv, "-p", &port, "-C", "cubic", "-t", &secs, "-J",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// Admission control with real clients: a class of `max_sessions = 2` under `mode`; iperf3
/// client A (its control and data connections fill the class) runs 3 s; client B starts
/// 1.5 s into it. Returns B's output, how long B took, and weir's report.
fn admission_run(mode: &str) -> (std::process::Output, Duration, serde_json::Value) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new(&format!("adm-{mode}")).unwrap();
    let dir = std::env::temp_dir().join(format!("weir-adm-{mode}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("admission.toml");
    std::fs::write(
        &policy,
        format!(
            "[link]\nrate = \"10Mbit\"\ndefault = \"bulk\"\n[[class]]\nname = \"bulk\"\n\
             rate = \"10Mbit\"\nmax_sessions = 2\nadmission = \"{mode}\"\n"
        ),
    )
    .unwrap();
    let sock = dir.join("weir.sock");
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let servers: Vec<KillOnDrop> = [5201, 5202]
        .iter()
        .map(|p| {
            KillOnDrop(Some(
                in_ns(&t.rcv, &["iperf3", "-s", "-1", "-p", &p.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            ))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let a = KillOnDrop(Some(iperf3_client(&t, 5201, 3)));
    std::thread::sleep(Duration::from_millis(1500));
    let started = std::time::Instant::now();
    let b = KillOnDrop(Some(iperf3_client(&t, 5202, 1)));
    let b_out = b.wait_output(Duration::from_secs(30));
    let took = started.elapsed();
    let a_out = a.wait_output(Duration::from_secs(30));
    drop(servers);
    let r = stop_weir(w);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        a_out.status.success(),
        "client A: {}",
        String::from_utf8_lossy(&a_out.stdout)
    );
    (b_out, took, r)
}

/// `admission = "refuse"`: client B's SYN is answered with an RST from the server's
/// address, and iperf3 reports the connection refused at once.
#[test]
fn iperf3_beyond_max_sessions_is_refused_with_an_rst() {
    let _group = crate::common::group(module_path!());
    let test = "iperf3_beyond_max_sessions_is_refused_with_an_rst";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let (b, took, r) = admission_run("refuse");
    let text = String::from_utf8_lossy(&b.stdout);
    let adm = &r["admission"][0];
    eprintln!("client B after {took:?}: {text}\nweir admission: {adm}");
    // (iperf3 -J exits 0 even when it could not connect: its JSON says why)
    assert!(
        text.contains("unable to connect to server: Connection refused"),
        "{text}"
    );
    assert!(
        took < Duration::from_secs(1),
        "refused at once, not after {took:?}"
    );
    assert_eq!(adm["class"], "bulk");
    assert_eq!(adm["admitted"], 2, "{adm}");
    assert!(adm["refused"].as_u64().unwrap() >= 1, "{adm}");
    assert_eq!(adm["resets"], adm["refused"], "{adm}");
    // the RSTs went back towards the client, on top of what was received
    assert_eq!(r["inbound"]["originated"]["packets"], adm["resets"], "{r}");
    check_report(&r);
}

/// `admission = "postpone"`: client B's SYN is dropped while A holds both places; its
/// retransmitted SYN after A has closed gets in, and B completes.
#[test]
fn iperf3_beyond_max_sessions_is_postponed_until_a_session_leaves() {
    let _group = crate::common::group(module_path!());
    let test = "iperf3_beyond_max_sessions_is_postponed_until_a_session_leaves";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let (b, took, r) = admission_run("postpone");
    let text = String::from_utf8_lossy(&b.stdout);
    let adm = &r["admission"][0];
    eprintln!("client B after {took:?}: weir admission: {adm}");
    assert!(b.status.success(), "client B failed: {text}");
    // A leaves 1.5 s after B starts; B's SYN and its first retransmission (1 s later)
    // are dropped, a later one gets in (measured: B done after 3.2 s)
    assert!(
        took >= Duration::from_millis(2500),
        "B did not wait: {took:?}"
    );
    assert!(adm["postponed"].as_u64().unwrap() >= 1, "{adm}");
    assert_eq!(adm["refused"], 0, "{adm}");
    assert!(
        adm["admitted"].as_u64().unwrap() >= 4,
        "A's two and B's two: {adm}"
    );
    check_report(&r);
}

/// DiffServ marking of real traffic: iperf3 (cubic, TSO on) through `weir run` with a
/// trTCM meter on its class (CIR 2 Mbit/s, PIR 4 Mbit/s, green AF11, yellow AF12, red
/// AF13, nothing dropped) on a 20 Mbit/s link. At the receiver a per-flow DSCP counter sees
/// the marks weir wrote: per colour, the IP bytes carrying AF11/AF12/AF13 are what weir's
/// meter counted as green/yellow/red (less the queue's drops), green stays within the meter's
/// bound CBS + CIR × T and green and yellow within PBS + PIR × T, while the connection
/// sends far more (most of it red).
#[test]
fn iperf3_through_a_trtcm_marker_arrives_marked_as_metered() {
    let _group = crate::common::group(module_path!());
    let test = "iperf3_through_a_trtcm_marker_arrives_marked_as_metered";
    if skip_unless_root(test) || !have(test, "iperf3") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = BridgeTopo::new("dsm").unwrap();
    let dir = std::env::temp_dir().join(format!("weir-dsm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("edge.toml");
    std::fs::write(
        &policy,
        r#"[link]
rate = "20Mbit"
default = "bulk"
[[meter]]
name = "cust"
type = "trtcm"
cir = "2Mbit"
cbs = "15p"
pir = "4Mbit"
pbs = "15p"
green = "af11"
yellow = "af12"
red = "af13"
[[class]]
name = "bulk"
rate = "20Mbit"
meter = "cust"
"#,
    )
    .unwrap();
    let sock = dir.join("weir.sock");
    let counter = weir_lab::agents::DscpCounter::start(&t.rcv, &t.rcv_if).unwrap();
    let started = std::time::Instant::now();
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let v = iperf3_json(&t, 4, 0);
    std::thread::sleep(Duration::from_millis(400)); // a stats publication
    let (code, json, err) =
        crate::common::weir(&["stats", "--socket", sock.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let r = stop_weir(w);
    let weir_secs = started.elapsed().as_secs_f64();
    let stats: serde_json::Value = serde_json::from_str(&json).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let seen = counter.stop();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(seen.error, None);
    let goodput = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let m = &stats["outbound"]["pipeline"]["meters"][0];
    assert_eq!(m["name"], "cust", "{stats}");
    let bytes = |c: &str| m[c]["bytes"].as_u64().unwrap();
    let (green, yellow, red) = (bytes("green"), bytes("yellow"), bytes("red"));
    // what arrived from the sender, per DSCP (IP bytes; non-IP frames are not counted)
    let snd = std::net::IpAddr::V4(BridgeTopo::SND_ADDR);
    let got = seen.sum_where(|f| f.src.ip() == snd).ip_bytes;
    eprintln!(
        "trTCM 2/4 Mbit/s through weir run, iperf3 {goodput:.0} bit/s: meter green {green} \
         yellow {yellow} red {red} B; at the receiver AF11 {} AF12 {} AF13 {} B, other {} B",
        got[10],
        got[12],
        got[14],
        got.iter().sum::<u64>() - got[10] - got[12] - got[14]
    );
    assert!(goodput > 10e6, "goodput {goodput}");
    // what weir metered arrived with its colour's DSCP: never more (a few non-IPv4 bytes
    // of ARP and neighbour discovery are metered too), and less only by what the class
    // queue dropped after metering (TCP overshooting the 20 Mbit/s link; measured 0.15 %)
    for (meter, dscp) in [(green, 10), (yellow, 12), (red, 14)] {
        let rx = got[dscp];
        assert!(
            rx <= meter + 1000,
            "dscp {dscp}: receiver {rx} > meter {meter}"
        );
        assert!(
            meter - rx.min(meter) <= meter / 50 + 1000,
            "dscp {dscp}: receiver {rx} vs meter {meter}"
        );
    }
    assert_eq!(
        got.iter().sum::<u64>(),
        got[10] + got[12] + got[14],
        "unmarked bytes"
    );
    // green ≤ CBS + CIR·T (T = weir's whole run), and the rest yellow/red; the policy's
    // CBS and PBS are both 15 packets
    let burst = 15.0 * 1500.0;
    assert!(
        (green as f64) <= burst + 2e6 / 8.0 * weir_secs,
        "green {green} B in {weir_secs:.2} s"
    );
    assert!((green as f64) >= 0.7 * 2e6 / 8.0 * 4.0, "green {green} B");
    // RFC 2698: only what the peak bucket passes is green or yellow (PBS + PIR·T), and
    // the connection sends far more (over 10 Mbit/s, 2.5 × the PIR): most of it red. (It
    // was red > 3 × (green + yellow), which needs 16 Mbit/s of the 20: a .ci/run here once
    // gave iperf3 14.9, and the meter was right)
    assert!(
        ((green + yellow) as f64) <= burst + 4e6 / 8.0 * weir_secs,
        "green {green} + yellow {yellow} B in {weir_secs:.2} s"
    );
    assert!(red > green + yellow, "red {red} B");
    check_report(&r);
}
