//! Reloads prepared off the data path.
//!
//! A new policy is parsed, its files read (a subscriber table: 10,000 circuits are ~1 MB
//! of CSV) and its device configuration built — 20,000 classes with their queues — before
//! the forwarding loop sees it: in the statistics server's thread for `weir reload`
//! ([`crate::stats::ControlRequest::prepared`]), on a thread of its own for SIGHUP
//! ([`HupReloads`]). The loop only swaps the configuration in
//! (`Device::replace_policy`: carrying the queued packets over). Done in the loop, a
//! 10,000-circuit reload stalled forwarding for more than fail-open's 100 ms, and the
//! kernel took over.
//!
//! The configuration is built at the instant it is prepared: its token buckets start full
//! then, a few milliseconds before they are used (a burst's credit at most, as at start).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use weir_core::classify::IpNet;
use weir_core::device::DeviceConfig;
use weir_core::policy::Policy;
use weir_core::shard::Plan;
use weir_core::Instant;

/// A policy made ready for the data path: one device configuration per worker (one
/// without `--workers`), the prefixes each worker is steered ([`crate::fanout`]), and
/// the classes the workers share (the coordinator divides them: [`crate::bridge::Workers`]).
pub struct Ready {
    pub configs: Vec<DeviceConfig>,
    pub steering: Vec<(IpNet, u32)>,
    pub shared: Vec<String>,
}

/// A policy made ready, or why it cannot be used (file:line:col messages).
pub type Prepared = Result<Ready, String>;

/// Parse `text` as the policy `name` (the files it names read relative to `name`'s
/// directory: SIGHUP's file relative to weir's working directory, `weir reload` sends its
/// full path) and build its device configurations for `shards` workers now.
pub fn prepare(name: &str, text: &str, shards: usize) -> Prepared {
    // (a bare file name's parent is "": relative to the working directory)
    let policy =
        Policy::parse_in(name, text, Path::new(name).parent()).map_err(|e| e.to_string())?;
    ready(&policy, shards, Instant(crate::clock::monotonic_ns()))
        .map_err(|e| format!("{name}: {e}"))
}

/// `policy` split over `shards` workers ([`Plan`]), each shard's device configuration
/// built at `now`.
pub fn ready(policy: &Policy, shards: usize, now: Instant) -> Result<Ready, String> {
    if shards <= 1 {
        return Ok(Ready {
            configs: vec![policy.device_config(now)?],
            steering: Vec::new(),
            shared: Vec::new(),
        });
    }
    let plan = Plan::new(policy, shards);
    let configs = (0..shards)
        .map(|i| plan.policy(policy, i)?.device_config(now))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Ready {
        configs,
        steering: plan.steering(policy),
        shared: plan.shared(policy),
    })
}

/// Read `file` and [`prepare`] it.
pub fn prepare_file(file: &Path, shards: usize) -> Prepared {
    let name = file.display().to_string();
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("cannot read policy {name}: {e}"))?;
    prepare(&name, &text, shards)
}

/// What SIGHUP reads again: a policy file (`weir run`) or whatever a command's options
/// name (`weir emu`: its trace files), made ready for a number of workers.
#[derive(Clone)]
pub struct ReloadSource {
    /// As messages name it (the file, or "weir emu's options").
    pub name: String,
    prepare: std::sync::Arc<dyn Fn(usize) -> Prepared + Send + Sync>,
}

impl ReloadSource {
    /// The policy file `file`, read again.
    pub fn file(file: PathBuf) -> Self {
        ReloadSource {
            name: file.display().to_string(),
            prepare: std::sync::Arc::new(move |n| prepare_file(&file, n)),
        }
    }

    /// `prepare(workers)` builds the policy again (reading what it reads again).
    pub fn new(
        name: impl Into<String>,
        prepare: impl Fn(usize) -> Prepared + Send + Sync + 'static,
    ) -> Self {
        ReloadSource {
            name: name.into(),
            prepare: std::sync::Arc::new(prepare),
        }
    }

    fn prepare(&self, shards: usize) -> Prepared {
        (self.prepare)(shards)
    }
}

impl std::fmt::Debug for ReloadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReloadSource({})", self.name)
    }
}

/// SIGHUP: prepare the source again on a thread of its own; the loop polls for the result.
/// One preparation at a time; a SIGHUP during one starts another once it is done (the
/// file may have changed again).
pub struct HupReloads {
    source: ReloadSource,
    shards: usize,
    flag: &'static AtomicBool,
    tx: Sender<Prepared>,
    rx: Receiver<Prepared>,
    busy: bool,
}

impl HupReloads {
    /// Prepare `source` on SIGHUP (`flag`) for `shards` workers.
    pub fn new(source: ReloadSource, flag: &'static AtomicBool, shards: usize) -> Self {
        let (tx, rx) = channel();
        HupReloads {
            source,
            shards,
            flag,
            tx,
            rx,
            busy: false,
        }
    }

    /// What is read again, as messages name it.
    pub fn name(&self) -> &str {
        &self.source.name
    }

    /// Start a preparation if SIGHUP came (and none is running); a finished one, if any.
    pub fn poll(&mut self) -> Option<Prepared> {
        let done = self.rx.try_recv().ok();
        if done.is_some() {
            self.busy = false;
        }
        if !self.busy && self.flag.swap(false, Ordering::SeqCst) {
            let (source, tx, n) = (self.source.clone(), self.tx.clone(), self.shards);
            let spawned = std::thread::Builder::new()
                .name("weir-reload".into())
                .spawn(move || {
                    let _ = tx.send(source.prepare(n));
                });
            match spawned {
                Ok(_) => self.busy = true,
                // no thread to be had: prepare here rather than not at all
                Err(_) => return Some(self.source.prepare(self.shards)),
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_prepared_with_the_files_beside_it() {
        let d = std::env::temp_dir().join(format!("weir-control-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let policy = d.join("p.toml");
        std::fs::write(&policy, "[link]\nrate = \"10Mbit\"\n[[emulate]]\nname = \"x\"\ntrace = \"t.trace\"\n[[rule]]\nname = \"r\"\nclass = \"link\"\nemulate = \"x\"\n").unwrap();
        std::fs::write(d.join("t.trace"), "1\n2\n").unwrap();
        assert!(prepare_file(&policy, 1).is_ok());
        std::fs::remove_file(d.join("t.trace")).unwrap();
        let e = prepare_file(&policy, 1).err().expect("refused");
        assert!(e.contains("t.trace"), "{e}");
        let e = prepare_file(&d.join("none.toml"), 1)
            .err()
            .expect("refused");
        assert!(e.starts_with("cannot read policy"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn sighup_prepares_on_another_thread() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let d = std::env::temp_dir().join(format!("weir-hup-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let policy = d.join("p.toml");
        std::fs::write(&policy, "[link]\nrate = \"10Mbit\"\n").unwrap();
        let mut h = HupReloads::new(ReloadSource::file(policy.clone()), &FLAG, 1);
        assert!(h.poll().is_none(), "no SIGHUP, nothing");
        FLAG.store(true, Ordering::SeqCst);
        let mut got = None;
        for _ in 0..500 {
            if let Some(p) = h.poll() {
                got = Some(p);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(got.expect("prepared within a second").is_ok());
        assert!(h.poll().is_none(), "once per SIGHUP");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
