//! The property test: random ACK streams of a receiver through a queue that applies the
//! filter on every arrival (each arrival may remove one queued packet), compared with the
//! same queue without the filter, delivering one packet per tick from each.
//!
//! The stream: cumulative ACKs non-decreasing in random steps (often repeated: duplicate
//! ACKs), up to three random SACK blocks (sometimes a D-SACK below the ACK), random
//! windows under a fixed scale from a receiver that never moves its window's right edge
//! back (RFC 9293 §3.8.6.2.2), ECE switching on and off, CWR now and then, timestamps
//! that mostly grow (sometimes an older one: reordering), now and then a data segment
//! (with or without PSH) or an MD5 or unknown option; sequence numbers start anywhere in the 32-bit space
//! (so they wrap); IPv4 or IPv6; one connection, or two sharing the queue.
//!
//! The sender's view of a delivered stream: the highest cumulative ACK; what it knows the
//! receiver holds (below the cumulative ACK, plus every SACKed range: the scoreboard);
//! the window per RFC 9293 (SND.WND taken from a segment whose SEQ/ACK are not older than
//! the last update's) and its right edge with the scale; the highest TSval and TSecr; and
//! the history of ECE/CWR bits with repeats collapsed (every switch of ECE on or off,
//! every CWR run). Properties, exactly:
//! 1. the delivered packets are the arrivals in order minus the dropped ones; only pure
//!    ACKs of the trigger's connection are dropped, never the last arrival;
//! 2. every dropped ACK `A` is covered by the delivered packet `D` its information went
//!    to (its trigger, or that one's trigger if it was dropped too): `D` is later, of the
//!    same connection, its cumulative ACK is not below `A`'s, each SACK block of `A` lies
//!    inside one block of `D`, `A` has no D-SACK, `D`'s TSval and TSecr are not below
//!    `A`'s;
//! 3. one connection, after every tick: the filtered sender's cumulative ACK and window
//!    right edge are at least the unfiltered one's; its ECE/CWR history equals that of
//!    all arrivals up to its last delivered packet, and the unfiltered history is a prefix
//!    of it; what it knows of the receiver's data, and its highest timestamps, include
//!    the unfiltered sender's, except for ACKs dropped whose covering packet `D` is not
//!    delivered yet (CAKE delays that information to `D`, it does not lose it);
//! 4. after everything is delivered, both senders' views are equal (per connection).

use super::*;
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

/// Random draws for one arrival, turned into a segment by [`Receiver::next`].
#[derive(Clone, Debug)]
struct Draw {
    conn: bool,
    step: u16,
    data: u8,
    ece: u8,
    cwr: u8,
    ts: (u8, u8),
    window: (bool, u16),
    sack: Vec<(u16, u16)>,
    dsack: u8,
    opt: u8,
}

#[derive(Clone, Debug)]
enum Ev {
    Arrive(Draw),
    Drain(u8),
}

fn draw() -> impl Strategy<Value = Draw> {
    (
        any::<bool>(),
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<(u8, u8)>(),
        any::<(bool, u16)>(),
        proptest::collection::vec(any::<(u16, u16)>(), 0..=3),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(
            |(conn, step, data, ece, cwr, ts, window, sack, dsack, opt)| Draw {
                conn,
                step,
                data,
                ece,
                cwr,
                ts,
                window,
                sack,
                dsack,
                opt,
            },
        )
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![3 => draw().prop_map(Ev::Arrive), 1 => (0u8..4).prop_map(Ev::Drain)]
}

/// Sequence-space values are kept relative to `BASE` in the model (so plain comparisons
/// work there), and written as `isn + value` on the wire.
const BASE: u32 = 100_000;

/// A segment of the stream, in relative numbers.
#[derive(Clone, Debug)]
struct Arr {
    conn: usize,
    seq: u32,
    ack: u32,
    window: u16,
    ece: bool,
    cwr: bool,
    ts: Option<(u32, u32)>,
    sack: Vec<(u32, u32)>,
    data: usize,
    /// Option kind written besides timestamps and SACK (19 = MD5, 30 = unknown), or 0.
    opt: u8,
    frame: Vec<u8>,
}

impl Arr {
    fn pure(&self) -> bool {
        self.data == 0
    }
    fn ts_or_zero(&self) -> (u32, u32) {
        self.ts.unwrap_or((0, 0))
    }
}

/// One connection's receiver: the state its next ACK grows from.
#[derive(Clone, Debug)]
struct Receiver {
    seq: u32,
    ack: u32,
    edge: u64,
    ece: bool,
    clock: (u32, u32),
}

impl Receiver {
    fn new() -> Self {
        Receiver {
            seq: BASE,
            ack: BASE,
            edge: 0,
            ece: false,
            clock: (1000, 1000),
        }
    }

    fn next(&mut self, conn: usize, d: &Draw, case: &Case) -> Arr {
        let step = if d.step.is_multiple_of(3) {
            0
        } else {
            u32::from(d.step % 400)
        };
        self.ack += step;
        let data = if d.data < 25 {
            1 + usize::from(d.data) * 4
        } else {
            0
        };
        let seq = self.seq;
        self.seq += data as u32;
        if d.ece < 40 {
            self.ece = !self.ece;
        }
        let cwr = d.cwr < 20;
        let ts = case.ts.then(|| {
            self.clock.0 += u32::from(d.ts.0 % 4);
            self.clock.1 += u32::from(d.ts.1 % 4);
            let back = |x: u8| u32::from(x / 64 == 0) * u32::from(x % 3);
            (self.clock.0 - back(d.ts.0), self.clock.1 - back(d.ts.1))
        });
        // the window: kept or new, raised so the right edge never moves back
        let scale = case.scale;
        let mut window = if d.window.0 { d.window.1 } else { 1000 };
        let edge = |w: u16| u64::from(self.ack) + (u64::from(w) << scale);
        if edge(window) < self.edge {
            let need = (self.edge - u64::from(self.ack)).div_ceil(1 << scale);
            window = need.min(65535) as u16;
        }
        self.edge = self.edge.max(edge(window));
        let mut sack: Vec<(u32, u32)> = d
            .sack
            .iter()
            .map(|&(off, len)| {
                let start = self.ack + 1 + u32::from(off % 2000);
                (start, start + 1 + u32::from(len % 500))
            })
            .collect();
        if d.dsack < 20 {
            if let Some(first) = sack.first_mut() {
                let start = self.ack - 1 - u32::from(d.dsack) * 10;
                *first = (start, start + 50);
            }
        }
        let opt = match d.opt {
            0..=12 => 19,
            13..=20 => 30,
            _ => 0,
        };
        // fit the options in 40 bytes: NOP NOP TS (12), MD5 18 or unknown 4, NOP NOP SACK
        let fixed = if case.ts { 12 } else { 0 }
            + match opt {
                19 => 18,
                30 => 4,
                _ => 0,
            };
        while !sack.is_empty() && fixed + 4 + 8 * sack.len() > 40 {
            sack.pop();
        }
        let mut a = Arr {
            conn,
            seq,
            ack: self.ack,
            window,
            ece: self.ece,
            cwr,
            ts,
            sack,
            data,
            opt,
            frame: vec![],
        };
        a.frame = case.frame(&a);
        a
    }
}

#[derive(Clone, Debug)]
struct Case {
    mode: AckFilterMode,
    v6: bool,
    ts: bool,
    scale: u8,
    isn: u32,
}

impl Case {
    fn frame(&self, a: &Arr) -> Vec<u8> {
        let abs = |x: u32| self.isn.wrapping_add(x);
        let mut flags = ACK;
        if a.ece {
            flags |= ECE;
        }
        if a.cwr {
            flags |= CWR;
        }
        if a.data % 8 == 1 {
            // PSH on some data segments (a stack sets it on a write's last one)
            flags |= TcpFlags::PSH;
        }
        let mut extra = vec![];
        match a.opt {
            0 => {}
            kind => extra.push(TcpOption::Unknown {
                kind,
                len: if kind == 19 { 18 } else { 4 },
            }),
        }
        let blocks: Vec<(u32, u32)> = a.sack.iter().map(|&(s, e)| (abs(s), abs(e))).collect();
        let seg = Seg {
            v6: self.v6,
            src_port: 80 + a.conn as u16,
            seq: abs(a.seq),
            ack: abs(a.ack),
            flags,
            window: a.window,
            ts: a.ts,
            sack: blocks,
            extra,
            data: a.data,
            ..Seg::default()
        };
        seg.frame()
    }
}

/// Sorted, disjoint, non-adjacent half-open ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Ranges(Vec<(u32, u32)>);

impl Ranges {
    fn add(&mut self, (s, e): (u32, u32)) {
        if s >= e {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let (mut s, mut e) = (s, e);
        for &(a, b) in &self.0 {
            if b < s || a > e {
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        out.push((s, e));
        out.sort_unstable();
        self.0 = out;
    }

    fn covers(&self, o: &Ranges) -> bool {
        o.0.iter()
            .all(|&(s, e)| self.0.iter().any(|&(a, b)| a <= s && e <= b))
    }
}

/// What a sender knows after the delivered segments `segs` (in order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct View {
    cum: u32,
    known: Ranges,
    /// (SND.WL1, SND.WL2, SND.WND) per RFC 9293.
    wnd: Option<(u32, u32, u16)>,
    ts: (u32, u32),
    /// ECE/CWR bits, repeats collapsed.
    ecn: Vec<(bool, bool)>,
}

impl View {
    fn of<'a>(segs: impl IntoIterator<Item = &'a Arr>) -> View {
        let mut v = View::default();
        for a in segs {
            v.cum = v.cum.max(a.ack);
            v.known.add((0, a.ack));
            for &b in &a.sack {
                v.known.add(b);
            }
            let update = match v.wnd {
                None => true,
                Some((wl1, wl2, _)) => wl1 < a.seq || (wl1 == a.seq && wl2 <= a.ack),
            };
            if update {
                v.wnd = Some((a.seq, a.ack, a.window));
            }
            let t = a.ts_or_zero();
            v.ts = (v.ts.0.max(t.0), v.ts.1.max(t.1));
            if v.ecn.last() != Some(&(a.ece, a.cwr)) {
                v.ecn.push((a.ece, a.cwr));
            }
        }
        v
    }

    fn edge(&self, scale: u8) -> u64 {
        self.wnd
            .map_or(0, |(_, ack, w)| u64::from(ack) + (u64::from(w) << scale))
    }
}

/// The run: arrivals, what each queue delivered, and which arrival dropped which.
struct Outcome {
    arr: Vec<Arr>,
    filtered: Vec<usize>,
    unfiltered: Vec<usize>,
    dropped_by: HashMap<usize, usize>,
}

impl Outcome {
    /// Where the information of `i` went: `i` itself, or its trigger's, as of now.
    fn cover(&self, mut i: usize) -> usize {
        while let Some(&t) = self.dropped_by.get(&i) {
            i = t;
        }
        i
    }

    fn conn<'a>(&'a self, ids: &'a [usize], c: usize) -> impl Iterator<Item = &'a Arr> + 'a {
        ids.iter()
            .map(|&i| &self.arr[i])
            .filter(move |a| a.conn == c)
    }
}

fn simulate(case: &Case, conns: usize, events: &[Ev]) -> Result<Outcome, TestCaseError> {
    let mut rx = vec![Receiver::new(); conns];
    let mut o = Outcome {
        arr: vec![],
        filtered: vec![],
        unfiltered: vec![],
        dropped_by: HashMap::new(),
    };
    let (mut qf, mut qu) = (VecDeque::<usize>::new(), VecDeque::<usize>::new());
    let tick = |o: &mut Outcome, qf: &mut VecDeque<usize>, qu: &mut VecDeque<usize>| {
        if let Some(i) = qf.pop_front() {
            o.filtered.push(i);
        }
        if let Some(i) = qu.pop_front() {
            o.unfiltered.push(i);
        }
        if conns == 1 {
            check_tick(case, o)
        } else {
            Ok(())
        }
    };
    for e in events {
        match e {
            Ev::Arrive(d) => {
                let c = usize::from(d.conn) % conns;
                let id = o.arr.len();
                o.arr.push(rx[c].next(c, d, case));
                qu.push_back(id);
                let new = &o.arr[id].frame;
                let found = Trigger::of(new).and_then(|t| {
                    t.find_redundant(
                        case.mode,
                        qf.iter().map(|&i| (i, o.arr[i].frame.as_slice())),
                    )
                });
                qf.push_back(id);
                if let Some(d) = found {
                    let at = qf.iter().position(|&i| i == d);
                    prop_assert!(
                        at.is_some_and(|p| p + 1 < qf.len()),
                        "dropped {d}: not queued before the new one"
                    );
                    qf.remove(at.unwrap());
                    o.dropped_by.insert(d, id);
                }
            }
            Ev::Drain(k) => {
                for _ in 0..*k {
                    tick(&mut o, &mut qf, &mut qu)?;
                }
            }
        }
    }
    while !qf.is_empty() || !qu.is_empty() {
        tick(&mut o, &mut qf, &mut qu)?;
    }
    Ok(o)
}

/// Property 3, after one tick (one connection).
fn check_tick(case: &Case, o: &Outcome) -> Result<(), TestCaseError> {
    let f = View::of(o.filtered.iter().map(|&i| &o.arr[i]));
    let u = View::of(o.unfiltered.iter().map(|&i| &o.arr[i]));
    prop_assert!(f.cum >= u.cum, "cumulative ACK {} < {}", f.cum, u.cum);
    prop_assert!(f.edge(case.scale) >= u.edge(case.scale), "window edge");
    let last = o.filtered.last().map_or(0, |&i| i + 1);
    prop_assert_eq!(&f.ecn, &View::of(&o.arr[..last]).ecn, "ECE/CWR history");
    prop_assert!(f.ecn.starts_with(&u.ecn), "{:?} then {:?}", u.ecn, f.ecn);
    // the unfiltered sender's information, less what waits in a queued covering packet
    let delivered: std::collections::HashSet<usize> = o.filtered.iter().copied().collect();
    let settled = o
        .unfiltered
        .iter()
        .filter(|&&i| delivered.contains(&o.cover(i)))
        .map(|&i| &o.arr[i]);
    let s = View::of(settled);
    prop_assert!(
        f.known.covers(&s.known),
        "{:?} misses {:?}",
        f.known,
        s.known
    );
    prop_assert!(f.ts.0 >= s.ts.0 && f.ts.1 >= s.ts.1, "timestamps");
    Ok(())
}

fn check_outcome(case: &Case, conns: usize, o: &Outcome) -> Result<(), TestCaseError> {
    let n = o.arr.len();
    // 1. the filtered delivery is the arrivals minus the dropped ones, in order
    prop_assert_eq!(&o.unfiltered, &(0..n).collect::<Vec<_>>());
    let kept: Vec<usize> = (0..n).filter(|i| !o.dropped_by.contains_key(i)).collect();
    prop_assert_eq!(&o.filtered, &kept);
    prop_assert!(n == 0 || !o.dropped_by.contains_key(&(n - 1)));
    if case.mode == AckFilterMode::Off {
        prop_assert!(o.dropped_by.is_empty());
    }
    for (&a, &t) in &o.dropped_by {
        let (a_, t_) = (&o.arr[a], &o.arr[t]);
        prop_assert!(a_.pure() && a_.opt != 30, "dropped {a_:?}");
        prop_assert!(a < t && a_.conn == t_.conn);
        // 2. covered by the packet its information went to
        let d = &o.arr[o.cover(a)];
        prop_assert!(o.cover(a) > a && d.conn == a_.conn);
        prop_assert!(d.ack >= a_.ack);
        for &(s, e) in &a_.sack {
            prop_assert!(s >= a_.ack, "D-SACK dropped: {a_:?}");
            prop_assert!(
                d.sack.iter().any(|&(x, y)| x <= s && e <= y),
                "{a_:?} not covered by {d:?}"
            );
        }
        let (ta, td) = (a_.ts_or_zero(), d.ts_or_zero());
        prop_assert!(ta.0 <= td.0 && ta.1 <= td.1, "timestamps {ta:?} {td:?}");
    }
    // 4. in the end, the same views
    for c in 0..conns {
        let f = View::of(o.conn(&o.filtered, c));
        let u = View::of(o.conn(&o.unfiltered, c));
        prop_assert_eq!(f, u);
    }
    Ok(())
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..3usize,
        any::<bool>(),
        any::<bool>(),
        0u8..=7,
        any::<u32>(),
    )
        .prop_map(|(m, v6, ts, scale, isn)| Case {
            mode: AckFilterMode::ALL[m],
            v6,
            ts,
            scale,
            isn,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn one_connection(case in case(), events in proptest::collection::vec(ev(), 1..80)) {
        let o = simulate(&case, 1, &events)?;
        check_outcome(&case, 1, &o)?;
    }

    #[test]
    fn two_connections_in_one_queue(
        case in case(),
        events in proptest::collection::vec(ev(), 1..80),
    ) {
        let o = simulate(&case, 2, &events)?;
        check_outcome(&case, 2, &o)?;
    }
}

/// The filter does drop in these streams (the properties are not met vacuously): over a
/// fixed stream of growing ACKs queued faster than drained, both modes drop most.
#[test]
fn streams_are_filtered() {
    let d = |step| Draw {
        conn: false,
        step,
        data: 255,
        ece: 255,
        cwr: 255,
        ts: (1, 1),
        window: (false, 0),
        sack: vec![],
        dsack: 255,
        opt: 255,
    };
    let mut events = vec![];
    for k in 0..30u16 {
        events.push(Ev::Arrive(d(1 + 3 * k)));
        if k % 5 == 4 {
            events.push(Ev::Drain(1));
        }
    }
    for (mode, want) in [(AckFilterMode::On, 23), (AckFilterMode::Aggressive, 24)] {
        let case = Case {
            mode,
            v6: false,
            ts: true,
            scale: 0,
            isn: u32::MAX - 1000,
        };
        let o = simulate(&case, 1, &events).unwrap();
        check_outcome(&case, 1, &o).unwrap();
        assert_eq!(o.dropped_by.len(), want, "{mode:?}");
    }
}
