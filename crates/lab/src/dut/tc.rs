//! Running `tc` in the DUT namespace (one command, or a whole tree with `tc -batch`),
//! removing what a DUT left on its ports, and the kernel's counters: `tc -s -j qdisc show`
//! and `tc -s class show`, the latter parsed into JSON ([`parse_tc_classes`]).

use std::process::Command;

use serde_json::{json, Value};

use crate::sys::{check_output, run_cmd, run_with_stdin};
use crate::topo::{DutPlace, Netns};
use crate::{Error, Result};

/// Deletes the root qdiscs of `lan0` and `wan0` (whatever is there; errors for "nothing to
/// delete" are expected and not reported).
pub(super) fn clean_qdiscs(place: DutPlace<'_>, errors: &mut Vec<String>) {
    for dev in [place.lan, place.wan] {
        match tc(place.ns, &["qdisc", "del", "dev", dev, "root"]) {
            Ok(_) => {}
            Err(e) => {
                let s = e.to_string();
                let benign = s.contains("handle of zero")
                    || s.contains("No such file")
                    || s.contains("Invalid handle")
                    || s.contains("Cannot find specified qdisc");
                if !benign {
                    errors.push(s);
                }
            }
        }
    }
}

/// `tc -n NS ARGS…`, checked; its standard output.
fn tc(ns: &Netns, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("tc");
    if !ns.is_host() {
        cmd.args(["-n", ns.name()]);
    }
    cmd.args(args);
    let out = run_cmd(&mut cmd)?;
    check_output(
        &format!("[netns {}] tc {}", ns.name(), args.join(" ")),
        &out,
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `lines` (each a full `tc …` command) with one `tc -batch -` in `ns`. A failure names
/// the command that failed.
pub(crate) fn tc_batch(ns: &Netns, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut text = String::new();
    for l in lines {
        text.push_str(l.strip_prefix("tc ").unwrap_or(l));
        text.push('\n');
    }
    let mut cmd = Command::new("tc");
    if !ns.is_host() {
        cmd.args(["-n", ns.name()]);
    }
    cmd.args(["-batch", "-"]);
    let out = run_with_stdin(&mut cmd, text, "tc -batch")?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    // "Command failed -:LINE"
    let failed = stderr
        .rsplit_once("Command failed -:")
        .and_then(|(_, n)| n.trim().parse::<usize>().ok())
        .and_then(|n| lines.get(n.wrapping_sub(1)));
    Err(Error::Command {
        cmd: match failed {
            Some(l) => format!("[netns {}] {l}", ns.name()),
            None => format!("[netns {}] tc -batch ({} commands)", ns.name(), lines.len()),
        },
        status: out.status.to_string(),
        stderr,
    })
}

/// `tc -s -j qdisc show` and `tc -s class show` (parsed) per device.
pub(crate) fn tc_counters(ns: &Netns, devs: &[String], errors: &mut Vec<String>) -> Value {
    let mut map = serde_json::Map::new();
    for dev in devs {
        let qdiscs = match tc(ns, &["-s", "-j", "qdisc", "show", "dev", dev]) {
            Ok(s) => serde_json::from_str::<Value>(&s).unwrap_or_else(|e| {
                errors.push(format!("tc qdisc JSON of {dev}: {e}"));
                Value::String(s)
            }),
            Err(e) => {
                errors.push(e.to_string());
                Value::Null
            }
        };
        // tc 6.1 prints HTB classes as text even with -j
        let classes = match tc(ns, &["-s", "class", "show", "dev", dev]) {
            Ok(s) => parse_tc_classes(&s),
            Err(e) => {
                errors.push(e.to_string());
                Value::Null
            }
        };
        map.insert(dev.clone(), json!({ "qdiscs": qdiscs, "classes": classes }));
    }
    Value::Object(map)
}

/// Parses `tc -s class show` text into a JSON array, one object per class: `kind`,
/// `classid`, `parent` (`"root"` for a root class), `leaf` (its qdisc handle), `params`
/// (the rest of the first line as written by tc, e.g. `prio 0 rate 2Mbit ceil 2Mbit …`),
/// and the counters `bytes`, `packets`, `dropped`, `overlimits`, `requeues`,
/// `backlog_bytes`, `backlog_packets`, `lended`, `borrowed`, `giants`, `tokens`, `ctokens`
/// where present.
pub fn parse_tc_classes(text: &str) -> Value {
    let mut out = Vec::new();
    let mut cur: Option<serde_json::Map<String, Value>> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("class ") {
            if let Some(c) = cur.take() {
                out.push(Value::Object(c));
            }
            let mut m = serde_json::Map::new();
            let toks: Vec<&str> = rest.split_whitespace().collect();
            let mut i = 0;
            if let Some(k) = toks.first() {
                m.insert("kind".into(), json!(k));
                i = 1;
            }
            if let Some(id) = toks.get(i) {
                m.insert("classid".into(), json!(id));
                i += 1;
            }
            loop {
                match toks.get(i).copied() {
                    Some("root") => {
                        m.insert("parent".into(), json!("root"));
                        i += 1;
                    }
                    Some(k @ ("parent" | "leaf")) if i + 1 < toks.len() => {
                        m.insert(k.into(), json!(toks[i + 1]));
                        i += 2;
                    }
                    _ => break,
                }
            }
            m.insert("params".into(), json!(toks[i.min(toks.len())..].join(" ")));
            cur = Some(m);
            continue;
        }
        let Some(m) = cur.as_mut() else { continue };
        let toks: Vec<String> = line
            .split_whitespace()
            .map(|t| t.trim_matches(|c| c == '(' || c == ')' || c == ',' || c == ':'))
            .map(str::to_string)
            .collect();
        let num = |s: &str| s.parse::<i64>().ok();
        for (i, t) in toks.iter().enumerate() {
            let next = toks.get(i + 1).map(String::as_str).unwrap_or("");
            match t.as_str() {
                "Sent" => {
                    if let Some(n) = num(next) {
                        m.insert("bytes".into(), json!(n));
                    }
                    if let (Some(p), Some("pkt")) = (
                        toks.get(i + 3).and_then(|s| num(s)),
                        toks.get(i + 4).map(String::as_str),
                    ) {
                        m.insert("packets".into(), json!(p));
                    }
                }
                "backlog" => {
                    if let Some(b) = next.strip_suffix('b').and_then(num) {
                        m.insert("backlog_bytes".into(), json!(b));
                    }
                    if let Some(p) = toks
                        .get(i + 2)
                        .and_then(|s| s.strip_suffix('p'))
                        .and_then(num)
                    {
                        m.insert("backlog_packets".into(), json!(p));
                    }
                }
                k @ ("dropped" | "overlimits" | "requeues" | "lended" | "borrowed" | "giants"
                | "tokens" | "ctokens") => {
                    if let Some(n) = num(next) {
                        m.entry(k.to_string()).or_insert(json!(n));
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(c) = cur.take() {
        out.push(Value::Object(c));
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_class_text_is_parsed() {
        let text = "class htb 1:11 parent 1:1 leaf 11: prio 0 rate 200bit ceil 20Kbit burst 1600b cburst 1600b \n Sent 496 bytes 6 pkt (dropped 1, overlimits 2 requeues 3) \n backlog 10b 1p requeues 3\n lended: 6 borrowed: 0 giants: 0\n tokens: 782561907 ctokens: -9562500\n\nclass htb 1:1 root rate 10Mbit overhead 24 ceil 10Mbit burst 2762b cburst 2762b \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n";
        let v = parse_tc_classes(text);
        assert_eq!(v[0]["classid"], "1:11");
        assert_eq!(v[0]["parent"], "1:1");
        assert_eq!(v[0]["leaf"], "11:");
        assert_eq!(v[0]["bytes"], 496);
        assert_eq!(v[0]["packets"], 6);
        assert_eq!(v[0]["dropped"], 1);
        assert_eq!(v[0]["overlimits"], 2);
        assert_eq!(v[0]["requeues"], 3);
        assert_eq!(v[0]["backlog_bytes"], 10);
        assert_eq!(v[0]["backlog_packets"], 1);
        assert_eq!(v[0]["lended"], 6);
        assert_eq!(v[0]["ctokens"], -9562500);
        assert!(v[0]["params"]
            .as_str()
            .unwrap()
            .starts_with("prio 0 rate 200bit"));
        assert_eq!(v[1]["classid"], "1:1");
        assert_eq!(v[1]["parent"], "root");
        assert_eq!(v[1]["bytes"], 0);
    }
}
