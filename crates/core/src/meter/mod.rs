//! Meters: the token bucket ([`token_bucket`]); the srTCM/trTCM markers of the DiffServ
//! stage will live here too.

pub mod token_bucket;
