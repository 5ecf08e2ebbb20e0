//! The committed demo fixture is exactly what `examples/demo_trace.rs` writes, and reads
//! back with the contents the example put in.

#[path = "../examples/demo_trace.rs"]
mod demo;

use nettrace::{FormatVersion, TraceReader, Value};

#[test]
fn committed_fixture_matches_its_generator() {
    let committed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/demo.nettrace"
    ))
    .unwrap();
    assert!(
        committed == demo::build(),
        "tests/fixtures/demo.nettrace is stale: run `cargo run -p nettrace --example demo_trace -- \
         crates/nettrace/tests/fixtures/demo.nettrace`"
    );
}

#[test]
fn demo_fixture_reads_back() {
    let bytes = demo::build();
    let mut r = TraceReader::from_slice(&bytes).unwrap();
    let mut names = std::collections::BTreeMap::<String, u32>::new();
    let mut miss = None;
    while let Some(e) = r.next_event().unwrap() {
        *names.entry(e.qualified_name()).or_default() += 1;
        if miss.is_none() && e.metadata.event_name == "Miss" {
            miss = Some(
                e.decode_payload()
                    .unwrap()
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect::<Vec<_>>(),
            );
        }
    }
    assert_eq!(
        r.trace().version,
        FormatVersion::V5,
        "opcode tags make it V5"
    );
    assert_eq!(names["Demo.Http/Request/Start"], 40);
    assert_eq!(names["Demo.Http/Request/Stop"], 20);
    assert_eq!(names["Demo.Cache/Miss/24"], 20);
    let miss = miss.unwrap();
    assert_eq!(miss[0], ("Key".to_string(), Value::String("user:3".into())));
    assert_eq!(
        miss[1].1,
        Value::Array(vec![Value::I32(1), Value::I32(3), Value::I32(5)])
    );
    assert_eq!(r.stats().lost_events, 2);
    assert_eq!(r.stats().lost_by_thread, vec![(4245, 2)]);
}
