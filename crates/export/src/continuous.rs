//! A period of continuous profiling: the trace one session recorded for the period,
//! turned into the profiles a profiling backend keeps, symbolized on the host with the
//! modules' build ids in the pprof mappings (so the backend can symbolize again).
//!
//! Each period yields at most two profiles: CPU (this project's sampler: `process_cpu`,
//! CPU time; .NET's sample profiler: `wall`, thread time, since its samples stand for
//! waiting too) and allocations (`memory`, bytes allocated, when the program installed
//! the profiled allocator). A period with no samples of a kind yields no profile of it.
//!
//! The profiles are made for Pyroscope's series model:
//!
//! * Pyroscope makes every string sample label a series label
//!   (`pkg/model/pprofsplit/pprof_split.go`, `addSampleLabelsToLabelsBuilder`; numeric
//!   labels are skipped), so a label whose values grow with thread ids mints series until
//!   the tenant's limit (5,000 by default) refuses everything. [`Period::thread_labels`]
//!   says what the samples carry: by default the numeric `thread_id` alone.
//! * .NET thread time is the sample type `wall` in nanoseconds with the period type
//!   `cpu`/`nanoseconds`, as Pyroscope's own .NET profiler writes it
//!   (grafana/pyroscope-dotnet, `SampleValueTypeProvider.cpp`, `PprofBuilder.cpp`): over
//!   push the profile type is `wall:wall:nanoseconds:cpu:nanoseconds`, and over `/ingest`,
//!   where the server names a profile from its sample types and takes `wall` first
//!   (`pkg/og/convert/pprof/profile.go`, `metricName`), the same.

use std::io::Write;

use eventpipe_insight::pprof::proto;
use eventpipe_insight::{ProfileBuilder, SampleSelection, SampleUnit, ThreadLabels};
use eventpipe_symbols::BinaryCache;
use flate2::write::GzEncoder;
use flate2::Compression;
use nettrace::TraceReader;
use prost::Message;

use crate::pyroscope::PeriodProfile;

/// What goes wrong making a period's profiles.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The period's trace does not read.
    #[error("the period's trace does not read")]
    Trace(#[from] nettrace::Error),
    /// A profile cannot be encoded.
    #[error("the period's profile cannot be made")]
    Profile(#[from] eventpipe_insight::Error),
    /// Compressing failed.
    #[error("compressing the profile failed")]
    Io(#[from] std::io::Error),
}

/// Who the profiles are of, and when.
#[derive(Debug, Clone)]
pub struct Period {
    /// The service name (the process's name).
    pub service_name: String,
    /// The process's labels (`pid`, `host`, `runtime`).
    pub labels: Vec<(String, String)>,
    /// The period's start, nanoseconds since the Unix epoch.
    pub from_unix_nanos: i128,
    /// Its end.
    pub until_unix_nanos: i128,
    /// The CPU sampler's rate, Hz.
    pub sample_rate: u32,
    /// The target is a .NET process: its sample profiler's samples are thread time.
    pub dotnet: bool,
    /// The string label naming each sample's thread ([`ThreadLabels::None`] for a backend
    /// that makes a series of every string label; `NameOnly` for a per-thread-name view
    /// at one series per distinct name).
    pub thread_labels: ThreadLabels,
}

/// The profiles of one period's trace, each with the build ids it names, and notes on
/// what could not be symbolized (one line per module). `binaries` holds the binaries
/// opened for earlier periods, and gets those this one opens: a program's symbols are read
/// once, not every period.
pub fn period_profiles(
    trace: &[u8],
    period: &Period,
    binaries: &mut BinaryCache,
) -> Result<(Vec<PeriodProfile>, Vec<String>), Error> {
    let mut profiles = Vec::new();
    let mut notes = Vec::new();
    let mut selections = vec![if period.dotnet {
        SampleSelection::ThreadTime
    } else {
        SampleSelection::Cpu
    }];
    let mut first = true;
    while let Some(selection) = selections.pop() {
        let mut reader = TraceReader::from_slice(trace)?;
        let start = reader
            .trace()
            .ticks_to_unix_nanos(reader.trace().sync_time_ticks);
        let mut builder = ProfileBuilder::new(selection.clone())
            .async_stacks(false)
            .with_binaries(std::mem::take(binaries));
        let read = (|| {
            while let Some(event) = reader.next_event()? {
                builder.observe(&event);
            }
            Ok::<(), nettrace::Error>(())
        })();
        let mut built = builder.finish();
        *binaries = std::mem::take(&mut built.binaries);
        read?;
        if first {
            first = false;
            // The allocation profiler's samples (Rust). A .NET trace's `GC/AllocationTick`s
            // also count as allocation samples, but the agent's .NET sessions do not
            // collect them (they are Verbose), and its .NET series stay thread time alone.
            if !period.dotnet
                && built
                    .available
                    .iter()
                    .any(|(s, n)| *s == SampleSelection::Allocations && *n > 0)
            {
                selections.push(SampleSelection::Allocations);
            }
        }
        let profile = &built.profile;
        if profile.samples.is_empty() {
            continue;
        }
        let profile_type = match profile.unit {
            SampleUnit::CpuTime => "process_cpu",
            SampleUnit::ThreadTime => "wall",
            SampleUnit::Bytes => "memory",
            // Auto never chose these here; anything else is not a continuous profile.
            _ => continue,
        };
        notes.extend(built.notes.iter().cloned());
        let options = eventpipe_insight::PprofOptions {
            trace_start_unix_nanos: start,
            thread_labels: period.thread_labels,
        };
        let mut message = eventpipe_insight::build_pprof(profile, &options)?;
        if profile.unit == SampleUnit::ThreadTime {
            as_wall(&mut message);
        }
        // The profile covers the period, not just from its first sample to its last.
        message.time_nanos = i64::try_from(period.from_unix_nanos).unwrap_or(0);
        message.duration_nanos =
            i64::try_from(period.until_unix_nanos - period.from_unix_nanos).unwrap_or(0);
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&message.encode_to_vec())?;
        let mut labels = period.labels.clone();
        if profile_type == "memory" {
            // Each period's allocations are already that period's alone: Pyroscope must
            // not subtract the previous profile from them.
            labels.push(("__delta__".into(), "false".into()));
        }
        profiles.push(PeriodProfile {
            profile_type: profile_type.into(),
            service_name: period.service_name.clone(),
            labels,
            from_unix_nanos: period.from_unix_nanos,
            until_unix_nanos: period.until_unix_nanos,
            sample_rate: period.sample_rate,
            pprof_gz: gz.finish()?,
        });
    }
    notes.sort();
    notes.dedup();
    Ok((profiles, notes))
}

/// Names a thread-time profile's time `wall` and its period type `cpu`/`nanoseconds`, as
/// Pyroscope's .NET profiler does, so Grafana shows it as the standard wall profile type.
fn as_wall(message: &mut proto::Profile) {
    let intern = |message: &mut proto::Profile, text: &str| -> i64 {
        match message.string_table.iter().position(|s| s == text) {
            Some(i) => i as i64,
            None => {
                message.string_table.push(text.to_owned());
                message.string_table.len() as i64 - 1
            }
        }
    };
    let wall = intern(message, "wall");
    let cpu = intern(message, "cpu");
    let nanoseconds = intern(message, "nanoseconds");
    for ty in &mut message.sample_type {
        if message.string_table[ty.r#type as usize] == "thread_time" {
            ty.r#type = wall;
        }
    }
    message.default_sample_type = wall;
    message.period_type = Some(proto::ValueType {
        r#type: cpu,
        unit: nanoseconds,
    });
    if message.period <= 0 {
        message.period = 1;
    }
}
