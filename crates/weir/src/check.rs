//! `weir check POLICY`: validate and print the compiled policy.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML).
    policy: PathBuf,
    /// Override the policy's technique preset (cbq, cbq+red, cbq+pfq, cbq+pfq+red, tcr, cbq+tcr, cbq+pfq+tcr).
    #[arg(long)]
    technique: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let p = match crate::load_policy(Some(&a.policy), a.technique.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    // building proves the compiled pipeline is constructible
    p.build(weir_core::Instant::ZERO)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))?;
    println!("{}: ok", a.policy.display());
    print!("{}", p.describe());
    Ok(ExitCode::SUCCESS)
}
