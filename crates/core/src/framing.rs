//! Link-layer framing: how many bytes a frame occupies on the link a rate describes, as
//! CAKE accounts them (Linux `net/sched/sch_cake.c` `cake_calc_overhead`; the keywords
//! of iproute2's `tc/q_cake.c`; Høiland-Jørgensen, Täht, Morton, "Piece of CAKE", IEEE
//! LANMAN 2018, §III-C). A shaper that counts too few bytes per frame overfills a DSL
//! modem's buffer; on ATM the error grows with every 48-byte cell a frame starts.
//!
//! The accounted length of a frame of `len` bytes, in this order:
//! 1. `len + overhead` (`overhead` may be negative);
//! 2. at least `mpu` bytes (minimum packet unit; and never below 1 byte);
//! 3. ATM (AAL5): whole cells of 48 payload bytes, each 53 bytes on the wire:
//!    `ceil(l / 48) × 53`; PTM (VDSL2, 64b/65b): one byte per 64 or part of 64:
//!    `l + ceil(l / 64)`; netem's general cells (`rate R PACKETOVERHEAD CELLSIZE
//!    CELLOVERHEAD`, Linux `sch_netem.c` `packet_time_ns`): whole cells of `size` bytes,
//!    each `size + overhead` on the wire: `ceil(l / size) × (size + overhead)`
//!    ([`Coding::Cells`]; ATM is `Cells { size: 48, overhead: 5 }`).
//!
//! Lengths: weir's frame length (`Meta::len`) is the Ethernet frame as AF_PACKET sees it:
//! the 14-byte header (and any VLAN tags) included, no FCS. The per-frame `overhead` here
//! counts from that frame (as the kernel's `tc ... stab overhead` and HTB's `overhead`
//! do). CAKE's keywords count from the IP packet: with an overhead keyword CAKE removes the
//! MAC header first. So a keyword's overhead becomes `cake - 14` here, and the keywords
//! mean exactly what they mean in CAKE for an untagged frame (`raw`, or no overhead
//! keyword, keeps the header: `overhead 0` on the frame). VLAN tags in the frame weir
//! sees count as packet bytes (the accounting sees only a length), as `ether-vlan` would
//! count them. A keyword list is read left to right as `tc` reads it: most keywords add
//! their bytes, `conservative` and `raw` set them, `ethernet` and `docsis` set the mpu,
//! each sets the cell mode it names.
//!
//! | keyword | CAKE overhead (from IP) | cells | mpu | here (on the frame) |
//! |---|---|---|---|---|
//! | `raw` | 0, MAC header kept | none | | 0 |
//! | `conservative` | = 48 | ATM | | 34 |
//! | `ipoa-vcmux` / `ipoa-llcsnap` | +8 / +16 | ATM | | −6 / +2 |
//! | `bridged-vcmux` / `bridged-llcsnap` | +24 / +32 | ATM | | +10 / +18 |
//! | `pppoa-vcmux` / `pppoa-llc` | +10 / +14 | ATM | | −4 / 0 |
//! | `pppoe-vcmux` / `pppoe-llcsnap` | +32 / +40 | ATM | | +18 / +26 |
//! | `pppoe-ptm` / `bridged-ptm` | +30 / +22 | PTM | | +16 / +8 |
//! | `ethernet` | +38 (preamble, SFD, IFG, FCS) | | 84 | +24 |
//! | `ether-vlan` | +4 (may repeat) | | | −10 alone |
//! | `docsis` | +18 | none | 64 | +4 |
//! | `atm` / `ptm` / `noatm` | | ATM / PTM / none | | |
//! | `via-ethernet` | ignored (as in `tc`) | | | |
//!
//! Invariants: a [`Framing::new`] framing never counts an IP frame (at least
//! [`MIN_FRAME`] bytes) below 1 byte — an overhead that would is refused at construction,
//! never wrapped; any length counts at least 1 byte. Cost per frame: one add and one
//! maximum (a compare and a conditional move) for a plain overhead, and a well-predicted
//! branch on the coding; ATM adds a division by the constant 48 (a multiply by its
//! reciprocal) and PTM a shift; general cells one integer division by the cell size
//! (netem's configuration, the emulator's serialiser only).

use std::fmt;

/// The smallest frame that carries an IP packet: an Ethernet header and a 20-byte IPv4
/// header. [`Framing::new`] refuses an overhead that would count it below 1 byte.
pub const MIN_FRAME: u32 = 14 + 20;

/// The MAC header CAKE removes before adding a keyword's overhead.
pub const MAC_HEADER: i32 = 14;

/// How the link codes frames into cells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Coding {
    /// Bytes as they are.
    #[default]
    Plain,
    /// ATM AAL5: 48-byte cells, 53 bytes on the wire, the last one padded.
    Atm,
    /// PTM (VDSL2): 64b/65b, one byte per 64 or part of 64.
    Ptm,
    /// netem's cells: `size` payload bytes (>= 1) each, `size + overhead` (>= 1) bytes on
    /// the wire, the last one padded.
    Cells { size: u16, overhead: i8 },
}

impl Coding {
    /// `none`, `atm`, `ptm`, `cells`.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Plain => "none",
            Coding::Atm => "atm",
            Coding::Ptm => "ptm",
            Coding::Cells { .. } => "cells",
        }
    }
}

impl fmt::Display for Coding {
    /// `none`, `atm`, `ptm`, or `cells of 100+5B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Coding::Cells { size, overhead } => write!(f, "cells of {size}{overhead:+}B"),
            c => f.write_str(c.name()),
        }
    }
}

/// Per-frame accounting on a link (see the module). `Default`: the frame as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Framing {
    /// Bytes added to each frame: within ±[`Framing::MAX_OVERHEAD`] when checked; the
    /// unchecked constructors saturate at the `i16` range (two bytes, so that a
    /// [`Coding::Cells`] fits in the eight).
    overhead: i16,
    /// `max(mpu, 1)`, the floor of step 2 (an mpu of 1 is no mpu). Eight bytes in all, so
    /// a `Rate` stays 40 bytes (a scheduler class holds two in its three cache lines).
    floor: u16,
    coding: Coding,
}

/// Why a framing cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("unknown framing keyword '{0}'; expected one of: {list}", list = keyword_list())]
    UnknownKeyword(String),
    #[error("overhead {0} is outside ±{max} bytes per frame", max = Framing::MAX_OVERHEAD)]
    Overhead(i32),
    #[error("mpu {0} is above {max} bytes", max = Framing::MAX_MPU)]
    Mpu(u32),
    #[error("`atm` and `ptm` both set: a link codes its frames one way")]
    AtmAndPtm,
    #[error(
        "cells of {size} bytes with {overhead:+} bytes each: the size must be in 1..=65535, \
         the overhead in -127..=127, and a cell at least one byte on the wire"
    )]
    Cells { size: u32, overhead: i32 },
    #[error(
        "overhead {overhead} counts a {MIN_FRAME}-byte frame (Ethernet and IPv4 headers) as \
         {} bytes; give an overhead of at least {} or an mpu",
        MIN_FRAME as i32 + overhead,
        1 - MIN_FRAME as i32
    )]
    Underflow { overhead: i32 },
}

impl Default for Framing {
    fn default() -> Self {
        Framing::plain(0)
    }
}

impl Framing {
    /// Largest overhead magnitude, bytes.
    pub const MAX_OVERHEAD: i32 = 4096;
    /// Largest minimum packet unit, bytes.
    pub const MAX_MPU: u32 = 4096;

    /// `overhead` bytes added to every frame, nothing else; a frame counts at least one
    /// byte. Unchecked: the plain per-frame overhead [`crate::Rate::with_overhead`] takes.
    pub const fn plain(overhead: i32) -> Framing {
        Framing {
            overhead: saturate_i16(overhead),
            floor: 1,
            coding: Coding::Plain,
        }
    }

    /// A checked framing: `overhead` within ±[`Self::MAX_OVERHEAD`], `mpu` up to
    /// [`Self::MAX_MPU`], and no IP frame counted below one byte.
    pub fn new(overhead: i32, mpu: u32, coding: Coding) -> Result<Framing, FramingError> {
        if overhead.abs() > Self::MAX_OVERHEAD {
            return Err(FramingError::Overhead(overhead));
        }
        if mpu > Self::MAX_MPU {
            return Err(FramingError::Mpu(mpu));
        }
        if mpu == 0 && MIN_FRAME as i32 + overhead < 1 {
            return Err(FramingError::Underflow { overhead });
        }
        if let Coding::Cells { size, overhead: o } = coding {
            if size == 0 || i32::from(size) + i32::from(o) < 1 {
                return Err(FramingError::Cells {
                    size: size.into(),
                    overhead: o.into(),
                });
            }
        }
        Ok(Framing {
            overhead: saturate_i16(overhead),
            floor: mpu.max(1) as u16,
            coding,
        })
    }

    /// The same framing with another overhead (unchecked, as [`Self::plain`]).
    pub fn with_overhead(self, overhead: i32) -> Framing {
        Framing {
            overhead: saturate_i16(overhead),
            ..self
        }
    }

    /// netem's `rate`'s framing: `packet_overhead` bytes added to each frame, then, with a
    /// `cell_size` > 0, whole cells of `cell_size` bytes each `cell_size + cell_overhead`
    /// on the wire (48 and 5 are ATM's, coded as [`Coding::Atm`]).
    pub fn netem(
        packet_overhead: i32,
        cell_size: u32,
        cell_overhead: i32,
    ) -> Result<Framing, FramingError> {
        let coding = match (cell_size, cell_overhead) {
            (0, _) => Coding::Plain,
            (48, 5) => Coding::Atm,
            (s, o) => match (u16::try_from(s), i8::try_from(o)) {
                (Ok(size), Ok(overhead)) => Coding::Cells { size, overhead },
                _ => {
                    return Err(FramingError::Cells {
                        size: s,
                        overhead: o,
                    })
                }
            },
        };
        Framing::new(packet_overhead, 0, coding)
    }

    /// CAKE's keywords, space-separated, read left to right as `tc` reads them (see the
    /// module).
    pub fn cake(keywords: &str) -> Result<Framing, FramingError> {
        FramingSpec {
            keywords: Some(keywords),
            ..FramingSpec::default()
        }
        .resolve()
    }

    /// Bytes added to each frame (after CAKE's MAC-header removal, for a keyword).
    #[inline]
    pub fn overhead(&self) -> i32 {
        i32::from(self.overhead)
    }

    /// Minimum packet unit, bytes (0: none; 1, which changes nothing, reads as 0).
    #[inline]
    pub fn mpu(&self) -> u32 {
        if self.floor > 1 {
            u32::from(self.floor)
        } else {
            0
        }
    }

    #[inline]
    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// Whether this is a per-frame overhead alone (no mpu, no cells).
    pub fn is_plain(&self) -> bool {
        self.floor == 1 && self.coding == Coding::Plain
    }

    /// The accounted length of a `frame_len`-byte frame (saturating at `u32::MAX`).
    #[inline]
    pub fn wire_len(&self, frame_len: u32) -> u32 {
        self.account(i64::from(frame_len)).min(u64::from(u32::MAX)) as u32
    }

    /// The accounted length of `len` bytes sent as one frame (for bursts and limits).
    #[inline]
    pub fn wire_bytes(&self, len: u64) -> u64 {
        self.account(len.min(1 << 62) as i64)
    }

    #[inline]
    fn account(&self, len: i64) -> u64 {
        let l = (len + i64::from(self.overhead)).max(i64::from(self.floor)) as u64;
        match self.coding {
            Coding::Plain => l,
            Coding::Atm => l.div_ceil(48) * 53,
            Coding::Ptm => l + l.div_ceil(64),
            Coding::Cells { size, overhead } => {
                // size >= 1 and size + overhead >= 1 when checked; unchecked, at least 1
                let cell = (i64::from(size) + i64::from(overhead)).max(1) as u64;
                l.div_ceil(u64::from(size.max(1))) * cell
            }
        }
    }
}

/// `v` clamped to the `i16` range.
const fn saturate_i16(v: i32) -> i16 {
    if v > i16::MAX as i32 {
        i16::MAX
    } else if v < i16::MIN as i32 {
        i16::MIN
    } else {
        v as i16
    }
}

impl fmt::Display for Framing {
    /// E.g. `overhead 16B ptm`, `overhead 24B mpu 84B`, `overhead 0B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "overhead {}B", self.overhead)?;
        if self.mpu() > 0 {
            write!(f, " mpu {}B", self.mpu())?;
        }
        if self.coding != Coding::Plain {
            write!(f, " {}", self.coding)?;
        }
        Ok(())
    }
}

/// A framing as a policy or a command line writes it: CAKE keywords, then explicit keys
/// that override what the keywords set (`overhead` on the frame as weir counts it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FramingSpec<'a> {
    pub keywords: Option<&'a str>,
    pub overhead: Option<i32>,
    pub mpu: Option<u32>,
    /// `Some(true)`: ATM cells; `Some(false)`: not ATM (overrides a keyword's).
    pub atm: Option<bool>,
    /// `Some(true)`: PTM coding; `Some(false)`: not PTM.
    pub ptm: Option<bool>,
}

impl FramingSpec<'_> {
    /// The framing: the keywords as `tc` would set CAKE, the explicit keys over them,
    /// checked by [`Framing::new`].
    pub fn resolve(&self) -> Result<Framing, FramingError> {
        let mut k = Keywords::default();
        for word in self.keywords.unwrap_or("").split_whitespace() {
            k.apply(word)?;
        }
        let mut coding = k.coding;
        match (self.atm, self.ptm) {
            (Some(true), Some(true)) => return Err(FramingError::AtmAndPtm),
            (Some(true), _) => coding = Coding::Atm,
            (_, Some(true)) => coding = Coding::Ptm,
            (Some(false), _) if coding == Coding::Atm => coding = Coding::Plain,
            (_, Some(false)) if coding == Coding::Ptm => coding = Coding::Plain,
            _ => {}
        }
        let overhead = self.overhead.unwrap_or_else(|| k.on_frame());
        Framing::new(overhead, self.mpu.unwrap_or(k.mpu), coding)
    }
}

/// What `tc` sends CAKE for a keyword list (`cake_parse_opt`).
#[derive(Default)]
struct Keywords {
    /// CAKE's `overhead` (from the IP packet when `strip`).
    overhead: i32,
    /// An overhead keyword was given (CAKE then removes the MAC header)...
    set: bool,
    /// ... unless `raw` was given too.
    raw: bool,
    mpu: u32,
    coding: Coding,
}

/// CAKE's overhead keywords, as iproute2 lists them.
const KEYWORDS: [&str; 19] = [
    "raw",
    "conservative",
    "ipoa-vcmux",
    "ipoa-llcsnap",
    "bridged-vcmux",
    "bridged-llcsnap",
    "pppoa-vcmux",
    "pppoa-llc",
    "pppoe-vcmux",
    "pppoe-llcsnap",
    "pppoe-ptm",
    "bridged-ptm",
    "via-ethernet",
    "ethernet",
    "ether-vlan",
    "docsis",
    "atm",
    "ptm",
    "noatm",
];

fn keyword_list() -> String {
    KEYWORDS.join(", ")
}

impl Keywords {
    fn apply(&mut self, word: &str) -> Result<(), FramingError> {
        let mut add = |bytes: i32, coding: Option<Coding>| {
            self.overhead += bytes;
            self.set = true;
            if let Some(c) = coding {
                self.coding = c;
            }
        };
        let atm = Some(Coding::Atm);
        let ptm = Some(Coding::Ptm);
        match word {
            "raw" => {
                self.coding = Coding::Plain;
                self.overhead = 0;
                self.set = true;
                self.raw = true;
            }
            "conservative" => {
                // one whole ATM cell plus ATM framing: safe when the overhead is unknown
                self.coding = Coding::Atm;
                self.overhead = 48;
                self.set = true;
            }
            "ipoa-vcmux" => add(8, atm),
            "ipoa-llcsnap" => add(16, atm),
            "bridged-vcmux" => add(24, atm),
            "bridged-llcsnap" => add(32, atm),
            "pppoa-vcmux" => add(10, atm),
            "pppoa-llc" => add(14, atm),
            "pppoe-vcmux" => add(32, atm),
            "pppoe-llcsnap" => add(40, atm),
            // PPP 2 + PPPoE 6 + MACs 12 + ethertype 2 + FCS 4 + start/end 2 + TC-CRC 2
            "pppoe-ptm" => add(30, ptm),
            // MACs 12 + ethertype 2 + FCS 4 + start/end of frame 2 + TC-CRC 2
            "bridged-ptm" => add(22, ptm),
            "via-ethernet" => {}
            "ethernet" => {
                // preamble + SFD 8, inter-frame gap 12, MAC header 14, FCS 4
                add(38, None);
                self.mpu = 84;
            }
            "ether-vlan" => add(4, None),
            "docsis" => {
                // the Ethernet frame with FCS, no preamble or gap
                add(18, Some(Coding::Plain));
                self.mpu = 64;
            }
            "atm" => self.coding = Coding::Atm,
            "ptm" => self.coding = Coding::Ptm,
            "noatm" => self.coding = Coding::Plain,
            other => return Err(FramingError::UnknownKeyword(other.to_string())),
        }
        Ok(())
    }

    /// The overhead on weir's frame: CAKE's, less the MAC header it removes.
    fn on_frame(&self) -> i32 {
        if self.set && !self.raw {
            self.overhead - MAC_HEADER
        } else {
            self.overhead
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accounted length of a frame carrying an `ip`-byte IP packet (untagged).
    fn ip(f: &Framing, ip: u32) -> u32 {
        f.wire_len(ip + 14)
    }

    #[test]
    fn plain_overhead_is_one_add() {
        let f = Framing::plain(24);
        assert_eq!(f.wire_len(1514), 1538);
        assert_eq!(f.wire_len(0), 24);
        // a negative overhead never counts a frame below one byte, and never wraps
        assert_eq!(Framing::plain(-100).wire_len(60), 1);
        assert_eq!(Framing::plain(-14).wire_len(10), 1);
        assert_eq!(Framing::default().wire_len(u32::MAX), u32::MAX);
        assert_eq!(
            Framing::plain(256).wire_len(u32::MAX),
            u32::MAX,
            "saturates"
        );
        assert_eq!(Framing::plain(4).wire_bytes(1 << 40), (1 << 40) + 4);
        assert!(Framing::plain(24).is_plain());
    }

    #[test]
    fn pppoa_vcmux_on_atm() {
        // a 1500-byte IP packet: 1500 + 10 = 1510 bytes, 32 cells (31 × 48 = 1488 <
        // 1510 <= 1536), 32 × 53 = 1696 bytes on the wire
        let f = Framing::cake("pppoa-vcmux").unwrap();
        assert_eq!((f.overhead(), f.coding()), (-4, Coding::Atm));
        assert_eq!(ip(&f, 1500), 1696);
        // a 40-byte ACK: 50 bytes, 2 cells, 106
        assert_eq!(ip(&f, 40), 106);
        // 38 bytes of IP + 10 = 48: exactly one cell; one more byte takes a second
        assert_eq!(ip(&f, 38), 53);
        assert_eq!(ip(&f, 39), 106);
    }

    #[test]
    fn every_keyword_with_cakes_numbers() {
        // (keywords, accounted length of a 1500-byte and of a 40-byte IP packet), each
        // worked out from cake_calc_overhead: len - 14 + overhead, mpu, then cells
        let cases: [(&str, u32, u32); 23] = [
            ("raw", 1514, 54), // the frame as it is
            // 1548 -> 33 cells (32 × 48 = 1536 < 1548); 88 -> 2 cells
            ("conservative", 33 * 53, 2 * 53),
            ("ipoa-vcmux", 32 * 53, 53), // 1508 -> 32 cells; 48 -> 1 cell
            ("ipoa-llcsnap", 32 * 53, 2 * 53), // 1516; 56
            ("bridged-vcmux", 32 * 53, 2 * 53), // 1524; 64
            ("bridged-llcsnap", 32 * 53, 2 * 53), // 1532; 72
            ("pppoa-vcmux", 32 * 53, 2 * 53), // 1510; 50
            ("pppoa-llc", 32 * 53, 2 * 53), // 1514; 54
            ("pppoe-vcmux", 32 * 53, 2 * 53), // 1532; 72
            ("pppoe-llcsnap", 33 * 53, 2 * 53), // 1540 > 1536 -> 33; 80
            ("pppoe-ptm", 1530 + 24, 70 + 2), // 1530 + ceil(1530/64) = 24; 70 + 2
            ("bridged-ptm", 1522 + 24, 62 + 1), // 1522 + 24; 62 + 1
            ("via-ethernet", 1514, 54),  // ignored: nothing set
            ("ethernet", 1538, 84),      // 1538; 78 -> mpu 84
            ("ether-vlan", 1504, 44),    // header removed, 4 added
            ("docsis", 1518, 64),        // 1518; 58 -> mpu 64
            ("atm", 32 * 53, 2 * 53),    // the frame in cells: 1514; 54
            ("ptm", 1514 + 24, 54 + 1),  // 1514 + 24; 54 + 1
            ("noatm", 1514, 54),
            // several keywords: added left to right
            ("bridged-ptm ether-vlan", 1526 + 24, 66 + 2),
            ("ethernet ether-vlan", 1542, 84),
            ("pppoa-vcmux conservative", 33 * 53, 2 * 53), // conservative sets 48
            ("conservative pppoa-vcmux", 33 * 53, 3 * 53), // 48 + 10 = 58: 1558; 98
        ];
        for (k, full, ack) in cases {
            let f = Framing::cake(k).unwrap_or_else(|e| panic!("{k}: {e}"));
            assert_eq!((ip(&f, 1500), ip(&f, 40)), (full, ack), "{k}: {f:?}");
        }
        for k in KEYWORDS {
            assert!(Framing::cake(k).is_ok(), "{k}");
        }
        // "raw" keeps the MAC header even with an overhead added after it
        let f = Framing::cake("raw ether-vlan").unwrap();
        assert_eq!(ip(&f, 1500), 1518);
        // cell keywords switch the mode, last one wins
        assert_eq!(
            Framing::cake("pppoa-vcmux noatm").unwrap().coding(),
            Coding::Plain
        );
        assert_eq!(Framing::cake("docsis atm").unwrap().coding(), Coding::Atm);
        assert_eq!(Framing::cake("").unwrap(), Framing::default());
    }

    #[test]
    fn ptm_is_64_65_coding() {
        let f = Framing::new(0, 0, Coding::Ptm).unwrap();
        // 64 bytes -> 65; 65 -> 67 (two 64-byte blocks started); 1 -> 2
        assert_eq!(f.wire_len(64), 65);
        assert_eq!(f.wire_len(65), 67);
        assert_eq!(f.wire_len(1), 2);
        assert_eq!(f.wire_len(6400), 6500);
    }

    #[test]
    fn mpu_is_a_floor_before_the_cells() {
        let f = Framing::new(0, 96, Coding::Atm).unwrap();
        // 60 bytes raised to 96: two cells, 106
        assert_eq!(f.wire_len(60), 106);
        assert_eq!(f.wire_len(97), 3 * 53);
        let f = Framing::new(-20, 64, Coding::Plain).unwrap();
        assert_eq!(f.wire_len(60), 64);
        assert_eq!(f.wire_len(100), 80);
    }

    #[test]
    fn underflow_is_refused_at_construction() {
        // 34 - 33 = 1 byte: allowed; 34 - 34 = 0: refused, unless an mpu floors it
        assert!(Framing::new(-33, 0, Coding::Plain).is_ok());
        let e = Framing::new(-34, 0, Coding::Atm).unwrap_err();
        assert_eq!(e, FramingError::Underflow { overhead: -34 });
        assert_eq!(
            e.to_string(),
            "overhead -34 counts a 34-byte frame (Ethernet and IPv4 headers) as 0 bytes; \
             give an overhead of at least -33 or an mpu"
        );
        let f = Framing::new(-64, 40, Coding::Atm).unwrap();
        assert_eq!(f.wire_len(34), 53);
        assert_eq!(f.wire_len(0), 53, "shorter than any IP frame: the mpu");
        assert_eq!(
            Framing::new(5000, 0, Coding::Plain),
            Err(FramingError::Overhead(5000))
        );
        assert_eq!(
            Framing::new(0, 5000, Coding::Plain),
            Err(FramingError::Mpu(5000))
        );
    }

    #[test]
    fn explicit_keys_override_the_keywords() {
        let spec = |overhead, mpu, atm, ptm| FramingSpec {
            keywords: Some("pppoe-ptm"),
            overhead,
            mpu,
            atm,
            ptm,
        };
        assert_eq!(
            spec(None, None, None, None).resolve(),
            Framing::new(16, 0, Coding::Ptm)
        );
        assert_eq!(
            spec(Some(20), Some(68), None, None).resolve(),
            Framing::new(20, 68, Coding::Ptm)
        );
        assert_eq!(
            spec(None, None, Some(true), None).resolve(),
            Framing::new(16, 0, Coding::Atm)
        );
        assert_eq!(
            spec(None, None, None, Some(false)).resolve(),
            Framing::new(16, 0, Coding::Plain)
        );
        // atm = false leaves a PTM keyword alone
        assert_eq!(
            spec(None, None, Some(false), None).resolve(),
            Framing::new(16, 0, Coding::Ptm)
        );
        assert_eq!(
            spec(None, None, Some(true), Some(true)).resolve(),
            Err(FramingError::AtmAndPtm)
        );
        // without keywords: the keys alone
        let keys = FramingSpec {
            overhead: Some(-40),
            ..FramingSpec::default()
        };
        assert_eq!(
            keys.resolve(),
            Err(FramingError::Underflow { overhead: -40 })
        );
        let e = FramingSpec {
            keywords: Some("pppoe-ptm adsl"),
            ..FramingSpec::default()
        }
        .resolve()
        .unwrap_err();
        assert_eq!(e, FramingError::UnknownKeyword("adsl".into()));
        assert!(
            e.to_string().contains("raw, conservative, ipoa-vcmux"),
            "{e}"
        );
    }

    /// tc-netem(8)'s example `rate 5kbit 20 100 5` and its ATM example: a 50-byte packet
    /// takes two 48-byte cells, 2 × 53 = 106 bytes on the wire.
    #[test]
    fn netem_cells() {
        let f = Framing::netem(20, 100, 5).unwrap();
        assert_eq!(
            f.coding(),
            Coding::Cells {
                size: 100,
                overhead: 5
            }
        );
        // 60 + 20 = 80: one cell, 105; 81 + 20 = 101: two, 210; 180 + 20 = 200: two
        assert_eq!(f.wire_len(60), 105);
        assert_eq!(f.wire_len(81), 210);
        assert_eq!(f.wire_len(180), 210);
        assert_eq!(f.to_string(), "overhead 20B cells of 100+5B");
        let atm = Framing::netem(0, 48, 5).unwrap();
        assert_eq!(atm.coding(), Coding::Atm);
        assert_eq!(atm.wire_len(50), 106);
        // negative packet overhead strips the Ethernet header, as the man page says
        assert_eq!(Framing::netem(-14, 0, 0).unwrap().wire_len(1514), 1500);
        assert_eq!(
            Framing::netem(0, 64, -64),
            Err(FramingError::Cells {
                size: 64,
                overhead: -64
            })
        );
        assert!(Framing::netem(0, 70_000, 0).is_err());
        assert!(Framing::netem(0, 53, 200).is_err());
        // unchecked cells never divide by zero
        let odd = Framing {
            overhead: 0,
            floor: 1,
            coding: Coding::Cells {
                size: 0,
                overhead: -100,
            },
        };
        assert_eq!(odd.wire_len(10), 10);
        assert_eq!(Framing::plain(i32::MAX).overhead(), i32::from(i16::MAX));
    }

    #[test]
    fn small_enough_for_a_rate() {
        assert_eq!(std::mem::size_of::<Framing>(), 8);
        assert_eq!(std::mem::size_of::<crate::Rate>(), 40);
        // an mpu of 1 changes nothing and reads as none
        assert_eq!(Framing::new(0, 1, Coding::Plain), Ok(Framing::default()));
    }

    #[test]
    fn display() {
        assert_eq!(Framing::default().to_string(), "overhead 0B");
        assert_eq!(
            Framing::cake("pppoe-ptm").unwrap().to_string(),
            "overhead 16B ptm"
        );
        assert_eq!(
            Framing::cake("ethernet").unwrap().to_string(),
            "overhead 24B mpu 84B"
        );
    }
}
