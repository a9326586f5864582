//! Splitting a policy with a subscriber table into N shards (`weir run --workers N`).
//!
//! * **Who owns what.** The table's top-level classes — the nodes and circuits directly
//!   under its attach point — are dealt to shards as LibreQoS deals its top-level nodes to
//!   CPUs: heaviest first (by the larger of the download and upload ceiling), each to the
//!   shard with the least weight so far (ties: the lowest shard). A top-level class and
//!   everything under it belong to one shard, so a circuit's classes, queue and
//!   connections stay on one worker.
//! * **What every shard keeps.** The link, the classes of the policy itself (written
//!   `[[class]]`es, idle in all but the shard that receives what no circuit covers) and the
//!   attach point's ancestors — the classes that span shards, whose rates the
//!   [`super::Coordinator`] re-divides at run time.
//! * **Each shard's policy** ([`Plan::policy`]): those classes, re-indexed (parents first,
//!   as everywhere), its circuits' prefixes in its classifier table, the rules whose class
//!   it has (a rule for another shard's circuit is left out: that circuit's packets never
//!   reach this shard).
//! * **Steering** ([`Plan::steering`]): every circuit prefix → its shard, for the fanout
//!   program (`io::fanout`).
//!
//! A policy without a table is one shard's worth: every class in shard 0 (a policy of
//! hand-written classes cannot be split without changing what its classes share).

use crate::classify::lpm::{Nesting, PrefixTable};
use crate::classify::IpNet;
use crate::policy::{Policy, SubscriberClass, Subscribers};
use std::sync::Arc;

/// The shards of a policy; see the module comment.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per class of the policy: its shard, or `None` for a class every shard keeps.
    pub owner: Vec<Option<usize>>,
    /// Per shard: the weight it was dealt (bit/s of ceilings).
    pub load: Vec<u64>,
}

/// Deal `weights` to `shards` bins, heaviest first, each to the lightest bin so far
/// (LibreQoS's bin-packing of top-level nodes onto CPUs). Returns each item's bin.
pub fn deal(weights: &[u64], shards: usize) -> Vec<usize> {
    let n = shards.max(1);
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(weights[i]), i));
    let mut load = vec![0u64; n];
    let mut bin = vec![0; weights.len()];
    for i in order {
        let b = (0..n).min_by_key(|&b| (load[b], b)).unwrap_or(0);
        bin[i] = b;
        load[b] += weights[i];
    }
    bin
}

impl Plan {
    /// Split `p` into `shards` (≥ 1).
    pub fn new(p: &Policy, shards: usize) -> Plan {
        let n = shards.max(1);
        let classes = &p.classes;
        // the table's top-level classes: subscriber classes whose parent is not one
        let top: Vec<usize> = (0..classes.len())
            .filter(|&k| {
                classes[k].subscriber.is_some()
                    && classes[k]
                        .parent
                        .is_none_or(|q| classes[q].subscriber.is_none())
            })
            .collect();
        let weight = |k: usize| {
            let c = &classes[k];
            c.ceil.max(c.inbound.map_or(0, |d| d.ceil))
        };
        let weights: Vec<u64> = top.iter().map(|&k| weight(k)).collect();
        let bins = deal(&weights, n);
        let mut owner: Vec<Option<usize>> = vec![None; classes.len()];
        let mut load = vec![0u64; n];
        for (&k, (&b, &w)) in top.iter().zip(bins.iter().zip(&weights)) {
            owner[k] = Some(b);
            load[b] += w;
        }
        // descendants follow their top-level class (parents come first)
        for k in 0..classes.len() {
            if owner[k].is_none() && classes[k].subscriber.is_some() {
                owner[k] = classes[k].parent.and_then(|q| owner[q]);
            }
        }
        Plan { owner, load }
    }

    pub fn shards(&self) -> usize {
        self.load.len()
    }

    /// The names of the classes whose rates the shards share: the inner classes every
    /// shard keeps (the link, the table's attach point and its ancestors). A leaf every
    /// shard keeps is not shared: what no circuit covers reaches shard 0 only.
    pub fn shared(&self, p: &Policy) -> Vec<String> {
        p.classes
            .iter()
            .zip(&self.owner)
            .filter(|(c, o)| o.is_none() && !c.leaf)
            .map(|(c, _)| c.name.clone())
            .collect()
    }

    /// Every circuit prefix and the shard that owns it (for the fanout program).
    pub fn steering(&self, p: &Policy) -> Vec<(IpNet, u32)> {
        p.subscribers.as_ref().map_or(Vec::new(), |s| {
            s.entries
                .iter()
                .map(|&(net, class)| (net, self.owner[class as usize].unwrap_or(0) as u32))
                .collect()
        })
    }

    /// The policy shard `shard` runs (see the module comment).
    pub fn policy(&self, p: &Policy, shard: usize) -> Result<Policy, String> {
        if p.adapt.is_some() && self.shards() > 1 {
            return Err(
                "[adapt] cannot be split over workers: its controller shapes the whole link".into(),
            );
        }
        let keep: Vec<bool> = self
            .owner
            .iter()
            .map(|o| o.is_none_or(|s| s == shard))
            .collect();
        let mut index = vec![usize::MAX; p.classes.len()];
        let mut classes = Vec::new();
        for (k, c) in p.classes.iter().enumerate() {
            if keep[k] {
                index[k] = classes.len();
                let mut c = c.clone();
                c.parent = c.parent.map(|q| index[q]);
                classes.push(c);
            }
        }
        // an inner class kept for its other children may have lost them all here: a
        // subscriber node whose circuits all went elsewhere cannot happen (a top-level
        // class moves whole), and shared classes keep the table's other classes
        let mut q = p.clone();
        q.default_class = index[p.default_class];
        q.rules = p
            .rules
            .iter()
            .filter(|r| keep[r.class])
            .map(|r| {
                let mut r = r.clone();
                r.class = index[r.class];
                r
            })
            .collect();
        q.subscribers = match &p.subscribers {
            None => None,
            Some(s) => Some(shard_table(s, &self.owner, &index, shard)?),
        };
        let has_children: Vec<bool> = {
            let mut h = vec![false; classes.len()];
            for c in &classes {
                if let Some(q) = c.parent {
                    h[q] = true;
                }
            }
            h
        };
        for (k, c) in classes.iter().enumerate() {
            if !c.leaf && !has_children[k] {
                return Err(format!(
                    "shard {shard}: class '{}' has no children here (too few top-level nodes for {} workers?)",
                    c.name,
                    self.shards()
                ));
            }
        }
        if let Some(t) = &mut q.subscribers {
            let kind =
                |k: SubscriberClass| classes.iter().filter(|c| c.subscriber == Some(k)).count();
            t.circuits = kind(SubscriberClass::Circuit);
            t.nodes = kind(SubscriberClass::Node);
        }
        q.classes = classes;
        Ok(q)
    }
}

/// The subscriber table of one shard: its circuits' prefixes, classes re-indexed.
fn shard_table(
    s: &Subscribers,
    owner: &[Option<usize>],
    index: &[usize],
    shard: usize,
) -> Result<Subscribers, String> {
    let entries: Vec<(IpNet, u32)> = s
        .entries
        .iter()
        .filter(|&&(_, k)| owner[k as usize] == Some(shard))
        .map(|&(net, k)| (net, index[k as usize] as u32))
        .collect();
    let table = PrefixTable::build(&entries, Nesting::Reject).map_err(|e| e.to_string())?;
    Ok(Subscribers {
        table: Arc::new(table),
        prefixes: entries.len(),
        entries: Arc::new(entries),
        ..s.clone()
    })
}
