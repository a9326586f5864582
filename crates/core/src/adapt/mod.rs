//! Adaptive controllers: they watch the path beyond weir (probes' round-trip times) and
//! the classes' queues, and set the shaped link's rate and the classes' weights at run
//! time. Postgate (seed 003) in [`postgate`]; a delay-based autorate after cake-autorate in
//! [`autorate`].

pub mod autorate;
pub mod postgate;
