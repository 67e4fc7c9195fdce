//! `check`: every overlay applies exactly at the pin and is canonical.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use overlay::check::FindingKind;
use overlay::lock::Mode as LockMode;

use crate::Global;
use crate::steps::Steps;

use super::*;

pub fn check(g: &Global) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "check")?;
    let up = ctx.upstream();
    let series = ctx.series()?;
    let repo = ctx.open_upstream()?;
    let base = repo.tree_at(git2::Oid::from_str(&up.rev)?)?;
    let mut findings = overlay::check::check(&base, &series, &repo)?;
    // Lines an overlay deletes that upstream added after its recorded base (issue 18).
    let pin = git2::Oid::from_str(&up.rev)?;
    let reverts = overlay::reverts::series_reverts(repo.repo(), &repo, pin, &series)?;
    findings.extend(overlay::reverts::findings(&reverts));
    // Lines of earlier overlays it drops, lines upstream deleted it brings back (issue 24).
    findings.extend(overlay::audit::series_findings(
        repo.repo(),
        &repo,
        pin,
        &series,
    )?);
    // Findings are kept and shared: their commands carry the program, not this run's flags.
    let steps = Steps::program_only();
    let mut h = String::new();
    let _ = writeln!(
        h,
        "check: {} overlay(s) against {}@{}",
        series.overlays.len(),
        up.name,
        short(&up.rev)
    );
    for o in &series.overlays {
        let mine: Vec<_> = findings.iter().filter(|f| f.overlay == o.name).collect();
        if mine.is_empty() {
            let _ = writeln!(h, "  {} {}", colour("ok      ", "32"), o.name);
        }
        for f in mine {
            let kind = match f.kind {
                FindingKind::DoesNotApply => "CONFLICT",
                FindingKind::Offset => "OFFSET",
                FindingKind::NotCanonical => "NONCANON",
                FindingKind::Unlisted => "UNLISTED",
                FindingKind::UnknownDependency => "DEPENDS",
                FindingKind::Reverts => "REVERTS",
                FindingKind::Drops => "DROPS",
                FindingKind::Upstreamed => "UPSTREAMED",
            };
            let at = match (&f.file, f.hunk, f.patch_line) {
                (Some(file), Some(hk), Some(l)) => format!("{file} hunk #{hk} ({}:{l})", o.name),
                (Some(file), _, _) => file.clone(),
                _ => String::new(),
            };
            let code = if matches!(f.kind, FindingKind::DoesNotApply) {
                "31"
            } else {
                "33"
            };
            let kind = colour(&format!("{kind:<8}"), code);
            let _ = writeln!(h, "  {kind} {}: {at}: {}", o.name, steps.help(&f.message));
        }
    }
    for f in findings.iter().filter(|f| f.kind == FindingKind::Unlisted) {
        let _ = writeln!(h, "  UNLISTED {}: {}", f.overlay, steps.help(&f.message));
    }
    let _ = writeln!(h, "{} finding(s)", findings.len());
    if findings
        .iter()
        .any(|f| matches!(f.kind, FindingKind::Offset | FindingKind::NotCanonical))
    {
        let _ = writeln!(
            h,
            "OFFSET and NONCANON: `{}` rewrites those overlays in place (same tree)",
            steps.line(&format!("canonicalize{}", upstream_flag(&ctx)))
        );
    }
    emit(
        ctx.json,
        serde_json::json!({ "upstream": up.name, "rev": up.rev, "findings": findings_json(&findings, &steps)? }),
        h,
    );
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The findings as JSON, each message with its commands written by `steps`.
fn findings_json(findings: &[overlay::check::Finding], steps: &Steps) -> Result<serde_json::Value> {
    let mut out = Vec::with_capacity(findings.len());
    for f in findings {
        let mut v = serde_json::to_value(f)?;
        v["message"] = steps.help(&f.message).into();
        out.push(v);
    }
    Ok(out.into())
}
