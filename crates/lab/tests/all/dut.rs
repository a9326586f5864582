//! Devices under test in the bridge testbed: weir, the kernel's HTB (with and without
//! per-session child classes) and a user script, each shaping (or forwarding) a real TCP
//! flow, and each leaving the DUT namespace as it found it. Need root; elsewhere they print
//! SKIP and pass.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use weir_core::policy::Policy;
use weir_io::ethtool::{set_offloads, Offloads};
use weir_lab::agents::{icmp_ping, SenderOpts, TcpSender, TcpSink};
use weir_lab::dut::{self, DutReport, DutSetup, DutSpec, Session};
use weir_lab::remote::Host;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

/// The tests measure rates on a 2-core machine: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Link 10 Mbit/s; class a: 2 Mbit/s, no borrowing, for the first alias subnet; class b:
/// 8 Mbit/s, the default.
const TWO_CLASSES: &str = r#"
[link]
rate = "10Mbit"
default = "b"
[[class]]
name = "a"
rate = "2Mbit"
ceil = "2Mbit"
[[class]]
name = "b"
rate = "8Mbit"
[[rule]]
class = "a"
src = "10.77.1.0/24"
"#;

const SINK_PORT: u16 = 5001;

/// The testbed with wire-size frames from the hosts (no TSO/GSO super-packets), TCP
/// timestamps off (MSS 1460), SACK on, and one sender alias (10.77.1.1).
fn topo(label: &str) -> (BridgeTopo, IpAddr) {
    let t = BridgeTopo::new(label).expect("topology");
    for (ns, ifname) in [(&t.snd, t.snd_if.clone()), (&t.rcv, t.rcv_if.clone())] {
        ns.run(move || set_offloads(&ifname, &Offloads::SEGMENTATION_OFF))
            .expect("offloads");
        Host::Local(ns).set_tcp_options(true, false, true).unwrap();
    }
    let alias = t.add_sender_aliases(1).unwrap()[0];
    (t, alias)
}

fn policy(text: &str) -> Policy {
    Policy::parse("two-classes.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

fn sink_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(BridgeTopo::RCV_ADDR), SINK_PORT)
}

/// One cubic flow from `src` for `secs` seconds; goodput over [1.5 s, secs).
fn one_flow(t: &BridgeTopo, src: IpAddr, secs: u64) -> f64 {
    let sink = TcpSink::start(&t.rcv, sink_addr(), Duration::from_millis(100)).unwrap();
    let mut o = SenderOpts::new(sink_addr(), Duration::from_secs(secs), "cubic");
    o.src = Some(src);
    o.notsent_lowat = Some(16_384);
    let snd = TcpSender::start(&t.snd, o).unwrap();
    std::thread::sleep(Duration::from_secs(secs));
    let sr = snd.stop();
    let rep = sink.stop();
    let conn = rep.conns.first().expect("a connection");
    let got = conn.goodput_bps(
        rep.interval,
        Duration::from_millis(1500),
        Duration::from_secs(secs),
    );
    eprintln!(
        "  goodput {got:.0} bit/s, retrans {}, rtt {:?}",
        sr.retrans, sr.rtt
    );
    got
}

fn qdiscs(t: &BridgeTopo, dev: &str) -> Vec<Value> {
    let out = t
        .dut
        .exec_checked(&["tc", "-j", "qdisc", "show", "dev", dev])
        .unwrap();
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn link_exists(t: &BridgeTopo, dev: &str) -> bool {
    t.dut
        .exec(&["ip", "link", "show", "dev", dev])
        .unwrap()
        .status
        .success()
}

fn has_master(t: &BridgeTopo, dev: &str) -> bool {
    let out = t
        .dut
        .exec_checked(&["ip", "-o", "link", "show", "dev", dev])
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains(" master ")
}

/// Nothing of a DUT is left: only the veth default qdisc on lan0/wan0, no br0, no ports.
fn assert_clean(t: &BridgeTopo) {
    for dev in [&t.dut_lan, &t.dut_wan] {
        let q = qdiscs(t, dev);
        assert!(
            q.iter().all(|q| q["kind"] == "noqueue"),
            "{dev} still has qdiscs: {q:?}"
        );
        assert!(!has_master(t, dev), "{dev} is still a bridge port");
    }
    assert!(
        !link_exists(t, BridgeTopo::KERNEL_BRIDGE),
        "{} still exists",
        BridgeTopo::KERNEL_BRIDGE
    );
}

fn check_goodput(name: &str, got: f64, tolerance: f64) {
    let want = 2e6 * 1460.0 / 1514.0;
    let err = got / want - 1.0;
    eprintln!(
        "{name}: goodput {got:.0} bit/s, expected {want:.0} ({:+.2} %, allowed ±{:.0} %)",
        err * 100.0,
        tolerance * 100.0
    );
    assert!(
        err.abs() <= tolerance,
        "{name}: goodput {got:.0} bit/s vs {want:.0} ({:+.2} %)",
        err * 100.0
    );
}

/// The class of `report`'s `dev` counters with this id.
fn class<'a>(report: &'a DutReport, dev: &str, id: &str) -> &'a Value {
    report.counters[dev]["classes"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["classid"] == id))
        .unwrap_or_else(|| panic!("no class {id} on {dev} in {:#}", report.counters))
}

#[test]
fn kernel_htb_shapes_a_tcp_flow_and_cleans_up() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("kernel_htb_shapes_a_tcp_flow_and_cleans_up") {
        return;
    }
    let _g = serial();
    let (t, alias) = topo("dut-htb");
    let p = policy(TWO_CLASSES);
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &p,
        sessions: &[],
        busy_poll: false,
    };
    let d = dut::start(&DutSpec::KernelHtb, &setup).unwrap();
    eprintln!("{}", d.description());
    let got = one_flow(&t, alias, 4);
    let r = d.stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.spec, "kernel:htb");
    assert!(r
        .description
        .contains("tc filter add dev wan0 parent 1: protocol ip prio 1 u32 match ip src 10.77.1.0/24 flowid 1:10"));
    let a = class(&r, "wan0", "1:10");
    assert!(a["bytes"].as_i64().unwrap() > 500_000, "{a}");
    check_goodput("kernel:htb", got, 0.08);
    assert_clean(&t);
}

#[test]
fn kernel_htb_perflow_gives_the_session_its_child_class() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("kernel_htb_perflow_gives_the_session_its_child_class") {
        return;
    }
    let _g = serial();
    let (t, alias) = topo("dut-perflow");
    let p = policy(TWO_CLASSES);
    let sessions = [Session::tcp(SocketAddr::new(alias, 0), sink_addr())];
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &p,
        sessions: &sessions,
        busy_poll: false,
    };
    let d = dut::start(&DutSpec::KernelHtbPerFlow, &setup).unwrap();
    eprintln!("{}", d.description());
    let got = one_flow(&t, alias, 4);
    let r = d.stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // the session's child of class a carried the flow; a's catch-all child (almost) nothing
    let child = class(&r, "wan0", "1:1000");
    assert_eq!(child["parent"], "1:10", "{child}");
    assert!(child["bytes"].as_i64().unwrap() > 500_000, "{child}");
    let other = class(&r, "wan0", "1:1001");
    assert!(other["bytes"].as_i64().unwrap() < 10_000, "{other}");
    check_goodput("kernel:htb-perflow", got, 0.08);
    assert_clean(&t);
}

#[test]
fn weir_cbq_pfq_shapes_a_tcp_flow() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("weir_cbq_pfq_shapes_a_tcp_flow") {
        return;
    }
    let _g = serial();
    let (t, alias) = topo("dut-weir");
    let p = policy(TWO_CLASSES);
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &p,
        sessions: &[],
        busy_poll: false,
    };
    let spec = DutSpec::parse("weir:cbq+pfq").unwrap();
    let d = dut::start(&spec, &setup).unwrap();
    eprintln!("{}", d.description());
    assert!(d.is_running());
    let got = one_flow(&t, alias, 4);
    let r = d.stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(
        r.description.contains("technique cbq+pfq"),
        "{}",
        r.description
    );
    let out = &r.counters["outbound"];
    assert_eq!(
        out["truncated"]["packets"], 0,
        "super-packets reached weir: {out}"
    );
    assert!(out["tx"]["bytes"].as_u64().unwrap() > 500_000, "{out}");
    check_goodput("weir:cbq+pfq", got, 0.05);
    assert_clean(&t);
}

fn write_script(dir: &Path, body: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("dut.sh");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(body.as_bytes()).unwrap();
    drop(f);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn cmd_script_bridges_and_is_stopped() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("cmd_script_bridges_and_is_stopped") {
        return;
    }
    let _g = serial();
    let (t, _alias) = topo("dut-cmd");
    let dir = std::env::temp_dir().join(format!("weir-dut-test-{}", std::process::id()));
    let script = write_script(
        &dir,
        r#"#!/bin/sh
set -e
if [ "$3" = stop ]; then
    ip link del br9
    echo "unbridged"
    exit 0
fi
ip link add br9 type bridge stp_state 0 forward_delay 0
ip link set "$1" master br9
ip link set "$2" master br9
ip link set br9 up
echo "bridged $1 $2 ($WEIR_LAN $WEIR_WAN, action $WEIR_ACTION, link $WEIR_LINK_RATE)"
"#,
    );
    let p = policy(TWO_CLASSES);
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &p,
        sessions: &[],
        busy_poll: false,
    };
    let spec = DutSpec::parse(&format!("cmd:{}", script.display())).unwrap();
    let d = dut::start(&spec, &setup).unwrap();
    assert!(
        d.description()
            .contains("bridged lan0 wan0 (lan0 wan0, action start, link 10000000)"),
        "{}",
        d.description()
    );
    let rtts = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 3, Duration::from_secs(1)).unwrap();
    assert!(rtts.iter().all(|r| r.is_some()), "{rtts:?}");
    let r = d.stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.counters["stop"]["stdout"], "unbridged\n",
        "{:#}",
        r.counters
    );
    assert!(!link_exists(&t, "br9"));
    assert_clean(&t);

    // a failing script is an error carrying its stderr, and is undone
    let failing = write_script(
        &dir.join("fail"),
        "#!/bin/sh\nif [ \"$3\" = stop ]; then ip link del br9 2>/dev/null; exit 0; fi\nip link add br9 type bridge\nip link set \"$1\" master br9\necho 'no can do' >&2\nexit 3\n",
    );
    let e = dut::start(&DutSpec::Cmd(failing), &setup)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no can do") && e.contains("exit status: 3"),
        "{e}"
    );
    assert!(!link_exists(&t, "br9"));
    assert_clean(&t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A panic while a DUT runs (a failing assertion in a test) still removes it: the drop
/// deletes the qdiscs and the bridge.
#[test]
fn a_dropped_dut_cleans_up_even_on_panic() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("a_dropped_dut_cleans_up_even_on_panic") {
        return;
    }
    let _g = serial();
    let (t, alias) = topo("dut-drop");
    let p = policy(TWO_CLASSES);
    let sessions = [Session::tcp(SocketAddr::new(alias, 0), sink_addr())];
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &p,
        sessions: &sessions,
        busy_poll: false,
    };
    for spec in [
        DutSpec::KernelHtb,
        DutSpec::KernelHtbPerFlow,
        DutSpec::parse("weir:cbq").unwrap(),
    ] {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _d = dut::start(&spec, &setup).unwrap();
            if spec != DutSpec::parse("weir:cbq").unwrap() {
                assert!(qdiscs(&t, "wan0").iter().any(|q| q["kind"] == "htb"));
                assert!(link_exists(&t, BridgeTopo::KERNEL_BRIDGE));
            }
            panic!("test failure while {spec} runs");
        }));
        assert!(r.is_err());
        assert_clean(&t);
    }
    // a policy the translation refuses is an error naming the rule, and leaves nothing
    let vlan = policy(
        "[link]\nrate = \"10Mbit\"\ndefault = \"b\"\n[[class]]\nname = \"a\"\nrate = \"1Mbit\"\n[[class]]\nname = \"b\"\nrate = \"1Mbit\"\n[[rule]]\nname = \"tagged\"\nclass = \"a\"\nvlan = 7\n",
    );
    let e = dut::start(
        &DutSpec::KernelHtb,
        &DutSetup {
            policy: &vlan,
            ..setup
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rule 'tagged'"), "{e}");
    assert_clean(&t);
}

/// The trees generated for seed 000's Basic Test (20 sessions, 4 per class) and for a
/// policy with every kind of condition, in both directions, are accepted by the kernel.
#[test]
fn generated_trees_are_accepted_by_tc() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("generated_trees_are_accepted_by_tc") {
        return;
    }
    let _g = serial();
    let (t, _alias) = topo("dut-accept");
    let basic = Policy::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/basic-test.toml"
    )))
    .unwrap_or_else(|e| panic!("{e}"));
    let dst = sink_addr();
    let sessions: Vec<Session> = (1..=5)
        .flat_map(|c| {
            (1..=4).map(move |h| {
                Session::tcp(
                    SocketAddr::new(format!("10.1.{c}.{h}").parse().unwrap(), 0),
                    dst,
                )
            })
        })
        .collect();
    let setup = DutSetup {
        place: t.dut_place(),
        policy: &basic,
        sessions: &sessions,
        busy_poll: false,
    };
    let r = dut::start(&DutSpec::KernelHtbPerFlow, &setup)
        .unwrap()
        .stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let classes = r.counters["wan0"]["classes"].as_array().unwrap();
    // 1:1, five classes, 20 session children, 5 "other" children
    assert_eq!(classes.len(), 31, "{:#}", r.counters);
    assert_clean(&t);

    let mixed = Policy::parse(
        "mixed.toml",
        r#"
[link]
rate = "10Mbit"
default = "bulk"
overhead = 24
direction = "both"
[[class]]
name = "voip"
rate = "1Mbit"
prio = 1
limit = "30000B"
[[class]]
name = "web"
rate = "4Mbit"
[[class]]
name = "bulk"
rate = "5Mbit"
[[rule]]
class = "voip"
dscp = "EF"
[[rule]]
class = "web"
proto = "tcp"
dst = ["192.0.2.0/24", "2001:db8::/32"]
dport = "80,443,1000-1999"
[[rule]]
class = "bulk"
port = "8000-8001"
[[rule]]
class = "web"
src = "10.0.0.0/8"
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = dut::start(
        &DutSpec::KernelHtb,
        &DutSetup {
            policy: &mixed,
            sessions: &[],
            ..setup
        },
    )
    .unwrap()
    .stop();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for dev in ["wan0", "lan0"] {
        assert_eq!(
            r.counters[dev]["classes"].as_array().unwrap().len(),
            4,
            "{:#}",
            r.counters
        );
    }
    assert_clean(&t);
}
