//! `apply`: materialize the pinned upstream plus the overlays into a directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use overlay::lock::Mode as LockMode;
use overlay::materialize::Origin;
use overlay::project::apply_series;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Where to materialize the tree [default: target/apply/<upstream>]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Discard edits in DIR that the overlays do not account for
    #[arg(long)]
    pub force: bool,
}

/// Materializes the pinned upstream plus the series into `dir`; used by apply and build-mlx.
pub fn materialize(
    ctx: &Ctx,
    dir: &Path,
    force: bool,
) -> Result<(overlay::project::Applied, overlay::materialize::WriteReport)> {
    materialize_series(ctx, dir, force, &ctx.series()?)
}

/// Materializes the pinned upstream alone into `dir` (test-upstream's control): the series read
/// (a malformed one is still refused) but none of its overlays applied.
pub fn materialize_unpatched(
    ctx: &Ctx,
    dir: &Path,
    force: bool,
) -> Result<(overlay::project::Applied, overlay::materialize::WriteReport)> {
    let series = ctx.series()?;
    let empty = overlay::series::Series {
        dir: series.dir,
        raw: String::new(),
        overlays: Vec::new(),
    };
    materialize_series(ctx, dir, force, &empty)
}

fn materialize_series(
    ctx: &Ctx,
    dir: &Path,
    force: bool,
    series: &overlay::series::Series,
) -> Result<(overlay::project::Applied, overlay::materialize::WriteReport)> {
    let up = ctx.upstream();
    let repo = ctx.open_upstream()?;
    let applied = apply_series(&repo, &up.rev, series)?;
    let report = overlay::materialize::write_tree(
        dir,
        &applied.result,
        &repo,
        Origin {
            upstream: &up.name,
            rev: &up.rev,
            series_hash: &series.content_hash(),
        },
        force,
    )?;
    Ok((applied, report))
}

pub fn apply(g: &Global, a: &ApplyArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "apply")?;
    refuse_during_bump(&ctx, g, "apply")?;
    let up = ctx.upstream();
    let dir = a.dir.clone().unwrap_or_else(|| ctx.default_dir());
    let (applied, report) = materialize(&ctx, &dir, a.force)?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "applied {} overlay(s) onto {}@{} in {}",
        applied.outcomes.len(),
        up.name,
        short(&up.rev),
        dir.display()
    );
    for o in &applied.outcomes {
        let hunks: usize = o.files.iter().map(|f| f.placements.len()).sum();
        let _ = writeln!(
            h,
            "  {}: {} hunk(s) in {} file(s)",
            o.overlay,
            hunks,
            o.files.len()
        );
        for (path, p) in o.offsets() {
            let _ = writeln!(
                h,
                "    offset: {path} hunk #{} applied at line {} (recorded {}, {:+})",
                p.hunk,
                p.actual,
                p.recorded,
                p.offset()
            );
        }
    }
    if !report.discarded.is_empty() {
        let _ = writeln!(
            h,
            "discarded {} edit(s) (--force): {}",
            report.discarded.len(),
            report.discarded.join(", ")
        );
    }
    let _ = writeln!(
        h,
        "wrote {} file(s), removed {}, unchanged {}",
        report.written.len(),
        report.removed.len(),
        report.unchanged
    );
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up.name, "rev": up.rev, "dir": dir, "overlays": applied.outcomes,
            "written": report.written.len(), "removed": report.removed, "unchanged": report.unchanged, "discarded": report.discarded }),
        h,
    );
    Ok(ExitCode::SUCCESS)
}
