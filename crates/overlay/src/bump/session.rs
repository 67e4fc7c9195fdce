//! A bump in progress (`bump-pin` stopped at a conflict or for review, then `--continue` or
//! `--abort`): its saved state with named fields, the bump tree it lives in, and its ordered
//! writes. The merge itself is `bump`'s; this module owns what is on disk between two runs.
//!
//! On disk: `.overlay/bump/<upstream>.json` at the project root (the state, where `cargo clean`
//! does not reach; `done` keeps its `[name, text]` pairs and a state an older build left in the
//! bump tree, `<dir>/.overlay-bump.json`, is still read, so a bump it started continues) and the
//! tree, whose state file's series hash is tagged `bump-in-progress:<overlay>` so a half-written
//! tree is never taken for a resolution (a tree `cargo clean` removed is written again).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bump::BUMP_STATE;
use crate::io::fsx;
use crate::materialize::State;
use crate::series::Series;
use crate::{Error, Result};

/// The tag in a bump tree's state file (`bump-in-progress:<overlay being resolved>`).
pub const BUMP_IN_PROGRESS: &str = "bump-in-progress";

/// One overlay already carried across to the new pin before the stop.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "(String, Option<String>)", into = "(String, Option<String>)")]
pub struct Carried {
    /// The overlay's file name.
    pub name: String,
    /// Its new text; `None` when the bump dropped it (upstreamed).
    pub text: Option<String>,
}

impl From<(String, Option<String>)> for Carried {
    fn from((name, text): (String, Option<String>)) -> Self {
        Carried { name, text }
    }
}

impl From<Carried> for (String, Option<String>) {
    fn from(c: Carried) -> Self {
        (c.name, c.text)
    }
}

/// Progress saved between a stop and `--continue` (in [`Session::state_path`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionState {
    /// The upstream being bumped (its name in pins.toml).
    pub upstream: String,
    /// The pin the bump started from.
    pub from: String,
    /// The commit it goes to.
    pub to: String,
    /// Whether `--drop-upstreamed` was given: overlays already upstream are removed.
    pub drop_upstreamed: bool,
    /// The overlays already carried across, in series order.
    #[serde(rename = "done")]
    pub carried: Vec<Carried>,
    /// The overlay whose merge stopped and is being resolved in the tree.
    pub resolving: String,
    /// Blob ids of the project files at the start, so nothing edited meanwhile is overwritten;
    /// keyed by project-relative path (an earlier build's absolute keys are made relative when
    /// read), so a moved checkout continues.
    pub guards: BTreeMap<String, String>,
    /// The bump tree (project-relative when inside the project), so `--continue` without the
    /// `--dir` the bump started with finds it. Absent in states of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<PathBuf>,
}

impl SessionState {
    /// The carried overlays as `bump::bump_guided` takes them.
    pub fn done_pairs(&self) -> Vec<(String, Option<String>)> {
        self.carried.iter().cloned().map(Into::into).collect()
    }
}

/// Where a project keeps what must outlive `cargo clean` (the bump state): `.overlay/` at the
/// project root, ignored by git through its own `.gitignore`.
pub const STATE_DIR: &str = ".overlay";

/// A bump of one upstream: its bump tree (`target/bump/<upstream>` unless `--dir`) and its state
/// (`.overlay/bump/<upstream>.json`, outside `target/`, so `cargo clean` never loses a bump).
#[derive(Debug, Clone)]
pub struct Session {
    /// The bump tree's folder.
    pub dir: PathBuf,
    /// The bump state file.
    pub state_path: PathBuf,
    /// Where builds before `.overlay/` kept the state: inside the bump tree ([`BUMP_STATE`]).
    pub legacy_state_path: PathBuf,
    /// The project root (guards are relative to it).
    pub root: PathBuf,
}

impl Session {
    /// The bump of `upstream` in the project at `root`, its tree in `dir` (default
    /// `target/bump/<upstream>`).
    pub fn for_project(root: &Path, upstream: &str, dir: Option<PathBuf>) -> Session {
        let dir = dir.unwrap_or_else(|| root.join("target").join("bump").join(upstream));
        Session {
            legacy_state_path: dir.join(BUMP_STATE),
            dir,
            state_path: root
                .join(STATE_DIR)
                .join("bump")
                .join(format!("{upstream}.json")),
            root: root.to_path_buf(),
        }
    }

    /// The saved progress of a bump stopped at a conflict, if there is one (in `.overlay/`, else
    /// where an earlier build left it, in the bump tree).
    pub fn read_state(&self) -> Result<Option<SessionState>> {
        let Some((path, text)) = [&self.state_path, &self.legacy_state_path]
            .into_iter()
            .find_map(|p| std::fs::read_to_string(p).ok().map(|t| (p, t)))
        else {
            return Ok(None);
        };
        let mut state: SessionState = serde_json::from_str(&text).map_err(|e| {
            Error::input(
                path,
                None,
                format!("corrupt bump state; `bump-pin --abort` discards it: {e}"),
            )
        })?;
        state.guards = relative_guards(std::mem::take(&mut state.guards));
        Ok(Some(state))
    }

    /// The session of the bump `state` records: its tree where the state says, unless `dir` was
    /// given.
    pub fn resumed(self, state: Option<&SessionState>, dir_given: bool) -> Session {
        match state.and_then(|s| s.tree.as_ref()) {
            Some(tree) if !dir_given => {
                let dir = self.root.join(tree);
                Session {
                    legacy_state_path: dir.join(BUMP_STATE),
                    dir,
                    ..self
                }
            }
            _ => self,
        }
    }

    /// The bump tree as a state records it: project-relative when inside the project.
    pub fn tree_for_state(&self) -> PathBuf {
        self.dir
            .strip_prefix(&self.root)
            .unwrap_or(&self.dir)
            .to_path_buf()
    }

    /// Whether a bump state exists (here or where an earlier build kept it).
    pub fn has_state(&self) -> bool {
        self.state_path.exists() || self.legacy_state_path.exists()
    }

    /// Removes the bump state, then the tree (`--abort`): killed in between, the tree is a
    /// leftover the next bump-pin clears.
    pub fn abandon(&self) -> Result<()> {
        for p in [&self.state_path, &self.legacy_state_path] {
            if p.exists() {
                fsx::remove_file(p)?;
            }
        }
        self.remove_tree()
    }

    /// A bump tree without a bump state: what a killed `--continue`, `--abort` or conflict write
    /// leaves.
    pub fn leftover_tree(&self) -> bool {
        self.dir.exists()
            && !self.has_state()
            && State::load(&self.dir)
                .ok()
                .flatten()
                .is_some_and(|s| s.series_hash.starts_with(BUMP_IN_PROGRESS))
    }

    /// Whether the folder holds the whole conflict tree written for `resolving` (not one
    /// half-written).
    pub fn tree_is_for(&self, resolving: &str) -> bool {
        State::load(&self.dir)
            .ok()
            .flatten()
            .is_some_and(|s| s.pending.is_none() && s.series_hash == tree_tag(resolving))
    }

    /// Removes the bump tree (see [`remove_tree`]).
    pub fn remove_tree(&self) -> Result<()> {
        remove_tree(&self.dir)
    }

    /// `.overlay/bump/`, with the `.gitignore` that keeps `.overlay/` out of the fork's commits.
    fn make_state_dir(&self) -> Result<()> {
        if let Some(dir) = self.state_path.parent()
            && !dir.is_dir()
        {
            fsx::create_dir_all(dir)?;
        }
        let ignore = self.root.join(STATE_DIR).join(".gitignore");
        if !ignore.exists() {
            fsx::write_atomic(
                &ignore,
                b"# the overlay tool's state (cargo clean keeps it)\n*\n",
            )?;
        }
        Ok(())
    }

    /// Writes a stop: the tree (by `write_tree`) and the state. Order matters if we are killed in
    /// between. A first stop (`continuing` false): the tree, then the state (a tree without state
    /// is debris the next bump-pin clears). A later one: the state first, so the resolutions
    /// made so far are saved before the tree is overwritten; the tree's tag tells a half-written
    /// tree from a resolution.
    pub fn write_stop(
        &self,
        state: &SessionState,
        continuing: bool,
        write_tree: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        let text = serde_json::to_string_pretty(state).expect("serializes");
        let write_state = || {
            self.make_state_dir()?;
            fsx::write_atomic(&self.state_path, text.as_bytes())
        };
        if continuing {
            write_state()?;
            write_tree()?;
        } else {
            write_tree()?;
            write_state()?;
        }
        Ok(())
    }
}

/// What a clean bump writes: where, and the project it moves.
pub struct Finish<'a> {
    /// The project root (where the transaction writes).
    pub root: &'a Path,
    /// The project's pins.toml, whose pin moves.
    pub pins_path: &'a Path,
    /// The upstream whose pin moves (its name in pins.toml).
    pub upstream: &'a str,
    /// The new pin (40 hex).
    pub to: &'a str,
    /// The series before the bump: the overlay files and series file the outcome rewrites.
    pub series: &'a Series,
    /// The bump's outcome: each overlay's new text, and the series text.
    pub outcome: &'a crate::bump::Outcome,
    /// Blob ids of the project files when the bump started (see [`guards`]).
    pub start_guards: &'a BTreeMap<String, String>,
}

impl Session {
    /// A clean bump: moves the pin and writes the carried overlays (and series) in one
    /// transaction, with the bump's state removed in it (once pins.toml moves, no bump is in
    /// progress), then removes the bump tree when continuing. Returns how many files were written.
    pub fn finish(&self, f: &Finish, continuing: bool) -> Result<usize> {
        use crate::bump::Action;
        let pins_text =
            std::fs::read_to_string(f.pins_path).map_err(|e| Error::io(f.pins_path, e))?;
        let new_pins = crate::bump::set_pin(&pins_text, f.pins_path, f.upstream, f.to)?;
        let mut writes: Vec<(PathBuf, Option<String>)> = Vec::new();
        for (o, ov) in f.outcome.overlays.iter().zip(&f.series.overlays) {
            match (&o.action, &o.raw) {
                (Action::Dropped, _) => writes.push((ov.path.clone(), None)),
                (_, Some(raw)) if *raw != ov.raw => {
                    writes.push((ov.path.clone(), Some(raw.clone())))
                }
                _ => {}
            }
        }
        if f.outcome.series_raw != f.series.raw {
            writes.push((
                f.series.dir.join(crate::series::SERIES_FILE),
                Some(f.outcome.series_raw.clone()),
            ));
        }
        writes.push((f.pins_path.to_path_buf(), Some(new_pins)));
        crate::bump::write_all(
            f.root,
            &writes,
            f.start_guards,
            &[self.state_path.clone(), self.legacy_state_path.clone()],
        )?;
        if continuing {
            self.remove_tree()?;
        }
        Ok(writes.len())
    }
}

/// The state-file tag of a bump tree written for `resolving`.
pub fn tree_tag(resolving: &str) -> String {
    format!("{BUMP_IN_PROGRESS}:{resolving}")
}

/// Removes a tree this tool wrote: renamed aside first, so a kill mid-way leaves no half tree
/// under the real name (the aside copy is removed by the next bump-pin).
pub fn remove_tree(dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let parent = dir.parent().unwrap_or(Path::new("."));
    if let Ok(rd) = std::fs::read_dir(parent) {
        let prefix = format!(".{name}.overlay-trash-");
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok())
                && !fsx::pid_alive(pid)
            {
                fsx::remove_dir_all(&e.path())?;
            }
        }
    }
    if !dir.exists() {
        return Ok(());
    }
    let trash = parent.join(format!(".{name}.overlay-trash-{}", std::process::id()));
    fsx::rename(dir, &trash)?;
    fsx::remove_dir_all(&trash)?;
    Ok(())
}

/// The project files a bump must find unchanged when it writes: pins.toml, the series, every
/// overlay.
pub fn guard_paths(pins: &Path, series: &Series) -> Vec<PathBuf> {
    let mut v = vec![
        pins.to_path_buf(),
        series.dir.join(crate::series::SERIES_FILE),
    ];
    v.extend(series.overlays.iter().map(|o| o.path.clone()));
    v
}

/// Project-relative path -> blob id of each file now (empty for a missing one).
pub fn guards(root: &Path, paths: &[PathBuf]) -> BTreeMap<String, String> {
    paths
        .iter()
        .map(|p| {
            let id = std::fs::read(p)
                .ok()
                .map(|b| crate::tree::blob_id(&b).to_string())
                .unwrap_or_default();
            let rel = p.strip_prefix(root).unwrap_or(p);
            (rel.to_string_lossy().to_string(), id)
        })
        .collect()
}

/// Guards keyed by project-relative paths. Earlier builds keyed them by absolute path: the
/// project root they were saved under is the folder of their `pins.toml` key, stripped from all.
fn relative_guards(guards: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let pins = crate::manifest::PINS_FILE;
    let old_root = guards
        .keys()
        .map(Path::new)
        .find(|k| k.is_absolute() && k.file_name().is_some_and(|n| n == pins))
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let Some(old_root) = old_root else {
        return guards;
    };
    guards
        .into_iter()
        .map(|(k, v)| match Path::new(&k).strip_prefix(&old_root) {
            Ok(rel) => (rel.to_string_lossy().to_string(), v),
            Err(_) => (k, v),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state keeps the on-disk shape of earlier builds (`done` as `[name, text]` pairs), so a
    /// bump stopped by one continues with the next.
    #[test]
    fn state_reads_and_writes_the_earlier_shape() {
        let old = r#"{"upstream":"up","from":"a","to":"b","drop_upstreamed":false,
            "done":[["0001-x.patch","text"],["0002-y.patch",null]],"resolving":"0003-z.patch","guards":{"p":"1"}}"#;
        let s: SessionState = serde_json::from_str(old).unwrap();
        assert_eq!(
            s.carried,
            vec![
                Carried {
                    name: "0001-x.patch".into(),
                    text: Some("text".into())
                },
                Carried {
                    name: "0002-y.patch".into(),
                    text: None
                },
            ]
        );
        let again: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(
            again["done"],
            serde_json::json!([["0001-x.patch", "text"], ["0002-y.patch", null]])
        );
        assert_eq!(s.done_pairs()[1], ("0002-y.patch".to_string(), None));
    }
}
