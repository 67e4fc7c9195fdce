//! `build-mlx` on small CMake projects standing in for MLX (real cmake, Ninja, compilers and
//! ccache): a pin bump reuses the compiler cache for unchanged translation units, and a build
//! killed mid-way never has a second Ninja running in its tree.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixture::Fixture;

const CMAKE_HEAD: &str = "cmake_minimum_required(VERSION 3.25)\nproject(mlx CXX)\n";
const CMAKE_INSTALL: &str = "install(TARGETS mlx EXPORT MLXTargets ARCHIVE DESTINATION lib)\n\
     install(FILES mlx.h DESTINATION include/mlx)\n\
     install(EXPORT MLXTargets FILE MLXTargets.cmake DESTINATION share/cmake/MLX)\n";

/// ccache's counters for `dir` (`ccache --print-stats`), by name.
fn ccache_stats(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    let out = Command::new("ccache")
        .arg("--print-stats")
        .env("CCACHE_DIR", dir)
        .output()
        .expect("ccache is a build-mlx dependency (apt-get install ccache)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn hits(s: &std::collections::BTreeMap<String, u64>) -> u64 {
    s.get("direct_cache_hit").copied().unwrap_or(0)
        + s.get("preprocessed_cache_hit").copied().unwrap_or(0)
}

fn build_dirs(f: &Fixture) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(f.cache.join("builds"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("build").is_dir())
        .collect();
    v.sort();
    v
}

/// Issue 13, "Build cache across pins": each pin gets its own build tree; a bump that changes one
/// of two translation units must compile just that one, the other coming from ccache although
/// its absolute path is different (before: 0 hits, both compiled again).
#[test]
fn a_bump_reuses_ccache_for_unchanged_translation_units() {
    let cmake = format!("{CMAKE_HEAD}add_library(mlx STATIC a.cpp b.cpp)\n{CMAKE_INSTALL}");
    let f = Fixture::new(&[
        ("CMakeLists.txt", &cmake),
        ("mlx.h", "int mlx_a();\nint mlx_b();\n"),
        ("a.cpp", "#include \"mlx.h\"\nint mlx_a() { return 1; }\n"),
        ("b.cpp", "#include \"mlx.h\"\nint mlx_b() { return 2; }\n"),
    ]);
    let next = f.commit_upstream(
        &[("b.cpp", "#include \"mlx.h\"\nint mlx_b() { return 3; }\n")],
        "change b only",
    );
    let ccache = f.t().join("ccache");
    let env = [("CCACHE_DIR", ccache.to_str().unwrap())];
    f.xtask_env(&["build-mlx"], &env).ok();
    let cold = ccache_stats(&ccache);
    assert_eq!(
        (hits(&cold), cold["cache_miss"]),
        (0, 2),
        "a cold build compiles both: {cold:?}"
    );
    f.xtask(&["bump-pin", &next]).ok();
    let z = Command::new("ccache")
        .arg("-z")
        .env("CCACHE_DIR", &ccache)
        .output()
        .unwrap();
    assert!(z.status.success());
    let out = f.xtask_env(&["build-mlx", "--json"], &env).ok();
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["status"], "built", "{}", out.stdout);
    assert_eq!(build_dirs(&f).len(), 2, "one build tree per pin");
    let bump = ccache_stats(&ccache);
    assert_eq!(
        (hits(&bump), bump["cache_miss"]),
        (1, 1),
        "after the bump a.cpp (unchanged) hits and b.cpp compiles: {bump:?}"
    );
}

/// A project whose build has two slow generated sources, logged to `$SLOW_STEP_LOG`:
/// - `stubborn.sh` ignores SIGINT/SIGTERM/SIGHUP and takes 4 s (a job that takes a while to
///   stop); one that finds another already running in the tree logs `overlap`;
/// - `obedient.sh` takes `$OBEDIENT_SECONDS` and dies on a signal like a compiler does.
fn slow_fixture() -> Fixture {
    let step = |name: &str| {
        format!(
            "add_custom_command(OUTPUT ${{CMAKE_BINARY_DIR}}/{name}.cpp\n\
             \x20 COMMAND sh ${{CMAKE_SOURCE_DIR}}/{name}.sh ${{CMAKE_BINARY_DIR}}/{name}.cpp\n\
             \x20 DEPENDS ${{CMAKE_SOURCE_DIR}}/{name}.sh)\n"
        )
    };
    let cmake = format!(
        "{CMAKE_HEAD}{}{}add_library(mlx STATIC mlx.cpp ${{CMAKE_BINARY_DIR}}/stubborn.cpp \
         ${{CMAKE_BINARY_DIR}}/obedient.cpp)\n{CMAKE_INSTALL}",
        step("stubborn"),
        step("obedient")
    );
    Fixture::new(&[
        ("CMakeLists.txt", &cmake),
        ("mlx.h", "int mlx_answer();\nint mlx_s();\nint mlx_o();\n"),
        (
            "mlx.cpp",
            "#include \"mlx.h\"\nint mlx_answer() { return mlx_s() * mlx_o(); }\n",
        ),
        (
            "stubborn.sh",
            "trap '' INT TERM HUP\n\
             log=\"$SLOW_STEP_LOG\"\n\
             mkdir \"$log.busy\" 2>/dev/null || echo overlap >> \"$log\"\n\
             echo \"start stubborn $$\" >> \"$log\"\n\
             sleep 4\n\
             echo 'int mlx_s() { return 7; }' > \"$1\"\n\
             echo \"end stubborn $$\" >> \"$log\"\n\
             rmdir \"$log.busy\" 2>/dev/null\n\
             exit 0\n",
        ),
        (
            "obedient.sh",
            "echo \"start obedient $$\" >> \"$SLOW_STEP_LOG\"\n\
             sleep \"${OBEDIENT_SECONDS:-0}\"\n\
             echo 'int mlx_o() { return 6; }' > \"$1\"\n\
             echo \"end obedient $$\" >> \"$SLOW_STEP_LOG\"\n",
        ),
    ])
}

/// Issue 13, "Interrupted builds": build-mlx killed with SIGKILL mid-build left Ninja and its
/// jobs running, and the next build-mlx took the lock at once and ran a second Ninja in the same
/// tree. Now the build's processes hold the lock: the rerun waits until the interrupted build's
/// last process has exited, then builds, and never overlaps it. On Linux the orphaned Ninja is
/// also told to stop (SIGTERM when build-mlx dies) and interrupts its jobs.
#[test]
fn a_killed_build_mlx_keeps_its_tree_locked_until_its_processes_exit() {
    let f = slow_fixture();
    let log = f.t().join("steps.log");
    let log_s = log.to_str().unwrap();
    let mut first = f
        .command(&["build-mlx", "--jobs", "2"])
        .env("SLOW_STEP_LOG", log_s)
        .env("OBEDIENT_SECONDS", "60")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&log)
        .is_ok_and(|l| l.contains("start stubborn") && l.contains("start obedient"))
    {
        assert!(Instant::now() < deadline, "the slow steps never started");
        assert!(first.try_wait().unwrap().is_none(), "build-mlx ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().unwrap(); // SIGKILL: no cleanup in build-mlx
    first.wait().unwrap();

    let out = f
        .xtask_env(&["build-mlx", "--json"], &[("SLOW_STEP_LOG", log_s)])
        .ok();
    let steps = std::fs::read_to_string(&log).unwrap();
    assert!(
        !steps.contains("overlap"),
        "two builds ran in one tree:\n{steps}\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("waiting for another build-mlx"),
        "the rerun must wait for the interrupted build's processes:\n{}",
        out.stderr
    );
    let lines: Vec<&str> = steps.lines().collect();
    let pid_of = |prefix: &str| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(str::to_string)
            .collect()
    };
    let (s_started, s_ended) = (pid_of("start stubborn "), pid_of("end stubborn "));
    let (o_started, o_ended) = (pid_of("start obedient "), pid_of("end obedient "));
    // The interrupted build's stubborn step ran to its end before any step of the rerun began.
    let old = [&s_started[0], &o_started[0]];
    let old_end = lines
        .iter()
        .position(|l| *l == format!("end stubborn {}", s_started[0]))
        .unwrap_or_else(|| panic!("the old stubborn step never ended:\n{steps}"));
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("start") && !old.iter().any(|p| l.ends_with(&format!(" {p}"))) {
            assert!(
                i > old_end,
                "the rerun started a step before the old one ended:\n{steps}"
            );
        }
    }
    // On Linux the orphaned Ninja got SIGTERM when build-mlx died: it interrupted the obedient
    // step (which never ended) and did not finish the build, so the rerun ran both steps again.
    #[cfg(target_os = "linux")]
    {
        assert!(
            !o_ended.contains(&o_started[0]),
            "the old obedient step was not stopped:\n{steps}"
        );
        assert_eq!(
            (
                s_started.len(),
                s_ended.len(),
                o_started.len(),
                o_ended.len()
            ),
            (2, 2, 2, 1),
            "{steps}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["status"], "built", "{}", out.stdout);
    // Reports are scrubbed of the temp dir: put it back.
    let lib = v["library"]
        .as_str()
        .unwrap()
        .replace("$TMP", f.t().to_str().unwrap());
    let nm = Command::new("nm").arg(&lib).output().unwrap();
    let symbols = String::from_utf8_lossy(&nm.stdout);
    assert!(
        symbols.contains("mlx_s") && symbols.contains("mlx_o"),
        "both generated sources are in {lib}:\n{symbols}"
    );
}
