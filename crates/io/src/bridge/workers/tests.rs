//! The division of the shared classes and the heartbeat's choice of worker.

use super::*;

fn tally(sent: u64, backlogged: bool) -> Tally {
    Tally {
        sent_bytes: sent,
        unqueued_bytes: 0,
        backlogged,
        weight: 1_000_000,
    }
}

#[test]
fn the_division_waits_for_every_worker_and_then_shares_the_ceil() {
    let s = Shared::new(2, None);
    for (i, slot) in s.slots.iter().enumerate() {
        let mut g = lock(slot);
        g.generation = 1;
        g.ceils = [vec![10_000_000], vec![]];
        g.tallies = [vec![tally(0, i == 0)], vec![]];
    }
    s.divide(Instant(0));
    // the first division starts the coordinator's clock: even parts
    assert_eq!(lock(&s.slots[0]).shares[0], vec![5_000_000]);
    assert_eq!(lock(&s.slots[1]).seq, 1);
    // not due again within the period
    s.divide(Instant(500_000));
    assert_eq!(lock(&s.slots[1]).seq, 1);
    // worker 0 backlogged, worker 1 idle: worker 1 keeps the floor, 0 the rest
    for (i, slot) in s.slots.iter().enumerate() {
        lock(slot).tallies[0] = vec![tally(if i == 0 { 1250 } else { 0 }, i == 0)];
    }
    s.divide(Instant(1_000_000));
    let (a, b) = (
        lock(&s.slots[0]).shares[0][0],
        lock(&s.slots[1]).shares[0][0],
    );
    assert_eq!(a + b, 10_000_000);
    assert_eq!(b, 100_000, "1 % floor");
    // worker 1 reloaded: its new scheduler counts from zero, which is no negative
    // load; the division goes on with its policy generation different
    {
        let mut g = lock(&s.slots[1]);
        g.generation = 2;
        g.tallies[0] = vec![tally(0, true)];
    }
    lock(&s.slots[0]).tallies[0] = vec![tally(2500, true)];
    s.divide(Instant(2_000_000));
    assert_eq!(lock(&s.slots[0]).seq, 3);
    let parts: u64 = s.slots.iter().map(|x| lock(x).shares[0][0]).sum();
    assert_eq!(parts, 10_000_000);
    // a worker with other shared classes (a reload half-way through): no division
    lock(&s.slots[1]).ceils[0] = vec![20_000_000];
    s.divide(Instant(3_000_000));
    assert_eq!(lock(&s.slots[0]).seq, 3);
}

#[test]
fn an_idle_worker_does_not_hold_the_division_up() {
    // a worker's slot is filled when its policy is built, busy or not: the division
    // runs with the other worker's load alone
    let s = Shared::new(2, None);
    for (i, slot) in s.slots.iter().enumerate() {
        let mut g = lock(slot);
        g.ceils = [vec![10_000_000], vec![]];
        g.tallies = [vec![tally(0, false)], vec![]];
        g.generation = i as u64 + 1;
    }
    s.divide(Instant(0));
    lock(&s.slots[0]).tallies[0] = vec![tally(1200, true)];
    s.divide(Instant(1_000_000));
    let (a, b) = (
        lock(&s.slots[0]).shares[0][0],
        lock(&s.slots[1]).shares[0][0],
    );
    assert_eq!((a, b), (9_900_000, 100_000));
}

#[test]
fn the_heartbeat_follows_the_worker_that_turned_least_recently() {
    let s = Shared::new(3, None);
    assert_eq!(s.least_alive(100), 100, "no rings open yet");
    s.alive[0].store(90, Ordering::Relaxed);
    s.alive[2].store(70, Ordering::Relaxed);
    assert_eq!(s.least_alive(100), 70);
}
