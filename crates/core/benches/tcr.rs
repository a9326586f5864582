//! TCP rate control benchmark: the per-ACK cost of an ACK towards a rate-controlled sender
//! through the whole device, with many live connections.
//!
//! The goal (from the project's issue): a packet through the TCR stage (lookup + window
//! rewrite + pacing) costs ≤ 100 ns.
//!
//! Set-up (not timed):
//! * Two policies that differ only in `[link] technique`: a 10 Gbit/s link with one class
//!   `bulk` of rate 1 Gbit/s (ceil: the link), the default class, shaping outbound (the
//!   default `direction`). `cbq+pfq+tcr` makes `bulk` rate-controlled; `cbq+pfq` is the
//!   same device without TCR. Devices come from `Policy::parse` + `build_device`, frames
//!   from `weir_wire::build` (as the TCR unit tests do).
//! * 1,000 or 10,000 IPv4 TCP connections, client `10.x.y.z` (LAN, outbound) →
//!   server 192.168.1.1:443 (WAN). The device sees every handshake: SYN (MSS 1460, window
//!   scale 7, SACK-permitted, timestamps), the SYN-ACK 5 ms later (the same options; with
//!   TCR it is held one segment time at the session's share), the client's ACK once the
//!   SYN-ACKs are out. Every connection then has an RTT, a window scale and a rate: the
//!   class rate divided by the connections (1 Mbit/s or 100 kbit/s each).
//! * Work comes in chunks of 100 connections in a fixed pseudo-random order (`j × 48271
//!   mod N`, the same every round, so consecutive packets belong to unrelated
//!   connections and every connection is visited once per round): each connection sends
//!   two 1448-byte data segments (outbound, through the shaper; timestamps on), then the
//!   server's two ACKs of them come back (inbound), first the chunk's first ACKs, then
//!   its second ACKs. Every ACK is a new cumulative ACK (`ack` advances 1448 bytes), with
//!   timestamps echoing the data's, offering the full window (65,535 << 7).
//! * The virtual clock advances 7.24 µs per packet (data or ACK): the senders together
//!   get 80 % of the class rate. With TCR each connection's first ACK of a round goes at
//!   once and sets the next release one gap (1448 B at the session's rate: 11.6 ms or
//!   116 ms) later; the second, 100 packets (724 µs) behind it, is held for pacing and
//!   released by a later `poll_transmit` once due, well before the connection's next
//!   round (29 ms or 290 ms later; pacing needs 2 gaps). So at most one ACK per
//!   connection is ever held: checked after every chunk.
//! * Two untimed rounds warm the state (table entries, held-ACK heap) before anything is
//!   measured. Frames are written into pool slots before their phase is timed (a driver's
//!   receive ring; not the engine's cost).
//!
//! Timed, per ACK: `Device::ingress(Inbound, ..)` (parse, connection lookup and TCP
//! state update; with TCR its entry lookup, window sizing with the incremental checksum
//! fix-up, the pacing decision and maybe holding it) plus `Device::poll_transmit(Inbound,
//! ..)` until it returns `None` (the ACK itself, or held ACKs that came due: heap pop,
//! release), freeing what it returns. The data segments are timed separately (outbound
//! ingress + `poll_transmit` until `None`: classification, the CBQ+PFQ shaper, and with
//! TCR the marking of the connection and the class's member sweep); criterion measures
//! the ACKs only.
//!
//! Which figure meets the goal: the difference per ACK between `cbq+pfq+tcr` and
//! `cbq+pfq`. The rest of the ACK's cost (frame parse, connection lookup and TCP
//! tracking, the pass-through queue) is paid by every packet of a policy device with or
//! without TCR; the difference is what the TCR stage adds: its lookup, the window
//! rewrite and the pacing, including the release of held ACKs. Both totals are printed.
//!
//! Checked after every measurement, so the benchmark cannot time a no-op path: TCR's
//! inbound counters grew by exactly one `sized` per ACK and one `paced` per second ACK
//! (nothing `unchanged`, `at_once`, `no_rtt`, `not_seen` or `malformed`); without TCR
//! there are no TCR counters; every ACK in is out or held (`len(Inbound)`); nothing was
//! dropped; all connections are live and none was evicted. One extra chunk at the end
//! parses every ACK `poll_transmit` returns: checksum valid, window lowered by TCR (or
//! untouched without it).
//!
//! Besides criterion's statistics (per ACK, `Throughput::Elements(1)`) each connection
//! count runs one fixed loop of 2,000,000 ACKs per variant timed with
//! `std::time::Instant` in ten slices, the slices of the two variants alternating so that
//! both see the same load from other processes, and prints ns/ACK and ns/data segment
//! (mean, and the best slice, the figure least disturbed by other processes); a summary
//! table with the differences is printed at the end. Run with
//! `cargo bench -p weir-core --bench tcr`; `TCR_FIXED_ONLY=1000` (or `10000`, or `all`)
//! runs only the fixed loops of that connection count.
#![allow(clippy::disallowed_methods)] // the benchmark reads the wall clock on purpose

mod common;

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration as WallDuration, Instant as WallClock};
use weir_core::policy::{Device, Policy};
use weir_core::{Ctx, Direction, DropCause, Instant, PktId, Pool, Rng};
use weir_wire::build::{self, EthSpec, Ipv4Spec, TcpSpec};
use weir_wire::tcp::{Packet, TcpFlags};

/// The class rate, bits/s (the link is ten times this).
const CLASS_BPS: u64 = 1_000_000_000;
/// Payload of a data segment: MSS 1460 less the 12-byte timestamps option.
const SEG: u32 = 1448;
/// Virtual time per packet (data or ACK): 2 × 1448 bytes acknowledged per 4 packets
/// = 80 % of the class rate (1448 × 8 × 5 / (8 × 10^9) s, exact in ns).
const STEP_NS: u64 = SEG as u64 * 5_000_000_000 / CLASS_BPS;
/// Connections per chunk (divides both connection counts).
const CHUNK: u32 = 100;
/// Prime, coprime with 1,000 and 10,000: `j × STRIDE mod N` is a permutation.
const STRIDE: u64 = 48_271;
/// The receiver's window field (scaled by 7: 8 MiB offered).
const OFFER: u16 = 65_535;
const WSCALE: u8 = 7;
const WARM_ROUNDS: u32 = 2;
const FIXED_ACKS: u64 = 2_000_000;
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);
/// Handshakes: SYNs at 1 s, SYN-ACKs at 1.005 s, everything released by 2.005 s.
const T_SYN: u64 = 1_000_000_000;
const T_SYNACK: u64 = T_SYN + 5_000_000;
const T_ACK: u64 = T_SYNACK + 1_000_000_000;
/// The first data segment.
const T_START: u64 = T_ACK + 1_000_000;

fn fixed_acks() -> u64 {
    common::fixed_count(FIXED_ACKS)
}

fn policy(technique: &str) -> Policy {
    let text = format!(
        r#"
        [link]
        rate = "10Gbit"
        technique = "{technique}"
        default = "bulk"
        [[class]]
        name = "bulk"
        rate = "1Gbit"
        "#
    );
    Policy::parse("bench.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn client(i: u32) -> (Ipv4Addr, u16) {
    (
        Ipv4Addr::from(0x0a00_0001 + i),
        40_000 + (i % 20_000) as u16,
    )
}

/// Client and server initial sequence numbers of connection `i` (spread over the space).
fn isn(i: u32) -> (u32, u32) {
    let c = i.wrapping_mul(0x9e37_79b9);
    (c, !c)
}

/// A timestamp clock in ms (server clocks run 7,000 ticks ahead).
fn ms(t: Instant) -> u32 {
    (t.0 / 1_000_000) as u32
}

/// One segment of a connection, as a frame in a fresh pool slot.
#[derive(Clone, Copy)]
struct Seg {
    conn: u32,
    from_client: bool,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    ts: (u32, u32),
    payload: u32,
}

fn frame(pool: &mut Pool, s: Seg) -> PktId {
    const ZEROS: [u8; SEG as usize] = [0; SEG as usize];
    let id = pool.alloc().expect("pool slot");
    let (ca, cp) = client(s.conn);
    let (src, dst, sp, dp) = if s.from_client {
        (ca, SERVER, cp, 443)
    } else {
        (SERVER, ca, 443, cp)
    };
    let syn = s.flags.contains(TcpFlags::SYN);
    let tcp = TcpSpec {
        src_port: sp,
        dst_port: dp,
        seq: s.seq,
        ack: s.ack,
        flags: s.flags,
        window: if s.from_client { 502 } else { OFFER },
        mss: syn.then_some(1460),
        window_scale: syn.then_some(WSCALE),
        sack_permitted: syn,
        timestamps: Some(s.ts),
        ..Default::default()
    };
    let ip = Ipv4Spec {
        src,
        dst,
        ..Default::default()
    };
    let n = build::tcp_v4_frame(
        pool.slot_mut(id),
        &EthSpec::default(),
        &ip,
        &tcp,
        &ZEROS[..s.payload as usize],
    )
    .expect("frame");
    pool.meta_mut(id).len = n as u32;
    id
}

/// What the benchmark keeps per connection.
#[derive(Clone, Copy, Default)]
struct Conn {
    /// The client's next sequence number.
    seq: u32,
    /// The server's last TSval (the client echoes it).
    srv_ts: u32,
}

/// One variant's state.
struct Bench {
    n: u32,
    tcr: bool,
    dev: Device,
    pool: Pool,
    rng: Rng,
    dropped: Vec<(PktId, DropCause)>,
    conns: Vec<Conn>,
    /// Packets (data and ACKs) sent so far: the virtual clock.
    op: u64,
    /// Chunks started so far.
    chunks: u64,
    /// Frames of the current chunk: `2 × CHUNK` data segments, then `2 × CHUNK` ACKs.
    frames: Vec<PktId>,
    /// ACKs of the current chunk sent so far (0 when no chunk is open).
    at: u32,
    /// ACKs in and out of the device, second ACKs (the ones TCR holds) since set-up.
    acks_in: u64,
    acks_out: u64,
    seconds: u64,
    /// The data segments' timed cost and count.
    data_time: WallDuration,
    data_segs: u64,
    /// The most ACKs held at the end of a chunk.
    held_max: usize,
    /// TCR's inbound counters after set-up (handshakes).
    base: Option<weir_core::tcp::tcr::TcrStats>,
    /// Parse every ACK `poll_transmit` returns (the last check only).
    verify: bool,
}

impl Bench {
    fn new(n: u32, tcr: bool) -> Bench {
        let technique = if tcr { "cbq+pfq+tcr" } else { "cbq+pfq" };
        let dev = policy(technique)
            .build_device(Instant::ZERO)
            .expect("device");
        assert_eq!(dev.tcr_stats(Direction::Inbound).is_some(), tcr);
        let mut b = Bench {
            n,
            tcr,
            dev,
            pool: Pool::new(n + 8 * CHUNK + 1024, 2048),
            rng: Rng::new(1),
            dropped: Vec::new(),
            conns: vec![Conn::default(); n as usize],
            op: 0,
            chunks: 0,
            frames: Vec::with_capacity(4 * CHUNK as usize),
            at: 0,
            acks_in: 0,
            acks_out: 0,
            seconds: 0,
            data_time: WallDuration::ZERO,
            data_segs: 0,
            held_max: 0,
            base: None,
            verify: false,
        };
        b.handshakes();
        b.base = b.dev.tcr_stats(Direction::Inbound);
        for _ in 0..WARM_ROUNDS {
            b.run_acks(2 * n as u64);
        }
        b.check();
        b
    }

    /// Send `pkt` (if any) in `dir` at `now`, then everything due in `dir`; returns how
    /// many packets came out.
    #[inline(always)]
    fn pass(&mut self, dir: Direction, pkt: Option<PktId>, now: Instant) -> u64 {
        let mut cx = Ctx::new(now, &mut self.pool, &mut self.rng, &mut self.dropped);
        if let Some(pkt) = pkt {
            self.dev.ingress(dir, pkt, &mut cx, now).expect("admitted");
        }
        let mut out = 0;
        while let Some(p) = self.dev.poll_transmit(dir, &mut cx) {
            if self.verify && dir == Direction::Inbound {
                verify(cx.pool.data(p), self.tcr);
            }
            cx.pool.free(p);
            out += 1;
        }
        out
    }

    fn handshakes(&mut self) {
        let (syn, synack, ack) = (TcpFlags::SYN, TcpFlags::SYN | TcpFlags::ACK, TcpFlags::ACK);
        for (t, dir, from_client, flags) in [
            (T_SYN, Direction::Outbound, true, syn),
            (T_SYNACK, Direction::Inbound, false, synack),
            (T_ACK, Direction::Outbound, true, ack),
        ] {
            let now = Instant(t);
            if flags == ack {
                // the SYN-ACKs TCR held go out before the clients answer them
                self.pass(Direction::Inbound, None, now);
                assert_eq!(self.dev.len(Direction::Inbound), 0, "SYN-ACKs released");
            }
            for i in 0..self.n {
                let (c, s) = isn(i);
                let seg = match flags {
                    f if f == syn => (c, 0, (ms(now), 0)),
                    f if f == synack => {
                        let ts = (ms(now) + 7000, ms(Instant(T_SYN)));
                        (s, c.wrapping_add(1), ts)
                    }
                    _ => {
                        let ts = (ms(now), ms(Instant(T_SYNACK)) + 7000);
                        (c.wrapping_add(1), s.wrapping_add(1), ts)
                    }
                };
                let pkt = frame(
                    &mut self.pool,
                    Seg {
                        conn: i,
                        from_client,
                        flags,
                        seq: seg.0,
                        ack: seg.1,
                        ts: seg.2,
                        payload: 0,
                    },
                );
                self.pass(dir, Some(pkt), now);
                self.conns[i as usize] = Conn {
                    seq: c.wrapping_add(1),
                    srv_ts: ms(Instant(T_SYNACK)) + 7000,
                };
            }
        }
        let s = self.dev.connection_stats().expect("connection table");
        assert_eq!(s.live, self.n as u64);
        if self.tcr {
            let t = self.dev.tcr_stats(Direction::Inbound).expect("tcr");
            assert_eq!(t.handshakes_held, self.n as u64, "{t:?}");
        }
    }

    #[inline(always)]
    fn now(&self) -> Instant {
        Instant(T_START + self.op * STEP_NS)
    }

    /// The connections of chunk `c` (in the round's fixed order).
    fn chunk_conn(&self, c: u64, j: u32) -> u32 {
        let k = (c % (self.n / CHUNK) as u64) * CHUNK as u64 + j as u64;
        (k * STRIDE % self.n as u64) as u32
    }

    /// Open the next chunk: write its frames (untimed), send its data segments (timed
    /// into `data_time`).
    fn open_chunk(&mut self) {
        let c = self.chunks;
        self.chunks += 1;
        self.frames.clear();
        // data: every connection's first segment, then every second one; then the ACKs
        // in the same order, each packet STEP_NS after the one before
        for k in 0..4 * CHUNK {
            let (second, j) = ((k / CHUNK) % 2 == 1, k % CHUNK);
            let i = self.chunk_conn(c, j);
            let st = self.conns[i as usize];
            let now = Instant(self.now().0 + k as u64 * STEP_NS);
            let end = st.seq.wrapping_add(SEG * (1 + second as u32));
            // the TSval of the data segment (an ACK echoes its segment's)
            let data_ts = ms(Instant(self.now().0 + (k % (2 * CHUNK)) as u64 * STEP_NS));
            let seg = if k < 2 * CHUNK {
                Seg {
                    conn: i,
                    from_client: true,
                    flags: TcpFlags::ACK | TcpFlags::PSH,
                    seq: end.wrapping_sub(SEG),
                    ack: isn(i).1.wrapping_add(1),
                    ts: (data_ts, st.srv_ts),
                    payload: SEG,
                }
            } else {
                Seg {
                    conn: i,
                    from_client: false,
                    flags: TcpFlags::ACK,
                    seq: isn(i).1.wrapping_add(1),
                    ack: end,
                    ts: (ms(now) + 7000, data_ts),
                    payload: 0,
                }
            };
            self.frames.push(frame(&mut self.pool, seg));
            if k >= 3 * CHUNK {
                self.conns[i as usize] = Conn {
                    seq: end,
                    srv_ts: ms(now) + 7000,
                };
            }
        }
        let t0 = WallClock::now();
        for k in 0..2 * CHUNK as usize {
            let now = self.now();
            self.op += 1;
            black_box(self.pass(Direction::Outbound, Some(self.frames[k]), now));
        }
        self.data_time += t0.elapsed();
        self.data_segs += 2 * CHUNK as u64;
    }

    /// After a chunk's last ACK: everything in is out or held, at most one ACK held per
    /// connection, the shaper keeps up, nothing dropped.
    fn close_chunk(&mut self) {
        let held = self.dev.len(Direction::Inbound);
        assert_eq!(
            self.acks_in - self.acks_out,
            held as u64,
            "ACKs in = out + held"
        );
        assert!(
            held <= self.n as usize,
            "{held} ACKs held with {} connections: pacing does not keep up",
            self.n
        );
        if !self.tcr {
            assert_eq!(held, 0);
        }
        self.held_max = self.held_max.max(held);
        let queued = self.dev.len(Direction::Outbound);
        assert!(
            queued <= 2 * CHUNK as usize,
            "{queued} data segments queued"
        );
        assert!(self.dropped.is_empty(), "dropped: {:?}", self.dropped);
        assert_eq!(self.pool.in_use(), held + queued, "pool slots leaked");
    }

    /// Send `n` ACKs (opening and closing chunks as needed); returns the time spent on
    /// the ACKs only.
    fn run_acks(&mut self, n: u64) -> WallDuration {
        let mut timed = WallDuration::ZERO;
        let mut left = n;
        let per_chunk = 2 * CHUNK;
        while left > 0 {
            if self.at == 0 {
                self.open_chunk();
            }
            let m = left.min((per_chunk - self.at) as u64) as u32;
            let first = self.at;
            let t0 = WallClock::now();
            for k in first..first + m {
                let pkt = self.frames[(2 * CHUNK + k) as usize];
                let now = self.now();
                self.op += 1;
                self.acks_out += self.pass(Direction::Inbound, Some(pkt), now);
            }
            timed += t0.elapsed();
            self.acks_in += m as u64;
            self.seconds += (first + m).saturating_sub(CHUNK.max(first)) as u64;
            self.at += m;
            left -= m as u64;
            if self.at == per_chunk {
                self.at = 0;
                self.close_chunk();
            }
        }
        timed
    }

    /// TCR's counters (exact), the connection table, and the device's identity.
    fn check(&self) {
        let s = self.dev.connection_stats().expect("connection table");
        assert_eq!((s.live, s.evicted), (self.n as u64, 0), "{s:?}");
        assert_eq!(
            self.acks_in - self.acks_out,
            self.dev.len(Direction::Inbound) as u64
        );
        let Some(t) = self.dev.tcr_stats(Direction::Inbound) else {
            assert!(!self.tcr, "the tcr policy has TCR counters");
            return;
        };
        let b = self.base.expect("counters after set-up");
        let grew = |now: u64, then: u64| now - then;
        let got = (
            grew(t.sized, b.sized),
            grew(t.paced, b.paced),
            grew(t.unchanged, b.unchanged),
            grew(t.at_once, b.at_once),
            grew(t.no_rtt, b.no_rtt),
            grew(t.not_seen, b.not_seen),
            grew(t.malformed, b.malformed),
            grew(t.handshakes_held, b.handshakes_held),
        );
        assert_eq!(
            got,
            (self.acks_in, self.seconds, 0, 0, 0, 0, 0, 0),
            "(sized, paced, unchanged, at_once, no_rtt, not_seen, malformed, handshakes) \
             after {} ACKs, {} of them second ACKs: {t:?}",
            self.acks_in,
            self.seconds
        );
        assert!(self.acks_in > 0 && self.seconds > 0);
        assert_eq!(
            self.dev.tcr_stats(Direction::Outbound).map(|s| s.sized),
            Some(0)
        );
    }

    /// One slice of the fixed loop: `n` ACKs (and the data segments they acknowledge).
    fn slice(&mut self, n: u64, f: &mut Fixed) {
        let (d0, s0) = (self.data_time, self.data_segs);
        let t = self.run_acks(n).as_nanos() as f64;
        let (d, segs) = ((self.data_time - d0).as_nanos() as f64, self.data_segs - s0);
        f.ack.add(t, n);
        f.data.add(d, segs);
    }

    /// One more chunk with every released ACK parsed and checked.
    fn verify_chunk(&mut self) {
        // finish the open chunk, then a whole one
        let rest = (2 * CHUNK - self.at) % (2 * CHUNK);
        self.run_acks(rest as u64);
        self.verify = true;
        self.run_acks(2 * CHUNK as u64);
        self.verify = false;
        self.check();
    }
}

/// A released ACK: valid checksum, window lowered by TCR (untouched without it).
fn verify(f: &[u8], tcr: bool) {
    let q = weir_wire::parse_frame(f).expect("frame");
    let p = Packet::new_checked(&f[q.l4_offset.expect("tcp")..q.l3_end]).expect("tcp");
    let (src, dst) = (q.src_ip.expect("ip"), q.dst_ip.expect("ip"));
    assert!(p.verify_checksum(src, dst), "checksum after the rewrite");
    assert_eq!(src, IpAddr::V4(SERVER));
    if tcr {
        assert!(p.window() < OFFER, "window {} not sized", p.window());
    } else {
        assert_eq!(p.window(), OFFER);
    }
}

/// A fixed loop's time per operation, over its ten slices.
#[derive(Clone, Copy)]
struct PerOp {
    ns: f64,
    ops: u64,
    /// The best slice, ns per op.
    best: f64,
}

impl PerOp {
    fn add(&mut self, ns: f64, ops: u64) {
        if ops > 0 {
            self.ns += ns;
            self.ops += ops;
            self.best = self.best.min(ns / ops as f64);
        }
    }

    /// (mean, best slice) ns per op.
    fn get(&self) -> (f64, f64) {
        (self.ns / self.ops.max(1) as f64, self.best)
    }
}

/// The fixed loop of one variant: per ACK and per data segment.
#[derive(Clone, Copy)]
struct Fixed {
    ack: PerOp,
    data: PerOp,
}

impl Default for Fixed {
    fn default() -> Fixed {
        let zero = PerOp {
            ns: 0.0,
            ops: 0,
            best: f64::INFINITY,
        };
        Fixed {
            ack: zero,
            data: zero,
        }
    }
}

fn name(tcr: bool) -> &'static str {
    if tcr {
        "ack_cbq+pfq+tcr"
    } else {
        "ack_cbq+pfq"
    }
}

/// Both variants at `n` connections: the fixed loops, their slices alternating between
/// the variants so that both see the same load from other processes, then criterion.
fn bench(c: &mut Criterion, n: u32, fixed_only: bool) -> [(Fixed, String); 2] {
    let mut v = [Bench::new(n, true), Bench::new(n, false)];
    let acks = if fixed_only { FIXED_ACKS } else { fixed_acks() };
    let mut f = [Fixed::default(); 2];
    for _ in 0..10 {
        for (b, f) in v.iter_mut().zip(&mut f) {
            b.slice(acks / 10, f);
        }
    }
    for (b, f) in v.iter().zip(&f) {
        b.check();
        let ((mean, best), (dmean, dbest)) = (f.ack.get(), f.data.get());
        eprintln!(
            "tcr/{}/{n}: {mean:.1} ns/ACK over {acks} ACKs (fixed loop; best tenth {best:.1}); \
             data {dmean:.1} ns/segment (best tenth {dbest:.1})",
            name(b.tcr)
        );
    }
    if !fixed_only {
        let mut g = c.benchmark_group("tcr");
        g.throughput(Throughput::Elements(1));
        for b in &mut v {
            g.bench_function(BenchmarkId::new(name(b.tcr), n), |bch| {
                bch.iter_custom(|iters| b.run_acks(iters))
            });
        }
        g.finish();
    }
    let [with, without] = v.map(|mut b| {
        b.check();
        b.verify_chunk();
        let mut note = format!("ACKs {}, held at most {}", b.acks_in, b.held_max);
        if let Some(t) = b.dev.tcr_stats(Direction::Inbound) {
            note += &format!(", sized {}, paced {}", t.sized, t.paced);
        }
        note
    });
    [(f[0], with), (f[1], without)]
}

fn main() {
    let mut c = common::criterion();
    let only = std::env::var("TCR_FIXED_ONLY").ok();
    let mut rows = Vec::new();
    for n in [1_000, 10_000] {
        match only.as_deref() {
            Some(o) if o != "all" && o != n.to_string() => {}
            o => rows.push((n, bench(&mut c, n, o.is_some()))),
        }
    }
    c.final_summary();
    eprintln!(
        "\nsummary: ns per ACK (inbound ingress + poll_transmit until None) and per data \
         segment (outbound), fixed loop of {} ACKs (mean, best tenth); goal: TCR's own cost, \
         the difference, <= 100 ns per ACK",
        if only.is_some() {
            FIXED_ACKS
        } else {
            fixed_acks()
        }
    );
    eprintln!(
        "  {:<26} {:>7} {:>7}   {:>7} {:>7}",
        "", "ACK", "best", "data", "best"
    );
    let cell = |(m, b): (f64, f64)| format!("{m:>7.1} {b:>7.1}");
    for (n, [(with, wnote), (without, onote)]) in &rows {
        for (tcr, f, note) in [(true, with, wnote), (false, without, onote)] {
            let id = format!("{}/{n}", name(tcr));
            eprintln!(
                "  {id:<26} {}   {}   {note}",
                cell(f.ack.get()),
                cell(f.data.get())
            );
        }
        let diff = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0, a.1 - b.1);
        let ack = diff(with.ack.get(), without.ack.get());
        let data = diff(with.data.get(), without.data.get());
        let met = |x: f64| if x <= 100.0 { "met" } else { "not met" };
        eprintln!(
            "  {:<26} {}   {}   goal <= 100 ns: {} (mean), {} (best)",
            format!("TCR's own cost/{n}"),
            cell(ack),
            cell(data),
            met(ack.0),
            met(ack.1)
        );
    }
}
