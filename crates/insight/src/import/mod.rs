//! Profiles read back from the files the converters write, and from other tools that write
//! the same formats: pprof (`profile.proto`, gzip-compressed or not) and speedscope JSON.
//! What `eptrace diff` compares when it is given converted profiles instead of traces.
//!
//! A converted profile has lost what a trace has and the profile model keeps:
//! * pprof sums samples by stack (a `samples/count` value says how many captures each
//!   holds): each is split back into that many samples of equal weight, so the sampling
//!   error of a sum is estimated as from the captures themselves;
//! * pprof keeps no sample times, only the profile's `duration_nanos`: the samples are
//!   spread evenly over it, so rates per second use that duration;
//! * speedscope keeps neither times nor a duration (`endValue` is a weight), so its
//!   profiles span no time, and compare as raw sums or shares.
//!
//! Hostile input is an [`ImportError`] naming what is wrong and where, never a panic; a
//! gzip stream is inflated to [`MAX_INFLATED_BYTES`] at most.

mod pprof;
mod speedscope;

use crate::profile::{Profile, SampleUnit};

/// The most bytes a gzip-compressed pprof file is inflated to.
pub const MAX_INFLATED_BYTES: u64 = 1 << 30;

/// The most samples the captures of a pprof file are split into; past it, each pprof
/// sample stays one sample (which overstates the sampling error, never understates it).
pub const MAX_SPLIT_SAMPLES: u64 = 2_000_000;

/// A converted profile's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// pprof's `profile.proto`, gzip-compressed or not.
    Pprof,
    /// speedscope's JSON file format.
    Speedscope,
}

impl Format {
    /// The format's name, as users know it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pprof => "pprof",
            Format::Speedscope => "speedscope",
        }
    }

    /// The format `bytes` are in, from their first bytes: a gzip stream or a protobuf
    /// message is pprof, a JSON object is speedscope; `None` for anything else (a trace).
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            return Some(Format::Pprof);
        }
        let text = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if text == Some(&b'{') {
            return Some(Format::Speedscope);
        }
        // profile.proto's first field is `sample_type` (1) or `sample` (2), length-delimited:
        // key byte 0x0a or 0x12. A nettrace file starts with `Nettrace` or `!FastSerialization`.
        match bytes.first() {
            Some(0x0a | 0x12) => Some(Format::Pprof),
            _ => None,
        }
    }
}

/// Why a file does not read as a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Neither pprof nor speedscope.
    #[error("not a pprof or speedscope profile")]
    UnknownFormat,
    /// The gzip stream does not inflate.
    #[error("the gzip stream does not inflate")]
    Gzip(#[source] std::io::Error),
    /// The gzip stream inflates past [`MAX_INFLATED_BYTES`].
    #[error("the gzip stream inflates past {} bytes", MAX_INFLATED_BYTES)]
    TooLarge,
    /// The protobuf does not decode as `profile.proto`.
    #[error("not a pprof profile.proto message")]
    Protobuf(#[source] prost::DecodeError),
    /// The JSON does not parse as a speedscope file.
    #[error("not a speedscope file")]
    Json(#[source] serde_json::Error),
    /// A reference or value that breaks the format: `what` names it and where it is.
    #[error("{0}")]
    Invalid(String),
    /// Well formed, but nothing this crate's profiles can hold.
    #[error("{0}")]
    Unsupported(String),
}

/// Reads `bytes` as a profile of `format`.
///
/// # Errors
/// The bytes are not a well-formed profile of that format, or it measures something a
/// [`SampleUnit`] cannot say.
pub fn read_profile(bytes: &[u8], format: Format) -> Result<Profile, ImportError> {
    match format {
        Format::Pprof => pprof::read(bytes),
        Format::Speedscope => speedscope::read(bytes),
    }
}

/// The unit and the factor to nanoseconds (or bytes) of a sample type, by its pprof or
/// speedscope name: the inverse of what this crate's writers name them, and the names
/// Go's and other profilers use.
fn unit_of(kind: &str, unit: &str) -> Option<(SampleUnit, u64)> {
    let scale = match unit {
        "nanoseconds" => 1,
        "microseconds" => 1_000,
        "milliseconds" => 1_000_000,
        "seconds" => 1_000_000_000,
        "bytes" => 1,
        "kilobytes" => 1 << 10,
        "megabytes" => 1 << 20,
        "count" | "none" | "" => 1,
        _ => return None,
    };
    let time = matches!(
        unit,
        "nanoseconds" | "microseconds" | "milliseconds" | "seconds"
    );
    let sample_unit = match (kind, unit) {
        ("cpu", _) if time => SampleUnit::CpuTime,
        ("thread_time" | "wall", _) if time => SampleUnit::ThreadTime,
        ("off_cpu", _) if time => SampleUnit::OffCpuTime,
        ("delay" | "contentions_delay", _) if time => SampleUnit::LockWait,
        ("alloc_space", _) if !time && unit != "count" => SampleUnit::Bytes,
        ("inuse_space", _) if !time && unit != "count" => SampleUnit::LiveBytes,
        (_, "count" | "none" | "") => SampleUnit::Events,
        _ => return None,
    };
    Some((sample_unit, scale))
}

#[cfg(test)]
mod tests;
