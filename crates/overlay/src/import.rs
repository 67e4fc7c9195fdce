//! `import`: a folder of whole-file copies (laid out like upstream) becomes minimal overlays.
//!
//! For each copy the upstream commit whose version of that path differs least is searched on the
//! pin's first-parent history, before the pin and after it (on the branch head, when the cache has
//! it), within a bound. The overlay is the diff from the pin (plus the series) to the copy, with a
//! `Base:` trailer naming that commit, so `check` and `drift` can later tell upstream lines the
//! overlay deletes that upstream added after the base ([`crate::reverts`]). Such deletions are
//! reported, and nothing is written unless the caller accepts them (`Reverts-Upstream:` trailers
//! record the acceptance). Files upstream lacks become new-file overlays. A copy that already
//! matches the pin plus the series produces nothing, so importing twice writes nothing new.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::apply::Text;
use crate::diff;
use crate::patch::{FilePatch, Overlay, OverlayKind, parse_overlay};
use crate::render::{self, ABBREV, Layout, new_prelude};
use crate::reverts::{ACCEPT_TRAILER, BASE_TRAILER, FileQuestion, Revert, line_diff, reverted};
use crate::series::{SERIES_FILE, Series};
use crate::tree::{BlobSource, Content, Entry, MODE_EXEC, MODE_FILE, Tree};
use crate::upstream::UpstreamRepo;

/// How `import` picks each copy's base and what it writes.
pub struct Options {
    /// This commit is every copy's base; `None`: the closest upstream version on the pin's
    /// first-parent history within `bound` commits on each side of the pin.
    pub base: Option<git2::Oid>,
    /// How far the search goes (and how far a given base's distance is measured).
    pub bound: usize,
    /// The upstream branch head, to search after the pin (`None`: before the pin only).
    pub branch_head: Option<git2::Oid>,
    /// One overlay per copy, rather than one for the whole folder.
    pub one_per_file: bool,
    /// Accept the upstream lines the overlays delete that upstream added after the base (recorded
    /// as `Reverts-Upstream:` trailers); without it, any such revert stops the import unwritten.
    pub accept_reverts: bool,
    /// Plan and report only; write nothing.
    pub dry_run: bool,
    /// The new overlays' `Overlay-Kind:`.
    pub kind: OverlayKind,
    /// `Name <email>` for the overlays' mail header.
    pub author: String,
    /// An RFC 2822 date for the overlays' mail header.
    pub date: String,
    /// The signature after each overlay's `-- ` line.
    pub signature: String,
    /// The tool's command (`cargo xtask`), named in each overlay's message as what made it.
    pub tool: String,
}

/// Why `import` refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The given folder is not a folder.
    #[error("{}: not a folder; nothing was written\n  help: {}", .0.display(), NO_DIR_HELP)]
    NoDir(PathBuf),
    /// The folder holds no files.
    #[error("{}: holds no files; nothing was written", .0.display())]
    Empty(PathBuf),
    /// A copy an overlay cannot carry (not a regular file, not UTF-8 text, a bad name).
    #[error("{}: {why}; nothing was written\n  help: {help}", path.display())]
    BadCopy {
        /// The copy.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// What to do instead.
        help: &'static str,
    },
    /// A copy upstream has no place for: no searched commit has the file, and its folder is not
    /// at the pin.
    #[error(
        "{}: {rel} is not an upstream path at the pin (no folder {parent} there, and no searched commit has the file); nothing was written\n  help: {hint}",
        path.display()
    )]
    NotUpstreamPath {
        /// The copy.
        path: PathBuf,
        /// Its path within the folder (the upstream path it stands for).
        rel: String,
        /// Its folder, which upstream lacks at the pin (`(the top)` for the root).
        parent: String,
        /// How to lay the copies out (naming upstream's paths like it, when there are some).
        hint: String,
    },
    /// An overlay file import would write already exists, or the series already names it.
    #[error("{}: already exists; nothing was written\n  help: {help}", .path.display())]
    OverlayExists {
        /// The overlay's path.
        path: PathBuf,
        /// What to do about it.
        help: String,
    },
    /// The series file changed on disk while import ran.
    #[error("{}: changed on disk while import was running; nothing was written\n  help: {}", .0.display(), RACED_HELP)]
    Raced(PathBuf),
    /// An engine error (git, I/O, an overlay that does not parse or apply).
    #[error(transparent)]
    Engine(#[from] crate::Error),
}

const NO_DIR_HELP: &str = "pass the folder holding the copies, laid out like upstream (DIR/mlx/backend/cuda/matmul.cpp for upstream's mlx/backend/cuda/matmul.cpp)";
const RACED_HELP: &str = "run import again";

impl Error {
    /// What to do about it: the message's `help:` line, typed (for a CLI's hint).
    pub fn help(&self) -> Option<crate::Help> {
        match self {
            Error::NoDir(_) => Some(NO_DIR_HELP.into()),
            Error::Empty(_) => None,
            Error::BadCopy { help, .. } => Some((*help).into()),
            Error::NotUpstreamPath { hint, .. } => Some(hint.as_str().into()),
            Error::OverlayExists { help, .. } => Some(help.as_str().into()),
            Error::Raced(_) => Some(RACED_HELP.into()),
            Error::Engine(e) => e.help().cloned(),
        }
    }

    /// The engine error it wraps, when it is one.
    pub fn engine(&self) -> Option<&crate::Error> {
        match self {
            Error::Engine(e) => Some(e),
            _ => None,
        }
    }
}

/// `import`'s result, with its own [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn git(context: &str, e: git2::Error) -> Error {
    Error::Engine(crate::Error::git(context, e))
}

/// The commit a copy was matched to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Base {
    /// The commit's id (full hex).
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// First-parent commits from the pin: negative before it, positive after it, 0 the pin;
    /// `None` for a `--base` off the pin's first-parent line.
    pub distance: Option<i64>,
}

/// How a copy relates to upstream at the pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileStatus {
    /// Upstream has the file at the pin; the overlay patches it.
    Changed,
    /// Upstream lacks the file at the pin; the overlay adds it.
    NewFile,
    /// The copy already is the pin plus the series: nothing to import.
    Unchanged,
}

/// What import found for one copy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The copy's path, as upstream names it.
    pub path: String,
    /// How it relates to upstream at the pin.
    pub status: FileStatus,
    /// The upstream commit it was matched to (`Options::base`, or the closest version searched);
    /// `None` when no searched commit has the file.
    pub base: Option<Base>,
    /// Lines added plus removed between the base's version and the copy.
    pub diff_at_base: Option<usize>,
    /// Lines added plus removed between the pin's version and the copy (a new file: its lines).
    pub diff_at_pin: usize,
    /// The overlay's share for this file: lines added, removed, hunks (against the pin plus the series).
    pub added: usize,
    /// Lines removed (see `added`).
    pub removed: usize,
    /// Hunks (see `added`).
    pub hunks: usize,
    /// The new overlay that carries it; `None` when it is unchanged.
    pub overlay: Option<String>,
    /// Upstream lines the overlay deletes that upstream added after the base.
    pub reverts: Vec<Revert>,
    /// The base was searched for and is the oldest commit the search reached because of `bound`,
    /// with a difference there: the copy may be older still (a wider bound or `--base` decides).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub base_at_search_edge: bool,
    /// The base was searched for, and the copy has lines that neither it nor the pin has but an
    /// older upstream version had: upstream deleted them, and the copy may predate that.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_before_base: Option<DeletedBefore>,
}

/// Lines of a copy that upstream deleted before the base import chose (`--base` decides).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeletedBefore {
    /// The first-parent commit after which upstream's file no longer has them.
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// How many of the copy's lines the version before it has.
    pub lines: usize,
}

/// An overlay import makes (in a dry run: would make).
#[derive(Debug, Clone, serde::Serialize)]
pub struct NewOverlay {
    /// Its file name (`NNNN-import-<name>.patch`, numbered after the series).
    pub name: String,
    /// The upstream paths it carries.
    pub files: Vec<String>,
}

/// What an import did, or in a dry run would do.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    /// The pin (full hex).
    pub pin: String,
    /// Commits searched before the pin.
    pub searched_before: usize,
    /// Commits searched after it (on the branch head).
    pub searched_after: usize,
    /// Each copy's report, in path order.
    pub files: Vec<FileReport>,
    /// The new overlays, in series order.
    pub overlays: Vec<NewOverlay>,
    /// Reverts not confirmed with `accept_reverts`: nothing is written while there are any.
    pub unconfirmed_reverts: usize,
    /// Whether the overlays and the series were written (not in a dry run, not with unconfirmed
    /// reverts, not when every copy is unchanged).
    pub written: bool,
}

/// One copy read from the folder.
struct Copy {
    rel: String,
    path: PathBuf,
    text: Text,
    bytes: Vec<u8>,
    exec: bool,
}

/// Reads every file below `dir` (skipping `.git`), refusing what cannot be an upstream text file.
fn read_copies(dir: &Path) -> Result<Vec<Copy>> {
    if !dir.is_dir() {
        return Err(Error::NoDir(dir.to_path_buf()));
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| crate::Error::io(&d, e))?;
        for e in rd {
            let e = e.map_err(|e| crate::Error::io(&d, e))?;
            let p = e.path();
            let ft = e.file_type().map_err(|e| crate::Error::io(&p, e))?;
            if e.file_name() == ".git" {
                continue;
            }
            if ft.is_dir() {
                stack.push(p);
                continue;
            }
            let bad = |why: &str, help| Error::BadCopy {
                path: p.clone(),
                why: why.into(),
                help,
            };
            if !ft.is_file() {
                return Err(bad(
                    "not a regular file (a symlink?)",
                    "copy the file itself; overlays patch regular text files",
                ));
            }
            let rel = p
                .strip_prefix(dir)
                .expect("below dir")
                .to_str()
                .ok_or_else(|| bad("the name is not UTF-8", "rename it as upstream names it"))?
                .replace(std::path::MAIN_SEPARATOR, "/");
            if let Err(why) = crate::patch::check_rel_path(&rel) {
                return Err(bad(&why, "rename it as upstream names it"));
            }
            let bytes = std::fs::read(&p).map_err(|e| crate::Error::io(&p, e))?;
            let Ok(s) = String::from_utf8(bytes.clone()) else {
                return Err(bad(
                    "not UTF-8 text",
                    "overlays carry text files only; leave binary files out of the folder",
                ));
            };
            if s.contains('\0') {
                return Err(bad(
                    "a binary file (holds NUL bytes)",
                    "overlays carry text files only; leave binary files out of the folder",
                ));
            }
            #[cfg(unix)]
            let exec = {
                use std::os::unix::fs::PermissionsExt;
                e.metadata()
                    .map(|m| m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
            };
            #[cfg(not(unix))]
            let exec = false;
            out.push(Copy {
                rel,
                path: p,
                text: Text::parse(&s),
                bytes,
                exec,
            });
        }
    }
    if out.is_empty() {
        return Err(Error::Empty(dir.to_path_buf()));
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Commits to match copies against, ordered by distance from the pin (before first among
/// equals), and how many lie before and after the pin.
struct Candidates {
    list: Vec<(git2::Oid, i64)>,
    before: usize,
    after: usize,
}

/// The pin's first-parent history: `bound` commits before it, the pin, and up to `bound` after it
/// on `head`'s first-parent line (when the pin is on it). Ordered by distance, before first.
fn candidates(
    repo: &git2::Repository,
    pin: git2::Oid,
    head: Option<git2::Oid>,
    bound: usize,
) -> Result<Candidates> {
    let walk = |from: git2::Oid| -> Result<git2::Revwalk<'_>> {
        let mut w = repo.revwalk().map_err(|e| git("walking history", e))?;
        w.push(from).map_err(|e| git("walking history", e))?;
        w.simplify_first_parent()
            .map_err(|e| git("walking history", e))?;
        Ok(w)
    };
    let mut before = Vec::new();
    for id in walk(pin)?.take(bound + 1) {
        before.push(id.map_err(|e| git("walking history", e))?);
    }
    let mut after = Vec::new();
    if let Some(head) = head.filter(|h| *h != pin) {
        let mut line = Vec::new();
        let mut reached = false;
        for id in walk(head)? {
            let id = id.map_err(|e| git("walking history", e))?;
            if id == pin {
                reached = true;
                break;
            }
            line.push(id);
        }
        if reached {
            line.reverse();
            line.truncate(bound);
            after = line;
        }
    }
    let mut out = Vec::with_capacity(before.len() + after.len());
    let n = before.len().max(after.len() + 1);
    for d in 0..n {
        if let Some(c) = before.get(d) {
            out.push((*c, -(d as i64)));
        }
        if d > 0
            && let Some(c) = after.get(d - 1)
        {
            out.push((*c, d as i64));
        }
    }
    Ok(Candidates {
        list: out,
        before: before.len().saturating_sub(1),
        after: after.len(),
    })
}

fn subject_of(repo: &git2::Repository, c: git2::Oid) -> String {
    repo.find_commit(c)
        .ok()
        .and_then(|c| c.summary().ok().flatten().map(str::to_string))
        .unwrap_or_default()
}

/// Finds each copy's closest upstream version: (base, diff size at the base) per copy.
struct Search<'r> {
    repo: &'r git2::Repository,
    trees: Vec<(git2::Tree<'r>, i64, git2::Oid)>,
    sizes: HashMap<(usize, git2::Oid), usize>,
}

impl<'r> Search<'r> {
    /// Whether candidate `k` is the oldest searched and the search stopped there at `bound`
    /// commits before the pin, not at the start of history.
    fn at_bound(&self, k: usize, bound: usize) -> bool {
        let oldest = self.trees.iter().map(|t| t.1).min().unwrap_or(0);
        self.trees[k].1 == oldest && oldest < 0 && oldest.unsigned_abs() as usize == bound
    }

    fn new(repo: &'r git2::Repository, cands: &[(git2::Oid, i64)]) -> Result<Search<'r>> {
        let mut trees = Vec::with_capacity(cands.len());
        for (c, d) in cands {
            let t = repo
                .find_commit(*c)
                .and_then(|c| c.tree())
                .map_err(|e| git(&format!("reading commit {c}"), e))?;
            trees.push((t, *d, *c));
        }
        Ok(Search {
            repo,
            trees,
            sizes: HashMap::new(),
        })
    }

    fn size(&mut self, file: usize, blob: git2::Oid, copy: &Text) -> Result<usize> {
        if let Some(s) = self.sizes.get(&(file, blob)) {
            return Ok(*s);
        }
        let b = self
            .repo
            .find_blob(blob)
            .map_err(|e| git(&format!("reading blob {blob}"), e))?;
        let text = Text::parse(&String::from_utf8_lossy(b.content()));
        let s = line_diff(&text, copy)?.size();
        self.sizes.insert((file, blob), s);
        Ok(s)
    }

    /// The candidate with the smallest diff (the closest to the pin among equals).
    /// Lines of the copy that neither the chosen base nor the pin has, found in the nearest older
    /// version that has at least two of them (fewer is likely coincidence): the commit after that
    /// version deleted them ([`DeletedBefore`]).
    fn deleted_before(
        &self,
        base: git2::Oid,
        c: &Copy,
        pin: &Text,
    ) -> Result<Option<DeletedBefore>> {
        let Some(d_base) = self.trees.iter().find(|t| t.2 == base).map(|t| t.1) else {
            return Ok(None);
        };
        let text_of = |k: usize| -> Result<Option<Text>> {
            Ok(crate::reverts::text_at(self.repo, self.trees[k].2, &c.rel)?)
        };
        let Some(base_text) = self
            .trees
            .iter()
            .position(|t| t.2 == base)
            .map(text_of)
            .transpose()?
            .flatten()
        else {
            return Ok(None);
        };
        let known: BTreeSet<&str> = base_text
            .lines
            .iter()
            .chain(&pin.lines)
            .map(|l| l.trim())
            .collect();
        let only: BTreeSet<&str> = c
            .text
            .lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !known.contains(l))
            .collect();
        if only.len() < 2 {
            return Ok(None);
        }
        let mut older: Vec<usize> = (0..self.trees.len())
            .filter(|&k| self.trees[k].1 < d_base)
            .collect();
        older.sort_by_key(|&k| std::cmp::Reverse(self.trees[k].1));
        let (mut newer, mut seen) = (base, None);
        for k in older {
            // Versions repeat from commit to commit: read each blob once.
            let Ok(entry) = self.trees[k].0.get_path(Path::new(&c.rel)) else {
                break;
            };
            if seen == Some(entry.id()) {
                newer = self.trees[k].2;
                continue;
            }
            seen = Some(entry.id());
            let Some(t) = text_of(k)? else { break };
            let lines = t
                .lines
                .iter()
                .map(|l| l.trim())
                .filter(|l| only.contains(l))
                .collect::<BTreeSet<_>>()
                .len();
            if lines >= 2 {
                return Ok(Some(DeletedBefore {
                    commit: newer.to_string(),
                    subject: subject_of(self.repo, newer),
                    lines,
                }));
            }
            newer = self.trees[k].2;
        }
        Ok(None)
    }

    fn closest(&mut self, file: usize, path: &str, copy: &Text) -> Result<Option<(usize, usize)>> {
        let mut best: Option<(usize, usize)> = None;
        for i in 0..self.trees.len() {
            let Ok(entry) = self.trees[i].0.get_path(Path::new(path)) else {
                continue;
            };
            if entry.kind() != Some(git2::ObjectType::Blob) {
                continue;
            }
            let s = self.size(file, entry.id(), copy)?;
            if best.is_none_or(|(_, b)| s < b) {
                best = Some((i, s));
                if s == 0 {
                    break;
                }
            }
        }
        Ok(best)
    }
}

/// A folder with files at the pin (`""`, the top, does not count: a copy there is almost always a
/// folder passed one level too deep).
fn folder_exists(tree: &Tree, folder: &str) -> bool {
    if folder.is_empty() {
        return false;
    }
    let prefix = format!("{folder}/");
    tree.entries
        .range(prefix.clone()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// A copy whose line endings (CRLF) or byte-order mark upstream's file at the pin lacks is what a
/// Windows checkout or editor produces: every line would differ, and the closest base would be
/// noise. Named, with the fix, before anything is compared.
fn refuse_line_ending_change(c: &Copy, upstream: Option<&[u8]>) -> Result<()> {
    let up = upstream.unwrap_or_default();
    let crlf = |b: &[u8]| b.windows(2).any(|w| w == b"\r\n");
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let why = if crlf(&c.bytes) && !crlf(up) && upstream.is_some() {
        "CRLF line endings where upstream's file has LF (a Windows checkout, or core.autocrlf=true?)"
    } else if c.bytes.starts_with(BOM) && !up.starts_with(BOM) {
        "starts with a UTF-8 byte-order mark that upstream's file lacks (an editor added it?)"
    } else {
        return Ok(());
    };
    Err(Error::BadCopy {
        path: c.path.clone(),
        why: why.into(),
        help: "convert the copy to upstream's form and import again: `dos2unix FILE` removes both CRLF and the mark (or `sed -i 's/\\r$//' FILE`; in the checkout you copied from, `git config core.autocrlf input` keeps LF)",
    })
}

fn not_upstream(c: &Copy, pin_tree: &Tree) -> Error {
    let parent = c.rel.rsplit_once('/').map_or("", |(p, _)| p).to_string();
    let suffix = format!("/{}", c.rel);
    let similar: Vec<&str> = pin_tree
        .entries
        .keys()
        .filter(|k| k.ends_with(&suffix))
        .take(3)
        .map(String::as_str)
        .collect();
    let hint = if similar.is_empty() {
        "lay the copies out as upstream does (DIR/<upstream path>); a file upstream lacks goes in an upstream folder".to_string()
    } else {
        format!(
            "upstream has {}: pass the folder that mirrors the upstream root, not a subfolder",
            similar.join(", ")
        )
    };
    Error::NotUpstreamPath {
        path: c.path.clone(),
        rel: c.rel.clone(),
        parent: if parent.is_empty() {
            "(the top)".into()
        } else {
            parent
        },
        hint,
    }
}

/// One copy, planned: its report and the overlay's file patch.
struct Planned {
    report: FileReport,
    patch: Option<FilePatch>,
}

fn file_patch(path: &str, pre: Option<&Text>, copy: &Copy) -> Result<FilePatch> {
    let empty = Text::parse("");
    let hunks = diff::text_hunks(pre.unwrap_or(&empty), &copy.text, diff::CONTEXT)?;
    Ok(FilePatch {
        old_path: pre.map(|_| path.to_string()),
        new_path: Some(path.to_string()),
        old_mode: None,
        new_mode: pre
            .is_none()
            .then_some(if copy.exec { MODE_EXEC } else { MODE_FILE }),
        hunks,
        patch_line: 0,
    })
}

/// The whole import: plans every copy, refuses on unconfirmed reverts (nothing written), writes
/// the overlays and the series in one transaction (journal in `root`) unless `dry_run`.
pub fn import(
    up: &UpstreamRepo,
    pin: git2::Oid,
    series: &Series,
    dir: &Path,
    root: &Path,
    opts: &Options,
) -> Result<Outcome> {
    let repo = up.repo();
    let copies = read_copies(dir)?;
    let pin_tree = up.tree_at(pin)?;
    let mut chain = vec![pin_tree.clone()];
    for ov in &series.overlays {
        let mut next = chain.last().expect("the pin").clone();
        next.apply_overlay(ov, up)?;
        chain.push(next);
    }
    let result = chain.last().expect("the pin").clone();
    let cands = candidates(repo, pin, opts.branch_head, opts.bound)?;
    let mut search = Search::new(repo, &cands.list)?;
    let mut planned = Vec::new();
    for (i, c) in copies.iter().enumerate() {
        let at = Trees {
            src: up,
            pin,
            pin_tree: &pin_tree,
            result: &result,
            chain: (series, &chain),
        };
        planned.push(plan_file(&at, &mut search, opts, i, c)?);
    }
    let unconfirmed = planned
        .iter()
        .flat_map(|p| &p.report.reverts)
        .filter(|r| !r.accepted)
        .count();
    let mut outcome = Outcome {
        pin: pin.to_string(),
        searched_before: cands.before,
        searched_after: cands.after,
        files: Vec::new(),
        overlays: Vec::new(),
        unconfirmed_reverts: unconfirmed,
        written: false,
    };
    let writes = build_overlays(&mut planned, &copies, series, &result, up, dir, opts)?;
    outcome.overlays = writes.iter().map(|w| w.0.clone()).collect();
    outcome.files = planned.into_iter().map(|p| p.report).collect();
    if unconfirmed > 0 || opts.dry_run || writes.is_empty() {
        return Ok(outcome);
    }
    commit(series, root, writes)?;
    outcome.written = true;
    Ok(outcome)
}

/// What a copy is compared with: upstream at the pin, and the pin plus the series.
struct Trees<'a> {
    src: &'a dyn BlobSource,
    pin: git2::Oid,
    pin_tree: &'a Tree,
    result: &'a Tree,
    /// The series and its chain: the pin, then the pin with each overlay applied in turn.
    chain: (&'a Series, &'a [Tree]),
}

/// One copy: its base, sizes, reverts and file patch (none when it already is pin + series).
/// The base chosen for a copy: the commit and its distance from the pin (when searched), the
/// size of the copy's diff there, and whether it lies at the search's bound.
struct Closest {
    base: Option<(git2::Oid, Option<i64>)>,
    diff_at_base: Option<usize>,
    edge: bool,
}

/// The copy's base: `--base` when given, else the closest commit of the search.
fn choose_base(search: &mut Search<'_>, opts: &Options, i: usize, c: &Copy) -> Result<Closest> {
    if let Some(b) = opts.base {
        let t = crate::reverts::text_at(search.repo, b, &c.rel)?;
        let size = match &t {
            Some(t) => Some(line_diff(t, &c.text)?.size()),
            None => None,
        };
        let distance = search.trees.iter().find(|t| t.2 == b).map(|t| t.1);
        return Ok(Closest {
            base: Some((b, distance)),
            diff_at_base: size,
            edge: false,
        });
    }
    Ok(match search.closest(i, &c.rel, &c.text)? {
        Some((k, size)) => Closest {
            base: Some((search.trees[k].2, Some(search.trees[k].1))),
            diff_at_base: Some(size),
            edge: size > 0 && search.at_bound(k, opts.bound),
        },
        None => Closest {
            base: None,
            diff_at_base: None,
            edge: false,
        },
    })
}

fn plan_file(
    at: &Trees<'_>,
    search: &mut Search<'_>,
    opts: &Options,
    i: usize,
    c: &Copy,
) -> Result<Planned> {
    let Trees {
        src,
        pin,
        pin_tree,
        result,
        ..
    } = *at;
    let repo = search.repo;
    let text_in = |t: &Tree| -> Result<Option<Text>> {
        Ok(t.bytes(&c.rel, src)?
            .map(|b| Text::parse(&String::from_utf8_lossy(&b))))
    };
    refuse_line_ending_change(c, pin_tree.bytes(&c.rel, src)?.as_deref())?;
    let pin_text = text_in(pin_tree)?;
    let pre = text_in(result)?;
    let Closest {
        base,
        diff_at_base,
        edge,
    } = choose_base(search, opts, i, c)?;
    if pin_text.is_none() && base.is_none() && !folder_exists(pin_tree, parent_of(&c.rel)) {
        return Err(not_upstream(c, pin_tree));
    }
    let empty = Text::parse("");
    let diff_at_pin = line_diff(pin_text.as_ref().unwrap_or(&empty), &c.text)?.size();
    let own = line_diff(pre.as_ref().unwrap_or(&empty), &c.text)?;
    let same = pre.is_some() && own.size() == 0 && pre.as_ref() == Some(&c.text);
    let status = match (&pin_text, same) {
        (_, true) => FileStatus::Unchanged,
        (None, false) => FileStatus::NewFile,
        (Some(_), false) => FileStatus::Changed,
    };
    let mut reverts = Vec::new();
    if let (Some((b, _)), Some(pin_text), Some(pre), false) = (base, &pin_text, &pre, same) {
        let q = FileQuestion {
            path: &c.rel,
            base: b,
            pin,
            pin_text,
            pre,
            deleted: &own.removed,
        };
        reverts = reverted(repo, &q, &BTreeSet::new())?;
    }
    if let (Some(pre), false) = (&pre, same) {
        reverts.extend(audit_copy(at, repo, base.map(|b| b.0), c, pre)?);
    }
    for r in &mut reverts {
        r.accepted = opts.accept_reverts;
    }
    let deleted = match (opts.base, base, &pin_text, same) {
        (None, Some((b, _)), Some(pin_text), false) => search.deleted_before(b, c, pin_text)?,
        _ => None,
    };
    let patch = if same {
        None
    } else {
        Some(file_patch(&c.rel, pre.as_ref(), c)?)
    };
    Ok(Planned {
        report: FileReport {
            path: c.rel.clone(),
            status,
            base: base.map(|(b, distance)| Base {
                commit: b.to_string(),
                subject: subject_of(repo, b),
                distance,
            }),
            diff_at_base,
            diff_at_pin,
            added: own.added.len(),
            removed: own.removed.len(),
            hunks: patch.as_ref().map_or(0, |p| p.hunks.len()),
            overlay: None,
            reverts,
            base_at_search_edge: edge,
            deleted_before_base: deleted,
        },
        patch,
    })
}

fn parent_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

/// `abc-def` from any name: lower-case letters and digits, `-` between words.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "copies".into() } else { out }
}

/// The trailers of one new overlay: kind, status, the base(s), the confirmed reverts.
fn trailers(reports: &[&FileReport], kind: OverlayKind) -> Vec<(String, String)> {
    let mut t = vec![
        ("Overlay-Kind".to_string(), kind.as_str().to_string()),
        ("Upstream-Status".to_string(), "not-submitted".to_string()),
    ];
    let bases: BTreeSet<&str> = reports
        .iter()
        .filter_map(|r| r.base.as_ref().map(|b| b.commit.as_str()))
        .collect();
    let all_have = reports.iter().all(|r| r.base.is_some());
    if bases.len() == 1 && all_have {
        t.push((
            BASE_TRAILER.into(),
            bases.into_iter().next().unwrap().into(),
        ));
    } else {
        for r in reports {
            if let Some(b) = &r.base {
                t.push((BASE_TRAILER.into(), format!("{} {}", b.commit, r.path)));
            }
        }
    }
    let accepted: BTreeSet<(&str, &str)> = reports
        .iter()
        .flat_map(|r| &r.reverts)
        .map(|r| match &r.overlay {
            Some(o) => (crate::audit::ACCEPT_OVERLAY_TRAILER, o.as_str()),
            None => (ACCEPT_TRAILER, r.commit.as_deref().unwrap_or(&r.base)),
        })
        .collect();
    for (k, v) in accepted {
        t.push((k.into(), v.into()));
    }
    t
}

/// The audit of one copy over the pin plus the series (`crate::audit`): the earlier overlays'
/// lines it drops, and the lines upstream deleted after its base that it brings back (what
/// upstream lines it drops is `reverted`'s).
fn audit_copy(
    at: &Trees<'_>,
    repo: &git2::Repository,
    base: Option<git2::Oid>,
    c: &Copy,
    pre: &Text,
) -> Result<Vec<Revert>> {
    use crate::audit::{LossKind, Origin, Owner};
    let base = base.and_then(|b| crate::audit::older_base(repo, b, at.pin));
    let (series, chain) = at.chain;
    let texts: Vec<Text> = chain
        .iter()
        .map(|t| crate::check::text_of(t, Some(&c.rel), at.src))
        .collect::<crate::Result<_>>()?;
    let steps: Vec<(&str, &Text)> = series
        .overlays
        .iter()
        .zip(&texts[1..])
        .map(|(o, t)| (o.name.as_str(), t))
        .collect();
    let owners = crate::audit::owners(&texts[0], &steps)?;
    let base_text = match base {
        Some(b) => {
            Some(crate::reverts::text_at(repo, b, &c.rel)?.unwrap_or_else(|| Text::parse("")))
        }
        None => None,
    };
    let raw: Vec<_> = crate::audit::audit_file(&crate::audit::FileAudit {
        path: &c.rel,
        base: base_text.as_ref(),
        pre,
        owners: &owners,
        post: &c.text,
        own_removed: &[],
    })?
    .into_iter()
    .filter(|r| r.kind == LossKind::Resurrected || matches!(r.owner, Owner::Overlay(_)))
    .collect();
    let history = base.map(|base| crate::audit::History {
        repo,
        base,
        pin: at.pin,
    });
    let losses = crate::audit::attribute(history.as_ref(), &c.rel, &raw, &Default::default())?;
    let base = base.unwrap_or(at.pin).to_string();
    let mut out: Vec<Revert> = Vec::new();
    for l in losses {
        let (commit, subject, overlay) = match &l.origin {
            Origin::Overlay { name } => (None, String::new(), Some(name.clone())),
            Origin::Upstream { commit, subject } => (commit.clone(), subject.clone(), None),
        };
        let resurrected = l.kind == LossKind::Resurrected;
        if let Some(last) = out.last_mut()
            && (&last.commit, &last.overlay, last.resurrected) == (&commit, &overlay, resurrected)
            && l.line > last.last_line
            && l.line - last.last_line <= 2
        {
            last.last_line = l.line;
            last.lines.push(l.text);
            continue;
        }
        out.push(Revert {
            file: c.rel.clone(),
            base: base.clone(),
            commit,
            subject,
            first_line: l.line,
            last_line: l.line,
            lines: vec![l.text],
            accepted: false,
            hunk: None,
            patch_line: None,
            overlay,
            resurrected,
        });
    }
    Ok(out)
}

type Write = (NewOverlay, PathBuf, String);

/// Renders the overlays (one for the set, or one per file), verified: applied to the pin plus the
/// series they give every copy byte for byte.
/// The overlay file's stem and subject for a group of copies: the file's name for one, the
/// folder's for several.
fn group_names(planned: &[Planned], g: &[usize], dir_name: &str) -> (String, String) {
    if let [one] = g {
        let p = &planned[*one].report.path;
        let file = p.rsplit('/').next().unwrap_or(p);
        (format!("import-{}", slug(file)), format!("import {p}"))
    } else {
        (
            format!("import-{}", slug(dir_name)),
            format!("import {} whole-file copies from {dir_name}", g.len()),
        )
    }
}

/// `tree` with the copies the `files` patch written in (their mode kept unless the patch sets one).
fn with_copies(tree: &Tree, files: &[FilePatch], copies: &[Copy]) -> Tree {
    let mut after = tree.clone();
    for f in files {
        let c = copies.iter().find(|c| c.rel == f.path()).expect("a copy");
        let mode = f
            .new_mode
            .or(tree.entries.get(&c.rel).map(|e| e.mode))
            .unwrap_or(MODE_FILE);
        after.entries.insert(
            c.rel.clone(),
            Entry {
                mode,
                content: Content::Bytes(c.bytes.clone().into()),
            },
        );
    }
    after
}

/// `ov` applied to `tree`, which must give `after` (the copies) back exactly; an error otherwise.
fn reproduced(
    tree: &Tree,
    ov: &Overlay,
    after: &Tree,
    files: &[FilePatch],
    src: &dyn BlobSource,
) -> Result<Tree> {
    let mut check = tree.clone();
    check.apply_overlay(ov, src)?;
    if check.entries.keys().ne(after.entries.keys())
        || files
            .iter()
            .any(|f| check.blob_id(f.path()) != after.blob_id(f.path()))
    {
        return Err(crate::Error::input(
            &ov.path,
            None,
            "import could not reproduce the copies from the overlay it made; nothing was written",
        )
        .with_help("this is a bug in import; please report it with the copies")
        .into());
    }
    Ok(check)
}

fn build_overlays(
    planned: &mut [Planned],
    copies: &[Copy],
    series: &Series,
    result: &Tree,
    src: &dyn BlobSource,
    dir: &Path,
    opts: &Options,
) -> Result<Vec<Write>> {
    let todo: Vec<usize> = (0..planned.len())
        .filter(|&i| planned[i].patch.is_some())
        .collect();
    let groups: Vec<Vec<usize>> = if opts.one_per_file {
        todo.iter().map(|&i| vec![i]).collect()
    } else if todo.is_empty() {
        Vec::new()
    } else {
        vec![todo]
    };
    let first =
        crate::series::parse_series_names(&series.dir.join(SERIES_FILE), &series.raw)?.len() + 1;
    let mut tree = result.clone();
    let mut out = Vec::new();
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    for (number, g) in (first..).zip(groups) {
        let (stem, subject) = group_names(planned, &g, &dir_name);
        let name = format!("{number:04}-{stem}.patch");
        let path = series.dir.join(&name);
        if path.exists() || series.overlays.iter().any(|o| o.name == name) {
            return Err(Error::OverlayExists {
                path,
                help: "remove or rename it, or list it in the series if it belongs there".into(),
            });
        }
        let reports: Vec<&FileReport> = g.iter().map(|&i| &planned[i].report).collect();
        let body = format!(
            "Made by `{} import` from whole-file copies: the diff from the pin to each copy.\nBase names the upstream commit each copy is closest to.",
            opts.tool
        );
        let prelude = new_prelude(
            &opts.author,
            &opts.date,
            &subject,
            &body,
            &trailers(&reports, opts.kind),
        );
        let mut files: Vec<FilePatch> = g
            .iter()
            .map(|&i| planned[i].patch.clone().expect("todo"))
            .collect();
        files.sort_by(|a, b| a.path().cmp(b.path()));
        let after = with_copies(&tree, &files, copies);
        let layout = Layout {
            prelude: &prelude,
            signature: &opts.signature,
            width: ABBREV,
        };
        let raw = render::patch(&layout, &files, &tree, &after, src)?;
        let ov = parse_overlay(&name, &path, &raw)?;
        tree = reproduced(&tree, &ov, &after, &files, src)?;
        let names: Vec<String> = files.iter().map(|f| f.path().to_string()).collect();
        for &i in &g {
            planned[i].report.overlay = Some(name.clone());
        }
        out.push((NewOverlay { name, files: names }, path, raw));
    }
    Ok(out)
}

/// Writes the overlays and the longer series in one transaction; refuses if the series changed.
fn commit(series: &Series, root: &Path, writes: Vec<Write>) -> Result<()> {
    let series_path = series.dir.join(SERIES_FILE);
    if std::fs::read_to_string(&series_path).ok().as_deref() != Some(series.raw.as_str()) {
        return Err(Error::Raced(series_path));
    }
    let mut raw = series.raw.clone();
    if !raw.is_empty() && !raw.ends_with('\n') {
        raw.push('\n');
    }
    let mut txn = crate::io::txn::Txn::new(root, "import");
    for (ov, path, text) in writes {
        raw.push_str(&ov.name);
        raw.push('\n');
        txn.write(path, text);
    }
    txn.write(series_path, raw);
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn slugs() {
        assert_eq!(super::slug("matmul.cpp"), "matmul-cpp");
        assert_eq!(super::slug("My Copies/"), "my-copies");
        assert_eq!(super::slug("..."), "copies");
    }
}
