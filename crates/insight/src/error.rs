//! The one error type of the converters.

use std::io;

/// Why a conversion failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Writing the output failed.
    #[error("writing the output failed")]
    Io(#[from] io::Error),
    /// Serializing JSON failed (in practice: the writer under it failed).
    #[error("writing JSON failed")]
    Json(#[from] serde_json::Error),
    /// The trace could not be read. Converters that stream close their output first, so
    /// what was written is a valid document ending where the trace became unreadable.
    #[error("the trace does not read")]
    Trace(#[from] nettrace::Error),
    /// The profile breaks one of [`crate::Profile`]'s invariants (its fields are public, so
    /// a caller can build one that does).
    #[error("inconsistent profile: {0}")]
    InvalidProfile(String),
    /// The profile has no sample with a weight, and the output format cannot be empty.
    #[error("profile {0:?} has no samples to draw")]
    EmptyProfile(String),
    /// A sampling session of a process brought no thread's samples (`ThreadStacks::read`).
    #[error(
        "{process} ({pid}) wrote no samples: a Rust program needs its CPU sampler registered \
         (eventpipe_profiler::cpu::register)"
    )]
    NoThreadSamples {
        /// The process's name.
        process: String,
        /// Its id.
        pid: u32,
    },
    /// Two profiles that cannot be compared.
    #[error("cannot compare the profiles: {0}")]
    Diff(String),
    /// A value does not fit the output format's integer type.
    #[error("{what} = {value} does not fit the output format's 64-bit signed integer")]
    Overflow {
        /// Which value.
        what: &'static str,
        /// Its exact value.
        value: u128,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
