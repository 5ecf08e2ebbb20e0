//! # eventpipe-export
//!
//! What the agent sends to the systems a fleet already runs. Nothing here stores or queries:
//! it encodes and delivers.
//!
//! ```text
//! nettrace trace of one period ─▶ insight::ProfileBuilder ─▶ pyroscope::push_request
//!                                  (symbolized on the host,    (pprof, gzip, labels:
//!                                   build ids in mappings)      service_name, __name__, pid…)
//! nettrace events (streamed)   ─▶ otlp  (spans, log records, metrics; protobuf)
//!                                                  │
//!                                                  ▼
//!                                delivery::Delivery (bounded queue, on disk or in memory;
//!                                one sending thread; retries with backoff; counts what it
//!                                drops)
//! ```
#![forbid(unsafe_code)]

pub mod continuous;
pub mod delivery;
pub mod otlp;
pub mod pyroscope;
