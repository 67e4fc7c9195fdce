//! `bump-pin`: move the pin, carrying every overlay with a 3-way merge (all or nothing).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::bump::{Action, BUMP_STATE};
use overlay::bump_session::{Carried, Session, SessionState as BumpState};
use overlay::lock::Mode as LockMode;
use overlay::manifest::Upstream;
use overlay::materialize::Origin;
use overlay::series::Series;
use overlay::upstream::UpstreamRepo;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct BumpArgs {
    /// The new upstream commit-ish (resolved to a full commit id for pins.toml); with `--continue`
    /// or `--abort` it may be left out (the bump in progress knows it)
    #[arg(required_unless_present_any = ["cont", "abort"])]
    pub rev: Option<String>,
    /// Report what would happen; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Retire overlays that upstream already contains
    #[arg(long)]
    pub drop_upstreamed: bool,
    /// Carry on after resolving a conflict in the bump tree
    #[arg(long = "continue", conflicts_with_all = ["abort", "dry_run"])]
    pub cont: bool,
    /// Abandon a bump in progress (removes the bump tree)
    #[arg(long, conflicts_with = "dry_run")]
    pub abort: bool,
    /// Where conflicts are written for resolution [default: target/bump/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Allow a target that is not a descendant of the pin (it reverts upstream commits)
    #[arg(long)]
    pub allow_downgrade: bool,
}

/// What moving the pin from `from` to `to` reverts, when `to` is not a descendant of `from`: the
/// commits the pin has and `to` lacks. None for a forward move.
fn reverted_commits(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Option<String>> {
    if to == from || repo.graph_descendant_of(to, from)? {
        return Ok(None);
    }
    let (f, t) = (short_id(from), short_id(to));
    let base = match repo.merge_base(from, to) {
        Ok(b) => b,
        Err(_) => return Ok(Some(format!("{t} shares no history with the pin {f}"))),
    };
    let mut walk = repo.revwalk()?;
    walk.push(from)?;
    walk.hide(to)?;
    let n = walk.count();
    Ok(Some(if base == to {
        format!(
            "{t} is an ancestor of the pin {f}: the bump reverts {n} upstream commit(s) ({t}..{f})"
        )
    } else {
        format!(
            "{t} is not a descendant of the pin {f}: the bump reverts {n} upstream commit(s) the pin has and {t} lacks ({t}..{f}, merge base {})",
            short_id(base)
        )
    }))
}

fn short_id(id: git2::Oid) -> String {
    id.to_string()[..12].to_string()
}

fn guard_paths(ctx: &Ctx, series: &Series) -> Vec<PathBuf> {
    overlay::bump_session::guard_paths(&ctx.project.pins.path, series)
}

fn guards(paths: &[PathBuf]) -> std::collections::BTreeMap<String, String> {
    overlay::bump_session::guards(paths)
}

/// A bump tree without a bump state: what a killed `--continue`, `--abort` or conflict write leaves.
fn leftover_bump_tree(dir: &Path) -> bool {
    Session::at(dir.to_path_buf()).leftover_tree()
}

/// Removes a tree this tool wrote (`overlay::bump_session::remove_tree`).
fn remove_tree(dir: &Path) -> Result<()> {
    Ok(overlay::bump_session::remove_tree(dir)?)
}

/// Whether `dir` holds the whole conflict tree written for `resolving` (not one half-written).
fn bump_tree_is_for(dir: &Path, resolving: &str) -> bool {
    Session::at(dir.to_path_buf()).tree_is_for(resolving)
}

/// A `bump-pin` command line to print as a next step: with the `--root`, `--upstream` and `--dir`
/// this run was given, so it can be pasted as is.
fn bump_command(g: &Global, a: &BumpArgs, rest: &str) -> String {
    let mut c = xtask_command(g, &format!("bump-pin {rest}"));
    if let Some(d) = &a.dir {
        let _ = write!(c, " --dir {}", d.display());
    }
    c
}

pub fn bump_pin(g: &Global, a: &BumpArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "bump-pin")?;
    let up = ctx.upstream().clone();
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| ctx.project.root.join("target").join("bump").join(&up.name));
    let state_path = dir.join(BUMP_STATE);
    let state = read_bump_state(&state_path)?;
    if state.is_none() && leftover_bump_tree(&dir) {
        // A bump finished or abandoned, killed before its tree was removed: debris, not work.
        remove_tree(&dir)?;
    }
    if a.abort {
        return bump_abort(g, a, &ctx, &dir, state.as_ref());
    }
    match (&state, a.cont) {
        (Some(s), false) => bail!(
            "a bump to {} is in progress in {} (resolving {}): finish it with `{}`, or abandon it with `{}`",
            short(&s.to),
            dir.display(),
            s.resolving,
            bump_command(g, a, "--continue"),
            bump_command(g, a, "--abort")
        ),
        (None, true) => bail!("no bump in progress in {} to continue", dir.display()),
        _ => {}
    }
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let to = match (&a.rev, &state) {
        (Some(rev), _) => resolve_rev(&ctx, &repo, rev)?,
        (None, Some(s)) => git2::Oid::from_str(&s.to)?,
        (None, None) => bail!("bump-pin needs a REV"),
    };
    let repo = ctx.open_upstream()?;
    let from = git2::Oid::from_str(&up.rev)?;
    if let Some(s) = &state
        && s.to != to.to_string()
    {
        bail!(
            "the bump in progress goes to {}, not {}",
            short(&s.to),
            short(&to.to_string())
        );
    }
    if to == from && state.is_none() {
        emit(
            ctx.json,
            serde_json::json!({ "upstream": up.name, "from": up.rev, "to": up.rev, "moved": false }),
            format!(
                "{} is already pinned at {}; nothing to do\n",
                up.name,
                short(&up.rev)
            ),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let downgrade_note = match &state {
        None => refuse_unsafe_bump(&ctx, a, &repo, from, to)?,
        Some(_) => None,
    };
    let bump = Bump {
        g,
        a,
        ctx: &ctx,
        up: &up,
        dir,
        state_path,
        state,
        series,
        repo,
        from,
        to,
        downgrade_note,
    };
    bump.run()
}

/// The saved progress of a bump stopped at a conflict, if there is one.
fn read_bump_state(state_path: &Path) -> Result<Option<BumpState>> {
    let dir = state_path.parent().unwrap_or(Path::new("."));
    Ok(Session::at(dir.to_path_buf()).read_state()?)
}

/// `bump-pin --abort`: removes the bump tree (checking it goes to REV, when one is given).
fn bump_abort(
    g: &Global,
    a: &BumpArgs,
    ctx: &Ctx,
    dir: &Path,
    state: Option<&BumpState>,
) -> Result<ExitCode> {
    let Some(s) = state else {
        bail!("no bump in progress in {}", dir.display())
    };
    if let Some(rev) = &a.rev {
        let repo = ctx.open_upstream()?;
        let want = resolve_rev(ctx, &repo, rev)?;
        if want.to_string() != s.to {
            bail!(
                "the bump in progress goes to {}, not {} ({rev}); nothing was removed. `{}` abandons it",
                short(&s.to),
                short(&want.to_string()),
                bump_command(g, a, "--abort")
            );
        }
    }
    remove_tree(dir)?;
    emit(
        ctx.json,
        serde_json::json!({ "abandoned": s.to, "removed": dir }),
        format!(
            "bump abandoned; {} removed, nothing else changed\n",
            dir.display()
        ),
    );
    Ok(ExitCode::SUCCESS)
}

/// Before a new bump starts: refuses to strand edits in the applied tree, or to move the pin
/// backwards without --allow-downgrade. Returns what an allowed downgrade reverts.
fn refuse_unsafe_bump(
    ctx: &Ctx,
    a: &BumpArgs,
    repo: &UpstreamRepo,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<Option<String>> {
    let up = ctx.upstream();
    if let Some((st, e)) = applied_edits(ctx)?
        && st.rev == up.rev
    {
        bail!(
            "{} holds {} edit(s) no overlay has ({}); a bump would strand them (refresh works only at the pin they were made on); nothing was written\n  help: keep them: `cargo xtask refresh{u}` (or `new-overlay`), then bump; discard them: `cargo xtask apply{u} --force`, then bump",
            ctx.rel(&ctx.default_dir()),
            e.all().count(),
            list_edits(&e),
            u = upstream_flag(ctx)
        );
    }
    let Some(what) = reverted_commits(repo.repo(), from, to)? else {
        return Ok(None);
    };
    if !a.allow_downgrade {
        bail!(
            "refusing to move the pin backwards: {what}; nothing was written\n  help: `git log {}..{}` in the upstream lists them; pass --allow-downgrade if reverting them is what you want",
            short(&to.to_string()),
            short(&up.rev)
        );
    }
    Ok(Some(what))
}

/// One `bump-pin` (new or `--continue`d) once its target is known and the checks have passed.
struct Bump<'a> {
    g: &'a Global,
    a: &'a BumpArgs,
    ctx: &'a Ctx,
    up: &'a Upstream,
    /// The bump tree, where a conflict is written for resolution.
    dir: PathBuf,
    state_path: PathBuf,
    /// The saved progress, when continuing.
    state: Option<BumpState>,
    series: Series,
    repo: UpstreamRepo,
    from: git2::Oid,
    to: git2::Oid,
    /// What an allowed downgrade reverts.
    downgrade_note: Option<String>,
}

impl Bump<'_> {
    fn run(&self) -> Result<ExitCode> {
        let (outcome, report, rewritten_note, forecast) = self.merge()?;
        let mut h = self.human_report(&outcome, &report, &forecast);
        let overlays = match &forecast {
            Some(f) => serde_json::to_value(f.overlays())?,
            None => serde_json::to_value(&outcome.overlays)?,
        };
        let json = serde_json::json!({ "upstream": self.up.name, "from": self.up.rev, "to": self.to.to_string(), "dry_run": self.a.dry_run,
            "overlays": overlays, "drift": report.overlays, "reverts": self.downgrade_note });

        if let Some(tree) = &outcome.conflict_tree {
            let resolving = outcome
                .overlays
                .iter()
                .find(|o| matches!(o.action, Action::Conflict | Action::Review))
                .map(|o| o.name.clone())
                .unwrap_or_default();
            if !self.a.dry_run {
                self.write_conflict(&outcome, tree, &resolving)?;
                self.conflict_next_steps(&outcome, &resolving, rewritten_note, &mut h);
            }
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::from(1));
        }
        if !outcome.is_clean() {
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::from(1));
        }
        if self.a.dry_run {
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::SUCCESS);
        }
        let written = self.write_bump(&outcome)?;
        let _ = writeln!(
            h,
            "pinned {} at {}; {} file(s) written",
            self.up.name, self.to, written
        );
        emit(self.ctx.json, json, h);
        Ok(ExitCode::SUCCESS)
    }

    /// Carries the series across to the new pin, guided by drift, with the conflict resolved by
    /// hand when continuing. Also returns drift's report, and whether the bump tree has to be
    /// written again (an earlier bump-pin was killed while writing it). A dry run is the
    /// forecast, which crosses every conflict (`overlay::forecast`).
    #[allow(clippy::type_complexity)]
    fn merge(
        &self,
    ) -> Result<(
        overlay::bump::Outcome,
        overlay::drift::Report,
        bool,
        Option<overlay::forecast::Forecast>,
    )> {
        let old_base = self.repo.tree_at(self.from)?;
        let new_base = self.repo.tree_at(self.to)?;
        // Statuses for the review list (context drift is carried across but named).
        let report = overlay::drift::drift(
            self.repo.repo(),
            &self.repo,
            &self.up.name,
            self.from,
            self.to,
            &self.series,
            false,
        )?;
        let (resolved_tree, rewritten_note) = self.resolution()?;
        let resolved = match (&resolved_tree, &self.state) {
            (Some(tree), Some(s)) => Some((s.resolving.as_str(), tree)),
            _ => None,
        };
        let done: Vec<(String, Option<String>)> = self
            .state
            .as_ref()
            .map(|s| s.done_pairs())
            .unwrap_or_default();
        if let (Some((_, tree)), Some(s)) = (&resolved, &self.state) {
            self.refuse_markers(tree, s, &new_base)?;
        }
        let labels = ("old pin", "overlay", "new upstream");
        let guidance = self.guidance(&report)?;
        if self.a.dry_run {
            let f = overlay::forecast::forecast(
                &old_base,
                &new_base,
                &self.series,
                &self.repo,
                self.a.drop_upstreamed,
                labels,
                &guidance,
            )?;
            let outcome = overlay::bump::Outcome {
                overlays: f.outcome.overlays.clone(),
                conflict_tree: f.outcome.conflict_tree.clone(),
                series_raw: f.outcome.series_raw.clone(),
            };
            return Ok((outcome, report, rewritten_note, Some(f)));
        }
        let outcome = overlay::bump::bump_guided(
            &old_base,
            &new_base,
            &self.series,
            &self.repo,
            self.a.drop_upstreamed,
            &done,
            resolved,
            labels,
            &guidance,
        )?;
        Ok((outcome, report, rewritten_note, None))
    }

    /// When continuing: the resolution in the bump tree (None when the tree is a half-written one,
    /// with `true`: it is written again). Refuses when the project changed since the bump started.
    fn resolution(&self) -> Result<(Option<overlay::tree::Tree>, bool)> {
        let Some(s) = &self.state else {
            return Ok((None, false));
        };
        let now = guards(&guard_paths(self.ctx, &self.series));
        if now != s.guards {
            bail!(
                "pins.toml, the series or an overlay changed since the bump started; `bump-pin --abort` and start again"
            );
        }
        if bump_tree_is_for(&self.dir, &s.resolving) {
            Ok((Some(overlay::bump::tree_from_dir(&self.dir)?), false))
        } else {
            // The tree for this conflict was being written when a bump-pin was killed: it is
            // not a resolution. Write it again from the saved progress.
            Ok((None, true))
        }
    }

    /// Conflict markers left in the files the merge wrote are not a resolution.
    fn refuse_markers(
        &self,
        tree: &overlay::tree::Tree,
        s: &BumpState,
        new_base: &overlay::tree::Tree,
    ) -> Result<()> {
        let mut before = new_base.clone();
        for Carried { name, text } in &s.carried {
            if let Some(raw) = text {
                let ov = self
                    .series
                    .overlays
                    .iter()
                    .find(|o| &o.name == name)
                    .context("overlay vanished from the series")?;
                before.apply_overlay(
                    &overlay::patch::parse_overlay(name, &ov.path, raw)?,
                    &self.repo,
                )?;
            }
        }
        let markers = overlay::bump::conflict_markers(tree, &before, &self.repo)?;
        if !markers.is_empty() {
            bail!(
                "conflict markers remain in {}: {}",
                self.dir.display(),
                markers.join(", ")
            );
        }
        Ok(())
    }

    /// The overlays drift's classification stops at for review (bump and drift share it), and
    /// upstream's renames.
    fn guidance(&self, report: &overlay::drift::Report) -> Result<overlay::bump::Guidance> {
        let review: std::collections::BTreeMap<String, Vec<String>> = report
            .overlays
            .iter()
            .filter(|o| o.drift.status == overlay::drift::Status::Review)
            .map(|o| (o.drift.name.clone(), o.drift.review.clone()))
            .collect();
        Ok(overlay::bump::Guidance {
            review,
            renames: overlay::drift::upstream_renames(
                self.repo.repo(),
                self.from,
                self.to,
                &overlay::drift::relevant_paths(&self.series),
            )?,
        })
    }

    /// The human report: one line per overlay with what the bump did, and what to review.
    fn human_report(
        &self,
        outcome: &overlay::bump::Outcome,
        report: &overlay::drift::Report,
        forecast: &Option<overlay::forecast::Forecast>,
    ) -> String {
        let mut h = String::new();
        let _ = writeln!(
            h,
            "bump-pin: {} {} -> {}{}",
            self.up.name,
            short(&self.up.rev),
            short(&self.to.to_string()),
            if self.a.dry_run { " (dry run)" } else { "" }
        );
        if let Some(what) = &self.downgrade_note {
            let _ = writeln!(h, "  downgrade (--allow-downgrade): {what}");
        }
        for (i, (o, d)) in outcome.overlays.iter().zip(&report.overlays).enumerate() {
            let what = action_text(o, d);
            let _ = writeln!(h, "  {:<13} {}: {what}", d.drift.status.as_str(), o.name);
            if let Some(by) = forecast
                .as_ref()
                .and_then(|f| f.depends_on_resolution_of[i].as_ref())
            {
                let _ = writeln!(
                    h,
                    "      depends on the resolution of {by}: forecast on that overlay's side of each conflict (ours)"
                );
            }
            if o.action == Action::Review {
                for r in &o.conflicts {
                    let _ = writeln!(h, "      review: {r}");
                }
            }
            for c in &d.drift.symbol_changes {
                // (A review stop already listed the removed ones among its reasons.)
                let listed = o.action == Action::Review && c.removed;
                if matches!(o.action, Action::Kept | Action::Rewritten | Action::Review) && !listed
                {
                    let what = if c.removed { "removed" } else { "changed" };
                    let _ = writeln!(
                        h,
                        "      review: upstream {what} {}::{} ({})",
                        c.path, c.symbol, c.watched_because
                    );
                }
            }
            for n in &o.notes {
                let _ = writeln!(h, "      {n}");
            }
        }
        h
    }

    /// The bump's progress, for `--continue`: at the start, or as saved.
    fn start_guards(&self) -> std::collections::BTreeMap<String, String> {
        self.state
            .as_ref()
            .map(|s| s.guards.clone())
            .unwrap_or_else(|| guards(&guard_paths(self.ctx, &self.series)))
    }

    /// Writes the merge with markers into the bump tree, and the state `--continue` resumes
    /// from; pins.toml and overlays/ stay untouched.
    fn write_conflict(
        &self,
        outcome: &overlay::bump::Outcome,
        tree: &overlay::tree::Tree,
        resolving: &str,
    ) -> Result<()> {
        let new_state = BumpState {
            upstream: self.up.name.clone(),
            from: self.up.rev.clone(),
            to: self.to.to_string(),
            drop_upstreamed: self.a.drop_upstreamed,
            carried: outcome
                .overlays
                .iter()
                .take_while(|o| !matches!(o.action, Action::Conflict | Action::Review))
                .map(|o| Carried {
                    name: o.name.clone(),
                    text: o.raw.clone(),
                })
                .collect(),
            resolving: resolving.to_string(),
            guards: self.start_guards(),
        };
        let tree_tag = overlay::bump_session::tree_tag(resolving);
        let mut write_tree = || {
            overlay::materialize::write_tree(
                &self.dir,
                tree,
                &self.repo,
                Origin {
                    upstream: &self.up.name,
                    rev: &self.to.to_string(),
                    series_hash: &tree_tag,
                },
                self.state.is_some(),
            )
            .map(|_| ())
        };
        // The ordered writes (tree then state for a first stop, state then tree after one):
        // `Session::write_stop`.
        Session {
            dir: self.dir.clone(),
            state_path: self.state_path.clone(),
        }
        .write_stop(&new_state, self.state.is_some(), &mut write_tree)?;
        Ok(())
    }

    /// After a conflict was written: how to finish (or abandon) the bump.
    fn conflict_next_steps(
        &self,
        outcome: &overlay::bump::Outcome,
        resolving: &str,
        rewritten_note: bool,
        h: &mut String,
    ) {
        let (g, a) = (self.g, self.a);
        if rewritten_note {
            let _ = writeln!(
                h,
                "(the bump tree was rewritten: an earlier bump-pin was interrupted while writing it)"
            );
        }
        let _ = writeln!(
            h,
            "pins.toml and overlays/ are unchanged. To finish the bump:"
        );
        let reviewing = outcome.overlays.iter().any(|o| o.action == Action::Review);
        if reviewing {
            let _ = writeln!(
                h,
                "  1. review {resolving} as merged in {} (edit it there if needed; see docs/drift.md)",
                self.dir.display()
            );
        } else {
            let _ = writeln!(
                h,
                "  1. resolve the conflict markers in {}",
                self.dir.display()
            );
        }
        let _ = writeln!(h, "  2. {}", bump_command(g, a, "--continue"));
        let _ = writeln!(h, "  (or {})", bump_command(g, a, "--abort"));
    }

    /// A clean bump: moves the pin and writes the carried overlays (and series) in one
    /// transaction, then removes the bump tree. Returns how many files were written.
    fn write_bump(&self, outcome: &overlay::bump::Outcome) -> Result<usize> {
        let start_guards = self.start_guards();
        let to = self.to.to_string();
        let session = Session {
            dir: self.dir.clone(),
            state_path: self.state_path.clone(),
        };
        let finish = overlay::bump_session::Finish {
            root: &self.ctx.project.root,
            pins_path: &self.ctx.project.pins.path,
            upstream: &self.up.name,
            to: &to,
            series: &self.series,
            outcome,
            start_guards: &start_guards,
        };
        Ok(session.finish(&finish, self.state.is_some())?)
    }
}

/// What the bump did with one overlay, for the human report.
fn action_text(o: &overlay::bump::OverlayBump, d: &overlay::drift::ReportOverlay) -> String {
    match o.action {
        Action::Kept => "kept".to_string(),
        Action::Rewritten => "rewritten".to_string(),
        Action::Dropped => "dropped (upstreamed)".to_string(),
        Action::Upstreamed => "upstreamed: pass --drop-upstreamed to retire it".to_string(),
        Action::Conflict => format!("CONFLICT in {}", o.conflicts.join(", ")),
        Action::Resolved => "resolved by hand".to_string(),
        Action::Pending => match &d.drift.blocked_by {
            Some(by) => format!("not reached (blocked by {by})"),
            None => "not reached".to_string(),
        },
        Action::Review => "STOPPED for review".to_string(),
    }
}
