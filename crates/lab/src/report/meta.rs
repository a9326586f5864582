//! What every lab result records about where it ran: weir's version, the kernel, the
//! machine, the time and the command line, so a result file says exactly what produced it.

use std::collections::BTreeMap;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Key/value metadata of this run.
pub fn meta() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("weir_version".into(), env!("CARGO_PKG_VERSION").into());
    if let Some(k) = read("/proc/sys/kernel/osrelease") {
        m.insert("kernel".into(), k);
    }
    if let Some(h) = read("/proc/sys/kernel/hostname") {
        m.insert("host".into(), h);
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("cpus".into(), cpus.to_string());
    if let Some(cc) = read("/proc/sys/net/ipv4/tcp_congestion_control") {
        m.insert("host_default_tcp_cc".into(), cc);
    }
    if let Some(cs) = read("/sys/devices/system/clocksource/clocksource0/current_clocksource") {
        m.insert("clocksource".into(), cs);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    m.insert("unix_time".into(), now.to_string());
    m.insert(
        "command".into(),
        std::env::args().collect::<Vec<_>>().join(" "),
    );
    m
}

/// The metadata as text, one `key: value` line each (the "Run" section of a report).
pub fn meta_text(meta: &BTreeMap<String, String>) -> String {
    meta.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}
