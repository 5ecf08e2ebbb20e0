//! pprof's `profile.proto`, gzip-compressed: what `go tool pprof` and most profile viewers
//! read.
//!
//! The messages in [`proto`] mirror `profile.proto` (package `perftools.profiles`) field by
//! field, with the same numbers, so no code generator is needed. The mapping from a
//! [`Profile`]:
//!
//! * one `Function` per frame (a frame is a function with its file, id = frame id + 1);
//!   one `Location` per (frame, source line) the samples were at (address 0: the profile
//!   is already symbolized), each with one `Line`, so `go tool pprof -lines` splits a
//!   function by line and every other view sums it; one `Mapping` per distinct module,
//!   marked as having functions so pprof does not try to symbolize it again;
//! * one `Sample` per distinct (thread, stack, lines), its values summed over the
//!   profile's samples, its location ids leaf first (pprof's order, the reverse of
//!   [`Profile::stacks`]), labelled `thread` (the thread's label, or its name alone, or
//!   not at all: [`ThreadLabels`]) and `thread_id` (numeric);
//! * sample types by [`SampleUnit`], the first always the number of captures: CPU time
//!   `samples/count` and `cpu/nanoseconds`; thread time (.NET) `samples/count` and
//!   `thread_time/nanoseconds` (not `cpu`: a thread-time sample may stand for waiting); with
//!   a fixed sampling interval, `period_type` names the time type and `period` the
//!   interval; bytes `samples/count` and `alloc_space/bytes`, the live heap `samples/count`
//!   and `inuse_space/bytes`; events `events/count`. The profile has no
//!   object counts, so no `alloc_objects` or `inuse_objects` is claimed.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use crate::error::{Error, Result};
use crate::profile::{FrameId, LinesId, Profile, SampleUnit};

/// What pprof samples are summed by: thread, stack and its lines.
type SampleKey = (usize, usize, Option<LinesId>);

/// The messages of pprof's `profile.proto`, with its field numbers.
///
/// Every `i64` that names a string is an index into [`proto::Profile::string_table`], whose
/// entry 0 is `""`.
pub mod proto {
    /// A profile: samples, their locations, functions and mappings, and the string table.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each of a sample's values measures (type and unit).
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// Binaries the locations belong to.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// Code locations.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// Functions the locations' lines name.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Every string, `""` first.
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// Regexp (string index) of frames to drop.
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        /// Regexp (string index) of frames to keep.
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        /// When collection started, nanoseconds since the Unix epoch (0: unknown).
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long the profile covers, in nanoseconds.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What `period` counts.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// Events between two samples.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// Free-form comments (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// The type (string index) of the value viewers show first.
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A type and a unit, both string indices.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct ValueType {
        /// `cpu`, `samples`, `alloc_space`, ...
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// `nanoseconds`, `count`, `bytes`, ...
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// Values observed at one stack.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Location ids, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per `Profile::sample_type`.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Context such as the thread.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A key with a string or a numeric value.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Label {
        /// String index of the key.
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// String index of the value (string labels).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// The value (numeric labels).
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// String index of `num`'s unit.
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// A binary mapped into the process.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct Mapping {
        /// Nonzero id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Load address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// End of the mapped range.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// File offset of `memory_start`.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// String index of the file name.
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// String index of the build id.
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Locations in it have function names.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// Locations in it have source file names.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// Locations in it have line numbers.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// Locations in it list inlined frames.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// A code location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Nonzero id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping's id, 0 for none.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// Instruction address, 0 when not known.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Innermost inlined function first, the caller they were inlined into last.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        /// Several symbols share the address.
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// A function and a line in it.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Line {
        /// The function's id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// Source line, 0 when not known.
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    /// A function.
    #[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
    pub struct Function {
        /// Nonzero id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// String index of the readable name.
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// String index of the system's (for example mangled) name.
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// String index of the source file.
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// First line of the function, 0 when not known.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// What a [`Profile`] does not say but a pprof file can.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PprofOptions {
    /// The wall-clock time of the trace's start (time 0 of [`crate::Sample::time_ms`]) as
    /// nanoseconds since the Unix epoch, e.g. from
    /// `TraceInfo::ticks_to_unix_nanos(trace.sync_time_ticks)`. `time_nanos` is 0
    /// (unknown) without it.
    pub trace_start_unix_nanos: Option<i128>,
    /// What each sample's string `thread` label holds.
    pub thread_labels: ThreadLabels,
}

/// The string label naming each sample's thread. Every choice keeps the numeric
/// `thread_id` label.
///
/// A file for `go tool pprof` wants the thread's whole label; a backend that makes a series
/// of every distinct string label (Grafana Pyroscope does) wants no value that grows with
/// thread ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ThreadLabels {
    /// `thread="name (tid)"` (or `"Thread tid"`): one value per thread.
    #[default]
    NameAndId,
    /// `thread="name"`, the id left out; an unnamed thread has no `thread` label. As many
    /// values as the program has thread names.
    NameOnly,
    /// No `thread` label.
    None,
}

/// The string table: `""` at 0, each string once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.intern("");
        s
    }

    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.intern(ty),
            unit: self.intern(unit),
        }
    }
}

fn to_i64(what: &'static str, value: u128) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Overflow { what, value })
}

fn signed_i64(what: &'static str, value: i128) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Overflow {
        what,
        value: value.unsigned_abs(),
    })
}

/// The (type, unit) of each sample value, and the default type, for `unit`.
fn sample_types(unit: SampleUnit) -> (&'static [(&'static str, &'static str)], &'static str) {
    match unit {
        SampleUnit::CpuTime => (&[("samples", "count"), ("cpu", "nanoseconds")], "cpu"),
        // Not `cpu`: a thread-time sample may stand for time spent waiting.
        SampleUnit::ThreadTime => (
            &[("samples", "count"), ("thread_time", "nanoseconds")],
            "thread_time",
        ),
        SampleUnit::OffCpuTime => (
            &[("samples", "count"), ("off_cpu", "nanoseconds")],
            "off_cpu",
        ),
        // What a Go mutex profile calls them.
        SampleUnit::LockWait => (
            &[("contentions", "count"), ("delay", "nanoseconds")],
            "delay",
        ),
        SampleUnit::Bytes => (
            &[("samples", "count"), ("alloc_space", "bytes")],
            "alloc_space",
        ),
        // What a Go heap profile calls the memory still in use.
        SampleUnit::LiveBytes => (
            &[("samples", "count"), ("inuse_space", "bytes")],
            "inuse_space",
        ),
        // A heap snapshot is memory in use too; each sample is one object.
        SampleUnit::HeapBytes => (
            &[("objects", "count"), ("inuse_space", "bytes")],
            "inuse_space",
        ),
        SampleUnit::Events => (&[("events", "count")], "events"),
    }
}

/// The id of `module`'s mapping, added to `out` when it has none yet.
fn mapping_id<'p>(
    module: &'p str,
    profile: &Profile,
    ids: &mut HashMap<&'p str, u64>,
    strings: &mut Strings,
    out: &mut proto::Profile,
) -> u64 {
    if let Some(&id) = ids.get(module) {
        return id;
    }
    let id = out.mapping.len() as u64 + 1;
    out.mapping.push(proto::Mapping {
        id,
        filename: strings.intern(module),
        build_id: profile
            .build_ids
            .get(module)
            .map_or(0, |b| strings.intern(b)),
        has_functions: true,
        ..Default::default()
    });
    ids.insert(module, id);
    id
}

/// Builds the pprof message for `profile` (what [`write_pprof_with`] encodes).
///
/// # Errors
/// [`Error::InvalidProfile`] for inconsistent indices, [`Error::Overflow`] when a summed
/// value does not fit an `i64`.
pub fn build_pprof(profile: &Profile, options: &PprofOptions) -> Result<proto::Profile> {
    build_signed(profile, options, 0)
}

/// `new` with `base` subtracted, as one profile: `new`'s samples, and `base`'s with their
/// values negated, summed per thread and stack, which is what `go tool pprof -diff_base
/// BASE NEW` reads two files into (`-top` of it gives each function's change).
///
/// # Errors
/// As [`build_pprof`]; or the two measure different things.
pub fn build_pprof_diff(
    base: &Profile,
    new: &Profile,
    options: &PprofOptions,
) -> Result<proto::Profile> {
    if base.unit != new.unit {
        return Err(Error::Diff(format!(
            "the base measures {} and the new profile {}",
            base.unit.describe(),
            new.unit.describe()
        )));
    }
    let mut both = new.clone();
    let first_base = both.samples.len();
    let frames: Vec<_> = base
        .frames
        .iter()
        .map(|f| both.intern_frame(f.clone()))
        .collect();
    let threads: Vec<usize> = base
        .threads
        .iter()
        .map(|t| both.intern_thread(t.id, t.name.as_deref(), t.process_id))
        .collect();
    for s in &base.samples {
        let stack = both.intern_stack(base.stacks[s.stack].iter().map(|&f| frames[f]).collect());
        let lines = s
            .lines
            .and_then(|l| both.intern_lines(base.lines[l].clone()));
        both.push_sample(crate::profile::Sample {
            thread: threads[s.thread],
            time_ms: s.time_ms,
            weight: s.weight,
            stack,
            lines,
        });
    }
    build_signed(&both, options, first_base)
}

/// The pprof message of `profile`, its samples from `negated_from` on (if any) subtracted.
fn build_signed(
    profile: &Profile,
    options: &PprofOptions,
    negated_from: usize,
) -> Result<proto::Profile> {
    profile.validate()?;
    let negated = |i: usize| negated_from > 0 && i >= negated_from;
    let mut strings = Strings::new();
    let mut out = proto::Profile::default();

    let (types, default_type) = sample_types(profile.unit);
    out.sample_type = types
        .iter()
        .map(|(ty, unit)| strings.value_type(ty, unit))
        .collect();
    out.default_sample_type = strings.intern(default_type);
    if let (true, Some(interval_ns)) = (profile.unit.is_time(), profile.sampling_interval_ns) {
        out.period_type = Some(strings.value_type(types[1].0, "nanoseconds"));
        out.period = to_i64("sampling interval (ns)", u128::from(interval_ns))?;
    }

    // Mappings (per module) and functions (per frame: a frame is a function).
    let mut mapping_ids: HashMap<&str, u64> = HashMap::new();
    let mut frame_mapping: Vec<u64> = Vec::with_capacity(profile.frames.len());
    // profile.proto: "mapping[0] will be the main binary"; `go tool pprof` names it
    // as the profile's `File:`.
    if let Some(main) = profile.main_module.as_deref() {
        if profile
            .frames
            .iter()
            .any(|f| f.module.as_deref() == Some(main))
        {
            mapping_id(main, profile, &mut mapping_ids, &mut strings, &mut out);
        }
    }
    for frame in &profile.frames {
        let mapping_id = match frame.module.as_deref() {
            None => 0,
            Some(module) => mapping_id(module, profile, &mut mapping_ids, &mut strings, &mut out),
        };
        if mapping_id != 0 {
            let m = &mut out.mapping[mapping_id as usize - 1];
            m.has_filenames |= frame.file.is_some();
        }
        frame_mapping.push(mapping_id);
        let name = strings.intern(&frame.function);
        out.function.push(proto::Function {
            id: out.function.len() as u64 + 1,
            name,
            system_name: name,
            filename: frame.file.as_deref().map_or(0, |f| strings.intern(f)),
            start_line: 0,
        });
    }

    // Samples: summed per (thread, stack, lines), in order of first appearance.
    let mut totals: Vec<(SampleKey, i128, i128)> = Vec::new();
    let mut slot: HashMap<SampleKey, usize> = HashMap::new();
    for (n, s) in profile.samples.iter().enumerate() {
        let key = (s.thread, s.stack, s.lines);
        let i = *slot.entry(key).or_insert_with(|| {
            totals.push((key, 0, 0));
            totals.len() - 1
        });
        let sign = if negated(n) { -1 } else { 1 };
        totals[i].1 += sign;
        totals[i].2 += sign * i128::from(s.weight);
    }
    let thread_key = strings.intern("thread");
    let thread_id_key = strings.intern("thread_id");
    let thread_labels: Vec<Option<i64>> = profile
        .threads
        .iter()
        .map(|t| match options.thread_labels {
            ThreadLabels::NameAndId => Some(strings.intern(&t.label())),
            ThreadLabels::NameOnly => t
                .name
                .as_deref()
                .filter(|name| !name.is_empty())
                .map(|name| strings.intern(name)),
            ThreadLabels::None => None,
        })
        .collect();
    // Locations: one per (frame, line), where pprof keeps lines (`go tool pprof -lines`).
    let mut location_ids: HashMap<(FrameId, u32), u64> = HashMap::new();
    for ((thread, stack, lines), count, weight) in totals {
        let value = match profile.unit {
            SampleUnit::CpuTime
            | SampleUnit::ThreadTime
            | SampleUnit::OffCpuTime
            | SampleUnit::LockWait => {
                vec![
                    signed_i64("sample count", count)?,
                    signed_i64("time (ns)", weight)?,
                ]
            }
            SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => {
                vec![
                    signed_i64("sample count", count)?,
                    signed_i64("bytes", weight)?,
                ]
            }
            SampleUnit::Events => vec![signed_i64("event weight", weight)?],
        };
        let mut label = Vec::with_capacity(2);
        if let Some(name) = thread_labels[thread] {
            label.push(proto::Label {
                key: thread_key,
                str: name,
                ..Default::default()
            });
        }
        if let Ok(tid) = i64::try_from(profile.threads[thread].id) {
            label.push(proto::Label {
                key: thread_id_key,
                num: tid,
                ..Default::default()
            });
        }
        let frames = &profile.stacks[stack];
        let line_of = |i: usize| lines.map_or(0, |l| profile.lines[l][i]);
        let mut location_id = Vec::with_capacity(frames.len());
        for (i, &frame) in frames.iter().enumerate().rev() {
            let line = line_of(i);
            let id = *location_ids.entry((frame, line)).or_insert_with(|| {
                let id = out.location.len() as u64 + 1;
                let mapping_id = frame_mapping[frame];
                if mapping_id != 0 && line != 0 {
                    out.mapping[mapping_id as usize - 1].has_line_numbers = true;
                }
                out.location.push(proto::Location {
                    id,
                    mapping_id,
                    address: 0,
                    line: vec![proto::Line {
                        function_id: frame as u64 + 1,
                        line: i64::from(line),
                    }],
                    is_folded: false,
                });
                id
            });
            location_id.push(id);
        }
        out.sample.push(proto::Sample {
            location_id,
            value,
            label,
        });
    }

    // The time the samples span, as a diff of the trace itself counts it (so rates per
    // second agree between a trace and its pprof); the whole profile's when they span none.
    let (from_ms, span_ms) = match profile.sample_span_ms() {
        Some((first, last)) => (first, last - first),
        None => (profile.start_ms, profile.end_ms - profile.start_ms),
    };
    if span_ms.is_finite() && span_ms > 0.0 {
        out.duration_nanos = (span_ms * 1e6) as i64;
    }
    if let Some(start) = options.trace_start_unix_nanos {
        if from_ms.is_finite() {
            let at = start.saturating_add((from_ms * 1e6) as i128);
            out.time_nanos = i64::try_from(at).unwrap_or(0);
        }
    }
    out.comment = vec![
        strings.intern(&profile.name),
        strings.intern(concat!(
            "exported by eventpipe-rs ",
            env!("CARGO_PKG_VERSION")
        )),
    ];
    out.string_table = strings.table;
    Ok(out)
}

/// Writes `profile` as a gzip-compressed pprof profile to `w`.
///
/// # Errors
/// As [`build_pprof`], and [`Error::Io`] when writing fails.
pub fn write_pprof(profile: &Profile, w: impl Write) -> Result<()> {
    write_pprof_with(profile, &PprofOptions::default(), w)
}

/// [`write_pprof`] with what the profile itself does not know.
///
/// # Errors
/// As [`write_pprof`].
pub fn write_pprof_with(profile: &Profile, options: &PprofOptions, w: impl Write) -> Result<()> {
    write_message(&build_pprof(profile, options)?, w)
}

/// Writes [`build_pprof_diff`]'s profile, gzipped.
///
/// # Errors
/// As [`build_pprof_diff`], or writing fails.
pub fn write_pprof_diff(
    base: &Profile,
    new: &Profile,
    options: &PprofOptions,
    w: impl Write,
) -> Result<()> {
    write_message(&build_pprof_diff(base, new, options)?, w)
}

fn write_message(message: &proto::Profile, w: impl Write) -> Result<()> {
    let mut gz = GzEncoder::new(w, Compression::default());
    gz.write_all(&message.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(())
}
