//! One error type for the engine. Every variant that comes from a user's input names the file (and the
//! line when there is one) and, where we can, what to do about it.
//!
//! A request the engine understood but declines (refresh's "renamed", "would become empty", ...) is
//! an [`Error::Refused`] with a typed [`Refusal`]: tests and the CLI match the variant, never the
//! wording. [`Error::kind`] gives the coarse [`ErrorKind`] a CLI maps to an exit code.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::help::{Help, NextStep};

/// Where in which file a problem is. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file (or folder) the problem is in.
    pub path: PathBuf,
    /// The 1-based line, when the problem has one.
    pub line: Option<usize>,
}

impl Location {
    /// A location in `path`, at `line` when known.
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

/// Everything the engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: a malformed manifest, series, patch, or a request that cannot be honoured.
    #[error("{at}: {message}{}", help_line(help))]
    Input {
        /// The file and line at fault.
        at: Location,
        /// What is wrong, in one sentence.
        message: String,
        /// What to do about it.
        help: Option<Help>,
        /// Which input was malformed ([`InputKind::Other`] unless a parser tagged it).
        kind: InputKind,
    },
    /// A well-formed request the engine declines, by design (see [`Refusal`]); nothing was written.
    #[error("{}{refusal}{}", located(at), help_line(help))]
    Refused {
        /// The file (or folder) the refusal is about; `None` for one about the whole request (a
        /// bump's target, say), whose message names what it is about itself.
        at: Option<Location>,
        /// Which refusal; its `Display` is the message.
        refusal: Refusal,
        /// What to do about it.
        help: Option<Help>,
    },
    /// An overlay does not apply to the tree it is meant for.
    #[error("{overlay}: {file}: hunk #{hunk} (patch line {patch_line}): {reason}")]
    Apply {
        /// The overlay file.
        overlay: PathBuf,
        /// The path in the tree its failing hunk patches.
        file: String,
        /// The 1-based hunk number within that file's section.
        hunk: usize,
        /// The line of the hunk header in the overlay file.
        patch_line: usize,
        /// Why it does not apply (no match, ambiguous, ...).
        reason: String,
    },
    /// The OS error is part of the message (not a separate `source`, which `{:#}` would print a
    /// second time).
    #[error("{}: {}", path.display(), io_message(err))]
    Io {
        /// The file the I/O was on.
        path: PathBuf,
        /// The OS error.
        err: std::io::Error,
    },
    /// libgit2's message without its class/code suffix, once.
    #[error("{context}: {}", err.message())]
    Git {
        /// What the engine was doing.
        context: String,
        /// libgit2's error.
        err: git2::Error,
    },
}

/// Which input an [`Error::Input`] is about: set by the parser that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InputKind {
    /// `pins.toml` (the manifest).
    Manifest,
    /// The `series` file, or the set of overlays it names.
    Series,
    /// An overlay's patch text.
    Patch,
    /// Anything else: a flag, a tree, a state file, a revision.
    #[default]
    Other,
}

/// The coarse kind of an [`Error`]: what a CLI maps to exit codes and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Malformed input (see [`InputKind`]).
    Input(InputKind),
    /// A documented refusal (see [`Error::refusal`]).
    Refused,
    /// An overlay does not apply.
    Apply,
    /// The filesystem failed.
    Io,
    /// libgit2 failed.
    Git,
}

/// The refusals the engine documents. Each is a well-formed request it declines because honouring
/// it would guess, lose an edit or write something wrong; nothing was written. The `Display` of each
/// is the message users see (after the file name), unchanged from before the variants existed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A file the write would replace differs from what the command read (another process or the
    /// user edited it meanwhile). `since` says since when, e.g. "while refresh was running".
    #[error("changed on disk {since}; nothing was written")]
    ChangedOnDisk {
        /// Since when, as a phrase ("since the bump started").
        since: String,
    },
    /// A transaction journal from an interrupted write is still in the project.
    #[error("an interrupted write was not recovered")]
    NotRecovered,
    /// The last apply into a tree was interrupted; refresh would mistake its half for edits.
    #[error("the last apply into this tree was interrupted")]
    ApplyInterrupted,
    /// The tree was materialized from another version of the series.
    #[error("this tree was materialized from a different series (the overlays changed since)")]
    OtherSeries,
    /// Executable bits changed; refresh carries lines, not modes.
    #[error("the executable bit of {} file(s) changed ({}); refresh carries lines, not modes", files.len(), files.join(", "))]
    ModeChanged {
        /// The paths whose bit changed.
        files: Vec<String>,
    },
    /// An edit to a file an overlay renames: refresh cannot re-split it.
    #[error("refresh cannot re-split edits to a file that {overlay} renames")]
    Renamed {
        /// The overlay that renames the file.
        overlay: String,
    },
    /// A symbolic link appeared or was re-pointed; refresh never writes links.
    #[error(
        "{file}: a symbolic link where the tree had none (or a re-pointed one); refresh turns text edits into overlays, never links"
    )]
    Symlink {
        /// The path of the link in the tree.
        file: String,
    },
    /// An edited file is not UTF-8.
    #[error("not UTF-8 text; refresh turns text edits into overlays only")]
    NotText,
    /// An edit to a file that does not exist at the stage of the overlay asked to carry it.
    #[error("cannot attribute this edit: the file does not exist at that overlay's stage")]
    MissingAtStage,
    /// An edit whose lines cannot be given to one overlay consistently across the series.
    #[error("cannot attribute this edit consistently across the series")]
    Unattributable,
    /// Edits that touch only upstream lines: no overlay owns them.
    #[error("{} edit(s) touch only upstream lines, so no overlay owns them: {}", files.len(), files.join(", "))]
    Unowned {
        /// The edited files.
        files: Vec<String>,
    },
    /// A new overlay was asked for, but every edit belongs to existing overlays.
    #[error("no edit is left for this new overlay: every edit touches lines of {}", owners.join(", "))]
    NothingForNew {
        /// The overlays that own the edits.
        owners: Vec<String>,
    },
    /// The edits undo all of an overlay's changes.
    #[error("this overlay would become empty: the edits undo all of its changes")]
    WouldBeEmpty,
    /// A materialized tree holds edits apply did not write (`apply` refuses to overwrite them).
    #[error("{} edit(s) not accounted for by the overlays:\n    {}", list.len(), shown(list))]
    UnrecordedEdits {
        /// One line per edit (`modified: path`, ...).
        list: Vec<String>,
    },
    /// The tree to write has a name the tool reserves for its own files.
    #[error("the tree to write has `{path}`, a name this tool reserves for its own files")]
    ReservedName {
        /// The reserved path in the tree.
        path: String,
    },
    /// The target folder holds files apply did not write.
    /// (The state file is named here as text: `error` sits below every other module.)
    #[error("not empty and not written by apply (no .overlay-state.json)")]
    NotOurs,
    /// A local-only overlay was named for export.
    #[error("{overlay} is local-only: it never leaves the fork")]
    LocalOnly {
        /// The overlay named.
        overlay: String,
    },
    /// Upstream already contains the overlay at the export target.
    #[error("upstream already contains this overlay at the target commit; nothing to export")]
    AlreadyUpstream,
    /// `canonicalize`, `apply` (and everything that materializes the series): the overlay's change
    /// is already at the pin (it applies only elsewhere, a second time); re-diffing it would record
    /// the duplicate, applying it would write it.
    #[error(
        "its change is already upstream at the pin; applying or canonicalizing it would add its lines a second time"
    )]
    UpstreamedAtPin,
    /// `bump-pin --continue`: the resolved bump tree changes files the overlay being resolved does
    /// not touch (a resolution carries only the overlay's own files; links and modes are named).
    #[error("the resolved bump tree also changes {} file(s) this overlay does not touch: {}; nothing was written", files.len(), files.join(", "))]
    ResolutionOutsideOverlay {
        /// Each file with what changed: `path (modified|added|deleted|type or mode changed)`.
        files: Vec<String>,
    },
    /// `bump-pin --continue`: the resolution drops lines of upstream or of an earlier overlay that
    /// the overlay did not drop before, or brings back lines upstream deleted (the audit,
    /// `crate::audit`).
    #[error("the resolution of {overlay} loses lines that are not its own to drop:\n    {}\nnothing was written", losses.join("\n    "))]
    ResolutionReverts {
        /// The overlay being resolved.
        overlay: String,
        /// Each run of lost lines, described (`crate::audit::summarize`).
        losses: Vec<String>,
    },
    /// `refresh` / `new-overlay`: the overlays the edits go to would lose lines of an earlier
    /// overlay, or bring back lines upstream deleted, that the series before did not
    /// (`crate::audit`, `check`'s DROPS).
    #[error("the edits lose lines that are not their overlay's to drop:\n    {}\nnothing was written", losses.join("\n    "))]
    EditsDrop {
        /// Each run of lost lines, with the overlay that would lose it.
        losses: Vec<String>,
    },
    /// `bump-pin --continue`: the resolved bump tree carries none of the overlay's changes.
    #[error("the resolved tree carries none of this overlay's changes")]
    ResolutionEmpty,
    /// `bump-pin --continue`: conflict markers remain in the files the merge wrote.
    #[error("conflict markers remain in {dir}: {}", markers.join(", "))]
    ConflictMarkers {
        /// The bump tree, as given.
        dir: String,
        /// Each marker as `path:line`.
        markers: Vec<String>,
    },
    /// `bump-pin` with overlay files in the folder that the series does not list: the bump would
    /// leave them at the old pin, where nothing applies them again.
    #[error("{} overlay file(s) not listed in the series would be stranded at the old pin by the bump: {}; nothing was written", files.len(), files.join(", "))]
    UnlistedOverlays {
        /// The unlisted `*.patch` file names.
        files: Vec<String>,
    },
    /// `bump-pin --continue`: pins.toml, the series or an overlay changed since the bump stopped.
    #[error(
        "pins.toml, the series or an overlay changed since the bump started; `bump-pin --abort` and start again"
    )]
    ChangedSinceBumpStarted,
    /// `bump-pin` to a target that is not a descendant of the pin, without `--allow-downgrade`.
    #[error("refusing to move the pin backwards: {reverts}; nothing was written")]
    Downgrade {
        /// What the move reverts, in words (`<rev> is an ancestor of the pin <pin>: ...`).
        reverts: String,
    },
    /// A new `bump-pin` while one is in progress in the bump tree (boxed: a refusal stays small).
    #[error(
        "a bump to {} is in progress in {} (resolving {}): finish it with `{}`, or abandon it with `{}`",
        .0.to, .0.dir, .0.resolving, .0.finish, .0.abandon
    )]
    BumpInProgress(Box<BumpInProgress>),
    /// `bump-pin --continue` or `--abort` with no bump in progress.
    #[error("no bump in progress in {dir}{}", if *continuing { " to continue" } else { "" })]
    NoBumpInProgress {
        /// The bump tree, as given.
        dir: String,
        /// Whether `--continue` asked (else `--abort`).
        continuing: bool,
    },
    /// `bump-pin --continue` to another target than the bump in progress.
    #[error("the bump in progress goes to {goes_to}, not {asked}")]
    OtherBumpTarget {
        /// Where the bump in progress goes (abbreviated).
        goes_to: String,
        /// The target asked for (abbreviated).
        asked: String,
    },
    /// A tree entry git checkout would refuse (`..`, `.git`, empty, not UTF-8).
    #[error(
        "commit {commit}: the tree entry {path:?} is not a safe file name (empty, `.`, `..`, `.git` or not UTF-8); refused, as git checkout refuses it"
    )]
    UnsafePath {
        /// The commit whose tree holds it.
        commit: String,
        /// The entry's path as far as it was read.
        path: String,
    },
}

/// `"<file>:<line>: "`, or nothing for a refusal about no one file.
fn located(at: &Option<Location>) -> String {
    at.as_ref().map(|a| format!("{a}: ")).unwrap_or_default()
}

/// The bump in progress a new `bump-pin` found ([`Refusal::BumpInProgress`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BumpInProgress {
    /// Where it goes (abbreviated).
    pub to: String,
    /// The bump tree, as given.
    pub dir: String,
    /// The overlay it stopped at.
    pub resolving: String,
    /// The command that finishes it (the caller's `--continue`).
    pub finish: String,
    /// The command that abandons it (the caller's `--abort`).
    pub abandon: String,
}

fn help_line(help: &Option<Help>) -> String {
    help_line_with(help, &|s| s.to_string())
}

/// `"\n  help: …"` with each step written by `step`, or nothing.
fn help_line_with(help: &Option<Help>, step: &dyn Fn(&NextStep) -> String) -> String {
    help.as_ref()
        .map(|h| format!("\n  help: {}", h.render(step)))
        .unwrap_or_default()
}

/// The first 20 lines of a list, then "..." (a refusal lists what it saw, not all of it).
fn shown(list: &[String]) -> String {
    let mut out: Vec<&str> = list.iter().take(20).map(String::as_str).collect();
    if list.len() > 20 {
        out.push("...");
    }
    out.join("\n    ")
}

/// "No such file or directory", without Rust's " (os error 2)".
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Bad input at `path` (and `line`).
    pub fn input(path: impl AsRef<Path>, line: Option<usize>, message: impl Into<String>) -> Self {
        Error::Input {
            at: Location::new(path.as_ref(), line),
            message: message.into(),
            help: None,
            kind: InputKind::Other,
        }
    }

    /// A documented refusal about `path` (and `line`).
    pub fn refused(path: impl AsRef<Path>, line: Option<usize>, refusal: Refusal) -> Self {
        Error::Refused {
            at: Some(Location::new(path.as_ref(), line)),
            refusal,
            help: None,
        }
    }

    /// Adds what to do (printed as `help:` under the message) to an input error or a refusal:
    /// text, or a [`Help`] naming the commands to run next.
    pub fn with_help(mut self, text: impl Into<Help>) -> Self {
        if let Error::Input { help, .. } | Error::Refused { help, .. } = &mut self {
            *help = Some(text.into());
        }
        self
    }

    /// What to do about it, for input errors and refusals that say.
    pub fn help(&self) -> Option<&Help> {
        match self {
            Error::Input { help, .. } | Error::Refused { help, .. } => help.as_ref(),
            _ => None,
        }
    }

    /// The message as `Display` writes it, each next step written by `step` (a CLI's program
    /// name and global flags) instead of as its bare subcommand.
    pub fn render(&self, step: &dyn Fn(&NextStep) -> String) -> String {
        match self {
            Error::Input {
                at, message, help, ..
            } => format!("{at}: {message}{}", help_line_with(help, step)),
            Error::Refused { at, refusal, help } => {
                format!("{}{refusal}{}", located(at), help_line_with(help, step))
            }
            _ => self.to_string(),
        }
    }

    /// Tags an untagged input error as being about `kind` (a parser's entry point calls it, so the
    /// innermost parser's tag wins: a patch error found while loading a series stays a patch error).
    pub fn of(mut self, which: InputKind) -> Self {
        if let Error::Input { kind, .. } = &mut self
            && *kind == InputKind::Other
        {
            *kind = which;
        }
        self
    }

    /// The coarse kind, for exit codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Input { kind, .. } => ErrorKind::Input(*kind),
            Error::Refused { .. } => ErrorKind::Refused,
            Error::Apply { .. } => ErrorKind::Apply,
            Error::Io { .. } => ErrorKind::Io,
            Error::Git { .. } => ErrorKind::Git,
        }
    }

    /// The refusal, when this is one.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Error::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }

    /// Where the error is, for input errors and refusals.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Error::Input { at, .. } => Some(at),
            Error::Refused { at, .. } => at.as_ref(),
            _ => None,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            err: source,
        }
    }

    /// A libgit2 error while doing `context`.
    pub fn git(context: impl Into<String>, source: git2::Error) -> Self {
        Error::Git {
            context: context.into(),
            err: source,
        }
    }
}

/// A refusal about the whole request rather than one file (its message says what it is about).
impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        Error::Refused {
            at: None,
            refusal,
            help: None,
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

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn not_ours_names_the_state_file() {
        let msg = Refusal::NotOurs.to_string();
        assert!(msg.contains(&format!("(no {})", crate::materialize::STATE_FILE)));
    }
}
