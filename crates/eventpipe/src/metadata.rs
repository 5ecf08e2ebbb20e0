//! How a declared event is described in the trace: its nettrace metadata row.

use eventpipe_core::{EventDescriptor, FieldKind, FieldSpec};

/// The nettrace metadata row for `event` under `metadata_id`.
pub(crate) fn of_event(event: &EventDescriptor, metadata_id: u32) -> nettrace::EventMetadata {
    nettrace::EventMetadata {
        metadata_id,
        provider: event.provider.name().to_string(),
        provider_guid: Some(event.provider.guid()),
        event_id: event.id,
        event_name: event.name.to_string(),
        keywords: event.keywords,
        version: u32::from(event.version),
        level: event.level as u32,
        opcode: (event.opcode != 0).then_some(event.opcode),
        fields: field_descs(event.fields),
        ..Default::default()
    }
}

/// The format's type for a field of `kind`.
fn field_type(kind: FieldKind) -> nettrace::FieldType {
    use nettrace::FieldType as T;
    let array = |t| T::Array(Box::new(t));
    match kind {
        FieldKind::Bool => T::Boolean32,
        FieldKind::U8 => T::Byte,
        FieldKind::I8 => T::SByte,
        FieldKind::U16 => T::UInt16,
        FieldKind::I16 => T::Int16,
        FieldKind::U32 => T::UInt32,
        FieldKind::I32 => T::Int32,
        FieldKind::U64 => T::UInt64,
        FieldKind::I64 => T::Int64,
        FieldKind::F32 => T::Single,
        FieldKind::F64 => T::Double,
        FieldKind::Str => T::Utf16String,
        FieldKind::Guid => T::Guid,
        FieldKind::Bytes => array(T::Byte),
        FieldKind::U32Array => array(T::UInt32),
        FieldKind::U64Array => array(T::UInt64),
        FieldKind::I64Array => array(T::Int64),
        FieldKind::F64Array => array(T::Double),
        FieldKind::Struct(fields) => T::Object(field_descs(fields)),
    }
}

/// The metadata's description of `fields`, nested structs included.
fn field_descs(fields: &[FieldSpec]) -> Vec<nettrace::FieldDesc> {
    fields
        .iter()
        .map(|f| nettrace::FieldDesc {
            name: f.name.to_string(),
            ty: field_type(f.kind),
        })
        .collect()
}
