//! Statistics of the labs, each following a paper's definition and unit-tested on
//! hand-computed examples:
//!
//! - [`table4`]: seed 000's Table 4 per class over runs (accuracy and its stability,
//!   fairness and its stability, Jain's index, retransmission ratio), and its table/CSV;
//! - [`dist`]: percentiles (numpy's linear rule) and distribution summaries of per-packet
//!   delays and gaps (seed 002);
//! - [`series`]: per-interval byte series: goodput over a window, byte-time lines and
//!   their slope, sliding means, time to reach a level;
//! - [`emodel`]: the ITU-T G.107 E-model (R factor, MOS) with G.113's codec values;
//! - [`voice`]: a voice stream's one-way delay, RFC 3550 jitter, loss, a fixed jitter
//!   buffer's late packets, and its E-model rating;
//! - [`skew`]: seed 004's one-way method between two clocks: the clock skew fitted by least
//!   squares or least absolute deviation, then per-packet delay and jitter, 100 ms bins of
//!   bandwidth, delay and jitter, and losses by sequence number.
//!
//! Means, standard deviations, CoV and Jain's index themselves are `weir_core::stats`.

pub mod dist;
pub mod emodel;
pub mod series;
pub mod skew;
pub mod table4;
pub mod voice;
