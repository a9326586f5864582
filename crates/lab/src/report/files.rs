//! Writing a lab's outputs: files into a directory, results as JSON, and file names made
//! from DUT names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::flent::{series_files, Recording};
use crate::{Error, Result};

/// Write each `(name, contents)` (text or bytes) into `dir` (created if needed); returns
/// the paths.
pub fn write_files<C: AsRef<[u8]>>(dir: &Path, files: &[(String, C)]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let mut out = Vec::new();
    for (name, text) in files {
        let f = dir.join(name);
        std::fs::write(&f, text.as_ref())
            .map_err(|e| Error::io(format!("write {}", f.display()), e))?;
        out.push(f);
    }
    Ok(out)
}

/// Write the text `files` and, beside them, the time series of `recs` as Flent data and
/// `series.csv` ([`series_files`]; `lab` is the lab's title, `meta` its run metadata).
pub fn write_with_series(
    dir: &Path,
    files: Vec<(String, String)>,
    lab: &str,
    meta: &BTreeMap<String, String>,
    recs: &[Recording],
) -> Result<Vec<PathBuf>> {
    let mut all: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(n, t)| (n, t.into_bytes()))
        .collect();
    all.extend(series_files(lab, meta, recs)?);
    write_files(dir, &all)
}

/// `serde_json::to_string_pretty` with the error as a testbed error.
pub fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Invalid(format!("serialise: {e}")))
}

/// A DUT or test name as a piece of a file name: `:`, `+`, `/`, spaces and `%` become `_`
/// (`weir:cbq+pfq` → `weir_cbq_pfq`).
pub fn file_safe(name: &str) -> String {
    name.replace([':', '+', '/', ' ', '%'], "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_from_dut_names() {
        assert_eq!(file_safe("weir:cbq+pfq"), "weir_cbq_pfq");
        assert_eq!(file_safe("cmd:/x/a b%"), "cmd__x_a_b_");
    }
}
