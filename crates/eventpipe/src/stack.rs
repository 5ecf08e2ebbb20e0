//! The unwinder behind the stacks sessions ask for: `eventpipe_core` captures through the
//! walker installed here (the `backtrace` crate's frame walk).

/// Walks the calling thread's stack with `backtrace`, leaf first.
fn walk(frame: &mut dyn FnMut(usize) -> bool) {
    backtrace::trace(|f| frame(f.ip() as usize));
}

/// Installs the walker; every session start calls it (only the first call does anything).
pub(crate) fn install() {
    eventpipe_core::stack::install_walker(walk);
}
