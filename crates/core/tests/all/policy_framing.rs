//! Link-layer framing in the policy language: `[link]` and `[[emulate]]` keys `framing`
//! (CAKE's keywords), `overhead`, `mpu`, `atm`, `ptm`; their errors; and what the shaper
//! and the emulator make of them on the virtual clock.

use crate::common::{errors, has};

use weir_core::framing::{Coding, Framing};
use weir_core::policy::{Pipeline, Policy};
use weir_core::pool::Direction;
use weir_core::{Ctx, DropCause, Instant, Pool, Rng};
use weir_wire::build::{self, EthSpec, Ipv4Spec};

fn link(keys: &str) -> Policy {
    let text = format!("[link]\nrate = \"1Mbit\"\n{keys}\n");
    Policy::parse("p.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn link_keys_and_keywords() {
    let p = link("framing = \"pppoa-vcmux\"");
    assert_eq!(p.framing, Framing::cake("pppoa-vcmux").unwrap());
    assert_eq!((p.overhead, p.framing.coding()), (-4, Coding::Atm));
    // several keywords, as tc reads them
    let p = link("framing = \"bridged-ptm ether-vlan\"");
    assert_eq!(p.framing, Framing::new(12, 0, Coding::Ptm).unwrap());
    // explicit keys override the keyword's values
    let p = link("framing = \"pppoe-ptm\"\noverhead = 20\nmpu = 68");
    assert_eq!(p.framing, Framing::new(20, 68, Coding::Ptm).unwrap());
    assert_eq!(p.overhead, 20);
    let p = link("framing = \"pppoe-ptm\"\natm = true");
    assert_eq!(p.framing, Framing::new(16, 0, Coding::Atm).unwrap());
    let p = link("framing = \"pppoa-llc\"\natm = false");
    assert_eq!(p.framing, Framing::new(0, 0, Coding::Plain).unwrap());
    // the keys alone
    let p = link("overhead = 24\nmpu = 84");
    assert_eq!(p.framing, Framing::cake("ethernet").unwrap());
    let p = link("ptm = true");
    assert_eq!(p.framing, Framing::new(0, 0, Coding::Ptm).unwrap());
    // nothing: the frame as it is; a plain overhead as before
    assert_eq!(link("").framing, Framing::default());
    assert_eq!(link("overhead = -14").framing, Framing::plain(-14));
}

#[test]
fn link_framing_errors_are_located() {
    let errs = errors("[link]\nrate = \"1Mbit\"\nframing = \"pppoe-ptm adsl\"\n");
    has(&errs, "p.toml:3:11:");
    has(
        &errs,
        "unknown framing keyword 'adsl'; expected one of: raw, conservative",
    );
    has(&errs, "pppoe-ptm, bridged-ptm");
    let errs = errors("[link]\nrate = \"1Mbit\"\natm = true\nptm = true\n");
    has(&errs, "p.toml:4:7:");
    has(&errs, "`atm` and `ptm` are both true");
    // an overhead that makes the smallest IP frame count nothing, without an mpu
    let errs = errors("[link]\nrate = \"1Mbit\"\noverhead = -40\n");
    has(&errs, "p.toml:3:12:");
    has(&errs, "`overhead`: overhead -40 counts a 34-byte frame (Ethernet and IPv4 headers) as -6 bytes; give an overhead of at least -33 or an mpu");
    assert_eq!(link("overhead = -40\nmpu = 1").framing.wire_len(34), 1);
    let errs = errors("[link]\nrate = \"1Mbit\"\noverhead = -65\n");
    has(
        &errs,
        "`overhead`: -65 is outside -64..=256 bytes per frame",
    );
    let errs = errors("[link]\nrate = \"1Mbit\"\nmpu = 257\n");
    has(&errs, "p.toml:3:7:");
    has(&errs, "`mpu`: 257 is outside 0..=256 bytes");
    let errs = errors("[link]\nrate = \"1Mbit\"\nmpu = -1\n");
    has(&errs, "`mpu`: -1 is outside 0..=256 bytes");
    let vlans = "ether-vlan ".repeat(70);
    let errs = errors(&format!(
        "[link]\nrate = \"1Mbit\"\nframing = \"{vlans}\"\n"
    ));
    has(&errs, "p.toml:3:11:");
    has(
        &errs,
        "`framing`: the keywords add up to an overhead of 266 bytes per frame, outside -64..=256",
    );
    let errs = errors("[link]\nrate = \"1Mbit\"\natm = \"yes\"\n");
    has(&errs, "p.toml:3:7:");
}

#[test]
fn check_prints_the_framing() {
    let d = link("framing = \"pppoa-vcmux\"").describe();
    assert!(d.contains("mtu 1514  overhead -4B atm\n"), "{d}");
    assert!(
        d.contains("framing: a 1514-byte frame counts 1696 B on the link, a 64-byte one 106 B (CAKE's overhead 10 on the IP packet)"),
        "{d}"
    );
    let d = link("overhead = 24").describe();
    assert!(d.contains("mtu 1514  overhead 24B\n"), "{d}");
    assert!(!d.contains("framing:"), "{d}");
}

/// `n` 1514-byte frames (1500-byte IP packets) offered at t = 0; the departure times.
fn departures(mut pipe: Pipeline, n: u16) -> Vec<u64> {
    let mut pool = Pool::new(64, 2048);
    let mut rng = Rng::new(1);
    let mut dropped: Vec<(weir_core::PktId, DropCause)> = Vec::new();
    {
        let mut cx = Ctx::new(Instant::ZERO, &mut pool, &mut rng, &mut dropped);
        for k in 0..n {
            let id = cx.pool.alloc().unwrap();
            let len = build::udp_v4_frame(
                cx.pool.slot_mut(id),
                &EthSpec::default(),
                &Ipv4Spec::default(),
                5000 + k,
                9,
                &[0u8; 1472],
            )
            .unwrap();
            assert_eq!(len, 1514);
            cx.pool.meta_mut(id).len = len as u32;
            pipe.ingress(id, &mut cx).unwrap();
        }
    }
    let mut out = vec![];
    let mut now = Instant::ZERO;
    loop {
        let mut cx = Ctx::new(now, &mut pool, &mut rng, &mut dropped);
        while let Some(id) = pipe.dequeue(&mut cx) {
            out.push(now.as_nanos());
            cx.pool.free(id);
        }
        assert!(cx.dropped.is_empty());
        match pipe.next_wakeup() {
            Some(w) => now = now.max(w),
            None if pipe.is_empty() => break,
            None => panic!("packets held but no wake-up"),
        }
    }
    out
}

/// The shaper charges each frame its ATM cells: a 1500-byte IP packet with pppoa-vcmux is
/// 32 cells, 1696 bytes, 13.568 ms at 1 Mbit/s (1514 bytes would be 12.112 ms).
#[test]
fn the_shaper_counts_cells() {
    let text = "[link]\nrate = \"1Mbit\"\nframing = \"pppoa-vcmux\"\ndefault = \"a\"\n\
                [[class]]\nname = \"a\"\nrate = \"1Mbit\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    let t = departures(p.build(Instant::ZERO).unwrap(), 6);
    assert_eq!(t.len(), 6);
    for w in t.windows(2).skip(2) {
        assert_eq!(w[1] - w[0], 13_568_000, "{t:?}");
    }
}

/// An `[[emulate]]` profile with PTM framing: 1514 + 16 = 1530 bytes, plus one per 64
/// (24): 1554 bytes, 1.2432 ms at 10 Mbit/s.
#[test]
fn the_emulator_counts_ptm() {
    let text = "[link]\nrate = \"10Gbit\"\ndirection = \"none\"\nemulate = \"wan\"\n\
                [[emulate]]\nname = \"wan\"\nrate = \"10Mbit\"\nframing = \"pppoe-ptm\"\n";
    let p = Policy::parse("p.toml", text).unwrap();
    assert_eq!(
        p.emulators[0].cfg.framing,
        Framing::cake("pppoe-ptm").unwrap()
    );
    let pipe = p
        .build_direction(Direction::Outbound, Instant::ZERO)
        .unwrap()
        .unwrap();
    let t = departures(pipe, 4);
    assert_eq!(t[0], 1_243_200);
    for w in t.windows(2) {
        assert_eq!(w[1] - w[0], 1_243_200, "{t:?}");
    }
    let errs = errors(
        "[link]\nrate = \"1Mbit\"\n[[emulate]]\nname = \"w\"\nrate = \"1Mbit\"\nmpu = 5000\n",
    );
    has(&errs, "p.toml:6:7:");
    has(&errs, "`mpu`: 5000 is outside 0..=4096 bytes");
    let errs = errors(
        "[link]\nrate = \"1Mbit\"\n[[emulate]]\nname = \"w\"\nrate = \"1Mbit\"\nframing = \"vdsl\"\n",
    );
    has(&errs, "p.toml:6:11:");
    has(&errs, "unknown framing keyword 'vdsl'");
}
