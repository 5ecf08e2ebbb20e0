//! Metadata rows: who emits an event, what it is called, and how its payload is laid out.
//!
//! V4/V5 rows are UTF-16 headers followed by a System.TypeCode field list and (V5) optional
//! tags: an opcode and `V2Params`, a second field list that can express arrays. V6 rows are
//! UTF-8, sized, and carry their own type codes and optional properties. Native runtime
//! events come with no name and no fields; [`resolve_names`] fills both from the manifest.

use crate::cursor::Cursor;
use crate::error::{Error, Result};
use crate::manifest::{self, KnownCount, KnownField, KnownType};
use crate::model::{EventMetadata, FieldDesc, FieldType};

/// Deepest nesting of object and array types accepted, so hostile metadata cannot recurse
/// without bound.
const MAX_TYPE_DEPTH: u32 = 16;

const TAG_OPCODE: u8 = 1;
const TAG_V2_PARAMS: u8 = 2;

/// Parses a V4/V5 metadata payload. Returns the row and whether V5 tags were present.
pub(crate) fn parse_v5(c: &mut Cursor<'_>) -> Result<(EventMetadata, bool)> {
    let id_at = c.offset();
    let metadata_id = c.i32("metadata id")?;
    let metadata_id = u32::try_from(metadata_id).map_err(|_| {
        Error::malformed(id_at, "metadata id", format!("negative id {metadata_id}"))
    })?;
    let provider = c.utf16z("provider name")?;
    let mut md = EventMetadata {
        metadata_id,
        provider,
        ..Default::default()
    };
    // Some runtimes write metadata rows that stop after the provider name.
    if c.is_empty() {
        return Ok((md, false));
    }
    md.event_id = c.i32("event id")? as u32;
    md.event_name = c.utf16z("event name")?;
    md.keywords = c.u64("keywords")?;
    md.version = c.i32("event version")? as u32;
    md.level = c.i32("event level")? as u32;
    if !c.is_empty() {
        // TraceEvent keeps an event whose V1 field list it cannot parse, with no fields; the
        // V1 list has no size, so the tags after it are unreachable then.
        match v1_field_list(c, 0) {
            Ok(fields) => md.fields = fields,
            Err(_) => return Ok((md, false)),
        }
    }
    let mut saw_tags = false;
    while c.remaining() >= 5 {
        saw_tags = true;
        let size = c.len_u32("metadata tag size")?;
        let kind = c.u8("metadata tag kind")?;
        let mut tag = c.sub(size, "metadata tag payload")?;
        match kind {
            TAG_OPCODE => md.opcode = Some(tag.u8("opcode")?),
            TAG_V2_PARAMS => md.fields = v2_field_list(&mut tag, 0)?,
            _ => {}
        }
    }
    Ok((md, saw_tags))
}

fn checked_count(c: &mut Cursor<'_>, what: &'static str, min_each: usize) -> Result<usize> {
    let at = c.offset();
    let n = c.i32(what)?;
    let n = usize::try_from(n)
        .map_err(|_| Error::malformed(at, what, format!("negative count {n}")))?;
    if n.saturating_mul(min_each) > c.remaining() {
        return Err(Error::malformed(
            at,
            what,
            format!("{n} entries cannot fit in {} bytes", c.remaining()),
        ));
    }
    Ok(n)
}

fn v1_field_list(c: &mut Cursor<'_>, depth: u32) -> Result<Vec<FieldDesc>> {
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::malformed(
            c.offset(),
            "field list",
            "nesting too deep",
        ));
    }
    let count = checked_count(c, "field count", 6)?;
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let at = c.offset();
        let code = c.i32("field type code")?;
        let ty = if code == 1 {
            FieldType::Object(v1_field_list(c, depth + 1)?)
        } else {
            type_from_code(at, code, None)?
        };
        let name = c.utf16z("field name")?;
        fields.push(FieldDesc { name, ty });
    }
    Ok(fields)
}

fn v2_field_list(c: &mut Cursor<'_>, depth: u32) -> Result<Vec<FieldDesc>> {
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::malformed(
            c.offset(),
            "field list",
            "nesting too deep",
        ));
    }
    let count = checked_count(c, "V2 field count", 10)?;
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let at = c.offset();
        let size = c.i32("V2 field size")?;
        // The size includes its own four bytes.
        let body = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_sub(4))
            .ok_or_else(|| Error::malformed(at, "V2 field size", format!("invalid size {size}")))?;
        let mut f = c.sub(body, "V2 field")?;
        let name = f.utf16z("V2 field name")?;
        let ty = v2_type(&mut f, depth)?;
        fields.push(FieldDesc { name, ty });
    }
    Ok(fields)
}

fn v2_type(f: &mut Cursor<'_>, depth: u32) -> Result<FieldType> {
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::malformed(
            f.offset(),
            "field type",
            "nesting too deep",
        ));
    }
    let at = f.offset();
    let code = f.i32("V2 type code")?;
    Ok(match code {
        1 => FieldType::Object(v2_field_list(f, depth + 1)?),
        19 => FieldType::Array(Box::new(v2_type(f, depth + 1)?)),
        _ => type_from_code(at, code, None)?,
    })
}

/// Maps a scalar type code shared by V5 (System.TypeCode) and V6 to a field type.
fn type_from_code(at: u64, code: i32, what: Option<&'static str>) -> Result<FieldType> {
    Ok(match code {
        3 => FieldType::Boolean32,
        4 => FieldType::Char16,
        5 => FieldType::SByte,
        6 => FieldType::Byte,
        7 => FieldType::Int16,
        8 => FieldType::UInt16,
        9 => FieldType::Int32,
        10 => FieldType::UInt32,
        11 => FieldType::Int64,
        12 => FieldType::UInt64,
        13 => FieldType::Single,
        14 => FieldType::Double,
        15 => FieldType::Decimal,
        16 => FieldType::DateTime,
        17 => FieldType::Guid,
        18 => FieldType::Utf16String,
        20 => FieldType::VarInt,
        21 => FieldType::VarUInt,
        23 => FieldType::Char8,
        26 => FieldType::Boolean8,
        _ => {
            return Err(Error::malformed(
                at,
                what.unwrap_or("field type code"),
                format!("unknown type code {code}"),
            ))
        }
    })
}

/// Parses one V6 metadata row (after its u16 size).
pub(crate) fn parse_v6(c: &mut Cursor<'_>) -> Result<EventMetadata> {
    let metadata_id = c.varu32("metadata id")?;
    let provider = c.utf8_varlen("provider name")?;
    let event_id = c.varu32("event id")?;
    let event_name = c.utf8_varlen("event name")?;
    let mut md = EventMetadata {
        metadata_id,
        provider,
        event_id,
        event_name,
        ..Default::default()
    };
    md.fields = v6_field_list(c, 0)?;
    let size = usize::from(c.u16("optional metadata size")?);
    let mut opt = c.sub(size, "optional metadata")?;
    while !opt.is_empty() {
        let at = opt.offset();
        match opt.u8("optional metadata kind")? {
            1 => md.opcode = Some(opt.u8("opcode")?),
            3 => md.keywords = opt.u64("keywords")?,
            4 => md.message_template = Some(opt.utf8_varlen("message template")?),
            5 => md.description = Some(opt.utf8_varlen("description")?),
            6 => {
                let k = opt.utf8_varlen("metadata key")?;
                let v = opt.utf8_varlen("metadata value")?;
                md.key_values.push((k, v));
            }
            7 => md.provider_guid = Some(opt.guid("provider guid")?),
            8 => md.level = u32::from(opt.u8("level")?),
            9 => md.version = u32::from(opt.u8("version")?),
            other => {
                return Err(Error::malformed(
                    at,
                    "optional metadata kind",
                    format!("unknown kind {other}"),
                ))
            }
        }
    }
    Ok(md)
}

fn v6_field_list(c: &mut Cursor<'_>, depth: u32) -> Result<Vec<FieldDesc>> {
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::malformed(
            c.offset(),
            "field list",
            "nesting too deep",
        ));
    }
    let at = c.offset();
    let count = usize::from(c.u16("field count")?);
    if count * 3 > c.remaining() {
        return Err(Error::malformed(
            at,
            "field count",
            format!("{count} fields cannot fit"),
        ));
    }
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let size = usize::from(c.u16("field size")?);
        let mut f = c.sub(size, "field description")?;
        let name = f.utf8_varlen("field name")?;
        let ty = v6_type(&mut f, depth)?;
        fields.push(FieldDesc { name, ty });
    }
    Ok(fields)
}

fn v6_type(f: &mut Cursor<'_>, depth: u32) -> Result<FieldType> {
    if depth > MAX_TYPE_DEPTH {
        return Err(Error::malformed(
            f.offset(),
            "field type",
            "nesting too deep",
        ));
    }
    let at = f.offset();
    let code = f.u8("type code")?;
    Ok(match code {
        1 => FieldType::Object(v6_field_list(f, depth + 1)?),
        19 => FieldType::Array(Box::new(v6_type(f, depth + 1)?)),
        22 => {
            let elem = v6_type(f, depth + 1)?;
            FieldType::FixedArray(Box::new(elem), f.u16("fixed array length")?)
        }
        24 | 25 => {
            let elem = v6_type(f, depth + 1)?;
            if !elem.is_fixed_size() {
                return Err(Error::malformed(
                    at,
                    "type code",
                    "RelLoc/DataLoc of a variable-size type",
                ));
            }
            if code == 24 {
                FieldType::RelLoc(Box::new(elem))
            } else {
                FieldType::DataLoc(Box::new(elem))
            }
        }
        _ => type_from_code(at, i32::from(code), None)?,
    })
}

/// Fills `display_name` the way TraceEvent names events and, for native runtime events that
/// came without a field list, attaches the manifest's layout.
pub(crate) fn resolve_names(md: &mut EventMetadata) {
    let known = if md.fields.is_empty() && md.event_id <= u32::from(u16::MAX) {
        manifest::lookup(&md.provider, md.event_id as u16, md.version.min(255) as u8)
    } else {
        None
    };
    if let Some(known) = known {
        if md.event_name.is_empty() || md.fields.is_empty() {
            md.fields = known_fields(known.fields);
            md.fields_from_manifest = true;
        }
        md.display_name = known.name.to_string();
        if md.opcode.is_none() && known.opcode_value != 0 {
            md.opcode = Some(known.opcode_value);
        }
        return;
    }
    md.display_name = display_name(&md.event_name, md.opcode, md.event_id);
    if md.provider.starts_with("Universal.") {
        // UniversalProviders.md: these providers' strings are a u16 byte count and UTF-8,
        // declared in metadata as a single UTF-8 code unit.
        for f in &mut md.fields {
            if f.ty == FieldType::Char8 {
                f.ty = FieldType::Utf8U16Len;
            }
        }
    }
}

/// TraceEvent's name for a self-describing event. With no stated opcode, a name ending in
/// "Start"/"Stop" (any case) implies opcode 1/2; with opcode 1/2 that suffix is then dropped
/// from the task name. The name is the task alone for opcode 0, else `Task/Opcode`.
fn display_name(event_name: &str, opcode: Option<u8>, event_id: u32) -> String {
    if event_name.is_empty() {
        return if event_id == 0 {
            "EventWriteString".into()
        } else {
            format!("EventID({event_id})")
        };
    }
    let lower = event_name.to_ascii_lowercase();
    let opcode = opcode.unwrap_or(if lower.ends_with("start") {
        1
    } else if lower.ends_with("stop") {
        2
    } else {
        0
    });
    let task = match opcode {
        1 if lower.ends_with("start") => &event_name[..event_name.len() - 5],
        2 if lower.ends_with("stop") => &event_name[..event_name.len() - 4],
        _ => event_name,
    };
    match opcode {
        0 => task.to_string(),
        op => format!("{task}/{}", metadata_opcode_name(op)),
    }
}

/// Opcode names TraceEvent gives events described by trace metadata (.NET's names for its
/// `EventOpcode` enum); other values print as their number.
pub(crate) fn metadata_opcode_name(op: u8) -> &'static str {
    const NAMES: [&str; 10] = [
        "Info",
        "Start",
        "Stop",
        "DataCollectionStart",
        "DataCollectionStop",
        "Extension",
        "Reply",
        "Resume",
        "Suspend",
        "Transfer",
    ];
    match NAMES.get(usize::from(op)) {
        Some(name) => name,
        None => numeric_opcode(op),
    }
}

fn numeric_opcode(op: u8) -> &'static str {
    // Interned once per value so names stay `&'static str` without allocating per event.
    static NUMBERS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NUMBERS.get_or_init(|| (0..=255u16).map(|n| n.to_string()).collect())[usize::from(op)].as_str()
}

/// Converts a manifest field list into field descriptions.
pub(crate) fn known_fields(fields: &[KnownField]) -> Vec<FieldDesc> {
    fields
        .iter()
        .map(|f| FieldDesc {
            name: f.name.to_string(),
            ty: known_type(f),
        })
        .collect()
}

fn known_type(f: &KnownField) -> FieldType {
    let element = match f.ty {
        KnownType::Int8 => FieldType::SByte,
        KnownType::UInt8 => FieldType::Byte,
        KnownType::Int16 => FieldType::Int16,
        KnownType::UInt16 => FieldType::UInt16,
        KnownType::Int32 => FieldType::Int32,
        KnownType::UInt32 => FieldType::UInt32,
        KnownType::Int64 => FieldType::Int64,
        KnownType::UInt64 => FieldType::UInt64,
        KnownType::Float => FieldType::Single,
        KnownType::Double => FieldType::Double,
        KnownType::Boolean => FieldType::Boolean32,
        KnownType::Guid => FieldType::Guid,
        KnownType::Pointer => FieldType::Pointer,
        KnownType::UnicodeString => FieldType::Utf16String,
        KnownType::AnsiString => FieldType::AnsiString,
        KnownType::FileTime => FieldType::FileTime,
        KnownType::SystemTime => FieldType::SystemTime,
        KnownType::Struct(inner) => FieldType::Object(known_fields(inner)),
        KnownType::Binary => {
            return match f.count {
                KnownCount::One => FieldType::Array(Box::new(FieldType::Byte)),
                KnownCount::Fixed(n) => FieldType::FixedArray(Box::new(FieldType::Byte), n),
                KnownCount::Field(i) => FieldType::CountedBytes(usize::from(i)),
            }
        }
    };
    match f.count {
        KnownCount::One => element,
        KnownCount::Fixed(n) => FieldType::FixedArray(Box::new(element), n),
        KnownCount::Field(i) => FieldType::CountedArray(Box::new(element), usize::from(i)),
    }
}
