//! The overlay engine: a pinned upstream commit plus an ordered series of `git format-patch` overlays.
//!
//! It knows nothing of any particular upstream. See `docs/ARCHITECTURE.md` for the map and invariants.

#![deny(missing_docs)]

pub mod apply;
pub mod audit;
pub mod bump;
pub mod check;
pub mod diff;
pub mod drift;
pub mod error;
pub mod export;
pub mod help;
pub mod import;
pub mod interdiff;
mod io;
pub mod manifest;
pub mod materialize;
pub mod merge;
pub mod patch;
pub mod project;
pub mod refresh;
pub mod renames;
pub mod render;
pub mod reverts;
pub mod revs;
pub mod series;
pub mod symbols;
pub mod tree;
pub mod upstream;

pub use error::{Error, ErrorKind, InputKind, Refusal, Result};
pub use help::{Help, NextStep};
pub use io::{fsx, lock, txn};
