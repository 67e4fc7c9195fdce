//! One error type for the engine. Every variant that comes from a user's input names the file (and the
//! line when there is one) and, where we can, what to do about it.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in which file a problem is. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub line: Option<usize>,
}

impl Location {
    pub fn new(path: impl Into<PathBuf>, line: Option<usize>) -> Self {
        Location {
            path: path.into(),
            line,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}", self.path.display(), line),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: a malformed manifest, series, patch, or a request that cannot be honoured.
    #[error("{at}: {message}{}", help.as_ref().map(|h| format!("\n  help: {h}")).unwrap_or_default())]
    Input {
        at: Location,
        message: String,
        help: Option<String>,
    },
    /// An overlay does not apply to the tree it is meant for.
    #[error("{overlay}: {file}: hunk #{hunk} (patch line {patch_line}): {reason}")]
    Apply {
        overlay: PathBuf,
        file: String,
        hunk: usize,
        patch_line: usize,
        reason: String,
    },
    /// The OS error is part of the message (not a separate `source`, which `{:#}` would print a
    /// second time).
    #[error("{}: {}", path.display(), io_message(err))]
    Io { path: PathBuf, err: std::io::Error },
    /// libgit2's message without its class/code suffix, once.
    #[error("{context}: {}", err.message())]
    Git { context: String, err: git2::Error },
}

/// "No such file or directory", without Rust's " (os error 2)".
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(path: impl AsRef<Path>, line: Option<usize>, message: impl Into<String>) -> Self {
        Error::Input {
            at: Location::new(path.as_ref(), line),
            message: message.into(),
            help: None,
        }
    }

    pub fn with_help(mut self, text: impl Into<String>) -> Self {
        if let Error::Input { help, .. } = &mut self {
            *help = Some(text.into());
        }
        self
    }

    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            err: source,
        }
    }

    pub fn git(context: impl Into<String>, source: git2::Error) -> Self {
        Error::Git {
            context: context.into(),
            err: source,
        }
    }
}

/// `map_err` helper for I/O on a known path.
pub(crate) trait IoContext<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
