//! The Rust modules `mmcodec generate --lang rust` writes for `tests/schemas`, compiled:
//! the golden files of `tests/golden_rust` must build and pass clippy like any crate's.
#![forbid(unsafe_code)]

#[path = "../../../tests/golden_rust/mod.rs"]
pub mod generated;

pub use generated::{bound, common, enums, features};
