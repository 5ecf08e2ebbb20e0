//! The off-CPU section's accounting of the CPU sampler's `Sample` events, on traces whose
//! samples are known one by one: what each `State` (with or without a stack) counts as,
//! per thread, and the threads' names from the rundown.

use eventpipe_analysis::offcpu::{CPU_SAMPLER_PROVIDER, RUNDOWN_PROVIDER};
use eventpipe_analysis::{Analysis, Analyzer, Sections};
use eventpipe_test_support::trace::{md, utf16, TraceBuilder};
use nettrace::{FieldType, FormatVersion, SortedReader, TraceReader};

/// One `Sample`: thread, State, Periods, PeriodNs, whether it has a stack.
type Sample = (u64, u32, u32, u32, bool);

fn analyze(samples: &[Sample], names: &[(u64, &str)], sections: Sections) -> Analysis {
    let sample = md(
        1,
        CPU_SAMPLER_PROVIDER,
        "Sample",
        &[
            ("State", FieldType::UInt32),
            ("AsyncContext", FieldType::UInt64),
            ("Periods", FieldType::UInt32),
            ("PeriodNs", FieldType::UInt32),
        ],
    );
    let mut thread_row = md(
        2,
        RUNDOWN_PROVIDER,
        "Thread",
        &[
            ("ThreadId", FieldType::UInt64),
            ("Name", FieldType::Utf16String),
        ],
    );
    thread_row.event_id = 7;
    let mut builder = TraceBuilder::new(FormatVersion::V5)
        .info(|info| {
            info.tick_frequency = 1_000_000;
            info.sync_time_ticks = 0;
        })
        .metadata(vec![sample, thread_row]);
    for (i, &(thread, state, periods, period_ns, stack)) in samples.iter().enumerate() {
        let payload = [
            state.to_le_bytes().as_slice(),
            &0u64.to_le_bytes(),
            &periods.to_le_bytes(),
            &period_ns.to_le_bytes(),
        ]
        .concat();
        let ips: &[u64] = if stack { &[0x1000, 0x2000] } else { &[] };
        builder = builder.event_with_stack(thread, i as i64 * 1000, 1, payload, ips);
    }
    for &(id, name) in names {
        let payload = [id.to_le_bytes().as_slice(), &utf16(name)].concat();
        builder = builder.event(1, samples.len() as i64 * 1000, 2, payload);
    }
    let bytes = builder.build();
    let mut reader = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
    let mut analyzer = Analyzer::new(sections);
    while let Some(event) = reader.next_event().unwrap() {
        analyzer.observe(&event);
    }
    analyzer.finish("offcpu.nettrace")
}

const MS: u32 = 1_000_000;

#[test]
fn each_state_counts_as_the_sampler_defines_it() {
    let samples = [
        // Thread 10: 3 ms running, 2 ms caught in a system call, 5 ms off the CPU without
        // a stack, 40 ms waiting in a stack.
        (10, 1, 3, MS, true),
        (10, 2, 2, MS, true),
        (10, 2, 5, MS, false),
        (10, 3, 40, MS, true),
        // Thread 20: 4 periods of 250 µs running, 8 of them off the CPU.
        (20, 1, 4, MS / 4, true),
        (20, 2, 8, MS / 4, false),
    ];
    let a = analyze(&samples, &[(10, "waiter")], Sections::ALL);
    let o = a.offcpu.expect("an off-CPU section");
    assert_eq!(o.samples, 6);
    assert_eq!(o.threads.len(), 2);
    let waiter = &o.threads[0];
    assert_eq!(
        (waiter.thread_id, waiter.name.as_deref()),
        (10, Some("waiter"))
    );
    assert_eq!(
        (
            waiter.cpu_ms,
            waiter.in_syscalls_ms,
            waiter.off_cpu_ms,
            waiter.off_cpu_with_stack_ms
        ),
        (3.0, 2.0, 45.0, 40.0)
    );
    assert!((waiter.off_cpu_percent - 45.0 * 100.0 / 50.0).abs() < 1e-9);
    let other = &o.threads[1];
    assert_eq!((other.thread_id, other.name.as_deref()), (20, None));
    assert_eq!((other.cpu_ms, other.off_cpu_ms), (1.0, 2.0));
    assert_eq!(
        (o.cpu_ms, o.off_cpu_ms, o.off_cpu_with_stack_ms),
        (4.0, 47.0, 40.0)
    );
    // Stacks need symbols: the analysis leaves them to its caller.
    assert!(o.waits.is_empty());
    assert!(!a.missing.iter().any(|m| m.section == "offcpu"));
}

#[test]
fn without_samples_the_section_says_what_to_collect_and_can_be_left_out() {
    let a = analyze(&[], &[], Sections::ALL);
    assert!(a.offcpu.is_none());
    let missing = a.missing.iter().find(|m| m.section == "offcpu").unwrap();
    assert!(missing.collect.contains("--profile off-cpu"));
    let only_gc = Sections {
        gc: true,
        ..Sections::NONE
    };
    let a = analyze(&[(10, 3, 1, MS, true)], &[], only_gc);
    assert!(a.offcpu.is_none());
    assert!(!a.missing.iter().any(|m| m.section == "offcpu"));
}
