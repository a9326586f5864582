//! The `mm-link` logs of `weir emu --uplink-log/--downlink-log`: each direction's emulated
//! link records its events in the engine ([`weir_core::emulate::mmlog`]); the bridge moves
//! them to the writer and the file at every publish (4 times a second) and at the end.
//! A file that cannot be written is reported once and logging stops; forwarding goes on.

use super::BridgeError;
use crate::clock::Clock;
use crate::log;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use weir_core::device::Device;
use weir_core::emulate::mmlog::{LogHead, MmLogWriter};
use weir_core::{Direction, Instant};

/// A log to write: the direction's link, the file, and what its header says.
#[derive(Clone, Debug)]
pub struct LinkLogSpec {
    pub dir: Direction,
    pub path: PathBuf,
    /// The trace file or the rate the link has.
    pub source: String,
    pub command_line: String,
}

pub(super) struct LinkLog {
    dir: Direction,
    path: PathBuf,
    writer: MmLogWriter,
    file: Option<BufWriter<File>>,
    text: String,
}

impl LinkLog {
    /// Create the file and start recording `spec.dir`'s link; the log's times count from
    /// `start` (rounded down to a whole ms).
    pub(super) fn open(
        spec: LinkLogSpec,
        device: &mut Device,
        clock: &Clock,
        start: Instant,
    ) -> Result<LinkLog, BridgeError> {
        let flag = match spec.dir {
            Direction::Outbound => "--uplink-log",
            Direction::Inbound => "--downlink-log",
        };
        let Some(link) = device.emu_link_mut(spec.dir) else {
            return Err(BridgeError::Other(format!(
                "{flag} {}: that direction has no emulated link",
                spec.path.display()
            )));
        };
        link.set_logging(true);
        let file = File::create(&spec.path).map_err(|e| {
            BridgeError::Other(format!(
                "{flag} {}: cannot create: {e}",
                spec.path.display()
            ))
        })?;
        let zero_ns = start.0 / 1_000_000 * 1_000_000;
        let head = LogHead {
            link: match spec.dir {
                Direction::Outbound => "Uplink",
                Direction::Inbound => "Downlink",
            }
            .into(),
            source: spec.source,
            path: spec.path.display().to_string(),
            command_line: spec.command_line,
            zero_ns,
            init_unix_ms: clock.to_unix_ns(Instant(zero_ns)) / 1_000_000,
        };
        Ok(LinkLog {
            dir: spec.dir,
            path: spec.path,
            writer: MmLogWriter::new(head),
            file: Some(BufWriter::new(file)),
            text: String::new(),
        })
    }

    /// Write what the link recorded up to `now` (everything when `last`).
    pub(super) fn flush(&mut self, device: &mut Device, now: Instant, last: bool) {
        if self.file.is_none() {
            return;
        }
        let Some(link) = device.emu_link_mut(self.dir) else {
            return;
        };
        link.take_log(now, self.writer.pending());
        let Some(link) = device.emu_link(self.dir) else {
            return;
        };
        self.text.clear();
        self.writer.flush(link, now, last, &mut self.text);
        let Some(file) = &mut self.file else {
            return;
        };
        let written = file
            .write_all(self.text.as_bytes())
            .and_then(|_| file.flush());
        if let Err(e) = written {
            log::warning(&format!(
                "link log {}: {e}; it stops here (forwarding goes on)",
                self.path.display()
            ));
            self.file = None;
            if let Some(link) = device.emu_link_mut(self.dir) {
                link.set_logging(false);
            }
        }
    }
}
