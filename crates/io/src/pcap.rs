//! Capture of what leaves weir, as a classic pcap file.
//!
//! # Format
//! The classic libpcap format with **nanosecond** timestamps (magic `0xa1b23c4d`, version
//! 2.4, thiszone 0, sigfigs 0, linktype 1 = Ethernet). All fields are written little-endian
//! (the magic tells readers the byte order, as for any pcap written on a little-endian
//! host). Each record is `ts_sec, ts_nsec, incl_len, orig_len` followed by `incl_len` bytes
//! of the frame, `incl_len = min(orig_len, snaplen)`.
//!
//! # Behaviour on the data path
//! [`PcapWriter::write`] never fails and never blocks on anything but the buffered file
//! write (a 256 KiB `BufWriter`). The file is limited to `max_bytes` (header included):
//! the first record that would take it past the limit, and every record after it, is
//! counted as `skipped` instead of written, so the capture is an uninterrupted prefix of
//! the traffic rather than one with holes. An I/O error (disk full) likewise stops the
//! capture, counts the rest as skipped and is kept for [`PcapWriter::error`].
//!
//! # Statistics
//! [`PcapStats`]: records `written`, records `skipped`, and `bytes` (the file size
//! including the global header and buffered data).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// pcap magic for nanosecond timestamps.
pub const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Size of the global header.
pub const GLOBAL_HEADER_LEN: u64 = 24;
/// Size of a record header.
pub const RECORD_HEADER_LEN: u64 = 16;
/// The snaplen used when 0 is asked for (tcpdump's default).
pub const DEFAULT_SNAPLEN: u32 = 262_144;

const BUF_SIZE: usize = 256 * 1024;

/// Counters of a [`PcapWriter`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PcapStats {
    /// Records written (or buffered to be written).
    pub written: u64,
    /// Records not written because of the size limit or an I/O error.
    pub skipped: u64,
    /// File size: global header plus written records.
    pub bytes: u64,
}

/// A capture's state ([`PcapWriter::status`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CaptureStatus {
    pub path: String,
    #[serde(flatten)]
    pub stats: PcapStats,
    /// Why the capture stopped (a size limit, a write error); `None` while it runs.
    pub stopped: Option<String>,
}

pub struct PcapWriter {
    out: BufWriter<File>,
    path: PathBuf,
    snaplen: u32,
    max_bytes: Option<u64>,
    stats: PcapStats,
    /// Set once a record did not fit or a write failed: nothing more is written.
    stopped: bool,
    error: Option<io::Error>,
}

impl PcapWriter {
    /// Create (truncate) `path` and write the global header. `snaplen` 0 means
    /// [`DEFAULT_SNAPLEN`]; `max_bytes` limits the file size, header included.
    pub fn create(path: &Path, snaplen: u32, max_bytes: Option<u64>) -> io::Result<PcapWriter> {
        let snaplen = if snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            snaplen
        };
        let file = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create capture file {}: {e}", path.display()),
            )
        })?;
        let mut out = BufWriter::with_capacity(BUF_SIZE, file);
        out.write_all(&global_header(snaplen))?;
        Ok(PcapWriter {
            out,
            path: path.to_path_buf(),
            snaplen,
            max_bytes,
            stats: PcapStats {
                bytes: GLOBAL_HEADER_LEN,
                ..Default::default()
            },
            stopped: false,
            error: None,
        })
    }

    /// Record `frame` sent at `ts_ns` nanoseconds since the Unix epoch. Never fails: a
    /// record over the size limit, or after an error, is counted as skipped.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) {
        if self.stopped {
            self.stats.skipped += 1;
            return;
        }
        let orig_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl_len = orig_len.min(self.snaplen);
        let rec = RECORD_HEADER_LEN + incl_len as u64;
        if self
            .max_bytes
            .is_some_and(|max| self.stats.bytes + rec > max)
        {
            self.stopped = true;
            self.stats.skipped += 1;
            return;
        }
        let ts_sec = (ts_ns / 1_000_000_000) as u32;
        let ts_nsec = (ts_ns % 1_000_000_000) as u32;
        let mut hdr = [0u8; RECORD_HEADER_LEN as usize];
        hdr[0..4].copy_from_slice(&ts_sec.to_le_bytes());
        hdr[4..8].copy_from_slice(&ts_nsec.to_le_bytes());
        hdr[8..12].copy_from_slice(&incl_len.to_le_bytes());
        hdr[12..16].copy_from_slice(&orig_len.to_le_bytes());
        let r = self
            .out
            .write_all(&hdr)
            .and_then(|()| self.out.write_all(&frame[..incl_len as usize]));
        match r {
            Ok(()) => {
                self.stats.written += 1;
                self.stats.bytes += rec;
            }
            Err(e) => {
                self.stopped = true;
                self.stats.skipped += 1;
                self.error = Some(e);
            }
        }
    }

    /// Write buffered records to the file. A failure (disk full) stops the capture as a
    /// failed write does (kept for [`PcapWriter::error`]); the records still buffered
    /// are lost, not counted.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.error.is_some() {
            return Ok(());
        }
        let r = self.out.flush();
        if let Err(e) = &r {
            self.stopped = true;
            self.error = Some(io::Error::new(e.kind(), e.to_string()));
        }
        r
    }

    /// Where the capture stands, for the statistics and the log.
    pub fn status(&self) -> CaptureStatus {
        CaptureStatus {
            path: self.path.display().to_string(),
            stats: self.stats,
            stopped: self.stopped.then(|| match &self.error {
                Some(e) => format!("write error: {e}"),
                None => format!(
                    "size limit of {} bytes reached",
                    self.max_bytes.unwrap_or(0)
                ),
            }),
        }
    }

    pub fn stats(&self) -> PcapStats {
        self.stats
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }
    /// Whether the size limit was reached or a write failed (later records are skipped).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }
    /// The write error that stopped the capture, if any.
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Flush and close, returning the final statistics.
    pub fn finish(mut self) -> io::Result<PcapStats> {
        self.out.flush()?;
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(self.stats)
    }
}

fn global_header(snaplen: u32) -> [u8; GLOBAL_HEADER_LEN as usize] {
    let mut h = [0u8; GLOBAL_HEADER_LEN as usize];
    h[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone (i32) and sigfigs (u32) stay 0.
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// Nanoseconds since the Unix epoch now (the wall clock; for pcap timestamps).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempFile(PathBuf);
    impl TempFile {
        fn new(tag: &str) -> TempFile {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            TempFile(std::env::temp_dir().join(format!(
                "weir-pcap-{}-{}-{tag}.pcap",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            )))
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }
    fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
    }

    fn frame(n: usize, fill: u8) -> Vec<u8> {
        (0..n).map(|i| fill.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn header_records_and_snaplen() {
        let t = TempFile::new("basic");
        let mut w = PcapWriter::create(&t.0, 100, None).unwrap();
        let f1 = frame(60, 1);
        let f2 = frame(1514, 2);
        let f3 = frame(100, 3);
        w.write(1_700_000_000_123_456_789, &f1);
        w.write(1_700_000_001_000_000_000, &f2);
        w.write(999, &f3);
        w.flush().unwrap();
        let st = w.stats();
        assert_eq!(st.written, 3);
        assert_eq!(st.skipped, 0);
        let b = std::fs::read(&t.0).unwrap();
        assert_eq!(st.bytes, b.len() as u64);
        assert_eq!(b.len(), 24 + (16 + 60) + (16 + 100) + (16 + 100));
        // Global header, byte by byte.
        assert_eq!(
            &b[0..4],
            &[0x4d, 0x3c, 0xb2, 0xa1],
            "ns magic, little-endian"
        );
        assert_eq!(u16_at(&b, 4), 2);
        assert_eq!(u16_at(&b, 6), 4);
        assert_eq!(u32_at(&b, 8), 0, "thiszone");
        assert_eq!(u32_at(&b, 12), 0, "sigfigs");
        assert_eq!(u32_at(&b, 16), 100, "snaplen");
        assert_eq!(u32_at(&b, 20), 1, "linktype Ethernet");
        // Record 1.
        let r = 24;
        assert_eq!(u32_at(&b, r), 1_700_000_000);
        assert_eq!(u32_at(&b, r + 4), 123_456_789);
        assert_eq!(u32_at(&b, r + 8), 60);
        assert_eq!(u32_at(&b, r + 12), 60);
        assert_eq!(&b[r + 16..r + 16 + 60], &f1[..]);
        // Record 2: truncated to the snaplen, original length kept.
        let r = r + 16 + 60;
        assert_eq!(u32_at(&b, r), 1_700_000_001);
        assert_eq!(u32_at(&b, r + 4), 0);
        assert_eq!(u32_at(&b, r + 8), 100);
        assert_eq!(u32_at(&b, r + 12), 1514);
        assert_eq!(&b[r + 16..r + 116], &f2[..100]);
        // Record 3: exactly snaplen long.
        let r = r + 116;
        assert_eq!(u32_at(&b, r), 0);
        assert_eq!(u32_at(&b, r + 4), 999);
        assert_eq!(u32_at(&b, r + 8), 100);
        assert_eq!(u32_at(&b, r + 12), 100);
        assert_eq!(&b[r + 16..], &f3[..]);
        assert_eq!(w.finish().unwrap().written, 3);
    }

    #[test]
    fn size_limit_stops_writing_and_counts_skipped() {
        let t = TempFile::new("limit");
        // Header 24 + two 60-byte records (76 each) = 176; a third would make 252.
        let mut w = PcapWriter::create(&t.0, 0, Some(200)).unwrap();
        assert_eq!(w.snaplen(), DEFAULT_SNAPLEN);
        for i in 0..2 {
            w.write(i, &frame(60, 0));
        }
        assert!(!w.is_stopped());
        w.write(2, &frame(60, 0));
        assert!(w.is_stopped());
        // A smaller frame that would still fit is skipped too: no holes in the capture.
        w.write(3, &frame(4, 0));
        let st = w.finish().unwrap();
        assert_eq!(
            st,
            PcapStats {
                written: 2,
                skipped: 2,
                bytes: 176
            }
        );
        let b = std::fs::read(&t.0).unwrap();
        assert_eq!(b.len(), 176);
        assert!(b.len() as u64 <= 200);
        assert_eq!(u32_at(&b, 16), DEFAULT_SNAPLEN);
    }

    #[test]
    fn limit_exactly_met_is_allowed() {
        let t = TempFile::new("exact");
        let mut w = PcapWriter::create(&t.0, 65535, Some(24 + 16 + 10)).unwrap();
        w.write(0, &frame(10, 0));
        w.write(0, &frame(1, 0));
        let st = w.finish().unwrap();
        assert_eq!((st.written, st.skipped, st.bytes), (1, 1, 50));
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 50);
    }

    /// A full disk (`/dev/full` answers every write with ENOSPC): the capture stops at
    /// the first flush, says why, and counts what comes after as skipped.
    #[test]
    fn a_full_disk_stops_the_capture_and_says_so() {
        let mut w = PcapWriter::create(Path::new("/dev/full"), 0, None).unwrap();
        w.write(1, &[0u8; 60]);
        assert!(!w.is_stopped());
        assert!(w.flush().is_err());
        assert!(w.is_stopped());
        w.write(2, &[0u8; 60]);
        let st = w.status();
        assert_eq!((st.stats.written, st.stats.skipped), (1, 1));
        let why = st.stopped.unwrap();
        assert!(
            why.starts_with("write error: No space left on device"),
            "{why}"
        );
        // later flushes do not fail again
        assert!(w.flush().is_ok());
    }

    #[test]
    fn create_error_names_the_file() {
        let e = PcapWriter::create(Path::new("/nonexistent-dir/x.pcap"), 0, None)
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent-dir/x.pcap"), "{e}");
    }
}
