//! The heap-tracking table: every sampled allocation still live, by address.
//!
//! Sharded: [`SHARDS`] `Mutex<HashMap>`s, an address's shard chosen by its hash. A lock is
//! taken only to insert, remove, clear or copy out, never while capturing a stack or while
//! allocating or freeing: the code inside each critical section is limited to operations that
//! cannot allocate or free —
//!
//! - insert only while the map has spare capacity (`len < capacity`, so hashbrown neither
//!   grows nor rehashes); growth allocates a bigger map *outside* the lock, then moves the
//!   entries across under it (inserts into spare capacity) and swaps, and the old, empty map
//!   is freed after unlocking;
//! - remove hands the entry out; it is dropped (its stack freed) after unlocking;
//! - clear swaps in an empty map (`HashMap::default` does not allocate) and drops the old one
//!   after unlocking;
//! - a heap-profile snapshot reserves its buffers outside the lock and copies into spare
//!   capacity under it, retrying if the table grew in between.
//!
//! Each thread notes when it holds a shard lock (`holding_lock`); the allocator counts any
//! allocation or free made meanwhile in `allocations_under_lock` (tests assert 0).
//!
//! The free path must not take a lock for every free while profiling: [`COUNTS`] is a
//! counting filter, one counter per bucket of addresses, each bucket owned by one shard and
//! changed only under that shard's lock, equal to the bucket's entries in the table, and
//! [`PRESENT`] has one bit per bucket, set while its count is not 0. A free whose bucket's
//! bit is clear is not in the table, with one relaxed load and no lock.

use crate::sync::{AtomicU64, AtomicU8, Ordering};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One sampled allocation still live.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Bytes requested.
    pub(crate) size: u64,
    /// Bytes the sample stands for.
    pub(crate) weight: u64,
    /// OS id of the allocating thread.
    pub(crate) thread: u64,
    /// Instruction pointers, leaf first (empty if there was no memory for them).
    pub(crate) stack: Option<Box<[usize]>>,
}

/// Number of shards.
pub(crate) const SHARDS: usize = 64;
const BUCKET_BITS: u32 = 16;
const BUCKETS: usize = 1 << BUCKET_BITS;

/// Hashes addresses (already unique, so one multiply-xorshift round is plenty).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

#[inline]
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

type Map = HashMap<usize, Entry, BuildHasherDefault<AddrHasher>>;

const fn empty_map() -> Map {
    HashMap::with_hasher(BuildHasherDefault::new())
}

static TABLE: [Mutex<Map>; SHARDS] = [const { Mutex::new(empty_map()) }; SHARDS];

/// Entries per bucket of addresses, saturating at 255. Bucket `b` belongs to shard
/// `b % SHARDS` and changes only under that shard's lock, so below 255 it equals the bucket's
/// entries in the table; a bucket that reached 255 stays there (never read as 0) until the
/// table is cleared. One byte per bucket keeps the filter at 64 KiB: it is read on every free
/// while profiling, so it should stay in cache.
///
/// Ordering: the free path reads it with `Relaxed` and no lock. A sampled allocation's entry
/// is inserted and its bucket incremented before the allocation is returned to the program,
/// and a free of that address happens after the program got the pointer (on another thread,
/// only through the program's own synchronisation), so the increment happens-before the
/// load; only the removal of this very entry can bring the count back down, and that removal
/// is what this free would do. So the load reads at least 1 for every tracked address. A
/// stale non-zero read only costs a lock and a miss.
static COUNTS: [AtomicU8; BUCKETS] = [const { AtomicU8::new(0) }; BUCKETS];

/// One bit per bucket: set while the bucket's count is not 0. This is what the free path
/// reads: 8 KiB stay in the first-level cache where the 64 KiB of counts, read at random
/// addresses on every free, missed it (a free then cost several nanoseconds more).
///
/// Ordering: as for [`COUNTS`]. A bucket's bit changes only with its count, under its
/// shard's lock; a word holds the bits of 64 buckets of different shards, so the changes are
/// atomic read-modify-writes that leave the other bits alone. The bit is set before the
/// sampled allocation is returned to the program, and cleared only when the bucket's last
/// entry is removed, so a free of a tracked address reads it set.
static PRESENT: [AtomicU64; BUCKETS / 64] = [const { AtomicU64::new(0) }; BUCKETS / 64];

#[inline]
fn present(b: usize) -> bool {
    PRESENT[b / 64].load(Ordering::Relaxed) & (1 << (b % 64)) != 0
}

/// One more entry in bucket `b`. Call with its shard's lock held: the only writers of the
/// count hold it, so a load and a store suffice.
fn count_up(b: usize) {
    let c = COUNTS[b].load(Ordering::Relaxed);
    if c < u8::MAX {
        COUNTS[b].store(c + 1, Ordering::Relaxed);
    }
    if c == 0 {
        PRESENT[b / 64].fetch_or(1 << (b % 64), Ordering::Relaxed);
    }
}

/// One entry fewer in bucket `b` (a saturated bucket stays saturated). Shard lock held.
fn count_down(b: usize) {
    let c = COUNTS[b].load(Ordering::Relaxed);
    if c != u8::MAX && c > 0 {
        COUNTS[b].store(c - 1, Ordering::Relaxed);
        if c == 1 {
            PRESENT[b / 64].fetch_and(!(1 << (b % 64)), Ordering::Relaxed);
        }
    }
}

/// The bucket of an address: its 16-byte granule, folded onto 65,536 buckets, with the
/// bits above 64 KiB xor-ed in so that page-aligned blocks (large ones, from `mmap`) spread
/// over the buckets as well as small ones do. No multiply: frees of nearby addresses read
/// nearby bits of [`PRESENT`], often the same word, where a hash sent each free to a random
/// line of it.
#[inline]
fn bucket(addr: usize) -> usize {
    let granule = addr >> 4;
    (granule ^ (granule >> 12)) & (BUCKETS - 1)
}

/// A locked shard that marks this thread as holding a table lock while it lives.
struct Locked<'a>(MutexGuard<'a, Map>);

impl Locked<'static> {
    fn new(shard: usize) -> Locked<'static> {
        let guard = TABLE[shard % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        super::thread::set_holding_lock(true);
        Locked(guard)
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = Map;
    fn deref(&self) -> &Map {
        &self.0
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.0
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        super::thread::set_holding_lock(false);
    }
}

/// Whether `addr` may be tracked: one relaxed load (see [`PRESENT`]).
#[inline]
pub(crate) fn maybe_tracked(addr: usize) -> bool {
    present(bucket(addr))
}

/// Tracks `entry` at `addr` if the profiler is still in `epoch`; otherwise (stopped or
/// restarted meanwhile, or no memory to grow the table) hands the entry back. Call with the
/// re-entrancy guard raised: growing allocates.
pub(crate) fn insert(addr: usize, entry: Entry, epoch: u64) -> Result<(), Entry> {
    let b = bucket(addr);
    let shard = b % SHARDS;
    loop {
        let capacity = {
            let mut map = Locked::new(shard);
            // Ordering: stopping stores STATE = 0 before it locks each shard to clear it. If
            // this critical section comes after the clear's, the mutex orders that store
            // before this load, which therefore sees 0 or a later epoch and refuses; if it
            // comes before, the clear removes what this inserted. Either way nothing from an
            // old epoch stays behind.
            if super::state::epoch() != epoch {
                return Err(entry);
            }
            let m: &mut Map = &mut map;
            if m.len() < m.capacity() || m.contains_key(&addr) {
                let replaced = m.insert(addr, entry);
                if replaced.is_none() {
                    count_up(b);
                }
                drop(map);
                // An entry left by an address freed without our seeing it (a free racing a
                // stop and restart); dropped outside the lock.
                drop(replaced);
                return Ok(());
            }
            m.capacity()
        };
        // Grow outside the lock.
        let mut bigger = empty_map();
        if bigger.try_reserve((capacity * 2).max(64)).is_err() {
            return Err(entry);
        }
        {
            let mut map = Locked::new(shard);
            let m: &mut Map = &mut map;
            if m.capacity() <= capacity && bigger.capacity() > m.len() {
                // Inserting into spare capacity: no allocation; `drain` frees nothing.
                for (k, v) in m.drain() {
                    bigger.insert(k, v);
                }
                std::mem::swap(m, &mut bigger);
            }
        }
        // The old map (now empty) or the unused bigger one is freed here, unlocked.
        drop(bigger);
    }
}

/// Stops tracking `addr`, returning its entry if it was tracked. The caller drops the
/// entry (freeing its stack) with no lock held.
pub(crate) fn remove(addr: usize) -> Option<Entry> {
    let b = bucket(addr);
    if !present(b) {
        return None;
    }
    let mut map = Locked::new(b % SHARDS);
    let removed = map.remove(&addr);
    if removed.is_some() {
        count_down(b);
    }
    removed
}

/// Forgets every entry; returns how many there were. Entries are freed with no lock held.
pub(crate) fn clear() -> usize {
    let mut cleared = 0;
    for shard in 0..SHARDS {
        let old = {
            let mut map = Locked::new(shard);
            for b in (shard..BUCKETS).step_by(SHARDS) {
                // Every bucket of this shard, under its lock: see COUNTS and PRESENT.
                COUNTS[b].store(0, Ordering::Relaxed);
                PRESENT[b / 64].fetch_and(!(1 << (b % 64)), Ordering::Relaxed);
            }
            std::mem::take(&mut *map)
        };
        cleared += old.len();
        drop(old);
    }
    cleared
}

/// The weights of the entries tracked now: the estimated live bytes. Call with the
/// re-entrancy guard raised (it takes the shard locks).
pub(crate) fn live_weight() -> u64 {
    (0..SHARDS)
        .map(|s| Locked::new(s).values().map(|e| e.weight).sum::<u64>())
        .sum()
}

/// Entries currently tracked.
pub(crate) fn len() -> usize {
    (0..SHARDS).map(|s| Locked::new(s).len()).sum()
}

/// One live entry copied out for a heap profile; its stack is `frames[stack]`.
#[derive(Debug, Clone)]
pub(crate) struct LiveRecord {
    pub(crate) addr: usize,
    pub(crate) size: u64,
    pub(crate) weight: u64,
    pub(crate) thread: u64,
    pub(crate) stack: std::ops::Range<usize>,
}

/// Copies every live entry into `records` and their stacks into `frames`. Buffers are
/// reserved outside the locks and filled only within their spare capacity under them.
/// Returns false if memory ran short (the copy is then partial).
pub(crate) fn snapshot(records: &mut Vec<LiveRecord>, frames: &mut Vec<usize>) -> bool {
    for shard in 0..SHARDS {
        let mut copied = false;
        for _ in 0..8 {
            let (n, f) = {
                let map = Locked::new(shard);
                let f: usize = map.values().map(stack_len).sum();
                (map.len(), f)
            };
            // Slack for entries added meanwhile.
            if records.try_reserve(n + 16).is_err() || frames.try_reserve(f + 1024).is_err() {
                return false;
            }
            let map = Locked::new(shard);
            let f: usize = map.values().map(stack_len).sum();
            if map.len() > records.capacity() - records.len()
                || f > frames.capacity() - frames.len()
            {
                continue;
            }
            for (&addr, e) in map.iter() {
                let start = frames.len();
                frames.extend_from_slice(e.stack.as_deref().unwrap_or(&[]));
                records.push(LiveRecord {
                    addr,
                    size: e.size,
                    weight: e.weight,
                    thread: e.thread,
                    stack: start..frames.len(),
                });
            }
            copied = true;
            break;
        }
        if !copied {
            return false;
        }
    }
    true
}

fn stack_len(e: &Entry) -> usize {
    e.stack.as_ref().map_or(0, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is process-wide; unit tests touching it run one at a time.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    /// Buckets hit and the most addresses any one shard gets, for `addrs`.
    fn spread(addrs: impl Iterator<Item = usize>) -> (usize, usize) {
        let mut buckets = std::collections::HashSet::new();
        let mut per_shard = [0usize; SHARDS];
        for a in addrs {
            let b = bucket(a);
            buckets.insert(b);
            per_shard[b % SHARDS] += 1;
        }
        (buckets.len(), per_shard.into_iter().max().unwrap_or(0))
    }

    #[test]
    fn small_and_page_aligned_blocks_spread_over_buckets_and_shards() {
        let heap = 0x5555_5555_0000usize;
        // 65,536 consecutive 16-byte granules (1 MiB of small blocks): one bucket each.
        assert_eq!(
            spread((0..BUCKETS).map(|i| heap + 16 * i)),
            (BUCKETS, BUCKETS / SHARDS)
        );
        // 4,096 consecutive pages (large blocks from mmap): all but a few apart, and
        // no shard with more than twice its share.
        let mmap = 0x7f12_3456_7000usize;
        let (buckets, most) = spread((0..4096).map(|i| mmap + 4096 * i));
        assert!(buckets >= 4000, "{buckets} buckets for 4096 pages");
        assert!(most <= 2 * 4096 / SHARDS, "{most} pages in one shard");
        // Blocks 48 bytes apart, as one size class of a slab: still distinct.
        let (buckets, _) = spread((0..10_000).map(|i| heap + 48 * i));
        assert_eq!(buckets, 10_000);
    }

    fn entry(size: u64) -> Entry {
        Entry {
            size,
            weight: size,
            thread: 1,
            stack: Some(vec![1, 2, 3].into_boxed_slice()),
        }
    }

    #[test]
    fn insert_remove_clear_keep_the_counts_exact() {
        let _s = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = super::super::control::test_epoch();
        clear();
        // Enough entries to grow several shards several times.
        let addrs: Vec<usize> = (1..5000usize).map(|i| i * 48).collect();
        for &a in &addrs {
            assert!(insert(a, entry(a as u64), epoch).is_ok());
        }
        assert_eq!(len(), addrs.len());
        for &a in &addrs {
            assert!(maybe_tracked(a), "a tracked address always reads non-zero");
        }
        let mut records = Vec::new();
        let mut frames = Vec::new();
        assert!(snapshot(&mut records, &mut frames));
        assert_eq!(records.len(), addrs.len());
        assert!(records.iter().all(|r| frames[r.stack.clone()] == [1, 2, 3]));
        for &a in addrs.iter().step_by(2) {
            assert_eq!(remove(a).map(|e| e.size), Some(a as u64));
            assert!(remove(a).is_none());
        }
        assert_eq!(len(), addrs.len() / 2);
        // Re-inserting a present address replaces without double counting.
        assert!(insert(addrs[1], entry(7), epoch).is_ok());
        assert_eq!(len(), addrs.len() / 2);
        let total: usize = COUNTS
            .iter()
            .map(|c| usize::from(c.load(Ordering::Relaxed)))
            .sum();
        assert_eq!(total, len());
        for (b, count) in COUNTS.iter().enumerate() {
            assert_eq!(present(b), count.load(Ordering::Relaxed) != 0, "bucket {b}");
        }
        assert!(addrs.iter().skip(1).step_by(2).all(|&a| maybe_tracked(a)));
        assert_eq!(clear(), addrs.len() / 2);
        assert_eq!(len(), 0);
        assert!(COUNTS.iter().all(|c| c.load(Ordering::Relaxed) == 0));
        assert!(PRESENT.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        // A stale epoch is refused and the entry handed back.
        assert!(insert(48, entry(1), epoch + 1).is_err());
        assert_eq!(len(), 0);
    }
}
