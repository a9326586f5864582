//! Least privilege (issue 26): `weir run` as an ordinary user (uid 65534) holding only
//! CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (given by `setpriv`, as systemd's
//! `AmbientCapabilities=` would) forwards between two namespaces, fail-open bypass
//! included; with fewer it refuses, naming what it lacks. Its statistics socket with
//! `--socket-group` is 0660 and that group's: a member reads statistics and reloads, a
//! non-member is refused.
//!
//! Root and setpriv (util-linux) needed; without them the test prints `SKIP: …` and
//! passes, except under CI (`CI` set).

use crate::common::{have, in_ns, wait_for, KillOnDrop, WEIR};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;
use weir_lab::agents::icmp_ping;
use weir_lab::topo::{skip_unless_root, BridgeTopo};

const GROUP: &str = "4242";

/// `setpriv` arguments: become `uid`/`gid` with supplementary `groups`, holding `caps`
/// (comma-separated, e.g. `net_raw,net_admin`) as ambient capabilities.
fn as_user(uid: u32, gid: u32, groups: Option<&str>, caps: &str) -> Vec<String> {
    let mut v = vec![
        "setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
    ];
    v.push(match groups {
        Some(g) => format!("--groups={g}"),
        None => "--clear-groups".into(),
    });
    let caps: String = caps
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| format!(",+{c}"))
        .collect();
    v.push(format!("--inh-caps=-all{caps}"));
    v.push(format!("--ambient-caps=-all{caps}"));
    v.push("--".into());
    v
}

fn weir_as(
    t: &BridgeTopo,
    user: &[String],
    sock: &std::path::Path,
    extra: &[&str],
) -> std::process::Command {
    let mut argv: Vec<&str> = user.iter().map(String::as_str).collect();
    argv.extend_from_slice(&[WEIR, "run", "--policy", "examples/home-router.toml"]);
    argv.extend_from_slice(&["--lan", &t.dut_lan, "--wan", &t.dut_wan]);
    argv.extend_from_slice(&["--stats-socket", sock.to_str().unwrap()]);
    argv.extend_from_slice(extra);
    in_ns(&t.dut, &argv)
}

/// `weir ARGS` as another user (no capabilities), from the host: (code, stdout, stderr).
fn client(uid: u32, gid: u32, groups: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let user = as_user(uid, gid, groups, "");
    let out = std::process::Command::new(&user[0])
        .args(&user[1..])
        .arg(WEIR)
        .args(args)
        .current_dir(crate::common::ROOT)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn weir_runs_with_capabilities_only_and_shares_its_socket_with_a_group() {
    let _group = crate::common::group(module_path!());
    let test = "weir_runs_with_capabilities_only_and_shares_its_socket_with_a_group";
    if skip_unless_root(test) || !have(test, "setpriv") {
        return;
    }
    let t = BridgeTopo::new("cap").unwrap();
    let dir = crate::common::TempDir(
        std::env::temp_dir().join(format!("weir-live-caps-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    // the unprivileged weir creates its socket here
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = dir.0.join("w.sock");

    // too few capabilities: refused before anything is touched, naming what lacks
    for (caps, extra, lacks, not) in [
        ("net_raw", &[][..], "CAP_NET_ADMIN", "CAP_NET_RAW ("),
        ("net_raw,net_admin", &[][..], "CAP_BPF", "CAP_NET_ADMIN ("),
        (
            "net_admin,bpf",
            &["--fail-closed"][..],
            "CAP_NET_RAW",
            "CAP_BPF",
        ),
    ] {
        let out = weir_as(&t, &as_user(65534, 65534, None, caps), &sock, extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{caps}: {err}");
        assert!(
            err.contains("not privileged enough to bridge") && err.contains(lacks),
            "{caps}: {err}"
        );
        assert!(!err.contains(not), "{caps}: {err}");
    }
    // fail-closed needs no CAP_BPF
    let w = KillOnDrop(Some(
        weir_as(
            &t,
            &as_user(65534, 65534, None, "net_raw,net_admin"),
            &sock,
            &["--fail-closed", "--duration", "1s"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap(),
    ));
    let out = w.wait_output(Duration::from_secs(10));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // the three capabilities, member of the socket's group
    let w = KillOnDrop(Some(
        weir_as(
            &t,
            &as_user(65534, 65534, Some(GROUP), "net_raw,net_admin,bpf"),
            &sock,
            &["--socket-group", GROUP],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap(),
    ));
    wait_for(&sock, Duration::from_secs(5), "weir did not start");
    let r = icmp_ping(&t.snd, BridgeTopo::RCV_ADDR, 5, Duration::from_millis(500)).unwrap();
    assert!(r.iter().filter(|x| x.is_some()).count() >= 4, "{r:?}");
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.permissions().mode() & 0o777),
        (65534, 4242, 0o660)
    );
    let s = sock.to_str().unwrap();
    // a member (primary group) reads the statistics
    let (code, out, err) = client(1234, 4242, None, &["stats", "--socket", s]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fail-open after 100 ms"), "{out}");
    // a member (supplementary group) reloads
    let (code, out, err) = client(
        1234,
        1234,
        Some(GROUP),
        &["reload", "--socket", s, "examples/home-router.toml"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("policy generation 2"), "{out}");
    // anyone else is refused
    let (code, _, err) = client(1234, 1234, None, &["stats", "--socket", s]);
    assert_ne!(code, 0);
    assert!(err.contains("permission denied"), "{err}");
    let (code, _, err) = client(
        1234,
        1234,
        None,
        &["reload", "--socket", s, "examples/home-router.toml"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("permission denied"), "{err}");
    let out = w.terminate();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("stopping: fail-open"), "{log}");
}
