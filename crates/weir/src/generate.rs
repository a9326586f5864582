//! `weir generate man DIR`, `weir generate completions DIR` (hidden): the manual pages
//! and shell completions the Debian package installs (`scripts/package`), made from the
//! command-line definition itself, so they never drift from `--help`.
//!
//! Man pages: one per command and lab test (`weir.1`, `weir-run.1`, `weir-lab-basic.1`,
//! ...), section 1, by clap_mangen; the `Example:` of each command's help is its EXTRA
//! section. Completions: `weir.bash`, `_weir` (zsh), `weir.fish`, by clap_complete.
//! Neither lists this command.

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Write one man page per command (weir.1, weir-run.1, ...) into DIR.
    #[command(after_help = "Example:\n  weir generate man target/man")]
    Man { dir: PathBuf },
    /// Write bash, zsh and fish completions (weir.bash, _weir, weir.fish) into DIR.
    #[command(after_help = "Example:\n  weir generate completions target/completions")]
    Completions { dir: PathBuf },
    /// Write a synthetic subscriber table in LibreQoS's formats (network.json,
    /// ShapedDevices.csv) and a policy.toml that loads it into DIR: 100 circuits an
    /// access point, 10 access points a site (docs/subscribers.md).
    #[command(
        after_help = "Example:\n  weir generate subscribers --circuits 10000 /tmp/isp\n  weir check /tmp/isp/policy.toml"
    )]
    Subscribers {
        dir: PathBuf,
        /// How many circuits.
        #[arg(long, default_value_t = 10_000)]
        circuits: usize,
        /// Which circuits get a second device.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// The command line as users see it: without this hidden command (clap cannot remove a
/// subcommand, and clap_complete lists hidden ones: the same command, rebuilt with the
/// visible ones).
pub fn public_command() -> Command {
    let cli = crate::Cli::command();
    let subs: Vec<Command> = cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    Command::new("weir")
        .version(crate::VERSION)
        .about(cli.get_about().cloned().unwrap_or_default())
        .subcommand_required(cli.is_subcommand_required_set())
        .arg_required_else_help(cli.is_arg_required_else_help_set())
        .subcommands(subs)
}

fn created(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.what {
        What::Man { dir } => {
            created(&dir)?;
            clap_mangen::generate_to(public_command(), &dir)
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        }
        What::Completions { dir } => {
            created(&dir)?;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut public_command(), "weir", &dir)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
            }
        }
        What::Subscribers {
            dir,
            circuits,
            seed,
        } => {
            if !(1..=1_000_000).contains(&circuits) {
                anyhow::bail!("--circuits {circuits}: from 1 to 1,000,000");
            }
            created(&dir)?;
            let (net, csv) = weir_core::subscribers::generate::generate(circuits, seed);
            for (name, text) in [
                ("network.json", net.as_str()),
                ("ShapedDevices.csv", csv.as_str()),
                ("policy.toml", weir_core::subscribers::generate::POLICY),
            ] {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            }
            println!(
                "{}: {circuits} circuits (network.json, ShapedDevices.csv, policy.toml)",
                dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cmd: &Command) -> Vec<String> {
        cmd.get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect()
    }

    #[test]
    fn the_public_command_is_the_cli_without_generate() {
        let all = names(&crate::Cli::command());
        let public = names(&public_command());
        assert!(all.contains(&"generate".to_string()));
        assert!(!public.contains(&"generate".to_string()));
        assert_eq!(public.len(), all.len() - 1);
        assert!(public.contains(&"run".to_string()) && public.contains(&"lab".to_string()));
    }

    #[test]
    fn man_pages_and_completions_cover_every_command() {
        let dir = std::env::temp_dir().join(format!("weir-generate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(Args {
            what: What::Man {
                dir: dir.join("man"),
            },
        })
        .unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(dir.join("man"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        pages.sort();
        // one page per command and per lab test; none for `generate` or `help`
        let cmd = public_command();
        let mut want = vec!["weir.1".to_string()];
        for s in cmd.get_subcommands() {
            want.push(format!("weir-{}.1", s.get_name()));
            for t in s.get_subcommands() {
                want.push(format!("weir-{}-{}.1", s.get_name(), t.get_name()));
            }
        }
        want.sort();
        assert_eq!(pages, want);
        let run_page = std::fs::read_to_string(dir.join("man/weir-run.1")).unwrap();
        assert!(run_page.contains(".TH weir-run 1"), "{run_page}");
        assert!(run_page.contains("fail\\-open\\-after"), "{run_page}");
        assert!(run_page.contains("Example:"));

        run(Args {
            what: What::Completions { dir: dir.join("c") },
        })
        .unwrap();
        let bash = std::fs::read_to_string(dir.join("c/weir.bash")).unwrap();
        let zsh = std::fs::read_to_string(dir.join("c/_weir")).unwrap();
        let fish = std::fs::read_to_string(dir.join("c/weir.fish")).unwrap();
        // each shell's way of offering a subcommand: `run` is offered, `generate` is not
        for (text, run, generate) in [
            (&bash, "weir,run)", "weir,generate)"),
            (&zsh, "'run:", "'generate:"),
            (&fish, "-a \"run\"", "-a \"generate\""),
        ] {
            assert!(text.contains("fail-open-after"));
            assert!(text.contains(run), "{run}");
            assert!(
                !text.contains(generate),
                "the hidden command leaked: {generate}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
