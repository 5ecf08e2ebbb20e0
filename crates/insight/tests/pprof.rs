//! The pprof converter, read back two ways: by Go's own pprof (`go tool pprof -raw`, the
//! reference reader of the format, from `ci/converters.sh`), and by this crate's prost
//! messages after gunzip. Both must see the hand-built profile's exact values per thread
//! and stack.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use eventpipe_insight::pprof::proto;
use eventpipe_insight::{
    build_pprof, write_pprof, write_pprof_with, Error, FrameKind, PprofOptions, Profile, Sample,
    SampleUnit, ThreadLabels,
};
use prost::Message;

const TRACE_START: i128 = 1_700_000_000_000_000_000;

fn pprof_bytes(profile: &Profile) -> Vec<u8> {
    let mut out = Vec::new();
    write_pprof_with(
        profile,
        &PprofOptions {
            trace_start_unix_nanos: Some(TRACE_START),
            ..Default::default()
        },
        &mut out,
    )
    .unwrap();
    out
}

fn gunzip_decode(bytes: &[u8]) -> proto::Profile {
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .unwrap();
    proto::Profile::decode(raw.as_slice()).unwrap()
}

/// The values each unit should give a (thread, stack): from the table's weights and
/// sample counts.
fn expected_values(unit: SampleUnit) -> BTreeMap<(u64, Vec<String>), Vec<i64>> {
    let weights = common::expected_by_thread_and_stack();
    let counts = common::expected_counts_by_thread_and_stack();
    weights
        .into_iter()
        .map(|(key, w)| {
            let w = w as i64;
            let values = match unit {
                SampleUnit::CpuTime
                | SampleUnit::ThreadTime
                | SampleUnit::OffCpuTime
                | SampleUnit::LockWait => {
                    vec![counts[&key] as i64, w * common::PERIOD_NS as i64]
                }
                SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes => {
                    vec![counts[&key] as i64, w]
                }
                SampleUnit::Events => vec![w],
            };
            (key, values)
        })
        .collect()
}

fn expected_types(unit: SampleUnit) -> Vec<(&'static str, &'static str)> {
    match unit {
        SampleUnit::CpuTime => vec![("samples", "count"), ("cpu", "nanoseconds")],
        SampleUnit::ThreadTime => vec![("samples", "count"), ("thread_time", "nanoseconds")],
        SampleUnit::OffCpuTime => vec![("samples", "count"), ("off_cpu", "nanoseconds")],
        SampleUnit::LockWait => vec![("contentions", "count"), ("delay", "nanoseconds")],
        SampleUnit::Bytes => vec![("samples", "count"), ("alloc_space", "bytes")],
        SampleUnit::LiveBytes => vec![("samples", "count"), ("inuse_space", "bytes")],
        SampleUnit::HeapBytes => vec![("objects", "count"), ("inuse_space", "bytes")],
        SampleUnit::Events => vec![("events", "count")],
    }
}

fn thread_label(tid: u64) -> String {
    match common::WORKLOAD_THREADS.iter().find(|t| t.0 == tid) {
        Some((_, Some(name))) => format!("{name} ({tid})"),
        _ => format!("Thread {tid}"),
    }
}

// ---------------------------------------------------------------------------------------
// Read back with prost

#[test]
fn decoded_profile_has_the_table_values_leaf_last_reversed() {
    for unit in common::units() {
        let profile = common::workload(unit);
        let bytes = pprof_bytes(&profile);
        let p = gunzip_decode(&bytes);
        let s = |i: i64| p.string_table[usize::try_from(i).unwrap()].as_str();

        assert_eq!(p.string_table[0], "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, expected_types(unit), "{unit:?}");
        assert_eq!(s(p.default_sample_type), types.last().unwrap().0);

        // Every location: unique nonzero id, one line, an existing function.
        let functions: BTreeMap<u64, &proto::Function> =
            p.function.iter().map(|f| (f.id, f)).collect();
        assert_eq!(functions.len(), p.function.len());
        let mut locations = BTreeMap::new();
        for loc in &p.location {
            assert_ne!(loc.id, 0);
            assert_eq!(loc.line.len(), 1, "one line per location");
            let f = functions[&loc.line[0].function_id];
            assert_eq!(f.system_name, f.name);
            assert!(locations
                .insert(loc.id, (s(f.name).to_owned(), loc))
                .is_none());
        }
        assert_eq!(p.location.len(), profile.frames.len());

        let mut got: BTreeMap<(u64, Vec<String>), Vec<i64>> = BTreeMap::new();
        for sample in &p.sample {
            let label = |key: &str| sample.label.iter().find(|l| s(l.key) == key).copied();
            let tid = label("thread_id").unwrap().num as u64;
            assert_eq!(s(label("thread").unwrap().str), thread_label(tid));
            // Leaf first in the file: reversed, it must be the table's root-first stack.
            let names: Vec<String> = sample
                .location_id
                .iter()
                .rev()
                .map(|id| locations[id].0.clone())
                .collect();
            let entry = got
                .entry((tid, names))
                .or_insert_with(|| vec![0; sample.value.len()]);
            for (sum, v) in entry.iter_mut().zip(&sample.value) {
                *sum += v;
            }
        }
        assert_eq!(got, expected_values(unit), "{unit:?}");

        // Frames keep their source files and lines; modules are mappings.
        let (_, lex) = locations.values().find(|(n, _)| n == "lex").unwrap();
        assert_eq!(lex.line[0].line, 13);
        assert_eq!(
            s(functions[&lex.line[0].function_id].filename),
            "src/lex.rs"
        );
        let mappings: BTreeSet<&str> = p.mapping.iter().map(|m| s(m.filename)).collect();
        assert_eq!(mappings, BTreeSet::from(["app", "libc.so.6"]));
        assert!(p.mapping.iter().all(|m| m.has_functions && m.id != 0));
        let parses = p.function.iter().filter(|f| s(f.name) == "parse").count();
        assert_eq!(parses, 2, "two parse functions: two source files");

        // Times: the samples' span. A time unit's, 10 ms into the trace for 10 ms (the
        // first sample, at 11 ms, stands for the period before it); a count's, from the
        // first sample (11 ms) to the last (20 ms).
        let (from_ms, span_ms) = if unit.is_time() { (10, 10) } else { (11, 9) };
        assert_eq!(i128::from(p.time_nanos), TRACE_START + from_ms * 1_000_000);
        assert_eq!(p.duration_nanos, span_ms * 1_000_000);
        match unit {
            SampleUnit::CpuTime
            | SampleUnit::ThreadTime
            | SampleUnit::OffCpuTime
            | SampleUnit::LockWait => {
                let pt = p.period_type.unwrap();
                assert_eq!((s(pt.r#type), s(pt.unit)), (types[1].0, "nanoseconds"));
                assert_eq!(p.period, common::PERIOD_NS as i64);
            }
            _ => assert_eq!((p.period_type, p.period), (None, 0)),
        }
        assert!(p.comment.iter().any(|&c| s(c) == "Workload"));

        // What was encoded is exactly what build_pprof made.
        let built = build_pprof(
            &profile,
            &PprofOptions {
                trace_start_unix_nanos: Some(TRACE_START),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p, built);
    }
}

#[test]
fn thread_labels_hold_the_whole_label_the_name_alone_or_nothing() {
    let profile = common::cpu_workload();
    for mode in [
        ThreadLabels::NameAndId,
        ThreadLabels::NameOnly,
        ThreadLabels::None,
    ] {
        let options = PprofOptions {
            thread_labels: mode,
            ..Default::default()
        };
        let p = build_pprof(&profile, &options).unwrap();
        let s = |i: i64| p.string_table[usize::try_from(i).unwrap()].as_str();
        let mut seen = BTreeSet::new();
        for sample in &p.sample {
            let tid = sample
                .label
                .iter()
                .find(|l| s(l.key) == "thread_id")
                .map(|l| l.num as u64)
                .expect("every mode keeps the numeric thread id");
            let strings: Vec<(&str, &str)> = sample
                .label
                .iter()
                .filter(|l| l.str != 0)
                .map(|l| (s(l.key), s(l.str)))
                .collect();
            let name = common::WORKLOAD_THREADS
                .iter()
                .find(|t| t.0 == tid)
                .and_then(|t| t.1);
            let expected: Vec<(&str, String)> = match (mode, name) {
                (ThreadLabels::NameAndId, _) => vec![("thread", thread_label(tid))],
                (ThreadLabels::NameOnly, Some(name)) => vec![("thread", name.to_owned())],
                (ThreadLabels::NameOnly, None) | (ThreadLabels::None, _) => vec![],
            };
            let strings: Vec<(&str, String)> = strings
                .into_iter()
                .map(|(k, v)| (k, v.to_owned()))
                .collect();
            assert_eq!(strings, expected, "{mode:?}, thread {tid}");
            seen.insert(tid);
        }
        assert_eq!(seen.len(), common::WORKLOAD_THREADS.len(), "{mode:?}");
    }
}

#[test]
fn inconsistent_or_overflowing_profiles_are_errors() {
    let mut p = common::cpu_workload();
    p.samples[0].stack = 99;
    let mut out = Vec::new();
    assert!(matches!(
        write_pprof(&p, &mut out),
        Err(Error::InvalidProfile(_))
    ));
    assert!(out.is_empty(), "nothing written for a bad profile");

    let mut p = Profile::new("huge", SampleUnit::CpuTime);
    let f = p.intern_frame(eventpipe_insight::Frame::named("f", FrameKind::Native));
    let t = p.intern_thread(1, None, None);
    let s = p.intern_stack(vec![f]);
    p.push_sample(Sample {
        thread: t,
        time_ms: 0.0,
        weight: u64::MAX,
        stack: s,
        lines: None,
    });
    assert!(matches!(
        write_pprof(&p, &mut out),
        Err(Error::Overflow { .. })
    ));
}

#[test]
fn empty_profile_is_a_valid_file() {
    let p = Profile::new("nothing", SampleUnit::Events);
    let decoded = gunzip_decode(&pprof_bytes(&p));
    assert!(decoded.sample.is_empty());
    assert_eq!(decoded.string_table[0], "");
}

// ---------------------------------------------------------------------------------------
// Read back with Go's pprof

/// One sample as `go tool pprof -raw` prints it.
#[derive(Debug)]
struct RawSample {
    values: Vec<i64>,
    /// Location ids, leaf first.
    ids: Vec<u64>,
    labels: BTreeMap<String, String>,
}

/// What `go tool pprof -raw` prints, parsed.
#[derive(Debug, Default)]
struct Raw {
    header: Vec<String>,
    sample_types: Vec<String>,
    samples: Vec<RawSample>,
    /// location id → function name
    locations: BTreeMap<u64, String>,
}

fn go_raw(go: &Path, file: &Path) -> Raw {
    let out = common::go_pprof(go, [Path::new("-raw"), Path::new("-symbolize=none"), file]);
    parse_raw(&String::from_utf8_lossy(&out))
}

fn parse_raw(text: &str) -> Raw {
    let mut raw = Raw::default();
    let mut section = "header";
    for line in text.lines() {
        match line.trim_end() {
            "Samples:" => {
                section = "types";
                continue;
            }
            "Locations" => {
                section = "locations";
                continue;
            }
            "Mappings" => {
                section = "mappings";
                continue;
            }
            _ => {}
        }
        match section {
            "header" => raw.header.push(line.to_owned()),
            "types" => {
                raw.sample_types = line.split_whitespace().map(str::to_owned).collect();
                section = "samples";
            }
            "samples" => {
                let trimmed = line.trim();
                if let Some((key, value)) = trimmed.split_once(":[") {
                    // A label of the sample above: `key:[value]`.
                    let sample = raw.samples.last_mut().expect("label after a sample");
                    sample
                        .labels
                        .insert(key.to_owned(), value.trim_end_matches(']').to_owned());
                } else {
                    let (values, ids) = trimmed.split_once(':').expect("values: ids");
                    raw.samples.push(RawSample {
                        values: values
                            .split_whitespace()
                            .map(|v| v.parse().unwrap())
                            .collect(),
                        ids: ids.split_whitespace().map(|v| v.parse().unwrap()).collect(),
                        labels: BTreeMap::new(),
                    });
                }
            }
            "locations" => {
                // `id: 0xADDR [M=mapping] name file:line s=start`
                let (id, rest) = line.trim().split_once(':').unwrap();
                let mut words: Vec<&str> = rest.split_whitespace().collect();
                assert!(words[0].starts_with("0x"), "{line}");
                words.remove(0);
                if words.first().is_some_and(|w| w.starts_with("M=")) {
                    words.remove(0);
                }
                assert!(words.pop().unwrap().starts_with("s="), "{line}");
                words.pop(); // file:line
                raw.locations
                    .insert(id.trim().parse().unwrap(), words.join(" "));
            }
            _ => {}
        }
    }
    raw
}

#[test]
fn go_pprof_reads_the_same_values_per_thread_and_stack() {
    let Some(go) = common::go("pprof read back by go tool pprof") else {
        return;
    };
    let dir = common::scratch_dir("pprof-go");
    for unit in common::units() {
        let profile = common::workload(unit);
        let name = match unit {
            SampleUnit::CpuTime => "cpu",
            SampleUnit::ThreadTime => "thread-time",
            SampleUnit::OffCpuTime => "off-cpu",
            SampleUnit::LockWait => "lock-wait",
            SampleUnit::Bytes => "bytes",
            SampleUnit::LiveBytes => "live-bytes",
            SampleUnit::HeapBytes => "heap-bytes",
            SampleUnit::Events => "events",
        };
        let file = dir.join(format!("{name}.pb.gz"));
        std::fs::write(&file, pprof_bytes(&profile)).unwrap();
        let raw = go_raw(&go, &file);

        let types: Vec<String> = expected_types(unit)
            .iter()
            .map(|(t, u)| format!("{t}/{u}"))
            .collect();
        let mut printed = raw.sample_types.clone();
        // pprof marks the default type: `cpu/nanoseconds[dflt]`.
        let last = printed.last_mut().unwrap();
        assert!(last.ends_with("[dflt]"), "{last}");
        *last = last.trim_end_matches("[dflt]").to_owned();
        assert_eq!(printed, types, "{unit:?}");

        let mut got: BTreeMap<(u64, Vec<String>), Vec<i64>> = BTreeMap::new();
        for RawSample {
            values,
            ids,
            labels,
        } in &raw.samples
        {
            let tid: u64 = labels["thread_id"].parse().unwrap();
            assert_eq!(labels["thread"], thread_label(tid));
            let names = ids
                .iter()
                .rev()
                .map(|id| raw.locations[id].clone())
                .collect();
            let entry = got
                .entry((tid, names))
                .or_insert_with(|| vec![0; values.len()]);
            for (sum, v) in entry.iter_mut().zip(values) {
                *sum += v;
            }
        }
        assert_eq!(got, expected_values(unit), "{unit:?}: {raw:#?}");

        let names: BTreeSet<&str> = raw.locations.values().map(String::as_str).collect();
        assert_eq!(
            names,
            BTreeSet::from([
                "alloc",
                "lex",
                "main",
                "parse",
                "run",
                "thread_start",
                "worker"
            ])
        );
        // The samples' span (see decoded_profile_has_the_table_values_leaf_last_reversed).
        let duration = if unit.is_time() { "10ms" } else { "9ms" };
        assert!(
            raw.header.contains(&format!("Duration: {duration}")),
            "{:?}",
            raw.header
        );
        assert!(
            raw.header.iter().any(|l| l == "Comment: Workload"),
            "{:?}",
            raw.header
        );
        if unit.is_time() {
            let period_type = format!("PeriodType: {} nanoseconds", expected_types(unit)[1].0);
            assert!(raw.header.contains(&period_type), "{:?}", raw.header);
            assert!(raw.header.iter().any(|l| l == "Period: 1000000"));
            assert!(
                raw.header
                    .iter()
                    .any(|l| l.starts_with("Time: 2023-11-14 22:13:20.01 ")),
                "{:?}",
                raw.header
            );
        }
    }
}

/// A function sampled at two lines: one function, two locations.
fn two_lines_profile() -> Profile {
    let mut p = Profile::new("Lines", SampleUnit::CpuTime);
    let at = |function: &str, line: u32| eventpipe_insight::Frame {
        function: function.into(),
        module: Some("app".into()),
        file: Some(format!("src/{function}.rs")),
        line: Some(line),
        kind: FrameKind::Native,
    };
    let t = p.intern_thread(1, Some("main"), None);
    for (lex_line, ms) in [(13, 2), (20, 3)] {
        let frames = vec![
            p.intern_frame(at("main", 5)),
            p.intern_frame(at("lex", lex_line)),
        ];
        let stack = p.intern_stack(frames);
        let lines = p.intern_lines(vec![5, lex_line]);
        p.push_sample(Sample {
            thread: t,
            time_ms: 0.0,
            weight: ms * 1_000_000,
            stack,
            lines,
        });
    }
    p
}

#[test]
fn a_function_sampled_at_two_lines_is_one_function_with_a_location_per_line() {
    let profile = two_lines_profile();
    assert_eq!(profile.frames.len(), 2, "main and lex");
    assert_eq!(profile.stacks.len(), 1, "one stack of functions");
    let p = gunzip_decode(&pprof_bytes(&profile));
    let s = |i: i64| p.string_table[usize::try_from(i).unwrap()].as_str();
    let lex: Vec<&proto::Function> = p.function.iter().filter(|f| s(f.name) == "lex").collect();
    assert_eq!(lex.len(), 1);
    let mut lex_lines: Vec<i64> = p
        .location
        .iter()
        .filter(|l| l.line[0].function_id == lex[0].id)
        .map(|l| l.line[0].line)
        .collect();
    lex_lines.sort_unstable();
    assert_eq!(lex_lines, [13, 20]);

    // Go's pprof: by function one row of 5 ms; by line (`-lines`) two.
    let Some(go) = common::go("pprof lines read back by go tool pprof") else {
        return;
    };
    let dir = common::scratch_dir("pprof-lines");
    let file = dir.join("lines.pb.gz");
    std::fs::write(&file, pprof_bytes(&profile)).unwrap();
    let top = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<&std::ffi::OsStr> = ["-top", "-symbolize=none"]
            .iter()
            .chain(extra)
            .map(std::ffi::OsStr::new)
            .collect();
        args.push(file.as_os_str());
        String::from_utf8_lossy(&common::go_pprof(&go, args))
            .lines()
            .filter(|l| l.contains(" lex"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    let by_function = top(&[]);
    assert_eq!(by_function.len(), 1, "{by_function:?}");
    assert!(by_function[0].starts_with("5ms "), "{by_function:?}");
    let by_line = top(&["-lines"]);
    assert_eq!(by_line.len(), 2, "{by_line:?}");
    assert!(
        by_line
            .iter()
            .any(|l| l.starts_with("3ms ") && l.ends_with("src/lex.rs:20")),
        "{by_line:?}"
    );
    assert!(
        by_line
            .iter()
            .any(|l| l.starts_with("2ms ") && l.ends_with("src/lex.rs:13")),
        "{by_line:?}"
    );
}

/// profile.proto's `mapping[0]` is the main binary, and `go tool pprof` names the profile's
/// `File:` after it: a stack that starts in libc still makes the program's binary first.
#[test]
fn the_program_binary_is_the_first_mapping() {
    let mut p = Profile::new("Main binary", SampleUnit::CpuTime);
    let frame = |function: &str, module: &str| eventpipe_insight::Frame {
        function: function.into(),
        module: Some(module.into()),
        file: None,
        line: None,
        kind: FrameKind::Native,
    };
    let t = p.intern_thread(1, Some("main"), None);
    let frames = vec![
        p.intern_frame(frame("__libc_start_main", "libc.so.6")),
        p.intern_frame(frame("main", "app")),
        p.intern_frame(frame("work", "app")),
    ];
    let stack = p.intern_stack(frames);
    let lines = p.intern_lines(vec![0, 0, 0]);
    p.push_sample(Sample {
        thread: t,
        time_ms: 0.0,
        weight: 1_000_000,
        stack,
        lines,
    });
    let first_mapping = |p: &Profile| {
        let decoded = gunzip_decode(&pprof_bytes(p));
        decoded.string_table[decoded.mapping[0].filename as usize].clone()
    };
    assert_eq!(
        first_mapping(&p),
        "libc.so.6",
        "without a main module, first seen"
    );
    p.main_module = Some("app".into());
    assert_eq!(first_mapping(&p), "app");

    let Some(go) = common::go("the main binary as go tool pprof names it") else {
        return;
    };
    let dir = common::scratch_dir("pprof-main-binary");
    let file = dir.join("main.pb.gz");
    std::fs::write(&file, pprof_bytes(&p)).unwrap();
    let out = common::go_pprof(
        &go,
        [Path::new("-top"), Path::new("-symbolize=none"), &file],
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.lines().any(|l| l == "File: app"), "{text}");
}
