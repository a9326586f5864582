//! Queues and active queue management, each a [`crate::Qdisc`]: the drop-tail FIFO
//! ([`fifo`]), RED ([`red`]), three-colour RED ([`gred`]), per-flow queuing ([`pfq`]) and
//! the token-bucket-filter shaper ([`tbf`]). Each file opens with its design comment.

pub mod fifo;
pub mod gred;
pub mod pfq;
pub mod red;
pub mod setassoc;
pub mod tbf;
