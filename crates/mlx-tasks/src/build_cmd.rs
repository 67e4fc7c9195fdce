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
        fetchcontent: crate::settings::of(&ctx.project.pins, up)?.fetchcontent,
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
            r.map_err(driver_error)
        },
        &mut crate::progress::BuildProgress::default(),
    )?;
    emit(ctx.json, report.json(), format!("{}\n", report.human()));
    Ok(ExitCode::SUCCESS)
}

/// `export-upstream --build`: configures and builds the tree `git am` left in the scratch clone
/// (CPU backend) in build-mlx's cache; an error when it does not build.
pub fn build_export(b: &overlay_cli::ExportBuild<'_>) -> Result<()> {
    let args = crate::build_mlx::BuildMlxArgs {
        backend: Some(crate::build_mlx::Backend::Cpu),
        profile: crate::build_mlx::Profile::Release,
        jobs: None,
        install_deps: false,
        bundle: None,
        bundle_python: false,
    };
    let head = b.head.to_string();
    let source = crate::build_mlx::SourceInfo {
        // Same Ninja tree as the fork's own build when onto is the pin: only what differs recompiles.
        upstream: b.upstream.name.clone(),
        pin: b.onto.to_string(),
        series_hash: head.clone(),
        fetchcontent: crate::settings::of(b.pins, b.upstream)?.fetchcontent,
        cache_root: default_cache_root(),
        workspace_target: b.scratch.join("target"),
    };
    let am = git2::Repository::open(b.clone)?;
    let tree = overlay::upstream::tree_of_commit(&am, b.head)?;
    let built = crate::build_mlx::run(
        &args,
        &source,
        &mut |dir| {
            // The tree exactly as git am left it, written incrementally (unchanged files keep
            // their mtimes, so only what the export changes recompiles).
            let rev = b.onto.to_string();
            let origin = overlay::materialize::Origin {
                upstream: &b.upstream.name,
                rev: &rev,
                series_hash: &head,
            };
            overlay::materialize::write_tree(dir, &tree, &am, origin, true)
                .map(|_| ())
                .map_err(crate::build_mlx::Error::recipe)
        },
        &mut crate::progress::BuildProgress::default(),
    );
    match built {
        Ok(report) => println!("{}", report.human()),
        // The build's own error, in the one error shape, under what it means here.
        Err(e) if e.is_user() => {
            return Err(anyhow::Error::new(e)
                .context("the exported series does not build; nothing was written"));
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The materialize callback's error for the build driver: the engine's own error as the engine's
/// (the CLI maps its kind: a refusal stays `refused`); one with context through the driver's
/// caller wrapper, whose chain the CLI walks to the engine's error inside.
pub(crate) fn driver_error(e: anyhow::Error) -> crate::build_mlx::Error {
    let outermost = e
        .downcast_ref::<overlay::Error>()
        .is_some_and(|o| o.to_string() == e.to_string());
    if !outermost {
        return crate::build_mlx::Error::caller(e);
    }
    e.downcast::<overlay::Error>().map_or_else(
        crate::build_mlx::Error::caller,
        crate::build_mlx::Error::recipe,
    )
}

fn build_mlx_bundle(ctx: &Ctx, a: &crate::build_mlx::BuildMlxArgs, out: &Path) -> Result<ExitCode> {
    if a.backend != Some(crate::build_mlx::Backend::Cuda) {
        return Err(overlay_cli::error::HintedError::error(
            "--bundle builds the CUDA backend only",
            "add --backend cuda",
        ));
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

#[cfg(test)]
mod tests {
    use super::driver_error;
    use crate::build_mlx::Error;

    #[test]
    fn the_engines_error_reaches_the_driver_as_itself_and_context_is_kept() {
        let refused = || overlay::Error::refused("tree", None, overlay::Refusal::NotRecovered);
        assert!(matches!(
            driver_error(anyhow::Error::new(refused())),
            Error::Recipe(e) if e.downcast_ref::<overlay::Error>().is_some()
        ));
        let e = driver_error(anyhow::Error::new(refused()).context("writing the tree"));
        assert!(matches!(e, Error::Caller(_)), "{e:?}");
        assert!(e.to_string().starts_with("writing the tree: "), "{e}");
    }
}
