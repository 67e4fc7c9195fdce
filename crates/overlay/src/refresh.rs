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
use crate::error::{Error, Result};
use crate::materialize::{State, edits};
use crate::patch::{FilePatch, LineKind, Overlay, parse_overlay};
use crate::render::render_patch_body;
use crate::series::Series;
use crate::tree::{BlobSource, MODE_EXEC, MODE_FILE, Tree};

/// Where edits that touch only upstream lines go.
pub enum Target {
    Existing(String),
    New {
        file_name: String,
        prelude: String,
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
    pub file: String,
    /// 1-based line in the edited file (0 for whole-file changes).
    pub line: usize,
    pub overlay: String,
    pub why: &'static str,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Plan {
    pub assignments: Vec<Assignment>,
    pub rewritten: Vec<String>,
    pub unchanged: Vec<String>,
    pub created: Option<String>,
    #[serde(skip)]
    writes: Vec<(PathBuf, String, Option<String>)>,
    #[serde(skip)]
    new_state: Option<State>,
}

/// One overlay a refresh writes, summed up: how many edits went into it, in how many files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Written {
    pub overlay: String,
    pub created: bool,
    pub edits: usize,
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

// Over a screen long (about 500 lines): its phases (lineage, attribution, restaging, rebuild,
// verification) are to become functions of their own, planning on a disk snapshot, in the
// architecture work (issue 16); until then the integration laws and the interrupt sweep guard it.
/// Computes the refresh; nothing is written until [`commit`].
pub fn plan(
    base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    dir: &Path,
    state: &State,
    into: Option<Target>,
) -> Result<Plan> {
    if state.pending.is_some() {
        // Half old, half new files: attributing them would turn the unfinished apply into overlays.
        return Err(Error::input(
            dir.join(crate::materialize::STATE_FILE),
            None,
            "the last apply into this tree was interrupted",
        )
        .with_help(format!(
            "finish it first: `cargo xtask apply --dir {}`; if it lists edits you made since, copy them aside, add --force, and redo them",
            dir.display()
        )));
    }
    if state.series_hash != series.content_hash() {
        return Err(Error::input(dir, None, "this tree was materialized from a different series (the overlays changed since)")
            .with_help("save your edits elsewhere, run `cargo xtask apply` again, then redo them; refresh cannot attribute edits across two versions of the series"));
    }
    let n = series.overlays.len();
    let mut trees = vec![base.clone()];
    for ov in &series.overlays {
        let mut t = trees.last().expect("base").clone();
        t.apply_overlay(ov, src)?;
        trees.push(t);
    }
    let into_idx = match &into {
        None => None,
        Some(Target::Existing(name)) => Some(find_overlay(series, name)? + 1),
        Some(Target::New { .. }) => Some(n + 1),
    };
    let e = edits(dir, state)?;
    if let Some(p) = e.mode.first() {
        // Overlays carry lines; a changed executable bit would be dropped without a word.
        return Err(Error::input(
            dir.join(p),
            None,
            format!(
                "the executable bit of {} file(s) changed ({}); refresh carries lines, not modes",
                e.mode.len(),
                e.mode.join(", ")
            ),
        )
        .with_help("undo it (`chmod -x`/`chmod +x`) and refresh again; to carry a mode change, write its overlay with git (`git format-patch` records modes)"));
    }
    let mut plan = Plan::default();
    if e.is_empty() {
        plan.unchanged = series.overlays.iter().map(|o| o.name.clone()).collect();
        return Ok(plan);
    }
    let total = if matches!(into, Some(Target::New { .. })) {
        n + 1
    } else {
        n
    };
    let name_of = |i: usize| -> String {
        match (&into, i) {
            (Some(Target::New { file_name, .. }), i) if i == n + 1 => file_name.clone(),
            (_, i) => series.overlays[i - 1].name.clone(),
        }
    };
    let changed: BTreeSet<String> = e.all().cloned().collect();
    let mut unowned = Vec::new();
    // Per changed file: each stage's content, after the edits each stage owns.
    let mut new_stages: BTreeMap<String, Vec<Option<Text>>> = BTreeMap::new();
    for f in &changed {
        if let Some(ov) = series.overlays.iter().find(|o| {
            o.files.iter().any(|fp| {
                fp.is_rename()
                    && (fp.old_path.as_deref() == Some(f) || fp.new_path.as_deref() == Some(f))
            })
        }) {
            return Err(Error::input(
                dir.join(f),
                None,
                format!(
                    "refresh cannot re-split edits to a file that {} renames",
                    ov.name
                ),
            )
            .with_help(
                "edit that overlay by hand, or make the rename a deletion plus a new file",
            ));
        }
        let mut serial = 0usize;
        let mut stages: Vec<Option<Seq>> = Vec::with_capacity(n + 1);
        stages.push(text_at(base, f, src)?.map(|t| {
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
        for (i, ov) in series.overlays.iter().enumerate() {
            let prev = stages[i].clone();
            let next = match file_patch_for(ov, f) {
                None => prev,
                Some(fp) if fp.is_delete() => None,
                Some(fp) => {
                    let prev = prev.unwrap_or(Seq {
                        lines: Vec::new(),
                        final_newline: true,
                    });
                    let (res, placements) =
                        apply_hunks(&prev.text(), fp).map_err(|(h, why)| Error::Apply {
                            overlay: ov.path.clone(),
                            file: f.clone(),
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
                                    serial += 1;
                                    out.push(((i + 1, serial), l.text.clone()));
                                }
                            }
                        }
                        cursor = k;
                    }
                    out.extend_from_slice(&prev.lines[cursor..]);
                    Some(Seq {
                        lines: out,
                        final_newline: res.final_newline,
                    })
                }
            };
            stages.push(next);
        }
        let sn = stages[n].clone();
        if let Some(link) = symlink_on_the_way(dir, f) {
            // Reading through it would copy whatever it points at (outside the tree, say) into an overlay.
            return Err(Error::input(
                &link,
                None,
                format!("{f}: a symbolic link where the tree had none (or a re-pointed one); refresh turns text edits into overlays, never links"),
            )
            .with_help("restore it (`cargo xtask apply --force` discards it), or change the link upstream"));
        }
        let disk = match std::fs::read(dir.join(f)) {
            Ok(b) => Some(Text::parse(&String::from_utf8(b).map_err(|_| {
                Error::input(
                    dir.join(f),
                    None,
                    "not UTF-8 text; refresh turns text edits into overlays only",
                )
            })?)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(Error::io(dir.join(f), err)),
        };
        let owners =
            |ids: &mut dyn Iterator<Item = LineId>| ids.map(|id| id.0).filter(|&o| o > 0).max();
        let mut regions = Vec::new();
        match (&sn, &disk) {
            (None, None) => continue,
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
        let mut owned = Vec::new();
        for (change, owner, line) in regions {
            let (owner, why) = match (owner, into_idx) {
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
            plan.assignments.push(Assignment {
                file: f.clone(),
                line,
                overlay: name_of(owner),
                why,
            });
            owned.push(Region { change, owner });
        }
        // Stage i holds the edits owned by overlays <= i.
        let mut per_stage = Vec::with_capacity(total + 1);
        for i in 0..=total {
            let mut seq = stages[i.min(n)].clone();
            for r in owned.iter().rev().filter(|r| r.owner <= i) {
                match &r.change {
                    Change::Create => {
                        seq = disk.as_ref().map(|t| Seq {
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
                        let cur = seq.as_mut().ok_or_else(|| Error::input(dir.join(f), None, "cannot attribute this edit: the file does not exist at that overlay's stage").with_help("use --into with a later overlay"))?;
                        let new_lines = new.iter().map(|l| ((usize::MAX, 0), l.clone()));
                        let lost = || {
                            Error::input(
                                dir.join(f),
                                Some(start + 1),
                                "cannot attribute this edit consistently across the series",
                            )
                            .with_help("split the edit, or use --into with the last overlay")
                        };
                        let (p0, p1) = if *len > 0 {
                            (
                                cur.pos(s.lines[*start].0).ok_or_else(lost)?,
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
                        if *at_end && reaches_end {
                            cur.final_newline = disk.as_ref().is_none_or(|t| t.final_newline);
                        }
                    }
                }
            }
            per_stage.push(seq.map(|s| s.text()));
        }
        new_stages.insert(f.clone(), per_stage);
    }
    if !unowned.is_empty() {
        return Err(Error::input(dir, None, format!("{} edit(s) touch only upstream lines, so no overlay owns them: {}", unowned.len(), unowned.join(", ")))
            .with_help("name the overlay that should carry them with `--into <overlay>`, or start a new one with `cargo xtask new-overlay <name> --dir <dir>`"));
    }

    // Rebuild the series stage by stage, verifying as we go.
    let mut prev_tree = base.clone();
    let mut new_overlays: Vec<Overlay> = Vec::new();
    for i in 1..=total {
        let old = series.overlays.get(i - 1);
        let mut files: Vec<FilePatch> = old
            .map(|o| {
                o.files
                    .iter()
                    .filter(|fp| !changed.contains(fp.path()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for (f, st) in &new_stages {
            let (a, b) = (&st[i - 1], &st[i]);
            if a == b {
                continue;
            }
            let orig = old.and_then(|o| file_patch_for(o, f));
            let disk_mode = |p: &str| -> u32 {
                let exec = std::fs::metadata(dir.join(p))
                    .map(|m| {
                        #[cfg(unix)]
                        {
                            use std::os::unix::fs::PermissionsExt;
                            m.permissions().mode() & 0o111 != 0
                        }
                        #[cfg(not(unix))]
                        {
                            let _ = m;
                            false
                        }
                    })
                    .unwrap_or(false);
                if exec { MODE_EXEC } else { MODE_FILE }
            };
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
        let name = name_of(i);
        if files.is_empty() && old.is_none() {
            // A new overlay gets only edits no existing overlay owns; name the ones that took them.
            let owners: BTreeSet<&str> = plan
                .assignments
                .iter()
                .map(|a| a.overlay.as_str())
                .collect();
            return Err(Error::input(
                series.dir.join(&name),
                None,
                format!(
                    "no edit is left for this new overlay: every edit touches lines of {}",
                    owners.into_iter().collect::<Vec<_>>().join(", ")
                ),
            )
            .with_help("`cargo xtask refresh` folds them into those overlays; to move a change into a new overlay, edit the overlay files by hand"));
        }
        if files.is_empty() {
            return Err(Error::input(
                series.dir.join(&name),
                None,
                "this overlay would become empty: the edits undo all of its changes",
            )
            .with_help(
                "remove it from the series yourself if that is what you want, then apply again",
            ));
        }
        let ov = if same {
            plan.unchanged.push(name.clone());
            old.expect("same implies old").clone()
        } else {
            let mut model = match old {
                Some(o) => o.clone(),
                None => {
                    let Some(Target::New { prelude, .. }) = &into else {
                        unreachable!("only a new overlay has no old")
                    };
                    parse_overlay(
                        &name,
                        &series.dir.join(&name),
                        &format!(
                            "{prelude}\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-x\n+y\n"
                        ),
                    )?
                }
            };
            model.files = files;
            let mut after = prev_tree.clone();
            after.apply_overlay(&model, src)?;
            let signature = match (&into, old) {
                (_, Some(o)) => o.signature.clone().unwrap_or_else(|| "overlay".into()),
                (Some(Target::New { signature, .. }), None) => signature.clone(),
                (_, None) => unreachable!("only a new overlay has no old"),
            };
            let raw = format!(
                "{}{}",
                model.prelude,
                render_patch_body(
                    &model.files,
                    &prev_tree,
                    &after,
                    &signature,
                    old.and_then(|o| crate::render::index_width(&o.raw))
                        .unwrap_or(crate::render::ABBREV),
                    src,
                )?
            );
            let reparsed = parse_overlay(&name, &series.dir.join(&name), &raw)?;
            plan.writes
                .push((series.dir.join(&name), raw, old.map(|o| o.raw.clone())));
            if old.is_some() {
                plan.rewritten.push(name.clone())
            } else {
                plan.created = Some(name.clone())
            }
            reparsed
        };
        prev_tree.apply_overlay(&ov, src)?;
        new_overlays.push(ov);
    }
    // The new series must reproduce the edited tree, byte for byte.
    let disk = crate::materialize::scan_dir(dir, state.tracked())?;
    let want: BTreeMap<&String, String> = disk
        .iter()
        .map(|(p, (id, _))| (p, id.to_string()))
        .collect();
    let have: BTreeMap<&String, String> = prev_tree
        .entries
        .keys()
        .map(|p| (p, prev_tree.blob_id(p).expect("present").to_string()))
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
    let mut new_series_raw = series.raw.clone();
    if let Some(Target::New { file_name, .. }) = &into {
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
        files: have.into_iter().map(|(k, v)| (k.clone(), v)).collect(),
        pending: None,
        exec: Some(crate::materialize::exec_paths(&prev_tree)),
    });
    Ok(plan)
}

/// Writes a plan as one transaction (journal in `root`, the project folder): every overlay file,
/// the series and the tree's state become new together or not at all. Refuses if any of those files
/// changed on disk since they were read (never overwrite a user's edit).
pub fn commit(plan: &Plan, dir: &Path, root: &Path) -> Result<()> {
    for (path, _, expected) in &plan.writes {
        let now = std::fs::read_to_string(path).ok();
        if now != *expected {
            return Err(Error::input(
                path,
                None,
                "changed on disk while refresh was running; nothing was written",
            )
            .with_help("run refresh again"));
        }
    }
    let mut txn = crate::txn::Txn::new(root, "refresh");
    for (path, text, _) in &plan.writes {
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
