//! One lock per project, so two commands never interleave their writes (or read a half-written
//! project).
//!
//! It is an OS advisory lock (`flock`) on the project folder itself, not a lock *file* whose
//! existence means "locked": the kernel releases it when its holder dies, even by SIGKILL, so a
//! stale lock cannot exist, and taking it creates nothing on disk (a refused command changes
//! nothing). The folder, unlike pins.toml, is never replaced by a rename, so every process locks
//! the same inode.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::io::txn::{self, Recovery};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// How a project lock is held.
pub enum Mode {
    /// Readers (status, check, drift): many at once, none while a writer holds it.
    Shared,
    /// Writers (apply, refresh, bump-pin, ...): alone.
    Exclusive,
}

/// Held while alive.
#[derive(Debug)]
pub struct ProjectLock {
    _file: File,
    /// The locked folder.
    pub path: PathBuf,
    /// What the lock's acquisition recovered from a killed writer, if anything.
    pub recovery: Recovery,
}

/// Takes the project lock, waiting (and calling `on_wait` once with the holder's description) if
/// another process holds it. Then finishes any write a killed process left behind.
pub fn lock_project(
    root: &Path,
    mode: Mode,
    command: &str,
    on_wait: &mut dyn FnMut(&str),
) -> Result<ProjectLock> {
    let path = root.to_path_buf();
    let file = File::open(&path).at(&path)?;
    // A reader that finds an interrupted write takes the lock exclusively once to recover it.
    let first = if mode == Mode::Shared && txn::pending(root) {
        Mode::Exclusive
    } else {
        mode
    };
    acquire(&file, &path, first, command, on_wait)?;
    let recovery = if first == Mode::Exclusive {
        txn::recover(root)?
    } else {
        Recovery::Nothing
    };
    if first != mode {
        // Downgrade: flock converts in place, but not atomically; a writer may slip in, which is fine.
        file.unlock().at(&path)?;
        acquire(&file, &path, mode, command, on_wait)?;
    }
    Ok(ProjectLock {
        _file: file,
        path,
        recovery,
    })
}

fn acquire(
    file: &File,
    path: &Path,
    mode: Mode,
    command: &str,
    on_wait: &mut dyn FnMut(&str),
) -> Result<()> {
    let tried = match mode {
        Mode::Shared => file.try_lock_shared(),
        Mode::Exclusive => file.try_lock(),
    };
    match tried {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            on_wait(&format!(
                "`{command}`: waiting for another command on {} to finish",
                path.display()
            ));
            match mode {
                Mode::Shared => file.lock_shared(),
                Mode::Exclusive => file.lock(),
            }
            .at(path)
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_and_is_released_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let a = lock_project(d.path(), Mode::Exclusive, "first", &mut |_| {}).unwrap();
        let f = File::open(d.path()).unwrap();
        assert!(matches!(
            f.try_lock_shared(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "created a file"
        );
        drop(a);
        f.try_lock_shared().unwrap();
    }

    #[test]
    fn readers_share() {
        let d = tempfile::tempdir().unwrap();
        let _a = lock_project(d.path(), Mode::Shared, "a", &mut |_| {}).unwrap();
        let _b = lock_project(d.path(), Mode::Shared, "b", &mut |_| panic!("waited")).unwrap();
    }
}
