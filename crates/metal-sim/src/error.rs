//! The crate's one error type. Every variant names what it was working on
//! (a path, a binary, a tree, a case) so a caller can print it as is.
//!
//! As in the overlay engine's `Error`, a wrapped error is part of the message
//! (a field named `err`, not a `#[source]`): the CLI prints errors with
//! `{:#}`, which would repeat a source after the message.

use std::path::PathBuf;
use std::process::ExitStatus;

/// Everything the emulator's public API can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file or folder failed.
    #[error("{what} {}: {err}", path.display())]
    Io {
        /// "reading", "writing", "creating".
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    /// A program (compiler, preprocessor, emulator binary) could not be started or fed.
    #[error("running {program}: {err}")]
    Spawn {
        program: String,
        err: std::io::Error,
    },
    /// None of `$CXX`, `c++`, `g++` answers `--version`.
    #[error("no C++ compiler found ($CXX, c++, g++)")]
    NoCompiler,
    /// The C++ compiler (or preprocessor) rejected a generated unit; `diagnostics` holds the
    /// head of its stderr, the unit stays on disk for inspection.
    #[error("compiling {} failed:\n{diagnostics}", unit.display())]
    Compile { unit: PathBuf, diagnostics: String },
    /// The C preprocessor rejected `file` (a tree file, or a unit made from one).
    #[error("preprocessing {file} failed:\n{diagnostics}")]
    Preprocess { file: String, diagnostics: String },
    /// The compiler reported success but the binary is not where it should be.
    #[error("{}: the compiled binary vanished", .0.display())]
    BinaryVanished(PathBuf),
    /// An emulator (or dispatch) binary exited with a failure status.
    #[error("{} failed ({status}): {stderr}", bin.display())]
    BinaryFailed {
        bin: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
    /// A binary printed a line that is not the JSON object the protocol expects (missing or
    /// ill-typed field, not UTF-8, not JSON).
    #[error("{}: bad output line ({reason}): {line}", bin.display())]
    Protocol {
        bin: PathBuf,
        reason: String,
        line: String,
    },
    /// A well-formed line that does not answer the request it should (another id, or a
    /// completed run without its results).
    #[error("{}: answer to `{request}`: {reason}", bin.display())]
    Answer {
        bin: PathBuf,
        request: String,
        reason: String,
    },
    /// A binary answered fewer (or more) lines than it was asked.
    #[error("{} answered {got} of {want} requests", bin.display())]
    ShortAnswer {
        bin: PathBuf,
        got: usize,
        want: usize,
    },
    /// A tree lacks a file the emulator reads.
    #[error("{label} tree has no {path}")]
    MissingFile { label: String, path: String },
    /// A tree file is not UTF-8.
    #[error("{path} is not UTF-8")]
    NotUtf8 { path: String },
    /// The tree's source is not shaped as the extractor expects (a definition missing or
    /// ambiguous, a statement it does not recognise, a perturbation site absent).
    #[error("{0}")]
    Source(String),
    /// MLX's host code launched something the harness does not emulate, so no claim can be
    /// evaluated on it.
    #[error("{case}: {reason}")]
    Launch { case: String, reason: String },
    /// A job of the case matrix failed; `job` names the binary ("patched Off", ...).
    #[error("running {job}: {err}")]
    Job { job: String, err: Box<Error> },
    /// Reading the pinned project (pins.toml, the series, the upstream repository).
    #[error(transparent)]
    Overlay(#[from] overlay::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error on `path` while doing `what` ("reading", "writing", "creating").
    pub fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |err| Error::Io { what, path, err }
    }

    /// An error starting or talking to `program`.
    pub fn spawn(program: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
        let program = program.to_string();
        move |err| Error::Spawn { program, err }
    }
}
