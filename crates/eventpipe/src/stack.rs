//! The unwinder behind the stacks sessions ask for: `eventpipe_core` captures through the
//! walker installed here (the `backtrace` crate's frame walk).

/// Walks the calling thread's stack with `backtrace`, leaf first. A null instruction
/// pointer is where the unwinder found the stack's end (the outermost frame's return
/// address), not a frame: the walk stops there, so no stack ends in an unnamed `0x0`.
fn walk(frame: &mut dyn FnMut(usize) -> bool) {
    backtrace::trace(|f| {
        let ip = f.ip() as usize;
        ip != 0 && frame(ip)
    });
}

/// Installs the walker; every session start calls it (only the first call does anything).
pub(crate) fn install() {
    eventpipe_core::runtime::install_walker(walk);
}
