//! Helpers shared by the policy tests.

use weir_core::policy::Policy;

/// Parse `text` and return the rendered errors (panics if it is accepted).
pub fn errors(text: &str) -> Vec<String> {
    match Policy::parse("p.toml", text) {
        Ok(_) => panic!("policy accepted:\n{text}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

/// Assert that one of `errs` contains `want`.
pub fn has(errs: &[String], want: &str) {
    assert!(
        errs.iter().any(|e| e.contains(want)),
        "expected an error containing {want:?}, got {errs:#?}"
    );
}
