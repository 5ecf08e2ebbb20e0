use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong speaking the protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A message broke the protocol: what was wrong and where.
    #[error("malformed diagnostics message: {0}")]
    Malformed(String),
    /// The server answered with an error code.
    #[error("the diagnostics server refused the command: {0}")]
    Refused(ServerError),
    /// An I/O operation failed; `what` names it.
    #[error("{what}")]
    Io {
        /// The operation, with the path or peer it concerned.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No diagnostics socket exists for the process.
    #[error("no diagnostics socket for process {pid} in {dir} (is it running with diagnostics enabled?)")]
    NoSocket {
        /// The process id.
        pid: u32,
        /// The directory searched.
        dir: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    pub(crate) fn malformed(what: impl Into<String>) -> Error {
        Error::Malformed(what.into())
    }
}

/// An HRESULT the server answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerError(pub u32);

impl ServerError {
    /// The message could not be decoded.
    pub const BAD_ENCODING: ServerError = ServerError(0x8013_1384);
    /// The command set/id is not known.
    pub const UNKNOWN_COMMAND: ServerError = ServerError(0x8013_1385);
    /// The magic is wrong.
    pub const UNKNOWN_MAGIC: ServerError = ServerError(0x8013_1386);
    /// The command is known but not supported.
    pub const NOT_SUPPORTED: ServerError = ServerError(0x8013_1515);
    /// Generic failure.
    pub const FAIL: ServerError = ServerError(0x8000_4005);
    /// An argument is invalid.
    pub const INVALID_ARG: ServerError = ServerError(0x8007_0057);

    fn meaning(self) -> &'static str {
        match self {
            Self::BAD_ENCODING => "bad encoding",
            Self::UNKNOWN_COMMAND => "unknown command",
            Self::UNKNOWN_MAGIC => "unknown magic",
            Self::NOT_SUPPORTED => "not supported",
            Self::FAIL => "failure",
            Self::INVALID_ARG => "invalid argument",
            ServerError(0x8013_135b) => "not yet available",
            ServerError(0x8013_1371) => "runtime uninitialized",
            ServerError(0x8007_007A) => "insufficient buffer",
            _ => "unrecognised error code",
        }
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x} ({})", self.0, self.meaning())
    }
}
