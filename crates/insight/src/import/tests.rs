use super::*;
use crate::pprof::proto;
use crate::profile::{Frame, FrameKind, Sample};
use prost::Message;

/// Two threads; `main > work > hash` 3 captures of 10 ms and `main > idle` 1, on thread 7
/// ("worker"); `main > work` 2 on thread 9 (unnamed), at 0..=5 ms.
fn known() -> Profile {
    let mut p = Profile::new("CPU samples", SampleUnit::CpuTime);
    let f = |p: &mut Profile, name: &str| {
        p.intern_frame(Frame {
            module: Some("app".into()),
            file: Some("src/main.rs".into()),
            line: Some(3),
            ..Frame::named(name, FrameKind::Native)
        })
    };
    let (main, work, hash, idle) = (
        f(&mut p, "main"),
        f(&mut p, "work"),
        f(&mut p, "hash"),
        f(&mut p, "idle"),
    );
    let t7 = p.intern_thread(7, Some("worker"), None);
    let t9 = p.intern_thread(9, None, None);
    let stacks = [
        (t7, vec![main, work, hash]),
        (t7, vec![main, work, hash]),
        (t7, vec![main, idle]),
        (t9, vec![main, work]),
        (t7, vec![main, work, hash]),
        (t9, vec![main, work]),
    ];
    for (i, (thread, stack)) in stacks.into_iter().enumerate() {
        let stack = p.intern_stack(stack);
        p.push_sample(Sample {
            thread,
            time_ms: i as f64,
            weight: 10_000_000,
            stack,
            lines: None,
        });
    }
    p.end_ms = 5.0;
    p
}

/// Each (thread, stack as names root first)'s summed weight and sample count.
fn sums(p: &Profile) -> std::collections::BTreeMap<(u64, Vec<String>), (u64, usize)> {
    let mut out = std::collections::BTreeMap::new();
    for s in &p.samples {
        let names = p.stacks[s.stack]
            .iter()
            .map(|&f| p.frames[f].function.clone())
            .collect();
        let e = out.entry((p.threads[s.thread].id, names)).or_insert((0, 0));
        e.0 += s.weight;
        e.1 += 1;
    }
    out
}

fn pprof_bytes(p: &Profile) -> Vec<u8> {
    let mut out = Vec::new();
    crate::write_pprof(p, &mut out).unwrap();
    out
}

#[test]
fn a_pprof_reads_back_with_its_captures_threads_and_duration() {
    let p = known();
    let bytes = pprof_bytes(&p);
    assert_eq!(Format::sniff(&bytes), Some(Format::Pprof));
    let back = read_profile(&bytes, Format::Pprof).unwrap();
    assert_eq!(back.unit, SampleUnit::CpuTime);
    // Summed per stack in pprof, split back into their captures.
    assert_eq!(sums(&back), sums(&p));
    let worker = back.threads.iter().find(|t| t.id == 7).unwrap();
    assert_eq!(worker.name.as_deref(), Some("worker"));
    let hash = back.frames.iter().find(|f| f.function == "hash").unwrap();
    assert_eq!(hash.module.as_deref(), Some("app"));
    assert_eq!(hash.file.as_deref(), Some("src/main.rs"));
    // The samples are spread over the profile's duration.
    let last = back.samples.iter().map(|s| s.time_ms).fold(0.0, f64::max);
    assert!((last - 5.0).abs() < 1e-9, "{last}");
}

#[test]
fn an_uncompressed_pprof_reads_too_and_inlined_lines_are_frames() {
    let strings: Vec<String> = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "outer",
        "inlined",
        "a.rs",
    ]
    .map(String::from)
    .to_vec();
    let p = proto::Profile {
        sample_type: vec![
            proto::ValueType { r#type: 1, unit: 2 },
            proto::ValueType { r#type: 3, unit: 4 },
        ],
        sample: vec![proto::Sample {
            location_id: vec![1],
            value: vec![4, 40],
            label: vec![],
        }],
        location: vec![proto::Location {
            id: 1,
            line: vec![
                proto::Line {
                    function_id: 2,
                    line: 20,
                },
                proto::Line {
                    function_id: 1,
                    line: 10,
                },
            ],
            ..Default::default()
        }],
        function: vec![
            proto::Function {
                id: 1,
                name: 5,
                filename: 7,
                ..Default::default()
            },
            proto::Function {
                id: 2,
                name: 6,
                filename: 7,
                ..Default::default()
            },
        ],
        string_table: strings,
        duration_nanos: 1_000_000,
        ..Default::default()
    };
    let bytes = p.encode_to_vec();
    assert_eq!(Format::sniff(&bytes), Some(Format::Pprof));
    let back = read_profile(&bytes, Format::Pprof).unwrap();
    assert_eq!(back.samples.len(), 4);
    assert!(back.samples.iter().all(|s| s.weight == 10));
    let stack: Vec<&str> = back.stacks[back.samples[0].stack]
        .iter()
        .map(|&f| back.frames[f].function.as_str())
        .collect();
    assert_eq!(stack, ["outer", "inlined"]);
    assert_eq!(back.lines[back.samples[0].lines.unwrap()], [10, 20]);
}

#[test]
fn a_speedscope_file_reads_back_per_thread_with_its_measure() {
    let mut p = known();
    p.unit = SampleUnit::ThreadTime;
    let mut bytes = Vec::new();
    crate::write_speedscope(&p, &mut bytes).unwrap();
    assert_eq!(Format::sniff(&bytes), Some(Format::Speedscope));
    let back = read_profile(&bytes, Format::Speedscope).unwrap();
    assert_eq!(back.unit, SampleUnit::ThreadTime);
    assert_eq!(sums(&back), sums(&p));
    let worker = back.threads.iter().find(|t| t.id == 7).unwrap();
    assert_eq!(worker.name.as_deref(), Some("worker"));
}

#[test]
fn an_evented_speedscope_profile_weighs_each_interval_on_its_open_frames() {
    let json = br#"{"shared":{"frames":[{"name":"a"},{"name":"b"}]},
        "profiles":[{"type":"evented","name":"x","unit":"milliseconds","startValue":0,"endValue":10,
        "events":[{"type":"O","frame":0,"at":0},{"type":"O","frame":1,"at":2},
                  {"type":"C","frame":1,"at":5},{"type":"C","frame":0,"at":10}]}]}"#;
    let back = read_profile(json, Format::Speedscope).unwrap();
    let got = sums(&back);
    let a = got[&(0, vec!["a".to_string()])];
    let ab = got[&(0, vec!["a".to_string(), "b".to_string()])];
    assert_eq!((a.0, ab.0), (7_000_000, 3_000_000));
    assert_eq!(back.unit, SampleUnit::CpuTime);
}

#[test]
fn hostile_files_are_errors_that_say_what_and_where() {
    let err = |bytes: &[u8], format| read_profile(bytes, format).unwrap_err().to_string();
    let good = pprof_bytes(&known());
    assert!(err(&good[..good.len() / 2], Format::Pprof).contains("gzip"));
    assert_eq!(Format::sniff(b"Nettrace"), None);
    let mut p = crate::build_pprof(&known(), &Default::default()).unwrap();
    p.sample[0].location_id[0] = 999;
    assert!(err(&p.encode_to_vec(), Format::Pprof).contains("location 999"));
    let mut p = crate::build_pprof(&known(), &Default::default()).unwrap();
    p.function[0].name = 10_000;
    assert!(err(&p.encode_to_vec(), Format::Pprof).contains("string 10000"));
    let mut p = crate::build_pprof(&known(), &Default::default()).unwrap();
    p.sample[0].value[1] = -5;
    assert!(err(&p.encode_to_vec(), Format::Pprof).contains("negative"));
    let mut p = crate::build_pprof(&known(), &Default::default()).unwrap();
    p.sample[0].value.pop();
    assert!(err(&p.encode_to_vec(), Format::Pprof).contains("sample[0] has 1 values"));
    let bad_frame = br#"{"shared":{"frames":[]},"profiles":[{"type":"sampled","name":"t","unit":"none","startValue":0,"endValue":1,"samples":[[3]],"weights":[1]}]}"#;
    assert!(err(bad_frame, Format::Speedscope).contains("profiles[0].samples[0] names frame 3"));
    let lengths = br#"{"shared":{"frames":[]},"profiles":[{"type":"sampled","name":"t","unit":"none","startValue":0,"endValue":1,"samples":[[]],"weights":[]}]}"#;
    assert!(err(lengths, Format::Speedscope).contains("1 samples and 0 weights"));
    let unit = br#"{"shared":{"frames":[]},"profiles":[{"type":"sampled","name":"t","unit":"furlongs","startValue":0,"endValue":1,"samples":[],"weights":[]}]}"#;
    assert!(err(unit, Format::Speedscope).contains("furlongs"));
    assert!(err(b"{", Format::Speedscope).contains("speedscope"));
}
