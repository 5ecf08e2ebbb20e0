//! Opening the trace a command reads.
//!
//! A regular file is memory-mapped and read through nettrace's zero-copy slice path
//! ([`nettrace::TraceReader::from_slice`]). Standard input (`-`) and anything that cannot be
//! mapped (a FIFO, a `<(process substitution)`, a character device) is read as a stream
//! through [`nettrace::TraceReader::from_read`], which holds one block at a time.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use anyhow::{Context, Result};
use memmap2::Mmap;

/// Which trace to read, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InputSpec {
    /// `-`: standard input.
    Stdin,
    /// A path.
    Path(PathBuf),
}

impl InputSpec {
    /// `-` means standard input; anything else is a path.
    pub(crate) fn from_arg(arg: PathBuf) -> Self {
        if arg.as_os_str() == "-" {
            InputSpec::Stdin
        } else {
            InputSpec::Path(arg)
        }
    }

    /// How messages name this input.
    pub(crate) fn display_name(&self) -> String {
        match self {
            InputSpec::Stdin => "<stdin>".to_owned(),
            InputSpec::Path(p) => p.display().to_string(),
        }
    }
}

/// An opened trace: either all of its bytes, mapped, or a stream.
pub(crate) enum Opened {
    /// A regular file, mapped read-only (an empty file has no mapping).
    Mapped(Option<Mmap>),
    /// Standard input or a file that cannot be mapped.
    Stream(Box<dyn Read>),
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opened::Mapped(m) => write!(f, "Mapped({} bytes)", m.as_ref().map_or(0, |m| m.len())),
            Opened::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl Opened {
    /// The mapped bytes, when the input is mapped.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            Opened::Mapped(Some(m)) => Some(m),
            Opened::Mapped(None) => Some(&[]),
            Opened::Stream(_) => None,
        }
    }
}

/// Opens `spec` for reading.
pub(crate) fn open(spec: &InputSpec) -> Result<Opened> {
    let path = match spec {
        InputSpec::Stdin => return Ok(Opened::Stream(Box::new(io::stdin().lock()))),
        InputSpec::Path(p) => p,
    };
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.is_dir() {
        anyhow::bail!("{} is a directory, not a trace file", path.display());
    }
    if !meta.is_file() {
        return Ok(Opened::Stream(Box::new(file)));
    }
    if meta.len() == 0 {
        return Ok(Opened::Mapped(None));
    }
    // Another process that truncates or rewrites the file while it is mapped could change
    // the bytes under the reader (or fault on truncation); like ripgrep, eptrace accepts
    // that for files it is asked to read. The parser treats every byte as untrusted.
    // SAFETY: the map is read-only and private to this process (see above).
    let map = unsafe { Mmap::map(&file) };
    let map = map.with_context(|| format!("cannot map {}", path.display()))?;
    Ok(Opened::Mapped(Some(map)))
}
