//! The engine's input and output: every write to a user's files (`fsx`), all-or-nothing commits
//! of several files (`txn`), the project lock (`lock`), and what a materialized tree ignores
//! (`junk`). The crate root re-exports `fsx`, `lock` and `txn` at their old paths
//! (`overlay::fsx`, ...) for the CLI and the tasks; `junk` is the engine's own.

pub mod fsx;
pub(crate) mod junk;
pub mod lock;
pub mod txn;
