//! LibreQoS's own example files (src/network.example.json, the ShapedDevices.csv rows of
//! its configuration guide) and the mistakes an operator makes.

use super::*;

const NETWORK: &str = r#"{
	"Site_1":
		{
		"downloadBandwidthMbps":1000,
		"uploadBandwidthMbps":1000,
		"type": "Site",
		"children":
			{
				"AP_A":
					{
					"downloadBandwidthMbps":500,
					"uploadBandwidthMbps":500,
					"type": "AP"
					},
				"Site_3":
					{
					"downloadBandwidthMbps":500,
					"uploadBandwidthMbps":500,
					"type": "Site",
					"children":
						{
							"AP_9":
							{
							"downloadBandwidthMbps":120,
							"uploadBandwidthMbps":120,
							"type": "AP"
							}
						}
					}
			}
		},
	"Site_2":
		{
		"downloadBandwidthMbps":500,
		"uploadBandwidthMbps":500,
		"type": "Site",
		"children":
			{
				"AP_1":
				{
				"downloadBandwidthMbps":150,
				"uploadBandwidthMbps":150,
				"type": "AP"
				}
			}
		}
}
"#;

const HEAD: &str = "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n";

fn devices(rows: &str) -> String {
    format!("{HEAD}{rows}")
}

const ROWS: &str = "\
1,\"968 Circle St., Gurnee, IL 60031\",1,Device 1,AP_A,,\"100.64.0.1, 100.64.0.14\",fdd7:b724:0:100::/56,1,1,155,20,
2,\"31 Marconi Street, Lake In The Hills, IL 60156\",2,Device 2,AP_A,,100.64.0.2,fdd7:b724:0:200::/56,1,1,105,18,
2794,\"6 Littleton Drive, Ringgold, GA 30736\",5,Device 5,AP_9,,100.64.0.5,fdd7:b724:0:500::/56,1,1,105,18,
2794,\"6 Littleton Drive, Ringgold, GA 30736\",6,Device 6,AP_9,,100.64.0.6,fdd7:b724:0:600::/56,1,1,105,18,
9,\"525 Birchpond St., Romulus, MI 48174\",11,Device 11,Site_1,,100.64.0.11,fdd7:b724:0:b00::/56,1,1,105,18,
";

fn table(csv: &str) -> Result<Table, Vec<Diag>> {
    let (nodes, _) = parse_network("network.json", NETWORK).unwrap();
    parse_shaped_devices("ShapedDevices.csv", csv, nodes)
}

fn errors(csv: &str) -> Vec<String> {
    table(csv)
        .unwrap_err()
        .iter()
        .map(|d| d.to_string())
        .collect()
}

#[test]
fn the_example_files_read_as_libreqos_means_them() {
    let (nodes, warnings) = parse_network("network.json", NETWORK).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    // parents before children
    for n in &nodes {
        if let Some(p) = n.parent {
            assert!(names.iter().position(|&x| x == n.name).unwrap() > p);
        }
    }
    let ap9 = nodes.iter().find(|n| n.name == "AP_9").unwrap();
    assert_eq!(
        (ap9.download_bps, ap9.upload_bps),
        (120_000_000, 120_000_000)
    );
    assert_eq!(nodes[ap9.parent.unwrap()].name, "Site_3");
    // where the key is: line 22, after seven tabs
    assert_eq!((ap9.line, ap9.col), (22, 8));

    let t = table(&devices(ROWS)).unwrap();
    assert_eq!(t.counts(), (6, 4, 11));
    let c = &t.circuits[0];
    assert_eq!(c.id, "1");
    assert_eq!(c.name, "968 Circle St., Gurnee, IL 60031");
    assert_eq!(
        (
            c.download_min_bps,
            c.upload_min_bps,
            c.download_max_bps,
            c.upload_max_bps
        ),
        (1_000_000, 1_000_000, 155_000_000, 20_000_000)
    );
    let shown: Vec<String> = c.prefixes.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        shown,
        vec!["100.64.0.1/32", "100.64.0.14/32", "fdd7:b724:0:100::/56"]
    );
    assert_eq!(t.nodes[c.node.unwrap()].name, "AP_A");
    // circuit 2794: two devices, one circuit, four prefixes
    let c = t.circuits.iter().find(|c| c.id == "2794").unwrap();
    assert_eq!((c.devices.len(), c.prefixes.len(), c.line), (2, 4, 4));
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn a_flat_network_and_the_sqm_column() {
    let (nodes, _) = parse_network("network.json", "{}").unwrap();
    assert!(nodes.is_empty());
    let csv = format!(
        "{},sqm\n7,home,1,r,,,192.0.2.7,,2,1,50,10,,cake/fq_codel\n",
        HEAD.trim_end()
    );
    let t = parse_shaped_devices("d.csv", &csv, nodes).unwrap();
    assert_eq!((t.circuits.len(), t.circuits[0].node), (1, None));
}

#[test]
fn virtual_nodes_hand_their_circuits_to_the_nearest_real_one() {
    let net = r#"{"Region": {"downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 1000,
        "children": {"Town": {"virtual": true, "downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500,
            "children": {"AP_A": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 200}}}}}}"#;
    let (nodes, _) = parse_network("n.json", net).unwrap();
    let csv = devices("1,a,1,d,Town,,10.0.0.1,,1,1,10,10,\n2,b,2,d,AP_A,,10.0.0.2,,1,1,10,10,\n");
    let t = parse_shaped_devices("d.csv", &csv, nodes).unwrap();
    let node = |i: usize| t.nodes[t.circuits[i].node.unwrap()].name.clone();
    assert_eq!(
        (node(0), node(1)),
        ("Region".to_string(), "AP_A".to_string())
    );
    assert_eq!(t.counts().0, 2);
}

#[test]
fn mistakes_are_located_and_explained() {
    // min above max, a bad address, an unknown parent
    let e = errors(&devices(
        "1,a,1,d,AP_A,,10.0.0.1,,50,1,20,10,\n\
         2,b,2,d,AP_A,,10.0.0.300,,1,1,20,10,\n\
         3,c,3,d,AP_Z,,10.0.0.3,,1,1,20,10,\n\
         4,d,4,d,AP_A,,,,1,1,20,10,\n\
         5,e,5,d,AP_A,,10.0.0.5,,1,1,fast,10,\n",
    ));
    let has = |s: &str| assert!(e.iter().any(|x| x.contains(s)), "{s} not in {e:#?}");
    has("ShapedDevices.csv:2:25: Download Min 50 Mbit/s is above Download Max 20 Mbit/s");
    has("ShapedDevices.csv:3:15: ");
    has("'10.0.0.300' is not an IPv4 or IPv6 address");
    has("ShapedDevices.csv:4:9: Parent Node 'AP_Z' is not a node of the network file");
    has("ShapedDevices.csv:5:15: circuit '4': a device needs at least one IPv4 or IPv6 address");
    has("ShapedDevices.csv:6:");
    has("Download Max Mbps: 'fast' is not a rate in Mbit/s above 0");
    // a prefix listed twice, an overlapping one, a device that disagrees with its circuit
    let e = errors(&devices(
        "1,a,1,d,AP_A,,10.0.0.0/29,,1,1,20,10,\n\
         2,b,2,d,AP_A,,10.0.0.4,,1,1,20,10,\n\
         3,c,3,d,AP_A,,10.0.1.1,,1,1,20,10,\n\
         4,d,4,d,AP_A,,10.0.1.1,,1,1,20,10,\n\
         1,a,9,d2,AP_1,,10.0.9.9,,1,1,20,10,\n",
    ));
    let has = |s: &str| assert!(e.iter().any(|x| x.contains(s)), "{s} not in {e:#?}");
    has("ShapedDevices.csv:3:15: 10.0.0.4/32 (circuit '2') lies inside 10.0.0.0/29 (circuit '1', line 2)");
    has("ShapedDevices.csv:5:15: 10.0.1.1/32 (circuit '4') listed again 10.0.1.1/32 (circuit '3', line 4)");
    has("ShapedDevices.csv:6:1: circuit '1': this device's parent node or rates differ from the circuit's first row (line 2)");
    // the header and the shape of rows
    let e = errors("Circuit,Name\n1,a\n");
    assert!(
        e[0].starts_with("ShapedDevices.csv:1:1: header column 1 should be 'circuit id'"),
        "{e:?}"
    );
    let e = errors(&devices("1,a,1\n"));
    assert_eq!(
        e,
        vec!["ShapedDevices.csv:2:1: expected 13 fields, found 3"]
    );
    let e = errors(&devices("1,\"a,1\n"));
    assert_eq!(
        e,
        vec!["ShapedDevices.csv:2:3: a quoted field never closes"]
    );
}

#[test]
fn network_mistakes_are_located() {
    let e = parse_network(
        "n.json",
        "{\"A\": {\"downloadBandwidthMbps\": 10,\n \"uploadBandwidthMbps\": 10,}}",
    )
    .unwrap_err();
    assert!(e[0].to_string().starts_with("n.json:2:"), "{e:?}");
    assert!(e[0].msg.contains("not valid JSON"), "{e:?}");
    let e = parse_network("n.json", "{\n  \"A\": {\"uploadBandwidthMbps\": 10}\n}").unwrap_err();
    assert_eq!(
        e[0].to_string(),
        "n.json:2:3: node 'A': downloadBandwidthMbps (Mbit/s, a number) is missing"
    );
    let e = parse_network(
        "n.json",
        "{\"A\": {\"downloadBandwidthMbps\": 10, \"uploadBandwidthMbps\": 10, \"children\": {\n\"A\": {\"downloadBandwidthMbps\": 1, \"uploadBandwidthMbps\": 1}}}}",
    )
    .unwrap_err();
    assert!(
        e[0].msg
            .contains("node 'A' appears twice (first at line 1)"),
        "{e:?}"
    );
    let e = parse_network("n.json", "[]").unwrap_err();
    assert!(e[0].msg.contains("expected an object of nodes"), "{e:?}");
}

#[test]
fn oversubscribed_nodes_are_a_warning() {
    // AP_1 (150 Mbit/s) with two circuits of 100 Mbit/s minimum download
    let t = table(&devices(
        "1,a,1,d,AP_1,,10.0.0.1,,100,1,200,10,\n2,b,2,d,AP_1,,10.0.0.2,,100,1,200,10,\n",
    ))
    .unwrap();
    let w: Vec<String> = t.warnings.iter().map(|d| d.to_string()).collect();
    assert!(
        w.iter().any(|x| x.contains("node 'AP_1': its circuits' and children's download minimums add up to 200 Mbit/s, more than its 150 Mbit/s")),
        "{w:#?}"
    );
    assert!(!w.iter().any(|x| x.contains("upload")), "{w:#?}");
}

/// 100,000 rows of garbage: refused with their errors, without a panic.
#[test]
fn a_table_of_garbage_is_refused_not_a_crash() {
    let mut csv = String::from(HEAD);
    for i in 0..100_000 {
        csv.push_str(&format!(
            "{i},x\u{0},\"q\"\"\",{i}.{i},,zz,::g,1e999,-3,NaN,,\n"
        ));
    }
    let e = table(&csv).unwrap_err();
    assert!(e.len() >= 100_000, "{}", e.len());
    assert!(
        e[0].to_string().starts_with("ShapedDevices.csv:2:"),
        "{}",
        e[0]
    );
}

proptest::proptest! {
    /// Arbitrary text in either file: a table or errors, never a panic.
    #[test]
    fn arbitrary_files_never_panic(net in ".{0,200}", rows in "[0-9a-zA-Z,\"\n:./ -]{0,400}") {
        let _ = parse_network("n.json", &net);
        let nodes = parse_network("n.json", NETWORK).unwrap().0;
        let _ = parse_shaped_devices("d.csv", &format!("{HEAD}{rows}"), nodes.clone());
        let _ = parse_shaped_devices("d.csv", &rows, nodes);
    }
}
