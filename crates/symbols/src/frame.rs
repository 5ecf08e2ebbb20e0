//! The resolved-frame model the symbolizer produces: one function (or a stand-in naming
//! the module and offset, the bare address, a thread state) and how it was resolved.
//!
//! A profile (`eventpipe-insight`'s `Profile`) interns these frames; the live heap
//! (`eventpipe-heap`) names its allocation sites from them.

/// Where a frame's code comes from, and how well it was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Native (Rust, C) code resolved through a module's symbols.
    Native,
    /// .NET JIT'd or ReadyToRun code resolved through method load/rundown events.
    Managed,
    /// An address in a known module that has no symbol for it (stripped or missing
    /// binary); `function` reads `module+0xOFFSET`.
    ModuleOffset,
    /// An address in no known module; `function` reads `0xADDRESS`.
    Unknown,
    /// An instrumented future's poll, from the async profiler's poll stack: `function`
    /// reads `async PATH` (`eventpipe_insight::async_trace`).
    Async,
    /// Not code: what the thread was doing, at a stack's leaf (a .NET sample taken outside
    /// managed code ends in `eventpipe_insight::EXTERNAL_CODE_FRAME`), or the mark at the root end of
    /// a stack the sampler could not finish (`[truncated]`).
    ThreadState,
    /// Not code: a type, in a heap snapshot's retention view or at the leaf of a .NET
    /// runtime sample's stack (the type allocated or thrown: `Type System.String`).
    HeapType,
}

/// One function: what a stack frame is in every view. Samples at different lines of one
/// function are the same frame; a profile keeps their lines beside the stack
/// (`eventpipe_insight::Sample::lines`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled (`alloc::vec::Vec<T>::push`, `System.String.Concat(...)`),
    /// or a fallback naming the module and offset or the bare address.
    pub function: String,
    /// The module's file name (no directory), when known.
    pub module: Option<String>,
    /// The source file, when debug info has it.
    pub file: Option<String>,
    /// A source line: as the symbolizer resolved one address, or, in a profile
    /// (`eventpipe_insight::Profile`), the lowest line any sample was at (the nearest to the
    /// function's start), for formats that keep one line per function.
    pub line: Option<u32>,
    /// How the frame was resolved.
    pub kind: FrameKind,
}

impl Frame {
    /// A frame known only by its function name.
    pub fn named(function: impl Into<String>, kind: FrameKind) -> Frame {
        Frame {
            function: function.into(),
            module: None,
            file: None,
            line: None,
            kind,
        }
    }
}
