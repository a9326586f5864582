//! weir's log: one event a line on standard error, each with a level an operator can
//! filter on.
//!
//! - Under systemd, when standard error is the journal (`$JOURNAL_STREAM` names its device
//!   and inode), every line starts with the sd-daemon(3) priority prefix — `<3>` error,
//!   `<4>` warning, `<5>` notice, `<6>` info — which journald strips and records as the
//!   entry's priority (`journalctl -u weir@office -p warning`); the `weir: ` prefix is left
//!   out (the journal names the unit).
//! - Elsewhere: `weir: warning: …`, and `weir: …` for the others (an error ends the
//!   command: its line needs no label).
//! - An event is one line: a message with line breaks (a refused policy's errors) has them
//!   joined with ` | `.
//! - `--log-level` (or `WEIR_LOG`) drops events below a level: `error`, `warning`,
//!   `notice`, `info` (the default: everything).

use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Error = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
}

impl Level {
    pub const NAMES: [(&'static str, Level); 4] = [
        ("error", Level::Error),
        ("warning", Level::Warning),
        ("notice", Level::Notice),
        ("info", Level::Info),
    ];

    pub fn parse(s: &str) -> Result<Level, String> {
        let s = s.trim().to_ascii_lowercase();
        let s = if s == "warn" { "warning".into() } else { s };
        Level::NAMES
            .iter()
            .find(|(n, _)| *n == s)
            .map(|&(_, l)| l)
            .ok_or_else(|| {
                format!("unknown log level '{s}': expected error, warning, notice or info")
            })
    }
}

/// The most verbose level printed (events with a larger number are dropped).
static MAX: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(l: Level) {
    MAX.store(l as u8, Ordering::Relaxed);
}

/// Whether standard error is the journal: `$JOURNAL_STREAM` is `DEVICE:INODE` of it.
fn to_journal() -> bool {
    static CACHE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes
    match CACHE.load(Ordering::Relaxed) {
        1 => return false,
        2 => return true,
        _ => {}
    }
    let yes = std::env::var("JOURNAL_STREAM").ok().is_some_and(|v| {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat of fd 2 into a stat buffer.
        let ok = unsafe { libc::fstat(2, &mut st) } == 0;
        ok && journal_stream_matches(&v, st.st_dev, st.st_ino)
    });
    CACHE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
    yes
}

fn journal_stream_matches(var: &str, dev: u64, ino: u64) -> bool {
    var.split_once(':')
        .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)))
        == Some((dev, ino))
}

/// The line for an event, without its newline.
pub fn format(level: Level, msg: &str, journal: bool) -> String {
    let one: String = msg
        .trim_end()
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    if journal {
        return format!("<{}>{one}", level as u8);
    }
    match level {
        Level::Warning => format!("weir: warning: {one}"),
        Level::Error | Level::Notice | Level::Info => format!("weir: {one}"),
    }
}

/// Log one event.
pub fn log(level: Level, msg: &str) {
    if level as u8 > MAX.load(Ordering::Relaxed) {
        return;
    }
    use std::io::Write;
    let line = format(level, msg, to_journal());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

pub fn error(msg: &str) {
    log(Level::Error, msg)
}
pub fn warning(msg: &str) {
    log(Level::Warning, msg)
}
pub fn notice(msg: &str) {
    log(Level::Notice, msg)
}
pub fn info(msg: &str) {
    log(Level::Info, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_one_line() {
        let m = "the new policy was refused; the running one stays:\np.toml:3:1: unknown key 'rat'\n\np.toml: 1 error — policy rejected\n";
        assert_eq!(
            format(Level::Warning, m, false),
            "weir: warning: the new policy was refused; the running one stays: | p.toml:3:1: unknown key 'rat' | p.toml: 1 error — policy rejected"
        );
        assert_eq!(
            format(Level::Error, "interface 'wan0' went away; stopping", true),
            "<3>interface 'wan0' went away; stopping"
        );
        assert_eq!(
            format(Level::Info, "bridging a <-> b", false),
            "weir: bridging a <-> b"
        );
        assert_eq!(format(Level::Notice, "x", true), "<5>x");
    }

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("warn"), Ok(Level::Warning));
        assert_eq!(Level::parse("ERROR"), Ok(Level::Error));
        assert!(Level::parse("verbose")
            .unwrap_err()
            .contains("expected error, warning"));
        assert!(Level::Error < Level::Warning && Level::Notice < Level::Info);
    }

    #[test]
    fn the_journal_is_recognised_by_device_and_inode() {
        assert!(journal_stream_matches("8:1234", 8, 1234));
        assert!(!journal_stream_matches("8:1234", 8, 1235));
        assert!(!journal_stream_matches("garbage", 8, 1234));
    }
}
