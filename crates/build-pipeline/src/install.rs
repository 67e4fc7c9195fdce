//! Publishing a build's install: immutable, addressed by the full key, the oldest pruned; and the
//! atomic writes of the files readers watch (stamps, build-info).

use std::path::{Path, PathBuf};

#[cfg(not(unix))]
use crate::error::Error;
use crate::error::{Context, Result};

/// Writes `bytes` to `path` via a temporary file in the same folder and a rename, so readers
/// never see a partial file; creates the parent folder first.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let dir = path.parent().context("path without parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = || -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// Writes `bytes` to `path` only when its content differs (a build script that reruns on the
/// file's mtime is not woken by a no-op build). Returns whether it wrote.
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool> {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(false);
    }
    write_atomic(path, bytes)?;
    Ok(true)
}

/// Copies the staging install `from` to `to` whole: a temporary folder, then one rename.
pub fn publish_install(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_tree(from, &tmp)?;
    let _ = std::fs::remove_dir_all(to);
    std::fs::rename(&tmp, to).with_context(|| format!("publishing {}", to.display()))
}

/// Copies a folder recursively, symlinks as symlinks (on Unix).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type()?;
        if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&src)?;
            #[cfg(unix)]
            std::os::unix::fs::symlink(target, &dst)?;
            #[cfg(not(unix))]
            std::fs::copy(&src, &dst)
                .map(|_| ())
                .map_err(|e| Error::Message(format!("{e}: {}", target.display())))?;
        } else {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

/// Keeps the `keep` most recently published installs under `dir` (and always `current`).
pub fn prune_installs(dir: &Path, current: &str, keep: usize) -> Result<()> {
    let mut all: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy() != current
                && !e.file_name().to_string_lossy().contains(".tmp")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    all.sort();
    let excess = (all.len() + 1).saturating_sub(keep);
    for (_, p) in all.into_iter().take(excess) {
        let _ = std::fs::remove_dir_all(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_copies_whole_and_pruning_keeps_the_newest() {
        let d = tempfile::tempdir().unwrap();
        let stage = d.path().join("install");
        std::fs::create_dir_all(stage.join("lib")).unwrap();
        std::fs::write(stage.join("lib/libx.a"), "x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("libx.a", stage.join("lib/liby.a")).unwrap();
        let installs = d.path().join("installs");
        for k in ["k1", "k2", "k3"] {
            publish_install(&stage, &installs.join(k)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(std::fs::read(installs.join("k3/lib/libx.a")).unwrap(), b"x");
        #[cfg(unix)]
        assert!(installs.join("k3/lib/liby.a").is_symlink());
        prune_installs(&installs, "k1", 2).unwrap();
        let mut left: Vec<_> = std::fs::read_dir(&installs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["k1", "k3"], "the current one and the newest other");
    }

    #[test]
    fn unchanged_content_is_not_written_again() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/info.json");
        assert!(write_if_changed(&p, b"a").unwrap());
        assert!(!write_if_changed(&p, b"a").unwrap());
        assert!(write_if_changed(&p, b"b").unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"b");
    }
}
