//! A CMake + Ninja build of a pinned source tree into a content-keyed cache, for any project: a
//! [`Recipe`] says what to build (its key material, how its sources are written, its CMake
//! definitions and Ninja targets); the pipeline owns the machinery every build shares. It knows
//! no project and prints nothing: progress goes to a [`Progress`] the caller supplies, failures
//! come back as typed [`Error`]s.
//!
//! Cache layout, under the folder a recipe's builds live in (`<cache>/builds`):
//! `<dir_key>/{src,build,install,deps}` plus `stamp.json`, and a `<dir_key>.lock` beside it.
//! `dir_key` hashes what shapes the compiled objects ([`KeyLines`]: upstream, pin, options,
//! compiler); the full key adds what only changes the sources (a series hash), so editing one
//! overlay reuses the Ninja tree and only the touched translation units recompile.
//!
//! Modules: [`key`] (keys, stamps), [`tree`] (the keyed tree, its lock and the
//! materialize-configure-build steps a [`Recipe`] drives), [`lock`] (the `flock` the build's
//! processes inherit), [`cmake`] (configure, install, launcher, compiler identity), [`ninja`]
//! (the build with its status parsed, ccache across trees), [`deps`] (headers, libraries, package
//! managers), [`install`] (publishing and pruning installs, atomic writes), [`error`].

pub mod cmake;
pub mod deps;
pub mod error;
pub mod install;
pub mod key;
pub mod lock;
pub mod ninja;
pub mod tree;

pub use error::{Context, Error, Result, UserError, user_err};
pub use key::{KeyLines, Keys, sha256_hex, short_hash};
pub use tree::{Recipe, Tree};

/// What a build step reports while it runs; a CLI prints it (a bar on a terminal).
pub trait Progress {
    /// One line of news ("configuring: cmake ...", "waiting for another build-mlx ...").
    fn message(&mut self, msg: &str);
    /// Ninja's status: `done` of `total` edges, the last one described by `desc`.
    fn ninja(&mut self, done: u64, total: u64, desc: &str);
    /// Ninja has exited (a bar is cleared).
    fn ninja_done(&mut self) {}
}

/// A [`Progress`] that drops everything (tests, callers that want silence).
pub struct Quiet;

impl Progress for Quiet {
    fn message(&mut self, _: &str) {}
    fn ninja(&mut self, _: u64, _: u64, _: &str) {}
}

/// Parallel compile jobs: `jobs`, else the number of CPUs (2 when unknown); at least 1.
pub fn jobs(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1)
}
