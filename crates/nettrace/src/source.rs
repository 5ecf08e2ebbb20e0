//! Block framing: turns a byte stream into a sequence of typed blocks.
//!
//! V4/V5 streams are FastSerialization objects (`BeginPrivateObject`, a type object naming
//! the block, a 4-byte-aligned sized payload, `EndObject`); V6 streams are 4-byte block
//! headers (24-bit size, 8-bit kind). Both end up here as [`BlockKind`] plus the payload
//! bytes, so the rest of the reader never sees the framing.
//!
//! Two inputs implement [`Input`]: [`SliceInput`] borrows a whole trace in memory (a file's
//! bytes or an mmap) and never copies a block; [`ReadInput`] pulls from any `Read` (a file,
//! a socket, a pipe) and holds exactly one block at a time. A block's declared size is never
//! trusted for allocation: `ReadInput` grows its buffer only as bytes actually arrive.

use std::io::{BufReader, Read};

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::model::{FormatVersion, SystemTime, TraceInfo};

const MAGIC: &[u8; 8] = b"Nettrace";
const FAST_SERIALIZATION: &[u8; 20] = b"!FastSerialization.1";
const TAG_NULL_REFERENCE: u8 = 1;
const TAG_BEGIN_PRIVATE_OBJECT: u8 = 5;
const TAG_END_OBJECT: u8 = 6;
/// Longest FastSerialization type name accepted; real ones are at most 13 bytes.
const MAX_TYPE_NAME: usize = 256;

/// The kind of a block, common to all format versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// Events.
    Event,
    /// Metadata rows.
    Metadata,
    /// A sequence point.
    SequencePoint,
    /// Interned stacks.
    Stack,
    /// V6 thread rows.
    Thread,
    /// V6 thread removals.
    RemoveThread,
    /// V6 label lists.
    LabelList,
    /// A block this reader does not know; skipped.
    Unknown,
}

/// Where the current block's payload lies in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// The block's kind.
    pub kind: BlockKind,
    /// Absolute stream offset of the first payload byte.
    pub offset: u64,
    /// Payload length in bytes.
    pub len: usize,
}

/// A source of trace bytes.
pub trait Input {
    /// Absolute offset of the next unread byte.
    fn offset(&self) -> u64;
    /// Reads exactly `buf.len()` bytes.
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()>;
    /// Makes the next `len` bytes the current block; they are then [`Input::block`].
    fn load_block(&mut self, len: usize, what: &'static str) -> Result<()>;
    /// The bytes of the current block.
    fn block(&self) -> &[u8];
    /// Skips `len` bytes.
    fn skip(&mut self, len: usize, what: &'static str) -> Result<()> {
        self.load_block(len, what)
    }
}

/// Zero-copy input over a complete trace in memory.
#[derive(Debug)]
pub struct SliceInput<'a> {
    data: &'a [u8],
    pos: usize,
    /// The current block, kept as a slice: the reader asks for it on every event.
    block: &'a [u8],
}

impl<'a> SliceInput<'a> {
    /// Reads from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        SliceInput {
            data,
            pos: 0,
            block: &[],
        }
    }

    /// The bytes of the current block, with the input's lifetime.
    #[inline]
    pub fn block_slice(&self) -> &'a [u8] {
        self.block
    }
}

impl Input for SliceInput<'_> {
    #[inline]
    fn offset(&self) -> u64 {
        self.pos as u64
    }
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        let end = self
            .pos
            .checked_add(buf.len())
            .filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(Error::eof(self.pos as u64, what));
        };
        buf.copy_from_slice(&self.data[self.pos..end]);
        self.pos = end;
        Ok(())
    }
    fn load_block(&mut self, len: usize, what: &'static str) -> Result<()> {
        let end = self.pos.checked_add(len).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(Error::eof(self.pos as u64, what));
        };
        self.block = &self.data[self.pos..end];
        self.pos = end;
        Ok(())
    }
    #[inline]
    fn block(&self) -> &[u8] {
        self.block_slice()
    }
}

/// Streaming input over any `Read`; holds one block in memory.
#[derive(Debug)]
pub struct ReadInput<R: Read> {
    inner: BufReader<R>,
    pos: u64,
    buf: Vec<u8>,
}

impl<R: Read> ReadInput<R> {
    /// Reads from `inner`, buffered.
    pub fn new(inner: R) -> Self {
        ReadInput {
            inner: BufReader::with_capacity(64 * 1024, inner),
            pos: 0,
            buf: Vec::new(),
        }
    }

    fn io_error(&self, e: std::io::Error, what: &'static str) -> Error {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::eof(self.pos, what)
        } else {
            Error::io(self.pos, e)
        }
    }
}

impl<R: Read> Input for ReadInput<R> {
    #[inline]
    fn offset(&self) -> u64 {
        self.pos
    }
    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        self.inner
            .read_exact(buf)
            .map_err(|e| self.io_error(e, what))?;
        self.pos += buf.len() as u64;
        Ok(())
    }
    fn load_block(&mut self, len: usize, what: &'static str) -> Result<()> {
        self.buf.clear();
        // `take` + `read_to_end` grows the buffer as data arrives, so a hostile size field
        // costs at most what the peer actually sends.
        let got = (&mut self.inner)
            .take(len as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| self.io_error(e, what))?;
        if got != len {
            return Err(Error::eof(self.pos + got as u64, what));
        }
        self.pos += len as u64;
        // Keep memory bounded by the largest recent block, not the largest ever.
        if self.buf.capacity() > 4 * len.max(1 << 20) {
            self.buf.shrink_to(len.max(1 << 20));
        }
        Ok(())
    }
    #[inline]
    fn block(&self) -> &[u8] {
        &self.buf
    }
}

/// Reads the stream header and trace object, then yields blocks.
#[derive(Debug)]
pub struct BlockReader<I: Input> {
    input: I,
    trace: TraceInfo,
    finished: bool,
}

impl<I: Input> BlockReader<I> {
    /// Reads the stream header and the trace object/block.
    pub fn new(mut input: I) -> Result<Self> {
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic, "stream magic")?;
        if &magic != MAGIC {
            if magic[..4] == 20u32.to_le_bytes() && &magic[4..8] == b"!Fas" {
                return Err(Error::unsupported(
                    "this is a NetPerf stream (format versions 1-3, written by .NET Core 2.x); \
                     only NetTrace V4-V6 (.NET Core 3.0 and later) can be read",
                ));
            }
            return Err(Error::malformed(
                0,
                "stream magic",
                format!("expected \"Nettrace\", found {magic:02x?}"),
            ));
        }
        let mut word = [0u8; 4];
        input.read_exact(&mut word, "stream header")?;
        let trace = match u32::from_le_bytes(word) {
            0 => read_v6_header(&mut input)?,
            20 => read_fast_serialization_header(&mut input)?,
            other => {
                return Err(Error::malformed(
                    8,
                    "stream header",
                    format!("expected 0 (V6) or 20 (FastSerialization), found {other}"),
                ))
            }
        };
        Ok(BlockReader {
            input,
            trace,
            finished: false,
        })
    }

    /// Facts from the trace header.
    pub fn trace(&self) -> &TraceInfo {
        &self.trace
    }

    pub(crate) fn trace_mut(&mut self) -> &mut TraceInfo {
        &mut self.trace
    }

    /// The input, for access to the current block's bytes.
    pub fn input(&self) -> &I {
        &self.input
    }

    /// Whether the end-of-stream marker was read.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Advances to the next block, or `None` at the end-of-stream marker.
    pub fn next_block(&mut self) -> Result<Option<BlockInfo>> {
        if self.finished {
            return Ok(None);
        }
        let info = if self.trace.version == FormatVersion::V6 {
            self.next_v6_block()?
        } else {
            self.next_fast_serialization_block()?
        };
        if info.is_none() {
            self.finished = true;
        }
        Ok(info)
    }

    fn next_v6_block(&mut self) -> Result<Option<BlockInfo>> {
        let at = self.input.offset();
        let mut word = [0u8; 4];
        self.input.read_exact(&mut word, "block header")?;
        let word = u32::from_le_bytes(word);
        let len = (word & 0x00ff_ffff) as usize;
        let kind = match word >> 24 {
            0 => return Ok(None),
            1 => return Err(Error::malformed(at, "block header", "a second trace block")),
            2 => BlockKind::Event,
            3 => BlockKind::Metadata,
            4 => BlockKind::SequencePoint,
            5 => BlockKind::Stack,
            6 => BlockKind::Thread,
            7 => BlockKind::RemoveThread,
            8 => BlockKind::LabelList,
            _ => BlockKind::Unknown,
        };
        let offset = self.input.offset();
        self.input.load_block(len, "block payload")?;
        Ok(Some(BlockInfo { kind, offset, len }))
    }

    fn next_fast_serialization_block(&mut self) -> Result<Option<BlockInfo>> {
        let at = self.input.offset();
        match read_u8(&mut self.input, "object tag")? {
            TAG_NULL_REFERENCE => return Ok(None),
            TAG_BEGIN_PRIVATE_OBJECT => {}
            other => {
                return Err(Error::malformed(
                    at,
                    "object tag",
                    format!("expected BeginPrivateObject (5) or NullReference (1), found {other}"),
                ))
            }
        }
        let (name, _version) = read_type_object(&mut self.input)?;
        let kind = match name.as_str() {
            "EventBlock" => BlockKind::Event,
            "MetadataBlock" => BlockKind::Metadata,
            "StackBlock" => BlockKind::Stack,
            "SPBlock" => BlockKind::SequencePoint,
            "Trace" => {
                return Err(Error::malformed(at, "object", "a second Trace object"));
            }
            _ => BlockKind::Unknown,
        };
        let size_at = self.input.offset();
        let size = read_i32(&mut self.input, "block size")?;
        let len = usize::try_from(size).map_err(|_| {
            Error::malformed(size_at, "block size", format!("negative size {size}"))
        })?;
        let padding = (4 - (self.input.offset() % 4) as usize) % 4;
        self.input.skip(padding, "block alignment")?;
        let offset = self.input.offset();
        self.input.load_block(len, "block payload")?;
        // The block is in `block()`; read the end tag without disturbing it.
        let end_at = self.input.offset();
        let mut tag = [0u8; 1];
        self.input.read_exact(&mut tag, "end of object")?;
        if tag[0] != TAG_END_OBJECT {
            return Err(Error::malformed(
                end_at,
                "end of object",
                format!("expected EndObject (6) after {name}, found {}", tag[0]),
            ));
        }
        Ok(Some(BlockInfo { kind, offset, len }))
    }
}

fn read_u8(input: &mut impl Input, what: &'static str) -> Result<u8> {
    let mut b = [0u8; 1];
    input.read_exact(&mut b, what)?;
    Ok(b[0])
}

fn read_i32(input: &mut impl Input, what: &'static str) -> Result<i32> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b, what)?;
    Ok(i32::from_le_bytes(b))
}

fn expect_tag(input: &mut impl Input, tag: u8, what: &'static str) -> Result<()> {
    let at = input.offset();
    let found = read_u8(input, what)?;
    if found != tag {
        return Err(Error::malformed(
            at,
            what,
            format!("expected tag {tag}, found {found}"),
        ));
    }
    Ok(())
}

/// Reads a FastSerialization type object; the leading BeginPrivateObject of the object it
/// types has already been consumed. Returns the type name and version.
fn read_type_object(input: &mut impl Input) -> Result<(String, i32)> {
    expect_tag(input, TAG_BEGIN_PRIVATE_OBJECT, "type object")?;
    expect_tag(input, TAG_NULL_REFERENCE, "type of type object")?;
    let version = read_i32(input, "type version")?;
    let _min_reader_version = read_i32(input, "type minimum reader version")?;
    let len_at = input.offset();
    let len = read_i32(input, "type name length")?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_TYPE_NAME)
        .ok_or_else(|| {
            Error::malformed(
                len_at,
                "type name length",
                format!("implausible length {len}"),
            )
        })?;
    let mut name = vec![0u8; len];
    input.read_exact(&mut name, "type name")?;
    expect_tag(input, TAG_END_OBJECT, "end of type object")?;
    Ok((String::from_utf8_lossy(&name).into_owned(), version))
}

fn read_fast_serialization_header(input: &mut impl Input) -> Result<TraceInfo> {
    let mut name = [0u8; 20];
    input.read_exact(&mut name, "serializer name")?;
    if &name != FAST_SERIALIZATION {
        return Err(Error::malformed(
            12,
            "serializer name",
            "expected \"!FastSerialization.1\"",
        ));
    }
    let at = input.offset();
    expect_tag(input, TAG_BEGIN_PRIVATE_OBJECT, "trace object")?;
    let (type_name, version) = read_type_object(input)?;
    if type_name != "Trace" {
        return Err(Error::malformed(
            at,
            "trace object",
            format!("first object is {type_name:?}, not Trace"),
        ));
    }
    if version < 4 {
        return Err(Error::unsupported(format!(
            "Trace object version {version} is a NetPerf stream (format versions 1-3); \
             only NetTrace V4-V6 can be read"
        )));
    }
    // 8 x i16 SYSTEMTIME, i64 sync ticks, i64 frequency, 4 x i32.
    input.load_block(48, "trace object fields")?;
    let mut c = Cursor::new(input.block(), input.offset() - 48);
    let sync_time_utc = read_system_time(&mut c)?;
    let sync_time_ticks = c.i64("sync time ticks")?;
    let tick_frequency = c.i64("tick frequency")?;
    let pointer_size = c.i32("pointer size")?;
    let process_id = c.i32("process id")?;
    let processors = c.i32("processor count")?;
    let sampling = c.i32("expected CPU sampling rate")?;
    expect_tag(input, TAG_END_OBJECT, "end of trace object")?;
    let trace = TraceInfo {
        version: FormatVersion::V4,
        sync_time_utc,
        sync_time_ticks,
        tick_frequency,
        pointer_size: check_pointer_size(at, pointer_size)?,
        process_id: Some(process_id as u32 as u64),
        processor_count: Some(processors as u32),
        expected_cpu_sampling_rate: Some(sampling as u32 as u64),
        key_values: Vec::new(),
    };
    Ok(trace)
}

fn read_v6_header(input: &mut impl Input) -> Result<TraceInfo> {
    let mut words = [0u8; 8];
    input.read_exact(&mut words, "format version")?;
    let major = u32::from_le_bytes([words[0], words[1], words[2], words[3]]);
    if major != 6 {
        return Err(Error::unsupported(format!(
            "NetTrace major version {major}; this reader understands versions 4 to 6"
        )));
    }
    let at = input.offset();
    let mut word = [0u8; 4];
    input.read_exact(&mut word, "trace block header")?;
    let word = u32::from_le_bytes(word);
    if word >> 24 != 1 {
        return Err(Error::malformed(
            at,
            "trace block",
            format!("first block has kind {}, not Trace (1)", word >> 24),
        ));
    }
    let len = (word & 0x00ff_ffff) as usize;
    let offset = input.offset();
    input.load_block(len, "trace block")?;
    let mut c = Cursor::new(input.block(), offset);
    let sync_time_utc = read_system_time(&mut c)?;
    let sync_time_ticks = c.i64("sync time ticks")?;
    let tick_frequency = c.i64("tick frequency")?;
    let pointer_size = c.i32("pointer size")?;
    let count_at = c.offset();
    let count = c.u32("key/value count")?;
    // Each pair needs at least two bytes, so a larger count cannot be honest.
    if count as usize > c.remaining() / 2 {
        return Err(Error::malformed(
            count_at,
            "key/value count",
            format!("{count} pairs cannot fit"),
        ));
    }
    let mut key_values = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let k = c.utf8_varlen("trace key")?;
        let v = c.utf8_varlen("trace value")?;
        key_values.push((k, v));
    }
    let lookup = |key: &str| {
        key_values
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
    };
    Ok(TraceInfo {
        version: FormatVersion::V6,
        sync_time_utc,
        sync_time_ticks,
        tick_frequency,
        pointer_size: check_pointer_size(at, pointer_size)?,
        process_id: lookup("ProcessId"),
        processor_count: lookup("HardwareThreadCount").map(|v| v as u32),
        expected_cpu_sampling_rate: lookup("ExpectedCPUSamplingRate"),
        key_values,
    })
}

fn check_pointer_size(at: u64, size: i32) -> Result<u32> {
    match size {
        4 | 8 => Ok(size as u32),
        _ => Err(Error::malformed(
            at,
            "pointer size",
            format!("expected 4 or 8, found {size}"),
        )),
    }
}

fn read_system_time(c: &mut Cursor<'_>) -> Result<SystemTime> {
    Ok(SystemTime {
        year: c.i16("sync time year")?,
        month: c.i16("sync time month")?,
        day_of_week: c.i16("sync time day of week")?,
        day: c.i16("sync time day")?,
        hour: c.i16("sync time hour")?,
        minute: c.i16("sync time minute")?,
        second: c.i16("sync time second")?,
        millisecond: c.i16("sync time millisecond")?,
    })
}
