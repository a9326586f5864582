//! `weir check POLICY`: validate and print the compiled policy. `weir check
//! --shaped-devices F [--network F]`: validate a LibreQoS subscriber table and print its
//! tree (nodes, their circuits, the minimums against the node's rate).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use weir_core::subscribers::{libreqos, Diag, Table};

#[derive(clap::Args)]
pub struct Args {
    /// Policy file (TOML).
    #[arg(required_unless_present = "shaped_devices")]
    policy: Option<PathBuf>,
    /// Override the policy's technique preset (cbq, cbq+red, cbq+pfq, cbq+pfq+red, tcr, cbq+tcr, cbq+pfq+tcr).
    #[arg(long)]
    technique: Option<String>,
    /// A LibreQoS ShapedDevices.csv to validate (circuits, their prefixes and rates).
    #[arg(long)]
    shaped_devices: Option<PathBuf>,
    /// Its LibreQoS network.json (the node tree); default: a flat network.
    #[arg(long, requires = "shaped_devices")]
    network: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if let Some(devices) = &a.shaped_devices {
        let code = check_table(devices, a.network.as_deref())?;
        if code != ExitCode::SUCCESS || a.policy.is_none() {
            return Ok(code);
        }
    }
    let Some(policy) = &a.policy else {
        return Ok(ExitCode::SUCCESS);
    };
    let p = match crate::load_policy(Some(policy), a.technique.as_deref()) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    // building proves the compiled pipeline is constructible
    p.build(weir_core::Instant::ZERO)
        .map_err(|e| anyhow::anyhow!("{}: {e}", policy.display()))?;
    println!("{}: ok", policy.display());
    print!("{}", p.describe());
    if p.subscribers.is_some() {
        let n = weir_io::bridge::auto_workers(&p);
        println!(
            "{}",
            workers_line(&p, n).map_err(|e| anyhow::anyhow!("{}: {e}", policy.display()))?
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How `weir run` (`--workers auto`: `n` here) splits the table among its workers, or why
/// it cannot.
fn workers_line(p: &weir_core::policy::Policy, n: usize) -> Result<String, String> {
    if p.adapt.is_some() {
        return Ok("workers: 1 ([adapt] shapes the whole link; `--workers N` refuses it)".into());
    }
    if n <= 1 {
        return Ok("workers: 1 here (one CPU): the whole table on one worker".into());
    }
    let plan = weir_core::shard::Plan::new(p, n);
    let mut parts = Vec::with_capacity(n);
    for i in 0..n {
        // each shard's policy is what its worker runs: it must build
        let q = plan.policy(p, i)?;
        let circuits = q.subscribers.as_ref().map_or(0, |t| t.circuits);
        parts.push(format!(
            "worker {i}: {circuits} circuits, {} of ceilings",
            weir_core::units::fmt_rate(plan.load[i])
        ));
    }
    Ok(format!(
        "workers: {n} here (one per CPU; `weir run --workers N` to choose), the top-level classes dealt heaviest first: {}",
        parts.join("; ")
    ))
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

/// Validate a subscriber table: its errors (exit 2) or its summary.
fn check_table(devices: &Path, network: Option<&Path>) -> anyhow::Result<ExitCode> {
    let rejected = |errors: Vec<Diag>, what: &Path| {
        for e in &errors {
            eprintln!("{e}");
        }
        let n = errors.len();
        eprintln!(
            "{}: {n} error{} — table rejected",
            what.display(),
            if n == 1 { "" } else { "s" }
        );
        Ok(ExitCode::from(2))
    };
    let (nodes, mut warnings) = match network {
        Some(n) => match libreqos::parse_network(&n.display().to_string(), &read(n)?) {
            Ok(x) => x,
            Err(e) => return rejected(e, n),
        },
        None => (Vec::new(), Vec::new()),
    };
    let name = devices.display().to_string();
    let t = match libreqos::parse_shaped_devices(&name, &read(devices)?, nodes) {
        Ok(t) => t,
        Err(e) => return rejected(e, devices),
    };
    warnings.extend(t.warnings.iter().cloned());
    for w in &warnings {
        eprintln!("{w} (warning)");
    }
    let (nodes, circuits, prefixes) = t.counts();
    println!(
        "{name}: ok: {circuits} circuits, {prefixes} prefixes, {nodes} nodes{}",
        network.map_or(" (a flat network)".to_string(), |n| format!(
            " ({})",
            n.display()
        ))
    );
    print!("{}", describe(&t));
    Ok(ExitCode::SUCCESS)
}

/// One line per node (indented by depth) and one for the circuits under the link: the
/// node's rates and its circuits' count and summed minimums, download / upload.
fn describe(t: &Table) -> String {
    let mbit = |b: u64| format!("{:.0}", b as f64 / 1e6);
    let mut under = vec![(0usize, 0u64, 0u64); t.nodes.len() + 1];
    for c in &t.circuits {
        let slot = c.node.unwrap_or(t.nodes.len());
        under[slot].0 += 1;
        under[slot].1 += c.download_min_bps;
        under[slot].2 += c.upload_min_bps;
    }
    let mut s = format!(
        "{:<32} {:>17} {:>9} {:>17}\n",
        "node", "down/up Mbit/s", "circuits", "min down/up"
    );
    let depth = |mut i: usize| {
        let mut d = 0;
        while let Some(p) = t.nodes[i].parent {
            d += 1;
            i = p;
        }
        d
    };
    // depth-first, children after their parent (the list is parents first)
    let mut order: Vec<usize> = Vec::new();
    fn visit(t: &Table, parent: Option<usize>, order: &mut Vec<usize>) {
        for (i, n) in t.nodes.iter().enumerate() {
            if n.parent == parent {
                order.push(i);
                visit(t, Some(i), order);
            }
        }
    }
    visit(t, None, &mut order);
    for i in order {
        let n = &t.nodes[i];
        let label = format!(
            "{}{}{}",
            "  ".repeat(depth(i)),
            n.name,
            if n.virtual_node { " (virtual)" } else { "" }
        );
        let (k, d, u) = under[i];
        s.push_str(&format!(
            "{label:<32} {:>17} {k:>9} {:>17}\n",
            format!("{}/{}", mbit(n.download_bps), mbit(n.upload_bps)),
            format!("{}/{}", mbit(d), mbit(u))
        ));
    }
    let (k, d, u) = under[t.nodes.len()];
    if k > 0 {
        s.push_str(&format!(
            "{:<32} {:>17} {k:>9} {:>17}\n",
            "(under the link)",
            "-",
            format!("{}/{}", mbit(d), mbit(u))
        ));
    }
    s
}
