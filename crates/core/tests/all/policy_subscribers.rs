//! `[subscribers]`: a LibreQoS table (`ShapedDevices.csv`, `network.json`) becomes node and
//! circuit classes with their rates by direction, and the classifier finds circuits by
//! longest-prefix match before the rules.

use std::net::IpAddr;
use std::path::PathBuf;
use weir_core::classify::{Fields, CIRCUIT_RULE, DEFAULT_RULE};
use weir_core::policy::{Policy, SubscriberClass};
use weir_core::Direction;

const NETWORK: &str = r#"{
  "site1": {
    "downloadBandwidthMbps": 1000,
    "uploadBandwidthMbps": 200,
    "children": {
      "ap1": { "downloadBandwidthMbps": 100, "uploadBandwidthMbps": 20 },
      "group": {
        "downloadBandwidthMbps": 500, "uploadBandwidthMbps": 100, "virtual": true,
        "children": {
          "ap2": { "downloadBandwidthMbps": 300, "uploadBandwidthMbps": 60 }
        }
      },
      "empty": { "downloadBandwidthMbps": 50, "uploadBandwidthMbps": 10 }
    }
  }
}
"#;

const HEADER: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n";

fn devices() -> String {
    HEADER.to_string()
        + "alice,Alice,a1,router,ap1,,100.64.0.1,2001:db8:1::/48,10,2,50,10,\n"
        + "bob,Bob,b1,router,ap1,,100.64.0.2/31,,20,4,100,20,\n"
        + "carol,Carol,c1,router,ap2,,\"100.64.1.0/24, 100.64.2.1\",,30,6,300,60,\n"
        + "dave,Dave,d1,cpe,,,100.64.9.9,,5,1,10,2,flat\n"
}

const POLICY: &str = r#"
[link]
rate = "1Gbit"
inbound_rate = "2Gbit"
direction = "both"
default = "other"

[[class]]
name = "other"
rate = "10Mbit"

[subscribers]
shaped_devices = "ShapedDevices.csv"
network = "network.json"
"#;

/// A directory of its own with the three files (`policy.toml` and the table's two).
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str, policy: &str, net: &str, csv: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("weir-subs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("policy.toml"), policy).unwrap();
        std::fs::write(d.join("network.json"), net).unwrap();
        std::fs::write(d.join("ShapedDevices.csv"), csv).unwrap();
        Dir(d)
    }
    fn policy(&self) -> PathBuf {
        self.0.join("policy.toml")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load(tag: &str, policy: &str, net: &str, csv: &str) -> Result<Policy, Vec<String>> {
    let d = Dir::new(tag, policy, net, csv);
    Policy::load(&d.policy()).map_err(|e| e.0.iter().map(|e| e.to_string()).collect())
}

fn class<'a>(p: &'a Policy, name: &str) -> &'a weir_core::policy::ClassDef {
    p.classes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no class {name}"))
}

fn parent_name<'a>(p: &'a Policy, name: &str) -> &'a str {
    &p.classes[class(p, name).parent.unwrap()].name
}

/// (rate, ceil) outbound and inbound, Mbit/s.
fn rates(p: &Policy, name: &str) -> [(f64, f64); 2] {
    let c = class(p, name);
    let i = c.inbound.expect("inbound rates");
    [
        (c.rate as f64 / 1e6, c.ceil as f64 / 1e6),
        (i.rate as f64 / 1e6, i.ceil as f64 / 1e6),
    ]
}

#[test]
fn a_libreqos_table_becomes_node_and_circuit_classes() {
    let p = load("tree", POLICY, NETWORK, &devices()).unwrap_or_else(|e| panic!("{e:#?}"));
    let s = p.subscribers.as_ref().expect("a table");
    // site1, ap1, ap2 (the virtual group and the empty AP are not classes)
    assert_eq!((s.nodes, s.circuits, s.prefixes), (3, 4, 6));
    assert!(p.class_index("group").is_none() && p.class_index("empty").is_none());
    assert_eq!(class(&p, "site1").subscriber, Some(SubscriberClass::Node));
    assert_eq!(
        class(&p, "alice").subscriber,
        Some(SubscriberClass::Circuit)
    );
    assert!(class(&p, "alice").leaf && !class(&p, "ap1").leaf);
    // the tree: the virtual node's child hangs from its nearest real ancestor
    assert_eq!(parent_name(&p, "site1"), "link");
    assert_eq!(parent_name(&p, "ap2"), "site1");
    assert_eq!(parent_name(&p, "alice"), "ap1");
    assert_eq!(parent_name(&p, "carol"), "ap2");
    assert_eq!(parent_name(&p, "dave"), "link");
    // circuits: upload outbound, download inbound; min assured, max the ceiling
    assert_eq!(rates(&p, "alice"), [(2.0, 10.0), (10.0, 50.0)]);
    assert_eq!(rates(&p, "carol"), [(6.0, 60.0), (30.0, 300.0)]);
    // nodes: assured their circuits' minimums, up to their bandwidth
    assert_eq!(rates(&p, "ap1"), [(6.0, 20.0), (30.0, 100.0)]);
    assert_eq!(rates(&p, "site1"), [(12.0, 200.0), (60.0, 1000.0)]);
    // the modern leaf queue, and no warning that no rule feeds 4 circuits
    assert_eq!(class(&p, "bob").queue.name(), "fq");
    assert!(
        p.warnings.iter().all(|w| !w.msg.contains("no rule")),
        "{:#?}",
        p.warnings
    );
    // the inbound view puts the download rates in place
    let inb = p.for_direction(Direction::Inbound);
    assert_eq!(inb.classes[p.class_index("bob").unwrap()].ceil, 100_000_000);
}

fn fields(src: &str, dst: &str) -> Fields {
    let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    Fields::ip(s, d, 6, Some(40000), Some(443))
}

#[test]
fn circuits_are_found_by_the_subscribers_address_before_the_rules() {
    let policy =
        format!("{POLICY}\n[[rule]]\nname = \"all-tcp\"\nclass = \"other\"\nproto = \"tcp\"\n");
    let p = load("classify", &policy, NETWORK, &devices()).unwrap_or_else(|e| panic!("{e:#?}"));
    let out = p.classifier_in(Direction::Outbound).unwrap();
    let inb = p.classifier_in(Direction::Inbound).unwrap();
    let idx = |n: &str| p.class_index(n).unwrap() as u32;
    // outbound: the LAN side's source; inbound: its destination
    assert_eq!(
        out.lookup(&fields("100.64.0.3", "8.8.8.8")),
        (idx("bob"), CIRCUIT_RULE)
    );
    assert_eq!(
        inb.lookup(&fields("8.8.8.8", "100.64.1.77")),
        (idx("carol"), CIRCUIT_RULE)
    );
    assert_eq!(
        inb.lookup(&fields("2001:db8::1", "2001:db8:1:ff::9")),
        (idx("alice"), CIRCUIT_RULE)
    );
    // the other side's address does not count
    assert_eq!(
        out.lookup(&fields("8.8.8.8", "100.64.0.1")),
        (idx("other"), 0)
    );
    // not in the table: the rules, then the default
    assert_eq!(
        out.lookup(&fields("10.0.0.1", "8.8.8.8")),
        (idx("other"), 0)
    );
    let mut udp = fields("10.0.0.1", "8.8.8.8");
    udp.proto = Some(17);
    assert_eq!(out.lookup(&udp), (idx("other"), DEFAULT_RULE));
    // hits are counted apart from the rules'
    let mut c = out.clone();
    c.classify(&fields("100.64.9.9", "1.1.1.1"), 100);
    assert_eq!(c.circuits.as_ref().unwrap().hits.packets, 1);
    assert_eq!(c.hits[0].packets, 0);
}

#[test]
fn oversubscribed_minimums_are_scaled_to_fit_and_warned() {
    // ap1 assures at most 20 Mbit/s up and 100 down; its circuits ask 6 up (fits) and
    // 30 + 120 down (does not)
    let csv = HEADER.to_string()
        + "alice,Alice,a1,router,ap1,,100.64.0.1,,30,2,50,10,\n"
        + "bob,Bob,b1,router,ap1,,100.64.0.2,,120,4,200,20,\n";
    let p = load("over", POLICY, NETWORK, &csv).unwrap_or_else(|e| panic!("{e:#?}"));
    // each is assured 100/150 of its download minimum
    assert_eq!(rates(&p, "alice")[1].0, 20.0);
    assert_eq!(rates(&p, "bob")[1].0, 80.0);
    assert_eq!(rates(&p, "alice")[0].0, 2.0, "upload fits: unchanged");
    assert!(
        p.warnings.iter().any(|w| w
            .msg
            .contains("download minimums under 'ap1' add up to 150")
            && w.msg.contains("66.7 %")),
        "{:#?}",
        p.warnings
    );
}

#[test]
fn a_table_under_a_class_shares_its_rate_with_the_written_children() {
    let policy = r#"
[link]
rate = "1Gbit"
direction = "both"
default = "other"

[[class]]
name = "customers"
rate = "100Mbit"

[[class]]
name = "staff"
parent = "customers"
rate = "90Mbit"

[[class]]
name = "other"
rate = "10Mbit"

[subscribers]
shaped_devices = "ShapedDevices.csv"
parent = "customers"
"#;
    // flat: every circuit under `customers`, which has 10 Mbit/s left after staff
    let csv = HEADER.to_string()
        + "alice,Alice,a1,router,,,100.64.0.1,,10,10,50,50,\n"
        + "bob,Bob,b1,router,,,100.64.0.2,,10,10,50,50,\n";
    let p = load("attach", policy, "{}", &csv).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(parent_name(&p, "alice"), "customers");
    assert_eq!(rates(&p, "alice"), [(5.0, 50.0), (5.0, 50.0)]);
    assert!(p
        .warnings
        .iter()
        .any(|w| w.msg.contains("under 'customers'")));
}

#[test]
fn mistakes_in_the_table_are_errors_at_their_place() {
    let e = load(
        "unknown-parent",
        POLICY,
        NETWORK,
        &(HEADER.to_string() + "alice,Alice,a1,r,nowhere,,100.64.0.1,,1,1,2,2,\n"),
    )
    .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.contains("ShapedDevices.csv:2:") && e.contains("nowhere")),
        "{e:#?}"
    );
    // a circuit id that is also a node's name
    let e = load(
        "clash",
        POLICY,
        NETWORK,
        &(HEADER.to_string() + "site1,X,a1,r,ap1,,100.64.0.1,,1,1,2,2,\n"),
    )
    .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.contains("ShapedDevices.csv:2:1:") && e.contains("already the name")),
        "{e:#?}"
    );
    // a circuit id that is a class of the policy
    let e = load(
        "clash2",
        POLICY,
        NETWORK,
        &(HEADER.to_string() + "other,X,a1,r,ap1,,100.64.0.1,,1,1,2,2,\n"),
    )
    .unwrap_err();
    assert!(e.iter().any(|e| e.contains("already the name")), "{e:#?}");
    // a file that is not there; a parent class that is not defined
    let e = load(
        "missing",
        &POLICY.replace("network.json", "nope.json"),
        NETWORK,
        &devices(),
    )
    .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.contains("`network`: cannot read") && e.contains("nope.json")),
        "{e:#?}"
    );
    let e = load(
        "no-parent",
        &format!("{POLICY}parent = \"nobody\"\n"),
        NETWORK,
        &devices(),
    )
    .unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.contains("'nobody' is not a defined class")),
        "{e:#?}"
    );
    // a policy given as text names files it cannot read
    let e = Policy::parse("p.toml", POLICY).unwrap_err();
    assert!(e.to_string().contains("came from no file"), "{e}");
    // an unknown key
    let e = load("key", &format!("{POLICY}shaped = 1\n"), NETWORK, &devices()).unwrap_err();
    assert!(e.iter().any(|e| e.contains("shaped")), "{e:#?}");
}

#[test]
fn a_table_of_garbage_is_refused_with_its_first_errors() {
    let mut csv = HEADER.to_string();
    for i in 0..100_000 {
        csv += &format!("c{i},x,d,n,,,not-an-address,,fast,1,2,3,\n");
    }
    let e = load("garbage", POLICY, "{}", &csv).unwrap_err();
    assert!(e.len() <= 52, "{} errors", e.len());
    assert!(
        e.iter().any(|e| e.contains("more errors not shown")),
        "{e:#?}"
    );
    assert!(e[0].contains("ShapedDevices.csv:2:"), "{}", e[0]);
}

#[test]
fn ten_thousand_generated_circuits_load_and_build() {
    let (net, csv) = weir_core::subscribers::generate::generate(10_000, 1);
    let policy = weir_core::subscribers::generate::POLICY;
    let d = Dir::new("10k", policy, &net, &csv);
    let p = Policy::load(&d.policy()).unwrap_or_else(|e| panic!("{e}"));
    let s = p.subscribers.as_ref().unwrap();
    assert_eq!((s.nodes, s.circuits), (110, 10_000));
    // 1 + other + 110 nodes + 10,000 circuits
    assert_eq!(p.classes.len(), 10_112);
    assert!(
        p.warnings.is_empty(),
        "{:#?}",
        &p.warnings[..p.warnings.len().min(5)]
    );
    // the whole device: 20,000 circuit leaves, none of their queues built yet
    let dev =
        weir_core::policy::Device::new(p.device_config(weir_core::Instant::ZERO).unwrap()).unwrap();
    for dir in [Direction::Outbound, Direction::Inbound] {
        let ls = dev
            .pipeline(dir)
            .and_then(|p| p.shaper())
            .expect("a shaper");
        assert_eq!(ls.lazy_queues(), (10_000, 0, 0));
    }
}
