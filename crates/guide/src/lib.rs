//! The user guide (`docs/`), as this crate's documentation: every Rust block of every page
//! is a doctest, so `cargo test -p eventpipe-guide --doc` compiles and runs them (and
//! `cargo test --workspace` includes them). The pages' shell blocks run in `ci/docs.sh`.
//!
//! Each module is one page; read them on GitHub or in `docs/`, where their links work.

#[doc = include_str!("../../../docs/README.md")]
pub mod index {}
#[doc = include_str!("../../../docs/instrument.md")]
pub mod instrument {}
#[doc = include_str!("../../../docs/collect.md")]
pub mod collect {}
#[doc = include_str!("../../../docs/profile.md")]
pub mod profile {}
#[doc = include_str!("../../../docs/read.md")]
pub mod read {}
#[doc = include_str!("../../../docs/dotnet.md")]
pub mod dotnet {}
#[doc = include_str!("../../../docs/analyze.md")]
pub mod analyze {}
#[doc = include_str!("../../../docs/counters.md")]
pub mod counters {}
#[doc = include_str!("../../../docs/heap.md")]
pub mod heap {}
#[doc = include_str!("../../../docs/agent.md")]
pub mod agent {}
#[doc = include_str!("../../../docs/client.md")]
pub mod client {}
#[doc = include_str!("../../../docs/platforms.md")]
pub mod platforms {}
