//! `cargo xtask bench …`: benchmarks that print a ratio against a baseline measured in the same run.
//! They are never timed assertions in tests.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use overlay::apply::Text;
use overlay::project::Project;
use overlay::series::Series;
use overlay::tree::{BlobSource, Tree};

use crate::Global;
use crate::commands::{Ctx, resolve_rev};

#[derive(clap::Subcommand)]
pub enum Bench {
    /// drift --per-commit over real MLX history against a naive extract + `git apply` loop
    DriftScan(DriftScanArgs),
    /// The CPU quantized matmul: upstream vs streamed policy, M = 1..16, bit identity per row
    Qmm(crate::bench_qmm::QmmArgs),
    /// build-mlx: no-op time and the time after touching one overlay (and a cold build with --cold)
    Build(BuildBenchArgs),
    /// The CUDA qmv on a GPU machine: render a run's results JSON as tables and a plot
    QmvCuda(crate::bench_qmv_cuda::QmvCudaArgs),
}

#[derive(clap::Args)]
pub struct DriftScanArgs {
    /// First commit of the scan
    #[arg(long, default_value = "548dd80e8")]
    pub from: String,
    /// Last commit of the scan
    #[arg(long, default_value = "846d176")]
    pub to: String,
    /// Repetitions of the fast scan (the median is reported)
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
}

#[derive(clap::Args)]
pub struct BuildBenchArgs {
    /// Also time a cold build into an empty cache, ccache off (about 5 minutes on 2 cores)
    #[arg(long)]
    pub cold: bool,
    /// Instead: a cold build at --from (empty build cache, empty ccache), then `bump-pin --to` and
    /// the build after the bump, in a scratch copy of the project (about 12 minutes on 2 cores)
    #[arg(long)]
    pub bump: bool,
    /// The pin of the cold build (--bump); the project's series must apply there
    #[arg(long, default_value = "9a795735ad9a42664e08f42361b405ed570bcf1a")]
    pub from: String,
    /// The bump's target (--bump); default: the next MLX commit, which changes mlx/ops.cpp and
    /// mlx/primitives.cpp only
    #[arg(long, default_value = "98a188cb8e836a527a1a26b3ba5557bdfdb18a91")]
    pub to: String,
}

pub fn run(g: &Global, b: &Bench) -> Result<ExitCode> {
    match b {
        Bench::DriftScan(a) => drift_scan(g, a),
        Bench::Build(a) => build(g, a),
        Bench::Qmm(a) => crate::bench_qmm::run(a, g.json),
        Bench::QmvCuda(a) => crate::bench_qmv_cuda::run(a),
    }
}

/// Inserts a comment as the first line of `symbol`'s body in `text`.
fn edit_in(text: &str, symbol: &str, note: &str) -> Result<String> {
    let ix = overlay::symbols::scan(text);
    let found = ix.find(symbol);
    let [s] = found.as_slice() else {
        bail!("{symbol}: expected one definition, found {}", found.len())
    };
    let body = text[s.span.clone()].find("{\n").context("a body")? + s.span.start + 2;
    Ok(format!("{}  // {note}\n{}", &text[..body], &text[body..]))
}

/// A git format-patch overlay changing `path` in `tree` to `after`, and the tree after it.
fn author(
    tree: &Tree,
    path: &str,
    after: String,
    subject: &str,
    why: &str,
    trailers: &[(String, String)],
    src: &dyn BlobSource,
) -> Result<(String, Tree)> {
    let before = String::from_utf8(
        tree.bytes(path, src)?
            .with_context(|| format!("{path} missing"))?,
    )?;
    let fp = overlay::patch::FilePatch {
        old_path: Some(path.to_string()),
        new_path: Some(path.to_string()),
        old_mode: None,
        new_mode: None,
        hunks: overlay::diff::text_hunks(
            &Text::parse(&before),
            &Text::parse(&after),
            overlay::diff::CONTEXT,
        )?,
        patch_line: 0,
    };
    let mut next = tree.clone();
    let entry = overlay::tree::Entry {
        mode: overlay::tree::MODE_FILE,
        content: overlay::tree::Content::Bytes(after.into_bytes().into()),
    };
    next.entries.insert(path.to_string(), entry);
    let prelude = overlay::render::new_prelude(
        "Bench <bench@example.com>",
        "Thu, 1 Jan 2026 00:00:00 +0000",
        subject,
        why,
        trailers,
    );
    let layout = overlay::render::Layout {
        prelude: &prelude,
        signature: "bench",
        width: overlay::render::ABBREV,
    };
    let raw = overlay::render::patch(&layout, &[fp], tree, &next, src)?;
    Ok((raw, next))
}

/// A three-overlay series authored against `base` on the files a quantized-kernel fork touches,
/// each declaring a dependency, written as git format-patch files under `root`.
fn bench_series(root: &Path, base: &Tree, src: &dyn BlobSource) -> Result<()> {
    let plan = [
        (
            "mlx/backend/metal/kernels/quantized.h",
            "qmv_impl",
            "mlx/backend/metal/kernels/quantized.h::qdot",
        ),
        (
            "mlx/backend/metal/quantized.cpp",
            "qmm_nax",
            "mlx/backend/metal/quantized.cpp::get_qmv_batch_limit",
        ),
        (
            "mlx/backend/cpu/quantized.cpp",
            "_qmm_t",
            "mlx/backend/cpu/quantized.cpp::_qmm_t_simd",
        ),
    ];
    let dir = root.join("overlays/mlx");
    std::fs::create_dir_all(&dir)?;
    let mut series = String::new();
    let mut tree = base.clone();
    for (i, (path, symbol, dep)) in plan.iter().enumerate() {
        let before = String::from_utf8(
            tree.bytes(path, src)?
                .with_context(|| format!("{path} missing"))?,
        )?;
        let after = edit_in(&before, symbol, &format!("bench overlay {}", i + 1))?;
        let trailers = vec![
            ("Overlay-Kind".to_string(), "local-only".to_string()),
            ("Depends-On".to_string(), dep.to_string()),
        ];
        let subject = format!("Bench overlay {} in {symbol}", i + 1);
        let (raw, next) = author(
            &tree,
            path,
            after,
            &subject,
            "Why: drift-scan benchmark.",
            &trailers,
            src,
        )?;
        let name = format!("{:04}-bench-{symbol}.patch", i + 1);
        std::fs::write(dir.join(&name), raw)?;
        writeln!(series, "{name}")?;
        tree = next;
    }
    std::fs::write(dir.join("series"), series)?;
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn drift_scan(g: &Global, a: &DriftScanArgs) -> Result<ExitCode> {
    let ctx = Ctx::load(g, overlay::lock::Mode::Shared, "bench")?;
    let up = ctx.upstream().clone();
    let repo = ctx.open_upstream()?;
    let from = resolve_rev(&ctx, &repo, &a.from)?;
    let to = resolve_rev(&ctx, &repo, &a.to)?;
    let repo = ctx.open_upstream()?;
    // The series is authored at `from`, so it applies there by construction.
    let tmp = tempfile::tempdir()?;
    let root = tmp.path();
    let pins = format!(
        "[upstream.{}]\nurl = \"{}\"\nrev = \"{from}\"\noverlays = \"overlays/mlx\"\n",
        up.name, up.url
    );
    std::fs::write(root.join("pins.toml"), pins)?;
    bench_series(root, &repo.tree_at(from)?, &repo)?;
    let series = Series::load(&root.join("overlays/mlx"))?;
    Project::load(
        root,
        &overlay::manifest::Extras::Checked(&[&crate::settings::BuildSettingsExt]),
    )?;

    let mut times = Vec::new();
    let mut report = None;
    for _ in 0..a.repeat.max(1) {
        let t = Instant::now();
        let opts = overlay::drift::Options {
            upstream: &up.name,
            from,
            to,
            per_commit: true,
        };
        let r = overlay::drift::drift(repo.repo(), &repo, &series, &opts)?;
        times.push(t.elapsed());
        report = Some(r);
    }
    let ours = median(times);
    let report = report.expect("ran");

    // Baseline: what a script would do: per commit, extract the overlaid files, `git apply` the series.
    let (commits, naive_ok, naive) = naive_loop(repo.repo(), &series, from, to)?;
    let ratio = naive.as_secs_f64() / ours.as_secs_f64();
    let mut h = String::new();
    writeln!(
        h,
        "drift-scan: {} first-parent commits {}..{}, 3 overlays (quantized.h, metal/quantized.cpp, cpu/quantized.cpp)",
        commits,
        &from.to_string()[..9],
        &to.to_string()[..9]
    )?;
    writeln!(
        h,
        "  drift --per-commit (median of {}): {:>9.1} ms  ({} commits evaluated, classifies + blames + watches symbols)",
        a.repeat.max(1),
        ours.as_secs_f64() * 1e3,
        report.evaluated.unwrap_or(0)
    )?;
    writeln!(
        h,
        "  naive extract + git apply loop:  {:>9.1} ms  (textual only; series applied at {naive_ok} of {} commits)",
        naive.as_secs_f64() * 1e3,
        commits
    )?;
    writeln!(h, "  ratio: {ratio:.1}x")?;
    overlay_lines(&mut h, &report)?;
    let json = serde_json::json!({ "commits": commits, "evaluated": report.evaluated, "drift_ms": ours.as_secs_f64() * 1e3,
        "naive_ms": naive.as_secs_f64() * 1e3, "ratio": ratio, "naive_applied": naive_ok });
    if ctx.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::commands::versioned(json))?
        );
    } else {
        print!("{h}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The naive baseline: for every first-parent commit after `from` up to `to`, the overlaid files
/// extracted with `git show` and each overlay `git apply`d; the number of commits, at how many the
/// whole series applied, and the time it took.
fn naive_loop(
    repo: &git2::Repository,
    series: &Series,
    from: git2::Oid,
    to: git2::Oid,
) -> Result<(usize, usize, Duration)> {
    let git_dir = repo.path().to_path_buf();
    let sh = xshell::Shell::new()?;
    let paths = overlay::drift::relevant_paths(series);
    let mut walk = repo.revwalk()?;
    walk.push(to)?;
    walk.simplify_first_parent()?;
    let commits: Vec<git2::Oid> = walk
        .take_while(|c| c.as_ref().ok() != Some(&from))
        .collect::<Result<_, _>>()?;
    let t = Instant::now();
    let mut naive_ok = 0;
    for c in &commits {
        let work = tempfile::tempdir()?;
        for p in &paths {
            // A path the commit lacks is an empty file here, as before (the status is not read).
            let out = sh
                .cmd("git")
                .arg("--git-dir")
                .arg(&git_dir)
                .args(["show", &format!("{c}:{p}")])
                .ignore_status()
                .output()?;
            let dest = work.path().join(p);
            std::fs::create_dir_all(dest.parent().expect("parent"))?;
            std::fs::write(dest, out.stdout)?;
        }
        let mut ok = true;
        for ov in &series.overlays {
            // std, not xshell: stdin stays inherited and a failed start keeps its io::Error.
            let st = Command::new("git")
                .arg("apply")
                .arg(&ov.path)
                .current_dir(work.path())
                .stderr(std::process::Stdio::null())
                .status()?;
            ok &= st.success();
        }
        naive_ok += usize::from(ok);
    }
    Ok((commits.len(), naive_ok, t.elapsed()))
}

/// Each overlay's drift status and blame, its hunks' reasons and the watched symbols upstream
/// changed.
fn overlay_lines(h: &mut String, report: &overlay::drift::Report) -> Result<()> {
    for o in &report.overlays {
        writeln!(
            h,
            "  {:<13} {}{}",
            o.drift.status.as_str(),
            o.drift.name,
            o.blame
                .as_ref()
                .map(|b| format!("  since {} {}", &b.sha[..12], b.subject))
                .unwrap_or_default()
        )?;
        for hk in o.drift.hunks.iter().filter(|h| h.reason.is_some()) {
            writeln!(
                h,
                "      {} hunk #{}: {}",
                hk.file,
                hk.hunk,
                hk.reason.as_deref().unwrap_or("")
            )?;
        }
        for c in &o.drift.symbol_changes {
            writeln!(
                h,
                "      upstream changed {} ({})",
                c.symbol, c.watched_because
            )?;
        }
    }
    Ok(())
}

fn time_build(root: &Path, extra: &[&str]) -> Result<Duration> {
    let exe = std::env::current_exe()?;
    let t = Instant::now();
    // std, not xshell: stdin stays inherited and a failed start keeps its io::Error.
    let st = Command::new(exe)
        .arg("--root")
        .arg(root)
        .arg("build-mlx")
        .args(extra)
        .stdout(std::process::Stdio::null())
        .status()?;
    if !st.success() {
        bail!("build-mlx failed for {}", root.display());
    }
    Ok(t.elapsed())
}

fn build(g: &Global, a: &BuildBenchArgs) -> Result<ExitCode> {
    if a.bump {
        return crate::bench_build_bump::run(g, a);
    }
    let ctx = Ctx::load(g, overlay::lock::Mode::Shared, "bench")?;
    let root = ctx.project.root.clone();
    let mut rows: Vec<(String, Duration)> = Vec::new();
    if a.cold {
        rows.push(("cold (empty cache, no ccache)".into(), cold_build(&root)?));
    }
    time_build(&root, &[])?; // make sure the cache is warm and current
    rows.push(("no-op (nothing changed)".into(), time_build(&root, &[])?));
    // Touch one overlay: a copy of the project whose series gains one overlay on one file.
    let tmp = tempfile::tempdir()?;
    let copy = tmp.path();
    touched_copy(&ctx, copy)?;
    rows.push((
        "one overlay touches quantized.cpp".into(),
        time_build(copy, &[])?,
    ));
    // Put the workspace's own build back (the same translation unit recompiles, or ccache answers).
    rows.push((
        "back to the workspace series".into(),
        time_build(&root, &[])?,
    ));
    print_build_rows(ctx.json, &rows)?;
    Ok(ExitCode::SUCCESS)
}

/// A build of the project into an empty cache, ccache off.
fn cold_build(root: &Path) -> Result<Duration> {
    let cache = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let t = Instant::now();
    // std, not xshell: stdin stays inherited and a failed start keeps its io::Error.
    let st = Command::new(exe)
        .env("OVERLAY_CACHE_DIR", cache.path())
        .env("CCACHE_DISABLE", "1")
        .arg("--root")
        .arg(root)
        .arg("build-mlx")
        .stdout(std::process::Stdio::null())
        .status()?;
    if !st.success() {
        bail!("cold build failed");
    }
    Ok(t.elapsed())
}

/// A copy of the project in `copy` whose series gains one overlay that touches quantized.cpp with
/// fresh code (ccache ignores comments), so that translation unit really recompiles.
fn touched_copy(ctx: &Ctx, copy: &Path) -> Result<()> {
    let up = ctx.upstream().clone();
    let series = ctx.series()?;
    std::fs::copy(ctx.project.pins.path.clone(), copy.join("pins.toml"))?;
    let odir = copy.join(&up.overlays);
    std::fs::create_dir_all(&odir)?;
    for o in &series.overlays {
        std::fs::write(odir.join(&o.name), &o.raw)?;
    }
    std::fs::write(odir.join("series"), &series.raw)?;
    let repo = ctx.open_upstream()?;
    let applied = overlay::project::apply_series(&repo, &up.rev, &series)?;
    let path = "mlx/backend/cpu/quantized.cpp";
    let before = String::from_utf8(
        applied
            .result
            .bytes(path, &repo)?
            .context("quantized.cpp")?,
    )?;
    // Fresh code each run (ccache ignores comments), so the translation unit really recompiles.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos()
        % 1_000_000_007;
    let after = format!(
        "{before}namespace {{\n[[maybe_unused]] constexpr long bench_touch = {nonce};\n}}\n"
    );
    let (raw, _) = author(
        &applied.result,
        path,
        after,
        "Bench: touch one file",
        "Why: build benchmark.",
        &[("Overlay-Kind".into(), "local-only".into())],
        &repo,
    )?;
    std::fs::write(odir.join("9999-bench-touch.patch"), raw)?;
    std::fs::write(
        odir.join("series"),
        format!("{}9999-bench-touch.patch\n", series.raw),
    )?;
    Ok(())
}

/// Each case's time and its ratio to the no-op build, or `--json`'s runs.
fn print_build_rows(json: bool, rows: &[(String, Duration)]) -> Result<()> {
    let noop = rows
        .iter()
        .find(|r| r.0.starts_with("no-op"))
        .map(|r| r.1)
        .expect("measured");
    let mut h = String::from("build-mlx benchmark (times include starting the xtask binary)\n");
    for (what, d) in rows {
        writeln!(
            h,
            "  {what:<38} {:>10.1} ms  ({:.0}x no-op)",
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() / noop.as_secs_f64()
        )?;
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(w, d)| serde_json::json!({ "case": w, "seconds": d.as_secs_f64() }))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::commands::versioned(
                serde_json::json!({ "runs": v })
            ))?
        );
    } else {
        print!("{h}");
    }
    Ok(())
}
