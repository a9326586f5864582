//! QUIC through `weir run` with a real client: headless Chromium, told to speak HTTP/3 to a
//! name it resolves to the receiver, sends its QUIC Initial packets through weir, whose
//! policy has one `tls.sni` rule (`secure`: `*.example.org`) and no port rule. A UDP
//! socket on the receiver's port 443 counts what arrives (nothing answers: the client's
//! first flight and its retransmissions are all there is, and all `tls.sni` needs).
//!
//! For video.example.org, every datagram from the one that completes the ClientHello on
//! is in `secure`. Chromium's hello does not fit one packet (its post-quantum key share):
//! measured with Debian's Chromium, a 1,983-byte ClientHello in two 1,250-byte Initial
//! datagrams as 12 CRYPTO fragments out of order ("chaos protection"). The first datagram
//! may therefore go by the default rule (or to `secure` too, when both arrive in one
//! receive batch: weir tracks a batch before it classifies it) and the rest must not;
//! weir's counters show the QUIC connection and its hello. For files.example.net the same
//! traffic stays out of `secure`.
//!
//! Root and Chromium needed (`scripts/test` installs it); without them the test prints
//! `SKIP: …` and passes, except under CI (`CI` set).

use crate::common::{class_bytes, in_ns, start_weir, stats, Counted, KillOnDrop, TempDir};
use std::net::UdpSocket;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const POLICY: &str = r#"
[link]
rate = "100Mbit"
direction = "both"
default = "bulk"

[[class]]
name = "secure"
rate = "2Mbit"

[[class]]
name = "bulk"
rate = "98Mbit"

[[rule]]
class = "secure"
tls.sni = "*.example.org"
"#;

/// Frame bytes of a UDP datagram of `n` bytes over IPv4 and Ethernet (no FCS).
fn frame(n: usize) -> u64 {
    (n + 8 + 20 + 14) as u64
}

/// Chromium in the sender's namespace fetching `https://{host}/` over QUIC only, `host`
/// resolved to the receiver; the sizes of the datagrams the receiver's port 443 got,
/// once two have come and a second has passed without more (at most 20 s).
fn chromium_quic(t: &BridgeTopo, browser: &str, host: &str, profile: &Path) -> Vec<usize> {
    let sock = t
        .rcv
        .run(|| UdpSocket::bind((BridgeTopo::RCV_ADDR, 443)))
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let user_dir = format!("--user-data-dir={}", profile.display());
    let force = format!("--origin-to-force-quic-on={host}:443");
    let map = format!("--host-resolver-rules=MAP {host} {}", BridgeTopo::RCV_ADDR);
    let url = format!("https://{host}/");
    let mut argv = vec![browser];
    argv.extend(crate::common::CHROMIUM_HEADLESS);
    argv.extend(["--enable-quic", &force, &map, &user_dir, "--dump-dom", &url]);
    let child = KillOnDrop(Some(
        in_ns(&t.snd, &argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let (start, mut last) = (Instant::now(), Instant::now());
    let mut sizes = Vec::new();
    let mut buf = [0u8; 2048];
    while start.elapsed() < Duration::from_secs(20)
        && (sizes.len() < 2 || last.elapsed() < Duration::from_secs(1))
    {
        if let Ok(n) = sock.recv(&mut buf) {
            sizes.push(n);
            last = Instant::now();
        }
    }
    drop(child);
    sizes
}

#[test]
fn chromium_quic_is_classified_by_its_client_hello() {
    let _group = crate::common::group(module_path!());
    let test = "chromium_quic_is_classified_by_its_client_hello";
    if skip_unless_root(test) {
        return;
    }
    let Some(browser) = crate::common::chromium(test, "") else {
        return;
    };
    let t = BridgeTopo::new("quic").unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("weir-quic-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let policy = dir.0.join("quic.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let sock = dir.0.join("stats.sock");
    let _w = start_weir(&t, &["run", "--policy", policy.to_str().unwrap()], &sock);
    let out = ["outbound"];
    let secure = |v: &serde_json::Value| class_bytes(v, &out, "secure", Counted::Received);
    let bulk = |v: &serde_json::Value| class_bytes(v, &out, "bulk", Counted::Received);

    let s0 = stats(&sock);
    let sizes = chromium_quic(&t, browser, "video.example.org", &dir.0.join("p1"));
    std::thread::sleep(Duration::from_millis(400)); // a statistics publication
    let s1 = stats(&sock);
    eprintln!("video.example.org: datagrams {sizes:?}");
    assert!(
        sizes.len() >= 2 && sizes.iter().all(|&n| n >= 1200),
        "Chromium's Initial datagrams: {sizes:?}"
    );
    let apps = &s1["apps"];
    eprintln!("apps: {apps}");
    assert!(apps["quic"].as_u64().unwrap() >= 1, "{apps}");
    assert!(apps["quic_hellos"].as_u64().unwrap() >= 1, "{apps}");
    let (got, all) = (
        secure(&s1) - secure(&s0),
        sizes.iter().map(|&n| frame(n)).sum::<u64>(),
    );
    eprintln!("secure: {got} B of the {all} B that arrived");
    // everything from the datagram that completed the hello on; at most the first not
    assert!(got >= all - frame(sizes[0]), "{got} of {all}");
    assert!(got <= all + 2 * frame(1500), "{got} of {all}");

    // a name the rule does not match: bulk, not secure
    let sizes = chromium_quic(&t, browser, "files.example.net", &dir.0.join("p2"));
    std::thread::sleep(Duration::from_millis(400));
    let s2 = stats(&sock);
    eprintln!("files.example.net: datagrams {sizes:?}");
    assert!(sizes.len() >= 2, "{sizes:?}");
    let all: u64 = sizes.iter().map(|&n| frame(n)).sum();
    assert_eq!(secure(&s2), secure(&s1), "files.example.net went to secure");
    assert!(
        bulk(&s2) - bulk(&s1) >= all,
        "{} of {all}",
        bulk(&s2) - bulk(&s1)
    );
    assert!(s2["apps"]["quic_hellos"].as_u64().unwrap() >= 2);
}
