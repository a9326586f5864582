//! `scripts/package`: the Debian package it builds (control fields, contents, what the
//! files hold), the systemd unit's command lines run against the packaged binary, and
//! `systemd-analyze verify` / `security` on the unit. Packages this test binary's own
//! weir (`--bin`), so nothing is built twice. Needs dpkg-deb (a failure under CI when
//! missing); the systemd-analyze part skips, saying so, where systemd is not installed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::{have, TempDir, ROOT, WEIR};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Run `cmd`; fail the test unless it succeeds; its standard output.
fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The commands a `--help` lists (without `help`).
fn commands(args: &[&str]) -> Vec<String> {
    let help = ok(Command::new(WEIR).args(args).arg("--help"));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn the_package_holds_weir_its_unit_manuals_completions_and_docs() {
    let _group = crate::common::group(module_path!());
    if !have("package", "dpkg-deb") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weir-package-{}", std::process::id()));
    let _rm = TempDir(dir.clone());
    let printed = ok(Command::new(format!("{ROOT}/scripts/package"))
        .args(["--bin", WEIR, "--out"])
        .arg(&dir));
    let arch = ok(Command::new("dpkg").arg("--print-architecture"));
    let deb = dir.join(format!("weir_{VERSION}_{}.deb", arch.trim()));
    assert_eq!(printed.trim(), deb.to_str().unwrap());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "only the package is left"
    );

    control(&deb, arch.trim());
    contents(&deb);
    let root = dir.join("root");
    ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    files(&root);
    unit_commands(&root, &dir);
    systemd_analyze(&root, &dir);
}

/// `dpkg-deb --info`: the control fields; the maintainer scripts are shell that parses.
fn control(deb: &Path, arch: &str) {
    let info = ok(Command::new("dpkg-deb").arg("--info").arg(deb));
    let field = |k: &str| -> String {
        info.lines()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k}: in\n{info}"))
            .to_string()
    };
    assert_eq!(field("Package"), "weir");
    assert_eq!(field("Version"), VERSION);
    assert_eq!(field("Architecture"), arch);
    assert!(!field("Maintainer").is_empty());
    assert_eq!(field("Section"), "net");
    // glibc at the newest symbol version the binary uses, e.g. libc6 (>= 2.34)
    let depends = field("Depends");
    assert!(depends.contains("libc6 (>= 2."), "{depends}");
    assert_eq!(field("Recommends"), "iproute2");
    assert!(field("Installed-Size").parse::<u64>().unwrap() > 1000);
    assert!(field("Description").contains("bandwidth manager"));
    for script in ["postinst", "prerm", "postrm"] {
        assert!(info.contains(&format!(" {script} ")), "{info}");
        let path = format!("{ROOT}/packaging/debian/{script}");
        ok(Command::new("sh").args(["-n", &path]));
    }
}

/// `dpkg-deb --contents`: every file where Debian expects it, owned by root, with sane
/// modes, and nothing else.
fn contents(deb: &Path) {
    let listing = ok(Command::new("dpkg-deb").arg("--contents").arg(deb));
    let mut files = BTreeSet::new();
    for l in listing.lines() {
        // drwxr-xr-x root/root 0 2026-11-26 04:48 ./usr/
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 6, "{l}");
        assert_eq!(f[1], "root/root", "{l}");
        let path = f[5].trim_start_matches('.');
        let mode = match path {
            _ if path.ends_with('/') => "drwxr-xr-x",
            "/usr/bin/weir" => "-rwxr-xr-x",
            _ => "-rw-r--r--",
        };
        assert_eq!(f[0], mode, "{l}");
        if !path.ends_with('/') {
            files.insert(path.to_string());
        }
    }
    assert!(listing.contains(" ./etc/weir/\n"), "{listing}");
    let mut want: BTreeSet<String> = [
        "/usr/bin/weir",
        "/lib/systemd/system/weir@.service",
        "/usr/share/bash-completion/completions/weir",
        "/usr/share/zsh/vendor-completions/_weir",
        "/usr/share/fish/vendor_completions.d/weir.fish",
        "/usr/share/doc/weir/copyright",
        "/usr/share/doc/weir/README.md",
        "/usr/share/doc/weir/examples/weir.env",
    ]
    .map(String::from)
    .into();
    // a manual page for weir and for each command and lab test its --help lists
    want.insert("/usr/share/man/man1/weir.1.gz".into());
    // (and each subcommand: weir lab's tests, weir emu set)
    for c in commands(&[]) {
        want.insert(format!("/usr/share/man/man1/weir-{c}.1.gz"));
        for t in commands(&[c.as_str()]) {
            want.insert(format!("/usr/share/man/man1/weir-{c}-{t}.1.gz"));
        }
    }
    assert!(want.contains("/usr/share/man/man1/weir-run.1.gz"));
    assert!(want.contains("/usr/share/man/man1/weir-lab-basic.1.gz"));
    assert!(want.contains("/usr/share/man/man1/weir-emu-set.1.gz"));
    // every document and example policy of the repository
    for (from, to) in [("docs", "docs"), ("examples", "examples")] {
        for e in std::fs::read_dir(format!("{ROOT}/{from}")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".md") || name.ends_with(".toml") {
                want.insert(format!("/usr/share/doc/weir/{to}/{name}"));
            }
        }
    }
    let missing: Vec<_> = want.difference(&files).collect();
    let extra: Vec<_> = files.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, unexpected {extra:?}"
    );
}

/// What the extracted files hold.
fn files(root: &Path) {
    let bin = root.join("usr/bin/weir");
    // the binary this test was built with, stripped of its debug information
    assert_eq!(
        ok(Command::new(&bin).arg("--version")),
        ok(Command::new(WEIR).arg("--version"))
    );
    let sections = ok(Command::new("readelf").arg("-S").arg(&bin));
    assert!(!sections.contains(".debug_info"), "not stripped");
    // the unit is the repository's
    assert_eq!(
        std::fs::read(root.join("lib/systemd/system/weir@.service")).unwrap(),
        std::fs::read(format!("{ROOT}/packaging/weir@.service")).unwrap()
    );
    // manual pages: gzip, roff with the page's own title
    let run = ok(Command::new("gzip")
        .arg("-dc")
        .arg(root.join("usr/share/man/man1/weir-run.1.gz")));
    assert!(run.contains(".TH weir-run 1"), "{run}");
    assert!(run.contains("fail\\-open\\-after"), "{run}");
    // bash loads its completion
    let bash = root.join("usr/share/bash-completion/completions/weir");
    let spec = ok(Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p weir", bash.display())));
    assert!(spec.contains("-F _weir weir"), "{spec}");
    // the copyright file names the licenses of the crates inside the binary
    let copyright = std::fs::read_to_string(root.join("usr/share/doc/weir/copyright")).unwrap();
    assert!(copyright.starts_with("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: weir\n"));
    assert!(copyright.contains("\n clap v4."), "{copyright}");
    assert!(copyright.contains("\n tokio v1."), "{copyright}");
    assert!(!copyright.contains("@CRATES@") && !copyright.contains(" weir-core "));
    let env = std::fs::read_to_string(root.join("usr/share/doc/weir/examples/weir.env")).unwrap();
    assert!(
        env.contains("\nWEIR_LAN=") && env.contains("\nWEIR_WAN="),
        "{env}"
    );
}

/// The unit's `Key=` lines, in order.
fn unit_lines<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// The unit's weir command lines, as systemd would run them for an instance `test` with
/// WEIR_LAN/WEIR_WAN set and no WEIR_ARGS, against the packaged binary and an example
/// policy: `weir check` accepts them, `weir run` parses them (and then refuses the
/// interfaces that do not exist).
fn unit_commands(root: &Path, dir: &Path) {
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/weir@.service")).unwrap();
    let bin = root.join("usr/bin/weir");
    let policy = root.join("usr/share/doc/weir/examples/home-router.toml");
    let sock = dir.join("test.sock");
    let argv = |line: &str| -> Vec<String> {
        line.replace("/etc/weir/%i.toml", policy.to_str().unwrap())
            .replace("/run/weir/%i.sock", sock.to_str().unwrap())
            .replace("${WEIR_LAN}", "nosuch-lan0")
            .replace("${WEIR_WAN}", "nosuch-wan0")
            .replace("$WEIR_ARGS", "")
            .replace("/usr/bin/weir", bin.to_str().unwrap())
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let checks: Vec<&str> = unit_lines(&unit, "ExecStartPre")
        .into_iter()
        .chain(unit_lines(&unit, "ExecReload"))
        .filter(|l| l.starts_with("/usr/bin/weir "))
        .collect();
    assert_eq!(checks.len(), 2, "weir check before a start and a reload");
    for l in checks {
        let a = argv(l);
        assert_eq!(a[1], "check", "{l}");
        let out = ok(Command::new(&a[0]).args(&a[1..]));
        assert!(out.contains(": ok"), "{out}");
    }
    assert_eq!(
        unit_lines(&unit, "ExecReload").last(),
        Some(&"/bin/kill -HUP $MAINPID")
    );
    let start = unit_lines(&unit, "ExecStart");
    assert_eq!(start.len(), 1);
    let a = argv(start[0]);
    assert_eq!(a[1], "run");
    let out = Command::new(&a[0]).args(&a[1..]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // 1: refused after parsing (2 would be a usage error or a policy rejected)
    assert_eq!(out.status.code(), Some(1), "{err}");
    // SAFETY: geteuid has no preconditions.
    let expected = if unsafe { libc::geteuid() } == 0 {
        "interface 'nosuch-lan0' does not exist"
    } else {
        "needs root"
    };
    assert!(err.contains(expected), "{err}");
}

/// `systemd-analyze verify` finds nothing to say about the unit (its binaries and
/// manual page exist), and `security` rates its exposure no worse than today's 3.7.
fn systemd_analyze(root: &Path, dir: &Path) {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: package: systemd-analyze is not installed: the unit is not verified");
        return;
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/weir@.service")).unwrap();
    let bin = root.join("usr/bin/weir");
    let path = dir.join("weir@test.service");
    std::fs::write(&path, unit.replace("/usr/bin/weir", bin.to_str().unwrap())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    // what systemd says of other units installed on this host (e.g. Debian's irtt.service:
    // "Special user nobody configured") is theirs, not weir's
    let others = |l: &&str| {
        l.split_once(':')
            .is_some_and(|(f, _)| f.starts_with('/') && Path::new(f) != path.as_path())
    };
    let ours: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !others(l))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "{said}");

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(level) = text.lines().find_map(|l| {
        l.split("Overall exposure level for weir@test.service: ")
            .nth(1)
    }) else {
        // systemd < 250 has no --offline
        eprintln!(
            "SKIP: package: systemd-analyze security --offline: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    };
    let level: f64 = level.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        level <= 3.7,
        "exposure {level}: the hardening regressed\n{text}"
    );
}
