//! Records the git commit weir is built from for `weir --version` (`WEIR_GIT_COMMIT`):
//! the short hash, with `-dirty` when the work tree has changes; `unknown` outside a
//! git checkout or without git.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    // GIT_OPTIONAL_LOCKS=0: `git status` must not refresh and rewrite the index, which
    // this script watches: on a fresh clone it did, and the next cargo command built weir
    // again (~3 minutes)
    let out = Command::new("git")
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|s| !s.is_empty());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let text = match commit {
        Some(c) if dirty => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=WEIR_GIT_COMMIT={text}");
    // again when HEAD moves (a commit, a checkout) or the index changes
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index"] {
            let p = Path::new(&dir).join(f);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let p = Path::new(&dir).join(r);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
