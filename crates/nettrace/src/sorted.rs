//! Yielding events in timestamp order.
//!
//! The format guarantees that every event between two sequence points has a timestamp
//! between theirs, and that no event after an `IsSorted` event in file order is earlier than
//! it. So events are held only until the next `IsSorted` event or sequence point releases
//! them: memory is bounded by one sequence-point region. Ties keep file order.

use std::collections::VecDeque;

use crate::error::Result;
use crate::model::TraceInfo;
use crate::reader::{Event, OwnedEvent, ReadStats, Step, TraceReader};
use crate::source::Input;

/// Wraps a [`TraceReader`] and yields its events in timestamp order.
#[derive(Debug)]
pub struct SortedReader<I: Input> {
    reader: TraceReader<I>,
    pending: Vec<OwnedEvent>,
    ready: VecDeque<OwnedEvent>,
    current: Option<OwnedEvent>,
    peak_pending: usize,
}

impl<I: Input> SortedReader<I> {
    /// Sorts the events of `reader`.
    pub fn new(reader: TraceReader<I>) -> Self {
        SortedReader {
            reader,
            pending: Vec::new(),
            ready: VecDeque::new(),
            current: None,
            peak_pending: 0,
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
                    let event = self.reader.event_at(loc)?;
                    let metadata = self
                        .reader
                        .metadata_by_id(event.header.metadata_id)
                        .cloned()
                        .unwrap_or_default();
                    let owned = event.to_owned_event(metadata);
                    if owned.header.is_sorted {
                        let bound = owned.header.timestamp;
                        self.pending.push(owned);
                        self.release(|e| e.header.timestamp <= bound);
                    } else {
                        self.pending.push(owned);
                        self.peak_pending = self.peak_pending.max(self.pending.len());
                    }
                }
                Step::SequencePoint => self.release(|_| true),
                Step::End => {
                    self.release(|_| true);
                    if self.ready.is_empty() {
                        self.current = None;
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Moves the pending events that `releasable` accepts to `ready`, in timestamp order.
    fn release(&mut self, releasable: impl Fn(&OwnedEvent) -> bool) {
        let (mut out, keep): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|e| releasable(e));
        self.pending = keep;
        out.sort_by_key(|e| e.header.timestamp); // stable: ties keep file order
        self.ready.extend(out);
    }
}
