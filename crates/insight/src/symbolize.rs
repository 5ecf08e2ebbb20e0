//! From instruction pointers to function names.
//!
//! Two sources of truth, both read from the trace itself so a trace symbolizes after its
//! process is gone:
//!
//! * **Native code** (Rust, C): the `EventPipeRs-Rundown/Module` events list every loaded
//!   ELF object with its address range, load bias and build id. An address inside a module
//!   is looked up in that file on disk (DWARF for function, inlined frames, file and line;
//!   the symbol table when there is no DWARF) with `addr2line`. A missing file, a file whose
//!   build id no longer matches, or a stripped one gets one note per module and falls back
//!   to `module+0xOFFSET` frames.
//! * **.NET code**: method load and rundown events (`Method/LoadVerbose`,
//!   `Method/DCStartVerbose`, `Method/DCStopVerbose`, ...) give each JIT'd or ReadyToRun
//!   method's start address and size; an address inside is that method, named
//!   `Namespace.Name` as TraceEvent names it, with the module from `Module/Load` events.
//!
//! Every address is resolved once and cached; the symbolizer only grows with the number of
//! distinct addresses, never with the number of samples.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use nettrace::{Event, Value};

use crate::profile::{Frame, FrameKind};

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
    /// Loaded native debug info, by module index; `None` when the file cannot be used.
    loaders: HashMap<usize, Option<addr2line::Loader>>,
    /// Resolved frames (innermost first) by (address, is_return_address).
    cache: HashMap<(u64, bool), Vec<Frame>>,
    notes: Vec<String>,
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

fn field<'a>(fields: &'a [(&str, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Learns from one event if it describes code: a module rundown event or a .NET method
    /// or module load/rundown event. Returns whether it did.
    pub fn observe(&mut self, event: &Event<'_>) -> bool {
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

    /// One line per module that could not be symbolized, and why.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The native modules the trace listed.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// How many .NET methods the trace described.
    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    /// The frames at `address`, innermost (inlined) first. `is_return_address` says the
    /// address follows a call (every frame but a stack's leaf), so the lookup uses the
    /// call instruction, not the one after it.
    pub fn resolve(&mut self, address: u64, is_return_address: bool) -> &[Frame] {
        let key = (address, is_return_address);
        if !self.cache.contains_key(&key) {
            let frames = self.resolve_uncached(address, is_return_address);
            self.cache.insert(key, frames);
        }
        &self.cache[&key]
    }

    fn resolve_uncached(&mut self, address: u64, is_return_address: bool) -> Vec<Frame> {
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
        let Some(index) = self
            .modules
            .iter()
            .position(|m| probe >= m.base_address && probe - m.base_address < m.size)
        else {
            return vec![Frame::named("[unknown]", FrameKind::Unknown)];
        };
        let module = self.modules[index].clone();
        let module_name = module.file_name();
        let file_address = probe.wrapping_sub(module.load_bias);
        let fallback = || Frame {
            function: format!("{module_name}+0x{:x}", address - module.base_address),
            module: Some(module_name.clone()),
            file: None,
            line: None,
            kind: FrameKind::ModuleOffset,
        };
        let Some(loader) = self.loader(index) else {
            return vec![fallback()];
        };
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
                    module: Some(module_name.clone()),
                    file: location.and_then(|l| l.file).map(str::to_owned),
                    line: location.and_then(|l| l.line),
                    kind: FrameKind::Native,
                });
            }
        }
        if frames.is_empty() {
            if let Some(symbol) = loader.find_symbol(file_address) {
                let name = addr2line::demangle_auto(symbol.into(), None).into_owned();
                frames.push(Frame {
                    function: name,
                    module: Some(module_name.clone()),
                    file: None,
                    line: None,
                    kind: FrameKind::Native,
                });
            }
        }
        if frames.is_empty() {
            frames.push(fallback());
        }
        frames
    }

    /// The debug info of module `index`, loaded on first use; `None` (with a note) when the
    /// file is missing, unreadable or not the one that was traced.
    fn loader(&mut self, index: usize) -> Option<&addr2line::Loader> {
        if !self.loaders.contains_key(&index) {
            let module = &self.modules[index];
            let loaded = match open_module(module) {
                Ok((loader, note)) => {
                    if let Some(note) = note {
                        self.notes.push(format!("{}: {note}", module.path));
                    }
                    Some(loader)
                }
                Err(why) => {
                    self.notes.push(format!("{}: {why}", module.path));
                    None
                }
            };
            self.loaders.insert(index, loaded);
        }
        self.loaders.get(&index).and_then(Option::as_ref)
    }
}

/// Opens a module's file for symbolization, checking that it is the traced one; with a note
/// when it can name only some of its code.
fn open_module(module: &Module) -> Result<(addr2line::Loader, Option<&'static str>), String> {
    if module.path.starts_with('[') || module.path.starts_with("linux-vdso") {
        return Err("no file on disk (kernel-provided code); shown as module+offset".into());
    }
    let path = Path::new(&module.path);
    let data = std::fs::read(path).map_err(|e| {
        format!("cannot read the binary ({e}); its frames are shown as module+offset")
    })?;
    let contents = contents_of(&data);
    if !module.build_id.is_empty() {
        let on_disk = contents.build_id.clone();
        if on_disk.as_deref() != Some(module.build_id.as_str()) {
            return Err(format!(
                "the file on disk is not the traced binary (build id {} , traced {}); its frames are shown as module+offset",
                on_disk.as_deref().unwrap_or("none"),
                module.build_id
            ));
        }
    }
    drop(data);
    let loader = addr2line::Loader::new(path)
        .map_err(|e| format!("cannot load its symbols ({e}); shown as module+offset"))?;
    let note = match (contents.symbols, contents.debug_info) {
        (_, true) => None,
        (true, false) => Some("no debug info: functions are named, without file and line"),
        (false, false) => Some(
            "stripped (no symbol table, no debug info): only exported functions are named, \
             other frames are shown as module+offset",
        ),
    };
    Ok((loader, note))
}

/// What an ELF file has to offer a symbolizer.
struct Contents {
    build_id: Option<String>,
    /// A full symbol table (`.symtab`), not only the dynamic one.
    symbols: bool,
    /// DWARF (`.debug_info`).
    debug_info: bool,
}

fn contents_of(data: &[u8]) -> Contents {
    use object::{Object, ObjectSection};
    let Ok(file) = object::File::parse(data) else {
        return Contents {
            build_id: None,
            symbols: false,
            debug_info: false,
        };
    };
    let build_id = file
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    Contents {
        build_id,
        symbols: file.symbol_table().is_some(),
        debug_info: file
            .section_by_name(".debug_info")
            .is_some_and(|s| s.size() > 0),
    }
}
