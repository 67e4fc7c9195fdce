//! `bump-pin --dry-run`: the forecast of a whole bump, conflicts included.
//!
//! A real bump stops at the first conflict (`crate::bump::bump_guided`): what follows depends on
//! how the user resolves it. The forecast does not stop. It performs the same merges, and where an
//! overlay conflicts it goes on from a deterministic stand-in for the resolution: the overlay's
//! side ("ours") of every conflicting region, as `git merge -X ours` resolves it (upstream's
//! changes elsewhere in the file are kept; a file one side deleted keeps the overlay's side).
//! Later overlays that touch a file such a resolution wrote are evaluated on top of it and marked
//! `depends_on_resolution_of` that overlay: the same rule by which drift calls them `blocked`
//! (`crate::drift::classify`), so the two commands agree overlay by overlay. A review stop does not
//! stop the forecast either: the merge it would show is carried as it is.

use std::collections::BTreeMap;

use crate::bump::{Action, Guidance, Outcome, OverlayBump, rewrite};
use crate::error::Result;
use crate::merge::{Labels, MergeTrees, canonical_files, carried_paths, merge_overlay, ours_side};
use crate::patch::Overlay;
use crate::series::Series;
use crate::tree::{BlobSource, Tree};

/// One overlay of a forecast: what the bump would do with it, and whose resolution that assumes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ForecastOverlay {
    /// What the bump would do with the overlay (flattened into this record when serialized).
    #[serde(flatten)]
    pub bump: OverlayBump,
    /// An earlier conflicting overlay whose resolution this outcome depends on (it touches a file
    /// that overlay's merge left with conflicts); the forecast took that overlay's side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on_resolution_of: Option<String>,
}

/// The forecast: an [`Outcome`] as a bump would report it (its `conflict_tree` is the first
/// conflict's or review's merge, so a caller stops the same way), and each overlay's dependency.
#[derive(Debug)]
pub struct Forecast {
    /// The bump's outcome, as [`crate::bump::bump_guided`] would report it had it not stopped.
    pub outcome: Outcome,
    /// For each overlay, in series order: the earlier conflicting overlay whose resolution its
    /// outcome depends on, if any (see [`ForecastOverlay::depends_on_resolution_of`]).
    pub depends_on_resolution_of: Vec<Option<String>>,
}

impl Forecast {
    /// Each overlay's outcome with its dependency, for reports.
    pub fn overlays(&self) -> Vec<ForecastOverlay> {
        self.outcome
            .overlays
            .iter()
            .zip(&self.depends_on_resolution_of)
            .map(|(b, d)| ForecastOverlay {
                bump: b.clone(),
                depends_on_resolution_of: d.clone(),
            })
            .collect()
    }
}

fn bump_of(
    ov: &Overlay,
    action: Action,
    conflicts: Vec<String>,
    raw: Option<String>,
) -> OverlayBump {
    OverlayBump {
        name: ov.name.clone(),
        action,
        conflicts,
        notes: Vec::new(),
        raw,
    }
}

/// Evaluates every overlay of `series` carried from `old_base` to `new_base`, never stopping:
/// a conflicting overlay is carried with its side of each conflict (see the module docs).
pub fn forecast(
    old_base: &Tree,
    new_base: &Tree,
    series: &Series,
    src: &dyn BlobSource,
    drop_upstreamed: bool,
    labels: Labels<'_>,
    guidance: &Guidance,
) -> Result<Forecast> {
    let (mut old_chain, mut new_chain) = (old_base.clone(), new_base.clone());
    let (mut overlays, mut depends) = (Vec::new(), Vec::new());
    let mut first_stop: Option<Tree> = None;
    // Files a conflict's resolution decides, and the overlay whose resolution that is (drift's
    // `blocked` rule: the first holder stays, dependents pass it on).
    let mut stuck: BTreeMap<String, String> = BTreeMap::new();
    for ov in &series.overlays {
        let mut old_next = old_chain.clone();
        old_next.apply_overlay(ov, src)?;
        let own: Vec<String> = ov.touched_paths().collect();
        let dep = own.iter().find_map(|p| stuck.get(p)).cloned();
        let trees = MergeTrees {
            old_before: &old_chain,
            old_after: &old_next,
            new_before: &new_chain,
        };
        let (merged, conflicts) = merge_overlay(ov, trees, src, labels, &guidance.renames)?;
        let paths = carried_paths(ov, &guidance.renames);
        let bump = if !conflicts.is_empty() {
            first_stop.get_or_insert_with(|| merged.clone());
            new_chain = ours_side(ov, trees, merged, &paths, &guidance.renames, src, labels)?;
            bump_of(ov, Action::Conflict, conflicts, None)
        } else {
            let files = canonical_files(&new_chain, &merged, &paths, src)?;
            if files.is_empty() {
                let action = if drop_upstreamed {
                    Action::Dropped
                } else {
                    Action::Upstreamed
                };
                bump_of(ov, action, Vec::new(), None)
            } else if let Some(why) = guidance.review.get(&ov.name) {
                first_stop.get_or_insert_with(|| merged.clone());
                new_chain = merged;
                bump_of(ov, Action::Review, why.clone(), None)
            } else {
                let (raw, changed) = rewrite(ov, files, &new_chain, &merged, src)?;
                new_chain = merged;
                let action = if changed {
                    Action::Rewritten
                } else {
                    Action::Kept
                };
                bump_of(ov, action, Vec::new(), Some(raw))
            }
        };
        let holder = match (&dep, bump.action == Action::Conflict) {
            (Some(by), _) => Some(by.clone()),
            (None, true) => Some(ov.name.clone()),
            (None, false) => None,
        };
        if let Some(h) = holder {
            for p in own {
                stuck.entry(p).or_insert_with(|| h.clone());
            }
        }
        overlays.push(bump);
        depends.push(dep);
        old_chain = old_next;
    }
    Ok(Forecast {
        outcome: Outcome {
            overlays,
            conflict_tree: first_stop,
            // A forecast writes nothing: the series is reported as it is.
            series_raw: series.raw.clone(),
        },
        depends_on_resolution_of: depends,
    })
}
