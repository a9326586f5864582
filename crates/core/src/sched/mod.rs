//! Schedulers: the hierarchical link-sharing scheduler ([`linkshare`]) and the data
//! structures it is built from ([`heap`]: indexed d-ary heaps for time-keyed events,
//! [`rrset`]: id-ordered round-robin sets). Each file opens with its design comment.

pub mod heap;
pub mod linkshare;
pub mod rrset;
