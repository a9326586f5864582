//! FTP through `weir run` with real programs (seed 000 step 3): Debian's vsftpd on the
//! WAN-side host, curl on the LAN side, a policy that puts the control connection (port
//! 21) in a 256 kbit/s class and says nothing about data ports. weir reads the control
//! channel, expects the data connection curl and vsftpd negotiate (passive: EPSV, the
//! server's 229 reply; active: EPRT from curl, the server connects back), and classifies
//! it with its control connection: the class's byte counter grows by the file's bytes on
//! the wire (1514-byte frames carrying 1448 bytes each, ±2 %) and the download takes the
//! time 256 kbit/s gives those frames (±5 %).
//!
//! Root, vsftpd and curl needed (`scripts/test` installs them); without them the test
//! prints `SKIP: …` and passes, except under CI (`CI` set).

use crate::common::{class_bytes, curl, have, start_weir, stats, vsftpd, Counted, TempDir};
use std::path::Path;
use std::time::Duration;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const RATE: f64 = 256_000.0;
const FILE: usize = 256 * 1024;
/// Frame bytes per payload byte: 1514-byte frames of 1448 bytes of TCP payload
/// (timestamps on, as Linux sends).
const WIRE: f64 = 1514.0 / 1448.0;

const POLICY: &str = r#"
[link]
rate = "100Mbit"
direction = "both"
default = "bulk"

[[class]]
name = "ftp"
rate = "256kbit"
ceil = "256kbit"

[[class]]
name = "bulk"
rate = "99Mbit"

[[rule]]
class = "ftp"
proto = "tcp"
port = 21
"#;

/// The inbound `ftp` class's sent bytes from `weir stats --json`.
fn ftp_bytes(sock: &Path) -> u64 {
    class_bytes(&stats(sock), &["inbound"], "ftp", Counted::Sent)
}

/// `curl` downloads the file (extra options `opts`): (time from the first byte to the
/// last, seconds; bytes).
fn download(t: &BridgeTopo, opts: &[&str]) -> (f64, u64) {
    let url = format!("ftp://{}/file.bin", BridgeTopo::RCV_ADDR);
    let write_out = "%{time_starttransfer} %{time_total} %{size_download}";
    let f = curl(&t.snd, opts, write_out, &url);
    (f[1] - f[0], f[2] as u64)
}

#[test]
fn ftp_data_connections_land_in_the_ftp_class() {
    let _group = crate::common::group(module_path!());
    let test = "ftp_data_connections_land_in_the_ftp_class";
    if skip_unless_root(test) || !have(test, "curl") || !have(test, "vsftpd") {
        return;
    }
    let t = BridgeTopo::new("ftp").unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("weir-ftp-{}", std::process::id())));
    let body: Vec<u8> = (0..FILE).map(|i| (i * 7 % 251) as u8).collect();
    let server = vsftpd(&t, &dir.0, &body);
    let policy = dir.0.join("ftp.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let sock = dir.0.join("weir.sock");
    let w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let want_s = FILE as f64 * WIRE * 8.0 / RATE;
    let mut report = Vec::new();
    for (mode, opts) in [
        ("passive (EPSV)", &[][..]),
        ("active (EPRT)", &["--ftp-port", "-"][..]),
    ] {
        let before = ftp_bytes(&sock);
        let (secs, size) = download(&t, opts);
        std::thread::sleep(Duration::from_millis(1200)); // one statistics publish
        let bytes = ftp_bytes(&sock) - before;
        assert_eq!(size, FILE as u64, "{mode}: curl got {size} bytes");
        let wire = FILE as f64 * WIRE;
        let line = format!(
            "{mode}: class ftp +{bytes} bytes ({:+.2} % of the file's {wire:.0} on the wire), transfer {secs:.2} s ({:+.2} % of {want_s:.2} s at 256 kbit/s)",
            (bytes as f64 / wire - 1.0) * 100.0,
            (secs / want_s - 1.0) * 100.0
        );
        eprintln!("{line}");
        report.push((line, bytes as f64 / wire, secs / want_s));
    }
    let v = stats(&sock);
    let apps = &v["apps"];
    eprintln!("weir's application tracking: {apps}");
    drop(w);
    drop(server);
    assert_eq!(apps["ftp_control"], 2, "{apps}");
    assert_eq!(apps["ftp_data"], 2, "{apps}");
    for (line, bytes, time) in &report {
        // the data connection's frames, plus the control connection's replies and the
        // handshakes: at most 2 % over
        assert!((0.98..=1.02).contains(bytes), "{line}");
        assert!((0.95..=1.05).contains(time), "{line}");
    }
}
