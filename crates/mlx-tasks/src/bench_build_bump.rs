//! `cargo xtask bench build --bump`: what a pin bump costs `build-mlx`, against a cold build
//! measured in the same run.
//!
//! In a scratch copy of the project (pins.toml moved to `--from`, the same overlays), with an
//! empty build cache (`OVERLAY_CACHE_DIR`) and an empty compiler cache (`CCACHE_DIR`):
//! 1. `build-mlx` at `--from` (cold: every translation unit compiles),
//! 2. `bump-pin --to`, the real command,
//! 3. `build-mlx` again: a new build tree for the new pin, where every translation unit the bump
//!    did not change must come from ccache (see docs/build.md, "Compiler cache").
//!
//! It prints both build times, their ratio and ccache's counters for the build after the bump.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::Global;
use crate::bench::BuildBenchArgs;
use crate::commands::{Ctx, resolve_rev};

/// Runs this xtask binary on `root` with the scratch caches; stdout is returned, stderr goes
/// through (progress).
fn xtask(root: &Path, caches: &Caches, args: &[&str]) -> Result<(Duration, String)> {
    let t = Instant::now();
    // std, not xshell: its read() would hide the status and trim stdout, both in our message.
    let out = Command::new(std::env::current_exe()?)
        .env("OVERLAY_CACHE_DIR", &caches.build)
        .env("CCACHE_DIR", &caches.ccache)
        .env_remove("CCACHE_DISABLE")
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running xtask {}", args.join(" ")))?;
    let took = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "xtask {} failed ({}):\n{stdout}",
            args.join(" "),
            out.status
        );
    }
    Ok((took, stdout))
}

struct Caches {
    build: std::path::PathBuf,
    ccache: std::path::PathBuf,
}

fn ccache(caches: &Caches, args: &[&str]) -> Result<String> {
    let out = xshell::Shell::new()?
        .cmd("ccache")
        .args(args)
        .env("CCACHE_DIR", &caches.ccache)
        .ignore_status()
        .output()
        .context("this benchmark measures ccache: install it (apt-get install ccache)")?;
    if !out.status.success() {
        bail!("ccache {} failed", args.join(" "));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ccache --print-stats` counters by name.
fn ccache_stats(caches: &Caches) -> Result<BTreeMap<String, u64>> {
    Ok(ccache(caches, &["--print-stats"])?
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

pub fn run(g: &Global, a: &BuildBenchArgs) -> Result<ExitCode> {
    if std::env::vars().any(|(k, _)| k.starts_with("SCCACHE_"))
        || std::env::var("RUSTC_WRAPPER").is_ok_and(|v| v.contains("sccache"))
    {
        bail!("build-mlx would use sccache here; this benchmark measures ccache (unset SCCACHE_*)");
    }
    let ctx = Ctx::load(g, overlay::lock::Mode::Shared, "bench")?;
    let up = ctx.upstream().clone();
    let repo = ctx.open_upstream()?;
    let from = resolve_rev(&ctx, &repo, &a.from)?.to_string();
    let to = resolve_rev(&ctx, &repo, &a.to)?.to_string();
    let series = ctx.series()?;

    // The scratch project: pins.toml at `from`, the same overlays.
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("project");
    let odir = root.join(&up.overlays);
    std::fs::create_dir_all(&odir)?;
    let pins = std::fs::read_to_string(&ctx.project.pins.path)?;
    let old = format!("\"{}\"", up.rev);
    if !pins.contains(&old) {
        bail!("pins.toml does not spell the pin as {old}");
    }
    std::fs::write(
        root.join("pins.toml"),
        pins.replacen(&old, &format!("\"{from}\""), 1),
    )?;
    for o in &series.overlays {
        std::fs::write(odir.join(&o.name), &o.raw)?;
    }
    std::fs::write(odir.join("series"), &series.raw)?;
    ctx.unlock(); // the scratch copy is another project: do not hold this one for minutes

    let caches = Caches {
        build: tmp.path().join("cache"),
        ccache: tmp.path().join("ccache"),
    };
    // Clone the upstream into the scratch cache first, so neither timed build includes it.
    xtask(&root, &caches, &["status"])?;
    eprintln!("cold build-mlx at {} ...", &from[..12]);
    let (cold, _) = xtask(&root, &caches, &["build-mlx"])?;
    let cold_stats = ccache_stats(&caches)?;
    ccache(&caches, &["-z"])?;
    let (bump, _) = xtask(&root, &caches, &["bump-pin", &to])?;
    eprintln!("build-mlx after the bump to {} ...", &to[..12]);
    let (after, _) = xtask(&root, &caches, &["build-mlx"])?;
    let stats = ccache_stats(&caches)?;
    let changed = changed_sources(&repo, &from, &to)?;

    let get = |s: &BTreeMap<String, u64>, k: &str| s.get(k).copied().unwrap_or(0);
    let hits = get(&stats, "direct_cache_hit") + get(&stats, "preprocessed_cache_hit");
    let misses = get(&stats, "cache_miss");
    let ratio = after.as_secs_f64() / cold.as_secs_f64();
    let mut h = String::new();
    writeln!(
        h,
        "build-mlx across a pin bump {}..{} (changes {})",
        &from[..12],
        &to[..12],
        changed.join(", ")
    )?;
    writeln!(
        h,
        "  cold build at {} (empty caches)     {:>8.1} s  ({} compiled)",
        &from[..9],
        cold.as_secs_f64(),
        get(&cold_stats, "cache_miss")
    )?;
    writeln!(
        h,
        "  bump-pin                            {:>8.1} s",
        bump.as_secs_f64()
    )?;
    writeln!(
        h,
        "  build after the bump (new tree)     {:>8.1} s  (ccache: {hits} hits, {misses} compiled)",
        after.as_secs_f64()
    )?;
    writeln!(
        h,
        "  ratio after-bump / cold: {ratio:.3} ({:.1}x faster)",
        1.0 / ratio
    )?;
    if g.json {
        let v = serde_json::json!({
            "from": from, "to": to, "changed": changed,
            "cold_seconds": cold.as_secs_f64(), "cold_compiled": get(&cold_stats, "cache_miss"),
            "bump_seconds": bump.as_secs_f64(),
            "after_seconds": after.as_secs_f64(), "after_hits": hits, "after_compiled": misses,
            "ratio": ratio,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::commands::versioned(v))?
        );
    } else {
        print!("{h}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The C/C++ sources and headers that differ between the two commits.
fn changed_sources(
    repo: &overlay::upstream::UpstreamRepo,
    from: &str,
    to: &str,
) -> Result<Vec<String>> {
    let r = repo.repo();
    let tree = |rev: &str| -> Result<git2::Tree<'_>> {
        Ok(r.find_commit(git2::Oid::from_str(rev)?)?.tree()?)
    };
    let diff = r.diff_tree_to_tree(Some(&tree(from)?), Some(&tree(to)?), None)?;
    let mut out = Vec::new();
    for d in diff.deltas() {
        if let Some(p) = d.new_file().path().or(d.old_file().path()) {
            let p = p.to_string_lossy();
            if [".cpp", ".h", ".hpp", ".cc", ".c"]
                .iter()
                .any(|e| p.ends_with(e))
            {
                out.push(p.into_owned());
            }
        }
    }
    Ok(out)
}
