//! Fail-open: while weir is not forwarding — stopped, crashed, killed, a hung loop — the
//! kernel forwards between the two interfaces itself (unshaped), and weir takes over
//! again when it is back, without a loop or a duplicated frame.
//!
//! The mechanism is a dead man's switch inside the kernel, so it needs no process of its
//! own to survive weir: a small BPF program on each interface's ingress (cls_bpf in
//! direct-action mode on a `clsact` qdisc, [`SLOT`]) reads a heartbeat weir writes into a
//! shared map. While the heartbeat is fresh it lets the frame go on (`TC_ACT_OK`: weir's
//! packet socket has already taken its copy, the taps run before the ingress hook); once
//! it is older than the timeout ([`DEFAULT_AFTER`], `--fail-open-after`), it redirects the
//! frame to the other interface's egress (`bpf_redirect`) and counts it. The program and
//! its map outlive weir: the filter holds them. A clean stop writes a heartbeat of 0, so
//! the kernel forwards at once and the log says so.
//!
//! ```text
//!   r6 = skb;  r7 = &map.words
//!   age = ktime_get_ns() - words[HEARTBEAT]
//!   if (s64)age <= words[TIMEOUT]: return TC_ACT_OK            (weir forwards)
//!   words[PACKETS] += 1; words[BYTES] += skb->len              (atomic)
//!   return bpf_redirect(peer ifindex, egress)                    (the kernel forwards)
//! ```
//!
//! Map words (u64): 0 heartbeat (CLOCK_MONOTONIC ns, the clock of `bpf_ktime_get_ns`; 0:
//! weir stopped), 1 timeout (ns), 2–3 frames and bytes the kernel forwarded lan → wan,
//! 4–5 wan → lan.
//!
//! The hand-over without duplicates ([`Heart`]): weir beats every `timeout / 8`. At each
//! beat it stores the new heartbeat and reads the clock again; if the time since the
//! previous stored heartbeat exceeds `timeout − 1 ms` (the 1 ms covers the kernel's
//! slightly stale fast clock and the store reaching other CPUs), the program may have
//! redirected frames since, and every frame the kernel gave weir's rings up to that
//! instant ([`Beat::TookOver`], CLOCK_REALTIME, the clock of ring timestamps) may be one
//! of them: weir discards those copies (counted, `handover_skipped`) and forwards only
//! frames received after it. A frame is timestamped before the program sees it, so a
//! redirected frame is always older than the instant; a frame that was not redirected
//! but is older is lost (those that came during the stall before the kernel took over,
//! late by the whole stall anyway) — loss, never a duplicate. At start
//! the filter is replaced before the rings open, so nothing older is read.
//!
//! A stall can also fall between a beat and the reading of the rings (a `SIGSTOP` in the
//! middle of a turn): the frames read after it may be younger than the heartbeat's
//! timeout, redirected already, and no beat has yet seen the stall. So each beat also
//! gives the instant its heartbeat goes stale, less the margin ([`Heart::fresh_before`],
//! CLOCK_REALTIME): a frame received at or after it is left in the ring until the next
//! beat — which, coming later still, finds the stall and skips the frame.
//!
//! `--fail-closed` (and `weir emu`, an emulator whose impairment must not silently
//! vanish) removes weir's filter instead, so a stopped weir forwards nothing.

use crate::bpf::{self, Insn, SharedWords};
use crate::tc::{self, FilterSlot};
use std::sync::atomic::Ordering;
use weir_core::Duration;

/// Where weir's filter sits on each interface's ingress: preference 1 (before any
/// other), handle 0x77656972 ("weir").
pub const SLOT: FilterSlot = FilterSlot {
    pref: 1,
    handle: 0x7765_6972,
};
/// The filter's name (`tc filter show dev IF ingress`).
pub const NAME: &str = "weir-failopen";
/// Default heartbeat timeout: the kernel forwards 100–113 ms after weir stops beating.
pub const DEFAULT_AFTER: Duration = Duration::from_millis(100);
/// Shortest timeout accepted: below it a busy host's scheduling delays would hand the
/// link to the kernel over and over.
pub const MIN_AFTER: Duration = Duration::from_millis(20);
/// Slack of the stale check (see the module comment).
const MARGIN_NS: u64 = 1_000_000;

const HEARTBEAT: usize = 0;
const TIMEOUT: usize = 1;
/// First word of a direction's counters: lan → wan at 2, wan → lan at 4.
const LAN_COUNTERS: usize = 2;
const WAN_COUNTERS: usize = 4;
const WORDS: usize = 8;

const HELPER_KTIME_GET_NS: i32 = 5;
const HELPER_REDIRECT: i32 = 23;
const TC_ACT_OK: i32 = 0;

#[derive(Debug, thiserror::Error)]
pub enum FailOpenError {
    #[error("fail-open: {0}; weir run --fail-closed bridges without the kernel bypass")]
    Bpf(#[from] bpf::BpfError),
    #[error("fail-open: {0}; weir run --fail-closed bridges without the kernel bypass")]
    Tc(#[from] tc::TcError),
}

/// The program on `counters`' interface: redirect to `peer` while the heartbeat is stale.
pub fn program(map_fd: i32, peer_ifindex: i32, counters: usize) -> Vec<Insn> {
    let word = |i: usize| (i * 8) as i16;
    let [ld0, ld1] = Insn::map_value(7, map_fd, 0);
    let mut p = vec![
        Insn::mov_reg(6, 1),
        ld0,
        ld1,
        Insn::call(HELPER_KTIME_GET_NS),
        Insn::load64(1, 7, word(HEARTBEAT)),
        Insn::sub_reg(0, 1),
        Insn::load64(2, 7, word(TIMEOUT)),
        Insn::jsle_reg(0, 2, 8), // to `pass`
        Insn::mov_imm(1, 1),
        Insn::atomic_add64(7, word(counters), 1),
        Insn::load32(1, 6, 0), // __sk_buff.len: the frame, link header included
        Insn::atomic_add64(7, word(counters + 1), 1),
        Insn::mov_imm(1, peer_ifindex),
        Insn::mov_imm(2, 0),
        Insn::call(HELPER_REDIRECT),
        Insn::exit(),
    ];
    // pass:
    p.extend([Insn::mov_imm(0, TC_ACT_OK), Insn::exit()]);
    p
}

/// What a beat found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// The heartbeat stayed fresh: the kernel forwarded nothing.
    Fresh,
    /// It had gone stale: frames received up to this CLOCK_REALTIME instant (ns) may have
    /// been forwarded by the kernel.
    TookOver { before_realtime_ns: u64 },
}

/// The heartbeat's bookkeeping, without the map (the rule of the module comment).
#[derive(Clone, Debug)]
pub struct Heart {
    timeout_ns: u64,
    /// The heartbeat last stored (CLOCK_MONOTONIC ns).
    last: u64,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns, as read at the last beat.
    real_minus_mono: i128,
}

impl Heart {
    /// `stored` (CLOCK_MONOTONIC ns) was written; `real_minus_mono` is the difference of
    /// the clocks read after it.
    pub fn new(timeout: Duration, stored: u64, real_minus_mono: i128) -> Heart {
        Heart {
            timeout_ns: timeout.as_nanos(),
            last: stored,
            real_minus_mono,
        }
    }
    /// Frames received from this CLOCK_REALTIME instant (ns) on may have been redirected
    /// by the kernel unless a later beat was fresh: the last stored heartbeat plus the
    /// timeout, less the margin.
    pub fn fresh_before(&self) -> u64 {
        let stale = self.last as i128 + self.real_minus_mono + self.timeout_ns as i128;
        (stale - MARGIN_NS as i128).max(0) as u64
    }
    /// How often to beat: an eighth of the timeout.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns / 8)
    }
    /// A beat due at monotonic `now`?
    pub fn due(&self, now_mono: u64) -> bool {
        now_mono >= self.last + self.timeout_ns / 8
    }
    /// `stored` was written; `after_mono` and `after_real` were read after the store.
    pub fn beat(&mut self, stored: u64, after_mono: u64, after_real: u64) -> Beat {
        let gap = after_mono.saturating_sub(self.last);
        self.last = stored;
        self.real_minus_mono = after_real as i128 - after_mono as i128;
        if gap + MARGIN_NS > self.timeout_ns {
            Beat::TookOver {
                before_realtime_ns: after_real,
            }
        } else {
            Beat::Fresh
        }
    }
}

/// What the kernel forwarded for weir in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Forwarded {
    pub packets: u64,
    pub bytes: u64,
}

/// The installed bypass of a running weir.
pub struct Bypass {
    words: SharedWords,
    heart: Heart,
}

impl Bypass {
    /// Load the programs and put them on both interfaces' ingress, in place of any
    /// earlier weir's, with a fresh heartbeat.
    pub fn install(lan: &str, wan: &str, timeout: Duration) -> Result<Bypass, FailOpenError> {
        let words = SharedWords::create("weir_failopen", WORDS)?;
        let now = crate::clock::monotonic_ns();
        words
            .word(TIMEOUT)
            .store(timeout.as_nanos(), Ordering::SeqCst);
        words.word(HEARTBEAT).store(now, Ordering::SeqCst);
        let real_minus_mono =
            crate::clock::realtime_ns() as i128 - crate::clock::monotonic_ns() as i128;
        let (lan_ix, wan_ix) = (tc::ifindex(lan)?, tc::ifindex(wan)?);
        for (iface, peer, counters) in [(lan, wan_ix, LAN_COUNTERS), (wan, lan_ix, WAN_COUNTERS)] {
            let prog = bpf::load_program(
                "weir_failopen",
                bpf::PROG_TYPE_SCHED_CLS,
                &program(words.fd(), peer, counters),
            )?;
            tc::ensure_clsact(iface)?;
            use std::os::fd::AsRawFd;
            tc::replace_bpf_filter(iface, SLOT, prog.as_raw_fd(), NAME)?;
        }
        Ok(Bypass {
            words,
            heart: Heart::new(timeout, now, real_minus_mono),
        })
    }

    /// Frames received from this CLOCK_REALTIME instant (ns) on must wait for the next
    /// beat ([`Heart::fresh_before`]).
    pub fn fresh_before(&self) -> u64 {
        self.heart.fresh_before()
    }

    /// How often the loop must beat (it wakes at least this often).
    pub fn interval(&self) -> Duration {
        self.heart.interval()
    }

    /// Beat if one is due at monotonic `now_mono`.
    pub fn beat(&mut self, now_mono: u64) -> Option<Beat> {
        self.beat_for(now_mono, now_mono)
    }

    /// Beat, if one is due at `now_mono`, for a loop last alive at `alive_mono` (the
    /// supervisor of workers beats for the worker that turned least recently).
    /// While that loop has not turned again (`alive_mono` not past the last beat's)
    /// nothing is stored: the heartbeat goes stale once, and the hand-over is reported
    /// once, when the loop is back.
    pub fn beat_for(&mut self, alive_mono: u64, now_mono: u64) -> Option<Beat> {
        if !self.heart.due(now_mono) || alive_mono <= self.heart.last {
            return None;
        }
        let now_mono = alive_mono.min(now_mono);
        self.words.word(HEARTBEAT).store(now_mono, Ordering::SeqCst);
        let after_mono = crate::clock::monotonic_ns();
        let after_real = crate::clock::realtime_ns();
        Some(self.heart.beat(now_mono, after_mono, after_real))
    }

    /// What the kernel has forwarded: (lan → wan, wan → lan).
    pub fn forwarded(&self) -> (Forwarded, Forwarded) {
        let read = |i: usize| Forwarded {
            packets: self.words.word(i).load(Ordering::Relaxed),
            bytes: self.words.word(i + 1).load(Ordering::Relaxed),
        };
        (read(LAN_COUNTERS), read(WAN_COUNTERS))
    }

    /// A clean stop: the kernel forwards from now on.
    pub fn hand_to_kernel(&mut self) {
        self.words.word(HEARTBEAT).store(0, Ordering::SeqCst);
    }
}

/// Whatever ends weir (an error, a panic unwinding) hands the link to the kernel at once
/// rather than after the timeout.
impl Drop for Bypass {
    fn drop(&mut self) {
        self.hand_to_kernel();
    }
}

/// Fail-closed: remove weir's filters from the interfaces (an earlier weir's bypass).
/// The interfaces that had one.
pub fn remove(ifaces: &[&str]) -> Result<Vec<String>, FailOpenError> {
    let mut had = Vec::new();
    for &i in ifaces {
        if tc::delete_bpf_filter(i, SLOT)? {
            had.push(i.to_string());
        }
    }
    Ok(had)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Timeout 100 ms: beats every 12.5 ms; a gap of 98.9 ms is fresh, one of 99.1 ms
    /// (within the 1 ms margin of the timeout) is a take-over at the instant read after
    /// the store.
    #[test]
    fn the_stale_rule() {
        let mut h = Heart::new(Duration::from_millis(100), 1000 * MS, 0);
        assert_eq!(h.interval(), Duration::from_micros(12_500));
        assert!(!h.due(1000 * MS + 12 * MS));
        assert!(h.due(1000 * MS + 12_500_000));
        assert_eq!(h.beat(1012 * MS, 1012 * MS + 10, 7), Beat::Fresh);
        // the gap counts from the stored heartbeat to the clock read after the store
        assert_eq!(h.beat(1110 * MS, 1110 * MS + 900_000, 8), Beat::Fresh);
        assert_eq!(
            h.beat(1200 * MS, 1209 * MS + 100_001, 9),
            Beat::TookOver {
                before_realtime_ns: 9
            }
        );
        // after a take-over the next beat on time is fresh again
        assert_eq!(h.beat(1210 * MS, 1210 * MS, 10), Beat::Fresh);
    }

    /// A stall long enough to cross the timeout (a stopped process) is a take-over.
    #[test]
    fn a_stopped_process_takes_over() {
        let mut h = Heart::new(Duration::from_millis(100), 0, 0);
        assert_eq!(h.beat(5 * MS, 5 * MS, 1), Beat::Fresh);
        assert_eq!(
            h.beat(3000 * MS, 3000 * MS, 2),
            Beat::TookOver {
                before_realtime_ns: 2
            }
        );
    }

    /// Timeout 100 ms, heartbeat stored at 1000 ms monotonic with the realtime clock
    /// 5 s ahead: frames from 6099 ms realtime on (1000 + 5000 + 100 − the 1 ms margin)
    /// wait for a beat; a beat at or after such a frame's arrival is a take-over that
    /// skips it; a fresh beat moves the instant on.
    #[test]
    fn frames_past_the_fresh_instant_wait_for_the_beat_that_skips_them() {
        let mut h = Heart::new(Duration::from_millis(100), 1000 * MS, 5000 * MS as i128);
        assert_eq!(h.fresh_before(), 6099 * MS);
        // a frame that arrived at 6099 ms realtime = 1099 ms monotonic; the beat 1 µs after
        let after = 1099 * MS + 1000;
        match h.beat(after, after, after + 5000 * MS) {
            Beat::TookOver { before_realtime_ns } => assert!(before_realtime_ns > 6099 * MS),
            Beat::Fresh => panic!("a beat after a held frame must take over"),
        }
        assert_eq!(h.fresh_before(), 6198 * MS + 1000);
        assert_eq!(
            h.beat(1110 * MS, 1110 * MS + 10, 6110 * MS + 10),
            Beat::Fresh
        );
        assert_eq!(h.fresh_before(), 6209 * MS);
    }

    proptest::proptest! {
        /// The rule that makes a hand-over duplicate-free: any frame at or past the
        /// fresh instant, read before a beat that comes after it (by 1 ns at least), is
        /// skipped by that beat.
        #[test]
        fn a_held_frame_is_always_skipped(
            timeout_ms in 20u64..2000,
            last in 0u64..1_000_000_000_000,
            offset in -1_000_000_000_000i128..1_000_000_000_000_000_000,
            past in 0u64..10_000_000_000,
            beat_later in 1u64..1_000_000_000,
        ) {
            let mut h = Heart::new(Duration::from_millis(timeout_ms), last, offset);
            let frame_real = h.fresh_before() + past;
            let frame_mono = (frame_real as i128 - offset) as u64;
            let after_mono = frame_mono + beat_later;
            let after_real = (after_mono as i128 + offset) as u64;
            match h.beat(after_mono, after_mono, after_real) {
                Beat::TookOver { before_realtime_ns } => {
                    proptest::prop_assert!(frame_real < before_realtime_ns)
                }
                Beat::Fresh => proptest::prop_assert!(false, "fresh after a held frame"),
            }
        }
    }

    /// The program: the jump lands on `pass`, the counters are the direction's, the
    /// map's address is loaded into r7.
    #[test]
    fn program_shape() {
        let p = program(42, 7, WAN_COUNTERS);
        assert_eq!(p.len(), 18);
        let jump = p.iter().position(|i| i.code == 0xdd).unwrap();
        let pass = jump + 1 + p[jump].off as usize;
        assert_eq!((p[pass].code, p[pass].imm), (0xb7, TC_ACT_OK));
        assert_eq!(p[pass + 1].code, 0x95);
        assert_eq!((p[1].code, p[1].imm, p[1].regs), (0x18, 42, 0x27));
        let adds: Vec<i16> = p.iter().filter(|i| i.code == 0xdb).map(|i| i.off).collect();
        assert_eq!(adds, vec![32, 40]);
        assert!(p
            .iter()
            .any(|i| i.code == 0xb7 && i.imm == 7 && i.regs == 1));
    }
}
