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

/// CPU time the hypervisor took from this machine's virtual CPUs since boot, summed over
/// all CPUs (`steal` of `/proc/stat`'s `cpu` line, counted in `USER_HZ` ticks). Compare two
/// readings: a timing result measured while steal grew says the machine, not the code
/// under test, lost that time. `None` where `/proc/stat` cannot be read.
pub fn cpu_steal() -> Option<std::time::Duration> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    parse_steal(
        &std::fs::read_to_string("/proc/stat").ok()?,
        hz.max(1) as u64,
    )
}

/// The share of the machine's CPU time the hypervisor took over a stretch of wall-clock
/// time: start with [`StealMeter::start`], read with [`StealMeter::finish`].
#[derive(Clone, Copy, Debug)]
pub struct StealMeter {
    wall: std::time::Instant,
    steal: Option<std::time::Duration>,
}

/// What a [`StealMeter`] saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Steal {
    /// CPU time taken, summed over all CPUs.
    pub taken: std::time::Duration,
    /// `taken` ÷ (wall time × CPUs): 0 on a machine of its own.
    pub fraction: f64,
}

impl StealMeter {
    /// Below this fraction a timing result is the code's, not the hypervisor's (the timing
    /// tests retry an attempt that saw more).
    pub const QUIET: f64 = 0.03;

    pub fn start() -> StealMeter {
        StealMeter {
            wall: std::time::Instant::now(),
            steal: cpu_steal(),
        }
    }

    /// `None` where `/proc/stat` cannot be read.
    pub fn finish(&self) -> Option<Steal> {
        let taken = cpu_steal()?.saturating_sub(self.steal?);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let wall = self.wall.elapsed().as_secs_f64() * cpus as f64;
        Some(Steal {
            taken,
            fraction: if wall > 0.0 {
                taken.as_secs_f64() / wall
            } else {
                0.0
            },
        })
    }
}

impl Steal {
    pub fn quiet(&self) -> bool {
        self.fraction <= StealMeter::QUIET
    }
}

impl std::fmt::Display for Steal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} s stolen ({:.1} % of CPU time)",
            self.taken.as_secs_f64(),
            self.fraction * 100.0
        )
    }
}

fn parse_steal(stat: &str, user_hz: u64) -> Option<std::time::Duration> {
    // cpu  user nice system idle iowait irq softirq steal ...
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(std::time::Duration::from_nanos(
        ticks * (1_000_000_000 / user_hz),
    ))
}

/// The metadata as text, one `key: value` line each (the "Run" section of a report).
pub fn meta_text(meta: &BTreeMap<String, String>) -> String {
    meta.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_counter_of_the_cpu_line() {
        let stat = "cpu  4705 150 1120 16250 520 0 30 132 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(
            parse_steal(stat, 100),
            Some(std::time::Duration::from_millis(1320))
        );
        assert_eq!(
            parse_steal(stat, 1000),
            Some(std::time::Duration::from_millis(132))
        );
        assert_eq!(parse_steal("cpu0 1 2 3\n", 100), None);
        assert_eq!(parse_steal("cpu  1 2 3\n", 100), None);
    }
}
