//! weir-lab: the testbed. Network namespaces joined by veth, the project's own traffic
//! agents, collectors and statistics.

pub mod advanced;
pub mod agents;
pub mod basic;
pub mod cbr;
pub mod dut;
pub mod fidelity;
pub mod meta;
pub mod netns;
pub mod plot;
pub mod robustness;
pub mod table4;
pub mod testbed;

pub use meta::meta;

/// Write each `(name, contents)` into `dir` (created if needed); returns the paths.
pub fn write_files(
    dir: &std::path::Path,
    files: &[(String, String)],
) -> netns::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| netns::Error::io(format!("create {}", dir.display()), e))?;
    let mut out = Vec::new();
    for (name, text) in files {
        let f = dir.join(name);
        std::fs::write(&f, text)
            .map_err(|e| netns::Error::io(format!("write {}", f.display()), e))?;
        out.push(f);
    }
    Ok(out)
}

/// Whether SIGINT/SIGTERM arrived (when the caller installed weir's handlers with
/// `weir_io::signals::install`). Long runs check it between steps and return
/// [`netns::Error::Invalid`] ("interrupted") so that everything they made is dropped and
/// removed on the way out.
pub fn interrupted() -> bool {
    weir_io::signals::flag().load(std::sync::atomic::Ordering::Relaxed)
}

/// `Err("interrupted")` once a stop signal arrived.
pub fn check_interrupted() -> netns::Result<()> {
    if interrupted() {
        Err(netns::Error::Invalid("interrupted".into()))
    } else {
        Ok(())
    }
}
