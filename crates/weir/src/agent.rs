//! `weir agent`: serve the lab's traffic agents on standard input and output
//! ([`weir_lab::remote::serve`]). A lab with `--topology FILE` runs it on each remote host
//! over SSH; nobody needs to run it by hand. SIGINT, SIGTERM and SIGHUP end the session
//! as the end of input does: the agents stop and every change is undone.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// `weir agent` takes no options.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<ExitCode> {
    // A lab that dies closes the channel: the agent must live to undo its changes, not be
    // killed by the first reply it writes into the closed pipe.
    // SAFETY: changing a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // A signal ends the session as the end of input does: agents stopped, changes undone.
    let stop = weir_io::signals::install();
    let hup = weir_io::signals::install_hup();
    let problems = weir_lab::remote::serve(
        std::io::BufReader::new(std::io::stdin()),
        std::io::stdout(),
        &|| stop.load(Ordering::Relaxed) || hup.load(Ordering::Relaxed),
        weir_lab::remote::IDLE_TIMEOUT,
    )?;
    if stop.load(Ordering::Relaxed) || hup.load(Ordering::Relaxed) {
        eprintln!("weir agent: stopped by a signal; its agents stopped and its changes undone");
        return Ok(ExitCode::from(1));
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
