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

/// Keeps a mapped trace's resident memory bounded: every reader of the map reports where
/// it is (at each block it loads), and the pages every reader has left behind are given
/// back to the kernel, a chunk at a time. A 10 GB trace is read in a few hundred MB of
/// resident memory, not 10 GB.
///
/// Giving pages back (`madvise(MADV_DONTNEED)` on the private, read-only map) does not
/// change what the bytes are: a page touched again is read back from the file, which, as
/// for the map itself, is assumed not to change while it is read.
#[derive(Debug)]
pub(crate) struct PageRelease {
    /// The map's first byte (page-aligned: a map starts on a page).
    base: usize,
    len: usize,
    /// Each reader's position: the offset of the block it loaded last.
    positions: Vec<std::sync::atomic::AtomicU64>,
    /// Bytes from `base` already given back.
    released: std::sync::Mutex<usize>,
}

/// Pages are given back in chunks of this many bytes at least.
const RELEASE_CHUNK: usize = 64 << 20;
/// How far a reader may run ahead of the slowest one before it waits: the pages between
/// them stay resident.
const MAX_LEAD: u64 = 128 << 20;

impl PageRelease {
    /// For `readers` readers of `map` (the bytes of an [`Opened::Mapped`]).
    pub(crate) fn new(map: &[u8], readers: usize) -> std::sync::Arc<PageRelease> {
        std::sync::Arc::new(PageRelease {
            base: map.as_ptr() as usize,
            len: map.len(),
            positions: (0..readers)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            released: std::sync::Mutex::new(0),
        })
    }

    /// Reader `reader` is at `offset`: it waits while it is more than [`MAX_LEAD`] ahead
    /// of the slowest reader, then gives back what every reader has passed.
    fn advance(&self, reader: usize, offset: u64) {
        use std::sync::atomic::Ordering;
        // Relaxed: positions only decide which pages may go and who waits; correctness
        // never depends on them (a page given back too early is read again from the file).
        self.positions[reader].store(offset, Ordering::Relaxed);
        while self
            .positions
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .min()
            .is_some_and(|slowest| offset > slowest.saturating_add(MAX_LEAD))
        {
            // The slowest reader moves on, or ends (its position becomes u64::MAX).
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let behind = self
            .positions
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0) as usize;
        let Ok(mut released) = self.released.try_lock() else {
            return; // another reader is giving pages back right now
        };
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize;
        let upto = (behind.min(self.len) / page) * page;
        if upto < *released + RELEASE_CHUNK {
            return;
        }
        // [base + released, base + upto) lies inside the live, private, read-only map
        // these readers borrow (upto ≤ len, both page-aligned).
        // SAFETY: MADV_DONTNEED only drops its resident pages, read back unchanged later.
        unsafe {
            libc::madvise(
                (self.base + *released) as *mut libc::c_void,
                upto - *released,
                libc::MADV_DONTNEED,
            );
        }
        *released = upto;
    }
}

/// A mapped trace read block by block, telling its [`PageRelease`] where it is.
#[derive(Debug)]
pub(crate) struct PagedInput<'a> {
    inner: nettrace::source::SliceInput<'a>,
    release: std::sync::Arc<PageRelease>,
    reader: usize,
}

impl<'a> PagedInput<'a> {
    /// Reader number `reader` of `release`, over `map`.
    pub(crate) fn new(
        map: &'a [u8],
        release: &std::sync::Arc<PageRelease>,
        reader: usize,
    ) -> PagedInput<'a> {
        PagedInput {
            inner: nettrace::source::SliceInput::new(map),
            release: std::sync::Arc::clone(release),
            reader,
        }
    }
}

impl Drop for PagedInput<'_> {
    fn drop(&mut self) {
        // Done, however it ended: the others no longer wait for this reader.
        self.release.positions[self.reader].store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
    }
}

impl nettrace::source::Input for PagedInput<'_> {
    #[inline]
    fn offset(&self) -> u64 {
        self.inner.offset()
    }
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> nettrace::Result<()> {
        self.inner.read_exact(buf, what)
    }
    fn load_block(&mut self, len: usize, what: &'static str) -> nettrace::Result<()> {
        // The blocks before this one are done with.
        self.release.advance(self.reader, self.inner.offset());
        self.inner.load_block(len, what)
    }
    #[inline]
    fn block(&self) -> &[u8] {
        self.inner.block()
    }
    fn skip(&mut self, len: usize, what: &'static str) -> nettrace::Result<()> {
        self.inner.skip(len, what)
    }
}

/// A reader of a mapped trace that gives back the pages it has passed (one reader).
pub(crate) fn paged_reader(map: &[u8]) -> nettrace::Result<nettrace::TraceReader<PagedInput<'_>>> {
    nettrace::TraceReader::new(PagedInput::new(map, &PageRelease::new(map, 1), 0))
}
