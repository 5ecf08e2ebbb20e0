//! The text sections of `eptrace analyze`: one function per section, each a heading and a
//! few aligned tables, at most `top` rows each.

use std::fmt::Write as _;

use eventpipe_analysis::{
    AllocationSection, AsyncSection, ContentionSection, ExceptionSection, GcSection, JitSection,
    OffCpuSection, ThreadPoolSection, TopStack,
};

/// Megabytes as PerfView counts them: 1,000,000 bytes.
fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"))
}

fn opt_mb(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |b| format!("{:.1}", mb(b)))
}

pub(crate) fn gc(s: &mut String, gc: &GcSection, top: usize) {
    let _ = writeln!(
        s,
        "\nGC: {} collections, {:.1} ms paused ({:.1} % of the trace; {:.1} % from the first GC to the last, as PerfView's GCStats), {} induced, {} blocking gen2",
        gc.gcs.len(),
        gc.total_pause_ms,
        gc.paused_percent_of_trace,
        gc.paused_percent,
        gc.induced,
        gc.blocking_gen2
    );
    let _ = writeln!(
        s,
        "  pauses: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({:.2} ms restarting threads in all); LOH allocated {:.1} MB, POH {:.1} MB",
        gc.pauses.p50,
        gc.pauses.p90,
        gc.pauses.p99,
        gc.pauses.max,
        gc.total_restart_ms,
        mb(gc.loh_allocated_bytes),
        mb(gc.poh_allocated_bytes)
    );
    let _ = writeln!(
        s,
        "  {:<4} {:>6} {:>8} {:>9} {:>12} {:>10} {:>10}",
        "gen", "count", "induced", "blocking", "pause ms", "mean ms", "max ms"
    );
    for g in &gc.generations {
        let _ = writeln!(
            s,
            "  {:<4} {:>6} {:>8} {:>9} {:>12.2} {:>10.2} {:>10.2}",
            g.generation,
            g.count,
            g.induced,
            g.blocking,
            g.total_pause_ms,
            g.mean_pause_ms,
            g.max_pause_ms
        );
    }
    let mut longest: Vec<_> = gc.gcs.iter().collect();
    longest.sort_by(|a, b| {
        b.pause_ms
            .unwrap_or(0.0)
            .total_cmp(&a.pause_ms.unwrap_or(0.0))
    });
    let _ = writeln!(
        s,
        "  longest pauses:\n  {:>6} {:>3} {:<13} {:<18} {:>10} {:>9} {:>9} {:>9} {:>11} {:>11} {:>10}",
        "GC",
        "gen",
        "kind",
        "reason",
        "start ms",
        "pause ms",
        "suspend",
        "restart",
        "before MB",
        "after MB",
        "promo MB"
    );
    for g in longest.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>6} {:>3} {:<13} {:<18} {:>10.1} {:>9} {:>9} {:>9} {:>11} {:>11} {:>10}",
            g.number,
            g.generation,
            g.kind,
            g.reason,
            g.start_ms,
            opt_ms(g.pause_ms),
            opt_ms(g.suspend_ms),
            opt_ms(g.restart_ms),
            opt_mb(g.heap_before_bytes),
            opt_mb(g.heap_after_bytes),
            opt_mb(g.promoted_bytes)
        );
    }
}

pub(crate) fn allocations(s: &mut String, a: &AllocationSection, top: usize) {
    let _ = writeln!(
        s,
        "\nAllocations: {} ticks, about {:.1} MB (each tick stands for ~100 KB allocated)",
        a.ticks,
        mb(a.estimated_bytes)
    );
    let _ = writeln!(s, "  {:>10} {:>7} {:<4} type", "MB", "ticks", "heap");
    for r in a.by_type.iter().take(top) {
        let name = if r.type_name.is_empty() {
            "(not named)"
        } else {
            &r.type_name
        };
        let _ = writeln!(
            s,
            "  {:>10.1} {:>7} {:<4} {}",
            mb(r.estimated_bytes),
            r.ticks,
            r.heap,
            name
        );
    }
    let all = mb(a.estimated_bytes);
    stacks(
        s,
        "by stack (eptrace convert --samples alloc draws them)",
        &a.stacks,
        |v| {
            format!(
                "{v:.1} MB ({:.1} %)",
                if all > 0.0 { v * 100.0 / all } else { 0.0 }
            )
        },
        top,
    );
}

pub(crate) fn jit(s: &mut String, j: &JitSection, top: usize) {
    // `Method/R2RGetEntryPoint` is written only under the CompilationDiagnostic keyword:
    // none seen most often means it was not collected.
    let ready_to_run = if j.ready_to_run_methods > 0 {
        format!("{} ReadyToRun methods used", j.ready_to_run_methods)
    } else {
        "ReadyToRun use not seen (it needs keyword CompilationDiagnostic, 0x2000000000)".to_owned()
    };
    let _ = writeln!(
        s,
        "\nJIT: {} methods compiled in {:.1} ms; {ready_to_run}",
        j.methods_jitted, j.total_jit_ms
    );
    let _ = writeln!(s, "  {:<26} {:>8} {:>10}", "tier", "methods", "ms");
    for t in &j.tiers {
        let _ = writeln!(s, "  {:<26} {:>8} {:>10.1}", t.tier, t.methods, t.jit_ms);
    }
    let _ = writeln!(s, "  slowest:");
    for m in j.slowest.iter().take(top) {
        let _ = writeln!(s, "  {:>9.2} ms {:<26} {}", m.jit_ms, m.tier, m.name);
    }
}

pub(crate) fn contention(s: &mut String, c: &ContentionSection, top: usize) {
    let _ = writeln!(
        s,
        "\nLock contention: {} contentions, {:.1} ms waited; waits p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        c.count, c.total_wait_ms, c.waits.p50, c.waits.p99, c.waits.max
    );
    let _ = writeln!(
        s,
        "  {:>10} {:>6} {:>10} {:>8}",
        "thread", "waits", "ms", "% time"
    );
    for t in c.threads.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>10} {:>6} {:>10.1} {:>8.1}",
            t.thread_id, t.count, t.wait_ms, t.percent_of_time
        );
    }
    if !c.owners.is_empty() {
        let _ = writeln!(s, "  by lock owner (managed thread):");
        for (owner, n, ms) in c.owners.iter().take(top) {
            let _ = writeln!(s, "  {owner:#18x} {n:>6} {ms:>10.1}");
        }
    }
    stacks(
        s,
        "by waiting stack (eptrace convert --samples contention draws them)",
        &c.stacks,
        |v| format!("{v:.1} ms"),
        top,
    );
}

pub(crate) fn exceptions(s: &mut String, e: &ExceptionSection, top: usize) {
    let _ = writeln!(
        s,
        "\nExceptions: {} thrown ({:.1}/s), {} catch blocks, {} finally blocks",
        e.thrown, e.per_second, e.catches, e.finallies
    );
    for r in e.by_type.iter().take(top) {
        let _ = writeln!(s, "  {:>7} {}: {}", r.count, r.exception_type, r.message);
    }
    stacks(
        s,
        "by throw stack (eptrace convert --samples exceptions draws them)",
        &e.stacks,
        |v| format!("{v:.0} thrown"),
        top,
    );
}

pub(crate) fn threadpool(s: &mut String, t: &ThreadPoolSection, top: usize) {
    let _ = writeln!(
        s,
        "\nThread pool: up to {} workers, {} adjustments, {} for starvation",
        t.max_workers,
        t.adjustments.len(),
        t.starvation_adjustments
    );
    for &(from, to) in t.starvation_spans.iter().take(top) {
        if to > from {
            let _ = writeln!(s, "  starved {from:.0}-{to:.0} ms");
        } else {
            let _ = writeln!(s, "  starved at {from:.0} ms");
        }
    }
    let _ = writeln!(s, "  {:>10} {:>8} reason", "at ms", "workers");
    for a in t.adjustments.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>10.1} {:>8} {}",
            a.at_ms, a.new_worker_count, a.reason
        );
    }
}

pub(crate) fn offcpu(s: &mut String, o: &OffCpuSection, top: usize) {
    let percent = |part: f64, all: f64| if all > 0.0 { part * 100.0 / all } else { 0.0 };
    let _ = writeln!(
        s,
        "\nOff-CPU time: {:.1} s waiting, {:.1} s on the CPU, over {} threads; {:.0} % of the \
         waiting has its stack",
        o.off_cpu_ms / 1000.0,
        o.cpu_ms / 1000.0,
        o.threads.len(),
        percent(o.off_cpu_with_stack_ms, o.off_cpu_ms)
    );
    let _ = writeln!(
        s,
        "  {:>10} {:>10} {:>7}  thread",
        "off-CPU ms", "CPU ms", "off %"
    );
    for t in o.threads.iter().take(top) {
        let name = t
            .name
            .clone()
            .unwrap_or_else(|| format!("thread {}", t.thread_id));
        let _ = writeln!(
            s,
            "  {:>10.1} {:>10.1} {:>6.1}%  {name} ({})",
            t.off_cpu_ms, t.cpu_ms, t.off_cpu_percent, t.thread_id
        );
    }
    if o.off_cpu_with_stack_ms <= 0.0 {
        s.push_str("  where they waited: collect with --profile off-cpu for the stacks\n");
        return;
    }
    stacks(
        s,
        "Where they waited (eptrace convert --samples offcpu draws it)",
        &o.waits,
        |v| format!("{v:.1} ms ({:.1} %)", percent(v, o.off_cpu_ms)),
        top,
    );
}

/// Stacks shown in a section's text, at most: the rest are in `--json` and the profile.
const STACKS_SHOWN: usize = 5;

/// A section's top stacks under `title`, each with its value as `value` words it, the
/// threads it happened on, and its frames from the leaf.
fn stacks(
    s: &mut String,
    title: &str,
    rows: &[TopStack],
    value: impl Fn(f64) -> String,
    top: usize,
) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "  {title}:");
    for row in rows.iter().take(top.min(STACKS_SHOWN)) {
        let mut threads = row
            .threads
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if row.threads.len() > 3 {
            let _ = write!(threads, " and {} more", row.threads.len() - 3);
        }
        let _ = writeln!(s, "  {} on {threads}", value(row.value));
        for frame in &row.frames {
            let _ = writeln!(s, "      {frame}");
        }
    }
}

pub(crate) fn async_polls(s: &mut String, a: &AsyncSection, top: usize) {
    let _ = writeln!(
        s,
        "\nAsync: {} futures, {} polls; {} poll{} of {:.0} ms or more blocked an executor \
         thread (longest {:.1} ms); {} task{} not finished at the end",
        a.futures,
        a.polls,
        a.long_polls,
        if a.long_polls == 1 { "" } else { "s" },
        a.threshold_ms,
        a.longest_poll_ms,
        a.never_completed.len(),
        if a.never_completed.len() == 1 {
            ""
        } else {
            "s"
        },
    );
    if !a.by_future.is_empty() {
        let _ = writeln!(
            s,
            "  {:>7} {:>6} {:>10} {:>8}  future (and the CPU stack in its polls)",
            "polls", "long", "long ms", "max ms"
        );
    }
    for f in a.by_future.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>7} {:>6} {:>10.1} {:>8.1}  {}",
            f.polls, f.long_polls, f.long_poll_ms, f.max_poll_ms, f.future
        );
        for frame in f.cpu_stack.iter().take(6) {
            let _ = writeln!(s, "{:>40}{frame}", "");
        }
    }
    if !a.longest.is_empty() {
        s.push_str("  longest polls:\n");
    }
    for p in a.longest.iter().take(top.min(STACKS_SHOWN)) {
        let _ = writeln!(
            s,
            "  {:.1} ms at {:.0} ms on thread {}: {}",
            p.ms,
            p.at_ms,
            p.thread,
            p.callstack.join(" ← ")
        );
    }
    if !a.never_completed.is_empty() {
        s.push_str("  not finished when the trace ended (oldest first):\n");
    }
    for t in a.never_completed.iter().take(top) {
        let _ = writeln!(
            s,
            "  {} (alive {:.0} ms, {} polls)",
            t.future, t.alive_ms, t.polls
        );
    }
    if !a.wake_to_poll.is_empty() {
        let _ = writeln!(
            s,
            "  waiting to run after a wake:\n  {:>7} {:>8} {:>8} {:>8}  task (its outermost future)",
            "wakes", "p50 ms", "p99 ms", "max ms"
        );
    }
    for w in a.wake_to_poll.iter().take(top) {
        let waiting = if w.waiting_at_end > 0 {
            format!(" ({} woken, not yet run at the end)", w.waiting_at_end)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  {:>7} {:>8.2} {:>8.2} {:>8.2}  {}{waiting}",
            w.wakes, w.delay_ms.p50, w.delay_ms.p99, w.delay_ms.max, w.future
        );
    }
}
