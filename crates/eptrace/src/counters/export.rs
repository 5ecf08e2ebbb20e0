//! `eptrace counters collect`'s files, in the shapes `dotnet-counters collect` writes, so
//! scripts written for it keep working:
//!
//! * CSV: `Timestamp,Provider,Counter Name,Counter Type,Mean/Increment`, one row a value;
//!   the name as `dotnet-counters` shows it, tags appended as `[k=v;k=v]`;
//! * JSON: `{"TargetProcess": .., "StartTime": .., "Events": [{"timestamp", "provider",
//!   "name", "tags", "counterType", "meterTags", "instrumentTags", "value"}, ..]}`.
//!
//! Timestamps are when the target published each value (its trace clock), UTC.
//!
//! Both stay valid however collection ends: every row is flushed whole, and the JSON file's
//! closing `]}` is written after every event and overwritten by the next, so a killed
//! collector leaves a document that parses.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result};
use eventpipe_client::capture::counters::{SessionEnd, Sink, SinkResult};
use eventpipe_counters::{dotnet_timestamp, iso8601, CounterKind, CounterValue};

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// Comma-separated values, as `dotnet-counters collect --format csv`.
    Csv,
    /// JSON, as `dotnet-counters collect --format json`.
    Json,
}

/// Writes values as they come.
pub(crate) struct Writer {
    out: BufWriter<File>,
    format: ExportFormat,
    values: u64,
    problems: Vec<String>,
}

impl Writer {
    pub(crate) fn create(path: &Path, format: ExportFormat, target: &str) -> Result<Writer> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = Writer {
            out: BufWriter::new(file),
            format,
            values: 0,
            problems: Vec::new(),
        };
        match format {
            ExportFormat::Csv => writeln!(
                w.out,
                "Timestamp,Provider,Counter Name,Counter Type,Mean/Increment"
            )?,
            ExportFormat::Json => {
                write!(
                    w.out,
                    "{{ \"TargetProcess\": {}, \"StartTime\": {}, \"Events\": [",
                    serde_json::to_string(target)?,
                    serde_json::to_string(&iso8601(SystemTime::now()))?
                )?;
                w.close_json()?;
            }
        }
        w.out.flush()?;
        Ok(w)
    }

    /// Writes the JSON document's end, then steps back over it so the next event replaces
    /// it.
    fn close_json(&mut self) -> Result<()> {
        self.out.write_all(b"]}")?;
        self.out.flush()?;
        self.out.seek(SeekFrom::Current(-2))?;
        Ok(())
    }

    /// A value's rows: one, or one per percentile of a histogram (`name[Percentile=50]`,
    /// as `dotnet-counters` writes them).
    fn write(&mut self, v: &CounterValue, at: SystemTime) -> Result<()> {
        if v.quantiles.is_empty() {
            return self.write_row(v, &v.tags, v.value, at);
        }
        for &(q, value) in &v.quantiles {
            let mut tags = v.tags.clone();
            if !tags.is_empty() {
                tags.push(',');
            }
            tags.push_str(&format!("Percentile={}", q * 100.0));
            self.write_row(v, &tags, value, at)?;
        }
        Ok(())
    }

    fn write_row(
        &mut self,
        v: &CounterValue,
        tags: &str,
        value: f64,
        at: SystemTime,
    ) -> Result<()> {
        let mut name = v.display();
        if !tags.is_empty() {
            name.push_str(&format!("[{}]", tags.replace(',', ";")));
        }
        let kind = match v.kind {
            CounterKind::Rate => "Rate",
            CounterKind::Metric => "Metric",
            other => other.dotnet_name(),
        };
        match self.format {
            ExportFormat::Csv => {
                // A comma in a name would break the row; dotnet-counters writes them bare.
                let name = name.replace(',', ";");
                writeln!(
                    self.out,
                    "{},{},{},{},{}",
                    dotnet_timestamp(at),
                    v.provider.replace(',', ";"),
                    name,
                    kind,
                    value
                )?;
                self.out.flush()?;
            }
            ExportFormat::Json => {
                let event = serde_json::json!({
                    "timestamp": iso8601(at),
                    "provider": v.provider,
                    "name": name,
                    "tags": tags,
                    "counterType": kind,
                    "meterTags": "",
                    "instrumentTags": "",
                    "value": finite(value),
                });
                if self.values > 0 {
                    self.out.write_all(b",")?;
                }
                serde_json::to_writer(&mut self.out, &event)?;
                self.close_json()?;
            }
        }
        self.values += 1;
        Ok(())
    }

    /// Ends the file; returns the number of values written.
    pub(crate) fn finish(mut self) -> Result<u64> {
        if self.format == ExportFormat::Json {
            // The end is already there; move past it.
            self.out.seek(SeekFrom::End(0))?;
        }
        self.out.flush()?;
        Ok(self.values)
    }
}

impl Sink for Writer {
    fn value(&mut self, value: CounterValue, at: SystemTime) -> SinkResult<()> {
        Ok(self.write(&value, at)?)
    }
    fn problem(&mut self, problem: String) -> SinkResult<()> {
        if !self.problems.contains(&problem) {
            let _ = writeln!(std::io::stderr().lock(), "note: {problem}");
            self.problems.push(problem);
        }
        Ok(())
    }
    fn tick(&mut self) -> SinkResult<bool> {
        Ok(true)
    }
    fn ended(&mut self, why: &SessionEnd) -> SinkResult<()> {
        let _ = writeln!(std::io::stderr().lock(), "{why}");
        Ok(())
    }
}

/// JSON has no NaN or infinity: those are written as null.
fn finite(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        serde_json::Value::Null
    }
}
