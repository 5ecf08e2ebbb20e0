//! Lost-event accounting: sequence-number gaps per capture thread, sequence-point lower
//! bounds and V6 thread removals are all counted, per thread and in total.

use nettrace::write::{EventBlockBuilder, TraceWriter};
use nettrace::{EventHeader, EventMetadata, FormatVersion, ThreadInfo, TraceInfo, TraceReader};

fn event(capture: u64, seq: u32, ts: i64) -> EventHeader {
    EventHeader {
        metadata_id: 1,
        sequence_number: seq,
        thread: capture,
        capture_thread: capture,
        timestamp: ts,
        ..Default::default()
    }
}

fn read_all(bytes: &[u8]) -> (u64, Vec<(u64, u64)>, u64) {
    let mut r = TraceReader::from_slice(bytes).unwrap();
    let mut n = 0;
    while r.next_event().unwrap().is_some() {
        n += 1;
    }
    (r.stats().lost_events, r.stats().lost_by_thread.clone(), n)
}

fn metadata() -> Vec<EventMetadata> {
    vec![EventMetadata {
        metadata_id: 1,
        provider: "P".into(),
        event_name: "E".into(),
        ..Default::default()
    }]
}

#[test]
fn v5_gaps_and_sequence_point_bounds_are_counted_per_thread() {
    let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let mut b = EventBlockBuilder::new(FormatVersion::V5);
    // Thread 100: 1, 2, then 5 (3 and 4 lost). Thread 200: 1 only.
    for (t, s, ts) in [(100, 1, 1), (100, 2, 2), (200, 1, 3), (100, 5, 4)] {
        b.push(&event(t, s, ts), &[]);
    }
    w.write_event_block(&mut b).unwrap();
    // Thread 200 attempted 4 events by now: 3 more were lost. Thread 100 is up to date.
    w.write_sequence_point(10, 0, &[(100, 5), (200, 4)])
        .unwrap();
    b.clear();
    // Thread 200 resumes at 6: 5 lost. Thread 100 restarts at 1 (a new thread, no loss).
    b.push(&event(200, 6, 11), &[]);
    b.push(&event(100, 1, 12), &[]);
    w.write_event_block(&mut b).unwrap();
    let bytes = w.finish().unwrap();
    let (lost, by_thread, events) = read_all(&bytes);
    assert_eq!(events, 6);
    assert_eq!(lost, 2 + 3 + 1);
    assert_eq!(by_thread, vec![(100, 2), (200, 4)]);
}

#[test]
fn v6_removal_bounds_count_and_report_os_thread_ids() {
    let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V6, 8)).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let threads = [
        ThreadInfo {
            index: 1,
            thread_id: Some(4242),
            process_id: Some(7),
            ..Default::default()
        },
        ThreadInfo {
            index: 2,
            thread_id: Some(4343),
            process_id: Some(7),
            ..Default::default()
        },
    ];
    w.write_thread_block(&threads).unwrap();
    let mut b = EventBlockBuilder::new(FormatVersion::V6);
    b.push(&event(1, 1, 1), &[]);
    b.push(&event(2, 1, 2), &[]);
    b.push(&event(1, 3, 3), &[]);
    w.write_event_block(&mut b).unwrap();
    // Thread 2 exits having attempted 10 events: 9 lost.
    w.write_remove_thread_block(&[(2, 10)]).unwrap();
    w.write_sequence_point(5, 1, &[(1, 3)]).unwrap();
    let bytes = w.finish().unwrap();
    let (lost, by_thread, events) = read_all(&bytes);
    assert_eq!(events, 3);
    assert_eq!(lost, 1 + 9);
    assert_eq!(by_thread, vec![(4242, 1), (4343, 9)]);
}

#[test]
fn a_lossless_trace_reports_no_loss() {
    let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
    w.write_metadata_block(&metadata()).unwrap();
    let mut b = EventBlockBuilder::new(FormatVersion::V5);
    // Three threads, each numbering its events 1, 2, 3, ... with no gap.
    for s in 0..100u32 {
        b.push(&event(u64::from(s % 3), s / 3 + 1, i64::from(s)), &[]);
    }
    w.write_event_block(&mut b).unwrap();
    let bytes = w.finish().unwrap();
    assert_eq!(read_all(&bytes).0, 0);
}
