//! The CPU sampling profiler where it cannot run: its provider, event and constants are
//! declared as on Linux (so code naming them builds everywhere), and [`register`] says
//! what is missing.
//!
//! The sampler needs per-thread CPU-time timers that signal the thread that used the
//! time (`timer_create` on a thread's CPU clock with `SIGEV_THREAD_ID`), and reads other
//! threads' stacks through `process_vm_readv`: Linux has both; macOS and Windows have
//! neither. There a program that calls [`register`] gets an error and runs on unsampled;
//! a session naming the provider gets no samples.

use eventpipe_core::{define_event, Level, Provider};

/// The provider's name.
pub const PROVIDER_NAME: &str = "EventPipeRs-CpuSampler";
/// Samples per second per thread when the session does not say (`Rate=N`).
pub const DEFAULT_RATE_HZ: u32 = 1000;
/// The highest rate accepted; higher requests are clamped.
pub const MAX_RATE_HZ: u32 = 10_000;
/// `State` of a thread that was running: the sample carries its stack.
pub const STATE_RUNNING: u32 = 1;
/// `State` of a thread that was blocked: off the CPU (no stack), or caught in a system
/// call (with the stack it waits in).
pub const STATE_BLOCKED: u32 = 2;
/// `State` of a thread that was off the CPU, waiting in the stack the sample carries.
pub const STATE_WAITING: u32 = 3;

/// The CPU sampler's provider (declared; nothing writes to it here).
pub static PROVIDER: Provider = Provider::new(PROVIDER_NAME);

define_event! {
    /// One sample of one thread, as on Linux (see the Linux build's documentation).
    pub static SAMPLE = PROVIDER { id: 1, name: "Sample", level: Level::Informational, keywords: 0 }
        (State: u32, AsyncContext: u64, Periods: u32, PeriodNs: u32);
}

/// What this platform lacks for the sampler.
pub const UNSUPPORTED: &str = "the CPU sampler needs per-thread CPU-time timers \
    (timer_create with SIGEV_THREAD_ID), which only Linux has: this program runs unsampled";

/// Always fails here, with [`std::io::ErrorKind::Unsupported`] and [`UNSUPPORTED`]; the
/// program goes on.
///
/// # Errors
/// Always, on this platform.
pub fn register() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        UNSUPPORTED,
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn register_says_what_is_missing_and_the_program_goes_on() {
        let err = super::register().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
        assert!(err.to_string().contains("timer_create"), "{err}");
        // Declaring the provider's event still works: code naming it runs unchanged.
        super::SAMPLE.register();
    }
}
