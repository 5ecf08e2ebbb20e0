//! A decoded payload's fields looked up by name, as every decoder of this workspace reads
//! them (the symbolizer's rundown and mapping events here, and the heap dumps, live heaps,
//! async profiler records and Chrome timeline of the crates above).

use nettrace::Value;

/// The value of the field `name` in `fields` (as `Event::decode_payload` returns them, or
/// an object's fields inside an array); `None` when there is no such field.
pub fn field<'v, K: AsRef<str>>(fields: &'v [(K, Value)], name: &str) -> Option<&'v Value> {
    fields
        .iter()
        .find_map(|(n, v)| (n.as_ref() == name).then_some(v))
}

/// The field `name` as an unsigned integer; `None` when it is missing or not one.
pub fn number<K: AsRef<str>>(fields: &[(K, Value)], name: &str) -> Option<u64> {
    field(fields, name).and_then(Value::as_u64)
}
