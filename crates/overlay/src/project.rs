//! A project: a folder holding `pins.toml` and its overlay folders. Ties the manifest, the series and
//! the upstream cache together for the commands.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::help::{Help, NextStep};
use crate::manifest::{Extras, Pins, Upstream};
use crate::series::Series;
use crate::tree::{OverlayOutcome, Tree};
use crate::upstream::{FetchProgress, UpstreamRepo};

/// A project: the folder holding `pins.toml`, and the pins.
pub struct Project {
    /// The project folder.
    pub root: PathBuf,
    /// Its `pins.toml`.
    pub pins: Pins,
}

/// The pinned upstream tree with the series applied.
pub struct Applied {
    /// The upstream tree at the pin.
    pub base: Tree,
    /// That tree with every overlay applied.
    pub result: Tree,
    /// What each overlay did, in series order.
    pub outcomes: Vec<OverlayOutcome>,
}

impl Project {
    /// Loads the project at `root` (its `pins.toml`, keys beyond the engine's as `extras` says).
    pub fn load(root: &Path, extras: &Extras<'_>) -> Result<Project> {
        let pins = Pins::load(root, extras)?;
        Ok(Project {
            root: root.to_path_buf(),
            pins,
        })
    }

    /// The upstream named `name`, or the default (first) one.
    pub fn upstream(&self, name: Option<&str>) -> Result<&Upstream> {
        self.pins.upstream(name)
    }

    /// The overlay folder of `up`.
    pub fn overlay_dir(&self, up: &Upstream) -> PathBuf {
        self.root.join(&up.overlays)
    }

    /// The series of `up`; refused when its overlay folder is missing.
    pub fn series(&self, up: &Upstream) -> Result<Series> {
        let dir = self.overlay_dir(up);
        if !dir.is_dir() {
            return Err(Error::input(
                &self.pins.path,
                Some(up.line),
                format!(
                    "upstream.{}.overlays: {} is not a folder",
                    up.name,
                    dir.display()
                ),
            )
            .with_help("create it with an empty `series` file (no overlays)"));
        }
        Series::load(&dir)
    }

    /// Opens (fetching when needed) the cache clone of `up` under `cache_root`; errors name pins.toml's line.
    pub fn open_upstream(
        &self,
        up: &Upstream,
        cache_root: &Path,
        progress: &mut dyn FnMut(FetchProgress),
    ) -> Result<UpstreamRepo> {
        let text = std::fs::read_to_string(&self.pins.path).unwrap_or_default();
        let effective = crate::upstream::rewrite_url(&up.url)?;
        let local = effective.strip_prefix("file://").unwrap_or(&effective);
        let is_path = local.starts_with('/') || local.starts_with('.') || !local.contains(':');
        if is_path && !Path::new(local).exists() && !self.root.join(local).exists() {
            let via = if effective == up.url {
                String::new()
            } else {
                format!(" (as {effective}, through git's insteadOf)")
            };
            return Err(Error::input(
                &self.pins.path,
                key_line(&text, up.line, "url"),
                format!("upstream.{}.url: {}{via} does not exist", up.name, up.url),
            )
            .with_help("point url at a git repository (a URL or an existing local path)"));
        }
        UpstreamRepo::open(cache_root, &up.name, &up.url, &up.rev, progress).map_err(|e| match e {
            // The cache names pins.toml without knowing where it is: give the file and the line.
            Error::Input {
                at,
                message,
                help,
                kind,
            } if at.path == Path::new("pins.toml") => Error::Input {
                at: crate::error::Location::new(&self.pins.path, key_line(&text, up.line, "rev")),
                message: format!("upstream.{}.rev: {message}", up.name),
                help,
                kind,
            },
            other => other,
        })
    }
}

/// The 1-based line of `key = ...` in the table that starts at line `table`.
fn key_line(text: &str, table: usize, key: &str) -> Option<usize> {
    text.lines()
        .enumerate()
        .skip(table)
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|(i, _)| i + 1)
}

/// Applies every overlay of `series`, in order, to the tree at `rev`.
pub fn apply_series(repo: &UpstreamRepo, rev: &str, series: &Series) -> Result<Applied> {
    let id = git2::Oid::from_str(rev).map_err(|e| Error::git(format!("bad commit id {rev}"), e))?;
    let base = repo.tree_at(id)?;
    let mut result = base.clone();
    let mut outcomes = Vec::new();
    for ov in &series.overlays {
        let before = result.clone();
        let outcome = result.apply_overlay(ov, repo)?;
        // An overlay whose change the tree already has applies only elsewhere, a second time
        // (the pin moved past its merge without bump-pin): refused, as canonicalize refuses it.
        if outcome.offsets().next().is_some() && crate::check::already_upstream(ov, &before, repo)?
        {
            return Err(
                Error::refused(&ov.path, None, crate::Refusal::UpstreamedAtPin).with_help(
                    Help::new(
                        "retire it: delete it and its series line, or put the old rev back and ",
                    )
                    .step(crate::help::drop_upstreamed())
                    .text(" (")
                    .step(NextStep::plain("check"))
                    .text(" lists it as UPSTREAMED); nothing was written"),
                ),
            );
        }
        outcomes.push(outcome);
    }
    Ok(Applied {
        base,
        result,
        outcomes,
    })
}
