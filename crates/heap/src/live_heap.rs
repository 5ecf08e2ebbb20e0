//! A Rust program's live heap from a snapshot of the allocation profiler: bytes and
//! allocations live per allocation site, each an estimate with its sampling error, and the
//! growth from one snapshot to another.
//!
//! The profiler samples allocations as a Poisson process over bytes (mean interval `I`):
//! an allocation of `s` bytes is sampled with probability `p = 1 - exp(-s/I)` and its sample
//! weighs `w = s/p` bytes, so the sum of weights estimates the live bytes without bias, and
//! `w/s` estimates how many allocations the sample stands for. The estimate's variance is
//! `Σ s²(1-p)/p² = Σ w(w - s)`; a site's 95 % interval is ±1.96 times its square root.
//!
//! A site is the first frame of the allocating stack, from the leaf, that is not allocation
//! machinery (the global allocator, `alloc::`, `core::`, the profiler): the function that
//! asked for memory, with its file and line. When that is a library's function
//! (`bytes::Bytes::copy_from_slice`), the row also names its **caller**: the first frame
//! from the leaf in the program's own code, which is the code of the crate whose `main` the
//! program runs (the binary's crate, named after the program's file), a library crate of
//! the same package (a crate whose name begins the binary's: `mini_redis` for
//! `mini_redis_server`), or any code whose source lies outside cargo's registry and git
//! checkouts (`…/registry/src/`, `…/git/checkouts/`), the standard library and `/usr` (the
//! program's workspace). [`Grouping::Caller`] sums by it.

use std::collections::HashMap;

use nettrace::Event;
use serde::Serialize;

use eventpipe_symbols::fields::number;
use eventpipe_symbols::{Frame, FrameKind, Symbolizer};

/// This project's allocation sampler provider; its samples carry a `Weight` field (bytes).
/// `AllocationSample` events are allocation samples, `LiveAllocation` events (numbered by
/// `Snapshot`) a live-heap profile, `FreeSample` ends the sample at its `Address`.
pub const ALLOCATION_PROVIDER: &str = "EventPipeRs-Allocations";

/// Where memory was allocated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Site {
    /// The function, demangled.
    pub function: String,
    /// `file:line`, when debug info has it.
    pub location: Option<String>,
}

impl Site {
    /// `function (file:line)`.
    pub fn label(&self) -> String {
        match &self.location {
            Some(l) => format!("{} ({l})", self.function),
            None => self.function.clone(),
        }
    }
}

/// What a live heap's rows are summed by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grouping {
    /// The allocation site (the leaf's first frame that is not allocation machinery).
    #[default]
    Site,
    /// The site's caller in the program's own code (the site itself when it is the
    /// program's, or when no frame is).
    Caller,
}

/// One site's live memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteRow {
    /// The site (with [`Grouping::Caller`], the caller).
    pub site: Site,
    /// The first frame in the program's own code that led to the site, when the site is
    /// not (the one holding most of the row's bytes when there are several; with
    /// [`Grouping::Caller`] always `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<Site>,
    /// Estimated live bytes.
    pub bytes: u64,
    /// Half the width of the 95 % interval of `bytes`.
    pub bytes_error: u64,
    /// Estimated live allocations.
    pub count: u64,
    /// Samples the estimate rests on.
    pub samples: u64,
}

/// A snapshot summed per site.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveHeap {
    /// The snapshot's number in its process.
    pub snapshot: u64,
    /// The mean sampling interval in bytes (0: the program tracked no heap).
    pub sample_interval: u64,
    /// Estimated live bytes in all.
    pub bytes: u64,
    /// Half the width of the 95 % interval of `bytes`.
    pub bytes_error: u64,
    /// Estimated live allocations in all.
    pub count: u64,
    /// Samples in the snapshot.
    pub samples: u64,
    /// Whether the snapshot's end marker was read and its count matched what arrived.
    pub complete: bool,
    /// Sites, most live bytes first.
    pub sites: Vec<SiteRow>,
    /// Modules whose frames could not be named, and why.
    pub notes: Vec<String>,
}

/// One sampled live allocation.
#[derive(Debug, Clone, Copy)]
struct Sampled {
    size: u64,
    weight: u64,
    stack: usize,
}

/// Reads a snapshot's events, one at a time.
#[derive(Debug, Default)]
pub struct LiveHeapBuilder {
    symbolizer: Symbolizer,
    snapshot: u64,
    samples: Vec<Sampled>,
    stacks: Vec<Vec<u64>>,
    stack_index: HashMap<Vec<u64>, usize>,
    /// The end marker of `snapshot`: (allocations it says were written, interval).
    end: Option<(u64, u64)>,
    grouping: Grouping,
}

impl LiveHeapBuilder {
    /// An empty builder.
    pub fn new() -> LiveHeapBuilder {
        LiveHeapBuilder::default()
    }

    /// Sums the rows by `grouping` (by site unless told).
    pub fn grouping(mut self, grouping: Grouping) -> LiveHeapBuilder {
        self.grouping = grouping;
        self
    }

    /// Whether the snapshot's end marker (`HeapSnapshot`) has been read.
    pub fn has_ended(&self) -> bool {
        self.end.is_some()
    }

    /// The live allocations read so far.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// Feeds one event: module and thread rundown for symbols, `LiveAllocation` and
    /// `HeapSnapshot` of the allocation profiler (the last snapshot in the trace wins).
    pub fn observe(&mut self, event: &Event<'_>) {
        if self.symbolizer.observe(event) {
            return;
        }
        let md = event.metadata;
        if md.provider != ALLOCATION_PROVIDER {
            return;
        }
        let fields = event.decode_payload().unwrap_or_default();
        let num = |name: &str| number(&fields, name);
        match md.event_name.as_str() {
            "LiveAllocation" => {
                let (Some(size), Some(weight), Some(snapshot)) =
                    (num("Size"), num("Weight"), num("Snapshot"))
                else {
                    return;
                };
                if snapshot < self.snapshot {
                    return;
                }
                if snapshot > self.snapshot {
                    self.snapshot = snapshot;
                    self.samples.clear();
                    self.end = None;
                }
                let ips: Vec<u64> = event.stack_ips().collect();
                let next = self.stacks.len();
                let stack = *self.stack_index.entry(ips.clone()).or_insert(next);
                if stack == next {
                    self.stacks.push(ips);
                }
                self.samples.push(Sampled {
                    size: size.max(1),
                    weight: weight.max(size),
                    stack,
                });
            }
            "HeapSnapshot" => {
                let (Some(snapshot), Some(count), Some(interval)) =
                    (num("Snapshot"), num("Allocations"), num("SampleInterval"))
                else {
                    return;
                };
                if snapshot >= self.snapshot {
                    if snapshot > self.snapshot {
                        self.samples.clear();
                    }
                    self.snapshot = snapshot;
                    self.end = Some((count, interval));
                }
            }
            _ => {}
        }
    }

    /// Symbolizes and sums the snapshot per site.
    pub fn finish(mut self) -> LiveHeap {
        let own = OwnCode::of_program(self.symbolizer.main_module().as_deref());
        let mut site_of_stack: Vec<Option<(Site, Option<Site>)>> = vec![None; self.stacks.len()];
        #[derive(Default)]
        struct Sum {
            bytes: u64,
            variance: f64,
            count: f64,
            samples: u64,
            callers: HashMap<Site, u64>,
        }
        let mut sums: HashMap<Site, Sum> = HashMap::new();
        let mut total = Sum::default();
        for s in std::mem::take(&mut self.samples) {
            if site_of_stack[s.stack].is_none() {
                site_of_stack[s.stack] = Some(self.site(s.stack, &own));
            }
            let (site, caller) = site_of_stack[s.stack].clone().expect("just set");
            let (key, caller) = match (self.grouping, caller) {
                (Grouping::Caller, Some(caller)) => (caller, None),
                (_, caller) => (site, caller),
            };
            let variance = s.weight as f64 * (s.weight - s.size) as f64;
            let count = s.weight as f64 / s.size as f64;
            let row = sums.entry(key).or_default();
            if let Some(caller) = caller {
                *row.callers.entry(caller).or_default() += s.weight;
            }
            for sum in [row, &mut total] {
                sum.bytes = sum.bytes.saturating_add(s.weight);
                sum.variance += variance;
                sum.count += count;
                sum.samples += 1;
            }
        }
        let error = |variance: f64| (1.96 * variance.sqrt()).round() as u64;
        let mut sites: Vec<SiteRow> = sums
            .into_iter()
            .map(|(site, sum)| SiteRow {
                site,
                caller: sum
                    .callers
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
                    .map(|(caller, _)| caller),
                bytes: sum.bytes,
                bytes_error: error(sum.variance),
                count: sum.count.round() as u64,
                samples: sum.samples,
            })
            .collect();
        sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
        let (complete, sample_interval) = match self.end {
            Some((count, interval)) => (count == total.samples, interval),
            None => (false, 0),
        };
        LiveHeap {
            snapshot: self.snapshot,
            sample_interval,
            bytes: total.bytes,
            bytes_error: error(total.variance),
            count: total.count.round() as u64,
            samples: total.samples,
            complete,
            sites,
            notes: self.symbolizer.notes().to_vec(),
        }
    }

    /// The site of raw stack `id` (its first frame, from the leaf, that is not allocation
    /// machinery) and, when that is not the program's own code, the first frame that is.
    fn site(&mut self, id: usize, own: &OwnCode) -> (Site, Option<Site>) {
        let ips = std::mem::take(&mut self.stacks[id]);
        let mut site: Option<Frame> = None;
        let mut caller = None;
        let mut first = None;
        'frames: for (i, &ip) in ips.iter().enumerate() {
            for frame in self.symbolizer.resolve(ip, i > 0) {
                first.get_or_insert_with(|| frame.clone());
                if site.is_none() && !is_allocation_machinery(frame) {
                    site = Some(frame.clone());
                    if own.holds(frame) {
                        break 'frames;
                    }
                } else if site.is_some() && own.holds(frame) {
                    caller = Some(frame.clone());
                    break 'frames;
                }
            }
        }
        self.stacks[id] = ips;
        let frame = site
            .or(first)
            .unwrap_or_else(|| Frame::named("[no stack]", FrameKind::Unknown));
        (site_of(frame), caller.map(site_of))
    }
}

fn site_of(frame: Frame) -> Site {
    let location = match (&frame.file, frame.line) {
        (Some(file), Some(line)) => Some(format!("{file}:{line}")),
        (Some(file), None) => Some(file.clone()),
        _ => None,
    };
    Site {
        function: frame.function,
        location,
    }
}

/// Which frames are the program's own code (module docs).
#[derive(Debug)]
struct OwnCode {
    /// The binary's crate: its file name with `-` as `_`.
    crate_name: Option<String>,
}

impl OwnCode {
    fn of_program(main_module: Option<&str>) -> OwnCode {
        let crate_name = main_module
            .and_then(|path| path.rsplit('/').next())
            .filter(|name| !name.is_empty())
            .map(|name| name.replace('-', "_"));
        OwnCode { crate_name }
    }

    fn holds(&self, frame: &Frame) -> bool {
        if frame.kind == FrameKind::Unknown || is_allocation_machinery(frame) {
            return false;
        }
        let name = frame.function.trim_start_matches('<');
        let krate = name.split("::").next().unwrap_or(name);
        let by_name = self.crate_name.as_deref().is_some_and(|program| {
            program == krate
                || program
                    .strip_prefix(krate)
                    .is_some_and(|rest| rest.starts_with('_'))
        });
        // Source outside the registry, git checkouts and the standard library is the
        // program's workspace.
        let by_source = frame.file.as_deref().is_some_and(|file| {
            !(file.contains("/registry/src/")
                || file.contains("/git/checkouts/")
                || file.starts_with("/rustc/")
                || file.contains("/rustlib/src/")
                || file.starts_with("/usr/"))
        });
        by_name
            || (by_source
                && !["std::", "core::", "alloc::"]
                    .iter()
                    .any(|p| name.starts_with(p)))
    }
}

/// Frames that allocate on someone's behalf: the global allocator and the profiler inside
/// it, `alloc`'s and `core`'s containers, and libc's malloc family.
fn is_allocation_machinery(frame: &Frame) -> bool {
    const PREFIXES: &[&str] = &[
        "alloc::",
        "core::",
        "std::alloc",
        "__rust_",
        "__rustc::",
        "__rdl_",
        "__rg_",
        "eventpipe_profiler::",
        "hashbrown::",
        "malloc",
        "calloc",
        "realloc",
    ];
    // `<Type as Trait>::f` is machinery when either the type or the trait is.
    let name = frame.function.trim_start_matches('<');
    let as_trait = name.split_once(" as ").map(|(_, t)| t);
    frame.kind != FrameKind::Unknown
        && std::iter::once(name)
            .chain(as_trait)
            .any(|n| PREFIXES.iter().any(|p| n.starts_with(p)))
}

/// One site's growth from one snapshot to another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteGrowth {
    /// The site.
    pub site: Site,
    /// Live bytes: old, new.
    pub bytes: (u64, u64),
    /// Live allocations: old, new.
    pub count: (u64, u64),
    /// Half the width of the 95 % interval of the difference (the two errors combined).
    pub error: u64,
}

impl SiteGrowth {
    /// New minus old live bytes.
    pub fn delta(&self) -> i128 {
        i128::from(self.bytes.1) - i128::from(self.bytes.0)
    }
    /// The same estimated bytes and count in both snapshots.
    pub fn is_unchanged(&self) -> bool {
        self.bytes.0 == self.bytes.1 && self.count.0 == self.count.1
    }
}

/// Every site of either snapshot, most growth in live bytes first.
pub fn diff_live_heaps(old: &LiveHeap, new: &LiveHeap) -> Vec<SiteGrowth> {
    let mut by_site: HashMap<&Site, SiteGrowth> = HashMap::new();
    let mut errors: HashMap<&Site, (f64, f64)> = HashMap::new();
    for (side, heap) in [(0, old), (1, new)] {
        for row in &heap.sites {
            let g = by_site.entry(&row.site).or_insert_with(|| SiteGrowth {
                site: row.site.clone(),
                bytes: (0, 0),
                count: (0, 0),
                error: 0,
            });
            let e = errors.entry(&row.site).or_default();
            if side == 0 {
                g.bytes.0 = row.bytes;
                g.count.0 = row.count;
                e.0 = row.bytes_error as f64;
            } else {
                g.bytes.1 = row.bytes;
                g.count.1 = row.count;
                e.1 = row.bytes_error as f64;
            }
        }
    }
    let mut rows: Vec<SiteGrowth> = by_site
        .into_iter()
        .map(|(site, mut g)| {
            let (a, b) = errors[site];
            g.error = (a * a + b * b).sqrt().round() as u64;
            g
        })
        .collect();
    rows.sort_by(|a, b| b.delta().cmp(&a.delta()).then_with(|| a.site.cmp(&b.site)));
    rows
}

#[cfg(test)]
mod own_code_tests {
    use super::*;

    fn frame(function: &str, file: Option<&str>) -> Frame {
        Frame {
            file: file.map(str::to_owned),
            ..Frame::named(function, FrameKind::Native)
        }
    }

    #[test]
    fn the_programs_crates_and_workspace_are_its_own_code() {
        let own = OwnCode::of_program(Some("/opt/bin/mini-redis-server"));
        let registry = "/home/u/.cargo/registry/src/index.crates.io-1/bytes-1.5.0/src/bytes.rs";
        assert!(!own.holds(&frame(
            "bytes::bytes::Bytes::copy_from_slice",
            Some(registry)
        )));
        // The package's library, from the registry too (installed from crates.io).
        let lib = "/home/u/.cargo/registry/src/index.crates.io-1/mini-redis-0.4.1/src/frame.rs";
        assert!(own.holds(&frame("mini_redis::frame::Frame::parse", Some(lib))));
        assert!(own.holds(&frame(
            "<mini_redis_server::Cli as clap::Parser>::parse",
            None
        )));
        assert!(!own.holds(&frame("mini_redisx::f", None)));
        // Workspace code, whatever its crate.
        assert!(own.holds(&frame("helpers::f", Some("/work/app/helpers/src/lib.rs"))));
        assert!(!own.holds(&frame(
            "std::io::read",
            Some("/rustc/abc/library/std/src/io.rs")
        )));
        assert!(!own.holds(&frame("alloc::vec::Vec::push", Some("/work/x.rs"))));
    }
}
