//! Reading decoded OTLP requests, for the tests of what exports them.

use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};

/// The value of the attribute named `key`, if `attributes` holds it.
pub fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}
