//! Ninja: the build with its status parsed into [`Progress`], ccache shared across trees, and the
//! excerpt of its output that explains a failure.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Progress;
use crate::error::{Context, Result, user_err};
use crate::lock::in_build;

/// Parses Ninja's default status prefix `[n/m] description`.
fn parse_ninja_status(line: &str) -> Option<(u64, u64, &str)> {
    let rest = line.strip_prefix('[')?;
    let (nums, desc) = rest.split_once(']')?;
    let (n, m) = nums.split_once('/')?;
    let n = n.trim().parse().ok()?;
    let m = m.trim().parse().ok()?;
    Some((n, m, desc.trim_start()))
}

/// The part of Ninja's output that explains a failure: from the first `FAILED:` on, capped;
/// without one, the last lines.
fn failure_excerpt(lines: &[String]) -> String {
    const MAX: usize = 150;
    match lines.iter().position(|l| l.starts_with("FAILED:")) {
        Some(i) => {
            let end = (i + MAX).min(lines.len());
            let mut s = lines[i..end].join("\n");
            if end < lines.len() {
                let _ = write!(s, "\n... ({} more lines)", lines.len() - end);
            }
            s
        }
        None => lines[lines.len().saturating_sub(40)..].join("\n"),
    }
}

/// ccache settings that let a translation unit compiled in one build tree hit in another (a new
/// pin's tree, another cache root's): `base_dir` rewrites absolute paths under the cache's
/// `builds/` directory into paths relative to the compiler's working directory
/// (`<tree>/build`), so `/…/builds/<k1>/src/mlx/ops.cpp` and `/…/builds/<k2>/src/mlx/ops.cpp`
/// both reach the compiler, and the hash, as `../src/mlx/ops.cpp`. `hash_dir=false` leaves that
/// working directory out of the hash of compilations with debug info (Debug, RelWithDebInfo);
/// their objects may then name another tree as their compilation directory.
pub fn ccache_env(build: &Path) -> Vec<(&'static str, std::ffi::OsString)> {
    // `<cache>/builds/<dir_key>/build` -> `<cache>/builds`, the parent of every tree.
    let builds = build.parent().and_then(Path::parent).unwrap_or(build);
    vec![
        ("CCACHE_BASEDIR", builds.as_os_str().to_owned()),
        ("CCACHE_NOHASHDIR", "1".into()),
    ]
}

/// The Ninja CMake configured the tree with (`CMAKE_MAKE_PROGRAM`), else `ninja`.
fn ninja_program(build: &Path) -> PathBuf {
    std::fs::read_to_string(build.join("CMakeCache.txt"))
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("CMAKE_MAKE_PROGRAM:FILEPATH="))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("ninja"))
}

/// Builds `targets` (all when empty) in `build`, reporting Ninja's status to `progress`; a
/// failure is `"{what} build failed:"` and Ninja's excerpt.
pub fn ninja_build_targets(
    build: &Path,
    jobs: usize,
    targets: &[&str],
    lock: &std::fs::File,
    what: &str,
    progress: &mut dyn Progress,
) -> Result<()> {
    // Ninja itself rather than `cmake --build`, which only runs it (`ninja -j N` in the tree):
    // the process that owns the tree's state is then the one that gets SIGTERM if build-mlx
    // dies, and it stops its jobs (see `in_build`).
    let mut cmd = Command::new(ninja_program(build));
    cmd.arg("-C")
        .arg(build)
        .args(targets)
        .arg("-j")
        .arg(jobs.to_string())
        .envs(ccache_env(build))
        // Ninja's default status format, set explicitly because parsing depends on it.
        .env("NINJA_STATUS", "[%f/%t] ")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    in_build(&mut cmd, lock);
    let (status, other) = run_ninja(&mut cmd, progress)?;
    if !status.success() {
        return Err(user_err(format!(
            "{what} build failed:\n{}",
            failure_excerpt(&other)
        )));
    }
    Ok(())
}

/// Runs Ninja, its status lines to `progress`; returns how it exited and its other lines.
fn run_ninja(
    cmd: &mut Command,
    progress: &mut dyn Progress,
) -> Result<(std::process::ExitStatus, Vec<String>)> {
    let mut child = cmd.spawn().context("running ninja")?;
    let mut stderr = child.stderr.take().context("no stderr pipe")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let stdout = child.stdout.take().context("no stdout pipe")?;

    let mut other = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading build output")?;
        match parse_ninja_status(&line) {
            Some((n, m, desc)) => progress.ninja(n, m, desc),
            None => other.push(line),
        }
    }
    let status = child.wait().context("waiting for ninja")?;
    progress.ninja_done();
    let err_text = err_thread.join().unwrap_or_default();
    other.extend(err_text.lines().map(str::to_string));
    Ok((status, other))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninja_status_lines_parse() {
        assert_eq!(
            parse_ninja_status("[12/84] Building CXX object mlx/ops.cpp.o"),
            Some((12, 84, "Building CXX object mlx/ops.cpp.o"))
        );
        assert_eq!(
            parse_ninja_status("[84/84] Linking CXX static library libmlx.a").map(|s| s.0),
            Some(84)
        );
        assert_eq!(parse_ninja_status("FAILED: mlx/ops.cpp.o"), None);
        assert_eq!(parse_ninja_status("[a/b] x"), None);
        assert_eq!(parse_ninja_status("[3/] x"), None);
        assert_eq!(parse_ninja_status("ops.cpp:1:1: error: [x/y]"), None);
    }

    #[test]
    fn failure_excerpt_starts_at_failed() {
        let lines: Vec<String> = [
            "noise",
            "FAILED: a.o",
            "a.cpp:3: error: boom",
            "ninja: build stopped",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let e = failure_excerpt(&lines);
        assert!(e.starts_with("FAILED: a.o"));
        assert!(e.contains("error: boom"));
        assert!(!e.contains("noise"));
        let no_failed: Vec<String> = vec!["x".into(), "y".into()];
        assert_eq!(failure_excerpt(&no_failed), "x\ny");
    }

    #[test]
    fn ccache_bases_every_tree_at_builds() {
        let env = ccache_env(Path::new("/c/builds/k1/build"));
        assert_eq!(env[0], ("CCACHE_BASEDIR", "/c/builds".into()));
    }
}
