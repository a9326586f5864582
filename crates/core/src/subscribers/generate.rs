//! A synthetic subscriber table in LibreQoS's formats, for benchmarks, tests and trying
//! weir at ISP scale (`weir generate subscribers`, `scripts/subscribers-table`).
//!
//! Shape (deterministic for a given `circuits` and `seed`): a 3-level tree under the
//! link — `sites` sites of 10 access points each, ~100 circuits an access point — so
//! 10,000 circuits are 10 sites, 100 APs. Plans cycle through six download/upload maxima
//! (25/5 … 1000/100 Mbit/s) with minimums 1 % of them; an access point has 1 Gbit/s down
//! and 250 Mbit/s up, a site 10 Gbit/s and 2.5 Gbit/s, so the minimums fit everywhere
//! (10,000 circuits assure 32 Gbit/s down and 3.5 Gbit/s up in all) and the maxima are
//! oversubscribed, as real networks are. Every circuit has
//! one IPv4 address (`100.64.0.0/10`, the shared address space of RFC 6598, in order) and
//! one IPv6 /56 (`2001:db8::/32`, RFC 3849); one circuit in ten has a second device (a
//! second row: its own IPv4 address), and the seed picks which.

use crate::rng::mix64;
use std::fmt::Write;

/// A policy that loads the generated files from its directory: every circuit a class
/// under its access point and site, what no circuit's prefix matches to `other`.
pub const POLICY: &str = r#"# A subscriber table (weir generate subscribers): every circuit of ShapedDevices.csv is
# a class under its access point and site (network.json); what no circuit's prefix
# matches goes to `other`.
[link]
rate = "100Gbit"
direction = "both"
default = "other"

[[class]]
name = "other"
rate = "1Gbit"

[subscribers]
shaped_devices = "ShapedDevices.csv"
network = "network.json"
"#;

/// Circuits per access point and access points per site.
pub const PER_AP: usize = 100;
pub const APS_PER_SITE: usize = 10;

/// Download / upload maximum of the plans, Mbit/s.
const PLANS: [(u32, u32); 6] = [
    (25, 5),
    (50, 10),
    (100, 20),
    (250, 25),
    (500, 50),
    (1000, 100),
];

/// The IPv4 address of device `k` (0-based): `100.64.0.0/10` in order.
pub fn device_v4(k: usize) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(100, 64, 0, 0)) + k as u32 + 1)
}

/// The IPv6 /56 of circuit `i`.
pub fn circuit_v6(i: usize) -> String {
    format!("2001:db8:{:x}:{:x}00::/56", i >> 8, i & 0xff)
}

/// `(network.json, ShapedDevices.csv)` for `circuits` circuits (1 ..= 1,000,000).
pub fn generate(circuits: usize, seed: u64) -> (String, String) {
    let circuits = circuits.clamp(1, 1_000_000);
    let aps = circuits.div_ceil(PER_AP);
    let sites = aps.div_ceil(APS_PER_SITE);
    let mut net = String::from("{\n");
    for s in 0..sites {
        let _ = write!(
            net,
            "  \"site{s}\": {{\n    \"downloadBandwidthMbps\": 10000,\n    \"uploadBandwidthMbps\": 2500,\n    \"type\": \"Site\",\n    \"children\": {{\n"
        );
        let first = s * APS_PER_SITE;
        let last = (first + APS_PER_SITE).min(aps);
        for a in first..last {
            let comma = if a + 1 < last { "," } else { "" };
            let _ = writeln!(
                net,
                "      \"ap{a}\": {{ \"downloadBandwidthMbps\": 1000, \"uploadBandwidthMbps\": 250, \"type\": \"AP\" }}{comma}"
            );
        }
        let comma = if s + 1 < sites { "," } else { "" };
        let _ = writeln!(net, "    }}\n  }}{comma}");
    }
    net.push_str("}\n");

    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    let mut device = 0;
    for i in 0..circuits {
        let (down, up) = PLANS[i % PLANS.len()];
        let ap = i / PER_AP;
        let devices = if mix64(seed ^ i as u64).is_multiple_of(10) {
            2
        } else {
            1
        };
        for d in 0..devices {
            let mac = format!(
                "02:00:{:02x}:{:02x}:{:02x}:{:02x}",
                (device >> 24) & 0xff,
                (device >> 16) & 0xff,
                (device >> 8) & 0xff,
                device & 0xff
            );
            let v6 = if d == 0 { circuit_v6(i) } else { String::new() };
            let _ = writeln!(
                csv,
                "c{i},Subscriber {i},d{device},cpe{device},ap{ap},{mac},{},{v6},{},{},{down},{up},",
                device_v4(device),
                down as f64 / 100.0,
                up as f64 / 100.0,
            );
            device += 1;
        }
    }
    (net, csv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscribers::libreqos;

    #[test]
    fn a_generated_table_parses_with_the_shape_it_promises() {
        let (net, csv) = generate(1_000, 7);
        let (nodes, _) = libreqos::parse_network("network.json", &net).expect("valid json");
        let t = libreqos::parse_shaped_devices("ShapedDevices.csv", &csv, nodes).expect("valid");
        let (nodes, circuits, prefixes) = t.counts();
        // 1 site, 10 APs
        assert_eq!((nodes, circuits), (11, 1_000));
        // each circuit a /56 and one or two IPv4 addresses
        assert!((2_000..=2_300).contains(&prefixes), "{prefixes}");
        // circuit 2: the 100/20 plan, minimums 1 Mbit/s and 200 kbit/s
        assert_eq!(t.circuits[2].download_max_bps, 100_000_000);
        assert_eq!(t.circuits[2].download_min_bps, 1_000_000);
        assert_eq!(t.circuits[2].upload_min_bps, 200_000);
        // deterministic
        assert_eq!(generate(1_000, 7), (net, csv));
    }
}
