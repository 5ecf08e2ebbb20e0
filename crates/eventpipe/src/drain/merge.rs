//! One pass's records in time order, read in place from the writers' buffers.
//!
//! A pass first scans each thread's published bytes for the records below its cutoff
//! ([`scan`]: lengths, sequence numbers and timestamps only), then visits them in
//! (timestamp, thread, sequence number) order ([`for_each_in_order`]) straight from the
//! buffers: nothing is copied into a batch, so the drain's memory does not grow with the
//! backlog and no record is moved more than once (into its event block).
//!
//! Each thread's records, across its runs (one per buffer), are already in that order: one
//! writer stamps its records from a monotonic clock as it appends them. The threads are
//! merged by looking at each one's next record (a binary heap beyond a few threads),
//! taking from one thread for as long as it stays ahead of every other, so a thread
//! writing a burst costs one comparison of heads per burst, not per record.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::threads::Consumed;
use eventpipe_core::record::RECORD_HEADER;

/// One record as the writer laid it out (`writer.rs`), borrowed from its buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecordView<'s> {
    pub(super) event_index: u32,
    pub(super) seq: u32,
    pub(super) flags: u32,
    pub(super) timestamp: i64,
    /// Everything after the fixed header: activity ids, subject, stack, payload.
    pub(super) body: &'s [u8],
}

impl<'s> RecordView<'s> {
    /// The record at the front of `bytes` and the bytes after it; `None` when no whole
    /// record is there.
    #[inline]
    pub(super) fn parse(bytes: &'s [u8]) -> Option<(RecordView<'s>, &'s [u8])> {
        let header: &[u8; RECORD_HEADER] = bytes.get(..RECORD_HEADER)?.try_into().ok()?;
        let word =
            |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        let len = word(0) as usize;
        let body = bytes.get(RECORD_HEADER..len)?;
        let mut timestamp = [0u8; 8];
        timestamp.copy_from_slice(&header[16..24]);
        let record = RecordView {
            event_index: word(4),
            seq: word(8),
            flags: word(12),
            timestamp: i64::from_le_bytes(timestamp),
            body,
        };
        Some((record, &bytes[len..]))
    }
}

/// Finds the whole records in `data` (a buffer's published bytes from the read position)
/// stamped before `cutoff`: they are this pass's. Counts them into `records`.
pub(super) fn scan(data: &[u8], cutoff: i64, records: &mut usize) -> Consumed {
    let mut consumed = Consumed::default();
    let mut rest = data;
    while let Some((record, tail)) = RecordView::parse(rest) {
        if record.timestamp >= cutoff {
            consumed.left = Some(record.seq);
            break;
        }
        consumed.last_seq = Some(record.seq);
        *records += 1;
        rest = tail;
    }
    consumed.bytes = data.len() - rest.len();
    consumed
}

/// A run of one thread's records, in order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run<'s> {
    /// Which of the pass's threads wrote it (its position in the snapshot).
    pub(super) thread: usize,
    /// The thread's session index, the order's tie-breaker.
    pub(super) thread_index: u64,
    /// The thread's OS id.
    pub(super) os_tid: u64,
    pub(super) bytes: &'s [u8],
}

/// Who wrote a record, copied into the pass once: reading it from the thread's shared
/// state per record would pull in a cache line its writer keeps writing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Author {
    /// The thread's session index.
    pub(super) index: u64,
    pub(super) os_tid: u64,
}

type Key = (i64, u64, u32);

fn key(record: &RecordView<'_>, thread_index: u64) -> Key {
    (record.timestamp, thread_index, record.seq)
}

/// One thread's records across its runs (its successive buffers), which together are in
/// order: the merge takes each thread as one sequence.
struct Lane<'r, 's> {
    thread_index: u64,
    os_tid: u64,
    /// The next record and the bytes after it in its run.
    head: Option<(RecordView<'s>, &'s [u8])>,
    /// The thread's runs after the current one.
    more: &'r [Run<'s>],
}

impl<'r, 's> Lane<'r, 's> {
    /// Splits `runs` (grouped by thread, as a pass lists them) into lanes.
    fn all(runs: &'r [Run<'s>]) -> Vec<Lane<'r, 's>> {
        let mut lanes = Vec::new();
        let mut rest = runs;
        while let Some(first) = rest.first() {
            let same = rest.iter().take_while(|r| r.thread == first.thread).count();
            let mut lane = Lane {
                thread_index: first.thread_index,
                os_tid: first.os_tid,
                head: None,
                more: &rest[..same],
            };
            lane.refill(&[]);
            lanes.push(lane);
            rest = &rest[same..];
        }
        lanes
    }

    /// Takes the head record and moves to the next.
    #[inline]
    fn pop(&mut self) -> Option<RecordView<'s>> {
        let (record, tail) = self.head.take()?;
        self.refill(tail);
        Some(record)
    }

    #[inline]
    fn refill(&mut self, tail: &'s [u8]) {
        self.head = RecordView::parse(tail);
        while self.head.is_none() {
            let Some((run, more)) = self.more.split_first() else {
                return;
            };
            self.more = more;
            self.head = RecordView::parse(run.bytes);
        }
    }

    fn author(&self) -> Author {
        Author {
            index: self.thread_index,
            os_tid: self.os_tid,
        }
    }

    fn key(&self) -> Option<Key> {
        self.head.as_ref().map(|(r, _)| key(r, self.thread_index))
    }
}

/// Calls `visit(thread, record)` for every record of `runs` in (timestamp, thread index,
/// sequence number) order, stopping at the first error. `runs` lists each thread's runs
/// together, oldest first.
pub(super) fn for_each_in_order<'s, E>(
    runs: &[Run<'s>],
    mut visit: impl FnMut(Author, RecordView<'s>) -> Result<(), E>,
) -> Result<(), E> {
    let mut lanes = Lane::all(runs);
    if let [lane] = lanes.as_mut_slice() {
        while let Some(record) = lane.pop() {
            visit(lane.author(), record)?;
        }
        return Ok(());
    }
    if lanes.len() <= FEW_LANES {
        return merge_few(lanes, visit);
    }
    let mut heap = BinaryHeap::with_capacity(lanes.len());
    for (i, lane) in lanes.iter().enumerate() {
        if let Some(k) = lane.key() {
            heap.push(Reverse((k, i)));
        }
    }
    while let Some(Reverse((_, i))) = heap.pop() {
        let rival = heap.peek().map(|Reverse((k, _))| *k);
        let lane = &mut lanes[i];
        while let Some(record) = lane.pop() {
            visit(lane.author(), record)?;
            if let Some(next) = lane.key() {
                if rival.is_some_and(|r| next > r) {
                    heap.push(Reverse((next, i)));
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Up to this many threads, the merge finds the next one by looking at every head:
/// cheaper than a heap when threads interleave record by record (writers busy at once).
const FEW_LANES: usize = 8;

/// The merge for a few threads: the leading one gives records until another's head is
/// ahead of its next one.
fn merge_few<'s, E>(
    mut lanes: Vec<Lane<'_, 's>>,
    mut visit: impl FnMut(Author, RecordView<'s>) -> Result<(), E>,
) -> Result<(), E> {
    let mut keys: Vec<Option<Key>> = lanes.iter().map(Lane::key).collect();
    loop {
        // The least key, and the least of the others (the rival to beat).
        let mut lead: Option<(Key, usize)> = None;
        let mut rival: Option<Key> = None;
        for (i, k) in keys.iter().enumerate() {
            let Some(k) = *k else { continue };
            match lead {
                Some((l, _)) if k >= l => {
                    if rival.is_none_or(|r| k < r) {
                        rival = Some(k);
                    }
                }
                _ => {
                    rival = lead.map(|(l, _)| l);
                    lead = Some((k, i));
                }
            }
        }
        let Some((_, i)) = lead else {
            return Ok(());
        };
        let lane = &mut lanes[i];
        while let Some(record) = lane.pop() {
            visit(lane.author(), record)?;
            keys[i] = lane.key();
            match (keys[i], rival) {
                (Some(next), Some(r)) if next > r => break,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u32, timestamp: i64, payload: &[u8]) -> Vec<u8> {
        let len = (RECORD_HEADER + payload.len()) as u32;
        let mut out = Vec::new();
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&7u32.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&timestamp.to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn run_of(stamps: &[i64]) -> Vec<u8> {
        stamps
            .iter()
            .enumerate()
            .flat_map(|(i, &t)| record(i as u32 + 1, t, &[i as u8; 3]))
            .collect()
    }

    #[test]
    fn scan_stops_at_the_cutoff_and_at_a_cut_record() {
        let mut bytes = run_of(&[10, 20, 30, 40]);
        let mut records = 0;
        let c = scan(&bytes, 30, &mut records);
        assert_eq!((records, c.last_seq, c.left), (2, Some(2), Some(3)));
        assert_eq!(c.bytes, 2 * (RECORD_HEADER + 3));
        bytes.truncate(bytes.len() - 1);
        let mut records = 0;
        let c = scan(&bytes, i64::MAX, &mut records);
        assert_eq!((records, c.last_seq, c.left), (3, Some(3), None));
    }

    #[test]
    fn runs_merge_by_timestamp_then_thread_then_sequence() {
        let a = run_of(&[1, 5, 5, 9, 20]);
        let b = run_of(&[2, 3, 5, 30]);
        let c = run_of(&[5]);
        let runs = [
            Run {
                thread: 0,
                thread_index: 4,
                os_tid: 40,
                bytes: &a,
            },
            Run {
                thread: 1,
                thread_index: 2,
                os_tid: 0,
                bytes: &b,
            },
            Run {
                thread: 2,
                thread_index: 3,
                os_tid: 0,
                bytes: &c,
            },
        ];
        let mut seen = Vec::new();
        for_each_in_order::<()>(&runs, |author, r| {
            seen.push((r.timestamp, author.index, r.seq));
            Ok(())
        })
        .unwrap();
        // (timestamp, thread index, sequence number); the runs' threads are 4, 2 and 3.
        let expected = vec![
            (1, 4, 1),
            (2, 2, 1),
            (3, 2, 2),
            (5, 2, 3),
            (5, 3, 1),
            (5, 4, 2),
            (5, 4, 3),
            (9, 4, 4),
            (20, 4, 5),
            (30, 2, 4),
        ];
        assert_eq!(seen, expected);
    }

    #[test]
    fn any_number_of_runs_merges_into_the_sorted_order() {
        // Both strategies: a scan of the heads (few runs) and the heap (many).
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for runs in [1, 2, 3, 3 * FEW_LANES, 3 * FEW_LANES + 3, 120] {
            // Threads of three runs each (its buffers), stamps and numbers continuing from
            // one run to the next.
            let mut bytes: Vec<Vec<u8>> = Vec::new();
            let (mut t, mut seq) = (0i64, 0u32);
            for i in 0..runs {
                if i % 3 == 0 {
                    (t, seq) = ((next() % 8) as i64, 0);
                }
                let mut run = Vec::new();
                for _ in 0..next() % 40 {
                    t += (next() % 4) as i64;
                    seq += 1;
                    run.extend(record(seq, t, &[seq as u8; 3]));
                }
                bytes.push(run);
            }
            let runs: Vec<Run<'_>> = bytes
                .iter()
                .enumerate()
                .map(|(i, b)| Run {
                    thread: i / 3,
                    thread_index: (i as u64 / 3 * 7) % 1000,
                    os_tid: 0,
                    bytes: b,
                })
                .collect();
            let mut seen = Vec::new();
            for_each_in_order::<()>(&runs, |author, r| {
                seen.push((r.timestamp, author.index, r.seq));
                Ok(())
            })
            .unwrap();
            let mut expected = seen.clone();
            expected.sort();
            assert_eq!(seen, expected, "{} runs", runs.len());
            let total: usize = bytes.iter().map(|b| b.len() / (RECORD_HEADER + 3)).sum();
            assert_eq!(seen.len(), total);
        }
    }

    #[test]
    fn merging_stops_at_the_first_error() {
        let a = run_of(&[1, 2, 3]);
        let b = run_of(&[1, 2, 3]);
        let runs = [
            Run {
                thread: 0,
                thread_index: 0,
                os_tid: 0,
                bytes: &a,
            },
            Run {
                thread: 1,
                thread_index: 1,
                os_tid: 0,
                bytes: &b,
            },
        ];
        let mut visited = 0;
        let result = for_each_in_order(&runs, |_, _| {
            visited += 1;
            if visited == 4 {
                Err("output failed")
            } else {
                Ok(())
            }
        });
        assert_eq!((result, visited), (Err("output failed"), 4));
    }
}
