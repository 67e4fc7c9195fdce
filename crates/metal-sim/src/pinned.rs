//! Reading the project's pinned tree (pristine and patched) through the
//! overlay engine.

use std::path::Path;

use crate::error::{Error, Result};
use crate::extract::TreeFiles;

/// The pinned upstream without (`pristine`) and with (`patched`) the series.
pub struct Pinned {
    pub pristine: TreeFiles,
    pub patched: TreeFiles,
    pub rev: String,
    pub overlays: usize,
}

/// Loads the project at `root` (the folder of pins.toml) and reads the files
/// the emulator needs from both trees.
pub fn load(root: &Path, upstream: Option<&str>) -> Result<Pinned> {
    load_with(root, upstream, &[])
}

/// [`load`] with `extra` overlay files of the overlay folder applied after
/// the series (those the series already lists are not applied twice), e.g.
/// to check overlays before they are added to the series.
pub fn load_with(root: &Path, upstream: Option<&str>, extra: &[&str]) -> Result<Pinned> {
    use overlay::project::{Project, apply_series};
    // The pin and the series only: the build settings beside them are not read here.
    let project = Project::load(root, &overlay::manifest::Extras::Unread)?;
    let up = project.upstream(upstream)?;
    let mut series = project.series(up)?;
    for name in extra {
        if series.overlays.iter().any(|o| o.name == *name) {
            continue;
        }
        let path = series.dir.join(name);
        let text = std::fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        series
            .overlays
            .push(overlay::patch::parse_overlay(name, &path, &text)?);
    }
    let repo = project.open_upstream(up, &overlay::upstream::default_cache_root(), &mut |_| {})?;
    let applied = apply_series(&repo, &up.rev, &series)?;
    Ok(Pinned {
        pristine: TreeFiles::from_tree("pristine", &applied.base, &repo)?,
        patched: TreeFiles::from_tree("patched", &applied.result, &repo)?,
        rev: up.rev.clone(),
        overlays: series.overlays.len(),
    })
}
