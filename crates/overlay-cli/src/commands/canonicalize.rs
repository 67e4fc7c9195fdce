//! `canonicalize`: rewrite overlays that apply off their recorded lines or are not canonical.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use overlay::lock::Mode as LockMode;
use overlay::materialize::State;

use crate::Global;

use super::*;

#[derive(clap::Args)]
pub struct CanonicalizeArgs {
    /// Overlays to rewrite, as the series names them [default: every one check flags]
    #[arg(value_name = "OVERLAY")]
    pub overlays: Vec<String>,
    /// Report what would be rewritten; write nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// `canonicalize`: rewrites the overlays `check` reports as OFFSET or NONCANON in place, in one
/// transaction, each verified to give the same tree. The default tree's state follows the new
/// series (its files are the same by construction), so unrefreshed edits there stay refreshable.
pub fn canonicalize(g: &Global, a: &CanonicalizeArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Exclusive, "canonicalize")?;
    if !a.dry_run {
        refuse_during_bump(&ctx, g, "canonicalize")?;
    }
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let rewrites = overlay::check::canonicalize(&base, &series, &repo, &a.overlays)?;
    let mut h = String::new();
    for r in &rewrites {
        let _ = writeln!(
            h,
            "{} {}: {}",
            if a.dry_run {
                "would rewrite"
            } else {
                "rewrote"
            },
            r.overlay,
            r.findings.join("; ")
        );
    }
    if rewrites.is_empty() {
        let _ = writeln!(
            h,
            "nothing to rewrite: every overlay applies at its line and is canonical"
        );
    }
    let json = serde_json::json!({ "upstream": up.name, "rev": up.rev, "dry_run": a.dry_run, "rewritten": rewrites });
    if a.dry_run || rewrites.is_empty() {
        emit(ctx.json, json, h);
        return Ok(ExitCode::SUCCESS);
    }
    let mut writes: Vec<(PathBuf, Option<String>)> = rewrites
        .iter()
        .map(|r| (r.path.clone(), Some(r.new.clone())))
        .collect();
    let mut guard: std::collections::BTreeMap<String, String> = rewrites
        .iter()
        .map(|r| {
            let id = overlay::tree::blob_id(r.old.as_bytes()).to_string();
            (r.path.to_string_lossy().to_string(), id)
        })
        .collect();
    let dir = ctx.default_dir();
    if let Some(mut st) = State::load(&dir)?
        && st.upstream == up.name
        && st.rev == up.rev
        && st.pending.is_none()
        && st.series_hash == series.content_hash()
    {
        let mut new_series = series.clone();
        for ov in &mut new_series.overlays {
            if let Some(r) = rewrites.iter().find(|r| r.overlay == ov.name) {
                ov.raw = r.new.clone();
            }
        }
        st.series_hash = new_series.content_hash();
        let state_path = dir.join(overlay::materialize::STATE_FILE);
        guard.insert(
            state_path.to_string_lossy().to_string(),
            overlay::tree::blob_id(&std::fs::read(&state_path)?).to_string(),
        );
        writes.push((state_path, Some(serde_json::to_string_pretty(&st)?)));
    }
    overlay::bump::write_all(&ctx.project.root, &writes, &guard, &[])?;
    let _ = writeln!(
        h,
        "{} overlay(s) rewritten; the series gives the same tree",
        rewrites.len()
    );
    emit(ctx.json, json, h);
    Ok(ExitCode::SUCCESS)
}
