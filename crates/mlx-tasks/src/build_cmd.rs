//! `cargo xtask build-mlx`: the project's pinned tree handed to the build driver, or packed as a CUDA bundle.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use overlay::lock::Mode as LockMode;
use overlay::upstream::default_cache_root;
use overlay_cli::commands::{Ctx, emit, materialize, short};

use crate::Global;

pub fn build_mlx(g: &Global, a: &crate::build_mlx::BuildMlxArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, LockMode::Shared, "build-mlx")?;
    if let Some(out) = &a.bundle {
        return build_mlx_bundle(&ctx, a, out);
    }
    let up = ctx.upstream();
    let series = ctx.series()?;
    let source = crate::build_mlx::SourceInfo {
        upstream: up.name.clone(),
        pin: up.rev.clone(),
        series_hash: series.content_hash(),
        fetchcontent: up.fetchcontent.clone(),
        cache_root: default_cache_root(),
        // The project's own target/ (mlx-sys's build.rs reads this workspace's); another project's
        // build (--root) must not replace what this workspace's crates link.
        workspace_target: ctx.project.root.join("target"),
    };
    let report = crate::build_mlx::run(
        a,
        &source,
        &mut |dir| {
            let r = materialize(&ctx, dir, false).map(|_| ());
            // The source is written; the long build must not keep writers of the project waiting.
            ctx.unlock();
            r.map_err(crate::build_mlx::Error::caller)
        },
        &mut overlay_cli::progress::BuildProgress::default(),
    )?;
    emit(ctx.json, report.json(), format!("{}\n", report.human()));
    Ok(ExitCode::SUCCESS)
}

fn build_mlx_bundle(ctx: &Ctx, a: &crate::build_mlx::BuildMlxArgs, out: &Path) -> Result<ExitCode> {
    if a.backend != Some(crate::build_mlx::Backend::Cuda) {
        anyhow::bail!("--bundle builds the CUDA backend only\n  help: add --backend cuda");
    }
    let report = crate::cuda_bundle::write(ctx, a, out)?;
    let mut human = format!(
        "bundle: {} ({:.1} MiB)\n  mlx@{} + {} overlay(s)\n",
        report.path.display(),
        report.bytes as f64 / (1024.0 * 1024.0),
        short(&report.manifest.pin),
        report.manifest.overlays.len()
    );
    for s in &report.manifest.sources {
        let tag = s.tag.as_deref().unwrap_or("-");
        human.push_str(&format!(
            "  {:<8} {} ({tag}): {} file(s)\n",
            s.name,
            short(&s.rev),
            s.files
        ));
    }
    human.push_str(&format!(
        "  next: unpack it on the GPU machine and run {}/cuda/bundle/build.sh\n",
        crate::cuda_bundle::BUNDLE_DIR
    ));
    emit(ctx.json, serde_json::to_value(&report)?, human);
    Ok(ExitCode::SUCCESS)
}
