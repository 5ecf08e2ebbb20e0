//! `eptrace ps`: every process with a live diagnostics socket, .NET or Rust.

use std::io::Write;

use anyhow::{Context, Result};
use eventpipe_client::discover;
use eventpipe_ipc::transport;
use serde::Serialize;

/// What `ps` prints.
#[derive(Debug)]
pub(crate) struct Config {
    /// JSON instead of a table.
    pub(crate) json: bool,
}

/// One attachable process.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) runtime: String,
    pub(crate) command_line: String,
}

/// The processes with a live diagnostics socket, by pid; one that cannot be attached to
/// says why in its runtime column.
pub(crate) fn list() -> Result<Vec<Row>> {
    let found = discover::list().with_context(|| {
        format!(
            "looking for diagnostics sockets in {}",
            transport::socket_dir().display()
        )
    })?;
    Ok(found
        .into_iter()
        .map(|listed| match listed.examined {
            Ok(p) => Row {
                pid: p.pid,
                name: p.name,
                runtime: p.runtime.to_string(),
                command_line: p.command_line,
            },
            Err(why) => Row {
                pid: listed.pid,
                name: discover::process_name(listed.pid).unwrap_or_else(|| "?".into()),
                runtime: format!("unknown: {}", eventpipe_client::with_causes(&why)),
                command_line: discover::command_line(listed.pid).unwrap_or_default(),
            },
        })
        .collect())
}

/// Prints the table (or JSON).
pub(crate) fn do_ps(config: &Config) -> Result<()> {
    let rows = list()?;
    if config.json {
        return crate::print_json(&rows);
    }
    let mut out = std::io::stdout().lock();
    if rows.is_empty() {
        writeln!(
            out,
            "No attachable processes (no live dotnet-diagnostic-*-socket in {}).",
            transport::socket_dir().display()
        )?;
        return Ok(());
    }
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let rt_w = rows
        .iter()
        .map(|r| r.runtime.len())
        .max()
        .unwrap_or(7)
        .max(7);
    writeln!(
        out,
        "{:>7}  {:name_w$}  {:rt_w$}  COMMAND",
        "PID", "NAME", "RUNTIME"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>7}  {:name_w$}  {:rt_w$}  {}",
            r.pid, r.name, r.runtime, r.command_line
        )?;
    }
    Ok(())
}
