//! The exception analysis: `Exception/Start` (`ExceptionThrown_V1`, id 80) by type and
//! message; catch and finally blocks run from `ExceptionCatch/Start` (250) and
//! `ExceptionFinally/Start` (252). Keyword: Exception (0x8000).

use std::collections::HashMap;

use serde::Serialize;

use crate::fields::Fields;

/// The runtime's event ids of the `Exception/*` events this section reads (its manifest).
pub mod id {
    /// `Exception/Start (ExceptionThrown_V1)`.
    pub const THROWN: u32 = 80;
    /// `ExceptionCatch/Start`.
    pub const CATCH_START: u32 = 250;
    /// `ExceptionFinally/Start`.
    pub const FINALLY_START: u32 = 252;
}

/// Exceptions of one type and message.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ExceptionRow {
    /// The exception's type, e.g. `System.InvalidOperationException`.
    pub exception_type: String,
    /// Its message.
    pub message: String,
    /// How many were thrown.
    pub count: u64,
}

/// The exceptions section.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ExceptionSection {
    /// Exceptions thrown.
    pub thrown: u64,
    /// Thrown per second of the trace.
    pub per_second: f64,
    /// By type and message, most thrown first.
    pub by_type: Vec<ExceptionRow>,
    /// Catch blocks entered, where the trace has the events.
    pub catches: u64,
    /// Finally blocks run, where the trace has the events.
    pub finallies: u64,
    /// By throw stack, most thrown first (empty until a caller that symbolizes fills it
    /// in).
    pub stacks: Vec<crate::TopStack>,
}

#[derive(Debug, Default)]
pub(crate) struct ExceptionAnalyzer {
    by_type: HashMap<(String, String), u64>,
    thrown: u64,
    catches: u64,
    finallies: u64,
    pub(crate) events: u64,
}

impl ExceptionAnalyzer {
    pub(crate) fn observe(&mut self, event_id: u32, fields: &Fields<'_>) {
        self.events += 1;
        match event_id {
            id::THROWN => {
                self.thrown += 1;
                let key = (
                    fields.text("ExceptionType").unwrap_or_default(),
                    fields.text("ExceptionMessage").unwrap_or_default(),
                );
                *self.by_type.entry(key).or_default() += 1;
            }
            id::CATCH_START => self.catches += 1,
            id::FINALLY_START => self.finallies += 1,
            _ => {}
        }
    }

    pub(crate) fn finish(self, duration_ms: f64) -> ExceptionSection {
        let mut by_type: Vec<ExceptionRow> = self
            .by_type
            .into_iter()
            .map(|((exception_type, message), count)| ExceptionRow {
                exception_type,
                message,
                count,
            })
            .collect();
        by_type.sort_by(|a, b| {
            (b.count, &a.exception_type, &a.message).cmp(&(a.count, &b.exception_type, &b.message))
        });
        ExceptionSection {
            thrown: self.thrown,
            per_second: if duration_ms > 0.0 {
                self.thrown as f64 * 1000.0 / duration_ms
            } else {
                0.0
            },
            by_type,
            stacks: Vec::new(),
            catches: self.catches,
            finallies: self.finallies,
        }
    }
}
