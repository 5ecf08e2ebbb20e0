//! The ids the async profiler's records and the model built from them share: a site's
//! and a future instance's.

use std::fmt;

/// An instrumented site's id (`FrameId` in the format; nonzero in a valid trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct AsyncFrameId(pub u32);

/// One instrumented future instance's id (nonzero in a valid trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContextId(pub u64);

impl fmt::Display for AsyncFrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame#{}", self.0)
    }
}

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ctx#{}", self.0)
    }
}
