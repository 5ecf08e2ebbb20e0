//! Traces that were cut off (the collector killed, the disk full, a copy interrupted):
//! `report`, `dump` and `convert` read them up to their last whole block, write what that
//! covers, then say where and why the trace ends early and exit with status 3
//! ([`CutTrace`]). `--require-complete` makes a cut trace an error instead (status 1,
//! nothing written).

use nettrace::source::Input;
use nettrace::{TraceReader, Truncation};

/// Whether a command reads a cut-off trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CutTraces {
    /// Read up to the last whole block, then say so.
    Read,
    /// The cut is an error.
    Refuse,
}

impl CutTraces {
    pub(crate) fn from_flag(require_complete: bool) -> CutTraces {
        if require_complete {
            CutTraces::Refuse
        } else {
            CutTraces::Read
        }
    }

    /// `reader`, accepting a cut or not.
    pub(crate) fn apply<I: Input>(self, reader: TraceReader<I>) -> TraceReader<I> {
        reader.accept_truncation(self == CutTraces::Read)
    }
}

/// The outcome of reading a cut trace: what was written is good, but it is not the whole
/// trace. `main` prints it as a warning and exits with status 3.
#[derive(Debug)]
pub(crate) struct CutTrace(pub(crate) String);

impl std::fmt::Display for CutTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CutTrace {}

/// The exit status of a command that read a cut trace.
pub(crate) const EXIT_STATUS: u8 = 3;

/// What to say of a trace `name` cut at `cut`, after `events` events were read.
pub(crate) fn describe(name: &str, cut: &Truncation, events: u64) -> String {
    format!(
        "{name} ends early: the input stops at byte {} inside a {} (the trace was cut off: \
         its collector killed, its disk full or a copy interrupted); what was written covers \
         the {events} events before it (--require-complete makes this an error)",
        cut.offset, cut.what
    )
}

/// `Ok` for a whole trace; the [`CutTrace`] to return for a cut one.
pub(crate) fn verdict(name: &str, cut: Option<&Truncation>, events: u64) -> anyhow::Result<()> {
    match cut {
        None => Ok(()),
        Some(cut) => Err(CutTrace(describe(name, cut, events)).into()),
    }
}
