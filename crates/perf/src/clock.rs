//! One clock for a recording: an EventPipe trace's ticks turned into the sampler's clock
//! (`CLOCK_MONOTONIC`, ns), so a process's own events and its perf samples interleave as
//! they happened.
//!
//! A trace header states one instant twice: `sync_time_ticks` on the process's clock and
//! `sync_time_utc` on the calendar. The header's ticks are tried against each clock the
//! process could be reading, and the one that puts the sync instant at the header's
//! calendar time (within [`AGREEMENT_NS`]) is taken:
//!
//! * [`TickClock::Monotonic`]: 1 GHz ticks that are `CLOCK_MONOTONIC` itself: .NET on
//!   Linux (its QueryPerformanceCounter) and eventpipe-rs without a TSC. Exact.
//! * [`TickClock::Tsc`]: x86_64's time-stamp counter (eventpipe-rs with an invariant TSC),
//!   one counter for every process of the machine, converted with a rate and offset this
//!   process measures against `CLOCK_MONOTONIC` ([`TscMap`]). Within about a microsecond.
//! * [`TickClock::Calendar`]: any other clock, through the header's calendar time, so only
//!   as close as the header's resolution (a V4/V5 header states milliseconds).

/// How far apart a clock's reading of the sync instant and the header's calendar time may
/// be for that clock to be the one: the header states milliseconds, and the process took
/// its two readings one after the other.
pub const AGREEMENT_NS: i128 = 50_000_000;

/// Which clock a trace's ticks are, and how they become sampler nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TickClock {
    /// 1 GHz ticks of `CLOCK_MONOTONIC`.
    Monotonic,
    /// The TSC, converted with this map.
    Tsc(TscMap),
    /// Another clock: ns = `offset_ns` + ticks × 1e9 / `frequency`.
    Calendar {
        /// The sampler-clock ns at tick 0.
        offset_ns: i128,
        /// Ticks per second.
        frequency: i64,
    },
}

impl TickClock {
    /// The clock of a trace whose header is `info`, given what this process reads now on
    /// the calendar (`utc_now_ns`, since the Unix epoch) and on the sampler's clock
    /// (`monotonic_now_ns`), and the TSC map when the machine has one.
    pub fn of(
        info: &nettrace::TraceInfo,
        utc_now_ns: i128,
        monotonic_now_ns: u64,
        tsc: Option<TscMap>,
    ) -> TickClock {
        let header_utc = info.ticks_to_unix_nanos(info.sync_time_ticks);
        // The calendar time a sampler-clock reading stands for.
        let utc_of = |monotonic: i128| utc_now_ns - (i128::from(monotonic_now_ns) - monotonic);
        let agrees = |monotonic: i128| {
            header_utc.is_some_and(|utc| (utc_of(monotonic) - utc).abs() <= AGREEMENT_NS)
        };
        if info.tick_frequency == 1_000_000_000 && agrees(i128::from(info.sync_time_ticks)) {
            return TickClock::Monotonic;
        }
        if let Some(map) = tsc {
            if agrees(map.nanos(info.sync_time_ticks)) {
                return TickClock::Tsc(map);
            }
        }
        let frequency = info.tick_frequency.max(1);
        let sync_monotonic = header_utc.map_or(i128::from(monotonic_now_ns), |utc| {
            i128::from(monotonic_now_ns) - (utc_now_ns - utc)
        });
        TickClock::Calendar {
            offset_ns: sync_monotonic
                - i128::from(info.sync_time_ticks) * 1_000_000_000 / i128::from(frequency),
            frequency,
        }
    }

    /// `ticks` on the sampler's clock (ns), 0 for a time before its start.
    pub fn nanos(&self, ticks: i64) -> u64 {
        let ns = match *self {
            TickClock::Monotonic => i128::from(ticks),
            TickClock::Tsc(map) => map.nanos(ticks),
            TickClock::Calendar {
                offset_ns,
                frequency,
            } => offset_ns + i128::from(ticks) * 1_000_000_000 / i128::from(frequency),
        };
        u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
    }

    /// How the ticks were matched, for the one line `record` prints.
    pub fn describe(&self) -> &'static str {
        match self {
            TickClock::Monotonic => "its clock is CLOCK_MONOTONIC, the samples' own: exact",
            TickClock::Tsc(_) => {
                "its clock is the TSC, converted with a rate and offset measured against \
                 CLOCK_MONOTONIC: within a microsecond"
            }
            TickClock::Calendar { .. } => {
                "its clock is neither CLOCK_MONOTONIC nor the TSC, so its events are placed by \
                 the trace header's calendar time: within a few milliseconds"
            }
        }
    }
}

/// The TSC against `CLOCK_MONOTONIC`: two readings of both, some time apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TscMap {
    tsc: i64,
    monotonic: u64,
    ns_per_tick: f64,
}

impl TscMap {
    /// The map through (`tsc0`, `monotonic0`) and (`tsc1`, `monotonic1`); `None` when the
    /// two readings are not far enough apart to give a rate (1 ms).
    pub fn from_readings(first: (i64, u64), second: (i64, u64)) -> Option<TscMap> {
        let ticks = second.0.checked_sub(first.0)?;
        let nanos = second.1.checked_sub(first.1)?;
        (nanos >= 1_000_000 && ticks > 0).then(|| TscMap {
            tsc: first.0,
            monotonic: first.1,
            ns_per_tick: nanos as f64 / ticks as f64,
        })
    }

    /// `ticks` of the TSC in sampler-clock ns.
    pub fn nanos(&self, ticks: i64) -> i128 {
        let delta = (ticks - self.tsc) as f64 * self.ns_per_tick;
        i128::from(self.monotonic) + delta.round() as i128
    }
}

/// One reading of the TSC and of `CLOCK_MONOTONIC` together (the TSC read between two
/// clock reads, the pair with the shortest gap of a few kept), on x86_64 Linux.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn tsc_reading() -> Option<(i64, u64)> {
    let mut best: Option<(u64, (i64, u64))> = None;
    for _ in 0..5 {
        let before = crate::monotonic_ns();
        // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory effects.
        let tsc = unsafe { core::arch::x86_64::_rdtsc() } as i64;
        let after = crate::monotonic_ns();
        let gap = after - before;
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((gap, (tsc, before + gap / 2)));
        }
    }
    best.map(|(_, reading)| reading)
}

/// No TSC here.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub fn tsc_reading() -> Option<(i64, u64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use nettrace::{FormatVersion, SystemTime, TraceInfo};

    const UTC_NOW: i128 = 1_765_000_000_000_000_000;

    fn header(ticks: i64, frequency: i64, utc: i128) -> TraceInfo {
        let mut info = TraceInfo::new(FormatVersion::V5, 8);
        info.sync_time_ticks = ticks;
        info.tick_frequency = frequency;
        info.sync_time_utc = SystemTime::from_unix_nanos(utc);
        info
    }

    #[test]
    fn monotonic_ticks_that_agree_with_the_calendar_are_taken_as_they_are() {
        // The process synced 2 s ago at monotonic 5e9: now is 7e9.
        let info = header(5_000_000_000, 1_000_000_000, UTC_NOW - 2_000_000_000);
        let clock = TickClock::of(&info, UTC_NOW, 7_000_000_000, None);
        assert_eq!(clock, TickClock::Monotonic);
        assert_eq!(clock.nanos(6_000_000_123), 6_000_000_123);
    }

    #[test]
    fn tsc_ticks_go_through_the_measured_map() {
        // A 3 GHz TSC that read 30e9 at monotonic 10e9.
        let map = TscMap::from_readings(
            (30_000_000_000, 10_000_000_000),
            (33_000_000_000, 11_000_000_000),
        )
        .unwrap();
        let info = header(36_000_000_000, 2_999_000_000, UTC_NOW - 3_000_000_000);
        // Now: monotonic 15e9; the sync instant (TSC 36e9) was monotonic 12e9, 3 s ago.
        let clock = TickClock::of(&info, UTC_NOW, 15_000_000_000, Some(map));
        assert!(matches!(clock, TickClock::Tsc(_)), "{clock:?}");
        assert_eq!(clock.nanos(36_000_000_300), 12_000_000_100);
    }

    #[test]
    fn any_other_clock_is_placed_by_the_calendar() {
        // Ticks counting from the process's start at 10 MHz, synced 1 s ago at tick 50.
        let info = header(50, 10_000_000, UTC_NOW - 1_000_000_000);
        let clock = TickClock::of(&info, UTC_NOW, 9_000_000_000, None);
        assert!(matches!(clock, TickClock::Calendar { .. }), "{clock:?}");
        assert_eq!(clock.nanos(50), 8_000_000_000);
        assert_eq!(clock.nanos(10_000_050), 9_000_000_000);
    }

    #[test]
    fn a_monotonic_clock_that_disagrees_with_the_calendar_is_not_taken_for_the_samples_own() {
        // 1 GHz, but counting from the process's start (eventpipe-rs before it stated
        // CLOCK_MONOTONIC): tick 1e9 was 1 s ago, not at monotonic 1e9.
        let info = header(1_000_000_000, 1_000_000_000, UTC_NOW - 1_000_000_000);
        let clock = TickClock::of(&info, UTC_NOW, 500_000_000_000, None);
        assert!(matches!(clock, TickClock::Calendar { .. }), "{clock:?}");
        assert_eq!(clock.nanos(1_000_000_000), 499_000_000_000);
    }

    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn readings_of_the_tsc_give_a_map_that_tracks_the_monotonic_clock() {
        let first = tsc_reading().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = tsc_reading().unwrap();
        let map = TscMap::from_readings(first, second).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (tsc, monotonic) = tsc_reading().unwrap();
        let error = map.nanos(tsc) - i128::from(monotonic);
        assert!(error.abs() < 200_000, "off by {error} ns");
    }
}
