//! Reading a capture: classic pcap files (what `tcpdump -w` and `weir run --pcap`
//! write), for `weir discover --pcap`.
//!
//! * Formats: the classic libpcap format in either byte order, with microsecond
//!   (`a1b2c3d4`) or nanosecond (`a1b23c4d`) timestamps. pcapng (`0a0d0d0a`, what
//!   Wireshark saves by default) is refused with the command that converts it.
//! * Link types: Ethernet (1) as is; Linux cooked capture v1 (113, `tcpdump -i any`)
//!   becomes an Ethernet frame (zero addresses, the cooked header's protocol as the
//!   ethertype) so the same parser reads both.
//! * Every length is checked: a record longer than the file's snaplen (or 256 KiB), a
//!   file cut in a record: an error naming the record and its offset, never a panic.
//!   Records cut by the snaplen (`incl_len < orig_len`) are read as captured and
//!   counted ([`PcapReader::truncated`]).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

/// LINKTYPE_LINUX_SLL.
const LINKTYPE_SLL: u32 = 113;
const LINKTYPE_ETHERNET: u32 = 1;
/// The largest record accepted whatever the header says.
const MAX_RECORD: u32 = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PcapReadError {
    #[error("{}: {what}: {source}", .path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{}: {why}", .path.display())]
    Format { path: PathBuf, why: String },
}

/// See the module comment.
pub struct PcapReader {
    input: BufReader<File>,
    path: PathBuf,
    swapped: bool,
    nanos: bool,
    linktype: u32,
    snaplen: u32,
    /// Records read, the offset of the next.
    records: u64,
    offset: u64,
    truncated: u64,
    raw: Vec<u8>,
}

/// One frame read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The frame's length on the wire (≥ what was captured).
    pub orig_len: u32,
}

impl PcapReader {
    pub fn open(path: &Path) -> Result<PcapReader, PcapReadError> {
        let io_err = |what, source| PcapReadError::Io {
            path: path.to_path_buf(),
            what,
            source,
        };
        let bad = |why: String| PcapReadError::Format {
            path: path.to_path_buf(),
            why,
        };
        let file = File::open(path).map_err(|e| io_err("cannot open the capture", e))?;
        let mut input = BufReader::with_capacity(256 * 1024, file);
        let mut h = [0u8; 24];
        if let Err(e) = input.read_exact(&mut h) {
            return Err(match e.kind() {
                io::ErrorKind::UnexpectedEof => {
                    bad("shorter than a pcap header (24 bytes): not a capture".into())
                }
                _ => io_err("cannot read the capture", e),
            });
        }
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (false, true),
            0xd4c3_b2a1 => (true, false),
            0x4d3c_b2a1 => (true, true),
            0x0a0d_0d0a => {
                return Err(bad(
                    "a pcapng file; weir reads classic pcap: convert it with \
                     `tcpdump -r FILE -w FILE.pcap` (or editcap -F pcap)"
                        .into(),
                ))
            }
            m => return Err(bad(format!("not a pcap file (magic {m:08x})"))),
        };
        let word = |i: usize| word(&h, i, swapped);
        let linktype = word(20) & 0x0fff_ffff;
        if linktype != LINKTYPE_ETHERNET && linktype != LINKTYPE_SLL {
            return Err(bad(format!(
                "link type {linktype}: weir reads Ethernet (1) and Linux cooked (113, \
                 tcpdump -i any) captures"
            )));
        }
        let snaplen = word(16);
        Ok(PcapReader {
            input,
            path: path.to_path_buf(),
            swapped,
            nanos,
            linktype,
            snaplen: if snaplen == 0 {
                MAX_RECORD
            } else {
                snaplen.min(MAX_RECORD)
            },
            records: 0,
            offset: 24,
            truncated: 0,
            raw: Vec::new(),
        })
    }

    /// Records cut by the snaplen so far.
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// The next record's frame into `frame` (as an Ethernet frame); `None` at the end.
    pub fn next_frame(&mut self, frame: &mut Vec<u8>) -> Result<Option<Record>, PcapReadError> {
        let mut h = [0u8; 16];
        match read_full(&mut self.input, &mut h) {
            Ok(0) => return Ok(None),
            Ok(16) => {}
            Ok(n) => return Err(self.cut(n, 16)),
            Err(e) => return Err(self.io("cannot read the capture", e)),
        }
        let word = |i: usize| word(&h, i, self.swapped);
        let (sec, frac, incl, orig) = (word(0), word(4), word(8), word(12));
        if incl > self.snaplen {
            return Err(PcapReadError::Format {
                path: self.path.clone(),
                why: format!(
                    "record {} at byte {}: {incl} bytes, more than the snaplen {}: a damaged file",
                    self.records + 1,
                    self.offset,
                    self.snaplen
                ),
            });
        }
        self.raw.resize(incl as usize, 0);
        let mut raw = std::mem::take(&mut self.raw);
        let got = read_full(&mut self.input, &mut raw);
        self.raw = raw;
        match got {
            Ok(n) if n == incl as usize => {}
            Ok(n) => return Err(self.cut(16 + n, 16 + incl as usize)),
            Err(e) => return Err(self.io("cannot read the capture", e)),
        }
        self.records += 1;
        self.offset += 16 + u64::from(incl);
        if incl < orig {
            self.truncated += 1;
        }
        let ns = if self.nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1000
        };
        frame.clear();
        let mut orig_len = orig;
        if self.linktype == LINKTYPE_SLL {
            // 16-byte cooked header: packet type, ARPHRD, address length, address (8),
            // protocol (the ethertype)
            if self.raw.len() < 16 {
                return Err(PcapReadError::Format {
                    path: self.path.clone(),
                    why: format!(
                        "record {}: {} bytes, shorter than a cooked header",
                        self.records,
                        self.raw.len()
                    ),
                });
            }
            frame.extend_from_slice(&[0; 12]);
            frame.extend_from_slice(&self.raw[14..16]);
            frame.extend_from_slice(&self.raw[16..]);
            orig_len = orig.saturating_sub(2); // 16-byte header became 14
        } else {
            frame.extend_from_slice(&self.raw);
        }
        Ok(Some(Record {
            ts_ns: u64::from(sec) * 1_000_000_000 + ns,
            orig_len,
        }))
    }

    fn io(&self, what: &'static str, source: io::Error) -> PcapReadError {
        PcapReadError::Io {
            path: self.path.clone(),
            what,
            source,
        }
    }

    fn cut(&self, got: usize, want: usize) -> PcapReadError {
        PcapReadError::Format {
            path: self.path.clone(),
            why: format!(
                "record {} at byte {} is cut short ({got} of {want} bytes): the capture \
                 ends mid-record",
                self.records + 1,
                self.offset
            ),
        }
    }
}

/// The 32-bit word at `b[i..i + 4]` in the file's byte order (`swapped`: big-endian).
fn word(b: &[u8], i: usize, swapped: bool) -> u32 {
    let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
    if swapped {
        u32::from_be_bytes(w)
    } else {
        u32::from_le_bytes(w)
    }
}

/// Read until `buf` is full or the end of the input; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::PcapWriter;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("weir-pcapr-{}-{name}", std::process::id()))
    }

    #[test]
    fn reads_what_the_writer_wrote() {
        let p = tmp("rw.pcap");
        let mut w = PcapWriter::create(&p, 0, None).unwrap();
        w.write(1_700_000_000_123_456_789, &[1; 60]);
        w.write(1_700_000_001_000_000_000, &[2; 1514]);
        w.flush().unwrap();
        drop(w);
        let mut r = PcapReader::open(&p).unwrap();
        let mut f = Vec::new();
        let a = r.next_frame(&mut f).unwrap().unwrap();
        assert_eq!(
            (a.ts_ns, a.orig_len, f.len()),
            (1_700_000_000_123_456_789, 60, 60)
        );
        let b = r.next_frame(&mut f).unwrap().unwrap();
        assert_eq!((b.orig_len, f[0]), (1514, 2));
        assert!(r.next_frame(&mut f).unwrap().is_none());
        // cut mid-record
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 100]).unwrap();
        let mut r = PcapReader::open(&p).unwrap();
        r.next_frame(&mut f).unwrap();
        let e = r.next_frame(&mut f).unwrap_err().to_string();
        assert!(e.contains("record 2 at byte 100 is cut short"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn microsecond_big_endian_cooked() {
        let p = tmp("sll.pcap");
        // big-endian: magic, version 2.4, thiszone, sigfigs, snaplen, link type
        let mut b = 0xa1b2_c3d4u32.to_be_bytes().to_vec();
        b.extend_from_slice(&[0, 2, 0, 4]);
        for w in [0u32, 0, 65535, 113] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        assert_eq!(b.len(), 24);
        let mut cooked = vec![0u8; 14];
        cooked.extend_from_slice(&[0x08, 0x00]); // IPv4
        cooked.extend_from_slice(&[0x45; 20]);
        for w in [5u32, 7, cooked.len() as u32, cooked.len() as u32] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b.extend_from_slice(&cooked);
        std::fs::write(&p, &b).unwrap();
        let mut r = PcapReader::open(&p).unwrap();
        let mut f = Vec::new();
        let rec = r.next_frame(&mut f).unwrap().unwrap();
        assert_eq!(rec.ts_ns, 5_000_007_000);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f.len(), 34);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn refusals_say_why() {
        let p = tmp("bad.pcap");
        std::fs::write(
            &p,
            [
                0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        )
        .unwrap();
        let e = PcapReader::open(&p).err().unwrap().to_string();
        assert!(e.contains("pcapng"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        let e = PcapReader::open(&p).err().unwrap().to_string();
        assert!(e.contains("shorter than a pcap header"), "{e}");
        let mut h = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
        h.extend_from_slice(&[
            2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 105, 0, 0, 0,
        ]);
        std::fs::write(&p, &h).unwrap();
        let e = PcapReader::open(&p).err().unwrap().to_string();
        assert!(e.contains("link type 105"), "{e}");
        // a record claiming more than the snaplen
        let mut h = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
        h.extend_from_slice(&[
            2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xdc, 0x05, 0, 0, 1, 0, 0, 0,
        ]);
        for w in [0u32, 0, 100_000, 100_000] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        std::fs::write(&p, &h).unwrap();
        let mut r = PcapReader::open(&p).unwrap();
        let e = r.next_frame(&mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("more than the snaplen 1500"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }
}
