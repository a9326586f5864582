//! `weir check POLICY`: validate and print the compiled policy.

use std::path::PathBuf;
use std::process::ExitCode;
use weir_core::policy::Technique;

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML).
    policy: PathBuf,
    /// Override the policy's technique preset (cbq, cbq+red, cbq+pfq, cbq+pfq+red).
    #[arg(long)]
    technique: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let p = match crate::load_policy(Some(&a.policy)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            let n = e.0.len();
            eprintln!("{}: {n} error{} — policy rejected", a.policy.display(), if n == 1 { "" } else { "s" });
            return Ok(ExitCode::from(2));
        }
    };
    let p = match a.technique.as_deref() {
        None => p,
        Some(t) => p.with_technique(Technique::parse(t).ok_or_else(|| {
            anyhow::anyhow!(
                "--technique '{t}': expected one of {}",
                Technique::ALL.map(|t| t.name()).join(", ")
            )
        })?),
    };
    // building proves the compiled pipeline is constructible
    p.build(weir_core::Instant::ZERO).map_err(|e| anyhow::anyhow!("{}: {e}", a.policy.display()))?;
    println!("{}: ok", a.policy.display());
    print!("{}", p.describe());
    Ok(ExitCode::SUCCESS)
}
