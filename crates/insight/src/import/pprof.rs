//! pprof's `profile.proto` into a [`Profile`]: the inverse of [`crate::pprof`], and a reader
//! of what Go and other profilers write.
//!
//! * The value read is the default sample type (`default_sample_type`), else the last one
//!   (pprof's own default); a `count` sample type beside it says how many captures each
//!   sample holds.
//! * A location's lines are its inlined functions, innermost first; a location without
//!   lines (not symbolized) is a frame named by its address in its mapping's file.
//! * The `thread_id` (number) and `thread` (string) labels name a sample's thread, as this
//!   crate writes them; without them every sample is on one thread, 0.

use std::collections::HashMap;
use std::io::Read;

use flate2::read::GzDecoder;
use prost::Message;

use super::{unit_of, ImportError, MAX_INFLATED_BYTES, MAX_SPLIT_SAMPLES};
use crate::pprof::proto;
use crate::profile::{Frame, FrameId, FrameKind, Profile, Sample};

pub(super) fn read(bytes: &[u8]) -> Result<Profile, ImportError> {
    let inflated;
    let message = if bytes.starts_with(&[0x1f, 0x8b]) {
        inflated = inflate(bytes)?;
        &inflated[..]
    } else {
        bytes
    };
    let p = proto::Profile::decode(message).map_err(ImportError::Protobuf)?;
    Reader::new(&p)?.profile()
}

fn inflate(bytes: &[u8]) -> Result<Vec<u8>, ImportError> {
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_INFLATED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(ImportError::Gzip)?;
    if out.len() as u64 > MAX_INFLATED_BYTES {
        return Err(ImportError::TooLarge);
    }
    Ok(out)
}

struct Reader<'p> {
    p: &'p proto::Profile,
    locations: HashMap<u64, &'p proto::Location>,
    functions: HashMap<u64, &'p proto::Function>,
    mappings: HashMap<u64, &'p proto::Mapping>,
}

impl<'p> Reader<'p> {
    fn new(p: &'p proto::Profile) -> Result<Reader<'p>, ImportError> {
        if p.string_table.first().is_some_and(|s| !s.is_empty()) {
            return Err(ImportError::Invalid(
                "string_table[0] is not the empty string".into(),
            ));
        }
        Ok(Reader {
            p,
            locations: p.location.iter().map(|l| (l.id, l)).collect(),
            functions: p.function.iter().map(|f| (f.id, f)).collect(),
            mappings: p.mapping.iter().map(|m| (m.id, m)).collect(),
        })
    }

    fn string(&self, index: i64, what: &str) -> Result<&'p str, ImportError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.p.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| {
                ImportError::Invalid(format!(
                    "{what} names string {index}, past the string table's {}",
                    self.p.string_table.len()
                ))
            })
    }

    /// The index of the value to read, its unit and scale, and the index of the count of
    /// captures (if another value holds it).
    fn value(&self) -> Result<(usize, crate::SampleUnit, u64, Option<usize>), ImportError> {
        let mut types = Vec::with_capacity(self.p.sample_type.len());
        for (i, t) in self.p.sample_type.iter().enumerate() {
            let what = format!("sample_type[{i}]");
            types.push((self.string(t.r#type, &what)?, self.string(t.unit, &what)?));
        }
        let default = self.string(self.p.default_sample_type, "default_sample_type")?;
        let chosen = types
            .iter()
            .position(|(kind, _)| !default.is_empty() && *kind == default)
            .or(types.len().checked_sub(1))
            .ok_or_else(|| ImportError::Invalid("the profile has no sample_type".into()))?;
        let (kind, unit) = types[chosen];
        let (sample_unit, scale) = unit_of(kind, unit).ok_or_else(|| {
            let all: Vec<String> = types.iter().map(|(k, u)| format!("{k}/{u}")).collect();
            ImportError::Unsupported(format!(
                "pprof sample type {kind}/{unit} is not one this tool compares (the profile has {})",
                all.join(", ")
            ))
        })?;
        let count = types
            .iter()
            .position(|(_, unit)| *unit == "count")
            .filter(|&i| i != chosen);
        Ok((chosen, sample_unit, scale, count))
    }

    fn profile(&self) -> Result<Profile, ImportError> {
        let (value, unit, scale, count) = self.value()?;
        let mut profile = Profile::new("pprof samples", unit);
        let duration_ms = self.p.duration_nanos.max(0) as f64 / 1e6;
        profile.start_ms = 0.0;
        profile.end_ms = duration_ms;
        if self.p.period > 0 && unit.is_time() {
            profile.sampling_interval_ns = u64::try_from(self.p.period).ok();
        }
        let lead_ms = profile
            .sampling_interval_ns
            .map_or(0.0, |ns| (ns as f64 / 1e6).min(duration_ms));
        let captures = |s: &proto::Sample| -> u64 {
            count
                .and_then(|i| s.value.get(i))
                .map_or(1, |&c| u64::try_from(c).unwrap_or(0).max(1))
        };
        let all: u64 = self
            .p
            .sample
            .iter()
            .map(captures)
            .fold(0u64, u64::saturating_add);
        let split = all <= MAX_SPLIT_SAMPLES;
        let total_samples = if split {
            all
        } else {
            self.p.sample.len() as u64
        };
        let mut frames: HashMap<(u64, usize), FrameId> = HashMap::new();
        let mut placed = 0u64;
        for (i, s) in self.p.sample.iter().enumerate() {
            let raw = *s.value.get(value).ok_or_else(|| {
                ImportError::Invalid(format!(
                    "sample[{i}] has {} values, not one per sample_type",
                    s.value.len()
                ))
            })?;
            let Ok(raw) = u64::try_from(raw) else {
                return Err(ImportError::Unsupported(format!(
                    "sample[{i}] has a negative value ({raw}): a difference of two \
                     profiles, not a profile"
                )));
            };
            let weight = raw.checked_mul(scale).ok_or_else(|| {
                ImportError::Invalid(format!("sample[{i}]'s value {raw} overflows"))
            })?;
            let mut stack = Vec::new();
            let mut lines = Vec::new();
            // Leaf first in pprof; root first in a profile.
            for &id in s.location_id.iter().rev() {
                self.push_location(id, i, &mut profile, &mut frames, &mut stack, &mut lines)?;
            }
            let stack = profile.intern_stack(stack);
            let lines = if lines.iter().any(|&l| l != 0) {
                profile.intern_lines(lines)
            } else {
                None
            };
            let thread = self.thread(s, i, &mut profile)?;
            let n = if split { captures(s) } else { 1 };
            for k in 0..n {
                // Equal parts, the remainder in the first ones.
                let part = weight / n + u64::from(k < weight % n);
                // Spread over the duration, the first one interval in (it stands for the
                // interval before it), so the samples span the duration again
                // (`Profile::sample_span_ms`).
                let time_ms = if total_samples > 1 {
                    lead_ms + (duration_ms - lead_ms) * placed as f64 / (total_samples - 1) as f64
                } else {
                    duration_ms
                };
                placed += 1;
                profile.push_sample(Sample {
                    thread,
                    time_ms,
                    weight: part,
                    stack,
                    lines,
                });
            }
        }
        Ok(profile)
    }

    /// Pushes location `id`'s frames (its inlined functions, outermost first) on `stack`.
    fn push_location(
        &self,
        id: u64,
        sample: usize,
        profile: &mut Profile,
        frames: &mut HashMap<(u64, usize), FrameId>,
        stack: &mut Vec<FrameId>,
        lines: &mut Vec<u32>,
    ) -> Result<(), ImportError> {
        let location = self.locations.get(&id).ok_or_else(|| {
            ImportError::Invalid(format!(
                "sample[{sample}] names location {id}, which is not in the profile"
            ))
        })?;
        let module = match self.mappings.get(&location.mapping_id) {
            Some(m) => {
                let path = self.string(m.filename, &format!("mapping {}", m.id))?;
                let name = path.rsplit('/').next().unwrap_or(path);
                (!name.is_empty()).then(|| name.to_owned())
            }
            None => None,
        };
        if location.line.is_empty() {
            let frame = *frames.entry((id, 0)).or_insert_with(|| {
                let (function, kind) = match &module {
                    Some(m) => (
                        format!("{m}+0x{:x}", location.address),
                        FrameKind::ModuleOffset,
                    ),
                    None => (format!("0x{:x}", location.address), FrameKind::Unknown),
                };
                profile.intern_frame(Frame {
                    module: module.clone(),
                    ..Frame::named(function, kind)
                })
            });
            stack.push(frame);
            lines.push(0);
            return Ok(());
        }
        // The last line is the caller the others were inlined into.
        for (k, line) in location.line.iter().enumerate().rev() {
            let frame = match frames.get(&(id, k)) {
                Some(&f) => f,
                None => {
                    let f = self.function_frame(line.function_id, id, module.as_deref())?;
                    let f = profile.intern_frame(f);
                    frames.insert((id, k), f);
                    f
                }
            };
            stack.push(frame);
            lines.push(u32::try_from(line.line).unwrap_or(0));
        }
        Ok(())
    }

    fn function_frame(
        &self,
        id: u64,
        location: u64,
        module: Option<&str>,
    ) -> Result<Frame, ImportError> {
        let f = self.functions.get(&id).ok_or_else(|| {
            ImportError::Invalid(format!(
                "location {location} names function {id}, which is not in the profile"
            ))
        })?;
        let what = format!("function {id}");
        let name = self.string(f.name, &what)?;
        let file = self.string(f.filename, &what)?;
        let kind = if name.starts_with("async ") {
            FrameKind::Async
        } else if name.starts_with('[') && name.ends_with(']') {
            FrameKind::ThreadState
        } else {
            FrameKind::Native
        };
        Ok(Frame {
            function: name.to_owned(),
            module: module.map(str::to_owned),
            file: (!file.is_empty()).then(|| file.to_owned()),
            line: u32::try_from(f.start_line).ok().filter(|&l| l > 0),
            kind,
        })
    }

    /// The sample's thread: its `thread_id` and `thread` labels, else thread 0.
    fn thread(
        &self,
        s: &proto::Sample,
        sample: usize,
        profile: &mut Profile,
    ) -> Result<usize, ImportError> {
        let (mut id, mut name) = (None, None);
        for label in &s.label {
            let what = format!("a label of sample[{sample}]");
            match self.string(label.key, &what)? {
                "thread_id" => id = u64::try_from(label.num).ok(),
                "thread" => name = Some(self.string(label.str, &what)?),
                _ => {}
            }
        }
        // This crate's `thread` label is the thread's label, `name (tid)` or `Thread tid`
        // for an unnamed one: keep the name alone.
        let name = name
            .map(|n| match id {
                Some(tid) => n.strip_suffix(&format!(" ({tid})")).unwrap_or(n),
                None => n,
            })
            .filter(|n| id.is_none_or(|tid| *n != format!("Thread {tid}")));
        Ok(profile.intern_thread(id.unwrap_or(0), name, None))
    }
}
