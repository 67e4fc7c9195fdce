//! `refresh`: turn the edits in a materialized tree back into overlays.
//!
//! Every line of the materialized tree has an owner: upstream (0) or the overlay (1-based) that added
//! it. An edit goes to the owner of the lines it touches (for a pure insertion, of the lines around
//! it); an edit touching several overlays' lines goes to the latest of them, whose tree has all of
//! those lines; an edit touching only upstream lines goes to `--into` (or a new overlay). Each
//! overlay is then re-diffed canonically between consecutive stages. The new series is applied again
//! and must reproduce the edited tree exactly before anything is written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::apply::{Text, apply_hunks};
use crate::diff;
use crate::error::{Error, Refusal, Result};
use crate::help::{Arg, Help, NextStep};
use crate::materialize::State;
use crate::patch::{FilePatch, LineKind, Overlay, parse_overlay};
use crate::render::{self, ABBREV, Layout, index_width};
use crate::series::Series;
use crate::tree::{BlobSource, MODE_EXEC, MODE_FILE, Tree};

/// Where edits that touch only upstream lines go.
pub enum Target {
    /// An overlay of the series, by name (see [`find_overlay`]).
    Existing(String),
    /// A new overlay appended to the series.
    New {
        /// Its file name.
        file_name: String,
        /// Its mail header and message, up to `---`.
        prelude: String,
        /// Its signature line.
        signature: String,
    },
}

type LineId = (usize, usize);

#[derive(Clone)]
struct Seq {
    lines: Vec<(LineId, String)>,
    final_newline: bool,
}

impl Seq {
    fn text(&self) -> Text {
        Text {
            lines: self.lines.iter().map(|l| l.1.clone()).collect(),
            final_newline: self.final_newline,
        }
    }
    fn pos(&self, id: LineId) -> Option<usize> {
        self.lines.iter().position(|l| l.0 == id)
    }
}

enum Change {
    Lines {
        start: usize,
        len: usize,
        new: Vec<String>,
        at_end: bool,
    },
    Create,
    Delete,
}

struct Region {
    change: Change,
    owner: usize,
}

/// Who got what.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Assignment {
    /// The edited file.
    pub file: String,
    /// 1-based line in the edited file (0 for whole-file changes).
    pub line: usize,
    /// The overlay that carries the edit.
    pub overlay: String,
    /// Why that one.
    pub why: &'static str,
}

#[derive(Debug, Default, serde::Serialize)]
/// What a refresh will do; [`commit`] writes it.
pub struct Plan {
    /// Who got each edit.
    pub assignments: Vec<Assignment>,
    /// Overlays rewritten.
    pub rewritten: Vec<String>,
    /// Overlays kept byte for byte.
    pub unchanged: Vec<String>,
    /// The new overlay, when one was created.
    pub created: Option<String>,
    /// The trailers `--accept-reverts` recorded, per overlay ([`Plan::audit`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub accepted: BTreeMap<String, Vec<String>>,
    #[serde(skip)]
    writes: Vec<(PathBuf, String, Option<String>)>,
    #[serde(skip)]
    new_state: Option<State>,
    /// The series as it will be, for [`Plan::audit`].
    #[serde(skip)]
    new_series: Option<Series>,
}

/// One overlay a refresh writes, summed up: how many edits went into it, in how many files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Written {
    /// The overlay's file name in the series.
    pub overlay: String,
    /// Whether the refresh creates it (`new-overlay`) rather than rewriting it.
    pub created: bool,
    /// How many edits of the tree went into it.
    pub edits: usize,
    /// In how many files.
    pub files: usize,
}

impl Plan {
    /// Every overlay written (the rewritten ones, then the created one), with its edits: what
    /// `new-overlay` prints instead of one line per edit.
    pub fn written(&self) -> Vec<Written> {
        let rewritten = self.rewritten.iter().map(|n| (n, false));
        let created = self.created.iter().map(|n| (n, true));
        rewritten
            .chain(created)
            .map(|(name, created)| {
                let mine = self.assignments.iter().filter(|a| &a.overlay == name);
                let files: std::collections::BTreeSet<&str> =
                    mine.clone().map(|a| a.file.as_str()).collect();
                Written {
                    overlay: name.clone(),
                    created,
                    edits: mine.count(),
                    files: files.len(),
                }
            })
            .collect()
    }
}

fn text_at(tree: &Tree, path: &str, src: &dyn BlobSource) -> Result<Option<Text>> {
    Ok(tree
        .bytes(path, src)?
        .map(|b| Text::parse(&String::from_utf8_lossy(&b))))
}

fn file_patch_for<'a>(ov: &'a Overlay, path: &str) -> Option<&'a FilePatch> {
    ov.files
        .iter()
        .find(|f| f.old_path.as_deref() == Some(path) || f.new_path.as_deref() == Some(path))
}

/// The first symlink among `dir/f` and its parents below `dir`, if any.
fn symlink_on_the_way(dir: &Path, f: &str) -> Option<std::path::PathBuf> {
    let mut at = dir.to_path_buf();
    for c in f.split('/') {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Some(at),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Computes the refresh; nothing is written until [`commit`]. The phases, each a function below:
/// read the tree once (`Snapshot`); per edited file, its lines' `lineage` through the series,
/// `attribute` each edit to an owner, `restage` the file at every stage; then `rebuild` the
/// overlays stage by stage and `verify` that the new series reproduces the snapshot.
pub fn plan(
    base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    dir: &Path,
    state: &State,
    into: Option<Target>,
) -> Result<Plan> {
    check_tree_state(series, dir, state)?;
    let n = series.overlays.len();
    // Every overlay must apply before anything is attributed to it.
    let mut t = base.clone();
    for ov in &series.overlays {
        t.apply_overlay(ov, src)?;
    }
    let into_idx = match &into {
        None => None,
        Some(Target::Existing(name)) => Some(find_overlay(series, name)? + 1),
        Some(Target::New { .. }) => Some(n + 1),
    };
    let snap = Snapshot::read(dir, state)?;
    if let Some(p) = snap.edits.mode.first() {
        // Overlays carry lines; a changed executable bit would be dropped without a word.
        return Err(Error::refused(
            dir.join(p),
            None,
            Refusal::ModeChanged {
                files: snap.edits.mode.clone(),
            },
        )
        .with_help("undo it (`chmod -x`/`chmod +x`) and refresh again; to carry a mode change, write its overlay with git (`git format-patch` records modes)"));
    }
    let mut plan = Plan::default();
    if snap.edits.is_empty() {
        plan.unchanged = series.overlays.iter().map(|o| o.name.clone()).collect();
        return Ok(plan);
    }
    let total = if matches!(into, Some(Target::New { .. })) {
        n + 1
    } else {
        n
    };
    let cx = Cx {
        base,
        series,
        src,
        dir,
        into: &into,
        into_idx,
        n,
        total,
    };
    let changed: BTreeSet<String> = snap.edits.all().cloned().collect();
    let mut unowned = Vec::new();
    // Per changed file: each stage's content, after the edits each stage owns.
    let mut new_stages: BTreeMap<String, Vec<Option<Text>>> = BTreeMap::new();
    for f in &changed {
        refuse_renamed(&cx, f)?;
        let stages = lineage(&cx, f)?;
        let disk = snap.text(dir, f)?;
        let Some(regions) = attribute(&stages[n], disk)? else {
            continue;
        };
        let owned = assign(&cx, f, regions, &mut plan.assignments, &mut unowned);
        new_stages.insert(f.clone(), restage(&cx, f, &stages, &owned, disk)?);
    }
    if !unowned.is_empty() {
        return Err(Error::refused(dir, None, Refusal::Unowned { files: unowned })
            .with_help(
                Help::new("name the overlay that should carry them with `--into <overlay>`, or start a new one with ")
                    .step(NextStep::new("new-overlay", [Arg::slot("name"), "--dir".into(), Arg::slot("dir")])),
            ));
    }
    let (tree, new_overlays) = rebuild(&cx, &changed, &new_stages, &snap, &mut plan)?;
    let have = verify(dir, &snap, &tree)?;
    finish(&cx, state, &tree, have, new_overlays, &mut plan);
    Ok(plan)
}

/// What every phase of one plan shares.
struct Cx<'a> {
    base: &'a Tree,
    series: &'a Series,
    src: &'a dyn BlobSource,
    dir: &'a Path,
    into: &'a Option<Target>,
    /// The 1-based stage `--into` (or the new overlay) is.
    into_idx: Option<usize>,
    /// Overlays in the series.
    n: usize,
    /// Stages after the base: `n`, plus one for a new overlay.
    total: usize,
}

impl Cx<'_> {
    /// The file name of the overlay at 1-based stage `i`.
    fn name_of(&self, i: usize) -> String {
        match (self.into, i) {
            (Some(Target::New { file_name, .. }), i) if i == self.n + 1 => file_name.clone(),
            (_, i) => self.series.overlays[i - 1].name.clone(),
        }
    }
}

/// Refuses a tree refresh cannot attribute: an apply left half done, or another series.
fn check_tree_state(series: &Series, dir: &Path, state: &State) -> Result<()> {
    if state.pending.is_some() {
        // Half old, half new files: attributing them would turn the unfinished apply into overlays.
        return Err(Error::refused(
            dir.join(crate::materialize::STATE_FILE),
            None,
            Refusal::ApplyInterrupted,
        )
        .with_help(
            Help::new("finish it first: ")
                .step(NextStep::new("apply", ["--dir".to_string(), dir.display().to_string()]))
                .text("; if it lists edits you made since, copy them aside, add --force, and redo them"),
        ));
    }
    if state.series_hash != series.content_hash() {
        let way_out =
            crate::materialize::edits_way_out(dir, state, &state.rev, &series.content_hash());
        return Err(Error::refused(dir, None, Refusal::OtherSeries).with_help(way_out));
    }
    Ok(())
}

/// An edited file as the snapshot read it.
enum DiskFile {
    Missing,
    Text(Text),
    /// The file, or a folder on its way, is a symbolic link (this one).
    Link(PathBuf),
    NotText,
}

/// What refresh reads of the materialized tree, once, before planning: every file's blob id and
/// executable bit, the edits against the state file, and the content of every edited file.
/// Planning never reads the folder again, so what it verifies and records is what it attributed.
struct Snapshot {
    /// Path -> (blob id, executable), the edited files' ids taken from the content read.
    scan: BTreeMap<String, (git2::Oid, bool)>,
    edits: crate::materialize::Edits,
    files: BTreeMap<String, DiskFile>,
}

impl Snapshot {
    fn read(dir: &Path, state: &State) -> Result<Snapshot> {
        let mut scan = crate::materialize::scan_dir(dir, state.tracked())?;
        let edits = crate::materialize::edits_in(&scan, state);
        let mut files = BTreeMap::new();
        for f in edits.all() {
            let file = if let Some(link) = symlink_on_the_way(dir, f) {
                DiskFile::Link(link)
            } else {
                match std::fs::read(dir.join(f)) {
                    Ok(b) => {
                        let exec = scan.get(f).is_some_and(|e| e.1);
                        scan.insert(f.clone(), (crate::tree::blob_id(&b), exec));
                        match String::from_utf8(b) {
                            Ok(s) => DiskFile::Text(Text::parse(&s)),
                            Err(_) => DiskFile::NotText,
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        scan.remove(f);
                        DiskFile::Missing
                    }
                    Err(err) => return Err(Error::io(dir.join(f), err)),
                }
            };
            files.insert(f.clone(), file);
        }
        Ok(Snapshot { scan, edits, files })
    }

    /// The edited file `f`'s text (`None`: deleted); refused when it is a link or not UTF-8.
    fn text(&self, dir: &Path, f: &str) -> Result<Option<&Text>> {
        match self.files.get(f) {
            None | Some(DiskFile::Missing) => Ok(None),
            Some(DiskFile::Text(t)) => Ok(Some(t)),
            // Reading through it would copy whatever it points at (outside the tree, say) into an overlay.
            Some(DiskFile::Link(link)) => Err(Error::refused(
                link,
                None,
                Refusal::Symlink {
                    file: f.to_string(),
                },
            )
            .with_help(
                Help::new("restore it (")
                    .step(NextStep::new("apply", ["--force"]))
                    .text(" discards it), or change the link upstream"),
            )),
            Some(DiskFile::NotText) => Err(Error::refused(dir.join(f), None, Refusal::NotText)),
        }
    }

    /// The executable bit of `p` as read (false when absent).
    fn exec(&self, p: &str) -> bool {
        self.scan.get(p).is_some_and(|e| e.1)
    }
}

/// Edits to a file an overlay renames cannot be re-split.
fn refuse_renamed(cx: &Cx, f: &str) -> Result<()> {
    if let Some(ov) = cx.series.overlays.iter().find(|o| {
        o.files.iter().any(|fp| {
            fp.is_rename()
                && (fp.old_path.as_deref() == Some(f) || fp.new_path.as_deref() == Some(f))
        })
    }) {
        return Err(Error::refused(
            cx.dir.join(f),
            None,
            Refusal::Renamed {
                overlay: ov.name.clone(),
            },
        )
        .with_help("edit that overlay by hand, or make the rename a deletion plus a new file"));
    }
    Ok(())
}

/// File `f` at every stage (0 = base .. n), each line tagged with its owner: upstream (0) or the
/// 1-based overlay that added it, plus a serial number that follows the line through the series.
fn lineage(cx: &Cx, f: &str) -> Result<Vec<Option<Seq>>> {
    let mut serial = 0usize;
    let mut stages: Vec<Option<Seq>> = Vec::with_capacity(cx.n + 1);
    stages.push(text_at(cx.base, f, cx.src)?.map(|t| {
        Seq {
            lines: t
                .lines
                .into_iter()
                .map(|l| {
                    serial += 1;
                    ((0, serial), l)
                })
                .collect(),
            final_newline: t.final_newline,
        }
    }));
    for (i, ov) in cx.series.overlays.iter().enumerate() {
        let prev = stages[i].clone();
        let next = match file_patch_for(ov, f) {
            None => prev,
            Some(fp) if fp.is_delete() => None,
            Some(fp) => Some(apply_tagged(
                ov,
                f,
                fp,
                i + 1,
                prev.unwrap_or(Seq {
                    lines: Vec::new(),
                    final_newline: true,
                }),
                &mut serial,
            )?),
        };
        stages.push(next);
    }
    Ok(stages)
}

/// Applies `fp` (of overlay `ov`, stage `stage`) to `prev`, keeping the tags of the lines it keeps
/// and tagging the lines it adds as `stage`'s.
fn apply_tagged(
    ov: &Overlay,
    f: &str,
    fp: &FilePatch,
    stage: usize,
    prev: Seq,
    serial: &mut usize,
) -> Result<Seq> {
    let (res, placements) = apply_hunks(&prev.text(), fp).map_err(|(h, why)| Error::Apply {
        overlay: ov.path.clone(),
        file: f.to_string(),
        hunk: h,
        patch_line: fp.patch_line,
        reason: why.to_string(),
    })?;
    let mut out = Vec::with_capacity(res.lines.len());
    let mut cursor = 0;
    for (h, p) in fp.hunks.iter().zip(&placements) {
        let start = p.actual - usize::from(h.old_len > 0);
        out.extend_from_slice(&prev.lines[cursor..start]);
        let mut k = start;
        for l in &h.lines {
            match l.kind {
                LineKind::Context => {
                    out.push(prev.lines[k].clone());
                    k += 1;
                }
                LineKind::Remove => k += 1,
                LineKind::Add => {
                    *serial += 1;
                    out.push(((stage, *serial), l.text.clone()));
                }
            }
        }
        cursor = k;
    }
    out.extend_from_slice(&prev.lines[cursor..]);
    Ok(Seq {
        lines: out,
        final_newline: res.final_newline,
    })
}

/// The edits between the last stage `sn` and the disk, each with the latest overlay whose lines it
/// touches (for a pure insertion, the lines around it; `None`: upstream lines only) and its 1-based
/// line in the edited file (0: the whole file). `None` when the file is absent on both sides.
#[allow(clippy::type_complexity)]
fn attribute(
    sn: &Option<Seq>,
    disk: Option<&Text>,
) -> Result<Option<Vec<(Change, Option<usize>, usize)>>> {
    let owners =
        |ids: &mut dyn Iterator<Item = LineId>| ids.map(|id| id.0).filter(|&o| o > 0).max();
    let mut regions = Vec::new();
    match (sn, disk) {
        (None, None) => return Ok(None),
        (None, Some(_)) => regions.push((Change::Create, None, 0)),
        (Some(s), None) => {
            regions.push((Change::Delete, owners(&mut s.lines.iter().map(|l| l.0)), 0))
        }
        (Some(s), Some(t)) => {
            for h in diff::text_hunks(&s.text(), t, 0)? {
                let start = if h.old_len == 0 {
                    h.old_start
                } else {
                    h.old_start - 1
                };
                let owner = if h.old_len > 0 {
                    owners(&mut s.lines[start..start + h.old_len].iter().map(|l| l.0))
                } else {
                    let above = start.checked_sub(1).map(|i| s.lines[i].0);
                    let below = s.lines.get(start).map(|l| l.0);
                    owners(&mut above.into_iter().chain(below))
                };
                let at_end = start + h.old_len == s.lines.len();
                let new = h.postimage().map(str::to_string).collect();
                regions.push((
                    Change::Lines {
                        start,
                        len: h.old_len,
                        new,
                        at_end,
                    },
                    owner,
                    h.new_start.max(1),
                ));
            }
        }
    }
    Ok(Some(regions))
}

/// Gives each edit of `f` its overlay (upstream-only edits to `--into`), recording who got what;
/// an upstream-only edit without `--into` goes to `unowned`.
fn assign(
    cx: &Cx,
    f: &str,
    regions: Vec<(Change, Option<usize>, usize)>,
    assignments: &mut Vec<Assignment>,
    unowned: &mut Vec<String>,
) -> Vec<Region> {
    let mut owned = Vec::new();
    for (change, owner, line) in regions {
        let (owner, why) = match (owner, cx.into_idx) {
            (Some(o), _) => (o, "touches its lines"),
            (None, Some(i)) => (i, "upstream lines only: --into"),
            (None, None) => {
                unowned.push(if line == 0 {
                    format!("{f} (whole file)")
                } else {
                    format!("{f}:{line}")
                });
                continue;
            }
        };
        assignments.push(Assignment {
            file: f.to_string(),
            line,
            overlay: cx.name_of(owner),
            why,
        });
        owned.push(Region { change, owner });
    }
    owned
}

/// File `f` at every stage 0..=total after the edits: stage i holds the edits owned by overlays <= i.
fn restage(
    cx: &Cx,
    f: &str,
    stages: &[Option<Seq>],
    owned: &[Region],
    disk: Option<&Text>,
) -> Result<Vec<Option<Text>>> {
    let sn = &stages[cx.n];
    let mut per_stage = Vec::with_capacity(cx.total + 1);
    for i in 0..=cx.total {
        let mut seq = stages[i.min(cx.n)].clone();
        for r in owned.iter().rev().filter(|r| r.owner <= i) {
            match &r.change {
                Change::Create => {
                    seq = disk.map(|t| Seq {
                        lines: t
                            .lines
                            .iter()
                            .map(|l| ((usize::MAX, 0), l.clone()))
                            .collect(),
                        final_newline: t.final_newline,
                    });
                }
                Change::Delete => seq = None,
                Change::Lines {
                    start,
                    len,
                    new,
                    at_end,
                } => {
                    let s = sn.as_ref().expect("lines change has a file");
                    let cur = seq.as_mut().ok_or_else(|| {
                        Error::refused(cx.dir.join(f), None, Refusal::MissingAtStage)
                            .with_help("use --into with a later overlay")
                    })?;
                    splice_edit(cx.dir, f, s, cur, (*start, *len, new, *at_end), disk)?;
                }
            }
        }
        per_stage.push(seq.map(|s| s.text()));
    }
    Ok(per_stage)
}

/// Replaces, in `cur` (one stage of the file), the lines the edit `(start, len, new, at_end)` of
/// the last stage `s` covers; refused when the stage lacks the lines that place it.
fn splice_edit(
    dir: &Path,
    f: &str,
    s: &Seq,
    cur: &mut Seq,
    (start, len, new, at_end): (usize, usize, &[String], bool),
    disk: Option<&Text>,
) -> Result<()> {
    let new_lines = new.iter().map(|l| ((usize::MAX, 0), l.clone()));
    let lost = || {
        Error::refused(dir.join(f), Some(start + 1), Refusal::Unattributable)
            .with_help("split the edit, or use --into with the last overlay")
    };
    let (p0, p1) = if len > 0 {
        (
            cur.pos(s.lines[start].0).ok_or_else(lost)?,
            cur.pos(s.lines[start + len - 1].0).ok_or_else(lost)? + 1,
        )
    } else {
        let p = match start.checked_sub(1) {
            Some(a) => cur.pos(s.lines[a].0).ok_or_else(lost)? + 1,
            None => 0,
        };
        (p, p)
    };
    let reaches_end = p1 == cur.lines.len();
    cur.lines.splice(p0..p1, new_lines);
    if at_end && reaches_end {
        cur.final_newline = disk.is_none_or(|t| t.final_newline);
    }
    Ok(())
}

/// Rebuilds the series stage by stage from the restaged files: an overlay whose hunks did not
/// change is kept byte for byte, others are re-rendered (and queued in `plan.writes`). Returns the
/// tree the new series gives and its overlays.
fn rebuild(
    cx: &Cx,
    changed: &BTreeSet<String>,
    new_stages: &BTreeMap<String, Vec<Option<Text>>>,
    snap: &Snapshot,
    plan: &mut Plan,
) -> Result<(Tree, Vec<Overlay>)> {
    let mut prev_tree = cx.base.clone();
    let mut new_overlays: Vec<Overlay> = Vec::new();
    for i in 1..=cx.total {
        let old = cx.series.overlays.get(i - 1);
        let files = stage_files(i, old, changed, new_stages, snap, &prev_tree)?;
        let same = old.is_some_and(|o| {
            o.files.len() == files.len()
                && o.files.iter().all(|of| {
                    files.iter().any(|nf| {
                        nf.old_path == of.old_path
                            && nf.new_path == of.new_path
                            && nf.new_mode == of.new_mode
                            && nf.hunks.len() == of.hunks.len()
                            && nf.hunks.iter().zip(&of.hunks).all(|(x, y)| x.same_as(y))
                    })
                })
        });
        let name = cx.name_of(i);
        refuse_empty(cx, &name, &files, old, plan)?;
        let ov = if same {
            plan.unchanged.push(name.clone());
            old.expect("same implies old").clone()
        } else {
            rewrite(cx, &name, old, files, &prev_tree, plan)?
        };
        prev_tree.apply_overlay(&ov, cx.src)?;
        new_overlays.push(ov);
    }
    Ok((prev_tree, new_overlays))
}

/// The file diffs of stage `i`: the old overlay's diffs of unedited files, and each edited file
/// re-diffed canonically between stages i-1 and i, sorted by path.
fn stage_files(
    i: usize,
    old: Option<&Overlay>,
    changed: &BTreeSet<String>,
    new_stages: &BTreeMap<String, Vec<Option<Text>>>,
    snap: &Snapshot,
    prev_tree: &Tree,
) -> Result<Vec<FilePatch>> {
    let mut files: Vec<FilePatch> = old
        .map(|o| {
            o.files
                .iter()
                .filter(|fp| !changed.contains(fp.path()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    for (f, st) in new_stages {
        let (a, b) = (&st[i - 1], &st[i]);
        if a == b {
            continue;
        }
        let orig = old.and_then(|o| file_patch_for(o, f));
        let disk_mode = |p: &str| -> u32 { if snap.exec(p) { MODE_EXEC } else { MODE_FILE } };
        let empty = Text::parse("");
        let hunks = diff::text_hunks(
            a.as_ref().unwrap_or(&empty),
            b.as_ref().unwrap_or(&empty),
            diff::CONTEXT,
        )?;
        let old_mode = a
            .as_ref()
            .map(|_| prev_tree.entries.get(f).map_or(MODE_FILE, |e| e.mode));
        let new_mode = b.as_ref().map(|_| {
            orig.and_then(|o| o.new_mode)
                .or(old_mode)
                .unwrap_or_else(|| disk_mode(f))
        });
        files.push(FilePatch {
            old_path: a.as_ref().map(|_| f.clone()),
            new_path: b.as_ref().map(|_| f.clone()),
            old_mode: if a.is_some() && b.is_some() {
                orig.and_then(|o| o.old_mode)
            } else {
                old_mode
            },
            new_mode: if a.is_some() && b.is_some() {
                orig.and_then(|o| o.new_mode)
            } else {
                new_mode
            },
            hunks,
            patch_line: 0,
        });
    }
    files.sort_by(|x, y| x.path().cmp(y.path()));
    Ok(files)
}

/// Refuses a stage left without changes: a new overlay no edit went to, or an overlay the edits undo.
fn refuse_empty(
    cx: &Cx,
    name: &str,
    files: &[FilePatch],
    old: Option<&Overlay>,
    plan: &Plan,
) -> Result<()> {
    if files.is_empty() && old.is_none() {
        // A new overlay gets only edits no existing overlay owns; name the ones that took them.
        let owners: BTreeSet<&str> = plan
            .assignments
            .iter()
            .map(|a| a.overlay.as_str())
            .collect();
        return Err(Error::refused(
            cx.series.dir.join(name),
            None,
            Refusal::NothingForNew {
                owners: owners.into_iter().map(String::from).collect(),
            },
        )
        .with_help(Help::default().step(NextStep::plain("refresh")).text(" folds them into those overlays; to move a change into a new overlay, edit the overlay files by hand")));
    }
    if files.is_empty() {
        return Err(
            Error::refused(cx.series.dir.join(name), None, Refusal::WouldBeEmpty).with_help(
                "remove it from the series yourself if that is what you want, then apply again",
            ),
        );
    }
    Ok(())
}

/// Renders overlay `name` (the old one's header and signature, or the new overlay's) with `files`
/// on `prev_tree`, queues its write and returns it as parsed back.
fn rewrite(
    cx: &Cx,
    name: &str,
    old: Option<&Overlay>,
    files: Vec<FilePatch>,
    prev_tree: &Tree,
    plan: &mut Plan,
) -> Result<Overlay> {
    let path = cx.series.dir.join(name);
    let mut model = match old {
        Some(o) => o.clone(),
        None => {
            let Some(Target::New { prelude, .. }) = cx.into else {
                unreachable!("only a new overlay has no old")
            };
            parse_overlay(
                name,
                &path,
                &format!("{prelude}\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-x\n+y\n"),
            )?
        }
    };
    model.files = files;
    let mut after = prev_tree.clone();
    after.apply_overlay(&model, cx.src)?;
    let signature = match (cx.into, old) {
        (_, Some(o)) => o.signature.clone().unwrap_or_else(|| "overlay".into()),
        (Some(Target::New { signature, .. }), None) => signature.clone(),
        (_, None) => unreachable!("only a new overlay has no old"),
    };
    let layout = Layout {
        prelude: &model.prelude,
        signature: &signature,
        width: old.and_then(|o| index_width(&o.raw)).unwrap_or(ABBREV),
    };
    let raw = render::patch(&layout, &model.files, prev_tree, &after, cx.src)?;
    let reparsed = parse_overlay(name, &path, &raw)?;
    plan.writes.push((path, raw, old.map(|o| o.raw.clone())));
    if old.is_some() {
        plan.rewritten.push(name.to_string())
    } else {
        plan.created = Some(name.to_string())
    }
    Ok(reparsed)
}

/// The new series must reproduce the snapshot of the edited tree, byte for byte. Returns the
/// tree's files (path -> blob id) for the state file.
fn verify(dir: &Path, snap: &Snapshot, tree: &Tree) -> Result<BTreeMap<String, String>> {
    let want: BTreeMap<&String, String> = snap
        .scan
        .iter()
        .map(|(p, (id, _))| (p, id.to_string()))
        .collect();
    let have: BTreeMap<&String, String> = tree
        .entries
        .keys()
        .map(|p| (p, tree.blob_id(p).expect("present").to_string()))
        .collect();
    if want != have {
        let diff: BTreeSet<&str> = want
            .keys()
            .chain(have.keys())
            .filter(|k| want.get(**k) != have.get(**k))
            .map(|k| k.as_str())
            .collect();
        return Err(Error::input(
            dir,
            None,
            format!(
                "refresh could not reproduce the edited tree (differs in {}); nothing was written",
                diff.into_iter().collect::<Vec<_>>().join(", ")
            ),
        )
        .with_help("this is a bug in refresh; please report it with the edit that caused it"));
    }
    Ok(have.into_iter().map(|(k, v)| (k.clone(), v)).collect())
}

/// Queues the series (when a new overlay joins it) and sets the tree's new state.
fn finish(
    cx: &Cx,
    state: &State,
    tree: &Tree,
    have: BTreeMap<String, String>,
    new_overlays: Vec<Overlay>,
    plan: &mut Plan,
) {
    let series = cx.series;
    let mut new_series_raw = series.raw.clone();
    if let Some(Target::New { file_name, .. }) = cx.into {
        if !new_series_raw.is_empty() && !new_series_raw.ends_with('\n') {
            new_series_raw.push('\n');
        }
        new_series_raw.push_str(file_name);
        new_series_raw.push('\n');
        let p = series.dir.join(crate::series::SERIES_FILE);
        plan.writes.push((
            p,
            new_series_raw.clone(),
            Some(series.raw.clone())
                .filter(|_| series.dir.join(crate::series::SERIES_FILE).exists()),
        ));
    }
    let new_series = Series {
        dir: series.dir.clone(),
        raw: new_series_raw,
        overlays: new_overlays,
    };
    plan.new_state = Some(State {
        version: 1,
        upstream: state.upstream.clone(),
        rev: state.rev.clone(),
        series_hash: new_series.content_hash(),
        files: have,
        pending: None,
        exec: Some(crate::materialize::exec_paths(tree)),
    });
    plan.new_series = Some(new_series);
}

/// A run of lines an overlay of a series loses without a trailer confirming it: `check`'s DROPS
/// (`crate::audit`) and REVERTS (`crate::reverts`), with what tells it from the same run of
/// another series and the trailer that would confirm it.
struct OpenLoss {
    overlay: String,
    key: String,
    message: String,
    trailer: String,
}

fn open_losses(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    pin: git2::Oid,
    series: &Series,
) -> Result<Vec<OpenLoss>> {
    let mut out: Vec<OpenLoss> = crate::audit::series_losses(repo, src, pin, series)?
        .into_iter()
        .map(|l| OpenLoss {
            key: format!("{:?} {} {}", l.loss.kind, l.loss.file, l.loss.text.trim()),
            trailer: crate::audit::confirming_trailers(std::slice::from_ref(&l.loss), pin)
                .remove(0),
            overlay: l.overlay,
            message: l.message,
        })
        .collect();
    for o in crate::reverts::series_reverts(repo, src, pin, series)? {
        for r in o.reverts.iter().filter(|r| !r.accepted) {
            out.push(OpenLoss {
                overlay: o.overlay.clone(),
                key: format!("revert {} {}", r.file, r.lines.join("\n")),
                message: format!("{}: {}", r.file, crate::reverts::describe(r)),
                trailer: format!(
                    "{}: {}",
                    crate::reverts::ACCEPT_TRAILER,
                    r.commit.as_deref().unwrap_or(&r.base)
                ),
            });
        }
    }
    Ok(out)
}

impl Plan {
    /// The resolution audit (`crate::audit`, what `check` reports as DROPS) over what this refresh
    /// writes: runs of lines an overlay it rewrites or creates loses that are not its own (an
    /// earlier overlay's, or upstream's deleted ones brought back) and that the series before it
    /// did not lose. Refused ([`Refusal::EditsDrop`], nothing written) unless `accept`, which
    /// records them in those overlays as `Reverts-Overlay:` / `Reverts-Upstream:` trailers;
    /// returns the trailers added, per overlay.
    pub fn audit(
        &mut self,
        repo: &git2::Repository,
        src: &dyn BlobSource,
        pin: git2::Oid,
        (before, dir): (&Series, &Path),
        accept: bool,
    ) -> Result<BTreeMap<String, Vec<String>>> {
        let Some(after) = &self.new_series else {
            return Ok(BTreeMap::new());
        };
        let written: BTreeSet<&String> = self.rewritten.iter().chain(&self.created).collect();
        let had: BTreeSet<(String, String)> = open_losses(repo, src, pin, before)?
            .into_iter()
            .map(|o| (o.overlay, o.key))
            .collect();
        let new: Vec<OpenLoss> = open_losses(repo, src, pin, after)?
            .into_iter()
            .filter(|o| {
                written.contains(&o.overlay) && !had.contains(&(o.overlay.clone(), o.key.clone()))
            })
            .collect();
        if new.is_empty() {
            return Ok(BTreeMap::new());
        }
        if !accept {
            let losses = new.iter().map(|o| format!("{}: {}", o.overlay, o.message));
            return Err(Error::refused(
                dir,
                None,
                Refusal::EditsDrop {
                    losses: losses.collect(),
                },
            )
            .with_help(format!(
                "restore those lines in {} and refresh again; or, if dropping them is what you want, refresh again with --accept-reverts (recorded in the overlay as trailers)",
                dir.display()
            )));
        }
        let mut trailers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for o in new {
            let mine = trailers.entry(o.overlay).or_default();
            if !mine.contains(&o.trailer) {
                mine.push(o.trailer);
            }
        }
        self.add_trailers(&trailers)?;
        self.accepted = trailers.clone();
        Ok(trailers)
    }

    /// Appends `trailers` to the overlays this plan writes, and keeps the tree's state naming the
    /// series as it will be.
    fn add_trailers(&mut self, trailers: &BTreeMap<String, Vec<String>>) -> Result<()> {
        let series = self
            .new_series
            .as_mut()
            .expect("audited plans have a series");
        for (name, ts) in trailers {
            let Some(ov) = series.overlays.iter_mut().find(|o| &o.name == name) else {
                continue;
            };
            let Some(w) = self.writes.iter_mut().find(|w| w.0 == ov.path) else {
                continue;
            };
            w.1 = crate::audit::add_trailers(&w.1, ts);
            *ov = crate::patch::parse_overlay(name, &ov.path, &w.1)?;
        }
        if let Some(state) = &mut self.new_state {
            state.series_hash = series.content_hash();
        }
        Ok(())
    }
}

/// Writes a plan as one transaction (journal in `root`, the project folder): every overlay file,
/// the series and the tree's state become new together or not at all. Refuses if any of those files
/// changed on disk since they were read (never overwrite a user's edit).
pub fn commit(plan: &Plan, dir: &Path, root: &Path) -> Result<()> {
    let mut txn = crate::io::txn::Txn::new(root, "refresh");
    for (path, text, expected) in &plan.writes {
        let read = expected
            .as_ref()
            .map(|t| crate::tree::blob_id(t.as_bytes()));
        txn.expect_unchanged(path, read);
        txn.write(path, text.as_bytes());
    }
    if let Some(state) = &plan.new_state {
        let text = serde_json::to_string_pretty(state).expect("state serializes");
        txn.write(dir.join(crate::materialize::STATE_FILE), text);
    }
    txn.commit()
}

/// The overlay `want` names: its file name, the name without `.patch`, its number (`0002`) or the
/// name without number and `.patch` (`cpu-streamed-qmm-t`); refused when none or several match.
pub fn find_overlay(series: &Series, want: &str) -> Result<usize> {
    let want = want.trim();
    let stem = |n: &str| n.strip_suffix(".patch").unwrap_or(n).to_string();
    let bare = |n: &str| {
        let s = stem(n);
        match s.split_once('-') {
            Some((num, rest)) if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) => {
                rest.to_string()
            }
            _ => s,
        }
    };
    let names: Vec<&str> = series.overlays.iter().map(|o| o.name.as_str()).collect();
    let tiers: [&dyn Fn(&str) -> bool; 3] = [&|n| n == want, &|n| stem(n) == stem(want), &|n| {
        bare(n) == bare(want) || stem(n).split('-').next() == Some(want)
    }];
    for tier in tiers {
        let hits: Vec<usize> = (0..names.len()).filter(|&i| tier(names[i])).collect();
        match hits.as_slice() {
            [] => continue,
            [one] => return Ok(*one),
            many => {
                let list: Vec<&str> = many.iter().map(|&i| names[i]).collect();
                return Err(Error::input(
                    series.dir.join(crate::series::SERIES_FILE),
                    None,
                    format!("--into {want}: names several overlays: {}", list.join(", ")),
                )
                .with_help("give the overlay's full file name"));
            }
        }
    }
    Err(Error::input(
        series.dir.join(crate::series::SERIES_FILE),
        None,
        format!("--into {want}: no such overlay in the series"),
    )
    .with_help(format!("the series holds: {}", names.join(", "))))
}
