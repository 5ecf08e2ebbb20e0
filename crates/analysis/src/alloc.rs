//! The allocation analysis: `GC/AllocationTick` (id 10) by type. The runtime writes one
//! tick each time about 100 KB more have been allocated, naming the type of the object
//! that crossed the line, so a type's ticks times their `AllocationAmount` estimate the
//! bytes allocated as it (PerfView's "GC Heap Alloc" view weighs ticks the same way).
//! Keyword: GC (0x1) at Verbose.

use std::collections::HashMap;

use serde::Serialize;

use crate::fields::Fields;

/// Allocations of one type on one heap.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AllocationRow {
    /// The type, e.g. `System.Byte[]` (empty when the runtime did not name it: .NET Core
    /// before 2.2 writes no type).
    pub type_name: String,
    /// `SOH` (small object heap), `LOH` (large) or `POH` (pinned).
    pub heap: &'static str,
    /// Ticks that named it.
    pub ticks: u64,
    /// Estimated bytes: the ticks' amounts added up.
    pub estimated_bytes: u64,
}

/// The allocations section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AllocationSection {
    /// Ticks read.
    pub ticks: u64,
    /// Estimated bytes allocated in all.
    pub estimated_bytes: u64,
    /// By type and heap, most bytes first.
    pub by_type: Vec<AllocationRow>,
    /// By allocating stack, most MB first (empty until a caller that symbolizes fills it
    /// in).
    pub stacks: Vec<crate::TopStack>,
}

#[derive(Debug, Default)]
pub(crate) struct AllocationAnalyzer {
    by_type: HashMap<(String, &'static str), (u64, u64)>,
    pub(crate) events: u64,
}

impl AllocationAnalyzer {
    pub(crate) fn observe(&mut self, fields: &Fields<'_>) {
        self.events += 1;
        let amount = fields
            .u64("AllocationAmount64")
            .or_else(|| fields.u64("AllocationAmount"))
            .unwrap_or(0);
        let heap = match fields.u64("AllocationKind") {
            Some(1) => "LOH",
            Some(2) => "POH",
            _ => "SOH",
        };
        let row = self
            .by_type
            .entry((fields.text("TypeName").unwrap_or_default(), heap))
            .or_default();
        row.0 += 1;
        row.1 += amount;
    }

    pub(crate) fn finish(self) -> AllocationSection {
        let mut by_type: Vec<AllocationRow> = self
            .by_type
            .into_iter()
            .map(
                |((type_name, heap), (ticks, estimated_bytes))| AllocationRow {
                    type_name,
                    heap,
                    ticks,
                    estimated_bytes,
                },
            )
            .collect();
        by_type.sort_by(|a, b| {
            (b.estimated_bytes, &a.type_name, a.heap).cmp(&(
                a.estimated_bytes,
                &b.type_name,
                b.heap,
            ))
        });
        AllocationSection {
            ticks: self.events,
            estimated_bytes: by_type.iter().map(|r| r.estimated_bytes).sum(),
            by_type,
            stacks: Vec::new(),
        }
    }
}
