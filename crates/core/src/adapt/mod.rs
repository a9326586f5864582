//! Adaptive controllers: they watch the path beyond weir (probes' round-trip times) and
//! the classes' queues, and set the shaped link's rate and the classes' weights at run
//! time. Postgate (seed 003) in [`postgate`]; a delay-based autorate after cake-autorate in
//! [`autorate`].

pub mod autorate;
pub mod postgate;

/// A validated `[adapt]`: the probes and the controller (Postgate or the autorate).
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptDef {
    /// The hosts probed: Postgate's one router near the far end of the line, or the
    /// autorate's reflectors.
    pub targets: Vec<std::net::Ipv4Addr>,
    /// The next hop towards every target (else each target is its own next hop).
    pub gateway: Option<std::net::Ipv4Addr>,
    /// The probes' source address; weir answers ARP for it.
    pub source: std::net::Ipv4Addr,
    /// Time between two probes to one target.
    pub interval: crate::time::Duration,
    /// No reply for this long: fall back to the floor rate.
    pub timeout: crate::time::Duration,
    /// The shaped direction, in which the replies arrive (the probes leave in the other).
    pub shaped: crate::pool::Direction,
    /// The leaf classes (indices into `Policy::classes`) the controller sets, in the
    /// order of Postgate's weights.
    pub classes: Vec<usize>,
    pub mode: AdaptMode,
}

/// The controller of an [`AdaptDef`], with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum AdaptMode {
    Postgate(crate::adapt::postgate::PostgateConfig),
    Autorate(crate::adapt::autorate::AutorateConfig),
}

impl AdaptMode {
    /// As written in `mode = "…"`.
    pub fn name(&self) -> &'static str {
        match self {
            AdaptMode::Postgate(_) => "postgate",
            AdaptMode::Autorate(_) => "autorate",
        }
    }
}

/// Where a controlled class starts: its policy settings, as the controller needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptClassDef {
    pub name: String,
    /// Index of the class in its policy (TCP rate control's class id).
    pub index: usize,
    /// Assured rate and ceil, bit/s.
    pub rate: u64,
    pub ceil: u64,
    /// Rate and ceil bucket depths, bytes.
    pub burst: u32,
    pub cburst: u32,
}

/// An adaptive controller as the device builds it: the `[adapt]` section and the classes
/// it sets, resolved from the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptConfig {
    pub def: AdaptDef,
    /// The root class (the shaped link).
    pub root: AdaptClassDef,
    /// The controlled leaves, in the order of `def.classes`.
    pub leaves: Vec<AdaptClassDef>,
    /// How the policy's rates count a frame.
    pub framing: crate::framing::Framing,
}
