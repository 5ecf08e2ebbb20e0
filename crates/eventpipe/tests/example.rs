//! The two-provider example writes a trace with exactly the events it should.

#[path = "../examples/two_providers.rs"]
mod two_providers;

use std::collections::BTreeMap;

#[test]
fn example_trace_has_every_event_of_both_providers() {
    let path = std::env::temp_dir().join(format!("two-providers-{}.nettrace", std::process::id()));
    let stats = two_providers::run(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(stats.events_written, 900);
    assert_eq!(stats.events_dropped, 0);
    let mut reader = nettrace::TraceReader::from_slice(&bytes).unwrap();
    let mut counts = BTreeMap::<String, u64>::new();
    let mut threads = std::collections::BTreeSet::new();
    while let Some(e) = reader.next_event().unwrap() {
        *counts.entry(e.qualified_name()).or_default() += 1;
        if e.metadata.provider.starts_with("Demo.") {
            threads.insert(e.thread_id());
        }
    }
    // TraceEvent's naming: OrderStart/OrderStop become Order/Start and Order/Stop.
    assert_eq!(counts["Demo.Orders/Order/Start"], 300);
    assert_eq!(counts["Demo.Orders/Order/Stop"], 300);
    assert_eq!(counts["Demo.Cache/Lookup"], 300);
    assert_eq!(threads.len(), 3);
    assert_eq!(reader.stats().lost_events, 0);
}
