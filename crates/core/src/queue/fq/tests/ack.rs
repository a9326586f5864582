//! The ACK filter in the flow queue (`ack.rs`): a download's ACK stream behind a saturated
//! uplink against the same queue without the filter, SACK-carrying duplicates, the two
//! modes, colliding connections in one queue, data and ACKs mixed, frames that do not
//! parse, and a property test of random interleavings of two connections against a
//! model that applies the rules to each flow's queue.

use super::*;
use crate::tcp::ack_filter::tests::{ack, udp_frame, Seg};
use crate::tcp::ack_filter::{find_redundant, AckFilterMode};
use std::collections::HashMap;
use weir_wire::tcp::TcpFlags;

const OFF: AckFilterMode = AckFilterMode::Off;
const ON: AckFilterMode = AckFilterMode::On;
const AGGRESSIVE: AckFilterMode = AckFilterMode::Aggressive;
/// Frame slots large enough for a segment with 40 bytes of options and 200 of data.
const SLOT: usize = 320;

/// One arrival: its frame and, when it was built from one, its segment.
struct Arrival {
    frame: Vec<u8>,
    seg: Option<Seg>,
    flow: u64,
}

impl Arrival {
    /// ACK alone (ECE and CWR aside), no data.
    fn pure_ack(&self) -> bool {
        self.seg
            .as_ref()
            .is_some_and(|s| s.data == 0 && s.flags.bits() & !0xc0 == TcpFlags::ACK.bits())
    }
    fn conn(&self) -> Option<u16> {
        self.seg.as_ref().map(|s| s.src_port)
    }
}

/// A flow queue with the ACK filter wrapped in `Counted`, its packets tagged with the
/// index of their arrival; every call checks the counter identities, the queue's
/// invariants and that `ack_drops` is what `Counted` saw.
struct Link<A: Aqm> {
    b: Bench,
    q: Counted<Fq<A>>,
    /// The arrival index of each held packet.
    held: HashMap<PktId, usize>,
    arrivals: Vec<Arrival>,
    /// Arrival indices in the order they were sent.
    sent: Vec<usize>,
    /// (dropped, the arrival that dropped it), for the filter's drops.
    filtered: Vec<(usize, usize)>,
    /// Other drops (the AQM's).
    other: Vec<(usize, DropCause)>,
}

impl<A: Aqm> Link<A> {
    fn new(mode: AckFilterMode) -> Self {
        Self::with(FqConfig {
            ack_filter: mode,
            ..cfg(Isolation::Flow, AqmKind::None)
        })
    }

    fn with(c: FqConfig) -> Self {
        Link {
            b: Bench::with_slot(SLOT),
            q: Counted::new(Box::new(fq::<A>(c))),
            held: HashMap::new(),
            arrivals: Vec::new(),
            sent: Vec::new(),
            filtered: Vec::new(),
            other: Vec::new(),
        }
    }

    /// Segment `s` arrives in flow `flow`; returns the arrival the filter dropped.
    fn seg(&mut self, s: &Seg, flow: u64) -> Option<usize> {
        self.frame(s.frame(), Some(s.clone()), flow)
    }

    fn frame(&mut self, frame: Vec<u8>, seg: Option<Seg>, flow: u64) -> Option<usize> {
        let p = self.b.pool.alloc().expect("pool");
        let n = frame.len().min(self.b.pool.slot_size());
        self.b.pool.slot_mut(p)[..n].copy_from_slice(&frame[..n]);
        let m = self.b.pool.meta_mut(p);
        (m.len, m.flow, m.arrival) = (frame.len().max(1) as u32, flow, self.b.now);
        let k = self.arrivals.len();
        self.arrivals.push(Arrival { frame, seg, flow });
        self.held.insert(p, k);
        self.q
            .enqueue(p, &mut self.b.cx())
            .expect("no limit is reached");
        let dropped = self.collect(Some(k));
        assert!(dropped.len() <= 1, "one drop per arrival: {dropped:?}");
        self.check();
        dropped.first().copied()
    }

    /// Send one packet: its arrival index.
    fn serve(&mut self) -> Option<usize> {
        let p = self.q.dequeue(&mut self.b.cx());
        self.collect(None);
        let k = p.map(|p| {
            self.b.pool.free(p);
            self.held.remove(&p).expect("a held packet")
        });
        self.sent.extend(k);
        self.check();
        k
    }

    fn drain(&mut self) {
        while self.serve().is_some() {}
        assert!(self.held.is_empty());
    }

    /// Free the packets the queue dropped; the filter's, if `by` arrived now.
    fn collect(&mut self, by: Option<usize>) -> Vec<usize> {
        let mut filtered = vec![];
        for (p, cause) in std::mem::take(&mut self.b.dropped) {
            let k = self.held.remove(&p).expect("a held packet");
            self.b.pool.free(p);
            if cause == DropCause::AckFilter {
                let by = by.expect("the filter drops at an arrival only");
                self.filtered.push((k, by));
                filtered.push(k);
            } else {
                self.other.push((k, cause));
            }
        }
        filtered
    }

    fn check(&self) {
        self.q.check().unwrap();
        check(self.q.inner.as_ref());
        let s = self.q.aqm_stats().unwrap();
        assert_eq!(s.ack_drops, self.filtered.len() as u64);
        assert_eq!(
            self.q.stats.drops_by(DropCause::AckFilter).packets,
            s.ack_drops
        );
        // the filter drops a queued pure ACK of the arrival's connection, never the
        // arrival, never a data segment
        if let Some(&(k, by)) = self.filtered.last() {
            let (a, t) = (&self.arrivals[k], &self.arrivals[by]);
            assert!(k < by && a.pure_ack(), "{k} by {by}");
            assert_eq!((a.conn(), a.flow), (t.conn(), t.flow));
        }
    }

    /// The arrival indices the filter dropped, in order.
    fn dropped(&self) -> Vec<usize> {
        self.filtered.iter().map(|&(k, _)| k).collect()
    }

    /// The flow's packets held now, head to tail, as arrival indices.
    fn queue(&self, flow: u64) -> Vec<usize> {
        let q = self.q.inner.as_ref();
        let i = q.flows.iter().position(|f| {
            f.q.iter(&self.b.pool)
                .any(|p| self.arrivals[self.held[&p]].flow == flow)
        });
        i.map_or(vec![], |i| {
            q.flows[i]
                .q
                .iter(&self.b.pool)
                .map(|p| self.held[&p])
                .collect()
        })
    }

    /// The highest cumulative ACK among the first `n` sent packets (the sender's view).
    fn cum_ack(&self, n: usize) -> u32 {
        self.sent[..n]
            .iter()
            .filter_map(|&k| self.arrivals[k].seg.as_ref().map(|s| s.ack))
            .max()
            .unwrap_or(0)
    }
}

const MSS: u32 = 1448;
const FLOW: u64 = 0xf10;

/// A download's ACK stream: the receiver ACKs every second segment, with timestamps;
/// at ACKs 60-69 a loss: duplicate ACKs whose SACK block grows by two segments each, then
/// the retransmission is ACKed.
fn download(n: u32) -> Vec<Seg> {
    let mut out = vec![];
    let mut cum = 1000;
    for k in 0..n {
        let s = match k {
            60..=69 => {
                let hole = cum + MSS;
                ack(cum).sack(&[(hole, hole + (k - 59) * 2 * MSS)])
            }
            70 => {
                cum += 22 * MSS;
                ack(cum)
            }
            _ => {
                cum += 2 * MSS;
                ack(cum)
            }
        };
        out.push(s.ts(10 * k, 5 * k));
    }
    out
}

/// The ACK stream behind a saturated uplink (one ACK a tick, one packet sent every
/// third tick), with the filter and without: the filter drops older ACKs (counted), the
/// newest always stays and is sent last, the sender's cumulative ACK after the `n`-th
/// packet sent is never behind the unfiltered one's, and the filtered queue stays short.
#[test]
fn a_download_s_acks_behind_a_saturated_uplink() {
    let stream = download(300);
    // the run, and the most ACKs held at once without and with SACK blocks
    let run = |mode| {
        let mut l = Link::<NoAqm>::new(mode);
        let mut longest = [0, 0];
        for (t, s) in stream.iter().enumerate() {
            l.b.now = Instant(t as u64 * MS);
            let k = l.arrivals.len();
            l.seg(s, FLOW);
            let held = l.queue(FLOW);
            assert_eq!(held.last(), Some(&k), "the newest ACK stays");
            let sacks = held.iter().filter(|&&j| !stream[j].sack.is_empty()).count();
            longest[0] = longest[0].max(held.len() - sacks);
            longest[1] = longest[1].max(sacks);
            if t % 3 == 2 {
                l.serve().unwrap();
            }
        }
        l.drain();
        (l, longest)
    };
    let (off, longest_off) = run(OFF);
    assert_eq!((off.sent.len(), off.filtered.len()), (300, 0));
    // (201 held at the end; the 10 duplicates with SACK were held together before)
    assert_eq!(longest_off, [201, 10]);
    for mode in [ON, AGGRESSIVE] {
        let (l, longest) = run(mode);
        let drops = l.filtered.len();
        assert_eq!(drops + l.sent.len(), 300, "{mode:?}");
        assert!(drops > 150, "{mode:?}: {drops} drops");
        assert_eq!(l.sent.last(), Some(&299), "the last ACK is sent last");
        for n in 1..=l.sent.len() {
            assert!(l.cum_ack(n) >= off.cum_ack(n), "{mode:?}: {n}");
        }
        assert_eq!(l.cum_ack(l.sent.len()), off.cum_ack(300));
        assert!(l.sent.windows(2).all(|w| w[0] < w[1]));
        // `on` keeps one older ACK besides the newest, `aggressive` none (each SACK
        // block of the loss covers the one before); the duplicates with SACK wait beside
        // them once the hole is filled (the newer ACKs have no SACK: CAKE keeps them)
        let cap = if mode == ON { 2 } else { 1 };
        assert_eq!(longest, [cap, cap], "{mode:?}");
    }
}

/// Duplicate ACKs during a loss: each one whose SACK blocks a newer one covers (with
/// more bytes) goes; one whose block fell off the newer ones' three, or with SACK
/// blocks when the newer ACK has none (the hole filled), or a D-SACK, stays and is sent.
/// The drops worked out by hand with CAKE's rules.
#[test]
fn sack_carrying_duplicates() {
    let stream = [
        ack(1000),                                                      // 0
        ack(1000).sack(&[(2000, 3000)]),                                // 1
        ack(1000).sack(&[(2000, 4000)]),                                // 2
        ack(1000).sack(&[(5000, 6000), (2000, 4000)]),                  // 3
        ack(1000).sack(&[(7000, 8000), (5000, 6000), (2000, 4000)]),    // 4
        ack(1000).sack(&[(9000, 10000), (7000, 8000), (5000, 6000)]),   // 5
        ack(1000).sack(&[(11000, 12000), (9000, 10000), (7000, 8000)]), // 6
        ack(12000),                                                     // 7
        ack(13000),                                                     // 8
        ack(14000),                                                     // 9
        ack(14000).sack(&[(13000, 13500)]),                             // 10: D-SACK
        ack(15000),                                                     // 11
        ack(16000),                                                     // 12
    ];
    for (mode, dropped, sent) in [
        (ON, vec![0, 1, 2, 7, 8, 9], vec![3, 4, 5, 6, 10, 11, 12]),
        (
            AGGRESSIVE,
            vec![0, 1, 2, 3, 7, 8, 9, 11],
            vec![4, 5, 6, 10, 12],
        ),
    ] {
        let mut l = Link::<Cobalt>::new(mode);
        for s in &stream {
            l.seg(s, FLOW);
        }
        l.drain();
        assert_eq!(l.dropped(), dropped, "{mode:?}");
        assert_eq!(l.sent, sent, "{mode:?}");
    }
}

/// A pure ACK stream with nothing sent: `on` holds the newest two, `aggressive` the
/// newest only; a data segment between an ACK and the arrival, or other ECE bits, keep
/// `aggressive` from dropping a lone eligible ACK.
#[test]
fn aggressive_and_on() {
    for (mode, held) in [(ON, 2), (AGGRESSIVE, 1)] {
        let mut l = Link::<Cobalt>::new(mode);
        for k in 0..10 {
            l.seg(&ack(1000 + 100 * k), FLOW);
        }
        assert_eq!(l.queue(FLOW), (10 - held..10).collect::<Vec<_>>());
        assert_eq!(l.q.aqm_stats().unwrap().ack_drops, 10 - held as u64);
    }
    // (the data segment ACKs no more than the ACK before it: that one is not redundant)
    let data = Seg {
        data: 100,
        ..ack(100)
    };
    let mut l = Link::<Cobalt>::new(AGGRESSIVE);
    l.seg(&ack(100), FLOW);
    assert_eq!(l.seg(&data, FLOW), None);
    assert_eq!(l.seg(&ack(200), FLOW), None, "not adjacent");
    assert_eq!(l.seg(&ack(300), FLOW), Some(0), "second eligible");
    assert_eq!(l.queue(FLOW), vec![1, 2, 3]);
    let mut l = Link::<Cobalt>::new(AGGRESSIVE);
    l.seg(&ack(100), FLOW);
    assert_eq!(
        l.seg(&ack(200).flags(TcpFlags::ACK | TcpFlags::ECE), FLOW),
        None
    );
    let mut l = Link::<Cobalt>::new(ON);
    l.seg(&ack(100), FLOW);
    assert_eq!(l.seg(&ack(200), FLOW), None, "on keeps a lone ACK");
}

/// Two connections in one queue — their flows collide in a bucket, or `src-host`
/// isolation keys the queue by the host they share — never filter each other: an
/// arrival of one finds no candidate among the other's ACKs, however far behind their
/// cumulative ACKs are; each connection's own redundant ACKs still go.
#[test]
fn colliding_connections_never_filter_each_other() {
    let conn = |port: u16, n: u32| Seg {
        src_port: port,
        ..ack(n)
    };
    for isolate in [Isolation::Flow, Isolation::SrcHost] {
        let mut l = Link::<Cobalt>::with(FqConfig {
            ack_filter: ON,
            ..cfg(isolate, AqmKind::Cobalt)
        });
        // different flow hashes, unless the flows collide (`flow` isolation)
        let flow = |port: u16| match isolate {
            Isolation::Flow => FLOW,
            _ => FLOW + port as u64,
        };
        l.seg(&conn(80, 100), flow(80));
        l.seg(&conn(80, 200), flow(80));
        // port 81's ACKs are far ahead of port 80's: none of 80's is theirs to drop
        assert_eq!(l.seg(&conn(81, 90_000), flow(81)), None);
        assert_eq!(l.seg(&conn(81, 91_000), flow(81)), None);
        assert_eq!(l.q.aqm_stats().unwrap().active_flows, 1, "{isolate:?}");
        // each connection's third ACK drops its own oldest
        assert_eq!(l.seg(&conn(81, 92_000), flow(81)), Some(2));
        assert_eq!(
            l.seg(&conn(80, 50), flow(80)),
            None,
            "older than the queued"
        );
        assert_eq!(l.seg(&conn(80, 300), flow(80)), Some(0));
        assert_eq!(l.queue(flow(80)), vec![1, 3, 4, 5, 6]);
        // interleaved from here on: 80's and 81's own drops only (`Link::check`)
        for k in 0..40 {
            l.seg(
                &conn(80 + (k % 2) as u16, 100_000 + 100 * k),
                flow(80 + (k % 2) as u16),
            );
            if k % 3 == 0 {
                l.serve();
            }
        }
        l.drain();
        assert!(l.filtered.len() > 20, "{isolate:?}: {}", l.filtered.len());
        // the last ACK of each connection is sent
        assert!(l.sent.ends_with(&[45, 46]), "{:?}", l.sent);
    }
}

/// An upload's data segments (which carry ACKs: they trigger the filter) and the pure
/// ACKs of the same connection in one queue: data is never dropped; a pure ACK goes when
/// two eligible ones are queued (`on`), whatever lies between them.
#[test]
fn data_and_acks_mixed() {
    let data = |seq: u32, n: u32| Seg {
        data: 200,
        seq,
        ..ack(n)
    };
    let mut l = Link::<Cobalt>::new(ON);
    assert_eq!(l.seg(&data(5000, 100), FLOW), None); // 0
    assert_eq!(l.seg(&ack(200), FLOW), None); // 1
    assert_eq!(l.seg(&data(5200, 200), FLOW), None); // 2: 1 has its ACK: not eligible
    assert_eq!(l.seg(&ack(300), FLOW), None); // 3: 1 eligible only (the data is not)
    assert_eq!(l.seg(&data(5400, 400), FLOW), Some(1)); // 4: 1 and 3 eligible
    assert_eq!(l.seg(&ack(400), FLOW), None); // 5: 3 only (400 is not below 400)
    assert_eq!(l.seg(&ack(500), FLOW), Some(3)); // 6
    l.drain();
    assert_eq!(l.sent, vec![0, 2, 4, 5, 6]);
    // random mixes: no data segment is ever dropped (`Link::check` asserts it)
    let mut rng = Rng::new(9);
    let mut l = Link::<Cobalt>::new(AGGRESSIVE);
    let (mut seq, mut cum) = (5000, 100);
    for _ in 0..500 {
        cum += rng.below(3) as u32 * 100;
        let s = if rng.chance(0.4) {
            seq += 200;
            data(seq, cum)
        } else {
            ack(cum)
        };
        l.seg(&s, FLOW);
        if rng.chance(0.3) {
            l.serve();
        }
    }
    l.drain();
    assert!(l.filtered.len() > 50, "{}", l.filtered.len());
    assert_eq!(l.sent.last(), Some(&499));
}

/// Frames whose headers do not parse (garbage, cut short, not TCP, no frame bytes at
/// all) never trigger the filter and are never dropped by it, wherever they sit.
#[test]
fn frames_that_do_not_parse_are_left_alone() {
    let full = ack(900).frame();
    let bad = [
        vec![0xab; 60],
        full[..full.len() - 1].to_vec(),
        full[..20].to_vec(),
        udp_frame(),
        vec![],
    ];
    for mode in [ON, AGGRESSIVE] {
        let mut l = Link::<Cobalt>::new(mode);
        for f in &bad {
            // as arrival: no trigger; then as the queued packets between ACKs
            l.frame(f.clone(), None, FLOW);
            assert_eq!(l.frame(f.clone(), None, FLOW), None);
            assert_eq!(l.frame(f.clone(), None, FLOW), None);
        }
        assert!(l.filtered.is_empty());
        for k in 0..6 {
            l.seg(&ack(1000 + 10 * k), FLOW);
            l.frame(bad[k as usize % bad.len()].clone(), None, FLOW);
        }
        l.drain();
        // only ACKs went; every bad frame was sent
        let bad_sent = l
            .sent
            .iter()
            .filter(|&&k| l.arrivals[k].seg.is_none())
            .count();
        assert_eq!(bad_sent, 3 * bad.len() + 6);
        assert!(!l.filtered.is_empty());
    }
    // a pool without frame bytes (the simulator's): nothing to read, nothing dropped
    let mut b = Bench::with_slot(0);
    let mut q = Counted::new(Box::new(fq::<Cobalt>(FqConfig {
        ack_filter: AGGRESSIVE,
        ..cfg(Isolation::Flow, AqmKind::Cobalt)
    })));
    for _ in 0..50 {
        let p = b.pool.alloc().unwrap();
        (b.pool.meta_mut(p).len, b.pool.meta_mut(p).flow) = (64, FLOW);
        q.enqueue(p, &mut b.cx()).unwrap();
    }
    assert_eq!((q.len(), q.aqm_stats().unwrap().ack_drops), (50, 0));
    q.check().unwrap();
}

/// The default is `off`; every mode validates and builds; `off` keeps every ACK of a
/// stream in which each makes the ones before it redundant.
#[test]
fn off_changes_nothing() {
    assert_eq!(FqConfig::default().ack_filter, OFF);
    for mode in AckFilterMode::ALL {
        let c = FqConfig {
            ack_filter: mode,
            ..FqConfig::default()
        };
        assert!(c.validate().is_ok() && c.build(1).is_ok());
    }
    let mut l = Link::<Cobalt>::new(OFF);
    for s in download(100) {
        l.seg(&s, FLOW);
    }
    assert_eq!(l.queue(FLOW), (0..100).collect::<Vec<_>>());
    assert_eq!(l.q.aqm_stats().unwrap().ack_drops, 0);
}

/// What a draw of the property test turns into: a segment of connection `conn`.
#[derive(Clone, Debug)]
struct Draw {
    conn: bool,
    step: u8,
    data: bool,
    sack: u8,
    ece: bool,
    serve: u8,
}

fn draws() -> impl Strategy<Value = Vec<Draw>> {
    proptest::collection::vec(
        (
            any::<bool>(),
            0u8..4,
            proptest::bool::weighted(0.25),
            any::<u8>(),
            proptest::bool::weighted(0.05),
            0u8..3,
        )
            .prop_map(|(conn, step, data, sack, ece, serve)| Draw {
                conn,
                step,
                data,
                sack,
                ece,
                serve,
            }),
        1..200,
    )
}

/// Random interleavings of two connections' ACKs (duplicates, SACK blocks, ECE now and
/// then) and data, in one flow or two, with random service: after every arrival the
/// filter's drop is exactly what the rules name on a model of the flow's queue (the
/// arrivals of that flow not yet sent or dropped, head to tail) — at most one pure ACK
/// of the arrival's connection, never data; the identities and invariants hold after
/// every operation (`Link`); the last arrival of each connection is sent.
fn random_interleaving<A: Aqm>(mode: AckFilterMode, shared: bool, draws: &[Draw]) {
    let mut l = Link::<A>::new(mode);
    let mut cum = [1000u32, 9000];
    let mut seq = [50_000u32, 70_000];
    let flow = |c: usize| if shared { FLOW } else { FLOW + c as u64 };
    for (t, d) in draws.iter().enumerate() {
        l.b.now = Instant(t as u64 * 100_000);
        let c = d.conn as usize;
        cum[c] += d.step as u32 * 500;
        let mut s = ack(cum[c]).ts(t as u32, t as u32);
        s.src_port = 80 + c as u16;
        if d.data {
            seq[c] += 300;
            (s.seq, s.data) = (seq[c], 120);
        }
        if d.sack % 4 == 1 {
            let start = cum[c] + 1000;
            s = s.sack(&[(start, start + 500 * (d.sack as u32 >> 2 & 7))]);
        }
        if d.ece {
            s = s.flags(TcpFlags::ACK | TcpFlags::ECE);
        }
        // the model: this flow's held packets, head to tail, then the arrival
        let k = l.arrivals.len();
        let f = flow(c);
        let queued = l.queue(f);
        let frame = s.frame();
        let want = find_redundant(
            mode,
            &frame,
            queued.iter().map(|&j| (j, l.arrivals[j].frame.as_slice())),
        );
        assert_eq!(l.seg(&s, f), want, "arrival {k}");
        for _ in 0..d.serve {
            l.serve();
        }
    }
    l.drain();
    for c in [80, 81] {
        let last = l.arrivals.iter().rposition(|a| a.conn() == Some(c));
        if let Some(k) = last {
            let aqm = l.other.iter().any(|&(j, _)| j == k);
            assert!(aqm || l.sent.contains(&k), "the last of {c} ({k}) was sent");
        }
    }
    assert!(l.filtered.iter().all(|&(k, _)| l.arrivals[k].pure_ack()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_interleavings_of_two_connections(
        aggressive in any::<bool>(),
        shared in any::<bool>(),
        draws in draws(),
    ) {
        let mode = if aggressive { AGGRESSIVE } else { ON };
        random_interleaving::<NoAqm>(mode, shared, &draws);
        random_interleaving::<Cobalt>(mode, shared, &draws);
    }
}
