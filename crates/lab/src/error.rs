//! The testbed's error type: one for namespaces, agents, DUTs and labs, so that a lab run
//! can pass any of them up with `?` and the command line prints one message.

/// Errors of the testbed (namespaces and agents).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not running as root.
    #[error("weir lab needs root (CAP_NET_ADMIN) to create network namespaces; run as root")]
    NotRoot,
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An external command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status, as text.
        status: String,
        /// What it printed on standard error (trimmed).
        stderr: String,
    },
    /// A bad argument (interface name too long, malformed address, …).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Result with the testbed's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The message without [`Error::Invalid`]'s "invalid argument: " prefix, for an
    /// error wrapped in another's message.
    pub fn message(&self) -> String {
        match self {
            Error::Invalid(m) => m.clone(),
            e => e.to_string(),
        }
    }

    /// An [`Error::Io`] with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
