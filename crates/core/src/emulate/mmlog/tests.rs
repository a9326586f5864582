use super::*;
use crate::pool::{PktId, Pool};
use crate::qdisc::{Ctx, Qdisc};
use crate::rng::Rng;

const MS_NS: u64 = 1_000_000;

fn head() -> LogHead {
    LogHead {
        link: "Uplink".into(),
        source: "up.trace".into(),
        path: "up.log".into(),
        command_line: "weir emu --up up.trace".into(),
        zero_ns: 0,
        init_unix_ms: 1_700_000_000_000,
    }
}

/// Frames of `len` bytes offered at the given ns to a logging link of `cfg`, drained at
/// every wake-up until `end` ns; the log written at `end` in one final flush.
fn log_of(cfg: EmuConfig, at: &[u64], len: u32, end: u64) -> String {
    let mut l = EmuLink::new(cfg).unwrap();
    l.set_logging(true);
    crate::emulate::link::tests::drive(&mut l, at, len, end);
    let mut w = MmLogWriter::new(head());
    l.take_log(Instant(end), w.pending());
    let mut out = String::new();
    w.flush(&l, Instant(end), true, &mut out);
    out
}

fn body(log: &str) -> Vec<&str> {
    log.lines().filter(|l| !l.starts_with('#')).collect()
}

/// The trace 1, 1, 3 ms from the first frame (at 5 ms): three full-size frames queued at
/// 5 ms leave at 6, 6 and 8 ms (1, 1 and 3 ms in the link); the opportunities of the
/// next period come at 9, 9 and 11 ms, the log ends at 10 ms. `mm-link` writes the same.
#[test]
fn a_trace_link_logs_as_mm_link() {
    let cfg = EmuConfig {
        capacity: Some(Capacity::parse_trace("1\n1\n3\n").unwrap()),
        ..EmuConfig::default()
    };
    let log = log_of(cfg, &[5 * MS_NS; 3], 1514, 10 * MS_NS);
    let header: Vec<&str> = log.lines().take(5).collect();
    assert_eq!(
        header,
        vec![
            "# mahimahi mm-link (Uplink) [up.trace] > up.log",
            "# command line: weir emu --up up.trace",
            "# queue: droptail [packets=1000]",
            "# init timestamp: 1700000000000",
            "# base timestamp: 5",
        ]
    );
    // no queue limit with a trace and no delay? the default is 1000 packets
    assert_eq!(
        body(&log),
        vec![
            "5 + 1500",
            "5 + 1500",
            "5 + 1500",
            "6 # 1500",
            "6 # 1500",
            "6 - 1500 1",
            "6 - 1500 1",
            "8 # 1500",
            "8 - 1500 3",
            "9 # 1500",
            "9 # 1500",
        ]
    );
}

/// A fixed rate of 12 Mbit/s carries 1500 bytes a ms: capacity lines every ms from the
/// first event; a 3 Mbit/s rate 375 bytes a ms; a 1 Mbit/s rate 125. A drop-tail queue of
/// one packet: of three 1514-byte frames at 0 (1.009 ms each at 12 Mbit/s), the first is
/// sent, the second waits, the third is dropped (`d`).
#[test]
fn a_rate_link_logs_its_capacity_and_drops() {
    let cfg = EmuConfig {
        rate_bps: Some(12_000_000),
        limit_packets: Some(1),
        ..EmuConfig::default()
    };
    let log = log_of(cfg, &[0; 3], 1514, 3 * MS_NS);
    assert!(log.contains("# queue: droptail [packets=1]"), "{log}");
    assert_eq!(
        body(&log),
        vec![
            "0 # 1500",
            "0 + 1514",
            "0 + 1514",
            "0 + 1514",
            "0 d 1 1514",
            "1 # 1500",
            "1 - 1514 1",
            "2 # 1500",
            "2 - 1514 2",
        ]
    );
    let slow = EmuConfig {
        rate_bps: Some(1_000_000),
        ..EmuConfig::default()
    };
    let log = log_of(slow, &[0], 100, 3 * MS_NS);
    assert_eq!(
        body(&log),
        vec!["0 # 125", "0 + 100", "0 - 100 0", "1 # 125", "2 # 125"]
    );
}

/// A trace played once has no capacity after its last opportunity, and a frame that
/// needs one never leaves (no departure line).
#[test]
fn a_trace_played_once_logs_one_period() {
    let cfg = EmuConfig {
        capacity: Some(Capacity::parse_trace("1\n2\n").unwrap()),
        once: true,
        ..EmuConfig::default()
    };
    let log = log_of(cfg, &[0; 3], 1514, 10 * MS_NS);
    assert_eq!(
        body(&log),
        vec![
            "0 + 1500",
            "0 + 1500",
            "0 + 1500",
            "1 # 1500",
            "1 - 1500 1",
            "2 # 1500",
            "2 - 1500 2",
        ]
    );
}

/// Flushes in steps write every line once, in time order, holding back the last
/// [`HOLD_BACK_NS`]; an event recorded after its time was written goes at the horizon.
#[test]
fn flushes_in_steps_write_each_line_once_in_order() {
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(cfg).unwrap();
    let mut w = MmLogWriter::new(head());
    let mut out = String::new();
    w.flush(&l, Instant(0), false, &mut out);
    assert_eq!(out, "", "no base yet: nothing written");
    w.pending().push(LinkEvent::Arrival {
        ns: 2 * MS_NS,
        bytes: 100,
    });
    w.flush(&l, Instant(30 * MS_NS), false, &mut out);
    assert!(out.contains("# base timestamp: 2\n"), "{out}");
    // capacity up to 10 ms (30 − 20 held back): ms 2..=9, 1000 bytes each
    assert_eq!(body(&out).len(), 1 + 8);
    // a late arrival dated 5 ms goes at 10 ms
    w.pending().push(LinkEvent::Arrival {
        ns: 5 * MS_NS,
        bytes: 7,
    });
    l.set_logging(false);
    w.flush(&l, Instant(31 * MS_NS), false, &mut out);
    assert!(body(&out).contains(&"10 + 7"), "{out}");
    let times: Vec<u64> = body(&out)
        .iter()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

/// Events older than the clock's zero (frames the ring held before weir's clock started):
/// the log counts from the base instead, and no departure comes before it.
#[test]
fn events_before_the_clock_zero_move_the_zero() {
    let cfg = EmuConfig {
        rate_bps: Some(8_000_000),
        ..EmuConfig::default()
    };
    let l = EmuLink::new(cfg).unwrap();
    let mut w = MmLogWriter::new(LogHead {
        zero_ns: 10 * MS_NS,
        init_unix_ms: 1_000_010,
        ..head()
    });
    w.pending().push(LinkEvent::Arrival {
        ns: 8 * MS_NS + 5,
        bytes: 100,
    });
    w.pending().push(LinkEvent::Departure {
        ns: 9 * MS_NS,
        bytes: 100,
        delay_ns: 2 * MS_NS,
    });
    let mut out = String::new();
    w.flush(&l, Instant(12 * MS_NS), true, &mut out);
    assert!(
        out.contains("# init timestamp: 1000008\n# base timestamp: 0\n"),
        "{out}"
    );
    let b = body(&out);
    assert!(b.contains(&"0 + 100"), "{out}");
    assert!(
        b.contains(&"1 - 100 1"),
        "arrival clamped to the base: {out}"
    );
}

/// A link whose capacity changes while it logs (`weir emu set --rate`, a reload): the
/// capacity lines start over from the new one at what was written — a trace's index is not
/// read as a millisecond — and one flush writes at most `MAX_CAPACITY_LINES`.
#[test]
fn a_capacity_change_restarts_the_capacity_lines() {
    let trace = EmuConfig {
        capacity: Some(Capacity::parse_trace("1\n2\n").unwrap()),
        ..EmuConfig::default()
    };
    let mut l = EmuLink::new(trace).unwrap();
    l.set_logging(true);
    let mut pool = Pool::new(8, 0);
    let mut rng = Rng::new(1);
    let mut dropped = Vec::new();
    let mut cx = Ctx::new(Instant(0), &mut pool, &mut rng, &mut dropped);
    let id = cx.pool.alloc().unwrap();
    cx.pool.meta_mut(id).len = 1514;
    l.enqueue(id, &mut cx).unwrap();
    let mut w = MmLogWriter::new(head());
    let mut out = String::new();
    l.take_log(Instant(30 * MS_NS), w.pending());
    w.flush(&l, Instant(30 * MS_NS), false, &mut out);
    let before = body(&out).len();
    // 12 Mbit/s from now on: 1500 bytes a ms from the 10 ms already written
    l.reconfigure(EmuConfig {
        rate_bps: Some(12_000_000),
        ..EmuConfig::default()
    })
    .unwrap();
    w.flush(&l, Instant(40 * MS_NS), false, &mut out);
    let new: Vec<&str> = body(&out)[before..].to_vec();
    assert_eq!(new.len(), 10, "{out}");
    assert!(new.iter().all(|l| l.ends_with(" # 1500")), "{out}");
    assert_eq!(new[0], "10 # 1500");
    // a jump of a day writes no more than the cap
    let mut big = String::new();
    w.flush(&l, Instant(86_400_000 * MS_NS), false, &mut big);
    assert_eq!(body(&big).len() as u64, MAX_CAPACITY_LINES);
}

/// The queue descriptions `mm-link` prints.
#[test]
fn queues_are_described_as_mm_link_does() {
    let mut c = EmuConfig {
        rate_bps: Some(1_000_000),
        limit_packets: Some(100),
        limit_bytes: Some(150_000),
        ..EmuConfig::default()
    };
    assert_eq!(queue_desc(&c), "droptail [bytes=150000, packets=100]");
    c.queue_drop = QueueDrop::Head;
    c.limit_bytes = None;
    assert_eq!(queue_desc(&c), "drophead [packets=100]");
    assert_eq!(queue_desc(&EmuConfig::default()), "infinite");
    let _ = PktId(0);
}
