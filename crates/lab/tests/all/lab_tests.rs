//! Short runs of seed 000's Advanced and Robustness tests in the namespace testbed, against
//! weir:cbq+pfq. Need root; elsewhere they print SKIP and pass. Each stays under ~40 s.

use std::sync::{Mutex, MutexGuard};

use weir_lab::tests::advanced::{self, AdvancedConfig};
use weir_lab::tests::robustness::{self, RobustnessConfig};
use weir_lab::topo::skip_unless_root;

/// The tests measure rates on a 2-core machine: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn quiet(_: &str) {}

#[test]
fn inter_class_borrowing_takes_the_freed_bandwidth_within_2_s() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("inter_class_borrowing_takes_the_freed_bandwidth_within_2_s") {
        return;
    }
    let _g = serial();
    // 12 s; session 2 from 0.5 s to 5 s; after window 10-11.5 s
    let mut c = AdvancedConfig::with_duration(1, 12.0);
    c.subtests = vec!["inter".into()];
    c.duts = vec!["weir:cbq+pfq".into()];
    let res = advanced::run(&c, &mut quiet).expect("advanced run");
    let text = advanced::text(&res);
    eprintln!("{text}");
    let row = &res.parts[0].rows[0];
    assert!(
        row.s2_before_bps > 500_000.0,
        "session 2 should have had its class while it ran: {text}"
    );
    assert_eq!(res.checks.len(), 1);
    assert!(res.checks[0].passed, "{text}");
}

#[test]
fn periodic_loss_lowers_goodput() {
    let _group = weir_lab::testing::group(module_path!());
    if skip_unless_root("periodic_loss_lowers_goodput") {
        return;
    }
    let _g = serial();
    let mut c = RobustnessConfig::quick();
    c.subtests = vec!["loss".into()];
    c.duts = vec!["weir:cbq+pfq".into()];
    c.loss.loss_pct = vec![0.5, 8.0];
    c.loss.duration_s = 17.0;
    c.loss.window_s = (3.0, 17.0);
    let res = robustness::run("<none>", "", &c, None, &mut quiet).expect("robustness run");
    let text = robustness::text(&res);
    eprintln!("{text}");
    let rows = &res.loss.as_ref().unwrap().rows;
    let g = |p: f64| rows.iter().find(|r| r.loss_pct == p).unwrap().goodput_bps;
    assert!(g(0.5) > 0.0, "{text}");
    assert!(g(8.0) < g(0.5), "{text}");
}
