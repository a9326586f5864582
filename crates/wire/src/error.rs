//! The crate's error type.

use core::fmt;

/// Why a buffer could not be parsed, or an operation could not be done.
///
/// The `&'static str` payloads are short human-readable reasons, meant for
/// logs and counters, not for matching on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field claims.
    Truncated,
    /// A field holds a value that is impossible for the protocol.
    Malformed(&'static str),
    /// The input is well-formed but uses a feature this crate does not handle
    /// (e.g. more than two VLAN tags), or the requested edit does not apply.
    Unsupported(&'static str),
    /// An output buffer (see [`crate::build`]) is too small for what must be written.
    BufferTooSmall,
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::Malformed(why) => write!(f, "malformed packet: {why}"),
            Error::Unsupported(why) => write!(f, "unsupported: {why}"),
            Error::BufferTooSmall => f.write_str("output buffer too small"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        assert_eq!(Error::Truncated.to_string(), "truncated packet");
        assert_eq!(
            Error::Malformed("IHL < 5").to_string(),
            "malformed packet: IHL < 5"
        );
        assert_eq!(Error::Unsupported("x").to_string(), "unsupported: x");
        assert_eq!(Error::BufferTooSmall.to_string(), "output buffer too small");
    }
}
