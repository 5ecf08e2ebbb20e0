//! The JIT analysis: methods compiled, by tier, and how long each took to compile, as
//! TraceEvent's JITStats (`TraceManagedProcess.cs`, `LogJitStart` and `MethodComplete`):
//! a `Method/JittingStarted` (id 145) opens a compile on its thread; a `Method/LoadVerbose`
//! (id 143) with the Jitted flag (0x8) closes the latest open one of the same thread
//! (`FindIncompleteJitEventOnThread`: compiles nest, and pair last in, first out), and its
//! time is the one's timestamp minus the other's (`CompileCpuTimeMSec`, wall-clock despite
//! its name). ReadyToRun code used instead of compiling comes from
//! `Method/R2RGetEntryPoint` (id 159), which TraceEvent's JITStats do not count.
//! Keywords: JIT (0x10) for the compiles; `R2RGetEntryPoint` also needs
//! CompilationDiagnostic (0x2000000000).

use std::collections::HashMap;

use serde::Serialize;

use crate::fields::Fields;

pub(crate) mod id {
    pub(crate) const METHOD_LOAD_VERBOSE: u32 = 143;
    pub(crate) const JITTING_STARTED: u32 = 145;
    pub(crate) const R2R_GET_ENTRY_POINT: u32 = 159;
}

/// One compiled method.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JittedMethod {
    /// `Namespace.Name`.
    pub name: String,
    /// The code's tier (`MethodFlags` bits 7-9): `MinOptJitted`, `Optimized`,
    /// `QuickJitted`, `OptimizedTier1`, `ReadyToRun`, ...
    pub tier: &'static str,
    /// Started to loaded, ms.
    pub jit_ms: f64,
    /// IL size, bytes.
    pub il_size: u64,
}

/// Compiles of one tier.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TierRow {
    /// The tier.
    pub tier: &'static str,
    /// Methods compiled at it.
    pub methods: u64,
    /// Their compile time, ms.
    pub jit_ms: f64,
}

/// The JIT section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JitSection {
    /// Methods compiled (a `Method/LoadVerbose` with the Jitted flag).
    pub methods_jitted: u64,
    /// Their compile time added up, ms.
    pub total_jit_ms: f64,
    /// By tier, most compile time first.
    pub tiers: Vec<TierRow>,
    /// The slowest compiles, slowest first (all of them in JSON).
    pub slowest: Vec<JittedMethod>,
    /// ReadyToRun methods whose precompiled code was used.
    pub ready_to_run_methods: u64,
}

#[derive(Debug, Default)]
pub(crate) struct JitAnalyzer {
    /// Compiles under way, by thread, latest last: when, the name, the IL size.
    open: HashMap<u64, Vec<(f64, String, u64)>>,
    done: Vec<JittedMethod>,
    ready_to_run: u64,
    pub(crate) events: u64,
}

impl JitAnalyzer {
    pub(crate) fn observe(&mut self, event_id: u32, at_ms: f64, thread: u64, fields: &Fields<'_>) {
        self.events += 1;
        match event_id {
            id::JITTING_STARTED => {
                let name = qualified(fields);
                let il = fields.u64("MethodILSize").unwrap_or(0);
                self.open.entry(thread).or_default().push((at_ms, name, il));
            }
            id::METHOD_LOAD_VERBOSE => {
                let flags = fields.u64("MethodFlags").unwrap_or(0);
                if flags & JITTED == 0 {
                    return;
                }
                let (start, name, il_size) = self
                    .open
                    .get_mut(&thread)
                    .and_then(Vec::pop)
                    .unwrap_or_else(|| (at_ms, qualified(fields), 0));
                self.done.push(JittedMethod {
                    name,
                    tier: tier_name(flags),
                    jit_ms: at_ms - start,
                    il_size,
                });
            }
            id::R2R_GET_ENTRY_POINT => self.ready_to_run += 1,
            _ => {}
        }
    }

    pub(crate) fn finish(mut self) -> JitSection {
        let mut tiers: Vec<TierRow> = Vec::new();
        for m in &self.done {
            match tiers.iter_mut().find(|t| t.tier == m.tier) {
                Some(t) => {
                    t.methods += 1;
                    t.jit_ms += m.jit_ms;
                }
                None => tiers.push(TierRow {
                    tier: m.tier,
                    methods: 1,
                    jit_ms: m.jit_ms,
                }),
            }
        }
        tiers.sort_by(|a, b| b.jit_ms.total_cmp(&a.jit_ms));
        self.done.sort_by(|a, b| b.jit_ms.total_cmp(&a.jit_ms));
        JitSection {
            methods_jitted: self.done.len() as u64,
            total_jit_ms: self.done.iter().map(|m| m.jit_ms).fold(0.0, |a, b| a + b),
            tiers,
            slowest: self.done,
            ready_to_run_methods: self.ready_to_run,
        }
    }
}

fn qualified(fields: &Fields<'_>) -> String {
    let namespace = fields.text("MethodNamespace").unwrap_or_default();
    let name = fields.text("MethodName").unwrap_or_default();
    if namespace.is_empty() {
        name
    } else {
        format!("{namespace}.{name}")
    }
}

/// `MethodFlags`' Jitted bit.
const JITTED: u64 = 0x8;

/// `MethodFlags` bits 7-9 (the manifest's MethodFlagsMap: "0x80 to 0x200 are used for the
/// optimization tier"), named as TraceEvent's `OptimizationTier`.
fn tier_name(flags: u64) -> &'static str {
    match (flags >> 7) & 0x7 {
        1 => "MinOptJitted",
        2 => "Optimized",
        3 => "QuickJitted",
        4 => "OptimizedTier1",
        5 => "OptimizedTier1OSR",
        6 => "QuickJittedInstrumented",
        7 => "OptimizedTier1Instrumented",
        _ => "Unknown",
    }
}
