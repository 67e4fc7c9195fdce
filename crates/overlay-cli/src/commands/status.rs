//! `status`: the pin, the overlays in order, and what is pending (edits in the applied tree, a bump in progress).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use overlay::lock::Mode as LockMode;
use overlay::materialize::State;

use crate::Global;

use super::*;

pub fn status(g: &Global) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "status")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let overlays: Vec<serde_json::Value> = series
        .overlays
        .iter()
        .map(|o| {
            serde_json::json!({
                "name": o.name, "subject": o.subject, "kind": o.trailers.kind,
                "upstream_status": o.trailers.status.as_ref().map(|s| s.to_string()),
                "depends_on": o.trailers.depends_on, "files": o.files.iter().map(|f| f.path()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut h = String::new();
    let _ = writeln!(h, "upstream {}: {} @ {}", up.name, up.url, up.rev);
    if let Some(b) = &up.branch {
        let _ = writeln!(h, "  follows branch {b}");
    }
    let _ = writeln!(
        h,
        "overlays in {} ({}):",
        ctx.rel(&series.dir),
        series.overlays.len()
    );
    for (i, o) in series.overlays.iter().enumerate() {
        let st = o
            .trailers
            .status
            .as_ref()
            .map_or("-".to_string(), |s| s.to_string());
        let _ = writeln!(
            h,
            "  {:>2}. {}  [{}, {}]",
            i + 1,
            o.name,
            o.trailers.kind.as_str(),
            st
        );
        let _ = writeln!(h, "      {}", o.subject);
    }
    let pending = pending_notes(g, &ctx, &series)?;
    for p in &pending {
        let _ = writeln!(h, "note: {p}");
    }
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up, "overlays": overlays, "pending": pending }),
        h,
    );
    Ok(ExitCode::SUCCESS)
}

/// Work left unfinished in the default trees (an interrupted apply, edits no overlay has, a bump
/// in progress), each with how to finish it.
fn pending_notes(g: &Global, ctx: &Ctx, series: &overlay::series::Series) -> Result<Vec<String>> {
    let up = ctx.upstream();
    let mut pending = Vec::new();
    let apply_dir = ctx.default_dir();
    if let Ok(Some(st)) = State::load(&apply_dir)
        && st.pending.is_some()
    {
        pending.push(format!(
            "an apply into {} was interrupted: `{}` finishes it",
            ctx.rel(&apply_dir),
            xtask_command(g, "apply")
        ));
    }
    if let Some((st, e)) = applied_edits(ctx)? {
        let n = e.all().count();
        let series_hash = series.content_hash();
        pending.push(if st.rev == up.rev && st.series_hash == series_hash {
            format!(
                "{} holds {n} edit(s) no overlay has ({}): `cargo xtask refresh{u}` keeps them, `cargo xtask apply{u} --force` discards them",
                ctx.rel(&apply_dir),
                list_edits(&e),
                u = upstream_flag(ctx)
            )
        } else {
            format!(
                "{} holds {n} edit(s) no overlay has ({}): {}",
                ctx.rel(&apply_dir),
                list_edits(&e),
                // As status always wrote it: the program without this run's flags.
                crate::steps::Steps::program_only().help(&overlay::materialize::edits_way_out(
                    std::path::Path::new(ctx.rel(&apply_dir).as_ref()),
                    &st,
                    &up.rev,
                    &series_hash
                ))
            )
        });
    }
    let session = overlay::bump::session::Session::for_project(&ctx.project.root, &up.name, None);
    let bump_dir = &session.dir;
    if let Ok(Some(b)) = session.read_state() {
        pending.push(format!(
            "a bump to {} is in progress in {} (resolving {}): resolve, then `{}`, or `{}`",
            short(&b.to),
            ctx.rel(bump_dir),
            b.resolving,
            xtask_command(g, "bump-pin --continue"),
            xtask_command(g, "bump-pin --abort")
        ));
    }
    Ok(pending)
}
