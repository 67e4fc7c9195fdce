//! Pinned sources (`[upstream.<up>.sources.<name>]` of pins.toml): exported from their pinned
//! commit, through the tool's cache of bare clones, into a folder CMake's FetchContent is
//! pointed at (`FETCHCONTENT_SOURCE_DIR_<NAME>`). Used by the CUDA bundle and `test-upstream`.

use std::path::{Path, PathBuf};

use crate::settings::Source;
use anyhow::{Context, Result, bail};
use overlay::upstream::{UpstreamRepo, default_cache_root};

use crate::progress::Progress;

/// Exports a pinned source's `paths` (in its layout) into `dest`, then each of its `submodules`
/// from the source it names (`all`: the upstream's sources); returns the file count.
pub fn export_source(s: &Source, all: &[Source], dest: &Path) -> Result<usize> {
    let mut files = export_one(s, dest)?;
    for (at, name) in &s.submodules {
        let sub = all
            .iter()
            .find(|o| &o.name == name)
            .with_context(|| format!("pins.toml:{}: no source {name} for {at}", s.line))?;
        files += export_one(sub, &dest.join(at))?;
    }
    Ok(files)
}

/// The export of `s` (with its submodules) in the tool's cache, made once per commit:
/// `<cache>/sources/<name>-<rev>/`, written beside and renamed into place, so it is whole or absent.
pub fn cached_source(s: &Source, all: &[Source]) -> Result<PathBuf> {
    let mut key = s.rev.clone();
    for (at, name) in &s.submodules {
        if let Some(sub) = all.iter().find(|o| &o.name == name) {
            key.push_str(&format!("+{at}={}", sub.rev));
        }
    }
    let dir = default_cache_root().join("sources");
    let dest = dir.join(format!("{}-{}", s.name, crate::build_mlx::short_hash(&key)));
    if dest.is_dir() {
        return Ok(dest);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let stage = tempfile::Builder::new()
        .prefix(&format!(".{}-", s.name))
        .tempdir_in(&dir)?;
    export_source(s, all, &stage.path().join("tree"))?;
    match std::fs::rename(stage.path().join("tree"), &dest) {
        Ok(()) => Ok(dest),
        // Another run exported it meanwhile: same commit, same content.
        Err(_) if dest.is_dir() => Ok(dest),
        Err(e) => Err(e).with_context(|| format!("{}: cannot write", dest.display())),
    }
}

fn export_one(s: &Source, dest: &Path) -> Result<usize> {
    let mut bar = Progress::new(&format!("fetching {}", s.name));
    let repo = UpstreamRepo::open(
        &default_cache_root(),
        &format!("source-{}", s.name),
        &s.url,
        &s.rev,
        &mut |p| bar.fetch(p),
    )?;
    bar.finish();
    let git = repo.repo();
    let tree = git
        .find_commit(repo.resolve(&s.rev)?)
        .and_then(|c| c.tree())
        .with_context(|| format!("{}: commit {} has no tree", s.url, s.rev))?;
    let mut files = 0;
    let mut failure = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        let path = format!("{dir}{}", entry.name().unwrap_or(""));
        if entry.kind() != Some(git2::ObjectType::Blob) || !selected(s, &path) {
            return git2::TreeWalkResult::Ok;
        }
        let Some(rel) = layout_path(s.layout.as_deref(), &path) else {
            return git2::TreeWalkResult::Ok;
        };
        match write_blob(git, entry, &dest.join(rel)) {
            Ok(()) => files += 1,
            Err(e) => {
                failure = Some(e);
                return git2::TreeWalkResult::Abort;
            }
        }
        git2::TreeWalkResult::Ok
    })
    .ok();
    if let Some(e) = failure {
        return Err(e.context(format!("exporting {} at {}", s.name, s.rev)));
    }
    if files == 0 {
        bail!(
            "pins.toml:{}: source {} exports no file at {} (check its paths)",
            s.line,
            s.name,
            s.rev
        );
    }
    Ok(files)
}

fn selected(s: &Source, path: &str) -> bool {
    s.paths.is_empty()
        || s.paths.iter().any(|p| {
            path == p
                || (path.starts_with(p.as_str()) && path.as_bytes().get(p.len()) == Some(&b'/'))
        })
}

/// Where a repository path lands in the exported source.
pub fn layout_path(layout: Option<&str>, path: &str) -> Option<String> {
    match layout {
        None => Some(path.to_string()),
        // CCCL's release archives: include/{cuda,nv,cub,thrust} (what MLX's FetchContent URL holds).
        Some("cccl-release") => path
            .strip_prefix("libcudacxx/include/")
            .map(|r| format!("include/{r}"))
            .or_else(|| path.strip_prefix("cub/").map(|r| format!("include/{r}")))
            .or_else(|| path.strip_prefix("thrust/").map(|r| format!("include/{r}"))),
        Some(_) => None,
    }
}

fn write_blob(git: &git2::Repository, entry: &git2::TreeEntry, to: &Path) -> Result<()> {
    let blob = git.find_blob(entry.id())?;
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if entry.filemode() == 0o120000 {
        let target = String::from_utf8_lossy(blob.content()).into_owned();
        std::os::unix::fs::symlink(target, to)?;
        return Ok(());
    }
    std::fs::write(to, blob.content())?;
    if entry.filemode() == 0o100755 {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::layout_path;

    #[test]
    fn cccl_release_layout_is_include_of_the_three_projects() {
        let l = Some("cccl-release");
        assert_eq!(
            layout_path(l, "libcudacxx/include/cuda/std/array").as_deref(),
            Some("include/cuda/std/array")
        );
        assert_eq!(
            layout_path(l, "cub/cub/cub.cuh").as_deref(),
            Some("include/cub/cub.cuh")
        );
        assert_eq!(
            layout_path(l, "thrust/thrust/version.h").as_deref(),
            Some("include/thrust/version.h")
        );
        assert_eq!(layout_path(l, "README.md"), None);
        assert_eq!(
            layout_path(None, "c/CMakeLists.txt").as_deref(),
            Some("c/CMakeLists.txt")
        );
    }
}
