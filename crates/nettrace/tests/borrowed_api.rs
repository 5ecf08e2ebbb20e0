//! The fast API (`TraceReader::next_event_ref`, `for_each_field`) reads exactly what the
//! owned one (`next_event`, `decode_payload`) reads: the same events, headers, references,
//! counters and payload values, on the demo fixture and on every trace in
//! `../shared/traces`.

mod common;

use nettrace::{TraceReader, Value};

fn check(name: &str, bytes: &[u8]) {
    let (Ok(mut fast), Ok(mut owned)) = (
        TraceReader::from_slice(bytes),
        TraceReader::from_slice(bytes),
    ) else {
        return;
    };
    let mut events = 0u64;
    loop {
        let (a, b) = match (fast.next_event_ref(), owned.next_event()) {
            (Ok(Some(a)), Ok(Some(b))) => (a, b),
            (Ok(None), Ok(None)) => break,
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "{name}");
                break;
            }
            (a, b) => panic!(
                "{name}: event {events}: next_event_ref {:?} but next_event {:?}",
                a.map(|e| e.map(|e| e.offset())),
                b.map(|e| e.map(|e| e.offset))
            ),
        };
        events += 1;
        let e = a.to_event();
        assert_eq!(e.header, b.header, "{name} event {events}");
        assert_eq!(*a.header(), b.header);
        assert_eq!(a.metadata(), b.metadata);
        assert_eq!(a.payload(), b.payload);
        assert_eq!(a.stack(), b.stack);
        assert_eq!(a.offset(), b.offset);
        assert_eq!(a.thread(), b.thread);
        assert_eq!(a.capture_thread(), b.capture_thread);
        assert_eq!(a.labels(), b.labels);
        assert_eq!(a.thread_id(), b.thread_id());
        assert_eq!(a.capture_thread_id(), b.capture_thread_id());
        assert_eq!(a.process_id(), b.process_id());
        assert_eq!(a.activity_id(), b.activity_id());
        assert_eq!(a.related_activity_id(), b.related_activity_id());
        assert!(a.stack_ips().eq(b.stack_ips()));

        let mut visited: Vec<(&str, Value)> = Vec::new();
        let fast_fields = a.for_each_field(|f, v| {
            assert_eq!(v.to_value().as_u64(), v.as_u64());
            visited.push((f.name.as_str(), v.into_value()));
        });
        match (fast_fields, b.decode_payload()) {
            (Ok(n), Ok(values)) => {
                assert_eq!(n, values.len(), "{name} event {events}");
                assert_eq!(visited, values, "{name} event {events}");
            }
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "{name}"),
            (x, y) => panic!("{name} event {events}: for_each_field {x:?}, decode_payload {y:?}"),
        }
    }
    assert_eq!(fast.stats(), owned.stats(), "{name}");
    assert!(events > 0 || bytes.len() < 200, "{name}: no events");
}

#[test]
fn fast_and_owned_apis_agree_on_every_trace() {
    let demo = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/demo.nettrace"
    ))
    .unwrap();
    check("demo.nettrace", &demo);
    let Some(dir) = common::shared_traces("fast and owned APIs") else {
        return;
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nettrace"))
        .collect();
    paths.sort();
    for path in paths {
        let bytes = std::fs::read(&path).unwrap();
        check(&path.display().to_string(), &bytes);
    }
}

#[test]
fn utf16_strings_decode_lazily_to_the_owned_string() {
    let demo = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/demo.nettrace"
    ))
    .unwrap();
    // Find a string field in the demo trace and compare the two decodings.
    let mut r = TraceReader::from_slice(&demo).unwrap();
    let mut strings = 0;
    while let Some(e) = r.next_event_ref().unwrap() {
        let _ = e.for_each_field(|_, v| {
            if let nettrace::ValueRef::Utf16(s) = v {
                strings += 1;
                let owned = s.to_string_lossy();
                assert_eq!(s.to_string(), owned);
                assert!(s == *owned.as_str());
                assert_eq!(s.chars().collect::<String>(), owned);
                assert_eq!(s.len_units(), owned.encode_utf16().count());
            }
        });
    }
    assert!(strings > 0, "the demo trace has UTF-16 strings");
}
