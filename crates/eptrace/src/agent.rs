//! `eptrace agent`: runs [`eventpipe_agent`] until SIGTERM or SIGINT; `eptrace agent key`
//! makes an API key and prints the line its settings need.

use std::io::Write;

use anyhow::Result;

pub(crate) use eventpipe_agent::Options;

/// `eptrace agent`.
pub(crate) fn do_agent(options: &Options) -> Result<()> {
    Ok(eventpipe_agent::run(options)?)
}

/// `eptrace agent key`: a new API key, and the line the config needs.
pub(crate) fn do_key() -> Result<()> {
    let key = eventpipe_agent::new_api_key()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "API key (give it to clients as `Authorization: Bearer KEY`):"
    )?;
    writeln!(out, "  {}", key.key)?;
    writeln!(
        out,
        "For the agent's config file (only the hash is stored):"
    )?;
    writeln!(out, "  api_keys = [\"{}\"]", key.hash)?;
    Ok(())
}
