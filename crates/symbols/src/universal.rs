//! Each process's address space as a trace's `Universal.System` events describe it (nettrace
//! V6 traces written by one-collect and `dotnet-trace collect-linux`).
//!
//! * `ProcessMapping`: a range of one process's address space (the process is the event's
//!   pid, or the payload's `ProcessId` when present), the file offset its start maps and the
//!   file's name (`vmlinux` for the kernel, `[vdso]`, `[anon:...]`, or a path).
//! * `ProcessMappingMetadata`: JSON about a mapped file; its `build_id` says which binary
//!   was mapped.
//! * `ProcessSymbol`: a named address range inside one mapping, in absolute addresses. Writers
//!   emit them for the code samples hit, the kernel's included.
//!
//! Ranges are inclusive of their end address, as the writers state them. Lookups tolerate
//! overlapping and nonsensical ranges from a hostile trace: a range that ends before it
//! starts is dropped, and a lookup examines a bounded number of overlapping candidates.
//! Memory grows with the number of these events, never beyond a few words per event byte.

use std::collections::HashMap;

use nettrace::{Event, Value};

use crate::fields::field;

/// The provider whose events describe processes, mappings and symbols.
pub(crate) const PROVIDER: &str = "Universal.System";

/// Addresses from here up are the kernel's on x86_64 and arm64 (the canonical upper half).
pub(crate) const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// How many ranges starting at or below an address a lookup examines for one that still
/// contains it: nested or overlapping ranges are few in real traces, and a hostile one must
/// not make every lookup scan the whole table.
const MAX_OVERLAP_SCAN: usize = 64;

/// One mapped range of a process.
#[derive(Debug, Clone)]
pub(crate) struct Mapping {
    /// The trace-wide id symbols refer to.
    pub(crate) id: u64,
    /// First mapped address.
    pub(crate) start: u64,
    /// Last mapped address (inclusive).
    pub(crate) end: u64,
    /// Offset in the file that `start` maps.
    pub(crate) file_offset: u64,
    /// The file's path, or a pseudo-name such as `vmlinux`, `[vdso]`, `[anon:jit]`.
    pub(crate) file_name: String,
    /// The file's GNU build id (lowercase hex), when the trace states one.
    pub(crate) build_id: Option<String>,
}

impl Mapping {
    /// The file name without its directory: how frames name their module.
    pub(crate) fn module_name(&self) -> &str {
        self.file_name
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.file_name)
    }

    /// Whether the mapping is the kernel's.
    pub(crate) fn is_kernel(&self) -> bool {
        self.start >= KERNEL_START
    }

    /// The offset in the mapped file of `address` (inside the mapping).
    pub(crate) fn file_offset_of(&self, address: u64) -> u64 {
        address
            .wrapping_sub(self.start)
            .wrapping_add(self.file_offset)
    }
}

#[derive(Debug)]
struct Symbol {
    start: u64,
    end: u64,
    name: Box<str>,
}

/// Ranges sorted by start on first lookup after a change.
#[derive(Debug)]
struct RangeIndex<T> {
    items: Vec<T>,
    sorted: bool,
}

impl<T> Default for RangeIndex<T> {
    fn default() -> Self {
        RangeIndex {
            items: Vec::new(),
            sorted: true,
        }
    }
}

impl<T> RangeIndex<T> {
    fn push(&mut self, item: T) {
        self.items.push(item);
        self.sorted = false;
    }

    /// The range containing `address` that starts last (the innermost of nested ones; of
    /// two with one start, the one observed last).
    fn find(&mut self, address: u64, bounds: impl Fn(&T) -> (u64, u64)) -> Option<&T> {
        if !self.sorted {
            // Stable: among equal starts, later observations stay later.
            self.items.sort_by_key(|item| bounds(item).0);
            self.sorted = true;
        }
        let after = self.items.partition_point(|item| bounds(item).0 <= address);
        self.items[..after]
            .iter()
            .rev()
            .take(MAX_OVERLAP_SCAN)
            .find(|item| bounds(item).1 >= address)
    }
}

/// What a trace's `Universal.System` events say about address spaces.
#[derive(Debug, Default)]
pub(crate) struct AddressSpaces {
    /// Every mapping, by process.
    by_process: HashMap<u64, RangeIndex<Mapping>>,
    /// Kernel mappings of any process: a sample's kernel frames are named from whichever
    /// process the trace listed the kernel under.
    kernel: RangeIndex<Mapping>,
    /// Symbols by the id of the mapping they are in.
    symbols: HashMap<u64, RangeIndex<Symbol>>,
    /// Build ids by mapping-metadata id.
    build_ids: HashMap<u64, String>,
}

impl AddressSpaces {
    /// Learns from one event if it is a mapping, mapping metadata or symbol event. Returns
    /// whether the event was one of those (whatever its payload held).
    pub(crate) fn observe(&mut self, event: &Event<'_>) -> bool {
        let md = event.metadata;
        if md.provider != PROVIDER {
            return false;
        }
        let kind = md.event_name.as_str();
        if !matches!(
            kind,
            "ProcessMapping" | "ProcessMappingMetadata" | "ProcessSymbol"
        ) {
            return false;
        }
        let Ok(fields) = event.decode_payload() else {
            return true;
        };
        let num = |n| field(&fields, n).and_then(Value::as_u64);
        let text = |n| field(&fields, n).and_then(Value::as_str);
        match kind {
            "ProcessMapping" => {
                let pid = num("ProcessId").or_else(|| event.process_id());
                let (Some(pid), Some(id), Some(start), Some(end)) =
                    (pid, num("Id"), num("StartAddress"), num("EndAddress"))
                else {
                    return true;
                };
                if end < start {
                    return true;
                }
                let build_id = num("MetadataId")
                    .filter(|&m| m != 0)
                    .and_then(|m| self.build_ids.get(&m).cloned());
                let mapping = Mapping {
                    id,
                    start,
                    end,
                    file_offset: num("FileOffset").unwrap_or(0),
                    file_name: text("FileName").unwrap_or_default().to_owned(),
                    build_id,
                };
                if mapping.is_kernel() {
                    self.kernel.push(mapping.clone());
                }
                self.by_process.entry(pid).or_default().push(mapping);
            }
            "ProcessMappingMetadata" => {
                if let (Some(id), Some(json)) = (num("Id"), text("SymbolMetadata")) {
                    if let Some(build_id) = build_id_of(json) {
                        self.build_ids.insert(id, build_id);
                    }
                }
            }
            _ => {
                let (Some(mapping), Some(start), Some(end), Some(name)) = (
                    num("MappingId"),
                    num("StartAddress"),
                    num("EndAddress"),
                    text("Name"),
                ) else {
                    return true;
                };
                if end < start || name.is_empty() {
                    return true;
                }
                self.symbols.entry(mapping).or_default().push(Symbol {
                    start,
                    end,
                    name: name.into(),
                });
            }
        }
        true
    }

    /// Whether the trace described any mapping.
    /// The build id of every mapped file that has one, by module name.
    pub(crate) fn build_ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_process
            .values()
            .flat_map(|index| index.items.iter())
            .filter_map(|m| Some((m.module_name(), m.build_id.as_deref()?)))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_process.is_empty()
    }

    /// Whether the trace described mappings of process `pid`.
    pub(crate) fn knows_process(&self, pid: u64) -> bool {
        self.by_process.contains_key(&pid)
    }

    /// The mapping of process `pid` (or, for a kernel address, of any process) containing
    /// `address`.
    pub(crate) fn mapping(&mut self, pid: Option<u64>, address: u64) -> Option<&Mapping> {
        let bounds = |m: &Mapping| (m.start, m.end);
        let in_process = pid
            .and_then(|pid| self.by_process.get_mut(&pid))
            .and_then(|maps| maps.find(address, bounds));
        match in_process {
            Some(found) => Some(found),
            None if address >= KERNEL_START => self.kernel.find(address, bounds),
            None => None,
        }
    }

    /// The trace's name for `address` in mapping `mapping_id`.
    pub(crate) fn symbol(&mut self, mapping_id: u64, address: u64) -> Option<&str> {
        self.symbols
            .get_mut(&mapping_id)?
            .find(address, |s| (s.start, s.end))
            .map(|s| &*s.name)
    }

    /// Whether the trace names any address of mapping `mapping_id`.
    pub(crate) fn has_symbols(&self, mapping_id: u64) -> bool {
        self.symbols.contains_key(&mapping_id)
    }
}

/// The `build_id` of a mapping's symbol metadata (`{"type": "ELF", "build_id": "..."}`),
/// when it is plausible hex.
fn build_id_of(json: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    let id = value.get("build_id")?.as_str()?.trim().to_ascii_lowercase();
    let plausible = !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_hexdigit());
    plausible.then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_range_containing_an_address_wins() {
        let mut index = RangeIndex::default();
        for (start, end, name) in [(0, 100, "outer"), (10, 20, "inner"), (50, 60, "other")] {
            index.push(Symbol {
                start,
                end,
                name: name.into(),
            });
        }
        let mut at = |a| {
            index
                .find(a, |s| (s.start, s.end))
                .map(|s| s.name.to_string())
        };
        assert_eq!(at(15).as_deref(), Some("inner"));
        assert_eq!(at(20).as_deref(), Some("inner"), "ends are inclusive");
        assert_eq!(at(30).as_deref(), Some("outer"));
        assert_eq!(at(100).as_deref(), Some("outer"));
        assert_eq!(at(101), None);
    }

    #[test]
    fn a_hostile_pile_of_overlaps_is_searched_a_bounded_distance() {
        let mut index = RangeIndex::default();
        index.push(Symbol {
            start: 0,
            end: u64::MAX,
            name: "everything".into(),
        });
        for start in 1..=10_000u64 {
            index.push(Symbol {
                start,
                end: start,
                name: "tiny".into(),
            });
        }
        // The covering range is beyond the scan bound: not found, rather than a full scan.
        assert!(index.find(20_000, |s| (s.start, s.end)).is_none());
        assert_eq!(&*index.find(5, |s| (s.start, s.end)).unwrap().name, "tiny");
    }

    #[test]
    fn build_ids_come_from_the_symbol_metadata_json() {
        assert_eq!(
            build_id_of(r#"{"type": "ELF","debug_link": "x.debug","build_id": "93AC61"}"#)
                .as_deref(),
            Some("93ac61")
        );
        assert_eq!(build_id_of(""), None);
        assert_eq!(build_id_of(r#"{"build_id": "not hex"}"#), None);
    }
}
