//! Capturing other threads' stacks: the sampler thread signals them, and the signal
//! handler, running on each interrupted thread, walks that thread's frame-pointer chain into
//! a preallocated slot of its own.
//!
//! Each of the [`SLOTS`] slots is a four-state machine on `Slot::state`; the sampler owns
//! the assignment of slots to threads, so several captures are outstanding at once and the
//! sampler never waits for one thread before asking the next:
//!
//! ```text
//! IDLE ──sampler: target_tid, then Release──▶ REQUESTED ──handler: CAS(Acquire)──▶ CAPTURING
//!   ▲                                            │                                     │
//!   │                       sampler gives up: CAS REQUESTED→IDLE          handler: frames, len,
//!   │                                            ▼                         then Release
//!   └────────────sampler: frames read (after Acquire of DONE)───────────── DONE ◀──────┘
//! ```
//!
//! Only the handler that wins REQUESTED→CAPTURING on a slot writes its frames, and only the
//! sampler reads them after seeing DONE, so a frame array is never written and read at once.
//! A handler looks for the slot whose `target_tid` is its own thread; a signal that arrives
//! late (after the sampler gave up) finds none in REQUESTED, or a new request for the same
//! thread, which it then answers — either way it touches no other thread's slot.
//!
//! Every memory read of the walk goes through `process_vm_readv` on our own process: a
//! frame-pointer chain through code built without frame pointers holds garbage, and a read
//! of an unmapped address must fail with an error, not fault in a signal handler. The
//! handler makes no allocation and takes no lock: it uses only atomics and system calls.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Deepest stack captured; deeper stacks are cut at the root end.
pub(crate) const MAX_FRAMES: usize = 256;
/// Captures that can be outstanding at once (threads sampled per tick, at most).
pub(crate) const SLOTS: usize = 32;

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

static SLOT_ARRAY: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU32::new(IDLE),
        target_tid: AtomicI32::new(0),
        len: AtomicUsize::new(0),
        in_syscall: AtomicBool::new(false),
        async_context: AtomicU64::new(0),
        frames: [const { AtomicUsize::new(0) }; MAX_FRAMES],
    }
}; SLOTS];

/// Which slots are taken (bit i: slot i). A sampler of an ending generation may overlap its
/// successor for a tick, so slots are handed out here, never assumed free.
static TAKEN: Mutex<u32> = Mutex::new(0);

const _: () = assert!(SLOTS <= 32, "TAKEN has a bit per slot");

/// The right to use the slots: one sampler at a time, each with the slots it took.
pub(crate) struct Turn(MutexGuard<'static, u32>);

/// Waits for the turn to use slots.
pub(crate) fn sampler_turn() -> Turn {
    Turn(TAKEN.lock().unwrap_or_else(|p| p.into_inner()))
}

impl Turn {
    /// A free slot, now the caller's.
    pub(crate) fn take_slot(&mut self) -> Option<usize> {
        let free = !*self.0;
        if free == 0 {
            return None;
        }
        let slot = free.trailing_zeros() as usize;
        *self.0 |= 1 << slot;
        Some(slot)
    }

    /// Gives back a slot whose capture was collected or withdrawn.
    pub(crate) fn free_slot(&mut self, slot: usize) {
        *self.0 &= !(1u32 << slot);
    }
}

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
    /// The thread has not answered yet (the request stays outstanding).
    Pending,
    /// The thread did not answer in time (it exited, or has the signal blocked), or the
    /// signal could not be sent; the slot is free again.
    NoAnswer,
}

/// Asks thread `tid` for its stack into slot `slot`, which must be idle (the caller holds
/// [`sampler_turn`] and assigns slots). Returns false, leaving the slot idle, when the
/// signal cannot be sent (the thread exited).
pub(crate) fn request(slot: usize, tid: i32) -> bool {
    let s = &SLOT_ARRAY[slot];
    s.target_tid.store(tid, Ordering::Relaxed);
    // Release: the handler's Acquire CAS on REQUESTED sees `target_tid`.
    s.state.store(REQUESTED, Ordering::Release);
    // SAFETY: tgkill has no memory preconditions; a signal to a thread that has exited
    // fails with ESRCH.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SAMPLE_SIGNAL) } == 0;
    if !sent {
        // No handler can be on its way: nothing was delivered.
        s.state.store(IDLE, Ordering::Relaxed);
    }
    sent
}

/// Collects slot `slot`'s answer into `out` and `async_context`. A handler in progress is
/// waited for (it takes microseconds); one not started yet is left pending, or, with
/// `give_up`, withdrawn.
pub(crate) fn collect(
    slot: usize,
    give_up: bool,
    out: &mut Vec<usize>,
    async_context: &mut u64,
) -> Captured {
    let s = &SLOT_ARRAY[slot];
    out.clear();
    let deadline = Instant::now() + Duration::from_millis(20);
    let mut spins = 0u32;
    loop {
        match s.state.load(Ordering::Acquire) {
            DONE => break,
            IDLE => return Captured::NoAnswer,
            REQUESTED if !give_up => return Captured::Pending,
            REQUESTED => {
                // Withdraw, unless the handler has just started (then it finishes quickly).
                if s.state
                    .compare_exchange(REQUESTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Captured::NoAnswer;
                }
            }
            // CAPTURING: the handler is walking right now, on another core or (if it was
            // interrupted on ours) once we yield.
            _ if Instant::now() >= deadline => return Captured::Pending,
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
    let len = s.len.load(Ordering::Relaxed).min(MAX_FRAMES);
    out.extend(s.frames[..len].iter().map(|f| f.load(Ordering::Relaxed)));
    let in_syscall = s.in_syscall.load(Ordering::Relaxed);
    *async_context = s.async_context.load(Ordering::Relaxed);
    s.state.store(IDLE, Ordering::Release);
    if in_syscall {
        Captured::InSyscall
    } else {
        Captured::Running
    }
}

/// Interrupts thread `tid` and waits up to `timeout` for its stack (leaf first) in `out`
/// and its async context: one capture, start to end.
#[cfg(test)]
pub(crate) fn capture(
    tid: i32,
    timeout: Duration,
    out: &mut Vec<usize>,
    async_context: &mut u64,
) -> Captured {
    let mut turn = sampler_turn();
    let Some(slot) = turn.take_slot() else {
        return Captured::NoAnswer;
    };
    let found = if request(slot, tid) {
        let deadline = Instant::now() + timeout;
        loop {
            let give_up = Instant::now() >= deadline;
            match collect(slot, give_up, out, async_context) {
                Captured::Pending => std::thread::sleep(Duration::from_micros(100)),
                found => break found,
            }
        }
    } else {
        Captured::NoAnswer
    };
    turn.free_slot(slot);
    found
}

extern "C" fn on_sample_signal(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    let me = unsafe { libc::gettid() };
    let Some(s) = SLOT_ARRAY.iter().find(|s| {
        s.target_tid.load(Ordering::Relaxed) == me && s.state.load(Ordering::Relaxed) == REQUESTED
    }) else {
        return;
    };
    if s.state
        .compare_exchange(REQUESTED, CAPTURING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Re-check under CAPTURING: the sampler may have withdrawn this request and given the
    // slot to another thread between our first check and the CAS. Then the request is that
    // thread's: put it back for its own handler.
    if s.target_tid.load(Ordering::Relaxed) != me {
        s.state.store(REQUESTED, Ordering::Release);
        return;
    }
    // The system calls below may set errno, which belongs to the interrupted code.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread.
    let errno = unsafe { *libc::__errno_location() };
    let registers = registers_of(context);
    s.in_syscall
        .store(interrupted_in_syscall(context), Ordering::Relaxed);
    // A const thread-local without destructor and a relaxed load: async-signal-safe.
    s.async_context
        .store(crate::futures::current_context(), Ordering::Relaxed);
    let len = walk(registers, &s.frames);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    s.len.store(len, Ordering::Relaxed);
    // Release: the frames and length are visible to the sampler's Acquire of DONE.
    s.state.store(DONE, Ordering::Release);
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
