//! The records a perf ring buffer holds, parsed from their bytes.
//!
//! The layouts are the kernel's (`include/uapi/linux/perf_event.h`) for the attributes
//! [`crate::Sampler`] asks for: samples carry `IP | TID | TIME | CPU | PERIOD | CALLCHAIN`,
//! in that order; every other record ends with the same `sample_id_all` trailer of `TID |
//! TIME | CPU` (pid, tid, time, cpu, reserved: 24 bytes). Parsing is separate from reading
//! the ring so that it can be tested, and fuzzed, on bytes alone: a record that is shorter
//! than its layout, or says it holds more than it does, is an error naming it, never a panic.

/// `PERF_RECORD_*` types this crate reads.
pub(crate) mod kind {
    pub(crate) const MMAP: u32 = 1;
    pub(crate) const LOST: u32 = 2;
    pub(crate) const COMM: u32 = 3;
    pub(crate) const EXIT: u32 = 4;
    pub(crate) const FORK: u32 = 7;
    pub(crate) const SAMPLE: u32 = 9;
    pub(crate) const MMAP2: u32 = 10;
    pub(crate) const SWITCH: u32 = 14;
}

/// `misc` bits.
const MISC_CPUMODE_MASK: u16 = 7;
const MISC_KERNEL: u16 = 1;
const MISC_COMM_EXEC: u16 = 1 << 13;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Callchain entries from here up are context markers (`PERF_CONTEXT_KERNEL`, `_USER`, ...),
/// not addresses.
const CONTEXT_MAX: u64 = -4095i64 as u64;

/// The `sample_id_all` trailer's size: pid, tid (u32 each), time (u64), cpu, reserved.
const TRAILER: usize = 24;

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A CPU sample.
    Sample(Sample),
    /// A mapping of a file (or anonymous memory) into a process.
    Mmap(Mmap),
    /// A thread's name: set by `prctl`/`pthread_setname_np`, or by an exec (`exec`).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name (at most 15 bytes, as the kernel keeps it).
        name: String,
        /// Whether an exec set it.
        exec: bool,
        /// When, ns on the sampler's clock.
        time: u64,
    },
    /// A new process or thread.
    Fork {
        /// Its process id.
        pid: u32,
        /// Its thread id.
        tid: u32,
        /// The process that made it.
        ppid: u32,
        /// When, ns on the sampler's clock.
        time: u64,
    },
    /// A thread (or, when `pid == tid`, a process) that ended.
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// When, ns on the sampler's clock.
        time: u64,
    },
    /// A thread left its CPU (`out`) or came back to one.
    Switch {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Whether it left.
        out: bool,
        /// When, ns on the sampler's clock.
        time: u64,
    },
    /// Records the kernel dropped because the ring was full.
    Lost {
        /// How many.
        count: u64,
    },
    /// A record of a kind this crate does not read.
    Other {
        /// Its `PERF_RECORD_*` type.
        kind: u32,
    },
}

/// What a sample record holds beyond its callchain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleLayout {
    /// The callchain only (the kernel's frame-pointer walk).
    #[default]
    Callchain,
    /// Then the user registers `bp`, `sp`, `ip` (`PERF_SAMPLE_REGS_USER` with the x86_64
    /// mask [`USER_REGS_MASK`]) and a copy of the user stack from `sp`
    /// (`PERF_SAMPLE_STACK_USER`), for unwinding with the binaries' unwind tables.
    WithUserStack,
}

/// The period of a context-switch sample (one switch), which tells it from a CPU-time
/// sample (whose period is at least 10 µs of CPU time).
pub const SWITCH_SAMPLE_PERIOD: u64 = 1;

/// `sample_regs_user`: x86_64's `PERF_REG_X86_BP` (6), `SP` (7) and `IP` (8).
pub const USER_REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);

/// A sample's user registers and stack copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStack {
    /// The frame pointer register.
    pub bp: u64,
    /// The stack pointer: `bytes` start here.
    pub sp: u64,
    /// The instruction pointer.
    pub ip: u64,
    /// The stack from `sp` up, as much as was copied and was there.
    pub bytes: Vec<u8>,
}

/// A CPU sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When, ns on the sampler's clock.
    pub time: u64,
    /// The CPU it ran on.
    pub cpu: u32,
    /// The time it stands for, ns of CPU time (the sampling period).
    pub period: u64,
    /// Whether the interrupted code was the kernel's.
    pub in_kernel: bool,
    /// Return addresses, the innermost (the interrupted instruction) first, kernel frames
    /// before user ones, without the kernel's context markers.
    pub callchain: Vec<u64>,
    /// The user registers and stack, when asked for and the sample interrupted (or was
    /// called from) user code.
    pub user: Option<UserStack>,
}

/// A mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap {
    /// Process id.
    pub pid: u32,
    /// Thread id of the thread that mapped it.
    pub tid: u32,
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// The file offset `start` maps.
    pub file_offset: u64,
    /// The file's path, or a name such as `[vdso]`, `//anon`, `[heap]`.
    pub file_name: String,
    /// The file's GNU build id, when the kernel gave it (`MMAP2` with build ids).
    pub build_id: Option<Vec<u8>>,
    /// Whether the mapping is executable (`PROT_EXEC`); `MMAP` records are only made for
    /// executable mappings.
    pub executable: bool,
    /// When, ns on the sampler's clock.
    pub time: u64,
}

/// A record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("perf record of type {kind} ({len} bytes): {what}")]
pub struct RecordError {
    /// Its `PERF_RECORD_*` type.
    pub kind: u32,
    /// Its length.
    pub len: usize,
    /// What is wrong.
    pub what: &'static str,
}

/// Reads little-endian fields off a record, failing on the first one past its end.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn u32(&mut self) -> Option<u32> {
        let v = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_le_bytes(v.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        let v = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_le_bytes(v.try_into().ok()?))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(v)
    }

    /// A NUL-terminated string in the bytes before the trailer.
    fn string_before_trailer(&mut self) -> Option<String> {
        let end = self.bytes.len().checked_sub(TRAILER)?;
        let raw = self.bytes.get(self.at..end)?;
        let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        self.at = end;
        Some(String::from_utf8_lossy(&raw[..len]).into_owned())
    }

    /// The trailer's time.
    fn trailer_time(&self) -> Option<u64> {
        let end = self.bytes.len().checked_sub(TRAILER)?;
        let v = self.bytes.get(end + 8..end + 16)?;
        Some(u64::from_le_bytes(v.try_into().ok()?))
    }
}

/// Parses one whole record: its 8-byte header (type u32, misc u16, size u16) and body,
/// samples laid out as [`SampleLayout::Callchain`].
///
/// # Errors
/// The record is shorter than its header says, or than its type's layout.
pub fn parse(bytes: &[u8]) -> Result<Record, RecordError> {
    parse_with(bytes, SampleLayout::Callchain)
}

/// [`parse`], samples laid out as `layout` says.
///
/// # Errors
/// As [`parse`].
pub fn parse_with(bytes: &[u8], layout: SampleLayout) -> Result<Record, RecordError> {
    let header = |what| RecordError {
        kind: bytes
            .get(..4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]))),
        len: bytes.len(),
        what,
    };
    if bytes.len() < 8 {
        return Err(header("shorter than a record header"));
    }
    let kind = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let misc = u16::from_le_bytes([bytes[4], bytes[5]]);
    let size = usize::from(u16::from_le_bytes([bytes[6], bytes[7]]));
    if size != bytes.len() {
        return Err(header("its header's size is not its length"));
    }
    let mut f = Fields { bytes, at: 8 };
    let short = RecordError {
        kind,
        len: bytes.len(),
        what: "shorter than its type's layout",
    };
    let record = match kind {
        kind::SAMPLE => sample(&mut f, misc, layout),
        kind::MMAP | kind::MMAP2 => mmap(&mut f, kind, misc),
        kind::COMM => (|| {
            let (pid, tid) = (f.u32()?, f.u32()?);
            let time = f.trailer_time()?;
            let name = f.string_before_trailer()?;
            let exec = misc & MISC_COMM_EXEC != 0;
            Some(Record::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            })
        })(),
        kind::FORK | kind::EXIT => (|| {
            let (pid, ppid, tid, _ptid, time) = (f.u32()?, f.u32()?, f.u32()?, f.u32()?, f.u64()?);
            Some(if kind == kind::FORK {
                Record::Fork {
                    pid,
                    tid,
                    ppid,
                    time,
                }
            } else {
                Record::Exit { pid, tid, time }
            })
        })(),
        kind::SWITCH => (|| {
            let end = bytes.len().checked_sub(TRAILER)?;
            let trailer = bytes.get(end..end + 8)?;
            Some(Record::Switch {
                pid: u32::from_le_bytes(trailer[..4].try_into().ok()?),
                tid: u32::from_le_bytes(trailer[4..].try_into().ok()?),
                out: misc & MISC_SWITCH_OUT != 0,
                time: f.trailer_time()?,
            })
        })(),
        kind::LOST => (|| {
            let _id = f.u64()?;
            Some(Record::Lost { count: f.u64()? })
        })(),
        other => Some(Record::Other { kind: other }),
    };
    record.ok_or(short)
}

fn sample(f: &mut Fields<'_>, misc: u16, layout: SampleLayout) -> Option<Record> {
    let ip = f.u64()?;
    let (pid, tid) = (f.u32()?, f.u32()?);
    let time = f.u64()?;
    let (cpu, _reserved) = (f.u32()?, f.u32()?);
    let period = f.u64()?;
    let nr = usize::try_from(f.u64()?).ok()?;
    let raw = f.take(nr.checked_mul(8)?)?;
    let mut callchain: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .filter(|&a| a < CONTEXT_MAX)
        .collect();
    if callchain.is_empty() {
        // No callchain (the kernel could not walk one): the sampled address alone.
        callchain.push(ip);
    }
    let user = match layout {
        SampleLayout::Callchain => None,
        SampleLayout::WithUserStack => user_stack(f)?,
    };
    Some(Record::Sample(Sample {
        pid,
        tid,
        time,
        cpu,
        period,
        in_kernel: misc & MISC_CPUMODE_MASK == MISC_KERNEL,
        callchain,
        user,
    }))
}

/// `REGS_USER` (abi, then the masked registers unless abi is 0: no user context) and
/// `STACK_USER` (size, the copy, then the size actually there unless size is 0).
fn user_stack(f: &mut Fields<'_>) -> Option<Option<UserStack>> {
    let abi = f.u64()?;
    let regs = if abi == 0 {
        None
    } else {
        Some((f.u64()?, f.u64()?, f.u64()?))
    };
    let size = usize::try_from(f.u64()?).ok()?;
    let (copy, there) = if size == 0 {
        (&[][..], 0)
    } else {
        let copy = f.take(size)?;
        (copy, usize::try_from(f.u64()?).ok()?)
    };
    Some(regs.map(|(bp, sp, ip)| UserStack {
        bp,
        sp,
        ip,
        bytes: copy[..there.min(copy.len())].to_vec(),
    }))
}

fn mmap(f: &mut Fields<'_>, kind: u32, misc: u16) -> Option<Record> {
    let (pid, tid) = (f.u32()?, f.u32()?);
    let (start, len, file_offset) = (f.u64()?, f.u64()?, f.u64()?);
    let time = f.trailer_time()?;
    let (build_id, executable) = if kind == kind::MMAP2 {
        let identity = f.take(24)?;
        let build_id = (misc & MISC_MMAP_BUILD_ID != 0).then(|| {
            let size = usize::from(identity[0]).min(20);
            identity[4..4 + size].to_vec()
        });
        let prot = f.u32()?;
        let _flags = f.u32()?;
        (build_id, prot & 4 != 0)
    } else {
        (None, true)
    };
    let file_name = f.string_before_trailer()?;
    Some(Record::Mmap(Mmap {
        pid,
        tid,
        start,
        len,
        file_offset,
        file_name,
        build_id,
        executable,
        time,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()) as u16;
        let mut out = kind.to_le_bytes().to_vec();
        out.extend(misc.to_le_bytes());
        out.extend(size.to_le_bytes());
        out.extend(body);
        out
    }

    fn trailer(pid: u32, tid: u32, time: u64) -> Vec<u8> {
        let mut t = pid.to_le_bytes().to_vec();
        t.extend(tid.to_le_bytes());
        t.extend(time.to_le_bytes());
        t.extend([0; 8]);
        t
    }

    #[test]
    fn a_sample_keeps_its_addresses_without_the_context_markers() {
        let mut body = Vec::new();
        body.extend(0x1000u64.to_le_bytes()); // ip
        body.extend(7u32.to_le_bytes());
        body.extend(8u32.to_le_bytes());
        body.extend(123u64.to_le_bytes()); // time
        body.extend(1u32.to_le_bytes());
        body.extend(0u32.to_le_bytes());
        body.extend(1_000_000u64.to_le_bytes()); // period
        let chain = [-512i64 as u64, 0x1000, 0x2000, -128i64 as u64, 0x3000];
        body.extend((chain.len() as u64).to_le_bytes());
        for a in chain {
            body.extend(a.to_le_bytes());
        }
        let Record::Sample(s) = parse(&record(kind::SAMPLE, 2, &body)).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!((s.pid, s.tid, s.time, s.cpu), (7, 8, 123, 1));
        assert_eq!(s.period, 1_000_000);
        assert!(!s.in_kernel);
        assert_eq!(s.callchain, [0x1000, 0x2000, 0x3000]);
        // A callchain longer than the record: an error, not a panic.
        let mut lying = body.clone();
        let at = lying.len() - 6 * 8;
        lying[at..at + 8].copy_from_slice(&1000u64.to_le_bytes());
        let err = parse(&record(kind::SAMPLE, 2, &lying)).unwrap_err();
        assert_eq!(err.what, "shorter than its type's layout");
    }

    #[test]
    fn a_sample_with_user_registers_keeps_the_part_of_the_stack_that_was_there() {
        let mut body = Vec::new();
        body.extend(0x1000u64.to_le_bytes());
        body.extend(7u32.to_le_bytes());
        body.extend(7u32.to_le_bytes());
        body.extend(5u64.to_le_bytes());
        body.extend(0u64.to_le_bytes()); // cpu, reserved
        body.extend(1u64.to_le_bytes()); // period
        body.extend(1u64.to_le_bytes()); // nr
        body.extend(0x1000u64.to_le_bytes());
        body.extend(2u64.to_le_bytes()); // abi 64
        for r in [0x7f00u64, 0x7e00, 0x1000] {
            body.extend(r.to_le_bytes());
        }
        body.extend(16u64.to_le_bytes()); // size copied
        body.extend([1u8; 16]);
        body.extend(8u64.to_le_bytes()); // dyn_size: half was stack
        let bytes = record(kind::SAMPLE, 2, &body);
        let Record::Sample(s) = parse_with(&bytes, SampleLayout::WithUserStack).unwrap() else {
            panic!("not a sample")
        };
        let user = s.user.unwrap();
        assert_eq!((user.bp, user.sp, user.ip), (0x7f00, 0x7e00, 0x1000));
        assert_eq!(user.bytes, [1u8; 8]);
        // A sample without its user part where one is expected: an error, not a panic.
        let mut short = bytes[..bytes.len() - 40].to_vec();
        let len = short.len() as u16;
        short[6..8].copy_from_slice(&len.to_le_bytes());
        assert!(parse_with(&short, SampleLayout::WithUserStack).is_err());
    }

    #[test]
    fn an_mmap2_record_gives_its_file_build_id_and_time() {
        let mut body = Vec::new();
        body.extend(5u32.to_le_bytes());
        body.extend(5u32.to_le_bytes());
        body.extend(0x40_0000u64.to_le_bytes());
        body.extend(0x1000u64.to_le_bytes());
        body.extend(0x2000u64.to_le_bytes());
        let mut identity = [0u8; 24];
        identity[0] = 20;
        identity[4..24].copy_from_slice(&[0xab; 20]);
        body.extend(identity);
        body.extend(5u32.to_le_bytes()); // PROT_READ | PROT_EXEC
        body.extend(2u32.to_le_bytes());
        body.extend(b"/bin/app\0\0\0\0\0\0\0\0");
        body.extend(trailer(5, 5, 99));
        let Record::Mmap(m) = parse(&record(kind::MMAP2, MISC_MMAP_BUILD_ID, &body)).unwrap()
        else {
            panic!("not an mmap")
        };
        assert_eq!((m.start, m.len, m.file_offset), (0x40_0000, 0x1000, 0x2000));
        assert_eq!(m.file_name, "/bin/app");
        assert_eq!(m.build_id.as_deref(), Some(&[0xab; 20][..]));
        assert!(m.executable);
        assert_eq!(m.time, 99);
    }

    #[test]
    fn comm_fork_exit_and_lost_records_parse() {
        let mut body = 3u32.to_le_bytes().to_vec();
        body.extend(4u32.to_le_bytes());
        body.extend(b"worker-1\0\0\0\0\0\0\0\0");
        body.extend(trailer(3, 4, 77));
        let comm = parse(&record(kind::COMM, MISC_COMM_EXEC, &body)).unwrap();
        assert_eq!(
            comm,
            Record::Comm {
                pid: 3,
                tid: 4,
                name: "worker-1".into(),
                exec: true,
                time: 77
            }
        );
        let mut body = Vec::new();
        for v in [3u32, 3, 9, 3] {
            body.extend(v.to_le_bytes());
        }
        body.extend(55u64.to_le_bytes());
        body.extend(trailer(3, 9, 55));
        assert_eq!(
            parse(&record(kind::FORK, 0, &body)).unwrap(),
            Record::Fork {
                pid: 3,
                tid: 9,
                ppid: 3,
                time: 55
            }
        );
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend(12u64.to_le_bytes());
        assert_eq!(
            parse(&record(kind::LOST, 0, &body)).unwrap(),
            Record::Lost { count: 12 }
        );
    }

    #[test]
    fn a_switch_record_names_its_thread_and_direction() {
        let body = trailer(3, 4, 88);
        assert_eq!(
            parse(&record(kind::SWITCH, MISC_SWITCH_OUT, &body)).unwrap(),
            Record::Switch {
                pid: 3,
                tid: 4,
                out: true,
                time: 88
            }
        );
        assert!(matches!(
            parse(&record(kind::SWITCH, 0, &body)).unwrap(),
            Record::Switch { out: false, .. }
        ));
    }

    #[test]
    fn short_and_mis_sized_records_are_errors() {
        assert!(parse(&[1, 2, 3]).is_err());
        let mut r = record(kind::COMM, 0, &[0; 4]);
        assert_eq!(
            parse(&r).unwrap_err().what,
            "shorter than its type's layout"
        );
        r[6] = 200;
        assert_eq!(
            parse(&r).unwrap_err().what,
            "its header's size is not its length"
        );
        assert_eq!(
            parse(&record(99, 0, &[])).unwrap(),
            Record::Other { kind: 99 }
        );
    }
}
