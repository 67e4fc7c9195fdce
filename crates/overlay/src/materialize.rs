//! Writing a tree into a directory, incrementally and without losing anybody's edits.
//!
//! A state file in the directory records the blob id of every file we wrote. A file whose content
//! matches neither that record nor the new tree is a user's edit: `apply` refuses to touch such a
//! tree (unless forced) and `refresh` turns those edits into overlays. Only files whose content
//! differs are written, so unchanged files keep their mtimes and builds stay incremental.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Refusal, Result};
use crate::help::{Help, NextStep};
use crate::io::fsx;
use crate::io::junk::Ignores;
use crate::tree::{BlobSource, MODE_EXEC, MODE_LINK, Tree, blob_id};

/// The state file apply writes at the top of a materialized tree.
pub const STATE_FILE: &str = ".overlay-state.json";

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
/// What apply wrote into a tree (the state file's content).
pub struct State {
    /// Format version (1).
    pub version: u32,
    /// The upstream's name.
    pub upstream: String,
    /// The commit the tree was built on.
    pub rev: String,
    /// [`crate::series::Series::content_hash`] of the series applied.
    pub series_hash: String,
    /// path -> blob id of what we wrote.
    pub files: BTreeMap<String, String>,
    /// During a write: the ids being written. A file matching either record is ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<BTreeMap<String, String>>,
    /// The files written executable. Absent in states written before modes were recorded (their
    /// modes are then not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<BTreeSet<String>>,
}

impl State {
    /// Reads the state file of `dir`; `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<State>> {
        let p = dir.join(STATE_FILE);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t).map(Some).map_err(|e| {
                Error::input(&p, Some(e.line()), format!("corrupt state file: {e}"))
                    .with_help("re-create the tree: remove the directory and run apply again")
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// The paths apply wrote (or is writing) here: never ignored, whatever `.gitignore` says.
    pub fn tracked(&self) -> impl Iterator<Item = &String> {
        self.files
            .keys()
            .chain(self.pending.iter().flat_map(|p| p.keys()))
    }

    fn is_ours(&self, path: &str, id: &str) -> bool {
        self.files.get(path).is_some_and(|f| f == id)
            || self
                .pending
                .as_ref()
                .is_some_and(|p| p.get(path).is_some_and(|f| f == id))
    }
}

/// What differs between a directory and what apply last wrote there.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Edits {
    /// Files whose content differs from what apply wrote.
    pub modified: Vec<String>,
    /// Files apply did not write.
    pub added: Vec<String>,
    /// Files apply wrote that are gone.
    pub deleted: Vec<String>,
    /// Same content, executable bit changed (`chmod +x`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mode: Vec<String>,
}

impl Edits {
    /// Whether the tree holds no edit.
    pub fn is_empty(&self) -> bool {
        self.modified.is_empty()
            && self.added.is_empty()
            && self.deleted.is_empty()
            && self.mode.is_empty()
    }
    /// Every edited path, of every kind.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.modified
            .iter()
            .chain(&self.added)
            .chain(&self.deleted)
            .chain(&self.mode)
    }
}

/// The executable paths of a tree, as recorded in a state file.
pub fn exec_paths(tree: &Tree) -> BTreeSet<String> {
    tree.entries
        .iter()
        .filter(|(_, e)| e.mode == MODE_EXEC)
        .map(|(p, _)| p.clone())
        .collect()
}

/// A directory's files: path -> (blob id, executable), without ignored junk (see `io::junk`):
/// `tracked` are the paths apply wrote there, never ignored.
pub fn scan_dir<'a>(
    dir: &Path,
    tracked: impl IntoIterator<Item = &'a String>,
) -> Result<BTreeMap<String, (git2::Oid, bool)>> {
    let mut out = BTreeMap::new();
    let mut ign = Ignores::new(dir, tracked);
    // Depth-first, a folder's entries right after it: the ignore rules' stack holds the folders
    // from the root down to the current entry's parent (depth 0, the root, is entered first).
    let walk = walkdir::WalkDir::new(dir).into_iter().filter_entry(|e| {
        while ign.depth() > e.depth() {
            ign.leave();
        }
        if e.depth() == 0 {
            ign.enter(e.path());
            return true;
        }
        let rel = e
            .path()
            .strip_prefix(dir)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
        // `.overlay-*` at the top is the tool's own (this state, a bump's state), never tree content.
        if rel == ".git" || (rel.starts_with(".overlay-") && !rel.contains('/')) {
            return false;
        }
        if is_temp(&e.file_name().to_string_lossy()) {
            // A killed write's leftover; the next write replaces it.
            return false;
        }
        let is_dir = e.file_type().is_dir();
        if ign.ignored(&rel, is_dir) {
            return false;
        }
        if is_dir {
            ign.enter(e.path());
        }
        true
    });
    for e in walk {
        let e = e.map_err(walk_error)?;
        let (p, ft) = (e.path(), e.file_type());
        if ft.is_dir() {
            continue;
        }
        let rel = p
            .strip_prefix(dir)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
        if ft.is_symlink() {
            let target = std::fs::read_link(p).at(p)?;
            out.insert(rel, (blob_id(target.to_string_lossy().as_bytes()), false));
        } else {
            let bytes = std::fs::read(p).at(p)?;
            out.insert(
                rel,
                (blob_id(&bytes), is_exec(&e.metadata().map_err(walk_error)?)),
            );
        }
    }
    Ok(out)
}

/// A walk's error as the engine's I/O error on the path it names.
fn walk_error(e: walkdir::Error) -> Error {
    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
    match e.into_io_error() {
        Some(io) => Error::io(path, io),
        None => Error::io(path, std::io::Error::other("filesystem loop")),
    }
}

#[cfg(unix)]
fn is_exec(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}
#[cfg(not(unix))]
fn is_exec(_: &std::fs::Metadata) -> bool {
    false
}

/// Edits in `dir` relative to its state file.
pub fn edits(dir: &Path, state: &State) -> Result<Edits> {
    Ok(edits_in(&scan_dir(dir, state.tracked())?, state))
}

/// Edits in an already scanned directory.
pub(crate) fn edits_in(disk: &BTreeMap<String, (git2::Oid, bool)>, state: &State) -> Edits {
    let mut e = Edits::default();
    // Modes are compared only when recorded and no write is half done.
    let exec = state.exec.as_ref().filter(|_| state.pending.is_none());
    for (p, (id, is_exec)) in disk {
        if !state.files.contains_key(p)
            && !state.pending.as_ref().is_some_and(|x| x.contains_key(p))
        {
            e.added.push(p.clone());
        } else if !state.is_ours(p, &id.to_string()) {
            e.modified.push(p.clone());
        } else if exec.is_some_and(|x| x.contains(p) != *is_exec) {
            e.mode.push(p.clone());
        }
    }
    for p in state.files.keys() {
        if !disk.contains_key(p) && state.pending.as_ref().is_none_or(|x| x.contains_key(p)) {
            e.deleted.push(p.clone());
        }
    }
    e
}

#[derive(Debug, Clone, Default, serde::Serialize)]
/// What [`write_tree`] did.
pub struct WriteReport {
    /// The tree written.
    pub dir: PathBuf,
    /// Paths written (new or changed).
    pub written: Vec<String>,
    /// Paths removed.
    pub removed: Vec<String>,
    /// How many files were already right and left alone.
    pub unchanged: usize,
    /// Edits that `force` discarded.
    pub discarded: Vec<String>,
}

/// Identity of what is being written, recorded in the state file.
pub struct Origin<'a> {
    /// The upstream's name.
    pub upstream: &'a str,
    /// The pinned commit.
    pub rev: &'a str,
    /// The series' content hash.
    pub series_hash: &'a str,
}

/// The way out of a tree's edits, one text for apply's refusal, refresh's and status's note, so
/// that no command sends the user to another that refuses (issue 24, C): refresh takes edits only
/// from a tree applied at the pin from the series as it is now.
pub fn edits_way_out(dir: &Path, state: &State, rev: &str, series_hash: &str) -> Help {
    let d = dir.display().to_string();
    let apply = NextStep::new("apply", ["--dir", &d, "--force"]);
    let refresh = NextStep::new("refresh", ["--dir", &d]);
    let why = if state.rev != rev {
        let short = |r: &str| r.get(..12).unwrap_or(r).to_string();
        format!(
            "refresh cannot take them: the tree was applied at {}, the pin is {}; ",
            short(&state.rev),
            short(rev)
        )
    } else if state.series_hash != series_hash {
        "refresh cannot take them: the tree was applied from another version of the series \
         (the overlays changed since, by a pull or an edit); "
            .to_string()
    } else {
        return Help::new("keep them: ")
            .step(refresh)
            .text(" (turns them into overlays); discard them: ")
            .step(apply);
    };
    Help::new(why)
        .text("copy the edited files aside, ")
        .step(apply)
        .text(" (which discards them), redo the edits in the fresh tree and ")
        .step(refresh)
}

fn edits_error(dir: &Path, e: &Edits, way_out: Help) -> Error {
    let mut list: Vec<String> = Vec::new();
    list.extend(e.modified.iter().map(|p| format!("modified: {p}")));
    list.extend(e.added.iter().map(|p| format!("added:    {p}")));
    list.extend(e.deleted.iter().map(|p| format!("deleted:  {p}")));
    list.extend(
        e.mode
            .iter()
            .map(|p| format!("mode:     {p} (executable bit changed)")),
    );
    Error::refused(dir, None, Refusal::UnrecordedEdits { list }).with_help(way_out)
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        fsx::create_dir_all(parent)?;
    }
    let tmp = fsx::sibling(path, "tmp");
    if std::fs::symlink_metadata(&tmp).is_ok() {
        fsx::remove_file(&tmp)?;
    }
    if mode == MODE_LINK {
        #[cfg(unix)]
        fsx::symlink(String::from_utf8_lossy(bytes).as_ref(), &tmp)?;
        #[cfg(not(unix))]
        fsx::write_unsynced(&tmp, bytes)?;
    } else {
        // A tree can always be re-created from the pin and the series: no fsync per file.
        fsx::write_unsynced(&tmp, bytes)?;
        #[cfg(unix)]
        fsx::set_mode(&tmp, if mode == MODE_EXEC { 0o755 } else { 0o644 })?;
    }
    fsx::rename(&tmp, path)
}

fn write_state(dir: &Path, state: &State) -> Result<()> {
    let text = serde_json::to_string_pretty(state).expect("state serializes");
    fsx::write_atomic(&dir.join(STATE_FILE), text.as_bytes())
}

/// Our own temporaries (`.name.overlay-tmp`), which a killed write may leave behind; never user files.
fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".overlay-tmp")
}

/// A tree path this tool cannot write because it uses the name itself: `.overlay-*` at the top
/// (state files) or a temporary's name anywhere.
fn reserved(p: &str) -> bool {
    (p.starts_with(".overlay-") && !p.contains('/')) || p.split('/').any(is_temp)
}

/// The folder a fresh tree is staged in before it appears whole; `pid` tells a live writer's from
/// a killed one's.
fn stage_dir(parent: &Path, name: &str, pid: u32) -> PathBuf {
    parent.join(format!(".{name}.overlay-stage-{pid}"))
}

/// Removes stages left by killed writers of `dir`.
fn remove_dead_stages(parent: &Path, name: &str) -> Result<()> {
    let prefix = format!(".{name}.overlay-stage-");
    let Ok(rd) = std::fs::read_dir(parent) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok())
            && !fsx::pid_alive(pid)
        {
            fsx::remove_dir_all(&e.path())?;
        }
    }
    Ok(())
}

/// A user may replace a directory of the tree by a symlink (to anywhere). Writing `p` through it
/// would write outside the tree, so the link goes (it is an edit `--force` discards) and a real
/// directory is made in its place.
fn unlink_symlinked_parents(dir: &Path, p: &str) -> Result<()> {
    let mut at = dir.to_path_buf();
    let comps: Vec<&str> = p.split('/').collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => fsx::remove_file(&at)?,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// Writes `tree` into `dir`. Refuses (nothing changed) when `dir` holds edits, unless `force`.
/// The order of writes is what the SIGKILL-at-every-write sweep checks: a fresh tree is staged
/// beside `dir` and renamed into place (`write_fresh`); an existing one gets the state file's
/// journal first, then removals (`remove_stale`), then writes, then the new state.
pub fn write_tree(
    dir: &Path,
    tree: &Tree,
    src: &dyn BlobSource,
    origin: Origin<'_>,
    force: bool,
) -> Result<WriteReport> {
    let desired: BTreeMap<String, String> = tree
        .entries
        .keys()
        .map(|p| (p.clone(), tree.blob_id(p).expect("present").to_string()))
        .collect();
    let new_state = State {
        version: 1,
        upstream: origin.upstream.to_string(),
        rev: origin.rev.to_string(),
        series_hash: origin.series_hash.to_string(),
        files: desired.clone(),
        pending: None,
        exec: Some(exec_paths(tree)),
    };
    if let Some(p) = tree.entries.keys().find(|p| reserved(p)) {
        return Err(
            Error::refused(dir, None, Refusal::ReservedName { path: p.clone() })
                .with_help("rename it upstream or in an overlay; nothing was written"),
        );
    }
    let mut report = WriteReport {
        dir: dir.to_path_buf(),
        ..Default::default()
    };
    let empty = match std::fs::read_dir(dir) {
        Ok(mut it) => it.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(Error::io(dir, e)),
    };
    if empty {
        write_fresh(dir, tree, src, &new_state, &mut report)?;
        return Ok(report);
    }
    let Some(state) = State::load(dir)? else {
        return Err(Error::refused(dir, None, Refusal::NotOurs).with_help(
            "choose a new or empty directory; apply never overwrites files it did not write",
        ));
    };
    // One scan serves both the edit check and the write plan: hashing the tree is the slow part.
    let disk = scan_dir(dir, state.tracked())?;
    let e = edits_in(&disk, &state);
    if !e.is_empty() {
        if !force {
            let way_out = edits_way_out(dir, &state, origin.rev, origin.series_hash);
            return Err(edits_error(dir, &e, way_out));
        }
        report.discarded = e.all().cloned().collect();
    }
    let mut to_write = Vec::new();
    for (p, id) in &desired {
        let mode = tree.entries[p].mode;
        match disk.get(p) {
            Some((d, exec))
                if d.to_string() == *id && (mode == MODE_LINK || *exec == (mode == MODE_EXEC)) =>
            {
                report.unchanged += 1
            }
            _ => to_write.push(p.clone()),
        }
    }
    let to_remove: Vec<String> = disk
        .keys()
        .filter(|p| !desired.contains_key(*p))
        .cloned()
        .collect();
    if to_write.is_empty() && to_remove.is_empty() && state == new_state {
        return Ok(report);
    }
    // Journal first: while files are being replaced, both old and new contents count as ours.
    let mut journal = state.clone();
    journal.pending = Some(desired.clone());
    write_state(dir, &journal)?;
    // Removals first: a path the user turned from a link into a directory must be emptied before
    // the link is written back, or the removal would go through the new link.
    remove_stale(dir, &to_remove, &mut report)?;
    for p in &to_write {
        unlink_symlinked_parents(dir, p)?;
        let path = dir.join(p);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            fsx::remove_dir_all(&path)?;
        }
        write_file(
            &path,
            &tree.bytes(p, src)?.unwrap_or_default(),
            tree.entries[p].mode,
        )?;
        report.written.push(p.clone());
    }
    write_state(dir, &new_state)?;
    Ok(report)
}

/// A fresh tree: stage everything beside `dir`, then one rename makes it appear whole.
fn write_fresh(
    dir: &Path,
    tree: &Tree,
    src: &dyn BlobSource,
    new_state: &State,
    report: &mut WriteReport,
) -> Result<()> {
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fsx::create_dir_all(parent)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    remove_dead_stages(parent, &name)?;
    let stage = stage_dir(parent, &name, std::process::id());
    if stage.exists() {
        fsx::remove_dir_all(&stage)?;
    }
    let res = (|| {
        // Made even for an empty tree: the state file goes into it.
        fsx::create_dir_all(&stage)?;
        for (p, e) in &tree.entries {
            write_file(
                &stage.join(p),
                &tree.bytes(p, src)?.unwrap_or_default(),
                e.mode,
            )?;
            report.written.push(p.clone());
        }
        write_state(&stage, new_state)?;
        if dir.exists() {
            fsx::remove_dir(dir)?;
        }
        fsx::rename(&stage, dir)
    })();
    if res.is_err() {
        let _ = std::fs::remove_dir_all(&stage);
    }
    res
}

/// Removes the files `to_remove` (and the folders they leave empty), never through a link.
fn remove_stale(dir: &Path, to_remove: &[String], report: &mut WriteReport) -> Result<()> {
    for p in to_remove {
        unlink_symlinked_parents(dir, p)?;
        let path = dir.join(p);
        match std::fs::symlink_metadata(&path) {
            // Went with a symlinked parent, or a link already replaced by a real directory.
            Err(_) => continue,
            Ok(m) if m.is_dir() => continue,
            Ok(_) => {}
        }
        fsx::remove_file(&path)?;
        let mut d = path.parent();
        while let Some(x) = d {
            if x == dir || std::fs::read_dir(x).map_or(true, |mut i| i.next().is_some()) {
                break;
            }
            fsx::remove_dir(x)?;
            d = x.parent();
        }
        report.removed.push(p.clone());
    }
    Ok(())
}

/// Paths in `a` or `b` whose ids differ.
pub fn changed_paths(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    a.keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::tree::{Content, Entry, MODE_FILE};
    use std::sync::Arc;

    struct NoBlobs;
    impl BlobSource for NoBlobs {
        fn blob(&self, id: git2::Oid) -> Result<Vec<u8>> {
            panic!("unexpected blob read {id}")
        }
    }

    fn tree(files: &[(&str, &str)]) -> Tree {
        let mut t = Tree::default();
        for (p, c) in files {
            t.entries.insert(
                p.to_string(),
                Entry {
                    mode: MODE_FILE,
                    content: Content::Bytes(Arc::from(c.as_bytes())),
                },
            );
        }
        t
    }

    const ORIGIN: Origin<'static> = Origin {
        upstream: "up",
        rev: "0000000000000000000000000000000000000000",
        series_hash: "s",
    };

    #[test]
    fn never_writes_or_deletes_through_a_symlinked_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("tree");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("c.txt"), "precious\n").unwrap();
        std::fs::write(outside.join("gone.txt"), "precious too\n").unwrap();
        let t1 = tree(&[("sub/c.txt", "c\n"), ("sub/gone.txt", "g\n")]);
        write_tree(&dir, &t1, &NoBlobs, ORIGIN, false).unwrap();
        std::fs::remove_dir_all(dir.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("sub")).unwrap();
        let t2 = tree(&[("sub/c.txt", "c2\n")]);
        let e = write_tree(&dir, &t2, &NoBlobs, ORIGIN, false).unwrap_err();
        assert!(
            matches!(e.refusal(), Some(crate::Refusal::UnrecordedEdits { list }) if list.contains(&"added:    sub".to_string())),
            "{e}"
        );
        let r = write_tree(&dir, &t2, &NoBlobs, ORIGIN, true).unwrap();
        assert!(r.discarded.contains(&"sub".to_string()), "{r:?}");
        assert_eq!(
            std::fs::read_to_string(outside.join("c.txt")).unwrap(),
            "precious\n"
        );
        assert!(outside.join("gone.txt").exists());
        assert!(
            !std::fs::symlink_metadata(dir.join("sub"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("sub/c.txt")).unwrap(),
            "c2\n"
        );
        assert!(
            edits(&dir, &State::load(&dir).unwrap().unwrap())
                .unwrap()
                .is_empty()
        );
    }
}
