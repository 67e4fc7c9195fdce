//! All-or-nothing changes to several files (overlays, the series, pins.toml, a tree's state file),
//! across a crash at any point.
//!
//! A journal in the project root makes it so:
//! 1. the journal is written *prepared*, naming every temporary file about to exist;
//! 2. every new content is written to a temporary sibling and flushed;
//! 3. the journal is rewritten *committed* (one atomic rename: the commit point);
//! 4. temporaries are renamed over their targets, deletions done;
//! 5. the journal is removed.
//!
//! [`recover`], run under the project lock before any command reads the project, finishes what a
//! killed process left: a prepared journal is rolled back (temporaries deleted, nothing changed), a
//! committed one rolled forward (the remaining renames and deletions done). Either way the files
//! are entirely old or entirely new.

use std::path::{Path, PathBuf};

use crate::error::{Error, Refusal, Result};
use crate::io::fsx;

/// The journal's file name, in the project folder.
pub const JOURNAL: &str = ".overlay-txn.json";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Journal {
    version: u32,
    /// What wrote it, for the recovery message.
    command: String,
    pid: u32,
    committed: bool,
    ops: Vec<Op>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Write { path: PathBuf, tmp: PathBuf },
    Remove { path: PathBuf },
}

/// Changes to make together; nothing happens before [`Txn::commit`].
pub struct Txn {
    root: PathBuf,
    command: String,
    changes: Vec<(PathBuf, Option<Vec<u8>>)>,
    /// Files that must still hold what the command read (blob id; `None`: must not exist).
    expect: Vec<(PathBuf, Option<git2::Oid>)>,
    /// The refusal's wording when one does not: since when, and what to do.
    since: String,
    help: String,
}

/// What [`recover`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// No journal: nothing to do.
    Nothing,
    /// A write interrupted before its commit point: the listed temporaries were deleted.
    RolledBack {
        /// The command that was interrupted.
        command: String,
        /// Its process id.
        pid: u32,
    },
    /// A write interrupted after its commit point: the listed files now hold their new content.
    RolledForward {
        /// The command that was interrupted.
        command: String,
        /// Its process id.
        pid: u32,
        /// The files that were finished.
        files: Vec<PathBuf>,
    },
}

impl Txn {
    /// A transaction whose journal lives in `root` (the project folder); `command` names the writer
    /// in the recovery message.
    pub fn new(root: &Path, command: &str) -> Txn {
        Txn {
            root: root.to_path_buf(),
            command: command.to_string(),
            changes: Vec::new(),
            expect: Vec::new(),
            since: format!("while {command} was running"),
            help: format!("run {command} again"),
        }
    }

    /// Precondition of the commit: `path` still holds the blob `read` (its git blob id when the
    /// command read it; `None`: it did not exist). Otherwise [`Txn::commit`] writes nothing and
    /// returns [`Refusal::ChangedOnDisk`] (never overwrite a user's edit).
    pub fn expect_unchanged(&mut self, path: impl Into<PathBuf>, read: Option<git2::Oid>) {
        self.expect.push((path.into(), read));
    }

    /// The wording of the "changed on disk" refusal: since when (`"since the bump started"`) and
    /// what to do. Defaults to `"while <command> was running"` / `"run <command> again"`.
    pub fn when_changed(&mut self, since: impl Into<String>, help: impl Into<String>) {
        self.since = since.into();
        self.help = help.into();
    }

    /// Stages `bytes` as the new content of `path`.
    pub fn write(&mut self, path: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) {
        self.changes.push((path.into(), Some(bytes.into())));
    }

    /// Stages the removal of `path`.
    pub fn remove(&mut self, path: impl Into<PathBuf>) {
        self.changes.push((path.into(), None));
    }

    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Checks every [`Txn::expect_unchanged`] precondition, then makes every staged change or none
    /// (see the module documentation).
    pub fn commit(self) -> Result<()> {
        for (path, read) in &self.expect {
            let now = std::fs::read(path).ok().map(|b| crate::tree::blob_id(&b));
            if now != *read {
                return Err(Error::refused(
                    path,
                    None,
                    Refusal::ChangedOnDisk {
                        since: self.since.clone(),
                    },
                )
                .with_help(self.help.clone()));
            }
        }
        if self.changes.is_empty() {
            return Ok(());
        }
        let journal_path = self.root.join(JOURNAL);
        if journal_path.exists() {
            return Err(Error::refused(&journal_path, None, Refusal::NotRecovered)
                .with_help("run any command of this tool again: it recovers before reading"));
        }
        let ops: Vec<Op> = self
            .changes
            .iter()
            .map(|(path, bytes)| match bytes {
                Some(_) => Op::Write {
                    path: path.clone(),
                    tmp: fsx::sibling(path, "txn"),
                },
                None => Op::Remove { path: path.clone() },
            })
            .collect();
        let mut journal = Journal {
            version: 1,
            command: self.command.clone(),
            pid: std::process::id(),
            committed: false,
            ops,
        };
        write_journal(&journal_path, &journal)?;
        let res = (|| {
            for ((_, bytes), op) in self.changes.iter().zip(&journal.ops) {
                if let (Some(b), Op::Write { tmp, path }) = (bytes, op) {
                    if let Some(dir) = path.parent() {
                        fsx::create_dir_all(dir)?;
                    }
                    fsx::write(tmp, b)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = res {
            // Not committed: undo quietly, then report the first error.
            let _ = roll_back(&journal.ops);
            let _ = fsx::remove_file(&journal_path);
            return Err(e);
        }
        journal.committed = true;
        write_journal(&journal_path, &journal)?;
        roll_forward(&journal.ops)?;
        fsx::remove_file(&journal_path)
    }
}

fn write_journal(path: &Path, j: &Journal) -> Result<()> {
    let text = serde_json::to_string_pretty(j).expect("journal serializes");
    fsx::write_atomic(path, text.as_bytes())?;
    if let Some(dir) = path.parent() {
        fsx::sync_dir(dir)?;
    }
    Ok(())
}

fn roll_back(ops: &[Op]) -> Result<()> {
    for op in ops {
        if let Op::Write { tmp, .. } = op
            && tmp.exists()
        {
            fsx::remove_file(tmp)?;
        }
    }
    Ok(())
}

/// Idempotent: a rename already done left no temporary; a deletion already done left no file.
fn roll_forward(ops: &[Op]) -> Result<Vec<PathBuf>> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut done = Vec::new();
    for op in ops {
        match op {
            Op::Write { path, tmp } => {
                if tmp.exists() {
                    fsx::rename(tmp, path)?;
                    done.push(path.clone());
                }
                if let Some(d) = path.parent() {
                    dirs.insert(d.to_path_buf());
                }
            }
            Op::Remove { path } => {
                if std::fs::symlink_metadata(path).is_ok() {
                    fsx::remove_file(path)?;
                    done.push(path.clone());
                }
                if let Some(d) = path.parent() {
                    dirs.insert(d.to_path_buf());
                }
            }
        }
    }
    for d in dirs {
        if d.is_dir() {
            fsx::sync_dir(&d)?;
        }
    }
    Ok(done)
}

/// Finishes or undoes a write that a killed process left in `root`. Call it holding the project's
/// exclusive lock.
pub fn recover(root: &Path) -> Result<Recovery> {
    let journal_path = root.join(JOURNAL);
    // A torn journal temporary means the process died before the journal existed.
    let tmp = fsx::sibling(&journal_path, "tmp");
    if tmp.exists() {
        fsx::remove_file(&tmp)?;
    }
    let text = match std::fs::read_to_string(&journal_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovery::Nothing),
        Err(e) => return Err(Error::io(&journal_path, e)),
    };
    let journal: Journal = serde_json::from_str(&text).map_err(|e| {
        Error::input(&journal_path, Some(e.line()), format!("unreadable journal: {e}")).with_help(
            "it was not written by this tool's atomic rename; inspect the files it names, then delete it",
        )
    })?;
    let out = if journal.committed {
        let files = roll_forward(&journal.ops)?;
        Recovery::RolledForward {
            command: journal.command,
            pid: journal.pid,
            files,
        }
    } else {
        roll_back(&journal.ops)?;
        Recovery::RolledBack {
            command: journal.command,
            pid: journal.pid,
        }
    };
    fsx::remove_file(&journal_path)?;
    Ok(out)
}

/// Whether a write was interrupted in `root` (read-only commands refuse to read a half-written project).
pub fn pending(root: &Path) -> bool {
    let journal = root.join(JOURNAL);
    journal.exists() || fsx::sibling(&journal, "tmp").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_writes_and_removes_together() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("sub/b");
        std::fs::write(&a, "old a").unwrap();
        let gone = d.path().join("gone");
        std::fs::write(&gone, "x").unwrap();
        let mut t = Txn::new(d.path(), "test");
        t.write(&a, "new a");
        t.write(&b, "new b");
        t.remove(&gone);
        t.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new a");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new b");
        assert!(!gone.exists());
        assert!(!d.path().join(JOURNAL).exists());
        assert_eq!(recover(d.path()).unwrap(), Recovery::Nothing);
    }

    fn journal(root: &Path, committed: bool, ops: Vec<Op>) {
        let j = Journal {
            version: 1,
            command: "test".into(),
            pid: 1,
            committed,
            ops,
        };
        std::fs::write(root.join(JOURNAL), serde_json::to_string(&j).unwrap()).unwrap();
    }

    #[test]
    fn prepared_journal_rolls_back_committed_rolls_forward() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, "old").unwrap();
        let tmp = fsx::sibling(&a, "txn");
        std::fs::write(&tmp, "new").unwrap();
        let ops = vec![Op::Write {
            path: a.clone(),
            tmp: tmp.clone(),
        }];
        journal(d.path(), false, ops.clone());
        assert!(matches!(
            recover(d.path()).unwrap(),
            Recovery::RolledBack { .. }
        ));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "old");
        assert!(!tmp.exists());

        std::fs::write(&tmp, "new").unwrap();
        journal(d.path(), true, ops);
        assert!(matches!(
            recover(d.path()).unwrap(),
            Recovery::RolledForward { .. }
        ));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "new");
        assert!(!d.path().join(JOURNAL).exists());
    }

    #[test]
    fn a_second_commit_refuses_while_a_journal_is_unrecovered() {
        let d = tempfile::tempdir().unwrap();
        journal(d.path(), true, vec![]);
        let mut t = Txn::new(d.path(), "test");
        t.write(d.path().join("a"), "x");
        let e = t.commit().unwrap_err();
        assert_eq!(e.refusal(), Some(&Refusal::NotRecovered), "{e}");
        assert!(e.to_string().contains("interrupted write"), "{e}");
        assert!(!d.path().join("a").exists());
    }

    #[test]
    fn a_file_changed_since_it_was_read_refuses_the_whole_commit() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, "read").unwrap();
        let read = Some(crate::tree::blob_id(b"read"));
        let commit = |expect_b: Option<git2::Oid>| {
            let mut t = Txn::new(d.path(), "refresh");
            t.expect_unchanged(&a, read);
            t.expect_unchanged(&b, expect_b);
            t.write(&a, "new a");
            t.write(&b, "new b");
            t.commit()
        };
        // b appeared since it was read as missing: nothing is written.
        std::fs::write(&b, "user's").unwrap();
        let e = commit(None).unwrap_err();
        assert!(
            matches!(e.refusal(), Some(Refusal::ChangedOnDisk { .. })),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: changed on disk while refresh was running; nothing was written\n  help: run refresh again",
                b.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "read");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "user's");
        // Both as read: the commit goes through.
        commit(Some(crate::tree::blob_id(b"user's"))).unwrap();
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "new b");
    }
}
