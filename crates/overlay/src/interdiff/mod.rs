//! `interdiff`: the series at two points of the fork's own history, overlay by overlay — what a bump
//! or a refresh did to each overlay, split into context-only changes (hunk headers, context lines,
//! `index` lines, `From:`/`Date:`) and content changes (the lines it adds or removes, its files,
//! subject, message and trailers), as `git range-diff` compares two versions of a branch.
//!
//! A side is a commit of the fork (whose pins.toml and overlays are read from git's objects) or the
//! working tree. Overlays are matched by file name; an overlay only one side has is paired with one
//! of the other side by equal subject, then by equal name without its number (renamed), else it is
//! added or removed. Own `Options`/`Outcome`/`Error`, as gix-merge shapes them.

mod compare;
mod sides;

use std::path::PathBuf;

use crate::patch::Overlay;

/// What to compare.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The project folder (holding pins.toml), inside the fork's git work tree.
    pub root: PathBuf,
    /// The upstream of pins.toml (`None`: its default).
    pub upstream: Option<String>,
    /// A fork commit (`git rev-parse` syntax). `None`: the newest commit, first parents from the
    /// `to` side's commit (HEAD for the working tree), whose pin differs from the `to` side's pin;
    /// that commit itself when none does.
    pub from: Option<String>,
    /// A fork commit. `None`: the working tree.
    pub to: Option<String>,
}

/// Where one side was read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Side {
    /// The revision as given or chosen (`None`: the working tree).
    pub rev: Option<String>,
    /// Its full commit id (`None`: the working tree).
    pub commit: Option<String>,
    /// The upstream commit pinned there.
    pub pin: String,
}

impl Side {
    /// `HEAD~1 (0123456789ab)`, or `working tree`.
    pub fn label(&self) -> String {
        match (&self.rev, &self.commit) {
            (Some(r), Some(c)) if c.starts_with(r.as_str()) => c[..12.min(c.len())].to_string(),
            (Some(r), Some(c)) => format!("{r} ({})", &c[..12.min(c.len())]),
            _ => "working tree".to_string(),
        }
    }
}

/// How one overlay changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Byte for byte the same.
    Unchanged,
    /// Only what surrounds its change moved or changed (a refresh, a clean bump).
    Context,
    /// What it changes changed.
    Content,
    /// Only the `to` side has it.
    Added,
    /// Only the `from` side has it.
    Removed,
}

impl Status {
    /// The status as reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Unchanged => "unchanged",
            Status::Context => "context",
            Status::Content => "content",
            Status::Added => "added",
            Status::Removed => "removed",
        }
    }
}

/// One content change of an overlay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ContentChange {
    /// `subject`, `message`, `trailers`, `files` (what it does to which files) or `lines` (the
    /// lines it adds and removes in `file`).
    pub what: &'static str,
    /// The file, for `lines`.
    pub file: Option<String>,
    /// The interdiff: `-` an entry only the old version has, `+` one only the new version has (so
    /// `-+x` is an added line `x` the overlay no longer adds).
    pub lines: Vec<String>,
}

/// One overlay, compared.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OverlayChange {
    /// Its file name on the `to` side (the `from` side's for a removed one).
    pub name: String,
    /// Its name on the `from` side when it was renamed.
    pub renamed_from: Option<String>,
    /// How it changed.
    pub status: Status,
    /// The context-only changes.
    pub context: Vec<String>,
    /// The content changes.
    pub content: Vec<ContentChange>,
}

/// The report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// The upstream's name.
    pub upstream: String,
    /// The old side.
    pub from: Side,
    /// The new side.
    pub to: Side,
    /// Every overlay of either side: the `to` side's in series order, then the removed ones.
    pub overlays: Vec<OverlayChange>,
}

impl Outcome {
    /// What a refresh may not do: an overlay whose content changed, added or removed.
    pub fn refresh_findings(&self) -> Vec<&OverlayChange> {
        self.overlays
            .iter()
            .filter(|o| matches!(o.status, Status::Content | Status::Added | Status::Removed))
            .collect()
    }
}

/// Why there is no report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The project is not in a git work tree.
    #[error(
        "{}: not in a git work tree; interdiff reads the series at commits of the fork's history\n  help: {}",
        root.display(),
        NOT_A_REPOSITORY_HELP
    )]
    NotARepository {
        /// The project folder.
        root: PathBuf,
    },
    /// A revision that names no commit of the fork, or one without the project.
    #[error(
        "{rev}: not a fork commit to read the series from: {why}; nothing was written\n  help: {}",
        BAD_REV_HELP
    )]
    BadRev {
        /// The revision as given.
        rev: String,
        /// What git said.
        why: String,
    },
    /// A file of a side could not be read or parsed (it names its `REV:path` and line).
    #[error(transparent)]
    Engine(#[from] crate::Error),
}

const NOT_A_REPOSITORY_HELP: &str =
    "run it in the fork's git checkout (or pass --root to a project inside one)";
const BAD_REV_HELP: &str = "name a commit of this fork's history whose pins.toml and overlays to compare, e.g. HEAD~1, a branch or a commit id (`git log --oneline -- pins.toml` lists the commits that moved a pin)";

impl Error {
    /// What to do about it: the message's `help:` line, typed (for a CLI's hint).
    pub fn help(&self) -> Option<crate::Help> {
        match self {
            Error::NotARepository { .. } => Some(NOT_A_REPOSITORY_HELP.into()),
            Error::BadRev { .. } => Some(BAD_REV_HELP.into()),
            Error::Engine(e) => e.help().cloned(),
        }
    }

    /// The engine error it wraps, when it is one.
    pub fn engine(&self) -> Option<&crate::Error> {
        match self {
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }
}

/// Compares the series of the two sides `opts` names.
pub fn run(opts: &Options) -> Result<Outcome, Error> {
    let fork = sides::Fork::open(&opts.root)?;
    let to = match &opts.to {
        Some(rev) => fork.read_commit(rev, opts.upstream.as_deref())?,
        None => sides::read_worktree(&opts.root, opts.upstream.as_deref())?,
    };
    let from_rev = match &opts.from {
        Some(rev) => rev.clone(),
        None => {
            let start = opts.to.as_deref().unwrap_or("HEAD");
            fork.before_pin(start, &to.upstream, &to.side.pin)?
        }
    };
    let from = fork.read_commit(&from_rev, Some(&to.upstream))?;
    Ok(Outcome {
        upstream: to.upstream,
        overlays: pair(&from.overlays, &to.overlays),
        from: from.side,
        to: to.side,
    })
}

/// Every overlay of both sides, matched (by name, then subject, then name without its number).
fn pair(old: &[Overlay], new: &[Overlay]) -> Vec<OverlayChange> {
    let mut taken = vec![false; old.len()];
    let mut matched: Vec<Option<usize>> = new
        .iter()
        .map(|n| {
            let i = old.iter().position(|o| o.name == n.name)?;
            taken[i] = true;
            Some(i)
        })
        .collect();
    let keys: [fn(&Overlay) -> String; 2] = [|o| o.subject.clone(), |o| unnumbered(&o.name)];
    for key in keys {
        for (j, n) in new.iter().enumerate() {
            if matched[j].is_some() {
                continue;
            }
            if let Some(i) = (0..old.len()).find(|&i| !taken[i] && key(&old[i]) == key(n)) {
                taken[i] = true;
                matched[j] = Some(i);
            }
        }
    }
    let mut out: Vec<OverlayChange> = new
        .iter()
        .zip(&matched)
        .map(|(n, m)| match m {
            Some(i) => changed(&old[*i], n),
            None => alone(n, Status::Added),
        })
        .collect();
    let removed = old.iter().zip(&taken).filter(|(_, t)| !**t);
    out.extend(removed.map(|(o, _)| alone(o, Status::Removed)));
    out
}

/// `0003-fix-it.patch` -> `fix-it.patch`.
fn unnumbered(name: &str) -> String {
    let rest = name.trim_start_matches(|c: char| c.is_ascii_digit());
    rest.strip_prefix('-').unwrap_or(name).to_string()
}

fn changed(old: &Overlay, new: &Overlay) -> OverlayChange {
    let (context, content) = compare::compare(old, new);
    let status = if !content.is_empty() {
        Status::Content
    } else if old.raw != new.raw {
        Status::Context
    } else {
        Status::Unchanged
    };
    OverlayChange {
        name: new.name.clone(),
        renamed_from: (old.name != new.name).then(|| old.name.clone()),
        status,
        context,
        content,
    }
}

fn alone(o: &Overlay, status: Status) -> OverlayChange {
    OverlayChange {
        name: o.name.clone(),
        renamed_from: None,
        status,
        context: Vec::new(),
        content: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ov(name: &str, subject: &str, add: &str) -> Overlay {
        let text = format!(
            "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nDate: x\nSubject: [PATCH] {subject}\n\nWhy.\n\nOverlay-Kind: upstreamable\n---\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n a\n+{add}\n"
        );
        crate::patch::parse_overlay(name, std::path::Path::new(name), &text).unwrap()
    }

    #[test]
    fn overlays_pair_by_name_then_subject_then_unnumbered_name() {
        let old = [
            ov("0001-a.patch", "A", "1"),
            ov("0002-b.patch", "B", "2"),
            ov("0003-c.patch", "C", "3"),
            ov("0004-gone.patch", "Gone", "4"),
        ];
        let new = [
            ov("0001-a.patch", "A", "1"),
            ov("0002-bee.patch", "B", "2"),
            ov("0003-c-more.patch", "C", "3"),
            ov("0002-c.patch", "C again", "3"),
            ov("0005-new.patch", "New", "5"),
        ];
        let got: Vec<_> = pair(&old, &new)
            .into_iter()
            .map(|o| (o.name, o.renamed_from, o.status))
            .collect();
        use Status::*;
        let s = |x: &str| x.to_string();
        assert_eq!(
            got,
            vec![
                (s("0001-a.patch"), None, Unchanged),
                (s("0002-bee.patch"), Some(s("0002-b.patch")), Unchanged),
                (s("0003-c-more.patch"), Some(s("0003-c.patch")), Unchanged),
                (s("0002-c.patch"), None, Added),
                (s("0005-new.patch"), None, Added),
                (s("0004-gone.patch"), None, Removed),
            ]
        );
    }

    #[test]
    fn unnumbered_names() {
        assert_eq!(unnumbered("0003-fix-it.patch"), "fix-it.patch");
        assert_eq!(unnumbered("fix.patch"), "fix.patch");
    }
}
