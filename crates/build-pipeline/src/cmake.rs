//! CMake: the configure step (rerun only when its definitions change), the install step, the
//! compiler launcher and identity.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::Progress;
use crate::error::{Context, Result, user_err};
use crate::lock::in_build;

/// Configures `build` from `src` with Ninja and `-D` each of `defines`, unless the tree was
/// configured with exactly these (CMake reruns itself from Ninja when its lists change).
pub fn configure(
    src: &Path,
    build: &Path,
    defines: &[String],
    lock: &std::fs::File,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut cmd = Command::new("cmake");
    cmd.arg("-S")
        .arg(src)
        .arg("-B")
        .arg(build)
        .args(["-G", "Ninja"]);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    // Reconfigure only when the command line changed: CMake re-runs itself from Ninja when
    // the CMakeLists change, so an unchanged command line needs nothing from us.
    let args_text = defines.join("\n");
    let args_file = build.join(".build-mlx-configure");
    let configured = build.join("build.ninja").is_file()
        && build.join("CMakeCache.txt").is_file()
        && std::fs::read_to_string(&args_file).ok().as_deref() == Some(&args_text);
    if configured {
        return Ok(());
    }
    progress.message(&format!("configuring: {}", render_command(&cmd)));
    in_build(&mut cmd, lock);
    let out = cmd.output().context("running cmake")?;
    if !out.status.success() {
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        // A failed configure leaves a cache that may be half-right: force the next run to redo it.
        let _ = std::fs::remove_file(&args_file);
        return Err(user_err(format!(
            "cmake configure failed:\n{}",
            tail_lines(&log, 60)
        )));
    }
    std::fs::write(&args_file, args_text)?;
    Ok(())
}

/// `cmd` as a line a POSIX shell would run as it is (shlex quotes each word that needs it).
fn render_command(cmd: &Command) -> String {
    let words: Vec<_> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|w| w.to_string_lossy())
        .collect();
    // A NUL cannot be in an argument (Command refuses it), so quoting cannot fail.
    shlex::try_join(words.iter().map(|w| w.as_ref())).unwrap_or_else(|_| words.join(" "))
}

/// The last `n` lines of `s`.
pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `cmake --install build`, as a process of the build that `lock` guards.
pub fn install(build: &Path, lock: &std::fs::File) -> Result<()> {
    let mut cmd = Command::new("cmake");
    cmd.arg("--install").arg(build);
    in_build(&mut cmd, lock);
    let out = cmd.output().context("running cmake --install")?;
    if !out.status.success() {
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(user_err(format!(
            "cmake --install failed:\n{}",
            tail_lines(&log, 40)
        )));
    }
    Ok(())
}

/// Compiler identity for a dir key: the `CXX`/`CC` choice and `--version` output.
pub fn compiler_identity() -> Result<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx).arg("--version").output().map_err(|e| {
        user_err(format!(
            "C++ compiler `{cxx}` not runnable ({e}); install one or set CXX"
        ))
    })?;
    let mut id = format!(
        "CXX={cxx}\nCC={}\n",
        std::env::var("CC").unwrap_or_default()
    );
    id.push_str(String::from_utf8_lossy(&out.stdout).trim());
    Ok(id)
}

/// Compiler launcher definitions for `languages` (`C`, `CXX`, `CUDA`): sccache wins when
/// `RUSTC_WRAPPER`/`SCCACHE_*` shows the user set it up (remote cache for teams), else ccache,
/// else sccache, else none.
pub fn launcher_defines(languages: &[&str]) -> Vec<String> {
    let want_sccache = std::env::vars()
        .any(|(k, v)| k.starts_with("SCCACHE_") || (k == "RUSTC_WRAPPER" && v.contains("sccache")));
    let launcher = if want_sccache && runs("sccache", &["--version"]) {
        Some("sccache")
    } else if runs("ccache", &["--version"]) {
        Some("ccache")
    } else if runs("sccache", &["--version"]) {
        Some("sccache")
    } else {
        None
    };
    let Some(l) = launcher else { return Vec::new() };
    if l == "sccache" {
        // Start sccache's server from here, where the build lock is close-on-exec: a server
        // started by the first compile would inherit the lock (see `in_build`) and hold it
        // until it idles out. An already running server makes this fail, which is fine.
        runs("sccache", &["--start-server"]);
    }
    languages
        .iter()
        .map(|lang| format!("CMAKE_{lang}_COMPILER_LAUNCHER={l}"))
        .collect()
}

/// Whether `program args` runs and succeeds (its output dropped).
pub fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_configure_command_survives_a_shell() {
        let mut cmd = Command::new("cmake");
        cmd.args(["-S", "/a b/src", "-DX=it's", "-DY=$HOME", "-GNinja"]);
        let shown = render_command(&cmd);
        // The hand-written quoting wrapped `it's` in '…' as it was: a shell read another word.
        assert_eq!(
            shlex::split(&shown).expect("a shell word list"),
            [
                "cmake",
                "-S",
                "/a b/src",
                "-DX=it's",
                "-DY=$HOME",
                "-GNinja"
            ],
            "{shown}"
        );
    }

    #[test]
    fn launchers_are_one_per_language() {
        for d in launcher_defines(&["C", "CUDA"]) {
            assert!(
                d.starts_with("CMAKE_C_") || d.starts_with("CMAKE_CUDA_"),
                "{d}"
            );
        }
    }
}
