//! `bump-pin`: move the pin to another upstream commit, carrying every overlay across with a 3-way
//! merge (libgit2's, which is git's), all or nothing.
//!
//! Overlay i is rebased like `git rebase` does it: merge(base = old chain before i, ours = old chain
//! after i, theirs = new chain before i). Every merged overlay is re-diffed canonically against the
//! new chain. A conflict is an outcome, not an error: the merge with conflict markers is written
//! into a tree for the user to resolve, and `--continue` picks it up from there.
//!
//! The folder (gix-merge's shape): this file the merge, [`resume`] one `bump-pin` run (its
//! `Options`/`Run`/`Outcome`), [`session`] what a bump in progress keeps on disk between runs.

pub mod forecast;
pub mod resume;
pub mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::help::{Help, NextStep};
use crate::merge::{Labels, MergeTrees, canonical_files, merge_overlay};
use crate::patch::{FilePatch, Overlay, parse_overlay};
use crate::render::{self, Layout};
use crate::series::Series;
use crate::tree::{BlobSource, Content, Entry, MODE_FILE, Tree};

/// What happened to one overlay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Same hunks against the new pin: the file keeps every byte.
    Kept,
    /// Merged and rewritten canonically against the new pin.
    Rewritten,
    /// Already upstream; removed from the series (`--drop-upstreamed`).
    Dropped,
    /// Already upstream, but `--drop-upstreamed` was not given.
    Upstreamed,
    /// The merge conflicts.
    Conflict,
    /// Resolved by hand in the bump tree (`--continue`).
    Resolved,
    /// Not reached because an earlier overlay conflicts.
    Pending,
    /// Merged, but drift's classification asks for review (a watched definition removed upstream,
    /// part of the overlay already upstream): the bump stops with the merge in the bump tree.
    Review,
}

/// One overlay's result in a bump.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OverlayBump {
    /// The overlay's file name.
    pub name: String,
    /// What the bump did with it.
    pub action: Action,
    /// Files with conflict markers (for `Conflict`), or why it stops (for `Review`).
    pub conflicts: Vec<String>,
    /// What the bump changed beyond the hunks (a `Depends-On` trailer dropped, say).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The overlay's new text, when the bump carried it across (`Kept`, `Rewritten`, `Resolved`);
    /// `None` otherwise.
    #[serde(skip)]
    pub raw: Option<String>,
}

/// Progress saved in the bump tree between a conflict and `--continue`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BumpState {
    /// The upstream being bumped (its name in pins.toml).
    pub upstream: String,
    /// The pin the bump started from.
    pub from: String,
    /// The commit it goes to.
    pub to: String,
    /// Whether `--drop-upstreamed` was given.
    pub drop_upstreamed: bool,
    /// Overlay name -> new text (None: dropped), for the overlays already carried across.
    pub done: Vec<(String, Option<String>)>,
    /// The overlay whose merge conflicted and is being resolved in the tree.
    pub resolving: String,
    /// Blob ids of the project files at the start, so nothing edited meanwhile is overwritten.
    pub guards: BTreeMap<String, String>,
}

/// The bump state's file name in the bump tree, where builds before `.overlay/` kept it
/// (`session::Session::read_state` still reads it there).
pub const BUMP_STATE: &str = ".overlay-bump.json";

/// What a bump did: each overlay's result, and where it stopped.
#[derive(Debug)]
pub struct Outcome {
    /// Each overlay's result, in series order.
    pub overlays: Vec<OverlayBump>,
    /// The tree where the first conflict awaits resolution (when there is one).
    pub conflict_tree: Option<Tree>,
    /// The new series text, when overlays were dropped.
    pub series_raw: String,
}

impl Outcome {
    /// Whether the bump completed with nothing left to do: no conflict or review stop, and no
    /// overlay found upstream but kept (without `--drop-upstreamed`).
    pub fn is_clean(&self) -> bool {
        self.conflict_tree.is_none()
            && !self.overlays.iter().any(|o| o.action == Action::Upstreamed)
    }
}

fn same_files(a: &[FilePatch], b: &[FilePatch]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.old_path == y.old_path
                && x.new_path == y.new_path
                && x.hunks.len() == y.hunks.len()
                && x.hunks.iter().zip(&y.hunks).all(|(h, k)| h.same_as(k))
        })
}

/// Whether `ov` applied to `before` with no offset gives `after` on every path it or `files` touch.
fn applies_unchanged(
    ov: &Overlay,
    files: &[FilePatch],
    before: &Tree,
    after: &Tree,
    src: &dyn BlobSource,
) -> bool {
    let mut t = before.clone();
    let Ok(outcome) = t.apply_overlay(ov, src) else {
        return false;
    };
    if outcome.offsets().next().is_some() {
        return false;
    }
    let paths: BTreeSet<&str> = ov
        .files
        .iter()
        .chain(files)
        .flat_map(|f| [f.old_path.as_deref(), f.new_path.as_deref()])
        .flatten()
        .collect();
    paths.iter().all(|p| {
        t.entries.get(*p).map(|e| e.mode) == after.entries.get(*p).map(|e| e.mode)
            && t.blob_id(p) == after.blob_id(p)
    })
}

/// Renders `ov` with new file patches between `before` and `after` (keeps the bytes when unchanged).
pub fn rewrite(
    ov: &Overlay,
    files: Vec<FilePatch>,
    before: &Tree,
    after: &Tree,
    src: &dyn BlobSource,
) -> Result<(String, bool)> {
    let mut sorted_old = ov.files.clone();
    sorted_old.sort_by(|x, y| x.path().cmp(y.path()));
    if same_files(&sorted_old, &files) || same_files(&ov.files, &files) {
        return Ok((ov.raw.clone(), false));
    }
    // The canonical files know no renames; the overlay itself may. If it still applies at its
    // recorded lines and gives exactly `after`, its bytes are still right.
    if applies_unchanged(ov, &files, before, after, src) {
        return Ok((ov.raw.clone(), false));
    }
    let raw = render::patch(&Layout::of(ov), &files, before, after, src)?;
    parse_overlay(&ov.name, &ov.path, &raw)?;
    Ok((raw, true))
}

/// The paths of `ov` that the resolved `tree` changes against `new_chain`. A change anywhere else
/// is refused: a resolution carries only the overlay's own files.
fn resolution_paths(
    ov: &Overlay,
    paths: &BTreeSet<String>,
    tree: &Tree,
    new_chain: &Tree,
) -> Result<BTreeSet<String>> {
    let differs = |p: &String| {
        tree.blob_id(p) != new_chain.blob_id(p)
            || tree.entries.get(p).map(|e| e.mode) != new_chain.entries.get(p).map(|e| e.mode)
    };
    let all: BTreeSet<&String> = tree
        .entries
        .keys()
        .chain(new_chain.entries.keys())
        .collect();
    let outside: Vec<String> = all
        .into_iter()
        .filter(|p| !paths.contains(*p) && differs(p))
        .map(|p| {
            let what = match (tree.entries.get(p), new_chain.entries.get(p)) {
                (None, _) => "deleted",
                (_, None) => "added",
                (Some(a), Some(b)) if a.mode != b.mode => "type or mode changed",
                _ => "modified",
            };
            format!("{p} ({what})")
        })
        .collect();
    if !outside.is_empty() {
        return Err(Error::refused(
            &ov.path,
            None,
            crate::Refusal::ResolutionOutsideOverlay { files: outside },
        )
        .with_help(
            "a resolution carries only the overlay's own files: undo those changes in the bump tree, then --continue again; \
             carry them after the bump in a new overlay (`apply`, edit, `new-overlay`)",
        ));
    }
    Ok(paths.iter().filter(|p| differs(p)).cloned().collect())
}

/// How [`bump`] carries a series: what earlier runs of the bump did, and the markers' labels.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Retire overlays that upstream already contains (`--drop-upstreamed`).
    pub drop_upstreamed: bool,
    /// Overlays already carried (from a `--continue`): name -> new text (`None`: dropped).
    pub done: &'a [(String, Option<String>)],
    /// The overlay being resolved and the tree the user resolved it in, if any.
    pub resolved: Option<(&'a str, &'a Tree)>,
    /// The conflict markers' labels where [`Guidance::pins`] does not name the sides.
    pub labels: Labels<'a>,
}

/// Carries `series` from `old_base` to `new_base` as `opts` says.
pub fn bump(
    old_base: &Tree,
    new_base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    opts: &Options<'_>,
) -> Result<Outcome> {
    bump_guided(old_base, new_base, series, src, opts, &Guidance::default())
}

/// What drift's classification adds to a bump.
#[derive(Debug, Default)]
pub struct Guidance {
    /// The overlays to stop at for review, with the reasons.
    pub review: BTreeMap<String, Vec<String>>,
    /// Upstream's renames between the pins (old path -> new path).
    pub renames: BTreeMap<String, String>,
    /// Trailers a resolved overlay gets (what the resolution audit's confirmation recorded).
    pub trailers: BTreeMap<String, Vec<String>>,
    /// The old and new pins (short ids): when given, conflict markers say what each side is
    /// ([`side_labels`]) instead of the bare labels.
    pub pins: Option<(String, String)>,
}

/// Conflict-marker labels that say what each side of overlay `at`'s merge is: the old pin with the
/// overlays before it, the overlay at the old pin, the new upstream with those overlays carried
/// ("new upstream 846d17622 + overlays 0001-0008").
pub fn side_labels(series: &Series, at: usize, (from, to): (&str, &str)) -> [String; 3] {
    let num = |n: &str| n.split('-').next().unwrap_or(n).to_string();
    let before = &series.overlays[..at];
    let carried = match before {
        [] => String::new(),
        [one] => format!(" + overlay {}", num(&one.name)),
        [first, .., last] => format!(" + overlays {}-{}", num(&first.name), num(&last.name)),
    };
    let name = series.overlays[at].name.trim_end_matches(".patch");
    [
        format!("old pin {from}{carried}"),
        format!("overlay {name} at {from}"),
        format!("new upstream {to}{carried}"),
    ]
}

/// [`bump`] with drift's review list (the overlays it stops at, with the reasons) and upstream's
/// renames.
pub fn bump_guided(
    old_base: &Tree,
    new_base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    opts: &Options<'_>,
    guidance: &Guidance,
) -> Result<Outcome> {
    let Options {
        drop_upstreamed,
        done,
        resolved,
        labels,
    } = *opts;
    let mut walk = Walk {
        src,
        guidance,
        labels,
        drop_upstreamed,
        new_base,
        old_chain: old_base.clone(),
        new_chain: new_base.clone(),
        conflict_tree: None,
    };
    let mut out = Vec::new();
    for (at, ov) in series.overlays.iter().enumerate() {
        let mut old_next = walk.old_chain.clone();
        old_next.apply_overlay(ov, src)?;
        let step = if walk.conflict_tree.is_some() {
            OverlayBump::plain(&ov.name, Action::Pending)
        } else if let Some((_, raw)) = done.iter().find(|(n, _)| n == &ov.name) {
            // Already carried in an earlier run of this bump.
            walk.carried_before(ov, raw.as_ref())?
        } else if let Some((_, tree)) = resolved.filter(|(name, _)| *name == ov.name) {
            walk.take_resolution(ov, tree)?
        } else {
            walk.merge_next(ov, &old_next, (series, at))?
        };
        out.push(step);
        walk.old_chain = old_next;
    }
    let series_raw = series_without_dropped(series, &out);
    Ok(Outcome {
        overlays: out,
        conflict_tree: walk.conflict_tree,
        series_raw,
    })
}

impl OverlayBump {
    /// What happened to `name`, with no conflicts, notes or text.
    fn plain(name: &str, action: Action) -> OverlayBump {
        OverlayBump {
            name: name.to_string(),
            action,
            conflicts: vec![],
            notes: vec![],
            raw: None,
        }
    }
}

/// The state of [`bump_guided`]'s walk down the series: the chains on both pins so far, and the
/// tree of the first stop (after which every overlay is pending).
struct Walk<'a> {
    src: &'a dyn BlobSource,
    guidance: &'a Guidance,
    labels: Labels<'a>,
    drop_upstreamed: bool,
    new_base: &'a Tree,
    /// The series up to (not including) the current overlay, on the old pin.
    old_chain: Tree,
    /// The overlays carried so far, on the new pin.
    new_chain: Tree,
    conflict_tree: Option<Tree>,
}

impl Walk<'_> {
    /// The paths `ov` touches, with where upstream renamed them.
    fn paths(&self, ov: &Overlay) -> BTreeSet<String> {
        ov.touched_paths()
            .flat_map(|p| [self.guidance.renames.get(&p).cloned(), Some(p)])
            .flatten()
            .collect()
    }

    /// An overlay carried by an earlier run of this bump (`raw`: its new text; `None`: dropped).
    fn carried_before(&mut self, ov: &Overlay, raw: Option<&String>) -> Result<OverlayBump> {
        let Some(raw) = raw else {
            return Ok(OverlayBump::plain(&ov.name, Action::Dropped));
        };
        let carried = parse_overlay(&ov.name, &ov.path, raw)?;
        self.new_chain.apply_overlay(&carried, self.src)?;
        let action = if *raw == ov.raw {
            Action::Kept
        } else {
            Action::Rewritten
        };
        Ok(OverlayBump {
            raw: Some(raw.clone()),
            ..OverlayBump::plain(&ov.name, action)
        })
    }

    /// The user's resolution of `ov` in `tree`, on the files this overlay touches: nothing else
    /// (an upstream symlink, a mode, a file the merge did not write) is ever swept into it.
    fn take_resolution(&mut self, ov: &Overlay, tree: &Tree) -> Result<OverlayBump> {
        let src = self.src;
        let changed = resolution_paths(ov, &self.paths(ov), tree, &self.new_chain)?;
        let files = canonical_files(&self.new_chain, tree, &changed, src)?;
        if files.is_empty() {
            return self.resolved_to_upstream(ov);
        }
        let (raw, _) = rewrite(ov, files, &self.new_chain, tree, src)?;
        let raw = match self.guidance.trailers.get(&ov.name) {
            Some(t) if !t.is_empty() => {
                let raw = crate::audit::add_trailers(&raw, t);
                parse_overlay(&ov.name, &ov.path, &raw)?;
                raw
            }
            _ => raw,
        };
        let (raw, notes) = drop_vanished_dependencies(ov, raw, self.new_base, src)?;
        for p in &changed {
            match tree.entries.get(p) {
                Some(e) => self.new_chain.entries.insert(p.clone(), e.clone()),
                None => self.new_chain.entries.remove(p),
            };
        }
        Ok(OverlayBump {
            notes,
            raw: Some(raw),
            ..OverlayBump::plain(&ov.name, Action::Resolved)
        })
    }

    /// A resolution that is the new chain itself (upstream has all of the overlay): retired with
    /// `--drop-upstreamed`, else refused with the command that retires it.
    fn resolved_to_upstream(&self, ov: &Overlay) -> Result<OverlayBump> {
        if !self.drop_upstreamed {
            return Err(
                Error::refused(&ov.path, None, crate::Refusal::ResolutionEmpty).with_help(
                    Help::new("if upstream now has all of it (you took the upstream side), ")
                        .step(NextStep::new("bump-pin", ["--continue", "--drop-upstreamed"]))
                        .text(" retires the overlay; else resolve the conflict in the tree so that it keeps the overlay's change"),
                ),
            );
        }
        Ok(OverlayBump {
            notes: vec!["the resolution is the new upstream's: retired (--drop-upstreamed)".into()],
            ..OverlayBump::plain(&ov.name, Action::Dropped)
        })
    }

    /// Merges `ov` (`old_next`: the old chain with it applied; `at`: its place in `series`) onto
    /// the new chain: carried, upstreamed, or a stop (conflict, or drift's review) whose tree
    /// awaits the user.
    fn merge_next(
        &mut self,
        ov: &Overlay,
        old_next: &Tree,
        (series, at): (&Series, usize),
    ) -> Result<OverlayBump> {
        let src = self.src;
        let named = self
            .guidance
            .pins
            .as_ref()
            .map(|(f, t)| side_labels(series, at, (f, t)));
        let labels = match &named {
            Some([base, ours, theirs]) => Labels { base, ours, theirs },
            None => self.labels,
        };
        let trees = MergeTrees {
            old_before: &self.old_chain,
            old_after: old_next,
            new_before: &self.new_chain,
        };
        let (merged, conflicts) = merge_overlay(ov, trees, src, labels, &self.guidance.renames)?;
        if !conflicts.is_empty() {
            self.conflict_tree = Some(merged);
            return Ok(OverlayBump {
                conflicts,
                ..OverlayBump::plain(&ov.name, Action::Conflict)
            });
        }
        let files = canonical_files(&self.new_chain, &merged, &self.paths(ov), src)?;
        if files.is_empty() {
            let action = if self.drop_upstreamed {
                Action::Dropped
            } else {
                Action::Upstreamed
            };
            return Ok(OverlayBump::plain(&ov.name, action));
        }
        if let Some(why) = self.guidance.review.get(&ov.name) {
            self.conflict_tree = Some(merged);
            return Ok(OverlayBump {
                conflicts: why.clone(),
                ..OverlayBump::plain(&ov.name, Action::Review)
            });
        }
        let (raw, changed) = rewrite(ov, files, &self.new_chain, &merged, src)?;
        self.new_chain = merged;
        let action = if changed {
            Action::Rewritten
        } else {
            Action::Kept
        };
        Ok(OverlayBump {
            raw: Some(raw),
            ..OverlayBump::plain(&ov.name, action)
        })
    }
}

/// The series without the dropped overlays' lines; comments and the rest keep their bytes.
fn series_without_dropped(series: &Series, out: &[OverlayBump]) -> String {
    let dropped: BTreeSet<&str> = out
        .iter()
        .filter(|o| o.action == Action::Dropped)
        .map(|o| o.name.as_str())
        .collect();
    if dropped.is_empty() {
        series.raw.clone()
    } else {
        series
            .raw
            .split_inclusive('\n')
            .filter(|l| !dropped.contains(l.split('#').next().unwrap_or("").trim()))
            .collect()
    }
}

/// After a review, `Depends-On` trailers naming a definition the new upstream no longer has are
/// removed from the overlay (they could never be checked again), and said so.
fn drop_vanished_dependencies(
    ov: &Overlay,
    raw: String,
    new_base: &Tree,
    src: &dyn BlobSource,
) -> Result<(String, Vec<String>)> {
    let mut notes = Vec::new();
    let mut raw = raw;
    for d in &ov.trailers.depends_on {
        let bytes = new_base.bytes(&d.path, src)?.unwrap_or_default();
        let ix = crate::symbols::scan(&String::from_utf8_lossy(&bytes));
        if ix.fingerprint_of(&d.symbol).is_some() {
            continue;
        }
        let line = format!("Depends-On: {}::{}\n", d.path, d.symbol);
        if let Some(at) = raw.find(&line) {
            raw.replace_range(at..at + line.len(), "");
            notes.push(format!(
                "dropped `Depends-On: {}::{}` (no longer upstream); add the definition it depends on now, if any",
                d.path, d.symbol
            ));
        }
    }
    if !notes.is_empty() {
        parse_overlay(&ov.name, &ov.path, &raw)?;
    }
    Ok((raw, notes))
}

/// Replaces `rev` of `[upstream.<name>]` in pins.toml, keeping everything else byte for byte.
pub fn set_pin(pins_text: &str, pins_path: &Path, name: &str, rev: &str) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = pins_text
        .parse()
        .map_err(|e: toml_edit::TomlError| Error::input(pins_path, None, e.to_string()))?;
    let item = doc
        .get_mut("upstream")
        .and_then(|u| u.get_mut(name))
        .and_then(|t| t.get_mut("rev"))
        .ok_or_else(|| {
            Error::input(pins_path, None, format!("no upstream.{name}.rev to update"))
        })?;
    let decor = item.as_value().map(|v| v.decor().clone());
    let mut v = toml_edit::Value::from(rev);
    if let Some(d) = decor {
        *v.decor_mut() = d;
    }
    *item = toml_edit::Item::Value(v);
    Ok(doc.to_string())
}

/// Writes files as one transaction (journal in `root`, the project folder): pins.toml, the series
/// and the overlays are all new or all old, even if the process is killed. Refuses if any target
/// changed since it was read (`guards`: path -> blob id at the start; empty = did not exist).
/// `also_remove` are files deleted in the same transaction (the bump's own state file).
pub fn write_all(
    root: &Path,
    files: &[(PathBuf, Option<String>)],
    guards: &BTreeMap<String, String>,
    also_remove: &[PathBuf],
) -> Result<()> {
    let mut txn = crate::io::txn::Txn::new(root, "bump-pin");
    txn.when_changed(
        "since the bump started",
        "review the change, then run bump-pin again",
    );
    for (path, want) in guards {
        // Project-relative (an absolute key, from an earlier build, joins as itself).
        txn.expect_unchanged(root.join(path), git2::Oid::from_str(want).ok());
    }
    for (path, content) in files {
        match content {
            Some(c) => txn.write(path, c.as_bytes()),
            None if path.exists() => txn.remove(path),
            None => {}
        }
    }
    for p in also_remove {
        if p.exists() {
            txn.remove(p);
        }
    }
    txn.commit()
}

/// A tree read from a directory (what the user resolved), without the state files.
pub fn tree_from_dir(dir: &Path) -> Result<Tree> {
    let mut t = Tree::default();
    let state = crate::materialize::State::load(dir)?.unwrap_or_default();
    for (p, (_, exec)) in crate::materialize::scan_dir(dir, state.tracked())? {
        if p == BUMP_STATE {
            continue;
        }
        let path = dir.join(&p);
        let is_link = std::fs::symlink_metadata(&path)
            .at(&path)?
            .file_type()
            .is_symlink();
        // A symlink is its target, as git stores it; reading through it would turn it into a copy
        // of the file it points at.
        let (bytes, mode) = if is_link {
            let target = std::fs::read_link(&path).at(&path)?;
            let target = target.to_string_lossy().as_bytes().to_vec();
            (target, crate::tree::MODE_LINK)
        } else if exec {
            (std::fs::read(&path).at(&path)?, crate::tree::MODE_EXEC)
        } else {
            (std::fs::read(&path).at(&path)?, MODE_FILE)
        };
        t.entries.insert(
            p,
            Entry {
                mode,
                content: Content::Bytes(Arc::from(bytes)),
            },
        );
    }
    Ok(t)
}

/// Lines that still look like conflict markers, as "path:line", in files that differ from
/// `theirs` (the new chain the merge was made on). Content decides, not looks: a marker-like line
/// (`<<<<<<< `, `||||||| `, `=======`, `>>>>>>> `) counts only when the file holds more lines of
/// that text than both sides of the merge (`theirs`, and `ours`: the overlay's side at the old
/// pin), so an RST heading's `=======` that upstream or the overlay has is no marker.
pub fn conflict_markers(
    tree: &Tree,
    theirs: &Tree,
    ours: &Tree,
    src: &dyn BlobSource,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for p in tree.entries.keys() {
        if tree.blob_id(p) == theirs.blob_id(p) {
            continue;
        }
        let text = |t: &Tree| -> Result<String> {
            let bytes = t.bytes(p, src)?.unwrap_or_default();
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let (t, o) = (text(theirs)?, text(ours)?);
        let sides = [marker_counts(&t), marker_counts(&o)];
        let resolved = text(tree)?;
        let here = marker_counts(&resolved);
        for (i, l) in resolved.lines().enumerate() {
            let excess = |n: &usize| sides.iter().all(|s| s.get(l).unwrap_or(&0) < n);
            if here.get(l).is_some_and(excess) {
                out.push(format!("{p}:{}", i + 1));
            }
        }
    }
    Ok(out)
}

/// Whether `l` looks like a line git's merge writes around a conflict.
fn is_marker_like(l: &str) -> bool {
    l.starts_with("<<<<<<< ")
        || l.starts_with(">>>>>>> ")
        || l == "======="
        || l.starts_with("||||||| ")
}

/// How many times each marker-like line occurs in `text`.
fn marker_counts(text: &str) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for l in text.lines().filter(|l| is_marker_like(l)) {
        *counts.entry(l).or_insert(0) += 1;
    }
    counts
}
