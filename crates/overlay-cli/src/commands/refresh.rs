//! `refresh`: turn edits in a materialized tree back into overlays.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use overlay::lock::Mode as LockMode;
use overlay::materialize::State;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct RefreshArgs {
    /// The materialized tree holding the edits [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Overlay that receives edits touching only upstream lines
    #[arg(long, value_name = "OVERLAY")]
    pub into: Option<String>,
    /// Write edits that drop lines of an earlier overlay or of upstream (the resolution audit
    /// refuses them otherwise), recording each as a `Reverts-Overlay:` / `Reverts-Upstream:` trailer
    #[arg(long)]
    pub accept_reverts: bool,
}

/// `detail`: one line per edit (refresh, `new-overlay --verbose`), else one per overlay written.
pub(super) fn run_refresh(
    ctx: &Ctx,
    dir: &Path,
    into: Option<overlay::refresh::Target>,
    (detail, accept_reverts): (bool, bool),
) -> Result<ExitCode> {
    let up = ctx.upstream();
    let series = ctx.series()?;
    let state = State::load(dir)?.with_context(|| {
        format!(
            "{}: not a tree written by `{}` (no state file)",
            dir.display(),
            ctx.steps.line("apply")
        )
    })?;
    if state.upstream != up.name || state.rev != up.rev {
        bail!(
            "{}: materialized from {}@{}, but pins.toml pins {}@{}; apply again first",
            dir.display(),
            state.upstream,
            short(&state.rev),
            up.name,
            short(&up.rev)
        );
    }
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let mut plan = overlay::refresh::plan(&base, &series, &repo, dir, &state, into)?;
    let pin = git2::Oid::from_str(&up.rev)?;
    let accepted = plan.audit(repo.repo(), &repo, pin, (&series, dir), accept_reverts)?;
    overlay::refresh::commit(&plan, dir, &ctx.project.root)?;
    let mut h = String::new();
    for (overlay, trailers) in &accepted {
        let _ = writeln!(h, "{overlay}: recorded {}", trailers.join(", "));
    }
    if !detail {
        for w in plan.written() {
            let what = if w.created {
                format!("created {} (appended to the series)", w.overlay)
            } else {
                format!("rewrote {}", w.overlay)
            };
            let _ = writeln!(
                h,
                "{what}: {} edit(s) in {} file(s) of {}",
                w.edits,
                w.files,
                dir.display()
            );
        }
        if h.is_empty() {
            let _ = writeln!(h, "nothing to refresh: the tree matches the overlays");
        }
        emit(ctx.json, serde_json::to_value(&plan)?, h);
        return Ok(ExitCode::SUCCESS);
    }
    let _ = writeln!(h, "refresh: {}", dir.display());
    for a in &plan.assignments {
        let at = if a.line == 0 {
            format!("{} (whole file)", a.file)
        } else {
            format!("{}:{}", a.file, a.line)
        };
        let _ = writeln!(h, "  {at} -> {} ({})", a.overlay, a.why);
    }
    if let Some(c) = &plan.created {
        let _ = writeln!(h, "created {c} (appended to the series)");
    }
    for r in &plan.rewritten {
        let _ = writeln!(h, "rewrote {r}");
    }
    if plan.rewritten.is_empty() && plan.created.is_none() {
        let _ = writeln!(h, "nothing to refresh: the tree matches the overlays");
    }
    emit(ctx.json, serde_json::to_value(&plan)?, h);
    Ok(ExitCode::SUCCESS)
}

pub fn refresh(g: &Global, a: &RefreshArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "refresh")?;
    refuse_during_bump(&ctx, g, "refresh")?;
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    run_refresh(
        &ctx,
        &dir,
        a.into.clone().map(overlay::refresh::Target::Existing),
        (true, a.accept_reverts),
    )
}
