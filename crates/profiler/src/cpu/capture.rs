//! What runs in the signal handler, and the per-thread records it hands to the collector.
//!
//! Each sampled thread owns a [`ThreadSlot`] while it has a CPU-time timer: a ring of
//! [`RING`] capture records written by that thread's signal handler (the one producer) and
//! read by the collector thread (the one consumer). Slots come from a pool that only grows
//! (at most [`MAX_THREADS`]): a slot is allocated once, published in `SLOTS` and never
//! freed, so a signal that arrives late — after its timer was deleted and its slot given back
//! or handed to another thread — reads valid memory and finds, by the ownership word, that
//! the slot is not its thread's.
//!
//! A timer's signal carries the slot's index (with a tag) in `si_value`. The handler:
//!
//! ```text
//! owner: tid ──handler: CAS tid → tid|BUSY (Acquire)──▶ tid|BUSY
//!                                                        │ record at head % RING (Relaxed
//!                                                        │ stores), head + 1 (Release)
//!   ◀──────────────handler: owner = tid (Release)─────────┘
//!
//! collector, to take the slot back: CAS owner tid → FREE (AcqRel), retried while BUSY
//! collector, to give it out:        reset head/tail while FREE, then owner = tid (Release)
//! ```
//!
//! The ring is a single-producer single-consumer queue of indices that only count up
//! (wrapping u32): the handler writes record `head % RING` only while `head - tail < RING`,
//! having read `tail` with Acquire (the collector's Release store of `tail` comes after its
//! reads of the records it consumed, so they are done before the handler overwrites one);
//! it publishes the record with a Release store of `head`, which the collector reads with
//! Acquire before reading the records. A full ring drops the capture and counts its periods
//! in `lost`.
//!
//! Only a handler running on thread `tid` can win `tid → tid|BUSY`, and SIGPROF is masked
//! while its own handler runs, so there is at most one producer per slot. Once the collector
//! has moved `owner` to FREE, no handler can write the slot again until it is given out anew.
//!
//! The stack is unwound with the loaded modules' unwind tables once the collector has
//! published them (`unwind`, x86_64: whole stacks through code without frame pointers,
//! glibc's among them), with the rule cache the slot owns; before that, and on other
//! architectures, by the shared frame-pointer walker (`frame_walk`). Both read through
//! [`CopiedStack`]: every memory read goes through `process_vm_readv` on our own process: a
//! bad unwind rule or a frame-pointer chain through code built without frame pointers
//! points at garbage, and a read of an unmapped address must fail with an error, not fault
//! in a signal handler. The slot's rule cache is the handler's alone: it touches it only
//! while it holds the slot (`tid|BUSY`), as it does the record it writes.
//!
//! Async-signal-safety: the handler uses only atomics on memory that is never freed, a
//! const thread-local without destructor (the async context), and the system calls
//! `gettid` and `process_vm_readv`; it saves and restores `errno`. It allocates nothing and
//! takes no lock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use super::unwind;
use crate::frame_walk::{self, FrameMemory, Walk, WORD};
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Deepest stack captured; deeper stacks are cut at the root end.
pub(crate) const MAX_FRAMES: usize = 256;
/// Captures a thread can hold before the collector drains them. CPU-time timers fire at
/// the scheduler tick at most (250 or 1000 per second), so 16 covers 16-64 ms, several
/// collector intervals.
pub(crate) const RING: usize = 16;
/// Threads sampled at once, at most; further threads are not sampled.
pub(crate) const MAX_THREADS: usize = 1024;

/// The signal a thread's CPU-time timer sends it.
pub(crate) const SAMPLE_SIGNAL: libc::c_int = libc::SIGPROF;

/// `owner` of a slot no thread owns.
const FREE: u64 = 0;
/// Set in `owner` while the owner's handler writes.
const BUSY: u64 = 1 << 32;
/// The tag in a signal value's high bits (15 bits, so it fits a 32-bit `usize`): a SIGPROF
/// with a timer code but another value (someone else's timer) is ignored.
const TAG: usize = 0x5A3C << 16;
const TAG_MASK: usize = 0x7FFF << 16;

const _: () = assert!(
    MAX_THREADS <= 1 << 16,
    "a slot index fits the value's low 16 bits"
);

/// One capture: a stack and what the handler saw.
struct Record {
    /// Timer periods this capture stands for: 1 + the timer's overrun; 0 for a probe.
    periods: AtomicU32,
    /// The thread was interrupted in (or restarting) a system call: waiting, not running.
    in_syscall: AtomicBool,
    /// The async profiler's innermost context on the interrupted thread (0: none).
    async_context: AtomicU64,
    len: AtomicUsize,
    frames: Frames,
}

/// A record's stack, leaf first.
type Frames = [AtomicUsize; MAX_FRAMES];

/// The handler's unwind-rule cache (x86_64), kept per slot.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
type RuleCache = unwind::RuleCache;
/// No unwind tables here: nothing to cache.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
type RuleCache = ();

fn new_rule_cache() -> RuleCache {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return unwind::RuleCache::new_in();
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return ();
}

/// A thread's ring of captures (see the module docs for the protocol).
pub(crate) struct ThreadSlot {
    /// FREE, or the owning thread's id, with BUSY while its handler writes.
    owner: AtomicU64,
    /// Records written (wrapping); stored by the handler only.
    head: AtomicU32,
    /// Records read (wrapping); stored by the collector only.
    tail: AtomicU32,
    /// Periods dropped because the ring was full; stored by the handler only.
    lost: AtomicU64,
    records: [Record; RING],
    /// Used by the owner's handler alone, while it holds the slot (module docs).
    rule_cache: std::cell::UnsafeCell<RuleCache>,
}

// SAFETY: every field but `rule_cache` is atomic. `rule_cache` is only touched in `push`,
// between the owner's Acquire CAS `tid → tid|BUSY` and its Release store back: at most one
// handler holds a slot at a time (only the owner's thread can win that CAS, and SIGPROF is
// masked while its handler runs), so no two threads ever reach it together, and each
// holder's accesses happen-before the next holder's through `owner`.
unsafe impl Sync for ThreadSlot {}

impl ThreadSlot {
    fn new() -> Self {
        ThreadSlot {
            rule_cache: std::cell::UnsafeCell::new(new_rule_cache()),
            owner: AtomicU64::new(FREE),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            lost: AtomicU64::new(0),
            records: std::array::from_fn(|_| Record {
                periods: AtomicU32::new(0),
                in_syscall: AtomicBool::new(false),
                async_context: AtomicU64::new(0),
                len: AtomicUsize::new(0),
                frames: [const { AtomicUsize::new(0) }; MAX_FRAMES],
            }),
        }
    }
}

/// Every slot ever allocated, by index; a pointer, once set, never changes and its slot is
/// never freed.
static SLOTS: [AtomicPtr<ThreadSlot>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];

/// Slots given back, and how many were allocated. Taken by the collector (and tests), never
/// by the handler.
struct Pool {
    free: Vec<usize>,
    allocated: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    allocated: 0,
});

/// A slot owned by one thread: the only way to read its records or give it back.
#[derive(Debug)]
pub(crate) struct Claim {
    index: usize,
    slot: &'static ThreadSlot,
    tid: i32,
}

impl std::fmt::Debug for ThreadSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadSlot")
            .field("owner", &self.owner)
            .field("head", &self.head)
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

/// Takes a slot for thread `tid`: its handler writes there from now on. `None` when
/// [`MAX_THREADS`] slots are in use.
pub(crate) fn claim(tid: i32) -> Option<Claim> {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let index = match pool.free.pop() {
        Some(index) => index,
        None if pool.allocated < MAX_THREADS => {
            let index = pool.allocated;
            let slot: &'static ThreadSlot = Box::leak(Box::new(ThreadSlot::new()));
            // Release: the slot's initial contents are visible to a handler that loads the
            // pointer with Acquire.
            SLOTS[index].store(std::ptr::from_ref(slot).cast_mut(), Ordering::Release);
            pool.allocated += 1;
            index
        }
        None => return None,
    };
    drop(pool);
    // Acquire: pairs with the Release store above (possibly by an earlier claim).
    let ptr = SLOTS[index].load(Ordering::Acquire);
    // SAFETY: the pointer was set from a leaked Box before the index entered the pool, and
    // slots are never freed.
    let slot: &'static ThreadSlot = unsafe { &*ptr };
    // The slot is FREE: no handler reads these until `owner` names a thread again.
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.lost.store(0, Ordering::Relaxed);
    // Release: the reset above happens-before the owner's handler wins its Acquire CAS.
    slot.owner.store(tid as u32 as u64, Ordering::Release);
    Some(Claim { index, slot, tid })
}

/// What [`Claim::drain`] hands out for each capture.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capture<'a> {
    /// Timer periods this capture stands for (at least 1).
    pub(crate) periods: u32,
    /// A probe's capture ([`send_probe`]): where the thread was, standing for no CPU time
    /// (`periods` then reads 1).
    pub(crate) probe: bool,
    /// The thread was waiting in a system call.
    pub(crate) in_syscall: bool,
    /// The async profiler's innermost context (0: none).
    pub(crate) async_context: u64,
    /// The stack, leaf first.
    pub(crate) stack: &'a [usize],
}

impl Claim {
    /// The value the thread's timer signal carries (`sigev_value`): the slot's index, tagged.
    pub(crate) fn signal_value(&self) -> usize {
        TAG | self.index
    }

    /// Periods dropped so far because the ring was full.
    #[cfg(test)]
    pub(crate) fn lost(&self) -> u64 {
        // Relaxed: a statistic; a value a moment old is as good.
        self.slot.lost.load(Ordering::Relaxed)
    }

    /// Hands every capture published so far to `each`, oldest first, reading its stack into
    /// `scratch`; returns how many.
    pub(crate) fn drain(
        &self,
        scratch: &mut Vec<usize>,
        mut each: impl FnMut(Capture<'_>),
    ) -> usize {
        let s = self.slot;
        // Acquire: pairs with the handler's Release store of `head`; the records below it
        // are complete.
        let head = s.head.load(Ordering::Acquire);
        // Relaxed: only this side stores `tail`.
        let mut tail = s.tail.load(Ordering::Relaxed);
        let mut n = 0;
        while tail != head {
            let r = &s.records[tail as usize % RING];
            // Relaxed, all: ordered by the Acquire of `head` above.
            let len = r.len.load(Ordering::Relaxed).min(MAX_FRAMES);
            scratch.clear();
            scratch.extend(r.frames[..len].iter().map(|f| f.load(Ordering::Relaxed)));
            let periods = r.periods.load(Ordering::Relaxed);
            each(Capture {
                periods: periods.max(1),
                probe: periods == 0,
                in_syscall: r.in_syscall.load(Ordering::Relaxed),
                async_context: r.async_context.load(Ordering::Relaxed),
                stack: scratch,
            });
            tail = tail.wrapping_add(1);
            n += 1;
        }
        // Release: our reads of the records happen-before the handler, having loaded `tail`
        // with Acquire, overwrites them.
        s.tail.store(tail, Ordering::Release);
        n
    }

    /// Takes the slot back from its thread (whose timer must be deleted first), drains what
    /// the handler left into `each`, and returns the slot to the pool. A handler writing
    /// right now is waited for; one that has not finished after a second (the thread is
    /// stopped) keeps the slot, which is then never reused.
    pub(crate) fn release(self, scratch: &mut Vec<usize>, each: impl FnMut(Capture<'_>)) -> usize {
        let owner = self.tid as u32 as u64;
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut spins = 0u32;
        loop {
            // AcqRel: Acquire pairs with the handler's Release store ending its write (the
            // records and `head` it published are visible to the drain below); Release
            // orders this before the slot is reset by the next claim.
            match self
                .slot
                .owner
                .compare_exchange(owner, FREE, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(busy) if busy == owner | BUSY => {
                    if Instant::now() >= deadline {
                        return 0;
                    }
                    spins += 1;
                    if spins < 100 {
                        std::hint::spin_loop();
                    } else {
                        // The handler's thread may be waiting for our core.
                        std::thread::yield_now();
                    }
                }
                // Not ours (cannot happen: only the claim's holder changes a non-BUSY
                // owner); never reuse it.
                Err(_) => return 0,
            }
        }
        let n = self.drain(scratch, each);
        POOL.lock()
            .unwrap_or_else(|p| p.into_inner())
            .free
            .push(self.index);
        n
    }
}

/// Installs the handler for [`SAMPLE_SIGNAL`] (once; later calls do nothing).
pub(crate) fn install_handler() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SA_RESTART keeps the interrupted thread's blocking calls from failing with EINTR.
        // SAFETY: a zeroed sigaction is a valid start; the handler is an `extern "C"` fn
        // with the SA_SIGINFO signature, async-signal-safe (module docs).
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

/// The head of the kernel's `siginfo_t` for a POSIX timer's signal (`_sifields._timer`):
/// the union of fields starts at pointer alignment after the three ints.
#[repr(C)]
struct TimerSigInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    timer: TimerFields,
}

#[repr(C)]
struct TimerFields {
    timer_id: libc::c_int,
    overrun: libc::c_int,
    value: libc::sigval,
    private: libc::c_int,
}

const _: () = assert!(
    std::mem::size_of::<TimerSigInfo>() <= std::mem::size_of::<libc::siginfo_t>(),
    "the timer view lies within siginfo_t"
);

/// The overrun a probe's signal carries: no timer's signal has a negative one.
const PROBE_OVERRUN: libc::c_int = -1;

/// Sends thread `tid` one **probe**: the signal its timer would, outside the timer, so
/// that the handler records the stack it interrupts as a capture of no CPU period
/// ([`Capture::probe`]). How the off-CPU accounting learns where a thread waits. Returns
/// false when the thread does not exist.
pub(crate) fn send_probe(tid: i32, value: usize) -> bool {
    queue_timer_signal(tid, value, PROBE_OVERRUN)
}

/// Sends thread `tid` the signal its timer would, carrying `value` and `overrun`, as if a
/// timer had fired.
#[cfg(test)]
pub(crate) fn send_as_timer(tid: i32, value: usize, overrun: i32) -> bool {
    queue_timer_signal(tid, value, overrun)
}

/// Queues [`SAMPLE_SIGNAL`] with a timer's code, `value` and `overrun` to thread `tid`
/// (`rt_tgsigqueueinfo` lets a process queue any negative code to its own threads). Sent
/// to the calling thread, the handler has run when this returns. Returns false when the
/// thread does not exist.
fn queue_timer_signal(tid: i32, value: usize, overrun: i32) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; the timer view lies within it (asserted above)
    // and has its layout.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let view = std::ptr::from_mut(&mut info).cast::<TimerSigInfo>();
        (*view).signo = SAMPLE_SIGNAL;
        (*view).code = libc::SI_TIMER;
        (*view).timer.overrun = overrun;
        (*view).timer.value = libc::sigval {
            sival_ptr: value as *mut libc::c_void,
        };
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            SAMPLE_SIGNAL,
            &info,
        ) == 0
    }
}

/// What a one-off capture found (tests).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Captured {
    /// The thread was running code: its stack is in `out`.
    Running,
    /// The thread was waiting in a system call: its stack is in `out`.
    InSyscall,
    /// The thread did not answer in time (it exited, or has the signal blocked), or the
    /// signal could not be sent.
    NoAnswer,
}

/// Interrupts thread `tid` once, as its timer would, and waits up to `timeout` for its
/// stack (leaf first) in `out` and its async context.
#[cfg(test)]
pub(crate) fn capture(
    tid: i32,
    timeout: Duration,
    out: &mut Vec<usize>,
    async_context: &mut u64,
) -> Captured {
    let Some(claim) = claim(tid) else {
        return Captured::NoAnswer;
    };
    let mut found = Captured::NoAnswer;
    let mut scratch = Vec::new();
    let mut take = |c: Capture<'_>| {
        out.clear();
        out.extend_from_slice(c.stack);
        *async_context = c.async_context;
        found = if c.in_syscall {
            Captured::InSyscall
        } else {
            Captured::Running
        };
    };
    if send_as_timer(tid, claim.signal_value(), 0) {
        let deadline = Instant::now() + timeout;
        while claim.drain(&mut scratch, &mut take) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    claim.release(&mut scratch, &mut take);
    found
}

extern "C" fn on_sample_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // For a code other than SI_TIMER only the head is read.
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo_t, alive for the
    // handler's duration; the timer view lies within it (asserted above).
    let info = unsafe { &*info.cast::<TimerSigInfo>() };
    if info.code != libc::SI_TIMER {
        return;
    }
    // With SI_TIMER the kernel filled the `_timer` fields: plain integers and a
    // pointer-sized value, any bit pattern valid.
    let (value, overrun) = (info.timer.value.sival_ptr as usize, info.timer.overrun);
    if value & TAG_MASK != TAG || value & !(TAG_MASK) >= MAX_THREADS {
        return;
    }
    // Acquire: pairs with the Release store of a new slot's pointer in `claim`.
    let ptr = SLOTS[value & !TAG_MASK].load(Ordering::Acquire);
    if ptr.is_null() {
        return;
    }
    // SAFETY: set from a leaked Box, never freed.
    let slot = unsafe { &*ptr };
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    let me = unsafe { libc::gettid() } as u32 as u64;
    let periods = if overrun == PROBE_OVERRUN {
        0
    } else {
        1 + u32::try_from(overrun).unwrap_or(0)
    };
    slot.push(me, periods, |frames, rule_cache| {
        // The system calls below may set errno, which belongs to the interrupted code.
        // SAFETY: __errno_location returns this thread's errno slot, valid for the thread.
        let errno = unsafe { *libc::__errno_location() };
        let in_syscall = interrupted_in_syscall(context);
        // A const thread-local without destructor and a relaxed load: async-signal-safe.
        let async_context = crate::futures::current_context();
        let len = walk(registers_of(context), frames, rule_cache);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        Stack {
            len,
            in_syscall,
            async_context,
        }
    });
}

/// What [`ThreadSlot::push`]'s capture reports besides the frames it wrote.
struct Stack {
    /// Frames written, from the first.
    len: usize,
    in_syscall: bool,
    async_context: u64,
}

impl ThreadSlot {
    /// The handler's side of the ring, on thread `me`: takes the slot (`me → me|BUSY`), runs
    /// `capture` to fill the next record's frames when the ring has room (otherwise counts
    /// `periods` as lost), publishes the record and gives the slot back. Returns false, and
    /// does nothing, when the slot is not `me`'s. Allocates nothing.
    fn push(
        &self,
        me: u64,
        periods: u32,
        capture: impl FnOnce(&Frames, &mut RuleCache) -> Stack,
    ) -> bool {
        // Acquire: pairs with the Release store of `owner` in `claim` (the reset ring is
        // visible) and with the collector's Release of `tail` through it. Fails for a slot
        // that is not this thread's: a late signal after the slot was taken back.
        if self
            .owner
            .compare_exchange(me, me | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: only this handler stores `head`.
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the collector's Release store of `tail`; it is done reading
        // the records below `tail`.
        let tail = self.tail.load(Ordering::Acquire);
        if head.wrapping_sub(tail) as usize >= RING {
            // Relaxed, load then store: only this handler stores `lost`.
            let lost = self.lost.load(Ordering::Relaxed);
            self.lost
                .store(lost + u64::from(periods), Ordering::Relaxed);
        } else {
            let r = &self.records[head as usize % RING];
            // SAFETY: this handler holds the slot (the CAS above), so nothing else touches
            // the cache until it gives the slot back below (see `unsafe impl Sync`).
            let rule_cache = unsafe { &mut *self.rule_cache.get() };
            let stack = capture(&r.frames, rule_cache);
            // Relaxed, all (and the frames `capture` stored): published by the Release store
            // of `head` below.
            r.periods.store(periods, Ordering::Relaxed);
            r.in_syscall.store(stack.in_syscall, Ordering::Relaxed);
            r.async_context
                .store(stack.async_context, Ordering::Relaxed);
            r.len.store(stack.len.min(MAX_FRAMES), Ordering::Relaxed);
            // Release: the record is complete before the collector's Acquire load of `head`
            // sees it.
            self.head.store(head.wrapping_add(1), Ordering::Release);
        }
        // Release: everything written above is visible to the collector's AcqRel CAS that
        // takes the slot back.
        self.owner.store(me, Ordering::Release);
        true
    }
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

/// Unwinds the interrupted stack from `(pc, sp, fp)` into `frames` (leaf first) with the
/// published unwind tables, ending a stack cut short with the truncation mark; or, with no
/// tables yet, walks its frame-pointer chain. Returns the count.
fn walk((pc, sp, fp): (usize, usize, usize), frames: &Frames, rule_cache: &mut RuleCache) -> usize {
    let mut memory = CopiedStack::new();
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if let Some(tables) = unwind::current() {
        let highest = sp.saturating_add(MAX_STACK_SPAN);
        let mut read = |address: u64| {
            let address = usize::try_from(address).ok()?;
            if address < sp || address >= highest || address % WORD != 0 {
                return None;
            }
            memory.read_word(address).map(|w| w as u64)
        };
        let mut n = 0;
        let cut = tables.unwind((pc, sp, fp), rule_cache, &mut read, MAX_FRAMES - 1, |a| {
            // Relaxed: published by the handler's Release store of `head`.
            frames[n].store(a, Ordering::Relaxed);
            n += 1;
        });
        if cut {
            frames[n].store(unwind::TRUNCATED_FRAME as usize, Ordering::Relaxed);
            n += 1;
        }
        return n;
    }
    let _ = rule_cache;
    frames[0].store(pc, Ordering::Relaxed);
    let start = Walk {
        fp,
        lowest: sp,
        highest: sp.saturating_add(MAX_STACK_SPAN),
        skip_through: 0,
        max: MAX_FRAMES - 1,
    };
    let mut n = 1;
    frame_walk::walk(start, &mut memory, |return_address| {
        // Relaxed: published by the handler's Release store of `head`.
        frames[n].store(return_address, Ordering::Relaxed);
        n += 1;
    });
    n
}

/// The interrupted stack, read through [`read_into`] a window at a time: a garbage frame
/// pointer reads as `None` instead of faulting in the signal handler. It lives on the
/// handler's stack; nothing is allocated.
struct CopiedStack {
    /// A window of the stack copied out with one system call: `[base, base + valid)`.
    chunk: [usize; CHUNK / WORD],
    base: usize,
    valid: usize,
}

impl CopiedStack {
    fn new() -> Self {
        CopiedStack {
            chunk: [0; CHUNK / WORD],
            base: 0,
            valid: 0,
        }
    }

    /// The `words` aligned words at `address`, refetching the window from `address` when
    /// they are not all in it.
    fn window(&mut self, address: usize, words: usize) -> Option<&[usize]> {
        let end = address.checked_add(words * WORD)?;
        if address < self.base || end > self.base + self.valid {
            self.base = address;
            self.valid = read_into(address, &mut self.chunk);
            if self.valid < words * WORD {
                return None;
            }
        }
        let at = (address - self.base) / WORD;
        self.chunk.get(at..at + words)
    }
}

impl FrameMemory for CopiedStack {
    fn read_word(&mut self, address: usize) -> Option<usize> {
        self.window(address, 1).map(|w| w[0])
    }

    /// Both words from one window, so a record is fetched with at most one system call.
    fn read_record(&mut self, fp: usize) -> Option<(usize, usize)> {
        self.window(fp, 2).map(|w| (w[0], w[1]))
    }
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
    // The kernel checks `remote`: an unmapped address is an error or a short read.
    // SAFETY: `local` describes `out`, writable for its whole length.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(read).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Tests that claim slots or send timer signals run one at a time, so a slot one test
    /// gave back is not claimed by another while the first still looks at it.
    pub(crate) static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn my_tid() -> i32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    fn slot_of(claim: &Claim) -> &'static ThreadSlot {
        claim.slot
    }

    #[test]
    #[cfg_attr(miri, ignore = "sends signals")]
    fn records_pass_from_the_handler_to_the_collector_in_order() {
        let _one = one_at_a_time();
        install_handler().unwrap();
        let me = my_tid();
        let claim = claim(me).unwrap();
        // Sent to the calling thread, each signal has been handled when the call returns.
        for overrun in [0, 2, 5] {
            assert!(send_as_timer(me, claim.signal_value(), overrun));
        }
        let mut scratch = Vec::new();
        let mut seen = Vec::new();
        let n = claim.drain(&mut scratch, |c| {
            assert!(!c.stack.is_empty() && c.stack[0] != 0);
            assert_eq!(c.async_context, 0);
            seen.push(c.periods);
        });
        assert_eq!(n, 3);
        assert_eq!(seen, [1, 3, 6]);
        // Drained records are not handed out again; new ones are.
        assert_eq!(claim.drain(&mut scratch, |_| panic!("drained twice")), 0);
        assert!(send_as_timer(me, claim.signal_value(), 0));
        seen.clear();
        assert_eq!(claim.release(&mut scratch, |c| seen.push(c.periods)), 1);
        assert_eq!(seen, [1]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "sends signals")]
    fn a_full_ring_drops_captures_and_counts_their_periods() {
        let _one = one_at_a_time();
        install_handler().unwrap();
        let me = my_tid();
        let claim = claim(me).unwrap();
        for _ in 0..RING + 2 {
            assert!(send_as_timer(me, claim.signal_value(), 1));
        }
        assert_eq!(claim.lost(), 4);
        let mut scratch = Vec::new();
        let mut periods = 0;
        assert_eq!(claim.drain(&mut scratch, |c| periods += c.periods), RING);
        assert_eq!(periods as usize, 2 * RING);
        // Room again, across the wrap of the ring.
        for _ in 0..RING {
            assert!(send_as_timer(me, claim.signal_value(), 0));
        }
        assert_eq!(claim.release(&mut scratch, |_| {}), RING);
    }

    #[test]
    #[cfg_attr(miri, ignore = "sends signals")]
    fn a_signal_for_a_slot_that_is_not_its_threads_writes_nothing() {
        let _one = one_at_a_time();
        install_handler().unwrap();
        let me = my_tid();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            tx.send(my_tid()).unwrap();
            done_rx.recv().ok();
        });
        let other_tid = rx.recv().unwrap();
        let mut scratch = Vec::new();

        // Another thread's slot: our handler leaves it alone.
        let theirs = claim(other_tid).unwrap();
        assert!(send_as_timer(me, theirs.signal_value(), 0));
        assert_eq!(slot_of(&theirs).head.load(Ordering::Relaxed), 0);
        assert_eq!(theirs.release(&mut scratch, |_| {}), 0);

        // A late signal: its slot was taken back (its timer deleted) before it arrived.
        let mine = claim(me).unwrap();
        let (value, slot) = (mine.signal_value(), slot_of(&mine));
        assert_eq!(mine.release(&mut scratch, |_| {}), 0);
        assert!(send_as_timer(me, value, 0));
        assert_eq!(slot.owner.load(Ordering::Relaxed), FREE);
        assert_eq!(slot.head.load(Ordering::Relaxed), 0);

        // Values that are not ours (no tag, an index out of range) and signals that are
        // not a timer's are ignored.
        let mine = claim(me).unwrap();
        let index = mine.signal_value() & !TAG_MASK;
        assert!(send_as_timer(me, index, 0));
        assert!(send_as_timer(me, TAG | MAX_THREADS, 0));
        // SAFETY: tgkill to our own thread; the handler is installed.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), me, SAMPLE_SIGNAL) };
        assert_eq!(slot_of(&mine).head.load(Ordering::Relaxed), 0);
        assert_eq!(mine.release(&mut scratch, |_| {}), 0);
        done_tx.send(()).unwrap();
        other.join().unwrap();
    }

    /// A thread id no test thread has: the `ring_` tests write as the handler would, from
    /// a plain thread and without a signal (so they run under Miri), and the ring does not
    /// look at which thread calls it.
    const FAKE_TID: i32 = 0x3fff_fff0;

    /// Captures per `ring_` test: small under Miri, which runs them some 100× slower.
    const CAPTURES: u32 = if cfg!(miri) { 200 } else { 20_000 };

    /// The handler's write of capture `i`: frames `[i, i + 1, i + 2]`, context `i`.
    fn push_numbered(slot: &ThreadSlot, i: u32) -> bool {
        let me = FAKE_TID as u32 as u64;
        slot.push(me, 1 + i % 3, |frames, _| {
            for (k, frame) in frames[..3].iter().enumerate() {
                // Relaxed: published by `push`'s Release store of `head`, as in the handler.
                frame.store(i as usize + k, Ordering::Relaxed);
            }
            Stack {
                len: 3,
                in_syscall: i % 2 == 1,
                async_context: u64::from(i),
            }
        })
    }

    /// Checks one drained capture against what `push_numbered` wrote, and that it comes
    /// after `last`; returns its number.
    fn check_numbered(c: Capture<'_>, last: Option<u32>) -> u32 {
        let i = c.async_context as u32;
        assert!(last.is_none_or(|last| i > last), "{i} after {last:?}");
        assert_eq!(c.stack, [i as usize, i as usize + 1, i as usize + 2]);
        assert_eq!((c.periods, c.in_syscall), (1 + i % 3, i % 2 == 1));
        i
    }

    #[test]
    fn ring_passes_whole_records_from_a_writer_thread_to_the_collector_in_order() {
        let _one = one_at_a_time();
        let claim = claim(FAKE_TID).unwrap();
        let slot = slot_of(&claim);
        let writer = std::thread::spawn(move || {
            for i in 0..CAPTURES {
                assert!(push_numbered(slot, i));
                if i % 4 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut scratch = Vec::new();
        let (mut last, mut drained, mut periods) = (None, 0u64, 0u64);
        let mut take = |c: Capture<'_>| {
            last = Some(check_numbered(c, last));
            drained += 1;
            periods += u64::from(c.periods);
        };
        while !writer.is_finished() {
            claim.drain(&mut scratch, &mut take);
            std::thread::yield_now();
        }
        writer.join().unwrap();
        let lost = claim.lost();
        claim.release(&mut scratch, &mut take);
        // Every capture was either drained or counted lost, by its periods.
        let all: u64 = (0..CAPTURES).map(|i| u64::from(1 + i % 3)).sum();
        assert_eq!(
            periods + lost,
            all,
            "{drained} drained, {lost} periods lost"
        );
    }

    #[test]
    fn ring_release_takes_the_slot_back_from_a_writer_and_gets_what_it_published() {
        let _one = one_at_a_time();
        let claim = claim(FAKE_TID).unwrap();
        let slot = slot_of(&claim);
        // The writer writes until the slot is no longer its own.
        let writer = std::thread::spawn(move || {
            let mut pushed = 0;
            while push_numbered(slot, pushed) {
                pushed += 1;
                std::thread::yield_now();
            }
            pushed
        });
        let mut scratch = Vec::new();
        let (mut last, mut periods) = (None, 0u64);
        let mut take = |c: Capture<'_>| {
            last = Some(check_numbered(c, last));
            periods += u64::from(c.periods);
        };
        for _ in 0..CAPTURES / 4 {
            claim.drain(&mut scratch, &mut take);
            std::thread::yield_now();
        }
        claim.release(&mut scratch, &mut take);
        let pushed = writer.join().unwrap();
        // Relaxed: the release's AcqRel CAS synchronised with the writer's last Release of
        // `owner`, and the join with everything after it.
        let lost = slot.lost.load(Ordering::Relaxed);
        // Every push the slot accepted was drained (by the release, at the latest) or
        // counted lost; the writer stopped at its first refused push.
        let all: u64 = (0..pushed).map(|i| u64::from(1 + i % 3)).sum();
        assert_eq!(periods + lost, all);
        // Relaxed: this thread stored FREE (the release's CAS).
        assert_eq!(slot.owner.load(Ordering::Relaxed), FREE);
    }
}
