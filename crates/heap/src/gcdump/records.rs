//! The high-volume heap-dump events, read straight from their payload bytes.
//!
//! A heap dump is millions of `GC/BulkNode` and `GC/BulkEdge` records; decoding each into
//! named values would cost more than the graph. Their layouts are fixed by the runtime's
//! manifest (`ClrEtwAll.man`: `GCBulkNode`, `GCBulkEdge`, `GCBulkRootEdge` templates),
//! little-endian and packed, pointers the trace's pointer size:
//!
//! | event | header | each value |
//! |---|---|---|
//! | `GC/BulkNode` (18) | `Index` u32, `Count` u32, `ClrInstanceID` u16 | `Address` ptr, `Size` u64, `TypeID` u64, `EdgeCount` u64 |
//! | `GC/BulkEdge` (19) | the same | `Value` ptr, `ReferencingFieldID` u32 |
//! | `GC/BulkRootEdge` (16) | the same | `RootedNodeAddress` ptr, `GCRootKind` u8, `GCRootFlag` u32, `GCRootID` ptr |
//!
//! A payload shorter than its `Count` says, or with bytes left over, is an error naming the
//! event: a damaged dump is never read as a smaller one.

use super::GcDumpError;

/// The header every bulk record set starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BulkHeader {
    /// The event's position in its kind's sequence within one dump (0, 1, 2, ...).
    pub(crate) index: u32,
    /// Values that follow.
    pub(crate) count: u32,
}

/// One object of a `GC/BulkNode` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeRecord {
    pub(crate) address: u64,
    pub(crate) size: u64,
    pub(crate) type_id: u64,
    pub(crate) edge_count: u64,
}

/// One root of a `GC/BulkRootEdge` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RootRecord {
    pub(crate) address: u64,
    pub(crate) kind: u8,
    pub(crate) flags: u32,
}

/// A little-endian cursor over one payload, with the event's name for errors.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    event: &'static str,
    pointer_size: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], event: &'static str, pointer_size: u32) -> Result<Self, GcDumpError> {
        let pointer_size = match pointer_size {
            4 => 4,
            8 => 8,
            other => {
                return Err(GcDumpError::Malformed {
                    event,
                    why: format!("the trace's pointer size is {other}, not 4 or 8"),
                })
            }
        };
        Ok(Cursor {
            bytes,
            pos: 0,
            event,
            pointer_size,
        })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], GcDumpError> {
        let end = self.pos + N;
        let Some(slice) = self.bytes.get(self.pos..end) else {
            return Err(GcDumpError::Malformed {
                event: self.event,
                why: format!(
                    "the payload ends at byte {} inside a value that needs {N} bytes at {}",
                    self.bytes.len(),
                    self.pos
                ),
            });
        };
        self.pos = end;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, GcDumpError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, GcDumpError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, GcDumpError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, GcDumpError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn pointer(&mut self) -> Result<u64, GcDumpError> {
        if self.pointer_size == 4 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }

    fn header(&mut self) -> Result<BulkHeader, GcDumpError> {
        let index = self.u32()?;
        let count = self.u32()?;
        let _clr_instance = self.u16()?;
        Ok(BulkHeader { index, count })
    }

    /// Checks, before reading `count` values of `value_len` bytes, that exactly that many
    /// bytes follow: a lying `Count` cannot make the reader allocate or loop past the
    /// payload.
    fn expect_values(&self, count: u32, value_len: usize) -> Result<(), GcDumpError> {
        let want = (count as usize).checked_mul(value_len);
        let have = self.bytes.len() - self.pos;
        if want != Some(have) {
            return Err(GcDumpError::Malformed {
                event: self.event,
                why: format!(
                    "Count {count} needs {} bytes of values, the payload has {have}",
                    count as u64 * value_len as u64
                ),
            });
        }
        Ok(())
    }
}

/// Reads a `GC/BulkNode` payload, calling `each` for every object.
pub(crate) fn bulk_nodes(
    payload: &[u8],
    pointer_size: u32,
    mut each: impl FnMut(NodeRecord),
) -> Result<BulkHeader, GcDumpError> {
    let mut c = Cursor::new(payload, "GC/BulkNode", pointer_size)?;
    let header = c.header()?;
    c.expect_values(header.count, c.pointer_size + 24)?;
    for _ in 0..header.count {
        each(NodeRecord {
            address: c.pointer()?,
            size: c.u64()?,
            type_id: c.u64()?,
            edge_count: c.u64()?,
        });
    }
    Ok(header)
}

/// Reads a `GC/BulkEdge` payload, calling `each` with every reference's target address.
pub(crate) fn bulk_edges(
    payload: &[u8],
    pointer_size: u32,
    mut each: impl FnMut(u64),
) -> Result<BulkHeader, GcDumpError> {
    let mut c = Cursor::new(payload, "GC/BulkEdge", pointer_size)?;
    let header = c.header()?;
    c.expect_values(header.count, c.pointer_size + 4)?;
    for _ in 0..header.count {
        each(c.pointer()?);
        let _field = c.u32()?;
    }
    Ok(header)
}

/// Reads a `GC/BulkRootEdge` payload, calling `each` for every root.
pub(crate) fn bulk_roots(
    payload: &[u8],
    pointer_size: u32,
    mut each: impl FnMut(RootRecord),
) -> Result<BulkHeader, GcDumpError> {
    let mut c = Cursor::new(payload, "GC/BulkRootEdge", pointer_size)?;
    let header = c.header()?;
    c.expect_values(header.count, 2 * c.pointer_size + 5)?;
    for _ in 0..header.count {
        let address = c.pointer()?;
        let kind = c.u8()?;
        let flags = c.u32()?;
        let _root_id = c.pointer()?;
        each(RootRecord {
            address,
            kind,
            flags,
        });
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(index: u32, count: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&index.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b
    }

    #[test]
    fn nodes_edges_and_roots_read_as_the_manifest_lays_them_out() {
        let mut p = header(3, 2);
        for (a, s, t, e) in [(0x1000u64, 24u64, 7u64, 1u64), (0x2000, 1048, 8, 0)] {
            for v in [a, s, t, e] {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        let mut nodes = Vec::new();
        let h = bulk_nodes(&p, 8, |n| nodes.push(n)).unwrap();
        assert_eq!(h, BulkHeader { index: 3, count: 2 });
        assert_eq!(nodes[1].size, 1048);
        assert_eq!(nodes[0].edge_count, 1);

        // 32-bit pointers: 4-byte addresses.
        let mut p = header(0, 1);
        p.extend_from_slice(&0x2000u32.to_le_bytes());
        p.extend_from_slice(&9u32.to_le_bytes());
        let mut targets = Vec::new();
        bulk_edges(&p, 4, |t| targets.push(t)).unwrap();
        assert_eq!(targets, [0x2000]);

        let mut p = header(0, 1);
        p.extend_from_slice(&0x3000u64.to_le_bytes());
        p.push(2);
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&0x99u64.to_le_bytes());
        let mut roots = Vec::new();
        bulk_roots(&p, 8, |r| roots.push(r)).unwrap();
        assert_eq!(
            roots,
            [RootRecord {
                address: 0x3000,
                kind: 2,
                flags: 1
            }]
        );
    }

    #[test]
    fn a_count_the_payload_does_not_hold_is_an_error_not_a_read_past_it() {
        let mut p = header(0, u32::MAX);
        p.extend_from_slice(&[0; 32]);
        let err = bulk_nodes(&p, 8, |_| panic!("no value is read")).unwrap_err();
        assert!(err.to_string().contains("GC/BulkNode"), "{err}");
        // Bytes left over are as wrong as bytes missing.
        let mut p = header(0, 0);
        p.push(1);
        assert!(bulk_edges(&p, 8, |_| {}).is_err());
        assert!(bulk_roots(&header(0, 1)[..5], 8, |_| {}).is_err());
        assert!(bulk_nodes(&header(0, 0), 3, |_| {}).is_err());
    }
}
