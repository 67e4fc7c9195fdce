//! The two sides of an interdiff: the series (and pin) at a commit of the fork's own history, read
//! from git's objects, or in the working tree, read from disk.

use std::path::{Path, PathBuf};

use super::{Error, Side};
use crate::manifest::{Extras, PINS_FILE, Pins};
use crate::patch::{Overlay, parse_overlay};
use crate::series::{SERIES_FILE, Series, parse_series_names};

/// One side, read: where it came from, its pin, its overlays in series order.
pub(crate) struct Read {
    /// The upstream's name in that side's pins.toml.
    pub upstream: String,
    pub side: Side,
    pub overlays: Vec<Overlay>,
}

/// The fork's repository and where the project sits in it.
pub(crate) struct Fork {
    pub repo: git2::Repository,
    /// The project folder relative to the work tree, `/`-separated, empty or ending in `/`.
    pub prefix: String,
}

impl Fork {
    /// The git repository holding `root`.
    pub fn open(root: &Path) -> Result<Fork, Error> {
        let repo = git2::Repository::discover(root).map_err(|_| Error::NotARepository {
            root: root.to_path_buf(),
        })?;
        let work = repo.workdir().ok_or_else(|| Error::NotARepository {
            root: root.to_path_buf(),
        })?;
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let rel = canon(root)
            .strip_prefix(canon(work))
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut prefix = rel.to_string_lossy().replace('\\', "/");
        if !prefix.is_empty() {
            prefix.push('/');
        }
        Ok(Fork { repo, prefix })
    }

    /// The commit `rev` names (anything `git rev-parse` reads: `HEAD~3`, a branch, an id).
    pub fn commit(&self, rev: &str) -> Result<git2::Commit<'_>, Error> {
        let obj = self.repo.revparse_single(rev).map_err(|e| Error::BadRev {
            rev: rev.to_string(),
            why: e.message().to_string(),
        })?;
        obj.peel_to_commit().map_err(|e| Error::BadRev {
            rev: rev.to_string(),
            why: format!("not a commit ({})", e.message()),
        })
    }

    /// The text of the project file `rel` at `commit`, if it has it.
    fn file_at(&self, commit: &git2::Commit<'_>, rel: &str) -> Result<Option<String>, Error> {
        let tree = commit.tree().map_err(git)?;
        let Ok(entry) = tree.get_path(Path::new(&format!("{}{rel}", self.prefix))) else {
            return Ok(None);
        };
        let blob = self.repo.find_blob(entry.id()).map_err(git)?;
        Ok(Some(String::from_utf8_lossy(blob.content()).into_owned()))
    }

    /// pins.toml at `commit`, parsed; its messages name `REV:path`.
    pub fn pins_at(&self, rev: &str, commit: &git2::Commit<'_>) -> Result<Pins, Error> {
        let text = self
            .file_at(commit, PINS_FILE)?
            .ok_or_else(|| Error::BadRev {
                rev: rev.to_string(),
                why: format!("it has no {}{PINS_FILE}", self.prefix),
            })?;
        let shown = PathBuf::from(format!("{rev}:{}{PINS_FILE}", self.prefix));
        // An older commit's keys beyond the engine's are not this run's to check.
        Ok(Pins::parse(&shown, &text, &Extras::Unread)?)
    }

    /// The side at fork commit `rev`: its pin of `upstream` and its series.
    pub fn read_commit(&self, rev: &str, upstream: Option<&str>) -> Result<Read, Error> {
        let commit = self.commit(rev)?;
        let pins = self.pins_at(rev, &commit)?;
        let up = pins.upstream(upstream)?;
        let dir = up
            .overlays
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let series_rel = format!("{dir}/{SERIES_FILE}");
        let series_shown = PathBuf::from(format!("{rev}:{}{series_rel}", self.prefix));
        let text = self
            .file_at(&commit, &series_rel)?
            .ok_or_else(|| Error::BadRev {
                rev: rev.to_string(),
                why: format!("it has no {}{series_rel}", self.prefix),
            })?;
        let mut overlays = Vec::new();
        for (name, line) in parse_series_names(&series_shown, &text)? {
            let rel = format!("{dir}/{name}");
            let shown = PathBuf::from(format!("{rev}:{}{rel}", self.prefix));
            let Some(raw) = self.file_at(&commit, &rel)? else {
                return Err(Error::from(crate::Error::input(
                    &series_shown,
                    Some(line),
                    format!("{name} is listed but {rev} has no such file"),
                )));
            };
            overlays.push(parse_overlay(&name, &shown, &raw)?);
        }
        let side = Side {
            rev: Some(rev.to_string()),
            commit: Some(commit.id().to_string()),
            pin: up.rev.clone(),
        };
        Ok(Read {
            upstream: up.name.clone(),
            side,
            overlays,
        })
    }

    /// The newest commit, first parents from `start`, whose pin of `upstream` is not `pin`
    /// (`start` itself when none is): `--from`'s default.
    pub fn before_pin(&self, start: &str, upstream: &str, pin: &str) -> Result<String, Error> {
        let first = self.commit(start)?;
        let mut seen: Option<(git2::Oid, bool)> = None;
        let mut c = Some(first.clone());
        while let Some(commit) = c {
            let tree = commit.tree().map_err(git)?;
            let blob = tree
                .get_path(Path::new(&format!("{}{PINS_FILE}", self.prefix)))
                .ok()
                .map(|e| e.id());
            let differs = match (blob, seen) {
                (None, _) => false,
                (Some(b), Some((s, d))) if b == s => d,
                (Some(b), _) => {
                    let id = commit.id().to_string();
                    let d = self
                        .pins_at(&id, &commit)
                        .ok()
                        .and_then(|p| p.upstream(Some(upstream)).ok().map(|u| u.rev != pin))
                        .unwrap_or(false);
                    seen = Some((b, d));
                    d
                }
            };
            if differs {
                return Ok(commit.id().to_string());
            }
            c = commit.parent(0).ok();
        }
        Ok(first.id().to_string())
    }
}

/// The working tree's side: the project as it is on disk.
pub(crate) fn read_worktree(root: &Path, upstream: Option<&str>) -> Result<Read, Error> {
    let pins = Pins::load(root, &Extras::Unread)?;
    let up = pins.upstream(upstream)?;
    let series = Series::load(&root.join(&up.overlays))?;
    let side = Side {
        rev: None,
        commit: None,
        pin: up.rev.clone(),
    };
    Ok(Read {
        upstream: up.name.clone(),
        side,
        overlays: series.overlays,
    })
}

fn git(e: git2::Error) -> Error {
    Error::Engine(crate::Error::git("reading the fork's history", e))
}
