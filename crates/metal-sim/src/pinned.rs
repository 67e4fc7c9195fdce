//! Reading the project's pinned tree (pristine and patched) through the
//! overlay engine.

use std::path::Path;

use anyhow::Result;

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
    use overlay::project::{Project, apply_series};
    let project = Project::load(root)?;
    let up = project.upstream(upstream)?;
    let series = project.series(up)?;
    let repo = project.open_upstream(up, &overlay::upstream::default_cache_root(), &mut |_| {})?;
    let applied = apply_series(&repo, &up.rev, &series)?;
    Ok(Pinned {
        pristine: TreeFiles::from_tree("pristine", &applied.base, &repo)?,
        patched: TreeFiles::from_tree("patched", &applied.result, &repo)?,
        rev: up.rev.clone(),
        overlays: series.overlays.len(),
    })
}
