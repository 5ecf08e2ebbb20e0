//! # eventpipe-symbols
//!
//! From instruction pointers to function names.
//!
//! The data flow:
//!
//! ```text
//! nettrace::Event ─▶ Symbolizer::observe (module rundown, Universal.System mappings and
//!                    symbols, .NET method and module events)
//! address, pid    ─▶ Symbolizer::resolve / resolve_in ─▶ [Frame] innermost first
//!                    (native binaries opened through a BinaryCache: DWARF, debug files,
//!                    symbol tables, by addr2line and object)
//! ```
//!
//! [`Frame`] and [`FrameKind`] are the resolved-frame model every view reads: a profile
//! (`eventpipe-insight`) interns them, the live heap (`eventpipe-heap`) names allocation
//! sites from them. [`fields`] is the one lookup of a decoded payload's fields by name the
//! decoders of this workspace share.
//!
//!
//! Three sources of truth, all read from the trace itself so a trace symbolizes after its
//! process is gone:
//!
//! * **Native code** (Rust, C) of this project's traces: the `EventPipeRs-Rundown/Module`
//!   events list every loaded ELF object with its address range, load bias and build id.
//! * **Native code and the kernel** in nettrace V6 traces of one-collect and
//!   `dotnet-trace collect-linux`: the `Universal.System` provider's `ProcessMapping`,
//!   `ProcessMappingMetadata` and `ProcessSymbol` events describe each process's mappings
//!   and name the code its samples hit, kernel included (`universal.rs`). An address is
//!   looked up among its own process's mappings (a stack's pid), named from the trace's
//!   symbols for that mapping, else from the mapped file on disk (its file offset turned
//!   into the file's address through its segments).
//! * **.NET code**: method load and rundown events (`Method/LoadVerbose`,
//!   `Method/DCStartVerbose`, `Method/DCStopVerbose`, ...) give each JIT'd or ReadyToRun
//!   method's start address and size; an address inside is that method, named
//!   `Namespace.Name` as TraceEvent names it, with the module from `Module/Load` events.
//!
//! A native binary on disk is used only when its build id is the traced one (when the
//! trace states it). Its names come from DWARF (function, inlined frames, file and line),
//! from its separate debug file under `/usr/lib/debug` or beside it, else from its symbol
//! table or, stripped, its dynamic symbols (`elf.rs`). What cannot be named stays visible:
//! `module+0xOFFSET` in a known module or mapping, `0xADDRESS` outside every mapping of a
//! process, `[unknown]` outside every module of a trace without mappings; the notes say
//! which modules could not be read, why, and for a stripped system library which package
//! would give names.
//!
//! Every address is resolved once and cached; the symbolizer only grows with the number of
//! distinct addresses, never with the number of samples.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use nettrace::{Event, Value};

use crate::fields::field;

mod elf;
pub mod fields;
mod frame;
mod universal;

pub use frame::{Frame, FrameKind};

/// A fast hasher for the address cache: the keys come from one trace, not from an
/// adversary who could aim collisions at it.
type FastHash = foldhash::fast::RandomState;

/// The provider of this project's module and thread rundown events.
pub const RUNDOWN_PROVIDER: &str = "EventPipeRs-Rundown";

/// The (OS thread id, name) an `EventPipeRs-Rundown/Thread` event states; `None` for any
/// other event.
pub fn rundown_thread(event: &Event<'_>) -> Option<(u64, String)> {
    let md = event.metadata;
    if md.provider != RUNDOWN_PROVIDER || md.event_name != "Thread" {
        return None;
    }
    let fields = event.decode_payload().ok()?;
    let id = field(&fields, "ThreadId").and_then(Value::as_u64)?;
    let name = field(&fields, "Name").and_then(Value::as_str)?;
    Some((id, name.to_owned()))
}

/// One loaded native module, as the rundown described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Path of the file it was loaded from.
    pub path: String,
    /// Lowest mapped address.
    pub base_address: u64,
    /// Bytes mapped from `base_address`.
    pub size: u64,
    /// Added to the file's virtual addresses at load time.
    pub load_bias: u64,
    /// GNU build id (lowercase hex), empty when unknown.
    pub build_id: String,
}

impl Module {
    fn file_name(&self) -> String {
        Path::new(&self.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.clone())
    }
}

/// A .NET method's code range.
#[derive(Debug, Clone)]
struct Method {
    end: u64,
    name: String,
    module_id: Option<u64>,
}

/// Collects what a trace says about code (modules, methods, thread names) and resolves
/// addresses against it.
#[derive(Default)]
pub struct Symbolizer {
    modules: Vec<Module>,
    /// .NET methods by start address.
    methods: BTreeMap<u64, Method>,
    /// .NET module ids to file names.
    managed_modules: HashMap<u64, String>,
    /// Each process's mappings and the trace's symbols in them (`Universal.System`).
    spaces: universal::AddressSpaces,
    /// Opened native binaries by (path, traced build id); `None` when the file cannot be
    /// used.
    binaries: BinaryCache,
    /// Where separate debug files are looked for; `None`: the system's.
    debug_root: Option<PathBuf>,
    /// Resolved frames (innermost first) by (process when it has mappings, address,
    /// is_return_address).
    cache: HashMap<(Option<u64>, u64, bool), Resolved, FastHash>,
    /// What every address in no known code resolves to.
    unknown: UnknownFrame,
    /// One line per binary that could not be (fully) used.
    notes: Vec<String>,
    unnamed: UnnamedAddresses,
}

/// An address in the cache. An address in no known code (every address of a trace
/// without module rundown) shares [`UnknownFrame`] instead of holding a copy: a trace
/// with many distinct addresses would allocate, and free, two objects for each.
enum Resolved {
    Unknown,
    Frames(Vec<Frame>),
}

/// The frame of code that is in no known module: `[unknown]`.
struct UnknownFrame([Frame; 1]);

/// The address a sampler puts at the root end of a stack it could not finish
/// (`eventpipe_profiler::cpu::TRUNCATED_FRAME`): no code lives there (it is not a canonical
/// x86_64 address). It resolves to the frame [`TRUNCATED_FRAME_NAME`].
pub const TRUNCATED_ADDRESS: u64 = 0xFFFF_FFFF_FFFF_FFFE;

/// The frame that ends a stack cut short.
pub const TRUNCATED_FRAME_NAME: &str = "[truncated]";

fn truncated_frame() -> &'static [Frame] {
    static FRAME: std::sync::OnceLock<[Frame; 1]> = std::sync::OnceLock::new();
    FRAME.get_or_init(|| [Frame::named(TRUNCATED_FRAME_NAME, FrameKind::ThreadState)])
}

impl Default for UnknownFrame {
    fn default() -> Self {
        UnknownFrame([Frame::named("[unknown]", FrameKind::Unknown)])
    }
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("modules", &self.modules.len())
            .field("methods", &self.methods.len())
            .field("notes", &self.notes)
            .finish_non_exhaustive()
    }
}

/// Native binaries opened for symbolization (their symbol tables and DWARF parsed on
/// demand), by path and traced build id, the least recently used given up beyond
/// [`BinaryCache::capacity`]. Passed from one [`Symbolizer`] to the next so that traces of
/// the same programs do not open them again.
pub struct BinaryCache {
    /// (path, traced build id) → the binary (`None`: it cannot be used), last use.
    entries: HashMap<(String, Option<String>), (Option<elf::Binary>, u64)>,
    tick: u64,
    capacity: usize,
    debug_files: bool,
}

impl Default for BinaryCache {
    fn default() -> Self {
        BinaryCache::with_capacity(64)
    }
}

impl std::fmt::Debug for BinaryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinaryCache")
            .field("binaries", &self.entries.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl BinaryCache {
    /// A cache of at most `capacity` binaries (at least 1).
    pub fn with_capacity(capacity: usize) -> BinaryCache {
        BinaryCache {
            entries: HashMap::new(),
            tick: 0,
            capacity: capacity.max(1),
            debug_files: true,
        }
    }

    /// Without separate debug files (`/usr/lib/debug`): a stripped library is named from
    /// its own symbol tables only. Debug files are mostly compressed, and reading one
    /// decompresses its sections into memory (tens of MB for libc), which a process that
    /// keeps binaries open for long may not want to hold.
    pub fn without_debug_files(mut self) -> BinaryCache {
        self.debug_files = false;
        self
    }

    /// How many binaries it holds (usable or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most binaries it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn insert(&mut self, key: (String, Option<String>), binary: Option<elf::Binary>, now: u64) {
        while self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
        self.entries.insert(key, (binary, now));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Learns from one event if it describes code: a module rundown event, a
    /// `Universal.System` mapping or symbol event, or a .NET method or module load/rundown
    /// event. Returns whether it did.
    pub fn observe(&mut self, event: &Event<'_>) -> bool {
        if self.spaces.observe(event) {
            self.cache.clear();
            return true;
        }
        let md = event.metadata;
        let is_module_rundown = md.provider == RUNDOWN_PROVIDER && md.event_name == "Module";
        let might_be_managed = md
            .fields
            .iter()
            .any(|f| matches!(f.name.as_str(), "MethodStartAddress" | "ModuleILPath"));
        if !is_module_rundown && !might_be_managed {
            return false;
        }
        let Ok(fields) = event.decode_payload() else {
            return false;
        };
        if is_module_rundown {
            let text = |n| field(&fields, n).and_then(Value::as_str).map(str::to_owned);
            let num = |n| field(&fields, n).and_then(Value::as_u64);
            if let (Some(path), Some(base_address), Some(size)) =
                (text("Path"), num("BaseAddress"), num("Size"))
            {
                self.add_module(Module {
                    path,
                    base_address,
                    size,
                    load_bias: num("LoadBias").unwrap_or(base_address),
                    build_id: text("BuildId").unwrap_or_default(),
                });
                return true;
            }
            return false;
        }
        let num = |n| field(&fields, n).and_then(Value::as_u64);
        if let (Some(start), Some(size)) = (num("MethodStartAddress"), num("MethodSize")) {
            let namespace = field(&fields, "MethodNamespace").and_then(Value::as_str);
            let name = field(&fields, "MethodName").and_then(Value::as_str);
            let Some(name) = name else { return false };
            let full = match namespace {
                Some(ns) if !ns.is_empty() => format!("{ns}.{name}"),
                _ => name.to_owned(),
            };
            self.methods.insert(
                start,
                Method {
                    end: start.saturating_add(size.max(1)),
                    name: full,
                    module_id: num("ModuleID"),
                },
            );
            self.cache.clear();
            return true;
        }
        if let (Some(id), Some(path)) = (
            num("ModuleID"),
            field(&fields, "ModuleILPath").and_then(Value::as_str),
        ) {
            let file = path.rsplit(['/', '\\']).next().unwrap_or(path).to_owned();
            self.managed_modules.insert(id, file);
            return true;
        }
        false
    }

    /// Adds a native module (also for tests and for callers with their own module list).
    pub fn add_module(&mut self, module: Module) {
        if !self.modules.contains(&module) {
            self.modules.push(module);
            self.cache.clear();
        }
    }

    /// One line per module that could not be symbolized, and why; then, per kind of
    /// address that could not be named, how many distinct ones and why.
    pub fn notes(&self) -> Vec<String> {
        self.notes
            .iter()
            .cloned()
            .chain(self.unnamed.notes())
            .collect()
    }

    /// The native modules the trace listed.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// The program's own binary, by the file name frames give as their module: the first
    /// module a module rundown lists (the dynamic linker reports the program first).
    pub fn main_module(&self) -> Option<String> {
        self.modules.first().map(Module::file_name)
    }

    /// The GNU build id of each native module the trace gave one for (rundown modules and
    /// `Universal.System` mappings), by the module's file name as frames name it.
    pub fn build_ids(&self) -> std::collections::BTreeMap<String, String> {
        let rundown = self
            .modules
            .iter()
            .filter(|m| !m.build_id.is_empty())
            .map(|m| (m.file_name(), m.build_id.clone()));
        let mapped = self
            .spaces
            .build_ids()
            .map(|(name, id)| (name.to_owned(), id.to_owned()));
        rundown.chain(mapped).collect()
    }

    /// How many .NET methods the trace described.
    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    /// Uses `cache`'s opened binaries (and adds to it): a caller that symbolizes trace
    /// after trace of the same programs opens and parses each binary once.
    pub fn with_binaries(mut self, cache: BinaryCache) -> Symbolizer {
        self.binaries = cache;
        self
    }

    /// The opened binaries, for the next symbolizer ([`Symbolizer::with_binaries`]).
    pub fn take_binaries(&mut self) -> BinaryCache {
        std::mem::take(&mut self.binaries)
    }

    /// Where separate debug files are looked for (`/usr/lib/debug` unless set): the
    /// `.build-id/` tree and the mirrored directories of `.gnu_debuglink` names.
    pub fn set_debug_root(&mut self, root: impl Into<PathBuf>) {
        self.debug_root = Some(root.into());
        self.binaries.clear();
        self.cache.clear();
    }

    /// The frames at `address`, innermost (inlined) first. `is_return_address` says the
    /// address follows a call (every frame but a stack's leaf), so the lookup uses the
    /// call instruction, not the one after it. Addresses are looked up in no particular
    /// process: use [`Symbolizer::resolve_in`] for traces that describe each process's
    /// mappings.
    pub fn resolve(&mut self, address: u64, is_return_address: bool) -> &[Frame] {
        self.resolve_in(None, address, is_return_address)
    }

    /// The frames at `address` in process `pid`, innermost (inlined) first, as
    /// [`Symbolizer::resolve`]; a trace's `Universal.System` mappings are per process.
    pub fn resolve_in(
        &mut self,
        pid: Option<u64>,
        address: u64,
        is_return_address: bool,
    ) -> &[Frame] {
        if address == TRUNCATED_ADDRESS {
            return truncated_frame();
        }
        if self.in_no_known_code(address, is_return_address) {
            // Answered without the cache: finding that out costs less than a look-up in a
            // table of every distinct address, which a trace without module rundown (every
            // address unknown) would fill with millions of entries.
            return &self.unknown.0;
        }
        // Only traces with per-process mappings need the pid in the key.
        let pid = pid.filter(|&p| self.spaces.knows_process(p));
        let key = (pid, address, is_return_address);
        if !self.cache.contains_key(&key) {
            let frames = self.resolve_uncached(pid, address, is_return_address);
            let resolved = if frames.as_slice() == self.unknown.0.as_slice() {
                Resolved::Unknown
            } else {
                Resolved::Frames(frames)
            };
            self.cache.insert(key, resolved);
        }
        match &self.cache[&key] {
            Resolved::Unknown => &self.unknown.0,
            Resolved::Frames(frames) => frames,
        }
    }

    /// Whether `address` lies in no code the symbolizer knows of, so that
    /// [`Symbolizer::resolve_uncached`] would call it `[unknown]` and note nothing: no .NET
    /// method, no process mappings, no module.
    fn in_no_known_code(&self, address: u64, is_return_address: bool) -> bool {
        let probe = if is_return_address {
            address.saturating_sub(1)
        } else {
            address
        };
        self.spaces.is_empty()
            && self
                .methods
                .range(..=probe)
                .next_back()
                .is_none_or(|(_, method)| probe >= method.end)
            && !self
                .modules
                .iter()
                .any(|m| probe >= m.base_address && probe - m.base_address < m.size)
    }

    fn resolve_uncached(
        &mut self,
        pid: Option<u64>,
        address: u64,
        is_return_address: bool,
    ) -> Vec<Frame> {
        let probe = if is_return_address {
            address.saturating_sub(1)
        } else {
            address
        };
        if let Some((_, method)) = self.methods.range(..=probe).next_back() {
            if probe < method.end {
                return vec![Frame {
                    function: method.name.clone(),
                    module: method
                        .module_id
                        .and_then(|id| self.managed_modules.get(&id).cloned()),
                    file: None,
                    line: None,
                    kind: FrameKind::Managed,
                }];
            }
        }
        if !self.spaces.is_empty() {
            if let Some(mapping) = self.spaces.mapping(pid, probe).cloned() {
                return self.resolve_in_mapping(&mapping, address, probe);
            }
            if pid.is_some() && address == 0 {
                self.unnamed.record(
                    "address 0",
                    "stand for stacks recorded without frames (one-collect writes such a \
                     stack as the one address 0); shown as 0x0",
                );
                return vec![Frame::named("0x0", FrameKind::Unknown)];
            }
            if pid.is_some() || address >= universal::KERNEL_START {
                self.unnamed.record(
                    "unmapped code",
                    "lie outside every mapping the trace lists for their process; shown as \
                     0xADDRESS",
                );
                return vec![Frame::named(format!("0x{address:x}"), FrameKind::Unknown)];
            }
        }
        let Some(index) = self
            .modules
            .iter()
            .position(|m| probe >= m.base_address && probe - m.base_address < m.size)
        else {
            return vec![Frame::named("[unknown]", FrameKind::Unknown)];
        };
        let module = self.modules[index].clone();
        let module_name = module.file_name();
        let fallback = Frame {
            function: format!("{module_name}+0x{:x}", address - module.base_address),
            module: Some(module_name.clone()),
            file: None,
            line: None,
            kind: FrameKind::ModuleOffset,
        };
        let build_id = Some(module.build_id.as_str()).filter(|id| !id.is_empty());
        let Some(binary) = self.binary(&module.path, build_id) else {
            return vec![fallback];
        };
        let frames = frames_from(binary, probe.wrapping_sub(module.load_bias), &module_name);
        if frames.is_empty() {
            vec![fallback]
        } else {
            frames
        }
    }

    /// Names an address in a `Universal.System` mapping: the trace's own symbols first,
    /// then the mapped binary on disk, else `module+0xFILE_OFFSET` (kernel: `0xADDRESS`).
    fn resolve_in_mapping(
        &mut self,
        mapping: &universal::Mapping,
        address: u64,
        probe: u64,
    ) -> Vec<Frame> {
        let module_name = mapping.module_name().to_owned();
        let named = |function: String| Frame {
            function,
            module: Some(module_name.clone()),
            file: None,
            line: None,
            kind: FrameKind::Native,
        };
        if let Some(name) = self.spaces.symbol(mapping.id, probe) {
            return vec![named(name.to_owned())];
        }
        if mapping.is_kernel() {
            self.unnamed.record(
                &mapping.file_name,
                "are kernel addresses the trace has no symbol for; shown as 0xADDRESS",
            );
            return vec![Frame {
                function: format!("0x{address:x}"),
                module: Some(module_name),
                file: None,
                line: None,
                kind: FrameKind::Unknown,
            }];
        }
        let fallback = Frame {
            function: format!("{module_name}+0x{:x}", mapping.file_offset_of(address)),
            module: Some(module_name.clone()),
            file: None,
            line: None,
            kind: FrameKind::ModuleOffset,
        };
        let in_trace = if self.spaces.has_symbols(mapping.id) {
            "are not covered by the trace's symbols for it"
        } else {
            "have no symbol in the trace"
        };
        let file_offset = mapping.file_offset_of(probe);
        let frames = match self.binary(&mapping.file_name, mapping.build_id.as_deref()) {
            Some(binary) => match binary.address_of_file_offset(file_offset) {
                Some(file_address) => frames_from(binary, file_address, &module_name),
                None => Vec::new(),
            },
            None => Vec::new(),
        };
        if frames.is_empty() {
            self.unnamed.record(
                &mapping.file_name,
                format!(
                    "{in_trace} and the file on disk cannot name them (see its note); shown as \
                     module+offset"
                ),
            );
            return vec![fallback];
        }
        frames
    }

    /// The binary at `path`, opened on first use; `None` (with a note) when the file is
    /// missing, unreadable or not the one that was traced.
    fn binary(&mut self, path: &str, build_id: Option<&str>) -> Option<&elf::Binary> {
        let key = (path.to_owned(), build_id.map(str::to_owned));
        self.binaries.tick += 1;
        let now = self.binaries.tick;
        if !self.binaries.entries.contains_key(&key) {
            let root = self
                .debug_root
                .clone()
                .unwrap_or_else(|| PathBuf::from(elf::DEFAULT_DEBUG_ROOT));
            let debug_files = self.binaries.debug_files;
            let opened = match elf::open_binary(path, build_id, &root, debug_files) {
                Ok((binary, note)) => {
                    if let Some(note) = note {
                        self.notes.push(format!("{path}: {note}"));
                    }
                    Some(binary)
                }
                Err(why) => {
                    self.notes.push(format!("{path}: {why}"));
                    None
                }
            };
            self.binaries.insert(key.clone(), opened, now);
        }
        let entry = self.binaries.entries.get_mut(&key)?;
        entry.1 = now;
        entry.0.as_ref()
    }
}

/// The frames debug info or the symbol table give for `file_address`, innermost first;
/// empty when neither names it.
fn frames_from(binary: &elf::Binary, file_address: u64, module_name: &str) -> Vec<Frame> {
    let loader = &binary.loader;
    let mut frames = Vec::new();
    if let Ok(mut iter) = loader.find_frames(file_address) {
        while let Ok(Some(frame)) = iter.next() {
            let Some(function) = frame
                .function
                .as_ref()
                .and_then(|f| f.demangle().ok())
                .map(|name| name.into_owned())
            else {
                continue;
            };
            let location = frame.location.as_ref();
            frames.push(Frame {
                function,
                module: Some(module_name.to_owned()),
                file: location.and_then(|l| l.file).map(str::to_owned),
                line: location.and_then(|l| l.line),
                kind: FrameKind::Native,
            });
        }
    }
    if frames.is_empty() {
        if let Some(symbol) = loader.find_symbol(file_address) {
            frames.push(Frame {
                function: addr2line::demangle_auto(symbol.into(), None).into_owned(),
                module: Some(module_name.to_owned()),
                file: None,
                line: None,
                kind: FrameKind::Native,
            });
        }
    }
    frames
}

/// Distinct addresses that could not be named, counted by what they are and why.
#[derive(Debug, Default)]
struct UnnamedAddresses {
    by_reason: BTreeMap<(String, String), u64>,
}

impl UnnamedAddresses {
    /// Counts one address of `what` (a module, or a kind of code) that `why` (a predicate
    /// of "N distinct addresses") left unnamed.
    fn record(&mut self, what: &str, why: impl Into<String>) {
        *self
            .by_reason
            .entry((what.to_owned(), why.into()))
            .or_insert(0) += 1;
    }

    fn notes(&self) -> impl Iterator<Item = String> + '_ {
        self.by_reason
            .iter()
            .map(|((what, why), n)| format!("{what}: {n} distinct addresses {why}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short cut for code nobody knows must agree with the full resolution at every
    /// edge: a module's and a method's first and last bytes, and return addresses (looked
    /// up one byte lower) just past them.
    #[test]
    fn the_short_cut_for_unknown_code_agrees_with_resolving() {
        let mut s = Symbolizer::new();
        s.add_module(Module {
            path: "/nonexistent/libgone.so".into(),
            base_address: 0x1000,
            size: 0x1000,
            load_bias: 0x1000,
            build_id: String::new(),
        });
        s.methods.insert(
            0x8000,
            Method {
                end: 0x8100,
                name: "Program.Main".into(),
                module_id: None,
            },
        );
        let edges = [0u64, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001];
        let addresses = edges
            .iter()
            .flat_map(|&a| [a, a + 0x7000])
            .chain([u64::MAX]);
        let mut unknown = 0;
        for address in addresses {
            for is_return_address in [false, true] {
                let short_cut = s.in_no_known_code(address, is_return_address);
                let resolved = s.resolve_uncached(None, address, is_return_address);
                let is_unknown = resolved.as_slice() == s.unknown.0.as_slice();
                assert_eq!(
                    short_cut, is_unknown,
                    "{address:#x} (return address: {is_return_address}): {resolved:?}"
                );
                unknown += usize::from(is_unknown);
                assert_eq!(s.resolve(address, is_return_address), resolved.as_slice());
            }
        }
        assert!(unknown > 0 && unknown < 34, "{unknown} of 34 unknown");
    }
}
