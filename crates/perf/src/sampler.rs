//! CPU-time sampling of a process and every thread and child it starts: one software
//! `cpu-clock` perf event per CPU, inherited, each with its ring buffer (the kernel refuses
//! a ring for an inherited per-task event, so perf itself opens them per CPU too).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

use perf_event_open_sys as sys;

use crate::record::{self, Record, RecordError, SampleLayout, SWITCH_SAMPLE_PERIOD};
use crate::Error;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// CPU time between two samples of a thread, ns.
    pub period_ns: u64,
    /// Whether to ask for kernel frames; refused by the system, sampling goes on without
    /// them and [`Sampler::kernel_frames`] says why.
    pub kernel: bool,
    /// Start disabled and begin at the target's next exec (a program held before its exec).
    pub enable_on_exec: bool,
    /// Each CPU's ring buffer, in pages (a power of two).
    pub ring_pages: usize,
    /// Bytes of each sample's user stack to copy (with its registers) for unwinding with
    /// the binaries' unwind tables; 0: the kernel's frame-pointer walk only. A multiple of
    /// 8, at most 65 528.
    pub user_stack_bytes: u32,
    /// Also a sample at each context switch away from a thread (its stack where it waits,
    /// period 1: [`SWITCH_SAMPLE_PERIOD`]) and a `Switch` record when it leaves and comes
    /// back to a CPU: the time it spent off CPU, and where.
    pub off_cpu: bool,
}

/// Which of a thread's events on a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// CPU-time samples, with the side-band records (mmap, comm, task, switch).
    CpuClock,
    /// A sample at each context switch away.
    Switches,
}

impl SamplerConfig {
    /// Sampling at `rate_hz` samples per second of a thread's CPU time.
    pub fn at_rate(rate_hz: u32) -> SamplerConfig {
        SamplerConfig {
            period_ns: 1_000_000_000 / u64::from(rate_hz.max(1)),
            kernel: true,
            enable_on_exec: false,
            ring_pages: 128,
            user_stack_bytes: 0,
            off_cpu: false,
        }
    }
}

/// The sampling of one process.
#[derive(Debug)]
pub struct Sampler {
    rings: Vec<Ring>,
    kernel_frames: Result<(), String>,
    /// Why the rings are smaller than asked, when they are.
    smaller_rings: Option<String>,
}

impl Sampler {
    /// Samples process (or thread) `pid` and whatever it starts from now on.
    ///
    /// # Errors
    /// The system refuses perf events ([`Error::Permission`] names the setting), has none,
    /// or the process does not exist.
    pub fn open(pid: i32, config: &SamplerConfig) -> Result<Sampler, Error> {
        let cpus = online_cpus();
        let (config, smaller_rings) = &fitting(config, cpus.len());
        let mut kernel = config.kernel;
        let mut kernel_frames = if kernel {
            Ok(())
        } else {
            Err("not asked for".to_owned())
        };
        let mut rings = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            let fd = loop {
                match open_event(pid, cpu, config, kernel, Event::CpuClock) {
                    Ok(fd) => break fd,
                    Err(e) if kernel && is_permission(&e) => {
                        kernel = false;
                        kernel_frames = Err(format!(
                            "kernel frames are not allowed here (kernel.perf_event_paranoid \
                             is {}; `sysctl kernel.perf_event_paranoid=1` or CAP_PERFMON \
                             allows them)",
                            paranoid().map_or("unknown".to_owned(), |p| p.to_string())
                        ));
                    }
                    Err(e) => return Err(open_error(e, pid)),
                }
            };
            let mut ring = Ring::map(fd, config.ring_pages, layout(config))?;
            if config.off_cpu {
                let fd = open_event(pid, cpu, config, kernel, Event::Switches)
                    .map_err(|e| open_error(e, pid))?;
                ring.redirect(fd)?;
            }
            rings.push(ring);
        }
        Ok(Sampler {
            rings,
            kernel_frames,
            smaller_rings: smaller_rings.clone(),
        })
    }

    /// Why each CPU's ring is smaller than asked (the user's locked-memory limit for perf
    /// rings), when it is: a busy program may then lose samples, which are counted.
    pub fn smaller_rings(&self) -> Option<&str> {
        self.smaller_rings.as_deref()
    }

    /// Samples every thread of running process `pid` and whatever they start from now
    /// on: an event per thread and CPU, each CPU's events writing into one ring. Threads
    /// that start while the events are being opened are found by listing the threads again
    /// until no new one appears (a thread started by one already sampled is inherited).
    ///
    /// # Errors
    /// As [`Sampler::open`].
    pub fn attach(pid: i32, config: &SamplerConfig) -> Result<Sampler, Error> {
        let config = SamplerConfig {
            enable_on_exec: false,
            ..fitting(config, online_cpus().len()).0
        };
        let mut tids = threads_of(pid).ok_or(Error::NoProcess(pid))?;
        let Some(&first) = tids.first() else {
            return Err(Error::NoProcess(pid));
        };
        let mut sampler = Sampler::open(first, &config)?;
        let mut opened = std::collections::BTreeSet::from([first]);
        let kernel = sampler.kernel_frames.is_ok();
        let cpus = online_cpus();
        while !tids.is_empty() {
            let new: Vec<i32> = tids
                .iter()
                .copied()
                .filter(|t| !opened.contains(t))
                .collect();
            for tid in new {
                let events: &[Event] = if config.off_cpu {
                    &[Event::CpuClock, Event::Switches]
                } else {
                    &[Event::CpuClock]
                };
                'thread: for (ring, &cpu) in sampler.rings.iter_mut().zip(&cpus) {
                    for &event in events {
                        match open_event(tid, cpu, &config, kernel, event) {
                            Ok(fd) => ring.redirect(fd)?,
                            // It ended meanwhile.
                            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break 'thread,
                            Err(e) => return Err(open_error(e, pid)),
                        }
                    }
                }
                opened.insert(tid);
            }
            tids = threads_of(pid)
                .unwrap_or_default()
                .into_iter()
                .filter(|t| !opened.contains(t))
                .collect();
        }
        Ok(sampler)
    }

    /// Whether samples carry kernel frames, or why not.
    pub fn kernel_frames(&self) -> Result<(), &str> {
        self.kernel_frames
            .as_ref()
            .map(|_| ())
            .map_err(String::as_str)
    }

    /// Waits at most `timeout` for a ring to fill past its wakeup mark.
    pub fn wait(&self, timeout: Duration) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// Hands every record the rings hold to `each`, oldest first within each CPU's ring.
    pub fn read(&mut self, mut each: impl FnMut(Result<Record, RecordError>)) {
        for ring in &mut self.rings {
            ring.read(&mut each);
        }
    }
}

fn layout(config: &SamplerConfig) -> SampleLayout {
    if config.user_stack_bytes > 0 {
        SampleLayout::WithUserStack
    } else {
        SampleLayout::Callchain
    }
}

fn open_event(
    pid: i32,
    cpu: i32,
    config: &SamplerConfig,
    kernel: bool,
    event: Event,
) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_attr is plain data; all zeroes is its documented default.
    let mut attr: sys::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
    attr.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    let side_band = u64::from(event == Event::CpuClock);
    match event {
        Event::CpuClock => {
            attr.config = u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK);
            attr.__bindgen_anon_1.sample_period = config.period_ns.max(10_000);
            attr.set_context_switch(u64::from(config.off_cpu));
        }
        Event::Switches => {
            attr.config = u64::from(sys::bindings::PERF_COUNT_SW_CONTEXT_SWITCHES);
            attr.__bindgen_anon_1.sample_period = SWITCH_SAMPLE_PERIOD;
        }
    }
    attr.sample_type = u64::from(
        sys::bindings::PERF_SAMPLE_IP
            | sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_TIME
            | sys::bindings::PERF_SAMPLE_CPU
            | sys::bindings::PERF_SAMPLE_PERIOD
            | sys::bindings::PERF_SAMPLE_CALLCHAIN,
    );
    if config.user_stack_bytes > 0 {
        attr.sample_type |=
            u64::from(sys::bindings::PERF_SAMPLE_REGS_USER | sys::bindings::PERF_SAMPLE_STACK_USER);
        attr.sample_regs_user = record::USER_REGS_MASK;
        attr.sample_stack_user = (config.user_stack_bytes.min(65_528)) & !7;
        // The copy is unwound here; a frame-pointer walk of the same stack by the kernel
        // would follow garbage through code without frame pointers, up to its depth limit,
        // on every sample (1.4 points of the program's CPU time in BENCHMARKS.md).
        attr.set_exclude_callchain_user(1);
    }
    attr.set_disabled(u64::from(config.enable_on_exec));
    attr.set_enable_on_exec(u64::from(config.enable_on_exec));
    attr.set_inherit(1);
    // The side-band records come from one event only, or each would come twice.
    attr.set_mmap(side_band);
    attr.set_mmap2(side_band);
    attr.set_comm(side_band);
    attr.set_comm_exec(side_band);
    attr.set_task(side_band);
    attr.set_sample_id_all(1);
    attr.set_exclude_kernel(u64::from(!kernel));
    attr.set_exclude_callchain_kernel(u64::from(!kernel));
    attr.set_exclude_hv(1);
    // The clock EventPipe timestamps use, so the two merge on one clock.
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    // Wake a reader when a quarter of the ring is full.
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = (config.ring_pages * page_size() / 4) as u32;
    attr.set_build_id(1);
    let flags = libc::c_ulong::from(sys::bindings::PERF_FLAG_FD_CLOEXEC);
    // SAFETY: `attr` is a valid, initialized perf_event_attr whose size field is its size.
    let fd = unsafe { sys::perf_event_open(&mut attr, pid, cpu, -1, flags) };
    if fd < 0 {
        let first = io::Error::last_os_error();
        if first.raw_os_error() != Some(libc::EINVAL) {
            return Err(first);
        }
        // Kernels before 5.12 know no build ids in mmap records.
        attr.set_build_id(0);
        // SAFETY: as above.
        let fd = unsafe { sys::perf_event_open(&mut attr, pid, cpu, -1, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

fn open_error(e: io::Error, pid: i32) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) if owned_by_another_user(pid) => Error::OtherUser { pid },
        Some(libc::EACCES | libc::EPERM) => Error::Permission {
            paranoid: paranoid(),
        },
        Some(libc::ESRCH) => Error::NoProcess(pid),
        Some(libc::ENOENT | libc::ENOSYS | libc::EOPNOTSUPP) => Error::Unavailable(e),
        _ => Error::Open(e),
    }
}

/// What a process attached to already is, as the records its start would have made: its
/// name and its threads' (as `comm` records, the process's own marked as an exec), and its
/// executable file mappings (as `mmap` records), all at `time`.
pub fn existing_process(pid: i32, time: u64) -> Vec<Record> {
    let Ok(upid) = u32::try_from(pid) else {
        return Vec::new();
    };
    let comm = |tid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .map(|s| s.trim_end_matches('\n').to_owned())
            .ok()
    };
    let mut records = Vec::new();
    for tid in threads_of(pid).unwrap_or_default() {
        let (Some(name), Ok(utid)) = (comm(tid), u32::try_from(tid)) else {
            continue;
        };
        records.push(Record::Comm {
            pid: upid,
            tid: utid,
            name,
            exec: tid == pid,
            time,
        });
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    for m in eventpipe_unwind::executable_mappings(&maps) {
        records.push(Record::Mmap(crate::record::Mmap {
            pid: upid,
            tid: upid,
            start: m.start,
            len: m.end - m.start,
            file_offset: m.offset,
            file_name: m.path,
            build_id: None,
            executable: true,
            time,
        }));
    }
    records
}

/// The thread ids of process `pid` (`/proc/PID/task`), or `None` when it does not exist.
fn threads_of(pid: i32) -> Option<Vec<i32>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut tids: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The main thread first: its event is the one `open` maps.
    tids.sort_by_key(|&t| (t != pid, t));
    Some(tids)
}

/// `config` with rings this user may map on `cpus` CPUs, and why they are smaller than asked
/// when they are. Without root, the kernel lets a user lock `kernel.perf_event_mlock_kb`
/// for all its perf rings (each one page more than its data), beyond which mapping fails.
fn fitting(config: &SamplerConfig, cpus: usize) -> (SamplerConfig, Option<String>) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return (*config, None);
    }
    let Some(limit_kb) = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
    else {
        return (*config, None);
    };
    let page_kb = page_size() / 1024;
    let per_cpu = (limit_kb / page_kb.max(1) / cpus.max(1)).saturating_sub(1);
    if per_cpu >= config.ring_pages {
        return (*config, None);
    }
    // The largest power of two that fits.
    let pages = if per_cpu == 0 {
        1
    } else {
        1 << per_cpu.ilog2()
    };
    let why = format!(
        "each CPU's ring holds {} KiB, not {} KiB: this user may lock {limit_kb} KiB for perf \
         rings (kernel.perf_event_mlock_kb; root, or `sudo sysctl \
         kernel.perf_event_mlock_kb=N`, allows more), so a busy program may lose samples \
         (--call-graph fp makes each sample smaller)",
        pages * page_kb,
        config.ring_pages * page_kb
    );
    (
        SamplerConfig {
            ring_pages: pages,
            ..*config
        },
        Some(why),
    )
}

/// Whether `pid` runs as a user other than this process's (and this process is not root).
fn owned_by_another_user(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    me != 0 && std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() != me)
}

/// `kernel.perf_event_paranoid`.
pub(crate) fn paranoid() -> Option<i32> {
    let mut s = String::new();
    File::open("/proc/sys/kernel/perf_event_paranoid")
        .and_then(|mut f| f.read_to_string(&mut s))
        .ok()?;
    s.trim().parse().ok()
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,5`), else all configured.
fn online_cpus() -> Vec<i32> {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            let mut cpus = Vec::new();
            for part in s.trim().split(',') {
                let (a, b) = part.split_once('-').unwrap_or((part, part));
                let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
                cpus.extend(a..=b);
            }
            Some(cpus)
        });
    parsed.filter(|c| !c.is_empty()).unwrap_or_else(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        (0..i32::try_from(n).unwrap_or(1).max(1)).collect()
    })
}

/// One CPU's ring buffer: a metadata page, then `2^n` data pages the kernel writes records
/// into and this reader consumes.
#[derive(Debug)]
struct Ring {
    fd: OwnedFd,
    /// Other events of this CPU that write into this ring.
    redirected: Vec<OwnedFd>,
    base: *mut u8,
    mapped: usize,
    data_size: u64,
    layout: SampleLayout,
    /// A record that wraps around the ring's end, made whole.
    scratch: Vec<u8>,
}

// SAFETY: the mapping belongs to this Ring alone; moving it to another thread moves its only
// reader with it.
unsafe impl Send for Ring {}

impl Ring {
    fn map(fd: OwnedFd, pages: usize, layout: SampleLayout) -> Result<Ring, Error> {
        let pages = pages.max(1).next_power_of_two();
        let mapped = (pages + 1) * page_size();
        // SAFETY: mapping a perf event fd shared and writable is how its ring is read; the
        // result is checked before use and unmapped on drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::Open(io::Error::last_os_error()));
        }
        Ok(Ring {
            fd,
            redirected: Vec::new(),
            base: base.cast(),
            mapped,
            data_size: (pages * page_size()) as u64,
            layout,
            scratch: Vec::new(),
        })
    }

    /// Makes event `fd` (of this ring's CPU) write into this ring.
    fn redirect(&mut self, fd: OwnedFd) -> Result<(), Error> {
        // SAFETY: both are open perf event fds of the same CPU; SET_OUTPUT takes the target
        // fd as its argument and touches no memory of ours.
        let r = unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), self.fd.as_raw_fd()) };
        if r != 0 {
            return Err(Error::Open(io::Error::last_os_error()));
        }
        self.redirected.push(fd);
        Ok(())
    }

    fn page(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.cast()
    }

    fn read(&mut self, each: &mut impl FnMut(Result<Record, RecordError>)) {
        let page = self.page();
        // SAFETY: `page` is the mapped metadata page; data_head and data_tail are naturally
        // aligned u64 fields the kernel and this reader share through atomic accesses.
        let (head, tail) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*page).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*page).data_tail)),
            )
        };
        // Ordering: the kernel writes a record, then (smp_wmb) moves data_head past it; the
        // Acquire load makes the records before the head visible here. The Release store of
        // data_tail below comes after every read of the records it frees, so the kernel
        // cannot overwrite one that is still being read.
        let end = head.load(Ordering::Acquire);
        let mut at = tail.load(Ordering::Relaxed);
        // SAFETY: the data pages follow the metadata page within the mapping.
        let data = unsafe { self.base.add(page_size()) };
        while at < end {
            let mut header = [0u8; 8];
            self.copy_out(data, at, &mut header);
            let size = u64::from(u16::from_le_bytes([header[6], header[7]]));
            if size < 8 || at + size > end {
                // A size the kernel never writes: skip what is there rather than loop.
                each(record::parse(&header));
                at = end;
                break;
            }
            let mut bytes = std::mem::take(&mut self.scratch);
            bytes.resize(size as usize, 0);
            self.copy_out(data, at, &mut bytes);
            each(record::parse_with(&bytes, self.layout));
            self.scratch = bytes;
            at += size;
        }
        fence(Ordering::Release);
        tail.store(at, Ordering::Release);
    }

    /// Copies `out.len()` bytes from ring position `at` (wrapping at the end of the data).
    fn copy_out(&self, data: *const u8, at: u64, out: &mut [u8]) {
        let offset = (at % self.data_size) as usize;
        let first = out.len().min(self.data_size as usize - offset);
        // Both ranges lie within the data pages (`offset + first` and `out.len() - first`
        // are at most data_size); `out` is a buffer of ours, apart from the ring.
        // SAFETY: in bounds and non-overlapping, as just said.
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(offset), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base` and `mapped` are exactly what mmap returned and was given; nothing
        // refers to the mapping after this.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}
