use std::path::PathBuf;

use crate::command::ServerError;

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
    #[error("{what}: {source}")]
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
