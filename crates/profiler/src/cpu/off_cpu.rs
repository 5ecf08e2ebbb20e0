//! Off-CPU stacks: which stack each thread's off-CPU time is spent waiting in, when a session
//! asks for it (`OffCpu=1`).
//!
//! The collector already knows, at every visit, how long each thread was off the CPU since
//! the previous one (wall time minus CPU time). To say *where* it waited, it **probes** the
//! thread: it sends it the sampling signal once, outside its timer, and the handler records
//! the stack it interrupted, and whether that was a system call. A thread found waiting is
//! not probed again while it stays in that wait, which the collector knows without touching
//! it: its CPU clock does not move. A thread blocked for a minute is interrupted once, not
//! 6,000 times; only threads that keep waking cost a probe per visit, at most.
//!
//! A [`WaitTracker`] per thread decides, from what each visit saw, when to probe and what to
//! write; it is plain logic, with no signal or clock of its own, so that its rules are
//! tested directly:
//!
//! * The off-CPU time of an interval in which the thread ran, or before its first probe
//!   answered, is held until the next probe answers and goes to the stack it found: a wait
//!   that ends between visits is attributed to the next one, an error of at most one
//!   collector interval at each change of wait.
//! * A probe that finds the thread running (it woke meanwhile), or that no answer follows
//!   within an interval, leaves the held time without a stack, as sampling without
//!   off-CPU stacks writes it.
//! * Time in a known wait is written with its stack every [`WAIT_FLUSH_NS`] and when the
//!   wait ends, so a long wait is a few events, not one per visit.
//! * A visit sends at most [`PROBES_PER_VISIT`] probes, to the threads holding the most
//!   time without a stack; a thread passed over keeps holding its time, which the probe it
//!   gets at a later visit attributes (it holds more by then, so it comes first). Each probe
//!   wakes a waiting thread, and a program of many threads that keep waking would otherwise
//!   pay one wakeup per thread per visit; async-profiler's wall-clock mode bounds the
//!   threads it samples per tick for the same reason. The cost: a thread passed over whose
//!   wait changed place has the earlier wait's time attributed to the later one.

/// How much time in one known wait is written at once, at most.
pub(crate) const WAIT_FLUSH_NS: u64 = 100_000_000;

/// The most probes one collector visit sends (a visit every 10 ms: 200 wakeups a second
/// at most, whatever the number of threads).
pub(crate) const PROBES_PER_VISIT: usize = 2;

/// What a probe's handler recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeAnswer {
    /// The thread was in (or restarting) a system call: waiting.
    pub(crate) in_syscall: bool,
    /// The async profiler's innermost context there (0: none).
    pub(crate) async_context: u64,
    /// The stack, leaf first.
    pub(crate) stack: Vec<usize>,
}

/// Off-CPU time to write: `ns` nanoseconds, waiting in `stack` (`None`: not known where).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffCpuTime<'a> {
    pub(crate) ns: u64,
    pub(crate) wait: Option<&'a ProbeAnswer>,
}

#[derive(Debug, Default)]
enum State {
    /// Where the thread waits is not known.
    #[default]
    Unknown,
    /// A probe was sent at the previous visit.
    Probing,
    /// The thread waits in `answer`'s stack, and has not run since its CPU clock read
    /// `cpu_ns`.
    Waiting { answer: ProbeAnswer, cpu_ns: u64 },
}

/// One thread's off-CPU accounting (module docs).
#[derive(Debug, Default)]
pub(crate) struct WaitTracker {
    /// Off-CPU time not yet written.
    held_ns: u64,
    state: State,
}

/// What a visit decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Visit {
    /// Send the thread a probe now.
    pub(crate) probe: bool,
}

impl WaitTracker {
    /// One collector visit: `answer` is the probe's answer drained at this visit (if any),
    /// `cpu_ns` the thread's CPU clock now, `off_cpu_ns` its off-CPU time since the previous
    /// visit. `write` gets the time to write, in whole `period_ns`; the rest is held.
    pub(crate) fn visit(
        &mut self,
        answer: Option<ProbeAnswer>,
        cpu_ns: u64,
        off_cpu_ns: u64,
        period_ns: u64,
        mut write: impl FnMut(OffCpuTime<'_>),
    ) -> Visit {
        let period_ns = period_ns.max(1);
        // The thread ran since it was found waiting: that wait is over, and what it held
        // is its own. This interval's off-CPU time is held for the next probe.
        if matches!(&self.state, State::Waiting { cpu_ns: at, .. } if *at != cpu_ns) {
            self.flush(period_ns, &mut write);
            self.state = State::Unknown;
        }
        if matches!(self.state, State::Probing) {
            match answer {
                Some(answer) if answer.in_syscall => {
                    // The held time, and from now on every interval in which the clock
                    // stands still, goes to this wait.
                    self.state = State::Waiting { answer, cpu_ns };
                }
                // Found running (it woke meanwhile), or no answer within an interval.
                _ => {
                    self.state = State::Unknown;
                    self.flush(period_ns, &mut write);
                }
            }
        }
        self.held_ns += off_cpu_ns;
        match &self.state {
            State::Waiting { .. } if self.held_ns >= WAIT_FLUSH_NS => {
                self.flush(period_ns, &mut write);
                Visit::default()
            }
            State::Unknown if self.held_ns >= period_ns => {
                self.state = State::Probing;
                Visit { probe: true }
            }
            _ => Visit::default(),
        }
    }

    /// The probe [`visit`](Self::visit) asked for is not sent this time: the thread keeps
    /// holding its time for a later probe.
    pub(crate) fn probe_declined(&mut self) {
        if matches!(self.state, State::Probing) {
            self.state = State::Unknown;
        }
    }

    /// Off-CPU time not yet written, ns: which threads a visit probes first.
    pub(crate) fn held_ns(&self) -> u64 {
        self.held_ns
    }

    /// Writes the held time in whole periods (with the known wait's stack, if any) and
    /// keeps the remainder.
    pub(crate) fn flush(&mut self, period_ns: u64, write: &mut impl FnMut(OffCpuTime<'_>)) {
        let whole = self.held_ns / period_ns.max(1) * period_ns.max(1);
        if whole == 0 {
            return;
        }
        self.held_ns -= whole;
        let wait = match &self.state {
            State::Waiting { answer, .. } => Some(answer),
            _ => None,
        };
        write(OffCpuTime { ns: whole, wait });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn waiting(stack: &[usize]) -> ProbeAnswer {
        ProbeAnswer {
            in_syscall: true,
            async_context: 0,
            stack: stack.to_vec(),
        }
    }

    /// Runs visits, each (answer, cpu clock, off-CPU ns), and returns the probes sent and
    /// the writes, as (ns, leaf of the stack).
    fn run(
        tracker: &mut WaitTracker,
        visits: Vec<(Option<ProbeAnswer>, u64, u64)>,
    ) -> (Vec<bool>, Vec<(u64, Option<usize>)>) {
        let mut writes = Vec::new();
        let probes = visits
            .into_iter()
            .map(|(answer, cpu, off)| {
                tracker
                    .visit(answer, cpu, off, MS, |t| {
                        writes.push((t.ns, t.wait.map(|w| w.stack[0])))
                    })
                    .probe
            })
            .collect();
        (probes, writes)
    }

    #[test]
    fn a_long_wait_is_probed_once_and_written_with_its_stack_in_batches() {
        let mut t = WaitTracker::default();
        let mut visits = vec![(None, 5, 10 * MS), (Some(waiting(&[0xA])), 6, 10 * MS)];
        // 30 more visits without running: the clock stands at 6.
        visits.extend((0..30).map(|_| (None, 6, 10 * MS)));
        let (probes, writes) = run(&mut t, visits);
        assert_eq!(probes.iter().filter(|&&p| p).count(), 1);
        assert!(probes[0]);
        // 320 ms in all: written with the stack in batches of at least 100 ms.
        assert!(writes
            .iter()
            .all(|&(ns, leaf)| leaf == Some(0xA) && ns >= WAIT_FLUSH_NS));
        let written: u64 = writes.iter().map(|w| w.0).sum();
        t.flush(MS, &mut |w| {
            assert_eq!(w.wait.map(|w| w.stack[0]), Some(0xA))
        });
        assert!((300 * MS..=320 * MS).contains(&written), "{written}");
    }

    #[test]
    fn a_thread_that_runs_ends_its_wait_and_is_probed_for_the_next() {
        let mut t = WaitTracker::default();
        let (probes, writes) = run(
            &mut t,
            vec![
                (None, 0, 10 * MS),
                (Some(waiting(&[0xA])), 1, 10 * MS),
                (None, 1, 10 * MS),
                // Ran 2 ms, then waited 8 ms somewhere else.
                (None, 2 * MS + 1, 8 * MS),
                (Some(waiting(&[0xB])), 2 * MS + 1, 10 * MS),
            ],
        );
        assert_eq!(probes, [true, false, false, true, false]);
        // The wait in A: its 30 ms, written when it ended.
        assert_eq!(writes, [(30 * MS, Some(0xA))]);
        let mut rest = Vec::new();
        t.flush(MS, &mut |w| rest.push((w.ns, w.wait.map(|w| w.stack[0]))));
        assert_eq!(rest, [(18 * MS, Some(0xB))]);
    }

    #[test]
    fn time_the_probe_found_no_wait_for_is_written_without_a_stack() {
        let mut t = WaitTracker::default();
        let running = ProbeAnswer {
            in_syscall: false,
            ..waiting(&[0xC])
        };
        let (probes, writes) = run(
            &mut t,
            vec![
                (None, 0, 3 * MS),
                (Some(running), 9 * MS, 3 * MS),
                (None, 10 * MS, 2 * MS + MS / 2),
                // No answer to that probe within an interval.
                (None, 10 * MS, 0),
            ],
        );
        assert_eq!(probes, [true, true, true, false]);
        assert_eq!(writes, [(3 * MS, None), (3 * MS, None), (2 * MS, None)]);
        // Less than a period is held, not lost.
        assert_eq!(t.held_ns, MS / 2);
    }

    #[test]
    fn a_declined_probe_keeps_the_time_for_the_next_one() {
        let mut t = WaitTracker::default();
        assert!(t.visit(None, 1, 8 * MS, MS, |_| panic!()).probe);
        t.probe_declined();
        assert_eq!(t.held_ns(), 8 * MS);
        // Ran a little, waited again: asks again, holding both intervals.
        assert!(t.visit(None, 2, 9 * MS, MS, |_| panic!()).probe);
        assert_eq!(t.held_ns(), 17 * MS);
        let mut writes = Vec::new();
        t.visit(Some(waiting(&[0xD])), 2, 10 * MS, MS, |w| {
            writes.push((w.ns, w.wait.map(|w| w.stack[0])))
        });
        t.flush(MS, &mut |w| writes.push((w.ns, w.wait.map(|w| w.stack[0]))));
        assert_eq!(writes, [(27 * MS, Some(0xD))]);
    }

    #[test]
    fn less_than_a_period_off_the_cpu_costs_no_probe() {
        let mut t = WaitTracker::default();
        let (probes, writes) = run(&mut t, (1..=3).map(|i| (None, i * MS, MS / 4)).collect());
        assert_eq!(probes, [false, false, false]);
        assert!(writes.is_empty());
    }
}
