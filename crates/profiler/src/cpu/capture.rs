//! Capturing another thread's stack: the sampler thread signals it, and the signal handler,
//! running on the interrupted thread, walks that thread's frame-pointer chain into the one
//! preallocated slot.
//!
//! The hand-off is a four-state machine on `Slot::state`, one capture at a time (the
//! sampler signals threads in turn):
//!
//! ```text
//! IDLE ──sampler: target_tid, then Release──▶ REQUESTED ──handler: CAS(Acquire)──▶ CAPTURING
//!   ▲                                            │                                     │
//!   │                       sampler gives up: CAS REQUESTED→IDLE          handler: frames, len,
//!   │                                            ▼                         then Release
//!   └────────────sampler: frames read (after Acquire of DONE)───────────── DONE ◀──────┘
//! ```
//!
//! Only the handler that wins REQUESTED→CAPTURING writes the frames, and only the sampler
//! reads them after seeing DONE, so the frame array is never written and read at once. A
//! signal that arrives late (after the sampler gave up) finds IDLE or another thread's
//! REQUESTED with a different `target_tid`, and returns without touching anything.
//!
//! Every memory read of the walk goes through `process_vm_readv` on our own process: a
//! frame-pointer chain through code built without frame pointers holds garbage, and a read
//! of an unmapped address must fail with an error, not fault in a signal handler. The
//! handler makes no allocation and takes no lock: it uses only atomics and system calls.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Deepest stack captured; deeper stacks are cut at the root end.
pub(crate) const MAX_FRAMES: usize = 256;

const IDLE: u32 = 0;
const REQUESTED: u32 = 1;
const CAPTURING: u32 = 2;
const DONE: u32 = 3;

/// The signal used to interrupt a thread for a sample.
pub(crate) const SAMPLE_SIGNAL: libc::c_int = libc::SIGPROF;

struct Slot {
    state: AtomicU32,
    target_tid: AtomicI32,
    len: AtomicUsize,
    /// The thread was interrupted in (or restarting) a system call: waiting, not running.
    in_syscall: AtomicBool,
    /// The async profiler's innermost context on the interrupted thread (0: none).
    async_context: AtomicU64,
    frames: [AtomicUsize; MAX_FRAMES],
}

static SLOT: Slot = Slot {
    state: AtomicU32::new(IDLE),
    target_tid: AtomicI32::new(0),
    len: AtomicUsize::new(0),
    in_syscall: AtomicBool::new(false),
    async_context: AtomicU64::new(0),
    frames: [const { AtomicUsize::new(0) }; MAX_FRAMES],
};

/// Installs the handler for [`SAMPLE_SIGNAL`] (once; later calls do nothing).
pub(crate) fn install_handler() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler is an
        // `extern "C"` fn with the SA_SIGINFO signature, which only touches atomics and
        // makes system calls (async-signal-safe); SA_RESTART keeps the interrupted thread's
        // blocking calls from failing with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sample_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(SAMPLE_SIGNAL, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    });
    result.map_err(std::io::Error::from_raw_os_error)
}

/// What a capture found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Captured {
    /// The thread was running code: its stack is in `out`.
    Running,
    /// The thread was waiting in a system call: its stack is in `out`.
    InSyscall,
    /// The thread did not answer in time (it exited, or has the signal blocked).
    NoAnswer,
}

/// Interrupts thread `tid` and copies its stack (instruction pointers, leaf first) into
/// `out`, and the async context it was polling into `async_context`.
pub(crate) fn capture(
    tid: i32,
    timeout: Duration,
    out: &mut Vec<usize>,
    async_context: &mut u64,
) -> Captured {
    // One capture at a time: the slot is shared by every sampler of the process.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    out.clear();
    SLOT.target_tid.store(tid, Ordering::Relaxed);
    // Release: the handler's Acquire CAS on REQUESTED sees `target_tid`.
    SLOT.state.store(REQUESTED, Ordering::Release);
    // SAFETY: tgkill has no memory preconditions; a signal to a thread that has exited
    // fails with ESRCH.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SAMPLE_SIGNAL) } == 0;
    let deadline = Instant::now() + timeout;
    let mut spins = 0u32;
    loop {
        match SLOT.state.load(Ordering::Acquire) {
            DONE => break,
            REQUESTED if !sent || Instant::now() >= deadline => {
                // Give up, unless the handler has just started (then it finishes quickly).
                if SLOT
                    .state
                    .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Captured::NoAnswer;
                }
            }
            // A thread running on another core answers within microseconds: spin briefly.
            // One waiting for this core (or descheduled) answers only once it runs: yield
            // the core to it rather than spin it away.
            _ => {
                spins += 1;
                if spins < 200 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
    // Acquire of DONE above: the handler's frame stores happen-before these loads.
    let len = SLOT.len.load(Ordering::Relaxed).min(MAX_FRAMES);
    out.extend(SLOT.frames[..len].iter().map(|f| f.load(Ordering::Relaxed)));
    let in_syscall = SLOT.in_syscall.load(Ordering::Relaxed);
    *async_context = SLOT.async_context.load(Ordering::Relaxed);
    SLOT.state.store(IDLE, Ordering::Release);
    if in_syscall {
        Captured::InSyscall
    } else {
        Captured::Running
    }
}

extern "C" fn on_sample_signal(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    let me = unsafe { libc::gettid() };
    if SLOT.target_tid.load(Ordering::Relaxed) != me {
        return;
    }
    if SLOT
        .state
        .compare_exchange(REQUESTED, CAPTURING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Re-check under CAPTURING: the sampler may have given up and asked another thread
    // between our first check and the CAS.
    if SLOT.target_tid.load(Ordering::Relaxed) != me {
        SLOT.len.store(0, Ordering::Relaxed);
        SLOT.state.store(DONE, Ordering::Release);
        return;
    }
    // The system calls below may set errno, which belongs to the interrupted code.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread.
    let errno = unsafe { *libc::__errno_location() };
    let registers = registers_of(context);
    SLOT.in_syscall
        .store(interrupted_in_syscall(context), Ordering::Relaxed);
    // A const thread-local without destructor and a relaxed load: async-signal-safe.
    SLOT.async_context
        .store(crate::futures::current_context(), Ordering::Relaxed);
    let len = walk(registers, &SLOT.frames);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    SLOT.len.store(len, Ordering::Relaxed);
    // Release: the frames and length are visible to the sampler's Acquire of DONE.
    SLOT.state.store(DONE, Ordering::Release);
}

/// The interrupted thread's (pc, sp, fp).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn registers_of(context: *mut libc::c_void) -> (usize, usize, usize) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid `ucontext_t` as the third
    // argument, alive for the handler's duration.
    let ctx = unsafe { &*context.cast::<libc::ucontext_t>() };
    let g = &ctx.uc_mcontext.gregs;
    (
        g[libc::REG_RIP as usize] as usize,
        g[libc::REG_RSP as usize] as usize,
        g[libc::REG_RBP as usize] as usize,
    )
}

/// The interrupted thread's (pc, sp, fp).
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
fn registers_of(context: *mut libc::c_void) -> (usize, usize, usize) {
    // SAFETY: as above; on aarch64 x29 is the frame pointer.
    let ctx = unsafe { &*context.cast::<libc::ucontext_t>() };
    let m = &ctx.uc_mcontext;
    (m.pc as usize, m.sp as usize, m.regs[29] as usize)
}

/// Whether the interrupted thread was in a system call. A signal that interrupts a
/// blocking call leaves the thread either at the `syscall` instruction again (the kernel
/// rewinds it to restart the call) or just after it with `-EINTR` in `rax`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn interrupted_in_syscall(context: *mut libc::c_void) -> bool {
    const SYSCALL: [u8; 2] = [0x0f, 0x05];
    // SAFETY: as in `registers_of`.
    let ctx = unsafe { &*context.cast::<libc::ucontext_t>() };
    let rip = ctx.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    let rax = ctx.uc_mcontext.gregs[libc::REG_RAX as usize];
    let mut code = [0usize; 1];
    if read_into(rip.wrapping_sub(2), &mut code) < 4 {
        return false;
    }
    let bytes = code[0].to_le_bytes();
    let at_syscall = bytes[2..4] == SYSCALL;
    let after_interrupted_syscall = bytes[0..2] == SYSCALL && rax == -i64::from(libc::EINTR);
    at_syscall || after_interrupted_syscall
}

/// Whether the interrupted thread was in a system call (not known on this architecture).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn interrupted_in_syscall(_context: *mut libc::c_void) -> bool {
    false
}

/// How far above the stack pointer a frame may be: further than any thread's stack.
const MAX_STACK_SPAN: usize = 64 << 20;

/// Bytes of stack fetched per system call; most stacks' frame records lie within one or two.
const CHUNK: usize = 4096;

/// Walks the frame-pointer chain from `(pc, sp, fp)` into `frames`; returns the count.
fn walk((pc, sp, mut fp): (usize, usize, usize), frames: &[AtomicUsize; MAX_FRAMES]) -> usize {
    const WORD: usize = std::mem::size_of::<usize>();
    frames[0].store(pc, Ordering::Relaxed);
    let mut n = 1;
    let mut lowest = sp;
    // A window of the stack copied out with one system call: [base, base + valid).
    let mut chunk = [0usize; CHUNK / WORD];
    let mut base = 0usize;
    let mut valid = 0usize;
    while n < MAX_FRAMES {
        // A frame record is (saved fp, return address) at fp, above the previous one.
        if fp < lowest || fp % WORD != 0 || fp - sp > MAX_STACK_SPAN {
            break;
        }
        if fp < base || fp + 2 * WORD > base + valid {
            base = fp;
            valid = read_into(fp, &mut chunk);
            if valid < 2 * WORD {
                break;
            }
        }
        let at = (fp - base) / WORD;
        let (next_fp, return_address) = (chunk[at], chunk[at + 1]);
        if return_address == 0 {
            break;
        }
        frames[n].store(return_address, Ordering::Relaxed);
        n += 1;
        lowest = fp + 2 * WORD;
        fp = next_fp;
    }
    n
}

/// Copies as much of our own memory from `address` into `out` as is readable (stopping at
/// the first unmapped page); returns the bytes copied.
fn read_into(address: usize, out: &mut [usize]) -> usize {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: std::mem::size_of_val(out),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: std::mem::size_of_val(out),
    };
    // SAFETY: `local` describes `out`, writable for its whole length; the kernel checks
    // `remote` and reports an unmapped address as an error (or a short read) instead of
    // faulting.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(read).unwrap_or(0)
}
