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
///
/// The details live behind one pointer so that every `Result` on the decode path stays two
/// words wide and is returned in registers; see [`Error::kind`].
#[derive(Debug)]
pub struct Error {
    kind: Box<ErrorKind>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kind.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.kind {
            ErrorKind::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ErrorKind> for Error {
    #[cold]
    fn from(kind: ErrorKind) -> Self {
        Error {
            kind: Box::new(kind),
        }
    }
}

/// The kinds of [`Error`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
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
    #[error("I/O error at byte {offset}")]
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
    #[cold]
    #[inline(never)]
    pub(crate) fn malformed(offset: u64, what: &'static str, detail: impl Into<String>) -> Self {
        ErrorKind::Malformed {
            offset: StreamOffset(offset),
            what,
            detail: detail.into(),
        }
        .into()
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn eof(offset: u64, what: &'static str) -> Self {
        ErrorKind::UnexpectedEof {
            offset: StreamOffset(offset),
            what,
        }
        .into()
    }

    #[cold]
    pub(crate) fn invalid_input(what: impl Into<String>) -> Self {
        ErrorKind::InvalidInput(what.into()).into()
    }

    #[cold]
    pub(crate) fn unsupported(what: impl Into<String>) -> Self {
        ErrorKind::Unsupported(what.into()).into()
    }

    #[cold]
    pub(crate) fn io(offset: u64, source: std::io::Error) -> Self {
        ErrorKind::Io {
            offset: StreamOffset(offset),
            source,
        }
        .into()
    }

    #[cold]
    pub(crate) fn undefined(offset: StreamOffset, what: &'static str, id: u64) -> Self {
        ErrorKind::UndefinedReference { offset, what, id }.into()
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The stream offset the error refers to, when it has one.
    pub fn offset(&self) -> Option<StreamOffset> {
        match &*self.kind {
            ErrorKind::UnexpectedEof { offset, .. }
            | ErrorKind::Malformed { offset, .. }
            | ErrorKind::UndefinedReference { offset, .. }
            | ErrorKind::Io { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}
