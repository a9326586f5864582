//! Meters: the token bucket every rate limit in the engine counts with
//! ([`token_bucket`]); the srTCM/trTCM markers of the DiffServ stage will live here too.

pub mod token_bucket;
