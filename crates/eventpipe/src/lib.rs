//! # eventpipe
//!
//! The in-process EventPipe runtime: providers and events, sessions, lock-free per-thread
//! buffers and a single-lock buffer manager, writing through [`nettrace`]'s writer.
//!
//! This crate is a skeleton until the runtime issue lands; see ARCHITECTURE.md for the plan.
