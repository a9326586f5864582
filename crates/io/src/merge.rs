//! One document from the workers' own (`weir run --workers N`): the statistics, the
//! final report and a reload's answer are each worker's JSON document merged into one,
//! so that `weir stats`, the web page, `/metrics` and scripts see one weir.
//!
//! The rule, applied recursively ([`merge`]):
//! * numbers add up (packets, bytes, drops, rates now, flows) — except those that are
//!   not amounts ([`MAX_KEYS`]: instants, generations, durations, maxima and means take
//!   the largest; [`FIRST_KEYS`]: configuration, such as a histogram's bucket bounds,
//!   is the same in every worker and taken once);
//! * objects merge key by key; a key only one worker has is taken as it is;
//! * arrays of objects that have a `"name"` (or else a `"class"`: admission) merge by
//!   it (classes, applications), in the order first seen, so a class every worker has (the
//!   link) appears once with its counters summed and a circuit (one worker's) as it is;
//!   arrays of numbers of equal length add element-wise (histogram counts); other arrays
//!   are joined (without repeating an equal element: a reload's class names);
//! * strings, booleans and nulls: the first worker's (a `null` gives way to a value;
//!   booleans are or-ed, so "some worker holds a backlog" reads true).
//!
//! A shared class's configured rate and ceil in a worker's snapshot are its part (the
//! coordinator's), which add up to the class's; a class every worker keeps unshared (a
//! written leaf: all its traffic reaches one worker) would add up to N times its rate, so
//! `rate_bps` and `ceil_bps` take the largest, and each worker writes its shared
//! classes' whole rates into its own document before (`bridge::workers`).

use serde_json::{Map, Value};

/// Keys whose values are not amounts: the largest is kept.
pub const MAX_KEYS: &[&str] = &[
    "uptime_s",
    "at_ns",
    "seconds",
    "generation",
    "policy_generation",
    "reloads",
    "reloads_refused",
    "reloads_throttled",
    "timeout_ms",
    "late_max_us",
    "late_mean_us",
    "catch_up_limit_us",
    "last_ms",
    "max_ms",
    "mean_ms",
    "last_cpu_ms",
    "applied_ms",
    "rate_bps",
    "ceil_bps",
    "max_flows",
];

/// Keys whose values are configuration, the same in every worker: the first is kept.
pub const FIRST_KEYS: &[&str] = &["rtt_bounds_us", "mtu"];

/// Merge `b` into `a`; `key` is the name `a` has in its parent object ("" at the top).
pub fn merge(a: &mut Value, b: &Value, key: &str) {
    if FIRST_KEYS.contains(&key) {
        if a.is_null() {
            *a = b.clone();
        }
        return;
    }
    match (&mut *a, b) {
        (Value::Null, _) => *a = b.clone(),
        (_, Value::Null) => {}
        (Value::Number(x), Value::Number(y)) => *a = add(x, y, MAX_KEYS.contains(&key)),
        (Value::Bool(x), Value::Bool(y)) => *x |= *y,
        (Value::Object(x), Value::Object(y)) => merge_objects(x, y),
        (Value::Array(x), Value::Array(y)) => merge_arrays(x, y, key),
        _ => {} // strings, or kinds that differ: the first worker's
    }
}

/// Merge all of `docs` (at least one) into the first.
pub fn merge_all(docs: Vec<Value>) -> Value {
    let mut it = docs.into_iter();
    let mut acc = it.next().unwrap_or(Value::Null);
    for d in it {
        merge(&mut acc, &d, "");
    }
    acc
}

fn add(x: &serde_json::Number, y: &serde_json::Number, max: bool) -> Value {
    if let (Some(p), Some(q)) = (x.as_u64(), y.as_u64()) {
        return Value::from(if max { p.max(q) } else { p.saturating_add(q) });
    }
    if let (Some(p), Some(q)) = (x.as_i64(), y.as_i64()) {
        return Value::from(if max { p.max(q) } else { p.saturating_add(q) });
    }
    let (p, q) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
    Value::from(if max { p.max(q) } else { p + q })
}

fn merge_objects(a: &mut Map<String, Value>, b: &Map<String, Value>) {
    for (k, v) in b {
        match a.get_mut(k) {
            Some(x) => merge(x, v, k),
            None => {
                a.insert(k.clone(), v.clone());
            }
        }
    }
}

/// What names an element of an array: its `"name"`, else its `"class"` (admission).
fn name_of(v: &Value) -> Option<&str> {
    v.get("name")
        .or_else(|| v.get("class"))
        .and_then(Value::as_str)
}

fn merge_arrays(a: &mut Vec<Value>, b: &[Value], key: &str) {
    let named = |v: &[Value]| !v.is_empty() && v.iter().all(|e| name_of(e).is_some());
    if named(b) && (a.is_empty() || named(a)) {
        let mut at: std::collections::HashMap<String, usize> = a
            .iter()
            .enumerate()
            .filter_map(|(i, e)| name_of(e).map(|n| (n.to_string(), i)))
            .collect();
        for e in b {
            let n = name_of(e).unwrap_or_default();
            match at.get(n) {
                Some(&i) => merge(&mut a[i], e, key),
                None => {
                    at.insert(n.to_string(), a.len());
                    a.push(e.clone());
                }
            }
        }
        return;
    }
    let numbers = |v: &[Value]| v.iter().all(Value::is_number);
    if a.len() == b.len() && numbers(a) && numbers(b) {
        for (x, y) in a.iter_mut().zip(b) {
            merge(x, y, key);
        }
        return;
    }
    for e in b {
        if !a.contains(e) {
            a.push(e.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_add_instants_take_the_largest_configuration_is_taken_once() {
        let a = json!({"rx": {"packets": 3, "bytes": 300}, "uptime_s": 2.0, "rate_now_bps": 1.5,
                       "rtt_bounds_us": [500, 595], "lan": "lan0", "enabled": false});
        let b = json!({"rx": {"packets": 4, "bytes": 400}, "uptime_s": 2.5, "rate_now_bps": 2.0,
                       "rtt_bounds_us": [500, 595], "lan": "lan0", "enabled": true, "extra": 7});
        let m = merge_all(vec![a, b]);
        assert_eq!(m["rx"], json!({"packets": 7, "bytes": 700}));
        assert_eq!(m["uptime_s"], json!(2.5));
        assert_eq!(m["rate_now_bps"], json!(3.5));
        assert_eq!(m["rtt_bounds_us"], json!([500, 595]));
        assert_eq!(m["lan"], json!("lan0"));
        assert_eq!(m["enabled"], json!(true));
        assert_eq!(m["extra"], json!(7));
    }

    #[test]
    fn classes_merge_by_name_and_histograms_add_element_wise() {
        let a = json!({"classes": [
            {"name": "link", "sent": {"bytes": 100}, "rate_bps": 6, "tcp": {"rtt": {"counts": [1, 2]}}},
            {"name": "c1", "sent": {"bytes": 60}, "rate_bps": 2}]});
        let b = json!({"classes": [
            {"name": "link", "sent": {"bytes": 50}, "rate_bps": 4, "tcp": {"rtt": {"counts": [3, 0]}}},
            {"name": "c2", "sent": {"bytes": 50}, "rate_bps": 3}]});
        let m = merge_all(vec![a, b]);
        let names: Vec<&str> = m["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["link", "c1", "c2"]);
        assert_eq!(m["classes"][0]["sent"]["bytes"], json!(150));
        assert_eq!(m["classes"][0]["rate_bps"], json!(6), "the largest part");
        assert_eq!(m["classes"][0]["tcp"]["rtt"]["counts"], json!([4, 2]));
        assert_eq!(m["classes"][2]["sent"]["bytes"], json!(50));
    }

    #[test]
    fn admission_entries_merge_by_their_class() {
        let a = json!({"admission": [{"class": "voice", "admitted": 2, "refused": 0}]});
        let b = json!({"admission": [{"class": "voice", "admitted": 3, "refused": 1}]});
        let m = merge_all(vec![a, b]);
        assert_eq!(
            m["admission"],
            json!([{"class": "voice", "admitted": 5, "refused": 1}])
        );
    }

    #[test]
    fn other_arrays_join_without_repeating_and_nulls_give_way() {
        let a = json!({"classes_changed": ["link"], "tcr": null, "talkers": [{"addr": "a"}]});
        let b = json!({"classes_changed": ["link", "c9"], "tcr": {"acks": 2},
                       "talkers": [{"addr": "b"}]});
        let m = merge_all(vec![a, b]);
        assert_eq!(m["classes_changed"], json!(["link", "c9"]));
        assert_eq!(m["tcr"], json!({"acks": 2}));
        assert_eq!(m["talkers"], json!([{"addr": "a"}, {"addr": "b"}]));
    }
}
