//! `cargo xtask fuzz`: runs the libFuzzer targets of `crates/overlay/fuzz` for a time budget each,
//! with the committed seeds plus a run-time corpus, and reports libFuzzer's final stats.
//!
//! The run-time corpus (`target/fuzz-corpus/<target>/`) also holds what must never be committed:
//! the upstream files the overlays touch, read from the upstream cache at the pinned commit.

use crate::{cargo, workspace_root};
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

use crate::Global;

pub const TARGETS: [&str; 6] = [
    "patch_parse",
    "series",
    "pins_toml",
    "symbols",
    "merge3",
    "apply",
];

/// The cargo-fuzz release the targets were written against.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Fast, pure-Rust builds: the address sanitizer finds nothing in safe code and doubles the time
/// per run (libgit2's C is not instrumented either); debug assertions catch overflows.
const BUILD_FLAGS: [&str; 3] = ["-s", "none", "--debug-assertions"];

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// Time budget per target, in seconds
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Run only this target (repeatable) [default: all]
    #[arg(long = "target", value_name = "NAME")]
    pub targets: Vec<String>,
    /// How many targets run at the same time
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
}

#[derive(Debug, Default, serde::Serialize)]
struct Outcome {
    target: String,
    executions: Option<u64>,
    execs_per_sec: Option<u64>,
    seconds: Option<u64>,
    corpus: Option<u64>,
    coverage: Option<u64>,
    features: Option<u64>,
    /// Path of the crashing input libFuzzer wrote, if it found one.
    crash: Option<String>,
    reproduce: Option<String>,
}

/// How cargo must be called for cargo-fuzz: `+nightly` when rustup has one, otherwise stable
/// with `RUSTC_BOOTSTRAP=1` (cargo-fuzz needs `-Z` flags).
struct Toolchain {
    nightly: bool,
}

impl Toolchain {
    fn detect() -> Toolchain {
        let nightly = Shell::new()
            .and_then(|sh| {
                cmd!(sh, "rustup toolchain list")
                    .quiet()
                    .ignore_status()
                    .output()
            })
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.starts_with("nightly"))
            })
            .unwrap_or(false);
        Toolchain { nightly }
    }

    fn cargo(&self) -> Command {
        // `+toolchain` works through rustup's cargo proxy only, so call `cargo`, not $CARGO.
        // std, not xshell: run_target reads the child's stderr line by line while it runs.
        let mut c = Command::new("cargo");
        if self.nightly {
            c.arg("+nightly");
        } else {
            c.env("RUSTC_BOOTSTRAP", "1");
        }
        c
    }

    fn describe(&self) -> &'static str {
        if self.nightly {
            "cargo +nightly"
        } else {
            "RUSTC_BOOTSTRAP=1 cargo"
        }
    }
}

fn ensure_cargo_fuzz() -> Result<()> {
    let ok = cargo()
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Ok(());
    }
    eprintln!(
        "cargo-fuzz is missing: cargo install cargo-fuzz --version {CARGO_FUZZ_VERSION} --locked"
    );
    let status = cargo()
        .args([
            "install",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
            "--locked",
        ])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    Ok(())
}

fn write_seed(dir: &Path, prefix: &str, bytes: &[u8]) -> Result<()> {
    // Named by content, so a second run adds nothing twice.
    let name = mlx_build::sha256_hex(bytes, 16);
    let path = dir.join(format!("{prefix}-{name}"));
    if !path.exists() {
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Fills `target/fuzz-corpus/<target>/` from the project: its overlays, series and pins.toml, and
/// (for `symbols` and `apply`) the upstream files the overlays touch at the pinned commit. An
/// upstream that cannot be opened (offline, no cache) is reported and skipped.
fn runtime_corpus(g: &Global, root: &Path, corpus: &Path) -> Result<()> {
    for t in TARGETS {
        std::fs::create_dir_all(corpus.join(t))?;
    }
    let project = g
        .extensions
        .with(|extras| overlay::project::Project::load(root, extras))?;
    let up = project.upstream(g.upstream.as_deref())?.clone();
    write_seed(
        &corpus.join("pins_toml"),
        "project",
        &std::fs::read(root.join(overlay::manifest::PINS_FILE))?,
    )?;
    let series = project.series(&up)?;
    write_seed(&corpus.join("series"), "project", series.raw.as_bytes())?;
    let mut touched = std::collections::BTreeSet::new();
    for ov in &series.overlays {
        write_seed(&corpus.join("patch_parse"), "project", ov.raw.as_bytes())?;
        for f in &ov.files {
            touched.extend(f.old_path.clone());
        }
    }
    let opened = project
        .open_upstream(&up, &overlay::upstream::default_cache_root(), &mut |_| {})
        .and_then(|repo| {
            let tree = repo.tree_at(repo.resolve(&up.rev)?)?;
            Ok((repo, tree))
        });
    let (repo, tree) = match opened {
        Ok(x) => x,
        Err(e) => {
            eprintln!("warning: no upstream files in the corpus ({e})");
            return Ok(());
        }
    };
    for path in &touched {
        let Some(bytes) = tree.bytes(path, &repo)? else {
            continue;
        };
        write_seed(&corpus.join("symbols"), "upstream", &bytes)?;
        // `apply` decodes its input as a structure; a file's head is enough to seed it.
        write_seed(
            &corpus.join("apply"),
            "upstream",
            &bytes[..bytes.len().min(512)],
        )?;
    }
    Ok(())
}

/// The number after `key` in a libFuzzer status line ("cov: 123", "corp: 45/6Kb").
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn parse_stats(out: &mut Outcome, line: &str) {
    if let Some(v) = line.strip_prefix("stat::number_of_executed_units:") {
        out.executions = v.trim().parse().ok();
    } else if let Some(v) = line.strip_prefix("stat::average_exec_per_sec:") {
        out.execs_per_sec = v.trim().parse().ok();
    } else if line.starts_with("Done ") && line.contains(" runs in ") {
        // "Done 10000 runs in 12 second(s)"
        out.seconds = field(line, " runs in ");
    } else if line.starts_with('#') && line.contains(" cov: ") {
        // The last status line has the final coverage and corpus size.
        out.coverage = field(line, " cov: ").or(out.coverage);
        out.features = field(line, " ft: ").or(out.features);
        out.corpus = field(line, " corp: ").or(out.corpus);
    } else if let Some(i) = line.find("Test unit written to ") {
        out.crash = Some(line[i + "Test unit written to ".len()..].trim().to_string());
    }
}

fn run_target(
    tc: &Toolchain,
    fuzz_dir: &Path,
    corpus: &Path,
    artifacts: &Path,
    target: &str,
    seconds: u64,
    log: &Path,
) -> Result<Outcome> {
    let live = corpus.join(target);
    let seeds = fuzz_dir.join("seeds").join(target);
    let mut cmd = tc.cargo();
    cmd.current_dir(fuzz_dir)
        .args(["fuzz", "run"])
        .args(BUILD_FLAGS)
        .arg(target)
        // libFuzzer adds new inputs to the first folder only: the run-time one.
        .arg(&live)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .arg(format!(
            "-artifact_prefix={}/{target}-",
            artifacts.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting cargo fuzz run {target}"))?;
    let mut out = Outcome {
        target: target.to_string(),
        ..Outcome::default()
    };
    let mut log_text = String::new();
    for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
        let line = line?;
        parse_stats(&mut out, &line);
        log_text.push_str(&line);
        log_text.push('\n');
    }
    let status = child.wait()?;
    std::fs::write(log, &log_text)?;
    if out.seconds.is_none() {
        out.seconds = Some(started.elapsed().as_secs());
    }
    if let Some(crash) = &out.crash {
        out.reproduce = Some(format!(
            "cd {} && {} fuzz run {} {target} {crash}",
            fuzz_dir.display(),
            tc.describe(),
            BUILD_FLAGS.join(" ")
        ));
    } else if !status.success() {
        bail!(
            "{target}: libFuzzer failed ({status}) without a crash file; see {}",
            log.display()
        );
    }
    Ok(out)
}

fn show(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

pub fn run(g: &Global, a: &FuzzArgs) -> Result<ExitCode> {
    let root = g.root.clone().unwrap_or_else(workspace_root);
    let fuzz_dir = workspace_root().join("crates/overlay/fuzz");
    let targets: Vec<String> = if a.targets.is_empty() {
        TARGETS.iter().map(|t| t.to_string()).collect()
    } else {
        a.targets.clone()
    };
    for t in &targets {
        if !TARGETS.contains(&t.as_str()) {
            bail!("unknown fuzz target {t:?} (known: {})", TARGETS.join(", "));
        }
    }
    ensure_cargo_fuzz()?;
    let tc = Toolchain::detect();
    let out_dir = root.join("target");
    let corpus = out_dir.join("fuzz-corpus");
    let artifacts = out_dir.join("fuzz-artifacts");
    let logs = out_dir.join("fuzz-logs");
    for d in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(d)?;
    }
    runtime_corpus(g, &root, &corpus)?;

    // Build once (all targets: `cargo fuzz build` takes at most one name), so that the budget is
    // spent fuzzing, not compiling.
    eprintln!(
        "building fuzz targets: {} fuzz build {}",
        tc.describe(),
        BUILD_FLAGS.join(" ")
    );
    let status = tc
        .cargo()
        .current_dir(&fuzz_dir)
        .args(["fuzz", "build"])
        .args(BUILD_FLAGS)
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }

    let dirs = Dirs {
        fuzz: &fuzz_dir,
        corpus: &corpus,
        artifacts: &artifacts,
        logs: &logs,
    };
    let results = fuzz_all(&tc, &dirs, &targets, a)?;
    let crashed = results.iter().any(|r| r.crash.is_some());
    if g.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::commands::versioned(serde_json::to_value(
                &results
            )?))?
        );
    } else {
        print_report(&results);
    }
    Ok(if crashed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The folders a fuzz run uses: the fuzz crate, the corpus, crash artifacts and logs.
struct Dirs<'a> {
    fuzz: &'a Path,
    corpus: &'a Path,
    artifacts: &'a Path,
    logs: &'a Path,
}

/// Every target fuzzed for `a.seconds`, `a.jobs` at a time; their outcomes in order.
fn fuzz_all(tc: &Toolchain, dirs: &Dirs, targets: &[String], a: &FuzzArgs) -> Result<Vec<Outcome>> {
    let jobs = a.jobs.max(1);
    let mut results: Vec<Outcome> = Vec::new();
    for chunk in targets.chunks(jobs) {
        let chunk_results: Vec<Result<Outcome>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|t| {
                    eprintln!("fuzzing {t} for {} s", a.seconds);
                    let (fuzz_dir, corpus, artifacts) = (dirs.fuzz, dirs.corpus, dirs.artifacts);
                    let log = dirs.logs.join(format!("{t}.log"));
                    s.spawn(move || run_target(tc, fuzz_dir, corpus, artifacts, t, a.seconds, &log))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("fuzz thread panicked"))
                .collect()
        });
        for r in chunk_results {
            results.push(r?);
        }
    }
    Ok(results)
}

/// The human report: a padded table on a terminal, `key=value` records otherwise; then how to
/// reproduce each crash.
fn print_report(results: &[Outcome]) {
    let header = [
        "target",
        "result",
        "executions",
        "exec/s",
        "seconds",
        "corpus",
        "coverage",
    ];
    let rows: Vec<[String; 7]> = results
        .iter()
        .map(|r| {
            [
                r.target.clone(),
                if r.crash.is_some() { "CRASH" } else { "ok" }.into(),
                show(r.executions),
                show(r.execs_per_sec),
                show(r.seconds),
                show(r.corpus),
                show(r.coverage),
            ]
        })
        .collect();
    if std::io::stdout().is_terminal() {
        print_table(&header, &rows);
    } else {
        // Plain, one record per line, for logs and CI.
        for row in &rows {
            let fields: Vec<String> = header
                .iter()
                .zip(row)
                .map(|(h, c)| format!("{h}={c}"))
                .collect();
            println!("{}", fields.join(" "));
        }
    }
    for r in results {
        if let (Some(c), Some(rep)) = (&r.crash, &r.reproduce) {
            println!("{}: crash input {c}\n  reproduce: {rep}", r.target);
        }
    }
}

/// The rows under the header, each column padded to its widest cell.
fn print_table(header: &[&str; 7], rows: &[[String; 7]]) {
    let mut w = header.map(str::len);
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header);
    for row in rows {
        line(&row.each_ref().map(String::as_str));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_final_stats() {
        let mut o = Outcome::default();
        for l in [
            "#2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb",
            "#1000000\tDONE   cov: 812 ft: 2954 corp: 393/19Kb lim: 4096 exec/s: 14326 rss: 28Mb",
            "Done 1000000 runs in 70 second(s)",
            "stat::number_of_executed_units: 1000000",
            "stat::average_exec_per_sec:     14326",
        ] {
            parse_stats(&mut o, l);
        }
        assert_eq!(
            (
                o.executions,
                o.execs_per_sec,
                o.seconds,
                o.corpus,
                o.coverage
            ),
            (Some(1_000_000), Some(14326), Some(70), Some(393), Some(812))
        );
        assert_eq!(o.crash, None);
        parse_stats(
            &mut o,
            "artifact_prefix='a/'; Test unit written to a/apply-crash-1e8d",
        );
        assert_eq!(o.crash.as_deref(), Some("a/apply-crash-1e8d"));
    }
}
