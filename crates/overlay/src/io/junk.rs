//! What a materialized tree ignores, as git would: files matched by the tree's own `.gitignore`
//! files (each applying below its folder, deeper ones first, `!` re-including), by git's global
//! excludes (`core.excludesFile`), or by a few editor and merge leftovers (`*~`, `*.swp`, `*.orig`,
//! `*.rej`, ...) — unless apply wrote the file (a tracked file is never ignored, as in git).
//!
//! Ignored files are not edits: they neither block `refresh` nor get swept into an overlay, and
//! `apply --force` leaves them alone (an in-tree `build/` survives).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Leftovers of editors and of `patch`/merge tools, ignored below every `.gitignore` (a tree's
/// `.gitignore` can re-include them with `!`).
pub const DEFAULT_IGNORES: &[&str] = &[
    "*~",
    ".*.swp",
    ".*.swo",
    ".#*",
    "#*#",
    "*.orig",
    "*.rej",
    ".DS_Store",
];

/// The ignore rules of one tree, with the `.gitignore` files of the folders being walked.
pub struct Ignores {
    root: PathBuf,
    /// Paths apply wrote (never ignored) and every folder above one (always walked).
    tracked: BTreeSet<String>,
    tracked_dirs: BTreeSet<String>,
    /// `.gitignore` matchers of the folders from the root to the one being walked.
    stack: Vec<(PathBuf, Gitignore)>,
    global: Gitignore,
    defaults: Gitignore,
}

impl Ignores {
    /// The rules of the tree at `root`; `tracked` are the paths apply wrote there.
    pub fn new<'a>(root: &Path, tracked: impl IntoIterator<Item = &'a String>) -> Ignores {
        let tracked: BTreeSet<String> = tracked.into_iter().cloned().collect();
        let mut tracked_dirs = BTreeSet::new();
        for p in &tracked {
            let mut at = p.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                if !tracked_dirs.insert(parent.to_string()) {
                    break;
                }
                at = parent;
            }
        }
        let mut b = GitignoreBuilder::new(root);
        for g in DEFAULT_IGNORES {
            b.add_line(None, g).expect("valid default glob");
        }
        Ignores {
            root: root.to_path_buf(),
            tracked,
            tracked_dirs,
            stack: Vec::new(),
            global: Gitignore::global().0,
            defaults: b.build().unwrap_or_else(|_| Gitignore::empty()),
        }
    }

    /// Entering folder `dir` (absolute): its `.gitignore`, if any, applies below it. A `.gitignore`
    /// that cannot be read or parsed is skipped, line by line, as git does.
    pub fn enter(&mut self, dir: &Path) {
        let file = dir.join(".gitignore");
        if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            let mut b = GitignoreBuilder::new(dir);
            let _ = b.add(&file);
            if let Ok(g) = b.build() {
                self.stack.push((dir.to_path_buf(), g));
                return;
            }
        }
        self.stack.push((dir.to_path_buf(), Gitignore::empty()));
    }

    /// Leaving the folder last entered.
    pub fn leave(&mut self) {
        self.stack.pop();
    }

    /// How many folders are entered (the root counts).
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// Whether `rel` (relative to the root, `/`-separated) is ignored junk: matched by the rules and
    /// neither written by apply nor (for a folder) holding something apply wrote.
    pub fn ignored(&self, rel: &str, is_dir: bool) -> bool {
        if self.tracked.contains(rel) || (is_dir && self.tracked_dirs.contains(rel)) {
            return false;
        }
        let path = self.root.join(rel);
        for (_, g) in self.stack.iter().rev() {
            match g.matched(&path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        for g in [&self.global, &self.defaults] {
            match g.matched(&path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}
