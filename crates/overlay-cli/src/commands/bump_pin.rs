//! `bump-pin`: move the pin, carrying every overlay with a 3-way merge (all or nothing).

use crate::error::HintedError;
use overlay::help::{Help, NextStep};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use overlay::bump::Action;
use overlay::bump::session::{Session, SessionState as BumpState};
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
    /// With --continue: accept a resolution that drops lines of upstream or of an earlier overlay
    /// (recorded in the overlay as Reverts-Upstream: / Reverts-Overlay: trailers)
    #[arg(long, requires = "cont")]
    pub accept_reverts: bool,
    /// With --continue: take the resolution although it holds lines that look like conflict
    /// markers (`=======`, ...) that are content
    #[arg(long, requires = "cont")]
    pub allow_markers: bool,
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
    let session = Session::for_project(&ctx.project.root, &up.name, a.dir.clone());
    let state = session.read_state()?;
    let session = session.resumed(state.as_ref(), a.dir.is_some());
    if state.is_none() && session.leftover_tree() {
        // A bump finished or abandoned, killed before its tree was removed: debris, not work.
        session.remove_tree()?;
    }
    overlay::bump::resume::admit(&session, state.as_ref(), a.cont, a.abort, || {
        (
            bump_command(g, a, "--continue"),
            bump_command(g, a, "--abort"),
        )
    })?;
    if let (true, Some(s)) = (a.abort, &state) {
        return bump_abort(g, a, &ctx, &session, s);
    }
    let series = ctx.series()?;
    overlay::bump::resume::refuse_unlisted(&series)?;
    let repo = ctx.open_upstream()?;
    let to = match (&a.rev, &state) {
        (Some(rev), _) => resolve_rev(&ctx, &repo, rev)?,
        (None, Some(s)) => git2::Oid::from_str(&s.to)?,
        (None, None) => bail!("bump-pin needs a REV"),
    };
    let repo = ctx.open_upstream()?;
    let from = git2::Oid::from_str(&up.rev)?;
    if let Some(s) = &state {
        overlay::bump::resume::check_target(s, to)?;
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
        session,
        state,
        series,
        repo,
        from,
        to,
        downgrade_note,
    };
    bump.run()
}

/// `bump-pin --abort`: removes the bump tree (checking it goes to REV, when one is given).
fn bump_abort(
    g: &Global,
    a: &BumpArgs,
    ctx: &Ctx,
    session: &Session,
    s: &BumpState,
) -> Result<ExitCode> {
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
    session.abandon()?;
    let dir = &session.dir;
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
        let series_hash = ctx.series()?.content_hash();
        if st.series_hash != series_hash {
            // Refresh would refuse these: the way out the other commands give (issue 24, C).
            let dir = ctx.rel(&ctx.default_dir()).into_owned();
            let way_out = overlay::materialize::edits_way_out(
                std::path::Path::new(&dir),
                &st,
                &up.rev,
                &series_hash,
            );
            return Err(HintedError::error(
                format!(
                    "{dir} holds {} edit(s) no overlay has ({}); a bump would strand them; nothing was written",
                    e.all().count(),
                    list_edits(&e),
                ),
                way_out.text(", then bump"),
            ));
        }
        let up_args = || {
            ctx.upstream
                .iter()
                .flat_map(|u| ["--upstream".to_string(), u.clone()])
        };
        return Err(HintedError::error(
            format!(
                "{} holds {} edit(s) no overlay has ({}); a bump would strand them (refresh works only at the pin they were made on); nothing was written",
                ctx.rel(&ctx.default_dir()),
                e.all().count(),
                list_edits(&e),
            ),
            Help::new("keep them: ")
                .step(NextStep::new("refresh", up_args()))
                .text(" (or `new-overlay`), then bump; discard them: ")
                .step(NextStep::new(
                    "apply",
                    up_args().chain(["--force".to_string()]),
                ))
                .text(", then bump"),
        ));
    }
    Ok(overlay::bump::resume::refuse_downgrade(
        repo.repo(),
        from,
        to,
        a.allow_downgrade,
    )?)
}

/// One `bump-pin` (new or `--continue`d) once its target is known and the checks have passed.
struct Bump<'a> {
    g: &'a Global,
    a: &'a BumpArgs,
    ctx: &'a Ctx,
    up: &'a Upstream,
    /// The bump tree, where a conflict is written for resolution.
    session: Session,
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
        let carried = self.engine().carry(&self.options())?;
        let (outcome, report, rewritten_note, forecast) = (
            carried.bump,
            carried.drift,
            carried.tree_rewritten,
            carried.forecast,
        );
        let mut h = self.human_report(&outcome, &report, &forecast);
        if self.a.dry_run {
            h.push_str(&self.dry_run_summary(&outcome));
        }
        let overlays = match &forecast {
            Some(f) => serde_json::to_value(f.overlays())?,
            None => serde_json::to_value(&outcome.overlays)?,
        };
        let json = serde_json::json!({ "upstream": self.up.name, "from": self.up.rev, "to": self.to.to_string(), "dry_run": self.a.dry_run,
            "overlays": overlays, "drift": report.overlays, "reverts": self.downgrade_note });

        if let Some(tree) = &outcome.conflict_tree {
            let resolving = overlay::bump::resume::resolving(&outcome);
            if !self.a.dry_run {
                self.write_conflict(&outcome, tree)?;
                self.conflict_next_steps(&outcome, resolving, rewritten_note, &mut h);
            }
            emit(self.ctx.json, json, h);
            return Ok(ExitCode::from(1));
        }
        if !outcome.is_clean() {
            if !self.a.dry_run {
                self.upstreamed_next_step(&mut h);
            }
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

    /// The engine's view of this run (`overlay::bump::resume`).
    fn engine(&self) -> overlay::bump::resume::Run<'_> {
        overlay::bump::resume::Run {
            upstream: self.up,
            repo: &self.repo,
            from: self.from,
            to: self.to,
            series: &self.series,
            pins_path: &self.ctx.project.pins.path,
            session: &self.session,
            state: self.state.as_ref(),
        }
    }

    fn options(&self) -> overlay::bump::resume::Options {
        overlay::bump::resume::Options {
            // Given at the start, it holds for the whole bump.
            drop_upstreamed: self.a.drop_upstreamed
                || self.state.as_ref().is_some_and(|s| s.drop_upstreamed),
            dry_run: self.a.dry_run,
            accept_reverts: self.a.accept_reverts,
            allow_markers: self.a.allow_markers,
        }
    }

    /// The human report: one line per overlay with what the bump did, and what to review.
    fn human_report(
        &self,
        outcome: &overlay::bump::Outcome,
        report: &overlay::drift::Report,
        forecast: &Option<overlay::bump::forecast::Forecast>,
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

    /// The dry run's last line: how many overlays end each way, and that nothing was written.
    fn dry_run_summary(&self, outcome: &overlay::bump::Outcome) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for o in &outcome.overlays {
            let word = action_word(&o.action);
            match counts.iter_mut().find(|(w, _)| *w == word) {
                Some((_, n)) => *n += 1,
                None => counts.push((word, 1)),
            }
        }
        let counts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
        let rev = self.a.rev.as_deref().unwrap_or("REV");
        format!(
            "dry run: {} overlay(s){}{}; nothing was written (to bump: `{}`)\n",
            outcome.overlays.len(),
            if counts.is_empty() { "" } else { ": " },
            counts.join(", "),
            bump_command(self.g, self.a, rev)
        )
    }

    /// Writes the merge with markers into the bump tree, and the state `--continue` resumes
    /// from; pins.toml and overlays/ stay untouched.
    fn write_conflict(
        &self,
        outcome: &overlay::bump::Outcome,
        tree: &overlay::tree::Tree,
    ) -> Result<()> {
        let new_state = self.engine().stop_state(&self.options(), outcome);
        let tree_tag = overlay::bump::session::tree_tag(&new_state.resolving);
        let mut write_tree = || {
            overlay::materialize::write_tree(
                &self.session.dir,
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
        self.session
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
                "(the bump tree was written again: it was missing, say after `cargo clean`, or an earlier bump-pin was interrupted while writing it; the overlays resolved before are kept)"
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
                self.session.dir.display()
            );
        } else {
            let _ = writeln!(
                h,
                "  1. resolve the conflict markers in {}",
                self.session.dir.display()
            );
        }
        let _ = writeln!(h, "  2. {}", bump_command(g, a, "--continue"));
        let _ = writeln!(h, "  (or {})", bump_command(g, a, "--abort"));
    }

    /// A bump that stopped for overlays upstream already has: how to retire them.
    fn upstreamed_next_step(&self, h: &mut String) {
        let rest = match (&self.state, &self.a.rev) {
            (Some(_), _) | (None, None) => "--continue --drop-upstreamed".to_string(),
            (None, Some(rev)) => format!("{rev} --drop-upstreamed"),
        };
        let _ = writeln!(
            h,
            "pins.toml and overlays/ are unchanged; `{}` retires the upstreamed overlay(s)",
            bump_command(self.g, self.a, &rest)
        );
    }

    /// A clean bump: moves the pin and writes the carried overlays (and series) in one
    /// transaction, then removes the bump tree. Returns how many files were written.
    fn write_bump(&self, outcome: &overlay::bump::Outcome) -> Result<usize> {
        let start_guards = self.engine().start_guards();
        let to = self.to.to_string();
        let finish = overlay::bump::session::Finish {
            root: &self.ctx.project.root,
            pins_path: &self.ctx.project.pins.path,
            upstream: &self.up.name,
            to: &to,
            series: &self.series,
            outcome,
            start_guards: &start_guards,
        };
        Ok(self.session.finish(&finish, self.state.is_some())?)
    }
}

/// One word for what the bump does with an overlay, for the dry run's summary.
fn action_word(a: &Action) -> &'static str {
    match a {
        Action::Kept => "kept",
        Action::Rewritten => "rewritten",
        Action::Dropped => "dropped",
        Action::Upstreamed => "upstreamed",
        Action::Conflict => "conflicting",
        Action::Resolved => "resolved",
        Action::Pending => "not reached",
        Action::Review => "stopping for review",
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
