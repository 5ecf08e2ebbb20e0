//! Reading a runtime event's payload by field name, without allocating: the fields an
//! analysis needs are looked up in the values [`nettrace::Event::for_each_field`] visits.

use nettrace::{Event, EventRef, ValueRef};

/// The top-level fields of one event, borrowed from the reader.
pub(crate) struct Fields<'r> {
    values: Vec<(&'r str, ValueRef<'r>)>,
}

impl<'r> Fields<'r> {
    /// The event's fields; an undecodable payload gives none (every look-up then misses,
    /// and the analyses count the event as carrying nothing).
    pub(crate) fn of(event: &Event<'r>) -> Fields<'r> {
        let mut values = Vec::with_capacity(event.metadata.fields.len());
        let decoded =
            event.for_each_field(|field, value| values.push((field.name.as_str(), value)));
        Fields::decoded(values, decoded.is_ok())
    }

    /// As [`of`](Self::of), for the file-order reader's events.
    pub(crate) fn of_ref(event: &EventRef<'r>) -> Fields<'r> {
        let mut values = Vec::with_capacity(event.metadata().fields.len());
        let decoded =
            event.for_each_field(|field, value| values.push((field.name.as_str(), value)));
        Fields::decoded(values, decoded.is_ok())
    }

    /// Fields from their values (tests that make events up).
    #[cfg(test)]
    pub(crate) fn from_values(values: Vec<(&'r str, ValueRef<'r>)>) -> Fields<'r> {
        Fields { values }
    }

    fn decoded(mut values: Vec<(&'r str, ValueRef<'r>)>, ok: bool) -> Fields<'r> {
        if !ok {
            values.clear();
        }
        Fields { values }
    }

    fn get(&self, name: &str) -> Option<&ValueRef<'r>> {
        self.values.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// An unsigned integer field.
    pub(crate) fn u64(&self, name: &str) -> Option<u64> {
        self.get(name).and_then(ValueRef::as_u64)
    }

    /// A number field of any type, as `f64`.
    pub(crate) fn f64(&self, name: &str) -> Option<f64> {
        match *self.get(name)? {
            ValueRef::F64(v) => Some(v),
            ValueRef::F32(v) => Some(f64::from(v)),
            ref other => other.as_u64().map(|v| v as f64),
        }
    }

    /// A text field, as a `String` (UTF-16 and 8-bit strings alike).
    pub(crate) fn text(&self, name: &str) -> Option<String> {
        match self.get(name)? {
            ValueRef::Utf16(s) => Some(s.to_string_lossy()),
            ValueRef::Str8(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}
