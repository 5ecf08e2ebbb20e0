//! The poll-stack machine and the model, on buffers encoded here from the format document
//! (`records::encode`): nesting, buffers that open with a Stack record, lost and malformed
//! buffers, stray pops, context lifetimes, and a property test that random valid record
//! sequences, cut into buffers as the writer cuts them, decode to the spans they describe.

use proptest::prelude::*;

use super::records::encode::encode;
use super::*;

const T: u64 = 77;

fn c(v: u64) -> ContextId {
    ContextId(v)
}
fn f(v: u32) -> AsyncFrameId {
    AsyncFrameId(v)
}

fn resume(ts: i64, ctx: u64, frame: u32) -> Record {
    Record::Resume {
        ts,
        ctx: c(ctx),
        frame: f(frame),
    }
}
fn create(ts: i64, ctx: u64, frame: u32, parent: Option<u64>) -> Record {
    Record::Create {
        ts,
        ctx: c(ctx),
        frame: f(frame),
        parent: parent.map(c),
    }
}
fn stack(ts: i64, entries: &[(u64, u32)]) -> Record {
    Record::Stack {
        ts,
        entries: entries.iter().map(|&(x, y)| (c(x), f(y))).collect(),
    }
}

/// Decodes `buffers` (sequence, records) of thread `T`, each based at its first record's
/// timestamp.
fn decode(buffers: &[(u32, Vec<Record>)]) -> AsyncTrace {
    let mut b = AsyncTraceBuilder::new();
    for (seq, records) in buffers {
        let base = records.first().map_or(0, Record::ts);
        b.buffer(T, *seq, base, &encode(records, base));
    }
    b.finish().expect("buffers were fed")
}

/// (ctx, frame, start, end, how, callstack) of every span, in the model's order.
fn spans(t: &AsyncTrace) -> Vec<(u64, u32, i64, i64, SpanEnd, Vec<u32>)> {
    t.spans
        .iter()
        .map(|s| {
            (
                s.ctx.0,
                s.frame.0,
                s.start,
                s.end,
                s.ended,
                t.callstack(s.stack).iter().map(|f| f.0).collect(),
            )
        })
        .collect()
}

#[test]
fn nested_polls_pair_with_the_nearest_resume() {
    let t = decode(&[(
        0,
        vec![
            resume(10, 1, 100),
            resume(20, 2, 200),
            Record::Suspend { ts: 30 },
            resume(35, 3, 300),
            Record::Complete { ts: 40 },
            Record::Suspend { ts: 50 },
        ],
    )]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 50, Suspend, vec![100]),
            (2, 200, 20, 30, Suspend, vec![100, 200]),
            (3, 300, 35, 40, Complete, vec![100, 300]),
        ]
    );
    assert_eq!(
        t.spans.iter().map(|s| s.depth).collect::<Vec<_>>(),
        [0, 1, 1]
    );
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
    // Running time includes the nested polls; suspended is the rest of its life.
    let outer = &t.contexts[&c(1)];
    assert_eq!((outer.polls, outer.running_ticks), (1, 40));
    assert_eq!(outer.end, ContextEnd::Pending);
    assert_eq!(t.contexts[&c(3)].end, ContextEnd::Complete(40));
    // A sample of ctx 2 at 25 is in its poll; at 33 (written just after a capture at 29)
    // it still is, the last poll of ctx 2 begun by then.
    assert_eq!(t.callstack_at(T, c(2), 25), Some(vec![f(100), f(200)]));
    assert_eq!(t.callstack_at(T, c(2), 33), Some(vec![f(100), f(200)]));
    assert_eq!(t.callstack_at(T, c(2), 19), None);
    assert_eq!(t.callstack_at(T + 1, c(2), 25), None);
}

#[test]
fn a_buffer_opening_with_a_stack_record_continues_the_open_polls() {
    let t = decode(&[
        (0, vec![resume(10, 1, 100), resume(20, 2, 200)]),
        (
            1,
            vec![
                stack(25, &[(1, 100), (2, 200)]),
                Record::Suspend { ts: 30 },
                Record::Suspend { ts: 40 },
            ],
        ),
    ]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 40, Suspend, vec![100]),
            (2, 200, 20, 30, Suspend, vec![100, 200]),
        ]
    );
    assert!(t.spans.iter().all(|s| s.start_exact));
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
}

#[test]
fn a_first_buffer_opening_with_a_stack_record_starts_polls_there() {
    // The session began while polls were open: their Resumes were never written.
    let t = decode(&[(0, vec![stack(5, &[(1, 100)]), Record::Complete { ts: 9 }])]);
    assert_eq!(
        spans(&t),
        vec![(1, 100, 5, 9, SpanEnd::Complete, vec![100])]
    );
    assert!(!t.spans[0].start_exact);
    assert_eq!(t.diagnostics.stack_mismatches, 0);
}

#[test]
fn a_lost_buffer_ends_the_polls_it_hid_and_the_stack_record_restores_the_rest() {
    // Buffer 1 (lost) suspended ctx 2 and resumed ctx 3.
    let t = decode(&[
        (0, vec![resume(10, 1, 100), resume(20, 2, 200)]),
        (
            2,
            vec![
                stack(100, &[(1, 100), (3, 300)]),
                Record::Suspend { ts: 110 },
                Record::Suspend { ts: 120 },
                Record::Suspend { ts: 130 },
            ],
        ),
    ]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 120, Suspend, vec![100]),
            (2, 200, 20, 20, Lost, vec![100, 200]),
            (3, 300, 100, 110, Suspend, vec![100, 300]),
        ]
    );
    assert!(!t.spans[2].start_exact);
    let d = &t.diagnostics;
    assert_eq!(
        (d.lost_buffers, d.lost_by_thread.clone()),
        (1, vec![(T, 1)])
    );
    // The third pop found nothing open.
    assert_eq!(d.empty_pops, 1);
    assert_eq!(d.stack_mismatches, 0, "a gap explains the difference");
}

#[test]
fn without_a_stack_record_after_a_gap_every_open_poll_was_lost() {
    let t = decode(&[
        (0, vec![resume(10, 1, 100)]),
        (3, vec![resume(50, 4, 400), Record::Suspend { ts: 60 }]),
    ]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 10, Lost, vec![100]),
            (4, 400, 50, 60, Suspend, vec![400]),
        ]
    );
    assert_eq!(t.diagnostics.lost_buffers, 2);
}

#[test]
fn a_buffer_without_its_stack_record_keeps_the_known_stack_and_is_counted() {
    // The writer leaves the Stack record out when it does not fit the buffer.
    let t = decode(&[
        (0, vec![resume(10, 1, 100)]),
        (1, vec![Record::Suspend { ts: 20 }]),
    ]);
    assert_eq!(
        spans(&t),
        vec![(1, 100, 10, 20, SpanEnd::Suspend, vec![100])]
    );
    assert_eq!(t.diagnostics.stack_mismatches, 1);
    assert_eq!(t.diagnostics.empty_pops, 0);
}

#[test]
fn a_stack_record_listing_only_the_outermost_polls_keeps_the_deeper_ones() {
    let t = decode(&[
        (
            0,
            vec![resume(10, 1, 100), resume(20, 2, 200), resume(30, 3, 300)],
        ),
        (
            1,
            vec![
                stack(35, &[(1, 100), (2, 200)]),
                Record::Suspend { ts: 40 },
                Record::Suspend { ts: 50 },
                Record::Suspend { ts: 60 },
            ],
        ),
    ]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 60, Suspend, vec![100]),
            (2, 200, 20, 50, Suspend, vec![100, 200]),
            (3, 300, 30, 40, Suspend, vec![100, 200, 300]),
        ]
    );
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
}

#[test]
fn a_contradicting_stack_record_replaces_the_stack_and_is_counted() {
    let t = decode(&[
        (0, vec![resume(10, 1, 100), resume(20, 2, 200)]),
        (
            1,
            vec![stack(30, &[(1, 100), (5, 500)]), Record::Suspend { ts: 40 }],
        ),
    ]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 40, OpenAtEnd, vec![100]),
            (2, 200, 20, 20, Lost, vec![100, 200]),
            (5, 500, 30, 40, Suspend, vec![100, 500]),
        ]
    );
    assert_eq!(t.diagnostics.stack_mismatches, 1);
}

#[test]
fn the_first_buffer_seen_of_a_thread_may_have_any_sequence() {
    // A session that starts after the thread wrote buffers 0..7 for an earlier one.
    let t = decode(&[
        (7, vec![resume(10, 1, 100)]),
        (8, vec![stack(20, &[(1, 100)]), Record::Suspend { ts: 25 }]),
    ]);
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
    assert_eq!(
        spans(&t),
        vec![(1, 100, 10, 25, SpanEnd::Suspend, vec![100])]
    );
}

#[test]
fn a_malformed_buffer_is_reported_and_skipped_whole() {
    let mut b = AsyncTraceBuilder::new();
    b.buffer(T, 0, 0, &encode(&[resume(10, 1, 100)], 0));
    // A valid Resume, then a Wake cut off before its context: nothing of it is applied.
    let mut bad = encode(&[resume(20, 2, 200)], 10);
    bad.push(7);
    b.buffer(T, 1, 10, &bad);
    b.buffer(
        T,
        2,
        30,
        &encode(&[stack(30, &[(1, 100)]), Record::Suspend { ts: 40 }], 30),
    );
    let t = b.finish().unwrap();
    assert_eq!(
        spans(&t),
        vec![(1, 100, 10, 40, SpanEnd::Suspend, vec![100])]
    );
    let d = &t.diagnostics;
    assert_eq!(d.malformed.len(), 1);
    assert_eq!((d.malformed[0].thread, d.malformed[0].sequence), (T, 1));
    assert_eq!(
        d.malformed[0].error.kind,
        RecordErrorKind::Truncated("context delta")
    );
    assert_eq!((d.buffers, d.lost_buffers, d.stack_mismatches), (3, 0, 0));
    assert!(!t.contexts.contains_key(&c(2)));
}

#[test]
fn truncated_buffers_are_malformed_never_a_panic() {
    let records = vec![
        create(5, u64::MAX - 1, u32::MAX, Some(u64::MAX)),
        resume(6, u64::MAX - 1, u32::MAX),
        stack(7, &[(u64::MAX, 1), (2, 3)]),
        Record::Drop {
            ts: 8,
            ctx: c(u64::MAX),
        },
    ];
    let bytes = encode(&records, 0);
    for cut in 0..bytes.len() {
        let mut b = AsyncTraceBuilder::new();
        b.buffer(T, 0, 0, &bytes[..cut]);
        let t = b.finish().unwrap();
        assert!(t.diagnostics.malformed.len() <= 1);
    }
}

#[test]
fn stale_buffers_are_skipped_and_a_restart_at_zero_is_a_new_thread() {
    let t = decode(&[
        (0, vec![resume(10, 1, 100)]),
        (1, vec![stack(20, &[(1, 100)]), Record::Suspend { ts: 25 }]),
        // A repeat of sequence 1: older than what was applied.
        (1, vec![resume(30, 9, 900)]),
        // A new thread with the same OS id.
        (0, vec![resume(40, 5, 500), Record::Complete { ts: 45 }]),
    ]);
    assert_eq!(t.diagnostics.out_of_order, 1);
    assert_eq!(t.diagnostics.lost_buffers, 0);
    assert!(!t.contexts.contains_key(&c(9)));
    assert_eq!(t.contexts[&c(5)].end, ContextEnd::Complete(45));
}

#[test]
fn buffers_that_arrive_ahead_of_their_turn_wait_for_it() {
    // One thread's buffers can reach the trace through different writing threads, whose
    // events the format does not order against each other: 2 before 1 is no loss.
    let t = decode(&[
        (0, vec![resume(10, 1, 100)]),
        (2, vec![stack(30, &[(1, 100)]), Record::Suspend { ts: 35 }]),
        (1, vec![stack(20, &[(1, 100)])]),
    ]);
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
    assert_eq!(
        spans(&t),
        vec![(1, 100, 10, 35, SpanEnd::Suspend, vec![100])]
    );

    // What never arrives is lost once the trace ends: 1, 2 and 4 here.
    let t = decode(&[
        (0, vec![resume(10, 1, 100)]),
        (5, vec![stack(50, &[(1, 100)])]),
        (3, vec![resume(30, 9, 900)]),
    ]);
    assert_eq!(t.diagnostics.out_of_order, 0);
    assert_eq!(t.diagnostics.lost_buffers, 3);
    assert!(t.contexts.contains_key(&c(9)));
}

#[test]
fn contexts_live_from_create_to_their_end() {
    let t = decode(&[(
        0,
        vec![
            create(0, 1, 100, None),
            resume(10, 1, 100),
            create(12, 2, 200, Some(1)),
            create(13, 3, 300, Some(1)),
            resume(14, 2, 200),
            Record::Unwind { ts: 16 },
            Record::Drop { ts: 18, ctx: c(3) },
            Record::Suspend { ts: 20 },
            resume(50, 1, 100),
            Record::Suspend { ts: 60 },
            create(70, 4, 400, None),
            resume(80, 4, 400),
            Record::Complete { ts: 90 },
            Record::Suspend { ts: 100 }, // nothing open
        ],
    )]);
    let root = &t.contexts[&c(1)];
    assert!(root.is_root());
    assert_eq!(root.created_at, Some(0));
    assert_eq!(root.first_resume, Some(10));
    assert_eq!(root.polls, 2);
    assert_eq!(root.running_ticks, 20);
    // Alive 10..100 (the trace's end), 20 of it running.
    assert_eq!(t.end_ts, 100);
    assert_eq!(root.suspended_ticks, 70);
    assert_eq!(t.contexts[&c(2)].end, ContextEnd::Unwind(16));
    assert_eq!(t.contexts[&c(2)].parent, Some(c(1)));
    assert!(!t.contexts[&c(2)].is_root());
    assert_eq!(t.contexts[&c(3)].end, ContextEnd::Drop(18));
    assert_eq!(t.contexts[&c(3)].polls, 0);
    assert_eq!(t.contexts[&c(4)].end, ContextEnd::Complete(90));
    assert_eq!(t.contexts[&c(4)].suspended_ticks, 0);
    assert_eq!(t.diagnostics.empty_pops, 1);

    let pending: Vec<u64> = t.pending_roots().iter().map(|c| c.id.0).collect();
    assert_eq!(pending, [1]);
    assert_eq!(t.alive_ticks(&t.contexts[&c(1)]), 100);

    let stats = t.frame_stats();
    let s100 = stats.iter().find(|s| s.frame == f(100)).unwrap();
    assert_eq!(
        (s100.created, s100.polls, s100.pending, s100.running_ticks),
        (1, 2, 1, 20)
    );
    assert_eq!(s100.mean_poll_ticks(), 10.0);
    let s200 = stats.iter().find(|s| s.frame == f(200)).unwrap();
    assert_eq!((s200.panicked, s200.completed, s200.cancelled), (1, 0, 0));
    let s300 = stats.iter().find(|s| s.frame == f(300)).unwrap();
    assert_eq!((s300.cancelled, s300.polls), (1, 0));
    assert_eq!(stats[0].frame, f(100), "most running time first");
    assert_eq!(t.frame_name(f(100)), "frame#100");
}

#[test]
fn polls_open_at_the_end_close_at_the_trace_end() {
    let t = decode(&[(0, vec![resume(10, 1, 100), resume(20, 2, 200)])]);
    use SpanEnd::*;
    assert_eq!(
        spans(&t),
        vec![
            (1, 100, 10, 20, OpenAtEnd, vec![100]),
            (2, 200, 20, 20, OpenAtEnd, vec![100, 200]),
        ]
    );
}

#[test]
fn the_clock_reference_converts_ticks_to_wall_clock() {
    let r = ClockReference {
        version: 1,
        reference_timestamp: 1_000,
        timestamp_frequency: 2_000_000_000,
        reference_utc_unix_nanos: 1_700_000_000_000_000_000,
    };
    assert_eq!(r.to_unix_nanos(3_000), Some(1_700_000_000_000_001_000));
    assert_eq!(r.to_unix_nanos(0), Some(1_699_999_999_999_999_500));
    let zero = ClockReference {
        timestamp_frequency: 0,
        ..r
    };
    assert_eq!(zero.to_unix_nanos(1), None);
}

// ---------------------------------------------------------------------------------------
// Property: any valid sequence, cut into buffers as the writer cuts them, decodes to the
// spans it describes.

#[derive(Debug, Clone)]
enum Op {
    Resume {
        frame: u32,
        dt: i64,
    },
    Pop {
        kind: u8,
        dt: i64,
    },
    Create {
        frame: u32,
        dt: i64,
    },
    Drop {
        dt: i64,
    },
    /// The writer starts a new buffer.
    Flush,
}

fn any_op() -> impl Strategy<Value = Op> {
    let dt = prop_oneof![0i64..1_000, 0i64..(1 << 40)];
    prop_oneof![
        3 => (1u32..20, dt.clone()).prop_map(|(frame, dt)| Op::Resume { frame, dt }),
        3 => (0u8..3, dt.clone()).prop_map(|(kind, dt)| Op::Pop { kind, dt }),
        1 => (1u32..20, dt.clone()).prop_map(|(frame, dt)| Op::Create { frame, dt }),
        1 => dt.prop_map(|dt| Op::Drop { dt }),
        1 => Just(Op::Flush),
    ]
}

type Expected = Vec<(u64, u32, i64, i64, SpanEnd, Vec<u32>)>;

/// Writes `ops` of one thread as buffers the way the profiler does, and the spans they
/// describe. Context ids count down from `u64::MAX`, exercising the wrap of the deltas.
fn write(ops: &[Op], start: i64) -> (Vec<(u32, i64, Vec<u8>)>, Expected) {
    let mut buffers = Vec::new();
    let mut expected = Vec::new();
    let mut open: Vec<(u64, u32, i64, Vec<u32>)> = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    let mut base = start;
    let mut ts = start;
    let mut next_ctx = u64::MAX;
    let flush = |records: &mut Vec<Record>, base: i64, buffers: &mut Vec<(u32, i64, Vec<u8>)>| {
        let seq = buffers.len() as u32;
        buffers.push((seq, base, encode(records, base)));
        records.clear();
    };
    for op in ops {
        match *op {
            Op::Resume { frame, dt } => {
                ts += dt;
                let ctx = next_ctx;
                next_ctx -= 1;
                let mut stack: Vec<u32> = open.last().map(|o| o.3.clone()).unwrap_or_default();
                stack.push(frame);
                open.push((ctx, frame, ts, stack));
                records.push(resume(ts, ctx, frame));
            }
            Op::Pop { kind, dt } => {
                let Some((ctx, frame, start, stack)) = open.pop() else {
                    continue;
                };
                ts += dt;
                let (record, how) = match kind {
                    0 => (Record::Suspend { ts }, SpanEnd::Suspend),
                    1 => (Record::Complete { ts }, SpanEnd::Complete),
                    _ => (Record::Unwind { ts }, SpanEnd::Unwind),
                };
                records.push(record);
                expected.push((ctx, frame, start, ts, how, stack));
            }
            Op::Create { frame, dt } => {
                ts += dt;
                let parent = open.last().map(|o| c(o.0));
                records.push(Record::Create {
                    ts,
                    ctx: c(next_ctx),
                    frame: f(frame),
                    parent,
                });
                next_ctx -= 1;
            }
            Op::Drop { dt } => {
                ts += dt;
                records.push(Record::Drop {
                    ts,
                    ctx: c(next_ctx),
                });
                next_ctx -= 1;
            }
            Op::Flush => {
                flush(&mut records, base, &mut buffers);
                base = ts;
                if !open.is_empty() {
                    records.push(stack(
                        ts,
                        &open.iter().map(|o| (o.0, o.1)).collect::<Vec<_>>(),
                    ));
                }
            }
        }
    }
    flush(&mut records, base, &mut buffers);
    while let Some((ctx, frame, start, stack)) = open.pop() {
        expected.push((ctx, frame, start, ts, SpanEnd::OpenAtEnd, stack));
    }
    (buffers, expected)
}

proptest! {
    #[test]
    fn valid_record_sequences_decode_to_their_spans(
        a in proptest::collection::vec(any_op(), 0..80),
        b in proptest::collection::vec(any_op(), 0..80),
        start in -(1i64 << 50)..(1i64 << 50),
    ) {
        let (buffers_a, mut expected_a) = write(&a, start);
        let (buffers_b, mut expected_b) = write(&b, start + 3);
        let mut builder = AsyncTraceBuilder::new();
        // The two threads' buffers interleave.
        let (mut ia, mut ib) = (buffers_a.iter(), buffers_b.iter());
        loop {
            let (x, y) = (ia.next(), ib.next());
            if x.is_none() && y.is_none() {
                break;
            }
            if let Some((seq, base, bytes)) = x {
                builder.buffer(1, *seq, *base, bytes);
            }
            if let Some((seq, base, bytes)) = y {
                builder.buffer(2, *seq, *base, bytes);
            }
        }
        let t = builder.finish().unwrap();
        prop_assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
        // Open polls end at the trace's end: the later of the two threads' last records.
        for e in expected_a.iter_mut().chain(expected_b.iter_mut()) {
            if e.4 == SpanEnd::OpenAtEnd {
                e.3 = t.end_ts;
            }
        }
        let mut got_a = spans(&t);
        let mut got_b = got_a.split_off(t.spans.iter().take_while(|s| s.thread == 1).count());
        let key = |e: &(u64, u32, i64, i64, SpanEnd, Vec<u32>)| (e.2, e.5.len(), e.0);
        for list in [&mut got_a, &mut got_b, &mut expected_a, &mut expected_b] {
            list.sort_by_key(key);
        }
        prop_assert_eq!(got_a, expected_a);
        prop_assert_eq!(got_b, expected_b);
        prop_assert!(t.spans.iter().all(|s| s.start_exact));
    }
}

proptest! {
    /// Hostile buffers: any bytes, any sequence numbers, any base; the decoder reports and
    /// carries on.
    #[test]
    fn arbitrary_buffers_never_panic(
        buffers in proptest::collection::vec(
            (0u64..3, any::<u32>(), any::<i64>(), proptest::collection::vec(any::<u8>(), 0..64)),
            0..12,
        ),
    ) {
        let mut builder = AsyncTraceBuilder::new();
        for (thread, seq, base, bytes) in &buffers {
            builder.buffer(*thread, *seq, *base, bytes);
        }
        if let Some(t) = builder.finish() {
            for s in &t.spans {
                let _ = t.callstack(s.stack);
                let _ = t.callstack_at(s.thread, s.ctx, s.start);
            }
            let _ = (t.frame_stats(), t.pending_roots());
        }
    }
}

#[test]
fn sequence_numbers_wrap_and_empty_buffers_keep_a_gap_open() {
    let t = decode(&[
        (u32::MAX, vec![resume(10, 1, 100)]),
        // The next after u32::MAX: a continuation, not a new thread.
        (0, vec![stack(20, &[(1, 100)]), Record::Suspend { ts: 25 }]),
    ]);
    assert!(t.diagnostics.is_clean(), "{:?}", t.diagnostics);
    assert_eq!(
        spans(&t),
        vec![(1, 100, 10, 25, SpanEnd::Suspend, vec![100])]
    );

    let mut b = AsyncTraceBuilder::new();
    b.buffer(T, 0, 0, &encode(&[resume(10, 1, 100)], 0));
    b.buffer(T, 2, 20, &[]);
    // Still after the gap: the missing Stack record means poll 1 ended in the lost buffer.
    b.buffer(T, 3, 30, &encode(&[resume(30, 2, 200)], 30));
    let t = b.finish().unwrap();
    assert_eq!(t.spans[0].ended, SpanEnd::Lost);
    assert_eq!(t.diagnostics.stack_mismatches, 0);
}
