//! Queues and active queue management, each a [`crate::Qdisc`]: the drop-tail FIFO
//! ([`fifo`]), RED ([`red`]), three-colour RED ([`gred`]), per-flow queuing ([`pfq`]),
//! flow queuing with sparse-flow priority, host isolation and CoDel/COBALT ([`fq`]; the
//! FIFO with an AQM is [`crate::aqm::fifo`]) and the token-bucket-filter shaper ([`tbf`]);
//! [`lazy`] builds a leaf's queue on first use and frees it when idle (subscriber circuits);
//! [`setassoc`] is the set-associative bucket lookup `pfq` and `fq` share. Each file opens
//! with its design comment.

pub mod fifo;
pub mod fq;
pub mod gred;
pub mod lazy;
pub mod pfq;
pub mod red;
pub mod setassoc;
pub mod tbf;
