//! Typed errors: every failure names what was being read and the absolute byte offset.

use std::fmt;

/// A byte offset from the start of the trace stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamOffset(pub u64);

impl fmt::Display for StreamOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What went wrong while reading or writing a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ended before a value was complete.
    #[error("unexpected end of input at byte {offset} while reading {what}")]
    UnexpectedEof {
        /// Where the incomplete value starts.
        offset: StreamOffset,
        /// What was being read.
        what: &'static str,
    },
    /// The bytes do not match the format.
    #[error("malformed trace at byte {offset}: {what}: {detail}")]
    Malformed {
        /// Where the bad value is.
        offset: StreamOffset,
        /// What was being read.
        what: &'static str,
        /// What was expected and what was found.
        detail: String,
    },
    /// The stream is a format version this crate does not read.
    #[error("unsupported trace format: {0}")]
    Unsupported(String),
    /// An event refers to metadata, a stack, a thread or a label list the stream never defined.
    #[error("at byte {offset}: event refers to undefined {what} {id}")]
    UndefinedReference {
        /// Where the referring event is.
        offset: StreamOffset,
        /// The kind of row referred to.
        what: &'static str,
        /// The id that was referred to.
        id: u64,
    },
    /// A payload does not fit its metadata.
    #[error("payload of {event} does not match its metadata at field `{field}`: {detail}")]
    Payload {
        /// `Provider/Event` of the event being decoded.
        event: String,
        /// The field being decoded.
        field: String,
        /// What went wrong.
        detail: String,
    },
    /// A writer was given something it cannot encode.
    #[error("cannot write trace: {0}")]
    InvalidInput(String),
    /// The underlying reader or writer failed.
    #[error("I/O error at byte {offset}: {source}")]
    Io {
        /// How far the stream had got.
        offset: StreamOffset,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn malformed(offset: u64, what: &'static str, detail: impl Into<String>) -> Self {
        Error::Malformed {
            offset: StreamOffset(offset),
            what,
            detail: detail.into(),
        }
    }

    pub(crate) fn eof(offset: u64, what: &'static str) -> Self {
        Error::UnexpectedEof {
            offset: StreamOffset(offset),
            what,
        }
    }

    /// The stream offset the error refers to, when it has one.
    pub fn offset(&self) -> Option<StreamOffset> {
        match self {
            Error::UnexpectedEof { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::UndefinedReference { offset, .. }
            | Error::Io { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}
