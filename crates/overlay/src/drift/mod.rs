//! `drift`: what moving the pin from one upstream commit to another does to each overlay.
//!
//! Textual checks are not enough: a hunk can still apply while the code it relies on changed
//! underneath it. So besides placing every hunk (exactly, never with fuzz), drift watches the
//! symbols around each hunk and the ones an overlay names in `Depends-On:` trailers, comparing
//! their whitespace- and comment-insensitive fingerprints between the two upstream commits.

pub mod blame;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::apply::{Text, anchor, locate, reverse, splice};
use crate::diff;
use crate::error::{Error, Result};
use crate::help::{Help, NextStep};
use crate::patch::{FilePatch, Hunk, Overlay, render_hunk};
use crate::series::Series;
use crate::symbols::{SymbolIndex, scan};
use crate::tree::{BlobSource, Content, Entry, MODE_FILE, Tree};

/// An overlay's drift status (the table in `docs/drift.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Every hunk applies at its recorded line; nothing watched changed.
    Clean,
    /// Every hunk applies, some at other lines; nothing watched changed.
    Moved,
    /// Carried by the merge, but upstream changed a watched definition, or a hunk can only be
    /// placed by the merge (`merged`).
    ContextDrift,
    /// Carried by the merge, but a watched definition was removed upstream or part of the overlay
    /// is already upstream: `bump-pin` stops at it for review.
    Review,
    /// Upstream already holds the whole change: the merge leaves nothing to carry.
    Upstreamed,
    /// After a conflicting overlay that touches the same files: its fate depends on the resolution.
    Blocked,
    /// The 3-way merge leaves conflict markers (`conflicts` names the files).
    Conflict,
}

impl Status {
    /// The status as reports and `--json` name it (kebab-case).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Clean => "clean",
            Status::Moved => "moved",
            Status::ContextDrift => "context-drift",
            Status::Review => "review",
            Status::Upstreamed => "upstreamed",
            Status::Blocked => "blocked",
            Status::Conflict => "conflict",
        }
    }
    /// Whether a bump can carry the overlay without anybody looking at it.
    pub fn is_quiet(self) -> bool {
        matches!(self, Status::Clean | Status::Moved)
    }
}

/// What drift found for one hunk at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HunkStatus {
    /// It applies at its recorded line.
    Exact,
    /// It applies, at another line.
    Moved,
    /// Its context changed so it cannot be placed textually, but the 3-way merge carries it.
    Merged,
    /// Its change is already upstream.
    Upstreamed,
    /// It cannot be placed, and the 3-way merge conflicts (`reason` says why).
    Conflict,
}

/// One hunk's drift.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HunkDrift {
    /// The file, as the overlay names it.
    pub file: String,
    /// The hunk's number within that file's patch, 1-based.
    pub hunk: usize,
    /// What drift found for it.
    pub status: HunkStatus,
    /// 1-based old-side line the overlay records.
    pub recorded: usize,
    /// Where it applies at the target, when it does.
    pub actual: Option<usize>,
    /// The definition the hunk was written in (at the old pin), if any.
    pub symbol: Option<String>,
    /// Why it has its status, where that needs saying (why it cannot be placed textually, say).
    pub reason: Option<String>,
    /// With `--per-commit`: every commit that changed the hunk, in order (`crate::drift::blame`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blame: Vec<blame::HunkBlame>,
    /// An `upstreamed` hunk that is upstream's own change between the pin and the overlay's later
    /// `Base:` (the copy the overlay was made from already had it): no review.
    #[serde(skip)]
    pub from_base: bool,
}

/// A watched definition that upstream changed between the two commits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SymbolChange {
    /// Its file at the old commit (upstream's path).
    pub path: String,
    /// The definition's qualified name.
    pub symbol: String,
    /// Why it is watched: `encloses hunk #2 of <file>` or `Depends-On`.
    pub watched_because: String,
    /// Whether upstream removed it.
    pub removed: bool,
    /// Upstream's change to the symbol, as unified diff hunks.
    pub diff: String,
    /// The outermost changed definition around this one (`FloorDivide` for
    /// `FloorDivide::operator()`): its diff holds this one's, so reports print the diff there once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_under: Option<String>,
}

/// One overlay's drift: its status and what led to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OverlayDrift {
    /// The overlay's file name.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// Some hunks (not all) are already upstream.
    pub partially_upstreamed: bool,
    /// For `blocked`: the earlier conflicting overlay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// For `blocked`: the overlay classified on the conflicting overlay's side of each conflict,
    /// as `bump-pin --dry-run` forecasts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<BlockedForecast>,
    /// For `review`: why the bump stops at this overlay.
    pub review: Vec<String>,
    /// For `conflict`: the files where the 3-way merge leaves conflict markers.
    pub conflicts: Vec<String>,
    /// The names of the watched definitions upstream changed (those of `symbol_changes`,
    /// deduplicated).
    pub changed_symbols: Vec<String>,
    /// Each watched definition upstream changed, with upstream's diff of it.
    pub symbol_changes: Vec<SymbolChange>,
    /// Each hunk's drift, in the overlay's order.
    pub hunks: Vec<HunkDrift>,
}

/// A blocked overlay's classification once the conflict before it is resolved on that
/// overlay's side ("ours", as `crate::bump::forecast` does): what drift would say of it then.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockedForecast {
    /// Its status on that side.
    pub status: Status,
    /// With `--per-commit`: the last commit to change that status, when it ends at it.
    pub blame: Option<Blame>,
    /// The watched definitions upstream changed (a `Depends-On`, one a hunk sits in).
    pub changed_symbols: Vec<String>,
    /// Why the bump would stop at it for review, if it would.
    pub review: Vec<String>,
}

/// Parsed texts and symbol indexes by blob id: unchanged blobs are never re-read or re-parsed.
#[derive(Default)]
pub struct Caches {
    texts: HashMap<git2::Oid, Arc<Text>>,
    symbols: HashMap<git2::Oid, Arc<SymbolIndex>>,
    /// How many blobs were read and parsed (cache misses).
    pub blobs_read: usize,
    /// How many symbol scans were run (cache misses).
    pub scans: usize,
}

impl Caches {
    pub(crate) fn text(
        &mut self,
        tree: &Tree,
        path: &str,
        src: &dyn BlobSource,
    ) -> Result<Option<Arc<Text>>> {
        let Some(id) = tree.blob_id(path) else {
            return Ok(None);
        };
        if let Some(t) = self.texts.get(&id) {
            return Ok(Some(t.clone()));
        }
        let bytes = tree.bytes(path, src)?.unwrap_or_default();
        self.blobs_read += 1;
        let t = Arc::new(Text::parse(&String::from_utf8_lossy(&bytes)));
        self.texts.insert(id, t.clone());
        Ok(Some(t))
    }

    pub(crate) fn symbols(
        &mut self,
        tree: &Tree,
        path: &str,
        src: &dyn BlobSource,
    ) -> Result<Option<Arc<SymbolIndex>>> {
        let Some(id) = tree.blob_id(path) else {
            return Ok(None);
        };
        if let Some(s) = self.symbols.get(&id) {
            return Ok(Some(s.clone()));
        }
        let text = self.text(tree, path, src)?.expect("present");
        self.scans += 1;
        let s = Arc::new(scan(&text.render()));
        self.symbols.insert(id, s.clone());
        Ok(Some(s))
    }
}

/// The definition a hunk placed at 0-based `pos` is "in": for a change that removes lines, the
/// innermost definition around its first removed line; for a pure insertion, the definition that
/// encloses both neighbours (an insertion between two definitions is in neither).
fn symbol_for(ix: &SymbolIndex, text: &Text, h: &Hunk, pos: usize) -> Option<String> {
    let a = anchor(h, pos);
    let removes_first = h
        .lines
        .iter()
        .find(|l| l.kind != crate::patch::LineKind::Context)
        .is_some_and(|l| l.kind == crate::patch::LineKind::Remove);
    if removes_first {
        return ix.enclosing(a + 1).map(|s| s.qualified.clone());
    }
    let above = ix.enclosing(a + 1);
    let below_line = pos + h.leading_context() + 1;
    let below = if below_line <= text.lines.len() {
        ix.enclosing(below_line)
    } else {
        None
    };
    match (above, below) {
        (Some(x), Some(y)) if x.span == y.span => Some(x.qualified.clone()),
        (Some(x), Some(y)) if x.span.start <= y.span.start && y.span.end <= x.span.end => {
            Some(x.qualified.clone())
        }
        (Some(x), Some(y)) if y.span.start <= x.span.start && x.span.end <= y.span.end => {
            Some(y.qualified.clone())
        }
        _ => None,
    }
}

/// The symbols a hunk's removed lines touch (old side, 1-based lines), for watching.
fn touched(ix: &SymbolIndex, h: &Hunk, pos: usize) -> Vec<String> {
    let mut line = pos + 1;
    let (mut first, mut last) = (None, None);
    for l in &h.lines {
        match l.kind {
            crate::patch::LineKind::Add => {}
            crate::patch::LineKind::Remove => {
                first.get_or_insert(line);
                last = Some(line);
                line += 1;
            }
            crate::patch::LineKind::Context => line += 1,
        }
    }
    match (first, last) {
        (Some(a), Some(b)) => ix
            .overlapping(a, b)
            .iter()
            .filter(|s| s.start_line <= a && b <= s.end_line)
            .map(|s| s.qualified.clone())
            .collect(),
        _ => Vec::new(),
    }
}

fn symbol_text(text: &Text, ix: &SymbolIndex, name: &str) -> String {
    let src = text.render();
    ix.find(name)
        .iter()
        .map(|s| &src[s.span.clone()])
        .collect::<Vec<_>>()
        .join("\n")
}

fn file_entry(text: &Text, mode: u32) -> Entry {
    Entry {
        mode,
        content: Content::Bytes(Arc::from(text.render().into_bytes())),
    }
}

/// Classifies every overlay of `series` for a move of the upstream from `from` to `to`, evaluating
/// the series as a chain (each overlay on top of the previous ones) on both sides.
///
/// This is the one classification `drift` and `bump-pin` share: whether an overlay conflicts, is
/// upstream, or carries across is decided by the same 3-way merge `bump-pin` performs
/// ([`crate::merge::merge_overlay`], git's algorithm); hunk placement and the watched symbols only
/// add what needs a human's review. An overlay after a conflicting one that touches a file the
/// conflicting one touches is `blocked` by it (its result depends on the resolution).
///
/// `renames` are upstream's renames between the two commits ([`upstream_renames`]): a file an
/// overlay changes that upstream moved is followed to its new path, as git's merge does.
pub fn classify(
    from: &Tree,
    to: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    caches: &mut Caches,
    renames: &BTreeMap<String, String>,
) -> Result<Vec<OverlayDrift>> {
    classify_based(from, to, series, src, caches, renames, &BTreeMap::new())
}

/// [`classify`], each overlay of `bases` judged from upstream at its recorded `Base:` (a tree
/// of [`later_bases`]) rather than at `from`: its watched definitions are compared from there, and
/// a hunk that is upstream's own change since `from` (the copy was taken later) asks no review.
pub fn classify_based(
    from: &Tree,
    to: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    caches: &mut Caches,
    renames: &BTreeMap<String, String>,
    bases: &BTreeMap<String, Tree>,
) -> Result<Vec<OverlayDrift>> {
    let mut chains = Chains {
        from_up: from,
        to_up: to,
        from_chain: from.clone(),
        to_chain: to.clone(),
        renames,
        bases,
    };
    // Files of conflicting (or blocked) overlays, and which overlay holds each first.
    let mut stuck: BTreeMap<String, String> = BTreeMap::new();
    // The new side as the dry run carries it: each conflict resolved on the overlay's side.
    let mut ahead = to.clone();
    let mut out = Vec::new();
    for ov in &series.overlays {
        let paths = overlay_paths(ov);
        if let Some(by) = paths.iter().find_map(|p| stuck.get(p)) {
            let by = by.clone();
            let forecast = forecast_blocked(ov, &chains, &mut ahead, src, caches)?;
            chains.from_chain.apply_overlay(ov, src)?;
            for p in paths {
                stuck.entry(p).or_insert_with(|| by.clone());
            }
            out.push(OverlayDrift {
                forecast: Some(forecast),
                ..OverlayDrift::blocked(&ov.name, by)
            });
            continue;
        }
        let before = chains.from_chain.clone();
        let d = classify_one(ov, &mut chains, src, caches)?;
        if d.status == Status::Conflict {
            ahead = ours_side(
                ov,
                (&before, &chains.from_chain),
                &ahead,
                chains.renames,
                src,
            )?;
            for p in paths {
                stuck.entry(p).or_insert_with(|| ov.name.clone());
            }
        } else {
            for p in crate::merge::carried_paths(ov, chains.renames) {
                match chains.to_chain.entries.get(&p) {
                    Some(e) => ahead.entries.insert(p, e.clone()),
                    None => ahead.entries.remove(&p),
                };
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// A blocked overlay classified on `ahead` (the new side with each earlier conflict resolved on
/// its overlay's side), which then carries it too.
fn forecast_blocked(
    ov: &Overlay,
    chains: &Chains<'_>,
    ahead: &mut Tree,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<BlockedForecast> {
    let mut side = Chains {
        from_chain: chains.from_chain.clone(),
        to_chain: ahead.clone(),
        ..*chains
    };
    let d = classify_one(ov, &mut side, src, caches)?;
    *ahead = if d.status == Status::Conflict {
        let pair = (&chains.from_chain, &side.from_chain);
        ours_side(ov, pair, ahead, chains.renames, src)?
    } else {
        side.to_chain
    };
    Ok(BlockedForecast {
        status: d.status,
        blame: None,
        changed_symbols: d.changed_symbols,
        review: d.review,
    })
}

/// `new_before` with `ov` merged and each conflict resolved on the overlay's side, as the dry run
/// goes on (`crate::bump::forecast`).
fn ours_side(
    ov: &Overlay,
    (old_before, old_after): (&Tree, &Tree),
    new_before: &Tree,
    renames: &BTreeMap<String, String>,
    src: &dyn BlobSource,
) -> Result<Tree> {
    let labels = crate::merge::Labels {
        base: "old pin",
        ours: "overlay",
        theirs: "new upstream",
    };
    let trees = crate::merge::MergeTrees {
        old_before,
        old_after,
        new_before,
    };
    let (merged, _) = crate::merge::merge_overlay(ov, trees, src, labels, renames)?;
    let paths = crate::merge::carried_paths(ov, renames);
    crate::merge::ours_side(ov, trees, merged, &paths, renames, src, labels)
}

/// The paths an overlay reads or writes.
pub(crate) fn overlay_paths(ov: &Overlay) -> Vec<String> {
    ov.touched_paths().collect()
}

/// Upstream at both commits, and the series applied so far on each side.
struct Chains<'a> {
    from_up: &'a Tree,
    to_up: &'a Tree,
    from_chain: Tree,
    to_chain: Tree,
    renames: &'a BTreeMap<String, String>,
    /// Upstream at an overlay's later `Base:`, by overlay name.
    bases: &'a BTreeMap<String, Tree>,
}

impl OverlayDrift {
    fn blocked(name: &str, by: String) -> OverlayDrift {
        OverlayDrift {
            name: name.to_string(),
            status: Status::Blocked,
            partially_upstreamed: false,
            blocked_by: Some(by),
            forecast: None,
            review: Vec::new(),
            conflicts: Vec::new(),
            changed_symbols: Vec::new(),
            symbol_changes: Vec::new(),
            hunks: Vec::new(),
        }
    }
}

fn classify_one(
    ov: &Overlay,
    chains: &mut Chains<'_>,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<OverlayDrift> {
    let mut watched: BTreeMap<(String, String), String> = BTreeMap::new();
    for d in &ov.trailers.depends_on {
        watched.insert((d.path.clone(), d.symbol.clone()), "Depends-On".into());
    }
    let mut hunks = Vec::new();
    let mut to_next = chains.to_chain.clone();
    for fp in &ov.files {
        // The old pin: which definition each hunk is in.
        let pin_symbols = pin_side(ov, fp, &chains.from_chain, src, caches, &mut watched)?;
        let mut fates = Fates {
            file: fp.path().to_string(),
            hunks: &mut hunks,
            pin_symbols,
        };
        place_file(ov, fp, chains, &mut to_next, src, caches, &mut fates)?;
    }
    let base = chains.bases.get(&ov.name);
    let symbol_changes = watch_symbols(
        ov,
        watched,
        (base.unwrap_or(chains.from_up), chains.to_up),
        chains.renames,
        src,
        caches,
    )?;
    // The merge bump-pin performs decides conflict / upstream / carried.
    let mut from_next = chains.from_chain.clone();
    from_next.apply_overlay(ov, src)?;
    // Every hunk placed with its whole context unchanged: upstream's edits are outside every
    // hunk's context, where git's merge is the same splice (it needs no merge, which keeps
    // `--per-commit` fast; `cargo xtask diffgit` checks the agreement with bump-pin's merge).
    let textual = !hunks.is_empty()
        && hunks
            .iter()
            .all(|h| matches!(h.status, HunkStatus::Exact | HunkStatus::Moved));
    if let Some(base) = base {
        mark_from_base(ov, &mut hunks, base, src, caches)?;
    }
    if textual {
        chains.from_chain = from_next;
        chains.to_chain = to_next;
        return Ok(finish(
            ov,
            Status::Clean,
            hunks,
            symbol_changes,
            Vec::new(),
            Vec::new(),
        ));
    }
    let labels = crate::merge::Labels {
        base: "old pin",
        ours: "overlay",
        theirs: "new upstream",
    };
    let trees = crate::merge::MergeTrees {
        old_before: &chains.from_chain,
        old_after: &from_next,
        new_before: &chains.to_chain,
    };
    let (merged, conflicts) = crate::merge::merge_overlay(ov, trees, src, labels, chains.renames)?;
    let carried = if conflicts.is_empty() {
        let paths = overlay_paths(ov)
            .into_iter()
            .flat_map(|p| [chains.renames.get(&p).cloned(), Some(p)])
            .flatten()
            .collect();
        crate::merge::canonical_files(&chains.to_chain, &merged, &paths, src)?
    } else {
        Vec::new()
    };
    chains.from_chain = from_next;
    let status = merge_verdict(conflicts.is_empty(), carried.is_empty(), &mut hunks);
    if status != Status::Conflict {
        chains.to_chain = merged;
    }
    Ok(finish(
        ov,
        status,
        hunks,
        symbol_changes,
        Vec::new(),
        conflicts,
    ))
}

/// What bump-pin's merge decides for an overlay drift placed hunk by hunk: a conflict; nothing
/// left to carry (every hunk upstreamed); or clean, its textually misplaced hunks merged.
fn merge_verdict(clean: bool, nothing_carried: bool, hunks: &mut [HunkDrift]) -> Status {
    if !clean {
        return Status::Conflict;
    }
    if nothing_carried {
        // Nothing left to carry: every change is already upstream.
        for h in hunks.iter_mut() {
            if h.status != HunkStatus::Upstreamed {
                h.status = HunkStatus::Upstreamed;
                h.reason = Some("the 3-way merge finds the change already upstream".into());
            }
        }
        return Status::Upstreamed;
    }
    for h in hunks.iter_mut() {
        if h.status == HunkStatus::Conflict {
            // Textually misplaced, but git's merge carries it: review, not a conflict.
            h.status = HunkStatus::Merged;
            h.reason = h
                .reason
                .take()
                .map(|r| format!("{r}; the 3-way merge carries it"));
        }
    }
    Status::Clean
}

/// The overlay's status from its hunks and watched symbols, once the merge has not conflicted and
/// left something to carry (`Clean` passed in) — or `status` as decided by the merge.
fn finish(
    ov: &Overlay,
    status: Status,
    hunks: Vec<HunkDrift>,
    symbol_changes: Vec<SymbolChange>,
    mut review: Vec<String>,
    conflicts: Vec<String>,
) -> OverlayDrift {
    let status = if status != Status::Clean {
        status
    } else {
        for h in hunks
            .iter()
            .filter(|h| h.status == HunkStatus::Upstreamed && !h.from_base)
        {
            review.push(format!(
                "{} hunk #{} is already upstream while the rest is not: check that the carried overlay does not add it twice, and update its Upstream-Status, which still describes the whole overlay",
                h.file, h.hunk
            ));
        }
        for c in symbol_changes.iter().filter(|c| c.removed) {
            review.push(format!(
                "upstream removed {}::{} ({})",
                c.path, c.symbol, c.watched_because
            ));
        }
        let any = |s: HunkStatus| hunks.iter().any(|h| h.status == s);
        if !review.is_empty() {
            Status::Review
        } else if !symbol_changes.is_empty() || any(HunkStatus::Merged) {
            Status::ContextDrift
        } else if any(HunkStatus::Moved) || hunks.iter().any(|h| h.from_base) {
            // Upstream's own lines since the pin leave the overlay: rewritten, nothing to review.
            Status::Moved
        } else {
            Status::Clean
        }
    };
    let upstreamed = hunks
        .iter()
        .filter(|h| h.status == HunkStatus::Upstreamed && !h.from_base)
        .count();
    let mut changed_symbols: Vec<String> =
        symbol_changes.iter().map(|c| c.symbol.clone()).collect();
    changed_symbols.dedup();
    OverlayDrift {
        name: ov.name.clone(),
        status,
        partially_upstreamed: upstreamed > 0 && upstreamed < hunks.len(),
        blocked_by: None,
        forecast: None,
        review,
        conflicts,
        changed_symbols,
        symbol_changes,
        hunks,
    }
}

/// Marks the `upstreamed` hunks whose change upstream already has at the overlay's later base.
fn mark_from_base(
    ov: &Overlay,
    hunks: &mut [HunkDrift],
    base: &Tree,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<()> {
    for h in hunks
        .iter_mut()
        .filter(|h| h.status == HunkStatus::Upstreamed)
    {
        let Some(fp) = ov.files.iter().find(|f| f.path() == h.file) else {
            continue;
        };
        let path = fp.old_path.as_deref().unwrap_or(fp.path());
        let Some(text) = caches.text(base, path, src)? else {
            continue;
        };
        let hunk = &fp.hunks[h.hunk - 1];
        if crate::apply::already_applied_at(&text, hunk, 0, 0).is_some()
            || locate(&text, &reverse(hunk), 0, 0).is_ok()
        {
            h.from_base = true;
            h.reason = Some(
                "upstream's own change after the pin: the overlay's Base: already has it".into(),
            );
        }
    }
    Ok(())
}

/// For each overlay whose recorded `Base:` (`crate::reverts::recorded`) is later than `from` and
/// not later than `to`: upstream at that base, on `paths` (a per-file base for its file; a path
/// the base lacks stays as at `from`). The overlay's copy was taken there, so upstream's work
/// from `from` to the base is already in it.
pub fn later_bases(
    repo: &git2::Repository,
    series: &Series,
    (from, to): (git2::Oid, git2::Oid),
    from_tree: &Tree,
    paths: &[String],
) -> Result<BTreeMap<String, Tree>> {
    let between = |b: git2::Oid| {
        b != from
            && repo.graph_descendant_of(b, from).unwrap_or(false)
            && (b == to || repo.graph_descendant_of(to, b).unwrap_or(false))
    };
    let mut out = BTreeMap::new();
    for ov in &series.overlays {
        let rec = crate::reverts::recorded(ov)?;
        let mut tree = from_tree.clone();
        let mut later = false;
        for p in paths {
            let Some(b) = rec.base_for(p).filter(|b| between(*b)) else {
                continue;
            };
            if let Some(e) = subset_tree(repo, b, std::slice::from_ref(p))?
                .entries
                .remove(p)
            {
                tree.entries.insert(p.clone(), e);
                later = true;
            }
        }
        if later {
            out.insert(ov.name.clone(), tree);
        }
    }
    Ok(out)
}

/// One file's hunks' fates, in the order drift reports them, and the definition each hunk is in
/// at the old pin.
struct Fates<'a> {
    file: String,
    hunks: &'a mut Vec<HunkDrift>,
    pin_symbols: Vec<Option<String>>,
}

impl Fates<'_> {
    fn push(
        &mut self,
        (i, h): (usize, &Hunk),
        status: HunkStatus,
        actual: Option<usize>,
        symbol: Option<String>,
        reason: Option<String>,
    ) {
        self.hunks.push(HunkDrift {
            file: self.file.clone(),
            hunk: i + 1,
            status,
            recorded: h.old_start,
            actual,
            symbol,
            reason,
            blame: Vec::new(),
            from_base: false,
        });
    }
}

/// Places one file patch's hunks at the target chain (never with fuzz), recording each hunk's fate
/// in `fates`; updates `to_next` with the placed hunks.
fn place_file(
    ov: &Overlay,
    fp: &FilePatch,
    chains: &Chains<'_>,
    to_next: &mut Tree,
    src: &dyn BlobSource,
    caches: &mut Caches,
    fates: &mut Fates<'_>,
) -> Result<()> {
    if fp.is_new() {
        let path = fp.new_path.as_deref().expect("new file has a path");
        let (status, reason) = place_new_file(ov, fp, path, to_next, src, caches)?;
        for (i, h) in fp.hunks.iter().enumerate() {
            let actual = (status == HunkStatus::Exact).then_some(h.old_start);
            fates.push((i, h), status, actual, None, reason.clone());
        }
        return Ok(());
    }
    let (old_path, moved_note) = upstream_path(fp, to_next, chains.renames);
    let Some(to_text) = caches.text(to_next, old_path, src)? else {
        let (status, reason) = if fp.is_delete() {
            (HunkStatus::Upstreamed, None)
        } else {
            (
                HunkStatus::Conflict,
                Some(format!("{old_path} no longer exists upstream")),
            )
        };
        for (i, h) in fp.hunks.iter().enumerate() {
            let sym = fates.pin_symbols[i].clone();
            fates.push((i, h), status, None, sym, reason.clone());
        }
        return Ok(());
    };
    let to_syms = caches
        .symbols(to_next, old_path, src)?
        .expect("text exists");
    let target = Target {
        text: &to_text,
        syms: &to_syms,
        moved_note,
    };
    let placed = place_hunks(fp, &target, fates);
    write_placed(fp, to_next, old_path, &to_text, &placed);
    Ok(())
}

/// Where the file `fp` patches is upstream at the target: its old path, or where upstream moved it
/// (or the overlay's own rename put it), with a note saying so.
fn upstream_path<'a>(
    fp: &'a FilePatch,
    to_next: &Tree,
    renames: &'a BTreeMap<String, String>,
) -> (&'a str, Option<String>) {
    let old_path = fp.old_path.as_deref().expect("not new");
    if to_next.entries.contains_key(old_path) {
        return (old_path, None);
    }
    // Upstream moved the file (or made the overlay's own rename): look for it there.
    let target = match fp.new_path.as_deref() {
        Some(n) if fp.is_rename() && to_next.entries.contains_key(n) => Some(n),
        _ => renames.get(old_path).map(String::as_str),
    };
    match target.filter(|t| to_next.entries.contains_key(*t)) {
        Some(t) => (t, Some(format!("upstream has {old_path} as {t}"))),
        None => (old_path, None),
    }
}

/// The file at the target: its text, its definitions, and the note when upstream moved it.
struct Target<'a> {
    text: &'a Text,
    syms: &'a SymbolIndex,
    moved_note: Option<String>,
}

/// Each hunk of `fp` placed in the target's text in order (already applied, placed, reversed
/// upstream, or a conflict), its fate pushed; the placed hunks with their positions.
fn place_hunks<'h>(
    fp: &'h FilePatch,
    target: &Target<'_>,
    fates: &mut Fates<'_>,
) -> Vec<(&'h Hunk, usize)> {
    let to_text = target.text;
    let (mut cursor, mut drift) = (0usize, 0isize);
    let mut placed: Vec<(&Hunk, usize)> = Vec::new();
    for (i, h) in fp.hunks.iter().enumerate() {
        let sym = fates.pin_symbols[i].clone();
        // Is the change already there, at its place? Asked before searching for the old text
        // anywhere else (an insertion's context can reappear below the inserted lines).
        if !crate::apply::at_expected(to_text, h, cursor, drift)
            && let Some(pos) = crate::apply::already_applied_at(to_text, h, cursor, drift)
        {
            fates.push((i, h), HunkStatus::Upstreamed, Some(pos + 1), sym, None);
            cursor = pos + reverse(h).preimage().count();
            continue;
        }
        match locate(to_text, h, cursor, drift) {
            Ok(pos) => {
                let now = symbol_for(target.syms, to_text, h, pos);
                if now != sym {
                    let reason = moved_out_of(pos, now.as_deref(), sym.as_deref());
                    fates.push(
                        (i, h),
                        HunkStatus::Conflict,
                        Some(pos + 1),
                        sym,
                        Some(reason),
                    );
                    continue;
                }
                let line = pos + usize::from(h.old_len > 0);
                let status = if target.moved_note.is_some() {
                    HunkStatus::Merged
                } else if line == h.old_start {
                    HunkStatus::Exact
                } else {
                    HunkStatus::Moved
                };
                fates.push((i, h), status, Some(line), sym, target.moved_note.clone());
                drift = pos as isize - (h.old_start as isize - isize::from(h.old_len > 0));
                cursor = pos + h.preimage().count();
                placed.push((h, pos));
            }
            Err(why) => {
                let rev = reverse(h);
                match locate(to_text, &rev, cursor, drift) {
                    Ok(pos) => {
                        fates.push((i, h), HunkStatus::Upstreamed, Some(pos + 1), sym, None);
                        cursor = pos + rev.preimage().count();
                    }
                    Err(_) => {
                        let why = Some(why.to_string());
                        fates.push((i, h), HunkStatus::Conflict, None, sym, why)
                    }
                }
            }
        }
    }
    placed
}

/// Why a hunk whose context now matches only in another definition is a conflict.
fn moved_out_of(pos: usize, now: Option<&str>, was: Option<&str>) -> String {
    let inside =
        |s: Option<&str>| s.map_or("outside any definition".into(), |s| format!("inside {s}"));
    format!(
        "its context now matches only at line {} {}, but it was written {}",
        pos + 1,
        inside(now),
        inside(was)
    )
}

/// The placed hunks spliced into the target's file in `to_next` (removed when the overlay deletes
/// it and every hunk placed; moved to the overlay's new path).
fn write_placed(
    fp: &FilePatch,
    to_next: &mut Tree,
    old_path: &str,
    to_text: &Text,
    placed: &[(&Hunk, usize)],
) {
    let result = splice(to_text, placed);
    let mode = to_next.entries.get(old_path).map_or(MODE_FILE, |e| e.mode);
    if fp.is_delete() && placed.len() == fp.hunks.len() {
        to_next.entries.remove(old_path);
    } else if !placed.is_empty() {
        to_next.entries.remove(old_path);
        let new_path = fp.new_path.as_deref().unwrap_or(old_path);
        to_next.entries.insert(
            new_path.to_string(),
            file_entry(&result, fp.new_mode.unwrap_or(mode)),
        );
    }
}

/// Where each hunk of `fp` sits at the old pin and which definition it is in (per hunk); adds the
/// definitions its hunks touch or sit in to `watched`.
fn pin_side(
    ov: &Overlay,
    fp: &FilePatch,
    from_chain: &Tree,
    src: &dyn BlobSource,
    caches: &mut Caches,
    watched: &mut BTreeMap<(String, String), String>,
) -> Result<Vec<Option<String>>> {
    let from_text = match &fp.old_path {
        Some(p) => caches
            .text(from_chain, p, src)?
            .ok_or_else(|| not_at_pin(ov, fp))?,
        None => Arc::new(Text::parse("")),
    };
    let from_syms = match &fp.old_path {
        Some(p) => caches.symbols(from_chain, p, src)?,
        None => None,
    };
    let (_, from_pl) = crate::apply::apply_hunks(&from_text, fp).map_err(|_| not_at_pin(ov, fp))?;
    let from_pos: Vec<usize> = from_pl
        .iter()
        .zip(&fp.hunks)
        .map(|(p, h)| p.actual - usize::from(h.old_len > 0))
        .collect();
    let symbols: Vec<Option<String>> = (0..fp.hunks.len())
        .map(|i| {
            from_syms
                .as_ref()
                .and_then(|ix| symbol_for(ix, &from_text, &fp.hunks[i], from_pos[i]))
        })
        .collect();
    if let (Some(ix), Some(p)) = (&from_syms, &fp.old_path) {
        for (i, h) in fp.hunks.iter().enumerate() {
            for s in touched(ix, h, from_pos[i])
                .into_iter()
                .chain(symbols[i].clone())
            {
                watched
                    .entry((p.clone(), s))
                    .or_insert_with(|| format!("encloses hunk #{} of {p}", i + 1));
            }
        }
    }
    Ok(symbols)
}

/// A file the overlay creates: already upstream with the same content, upstream with another
/// content (a conflict), or added to `to_next`. One (status, reason) for all its hunks.
fn place_new_file(
    ov: &Overlay,
    fp: &FilePatch,
    path: &str,
    to_next: &mut Tree,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<(HunkStatus, Option<String>)> {
    let want = crate::apply::apply_hunks(&Text::parse(""), fp)
        .map(|r| r.0)
        .map_err(|_| not_at_pin(ov, fp))?;
    Ok(match caches.text(to_next, path, src)? {
        Some(have) if *have == want => (HunkStatus::Upstreamed, None),
        Some(_) => (
            HunkStatus::Conflict,
            Some(format!("{path} now exists upstream with other content")),
        ),
        None => {
            to_next.entries.insert(
                path.to_string(),
                file_entry(&want, fp.new_mode.unwrap_or(MODE_FILE)),
            );
            (HunkStatus::Exact, None)
        }
    })
}

/// Watched symbols: upstream's own versions (overlays excluded) compared at both commits.
fn watch_symbols(
    ov: &Overlay,
    watched: BTreeMap<(String, String), String>,
    (from_up, to_up): (&Tree, &Tree),
    renames: &BTreeMap<String, String>,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<Vec<SymbolChange>> {
    let mut symbol_changes = Vec::new();
    for ((path, sym), why) in watched {
        let before = caches.symbols(from_up, &path, src)?;
        let Some(a) = before.as_ref().and_then(|ix| ix.fingerprint_of(&sym)) else {
            if why == "Depends-On" {
                let line = crate::check::depends_on_line(ov, &path, &sym);
                return Err(Error::input(&ov.path, line, format!("Depends-On: {path}::{sym}: no such definition in upstream at the pin"))
                    .with_help("fix the trailer: the path is relative to the upstream root, the symbol a function, class or macro name"));
            }
            continue; // introduced by an overlay, not upstream's
        };
        // A file upstream moved is compared at its new path.
        let to_path = renames.get(&path).unwrap_or(&path).clone();
        let after = caches.symbols(to_up, &to_path, src)?;
        let b = after.as_ref().and_then(|ix| ix.fingerprint_of(&sym));
        if Some(&a) == b.as_ref() {
            continue;
        }
        let old_text = symbol_text(
            &caches.text(from_up, &path, src)?.expect("scanned"),
            before.as_ref().expect("found"),
            &sym,
        );
        let new_text = match (&after, caches.text(to_up, &to_path, src)?) {
            (Some(ix), Some(t)) => symbol_text(&t, ix, &sym),
            _ => String::new(),
        };
        let mut d = String::new();
        for h in diff::hunks(&ensure_nl(old_text), &ensure_nl(new_text), diff::CONTEXT)? {
            render_hunk(&mut d, &h);
        }
        symbol_changes.push(SymbolChange {
            path,
            symbol: sym,
            watched_because: why,
            removed: b.is_none(),
            diff: d,
            diff_under: None,
        });
    }
    fold_nested(&mut symbol_changes, (from_up, to_up), renames, src, caches)?;
    Ok(symbol_changes)
}

/// Marks each changed definition that sits inside another changed one of the same file, at both
/// commits, with the outermost such one (`diff_under`): that one's diff already shows it.
fn fold_nested(
    changes: &mut [SymbolChange],
    (from_up, to_up): (&Tree, &Tree),
    renames: &BTreeMap<String, String>,
    src: &dyn BlobSource,
    caches: &mut Caches,
) -> Result<()> {
    for i in 0..changes.len() {
        let path = changes[i].path.clone();
        let to_path = renames.get(&path).unwrap_or(&path).clone();
        let indexes = [
            caches.symbols(from_up, &path, src)?,
            caches.symbols(to_up, &to_path, src)?,
        ];
        // Inside at every commit that has both; the outer's size (at the first) ranks the outers.
        let inside = |outer: &str, inner: &str| -> Option<usize> {
            let mut size = None;
            for ix in indexes.iter().flatten() {
                let (o, n) = (ix.find(outer), ix.find(inner));
                if o.is_empty() || n.is_empty() {
                    continue;
                }
                let holds = |o: &&crate::symbols::Symbol, n: &&crate::symbols::Symbol| {
                    o.span != n.span && o.span.start <= n.span.start && n.span.end <= o.span.end
                };
                if !n.iter().all(|n| o.iter().any(|o| holds(o, n))) {
                    return None;
                }
                size.get_or_insert(o.iter().map(|o| o.span.len()).max().unwrap_or(0));
            }
            size
        };
        let outer = changes
            .iter()
            .filter(|c| c.path == path && c.symbol != changes[i].symbol)
            .filter_map(|c| inside(&c.symbol, &changes[i].symbol).map(|w| (w, c.symbol.clone())))
            .max();
        changes[i].diff_under = outer.map(|(_, s)| s);
    }
    Ok(())
}

fn ensure_nl(mut s: String) -> String {
    if !s.is_empty() && !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

fn not_at_pin(ov: &Overlay, fp: &FilePatch) -> Error {
    Error::input(
        &ov.path,
        Some(fp.patch_line),
        format!("{} does not apply at the starting commit", fp.path()),
    )
    .with_help(
        Help::new("the series must apply where the comparison starts (the pin; for drift, its --from) before drift or bump-pin can carry it; ")
            .step(NextStep::plain("check"))
            .text(" shows what fails"),
    )
}

/// The files a series touches or depends on: the only ones drift needs to read at each commit.
pub fn relevant_paths(series: &Series) -> Vec<String> {
    let mut v: Vec<String> = series
        .overlays
        .iter()
        .flat_map(|o| {
            o.touched_paths()
                .chain(o.trailers.depends_on.iter().map(|d| d.path.clone()))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

pub use crate::renames::upstream_renames;

/// A tree holding only `paths` of a commit (those that exist).
pub fn subset_tree(repo: &git2::Repository, commit: git2::Oid, paths: &[String]) -> Result<Tree> {
    crate::upstream::subset_of_commit(repo, commit, paths)
}

/// The commit an overlay's status is blamed on (`--per-commit`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blame {
    /// The commit's id (full hex).
    pub sha: String,
    /// Its subject line.
    pub subject: String,
}

/// What `drift` reports: each overlay's drift from one upstream commit to another.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The upstream's name (in pins.toml).
    pub upstream: String,
    /// The commit drift starts from (full hex).
    pub from: String,
    /// The commit it goes to (full hex).
    pub to: String,
    /// First-parent commits examined (with --per-commit) and how many needed evaluation.
    pub commits: Option<usize>,
    /// How many of those commits changed a relevant file and so were classified again.
    pub evaluated: Option<usize>,
    /// Each overlay's drift, in series order.
    pub overlays: Vec<ReportOverlay>,
}

/// One overlay of a report: its drift and, with `--per-commit`, the commit it is blamed on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReportOverlay {
    /// The overlay's drift (flattened into this record when serialized).
    #[serde(flatten)]
    pub drift: OverlayDrift,
    /// With `--per-commit`: the last commit to change the overlay's status, when the status it
    /// changed to is the final one.
    pub blame: Option<Blame>,
}

/// The last commit of `history` whose `status` differs from its predecessor's (the first from
/// `Clean`), if the status it changed to is `last`.
fn last_change(
    repo: &git2::Repository,
    history: &[blame::Step],
    status: impl Fn(&[OverlayDrift]) -> Status,
    last: Status,
) -> Result<Option<Blame>> {
    let mut at = None;
    let mut before = Status::Clean;
    for (c, _, st) in history {
        if status(st) != before {
            at = Some(*c);
            before = status(st);
        }
    }
    let Some(c) = at.filter(|_| before == last) else {
        return Ok(None);
    };
    let commit = repo
        .find_commit(c)
        .map_err(|e| Error::git("reading commit", e))?;
    Ok(Some(Blame {
        sha: c.to_string(),
        subject: commit.summary().ok().flatten().unwrap_or("").to_string(),
    }))
}

/// The first-parent commits after `from` up to `to`, oldest first; an error when `from` is not on
/// that line.
fn first_parents(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Vec<git2::Oid>> {
    let walking = |e| Error::git("walking history", e);
    let mut walk = repo.revwalk().map_err(walking)?;
    walk.push(to).map_err(walking)?;
    walk.simplify_first_parent().map_err(walking)?;
    let mut commits = Vec::new();
    let mut reached = false;
    for id in walk {
        let id = id.map_err(walking)?;
        if id == from {
            reached = true;
            break;
        }
        commits.push(id);
    }
    if !reached {
        return Err(Error::input(
            "pins.toml",
            None,
            format!("{from} is not on the first-parent history of {to}"),
        )
        .with_help(
            "--per-commit walks first parents from --to back to --from; pick a --from on that line",
        ));
    }
    commits.reverse();
    Ok(commits)
}

/// What `drift --per-commit` reads at every commit of the range.
struct Scan<'a> {
    repo: &'a git2::Repository,
    src: &'a dyn BlobSource,
    series: &'a Series,
    from: git2::Oid,
    from_tree: &'a Tree,
    paths: &'a [String],
}

impl Scan<'_> {
    /// The series classified at every commit, evaluated again only where a path it reads
    /// changed; and how many evaluations that took.
    fn history(
        &self,
        commits: &[git2::Oid],
        caches: &mut Caches,
    ) -> Result<(Vec<blame::Step>, usize)> {
        let (repo, paths) = (self.repo, self.paths);
        // A commit that changes only a mode (`chmod +x`) keeps every blob id: the key holds both.
        let key = |t: &Tree| -> Vec<(Option<git2::Oid>, Option<u32>)> {
            let mode = |p: &String| t.entries.get(p).map(|e| e.mode);
            paths.iter().map(|p| (t.blob_id(p), mode(p))).collect()
        };
        let mut prev_key = key(self.from_tree);
        let none = BTreeMap::new();
        let mut prev: blame::Evaluation = Arc::new(classify(
            self.from_tree,
            self.from_tree,
            self.series,
            self.src,
            caches,
            &none,
        )?);
        let mut history: Vec<blame::Step> = Vec::new();
        let mut n_eval = 0;
        for c in commits {
            let t = subset_tree(repo, *c, paths)?;
            let k = key(&t);
            if k != prev_key {
                n_eval += 1;
                let renames = upstream_renames(repo, self.from, *c, paths)?;
                let bases = later_bases(repo, self.series, (self.from, *c), self.from_tree, paths)?;
                prev = Arc::new(classify_based(
                    self.from_tree,
                    &t,
                    self.series,
                    self.src,
                    caches,
                    &renames,
                    &bases,
                )?);
                prev_key = k;
            }
            history.push((*c, t, prev.clone()));
        }
        Ok((history, n_eval))
    }

    /// Each overlay's blame (and its forecast's) over `history`, and each hunk's, written into
    /// `final_drift`'s hunks; the overlays' blames returned.
    fn blame(
        &self,
        history: &[blame::Step],
        renames: &BTreeMap<String, String>,
        final_drift: &mut [OverlayDrift],
        caches: &mut Caches,
    ) -> Result<Vec<Option<Blame>>> {
        let repo = self.repo;
        let mut blames = vec![None; final_drift.len()];
        for i in 0..final_drift.len() {
            let status = |st: &[OverlayDrift]| st[i].status;
            blames[i] = last_change(repo, history, status, final_drift[i].status)?;
            if let Some(want) = final_drift[i].forecast.as_ref().map(|f| f.status) {
                let forecast = |st: &[OverlayDrift]| {
                    st[i].forecast.as_ref().map_or(st[i].status, |f| f.status)
                };
                let blame = last_change(repo, history, forecast, want)?;
                final_drift[i].forecast.as_mut().expect("checked").blame = blame;
            }
        }
        let range = blame::Range {
            from: self.from_tree,
            renames,
            series: self.series,
            history,
        };
        let per_hunk = blame::hunk_blames(repo, self.src, caches, range, final_drift)?;
        for (d, hunks) in final_drift.iter_mut().zip(per_hunk) {
            for (h, b) in d.hunks.iter_mut().zip(hunks) {
                h.blame = b;
            }
        }
        Ok(blames)
    }
}

/// What [`drift`] compares: the series of `upstream` from one of its commits to another.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The upstream's name (in pins.toml), for the report.
    pub upstream: &'a str,
    /// The commit drift starts from (the pin, usually).
    pub from: git2::Oid,
    /// The commit it goes to.
    pub to: git2::Oid,
    /// Also blame: the first-parent commit at which each overlay reached its final status.
    pub per_commit: bool,
}

/// Drift of `series` from `opts.from` to `opts.to`; with `opts.per_commit`, also the first-parent
/// commit at which each overlay reached its final status.
pub fn drift(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    series: &Series,
    opts: &Options<'_>,
) -> Result<Report> {
    let Options {
        upstream,
        from,
        to,
        per_commit,
    } = *opts;
    let cached = crate::tree::CachedBlobs::new(src);
    let src: &dyn BlobSource = &cached;
    let mut paths = relevant_paths(series);
    let renames = upstream_renames(repo, from, to, &paths)?;
    paths.extend(renames.values().cloned());
    paths.sort();
    paths.dedup();
    let mut caches = Caches::default();
    let from_tree = subset_tree(repo, from, &paths)?;
    let to_tree = subset_tree(repo, to, &paths)?;
    let bases = later_bases(repo, series, (from, to), &from_tree, &paths)?;
    let mut final_drift = classify_based(
        &from_tree,
        &to_tree,
        series,
        src,
        &mut caches,
        &renames,
        &bases,
    )?;
    let mut blames: Vec<Option<Blame>> = vec![None; final_drift.len()];
    let (mut commits_n, mut evaluated) = (None, None);
    if per_commit && from != to {
        let commits = first_parents(repo, from, to)?;
        let scan = Scan {
            repo,
            src,
            series,
            from,
            from_tree: &from_tree,
            paths: &paths,
        };
        let (history, n_eval) = scan.history(&commits, &mut caches)?;
        blames = scan.blame(&history, &renames, &mut final_drift, &mut caches)?;
        commits_n = Some(commits.len());
        evaluated = Some(n_eval);
    }
    Ok(Report {
        upstream: upstream.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        commits: commits_n,
        evaluated,
        overlays: final_drift
            .into_iter()
            .zip(blames)
            .map(|(drift, blame)| ReportOverlay { drift, blame })
            .collect(),
    })
}
