use super::*;
use crate::qdisc::{Ctx, DropCause, Qdisc};
use crate::queue::fifo::Fifo;
use crate::rate::Rate;
use crate::sched::linkshare::{ClassSpec, LinkShare};
use crate::sim::{self, SessionSpec, SimConfig, Source};
use crate::PktId;

const MBIT: u64 = 1_000_000;

fn close(a: &[f64], b: &[f64]) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
    }
}

#[test]
fn backlogged_shards_share_by_weight() {
    // two backlogged shards of weights 1 and 3: 25 and 75 of 100
    close(
        &divide(100.0, &[0.0, 0.0], &[true, true], &[1.0, 3.0]),
        &[25.0, 75.0],
    );
    // equal weights: cake_mq's equal split among the active queues
    close(
        &divide(90.0, &[0.0; 3], &[true; 3], &[5.0, 5.0, 5.0]),
        &[30.0, 30.0, 30.0],
    );
    // a backlogged shard whose other children need 20 gets those 20 besides its part
    close(
        &divide(100.0, &[20.0, 0.0], &[true, true], &[1.0, 1.0]),
        &[60.0, 40.0],
    );
}

#[test]
fn a_shard_without_a_backlog_gets_its_demand_and_the_rest_is_shared() {
    // 10 to the one that needs only that, 45 each to the two backlogged
    close(
        &divide(100.0, &[10.0, 0.0, 0.0], &[false, true, true], &[1.0; 3]),
        &[10.0, 45.0, 45.0],
    );
    // nobody backlogged: demands met (30), the spare 70 by weight 1:1
    close(
        &divide(100.0, &[10.0, 20.0], &[false, false], &[1.0, 1.0]),
        &[45.0, 55.0],
    );
    // demands above what is left: scaled to leave the backlogged shard its floor (1 %)
    close(
        &divide(100.0, &[150.0, 50.0, 0.0], &[false, false, true], &[1.0; 3]),
        &[74.25, 24.75, 1.0],
    );
}

#[test]
fn the_coordinator_divides_the_whole_rate_from_the_last_period() {
    let mut c = Coordinator::new(100 * MBIT, 4, PERIOD);
    assert_eq!(c.shares(), &[25 * MBIT; 4], "evenly at first");
    assert_eq!(
        c.tick(Instant::ZERO, &[ShardLoad::default(); 4]),
        &[25 * MBIT; 4]
    );
    assert_eq!(c.due(), Instant(1_000_000));
    // 1 ms later: shard 0 sent 1,250 bytes (10 Mbit/s) and has no backlog: 11 Mbit/s;
    // shard 3 did nothing: its floor, 1 Mbit/s; shards 1 and 2 are backlogged with
    // weights 10 and 30 Mbit/s: the other 88 Mbit/s as 1:3
    let loads = [
        ShardLoad {
            sent_bytes: 1_250,
            backlogged: false,
            weight: 5 * MBIT,
            unqueued_bytes: 1_250,
        },
        ShardLoad {
            sent_bytes: 3_000,
            backlogged: true,
            weight: 10 * MBIT,
            unqueued_bytes: 0,
        },
        ShardLoad {
            sent_bytes: 9_000,
            backlogged: true,
            weight: 30 * MBIT,
            unqueued_bytes: 0,
        },
        ShardLoad::default(),
    ];
    let s = c.tick(Instant(1_000_000), &loads).to_vec();
    assert_eq!(s, vec![11 * MBIT, 22 * MBIT, 66 * MBIT, MBIT]);
    assert_eq!(s.iter().sum::<u64>(), 100 * MBIT);
}

/// The shards of one link on the virtual clock, as `weir run --workers` runs them: each
/// shard a scheduler whose root is its copy of the link, measured and set through
/// [`Copies`], the coordinator re-dividing the link's rate every millisecond, the wire
/// taking from the shards in turn.
struct Sharded {
    shards: Vec<LinkShare>,
    /// Class of the whole tree → (shard, class in it).
    route: Vec<(usize, u32)>,
    copies: Vec<Copies>,
    /// Per shard: its link copy's tally at the last tick.
    tallies: Vec<Tally>,
    coord: Coordinator,
    turn: usize,
    /// Per shard: the share given × the period it was given for (bit), and bytes sent.
    given: Vec<(f64, u64)>,
}

impl Sharded {
    fn tick(&mut self, now: Instant) {
        if now < self.coord.due() {
            return;
        }
        let mut loads = Vec::with_capacity(self.shards.len());
        let mut t = Vec::new();
        for (s, ls) in self.shards.iter().enumerate() {
            self.copies[s].measure(ls, &mut t);
            loads.push(t[0].since(&self.tallies[s]));
            self.tallies[s] = t[0];
        }
        let shares = self.coord.tick(now, &loads).to_vec();
        for (s, l) in loads.iter().enumerate() {
            self.given[s].0 += shares[s] as f64 * 1e-3;
            self.given[s].1 += l.sent_bytes;
        }
        for (s, &bps) in shares.iter().enumerate() {
            self.copies[s].apply(&mut self.shards[s], &[bps], now);
        }
    }
}

impl Qdisc for Sharded {
    fn enqueue(&mut self, pkt: PktId, cx: &mut Ctx<'_>) -> Result<(), DropCause> {
        self.tick(cx.now);
        let (s, c) = self.route[cx.pool.meta(pkt).class as usize];
        cx.pool.meta_mut(pkt).class = c;
        self.shards[s].enqueue(pkt, cx)
    }
    fn dequeue(&mut self, cx: &mut Ctx<'_>) -> Option<PktId> {
        self.tick(cx.now);
        let n = self.shards.len();
        for k in 0..n {
            let s = (self.turn + k) % n;
            if let Some(p) = self.shards[s].dequeue(cx) {
                self.turn = s + 1;
                return Some(p);
            }
        }
        None
    }
    fn next_wakeup(&self) -> Option<Instant> {
        if self.len() == 0 {
            return None;
        }
        let shards = self.shards.iter().filter_map(|s| s.next_wakeup());
        shards.chain([self.coord.due()]).min()
    }
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }
    fn bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.bytes()).sum()
    }
    fn purge(&mut self, cx: &mut Ctx<'_>, cause: DropCause) {
        self.shards.iter_mut().for_each(|s| s.purge(cx, cause));
    }
}

const LINK: u64 = 100 * MBIT;

/// A class: assured `rate`, ceil the link, quantum in proportion to the rate (as weir's
/// default quanta), a FIFO if a leaf.
fn class(name: &str, parent: Option<u32>, rate: u64, leaf: bool) -> ClassSpec {
    ClassSpec {
        name: name.into(),
        parent,
        rate: Rate::from_bps(rate),
        ceil: Rate::from_bps(LINK),
        burst: (rate / 8 / 1000) as u32 + 1514,
        cburst: (LINK / 8 / 1000) as u32 + 1514,
        prio: 0,
        quantum: (1514 * rate / MBIT) as u32 * 2,
        queue: leaf.then(|| Box::new(Fifo::packets(1000)) as Box<dyn Qdisc>),
    }
}

/// Circuit `k`'s assured rate: 0.5..6 Mbit/s (24 circuits are assured 78 Mbit/s of the
/// link's 100: assured rates fit in their parent's, as weir's policies require).
fn circuit_rate(k: usize) -> u64 {
    (k as u64 % 12 + 1) * MBIT / 2
}

/// One scheduler for all `n` circuits (the reference) and `shards` shards of them
/// (circuit k in shard k % shards).
fn trees(n: usize, shards: usize) -> (LinkShare, Sharded) {
    let mut one = vec![class("link", None, LINK, false)];
    one.extend((0..n).map(|k| class(&format!("c{k}"), Some(0), circuit_rate(k), true)));
    let one = LinkShare::new(one, 1, Instant::ZERO).unwrap();
    // every shard's copy starts as the whole link (as a shard's policy does)
    let mut specs: Vec<Vec<ClassSpec>> = (0..shards)
        .map(|_| vec![class("link", None, LINK, false)])
        .collect();
    let mut route = vec![(0, 0)];
    for k in 0..n {
        let s = k % shards;
        let local = specs[s].len() as u32;
        specs[s].push(class(&format!("c{k}"), Some(0), circuit_rate(k), true));
        route.push((s, local));
    }
    let shards_ls: Vec<LinkShare> = specs
        .into_iter()
        .map(|s| LinkShare::new(s, 1, Instant::ZERO).unwrap())
        .collect();
    let link = vec!["link".to_string()];
    let sharded = Sharded {
        copies: shards_ls.iter().map(|ls| Copies::new(ls, &link)).collect(),
        tallies: vec![Tally::default(); shards],
        shards: shards_ls,
        route,
        coord: Coordinator::new(LINK, shards, PERIOD),
        turn: 0,
        given: vec![(0.0, 0); shards],
    };
    (one, sharded)
}

fn sessions(n: usize, limited: impl Fn(usize) -> Option<u64>) -> Vec<SessionSpec> {
    (0..n)
        .map(|k| SessionSpec {
            class: k as u32 + 1,
            flow: k as u64,
            size: 1500,
            source: match limited(k) {
                Some(bps) => Source::Rate(Rate::from_bps(bps)),
                None => Source::Window(16),
            },
            idle: vec![],
        })
        .collect()
}

/// Four shards against one scheduler: each circuit within 2 % of what the one scheduler
/// gives it, the link's total within 1 % of its rate.
fn compare(n: usize, limited: impl Fn(usize) -> Option<u64>) {
    let (mut one, mut sharded) = trees(n, 4);
    let ss = sessions(n, limited);
    let cfg = SimConfig {
        duration: Duration::from_secs(6),
        warmup: Duration::from_secs(1),
        ..Default::default()
    };
    let want = sim::run(&mut one, &ss, &cfg).unwrap();
    let got = sim::run(&mut sharded, &ss, &cfg).unwrap();
    let total: f64 = (0..n).map(|i| got.session_bps(i)).sum();
    eprintln!("link: {:.2} Mbit/s of {}", total / 1e6, LINK / MBIT);
    for (s, (given, sent)) in sharded.given.iter().enumerate() {
        eprintln!(
            "shard {s}: given {:.1} Mbit, sent {:.1} Mbit",
            given / 1e6,
            *sent as f64 * 8.0 / 1e6
        );
    }
    assert!(
        (total - LINK as f64).abs() / (LINK as f64) < 0.01,
        "the link carried {total} bit/s"
    );
    for i in 0..n {
        let (g, w) = (got.session_bps(i), want.session_bps(i));
        eprintln!(
            "c{i}: {:.3} Mbit/s sharded, {:.3} in one tree",
            g / 1e6,
            w / 1e6
        );
        assert!((g - w).abs() / w < 0.02, "circuit {i}: {g} sharded vs {w}");
    }
    for s in &sharded.shards {
        s.check_invariants().unwrap();
    }
}

#[test]
fn four_shards_give_every_backlogged_circuit_its_share() {
    compare(24, |_| None);
}

#[test]
fn four_shards_follow_circuits_that_use_less_than_their_share() {
    // every third circuit sends 1 Mbit/s only (below any share it would get); shard 0
    // holds most of them
    compare(24, |k| (k % 3 == 0).then_some(MBIT));
}

#[test]
fn top_level_classes_are_dealt_heaviest_first_to_the_lightest_shard() {
    // 5 -> 0; 3 -> 1; 3 -> 1 (3 < 5); 2 -> 0 (5 < 6); 2 -> 1 (6 < 7); 1 -> 0 (7 < 8)
    assert_eq!(deal(&[5, 3, 3, 2, 2, 1], 2), vec![0, 1, 1, 0, 1, 0]);
    assert_eq!(deal(&[1, 1, 1], 1), vec![0, 0, 0]);
    assert_eq!(deal(&[], 4), Vec::<usize>::new());
}

/// A generated table of 2,000 circuits (2 sites) split over 2 and 4 shards.
#[test]
fn a_table_splits_into_shards_that_keep_each_site_whole() {
    use crate::classify::{Fields, CIRCUIT_RULE, DEFAULT_RULE};
    use crate::pool::Direction;
    let dir = std::env::temp_dir().join(format!("weir-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (net, csv) = crate::subscribers::generate::generate(2_000, 1);
    std::fs::write(dir.join("network.json"), net).unwrap();
    std::fs::write(dir.join("ShapedDevices.csv"), csv).unwrap();
    std::fs::write(dir.join("p.toml"), crate::subscribers::generate::POLICY).unwrap();
    let p = crate::policy::Policy::load(&dir.join("p.toml")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let plan = Plan::new(&p, 2);
    let site = |name: &str| plan.owner[p.class_index(name).unwrap()];
    assert_ne!(site("site0"), site("site1"), "the two sites on two shards");
    assert_eq!(site("ap3"), site("site0"), "an AP follows its site");
    assert_eq!(site("c42"), site("site0"));
    assert_eq!(site("c1042"), site("site1"));
    assert_eq!(plan.owner[0], None, "the link is everyone's");
    assert_eq!(plan.owner[p.class_index("other").unwrap()], None);
    assert_eq!(plan.load[0], plan.load[1]);
    // shared: the link; `other` is a leaf every shard keeps, not divided
    assert_eq!(plan.shared(&p), vec!["link".to_string()]);

    let steer = plan.steering(&p);
    assert_eq!(steer.len(), p.subscribers.as_ref().unwrap().prefixes);
    for s in 0..2 {
        let q = plan.policy(&p, s).unwrap();
        let t = q.subscribers.as_ref().unwrap();
        assert_eq!((t.circuits, t.nodes), (1_000, 11), "shard {s}");
        // the link, `other`, a site, 10 APs, 1,000 circuits
        assert_eq!(q.classes.len(), 1 + 1 + 11 + 1_000);
        assert_eq!(q.classes[q.default_class].name, "other");
        // its classifier finds its own circuits and none of the other shard's
        let mine = if site("c42") == Some(s) { 42 } else { 1042 };
        let theirs = if mine == 42 { 1042 } else { 42 };
        // the address of circuit `c{i}` (its first IPv4 prefix)
        let entries = &p.subscribers.as_ref().unwrap().entries;
        let f = |i: usize| {
            let k = p.class_index(&format!("c{i}")).unwrap() as u32;
            let net = entries
                .iter()
                .find(|(n, c)| *c == k && n.addr().is_ipv4())
                .unwrap()
                .0;
            Fields::ip(net.addr(), "8.8.8.8".parse().unwrap(), 6, Some(1), Some(2))
        };
        let c = q.classifier_in(Direction::Outbound).unwrap();
        let (class, rule) = c.lookup(&f(mine));
        assert_eq!(rule, CIRCUIT_RULE);
        assert_eq!(q.classes[class as usize].name, format!("c{mine}"));
        assert_eq!(c.lookup(&f(theirs)).1, DEFAULT_RULE);
        // the shard's policy builds
        q.device_config(Instant::ZERO).unwrap();
    }
    // more shards than sites: the others keep the link and `other` only
    let plan = Plan::new(&p, 4);
    let empty = (0..4).find(|&s| !plan.owner.contains(&Some(s))).unwrap();
    let q = plan.policy(&p, empty).unwrap();
    assert_eq!(q.classes.len(), 2);
    assert_eq!(q.subscribers.as_ref().unwrap().circuits, 0);
}
