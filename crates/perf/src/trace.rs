//! Perf records written as a NetTrace V6 trace in one-collect's shape (the shape of
//! `dotnet-trace collect-linux`'s traces, which `eptrace report`/`convert` and TraceEvent
//! read):
//!
//! * `Universal.Events/cpu`: one CPU sample, its stack leaf first (kernel frames, then
//!   user ones), its thread and CPU in the header; `Value` 1, the trace's
//!   `ExpectedCPUSamplingRate` the ns each stands for.
//! * `Universal.Events/offcpu` (this project's, where asked for): a thread's wait off CPU,
//!   written when it ends (the thread back on a CPU), `Value` its length in ns, its stack
//!   the one the thread left its CPU in (the context switch's sample).
//! * `Universal.System/ProcessCreate` (`NamespaceId` = pid, `Name`) and `ProcessExit`.
//! * `Universal.System/ProcessMapping`: a mapped range of a process (`Id`, inclusive
//!   `StartAddress`..`EndAddress`, `FileOffset`, `FileName`, `MetadataId`), with
//!   `ProcessMappingMetadata` holding `{"build_id": ...}` when the kernel gave one; the
//!   kernel is a `vmlinux` mapping over the upper half of the address space, its functions
//!   that samples hit named by `ProcessSymbol` events (from `/proc/kallsyms`). Code outside
//!   every file mapping (a JIT's: .NET, Node, the JVM) is named from the process's perf map
//!   (`/tmp/perf-PID.map`) where it wrote one: a mapping named after the map over the
//!   functions samples hit, each a `ProcessSymbol`. Anonymous mappings are not written
//!   (nothing names their code).
//!
//! * The recorded process's own events (its EventPipe session's: a .NET runtime's, an
//!   eventpipe-rs program's), each with its metadata, payload and stack as the session gave
//!   them, on the samples' clock ([`ForwardedEvent`], [`crate::clock`]). .NET's method
//!   load and rundown events among them name the JIT'd code the samples hit.
//!
//! A sample with a copy of its user stack gets its user frames unwound with the mapped
//! files' unwind tables (`unwinding`) where that reaches further than the kernel's
//! frame-pointer walk.
//!
//! Records arrive from several CPUs' rings, each in its own time order; they wait here
//! until [`PerfTrace::flush_before`] says no earlier one can still come, and are written in
//! time order, a pass at a time, so the file grows as the recording goes and a cut one
//! keeps what was written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::Arc;

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{
    EventHeader, EventMetadata, FieldDesc, FieldType, FormatVersion, Guid, ThreadInfo, TraceInfo,
};

use crate::record::{Mmap, Record, UserStack};
use crate::unwinding::Unwinders;

/// Addresses from here up are the kernel's on x86_64 and arm64.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Metadata ids.
const CPU: u32 = 1;
const PROCESS_CREATE: u32 = 2;
const PROCESS_EXIT: u32 = 3;
const PROCESS_MAPPING: u32 = 4;
const PROCESS_SYMBOL: u32 = 5;
const MAPPING_METADATA: u32 = 6;
const OFF_CPU: u32 = 7;
/// Forwarded events' metadata get ids from here up.
const FIRST_FORWARDED: u32 = 100;

/// One event of the recorded process's own EventPipe session, its time on the samples'
/// clock (CLOCK_MONOTONIC, ns).
#[derive(Debug, Clone)]
pub struct ForwardedEvent {
    /// When it happened, on the samples' clock.
    pub time: u64,
    /// Its process.
    pub pid: u32,
    /// Its thread (the OS thread id).
    pub tid: u32,
    /// Its metadata as the session stated it (ids are the session's; the trace gives each
    /// its own).
    pub metadata: Arc<EventMetadata>,
    /// Its payload, as written.
    pub payload: Vec<u8>,
    /// Its stack, innermost first (empty: none).
    pub stack: Vec<u64>,
    /// Its activity ids.
    pub activity_id: Guid,
    /// See `activity_id`.
    pub related_activity_id: Guid,
}

/// What a written trace holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// CPU samples.
    pub samples: u64,
    /// Samples whose stack reached into the kernel.
    pub kernel_samples: u64,
    /// Records the kernel dropped (its ring was full).
    pub lost: u64,
    /// Records that did not parse (none from a sane kernel).
    pub malformed: u64,
    /// Processes seen.
    pub processes: u64,
    /// Threads seen.
    pub threads: u64,
    /// Mappings written.
    pub mappings: u64,
    /// Waits off CPU written, and their time in all (ns).
    pub waits: u64,
    /// See `waits`.
    pub waited_ns: u64,
    /// Samples whose user frames came from unwinding their stack copy (rather than from a
    /// frame-pointer walk).
    pub unwound: u64,
    /// JIT functions named from perf maps.
    pub jit_symbols: u64,
    /// The process's own events written (from its EventPipe session).
    pub forwarded: u64,
}

#[derive(Debug)]
enum Pending {
    Sample {
        pid: u32,
        tid: u32,
        cpu: u32,
        callchain: Vec<u64>,
        user: Option<UserStack>,
        /// A context switch's sample (the stack a wait began in), not CPU time.
        switch: bool,
    },
    SwitchIn {
        pid: u32,
        tid: u32,
    },
    /// A new thread: named as its process until it names itself.
    NewThread {
        pid: u32,
        tid: u32,
    },
    Fork {
        pid: u32,
        parent: u32,
    },
    Mapping(Mmap),
    ProcessCreate {
        pid: u32,
        name: String,
    },
    ProcessExit {
        pid: u32,
    },
    ThreadName {
        pid: u32,
        tid: u32,
        name: String,
    },
    Forwarded(Box<ForwardedEvent>),
}

/// One process's kernel frames.
#[derive(Debug, Default)]
struct KernelHits {
    /// Its `vmlinux` mapping (0 until its ProcessCreate is written).
    mapping: u64,
    /// Kernel addresses its samples hit, not yet looked up.
    hits: BTreeSet<u64>,
    /// Kernel functions (their start) already named for it.
    named: BTreeSet<u64>,
}

/// A V6 trace being written from perf records.
#[derive(Debug)]
pub struct PerfTrace<W: Write> {
    out: TraceWriter<W>,
    /// Records not yet written, by time (then arrival).
    pending: BTreeMap<(u64, u64), Pending>,
    arrivals: u64,
    threads: HashMap<(u32, u32), u64>,
    names: HashMap<(u32, u32), String>,
    stacks: HashMap<Vec<u64>, u32>,
    processes: BTreeSet<u32>,
    /// Each process's kernel mapping id, the kernel addresses its samples hit since the
    /// last pass, and the kernel functions already named for it.
    kernel: BTreeMap<u32, KernelHits>,
    /// The kernel's functions (`/proc/kallsyms`), when known: samples' kernel frames are
    /// named pass by pass, so a cut trace keeps their names.
    kernel_table: Option<BTreeMap<u64, (u64, String)>>,
    /// Each process's file mappings (start, end), ever.
    files: HashMap<u32, Vec<(u64, u64)>>,
    /// Each process's user addresses samples hit outside its file mappings (JIT code).
    unmapped: BTreeMap<u32, BTreeSet<u64>>,
    kernel_frames: bool,
    unwinders: Unwinders,
    /// Each waiting thread's wait: when it began, its stack, the CPU it left.
    waits: HashMap<(u32, u32), (u64, u32, u32)>,
    next_mapping: u64,
    next_symbol: u64,
    /// Forwarded metadata: the session's id → the trace's.
    forwarded_metadata: HashMap<u32, u32>,
    sequence: u32,
    last_time: u64,
    summary: Summary,
}

/// `ProcessCreate`'s and the other rows' metadata.
fn metadata() -> Vec<EventMetadata> {
    let row = |id: u32, provider: &str, event_id: u32, name: &str, fields: &[(&str, FieldType)]| {
        EventMetadata {
            metadata_id: id,
            provider: provider.to_owned(),
            event_id,
            event_name: name.to_owned(),
            fields: fields
                .iter()
                .map(|(n, ty)| FieldDesc {
                    name: (*n).to_owned(),
                    ty: ty.clone(),
                })
                .collect(),
            ..EventMetadata::default()
        }
    };
    use FieldType::{Char8 as Str, VarUInt as Num};
    let sys = "Universal.System";
    vec![
        row(CPU, "Universal.Events", 1, "cpu", &[("Value", Num)]),
        row(OFF_CPU, "Universal.Events", 3, "offcpu", &[("Value", Num)]),
        row(
            PROCESS_CREATE,
            sys,
            1,
            "ProcessCreate",
            &[("NamespaceId", Num), ("Name", Str), ("NamespaceName", Str)],
        ),
        row(PROCESS_EXIT, sys, 2, "ProcessExit", &[]),
        row(
            PROCESS_MAPPING,
            sys,
            3,
            "ProcessMapping",
            &[
                ("Id", Num),
                ("StartAddress", Num),
                ("EndAddress", Num),
                ("FileOffset", Num),
                ("FileName", Str),
                ("MetadataId", Num),
            ],
        ),
        row(
            PROCESS_SYMBOL,
            sys,
            4,
            "ProcessSymbol",
            &[
                ("Id", Num),
                ("MappingId", Num),
                ("StartAddress", Num),
                ("EndAddress", Num),
                ("Name", Str),
            ],
        ),
        row(
            MAPPING_METADATA,
            sys,
            5,
            "ProcessMappingMetadata",
            &[
                ("Id", Num),
                ("SymbolMetadata", Str),
                ("VersionMetadata", Str),
            ],
        ),
    ]
}

/// A payload under construction: LEB128 numbers and u16-counted UTF-8 strings.
#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn num(mut self, mut v: u64) -> Self {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return self;
            }
            self.0.push(byte | 0x80);
        }
    }

    fn str(mut self, s: &str) -> Self {
        let bytes = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
        self.0.extend((bytes.len() as u16).to_le_bytes());
        self.0.extend(bytes);
        self
    }
}

impl<W: Write> PerfTrace<W> {
    /// Starts a trace: `sync_ticks` is the sampler clock's (CLOCK_MONOTONIC, ns) reading at
    /// `sync_utc`; `period_ns` the CPU time a sample stands for; `kernel_frames` whether
    /// samples can hold kernel frames (then the kernel gets a mapping in each process); the
    /// header names the recorded process `pid`.
    ///
    /// # Errors
    /// Writing fails.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        out: W,
        pid: Option<u32>,
        sync_utc: std::time::SystemTime,
        sync_ticks: u64,
        period_ns: u64,
        processors: u32,
        kernel_frames: bool,
    ) -> Result<Self, nettrace::Error> {
        let mut info = TraceInfo::new(FormatVersion::V6, 8);
        info.process_id = pid.map(u64::from);
        let utc_nanos = sync_utc
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        info.sync_time_utc = nettrace::SystemTime::from_unix_nanos(utc_nanos);
        info.sync_time_ticks = sync_ticks as i64;
        info.expected_cpu_sampling_rate = Some(period_ns);
        info.processor_count = Some(processors);
        let mut out = TraceWriter::new(out, &info)?;
        out.write_metadata_block(&metadata())?;
        Ok(PerfTrace {
            out,
            pending: BTreeMap::new(),
            arrivals: 0,
            threads: HashMap::new(),
            names: HashMap::new(),
            stacks: HashMap::new(),
            processes: BTreeSet::new(),
            kernel: BTreeMap::new(),
            kernel_table: None,
            kernel_frames,
            unwinders: Unwinders::default(),
            waits: HashMap::new(),
            files: HashMap::new(),
            unmapped: BTreeMap::new(),
            next_mapping: 1,
            next_symbol: 0,
            forwarded_metadata: HashMap::new(),
            sequence: 0,
            last_time: 0,
            summary: Summary::default(),
        })
    }

    /// Takes one record (or one that did not parse).
    pub fn add(&mut self, record: Result<Record, crate::RecordError>) {
        let Ok(record) = record else {
            self.summary.malformed += 1;
            return;
        };
        let (time, pending) = match record {
            Record::Sample(s) => (
                s.time,
                Pending::Sample {
                    pid: s.pid,
                    tid: s.tid,
                    cpu: s.cpu,
                    switch: s.period == crate::record::SWITCH_SAMPLE_PERIOD,
                    callchain: s.callchain,
                    user: s.user,
                },
            ),
            Record::Switch {
                pid,
                tid,
                out: false,
                time,
            } => (time, Pending::SwitchIn { pid, tid }),
            Record::Fork {
                pid,
                tid,
                ppid,
                time,
            } if pid == tid && pid != ppid => (time, Pending::Fork { pid, parent: ppid }),
            Record::Fork { pid, tid, time, .. } if pid != tid => {
                (time, Pending::NewThread { pid, tid })
            }
            Record::Mmap(m) if m.executable => (m.time, Pending::Mapping(m)),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            } => {
                if exec && pid == tid {
                    self.push(
                        time,
                        Pending::ProcessCreate {
                            pid,
                            name: name.clone(),
                        },
                    );
                }
                (time, Pending::ThreadName { pid, tid, name })
            }
            Record::Exit { pid, tid, time } if pid == tid => (time, Pending::ProcessExit { pid }),
            Record::Lost { count } => {
                self.summary.lost += count;
                return;
            }
            _ => return,
        };
        self.push(time, pending);
    }

    /// Takes one event of the recorded process's own session.
    pub fn add_forwarded(&mut self, event: ForwardedEvent) {
        self.push(event.time, Pending::Forwarded(Box::new(event)));
    }

    fn push(&mut self, time: u64, pending: Pending) {
        self.arrivals += 1;
        self.pending.insert((time, self.arrivals), pending);
    }

    /// Writes every record earlier than `time` (ns on the sampler's clock): the caller knows
    /// that no earlier one is still to come.
    ///
    /// # Errors
    /// Writing fails.
    pub fn flush_before(&mut self, time: u64) -> Result<(), nettrace::Error> {
        let later = self.pending.split_off(&(time, 0));
        let ready = std::mem::replace(&mut self.pending, later);
        self.write(ready)?;
        // Out of any buffer: a recorder killed now leaves every pass before this one.
        self.out.flush()
    }

    fn write(&mut self, ready: BTreeMap<(u64, u64), Pending>) -> Result<(), nettrace::Error> {
        let mut threads = Vec::new();
        let mut new_stacks: Vec<Vec<u8>> = Vec::new();
        let mut new_metadata: Vec<EventMetadata> = Vec::new();
        let first_stack = self.stacks.len() as u32 + 1;
        let mut events: Vec<(EventHeader, Vec<u8>)> = Vec::new();
        for ((time, _), pending) in ready {
            let (pid, tid, metadata, stack_id, cpu, payload) = match pending {
                Pending::Forwarded(event) => {
                    let metadata_id =
                        self.forwarded_metadata_id(&event.metadata, &mut new_metadata);
                    let stack_id = if event.stack.is_empty() {
                        0
                    } else {
                        let next = self.stacks.len() as u32 + 1;
                        *self.stacks.entry(event.stack).or_insert_with_key(|chain| {
                            new_stacks.push(chain.iter().flat_map(|a| a.to_le_bytes()).collect());
                            next
                        })
                    };
                    self.summary.forwarded += 1;
                    let (mut header, payload) = self.header_for(
                        &mut threads,
                        (event.pid, event.tid),
                        metadata_id,
                        stack_id,
                        0,
                        time,
                        Payload(event.payload),
                    );
                    header.activity_id = event.activity_id;
                    header.related_activity_id = event.related_activity_id;
                    events.push((header, payload));
                    continue;
                }
                Pending::Sample {
                    pid,
                    tid,
                    cpu,
                    callchain,
                    user,
                    switch,
                } => {
                    let callchain = match user {
                        Some(user) => self.whole_stack(pid, callchain, &user),
                        None => callchain,
                    };
                    if self.kernel_frames {
                        let hits = &mut self.kernel.entry(pid).or_default().hits;
                        hits.extend(callchain.iter().filter(|&&a| a >= KERNEL_START));
                    }
                    let files = self.files.get(&pid).map_or(&[][..], Vec::as_slice);
                    let outside = callchain.iter().filter(|&&a| {
                        a < KERNEL_START && !files.iter().any(|&(s, e)| (s..e).contains(&a))
                    });
                    let outside: Vec<u64> = outside.copied().collect();
                    if !outside.is_empty() {
                        self.unmapped.entry(pid).or_default().extend(outside);
                    }
                    let in_kernel = callchain.first().is_some_and(|&a| a >= KERNEL_START);
                    let next = self.stacks.len() as u32 + 1;
                    let stack_id = *self.stacks.entry(callchain).or_insert_with_key(|chain| {
                        new_stacks.push(chain.iter().flat_map(|a| a.to_le_bytes()).collect());
                        next
                    });
                    if switch {
                        self.waits.insert((pid, tid), (time, stack_id, cpu));
                        continue;
                    }
                    self.summary.samples += 1;
                    self.summary.kernel_samples += u64::from(in_kernel);
                    (pid, tid, CPU, stack_id, cpu, Payload::default().num(1))
                }
                Pending::SwitchIn { pid, tid } => {
                    let Some((began, stack_id, cpu)) = self.waits.remove(&(pid, tid)) else {
                        continue;
                    };
                    let waited = time.saturating_sub(began);
                    self.summary.waits += 1;
                    self.summary.waited_ns += waited;
                    (
                        pid,
                        tid,
                        OFF_CPU,
                        stack_id,
                        cpu,
                        Payload::default().num(waited),
                    )
                }
                Pending::NewThread { pid, tid } => {
                    if let Some(name) = self.names.get(&(pid, pid)).cloned() {
                        self.names.entry((pid, tid)).or_insert(name);
                    }
                    continue;
                }
                Pending::Fork { pid, parent } => {
                    self.unwinders.fork(pid, parent);
                    continue;
                }
                Pending::ProcessCreate { pid, name } => {
                    self.unwinders.exec(pid);
                    if !self.processes.insert(pid) {
                        // A second exec of a process: its new name only.
                        continue;
                    }
                    self.summary.processes += 1;
                    let p = Payload::default()
                        .num(u64::from(pid))
                        .str(&name)
                        .str("Unknown");
                    (pid, 0, PROCESS_CREATE, 0, 0, p)
                }
                Pending::ProcessExit { pid } => {
                    self.unwinders.exit(pid);
                    (pid, 0, PROCESS_EXIT, 0, 0, Payload::default())
                }
                Pending::ThreadName { pid, tid, name } => {
                    self.names.insert((pid, tid), name);
                    if let Some(&index) = self.threads.get(&(pid, tid)) {
                        threads.push(self.thread_row(index, pid, tid));
                    }
                    continue;
                }
                Pending::Mapping(m) => {
                    self.unwinders.map(&m);
                    // Anonymous memory (`//anon`, `/memfd:...`, a deleted file): nothing
                    // names its code but a perf map.
                    let file = eventpipe_unwind::is_file_path(&m.file_name)
                        && !m.file_name.starts_with("//")
                        && !m.file_name.starts_with("/memfd:");
                    if !file && !m.file_name.starts_with('[') {
                        continue;
                    }
                    if file {
                        let end = m.start.saturating_add(m.len);
                        self.files.entry(m.pid).or_default().push((m.start, end));
                    }
                    self.summary.mappings += 1;
                    let id = self.next_mapping;
                    self.next_mapping += 1;
                    let metadata_id = match &m.build_id {
                        Some(build_id) => {
                            let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
                            let json = format!(r#"{{"type": "ELF", "build_id": "{hex}"}}"#);
                            let p = Payload::default().num(id).str(&json).str("");
                            events.push(self.header_for(
                                &mut threads,
                                (m.pid, 0),
                                MAPPING_METADATA,
                                0,
                                0,
                                time,
                                p,
                            ));
                            id
                        }
                        None => 0,
                    };
                    let p = Payload::default()
                        .num(id)
                        .num(m.start)
                        .num(m.start.saturating_add(m.len.max(1) - 1))
                        .num(m.file_offset)
                        .str(&m.file_name)
                        .num(metadata_id);
                    (m.pid, 0, PROCESS_MAPPING, 0, 0, p)
                }
            };
            if metadata == PROCESS_CREATE && self.kernel_frames {
                let id = self.next_mapping;
                self.next_mapping += 1;
                self.kernel.entry(pid).or_default().mapping = id;
                let p = Payload::default()
                    .num(id)
                    .num(KERNEL_START)
                    .num(u64::MAX)
                    .num(0)
                    .str("vmlinux")
                    .num(0);
                events.push(self.header_for(
                    &mut threads,
                    (pid, 0),
                    PROCESS_MAPPING,
                    0,
                    0,
                    time,
                    p,
                ));
            }
            events.push(self.header_for(
                &mut threads,
                (pid, tid),
                metadata,
                stack_id,
                cpu,
                time,
                payload,
            ));
        }
        self.name_kernel_hits(&mut threads, &mut events);
        if !new_metadata.is_empty() {
            self.out.write_metadata_block(&new_metadata)?;
        }
        if !new_stacks.is_empty() {
            let refs: Vec<&[u8]> = new_stacks.iter().map(Vec::as_slice).collect();
            self.out.write_stack_block(first_stack, &refs)?;
        }
        self.write_events(&threads, &events)
    }

    /// The trace's id for a forwarded event's metadata, its row added to `new_rows` the
    /// first time. A runtime event whose fields came from the manifest (a .NET runtime
    /// states none) is written without them, as it came, so readers take them from the
    /// manifest again.
    fn forwarded_metadata_id(
        &mut self,
        metadata: &EventMetadata,
        new_rows: &mut Vec<EventMetadata>,
    ) -> u32 {
        if let Some(&id) = self.forwarded_metadata.get(&metadata.metadata_id) {
            return id;
        }
        let id = FIRST_FORWARDED + self.forwarded_metadata.len() as u32;
        self.forwarded_metadata.insert(metadata.metadata_id, id);
        let mut row = metadata.clone();
        row.metadata_id = id;
        if row.fields_from_manifest {
            row.fields.clear();
            row.fields_from_manifest = false;
        }
        new_rows.push(row);
        id
    }

    /// The kernel's frames of `callchain`, then the longer of its user frames (a
    /// frame-pointer walk, where the sampler asked the kernel for one) and those unwound
    /// from the sample's stack copy (at least the interrupted address): the one that
    /// reaches further toward the thread's start.
    fn whole_stack(&mut self, pid: u32, callchain: Vec<u64>, user: &UserStack) -> Vec<u64> {
        let mut unwound = self.unwinders.unwind(pid, user);
        if unwound.is_empty() && user.ip != 0 && user.ip < KERNEL_START {
            unwound.push(user.ip);
        }
        let user_frames = callchain.iter().filter(|&&a| a < KERNEL_START).count();
        if unwound.len() <= user_frames {
            return callchain;
        }
        self.summary.unwound += 1;
        let mut stack: Vec<u64> = callchain
            .into_iter()
            .filter(|&a| a >= KERNEL_START)
            .collect();
        stack.extend(unwound);
        stack
    }

    fn write_events(
        &mut self,
        threads: &[ThreadInfo],
        events: &[(EventHeader, Vec<u8>)],
    ) -> Result<(), nettrace::Error> {
        if !threads.is_empty() {
            self.out.write_thread_block(threads)?;
        }
        let mut block = EventBlockBuilder::new(FormatVersion::V6);
        for (header, payload) in events {
            block.push(header, payload);
            if block.len() >= 60_000 {
                self.out.write_event_block(&mut block)?;
                block.clear();
            }
        }
        if !block.is_empty() {
            self.out.write_event_block(&mut block)?;
        }
        Ok(())
    }

    fn thread_row(&self, index: u64, pid: u32, tid: u32) -> ThreadInfo {
        ThreadInfo {
            index,
            name: self.names.get(&(pid, tid)).cloned(),
            process_id: Some(u64::from(pid)),
            thread_id: Some(u64::from(tid)),
            key_values: Vec::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn header_for(
        &mut self,
        threads: &mut Vec<ThreadInfo>,
        (pid, tid): (u32, u32),
        metadata_id: u32,
        stack_id: u32,
        processor: u32,
        time: u64,
        payload: Payload,
    ) -> (EventHeader, Vec<u8>) {
        let index = match self.threads.get(&(pid, tid)) {
            Some(&index) => index,
            None => {
                let index = self.threads.len() as u64 + 1;
                self.threads.insert((pid, tid), index);
                if tid != 0 {
                    self.summary.threads += 1;
                }
                threads.push(self.thread_row(index, pid, tid));
                index
            }
        };
        self.sequence = self.sequence.wrapping_add(1);
        let header = EventHeader {
            metadata_id,
            sequence_number: self.sequence,
            thread: index,
            capture_thread: 0,
            processor,
            stack_id,
            timestamp: time as i64,
            is_sorted: time >= self.last_time,
            payload_size: payload.0.len() as u32,
            ..EventHeader::default()
        };
        self.last_time = self.last_time.max(time);
        (header, payload.0)
    }

    /// Names the kernel frames of the samples from here on with `kallsyms` (the text of
    /// `/proc/kallsyms`): each pass writes a `ProcessSymbol` for each kernel function its
    /// samples hit for the first time in their process.
    pub fn name_kernel_with(&mut self, kallsyms: &str) {
        self.kernel_table = Some(kernel_symbols(kallsyms));
    }

    /// The `ProcessSymbol`s of the kernel functions hit since the last pass, for processes
    /// whose kernel mapping is written.
    fn name_kernel_hits(
        &mut self,
        threads: &mut Vec<ThreadInfo>,
        events: &mut Vec<(EventHeader, Vec<u8>)>,
    ) {
        let Some(table) = self.kernel_table.take() else {
            return;
        };
        let time = self.last_time;
        let mut kernel = std::mem::take(&mut self.kernel);
        for (&pid, k) in kernel.iter_mut().filter(|(_, k)| k.mapping != 0) {
            for address in std::mem::take(&mut k.hits) {
                let Some((&start, (end, name))) = table.range(..=address).next_back() else {
                    continue;
                };
                if address > *end || !k.named.insert(start) {
                    continue;
                }
                let p = Payload::default()
                    .num(self.next_symbol)
                    .num(k.mapping)
                    .num(start)
                    .num(*end)
                    .str(name);
                self.next_symbol += 1;
                events.push(self.header_for(threads, (pid, 0), PROCESS_SYMBOL, 0, 0, time, p));
            }
        }
        self.kernel = kernel;
        self.kernel_table = Some(table);
    }

    /// Writes what is left, the JIT functions the samples hit (from `perf_map`: the text of
    /// a process's `/tmp/perf-PID.map`, where it wrote one), and the trace's end.
    ///
    /// # Errors
    /// Writing fails.
    pub fn finish(
        mut self,
        perf_map: impl Fn(u32) -> Option<String>,
    ) -> Result<(W, Summary), nettrace::Error> {
        let rest = std::mem::take(&mut self.pending);
        self.write(rest)?;
        self.write_perf_map_symbols(perf_map)?;
        let summary = self.summary.clone();
        Ok((self.out.finish()?, summary))
    }
}

impl<W: Write> PerfTrace<W> {
    /// Each process's JIT functions its samples hit, named from its perf map: a mapping
    /// over them, named after the map, and a symbol each.
    fn write_perf_map_symbols(
        &mut self,
        perf_map: impl Fn(u32) -> Option<String>,
    ) -> Result<(), nettrace::Error> {
        let mut threads = Vec::new();
        let mut events = Vec::new();
        let time = self.last_time;
        for (pid, hits) in std::mem::take(&mut self.unmapped) {
            let Some(table) = perf_map(pid).map(|text| perf_map_symbols(&text)) else {
                continue;
            };
            // A return address can be one past its call's function: the symbol of the byte
            // before it too.
            let mut named: BTreeMap<u64, (u64, &str)> = BTreeMap::new();
            for address in hits.iter().flat_map(|&a| [a, a.saturating_sub(1)]) {
                if let Some((&start, (end, name))) = table.range(..=address).next_back() {
                    if address <= *end {
                        named.insert(start, (*end, name.as_str()));
                    }
                }
            }
            let (Some((&low, _)), Some((_, &(high, _)))) =
                (named.first_key_value(), named.last_key_value())
            else {
                continue;
            };
            let mapping = self.next_mapping;
            self.next_mapping += 1;
            self.summary.jit_symbols += named.len() as u64;
            let p = Payload::default()
                .num(mapping)
                .num(low)
                .num(high)
                .num(0)
                .str(&format!("/tmp/perf-{pid}.map"))
                .num(0);
            events.push(self.header_for(&mut threads, (pid, 0), PROCESS_MAPPING, 0, 0, time, p));
            for (start, (end, name)) in named {
                let id = self.next_symbol;
                self.next_symbol += 1;
                let p = Payload::default()
                    .num(id)
                    .num(mapping)
                    .num(start)
                    .num(end)
                    .str(name);
                events.push(self.header_for(&mut threads, (pid, 0), PROCESS_SYMBOL, 0, 0, time, p));
            }
        }
        self.write_events(&threads, &events)
    }
}

/// A perf map's functions (`START SIZE NAME`, hex, one a line): start → (inclusive end,
/// name). Lines that do not parse are passed over.
fn perf_map_symbols(text: &str) -> BTreeMap<u64, (u64, String)> {
    text.lines()
        .filter_map(|line| {
            let mut cols = line.splitn(3, ' ');
            let start = u64::from_str_radix(cols.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(cols.next()?.trim_start_matches("0x"), 16).ok()?;
            let name = cols.next()?.trim();
            (size > 0 && !name.is_empty())
                .then(|| (start, (start.saturating_add(size - 1), name.to_owned())))
        })
        .collect()
}

/// `/proc/kallsyms`' text functions: start → (inclusive end, name); each ends where the
/// next begins.
fn kernel_symbols(text: &str) -> BTreeMap<u64, (u64, String)> {
    let mut starts: Vec<(u64, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let address = u64::from_str_radix(cols.next()?, 16).ok()?;
            let kind = cols.next()?;
            let name = cols.next()?;
            (address != 0 && matches!(kind, "t" | "T")).then_some((address, name))
        })
        .collect();
    starts.sort_unstable();
    starts.dedup_by_key(|s| s.0);
    let mut table = BTreeMap::new();
    for (i, &(start, name)) in starts.iter().enumerate() {
        let end = starts
            .get(i + 1)
            .map_or(start.saturating_add(0xfff), |next| next.0 - 1);
        table.insert(start, (end, name.to_owned()));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_give_inclusive_ranges_and_bad_lines_are_passed_over() {
        let table = perf_map_symbols(
            "7fe95c0061c0 374 JS:*hotLoop /tmp/rec/hot.js:1:17\n\
             0x1000 10 [OptimizedTier1] App.Program::Main(string[])\n\
             nonsense\n\
             2000 0 empty\n",
        );
        assert_eq!(
            table.get(&0x7fe9_5c00_61c0),
            Some(&(
                0x7fe9_5c00_6533,
                "JS:*hotLoop /tmp/rec/hot.js:1:17".to_owned()
            ))
        );
        assert_eq!(table.get(&0x1000).unwrap().0, 0x100f);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn kallsyms_text_functions_end_where_the_next_begins() {
        let table = kernel_symbols(
            "ffffffff81000000 T _stext\n\
             ffffffff81000100 t helper [mod]\n\
             ffffffff81000200 D some_data\n\
             0000000000000000 T hidden\n\
             ffffffff81000300 T last\n",
        );
        assert_eq!(
            table.get(&0xffff_ffff_8100_0000),
            Some(&(0xffff_ffff_8100_00ff, "_stext".to_owned()))
        );
        assert_eq!(
            table.get(&0xffff_ffff_8100_0100).unwrap().0,
            0xffff_ffff_8100_02ff
        );
        assert_eq!(table.len(), 3);
    }
}
