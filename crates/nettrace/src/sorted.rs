//! Yielding events in timestamp order.
//!
//! The format guarantees that every event between two sequence points has a timestamp
//! between theirs, and that no event after an `IsSorted` event in file order is earlier than
//! it. So events are held only until the next `IsSorted` event or sequence point releases
//! them: memory is bounded by one sequence-point region. Ties keep file order.

use std::collections::VecDeque;

use crate::error::Result;
use crate::model::TraceInfo;
use crate::reader::{Event, EventRef, OwnedEvent, ReadStats, Step, TraceReader};
use crate::source::Input;

/// Which events a [`SortedReader`] sorts: it sees every event, cheaply, and the ones it
/// turns down are neither copied nor yielded.
pub type SortFilter = Box<dyn FnMut(&EventRef<'_>) -> bool + Send>;

/// Wraps a [`TraceReader`] and yields its events in timestamp order.
pub struct SortedReader<I: Input> {
    reader: TraceReader<I>,
    pending: TimeOrder<OwnedEvent>,
    ready: VecDeque<OwnedEvent>,
    current: Option<OwnedEvent>,
    peak_pending: usize,
    filter: Option<SortFilter>,
    /// The order check of every event, filtered out or not ([`SortedReader::checking_order`]).
    order: Option<OrderTally>,
}

impl<I: Input> std::fmt::Debug for SortedReader<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedReader")
            .field("pending", &self.pending.len())
            .field("ready", &self.ready.len())
            .field("filtered", &self.filter.is_some())
            .finish_non_exhaustive()
    }
}

impl<I: Input> SortedReader<I> {
    /// Sorts the events of `reader`.
    pub fn new(reader: TraceReader<I>) -> Self {
        SortedReader {
            reader,
            pending: TimeOrder::default(),
            ready: VecDeque::new(),
            current: None,
            peak_pending: 0,
            filter: None,
            order: None,
        }
    }

    /// Also checks, as [`check_sorted_order`] does, that every event (a filtered-out one
    /// too) comes in order: one pass for a reader that wants some events sorted and the
    /// whole trace's order checked. The result is [`order_check`](Self::order_check).
    #[must_use]
    pub fn checking_order(mut self) -> Self {
        self.order = Some(OrderTally::default());
        self
    }

    /// What the order check found so far (all of it once [`next_event`](Self::next_event)
    /// has returned `None`); `None` without [`checking_order`](Self::checking_order).
    pub fn order_check(&self) -> Option<OrderCheck> {
        self.order.as_ref().map(|t| t.check)
    }

    /// Sorts only the events `keep` accepts. `keep` sees every event, in file order, as the
    /// file-order reader's [`EventRef`]; the rest are never copied, which makes a reader
    /// that needs a few kinds of event in order about as fast as one in file order.
    pub fn with_filter(
        reader: TraceReader<I>,
        keep: impl FnMut(&EventRef<'_>) -> bool + Send + 'static,
    ) -> Self {
        SortedReader {
            filter: Some(Box::new(keep)),
            ..SortedReader::new(reader)
        }
    }

    /// Facts from the trace header.
    pub fn trace(&self) -> &TraceInfo {
        self.reader.trace()
    }

    /// The underlying reader's counters.
    pub fn stats(&self) -> ReadStats {
        self.reader.stats()
    }

    /// The most events held back at once, a measure of the region size.
    pub fn peak_pending(&self) -> usize {
        self.peak_pending
    }

    /// Moves the events stamped at or before `bound` (all when `None`) to the ready queue.
    /// A sorted reader lives as long as its source and may see one large burst: it keeps
    /// no memory for the next release beyond what it holds.
    fn release(&mut self, bound: Option<i64>) {
        self.ready.extend(self.pending.release(bound));
        self.pending.shrink();
    }

    /// The next event in timestamp order.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>> {
        loop {
            if let Some(next) = self.ready.pop_front() {
                self.current = Some(next);
                let trace = self.reader.trace();
                return Ok(self.current.as_ref().map(|e| e.as_event(trace)));
            }
            match self.reader.step()? {
                Step::Event(loc) => {
                    if self.filter.is_some() || self.order.is_some() {
                        let event = self.reader.event_ref_at(loc)?;
                        let (timestamp, sorted) =
                            (event.header().timestamp, event.header().is_sorted);
                        if let Some(order) = &mut self.order {
                            order.hold(timestamp, sorted);
                        }
                        if !self.filter.as_mut().is_none_or(|keep| keep(&event)) {
                            // Its place in the order still releases what it follows.
                            if sorted {
                                self.release(Some(timestamp));
                            }
                            continue;
                        }
                    }
                    let event = self.reader.event_at(loc)?;
                    let metadata = self
                        .reader
                        .metadata_by_id(event.header.metadata_id)
                        .cloned()
                        .unwrap_or_default();
                    let owned = event.to_owned_event(metadata);
                    let (timestamp, sorted) = (owned.header.timestamp, owned.header.is_sorted);
                    self.pending.hold(timestamp, owned);
                    if sorted {
                        self.release(Some(timestamp));
                    } else {
                        self.peak_pending = self.peak_pending.max(self.pending.len());
                    }
                }
                Step::SequencePoint => {
                    if let Some(order) = &mut self.order {
                        order.release(None);
                    }
                    self.release(None);
                }
                Step::End => {
                    if let Some(order) = &mut self.order {
                        order.release(None);
                    }
                    self.release(None);
                    if self.ready.is_empty() {
                        self.current = None;
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// Items held until the trace says nothing older can follow them (an IsSorted event, a
/// sequence point, its end), then given back in timestamp order, ties in the order held:
/// the sort a reader owes a trace, which orders only each writing thread's own events.
/// [`SortedReader`] holds whole events in one; a consumer that needs only some of them in
/// order (the pairs, a thread's buffers written by others) holds just those.
#[derive(Debug)]
pub struct TimeOrder<T> {
    pending: Vec<(i64, T)>,
    /// The latest release, in order, given out by [`TimeOrder::release`]'s iterator. Its
    /// memory is the next release's: a long trace releases millions of items, and a fresh
    /// vector each time would have the allocator map and fault in new pages over and over.
    ready: Vec<(i64, T)>,
    /// Empty; the memory of the items kept back at the next bounded release.
    spare: Vec<(i64, T)>,
}

impl<T> Default for TimeOrder<T> {
    fn default() -> Self {
        TimeOrder {
            pending: Vec::new(),
            ready: Vec::new(),
            spare: Vec::new(),
        }
    }
}

impl<T> TimeOrder<T> {
    /// Holds `item`, stamped `timestamp`.
    pub fn hold(&mut self, timestamp: i64, item: T) {
        self.pending.push((timestamp, item));
    }

    /// The items stamped at or before `bound` (every item when `None`), in timestamp order.
    /// Those the iterator is dropped before giving are dropped with it.
    pub fn release(&mut self, bound: Option<i64>) -> impl Iterator<Item = T> + '_ {
        self.ready.clear();
        match bound {
            None => std::mem::swap(&mut self.pending, &mut self.ready),
            Some(bound) => {
                // Each side keeps the order held; the emptied vector is the next one's.
                let mut kept = std::mem::take(&mut self.spare);
                for (timestamp, item) in self.pending.drain(..) {
                    if timestamp <= bound {
                        self.ready.push((timestamp, item));
                    } else {
                        kept.push((timestamp, item));
                    }
                }
                self.spare = std::mem::replace(&mut self.pending, kept);
            }
        }
        // Stable: ties keep the order they were held in.
        self.ready.sort_by_key(|&(timestamp, _)| timestamp);
        self.ready.drain(..).map(|(_, item)| item)
    }

    /// Gives back the memory kept for the next releases (all of it once nothing is held):
    /// for a holder that lives long and holds little between bursts, whose kept memory
    /// would otherwise stay at its largest burst's.
    pub fn shrink(&mut self) {
        self.ready = Vec::new();
        self.spare = Vec::new();
        if self.pending.is_empty() {
            self.pending = Vec::new();
        }
    }

    /// How many items are held.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// What [`check_sorted_order`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderCheck {
    /// Events read.
    pub events: u64,
    /// Events that [`SortedReader`] would yield with a timestamp earlier than the one
    /// before them: 0 in a trace that keeps the format's ordering guarantees.
    pub violations: u64,
}

/// Reads `reader` to its end as [`SortedReader`] would order it, holding only each
/// pending event's timestamp (not the event): what a sorted pass costs when all it needs
/// is whether the order holds. `progress` is called every `every` events with the count
/// and the stream offset reached; returning `false` stops the pass early.
///
/// # Errors
/// As [`TraceReader::next_event`].
pub fn check_sorted_order<I: Input>(
    reader: &mut TraceReader<I>,
    every: u64,
    mut progress: impl FnMut(u64, u64) -> bool,
) -> Result<OrderCheck> {
    let mut tally = OrderTally::default();
    let every = every.max(1);
    loop {
        match reader.step()? {
            Step::Event(loc) => {
                let (ts, sorted, offset) = {
                    let event = reader.event_ref_at(loc)?;
                    let h = event.header();
                    (h.timestamp, h.is_sorted, event.offset().0)
                };
                tally.hold(ts, sorted);
                if tally.seen() % every == 0 && !progress(tally.seen(), offset) {
                    return Ok(tally.check);
                }
            }
            Step::SequencePoint => tally.release(None),
            Step::End => {
                tally.release(None);
                return Ok(tally.check);
            }
        }
    }
}

/// The order check of every event, by timestamps alone: held and released at the points
/// [`SortedReader`] releases events, and counted in the order it would yield them.
#[derive(Debug)]
struct OrderTally {
    check: OrderCheck,
    pending: Vec<i64>,
    out: Vec<i64>,
    last: i64,
}

impl Default for OrderTally {
    fn default() -> Self {
        OrderTally {
            check: OrderCheck::default(),
            pending: Vec::new(),
            out: Vec::new(),
            last: i64::MIN,
        }
    }
}

impl OrderTally {
    /// An event stamped `ts`; an `IsSorted` one releases everything up to it.
    fn hold(&mut self, ts: i64, sorted: bool) {
        self.pending.push(ts);
        if sorted {
            self.release(Some(ts));
        }
    }

    /// Events seen so far, released or not.
    fn seen(&self) -> u64 {
        self.check.events + self.pending.len() as u64
    }

    /// Counts the pending timestamps at or before `bound` (all when `None`), in order.
    fn release(&mut self, bound: Option<i64>) {
        let out = &mut self.out;
        out.clear();
        self.pending.retain(|&ts| {
            let go = bound.is_none_or(|b| ts <= b);
            if go {
                out.push(ts);
            }
            !go
        });
        out.sort_unstable();
        for &ts in out.iter() {
            self.check.events += 1;
            if ts < self.last {
                self.check.violations += 1;
            }
            self.last = ts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{EventBlockBuilder, TraceWriter};
    use crate::{EventHeader, EventMetadata, FormatVersion};

    /// Two sequence-point regions whose timestamps overlap, and an `IsSorted` event.
    fn trace() -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), &TraceInfo::new(FormatVersion::V5, 8)).unwrap();
        w.write_metadata_block(&[EventMetadata {
            metadata_id: 1,
            provider: "P".into(),
            event_name: "E".into(),
            ..Default::default()
        }])
        .unwrap();
        let mut seq = 0;
        let mut block = |w: &mut TraceWriter<Vec<u8>>, stamps: &[(i64, bool)]| {
            let mut b = EventBlockBuilder::new(FormatVersion::V5);
            for &(timestamp, is_sorted) in stamps {
                seq += 1;
                let h = EventHeader {
                    metadata_id: 1,
                    sequence_number: seq,
                    timestamp,
                    is_sorted,
                    ..Default::default()
                };
                b.push(&h, &[]);
            }
            w.write_event_block(&mut b).unwrap();
        };
        block(
            &mut w,
            &[(5, false), (3, false), (9, false), (4, true), (8, false)],
        );
        w.write_sequence_point(10, 0, &[]).unwrap();
        block(&mut w, &[(7, false), (12, false), (11, false)]);
        w.finish().unwrap()
    }

    #[test]
    fn the_order_check_counts_what_the_sorted_reader_yields() {
        let bytes = trace();
        let mut sorted = SortedReader::new(TraceReader::from_slice(&bytes).unwrap());
        let mut stamps = Vec::new();
        while let Some(e) = sorted.next_event().unwrap() {
            stamps.push(e.header.timestamp);
        }
        // 3 and 4 released by the IsSorted event, then 5, 8, 9 at the sequence point; the
        // second region's 7 comes after 9.
        assert_eq!(stamps, [3, 4, 5, 8, 9, 7, 11, 12]);
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let mut calls = 0;
        let check = check_sorted_order(&mut reader, 2, |_, _| {
            calls += 1;
            true
        })
        .unwrap();
        assert_eq!(
            check,
            OrderCheck {
                events: 8,
                violations: 1
            }
        );
        assert_eq!(calls, 4);
        // Stopped early by the callback.
        let mut reader = TraceReader::from_slice(&bytes).unwrap();
        let early = check_sorted_order(&mut reader, 3, |_, _| false).unwrap();
        assert!(early.events < 8);
    }
}

#[cfg(test)]
mod time_order_tests {
    use super::TimeOrder;

    #[test]
    fn releases_up_to_the_bound_in_time_order_ties_as_held() {
        let mut held = TimeOrder::default();
        for (ts, name) in [(30, "c"), (10, "a"), (20, "b1"), (40, "d"), (20, "b2")] {
            held.hold(ts, name);
        }
        let released = |held: &mut TimeOrder<&'static str>, bound| -> Vec<&str> {
            held.release(bound).collect()
        };
        assert_eq!(released(&mut held, Some(20)), ["a", "b1", "b2"]);
        assert_eq!(held.len(), 2);
        assert_eq!(released(&mut held, Some(5)), Vec::<&str>::new());
        held.hold(25, "b3");
        // An iterator dropped early drops what it did not give.
        assert_eq!(held.release(Some(30)).next(), Some("b3"));
        assert_eq!(held.len(), 1);
        // Giving back the kept memory keeps what is held.
        held.shrink();
        assert_eq!(held.len(), 1);
        assert_eq!(released(&mut held, None), ["d"]);
        assert!(held.is_empty());
    }
}
